/* creds.c — permission checks and new files' owners after a program changes
 * its credentials at run time (seteuid, setresuid, setgroups, setfsuid,
 * threads, the raw system call), compared line by line with the kernel's
 * answers on tmpfs.  Usage: creds BASE.  Needs root; otherwise it says so
 * and checks nothing (both runs then print the same line). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define U1 4101
#define U2 4102
#define G1 4101     /* U1's own group */
#define GUSERS 4110 /* a group U1 may be a member of, as "users" */
#define GOTHER 4111

static char B[3000];
static char *P(const char *rel)
{
	static char buf[8][4096];
	static int i;
	char *b = buf[i++ % 8];
	snprintf(b, 4096, "%s/%s", B, rel);
	return b;
}

static void show(const char *label, long r)
{
	printf("%s = %ld%s%s\n", label, r < 0 ? -1L : r, r < 0 ? " " : "", r < 0 ? strerrorname_np(errno) : "");
}
#define SHOW(label, expr)                      \
	do {                                   \
		errno = 0;                     \
		show(label, (long)(expr));     \
	} while (0)

static int try_open(const char *p, int flags)
{
	int fd = open(p, flags, 0644);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	return -1;
}

static int try_create(const char *p, mode_t mode)
{
	int fd = open(p, O_CREAT | O_WRONLY, mode);
	if (fd >= 0)
		close(fd);
	return fd < 0 ? -1 : 0;
}

static void owner(const char *label, const char *p)
{
	struct stat st;
	if (lstat(p, &st) < 0)
		printf("%s: %s\n", label, strerrorname_np(errno));
	else
		printf("%s: uid %u gid %u mode %o\n", label, st.st_uid, st.st_gid, st.st_mode & 07777);
}

static void must(int ok, const char *what)
{
	if (!ok) {
		printf("setup failed: %s: %s\n", what, strerrorname_np(errno));
		exit(1);
	}
}

/* Becomes uid/gid with the given supplementary groups, the saved uid
 * staying 0 so that root() can come back. */
static void become(uid_t u, gid_t g, size_t n, const gid_t *groups)
{
	must(seteuid(0) == 0, "seteuid 0");
	must(setgroups(n, groups) == 0, "setgroups");
	must(setegid(g) == 0, "setegid");
	must(seteuid(u) == 0, "seteuid");
}

static void root(void)
{
	must(seteuid(0) == 0, "seteuid 0");
	must(setegid(0) == 0, "setegid 0");
	must(setgroups(0, NULL) == 0, "setgroups 0");
}

static void mkfile(const char *rel, mode_t mode, uid_t u, gid_t g, const char *data)
{
	int fd = open(P(rel), O_CREAT | O_WRONLY | O_TRUNC, 0600);
	must(fd >= 0, rel);
	if (data)
		must(write(fd, data, strlen(data)) == (ssize_t)strlen(data), "write");
	close(fd);
	must(chown(P(rel), u, g) == 0, "chown");
	must(chmod(P(rel), mode) == 0, "chmod");
}

static void mkdirectory(const char *rel, mode_t mode, uid_t u, gid_t g)
{
	must(mkdir(P(rel), 0700) == 0, rel);
	must(chown(P(rel), u, g) == 0, "chown");
	must(chmod(P(rel), mode) == 0, "chmod");
}

