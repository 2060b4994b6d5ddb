/* fcntl(F_NOTIFY) on a directory while a second process changes it: the
 * signal (F_SETSIG's, with si_fd and si_band) or SIGIO, one-shot and
 * DN_MULTISHOT registrations, and the errors.  The same output on tmpfs
 * and under kura. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[PATH_MAX - 32];

/* A second process makes (or removes) a name in the directory. */
static void in_child(const char *what, const char *name)
{
	pid_t p = fork();
	if (p == 0) {
		char path[PATH_MAX];
		snprintf(path, sizeof path, "%s/%s", dir, name);
		if (!strcmp(what, "create"))
			close(open(path, O_CREAT | O_WRONLY, 0644));
		else if (!strcmp(what, "unlink"))
			unlink(path);
		else if (!strcmp(what, "chmod"))
			chmod(path, 0600);
		_exit(0);
	}
	waitpid(p, NULL, 0);
}

static void wait_sig(sigset_t *set, int fd, const char *what)
{
	struct timespec t = { 2, 0 };
	siginfo_t si;
	int s = sigtimedwait(set, &si, &t);
	if (s < 0) {
		printf("%s: no signal\n", what);
		return;
	}
	printf("%s: %s", what, s == SIGIO ? "SIGIO" : s == SIGRTMIN + 1 ? "SIGRTMIN+1" : "other");
	/* kura's si_code is SI_QUEUE, the kernel's POLL_MSG (notify_dn.c). */
	if (s != SIGIO)
		printf(" si_fd %s si_band %#lx", si.si_fd == fd ? "ok" : "wrong", (unsigned long)si.si_band);
	printf("\n");
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	setvbuf(stdout, NULL, _IONBF, 0);
	snprintf(dir, sizeof dir, "%s/dn", argv[1]);
	mkdir(dir, 0755);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGIO);
	sigaddset(&set, SIGRTMIN + 1);
	sigprocmask(SIG_BLOCK, &set, NULL);

	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	char file[PATH_MAX];
	snprintf(file, sizeof file, "%s/plain", dir);
	int pf = open(file, O_CREAT | O_RDWR, 0644);
	int r = fcntl(pf, F_NOTIFY, DN_CREATE);
	printf("on a file: %d %s\n", r, r < 0 ? strerror(errno) : "");
	r = fcntl(fd, F_NOTIFY, 0x1000);
	printf("unknown bits: %d %s\n", r, r < 0 ? strerror(errno) : "");
	close(pf);

	/* SIGIO, one-shot: the second change raises nothing. */
	printf("register: %d\n", fcntl(fd, F_NOTIFY, DN_CREATE));
	in_child("create", "a");
	wait_sig(&set, fd, "create a");
	in_child("create", "b");
	wait_sig(&set, fd, "create b (one-shot spent)");

	/* F_SETSIG's signal with si_fd, for every change it asked for. */
	printf("setsig: %d\n", fcntl(fd, F_SETSIG, SIGRTMIN + 1));
	printf("register: %d\n", fcntl(fd, F_NOTIFY, DN_DELETE | DN_ATTRIB | DN_MULTISHOT));
	in_child("create", "c");
	wait_sig(&set, fd, "create c (not asked for)");
	in_child("unlink", "a");
	wait_sig(&set, fd, "unlink a");
	in_child("chmod", "b");
	wait_sig(&set, fd, "chmod b");
	printf("unregister: %d\n", fcntl(fd, F_NOTIFY, 0));
	in_child("unlink", "b");
	wait_sig(&set, fd, "unlink b (unregistered)");
	close(fd);
	return 0;
}
