/*
 * model.h — the recorded trace and the persistence model that turns it into
 * crash images.
 *
 * Model (pmem, after Vinter): a durable image plus, per unit (a 64-byte
 * line), the writes not yet known durable, in program order, split into the
 * 8-byte words that are the tearing unit (an aligned media_store64 is one
 * word, so never torn).  A flush marks what a unit holds so far; a fence
 * makes every flushed prefix durable.  Unflushed writes stay pending across
 * fences: the cache may still write them back at any time.  A crash leaves,
 * for each pending unit independently, some prefix of its writes — units are
 * not ordered with each other, writes within one unit are.  Non-temporal
 * copies count as flushed when issued.
 *
 * Model file (the file back end, journal.h): the engine runs on a working
 * copy in shared memory, which a machine crash loses whole, so its stores
 * are not modelled; the pool file changes only by the writes the back end
 * hands the tracer (MEDIA_DISK_WRITE), and a sync (MEDIA_DISK_SYNC) makes
 * every one before it durable: an fdatasync all of them, the end of an
 * O_DSYNC write only those to its own pages.  The unit is the 4 KiB page: the kernel may write any dirty page
 * back at any moment with what it holds then, a program-order prefix of
 * the writes to it; pages are independent.
 */
#ifndef CRASH_MODEL_H
#define CRASH_MODEL_H

#include "media.h"
#include "crash/util.h"

#define UNIT_MAX 4096u /* the page */

/* ---- the trace ---------------------------------------------------------- */

struct tev {
	uint8_t kind; /* enum media_event */
	uint64_t off, len, at;
};

struct trace {
	struct tev *e;
	size_t n, cap;
	uint8_t *data;
	size_t nd, capd;
};

static void trace_add(struct trace *t, enum media_event ev, uint64_t off, const void *data, uint64_t len)
{
	GROW(t->e, t->n, t->cap);
	struct tev *e = &t->e[t->n++];
	e->kind = (uint8_t)ev;
	e->off = off;
	e->len = len;
	e->at = t->nd;
	/* A file back end's fence carries len runs of two uint64_t (media.h). */
	uint64_t bytes = ev == MEDIA_FENCE ? len * 16 : len;
	if (data && (ev == MEDIA_STORE || ev == MEDIA_STORE64 || ev == MEDIA_NT || ev == MEDIA_FENCE ||
		     ev == MEDIA_DISK_WRITE)) {
		while (t->nd + bytes > t->capd) {
			t->capd = t->capd ? t->capd * 2 : 1 << 20;
			t->data = xrealloc(t->data, t->capd);
		}
		memcpy(t->data + t->nd, data, bytes);
		t->nd += bytes;
	}
}

static CRASH_UNUSED void trace_reset(struct trace *t)
{
	t->n = 0;
	t->nd = 0;
}

static CRASH_UNUSED void trace_free(struct trace *t)
{
	free(t->e);
	free(t->data);
	memset(t, 0, sizeof *t);
}

/* ---- pending units ------------------------------------------------------ */

struct pword {
	uint16_t at;   /* offset inside the unit */
	uint8_t len;
	uint8_t first; /* the first word of a store call */
	uint8_t b[8];
};

struct pline {
	uint64_t line;
	uint32_t n, flushed, cap;
	struct pword *w;
};

struct pmodel {
	uint32_t unit;          /* bytes per unit: 64 (pmem) or 4096 (file) */
	int file;               /* flushes are msync runs carried by fences */
	uint8_t *base;          /* the durable image */
	uint64_t size;
	uint8_t *mirror;        /* kept equal to base when set (the scratch pool) */
	struct undo *base_undo; /* when set, base is undo->base and changes are saved */
	int track_hash;
	uint64_t h;             /* XOR of line hashes of base */
	struct pline *pl;
	size_t npl, cap;
	uint32_t *map;          /* line -> index + 1, open addressing */
	size_t mapcap;
};

