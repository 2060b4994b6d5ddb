/*
 * corrupt_test — deterministic damage to a pool, one kind at a time.
 *
 * Each case builds a small pool, damages one structure through the pool
 * file, then checks that the damage is caught: mount refuses with a message
 * naming the problem, or fsck reports it, or operations fail with an error —
 * and that nothing crashes or hangs.  Every case runs in a child process
 * under an alarm, so a crash or a hang fails that case and the rest go on.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crc.h"
#include "kura.h"
#include "layout.h"

static char pool[256];
static int failed;

#define CHECK(cond, ...)                                                         \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                            \
			fprintf(stderr, "\n");                                   \
			failed = 1;                                              \
		}                                                                \
	} while (0)

static void pool_rw(void *buf, size_t n, uint64_t off, int write)
{
	int fd = open(pool, O_RDWR);
	ssize_t r = write ? pwrite(fd, buf, n, (off_t)off) : pread(fd, buf, n, (off_t)off);
	if (fd < 0 || r != (ssize_t)n) {
		perror(pool);
		exit(2);
	}
	close(fd);
}
static void get(void *buf, size_t n, uint64_t off) { pool_rw(buf, n, off, 0); }
static void put(const void *buf, size_t n, uint64_t off) { pool_rw((void *)buf, n, off, 1); }
static void put64(uint64_t v, uint64_t off) { put(&v, 8, off); }

static void put_file(kura_fs *fs, const char *path, size_t n, off_t at)
{
	int fd = kura_open(fs, path, O_CREAT | O_WRONLY, 0644);
	char *b = malloc(n);
	memset(b, 'q', n);
	if (fd < 0 || kura_pwrite(fs, fd, b, n, at) != (ssize_t)n) {
		fprintf(stderr, "setup: %s: %d\n", path, fd);
		exit(2);
	}
	free(b);
	kura_close(fs, fd);
}

static struct kura_super sb;
static uint64_t ino_of[8];
enum { I_SMALL, I_SPARSE, I_D, I_BIG };

/* mkfs, then a few files, a sparse file (map height 3), a directory with
 * split buckets, a symlink. */
static void build(void)
{
	if (kura_mkfs(pool, KURA_MIN_POOL_SIZE, 1)) {
		fprintf(stderr, "mkfs: %s\n", kura_last_error());
		exit(2);
	}
	int err;
	kura_fs *fs = kura_mount(pool, NULL, &err);
	kura_mkdir(fs, "/d", 0755);
	kura_mkdir(fs, "/empty", 0755);
	put_file(fs, "/small", 100, 0);
	put_file(fs, "/d/f", 5000, 0);
	put_file(fs, "/sparse", 10, (off_t)1 << 31);
	char name[80];
	for (int i = 0; i < 200; i++) {
		snprintf(name, sizeof name, "/d/a-long-name-to-fill-buckets-quickly-%03d", i);
		put_file(fs, name, 1, 0);
	}
	kura_symlink(fs, "small", "/ln");
	struct stat st;
	const char *names[] = { "/small", "/sparse", "/d", "/d" };
	for (int i = 0; i < 4; i++) {
		kura_stat(fs, names[i], &st);
		ino_of[i] = st.st_ino;
	}
	kura_unmount(fs);
	get(&sb, sizeof sb, 0);
}

static uint64_t ino_off(uint64_t ino) { return ino * INODE_SIZE; }
static void get_inode(uint64_t ino, struct kura_inode *ip) { get(ip, sizeof *ip, ino_off(ino)); }

/* ---- the outcomes a case may expect ------------------------------------- */

static void refused(const char *keyword)
{
	int err = 0;
	kura_fs *fs = kura_mount(pool, NULL, &err);
	CHECK(!fs, "mount accepted a pool with %s", keyword);
	if (fs) {
		kura_unmount(fs);
		return;
	}
	const char *why = kura_last_error();
	CHECK(err < 0 && strstr(why, pool) && strstr(why, keyword), "err %d, message \"%s\" lacks \"%s\"", err, why,
	      keyword);
}

/* kura_probe checks the superblock as a mount does, and says the same. */
static void probe_refused(const char *keyword)
{
	int err = kura_probe(pool);
	const char *why = kura_last_error();
	CHECK(err < 0 && strstr(why, pool) && strstr(why, keyword), "probe: err %d, message \"%s\" lacks \"%s\"", err,
	      why, keyword);
}

struct lines {
	char text[8192];
};
static void collect(void *ctx, const char *line)
{
	struct lines *l = ctx;
	size_t n = strlen(l->text);
	snprintf(l->text + n, sizeof l->text - n, "%s\n", line);
}

