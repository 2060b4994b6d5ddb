/*
 * sigdefer.c — the program's signal handlers, behind one of the layer's.
 *
 * A handler the program sets runs behind a trampoline that first asks
 * sighold_defer (../sighold.h) whether its thread is inside one of kura's
 * locks; if so the signal waits, blocked, until the lock is let go, and is
 * then delivered again with the same siginfo.  A handler that calls into
 * kura, or leaves by siglongjmp, then finds kura as a system call would
 * have left it, instead of its own thread's lock held.
 *
 * The program sees its own actions: sigaction returns the handler and
 * flags it set, never the trampoline.  SA_RESETHAND is done here, when the
 * program's handler really runs: done by the kernel at a deferred
 * delivery, the copy queued again would have met the default action.
 * SIGSEGV and SIGBUS are mapsig.c's once it handles them; faults are
 * never deferred, nor is anything while no pool is mounted here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>

#include "kp.h"
#include "sighold.h"

/* The program's handler (NULL: none, the kernel's action is its own) and
 * flags, per signal, while the trampoline stands in front of it. */
static struct {
	void *fn;
	int flags;
} user[_NSIG];
static pthread_mutex_t act_lock = PTHREAD_MUTEX_INITIALIZER;

static void trampoline(int sig, siginfo_t *si, void *uc)
{
	if (sighold_defer(sig, si, uc))
		return;
	void *fn = __atomic_load_n(&user[sig].fn, __ATOMIC_ACQUIRE);
	int flags = __atomic_load_n(&user[sig].flags, __ATOMIC_RELAXED);
	if (!fn) {
		/* The action changed between the delivery and now: the new
		 * one, the kernel's, decides. */
		raise(sig);
		return;
	}
	if (flags & SA_RESETHAND) {
		struct sigaction dfl = { .sa_handler = SIG_DFL };
		__atomic_store_n(&user[sig].fn, NULL, __ATOMIC_RELEASE);
		REAL(sigaction)(sig, &dfl, NULL);
	}
	if (flags & SA_SIGINFO)
		((void (*)(int, siginfo_t *, void *))fn)(sig, si, uc);
	else
		((void (*)(int))fn)(sig);
}

/* Whether a handler of sig goes behind the trampoline: not for the
 * faults (SIGSEGV and SIGBUS have mapsig.c), which must run at once. */
static int deferrable(int sig)
{
	switch (sig) {
	case SIGSEGV: case SIGBUS: case SIGILL: case SIGFPE: case SIGTRAP: case SIGSYS:
		return 0;
	default:
		return sig > 0 && sig < _NSIG && kp_nmounts > 0;
	}
}

static int is_handler(void (*h)(int))
{
	return h != SIG_DFL && h != SIG_IGN && h != SIG_ERR;
}

KP_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	int r = kp_fault_sigaction(sig, act, old);
	if (r != KP_NOT_MINE)
		return r;
	if (!deferrable(sig))
		return REAL(sigaction)(sig, act, old);
	struct sigaction prev, front;
	sighold_lock(&act_lock);
	void *was_fn = user[sig].fn;
	int was_flags = user[sig].flags;
	const struct sigaction *k = act;
	if (act && is_handler(act->sa_handler)) {
		front = *act;
		front.sa_sigaction = trampoline;
		front.sa_flags = (act->sa_flags | SA_SIGINFO) & ~SA_RESETHAND;
		k = &front;
	}
	r = REAL(sigaction)(sig, k, &prev);
	if (r == 0 && act) {
		__atomic_store_n(&user[sig].flags, act->sa_flags, __ATOMIC_RELAXED);
		__atomic_store_n(&user[sig].fn, k == &front ? (void *)act->sa_handler : NULL, __ATOMIC_RELEASE);
	}
	sighold_unlock(&act_lock);
	if (r == 0 && old) {
		*old = prev;
		if (prev.sa_sigaction == trampoline && was_fn) {
			old->sa_handler = (void (*)(int))was_fn;
			/* The kernel's flags, but the program's say how its
			 * handler is called (siginterrupt changes SA_RESTART
			 * through glibc's own sigaction, past this one). */
			old->sa_flags = (prev.sa_flags & ~SA_SIGINFO) | (was_flags & (SA_SIGINFO | SA_RESETHAND));
		}
	}
	return r;
}

KP_EXPORT int __sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	return sigaction(sig, act, old);
}

/* signal() as glibc's: BSD semantics, the signal blocked in its handler. */
static sighandler_t set_handler(int sig, sighandler_t handler, int flags, int block_self)
{
	struct sigaction act = { .sa_handler = handler, .sa_flags = flags }, old;
	if (handler == SIG_ERR || sig <= 0 || sig >= _NSIG) {
		errno = EINVAL;
		return SIG_ERR;
	}
	sigemptyset(&act.sa_mask);
	if (block_self)
		sigaddset(&act.sa_mask, sig);
	return sigaction(sig, &act, &old) < 0 ? SIG_ERR : old.sa_handler;
}

KP_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
	return set_handler(sig, handler, SA_RESTART, 1);
}

KP_EXPORT sighandler_t bsd_signal(int sig, sighandler_t handler)
{
	return signal(sig, handler);
}

KP_EXPORT sighandler_t ssignal(int sig, sighandler_t handler)
{
	return signal(sig, handler);
}

/* System V: reset to the default at delivery, the signal not blocked. */
KP_EXPORT sighandler_t sysv_signal(int sig, sighandler_t handler)
{
	return set_handler(sig, handler, SA_RESETHAND | SA_NODEFER, 0);
}

KP_EXPORT sighandler_t __sysv_signal(int sig, sighandler_t handler)
{
	return sysv_signal(sig, handler);
}

/* System V's sigset: SIG_HOLD blocks; anything else is set and unblocks.
 * The answer is SIG_HOLD if the signal was blocked, else the old action. */
KP_EXPORT sighandler_t sigset(int sig, sighandler_t disp)
{
	if (disp == SIG_HOLD || !deferrable(sig))
		return REALT(sighandler_t (*)(int, sighandler_t), "sigset")(sig, disp);
	sigset_t one, was;
	sigemptyset(&one);
	sigaddset(&one, sig);
	struct sigaction act = { .sa_handler = disp }, old;
	sigemptyset(&act.sa_mask);
	if (sigaction(sig, &act, &old) < 0 || pthread_sigmask(SIG_UNBLOCK, &one, &was) != 0)
		return SIG_ERR;
	return sigismember(&was, sig) ? SIG_HOLD : old.sa_handler;
}
