/*
 * atomic.c — atomic groups for preloaded programs: kura_fbegin,
 * kura_fcommit and kura_fabort on a descriptor (include/kura.h,
 * include/kura_atomic.h), and F2FS's atomic-write ioctls, through which
 * SQLite built with SQLITE_ENABLE_BATCH_ATOMIC_WRITE commits a transaction
 * without a rollback journal.
 *
 * The engine's group belongs to the open file description (src/group.h).
 * F2FS's belongs to the inode; a program that keeps one description per
 * file, as SQLite does, sees no difference.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/ioctl.h>

#include "kp.h"

#define FS(e) (kp_mounts[(e)->mnt].fs)

/* Linux's include/uapi/linux/f2fs.h, which Debian's headers lack. */
#define F2FS_IOCTL_MAGIC 0xf5
#define F2FS_IOC_START_ATOMIC_WRITE _IO(F2FS_IOCTL_MAGIC, 1)
#define F2FS_IOC_COMMIT_ATOMIC_WRITE _IO(F2FS_IOCTL_MAGIC, 2)
#define F2FS_IOC_START_VOLATILE_WRITE _IO(F2FS_IOCTL_MAGIC, 3)
#define F2FS_IOC_RELEASE_VOLATILE_WRITE _IO(F2FS_IOCTL_MAGIC, 4)
#define F2FS_IOC_ABORT_VOLATILE_WRITE _IO(F2FS_IOCTL_MAGIC, 5)
#define F2FS_IOC_GET_FEATURES _IOR(F2FS_IOCTL_MAGIC, 12, uint32_t)
#define F2FS_FEATURE_ATOMIC_WRITE 0x0004

static int begin(struct kp_fd *e)
{
	int r = kp_gset_begin(e); /* a set is open: the file joins it */
	if (r)
		return r < 0 ? r : 0;
	int64_t ino = kura_fd_ino(FS(e), e->kfd);
	return ino < 0 ? (int)ino : kp_group_begin(e, FS(e), (uint64_t)ino);
}

/* A member of an open set (gset.c) ends the whole set. */
static int commit(struct kp_fd *e)
{
	int r;
	return kp_gset_end(e, 1, &r) ? r : kp_group_commit(e, FS(e));
}

static int abort_group(struct kp_fd *e)
{
	int r;
	return kp_gset_end(e, 0, &r) ? r : kp_group_abort(e, FS(e));
}

/* A descriptor that is not kura's has no group to offer: ENOTSUP tells
 * the caller to fall back (kura_atomic.h), as for a file system without
 * F2FS's ioctls. */
#define KURA_FD_OR_ENOTSUP(fd, e)                                            \
	struct kp_fd *e = kp_get(fd);                                        \
	if (!e) {                                                            \
		errno = fcntl((fd), F_GETFD) < 0 ? EBADF : ENOTSUP;          \
		return -1;                                                   \
	}

KP_EXPORT int kura_fbegin(int fd)
{
	KURA_FD_OR_ENOTSUP(fd, e);
	return (int)kp_ret(begin(e));
}

KP_EXPORT int kura_fcommit(int fd)
{
	KURA_FD_OR_ENOTSUP(fd, e);
	return (int)kp_ret(commit(e));
}

KP_EXPORT int kura_fabort(int fd)
{
	KURA_FD_OR_ENOTSUP(fd, e);
	return (int)kp_ret(abort_group(e));
}

/* The kernel's answers (fs/f2fs/file.c): starting a group where one is
 * open succeeds, committing without one is an fsync, aborting without
 * one does nothing.  Volatile writes (a file whose contents may vanish
 * at a crash) are not offered: ENOTTY, as a kernel without them says. */
int kp_atomic_ioctl(struct kp_fd *e, unsigned long req, void *arg, int *ret)
{
	int r;
	switch (req) {
	case F2FS_IOC_GET_FEATURES:
		if (!arg)
			r = -EFAULT;
		else
			*(uint32_t *)arg = F2FS_FEATURE_ATOMIC_WRITE, r = 0;
		break;
	case F2FS_IOC_START_ATOMIC_WRITE:
		/* Already in a group: the kernel's answer is success.  (A
		 * group on another description of the file is EBUSY.) */
		r = kura_atomic_shadow(FS(e), e->kfd, NULL) > 0 && !kp_gset_open ? 0 : begin(e);
		break;
	case F2FS_IOC_COMMIT_ATOMIC_WRITE:
		r = commit(e);
		break;
	case F2FS_IOC_ABORT_VOLATILE_WRITE:
		r = abort_group(e);
		break;
	default:
		return 0;
	}
	*ret = (int)kp_ret(r);
	return 1;
}
