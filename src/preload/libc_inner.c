/*
 * libc_inner.c — glibc functions that look at a file from inside libc,
 * where no wrapper sees the call (ftok and isfdtype stat it there), and
 * file handles, which kura does not give.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/ipc.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "kp.h"

/* glibc's key, from a stat through the wrappers. */
KP_EXPORT key_t ftok(const char *path, int proj_id)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return (key_t)-1;
	return (key_t)((st.st_ino & 0xffff) | ((st.st_dev & 0xff) << 16) | ((unsigned)(proj_id & 0xff) << 24));
}

KP_EXPORT int isfdtype(int fd, int fdtype)
{
	int saved = errno;
	struct stat st;
	int r = fstat(fd, &st);
	errno = saved;
	return r < 0 ? -1 : (st.st_mode & S_IFMT) == (mode_t)fdtype;
}

/* What Linux answers for a file system that cannot decode handles: the
 * kernel would otherwise say ENOENT for a pool path it does not see, or
 * hand out a handle of a placeholder. */
KP_EXPORT int name_to_handle_at(int dirfd, const char *path, struct file_handle *handle, int *mount_id, int flags)
{
	if ((flags & AT_EMPTY_PATH) && path && !*path && kp_get(dirfd)) {
		errno = EOPNOTSUPP;
		return -1;
	}
	RESOLVE(dirfd, path, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, dirfd, (flags & AT_SYMLINK_FOLLOW) ? 1 : KP_NAME,
					   REAL(name_to_handle_at)(KDIR(kp, dirfd), kp.p, handle, mount_id, flags));
	errno = EOPNOTSUPP;
	return -1;
}

KP_EXPORT int open_by_handle_at(int mount_fd, struct file_handle *handle, int flags)
{
	if (kp_get(mount_fd)) {
		errno = EOPNOTSUPP;
		return -1;
	}
	return REAL(open_by_handle_at)(mount_fd, handle, flags);
}
