/*
 * attrs.c — the attributes of named inodes: stat and access by path;
 * chmod, chown, utimens and truncate by path or inode number (the
 * descriptor calls of fileio.c use the latter), with Linux's permission
 * rules; and the privileges a write kills.  Each call is one transaction
 * (fs_begin/fs_end) or one optimistic read (FS_READ).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include "acl.h"
#include "api.h"
#include "creds.h"
#include "inode.h"
#include "path.h"

int kura_fstatat_gen(kura_fs *fs, int dirfd, const char *path, struct stat *st, uint32_t *gen, int flags)
{
	if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH | AT_NO_AUTOMOUNT))
		return -EINVAL;
	if (path && !*path && (flags & AT_EMPTY_PATH)) {
		if (dirfd == KURA_AT_ROOT)
			return kura_fstatat_gen(fs, dirfd, "/", st, gen, 0);
		if (gen)
			return -EINVAL; /* not needed yet: a descriptor holds its inode anyway */
		return kura_fstat(fs, dirfd, st);
	}
	uint64_t start;
	int ret = fd_dir_ino(fs, dirfd, path, &start);
	if (ret)
		return ret;
	FS_READ(fs, ret, {
		struct walk w;
		ret = path_walk(fs, start, path, flags & AT_SYMLINK_NOFOLLOW ? 0 : WALK_FOLLOW, &w);
		if (!ret) {
			const struct kura_inode *ip = ino_get(fs, w.ino);
			inode_to_stat(fs, w.ino, ip, st);
			if (gen)
				*gen = ip->generation;
		}
	});
	return ret;
}

int kura_fstatat(kura_fs *fs, int dirfd, const char *path, struct stat *st, int flags)
{
	return kura_fstatat_gen(fs, dirfd, path, st, NULL, flags);
}

int kura_stat(kura_fs *fs, const char *path, struct stat *st)
{
	return kura_fstatat(fs, KURA_AT_ROOT, path, st, 0);
}

int kura_lstat(kura_fs *fs, const char *path, struct stat *st)
{
	return kura_fstatat(fs, KURA_AT_ROOT, path, st, AT_SYMLINK_NOFOLLOW);
}

int kura_faccessat(kura_fs *fs, int dirfd, const char *path, int mode, int flags)
{
	if (mode & ~(R_OK | W_OK | X_OK) || flags & ~(AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH))
		return -EINVAL;
	uint64_t start, by_ino = 0;
	int ret;
	if (path && !*path && (flags & AT_EMPTY_PATH) && dirfd != KURA_AT_ROOT) {
		int64_t ino = kura_fd_ino(fs, dirfd);
		if (ino < 0)
			return (int)ino;
		by_ino = (uint64_t)ino;
	} else if ((ret = fd_dir_ino(fs, dirfd, path, &start))) {
		return ret;
	}
	if (path && !*path && (flags & AT_EMPTY_PATH))
		path = "/"; /* KURA_AT_ROOT: the root itself */
	/* Like Linux, access() asks with the real ids, the whole walk long. */
	struct kura_creds real;
	const struct kura_creds *saved = flags & AT_EACCESS ? NULL : creds_use_real(fs, &real);
	FS_READ(fs, ret, {
		struct walk w = { .ino = by_ino };
		ret = by_ino ? 0 : path_walk(fs, start, path, flags & AT_SYMLINK_NOFOLLOW ? 0 : WALK_FOLLOW, &w);
		const struct kura_inode *ip = ret ? NULL : ino_get(fs, w.ino);
		if (!ret && !ip)
			ret = -EBADF;
		if (!ret && mode)
			ret = perm_check(fs, ip, mode);
		if (!ret && (mode & W_OK) && fs->read_only)
			ret = -EROFS;
	});
	if (!(flags & AT_EACCESS))
		creds_restore(saved);
	return ret;
}

int kura_access(kura_fs *fs, const char *path, int mode)
{
	return kura_faccessat(fs, KURA_AT_ROOT, path, mode, 0);
}

/* ---- attributes ---------------------------------------------------------- */

/* chmod, as Linux's notify_change and setattr_prepare. */
static int set_mode(struct kura_fs *fs, uint64_t ino, mode_t mode)
{
	const struct kura_inode *ip = ino_get(fs, ino);
	const struct kura_creds *c = creds_of(fs);
	if (S_ISLNK(ip->mode))
		return -EOPNOTSUPP; /* symlinks have no mode of their own to change */
	if (!creds_owner(c, ip))
		return -EPERM;
	mode &= 07777;
	if ((mode & S_ISGID) && !creds_group_or_fsetid(c, ip->gid))
		mode &= ~(mode_t)S_ISGID; /* silently, as Linux */
	INO_SET(fs, ino, mode, (ip->mode & S_IFMT) | mode);
	inode_touch(fs, ino, TOUCH_C);
	int err = acl_chmod(fs, ino, mode); /* an ACL's classes follow the mode */
	return err ? err : fs->tx.err;
}

