/* journal.c — the file back end's journal on the disk: its format and the
 * working copy (see journal.h and journal_int.h; recovery is
 * journal_recover.c's). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "crc.h"
#include "fault.h"
#include "journal_int.h"
#include "tx.h"

uint64_t kura_journal_cap;
int journal_replayed;
uint64_t kura_write_behind_step;

#define JCTL_MAGIC 0x3454434a4152554bull /* "KURAJCT4" */
/* The head is written in one of two slots, by epoch, a sector apart: a
 * head torn by a crash leaves the other slot's, whose records replay onto
 * homes that already hold them, which redo records allow (see checkpoint). */
#define HEAD_SLOT_SPAN 2048u

static uint64_t round_block(uint64_t n)
{
	return (n + KURA_BLOCK - 1) & ~(uint64_t)(KURA_BLOCK - 1);
}

uint64_t journal_ctl_off(uint64_t pool_size)
{
	return pool_size;
}

/* After the control block: the dirty map, the journaled map, the
 * checkpoint's bitmap, the blocks writable maps show and those written
 * behind (a bit per block each), the pending masks (a word per
 * block; shared memory is sparse, so an untouched stretch costs nothing) and
 * the pending list, then the copy's undo log. */
static uint64_t map_size(const struct kura_super *sb)
{
	return round_block((sb->nblocks + 63) / 64 * 8);
}

static uint64_t pend_max(const struct kura_super *sb)
{
	/* Bounds the blocks changed and not yet sealed when nothing syncs them
	 * sooner (the 5 s age bounds the time they wait).  A seal pays for
	 * each block it cannot find written behind (journal_write_behind)
	 * and for each rewrite since: a block once sealed is journaled, so
	 * its next rewrite takes a fresh block, which the next seal writes.
	 * At 256 MiB, a program rewriting 4 KiB blocks of a 256 MiB file at
	 * random, with no fsync, sealed every 65,536 writes, each seal taking
	 * every block again: 95,000 writes a second, against 725,000 at 1 GiB,
	 * where ext4 wrote nothing until its 30 s expiry.  Below the 10% of
	 * memory (2.4 GiB here) the kernel lets wait dirty. */
	return sb->nblocks < 262144 ? sb->nblocks : 262144;
}

static uint64_t dirty_off(const struct kura_super *sb)
{
	return sb->pool_size + KURA_BLOCK;
}

static uint64_t journaled_off(const struct kura_super *sb)
{
	return dirty_off(sb) + map_size(sb);
}

static uint64_t home_used_off(const struct kura_super *sb)
{
	return journaled_off(sb) + map_size(sb);
}

static uint64_t map_stores_off(const struct kura_super *sb)
{
	return home_used_off(sb) + map_size(sb);
}

static uint64_t behind_off(const struct kura_super *sb)
{
	return map_stores_off(sb) + map_size(sb);
}

static uint64_t pend_mask_off(const struct kura_super *sb)
{
	return behind_off(sb) + map_size(sb);
}

static uint64_t pend_list_off(const struct kura_super *sb)
{
	return pend_mask_off(sb) + round_block(sb->nblocks * 8);
}

uint64_t journal_undo_off(const struct kura_super *sb)
{
	return pend_list_off(sb) + round_block(pend_max(sb) * 8);
}

uint64_t journal_copy_size(const struct kura_super *sb)
{
	return journal_undo_off(sb) + sb->log_blocks * KURA_BLOCK;
}

/* ---- heads and records --------------------------------------------------- */

static uint32_t head_crc(const struct kura_journal_head *h)
{
	return crc32c(0, h, offsetof(struct kura_journal_head, crc));
}

static int head_valid(const struct kura_journal_head *h)
{
	return h->magic == JOURNAL_MAGIC && h->crc == head_crc(h);
}

/* The newer valid head of the two slots in buf (the region's first block);
 * NULL when neither is valid. */
const struct kura_journal_head *jn_current_head(const uint8_t *block)
{
	const struct kura_journal_head *a = (const void *)block, *b = (const void *)(block + HEAD_SLOT_SPAN);
	if (head_valid(a) && head_valid(b))
		return a->epoch >= b->epoch ? a : b;
	return head_valid(a) ? a : head_valid(b) ? b : NULL;
}

