/*
 * data.c — the calls on an open kura file that move or size its data:
 * the read and write family, sizes and syncs, and copies between
 * descriptors (what it is, fstat and the rest, is fdattr.c's).  Each
 * takes a placeholder fd to the engine's descriptor behind it (io.c made
 * them) and leaves every other fd to libc.
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

/* ---- data ---- */

/* After a write of n bytes through e at off (-1: ending at the offset), in
 * an atomic group: this process's maps show what it wrote (groupmap.c). */
static ssize_t group_wrote(struct kp_fd *e, ssize_t n, off_t off)
{
	if (__builtin_expect(__atomic_load_n(&kp_groups_active, __ATOMIC_RELAXED) == 0, 1) || n <= 0)
		return n;
	if (off < 0) {
		off = kura_lseek(FS(e), e->kfd, 0, SEEK_CUR) - n;
	} else if (kura_fd_flags(FS(e), e->kfd) & O_APPEND) {
		struct stat st;
		off = kura_fstat(FS(e), e->kfd, &st) ? 0 : st.st_size - n;
	}
	if (off >= 0)
		kp_group_wrote(e, FS(e), (uint64_t)off, (uint64_t)n);
	return n;
}

/* A vector's buffers made ready: pages an atomic group shows read-only
 * take stores (group), and pages of kura maps are mapped in before a
 * kernel call (kernel). */
static void prepare_iov(const struct iovec *iov, int cnt, int group, int kernel)
{
	if (kernel && cnt > 0)
		kp_map_kernel_iov(iov, (size_t)cnt);
	if (!group || cnt <= 0 || cnt > IOV_MAX || !KP_MEM_OK(iov, (size_t)cnt * sizeof *iov))
		return;
	for (int i = 0; i < cnt; i++)
		kp_group_buffer(iov[i].iov_base, iov[i].iov_len);
}

/* What is left of the file from off (the offset's when off < 0) for a
 * read to fill: 0 for a directory, SIZE_MAX when it cannot be told. */
static size_t bytes_left(struct kp_fd *e, off_t off)
{
	struct stat st;
	off_t at = off < 0 ? kura_lseek(FS(e), e->kfd, 0, SEEK_CUR) : off;
	if (at < 0 || kura_fstat(FS(e), e->kfd, &st))
		return SIZE_MAX;
	return !S_ISREG(st.st_mode) || at >= st.st_size ? 0 : (size_t)(st.st_size - at);
}

/* The part of buf a kura call may use, where Linux's copy would stop with
 * EFAULT: pages of kura maps the file grew into are mapped in first
 * (kp_map_buffer).  A write copies from buf, up to the first page the
 * program does not have.  A read stores into buf, up to the first page
 * the program may not store into; only the bytes the file still has for
 * it are probed (the probe faults pages in), counted down in *left
 * (SIZE_MAX - 1: not asked yet).  A file that grows between the count and the read
 * fills pages not probed: a race a program has with itself. */
#define LEFT_UNASKED (SIZE_MAX - 1)
static size_t usable_part(struct kp_fd *e, off_t off, void *buf, size_t n, int wr, size_t *left)
{
	n = kp_map_buffer(buf, n);
	if (!n || wr)
		return n ? kp_mem_readable(buf, n) : 0;
	if (kp_mem_known_writable(buf, n))
		return n;
	if (*left == LEFT_UNASKED)
		*left = bytes_left(e, off);
	size_t fills = n < *left ? n : *left;
	*left -= fills;
	size_t w = kp_mem_writable(buf, fills);
	return w < fills ? w : n;
}

/* *n shortened to its usable part, or -EFAULT if not even the first byte
 * is. */
static int usable(struct kp_fd *e, off_t off, const void *buf, size_t *n, int wr)
{
	size_t left = LEFT_UNASKED, u = usable_part(e, off, (void *)buf, *n, wr, &left);
	if (!u && *n)
		return -EFAULT;
	*n = u;
	return 0;
}

