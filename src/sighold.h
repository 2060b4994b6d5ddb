/*
 * sighold.h — a signal waits while its thread holds one of kura's locks.
 *
 * The kernel runs a system call to its end, or to a point it can give up
 * from, before a handler runs; kura runs the same call in the program's
 * own thread, where a handler can come between any two instructions.  A
 * handler that then calls into kura (a cleanup handler that unlinks its
 * temporary file, a log line written from SIGALRM) waited on a lock its
 * own thread held, forever; one that left by siglongjmp (stress-ng's
 * timers do) left the lock held, and the next call of the program waited
 * on it forever.
 *
 * So every lock kura takes in the program's threads is taken between
 * sighold_enter and sighold_leave.  The layer's handler of a signal (the
 * interposition layer installs one in front of each handler the program
 * sets) asks sighold_defer first: inside a hold the signal is queued again
 * to this thread, with its siginfo, and stays blocked until the outermost
 * hold ends; then it is delivered, and the program's handler runs, as if
 * the signal had come at the end of kura's call.  A hold costs a
 * thread-local increment and decrement; only a deferred signal costs
 * system calls.
 *
 * Faults (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS the kernel
 * raised for an instruction) cannot wait: they are never deferred.  A
 * hold must never span a wait with no bound (a signal is what ends some of
 * those: a lock wait of fcntl F_SETLKW gives EINTR), nor a call into the
 * program.
 */
#ifndef KURA_SIGHOLD_H
#define KURA_SIGHOLD_H

#include <pthread.h>
#include <signal.h>

extern __thread int sighold_depth __attribute__((tls_model("initial-exec")));
/* A signal is waiting for the outermost hold to end. */
extern __thread volatile sig_atomic_t sighold_waiting __attribute__((tls_model("initial-exec")));

/* Unblocks what was deferred: its handlers run now. */
void sighold_let_in(void);

static inline void sighold_enter(void)
{
	sighold_depth++;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

static inline void sighold_leave(void)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	/* Never below zero: an unbalanced leave must not make later holds
	 * look released, nor a wrapped count hold signals for ever. */
	if (sighold_depth > 0)
		sighold_depth--;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (__builtin_expect(sighold_waiting, 0) && sighold_depth == 0)
		sighold_let_in();
}

/* A process-private mutex of kura's, taken and let go inside a hold. */
static inline void sighold_lock(pthread_mutex_t *m)
{
	sighold_enter();
	pthread_mutex_lock(m);
}

static inline void sighold_unlock(pthread_mutex_t *m)
{
	pthread_mutex_unlock(m);
	sighold_leave();
}

/* From a signal handler (ucontext as the kernel gave it): 1 if the signal
 * was deferred, and the handler must return at once; 0 if it is to run now. */
int sighold_defer(int sig, siginfo_t *si, void *ucontext);

/* In a forked child: the forking thread's holds are not the child's. */
void sighold_fork_child(void);

#endif
