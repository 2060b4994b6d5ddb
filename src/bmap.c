/* bmap.c — the per-inode block map: a radix tree of block numbers, its
 * growth, freeing and the search for data and holes (see inode.h). */
#include <errno.h>
#include "alloc.h"
#include "fault.h"
#include "inode.h"

static uint64_t span_of(unsigned height) /* file blocks covered by a tree of this height */
{
	return 1ull << (MAP_SHIFT * height);
}

static const uint64_t *node_ptr(const struct kura_fs *fs, uint64_t b)
{
	return block_ptr(fs, b);
}

/* The first slot >= i of a map node that is not zero, or MAP_FANOUT.  Most
 * nodes that are walked whole are nearly empty (a group's shadow holds a
 * few blocks of a large file), and one slot per step made such a walk cost
 * a microsecond; eight at a time the compiler turns into vector loads. */
static unsigned next_used_slot(const uint64_t *node, unsigned i)
{
	for (; i < MAP_FANOUT && (i & 7); i++)
		if (node[i])
			return i;
	for (; i < MAP_FANOUT; i += 8) {
		uint64_t any = 0;
		for (unsigned k = 0; k < 8; k++)
			any |= node[i + k];
		if (any)
			break;
	}
	for (; i < MAP_FANOUT; i++)
		if (node[i])
			return i;
	return MAP_FANOUT;
}

/* The leaf slots that map fblock's MAP_FANOUT-aligned stretch, or NULL
 * (also for a tree of height 0, whose root is fblock 0's block itself). */
static const uint64_t *leaf_of(const struct kura_fs *fs, const struct kura_inode *ip, uint64_t fblock)
{
	unsigned h = ip->height;
	uint64_t b = ip->root;
	if (!b || !h || h > MAP_MAX_HEIGHT || fblock >= span_of(h))
		return NULL;
	for (unsigned level = h; level > 1; level--) {
		if (!block_valid(fs, b))
			return NULL;
		b = node_ptr(fs, b)[(fblock >> (MAP_SHIFT * (level - 1))) & (MAP_FANOUT - 1)];
	}
	return block_valid(fs, b) ? node_ptr(fs, b) : NULL;
}

/* The block a leaf entry owns, unwritten or not; 0 if it names none. */
static uint64_t owned(const struct kura_fs *fs, uint64_t entry)
{
	uint64_t b = entry & ~BMAP_UNWRITTEN;
	return block_valid(fs, b) ? b : 0;
}

uint64_t bmap_entry(const struct kura_fs *fs, const struct kura_inode *ip, uint64_t fblock)
{
	if (!ip->height) /* the root itself: never unwritten */
		return !fblock && block_valid(fs, ip->root) ? ip->root : 0;
	const uint64_t *leaf = leaf_of(fs, ip, fblock);
	uint64_t e = leaf ? leaf[fblock & (MAP_FANOUT - 1)] : 0;
	return owned(fs, e) ? e : 0;
}

uint64_t bmap_get(const struct kura_fs *fs, const struct kura_inode *ip, uint64_t fblock)
{
	uint64_t b;
	if (!ip->height) {
		b = fblock ? 0 : ip->root;
	} else {
		const uint64_t *leaf = leaf_of(fs, ip, fblock);
		b = leaf ? leaf[fblock & (MAP_FANOUT - 1)] : 0;
	}
	/* An unwritten entry is no valid block number (its top bit): a hole
	 * to readers, with no test of its own on a path every lookup takes. */
	return block_valid(fs, b) ? b : 0;
}

uint64_t bmap_take_unwritten(struct kura_fs *fs, const struct kura_inode *ip, uint64_t fblock, uint64_t entry)
{
	uint64_t b = entry & ~BMAP_UNWRITTEN;
	const uint64_t *leaf = kura_fault == FAULT_UNWRITTEN_EARLY ? leaf_of(fs, ip, fblock) : NULL;
	if (leaf) { /* injected bug (crash tests only): the bit goes outside the transaction */
		uint64_t off = (uint64_t)((const char *)&leaf[fblock & (MAP_FANOUT - 1)] - (const char *)media_ptr(&fs->m, 0));
		media_store64(&fs->m, off, b);
		media_persist(&fs->m, off, 8);
	}
	/* fallocate gave it storage, but in another process perhaps: this
	 * one learns whether the page is cold (media.h) */
	int err = media_back(&fs->m, block_off(b), KURA_BLOCK, MEDIA_FILL_COPIES);
	if (err) {
		tx_fail(&fs->tx, err);
		return 0;
	}
	tx_mark_fresh(&fs->tx, b);
	return b;
}

