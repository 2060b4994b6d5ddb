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
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
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
 * itself; the kernel answers EFAULT for memory a program does not have,
 * or may not store into.  The same probe answers here, with a per-thread
 * cache of ranges found readable, or writable too (a program reads and
 * writes through the same few buffers again and again), forgotten with
 * the pages' cache.
 *
 * Whether a page may be stored into is asked by faulting it in for
 * writing (first_unwritable), which stores nothing but does what the
 * store would: a page never touched gets memory.  So callers probe what
 * the call will fill, not a large buffer a short read leaves untouched. */

#define RANGES 8

static __thread struct {
	unsigned gen, next;
	uintptr_t lo[RANGES], hi[RANGES];
	unsigned char writable[RANGES];
} ranges;

static int range_known(uintptr_t a, size_t len, int write)
{
	unsigned gen = __atomic_load_n(&map_gen, __ATOMIC_ACQUIRE);
	if (ranges.gen != gen) {
		memset(&ranges, 0, sizeof ranges);
		ranges.gen = gen;
	}
	for (unsigned i = 0; i < RANGES; i++)
		if (a >= ranges.lo[i] && a + len <= ranges.hi[i] && (!write || ranges.writable[i]))
			return 1;
	return 0;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* A line of /proc/self/maps: -1 if its range does not hold p, else
 * whether it lets the program store. */
static int maps_line_says(const char *line, uintptr_t p)
{
	unsigned long lo, hi;
	char perms[5];
	return sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && p >= lo && p < hi ? perms[1] == 'w' : -1;
}

/* Whether /proc/self/maps lets the program store into the page at p: 1,
 * 0, or -1 when it cannot be told. */
static int maps_let_store(uintptr_t p)
{
	int fd = REAL(open)("/proc/self/maps", O_RDONLY | O_CLOEXEC), said = -1, rest_of_line = 0;
	if (fd < 0)
		return -1;
	char buf[4096];
	size_t have = 0;
	ssize_t r;
	while (said < 0 && (r = REAL(read)(fd, buf + have, sizeof buf - 1 - have)) > 0) {
		have += (size_t)r;
		buf[have] = 0;
		char *line = buf, *nl;
		while (said < 0 && (nl = memchr(line, '\n', (size_t)(buf + have - line)))) {
			*nl = 0;
			if (!rest_of_line)
				said = maps_line_says(line, p);
			rest_of_line = 0;
			line = nl + 1;
		}
		have = (size_t)(buf + have - line);
		memmove(buf, line, have);
		if (said < 0 && have == sizeof buf - 1) {
			/* A line longer than the buffer (a long file name): its
			 * start says, the rest is skipped to its end. */
			if (!rest_of_line)
				said = maps_line_says(buf, p);
			rest_of_line = 1;
			have = 0;
		}
	}
	REAL(close)(fd);
	return said;
}

/* [a, end), found readable: where the first page the program may not
 * store into starts, or end (also when it cannot be told).  Faulting the
 * pages in for writing (MADV_POPULATE_WRITE, Linux 5.14) stores nothing
 * and fails on a page the program may not store into; it also fails where
 * it cannot populate (a device's PFN map, a kernel without the advice),
 * so a failure is confirmed by the page's permissions before it counts. */
static uintptr_t first_unwritable(uintptr_t a, uintptr_t end)
{
	uintptr_t first = a & ~(uintptr_t)(PAGE - 1), last = (end + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
	if (REAL(madvise)((void *)first, last - first, MADV_POPULATE_WRITE) == 0)
		return end;
	for (uintptr_t p = first; p < last; p += PAGE)
		if (REAL(madvise)((void *)p, PAGE, MADV_POPULATE_WRITE) != 0)
			return (errno == EINVAL || errno == EFAULT) && maps_let_store(p) == 0 ? p : end;
	return end;
}

static size_t mem_usable(const void *buf, size_t len, int write)
{
	uintptr_t a = (uintptr_t)buf;
	if (!len)
		return 0;
	if (a + len < a)
		len = UINTPTR_MAX - a;
	if (range_known(a, len, write))
		return len;
	if (a < PAGE || a >= (uintptr_t)1 << 63)
		return 0;
	uintptr_t first = a & ~(uintptr_t)(PAGE - 1), end = (a + len + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
	int er = errno, untold; /* untold: as before the probe, the copy judges */
	uintptr_t bad = first_unreadable(first, end, &untold);
	if (write && !untold) {
		/* Pages an atomic group shows read-only take stores. */
		kp_group_buffer((void *)buf, len);
		uintptr_t stop = bad < a + len ? bad : a + len, unwritable = stop > a ? first_unwritable(a, stop) : stop;
		if (unwritable < stop)
			bad = unwritable;
	}
	errno = er;
	if (bad < end)
		return bad > a ? bad - a : 0;
	unsigned i = ranges.next++ % RANGES;
	ranges.lo[i] = first;
	ranges.hi[i] = end;
	ranges.writable[i] = (unsigned char)write;
	return len;
}

size_t kp_mem_readable(const void *buf, size_t len)
{
	return mem_usable(buf, len, 0);
}

int kp_mem_known_writable(const void *buf, size_t len)
{
	uintptr_t a = (uintptr_t)buf;
	return a + len >= a && range_known(a, len, 1);
}

size_t kp_mem_writable(void *buf, size_t len)
{
	return mem_usable(buf, len, 1);
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
