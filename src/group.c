/* group.c — atomic groups of writes (see group.h for the design). */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <string.h>
#include "alloc.h"
#include "api.h"
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

static const struct kura_inode *shadow_of(const struct kura_fs *fs, const struct ofile *of)
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
	const struct kura_inode *sp = shadow_of(fs, of), *ip = ino_get(fs, of->ino);
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
	const struct kura_inode *sp = shadow_of(fs, of);
	return sp ? (int64_t)sp->size : -EBADF;
}

/* Gives the shadow its own copy of file block fb as the view shows it, so
 * that a write to part of the block keeps the rest.  Nothing to copy if the
 * shadow has it already or the view shows zeros there. */
static void copy_up(struct kura_fs *fs, struct ofile *of, uint64_t fb)
{
	const struct kura_inode *sp = media_ptr(&fs->m, ino_off(of->group_ino)), *ip = ino_get(fs, of->ino);
	if (bmap_get(fs, sp, fb) || (fb << KURA_BLOCK_SHIFT) >= of->group_cut || !ip || !bmap_get(fs, ip, fb))
		return;
	uint64_t nb = alloc_block(fs, 0);
	if (!nb)
		return;
	char tmp[KURA_BLOCK];
	view_block(fs, ip, sp, of->group_cut, fb, tmp, 0, KURA_BLOCK);
	tx_copy_fresh(&fs->tx, block_off(nb), tmp, KURA_BLOCK);
	bmap_set(fs, of->group_ino, fb, nb);
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
	if (!shadow_of(fs, of))
		return -EBADF;
	if (off > KURA_MAX_FILE_SIZE || len > KURA_MAX_FILE_SIZE - off)
		return -EFBIG;
	uint64_t first = off >> KURA_BLOCK_SHIFT, last = (off + len - 1) >> KURA_BLOCK_SHIFT;
	if (off & (KURA_BLOCK - 1))
		copy_up(fs, of, first);
	if (((off + len) & (KURA_BLOCK - 1)) && (last != first || !(off & (KURA_BLOCK - 1))))
		copy_up(fs, of, last);
	if (fs->tx.err)
		return fs->tx.err;
	ssize_t n = inode_write(fs, of->group_ino, buf, len, off);
	return n < 0 ? n : check_room(fs, of) ? fs->tx.err : n;
}

int group_truncate(struct kura_fs *fs, struct ofile *of, uint64_t size)
{
	const struct kura_inode *sp = shadow_of(fs, of);
	if (!sp)
		return -EBADF;
	if (size > KURA_MAX_FILE_SIZE)
		return -EFBIG;
	if (size < sp->size) {
		/* The block the new end falls in keeps its head: copied before the
		 * cut moves below it, then cut by the shadow's own truncation. */
		if (size & (KURA_BLOCK - 1))
			copy_up(fs, of, size >> KURA_BLOCK_SHIFT);
		if (size < of->group_cut)
			of->group_cut = size;
	}
	int err = fs->tx.err ? fs->tx.err : inode_truncate(fs, of->group_ino, size);
	return err ? err : check_room(fs, of);
}

int group_fallocate(struct kura_fs *fs, struct ofile *of, int mode, uint64_t off, uint64_t len)
{
	const struct kura_inode *sp = shadow_of(fs, of);
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

void group_discard(struct kura_fs *fs, uint64_t ino, uint32_t gen)
{
	const struct kura_inode *sp = ino_get(fs, ino);
	if (!sp || sp->generation != gen || sp->nlink || !S_ISREG(sp->mode) || lock_open_count(&fs->lk, ino))
		return;
	orphan_remove(fs, ino);
	inode_dispose(fs, ino);
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
	struct ofile *of;
	int err = group_enter(fs, fd, &of);
	if (err)
		return err;
	const struct kura_inode *ip = ino_get(fs, of->ino);
	uint64_t shadow = 0;
	if (!ip)
		err = -EBADF;
	else if ((of->flags & O_ACCMODE) == O_RDONLY)
		err = -EBADF;
	else if (!S_ISREG(ip->mode))
		err = -EINVAL;
	else if (group_open(of))
		err = -EBUSY;
	else
		err = inode_alloc(fs, S_IFREG | 0600, &shadow);
	if (!err) {
		uint64_t size = ip->size;
		INO_SET(fs, shadow, nlink, 0);
		INO_SET(fs, shadow, size, size);
		orphan_add(fs, shadow);
		err = fs->tx.err;
		if (!err) {
			of->group_cut = size;
			of->group_gen = ino_get(fs, shadow)->generation;
			__atomic_store_n(&of->group_ino, shadow, __ATOMIC_RELEASE);
		}
	}
	err = fs_end(fs, err);
	if (err && shadow)
		__atomic_store_n(&of->group_ino, 0, __ATOMIC_RELEASE); /* rolled back with the transaction that made it */
	ofile_put(fs, of);
	return err;
}

/* Moves the shadow's blocks into the file, in the caller's transaction. */
static int apply(struct kura_fs *fs, struct ofile *of, const struct kura_inode *sp)
{
	uint64_t ino = of->ino, shadow = of->group_ino;
	const struct kura_inode *ip = ino_get(fs, ino);
	if (!ip)
		return -EBADF;
	kill_privs(fs, ino, ip);
	if (of->group_cut < ip->size)
		inode_truncate(fs, ino, of->group_cut);
	int mapped = inode_mapped(fs, ino);
	uint64_t budget = sp->blocks + 1; /* a damaged map must not loop */
	for (uint64_t fb = bmap_next_data(fs, sp, 0); fb != UINT64_MAX && budget && !fs->tx.err;
	     fb = bmap_next_data(fs, sp, fb + 1), budget--) {
		uint64_t sb = bmap_get(fs, sp, fb), ob = bmap_get(fs, ip, fb);
		if (!sb)
			break;
		if (ob && mapped) {
			/* Maps show the file's block itself: the bytes go there. */
			tx_write(&fs->tx, block_off(ob), block_ptr(fs, sb), KURA_BLOCK);
			continue;
		}
		bmap_set(fs, shadow, fb, 0);
		uint64_t old = bmap_set(fs, ino, fb, sb);
		if (old)
			alloc_free(fs, old);
	}
	if (sp->size != ip->size)
		INO_SET(fs, ino, size, sp->size);
	inode_touch(fs, ino, TOUCH_M | TOUCH_C);
	orphan_remove(fs, shadow);
	inode_dispose(fs, shadow);
	return fs->tx.err;
}

int kura_atomic_commit(kura_fs *fs, int fd)
{
	struct ofile *of;
	int err = group_enter(fs, fd, &of);
	if (err)
		return err;
	uint64_t had = of->group_ino;
	const struct kura_inode *sp = had ? shadow_of(fs, of) : NULL;
	if (had && !sp) {
		/* Its shadow is not what the description says (a damaged pool):
		 * the group's writes are lost, which the caller must hear. */
		__atomic_store_n(&of->group_ino, 0, __ATOMIC_RELEASE);
		fs_end(fs, -EIO);
		ofile_put(fs, of);
		return -EIO;
	}
	if (sp) {
		err = apply(fs, of, sp);
		__atomic_store_n(&of->group_ino, 0, __ATOMIC_RELEASE);
	}
	err = fs_end(fs, err);
	if (err && had)
		__atomic_store_n(&of->group_ino, had, __ATOMIC_RELEASE); /* rolled back: still open, abortable */
	ofile_put(fs, of);
	return err ? err : fs_sync(fs);
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
