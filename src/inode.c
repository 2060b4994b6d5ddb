/* inode.c — inode slots and file data (see inode.h; bmap.c has the block map). */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <string.h>
#include <time.h>
#include "alloc.h"
#include "creds.h"
#include "fault.h"
#include "inode.h"
#include "mapped.h"

const struct kura_inode *ino_get(const struct kura_fs *fs, uint64_t ino)
{
	uint64_t off = ino_off(ino);
	if (ino == 0 || ino >= (fs->nblocks << (KURA_BLOCK_SHIFT - INODE_SHIFT)) ||
	    off < block_off(fs->first_data_block))
		return NULL;
	const struct kura_inode *ip = media_ptr(&fs->m, off);
	return ip->mode ? ip : NULL;
}

void ts_now(struct kura_ts *ts)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	ts->sec = now.tv_sec;
	ts->nsec = (uint32_t)now.tv_nsec;
	ts->pad = 0;
}

static void count_type(struct kura_fs *fs, mode_t mode, int delta)
{
	const struct kura_state *st = fs_state(fs);
	if (S_ISDIR(mode))
		tx_write64(&fs->tx, STATE_OFF(ndirs), st->ndirs + delta);
	else if (S_ISLNK(mode))
		tx_write64(&fs->tx, STATE_OFF(nsymlinks), st->nsymlinks + delta);
	else
		tx_write64(&fs->tx, STATE_OFF(nfiles), st->nfiles + delta);
}

/* Carves a new block into free slots, chained in address order. */
static int refill_slots(struct kura_fs *fs)
{
	uint64_t b = alloc_block(fs, 1);
	if (!b)
		return fs->tx.err;
	uint64_t first = block_off(b) >> INODE_SHIFT;
	uint64_t head = fs_state(fs)->inode_free;
	for (unsigned i = 0; i < INODES_PER_BLOCK; i++) {
		tx_write64(&fs->tx, INO_FIELD_OFF(first + i, link), i + 1 < INODES_PER_BLOCK ? first + i + 1 : head);
		if (i)
			tx_write64(&fs->tx, INO_FIELD_OFF(first + i, prev), first + i - 1);
	}
	if (head)
		tx_write64(&fs->tx, INO_FIELD_OFF(head, prev), first + INODES_PER_BLOCK - 1);
	tx_write64(&fs->tx, STATE_OFF(inode_free), first);
	return fs->tx.err;
}

/* A slot number that may be dereferenced: inside the data area (shifted,
 * a huge number would wrap into range, so the number is bounded first). */
static int slot_valid(const struct kura_fs *fs, uint64_t ino)
{
	return ino && ino < (fs->nblocks << (KURA_BLOCK_SHIFT - INODE_SHIFT)) &&
	       ino_off(ino) >= block_off(fs->first_data_block);
}

static const struct kura_inode *slot_at(const struct kura_fs *fs, uint64_t ino)
{
	return media_ptr(&fs->m, ino_off(ino));
}

/* 1 if the free slot ino is linked both ways as the list says, so taking
 * it off cannot damage someone else's slot. */
static int slot_linked(const struct kura_fs *fs, uint64_t ino)
{
	const struct kura_inode *s = slot_at(fs, ino);
	if (s->mode)
		return 0;
	if (s->prev ? !slot_valid(fs, s->prev) || slot_at(fs, s->prev)->link != ino
		    : fs_state(fs)->inode_free != ino)
		return 0;
	return !s->link || (slot_valid(fs, s->link) && slot_at(fs, s->link)->prev == ino);
}

/* Links free slots before and after to each other (0: the list's head,
 * its end), leaving out whatever lay between them. */
static void bridge(struct kura_fs *fs, uint64_t before, uint64_t after)
{
	if (before)
		tx_write64(&fs->tx, INO_FIELD_OFF(before, link), after);
	else
		tx_write64(&fs->tx, STATE_OFF(inode_free), after);
	if (after)
		tx_write64(&fs->tx, INO_FIELD_OFF(after, prev), before);
}

static void slot_unlink(struct kura_fs *fs, uint64_t ino)
{
	const struct kura_inode *s = slot_at(fs, ino);
	bridge(fs, s->prev, s->link);
}

