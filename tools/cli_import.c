/*
 * cli_import.c — the walk of `kura import` and `kura stage-in` (commands in
 * cli_import_cmd.c): copy a host tree into a pool.
 *
 * Order of operations per object matters:
 *  - directories are created owner-writable (0700) and only get their real
 *    mode after they are filled, so read-only source directories can still
 *    receive their children when not running as root;
 *  - owner is set before mode because changing the owner clears set-id
 *    bits on many systems;
 *  - times come last: filling a directory or writing a file moves them.
 * Per-object errors are reported and the walk goes on; errors that will hit
 * every following object too (pool full, read-only, I/O error) stop it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_import.h"


static int is_fatal(int err)
{
	return err == ENOSPC || err == EDQUOT || err == EROFS || err == EIO || err == ENOMEM;
}

/* Workers fail too, while the walk reads fatal to stop early. */
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;

void imp_fail(struct imp *c, const char *path, int err)
{
	cli_err(c->cmd, path, err);
	pthread_mutex_lock(&fail_lock);
	c->errors++;
	pthread_mutex_unlock(&fail_lock);
	if (is_fatal(err))
		__atomic_store_n(&c->fatal, 1, __ATOMIC_RELAXED);
}

int imp_stopped(struct imp *c)
{
	return __atomic_load_n(&c->fatal, __ATOMIC_RELAXED);
}

static void attrs_in(struct imp *c, const char *spath, const char *kpath)
{
	int r = cli_xattrs_in(c->fs, spath, kpath);
	if (r)
		imp_fail(c, kpath, r);
}

static struct timespec *times_of(const struct stat *st, struct timespec ts[2])
{
	ts[0] = st->st_atim;
	ts[1] = st->st_mtim;
	return ts;
}

/* Replace a non-directory that is in the way in the pool; a directory in the
 * way is an error (merging a file over a directory is never intended). */
static int make_room(struct imp *c, const char *kpath)
{
	struct stat st;
	int r = kura_lstat(c->fs, kpath, &st);

	if (r < 0)
		return r;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	return kura_unlink(c->fs, kpath);
}

static int copy_data(struct imp *c, char *buf, int fd, int kfd, const char *spath, const char *kpath)
{
	off_t pos = 0, written_end = 0;
	int sparse = 1;
	struct stat st;

	for (;;) {
		off_t data = pos, hole = (off_t)INT64_MAX;

		/* Holes are skipped rather than copied as zeros so sparse files
		 * stay sparse in the pool and cost no copy time. */
		if (sparse) {
			data = lseek(fd, pos, SEEK_DATA);
			if (data < 0) {
				if (errno == ENXIO)
					break;
				sparse = 0;
				data = pos;
			} else {
				hole = lseek(fd, data, SEEK_HOLE);
				if (hole < 0)
					hole = (off_t)INT64_MAX;
			}
		}
		pos = data;
		while (pos < hole) {
			size_t want = CLI_COPY_BUF;
			ssize_t n;
			if ((off_t)want > hole - pos)
				want = (size_t)(hole - pos);
			n = pread(fd, buf, want, pos);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				imp_fail(c, spath, errno);
				return -1;
			}
			if (n == 0)
				goto eof;
			for (ssize_t done = 0; done < n;) {
				ssize_t w = kura_pwrite(c->fs, kfd, buf + done, (size_t)(n - done),
							pos + done);
				if (w < 0) {
					imp_fail(c, kpath, (int)-w);
					return -1;
				}
				done += w;
			}
			pos += n;
			written_end = pos;
			cli_progress_add(0, (uint64_t)n);
		}
		if (!sparse)
			break;
	}
eof:
	/* A trailing hole has no data to write; only the length records it. */
	if (fstat(fd, &st) == 0 && st.st_size > written_end) {
		int r = kura_ftruncate(c->fs, kfd, st.st_size);
		if (r < 0) {
			imp_fail(c, kpath, -r);
			return -1;
		}
	}
	return 0;
}

