/*
 * media.c — persistence back ends.
 *
 * pmem: stores are ordinary stores into the mapping; flush writes back each
 *   64-byte line with clwb (or clflushopt, or clflush), fence is sfence.  Used
 *   on DAX mappings (MAP_SYNC accepted) and device-DAX.
 * memory: for tmpfs and hugetlbfs, whose pages are the storage and die with
 *   the machine whatever we flush.  A crash of the process leaves every
 *   store it executed in the page, in program order (x86 stores are not
 *   reordered with each other), so flush is nothing and fence only stops the
 *   compiler.  Cache-line flushes would buy no durability there and cost
 *   most of an operation (on this machine clwb evicts the line).
 *   KURA_PERSIST=pmem restores them, to measure real persistent-memory cost.
 * file: the kernel may write any dirty page of a shared file mapping back
 *   at any moment, in any order, so a mapping of the pool file cannot be
 *   changed in place before the journal describing the change is durable.
 *   A read-write mount therefore maps a working copy of the pool in shared
 *   memory (media_map_copy; journal.c makes and keeps it): stores and
 *   fences there are the memory back end's, and the pool file changes only
 *   through media_disk_write/media_disk_sync, which journal.c orders.
 *   Mapping the pool file itself (mkfs) keeps the older rule: flush records
 *   the dirty pages and fence msyncs them (MS_SYNC).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <cpuid.h>
#include <emmintrin.h>
#include <linux/magic.h>
#include "fault.h"
#include "media.h"
#include "tracee.h"

#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif

static void flush_clwb(const void *p) { asm volatile("clwb %0" : "+m"(*(volatile char *)p)); }
static void flush_clflushopt(const void *p) { asm volatile("clflushopt %0" : "+m"(*(volatile char *)p)); }
static void flush_clflush(const void *p) { asm volatile("clflush %0" : "+m"(*(volatile char *)p)); }

/* cpuid is slow under a hypervisor and the answer never changes: ask once. */
static void (*best_flush(void))(const void *)
{
	static void (*cached)(const void *);
	void (*f)(const void *) = __atomic_load_n(&cached, __ATOMIC_RELAXED);
	if (f)
		return f;
	unsigned a, b, c, d;
	f = flush_clflush;
	if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
		if (b & (1u << 24))
			f = flush_clwb;
		else if (b & (1u << 23))
			f = flush_clflushopt;
	}
	__atomic_store_n(&cached, f, __ATOMIC_RELAXED);
	return f;
}

struct media_tracer media_mount_tracer;

static enum kura_persist env_override(enum kura_persist want)
{
	const char *e = getenv("KURA_PERSIST");
	if (e && !strcmp(e, "pmem"))
		return KURA_PERSIST_PMEM;
	if (e && !strcmp(e, "file"))
		return KURA_PERSIST_FILE;
	if (e && !strcmp(e, "memory"))
		return KURA_PERSIST_MEMORY;
	return want;
}

static int is_devdax(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISCHR(st.st_mode);
}

/* tmpfs and hugetlbfs have no backing store to write back to. */
static int memory_backed(int fd)
{
	struct statfs sf;
	if (fstatfs(fd, &sf) != 0)
		return 0;
	return sf.f_type == TMPFS_MAGIC || sf.f_type == HUGETLBFS_MAGIC;
}