uint32_t jn_rec_crc(const void *rec, uint32_t len)
{
	const struct kura_jrec *r = rec;
	struct kura_jrec h = *r;
	h.crc = 0;
	uint32_t c = crc32c(0, &h, sizeof h);
	/* FAULT_RECORD_CRC_HEAD: an injected bug (crash tests only) */
	if (kura_fault == FAULT_RECORD_CRC_HEAD)
		return c;
	return crc32c(c, (const uint8_t *)rec + sizeof h, len - sizeof h);
}

static int item_target_ok(const struct kura_super *sb, uint64_t off, uint64_t len)
{
	uint64_t log_off = sb->log_block * KURA_BLOCK, log_end = log_off + sb->log_blocks * KURA_BLOCK;
	return len && off >= 2ull * KURA_BLOCK && off <= sb->pool_size && len <= sb->pool_size - off &&
	       (off >= log_end || off + len <= log_off);
}

/* Checks the record at rec (have bytes readable there) as the one at pos of
 * epoch; returns its length or 0. */
uint32_t jn_rec_check(const struct kura_super *sb, const uint8_t *rec, uint64_t have, uint64_t epoch,
			  uint64_t pos)
{
	const struct kura_jrec *r = (const void *)rec;
	if (have < sizeof *r || r->epoch != epoch || r->pos != pos || r->len < sizeof *r || r->len > have ||
	    r->len % 8)
		return 0;
	if (jn_rec_crc(rec, r->len) != r->crc)
		return 0;
	for (uint32_t at = sizeof *r; at < r->len;) {
		const struct kura_jitem *it = (const void *)(rec + at);
		if (r->len - at < sizeof *it || (it->flags & ~JITEM_ZERO) || !item_target_ok(sb, it->off, it->len))
			return 0;
		uint32_t stored = it->flags & JITEM_ZERO ? 0 : (it->len + 7u) & ~7u;
		if (stored > r->len - at - sizeof *it)
			return 0;
		at += sizeof *it + stored;
	}
	return r->len;
}

typedef void (*apply_fn)(void *ctx, uint64_t off, const void *src, uint32_t len);

uint32_t jn_item_stored(const struct kura_jitem *it)
{
	return sizeof *it + (it->flags & JITEM_ZERO ? 0 : (it->len + 7u) & ~7u);
}

static void rec_apply(const uint8_t *rec, apply_fn apply, void *ctx)
{
	static const uint8_t zeros[KURA_BLOCK];
	const struct kura_jrec *r = (const void *)rec;
	for (uint32_t at = sizeof *r; at < r->len;) {
		const struct kura_jitem *it = (const void *)(rec + at);
		if (it->flags & JITEM_ZERO)
			for (uint32_t done = 0; done < it->len; done += KURA_BLOCK)
				apply(ctx, it->off + done, zeros,
				      it->len - done < KURA_BLOCK ? it->len - done : KURA_BLOCK);
		else
			apply(ctx, it->off, it + 1, it->len);
		at += jn_item_stored(it);
	}
}

/* Replays the records of region (the whole log region's bytes, in memory)
 * with apply; returns how many. */
int jn_replay_region(const struct kura_super *sb, const uint8_t *region, uint64_t epoch, apply_fn apply,
			 void *ctx)
{
	uint64_t cap = sb->log_blocks * KURA_BLOCK - KURA_BLOCK, pos = 0;
	const uint8_t *recs = region + KURA_BLOCK;
	int n = 0;
	for (uint32_t len; (len = jn_rec_check(sb, recs + pos, cap - pos, epoch, pos)); pos += len, n++)
		rec_apply(recs + pos, apply, ctx);
	return n;
}

