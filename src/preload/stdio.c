/*
 * stdio.c — FILE streams on kura files.
 *
 * glibc's fopen/freopen open and read files through internal calls no
 * wrapper sees, so a stream on a kura file is a fopencookie stream whose
 * callbacks use our descriptor-level calls on a placeholder fd.  Such a
 * stream is a real glibc FILE: every stdio function works on it.  fileno()
 * of a cookie stream would be -1, so it is answered from a registry (C++
 * fstream and many programs need the fd).  The std streams are swapped for
 * cookie streams while fd 0/1/2 is a placeholder (fdtab.c).  Their wide-
 * character side is wstdio.c's.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

#include "kp.h"
#include "stream.h"


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
	sighold_lock(&reg_lock);
	struct cookie *c = buckets[hash(f)];
	while (c && c->f != f)
		c = c->next;
	sighold_unlock(&reg_lock);
	return c;
}

struct cookie *kp_stream_cookie(FILE *f)
{
	return lookup(f);
}

static void unregister(struct cookie *c)
{
	sighold_lock(&reg_lock);
	for (struct cookie **p = &buckets[hash(c->f)]; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			nstreams--;
			break;
		}
	sighold_unlock(&reg_lock);
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

/* The streams kp_std_stream made, by descriptor and mode ("r", "w",
 * "r+"), handed out again each time the descriptor is a pool file anew. */
static FILE *std_kept[3][3];
static pthread_mutex_t std_lock = PTHREAD_MUTEX_INITIALIZER;

static int c_close(void *cv)
{
	struct cookie *c = cv;
	sighold_lock(&std_lock);
	for (int fd = 0; fd < 3; fd++)
		for (int m = 0; m < 3; m++)
			if (std_kept[fd][m] == c->f)
				std_kept[fd][m] = NULL;
	sighold_unlock(&std_lock);
	unregister(c);
	int r = c->owns && c->fd >= 0 ? kp_close(c->fd) : 0;
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
	sighold_lock(&reg_lock);
	c->next = buckets[hash(f)];
	buckets[hash(f)] = c;
	nstreams++;
	sighold_unlock(&reg_lock);
	return f;
}

FILE *kp_cookie_stream(int fd, const char *mode)
{
	return make_stream(fd, mode, 1);
}

/* A standard stream for fd 0, 1 or 2 while it is a pool file.  Kept
 * alive once made: a program may hold its address (bash's xtrace stream is
 * a copy of stderr) after the descriptor became a kernel one again, and the
 * stream reaches fd by number, whatever it is.  So it is never closed
 * behind the program's back, and the next time serves again. */
FILE *kp_std_stream(int fd)
{
	struct kp_fd *e = kp_get(fd);
	int fl = e ? kura_fd_flags(kp_mounts[e->mnt].fs, e->kfd) : O_RDWR;
	int acc = fl & O_ACCMODE, mi = acc == O_RDWR ? 2 : acc == O_WRONLY ? 1 : 0;
	static const char *const modes[3] = { "r", "w", "r+" };
	if (fd < 0 || fd > 2)
		return NULL;
	sighold_lock(&std_lock);
	FILE *f = std_kept[fd][mi];
	if (f) {
		/* A new file behind it: nothing of the last one's (buffered
		 * input, end of file, a write error) carries over. */
		__fpurge(f);
		clearerr(f);
	} else {
		f = make_stream(fd, modes[mi], 1);
		if (f && fd == 2)
			setvbuf(f, NULL, _IONBF, 0);
		std_kept[fd][mi] = f;
	}
	sighold_unlock(&std_lock);
	return f;
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
	/* glibc starts "a" streams at the end, "a+" ones at 0. */
	if ((flags & O_APPEND) && (flags & O_ACCMODE) == O_WRONLY)
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
	if (!KP_PATH_OK(path))
		return REAL(fopen)(path, mode);
	if (!wants_kura(path, &kp)) {
		FILE *f;
		while (!(f = REAL(fopen)(kp.p, mode)) && KP_HOST_MISS() && kp_host_resolve(&kp, AT_FDCWD))
			if (kp.where == KP_KURA)
				return open_stream(kp.host, mode);
		return f;
	}
	return open_stream(path, mode);
}

