/*
 * files.c — the descriptor half of the public API: opening and closing
 * files, a descriptor's path, mount and pool-wide queries (data I/O through
 * a descriptor is fileio.c's, directory streams dirstream.c's).
 *
 * Descriptors and the open file descriptions behind them are ofile.c's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "acl.h"
#include "alloc.h"
#include "api.h"
#include "creds.h"
#include "dir.h"
#include "inode.h"
#include "xattr.h"
#include "ofile.h"
#include "path.h"
#include "reap.h"
#include "super.h"


kura_fs *kura_mount(const char *pool_path, const struct kura_mount_opts *opts, int *err)
{
	struct kura_fs *fs = fs_open(pool_path, opts, 1, err);
	if (!fs)
		return NULL;
	int e = ofile_attach(fs, -1);
	if (e) {
		set_error("%s: cannot create the descriptor table: %s", pool_path, strerror(-e));
		fs_close(fs);
		if (err)
			*err = e;
		return NULL;
	}
	return fs;
}

int kura_unmount(kura_fs *fs)
{
	if (!fs)
		return -EINVAL;
	ofile_detach(fs);
	return fs_close(fs);
}

int fd_dir_ino(struct kura_fs *fs, int dirfd, const char *path, uint64_t *start)
{
	if (!path)
		return -EFAULT;
	*start = 0;
	if (path[0] == '/' || dirfd == KURA_AT_ROOT)
		return 0;
	struct ofile *of = ofile_get(fs, dirfd);
	if (!of)
		return -EBADF;
	uint64_t ino = of->ino;
	ofile_put(fs, of);
	/* The descriptor keeps the inode alive, and its type never changes. */
	const struct kura_inode *ip = ino_get(fs, ino);
	if (!ip)
		return -EBADF;
	if (!S_ISDIR(ip->mode))
		return -ENOTDIR;
	*start = ino;
	return 0;
}

/* ---- open / close ---------------------------------------------------------- */

#define SUPPORTED_OPEN_FLAGS                                                                                     \
	(O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC | O_APPEND | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME | \
	 O_SYNC | O_DSYNC | O_DIRECT | O_NOCTTY | O_NONBLOCK | O_LARGEFILE)
/* What Linux's open knows; it ignores any other bit (build_open_how), and
 * programs rely on it: dd keeps its private flags (oseek=NB's bytes mode)
 * in bits no O_ flag uses and passes them to open. */
#define LINUX_OPEN_FLAGS (SUPPORTED_OPEN_FLAGS | O_ASYNC | O_PATH | O_TMPFILE)

static int open_existing(struct kura_fs *fs, uint64_t ino, int flags);

static int do_open(struct kura_fs *fs, uint64_t start, const char *path, int flags, mode_t mode, uint64_t *out)
{
	struct walk w;
	int follow = (flags & O_NOFOLLOW) || ((flags & O_CREAT) && (flags & O_EXCL)) ? 0 : WALK_FOLLOW;
	int err = path_walk(fs, start, path, (flags & O_CREAT ? WALK_PARENT | WALK_CREAT : 0) | follow, &w);
	if (err)
		return err;
	uint64_t ino = w.ino;
	if (!ino) {
		/* O_CREAT of a missing name */
		if (fs->read_only)
			return -EROFS;
		if ((err = create_at(fs, &w, S_IFREG | (mode & 07777), &ino)))
			return err;
		*out = ino;
		return 0;
	}
	if ((err = open_existing(fs, ino, flags)))
		return err;
	*out = ino;
	return 0;
}

/* The checks and the truncation an open of an existing object makes; shared
 * with kura_reopen. */
