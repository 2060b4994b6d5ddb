/* badpaths.c — every path call against every kind of bad path argument
 * (empty, NULL, unreadable, too long, a too-long name, ".", "..", a
 * trailing slash on a file, a missing or non-directory parent, a symlink
 * loop...), one line per call and case, compared with the kernel's answers
 * on tmpfs.  Usage: badpaths BASE.  The working directory is BASE/w, which
 * holds file, dir, sub/inner, a symlink loop and a dangling symlink;
 * they are made afresh before each call. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <unistd.h>
#include <utime.h>

static char B[3000], W[3100];
static const char *unmapped, *noaccess;
static char toolong[PATH_MAX + 8], justfits[PATH_MAX], longname[300], longname_in_missing[320], longname_dir[320];

struct pcase {
	const char *name;
	const char *path;
	const char *abs;  /* its absolute form, if it has one */
	const char *link; /* the same through a host symlink to W */
};
static struct pcase cases[40];
static int ncases;

static void must(int ok, const char *what)
{
	if (!ok) {
		printf("setup failed: %s: %s\n", what, strerrorname_np(errno));
		exit(1);
	}
}

static void add_case(const char *name, const char *path, const char *abs, const char *link)
{
	must(ncases < (int)(sizeof cases / sizeof cases[0]), "room for another case");
	cases[ncases++] = (struct pcase){ name, path, abs, link };
}

/* The fixture, made afresh: nothing a call did survives into the next. */
static void reset(void)
{
	static const char *const names[] = { "file", "new", "loop", "dangling", "nowhere", "up", "sub/marker",
					     "sub/inner", "sub", "dir", "fifo", "marker", NULL };
	must(chdir(W) == 0, "chdir W");
	for (int i = 0; names[i]; i++)
		if (unlink(names[i]) < 0 && errno != ENOENT)
			must(rmdir(names[i]) == 0 || errno == ENOENT, names[i]);
	int fd = open("file", O_CREAT | O_WRONLY | O_TRUNC, 0644);
	must(fd >= 0 && write(fd, "data\n", 5) == 5, "file");
	close(fd);
	must(mkdir("dir", 0755) == 0, "dir");
	must(mkdir("sub", 0755) == 0 && mkdir("sub/inner", 0755) == 0, "sub");
	must(symlink("loop", "loop") == 0, "loop");
	must(symlink("nowhere", "dangling") == 0, "dangling");
	/* ".." after a symlink is its target's parent, not the link's. */
	must(symlink("sub/inner", "up") == 0, "up");
	fd = open("sub/marker", O_CREAT | O_WRONLY, 0644);
	must(fd >= 0, "sub/marker");
	close(fd);
}

static void report(const char *mode, const char *call, const char *cname, long r)
{
	int e = errno;
	printf("%-5s %-16s %-16s = %s\n", mode, call, cname, r < 0 ? strerrorname_np(e) : "ok");
}

/* Each call takes the case's path in its path argument (the first for
 * two-path calls, but the second for the "-to" ones); the *at calls
 * resolve it, and their other names, from d. */
typedef long (*call_fn)(int d, const char *p);

