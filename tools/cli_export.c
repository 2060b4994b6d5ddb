/*
 * cli_export.c — the walk of `kura export` and `kura stage-out` (commands in
 * cli_export_cmd.c): recreate a pool tree on the host.  The mirror image of cli_import.c, with the same ordering rules:
 * create owner-writable, fill, then owner, mode, and times last (a file is
 * made with its final mode only where that is what set_attrs would give).
 * stage-out runs it on several threads, a directory each (cli_export_par.c).
 * Host objects are addressed relative to an open parent directory so a
 * symlink swapped in during the export cannot redirect writes elsewhere.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "cli_export.h"

/* Workers fail too, while the walk reads fatal to stop early. */
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;
/* The parallel walk may meet two names of one inode at once: the first to
 * look makes the file under this lock, so the other finds it to link to. */
static pthread_mutex_t links_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local char *thread_buf;

void exp_set_thread_buf(char *buf)
{
	thread_buf = buf;
}

void exp_fail(struct exp *c, const char *path, int err)
{
	cli_err(c->cmd, path, err);
	pthread_mutex_lock(&fail_lock);
	c->errors++;
	pthread_mutex_unlock(&fail_lock);
	if (err == ENOSPC || err == EDQUOT || err == EROFS || err == EIO || err == ENOMEM)
		__atomic_store_n(&c->fatal, 1, __ATOMIC_RELAXED);
}

int exp_stopped(struct exp *c)
{
	return __atomic_load_n(&c->fatal, __ATOMIC_RELAXED);
}

static void attrs_out(struct exp *c, const char *kpath, const char *hpath)
{
	int r = cli_xattrs_out(c->fs, kpath, hpath);
	if (r)
		exp_fail(c, hpath, r);
}

/* A non-directory in the way on the host is replaced, like cp(1) with
 * --remove-destination; a directory in the way is an error. */
static int make_room(int dfd, const char *name)
{
	struct stat st;

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	return unlinkat(dfd, name, 0) < 0 ? -errno : 0;
}

