/*
 * io.c — open, close and the descriptor-level calls.
 *
 * For a placeholder fd the call goes to the engine with the kura descriptor
 * behind it; for any other fd it goes to libc untouched.  The kernel fd is
 * kept in step: dup/dup2/F_DUPFD duplicate the placeholder in the kernel and
 * the description in the engine, so offsets stay shared as POSIX wants.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kp.h"

#define FS(e) (kp_mounts[(e)->mnt].fs)

static mode_t umask_cache;
static int umask_known;

static mode_t cur_umask(void)
{
	if (!umask_known) {
		mode_t m = REAL(umask)(022);
		REAL(umask)(m);
		umask_cache = m;
		umask_known = 1;
	}
	return umask_cache;
}

KP_EXPORT mode_t umask(mode_t m)
{
	mode_t old = REAL(umask)(m);
	umask_cache = m & 0777;
	umask_known = 1;
	__atomic_add_fetch(&kp_creds_gen, 1, __ATOMIC_RELEASE); /* the engine's copy, in the creds */
	return old;
}

mode_t kp_umask(void)
{
	return cur_umask();
}

/* ---- open ---- */

/* Whether an open with these flags follows a symlink in the last component. */
static int open_follows(int flags)
{
	return !(flags & O_NOFOLLOW) && (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL);
}

/* The open left the pool through a symlink: open what it leads to, with
 * the caller's flags and mode. */
static int open_escaped(struct kp_path *kp, int flags, mode_t mode)
{
	int r = kp_escape(kp, open_follows(flags));
	if (r)
		return (int)kp_ret(r);
	if (kp->where == KP_KURA)
		return kp_open_path(kp, flags, mode); /* back in through a host symlink */
	return REAL(openat)(AT_FDCWD, kp->p, flags, mode);
}

int kp_open_path(struct kp_path *kp, int flags, mode_t mode)
{
	kura_fs *fs = kp_fs(kp->mnt);
	if (!fs)
		return -1;
	int flags0 = flags;
	mode_t mode0 = mode;
	int tmpfile = (flags & O_TMPFILE) == O_TMPFILE;
	if (flags & O_PATH) /* kura has no path-only opens: a read-only open serves the uses we see */
		flags = (flags & ~(O_PATH | O_ACCMODE)) | O_RDONLY;
	int acc = flags & O_ACCMODE;
	if (!tmpfile && (acc != O_RDONLY || (flags & O_TRUNC)) && (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL)) {
		int busy = kp_exec_check_write(kp->mnt, kp->kdirfd, kp->p, open_follows(flags), acc);
		if (busy)
			return (int)kp_ret(busy);
	}
	int kfd = kura_openat(fs, kp->kdirfd, kp->p, flags & ~O_CLOEXEC, mode);
	if (kfd == KURA_ESCAPED)
		return open_escaped(kp, flags0, mode0);
	/* The engine opens no FIFO: the kernel's pipe behind it (socket.c). */
	if (kfd == -EOPNOTSUPP || kfd == -ENXIO) {
		int pfd = kp_fifo_open(fs, kp->kdirfd, kp->p, flags);
		if (pfd != -EOPNOTSUPP)
			return pfd < 0 ? (int)kp_ret(pfd) : pfd;
	}
	/* Nor a device: the kernel's node for it (socket.c). */
	if (kfd == -EACCES) {
		int dfd = kp_dev_open(kp->mnt, fs, kp->kdirfd, kp->p, flags);
		if (dfd >= 0)
			return dfd;
	}
	if (kfd < 0)
		return (int)kp_ret(kfd);
	struct stat st;
	int isdir = kura_fstat(fs, kfd, &st) == 0 && S_ISDIR(st.st_mode);
	/* The name the descriptor shows: what the path came to ("d/.." is the
	 * parent); Linux names an unnamed file "DIR/#INO" (readlink adds
	 * " (deleted)"). */
	char name[PATH_MAX + 32];
	if (tmpfile)
		snprintf(name, sizeof name, "%s/#%llu", kp->host, (unsigned long long)st.st_ino);
	else
		snprintf(name, sizeof name, "%s", kp->host);
	kp_normalise(name);
	return kp_install(kp->mnt, kfd, flags & O_CLOEXEC, kp->host[0] ? name : NULL, isdir && !tmpfile);
}

