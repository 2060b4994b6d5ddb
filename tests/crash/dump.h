/*
 * dump.h — the observable state of a mounted pool, in canonical form.
 *
 * Everything a program can see through kura.h except times and st_blocks:
 * the tree in sorted order, each name's type, permission bits, link count,
 * size, a hash of its contents or its symlink target, and which names share
 * an inode (hard-link classes numbered in walk order, so inode numbers, which
 * legitimately differ between pools, do not enter the dump).
 */
#ifndef CRASH_DUMP_H
#define CRASH_DUMP_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include "kura.h"
#include "crash/util.h"

struct dump_links {
	uint64_t ino[256];
	int n;
};

static int dump_link_class(struct dump_links *l, uint64_t ino)
{
	for (int i = 0; i < l->n; i++)
		if (l->ino[i] == ino)
			return i;
	if (l->n < 256)
		l->ino[l->n++] = ino;
	return l->n - 1;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int dump_file_hash(kura_fs *fs, const char *path, uint64_t *h)
{
	int fd = kura_open(fs, path, O_RDONLY | O_NOFOLLOW, 0);
	if (fd < 0)
		return fd;
	char buf[16384];
	uint64_t acc = 0x1234, pos = 0;
	ssize_t n;
	while ((n = kura_pread(fs, fd, buf, sizeof buf, (off_t)pos)) > 0) {
		acc = hash_bytes(acc, buf, (size_t)n);
		pos += (uint64_t)n;
	}
	kura_close(fs, fd);
	*h = acc ^ pos;
	return n < 0 ? (int)n : 0;
}

/* " x<hash>" of path's extended attributes (names and values), nothing if
 * it has none. */
static int dump_xattrs(kura_fs *fs, const char *path, struct sbuf *out)
{
	char list[4096], val[4096];
	ssize_t n = kura_listxattrat(fs, KURA_AT_ROOT, path, list, sizeof list, AT_SYMLINK_NOFOLLOW);
	if (n <= 0)
		return (int)(n < 0 ? n : 0);
	uint64_t h = hash_bytes(0x7861, list, (size_t)n); /* the list is in stored order: it counts too */
	for (char *nm = list; nm < list + n; nm += strlen(nm) + 1) {
		ssize_t v = kura_getxattrat(fs, KURA_AT_ROOT, path, nm, val, sizeof val, AT_SYMLINK_NOFOLLOW);
		if (v < 0)
			return (int)v;
		h = hash_bytes(h, val, (size_t)v) ^ (uint64_t)v;
	}
	sb_printf(out, " x%016llx", (unsigned long long)h);
	return 0;
}

/* Appends one line per name under dir (recursively); returns 0 or -errno. */
static int dump_dir(kura_fs *fs, const char *dir, struct sbuf *out, struct dump_links *links, int depth)
{
	int err = 0;
	if (depth > 32)
		return -ELOOP;
	kura_dir *d = kura_opendir(fs, dir, &err);
	if (!d)
		return err ? err : -EIO;
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct kura_dirent ent;
	int r;
	while ((r = kura_readdir(d, &ent)) == 1) {
		if (!strcmp(ent.name, ".") || !strcmp(ent.name, ".."))
			continue;
		GROW(names, n, cap);
		names[n++] = strdup(ent.name);
	}
	kura_closedir(d);
	if (r < 0)
		err = r;
	if (n)
		qsort(names, n, sizeof *names, name_cmp);
	for (size_t i = 0; i < n && !err; i++) {
		char path[1024];
		snprintf(path, sizeof path, "%s/%s", strcmp(dir, "/") ? dir : "", names[i]);
		struct stat st;
		err = kura_lstat(fs, path, &st);
		if (err)
			break;
		sb_printf(out, "%s %o n%lu", path, (unsigned)st.st_mode, (unsigned long)st.st_nlink);
		if ((err = dump_xattrs(fs, path, out)))
			break;
		if (S_ISREG(st.st_mode)) {
			uint64_t h = 0;
			err = dump_file_hash(fs, path, &h);
			sb_printf(out, " s%lld h%016llx", (long long)st.st_size, (unsigned long long)h);
			if (st.st_nlink > 1)
				sb_printf(out, " L%d", dump_link_class(links, st.st_ino));
			sb_printf(out, "\n");
		} else if (S_ISLNK(st.st_mode)) {
			char t[4200];
			ssize_t k = kura_readlink(fs, path, t, sizeof t - 1);
			if (k < 0) {
				err = (int)k;
				break;
			}
			t[k] = 0;
			sb_printf(out, " -> %s\n", t);
		} else if (S_ISDIR(st.st_mode)) {
			sb_printf(out, "\n");
			err = dump_dir(fs, path, out, links, depth + 1);
		} else {
			sb_printf(out, " ?\n");
		}
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return err;
}

/* Fills out with the canonical dump; returns its hash, or 0 with the error
 * written into the dump when the walk itself fails. */
static uint64_t dump_fs(kura_fs *fs, struct sbuf *out)
{
	struct dump_links links = { .n = 0 };
	struct stat st;
	out->n = 0;
	int err = kura_lstat(fs, "/", &st);
	if (!err) {
		sb_printf(out, "/ %o n%lu\n", (unsigned)st.st_mode, (unsigned long)st.st_nlink);
		err = dump_dir(fs, "/", out, &links, 0);
	}
	if (err) {
		sb_printf(out, "!! walk failed: %s\n", strerror(-err));
		return 0;
	}
	return hash_bytes(7, out->p, out->n) | 1;
}

/* The first line where two dumps differ, for reports. */
static CRASH_UNUSED void dump_diff(const char *a, const char *b, char *msg, size_t len)
{
	const char *la = a, *lb = b;
	while (*la && *lb) {
		const char *ea = strchr(la, '\n'), *eb = strchr(lb, '\n');
		size_t na = ea ? (size_t)(ea - la) : strlen(la), nb = eb ? (size_t)(eb - lb) : strlen(lb);
		if (na != nb || memcmp(la, lb, na)) {
			snprintf(msg, len, "got '%.*s' want '%.*s'", (int)na, la, (int)nb, lb);
			return;
		}
		la += na + (ea != NULL);
		lb += nb + (eb != NULL);
	}
	if (*la || *lb) {
		snprintf(msg, len, "got %s'%.60s' want %s'%.60s'", *la ? "" : "end ", la, *lb ? "" : "end ", lb);
		return;
	}
	snprintf(msg, len, "dumps equal");
}

#endif