static long fd_result(int fd) { if (fd >= 0) close(fd); return fd; }
static long c_open(int d, const char *p) { (void)d; return fd_result(open(p, O_RDONLY)); }
static long c_open_creat(int d, const char *p) { (void)d; return fd_result(open(p, O_WRONLY | O_CREAT, 0644)); }
static long c_open_excl(int d, const char *p) { (void)d; return fd_result(open(p, O_WRONLY | O_CREAT | O_EXCL, 0644)); }
static long c_open_dir(int d, const char *p) { (void)d; return fd_result(open(p, O_RDONLY | O_DIRECTORY)); }
static long c_open_wr(int d, const char *p) { (void)d; return fd_result(open(p, O_WRONLY)); }
static long c_creat(int d, const char *p) { (void)d; return fd_result(creat(p, 0644)); }
static long c_openat(int d, const char *p) { return fd_result(openat(d, p, O_RDONLY)); }
static long c_openat_creat(int d, const char *p) { return fd_result(openat(d, p, O_RDWR | O_CREAT, 0644)); }
static long c_openat_nofol(int d, const char *p) { return fd_result(openat(d, p, O_RDONLY | O_NOFOLLOW)); }
static long c_mkdir(int d, const char *p) { (void)d; return mkdir(p, 0755); }
static long c_mkdirat(int d, const char *p) { return mkdirat(d, p, 0755); }
static long c_rmdir(int d, const char *p) { (void)d; return rmdir(p); }
static long c_unlink(int d, const char *p) { (void)d; return unlink(p); }
static long c_unlinkat(int d, const char *p) { return unlinkat(d, p, 0); }
static long c_unlinkat_d(int d, const char *p) { return unlinkat(d, p, AT_REMOVEDIR); }
static long c_rename(int d, const char *p) { (void)d; return rename(p, "new"); }
static long c_rename2(int d, const char *p) { (void)d; return rename("file", p); }
static long c_rename_d2(int d, const char *p) { (void)d; return rename("dir", p); }
static long c_renameat(int d, const char *p) { return renameat(d, p, d, "new"); }
static long c_renameat_to(int d, const char *p) { return renameat(d, "file", d, p); }
static long c_renameat2_nr(int d, const char *p) { return renameat2(d, "file", d, p, RENAME_NOREPLACE); }
static long c_renameat2_x(int d, const char *p) { return renameat2(d, "file", d, p, RENAME_EXCHANGE); }
static long c_link(int d, const char *p) { (void)d; return link(p, "new"); }
static long c_link2(int d, const char *p) { (void)d; return link("file", p); }
static long c_linkat_f(int d, const char *p) { return linkat(d, p, d, "new", AT_SYMLINK_FOLLOW); }
static long c_linkat_to(int d, const char *p) { return linkat(d, "file", d, p, 0); }
static long c_symlink(int d, const char *p) { (void)d; return symlink("target", p); }
static long c_symlink_t(int d, const char *p) { (void)d; return symlink(p, "new"); }
static long c_symlinkat(int d, const char *p) { return symlinkat("target", d, p); }
static long c_readlink(int d, const char *p) { char b[64]; (void)d; return readlink(p, b, sizeof b); }
static long c_readlinkat(int d, const char *p) { char b[64]; return readlinkat(d, p, b, sizeof b); }
static long c_stat(int d, const char *p) { struct stat st; (void)d; return stat(p, &st); }
static long c_lstat(int d, const char *p) { struct stat st; (void)d; return lstat(p, &st); }
static long c_fstatat(int d, const char *p) { struct stat st; return fstatat(d, p, &st, AT_SYMLINK_NOFOLLOW); }
static long c_fstatat_empty(int d, const char *p) { struct stat st; return fstatat(d, p, &st, AT_EMPTY_PATH); }
static long c_statx(int d, const char *p) { struct statx sx; return statx(d, p, 0, STATX_BASIC_STATS, &sx); }
static long c_access(int d, const char *p) { (void)d; return access(p, F_OK); }
static long c_faccessat(int d, const char *p) { return faccessat(d, p, R_OK, AT_EACCESS); }
static long c_chmod(int d, const char *p) { (void)d; return chmod(p, 0755); } /* what the directories have */
static long c_fchmodat(int d, const char *p) { return fchmodat(d, p, 0755, 0); }
static long c_chown(int d, const char *p) { (void)d; return chown(p, -1, -1); }
static long c_lchown(int d, const char *p) { (void)d; return lchown(p, -1, -1); }
static long c_fchownat(int d, const char *p) { return fchownat(d, p, -1, -1, AT_SYMLINK_NOFOLLOW); }
static long c_utimensat(int d, const char *p) { return utimensat(d, p, NULL, 0); }
static long c_utimes(int d, const char *p) { (void)d; return utimes(p, NULL); }
static long c_utime(int d, const char *p) { (void)d; return utime(p, NULL); }
static long c_truncate(int d, const char *p) { (void)d; return truncate(p, 0); }
static long c_chdir(int d, const char *p)
{
	char here[PATH_MAX];
	must(getcwd(here, sizeof here) != NULL, "getcwd");
	long r = chdir(p);
	int e = errno;
	must(chdir(here) == 0, "chdir back");
	(void)d;
	errno = e;
	return r;
}
static long c_opendir(int d, const char *p) { (void)d; DIR *dp = opendir(p); if (dp) closedir(dp); return dp ? 0 : -1; }
static long c_mkfifo(int d, const char *p) { (void)d; return mkfifo(p, 0644); }
static long c_mkfifoat(int d, const char *p) { return mkfifoat(d, p, 0644); }
static long c_statvfs(int d, const char *p) { struct statvfs sv; (void)d; return statvfs(p, &sv); }
static long c_statfs(int d, const char *p) { struct statfs sf; (void)d; return statfs(p, &sf); }
static long c_pathconf(int d, const char *p) { (void)d; errno = 0; long r = pathconf(p, _PC_NAME_MAX); return r < 0 && errno ? -1 : 0; }
static long c_realpath(int d, const char *p) { char b[PATH_MAX]; (void)d; return realpath(p, b) ? 0 : -1; }
static long c_execve(int d, const char *p)
{
	char *argv[] = { "x", NULL };
	(void)d;
	return execve(p, argv, (char *[]){ NULL });
}

