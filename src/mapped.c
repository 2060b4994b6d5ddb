/* mapped.c — blocks of mapped files (see mapped.h). */
#include <errno.h>
#include <sys/stat.h>
#include "alloc.h"
#include "inode.h"
#include "mapped.h"

/* The holder named in ino's slot, if it is still that inode: the slot is in
 * shared memory and outlives a transaction that rolled back after setting
 * it, so the holder's generation must match too. */
static uint64_t holder_of(struct kura_fs *fs, struct lock_mapped *s)
{
	if (!s || !s->holder)
		return 0;
	const struct kura_inode *hp = ino_get(fs, s->holder);
	if (!hp || !S_ISREG(hp->mode) || hp->nlink || hp->generation != s->holder_gen)
		return 0;
	return s->holder;
}

__thread uint64_t mapped_own_first, mapped_own_last, mapped_own_n;

static uint64_t make_holder(struct kura_fs *fs, struct lock_mapped *s)
{
	uint64_t h = holder_of(fs, s);
	if (h)
		return h;
	if (inode_alloc(fs, S_IFREG, &h))
		return 0;
	/* inode_alloc gives nlink 1; a holder has no name. */
	INO_SET(fs, h, nlink, 0);
	orphan_add(fs, h);
	s->holder = h;
	s->holder_gen = ino_get(fs, h)->generation;
	return h;
}

void mapped_release(struct kura_fs *fs, uint64_t ino, uint64_t first, uint64_t last)
{
	struct lock_mapped *s = inode_mapped(fs, ino) ? lock_slot(&fs->lk, ino) : NULL;
	if (s) {
		uint64_t h = make_holder(fs, s);
		if (!h) {
			tx_fail(&fs->tx, -ENOSPC);
			return;
		}
		/* Counted before anything moves: a count too high only makes a
		 * process keep a holder it could have let go. */
		mapped_own_last = ++s->truncs;
		mapped_own_n++;
		if (!mapped_own_first)
			mapped_own_first = mapped_own_last;
		/* The holder keeps the blocks at file blocks past its size, which
		 * grows by one block per block taken. */
		const struct kura_inode *ip = ino_get(fs, ino);
		for (uint64_t fb = first; fb < last && !fs->tx.err; fb++) {
			fb = bmap_next_data(fs, ip, fb);
			if (fb == UINT64_MAX || fb >= last)
				break;
			if (bmap_entry(fs, ip, fb) & BMAP_UNWRITTEN)
				continue; /* no map shows it (map.c fills it first): freed below */
			uint64_t b = bmap_set(fs, ino, fb, 0);
			uint64_t at = ino_get(fs, h)->size >> KURA_BLOCK_SHIFT;
			if (b && !fs->tx.err) {
				bmap_set(fs, h, at, b);
				INO_SET(fs, h, size, (at + 1) << KURA_BLOCK_SHIFT);
			}
		}
	}
	bmap_free_range(fs, ino, first, last);
}

void mapped_unpinned(struct kura_fs *fs, uint64_t ino)
{
	struct lock_mapped *s = lock_slot(&fs->lk, ino);
	uint64_t h = holder_of(fs, s);
	if (!h)
		return;
	orphan_remove(fs, h);
	inode_free(fs, h);
	s->holder = 0;
}
