/*
 * work.h — workloads: an ACE-style table of single API calls over a small
 * namespace, the setup they start from, and the descriptor slots that let a
 * workload keep several descriptors (also to one file, also after unlink).
 *
 * Every table entry is exactly one kura_* call, because one call is the unit
 * the engine promises to make atomic.  A workload is a list of entries; the
 * explorer appends closes of the descriptors still open so that releasing an
 * unlinked file (orphan reclamation) is crashed into as well.
 */
#ifndef CRASH_WORK_H
#define CRASH_WORK_H

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include "kura.h"
#include "crash/util.h"
#include "crash/work_table.h"

struct wk_ctx {
	int fd[WK_SLOTS];
	uint64_t gpin[WK_SLOTS]; /* a group's shadow this slot's gmapwrite pinned */
	uint64_t retired;        /* an ended group's pinned shadow, whose pin the next gbegin drops, as the
				  * interposition layer does (kura_atomic_begin_retiring) */
	int seq; /* entry number, so different writes write different bytes */
};

static void wk_pattern(char *buf, long len, int seq, long off)
{
	for (long i = 0; i < len; i++)
		buf[i] = (char)('a' + (seq * 7 + (off + i) * 3 + (off + i) / 61) % 26);
}

/* Set for a workload that names G/ (wk_note_ops): the setup then also builds
 * the state in which one unlink frees an inode block and merges buckets. */
static int wk_space_setup;

static CRASH_UNUSED void wk_note_ops(const int *ops, int n)
{
	wk_space_setup = 0;
	for (int i = 0; i < n; i++)
		wk_space_setup |= wk_table[ops[i]].a && !strncmp(wk_table[ops[i]].a, "G/", 2);
}

static int wk_create(kura_fs *fs, const char *path)
{
	int fd = kura_open(fs, path, O_CREAT | O_EXCL | O_RDWR, 0644);
	if (fd < 0)
		return fd;
	kura_close(fs, fd);
	return 0;
}

/* F holds fillers up to the end of the root's inode block (all but one,
 * so a free slot stays outside the next block), G/solo is the only inode of
 * the next block, and G holds solo plus 25 links to F/fill-1 in exactly two
 * buckets (split at 35 entries, then cut back to 26, one above merging). */
static int wk_setup_space(kura_fs *fs)
{
	struct stat st;
	char name[256];
	int err = kura_mkdir(fs, "F", 0755) | kura_mkdir(fs, "G", 0755) | kura_stat(fs, "/", &st);
	uint64_t root_block = (uint64_t)st.st_ino / 32;
	for (int i = 0; !err && i < 40; i++) {
		snprintf(name, sizeof name, "F/fill-%d", i);
		if ((err = wk_create(fs, name)) || (err = kura_stat(fs, name, &st)))
			break;
		if ((uint64_t)st.st_ino / 32 != root_block) {
			err = kura_rename(fs, name, WK_G_SOLO, 0) | kura_unlink(fs, "F/fill-0");
			break;
		}
	}
	for (int i = 0; !err && i < 34; i++) {
		snprintf(name, sizeof name, "%s-%02d", WK_G_STEM, i);
		err = kura_link(fs, "F/fill-1", name);
	}
	if (!err && (err = kura_stat(fs, "G", &st)) == 0 && st.st_blocks != 3 * 8)
		err = -EAGAIN; /* not one split into two buckets: the hash placed 35 names oddly */
	for (int i = 34; !err && i-- > 25;) {
		snprintf(name, sizeof name, "%s-%02d", WK_G_STEM, i);
		err = kura_unlink(fs, name);
	}
	if (!err && (err = kura_stat(fs, "G", &st)) == 0 && st.st_blocks != 3 * 8)
		err = -EAGAIN;
	return err;
}