/* Opening /proc/self/fd/N or /dev/fd/N of a placeholder: as Linux, a new
 * description of the same file (own offset, the new open's flags), even if
 * the file was unlinked meanwhile; with O_TMPFILE, an unnamed file in the
 * directory it names. */
static int reopen_fd(int pfd, int flags, mode_t mode)
{
	struct kp_fd *e = kp_get(pfd);
	if ((flags & O_NOFOLLOW) && !(flags & O_PATH))
		return (int)kp_ret(-ELOOP); /* the magic link itself is a symlink */
	if ((flags & O_TMPFILE) == O_TMPFILE) {
		struct kp_path kp = { .where = KP_KURA, .mnt = e->mnt, .kdirfd = e->kfd, .p = "." };
		snprintf(kp.host, sizeof kp.host, "%s", e->path && e->isdir ? e->path : "");
		return kp_open_path(&kp, flags, mode);
	}
	if (flags & O_PATH)
		flags = (flags & ~(O_PATH | O_ACCMODE)) | O_RDONLY;
	int64_t ino = kura_fd_ino(FS(e), e->kfd);
	int writes = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
	int busy = writes && ino > 0 && kp_exec_busy(e->mnt, (uint64_t)ino);
	/* When busy, opened (without truncating) only for the errors Linux
	 * reports before ETXTBSY. */
	int kfd = kura_reopen(FS(e), e->kfd, (flags & ~(O_CLOEXEC | O_NOFOLLOW)) & ~(busy ? O_TRUNC : 0));
	if (kfd >= 0 && busy) {
		kura_close(FS(e), kfd);
		kfd = -ETXTBSY;
	}
	if (kfd < 0)
		return (int)kp_ret(kfd);
	return kp_install(e->mnt, kfd, flags & O_CLOEXEC, e->path, e->isdir);
}

static int do_openat(int dirfd, const char *path, int flags, mode_t mode)
{
	kp_config();
	if (kp_inside)
		return kp_relocate(REAL(openat)(dirfd, path, flags, mode));
	if (kp_nmounts == 0 || !KP_PATH_OK(path))
		return REAL(openat)(dirfd, path, flags, mode); /* the kernel's EFAULT or ENAMETOOLONG */
	if (path[0] == '/' && (path[1] == 'p' || path[1] == 'd')) {
		int pfd = kp_procfd(path);
		if (pfd >= 0)
			return reopen_fd(pfd, flags, mode);
	}
	struct kp_path kp;
	int r = kp_classify(dirfd, path, &kp);
	if (r)
		return (int)kp_ret(r);
	if (kp.where != KP_KURA) {
		int kdir = kp.where == KP_KERNEL ? dirfd : AT_FDCWD;
		int fd = REAL(openat)(kdir, kp.p, flags, mode);
		if (fd >= 0 || !KP_HOST_MISS() || !kp_host_link(&kp, kdir, open_follows(flags)))
			return fd;
	}
	return kp_open_path(&kp, flags, mode);
}

static mode_t va_mode(int flags, va_list ap)
{
	return ((flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE) ? (mode_t)va_arg(ap, int) : 0;
}

KP_EXPORT int open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = va_mode(flags, ap);
	va_end(ap);
	return do_openat(AT_FDCWD, path, flags, m);
}

KP_EXPORT int open64(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = va_mode(flags, ap);
	va_end(ap);
	return do_openat(AT_FDCWD, path, flags, m);
}

KP_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = va_mode(flags, ap);
	va_end(ap);
	return do_openat(dirfd, path, flags, m);
}

KP_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = va_mode(flags, ap);
	va_end(ap);
	return do_openat(dirfd, path, flags, m);
}

