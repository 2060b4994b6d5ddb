/*
 * walkers.c — fts (every option, fts_info value and fts_set action), nftw
 * with FTW_CHDIR, and stdio reopening (freopen in place, freopen(NULL),
 * fdopen, ungetc, large offsets, setvbuf, fmemopen, wide characters).
 *
 * Run by test_preload.py once on tmpfs (glibc's own fts and stdio) and once
 * under the kura prefix (the layer's); the outputs must be identical after
 * the base directory is replaced by BASE.  argv[1] is the base directory.
 * Readdir order differs between file systems, so walks either sort their
 * children with a comparison function or print sorted lines.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <fts.h>
#include <ftw.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <wchar.h>

static const char *B;
static char cwdbuf[4096];

static void die(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	exit(1);
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f)
		die(path);
	fputs(text, f);
	fclose(f);
}

static const char *ename(int e)
{
	switch (e) {
	case 0: return "0";
	case ENOENT: return "ENOENT";
	case ELOOP: return "ELOOP";
	case ENOTDIR: return "ENOTDIR";
	case EACCES: return "EACCES";
	case EINVAL: return "EINVAL";
	case EBADF: return "EBADF";
	default: {
		static char b[32];
		snprintf(b, sizeof b, "errno%d", e);
		return b;
	}
	}
}

static const char *info(int i)
{
	static const char *n[] = { "?", "D", "DC", "DEFAULT", "DNR", "DOT", "DP", "ERR", "F", "INIT", "NS", "NSOK",
				   "SL", "SLNONE", "W" };
	return i >= 0 && i <= 14 ? n[i] : "?";
}

static const char *cwd(void)
{
	if (!getcwd(cwdbuf, sizeof cwdbuf))
		return "(getcwd failed)";
	return cwdbuf;
}

static int byname(const FTSENT **a, const FTSENT **b)
{
	return strcmp((*a)->fts_name, (*b)->fts_name);
}
static int byname_rev(const FTSENT **a, const FTSENT **b)
{
	return -strcmp((*a)->fts_name, (*b)->fts_name);
}

#define SHOW_CWD 1
#define SHOW_ACC 2
#define NO_STATP 4 /* glibc leaves fts_statp unset under FTS_NOSTAT */

static void show(const char *tag, FTSENT *p, int what)
{
	printf("%s %-6s l=%d name=%s path=%s", tag, info(p->fts_info), p->fts_level, p->fts_name, p->fts_path);
	if (what & SHOW_ACC)
		printf(" acc=%s", p->fts_accpath);
	if (p->fts_info == FTS_NS || p->fts_info == FTS_DNR || p->fts_info == FTS_ERR ||
	    (p->fts_errno && p->fts_info == FTS_DP))
		printf(" err=%s", ename(p->fts_errno));
	if (p->fts_info == FTS_F && !(what & NO_STATP))
		printf(" size=%lld", (long long)p->fts_statp->st_size);
	if (p->fts_info == FTS_DC)
		printf(" cycle=%s/%d", p->fts_cycle->fts_name, p->fts_cycle->fts_level);
	if ((p->fts_info == FTS_SL || p->fts_info == FTS_SLNONE) && !(what & NO_STATP))
		printf(" lnk=%d", S_ISLNK(p->fts_statp->st_mode));
	if ((p->fts_info == FTS_D || p->fts_info == FTS_DP) && !(what & NO_STATP))
		printf(" dir=%d", S_ISDIR(p->fts_statp->st_mode));
	if (what & SHOW_CWD)
		printf(" cwd=%s", cwd());
	printf("\n");
}

static void build(void)
{
	char p[4096];
#define P(s) (snprintf(p, sizeof p, "%s/%s", B, s), p)
	if (mkdir(P("t"), 0755) || mkdir(P("t/d1"), 0755) || mkdir(P("t/d1/sub"), 0755) || mkdir(P("t/d2"), 0755) ||
	    mkdir(P("t/d3"), 0755))
		die("mkdir");
	put(P("t/f1"), "hello");
	put(P("t/f2"), "");
	put(P("t/d1/g1"), "x");
	put(P("t/d1/sub/h1"), "deep\n");
	put(P("t/d3/k"), "k");
	if (symlink("f1", P("t/ln_f")) || symlink("d1", P("t/ln_d")) || symlink("..", P("t/d1/sub/back")) ||
	    symlink("nowhere", P("t/dangle")) || symlink("loop", P("t/loop")) || symlink("t", P("tl")))
		die("symlink");
#undef P
}

