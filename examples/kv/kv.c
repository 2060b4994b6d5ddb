/*
 * kv.c — a key-value store in one file (kv.h; README.md says why it is
 * built this way).
 *
 * The file: a header page, then a table of nslots slots of 128 bytes (a
 * power of two of them, 32 to a page), open addressing with linear probing.
 * Both are mapped MAP_SHARED, and a change is a few stores into the map.
 * Under kura a batch is an atomic group on the file's descriptor
 * (kura_atomic_fbegin at the batch's first change; kura_atomic_fcommit at
 * kv_sync): the stores go to the group's own copies of the pages they
 * touch, and the commit makes them the file's, all at once and durably.
 * A crash, or a kill, before the commit leaves the file as the last commit
 * left it.
 *
 * The table grows between batches only, when a batch begins with more than
 * half the slots used (keys and tombstones): the live keys are copied into
 * a new table, larger if need be, in a free part of the file (no group:
 * nothing points there yet), the file is synced, and one small group
 * switches the header to it.  The old table's blocks are then given back
 * (a punched hole).
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
#define MAGIC "kuraKV01"
#define VERSION 1
#define DEFAULT_CAPACITY 16384
#define DEFAULT_MAX_BATCH 16384
#define MIN_SLOTS 1024

/* Slot tags: 0 empty, 1 removed (a tombstone), else from the key's hash. */
#define EMPTY 0
#define TOMB 1

struct slot {
	uint32_t tag;
	uint8_t klen, vlen;
	uint8_t pad[2];
	uint8_t key[KV_MAX_KEY];
	uint8_t val[KV_MAX_VAL];
};
_Static_assert(sizeof(struct slot) == 128, "a slot is 128 bytes: 32 to a page, none across two");

struct header {
	char magic[8];
	uint32_t version, slot_size;
	uint32_t max_key, max_val;
	uint64_t nslots;    /* a power of two */
	uint64_t table_off; /* where the table starts, a page boundary */
	uint64_t count;     /* keys */
	uint64_t used;      /* slots not empty: keys and tombstones */
	uint64_t batches;   /* batches committed */
};

struct kv {
	int fd;
	int atomic;   /* KV_ATOMIC: kura groups the descriptor's writes */
	int in_batch; /* the current batch has begun (under kura: a group is open) */
	uint32_t changes, max_batch;
	struct header *h; /* the header page, mapped */
	struct slot *slots;
	uint64_t mask; /* nslots - 1, as mapped */
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

static uint32_t tag_of(uint64_t h)
{
	uint32_t t = (uint32_t)(h >> 32);
	return t < 2 ? t + 2 : t;
}

static uint64_t table_bytes(uint64_t nslots)
{
	return nslots * sizeof(struct slot);
}

/* The slot holding key, or NULL; then *free (if asked) is where it would
 * go: the first tombstone on its probe run, or the empty slot ending it. */
static struct slot *lookup(struct slot *slots, uint64_t mask, const void *key, size_t klen, uint64_t h,
			   struct slot **free)
{
	uint32_t tag = tag_of(h);
	struct slot *tomb = NULL;
	for (uint64_t i = h & mask, n = 0; n <= mask; i = (i + 1) & mask, n++) {
		struct slot *s = &slots[i];
		if (s->tag == EMPTY) {
			if (free)
				*free = tomb ? tomb : s;
			return NULL;
		}
		if (s->tag == TOMB) {
			if (!tomb)
				tomb = s;
		} else if (s->tag == tag && s->klen == klen && memcmp(s->key, key, klen) == 0) {
			return s;
		}
	}
	if (free)
		*free = tomb; /* no empty slot: only a damaged file */
	return NULL;
}

static void *map(int fd, uint64_t off, uint64_t len)
{
	return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
}

/* No batch is open.  Copies the live entries into a new table of nslots
 * in a part of the file the header does not point to, syncs it, and
 * switches the header to it in one group (under kura; without, plain
 * stores and an fdatasync). */
static int grow(kv *db, uint64_t nslots)
{
	struct header *h = db->h;
	uint64_t old_off = h->table_off, old_len = table_bytes(h->nslots), len = table_bytes(nslots);
	/* Below the current table if it fits there (a rehash to the same
	 * size goes back and forth), else after it. */
	uint64_t off = len <= old_off - PAGE ? PAGE : old_off + old_len;
	struct stat st;
	if (fstat(db->fd, &st))
		return neg_errno();
	if ((uint64_t)st.st_size < off + len && ftruncate(db->fd, (off_t)(off + len)))
		return neg_errno();
	struct slot *ns = map(db->fd, off, len);
	if (ns == MAP_FAILED)
		return neg_errno();
	memset(ns, 0, len); /* an old table, or what a growth that died left */
	uint64_t mask = nslots - 1;
	for (uint64_t i = 0; i < h->nslots; i++) {
		struct slot *s = &db->slots[i], *to = NULL;
		if (s->tag == EMPTY || s->tag == TOMB)
			continue;
		lookup(ns, mask, s->key, s->klen, hash(s->key, s->klen), &to);
		*to = *s;
	}
	int r = 0, g;
	if (kura_atomic_fcommit(db->fd)) /* no group: an fdatasync */
		r = neg_errno();
	else if (db->atomic && (g = kura_atomic_fbegin(db->fd)) != 1)
		r = g < 0 ? neg_errno() : -ENOTSUP;
	if (r) {
		munmap(ns, len);
		return r;
	}
	h->table_off = off;
	h->nslots = nslots;
	h->used = h->count;
	if (kura_atomic_fcommit(db->fd)) {
		r = neg_errno();
		if (db->atomic) { /* the header is as it was */
			kura_atomic_fabort(db->fd);
			munmap(ns, len);
			return r;
		}
		/* without kura the stores stand: the map's header is the file's */
	}
	munmap(db->slots, old_len);
	db->slots = ns;
	db->mask = mask;
	/* The old table's blocks go back to the file system (best effort). */
	fallocate(db->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)old_off, (off_t)old_len);
	return r;
}

