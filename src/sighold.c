/* sighold.c — deferring a signal that arrives inside one of kura's locks
 * (see sighold.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#include "sighold.h"

__thread int sighold_depth __attribute__((tls_model("initial-exec")));
__thread volatile sig_atomic_t sighold_waiting __attribute__((tls_model("initial-exec")));
/* The signals this thread deferred, blocked until the hold ends. */
static __thread sigset_t deferred __attribute__((tls_model("initial-exec")));

/* A fault the kernel raised for the instruction that was running: waiting
 * would run that instruction again into the same fault. */
static int raised_by_instruction(int sig, const siginfo_t *si)
{
	switch (sig) {
	case SIGSEGV: case SIGBUS: case SIGILL: case SIGFPE: case SIGTRAP: case SIGSYS:
		return si && si->si_code > 0 && si->si_code != SI_KERNEL;
	default:
		return 0;
	}
}

int sighold_defer(int sig, siginfo_t *si, void *ucontext)
{
	if (sighold_depth <= 0 || !si || !ucontext || raised_by_instruction(sig, si))
		return 0;
	int saved = errno;
	sigset_t one;
	sigemptyset(&one);
	sigaddset(&one, sig);
	/* Blocked now, so that the copy queued below waits even when the
	 * handler was set up with SA_NODEFER; blocked after the handler
	 * returns too, through the mask the kernel restores. */
	pthread_sigmask(SIG_BLOCK, &one, NULL);
	/* The copy keeps the siginfo (sender, value, timer) the program's
	 * handler would have seen.  Queued to this thread, which is the one
	 * that will unblock it.  A process may queue any si_code to itself. */
	if (syscall(SYS_rt_tgsigqueueinfo, getpid(), gettid(), sig, si) != 0) {
		/* The queue of real-time signals is full: run the handler now
		 * rather than lose the signal. */
		pthread_sigmask(SIG_UNBLOCK, &one, NULL);
		errno = saved;
		return 0;
	}
	sigaddset(&((ucontext_t *)ucontext)->uc_sigmask, sig);
	sigaddset(&deferred, sig);
	sighold_waiting = 1;
	errno = saved;
	return 1;
}

void sighold_let_in(void)
{
	int saved = errno;
	sigset_t now = deferred;
	sigemptyset(&deferred);
	sighold_waiting = 0;
	/* The handlers run inside this call, with errno as kura left it. */
	pthread_sigmask(SIG_UNBLOCK, &now, NULL);
	errno = saved;
}

void sighold_fork_child(void)
{
	sighold_depth = 0;
	/* Pending signals are not inherited, but the mask is: what the
	 * parent deferred is not the child's, and must not stay blocked. */
	if (sighold_waiting)
		sighold_let_in();
}
