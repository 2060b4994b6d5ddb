/* path_walk.c — a seeded random walk of calls on random path spellings:
 * components that exist or not, files where directories are wanted,
 * symlinks to directories, files, themselves and nowhere, ".", "..",
 * doubled and trailing slashes, relative to the working directory (moved
 * by chdir as it goes), absolute, or through a host symlink to the tree;
 * every answer is printed, so that the
 * run on tmpfs and the run under the prefix must agree line by line.
 * Usage: path_walk BASE [STEPS [SEED]]. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char B[3000], W[3100];
static char H[64] = "/tmp/path_walk-XXXXXX", HW[80]; /* a host directory, and its symlink to W */
static uint64_t rng;

static unsigned pick(unsigned n)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (unsigned)((rng >> 33) % n);
}

static int cwd_depth; /* how far below W the working directory is */

/* A path of one to four components; at most as many ".." as it has gone
 * down (and, relative to the working directory, as that is below W), so
 * it never climbs above W.  A symlink's target (link) climbs no higher
 * than the link's directory: then no walk leaves W, whatever the links. */
static void random_path(char *out, size_t cap, int link)
{
	static const char *const comps[] = { "d", "e", "f", "l", "m", "L", "s", "t", ".", "..", "" };
	size_t n = 0;
	int depth = 0;
	unsigned start = pick(6);
	if (start == 0 || start == 1)
		n += (size_t)snprintf(out, cap, "%s/", W);
	else if (start == 2)
		n += (size_t)snprintf(out, cap, "%s/", HW); /* through the host's symlink */
	else if (!link)
		depth = cwd_depth;
	int k = 1 + (int)pick(4);
	for (int i = 0; i < k && n < cap - 16; i++) {
		const char *c = comps[pick(11)];
		if ((!strcmp(c, "..") && depth <= 0) || (!*c && !n))
			c = "d"; /* never above W, and never "/" first: the walk stays in W */
		depth += !strcmp(c, "..") ? -1 : strcmp(c, ".") && *c ? 1 : 0;
		n += (size_t)snprintf(out + n, cap - n, "%s%s", c, i + 1 < k || pick(4) == 0 ? "/" : "");
	}
	if (!n)
		snprintf(out, cap, ".");
}

static void show(const char *what, const char *p, long r)
{
	const char *tag = !strncmp(p, W, strlen(W)) ? "W" : !strncmp(p, HW, strlen(HW)) ? "HW" : "";
	printf("%s '%s%s' = %s\n", what, tag, p + (*tag == 'W' ? strlen(W) : *tag ? strlen(HW) : 0),
	       r < 0 ? strerrorname_np(errno) : "ok");
}

/* Descriptors of the three homes, for the *at calls. */
static int home_fd[3];

static void show_at(const char *what, int h, const char *p, long r)
{
	char label[64];
	snprintf(label, sizeof label, "%s@%d", what, h);
	show(label, p, r);
}

/* The same kinds of call relative to a directory descriptor. */
static void step_at(void)
{
	char p[4096], q[4096];
	int h = (int)pick(3), d = home_fd[h], saved = cwd_depth;
	cwd_depth = h; /* random_path's notion of how far up a relative path may go */
	random_path(p, sizeof p, 0);
	random_path(q, sizeof q, 0);
	cwd_depth = saved;
	static const int oflags[] = { O_RDONLY, O_WRONLY | O_CREAT, O_RDWR | O_CREAT | O_EXCL, O_RDONLY | O_DIRECTORY,
				      O_RDONLY | O_NOFOLLOW, O_WRONLY | O_TRUNC, O_RDONLY | O_CREAT | O_NOFOLLOW };
	static const unsigned rflags[] = { 0, RENAME_NOREPLACE, RENAME_EXCHANGE };
	struct stat st;
	long r;
	switch (pick(10)) {
	case 0: {
		int f = oflags[pick(7)];
		int fd = openat(d, p, f, 0644);
		r = fd;
		if (fd >= 0)
			close(fd);
		char label[32];
		snprintf(label, sizeof label, "openat%x", f);
		show_at(label, h, p, r);
		break;
	}
	case 1: r = mkdirat(d, p, 0755); show_at("mkdirat", h, p, r); break;
	case 2: r = unlinkat(d, p, pick(2) ? AT_REMOVEDIR : 0); show_at("unlinkat", h, p, r); break;
	case 3: r = renameat2(d, p, d, q, rflags[pick(3)]); show_at("renameat2", h, p, r); show("  to", q, r); break;
	case 4: r = linkat(d, p, d, q, pick(2) ? AT_SYMLINK_FOLLOW : 0); show_at("linkat", h, p, r); show("  to", q, r); break;
	case 5: random_path(q, sizeof q, 1); r = symlinkat(q, d, p); show_at("symlinkat", h, p, r); break;
	case 6: { char b[64]; r = readlinkat(d, p, b, sizeof b); show_at("readlinkat", h, p, r); break; }
	case 7: r = fstatat(d, p, &st, pick(2) ? AT_SYMLINK_NOFOLLOW : 0); show_at("fstatat", h, p, r); break;
	case 8: r = faccessat(d, p, F_OK, pick(2) ? AT_SYMLINK_NOFOLLOW : 0); show_at("faccessat", h, p, r); break;
	default: r = fchmodat(d, p, 0755, 0); show_at("fchmodat", h, p, r);
	}
}

