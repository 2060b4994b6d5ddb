/*
 * pool_fuzz.c — libFuzzer target: hostile pool images.
 *
 * A small valid pool (files, a big directory with split buckets, a sparse
 * file with map nodes, symlinks, a hard link, an orphan) is built once.  Each
 * input is a list of patches applied to a copy of it, aimed mostly at
 * metadata: superblock fields (with the crc recomputed, or else the mount
 * stops at the checksum), the state block, the undo log (including a record
 * whose crc is fixed up so recovery replays it), the bitmap, and the blocks
 * the pool actually uses.  Then: fsck, mount, a walk that stats, reads and
 * readlinks everything, a few changes, unmount, fsck again.  The pool file
 * stays mapped between inputs and only the blocks an input changed are
 * restored, which keeps an execution to a few milliseconds.
 *
 * What must hold: no crash, hang or sanitizer report; a refused mount names
 * a reason; and when the first fsck calls the pool clean, nothing may then
 * report it damaged (-EUCLEAN) and the final fsck must be clean too — a
 * corruption fsck misses must at least be harmless.
 *
 * Input format, repeated until the bytes run out:
 *   kind:1  where:2 (little-endian)  len:1  bytes:len
 * `where` is reduced modulo the size of the region `kind` selects.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "crc.h"
#include "kura.h"
#include "layout.h"

#define POOL_SIZE KURA_MIN_POOL_SIZE
#define BIG_ENTRIES 60
#define LONG_STEM                                                                                            \
	"entry-with-a-long-name-so-that-few-of-them-fill-a-bucket-and-make-it-split-"                       \
	"entry-with-a-long-name-so-that-few-of-them-fill-a-bucket-and-make-it-split-"                       \
	"entry-with-a-long-name"

static char pool[256];
static unsigned char *base;       /* the valid image every input starts from */
static uint64_t *used_blocks;     /* data-area blocks in use in the base image */
static size_t nused;
static struct kura_super geo;     /* the base image's superblock */
static int verbose;

static void die(const char *what, long err)
{
	fprintf(stderr, "pool_fuzz: %s: %ld (%s)\n", what, err, kura_last_error());
	abort();
}

static void put_file(kura_fs *fs, const char *path, size_t n, unsigned seed, off_t at)
{
	int fd = kura_open(fs, path, O_CREAT | O_WRONLY, 0644);
	if (fd < 0)
		die(path, fd);
	char *b = malloc(n);
	for (size_t i = 0; i < n; i++)
		b[i] = (char)('a' + (i * 7 + seed) % 26);
	if (kura_pwrite(fs, fd, b, n, at) != (ssize_t)n)
		die(path, -1);
	free(b);
	kura_close(fs, fd);
}

/* The base pool's contents: every structure the format has, small. */
static void populate(void)
{
	int err;
	kura_fs *fs = kura_mount(pool, NULL, &err);
	if (!fs)
		die("mount base", err);
	kura_mkdir(fs, "/d", 0755);
	kura_mkdir(fs, "/d/sub", 0700);
	kura_mkdir(fs, "/empty", 0755);
	kura_mkdir(fs, "/big", 0755);
	put_file(fs, "/small", 100, 1, 0);
	put_file(fs, "/d/f1", 10000, 2, 0);
	put_file(fs, "/d/sub/deep", 4096, 3, 0);
	put_file(fs, "/sparse", 5000, 4, (off_t)1 << 30); /* map height 2 */
	char name[256];
	for (int i = 0; i < BIG_ENTRIES; i++) {
		/* Long names fill buckets fast: several splits and a multi-slot
		 * array from few entries, each of which costs every input a visit. */
		snprintf(name, sizeof name, "/big/%s-%04d", LONG_STEM, i);
		if (i % 3 == 0)
			put_file(fs, name, (size_t)i, 5, 0);
		else if (i % 3 == 1)
			kura_symlink(fs, "../small", name);
		else
			kura_mkdir(fs, name, 0755);
	}
	kura_symlink(fs, "../small", "/d/ln");
	char target[3000];
	memset(target, 'x', sizeof target - 1);
	target[sizeof target - 1] = 0;
	kura_symlink(fs, target, "/longlink");
	kura_link(fs, "/small", "/d/hl");
	kura_unmount(fs);

	/* An orphan: a process that unlinks an open file and dies leaves it on
	 * the orphan list for the next mount to reclaim. */
	pid_t pid = fork();
	if (pid == 0) {
		kura_fs *f = kura_mount(pool, NULL, &err);
		if (!f)
			_exit(1);
		int fd = kura_open(f, "/orphan", O_CREAT | O_RDWR, 0644);
		kura_pwrite(f, fd, "orphaned data", 13, 0);
		kura_unlink(f, "/orphan");
		_exit(0);
	}
	int status;
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		die("orphan child", status);
}

