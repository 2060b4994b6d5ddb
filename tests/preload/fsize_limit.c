/* fsize_limit.c — RLIMIT_FSIZE (ulimit -f) on files: a write that would
 * start at or past the limit fails with EFBIG and sends SIGXFSZ, one that
 * crosses it is cut short (no signal); truncate and fallocate that would
 * grow a file past it fail the same way; a forked child and an exec'd
 * image keep the limit, and raising it lifts it.  Usage: fsize_limit BASE;
 * the output must be the same on tmpfs and on kura. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define LIMIT 10000

static volatile sig_atomic_t signals;
static char buf[16384];
static char path[4096];

static void on_xfsz(int sig)
{
	(void)sig;
	signals++;
}

/* Each call's result, errno and how many SIGXFSZ came since the last. */
static void said(const char *what, long r)
{
	int e = errno;
	printf("%-36s %ld %s signals %d\n", what, r, r < 0 ? strerrorname_np(e) : "", (int)signals);
	signals = 0;
}

static void size_is(const char *what, int fd)
{
	struct stat st;
	fstat(fd, &st);
	printf("%-36s size %lld\n", what, (long long)st.st_size);
}

static int set_limit(rlim_t soft)
{
	struct rlimit rl;
	getrlimit(RLIMIT_FSIZE, &rl);
	rl.rlim_cur = soft;
	return setrlimit(RLIMIT_FSIZE, &rl);
}

static int fresh(const char *name, int flags)
{
	snprintf(path, sizeof path, "%s", name);
	return open(path, O_CREAT | O_TRUNC | O_RDWR | flags, 0644);
}

static void writes(void)
{
	int fd = fresh("w", 0);
	said("write 8192", write(fd, buf, 8192));
	said("write 8192 across the limit", write(fd, buf, 8192));
	said("write at the limit", write(fd, buf, 10));
	said("write of nothing at the limit", write(fd, buf, 0));
	size_is("after the writes", fd);
	said("pwrite across the limit", pwrite(fd, buf, 100, LIMIT - 40));
	said("pwrite at the limit", pwrite(fd, buf, 100, LIMIT));
	said("pwrite past the limit", pwrite(fd, buf, 1, LIMIT + 5000));
	said("pwrite below the limit", pwrite(fd, buf, 100, 0));
	close(fd);

	fd = fresh("a", O_APPEND);
	said("append 9990", write(fd, buf, 9990));
	said("append across the limit", write(fd, buf, 100));
	said("append at the limit", write(fd, buf, 1));
	said("pwrite below it, appending", pwrite(fd, buf, 1, 0));
	size_is("appended", fd);
	close(fd);

	fd = fresh("v", 0);
	struct iovec iov[3] = { { buf, 4000 }, { buf, 4000 }, { buf, 4000 } };
	said("writev across the limit", writev(fd, iov, 3));
	said("writev at the limit", writev(fd, iov, 3));
	said("pwritev across the limit", pwritev(fd, iov, 3, 5000));
	struct iovec big[2] = { { malloc(70000), 70000 }, { buf, 10 } };
	memset(big[0].iov_base, 'b', 70000);
	said("big pwritev across the limit", pwritev(fd, big, 2, 100));
	said("big pwritev at the limit", pwritev(fd, big, 2, LIMIT));
	free(big[0].iov_base);
	size_is("after the vectors", fd);
	close(fd);
}

static void sizes(void)
{
	int fd = fresh("t", 0);
	said("ftruncate to the limit", ftruncate(fd, LIMIT));
	said("ftruncate above the limit", ftruncate(fd, LIMIT + 1));
	said("truncate above the limit", truncate(path, LIMIT + 4096));
	said("truncate below the limit", truncate(path, 100));
	said("fallocate to the limit", fallocate(fd, 0, 0, LIMIT));
	said("fallocate past the limit", fallocate(fd, 0, 4096, LIMIT));
	said("fallocate past it, keep size", fallocate(fd, FALLOC_FL_KEEP_SIZE, 4096, LIMIT));
	said("posix_fallocate past the limit", -posix_fallocate(fd, 0, LIMIT + 1));
	size_is("after the sizes", fd);
	/* A file already past the limit (made while it was higher) may be
	 * cut, or "grown" to no more than it has. */
	said("raise the limit", set_limit(LIMIT * 4));
	said("write past the old limit", pwrite(fd, buf, 100, LIMIT * 2));
	said("lower it again", set_limit(LIMIT));
	said("ftruncate down, still above it", ftruncate(fd, LIMIT + 50));
	said("fallocate inside the big file", fallocate(fd, 0, 0, LIMIT + 50));
	size_is("the big file", fd);
	close(fd);
}

