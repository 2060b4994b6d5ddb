/*
 * u64set.h — a map of 64-bit keys to 64-bit masks, emptied in O(1) by
 * bumping a stamp: an entry is in the set while its stamp is the one the
 * caller passes.  The transaction layer keeps its logged lines, changed
 * lines and fresh blocks in three (tx.h), emptied at every tx_begin.
 */
#ifndef KURA_U64SET_H
#define KURA_U64SET_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct u64set {
	struct u64set_entry {
		uint64_t key, val;
		uint32_t stamp;    /* the entry is in the set while this is the set's stamp */
	} *e;
	size_t cap, n;
};

/* Key, mask and stamp side by side: a probe reads one line, not three. */
static inline size_t u64set_slot(uint64_t k, size_t cap)
{
	k *= 0x9e3779b97f4a7c15ull;
	return (size_t)(k >> 17) & (cap - 1);
}

static inline int u64set_grow(struct u64set *s, uint32_t stamp)
{
	size_t cap = s->cap ? s->cap * 2 : 256;
	struct u64set_entry *e = calloc(cap, sizeof *e);
	if (!e)
		return -ENOMEM;
	for (size_t i = 0; i < s->cap; i++) {
		if (s->e[i].stamp != stamp)
			continue;
		size_t j = u64set_slot(s->e[i].key, cap);
		while (e[j].stamp == stamp)
			j = (j + 1) & (cap - 1);
		e[j] = s->e[i];
	}
	free(s->e);
	s->e = e;
	s->cap = cap;
	return 0;
}

/* The mask of key k; with created, adds k (mask 0) if absent and says so.
 * NULL if absent (or out of memory when adding).  Inline: every line an
 * operation logs asks it once. */
static inline uint64_t *u64set_get(struct u64set *s, uint32_t stamp, uint64_t k, int *created)
{
	if (created) {
		*created = 0;
		if (__builtin_expect((s->n + 1) * 2 > s->cap, 0) && u64set_grow(s, stamp))
			return NULL;
	} else if (!s->cap) {
		return NULL;
	}
	for (size_t j = u64set_slot(k, s->cap);; j = (j + 1) & (s->cap - 1)) {
		struct u64set_entry *e = &s->e[j];
		if (e->stamp != stamp) {
			if (!created)
				return NULL;
			*e = (struct u64set_entry){ .key = k, .val = 0, .stamp = stamp };
			s->n++;
			*created = 1;
			return &e->val;
		}
		if (e->key == k)
			return &e->val;
	}
}

static inline void u64set_free(struct u64set *s)
{
	free(s->e);
	memset(s, 0, sizeof *s);
}

#endif