int media_map(struct media *m, int fd, uint64_t size, enum kura_persist want, int read_only)
{
	memset(m, 0, sizeof *m);
	m->fd = fd;
	m->size = m->map_size = size;
	m->disk_fd = m->dio_fd = -1;
	m->tracer = media_mount_tracer;
	m->read_only = read_only;
	m->flush_line = best_flush();
	want = env_override(want);
	/* A read-only mount maps privately and writably: recovery of a crashed
	 * transaction then repairs only this process's view, never the file. */
	int prot = PROT_READ | PROT_WRITE;
	int flags = read_only ? MAP_PRIVATE : MAP_SHARED;
	void *p = MAP_FAILED;
	int dax = 0;
	if (!read_only && want != KURA_PERSIST_FILE) {
		p = mmap(NULL, size, prot, MAP_SHARED_VALIDATE | MAP_SYNC, fd, 0);
		dax = p != MAP_FAILED;
	}
	if (p == MAP_FAILED)
		p = mmap(NULL, size, prot, flags, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	m->base = p;
	if (want == KURA_PERSIST_AUTO)
		want = (dax || is_devdax(fd)) ? KURA_PERSIST_PMEM
		       : memory_backed(fd)    ? KURA_PERSIST_MEMORY
					      : KURA_PERSIST_FILE;
	m->kind = want;
	return 0;
}

void media_unmap(struct media *m)
{
	if (m->base)
		munmap(m->base, m->map_size);
	free(m->dirty);
	free(m->backed);
	free(m->cold);
	m->base = NULL;
	m->dirty = NULL;
	m->backed = NULL;
	m->cold = NULL;
}

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
	while (fallocate(fd, 0, (off_t)off, (off_t)len) != 0)
		if (errno != EINTR)
			return -errno;
	return 0;
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

const char *media_kind_name(const struct media *m)
{
	return m->kind == KURA_PERSIST_FILE ? "file" : m->kind == KURA_PERSIST_MEMORY ? "memory" : "pmem";
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

static void file_note_dirty(struct media *m, uint64_t off, size_t len)
{
	uint64_t start = off & ~4095ull, end = (off + len + 4095) & ~4095ull;
	if (m->ndirty) {
		typeof(*m->dirty) *last = &m->dirty[m->ndirty - 1];
		if (start <= last->end && end >= last->start) {
			if (start < last->start)
				last->start = start;
			if (end > last->end)
				last->end = end;
			return;
		}
	}
	if (m->ndirty == m->cap_dirty) {
		size_t cap = m->cap_dirty ? m->cap_dirty * 2 : 64;
		void *n = realloc(m->dirty, cap * sizeof *m->dirty);
		if (!n) {
			/* Out of memory for bookkeeping: fall back to syncing everything. */
			msync(m->base, m->size, MS_SYNC);
			m->ndirty = 0;
			return;
		}
		m->dirty = n;
		m->cap_dirty = cap;
	}
	m->dirty[m->ndirty].start = start;
	m->dirty[m->ndirty].end = end;
	m->ndirty++;
}

void media_flush_slow(struct media *m, uint64_t off, size_t len)
{
	if (!len)
		return;
	media_trace(m, MEDIA_FLUSH, off, NULL, len);
	if (m->read_only)
		return;
	if (m->kind == KURA_PERSIST_FILE && m->disk_fd < 0) {
		file_note_dirty(m, off, len);
		return;
	}
	if (m->kind != KURA_PERSIST_PMEM)
		return;
	const char *p = m->base + (off & ~(uint64_t)(MEDIA_LINE - 1));
	const char *end = m->base + off + len;
	for (; p < end; p += MEDIA_LINE)
		m->flush_line(p);
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
	uint64_t *cold = __atomic_load_n(&m->cold, __ATOMIC_ACQUIRE);
	uint64_t page = off / MEDIA_PAGE;
	if (!cold || !bit_set(cold, page))
		return;
	uint64_t end = ((off >> MEDIA_BACK_SHIFT) + 1) << MEDIA_BACK_SHIFT, last = page + 1;
	if (end > m->map_size)
		end = m->map_size;
	while (last < end / MEDIA_PAGE && bit_set(cold, last))
		last++;
	clear_bits(cold, page, last);
	populate(m, page * MEDIA_PAGE, (last - page) * MEDIA_PAGE);
}

/* 0, or -1 when the file takes no write(2) (hugetlbfs): the caller
 * stores through the map, now and from then on. */
static int copy_through_file(struct media *m, uint64_t off, const void *src, size_t len)
{
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

void media_fence_slow(struct media *m)
{
	if (m->kind == KURA_PERSIST_FILE && m->disk_fd < 0 && !m->read_only) {
		media_trace(m, MEDIA_FENCE, 0, m->dirty, m->ndirty); /* what msync will write */
		for (size_t i = 0; i < m->ndirty; i++)
			if (msync(m->base + m->dirty[i].start, m->dirty[i].end - m->dirty[i].start, MS_SYNC) &&
			    !m->io_err)
				m->io_err = errno;
		m->ndirty = 0;
		return;
	}
	media_trace(m, MEDIA_FENCE, 0, NULL, 0);
	if (m->kind != KURA_PERSIST_PMEM) {
		asm volatile("" ::: "memory");
		return;
	}
	asm volatile("sfence" ::: "memory");
}

void media_mark(struct media *m, uint64_t kind, uint64_t arg)
{
	media_trace(m, MEDIA_MARK, kind, NULL, arg);
}

int media_map_copy(struct media *m, int fd, uint64_t map_size, uint64_t pool_size, int disk_fd)
{
	memset(m, 0, sizeof *m);
	void *p = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	m->base = p;
	m->fd = fd;
	m->size = pool_size;
	m->map_size = map_size;
	m->disk_fd = disk_fd;
	m->dio_fd = -1;
	m->kind = KURA_PERSIST_FILE;
	m->flush_line = best_flush();
	m->tracer = media_mount_tracer;
	return 0;
}

void media_init_disk(struct media *m, int fd, uint64_t pool_size)
{
	memset(m, 0, sizeof *m);
	m->fd = m->disk_fd = fd;
	m->dio_fd = -1;
	m->size = pool_size;
	m->kind = KURA_PERSIST_FILE;
	m->tracer = media_mount_tracer;
}

static int write_all(struct media *m, int fd, uint64_t off, const void *src, size_t len)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = pwrite(fd, (const char *)src + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? errno : EIO;
			if (!m->io_err)
				m->io_err = e;
			return -e;
		}
		done += (size_t)n;
	}
	return 0;
}

int media_disk_write(struct media *m, uint64_t off, const void *src, size_t len)
{
	media_trace(m, MEDIA_DISK_WRITE, off, src, len);
	return write_all(m, m->disk_fd, off, src, len);
}

int media_disk_write_sync(struct media *m, uint64_t off, const void *src, size_t len)
{
	/* Traced as a sync of this write only, which is what an O_DIRECT|O_DSYNC
	 * write is (the device flush it ends with covers none of the page
	 * cache's dirty pages); the fallback, an fdatasync, syncs more, but
	 * the crash explorer must find a caller that counts on that. */
	media_trace(m, MEDIA_DISK_WRITE, off, src, len);
	if (kura_fault != FAULT_DROP_SYNC)
		media_trace(m, MEDIA_DISK_SYNC, off, NULL, len);
	if (m->dio_fd < 0 || kura_fault == FAULT_DROP_SYNC) {
		int err = write_all(m, m->disk_fd, off, src, len);
		if (err || kura_fault == FAULT_DROP_SYNC)
			return err;
		if (fdatasync(m->disk_fd)) {
			if (!m->io_err)
				m->io_err = errno;
			return -errno;
		}
		return 0;
	}
	return write_all(m, m->dio_fd, off, src, len);
}

int media_disk_sync(struct media *m)
{
	/* FAULT_DROP_SYNC: an injected bug (crash tests only) */
	if (kura_fault == FAULT_DROP_SYNC)
		return 0;
	media_trace(m, MEDIA_DISK_SYNC, 0, NULL, 0);
	if (fdatasync(m->disk_fd)) {
		if (!m->io_err)
			m->io_err = errno;
		return -errno;
	}
	return 0;
}