/* What Linux answers for a call of n > 0 bytes none of which the program
 * has: it finds that out only as it copies, so the descriptor's own
 * refusal comes first (EBADF, EISDIR...), and a read at or past the end
 * copies nothing and returns 0; else EFAULT.  off < 0: the offset's. */
static ssize_t nothing_usable(struct kp_fd *e, off_t off, int wr)
{
	kura_fs *fs = FS(e);
	ssize_t r = wr ? (off < 0 ? kura_write(fs, e->kfd, NULL, 0) : kura_pwrite(fs, e->kfd, NULL, 0, off))
		       : (off < 0 ? kura_read(fs, e->kfd, NULL, 0) : kura_pread(fs, e->kfd, NULL, 0, off));
	if (r < 0 || wr)
		return r < 0 ? r : -EFAULT;
	return bytes_left(e, off) == 0 ? 0 : -EFAULT;
}

/* The same for a vector: 0 with *v the vector to use, which is a copy
 * (*copy, to free) ending at the first element cut short when one is, or
 * -EFAULT (-ENOMEM if the copy cannot be made). */
static int usable_iov(struct kp_fd *e, off_t off, const struct iovec *iov, int *cnt, int wr, const struct iovec **v,
		      struct iovec **copy)
{
	*copy = NULL;
	*v = iov;
	if (*cnt <= 0 || *cnt > IOV_MAX)
		return 0;
	if (!KP_MEM_OK(iov, (size_t)*cnt * sizeof *iov))
		return -EFAULT;
	size_t left = LEFT_UNASKED;
	for (int i = 0; i < *cnt; i++) {
		size_t u = usable_part(e, off, iov[i].iov_base, iov[i].iov_len, wr, &left);
		if (u == iov[i].iov_len)
			continue;
		if (i == 0 && u == 0)
			return -EFAULT;
		if (!(*copy = malloc((size_t)(i + 1) * sizeof **copy)))
			return -ENOMEM;
		memcpy(*copy, iov, (size_t)(i + 1) * sizeof **copy);
		(*copy)[i].iov_len = u;
		*cnt = i + 1;
		*v = *copy;
		return 0;
	}
	return 0;
}

KP_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	kp_group_buffer(buf, n);
	struct kp_fd *e = kp_get(fd);
	if (!e) {
		if (__builtin_expect(__atomic_load_n(&kp_notify_fds, __ATOMIC_RELAXED) != 0, 0)) {
			int served;
			ssize_t r = kp_notify_read(fd, buf, n, &served);
			if (served)
				return r;
		}
		kp_map_kernel_buffer(buf, n);
		return REAL(read)(fd, buf, n);
	}
	if (usable(e, -1, buf, &n, 0))
		return kp_ret(nothing_usable(e, -1, 0));
	return kp_ret(kp_noted(e, kura_read(FS(e), e->kfd, buf, n), 1, IN_ACCESS));
}

ssize_t kp_read(int fd, void *buf, size_t n) { return read(fd, buf, n); }
/* glibc exports __read, __write, __pread64, __pwrite64, __lseek, __open,
 * __open64, __fcntl, __dup2 and __statfs (GLIBC_2.2.5) as other names of
 * the calls; a binary linked against them would reach the kernel. */
KP_EXPORT ssize_t __read(int fd, void *buf, size_t n) { return read(fd, buf, n); }

KP_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	(void)buflen;
	return read(fd, buf, n);
}

KP_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	struct kp_fd *e = kp_get(fd);
	if (!e) {
		kp_map_kernel_buffer(buf, n);
		return REAL(write)(fd, buf, n);
	}
	if (usable(e, -1, buf, &n, 1))
		return kp_ret(nothing_usable(e, -1, 1));
	int joined = kp_gset_write(e);
	if (joined)
		return kp_ret(joined);
	return kp_ret(kp_noted(e, group_wrote(e, kura_write(FS(e), e->kfd, buf, n), -1), 1, IN_MODIFY));
}

ssize_t kp_write(int fd, const void *buf, size_t n) { return write(fd, buf, n); }
KP_EXPORT ssize_t __write(int fd, const void *buf, size_t n) { return write(fd, buf, n); }

