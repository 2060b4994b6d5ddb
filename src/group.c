/* group.c — atomic groups of writes (see group.h for the design). */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <string.h>
#include "alloc.h"
#include "api.h"
#include "fault.h"
#include "group.h"
#include "inode.h"
#include "mapped.h"
#include "super.h"
#include "xattr.h"

/* A commit moves every shadow block in one transaction, which must fit the
 * log: each moved block changes up to three 64-byte lines (the file's map
 * entry, the shadow's, a bitmap word), an 88-byte record each in the worst
 * case.  So a group may hold one block per 512 bytes of log; past that
 * the write that would overflow fails with ENOSPC and the group stays as it
 * was, still abortable or committable. */
static uint64_t group_max_blocks(const struct kura_fs *fs)
{
	return fs->sb->log_blocks * KURA_BLOCK / 512;
}

const struct kura_inode *group_shadow(const struct kura_fs *fs, const struct ofile *of)
{
	const struct kura_inode *sp = ino_get(fs, __atomic_load_n(&of->group_ino, __ATOMIC_ACQUIRE));
	return sp && sp->generation == of->group_gen && sp->nlink == 0 && S_ISREG(sp->mode) ? sp : NULL;
}

/* The view's bytes [off, off + n) of file block fb (within one block). */
static void view_block(const struct kura_fs *fs, const struct kura_inode *ip, const struct kura_inode *sp,
		       uint64_t cut, uint64_t fb, char *dst, size_t in, size_t n)
{
	uint64_t sb = bmap_get(fs, sp, fb);
	if (sb) {
		memcpy(dst, (const char *)block_ptr(fs, sb) + in, n);
		return;
	}
	uint64_t pos = (fb << KURA_BLOCK_SHIFT) + in;
	size_t below = pos >= cut ? 0 : cut - pos < n ? (size_t)(cut - pos) : n;
	uint64_t ob = below && ip ? bmap_get(fs, ip, fb) : 0;
	if (ob)
		memcpy(dst, (const char *)block_ptr(fs, ob) + in, below);
	else
		below = 0;
	memset(dst + below, 0, n - below);
}

ssize_t group_read(const struct kura_fs *fs, const struct ofile *of, void *buf, size_t len, uint64_t off)
{
	const struct kura_inode *sp = group_shadow(fs, of), *ip = ino_get(fs, of->ino);
	if (!sp || !ip)
		return -EBADF;
	uint64_t size = sp->size, cut = of->group_cut;
	if (off >= size)
		return 0;
	if (len > size - off)
		len = (size_t)(size - off);
	for (size_t done = 0; done < len;) {
		uint64_t pos = off + done;
		size_t in = pos & (KURA_BLOCK - 1);
		size_t n = KURA_BLOCK - in < len - done ? KURA_BLOCK - in : len - done;
		view_block(fs, ip, sp, cut, pos >> KURA_BLOCK_SHIFT, (char *)buf + done, in, n);
		done += n;
	}
	return (ssize_t)len;
}

int64_t group_size(const struct kura_fs *fs, const struct ofile *of)
{
	const struct kura_inode *sp = group_shadow(fs, of);
	return sp ? (int64_t)sp->size : -EBADF;
}

/* Gives the shadow its own copy of file block fb as the view shows it, so
 * that a write to part of the block keeps the rest.  Nothing to copy if the
 * shadow has it already or the view shows zeros there, unless always (a
 * map's page needs a block to show).  Returns the shadow's block. */
/* Widens the range of file blocks the shadow may hold; called before any
 * block goes into it.  A wider range than the blocks only costs lookups. */
static void group_touch(struct ofile *of, uint64_t first, uint64_t last)
{
	if (first < of->group_lo)
		of->group_lo = first;
	if (last > of->group_hi)
		of->group_hi = last;
}

static uint64_t copy_up(struct kura_fs *fs, struct ofile *of, uint64_t fb, int always)
{
	const struct kura_inode *sp = media_ptr(&fs->m, ino_off(of->group_ino)), *ip = ino_get(fs, of->ino);
	uint64_t have = bmap_get(fs, sp, fb);
	if (have)
		return have;
	if (!always && ((fb << KURA_BLOCK_SHIFT) >= of->group_cut || !ip || !bmap_get(fs, ip, fb)))
		return 0;
	uint64_t nb = alloc_block(fs, 0);
	if (!nb)
		return 0;
	group_touch(of, fb, fb);
	char tmp[KURA_BLOCK];
	view_block(fs, ip, sp, of->group_cut, fb, tmp, 0, KURA_BLOCK);
	tx_copy_fresh(&fs->tx, block_off(nb), tmp, KURA_BLOCK);
	bmap_set(fs, of->group_ino, fb, nb);
	return fs->tx.err ? 0 : nb;
}

