/*
 * groupmap.c — stores through shared maps join an atomic group.
 *
 * A shared map shows the file's pool blocks (map.c), so a store reaches the
 * file at once, for every process.  While this process has a group open on
 * a file (kura_fbegin, or F2FS's START_ATOMIC_WRITE), its writable maps of
 * the file are made read-only.  The first store to a page faults; the
 * handler asks the engine for the group's own copy of that block
 * (kura_atomic_map_block: the view's bytes in a block of the group's
 * shadow) and maps that block at the page, in every map of the file this
 * process has, writable: the store repeats there, and so do the later ones
 * to the page, without a fault.  A write() through the group's description
 * that changes a block a map shows takes that page over the same way after
 * the call, so map and read() agree.  A store that goes on from the last
 * page taken takes the pages after it too (groupmap.h, AHEAD_MAX): a log
 * filled in order faults once every few dozen pages.
 *
 * Commit copies the group's blocks that this process's maps show into the
 * file's blocks (kura_atomic_commit_maps; the bytes of the others move as
 * blocks), and the pages are mapped at the file's blocks again: moving
 * blocks would scatter the pages over the pool, one kernel mapping each,
 * where the file's own blocks come in runs the kernel keeps as one.  Abort
 * maps them back the same way.  Either way the shadow's pin goes last,
 * which frees it (at the next begin, in its transaction).  Pages go back
 * read-only, and the rest of each map stays so until a store finds no group
 * there any more and gives the map its protection back: a run of groups
 * protects a map once, and a commit costs only the pages it took over, in
 * runs of consecutive pages, a remap each.
 *
 * Limits (README): a system call the kernel serves that writes into a page
 * the group protects (recv into a mapped buffer, say) fails with EFAULT;
 * read(), pread() and readv() take the pages over first, so they work.  A
 * store made inside the engine (a kura read into a map of a grouped file)
 * is taken over the same way before the call.
 *
 * Records live in a small table guarded by map.c's lock, which the
 * SIGSEGV handler only tries to take.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "groupmap.h"
#include "kp.h"
#include "maptab.h"

#define MAX_GROUPS 64
static struct kp_group groups[MAX_GROUPS];

/* Shadows of groups that are over, whose pages show the file again, still
 * pinned: the next begin on the pool drops the pin in its own transaction
 * (kura_atomic_begin_retiring), a transaction less per group. */
#define MAX_RETIRED 8
static struct retired {
	int mnt;
	uint64_t shadow;
} retired[MAX_RETIRED];
static int nretired;

static void retire(kura_fs *fs, int mnt, uint64_t shadow)
{
	if (nretired == MAX_RETIRED)
		kura_map_unpin(fs, shadow);
	else
		retired[nretired++] = (struct retired){ mnt, shadow };
}

/* With the lock: a retired shadow of mnt, taken off the list; 0 if none. */
static uint64_t take_retired(int mnt)
{
	for (int i = 0; i < nretired; i++)
		if (retired[i].mnt == mnt) {
			uint64_t shadow = retired[i].shadow;
			retired[i] = retired[--nretired];
			return shadow;
		}
	return 0;
}
int kp_groups_active;      /* records in use: 0 keeps every hook at one load */
int kp_group_ro_maps;      /* maps with group_ro set */

static struct kp_group *by_shadow(int mnt, uint64_t shadow)
{
	for (int i = 0; i < MAX_GROUPS; i++)
		if (groups[i].used && groups[i].mnt == mnt && groups[i].shadow == shadow)
			return &groups[i];
	return NULL;
}

static struct kp_group *by_ino(int mnt, uint64_t ino)
{
	for (int i = 0; i < MAX_GROUPS; i++)
		if (groups[i].used && groups[i].mnt == mnt && groups[i].ino == ino)
			return &groups[i];
	return NULL;
}

