/*
 * lock_bind.c — the lock table's binds (lock.h; bind.c makes and undoes
 * them).  The table lives in shared memory that every process of the pool
 * can write: its count is bounded before use, and a chain of binds is
 * followed at most LOCK_BINDS steps, so a damaged table cannot make a walk
 * loop.
 */
#include <errno.h>
#include "lock.h"

static uint32_t nbinds(const struct lockh *h)
{
	uint32_t n = h->t ? __atomic_load_n(&h->t->nbinds, __ATOMIC_ACQUIRE) : 0;
	return n > LOCK_BINDS ? LOCK_BINDS : n;
}

static struct lock_bind *bind_at(const struct lockh *h, uint64_t point, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (h->t->binds[i].point == point)
			return &h->t->binds[i];
	return NULL;
}

uint64_t lock_bind_cross_slow(const struct lockh *h, uint64_t ino)
{
	uint32_t n = nbinds(h);
	for (uint32_t hop = 0; hop < LOCK_BINDS; hop++) {
		const struct lock_bind *b = bind_at(h, ino, n);
		if (!b || b->root == ino)
			break; /* "mount --bind a a" makes a a point over itself */
		ino = b->root;
	}
	return ino;
}

int lock_bind_point(const struct lockh *h, uint64_t ino)
{
	uint32_t n = nbinds(h);
	return n && bind_at(h, ino, n) != NULL;
}

int lock_bind_add(struct lockh *h, uint64_t point, uint64_t root)
{
	uint32_t n = nbinds(h);
	if (n == LOCK_BINDS)
		return -ENOSPC; /* as the kernel past fs.mount-max */
	int err = lock_open_inc(h, root);
	if (err)
		return err;
	h->t->binds[n] = (struct lock_bind){.point = point, .root = root};
	__atomic_store_n(&h->t->nbinds, n + 1, __ATOMIC_RELEASE);
	return 0;
}

int lock_bind_remove(struct lockh *h, uint64_t ino, int by_root, uint64_t *root)
{
	uint32_t n = nbinds(h);
	struct lock_bind *top = NULL;
	if (by_root) {
		for (uint32_t i = n; i-- > 0 && !top;)
			if (h->t->binds[i].root == ino)
				top = &h->t->binds[i];
	} else {
		for (uint32_t hop = 0; hop < LOCK_BINDS; hop++) {
			struct lock_bind *b = bind_at(h, ino, n);
			if (!b)
				break;
			top = b;
			if (b->root == ino)
				break;
			ino = b->root;
		}
	}
	if (!top)
		return -EINVAL;
	*root = top->root;
	*top = h->t->binds[n - 1];
	__atomic_store_n(&h->t->nbinds, n - 1, __ATOMIC_RELEASE);
	/* The root's open count goes with the bind; the caller frees a root
	 * that was removed meanwhile and is open nowhere else. */
	return lock_open_dec(h, *root) ? 0 : 1;
}
