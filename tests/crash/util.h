/*
 * util.h — small pieces the crash explorer shares: a 64-bit hash, a growable
 * string, a growable byte arena and the undo log that puts the scratch pool
 * back after each crash image.  Header-only (static) because CMake links
 * every test-support .c without main() into every test; the explorer lives in
 * tests/crash/ and is included by the crash_*_test.c entries only.
 */
#ifndef CRASH_UTIL_H
#define CRASH_UTIL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CRASH_UNUSED __attribute__((unused))

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

/* Not cryptographic: it only has to separate crash images and dumps. */
static CRASH_UNUSED uint64_t hash_bytes(uint64_t seed, const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = mix64(seed ^ (n * 0x9e3779b97f4a7c15ull));
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, b + i, 8);
		h = (h ^ mix64(w + i)) * 0x100000001b3ull;
	}
	uint64_t tail = 0;
	memcpy(&tail, b + i, n - i);
	return mix64(h ^ tail ^ (uint64_t)(n - i) << 56);
}

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q) {
		fprintf(stderr, "crash explorer: out of memory\n");
		exit(2);
	}
	return q;
}

#define GROW(arr, n, cap)                                                   \
	do {                                                                \
		if ((n) >= (cap)) {                                         \
			(cap) = (cap) ? (cap) * 2 : 64;                     \
			(arr) = xrealloc((arr), (cap) * sizeof *(arr));     \
		}                                                           \
	} while (0)

struct sbuf {
	char *p;
	size_t n, cap;
};

static CRASH_UNUSED void sb_printf(struct sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static CRASH_UNUSED void sb_printf(struct sbuf *s, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		size_t room = s->cap - s->n;
		int k = vsnprintf(s->p ? s->p + s->n : NULL, room, fmt, ap);
		va_end(ap);
		if (k < 0)
			return;
		if ((size_t)k < room) {
			s->n += (size_t)k;
			return;
		}
		s->cap = (s->cap + (size_t)k + 1) * 2;
		s->p = xrealloc(s->p, s->cap);
	}
}

static CRASH_UNUSED void sb_free(struct sbuf *s)
{
	free(s->p);
	memset(s, 0, sizeof *s);
}

/* Saved bytes of the scratch pool, newest last; rollback restores them in
 * reverse so overlapping saves end at the oldest contents. */
struct undo {
	uint8_t *base; /* the harness's own mapping of the scratch pool */
	struct { uint64_t off, len, at; } *e;
	size_t n, cap;
	uint8_t *bytes;
	size_t nbytes, capbytes;
};

static void undo_save(struct undo *u, uint64_t off, uint64_t len)
{
	GROW(u->e, u->n, u->cap);
	while (u->nbytes + len > u->capbytes) {
		u->capbytes = u->capbytes ? u->capbytes * 2 : 1 << 16;
		u->bytes = xrealloc(u->bytes, u->capbytes);
	}
	memcpy(u->bytes + u->nbytes, u->base + off, len);
	u->e[u->n].off = off;
	u->e[u->n].len = len;
	u->e[u->n].at = u->nbytes;
	u->n++;
	u->nbytes += len;
}

static void undo_rollback(struct undo *u, size_t mark)
{
	while (u->n > mark) {
		u->n--;
		memcpy(u->base + u->e[u->n].off, u->bytes + u->e[u->n].at, u->e[u->n].len);
		u->nbytes = u->e[u->n].at;
	}
}

/* A set of 64-bit keys (0 is mapped away from the empty marker). */
struct kset {
	uint64_t *k;
	size_t n, cap;
};

static int kset_add(struct kset *s, uint64_t key)
{
	key |= 1;
	if ((s->n + 1) * 2 > s->cap) {
		size_t ocap = s->cap;
		uint64_t *old = s->k;
		s->cap = ocap ? ocap * 2 : 1024;
		s->k = calloc(s->cap, sizeof *s->k);
		if (!s->k)
			exit(2);
		s->n = 0;
		for (size_t i = 0; i < ocap; i++)
			if (old[i])
				kset_add(s, old[i]);
		free(old);
	}
	for (size_t j = mix64(key) & (s->cap - 1);; j = (j + 1) & (s->cap - 1)) {
		if (!s->k[j]) {
			s->k[j] = key;
			s->n++;
			return 1;
		}
		if (s->k[j] == key)
			return 0;
	}
}

static CRASH_UNUSED void kset_clear(struct kset *s)
{
	if (s->k)
		memset(s->k, 0, s->cap * sizeof *s->k);
	s->n = 0;
}

#endif