static int check_room(struct kura_fs *fs, const struct ofile *of)
{
	const struct kura_inode *sp = media_ptr(&fs->m, ino_off(of->group_ino));
	if (!fs->tx.err && sp->blocks > group_max_blocks(fs))
		tx_fail(&fs->tx, -ENOSPC);
	return fs->tx.err;
}

ssize_t group_write(struct kura_fs *fs, struct ofile *of, const void *buf, size_t len, uint64_t off)
{
	if (!group_shadow(fs, of))
		return -EBADF;
	if (off > KURA_MAX_FILE_SIZE || len > KURA_MAX_FILE_SIZE - off)
		return -EFBIG;
	uint64_t first = off >> KURA_BLOCK_SHIFT, last = (off + len - 1) >> KURA_BLOCK_SHIFT;
	if (off & (KURA_BLOCK - 1))
		copy_up(fs, of, first, 0);
	if (((off + len) & (KURA_BLOCK - 1)) && (last != first || !(off & (KURA_BLOCK - 1))))
		copy_up(fs, of, last, 0);
	if (fs->tx.err)
		return fs->tx.err;
	group_touch(of, first, last);
	ssize_t n = inode_write(fs, of->group_ino, buf, len, off);
	return n < 0 ? n : check_room(fs, of) ? fs->tx.err : n;
}

int group_truncate(struct kura_fs *fs, struct ofile *of, uint64_t size)
{
	const struct kura_inode *sp = group_shadow(fs, of);
	if (!sp)
		return -EBADF;
	if (size > KURA_MAX_FILE_SIZE)
		return -EFBIG;
	if (size < sp->size) {
		/* The block the new end falls in keeps its head: copied before the
		 * cut moves below it, then cut by the shadow's own truncation. */
		if (size & (KURA_BLOCK - 1))
			copy_up(fs, of, size >> KURA_BLOCK_SHIFT, 0);
		if (size < of->group_cut)
			of->group_cut = size;
	}
	int err = fs->tx.err ? fs->tx.err : inode_truncate(fs, of->group_ino, size);
	return err ? err : check_room(fs, of);
}

int group_fallocate(struct kura_fs *fs, struct ofile *of, int mode, uint64_t off, uint64_t len)
{
	const struct kura_inode *sp = group_shadow(fs, of);
	if (!sp)
		return -EBADF;
	if (off > KURA_MAX_FILE_SIZE || len > KURA_MAX_FILE_SIZE - off)
		return -EFBIG;
	uint64_t end = off + len, size = sp->size;
	if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
		/* The view's bytes become zeros: written as zeros into the
		 * shadow, since a hole there shows the file's bytes. */
		static const char zeros[KURA_BLOCK];
		for (uint64_t pos = off; pos < end && pos < size && !fs->tx.err;) {
			uint64_t stop = (pos | (KURA_BLOCK - 1)) + 1;
			if (stop > end)
				stop = end;
			if (stop > size)
				stop = size;
			ssize_t n = group_write(fs, of, zeros, (size_t)(stop - pos), pos);
			if (n < 0)
				return (int)n;
			pos = stop;
		}
	}
	/* Space is not reserved ahead for a group: its blocks are taken as
	 * it writes them.  What fallocate changes in the view is the size. */
	if (!(mode & FALLOC_FL_KEEP_SIZE) && end > size)
		INO_SET(fs, of->group_ino, size, end);
	return fs->tx.err ? fs->tx.err : check_room(fs, of);
}

/* A shadow some process maps (its pages show the group's blocks) stays an
 * orphan until the last unpin frees it (kura_map_unpin), so no block a
 * map shows is reused. */
static void drop_shadow(struct kura_fs *fs, uint64_t shadow)
{
	if (lock_maps(&fs->lk, shadow))
		return;
	orphan_remove(fs, shadow);
	inode_dispose(fs, shadow);
}

/* A committed group's shadow is kept as its description's spare when it
 * can be emptied cheaply: no map shows its pages (a pin would keep its
 * blocks), and what is left after the commit moved its data blocks out is
 * a few map nodes, which the next group then uses again instead of
 * allocating and zeroing its own.  Decided before the commit's blocks go,
 * so that a block copied in place is freed from a kept shadow at once. */
