/*
 * names.c — the namespace half of the public API: the calls that take
 * paths and make, remove, link, rename or read names (attributes are
 * attrs.c's).  Each call is one transaction (fs_begin/fs_end) or one
 * optimistic read (FS_READ).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "acl.h"
#include "api.h"
#include "creds.h"
#include "dir.h"
#include "inode.h"
#include "xattr.h"
#include "ofile.h"
#include "path.h"
#include "super.h"

void drop_link(struct kura_fs *fs, uint64_t ino)
{
	const struct kura_inode *ip = ino_get(fs, ino);
	if (!ip)
		return;
	uint32_t nlink = S_ISDIR(ip->mode) || ip->nlink == 0 ? 0 : ip->nlink - 1;
	if (!nlink && !S_ISDIR(ip->mode) && !lock_open_count(&fs->lk, ino)) {
		/* Freed at once: a link count and a ctime stored first would
		 * only be logged and then overwritten by the free. */
		inode_dispose(fs, ino);
		return;
	}
	INO_SET(fs, ino, nlink, nlink);
	inode_touch(fs, ino, TOUCH_C);
	if (nlink)
		return;
	if (S_ISDIR(ip->mode))
		dir_release(fs, ino);
	if (lock_open_count(&fs->lk, ino))
		orphan_add(fs, ino);
	else
		inode_dispose(fs, ino);
}

static int may_create(struct kura_fs *fs, const struct kura_inode *dip);

int create_at(struct kura_fs *fs, const struct walk *w, mode_t mode, uint64_t *out)
{
	const struct kura_inode *dip = ino_get(fs, w->dir);
	if (dip->nlink == 0)
		return -ENOENT; /* creating in a removed directory (reached through a descriptor) */
	int err = perm_check(fs, dip, W_OK | X_OK);
	if (err)
		return err;
	if (S_ISDIR(mode) && dip->nlink >= KURA_LINK_MAX)
		return -EMLINK;
	uint64_t ino;
	gid_t gid;
	mode = creds_new_mode(fs, dip, creds_umask(fs, dip, mode), &gid);
	err = inode_alloc(fs, mode, &ino);
	if (err)
		return err;
	if (gid != creds_of(fs)->fsgid)
		INO_SET(fs, ino, gid, gid);
	if (!S_ISLNK(mode) && (err = acl_inherit(fs, w->dir, ino, &mode)))
		return err;
	if (S_ISDIR(mode)) {
		INO_SET(fs, ino, nlink, 2);
		INO_SET(fs, ino, parent, w->dir);
		INO_SET(fs, w->dir, nlink, dip->nlink + 1);
	}
	err = dir_add(fs, w->dir, w->name, w->len, ino, dtype_of(mode));
	if (err)
		return err;
	inode_touch(fs, w->dir, TOUCH_M | TOUCH_C);
	*out = ino;
	return fs->tx.err;
}

/* Resolves the parent of a name to be created; the name must be absent. */
static int walk_new(struct kura_fs *fs, uint64_t start, const char *path, struct walk *w)
{
	int err = path_walk(fs, start, path, WALK_PARENT, w);
	if (err)
		return err;
	if (w->ino)
		return -EEXIST;
	return 0;
}

int kura_mkdirat(kura_fs *fs, int dirfd, const char *path, mode_t mode)
{
	uint64_t start;
	int err = fd_dir_ino(fs, dirfd, path, &start);
	if (err || (err = fs_begin(fs)))
		return err;
	if (err)
		return err;
	struct walk w;
	uint64_t ino;
	err = walk_new(fs, start, path, &w);
	if (!err)
		err = create_at(fs, &w, S_IFDIR | (mode & (0777 | S_ISVTX)), &ino);
	return fs_end(fs, err);
}

int kura_mkdir(kura_fs *fs, const char *path, mode_t mode)
{
	return kura_mkdirat(fs, KURA_AT_ROOT, path, mode);
}

