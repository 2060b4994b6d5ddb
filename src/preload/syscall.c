/*
 * syscall.c — glibc's syscall() for the file system's call numbers.
 *
 * Programs that want a call glibc had no wrapper for when they were
 * written go through syscall(SYS_x, ...): GNU patch renames with
 * SYS_renameat2, others read directories with SYS_getdents64 or ask for
 * the working directory with SYS_getcwd.  Those numbers are served here by
 * the same functions a program calling them by name would reach (ours, for
 * kura paths and descriptors; the kernel's for everything else), so a call
 * behaves alike whichever way it is made.  Every other number goes to
 * kp_creds_syscall and on to the kernel unchanged.
 *
 * The raw calls' conventions differ from the functions' in a few places,
 * kept here: getcwd returns the length, fadvise64 a negative error rather
 * than an error number, utimensat with no path changes the descriptor
 * itself, preadv and pwritev take the offset split in two halves (the high
 * one ignored on a 64-bit kernel), and faccessat has no flags argument.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <utime.h>

#include <sys/inotify.h>

#include "kp.h"

/* The kernel's struct open_how (linux/openat2.h). */
struct kp_open_how {
	uint64_t flags, mode, resolve;
};

#define P(x) ((const char *)(x))
#define V(x) ((void *)(x))
#define I(x) ((int)(x))

static long errno_ret(int err)
{
	if (!err)
		return 0;
	errno = err;
	return -1;
}

