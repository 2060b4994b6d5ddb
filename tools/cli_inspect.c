/*
 * cli_inspect.c — read-only views of pool paths: ls, stat, cat.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* Operands of one command usually share a pool; remounting for each would
 * cost a map/unmap per operand, so keep the last mount around. */
struct mount_cache {
	char pool[4096];
	kura_fs *fs;
};

static kura_fs *cached_mount(struct mount_cache *mc, const char *pool)
{
	if (mc->fs && strcmp(mc->pool, pool) == 0)
		return mc->fs;
	if (mc->fs)
		kura_unmount(mc->fs);
	mc->fs = cli_mount(pool, 1);
	if (mc->fs)
		snprintf(mc->pool, sizeof(mc->pool), "%s", pool);
	return mc->fs;
}

static void cache_release(struct mount_cache *mc)
{
	if (mc->fs)
		kura_unmount(mc->fs);
	mc->fs = NULL;
}

/* ---- ls ---- */

struct lsent {
	char *name;
	char *path;
	struct stat st;
	int st_err;
	char *target; /* symlinks in -l only */
};

static int cmp_lsent(const void *a, const void *b)
{
	return strcmp(((const struct lsent *)a)->name, ((const struct lsent *)b)->name);
}

static char *read_target(kura_fs *fs, const char *path)
{
	size_t cap = 256;

	for (;;) {
		char *buf = malloc(cap + 1);
		ssize_t n;
		if (!buf)
			return NULL;
		n = kura_readlink(fs, path, buf, cap);
		if (n < 0) {
			free(buf);
			return NULL;
		}
		if ((size_t)n < cap) {
			buf[n] = '\0';
			return buf;
		}
		free(buf);
		cap *= 4;
		if (cap > (1u << 20))
			return NULL;
	}
}

static int digits(unsigned long long v)
{
	int d = 1;

	while (v >= 10) {
		v /= 10;
		d++;
	}
	return d;
}

static void print_long(struct lsent *e, size_t n)
{
	int wl = 1, wu = 1, wg = 1, ws = 1;
	char mode[11], tbuf[32];

	for (size_t i = 0; i < n; i++) {
		if (e[i].st_err)
			continue;
		if (digits(e[i].st.st_nlink) > wl) wl = digits(e[i].st.st_nlink);
		if (digits(e[i].st.st_uid) > wu) wu = digits(e[i].st.st_uid);
		if (digits(e[i].st.st_gid) > wg) wg = digits(e[i].st.st_gid);
		if (digits((unsigned long long)e[i].st.st_size) > ws)
			ws = digits((unsigned long long)e[i].st.st_size);
	}
	for (size_t i = 0; i < n; i++) {
		struct tm tm;
		time_t t;
		if (e[i].st_err)
			continue;
		cli_mode_string(e[i].st.st_mode, mode);
		t = e[i].st.st_mtim.tv_sec;
		if (localtime_r(&t, &tm))
			strftime(tbuf, sizeof(tbuf), "%Y-%m-%d %H:%M", &tm);
		else
			snprintf(tbuf, sizeof(tbuf), "%lld", (long long)t);
		printf("%s %*llu %*u %*u %*lld %s %s", mode, wl, (unsigned long long)e[i].st.st_nlink,
		       wu, (unsigned)e[i].st.st_uid, wg, (unsigned)e[i].st.st_gid, ws,
		       (long long)e[i].st.st_size, tbuf, e[i].name);
		if (e[i].target)
			printf(" -> %s", e[i].target);
		putchar('\n');
	}
}

static void free_entries(struct lsent *e, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(e[i].name);
		free(e[i].path);
		free(e[i].target);
	}
	free(e);
}

static int ls_dir(kura_fs *fs, const struct cli_target *t, int lng, int all)
{
	struct kura_dirent de;
	struct lsent *e = NULL;
	size_t n = 0, cap = 0;
	int err = 0, r, rc = CLI_EXIT_OK;
	kura_dir *d = kura_opendir(fs, t->path, &err);

	if (!d) {
		cli_err("ls", t->arg, err < 0 ? -err : EIO);
		return CLI_EXIT_FAIL;
	}
	while ((r = kura_readdir(d, &de)) > 0) {
		if (!all && (strcmp(de.name, ".") == 0 || strcmp(de.name, "..") == 0))
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct lsent *ne = realloc(e, ncap * sizeof(*ne));
			if (!ne) {
				r = -ENOMEM;
				break;
			}
			e = ne;
			cap = ncap;
		}
		memset(&e[n], 0, sizeof(e[n]));
		e[n].name = strdup(de.name);
		e[n].path = cli_join(t->path, de.name);
		if (!e[n].name || !e[n].path) {
			free(e[n].name);
			free(e[n].path);
			r = -ENOMEM;
			break;
		}
		n++;
	}
	kura_closedir(d);
	if (r < 0) {
		cli_err("ls", t->arg, -r);
		rc = CLI_EXIT_FAIL;
	}
	if (n)
		qsort(e, n, sizeof(*e), cmp_lsent);
	for (size_t i = 0; i < n && lng; i++) {
		int s = kura_lstat(fs, e[i].path, &e[i].st);
		if (s < 0) {
			/* Removed by someone else since readdir: report, go on. */
			cli_err("ls", e[i].path, -s);
			e[i].st_err = 1;
			rc = CLI_EXIT_FAIL;
		} else if (S_ISLNK(e[i].st.st_mode)) {
			e[i].target = read_target(fs, e[i].path);
		}
	}
	if (lng)
		print_long(e, n);
	else
		for (size_t i = 0; i < n; i++)
			printf("%s\n", e[i].name);
	free_entries(e, n);
	return rc;
}