/* Slot ino is about to change whole, and slot other's back link with it:
 * when the two are neighbours (slots are handed out, and mostly freed, in
 * address order), their lines go to the undo log as one record, not two. */
static void log_pair(struct kura_fs *fs, uint64_t ino, uint64_t other)
{
	if (other == ino + 1 || other + 1 == ino)
		tx_prepare(&fs->tx, ino_off(other < ino ? other : ino), 2 * INODE_SIZE);
}

int inode_alloc(struct kura_fs *fs, mode_t mode, uint64_t *out)
{
	if (!fs_state(fs)->inode_free && refill_slots(fs))
		return fs->tx.err;
	uint64_t ino = fs_state(fs)->inode_free;
	if (!slot_valid(fs, ino))
		return -EUCLEAN;
	const struct kura_inode *slot = slot_at(fs, ino);
	if (slot->mode || slot->prev)
		return -EUCLEAN; /* free list points at a live inode, or its head is not one */
	if (slot->link && (!slot_valid(fs, slot->link) || slot_at(fs, slot->link)->prev != ino))
		return -EUCLEAN;
	log_pair(fs, ino, slot->link);
	slot_unlink(fs, ino);
	const struct kura_creds *c = creds_of(fs);
	struct kura_inode n = { .mode = mode, .nlink = 1, .uid = c->fsuid, .gid = c->fsgid };
	n.ctime = fs->op_time;
	n.atime = n.mtime = n.ctime;
	n.generation = (uint32_t)fs_state(fs)->next_generation;
	tx_write64(&fs->tx, STATE_OFF(next_generation), fs_state(fs)->next_generation + 1);
	tx_write(&fs->tx, ino_off(ino), &n, sizeof n);
	count_type(fs, mode, +1);
	*out = ino;
	return fs->tx.err;
}

/* Whether the slot next to ino on either side within its block holds an
 * inode.  Files made together are deleted together, in the order made or
 * the reverse, so a block still in use nearly always shows it right beside
 * the slot just freed, sparing the walk over all 32 of them. */
static int neighbour_in_use(const struct kura_fs *fs, uint64_t ino)
{
	unsigned at = (unsigned)(ino % INODES_PER_BLOCK);
	return (at + 1 < INODES_PER_BLOCK && slot_at(fs, ino + 1)->mode) || (at > 0 && slot_at(fs, ino - 1)->mode);
}

int inode_block_reclaim(struct kura_fs *fs, uint64_t block, uint64_t freed)
{
	uint64_t first = block_off(block) >> INODE_SHIFT;
	if (freed && neighbour_in_use(fs, freed))
		return 0;
	/* Every slot free and properly linked; and some free slot elsewhere,
	 * so a create right after a delete does not carve a new block (the
	 * list is walked at most one block's length to find one). */
	for (unsigned i = 0; i < INODES_PER_BLOCK; i++)
		if (!slot_linked(fs, first + i))
			return 0;
	uint64_t ino = fs_state(fs)->inode_free;
	unsigned steps = 0;
	while (ino >= first && ino < first + INODES_PER_BLOCK && steps++ <= INODES_PER_BLOCK)
		ino = slot_at(fs, ino)->link;
	if (!ino || steps > INODES_PER_BLOCK)
		return 0;
	/* The slots leave the list a run at a time: a run of them adjacent in
	 * the list is bridged by its outside neighbours alone, since the
	 * slots themselves go with the block.  Slots freed one after another
	 * form one run, so this is two writes, not two per slot. */
	for (unsigned i = 0; i < INODES_PER_BLOCK; i++) {
		const struct kura_inode *s = slot_at(fs, first + i);
		if (s->prev >= first && s->prev < first + INODES_PER_BLOCK)
			continue; /* inside a run that starts at another slot */
		uint64_t end = first + i;
		/* slot_linked vouched for every link: a run ends within 32 steps */
		for (unsigned n = 0; n < INODES_PER_BLOCK; n++) {
			uint64_t next = slot_at(fs, end)->link;
			if (next < first || next >= first + INODES_PER_BLOCK)
				break;
			end = next;
		}
		bridge(fs, s->prev, slot_at(fs, end)->link);
	}
	alloc_free(fs, block);
	return 1;
}