/* Pages past the end of the file (m->eof_pages) keep raising SIGBUS. */
static void make_ro(struct kp_map *m, size_t from, size_t to)
{
	size_t within = m->len / PAGE - m->eof_pages;
	if (to > within)
		to = within;
	if (!(m->prot & PROT_WRITE) || from >= to)
		return;
	REAL(mprotect)(m->addr + from * PAGE, (to - from) * PAGE, m->prot & ~PROT_WRITE);
	if (!m->group_ro) {
		m->group_ro = 1;
		__atomic_add_fetch(&kp_group_ro_maps, 1, __ATOMIC_RELAXED);
	}
}

static void restore(struct kp_map *m)
{
	REAL(mprotect)(m->addr, m->len, m->prot);
	m->group_ro = 0;
	__atomic_sub_fetch(&kp_group_ro_maps, 1, __ATOMIC_RELAXED);
}

/* With the lock: the record goes; pages it took over show the file's
 * blocks again if recover (the shadow's are about to be freed), and the
 * shadow's pin is dropped. */
static void finish(struct kp_group *g, kura_fs *fs, int recover)
{
	g->used = 0;
	__atomic_sub_fetch(&kp_groups_active, 1, __ATOMIC_RELAXED);
	gp_release(g, recover);
	if (g->pinned)
		retire(fs, g->mnt, g->shadow);
	free(g->taken);
	memset(g, 0, sizeof *g);
}

int kp_group_begin(struct kp_fd *e, kura_fs *fs, uint64_t ino)
{
	kp_install_segv_handler();
	kp_maps_lock();
	/* Stores through this process's maps of a file join its group: one
	 * group per file in a process.  A record left from a group that ended
	 * elsewhere (a forked process committed it) goes. */
	struct kp_group *other = by_ino(e->mnt, ino);
	if (other && kura_atomic_shadow(fs, other->kfd, NULL) == (int64_t)other->shadow) {
		kp_maps_unlock();
		return -EBUSY;
	}
	if (other)
		finish(other, fs, 1);
	uint64_t old = take_retired(e->mnt);
	kp_maps_unlock();
	int r = kura_atomic_begin_retiring(fs, e->kfd, old);
	if (r)
		return r;
	int64_t shadow = kura_atomic_shadow(fs, e->kfd, NULL);
	kp_maps_lock();
	struct kp_group *g = NULL;
	for (int i = 0; i < MAX_GROUPS && !g; i++)
		if (!groups[i].used)
			g = &groups[i];
	if (g && shadow > 0) {
		*g = (struct kp_group){ .used = 1, .mnt = e->mnt, .kfd = e->kfd, .ino = ino, .shadow = (uint64_t)shadow,
					.next_fb = UINT64_MAX };
		__atomic_add_fetch(&kp_groups_active, 1, __ATOMIC_RELAXED);
		for (size_t k = 0; k < kp_maps_count(); k++) {
			struct kp_map *m = kp_maps_at(k);
			if (m->mnt == e->mnt && m->ino == ino && !m->group_ro)
				make_ro(m, 0, m->len / PAGE);
		}
	}
	kp_maps_unlock();
	if (!g) {
		kura_atomic_abort(fs, e->kfd);
		return -ENOMEM; /* more groups at once than the table holds */
	}
	return 0;
}

int kp_group_commit(struct kp_fd *e, kura_fs *fs)
{
	int64_t shadow = kura_atomic_shadow(fs, e->kfd, NULL);
	if (shadow <= 0 || !__atomic_load_n(&kp_groups_active, __ATOMIC_RELAXED))
		return kura_atomic_commit(fs, e->kfd);
	kp_maps_lock();
	struct kp_group *g = by_shadow(e->mnt, (uint64_t)shadow);
	uint64_t own_pins = 0;
	for (size_t k = 0; g && k < kp_maps_count(); k++)
		own_pins += kp_maps_at(k)->mnt == g->mnt && kp_maps_at(k)->ino == g->ino;
	int r = g ? gp_drop_ahead(g, fs) : 0;
	if (r == 0)
		r = g ? kura_atomic_commit_maps(fs, e->kfd, own_pins) : kura_atomic_commit(fs, e->kfd);
	if (g && r >= 0)
		finish(g, fs, r == 1);
	kp_maps_unlock();
	return r < 0 ? r : 0;
}