/* chown, as Linux's chown_common, notify_change and setattr_prepare: the
 * owner may give a file to a group of theirs, CAP_CHOWN anything; a
 * non-directory loses its set-user-ID bit, and its set-group-ID bit where
 * it means something (group-executable) or the caller is not of the
 * group, which is a change of mode only the owner may make. */
static int set_owner(struct kura_fs *fs, uint64_t ino, uid_t uid, gid_t gid)
{
	const struct kura_inode *ip = ino_get(fs, ino);
	const struct kura_creds *c = creds_of(fs);
	int chown_cap = creds_capable(c, KURA_CAP_CHOWN), own = ip->uid == c->fsuid;
	mode_t mode = ip->mode;
	if (!S_ISDIR(mode)) {
		mode &= ~(mode_t)S_ISUID;
		if ((mode & S_ISGID) && ((mode & S_IXGRP) || !creds_group_or_fsetid(c, ip->gid)))
			mode &= ~(mode_t)S_ISGID;
	}
	if (uid != (uid_t)-1 && !((own && uid == ip->uid) || chown_cap))
		return -EPERM;
	if (gid != (gid_t)-1 && !((own && (gid == ip->gid || creds_in_group(c, gid))) || chown_cap))
		return -EPERM;
	if (mode != ip->mode) {
		if (!creds_owner(c, ip))
			return -EPERM;
		if (!creds_group_or_fsetid(c, gid != (gid_t)-1 ? gid : ip->gid))
			mode &= ~(mode_t)S_ISGID;
		INO_SET(fs, ino, mode, mode);
	}
	if (uid != (uid_t)-1)
		INO_SET(fs, ino, uid, uid);
	if (gid != (gid_t)-1)
		INO_SET(fs, ino, gid, gid);
	inode_touch(fs, ino, TOUCH_C);
	return fs->tx.err;
}

static int nsec_valid(long nsec)
{
	return nsec == UTIME_NOW || nsec == UTIME_OMIT || (nsec >= 0 && nsec < 1000000000);
}

/* utimensat, as Linux's vfs_utimes: explicit times are the owner's to set;
 * "now" anyone's who may write. */
static int set_times(struct kura_fs *fs, uint64_t ino, const struct timespec times[2])
{
	const struct kura_inode *ip = ino_get(fs, ino);
	if (times && (!nsec_valid(times[0].tv_nsec) || !nsec_valid(times[1].tv_nsec)))
		return -EINVAL;
	if (times && times[0].tv_nsec == UTIME_NOW && times[1].tv_nsec == UTIME_NOW)
		times = NULL;
	if (!creds_owner(creds_of(fs), ip)) {
		if (times)
			return -EPERM;
		if (perm_check(fs, ip, W_OK))
			return -EACCES;
	}
	struct kura_ts now = fs->op_time;
	for (int i = 0; i < 2; i++) {
		struct kura_ts t = now;
		if (times) {
			if (times[i].tv_nsec == UTIME_OMIT)
				continue;
			if (times[i].tv_nsec != UTIME_NOW) {
				t.sec = times[i].tv_sec;
				t.nsec = (uint32_t)times[i].tv_nsec;
			}
		}
		if (i == 0)
			INO_SET(fs, ino, atime, t);
		else
			INO_SET(fs, ino, mtime, t);
	}
	INO_SET(fs, ino, ctime, now);
	return fs->tx.err;
}

static int path_attr(struct kura_fs *fs, int dirfd, const char *path, int follow, int what, mode_t mode, uid_t uid,
		     gid_t gid, const struct timespec *times)
{
	uint64_t start;
	int err = fd_dir_ino(fs, dirfd, path, &start);
	if (err || (err = fs_begin(fs)))
		return err;
	struct walk w;
	err = path_walk(fs, start, path, follow ? WALK_FOLLOW : 0, &w);
	if (!err)
		err = what == 0 ? set_mode(fs, w.ino, mode) : what == 1 ? set_owner(fs, w.ino, uid, gid)
									: set_times(fs, w.ino, times);
	return fs_end(fs, err);
}

