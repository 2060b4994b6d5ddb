/* calls.c — call-level checks for the interposition layer.
 * Usage: calls SECTION BASE.  Prints one line per observation; the test
 * compares the output on a tmpfs directory with the output under the kura
 * prefix (BASE replaced by a placeholder), so only portable facts are
 * printed: sizes, contents, errno names, flags. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static char B[4096];
static char *P(const char *rel)
{
	static char buf[8][4096];
	static int i;
	char *b = buf[i++ % 8];
	snprintf(b, 4096, "%.2000s/%s", B, rel);
	return b;
}
#define SHOW(label, expr)                                                              \
	do {                                                                           \
		errno = 0;                                                             \
		long r_ = (long)(expr);                                                \
		printf("%s = %ld%s%s\n", label, r_ < 0 ? -1L : r_, r_ < 0 ? " " : "", \
		       r_ < 0 ? strerrorname_np(errno) : "");                          \
	} while (0)

static void files(void)
{
	int fd = open(P("f"), O_CREAT | O_RDWR | O_TRUNC, 0644);
	SHOW("open", fd >= 0);
	SHOW("write", write(fd, "hello world", 11));
	char b[64] = { 0 };
	SHOW("pread", pread(fd, b, 5, 6));
	printf("data %s\n", b);
	SHOW("lseek end", lseek(fd, 0, SEEK_END));
	SHOW("lseek hole", lseek(fd, 100, SEEK_SET));
	SHOW("write2", write(fd, "X", 1));
	struct stat st;
	fstat(fd, &st);
	printf("size %ld mode %o reg %d\n", (long)st.st_size, st.st_mode & 07777, S_ISREG(st.st_mode));
	struct iovec iov[2] = { { "ab", 2 }, { "cd", 2 } };
	SHOW("pwritev", pwritev(fd, iov, 2, 0));
	char x1[3] = { 0 }, x2[3] = { 0 };
	struct iovec rv[2] = { { x1, 2 }, { x2, 2 } };
	SHOW("preadv", preadv(fd, rv, 2, 0));
	printf("iov %s %s\n", x1, x2);
	SHOW("ftruncate", ftruncate(fd, 4));
	fstat(fd, &st);
	printf("size %ld\n", (long)st.st_size);
	int d = dup(fd);
	SHOW("dup ok", d > fd);
	lseek(fd, 1, SEEK_SET);
	SHOW("shared offset", lseek(d, 0, SEEK_CUR));
	SHOW("dup2", dup2(fd, 50));
	SHOW("fd 50 offset", lseek(50, 0, SEEK_CUR));
	SHOW("F_DUPFD", fcntl(fd, F_DUPFD, 60));
	SHOW("F_DUPFD_CLOEXEC getfd", fcntl(fcntl(fd, F_DUPFD_CLOEXEC, 70), F_GETFD));
	SHOW("getfl accmode", fcntl(fd, F_GETFL) & O_ACCMODE);
	SHOW("setfl append", fcntl(fd, F_SETFL, O_APPEND));
	SHOW("getfl append", !!(fcntl(d, F_GETFL) & O_APPEND));
	SHOW("append write", write(fd, "Z", 1));
	SHOW("append pos", lseek(fd, 0, SEEK_CUR));
	SHOW("close 50", close(50));
	SHOW("close 50 again", close(50));
	SHOW("lowest fd reuse", (close(d), open(P("f"), O_RDONLY)) == d);
	SHOW("excl", open(P("f"), O_CREAT | O_EXCL | O_WRONLY, 0644));
	SHOW("directory on file", open(P("f"), O_RDONLY | O_DIRECTORY));
	SHOW("symlink", symlink("f", P("l")));
	SHOW("nofollow", open(P("l"), O_RDONLY | O_NOFOLLOW));
	SHOW("trunc", open(P("l"), O_WRONLY | O_TRUNC) >= 0);
	stat(P("f"), &st);
	printf("after trunc %ld\n", (long)st.st_size);
	SHOW("cloexec flag", fcntl(open(P("f"), O_RDONLY | O_CLOEXEC), F_GETFD));
	SHOW("read on wronly", read(open(P("f"), O_WRONLY), b, 1));
	SHOW("write on rdonly", write(open(P("f"), O_RDONLY), b, 1));
	SHOW("enoent", open(P("nope/x"), O_RDONLY));
	SHOW("fsync", fsync(fd));
	SHOW("fdatasync", fdatasync(fd));
	SHOW("posix_fallocate", posix_fallocate(fd, 0, 8192));
	fstat(fd, &st);
	printf("after fallocate %ld\n", (long)st.st_size);
	/* copies in and out */
	int h = open("/proc/self/exe", O_RDONLY);
	off_t o = 0;
	int c = open(P("copy"), O_CREAT | O_WRONLY | O_TRUNC, 0600);
	SHOW("sendfile in", sendfile(c, h, &o, 1000));
	loff_t oi = 0;
	int c2 = open(P("copy2"), O_CREAT | O_WRONLY | O_TRUNC, 0600);
	int c1 = open(P("copy"), O_RDONLY);
	SHOW("copy_file_range", copy_file_range(c1, &oi, c2, NULL, 5000, 0));
	fstat(c2, &st);
	printf("copy2 size %ld\n", (long)st.st_size);
}

