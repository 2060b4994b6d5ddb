/*
 * stdio.c — FILE streams on kura files.
 *
 * glibc's fopen/freopen open and read files through internal calls no
 * wrapper sees, so a stream on a kura file is a fopencookie stream whose
 * callbacks use our descriptor-level calls on a placeholder fd.  Such a
 * stream is a real glibc FILE: every stdio function works on it.  fileno()
 * of a cookie stream would be -1, so it is answered from a registry (C++
 * fstream and many programs need the fd).  The std streams are swapped for
 * cookie streams while fd 0/1/2 is a placeholder (fdtab.c).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kp.h"

struct cookie {
	int fd;
	int owns; /* fclose closes fd */
	FILE *f;
	struct cookie *next;
};

#define NBUCKET 1024
static struct cookie *buckets[NBUCKET];
static int nstreams;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned hash(FILE *f)
{
	return (unsigned)(((uintptr_t)f >> 4) % NBUCKET);
}

static struct cookie *lookup(FILE *f)
{
	if (!__atomic_load_n(&nstreams, __ATOMIC_ACQUIRE) || !f)
		return NULL;
	pthread_mutex_lock(&reg_lock);
	struct cookie *c = buckets[hash(f)];
	while (c && c->f != f)
		c = c->next;
	pthread_mutex_unlock(&reg_lock);
	return c;
}

static void unregister(struct cookie *c)
{
	pthread_mutex_lock(&reg_lock);
	for (struct cookie **p = &buckets[hash(c->f)]; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			nstreams--;
			break;
		}
	pthread_mutex_unlock(&reg_lock);
}

int kp_is_stream(FILE *f)
{
	return lookup(f) != NULL;
}

int kp_stream_fd(FILE *f)
{
	struct cookie *c = lookup(f);
	return c ? c->fd : -1;
}

static ssize_t c_read(void *cv, char *buf, size_t n)
{
	struct cookie *c = cv;
	return kp_read(c->fd, buf, n);
}