static int write_all(int fd, const char *buf, size_t len, off_t off)
{
	while (len) {
		ssize_t w = pwrite(fd, buf, len, off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += w;
		len -= (size_t)w;
		off += w;
	}
	return 0;
}

static int copy_data(struct exp *c, char *buf, int kfd, int fd, const char *kpath, const char *hpath)
{
	off_t pos = 0, written_end = 0;
	int sparse = 1, r;
	struct stat st;

	for (;;) {
		off_t data = pos, hole = (off_t)INT64_MAX;

		if (sparse) {
			data = kura_lseek(c->fs, kfd, pos, SEEK_DATA);
			if (data == -ENXIO)
				break;
			if (data < 0) {
				sparse = 0;
				data = pos;
			} else {
				hole = kura_lseek(c->fs, kfd, data, SEEK_HOLE);
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
			n = kura_pread(c->fs, kfd, buf, want, pos);
			if (n < 0) {
				exp_fail(c, kpath, (int)-n);
				return -1;
			}
			if (n == 0)
				goto eof;
			r = write_all(fd, buf, (size_t)n, pos);
			if (r < 0) {
				exp_fail(c, hpath, -r);
				return -1;
			}
			pos += n;
			written_end = pos;
			cli_progress_add(0, (uint64_t)n);
		}
		if (!sparse)
			break;
	}
eof:
	if (kura_fstat(c->fs, kfd, &st) == 0 && st.st_size > written_end &&
	    ftruncate(fd, st.st_size) < 0) {
		exp_fail(c, hpath, errno);
		return -1;
	}
	return 0;
}

/* Owner, mode, then times: the last word on a file or directory. */
static void set_attrs(struct exp *c, int fd, const char *hpath, const struct stat *st, int has)
{
	struct timespec ts[2] = { st->st_atim, st->st_mtim };

	if (c->as_root && !(has & EXP_HAS_OWNER) && fchown(fd, st->st_uid, st->st_gid) < 0)
		exp_fail(c, hpath, errno);
	else if (!(has & EXP_HAS_MODE) && fchmod(fd, st->st_mode & 07777) < 0)
		exp_fail(c, hpath, errno);
	else if (futimens(fd, ts) < 0)
		exp_fail(c, hpath, errno);
}

/* Whether the pool file's contents equal what was written to fd. */
static void verify(struct exp *c, char *buf, int kfd, int fd, const char *kpath, const char *hpath)
{
	char proc[64];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd); /* fd is write-only */
	int rfd = open(proc, O_RDONLY | O_CLOEXEC);
	int r = rfd < 0 ? -errno : cli_stage_compare(rfd, c->fs, kfd, buf);
	if (rfd >= 0)
		close(rfd);
	if (r > 0)
		cli_msg(c->cmd, "%s: contents differ from %s after the copy", hpath, kpath);
	if (r)
		exp_fail(c, hpath, r > 0 ? EIO : -r);
}

void exp_fill_file(struct exp *c, int kfd, int fd, const char *kpath, const char *hpath, const struct stat *st,
		   int has)
{
	char *buf = thread_buf ? thread_buf : c->buf;

	if (!buf || copy_data(c, buf, kfd, fd, kpath, hpath) < 0) {
		if (!buf)
			exp_fail(c, hpath, ENOMEM);
		/* A truncated copy with placeholder mode looks like a real file;
		 * better to leave nothing.  (By path: the name is the one just
		 * made, and a worker has no directory descriptor.) */
		close(fd);
		unlink(hpath);
		kura_close(c->fs, kfd);
		return;
	}
	set_attrs(c, fd, hpath, st, has);
	if (c->so && c->so->verify)
		verify(c, buf, kfd, fd, kpath, hpath);
	if (close(fd) < 0)
		exp_fail(c, hpath, errno);
	kura_close(c->fs, kfd);
	attrs_out(c, kpath, hpath);
	cli_progress_add(1, 0);
}

/* stage-out: nothing to do for a file the host already has; --watch: a
 * file changed within the last --settle seconds may still be being
 * written, and waits for a later pass. */
static int leave_for_now(struct exp *c, const struct exp_dir *d, const char *name, const char *hpath,
			 const struct stat *st)
{
	struct stat hst;
	struct timespec now;

	if (!c->so)
		return 0;
	if (c->so->watch) {
		clock_gettime(CLOCK_REALTIME, &now);
		double age = (double)(now.tv_sec - st->st_mtim.tv_sec) + (double)(now.tv_nsec - st->st_mtim.tv_nsec) / 1e9;
		if (age < c->so->settle) {
			__atomic_add_fetch(&c->unsettled, 1, __ATOMIC_RELAXED);
			return 1;
		}
	}
	/* A directory this pass made holds only what the pass put there. */
	if (d->fresh)
		return 0;
	if (fstatat(d->fd, name, &hst, AT_SYMLINK_NOFOLLOW) == 0 && cli_stage_identical(st, &hst) &&
	    (!c->as_root || (hst.st_uid == st->st_uid && hst.st_gid == st->st_gid))) {
		if (st->st_nlink > 1) {
			pthread_mutex_lock(&links_lock);
			if (!cli_linkmap_get(c->links, 0, st->st_ino) &&
			    cli_linkmap_put(c->links, 0, st->st_ino, hpath) < 0)
				exp_fail(c, hpath, ENOMEM);
			pthread_mutex_unlock(&links_lock);
		}
		cli_progress_add(1, (uint64_t)st->st_size);
		return 1;
	}
	return 0;
}

/* A further name of a hard-linked file already made: 1 when it is dealt
 * with (linked, or failed), 0 when a copy of its own is needed. */
static int link_to_first(struct exp *c, int dfd, const char *name, const char *hpath, const struct stat *st)
{
	const char *first = cli_linkmap_get(c->links, 0, st->st_ino);
	int r;

	if (!first)
		return 0;
	r = linkat(AT_FDCWD, first, dfd, name, 0) < 0 ? -errno : 0;
	if (r == -EEXIST && (r = make_room(dfd, name)) == 0)
		r = linkat(AT_FDCWD, first, dfd, name, 0) < 0 ? -errno : 0;
	if (r == 0) {
		cli_progress_add(1, 0);
		return 1;
	}
	if (r == -EMLINK)
		return 0;
	exp_fail(c, hpath, -r);
	return 1;
}

/* The permission bits to make a file with.  In a plain directory a file is
 * made with the creator's ids and the mode given less the umask, so when
 * that is the pool's mode already the fchmod after the fill is saved (and
 * the fchown, when the ids are ours).  Otherwise the file stays private
 * until set_attrs. */
static mode_t create_mode(const struct exp *c, const struct exp_dir *d, const struct stat *st, int *has)
{
	mode_t m = st->st_mode & 07777;

	*has = 0;
	if (!d->plain)
		return 0600;
	if (st->st_uid == c->euid && st->st_gid == c->egid)
		*has |= EXP_HAS_OWNER;
	/* fchown drops set-id bits: those always get their fchmod. */
	if ((m & 07000) || (m & c->umask))
		return 0600;
	*has |= EXP_HAS_MODE;
	return m;
}

static int create_file(int dfd, const char *name, mode_t mode)
{
	const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	int fd = openat(dfd, name, flags, mode);

	if (fd < 0 && errno == EEXIST) {
		int r = make_room(dfd, name);
		if (r < 0)
			errno = -r;
		else
			fd = openat(dfd, name, flags, mode);
	}
	return fd;
}

void export_file(struct exp *c, struct exp_dir *d, const char *name, const char *hpath,
		 const char *kpath, const struct stat *st, int kflags)
{
	int fd, kfd, has, linked = st->st_nlink > 1;
	mode_t mode;

	if (leave_for_now(c, d, name, hpath, st))
		return;
	if (linked) {
		pthread_mutex_lock(&links_lock);
		if (link_to_first(c, d->fd, name, hpath, st)) {
			pthread_mutex_unlock(&links_lock);
			return;
		}
	}
	kfd = kura_open(c->fs, kpath, O_RDONLY | kflags, 0);
	if (kfd < 0) {
		exp_fail(c, kpath, -kfd);
		fd = -1;
	} else {
		mode = create_mode(c, d, st, &has);
		fd = create_file(d->fd, name, mode);
		if (fd < 0) {
			exp_fail(c, hpath, errno);
			kura_close(c->fs, kfd);
		} else if (linked && cli_linkmap_put(c->links, 0, st->st_ino, hpath) < 0) {
			exp_fail(c, hpath, ENOMEM);
		}
	}
	if (linked)
		pthread_mutex_unlock(&links_lock);
	if (fd < 0)
		return;
	if (c->par && (uint64_t)st->st_size > STAGE_SMALL_FILE &&
	    exp_par_file(c->par, d, kfd, fd, kpath, hpath, st, has) == 0)
		return;
	exp_fill_file(c, kfd, fd, kpath, hpath, st, has);
}

static char *read_target(struct exp *c, const char *kpath)
{
	size_t cap = 256;

	for (;;) {
		char *buf = malloc(cap + 1);
		ssize_t n;
		if (!buf) {
			exp_fail(c, kpath, ENOMEM);
			return NULL;
		}
		n = kura_readlink(c->fs, kpath, buf, cap);
		if (n < 0) {
			exp_fail(c, kpath, (int)-n);
			free(buf);
			return NULL;
		}
		if ((size_t)n < cap) {
			buf[n] = '\0';
			return buf;
		}
		free(buf);
		cap *= 4;
	}
}

/* FIFOs, sockets and device nodes come back as the nodes they were
 * (device nodes only for root, as mknod(2) allows; skipped otherwise). */
static void export_special(struct exp *c, int dfd, const char *name, const char *hpath, const char *kpath,
			   const struct stat *st)
{
	struct timespec ts[2] = { st->st_atim, st->st_mtim };
	int r;

	if ((S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) && !c->as_root) {
		cli_msg(c->cmd, "%s: skipping %s (only root makes device nodes)", kpath, cli_type_name(st->st_mode));
		return;
	}
	r = mknodat(dfd, name, st->st_mode & (S_IFMT | 07777), st->st_rdev) < 0 ? -errno : 0;
	if (r == -EEXIST && (r = make_room(dfd, name)) == 0)
		r = mknodat(dfd, name, st->st_mode & (S_IFMT | 07777), st->st_rdev) < 0 ? -errno : 0;
	if (r < 0) {
		exp_fail(c, hpath, -r);
		return;
	}
	if (c->as_root && fchownat(dfd, name, st->st_uid, st->st_gid, AT_SYMLINK_NOFOLLOW) < 0)
		exp_fail(c, hpath, errno);
	else if (fchmodat(dfd, name, st->st_mode & 07777, AT_SYMLINK_NOFOLLOW) < 0)
		exp_fail(c, hpath, errno);
	else if (utimensat(dfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
		exp_fail(c, hpath, errno);
	attrs_out(c, kpath, hpath);
	cli_progress_add(1, 0);
}

static void export_symlink(struct exp *c, int dfd, const char *name, const char *hpath,
			   const char *kpath, const struct stat *st)
{
	struct timespec ts[2] = { st->st_atim, st->st_mtim };
	char *target = read_target(c, kpath);
	int r;

	if (!target)
		return;
	r = symlinkat(target, dfd, name) < 0 ? -errno : 0;
	if (r == -EEXIST && (r = make_room(dfd, name)) == 0)
		r = symlinkat(target, dfd, name) < 0 ? -errno : 0;
	free(target);
	if (r < 0) {
		exp_fail(c, hpath, -r);
		return;
	}
	if (c->as_root && fchownat(dfd, name, st->st_uid, st->st_gid, AT_SYMLINK_NOFOLLOW) < 0)
		exp_fail(c, hpath, errno);
	else if (utimensat(dfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
		exp_fail(c, hpath, errno);
	attrs_out(c, kpath, hpath);
	cli_progress_add(1, 0);
}

void exp_free_names(struct names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i]);
	free(ns->v);
}

/* The listing is read completely before recursing so that at most one kura
 * directory handle is open at a time, however deep the tree. */
int exp_list_dir(struct exp *c, const char *kpath, struct names *ns)
{
	struct kura_dirent de;
	int err = 0, r;
	kura_dir *d = kura_opendir(c->fs, kpath, &err);

	memset(ns, 0, sizeof(*ns));
	if (!d) {
		exp_fail(c, kpath, err < 0 ? -err : EIO);
		return -1;
	}
	while ((r = kura_readdir(d, &de)) > 0) {
		if (strcmp(de.name, ".") == 0 || strcmp(de.name, "..") == 0)
			continue;
		if (ns->n == ns->cap) {
			size_t ncap = ns->cap ? ns->cap * 2 : 64;
			char **nv = realloc(ns->v, ncap * sizeof(*nv));
			if (!nv) {
				r = -ENOMEM;
				break;
			}
			ns->v = nv;
			ns->cap = ncap;
		}
		if (!(ns->v[ns->n] = strdup(de.name))) {
			r = -ENOMEM;
			break;
		}
		ns->n++;
	}
	kura_closedir(d);
	if (r < 0) {
		exp_fail(c, kpath, -r);
		/* Still export what was listed: a partial copy beats none. */
	}
	return 0;
}

void export_contents(struct exp *c, struct exp_dir *d)
{
	const char *kpath = d->kpath, *hpath = d->hpath;
	int fd = d->fd;
	struct names ns;

	if (exp_list_dir(c, kpath, &ns) < 0)
		return;
	for (size_t i = 0; i < ns.n && !exp_stopped(c); i++) {
		char *kp = cli_join(kpath, ns.v[i]);
		char *hp = cli_join(hpath, ns.v[i]);
		struct stat st;
		int r;

		if (!kp || !hp) {
			exp_fail(c, kpath, ENOMEM);
		} else if ((r = kura_lstat(c->fs, kp, &st)) < 0) {
			exp_fail(c, kp, -r);
		} else if (S_ISDIR(st.st_mode)) {
			export_dir(c, d, ns.v[i], hp, kp, &st);
		} else if (S_ISREG(st.st_mode)) {
			export_file(c, d, ns.v[i], hp, kp, &st, O_NOFOLLOW);
		} else if (S_ISLNK(st.st_mode)) {
			export_symlink(c, fd, ns.v[i], hp, kp, &st);
		} else {
			export_special(c, fd, ns.v[i], hp, kp, &st);
		}
		free(kp);
		free(hp);
	}
	exp_free_names(&ns);
}

int exp_dir_open(struct exp *c, struct exp_dir *d)
{
	struct stat hst;

	d->fd = openat(d->at_fd, d->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (d->fd < 0) {
		exp_fail(c, d->hpath, errno);
		return -1;
	}
	/* Its files get our ids when its group is ours, and the mode asked
	 * for less the umask unless a default ACL says otherwise. */
	d->plain = d->fresh && fstat(d->fd, &hst) == 0 && hst.st_uid == c->euid && hst.st_gid == c->egid &&
		   fgetxattr(d->fd, "system.posix_acl_default", NULL, 0) < 0 &&
		   (errno == ENODATA || errno == ENOTSUP);
	return 0;
}

void exp_dir_done(struct exp *c, struct exp_dir *d)
{
	if (d->fd < 0)
		return;
	if (d->own && !exp_stopped(c))
		set_attrs(c, d->fd, d->hpath, &d->st, 0);
	close(d->fd);
	d->fd = -1;
	if (d->own)
		attrs_out(c, d->kpath, d->hpath);
}

void export_dir(struct exp *c, struct exp_dir *parent, const char *name, const char *hpath,
		const char *kpath, const struct stat *st)
{
	struct exp_dir d = { .fd = -1, .at_fd = parent->fd, .fresh = 1, .own = 1, .st = *st };
	struct stat hst;

	if (mkdirat(parent->fd, name, 0700) < 0) {
		int e = errno;
		/* An existing directory is merged into; anything else blocks. */
		if (e != EEXIST || fstatat(parent->fd, name, &hst, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(hst.st_mode)) {
			exp_fail(c, hpath, e);
			return;
		}
		d.fresh = 0;
	}
	d.name = (char *)name;
	d.hpath = (char *)hpath;
	d.kpath = (char *)kpath;
	/* Short of memory, the subtree is walked here instead. */
	if (c->par && exp_par_dir(c->par, &d, parent) == 0)
		return;
	if (exp_dir_open(c, &d) < 0)
		return;
	export_contents(c, &d);
	exp_dir_done(c, &d);
}

const char *exp_base_name(const char *p)
{
	const char *s = strrchr(p, '/');

	return s && s[1] ? s + 1 : p;
}

