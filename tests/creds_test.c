/*
 * creds_test — the engine's credentials API (kura_set_thread_creds): file
 * system ids, supplementary groups, capabilities, access() with the real
 * ids, set-group-ID inheritance and the chmod/chown/write rules, and two
 * threads asking at once with different credentials.  The expected answers
 * are Linux's (generic_permission, setattr_prepare, inode_init_owner).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "kura.h"

static kura_fs *fs;

#define EXPECT(expr, want)                                                                       \
	do {                                                                                     \
		long got_ = (long)(expr);                                                        \
		CHECK(got_ == (long)(want), "%s: got %ld (%s), want %ld", #expr, got_,             \
		      got_ < 0 ? strerror((int)-got_) : "ok", (long)(want));                     \
	} while (0)

static struct kura_creds user(uid_t u, gid_t g, size_t n, const gid_t *groups)
{
	return (struct kura_creds){ .uid = u, .fsuid = u, .gid = g, .fsgid = g, .ngroups = n, .groups = groups };
}

static void mode_of(const char *path, mode_t want, uid_t uid, gid_t gid)
{
	struct stat st;
	int r = kura_lstat(fs, path, &st);
	CHECK(r == 0 && (st.st_mode & 07777) == want && st.st_uid == uid && st.st_gid == gid,
	      "%s: %s mode %o uid %u gid %u, want mode %o uid %u gid %u", path, r ? strerror(-r) : "",
	      st.st_mode & 07777, st.st_uid, st.st_gid, want, uid, gid);
}

static int mkfile(const char *path, mode_t mode)
{
	int fd = kura_open(fs, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
	if (fd >= 0)
		kura_close(fs, fd);
	return fd < 0 ? fd : 0;
}

static void groups_and_modes(void)
{
	const struct kura_creds root = { .caps = KURA_CAPS_FS, .caps_permitted = KURA_CAPS_FS };
	kura_set_thread_creds(&root);
	EXPECT(mkfile("/f0604", 0604), 0);
	EXPECT(kura_chown(fs, "/f0604", 0, 100, 0), 0);
	EXPECT(mkfile("/f0640", 0640), 0);
	EXPECT(kura_chown(fs, "/f0640", 0, 100, 0), 0);
	EXPECT(mkfile("/secret", 0600), 0);
	EXPECT(kura_mkdir(fs, "/sgid", 02775), 0);
	mode_of("/sgid", 0775, 0, 0); /* mkdir keeps no set-group-ID bit of its own */
	EXPECT(kura_chown(fs, "/sgid", 0, 100, 0), 0);
	EXPECT(kura_chmod(fs, "/sgid", 02775), 0);
	EXPECT(kura_mkdir(fs, "/pub", 0777), 0);

	gid_t users[] = { 100 };
	struct kura_creds member = user(1000, 1000, 1, users), stranger = user(1001, 1001, 0, NULL);
	kura_set_thread_creds(&member);
	/* The group class decides for a member, even against "other". */
	EXPECT(kura_access(fs, "/f0604", R_OK), -EACCES);
	EXPECT(kura_access(fs, "/f0640", R_OK), 0);
	EXPECT(kura_access(fs, "/secret", R_OK), -EACCES);
	/* A set-group-ID directory passes its group, and to directories its bit. */
	EXPECT(mkfile("/sgid/f", 0644), 0);
	mode_of("/sgid/f", 0644, 1000, 100);
	EXPECT(kura_mkdir(fs, "/sgid/d", 0755), 0);
	mode_of("/sgid/d", 02755, 1000, 100);
	/* chgrp to a group of one's own, not to another. */
	EXPECT(mkfile("/pub/mine", 0644), 0);
	mode_of("/pub/mine", 0644, 1000, 1000);
	EXPECT(kura_chown(fs, "/pub/mine", (uid_t)-1, 100, 0), 0);
	EXPECT(kura_chown(fs, "/pub/mine", (uid_t)-1, 4242, 0), -EPERM);
	EXPECT(kura_chown(fs, "/pub/mine", 1001, (gid_t)-1, 0), -EPERM);

	kura_set_thread_creds(&stranger);
	EXPECT(kura_access(fs, "/f0604", R_OK), 0);
	EXPECT(kura_access(fs, "/f0640", R_OK), -EACCES);
	EXPECT(kura_chmod(fs, "/pub/mine", 0600), -EPERM);
	/* Creating 02755 in a set-group-ID directory of a group not one's own
	 * drops the bit (after the directory is opened up to everyone). */
	kura_set_thread_creds(&root);
	EXPECT(kura_chmod(fs, "/sgid", 02777), 0);
	kura_set_thread_creds(&stranger);
	int fd = kura_open(fs, "/sgid/x", O_CREAT | O_WRONLY, 02755);
	CHECK(fd >= 0, "create in the sgid dir: %s", strerror(-fd));
	mode_of("/sgid/x", 0755, 1001, 100);
	/* chmod g+s of one's own file in another group is silently g-s. */
	EXPECT(kura_chown(fs, "/sgid/x", (uid_t)-1, 1001, 0), 0);
	kura_set_thread_creds(&root);
	EXPECT(kura_chown(fs, "/sgid/x", (uid_t)-1, 100, 0), 0);
	kura_set_thread_creds(&stranger);
	EXPECT(kura_chmod(fs, "/sgid/x", 06755), 0);
	mode_of("/sgid/x", 04755, 1001, 100);
	/* A write by the owner drops set-user-ID. */
	EXPECT(kura_write(fs, fd, "x", 1), 1);
	mode_of("/sgid/x", 0755, 1001, 100);
	kura_close(fs, fd);
	kura_set_thread_creds(NULL);
}

