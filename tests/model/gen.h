/*
 * gen.h — what model_test's operations draw at random: paths, symlink
 * targets, sizes, offsets and modes.  Included once, by model_test.c
 * (model/common.h says why).
 */
#ifndef MODEL_GEN_H
#define MODEL_GEN_H

#include "model/common.h"

/* ---- paths ------------------------------------------------------------- */

static const char *dnames[] = {"d0", "d1", "d2", "d3"};
static const char *fnames[] = {"f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7"};
static char name255[256], name256[257];

static void kpath(char *out, size_t n, const char *rel)
{
	/* The engine resolves relative paths from the root too; use both forms. */
	if (rel[0] && rn(10) == 0)
		snprintf(out, n, "%s", rel);
	else
		snprintf(out, n, "/%s", rel);
}

static void rpath(char *out, size_t n, const char *rel)
{
	snprintf(out, n, "%s/%s", ref_root, rel);
}

static const char *final_name(void)
{
	int x = (int)rn(1000);
	if (x < 12)
		return name255;
	if (x < 18)
		return name256;
	if (x < 600)
		return fnames[rn(8)];
	return dnames[rn(4)];
}

/*
 * A random path relative to the root.  "." and at most one ".." appear, the
 * latter only after a real component: symlink targets never contain "." or
 * ".." components (see gen_target), so every real component resolves one
 * level or more below the root and ".." cannot climb out of it.  Outside
 * the root the reference would reach /dev/shm while kura stays at its root.
 */
static void gen_path(char *out, size_t n)
{
	int x = (int)rn(100);
	int depth = x < 40 ? 0 : x < 70 ? 1 : x < 90 ? 2 : 3;
	int real = 0, dots = 0;
	out[0] = 0;
	for (int i = 0; i < depth; i++) {
		const char *c;
		x = (int)rn(100);
		if (x < 3)
			c = ".";
		else if (x < 7 && real && !dots)
			c = "..", dots++;
		else if (x < 12)
			c = fnames[rn(8)], real++;
		else
			c = dnames[rn(4)], real++;
		size_t l = strlen(out);
		/* Repeated slashes are one separator. */
		snprintf(out + l, n - l, "%s%s", c, rn(50) ? "/" : "//");
	}
	size_t l = strlen(out);
	/* A trailing slash demands a directory (and follows a final symlink). */
	int slash = rn(33) == 0;
	trailing_slash |= slash;
	snprintf(out + l, n - l, "%s%s", final_name(), slash ? "/" : "");
}

/* Symlink targets: relative names-only paths, absolute ones (the reference
 * gets ref_root prefixed), a self-reference for loops, or a long one. */
static void gen_target(char *out, size_t n, const char *linkrel)
{
	int x = (int)rn(100);
	if (x < 8) {
		const char *base = strrchr(linkrel, '/');
		snprintf(out, n, "%.255s", base ? base + 1 : linkrel);
		return;
	}
	if (x < 10) {
		size_t len = 200 + rn(800);
		if (len >= n)
			len = n - 1;
		for (size_t i = 0; i < len; i++)
			out[i] = (i % 2) ? '/' : 'q';
		out[len - 1] = 'q';
		out[len] = 0;
		return;
	}
	out[0] = 0;
	if (x < 22)
		snprintf(out, n, "/");
	int comps = 1 + (int)rn(3);
	for (int i = 0; i < comps; i++) {
		size_t l = strlen(out);
		const char *c = (i == comps - 1 && pct(60)) ? fnames[rn(8)] : dnames[rn(4)];
		snprintf(out + l, n - l, "%s%s", i ? "/" : "", c);
	}
}

/* The reference stores absolute targets under ref_root; map back. */
static const char *ref_target_to_model(const char *t)
{
	if (strncmp(t, ref_root, ref_root_len) == 0 && t[ref_root_len] == '/')
		return t + ref_root_len;
	return t;
}

/* ---- generators -------------------------------------------------------- */

static size_t gen_size(void)
{
	int x = (int)rn(100);
	if (x < 15)
		return rn(4);
	if (x < 40)
		return 1 + rn(100);
	if (x < 55)
		return 4090 + rn(12);
	if (x < 65)
		return 8189 + rn(7);
	if (x < 85 || pressure)
		return 1 + rn(16384);
	return 1 + rn(MAX_IO);
}

static off_t gen_off(off_t cur)
{
	int x = (int)rn(100);
	if (x < 20)
		return 0;
	if (x < 45)
		return (off_t)rn((uint64_t)cur + 1);
	if (x < 60) {
		off_t o = (off_t)(rn(64) * 4096) + (off_t)rn(7) - 3;
		return o < 0 ? 0 : o;
	}
	if (x < 75)
		return cur + (off_t)rn(10);
	if (x < 90 || pressure)
		return (off_t)rn(1 << 20);
	if (x < 96)
		return (off_t)rn(4 << 20); /* far beyond EOF: sparse */
	if (x < 98)
		return -1 - (off_t)rn(100);
	return cur;
}

static int gen_mode(int dir)
{
	static const int common[] = {0644, 0600, 0755, 0700, 0666, 0777, 0400, 0444, 0000, 0311};
	if (pct(80))
		return common[rn(sizeof common / sizeof common[0])];
	/* mkdir drops S_ISUID/S_ISGID on Linux when the parent is not setgid;
	 * keep directories to permission bits and sticky so both agree. */
	return (int)rn(dir ? 01777 + 1 : 07777 + 1);
}

#endif