/* A file's blocks are placed by stretches of this many, one bitmap word:
 * a block follows its own stretch's blocks before those of others. */
#define PLACE_STRETCH 64u
/* A small file's blocks, where a neighbour's place is taken, go where
 * next-fit puts them: small files stay packed together, not one to a word.
 * 64 KiB, the memory back end's unit of storage (media.h). */
#define PACK_BELOW 16u

/* The place a neighbour already has decides fblock's: next to it, at the
 * same distance as in the file.  Neighbours in fblock's own stretch come
 * first, nearest first, so that a stretch started in one place is not
 * started again in another from the stretch before it; only a stretch with
 * no block yet follows the blocks either side.  When all those places are
 * taken, a small file's block goes where next-fit puts it; a block of a
 * file's first leaf to its slot in a free word near the used space (where
 * deleted files' words are reused); a block further on to its place in free
 * words enough for its whole leaf, where the leaf's other blocks then find
 * theirs (a large file placed a word at a time took a mapping per 256 KiB;
 * whole leaves, per 2 MiB). */
uint64_t bmap_alloc(struct kura_fs *fs, const struct kura_inode *ip, uint64_t fblock, int zero)
{
	const uint64_t *leaf = leaf_of(fs, ip, fblock);
	unsigned in_leaf = (unsigned)(fblock & (MAP_FANOUT - 1)), at = in_leaf % PLACE_STRETCH, base = in_leaf - at;
	int grouped = 0;
	uint64_t b = 0;
	for (unsigned d = 1; leaf && d < PLACE_STRETCH && !fs->tx.err; d++)
		for (int side = -1; side <= 1; side += 2) {
			int i = (int)at + side * (int)d;
			uint64_t nb = i >= 0 && i < (int)PLACE_STRETCH ? owned(fs, leaf[base + (unsigned)i]) : 0;
			if (!nb || nb + at < (uint64_t)i)
				continue;
			grouped = 1;
			if ((b = alloc_block_at(fs, zero, nb + at - (uint64_t)i)))
				return b;
		}
	/* The nearest block on either side in the same leaf, else the blocks
	 * just before and after (in the leaves beside it). */
	for (int side = -1; side <= 1 && !grouped && !fs->tx.err; side += 2) {
		uint64_t nb = 0, d = 0;
		for (int i = (int)in_leaf + side; leaf && !nb && i >= 0 && i < (int)MAP_FANOUT; i += side)
			d++, nb = owned(fs, leaf[i]);
		if (!nb) {
			d = 1;
			nb = owned(fs, side < 0 ? (fblock ? bmap_entry(fs, ip, fblock - 1) : 0) : bmap_entry(fs, ip, fblock + 1));
		}
		/* Further away, only a block at its place in a word of its own
		 * (a leaf placed whole) says where this one goes. */
		uint64_t goal = side < 0 ? nb + d : nb - d;
		if (nb && (side < 0 || nb >= d) && (d == 1 || goal % PLACE_STRETCH == at) &&
		    (b = alloc_block_at(fs, zero, goal)))
			return b;
	}
	if (fs->tx.err)
		return 0;
	if (fblock < PACK_BELOW && ip->size <= (uint64_t)PACK_BELOW * KURA_BLOCK)
		return alloc_block(fs, zero);
	if (fblock < MAP_FANOUT)
		return alloc_block_in_word(fs, zero, at);
	return alloc_block_in_stretch(fs, zero, in_leaf, MAP_FANOUT / 64);
}

static void add_blocks(struct kura_fs *fs, uint64_t ino, int64_t delta)
{
	const struct kura_inode *ip = media_ptr(&fs->m, ino_off(ino));
	INO_SET(fs, ino, blocks, ip->blocks + (uint64_t)delta);
}

