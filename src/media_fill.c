/*
 * media_fill.c — storage behind the mapping, and filling fresh blocks
 * (see media.h): media_back gives the pool file storage before anything
 * is stored there; media_copy_nt, media_zero and media_memset fill, on
 * memory through the pool file where this process never mapped the page.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <unistd.h>
#include <emmintrin.h>
#include "media.h"
#include "tracee.h"

/*
 * Storage behind the mapping.  A pool file is sparse: a block gets storage
 * when first stored to, and through a mapping a store into a hole that the
 * file system cannot fill (tmpfs at its size or its memory cgroup's limit,
 * a full disk or DAX device) raises SIGBUS, killing the program in the
 * middle of an operation where the same write through the kernel would
 * have failed with ENOSPC.  So the allocator gives a block storage before
 * using it, and a full file system fails that one operation instead.
 *
 * kura never punches holes in the pool, so storage once given stays, and
 * each process remembers what it has given, 64 KiB at a time: fallocate
 * over pages that have storage already still walks them (about 6 us per
 * 64 KiB on tmpfs here).  Giving new storage costs about what it saves:
 * the first stores then find their pages and only map them (1 us a page
 * here, against 2 us for a fault that also allocates and clears one).
 */
int media_fallocate(int fd, uint64_t off, uint64_t len)
{
	struct media_own_write own;
	int r = 0;
	media_own_begin(&own, off + len);
	while (fallocate(fd, 0, (off_t)off, (off_t)len) != 0)
		if (errno != EINTR) {
			r = -errno;
			break;
		}
	media_own_end(&own);
	return r;
}

/*
 * The stores that follow storage given would each fault once a page to map
 * it, in the middle of an operation: 16 traps a chunk (a fresh pool's first
 * 20,000 create+stat+unlink cycles took 1,180 faults, 300 with this).
 * Where the mapping is of memory, one madvise maps the chunk instead.  The
 * kernel's work a page is about the same (1.2 us here), but the cycles ran
 * 7-9% faster (metabench alternated with the faulting build, medians of 9,
 * twice); a disk pool's first mount and its SQLite runs did not move.
 * A disk file is left alone: populating it writably would dirty pages for
 * write-back.  A kernel without MADV_POPULATE_WRITE (5.14) refuses it, and
 * the faults stay.
 */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static void populate(struct media *m, uint64_t off, uint64_t len)
{
	(void)madvise(m->base + off, len, MADV_POPULATE_WRITE);
}

/* Whether the pool mutex may be held across a system call that only
 * saves work (media_copy_nt's and media_zero's pwrite): not in a traced
 * process, which stops at each, lest its tracer, writing its log into the
 * pool (strace -f -o), wait on it.  Asked once a mount. */
static int syscalls_ok(struct media *m)
{
	if (!__atomic_load_n(&m->asked_tracer, __ATOMIC_RELAXED)) {
		if (tracee_traced())
			__atomic_store_n(&m->copy_by_map, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&m->asked_tracer, 1, __ATOMIC_RELEASE);
	}
	return !__atomic_load_n(&m->copy_by_map, __ATOMIC_ACQUIRE);
}

/* A bitmap of nbits shared by the mount's threads, made on first use:
 * NULL when there is no memory for it (then nothing is remembered). */