static int cmpstr(const void *a, const void *b) { return strcmp(*(char **)a, *(char **)b); }

static int walk_cb(const char *p, const struct stat *st, int type, struct FTW *f)
{
	(void)st;
	printf("nftw %s type %d level %d base %s\n", p + strlen(B), type, f->level, p + f->base);
	return 0;
}

static void dirs(void)
{
	mkdir(P("d"), 0755);
	mkdir(P("d/sub"), 0755);
	for (int i = 0; i < 5; i++) {
		char n[32];
		snprintf(n, sizeof n, "d/file%d", i);
		close(open(P(n), O_CREAT | O_WRONLY, 0644));
	}
	DIR *d = opendir(P("d"));
	char *names[32];
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		names[n++] = strdup(e->d_name);
	qsort(names, (size_t)n, sizeof *names, cmpstr);
	for (int i = 0; i < n; i++)
		printf("readdir %s\n", names[i]);
	rewinddir(d);
	int again = 0;
	while (readdir(d))
		again++;
	printf("after rewind %d\n", again);
	SHOW("dirfd valid", fcntl(dirfd(d), F_GETFD) >= 0);
	closedir(d);
	struct dirent **list;
	n = scandir(P("d"), &list, NULL, alphasort);
	for (int i = 0; i < n; i++)
		printf("scandir %s\n", list[i]->d_name);
	int fd = open(P("d"), O_RDONLY | O_DIRECTORY);
	DIR *fdd = fdopendir(fd);
	int cnt = 0;
	while (readdir(fdd))
		cnt++;
	printf("fdopendir count %d\n", cnt);
	closedir(fdd);
	glob_t g;
	SHOW("glob", glob(P("d/file[1-3]"), 0, NULL, &g));
	for (size_t i = 0; i < g.gl_pathc; i++)
		printf("glob %s\n", g.gl_pathv[i] + strlen(B));
	globfree(&g);
	/* nftw with a sorted tree: one file per directory keeps the order fixed */
	mkdir(P("w"), 0755);
	mkdir(P("w/a"), 0755);
	close(open(P("w/a/x"), O_CREAT | O_WRONLY, 0644));
	SHOW("nftw", nftw(P("w"), walk_cb, 8, FTW_PHYS));
	SHOW("rmdir nonempty", rmdir(P("d")));
	SHOW("unlink dir", unlink(P("d/sub")));
	SHOW("rmdir", rmdir(P("d/sub")));
	SHOW("getdents count>0", ({
		     int f = open(P("d"), O_RDONLY | O_DIRECTORY);
		     char buf[4096];
		     long tot = 0, r;
		     while ((r = getdents64(f, buf, sizeof buf)) > 0)
			     for (long off = 0; off < r; off += ((unsigned short *)(buf + off + 16))[0])
				     tot++;
		     close(f);
		     tot;
	     }));
}