KP_EXPORT int __open_2(const char *path, int flags) { return do_openat(AT_FDCWD, path, flags, 0); }
KP_EXPORT int __open64_2(const char *path, int flags) { return do_openat(AT_FDCWD, path, flags, 0); }
KP_EXPORT int __openat_2(int d, const char *path, int flags) { return do_openat(d, path, flags, 0); }
KP_EXPORT int __openat64_2(int d, const char *path, int flags) { return do_openat(d, path, flags, 0); }
KP_EXPORT int creat(const char *path, mode_t m) { return do_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, m); }
KP_EXPORT int creat64(const char *path, mode_t m) { return do_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, m); }

/* ---- close ---- */

int kp_close(int fd)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(close)(fd);
	kp_std_preflush(fd);
	kp_release(fd);
	int r = REAL(close)(fd);
	kp_std_fixup(fd);
	return r;
}

KP_EXPORT int close(int fd)
{
	/* Programs closing "every" fd must not take the template with them:
	 * its number could be reused by a real file we would then duplicate. */
	if (fd >= 0 && fd == kp_template_fd())
		return 0;
	return kp_close(fd);
}

struct range { unsigned lo, hi; };

static void release_in(int fd, struct kp_fd *e, void *arg)
{
	(void)e;
	struct range *r = arg;
	if ((unsigned)fd >= r->lo && (unsigned)fd <= r->hi)
		kp_release(fd);
}

KP_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
	kp_config();
	if (first > last) {
		errno = EINVAL;
		return -1;
	}
	if (!(flags & CLOSE_RANGE_CLOEXEC)) {
		struct range r = { first, last };
		kp_foreach(release_in, &r);
	}
	/* Split the range around internal descriptors (ascending order). */
	unsigned keep[KP_MAX_MOUNTS + 1];
	int nk = 0;
	for (int i = 0; i < kp_nmounts; i++)
		if (kp_mounts[i].fs && kura_state_fd(kp_mounts[i].fs) >= 0)
			keep[nk++] = (unsigned)kura_state_fd(kp_mounts[i].fs);
	if (kp_template_fd() >= 0)
		keep[nk++] = (unsigned)kp_template_fd();
	for (int i = 1; i < nk; i++)
		for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			unsigned t = keep[j];
			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	unsigned long long lo = first;
	for (int i = 0; i < nk; i++) {
		unsigned s = keep[i];
		if (s >= lo && s <= last) {
			if (s > lo && REAL(close_range)((unsigned)lo, s - 1, flags) < 0)
				return -1;
			lo = (unsigned long long)s + 1;
		}
	}
	int r = lo <= last ? REAL(close_range)((unsigned)lo, last, flags) : 0;
	for (unsigned fd = first; fd <= 2 && fd <= last; fd++)
		kp_std_fixup((int)fd);
	return r;
}

KP_EXPORT void closefrom(int lowfd)
{
	if (lowfd < 0)
		lowfd = 0;
	close_range((unsigned)lowfd, ~0u, 0);
}

/* ---- data ---- */

KP_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(read)(fd, buf, n);
	return kp_ret(kura_read(FS(e), e->kfd, buf, n));
}

ssize_t kp_read(int fd, void *buf, size_t n) { return read(fd, buf, n); }

KP_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	(void)buflen;
	return read(fd, buf, n);
}

KP_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(write)(fd, buf, n);
	return kp_ret(kura_write(FS(e), e->kfd, buf, n));
}

ssize_t kp_write(int fd, const void *buf, size_t n) { return write(fd, buf, n); }

KP_EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(pread)(fd, buf, n, off);
	return kp_ret(kura_pread(FS(e), e->kfd, buf, n, off));
}
KP_EXPORT ssize_t pread64(int fd, void *buf, size_t n, off_t off) { return pread(fd, buf, n, off); }
KP_EXPORT ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t bl) { (void)bl; return pread(fd, buf, n, off); }
KP_EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t n, off_t off, size_t bl) { (void)bl; return pread(fd, buf, n, off); }

KP_EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(pwrite)(fd, buf, n, off);
	return kp_ret(kura_pwrite(FS(e), e->kfd, buf, n, off));
}
KP_EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }

