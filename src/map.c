/*
 * map.c — what the interposition layer needs to map kura files shared
 * (the API is in kura.h, the rules the rest of the engine keeps for mapped
 * files in mapped.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include "alloc.h"
#include "fault.h"
#include "group.h"
#include "inode.h"
#include "xattr.h"
#include "mapped.h"
#include "ofile.h"

int kura_map_pin(kura_fs *fs, int fd, int prot_write, uint64_t *ino)
{
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	int acc = of->flags & O_ACCMODE;
	*ino = of->ino;
	int group = group_open(of);
	ofile_put(fs, of);
	if (acc == O_WRONLY || (prot_write && acc != O_RDWR))
		return -EACCES;
	if (group)
		return -ENODEV; /* a map would show the file, not the group (kura.h) */
	int err;
	if (fs->read_only) {
		fs_lock_for_read(fs);
		const struct kura_inode *ip = ino_get(fs, *ino);
		err = !ip ? -EBADF : !S_ISREG(ip->mode) ? -ENODEV : lock_map_inc(&fs->lk, *ino);
		fs_unlock_for_read(fs);
		return err;
	}
	if ((err = fs_begin(fs)))
		return err;
	const struct kura_inode *ip = ino_get(fs, *ino);
	err = !ip ? -EBADF : !S_ISREG(ip->mode) ? -ENODEV : lock_map_inc(&fs->lk, *ino);
	return fs_end(fs, err);
}

int kura_map_repin(kura_fs *fs, uint64_t ino)
{
	fs_lock_for_read(fs);
	int err = lock_map_inc(&fs->lk, ino);
	fs_unlock_for_read(fs);
	return err;
}

int kura_map_unpin(kura_fs *fs, uint64_t ino)
{
	if (fs->read_only || fs_begin(fs)) {
		fs_lock_for_read(fs);
		lock_map_dec(&fs->lk, ino);
		fs_unlock_for_read(fs);
		return 0;
	}
	mapped_unpin(fs, ino);
	return fs_end(fs, 0);
}

void mapped_unpin(struct kura_fs *fs, uint64_t ino)
{
	/* The holder is named in the slot, which the last count takes away. */
	if (lock_maps(&fs->lk, ino) == 1)
		mapped_unpinned(fs, ino);
	lock_map_dec(&fs->lk, ino);
	const struct kura_inode *ip = ino_get(fs, ino);
	if (ip && !lock_open_count(&fs->lk, ino) && ip->nlink == 0) {
		orphan_remove(fs, ino);
		inode_dispose(fs, ino);
	}
}

uint64_t kura_map_truncations(kura_fs *fs, uint64_t ino)
{
	fs_lock_for_read(fs);
	struct lock_mapped *s = lock_slot(&fs->lk, ino);
	uint64_t n = s ? __atomic_load_n(&s->truncs, __ATOMIC_ACQUIRE) : 0;
	fs_unlock_for_read(fs);
	return n;
}

uint64_t kura_map_own_truncation(uint64_t *before)
{
	uint64_t last = mapped_own_last;
	/* Another process's truncation between two of ours (a long one runs
	 * in several transactions) leaves a gap: no count then matches. */
	*before = !last ? 0 : last - mapped_own_first + 1 == mapped_own_n ? mapped_own_first - 1 : UINT64_MAX;
	mapped_own_first = mapped_own_last = mapped_own_n = 0;
	return last;
}

int kura_map_trim(kura_fs *fs, uint64_t ino, uint64_t own_pins, uint64_t truncs)
{
	if (fs->read_only)
		return 0;
	int err = fs_begin(fs);
	if (err)
		return err;
	struct lock_mapped *s = lock_slot(&fs->lk, ino);
	if (s && s->maps == own_pins && s->truncs == truncs)
		mapped_unpinned(fs, ino);
	return fs_end(fs, 0);
}

int kura_in_operation(kura_fs *fs)
{
	return lock_held_here(&fs->lk);
}

int kura_map_fd(kura_fs *fs, int *writable)
{
	*writable = !fs->read_only;
	return fs->m.fd;
}

static int64_t lookup(kura_fs *fs, uint64_t ino, uint64_t first, uint64_t n, uint64_t *offs)
{
	int64_t ret = 0;
	FS_READ(fs, ret, {
		const struct kura_inode *ip = ino_get(fs, ino);
		if (!ip || !S_ISREG(ip->mode)) {
			ret = -EBADF;
		} else {
			uint64_t end = (ip->size + KURA_BLOCK - 1) >> KURA_BLOCK_SHIFT;
			for (uint64_t i = 0; i < n; i++) {
				uint64_t b = first + i < end ? bmap_get(fs, ip, first + i) : 0;
				offs[i] = block_valid(fs, b) ? block_off(b) : 0;
			}
			ret = (int64_t)ip->size;
		}
	});
	return ret;
}

