/*
 * grouppages.c — the pages an atomic group took over in this process's
 * maps (groupmap.h; the design is groupmap.c's opening comment): taking
 * them, the run's next pages ahead, and giving them back.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "groupmap.h"
#include "kp.h"
#include "maptab.h"

int gp_covers(const struct kp_map *m, int mnt, uint64_t ino, uint64_t fb)
{
	uint64_t first = m->off / PAGE;
	return m->mnt == mnt && m->ino == ino && fb >= first && fb < first + m->len / PAGE;
}

static char *page_in(const struct kp_map *m, uint64_t fb)
{
	return m->addr + (fb * PAGE - m->off);
}

/* Pages from fb of m show n consecutive pool blocks from block, populated:
 * they are about to take stores (or, ahead, to be copied), which then do
 * not fault; with m's protection, or read-only.  0, or -errno: the kernel
 * may refuse another mapping (vm.max_map_count), and the pages then still
 * show what they showed. */
static int show_run(kura_fs *fs, struct kp_map *m, uint64_t fb, uint64_t block, size_t n, int read_only)
{
	int writable;
	int fd = kura_map_fd(fs, &writable);
	int prot = read_only ? m->prot & ~PROT_WRITE : m->prot;
	return REAL(mmap)(page_in(m, fb), n * PAGE, prot, MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd,
			  (off_t)(block * PAGE)) == MAP_FAILED
		       ? -errno
		       : 0;
}

int gp_show(kura_fs *fs, struct kp_map *m, const struct taken *t)
{
	return show_run(fs, m, t->fb, t->block, 1, 0);
}

/* A readable map of g's file that shows page fb, or NULL.  (Reading a
 * page the program made inaccessible would fault into this layer's own
 * handler, which waits for the lock held here.) */
static struct kp_map *map_of(const struct kp_group *g, uint64_t fb)
{
	for (size_t k = 0; k < kp_maps_count(); k++)
		if (gp_covers(kp_maps_at(k), g->mnt, g->ino, fb) && (kp_maps_at(k)->prot & PROT_READ))
			return kp_maps_at(k);
	return NULL;
}

/* The entry is an ordinary taken page from now on: committed as it is. */
static void forget_copy(struct kp_group *g, struct taken *t)
{
	if (t->ahead) {
		free(t->ahead);
		t->ahead = NULL;
		g->ncopies--;
	}
}

static struct taken *find_taken(struct kp_group *g, uint64_t fb)
{
	for (size_t i = g->ntaken; i-- > 0;)
		if (g->taken[i].fb == fb)
			return &g->taken[i];
	return NULL;
}

/* Pages after fb that a take from a store at fb of m adds: the run's
 * next stretch, up to the end of m, and short of a page already taken. */
static size_t ahead_of(struct kp_group *g, const struct kp_map *m, uint64_t fb, int run)
{
	if (!run)
		return g->window = 0;
	size_t want = g->window ? g->window * 2 : 1, n = 0;
	if (want > AHEAD_MAX)
		want = AHEAD_MAX;
	if (want > AHEAD_COPIES - g->ncopies)
		want = AHEAD_COPIES - g->ncopies;
	g->window = (unsigned)want;
	uint64_t end = m->off / PAGE + m->len / PAGE - m->eof_pages;
	while (n < want && fb + 1 + n < end && !find_taken(g, fb + 1 + n))
		n++;
	return n;
}

/* With the lock: the group's own block for fb, shown by every map of the
 * file in this process, writable; with a store at fb of store (NULL: a
 * write or a read into the map), the run's next pages too, each with a
 * copy of its bytes (groupmap.h). */
