/*
 * media.c — persistence back ends (storage behind the mapping and filling
 * fresh blocks are media_fill.c's).
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
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <cpuid.h>
#include <linux/magic.h>
#include "fault.h"
#include "media.h"

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

const char *media_kind_name(const struct media *m)
{
	return m->kind == KURA_PERSIST_FILE ? "file" : m->kind == KURA_PERSIST_MEMORY ? "memory" : "pmem";
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
	struct media_own_write own;
	int r = 0;
	media_own_begin(&own, off + len);
	for (size_t done = 0; done < len;) {
		ssize_t n = pwrite(fd, (const char *)src + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? errno : EIO;
			if (!m->io_err)
				m->io_err = e;
			r = -e;
			break;
		}
		done += (size_t)n;
	}
	media_own_end(&own);
	return r;
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

void media_disk_start(struct media *m, uint64_t off, uint64_t len)
{
	(void)sync_file_range(m->disk_fd, (off_t)off, (off_t)len, SYNC_FILE_RANGE_WRITE); /* a hint; failures are the sync's to report */
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
