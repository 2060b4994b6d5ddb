/*
 * poolfull_test — a small pool filled to ENOSPC by every kind of operation.
 *
 * Mixed operations (create, mkdir, appends, pwrite into holes, truncate up
 * then write, fallocate, link, long symlinks, renames to new names in a big
 * directory whose buckets split) run until each kind has failed with ENOSPC
 * several times.  A failing operation must fail with -ENOSPC and change
 * nothing: a canonical dump of the tree (names, types, modes, links, sizes,
 * contents, mtime/ctime) and f_bfree are compared before and after, and fsck
 * must stay clean.  Then deleting frees space and the operations succeed
 * again.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura.h"

static kura_fs *fs;
static char pool[256];
static int failures;

#define FAIL(...)                                              \
	do {                                                   \
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
		fprintf(stderr, __VA_ARGS__);                  \
		fprintf(stderr, "\n");                         \
		failures++;                                    \
	} while (0)

/* ---- canonical dump ------------------------------------------------------- */

struct buf {
	char *p;
	size_t n, cap;
};
static void emit(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
		va_end(ap);
		if ((size_t)k < b->cap - b->n) {
			b->n += (size_t)k;
			return;
		}
		b->cap = b->cap * 2 + 4096;
		b->p = realloc(b->p, b->cap);
	}
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void dump_tree(struct buf *b, const char *path)
{
	int err;
	kura_dir *d = kura_opendir(fs, path, &err);
	if (!d) {
		emit(b, "%s: opendir %d\n", path, err);
		return;
	}
	char **names = NULL;
	size_t n = 0;
	struct kura_dirent e;
	while (kura_readdir(d, &e) == 1) {
		if (!strcmp(e.name, ".") || !strcmp(e.name, ".."))
			continue;
		names = realloc(names, (n + 1) * sizeof *names);
		names[n++] = strdup(e.name);
	}
	kura_closedir(d);
	if (n) /* qsort(NULL, 0) is undefined */
		qsort(names, n, sizeof *names, cmp_str);
	for (size_t i = 0; i < n; i++) {
		char child[4096];
		snprintf(child, sizeof child, "%s/%s", strcmp(path, "/") ? path : "", names[i]);
		struct stat st;
		kura_lstat(fs, child, &st);
		emit(b, "%s %o %lu %lld %llu %ld.%ld %ld.%ld", child, st.st_mode, (unsigned long)st.st_nlink,
		     (long long)st.st_size, (unsigned long long)st.st_ino, (long)st.st_mtim.tv_sec,
		     st.st_mtim.tv_nsec, (long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
		if (S_ISLNK(st.st_mode)) {
			char t[4096];
			ssize_t k = kura_readlink(fs, child, t, sizeof t);
			uint64_t h = 1469598103934665603ull;
			for (ssize_t j = 0; j < k; j++)
				h = (h ^ (unsigned char)t[j]) * 1099511628211ull;
			emit(b, " -> %zd #%016llx\n", k, (unsigned long long)h);
		} else if (S_ISREG(st.st_mode)) {
			/* Contents as a checksum: the dump stays small. */
			int fd = kura_open(fs, child, O_RDONLY | O_NOATIME, 0);
			static char data[1 << 16];
			uint64_t h = 1469598103934665603ull;
			/* Data regions only (with their offsets): a sparse file of a
			 * gigabyte hashes in a moment. */
			off_t off = 0, end;
			while ((off = kura_lseek(fs, fd, off, SEEK_DATA)) >= 0 &&
			       (end = kura_lseek(fs, fd, off, SEEK_HOLE)) > off) {
				h = (h ^ (uint64_t)off) * 1099511628211ull;
				while (off < end) {
					size_t want = end - off < (off_t)sizeof data ? (size_t)(end - off) : sizeof data;
					ssize_t k = kura_pread(fs, fd, data, want, off);
					if (k <= 0)
						break;
					for (ssize_t j = 0; j < k; j++)
						h = (h ^ (unsigned char)data[j]) * 1099511628211ull;
					off += k;
				}
				off = end;
			}
			kura_close(fs, fd);
			emit(b, " #%016llx\n", (unsigned long long)h);
		} else {
			emit(b, "\n");
			dump_tree(b, child);
		}
		free(names[i]);
	}
	free(names);
}

static char *dump(void)
{
	struct buf b = { 0 };
	struct statvfs sv;
	kura_statvfs(fs, &sv);
	emit(&b, "bfree %lu ffree %lu\n", (unsigned long)sv.f_bfree, (unsigned long)sv.f_ffree);
	dump_tree(&b, "/");
	return b.p;
}

static void report(void *ctx, const char *line)
{
	fprintf(stderr, "  fsck: %s: %s\n", (const char *)ctx, line);
}

static void fsck_clean(const char *when)
{
	int n = kura_fsck(pool, 0, report, (void *)when);
	if (n != 0)
		FAIL("fsck %s: %d problems", when, n);
}

/* ---- operations ------------------------------------------------------------ */

enum { OP_CREATE, OP_MKDIR, OP_APPEND, OP_HOLE, OP_TRUNC_WRITE, OP_FALLOC, OP_LINK, OP_SYMLINK, OP_RENAME, NOPS };
static const char *op_name[NOPS] = { "create", "mkdir", "append", "pwrite-hole", "truncate+write", "fallocate",
				     "link", "symlink", "rename" };
static char chunk[64 << 10];
static unsigned counter = 1; /* /f0 exists from the start */

static int with_fd(const char *path, int flags, int (*fn)(int fd))
{
	int fd = kura_open(fs, path, flags, 0644);
	if (fd < 0)
		return fd;
	int r = fn(fd);
	kura_close(fs, fd);
	return r;
}
static int do_append(int fd)
{
	struct stat st;
	kura_fstat(fs, fd, &st);
	ssize_t r = kura_pwrite(fs, fd, chunk, 3 * 4096 + 100, st.st_size);
	return r < 0 ? (int)r : 0;
}
static int do_hole(int fd)
{
	ssize_t r = kura_pwrite(fs, fd, chunk, 5000, (off_t)(counter % 64 + 1) << 24);
	return r < 0 ? (int)r : 0;
}
/* Truncate up, then (next time) write into the hole that made: each call is
 * one operation, checked on its own. */
static int do_trunc_write(int fd)
{
	struct stat st;
	kura_fstat(fs, fd, &st);
	if (counter % 2)
		return kura_ftruncate(fs, fd, st.st_size + 20000);
	ssize_t w = kura_pwrite(fs, fd, chunk, 9000, st.st_size > 16000 ? st.st_size - 16000 : 0);
	return w < 0 ? (int)w : 0;
}
static int do_nothing(int fd)
{
	(void)fd;
	return 0;
}
static int do_falloc(int fd)
{
	struct stat st;
	kura_fstat(fs, fd, &st);
	return kura_fallocate(fs, fd, 0, st.st_size, 64 << 10);
}

/* One operation of kind k; its own effect must be all or nothing. */
static int run_op(int k)
{
	char a[300], b[300];
	unsigned c = counter++;
	switch (k) {
	case OP_CREATE:
		snprintf(a, sizeof a, "/f%u", c);
		return with_fd(a, O_CREAT | O_EXCL | O_WRONLY, do_nothing);
	case OP_MKDIR:
		snprintf(a, sizeof a, "/big/dir-with-a-long-name-%u", c);
		return kura_mkdir(fs, a, 0755);
	case OP_APPEND:
		return with_fd("/f0", O_WRONLY, do_append);
	case OP_HOLE:
		return with_fd("/sparse", O_WRONLY, do_hole);
	case OP_TRUNC_WRITE:
		return with_fd("/grow", O_WRONLY, do_trunc_write);
	case OP_FALLOC:
		return with_fd("/falloc", O_WRONLY, do_falloc);
	case OP_LINK:
		snprintf(a, sizeof a, "/big/a-hard-link-with-a-long-name-%u", c);
		return kura_link(fs, "/f0", a);
	case OP_SYMLINK: {
		char target[3500];
		memset(target, 't', sizeof target - 1);
		target[sizeof target - 1] = 0;
		snprintf(a, sizeof a, "/big/sym-%u", c);
		return kura_symlink(fs, target, a);
	}
	default: /* rename an existing name to a new one in the big directory */
		snprintf(a, sizeof a, "/ren%u", c % 2);
		snprintf(b, sizeof b, "/big/renamed-with-a-fairly-long-name-%u", c);
		if (kura_rename(fs, a, b, 0) == 0)
			return kura_rename(fs, b, a, 0) == 0 ? 0 : -EIO;
		return kura_rename(fs, a, b, 0);
	}
}

int main(void)
{
	snprintf(pool, sizeof pool, "%s/poolfull-%d.pool", access("/dev/shm", W_OK) ? "." : "/dev/shm", (int)getpid());
	memset(chunk, 'c', sizeof chunk);
	if (kura_mkfs(pool, KURA_MIN_POOL_SIZE, 1)) {
		fprintf(stderr, "mkfs: %s\n", kura_last_error());
		return 2;
	}
	int err;
	fs = kura_mount(pool, NULL, &err);
	if (!fs)
		return 2;
	kura_mkdir(fs, "/big", 0755);
	const char *files[] = { "/f0", "/sparse", "/grow", "/falloc", "/ren0", "/ren1" };
	for (unsigned i = 0; i < sizeof files / sizeof *files; i++)
		with_fd(files[i], O_CREAT | O_WRONLY, do_append);

	/* Fill: cycle through the kinds until each has hit ENOSPC 3 times. */
	int enospc[NOPS] = { 0 }, checked = 0;
	for (int round = 0; round < 100000; round++) {
		int k = round % NOPS, done = 1;
		for (int j = 0; j < NOPS; j++)
			done &= enospc[j] >= 3;
		if (done)
			break;
		if (enospc[k] >= 3)
			continue;
		/* Dumps are costly: compare around every op once space is short. */
		struct statvfs sv;
		kura_statvfs(fs, &sv);
		int careful = sv.f_bfree < 64;
		char *before = careful ? dump() : NULL;
		int r = run_op(k);
		if (r == -ENOSPC) {
			enospc[k]++;
			char *after = dump();
			if (before && strcmp(before, after)) {
				FAIL("%s failed with ENOSPC but changed the pool", op_name[k]);
				fprintf(stderr, "--- before\n%s--- after\n%s", before, after);
			}
			free(after);
			if (checked++ < 30)
				fsck_clean(op_name[k]);
		} else if (r < 0) {
			FAIL("%s: %s (only ENOSPC is expected)", op_name[k], strerror(-r));
			enospc[k] = 3;
		}
		free(before);
	}
	for (int k = 0; k < NOPS; k++)
		if (enospc[k] < 3)
			FAIL("%s never ran out of space", op_name[k]);
	fsck_clean("when full");

	/* Deleting frees space, and every kind works again. */
	struct statvfs full, freed;
	kura_statvfs(fs, &full);
	unsigned made = counter;
	for (unsigned c = 0; c < made; c++) {
		char a[64];
		snprintf(a, sizeof a, "/f%u", c);
		kura_unlink(fs, a);
	}
	kura_unlink(fs, "/sparse");
	kura_unlink(fs, "/falloc");
	kura_statvfs(fs, &freed);
	if (freed.f_bfree <= full.f_bfree)
		FAIL("deleting freed nothing: %lu -> %lu", (unsigned long)full.f_bfree, (unsigned long)freed.f_bfree);
	with_fd("/f0", O_CREAT | O_WRONLY, do_append);
	with_fd("/sparse", O_CREAT | O_WRONLY, do_append);
	with_fd("/falloc", O_CREAT | O_WRONLY, do_append);
	for (int k = 0; k < NOPS; k++) {
		int r = run_op(k);
		if (r < 0)
			FAIL("%s after deleting: %s", op_name[k], strerror(-r));
	}
	kura_unmount(fs);
	fsck_clean("at the end");
	unlink(pool);
	printf("poolfull_test: %u operations, %d ENOSPC failures checked, %d failures\n", counter, checked, failures);
	return failures != 0;
}