static uint64_t *lazy_bitmap(uint64_t **slot, uint64_t nbits)
{
	uint64_t *bits = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (bits)
		return bits;
	uint64_t *fresh = calloc((nbits + 63) / 64, sizeof *fresh);
	if (fresh && !__atomic_compare_exchange_n(slot, &bits, fresh, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		free(fresh); /* another thread's came first: bits is it */
		return bits;
	}
	return fresh;
}

static int bit_set(const uint64_t *bits, uint64_t i)
{
	return __atomic_load_n(&bits[i / 64], __ATOMIC_RELAXED) >> (i % 64) & 1;
}

/* Release: a thread that sees a chunk's bit given also sees it given. */
static void set_bits(uint64_t *bits, uint64_t from, uint64_t to)
{
	for (uint64_t i = from; i < to; i++)
		__atomic_fetch_or(&bits[i / 64], 1ull << (i % 64), __ATOMIC_RELEASE);
}

static void clear_bits(uint64_t *bits, uint64_t from, uint64_t to)
{
	for (uint64_t i = from; i < to; i++)
		__atomic_fetch_and(&bits[i / 64], ~(1ull << (i % 64)), __ATOMIC_RELAXED);
}

/*
 * A chunk that file data will fill is given storage but not mapped: a
 * page's data then goes in through the file (media_copy_nt's pwrite),
 * which finds the page fallocate made and fills it, where populating it
 * first would clear it and map it only to have it overwritten.  Writing
 * 512 MiB into a fresh memory pool through the API, 5 runs alternated:
 * 1 MiB writes 1.54 -> 2.16 GB/s, 4 KiB writes 1.45 -> 1.82 (medians).
 * Reading such a page later maps it with a fault (fault-around maps 16 at
 * a time), which populating would have spared.
 */
static void mark_cold(struct media *m, uint64_t lo, uint64_t hi)
{
	if (!syscalls_ok(m))
		return;
	uint64_t *cold = lazy_bitmap(&m->cold, (m->map_size + MEDIA_PAGE - 1) / MEDIA_PAGE);
	if (cold)
		set_bits(cold, lo / MEDIA_PAGE, (hi + MEDIA_PAGE - 1) / MEDIA_PAGE);
}

int media_back_slow(struct media *m, uint64_t off, uint64_t len, enum media_fill how)
{
	if (m->read_only || !len || off >= m->map_size)
		return 0; /* a private map: its stores copy pages, never the file's */
	if (len > m->map_size - off)
		len = m->map_size - off;
	uint64_t *backed = lazy_bitmap(&m->backed, (m->map_size + (1ull << MEDIA_BACK_SHIFT) - 1) >> MEDIA_BACK_SHIFT);
	for (uint64_t c = off >> MEDIA_BACK_SHIFT; c <= (off + len - 1) >> MEDIA_BACK_SHIFT; c++) {
		if (backed && bit_set(backed, c))
			continue;
		uint64_t lo = c << MEDIA_BACK_SHIFT, hi = lo + (1ull << MEDIA_BACK_SHIFT) < m->map_size ? lo + (1ull << MEDIA_BACK_SHIFT) : m->map_size;
		int err = media_fallocate(m->fd, lo, hi - lo);
		if (err == -ENOSPC || err == -EDQUOT) {
			/* The range may fit where its whole chunk does not. */
			uint64_t a = lo > off ? lo : off, b = hi < off + len ? hi : off + len;
			if ((err = media_fallocate(m->fd, a, b - a)))
				return err;
			continue; /* the rest of the chunk may still be a hole */
		}
		if (err == -EIO || err == -ENOMEM)
			return err;
		/* Given, or a file that fallocate cannot fill (device DAX, a file
		 * system without it): nothing more to do there either way. */
		if (!err && media_is_memory(m)) {
			if (how == MEDIA_FILL_STORES)
				populate(m, lo, hi - lo);
			else
				mark_cold(m, lo, hi);
		}
		if (backed)
			set_bits(backed, c, c + 1);
	}
	return 0;
}

static void trace_fill(struct media *m, uint64_t off, int c, size_t len)
{
	if (m->tracer.event) {
		char buf[4096];
		memset(buf, c, sizeof buf);
		for (size_t done = 0; done < len;) {
			size_t n = len - done < sizeof buf ? len - done : sizeof buf;
			media_trace(m, MEDIA_STORE, off + done, buf, n);
			done += n;
		}
	}
}

void media_memset(struct media *m, uint64_t off, int c, size_t len)
{
	trace_fill(m, off, c, len);
	memset(m->base + off, c, len);
}

/* Streaming stores skip the read-for-ownership of every destination line:
 * the block being filled is fresh and cold, so a cached copy would first
 * load 4 KiB from DRAM just to overwrite it.  They are weakly ordered, so
 * an sfence follows even in the memory back end: the map entry that links
 * the block in must not become visible before its data. */
static void stream_copy(char *dst, const char *src, size_t len)
{
	for (size_t i = 0; i < len; i += 16)
		_mm_stream_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(src + i)));
	_mm_sfence();
}

/* The leading part of [off, off + len) whose pages are all cold or all
 * not (whole pages; all of it, not cold, where nothing is cold): its
 * length, and in *cold which.  Cold pages are filled from now on, so no
 * longer cold. */
