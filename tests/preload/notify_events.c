/* inotify on a directory and a file in it while a second process (this
 * program run again with "ops") works on them: the events read back, with
 * the errors of inotify_add_watch/rm_watch.  The output must be the same on
 * tmpfs and under kura. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static char d[PATH_MAX], f[PATH_MAX];

static const char *P(const char *name)
{
	static char b[4][PATH_MAX];
	static int i;
	i = (i + 1) % 4;
	snprintf(b[i], sizeof b[i], "%s/%s", d, name);
	return b[i];
}

static void put(const char *name, const char *s, int flags)
{
	int fd = open(P(name), O_WRONLY | O_CREAT | flags, 0644);
	if (fd < 0 || write(fd, s, strlen(s)) < 0 || close(fd) < 0)
		perror(name);
}

/* The second process's script. */
static void ops(void)
{
	char buf[64];
	put("new", "n", O_EXCL);                  /* CREATE OPEN MODIFY CLOSE_WRITE */
	put("f", "more", O_APPEND);               /* OPEN MODIFY CLOSE_WRITE on both watches */
	chmod(P("f"), 0600);                       /* ATTRIB */
	int fd = open(P("f"), O_RDONLY);
	if (read(fd, buf, sizeof buf) < 0)         /* ACCESS */
		perror("read");
	close(fd);                                 /* CLOSE_NOWRITE */
	rename(P("new"), P("moved"));              /* MOVED_FROM/MOVED_TO, one cookie */
	link(P("f"), P("hard"));                   /* ATTRIB (links) CREATE */
	unlink(P("hard"));                         /* ATTRIB DELETE */
	mkdir(P("sub"), 0755);                     /* CREATE ISDIR */
	rename(P("sub"), P("sub2"));               /* MOVED_* ISDIR */
	rmdir(P("sub2"));                          /* DELETE ISDIR */
	symlink("target", P("sym"));               /* CREATE */
	mkfifo(P("fifo"), 0644);                   /* CREATE */
	truncate(P("f"), 1);                       /* MODIFY */
	if (setxattr(P("f"), "user.k", "v", 1, 0) == 0) /* ATTRIB, where the file system has user xattrs */
		removexattr(P("f"), "user.k");
	put("other", "o", 0);
	renameat2(AT_FDCWD, P("other"), AT_FDCWD, P("moved"), RENAME_EXCHANGE);
	rename(P("other"), P("moved"));            /* replaces moved */
	unlink(P("f"));                            /* ATTRIB DELETE_SELF IGNORED DELETE */
	unlink(P("sym"));
	unlink(P("fifo"));
	utimensat(AT_FDCWD, P("moved"), NULL, 0);  /* ATTRIB */
}

static const struct { uint32_t bit; const char *name; } names[] = {
	{ IN_ACCESS, "ACCESS" }, { IN_MODIFY, "MODIFY" }, { IN_ATTRIB, "ATTRIB" },
	{ IN_CLOSE_WRITE, "CLOSE_WRITE" }, { IN_CLOSE_NOWRITE, "CLOSE_NOWRITE" }, { IN_OPEN, "OPEN" },
	{ IN_MOVED_FROM, "MOVED_FROM" }, { IN_MOVED_TO, "MOVED_TO" }, { IN_CREATE, "CREATE" },
	{ IN_DELETE, "DELETE" }, { IN_DELETE_SELF, "DELETE_SELF" }, { IN_MOVE_SELF, "MOVE_SELF" },
	{ IN_UNMOUNT, "UNMOUNT" }, { IN_Q_OVERFLOW, "Q_OVERFLOW" }, { IN_IGNORED, "IGNORED" },
	{ IN_ISDIR, "ISDIR" },
};

static int wd_d, wd_f;
static uint32_t cookies[64];
static int ncookies;

static void show(const struct inotify_event *ev)
{
	printf("%s", ev->wd == wd_d ? "dir" : ev->wd == wd_f ? "file" : "wd?");
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (ev->mask & names[i].bit)
			printf(" %s", names[i].name);
	if (ev->len) {
		size_t l = strnlen(ev->name, ev->len);
		int padded = ev->len % sizeof(struct inotify_event) == 0 && l < ev->len &&
			     ev->len - l <= sizeof(struct inotify_event);
		printf(" '%s'%s", ev->name, padded ? "" : " (bad padding)");
	}
	if (ev->cookie) {
		int c = 0;
		while (c < ncookies && cookies[c] != ev->cookie)
			c++;
		if (c == ncookies && ncookies < 64)
			cookies[ncookies++] = ev->cookie;
		printf(" cookie#%d", c);
	}
	printf("\n");
}

