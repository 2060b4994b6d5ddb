/*
 * cli_pool.c — POOL:/path operands, the default pool, mounting.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include "cli.h"

/* Collapse "//" and drop trailing slashes so joined paths and messages look
 * the same however the user typed the operand. */
static void normalize(char *p)
{
	char *w = p;

	for (char *r = p; *r; r++) {
		if (*r == '/' && w > p && w[-1] == '/')
			continue;
		*w++ = *r;
	}
	while (w > p + 1 && w[-1] == '/')
		w--;
	*w = '\0';
}

int cli_parse_target(const char *cmd, const char *arg, struct cli_target *t)
{
	const char *colon = strchr(arg, ':');
	size_t plen = colon ? (size_t)(colon - arg) : strlen(arg);
	const char *path = colon ? colon + 1 : "/";

	memset(t, 0, sizeof(*t));
	t->arg = arg;
	if (plen == 0 || (plen == 7 && strncmp(arg, "default", 7) == 0)) {
		int r = kura_default_pool_path(t->pool, sizeof(t->pool));
		if (r < 0) {
			cli_msg(cmd, "cannot determine the default pool path: %s", strerror(-r));
			return -1;
		}
		t->is_default = 1;
	} else {
		if (plen >= sizeof(t->pool)) {
			cli_err(cmd, arg, ENAMETOOLONG);
			return -1;
		}
		memcpy(t->pool, arg, plen);
		t->pool[plen] = '\0';
	}
	/* The engine resolves relative paths from the root anyway; keeping the
	 * leading '/' makes messages and joins uniform. */
	if (*path != '/') {
		if (strlen(path) + 2 > sizeof(t->path)) {
			cli_err(cmd, arg, ENAMETOOLONG);
			return -1;
		}
		t->path[0] = '/';
		strcpy(t->path + 1, path);
	} else {
		if (strlen(path) + 1 > sizeof(t->path)) {
			cli_err(cmd, arg, ENAMETOOLONG);
			return -1;
		}
		strcpy(t->path, path);
	}
	normalize(t->path);
	return 0;
}