static void setup(void)
{
	mkfile("secret", 0600, 0, 0, "root only\n");
	mkdirectory("rootdir", 0755, 0, 0);
	mkfile("rootdir/victim", 0644, 0, 0, "v\n");
	mkdirectory("pub", 0777, 0, 0);
	mkdirectory("pub2", 0777, 0, 0);
	mkdirectory("sticky", 01777, 0, 0);
	mkfile("sticky/his", 0666, U2, U2, "his\n");
	mkfile("f0604", 0604, 0, GUSERS, "0604\n");
	mkfile("f0640", 0640, 0, GUSERS, "0640\n");
	mkfile("f0660", 0660, 0, GUSERS, "0660\n");
	mkdirectory("sgid", 02775, 0, GUSERS);
	mkdirectory("gdir", 0770, 0, GUSERS);
	mkfile("mine", 0644, U1, G1, "mine\n");
	mkfile("setid", 06755, U1, G1, "#!/bin/sh\n");
	mkfile("setid2", 06755, U1, GUSERS, "#!/bin/sh\n");
	mkfile("setgid-noexec", 02644, U1, G1, "x\n");
	mkfile("rootsuid", 04755, 0, 0, "x\n");
	mkdirectory("pub/rootsub", 0755, 0, 0);
	mkfile("pub/rootowned", 0666, 0, 0, "ro\n");
	mkfile("pub/unreadable", 0200, U2, U2, "u\n");
	mkdirectory("private", 0700, 0, 0);
	mkfile("private/f", 0644, 0, 0, "p\n");
	mkdirectory("noread", 0711, 0, 0);
	mkfile("noread/f", 0644, 0, 0, "n\n");
}

/* A walk's refusals come in the kernel's order: the search permission of a
 * directory before anything about the name looked up in it. */
static void walk_order(void)
{
	char longname[300], p[600];
	memset(longname, 'n', 256);
	longname[256] = 0;
	struct stat st;
	snprintf(p, sizeof p, "private/%s", longname);
	SHOW("stat too-long name in 0700 dir", stat(P(p), &st));
	SHOW("stat missing name in 0700 dir", stat(P("private/missing"), &st));
	SHOW("stat file in 0700 dir", stat(P("private/f"), &st));
	SHOW("create in 0700 dir", try_open(P("private/new"), O_CREAT | O_WRONLY));
	SHOW("rmdir . in 0700 dir", rmdir(P("private/.")));
	SHOW("stat file in 0711 dir", stat(P("noread/f"), &st));
	SHOW("list 0711 dir", try_open(P("noread"), O_RDONLY | O_DIRECTORY));
	SHOW("rename into 0700 dir", rename(P("mine"), P("private/mine")));
	SHOW("chdir 0700 dir", chdir(P("private")));
	SHOW("chdir 0711 dir", chdir(P("noread")));
	SHOW("read f relative to it", try_open("f", O_RDONLY));
	SHOW("chdir back", chdir(B));
	become(0, 0, 0, NULL);
	int d = open(P("private"), O_RDONLY | O_DIRECTORY);
	become(U1, G1, 0, NULL);
	SHOW("fchdir to a 0700 dir opened by root", fchdir(d));
	close(d);
	SHOW("chdir back", chdir(B));
}

