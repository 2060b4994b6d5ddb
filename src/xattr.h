/*
 * xattr.h — what the rest of the engine needs of extended attributes.
 */
#ifndef KURA_XATTR_H
#define KURA_XATTR_H

#include <stdint.h>
#include <sys/types.h>
#include "fs.h"

/* ino's attribute name, its value copied into value (size bytes at most):
 * the length, -ENODATA, -ERANGE, or -EUCLEAN for a damaged blob.  No
 * permission check: for the engine's own use (acl.c). */
ssize_t xattr_get_raw(const struct kura_fs *fs, uint64_t ino, const char *name, void *value, size_t size);
/* In a transaction: sets ino's attribute name, with no permission check. */
int xattr_set_raw(struct kura_fs *fs, uint64_t ino, const char *name, const void *value, size_t size);

/* In a transaction: frees ino's attributes (before ino itself is freed). */
void xattr_drop(struct kura_fs *fs, uint64_t ino);

/* Frees an inode that has no names and no opens, with its attributes. */
static inline void inode_dispose(struct kura_fs *fs, uint64_t ino)
{
	xattr_drop(fs, ino);
	inode_free(fs, ino);
}

#endif
