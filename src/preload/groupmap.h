/*
 * groupmap.h — what the two halves of the layer's map groups share:
 * groupmap.c keeps this process's group records and serves the hooks
 * (begin, commit, abort, the store fault); grouppages.c holds the pages a
 * group took over (taking them, ahead of a run too, and giving them back).
 * Everything here runs with map.c's table lock held.
 */
#ifndef KP_GROUPMAP_H
#define KP_GROUPMAP_H

#include <stddef.h>
#include <stdint.h>

#include "kura.h"
#include "maptab.h"

struct taken {
	uint64_t fb, block;
	char *ahead; /* taken ahead of a run of stores: the page's bytes then (else NULL) */
};

/* A store that continues a run (the page after the last one taken) takes
 * the next pages over too, writable, twice as many each time up to
 * AHEAD_MAX: one engine call and one mmap for the lot, and no fault at
 * all for the stores that follow, where each page cost a fault, an engine
 * call and a remap (examples/kv, filling a log, paid about 13 us a page:
 * as much again as the 34 puts that fill a page cost it on tmpfs).
 * Nothing tells which of those pages a store reached, so each keeps a
 * copy of its bytes as taken (grouppages.c): before the commit, a page
 * that still holds them is given back (kura_atomic_unmap_blocks), and the
 * commit leaves it as the file has it then, as for any page the group did
 * not write, whoever else wrote it meanwhile.  Copies are bounded by
 * AHEAD_COPIES pages (16 MiB) a group; past that, pages are taken a store
 * at a time again. */
#define AHEAD_MAX 32
#define AHEAD_COPIES 4096

struct kp_group {
	int used;
	int mnt;
	int kfd;          /* a descriptor of the group's description */
	int pinned;       /* the shadow is pinned by this process */
	uint64_t ino;     /* the file */
	uint64_t shadow;  /* the engine's shadow inode: names the group */
	struct taken *taken;
	size_t ntaken, cap;
	uint64_t next_fb; /* the page after the last store: where a run goes on */
	unsigned window;  /* pages the run's last take asked for ahead; the next asks twice as many */
	size_t ncopies;   /* entries with an ahead copy */
};

int gp_covers(const struct kp_map *m, int mnt, uint64_t ino, uint64_t fb);
/* Page t->fb of m shows the group's block, writable: 0 or -errno. */
int gp_show(kura_fs *fs, struct kp_map *m, const struct taken *t);
/* The group's own block for fb, shown by every map of the file in this
 * process, writable; with a store at fb of store (NULL: a write or a read
 * into the map), the run's next pages too.  0 or -errno. */
int gp_take(struct kp_group *g, kura_fs *fs, int kfd, uint64_t fb, struct kp_map *store);
/* Before a commit: the pages taken ahead that nothing changed go back to
 * the file.  0 or -errno. */
int gp_drop_ahead(struct kp_group *g, kura_fs *fs);
/* At the group's end: the copies go; with recover, every page taken shows
 * the file's block again. */
void gp_release(struct kp_group *g, int recover);

#endif