int kura_mknodat(kura_fs *fs, int dirfd, const char *path, mode_t mode, dev_t dev)
{
	mode_t type = mode & S_IFMT;
	if (type == S_IFDIR)
		return -EPERM; /* Linux's may_mknod, before the path */
	if (type && type != S_IFREG && type != S_IFIFO && type != S_IFCHR && type != S_IFBLK && type != S_IFSOCK)
		return -EINVAL;
	uint64_t start;
	int err = fd_dir_ino(fs, dirfd, path, &start);
	if (err || (err = fs_begin(fs)))
		return err;
	struct walk w;
	uint64_t ino;
	err = walk_new(fs, start, path, &w);
	if (!err && w.trailing_slash)
		err = -ENOENT;
	/* Device nodes need CAP_MKNOD, checked after the path as Linux does. */
	if (!err && (type == S_IFCHR || type == S_IFBLK) && !creds_capable(creds_of(fs), KURA_CAP_MKNOD))
		err = may_create(fs, ino_get(fs, w.dir)) ?: -EPERM;
	if (!err)
		err = create_at(fs, &w, (type ? type : S_IFREG) | (mode & 07777), &ino);
	/* A device's number; for a socket or a FIFO, the name of the kernel
	 * object behind it (kura_socket_name), which stat does not show. */
	if (!err && (type == S_IFCHR || type == S_IFBLK || type == S_IFSOCK || type == S_IFIFO))
		INO_SET(fs, ino, parent, (uint64_t)dev);
	return fs_end(fs, err);
}

int kura_socket_name(kura_fs *fs, int dirfd, const char *path, int flags, uint64_t *ino, uint64_t *token,
		     uid_t *owner)
{
	struct stat st;
	int err = kura_fstatat(fs, dirfd, path, &st, flags & ~AT_KURA_FIFO);
	if (err)
		return err;
	mode_t type = flags & AT_KURA_FIFO ? S_IFIFO : S_IFSOCK;
	int wrong = type == S_IFIFO ? -EOPNOTSUPP : -ECONNREFUSED;
	if ((st.st_mode & S_IFMT) != type)
		return wrong;
	fs_lock_for_read(fs);
	const struct kura_inode *ip = ino_get(fs, st.st_ino);
	err = ip && (ip->mode & S_IFMT) == type ? 0 : wrong;
	if (!err) {
		*ino = st.st_ino;
		*token = ip->parent;
		*owner = ip->uid;
	}
	fs_unlock_for_read(fs);
	return err;
}

int kura_mknod(kura_fs *fs, const char *path, mode_t mode, dev_t dev)
{
	return kura_mknodat(fs, KURA_AT_ROOT, path, mode, dev);
}

/* Sticky directories: only the owner of the entry or of the directory (or
 * root) may remove or rename it. */
static int sticky_ok(const struct kura_fs *fs, const struct kura_inode *dip, const struct kura_inode *ip)
{
	const struct kura_creds *c = creds_of(fs);
	return !(dip->mode & S_ISVTX) || ip->uid == c->fsuid || dip->uid == c->fsuid || creds_capable(c, KURA_CAP_FOWNER);
}

/* Linux's may_delete: may this thread remove (or replace) ip's entry in dip,
 * and is its type the one the call wants (want_dir: 1 a directory, 0 not
 * one, -1 either)? */
static int may_delete(struct kura_fs *fs, const struct kura_inode *dip, const struct kura_inode *ip, uint64_t ino,
		      int want_dir)
{
	int err = perm_check(fs, dip, W_OK | X_OK);
	if (err)
		return err;
	if (!sticky_ok(fs, dip, ip))
		return -EPERM;
	if (want_dir == 1 && !S_ISDIR(ip->mode))
		return -ENOTDIR;
	if (want_dir == 1 && ino == fs->sb->root_ino)
		return -EBUSY;
	if (want_dir == 0 && S_ISDIR(ip->mode))
		return -EISDIR;
	if (dip->nlink == 0)
		return -ENOENT; /* a removed directory, reached through a descriptor */
	if (lock_bind_point(&fs->lk, ino))
		return -EBUSY; /* a mount point, as vfs_rmdir, vfs_unlink and vfs_rename check */
	return 0;
}