static int wk_setup(kura_fs *fs, struct wk_ctx *c)
{
	static char buf[8192];
	int err = 0;
	err |= kura_mkdir(fs, "A", 0755);
	err |= kura_mkdir(fs, "B", 0755);
	err |= kura_mkdir(fs, "A/C", 0750);
	static const struct { const char *p; long len; } files[] = {
		{ "foo", 6000 }, { "bar", 100 }, { "A/foo", 4096 }, { "A/bar", 0 }, { "B/foo", 70 },
	};
	for (int i = 0; i < 5; i++) {
		int fd = kura_open(fs, files[i].p, O_CREAT | O_RDWR, 0644);
		if (fd < 0)
			return fd;
		wk_pattern(buf, files[i].len, 100 + i, 0);
		if (files[i].len && kura_pwrite(fs, fd, buf, (size_t)files[i].len, 0) != files[i].len)
			err = -EIO;
		kura_close(fs, fd);
	}
	for (int i = 0; i < WK_SLOTS; i++)
		c->fd[i] = -1, c->gpin[i] = 0;
	c->retired = 0;
	c->fd[0] = kura_open(fs, "foo", O_RDWR, 0);
	c->fd[1] = kura_open(fs, "foo", O_RDWR | O_APPEND, 0);
	c->fd[2] = kura_open(fs, "A/foo", O_RDWR, 0);
	c->fd[3] = kura_open(fs, "bar", O_RDWR, 0);
	c->seq = 0;
	if (!err && wk_space_setup)
		err = wk_setup_space(fs);
	return err ? -EIO : 0;
}

static int wk_fd(struct wk_ctx *c, int slot)
{
	return c->fd[slot] >= 0 ? c->fd[slot] : 1 << 20; /* a descriptor that is never open: -EBADF */
}

/* Stores through a map of the pool: pin, map the blocks, store, sync,
 * unmap, unpin.  Returns 0 or -errno. */
static long wk_mapwrite(kura_fs *fs, int fd, long off, long len, const char *src)
{
	uint64_t ino, offs[4];
	long first = off / 4096, n = (off + len + 4095) / 4096 - first;
	if (n > 4)
		return -EINVAL;
	long r = kura_map_pin(fs, fd, 1, &ino);
	if (r)
		return r;
	int writable, mfd = kura_map_fd(fs, &writable);
	int64_t size = kura_map_blocks(fs, ino, (uint64_t)first, (uint64_t)n, 1, offs);
	if (size < off + len)
		r = size < 0 ? size : -ENXIO;
	for (long i = 0; i < n && !r; i++) {
		char *p = offs[i] ? mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, (off_t)offs[i]) : MAP_FAILED;
		if (p == MAP_FAILED) {
			r = -EIO;
			break;
		}
		long from = i == 0 ? off % 4096 : 0, to = i == n - 1 ? (off + len - 1) % 4096 + 1 : 4096;
		memcpy(p + from, src + (first + i) * 4096 + from - off, (size_t)(to - from));
		munmap(p, 4096);
	}
	if (!r)
		r = kura_map_sync(fs, ino, (uint64_t)first, (uint64_t)n, KURA_MAP_RECORD | KURA_MAP_DURABLE);
	kura_map_unpin(fs, ino);
	return r;
}

/* Stores through the group's own blocks, mapped: the interposition
 * layer's store into a page its group took over.  The first pins the
 * group's shadow, as the layer does; the group's end unpins it.  With
 * ahead, the blocks come from one kura_atomic_map_blocks call that also
 * takes ahead pages after the range, which are given back unstored. */
static long wk_gmapwrite(kura_fs *fs, struct wk_ctx *c, int slot, long off, long len, const char *src, int ahead)
{
	long first = off / 4096, n = (off + len + 4095) / 4096 - first, r = 0, got = 0;
	int writable, mfd = kura_map_fd(fs, &writable);
	uint64_t taken[8], fbs[8], shadow;
	if (ahead && n + ahead <= 8) {
		got = kura_atomic_map_blocks(fs, wk_fd(c, slot), (uint64_t)first, (size_t)(n + ahead), !c->gpin[slot],
					     taken, &shadow);
		if (got < 0)
			return got;
		c->gpin[slot] = shadow;
	}
	for (long i = 0; i < n && !r; i++) {
		uint64_t block = taken[i];
		if (i >= got) {
			r = kura_atomic_map_block(fs, wk_fd(c, slot), (uint64_t)(first + i), !c->gpin[slot], &block,
						  &shadow);
			if (r)
				break;
		}
		c->gpin[slot] = shadow;
		char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, (off_t)(block * 4096));
		if (p == MAP_FAILED)
			return -EIO;
		long from = i == 0 ? off % 4096 : 0, to = i == n - 1 ? (off + len - 1) % 4096 + 1 : 4096;
		memcpy(p + from, src + (first + i) * 4096 + from - off, (size_t)(to - from));
		munmap(p, 4096);
	}
	for (long i = n; i < got; i++)
		fbs[i - n] = (uint64_t)(first + i);
	if (!r && got > n)
		r = kura_atomic_unmap_blocks(fs, wk_fd(c, slot), fbs, taken + n, (size_t)(got - n));
	return r;
}

