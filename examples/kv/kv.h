/*
 * kv.h — a small key-value store in one mapped file, whose batches of
 * changes are atomic and durable through kura's atomic groups
 * (include/kura_atomic.h).  README.md in this directory says more.
 *
 *   kv *db;
 *   int r = kv_open("/kura/db", NULL, &db);   // r >= 0: flags (KV_ATOMIC)
 *   kv_put(db, "k", 1, "v", 1, 0);            // joins the current batch
 *   kv_sync(db);                              // the batch, atomically
 *   kv_close(db);                             // commits what is left
 *
 * Every function returns 0 (kv_open: its flags, >= 0) or -errno;
 * kv_strerror() says what an error means here.  A handle is for one thread;
 * a file is for one process at a time (kv_open takes an exclusive flock).
 */
#ifndef KV_H
#define KV_H

#include <stddef.h>
#include <stdint.h>

#define KV_MAX_KEY 20  /* bytes; 0 to 20 */
#define KV_MAX_VAL 100 /* bytes; 0 to 100 */

/* kv_open's result, and kv_flags(). */
#define KV_ATOMIC 1 /* batches are atomic and durable at kv_sync (kura);
		     * without it kv_sync is an fdatasync, and a crash may
		     * leave any part of a batch, or a torn entry */

/* kv_put, kv_del: commit the batch, this change included, before
 * returning (a kv_sync). */
#define KV_SYNC 1

struct kv_options {
	uint64_t capacity; /* keys expected (0: 16,384): sizes the index in
			    * memory and the log of a new file (128 bytes a
			    * key).  More is fine: both grow. */
	uint32_t max_batch; /* changes one batch may hold (0: 16,384).  A
			     * batch begins with room in the log for max_batch
			     * records of the largest size (up to 64 MiB).
			     * Under kura a batch dirties the pages its records
			     * fill (about one per 34 records of 16-byte keys and
			     * 100-byte values, at most max_batch / 32 + 2) and
			     * the header page, which must fit one atomic group
			     * (`kura info`). */
	int no_create;      /* fail with -ENOENT rather than create the file */
};

typedef struct kv kv;

/* Opens (or creates, mode 0644) path.  Returns the flags (KV_ATOMIC or 0)
 * and *db, or -errno: -EBADMSG for a file that is not a store, -EBUSY when
 * another process has it open, -ENOENT with no_create.  opt may be NULL. */
int kv_open(const char *path, const struct kv_options *opt, kv **db);
/* Commits the batch (as kv_sync), then closes; db is freed either way. */
int kv_close(kv *db);

/* Sets key to value.  -EINVAL: a length out of range; -E2BIG: the batch
 * already holds max_batch changes (kv_sync, then retry); -ENOSPC: the log
 * is full within this batch (only with max_batch past 64 MiB of records;
 * it grows at the next batch: kv_sync, then retry).  A failed put changes
 * nothing. */
int kv_put(kv *db, const void *key, size_t klen, const void *val, size_t vlen, int flags);
/* Copies key's value, *vlen bytes, into val (cap bytes: KV_MAX_VAL always
 * suffices).  -ENOENT: no such key; -ERANGE: cap is too small (*vlen says
 * how large it is).  Sees the batch's own changes. */
int kv_get(kv *db, const void *key, size_t klen, void *val, size_t cap, size_t *vlen);
/* Removes key: -ENOENT if there was none; -E2BIG as kv_put. */
int kv_del(kv *db, const void *key, size_t klen, int flags);

/* Commits the current batch, atomically and durably with KV_ATOMIC; the
 * next change starts the next batch.  0 with nothing to commit. */
int kv_sync(kv *db);
/* Discards the current batch: the store is as at the last kv_sync.
 * -ENOTSUP without KV_ATOMIC (the changes already reached the file). */
int kv_abort(kv *db);

int kv_flags(const kv *db);
uint64_t kv_count(const kv *db);   /* keys in the store (batch included) */
uint64_t kv_batches(const kv *db); /* batches committed in the file's life */

/* Text for a result of this API (strerror's, or one of kv's own). */
const char *kv_strerror(int err);

#endif