static long file_call(long n, long a, long b, long c, long d, long e, long f, int *served)
{
	*served = 1;
	switch (n) {
	case SYS_read: return read(I(a), V(b), (size_t)c);
	case SYS_write: return write(I(a), V(b), (size_t)c);
	case SYS_pread64: return pread(I(a), V(b), (size_t)c, (off_t)d);
	case SYS_pwrite64: return pwrite(I(a), V(b), (size_t)c, (off_t)d);
	case SYS_readv: return readv(I(a), V(b), I(c));
	case SYS_writev: return writev(I(a), V(b), I(c));
	case SYS_preadv: return preadv(I(a), V(b), I(c), (off_t)d);
	case SYS_pwritev: return pwritev(I(a), V(b), I(c), (off_t)d);
	case SYS_preadv2: return preadv2(I(a), V(b), I(c), (off_t)d, I(f));
	case SYS_pwritev2: return pwritev2(I(a), V(b), I(c), (off_t)d, I(f));
	case SYS_lseek: return lseek(I(a), (off_t)b, I(c));
	case SYS_open: return open(P(a), I(b), (mode_t)c);
	case SYS_creat: return creat(P(a), (mode_t)b);
	case SYS_openat: return openat(I(a), P(b), I(c), (mode_t)d);
	case SYS_openat2: {
		const struct kp_open_how *how = V(c);
		if (!how || (size_t)d < sizeof *how || !KP_MEM_OK(how, sizeof *how) || how->resolve) {
			*served = 0; /* RESOLVE_* rules are the kernel's alone, and so is a bad how */
			return 0;
		}
		return openat(I(a), P(b), (int)how->flags, (mode_t)how->mode);
	}
	case SYS_close: return close(I(a));
	case SYS_close_range: return close_range((unsigned)a, (unsigned)b, I(c));
	case SYS_dup: return dup(I(a));
	case SYS_dup2: return dup2(I(a), I(b));
	case SYS_dup3: return dup3(I(a), I(b), I(c));
	case SYS_fcntl: return fcntl(I(a), I(b), c);
	case SYS_flock: return flock(I(a), I(b));
	case SYS_ioctl: return ioctl(I(a), (unsigned long)b, c);
	case SYS_fsync: return fsync(I(a));
	case SYS_fdatasync: return fdatasync(I(a));
	case SYS_syncfs: return syncfs(I(a));
	case SYS_sync_file_range: return sync_file_range(I(a), (off_t)b, (off_t)c, (unsigned)d);
	case SYS_fallocate: return fallocate(I(a), I(b), (off_t)c, (off_t)d);
	case SYS_fadvise64: return errno_ret(posix_fadvise(I(a), (off_t)b, (off_t)c, I(d)));
	case SYS_readahead: return readahead(I(a), (off_t)b, (size_t)c);
	case SYS_truncate: return truncate(P(a), (off_t)b);
	case SYS_ftruncate: return ftruncate(I(a), (off_t)b);
	case SYS_stat: return stat(P(a), V(b));
	case SYS_lstat: return lstat(P(a), V(b));
	case SYS_fstat: return fstat(I(a), V(b));
	case SYS_newfstatat: return fstatat(I(a), P(b), V(c), I(d));
	case SYS_statx: return statx(I(a), P(b), I(c), (unsigned)d, V(e));
	case SYS_statfs: return statfs(P(a), V(b));
	case SYS_fstatfs: return fstatfs(I(a), V(b));
	case SYS_access: return access(P(a), I(b));
	case SYS_faccessat: return faccessat(I(a), P(b), I(c), 0);
#ifdef SYS_faccessat2
	case SYS_faccessat2: return faccessat(I(a), P(b), I(c), I(d));
#endif
	case SYS_getdents64: return getdents64(I(a), V(b), (size_t)c);
	case SYS_getcwd: {
		if (!getcwd(V(a), (size_t)b))
			return -1;
		return (long)strlen(P(a)) + 1;
	}
	case SYS_chdir: return chdir(P(a));
	case SYS_fchdir: return fchdir(I(a));
	case SYS_mkdir: return mkdir(P(a), (mode_t)b);
	case SYS_mkdirat: return mkdirat(I(a), P(b), (mode_t)c);
	case SYS_rmdir: return rmdir(P(a));
	case SYS_mount: return mount(P(a), P(b), P(c), (unsigned long)d, V(e));
	case SYS_umount2: return umount2(P(a), I(b));
	case SYS_mknod: return mknod(P(a), (mode_t)b, (dev_t)c);
	case SYS_mknodat: return mknodat(I(a), P(b), (mode_t)c, (dev_t)d);
	case SYS_unlink: return unlink(P(a));
	case SYS_unlinkat: return unlinkat(I(a), P(b), I(c));
	case SYS_rename: return rename(P(a), P(b));
	case SYS_renameat: return renameat(I(a), P(b), I(c), P(d));
	case SYS_renameat2: return renameat2(I(a), P(b), I(c), P(d), (unsigned)e);
	case SYS_link: return link(P(a), P(b));
	case SYS_linkat: return linkat(I(a), P(b), I(c), P(d), I(e));
	case SYS_symlink: return symlink(P(a), P(b));
	case SYS_symlinkat: return symlinkat(P(a), I(b), P(c));
	case SYS_readlink: return readlink(P(a), V(b), (size_t)c);
	case SYS_readlinkat: return readlinkat(I(a), P(b), V(c), (size_t)d);
	case SYS_chmod: return chmod(P(a), (mode_t)b);
	case SYS_fchmod: return fchmod(I(a), (mode_t)b);
	case SYS_fchmodat: return fchmodat(I(a), P(b), (mode_t)c, 0);
	case SYS_chown: return chown(P(a), (uid_t)b, (gid_t)c);
	case SYS_fchown: return fchown(I(a), (uid_t)b, (gid_t)c);
	case SYS_lchown: return lchown(P(a), (uid_t)b, (gid_t)c);
	case SYS_fchownat: return fchownat(I(a), P(b), (uid_t)c, (gid_t)d, I(e));
	case SYS_utime: return utime(P(a), V(b));
	case SYS_utimes: return utimes(P(a), V(b));
	case SYS_futimesat: return futimesat(I(a), P(b), V(c));
	case SYS_utimensat:
		if (!b) {
			if (I(a) == AT_FDCWD)
				return errno_ret(EFAULT);
			if (d)
				return errno_ret(EINVAL);
			return futimens(I(a), V(c));
		}
		return utimensat(I(a), P(b), V(c), I(d));
	case SYS_umask: return umask((mode_t)a);
	case SYS_execve: return execve(P(a), V(b), V(c));
	case SYS_execveat: return execveat(I(a), P(b), V(c), V(d), I(e));
	case SYS_sendfile: return sendfile(I(a), I(b), V(c), (size_t)d);
	case SYS_copy_file_range: return copy_file_range(I(a), V(b), I(c), V(d), (size_t)e, (unsigned)f);
	case SYS_memfd_create: return memfd_create(P(a), (unsigned)b);
	case SYS_mmap: return (long)mmap(V(a), (size_t)b, I(c), I(d), I(e), (off_t)f);
	case SYS_munmap: return munmap(V(a), (size_t)b);
	case SYS_mremap: return (long)mremap(V(a), (size_t)b, (size_t)c, I(d), V(e));
	case SYS_mprotect: return mprotect(V(a), (size_t)b, I(c));
	case SYS_setxattr: return setxattr(P(a), P(b), V(c), (size_t)d, I(e));
	case SYS_lsetxattr: return lsetxattr(P(a), P(b), V(c), (size_t)d, I(e));
	case SYS_fsetxattr: return fsetxattr(I(a), P(b), V(c), (size_t)d, I(e));
	case SYS_getxattr: return getxattr(P(a), P(b), V(c), (size_t)d);
	case SYS_lgetxattr: return lgetxattr(P(a), P(b), V(c), (size_t)d);
	case SYS_fgetxattr: return fgetxattr(I(a), P(b), V(c), (size_t)d);
	case SYS_listxattr: return listxattr(P(a), V(b), (size_t)c);
	case SYS_llistxattr: return llistxattr(P(a), V(b), (size_t)c);
	case SYS_flistxattr: return flistxattr(I(a), V(b), (size_t)c);
	case SYS_removexattr: return removexattr(P(a), P(b));
	case SYS_lremovexattr: return lremovexattr(P(a), P(b));
	case SYS_fremovexattr: return fremovexattr(I(a), P(b));
	case SYS_inotify_init: return inotify_init();
	case SYS_inotify_init1: return inotify_init1(I(a));
	case SYS_inotify_add_watch: return inotify_add_watch(I(a), P(b), (uint32_t)c);
	case SYS_inotify_rm_watch: return inotify_rm_watch(I(a), I(b));
	}
	*served = 0;
	return 0;
}

KP_EXPORT long syscall(long n, ...)
{
	va_list ap;
	va_start(ap, n);
	long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
	long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
	va_end(ap);
	int served;
	long r = file_call(n, a, b, c, d, e, f, &served);
	return served ? r : kp_creds_syscall(n, a, b, c, d, e, f);
}
