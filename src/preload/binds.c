/*
 * binds.c — mount(2) and umount(2) on pool paths: bind mounts inside a pool
 * (the engine's kura_bindat, src/bind.c).  The kernel cannot mount onto a
 * directory it does not see, so a bind whose target is in a pool is kura's,
 * seen by the processes of that pool.  Everything else goes to the kernel:
 * a target outside the prefixes, whatever its source (a pool path as a
 * kernel mount's source fails there, not seen).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/mount.h>

#include "kp.h"

/* Flags that make mount(2) something other than a new mount (remount,
 * move, a change of propagation): kura's binds have none of these. */
#define NOT_A_NEW_MOUNT (MS_REMOUNT | MS_MOVE | MS_SHARED | MS_PRIVATE | MS_SLAVE | MS_UNBINDABLE)

KP_EXPORT int mount(const char *source, const char *target, const char *fstype, unsigned long flags,
		    const void *data)
{
	RESOLVE(AT_FDCWD, target, t);
	if (t.where != KP_KURA)
		return (int)KP_KERNEL_CALL(t, AT_FDCWD, 1, REAL(mount)(source, t.p, fstype, flags, data));
	KFS(t);
	if ((flags & MS_MGC_MSK) == MS_MGC_VAL)
		flags &= ~(unsigned long)MS_MGC_MSK; /* the magic number old programs put in the top half */
	if ((flags & NOT_A_NEW_MOUNT) || !(flags & MS_BIND)) {
		/* A kernel file system cannot be mounted where only kura sees. */
		return kp_unsupported((flags & NOT_A_NEW_MOUNT) ? "mount (remount, move or propagation) on a pool path"
								: "mount of a file system on a pool path (only --bind)",
				      EOPNOTSUPP);
	}
	RESOLVE(AT_FDCWD, source, s);
	if (s.where != KP_KURA || s.mnt != t.mnt) {
		return kp_unsupported("bind mount into a pool from outside it", EXDEV);
	}
	return (int)kp_ret(kura_bindat(fs, s.kdirfd, s.p, t.kdirfd, t.p));
}

KP_EXPORT int umount2(const char *target, int flags)
{
	RESOLVE(AT_FDCWD, target, t);
	int follow = !(flags & UMOUNT_NOFOLLOW);
	if (t.where != KP_KURA)
		return (int)KP_KERNEL_CALL(t, AT_FDCWD, follow, REAL(umount2)(t.p, flags));
	KFS(t);
	if ((flags & ~(MNT_FORCE | MNT_DETACH | MNT_EXPIRE | UMOUNT_NOFOLLOW)) ||
	    ((flags & MNT_EXPIRE) && (flags & (MNT_FORCE | MNT_DETACH)))) {
		errno = EINVAL;
		return -1;
	}
	if (flags & MNT_EXPIRE) {
		return kp_unsupported("umount2(MNT_EXPIRE) of a pool path", EOPNOTSUPP);
	}
	/* A bind holds nothing busy, so MNT_FORCE and MNT_DETACH unbind at once. */
	return (int)kp_ret(
		KP_ENGINE(t, follow, kura_unbindat(fs, t.kdirfd, t.p, follow ? 0 : AT_SYMLINK_NOFOLLOW)));
}

KP_EXPORT int umount(const char *target)
{
	return umount2(target, 0);
}
