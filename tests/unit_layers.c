/*
 * unit_layers.c — per-layer properties:
 *  - media: every byte of the pool an operation changes was written through
 *    a traced media call (the crash harness depends on it);
 *  - allocator: a full pool fails each operation with ENOSPC and changes
 *    nothing; freeing makes room again; no block leaks (fsck);
 *  - inodes: a write larger than a block map level is atomic and readable,
 *    truncate returns every block, punched holes read as zeros, and so do
 *    fallocated blocks where a file freed by an earlier mount lay (a new
 *    mount gives them storage again and fills them through the file).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "fs.h"
#include "kura.h"

#include "check.h"

static char pool[128];

struct trace {
	uint8_t *covered; /* byte map of the pool: written through a traced call */
	uint64_t size;
	unsigned stores, flushes, fences, marks;
};

static void on_event(void *ctx, enum media_event ev, uint64_t off, const void *data, uint64_t len)
{
	struct trace *t = ctx;
	(void)data;
	switch (ev) {
	case MEDIA_STORE:
	case MEDIA_STORE64:
	case MEDIA_NT:
		t->stores++;
		if (off + len <= t->size)
			memset(t->covered + off, 1, len);
		break;
	case MEDIA_FLUSH: t->flushes++; break;
	case MEDIA_FENCE: t->fences++; break;
	case MEDIA_MARK: t->marks++; break;
	case MEDIA_DISK_WRITE:
	case MEDIA_DISK_SYNC: break; /* the pool file under a working copy: not this test's view */
	}
}

static void test_all_writes_traced(void)
{
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	struct trace t = { .size = fs->m.size };
	t.covered = calloc(t.size, 1);
	uint8_t *before = malloc(t.size);
	memcpy(before, fs->m.base, t.size);
	fs->m.tracer.event = on_event;
	fs->m.tracer.ctx = &t;

	char buf[20000];
	memset(buf, 'q', sizeof buf);
	kura_mkdir(fs, "/t", 0755);
	int fd = kura_open(fs, "/t/f", O_CREAT | O_RDWR, 0644);
	kura_pwrite(fs, fd, buf, sizeof buf, 100);
	kura_pwrite(fs, fd, buf, 10, 5);
	kura_ftruncate(fs, fd, 7000);
	kura_close(fs, fd);
	kura_symlink(fs, "f", "/t/l");
	kura_link(fs, "/t/f", "/t/g");
	kura_rename(fs, "/t/g", "/t/h", 0);
	kura_unlink(fs, "/t/f");
	kura_chmod(fs, "/t/h", 0600);

	fs->m.tracer.event = NULL;
	uint64_t untraced = 0, first = 0;
	for (uint64_t i = 0; i < t.size; i++)
		if ((uint8_t)fs->m.base[i] != before[i] && !t.covered[i] && !untraced++)
			first = i;
	if (untraced)
		printf("first untraced byte: block %llu offset %llu\n", (unsigned long long)(first / 4096),
		       (unsigned long long)(first % 4096));
	CHECK(untraced == 0, "%llu pool bytes changed without a traced store (first at %llu)",
	      (unsigned long long)untraced, (unsigned long long)first);
	CHECK(t.stores > 0 && t.fences > 0 && t.marks > 0, "tracer saw stores %u fences %u marks %u", t.stores,
	      t.fences, t.marks);
	free(t.covered);
	free(before);
	kura_unmount(fs);
}