static void as_nobody_no_groups(void)
{
	puts("== U1, no groups");
	become(U1, G1, 0, NULL);
	SHOW("read root 0600", try_open(P("secret"), O_RDONLY));
	SHOW("unlink in root 0755 dir", unlink(P("rootdir/victim")));
	SHOW("create in root 0755 dir", try_open(P("rootdir/new"), O_CREAT | O_WRONLY));
	SHOW("mkdir in root 0755 dir", mkdir(P("rootdir/d"), 0755));
	SHOW("rmdir root dir", rmdir(P("rootdir")));
	SHOW("rename out of root dir", rename(P("rootdir/victim"), P("pub/x")));
	SHOW("rename into root dir", rename(P("mine"), P("rootdir/mine")));
	SHOW("link out of root dir", link(P("rootdir/victim"), P("pub/l")));
	SHOW("link root-owned rw file", link(P("pub/rootowned"), P("pub/l2")));
	SHOW("link unreadable file", link(P("pub/unreadable"), P("pub/l3")));
	SHOW("link own file", link(P("mine"), P("pub/l4")));
	SHOW("symlink in root dir", symlink("x", P("rootdir/s")));
	SHOW("chmod root file", chmod(P("secret"), 0644));
	SHOW("chown root file to me", chown(P("secret"), U1, -1));
	SHOW("chown own file to U2", chown(P("mine"), U2, -1));
	SHOW("chown own file to own uid", chown(P("mine"), U1, -1));
	SHOW("chgrp own file to a stranger group", chown(P("mine"), -1, GOTHER));
	SHOW("chgrp own file to GUSERS (not member)", chown(P("mine"), -1, GUSERS));
	SHOW("chgrp own file to own group", chown(P("mine"), -1, G1));
	SHOW("chown -1 -1 root file", chown(P("pub/rootowned"), -1, -1));
	SHOW("chown -1 -1 root set-uid file", chown(P("rootsuid"), -1, -1));
	SHOW("read f0604 (other r)", try_open(P("f0604"), O_RDONLY));
	SHOW("read f0640", try_open(P("f0640"), O_RDONLY));
	SHOW("truncate root file", truncate(P("pub/rootowned"), 1));
	SHOW("truncate secret", truncate(P("secret"), 0));
	struct timespec ts[2] = { { 1, 0 }, { 2, 0 } };
	SHOW("utimensat explicit, not owner, writable", utimensat(AT_FDCWD, P("pub/rootowned"), ts, 0));
	SHOW("utimensat now, not owner, writable", utimensat(AT_FDCWD, P("pub/rootowned"), NULL, 0));
	struct timespec now_omit[2] = { { 0, UTIME_NOW }, { 0, UTIME_OMIT } };
	SHOW("utimensat now+omit, not owner", utimensat(AT_FDCWD, P("pub/rootowned"), now_omit, 0));
	SHOW("utimensat now, not owner, read-only", utimensat(AT_FDCWD, P("f0604"), NULL, 0));
	SHOW("utimensat explicit, owner", utimensat(AT_FDCWD, P("mine"), ts, 0));
	SHOW("O_NOATIME, not owner", try_open(P("pub/rootowned"), O_RDONLY | O_NOATIME));
	SHOW("O_NOATIME, owner", try_open(P("mine"), O_RDONLY | O_NOATIME));
	SHOW("rename root dir to other parent", rename(P("pub/rootsub"), P("pub2/rootsub")));
	SHOW("rename root dir in same parent", rename(P("pub/rootsub"), P("pub/rootsub2")));
	SHOW("rename back", rename(P("pub/rootsub2"), P("pub/rootsub")));
	SHOW("unlink in sticky, not owner", unlink(P("sticky/his")));
	SHOW("rename in sticky, not owner", rename(P("sticky/his"), P("sticky/mine")));
	SHOW("create in sticky", try_open(P("sticky/mine"), O_CREAT | O_WRONLY));
	owner("new in sticky", P("sticky/mine"));
	SHOW("unlink own in sticky", unlink(P("sticky/mine")));
	SHOW("create in pub", try_open(P("pub/byu1"), O_CREAT | O_WRONLY));
	owner("new file", P("pub/byu1"));
	SHOW("mkdir in pub", mkdir(P("pub/dbyu1"), 02755));
	owner("new dir", P("pub/dbyu1"));
	SHOW("symlink in pub", symlink("target", P("pub/sbyu1")));
	owner("new symlink", P("pub/sbyu1"));
	SHOW("chmod g+s, own file, not in group", chmod(P("pub/byu1"), 02755));
	owner("after chmod", P("pub/byu1"));
	SHOW("chmod g+s own, own group", chmod(P("mine"), 02644));
	owner("mine after chmod", P("mine"));
	SHOW("chmod back", chmod(P("mine"), 0644));
	/* Writes and truncation by a non-root owner drop set-id bits. */
	int fd = open(P("setid"), O_WRONLY | O_APPEND);
	SHOW("open setid", fd >= 0);
	SHOW("write setid", write(fd, "x", 1));
	close(fd);
	owner("setid after write", P("setid"));
	fd = open(P("setgid-noexec"), O_WRONLY);
	SHOW("write setgid-noexec", write(fd, "y", 1));
	close(fd);
	owner("setgid-noexec after write", P("setgid-noexec"));
	SHOW("chown own 06755 file to own ids", chown(P("setid2"), U1, -1));
	owner("setid2 after chown", P("setid2"));
	SHOW("access R secret (real uid 0)", access(P("secret"), R_OK));
	SHOW("faccessat AT_EACCESS R secret", faccessat(AT_FDCWD, P("secret"), R_OK, AT_EACCESS));
	SHOW("euidaccess R secret", euidaccess(P("secret"), R_OK));
	SHOW("access X on a 0644 file", access(P("mine"), X_OK));
	walk_order();
	root();
}