#define SPARE_MAX_NODES 4

static int may_keep(const struct kura_fs *fs, uint64_t shadow)
{
	return !lock_maps(&fs->lk, shadow) && !lock_open_count(&fs->lk, shadow);
}

/* In a transaction: the spare of of, taken off the description, if it is
 * still the orphan it was (its generation checked) and fit to use again;
 * one that is not fit goes.  0 if none. */
static uint64_t take_spare(struct kura_fs *fs, struct ofile *of)
{
	uint64_t ino = of->spare_ino;
	if (!ino)
		return 0;
	__atomic_store_n(&of->spare_ino, 0, __ATOMIC_RELEASE);
	const struct kura_inode *sp = ino_get(fs, ino);
	if (!sp || sp->generation != of->spare_gen || sp->nlink || !S_ISREG(sp->mode))
		return 0;
	if (sp->blocks <= SPARE_MAX_NODES && may_keep(fs, ino))
		return ino;
	drop_shadow(fs, ino);
	return 0;
}

void group_discard(struct kura_fs *fs, uint64_t ino, uint32_t gen)
{
	const struct kura_inode *sp = ino_get(fs, ino);
	if (!sp || sp->generation != gen || sp->nlink || !S_ISREG(sp->mode) || lock_open_count(&fs->lk, ino))
		return;
	drop_shadow(fs, ino);
}

/* ---- the API -------------------------------------------------------------- */

/* The description behind fd, with a transaction open, for a group call. */
static int group_enter(struct kura_fs *fs, int fd, struct ofile **out)
{
	if (fs->read_only)
		return -EROFS;
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	int err = fs_begin(fs);
	if (err) {
		ofile_put(fs, of);
		return err;
	}
	*out = of;
	return 0;
}

int kura_atomic_begin(kura_fs *fs, int fd)
{
	return kura_atomic_begin_retiring(fs, fd, 0);
}

int kura_atomic_begin_retiring(kura_fs *fs, int fd, uint64_t retired)
{
	struct ofile *of;
	int err = group_enter(fs, fd, &of);
	if (err)
		return err;
	/* Whatever becomes of the new group, the old shadow's pin goes. */
	if (retired && lock_maps(&fs->lk, retired))
		mapped_unpin(fs, retired);
	const struct kura_inode *ip = ino_get(fs, of->ino);
	uint64_t shadow = 0, spare = 0;
	if (!ip)
		err = -EBADF;
	else if ((of->flags & O_ACCMODE) == O_RDONLY)
		err = -EBADF;
	else if (!S_ISREG(ip->mode))
		err = -EINVAL;
	else if (group_open(of))
		err = -EBUSY;
	else if (!(shadow = spare = take_spare(fs, of)) && !(err = inode_alloc(fs, S_IFREG | 0600, &shadow))) {
		INO_SET(fs, shadow, nlink, 0);
		orphan_add(fs, shadow);
	}
	if (!err) {
		uint64_t size = ip->size;
		INO_SET(fs, shadow, size, size);
		err = fs->tx.err;
		if (!err) {
			of->group_cut = size;
			of->group_lo = UINT64_MAX; /* above hi: no block yet */
			of->group_hi = 0;
			of->group_gen = ino_get(fs, shadow)->generation;
			__atomic_store_n(&of->group_ino, shadow, __ATOMIC_RELEASE);
		}
	}
	err = fs_end(fs, err);
	if (err && shadow) {
		/* Rolled back: a new shadow with the transaction that made it,
		 * a spare to the description. */
		__atomic_store_n(&of->group_ino, 0, __ATOMIC_RELEASE);
		if (spare)
			__atomic_store_n(&of->spare_ino, spare, __ATOMIC_RELEASE);
	}
	ofile_put(fs, of);
	return err;
}

/* The first file block >= fb that the shadow holds, or UINT64_MAX. */
static uint64_t next_shadow_block(const struct kura_fs *fs, const struct ofile *of, const struct kura_inode *sp,
				  uint64_t fb)
{
	if (fb > of->group_hi)
		return UINT64_MAX;
	if (bmap_get(fs, sp, fb))
		return fb;
	uint64_t next = bmap_next_data(fs, sp, fb);
	return next <= of->group_hi ? next : UINT64_MAX;
}

/* Moves the shadow's blocks into the file, in the caller's transaction.
 * A block some other process maps is copied in place instead (its map
 * shows the file's block), and so is every block when the caller's maps
 * show the shadow's (stores joined the group); own_pins are the caller's
 * maps of the file.  Returns 1 if it copied any block in place, 0 if it
 * moved them all. */
