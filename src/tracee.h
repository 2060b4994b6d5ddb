/*
 * tracee.h — telling a wait that can never end from a slow one.
 *
 * A process stopped under ptrace stops at every system call, and kura's
 * flush leader makes system calls (the journal's write and flush) while
 * others wait for it.  When the waiter is the very thread that traces the
 * holder — strace or a debugger writing its log into the pool — the holder
 * stays stopped until the waiter returns: neither ever moves.  A wait that
 * can take long asks this now and then, and gives up instead.
 */
#ifndef KURA_TRACEE_H
#define KURA_TRACEE_H

#include <pthread.h>

/* Whether the thread holding m (a robust mutex: glibc keeps the holder's
 * thread id in it) is stopped under ptrace by the calling thread. */
int tracee_holds(const pthread_mutex_t *m);

/* Whether this process is traced now (strace -f, a debugger): then the
 * pool mutex is held across no system call that can be helped, lest the
 * tracer, writing its log into the pool, wait on its own stopped tracee. */
int tracee_traced(void);

/* Locks m, a robust process-shared mutex: 0, or EOWNERDEAD as
 * pthread_mutex_lock returns it.  The wait looks at m again every 50 ms
 * (tracee.c: a wake can be lost when a waiter is killed). */
int tracee_robust_lock(pthread_mutex_t *m);

/* As tracee_robust_lock, or gives up with EDEADLK when m's holder is the
 * caller's stopped tracee. */
int tracee_safe_lock(pthread_mutex_t *m);

#endif
