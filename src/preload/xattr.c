/*
 * xattr.c — the extended-attribute calls (getxattr(2) and its l-, f- and
 * list/remove relatives), served by the engine's xattr.c for kura paths
 * and descriptors, the kernel's otherwise.  The path forms go through
 * the same resolution as every path call; the f- forms name the
 * descriptor itself (AT_EMPTY_PATH).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/xattr.h>

#include "kp.h"

/* A name the engine may read: the kernel answers EFAULT for a bad one. */
static int name_ok(const char *name)
{
	int r = kp_path_arg(name);
	return r == -EFAULT ? r : 0;
}

/* note: the event a success reports (IN_ATTRIB for a change), or 0. */
#define XATTR_PATH_CALL(path, follow, note, kernel_call, engine_call)                               \
	do {                                                                                          \
		RESOLVE(AT_FDCWD, path, kp);                                                          \
		if (kp.where != KP_KURA)                                                              \
			return KP_KERNEL_CALL(kp, AT_FDCWD, follow, kernel_call);                     \
		KFS(kp);                                                                              \
		int flags_ = (follow) ? 0 : AT_SYMLINK_NOFOLLOW;                                      \
		(void)flags_;                                                                         \
		long r_ = KP_ENGINE(kp, follow, engine_call);                                         \
		return kp_ret((note) ? NOTED_AT(kp, r_, (note), KN_BOTH) : r_);                       \
	} while (0)

#define FS_OF(e) (kp_mounts[(e)->mnt].fs)

/* A value setxattr reads: the kernel copies it in first (E2BIG past its
 * limit, EFAULT if it cannot), before it looks at the path. */
static int value_ok(const void *value, size_t size)
{
	return size && size <= XATTR_SIZE_MAX && !KP_MEM_OK(value, size) ? -EFAULT : 0;
}

/* The engine's answer into a buffer the program may not have: the size
 * first, and EFAULT only where Linux would have copied something. */
static ssize_t get_into(kura_fs *fs, int dirfd, const char *p, const char *name, void *value, size_t size, int flags)
{
	if (!size || KP_MEM_FILL_OK(value, size))
		return kura_getxattrat(fs, dirfd, p, name, value, size, flags);
	ssize_t r = kura_getxattrat(fs, dirfd, p, name, NULL, 0, flags);
	return r <= 0 ? r : (size_t)r > size ? -ERANGE : -EFAULT;
}

static ssize_t list_into(kura_fs *fs, int dirfd, const char *p, char *list, size_t size, int flags)
{
	if (!size || KP_MEM_FILL_OK(list, size))
		return kura_listxattrat(fs, dirfd, p, list, size, flags);
	ssize_t r = kura_listxattrat(fs, dirfd, p, NULL, 0, flags);
	return r <= 0 ? r : (size_t)r > size ? -ERANGE : -EFAULT;
}

static ssize_t get_at(const char *path, const char *name, void *value, size_t size, int follow)
{
	int r = name_ok(name);
	if (r)
		return kp_ret(r);
	XATTR_PATH_CALL(path, follow, 0,
			follow ? REAL(getxattr)(kp.p, name, value, size) : REAL(lgetxattr)(kp.p, name, value, size),
			get_into(fs, kp.kdirfd, kp.p, name, value, size, flags_));
}
KP_EXPORT ssize_t getxattr(const char *path, const char *name, void *value, size_t size)
{
	return get_at(path, name, value, size, 1);
}
KP_EXPORT ssize_t lgetxattr(const char *path, const char *name, void *value, size_t size)
{
	return get_at(path, name, value, size, 0);
}
KP_EXPORT ssize_t fgetxattr(int fd, const char *name, void *value, size_t size)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(fgetxattr)(fd, name, value, size);
	int r = name_ok(name);
	return kp_ret(r ? r : get_into(FS_OF(e), e->kfd, "", name, value, size, AT_EMPTY_PATH));
}

static int set_at(const char *path, const char *name, const void *value, size_t size, int xflags, int follow)
{
	int r = name_ok(name) ?: value_ok(value, size);
	if (r)
		return (int)kp_ret(r);
	XATTR_PATH_CALL(path, follow, IN_ATTRIB,
			follow ? REAL(setxattr)(kp.p, name, value, size, xflags)
			       : REAL(lsetxattr)(kp.p, name, value, size, xflags),
			kura_setxattrat(fs, kp.kdirfd, kp.p, name, value, size, xflags, flags_));
}
KP_EXPORT int setxattr(const char *path, const char *name, const void *value, size_t size, int xflags)
{
	return set_at(path, name, value, size, xflags, 1);
}
KP_EXPORT int lsetxattr(const char *path, const char *name, const void *value, size_t size, int xflags)
{
	return set_at(path, name, value, size, xflags, 0);
}
KP_EXPORT int fsetxattr(int fd, const char *name, const void *value, size_t size, int xflags)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(fsetxattr)(fd, name, value, size, xflags);
	int r = name_ok(name) ?: value_ok(value, size);
	return (int)kp_ret(r ? r : kp_noted(e, kura_setxattrat(FS_OF(e), e->kfd, "", name, value, size, xflags, AT_EMPTY_PATH), 0, IN_ATTRIB));
}

static ssize_t list_at(const char *path, char *list, size_t size, int follow)
{
	XATTR_PATH_CALL(path, follow, 0, follow ? REAL(listxattr)(kp.p, list, size) : REAL(llistxattr)(kp.p, list, size),
			list_into(fs, kp.kdirfd, kp.p, list, size, flags_));
}
KP_EXPORT ssize_t listxattr(const char *path, char *list, size_t size)
{
	return list_at(path, list, size, 1);
}
KP_EXPORT ssize_t llistxattr(const char *path, char *list, size_t size)
{
	return list_at(path, list, size, 0);
}
KP_EXPORT ssize_t flistxattr(int fd, char *list, size_t size)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(flistxattr)(fd, list, size);
	return kp_ret(list_into(FS_OF(e), e->kfd, "", list, size, AT_EMPTY_PATH));
}

static int remove_at(const char *path, const char *name, int follow)
{
	int r = name_ok(name);
	if (r)
		return (int)kp_ret(r);
	XATTR_PATH_CALL(path, follow, IN_ATTRIB, follow ? REAL(removexattr)(kp.p, name) : REAL(lremovexattr)(kp.p, name),
			kura_removexattrat(fs, kp.kdirfd, kp.p, name, flags_));
}
KP_EXPORT int removexattr(const char *path, const char *name)
{
	return remove_at(path, name, 1);
}
KP_EXPORT int lremovexattr(const char *path, const char *name)
{
	return remove_at(path, name, 0);
}
KP_EXPORT int fremovexattr(int fd, const char *name)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(fremovexattr)(fd, name);
	int r = name_ok(name);
	return (int)kp_ret(r ? r : kp_noted(e, kura_removexattrat(FS_OF(e), e->kfd, "", name, AT_EMPTY_PATH), 0, IN_ATTRIB));
}