int cmd_ls(int argc, char **argv)
{
	struct mount_cache mc = { .fs = NULL };
	int lng = 0, all = 0, c, rc = CLI_EXIT_OK;

	if (cli_want_help("ls", argc, argv))
		return CLI_EXIT_OK;
	opterr = 0;
	while ((c = getopt(argc, argv, "la")) != -1) {
		if (c == 'l')
			lng = 1;
		else if (c == 'a')
			all = 1;
		else
			return cli_usage_error("ls", "unknown option '-%c'", optopt);
	}
	if (optind >= argc)
		return cli_usage_error("ls", "missing POOL:/path operand");
	for (int i = optind; i < argc; i++) {
		struct cli_target t;
		struct stat st;
		kura_fs *fs;
		int r;

		if (cli_parse_target("ls", argv[i], &t) < 0) {
			rc = CLI_EXIT_FAIL;
			continue;
		}
		fs = cached_mount(&mc, t.pool);
		if (!fs) {
			rc = CLI_EXIT_FAIL;
			continue;
		}
		/* Like ls(1): -l shows a symlink operand itself, plain ls lists
		 * the directory it points to. */
		r = lng ? kura_lstat(fs, t.path, &st) : kura_stat(fs, t.path, &st);
		if (r < 0 && !lng)
			r = kura_lstat(fs, t.path, &st);
		if (r < 0) {
			cli_err("ls", t.arg, -r);
			rc = CLI_EXIT_FAIL;
			continue;
		}
		if (argc - optind > 1 && S_ISDIR(st.st_mode))
			printf("%s%s:\n", i > optind ? "\n" : "", t.arg);
		if (S_ISDIR(st.st_mode)) {
			if (ls_dir(fs, &t, lng, all) != CLI_EXIT_OK)
				rc = CLI_EXIT_FAIL;
		} else {
			struct lsent e = { .name = t.path, .path = t.path, .st = st };
			if (lng) {
				if (S_ISLNK(st.st_mode))
					e.target = read_target(fs, t.path);
				print_long(&e, 1);
				free(e.target);
			} else {
				printf("%s\n", t.path);
			}
		}
	}
	cache_release(&mc);
	return rc;
}

/* ---- stat ---- */

static void print_time(const char *label, const struct timespec *ts)
{
	char date[64], zone[16];
	struct tm tm;
	time_t t = ts->tv_sec;

	if (!localtime_r(&t, &tm)) {
		printf("%s: %lld.%09ld\n", label, (long long)ts->tv_sec, ts->tv_nsec);
		return;
	}
	strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", &tm);
	strftime(zone, sizeof(zone), "%z", &tm);
	printf("%s: %s.%09ld %s\n", label, date, ts->tv_nsec, zone);
}

static void print_stat(kura_fs *fs, const struct cli_target *t, const struct stat *st)
{
	char mode[11], ubuf[64], gbuf[64];
	struct passwd *pw = getpwuid(st->st_uid);
	struct group *gr = getgrgid(st->st_gid);

	snprintf(ubuf, sizeof(ubuf), "%s", pw ? pw->pw_name : "UNKNOWN");
	snprintf(gbuf, sizeof(gbuf), "%s", gr ? gr->gr_name : "UNKNOWN");
	cli_mode_string(st->st_mode, mode);
	if (S_ISLNK(st->st_mode)) {
		char *target = read_target(fs, t->path);
		printf("  File: %s -> %s\n", t->path, target ? target : "?");
		free(target);
	} else {
		printf("  File: %s\n", t->path);
	}
	printf("  Size: %-15lld Blocks: %-10lld IO Block: %-6ld %s\n", (long long)st->st_size,
	       (long long)st->st_blocks, (long)st->st_blksize, cli_type_name(st->st_mode));
	printf("Device: %u,%u\tInode: %-11llu Links: %llu", major(st->st_dev), minor(st->st_dev),
	       (unsigned long long)st->st_ino, (unsigned long long)st->st_nlink);
	if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode))
		printf("\tDevice type: %u,%u", major(st->st_rdev), minor(st->st_rdev));
	putchar('\n');
	printf("Access: (%04o/%s)  Uid: (%5u/%8s)   Gid: (%5u/%8s)\n",
	       (unsigned)(st->st_mode & 07777), mode, (unsigned)st->st_uid, ubuf,
	       (unsigned)st->st_gid, gbuf);
	print_time("Access", &st->st_atim);
	print_time("Modify", &st->st_mtim);
	print_time("Change", &st->st_ctim);
}

