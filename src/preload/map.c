/*
 * map.c — mmap of kura files, and the calls that change mappings.
 *
 * MAP_SHARED shows the pool's pages themselves.  A map is an address range
 * reserved at mmap time and covered page by page: a page of the file that
 * has a block gets the pool file (the working copy on a disk pool) mapped
 * at that block's offset, runs of consecutive blocks as one kernel mapping;
 * a page past the end of the file gets a zero-length memfd, so touching it
 * raises SIGBUS as on Linux.  Stores through the map, other processes'
 * maps and kura's read() and write() therefore all see the same bytes, with
 * no copy.  The engine keeps its side (src/mapped.h): a mapped file is
 * written in place and its blocks are never reused while a map exists,
 * which the pin each map holds tells every process of the pool.
 *
 * What the kernel cannot know, this file keeps in a table of maps: the
 * inode, the file offset and how much of the range is backed.  It decides
 * what munmap, mremap, mprotect, msync and madvise do to a map, what a
 * forked child (a pin of its own per map) and an exec (the maps go, so do
 * their pins) inherit, and it answers a SIGBUS on a page past the end of
 * the file at mmap time that lies within it now (the file grew, in this
 * process or another): the page is mapped and the access repeated.
 *
 * MAP_PRIVATE is a copy (mapcopy.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kp.h"
#include "maptab.h"

/* What happens to the stores of a writable map that goes away (munmap,
 * mremap, exec, exit).  Linux keeps them as dirty pages of the file, which
 * a later fsync of it, by any process, makes durable; so are they here when
 * they are recorded now, as msync(MS_ASYNC) would: the next sync of the
 * pool carries them (in op mode, recording is itself durable).  That costs
 * a record of every page of the range, whatever the map stored, so only up
 * to UNMAP_RECORD_PAGES; the pages of a larger map are only marked, and go
 * home at the next checkpoint (README, Current limits). */
#define UNMAP_RECORD_PAGES 4096u

static int unmap_how(uint64_t pages)
{
	return pages <= UNMAP_RECORD_PAGES ? KURA_MAP_RECORD : 0;
}

static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kp_map *maps;
static size_t nmaps, cap_maps;
static int eof_fd = -1; /* the zero-length memfd past-EOF pages show */

static int add_map(const struct kp_map *m)
{
	if (nmaps == cap_maps) {
		size_t cap = cap_maps ? cap_maps * 2 : 16;
		struct kp_map *n = realloc(maps, cap * sizeof *n);
		if (!n)
			return -ENOMEM;
		maps = n;
		cap_maps = cap;
	}
	maps[nmaps++] = *m;
	return 0;
}

static struct kp_map *find_map(const void *addr)
{
	for (size_t i = 0; i < nmaps; i++)
		if ((const char *)addr >= maps[i].addr && (const char *)addr < maps[i].addr + maps[i].len)
			return &maps[i];
	return NULL;
}

/* After a change to the maps' ranges (a map added, cut, moved or dropped:
 * add_map, forget_range, remap_kura, exec, exit), the lock is let go here,
 * which publishes them for mapsync.c's lock-free look.  Other holders of
 * the lock, which change no range, just let it go. */
static void unlock_maps(void)
{
	kp_maps_publish();
	sighold_unlock(&maps_lock);
}

void kp_maps_lock(void)
{
	sighold_lock(&maps_lock);
}
int kp_maps_trylock(void)
{
	int tries = 0, r;
	sighold_enter();
	while ((r = pthread_mutex_trylock(&maps_lock)) == EBUSY && ++tries < 100000)
		__builtin_ia32_pause();
	if (r)
		sighold_leave();
	return r;
}
void kp_maps_unlock(void)
{
	sighold_unlock(&maps_lock);
}
size_t kp_maps_count(void)
{
	return __atomic_load_n(&nmaps, __ATOMIC_RELAXED);
}
struct kp_map *kp_maps_at(size_t i)
{
	return &maps[i];
}
struct kp_map *kp_maps_find(const void *addr)
{
	return find_map(addr);
}

int kp_maps_overlap(const void *addr, size_t len)
{
	for (size_t i = 0; i < nmaps; i++)
		if ((const char *)addr < maps[i].addr + maps[i].len && maps[i].addr < (const char *)addr + len)
			return 1;
	return 0;
}