/* Before a batch's first change: grow the table if need be, then open the
 * batch's group. */
static int begin_batch(kv *db)
{
	if (db->in_batch)
		return 0;
	struct header *h = db->h;
	if (h->used * 2 > h->nslots) {
		uint64_t n = h->nslots;
		while (h->count * 4 > n)
			n *= 2;
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
	return 0;
}

static int check_header(const struct header *h, uint64_t size)
{
	if (memcmp(h->magic, MAGIC, 8) || h->version != VERSION || h->slot_size != sizeof(struct slot) ||
	    h->max_key != KV_MAX_KEY || h->max_val != KV_MAX_VAL)
		return -EBADMSG;
	if (h->nslots < MIN_SLOTS || (h->nslots & (h->nslots - 1)) || h->nslots > (UINT64_C(1) << 40) ||
	    h->table_off < PAGE || h->table_off % PAGE || h->table_off > (UINT64_C(1) << 50) ||
	    h->count > h->used || h->used >= h->nslots)
		return -EBADMSG;
	if (size < h->table_off + table_bytes(h->nslots))
		return -EBADMSG;
	return 0;
}

/* A new store in the empty file fd: created in one group under kura. */
static int create(int fd, uint64_t capacity)
{
	uint64_t n = MIN_SLOTS;
	while (n / 2 < capacity && n < (UINT64_C(1) << 40))
		n *= 2;
	struct header h = { .version = VERSION, .slot_size = sizeof(struct slot), .max_key = KV_MAX_KEY,
			    .max_val = KV_MAX_VAL, .nslots = n, .table_off = PAGE };
	memcpy(h.magic, MAGIC, 8);
	int g = kura_atomic_fbegin(fd);
	if (g < 0)
		return neg_errno();
	if (ftruncate(fd, (off_t)(PAGE + table_bytes(n))) ||
	    pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || kura_atomic_fcommit(fd)) {
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

int kv_open(const char *path, const struct kv_options *opt, kv **out)
{
	struct kv_options o = opt ? *opt : (struct kv_options){ 0 };
	uint64_t capacity = o.capacity ? o.capacity : DEFAULT_CAPACITY;
	*out = NULL;
	kv *db = calloc(1, sizeof *db);
	if (!db)
		return -ENOMEM;
	db->max_batch = o.max_batch ? o.max_batch : DEFAULT_MAX_BATCH;
	db->h = MAP_FAILED;
	db->slots = MAP_FAILED;
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
	uint64_t end = h.table_off + table_bytes(h.nslots);
	if ((uint64_t)st.st_size > end) /* the rest of a growth that did not finish */
		ftruncate(db->fd, (off_t)end);
	db->mask = h.nslots - 1;
	db->h = map(db->fd, 0, PAGE);
	db->slots = map(db->fd, h.table_off, table_bytes(h.nslots));
	if (db->h == MAP_FAILED || db->slots == MAP_FAILED) {
		r = neg_errno();
		goto fail;
	}
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
	if (db->h != MAP_FAILED)
		munmap(db->h, PAGE);
	if (db->slots != MAP_FAILED)
		munmap(db->slots, table_bytes(db->mask + 1));
	if (db->fd >= 0)
		close(db->fd);
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
	return 0;
}

int kv_abort(kv *db)
{
	if (!db->atomic)
		return -ENOTSUP;
	if (!db->in_batch)
		return 0;
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
	munmap(db->h, PAGE);
	munmap(db->slots, table_bytes(db->mask + 1));
	if (close(db->fd) && !r)
		r = neg_errno();
	free(db);
	return r;
}

static int check_lengths(const void *key, size_t klen, const void *val, size_t vlen)
{
	if (klen > KV_MAX_KEY || vlen > KV_MAX_VAL || (klen && !key) || (vlen && !val))
		return -EINVAL;
	return 0;
}

int kv_put(kv *db, const void *key, size_t klen, const void *val, size_t vlen, int flags)
{
	int r = check_lengths(key, klen, val, vlen);
	if (r || (r = begin_batch(db)))
		return r;
	if (db->changes >= db->max_batch)
		return -E2BIG;
	struct header *h = db->h;
	uint64_t hv = hash(key, klen);
	struct slot *to = NULL, *s = lookup(db->slots, db->mask, key, klen, hv, &to);
	if (s) {
		memcpy(s->val, val, vlen);
		s->vlen = (uint8_t)vlen;
	} else {
		if (!to)
			return -EBADMSG;
		int fresh = to->tag == EMPTY;
		if (fresh && (h->used + 1) * 8 > h->nslots * 7)
			return -ENOSPC;
		to->klen = (uint8_t)klen;
		to->vlen = (uint8_t)vlen;
		memcpy(to->key, key, klen);
		memcpy(to->val, val, vlen);
		to->tag = tag_of(hv);
		h->count++;
		h->used += (uint64_t)fresh;
	}
	db->changes++;
	return flags & KV_SYNC ? kv_sync(db) : 0;
}

int kv_get(kv *db, const void *key, size_t klen, void *val, size_t cap, size_t *vlen)
{
	int r = check_lengths(key, klen, val, 0);
	if (r)
		return r;
	struct slot *s = lookup(db->slots, db->mask, key, klen, hash(key, klen), NULL);
	if (!s)
		return -ENOENT;
	if (vlen)
		*vlen = s->vlen;
	if (cap < s->vlen)
		return -ERANGE;
	memcpy(val, s->val, s->vlen);
	return 0;
}

int kv_del(kv *db, const void *key, size_t klen, int flags)
{
	int r = check_lengths(key, klen, NULL, 0);
	if (r)
		return r;
	struct slot *s = lookup(db->slots, db->mask, key, klen, hash(key, klen), NULL);
	if (!s)
		return -ENOENT;
	if ((r = begin_batch(db))) /* may move the table: look again */
		return r;
	if (db->changes >= db->max_batch)
		return -E2BIG;
	s = lookup(db->slots, db->mask, key, klen, hash(key, klen), NULL);
	if (!s)
		return -EBADMSG;
	s->tag = TOMB;
	db->h->count--;
	db->changes++;
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
		return "no space: the table is full within this batch (kv_sync lets it grow, then retry), or the file system is full";
	case -EINVAL:
		return "invalid argument (a key longer than 20 bytes or a value longer than 100?)";
	case -ENOTSUP:
		return "not supported: batches are not atomic here (no kura)";
	}
	return strerror(-err);
}