static void read_image(void)
{
	int fd = open(pool, O_RDONLY);
	if (fd < 0 || pread(fd, base, POOL_SIZE, 0) != (ssize_t)POOL_SIZE)
		die("read base image", errno);
	close(fd);
	memcpy(&geo, base, sizeof geo);
	const unsigned char *bm = base + geo.bitmap_block * KURA_BLOCK;
	used_blocks = malloc(geo.nblocks * sizeof *used_blocks);
	for (uint64_t b = geo.first_data_block; b < geo.nblocks; b++)
		if ((bm[b / 8] >> (b % 8)) & 1)
			used_blocks[nused++] = b;
}

static void init(void)
{
	verbose = getenv("POOL_FUZZ_VERBOSE") != NULL;
	const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(pool, sizeof pool, "%s/kura-fuzz-%d.pool", dir, (int)getpid());
	base = malloc(POOL_SIZE);
	int err = kura_mkfs(pool, POOL_SIZE, 1);
	if (err)
		die("mkfs", err);
	/* Fixed keys: the directory layout, and so what a corpus input hits,
	 * must not depend on the run. */
	int fd = open(pool, O_RDWR);
	struct kura_super sb;
	if (fd < 0 || pread(fd, &sb, sizeof sb, 0) != sizeof sb)
		die("read superblock", errno);
	sb.hash_key[0] = 0x0123456789abcdefull;
	sb.hash_key[1] = 0xfedcba9876543210ull;
	memset(sb.uuid, 0x5a, sizeof sb.uuid);
	sb.created_sec = 1700000000;
	sb.crc = crc32c(0, &sb, offsetof(struct kura_super, crc));
	if (pwrite(fd, &sb, sizeof sb, 0) != sizeof sb || pwrite(fd, &sb, sizeof sb, KURA_BLOCK) != sizeof sb)
		die("write superblock", errno);
	close(fd);
	populate();
	read_image();
	/* fuzz/make_mutants.py reads the base image to aim its inputs. */
	const char *save = getenv("POOL_FUZZ_SAVE_BASE");
	if (save) {
		int out = open(save, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (out < 0 || write(out, base, POOL_SIZE) != (ssize_t)POOL_SIZE)
			die("save the base image", errno);
		close(out);
	}
	int problems = kura_fsck(pool, 0, NULL, NULL);
	if (problems != 0)
		die("the base image is not fsck-clean", problems);
}

static void cleanup(void)
{
	if (pool[0])
		unlink(pool);
}

/* ---- applying an input ---------------------------------------------------- */

static void fix_super_crc(unsigned char *img, int which)
{
	struct kura_super *sb = (struct kura_super *)(img + (uint64_t)which * KURA_BLOCK);
	sb->crc = crc32c(0, sb, offsetof(struct kura_super, crc));
}

/* The first log record, made valid for the current epoch, so recovery
 * replays whatever the input put in it. */
static void fix_log_record(unsigned char *img)
{
	uint64_t log = geo.log_block * KURA_BLOCK;
	const struct kura_log_head *h = (const void *)(img + log);
	struct kura_log_rec *r = (void *)(img + log + sizeof *h);
	r->epoch = h->epoch;
	uint64_t room = geo.log_blocks * KURA_BLOCK - sizeof *h - sizeof *r;
	uint32_t len = r->len > room ? (uint32_t)room : r->len;
	uint32_t c = crc32c(0, &r->off, 8);
	c = crc32c(c, &r->epoch, 8);
	c = crc32c(c, &r->len, 4);
	r->crc = crc32c(c, r + 1, len);
}

enum { K_SB_BOTH, K_SB_PRIMARY, K_SB_RAW, K_STATE, K_LOG, K_LOG_REC, K_BITMAP, K_USED, K_USED_PTR, K_ANY,
       K_SIZE, K_KINDS };

/* Applies the patches; returns the pool file's size. */
static uint64_t apply(unsigned char *img, const uint8_t *data, size_t size)
{
	uint64_t file_size = POOL_SIZE;
	int sb_dirty = 0, log_dirty = 0;
	while (size >= 4) {
		unsigned kind = data[0] % K_KINDS;
		uint64_t where = data[1] | (uint64_t)data[2] << 8;
		size_t len = data[3];
		data += 4;
		size -= 4;
		if (len > size)
			len = size;
		const uint8_t *bytes = data;
		data += len;
		size -= len;
		uint64_t start, room;
		switch (kind) {
		case K_SB_BOTH:
		case K_SB_PRIMARY:
			/* Field bytes only: the crc itself is recomputed. */
			room = offsetof(struct kura_super, crc);
			start = where % room;
			if (len > room - start)
				len = room - start;
			memcpy(img + start, bytes, len);
			if (kind == K_SB_BOTH)
				memcpy(img + KURA_BLOCK + start, bytes, len);
			sb_dirty |= kind == K_SB_BOTH ? 3 : 1;
			continue;
		case K_SB_RAW:
			start = where % (2 * KURA_BLOCK);
			room = 2 * KURA_BLOCK;
			break;
		case K_STATE:
			start = STATE_BLOCK * KURA_BLOCK + where % sizeof(struct kura_state);
			room = STATE_BLOCK * KURA_BLOCK + KURA_BLOCK;
			break;
		case K_LOG:
			start = geo.log_block * KURA_BLOCK + where % 1024;
			room = (geo.log_block + geo.log_blocks) * KURA_BLOCK;
			break;
		case K_LOG_REC:
			start = geo.log_block * KURA_BLOCK + sizeof(struct kura_log_head) + where % 512;
			room = (geo.log_block + geo.log_blocks) * KURA_BLOCK;
			log_dirty = 1;
			break;
		case K_BITMAP:
			start = geo.bitmap_block * KURA_BLOCK + where % (geo.bitmap_blocks * KURA_BLOCK);
			room = (geo.bitmap_block + geo.bitmap_blocks) * KURA_BLOCK;
			break;
		case K_USED:
			start = used_blocks[(where >> 12) % nused] * KURA_BLOCK + (where & (KURA_BLOCK - 1));
			room = (start / KURA_BLOCK + 1) * KURA_BLOCK;
			break;
		case K_USED_PTR: {
			/* An 8-byte pointer-sized field of a used block set to a small
			 * number: block and inode numbers near the pool's range. */
			uint64_t blk = used_blocks[(where >> 9) % nused];
			uint64_t off = blk * KURA_BLOCK + (where & 511) * 8;
			uint64_t v = 0;
			for (size_t i = 0; i < len && i < 3; i++)
				v |= (uint64_t)bytes[i] << (8 * i);
			memcpy(img + off, &v, 8);
			continue;
		}
		case K_ANY:
			start = (where % (POOL_SIZE / 64)) * 64;
			room = POOL_SIZE;
			break;
		default: /* K_SIZE: the file shrinks or grows (whole blocks, or not) */
			if (where & 0x8000) {
				file_size = POOL_SIZE + (where & 0x7fff);
			} else {
				uint64_t cut = (where & 0x7fff) * (len ? KURA_BLOCK : 1);
				file_size = cut < POOL_SIZE ? POOL_SIZE - cut : 0;
			}
			continue;
		}
		if (len > room - start)
			len = room - start;
		memcpy(img + start, bytes, len);
	}
	if (sb_dirty & 1)
		fix_super_crc(img, 0);
	if (sb_dirty & 2)
		fix_super_crc(img, 1);
	if (log_dirty)
		fix_log_record(img);
	return file_size;
}

/* The pool file stays mapped across inputs and holds the base image between
 * them: an input is patched straight into it, and afterwards only the blocks
 * that differ from the base are copied back (a few, against a 4 MiB rewrite
 * per input). */
static unsigned char *live;
static int live_fd = -1;

static void open_live(void)
{
	live_fd = open(pool, O_RDWR);
	if (live_fd < 0)
		die("open pool file", errno);
	live = mmap(NULL, POOL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, live_fd, 0);
	if (live == MAP_FAILED)
		die("map pool file", errno);
}

static void set_size(uint64_t file_size)
{
	if (ftruncate(live_fd, (off_t)file_size))
		die("resize pool file", errno);
}

/* Whole 4 MiB compared per input, always valid memory: through ASan's memcmp
 * (which first checks the shadow of both ranges) and the coverage hooks this
 * cost a tenth of an execution, and neither can find anything here. */
#ifdef __clang__
#define NOT_INSTRUMENTED __attribute__((no_sanitize("address", "undefined", "coverage")))
#else
#define NOT_INSTRUMENTED
#endif
NOT_INSTRUMENTED static int block_differs(const unsigned char *a, const unsigned char *b)
{
	uint64_t diff = 0;
	for (size_t i = 0; i < KURA_BLOCK; i += 8) {
		uint64_t x, y;
		__builtin_memcpy(&x, a + i, 8);
		__builtin_memcpy(&y, b + i, 8);
		diff |= x ^ y;
	}
	return diff != 0;
}

/* Back to the base image; the file must be POOL_SIZE again first, or the
 * mapping past its end would fault. */
static void restore_live(uint64_t file_size)
{
	if (file_size != POOL_SIZE)
		set_size(POOL_SIZE);
	for (uint64_t off = 0; off < POOL_SIZE; off += KURA_BLOCK)
		if (block_differs(live + off, base + off))
			memcpy(live + off, base + off, KURA_BLOCK);
}

/* ---- exercising the pool -------------------------------------------------- */

struct run {
	kura_fs *fs;
	int strict;       /* fsck called the pool clean: EUCLEAN is a finding */
	int entries;      /* walk budget: a damaged pool may loop or be huge */
	char file[512];   /* a regular file and a directory the walk found */
	char dir[512];
};

static void expect(struct run *r, long ret, const char *what, const char *path)
{
	if (verbose && ret < 0)
		fprintf(stderr, "  %s %s: %s\n", what, path, strerror((int)-ret));
	if (r->strict && ret == -EUCLEAN) {
		fprintf(stderr, "pool_fuzz: %s %s: -EUCLEAN on a pool fsck called clean\n", what, path);
		abort();
	}
}

static void visit_file(struct run *r, const char *path)
{
	char buf[16384];
	int fd = kura_open(r->fs, path, O_RDONLY, 0);
	expect(r, fd, "open", path);
	if (fd < 0)
		return;
	struct stat st;
	if (kura_fstat(r->fs, fd, &st) == 0) {
		/* The start and the end: enough to touch the map without reading
		 * a (possibly absurd) size in full. */
		expect(r, kura_pread(r->fs, fd, buf, sizeof buf, 0), "read", path);
		if (st.st_size > (off_t)sizeof buf)
			expect(r, kura_pread(r->fs, fd, buf, sizeof buf, st.st_size - (off_t)sizeof buf), "read", path);
		/* -ENXIO is a legitimate answer (no data); only damage reports count. */
		expect(r, kura_lseek(r->fs, fd, 0, SEEK_DATA), "seek data", path);
		expect(r, kura_lseek(r->fs, fd, 0, SEEK_HOLE), "seek hole", path);
	}
	kura_close(r->fs, fd);
}

static void walk(struct run *r, const char *path, int depth)
{
	if (depth > 12)
		return;
	int err;
	kura_dir *d = kura_opendir(r->fs, path, &err);
	expect(r, d ? 0 : err, "opendir", path);
	if (!d)
		return;
	struct kura_dirent e;
	int ret;
	while (r->entries > 0 && (ret = kura_readdir(d, &e)) == 1) {
		r->entries--;
		if (!strcmp(e.name, ".") || !strcmp(e.name, ".."))
			continue;
		char child[1024];
		snprintf(child, sizeof child, "%s/%s", strcmp(path, "/") ? path : "", e.name);
		struct stat st;
		int s = kura_lstat(r->fs, child, &st);
		expect(r, s, "lstat", child);
		if (s)
			continue;
		if (S_ISDIR(st.st_mode)) {
			if (!r->dir[0] && strlen(child) < sizeof r->dir)
				strcpy(r->dir, child);
			walk(r, child, depth + 1);
		} else if (S_ISLNK(st.st_mode)) {
			char t[4096];
			expect(r, kura_readlink(r->fs, child, t, sizeof t), "readlink", child);
			kura_stat(r->fs, child, &st); /* follows: may dangle */
		} else {
			if (!r->file[0] && strlen(child) < sizeof r->file)
				strcpy(r->file, child);
			visit_file(r, child);
		}
	}
	if (r->entries > 0)
		expect(r, ret, "readdir", path);
	kura_closedir(d);
}

static void change(struct run *r)
{
	kura_fs *fs = r->fs;
	static char data[9000];
	memset(data, 'z', sizeof data);
	int fd = kura_open(fs, "/fz-new", O_CREAT | O_RDWR, 0644);
	expect(r, fd, "create", "/fz-new");
	if (fd >= 0) {
		expect(r, kura_pwrite(fs, fd, data, sizeof data, 0), "write", "/fz-new");
		expect(r, kura_pwrite(fs, fd, data, 100, 1 << 20), "pwrite", "/fz-new");
		expect(r, kura_ftruncate(fs, fd, 5000), "truncate", "/fz-new");
		kura_close(fs, fd);
	}
	expect(r, kura_rename(fs, "/fz-new", "/d/fz-moved", 0), "rename", "/fz-new");
	expect(r, kura_mkdir(fs, "/fz-dir", 0755), "mkdir", "/fz-dir");
	expect(r, kura_symlink(fs, "/d/fz-moved", "/fz-dir/ln"), "symlink", "/fz-dir/ln");
	expect(r, kura_link(fs, "/small", "/big/fz-link"), "link", "/big/fz-link");
	expect(r, kura_unlink(fs, "/big/" LONG_STEM "-0003"), "unlink", "/big/...0003");
	expect(r, kura_rmdir(fs, "/empty"), "rmdir", "/empty");
	/* Not empty: a damaged entry count must not let it go. */
	expect(r, kura_rmdir(fs, "/big"), "rmdir", "/big");
	/* A run of entries made one after another goes: whole inode blocks
	 * empty and are freed, and /big's buckets merge and its array shrinks. */
	for (int i = 20; i < BIG_ENTRIES; i++) {
		char name[256];
		snprintf(name, sizeof name, "/big/%s-%04d", LONG_STEM, i);
		expect(r, i % 3 == 2 ? kura_rmdir(fs, name) : kura_unlink(fs, name), "remove", "/big/...");
	}
	if (r->file[0]) {
		fd = kura_open(fs, r->file, O_WRONLY, 0);
		if (fd >= 0) {
			expect(r, kura_pwrite(fs, fd, data, 3000, 2000), "pwrite", r->file);
			kura_close(fs, fd);
		}
		expect(r, kura_truncate(fs, r->file, 1), "truncate", r->file);
		expect(r, kura_unlink(fs, r->file), "unlink", r->file);
	}
	if (r->dir[0])
		expect(r, kura_rename(fs, r->dir, "/fz-dir/moved", 0), "rename", r->dir);
	struct statvfs sv;
	kura_statvfs(fs, &sv);
	struct kura_info info;
	kura_info(fs, &info);
}

static void report_line(void *ctx, const char *line)
{
	(void)ctx;
	if (verbose)
		fprintf(stderr, "  fsck: %s\n", line);
}

static void run_input(void);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!base) {
		init();
		atexit(cleanup);
	}
	if (!live)
		open_live();
	uint64_t file_size = apply(live, data, size);
	if (file_size != POOL_SIZE)
		set_size(file_size);
	run_input();
	restore_live(file_size);
	return 0;
}