/* The file's contents, then owner, mode and times; both descriptors are
 * closed.  Run by the walk or by a stage-in worker. */
static void fill_file(struct imp *c, char *buf, int fd, int kfd, const char *spath, const char *kpath,
		      const struct stat *st)
{
	struct timespec ts[2];
	int r;

	if (!buf || copy_data(c, buf, fd, kfd, spath, kpath) < 0) {
		if (!buf)
			imp_fail(c, kpath, ENOMEM);
		/* A truncated copy with placeholder mode looks like a real file;
		 * better to leave nothing. */
		kura_close(c->fs, kfd);
		kura_unlink(c->fs, kpath);
		close(fd);
		return;
	}
	/* Each change is a transaction of its own: one that would change
	 * nothing (the ids the creator gave; the mode it was made with, unless
	 * a default ACL masked it or the source has set-id bits, which the
	 * creating open left out and a chown would clear) is left out. */
	struct stat kst;
	int known = kura_fstat(c->fs, kfd, &kst) == 0;
	int ids_differ = !known || kst.st_uid != st->st_uid || kst.st_gid != st->st_gid;
	int mode_differs = !known || (kst.st_mode & 07777) != (st->st_mode & 07777);
	if (c->as_root && ids_differ && (r = kura_fchown(c->fs, kfd, st->st_uid, st->st_gid)) < 0)
		imp_fail(c, kpath, -r);
	else if (mode_differs && (r = kura_fchmod(c->fs, kfd, st->st_mode & 07777)) < 0)
		imp_fail(c, kpath, -r);
	else if ((r = kura_futimens(c->fs, kfd, times_of(st, ts))) < 0)
		imp_fail(c, kpath, -r);
	r = kura_close(c->fs, kfd);
	if (r < 0)
		imp_fail(c, kpath, -r);
	if (c->so && c->so->verify) {
		int rfd = kura_open(c->fs, kpath, O_RDONLY | O_NOFOLLOW, 0);
		r = rfd < 0 ? rfd : cli_stage_compare(fd, c->fs, rfd, buf);
		if (rfd >= 0)
			kura_close(c->fs, rfd);
		if (r > 0)
			cli_msg(c->cmd, "%s: contents differ from %s after the copy", kpath, spath);
		if (r)
			imp_fail(c, kpath, r > 0 ? EIO : -r);
	}
	close(fd);
	attrs_in(c, spath, kpath);
	cli_progress_add(1, 0);
}

void imp_fill_job(void *ctx, struct cli_stage_job *j, char *buf)
{
	fill_file(ctx, buf, j->src_fd, j->dst_fd, j->src, j->dst, &j->st);
}

