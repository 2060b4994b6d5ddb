/* xattr_test: extended attributes through the engine's API — kept across a
 * remount, on the file back end too; given back with their inode (an
 * unlinked file's, at its last close); fsck clean throughout; a pool of
 * format 2 takes none until upgraded. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "kura.h"

static void one_pool(const char *pool, enum kura_persist persist)
{
	struct kura_mount_opts o = { .persist = persist };
	CHECK(kura_mkfs(pool, 16u << 20, 1) == 0, "mkfs %s: %s", pool, kura_last_error());
	kura_fs *fs = kura_mount(pool, &o, NULL);
	CHECK(fs != NULL, "mount: %s", kura_last_error());
	if (!fs)
		return;
	struct kura_info before, after;
	kura_info(fs, &before);
	int fd = kura_open(fs, "/f", O_CREAT | O_RDWR, 0644);
	CHECK(kura_setxattrat(fs, KURA_AT_ROOT, "/f", "user.k", "value", 5, 0, 0) == 0, "set");
	CHECK(kura_setxattrat(fs, fd, "", "trusted.t", "tt", 2, 0, AT_EMPTY_PATH) == 0, "fset");
	kura_close(fs, fd);
	kura_unmount(fs);
	fs = kura_mount(pool, &o, NULL);
	char buf[64];
	CHECK(kura_getxattrat(fs, KURA_AT_ROOT, "/f", "user.k", buf, sizeof buf, 0) == 5 && !memcmp(buf, "value", 5),
	      "after a remount the value is kept");
	CHECK(kura_listxattrat(fs, KURA_AT_ROOT, "/f", buf, sizeof buf, 0) == 17, "list: user.k\\0trusted.t\\0");
	CHECK(kura_getxattrat(fs, KURA_AT_ROOT, "/f", "user.k", buf, 2, 0) == -ERANGE, "small buffer: ERANGE");
	fd = kura_open(fs, "/f", O_RDONLY, 0);
	kura_unlink(fs, "/f");
	CHECK(kura_getxattrat(fs, fd, "", "user.k", buf, sizeof buf, AT_EMPTY_PATH) == 5, "an unlinked open file keeps them");
	kura_close(fs, fd);
	/* A new file in the freed slot has none of them. */
	fd = kura_open(fs, "/g", O_CREAT | O_RDWR, 0644);
	CHECK(kura_listxattrat(fs, fd, "", buf, sizeof buf, AT_EMPTY_PATH) == 0, "a new file starts with none");
	kura_close(fs, fd);
	kura_unlink(fs, "/g");
	kura_info(fs, &after);
	/* The attribute holders went with their files; the hidden directory stays. */
	CHECK(after.files == before.files, "files %llu -> %llu", (unsigned long long)before.files,
	      (unsigned long long)after.files);
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean (%s)", pool);
	unlink(pool);
}

int main(void)
{
	char pool[128];
	snprintf(pool, sizeof pool, "/dev/shm/kura-xattr-%d.pool", (int)getpid());
	one_pool(pool, KURA_PERSIST_MEMORY);
	snprintf(pool, sizeof pool, "kura-xattr-%d.pool", (int)getpid()); /* the scratch directory: a disk */
	one_pool(pool, KURA_PERSIST_FILE);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
