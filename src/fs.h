/*
 * fs.h — the mounted pool as every layer above the log sees it, and the
 * bracket around each operation.
 *
 * Changes: fs_begin() takes the pool mutex, marks the sequence counter busy
 * and opens a transaction; fs_end(ret) commits (ret >= 0) or rolls back
 * (ret < 0), so an operation that fails halfway changes nothing.
 *
 * Reads: FS_READ runs a body optimistically without the mutex and reruns it
 * if a change overlapped; after a few tries it takes the mutex.  Bodies must
 * therefore be restartable and must trust nothing they read until the
 * sequence check passes — which is why every pointer read from the pool is
 * bounds-checked before it is followed.
 */
#ifndef KURA_FS_H
#define KURA_FS_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include "kura.h"
#include "layout.h"
#include "lock.h"
#include "media.h"
#include "tx.h"

struct ofile;

struct kura_fs {
	struct media m;
	struct tx tx;
	/* file back end, read-write: the working copy's journal (tx.j points
	 * here) and the copy's fd; copy_fd is -1 otherwise. */
	struct journal j;
	int copy_fd;
	struct lockh lk;
	const struct kura_super *sb; /* as mount read it (a private copy) */
	uint64_t nblocks;
	uint64_t first_data_block;
	uint64_t meta_reserve;       /* free blocks only metadata may take (alloc.h) */
	int pool_fd;
	int read_only;
	int fsync_mode;              /* file back end, KURA_SYNC=fsync: durable at sync, not at return */
	char *pool_path;
	struct kura_creds creds; /* kura_set_creds, if have_creds */
	int have_creds;
	/* kura_mount_opts.host_prefix without trailing slashes ("" for "/"),
	 * NULL when off; host_parent: the length of its parent's path. */
	char *host_prefix;
	size_t host_plen, host_parent;
	/* One clock reading per operation: every time it sets is the same, as
	 * with a kernel's per-syscall current_time(). */
	struct kura_ts op_time;
	/* allocator (DRAM, valid only under the mutex) */
	uint64_t alloc_hint;
	uint64_t stretch_hint;       /* the next bitmap word alloc_block_in_stretch looks at, going down */
	uint64_t word_hint;          /* and alloc_block_in_word, going up */
	uint64_t back_ahead;         /* pool offset to give storage after the operation (fs_end),
	                                | BACK_AHEAD_STORES for metadata; atomic */
	/* Blocks this mount freed lately, tried before the scan: a stack kept
	 * in a ring, whose oldest entries give way when it is full (alloc.c). */
	uint64_t recent_free[1024];
	unsigned recent_first, nrecent_free;
	uint64_t *pending_free;
	size_t npending_free, cap_pending_free;
	int mounted_alone;           /* no other process had the pool mounted */
	uint64_t mount_id;           /* unique in the process: whose buckets a thread's index holds (dir_index.h) */
	/* acl.c's check, for inodes with INODE_ACL (perm_check is below the
	 * layer that stores ACLs, so the mount hands it this). */
	int (*acl_permission)(const struct kura_fs *fs, uint64_t ino, const struct kura_inode *ip, int want);
	/* descriptors of this mount (ofile.c) */
	pthread_mutex_t fd_mutex;
	int32_t *fds;                /* descriptor -> slot of ofiles, -1 = closed */
	int nfds;
	struct ofile *ofiles;        /* shared table of open file descriptions */
	int state_fd;                /* its memfd */
	uint32_t ofile_hint;
};

static inline const struct kura_state *fs_state(const struct kura_fs *fs)
{
	return media_ptr(&fs->m, (uint64_t)STATE_BLOCK * KURA_BLOCK);
}
/* fs->back_ahead's low bit: the block was taken for metadata (block offsets
 * are block-aligned, so the bit is free). */
#define BACK_AHEAD_STORES 1u

#define STATE_OFF(field) ((uint64_t)STATE_BLOCK * KURA_BLOCK + offsetof(struct kura_state, field))

static inline int block_valid(const struct kura_fs *fs, uint64_t b)
{
	return b >= fs->first_data_block && b < fs->nblocks;
}
static inline uint64_t block_off(uint64_t b)
{
	return b << KURA_BLOCK_SHIFT;
}
static inline const void *block_ptr(const struct kura_fs *fs, uint64_t b)
{
	return media_ptr(&fs->m, block_off(b));
}

/* The pool's format version as its superblock says now, and marking it
 * (both copies) `version` under the current transaction unless it says so
 * already (super.c). */
uint32_t super_version(const struct kura_fs *fs);
void super_mark_version(struct kura_fs *fs, uint32_t version);

/* Linux's inode_newsize_ok for RLIMIT_FSIZE (kura_set_fsize_limit):
 * KURA_XFSZ if a file of `size` bytes would grow to `end`, past the
 * limit; else 0 (fileio.c). */
int fsize_check(uint64_t size, uint64_t end);

/* Operation brackets (bracket.c). */
int fs_begin(struct kura_fs *fs);
int fs_end(struct kura_fs *fs, int ret);
/* A forked child's own open file descriptions of the pool file and the
 * lock table (their flocks tell mounts apart). */
void fs_fork_child(struct kura_fs *fs);
/* Makes every committed change durable (file back end); 0 or -EIO. */
int fs_sync(struct kura_fs *fs);
void fs_lock_for_read(struct kura_fs *fs);
/* The same, or -EDEADLK when the holder is the calling thread's stopped
 * tracee (tracee.h); fs_begin fails so too. */
int fs_lock_for_read_or_fail(struct kura_fs *fs);
void fs_unlock_for_read(struct kura_fs *fs);

/* TSan cannot know that a seqlock reader discards what it read during a
 * race, so sanitized thread builds read under the mutex instead. */
#if defined(__SANITIZE_THREAD__)
#define FS_OPTIMISTIC_TRIES 0
#else
#define FS_OPTIMISTIC_TRIES 3
#endif

#define FS_READ(fs, ret, body)                                                     \
	do {                                                                       \
		int fs_read_done_ = 0;                                             \
		for (int fs_try_ = 0; fs_try_ < FS_OPTIMISTIC_TRIES; fs_try_++) {  \
			uint64_t fs_seq_ = lock_read_wait(&(fs)->lk);               \
			if (fs_seq_ & 1)                                           \
				break;                                             \
			body;                                                      \
			if (lock_read_valid(&(fs)->lk, fs_seq_)) {                 \
				fs_read_done_ = 1;                                 \
				break;                                             \
			}                                                          \
		}                                                                  \
		if (!fs_read_done_ && fs_lock_for_read_or_fail(fs)) {              \
			(ret) = -EDEADLK;                                          \
		} else if (!fs_read_done_) {                                       \
			body;                                                      \
			fs_unlock_for_read(fs);                                    \
		}                                                                  \
	} while (0)

#endif