int cmd_stat(int argc, char **argv)
{
	struct mount_cache mc = { .fs = NULL };
	int follow = 0, c, rc = CLI_EXIT_OK;

	if (cli_want_help("stat", argc, argv))
		return CLI_EXIT_OK;
	opterr = 0;
	while ((c = getopt(argc, argv, "L")) != -1) {
		if (c == 'L')
			follow = 1;
		else
			return cli_usage_error("stat", "unknown option '-%c'", optopt);
	}
	if (optind >= argc)
		return cli_usage_error("stat", "missing POOL:/path operand");
	for (int i = optind; i < argc; i++) {
		struct cli_target t;
		struct stat st;
		kura_fs *fs;
		int r;

		if (cli_parse_target("stat", argv[i], &t) < 0) {
			rc = CLI_EXIT_FAIL;
			continue;
		}
		fs = cached_mount(&mc, t.pool);
		if (!fs) {
			rc = CLI_EXIT_FAIL;
			continue;
		}
		r = follow ? kura_stat(fs, t.path, &st) : kura_lstat(fs, t.path, &st);
		if (r < 0) {
			cli_err("stat", t.arg, -r);
			rc = CLI_EXIT_FAIL;
			continue;
		}
		print_stat(fs, &t, &st);
	}
	cache_release(&mc);
	return rc;
}

/* ---- cat ---- */

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t w = write(fd, buf, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += w;
		len -= (size_t)w;
	}
	return 0;
}

static int cat_one(kura_fs *fs, const struct cli_target *t, char *buf)
{
	struct stat st;
	ssize_t n;
	int fd = kura_open(fs, t->path, O_RDONLY, 0), r = 0;

	if (fd < 0) {
		cli_err("cat", t->arg, -fd);
		return CLI_EXIT_FAIL;
	}
	/* kura lets directories be opened read-only; refuse them here with the
	 * same message cat(1) gives. */
	if (kura_fstat(fs, fd, &st) == 0 && S_ISDIR(st.st_mode)) {
		kura_close(fs, fd);
		cli_err("cat", t->arg, EISDIR);
		return CLI_EXIT_FAIL;
	}
	while ((n = kura_read(fs, fd, buf, CLI_COPY_BUF)) > 0) {
		r = write_all(STDOUT_FILENO, buf, (size_t)n);
		if (r < 0) {
			cli_err("cat", "standard output", -r);
			break;
		}
	}
	if (n < 0) {
		cli_err("cat", t->arg, (int)-n);
		r = (int)n;
	}
	kura_close(fs, fd);
	return r < 0 ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

int cmd_cat(int argc, char **argv)
{
	struct mount_cache mc = { .fs = NULL };
	int rc = CLI_EXIT_OK, first = 1;
	char *buf;

	if (cli_want_help("cat", argc, argv))
		return CLI_EXIT_OK;
	if (argc > 1 && strcmp(argv[1], "--") == 0) {
		first = 2;
	} else {
		for (int i = 1; i < argc; i++)
			if (argv[i][0] == '-' && argv[i][1] != '\0')
				return cli_usage_error("cat", "unknown option '%s'", argv[i]);
	}
	if (first >= argc)
		return cli_usage_error("cat", "missing POOL:/path operand");
	buf = malloc(CLI_COPY_BUF);
	if (!buf) {
		cli_err("cat", "buffer", ENOMEM);
		return CLI_EXIT_FAIL;
	}
	for (int i = first; i < argc; i++) {
		struct cli_target t;
		kura_fs *fs;

		if (cli_parse_target("cat", argv[i], &t) < 0) {
			rc = CLI_EXIT_FAIL;
			continue;
		}
		fs = cached_mount(&mc, t.pool);
		if (!fs) {
			rc = CLI_EXIT_FAIL;
			continue;
		}
		if (cat_one(fs, &t, buf) != CLI_EXIT_OK)
			rc = CLI_EXIT_FAIL;
	}
	free(buf);
	cache_release(&mc);
	return rc;
}