/* The group of slot is over (committed, aborted): its shadow's pin waits
 * for the next gbegin's transaction (one retired at a time; an older one
 * goes now), or for the close at the end, which frees it. */
static void wk_gunpin(kura_fs *fs, struct wk_ctx *c, int slot)
{
	if (c->retired)
		kura_map_unpin(fs, c->retired);
	c->retired = c->gpin[slot];
	c->gpin[slot] = 0;
}

/* The states a crash during mapwrite op may show besides before and
 * after: each proper, non-empty subset of its pages written (dumped into
 * hashes, at most WK_MIX_MAX), the pool put back after each.  Returns how
 * many. */
#define WK_MIX_MAX 14
static uint64_t dump_fs(kura_fs *fs, struct sbuf *out);
static CRASH_UNUSED int wk_mapwrite_mixes(kura_fs *fs, struct wk_ctx *c, const struct wk_op *op, uint64_t *out,
					  struct sbuf *dbuf)
{
	static char want[16384], old[16384];
	long first = op->off / 4096, n = (op->off + op->len + 4095) / 4096 - first, k = 0;
	int fd = wk_fd(c, op->slot);
	if (n > 4 || kura_pread(fs, fd, old, (size_t)op->len, op->off) != op->len)
		return 0;
	wk_pattern(want, op->len, c->seq + 1, op->off); /* the bytes wk_run will store */
	for (long mask = 1; mask < (1L << n) - 1 && k < WK_MIX_MAX; mask++) {
		for (long p = 0; p < n; p++) {
			long from = (first + p) * 4096 > op->off ? (first + p) * 4096 : op->off;
			long to = (first + p + 1) * 4096 < op->off + op->len ? (first + p + 1) * 4096 : op->off + op->len;
			const char *src = (mask >> p & 1) ? want : old;
			kura_pwrite(fs, fd, src + (from - op->off), (size_t)(to - from), from);
		}
		out[k++] = dump_fs(fs, dbuf);
		kura_pwrite(fs, fd, old, (size_t)op->len, op->off);
	}
	return (int)k;
}

/* On the pmem model a map's stores reach the pool untraced, so no crash
 * image the model builds can hold them: workloads with mapwrite entries
 * are explored on the file model only, where what reaches the disk is the
 * journal's records and checkpoints. */
static CRASH_UNUSED int wk_model_ok(const int *ops, int n, int file_model)
{
	for (int i = 0; i < n && !file_model; i++)
		if (wk_table[ops[i]].kind == K_MAPWRITE || wk_table[ops[i]].kind == K_GMAPWRITE)
			return 0;
	return 1;
}

static int wk_open_slots(const struct wk_ctx *c);

/* The gset entries: foo's group (slot 0), and as op->mode says A/foo's
 * (slot 2), a rename, or an unnamed file linked while another name goes,
 * all in one kura_group_commit.  Returns its result (the tmpfile's open
 * or write error instead if they fail: deterministic between runs). */