uint64_t bmap_set(struct kura_fs *fs, uint64_t ino, uint64_t fblock, uint64_t block)
{
	struct tx *t = &fs->tx;
	const struct kura_inode *ip = media_ptr(&fs->m, ino_off(ino));
	if (ip->height > MAP_MAX_HEIGHT || (ip->root && !block_valid(fs, ip->root))) {
		tx_fail(t, -EUCLEAN);
		return 0;
	}
	if (!ip->root) {
		if (!block)
			return 0;
		unsigned h = 0;
		while (fblock >= span_of(h))
			h++;
		INO_SET(fs, ino, height, (uint8_t)h);
	}
	/* Grow: the old tree becomes child 0 of a new root. */
	while (ip->root && fblock >= span_of(ip->height) && !t->err) {
		if (!block)
			return 0;
		uint64_t n = alloc_block(fs, 1);
		if (!n)
			return 0;
		tx_write64(t, block_off(n), ip->root);
		INO_SET(fs, ino, root, n);
		INO_SET(fs, ino, height, (uint8_t)(ip->height + 1));
		add_blocks(fs, ino, 1);
	}
	if (t->err)
		return 0;
	uint64_t slot_off = INO_FIELD_OFF(ino, root);
	for (unsigned level = ip->height; level > 0; level--) {
		uint64_t node = *(const uint64_t *)media_ptr(&fs->m, slot_off);
		if (!node) {
			if (!block)
				return 0;
			node = alloc_block(fs, 1);
			if (!node)
				return 0;
			tx_write64(t, slot_off, node);
			add_blocks(fs, ino, 1);
		} else if (!block_valid(fs, node)) {
			tx_fail(t, -EUCLEAN);
			return 0;
		}
		slot_off = block_off(node) + 8 * ((fblock >> (MAP_SHIFT * (level - 1))) & (MAP_FANOUT - 1));
	}
	uint64_t old = *(const uint64_t *)media_ptr(&fs->m, slot_off);
	tx_write64(t, slot_off, block);
	if (block && !old)
		add_blocks(fs, ino, 1);
	else if (!block && old)
		add_blocks(fs, ino, -1);
	old = owned(fs, old);
	return old == block ? 0 : old; /* an unwritten block now written: still the file's */
}

/* Frees a whole subtree.  Its nodes are not cleared: once the parent's
 * pointer is cleared nothing reaches them, and not writing them keeps a large
 * truncate's log small.  Returns blocks freed. */
static uint64_t free_all(struct kura_fs *fs, uint64_t b, unsigned level, uint64_t *budget)
{
	/* A damaged map may name one node from many slots: without a budget
	 * (no tree holds more nodes than the pool has blocks) that is 512^4
	 * visits. */
	if (!*budget) {
		tx_fail(&fs->tx, -EUCLEAN);
		return 0;
	}
	(*budget)--;
	uint64_t freed = 1;
	if (level > 0) {
		const uint64_t *node = node_ptr(fs, b);
		for (unsigned i = next_used_slot(node, 0); i < MAP_FANOUT && !fs->tx.err; i = next_used_slot(node, i + 1)) {
			uint64_t child = level == 1 ? owned(fs, node[i]) : node[i];
			if (block_valid(fs, child))
				freed += free_all(fs, child, level - 1, budget);
		}
	}
	alloc_free(fs, b);
	return freed;
}

/* Frees [first, last) below the node at *slot (a tree of `level`, covering
 * file blocks from `base`); clears *slot when nothing is left under it.
 * Returns blocks freed. */
static uint64_t free_subtree(struct kura_fs *fs, uint64_t slot, unsigned level, uint64_t base, uint64_t first,
			     uint64_t last, uint64_t *budget)
{
	uint64_t b = *(const uint64_t *)media_ptr(&fs->m, slot);
	uint64_t span = span_of(level);
	if (level == 0)
		b = owned(fs, b);
	if (!b || !block_valid(fs, b) || fs->tx.err)
		return 0;
	if (first <= base && (last - base) >= span) {
		tx_write64(&fs->tx, slot, 0);
		return free_all(fs, b, level, budget);
	}
	if (!*budget) {
		tx_fail(&fs->tx, -EUCLEAN);
		return 0;
	}
	(*budget)--;
	if (level == 0)
		return 0;
	uint64_t child_span = span_of(level - 1), freed = 0;
	unsigned lo = first > base ? (unsigned)((first - base) / child_span) : 0;
	for (unsigned i = lo; i < MAP_FANOUT; i++) {
		uint64_t cbase = base + i * child_span;
		if (cbase >= last)
			break;
		freed += free_subtree(fs, block_off(b) + 8 * i, level - 1, cbase, first, last, budget);
	}
	if (next_used_slot(node_ptr(fs, b), 0) < MAP_FANOUT)
		return freed;
	alloc_free(fs, b);
	tx_write64(&fs->tx, slot, 0);
	return freed + 1;
}

