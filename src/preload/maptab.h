/*
 * maptab.h — this process's table of shared maps of kura files (map.c),
 * for the code that syncs and trims them (mapsync.c), changes what their
 * pages show (groupmap.c) and the signal handlers (mapsig.c).
 */
#ifndef KP_MAPTAB_H
#define KP_MAPTAB_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PAGE 4096u

struct kp_map {
	char *addr;
	size_t len;      /* bytes, whole pages */
	uint64_t off;    /* file offset of addr */
	uint64_t ino;
	int mnt;
	int prot;
	int may_write;   /* the description was O_RDWR: mprotect may add PROT_WRITE */
	int group_ro;    /* pages made read-only for an atomic group (groupmap.c), until a store finds the group over */
	uint64_t truncs; /* the file's count of truncations that kept blocks, when no page of
			  * this map could show a kept block (src/mapped.h) */
	size_t eof_pages; /* its last eof_pages pages are known to raise SIGBUS (0: none known),
			   * which a truncation then need not cover again */
	int lazy_holes;   /* holes the pool could not fill at mmap raise SIGBUS until touched (map.c) */
};

/* The table's lock; trylock spins a while and gives up (a signal handler
 * may interrupt a thread holding it): 0 when taken. */
void kp_maps_lock(void);
int kp_maps_trylock(void);
void kp_maps_unlock(void);
/* With the lock: the maps, and the one holding addr (NULL if none). */
size_t kp_maps_count(void); /* also without it: 0 means no map to look at */
struct kp_map *kp_maps_at(size_t i);
struct kp_map *kp_maps_find(const void *addr);
int kp_maps_overlap(const void *addr, size_t len);
/* With the lock, as it is let go: the maps' ranges, for the lock-free
 * look of kp_map_kernel_buffer (mapsync.c). */
void kp_maps_publish(void);
/* With the lock: maps pages [from, to) of m at the file's blocks again;
 * fill_holes gives blocks to holes first (it takes the pool mutex): 1 all
 * or none, unless the map is lazy (then none), 2 these pages, being
 * touched, lazy or not. */
int kp_map_cover(struct kp_map *m, size_t from, size_t to, int fill_holes);

/* mapcopy.c: mmap's MAP_PRIVATE of a kura file. */
struct kp_fd;
void *kp_map_private_copy(void *addr, size_t len, int prot, int flags, struct kp_fd *e, off_t off);

/* In mapsig.c's SIGBUS handler: maps the page at addr if it is a map's
 * page that lies within the file now; 1 if it did. */
int kp_map_fault_in(void *addr);
/* mapsig.c: the handler, installed by the first map that may need it. */
void kp_install_bus_handler(void);

/* groupmap.c, called by map.c: pages of a map just covered with the file's
 * blocks that a group of this process has taken over show its blocks
 * instead; a SIGSEGV that is a store into a page a group protects. */
void kp_group_cover(struct kp_map *m, size_t from, size_t to);
int kp_group_fault(void *addr);
/* At fork (the child's pins), exec and exit (the pins go). */
void kp_group_fork_prepare(void);
void kp_group_drop_all(int failed_exec);

#endif