int group_apply(struct kura_fs *fs, struct ofile *of, const struct kura_inode *sp, uint64_t own_pins)
{
	uint64_t ino = of->ino, shadow = of->group_ino;
	const struct kura_inode *ip = ino_get(fs, ino);
	if (!ip)
		return -EBADF;
	kill_privs(fs, ino, ip);
	/* The block the cut falls in is about to be replaced whole if the
	 * shadow holds it: zeroing its tail in place first would only fill
	 * the commit's record. */
	uint64_t cut = of->group_cut;
	if ((cut & (KURA_BLOCK - 1)) && bmap_get(fs, sp, cut >> KURA_BLOCK_SHIFT))
		cut = (cut | (KURA_BLOCK - 1)) + 1;
	if (cut < ip->size)
		inode_truncate(fs, ino, cut);
	/* Stores through maps changed the shadow's blocks outside any
	 * transaction: the commit makes them durable with the rest. */
	int stored = lock_maps(&fs->lk, shadow) != 0;
	/* They may have reached the last block past the view's end; a file's
	 * bytes past its end are zero (inode.h), as the shadow's own writes
	 * and truncations keep its bytes. */
	uint64_t tail = sp->size & (KURA_BLOCK - 1), last = bmap_get(fs, sp, sp->size >> KURA_BLOCK_SHIFT);
	if (tail && last && stored)
		tx_memset(&fs->tx, block_off(last) + tail, 0, KURA_BLOCK - tail);
	int mapped = lock_maps(&fs->lk, ino) > own_pins, copied = 0, keep = !stored && may_keep(fs, shadow);
	uint64_t room = tx_in_place_room(&fs->tx);
	uint64_t budget = sp->blocks + 1; /* a damaged map must not loop */
	for (uint64_t fb = next_shadow_block(fs, of, sp, of->group_lo); fb != UINT64_MAX && budget && !fs->tx.err;
	     fb = next_shadow_block(fs, of, sp, fb + 1), budget--) {
		uint64_t sb = bmap_get(fs, sp, fb), ob = bmap_get(fs, ip, fb);
		if (!sb)
			break;
		/* Maps show the file's block itself: the bytes go there.  So
		 * do the caller's own map stores, as far as the transaction
		 * has room: its pages then show the file's blocks again, in
		 * runs the kernel can keep as one mapping, where moved blocks
		 * scatter them, a mapping each. */
		if (ob && (mapped || (stored && room >= KURA_BLOCK))) {
			tx_write(&fs->tx, block_off(ob), block_ptr(fs, sb), KURA_BLOCK);
			room = room > KURA_BLOCK ? room - KURA_BLOCK : 0;
			copied = 1;
			/* Its bytes are the file's block's now: the shadow's copy
			 * of them (written when the group took the page) need not
			 * reach the disk, which halves what a seal writes for a
			 * map's group.  Forgotten even if this commit fails: a
			 * block is re-noted below whenever it moves instead. */
			tx_forget_contents(&fs->tx, sb);
			if (keep) {
				bmap_set(fs, shadow, fb, 0);
				alloc_free(fs, sb);
			}
			continue;
		}
		/* Stores through a map changed it outside any transaction, and a
		 * failed commit before this one may have forgotten its bytes. */
		if (stored || tx_has_cheap_blocks(&fs->tx))
			tx_note_changed(&fs->tx, block_off(sb), KURA_BLOCK);
		bmap_set(fs, shadow, fb, 0);
		uint64_t old = bmap_set(fs, ino, fb, sb);
		if (old)
			alloc_free(fs, old);
		if (kura_fault == FAULT_GROUP_SPLIT_COMMIT && !fs->tx.err) { /* injected bug (crash tests only) */
			fs_end(fs, 0);
			fs_begin(fs);
		}
	}
	if (sp->size != ip->size)
		INO_SET(fs, ino, size, sp->size);
	inode_touch(fs, ino, TOUCH_M | TOUCH_C);
	if (keep && sp->blocks <= SPARE_MAX_NODES) {
		of->spare_gen = of->group_gen;
		__atomic_store_n(&of->spare_ino, shadow, __ATOMIC_RELEASE);
	} else {
		drop_shadow(fs, shadow);
	}
	return fs->tx.err ? fs->tx.err : copied;
}

