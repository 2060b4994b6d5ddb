/*
 * dir.h — directories: extendible hash tables of name -> inode.
 *
 * The directory inode's block map holds 2^depth bucket pointers; a name
 * whose hash has low bits i lives in the bucket of slot i.  A bucket is one
 * block of packed entries with its own (local) depth; when one fills it
 * splits in two on its next hash bit, doubling the slot array first if
 * needed.  Doubling only appends (the new half copies the old), so it never
 * rewrites what exists.  Lookup: one slot read and one bucket scan.
 *
 * readdir order is by the bit-reversed hash ("key"): every bucket then covers
 * one contiguous key range, so a cookie that is simply "the next key" stays
 * valid however buckets split while a reader walks the directory.  Hashes
 * are kept to 62 bits so cookies fit telldir()'s long with room for "." and
 * "..".  Two names with one 62-bit hash in one directory would share a
 * cookie (one could be skipped by a resumed readdir); with a keyed hash that
 * is a 2^-62 event per pair, accepted and documented.
 */
#ifndef KURA_DIR_H
#define KURA_DIR_H

#include <stddef.h>
#include <stdint.h>
#include "fs.h"
#include <dirent.h>
#include <sys/stat.h>

/* The type byte a directory entry keeps for an inode of this mode. */
static inline unsigned dtype_of(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFDIR: return DT_DIR;
	case S_IFLNK: return DT_LNK;
	case S_IFIFO: return DT_FIFO;
	case S_IFCHR: return DT_CHR;
	case S_IFBLK: return DT_BLK;
	case S_IFSOCK: return DT_SOCK;
	default: return DT_REG;
	}
}

#define DIR_COOKIE_END ((uint64_t)1 << 62)

uint64_t dir_hash(const struct kura_fs *fs, const char *name, size_t len);
/* 1 if the directory's hash depth, slot-array size and block count agree
 * (every walk over its slots relies on that bound). */
int dir_sane(const struct kura_fs *fs, const struct kura_inode *dip);
/* 0 and fills ino and type, -ENOENT, or -EUCLEAN for a damaged directory. */
int dir_lookup(const struct kura_fs *fs, const struct kura_inode *dip, const char *name, size_t len, uint64_t *ino,
	       unsigned *type);
/* The name must not exist. */
int dir_add(struct kura_fs *fs, uint64_t dino, const char *name, size_t len, uint64_t ino, unsigned type);
/* Removes the name, then merges its bucket with its buddy while they fit in
 * one and halves the slot array while it can: a directory that shrinks gives
 * its buckets back. */
int dir_remove(struct kura_fs *fs, uint64_t dino, const char *name, size_t len);
/* 1 if two buddy buckets holding these many bytes of entries must be one
 * (an invariant fsck checks). */
int dir_can_merge(uint32_t used_a, uint32_t used_b);
/* The valid bucket serving slot i, or NULL. */
const struct kura_bucket *dir_slot_bucket(const struct kura_fs *fs, const struct kura_inode *dip, uint64_t i);
/* Merges every mergeable pair and shrinks the slot array (fsck --repair). */
int dir_compact(struct kura_fs *fs, uint64_t dino);
/* Points an existing name at another inode (rename over a target). */
int dir_retarget(struct kura_fs *fs, uint64_t dino, const char *name, size_t len, uint64_t ino, unsigned type);
/* 0 if the directory is empty, -ENOTEMPTY, or -EUCLEAN if its entry count
 * says empty but a bucket holds entries. */
int dir_empty_check(const struct kura_fs *fs, const struct kura_inode *dip);
/* Frees the buckets and slot array of an empty directory. */
void dir_release(struct kura_fs *fs, uint64_t dino);

struct dir_entry {
	uint64_t ino;
	unsigned type;
	unsigned name_len;
	char name[KURA_NAME_MAX + 1];
};
/* From key *cookie on: 1 and the entry (with *cookie advanced past it), 0 at
 * the end, or -EUCLEAN. */
int dir_next(const struct kura_fs *fs, const struct kura_inode *dip, uint64_t *cookie, struct dir_entry *out);
/* Up to max entries from key cookie on, in key order, found in one scan of
 * the bucket that holds the next one (a listing then scans each bucket a
 * few times, not once an entry); keys[i] + 1 resumes after out[i].  The
 * count, 0 at the end, or -EUCLEAN. */
int dir_next_batch(const struct kura_fs *fs, const struct kura_inode *dip, uint64_t cookie, struct dir_entry *out,
		   uint64_t *keys, int max);

#endif