static void test_pool_full(void)
{
	char small[160];
	snprintf(small, sizeof small, "%s.small", pool);
	CHECK(kura_mkfs(small, KURA_MIN_POOL_SIZE, 1) == 0, "mkfs small");
	kura_fs *fs = kura_mount(small, NULL, NULL);
	static char buf[1 << 20];
	memset(buf, 'z', sizeof buf);
	int fd = kura_open(fs, "/fill", O_CREAT | O_RDWR, 0644);
	ssize_t n;
	uint64_t total = 0;
	/* A write that does not fit fails whole, so finish with single blocks. */
	for (size_t chunk = sizeof buf; chunk >= 4096; chunk /= 16) {
		while ((n = kura_write(fs, fd, buf, chunk)) > 0)
			total += (uint64_t)n;
		CHECK(n == -ENOSPC, "filling with %zu-byte writes ended with %zd, want -ENOSPC", chunk, n);
	}
	struct stat st;
	kura_fstat(fs, fd, &st);
	CHECK((uint64_t)st.st_size == total, "a failed write changed the size (%lld vs %llu)", (long long)st.st_size,
	      (unsigned long long)total);
	/* Data stop short of the blocks kept for metadata (alloc.h): nothing
	 * is available for data, some blocks are free, and names can still be
	 * made until those run out too, each failing cleanly then. */
	struct statvfs sv;
	CHECK(kura_statvfs(fs, &sv) == 0 && sv.f_bavail == 0 && sv.f_bfree > 0,
	      "statvfs of a pool full of data: %llu available, %llu free", (unsigned long long)sv.f_bavail,
	      (unsigned long long)sv.f_bfree);
	int made = 0, errs = 0;
	for (int i = 0; i < 100000 && !errs; i++) {
		char name[32];
		snprintf(name, sizeof name, "/d%d", i);
		int r = kura_mkdir(fs, name, 0755);
		if (r == -ENOSPC)
			errs++;
		else if (r)
			CHECK(0, "mkdir on a full pool: %d", r);
		else
			made++;
	}
	CHECK(made > 0, "no directory could be made once data filled the pool");
	CHECK(errs > 0, "mkdir never ran out of space (%d made)", made);
	CHECK(kura_fallocate(fs, fd, 0, (off_t)total, 1 << 20) == -ENOSPC, "fallocate on a full pool");
	kura_close(fs, fd);
	kura_unmount(fs);
	CHECK(kura_fsck(small, 0, NULL, NULL) == 0, "fsck of a full pool");
	fs = kura_mount(small, NULL, NULL);
	CHECK(kura_unlink(fs, "/fill") == 0, "unlink on a full pool");
	fd = kura_open(fs, "/again", O_CREAT | O_RDWR, 0644);
	CHECK(kura_write(fs, fd, buf, sizeof buf) == (ssize_t)sizeof buf, "writing after freeing space");
	kura_close(fs, fd);
	kura_unmount(fs);
	CHECK(kura_fsck(small, 0, NULL, NULL) == 0, "fsck after freeing");
	unlink(small);
}

static void test_big_file(void)
{
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	struct statvfs v0, v1;
	kura_statvfs(fs, &v0);
	size_t len = 96u << 20; /* beyond one map node's 2 MiB: a tree of height 2 */
	char *buf = malloc(len), *back = malloc(len);
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)(i * 2654435761u >> 24);
	int fd = kura_open(fs, "/big", O_CREAT | O_RDWR, 0644);
	CHECK(kura_pwrite(fs, fd, buf, len, 12345) == (ssize_t)len, "one 96 MiB write");
	CHECK(kura_pread(fs, fd, back, len, 12345) == (ssize_t)len && !memcmp(buf, back, len), "read back");
	CHECK(kura_fallocate(fs, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 5000, 3 << 20) == 0, "punch");
	kura_pread(fs, fd, back, 3 << 20, 5000);
	int zero = 1;
	for (size_t i = 0; i < (3u << 20); i++)
		zero &= back[i] == 0;
	CHECK(zero, "a punched hole reads as zeros");
	CHECK(kura_ftruncate(fs, fd, 0) == 0, "truncate to 0");
	kura_close(fs, fd);
	kura_unlink(fs, "/big");
	kura_statvfs(fs, &v1);
	CHECK(v1.f_bfree == v0.f_bfree, "blocks free %lu after truncate and unlink, %lu before", v1.f_bfree,
	      v0.f_bfree);
	free(buf);
	free(back);
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck after the big file");
}

static void test_fallocate_over_freed(void)
{
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	size_t len = 96u << 20; /* where test_big_file's bytes lay */
	char *back = malloc(len);
	int fd = kura_open(fs, "/z", O_CREAT | O_RDWR, 0644);
	CHECK(kura_fallocate(fs, fd, 0, 0, (off_t)len) == 0, "fallocate 96 MiB");
	size_t nonzero = 0;
	CHECK(kura_pread(fs, fd, back, len, 0) == (ssize_t)len, "read the fallocated file");
	for (size_t i = 0; i < len; i++)
		nonzero += back[i] != 0;
	CHECK(nonzero == 0, "fallocated blocks read as zeros (%zu bytes did not)", nonzero);
	kura_close(fs, fd);
	kura_unlink(fs, "/z");
	free(back);
	kura_unmount(fs);
}

static size_t nonzero_bytes(const char *p, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += p[i] != 0;
	return k;
}

/* fallocate takes blocks it writes nothing into (unwritten, layout.h): over
 * blocks a file filled and freed they read as zeros, a small write into
 * one shows its bytes and zeros around them, not the old bytes; the space
 * is the file's (st_blocks, the free count) until it goes; fsck agrees. */