static void paths(void)
{
	char cwd[4096];
	mkdir(P("p"), 0755);
	mkdir(P("p/q"), 0755);
	SHOW("chdir", chdir(P("p")));
	printf("getcwd %s\n", getcwd(cwd, sizeof cwd) + strlen(B));
	SHOW("rel create", close(open("q/r", O_CREAT | O_WRONLY, 0644)));
	SHOW("rel stat", access("q/r", F_OK));
	SHOW("dotdot", access("../p/q/./r", F_OK));
	SHOW("chdir q", chdir("q"));
	printf("getcwd %s\n", getcwd(cwd, sizeof cwd) + strlen(B));
	char *rp = realpath("../q/r", NULL);
	printf("realpath %s\n", rp ? rp + strlen(B) : "NULL");
	SHOW("leave prefix", access("/proc/self/../self/status", F_OK));
	int dfd = open(P("p"), O_RDONLY | O_DIRECTORY);
	SHOW("openat", close(openat(dfd, "q/r", O_RDONLY)));
	SHOW("mkdirat", mkdirat(dfd, "m", 0700));
	struct stat st;
	SHOW("fstatat", fstatat(dfd, "m", &st, 0));
	printf("m mode %o\n", st.st_mode & 07777);
	SHOW("renameat", renameat(dfd, "m", dfd, "m2"));
	SHOW("unlinkat dir", unlinkat(dfd, "m2", AT_REMOVEDIR));
	SHOW("fchdir", fchdir(dfd));
	printf("getcwd %s\n", getcwd(cwd, sizeof cwd) + strlen(B));
	int f = open("q/r", O_RDWR);
	write(f, "abc", 3);
	char link[64];
	snprintf(link, sizeof link, "/proc/self/fd/%d", f);
	int g = open(link, O_RDONLY);
	char b[8] = { 0 };
	SHOW("proc fd read", pread(g, b, 3, 0));
	printf("proc fd data %s\n", b);
	snprintf(link, sizeof link, "/dev/fd/%d", f);
	SHOW("dev fd stat size", (stat(link, &st), st.st_size));
	SHOW("symlink rel", symlink("q/r", "lnk"));
	ssize_t n = readlink("lnk", b, sizeof b);
	printf("readlink %.*s\n", (int)n, b);
	SHOW("link", link == NULL ? 0 : linkat(AT_FDCWD, "q/r", AT_FDCWD, "hard", 0));
	SHOW("nlink", (stat("hard", &st), st.st_nlink));
	SHOW("rename", rename("hard", "hard2"));
	SHOW("exdev", rename("hard2", "/tmp/kura-test-exdev"));
	SHOW("chmod", chmod("hard2", 0600));
	SHOW("mode", (stat("hard2", &st), st.st_mode & 07777));
	struct timespec ts[2] = { { 1000, 5 }, { 2000, 7 } };
	SHOW("utimensat", utimensat(AT_FDCWD, "hard2", ts, 0));
	SHOW("mtime", (stat("hard2", &st), st.st_mtim.tv_sec * 10 + st.st_mtim.tv_nsec));
	SHOW("truncate", truncate("hard2", 10));
	SHOW("size", (stat("hard2", &st), st.st_size));
	struct statx sx;
	SHOW("statx", statx(AT_FDCWD, "hard2", 0, STATX_BASIC_STATS, &sx));
	printf("statx size %llu\n", (unsigned long long)sx.stx_size);
	char tmpl[64] = "tmpXXXXXX";
	SHOW("mkstemp", mkstemp(tmpl) >= 0);
	SHOW("mkstemp exists", access(tmpl, F_OK));
	char dtmpl[64] = "dirXXXXXX";
	SHOW("mkdtemp", mkdtemp(dtmpl) != NULL);
	SHOW("mkdtemp dir", (stat(dtmpl, &st), S_ISDIR(st.st_mode)));
	struct statvfs sv;
	SHOW("statvfs", statvfs(".", &sv));
	SHOW("remove", remove("hard2"));
	SHOW("chdir out", chdir("/"));
	printf("getcwd %s\n", getcwd(cwd, sizeof cwd));
}