/* at: the call resolves from its directory descriptor. */
static const struct {
	const char *name;
	call_fn fn;
	int at;
} calls[] = {
	{ "open", c_open, 0 },           { "open-creat", c_open_creat, 0 }, { "open-excl", c_open_excl, 0 },
	{ "open-dir", c_open_dir, 0 },   { "open-write", c_open_wr, 0 },    { "creat", c_creat, 0 },
	{ "openat", c_openat, 1 },       { "openat-creat", c_openat_creat, 1 }, { "openat-nofol", c_openat_nofol, 1 },
	{ "mkdir", c_mkdir, 0 },         { "mkdirat", c_mkdirat, 1 },       { "rmdir", c_rmdir, 0 },
	{ "unlink", c_unlink, 0 },       { "unlinkat", c_unlinkat, 1 },     { "unlinkat-dir", c_unlinkat_d, 1 },
	{ "rename-from", c_rename, 0 },  { "rename-to", c_rename2, 0 },     { "rename-dir-to", c_rename_d2, 0 },
	{ "renameat", c_renameat, 1 },   { "renameat-to", c_renameat_to, 1 }, { "rename-noreplace", c_renameat2_nr, 1 },
	{ "rename-exchange", c_renameat2_x, 1 }, { "link-from", c_link, 0 }, { "link-to", c_link2, 0 },
	{ "linkat-follow", c_linkat_f, 1 }, { "linkat-to", c_linkat_to, 1 }, { "symlink-at", c_symlink, 0 },
	{ "symlink-target", c_symlink_t, 0 }, { "symlinkat", c_symlinkat, 1 }, { "readlink", c_readlink, 0 },
	{ "readlinkat", c_readlinkat, 1 }, { "stat", c_stat, 0 },           { "lstat", c_lstat, 0 },
	{ "fstatat-nofol", c_fstatat, 1 }, { "fstatat-empty", c_fstatat_empty, 1 }, { "statx", c_statx, 1 },
	{ "access", c_access, 0 },       { "faccessat", c_faccessat, 1 },   { "chmod", c_chmod, 0 },
	{ "fchmodat", c_fchmodat, 1 },   { "chown", c_chown, 0 },           { "lchown", c_lchown, 0 },
	{ "fchownat", c_fchownat, 1 },   { "utimensat", c_utimensat, 1 },   { "utimes", c_utimes, 0 },
	{ "utime", c_utime, 0 },         { "truncate", c_truncate, 0 },     { "chdir", c_chdir, 0 },
	{ "opendir", c_opendir, 0 },     { "mkfifo", c_mkfifo, 0 },         { "mkfifoat", c_mkfifoat, 1 },
	{ "statvfs", c_statvfs, 0 },     { "statfs", c_statfs, 0 },         { "pathconf", c_pathconf, 0 },
	{ "realpath", c_realpath, 0 },   { "execve", c_execve, 0 },
};

