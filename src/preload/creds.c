/*
 * creds.c — the credentials kura calls are checked against, kept in
 * process memory so that no call needs a system call to learn them.
 *
 * The kernel keeps credentials per thread.  glibc's set*id, setgroups and
 * initgroups change every thread's at once (POSIX); setfsuid/setfsgid,
 * capset and the raw syscall() change the calling thread's only.  So the
 * layer keeps the process's credentials in three classes (the uids with
 * the capabilities that follow them, the gids, the supplementary groups),
 * each with a generation bumped by the process-wide calls, and every thread
 * a copy it refreshes when a generation moved.  A per-thread change
 * overrides the thread's copy of its class until the next process-wide
 * change of that class, which the kernel applies to every thread alike
 * (setresuid resets each thread's fsuid to its euid, for instance).
 * Values are always read back from the kernel after a successful change,
 * never computed here.  A new image reads them afresh at start.
 *
 * Pools are mounted before any change, as a daemon's file systems are
 * before it drops privileges: it may not open the pool file afterwards.
 *
 * The engine is handed a pointer to the thread's copy once
 * (kura_set_thread_creds); kp_creds_sync() keeps the copy current and costs
 * a comparison when nothing changed.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kp.h"

enum { C_UIDS, C_GIDS, C_GROUPS, C_N };

static pthread_mutex_t cr_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	unsigned gen[C_N];
	struct kura_creds v;
	gid_t *groups; /* owned; replaced (under cr_lock) when the groups change */
} proc;
/* Bumped after any proc.gen[]: the one word the fast path reads, against
 * the thread's kp_creds_seen (0: never refreshed). */
unsigned kp_creds_gen = 1;
__thread unsigned kp_creds_seen;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

#define INLINE_GROUPS 32
struct thread_creds {
	unsigned cls[C_N];   /* proc.gen[] each class was copied at */
	struct kura_creds k; /* what the engine reads */
	gid_t inline_groups[INLINE_GROUPS];
	gid_t *heap_groups;  /* when more than INLINE_GROUPS; freed at thread exit */
	size_t heap_cap;
};
static __thread struct thread_creds th;
static pthread_key_t heap_key;

static long raw_syscall(long n, long a, long b, long c)
{
	return kp_syscall(n, a, b, c);
}

/* The calling thread's uid class, as the kernel has it now. */
static void read_uids(struct kura_creds *c)
{
	uid_t r, e, s;
	if (getresuid(&r, &e, &s) == 0) {
		c->uid = r;
		c->fsuid = (uid_t)raw_syscall(SYS_setfsuid, -1, 0, 0); /* an invalid id: answers, changes nothing */
	}
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2];
	if (raw_syscall(SYS_capget, (long)&h, (long)d, 0) == 0) {
		c->caps = d[0].effective | (uint64_t)d[1].effective << 32;
		c->caps_permitted = d[0].permitted | (uint64_t)d[1].permitted << 32;
	} else {
		c->caps = c->caps_permitted = c->fsuid == 0 ? KURA_CAPS_FS : 0;
	}
}

static void read_gids(struct kura_creds *c)
{
	gid_t r, e, s;
	if (getresgid(&r, &e, &s) == 0) {
		c->gid = r;
		c->fsgid = (gid_t)raw_syscall(SYS_setfsgid, -1, 0, 0);
	}
}

/* The calling thread's supplementary groups, malloc'd; NULL and 0 when it
 * has none or they cannot be read. */
static gid_t *read_groups(size_t *n)
{
	*n = 0;
	for (int tries = 0; tries < 4; tries++) {
		int want = getgroups(0, NULL);
		if (want <= 0)
			return NULL;
		gid_t *g = malloc((size_t)want * sizeof *g);
		if (!g)
			return NULL;
		int got = getgroups(want, g);
		if (got >= 0) {
			*n = (size_t)got;
			return g;
		}
		free(g); /* they grew meanwhile */
	}
	return NULL;
}

static void free_heap_groups(void *p)
{
	free(p);
}

static void init(void)
{
	pthread_key_create(&heap_key, free_heap_groups);
	read_uids(&proc.v);
	read_gids(&proc.v);
	proc.groups = read_groups(&proc.v.ngroups);
	proc.v.groups = proc.groups;
	for (int i = 0; i < C_N; i++)
		proc.gen[i] = 1;
}

void kp_creds_init(void)
{
	pthread_once(&init_once, init);
}

/* Copies the thread's groups into its own storage. */
static void set_thread_groups(const gid_t *g, size_t n)
{
	gid_t *dst = th.inline_groups;
	if (n > INLINE_GROUPS) {
		if (n > th.heap_cap) {
			gid_t *h = realloc(th.heap_groups, n * sizeof *h);
			if (!h)
				n = INLINE_GROUPS; /* out of memory: the first ones only */
			else {
				th.heap_groups = h;
				th.heap_cap = n;
				pthread_setspecific(heap_key, h);
			}
		}
		if (n > INLINE_GROUPS)
			dst = th.heap_groups;
	}
	if (n)
		memcpy(dst, g, n * sizeof *g);
	th.k.groups = dst;
	th.k.ngroups = n;
}