/* Vectors: gathered into one buffer when small so that an O_APPEND record
 * stays one write; otherwise element by element. off < 0: current offset. */
static ssize_t kvec(struct kp_fd *e, const struct iovec *iov, int cnt, off_t off, int wr)
{
	if (cnt < 0 || cnt > IOV_MAX)
		return kp_ret(-EINVAL);
	size_t total = 0;
	for (int i = 0; i < cnt; i++)
		total += iov[i].iov_len;
	if (wr && total <= 65536 && cnt > 1) {
		char *b = malloc(total ? total : 1), *p = b;
		if (!b)
			return kp_ret(-ENOMEM);
		for (int i = 0; i < cnt; i++) {
			memcpy(p, iov[i].iov_base, iov[i].iov_len);
			p += iov[i].iov_len;
		}
		ssize_t r = off < 0 ? kura_write(FS(e), e->kfd, b, total) : kura_pwrite(FS(e), e->kfd, b, total, off);
		free(b);
		return kp_ret(r);
	}
	ssize_t done = 0;
	for (int i = 0; i < cnt; i++) {
		ssize_t r;
		if (wr)
			r = off < 0 ? kura_write(FS(e), e->kfd, iov[i].iov_base, iov[i].iov_len)
				    : kura_pwrite(FS(e), e->kfd, iov[i].iov_base, iov[i].iov_len, off + done);
		else
			r = off < 0 ? kura_read(FS(e), e->kfd, iov[i].iov_base, iov[i].iov_len)
				    : kura_pread(FS(e), e->kfd, iov[i].iov_base, iov[i].iov_len, off + done);
		if (r < 0)
			return done ? done : kp_ret(r);
		done += r;
		if ((size_t)r < iov[i].iov_len)
			break;
	}
	return done;
}

KP_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	struct kp_fd *e = kp_get(fd);
	return e ? kvec(e, iov, cnt, -1, 0) : REAL(readv)(fd, iov, cnt);
}
KP_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	struct kp_fd *e = kp_get(fd);
	return e ? kvec(e, iov, cnt, -1, 1) : REAL(writev)(fd, iov, cnt);
}
KP_EXPORT ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
	struct kp_fd *e = kp_get(fd);
	if (e && off < 0)
		return kp_ret(-EINVAL);
	return e ? kvec(e, iov, cnt, off, 0) : REAL(preadv)(fd, iov, cnt, off);
}
KP_EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off_t off) { return preadv(fd, iov, cnt, off); }
KP_EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	struct kp_fd *e = kp_get(fd);
	if (e && off < 0)
		return kp_ret(-EINVAL);
	return e ? kvec(e, iov, cnt, off, 1) : REAL(pwritev)(fd, iov, cnt, off);
}
KP_EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off) { return pwritev(fd, iov, cnt, off); }
/* The RWF_ hints need no work here: every kura write is already synchronous. */
KP_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int fl)
{
	struct kp_fd *e = kp_get(fd);
	return e ? kvec(e, iov, cnt, off < 0 ? -1 : off, 0) : REAL(preadv2)(fd, iov, cnt, off, fl);
}
KP_EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off_t off, int fl) { return preadv2(fd, iov, cnt, off, fl); }
KP_EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int fl)
{
	struct kp_fd *e = kp_get(fd);
	return e ? kvec(e, iov, cnt, off < 0 ? -1 : off, 1) : REAL(pwritev2)(fd, iov, cnt, off, fl);
}
KP_EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int fl) { return pwritev2(fd, iov, cnt, off, fl); }

KP_EXPORT off_t lseek(int fd, off_t off, int whence)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(lseek)(fd, off, whence);
	if (e->dir && whence == SEEK_SET && off == 0)
		kura_rewinddir(e->dir); /* getdents64 readers rewind this way */
	return kp_ret(kura_lseek(FS(e), e->kfd, off, whence));
}
KP_EXPORT off_t lseek64(int fd, off_t off, int whence) { return lseek(fd, off, whence); }
off_t kp_lseek(int fd, off_t off, int whence) { return lseek(fd, off, whence); }