static long wk_gset(kura_fs *fs, struct wk_ctx *c, const struct wk_op *op, char *buf)
{
	struct kura_group_file files[2] = { { .fd = wk_fd(c, 0) }, { .fd = wk_fd(c, 2) } };
	struct kura_group_op ops[2];
	int nfiles = op->mode & WK_GSET_AFOO ? 2 : 1, nops = 0, tmp = -1;
	if (op->mode & WK_GSET_RENAME)
		ops[nops++] = (struct kura_group_op){ KURA_GROUP_RENAME, KURA_AT_ROOT, op->a, KURA_AT_ROOT, op->b, 0 };
	if (op->mode & WK_GSET_TMPFILE) {
		tmp = kura_open(fs, "/", O_TMPFILE | O_RDWR, 0640);
		if (tmp < 0)
			return tmp;
		wk_pattern(buf, op->len, c->seq, 0);
		long w = kura_pwrite(fs, tmp, buf, (size_t)op->len, 0);
		if (w != op->len) {
			kura_close(fs, tmp);
			return w < 0 ? w : -EIO;
		}
		ops[nops++] = (struct kura_group_op){ KURA_GROUP_LINK, tmp, NULL, KURA_AT_ROOT, op->a, 0 };
		ops[nops++] = (struct kura_group_op){ KURA_GROUP_UNLINK, KURA_AT_ROOT, op->b, 0, NULL, 0 };
	}
	long r = kura_group_commit(fs, files, nfiles, ops, nops, NULL);
	if (!r) {
		/* Both groups ended: two wk_gunpin calls, the second unpinning
		 * the first's shadow now (one retired shadow at a time). */
		wk_gunpin(fs, c, 0);
		if (nfiles > 1)
			wk_gunpin(fs, c, 2);
	}
	if (tmp >= 0) {
		/* Kept open like creat's descriptor (a later entry may write
		 * through slot 4 to baz); no free slot: closed now, which frees it
		 * if the commit failed. */
		int s = op->slot;
		while (s < WK_SLOTS && c->fd[s] >= 0)
			s++;
		if (s < WK_SLOTS)
			c->fd[s] = tmp;
		else
			kura_close(fs, tmp);
	}
	return r;
}