void import_file(struct imp *c, int dfd, const char *name, const char *spath,
			const char *kpath, const struct stat *st, int oflags, int fresh)
{
	struct stat kst;
	int fd, kfd, r;

	/* In a directory this pass made nothing can be identical already. */
	if (c->so && !fresh && kura_lstat(c->fs, kpath, &kst) == 0 && cli_stage_identical(st, &kst) &&
	    (!c->as_root || (kst.st_uid == st->st_uid && kst.st_gid == st->st_gid))) {
		if (st->st_nlink > 1 && !cli_linkmap_get(c->links, st->st_dev, st->st_ino) &&
		    cli_linkmap_put(c->links, st->st_dev, st->st_ino, kpath) < 0)
			imp_fail(c, kpath, ENOMEM);
		cli_progress_add(1, (uint64_t)st->st_size);
		return;
	}

	if (st->st_nlink > 1) {
		const char *first = cli_linkmap_get(c->links, st->st_dev, st->st_ino);
		if (first) {
			r = kura_link(c->fs, first, kpath);
			if (r == -EEXIST && (r = make_room(c, kpath)) == 0)
				r = kura_link(c->fs, first, kpath);
			if (r == 0) {
				cli_progress_add(1, 0);
				return;
			}
			/* e.g. EMLINK: fall back to an independent copy. */
			if (r != -EMLINK) {
				imp_fail(c, kpath, -r);
				return;
			}
		}
	}
	fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOATIME | oflags);
	if (fd < 0 && errno == EPERM) /* O_NOATIME needs ownership */
		fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | oflags);
	if (fd < 0) {
		imp_fail(c, spath, errno);
		return;
	}
	/* Made with its permission bits already (the creating open may write
	 * whatever they say); fill_file changes what still differs. */
	mode_t mode = st->st_mode & 0777;
	kfd = kura_open(c->fs, kpath, O_WRONLY | O_CREAT | O_EXCL, mode);
	if (kfd == -EEXIST) {
		r = make_room(c, kpath);
		kfd = r < 0 ? r : kura_open(c->fs, kpath, O_WRONLY | O_CREAT | O_EXCL, mode);
	}
	if (kfd < 0) {
		imp_fail(c, kpath, -kfd);
		close(fd);
		return;
	}
	if (st->st_nlink > 1 && cli_linkmap_put(c->links, st->st_dev, st->st_ino, kpath) < 0)
		imp_fail(c, kpath, ENOMEM);
	/* The pool takes one change at a time, so a worker gains only the
	 * source's reads, which for a small file cost less than handing it
	 * over (and the workers' turns at the pool's lock cost the walk). */
	if (c->stage && st->st_size > STAGE_SMALL_FILE && cli_stage_add(c->stage, fd, kfd, spath, kpath, st) == 0)
		return;
	fill_file(c, c->buf, fd, kfd, spath, kpath, st);
}

static void import_symlink(struct imp *c, int dfd, const char *name, const char *spath,
			   const char *kpath, const struct stat *st)
{
	size_t cap = st->st_size > 0 ? (size_t)st->st_size + 1 : PATH_MAX;
	struct timespec ts[2];
	char *target;
	ssize_t n;
	int r;

	/* Some file systems report a symlink size of 0; grow until it fits. */
	for (;;) {
		target = malloc(cap);
		if (!target) {
			imp_fail(c, spath, ENOMEM);
			return;
		}
		n = readlinkat(dfd, name, target, cap);
		if (n < 0) {
			imp_fail(c, spath, errno);
			free(target);
			return;
		}
		if ((size_t)n < cap)
			break;
		free(target);
		cap *= 2;
	}
	target[n] = '\0';
	r = kura_symlink(c->fs, target, kpath);
	if (r == -EEXIST && (r = make_room(c, kpath)) == 0)
		r = kura_symlink(c->fs, target, kpath);
	free(target);
	if (r < 0) {
		imp_fail(c, kpath, -r);
		return;
	}
	if (c->as_root && (r = kura_chown(c->fs, kpath, st->st_uid, st->st_gid, 1)) < 0)
		imp_fail(c, kpath, -r);
	else if ((r = kura_utimens(c->fs, kpath, times_of(st, ts), 1)) < 0)
		imp_fail(c, kpath, -r);
	attrs_in(c, spath, kpath);
	cli_progress_add(1, 0);
}

void import_dir(struct imp *c, int dfd, const char *name, const char *spath,
		       const char *kpath, const struct stat *st, int oflags);

static void import_special(struct imp *c, const char *spath, const char *kpath, const struct stat *st);

