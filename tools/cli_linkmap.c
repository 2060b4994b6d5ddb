/*
 * cli_linkmap.c — (device, inode) -> first path seen, to recreate hard links.
 *
 * Open addressing with linear probing; only files with st_nlink > 1 go in,
 * so the table stays small even for large trees.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct slot {
	uint64_t dev, ino;
	char *path; /* NULL = empty */
};

struct cli_linkmap {
	struct slot *slots;
	size_t cap, used;
};

static size_t hash(uint64_t dev, uint64_t ino)
{
	uint64_t h = ino * 0x9e3779b97f4a7c15ull ^ dev * 0xc2b2ae3d27d4eb4full;
	return (size_t)(h ^ (h >> 29));
}

struct cli_linkmap *cli_linkmap_new(void)
{
	struct cli_linkmap *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->cap = 64;
	m->slots = calloc(m->cap, sizeof(*m->slots));
	if (!m->slots) {
		free(m);
		return NULL;
	}
	return m;
}

void cli_linkmap_free(struct cli_linkmap *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->cap; i++)
		free(m->slots[i].path);
	free(m->slots);
	free(m);
}

static struct slot *find(struct slot *slots, size_t cap, uint64_t dev, uint64_t ino)
{
	size_t i = hash(dev, ino) & (cap - 1);

	while (slots[i].path && (slots[i].dev != dev || slots[i].ino != ino))
		i = (i + 1) & (cap - 1);
	return &slots[i];
}

const char *cli_linkmap_get(struct cli_linkmap *m, uint64_t dev, uint64_t ino)
{
	return find(m->slots, m->cap, dev, ino)->path;
}

static int grow(struct cli_linkmap *m)
{
	size_t ncap = m->cap * 2;
	struct slot *ns = calloc(ncap, sizeof(*ns));

	if (!ns)
		return -ENOMEM;
	for (size_t i = 0; i < m->cap; i++) {
		if (m->slots[i].path)
			*find(ns, ncap, m->slots[i].dev, m->slots[i].ino) = m->slots[i];
	}
	free(m->slots);
	m->slots = ns;
	m->cap = ncap;
	return 0;
}

int cli_linkmap_put(struct cli_linkmap *m, uint64_t dev, uint64_t ino, const char *path)
{
	struct slot *s;
	char *copy;

	if ((m->used + 1) * 2 > m->cap && grow(m) < 0)
		return -ENOMEM;
	copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	s = find(m->slots, m->cap, dev, ino);
	if (s->path) {
		free(s->path);
	} else {
		m->used++;
	}
	s->dev = dev;
	s->ino = ino;
	s->path = copy;
	return 0;
}