static ssize_t c_write(void *cv, const char *buf, size_t n)
{
	struct cookie *c = cv;
	size_t done = 0;
	while (done < n) {
		ssize_t r = kp_write(c->fd, buf + done, n - done);
		if (r <= 0)
			return done ? (ssize_t)done : -1;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

static int c_seek(void *cv, off64_t *off, int whence)
{
	struct cookie *c = cv;
	off_t r = kp_lseek(c->fd, *off, whence);
	if (r < 0)
		return -1;
	*off = r;
	return 0;
}

static int c_close(void *cv)
{
	struct cookie *c = cv;
	unregister(c);
	int r = c->owns ? kp_close(c->fd) : 0;
	free(c);
	return r;
}

static FILE *make_stream(int fd, const char *mode, int owns)
{
	struct cookie *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->fd = fd;
	c->owns = owns;
	cookie_io_functions_t io = { c_read, c_write, c_seek, c_close };
	/* fopencookie honours only r/w/a and '+'; the rest was applied at open. */
	char m[4] = { mode[0] == 'a' ? 'a' : mode[0] == 'w' ? 'w' : 'r', 0, 0, 0 };
	if (strchr(mode, '+'))
		m[1] = '+';
	FILE *f = fopencookie(c, m, io);
	if (!f) {
		free(c);
		return NULL;
	}
	c->f = f;
	pthread_mutex_lock(&reg_lock);
	c->next = buckets[hash(f)];
	buckets[hash(f)] = c;
	nstreams++;
	pthread_mutex_unlock(&reg_lock);
	return f;
}

FILE *kp_cookie_stream(int fd, const char *mode)
{
	return make_stream(fd, mode, 1);
}

FILE *kp_std_stream(int fd)
{
	struct kp_fd *e = kp_get(fd);
	int fl = e ? kura_fd_flags(kp_mounts[e->mnt].fs, e->kfd) : O_RDWR;
	const char *m = (fl & O_ACCMODE) == O_RDWR ? "r+" : (fl & O_ACCMODE) == O_WRONLY ? "w" : "r";
	FILE *f = make_stream(fd, m, 1);
	if (f && fd == 2)
		setvbuf(f, NULL, _IONBF, 0);
	return f;
}

void kp_stream_detach(FILE *f)
{
	struct cookie *c = lookup(f);
	if (!c)
		return;
	c->owns = 0;
	fclose(f);
}

/* "r", "w+", "a", with glibc's extra letters: e (O_CLOEXEC), x (O_EXCL). */
static int mode_flags(const char *mode, int *flags)
{
	int f;
	switch (mode[0]) {
	case 'r': f = O_RDONLY; break;
	case 'w': f = O_WRONLY | O_CREAT | O_TRUNC; break;
	case 'a': f = O_WRONLY | O_CREAT | O_APPEND; break;
	default: return -EINVAL;
	}
	for (const char *p = mode + 1; *p && *p != ','; p++) {
		if (*p == '+')
			f = (f & ~O_ACCMODE) | O_RDWR;
		else if (*p == 'e')
			f |= O_CLOEXEC;
		else if (*p == 'x')
			f |= O_EXCL;
	}
	*flags = f;
	return 0;
}

static int wants_kura(const char *path, struct kp_path *kp)
{
	if (kp_resolve(AT_FDCWD, path, kp) != 0)
		return 1; /* let open() report the error */
	return kp->where == KP_KURA || (path && kp_procfd(path) >= 0);
}

static FILE *open_stream(const char *path, const char *mode)
{
	int flags;
	int r = mode_flags(mode, &flags);
	if (r) {
		errno = -r;
		return NULL;
	}
	int fd = open(path, flags, 0666);
	if (fd < 0)
		return NULL;
	if (flags & O_APPEND)
		kp_lseek(fd, 0, SEEK_END);
	FILE *f = make_stream(fd, mode, 1);
	if (!f) {
		int er = errno;
		kp_close(fd);
		errno = er;
	}
	return f;
}

KP_EXPORT FILE *fopen(const char *path, const char *mode)
{
	struct kp_path kp;
	if (!KP_NN(path) || !wants_kura(path, &kp))
		return REAL(fopen)(path ? kp.p : path, mode);
	return open_stream(path, mode);
}

KP_EXPORT FILE *fopen64(const char *path, const char *mode)
{
	struct kp_path kp;
	if (!KP_NN(path) || !wants_kura(path, &kp))
		return REAL(fopen64)(path ? kp.p : path, mode);
	return open_stream(path, mode);
}

KP_EXPORT FILE *fdopen(int fd, const char *mode)
{
	if (!kp_get(fd))
		return REAL(fdopen)(fd, mode);
	int flags;
	if (mode_flags(mode, &flags) < 0) {
		errno = EINVAL;
		return NULL;
	}
	if (flags & O_CLOEXEC)
		fcntl(fd, F_SETFD, FD_CLOEXEC);
	return make_stream(fd, mode, 1);
}

static FILE *do_freopen(const char *path, const char *mode, FILE *stream, int is64)
{
	struct cookie *c = lookup(stream);
	struct kp_path kp;
	int to_kura = path && wants_kura(path, &kp);
	int stdfd = stream == stdin ? 0 : stream == stdout ? 1 : stream == stderr ? 2 : -1;
	if (!c && !to_kura)
		return is64 ? REAL(freopen64)(path ? kp.p : NULL, mode, stream)
			    : REAL(freopen)(path ? kp.p : NULL, mode, stream);
	if (!path) /* reopening our own stream with another mode */
		return kp_unsupported("freopen(NULL) of a kura stream", ENOTSUP), (FILE *)NULL;
	if (stdfd >= 0) {
		/* Keep the std stream's identity: put the new file on fd 0/1/2 and
		 * let the swap logic choose the matching stream. */
		int flags;
		if (mode_flags(mode, &flags) < 0) {
			errno = EINVAL;
			return NULL;
		}
		fflush(stream);
		int fd = open(path, flags & ~O_CLOEXEC, 0666);
		if (fd < 0)
			return NULL;
		if (fd != stdfd) {
			if (dup2(fd, stdfd) < 0) {
				int er = errno;
				close(fd);
				errno = er;
				return NULL;
			}
			close(fd);
		}
		if (flags & O_APPEND)
			lseek(stdfd, 0, SEEK_END);
		FILE *now = stdfd == 0 ? stdin : stdfd == 1 ? stdout : stderr;
		clearerr(now);
		return now;
	}
	/* Any other stream: a new FILE (glibc would segfault reopening a
	 * cookie stream in place). */
	fclose(stream);
	return to_kura ? open_stream(path, mode) : (is64 ? REAL(fopen64) : REAL(fopen))(kp.p, mode);
}

KP_EXPORT FILE *freopen(const char *path, const char *mode, FILE *stream) { return do_freopen(path, mode, stream, 0); }
KP_EXPORT FILE *freopen64(const char *path, const char *mode, FILE *stream) { return do_freopen(path, mode, stream, 1); }

KP_EXPORT int fileno(FILE *f)
{
	struct cookie *c = lookup(f);
	return c ? c->fd : REAL(fileno)(f);
}

KP_EXPORT int fileno_unlocked(FILE *f)
{
	struct cookie *c = lookup(f);
	return c ? c->fd : REAL(fileno_unlocked)(f);
}