int cli_mkdir_p(const char *dir, mode_t mode)
{
	char *p = strdup(dir);
	char *s;
	struct stat st;

	if (!p)
		return -ENOMEM;
	for (s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;
		*s = '\0';
		if (mkdir(p, mode) < 0 && errno != EEXIST) {
			int e = errno;
			free(p);
			return -e;
		}
		*s = c;
		if (c == '\0')
			break;
	}
	free(p);
	if (stat(dir, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int cli_ensure_default_pool(const char *cmd, const char *pool)
{
	struct stat st;
	char *dir, *slash;
	int r;

	if (stat(pool, &st) == 0 && st.st_size > 0)
		return 0;
	dir = strdup(pool);
	if (!dir)
		return -1;
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		r = cli_mkdir_p(dir, 0700);
		if (r < 0) {
			cli_err(cmd, dir, -r);
			free(dir);
			return -1;
		}
	}
	free(dir);
	r = kura_mkfs(pool, KURA_DEFAULT_POOL_SIZE, 0);
	/* Another kura process may have won the race; that is fine. */
	if (r == -EEXIST)
		return 0;
	if (r < 0) {
		const char *why = kura_last_error();
		if (why && *why)
			cli_msg(cmd, "creating default pool: %s", why);
		else
			cli_err(cmd, pool, -r);
		return -1;
	}
	cli_msg(cmd, "created default pool %s", pool);
	return 0;
}

kura_fs *cli_mount(const char *pool, int read_only)
{
	struct kura_mount_opts opts;
	kura_fs *fs;
	int err = 0;

	memset(&opts, 0, sizeof(opts));
	opts.persist = KURA_PERSIST_AUTO;
	opts.read_only = read_only;
	fs = kura_mount(pool, &opts, &err);
	if (!fs) {
		const char *why = kura_last_error();
		cli_progress_clear();
		/* The engine's reason usually names the pool already; saying it
		 * twice only makes the line harder to read. */
		if (why && *why && strstr(why, pool))
			fprintf(stderr, "kura: %s\n", why);
		else if (why && *why)
			fprintf(stderr, "kura: %s: %s\n", pool, why);
		else
			fprintf(stderr, "kura: %s: %s\n", pool,
				strerror(err < 0 ? -err : EIO));
	}
	return fs;
}

static int shm_exists(const char *kind, const struct stat *st)
{
	char name[128];
	snprintf(name, sizeof name, "/dev/shm/kura-%s%llx-%llx", kind, (unsigned long long)st->st_dev,
		 (unsigned long long)st->st_ino);
	return access(name, F_OK) == 0;
}

/* What the pool's users left in /dev/shm (names as src/lock.c, journal.c
 * and src/preload/lock.c make them): a working copy is written home and
 * removed by a mount that finds itself the last (kura_release); the
 * layer's lock table and event ring (src/preload/notify.c) go when no
 * process has the pool mounted, which the write lock on its first byte
 * proves (see kura_mkfs), held meanwhile. */
/* The layer's copies of pool libraries for a program's loader
 * (src/preload/ldlibs.c): "kura-ld-<pid>-XXXXXX", removed by the program as
 * it starts, left behind only if it died before.  This user's whose
 * process is gone are removed. */
static void sweep_loader_dirs(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char *end;
		long pid = strncmp(e->d_name, "kura-ld-", 8) ? 0 : strtol(e->d_name + 8, &end, 10);
		if (pid <= 0 || *end != '-' || (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
			continue;
		int dfd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		struct stat st;
		if (dfd < 0 || fstat(dfd, &st) || st.st_uid != geteuid()) {
			if (dfd >= 0)
				close(dfd);
			continue;
		}
		DIR *in = fdopendir(dfd);
		struct dirent *f;
		while (in && (f = readdir(in)))
			if (strcmp(f->d_name, ".") && strcmp(f->d_name, ".."))
				unlinkat(dirfd(in), f->d_name, 0);
		if (in)
			closedir(in);
		else
			close(dfd);
		unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
	}
	if (d)
		closedir(d);
}

/* Each mount holds a read lock on the pool's first byte (src/mount.c).
 * When one does, that mount, or the `kura run` it runs under, tidies when
 * it leaves; a mount here to find that out cost about a millisecond at the
 * end of every `kura run` beside a holder. */
int cli_pool_mounted_elsewhere(const char *pool)
{
	int fd = open(pool, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0;
	struct flock probe = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
	int held = fcntl(fd, F_OFD_GETLK, &probe) == 0 && probe.l_type != F_UNLCK;
	close(fd);
	return held;
}

int cli_tidy_pool(const char *pool)
{
	struct stat st;
	int left = 0;
	sweep_loader_dirs();
	if (stat(pool, &st) < 0)
		return -errno;
	if ((shm_exists("copy-", &st) || shm_exists("", &st)) && !cli_pool_mounted_elsewhere(pool)) {
		struct kura_mount_opts o = { .persist = KURA_PERSIST_AUTO };
		int err = 0;
		kura_fs *fs = kura_mount(pool, &o, &err);
		if (!fs && (err == -EACCES || err == -EROFS)) {
			/* A user who may only read the pool has no working copy to
			 * write home, but its lock table goes with the last unmount. */
			o.read_only = 1;
			if ((fs = kura_mount(pool, &o, &err)))
				err = kura_unmount(fs);
			if (err < 0)
				fprintf(stderr, "kura: %s: cannot tidy its shared state: %s\n", pool, strerror(-err));
			fs = NULL;
		}
		if (fs) {
			err = kura_release(fs);
			int u = kura_unmount(fs);
			if (err < 0 || u < 0)
				fprintf(stderr,
					"kura: %s: cannot write the pool home: %s; its working copy stays in "
					"/dev/shm for the next mount\n",
					pool, strerror(err < 0 ? -err : -u));
		}
	}
	if (!shm_exists("locks-", &st) && !shm_exists("notify-", &st))
		return shm_exists("copy-", &st) + shm_exists("", &st);
	int fd = open(pool, O_RDWR | O_CLOEXEC), none = 0, table = -1;
	struct flock none_mounted = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
	char name[96];
	if (fd >= 0) {
		none = fcntl(fd, F_OFD_SETLK, &none_mounted) == 0;
	} else if ((fd = open(pool, O_RDONLY | O_CLOEXEC)) >= 0) {
		/* A user who may only read the pool cannot take the write lock;
		 * the pool's flock, which every attach and detach of the table
		 * holds, and the table's own, which every mount holds shared,
		 * tell the same.  Neither is waited for: a holder may be stopped. */
		snprintf(name, sizeof name, "/kura-locks-%llx-%llx", (unsigned long long)st.st_dev,
			 (unsigned long long)st.st_ino);
		if (flock(fd, LOCK_EX | LOCK_NB) == 0 &&
		    (table = shm_open(name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0)) >= 0)
			none = flock(table, LOCK_EX | LOCK_NB) == 0;
	}
	for (int i = 0; none && i < 2; i++) {
		snprintf(name, sizeof name, "/kura-%s-%llx-%llx", i ? "notify" : "locks", (unsigned long long)st.st_dev,
			 (unsigned long long)st.st_ino);
		shm_unlink(name);
	}
	if (table >= 0)
		close(table);
	if (fd >= 0)
		close(fd);
	left = shm_exists("copy-", &st) + shm_exists("", &st) + shm_exists("locks-", &st) + shm_exists("notify-", &st);
	return left;
}