/* fsck, mount, walk, change, walk, unmount, fsck (and repair what is left). */
static void run_input(void)
{
	int before = kura_fsck(pool, 0, report_line, NULL);
	if (verbose)
		fprintf(stderr, "fsck before: %d\n", before);
	struct kura_mount_opts opts = { .persist = KURA_PERSIST_MEMORY };
	int err = 0;
	kura_fs *fs = kura_mount(pool, &opts, &err);
	if (!fs) {
		const char *why = kura_last_error();
		if (verbose)
			fprintf(stderr, "mount refused: %s\n", why);
		if (err >= 0 || !strcmp(why, "no error") || !strstr(why, pool))
			die("mount failed without a reason", err);
		if (before == 0)
			die("mount refused a pool fsck called clean", err);
		return;
	}
	struct run r = { .fs = fs, .strict = before == 0, .entries = 2000 };
	walk(&r, "/", 0);
	change(&r);
	walk(&r, "/", 0);
	kura_unmount(fs);
	int after = kura_fsck(pool, 0, report_line, NULL);
	if (verbose)
		fprintf(stderr, "fsck after: %d\n", after);
	if (before == 0 && after != 0)
		die("operations on a clean pool left it damaged", after);
	/* Repair must cope with whatever is left, and leave a pool that mounts. */
	if (after > 0) {
		kura_fsck(pool, 1, report_line, NULL);
		fs = kura_mount(pool, &opts, &err);
		if (fs)
			kura_unmount(fs);
	}
}