static int skip(const char *call, const char *cname)
{
	/* glibc itself reads these paths before any system call: a crash.
	 * (realpath answers NULL with EINVAL.) */
	int bad_pointer = !strcmp(cname, "unmapped") || !strcmp(cname, "prot-none") || !strcmp(cname, "all-ones");
	int reads_path = !strcmp(call, "opendir") || !strcmp(call, "pathconf") || !strcmp(call, "realpath");
	if (reads_path && (bad_pointer || (!strcmp(cname, "null") && strcmp(call, "realpath"))))
		return 1;
	/* glibc's realpath takes paths of any length, component by component;
	 * the layer hands one of PATH_MAX bytes or more to it unexamined. */
	return !strcmp(call, "realpath") && !strcmp(cname, "path-max");
}

/* The host's root is not to be changed, not even its times. */
static int changes_attrs(const char *call)
{
	static const char *const names[] = { "chmod", "fchmodat", "chown", "lchown", "fchownat", "utimensat", "utimes", "utime", NULL };
	for (int i = 0; names[i]; i++)
		if (!strcmp(call, names[i]))
			return 1;
	return 0;
}

/* The absolute form of a relative case, kept for the life of the run. */
static const char *absolute(const char *rel, size_t len_goal)
{
	char *a = malloc(PATH_MAX + 8);
	must(a != NULL, "malloc");
	int n = snprintf(a, PATH_MAX + 8, "%s/", W);
	if (len_goal) { /* the same padding with "./" as the relative case */
		memset(a + n, 0, PATH_MAX + 8 - (size_t)n);
		size_t tail = strlen(rel) - strspn(rel, "./");
		for (size_t i = (size_t)n; i < len_goal - tail; i++)
			a[i] = (i - (size_t)n) % 2 || i + 1 == len_goal - tail ? '/' : '.';
		strcpy(a + len_goal - tail, rel + strlen(rel) - tail);
		must(strlen(a) == len_goal, "absolute length");
		return a;
	}
	snprintf(a + n, PATH_MAX + 8 - (size_t)n, "%s", rel);
	return a;
}