static void capabilities(void)
{
	/* uid 0 without capabilities is an ordinary user to the checks. */
	struct kura_creds bare_root = { 0 };
	kura_set_thread_creds(&bare_root);
	EXPECT(kura_access(fs, "/pub/mine", W_OK), -EACCES);
	EXPECT(kura_access(fs, "/secret", R_OK), 0); /* the owner's bits */
	/* CAP_DAC_READ_SEARCH reads anything, writes nothing. */
	struct kura_creds reader = user(1001, 1001, 0, NULL);
	reader.caps = KURA_CAP_DAC_READ_SEARCH;
	kura_set_thread_creds(&reader);
	EXPECT(kura_faccessat(fs, KURA_AT_ROOT, "/secret", R_OK, AT_EACCESS), 0);
	EXPECT(kura_access(fs, "/secret", R_OK), -EACCES); /* access() drops it: not real root */
	EXPECT(kura_faccessat(fs, KURA_AT_ROOT, "/secret", W_OK, AT_EACCESS), -EACCES);
	/* access() asks with the real ids: here a real uid of 0, which gets
	 * its permitted capabilities, while the file-system ids are nobody's. */
	struct kura_creds setuid_like = user(65534, 65534, 0, NULL);
	setuid_like.uid = 0;
	setuid_like.caps_permitted = KURA_CAPS_FS;
	kura_set_thread_creds(&setuid_like);
	EXPECT(kura_access(fs, "/secret", R_OK), 0);
	EXPECT(kura_faccessat(fs, KURA_AT_ROOT, "/secret", R_OK, AT_EACCESS), -EACCES);
	/* Execute permission even root has only where someone has it. */
	struct kura_creds root = { .caps = KURA_CAPS_FS, .caps_permitted = KURA_CAPS_FS };
	kura_set_thread_creds(&root);
	EXPECT(kura_access(fs, "/secret", X_OK), -EACCES);
	EXPECT(kura_access(fs, "/pub", X_OK), 0);
	kura_set_thread_creds(NULL);
}

/* Two threads, two identities, one mount, at once. */
static pthread_barrier_t bar;
static int results[2][64];

static void *asker(void *arg)
{
	int me = (int)(long)arg;
	struct kura_creds c = me ? user(1001, 1001, 0, NULL) : (struct kura_creds){ .caps = KURA_CAPS_FS };
	kura_set_thread_creds(&c);
	pthread_barrier_wait(&bar);
	for (int i = 0; i < 64; i++)
		results[me][i] = kura_access(fs, "/secret", R_OK);
	return NULL;
}

static void threads(void)
{
	pthread_t t[2];
	pthread_barrier_init(&bar, NULL, 2);
	for (long i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, asker, (void *)i);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	int ok = 1;
	for (int i = 0; i < 64; i++)
		ok &= results[0][i] == 0 && results[1][i] == -EACCES;
	CHECK(ok, "threads with different credentials saw each other's");
}

static void report(void *ctx, const char *line)
{
	(void)ctx;
	printf("fsck: %s\n", line);
}

int main(void)
{
	char pool[64];
	snprintf(pool, sizeof pool, "/dev/shm/kura-creds-test-%d.pool", (int)getpid());
	if (kura_mkfs(pool, 8u << 20, 1)) {
		printf("mkfs %s failed\n", pool);
		return 1;
	}
	struct kura_mount_opts o = { .persist = KURA_PERSIST_AUTO };
	fs = kura_mount(pool, &o, NULL);
	if (!fs) {
		printf("mount: %s\n", kura_last_error());
		return 1;
	}
	groups_and_modes();
	capabilities();
	threads();
	kura_unmount(fs);
	int bad = kura_fsck(pool, 0, report, NULL);
	CHECK(bad == 0, "fsck found %d problems", bad);
	unlink(pool);
	printf("creds_test: %d passed, %d failed\n", passed, failed);
	return failed != 0;
}
