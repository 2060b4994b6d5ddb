/* journal.c — the file back end's working copy and redo journal (see journal.h). */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "crc.h"
#include "fault.h"
#include "journal.h"
#include "tx.h"

uint64_t kura_journal_cap;
int journal_replayed;

#define JCTL_MAGIC 0x3254434a4152554bull /* "KURAJCT2" */
/* The head is written in one of two slots, by epoch, a sector apart: a
 * head torn by a crash leaves the other slot's, whose records replay onto
 * homes that already hold them, which redo records allow (see checkpoint). */
#define HEAD_SLOT_SPAN 2048u

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t round_block(uint64_t n)
{
	return (n + KURA_BLOCK - 1) & ~(uint64_t)(KURA_BLOCK - 1);
}

uint64_t journal_ctl_off(uint64_t pool_size)
{
	return pool_size;
}

/* After the control block: the dirty map, the journaled map, the
 * checkpoint's bitmap and the blocks writable maps show (a bit per block
 * each), the pending masks (a word per
 * block; shared memory is sparse, so an untouched stretch costs nothing) and
 * the pending list, then the copy's undo log. */
static uint64_t map_size(const struct kura_super *sb)
{
	return round_block((sb->nblocks + 63) / 64 * 8);
}

static uint64_t pend_max(const struct kura_super *sb)
{
	/* Bounds a seal's work and the time unsynced changes wait. */
	return sb->nblocks < 65536 ? sb->nblocks : 65536;
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

static uint64_t pend_mask_off(const struct kura_super *sb)
{
	return map_stores_off(sb) + map_size(sb);
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
static const struct kura_journal_head *current_head(const uint8_t *block)
{
	const struct kura_journal_head *a = (const void *)block, *b = (const void *)(block + HEAD_SLOT_SPAN);
	if (head_valid(a) && head_valid(b))
		return a->epoch >= b->epoch ? a : b;
	return head_valid(a) ? a : head_valid(b) ? b : NULL;
}

static uint32_t rec_crc(const void *rec, uint32_t len)
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
static uint32_t rec_check(const struct kura_super *sb, const uint8_t *rec, uint64_t have, uint64_t epoch,
			  uint64_t pos)
{
	const struct kura_jrec *r = (const void *)rec;
	if (have < sizeof *r || r->epoch != epoch || r->pos != pos || r->len < sizeof *r || r->len > have ||
	    r->len % 8)
		return 0;
	if (rec_crc(rec, r->len) != r->crc)
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

static uint32_t item_stored(const struct kura_jitem *it)
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
		at += item_stored(it);
	}
}

/* Replays the records of region (the whole log region's bytes, in memory)
 * with apply; returns how many. */
static int replay_region(const struct kura_super *sb, const uint8_t *region, uint64_t epoch, apply_fn apply,
			 void *ctx)
{
	uint64_t cap = sb->log_blocks * KURA_BLOCK - KURA_BLOCK, pos = 0;
	const uint8_t *recs = region + KURA_BLOCK;
	int n = 0;
	for (uint32_t len; (len = rec_check(sb, recs + pos, cap - pos, epoch, pos)); pos += len, n++)
		rec_apply(recs + pos, apply, ctx);
	return n;
}

static int journal_undo_legacy(int pool_fd, const struct kura_super *sb);

/* ---- recovery on the pool file --------------------------------------------- */

static void apply_disk(void *ctx, uint64_t off, const void *src, uint32_t len)
{
	media_disk_write(ctx, off, src, len);
}

static int write_head(struct media *dm, const struct kura_super *sb, uint64_t epoch, uint64_t nonce)
{
	struct kura_journal_head h = { .magic = JOURNAL_MAGIC, .epoch = epoch, .nonce = nonce };
	h.crc = head_crc(&h);
	uint64_t at = sb->log_block * KURA_BLOCK + (epoch & 1) * HEAD_SLOT_SPAN;
	int err = media_disk_write(dm, at, &h, sizeof h);
	return err ? err : media_disk_sync(dm);
}

static int read_region(int fd, const struct kura_super *sb, uint8_t **out)
{
	uint64_t len = sb->log_blocks * KURA_BLOCK;
	uint8_t *buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	for (uint64_t done = 0; done < len;) {
		ssize_t n = pread(fd, buf + done, len - done, (off_t)(sb->log_block * KURA_BLOCK + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			free(buf);
			return n < 0 ? -errno : -EIO;
		}
		done += (uint64_t)n;
	}
	*out = buf;
	return 0;
}

/* Records are written with direct I/O, which must not have to allocate
 * blocks (an ext4 journal commit each time): a log region left sparse (a
 * pool copied with cp --sparse) gets real zeros, once. */
static int fill_holes(struct media *dm, const struct kura_super *sb)
{
	off_t start = (off_t)((sb->log_block + 1) * KURA_BLOCK), end = (off_t)((sb->log_block + sb->log_blocks) * KURA_BLOCK);
	off_t hole = lseek(dm->disk_fd, start, SEEK_HOLE);
	if (hole < 0 || hole >= end)
		return 0;
	static const uint8_t zeros[64 * KURA_BLOCK];
	int err = 0;
	for (off_t at = hole; at < end && !err; at += (off_t)sizeof zeros)
		err = media_disk_write(dm, (uint64_t)at, zeros,
				       end - at < (off_t)sizeof zeros ? (size_t)(end - at) : sizeof zeros);
	return err ? err : media_disk_sync(dm);
}

/* Brings the pool file to its last durable state and gives it a fresh
 * journal head (epoch + 1, new nonce).  A log region still in the undo
 * format (mkfs, or the pool last used by another back end) is rolled back
 * the way those back ends do, through a mapping of the pool file. */
static int recover_disk(int pool_fd, const struct kura_super *sb, uint64_t *nonce, uint64_t *epoch, char *why,
			size_t whylen)
{
	uint8_t *region = NULL;
	int err = read_region(pool_fd, sb, &region);
	if (err) {
		snprintf(why, whylen, "cannot read the journal: %s", strerror(-err));
		return err;
	}
	struct media dm;
	media_init_disk(&dm, pool_fd, sb->pool_size);
	const struct kura_journal_head *h = current_head(region);
	uint64_t next = 1;
	journal_replayed = 0;
	if (h) {
		journal_replayed = replay_region(sb, region, h->epoch, apply_disk, &dm);
		if (journal_replayed > 0)
			err = media_disk_sync(&dm);
		next = h->epoch + 1;
	} else if (((const struct kura_log_head *)region)->magic == LOG_MAGIC) {
		err = journal_undo_legacy(pool_fd, sb);
	} else {
		snprintf(why, whylen, "the log's header is damaged");
		free(region);
		return -EUCLEAN;
	}
	free(region);
	if (!err)
		err = fill_holes(&dm, sb);
	if (!err && getrandom(nonce, sizeof *nonce, 0) != sizeof *nonce)
		err = -EIO;
	if (!err)
		err = write_head(&dm, sb, next, *nonce);
	if (err)
		snprintf(why, whylen, "journal recovery failed: %s", strerror(-err));
	*epoch = next;
	return err;
}

/* A log region in the undo format: roll back what it holds, as the other
 * back ends would, through a mapping of the pool file. */
static int journal_undo_legacy(int pool_fd, const struct kura_super *sb)
{
	struct media m;
	int err = media_map(&m, pool_fd, sb->pool_size, KURA_PERSIST_FILE, 0);
	if (err)
		return err;
	struct tx t;
	tx_init(&t, &m, sb->log_block * KURA_BLOCK, sb->log_blocks * KURA_BLOCK);
	err = tx_recover(&t);
	tx_destroy(&t);
	if (!err && m.io_err)
		err = -m.io_err;
	media_unmap(&m);
	return err < 0 ? err : 0;
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
	const struct kura_journal_head *h = current_head(block);
	return h && h->nonce == c.nonce && h->epoch == c.epoch;
}

/* Copies [at, end) of the pool file into the copy's file: in the kernel
 * where it can (no page faults on the copy's side), else through a buffer. */
static int copy_range(int pool_fd, int copy_fd, off_t at, off_t end)
{
	static __thread char buf[1 << 16];
	while (at < end) {
		loff_t in = at, out = at;
		ssize_t n = copy_file_range(pool_fd, &in, copy_fd, &out, (size_t)(end - at), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
			return -errno;
		if (n <= 0) {
			size_t want = end - at < (off_t)sizeof buf ? (size_t)(end - at) : sizeof buf;
			n = pread(pool_fd, buf, want, at);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0 || pwrite(copy_fd, buf, (size_t)n, at) != n)
				return n < 0 ? -errno : -EIO;
		}
		at += n;
	}
	return 0;
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
	int err = recover_disk(pool_fd, sb, &nonce, &epoch, why, whylen);
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
	if (ftruncate(fd, (off_t)size) == 0)
		p = mmap(NULL, KURA_BLOCK, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)ctl_map);
	if (p == MAP_FAILED) {
		err = -errno;
		snprintf(why, whylen, "cannot size the working copy to %llu bytes: %s", (unsigned long long)size,
			 strerror(errno));
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

/* ---- committing ------------------------------------------------------------ */

void journal_init(struct journal *j, struct media *m, const struct kura_super *sb, int created)
{
	memset(j, 0, sizeof *j);
	j->m = m;
	j->ctl = (struct jctl *)(m->base + journal_ctl_off(sb->pool_size));
	j->dirty = (uint64_t *)(m->base + dirty_off(sb));
	j->journaled = (uint64_t *)(m->base + journaled_off(sb));
	j->home_used = (uint64_t *)(m->base + home_used_off(sb));
	j->map_stores = (uint64_t *)(m->base + map_stores_off(sb));
	j->pend_mask = (uint64_t *)(m->base + pend_mask_off(sb));
	j->pend_list = (uint64_t *)(m->base + pend_list_off(sb));
	j->pend_max = pend_max(sb);
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

static void set_bits(uint64_t *map, uint64_t off, uint64_t len)
{
	for (uint64_t b = off >> KURA_BLOCK_SHIFT; b <= (off + len - 1) >> KURA_BLOCK_SHIFT; b++)
		map[b / 64] |= 1ull << (b % 64);
}

static int bit(const uint64_t *map, uint64_t b)
{
	return map[b / 64] >> (b % 64) & 1;
}

static void mark_dirty(struct journal *j, uint64_t off, uint64_t len)
{
	set_bits(j->dirty, off, len);
}

/* A record's bytes (or a seal's home write) now define these blocks in
 * the state recovery produces: they may no longer go home ahead of one. */
static void mark_journaled(struct journal *j, uint64_t off, uint64_t len)
{
	set_bits(j->dirty, off, len);
	set_bits(j->journaled, off, len);
}

void journal_mark_dirty(struct journal *j, uint64_t off, uint64_t len)
{
	/* A checkpoint writes the block home whatever a record carried.  A
	 * pending block that a map now shows must be sealed before the map
	 * can store into it: its pending lines hold a transaction's bytes now,
	 * but would hold some of the map's too by the time a seal took them,
	 * and some lines of a map's stores tear the page the kernel writes
	 * whole.  The map is made once this operation returns, so the commit
	 * that ends it seals first (commit_lazy); from then on the block is
	 * counted whole whenever it is pending. */
	if (!len)
		return;
	mark_dirty(j, off, len);
	for (uint64_t b = off >> KURA_BLOCK_SHIFT; b <= (off + len - 1) >> KURA_BLOCK_SHIFT; b++)
		if (!bit(j->map_stores, b)) {
			if (j->pend_mask[b])
				j->seal_first = 1;
			j->map_stores[b / 64] |= 1ull << (b % 64);
		}
}

void journal_forget_map(struct journal *j, uint64_t block)
{
	if (block < j->nblocks)
		j->map_stores[block / 64] &= ~(1ull << (block % 64));
}

static void lock_flush(struct journal *j);

/* Runs of consecutive changed lines, each cut at block boundaries. */
#define FOR_EACH_LINE_RUN(t, off, len, body)                                                        \
	for (size_t i_ = 0; i_ < (t)->nlines;) {                                                    \
		size_t k_ = i_ + 1;                                                                 \
		while (k_ < (t)->nlines && (t)->lines[k_] == (t)->lines[k_ - 1] + 1 &&             \
		       ((t)->lines[k_] * MEDIA_LINE) % KURA_BLOCK)                                  \
			k_++;                                                                       \
		uint64_t off = (t)->lines[i_] * MEDIA_LINE, len = (k_ - i_) * MEDIA_LINE;           \
		body;                                                                               \
		i_ = k_;                                                                            \
	}

static uint64_t item_size(uint64_t len, int zero)
{
	return sizeof(struct kura_jitem) + (zero ? 0 : (len + 7) & ~7ull);
}

static void put_item_from(struct journal *j, uint64_t *at, uint64_t off, uint64_t len, int zero, const void *src)
{
	struct kura_jitem it = { .off = off, .len = (uint32_t)len, .flags = zero ? JITEM_ZERO : 0 };
	media_store(j->m, *at, &it, sizeof it);
	if (!zero) {
		media_store(j->m, *at + sizeof it, src, len);
		if (len % 8) {
			static const uint8_t pad[8];
			media_store(j->m, *at + sizeof it + len, pad, 8 - len % 8);
		}
	}
	*at += item_size(len, zero);
	mark_journaled(j, off, len);
}

static void put_item(struct journal *j, uint64_t *at, uint64_t off, uint64_t len, int zero)
{
	put_item_from(j, at, off, len, zero, media_ptr(j->m, off));
}

static void finish_record(struct journal *j, uint64_t pos, uint64_t at, uint64_t undo_epoch)
{
	uint64_t start = j->rec_off + pos;
	struct kura_jrec r = { .epoch = j->ctl->epoch, .pos = pos, .undo_epoch = undo_epoch,
			       .len = (uint32_t)(at - start) };
	media_store(j->m, start, &r, sizeof r);
	r.crc = rec_crc(media_ptr(j->m, start), r.len);
	media_store(j->m, start + offsetof(struct kura_jrec, crc), &r.crc, sizeof r.crc);
}

/* A transaction too large for the journal even when empty writes what it
 * put in fresh blocks home first: those blocks are free in the durable
 * state (a checkpoint just made everything durable), so nothing can see
 * them until the record that links them in, which then carries only the
 * lines changed in place. */
static int write_fresh_home(struct journal *j, const struct jtx *t)
{
	int err = 0;
	for (size_t i = 0; i < t->nfresh && !err; i++) {
		err = media_disk_write(j->m, t->fresh[i].off, media_ptr(j->m, t->fresh[i].off), t->fresh[i].len);
		set_bits(j->journaled, t->fresh[i].off, t->fresh[i].len);
	}
	/* Fresh blocks written home stay clean in the copy's dirty map. */
	FOR_EACH_LINE_RUN(t, off, len, {
		if (!err && t->is_fresh(t->ctx, off >> KURA_BLOCK_SHIFT)) {
			err = media_disk_write(j->m, off, media_ptr(j->m, off), len);
			set_bits(j->journaled, off, len);
		}
	});
	return err ? err : media_disk_sync(j->m);
}

static int checkpoint(struct journal *j, const struct jtx *t, uint64_t reserve);

/* ---- the pending set (fsync mode; see journal.h) ---------------------------- */

/* The most a block adds to a seal's record: every other line a run. */
#define BLOCK_RECORD_MAX (KURA_BLOCK + KURA_BLOCK / MEDIA_LINE / 2 * sizeof(struct kura_jitem))
/* A seal's record belongs to no transaction: a holder that dies before
 * publishing it leaves it for journal_repair to erase. */
#define SEAL_UNDO_EPOCH UINT64_MAX

static __thread uint8_t view_buf[KURA_BLOCK];

static int may_go_home(const struct journal *j, uint64_t b)
{
	return b >= j->first_data && !bit(j->home_used, b) && !bit(j->journaled, b);
}

/* Room a seal may need beyond the pending estimate: the blocks it could
 * have written home, journaled after all because there are too few. */
static uint64_t seal_slack(const struct journal *j)
{
	return sizeof(struct kura_jrec) + (j->home_min - 1) * BLOCK_RECORD_MAX;
}

/* The lines of [off, off + len), which lies in one block. */
static uint64_t line_mask(uint64_t off, uint64_t len)
{
	uint64_t first = (off % KURA_BLOCK) / MEDIA_LINE, n = ((off + len - 1) % KURA_BLOCK) / MEDIA_LINE - first + 1;
	return (n == 64 ? ~0ull : (1ull << n) - 1) << first;
}

/* Counts (add 0) or adds to the pending set (add 1) the blocks of a range. */
static void pend_range(struct journal *j, uint64_t off, uint64_t len, int add, uint64_t *nnew, uint64_t *est)
{
	for (uint64_t end = off + len; off < end;) {
		uint64_t b = off >> KURA_BLOCK_SHIFT, stop = (b + 1) << KURA_BLOCK_SHIFT;
		if (stop > end)
			stop = end;
		uint64_t lines = line_mask(off, stop - off), fresh_lines = lines & ~j->pend_mask[b];
		if (!add) {
			/* A seal records a block's lines in runs: these lines add at
			 * most themselves and one run; a block a map showed goes
			 * whole (see seal). */
			*nnew += !j->pend_mask[b];
			if (may_go_home(j, b))
				;
			else if (bit(j->map_stores, b))
				*est += j->pend_mask[b] ? 0 : KURA_BLOCK + sizeof(struct kura_jitem);
			else if (fresh_lines)
				*est += (uint64_t)__builtin_popcountll(fresh_lines) * MEDIA_LINE + sizeof(struct kura_jitem);
		} else {
			/* Listed before its mask is set: a holder dying in between
			 * leaves a listed block with no lines, which a seal skips,
			 * never lines no seal will find. */
			if (!j->pend_mask[b]) {
				if (!j->ctl->pend_n)
					j->ctl->pend_since = now_ns();
				j->pend_list[j->ctl->pend_n] = b;
				__atomic_store_n(&j->ctl->pend_n, j->ctl->pend_n + 1, __ATOMIC_RELEASE);
			}
			j->pend_mask[b] |= lines;
			mark_dirty(j, off, stop - off);
		}
		off = stop;
	}
}

static void pend_tx(struct journal *j, const struct jtx *t, int add, uint64_t *nnew, uint64_t *est)
{
	*nnew = *est = 0;
	for (size_t i = 0; i < t->nfresh; i++)
		pend_range(j, t->fresh[i].off, t->fresh[i].len, add, nnew, est);
	FOR_EACH_LINE_RUN(t, off, len, pend_range(j, off, len, add, nnew, est));
}

static int pend_fits(const struct journal *j, uint64_t nnew, uint64_t est)
{
	return j->ctl->pend_n + nnew <= j->pend_max && j->ctl->staged + j->ctl->pend_est + est + seal_slack(j) <= j->cap;
}

/* block as a seal records it: the copy, or, inside transaction t, as the
 * last committed transaction left it. */
static const uint8_t *seal_view(struct journal *j, const struct jtx *t, uint64_t b)
{
	if (!t)
		return media_ptr(j->m, b << KURA_BLOCK_SHIFT);
	t->committed(t->ctx, b, view_buf);
	return view_buf;
}

#define FOR_EACH_MASK_RUN(mask, first, n, body)                                                     \
	for (unsigned l_ = 0; l_ < 64;) {                                                            \
		if (!((mask) >> l_ & 1)) {                                                           \
			l_++;                                                                        \
			continue;                                                                    \
		}                                                                                    \
		unsigned e_ = l_;                                                                    \
		while (e_ < 64 && ((mask) >> e_ & 1))                                                \
			e_++;                                                                        \
		uint64_t first = l_, n = e_ - l_;                                                    \
		body;                                                                                \
		l_ = e_;                                                                             \
	}

static int cmp_block(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Blocks of list[from, to) that go home, consecutive from list[i]: at most RUN. */
static uint64_t home_run(const struct journal *j, const uint64_t *home, uint64_t i, uint64_t to)
{
	uint64_t r = 1;
	while (r < 64 && i + r < to && bit(home, i + r) && j->pend_list[i + r] == j->pend_list[i] + r)
		r++;
	return r;
}

/* Turns the pending set into one staged record (writing its fresh blocks
 * home first when there are enough of them); t is the transaction open
 * meanwhile, or NULL.  Under the pool mutex. */
static int seal(struct journal *j, const struct jtx *t)
{
	struct jctl *c = j->ctl;
	int err = 0;
	if (c->home_unsynced) {
		/* A seal died after writing blocks home: their pages are in the
		 * kernel's cache; they must be durable before any later record. */
		if ((err = media_disk_sync(j->m)))
			return err;
		c->home_unsynced = 0;
	}
	uint64_t n = c->pend_n < j->pend_max ? c->pend_n : j->pend_max, k = 0;
	if (!n)
		return 0;
	/* In block order, once each (a holder that died may have listed a
	 * block twice), blocks with no lines dropped. */
	qsort(j->pend_list, n, sizeof *j->pend_list, cmp_block);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t b = j->pend_list[i];
		if (b < j->nblocks && (!k || j->pend_list[k - 1] != b) && j->pend_mask[b]) {
			j->pend_list[k++] = b;
		}
	}
	__atomic_store_n(&c->pend_n, k, __ATOMIC_RELEASE);
	uint64_t *home = calloc((k + 63) / 64 + 1, sizeof *home), nhome = 0;
	for (uint64_t i = 0; home && i < k; i++)
		if (may_go_home(j, j->pend_list[i])) {
			home[i / 64] |= 1ull << (i % 64);
			nhome++;
		}
	if (nhome < j->home_min)
		memset(home, 0, home ? ((k + 63) / 64 + 1) * sizeof *home : 0), nhome = 0;
	uint64_t need = sizeof(struct kura_jrec), whole = 0;
	for (uint64_t i = 0; i < k; i++)
		if (!home || !bit(home, i)) {
			uint64_t b = j->pend_list[i];
			FOR_EACH_MASK_RUN(j->pend_mask[b], f, nl, (void)f; need += item_size(nl * MEDIA_LINE, 0));
			if (bit(j->map_stores, b) && ~j->pend_mask[b])
				whole += item_size(KURA_BLOCK, 0);
		}
	/* A map's stores are in the copy with no line of their own: some lines
	 * of such a block would tear the page the kernel writes whole, so the
	 * seal takes all of it, unless a map came after the block's lines were
	 * counted and the whole blocks no longer fit (maps promise no more). */
	if (whole && c->staged + need + whole <= j->cap) {
		for (uint64_t i = 0; i < k; i++)
			if ((!home || !bit(home, i)) && bit(j->map_stores, j->pend_list[i]))
				j->pend_mask[j->pend_list[i]] = ~0ull;
		need = 0;
		for (uint64_t i = 0; i < k; i++)
			if (!home || !bit(home, i))
				FOR_EACH_MASK_RUN(j->pend_mask[j->pend_list[i]], f, nl, (void)f; need += item_size(nl * MEDIA_LINE, 0));
		need += sizeof(struct kura_jrec);
	}
	if (c->staged + need > j->cap) {
		free(home); /* commit_lazy's bound keeps this from happening */
		return -ENOSPC;
	}
	/* Home first, and durable: nothing links these blocks in until the
	 * record, and from then on recovery reads them from home. */
	if (nhome) {
		c->home_unsynced = 1;
		for (uint64_t i = 0; i < k && !err;) {
			if (!bit(home, i)) {
				i++;
				continue;
			}
			uint64_t b = j->pend_list[i], r = t ? 1 : home_run(j, home, i, k);
			err = media_disk_write(j->m, b << KURA_BLOCK_SHIFT, seal_view(j, t, b), r * KURA_BLOCK);
			set_bits(j->journaled, b << KURA_BLOCK_SHIFT, r * KURA_BLOCK);
			i += r;
		}
		/* FAULT_SEAL_HOME_EARLY: an injected bug (crash tests only) */
		if (!err && kura_fault != FAULT_SEAL_HOME_EARLY)
			err = media_disk_sync(j->m);
		if (err) {
			free(home);
			return err;
		}
		c->home_unsynced = 0;
		c->sealed_home += nhome;
	}
	uint64_t pos = c->staged, at = j->rec_off + pos + sizeof(struct kura_jrec);
	for (uint64_t i = 0; i < k; i++) {
		uint64_t b = j->pend_list[i];
		if (home && bit(home, i))
			continue;
		const uint8_t *v = seal_view(j, t, b);
		FOR_EACH_MASK_RUN(j->pend_mask[b], f, nl,
				  put_item_from(j, &at, (b << KURA_BLOCK_SHIFT) + f * MEDIA_LINE, nl * MEDIA_LINE, 0,
						v + f * MEDIA_LINE));
	}
	free(home);
	finish_record(j, pos, at, SEAL_UNDO_EPOCH);
	__atomic_store_n(&c->staged, at - j->rec_off, __ATOMIC_RELEASE);
	c->seals++;
	/* Sealed.  A holder dying while this clears leaves masks that the next
	 * seal records again as they are then, which is harmless. */
	for (uint64_t i = 0; i < k; i++)
		j->pend_mask[j->pend_list[i]] = 0;
	c->pend_est = 0;
	__atomic_store_n(&c->pend_n, 0, __ATOMIC_RELEASE);
	return 0;
}

int journal_rewrite_in_place(const struct journal *j, uint64_t block)
{
	return !j->sync_each_op && block < j->nblocks && may_go_home(j, block);
}

uint64_t journal_cheap_word(const struct journal *j, uint64_t w)
{
	return j->sync_each_op || w >= j->map_words ? ~0ull : ~j->home_used[w] & ~j->journaled[w];
}

int journal_sync_due(const struct journal *j)
{
	return !j->sync_each_op && __atomic_load_n(&j->ctl->pend_n, __ATOMIC_ACQUIRE) &&
	       now_ns() - __atomic_load_n(&j->ctl->pend_since, __ATOMIC_ACQUIRE) > JOURNAL_COMMIT_NS;
}

int journal_seal(struct journal *j)
{
	return j->sync_each_op ? 0 : seal(j, NULL);
}

/* fsync mode: t's lines join the pending set, sealing or checkpointing
 * first when they would not fit.  1: t is too large for the set and takes
 * the path of op mode (the set is empty then, so the order holds). */
static int commit_lazy(struct journal *j, const struct jtx *t)
{
	if (j->seal_first) {
		int err = seal(j, t);
		if (err)
			return err;
		j->seal_first = 0;
	}
	uint64_t nnew, est;
	pend_tx(j, t, 0, &nnew, &est);
	if (!pend_fits(j, nnew, est)) {
		int err = seal(j, t);
		if (err)
			return err;
		pend_tx(j, t, 0, &nnew, &est);
		if (!pend_fits(j, nnew, est) && j->ctl->staged) {
			if ((err = checkpoint(j, t, est + seal_slack(j))))
				return err;
			pend_tx(j, t, 0, &nnew, &est);
		}
		if (!pend_fits(j, nnew, est))
			return 1;
	}
	/* The estimate first: a holder that dies mid-way leaves it too high. */
	__atomic_store_n(&j->ctl->pend_est, j->ctl->pend_est + est, __ATOMIC_RELEASE);
	pend_tx(j, t, 1, &nnew, &est);
	j->pending_end = j->ctl->staged;
	return 0;
}

int journal_commit(struct journal *j, const struct jtx *t)
{
	if (!j->sync_each_op) {
		int r = commit_lazy(j, t);
		if (r <= 0)
			return r;
	}
	uint64_t need = sizeof(struct kura_jrec), in_place = need;
	for (size_t i = 0; i < t->nfresh; i++)
		need += item_size(t->fresh[i].len, t->fresh[i].zero);
	FOR_EACH_LINE_RUN(t, off, len, {
		need += item_size(len, 0);
		if (!t->is_fresh(t->ctx, off >> KURA_BLOCK_SHIFT))
			in_place += item_size(len, 0);
	});
	int big = need > j->cap;
	if (big && in_place > j->cap)
		return -ENOSPC;
	uint64_t pos = j->ctl->staged;
	/* The large path must open a new epoch: see checkpoint().  Its first
	 * record may carry blocks a map showed, but never blocks this
	 * transaction took fresh, which no map can show yet. */
	if (big || pos + need > j->cap) {
		int err = checkpoint(j, t, big ? in_place : need);
		if (err)
			return err;
		pos = j->ctl->staged;
	}
	if (big) {
		int err = write_fresh_home(j, t);
		if (err)
			return err;
	}
	uint64_t start = j->rec_off + pos, at = start + sizeof(struct kura_jrec);
	if (!big)
		for (size_t i = 0; i < t->nfresh; i++)
			put_item(j, &at, t->fresh[i].off, t->fresh[i].len, t->fresh[i].zero);
	/* After the fresh ranges: a zeroed block's lines written since land on
	 * the zeros at replay. */
	FOR_EACH_LINE_RUN(t, off, len, {
		if (!big || !t->is_fresh(t->ctx, off >> KURA_BLOCK_SHIFT))
			put_item(j, &at, off, len, 0);
	});
	finish_record(j, pos, at, t->undo_epoch);
	j->pending_end = at - j->rec_off;
	return 0;
}

uint64_t journal_publish(struct journal *j)
{
	__atomic_store_n(&j->ctl->staged, j->pending_end, __ATOMIC_RELEASE);
	return j->ctl->lsn_base + j->pending_end;
}

/* Both under the pool mutex, so committing is 0 or 1 and exact: the holder
 * is inside an operation.  A holder that dies there is cleared by the next
 * one (take_lock), so the flag cannot stay set. */
void journal_enter(struct journal *j)
{
	__atomic_store_n(&j->ctl->committing, 1, __ATOMIC_RELAXED);
}

void journal_leave(struct journal *j)
{
	__atomic_store_n(&j->ctl->committing, 0, __ATOMIC_RELEASE);
}

/* Group commit.  An operation takes a few microseconds and a flush about a
 * hundred, so a flush that starts while another operation is under way
 * waits for it to stage its record: two committers then share one flush
 * instead of taking turns.  Bounded: a process that died in between, or
 * an operation longer than a flush, costs at most GROUP_WAIT_NS. */
#define GROUP_WAIT_NS 100000u
static void wait_for_committers(struct journal *j)
{
	if (!__atomic_load_n(&j->ctl->committing, __ATOMIC_ACQUIRE))
		return;
	uint64_t until = now_ns() + GROUP_WAIT_NS;
	while (__atomic_load_n(&j->ctl->committing, __ATOMIC_ACQUIRE) && now_ns() < until)
		__builtin_ia32_pause();
}

/* With the flush mutex: the staged records not yet durable, one write and
 * one sync for all of them.  Direct I/O writes whole 512-byte sectors: the
 * first one again (its durable bytes unchanged, so a torn write cannot
 * harm them) and the last one with whatever lies past the staged end,
 * which recovery refuses (another epoch, a wrong pos or crc), or which is
 * a record being staged right now, whose transaction then merely counts as
 * in flight at the crash. */
static int write_pending(struct journal *j)
{
	if (j->sync_each_op)
		wait_for_committers(j);
	uint64_t end = __atomic_load_n(&j->ctl->staged, __ATOMIC_ACQUIRE);
	uint64_t from = j->ctl->durable, to = end;
	if (to <= from)
		return 0;
	if (j->m->dio_fd >= 0) {
		from &= ~511ull;
		to = (to + 511) & ~511ull;
	}
	int err = media_disk_write_sync(j->m, j->rec_off + from, media_ptr(j->m, j->rec_off + from), to - from);
	if (err)
		return err;
	__atomic_store_n(&j->ctl->durable, end, __ATOMIC_RELEASE);
	j->ctl->syncs++;
	return 0;
}

/* A holder that died mid-checkpoint either wrote the new head or did not;
 * the disk says which, and finishing is then only bookkeeping. */
static void finish_dead_checkpoint(struct journal *j)
{
	uint8_t block[KURA_BLOCK];
	if (pread(j->m->disk_fd, block, sizeof block, (off_t)j->head_off) != sizeof block)
		return;
	const struct kura_journal_head *h = current_head(block);
	if (h && h->epoch == j->ctl->epoch + 1 && media_disk_sync(j->m) == 0) {
		/* It may have died before writing the copy's view of the
		 * map-shown blocks home (see checkpoint): the next one does. */
		for (uint64_t w = 0; w < (j->nblocks + 63) / 64; w++)
			j->dirty[w] &= j->map_stores[w];
		memset(j->journaled, 0, j->map_words * 8);
		/* The bitmap it checkpointed is gone: no block goes home ahead
		 * of its record until the next checkpoint. */
		memset(j->home_used, 0xff, j->map_words * 8);
		j->ctl->lsn_base += j->ctl->staged;
		j->ctl->staged = j->ctl->durable = 0;
		j->ctl->epoch = h->epoch;
	}
}

static void lock_flush(struct journal *j)
{
	if (pthread_mutex_lock(&j->ctl->flush) == EOWNERDEAD) {
		finish_dead_checkpoint(j);
		pthread_mutex_consistent(&j->ctl->flush);
	}
}

static void unlock_flush(struct journal *j)
{
	pthread_mutex_unlock(&j->ctl->flush);
	__atomic_add_fetch(&j->ctl->flush_seq, 1, __ATOMIC_RELEASE);
	if (__atomic_load_n(&j->ctl->sleepers, __ATOMIC_ACQUIRE))
		syscall(SYS_futex, &j->ctl->flush_seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int durable_past(const struct journal *j, uint64_t lsn)
{
	return __atomic_load_n(&j->ctl->durable, __ATOMIC_ACQUIRE) + j->ctl->lsn_base >= lsn;
}

/* A follower, whose record someone else's flush may carry, sleeps until
 * a flush ends instead of queueing on the flush mutex: the mutex is not
 * fair, and a thread that flushes, commits again and flushes again would
 * take it back before a queued follower woke, so the follower, its record
 * long durable, waited flush after flush.  The sleep is bounded (a holder
 * that died never bumps flush_seq; the robust mutex then tells trylock). */
static int lock_flush_or_durable(struct journal *j, uint64_t lsn)
{
	for (;;) {
		if (durable_past(j, lsn))
			return 0;
		uint32_t seq = __atomic_load_n(&j->ctl->flush_seq, __ATOMIC_ACQUIRE);
		int r = pthread_mutex_trylock(&j->ctl->flush);
		if (r == EOWNERDEAD) {
			finish_dead_checkpoint(j);
			pthread_mutex_consistent(&j->ctl->flush);
		}
		if (r == 0 || r == EOWNERDEAD)
			return 1;
		struct timespec bound = { 0, 2000000 };
		__atomic_add_fetch(&j->ctl->sleepers, 1, __ATOMIC_ACQ_REL);
		syscall(SYS_futex, &j->ctl->flush_seq, FUTEX_WAIT, seq, &bound, NULL, 0);
		__atomic_sub_fetch(&j->ctl->sleepers, 1, __ATOMIC_RELEASE);
	}
}

int journal_sync(struct journal *j, uint64_t lsn)
{
	int err = 0;
	if (!lsn) {
		lock_flush(j);
		err = write_pending(j);
		unlock_flush(j);
	} else if (lock_flush_or_durable(j, lsn)) {
		if (!durable_past(j, lsn))
			err = write_pending(j);
		unlock_flush(j);
	}
	return err ? err : j->m->io_err ? -EIO : 0;
}

int journal_sync_all(struct journal *j)
{
	return journal_sync(j, 0);
}

/* The super block fields that checking and replaying records look at. */
static struct kura_super region_super(const struct journal *j)
{
	return (struct kura_super){ .log_block = j->head_off / KURA_BLOCK, .log_blocks = j->cap / KURA_BLOCK + 1,
				    .pool_size = j->nblocks * KURA_BLOCK };
}

static int map_shown(const struct journal *j, uint64_t b)
{
	return bit(j->map_stores, b) && kura_fault != FAULT_MAP_HOME_UNRECORDED; /* injected bug: crash tests only */
}

/* ---- checkpoints ------------------------------------------------------------

 * Every dirty block goes home as the last committed transaction left it
 * (t, when a transaction is open, gives those), then a new head retires the
 * records.  Order: records durable, homes durable, head.  A crash before
 * the head is durable replays the old epoch's records onto homes that
 * already hold their bytes, which changes nothing, provided that a home
 * holds no byte newer than the last record to touch it: every block written
 * home outside a record (write_fresh_home, a seal's home blocks) was
 * written before any record of the epoch touched it, so in each byte the
 * last record to touch it has the final say.
 *
 * A block a writable map has shown breaks that proviso: the map stores
 * into the copy without telling kura, so the copy may hold bytes that no
 * record carries, after records that touched the same page.  Written home
 * as the copy shows it, such a page would come back from a crash before
 * the head half old and half new: the records undo the bytes they cover
 * and leave the rest.  So it goes home as recovery would rebuild it (its
 * home as on the disk, then every record of the epoch in order), and, if
 * the copy shows it otherwise, it is carried: the new epoch's first record
 * takes it whole (carry_blocks).  A crash then shows the page as rebuilt or
 * as the copy showed it, never part of each, as the explorer's oracle for
 * a map write in flight demands (a page at a time).  A map may show a
 * block across epochs, so the mark stays until the block is allocated
 * again (journal_forget_map). */

struct rebuild {
	const uint64_t *blocks; /* ascending */
	size_t n;
	uint8_t *buf;           /* n blocks */
};

static void apply_rebuild(void *ctx, uint64_t off, const void *src, uint32_t len)
{
	const struct rebuild *r = ctx;
	for (uint64_t b = off >> KURA_BLOCK_SHIFT; b <= (off + len - 1) >> KURA_BLOCK_SHIFT; b++) {
		const uint64_t *hit = bsearch(&b, r->blocks, r->n, sizeof *r->blocks, cmp_block);
		if (!hit)
			continue;
		uint64_t start = b << KURA_BLOCK_SHIFT, from = off > start ? off : start,
			 to = off + len < start + KURA_BLOCK ? off + len : start + KURA_BLOCK;
		memcpy(r->buf + (size_t)(hit - r->blocks) * KURA_BLOCK + (from - start), (const uint8_t *)src + (from - off),
		       to - from);
	}
}

static int read_home(struct journal *j, uint64_t b, uint8_t *to)
{
	ssize_t n = pread(j->m->disk_fd, to, KURA_BLOCK, (off_t)(b << KURA_BLOCK_SHIFT));
	return n == KURA_BLOCK ? 0 : n < 0 ? -errno : -EIO;
}

/* Writes blocks home as recovery would rebuild them now. */
static int write_rebuilt(struct journal *j, const uint64_t *blocks, size_t n, uint8_t *buf)
{
	int err = 0;
	for (size_t i = 0; i < n && !err; i++)
		err = read_home(j, blocks[i], buf + i * KURA_BLOCK);
	if (err)
		return err;
	struct kura_super sb = region_super(j);
	struct rebuild r = { blocks, n, buf };
	replay_region(&sb, media_ptr(j->m, j->head_off), j->ctl->epoch, apply_rebuild, &r);
	for (size_t i = 0; i < n && !err; i++)
		err = media_disk_write(j->m, blocks[i] << KURA_BLOCK_SHIFT, buf + i * KURA_BLOCK, KURA_BLOCK);
	return err;
}

/* Runs body for each dirty block b that a map has shown. */
#define FOR_EACH_MAP_SHOWN(j, b, body)                                                              \
	for (uint64_t w_ = 0; w_ < ((j)->nblocks + 63) / 64; w_++)                                  \
		for (uint64_t m_ = (j)->dirty[w_] & (j)->map_stores[w_]; m_; m_ &= m_ - 1) {        \
			uint64_t b = w_ * 64 + (uint64_t)__builtin_ctzll(m_);                       \
			if (b >= (j)->nblocks || !map_shown(j, b))                                  \
				continue;                                                           \
			body;                                                                       \
		}

/* The copy's view of carried blocks goes into the new epoch's first record
 * (a seal's kind: it belongs to no transaction), whole, so that a crash
 * shows each page as the copy showed it or as rebuilt, never part of one;
 * reserve is the room the caller needs after it.  Blocks that do not fit
 * stay dirty for the next checkpoint; with CARRY_HOME they go home instead
 * (the last unmount, after rounds that did not get them all in). */
#define CARRY_HOME UINT64_MAX
static int carry_blocks(struct journal *j, const struct jtx *t, const uint64_t *carry, size_t n, uint64_t reserve)
{
	int err = 0;
	if (reserve == CARRY_HOME) {
		for (size_t i = 0; i < n && !err; i++)
			err = media_disk_write(j->m, carry[i] << KURA_BLOCK_SHIFT, seal_view(j, t, carry[i]), KURA_BLOCK);
		return err ? err : media_disk_sync(j->m);
	}
	uint64_t pos = j->ctl->staged, used = pos + sizeof(struct kura_jrec) + reserve, k = 0;
	if (used < j->cap)
		k = (j->cap - used) / item_size(KURA_BLOCK, 0);
	if (k > n)
		k = n;
	for (size_t i = k; i < n; i++)
		mark_dirty(j, carry[i] << KURA_BLOCK_SHIFT, KURA_BLOCK);
	if (!k)
		return 0;
	uint64_t at = j->rec_off + pos + sizeof(struct kura_jrec);
	for (size_t i = 0; i < k; i++)
		put_item_from(j, &at, carry[i] << KURA_BLOCK_SHIFT, KURA_BLOCK, 0, seal_view(j, t, carry[i]));
	finish_record(j, pos, at, SEAL_UNDO_EPOCH);
	__atomic_store_n(&j->ctl->staged, at - j->rec_off, __ATOMIC_RELEASE);
	return 0;
}

/* The bitmap of the state a checkpoint writes home: which blocks are free
 * there, and so may go home ahead of a record this epoch. */
static void snapshot_bitmap(struct journal *j, const struct jtx *t)
{
	uint64_t bytes = j->map_words * 8;
	for (uint64_t done = 0; done < bytes; done += KURA_BLOCK)
		memcpy((uint8_t *)j->home_used + done, seal_view(j, t, (j->bitmap_off + done) >> KURA_BLOCK_SHIFT),
		       bytes - done < KURA_BLOCK ? bytes - done : KURA_BLOCK);
}

static int checkpoint(struct journal *j, const struct jtx *t, uint64_t reserve)
{
	enum { RUN = 64 };
	static __thread uint8_t buf[RUN * KURA_BLOCK];
	/* Every change in a record first: homes may take only journaled bytes. */
	int err = seal(j, t);
	if (err)
		return err;
	lock_flush(j);
	err = write_pending(j);
	for (uint64_t b = 0; b < j->nblocks && !err;) {
		if (!(j->dirty[b / 64] >> (b % 64) & 1) || map_shown(j, b)) {
			b = j->dirty[b / 64] >> (b % 64) ? b + 1 : (b | 63) + 1;
			continue;
		}
		uint64_t n = 0;
		while (b + n < j->nblocks && n < RUN && (j->dirty[(b + n) / 64] >> ((b + n) % 64) & 1) &&
		       !map_shown(j, b + n)) {
			if (t)
				t->committed(t->ctx, b + n, buf + n * KURA_BLOCK);
			n++;
		}
		err = media_disk_write(j->m, b << KURA_BLOCK_SHIFT, t ? buf : media_ptr(j->m, b << KURA_BLOCK_SHIFT), n * KURA_BLOCK);
		b += n;
	}
	uint64_t shown[RUN];
	size_t nshown = 0;
	FOR_EACH_MAP_SHOWN(j, b, {
		if (err)
			break;
		shown[nshown++] = b;
		if (nshown == RUN) {
			err = write_rebuilt(j, shown, nshown, buf);
			nshown = 0;
		}
	});
	if (!err && nshown)
		err = write_rebuilt(j, shown, nshown, buf);
	/* FAULT_CHECKPOINT_EARLY: an injected bug (crash tests only) */
	if (!err && kura_fault != FAULT_CHECKPOINT_EARLY)
		err = media_disk_sync(j->m);
	if (!err) {
		struct kura_super sb = { .log_block = j->head_off / KURA_BLOCK };
		err = write_head(j->m, &sb, j->ctl->epoch + 1, j->ctl->nonce);
	}
	uint64_t *carry = NULL;
	size_t ncarry = 0;
	if (!err) {
		/* Retired.  Which map-shown blocks the copy shows otherwise than
		 * their homes now hold: those are carried. */
		size_t cap = 0;
		FOR_EACH_MAP_SHOWN(j, b, {
			if (err)
				break;
			if ((err = read_home(j, b, buf)) || !memcmp(buf, seal_view(j, t, b), KURA_BLOCK))
				continue;
			if (ncarry == cap) {
				uint64_t *more = realloc(carry, (cap = cap ? cap * 2 : 16) * sizeof *carry);
				if (!more) {
					err = -ENOMEM;
					break;
				}
				carry = more;
			}
			carry[ncarry++] = b;
		});
		/* A carry that failed leaves the map-shown blocks dirty, for the
		 * next checkpoint to write home. */
		for (uint64_t w = 0; w < (j->nblocks + 63) / 64; w++)
			j->dirty[w] &= err ? j->map_stores[w] : 0;
		memset(j->journaled, 0, j->map_words * 8);
		snapshot_bitmap(j, t);
		j->ctl->lsn_base += j->ctl->staged;
		j->ctl->staged = j->ctl->durable = 0;
		j->ctl->epoch++;
		j->ctl->checkpoints++;
	}
	if (!err && ncarry)
		err = carry_blocks(j, t, carry, ncarry, reserve);
	free(carry);
	unlock_flush(j);
	return err;
}

static int carried_left(const struct journal *j)
{
	for (uint64_t w = 0; w < (j->nblocks + 63) / 64; w++)
		if (j->dirty[w] & j->map_stores[w])
			return 1;
	return 0;
}

int journal_checkpoint(struct journal *j)
{
	/* The last mount out removes the copy next: carried blocks must reach
	 * the disk.  Each round records those that fit and writes them home in
	 * the next, until a round carries none; a map storing all along (it
	 * cannot at the last unmount, but the bound does not rely on that)
	 * ends with them written home. */
	enum { ROUNDS = 8 };
	int err = checkpoint(j, NULL, 0);
	for (int round = 1; !err && (j->ctl->staged || carried_left(j)); round++)
		err = checkpoint(j, NULL, round < ROUNDS ? 0 : CARRY_HOME);
	return err;
}

void journal_repair(struct journal *j, uint64_t undo_head_epoch)
{
	/* A holder that died mid-checkpoint holds the flush mutex too: finish
	 * its checkpoint now, before this holder stages anything in an epoch
	 * that finishing it would then discard. */
	lock_flush(j);
	unlock_flush(j);
	uint64_t pos = j->ctl->staged;
	const uint8_t *rec = media_ptr(j->m, j->rec_off + pos);
	struct kura_super sb = region_super(j);
	uint32_t len = rec_check(&sb, rec, j->cap - pos, j->ctl->epoch, pos);
	if (!len)
		return;
	const struct kura_jrec *r = (const void *)rec;
	if (r->undo_epoch != SEAL_UNDO_EPOCH && r->undo_epoch + 1 == undo_head_epoch) {
		for (uint32_t at = sizeof *r; at < len;) {
			const struct kura_jitem *it = (const void *)(rec + at);
			mark_journaled(j, it->off, it->len);
			at += item_stored(it);
		}
		__atomic_store_n(&j->ctl->staged, pos + len, __ATOMIC_RELEASE);
	} else {
		static const struct kura_jrec none;
		media_store(j->m, j->rec_off + pos, &none, sizeof none);
	}
}

/* ---- other back ends ------------------------------------------------------- */

static void apply_mapped(void *ctx, uint64_t off, const void *src, uint32_t len)
{
	media_store(ctx, off, src, len);
	media_flush(ctx, off, len);
}

int journal_is_journal(const struct media *m, const struct kura_super *sb)
{
	return current_head(media_ptr(m, sb->log_block * KURA_BLOCK)) != NULL;
}

int journal_replay_mapped(struct media *m, const struct kura_super *sb)
{
	const uint8_t *region = media_ptr(m, sb->log_block * KURA_BLOCK);
	const struct kura_journal_head *h = current_head(region);
	if (!h)
		return 0;
	int n = replay_region(sb, region, h->epoch, apply_mapped, m);
	media_fence(m);
	return n;
}