static void copies(void)
{
	int in = fresh("src", 0);
	said("source 8192", write(in, buf, 8192));
	close(in);
	in = open(path, O_RDONLY);
	int out = fresh("cp", 0);
	said("write 8000 to the copy", write(out, buf, 8000));
	loff_t ioff = 0;
	said("copy_file_range across the limit", copy_file_range(in, &ioff, out, NULL, 8192, 0));
	said("copy_file_range at the limit", copy_file_range(in, &ioff, out, NULL, 100, 0));
	printf("%-36s %lld\n", "input offset", (long long)ioff);
	close(out);
	out = fresh("sf", 0);
	said("write 8000 to the sent", write(out, buf, 8000));
	said("sendfile across the limit", sendfile(out, in, NULL, 8192));
	said("input position", lseek(in, 0, SEEK_CUR));
	close(out);
	close(in);
}

static void streams(void)
{
	FILE *f = fopen("s", "w");
	if (!f)
		return;
	setvbuf(f, NULL, _IOFBF, 4096);
	for (int i = 0; i < 3; i++)
		fwrite(buf, 1, 4000, f);
	said("fflush across the limit", fflush(f));
	printf("%-36s %d\n", "ferror", ferror(f) != 0);
	fclose(f);
	struct stat st;
	stat("s", &st);
	printf("%-36s size %lld\n", "stream file", (long long)st.st_size);
}

static void child_and_exec(const char *self)
{
	int fd = fresh("c", 0);
	said("write 9999", write(fd, buf, 9999));
	fflush(stdout);
	pid_t c = fork();
	if (c == 0) {
		said("child writes across", write(fd, buf, 10));
		said("child writes at the limit", write(fd, buf, 10));
		fflush(stdout);
		_exit(0);
	}
	int st;
	waitpid(c, &st, 0);
	c = fork();
	if (c == 0) {
		signal(SIGXFSZ, SIG_DFL);
		write(fd, buf, 10);
		_exit(0);
	}
	waitpid(c, &st, 0);
	printf("%-36s %s\n", "child with SIGXFSZ's default",
	       WIFSIGNALED(st) && WTERMSIG(st) == SIGXFSZ ? "killed by SIGXFSZ" : "not killed");
	fflush(stdout);
	c = fork();
	if (c == 0) {
		char fdstr[16];
		snprintf(fdstr, sizeof fdstr, "%d", fd);
		execl(self, self, ".", "exec", fdstr, (char *)NULL);
		_exit(9);
	}
	waitpid(c, &st, 0);
	/* A caught signal is SIG_DFL after exec: it kills the image. */
	if (WIFSIGNALED(st))
		printf("%-36s killed by %s\n", "exec'd image", sigabbrev_np(WTERMSIG(st)));
	else
		printf("%-36s exit %d\n", "exec'd image", WEXITSTATUS(st));
	close(fd);
}

/* The image exec made: the limit is still there (SIGXFSZ ignored across
 * exec, as it was). */
static int exec_side(int fd)
{
	said("exec'd image writes at the limit", pwrite(fd, buf, 1, LIMIT));
	said("exec'd image writes across", pwrite(fd, buf, 10, LIMIT - 5));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (chdir(argv[1])) {
		perror(argv[1]);
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	memset(buf, 'x', sizeof buf);
	if (argc == 4 && !strcmp(argv[2], "exec"))
		return exec_side(atoi(argv[3]));

	said("limit", set_limit(LIMIT));
	signal(SIGXFSZ, SIG_IGN);
	printf("-- SIGXFSZ ignored\n");
	writes();
	sizes();
	signal(SIGXFSZ, on_xfsz);
	printf("-- SIGXFSZ caught\n");
	writes();
	sizes();
	copies();
	streams();
	child_and_exec("/proc/self/exe");
	signal(SIGXFSZ, SIG_IGN);
	child_and_exec("/proc/self/exe");

	/* prlimit on this process, and then no limit at all. */
	signal(SIGXFSZ, on_xfsz);
	struct rlimit rl = { LIMIT * 2, RLIM_INFINITY };
	said("prlimit raises it", prlimit(0, RLIMIT_FSIZE, &rl, NULL));
	int fd = fresh("p", 0);
	said("pwrite below the new limit", pwrite(fd, buf, 10, LIMIT * 2 - 10));
	said("pwrite at the new limit", pwrite(fd, buf, 10, LIMIT * 2));
	said("no limit", set_limit(RLIM_INFINITY));
	said("pwrite far out", pwrite(fd, buf, 10, LIMIT * 100));
	said("ftruncate far out", ftruncate(fd, LIMIT * 200));
	size_is("unlimited", fd);
	close(fd);
	return 0;
}
