/*
 * fdattr.c — the calls on an open kura file that read or change what it
 * is rather than what it holds: the fstat family, fchmod/fchown/futimens,
 * fstatfs/fstatvfs, ioctl, isatty and tcgetattr.  Each takes a placeholder
 * fd to the engine's descriptor behind it and leaves every other fd to
 * libc (or to the FIFO and socket code, for kura's special files).
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

/* ---- fd metadata ---- */

KP_EXPORT int fstat(int fd, struct stat *st)
{
	struct kp_fd *e = kp_get(fd);
	return e ? (int)kp_ret(KP_OUT(st, sizeof *st) ?: kura_fstat(FS(e), e->kfd, st)) : kp_fifo_fstat(fd, st);
}
KP_EXPORT int fstat64(int fd, struct stat64 *st) { return fstat(fd, (struct stat *)st); }
typedef int (*fxstat_fn)(int, int, struct stat *);
KP_EXPORT int __fxstat(int ver, int fd, struct stat *st)
{
	struct kp_fd *e = kp_get(fd);
	if (e)
		return fstat(fd, st);
	/* x86-64 has one stat layout, the kernel's: what fstat fills */
	return ver == 1 ? kp_fifo_fstat(fd, st) : REALT(fxstat_fn, "__fxstat")(ver, fd, st);
}
KP_EXPORT int __fxstat64(int ver, int fd, struct stat64 *st) { return __fxstat(ver, fd, (struct stat *)st); }

KP_EXPORT int fchmod(int fd, mode_t m)
{
	struct kp_fd *e = kp_get(fd);
	return e ? (int)kp_ret(kp_noted(e, kura_fchmod(FS(e), e->kfd, m), 0, IN_ATTRIB)) : kp_fifo_fchange(fd, m, 0, 0, 0);
}
KP_EXPORT int fchown(int fd, uid_t u, gid_t g)
{
	struct kp_fd *e = kp_get(fd);
	return e ? (int)kp_ret(kp_noted(e, kura_fchown(FS(e), e->kfd, u, g), 0, IN_ATTRIB)) : kp_fifo_fchange(fd, 0, u, g, 1);
}
KP_EXPORT int futimens(int fd, const struct timespec t[2])
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(futimens)(fd, t);
	if (t && !KP_MEM_OK(t, 2 * sizeof *t))
		return (int)kp_ret(-EFAULT);
	return (int)kp_ret(kp_noted(e, kura_futimens(FS(e), e->kfd, t), 0, IN_ATTRIB));
}
KP_EXPORT int futimes(int fd, const struct timeval tv[2])
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(futimes)(fd, tv);
	struct timespec ts[2];
	if (tv && !KP_MEM_OK(tv, 2 * sizeof *tv))
		return (int)kp_ret(-EFAULT);
	if (tv) {
		for (int i = 0; i < 2; i++) {
			ts[i].tv_sec = tv[i].tv_sec;
			ts[i].tv_nsec = tv[i].tv_usec * 1000;
		}
	}
	return (int)kp_ret(kp_noted(e, kura_futimens(FS(e), e->kfd, tv ? ts : NULL), 0, IN_ATTRIB));
}

static void to_statfs(const struct statvfs *sv, struct statfs *sf)
{
	memset(sf, 0, sizeof *sf);
	/* Programs pick their ways by f_type, and know only the kernel's:
	 * coreutils' tail -f polls a file system it does not know to be
	 * local, where it would use inotify, which pool files now have.
	 * tmpfs's is the nearest: memory-mapped, every change durable at
	 * return as far as the medium goes. */
	sf->f_type = 0x01021994; /* TMPFS_MAGIC */
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
	if (!e)
		return REAL(fstatvfs)(fd, sv);
	return KP_MEM_FILL_OK(sv, sizeof *sv) ? kp_statvfs_mnt(e->mnt, sv) : (int)kp_ret(-EFAULT);
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
	if (!KP_MEM_FILL_OK(sf, sizeof *sf))
		return (int)kp_ret(-EFAULT);
	to_statfs(&sv, sf);
	return 0;
}
KP_EXPORT int fstatfs64(int fd, struct statfs64 *sf) { return fstatfs(fd, (struct statfs *)sf); }

void kp_to_statfs(const struct statvfs *sv, struct statfs *sf) { to_statfs(sv, sf); }

/* ---- ioctl (mmap is map.c's) ---- */

/* chattr: the flags, read in as the kernel reads them; an fsxattr's
 * extent size hints and project id count as flags too (tmpfs refuses
 * them alike). */
static int set_flags(struct kp_fd *e, unsigned long req, const void *arg)
{
	unsigned flags;
	if (req == FS_IOC_SETFLAGS) {
		if (!KP_MEM_OK(arg, sizeof(int)))
			return -EFAULT;
		flags = (unsigned)*(const int *)arg;
	} else {
		if (!KP_MEM_OK(arg, sizeof(struct fsxattr)))
			return -EFAULT;
		const struct fsxattr *x = arg;
		flags = x->fsx_xflags | x->fsx_extsize | x->fsx_projid | x->fsx_cowextsize;
	}
	return kura_fsetflags(FS(e), e->kfd, flags);
}

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
		if (!KP_MEM_FILL_OK(arg, sizeof(int)))
			return (int)kp_ret(-EFAULT);
		struct stat st;
		int r = kura_fstat(FS(e), e->kfd, &st);
		if (r < 0)
			return (int)kp_ret(r);
		off_t pos = kura_lseek(FS(e), e->kfd, 0, SEEK_CUR);
		*(int *)arg = pos < st.st_size ? (int)(st.st_size - pos) : 0;
		return 0;
	}
	if (req == FIGETBSZ) { /* the block size, which filefrag and others ask for */
		struct stat st;
		int r = KP_OUT(arg, sizeof(int)) ?: kura_fstat(FS(e), e->kfd, &st);
		if (r < 0)
			return (int)kp_ret(r);
		*(int *)arg = (int)st.st_blksize;
		return 0;
	}
	if (req == FS_IOC_GETFLAGS || req == FS_IOC_FSGETXATTR) {
		/* Kura keeps no inode flags (kura_fsetflags): lsattr sees none. */
		size_t n = req == FS_IOC_GETFLAGS ? sizeof(int) : sizeof(struct fsxattr);
		struct stat st;
		int r = KP_OUT(arg, n) ?: kura_fstat(FS(e), e->kfd, &st);
		if (r < 0)
			return (int)kp_ret(r);
		memset(arg, 0, n);
		return 0;
	}
	if (req == FS_IOC_SETFLAGS || req == FS_IOC_FSSETXATTR)
		return (int)kp_ret(set_flags(e, req, arg));
	if (req == FICLONE || req == FICLONERANGE)
		return kp_unsupported("ioctl FICLONE", EOPNOTSUPP);
	int ret;
	if (kp_atomic_ioctl(e, req, arg, &ret))
		return ret;
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
