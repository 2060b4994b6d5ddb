/*
 * mapsync.c — what msync, fsync, madvise, a truncation and a SIGBUS do to
 * this process's shared maps of kura files (the table is map.c's).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/mman.h>

#include <limits.h>
#include <sys/uio.h>

#include "kp.h"
#include "maptab.h"

/* Applies f to the part of every map inside [addr, addr + len). */
static int each_part(void *addr, size_t len, int (*f)(kura_fs *fs, const struct kp_map *m, uint64_t first, uint64_t n, int arg),
		     int arg)
{
	int err = 0;
	kp_maps_lock();
	size_t count = kp_maps_count();
	for (size_t i = 0; i < count && !err; i++) {
		struct kp_map *m = kp_maps_at(i);
		char *from = (char *)addr > m->addr ? (char *)addr : m->addr;
		char *to = (char *)addr + len < m->addr + m->len ? (char *)addr + len : m->addr + m->len;
		kura_fs *fs = kp_fs(m->mnt);
		if (from < to && fs)
			err = f(fs, m, (m->off + (uint64_t)(from - m->addr)) / PAGE,
				((uint64_t)(to - from) + PAGE - 1) / PAGE, arg);
	}
	kp_maps_unlock();
	return err;
}

static int sync_part(kura_fs *fs, const struct kp_map *m, uint64_t first, uint64_t n, int how)
{
	return (m->prot & PROT_WRITE) || m->may_write ? kura_map_sync(fs, m->ino, first, n, how) : 0;
}

KP_EXPORT int msync(void *addr, size_t len, int flags)
{
	int r = REAL(msync)(addr, len, flags); /* the kernel's checks of flags and range */
	if (r == 0 && kp_maps_count()) {
		int how = KURA_MAP_RECORD | ((flags & MS_SYNC) ? KURA_MAP_DURABLE : 0);
		int err = each_part(addr, len, sync_part, how);
		if (err) {
			errno = -err;
			return -1;
		}
	}
	return r;
}

KP_EXPORT int madvise(void *addr, size_t len, int advice)
{
	/* MADV_REMOVE would punch the pool file itself. */
	if ((advice == MADV_REMOVE) && kp_maps_count()) {
		kp_maps_lock();
		int ours = kp_maps_overlap(addr, len);
		kp_maps_unlock();
		if (ours)
			return kp_unsupported("madvise MADV_REMOVE of a kura map", EOPNOTSUPP), -1;
	}
	return REAL(madvise)(addr, len, advice);
}

/* fsync and fdatasync of a file make this process's maps of it durable
 * too: their stores are recorded, and the caller's fsync then waits. */
int kp_map_sync_ino(int mnt, uint64_t ino)
{
	int err = 0;
	if (!kp_maps_count())
		return 0;
	kp_maps_lock();
	size_t count = kp_maps_count();
	for (size_t i = 0; i < count && !err; i++) {
		struct kp_map *m = kp_maps_at(i);
		kura_fs *fs = kp_fs(m->mnt);
		if (m->mnt == mnt && m->ino == ino && fs && (m->prot & PROT_WRITE))
			err = kura_map_sync(fs, m->ino, m->off / PAGE, m->len / PAGE, KURA_MAP_RECORD);
	}
	kp_maps_unlock();
	return err;
}

/* After this process truncated a mapped file: its pages past the new end
 * raise SIGBUS, as on Linux.  (Other processes' maps keep showing the
 * blocks, which the engine keeps for them: see src/mapped.h.)  The
 * truncation moved the file's count of truncations that kept blocks from
 * before to after (kura_map_own_truncation); a map clean at before is
 * clean at after once covered, and if every map of the file anywhere is
 * this process's and clean, the kept blocks can go now: a program that
 * never unmaps would otherwise hold all it ever truncated. */
