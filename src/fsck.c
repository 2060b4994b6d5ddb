/*
 * fsck.c — checks every invariant of the format, by recomputing from the
 * root what the pool's own bookkeeping claims:
 *   superblock and log head (at mount), the directory tree (entries
 *   well-formed, hashes matching names, types matching inodes, no directory
 *   reached twice, parent pointers right), link counts, block maps (every
 *   pointer in range, no block owned twice, block counts), the zero tail
 *   beyond each file's end, symlink targets, the orphan and free-slot lists,
 *   the bitmap against the blocks actually reachable, and the counters.
 * Repair frees what is leaked (blocks, unreachable inodes) and fixes
 * counters; it never guesses at data.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "alloc.h"
#include "crc.h"
#include "dir.h"
#include "inode.h"
#include "super.h"

struct check {
	struct kura_fs *fs;
	kura_report_fn report;
	void *ctx;
	int problems;
	uint8_t *used;     /* bit per block: reachable */
	uint32_t *links;   /* per inode slot: names found */
	uint8_t *seen;     /* per inode slot: 1 live reached, 2 free list, 3 orphan */
	uint64_t nslots;
	uint64_t files, dirs, symlinks;
	uint64_t *stack;
	size_t nstack, cap;
	int repair;
	uint64_t *compact;  /* directories whose buckets --repair merges */
	size_t ncompact, compact_cap;
};

