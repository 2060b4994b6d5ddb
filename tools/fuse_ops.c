/*
 * fuse_ops.c — the FUSE low-level operations of `kura mount`: the kernel's
 * requests served through the engine API (include/kura.h).
 *
 * Node ids.  A FUSE node id is the engine's inode number (the pool's root
 * is FUSE_ROOT_ID: no inode sits at number 1, the superblock's offset), so
 * the inode numbers a program sees through the mount are the ones `kura
 * run` shows.  The engine's API takes paths, so each node the kernel holds
 * remembers the (parent node, name) it was last looked up by, and a
 * request's path is built by walking up those; a rename through the mount
 * moves one record, and its subtree follows.  What other processes of the
 * pool (kura run) rename is learnt at the kernel's next lookup, which
 * comes at once: entries are never cached (timeouts 0, below).  A node's
 * path is checked to still name its inode before it is used (-ESTALE
 * otherwise), so an operation never lands on another file that took the
 * old name meanwhile.  Nodes carry the inode's generation, so the kernel
 * tells a reused inode number from the file it had.  Open files and
 * directories are served through the engine's descriptors, which follow
 * their inode whatever is renamed; a node whose names are all gone (a file
 * unlinked while open) is reached through them too.
 *
 * Credentials.  Each request runs with the caller's fsuid, fsgid,
 * supplementary groups and umask as the engine's thread credentials, so
 * the engine's permission checks (modes, ACLs, sticky directories) refuse
 * a second user exactly what the kernel would on ext4.  The caller's
 * capabilities are not in the request: uid 0 gets the file-system ones
 * (KURA_CAPS_FS), anyone else none.
 *
 * Coherence.  Other processes change the pool behind the kernel's back,
 * so the kernel keeps nothing it could serve stale: entry and attribute
 * timeouts are 0 (every path walk asks again), files are opened with
 * direct_io (every read and write comes here, no page cache) and no
 * writeback cache is asked for.
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h> /* RENAME_* */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fuse_lowlevel.h>

#include "fuse_ops.h"

/* ---- operations ---- */

