/*
 * media.h — the only code that writes to the pool.
 *
 * The pool is mapped once, MAP_SHARED.  Loads go straight through
 * media_ptr(); every store goes through a media_* call so that (a) the
 * persistence back end can make it durable and (b) a test tracer can record
 * it and replay any crash state.  Nothing above this layer writes through a
 * pointer into the mapping.
 *
 * Durability contract: a store becomes durable once it has been flushed and a
 * fence has completed after the flush.  media_copy_nt() counts as flushed.
 * An aligned media_store64() is never torn.
 */
#ifndef KURA_MEDIA_H
#define KURA_MEDIA_H

#include <signal.h>
#include <sys/resource.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "kura.h"

#define MEDIA_LINE 64u

enum media_event {
	MEDIA_STORE,   /* data, len bytes at off */
	MEDIA_STORE64, /* 8-byte failure-atomic store */
	MEDIA_NT,      /* non-temporal copy: already flushed */
	MEDIA_FLUSH,
	MEDIA_FENCE,   /* file back end: data = the [start, end) runs it msyncs, as
	                  pairs of uint64_t, and len = their count */
	MEDIA_MARK,    /* annotation for the crash harness: off = kind, len = arg */
	MEDIA_DISK_WRITE, /* file back end: data, len bytes written to the pool file at off */
	MEDIA_DISK_SYNC,  /* file back end: every disk write before it is durable; with len,
	                     only those to [off, off + len) (the end of an O_DSYNC write) */
};

/* A tracer sees every event before it takes effect on the mapping. */
struct media_tracer {
	void (*event)(void *ctx, enum media_event ev, uint64_t off, const void *data, uint64_t len);
	void *ctx;
};

struct media {
	char *base;
	uint64_t size;
	int fd;
	int read_only;
	enum kura_persist kind;      /* resolved: PMEM or FILE */
	void (*flush_line)(const void *p);
	struct media_tracer tracer;  /* event == NULL when not tracing */
	/* file back end: pages flushed since the last fence, as [start, end) runs */
	struct { uint64_t start, end; } *dirty;
	size_t ndirty, cap_dirty;
	/* file back end: the first msync failure (an errno).  From then on
	 * nothing written is known durable; the layers above refuse changes. */
	int io_err;
	/* file back end with a working copy (journal.c): the mapping is a
	 * shared-memory copy of the pool, map_size bytes (the pool image, then
	 * the copy's own control area and undo log); the pool file, disk_fd,
	 * is written only through media_disk_write.  -1 otherwise. */
	int disk_fd;
	uint64_t map_size;
	/* The pool file again, O_DIRECT|O_DSYNC (-1 where the file system has
	 * no direct I/O, e.g. tmpfs): media_disk_write_sync's fast path. */
	int dio_fd;
	/* Fresh blocks are read again at once (the op mode journal copies
	 * them into its record): filled through the cache, not around it. */
	int fresh_cached;
	/* The 64 KiB chunks of the mapped file this process has given storage
	 * (media_back), a bit each; NULL until the first.  Atomic: a thread may
	 * give storage ahead outside the pool mutex (fs_end). */
	uint64_t *backed;
	/* Pages of a memory mapping (MEDIA_PAGE each, a bit each) this process
	 * gave storage without mapping them (media_back for a block that
	 * media_copy_nt fills) and has not filled since: filled through the
	 * file, not the map.  NULL until the first; atomic as backed. */
	uint64_t *cold;
	/* The file refused a pwrite (hugetlbfs), or the process is traced:
	 * fresh blocks always filled through the map. */
	int copy_by_map;
	int asked_tracer; /* whether the process is traced, once a mount */
};

/* The process's soft RLIMIT_FSIZE, UINT64_MAX for none (media_limit.c):
 * read at mount (media_fsize_refresh) and set by kura_set_fsize_limit;
 * atomic.  It binds the program's files, not kura's own: a kernel call
 * that writes or grows one of those past it goes between
 * media_own_begin(&g, end of the call) and media_own_end(&g). */
extern uint64_t media_fsize_limit;
void media_fsize_refresh(void);
struct kernel_sigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	uint64_t mask;
};
struct media_own_write {
	int lifted, ignored;
	struct rlimit was;
	struct kernel_sigaction act; /* SIGXFSZ's, while it is ignored */
};
void media_own_begin(struct media_own_write *g, uint64_t end);
void media_own_end(struct media_own_write *g);
/* ftruncate of one of kura's own files: 0 or -errno. */
int media_ftruncate(int fd, uint64_t size);

/* Maps fd (size bytes).  Fills *m; returns 0 or -errno. */
int media_map(struct media *m, int fd, uint64_t size, enum kura_persist want, int read_only);
void media_unmap(struct media *m);
const char *media_kind_name(const struct media *m);

static inline const void *media_ptr(const struct media *m, uint64_t off)
{
	return m->base + off;
}

/* Stores, flushes and fences are inline: a metadata operation makes a few
 * dozen, and on the memory back end (and a working copy) a flush or fence
 * with no tracer is nothing at all, which a call would cost more than. */
static inline void media_trace(struct media *m, enum media_event ev, uint64_t off, const void *data, uint64_t len)
{
	if (m->tracer.event)
		m->tracer.event(m->tracer.ctx, ev, off, data, len);
}

static inline void media_store(struct media *m, uint64_t off, const void *src, size_t len)
{
	media_trace(m, MEDIA_STORE, off, src, len);
	memcpy(m->base + off, src, len);
}

/* len a multiple of MEDIA_LINE, copied with fixed-size moves: for the line
 * or two an undo record holds they beat the rep movs a variable-length
 * copy compiles to. */