/* One walk over roots, showing every entry. */
static void walk(const char *tag, char **roots, int opts, int (*cmp)(const FTSENT **, const FTSENT **), int what)
{
	printf("== %s\n", tag);
	FTS *sp = fts_open(roots, opts, cmp);
	if (!sp) {
		printf("fts_open: %s\n", ename(errno));
		return;
	}
	FTSENT *p;
	int n = 0;
	while ((p = fts_read(sp)) && n++ < 200)
		show(" ", p, what);
	printf("end %s\n", p ? "(runaway)" : ename(errno));
	printf("close %d cwd=%s\n", fts_close(sp), cwd());
}

static char *lines[512];
static int nlines;
static int cmpstr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}
static void flush_lines(void)
{
	qsort(lines, (size_t)nlines, sizeof *lines, cmpstr);
	for (int i = 0; i < nlines; i++) {
		fputs(lines[i], stdout);
		free(lines[i]);
	}
	nlines = 0;
}

static void fts_tests(void)
{
	char t[4096], f1[4096], tl[4096], nd[4096], dev[] = "/dev/null";
	snprintf(t, sizeof t, "%s/t", B);
	snprintf(f1, sizeof f1, "%s/t/f1", B);
	snprintf(tl, sizeof tl, "%s/tl", B);
	snprintf(nd, sizeof nd, "%s/t/f1/x", B);
	char *rt[] = { t, NULL };

	walk("physical chdir", rt, FTS_PHYSICAL, byname, SHOW_CWD | SHOW_ACC);
	walk("physical nochdir", rt, FTS_PHYSICAL | FTS_NOCHDIR, byname_rev, SHOW_CWD | SHOW_ACC);
	walk("logical", rt, FTS_LOGICAL, byname, SHOW_CWD | SHOW_ACC);
	walk("physical seedot", rt, FTS_PHYSICAL | FTS_SEEDOT, byname, SHOW_ACC);
	walk("physical nostat", rt, FTS_PHYSICAL | FTS_NOSTAT | FTS_NOCHDIR, byname, NO_STATP);
	walk("logical nostat", rt, FTS_LOGICAL | FTS_NOSTAT, byname, NO_STATP);
	walk("physical xdev", rt, FTS_PHYSICAL | FTS_XDEV, byname, 0);

	char *roots[] = { tl, f1, nd, dev, NULL };
	walk("roots physical", roots, FTS_PHYSICAL, byname, SHOW_ACC);
	walk("roots comfollow", roots, FTS_PHYSICAL | FTS_COMFOLLOW | FTS_NOCHDIR, byname_rev, 0);
	char *bad[] = { t, "", NULL };
	walk("empty root", bad, FTS_PHYSICAL, NULL, 0);
	walk("bad options", rt, 0x10000, NULL, 0);

	/* Relative roots from inside the base, with chdir: accpath and cwd. */
	if (chdir(B))
		die("chdir");
	char dot[] = ".", rel[] = "t/d1", relslash[] = "t/d1/";
	char *rr[] = { rel, relslash, NULL };
	walk("relative", rr, FTS_PHYSICAL, byname, SHOW_CWD | SHOW_ACC);
	char *rd[] = { dot, NULL };
	printf("== dot root\n");
	FTS *sp = fts_open(rd, FTS_PHYSICAL, byname);
	FTSENT *p;
	while ((p = fts_read(sp)))
		if (p->fts_level <= 1)
			show(" ", p, SHOW_CWD | SHOW_ACC);
	printf("close %d\n", fts_close(sp));
	if (chdir("/"))
		die("chdir /");

	/* No comparison function: readdir order, printed sorted. */
	printf("== unsorted\n");
	sp = fts_open(rt, FTS_PHYSICAL | FTS_NOCHDIR, NULL);
	while ((p = fts_read(sp))) {
		char *l;
		if (asprintf(&l, "  %s %s\n", info(p->fts_info), p->fts_path) > 0 && nlines < 512)
			lines[nlines++] = l;
	}
	flush_lines();
	fts_close(sp);

	/* fts_set, fts_children, fts_number/fts_pointer. */
	printf("== instructions\n");
	sp = fts_open(rt, FTS_PHYSICAL, byname);
	printf("children before read:");
	for (FTSENT *c = fts_children(sp, 0); c; c = c->fts_link)
		printf(" %s/%s/%d", c->fts_name, info(c->fts_info), c->fts_level);
	printf("\n");
	while ((p = fts_read(sp))) {
		show(" ", p, SHOW_CWD | SHOW_ACC);
		if (p->fts_info == FTS_D) {
			p->fts_number = p->fts_level * 100 + p->fts_namelen;
			p->fts_pointer = p;
		}
		if (p->fts_info == FTS_DP)
			printf("  number=%ld pointer_same=%d\n", p->fts_number, p->fts_pointer == p);
		if (p->fts_level > 0)
			printf("  parent number=%ld\n", p->fts_parent->fts_number);
		if (p->fts_info == FTS_D && p->fts_level == 0) {
			printf("  children:");
			for (FTSENT *c = fts_children(sp, 0); c; c = c->fts_link) {
				printf(" %s/%s", c->fts_name, info(c->fts_info));
				if (!strcmp(c->fts_name, "f2"))
					fts_set(sp, c, FTS_SKIP);
				if (!strcmp(c->fts_name, "dangle") || !strcmp(c->fts_name, "ln_f"))
					fts_set(sp, c, FTS_FOLLOW);
			}
			printf("\n  cwd after children=%s\n", cwd());
		}
		if (p->fts_info == FTS_D && !strcmp(p->fts_name, "d2"))
			fts_set(sp, p, FTS_SKIP);
		if (p->fts_info == FTS_SL && !strcmp(p->fts_name, "ln_d"))
			fts_set(sp, p, FTS_FOLLOW);
		if (p->fts_info == FTS_F && !strcmp(p->fts_name, "f1") && p->fts_number++ == 0)
			fts_set(sp, p, FTS_AGAIN);
		if (p->fts_info == FTS_F && !strcmp(p->fts_name, "g1")) {
			errno = 0;
			FTSENT *c = fts_children(sp, 0);
			printf("  children of a file: %p %s\n", (void *)c, ename(errno));
		}
		if (p->fts_info == FTS_D && !strcmp(p->fts_name, "sub")) {
			printf("  nameonly:");
			for (FTSENT *c = fts_children(sp, FTS_NAMEONLY); c; c = c->fts_link)
				printf(" %s/%s", c->fts_name, info(c->fts_info));
			printf("\n");
		}
	}
	errno = 0;
	int si = fts_set(sp, sp->fts_cur, 99);
	printf("bad instr %d %s", si, ename(errno));
	errno = 0;
	FTSENT *bc = fts_children(sp, 99);
	printf(", bad children %p %s\n", (void *)bc, ename(errno));
	printf("close %d cwd=%s\n", fts_close(sp), cwd());

	/* FTS_DNR: a directory removed after its preorder visit.  FTS_ERR: a
	 * directory replaced between fts_children and entering it. */
	printf("== dnr and err\n");
	char d2[4096], d3[4096], d3old[4096];
	snprintf(d2, sizeof d2, "%s/t/d2", B);
	snprintf(d3, sizeof d3, "%s/t/d3", B);
	snprintf(d3old, sizeof d3old, "%s/t/d3.old", B);
	sp = fts_open(rt, FTS_PHYSICAL, byname);
	while ((p = fts_read(sp))) {
		if (p->fts_level > 1)
			continue;
		show(" ", p, SHOW_CWD);
		if (p->fts_info == FTS_D && !strcmp(p->fts_name, "d2"))
			printf("  rmdir %d\n", rmdir(d2));
		if (p->fts_info == FTS_D && !strcmp(p->fts_name, "d3")) {
			printf("  children:");
			for (FTSENT *c = fts_children(sp, 0); c; c = c->fts_link)
				printf(" %s/%s", c->fts_name, info(c->fts_info));
			int r1 = rename(d3, d3old);
			printf("\n  swap %d %d\n", r1, mkdir(d3, 0755));
		}
	}
	printf("end %s", ename(errno));
	printf(" close %d cwd=%s\n", fts_close(sp), cwd());
	if (mkdir(d2, 0755) || rmdir(d3) || rename(d3old, d3))
		die("restore");

	/* The 64-bit names. */
	printf("== fts64\n");
	FTS64 *s64 = fts64_open(rt, FTS_LOGICAL, (int (*)(const FTSENT64 **, const FTSENT64 **))byname);
	FTSENT64 *q;
	while ((q = fts64_read(s64)))
		if (q->fts_level <= 1)
			printf("  %s %s %s\n", info(q->fts_info), q->fts_path, q->fts_accpath);
	int s1 = fts64_set(s64, NULL, 99); /* glibc checks instr first */
	printf("set %d close %d\n", s1, fts64_close(s64));
}