void bmap_free_range(struct kura_fs *fs, uint64_t ino, uint64_t first, uint64_t last)
{
	const struct kura_inode *ip = media_ptr(&fs->m, ino_off(ino));
	if (!ip->root || first >= last)
		return;
	if (ip->height > MAP_MAX_HEIGHT) {
		tx_fail(&fs->tx, -EUCLEAN);
		return;
	}
	uint64_t budget = fs->nblocks;
	uint64_t freed = free_subtree(fs, INO_FIELD_OFF(ino, root), ip->height, 0, first, last, &budget);
	if (freed)
		add_blocks(fs, ino, -(int64_t)freed);
	if (!ip->root)
		INO_SET(fs, ino, height, 0);
}

/* The first file block >= fb that owns a block (written or not) if `want`,
 * that owns none if not, searching the
 * subtree at node b (height `level`, first file block `base`); UINT64_MAX if
 * none.  Unmapped subtrees are skipped whole, so a huge hole costs one step
 * per tree level, not one per block. */
static uint64_t find_block(const struct kura_fs *fs, uint64_t b, unsigned level, uint64_t base, uint64_t fb, int want,
			   uint64_t *budget)
{
	uint64_t span = span_of(level);
	if (level == 0)
		b = owned(fs, b); /* unwritten blocks are data, as fallocated pages are in tmpfs */
	if (!b || !block_valid(fs, b))
		return want ? UINT64_MAX : (fb > base ? fb : base);
	if (level == 0)
		return want ? base : UINT64_MAX;
	/* Bounded like free_all: a damaged map that names one node from every
	 * slot must not cost 512^height steps.  Giving up answers "not found". */
	if (!*budget)
		return UINT64_MAX;
	(*budget)--;
	const uint64_t *node = node_ptr(fs, b);
	uint64_t child = span_of(level - 1);
	unsigned first = fb > base ? (unsigned)((fb - base) / child) : 0;
	for (unsigned i = first; i < MAP_FANOUT; i++) {
		/* Looking for data, holes are passed over here: a call per slot
		 * made a sparse tree's scan cost microseconds. */
		if (want && (i = next_used_slot(node, i)) == MAP_FANOUT)
			break;
		uint64_t cbase = base + i * child;
		uint64_t r = find_block(fs, node[i], level - 1, cbase, fb > cbase ? fb : cbase, want, budget);
		if (r != UINT64_MAX)
			return r;
	}
	(void)span;
	return UINT64_MAX;
}

uint64_t bmap_next_data(const struct kura_fs *fs, const struct kura_inode *ip, uint64_t fb)
{
	if (!ip->root || ip->height > MAP_MAX_HEIGHT || fb >= span_of(ip->height))
		return UINT64_MAX;
	uint64_t budget = fs->nblocks;
	return find_block(fs, ip->root, ip->height, 0, fb, 1, &budget);
}

int64_t inode_seek_data(const struct kura_fs *fs, const struct kura_inode *ip, uint64_t off, int want_data)
{
	uint64_t size = ip->size;
	if (off >= size)
		return -ENXIO;
	uint64_t fb = off >> KURA_BLOCK_SHIFT, r;
	if (!ip->root || ip->height > MAP_MAX_HEIGHT)
		r = want_data ? UINT64_MAX : fb;
	else if (fb >= span_of(ip->height))
		r = want_data ? UINT64_MAX : fb; /* past the tree: all hole */
	else {
		uint64_t budget = fs->nblocks;
		r = find_block(fs, ip->root, ip->height, 0, fb, want_data, &budget);
		if (r == UINT64_MAX && !want_data)
			r = span_of(ip->height); /* the tree is full up to its span */
	}
	if (r == UINT64_MAX)
		return want_data ? -ENXIO : (int64_t)size;
	uint64_t pos = r << KURA_BLOCK_SHIFT;
	if (pos < off)
		pos = off;
	if (pos >= size)
		return want_data ? -ENXIO : (int64_t)size;
	return (int64_t)pos;
}