void import_contents(struct imp *c, int fd, const char *spath, const char *kpath, int fresh)
{
	int dup_fd = dup(fd);
	DIR *d = dup_fd < 0 ? NULL : fdopendir(dup_fd);
	struct dirent *de;

	if (!d) {
		imp_fail(c, spath, errno);
		if (dup_fd >= 0)
			close(dup_fd);
		return;
	}
	for (;;) {
		struct stat st;
		char *sp, *kp;

		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno)
				imp_fail(c, spath, errno);
			break;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		sp = cli_join(spath, de->d_name);
		kp = cli_join(kpath, de->d_name);
		if (!sp || !kp) {
			imp_fail(c, spath, ENOMEM);
			free(sp);
			free(kp);
			break;
		}
		if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			imp_fail(c, sp, errno);
		} else if (c->have_pool && st.st_dev == c->pool_dev && st.st_ino == c->pool_ino) {
			/* Copying the pool into itself would never end well. */
			cli_msg(c->cmd, "%s: skipping the destination pool file itself", sp);
		} else if (S_ISDIR(st.st_mode)) {
			import_dir(c, fd, de->d_name, sp, kp, &st, O_NOFOLLOW);
		} else if (S_ISREG(st.st_mode)) {
			import_file(c, fd, de->d_name, sp, kp, &st, O_NOFOLLOW, fresh);
		} else if (S_ISLNK(st.st_mode)) {
			import_symlink(c, fd, de->d_name, sp, kp, &st);
		} else {
			import_special(c, sp, kp, &st);
		}
		free(sp);
		free(kp);
		if (imp_stopped(c))
			break;
	}
	closedir(d);
}

/* FIFOs, sockets and device nodes: a name and attributes (kura opens none
 * of them); device nodes need root, as mknod(2) does, and are skipped
 * otherwise. */
static void import_special(struct imp *c, const char *spath, const char *kpath, const struct stat *st)
{
	struct timespec ts[2];
	int r;

	if ((S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) && !c->as_root) {
		cli_msg(c->cmd, "%s: skipping %s (only root makes device nodes)", spath, cli_type_name(st->st_mode));
		c->skipped++;
		return;
	}
	mode_t mode = st->st_mode & (S_IFMT | 07777);
	r = kura_mknod(c->fs, kpath, mode, st->st_rdev);
	if (r == -EEXIST && (r = make_room(c, kpath)) == 0)
		r = kura_mknod(c->fs, kpath, mode, st->st_rdev);
	if (r < 0) {
		imp_fail(c, kpath, -r);
		return;
	}
	if (c->as_root && (r = kura_chown(c->fs, kpath, st->st_uid, st->st_gid, 1)) < 0)
		imp_fail(c, kpath, -r);
	else if ((r = kura_chmod(c->fs, kpath, st->st_mode & 07777)) < 0)
		imp_fail(c, kpath, -r);
	else if ((r = kura_utimens(c->fs, kpath, times_of(st, ts), 1)) < 0)
		imp_fail(c, kpath, -r);
	attrs_in(c, spath, kpath);
	cli_progress_add(1, 0);
}

static int apply_dir_attrs(struct imp *c, const char *kpath, const struct stat *st)
{
	struct timespec ts[2];
	int r = 0;

	if (c->as_root)
		r = kura_chown(c->fs, kpath, st->st_uid, st->st_gid, 1);
	if (r == 0)
		r = kura_chmod(c->fs, kpath, st->st_mode & 07777);
	if (r == 0)
		r = kura_utimens(c->fs, kpath, times_of(st, ts), 1);
	return r;
}

void import_dir(struct imp *c, int dfd, const char *name, const char *spath,
		       const char *kpath, const struct stat *st, int oflags)
{
	struct stat kst;
	int fd, r;

	r = kura_mkdir(c->fs, kpath, 0700);
	int fresh = r == 0;
	if (r == -EEXIST) {
		/* An existing directory is merged into; anything else blocks. */
		r = kura_lstat(c->fs, kpath, &kst);
		if (r == 0 && !S_ISDIR(kst.st_mode))
			r = -EEXIST;
	}
	if (r < 0) {
		imp_fail(c, kpath, -r);
		return;
	}
	fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | oflags);
	if (fd < 0) {
		imp_fail(c, spath, errno);
	} else {
		import_contents(c, fd, spath, kpath, fresh);
		close(fd);
	}
	if (imp_stopped(c))
		return;
	r = apply_dir_attrs(c, kpath, st);
	if (r < 0)
		imp_fail(c, kpath, -r);
	attrs_in(c, spath, kpath);
}

