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

/* ---- open files ---- */

struct handle {
	fuse_ino_t ino;
	int fd;
	kura_dir *dir;
	struct handle *prev, *next;
};

/* Every handle, for the end: at SIGTERM the kernel may still have
 * releases queued that no one will serve. */
static struct {
	pthread_mutex_t mu;
	struct handle head;
} handles = { PTHREAD_MUTEX_INITIALIZER, { .prev = &handles.head, .next = &handles.head } };

static struct handle *handle_of(struct fuse_file_info *fi)
{
	return fi ? (struct handle *)(uintptr_t)fi->fh : NULL;
}

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
	struct handle *h = handle_of(fi);
	if (h)
		err = kura_fstat(kfs, h->fd, &st);
	else if (!(err = reach(ino, &path, &tfd, &t)))
		err = kura_fstatat(kfs, t.dirfd, t.path, &st, t.flags);
	if (!err)
		fuse_reply_attr(req, &st, 0);
	END(req);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi)
{
	BEGIN(req);
	struct handle *h = handle_of(fi);
	struct target t;
	/* An open file is changed through a descriptor: it may have no name
	 * any more.  Otherwise symlinks are not followed: the kernel has
	 * followed them already, and asks for the link itself (lchown). */
	if (h)
		t = (struct target){ h->fd, "", AT_EMPTY_PATH };
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
#define OPEN_FLAGS (O_ACCMODE | O_APPEND | O_TRUNC | O_NOATIME | O_SYNC | O_DSYNC | O_DIRECT)

static int new_handle(struct fuse_file_info *fi, fuse_ino_t ino, int fd, kura_dir *dir)
{
	struct handle *h = malloc(sizeof *h);
	if (!h)
		return -ENOMEM;
	h->ino = ino;
	h->fd = fd;
	h->dir = dir;
	/* Without it the node still works while it has a name. */
	(void)node_add_fd(ino, fd);
	pthread_mutex_lock(&handles.mu);
	h->prev = &handles.head;
	h->next = handles.head.next;
	h->next->prev = h;
	handles.head.next = h;
	pthread_mutex_unlock(&handles.mu);
	fi->fh = (uintptr_t)h;
	/* See the head comment: no page cache, so other processes' writes
	 * show at once.  The kernel then refuses shared maps (ENODEV). */
	fi->direct_io = 1;
	fi->keep_cache = 0;
	return 0;
}

static void drop_handle(struct handle *h)
{
	pthread_mutex_lock(&handles.mu);
	h->prev->next = h->next;
	h->next->prev = h->prev;
	pthread_mutex_unlock(&handles.mu);
	node_del_fd(h->ino, h->fd);
	if (h->dir)
		kura_closedir(h->dir); /* and its descriptor */
	else
		kura_close(kfs, h->fd);
	free(h);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	BEGIN(req);
	struct target t;
	if ((err = reach(ino, &path, &tfd, &t)))
		goto out;
	/* A file with no name is opened again as /proc/self/fd/N would be. */
	int flags = fi->flags & OPEN_FLAGS;
	int fd = tfd >= 0 ? kura_reopen(kfs, tfd, flags) : kura_open(kfs, path, flags | O_NOFOLLOW, 0);
	if (fd < 0) {
		err = fd;
		goto out;
	}
	if ((err = new_handle(fi, ino, fd, NULL)) < 0) {
		kura_close(kfs, fd);
		goto out;
	}
	if (fuse_reply_open(req, fi))
		drop_handle(handle_of(fi));
out:
	END(req);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	BEGIN(req);
	struct stat st;
	struct fuse_entry_param e;
	if ((err = child_path(parent, name, &path)))
		goto out;
	int fd = kura_open(kfs, path, (fi->flags & (OPEN_FLAGS | O_EXCL)) | O_CREAT, mode);
	if (fd < 0) {
		err = fd;
		goto out;
	}
	struct stat by_name;
	uint32_t gen = 0;
	if ((err = kura_fstat(kfs, fd, &st))) {
		kura_close(kfs, fd);
		goto out;
	}
	/* 0 (no generation) if another process renamed it already. */
	if (kura_fstatat_gen(kfs, KURA_AT_ROOT, path, &by_name, &gen, AT_SYMLINK_NOFOLLOW) < 0 ||
	    by_name.st_ino != st.st_ino)
		gen = 0;
	fill_entry(&e, &st, gen);
	if ((err = node_ref(e.ino, parent, name, 1))) {
		kura_close(kfs, fd);
		goto out;
	}
	if ((err = new_handle(fi, e.ino, fd, NULL))) {
		node_unref(e.ino, 1);
		kura_close(kfs, fd);
		goto out;
	}
	if (fuse_reply_create(req, &e, fi)) {
		drop_handle(handle_of(fi));
		node_unref(e.ino, 1);
	}
out:
	END(req);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	BEGIN(req);
	char *buf = malloc(size ? size : 1);
	ssize_t n = buf ? kura_pread(kfs, handle_of(fi)->fd, buf, size, off) : -ENOMEM;
	if (n < 0)
		err = (int)n;
	else
		fuse_reply_buf(req, buf, n);
	free(buf);
	END(req);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	(void)ino;
	BEGIN(req);
	ssize_t n = kura_pwrite(kfs, handle_of(fi)->fd, buf, size, off);
	if (n < 0)
		err = (int)n;
	else
		fuse_reply_write(req, n);
	END(req);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino, (void)fi;
	/* Every write is in the pool when it returns: nothing to push. */
	fuse_reply_err(req, 0);
}

/* release and releasedir */
static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	drop_handle(handle_of(fi));
	fuse_reply_err(req, 0);
}