KP_EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	kp_group_buffer(buf, n);
	struct kp_fd *e = kp_get(fd);
	if (!e) {
		kp_map_kernel_buffer(buf, n);
		return REAL(pread)(fd, buf, n, off);
	}
	if (usable(e, off, buf, &n, 0))
		return kp_ret(nothing_usable(e, off, 0));
	return kp_ret(kp_noted(e, kura_pread(FS(e), e->kfd, buf, n, off), 1, IN_ACCESS));
}
KP_EXPORT ssize_t pread64(int fd, void *buf, size_t n, off_t off) { return pread(fd, buf, n, off); }
KP_EXPORT ssize_t __pread64(int fd, void *buf, size_t n, off_t off) { return pread(fd, buf, n, off); }
KP_EXPORT ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t bl) { (void)bl; return pread(fd, buf, n, off); }
KP_EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t n, off_t off, size_t bl) { (void)bl; return pread(fd, buf, n, off); }

KP_EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	struct kp_fd *e = kp_get(fd);
	if (!e) {
		kp_map_kernel_buffer(buf, n);
		return REAL(pwrite)(fd, buf, n, off);
	}
	if (usable(e, off, buf, &n, 1))
		return kp_ret(nothing_usable(e, off, 1));
	int joined = kp_gset_write(e);
	if (joined)
		return kp_ret(joined);
	return kp_ret(kp_noted(e, group_wrote(e, kura_pwrite(FS(e), e->kfd, buf, n, off), off), 1, IN_MODIFY));
}
KP_EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }
KP_EXPORT ssize_t __pwrite64(int fd, const void *buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }

/* Vectors: gathered into one buffer when small so that an O_APPEND record
 * stays one write; otherwise element by element. off < 0: current offset. */
static ssize_t kvec_io(struct kp_fd *e, const struct iovec *iov, int cnt, off_t off, int wr)
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

static ssize_t kvec(struct kp_fd *e, const struct iovec *iov, int cnt, off_t off, int wr)
{
	int joined = wr ? kp_gset_write(e) : 0;
	if (joined)
		return kp_ret(joined);
	ssize_t r = kvec_io(e, iov, cnt, off, wr);
	return kp_noted(e, wr ? group_wrote(e, r, off) : r, 1, wr ? IN_MODIFY : IN_ACCESS);
}

enum vec_call { V_READV, V_WRITEV, V_PREADV, V_PWRITEV, V_PREADV2, V_PWRITEV2 };

/* The vector calls, on kura descriptors and the kernel's. */
static ssize_t vec(int fd, const struct iovec *iov, int cnt, off_t off, int fl, enum vec_call call)
{
	int wr = call == V_WRITEV || call == V_PWRITEV || call == V_PWRITEV2;
	struct kp_fd *e = kp_get(fd);
	prepare_iov(iov, cnt, !wr && __atomic_load_n(&kp_group_ro_maps, __ATOMIC_RELAXED), !e && kp_maps_count());
	if (!e) {
		if (call == V_READV)
			return REAL(readv)(fd, iov, cnt);
		if (call == V_WRITEV)
			return REAL(writev)(fd, iov, cnt);
		if (call == V_PREADV)
			return REAL(preadv)(fd, iov, cnt, off);
		if (call == V_PWRITEV)
			return REAL(pwritev)(fd, iov, cnt, off);
		if (call == V_PREADV2)
			return REAL(preadv2)(fd, iov, cnt, off, fl);
		return REAL(pwritev2)(fd, iov, cnt, off, fl);
	}
	if ((call == V_PREADV || call == V_PWRITEV) && off < 0)
		return kp_ret(-EINVAL);
	struct iovec *copy;
	const struct iovec *v;
	int bad = usable_iov(e, call == V_READV || call == V_WRITEV ? -1 : off, iov, &cnt, wr, &v, &copy);
	if (bad)
		return kp_ret(bad);
	/* The RWF_ hints need no work: every kura write is already synchronous. */
	ssize_t r = kvec(e, v, cnt, call == V_READV || call == V_WRITEV || off < 0 ? -1 : off, wr);
	if (copy) {
		int er = errno;
		free(copy);
		errno = er;
	}
	return r;
}

