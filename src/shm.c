#include "shm.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

int shm_trusted(int fd, const char *name, const struct stat *pool, char *why, size_t whylen)
{
	struct stat st;
	if (fstat(fd, &st))
		return -errno;
	/* The pool file's mode says who its users are: readers too take part
	 * in the locking, so a pool open to all has every user as one. */
	int maker_ok = st.st_uid == 0 || st.st_uid == geteuid() || st.st_uid == pool->st_uid ||
		       (st.st_gid == pool->st_gid && (pool->st_mode & 0060)) || (pool->st_mode & 0006);
	int mode_ok = !(st.st_mode & 0666 & ~pool->st_mode);
	if (S_ISREG(st.st_mode) && maker_ok && mode_ok)
		return 0;
	snprintf(why, whylen,
		 "/dev/shm%s belongs to uid %u, group %u, mode %03o: %s; it is refused (its owner or root can "
		 "remove it)",
		 name, (unsigned)st.st_uid, (unsigned)st.st_gid, (unsigned)(st.st_mode & 07777),
		 !S_ISREG(st.st_mode) ? "not a regular file"
		 : !maker_ok          ? "made by someone who is not a user of the pool"
				      : "open to users the pool is closed to");
	return -EPERM;
}