/* ---- nftw ---- */

static size_t blen;
static int nftw_cb(const char *path, const struct stat *st, int type, struct FTW *f)
{
	const char *ty = type == FTW_F ? "F" : type == FTW_D ? "D" : type == FTW_DP ? "DP" : type == FTW_SL ? "SL" :
			 type == FTW_SLN ? "SLN" : type == FTW_NS ? "NS" : type == FTW_DNR ? "DNR" : "?";
	const char *c = cwd();
	const char *rc = strncmp(c, B, blen) == 0 ? c + blen : c;
	char *l;
	if (asprintf(&l, "  %-3s %s base=%s level=%d cwd=BASE%s size=%lld\n", ty, path, path + f->base, f->level, rc,
		     type == FTW_F ? (long long)st->st_size : -1LL) > 0 &&
	    nlines < 512)
		lines[nlines++] = l;
	return 0;
}

static int stop_cb(const char *path, const struct stat *st, int type, struct FTW *f)
{
	(void)st;
	(void)type;
	(void)f;
	return strstr(path, "sub") ? 7 : 0;
}

static void nftw_tests(void)
{
	char t[4096], d1[4096], rel[4096];
	snprintf(t, sizeof t, "%s/t", B);
	snprintf(d1, sizeof d1, "%s/t/d1", B);
	blen = strlen(B);
	static const struct {
		const char *name;
		int flags;
	} runs[] = {
		{ "chdir|depth|phys|mount", FTW_CHDIR | FTW_DEPTH | FTW_PHYS | FTW_MOUNT },
		{ "chdir|phys", FTW_CHDIR | FTW_PHYS },
		{ "phys|mount", FTW_PHYS | FTW_MOUNT },
	};
	for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
		printf("== nftw %s\n", runs[i].name);
		int r = nftw(t, nftw_cb, 4, runs[i].flags);
		flush_lines();
		printf("ret %d cwd=%s\n", r, cwd());
	}
	/* Following links: each directory once, the dangling one FTW_SLN. */
	printf("== nftw chdir logical d1\n");
	int r = nftw(d1, nftw_cb, 4, FTW_CHDIR);
	flush_lines();
	printf("ret %d cwd=%s\n", r, cwd());
	/* A relative start from inside the base. */
	if (chdir(B))
		die("chdir");
	snprintf(rel, sizeof rel, "t/d1/");
	printf("== nftw relative chdir|depth\n");
	r = nftw(rel, nftw_cb, 4, FTW_CHDIR | FTW_DEPTH | FTW_PHYS);
	flush_lines();
	printf("ret %d cwd=%s\n", r, cwd());
	if (chdir("/"))
		die("chdir /");
	printf("== nftw stop value\n");
	r = nftw(t, stop_cb, 4, FTW_CHDIR | FTW_PHYS);
	printf("ret %d cwd=%s\n", r, cwd());
	char missing[4096];
	snprintf(missing, sizeof missing, "%s/t/missing", B);
	errno = 0;
	r = nftw(missing, nftw_cb, 4, FTW_CHDIR);
	printf("missing ret %d %s lines %d cwd=%s\n", r, ename(errno), nlines, cwd());
}