/* Linux's may_create, the name known absent. */
static int may_create(struct kura_fs *fs, const struct kura_inode *dip)
{
	if (dip->nlink == 0)
		return -ENOENT;
	return perm_check(fs, dip, W_OK | X_OK);
}

int remove_name(struct kura_fs *fs, uint64_t start, const char *path, int want_dir)
{
	struct walk w;
	/* Linux's order: the parent's walk, the kind of the last name, its
	 * lookup, then may_delete. */
	int err = path_walk(fs, start, path, WALK_PARENT | WALK_DEFER_LONG, &w);
	if (err)
		return err;
	if (w.len == 0 && !w.toolong)
		return want_dir ? -EBUSY : -EISDIR;
	if (w.dot)
		return want_dir ? (w.len == 1 ? -EINVAL : -ENOTEMPTY) : -EISDIR;
	if (w.toolong)
		return -ENAMETOOLONG;
	if (!w.ino)
		return -ENOENT;
	const struct kura_inode *ip = ino_get(fs, w.ino);
	const struct kura_inode *dip = ino_get(fs, w.dir);
	if (!want_dir && w.trailing_slash)
		return S_ISDIR(ip->mode) ? -EISDIR : -ENOTDIR;
	if ((err = may_delete(fs, dip, ip, w.ino, want_dir)))
		return err;
	if (want_dir) {
		if ((err = dir_empty_check(fs, ip)))
			return err;
		INO_SET(fs, w.dir, nlink, dip->nlink - 1);
	}
	err = dir_remove(fs, w.dir, w.name, w.len);
	if (err)
		return err;
	inode_touch(fs, w.dir, TOUCH_M | TOUCH_C);
	drop_link(fs, w.ino);
	return fs->tx.err;
}

int kura_unlinkat(kura_fs *fs, int dirfd, const char *path, int flags)
{
	if (flags & ~AT_REMOVEDIR)
		return -EINVAL;
	uint64_t start;
	int err = fd_dir_ino(fs, dirfd, path, &start);
	if (err || (err = fs_begin(fs)))
		return err;
	return fs_end(fs, remove_name(fs, start, path, !!(flags & AT_REMOVEDIR)));
}

int kura_unlink(kura_fs *fs, const char *path)
{
	return kura_unlinkat(fs, KURA_AT_ROOT, path, 0);
}

int kura_rmdir(kura_fs *fs, const char *path)
{
	return kura_unlinkat(fs, KURA_AT_ROOT, path, AT_REMOVEDIR);
}

/* fs.protected_hardlinks: only the owner may link a file
 * that is not a regular one it could read and write, or that is set-user-ID
 * or executable set-group-ID. */
static int may_hardlink(struct kura_fs *fs, const struct kura_inode *ip)
{
	if (!creds_protected_hardlinks() || creds_owner(creds_of(fs), ip))
		return 0;
	int safe = S_ISREG(ip->mode) && !(ip->mode & S_ISUID) &&
		   (ip->mode & (S_ISGID | S_IXGRP)) != (S_ISGID | S_IXGRP) && !perm_check(fs, ip, R_OK | W_OK);
	return safe ? 0 : -EPERM;
}