/* The walk ends when it moved its homes away (a rename of W, or of a
 * directory above it, through a symlink): the kernel's working directory
 * would go with them, the layer's (a path) would not. */
static void homes_still_there(void)
{
	char h[sizeof W + 8];
	snprintf(h, sizeof h, "%s/p/q", W);
	struct stat st;
	if (stat(h, &st) == 0 && S_ISDIR(st.st_mode))
		return;
	puts("the walk moved its working directories away: it ends here");
	exit(0);
}

static void step(void)
{
	char p[4096], q[4096];
	if (pick(3) == 0) {
		step_at();
		homes_still_there();
		return;
	}
	random_path(p, sizeof p, 0);
	struct stat st;
	long r;
	switch (pick(13)) {
	case 0: r = stat(p, &st); show("stat", p, r); if (!r) printf("  %s\n", S_ISDIR(st.st_mode) ? "dir" : "file"); break;
	case 1: r = lstat(p, &st); show("lstat", p, r); break;
	case 2: { int fd = open(p, O_RDONLY); r = fd; if (fd >= 0) close(fd); show("open", p, r); break; }
	case 3: { int fd = open(p, O_WRONLY | O_CREAT, 0644); r = fd; if (fd >= 0) close(fd); show("creat", p, r); break; }
	case 4: r = mkdir(p, 0755); show("mkdir", p, r); break;
	case 5: r = rmdir(p); show("rmdir", p, r); break;
	case 6: r = unlink(p); show("unlink", p, r); break;
	case 7: random_path(q, sizeof q, 0); r = rename(p, q); show("rename", p, r); show("  to", q, r); homes_still_there(); break;
	case 8: r = access(p, F_OK); show("access", p, r); break;
	case 9: { char b[64]; r = readlink(p, b, sizeof b); show("readlink", p, r); break; }
	case 10: random_path(q, sizeof q, 1); r = symlink(q, p); show("symlink", p, r); break;
	case 11: {
		/* chdir's own answer, then one of three directories the walk
		 * never renames or removes: the layer keeps a working directory
		 * in a pool as a path, so it would not follow a rename of it as
		 * the kernel does (see src/preload/README.md). */
		r = chdir(p);
		show("chdir", p, r);
		char cwd[4096];
		if (!r && getcwd(cwd, sizeof cwd))
			printf("  cwd %s%s\n", strncmp(cwd, W, strlen(W)) ? "?" : "W", strncmp(cwd, W, strlen(W)) ? "" : cwd + strlen(W));
		static const char *const homes[] = { "", "/p", "/p/q" };
		cwd_depth = (int)pick(3);
		snprintf(cwd, sizeof cwd, "%s%s", W, homes[cwd_depth]);
		if (chdir(cwd))
			exit(1);
		break;
	}
	default: {
		char b[4096];
		r = realpath(p, b) ? 0 : -1;
		show("realpath", p, r);
		if (!r)
			printf("  %s%s\n", strncmp(b, W, strlen(W)) ? "?" : "W", strncmp(b, W, strlen(W)) ? "" : b + strlen(W));
	}
	}
}

static void remove_host_dir(void)
{
	unlink(HW);
	rmdir(H);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	snprintf(B, sizeof B, "%s", argv[1]);
	/* Symlinks to W placed deeper than W make a ".." climb above it,
	 * whatever the walk counts; six levels of directories between B and
	 * W keep such climbs in B, where both runs see the same. */
	snprintf(W, sizeof W, "%s/P/P/P/P/P/P/w", B);
	long steps = argc > 2 ? atol(argv[2]) : 3000;
	rng = argc > 3 ? strtoull(argv[3], NULL, 0) : 42;
	setvbuf(stdout, NULL, _IOLBF, 0);
	char pad[sizeof W];
	for (size_t i = strlen(B) + 2; i <= strlen(W); i++)
		if (W[i] == '/' || !W[i]) {
			memcpy(pad, W, i);
			pad[i] = '\0';
			if (mkdir(pad, 0755))
				return 1;
		}
	if (chdir(W))
		return 1;
	/* p/q where the working directory goes, d/e directories, f a file,
	 * l -> d/e, s -> f, t -> nowhere, L -> L */
	if (mkdir("p", 0755) || mkdir("p/q", 0755) || mkdir("d", 0755) || mkdir("d/e", 0755) || mkdir("e", 0755) || close(open("f", O_CREAT | O_WRONLY, 0644)) ||
	    symlink("d/e", "l") || symlink("f", "s") || symlink("nowhere", "t") || symlink("L", "L"))
		return 1;
	if (!mkdtemp(H))
		return 1;
	snprintf(HW, sizeof HW, "%s/w", H);
	if (symlink(W, HW))
		return 1;
	atexit(remove_host_dir);
	static const char *const homes[] = { ".", "p", "p/q" };
	for (int h = 0; h < 3; h++)
		if ((home_fd[h] = open(homes[h], O_RDONLY | O_DIRECTORY)) < 0)
			return 1;
	for (long i = 0; i < steps; i++)
		step();
	return 0;
}