int jn_write_head(struct media *dm, const struct kura_super *sb, uint64_t epoch, uint64_t nonce)
{
	struct kura_journal_head h = { .magic = JOURNAL_MAGIC, .epoch = epoch, .nonce = nonce };
	h.crc = head_crc(&h);
	uint64_t at = sb->log_block * KURA_BLOCK + (epoch & 1) * HEAD_SLOT_SPAN;
	int err = media_disk_write(dm, at, &h, sizeof h);
	return err ? err : media_disk_sync(dm);
}

/* ---- the working copy ----------------------------------------------------- */

static void copy_name(int pool_fd, char *name, size_t len)
{
	struct stat st;
	if (fstat(pool_fd, &st))
		memset(&st, 0, sizeof st);
	snprintf(name, len, "/kura-copy-%llx-%llx", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
}

/* A copy may be reused only if it is ours and in step with the disk. */
static int copy_current(int fd, int pool_fd, const struct kura_super *sb)
{
	struct stat cs, ps;
	if (fstat(fd, &cs) || fstat(pool_fd, &ps) || !S_ISREG(cs.st_mode) ||
	    (uint64_t)cs.st_size != journal_copy_size(sb) || (cs.st_uid != geteuid() && cs.st_uid != ps.st_uid) ||
	    (cs.st_mode & 0022 & ~ps.st_mode))
		return 0;
	struct jctl c;
	if (pread(fd, &c, sizeof c, (off_t)journal_ctl_off(sb->pool_size)) != sizeof c || c.magic != JCTL_MAGIC ||
	    memcmp(c.uuid, sb->uuid, sizeof c.uuid))
		return 0;
	uint8_t block[KURA_BLOCK];
	if (pread(pool_fd, block, sizeof block, (off_t)(sb->log_block * KURA_BLOCK)) != sizeof block)
		return 0;
	/* One ahead: a checkpoint has written its head and not yet counted it
	 * in the copy (it holds the flush mutex meanwhile, and whoever takes
	 * that next finishes the checkpoint if it died). */
	const struct kura_journal_head *h = jn_current_head(block);
	return h && h->nonce == c.nonce && (h->epoch == c.epoch || h->epoch == c.epoch + 1);
}

/* Copies [at, end) of the pool file into the copy's file: in the kernel
 * where it can (no page faults on the copy's side, one copy of the bytes),
 * else through a buffer.  copy_file_range refuses files on two file
 * systems (EXDEV, as the disk and /dev/shm are): sendfile takes them, and
 * is asked first once copy_file_range has refused, so that a mount does
 * not pay a refused call per chunk. */
static int copy_range(int pool_fd, int copy_fd, off_t at, off_t end)
{
	static int no_copy_range, no_sendfile;
	enum { BUF = 1 << 16 };
	char *buf = NULL; /* the last resort's, on the heap: see jn_checkpoint */
	int err = 0;
	struct media_own_write own;
	media_own_begin(&own, (uint64_t)end);
	while (at < end) {
		loff_t in = at, out = at;
		size_t left = (size_t)(end - at);
		ssize_t n = -1;
		if (!__atomic_load_n(&no_copy_range, __ATOMIC_RELAXED)) {
			n = copy_file_range(pool_fd, &in, copy_fd, &out, left, 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
				err = -errno;
				break;
			}
			if (n < 0)
				__atomic_store_n(&no_copy_range, 1, __ATOMIC_RELAXED);
		}
		if (n <= 0 && !__atomic_load_n(&no_sendfile, __ATOMIC_RELAXED)) {
			off_t from = at;
			if (lseek(copy_fd, at, SEEK_SET) != at) {
				err = -errno;
				break;
			}
			n = sendfile(copy_fd, pool_fd, &from, left < (1u << 30) ? left : (1u << 30));
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
				err = -errno;
				break;
			}
			if (n < 0)
				__atomic_store_n(&no_sendfile, 1, __ATOMIC_RELAXED);
		}
		if (n <= 0) {
			if (!buf && !(buf = malloc(BUF))) {
				err = -ENOMEM;
				break;
			}
			size_t want = left < BUF ? left : BUF;
			n = pread(pool_fd, buf, want, at);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0 || pwrite(copy_fd, buf, (size_t)n, at) != n) {
				err = n < 0 ? -errno : -EIO;
				break;
			}
		}
		at += n;
	}
	free(buf);
	media_own_end(&own);
	return err;
}

