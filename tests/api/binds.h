/*
 * binds.h — api_test's checks of bind mounts inside a pool (src/bind.c):
 * crossing, the point kept busy, stacking, unbinding, the privilege, and a
 * removed root freed with its bind.  Included once, by api_test.c.
 */
#ifndef API_BINDS_H
#define API_BINDS_H

#include "api/common.h"

static ino_t ino_of(const char *path)
{
	struct stat st;
	return kura_stat(fs, path, &st) == 0 ? st.st_ino : 0;
}

static void test_binds(void)
{
	section = "binds";
	EXPECT(kura_mkdir(fs, "/bd", 0755), 0);
	EXPECT(kura_mkdir(fs, "/bd/src", 0755), 0);
	EXPECT(kura_mkdir(fs, "/bd/pt", 0755), 0);
	EXPECT(create_file("/bd/src/f", "data", 4), 0);
	EXPECT(create_file("/bd/pt/hidden", "x", 1), 0);
	EXPECT(create_file("/bd/file", "ff", 2), 0);

	/* Errors, in Linux's order: the target, the privilege, the source, the kinds. */
	EXPECT_ERR(kura_bindat(fs, KURA_AT_ROOT, "/bd/src", KURA_AT_ROOT, "/bd/none"), ENOENT);
	kura_set_creds(fs, 1000, 1000);
	EXPECT_ERR(kura_bindat(fs, KURA_AT_ROOT, "/bd/none", KURA_AT_ROOT, "/bd/pt"), EPERM);
	kura_set_creds(fs, 0, 0);
	EXPECT_ERR(kura_bindat(fs, KURA_AT_ROOT, "/bd/none", KURA_AT_ROOT, "/bd/pt"), ENOENT);
	EXPECT_ERR(kura_bindat(fs, KURA_AT_ROOT, "/bd/file", KURA_AT_ROOT, "/bd/pt"), ENOTDIR);
	EXPECT_ERR(kura_bindat(fs, KURA_AT_ROOT, "/bd/src", KURA_AT_ROOT, "/"), EBUSY);
	EXPECT_ERR(kura_unbindat(fs, KURA_AT_ROOT, "/bd/pt", 0), EINVAL);

	ino_t src = ino_of("/bd/src"), pt = ino_of("/bd/pt");
	EXPECT(kura_bindat(fs, KURA_AT_ROOT, "/bd/src", KURA_AT_ROOT, "/bd/pt"), 0);
	CHECK(ino_of("/bd/pt") == src, "/bd/pt shows inode %lu, the bound root is %lu", (unsigned long)ino_of("/bd/pt"),
	      (unsigned long)src);
	CHECK(ino_of("/bd/pt/f") == ino_of("/bd/src/f"), "/bd/pt/f is not /bd/src/f");
	EXPECT_ERR(kura_stat(fs, "/bd/pt/hidden", &(struct stat){0}), ENOENT);
	/* Writes through the point land in the root. */
	EXPECT(create_file("/bd/pt/new", "n", 1), 0);
	CHECK(ino_of("/bd/src/new") != 0, "a file made through the point is not in the root");
	/* A relative walk from a descriptor of the point's parent crosses too. */
	int dfd = kura_open(fs, "/bd", O_RDONLY | O_DIRECTORY, 0);
	struct stat st;
	EXPECT(kura_fstatat(fs, dfd, "pt/f", &st, 0), 0);
	kura_close(fs, dfd);

	/* The point is busy; the names inside it are not. */
	EXPECT_ERR(kura_rmdir(fs, "/bd/pt"), EBUSY);
	EXPECT_ERR(kura_rename(fs, "/bd/pt", "/bd/moved", 0), EBUSY);
	EXPECT_ERR(kura_rename(fs, "/bd/src", "/bd/pt", 0), EBUSY);
	EXPECT(kura_unlink(fs, "/bd/pt/new"), 0);
	/* Renaming a directory above the point carries the bind along. */
	EXPECT(kura_mkdir(fs, "/bd/up", 0755), 0);
	EXPECT(kura_mkdir(fs, "/bd/up/pt2", 0755), 0);
	EXPECT(kura_bindat(fs, KURA_AT_ROOT, "/bd/src", KURA_AT_ROOT, "/bd/up/pt2"), 0);
	EXPECT(kura_rename(fs, "/bd/up", "/bd/up2", 0), 0);
	CHECK(ino_of("/bd/up2/pt2") == src, "the bind did not follow its point's rename");
	EXPECT(kura_unbindat(fs, KURA_AT_ROOT, "/bd/up2/pt2", 0), 0);
	EXPECT(kura_rmdir(fs, "/bd/up2/pt2"), 0);
	EXPECT(kura_rmdir(fs, "/bd/up2"), 0);

	/* Another bind over the first one's root stacks; unbinding takes the top one first. */
	EXPECT(kura_mkdir(fs, "/bd/other", 0755), 0);
	EXPECT(kura_bindat(fs, KURA_AT_ROOT, "/bd/other", KURA_AT_ROOT, "/bd/pt"), 0);
	CHECK(ino_of("/bd/pt") == ino_of("/bd/other"), "the second bind does not show");
	CHECK(ino_of("/bd/src") == ino_of("/bd/other"), "the second bind's point is the first one's root");
	EXPECT(kura_unbindat(fs, KURA_AT_ROOT, "/bd/pt", 0), 0);
	CHECK(ino_of("/bd/pt") == src, "unbinding took the wrong bind");
	EXPECT(kura_unbindat(fs, KURA_AT_ROOT, "/bd/pt", 0), 0);
	CHECK(ino_of("/bd/pt") == pt, "/bd/pt still crosses after its last unbind");
	CHECK(ino_of("/bd/pt/hidden") != 0, "the covered file does not come back");
	EXPECT_ERR(kura_unbindat(fs, KURA_AT_ROOT, "/bd/pt", 0), EINVAL);

	/* A directory bound over itself becomes a point (busy) and shows itself. */
	EXPECT(kura_bindat(fs, KURA_AT_ROOT, "/bd/other", KURA_AT_ROOT, "/bd/other"), 0);
	CHECK(ino_of("/bd/other") != 0, "a directory bound over itself cannot be reached");
	EXPECT_ERR(kura_rmdir(fs, "/bd/other"), EBUSY);
	EXPECT_ERR(kura_bindat(fs, KURA_AT_ROOT, "/bd/src", KURA_AT_ROOT, "/bd/other"), EBUSY);
	kura_set_creds(fs, 1000, 1000);
	EXPECT_ERR(kura_unbindat(fs, KURA_AT_ROOT, "/bd/other", 0), EPERM);
	kura_set_creds(fs, 0, 0);
	EXPECT(kura_unbindat(fs, KURA_AT_ROOT, "/bd/other", 0), 0);
	EXPECT(kura_rmdir(fs, "/bd/other"), 0);

	/* A file bound over a file; a name's own calls see the point. */
	EXPECT(kura_bindat(fs, KURA_AT_ROOT, "/bd/src/f", KURA_AT_ROOT, "/bd/file"), 0);
	char buf[8] = {0};
	int fd = kura_open(fs, "/bd/file", O_RDWR | O_CREAT, 0644); /* O_CREAT of an existing name is a lookup */
	CHECK(fd >= 0 && kura_read(fs, fd, buf, sizeof buf) == 4 && !memcmp(buf, "data", 4),
	      "opening the file point does not read the bound file: '%s'", buf);
	if (fd >= 0)
		kura_close(fs, fd);
	EXPECT_ERR(kura_unlink(fs, "/bd/file"), EBUSY);
	EXPECT(kura_unbindat(fs, KURA_AT_ROOT, "/bd/file", 0), 0);

	/* A root removed while bound lives on, empty, until its bind goes;
	 * and a bind ends with the pool's last mount, its root then freed. */
	EXPECT(kura_mkdir(fs, "/bd/gone", 0755), 0);
	EXPECT(kura_bindat(fs, KURA_AT_ROOT, "/bd/gone", KURA_AT_ROOT, "/bd/pt"), 0);
	EXPECT(kura_rmdir(fs, "/bd/gone"), 0);
	EXPECT(kura_stat(fs, "/bd/pt", &st), 0);
	CHECK(st.st_nlink == 0, "the removed root shows %lu links", (unsigned long)st.st_nlink);
	EXPECT_ERR(kura_mknod(fs, "/bd/pt/x", S_IFREG | 0644, 0), ENOENT);
	EXPECT(kura_unbindat(fs, KURA_AT_ROOT, "/bd/pt", 0), 0);
	EXPECT(kura_mkdir(fs, "/bd/gone", 0755), 0);
	EXPECT(kura_bindat(fs, KURA_AT_ROOT, "/bd/gone", KURA_AT_ROOT, "/bd/pt"), 0);
	EXPECT(kura_rmdir(fs, "/bd/gone"), 0);
	remount();
	CHECK(ino_of("/bd/pt/hidden") != 0, "a bind outlived the pool's last mount");
	EXPECT(kura_unmount(fs), 0);
	EXPECT(kura_fsck(pool, 0, fsck_line, NULL), 0); /* the removed root was reclaimed, not leaked */
	mount_rw();
}

#endif