/* ---- walks through a symlink that leaves the base ---- */

/* Under the prefix the link leads out of the pool: the walkers must still
 * start (glibc's would be handed a path the kernel cannot see) and follow
 * it through the wrappers to the host directory. */
static void escape_tests(void)
{
	char host[] = "/tmp/walkers-XXXXXX", path[4096], link[4096];
	if (!mkdtemp(host))
		die("mkdtemp");
	snprintf(path, sizeof path, "%s/d", host);
	if (mkdir(path, 0755))
		die("mkdir host");
	snprintf(path, sizeof path, "%s/d/f", host);
	put(path, "host file\n");
	snprintf(link, sizeof link, "%s/out", B);
	if (symlink(host, link))
		die("symlink out");
	printf("== nftw logical through a link out\n");
	int r = nftw(link, nftw_cb, 4, 0);
	flush_lines();
	printf("ret %d\n", r);
	snprintf(path, sizeof path, "%s/out/", B);
	printf("== nftw phys through a link out, trailing slash\n");
	r = nftw(path, nftw_cb, 4, FTW_PHYS);
	flush_lines();
	printf("ret %d\n", r);
	char *roots[] = { link, NULL };
	walk("fts logical through a link out", roots, FTS_LOGICAL | FTS_NOCHDIR, byname, 0);
	snprintf(path, sizeof path, "%s/d/f", host);
	unlink(path);
	snprintf(path, sizeof path, "%s/d", host);
	rmdir(path);
	rmdir(host);
	unlink(link);
}