KP_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt) { return vec(fd, iov, cnt, -1, 0, V_READV); }
KP_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt) { return vec(fd, iov, cnt, -1, 0, V_WRITEV); }
KP_EXPORT ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off) { return vec(fd, iov, cnt, off, 0, V_PREADV); }
KP_EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off_t off) { return preadv(fd, iov, cnt, off); }
KP_EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) { return vec(fd, iov, cnt, off, 0, V_PWRITEV); }
KP_EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off) { return pwritev(fd, iov, cnt, off); }
KP_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int fl)
{
	return vec(fd, iov, cnt, off, fl, V_PREADV2);
}
KP_EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off_t off, int fl) { return preadv2(fd, iov, cnt, off, fl); }
KP_EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int fl)
{
	return vec(fd, iov, cnt, off, fl, V_PWRITEV2);
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
KP_EXPORT off_t __lseek(int fd, off_t off, int whence) { return lseek(fd, off, whence); }
off_t kp_lseek(int fd, off_t off, int whence) { return lseek(fd, off, whence); }

/* Writes buf[0, r) at the output; what it wrote, the last call's -1 if
 * nothing.  sendfile and splice write on after a short write, as the
 * kernel's splice loop does (at the file size limit that second write
 * is what sends SIGXFSZ); copy_file_range, whose count Linux cuts to the
 * limit before it copies, stops at one (stop_short). */
static ssize_t copy_out(const char *buf, ssize_t r, int out, off_t *outoff, int stop_short)
{
	ssize_t w = 0;
	while (w < r) {
		ssize_t x = outoff ? pwrite(out, buf + w, (size_t)(r - w), *outoff + w) : write(out, buf + w, (size_t)(r - w));
		if (x <= 0)
			return w || x == 0 ? w : -1;
		w += x;
		if (stop_short && w < r)
			break;
	}
	return w;
}

/* Copies between descriptors when one end is kura: a plain loop, since the
 * kernel cannot see kura data.  `inoff`/`outoff` NULL mean the fd offsets. */
static ssize_t copy_through(char *buf, size_t cap, int in, off_t *inoff, int out, off_t *outoff, size_t len,
			    int stop_short)
{
	size_t done = 0;
	while (done < len) {
		size_t n = len - done < cap ? len - done : cap;
		ssize_t r = inoff ? pread(in, buf, n, *inoff) : read(in, buf, n);
		if (r < 0)
			return done ? (ssize_t)done : -1;
		if (r == 0)
			break;
		ssize_t w = copy_out(buf, r, out, outoff, stop_short);
		/* Leave the input where the output stopped (and errno as
		 * the output left it: a pipe refuses the seek). */
		if (w < r && !inoff) {
			int e = errno;
			lseek(in, -(off_t)(r - (w > 0 ? w : 0)), SEEK_CUR);
			errno = e;
		}
		if (w < 0)
			return done ? (ssize_t)done : -1;
		if (inoff)
			*inoff += w;
		if (outoff)
			*outoff += w;
		done += (size_t)w;
		if ((size_t)w < n)
			break;
	}
	return (ssize_t)done;
}

/* The buffer on the heap: threads with small stacks call these too. */
static ssize_t copy_loop(int in, off_t *inoff, int out, off_t *outoff, size_t len, int stop_short)
{
	if ((inoff && !KP_MEM_FILL_OK(inoff, sizeof *inoff)) || (outoff && !KP_MEM_FILL_OK(outoff, sizeof *outoff)))
		return kp_ret(-EFAULT);
	char small[512], *big = malloc(65536);
	ssize_t r = big ? copy_through(big, 65536, in, inoff, out, outoff, len, stop_short)
			: copy_through(small, sizeof small, in, inoff, out, outoff, len, stop_short);
	int saved = errno;
	free(big);
	errno = saved;
	return r;
}

KP_EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t count)
{
	if (!kp_get(out) && !kp_get(in))
		return REAL(sendfile)(out, in, off, count);
	return copy_loop(in, off, out, NULL, count, 0);
}
KP_EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t count) { return sendfile(out, in, off, count); }