/* Copies between descriptors when one end is kura: a plain loop, since the
 * kernel cannot see kura data.  `inoff`/`outoff` NULL mean the fd offsets. */
static ssize_t copy_loop(int in, off_t *inoff, int out, off_t *outoff, size_t len)
{
	char buf[65536];
	size_t done = 0;
	while (done < len) {
		size_t n = len - done < sizeof buf ? len - done : sizeof buf;
		ssize_t r = inoff ? pread(in, buf, n, *inoff) : read(in, buf, n);
		if (r < 0)
			return done ? (ssize_t)done : -1;
		if (r == 0)
			break;
		ssize_t w = 0;
		while (w < r) {
			ssize_t x = outoff ? pwrite(out, buf + w, (size_t)(r - w), *outoff + w)
					   : write(out, buf + w, (size_t)(r - w));
			if (x < 0) {
				/* Leave the input where the output stopped. */
				if (!inoff)
					lseek(in, -(off_t)(r - w), SEEK_CUR);
				return done + (size_t)w ? (ssize_t)(done + (size_t)w) : -1;
			}
			w += x;
		}
		if (inoff)
			*inoff += r;
		if (outoff)
			*outoff += r;
		done += (size_t)r;
		if ((size_t)r < n)
			break;
	}
	return (ssize_t)done;
}

KP_EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t count)
{
	if (!kp_get(out) && !kp_get(in))
		return REAL(sendfile)(out, in, off, count);
	return copy_loop(in, off, out, NULL, count);
}
KP_EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t count) { return sendfile(out, in, off, count); }

KP_EXPORT ssize_t copy_file_range(int in, off_t *inoff, int out, off_t *outoff, size_t len, unsigned flags)
{
	if (!kp_get(out) && !kp_get(in))
		return REAL(copy_file_range)(in, inoff, out, outoff, len, flags);
	if (flags)
		return kp_ret(-EINVAL);
	return copy_loop(in, inoff, out, outoff, len);
}

KP_EXPORT ssize_t splice(int in, off_t *inoff, int out, off_t *outoff, size_t len, unsigned flags)
{
	if (!kp_get(out) && !kp_get(in))
		return REAL(splice)(in, inoff, out, outoff, len, flags);
	/* One end is a pipe (splice's rule); a copy loop moves the same bytes. */
	return copy_loop(in, inoff, out, outoff, len);
}

/* ---- dup ---- */

KP_EXPORT int dup(int fd)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(dup)(fd);
	int kfd = kura_dup(FS(e), e->kfd);
	if (kfd < 0)
		return (int)kp_ret(kfd);
	int nfd = REAL(dup)(fd);
	if (nfd < 0) {
		int er = errno;
		kura_close(FS(e), kfd);
		errno = er;
		return -1;
	}
	kp_attach(nfd, e->mnt, kfd, e->path, e->isdir);
	return nfd;
}

static int do_dup3(int old, int new, int flags, int is2)
{
	kp_config();
	struct kp_fd *e = kp_get(old);
	if (old == new) {
		if (!is2) {
			errno = EINVAL;
			return -1;
		}
		return e ? new : REAL(dup2)(old, new);
	}
	kp_std_preflush(new);
	kp_template_lost(new);
	int kfd = -1;
	if (e) {
		kfd = kura_dup(FS(e), e->kfd);
		if (kfd < 0)
			return (int)kp_ret(kfd);
	}
	int r = is2 ? REAL(dup2)(old, new) : REAL(dup3)(old, new, flags);
	if (r < 0) {
		int er = errno;
		if (e)
			kura_close(FS(e), kfd);
		errno = er;
		return -1;
	}
	if (kp_get(new))
		kp_release(new);
	if (e)
		kp_attach(new, e->mnt, kfd, e->path, e->isdir);
	else
		kp_std_fixup(new);
	return r;
}

KP_EXPORT int dup2(int old, int new) { return do_dup3(old, new, 0, 1); }
KP_EXPORT int dup3(int old, int new, int flags) { return do_dup3(old, new, flags, 0); }