/* fsck must report a line containing keyword. */
static void fsck_reports(const char *keyword)
{
	struct lines l = { "" };
	int n = kura_fsck(pool, 0, collect, &l);
	CHECK(n != 0 && strstr(l.text, keyword), "fsck returned %d without \"%s\":\n%s", n, keyword, l.text);
}

/* Whatever mount makes of it, a full walk and some changes must not crash
 * or hang; returns the mount (or NULL) after them. */
static void exercise(void)
{
	int err;
	kura_fs *fs = kura_mount(pool, NULL, &err);
	if (!fs)
		return;
	char buf[8192];
	struct stat st;
	const char *paths[] = { "/small", "/sparse", "/d/f", "/ln", "/d", "/empty" };
	for (unsigned i = 0; i < sizeof paths / sizeof *paths; i++) {
		kura_lstat(fs, paths[i], &st);
		int fd = kura_open(fs, paths[i], O_RDONLY, 0);
		if (fd >= 0) {
			kura_pread(fs, fd, buf, sizeof buf, 0);
			kura_lseek(fs, fd, 0, SEEK_HOLE);
			kura_lseek(fs, fd, 0, SEEK_DATA);
			kura_close(fs, fd);
		}
	}
	kura_dir *d = kura_opendir(fs, "/d", &err);
	struct kura_dirent e;
	if (d) {
		for (int i = 0; i < 1000 && kura_readdir(d, &e) == 1; i++)
			;
		kura_closedir(d);
	}
	int fd = kura_open(fs, "/new", O_CREAT | O_WRONLY, 0644);
	if (fd >= 0) {
		kura_pwrite(fs, fd, buf, sizeof buf, 0);
		kura_close(fs, fd);
	}
	kura_mkdir(fs, "/d/newdir", 0755);
	kura_rename(fs, "/d/f", "/moved", 0);
	kura_unlink(fs, "/sparse");
	kura_rmdir(fs, "/empty");
	kura_truncate(fs, "/small", 1);
	kura_unmount(fs);
	kura_fsck(pool, 0, NULL, NULL);
	kura_fsck(pool, 1, NULL, NULL);
}

/* ---- cases ---------------------------------------------------------------- */

static void super_field(size_t off, uint64_t value, size_t width, int both, const char *keyword)
{
	struct kura_super s = sb;
	memcpy((char *)&s + off, &value, width);
	s.crc = crc32c(0, &s, offsetof(struct kura_super, crc));
	put(&s, sizeof s, 0);
	if (both) {
		put(&s, sizeof s, KURA_BLOCK);
		refused(keyword);
		probe_refused(keyword);
		fsck_reports(keyword);
	} else {
		/* The copy takes over: the pool mounts and is clean. */
		int err;
		kura_fs *fs = kura_mount(pool, NULL, &err);
		CHECK(fs, "primary %s damaged, copy intact: mount failed: %s", keyword, kura_last_error());
		CHECK(kura_probe(pool) == 0, "primary %s damaged, copy intact: probe failed: %s", keyword,
		      kura_last_error());
		if (fs)
			kura_unmount(fs);
		CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "primary %s damaged: fsck not clean", keyword);
	}
}