static size_t cold_prefix(struct media *m, uint64_t off, size_t len, int *cold)
{
	uint64_t *bits = __atomic_load_n(&m->cold, __ATOMIC_ACQUIRE);
	*cold = 0;
	if (!bits || (off | len) % MEDIA_PAGE || !len || m->read_only ||
	    __atomic_load_n(&m->copy_by_map, __ATOMIC_RELAXED))
		return len;
	uint64_t first = off / MEDIA_PAGE, end = (off + len) / MEDIA_PAGE, last = first + 1;
	*cold = bit_set(bits, first);
	while (last < end && bit_set(bits, last) == *cold)
		last++;
	if (*cold)
		clear_bits(bits, first, last);
	return (last - first) * MEDIA_PAGE;
}

void media_warm(struct media *m, uint64_t off)
{
	uint64_t end = ((off >> MEDIA_BACK_SHIFT) + 1) << MEDIA_BACK_SHIFT;
	int cold;
	size_t part = cold_prefix(m, off, (end < m->map_size ? end : m->map_size) - off, &cold);
	if (cold)
		populate(m, off, part);
}

/* 0, or -1 when the file takes no write(2) (hugetlbfs): the caller
 * stores through the map, now and from then on.  Past the file size
 * limit only this once: the write would fail, but not for good. */
static int copy_through_file(struct media *m, uint64_t off, const void *src, size_t len)
{
	if (off + len > __atomic_load_n(&media_fsize_limit, __ATOMIC_RELAXED))
		return -1;
	for (size_t done = 0; done < len;) {
		ssize_t n = pwrite(m->fd, (const char *)src + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			__atomic_store_n(&m->copy_by_map, 1, __ATOMIC_RELAXED);
			return -1;
		}
		done += (size_t)n;
	}
	return 0;
}

/*
 * fallocate of a kura file on memory zeroed each block through the map:
 * the kernel cleared the page to map it and kura cleared it again.  A
 * page never mapped takes its zeros through the file instead, as
 * media_copy_nt's data does: fallocate of 1 GiB under kura run, runs
 * alternated, 0.74-1.20 -> 0.55-0.61 s (medians of two sets; tmpfs
 * 0.29).  Telling a hole of the pool file, which reads as zero already,
 * would take lseek's SEEK_DATA, which on tmpfs walks the hole to its end:
 * a 512 MiB fallocate took minutes.
 */
void media_zero(struct media *m, uint64_t off, size_t len)
{
	static const char zeros[MEDIA_PAGE];
	trace_fill(m, off, 0, len);
	for (size_t done = 0, part; done < len; done += part) {
		int cold;
		part = cold_prefix(m, off + done, len - done, &cold);
		for (size_t z = 0; cold && z < part; z += sizeof zeros)
			cold = !copy_through_file(m, off + done + z, zeros, sizeof zeros);
		if (!cold)
			memset(m->base + off + done, 0, part);
	}
}

static void copy_through_map(struct media *m, uint64_t off, const void *src, size_t len)
{
	char *dst = m->base + off;
	if (((uintptr_t)dst & 15) == 0 && (len & 15) == 0 && (m->kind != KURA_PERSIST_FILE || m->disk_fd >= 0) &&
	    !m->fresh_cached) {
		stream_copy(dst, src, len); /* bypasses the cache: nothing left to flush */
		return;
	}
	memcpy(dst, src, len);
	struct media_tracer saved = m->tracer;
	m->tracer.event = NULL; /* the NT event already implies the flush */
	media_flush(m, off, len);
	m->tracer = saved;
}

void media_copy_nt(struct media *m, uint64_t off, const void *src, size_t len)
{
	media_trace(m, MEDIA_NT, off, src, len);
	/* A write returns with the data in the page the map shows: as
	 * visible, and as ordered before the stores that follow, as stores
	 * and an sfence would make it.  One write a run of cold pages: a
	 * 1 MiB write of fresh blocks side by side is one. */
	for (size_t done = 0, part; done < len; done += part) {
		int cold;
		part = cold_prefix(m, off + done, len - done, &cold);
		if (!cold || copy_through_file(m, off + done, (const char *)src + done, part))
			copy_through_map(m, off + done, (const char *)src + done, part);
	}
}