void kp_creds_refresh(void)
{
	kp_creds_init(); /* for calls made before the constructor ran */
	sighold_lock(&cr_lock);
	if (th.cls[C_UIDS] != proc.gen[C_UIDS]) {
		th.k.uid = proc.v.uid;
		th.k.fsuid = proc.v.fsuid;
		th.k.caps = proc.v.caps;
		th.k.caps_permitted = proc.v.caps_permitted;
	}
	if (th.cls[C_GIDS] != proc.gen[C_GIDS]) {
		th.k.gid = proc.v.gid;
		th.k.fsgid = proc.v.fsgid;
	}
	if (th.cls[C_GROUPS] != proc.gen[C_GROUPS])
		set_thread_groups(proc.v.groups, proc.v.ngroups);
	memcpy(th.cls, proc.gen, sizeof th.cls);
	/* The engine applies the umask itself: not where a default ACL decides. */
	th.k.umask = kp_umask();
	kp_creds_seen = __atomic_load_n(&kp_creds_gen, __ATOMIC_RELAXED);
	sighold_unlock(&cr_lock);
	kura_set_thread_creds(&th.k);
}

/* After a successful process-wide change of class cls: every thread's
 * values are now the caller's. */
static void changed_for_all(int cls)
{
	int er = errno;
	size_t n = 0;
	gid_t *g = cls == C_GROUPS ? read_groups(&n) : NULL;
	sighold_lock(&cr_lock);
	if (cls == C_UIDS)
		read_uids(&proc.v);
	else if (cls == C_GIDS)
		read_gids(&proc.v);
	else {
		free(proc.groups);
		proc.groups = g;
		proc.v.groups = g;
		proc.v.ngroups = n;
	}
	proc.gen[cls]++;
	__atomic_add_fetch(&kp_creds_gen, 1, __ATOMIC_RELEASE);
	sighold_unlock(&cr_lock);
	kp_creds_sync();
	errno = er;
}

/* After a successful change of the calling thread's class cls only. */
static void changed_for_thread(int cls)
{
	int er = errno;
	kp_creds_sync(); /* the other classes current first */
	if (cls == C_UIDS)
		read_uids(&th.k);
	else if (cls == C_GIDS)
		read_gids(&th.k);
	else {
		size_t n;
		gid_t *g = read_groups(&n);
		set_thread_groups(g, n);
		free(g);
	}
	errno = er;
}

/* fork: the lock is a leaf, taken last and released first. */
void kp_creds_fork_prepare(void)
{
	pthread_mutex_lock(&cr_lock);
}

void kp_creds_fork_done(void)
{
	pthread_mutex_unlock(&cr_lock);
}

#define SETID(name, cls, params, args)              \
	KP_EXPORT int name params                   \
	{                                           \
		kp_mount_all();                     \
		int ret_ = REAL(name) args;         \
		if (ret_ == 0)                      \
			changed_for_all(cls);       \
		return ret_;                        \
	}
SETID(setuid, C_UIDS, (uid_t u), (u))
SETID(seteuid, C_UIDS, (uid_t u), (u))
SETID(setreuid, C_UIDS, (uid_t r, uid_t e), (r, e))
SETID(setresuid, C_UIDS, (uid_t r, uid_t e, uid_t s), (r, e, s))
SETID(setgid, C_GIDS, (gid_t g), (g))
SETID(setegid, C_GIDS, (gid_t g), (g))
SETID(setregid, C_GIDS, (gid_t r, gid_t e), (r, e))
SETID(setresgid, C_GIDS, (gid_t r, gid_t e, gid_t s), (r, e, s))
SETID(setgroups, C_GROUPS, (size_t n, const gid_t *g), (n, g))
SETID(initgroups, C_GROUPS, (const char *user, gid_t g), (user, g))

/* setfsuid answers the previous id whether or not it changed anything. */
KP_EXPORT int setfsuid(uid_t u)
{
	kp_mount_all();
	int r = REAL(setfsuid)(u);
	changed_for_thread(C_UIDS);
	return r;
}

KP_EXPORT int setfsgid(gid_t g)
{
	kp_mount_all();
	int r = REAL(setfsgid)(g);
	changed_for_thread(C_GIDS);
	return r;
}

int capset(cap_user_header_t h, const cap_user_data_t d);
KP_EXPORT int capset(cap_user_header_t h, const cap_user_data_t d)
{
	kp_mount_all();
	int r = REAL(capset)(h, d);
	if (r == 0)
		changed_for_thread(C_UIDS);
	return r;
}

/* syscall() for every number the file system does not serve (syscall.c).
 * The raw system call changes only the calling thread's credentials. */
long kp_creds_syscall(long n, long a, long b, long c, long d, long e, long f)
{
	switch (n) {
	case SYS_setuid: case SYS_setreuid: case SYS_setresuid: case SYS_setfsuid: case SYS_capset:
	case SYS_setgid: case SYS_setregid: case SYS_setresgid: case SYS_setfsgid: case SYS_setgroups:
		kp_mount_all();
	}
	long r = kp_syscall(n, a, b, c, d, e, f);
	switch (n) {
	case SYS_setuid:
	case SYS_setreuid:
	case SYS_setresuid:
	case SYS_capset:
		if (r == 0)
			changed_for_thread(C_UIDS);
		break;
	case SYS_setfsuid:
		changed_for_thread(C_UIDS);
		break;
	case SYS_setgid:
	case SYS_setregid:
	case SYS_setresgid:
		if (r == 0)
			changed_for_thread(C_GIDS);
		break;
	case SYS_setfsgid:
		changed_for_thread(C_GIDS);
		break;
	case SYS_setgroups:
		if (r == 0)
			changed_for_thread(C_GROUPS);
		break;
	}
	return r;
}
