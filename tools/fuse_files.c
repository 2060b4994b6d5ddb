/*
 * fuse_files.c — open files and directories of `kura mount`: each open is
 * a handle holding an engine descriptor, through which reads, writes,
 * syncs and directory listings go (fuse_ops.c has the rest).
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fuse_lowlevel.h>

#include "fuse_ops.h"

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

int handle_fd(struct fuse_file_info *fi)
{
	struct handle *h = handle_of(fi);
	return h ? h->fd : -1;
}

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

void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
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

void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
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

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
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

void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
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

void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino, (void)fi;
	/* Every write is in the pool when it returns: nothing to push. */
	fuse_reply_err(req, 0);
}

/* release and releasedir */
void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	drop_handle(handle_of(fi));
	fuse_reply_err(req, 0);
}

/* fsync and fsyncdir */
void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)ino, (void)datasync;
	BEGIN(req);
	if (!(err = kura_fsync(kfs, handle_of(fi)->fd)))
		fuse_reply_err(req, 0);
	END(req);
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
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

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	read_dir(req, ino, size, off, fi, 0);
}

void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	read_dir(req, ino, size, off, fi, 1);
}

void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
	(void)ino;
	BEGIN(req);
	if (!(err = kura_fallocate(kfs, handle_of(fi)->fd, mode, off, len)))
		fuse_reply_err(req, 0);
	END(req);
}

void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
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
void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
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

void handles_close_all(void)
{
	while (handles.head.next != &handles.head)
		drop_handle(handles.head.next);
}
