/* journal_recover.c — recovery of the file back end at its first mount:
 * the journal's committed records replayed onto the pool file, or a log
 * still in the undo format rolled back (see journal_int.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static int journal_undo_legacy(int pool_fd, const struct kura_super *sb);

static void apply_disk(void *ctx, uint64_t off, const void *src, uint32_t len)
{
	media_disk_write(ctx, off, src, len);
}


/* Reads [have, want) of the log region into buf. */
static int read_part(int fd, const struct kura_super *sb, uint8_t *buf, uint64_t *have, uint64_t want)
{
	while (*have < want) {
		ssize_t n = pread(fd, buf + *have, want - *have, (off_t)(sb->log_block * KURA_BLOCK + *have));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		*have += (uint64_t)n;
	}
	return 0;
}

/* The log region, read as far as replay will look: up to the first record
 * that is not valid, and no further (a record cut off by the end of what
 * was read is read whole first).  A pool unmounted cleanly has no record
 * of its current epoch, and reading all of the region (16 MiB by default)
 * was most of what starting a program on a disk pool cost.  The rest of
 * the buffer stays zero, which no check takes for a record. */
#define REGION_FIRST_READ (256u * 1024)
static int read_region(int fd, const struct kura_super *sb, uint8_t **out)
{
	uint64_t len = sb->log_blocks * KURA_BLOCK, have = 0;
	uint8_t *buf = calloc(1, len); /* fresh zero pages: only those read into are touched */
	if (!buf)
		return -ENOMEM;
	int err = read_part(fd, sb, buf, &have, len < REGION_FIRST_READ ? len : REGION_FIRST_READ);
	const struct kura_journal_head *h = err ? NULL : jn_current_head(buf);
	for (uint64_t pos = 0, cap = len - KURA_BLOCK; h && !err && have < len;) {
		const uint8_t *rec = buf + KURA_BLOCK + pos;
		uint64_t got = have - KURA_BLOCK - pos;
		uint32_t n = jn_rec_check(sb, rec, got, h->epoch, pos);
		if (n) {
			pos += n;
			continue;
		}
		const struct kura_jrec *r = (const void *)rec;
		uint64_t need;
		if (got < sizeof *r)
			need = pos + sizeof *r;
		else if (r->epoch == h->epoch && r->pos == pos && r->len > got && r->len <= cap - pos)
			need = pos + r->len;
		else
			break; /* the end of the records */
		uint64_t want = KURA_BLOCK + need > 2 * have ? KURA_BLOCK + need : 2 * have;
		err = read_part(fd, sb, buf, &have, want < len ? want : len);
	}
	if (err) {
		free(buf);
		return err;
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
int jn_recover_disk(int pool_fd, const struct kura_super *sb, uint64_t *nonce, uint64_t *epoch, char *why,
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
	const struct kura_journal_head *h = jn_current_head(region);
	uint64_t next = 1;
	journal_replayed = 0;
	if (h) {
		journal_replayed = jn_replay_region(sb, region, h->epoch, apply_disk, &dm);
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
		err = jn_write_head(&dm, sb, next, *nonce);
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
