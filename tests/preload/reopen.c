/* reopen.c — descriptors as files: opening /proc/self/fd/N (a new open file
 * description), descriptors surviving a failed exec, O_TMPFILE and naming
 * it with linkat.  Usage: reopen DIR.  Prints the same lines on any file
 * system with Linux semantics. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static const char *base;

static const char *en(int e)
{
	const char *n = strerrorname_np(e);
	return n ? n : "E?";
}

/* "ok" or the errno name of a call returning -1. */
static void show(const char *what, long r)
{
	if (r < 0)
		printf("%s: %s\n", what, en(errno));
	else
		printf("%s: ok\n", what);
}

static char *at(const char *name)
{
	static char b[4][4096];
	static int i;
	char *p = b[i++ % 4];
	snprintf(p, 4096, "%s/%s", base, name);
	return p;
}

static char *procfd(const char *fmt, int fd)
{
	static char b[64];
	snprintf(b, sizeof b, fmt, fd);
	return b;
}

static void put(const char *name, const char *data, mode_t mode)
{
	int fd = open(at(name), O_CREAT | O_WRONLY | O_TRUNC, mode);
	if (fd < 0 || write(fd, data, strlen(data)) != (ssize_t)strlen(data)) {
		printf("setup %s: %s\n", name, en(errno));
		exit(1);
	}
	close(fd);
	chmod(at(name), mode);
}

/* The path a descriptor shows, with the base directory as BASE (the test
 * harness replaces it) and an O_TMPFILE name's inode number masked. */
static void show_link(const char *what, const char *link)
{
	char t[4096];
	ssize_t n = readlink(link, t, sizeof t - 1);
	if (n < 0) {
		printf("%s: %s\n", what, en(errno));
		return;
	}
	t[n] = 0;
	char *h = strstr(t, "/#");
	if (h) {
		char *e = h + 2;
		while (*e >= '0' && *e <= '9')
			e++;
		memmove(h + 3, e, strlen(e) + 1);
		h[2] = 'N';
	}
	printf("%s: %s\n", what, t);
}

static long off(int fd)
{
	return (long)lseek(fd, 0, SEEK_CUR);
}