/* ---- fcntl ---- */

static int do_fcntl(int fd, int cmd, void *arg, int is64)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return is64 ? REAL(fcntl64)(fd, cmd, arg) : REAL(fcntl)(fd, cmd, arg);
	switch (cmd) {
	case F_DUPFD:
	case F_DUPFD_CLOEXEC: {
		int kfd = kura_dup(FS(e), e->kfd);
		if (kfd < 0)
			return (int)kp_ret(kfd);
		int nfd = REAL(fcntl)(fd, cmd, arg);
		if (nfd < 0) {
			int er = errno;
			kura_close(FS(e), kfd);
			errno = er;
			return -1;
		}
		kp_attach(nfd, e->mnt, kfd, e->path, e->isdir);
		return nfd;
	}
	case F_GETFD:
	case F_SETFD:
		return REAL(fcntl)(fd, cmd, arg);
	case F_GETFL:
		return (int)kp_ret(kura_fd_flags(FS(e), e->kfd));
	case F_SETFL:
		return (int)kp_ret(kura_fd_setfl(FS(e), e->kfd, (int)(long)arg));
	case F_GETLK:
	case F_SETLK:
	case F_SETLKW:
	case F_OFD_GETLK:
	case F_OFD_SETLK:
	case F_OFD_SETLKW:
		return kp_lock_fcntl(fd, e, cmd, arg);
	case F_GETOWN:
	case F_SETOWN:
	case F_GETSIG:
	case F_SETSIG:
		return REAL(fcntl)(fd, cmd, arg);
	default:
		return kp_unsupported("fcntl command", EINVAL);
	}
}

KP_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return do_fcntl(fd, cmd, arg, 0);
}

KP_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return do_fcntl(fd, cmd, arg, 1);
}

KP_EXPORT int flock(int fd, int op)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(flock)(fd, op);
	return kp_lock_flock(fd, e, op);
}

KP_EXPORT int lockf(int fd, int cmd, off_t len)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(lockf)(fd, cmd, len);
	struct flock fl = { .l_whence = SEEK_CUR, .l_start = 0, .l_len = len, .l_type = F_WRLCK };
	switch (cmd) {
	case F_ULOCK:
		fl.l_type = F_UNLCK;
		return kp_lock_fcntl(fd, e, F_SETLK, &fl);
	case F_LOCK:
		return kp_lock_fcntl(fd, e, F_SETLKW, &fl);
	case F_TLOCK:
		return kp_lock_fcntl(fd, e, F_SETLK, &fl);
	case F_TEST:
		fl.l_type = F_RDLCK;
		if (kp_lock_fcntl(fd, e, F_GETLK, &fl) < 0)
			return -1;
		if (fl.l_type == F_UNLCK || fl.l_pid == getpid())
			return 0;
		errno = EACCES;
		return -1;
	default:
		errno = EINVAL;
		return -1;
	}
}
KP_EXPORT int lockf64(int fd, int cmd, off_t len) { return lockf(fd, cmd, len); }

/* ---- size, sync, hints ---- */

KP_EXPORT int ftruncate(int fd, off_t len)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(ftruncate)(fd, len);
	int r = kura_ftruncate(FS(e), e->kfd, len);
	int64_t ino = r == 0 ? kura_fd_ino(FS(e), e->kfd) : -1;
	if (ino > 0)
		kp_map_truncated(e->mnt, (uint64_t)ino, (uint64_t)len);
	return (int)kp_ret(r);
}
KP_EXPORT int ftruncate64(int fd, off_t len) { return ftruncate(fd, len); }

KP_EXPORT int fallocate(int fd, int mode, off_t off, off_t len)
{
	struct kp_fd *e = kp_get(fd);
	return e ? (int)kp_ret(kura_fallocate(FS(e), e->kfd, mode, off, len)) : REAL(fallocate)(fd, mode, off, len);
}
KP_EXPORT int fallocate64(int fd, int mode, off_t off, off_t len) { return fallocate(fd, mode, off, len); }

