/*
 * kv.c — a key-value store in one file (kv.h; README.md says why it is
 * built this way).
 *
 * The file: a header page (magic, log tail, key count, batches committed),
 * then a log of records, each a put or a removal (a tombstone), appended
 * one after another: 4 bytes (key length, value length, flags), the key,
 * the value, padded to 8 bytes.  The whole file is mapped MAP_SHARED; a
 * change is a record stored at the log's tail and the header's tail moved
 * past it.  An index in memory (open addressing, key hash to the offset of
 * the key's latest record) is rebuilt at kv_open by reading the log, and a
 * get is a probe of it and a copy out of the map.
 *
 * Under kura a batch is an atomic group on the file's descriptor
 * (kura_atomic_fbegin at the batch's first change; kura_atomic_fcommit at
 * kv_sync): the stores go to the group's own copies of the pages they
 * touch, and the commit makes them the file's, all at once and durably.  A
 * batch of appends touches the pages its records fill, one per 30-odd
 * records, and the header page.  A crash, or a kill, before the commit
 * leaves the file as the last commit left it; kv_abort discards the group
 * and undoes the batch's changes to the index (a list of them is kept).
 *
 * The log grows between batches only: a batch begins with room for
 * max_batch records of the largest size (up to MAX_RESERVE bytes), else the
 * file is extended first (no group: nothing points there yet; ftruncate, a
 * sync, a new map).  A batch that still runs out (max_batch beyond the
 * reserve) gets -ENOSPC.  The log is never compacted.
 */
#define _GNU_SOURCE
#include "kv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura_atomic.h"

#define PAGE 4096
#define MAGIC "kuraKV02"
#define VERSION 2
#define DEFAULT_CAPACITY 16384
#define DEFAULT_MAX_BATCH 16384
#define LOG_OFF PAGE                     /* the log starts after the header page */
#define MIN_LOG (256 * 1024)             /* bytes of log in a new file, at least */
#define MAX_RESERVE (UINT64_C(64) << 20) /* room a batch begins with, at most */
#define MIN_INDEX 1024

#define REC_TOMB 1 /* rec.flags: the key is removed */

struct rec {
	uint8_t klen, vlen, flags, pad;
	uint8_t data[]; /* key, then value */
};

#define REC_MAX ((sizeof(struct rec) + KV_MAX_KEY + KV_MAX_VAL + 7) & ~(size_t)7)

static size_t rec_size(size_t klen, size_t vlen)
{
	return (sizeof(struct rec) + klen + vlen + 7) & ~(size_t)7;
}

struct header {
	char magic[8];
	uint32_t version, max_key, max_val, pad;
	uint64_t log_off; /* where the log starts: LOG_OFF */
	uint64_t tail;    /* where it ends: the next record's offset */
	uint64_t count;   /* keys */
	uint64_t batches; /* batches committed */
};

/* An index entry: off 0 is an empty one (no record lives at 0). */
struct ient {
	uint64_t h, off;
};

/* What a change of the current batch replaced: the key's record before it
 * (0: none).  The change's own record, at new, names the key. */
struct undo {
	uint64_t new, old;
};

struct kv {
	int fd;
	int atomic;   /* KV_ATOMIC: kura groups the descriptor's writes */
	int in_batch; /* the current batch has begun (under kura: a group is open) */
	uint32_t changes, max_batch;
	uint8_t *map; /* the file, mapped: the header, then the log */
	uint64_t size;  /* bytes mapped: the file's size */
	struct header *h;
	struct ient *ix; /* the index */
	uint64_t mask;   /* its size - 1, a power of two */
	uint64_t used;   /* entries used: keys */
	struct undo *undo;
	uint32_t nundo, undo_cap;
};

static int neg_errno(void)
{
	return errno ? -errno : -EIO;
}

static uint64_t hash(const uint8_t *p, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull), w;
	for (; n >= 8; p += 8, n -= 8) {
		memcpy(&w, p, 8);
		h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
		h ^= h >> 31;
	}
	w = 0;
	memcpy(&w, p, n);
	h = (h ^ w) * 0x94d049bb133111ebull;
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ull;
	return h ^ (h >> 32);
}

static struct rec *rec_at(const kv *db, uint64_t off)
{
	return (struct rec *)(db->map + off);
}

/* The index entry for key, or the empty one where it would go (*found 0). */
static struct ient *ix_find(const kv *db, const void *key, size_t klen, uint64_t h, int *found)
{
	for (uint64_t i = h & db->mask;; i = (i + 1) & db->mask) {
		struct ient *e = &db->ix[i];
		if (!e->off) {
			*found = 0;
			return e;
		}
		if (e->h == h) {
			struct rec *r = rec_at(db, e->off);
			if (r->klen == klen && memcmp(r->data, key, klen) == 0) {
				*found = 1;
				return e;
			}
		}
	}
}

