/* notify_fork.c — an inotify instance whose process forks and exits, as a
 * daemon does once its watches are set up (inotifywait -d): the child goes
 * on reading the events of the watches made before the fork, and adds and
 * removes watches of its own.  Usage: notify_fork BASE; the output must be
 * the same on tmpfs and on kura. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The next event, printed; waits two seconds at most. */
static void next_event(int in, int wd_a, int wd_b)
{
	struct pollfd pf = { .fd = in, .events = POLLIN };
	if (poll(&pf, 1, 2000) != 1) {
		printf("no event\n");
		return;
	}
	char buf[4096] __attribute__((aligned(8)));
	ssize_t n = read(in, buf, sizeof buf);
	if (n <= 0) {
		printf("read %zd %s\n", n, n < 0 ? strerrorname_np(errno) : "");
		return;
	}
	const struct inotify_event *e = (const void *)buf;
	printf("event on %s: %#x %s\n", e->wd == wd_a ? "a" : e->wd == wd_b ? "b" : "?", e->mask,
	       e->len ? e->name : "");
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	char a[4096], b[4096], f[4096];
	snprintf(a, sizeof a, "%s/a", argv[1]);
	snprintf(b, sizeof b, "%s/b", argv[1]);
	if (mkdir(a, 0755) || mkdir(b, 0755))
		return 1;
	int in = inotify_init1(IN_CLOEXEC);
	int wd_a = inotify_add_watch(in, a, IN_CREATE | IN_DELETE);
	printf("watch a: %s\n", wd_a > 0 ? "made" : strerrorname_np(errno));
	fflush(stdout);
	/* Made before the fork: the parent may be gone before the child runs. */
	int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (fork() != 0)
		_exit(0); /* the daemon's parent */
	/* The child: on once its parent has ended. */
	struct pollfd pf = { .fd = pidfd, .events = POLLIN };
	if (pidfd < 0 || poll(&pf, 1, 5000) != 1) {
		printf("the parent did not end\n");
		return 1;
	}
	snprintf(f, sizeof f, "%s/made-after", a);
	close(open(f, O_CREAT | O_WRONLY, 0644));
	next_event(in, wd_a, -1);
	int wd_b = inotify_add_watch(in, b, IN_CREATE);
	printf("watch b from the child: %s\n", wd_b > 0 ? "made" : strerrorname_np(errno));
	snprintf(f, sizeof f, "%s/in-b", b);
	close(open(f, O_CREAT | O_WRONLY, 0644));
	next_event(in, wd_a, wd_b);
	snprintf(f, sizeof f, "%s/made-after", a);
	unlink(f);
	next_event(in, wd_a, wd_b);
	printf("rm watch a: %d\n", inotify_rm_watch(in, wd_a));
	next_event(in, wd_a, wd_b);
	return 0;
}