int do_link(struct kura_fs *fs, uint64_t ostart, const char *oldpath, uint64_t nstart, const char *newpath,
	    int follow_old, uint64_t by_ino)
{
	struct walk o, n;
	int err = 0;
	if (by_ino) {
		o.ino = by_ino; /* AT_EMPTY_PATH: the descriptor's own inode */
	} else if ((err = path_walk(fs, ostart, oldpath, follow_old, &o))) {
		return err;
	}
	const struct kura_inode *ip = ino_get(fs, o.ino);
	if (!ip)
		return -ENOENT;
	/* Linux's order: the new name's lookup, the hard-link protection,
	 * may_create, the source's type, then its link count. */
	if ((err = walk_new(fs, nstart, newpath, &n)))
		return err;
	if (n.trailing_slash)
		return -ENOENT;
	if ((err = may_hardlink(fs, ip)) || (err = may_create(fs, ino_get(fs, n.dir))))
		return err;
	if (S_ISDIR(ip->mode))
		return -EPERM;
	/* An orphan cannot be linked back, except an O_TMPFILE file by its
	 * descriptor (Linux's I_LINKABLE), once. */
	int adopt = ip->nlink == 0 && by_ino && (ip->iflags & INODE_LINKABLE);
	if (ip->nlink == 0 && !adopt)
		return -ENOENT;
	if (ip->nlink >= KURA_LINK_MAX)
		return -EMLINK;
	if ((err = dir_add(fs, n.dir, n.name, n.len, o.ino, dtype_of(ip->mode))))
		return err;
	if (adopt) {
		orphan_remove(fs, o.ino);
		INO_SET(fs, o.ino, iflags, 0);
	}
	INO_SET(fs, o.ino, nlink, ip->nlink + 1);
	inode_touch(fs, o.ino, TOUCH_C);
	inode_touch(fs, n.dir, TOUCH_M | TOUCH_C);
	return fs->tx.err;
}

int kura_linkat(kura_fs *fs, int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags)
{
	if (flags & ~(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH))
		return -EINVAL;
	uint64_t ostart = 0, nstart, by_ino = 0;
	int err;
	struct ofile *hold = NULL;
	if ((flags & AT_EMPTY_PATH) && oldpath && !*oldpath) {
		/* Held across the call: a concurrent close must not free an
		 * unlinked file (and reuse its slot) under the link. */
		if (!(hold = ofile_get(fs, olddirfd)))
			return -EBADF;
		by_ino = hold->ino;
	} else if ((err = fd_dir_ino(fs, olddirfd, oldpath, &ostart))) {
		return err;
	}
	if (!(err = fd_dir_ino(fs, newdirfd, newpath, &nstart)) && !(err = fs_begin(fs)))
		err = fs_end(fs, do_link(fs, ostart, oldpath, nstart, newpath,
					 flags & AT_SYMLINK_FOLLOW ? WALK_FOLLOW : 0, by_ino));
	if (hold)
		ofile_put(fs, hold);
	return err;
}

int kura_link(kura_fs *fs, const char *oldpath, const char *newpath)
{
	return kura_linkat(fs, KURA_AT_ROOT, oldpath, KURA_AT_ROOT, newpath, 0);
}

static int do_symlink(struct kura_fs *fs, const char *target, uint64_t start, const char *linkpath)
{
	size_t tl = strnlen(target, KURA_SYMLINK_MAX + 1);
	if (tl == 0)
		return -ENOENT;
	if (tl > KURA_SYMLINK_MAX)
		return -ENAMETOOLONG;
	struct walk w;
	uint64_t ino;
	int err = walk_new(fs, start, linkpath, &w);
	if (!err && w.trailing_slash)
		err = -ENOENT;
	if (!err)
		err = create_at(fs, &w, S_IFLNK | 0777, &ino);
	if (!err) {
		ssize_t n = inode_write(fs, ino, target, tl, 0);
		err = n < 0 ? (int)n : 0;
	}
	return err;
}

int kura_symlinkat(kura_fs *fs, const char *target, int dirfd, const char *linkpath)
{
	uint64_t start;
	int err = fd_dir_ino(fs, dirfd, linkpath, &start);
	if (err || (err = fs_begin(fs)))
		return err;
	return fs_end(fs, do_symlink(fs, target, start, linkpath));
}

int kura_symlink(kura_fs *fs, const char *target, const char *linkpath)
{
	return kura_symlinkat(fs, target, KURA_AT_ROOT, linkpath);
}