static void stdio_(void)
{
	FILE *f = fopen(P("s"), "w");
	fprintf(f, "line1\nline2\n");
	SHOW("ftell", ftell(f));
	SHOW("fstat fileno", ({ struct stat st; fflush(f); fstat(fileno(f), &st); st.st_size; }));
	fclose(f);
	f = fopen(P("s"), "a");
	fputs("line3\n", f);
	fclose(f);
	f = fopen(P("s"), "r");
	char *line = NULL;
	size_t cap = 0;
	while (getline(&line, &cap, f) > 0)
		printf("got %s", line);
	SHOW("fseek", fseek(f, 2, SEEK_SET));
	SHOW("fgetc", fgetc(f));
	fclose(f);
	SHOW("fopen x", fopen(P("s"), "wx") != NULL);
	int fd = open(P("s"), O_RDONLY);
	f = fdopen(fd, "r");
	SHOW("fdopen fileno", fileno(f) == fd);
	fclose(f);
	SHOW("fd closed by fclose", fcntl(fd, F_GETFD));
	fflush(stdout);
	FILE *o = freopen(P("redir"), "w", stdout);
	printf("into file\n");
	fflush(stdout);
	(void)o;
	int tty = open("/dev/tty", O_WRONLY);
	(void)tty;
	freopen("/dev/null", "w", stdout);
	dup2(2, 1);
	FILE *r = fopen(P("redir"), "r");
	char buf[64] = { 0 };
	fgets(buf, sizeof buf, r);
	fprintf(stderr, "redir read %s", buf);
}

static void locks(void)
{
	int fd = open(P("lk"), O_CREAT | O_RDWR, 0644);
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10 };
	SHOW("setlk", fcntl(fd, F_SETLK, &fl));
	int fd2 = open(P("lk"), O_RDWR);
	SHOW("same process relock", fcntl(fd2, F_SETLK, &fl));
	/* One pipe each way: with a single pipe the parent could read back its
	 * own wake-up byte before the child took it. */
	int up[2], down[2];
	if (pipe(up) || pipe(down))
		return;
	pid_t c = fork();
	if (c == 0) {
		int cf = open(P("lk"), O_RDWR);
		struct flock t = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 1 };
		int r = fcntl(cf, F_SETLK, &t);
		int e = errno;
		struct flock q = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
		fcntl(cf, F_GETLK, &q);
		char msg[128];
		int n = snprintf(msg, sizeof msg, "child setlk %d %s getlk type %d start %ld len %ld pidok %d\n", r,
				 r ? strerrorname_np(e) : "", q.l_type, (long)q.l_start, (long)q.l_len,
				 q.l_pid == getppid());
		struct flock t2 = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 10, .l_len = 5 };
		n += snprintf(msg + n, sizeof msg - (size_t)n, "child beyond %d\n", fcntl(cf, F_SETLK, &t2));
		write(up[1], msg, (size_t)n);
		/* wait for the parent to close fd2, which drops all its locks */
		char z;
		read(down[0], &z, 1);
		n = snprintf(msg, sizeof msg, "child after close %d\n", fcntl(cf, F_SETLK, &t));
		write(up[1], msg, (size_t)n);
		_exit(0);
	}
	char buf[256];
	ssize_t n = read(up[0], buf, sizeof buf);
	fwrite(buf, 1, (size_t)n, stdout);
	close(fd2); /* POSIX: drops the process's locks on the file */
	write(down[1], "x", 1);
	n = read(up[0], buf, sizeof buf);
	fwrite(buf, 1, (size_t)n, stdout);
	waitpid(c, NULL, 0);
	/* flock: two opens conflict even in one process */
	int a = open(P("fl"), O_CREAT | O_RDWR, 0644), b = open(P("fl"), O_RDWR);
	SHOW("flock ex", flock(a, LOCK_EX | LOCK_NB));
	SHOW("flock other open", flock(b, LOCK_EX | LOCK_NB));
	SHOW("flock sh other", flock(b, LOCK_SH | LOCK_NB));
	int ad = dup(a);
	SHOW("flock via dup", flock(ad, LOCK_EX | LOCK_NB));
	SHOW("unlock", flock(a, LOCK_UN));
	SHOW("flock other now", flock(b, LOCK_EX | LOCK_NB));
	/* OFD locks: per open, even in one process */
	struct flock o = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
	int oa = open(P("ofd"), O_CREAT | O_RDWR, 0644), ob = open(P("ofd"), O_RDWR);
	SHOW("ofd a", fcntl(oa, F_OFD_SETLK, &o));
	o.l_pid = 0;
	SHOW("ofd b", fcntl(ob, F_OFD_SETLK, &o));
	o.l_pid = 0;
	SHOW("ofd getlk b", (fcntl(ob, F_OFD_GETLK, &o), o.l_type));
	SHOW("lockf", lockf(oa, F_TLOCK, 0));
	SHOW("lockf test", lockf(ob, F_TEST, 0));
}