static inline uint64_t line_hash(const struct pmodel *m, uint64_t line, const uint8_t *p)
{
	return hash_bytes(line * 0x9e3779b97f4a7c15ull, p, m->unit);
}

/* file selects the model: 0 pmem lines, 1 file pages. */
static void pm_init(struct pmodel *m, int file, uint8_t *base, uint64_t size, uint8_t *mirror, struct undo *bu,
		    int track)
{
	for (size_t i = 0; i < m->cap; i++)
		free(m->pl[i].w);
	free(m->pl);
	free(m->map);
	memset(m, 0, sizeof *m);
	m->file = file;
	m->unit = file ? UNIT_MAX : MEDIA_LINE;
	m->base = base;
	m->size = size;
	m->mirror = mirror;
	m->base_undo = bu;
	m->track_hash = track;
	if (track == 1) /* 2: the caller sets h and only changes are tracked */
		for (uint64_t l = 0; l < size / m->unit; l++)
			m->h ^= line_hash(m, l, base + l * m->unit);
	m->mapcap = 1024;
	m->map = calloc(m->mapcap, sizeof *m->map);
}

static void pm_free(struct pmodel *m)
{
	for (size_t i = 0; i < m->cap; i++)
		free(m->pl[i].w);
	free(m->pl);
	free(m->map);
	memset(m, 0, sizeof *m);
}

static void pm_map_put(struct pmodel *m, uint64_t line, uint32_t idx)
{
	for (size_t j = mix64(line) & (m->mapcap - 1);; j = (j + 1) & (m->mapcap - 1))
		if (!m->map[j]) {
			m->map[j] = idx + 1;
			return;
		}
}

static void pm_rebuild_map(struct pmodel *m)
{
	while (m->npl * 2 >= m->mapcap) {
		m->mapcap *= 2;
		free(m->map);
		m->map = NULL;
	}
	if (!m->map)
		m->map = calloc(m->mapcap, sizeof *m->map);
	else
		memset(m->map, 0, m->mapcap * sizeof *m->map);
	for (size_t i = 0; i < m->npl; i++)
		pm_map_put(m, m->pl[i].line, (uint32_t)i);
}

static struct pline *pm_line(struct pmodel *m, uint64_t line, int create)
{
	for (size_t j = mix64(line) & (m->mapcap - 1);; j = (j + 1) & (m->mapcap - 1)) {
		uint32_t v = m->map[j];
		if (!v)
			break;
		if (m->pl[v - 1].line == line)
			return &m->pl[v - 1];
	}
	if (!create)
		return NULL;
	if (m->npl == m->cap) {
		size_t ncap = m->cap ? m->cap * 2 : 64;
		m->pl = xrealloc(m->pl, ncap * sizeof *m->pl);
		memset(m->pl + m->cap, 0, (ncap - m->cap) * sizeof *m->pl);
		m->cap = ncap;
	}
	struct pline *p = &m->pl[m->npl++];
	p->line = line;
	p->n = p->flushed = 0;
	if ((m->npl + 1) * 2 >= m->mapcap)
		pm_rebuild_map(m);
	else
		pm_map_put(m, line, (uint32_t)(m->npl - 1));
	return p;
}

static void pm_store(struct pmodel *m, uint64_t off, const uint8_t *data, uint64_t len, int flushed)
{
	uint64_t end = off + len;
	uint8_t first = 1;
	while (off < end) {
		uint64_t stop = (off | 7) + 1;
		if (stop > end)
			stop = end;
		struct pline *p = pm_line(m, off / m->unit, 1);
		if (p->n == p->cap) {
			p->cap = p->cap ? p->cap * 2 : 8;
			p->w = xrealloc(p->w, p->cap * sizeof *p->w);
		}
		struct pword *w = &p->w[p->n++];
		w->at = (uint16_t)(off % m->unit);
		w->len = (uint8_t)(stop - off);
		w->first = first;
		first = 0;
		memcpy(w->b, data, stop - off);
		if (flushed)
			p->flushed = p->n;
		data += stop - off;
		off = stop;
	}
}