/* A set's commit (gset.c): the groups of the descriptions behind kfds and
 * the name changes ops in one engine commit, each group's pages then as
 * kp_group_commit leaves them. */
int kp_group_commit_set(kura_fs *fs, int mnt, const int *kfds, int n, const struct kura_group_op *ops, int nops)
{
	struct kura_group_file *files = calloc((size_t)n + 1, sizeof *files);
	int64_t *shadows = calloc((size_t)n + 1, sizeof *shadows);
	if (!files || !shadows) {
		free(files);
		free(shadows);
		return -ENOMEM;
	}
	kp_maps_lock();
	int r = 0;
	for (int i = 0; i < n; i++) {
		files[i].fd = kfds[i];
		shadows[i] = kura_atomic_shadow(fs, kfds[i], NULL);
		struct kp_group *g = shadows[i] > 0 ? by_shadow(mnt, (uint64_t)shadows[i]) : NULL;
		for (size_t k = 0; g && k < kp_maps_count(); k++)
			files[i].own_pins += kp_maps_at(k)->mnt == g->mnt && kp_maps_at(k)->ino == g->ino;
		if (g && !r)
			r = gp_drop_ahead(g, fs);
	}
	if (!r)
		r = kura_group_commit(fs, files, n, ops, nops, NULL);
	for (int i = 0; !r && i < n; i++) {
		struct kp_group *g = shadows[i] > 0 ? by_shadow(mnt, (uint64_t)shadows[i]) : NULL;
		if (g)
			finish(g, fs, files[i].copied);
	}
	kp_maps_unlock();
	free(files);
	free(shadows);
	return r;
}

int kp_group_abort(struct kp_fd *e, kura_fs *fs)
{
	int64_t shadow = kura_atomic_shadow(fs, e->kfd, NULL);
	int r = kura_atomic_abort(fs, e->kfd);
	if (r || shadow <= 0 || !__atomic_load_n(&kp_groups_active, __ATOMIC_RELAXED))
		return r;
	kp_maps_lock();
	struct kp_group *g = by_shadow(e->mnt, (uint64_t)shadow);
	if (g)
		finish(g, fs, 1);
	kp_maps_unlock();
	return 0;
}

void kp_group_closing(struct kp_fd *e, kura_fs *fs)
{
	int sole = 0;
	int64_t shadow = kura_atomic_shadow(fs, e->kfd, &sole);
	if (shadow <= 0 || !sole)
		return;
	kp_maps_lock();
	struct kp_group *g = by_shadow(e->mnt, (uint64_t)shadow);
	if (g)
		finish(g, fs, 1); /* the close aborts the group (kura.h) */
	kp_maps_unlock();
}

void kp_group_wrote(struct kp_fd *e, kura_fs *fs, uint64_t off, uint64_t len)
{
	int64_t shadow = kura_atomic_shadow(fs, e->kfd, NULL);
	if (shadow <= 0 || !len)
		return;
	kp_maps_lock();
	struct kp_group *g = by_shadow(e->mnt, (uint64_t)shadow);
	for (uint64_t fb = off / PAGE; g && fb <= (off + len - 1) / PAGE; fb++)
		for (size_t k = 0; k < kp_maps_count(); k++)
			if (gp_covers(kp_maps_at(k), g->mnt, g->ino, fb)) {
				gp_take(g, fs, e->kfd, fb, NULL);
				break;
			}
	kp_maps_unlock();
}

/* With the lock: a store to addr, a page of m, which a group protects or
 * protected.  1: the store may repeat; -1: the group cannot take the page
 * (full, or the pool is); 0: not a store this layer can serve. */
static int store_fault(struct kp_map *m, char *addr)
{
	struct kp_group *g = by_ino(m->mnt, m->ino);
	if (!g) {
		restore(m);
		return 1;
	}
	kura_fs *fs = kp_fs(m->mnt);
	/* Inside an engine call the pool mutex may be this thread's. */
	if (!fs || kura_in_operation(fs))
		return 0;
	uint64_t fb = (m->off + (uint64_t)(addr - m->addr)) / PAGE;
	int r = gp_take(g, fs, g->kfd, fb, m);
	if (r == -EINVAL || r == -EBADF) {
		/* The group ended elsewhere (a forked process holding the same
		 * description committed it) or its descriptor is gone: the
		 * record is stale, and the map the file's again. */
		finish(g, fs, 1);
		restore(m);
		return 1;
	}
	return r == 0 ? 1 : -1;
}

