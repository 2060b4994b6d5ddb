/* signal_handlers.c — signal handlers that call into the file system while
 * the thread they interrupted was inside it.  The kernel finishes (or gives
 * up) a call before a handler runs; kura must look the same: a handler
 * that writes a log line while the program writes files, or that leaves by
 * siglongjmp, must neither hang nor leave a lock held.  The handler sees
 * the siginfo it was sent, and sigaction shows the program's own actions.
 * Usage: signal_handlers BASE; the output must be the same on tmpfs and on
 * kura.  Each scene runs in a child that the parent gives 60 s, so a hang
 * prints "hung" instead of stopping the test. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define OPS 6000

#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* siginterrupt */

static const char *base;
static int logfd = -1;
static volatile sig_atomic_t hits, jumps, bad_info;
static sigjmp_buf back;
static volatile int jumping;

static void on_alarm(int sig)
{
	(void)sig;
	hits++;
	if (write(logfd, "tick\n", 5) != 5)
		_exit(3);
	if (jumping && hits % 3 == 0) {
		jumps++;
		siglongjmp(back, 1);
	}
}

/* Creates, writes and removes files, as a program would between ticks. */
static void churn(long from)
{
	char p[4096], buf[8192];
	memset(buf, 'x', sizeof buf);
	for (long i = from; i < OPS; i++) {
		snprintf(p, sizeof p, "%s/f%ld", base, i % 5);
		int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0)
			continue;
		if (write(fd, buf, sizeof buf) < 0)
			_exit(4);
		close(fd);
		unlink(p);
	}
}

static void tick_every(long us)
{
	struct itimerval it = { { 0, us }, { 0, us } };
	setitimer(ITIMER_REAL, &it, NULL);
}

static int open_log(void)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/log", base);
	logfd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
	return logfd >= 0;
}

/* The handler logs while the program writes files. */
static int scene_log_from_handler(void)
{
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	sigemptyset(&sa.sa_mask);
	if (!open_log() || sigaction(SIGALRM, &sa, NULL) < 0)
		return 1;
	tick_every(200);
	churn(0);
	tick_every(0);
	struct stat st;
	char p[4096];
	snprintf(p, sizeof p, "%s/log", base);
	printf("ticks logged: %s\n", hits > 0 && stat(p, &st) == 0 && st.st_size == 5 * (off_t)hits ? "all" : "some lost");
	return 0;
}

/* Every third tick leaves by siglongjmp, and the program goes on. */
static int scene_jump_out(void)
{
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	sigemptyset(&sa.sa_mask);
	if (!open_log() || sigaction(SIGALRM, &sa, NULL) < 0)
		return 1;
	jumping = 1;
	volatile long done = 0;
	tick_every(200);
	if (sigsetjmp(back, 1))
		done += 100;
	if (done < OPS)
		churn(done);
	tick_every(0);
	jumping = 0;
	char p[4096];
	snprintf(p, sizeof p, "%s/after", base);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	printf("after jumps: open %s, unlink %s\n", fd >= 0 ? "ok" : strerror(errno),
	       fd >= 0 && close(fd) == 0 && unlink(p) == 0 ? "ok" : strerror(errno));
	return 0;
}

/* A thread sends numbered signals with sigqueue while this one works. */
static volatile int sent, stop_sending;
static void on_usr1(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (sig != SIGUSR1 || si->si_code != SI_QUEUE || si->si_pid != getpid() || si->si_value.sival_int != 1234)
		bad_info++;
	hits++;
}

static void *sender(void *arg)
{
	(void)arg;
	while (!stop_sending) {
		union sigval v = { .sival_int = 1234 };
		if (sigqueue(getpid(), SIGUSR1, v) == 0)
			sent++;
		struct timespec pause = { 0, 100 * 1000 };
		nanosleep(&pause, NULL);
	}
	return NULL;
}

static int scene_siginfo(void)
{
	struct sigaction sa = { .sa_sigaction = on_usr1, .sa_flags = SA_SIGINFO | SA_RESTART };
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL) < 0)
		return 1;
	pthread_t t;
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &usr1, NULL); /* the sender thread inherits it: only this one takes them */
	pthread_create(&t, NULL, sender, NULL);
	pthread_sigmask(SIG_UNBLOCK, &usr1, NULL);
	churn(OPS / 2);
	stop_sending = 1;
	pthread_join(t, NULL);
	printf("queued signals: some %s, info %s\n", hits > 0 ? "came" : "lost", bad_info ? "changed" : "as sent");
	return 0;
}

static void on_any(int sig)
{
	(void)sig;
	hits++;
}

/* The actions read back are the program's own. */
static int scene_actions(void)
{
	struct sigaction sa = { .sa_handler = on_any, .sa_flags = SA_RESTART | SA_RESETHAND }, old;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR2, &sa, NULL);
	sigaction(SIGUSR2, NULL, &old);
	printf("read back: handler %s, SA_RESTART %d, SA_RESETHAND %d, SA_SIGINFO %d\n",
	       old.sa_handler == on_any ? "ours" : "another", !!(old.sa_flags & SA_RESTART),
	       !!(old.sa_flags & SA_RESETHAND), !!(old.sa_flags & SA_SIGINFO));
	raise(SIGUSR2);
	sigaction(SIGUSR2, NULL, &old);
	printf("after one SA_RESETHAND delivery: ran %d, now %s\n", (int)hits, old.sa_handler == SIG_DFL ? "default" : "not default");
	printf("signal() returns the old handler: %s\n", signal(SIGUSR2, on_any) == SIG_DFL && signal(SIGUSR2, SIG_IGN) == on_any ? "yes" : "no");
	printf("SIG_IGN read back: %s\n", signal(SIGUSR2, SIG_DFL) == SIG_IGN ? "yes" : "no");
	signal(SIGUSR2, on_any);
	siginterrupt(SIGUSR2, 1); /* through glibc's own sigaction, past the layer's */
	sigaction(SIGUSR2, NULL, &old);
	printf("siginterrupt clears SA_RESTART: %s, handler %s\n", old.sa_flags & SA_RESTART ? "no" : "yes", old.sa_handler == on_any ? "ours" : "another");
	errno = 0;
	printf("sigaction(SIGKILL) fails: %s\n", sigaction(SIGKILL, &sa, NULL) < 0 ? strerrorname_np(errno) : "no");
	return 0;
}

static void scene(const char *name, int (*fn)(void))
{
	fflush(stdout);
	pid_t c = fork();
	if (c == 0)
		_exit(fn() ? 1 : 0);
	int status = 0;
	for (int waited = 0; waited < 600; waited++) {
		if (waitpid(c, &status, WNOHANG) == c) {
			printf("%s: exit %d\n", name, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
			return;
		}
		struct timespec tenth = { 0, 100 * 1000 * 1000 };
		nanosleep(&tenth, NULL);
	}
	kill(c, SIGKILL);
	waitpid(c, NULL, 0);
	printf("%s: hung\n", name);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: signal_handlers BASE\n");
		return 2;
	}
	base = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	scene("handler that logs", scene_log_from_handler);
	scene("handler that jumps out", scene_jump_out);
	scene("queued siginfo", scene_siginfo);
	scene("actions", scene_actions);
	return 0;
}
