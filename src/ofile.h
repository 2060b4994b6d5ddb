/*
 * ofile.h — open file descriptions and descriptors.
 *
 * A description (struct ofile: inode, offset, status flags) lives in a table
 * in shared memory (a memfd mapped MAP_SHARED), so that after fork() parent
 * and child hold the *same* description — one offset, as POSIX requires —
 * and after exec() the new image can map the table again from the inherited
 * memfd and adopt its descriptions.  A descriptor is a process-private index
 * into that table; dup() makes another descriptor for one description.
 *
 * Each description counts its references (descriptors, in every process,
 * plus short-lived holds by calls in progress); the last release drops the
 * pool-wide open count of the inode (lock.h), which frees an unlinked file.
 */
#ifndef KURA_OFILE_H
#define KURA_OFILE_H

#include <pthread.h>
#include <stdint.h>
#include "fs.h"

#define OFILE_SLOTS 65536u

struct ofile {
	uint64_t ino;
	uint64_t pos;
	int32_t flags;
	int32_t refs;             /* 0: the slot is free */
	pthread_mutex_t pos_lock; /* process-shared, robust: read/write/lseek on one description are serialised */
	/* An atomic group open on this description (group.h): its shadow
	 * inode (0: none) and that inode's generation, and the view's cut.
	 * group_lo..group_hi covers every file block the shadow may hold
	 * (lo > hi: none), so that a commit looks up those and does not
	 * walk the shadow's map of a large file.  Changed only under the
	 * pool mutex. */
	uint64_t group_ino;
	uint64_t group_cut;
	uint64_t group_lo, group_hi;
	uint32_t group_gen;
	/* The last group's shadow, emptied by its commit and kept for the
	 * next group on this description (0: none), and its generation: a
	 * database commits a group per transaction, and making and freeing
	 * a shadow each time was a third of the group's cost.  Changed only
	 * under the pool mutex. */
	uint32_t spare_gen;
	uint64_t spare_ino;
};

/* Creates (state_fd < 0) or maps an inherited table. */
int ofile_attach(struct kura_fs *fs, int state_fd);
/* Releases this process's descriptors and unmaps the table. */
void ofile_detach(struct kura_fs *fs);

/* A new description holding one reference, or NULL (-ENFILE). */
struct ofile *ofile_new(struct kura_fs *fs, uint64_t ino, int flags);
/* Installs a descriptor for of, taking over one reference; returns it or -errno. */
int fd_install(struct kura_fs *fs, struct ofile *of);
/* The description behind fd with a reference held for the caller, or NULL. */
struct ofile *ofile_get(struct kura_fs *fs, int fd);
/* Drops a reference; the last one releases the description. */
void ofile_put(struct kura_fs *fs, struct ofile *of);
/* Removes fd from the table; returns its description (reference handed to the caller) or NULL. */
struct ofile *fd_remove(struct kura_fs *fs, int fd);
long ofile_id(const struct kura_fs *fs, const struct ofile *of);

void ofile_lock_pos(struct ofile *of);
void ofile_unlock_pos(struct ofile *of);

#endif