/* Copies the pool file's allocated extents, but the log region, into the
 * copy; its holes stay holes. */
static int load_copy(int pool_fd, const struct kura_super *sb, int copy_fd)
{
	off_t log_off = (off_t)(sb->log_block * KURA_BLOCK), log_end = log_off + (off_t)(sb->log_blocks * KURA_BLOCK);
	off_t pos = 0, end = (off_t)sb->pool_size;
	while (pos < end) {
		off_t data = lseek(pool_fd, pos, SEEK_DATA);
		if (data < 0)
			break; /* ENXIO: only a hole is left */
		off_t hole = lseek(pool_fd, data, SEEK_HOLE);
		if (hole < 0 || hole > end)
			hole = end;
		int err = 0;
		if (data < log_off)
			err = copy_range(pool_fd, copy_fd, data, hole < log_off ? hole : log_off);
		if (!err && hole > log_end)
			err = copy_range(pool_fd, copy_fd, data > log_end ? data : log_end, hole);
		if (err)
			return err;
		pos = hole;
	}
	return 0;
}

static int init_ctl(struct jctl *c, const struct kura_super *sb, uint64_t nonce, uint64_t epoch)
{
	pthread_mutexattr_t a;
	memset(c, 0, sizeof *c);
	memcpy(c->uuid, sb->uuid, sizeof c->uuid);
	c->nonce = nonce;
	c->epoch = epoch;
	if (pthread_mutexattr_init(&a) || pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) ||
	    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) || pthread_mutex_init(&c->flush, &a))
		return -EINVAL;
	pthread_mutexattr_destroy(&a);
	__atomic_store_n(&c->magic, JCTL_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

static int create_copy(int pool_fd, const struct kura_super *sb, const char *name, char *why, size_t whylen)
{
	uint64_t nonce = 0, epoch = 0;
	int err = jn_recover_disk(pool_fd, sb, &nonce, &epoch, why, whylen);
	if (err)
		return err;
	struct stat ps;
	if (fstat(pool_fd, &ps))
		return -errno;
	shm_unlink(name); /* not current: a stale copy, never trusted */
	int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, ps.st_mode & 0666);
	if (fd < 0) {
		err = -errno;
		snprintf(why, whylen, "cannot create the working copy /dev/shm%s: %s", name, strerror(errno));
		return err;
	}
	fchmod(fd, ps.st_mode & 0666); /* umask must not lock out other users of the pool */
	uint64_t size = journal_copy_size(sb), ctl_off = journal_ctl_off(sb->pool_size);
	uint64_t ctl_map = (ctl_off & ~(uint64_t)(KURA_BLOCK - 1));
	void *p = MAP_FAILED;
	/* The control block and the maps after it get their storage now (0.2%
	 * of the pool's size): they are stored to through maps, where a hole
	 * that /dev/shm has no room for is a SIGBUS (media_back does the same
	 * for the pool's blocks and the undo log as they come into use). */
	int given = media_ftruncate(fd, size);
	if (!given)
		given = media_fallocate(fd, ctl_map, journal_undo_off(sb) - ctl_map);
	if (!given)
		p = mmap(NULL, KURA_BLOCK, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)ctl_map);
	else
		errno = -given;
	if (p == MAP_FAILED) {
		err = -errno;
		snprintf(why, whylen, "cannot make the working copy /dev/shm%s (%llu bytes): %s", name,
			 (unsigned long long)size, strerror(errno));
	} else {
		err = load_copy(pool_fd, sb, fd);
		if (err)
			snprintf(why, whylen, "cannot read the pool into its working copy: %s", strerror(-err));
		else
			err = init_ctl((struct jctl *)((uint8_t *)p + (ctl_off - ctl_map)), sb, nonce, epoch);
		munmap(p, KURA_BLOCK);
	}
	if (err) {
		shm_unlink(name);
		close(fd);
		return err;
	}
	return fd;
}