int kura_atomic_commit(kura_fs *fs, int fd)
{
	int r = kura_atomic_commit_maps(fs, fd, 0);
	return r < 0 ? r : 0;
}

int kura_atomic_commit_maps(kura_fs *fs, int fd, uint64_t own_pins)
{
	struct kura_group_file file = { .fd = fd, .own_pins = own_pins };
	int err = kura_group_commit(fs, &file, 1, NULL, 0, NULL);
	return err ? err : file.copied;
}

int64_t kura_atomic_shadow(kura_fs *fs, int fd, int *sole)
{
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	int64_t shadow = (int64_t)__atomic_load_n(&of->group_ino, __ATOMIC_ACQUIRE);
	if (sole)
		*sole = __atomic_load_n(&of->refs, __ATOMIC_ACQUIRE) <= 2; /* the descriptor's and ours */
	ofile_put(fs, of);
	return shadow;
}

int kura_atomic_map_blocks(kura_fs *fs, int fd, uint64_t fblock, size_t n, int pin, uint64_t *blocks,
			   uint64_t *shadow)
{
	struct ofile *of;
	int err = group_enter(fs, fd, &of);
	if (err)
		return err;
	size_t done = 0;
	const struct kura_inode *sp = group_shadow(fs, of);
	uint64_t end = sp ? (sp->size + KURA_BLOCK - 1) >> KURA_BLOCK_SHIFT : 0;
	if (!sp)
		err = group_open(of) ? -EIO : -EINVAL;
	else if (fblock >= end || !n)
		err = -ENXIO; /* past the end: a map's page there raises SIGBUS */
	else if (pin && (err = lock_map_inc(&fs->lk, of->group_ino)))
		pin = 0;
	/* Blocks after the first are a bonus, taken only while the group and
	 * the pool have room to spare: a failure would fail the transaction,
	 * and with it the first block, which the caller needs. */
	for (; !err && done < n && fblock + done < end; done++) {
		if (done && (sp->blocks + 8 > group_max_blocks(fs) || alloc_free_for_data(fs) < 64))
			break;
		if (!(blocks[done] = copy_up(fs, of, fblock + done, 1)))
			err = fs->tx.err ? fs->tx.err : -EIO;
		else
			err = check_room(fs, of);
	}
	*shadow = of->group_ino;
	if (err && pin)
		lock_map_dec(&fs->lk, of->group_ino); /* the pin is not the transaction's to roll back */
	err = fs_end(fs, err);
	ofile_put(fs, of);
	return err ? err : (int)done;
}

int kura_atomic_map_block(kura_fs *fs, int fd, uint64_t fblock, int pin, uint64_t *block, uint64_t *shadow)
{
	int r = kura_atomic_map_blocks(fs, fd, fblock, 1, pin, block, shadow);
	return r < 0 ? r : 0;
}

int kura_atomic_unmap_blocks(kura_fs *fs, int fd, const uint64_t *fblocks, const uint64_t *blocks, size_t n)
{
	struct ofile *of;
	int err = group_enter(fs, fd, &of);
	if (err)
		return err;
	const struct kura_inode *sp = group_shadow(fs, of);
	if (!sp)
		err = group_open(of) ? -EIO : -EINVAL;
	/* No block a map may show is reused (mapped.h).  The caller's maps no
	 * longer show these; a second pin of the shadow (a forked child's
	 * maps) may, and then they stay in the group, to be committed as they
	 * are: unchanged, they change nothing the file had when they were
	 * taken. */
	if (!err && lock_maps(&fs->lk, of->group_ino) > 1)
		n = 0;
	for (size_t i = 0; !err && i < n && !fs->tx.err; i++)
		if (blocks[i] && bmap_get(fs, sp, fblocks[i]) == blocks[i]) {
			bmap_set(fs, of->group_ino, fblocks[i], 0);
			alloc_free(fs, blocks[i]);
		}
	err = fs_end(fs, err ? err : fs->tx.err);
	ofile_put(fs, of);
	return err;
}

int kura_atomic_abort(kura_fs *fs, int fd)
{
	struct ofile *of;
	int err = group_enter(fs, fd, &of);
	if (err)
		return err;
	uint64_t had = of->group_ino;
	if (had) {
		group_discard(fs, had, of->group_gen);
		__atomic_store_n(&of->group_ino, 0, __ATOMIC_RELEASE);
	}
	err = fs_end(fs, fs->tx.err);
	if (err && had)
		__atomic_store_n(&of->group_ino, had, __ATOMIC_RELEASE);
	ofile_put(fs, of);
	return err;
}