KP_EXPORT ssize_t copy_file_range(int in, off_t *inoff, int out, off_t *outoff, size_t len, unsigned flags)
{
	if (!kp_get(out) && !kp_get(in))
		return REAL(copy_file_range)(in, inoff, out, outoff, len, flags);
	if (flags)
		return kp_ret(-EINVAL);
	return copy_loop(in, inoff, out, outoff, len, 1);
}

KP_EXPORT ssize_t splice(int in, off_t *inoff, int out, off_t *outoff, size_t len, unsigned flags)
{
	if (!kp_get(out) && !kp_get(in))
		return REAL(splice)(in, inoff, out, outoff, len, flags);
	/* One end is a pipe (splice's rule); a copy loop moves the same bytes. */
	return copy_loop(in, inoff, out, outoff, len, 0);
}

/* ---- size, sync, hints ---- */

KP_EXPORT int ftruncate(int fd, off_t len)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(ftruncate)(fd, len);
	int joined = kp_gset_write(e);
	if (joined)
		return (int)kp_ret(joined);
	uint64_t before;
	kura_map_own_truncation(&before); /* from a fresh start */
	int grouped = __atomic_load_n(&kp_groups_active, __ATOMIC_RELAXED) && kura_atomic_shadow(FS(e), e->kfd, NULL) > 0;
	int r = (int)kp_noted(e, kura_ftruncate(FS(e), e->kfd, len), 0, IN_MODIFY);
	uint64_t after = kura_map_own_truncation(&before);
	if (grouped) {
		/* Only the group's view was cut; its last block may be new. */
		if (r == 0)
			group_wrote(e, 1, len);
		return (int)kp_ret(r);
	}
	int64_t ino = r == 0 ? kura_fd_ino(FS(e), e->kfd) : -1;
	if (ino > 0)
		kp_map_truncated(e->mnt, (uint64_t)ino, (uint64_t)len, before, after);
	return (int)kp_ret(r);
}
KP_EXPORT int ftruncate64(int fd, off_t len) { return ftruncate(fd, len); }

KP_EXPORT int fallocate(int fd, int mode, off_t off, off_t len)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(fallocate)(fd, mode, off, len);
	int joined = kp_gset_write(e);
	if (joined)
		return (int)kp_ret(joined);
	int r = (int)kp_noted(e, kura_fallocate(FS(e), e->kfd, mode, off, len), 0, IN_MODIFY);
	if (r == 0 && (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)))
		group_wrote(e, len, off);
	return (int)kp_ret(r);
}
KP_EXPORT int fallocate64(int fd, int mode, off_t off, off_t len) { return fallocate(fd, mode, off, len); }

KP_EXPORT int posix_fallocate(int fd, off_t off, off_t len)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(posix_fallocate)(fd, off, len);
	if (off < 0 || len <= 0)
		return EINVAL;
	int joined = kp_gset_write(e);
	if (joined)
		return -joined;
	int r = (int)kp_noted(e, kura_fallocate(FS(e), e->kfd, 0, off, len), 0, IN_MODIFY);
	return r < 0 ? kp_errno(r) : 0;
}
KP_EXPORT int posix_fallocate64(int fd, off_t off, off_t len) { return posix_fallocate(fd, off, len); }

/* The file's stores through this process's shared maps first, as the
 * kernel writes back a file's dirty mapped pages. */
static int sync_file(struct kp_fd *e)
{
	int set_r;
	if (kp_gset_end(e, 1, &set_r))
		return (int)kp_ret(set_r); /* a member's sync commits the whole set (gset.c) */
	if (__atomic_load_n(&kp_groups_active, __ATOMIC_RELAXED) && kura_atomic_shadow(FS(e), e->kfd, NULL) > 0)
		return (int)kp_ret(kp_group_commit(e, FS(e))); /* commits the group (kura.h) */
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