/* Removes e, shifting the entries of its run back (no tombstones). */
static void ix_remove(kv *db, struct ient *e)
{
	uint64_t i = (uint64_t)(e - db->ix), j = i;
	for (;;) {
		j = (j + 1) & db->mask;
		struct ient *n = &db->ix[j];
		if (!n->off)
			break;
		uint64_t home = n->h & db->mask;
		/* n may move to i if its home is not in (i, j] (cyclically). */
		if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
			db->ix[i] = *n;
			i = j;
		}
	}
	db->ix[i].off = 0;
	db->ix[i].h = 0;
	db->used--;
}

static int ix_resize(kv *db, uint64_t n)
{
	struct ient *nx = calloc(n, sizeof *nx), *old = db->ix;
	if (!nx)
		return -ENOMEM;
	uint64_t old_n = old ? db->mask + 1 : 0;
	db->ix = nx;
	db->mask = n - 1;
	for (uint64_t i = 0; i < old_n; i++) {
		if (!old[i].off)
			continue;
		uint64_t k = old[i].h & db->mask;
		while (nx[k].off)
			k = (k + 1) & db->mask;
		nx[k] = old[i];
	}
	free(old);
	return 0;
}

/* Room for one more key in the index (at most half full). */
static int ix_room(kv *db)
{
	if ((db->used + 1) * 2 <= db->mask + 1)
		return 0;
	return ix_resize(db, (db->mask + 1) * 2);
}

/* Points key (whose record is at off, or none: off 0) in the index;
 * returns the offset it pointed to before (0: none).  Needs ix_room. */
static uint64_t ix_set(kv *db, const void *key, size_t klen, uint64_t h, uint64_t off)
{
	int found;
	struct ient *e = ix_find(db, key, klen, h, &found);
	uint64_t old = found ? e->off : 0;
	if (off) {
		if (!found)
			db->used++;
		e->h = h;
		e->off = off;
	} else if (found) {
		ix_remove(db, e);
	}
	return old;
}

static void *map(int fd, uint64_t len)
{
	return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
}

/* No batch is open.  Extends the file to size bytes (zeros past the tail:
 * nothing points there) and maps it anew. */
static int grow(kv *db, uint64_t size)
{
	if (ftruncate(db->fd, (off_t)size))
		return neg_errno();
	/* The size durable before any group stores past the old end (no
	 * group is open: an fdatasync). */
	if (kura_atomic_fcommit(db->fd))
		return neg_errno();
	uint8_t *m = map(db->fd, size);
	if (m == MAP_FAILED)
		return neg_errno();
	munmap(db->map, db->size);
	db->map = m;
	db->size = size;
	db->h = (struct header *)m;
	return 0;
}

static uint64_t reserve(const kv *db)
{
	uint64_t r = (uint64_t)db->max_batch * REC_MAX;
	return r < MAX_RESERVE ? r : MAX_RESERVE;
}

/* Before a batch's first change: make room in the log if need be, then
 * open the batch's group. */
static int begin_batch(kv *db)
{
	if (db->in_batch)
		return 0;
	uint64_t want = db->h->tail + reserve(db);
	if (want > db->size) {
		uint64_t n = db->size * 2;
		if (n < want)
			n = want;
		n = (n + PAGE - 1) & ~(uint64_t)(PAGE - 1);
		int r = grow(db, n);
		if (r)
			return r;
	}
	if (db->atomic) {
		int g = kura_atomic_fbegin(db->fd);
		if (g != 1)
			return g < 0 ? neg_errno() : -ENOTSUP;
	}
	db->in_batch = 1;
	db->changes = 0;
	db->nundo = 0;
	return 0;
}

static int check_header(const struct header *h, uint64_t size)
{
	if (memcmp(h->magic, MAGIC, 8) || h->version != VERSION || h->max_key != KV_MAX_KEY ||
	    h->max_val != KV_MAX_VAL || h->log_off != LOG_OFF)
		return -EBADMSG;
	if (h->tail < h->log_off || h->tail > size || h->tail % 8)
		return -EBADMSG;
	return 0;
}

/* A new store in the empty file fd: created in one group under kura. */
static int create(int fd, uint64_t capacity)
{
	uint64_t log = capacity < MIN_LOG / REC_MAX ? MIN_LOG : capacity * REC_MAX;
	if (log > (UINT64_C(1) << 40))
		log = UINT64_C(1) << 40;
	log = (log + PAGE - 1) & ~(uint64_t)(PAGE - 1);
	struct header h = { .version = VERSION, .max_key = KV_MAX_KEY, .max_val = KV_MAX_VAL, .log_off = LOG_OFF,
			    .tail = LOG_OFF };
	memcpy(h.magic, MAGIC, 8);
	int g = kura_atomic_fbegin(fd);
	if (g < 0)
		return neg_errno();
	if (ftruncate(fd, (off_t)(LOG_OFF + log)) || pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h ||
	    kura_atomic_fcommit(fd)) {
		int r = neg_errno();
		if (g)
			kura_atomic_fabort(fd);
		return r;
	}
	return 0;
}