static void run(const char *mode, int d, int only_at)
{
	for (size_t c = 0; c < sizeof calls / sizeof calls[0]; c++) {
		if (only_at && !calls[c].at)
			continue;
		for (int k = 0; k < ncases; k++) {
			reset();
			if (d != AT_FDCWD)
				must(chdir(B) == 0, "chdir B"); /* a wrong base shows */
			if (skip(calls[c].name, cases[k].name) ||
			    (!strcmp(cases[k].name, "root") && changes_attrs(calls[c].name)))
				continue;
			const char *path = cases[k].path;
			if (!strcmp(mode, "abs") && cases[k].abs)
				path = cases[k].abs;
			if (!strcmp(mode, "link")) {
				if (!cases[k].link)
					continue;
				path = cases[k].link;
			}
			errno = 0;
			long r = calls[c].fn(d, path);
			report(mode, calls[c].name, cases[k].name, r);
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(B, sizeof B, "%s", argv[1]);
	snprintf(W, sizeof W, "%s/w", B);
	must(mkdir(W, 0755) == 0, "mkdir W");
	/* Unreadable memory: a page given back, and a page without access. */
	long pg = sysconf(_SC_PAGESIZE);
	char *m = mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	must(m != MAP_FAILED, "mmap");
	munmap(m, (size_t)pg);
	unmapped = m;
	must(mprotect(m + pg, (size_t)pg, PROT_NONE) == 0, "mprotect");
	noaccess = m + pg;
	/* PATH_MAX bytes without a NUL, and PATH_MAX - 2 that name "file". */
	memset(toolong, 0, sizeof toolong);
	for (int i = 0; i < PATH_MAX; i += 2)
		memcpy(toolong + i, "./", 2);
	memset(justfits, 0, sizeof justfits);
	for (int i = 0; i < PATH_MAX - 6; i += 2)
		memcpy(justfits + i, "./", 2);
	strcpy(justfits + PATH_MAX - 6, "file");
	must(strlen(justfits) == PATH_MAX - 2, "justfits");
	memset(longname, 'n', 256);
	snprintf(longname_in_missing, sizeof longname_in_missing, "missing/%s", longname);
	snprintf(longname_dir, sizeof longname_dir, "%s/file", longname);

	/* A host directory (outside BASE) with a symlink to W: on tmpfs the
	 * kernel follows it, under the prefix the layer must. */
	char host[] = "/tmp/badpaths-XXXXXX";
	must(mkdtemp(host) != NULL, "mkdtemp");
	char linkpath[64];
	snprintf(linkpath, sizeof linkpath, "%s/link", host);
	must(symlink(W, linkpath) == 0, "symlink to W");

	add_case("empty", "", NULL, NULL);
	add_case("null", NULL, NULL, NULL);
	add_case("unmapped", unmapped, NULL, NULL);
	add_case("prot-none", noaccess, NULL, NULL);
	add_case("all-ones", (const char *)-1L, NULL, NULL);
	add_case("path-max", toolong, absolute(toolong, PATH_MAX), NULL);
	add_case("path-max-2", justfits, absolute(justfits, PATH_MAX - 2), NULL);
	const char *rel[][2] = {
		{ "name-256", longname }, { "name-in-missing", longname_in_missing }, { "long-comp", longname_dir },
		{ "dot", "." }, { "dotdot", ".." }, { "dir-dot", "dir/." }, { "dir-dotdot", "sub/inner/.." },
		{ "file-dotdot", "file/.." }, { "file-dot", "file/." }, { "trailing-file", "file/" },
		{ "trailing-dir", "dir/" }, { "trailing-new", "new/" }, { "trailing-dots", "dir/.//" },
		{ "missing-parent", "missing/x" }, { "file-parent", "file/x" }, { "loop", "loop" },
		{ "loop-comp", "loop/x" }, { "dangling", "dangling" }, { "dangling-slash", "dangling/" },
		{ "double-slash", "sub//inner" }, { "missing-dotdot", "missing/../file" },
		{ "file-dotdot-x", "file/../file" }, { "loop-dotdot", "loop/../file" },
		{ "dangling-dotdot", "dangling/../file" }, { "symlink-dotdot", "up/../marker" },
		{ "dotdot-out-in", "../w/file" },
	};
	for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
		char *l = malloc(PATH_MAX);
		must(l != NULL, "malloc");
		snprintf(l, PATH_MAX, "%s/%s", linkpath, rel[i][1]);
		add_case(rel[i][0], rel[i][1], absolute(rel[i][1], 0), l);
	}
	add_case("root", "/", NULL, NULL);

	run("cwd", AT_FDCWD, 0);
	run("abs", AT_FDCWD, 0);
	run("link", AT_FDCWD, 0);
	int d = open(W, O_RDONLY | O_DIRECTORY);
	must(d >= 0, "open W");
	run("dirfd", d, 1);
	unlink(linkpath);
	rmdir(host);
	return 0;
}