ssize_t kura_readlinkat(kura_fs *fs, int dirfd, const char *path, char *buf, size_t bufsiz)
{
	ssize_t ret;
	if (bufsiz == 0)
		return -EINVAL;
	uint64_t start;
	int err0 = fd_dir_ino(fs, dirfd, path, &start);
	if (err0)
		return err0;
	FS_READ(fs, ret, {
		struct walk w;
		int err = path_walk(fs, start, path, 0, &w);
		const struct kura_inode *ip = err ? NULL : ino_get(fs, w.ino);
		if (err)
			ret = err;
		else if (!S_ISLNK(ip->mode))
			ret = -EINVAL;
		else if (ip->size == 0 || ip->size > KURA_SYMLINK_MAX)
			ret = -EUCLEAN; /* a damaged length must not send a caller growing its buffer forever */
		else
			ret = inode_read(fs, ip, buf, bufsiz < ip->size ? bufsiz : ip->size, 0);
	});
	return ret;
}

ssize_t kura_readlink(kura_fs *fs, const char *path, char *buf, size_t bufsiz)
{
	return kura_readlinkat(fs, KURA_AT_ROOT, path, buf, bufsiz);
}

/* Is `dir` equal to or below `ancestor`?  Walks parent pointers to the root. */
static int is_within(const struct kura_fs *fs, uint64_t dir, uint64_t ancestor)
{
	uint64_t root = fs->sb->root_ino;
	for (unsigned depth = 0; depth < 1u << 20; depth++) {
		if (dir == ancestor)
			return 1;
		if (dir == root)
			return 0;
		const struct kura_inode *ip = ino_get(fs, dir);
		if (!ip)
			return 0;
		dir = ip->parent;
	}
	return 1; /* a parent cycle: refuse as if it were a loop */
}

static void reparent(struct kura_fs *fs, uint64_t ino, uint64_t from, uint64_t to)
{
	if (from == to)
		return;
	INO_SET(fs, ino, parent, to);
	INO_SET(fs, from, nlink, ino_get(fs, from)->nlink - 1);
	INO_SET(fs, to, nlink, ino_get(fs, to)->nlink + 1);
}