/* Format 1 to 2: the free list gains its back links, from *cursor (0: the
 * head) for at most max slots in the open transaction.  *cursor is where
 * the next call goes on, 0 when the list is done; *prev carries over. */
int inode_link_back(struct kura_fs *fs, uint64_t *cursor, uint64_t *prev, uint64_t max)
{
	uint64_t ino = *cursor ? *cursor : fs_state(fs)->inode_free;
	for (uint64_t n = 0; ino && n < max; n++) {
		if (!slot_valid(fs, ino) || slot_at(fs, ino)->mode)
			return -EUCLEAN; /* a broken list: fsck's to judge */
		tx_write64(&fs->tx, INO_FIELD_OFF(ino, prev), *prev);
		*prev = ino;
		ino = slot_at(fs, ino)->link;
	}
	*cursor = ino;
	return fs->tx.err;
}

void inode_free(struct kura_fs *fs, uint64_t ino)
{
	const struct kura_inode *ip = ino_get(fs, ino);
	if (!ip)
		return;
	mode_t mode = ip->mode;
	bmap_free_range(fs, ino, 0, UINT64_MAX);
	uint64_t head = fs_state(fs)->inode_free;
	log_pair(fs, ino, head);
	struct kura_inode z = { .link = head };
	tx_write(&fs->tx, ino_off(ino), &z, sizeof z);
	if (slot_valid(fs, head))
		tx_write64(&fs->tx, INO_FIELD_OFF(head, prev), ino);
	tx_write64(&fs->tx, STATE_OFF(inode_free), ino);
	count_type(fs, mode, -1);
	/* The slot's own block may now be empty; and a block kept empty because
	 * its slots were the only free ones (then the old head is one of them)
	 * is not needed any more.  So an empty inode block only ever exists
	 * holding every free slot, which fsck checks. */
	uint64_t own = ino_off(ino) >> KURA_BLOCK_SHIFT;
	inode_block_reclaim(fs, own, ino);
	if (slot_valid(fs, head) && ino_off(head) >> KURA_BLOCK_SHIFT != own)
		inode_block_reclaim(fs, ino_off(head) >> KURA_BLOCK_SHIFT, 0);
}

void orphan_add(struct kura_fs *fs, uint64_t ino)
{
	INO_SET(fs, ino, link, fs_state(fs)->orphans);
	tx_write64(&fs->tx, STATE_OFF(orphans), ino);
	tx_write64(&fs->tx, STATE_OFF(norphans), fs_state(fs)->norphans + 1);
}

void orphan_remove(struct kura_fs *fs, uint64_t ino)
{
	uint64_t slot = STATE_OFF(orphans);
	/* The counter is the pool's word: a cycle with a huge count must not
	 * loop longer than there are inode slots. */
	uint64_t limit = fs->nblocks << (KURA_BLOCK_SHIFT - INODE_SHIFT);
	for (uint64_t n = 0, cur = fs_state(fs)->orphans; cur && n <= fs_state(fs)->norphans && n < limit; n++) {
		const struct kura_inode *ip = ino_get(fs, cur);
		if (!ip)
			break;
		if (cur == ino) {
			tx_write64(&fs->tx, slot, ip->link);
			tx_write64(&fs->tx, STATE_OFF(norphans), fs_state(fs)->norphans - 1);
			return;
		}
		slot = INO_FIELD_OFF(cur, link);
		cur = ip->link;
	}
}

void inode_touch(struct kura_fs *fs, uint64_t ino, int which)
{
	struct kura_ts now = fs->op_time;
	if (which & TOUCH_A)
		INO_SET(fs, ino, atime, now);
	if (which & TOUCH_M)
		INO_SET(fs, ino, mtime, now);
	if (which & TOUCH_C)
		INO_SET(fs, ino, ctime, now);
}