static int open_existing(struct kura_fs *fs, uint64_t ino, int flags)
{
	int acc = flags & O_ACCMODE, err;
	if ((flags & O_CREAT) && (flags & O_EXCL))
		return -EEXIST;
	const struct kura_inode *ip = ino_get(fs, ino);
	if (!ip)
		return -ENOENT;
	if (S_ISLNK(ip->mode)) /* O_NOFOLLOW on a symlink */
		return flags & O_DIRECTORY ? -ENOTDIR : -ELOOP;
	if (S_ISDIR(ip->mode)) {
		/* Linux: O_CREAT of any directory, "." too, is EISDIR. */
		if (acc != O_RDONLY || (flags & (O_TRUNC | O_CREAT)))
			return -EISDIR;
	} else if (flags & O_DIRECTORY) {
		return -ENOTDIR;
	}
	int mask = (acc == O_RDONLY ? R_OK : acc == O_WRONLY ? W_OK : R_OK | W_OK);
	if ((flags & O_TRUNC) && acc == O_RDONLY)
		mask |= W_OK;
	if ((err = perm_check(fs, ip, mask)))
		return err;
	if ((flags & O_NOATIME) && !creds_owner(creds_of(fs), ip))
		return -EPERM;
	/* Special files are names and attributes only: a pool is mounted as
	 * with nodev (a device node's open is EACCES), a socket's open is
	 * ENXIO as on Linux, and kura has no pipes to join a FIFO to. */
	if (S_ISCHR(ip->mode) || S_ISBLK(ip->mode))
		return -EACCES;
	if (S_ISSOCK(ip->mode))
		return -ENXIO;
	/* A non-blocking writer finds no reader (none can have it open), as
	 * Linux answers then; anything else would need the pipe. */
	if (S_ISFIFO(ip->mode))
		return acc == O_WRONLY && (flags & O_NONBLOCK) ? -ENXIO : -EOPNOTSUPP;
	/* Linux truncates on O_TRUNC even for O_RDONLY (write permission permitting). */
	if ((flags & O_TRUNC) && S_ISREG(ip->mode)) {
		if (fs->read_only)
			return -EROFS;
		return truncate_ino(fs, ino, 0);
	}
	return 0;
}

/* glibc's O_TMPFILE includes O_DIRECTORY; the kernel's own bit is this. */
#define TMPFILE_BIT (O_TMPFILE & ~O_DIRECTORY)

/* What an open looks up or creates: a path from start, or (reopen) the
 * inode ino of an open descriptor, or (O_TMPFILE) a new unnamed file. */
struct open_req {
	uint64_t start, ino;
	const char *path;
	int flags;
	mode_t mode;
};

static int do_tmpfile(struct kura_fs *fs, const struct open_req *rq, uint64_t *out)
{
	struct walk w;
	int err = path_walk(fs, rq->start, rq->path, WALK_FOLLOW, &w);
	if (err)
		return err;
	const struct kura_inode *dip = ino_get(fs, w.ino);
	if (!S_ISDIR(dip->mode))
		return -ENOTDIR;
	if (dip->nlink == 0)
		return -ENOENT; /* a removed directory, reached through a descriptor */
	if ((err = perm_check(fs, dip, W_OK | X_OK)))
		return err;
	uint64_t ino;
	gid_t gid;
	mode_t mode = creds_new_mode(fs, dip, creds_umask(fs, dip, S_IFREG | (rq->mode & 07777)), &gid);
	if ((err = inode_alloc(fs, mode, &ino)))
		return err;
	if (gid != creds_of(fs)->fsgid)
		INO_SET(fs, ino, gid, gid); /* as create_at */
	if ((err = acl_inherit(fs, w.ino, ino, &mode)))
		return err;
	/* Born an orphan: a crash before linkat or the last close frees it at
	 * the next lone mount, like any unlinked-but-open file. */
	INO_SET(fs, ino, nlink, 0);
	if (!(rq->flags & O_EXCL))
		INO_SET(fs, ino, iflags, ino_get(fs, ino)->iflags | INODE_LINKABLE);
	orphan_add(fs, ino);
	*out = ino;
	return fs->tx.err;
}

static int open_lookup(struct kura_fs *fs, const struct open_req *rq, uint64_t *ino)
{
	if (rq->ino) {
		*ino = rq->ino;
		return open_existing(fs, rq->ino, rq->flags);
	}
	if (rq->flags & TMPFILE_BIT)
		return do_tmpfile(fs, rq, ino);
	return do_open(fs, rq->start, rq->path, rq->flags, rq->mode, ino);
}