/* ---- stdio ---- */

static void cat(const char *tag, const char *path)
{
	FILE *f = fopen(path, "r");
	char buf[256] = "";
	size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	buf[n] = '\0';
	printf("%s: [%s]\n", tag, buf);
	if (f)
		fclose(f);
}

static void stdio_tests(void)
{
	char a[4096], b[4096], c[4096], w[4096];
	snprintf(a, sizeof a, "%s/s_a", B);
	snprintf(b, sizeof b, "%s/s_b", B);
	snprintf(c, sizeof c, "%s/s_missing/x", B);
	snprintf(w, sizeof w, "%s/s_wide", B);
	printf("== freopen\n");
	FILE *f = fopen(a, "w");
	if (!f)
		die("fopen a");
	int fd = fileno(f);
	fputs("to a", f);
	FILE *g = freopen(b, "w+", f);
	printf("same FILE %d same fd %d\n", g == f, g && fileno(g) == fd);
	cat("a after freopen", a);
	fputs("to b\nline2\n", g);
	rewind(g);
	char line[64] = "";
	printf("read back %s", fgets(line, sizeof line, g) ? line : "(none)\n");
	printf("ungetc %c\n", ungetc('Q', g));
	/* freopen(NULL): the same file, new mode; pushed-back bytes gone. */
	g = freopen(NULL, "r", f);
	printf("null reopen same %d same fd %d\n", g == f, g && fileno(g) == fd);
	printf("first %c\n", fgetc(g));
	int pr = fputs("no", g);
	printf("write to r stream %d err %d\n", pr, ferror(g) != 0);
	g = freopen(NULL, "a", f);
	printf("append reopen same %d ftell %ld\n", g == f, g ? ftell(g) : -1L);
	fputs("tail\n", g);
	fflush(g);
	cat("b after append", b);
	g = freopen(NULL, "w", f);
	printf("truncating reopen same %d\n", g == f);
	fputs("new", g);
	g = freopen(a, "re", f);
	printf("cloexec reopen same %d fd same %d cloexec %d\n", g == f, fileno(g) == fd,
	       (fcntl(fileno(g), F_GETFD) & FD_CLOEXEC) != 0);
	cat("b after w", b);
	printf("a: %c\n", fgetc(g));
	errno = 0;
	g = freopen(c, "r", f);
	printf("failed reopen %p %s\n", (void *)g, ename(errno));
	fclose(f);

	printf("== fdopen\n");
	fd = open(a, O_RDONLY);
	errno = 0;
	g = fdopen(fd, "w");
	printf("fdopen r-fd as w %p %s\n", (void *)g, ename(errno));
	g = fdopen(fd, "r");
	printf("fdopen r %d fileno same %d", g != NULL, g && fileno(g) == fd);
	printf(" char %c\n", g ? fgetc(g) : '-');
	fclose(g);
	fd = open(b, O_RDWR);
	g = fdopen(fd, "a");
	printf("fdopen a sets O_APPEND %d\n", (fcntl(fd, F_GETFL) & O_APPEND) != 0);
	fputs("+app", g);
	fclose(g);
	cat("b", b);
	g = fopen(b, "a+");
	printf("a+ starts at %ld", ftell(g));
	g = freopen(NULL, "a", g);
	printf(", reopened a at %ld\n", ftell(g));
	fclose(g);

	printf("== seek\n");
	f = fopen(a, "r+");
	off_t big = (off_t)5 << 30;
	int sr = fseeko(f, big, SEEK_SET);
	printf("fseeko %d ftello %lld\n", sr, (long long)ftello(f));
	int gc = fgetc(f);
	printf("getc at 5G %d eof %d\n", gc, feof(f) != 0);
	sr = fseeko(f, 0, SEEK_END);
	printf("fseeko end %d ftello %lld\n", sr, (long long)ftello(f));
	fclose(f);

	printf("== setvbuf\n");
	static char vbuf[64];
	f = fopen(b, "w");
	printf("setvbuf %d\n", setvbuf(f, vbuf, _IOFBF, sizeof vbuf));
	fputs("buffered", f);
	struct stat st;
	stat(b, &st);
	printf("size before flush %lld\n", (long long)st.st_size);
	fflush(f);
	stat(b, &st);
	printf("size after flush %lld\n", (long long)st.st_size);
	fclose(f);

	printf("== fmemopen\n");
	char mem[32] = "";
	f = fmemopen(mem, sizeof mem, "w+");
	fprintf(f, "mem %d", 42);
	fflush(f);
	printf("fmemopen [%s] fileno %d\n", mem, fileno(f));
	fclose(f);

	printf("== wide\n");
	setlocale(LC_ALL, "C.UTF-8");
	f = fopen(w, "w");
	errno = 0;
	int o = fwide(f, 1);
	int r = fwprintf(f, L"w%d %ls\n", 7, L"\u00e9t\u00e9");
	int r2 = fputwc(L'\u20ac', f);
	int r3 = fputws(L"!\n", f);
	printf("fwide %d fwprintf %d fputwc %d fputws %d\n", o, r, r2 == (int)WEOF ? -1 : r2, r3 < 0 ? -1 : 0);
	fclose(f);
	struct stat ws;
	stat(w, &ws);
	printf("size %lld\n", (long long)ws.st_size);
	f = fopen(w, "r");
	wchar_t wl[64];
	printf("fgetws %d", fgetws(wl, 64, f) != NULL);
	if (wcslen(wl))
		printf(" len %zu last-but-one %x", wcslen(wl), (unsigned)wl[wcslen(wl) - 2]);
	wint_t wc = fgetwc(f);
	wint_t uc = ungetwc(wc, f);
	printf(" fgetwc %x ungetwc %x", (unsigned)wc, (unsigned)uc);
	printf(" again %x\n", (unsigned)fgetwc(f));
	fclose(f);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	B = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	build();
	/* Walks and reopens leave no descriptor behind. */
	int fd0 = open("/dev/null", O_RDONLY);
	close(fd0);
	fts_tests();
	nftw_tests();
	escape_tests();
	stdio_tests();
	int fd1 = open("/dev/null", O_RDONLY);
	printf("lowest free fd unchanged %d\n", fd0 == fd1);
	return 0;
}
