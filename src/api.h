/*
 * api.h — what the parts of the public API (names.c, attrs.c, files.c,
 * fileio.c) share.
 */
#ifndef KURA_API_H
#define KURA_API_H

#include <stdint.h>
#include <sys/types.h>
#include "fs.h"

#define KURA_LINK_MAX 65000u

/* Drops one link (or the directory's only one); frees the inode or, if it is
 * open somewhere, parks it on the orphan list until the last close. */
void drop_link(struct kura_fs *fs, uint64_t ino);
/* Creates an inode of `mode` named by w (a WALK_PARENT result, name absent). */
struct walk;
int create_at(struct kura_fs *fs, const struct walk *w, mode_t mode, uint64_t *ino);

/* Linux's file_remove_privs, before a write or truncation of ip: the
 * set-user-ID bit, and a meaningful set-group-ID bit, go unless the
 * caller has CAP_FSETID. */
void kill_privs(struct kura_fs *fs, uint64_t ino, const struct kura_inode *ip);
/* Truncation of a regular file, its privileges killed first. */
int truncate_ino(struct kura_fs *fs, uint64_t ino, uint64_t length);

int attr_by_ino(struct kura_fs *fs, uint64_t ino, int what, mode_t mode, uid_t uid, gid_t gid,
		const struct timespec *times);

/* The bodies of unlink/rmdir, link and rename, for a caller with a
 * transaction open (fs_begin): several of them in one commit (groupset.c).
 * by_ino: link that inode (linkat's AT_EMPTY_PATH) instead of oldpath's. */
int remove_name(struct kura_fs *fs, uint64_t start, const char *path, int want_dir);
int do_link(struct kura_fs *fs, uint64_t ostart, const char *oldpath, uint64_t nstart, const char *newpath,
	    int follow_old, uint64_t by_ino);
int do_rename(struct kura_fs *fs, uint64_t ostart, const char *oldpath, uint64_t nstart, const char *newpath,
	      unsigned flags);

/* The directory a *at call starts from: 0 (the root) for KURA_AT_ROOT or an
 * absolute path, else the inode of dirfd, which must be a directory. */
int fd_dir_ino(struct kura_fs *fs, int dirfd, const char *path, uint64_t *start);

#endif