static void as_member_of_users(void)
{
	puts("== U1 in GUSERS");
	gid_t g[] = { GUSERS };
	become(U1, G1, 1, g);
	SHOW("read f0604 (group ---)", try_open(P("f0604"), O_RDONLY));
	SHOW("read f0640 (group r)", try_open(P("f0640"), O_RDONLY));
	SHOW("write f0640", try_open(P("f0640"), O_WRONLY));
	SHOW("write f0660", try_open(P("f0660"), O_WRONLY));
	SHOW("list gdir", try_open(P("gdir"), O_RDONLY | O_DIRECTORY));
	SHOW("create in gdir", try_open(P("gdir/f"), O_CREAT | O_WRONLY));
	owner("gdir/f", P("gdir/f"));
	SHOW("create in sgid dir", try_open(P("sgid/f"), O_CREAT | O_WRONLY));
	owner("sgid/f", P("sgid/f"));
	SHOW("mkdir in sgid dir", mkdir(P("sgid/d"), 0755));
	owner("sgid/d", P("sgid/d"));
	SHOW("create 02755 in sgid dir (member)", try_create(P("sgid/x"), 02755));
	owner("sgid/x", P("sgid/x"));
	SHOW("chgrp own file to GUSERS", chown(P("mine"), -1, GUSERS));
	owner("mine", P("mine"));
	SHOW("chgrp own file back", chown(P("mine"), -1, G1));
	SHOW("chmod g+s own file, member", chmod(P("pub/byu1"), 02755));
	owner("pub/byu1", P("pub/byu1"));
	int fd = open(P("setid2"), O_WRONLY | O_APPEND);
	SHOW("write setid2 (06755, member)", write(fd, "x", 1));
	close(fd);
	owner("setid2 after write", P("setid2"));
	root();
	puts("== U2 in GOTHER only, into the sgid dir");
	gid_t g2[] = { GOTHER };
	become(U2, U2, 1, g2);
	SHOW("create in sgid dir (not member)", try_open(P("sgid/y"), O_CREAT | O_WRONLY));
	root();
	SHOW("chmod sgid 0777", chmod(P("sgid"), 02777));
	become(U2, U2, 1, g2);
	SHOW("create 02755 in sgid dir (not member)", try_create(P("sgid/z"), 02755));
	owner("sgid/z", P("sgid/z"));
	SHOW("mkdir in sgid dir (not member)", mkdir(P("sgid/dz"), 0700));
	owner("sgid/dz", P("sgid/dz"));
	root();
}

static void with_setresuid(void)
{
	puts("== setresuid and setfsuid");
	must(setresgid(-1, G1, -1) == 0, "setresgid");
	must(setresuid(-1, U1, 0) == 0, "setresuid");
	SHOW("read secret", try_open(P("secret"), O_RDONLY));
	SHOW("create in pub", try_open(P("pub/byresuid"), O_CREAT | O_WRONLY));
	owner("pub/byresuid", P("pub/byresuid"));
	must(setresuid(-1, 0, -1) == 0, "setresuid back");
	must(setresgid(-1, 0, -1) == 0, "setresgid back");
	SHOW("read secret as root", try_open(P("secret"), O_RDONLY));
	setfsuid(U1);
	SHOW("read secret, fsuid U1", try_open(P("secret"), O_RDONLY));
	SHOW("create, fsuid U1", try_open(P("pub/byfsuid"), O_CREAT | O_WRONLY));
	owner("pub/byfsuid", P("pub/byfsuid"));
	setfsuid(0);
	SHOW("read secret, fsuid 0", try_open(P("secret"), O_RDONLY));
	setfsgid(GUSERS);
	SHOW("create, fsgid GUSERS", try_open(P("pub/byfsgid"), O_CREAT | O_WRONLY));
	owner("pub/byfsgid", P("pub/byfsgid"));
	setfsgid(0);
}