int do_rename(struct kura_fs *fs, uint64_t ostart, const char *oldpath, uint64_t nstart, const char *newpath,
	      unsigned flags)
{
	struct walk o, n;
	int err = path_walk(fs, ostart, oldpath, WALK_PARENT | WALK_DEFER_LONG, &o);
	if (err)
		return err;
	if ((err = path_walk(fs, nstart, newpath, WALK_PARENT | WALK_DEFER_LONG, &n)))
		return err;
	/* Linux's order (do_renameat2, vfs_rename): the kinds of both last
	 * names, the old name's lookup, the new name's, the flags, trailing
	 * slashes, ancestry, then the permissions. */
	if ((o.len == 0 && !o.toolong) || o.dot)
		return -EBUSY;
	if ((n.len == 0 && !n.toolong) || n.dot)
		return flags & RENAME_NOREPLACE ? -EEXIST : -EBUSY;
	if (o.toolong)
		return -ENAMETOOLONG;
	if (!o.ino)
		return -ENOENT;
	if (n.toolong)
		return -ENAMETOOLONG;
	if ((flags & RENAME_NOREPLACE) && n.ino)
		return -EEXIST;
	const struct kura_inode *sip = ino_get(fs, o.ino);
	int src_dir = S_ISDIR(sip->mode);
	/* Each name's slash is judged by the type of what it names, except
	 * that without RENAME_EXCHANGE the source's type judges both. */
	if (flags & RENAME_EXCHANGE) {
		if (!n.ino)
			return -ENOENT;
		if (n.trailing_slash && n.type != DT_DIR)
			return -ENOTDIR;
	}
	if (!src_dir && (o.trailing_slash || (!(flags & RENAME_EXCHANGE) && n.trailing_slash)))
		return -ENOTDIR;
	const struct kura_inode *tip = n.ino ? ino_get(fs, n.ino) : NULL;
	int tgt_dir = tip && S_ISDIR(tip->mode);
	/* The source may not contain the target, nor (unless exchanged, then
	 * EINVAL) the target the source. */
	if (src_dir && o.ino != n.ino && is_within(fs, n.dir, o.ino))
		return -EINVAL;
	if (tgt_dir && o.ino != n.ino && is_within(fs, o.dir, n.ino))
		return flags & RENAME_EXCHANGE ? -EINVAL : -ENOTEMPTY;
	if (o.ino == n.ino)
		return 0; /* the same file: POSIX says do nothing */
	const struct kura_inode *odip = ino_get(fs, o.dir), *ndip = ino_get(fs, n.dir);
	if ((err = may_delete(fs, odip, sip, o.ino, -1)))
		return err;
	if (!tip)
		err = may_create(fs, ndip);
	else
		err = may_delete(fs, ndip, tip, n.ino, flags & RENAME_EXCHANGE ? -1 : src_dir);
	if (err)
		return err;
	/* A directory that changes parent has its ".." rewritten. */
	if (o.dir != n.dir && ((src_dir && (err = perm_check(fs, sip, W_OK))) ||
			       ((flags & RENAME_EXCHANGE) && tgt_dir && (err = perm_check(fs, tip, W_OK)))))
		return err;
	if (o.dir != n.dir && ((src_dir && !tgt_dir && ndip->nlink >= KURA_LINK_MAX) ||
			       ((flags & RENAME_EXCHANGE) && !src_dir && tgt_dir && odip->nlink >= KURA_LINK_MAX)))
		return -EMLINK;
	if (flags & RENAME_EXCHANGE) {
		if ((err = dir_retarget(fs, o.dir, o.name, o.len, n.ino, dtype_of(tip->mode))) ||
		    (err = dir_retarget(fs, n.dir, n.name, n.len, o.ino, dtype_of(sip->mode))))
			return err;
		if (src_dir)
			reparent(fs, o.ino, o.dir, n.dir);
		if (tgt_dir)
			reparent(fs, n.ino, n.dir, o.dir);
		inode_touch(fs, n.ino, TOUCH_C);
	} else {
		if (tip) {
			if (tgt_dir && (err = dir_empty_check(fs, tip)))
				return err;
			if ((err = dir_retarget(fs, n.dir, n.name, n.len, o.ino, dtype_of(sip->mode))))
				return err;
			if (tgt_dir)
				INO_SET(fs, n.dir, nlink, ndip->nlink - 1);
			drop_link(fs, n.ino);
		} else if ((err = dir_add(fs, n.dir, n.name, n.len, o.ino, dtype_of(sip->mode)))) {
			return err;
		}
		if ((err = dir_remove(fs, o.dir, o.name, o.len)))
			return err;
		if (src_dir)
			reparent(fs, o.ino, o.dir, n.dir);
	}
	inode_touch(fs, o.ino, TOUCH_C);
	inode_touch(fs, o.dir, TOUCH_M | TOUCH_C);
	if (n.dir != o.dir)
		inode_touch(fs, n.dir, TOUCH_M | TOUCH_C);
	return fs->tx.err;
}

int kura_renameat2(kura_fs *fs, int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
		   unsigned flags)
{
	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE) ||
	    (flags & RENAME_NOREPLACE && flags & RENAME_EXCHANGE))
		return -EINVAL;
	uint64_t ostart, nstart;
	int err = fd_dir_ino(fs, olddirfd, oldpath, &ostart);
	if (err || (err = fd_dir_ino(fs, newdirfd, newpath, &nstart)) || (err = fs_begin(fs)))
		return err;
	return fs_end(fs, do_rename(fs, ostart, oldpath, nstart, newpath, flags));
}

int kura_rename(kura_fs *fs, const char *oldpath, const char *newpath, unsigned flags)
{
	return kura_renameat2(fs, KURA_AT_ROOT, oldpath, KURA_AT_ROOT, newpath, flags);
}