static inline void media_store_lines(struct media *m, uint64_t off, const void *src, size_t len)
{
	media_trace(m, MEDIA_STORE, off, src, len);
	for (size_t i = 0; i < len; i += MEDIA_LINE)
		memcpy(m->base + off + i, (const char *)src + i, MEDIA_LINE);
}

static inline void media_store64(struct media *m, uint64_t off, uint64_t value)
{
	media_trace(m, MEDIA_STORE64, off, &value, 8);
	__atomic_store_n((uint64_t *)(m->base + off), value, __ATOMIC_RELEASE);
}

/* Whether the mapping is of memory (a pool on tmpfs, or the file back
 * end's working copy), not of pmem or a disk file. */
static inline int media_is_memory(const struct media *m)
{
	return m->kind == KURA_PERSIST_MEMORY || (m->kind == KURA_PERSIST_FILE && m->disk_fd >= 0);
}

/* Whether flushes and fences only order stores the CPU keeps in order
 * anyway: no tracer to tell, no pmem line to write back, no page to msync.
 * A read-only mount's private view is such: its stores (a replayed
 * journal, a rolled-back transaction) never reach the file, and msyncing
 * it page by page cost `kura run`'s probe of a disk pool 3,000 system
 * calls for a journal of 1,000 SQLite transactions. */
static inline int media_flush_is_noop(const struct media *m)
{
	return !m->tracer.event && (media_is_memory(m) || m->read_only);
}

void media_flush_slow(struct media *m, uint64_t off, size_t len);
void media_fence_slow(struct media *m);

static inline void media_flush(struct media *m, uint64_t off, size_t len)
{
	if (!media_flush_is_noop(m))
		media_flush_slow(m, off, len);
}

static inline void media_fence(struct media *m)
{
	if (media_flush_is_noop(m))
		asm volatile("" ::: "memory");
	else
		media_fence_slow(m);
}

/* Gives [off, off + len) of the mapped file storage before anything is
 * stored there: 0, or -ENOSPC (-EDQUOT, -EIO) when the file system has
 * none to give.  A store into a hole that cannot be filled raises SIGBUS.
 * Inline for the common case, a range inside a chunk given already (the
 * allocator asks for every block it hands out).  how says what fills the
 * range: stores through the map (metadata), or media_copy_nt (file data),
 * which on memory is cheaper through the file for pages never mapped. */
#define MEDIA_BACK_SHIFT 16
#define MEDIA_PAGE 4096u
enum media_fill { MEDIA_FILL_STORES, MEDIA_FILL_COPIES };
int media_back_slow(struct media *m, uint64_t off, uint64_t len, enum media_fill how);
static inline int media_back(struct media *m, uint64_t off, uint64_t len, enum media_fill how)
{
	uint64_t c = off >> MEDIA_BACK_SHIFT;
	const uint64_t *backed = __atomic_load_n(&m->backed, __ATOMIC_ACQUIRE);
	if (backed && len && (off + len - 1) >> MEDIA_BACK_SHIFT == c && off < m->map_size &&
	    (__atomic_load_n(&backed[c / 64], __ATOMIC_RELAXED) >> (c % 64) & 1))
		return 0;
	return media_back_slow(m, off, len, how);
}
/* fallocate(fd, 0, off, len) again after a signal: 0 or -errno. */
int media_fallocate(int fd, uint64_t off, uint64_t len);

void media_memset(struct media *m, uint64_t off, int c, size_t len);
/* media_memset(m, off, 0, len) of a range nothing reads yet: on memory
 * its pages never mapped here (given storage for copies, media_back) take
 * their zeros through the file. */
void media_zero(struct media *m, uint64_t off, size_t len);
void media_copy_nt(struct media *m, uint64_t off, const void *src, size_t len);
/* The page at off, given storage for media_copy_nt, will be stored to
 * through the map as well (a block a small write began): map it now, with
 * the cold pages after it in its chunk, as media_back would have. */
void media_warm(struct media *m, uint64_t off);
void media_mark(struct media *m, uint64_t kind, uint64_t arg);

/* Set by crash tests before a mount: the tracer every media that mounts
 * start with, so that recovery at mount is traced too. */
extern struct media_tracer media_mount_tracer;

/* A media that only writes the pool file fd (recovery before mapping). */
void media_init_disk(struct media *m, int fd, uint64_t pool_size);
/* Maps a working copy (fd, map_size bytes, the pool image first) in place
 * of the pool file disk_fd, which stays the caller's.  Fills *m. */
int media_map_copy(struct media *m, int fd, uint64_t map_size, uint64_t pool_size, int disk_fd);
/* Writes to and syncs the pool file under a working copy; 0 or -errno,
 * and a failure is remembered in io_err as a failed msync is. */
int media_disk_write(struct media *m, uint64_t off, const void *src, size_t len);
int media_disk_sync(struct media *m);
/* Asks the kernel to start writing [off, off + len) of the pool file to
 * the disk now rather than when its dirty pages age.  A hint: nothing is
 * durable before media_disk_sync, so the crash explorer need not see it. */
void media_disk_start(struct media *m, uint64_t off, uint64_t len);
/* A write durable when it returns: one O_DIRECT|O_DSYNC write where there
 * is direct I/O (then off, len and src must be 512-byte aligned), else
 * media_disk_write and media_disk_sync. */
int media_disk_write_sync(struct media *m, uint64_t off, const void *src, size_t len);

static inline void media_persist(struct media *m, uint64_t off, size_t len)
{
	media_flush(m, off, len);
	media_fence(m);
}

#endif