static void op_init(void *data, struct fuse_conn_info *conn)
{
	(void)data;
	/* The engine applies the umask itself, and only where no default
	 * ACL of the directory replaces it. */
	if (conn->capable & FUSE_CAP_DONT_MASK) {
		conn->want |= FUSE_CAP_DONT_MASK;
		dont_mask = 1;
	}
	/* O_TRUNC goes to open, checked there with the opener's access,
	 * instead of a separate truncation before it. */
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	/* See the head comment: the kernel keeps no file data. */
	conn->want &= ~(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_AUTO_INVAL_DATA);
	/* Locks are the kernel's own (kura.h has none to map them to). */
	conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	BEGIN(req);
	if (!(err = child_path(parent, name, &path)))
		err = reply_entry(req, parent, name, path);
	END(req);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	node_unref(ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		node_unref(forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	BEGIN(req);
	struct stat st;
	struct target t;
	int hfd = handle_fd(fi);
	if (hfd >= 0)
		err = kura_fstat(kfs, hfd, &st);
	else if (!(err = reach(ino, &path, &tfd, &t)))
		err = kura_fstatat(kfs, t.dirfd, t.path, &st, t.flags);
	if (!err)
		fuse_reply_attr(req, &st, 0);
	END(req);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi)
{
	BEGIN(req);
	int hfd = handle_fd(fi);
	struct target t;
	/* An open file is changed through a descriptor: it may have no name
	 * any more.  Otherwise symlinks are not followed: the kernel has
	 * followed them already, and asks for the link itself (lchown). */
	if (hfd >= 0)
		t = (struct target){ hfd, "", AT_EMPTY_PATH };
	else if ((err = reach(ino, &path, &tfd, &t)))
		goto out;
	if (to_set & FUSE_SET_ATTR_MODE)
		err = kura_fchmodat(kfs, t.dirfd, t.path, attr->st_mode, t.flags);
	if (!err && (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
		uid_t uid = to_set & FUSE_SET_ATTR_UID ? attr->st_uid : (uid_t)-1;
		gid_t gid = to_set & FUSE_SET_ATTR_GID ? attr->st_gid : (gid_t)-1;
		err = kura_fchownat(kfs, t.dirfd, t.path, uid, gid, t.flags);
	}
	if (!err && (to_set & FUSE_SET_ATTR_SIZE))
		err = t.path[0] ? kura_truncate(kfs, t.path, attr->st_size) : kura_ftruncate(kfs, t.dirfd, attr->st_size);
	if (!err && (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
		struct timespec times[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_nsec = UTIME_OMIT } };
		if (to_set & FUSE_SET_ATTR_ATIME_NOW)
			times[0].tv_nsec = UTIME_NOW;
		else if (to_set & FUSE_SET_ATTR_ATIME)
			times[0] = attr->st_atim;
		if (to_set & FUSE_SET_ATTR_MTIME_NOW)
			times[1].tv_nsec = UTIME_NOW;
		else if (to_set & FUSE_SET_ATTR_MTIME)
			times[1] = attr->st_mtim;
		err = kura_utimensat(kfs, t.dirfd, t.path, times, t.flags);
	}
	struct stat st;
	if (!err)
		err = kura_fstatat(kfs, t.dirfd, t.path, &st, t.flags);
	if (!err)
		fuse_reply_attr(req, &st, 0);
out:
	END(req);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	BEGIN(req);
	char target[4096 + 1]; /* the engine's longest target, and its NUL */
	if (!(err = resolve(ino, &path))) {
		ssize_t n = kura_readlink(kfs, path, target, sizeof target - 1);
		if (n < 0) {
			err = (int)n;
		} else {
			target[n] = '\0';
			fuse_reply_readlink(req, target);
		}
	}
	END(req);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	BEGIN(req);
	if (!(err = child_path(parent, name, &path)) && !(err = kura_mknodat(kfs, KURA_AT_ROOT, path, mode, rdev)))
		err = reply_entry(req, parent, name, path);
	END(req);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	BEGIN(req);
	if (!(err = child_path(parent, name, &path)) && !(err = kura_mkdir(kfs, path, mode)))
		err = reply_entry(req, parent, name, path);
	END(req);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	BEGIN(req);
	if (!(err = child_path(parent, name, &path)) && !(err = kura_unlink(kfs, path)))
		fuse_reply_err(req, 0);
	END(req);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	BEGIN(req);
	if (!(err = child_path(parent, name, &path)) && !(err = kura_rmdir(kfs, path)))
		fuse_reply_err(req, 0);
	END(req);
}

static void op_symlink(fuse_req_t req, const char *target, fuse_ino_t parent, const char *name)
{
	BEGIN(req);
	if (!(err = child_path(parent, name, &path)) && !(err = kura_symlink(kfs, target, path)))
		err = reply_entry(req, parent, name, path);
	END(req);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	BEGIN(req);
	struct stat from, to = { 0 };
	if ((err = child_path(parent, name, &path)) || (err = child_path(newparent, newname, &path2)) ||
	    (err = kura_lstat(kfs, path, &from)))
		goto out;
	if ((flags & RENAME_EXCHANGE) && (err = kura_lstat(kfs, path2, &to)))
		goto out;
	if ((err = kura_rename(kfs, path, path2, flags)))
		goto out;
	node_move(to_node(from.st_ino), newparent, newname);
	if (flags & RENAME_EXCHANGE)
		node_move(to_node(to.st_ino), parent, name);
	fuse_reply_err(req, 0);
out:
	END(req);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	BEGIN(req);
	if (!(err = resolve(ino, &path)) && !(err = child_path(newparent, newname, &path2)) &&
	    !(err = kura_linkat(kfs, KURA_AT_ROOT, path, KURA_AT_ROOT, path2, 0)))
		err = reply_entry(req, newparent, newname, path2);
	END(req);
}

/* The open flags the engine takes; the kernel has dealt with the rest
 * (O_CREAT and O_EXCL come to create, O_CLOEXEC and O_NOCTTY are its). */
static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	BEGIN(req);
	struct statvfs sv;
	if (!(err = kura_statvfs(kfs, &sv)))
		fuse_reply_statfs(req, &sv);
	END(req);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size, int flags)
{
	BEGIN(req);
	struct target t;
	if (!(err = reach(ino, &path, &tfd, &t)) &&
	    !(err = kura_setxattrat(kfs, t.dirfd, t.path, name, value, size, flags, t.flags)))
		fuse_reply_err(req, 0);
	END(req);
}

/* getxattr (name) and listxattr (name NULL); size 0 asks how much. */
static void get_or_list(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	BEGIN(req);
	struct target t;
	char *buf = size ? malloc(size) : NULL;
	if (size && !buf)
		err = -ENOMEM;
	else if (!(err = reach(ino, &path, &tfd, &t))) {
		ssize_t n = name ? kura_getxattrat(kfs, t.dirfd, t.path, name, buf, size, t.flags)
				 : kura_listxattrat(kfs, t.dirfd, t.path, buf, size, t.flags);
		if (n < 0)
			err = (int)n;
		else if (size == 0)
			fuse_reply_xattr(req, n);
		else
			fuse_reply_buf(req, buf, n);
	}
	free(buf);
	END(req);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	get_or_list(req, ino, name, size);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	get_or_list(req, ino, NULL, size);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	BEGIN(req);
	struct target t;
	if (!(err = reach(ino, &path, &tfd, &t)) &&
	    !(err = kura_removexattrat(kfs, t.dirfd, t.path, name, t.flags)))
		fuse_reply_err(req, 0);
	END(req);
}

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	BEGIN(req);
	struct target t;
	if (!(err = reach(ino, &path, &tfd, &t)) && !(err = kura_faccessat(kfs, t.dirfd, t.path, mask, t.flags)))
		fuse_reply_err(req, 0);
	END(req);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.open = op_open,
	.create = op_create,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_release,
	.fsyncdir = op_fsync,
	.statfs = op_statfs,
	.setxattr = op_setxattr,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.removexattr = op_removexattr,
	.access = op_access,
	.fallocate = op_fallocate,
	.lseek = op_lseek,
	.copy_file_range = op_copy_file_range,
};

int kura_fuse_prepare(kura_fs *fs, const struct fuse_lowlevel_ops **out, size_t *size)
{
	struct stat st;
	int err = kura_lstat(fs, "/", &st);
	if (err)
		return err;
	kfs = fs;
	nodes_init(st.st_ino);
	*out = &ops;
	*size = sizeof ops;
	return 0;
}

void kura_fuse_finish(void)
{
	handles_close_all();
}