/* Reads events until none came for a while. */
static void drain(int in)
{
	char buf[65536] __attribute__((aligned(8)));
	struct pollfd p = { .fd = in, .events = POLLIN };
	while (poll(&p, 1, 700) > 0) {
		int avail = 0;
		if (ioctl(in, FIONREAD, &avail) < 0 || avail <= 0)
			printf("FIONREAD %d\n", avail);
		ssize_t n = read(in, buf, sizeof buf);
		if (n <= 0) {
			printf("read %zd %s\n", n, n ? strerror(errno) : "EOF");
			return;
		}
		for (ssize_t off = 0; off < n;) {
			struct inotify_event *ev = (void *)(buf + off);
			show(ev);
			off += (ssize_t)(sizeof *ev + ev->len);
		}
	}
}

static void err(const char *what, int r)
{
	printf("%s: %d %s\n", what, r, r < 0 ? strerror(errno) : "");
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	snprintf(d, sizeof d, "%s/d", argv[1]);
	snprintf(f, sizeof f, "%s/f", d);
	if (argc > 2) {
		ops();
		return 0;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	mkdir(d, 0755);
	put("f", "x", 0);
	put("h", "h", 0);
	int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	wd_d = inotify_add_watch(in, d, IN_ALL_EVENTS);
	wd_f = inotify_add_watch(in, f, IN_ALL_EVENTS);
	printf("wds %d %d, again %s\n", wd_d, wd_f, inotify_add_watch(in, f, IN_MODIFY) == wd_f ? "same" : "other");
	/* The raw system call, as programs without glibc's wrapper make it. */
	printf("syscall(): %s\n", syscall(SYS_inotify_add_watch, in, f, IN_ALL_EVENTS) == wd_f ? "same wd" : "other");
	err("missing", inotify_add_watch(in, P("missing"), IN_ALL_EVENTS));
	err("onlydir on a file", inotify_add_watch(in, f, IN_ALL_EVENTS | IN_ONLYDIR));
	err("mask_create again", inotify_add_watch(in, f, IN_MODIFY | IN_MASK_CREATE));
	err("mask_add|mask_create", inotify_add_watch(in, f, IN_MODIFY | IN_MASK_ADD | IN_MASK_CREATE));
	err("mask 0", inotify_add_watch(in, f, 0));
	err("bad fd", inotify_add_watch(99, f, IN_MODIFY));
	int plain = open(f, O_RDONLY);
	err("not inotify", inotify_add_watch(plain, f, IN_MODIFY));
	close(plain);
	err("rm bad wd", inotify_rm_watch(in, 12345));
	symlink("f", P("lnk"));
	int wl = inotify_add_watch(in, P("lnk"), IN_ATTRIB | IN_DONT_FOLLOW);
	printf("dont_follow: %s\n", wl > 0 && wl != wd_f ? "own wd" : "wrong");
	inotify_rm_watch(in, wl);
	unlink(P("lnk"));
	drain(in);
	printf("-- the second process\n");
	pid_t pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", argv[0], argv[1], "ops", (char *)NULL);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
	drain(in);
	printf("-- rm_watch\n");
	err("rm dir watch", inotify_rm_watch(in, wd_d));
	err("rm it again", inotify_rm_watch(in, wd_d));
	drain(in);
	printf("-- oneshot\n");
	wd_d = inotify_add_watch(in, d, IN_CREATE | IN_ONESHOT);
	put("a", "", 0);
	put("b", "", 0);
	struct pollfd pw = { .fd = in, .events = POLLIN };
	poll(&pw, 1, 2000);
	char small[sizeof(struct inotify_event)];
	err("read into a buffer too small for the event", (int)read(in, small, sizeof small));
	drain(in);
	printf("-- excl_unlink\n");
	wd_d = inotify_add_watch(in, d, IN_MODIFY | IN_CLOSE_WRITE | IN_EXCL_UNLINK);
	int u = open(P("u"), O_CREAT | O_WRONLY, 0644);
	if (write(u, "1", 1) < 0 || unlink(P("u")) < 0 || write(u, "2", 1) < 0)
		perror("u");
	close(u);
	drain(in);
	close(in);
	return 0;
}
