/*
 * mapcopy.c — MAP_PRIVATE of a kura file: a copy of the file taken at mmap
 * time.  POSIX leaves open whether later changes to the file show through
 * a private map, so a snapshot is a faithful one.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>

#include "kp.h"
#include "maptab.h"

#define FS(e) (kp_mounts[(e)->mnt].fs)

void *kp_map_private_copy(void *addr, size_t len, int prot, int flags, struct kp_fd *e, off_t off)
{
	if (off < 0 || (off & (PAGE - 1))) {
		errno = EINVAL;
		return MAP_FAILED;
	}
	if ((kura_fd_flags(FS(e), e->kfd) & O_ACCMODE) == O_WRONLY) {
		errno = EACCES;
		return MAP_FAILED;
	}
	void *p = REAL(mmap)(addr, len, PROT_READ | PROT_WRITE, (flags & ~MAP_TYPE) | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return p;
	size_t done = 0;
	while (done < len) {
		ssize_t r = kura_pread(FS(e), e->kfd, (char *)p + done, len - done, off + (off_t)done);
		if (r < 0) {
			REAL(munmap)(p, len);
			errno = (int)-r;
			return MAP_FAILED;
		}
		if (r == 0)
			break;
		done += (size_t)r;
	}
	if (prot != (PROT_READ | PROT_WRITE) && REAL(mprotect)(p, len, prot) < 0) {
		int er = errno;
		REAL(munmap)(p, len);
		errno = er;
		return MAP_FAILED;
	}
	return p;
}