/* Drops an open count taken by open_counted when no description came of
 * it; frees the inode if that was the last count of an orphan. */
static void uncount(struct kura_fs *fs, uint64_t ino)
{
	if (fs->read_only || fs_begin(fs)) {
		fs_lock_for_read(fs);
		lock_open_dec(&fs->lk, ino);
		fs_unlock_for_read(fs);
		return;
	}
	const struct kura_inode *ip = ino_get(fs, ino);
	if (!lock_open_dec(&fs->lk, ino) && ip && ip->nlink == 0) {
		orphan_remove(fs, ino);
		inode_dispose(fs, ino);
	}
	fs_end(fs, 0);
}

/* Looks up (or creates) and counts the inode open in one critical section,
 * then makes a description with status flags dflags and a descriptor. */
static int open_counted_once(struct kura_fs *fs, const struct open_req *rq, int dflags)
{
	uint64_t ino = 0;
	int counted = 0, err;
	if (fs->read_only || !(rq->flags & (O_CREAT | O_TRUNC | TMPFILE_BIT))) {
		/* An open that creates and truncates nothing changes only its
		 * count, which is the lock table's: the mutex, but no transaction,
		 * whose odd counter would send every reader elsewhere to wait. */
		if ((err = fs_lock_for_read_or_fail(fs)))
			return err;
		err = open_lookup(fs, rq, &ino);
		if (!err)
			err = lock_open_inc(&fs->lk, ino);
		fs_unlock_for_read(fs);
	} else if (!(err = fs_begin(fs))) {
		err = open_lookup(fs, rq, &ino);
		/* Counted under the mutex, before commit, so no unlink can slip
		 * between the lookup and the count. */
		if (!err)
			err = lock_open_inc(&fs->lk, ino);
		counted = !err;
		err = fs_end(fs, err);
	}
	if (err) {
		if (counted) {
			fs_lock_for_read(fs);
			lock_open_dec(&fs->lk, ino);
			fs_unlock_for_read(fs);
		}
		return err;
	}
	struct ofile *of = ofile_new(fs, ino, dflags);
	if (!of) {
		uncount(fs, ino);
		return -ENFILE;
	}
	int fd = fd_install(fs, of);
	if (fd < 0)
		ofile_put(fs, of);
	return fd;
}

static int open_counted(struct kura_fs *fs, const struct open_req *rq, int dflags)
{
	int fd = open_counted_once(fs, rq, dflags);
	/* A full table of open counts is mostly killed processes' (reap.h);
	 * the failed attempt changed nothing, so it can run again. */
	if (fd == -ENFILE) {
		reap_dead_owners(fs);
		fd = open_counted_once(fs, rq, dflags);
	}
	return fd;
}

/* O_TMPFILE: Linux's argument checks, then an unnamed file in the directory. */
static int open_tmpfile(kura_fs *fs, int dirfd, const char *path, int flags, mode_t mode)
{
	int acc = flags & O_ACCMODE;
	if ((flags & (O_TMPFILE | O_CREAT)) != O_TMPFILE || acc == O_RDONLY || acc == O_ACCMODE ||
	    (flags & ~(SUPPORTED_OPEN_FLAGS | O_TMPFILE)))
		return -EINVAL;
	if (fs->read_only)
		return -EROFS;
	uint64_t start;
	int err = fd_dir_ino(fs, dirfd, path, &start);
	if (err)
		return err;
	struct open_req rq = { .start = start, .path = path, .flags = flags, .mode = mode };
	return open_counted(fs, &rq, flags & ~(O_TMPFILE | O_EXCL | O_TRUNC | O_NOCTTY | O_CLOEXEC));
}

/* Linux's order: flags that make no sense (EINVAL) before a read-only
 * mount (EROFS). */
static int check_open_flags(const kura_fs *fs, int flags)
{
	if ((flags & ~SUPPORTED_OPEN_FLAGS) || (flags & O_ACCMODE) == O_ACCMODE)
		return -EINVAL;
	if ((flags & O_CREAT) && (flags & O_DIRECTORY))
		return -EINVAL; /* as Linux since 6.4 */
	if (fs->read_only && ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)))
		return -EROFS;
	return 0;
}