int journal_open_copy(int pool_fd, const struct kura_super *sb, int alone, int *created, char *why, size_t whylen)
{
	char name[80];
	copy_name(pool_fd, name, sizeof name);
	*created = 0;
	int fd = shm_open(name, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
	if (fd >= 0 && copy_current(fd, pool_fd, sb))
		return fd; /* in use, or left by processes that died: newer than the disk */
	if (fd >= 0)
		close(fd);
	if (!alone) {
		snprintf(why, whylen, "the pool is mounted, but its working copy /dev/shm%s is %s", name,
			 fd >= 0 ? "not in step with it" : "missing");
		return -EIO;
	}
	fd = create_copy(pool_fd, sb, name, why, whylen);
	*created = fd >= 0;
	return fd;
}

void journal_remove_copy(int pool_fd)
{
	char name[80];
	copy_name(pool_fd, name, sizeof name);
	shm_unlink(name);
}

void journal_init(struct journal *j, struct media *m, const struct kura_super *sb, int created)
{
	memset(j, 0, sizeof *j);
	j->m = m;
	j->ctl = (struct jctl *)(m->base + journal_ctl_off(sb->pool_size));
	j->dirty = (uint64_t *)(m->base + dirty_off(sb));
	j->journaled = (uint64_t *)(m->base + journaled_off(sb));
	j->home_used = (uint64_t *)(m->base + home_used_off(sb));
	j->map_stores = (uint64_t *)(m->base + map_stores_off(sb));
	j->behind = (uint64_t *)(m->base + behind_off(sb));
	j->pend_mask = (uint64_t *)(m->base + pend_mask_off(sb));
	j->pend_list = (uint64_t *)(m->base + pend_list_off(sb));
	j->pend_max = pend_max(sb);
	/* 2 MiB: 2 GiB written in 1 MiB writes with no fsync took at most 41
	 * ms a write (99% within 9) where steps of 8 MiB took 48 (26) and of
	 * 64 MiB 286 (69).  Starting only past 256 MiB pending, the first
	 * step wrote all of it at once (300 ms) and 512 MiB with an fsync at
	 * the end took 783 ms instead of 552. */
	j->behind_step = kura_write_behind_step ? kura_write_behind_step : 512;
	j->first_data = sb->first_data_block;
	j->bitmap_off = sb->bitmap_block * KURA_BLOCK;
	j->map_words = (sb->nblocks + 63) / 64;
	j->head_off = sb->log_block * KURA_BLOCK;
	j->rec_off = j->head_off + KURA_BLOCK;
	j->cap = sb->log_blocks * KURA_BLOCK - KURA_BLOCK;
	if (kura_journal_cap && kura_journal_cap < j->cap)
		j->cap = kura_journal_cap;
	j->nblocks = sb->nblocks;
	/* Writing blocks home costs a second flush: worth it from 256 KiB on
	 * (a quarter of a small journal), where the data would otherwise
	 * cross the disk twice. */
	j->home_min = j->cap / 4 / KURA_BLOCK;
	if (j->home_min > 64)
		j->home_min = 64;
	if (!j->home_min)
		j->home_min = 1;
	/* A new copy is the pool file as it is on the disk: its bitmap is the
	 * checkpoint's. */
	if (created)
		memcpy(j->home_used, media_ptr(m, j->bitmap_off), j->map_words * 8);
}

/* ---- other back ends ------------------------------------------------------- */

static void apply_mapped(void *ctx, uint64_t off, const void *src, uint32_t len)
{
	media_store(ctx, off, src, len);
	media_flush(ctx, off, len);
}

int journal_is_journal(const struct media *m, const struct kura_super *sb)
{
	return jn_current_head(media_ptr(m, sb->log_block * KURA_BLOCK)) != NULL;
}

int journal_replay_mapped(struct media *m, const struct kura_super *sb)
{
	const uint8_t *region = media_ptr(m, sb->log_block * KURA_BLOCK);
	const struct kura_journal_head *h = jn_current_head(region);
	if (!h)
		return 0;
	int n = jn_replay_region(sb, region, h->epoch, apply_mapped, m);
	media_fence(m);
	return n;
}
