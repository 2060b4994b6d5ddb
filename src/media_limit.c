/*
 * media_limit.c — kura's own files and the program's RLIMIT_FSIZE.
 *
 * The kernel applies the soft RLIMIT_FSIZE to every write(2), fallocate(2)
 * and growing ftruncate(2) of the process, and sends SIGXFSZ past it.
 * kura's own files (the pool, its working copy and journal, the descriptor
 * state, the lock table) are the file system's, not the program's: after
 * `ulimit -f 100` the next program under the prefix died of SIGXFSZ while
 * it mounted its pool.  A file system in the kernel writes its blocks with
 * no such limit; kura lifts the soft limit to the hard one for the call
 * that would pass it.  Another thread's kernel write in that window is
 * not limited either, which is the price of a limit the kernel keeps per
 * process; with no finite limit (the usual case) nothing is done.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "media.h"

uint64_t media_fsize_limit = UINT64_MAX;

void media_fsize_refresh(void)
{
	struct rlimit r;
	if (getrlimit(RLIMIT_FSIZE, &r) == 0)
		__atomic_store_n(&media_fsize_limit, r.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)r.rlim_cur,
				 __ATOMIC_RELAXED);
}

/* The limit a call on one of kura's own files ending at `end` meets is
 * lifted (to none if the process may raise its hard limit, else to the
 * hard limit); where even the hard one is too low the call fails with
 * EFBIG, with SIGXFSZ ignored for it, so that the program sees an
 * error, not death. */
void media_own_begin(struct media_own_write *g, uint64_t end)
{
	g->lifted = g->ignored = 0;
	if (__builtin_expect(end <= __atomic_load_n(&media_fsize_limit, __ATOMIC_RELAXED), 1))
		return;
	/* Raw calls: the interposition layer's setrlimit would take the
	 * lifted limit for the program's own. */
	if (syscall(SYS_prlimit64, 0, RLIMIT_FSIZE, NULL, &g->was) != 0 || g->was.rlim_cur == RLIM_INFINITY ||
	    end <= g->was.rlim_cur)
		return;
	struct rlimit none = { RLIM_INFINITY, RLIM_INFINITY }, hard = { g->was.rlim_max, g->was.rlim_max };
	if (syscall(SYS_prlimit64, 0, RLIMIT_FSIZE, &none, NULL) == 0 ||
	    (end <= hard.rlim_cur && syscall(SYS_prlimit64, 0, RLIMIT_FSIZE, &hard, NULL) == 0)) {
		g->lifted = 1;
		return;
	}
	/* Ignored for the call, process-wide (the kernel sends it to the
	 * process, and any thread not blocking it would take it); raw, so
	 * that the old action comes back exactly as the kernel held it. */
	struct kernel_sigaction ign = { .handler = SIG_IGN };
	g->ignored = syscall(SYS_rt_sigaction, SIGXFSZ, &ign, &g->act, sizeof(uint64_t)) == 0;
}

void media_own_end(struct media_own_write *g)
{
	int saved = errno;
	if (g->lifted)
		syscall(SYS_prlimit64, 0, RLIMIT_FSIZE, &g->was, NULL);
	if (g->ignored)
		syscall(SYS_rt_sigaction, SIGXFSZ, &g->act, NULL, sizeof(uint64_t));
	errno = saved;
}

int media_ftruncate(int fd, uint64_t size)
{
	struct media_own_write g;
	media_own_begin(&g, size);
	int r = ftruncate(fd, (off_t)size) ? -errno : 0;
	media_own_end(&g);
	return r;
}