static void pm_flush(struct pmodel *m, uint64_t off, uint64_t len)
{
	for (uint64_t l = off / m->unit; l * m->unit < off + len; l++) {
		struct pline *p = pm_line(m, l, 0);
		if (p)
			p->flushed = p->n;
	}
}

/* The contents unit i would have if its first k pending writes persisted. */
static void pm_line_image(const struct pmodel *m, size_t i, uint32_t k, uint8_t *out)
{
	const struct pline *p = &m->pl[i];
	memcpy(out, m->base + p->line * m->unit, m->unit);
	for (uint32_t j = 0; j < k; j++)
		memcpy(out + p->w[j].at, p->w[j].b, p->w[j].len);
}

static void pm_set_base_line(struct pmodel *m, uint64_t line, const uint8_t *img)
{
	uint8_t *at = m->base + line * m->unit;
	if (m->track_hash)
		m->h ^= line_hash(m, line, at) ^ line_hash(m, line, img);
	if (m->base_undo)
		undo_save(m->base_undo, line * m->unit, m->unit);
	memcpy(at, img, m->unit);
	if (m->mirror)
		memcpy(m->mirror + line * m->unit, img, m->unit);
}

/* Everything flushed becomes durable; the rest stays pending. */
static void pm_fence(struct pmodel *m)
{
	size_t keep = 0;
	for (size_t i = 0; i < m->npl; i++) {
		struct pline *p = &m->pl[i];
		if (p->flushed) {
			uint8_t img[UNIT_MAX];
			pm_line_image(m, i, p->flushed, img);
			pm_set_base_line(m, p->line, img);
			memmove(p->w, p->w + p->flushed, (p->n - p->flushed) * sizeof *p->w);
			p->n -= p->flushed;
			p->flushed = 0;
		}
		if (p->n) {
			if (keep != i) {
				struct pline t = m->pl[keep];
				m->pl[keep] = *p;
				*p = t; /* keeps the word array for reuse */
			}
			keep++;
		}
	}
	if (keep != m->npl) {
		m->npl = keep;
		pm_rebuild_map(m);
	}
}

/* Feeds one traced event to the model; returns 1 at a fence, where the
 * caller takes its crash point before calling pm_fence. */
static int pm_event(struct pmodel *m, const struct trace *t, const struct tev *e)
{
	const uint8_t *d = t->data + e->at;
	if (m->file) {
		/* The working copy is memory, gone with the machine: only what
		 * reaches the pool file counts, and a sync makes all of it durable. */
		if (e->kind == MEDIA_DISK_WRITE)
			pm_store(m, e->off, d, e->len, 0);
		if (e->kind != MEDIA_DISK_SYNC)
			return 0;
		/* A sync with a range (an O_DSYNC write) makes only its pages durable. */
		for (size_t i = 0; i < m->npl; i++)
			if (!e->len || (m->pl[i].line * m->unit < e->off + e->len && (m->pl[i].line + 1) * m->unit > e->off))
				m->pl[i].flushed = m->pl[i].n;
		return 1;
	}
	switch (e->kind) {
	case MEDIA_STORE:
	case MEDIA_NT:
		/* The file back end's copy_nt is a memcpy whose flush, like
		 * every other, reaches the model through the fence's runs. */
		pm_store(m, e->off, d, e->len, e->kind == MEDIA_NT && !m->file);
		break;
	case MEDIA_STORE64:
		pm_store(m, e->off, d, 8, 0);
		break;
	case MEDIA_FLUSH:
		if (!m->file)
			pm_flush(m, e->off, e->len);
		break;
	case MEDIA_FENCE:
		for (uint64_t r = 0; m->file && r < e->len; r++) {
			uint64_t run[2];
			memcpy(run, d + r * 16, sizeof run);
			pm_flush(m, run[0], run[1] - run[0]);
		}
		return 1;
	}
	return 0;
}

#endif
