/* tracee.c — telling a wait that can never end from a slow one (see tracee.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "tracee.h"

/* FUTEX_TID_MASK: the bits of a robust mutex's word that name its holder. */
#define TID_MASK 0x3fffffff

/* /proc/<tid>/status (0: this process's) into buf; 0 when unreadable. */
static int read_status(int tid, char *buf, size_t size)
{
	char path[64];
	if (tid)
		snprintf(path, sizeof path, "/proc/%d/status", tid);
	else
		snprintf(path, sizeof path, "/proc/self/status");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, size - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	return 1;
}

int tracee_holds(const pthread_mutex_t *m)
{
	int tid = __atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED) & TID_MASK;
	char buf[1024];
	if (tid <= 0 || tid == gettid() || !read_status(tid, buf, sizeof buf))
		return 0;
	/* "t" is a ptrace stop; TracerPid names the tracing thread. */
	const char *state = strstr(buf, "\nState:\t"), *tracer = strstr(buf, "\nTracerPid:\t");
	return state && tracer && state[8] == 't' && atoi(tracer + 12) == gettid();
}

int tracee_traced(void)
{
	char buf[1024];
	const char *tracer = read_status(0, buf, sizeof buf) ? strstr(buf, "\nTracerPid:\t") : NULL;
	return tracer && atoi(tracer + 12) != 0;
}

/*
 * A robust process-shared mutex can leave a waiter asleep on a free
 * mutex.  An unlock, or the kernel for a holder that died, wakes one
 * waiter; if that one is killed before it takes the mutex, the wake is
 * lost, and the others sleep on with nobody left to wake them (a
 * stress_mp_test run under TSan hung so for minutes, its victims killed
 * at random).  So no wait here is one sleep: each slice of it ends and
 * looks at the mutex again.  0 or EOWNERDEAD: taken; EBUSY: not yet.
 */
static int wait_slice(pthread_mutex_t *m)
{
#if defined(__SANITIZE_THREAD__)
	/* TSan does not see a process-shared mutex taken by timedlock as
	 * held (it reports the unlock), so sanitized thread builds poll. */
	struct timespec pause = { 0, 100 * 1000 };
	nanosleep(&pause, NULL);
	return pthread_mutex_trylock(m);
#else
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += 50 * 1000 * 1000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	int r = pthread_mutex_timedlock(m, &until);
	return r == ETIMEDOUT ? EBUSY : r;
#endif
}

/* Tries m once, without reading a clock (the usual case), then waits in
 * slices; between them, give_up_on_tracee asks whether m's holder is the
 * caller's stopped tracee. */
static int lock_in_slices(pthread_mutex_t *m, int give_up_on_tracee)
{
	int r = pthread_mutex_trylock(m);
	while (r == EBUSY) {
		r = wait_slice(m);
		if (r == EBUSY && give_up_on_tracee && tracee_holds(m))
			return EDEADLK;
	}
	return r;
}

int tracee_robust_lock(pthread_mutex_t *m)
{
	return lock_in_slices(m, 0);
}

int tracee_safe_lock(pthread_mutex_t *m)
{
	return lock_in_slices(m, 1);
}