void inode_count_entries(struct kura_fs *fs, uint64_t dino, int delta)
{
	/* The fields from mtime to entries, one write: the lines they straddle
	 * go to the undo log as one record, where a store each (entries, then
	 * the times the caller sets) took one record a line. */
	enum { FROM = offsetof(struct kura_inode, mtime), TO = offsetof(struct kura_inode, entries) + 8 };
	const struct kura_inode *ip = media_ptr(&fs->m, ino_off(dino));
	struct kura_inode n;
	memcpy((char *)&n + FROM, (const char *)ip + FROM, TO - FROM);
	n.mtime = n.ctime = fs->op_time;
	n.entries = ip->entries + (uint64_t)(int64_t)delta;
	tx_write(&fs->tx, ino_off(dino) + FROM, (const char *)&n + FROM, TO - FROM);
}

void inode_to_stat(const struct kura_fs *fs, uint64_t ino, const struct kura_inode *ip, struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_dev = 0x6b757261; /* "kura": constant, so tools comparing st_dev see one file system */
	st->st_ino = ino;
	st->st_mode = ip->mode;
	st->st_nlink = ip->nlink;
	st->st_uid = ip->uid;
	st->st_gid = ip->gid;
	st->st_size = (off_t)ip->size;
	st->st_blksize = KURA_BLOCK;
	st->st_blocks = (blkcnt_t)(ip->blocks * (KURA_BLOCK / 512));
	st->st_atim.tv_sec = ip->atime.sec;
	st->st_atim.tv_nsec = ip->atime.nsec;
	st->st_mtim.tv_sec = ip->mtime.sec;
	st->st_mtim.tv_nsec = ip->mtime.nsec;
	st->st_ctim.tv_sec = ip->ctime.sec;
	st->st_ctim.tv_nsec = ip->ctime.nsec;
	if (S_ISCHR(ip->mode) || S_ISBLK(ip->mode))
		st->st_rdev = (dev_t)ip->parent;
	(void)fs;
}

/* ---- data ------------------------------------------------------------- */

ssize_t inode_read(const struct kura_fs *fs, const struct kura_inode *ip, void *buf, size_t len, uint64_t off)
{
	uint64_t size = ip->size;
	if (off >= size)
		return 0;
	if (len > size - off)
		len = (size_t)(size - off);
	size_t done = 0;
	while (done < len) {
		uint64_t pos = off + done;
		size_t in = pos & (KURA_BLOCK - 1);
		size_t n = KURA_BLOCK - in < len - done ? KURA_BLOCK - in : len - done;
		uint64_t b = bmap_get(fs, ip, pos >> KURA_BLOCK_SHIFT);
		if (b)
			memcpy((char *)buf + done, (const char *)block_ptr(fs, b) + in, n);
		else
			memset((char *)buf + done, 0, n);
		done += n;
	}
	return (ssize_t)len;
}

/* The block a write fills in place of an unwritten one.  A disk pool in
 * fsync mode writes a block that was in use at the last checkpoint twice
 * (journal, then home), and fallocate's blocks often were: fio and RocksDB
 * fallocate files before writing them, and a checkpoint in between (the
 * journal full of other changes) made fio's 512 MiB sequential write cross
 * the disk twice as 256 MiB.  So a cheap block is taken instead when one
 * is near, and bmap_set frees the unwritten one.  Where none is, or a map
 * may show the file's blocks, the unwritten block itself: a write into
 * space fallocate reserved never fails for room. */
static uint64_t take_for_unwritten(struct kura_fs *fs, const struct kura_inode *ip, uint64_t fb, uint64_t e, int mapped)
{
	uint64_t own = e & ~BMAP_UNWRITTEN, nb = 0;
	if (!mapped && !tx_block_cheap(&fs->tx, own))
		nb = alloc_cheap_block(fs, ALLOC_FILLED);
	return nb || fs->tx.err ? nb : bmap_take_unwritten(fs, ip, fb, e);
}