KP_EXPORT int posix_fallocate(int fd, off_t off, off_t len)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(posix_fallocate)(fd, off, len);
	if (off < 0 || len <= 0)
		return EINVAL;
	int r = kura_fallocate(FS(e), e->kfd, 0, off, len);
	return r < 0 ? -r : 0;
}
KP_EXPORT int posix_fallocate64(int fd, off_t off, off_t len) { return posix_fallocate(fd, off, len); }

/* The file's stores through this process's shared maps first, as the
 * kernel writes back a file's dirty mapped pages. */
static int sync_file(struct kp_fd *e)
{
	int64_t ino = kura_fd_ino(FS(e), e->kfd);
	int r = ino > 0 ? kp_map_sync_ino(e->mnt, (uint64_t)ino) : 0;
	return (int)kp_ret(r ? r : kura_fsync(FS(e), e->kfd));
}
KP_EXPORT int fsync(int fd)
{
	struct kp_fd *e = kp_get(fd);
	return e ? sync_file(e) : REAL(fsync)(fd);
}
KP_EXPORT int fdatasync(int fd)
{
	struct kp_fd *e = kp_get(fd);
	return e ? sync_file(e) : REAL(fdatasync)(fd);
}
KP_EXPORT int syncfs(int fd)
{
	struct kp_fd *e = kp_get(fd);
	return e ? (int)kp_ret(kura_syncfs(FS(e))) : REAL(syncfs)(fd);
}
/* Every pool this process uses, then the kernel's file systems. */
KP_EXPORT void sync(void)
{
	for (int i = 0; i < kp_nmounts; i++) {
		kura_fs *fs = __atomic_load_n(&kp_mounts[i].fs, __ATOMIC_ACQUIRE);
		if (fs)
			kura_syncfs(fs);
	}
	REAL(sync)();
}
/* Writing back a range is a sync of the pool: kura changes reach the disk
 * whole, in order (KURA_SYNC=fsync), or already have (op). */
KP_EXPORT int sync_file_range(int fd, off_t off, off_t n, unsigned fl)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(sync_file_range)(fd, off, n, fl);
	return (fl & SYNC_FILE_RANGE_WRITE) ? (int)kp_ret(kura_fsync(FS(e), e->kfd)) : 0;
}
KP_EXPORT int posix_fadvise(int fd, off_t off, off_t len, int adv)
{
	struct kp_fd *e = kp_get(fd);
	return e ? 0 : REAL(posix_fadvise)(fd, off, len, adv);
}
KP_EXPORT int posix_fadvise64(int fd, off_t off, off_t len, int adv) { return posix_fadvise(fd, off, len, adv); }
KP_EXPORT ssize_t readahead(int fd, off64_t off, size_t n)
{
	struct kp_fd *e = kp_get(fd);
	return e ? 0 : REAL(readahead)(fd, off, n);
}

/* ---- fd metadata ---- */

KP_EXPORT int fstat(int fd, struct stat *st)
{
	struct kp_fd *e = kp_get(fd);
	return e ? (int)kp_ret(kura_fstat(FS(e), e->kfd, st)) : REAL(fstat)(fd, st);
}
KP_EXPORT int fstat64(int fd, struct stat64 *st) { return fstat(fd, (struct stat *)st); }
typedef int (*fxstat_fn)(int, int, struct stat *);
KP_EXPORT int __fxstat(int ver, int fd, struct stat *st)
{
	struct kp_fd *e = kp_get(fd);
	return e ? (int)kp_ret(kura_fstat(FS(e), e->kfd, st))
		 : REALT(fxstat_fn, "__fxstat")(ver, fd, st);
}
KP_EXPORT int __fxstat64(int ver, int fd, struct stat64 *st) { return __fxstat(ver, fd, (struct stat *)st); }

