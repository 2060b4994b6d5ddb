/*
 * fsize.c — RLIMIT_FSIZE (ulimit -f) on kura files.
 *
 * The kernel never sees a kura write, so the engine applies the limit
 * (kura_set_fsize_limit) and this keeps it equal to the process's soft
 * limit: read at start (after exec too: every image runs this
 * constructor), and again after each call that may have changed it.  A
 * forked child keeps the engine's copy, as it keeps the limit.  Another
 * process's prlimit on this one, and a raw syscall(SYS_prlimit64), are
 * not seen: the limit then stays as it was until this process sets one.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kp.h"

static void fsize_reload(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_FSIZE, &rl) == 0)
		kura_set_fsize_limit(rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur);
}

__attribute__((constructor)) static void fsize_init(void)
{
	fsize_reload();
}

int kp_xfsz(void)
{
	/* Linux's send_sig(SIGXFSZ, current): to this thread, delivered
	 * before the call returns (its errno set after the handler ran). */
	kp_syscall(SYS_tgkill, (long)getpid(), (long)gettid(), (long)SIGXFSZ);
	return EFBIG;
}

/* Before a call that may set a finite limit: the limit binds kura's own
 * kernel files too, and the pools' shared tables are sized (ftruncate)
 * when first used, so every pool is mounted and its tables made first, as
 * before a change of credentials (kp_mount_all).  Else a later first use
 * would fail, and raise SIGXFSZ in a program that wrote nothing. */
static void before_set(int resource, rlim_t soft)
{
	if (resource == RLIMIT_FSIZE && soft != RLIM_INFINITY)
		kp_mount_all();
}

/* After a call that set some process's limit: reading this process's own
 * is right whichever it was, so pid need not be compared (a thread's id
 * names the process too). */
static int after_set(int r, int resource)
{
	if (r == 0 && resource == RLIMIT_FSIZE)
		fsize_reload();
	return r;
}

/* ASan sets RLIMIT_CORE through setrlimit while it starts, before its
 * shadow memory exists: a call for any other resource than RLIMIT_FSIZE
 * passes through code the sanitizers leave alone. */
#define PASS_THROUGH __attribute__((no_sanitize("address", "thread", "undefined")))

KP_EXPORT PASS_THROUGH int setrlimit(__rlimit_resource_t resource, const struct rlimit *rl)
{
	if (resource != RLIMIT_FSIZE || !KP_MEM_OK(rl, sizeof *rl))
		return REAL(setrlimit)(resource, rl);
	before_set(resource, rl->rlim_cur);
	return after_set(REAL(setrlimit)(resource, rl), resource);
}

KP_EXPORT PASS_THROUGH int setrlimit64(__rlimit_resource_t resource, const struct rlimit64 *rl)
{
	if (resource != RLIMIT_FSIZE || !KP_MEM_OK(rl, sizeof *rl))
		return REAL(setrlimit64)(resource, rl);
	before_set(resource, rl->rlim_cur);
	return after_set(REAL(setrlimit64)(resource, rl), resource);
}

KP_EXPORT PASS_THROUGH int prlimit(pid_t pid, __rlimit_resource_t resource, const struct rlimit *rl, struct rlimit *old)
{
	if (resource != RLIMIT_FSIZE || !rl || !KP_MEM_OK(rl, sizeof *rl))
		return REAL(prlimit)(pid, resource, rl, old);
	before_set(resource, rl->rlim_cur);
	return after_set(REAL(prlimit)(pid, resource, rl, old), resource);
}

KP_EXPORT PASS_THROUGH int prlimit64(pid_t pid, __rlimit_resource_t resource, const struct rlimit64 *rl, struct rlimit64 *old)
{
	if (resource != RLIMIT_FSIZE || !rl || !KP_MEM_OK(rl, sizeof *rl))
		return REAL(prlimit64)(pid, resource, rl, old);
	before_set(resource, rl->rlim_cur);
	return after_set(REAL(prlimit64)(pid, resource, rl, old), resource);
}
