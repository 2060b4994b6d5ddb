/*
 * xattr.h — what the rest of the engine needs of extended attributes.
 */
#ifndef KURA_XATTR_H
#define KURA_XATTR_H

#include <stdint.h>
#include "fs.h"

/* In a transaction: frees ino's attributes (before ino itself is freed). */
void xattr_drop(struct kura_fs *fs, uint64_t ino);

/* Frees an inode that has no names and no opens, with its attributes. */
static inline void inode_dispose(struct kura_fs *fs, uint64_t ino)
{
	xattr_drop(fs, ino);
	inode_free(fs, ino);
}

#endif
