/*
 * creds.h — who is asking: the credentials a call is checked against, and
 * the kernel's rules built on them (generic_permission, owner-or-capable,
 * group membership, the set-group-ID stripping rules).
 *
 * A call uses its thread's credentials when the thread set some
 * (kura_set_thread_creds), else the mount's (kura_set_creds), else the
 * process's ids as they were when the engine first needed them.
 */
#ifndef KURA_CREDS_H
#define KURA_CREDS_H

#include <sys/types.h>
#include "fs.h"

const struct kura_creds *creds_of(const struct kura_fs *fs);
int creds_capable(const struct kura_creds *c, uint64_t cap);
int creds_in_group(const struct kura_creds *c, gid_t gid);
/* in_group_or_capable(): a member of gid, or CAP_FSETID. */
int creds_group_or_fsetid(const struct kura_creds *c, gid_t gid);
/* inode_owner_or_capable(): the fsuid owns ip, or CAP_FOWNER. */
int creds_owner(const struct kura_creds *c, const struct kura_inode *ip);

/* The host's fs.protected_hardlinks, which the engine follows as Linux. */
int creds_protected_hardlinks(void);

/* mask: R_OK|W_OK|X_OK.  0 or -EACCES, as Linux's generic_permission. */
/* mode less the caller's umask, unless the directory dip has a default
 * ACL, which then decides (acl.c); symlinks keep 0777. */
mode_t creds_umask(const struct kura_fs *fs, const struct kura_inode *dip, mode_t mode);
int perm_check(const struct kura_fs *fs, const struct kura_inode *ip, int mask);

/* For access() without AT_EACCESS: this thread's calls use the real ids
 * (and root's permitted capabilities, or none) until creds_restore. */
const struct kura_creds *creds_use_real(const struct kura_fs *fs, struct kura_creds *tmp);
void creds_restore(const struct kura_creds *saved);

/* The mode a new inode of `mode` gets in directory dip, and its group:
 * Linux's inode_init_owner and mode_strip_sgid. */
mode_t creds_new_mode(const struct kura_fs *fs, const struct kura_inode *dip, mode_t mode, gid_t *gid);

#endif