int gp_take(struct kp_group *g, kura_fs *fs, int kfd, uint64_t fb, struct kp_map *store)
{
	int err = 0;
	struct taken *t = find_taken(g, fb);
	int run = store && fb == g->next_fb;
	if (store)
		g->next_fb = fb + 1;
	if (t && t->ahead && !store) {
		/* A write through the group's description went into the
		 * group's block of the page, which a truncation in between may
		 * have replaced: ask the engine which it is now. */
		uint64_t shadow;
		if ((err = kura_atomic_map_block(fs, kfd, fb, 0, &t->block, &shadow)))
			return err;
		forget_copy(g, t);
	}
	if (t) {
		for (size_t k = 0; k < kp_maps_count() && !err; k++)
			if (gp_covers(kp_maps_at(k), g->mnt, g->ino, fb))
				err = gp_show(fs, kp_maps_at(k), t);
		return err;
	}
	size_t more = store ? ahead_of(g, store, fb, run) : 0;
	if (g->ntaken + 1 + more > g->cap) {
		size_t cap = (g->cap ? g->cap * 2 : 16) + 1 + more;
		struct taken *grown = realloc(g->taken, cap * sizeof *grown);
		if (!grown)
			return -ENOMEM;
		g->taken = grown;
		g->cap = cap;
	}
	uint64_t blocks[1 + AHEAD_MAX], shadow;
	int n = kura_atomic_map_blocks(fs, kfd, fb, 1 + more, !g->pinned, blocks, &shadow);
	if (n < 0)
		return n;
	g->pinned = 1;
	if (store)
		g->next_fb = fb + (uint64_t)n; /* the run's next fault: past the pages taken ahead */
	struct taken *first = &g->taken[g->ntaken];
	for (int i = 0; i < n; i++) {
		char *copy = i > 0 ? malloc(PAGE) : NULL;
		g->ncopies += copy != NULL;
		g->taken[g->ntaken++] = (struct taken){ fb + (uint64_t)i, blocks[i], copy };
	}
	for (size_t k = 0; k < kp_maps_count(); k++) {
		struct kp_map *m = kp_maps_at(k);
		if (gp_covers(m, g->mnt, g->ino, fb)) {
			int e = gp_show(fs, m, first);
			err = err ? err : e;
		}
		/* Ahead pages in runs of consecutive blocks, in every map that
		 * holds them, read-only until their copies are made: another
		 * thread's store in between would be in the copy, and lost with
		 * the page at the commit.  One the kernel refuses to show in
		 * some map goes on showing the file's block there, read-only:
		 * it becomes an ordinary page, committed as it is, which a
		 * store there maps again. */
		for (int i = 1, run; i < n; i += run) {
			run = 1;
			if (!gp_covers(m, g->mnt, g->ino, first[i].fb))
				continue;
			while (i + run < n && first[i + run].block == first[i].block + (uint64_t)run &&
			       gp_covers(m, g->mnt, g->ino, first[i + run].fb))
				run++;
			if (show_run(fs, m, first[i].fb, first[i].block, (size_t)run, 1))
				for (int j = i; j < i + run; j++)
					forget_copy(g, &first[j]);
		}
	}
	for (int i = 1; i < n; i++) {
		struct kp_map *m = first[i].ahead ? map_of(g, first[i].fb) : NULL;
		if (m)
			memcpy(first[i].ahead, page_in(m, first[i].fb), PAGE);
		else
			forget_copy(g, &first[i]);
	}
	/* Then writable, in runs of pages that every map shows. */
	for (size_t k = 0; k < kp_maps_count(); k++) {
		struct kp_map *m = kp_maps_at(k);
		for (int i = 1, run; i < n; i += run) {
			run = 1;
			if (!first[i].ahead || !gp_covers(m, g->mnt, g->ino, first[i].fb))
				continue;
			while (i + run < n && first[i + run].ahead && gp_covers(m, g->mnt, g->ino, first[i + run].fb))
				run++;
			REAL(mprotect)(page_in(m, first[i].fb), (size_t)run * PAGE, m->prot);
		}
	}
	return err;
}

static int by_fb(const void *a, const void *b)
{
	uint64_t x = ((const struct taken *)a)->fb, y = ((const struct taken *)b)->fb;
	return x < y ? -1 : x > y;
}

/* With the lock: pages [from, to) of m show the file's blocks again.  A
 * map still read-only from the group gets them read-only too: one
 * protection throughout lets the kernel merge them back, and the next
 * group need not protect the map again. */
static void give_back(struct kp_map *m, size_t from, size_t to)
{
	int prot = m->prot;
	if (m->group_ro)
		m->prot &= ~PROT_WRITE;
	kp_map_cover(m, from, to, 0);
	m->prot = prot;
}

/* With the lock: the pages of list[0, n), sorted, show the file's blocks
 * again in every map of g's file, in runs of consecutive pages, a mapping
 * each: a group that filled a log took hundreds of pages one after
 * another, which one mmap gives back where a page each cost as much again
 * as taking them. */
static void give_back_list(struct kp_group *g, struct taken *list, size_t n)
{
	for (size_t k = 0; k < kp_maps_count(); k++) {
		struct kp_map *m = kp_maps_at(k);
		for (size_t i = 0, run; i < n; i += run) {
			run = 1;
			if (!gp_covers(m, g->mnt, g->ino, list[i].fb))
				continue;
			while (i + run < n && list[i + run].fb == list[i].fb + run &&
			       gp_covers(m, g->mnt, g->ino, list[i + run].fb))
				run++;
			size_t page = (size_t)((list[i].fb * PAGE - m->off) / PAGE);
			give_back(m, page, page + run);
		}
	}
}

/* With the lock, before a commit: the pages taken ahead that still hold
 * what they held when taken show the file's blocks again, and the group
 * gives their blocks back, so the commit leaves those pages as the file
 * has them.  A page no map shows any more (unmapped meanwhile) cannot be
 * told and stays, as a page stored into. */
int gp_drop_ahead(struct kp_group *g, kura_fs *fs)
{
	if (!g->ncopies)
		return 0;
	struct taken *same = malloc(g->ncopies * sizeof *same);
	uint64_t *fbs = malloc(2 * g->ncopies * sizeof *fbs);
	if (!same || !fbs) {
		free(same);
		free(fbs);
		return -ENOMEM;
	}
	uint64_t *blocks = fbs + g->ncopies;
	size_t n = 0, kept = 0;
	for (size_t i = 0; i < g->ntaken; i++) {
		struct taken *t = &g->taken[i];
		struct kp_map *m = t->ahead ? map_of(g, t->fb) : NULL;
		int unchanged = m && memcmp(page_in(m, t->fb), t->ahead, PAGE) == 0;
		forget_copy(g, t);
		if (unchanged)
			same[n++] = *t;
		else
			g->taken[kept++] = *t;
	}
	g->ntaken = kept;
	qsort(same, n, sizeof *same, by_fb);
	give_back_list(g, same, n);
	for (size_t i = 0; i < n; i++) {
		fbs[i] = same[i].fb;
		blocks[i] = same[i].block;
	}
	int r = n ? kura_atomic_unmap_blocks(fs, g->kfd, fbs, blocks, n) : 0;
	free(same);
	free(fbs);
	return r;
}

void gp_release(struct kp_group *g, int recover)
{
	for (size_t i = 0; i < g->ntaken; i++)
		forget_copy(g, &g->taken[i]);
	if (recover && g->ntaken) {
		qsort(g->taken, g->ntaken, sizeof *g->taken, by_fb);
		give_back_list(g, g->taken, g->ntaken);
	}
}