/* Blocks per transaction when filling holes or recording stores: well
 * inside the smallest undo log and journal. */
#define MAP_CHUNK 256u

/* Calls each(fs, ino, fb, block) for file blocks [first, first + n) below
 * the end of the file (block 0 for a hole), MAP_CHUNK blocks to a
 * transaction.  0 or -errno. */
static int each_block(kura_fs *fs, uint64_t ino, uint64_t first, uint64_t n, int how,
		      void (*each)(kura_fs *fs, uint64_t ino, uint64_t fb, uint64_t b, int how))
{
	for (uint64_t done = 0; done < n;) {
		uint64_t part = n - done < MAP_CHUNK ? n - done : MAP_CHUNK;
		int err = fs_begin(fs);
		if (err)
			return err;
		const struct kura_inode *ip = ino_get(fs, ino);
		uint64_t end = ip ? (ip->size + KURA_BLOCK - 1) >> KURA_BLOCK_SHIFT : 0;
		for (uint64_t fb = first + done; fb < first + done + part && fb < end && !fs->tx.err; fb++) {
			uint64_t b = bmap_get(fs, ip, fb);
			each(fs, ino, fb, block_valid(fs, b) ? b : 0, how);
		}
		if ((err = fs_end(fs, ip ? 0 : -EBADF)) < 0)
			return err;
		done += part;
	}
	return 0;
}

static void fill_hole(kura_fs *fs, uint64_t ino, uint64_t fb, uint64_t b, int how)
{
	(void)how;
	if (!b) {
		const struct kura_inode *ip = media_ptr(&fs->m, ino_off(ino));
		uint64_t e = bmap_entry(fs, ip, fb);
		/* A map shows a block's bytes, so an unwritten one is zeroed
		 * first, as a new one is. */
		b = e ? bmap_take_unwritten(fs, ip, fb, e) : bmap_alloc(fs, ip, fb, ALLOC_ZEROED_DATA);
		if (!b)
			return;
		if (e)
			tx_zero_fresh(&fs->tx, block_off(b), KURA_BLOCK, 1);
		bmap_set(fs, ino, fb, b);
	}
	/* A checkpoint writes the block home even if no record ever carries
	 * what the map stores in it. */
	if (fs->tx.j)
		journal_mark_dirty(fs->tx.j, block_off(b), KURA_BLOCK);
}

/* -ENOSPC if filling the holes of the range would not fit in the free
 * blocks (with their map nodes): refused before any is taken, so a map
 * the pool cannot hold leaves the pool as it was. */
static int holes_fit(kura_fs *fs, uint64_t ino, uint64_t first, uint64_t n)
{
	uint64_t holes = 0;
	int err = 0;
	fs_lock_for_read(fs);
	const struct kura_inode *ip = ino_get(fs, ino);
	uint64_t end = ip ? (ip->size + KURA_BLOCK - 1) >> KURA_BLOCK_SHIFT : 0;
	for (uint64_t fb = first; fb < first + n && fb < end; fb++)
		holes += !bmap_get(fs, ip, fb);
	if (holes && holes + holes / (MAP_FANOUT - 1) + MAP_MAX_HEIGHT > alloc_free_for_data(fs))
		err = -ENOSPC;
	fs_unlock_for_read(fs);
	return err;
}

int64_t kura_map_blocks(kura_fs *fs, uint64_t ino, uint64_t first, uint64_t n, int alloc, uint64_t *offs)
{
	int err = alloc && !fs->read_only ? holes_fit(fs, ino, first, n) : 0;
	if (!err && alloc && !fs->read_only)
		err = each_block(fs, ino, first, n, 0, fill_hole);
	if (err || offs)
		return err ? err : lookup(fs, ino, first, n, offs);
	int64_t size = 0;
	FS_READ(fs, size, {
		const struct kura_inode *ip = ino_get(fs, ino);
		size = ip ? (int64_t)ip->size : -EBADF;
	});
	return size;
}

static void note_stores(kura_fs *fs, uint64_t ino, uint64_t fb, uint64_t b, int how)
{
	(void)ino;
	(void)fb;
	if (!b)
		return;
	if ((how & KURA_MAP_RECORD) && kura_fault != FAULT_MAP_UNRECORDED) /* injected bug: crash tests only */
		tx_note_changed(&fs->tx, block_off(b), KURA_BLOCK);
	else if (fs->tx.j)
		journal_mark_dirty(fs->tx.j, block_off(b), KURA_BLOCK);
}

int kura_map_sync(kura_fs *fs, uint64_t ino, uint64_t first, uint64_t n, int how)
{
	if (fs->read_only)
		return 0;
	int err = each_block(fs, ino, first, n, how, note_stores);
	return err ? err : (how & KURA_MAP_DURABLE) ? fs_sync(fs) : 0;
}