static void procs(void)
{
	int fd = open(P("shared"), O_CREAT | O_RDWR | O_TRUNC, 0644);
	write(fd, "parent\n", 7);
	pid_t c = fork();
	if (c == 0) {
		write(fd, "child\n", 6);
		_exit(0);
	}
	waitpid(c, NULL, 0);
	SHOW("offset after child", lseek(fd, 0, SEEK_CUR));
	c = vfork();
	if (c == 0) {
		dup2(fd, 1);
		execlp("echo", "echo", "from-exec", (char *)NULL);
		_exit(127);
	}
	waitpid(c, NULL, 0);
	SHOW("offset after exec", lseek(fd, 0, SEEK_CUR));
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fd, 1);
	char *argv[] = { "echo", "spawned", NULL };
	pid_t sp;
	SHOW("posix_spawnp", posix_spawnp(&sp, "echo", &fa, NULL, argv, environ));
	waitpid(sp, NULL, 0);
	SHOW("offset after spawn", lseek(fd, 0, SEEK_CUR));
	posix_spawn_file_actions_destroy(&fa);
	chdir(B);
	fflush(stdout);
	SHOW("system", system("echo sys >> shared; cat shared > copy-of-shared"));
	FILE *pp = popen("cat shared", "r");
	char buf[256];
	while (fgets(buf, sizeof buf, pp))
		printf("popen %s", buf);
	SHOW("pclose", pclose(pp));
	char *envp[] = { "PATH=/usr/bin:/bin", NULL };
	c = fork();
	if (c == 0) {
		int o = open("envless", O_CREAT | O_WRONLY | O_TRUNC, 0644);
		dup2(o, 1);
		execle("/bin/sh", "sh", "-c", "pwd; cat shared | wc -l", (char *)NULL, envp);
		_exit(127);
	}
	waitpid(c, NULL, 0);
	FILE *e = fopen("envless", "r");
	while (fgets(buf, sizeof buf, e))
		printf("envless %s", strncmp(buf, B, strlen(B)) == 0 ? buf + strlen(B) : buf);
	fclose(e);
	chdir("/");
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	snprintf(B, sizeof B, "%s", argv[2]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[1], "files"))
		files();
	else if (!strcmp(argv[1], "dirs"))
		dirs();
	else if (!strcmp(argv[1], "paths"))
		paths();
	else if (!strcmp(argv[1], "stdio"))
		stdio_();
	else if (!strcmp(argv[1], "locks"))
		locks();
	else if (!strcmp(argv[1], "procs"))
		procs();
	else if (!strcmp(argv[1], "mmap")) {
		int fd = open(P("m"), O_CREAT | O_RDWR, 0644);
		ftruncate(fd, 4096);
		void *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
		printf("mmap %s\n", p == MAP_FAILED ? strerrorname_np(errno) : "mapped");
	} else
		return 2;
	return 0;
}