static void run_case(int n)
{
	struct kura_inode ip;
	uint64_t state = STATE_BLOCK * KURA_BLOCK;
	switch (n) {
	case 0: super_field(offsetof(struct kura_super, magic), 12345, 8, 1, "not a kura pool"); break;
	case 1: super_field(offsetof(struct kura_super, version), 7, 4, 1, "version"); break;
	case 2: super_field(offsetof(struct kura_super, block_size), 8192, 4, 1, "geometry"); break;
	case 3: super_field(offsetof(struct kura_super, pool_size), 1 << 30, 8, 1, "geometry"); break;
	case 4: super_field(offsetof(struct kura_super, nblocks), 2048, 8, 1, "geometry"); break;
	case 5: super_field(offsetof(struct kura_super, log_block), 9, 8, 1, "geometry"); break;
	case 6: super_field(offsetof(struct kura_super, log_blocks), 1, 8, 1, "geometry"); break;
	case 7: super_field(offsetof(struct kura_super, bitmap_block), 1, 8, 1, "geometry"); break;
	case 8: super_field(offsetof(struct kura_super, bitmap_blocks), 0, 8, 1, "geometry"); break;
	case 9: super_field(offsetof(struct kura_super, first_data_block), 4, 8, 1, "geometry"); break;
	case 10: super_field(offsetof(struct kura_super, root_ino), 3, 8, 1, "root inode"); break;
	case 11: super_field(offsetof(struct kura_super, root_ino), 1ull << 60, 8, 1, "root inode"); break;
	case 12: super_field(offsetof(struct kura_super, magic), 12345, 8, 0, "magic"); break;
	case 13: super_field(offsetof(struct kura_super, nblocks), 99, 8, 0, "nblocks"); break;
	case 14: /* a flipped byte without a crc fix-up, in both copies */
		put("\xff", 1, 200);
		put("\xff", 1, KURA_BLOCK + 200);
		refused("checksum");
		probe_refused("checksum");
		break;
	case 15: { /* truncated by one block */
		if (truncate(pool, KURA_MIN_POOL_SIZE - KURA_BLOCK))
			exit(2);
		refused("truncated");
		probe_refused("truncated");
		fsck_reports("truncated");
		break;
	}
	case 16: /* the log head */
		put64(0, sb.log_block * KURA_BLOCK);
		refused("undo log");
		break;
	case 17: /* free-block counter */
		put64(3, state + offsetof(struct kura_state, free_blocks));
		fsck_reports("blocks free");
		break;
	case 18: /* object counters */
		put64(77, state + offsetof(struct kura_state, nfiles));
		fsck_reports("counters say");
		break;
	case 19: { /* free inode list pointing at a live inode */
		put64(ino_of[I_SMALL], state + offsetof(struct kura_state, inode_free));
		fsck_reports("free inode list");
		int err;
		kura_fs *fs = kura_mount(pool, NULL, &err);
		CHECK(fs, "mount: %s", kura_last_error());
		if (fs) {
			int r = kura_mkdir(fs, "/x", 0755);
			CHECK(r == -EUCLEAN, "mkdir with a live inode on the free list: %d", r);
			struct stat st;
			CHECK(kura_stat(fs, "/small", &st) == 0 && st.st_size == 100, "/small changed");
			kura_unmount(fs);
		}
		break;
	}
	case 20: { /* a bucket's magic */
		get_inode(ino_of[I_D], &ip);
		uint64_t slots = ip.root; /* depth > 0: the root is the slot array's block */
		uint64_t first_bucket;
		get(&first_bucket, 8, slots * KURA_BLOCK);
		put64(0, first_bucket * KURA_BLOCK);
		fsck_reports("no valid bucket");
		int err;
		kura_fs *fs = kura_mount(pool, NULL, &err);
		if (fs) {
			kura_dir *d = kura_opendir(fs, "/d", &err);
			struct kura_dirent e;
			int r = 1;
			while (d && (r = kura_readdir(d, &e)) == 1)
				;
			CHECK(d && r == -EUCLEAN, "readdir of a directory with a damaged bucket: %d", r);
			if (d)
				kura_closedir(d);
			kura_unmount(fs);
		}
		break;
	}
	case 21: { /* a map node pointer out of range */
		get_inode(ino_of[I_SPARSE], &ip);
		CHECK(ip.height == 3, "sparse file height %u", ip.height);
		put64(sb.nblocks + 5, ip.root * KURA_BLOCK + 8 * 1);
		fsck_reports("outside the data area");
		break;
	}
	case 22: { /* every map slot naming one node: 512^3 paths through 3 blocks */
		get_inode(ino_of[I_SPARSE], &ip);
		uint64_t node[MAP_FANOUT], top = ip.root, mid, low, data;
		get(node, sizeof node, top * KURA_BLOCK);
		mid = node[2]; /* 2 GiB is file block 2^19: child 2 of a height-3 root (2^18 each) */
		get(node, sizeof node, mid * KURA_BLOCK);
		low = node[0];
		get(node, sizeof node, low * KURA_BLOCK);
		data = node[0];
		uint64_t fill[MAP_FANOUT];
		for (unsigned i = 0; i < MAP_FANOUT; i++)
			fill[i] = mid;
		put(fill, sizeof fill, top * KURA_BLOCK);
		for (unsigned i = 0; i < MAP_FANOUT; i++)
			fill[i] = low;
		put(fill, sizeof fill, mid * KURA_BLOCK);
		for (unsigned i = 0; i < MAP_FANOUT; i++)
			fill[i] = data;
		put(fill, sizeof fill, low * KURA_BLOCK);
		fsck_reports("also used elsewhere");
		int err;
		kura_fs *fs = kura_mount(pool, NULL, &err);
		if (fs) {
			int fd = kura_open(fs, "/sparse", O_RDONLY, 0);
			kura_lseek(fs, fd, 0, SEEK_HOLE);
			kura_close(fs, fd);
			int r = kura_unlink(fs, "/sparse");
			CHECK(r == -EUCLEAN || r == 0, "unlink of a file with a looping map: %d", r);
			kura_unmount(fs);
		}
		break;
	}
	case 23: { /* a cycle in the orphan list */
		pid_t pid = fork();
		if (pid == 0) {
			int err;
			kura_fs *fs = kura_mount(pool, NULL, &err);
			int fd = kura_open(fs, "/o", O_CREAT | O_RDWR, 0644);
			kura_unlink(fs, "/o");
			_exit(fd < 0);
		}
		int status;
		waitpid(pid, &status, 0);
		uint64_t head;
		get(&head, 8, state + offsetof(struct kura_state, orphans));
		CHECK(head != 0, "no orphan to damage");
		put64(head, ino_off(head) + offsetof(struct kura_inode, link));
		put64(5, state + offsetof(struct kura_state, norphans));
		fsck_reports("orphan list");
		break;
	}
	case 24: { /* a directory whose hash depth disagrees with its slot array */
		get_inode(ino_of[I_D], &ip);
		uint8_t depth = 38;
		put(&depth, 1, ino_off(ino_of[I_D]) + offsetof(struct kura_inode, dir_depth));
		fsck_reports("disagree");
		int err;
		kura_fs *fs = kura_mount(pool, NULL, &err);
		if (fs) {
			struct stat st;
			int r = kura_stat(fs, "/d/f", &st);
			CHECK(r == -EUCLEAN, "lookup in it: %d", r);
			kura_unmount(fs);
		}
		break;
	}
	case 25: { /* a directory entry naming a free slot */
		struct kura_inode z = { 0 };
		get_inode(ino_of[I_SMALL], &ip);
		z.link = 0;
		put(&z, sizeof z, ino_off(ino_of[I_SMALL]));
		fsck_reports("free or invalid inode");
		int err;
		kura_fs *fs = kura_mount(pool, NULL, &err);
		if (fs) {
			struct stat st;
			int r = kura_stat(fs, "/small", &st);
			CHECK(r == -EUCLEAN, "stat of an entry naming a free slot: %d", r);
			kura_unmount(fs);
		}
		break;
	}
	case 26: /* the O_TMPFILE "linkable" flag on a named file, then an unknown flag */
	case 27:
		get_inode(ino_of[I_SMALL], &ip);
		ip.iflags = n == 26 ? INODE_LINKABLE : 0x8000;
		put(&ip, sizeof ip, ino_off(ino_of[I_SMALL]));
		fsck_reports(n == 26 ? "linkable" : "unknown flags");
		break;
	default:
		exit(3);
	}
	exercise();
}