void kp_map_truncated(int mnt, uint64_t ino, uint64_t size, uint64_t before, uint64_t after)
{
	if (!kp_maps_count())
		return;
	uint64_t pins = 0, end_page = (size + PAGE - 1) / PAGE;
	int clean = after != 0;
	kp_maps_lock();
	size_t count = kp_maps_count();
	for (size_t i = 0; i < count; i++) {
		struct kp_map *m = kp_maps_at(i);
		if (m->mnt != mnt || m->ino != ino)
			continue;
		size_t known = m->len / PAGE - m->eof_pages;
		if (end_page < m->off / PAGE + known) {
			size_t from = end_page > m->off / PAGE ? (size_t)(end_page - m->off / PAGE) : 0;
			if (kp_map_cover(m, from, known, 0))
				clean = 0; /* its pages may still show what was cut off */
		}
		pins++;
		if (after && m->truncs == before)
			m->truncs = after;
		clean &= m->truncs == after;
	}
	kura_fs *fs = clean && pins ? kp_fs(mnt) : NULL;
	if (fs)
		kura_map_trim(fs, ino, pins, after);
	kp_maps_unlock();
}

/* ---- SIGBUS on a page that came within the file (mapsig.c has the
 * handlers) ---- */

/* The first page of m past the end of the file now (pages from `page`
 * looked at; 0 if the file cannot be asked), and in *off the block of
 * `page` (0 for a hole or past the end). */
static size_t file_end_page(kura_fs *fs, const struct kp_map *m, size_t page, uint64_t *off)
{
	*off = 0;
	int64_t size = fs ? kura_map_blocks(fs, m->ino, m->off / PAGE + page, 1, 0, off) : -1;
	return size > 0 && (uint64_t)size > m->off ? (size_t)(((uint64_t)size - m->off + PAGE - 1) / PAGE) : 0;
}

/* In the handler: maps the page at addr if it is a map's page that lies
 * within the file now.  the table's lock may be held by the interrupted thread
 * itself, so it is only tried. */
int kp_map_fault_in(void *addr)
{
	if (kp_maps_trylock())
		return 0;
	int ok = 0;
	struct kp_map *m = kp_maps_find(addr);
	if (m) {
		size_t page = (size_t)((char *)addr - m->addr) / PAGE;
		size_t upto = page + 64 < m->len / PAGE ? page + 64 : m->len / PAGE;
		uint64_t off;
		kura_fs *fs = kp_fs(m->mnt);
		/* A fault inside an engine call (kura_write from a map page past
		 * the end, say) must not look the page up: the lookup may wait
		 * for the pool mutex this thread holds.  It stays a SIGBUS. */
		if (fs && kura_in_operation(fs))
			fs = NULL;
		if (page < file_end_page(fs, m, page, &off)) {
			int er = errno;
			/* Filling a hole takes the pool mutex, which this thread
			 * may hold if the fault is the layer's own access. */
			ok = (off || !kp_inside) &&
			     (kp_map_cover(m, page, upto, 2) == 0 || kp_map_cover(m, page, page + 1, 2) == 0);
			errno = er;
		}
	}
	kp_maps_unlock();
	return ok;
}

/* ---- buffers of kura calls in such pages ---- */

/* The engine copies a call's buffer with its pool mutex held, where a page
 * of a map past the file's end as the map last knew it cannot be mapped in
 * (kp_map_fault_in refuses, the lookup would wait for that mutex): the
 * copy would end the program with SIGBUS.  The kernel, copying for a
 * write() from such a page after the file grew, maps it in; from a page
 * still past the end, it copies up to there and fails with EFAULT.  So
 * before the call: pages of the buffer that came within the file are
 * mapped now, and the bytes before the first page still past the end are
 * what the call may use.  A buffer in no map (the lock-free look below)
 * does not take the table's lock.  Kernel calls get the same through
 * kp_map_kernel_buffer, which keeps the engine's own I/O away from that
 * lock. */
static int meets_a_map(uintptr_t lo, uintptr_t hi);

size_t kp_map_prepare(const void *buf, size_t len)
{
	const char *lo = buf, *hi = lo + len;
	if (hi < lo || kp_inside || meets_a_map((uintptr_t)lo, (uintptr_t)hi) == 0)
		return len;
	size_t usable = len;
	kp_maps_lock();
	size_t count = kp_maps_count();
	for (size_t i = 0; i < count; i++) {
		struct kp_map *m = kp_maps_at(i);
		/* A lazy map's holes raise SIGBUS anywhere in it (map.c's cover). */
		size_t npages = m->len / PAGE, eof_from = m->lazy_holes ? 0 : npages - m->eof_pages;
		const char *tail = m->addr + eof_from * PAGE, *end = m->addr + m->len;
		const char *from = lo > tail ? lo : tail, *to = hi < end ? hi : end;
		if ((!m->eof_pages && !m->lazy_holes) || from >= to)
			continue;
		size_t first = (size_t)(from - m->addr) / PAGE, last = (size_t)(to - m->addr + PAGE - 1) / PAGE;
		uint64_t off;
		size_t within = file_end_page(kp_fs(m->mnt), m, first, &off);
		size_t mapped = within < last ? within : last;
		if (mapped > first && kp_map_cover(m, first, mapped, 2))
			mapped = first;
		const char *bad = m->addr + (mapped > first ? mapped : first) * PAGE;
		if (mapped < last && bad < to) {
			bad = bad > lo ? bad : lo;
			if ((size_t)(bad - lo) < usable)
				usable = (size_t)(bad - lo);
		}
	}
	kp_maps_unlock();
	return usable;
}