static int past_eof_fd(void)
{
	int fd = __atomic_load_n(&eof_fd, __ATOMIC_ACQUIRE);
	if (fd >= 0)
		return fd;
	fd = (int)kp_syscall(SYS_memfd_create, "kura-past-eof", MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	int expected = -1;
	if (!__atomic_compare_exchange_n(&eof_fd, &expected, fd, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		close(fd);
		fd = expected;
	}
	return fd;
}

/* Covers pages [from, to) of m: pool blocks where the file has them, zeros
 * for holes a read-only mount cannot fill, SIGBUS past the end of the
 * file.  0 or -errno.
 *
 * Holes get blocks at mmap, all or none, so that a full pool fails there
 * rather than at a store.  But a sparse file larger than the pool's free
 * space maps on Linux, where a hole gets a block at its first store; so
 * when the blocks do not fit, the map is lazy: its holes raise SIGBUS,
 * and the handler (or a call about to copy into one, mapsync.c) gives
 * the touched pages blocks then.  A store into a hole of a full pool is
 * then a SIGBUS, as on Linux; a read of one takes a block too. */
static int cover(struct kp_map *m, size_t from, size_t to, int alloc)
{
	kura_fs *fs = kp_fs(m->mnt);
	if (!fs)
		return -errno;
	int writable;
	int pool_fd = kura_map_fd(fs, &writable);
	enum { BATCH = 512 };
	uint64_t offs[BATCH];
	for (size_t p = from; p < to;) {
		size_t n = to - p < BATCH ? to - p : BATCH;
		int fill = writable && (alloc == 2 || (alloc == 1 && !m->lazy_holes));
		int64_t size = kura_map_blocks(fs, m->ino, m->off / PAGE + p, n, fill, offs);
		if (size == -ENOSPC && alloc == 1) {
			m->lazy_holes = 1;
			size = kura_map_blocks(fs, m->ino, m->off / PAGE + p, n, 0, offs);
		}
		if (size < 0)
			return (int)size;
		uint64_t end_page = ((uint64_t)size + PAGE - 1) / PAGE;
		for (size_t i = 0; i < n;) {
			uint64_t fpage = m->off / PAGE + p + i;
			size_t run = 1;
			void *r;
			char *at = m->addr + (p + i) * PAGE;
			size_t first = p + i, npages = m->len / PAGE, eof_from = npages - m->eof_pages;
			if (offs[i]) {
				while (i + run < n && offs[i + run] == offs[i] + run * PAGE)
					run++;
				r = REAL(mmap)(at, run * PAGE, m->prot, MAP_SHARED | MAP_FIXED, pool_fd, (off_t)offs[i]);
			} else if (fpage < end_page && !(m->lazy_holes && writable)) {
				while (i + run < n && !offs[i + run] && fpage + run < end_page)
					run++;
				r = REAL(mmap)(at, run * PAGE, m->prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
			} else {
				while (i + run < n && !offs[i + run])
					run++;
				int fd = past_eof_fd();
				if (fd < 0)
					return -errno;
				kp_install_bus_handler();
				/* At the offset that is the address: pieces side by
				 * side then merge into one mapping.  At offset 0,
				 * fsx (many maps of a file it shrinks) reached
				 * vm.max_map_count long before it did on tmpfs. */
				r = REAL(mmap)(at, run * PAGE, m->prot, MAP_SHARED | MAP_FIXED, fd, (off_t)(uintptr_t)at);
				if (r != MAP_FAILED && first + run >= eof_from && first < eof_from)
					m->eof_pages = npages - first; /* joins the known tail */
				i += run;
				if (r == MAP_FAILED)
					return -errno;
				continue;
			}
			/* Pages within the file now: the known tail starts after them. */
			if (first + run > eof_from)
				m->eof_pages = npages - (first + run);
			if (r == MAP_FAILED)
				return -errno;
			i += run;
		}
		p += n;
	}
	kp_group_cover(m, from, to); /* pages an atomic group protects or holds (groupmap.c) */
	return 0;
}

int kp_map_cover(struct kp_map *m, size_t from, size_t to, int fill_holes)
{
	return cover(m, from, to, fill_holes);
}

static void *map_shared(void *addr, size_t len, int prot, int flags, struct kp_fd *e, off_t off)
{
	if (off < 0 || (off & (PAGE - 1)) || !len || len > (size_t)1 << 46) {
		errno = len > (size_t)1 << 46 ? ENOMEM : EINVAL;
		return MAP_FAILED;
	}
	kura_fs *fs = kp_fs(e->mnt);
	if (!fs)
		return MAP_FAILED;
	struct kp_map m = { .len = (len + PAGE - 1) & ~(size_t)(PAGE - 1), .off = (uint64_t)off, .mnt = e->mnt,
			    .prot = prot };
	int acc = kura_fd_flags(fs, e->kfd) & O_ACCMODE;
	m.may_write = acc == O_RDWR;
	int err = kura_map_pin(fs, e->kfd, prot & PROT_WRITE, &m.ino);
	if (err) {
		errno = -err;
		return MAP_FAILED;
	}
	int reserve_flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (flags & (MAP_FIXED | MAP_FIXED_NOREPLACE));
	m.addr = REAL(mmap)(addr, m.len, PROT_NONE, reserve_flags, -1, 0);
	if (m.addr == MAP_FAILED) {
		err = -errno;
		goto unpin;
	}
	kp_map_fixed(); /* a MAP_FIXED map may have replaced readable pages */
	/* Holes get blocks now, all or none; if the pool cannot hold them,
	 * when they are touched (see cover). */
	int writable;
	kura_map_fd(fs, &writable);
	/* Read before any block is looked up: a truncation after it only
	 * makes the count stale, never a page unaccounted for. */
	m.truncs = kura_map_truncations(fs, m.ino);
	int64_t sized = kura_map_blocks(fs, m.ino, m.off / PAGE, m.len / PAGE, writable, NULL);
	if (sized == -ENOSPC) {
		m.lazy_holes = 1;
		sized = 0;
	}
	err = sized < 0 ? (int)sized : cover(&m, 0, m.len / PAGE, 1);
	if (!err) {
		sighold_lock(&maps_lock);
		err = add_map(&m);
		unlock_maps();
	}
	if (!err)
		return m.addr;
	REAL(munmap)(m.addr, m.len);
	if (err == -ENOSPC)
		err = -ENOMEM;
unpin:
	kura_map_unpin(fs, m.ino);
	errno = -err;
	return MAP_FAILED;
}

KP_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	struct kp_fd *e = (flags & MAP_ANONYMOUS) ? NULL : kp_get(fd);
	void *p;
	if (!e)
		p = REAL(mmap)(addr, len, prot, flags, fd, off);
	else if ((flags & MAP_TYPE) == MAP_PRIVATE)
		p = kp_map_private_copy(addr, len, prot, flags, e, off);
	else
		return map_shared(addr, len, prot, flags, e, off);
	if (flags & MAP_FIXED)
		kp_map_fixed();
	return p;
}
KP_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mmap(addr, len, prot, flags, fd, off);
}

/* ---- taking maps apart ---- */

/* With maps_lock: forgets [addr, addr + len) of every map, which the
 * caller has unmapped or replaced.  Pieces left on both sides of a hole
 * become two maps with a pin each. */
static void forget_range(const char *addr, size_t len)
{
	const char *end = addr + len;
	for (size_t i = 0; i < nmaps; i++) {
		struct kp_map *m = &maps[i];
		char *mend = m->addr + m->len;
		if (end <= m->addr || addr >= mend)
			continue;
		kura_fs *fs = kp_fs(m->mnt);
		if (fs && (m->prot & PROT_WRITE)) {
			const char *from = addr > m->addr ? addr : m->addr, *to = end < mend ? end : mend;
			uint64_t pages = (uint64_t)(to - from) / PAGE;
			kura_map_sync(fs, m->ino, (m->off + (uint64_t)(from - m->addr)) / PAGE, pages,
				      unmap_how(pages));
		}
		int keep_left = addr > m->addr, keep_right = end < mend;
		if (keep_left && keep_right) {
			struct kp_map right = *m;
			right.addr = (char *)end;
			right.len = (size_t)(mend - end);
			right.off = m->off + (uint64_t)(end - m->addr);
			if (right.eof_pages > right.len / PAGE)
				right.eof_pages = right.len / PAGE;
			m->len = (size_t)(addr - m->addr);
			m->eof_pages = 0;
			if (fs && !kura_map_repin(fs, m->ino) && add_map(&right))
				kura_map_unpin(fs, right.ino);
			else if (right.group_ro)
				__atomic_add_fetch(&kp_group_ro_maps, 1, __ATOMIC_RELAXED);
			continue; /* add_map may have moved the array; m is not used again */
		}
		if (keep_left) {
			m->len = (size_t)(addr - m->addr);
			m->eof_pages = 0;
		} else if (keep_right) {
			m->off += (uint64_t)(end - m->addr);
			m->len = (size_t)(mend - end);
			m->addr = (char *)end;
			if (m->eof_pages > m->len / PAGE)
				m->eof_pages = m->len / PAGE;
		} else {
			if (fs)
				kura_map_unpin(fs, m->ino);
			if (m->group_ro)
				__atomic_sub_fetch(&kp_group_ro_maps, 1, __ATOMIC_RELAXED);
			maps[i--] = maps[--nmaps];
		}
	}
}

KP_EXPORT int munmap(void *addr, size_t len)
{
	int r = REAL(munmap)(addr, len);
	if (r == 0 && __atomic_load_n(&nmaps, __ATOMIC_RELAXED)) {
		size_t plen = (len + PAGE - 1) & ~(size_t)(PAGE - 1);
		sighold_lock(&maps_lock);
		if (kp_maps_overlap(addr, plen))
			forget_range(addr, plen);
		unlock_maps();
	}
	kp_map_fixed();
	return r;
}

/* Linux refuses PROT_WRITE on a shared map of a file not open for writing;
 * the pool file behind the map is, so the refusal is made here. */
static int protect_ok(void *addr, size_t len, int prot)
{
	if (!(prot & PROT_WRITE) || !__atomic_load_n(&nmaps, __ATOMIC_RELAXED))
		return 1;
	int ok = 1;
	sighold_lock(&maps_lock);
	for (size_t i = 0; i < nmaps; i++)
		if ((char *)addr < maps[i].addr + maps[i].len && maps[i].addr < (char *)addr + len && !maps[i].may_write)
			ok = 0;
	sighold_unlock(&maps_lock);
	return ok;
}

static void note_prot(void *addr, size_t len, int prot)
{
	sighold_lock(&maps_lock);
	for (size_t i = 0; i < nmaps; i++)
		if ((char *)addr <= maps[i].addr && maps[i].addr + maps[i].len <= (char *)addr + len)
			maps[i].prot = prot;
	sighold_unlock(&maps_lock);
}

/* mprotect and pkey_mprotect (with_pkey): the refusal above, the kernel's
 * call, and the table kept in step. */
static int protect(void *addr, size_t len, int prot, int with_pkey, int pkey)
{
	if (!protect_ok(addr, len, prot)) {
		errno = EACCES;
		return -1;
	}
	int r = with_pkey ? REAL(pkey_mprotect)(addr, len, prot, pkey) : REAL(mprotect)(addr, len, prot);
	if (r == 0 && __atomic_load_n(&nmaps, __ATOMIC_RELAXED))
		note_prot(addr, len, prot);
	kp_map_fixed();
	return r;
}

KP_EXPORT int mprotect(void *addr, size_t len, int prot)
{
	return protect(addr, len, prot, 0, 0);
}

KP_EXPORT int pkey_mprotect(void *addr, size_t len, int prot, int pkey)
{
	return protect(addr, len, prot, 1, pkey);
}

/* A kura map spans several kernel mappings, which the kernel's mremap
 * refuses to move as one; growing or moving one is done as a new map of
 * the same file range (no copy: both show the same blocks). */
static void *remap_kura(struct kp_map *m0, void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	struct kp_map m = *m0;
	size_t plen = (old_len + PAGE - 1) & ~(size_t)(PAGE - 1);
	size_t nlen = (new_len + PAGE - 1) & ~(size_t)(PAGE - 1);
	if (((uintptr_t)old & (PAGE - 1)) || !nlen || (char *)old + plen > m.addr + m.len || (flags & MREMAP_DONTUNMAP)) {
		errno = EINVAL;
		return MAP_FAILED;
	}
	m.off += (uint64_t)((char *)old - m.addr);
	m.addr = old;
	m.len = plen;
	m.eof_pages = 0;
	if (!(flags & MREMAP_FIXED) && nlen <= plen) {
		if (nlen < plen)
			munmap((char *)old + nlen, plen - nlen);
		return old;
	}
	kura_fs *fs = kp_fs(m.mnt);
	if (!fs || kura_map_repin(fs, m.ino))
		return errno = ENOMEM, MAP_FAILED;
	/* In place first: the pages after the map, if they are free. */
	struct kp_map n = m;
	if (!(flags & MREMAP_FIXED)) {
		void *tail = REAL(mmap)((char *)old + plen, nlen - plen, PROT_NONE,
					MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		if (tail != MAP_FAILED) {
			n.addr = tail;
			n.len = nlen - plen;
			n.off = m.off + plen;
			if (!cover(&n, 0, n.len / PAGE, 1)) {
				/* The map grows: one record, so that the next mremap
				 * of the whole range finds it whole. */
				sighold_lock(&maps_lock);
				struct kp_map *r = find_map(old);
				int grown = r && r->addr + r->len == (char *)old + plen;
				if (grown) {
					r->len += nlen - plen;
					r->eof_pages = n.eof_pages; /* the tail is the grown part's */
					r->lazy_holes |= n.lazy_holes;
				}
				int err = grown ? 0 : add_map(&n);
				unlock_maps();
				if (grown)
					kura_map_unpin(fs, m.ino); /* the record's pin covers it */
				if (!err)
					return old;
			}
			REAL(munmap)(tail, nlen - plen);
		}
		if (!(flags & MREMAP_MAYMOVE)) {
			kura_map_unpin(fs, m.ino);
			errno = ENOMEM;
			return MAP_FAILED;
		}
	}
	n = m;
	n.len = nlen;
	n.addr = REAL(mmap)((flags & MREMAP_FIXED) ? new_addr : NULL, nlen, PROT_NONE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | ((flags & MREMAP_FIXED) ? MAP_FIXED : 0), -1, 0);
	int err = n.addr == MAP_FAILED ? -errno : cover(&n, 0, nlen / PAGE, 1);
	if (!err) {
		sighold_lock(&maps_lock);
		if ((flags & MREMAP_FIXED) && kp_maps_overlap(n.addr, nlen))
			forget_range(n.addr, nlen);
		err = add_map(&n);
		unlock_maps();
	}
	if (err) {
		if (n.addr != MAP_FAILED)
			REAL(munmap)(n.addr, nlen);
		kura_map_unpin(fs, m.ino);
		errno = err == -ENOSPC ? ENOMEM : -err;
		return MAP_FAILED;
	}
	munmap(old, plen);
	return n.addr;
}

KP_EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	void *new_addr = va_arg(ap, void *);
	va_end(ap);
	if (__atomic_load_n(&nmaps, __ATOMIC_RELAXED)) {
		sighold_lock(&maps_lock);
		struct kp_map *m = find_map(old), copy = { 0 }; /* zeroed: gcc cannot see it is read only when m is */
		if (m)
			copy = *m;
		sighold_unlock(&maps_lock);
		if (m) {
			void *r = remap_kura(&copy, old, old_len, new_len, flags, new_addr);
			kp_map_fixed();
			return r;
		}
	}
	void *r = REAL(mremap)(old, old_len, new_len, flags, new_addr);
	kp_map_fixed();
	return r;
}

/* ---- fork and exec ---- */

/* Before fork: a pin per map for the child, taken while the parent's maps
 * cannot change (maps_lock stays held until after the fork). */
void kp_map_fork_prepare(void)
{
	pthread_mutex_lock(&maps_lock);
	for (size_t i = 0; i < nmaps; i++) {
		kura_fs *fs = kp_fs(maps[i].mnt);
		if (fs)
			kura_map_repin(fs, maps[i].ino);
	}
	kp_group_fork_prepare();
}

void kp_map_fork_done(void)
{
	pthread_mutex_unlock(&maps_lock);
}

/* exec drops every map; exec_failed takes the pins back. */
void kp_map_exec(int failed)
{
	sighold_lock(&maps_lock);
	kp_group_drop_all(failed);
	for (size_t i = 0; i < nmaps; i++) {
		kura_fs *fs = kp_fs(maps[i].mnt);
		if (!fs)
			continue;
		if (failed) {
			kura_map_repin(fs, maps[i].ino);
		} else {
			if (maps[i].prot & PROT_WRITE)
				kura_map_sync(fs, maps[i].ino, maps[i].off / PAGE, maps[i].len / PAGE,
					      unmap_how(maps[i].len / PAGE));
			kura_map_unpin(fs, maps[i].ino);
		}
	}
	unlock_maps();
}

/* At exit, exit() or _exit(): the maps' pins go (the kernel drops the
 * maps next), unless this thread is inside the layer or the engine (an
 * _exit from a signal handler), where taking their locks would wait
 * forever; then the pins stay until the pool is next mounted alone. */
void kp_map_exit(void)
{
	if (!__atomic_load_n(&nmaps, __ATOMIC_RELAXED) || pthread_mutex_trylock(&maps_lock))
		return;
	for (int i = 0; i < kp_nmounts; i++)
		if (kp_mounts[i].fs && kura_in_operation(kp_mounts[i].fs)) {
			pthread_mutex_unlock(&maps_lock);
			return;
		}
	kp_group_drop_all(0);
	for (size_t i = 0; i < nmaps; i++) {
		kura_fs *fs = kp_fs(maps[i].mnt);
		if (!fs)
			continue;
		if (maps[i].prot & PROT_WRITE)
			kura_map_sync(fs, maps[i].ino, maps[i].off / PAGE, maps[i].len / PAGE,
				      unmap_how(maps[i].len / PAGE));
		kura_map_unpin(fs, maps[i].ino);
	}
	nmaps = 0;
	unlock_maps();
}
