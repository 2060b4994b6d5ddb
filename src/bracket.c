/* bracket.c — the bracket around every operation: the pool lock, a dead
 * holder's transaction undone, commit or rollback; fork, release and sync
 * (see fs.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <unistd.h>
#include "fs.h"
#include "alloc.h"
#include "dir_index.h"
#include "inode.h"
#include "journal.h"
#include "sighold.h"

/* acquired: lock_acquire's or lock_acquire_unless_tracee's answer. */
static int took_lock(struct kura_fs *fs, int acquired)
{
	if (acquired == 1) {
		/* The previous holder died mid-operation: its transaction is still
		 * in the log.  Undo it, then the pool is as it was before. */
		lock_write_begin(&fs->lk);
		if (fs->tx.j) {
			journal_leave(fs->tx.j);
			journal_repair(fs->tx.j, tx_head_epoch(&fs->tx));
		}
		tx_recover(&fs->tx);
		lock_mark_consistent(&fs->lk);
		lock_write_end(&fs->lk);
	}
	return acquired < 0 ? acquired : 0;
}

/* Callers that must have the lock (to give counts back) wait whatever
 * holds it; operations that may fail give up on a stopped tracee. */
void fs_lock_for_read(struct kura_fs *fs)
{
	took_lock(fs, lock_acquire(&fs->lk));
}

int fs_lock_for_read_or_fail(struct kura_fs *fs)
{
	return took_lock(fs, lock_acquire_unless_tracee(&fs->lk));
}

void fs_unlock_for_read(struct kura_fs *fs)
{
	lock_release(&fs->lk);
}

int fs_begin(struct kura_fs *fs)
{
	if (fs->read_only)
		return -EROFS;
	/* A failed msync: what this mount wrote may not be on the disk, so it
	 * says so instead of acknowledging more (remount to recover). */
	if (fs->m.io_err)
		return -EIO;
	int err = took_lock(fs, lock_acquire_unless_tracee(&fs->lk));
	if (err)
		return err;
	if (fs->tx.j)
		journal_enter(fs->tx.j);
	dir_index_begin(fs);
	lock_write_begin(&fs->lk);
	alloc_drop_frees(fs);
	tx_begin(&fs->tx);
	ts_now(&fs->op_time);
	return 0;
}

/* A file that grows takes the block after the one it took last: where
 * that starts a chunk of the pool without storage, the storage is given
 * now, after the mutex, rather than by the next operation while every
 * other waits (on memory about 35 us a chunk, fallocate and populate).
 * The chunk is given as the block before it was taken: metadata (inode
 * slots, directory blocks) is zeroed through the map, so its pages are
 * mapped now; given cold, as file data wants, each page was a fault
 * inside the operation that zeroed it.  The first 20,000 creates in a
 * fresh memory pool: 545 -> 512 ns each (medians of 11 alternated runs). */
static void back_ahead(struct kura_fs *fs)
{
	if (!__atomic_load_n(&fs->back_ahead, __ATOMIC_RELAXED))
		return;
	uint64_t ahead = __atomic_exchange_n(&fs->back_ahead, 0, __ATOMIC_RELAXED);
	uint64_t off = ahead & ~(uint64_t)BACK_AHEAD_STORES;
	if (off && off < block_off(fs->nblocks))
		(void)media_back(&fs->m, off, KURA_BLOCK, ahead & BACK_AHEAD_STORES ? MEDIA_FILL_STORES : MEDIA_FILL_COPIES); /* a failure is the next claim's to report */
}

int fs_end(struct kura_fs *fs, int ret)
{
	/* A signal that came during the operation is let in at its very end,
	 * not between its commit and its flush. */
	sighold_enter();
	uint64_t lsn = 0;
	int committed = 0;
	if (ret < 0 || fs->tx.err) {
		if (ret >= 0)
			ret = fs->tx.err;
		alloc_drop_frees(fs);
		tx_abort(&fs->tx);
	} else {
		alloc_apply_frees(fs);
		int err = tx_commit(&fs->tx);
		committed = !err;
		if (err)
			ret = err;
		else if (fs->m.io_err)
			ret = -EIO; /* applied, but not known durable */
		lsn = fs->tx.commit_lsn;
	}
	if (fs->tx.j) {
		journal_leave(fs->tx.j);
		if (committed)
			journal_write_behind(fs->tx.j);
	}
	lock_write_end(&fs->lk);
	dir_index_end(fs, committed);
	lock_release(&fs->lk);
	back_ahead(fs);
	/* Outside the pool mutex, so that others commit while this waits and
	 * one flush covers them all. */
	if (lsn && fs->j.sync_each_op && ret >= 0) {
		int err = journal_sync(&fs->j, lsn);
		if (err)
			ret = err;
	}
	/* This operation is done whatever the sync says: a failed one sets
	 * io_err, which the next change reports. */
	if (fs->tx.j && ret >= 0 && journal_sync_due(&fs->j) && !lock_held_here(&fs->lk))
		fs_sync(fs);
	sighold_leave();
	return ret;
}

void fs_fork_child(struct kura_fs *fs)
{
	char self[64];
	snprintf(self, sizeof self, "/proc/self/fd/%d", fs->pool_fd);
	int fd = open(self, (fs->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	if (fd >= 0) {
		dup3(fd, fs->pool_fd, O_CLOEXEC);
		close(fd);
	}
	lock_fork_child(&fs->lk);
}

int kura_release(kura_fs *fs)
{
	if (!fs || !fs->lk.t)
		return 0;
	int err = 0;
	while (flock(fs->pool_fd, LOCK_EX) && errno == EINTR)
		;
	if (lock_is_last(&fs->lk)) {
		if (fs->tx.j) {
			fs_lock_for_read(fs);
			err = journal_checkpoint(&fs->j);
			lock_release(&fs->lk);
			if (!err)
				journal_remove_copy(fs->pool_fd);
		}
		lock_remove(&fs->lk);
	}
	flock(fs->pool_fd, LOCK_UN);
	return err;
}

int fs_sync(struct kura_fs *fs)
{
	/* In op mode every operation that returned is durable already; one in
	 * flight (another thread's, another process's) need not be.  Changes
	 * that a process in fsync mode left pending must become durable,
	 * whoever syncs. */
	if (fs->tx.j && (!fs->j.sync_each_op || journal_pending(&fs->j))) {
		/* The pending changes become a record between two operations. */
		fs_lock_for_read(fs);
		int err = journal_seal(&fs->j);
		lock_release(&fs->lk);
		return err ? err : journal_sync_all(&fs->j);
	}
	return fs->m.io_err ? -EIO : 0;
}