/* ---- buffers handed to the kernel ----
 *
 * A kernel call from or into a page of a kura map that the file grew into
 * since the mmap faults in the kernel, which answers EFAULT where Linux's
 * own map would simply hold the page: such pages are mapped in first, as
 * for kura calls.  But the engine's own reads and writes of the pool and
 * its journal come through the same wrappers, some with the pool's or the
 * journal's mutex held, and taking the maps' lock there could deadlock
 * with a thread that holds it and waits for the pool (kp_map_cover).  So
 * the maps' ranges are published lock-free as well (a sequence count that
 * is odd while they are rewritten), and only a buffer that lies in a map
 * takes the lock: the engine's never do.  Past PUBLISHED maps, or while a
 * rewrite cannot be waited out (a signal handler interrupting it), the
 * kernel is handed the buffer as it is. */
#define PUBLISHED 64
static struct { uintptr_t lo, hi; } published[PUBLISHED];
static unsigned npublished; /* PUBLISHED + 1: more maps than that */
static unsigned publish_seq;

void kp_maps_publish(void)
{
	size_t n = kp_maps_count();
	unsigned seq = __atomic_load_n(&publish_seq, __ATOMIC_RELAXED);
	__atomic_store_n(&publish_seq, seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	for (size_t i = 0; i < n && i < PUBLISHED; i++) {
		const struct kp_map *m = kp_maps_at(i);
		__atomic_store_n(&published[i].lo, (uintptr_t)m->addr, __ATOMIC_RELAXED);
		__atomic_store_n(&published[i].hi, (uintptr_t)m->addr + m->len, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&npublished, n > PUBLISHED ? PUBLISHED + 1 : (unsigned)n, __ATOMIC_RELAXED);
	__atomic_store_n(&publish_seq, seq + 2, __ATOMIC_RELEASE);
}

/* 1 if [lo, hi) meets a kura map, 0 if not, -1 if it cannot be told. */
static int meets_a_map(uintptr_t lo, uintptr_t hi)
{
	for (int tries = 0; tries < 1000; tries++) {
		unsigned seq = __atomic_load_n(&publish_seq, __ATOMIC_ACQUIRE);
		if (seq & 1) {
			__builtin_ia32_pause();
			continue;
		}
		unsigned n = __atomic_load_n(&npublished, __ATOMIC_RELAXED);
		int met = n > PUBLISHED ? -1 : 0;
		for (unsigned i = 0; i < n && i < PUBLISHED && !met; i++)
			met = lo < __atomic_load_n(&published[i].hi, __ATOMIC_RELAXED) &&
			      __atomic_load_n(&published[i].lo, __ATOMIC_RELAXED) < hi;
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&publish_seq, __ATOMIC_RELAXED) == seq)
			return met;
	}
	return -1;
}

void kp_map_kernel_buffer_slow(const void *buf, size_t len)
{
	uintptr_t lo = (uintptr_t)buf;
	/* Unlike a kura call's, a buffer that cannot be told is left alone. */
	if (len && lo + len > lo && meets_a_map(lo, lo + len) == 1)
		(void)kp_map_prepare(buf, len);
}

void kp_map_kernel_iov_slow(const struct iovec *iov, size_t cnt)
{
	/* A vector the kernel would refuse is left for it to refuse. */
	if (!cnt || cnt > IOV_MAX || !KP_MEM_OK(iov, cnt * sizeof *iov))
		return;
	for (size_t i = 0; i < cnt; i++)
		kp_map_kernel_buffer_slow(iov[i].iov_base, iov[i].iov_len);
}