ssize_t inode_write(struct kura_fs *fs, uint64_t ino, const void *buf, size_t len, uint64_t off)
{
	struct tx *t = &fs->tx;
	const struct kura_inode *ip = media_ptr(&fs->m, ino_off(ino));
	if (off > KURA_MAX_FILE_SIZE || len > KURA_MAX_FILE_SIZE - off)
		return -EFBIG;
	if (!len)
		return 0;
	if (kura_fault == FAULT_SIZE_BEFORE_DATA && off + len > ip->size) /* injected bug (crash tests only) */
		media_store64(&fs->m, INO_FIELD_OFF(ino, size), off + len), media_persist(&fs->m, INO_FIELD_OFF(ino, size), 8);
	/* A block some process maps is what its map shows: it is overwritten
	 * in place (under the log) rather than replaced.  Any other block
	 * overwritten whole is replaced, even one the disk has not seen yet
	 * (fsync mode), which in place would cost nothing on the disk: its
	 * undo snapshot reads the old 4 KiB, rarely in the cache, and so costs
	 * more than the fresh block, which reuse_recent takes from the blocks
	 * the last write gave back, so that the pending set does not grow.
	 * bench-durable's 4 KiB random writes without fsync on a 64 MiB file:
	 * 1.09x ext4 in place, 1.39x replaced (medians of 3). */
	int mapped = inode_mapped(fs, ino);
	/* Whole fresh blocks that lie side by side are filled in one copy
	 * when the loop moves on: on memory that is one write of the pool
	 * file, not one a block.  Nothing in between reads them. */
	uint64_t run_off = 0;
	const char *run_src = NULL;
	size_t run_len = 0, done = 0;
	while (done < len && !t->err) {
		uint64_t pos = off + done;
		size_t in = pos & (KURA_BLOCK - 1);
		size_t n = KURA_BLOCK - in < len - done ? KURA_BLOCK - in : len - done;
		uint64_t fb = pos >> KURA_BLOCK_SHIFT;
		uint64_t e = bmap_entry(fs, ip, fb), b = e & BMAP_UNWRITTEN ? 0 : e;
		const char *src = (const char *)buf + done;
		if (b && (n < KURA_BLOCK || mapped)) {
			tx_write(t, block_off(b) + in, src, n);
		} else {
			/* New block, an unwritten one, or a whole-block overwrite:
			 * fill a fresh block and swap the map entry. */
			uint64_t nb = b ? alloc_block(fs, 0) : e ? take_for_unwritten(fs, ip, fb, e, mapped) : bmap_alloc(fs, ip, fb, 0);
			if (!nb)
				break;
			if (n == KURA_BLOCK) {
				if (run_len && block_off(nb) == run_off + run_len && src == run_src + run_len) {
					run_len += KURA_BLOCK;
				} else {
					tx_copy_fresh(t, run_off, run_src, run_len);
					run_off = block_off(nb), run_src = src, run_len = KURA_BLOCK;
				}
			} else {
				/* The small writes that follow will store the rest
				 * through the map. */
				char tmp[KURA_BLOCK];
				memset(tmp, 0, sizeof tmp);
				memcpy(tmp + in, src, n);
				media_warm(&fs->m, block_off(nb));
				tx_copy_fresh(t, block_off(nb), tmp, KURA_BLOCK);
			}
			uint64_t old = bmap_set(fs, ino, fb, nb);
			if (old)
				alloc_free(fs, old);
		}
		done += n;
	}
	tx_copy_fresh(t, run_off, run_src, run_len);
	if (t->err)
		return t->err;
	if (off + len > ip->size)
		INO_SET(fs, ino, size, off + len);
	inode_touch(fs, ino, TOUCH_M | TOUCH_C);
	return t->err ? t->err : (ssize_t)len;
}

/* Zeroes [from, to) inside one block, if that block is mapped. */
static void zero_in_block(struct kura_fs *fs, uint64_t ino, uint64_t from, uint64_t to)
{
	const struct kura_inode *ip = media_ptr(&fs->m, ino_off(ino));
	if (from >= to)
		return;
	uint64_t b = bmap_get(fs, ip, from >> KURA_BLOCK_SHIFT);
	if (b)
		tx_memset(&fs->tx, block_off(b) + (from & (KURA_BLOCK - 1)), 0, to - from);
}