/* Runs one entry; returns the call's result (compared between runs). */
static long wk_run(kura_fs *fs, struct wk_ctx *c, const struct wk_op *op)
{
	static char buf[16384];
	long r = 0;
	c->seq++;
	switch (op->kind) {
	case K_CREAT:
	case K_OPEN: {
		int flags = op->kind == K_CREAT ? O_CREAT | O_EXCL | O_RDWR : (int)op->len;
		r = kura_open(fs, op->a, flags, 0640);
		if (r >= 0) {
			/* A slot still in use keeps its descriptor: the new one is
			 * closed at the end like any other. */
			for (int s = op->slot; s < WK_SLOTS; s++)
				if (c->fd[s] < 0) {
					c->fd[s] = (int)r;
					break;
				}
			r = 0;
		}
		break;
	}
	case K_MKNOD: r = kura_mknod(fs, op->a, (op->mode ? (mode_t)op->mode : S_IFREG) | 0600, 0); break;
	case K_MKDIR: r = kura_mkdir(fs, op->a, 0755); break;
	case K_RMDIR: r = kura_rmdir(fs, op->a); break;
	case K_WRITE:
		wk_pattern(buf, op->len, c->seq, 0);
		r = kura_write(fs, wk_fd(c, op->slot), buf, (size_t)op->len);
		break;
	case K_PWRITE:
		wk_pattern(buf, op->len, c->seq, op->off);
		r = kura_pwrite(fs, wk_fd(c, op->slot), buf, (size_t)op->len, op->off);
		break;
	case K_FTRUNC: r = kura_ftruncate(fs, wk_fd(c, op->slot), op->off); break;
	case K_TRUNC: r = kura_truncate(fs, op->a, op->off); break;
	case K_FALLOC: r = kura_fallocate(fs, wk_fd(c, op->slot), op->mode, op->off, op->len); break;
	case K_LINK: r = kura_link(fs, op->a, op->b); break;
	case K_UNLINK: r = kura_unlink(fs, op->a); break;
	case K_RENAME: r = kura_rename(fs, op->a, op->b, (unsigned)op->mode); break;
	case K_SYMLINK: {
		const char *t = op->a;
		char longt[201];
		if (!t) {
			wk_pattern(longt, 200, 5, 0);
			longt[200] = 0;
			t = longt;
		}
		r = kura_symlink(fs, t, op->b);
		break;
	}
	case K_FSYNC: r = kura_fsync(fs, wk_fd(c, op->slot)); break;
	case K_CHMOD: r = kura_chmod(fs, op->a, (mode_t)op->mode); break;
	case K_CLOSE:
		r = kura_close(fs, wk_fd(c, op->slot));
		c->fd[op->slot] = -1;
		wk_gunpin(fs, c, op->slot);
		if (!wk_open_slots(c))
			wk_gunpin(fs, c, op->slot); /* the retired pin, before the pool is left */
		break;
	case K_GBEGIN:
		r = kura_atomic_begin_retiring(fs, wk_fd(c, op->slot), c->retired);
		c->retired = 0;
		break;
	case K_GCOMMIT:
		r = kura_atomic_commit_maps(fs, wk_fd(c, op->slot), 0);
		r = r > 0 ? 0 : r;
		if (!r)
			wk_gunpin(fs, c, op->slot);
		break;
	case K_GABORT:
		r = kura_atomic_abort(fs, wk_fd(c, op->slot));
		if (!r)
			wk_gunpin(fs, c, op->slot);
		break;
	case K_GMAPWRITE:
		wk_pattern(buf, op->len, c->seq, op->off);
		r = wk_gmapwrite(fs, c, op->slot, op->off, op->len, buf, op->mode);
		break;
	case K_GSET: r = wk_gset(fs, c, op, buf); break;
	case K_SETXATTR:
		wk_pattern(buf, op->len, c->seq, 0);
		r = kura_setxattrat(fs, KURA_AT_ROOT, op->a, op->b, buf, (size_t)op->len, 0, 0);
		break;
	case K_RMXATTR: r = kura_removexattrat(fs, KURA_AT_ROOT, op->a, op->b, 0); break;
	case K_SETACL: {
		/* user::rw- user:1000:r-- group::r-- mask::r-- other::--- */
		static const uint16_t acl[] = { 2, 0, 1, 6, 0xffff, 0xffff, 2, 4, 1000, 0, 4, 4, 0xffff, 0xffff,
						0x10, 4, 0xffff, 0xffff, 0x20, 0, 0xffff, 0xffff };
		r = kura_setxattrat(fs, KURA_AT_ROOT, op->a, op->b, acl, sizeof acl, 0, 0);
		break;
	}
	case K_MAPWRITE:
		wk_pattern(buf, op->len, c->seq, op->off);
		r = wk_mapwrite(fs, wk_fd(c, op->slot), op->off, op->len, buf);
		break;
	case K_PINTRUNC:
	case K_PINTRIM: {
		uint64_t ino, before;
		r = kura_map_pin(fs, wk_fd(c, op->slot), 1, &ino);
		if (!r) {
			kura_map_own_truncation(&before);
			r = kura_ftruncate(fs, wk_fd(c, op->slot), op->off);
			uint64_t after = kura_map_own_truncation(&before);
			if (!r && op->kind == K_PINTRIM && after)
				r = kura_map_trim(fs, ino, 1, after);
			kura_map_unpin(fs, ino);
		}
		break;
	}
	case K_CLOSE_AUTO:
		for (int s = 0; s < WK_SLOTS; s++)
			if (c->fd[s] >= 0) {
				r = kura_close(fs, c->fd[s]);
				c->fd[s] = -1;
				wk_gunpin(fs, c, s);
				if (!wk_open_slots(c))
					wk_gunpin(fs, c, s); /* the retired pin, before the pool is left */
				break;
			}
		break;
	}
	return r;
}

static int wk_open_slots(const struct wk_ctx *c)
{
	int n = 0;
	for (int s = 0; s < WK_SLOTS; s++)
		n += c->fd[s] >= 0;
	return n;
}

static int wk_lookup(const char *name)
{
	for (int i = 0; i < WK_NOPS; i++)
		if (!strcmp(wk_table[i].name, name))
			return i;
	return -1;
}

/* "a,b,c" -> table indices; returns the count or -1 naming the bad entry. */
static CRASH_UNUSED int wk_parse(const char *spec, int *ops, int max)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s", spec);
	int n = 0;
	for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int i = wk_lookup(t);
		if (i < 0 || n == max) {
			fprintf(stderr, "unknown or too many workload entries at '%s'\n", t);
			return -1;
		}
		ops[n++] = i;
	}
	return n;
}

static CRASH_UNUSED void wk_format(const int *ops, int n, char *out, size_t len)
{
	size_t k = 0;
	out[0] = 0;
	for (int i = 0; i < n && k < len; i++)
		k += (size_t)snprintf(out + k, len - k, "%s%s", i ? "," : "", wk_table[ops[i]].name);
}

#endif