int kura_reopen(kura_fs *fs, int fd, int flags)
{
	/* The reference held until the new description is counted keeps an
	 * unlinked file from being freed by a concurrent close of fd. */
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	flags &= LINUX_OPEN_FLAGS;
	int ret = check_open_flags(fs, flags);
	if (!ret) {
		struct open_req rq = { .ino = of->ino, .flags = flags };
		ret = open_counted(fs, &rq, flags & ~(O_CREAT | O_EXCL | O_TRUNC | O_NOCTTY | O_CLOEXEC));
	}
	ofile_put(fs, of);
	return ret;
}

int kura_openat(kura_fs *fs, int dirfd, const char *path, int flags, mode_t mode)
{
	flags &= LINUX_OPEN_FLAGS;
	if (flags & TMPFILE_BIT)
		return open_tmpfile(fs, dirfd, path, flags, mode);
	int err = check_open_flags(fs, flags);
	if (err)
		return err;
	uint64_t start;
	err = fd_dir_ino(fs, dirfd, path, &start);
	if (err)
		return err;
	struct open_req rq = { .start = start, .path = path, .flags = flags, .mode = mode };
	return open_counted(fs, &rq, flags & ~(O_CREAT | O_EXCL | O_TRUNC | O_NOCTTY | O_CLOEXEC));
}

int kura_open(kura_fs *fs, const char *path, int flags, mode_t mode)
{
	return kura_openat(fs, KURA_AT_ROOT, path, flags, mode);
}

int kura_close(kura_fs *fs, int fd)
{
	struct ofile *of = fd_remove(fs, fd);
	if (!of)
		return -EBADF;
	ofile_put(fs, of);
	return 0;
}

int kura_dup(kura_fs *fs, int fd)
{
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	int nfd = fd_install(fs, of); /* the reference taken above becomes the new descriptor's */
	if (nfd < 0)
		ofile_put(fs, of);
	return nfd;
}

int kura_fd_flags(kura_fs *fs, int fd)
{
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	int flags = of->flags;
	ofile_put(fs, of);
	return flags;
}

int kura_fd_setfl(kura_fs *fs, int fd, int flags)
{
	const int changeable = O_APPEND | O_NONBLOCK | O_NOATIME | O_DIRECT;
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	ofile_lock_pos(of);
	of->flags = (of->flags & ~changeable) | (flags & changeable);
	ofile_unlock_pos(of);
	ofile_put(fs, of);
	return 0;
}

int64_t kura_fd_ino(kura_fs *fs, int fd)
{
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	int64_t ino = (int64_t)of->ino;
	ofile_put(fs, of);
	return ino;
}

/* ---- the path of a descriptor ---------------------------------------------- */

/* Only a scan of the parent finds a directory's name there: a cost of the
 * parent's size at every level of every kura_getpath, which the layer pays
 * for each relative path with ".." from a working directory in a pool (5 ms
 * a call beside 20,000 siblings).  So each thread keeps the names it found
 * last and tries them first.  A lookup by hash in the parent confirms one,
 * since a directory has one name: a rename or removal since, or a hint
 * torn by a rerun of the read, can only make it miss. */
#define NAME_HINTS 8
static __thread struct name_hint {
	const struct kura_fs *fs;
	uint64_t ino;
	unsigned len;
	char name[KURA_NAME_MAX + 1];
} name_hints[NAME_HINTS];

static int name_in_parent(const struct kura_fs *fs, uint64_t parent, uint64_t dir, struct dir_entry *out)
{
	const struct kura_inode *pip = ino_get(fs, parent);
	if (!pip || !S_ISDIR(pip->mode))
		return -EUCLEAN;
	struct name_hint *h = &name_hints[dir % NAME_HINTS];
	uint64_t ino;
	unsigned type;
	if (h->fs == fs && h->ino == dir && h->len && h->len <= KURA_NAME_MAX &&
	    dir_lookup(fs, pip, h->name, h->len, &ino, &type) == 0 && ino == dir) {
		out->ino = ino;
		out->type = type;
		out->name_len = h->len;
		memcpy(out->name, h->name, h->len);
		out->name[h->len] = '\0';
		return 0;
	}
	uint64_t cookie = 0;
	int r;
	while ((r = dir_next(fs, pip, &cookie, out)) == 1)
		if (out->ino == dir) {
			h->fs = fs;
			h->ino = dir;
			h->len = out->name_len;
			memcpy(h->name, out->name, out->name_len);
			return 0;
		}
	return r < 0 ? r : -ENOENT;
}

