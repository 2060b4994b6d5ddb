/* perm_walk.c — a long, seeded, random sequence of namespace and attribute
 * calls made under changing identities (root, two users, with and without
 * a shared supplementary group) in a small tree with set-id, sticky and
 * group-writable directories; every answer and the resulting owner and mode
 * are printed, so that the run on tmpfs and the run under the prefix must
 * agree line by line.  Usage: perm_walk BASE [STEPS [SEED]].  Needs root;
 * otherwise it says so and checks nothing. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static char B[3000];
static uint64_t rng;

static unsigned pick(unsigned n)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (unsigned)((rng >> 33) % n);
}

/* Names the calls pick from: a few directories two deep, a few leaves. */
static const char *const dirs[] = { "", "a", "b", "a/c", "s", "g" };
static const char *const leaves[] = { "f", "h", "d", "x" };

static const char *path(char *buf)
{
	snprintf(buf, 4096, "%s/%s%s%s", B, dirs[pick(6)], "/", leaves[pick(4)]);
	return buf;
}

static const char *dir_path(char *buf)
{
	snprintf(buf, 4096, "%s/%s", B, dirs[pick(6)]);
	return buf;
}

struct who {
	uid_t uid;
	gid_t gid;
	int ngroups;
	gid_t groups[2];
	int bare; /* root without the capabilities that bear on files */
};
static const struct who people[] = {
	{ 0, 0, 0, { 0 }, 0 },
	{ 4201, 4201, 0, { 0 }, 0 },
	{ 4201, 4201, 1, { 4210 }, 0 },
	{ 4202, 4202, 1, { 4210 }, 0 },
	{ 4202, 4210, 0, { 0 }, 0 },
	{ 0, 0, 0, { 0 }, 1 },
};
#define NPEOPLE (sizeof people / sizeof people[0])

/* glibc has them but declares them nowhere. */
int capget(cap_user_header_t h, cap_user_data_t d);
int capset(cap_user_header_t h, const cap_user_data_t d);

/* The effective capabilities: all permitted ones, or those but the five
 * that bear on files (CAP_CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER,
 * FSETID: bits 0 to 4). */
static int set_caps(int bare)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	if (capget(&h, d))
		return -1;
	for (int i = 0; i < 2; i++)
		d[i].effective = d[i].permitted;
	if (bare)
		d[0].effective &= ~0x1fu;
	return capset(&h, d);
}

static void become(const struct who *w)
{
	if (seteuid(0) || set_caps(0) || setgroups((size_t)w->ngroups, w->groups) || setegid(w->gid) ||
	    seteuid(w->uid) || (w->bare && set_caps(1))) {
		printf("cannot become %u: %s\n", w->uid, strerror(errno));
		exit(1);
	}
}

static void result(const char *what, const char *p, long r)
{
	const char *rel = p + strlen(B);
	printf("%s %s = %s", what, rel, r < 0 ? strerrorname_np(errno) : "ok");
	struct stat st;
	if (lstat(p, &st) == 0)
		printf(" [%o %u:%u%s]", st.st_mode & 07777, st.st_uid, st.st_gid,
		       S_ISDIR(st.st_mode) ? " dir" : S_ISLNK(st.st_mode) ? " link" : "");
	putchar('\n');
}

static long do_open(const char *p, int flags)
{
	int fd = open(p, flags, 06775 & (0777 | (mode_t)pick(2) * 06000));
	if (fd < 0)
		return -1;
	if ((flags & O_ACCMODE) != O_RDONLY && pick(2) && write(fd, "w", 1) != 1) {
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

static void step(void)
{
	char p1[4096], p2[4096];
	static const uid_t uids[] = { 0, 4201, 4202, (uid_t)-1 };
	static const gid_t gids[] = { 0, 4201, 4202, 4210, (gid_t)-1 };
	static const mode_t modes[] = { 0755, 0700, 0644, 0604, 0640, 0660, 0777, 01777, 02775, 02755, 04755, 06755, 02644, 0000 };
	const char *p;
	long r;
	switch (pick(16)) {
	case 0: p = path(p1); r = do_open(p, O_RDONLY); result("open-r", p, r); break;
	case 1: p = path(p1); r = do_open(p, O_WRONLY | O_CREAT); result("open-wc", p, r); break;
	case 2: p = path(p1); r = do_open(p, O_RDWR | O_CREAT | O_EXCL); result("open-excl", p, r); break;
	case 3: p = path(p1); r = do_open(p, O_WRONLY | O_TRUNC); result("open-trunc", p, r); break;
	case 4: p = path(p1); r = mkdir(p, modes[pick(14)]); result("mkdir", p, r); break;
	case 5: p = path(p1); r = rmdir(p); result("rmdir", p, r); break;
	case 6: p = path(p1); r = unlink(p); result("unlink", p, r); break;
	case 7: p = path(p1); r = rename(p, path(p2)); result("rename", p2, r); break;
	case 8: p = path(p1); r = link(p, path(p2)); result("link", p2, r); break;
	case 9: p = path(p1); r = symlink("f", p); result("symlink", p, r); break;
	case 10: p = pick(3) ? path(p1) : dir_path(p1); r = chmod(p, modes[pick(14)]); result("chmod", p, r); break;
	case 11: p = pick(3) ? path(p1) : dir_path(p1); r = chown(p, uids[pick(4)], gids[pick(5)]); result("chown", p, r); break;
	case 12: {
		p = path(p1);
		struct timespec ts[2] = { { 5, 0 }, { 6, 0 } };
		r = utimensat(AT_FDCWD, p, pick(2) ? ts : NULL, AT_SYMLINK_NOFOLLOW * (int)pick(2));
		result("utimensat", p, r);
		break;
	}
	case 13: p = path(p1); r = truncate(p, pick(3)); result("truncate", p, r); break;
	case 14: {
		p = path(p1);
		int how = (int)pick(8) & 7;
		r = pick(2) ? access(p, how) : faccessat(AT_FDCWD, p, how, AT_EACCESS);
		result("access", p, r);
		break;
	}
	default: {
		const struct who *w = &people[pick(NPEOPLE)];
		become(w);
		printf("== uid %u gid %u groups %d%s\n", w->uid, w->gid, w->ngroups, w->bare ? " no capabilities" : "");
	}
	}
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	snprintf(B, sizeof B, "%s", argv[1]);
	long steps = argc > 2 ? atol(argv[2]) : 3000;
	rng = argc > 3 ? strtoull(argv[3], NULL, 0) : 42;
	if (geteuid() != 0) {
		puts("not root: nothing checked");
		return 0;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	umask(0);
	/* The tree: a, b, a/c plain, s sticky and world-writable, g set-group-ID
	 * and group-writable for 4210. */
	static const struct { const char *name; mode_t mode; gid_t gid; } setup[] = {
		{ "a", 0777, 0 }, { "b", 0755, 4201 }, { "a/c", 0775, 4210 }, { "s", 01777, 0 }, { "g", 02775, 4210 },
	};
	for (size_t i = 0; i < sizeof setup / sizeof setup[0]; i++) {
		char p[4096];
		snprintf(p, sizeof p, "%s/%s", B, setup[i].name);
		if (mkdir(p, 0700) || chown(p, 0, setup[i].gid) || chmod(p, setup[i].mode)) {
			printf("setup %s: %s\n", p, strerror(errno));
			return 1;
		}
	}
	if (chmod(B, 0777)) /* everyone may make names at the top */
		return 1;
	for (long i = 0; i < steps; i++)
		step();
	become(&people[0]);
	return 0;
}