int kp_group_fault(void *addr)
{
	if (!__atomic_load_n(&kp_group_ro_maps, __ATOMIC_RELAXED))
		return 0;
	/* Another thread holds the table (taking a page itself, say): the
	 * store repeats and faults again until it can be served.  No thread
	 * stores into a protected page while it holds the table, so this
	 * one is not waiting for itself. */
	if (kp_maps_trylock())
		return 1;
	struct kp_map *m = kp_maps_find(addr);
	int r = m && m->group_ro && (m->prot & PROT_WRITE) ? store_fault(m, addr) : 0;
	kp_maps_unlock();
	return r;
}

void kp_group_prepare(void *buf, size_t len)
{
	if (!__atomic_load_n(&kp_group_ro_maps, __ATOMIC_RELAXED) || !len)
		return;
	/* The engine's own reads (a checkpoint reading the pool file, under
	 * the pool mutex, perhaps for a commit this layer runs holding the
	 * table) go into its own buffers, never a map: they must not wait. */
	for (int i = 0; i < kp_nmounts; i++) {
		kura_fs *fs = __atomic_load_n(&kp_mounts[i].fs, __ATOMIC_ACQUIRE);
		if (fs && kura_in_operation(fs))
			return;
	}
	kp_maps_lock();
	char *lo = (char *)((uintptr_t)buf & ~(uintptr_t)(PAGE - 1)), *hi = (char *)buf + len;
	for (size_t k = 0; k < kp_maps_count(); k++) {
		struct kp_map *m = kp_maps_at(k);
		if (!m->group_ro || !(m->prot & PROT_WRITE) || hi <= m->addr || lo >= m->addr + m->len)
			continue;
		char *from = lo > m->addr ? lo : m->addr, *to = hi < m->addr + m->len ? hi : m->addr + m->len;
		for (char *p = from; p < to && m->group_ro; p += PAGE)
			store_fault(m, p);
	}
	kp_maps_unlock();
}

void kp_group_cover(struct kp_map *m, size_t from, size_t to)
{
	if (!__atomic_load_n(&kp_groups_active, __ATOMIC_RELAXED))
		return;
	struct kp_group *g = by_ino(m->mnt, m->ino);
	kura_fs *fs = kp_fs(m->mnt);
	if (!g || !fs)
		return;
	make_ro(m, from, to);
	uint64_t first = m->off / PAGE;
	for (size_t i = 0; i < g->ntaken; i++)
		if (g->taken[i].fb >= first + from && g->taken[i].fb < first + to)
			gp_show(fs, m, &g->taken[i]);
}

void kp_group_fork_prepare(void)
{
	for (int i = 0; i < MAX_GROUPS; i++)
		if (groups[i].used && groups[i].pinned && kp_fs(groups[i].mnt))
			kura_map_repin(kp_fs(groups[i].mnt), groups[i].shadow);
	for (int i = 0; i < nretired; i++)
		if (kp_fs(retired[i].mnt))
			kura_map_repin(kp_fs(retired[i].mnt), retired[i].shadow);
}

void kp_group_drop_all(int failed_exec)
{
	for (int i = 0; i < nretired; i++)
		if (kp_fs(retired[i].mnt))
			kura_map_unpin(kp_fs(retired[i].mnt), retired[i].shadow);
	nretired = 0;
	for (int i = 0; i < MAX_GROUPS; i++) {
		kura_fs *fs = groups[i].used && groups[i].pinned ? kp_fs(groups[i].mnt) : NULL;
		if (!fs)
			continue;
		if (failed_exec)
			kura_map_repin(fs, groups[i].shadow);
		else
			kura_map_unpin(fs, groups[i].shadow);
	}
}
