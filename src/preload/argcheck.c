/*
 * argcheck.c — path arguments and buffers the layer or the engine may read
 * or fill (buffers: see "---- buffers" below).
 *
 * The kernel copies a path in with a fault-proof copy and answers EFAULT
 * for unreadable memory and ENAMETOOLONG for PATH_MAX bytes without a NUL.
 * The layer reads paths itself, so a bad pointer would crash it instead.
 * kp_path_arg() checks a path first: each page the string touches is
 * probed with process_vm_readv on this very process, which reports an
 * unreadable page as an error instead of faulting, and pages found
 * readable are remembered in a small per-thread cache, so a program that
 * keeps passing paths from its stack, its heap or its string literals pays
 * for a probe once per page.  The cache is forgotten whenever the program
 * unmaps or protects memory (munmap, mprotect, mremap, a MAP_FIXED mmap,
 * shmdt, a shrinking brk), the calls that can make a page unreadable.
 * glibc's own calls of those (malloc giving memory back) are not seen: a
 * path in memory freed that way is a use after free, which may then crash
 * here as it may anywhere.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kp.h"

#define PAGE 4096u
#define SLOTS 16

/* Bumped by every call that may make a page unreadable. */
static unsigned map_gen = 1;

static __thread struct {
	unsigned gen;
	uintptr_t page[SLOTS]; /* page address + 1: 0 is an empty slot */
} cache;

static void forget_pages(void)
{
	__atomic_add_fetch(&map_gen, 1, __ATOMIC_RELEASE);
}

/* Pages [first, end) read a byte each, in calls of up to BATCH pages: the
 * address of the first the program does not have, or end; *untold set
 * (and end returned) when the kernel will not tell (seccomp, an old
 * kernel). */
static uintptr_t first_unreadable(uintptr_t first, uintptr_t end, int *untold)
{
	enum { BATCH = 64 };
	char sink[BATCH];
	struct iovec local = { sink, 0 }, remote[BATCH];
	pid_t pid = kp_pid ? kp_pid : getpid();
	*untold = 0;
	for (uintptr_t p = first; p < end;) {
		size_t n = 0;
		for (; n < BATCH && p + n * PAGE < end; n++)
			remote[n] = (struct iovec){ (void *)(p + n * PAGE), 1 };
		local.iov_len = n;
		ssize_t r = process_vm_readv(pid, &local, 1, remote, n, 0);
		if (r < 0 && errno != EFAULT) {
			*untold = 1;
			return end;
		}
		if (r < (ssize_t)n)
			return p + (r > 0 ? (size_t)r : 0) * PAGE;
		p += n * PAGE;
	}
	return end;
}

/* 1 readable, 0 not; when the kernel will not tell (seccomp, an old
 * kernel), the string's own system call is the judge: probe with one that
 * reads it and does nothing (an invalid descriptor). */
static int probe(uintptr_t page, const char *path)
{
	int untold;
	if (first_unreadable(page, page + PAGE, &untold) < page + PAGE)
		return 0;
	if (untold) {
		char c;
		long r = kp_syscall(SYS_readlinkat, -1, path, &c, 1);
		return !(r < 0 && errno == EFAULT);
	}
	return 1;
}

static int page_readable(uintptr_t page, const char *path)
{
	unsigned gen = __atomic_load_n(&map_gen, __ATOMIC_ACQUIRE);
	if (cache.gen != gen) {
		memset(cache.page, 0, sizeof cache.page);
		cache.gen = gen;
	}
	unsigned slot = (unsigned)(page / PAGE) % SLOTS;
	if (cache.page[slot] == page + 1)
		return 1;
	int er = errno;
	int ok = probe(page, path);
	errno = er;
	if (ok)
		cache.page[slot] = page + 1;
	return ok;
}

int kp_path_arg(const char *path)
{
	uintptr_t a = (uintptr_t)path;
	/* The zero page and the kernel's half are never a program's. */
	if (a < PAGE || a >= (uintptr_t)1 << 63)
		return -EFAULT;
	size_t off = 0;
	while (off < PATH_MAX) {
		uintptr_t at = a + off, page = at & ~(uintptr_t)(PAGE - 1);
		if (!page_readable(page, path + off))
			return -EFAULT;
		size_t span = page + PAGE - at;
		if (span > PATH_MAX - off)
			span = PATH_MAX - off;
		if (memchr(path + off, 0, span))
			return 0;
		off += span;
	}
	return -ENAMETOOLONG;
}

int kp_path_arg_or_empty(const char *path, int empty_ok)
{
	int r = kp_path_arg(path);
	return r ? r : !*path && !empty_ok ? -ENOENT : 0;
}

/* ---- buffers ----
 *
 * The engine copies a call's data buffer, and writes its struct stat,
 * itself; the kernel answers EFAULT for memory a program does not have.
 * The same probe answers here, with a per-thread cache of ranges found
 * readable (a program reads and writes through the same few buffers
 * again and again), forgotten with the pages' cache.  Readable is what
 * can be told: a read() into memory mapped read-only still faults. */

#define RANGES 8

static __thread struct {
	unsigned gen, next;
	uintptr_t lo[RANGES], hi[RANGES];
} ranges;

size_t kp_mem_readable(const void *buf, size_t len)
{
	uintptr_t a = (uintptr_t)buf;
	if (!len)
		return 0;
	if (a + len < a)
		len = UINTPTR_MAX - a;
	unsigned gen = __atomic_load_n(&map_gen, __ATOMIC_ACQUIRE);
	if (ranges.gen != gen) {
		memset(&ranges, 0, sizeof ranges);
		ranges.gen = gen;
	}
	for (unsigned i = 0; i < RANGES; i++)
		if (a >= ranges.lo[i] && a + len <= ranges.hi[i])
			return len;
	if (a < PAGE || a >= (uintptr_t)1 << 63)
		return 0;
	uintptr_t first = a & ~(uintptr_t)(PAGE - 1), end = (a + len + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
	int er = errno, untold; /* untold: as before the probe, the copy judges */
	uintptr_t bad = first_unreadable(first, end, &untold);
	errno = er;
	if (bad < end)
		return bad > a ? bad - a : 0;
	unsigned i = ranges.next++ % RANGES;
	ranges.lo[i] = first;
	ranges.hi[i] = end;
	return len;
}

/* ---- the calls that can take pages away (map.c has munmap, mprotect and
 * mremap, which must also keep its table of kura maps) ---- */

KP_EXPORT int shmdt(const void *addr)
{
	int r = REAL(shmdt)(addr);
	forget_pages();
	return r;
}

KP_EXPORT int brk(void *addr)
{
	int r = REAL(brk)(addr);
	forget_pages();
	return r;
}

KP_EXPORT void *sbrk(intptr_t incr)
{
	void *r = REAL(sbrk)(incr);
	if (incr < 0)
		forget_pages();
	return r;
}

/* For map.c: a fixed mapping, munmap, mprotect, mremap. */
void kp_map_fixed(void)
{
	forget_pages();
}
