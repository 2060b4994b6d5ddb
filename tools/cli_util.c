/*
 * cli_util.c — messages, size parsing and small formatting helpers.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/xattr.h>

#include "cli.h"

void cli_err(const char *cmd, const char *path, int errnum)
{
	cli_progress_clear();
	fprintf(stderr, "kura: %s: %s: %s\n", cmd, path, strerror(errnum));
}

void cli_msg(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	cli_progress_clear();
	fprintf(stderr, "kura: %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kura: %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'kura %s --help' for more information.\n", cmd);
	return CLI_EXIT_USAGE;
}

/* Suffixes are binary only: "KB" is deliberately refused because half the
 * world reads it as 1000 and a silently wrong pool size is worse than an
 * error. */
static const struct {
	const char *suffix;
	unsigned shift;
} size_suffixes[] = {
	{ "", 0 },    { "B", 0 },
	{ "K", 10 },  { "KiB", 10 },
	{ "M", 20 },  { "MiB", 20 },
	{ "G", 30 },  { "GiB", 30 },
	{ "T", 40 },  { "TiB", 40 },
	{ "P", 50 },  { "PiB", 50 },
	{ "E", 60 },  { "EiB", 60 },
};

int cli_parse_size(const char *s, uint64_t *out, const char **why)
{
	const char *p = s;
	uint64_t v = 0;
	size_t i;

	/* strtoull would accept "-1" (as 2^64-1) and leading blanks; parse the
	 * digits by hand so every odd input is an error. */
	if (!isdigit((unsigned char)*p)) {
		*why = *p == '-' ? "size must be positive" : "size must start with a digit";
		return -1;
	}
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10) {
			*why = "size is too large";
			return -1;
		}
		v = v * 10 + d;
	}
	for (i = 0; i < sizeof(size_suffixes) / sizeof(size_suffixes[0]); i++) {
		if (strcasecmp(p, size_suffixes[i].suffix) == 0)
			break;
	}
	if (i == sizeof(size_suffixes) / sizeof(size_suffixes[0])) {
		*why = "unknown size suffix (use K, M, G, T, optionally as KiB, MiB, GiB, TiB)";
		return -1;
	}
	if (v > (UINT64_MAX >> size_suffixes[i].shift)) {
		*why = "size is too large";
		return -1;
	}
	v <<= size_suffixes[i].shift;
	/* Pool sizes become off_t file lengths. */
	if (v > (uint64_t)INT64_MAX) {
		*why = "size is too large";
		return -1;
	}
	if (v == 0) {
		*why = "size must be positive";
		return -1;
	}
	*out = v;
	return 0;
}

const char *cli_human(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes;
	int u = -1;

	if (bytes < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
		return buf;
	}
	while (v >= 1024.0 && u < 5) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

void cli_mode_string(mode_t mode, char *buf)
{
	char t = '?';

	switch (mode & S_IFMT) {
	case S_IFREG: t = '-'; break;
	case S_IFDIR: t = 'd'; break;
	case S_IFLNK: t = 'l'; break;
	case S_IFIFO: t = 'p'; break;
	case S_IFSOCK: t = 's'; break;
	case S_IFCHR: t = 'c'; break;
	case S_IFBLK: t = 'b'; break;
	}
	buf[0] = t;
	buf[1] = mode & S_IRUSR ? 'r' : '-';
	buf[2] = mode & S_IWUSR ? 'w' : '-';
	buf[3] = mode & S_ISUID ? (mode & S_IXUSR ? 's' : 'S') : (mode & S_IXUSR ? 'x' : '-');
	buf[4] = mode & S_IRGRP ? 'r' : '-';
	buf[5] = mode & S_IWGRP ? 'w' : '-';
	buf[6] = mode & S_ISGID ? (mode & S_IXGRP ? 's' : 'S') : (mode & S_IXGRP ? 'x' : '-');
	buf[7] = mode & S_IROTH ? 'r' : '-';
	buf[8] = mode & S_IWOTH ? 'w' : '-';
	buf[9] = mode & S_ISVTX ? (mode & S_IXOTH ? 't' : 'T') : (mode & S_IXOTH ? 'x' : '-');
	buf[10] = '\0';
}

const char *cli_type_name(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: return "regular file";
	case S_IFDIR: return "directory";
	case S_IFLNK: return "symbolic link";
	case S_IFIFO: return "fifo";
	case S_IFSOCK: return "socket";
	case S_IFCHR: return "character special file";
	case S_IFBLK: return "block special file";
	}
	return "unknown type";
}

char *cli_join(const char *dir, const char *name)
{
	size_t dl = strlen(dir), nl = strlen(name);
	int slash = dl == 0 || dir[dl - 1] != '/';
	char *s = malloc(dl + slash + nl + 1);

	if (!s)
		return NULL;
	memcpy(s, dir, dl);
	if (slash)
		s[dl] = '/';
	memcpy(s + dl + slash, name, nl + 1);
	return s;
}

/* ---- extended attributes ---- */

/* One side of a copy: a host path or a path in a pool (fs != NULL). */
struct xa_side {
	kura_fs *fs;
	const char *path;
};

static ssize_t xa_list(const struct xa_side *s, char *buf, size_t size)
{
	if (s->fs)
		return kura_listxattrat(s->fs, KURA_AT_ROOT, s->path, buf, size, AT_SYMLINK_NOFOLLOW);
	ssize_t n = llistxattr(s->path, buf, size);
	return n < 0 ? -errno : n;
}

static ssize_t xa_get(const struct xa_side *s, const char *name, void *buf, size_t size)
{
	if (s->fs)
		return kura_getxattrat(s->fs, KURA_AT_ROOT, s->path, name, buf, size, AT_SYMLINK_NOFOLLOW);
	ssize_t n = lgetxattr(s->path, name, buf, size);
	return n < 0 ? -errno : n;
}

static int xa_set(const struct xa_side *s, const char *name, const void *val, size_t size)
{
	if (s->fs)
		return kura_setxattrat(s->fs, KURA_AT_ROOT, s->path, name, val, size, 0, AT_SYMLINK_NOFOLLOW);
	return lsetxattr(s->path, name, val, size, 0) < 0 ? -errno : 0;
}

static int xa_copy(const struct xa_side *from, const struct xa_side *to)
{
	char list[65536], val[65536];
	ssize_t n = xa_list(from, list, sizeof list);
	if (n == -ENOTSUP || n == -EOPNOTSUPP || n == 0)
		return 0; /* the source keeps none */
	if (n < 0)
		return (int)-n;
	int first = 0;
	for (char *name = list; name < list + n; name += strlen(name) + 1) {
		ssize_t v = xa_get(from, name, val, sizeof val);
		int r = v < 0 ? (int)v : xa_set(to, name, val, (size_t)v);
		/* What the destination cannot hold (ACLs in a pool, user.* on a
		 * symlink, trusted.* without the capability) is left behind, as
		 * cp -a does. */
		if (r == -ENOTSUP || r == -EOPNOTSUPP || r == -EPERM || r == -ENODATA)
			continue;
		if (r < 0 && !first)
			first = -r;
	}
	return first;
}

int cli_xattrs_in(kura_fs *fs, const char *host_path, const char *kpath)
{
	struct xa_side from = { NULL, host_path }, to = { fs, kpath };
	return xa_copy(&from, &to);
}

int cli_xattrs_out(kura_fs *fs, const char *kpath, const char *host_path)
{
	struct xa_side from = { fs, kpath }, to = { NULL, host_path };
	return xa_copy(&from, &to);
}