static void reopen(void)
{
	printf("== reopen\n");
	put("f", "0123456789", 0644);
	int fd = open(at("f"), O_RDWR);
	lseek(fd, 4, SEEK_SET);
	int r = open(procfd("/proc/self/fd/%d", fd), O_RDONLY);
	show("open /proc/self/fd/N", r);
	printf("offsets: new %ld, old %ld\n", off(r), off(fd));
	char b[32] = { 0 };
	printf("read new: %zd\n", read(r, b, 3));
	printf("offsets: new %ld, old %ld, data %s\n", off(r), off(fd), b);
	printf("access modes: new %d, old %d\n", fcntl(r, F_GETFL) & O_ACCMODE, fcntl(fd, F_GETFL) & O_ACCMODE);
	show("write to the O_RDONLY reopen", write(r, "x", 1));
	close(r);

	r = open(procfd("/dev/fd/%d", fd), O_WRONLY | O_APPEND);
	show("open /dev/fd/N O_APPEND", r);
	printf("append: %zd, O_APPEND new %d old %d\n", write(r, "ab", 2), !!(fcntl(r, F_GETFL) & O_APPEND),
	       !!(fcntl(fd, F_GETFL) & O_APPEND));
	printf("offsets: new %ld, old %ld\n", off(r), off(fd));
	show("read from the O_WRONLY reopen", read(r, b, 1));
	close(r);

	char pid_path[64];
	snprintf(pid_path, sizeof pid_path, "/proc/%d/fd/%d", (int)getpid(), fd);
	r = open(pid_path, O_RDONLY);
	show("open /proc/<pid>/fd/N", r);
	printf("offset %ld, pread %zd\n", off(r), pread(r, b, 12, 0));
	close(r);

	show("O_DIRECTORY", open(procfd("/proc/self/fd/%d", fd), O_RDONLY | O_DIRECTORY));
	show("O_CREAT|O_EXCL", open(procfd("/proc/self/fd/%d", fd), O_RDWR | O_CREAT | O_EXCL, 0644));
	show("O_NOFOLLOW", open(procfd("/proc/self/fd/%d", fd), O_RDONLY | O_NOFOLLOW));
	show_link("readlink", procfd("/proc/self/fd/%d", fd));

	/* O_TRUNC through the reopen empties the file for both. */
	r = open(procfd("/dev/fd/%d", fd), O_RDWR | O_TRUNC);
	struct stat st;
	fstat(fd, &st);
	printf("O_TRUNC: size %lld\n", (long long)st.st_size);
	printf("write %zd\n", write(r, "fresh", 5));
	close(r);

	/* Unlinked meanwhile: still opens, by the inode. */
	unlink(at("f"));
	r = open(procfd("/proc/self/fd/%d", fd), O_RDONLY);
	show("open of an unlinked file", r);
	memset(b, 0, sizeof b);
	fstat(r, &st);
	printf("read %zd '%s', nlink %lu\n", read(r, b, sizeof b - 1), b, (unsigned long)st.st_nlink);
	close(fd);
	memset(b, 0, sizeof b);
	printf("after the first close: pread %zd '%s'\n", pread(r, b, sizeof b - 1, 0), b);
	close(r);

	/* A directory. */
	mkdir(at("d"), 0755);
	int d = open(at("d"), O_RDONLY | O_DIRECTORY);
	show("dir O_RDONLY|O_DIRECTORY", r = open(procfd("/proc/self/fd/%d", d), O_RDONLY | O_DIRECTORY));
	close(r);
	show("dir O_RDWR", open(procfd("/proc/self/fd/%d", d), O_RDWR));
	show("openat through the reopened dir",
	     r = openat(open(procfd("/proc/self/fd/%d", d), O_RDONLY | O_DIRECTORY | O_CLOEXEC), "in",
			O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
	close(r);
	close(d);
	show("stat d/in", stat(at("d/in"), &st));

	/* /dev/stdin of a file on fd 0, in a child so our stdin stays. */
	put("in", "stdin-data", 0644);
	fflush(stdout);
	if (fork() == 0) {
		int i = open(at("in"), O_RDONLY);
		dup2(i, 0);
		close(i);
		lseek(0, 6, SEEK_SET);
		int s = open("/dev/stdin", O_RDONLY);
		memset(b, 0, sizeof b);
		long o = off(s);
		ssize_t n = read(s, b, 5);
		printf("/dev/stdin: offset %ld, read %zd '%s', fd 0 offset %ld\n", o, n, b, off(0));
		exit(0);
	}
	wait(NULL);
}

/* ---- failed exec ---- */

static int fd_c, fd_n; /* close-on-exec and inheritable descriptors of one file */

static void use_fds(const char *after)
{
	char b[16] = { 0 };
	int ok = lseek(fd_c, 0, SEEK_SET) == 0 && write(fd_c, after, 2) == 2 && pread(fd_n, b, 2, 0) == 2 &&
		 memcmp(b, after, 2) == 0 && (fcntl(fd_c, F_GETFD) & FD_CLOEXEC) && !(fcntl(fd_n, F_GETFD) & FD_CLOEXEC);
	printf("  fds after %s: %s\n", after, ok ? "work" : en(errno));
}

static void failed_exec(void)
{
	printf("== failed exec\n");
	put("data", "..........", 0644);
	put("noexec", "#!/bin/sh\necho no\n", 0644);
	put("garbage", "\x01\x02\x03 not a program\n", 0755);
	fd_c = open(at("data"), O_RDWR | O_CLOEXEC);
	fd_n = open(at("data"), O_RDWR);
	char *argv[] = { "x", NULL };
	setenv("PATH", "/usr/bin:/bin", 1); /* no unsearchable directory: ENOENT, not EACCES */
	show("execv missing", execv("/nonexistent/prog", argv));
	use_fds("e1");
	show("execv not executable", execv(at("noexec"), argv));
	use_fds("e2");
	show("execv not executable (host)", execv("/etc/passwd", argv));
	use_fds("e3");
	show("execv not a program", execv(at("garbage"), argv));
	use_fds("e4");
	show("execve missing", execve(at("missing"), argv, environ));
	use_fds("e5");
	show("execvp missing", execvp("no-such-program-kura-test", argv));
	use_fds("e6");
	show("execvpe not executable", execvpe(at("noexec"), argv, environ));
	use_fds("e7");
	show("execl missing", execl("/nonexistent/prog", "x", (char *)NULL));
	use_fds("e8");
	show("execlp missing", execlp("no-such-program-kura-test", "x", (char *)NULL));
	use_fds("e9");
	show("execle missing", execle("/nonexistent/prog", "x", (char *)NULL, environ));
	use_fds("ea");
	int ne = open(at("noexec"), O_RDONLY | O_CLOEXEC);
	show("fexecve not executable", fexecve(ne, argv, environ));
	close(ne);
	use_fds("eb");
	show("execveat missing", execveat(AT_FDCWD, at("missing"), argv, environ, 0));
	use_fds("ec");
	pid_t pid;
	int e = posix_spawn(&pid, "/nonexistent/prog", NULL, NULL, argv, environ);
	printf("posix_spawn missing: %s\n", e ? en(e) : "ok");
	use_fds("ed");
	e = posix_spawnp(&pid, "no-such-program-kura-test", NULL, NULL, argv, environ);
	printf("posix_spawnp missing: %s\n", e ? en(e) : "ok");
	use_fds("ee");
	e = posix_spawn(&pid, at("noexec"), NULL, NULL, argv, environ);
	printf("posix_spawn not executable: %s\n", e ? en(e) : "ok");
	use_fds("ef");

	/* A successful exec: the new image sees the inheritable descriptor by
	 * its path, not the close-on-exec one; the file stays ours. */
	unlink(at("data"));
	fflush(stdout);
	if (fork() == 0) {
		char n1[16], n2[16];
		snprintf(n1, sizeof n1, "%d", fd_n);
		snprintf(n2, sizeof n2, "%d", fd_c);
		execl("/proc/self/exe", "reopen", base, "child", n1, n2, (char *)NULL);
		_exit(127);
	}
	int status;
	wait(&status);
	printf("child status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	use_fds("ok");
	close(fd_c);
	close(fd_n);
}

/* The exec'd image's side of failed_exec. */
static int child(const char *n_inh, const char *n_cloexec)
{
	int fd = atoi(n_inh), fc = atoi(n_cloexec);
	char b[16] = { 0 };
	printf("child: inherited pread %zd '%s'\n", pread(fd, b, 2, 0), b);
	show_link("child: readlink", procfd("/proc/self/fd/%d", fd));
	show("child: close-on-exec fd", fcntl(fc, F_GETFD));
	return 0;
}

/* ---- O_TMPFILE ---- */

static void tmpfile_checks(void)
{
	printf("== O_TMPFILE\n");
	mkdir(at("t"), 0755);
	put("t/plain", "p", 0644);
	show("O_RDONLY", open(at("t"), O_TMPFILE | O_RDONLY, 0600));
	show("O_CREAT", open(at("t"), O_TMPFILE | O_CREAT | O_RDWR, 0600));
	show("on a file", open(at("t/plain"), O_TMPFILE | O_RDWR, 0600));
	show("missing", open(at("t/missing"), O_TMPFILE | O_RDWR, 0600));
	int t = open(at("t"), O_TMPFILE | O_RDWR, 0640);
	show("open", t);
	struct stat st;
	fstat(t, &st);
	printf("write %zd, mode %o, nlink %lu\n", write(t, "tmpdata", 7), st.st_mode, (unsigned long)st.st_nlink);
	show_link("readlink", procfd("/proc/self/fd/%d", t));
	int r = open(procfd("/proc/self/fd/%d", t), O_RDONLY);
	char b[16] = { 0 };
	printf("reopen: read %zd '%s'\n", read(r, b, 15), b);
	show("linkat /proc/self/fd AT_SYMLINK_FOLLOW",
	     linkat(AT_FDCWD, procfd("/proc/self/fd/%d", r), AT_FDCWD, at("t/named"), AT_SYMLINK_FOLLOW));
	close(r);
	memset(b, 0, sizeof b);
	show("stat named", stat(at("t/named"), &st));
	int n = open(at("t/named"), O_RDONLY);
	printf("named: nlink %lu size %lld mode %o read %zd '%s'\n", (unsigned long)st.st_nlink,
	       (long long)st.st_size, st.st_mode & 07777, read(n, b, 15), b);
	close(n);
	close(t);

	/* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH in Linux. */
	t = open(at("t"), O_TMPFILE | O_WRONLY, 0600);
	write(t, "e", 1);
	if (geteuid() == 0)
		show("linkat AT_EMPTY_PATH", linkat(t, "", AT_FDCWD, at("t/empty"), AT_EMPTY_PATH));
	else
		show("linkat AT_EMPTY_PATH", link(at("t/plain"), at("t/empty")));
	close(t);

	t = open(at("t"), O_TMPFILE | O_RDWR | O_EXCL, 0600);
	show("O_EXCL open", t);
	show("O_EXCL linkat", linkat(AT_FDCWD, procfd("/proc/self/fd/%d", t), AT_FDCWD, at("t/excl"),
				      AT_SYMLINK_FOLLOW));
	close(t);

	t = open(at("t"), O_TMPFILE | O_RDWR, 0600);
	write(t, "never named", 11);
	close(t);

	/* Through the directory's own /proc/self/fd entry. */
	int d = open(at("t"), O_RDONLY | O_DIRECTORY);
	t = open(procfd("/proc/self/fd/%d", d), O_TMPFILE | O_RDWR, 0600);
	show("O_TMPFILE on /proc/self/fd/DIR", t);
	write(t, "via", 3);
	show("linkat", linkat(AT_FDCWD, procfd("/proc/self/fd/%d", t), d, "via", AT_SYMLINK_FOLLOW));
	close(t);
	close(d);

	/* Linked once, unlinked: no second life. */
	t = open(at("t/named"), O_RDONLY);
	unlink(at("t/named"));
	show("relink an unlinked file", linkat(AT_FDCWD, procfd("/proc/self/fd/%d", t), AT_FDCWD, at("t/again"),
						AT_SYMLINK_FOLLOW));
	close(t);

	struct dirent **list;
	int k = scandir(at("t"), &list, NULL, alphasort);
	printf("listing:");
	for (int i = 0; i < k; i++) {
		printf(" %s", list[i]->d_name);
		free(list[i]);
	}
	printf("\n");
	free(list);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	base = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && !strcmp(argv[2], "child"))
		return child(argv[3], argv[4]);
	umask(022);
	reopen();
	failed_exec();
	tmpfile_checks();
	return 0;
}