KP_EXPORT FILE *fopen64(const char *path, const char *mode)
{
	struct kp_path kp;
	if (!KP_PATH_OK(path))
		return REAL(fopen64)(path, mode);
	if (!wants_kura(path, &kp)) {
		FILE *f;
		while (!(f = REAL(fopen64)(kp.p, mode)) && KP_HOST_MISS() && kp_host_resolve(&kp, AT_FDCWD))
			if (kp.where == KP_KURA)
				return open_stream(kp.host, mode);
		return f;
	}
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
	/* As glibc: the mode may not ask for more access than the descriptor
	 * has; "a" turns on O_APPEND; "w" does not truncate. */
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return NULL;
	if ((fl & O_ACCMODE) != O_RDWR && (fl & O_ACCMODE) != (flags & O_ACCMODE)) {
		errno = EINVAL;
		return NULL;
	}
	if ((flags & O_APPEND) && !(fl & O_APPEND) && fcntl(fd, F_SETFL, fl | O_APPEND) < 0)
		return NULL;
	if (flags & O_CLOEXEC)
		fcntl(fd, F_SETFD, FD_CLOEXEC);
	return make_stream(fd, mode, 1);
}

/* glibc's FILE access bits (libio.h; ABI since 2.1): fopencookie derives
 * them from its mode once, and reopening in place must change them. */
#define KP_IO_NO_READS 0x0004
#define KP_IO_NO_WRITES 0x0008
#define KP_IO_IS_APPENDING 0x1000

/* Reopens cookie stream c->f in place: the FILE keeps its address and, as
 * glibc's freopen does, its descriptor number (the new file is moved onto
 * it).  The cookie is kept and re-pointed; glibc's own freopen cannot be
 * used on a cookie stream (it crashes on the missing wide-character data). */
static FILE *reopen_cookie(struct cookie *c, const char *path, const char *mode)
{
	FILE *f = c->f;
	int flags;
	if (mode_flags(mode, &flags) < 0) {
		errno = EINVAL;
		return NULL;
	}
	fflush(f); /* failure ignored, as glibc does */
	int nfd = open(path, flags, 0666);
	if (nfd < 0) {
		/* The stream is closed either way; its FILE stays valid for a
		 * later fclose, as after glibc's failed freopen. */
		int er = errno;
		if (c->fd >= 0 && c->owns)
			kp_close(c->fd);
		c->fd = -1;
		errno = er;
		return NULL;
	}
	if (c->fd >= 0 && c->owns && nfd != c->fd) {
		if (dup3(nfd, c->fd, (flags & O_CLOEXEC) ? O_CLOEXEC : 0) < 0) {
			int er = errno;
			close(nfd);
			kp_close(c->fd);
			c->fd = -1;
			errno = er;
			return NULL;
		}
		close(nfd);
	} else {
		if (c->fd >= 0 && c->owns && c->fd != nfd)
			kp_close(c->fd);
		c->fd = nfd;
	}
	c->owns = 1;
	int acc = flags & O_ACCMODE;
	f->_flags &= ~(KP_IO_NO_READS | KP_IO_NO_WRITES | KP_IO_IS_APPENDING);
	if (acc == O_WRONLY)
		f->_flags |= KP_IO_NO_READS;
	else if (acc == O_RDONLY)
		f->_flags |= KP_IO_NO_WRITES;
	if (flags & O_APPEND)
		f->_flags |= KP_IO_IS_APPENDING;
	/* The sync above dropped glibc's cached offset, so this seek reaches
	 * the new file; it also discards pushed-back bytes and clears EOF. */
	int er = errno;
	int whence = (flags & O_APPEND) && acc == O_WRONLY ? SEEK_END : SEEK_SET;
	if (fseeko(f, 0, whence) < 0)
		errno = er; /* a pipe or terminal: nothing to position */
	clearerr(f);
	return f;
}

static FILE *do_freopen(const char *path, const char *mode, FILE *stream, int is64)
{
	struct cookie *c = lookup(stream);
	struct kp_path kp;
	char again[PATH_MAX];
	if (!path && c) {
		/* freopen(NULL): the same file again, with the new mode (glibc
		 * reopens /proc/self/fd/N, a new open file description). */
		struct kp_fd *e = c->fd >= 0 ? kp_get(c->fd) : NULL;
		if (e && e->path)
			snprintf(again, sizeof again, "%s", e->path);
		else if (c->fd >= 0)
			snprintf(again, sizeof again, "/proc/self/fd/%d", c->fd);
		else {
			errno = EBADF;
			return NULL;
		}
		path = again;
	}
	int to_kura = path && wants_kura(path, &kp);
	int stdfd = stream == stdin ? 0 : stream == stdout ? 1 : stream == stderr ? 2 : -1;
	if (!c && !to_kura)
		return is64 ? REAL(freopen64)(path ? kp.p : NULL, mode, stream)
			    : REAL(freopen)(path ? kp.p : NULL, mode, stream);
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
	if (c)
		return reopen_cookie(c, path, mode);
	/* A glibc stream onto a kura file: its FILE cannot read through our
	 * descriptors, so it is closed and a new (cookie) FILE returned. */
	fclose(stream);
	return open_stream(path, mode);
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
