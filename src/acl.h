/*
 * acl.h — POSIX ACLs (acl.c), stored as extended attributes (xattr.c).
 */
#ifndef KURA_ACL_H
#define KURA_ACL_H

#include <stdint.h>
#include <sys/types.h>
#include "fs.h"

#define XATTR_ACL_ACCESS "system.posix_acl_access"
#define XATTR_ACL_DEFAULT "system.posix_acl_default"

/* -EINVAL unless value is a valid ACL; *minimal: the mode can say it all;
 * *mode: the permission bits it gives.  An empty default ACL is valid. */
int acl_check_value(const void *value, size_t size, int is_default, int *minimal, mode_t *mode);
/* For an inode with INODE_ACL: 0 if its ACL grants want (R_OK|W_OK|X_OK),
 * -EACCES if it refuses, 1 if it has none after all (the mode decides). */
int acl_permission(const struct kura_fs *fs, uint64_t ino, const struct kura_inode *ip, int want);
/* In a transaction, after a chmod: the ACL's classes follow the mode. */
int acl_chmod(struct kura_fs *fs, uint64_t ino, mode_t mode);
/* In a transaction, for a new inode in dir: dir's default ACL, if any,
 * becomes its ACL (and a directory's default), narrowing *mode, which is
 * updated in the inode too.  Returns 0 when dir has none. */
int acl_inherit(struct kura_fs *fs, uint64_t dir, uint64_t ino, mode_t *mode);

#endif