static int sync_dir(const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	char *slash = strrchr(copy, '/');
	const char *dir = slash ? (slash == copy ? "/" : (*slash = 0, copy)) : ".";
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;
	if (dfd < 0 || fsync(dfd))
		r = neg_errno();
	if (dfd >= 0)
		close(dfd);
	free(copy);
	return r;
}

/* Reads the log into the index. */
static int scan(kv *db)
{
	uint64_t off = db->h->log_off, tail = db->h->tail;
	while (off < tail) {
		if (tail - off < sizeof(struct rec))
			return -EBADMSG;
		struct rec *r = rec_at(db, off);
		size_t n = rec_size(r->klen, r->vlen);
		if (r->klen > KV_MAX_KEY || r->vlen > KV_MAX_VAL || r->flags > REC_TOMB || n > tail - off)
			return -EBADMSG;
		int e = ix_room(db);
		if (e)
			return e;
		ix_set(db, r->data, r->klen, hash(r->data, r->klen), r->flags & REC_TOMB ? 0 : off);
		off += n;
	}
	return db->used == db->h->count ? 0 : -EBADMSG;
}

int kv_open(const char *path, const struct kv_options *opt, kv **out)
{
	struct kv_options o = opt ? *opt : (struct kv_options){ 0 };
	uint64_t capacity = o.capacity ? o.capacity : DEFAULT_CAPACITY;
	*out = NULL;
	kv *db = calloc(1, sizeof *db);
	if (!db)
		return -ENOMEM;
	db->max_batch = o.max_batch ? o.max_batch : DEFAULT_MAX_BATCH;
	db->map = MAP_FAILED;
	int r;
	struct stat st;
	db->fd = open(path, O_RDWR | O_CLOEXEC | (o.no_create ? 0 : O_CREAT), 0644);
	if (db->fd < 0) {
		r = neg_errno();
		goto fail;
	}
	if (flock(db->fd, LOCK_EX | LOCK_NB)) {
		r = errno == EWOULDBLOCK ? -EBUSY : neg_errno();
		goto fail;
	}
	if (fstat(db->fd, &st)) {
		r = neg_errno();
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		r = -EINVAL;
		goto fail;
	}
	if (st.st_size == 0) {
		if ((r = create(db->fd, capacity)) || (r = sync_dir(path)) || (r = fstat(db->fd, &st) ? neg_errno() : 0))
			goto fail;
	}
	struct header h;
	if (pread(db->fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
		r = st.st_size < (off_t)sizeof h ? -EBADMSG : neg_errno();
		goto fail;
	}
	if ((r = check_header(&h, (uint64_t)st.st_size)))
		goto fail;
	db->size = (uint64_t)st.st_size;
	db->map = map(db->fd, db->size);
	if (db->map == MAP_FAILED) {
		r = neg_errno();
		goto fail;
	}
	db->h = (struct header *)db->map;
	uint64_t n = MIN_INDEX;
	while (n / 2 < capacity && n / 2 < h.count + 1 && n < (UINT64_C(1) << 40))
		n *= 2;
	if ((r = ix_resize(db, n)) || (r = scan(db)))
		goto fail;
	/* Does kura group this file's writes?  Ask, and leave no group. */
	int g = kura_atomic_fbegin(db->fd);
	if (g < 0) {
		r = neg_errno();
		goto fail;
	}
	if (g && kura_atomic_fabort(db->fd)) {
		r = neg_errno();
		goto fail;
	}
	db->atomic = g ? KV_ATOMIC : 0;
	*out = db;
	return db->atomic;
fail:
	if (db->map != MAP_FAILED)
		munmap(db->map, db->size);
	if (db->fd >= 0)
		close(db->fd);
	free(db->ix);
	free(db);
	return r;
}

int kv_sync(kv *db)
{
	if (!db->in_batch || !db->changes)
		return 0;
	db->h->batches++;
	if (kura_atomic_fcommit(db->fd)) {
		int r = neg_errno();
		db->h->batches--; /* the batch stays open (kura.h), to retry or abort */
		return r;
	}
	db->in_batch = 0;
	db->changes = 0;
	db->nundo = 0;
	return 0;
}

int kv_abort(kv *db)
{
	if (!db->atomic)
		return -ENOTSUP;
	if (!db->in_batch)
		return 0;
	/* Undo the index's changes, latest first, while the map still shows
	 * the batch's records (they name the keys). */
	for (uint32_t i = db->nundo; i-- > 0;) {
		struct rec *r = rec_at(db, db->undo[i].new);
		ix_set(db, r->data, r->klen, hash(r->data, r->klen), db->undo[i].old);
	}
	db->nundo = 0;
	if (kura_atomic_fabort(db->fd))
		return neg_errno();
	db->in_batch = 0;
	db->changes = 0;
	return 0;
}

int kv_close(kv *db)
{
	int r = kv_sync(db);
	if (db->in_batch && db->atomic)
		kura_atomic_fabort(db->fd); /* an empty group, or one that failed */
	munmap(db->map, db->size);
	if (close(db->fd) && !r)
		r = neg_errno();
	free(db->ix);
	free(db->undo);
	free(db);
	return r;
}

static int check_lengths(const void *key, size_t klen, const void *val, size_t vlen)
{
	if (klen > KV_MAX_KEY || vlen > KV_MAX_VAL || (klen && !key) || (vlen && !val))
		return -EINVAL;
	return 0;
}

/* Appends a record (val NULL: a tombstone) and points the index at it.
 * The batch is open and has room for a change. */
static int append(kv *db, const void *key, size_t klen, const void *val, size_t vlen, uint64_t h)
{
	struct header *hd = db->h;
	size_t n = rec_size(klen, vlen);
	if (n > db->size - hd->tail)
		return -ENOSPC;
	if (db->nundo == db->undo_cap) {
		uint32_t c = db->undo_cap ? db->undo_cap * 2 : 256;
		struct undo *u = realloc(db->undo, c * sizeof *u);
		if (!u)
			return -ENOMEM;
		db->undo = u;
		db->undo_cap = c;
	}
	int r = ix_room(db);
	if (r)
		return r;
	uint64_t off = hd->tail;
	struct rec *rec = rec_at(db, off);
	rec->klen = (uint8_t)klen;
	rec->vlen = (uint8_t)vlen;
	rec->flags = val ? 0 : REC_TOMB;
	rec->pad = 0;
	memcpy(rec->data, key, klen);
	if (vlen)
		memcpy(rec->data + klen, val, vlen);
	hd->tail = off + n;
	uint64_t old = ix_set(db, key, klen, h, val ? off : 0);
	hd->count += (uint64_t)(val && !old) - (uint64_t)(!val && old);
	db->undo[db->nundo++] = (struct undo){ off, old };
	db->changes++;
	return 0;
}

int kv_put(kv *db, const void *key, size_t klen, const void *val, size_t vlen, int flags)
{
	int r = check_lengths(key, klen, val, vlen);
	if (r || (r = begin_batch(db)))
		return r;
	if (db->changes >= db->max_batch)
		return -E2BIG;
	static const uint8_t none;
	if ((r = append(db, key, klen, val ? val : &none, vlen, hash(key, klen))))
		return r;
	return flags & KV_SYNC ? kv_sync(db) : 0;
}

int kv_get(kv *db, const void *key, size_t klen, void *val, size_t cap, size_t *vlen)
{
	int r = check_lengths(key, klen, val, 0);
	if (r)
		return r;
	int found;
	struct ient *e = ix_find(db, key, klen, hash(key, klen), &found);
	if (!found)
		return -ENOENT;
	struct rec *s = rec_at(db, e->off);
	if (vlen)
		*vlen = s->vlen;
	if (cap < s->vlen)
		return -ERANGE;
	memcpy(val, s->data + s->klen, s->vlen);
	return 0;
}

int kv_del(kv *db, const void *key, size_t klen, int flags)
{
	int r = check_lengths(key, klen, NULL, 0);
	if (r)
		return r;
	uint64_t h = hash(key, klen);
	int found;
	ix_find(db, key, klen, h, &found);
	if (!found)
		return -ENOENT;
	if ((r = begin_batch(db))) /* may move the map */
		return r;
	if (db->changes >= db->max_batch)
		return -E2BIG;
	if ((r = append(db, key, klen, NULL, 0, h)))
		return r;
	return flags & KV_SYNC ? kv_sync(db) : 0;
}

int kv_flags(const kv *db)
{
	return db->atomic;
}

uint64_t kv_count(const kv *db)
{
	return db->h->count;
}

uint64_t kv_batches(const kv *db)
{
	return db->h->batches;
}

const char *kv_strerror(int err)
{
	switch (err) {
	case -EBADMSG:
		return "not a kv store, or a damaged one";
	case -EBUSY:
		return "the store is open in another process";
	case -E2BIG:
		return "the batch is full (max_batch changes): kv_sync, then retry";
	case -ENOSPC:
		return "no space: the log is full within this batch (kv_sync lets it grow, then retry), or the file system is full";
	case -EINVAL:
		return "invalid argument (a key longer than 20 bytes or a value longer than 100?)";
	case -ENOTSUP:
		return "not supported: batches are not atomic here (no kura)";
	}
	return strerror(-err);
}