/* Built from the end of buf backwards, so a path of any length fits a
 * buffer that is long enough (Linux's cwd may lie deeper than PATH_MAX);
 * a cycle of parent links, which only damage makes, fills it and ends. */
static int build_path(const struct kura_fs *fs, uint64_t ino, char *buf, size_t len)
{
	if (len < 2)
		return -ERANGE;
	size_t at = len - 1;
	buf[at] = 0;
	uint64_t cur = ino, root = fs->sb->root_ino;
	const struct kura_inode *ip = ino_get(fs, cur);
	if (!ip)
		return -EBADF;
	if (!S_ISDIR(ip->mode))
		return -ENOTDIR;
	if (ip->nlink == 0)
		return -ENOENT;
	while (cur != root) {
		struct dir_entry de;
		ip = ino_get(fs, cur);
		if (!ip)
			return -EUCLEAN;
		int err = name_in_parent(fs, ip->parent, cur, &de);
		if (err)
			return err;
		if (de.name_len + 1 > at)
			return -ERANGE;
		at -= de.name_len;
		memcpy(buf + at, de.name, de.name_len);
		buf[--at] = '/';
		cur = ip->parent;
	}
	if (buf[at] == 0)
		buf[--at] = '/';
	memmove(buf, buf + at, len - at);
	return 0;
}

int kura_getpath(kura_fs *fs, int fd, char *buf, size_t len)
{
	int64_t ino = kura_fd_ino(fs, fd);
	if (ino < 0)
		return (int)ino;
	int ret;
	FS_READ(fs, ret, ret = build_path(fs, (uint64_t)ino, buf, len));
	return ret;
}

/* ---- pool-wide ---------------------------------------------------------- */

int kura_statvfs(kura_fs *fs, struct statvfs *sv)
{
	const struct kura_state *st = fs_state(fs);
	memset(sv, 0, sizeof *sv);
	sv->f_bsize = KURA_BLOCK;
	sv->f_frsize = KURA_BLOCK;
	sv->f_blocks = fs->nblocks - fs->first_data_block;
	sv->f_bfree = st->free_blocks;
	sv->f_bavail = alloc_free_for_data(fs);
	/* Inode slots come from free blocks, 32 to a block: that is the ceiling. */
	sv->f_ffree = sv->f_favail = st->free_blocks * INODES_PER_BLOCK;
	sv->f_files = sv->f_ffree + st->nfiles + st->ndirs + st->nsymlinks;
	sv->f_fsid = fs->sb->uuid[0] | (unsigned long)fs->sb->uuid[1] << 8 | (unsigned long)fs->sb->uuid[2] << 16;
	sv->f_namemax = KURA_NAME_MAX;
	sv->f_flag = fs->read_only ? ST_RDONLY : 0;
	return 0;
}

unsigned kura_format_version(void)
{
	return KURA_VERSION;
}

int kura_info(kura_fs *fs, struct kura_info *info)
{
	const struct kura_state *st = fs_state(fs);
	memset(info, 0, sizeof *info);
	info->format_version = super_version(fs);
	info->pool_size = fs->sb->pool_size;
	info->block_size = KURA_BLOCK;
	info->blocks_total = fs->nblocks;
	info->blocks_free = st->free_blocks;
	info->log_size = fs->sb->log_blocks * KURA_BLOCK;
	info->files = st->nfiles;
	info->directories = st->ndirs;
	info->symlinks = st->nsymlinks;
	info->orphans = st->norphans;
	info->persist = media_kind_name(&fs->m);
	info->sync = fs->fsync_mode ? "fsync" : "op";
	return 0;
}