KP_EXPORT int fchmod(int fd, mode_t m)
{
	struct kp_fd *e = kp_get(fd);
	return e ? (int)kp_ret(kura_fchmod(FS(e), e->kfd, m)) : REAL(fchmod)(fd, m);
}
KP_EXPORT int fchown(int fd, uid_t u, gid_t g)
{
	struct kp_fd *e = kp_get(fd);
	return e ? (int)kp_ret(kura_fchown(FS(e), e->kfd, u, g)) : REAL(fchown)(fd, u, g);
}
KP_EXPORT int futimens(int fd, const struct timespec t[2])
{
	struct kp_fd *e = kp_get(fd);
	return e ? (int)kp_ret(kura_futimens(FS(e), e->kfd, t)) : REAL(futimens)(fd, t);
}
KP_EXPORT int futimes(int fd, const struct timeval tv[2])
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(futimes)(fd, tv);
	struct timespec ts[2];
	if (tv) {
		for (int i = 0; i < 2; i++) {
			ts[i].tv_sec = tv[i].tv_sec;
			ts[i].tv_nsec = tv[i].tv_usec * 1000;
		}
	}
	return (int)kp_ret(kura_futimens(FS(e), e->kfd, tv ? ts : NULL));
}

static void to_statfs(const struct statvfs *sv, struct statfs *sf)
{
	memset(sf, 0, sizeof *sf);
	sf->f_type = 0x6b757261; /* "kura", as st_dev */
	sf->f_bsize = (long)sv->f_bsize;
	sf->f_frsize = (long)sv->f_frsize;
	sf->f_blocks = sv->f_blocks;
	sf->f_bfree = sv->f_bfree;
	sf->f_bavail = sv->f_bavail;
	sf->f_files = sv->f_files;
	sf->f_ffree = sv->f_ffree;
	sf->f_namelen = (long)sv->f_namemax;
	sf->f_flags = (long)sv->f_flag;
}

int kp_statvfs_mnt(int m, struct statvfs *sv)
{
	kura_fs *fs = kp_fs(m);
	if (!fs)
		return -1;
	return (int)kp_ret(kura_statvfs(fs, sv));
}

KP_EXPORT int fstatvfs(int fd, struct statvfs *sv)
{
	struct kp_fd *e = kp_get(fd);
	return e ? kp_statvfs_mnt(e->mnt, sv) : REAL(fstatvfs)(fd, sv);
}
KP_EXPORT int fstatvfs64(int fd, struct statvfs64 *sv) { return fstatvfs(fd, (struct statvfs *)sv); }
KP_EXPORT int fstatfs(int fd, struct statfs *sf)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(fstatfs)(fd, sf);
	struct statvfs sv;
	if (kp_statvfs_mnt(e->mnt, &sv) < 0)
		return -1;
	to_statfs(&sv, sf);
	return 0;
}
KP_EXPORT int fstatfs64(int fd, struct statfs64 *sf) { return fstatfs(fd, (struct statfs *)sf); }

void kp_to_statfs(const struct statvfs *sv, struct statfs *sf) { to_statfs(sv, sf); }

/* ---- ioctl (mmap is map.c's) ---- */

KP_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(ioctl)(fd, req, arg);
	if (req == FIONREAD) {
		struct stat st;
		int r = kura_fstat(FS(e), e->kfd, &st);
		if (r < 0)
			return (int)kp_ret(r);
		off_t pos = kura_lseek(FS(e), e->kfd, 0, SEEK_CUR);
		*(int *)arg = pos < st.st_size ? (int)(st.st_size - pos) : 0;
		return 0;
	}
	if (req == FICLONE || req == FICLONERANGE)
		return kp_unsupported("ioctl FICLONE", EOPNOTSUPP);
	errno = ENOTTY;
	return -1;
}

/* A kura file is never a terminal.  The kernel would say so too (ENOTTY on
 * the memfd), but answering here keeps placeholders free of any syscall. */
#include <termios.h>
KP_EXPORT int isatty(int fd)
{
	if (!kp_get(fd))
		return REAL(isatty)(fd);
	errno = ENOTTY;
	return 0;
}
KP_EXPORT int tcgetattr(int fd, struct termios *t)
{
	if (!kp_get(fd))
		return REAL(tcgetattr)(fd, t);
	errno = ENOTTY;
	return -1;
}