static void test_unwritten_blocks(void)
{
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	struct kura_info in0, in1;
	kura_info(fs, &in0);
	enum { BLOCKS = 64 };
	size_t len = BLOCKS * 4096u;
	char *buf = malloc(len);
	memset(buf, 0x5a, len);
	int fd = kura_open(fs, "/old", O_CREAT | O_RDWR, 0644);
	CHECK(kura_pwrite(fs, fd, buf, len, 0) == (ssize_t)len, "fill a file");
	kura_close(fs, fd);
	kura_unlink(fs, "/old");
	fd = kura_open(fs, "/u", O_CREAT | O_RDWR, 0644);
	CHECK(kura_fallocate(fs, fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)len) == 0, "fallocate, keeping the size");
	struct stat st;
	kura_fstat(fs, fd, &st);
	CHECK(st.st_size == 0 && st.st_blocks >= (blkcnt_t)(len / 512), "size %lld, %lld sectors owned",
	      (long long)st.st_size, (long long)st.st_blocks);
	kura_info(fs, &in1);
	CHECK(in1.blocks_free + BLOCKS <= in0.blocks_free, "%llu blocks taken for %d",
	      (unsigned long long)(in0.blocks_free - in1.blocks_free), BLOCKS);
	CHECK(in1.format_version == 4, "the pool is marked format %u", in1.format_version);
	CHECK(kura_ftruncate(fs, fd, (off_t)len) == 0, "extend over the fallocated blocks");
	CHECK(kura_pread(fs, fd, buf, len, 0) == (ssize_t)len && nonzero_bytes(buf, len) == 0,
	      "fallocated blocks read as zeros (%zu bytes did not)", nonzero_bytes(buf, len));
	CHECK(kura_lseek(fs, fd, 4096, SEEK_DATA) == 4096, "an unwritten block is data to SEEK_DATA, as in tmpfs");
	CHECK(kura_pwrite(fs, fd, "abc", 3, 5 * 4096 + 100) == 3, "a small write into an unwritten block");
	CHECK(kura_pwrite(fs, fd, "defg", 4, 5 * 4096 + 200) == 4, "and another into the same block");
	memset(buf, 1, 4096);
	CHECK(kura_pread(fs, fd, buf, 4096, 5 * 4096) == 4096 && !memcmp(buf + 100, "abc", 3) &&
	      !memcmp(buf + 200, "defg", 4) && nonzero_bytes(buf, 4096) == 7,
	      "the block shows its 7 bytes and zeros (%zu bytes not zero)", nonzero_bytes(buf, 4096));
	memset(buf, 0x33, 8192);
	CHECK(kura_pwrite(fs, fd, buf, 8192, 9 * 4096) == 8192, "whole unwritten blocks overwritten");
	CHECK(kura_pread(fs, fd, buf, 3 * 4096, 8 * 4096) == 3 * 4096 && nonzero_bytes(buf, 4096) == 0 &&
	      nonzero_bytes(buf + 4096, 8192) == 8192, "they read back, beside an unwritten one still zero");
	CHECK(kura_fallocate(fs, fd, FALLOC_FL_ZERO_RANGE, 9 * 4096, 4096) == 0, "zero a written block");
	kura_fstat(fs, fd, &st);
	CHECK(kura_pread(fs, fd, buf, 4096, 9 * 4096) == 4096 && nonzero_bytes(buf, 4096) == 0 &&
	      st.st_blocks >= (blkcnt_t)(len / 512), "it reads as zeros and keeps its space (%lld sectors)",
	      (long long)st.st_blocks);
	struct kura_info in2;
	kura_info(fs, &in1);
	CHECK(kura_ftruncate(fs, fd, 12 * 4096) == 0, "truncate away 52 blocks, most of them unwritten");
	kura_info(fs, &in2);
	CHECK(in2.blocks_free >= in1.blocks_free + 52, "%llu blocks back for 52",
	      (unsigned long long)(in2.blocks_free - in1.blocks_free));
	kura_close(fs, fd);
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean with unwritten blocks");
	fs = kura_mount(pool, NULL, NULL);
	CHECK(kura_unlink(fs, "/u") == 0, "unlink the file");
	kura_info(fs, &in1);
	CHECK(in1.blocks_free == in0.blocks_free, "every block back: %llu free, %llu before",
	      (unsigned long long)in1.blocks_free, (unsigned long long)in0.blocks_free);
	free(buf);
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean after the unlink");
}

int main(void)
{
	snprintf(pool, sizeof pool, "/dev/shm/kura-layers-%d.pool", getpid());
	if (kura_mkfs(pool, 256 << 20, 1)) {
		printf("mkfs: %s\n", kura_last_error());
		return 1;
	}
	test_all_writes_traced();
	test_pool_full();
	test_big_file();
	test_fallocate_over_freed();
	test_unwritten_blocks();
	unlink(pool);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