int kura_fchmodat(kura_fs *fs, int dirfd, const char *path, mode_t mode, int flags)
{
	if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH))
		return -EINVAL;
	if (path && !*path && (flags & AT_EMPTY_PATH))
		return kura_fchmod(fs, dirfd, mode);
	return path_attr(fs, dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), 0, mode, 0, 0, NULL);
}

int kura_fchownat(kura_fs *fs, int dirfd, const char *path, uid_t uid, gid_t gid, int flags)
{
	if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH))
		return -EINVAL;
	if (path && !*path && (flags & AT_EMPTY_PATH))
		return kura_fchown(fs, dirfd, uid, gid);
	return path_attr(fs, dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), 1, 0, uid, gid, NULL);
}

int kura_utimensat(kura_fs *fs, int dirfd, const char *path, const struct timespec times[2], int flags)
{
	if (times && times[0].tv_nsec == UTIME_OMIT && times[1].tv_nsec == UTIME_OMIT)
		return 0; /* as Linux: nothing to do, not even the path is looked at */
	if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH))
		return -EINVAL;
	if (!path || (!*path && (flags & AT_EMPTY_PATH)))
		return kura_futimens(fs, dirfd, times); /* utimensat(fd, NULL, ...) is futimens */
	return path_attr(fs, dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), 2, 0, 0, 0, times);
}

int kura_chmod(kura_fs *fs, const char *path, mode_t mode)
{
	return kura_fchmodat(fs, KURA_AT_ROOT, path, mode, 0);
}

int kura_chown(kura_fs *fs, const char *path, uid_t uid, gid_t gid, int nofollow)
{
	return kura_fchownat(fs, KURA_AT_ROOT, path, uid, gid, nofollow ? AT_SYMLINK_NOFOLLOW : 0);
}

int kura_utimens(kura_fs *fs, const char *path, const struct timespec times[2], int nofollow)
{
	return kura_utimensat(fs, KURA_AT_ROOT, path, times, nofollow ? AT_SYMLINK_NOFOLLOW : 0);
}

void kill_privs(struct kura_fs *fs, uint64_t ino, const struct kura_inode *ip)
{
	const struct kura_creds *c = creds_of(fs);
	mode_t mode = ip->mode;
	if (!S_ISREG(mode) || !(mode & (S_ISUID | S_ISGID)) || creds_capable(c, KURA_CAP_FSETID))
		return;
	mode &= ~(mode_t)S_ISUID;
	if ((mode & S_ISGID) && ((mode & S_IXGRP) || !creds_in_group(c, ip->gid)))
		mode &= ~(mode_t)S_ISGID;
	if (mode != ip->mode)
		INO_SET(fs, ino, mode, mode);
}

int truncate_ino(struct kura_fs *fs, uint64_t ino, uint64_t length)
{
	kill_privs(fs, ino, ino_get(fs, ino));
	return inode_truncate(fs, ino, length);
}

/* Used by the descriptor-based variants in files.c. */
int attr_by_ino(struct kura_fs *fs, uint64_t ino, int what, mode_t mode, uid_t uid, gid_t gid,
		const struct timespec *times)
{
	int err = fs_begin(fs);
	if (err)
		return err;
	if (!ino_get(fs, ino))
		err = -EBADF;
	else
		err = what == 0 ? set_mode(fs, ino, mode) : what == 1 ? set_owner(fs, ino, uid, gid)
								      : set_times(fs, ino, times);
	return fs_end(fs, err);
}

int kura_truncateat(kura_fs *fs, int dirfd, const char *path, off_t length)
{
	if (length < 0)
		return -EINVAL;
	uint64_t start;
	int err = fd_dir_ino(fs, dirfd, path, &start);
	if (err || (err = fs_begin(fs)))
		return err;
	struct walk w;
	err = path_walk(fs, start, path, WALK_FOLLOW, &w);
	if (!err) {
		const struct kura_inode *ip = ino_get(fs, w.ino);
		if (S_ISDIR(ip->mode))
			err = -EISDIR;
		else if (!S_ISREG(ip->mode))
			err = -EINVAL;
		else if ((err = perm_check(fs, ip, W_OK)) == 0 && !(err = fsize_check(ip->size, (uint64_t)length)))
			err = truncate_ino(fs, w.ino, (uint64_t)length);
	}
	return fs_end(fs, err);
}

int kura_truncate(kura_fs *fs, const char *path, off_t length)
{
	return kura_truncateat(fs, KURA_AT_ROOT, path, length);
}
