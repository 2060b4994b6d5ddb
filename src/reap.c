/* reap.c — giving back what killed processes held open (see reap.h). */
#include "inode.h"
#include "lock.h"
#include "mapped.h"
#include "reap.h"
#include "super.h"
#include "xattr.h" /* inode_dispose */

/* One ledger entry of a dead owner: its counts leave the inode's slot.
 * Returns whether the pool changed, which ends the transaction: each
 * freeing is as large as a close's, and as a close does, takes one. */
static int give_back(struct kura_fs *fs, const struct lock_ledger *e)
{
	int changed = 0;
	/* The holder of cut-off blocks is named in the slot, which the last
	 * map's count takes away (mapped_unpin does the same). */
	if (e->maps && lock_maps(&fs->lk, e->ino) <= e->maps) {
		mapped_unpinned(fs, e->ino);
		changed = 1;
	}
	lock_drop(&fs->lk, e->ino, e->opens, e->maps);
	const struct kura_inode *ip = ino_get(fs, e->ino);
	if (ip && ip->nlink == 0 && !lock_open_count(&fs->lk, e->ino)) {
		orphan_remove(fs, e->ino);
		inode_dispose(fs, e->ino);
		changed = 1;
	}
	return changed;
}

void reap_dead_owners(struct kura_fs *fs)
{
	if (fs->read_only || fs->m.io_err)
		return;
	/* Bounded: each round frees an owner or one of its files, and a
	 * table holds at most LOCK_OWNERS owners and their ledger entries. */
	for (unsigned round = 0; round < LOCK_OWNERS + LOCK_LEDGER_SLOTS; round++) {
		/* Most owners end with every file closed: their slots are
		 * freed without a transaction. */
		uint32_t owner = lock_owner_dead(&fs->lk); /* outside the mutex: see lock.h */
		if (!owner)
			return;
		fs_lock_for_read(fs);
		int empty = !lock_owner_entries(&fs->lk, owner);
		if (empty)
			lock_owner_free(&fs->lk, owner);
		fs_unlock_for_read(fs);
		if (empty)
			continue;
		if (fs_begin(fs))
			return;
		struct lock_ledger e;
		size_t cursor = 0;
		int more = 0;
		while (!more && lock_owner_take(&fs->lk, owner, &e, &cursor))
			more = give_back(fs, &e);
		if (!more)
			lock_owner_free(&fs->lk, owner);
		if (fs_end(fs, 0))
			return;
	}
}