/* glibc applies seteuid to every thread; the raw system call to one. */
static pthread_barrier_t bar;
static void *other_thread(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&bar); /* main became U1 */
	SHOW("thread: read secret after main's seteuid", try_open(P("secret"), O_RDONLY));
	pthread_barrier_wait(&bar);
	pthread_barrier_wait(&bar); /* main is root again */
	SHOW("thread: read secret after main's seteuid(0)", try_open(P("secret"), O_RDONLY));
	pthread_barrier_wait(&bar);
	pthread_barrier_wait(&bar); /* main alone became U1 */
	SHOW("thread: read secret while main alone is U1", try_open(P("secret"), O_RDONLY));
	pthread_barrier_wait(&bar);
	return NULL;
}

static void with_threads(void)
{
	puts("== threads");
	pthread_t t;
	pthread_barrier_init(&bar, NULL, 2);
	pthread_create(&t, NULL, other_thread, NULL);
	must(seteuid(U1) == 0, "seteuid");
	pthread_barrier_wait(&bar);
	pthread_barrier_wait(&bar);
	SHOW("main: read secret as U1", try_open(P("secret"), O_RDONLY));
	must(seteuid(0) == 0, "seteuid 0");
	pthread_barrier_wait(&bar);
	pthread_barrier_wait(&bar);
	must(syscall(SYS_setresuid, -1, U1, -1) == 0, "raw setresuid");
	pthread_barrier_wait(&bar);
	pthread_barrier_wait(&bar);
	SHOW("main: read secret after raw setresuid", try_open(P("secret"), O_RDONLY));
	must(syscall(SYS_setresuid, -1, 0, -1) == 0, "raw setresuid back");
	SHOW("main: read secret after raw setresuid back", try_open(P("secret"), O_RDONLY));
	pthread_join(t, NULL);
}

/* A fresh image that drops root before it first touches BASE, as a
 * daemon does: the pool is still there for it. */
static void early_drop(void)
{
	gid_t g[] = { GUSERS };
	must(setgroups(1, g) == 0, "setgroups");
	must(setresgid(G1, G1, G1) == 0, "setresgid");
	must(setresuid(U1, U1, U1) == 0, "setresuid");
	puts("== a new image, U1 for good before its first access");
	SHOW("read root 0600", try_open(P("secret"), O_RDONLY));
	SHOW("read f0640 (member)", try_open(P("f0640"), O_RDONLY));
	SHOW("read f0604 (member)", try_open(P("f0604"), O_RDONLY));
	SHOW("create in root 0755 dir", try_open(P("rootdir/new2"), O_CREAT | O_WRONLY));
	SHOW("create in pub", try_open(P("pub/early"), O_CREAT | O_WRONLY));
	owner("pub/early", P("pub/early"));
	SHOW("unlink own", unlink(P("pub/early")));
	SHOW("back to root", setresuid(0, 0, 0));
}

static void run_early_drop(const char *self)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		execl(self, self, B, "early", (char *)NULL);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
	printf("early drop exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	snprintf(B, sizeof B, "%s", argv[1]);
	if (argc > 2 && !strcmp(argv[2], "early")) {
		setvbuf(stdout, NULL, _IOLBF, 0);
		early_drop();
		return 0;
	}
	if (geteuid() != 0) {
		puts("not root: nothing checked");
		return 0;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	umask(022);
	setup();
	as_nobody_no_groups();
	as_member_of_users();
	with_setresuid();
	with_threads();
	run_early_drop(argv[0]);
	return 0;
}