int inode_truncate(struct kura_fs *fs, uint64_t ino, uint64_t size)
{
	const struct kura_inode *ip = media_ptr(&fs->m, ino_off(ino));
	if (size > KURA_MAX_FILE_SIZE)
		return -EFBIG;
	uint64_t old = ip->size;
	if (size < old) {
		/* Keep the invariant: bytes past EOF in a mapped block are zero. */
		uint64_t block_end = (size + KURA_BLOCK - 1) & ~(uint64_t)(KURA_BLOCK - 1);
		zero_in_block(fs, ino, size, block_end < old ? block_end : old);
		mapped_release(fs, ino, block_end >> KURA_BLOCK_SHIFT, UINT64_MAX);
	}
	if (size != old)
		INO_SET(fs, ino, size, size);
	inode_touch(fs, ino, TOUCH_M | TOUCH_C);
	return fs->tx.err;
}

static void punch(struct kura_fs *fs, uint64_t ino, uint64_t off, uint64_t end)
{
	const struct kura_inode *ip = media_ptr(&fs->m, ino_off(ino));
	uint64_t first_full = (off + KURA_BLOCK - 1) >> KURA_BLOCK_SHIFT;
	uint64_t last_full = end >> KURA_BLOCK_SHIFT;
	if (first_full > last_full) { /* inside one block */
		zero_in_block(fs, ino, off, end);
		return;
	}
	if (inode_mapped(fs, ino)) { /* a map must see the zeros: they go in place */
		for (uint64_t pos = off; pos < end && !fs->tx.err; pos = (pos | (KURA_BLOCK - 1)) + 1) {
			uint64_t stop = (pos | (KURA_BLOCK - 1)) + 1;
			zero_in_block(fs, ino, pos, stop < end ? stop : end);
		}
		return;
	}
	zero_in_block(fs, ino, off, first_full << KURA_BLOCK_SHIFT);
	zero_in_block(fs, ino, last_full << KURA_BLOCK_SHIFT, end);
	bmap_free_range(fs, ino, first_full, last_full);
	(void)ip;
}

int inode_fallocate(struct kura_fs *fs, uint64_t ino, int mode, uint64_t off, uint64_t len)
{
	const struct kura_inode *ip = media_ptr(&fs->m, ino_off(ino));
	if (off > KURA_MAX_FILE_SIZE || len > KURA_MAX_FILE_SIZE - off)
		return -EFBIG;
	uint64_t end = off + len;
	int keep = mode & FALLOC_FL_KEEP_SIZE;
	int grow = !keep && end > ip->size; /* ip reads the pool, which the size update below changes */
	if (mode & FALLOC_FL_PUNCH_HOLE) {
		uint64_t size = ip->size;
		if (off < size)
			punch(fs, ino, off, end < size ? end : size);
	} else {
		/* ZERO_RANGE: the range's bytes go, its space stays (Linux
		 * keeps or makes the blocks; so does ext4 here, unwritten). */
		uint64_t size = ip->size;
		if ((mode & FALLOC_FL_ZERO_RANGE) && off < size)
			punch(fs, ino, off, end < size ? end : size);
		/* Space without bytes: unwritten blocks (layout.h), neither
		 * zeroed nor journaled, as many as the range needs.  Block 0
		 * of a file with no tree is the tree's root, never unwritten:
		 * it is zeroed instead. */
		int marked = 0;
		for (uint64_t fb = off >> KURA_BLOCK_SHIFT; fb < (end + KURA_BLOCK - 1) >> KURA_BLOCK_SHIFT && !fs->tx.err;
		     fb++) {
			if (bmap_entry(fs, ip, fb))
				continue;
			int as_root = fb == 0 && ip->height == 0;
			uint64_t nb = bmap_alloc(fs, ip, fb, as_root ? ALLOC_ZEROED_DATA : ALLOC_UNWRITTEN);
			if (!nb)
				break;
			if (!as_root && !marked++)
				super_mark_version(fs, KURA_VERSION);
			bmap_set(fs, ino, fb, as_root ? nb : nb | BMAP_UNWRITTEN);
		}
	}
	if (grow)
		INO_SET(fs, ino, size, end);
	inode_touch(fs, ino, TOUCH_M | TOUCH_C); /* Linux's file_modified, whatever the mode */
	return fs->tx.err;
}