static void problem(struct check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(struct check *c, const char *fmt, ...)
{
	char line[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	c->problems++;
	if (c->report && c->problems <= 1000)
		c->report(c->ctx, line);
}

static int bit(const uint8_t *m, uint64_t i) { return (m[i / 8] >> (i % 8)) & 1; }
static void set_bit(uint8_t *m, uint64_t i) { m[i / 8] |= (uint8_t)(1u << (i % 8)); }
static void clear_bit(uint8_t *m, uint64_t i) { m[i / 8] &= (uint8_t)~(1u << (i % 8)); }

/* The index of the first non-zero byte of p[0..n), or n.  Word-wise: these
 * scans cover whole blocks, once per file and bucket. */
static size_t first_nonzero(const char *p, size_t n)
{
	static const char zero[KURA_BLOCK];
	size_t i = 0;
	while (i < n) {
		size_t chunk = n - i < sizeof zero ? n - i : sizeof zero;
		if (memcmp(p + i, zero, chunk))
			break;
		i += chunk;
	}
	while (i < n && !p[i])
		i++;
	return i;
}

/* Returns 1 if b was free to claim, 0 if it is out of range or taken. */
static int claim(struct check *c, uint64_t b, uint64_t ino, const char *what)
{
	if (!block_valid(c->fs, b)) {
		problem(c, "inode %llu: %s points at block %llu, outside the data area", (unsigned long long)ino, what,
			(unsigned long long)b);
		return 0;
	}
	if (bit(c->used, b)) {
		problem(c, "inode %llu: %s block %llu is also used elsewhere", (unsigned long long)ino, what,
			(unsigned long long)b);
		return 0;
	}
	set_bit(c->used, b);
	return 1;
}

static uint64_t slot_index(uint64_t ino) { return ino; }

/* Walks a block map; returns blocks found and the highest data block + 1. */
static uint64_t walk_map(struct check *c, uint64_t ino, uint64_t b, unsigned level, uint64_t base, uint64_t *end)
{
	/* A block claimed twice is reported once and not walked again: a map
	 * naming one node from every slot would otherwise cost 512^height. */
	if (!claim(c, b, ino, level ? "map node" : "data"))
		return 0;
	if (level == 0) {
		if (base + 1 > *end)
			*end = base + 1;
		return 1;
	}
	uint64_t n = 1;
	const uint64_t *node = block_ptr(c->fs, b);
	uint64_t span = 1ull << (MAP_SHIFT * (level - 1));
	for (unsigned i = 0; i < MAP_FANOUT; i++)
		if (node[i]) /* a leaf's entry may be unwritten: its block is the file's all the same */
			n += walk_map(c, ino, level == 1 ? node[i] & ~BMAP_UNWRITTEN : node[i], level - 1, base + i * span, end);
	return n;
}

static void check_data(struct check *c, uint64_t ino, const struct kura_inode *ip, uint64_t extra_blocks)
{
	uint64_t end = 0, n = 0;
	if (ip->height > MAP_MAX_HEIGHT)
		problem(c, "inode %llu: block map height %u is impossible", (unsigned long long)ino, ip->height);
	else if (ip->root)
		n = walk_map(c, ino, ip->root, ip->height, 0, &end);
	if (n + extra_blocks != ip->blocks)
		problem(c, "inode %llu: owns %llu blocks but records %llu", (unsigned long long)ino,
			(unsigned long long)(n + extra_blocks), (unsigned long long)ip->blocks);
	if (S_ISREG(ip->mode) && ip->size > KURA_MAX_FILE_SIZE)
		problem(c, "inode %llu: size %llu is beyond the largest file", (unsigned long long)ino,
			(unsigned long long)ip->size);
	if (S_ISREG(ip->mode) || S_ISLNK(ip->mode)) {
		/* Bytes past EOF inside the last mapped block must be zero. */
		uint64_t in = ip->size & (KURA_BLOCK - 1);
		uint64_t b = in ? bmap_get(c->fs, ip, ip->size >> KURA_BLOCK_SHIFT) : 0;
		if (b) {
			const char *p = block_ptr(c->fs, b);
			size_t i = first_nonzero(p + in, KURA_BLOCK - in);
			if (i < KURA_BLOCK - in)
				problem(c, "inode %llu: non-zero byte past end of file at offset %llu",
					(unsigned long long)ino, (unsigned long long)(ip->size + i));
		}
	}
	if (S_ISLNK(ip->mode)) {
		char t[KURA_SYMLINK_MAX + 1];
		if (ip->size == 0 || ip->size > KURA_SYMLINK_MAX)
			problem(c, "symlink %llu: target length %llu is impossible", (unsigned long long)ino,
				(unsigned long long)ip->size);
		else if (inode_read(c->fs, ip, t, ip->size, 0) == (ssize_t)ip->size && memchr(t, 0, ip->size))
			problem(c, "symlink %llu: target contains a NUL byte", (unsigned long long)ino);
	}
}

static void push(struct check *c, uint64_t ino)
{
	if (c->nstack == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 256;
		c->stack = realloc(c->stack, c->cap * sizeof *c->stack);
		if (!c->stack) {
			problem(c, "out of memory");
			exit(2);
		}
	}
	c->stack[c->nstack++] = ino;
}

static void push_compact(struct check *c, uint64_t dino)
{
	if (c->ncompact == c->compact_cap) {
		size_t cap = c->compact_cap ? c->compact_cap * 2 : 64;
		uint64_t *n = realloc(c->compact, cap * sizeof *n);
		if (!n)
			return; /* repaired on a later run */
		c->compact = n;
		c->compact_cap = cap;
	}
	c->compact[c->ncompact++] = dino;
}

static void visit_inode(struct check *c, uint64_t ino)
{
	const struct kura_inode *ip = ino_get(c->fs, ino);
	set_bit(c->used, ino_off(ino) >> KURA_BLOCK_SHIFT);
	/* Only an unnamed O_TMPFILE file may be linkable: named, linkat of a
	 * descriptor would give a second name to a file that never lost one. */
	if (ip->iflags & ~(INODE_LINKABLE | INODE_ACL | INODE_DEFACL))
		problem(c, "inode %llu: unknown flags %#x", (unsigned long long)ino, ip->iflags);
	else if ((ip->iflags & INODE_DEFACL) && !S_ISDIR(ip->mode))
		problem(c, "inode %llu: a default ACL on a non-directory", (unsigned long long)ino);
	else if ((ip->iflags & INODE_LINKABLE) && (!S_ISREG(ip->mode) || c->seen[slot_index(ino)] != 3))
		problem(c, "inode %llu: linkable (O_TMPFILE) but %s", (unsigned long long)ino,
			S_ISREG(ip->mode) ? "named in the tree" : "not a regular file");
	if (S_ISDIR(ip->mode)) {
		c->dirs++;
		push(c, ino);
		return;
	}
	int special = S_ISFIFO(ip->mode) || S_ISCHR(ip->mode) || S_ISBLK(ip->mode) || S_ISSOCK(ip->mode);
	if (S_ISLNK(ip->mode))
		c->symlinks++;
	else if (S_ISREG(ip->mode) || special)
		c->files++; /* the state's nfiles counts every inode that is neither (count_type) */
	else
		problem(c, "inode %llu: unsupported type (mode %o)", (unsigned long long)ino, ip->mode);
	if (special && (ip->root || ip->size))
		problem(c, "inode %llu: a special file with data (size %llu)", (unsigned long long)ino,
			(unsigned long long)ip->size);
	check_data(c, ino, ip, 0);
}

static void check_dir(struct check *c, uint64_t dino)
{
	struct kura_fs *fs = c->fs;
	const struct kura_inode *dip = ino_get(fs, dino);
	uint64_t subdirs = 0, entries = 0, buckets = 0, mergeable = 0;
	unsigned deepest = 0;
	if (dip->root) {
		if (!dir_sane(fs, dip)) {
			problem(c, "directory %llu: hash depth %u, slot array of %llu bytes and %llu blocks disagree",
				(unsigned long long)dino, dip->dir_depth, (unsigned long long)dip->size,
				(unsigned long long)dip->blocks);
			return;
		}
		uint64_t nslots = 1ull << dip->dir_depth;
		for (uint64_t i = 0; i < nslots; i++) {
			uint64_t sb = bmap_get(fs, dip, i / (KURA_BLOCK / 8));
			uint64_t b = sb ? ((const uint64_t *)block_ptr(fs, sb))[i % (KURA_BLOCK / 8)] : 0;
			const struct kura_bucket *bk = block_valid(fs, b) ? block_ptr(fs, b) : NULL;
			if (!bk || bk->magic != BUCKET_MAGIC || bk->used > BUCKET_SPACE || bk->depth > dip->dir_depth) {
				problem(c, "directory %llu: hash slot %llu has no valid bucket", (unsigned long long)dino,
					(unsigned long long)i);
				continue;
			}
			if (i >= (1ull << bk->depth))
				continue; /* seen at its first slot */
			claim(c, b, dino, "bucket");
			buckets++;
			if (bk->depth > deepest)
				deepest = bk->depth;
			const struct kura_bucket *buddy = bk->depth ? dir_slot_bucket(fs, dip, i ^ (1ull << (bk->depth - 1))) : NULL;
			if (buddy && !(i & (1ull << (bk->depth - 1))) && buddy->depth == bk->depth &&
			    dir_can_merge(bk->used, buddy->used))
				mergeable++;
			uint32_t count = 0, pos = 0;
			while (pos + DIRENT_HEAD <= bk->used) {
				const struct kura_dirent_disk *e = (const void *)((const char *)(bk + 1) + pos);
				uint32_t rl = dirent_reclen(e->name_len);
				if (pos + rl > bk->used || e->name_len == 0) {
					problem(c, "directory %llu: damaged entry in bucket %llu", (unsigned long long)dino,
						(unsigned long long)b);
					break;
				}
				pos += rl;
				count++;
				entries++;
				char name[KURA_NAME_MAX + 1];
				memcpy(name, e->name, e->name_len);
				name[e->name_len] = 0;
				if (memchr(e->name, '/', e->name_len) || memchr(e->name, 0, e->name_len) ||
				    !strcmp(name, ".") || !strcmp(name, ".."))
					problem(c, "directory %llu: illegal name \"%s\"", (unsigned long long)dino, name);
				if (dir_hash(fs, e->name, e->name_len) != e->hash ||
				    (e->hash & ((1ull << bk->depth) - 1)) != (i & ((1ull << bk->depth) - 1)))
					problem(c, "directory %llu: \"%s\" is filed under the wrong hash",
						(unsigned long long)dino, name);
				const struct kura_inode *ip = ino_get(fs, e->ino);
				if (!ip) {
					problem(c, "directory %llu: \"%s\" names free or invalid inode %llu",
						(unsigned long long)dino, name, (unsigned long long)e->ino);
					continue;
				}
				unsigned want = dtype_of(ip->mode);
				if (e->type != want)
					problem(c, "directory %llu: \"%s\" has type %u, inode says %u",
						(unsigned long long)dino, name, e->type, want);
				uint64_t s = slot_index(e->ino);
				if (S_ISDIR(ip->mode)) {
					subdirs++;
					if (c->seen[s]) {
						problem(c, "directory %llu: \"%s\" links a directory reached twice",
							(unsigned long long)dino, name);
						continue;
					}
					if (ip->parent != dino)
						problem(c, "directory %llu: parent pointer %llu, but found in %llu",
							(unsigned long long)e->ino, (unsigned long long)ip->parent,
							(unsigned long long)dino);
				}
				c->links[s]++;
				if (!c->seen[s]) {
					c->seen[s] = 1;
					visit_inode(c, e->ino);
				}
			}
			/* Fewer bytes left than an entry's head: the walk above ends
			 * without a word, and the engine's changes would find them. */
			if (pos < bk->used && pos + DIRENT_HEAD > bk->used)
				problem(c, "directory %llu: bucket %llu says %u bytes of entries, holds %u",
					(unsigned long long)dino, (unsigned long long)b, bk->used, pos);
			if (count != bk->count)
				problem(c, "directory %llu: bucket %llu counts %u entries, holds %u",
					(unsigned long long)dino, (unsigned long long)b, bk->count, count);
			const char *tail = (const char *)(bk + 1);
			if (first_nonzero(tail + bk->used, BUCKET_SPACE - bk->used) < BUCKET_SPACE - bk->used)
				problem(c, "directory %llu: bucket %llu has bytes after its entries",
					(unsigned long long)dino, (unsigned long long)b);
		}
	}
	if (dip->root && (mergeable || deepest != dip->dir_depth)) {
		if (mergeable)
			problem(c, "directory %llu: %llu pairs of buckets fit in one each but were not merged",
				(unsigned long long)dino, (unsigned long long)mergeable);
		if (deepest != dip->dir_depth)
			problem(c, "directory %llu: slot array of depth %u, deepest bucket %u (not shrunk)",
				(unsigned long long)dino, dip->dir_depth, deepest);
		if (c->repair)
			push_compact(c, dino);
	}
	if (entries != dip->entries)
		problem(c, "directory %llu: holds %llu entries, records %llu", (unsigned long long)dino,
			(unsigned long long)entries, (unsigned long long)dip->entries);
	if (dip->nlink != 2 + subdirs)
		problem(c, "directory %llu: link count %u, expected %llu", (unsigned long long)dino, dip->nlink,
			(unsigned long long)(2 + subdirs));
	check_data(c, dino, dip, buckets);
}

static void check_lists(struct check *c, uint64_t *free_slots)
{
	struct kura_fs *fs = c->fs;
	const struct kura_state *st = fs_state(fs);
	uint64_t n = 0;
	for (uint64_t ino = st->orphans; ino; n++) {
		const struct kura_inode *ip = ino_get(fs, ino);
		if (!ip || n > c->nslots) {
			problem(c, "orphan list: broken at inode %llu", (unsigned long long)ino);
			break;
		}
		if (c->seen[slot_index(ino)]) {
			problem(c, "orphan list: inode %llu is also in the tree or listed twice", (unsigned long long)ino);
			break;
		}
		if (ip->nlink)
			problem(c, "orphan list: inode %llu still has %u links", (unsigned long long)ino, ip->nlink);
		c->seen[slot_index(ino)] = 3;
		visit_inode(c, ino);
		ino = ip->link;
	}
	if (n != st->norphans)
		problem(c, "state: %llu orphans listed, counter says %llu", (unsigned long long)n,
			(unsigned long long)st->norphans);
	*free_slots = 0;
	for (uint64_t ino = st->inode_free, prev = 0; ino;) {
		/* The slot number first: shifted, a huge one wraps into range. */
		uint64_t off = ino_off(ino);
		if (ino >= c->nslots || off < block_off(fs->first_data_block) || c->seen[ino]) {
			problem(c, "free inode list: broken at %llu", (unsigned long long)ino);
			break;
		}
		const struct kura_inode *ip = media_ptr(&fs->m, off);
		if (ip->mode)
			problem(c, "free inode list: inode %llu is in use", (unsigned long long)ino);
		if (ip->prev != prev)
			problem(c, "free inode list: slot %llu points back to %llu, not %llu", (unsigned long long)ino,
				(unsigned long long)ip->prev, (unsigned long long)prev);
		c->seen[ino] = 2;
		set_bit(c->used, off >> KURA_BLOCK_SHIFT);
		(*free_slots)++;
		prev = ino;
		ino = ip->link;
	}
}

/* The hidden directory of attribute holders (xattr.c): a second tree,
 * whose every entry must name a live inode by number, the holder pointing
 * back at it.  Entries for inodes since freed are repaired away. */
static void check_xattrs(struct check *c)
{
	struct kura_fs *fs = c->fs;
	uint64_t xd = fs_state(fs)->xattr_dir;
	if (!xd)
		return;
	const struct kura_inode *dp = ino_get(fs, xd);
	if (fs->sb->version < 3 || !dp || !S_ISDIR(dp->mode) || dp->parent != xd || c->seen[xd]) {
		problem(c, "state: attribute directory %llu is not a directory of its own", (unsigned long long)xd);
		return;
	}
	c->seen[xd] = 1;
	c->links[xd] = 1;
	visit_inode(c, xd);
	while (c->nstack)
		check_dir(c, c->stack[--c->nstack]);
}

/* After the orphan list is checked: every holder's owner is a live inode. */
static void check_xattr_owners(struct check *c, int repair)
{
	struct kura_fs *fs = c->fs;
	uint64_t xd = fs_state(fs)->xattr_dir;
	const struct kura_inode *dp = xd ? ino_get(fs, xd) : NULL;
	if (!dp || !S_ISDIR(dp->mode) || c->seen[xd] != 1)
		return;
	struct dir_entry e;
	uint64_t cookie = 0;
	while (dir_next(fs, dp, &cookie, &e) == 1) {
		char *end;
		e.name[e.name_len] = 0;
		uint64_t owner = strtoull(e.name, &end, 16);
		const struct kura_inode *hp = ino_get(fs, e.ino), *op = ino_get(fs, owner);
		if (e.name_len == 16 && !*end && hp && S_ISREG(hp->mode) && hp->parent == owner && op && op->mode &&
		    c->seen[owner] && owner != xd && owner != e.ino)
			continue;
		problem(c, "attributes %s (inode %llu): their inode is gone or not theirs", e.name,
			(unsigned long long)e.ino);
		if (repair && hp && S_ISREG(hp->mode) && fs_begin(fs) == 0) {
			int err = dir_remove(fs, xd, e.name, e.name_len);
			if (!err) {
				INO_SET(fs, e.ino, nlink, 0);
				inode_free(fs, e.ino);
			}
			if (fs_end(fs, err) == 0)
				cookie = 0; /* the directory changed under the walk */
		}
	}
}

static int run_check(struct check *c, int repair)
{
	struct kura_fs *fs = c->fs;
	uint64_t root = fs->sb->root_ino;
	for (uint64_t b = 0; b < fs->first_data_block; b++)
		set_bit(c->used, b);
	/* Mount vouched for the root, but the rollback fsck did since may not. */
	const struct kura_inode *rip = ino_get(fs, root);
	if (!rip || !S_ISDIR(rip->mode)) {
		problem(c, "root directory: inode %llu is free or not a directory", (unsigned long long)root);
		return c->problems;
	}
	c->seen[root] = 1;
	c->links[root] = 1;
	visit_inode(c, root);
	if (ino_get(fs, root)->parent != root)
		problem(c, "root directory: parent pointer is not itself");
	while (c->nstack)
		check_dir(c, c->stack[--c->nstack]);
	check_xattrs(c);
	uint64_t free_slots;
	check_lists(c, &free_slots);
	check_xattr_owners(c, repair);
	/* Link counts of non-directories. */
	for (uint64_t b = fs->first_data_block; b < fs->nblocks; b++) {
		if (!bit(c->used, b) || !alloc_is_used(fs, b))
			continue;
		for (unsigned k = 0; k < INODES_PER_BLOCK; k++) {
			uint64_t ino = (block_off(b) >> INODE_SHIFT) + k;
			const struct kura_inode *ip = media_ptr(&fs->m, ino_off(ino));
			if (c->seen[ino] == 1 && !S_ISDIR(ip->mode) && ip->nlink != c->links[ino])
				problem(c, "inode %llu: link count %u, but %u names", (unsigned long long)ino, ip->nlink,
					c->links[ino]);
		}
	}
	/* Slots in inode blocks that nothing accounts for, and inode blocks
	 * with no inode left: freeing the last inode of a block frees the block
	 * unless its slots are the only free ones (inode.c), so such a block
	 * must hold every free slot. */
	uint64_t leaked_inodes = 0, empty_inode_blocks = 0;
	for (uint64_t b = fs->first_data_block; b < fs->nblocks; b++) {
		if (!bit(c->used, b))
			continue;
		uint64_t first = block_off(b) >> INODE_SHIFT;
		int inode_block = 0;
		for (unsigned k = 0; k < INODES_PER_BLOCK; k++)
			inode_block |= c->seen[first + k] != 0;
		if (!inode_block)
			continue;
		int all_free = 1;
		for (unsigned k = 0; k < INODES_PER_BLOCK; k++)
			all_free &= c->seen[first + k] == 2;
		if (all_free && (++empty_inode_blocks > 1 || free_slots > INODES_PER_BLOCK)) {
			problem(c, "inode block %llu: every slot free while other slots are free too (leaked)",
				(unsigned long long)b);
			if (repair && fs_begin(fs) == 0) {
				if (inode_block_reclaim(fs, b, 0))
					clear_bit(c->used, b);
				fs_end(fs, 0);
			}
		}
		for (unsigned k = 0; k < INODES_PER_BLOCK; k++) {
			uint64_t ino = first + k;
			if (c->seen[ino])
				continue;
			const struct kura_inode *ip = media_ptr(&fs->m, ino_off(ino));
			if (ip->mode) {
				problem(c, "inode %llu: in use but unreachable (leaked)", (unsigned long long)ino);
				leaked_inodes++;
				if (repair && fs_begin(fs) == 0) {
					INO_SET(fs, ino, nlink, 0);
					orphan_add(fs, ino);
					fs_end(fs, 0);
				}
			} else {
				problem(c, "inode slot %llu: free but not on the free list (leaked)",
					(unsigned long long)ino);
			}
		}
	}
	uint64_t zero_bits = 0, leaked = 0;
	for (uint64_t b = 0; b < fs->nblocks; b++) {
		int on = alloc_is_used(fs, b), want = bit(c->used, b);
		if (!on)
			zero_bits++;
		if (want && !on)
			problem(c, "block %llu: in use but marked free", (unsigned long long)b);
		if (on && !want) {
			leaked++;
			if (leaked <= 20)
				problem(c, "block %llu: marked used but unreachable (leaked)", (unsigned long long)b);
		}
	}
	if (leaked > 20)
		problem(c, "... %llu leaked blocks in all", (unsigned long long)leaked);
	const struct kura_state *st = fs_state(fs);
	if (zero_bits != st->free_blocks)
		problem(c, "state: %llu blocks free, counter says %llu", (unsigned long long)zero_bits,
			(unsigned long long)st->free_blocks);
	if (c->files != st->nfiles || c->dirs != st->ndirs || c->symlinks != st->nsymlinks)
		problem(c, "state: counts files/dirs/symlinks %llu/%llu/%llu, counters say %llu/%llu/%llu",
			(unsigned long long)c->files, (unsigned long long)c->dirs, (unsigned long long)c->symlinks,
			(unsigned long long)st->nfiles, (unsigned long long)st->ndirs,
			(unsigned long long)st->nsymlinks);
	if (repair && (leaked || zero_bits != st->free_blocks) && fs_begin(fs) == 0) {
		for (uint64_t b = fs->first_data_block; b < fs->nblocks; b++)
			if (alloc_is_used(fs, b) && !bit(c->used, b))
				alloc_free(fs, b);
		fs_end(fs, 0);
	}
	if (repair && (c->files != st->nfiles || c->dirs != st->ndirs || c->symlinks != st->nsymlinks) &&
	    fs_begin(fs) == 0) {
		tx_write64(&fs->tx, STATE_OFF(nfiles), c->files);
		tx_write64(&fs->tx, STATE_OFF(ndirs), c->dirs);
		tx_write64(&fs->tx, STATE_OFF(nsymlinks), c->symlinks);
		fs_end(fs, 0);
	}
	if (repair && (leaked_inodes || st->orphans))
		orphan_reclaim(fs);
	for (size_t k = 0; k < c->ncompact; k++)
		if (fs_begin(fs) == 0)
			fs_end(fs, dir_compact(fs, c->compact[k]));
	return c->problems;
}

int kura_fsck(const char *pool_path, int repair, kura_report_fn report, void *ctx)
{
	struct kura_mount_opts opts = { .read_only = !repair, .no_recover = 1 };
	int err = 0;
	struct kura_fs *fs = fs_open(pool_path, &opts, 0, &err);
	if (!fs) {
		if (report)
			report(ctx, kura_last_error());
		return err ? err : -EIO;
	}
	/* An interrupted transaction is normal after a crash: undo it (in a
	 * private view unless repairing) and check what mounting would see. */
	fs_lock_for_read(fs);
	int undone = tx_recover(&fs->tx);
	if (undone > 0 && report) {
		char line[160];
		snprintf(line, sizeof line, "note: rolled back an interrupted transaction (%d log records)%s", undone,
			 repair ? "" : " in memory only");
		report(ctx, line);
	}
	struct check c = { .fs = fs, .report = report, .ctx = ctx, .repair = repair };
	c.nslots = fs->nblocks << (KURA_BLOCK_SHIFT - INODE_SHIFT);
	c.used = calloc((fs->nblocks + 7) / 8, 1);
	c.links = calloc(c.nslots, sizeof *c.links);
	c.seen = calloc(c.nslots, 1);
	if (!c.used || !c.links || !c.seen) {
		fs_unlock_for_read(fs);
		free(c.used);
		free(c.links);
		free(c.seen);
		kura_unmount(fs);
		return -ENOMEM;
	}
	fs_unlock_for_read(fs);
	/* A read-only check needs no lock: the view is private.  Repairs take
	 * the lock per transaction, so the check itself runs unlocked. */
	int problems = run_check(&c, repair);
	free(c.used);
	free(c.links);
	free(c.seen);
	free(c.stack);
	free(c.compact);
	kura_unmount(fs);
	return problems;
}