/* fsync and fsyncdir */
static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)ino, (void)datasync;
	BEGIN(req);
	if (!(err = kura_fsync(kfs, handle_of(fi)->fd)))
		fuse_reply_err(req, 0);
	END(req);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	BEGIN(req);
	if ((err = resolve(ino, &path)))
		goto out;
	kura_dir *d = kura_opendir(kfs, path, &err);
	if (!d)
		goto out;
	if ((err = new_handle(fi, ino, kura_dirfd(d), d)) < 0) {
		kura_closedir(d);
		goto out;
	}
	fi->cache_readdir = 0;
	if (fuse_reply_open(req, fi))
		drop_handle(handle_of(fi));
out:
	END(req);
}

/* readdir and readdirplus: entries from offset off (an engine cookie, 0
 * the start) as many as fit in size bytes. */
static void read_dir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi, int plus)
{
	BEGIN(req);
	kura_dir *d = handle_of(fi)->dir;
	char *buf = malloc(size);
	size_t used = 0;
	if (!buf) {
		err = -ENOMEM;
		goto out;
	}
	kura_seekdir(d, off);
	for (;;) {
		long before = kura_telldir(d);
		struct kura_dirent ent;
		int rc = kura_readdir(d, &ent);
		if (rc < 0 && used == 0)
			err = rc;
		if (rc <= 0)
			break;
		int dots = strcmp(ent.name, ".") == 0 || strcmp(ent.name, "..") == 0;
		struct fuse_entry_param e = { 0 };
		e.attr.st_ino = ent.ino;
		e.attr.st_mode = DTTOIF(ent.type);
		size_t need;
		if (plus && !dots) {
			/* By the directory's own descriptor: its path may have
			 * changed since it was opened. */
			struct stat st;
			uint32_t gen;
			if (kura_fstatat_gen(kfs, handle_of(fi)->fd, ent.name, &st, &gen, AT_SYMLINK_NOFOLLOW) < 0)
				continue; /* gone since the entry was read */
			fill_entry(&e, &st, gen);
		}
		if (plus)
			need = fuse_add_direntry_plus(req, buf + used, size - used, ent.name, &e, ent.next_cookie);
		else
			need = fuse_add_direntry(req, buf + used, size - used, ent.name, &e.attr, ent.next_cookie);
		if (need > size - used) {
			kura_seekdir(d, before);
			break;
		}
		used += need;
		/* A readdirplus entry is a lookup the kernel counts (but not
		 * for "." and ".."). */
		if (plus && !dots && node_ref(e.ino, ino, ent.name, 1) < 0) {
			used -= need; /* cannot count it: leave it to a lookup */
			kura_seekdir(d, before);
			break;
		}
	}
	if (!err)
		fuse_reply_buf(req, buf, used);
out:
	free(buf);
	END(req);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	read_dir(req, ino, size, off, fi, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	read_dir(req, ino, size, off, fi, 1);
}

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

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
	(void)ino;
	BEGIN(req);
	if (!(err = kura_fallocate(kfs, handle_of(fi)->fd, mode, off, len)))
		fuse_reply_err(req, 0);
	END(req);
}

static void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	(void)ino;
	BEGIN(req);
	/* Only SEEK_DATA and SEEK_HOLE come here; the offset of the
	 * engine's descriptor is never used for I/O (pread/pwrite). */
	off_t pos = kura_lseek(kfs, handle_of(fi)->fd, off, whence);
	if (pos < 0)
		err = (int)pos;
	else
		fuse_reply_lseek(req, pos);
	END(req);
}

/* A copy inside the server: one request instead of a read and a write
 * request per chunk.  As on Linux it is not atomic, and a short count
 * says where it stopped. */
static void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
			       fuse_ino_t ino_out, off_t off_out, struct fuse_file_info *fi_out, size_t len,
			       int flags)
{
	(void)ino_in, (void)ino_out;
	BEGIN(req);
	size_t chunk = len < (1u << 20) ? len : (1u << 20), done = 0;
	char *buf = malloc(chunk ? chunk : 1);
	if (flags)
		err = -EINVAL;
	else if (!buf)
		err = -ENOMEM;
	while (!err && done < len) {
		size_t want = len - done < chunk ? len - done : chunk;
		ssize_t n = kura_pread(kfs, handle_of(fi_in)->fd, buf, want, off_in + (off_t)done);
		ssize_t w = n > 0 ? kura_pwrite(kfs, handle_of(fi_out)->fd, buf, n, off_out + (off_t)done) : n;
		if (w < 0 && done == 0)
			err = (int)w;
		if (w <= 0)
			break;
		done += w;
		if (w < n)
			break;
	}
	free(buf);
	if (!err)
		fuse_reply_write(req, done);
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
	while (handles.head.next != &handles.head)
		drop_handle(handles.head.next);
}