int main(void)
{
	snprintf(pool, sizeof pool, "%s/corrupt-%d.pool", access("/dev/shm", W_OK) ? "." : "/dev/shm", (int)getpid());
	int bad = 0, n;
	CHECK(kura_probe("/nonexistent/kura.pool") == -ENOENT && strstr(kura_last_error(), "/nonexistent/kura.pool"),
	      "probe of a missing pool: %s", kura_last_error());
	CHECK(kura_probe("/") == -EISDIR, "probe of a directory: %s", kura_last_error());
	/* A FIFO is refused at once, not waited on for a writer: alarm fails a hang. */
	char fifo[300];
	snprintf(fifo, sizeof fifo, "%s.fifo", pool);
	unlink(fifo);
	if (mkfifo(fifo, 0600) == 0) {
		alarm(60);
		int err = 0;
		kura_fs *fs = kura_mount(fifo, &(struct kura_mount_opts){ .read_only = 1 }, &err);
		CHECK(!fs && err == -EINVAL && strstr(kura_last_error(), "FIFO"), "read-only mount of a FIFO: %d %s", err,
		      kura_last_error());
		CHECK(kura_probe(fifo) == -EINVAL, "probe of a FIFO: %s", kura_last_error());
		CHECK(kura_mkfs(fifo, KURA_MIN_POOL_SIZE, 1) == -EINVAL && strstr(kura_last_error(), "FIFO"),
		      "mkfs on a FIFO: %s", kura_last_error());
		alarm(0);
		unlink(fifo);
	}
	bad += failed;
	failed = 0; /* the cases run in children, which count their own */
	for (n = 0;; n++) {
		build();
		pid_t pid = fork();
		if (pid == 0) {
			alarm(120); /* a hang fails the case */
			run_case(n);
			_exit(failed);
		}
		int status;
		waitpid(pid, &status, 0);
		if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
			break;
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			fprintf(stderr, "case %d failed (%s %d)\n", n, WIFSIGNALED(status) ? "signal" : "exit",
				WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
			bad++;
		}
	}
	unlink(pool);
	printf("corrupt_test: %d cases, %d failed\n", n, bad);
	return bad != 0;
}
