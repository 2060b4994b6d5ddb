/*
 * config.c — the mount table read from the environment, lazy mounting,
 * fork handlers and the debug/unsupported messages.
 *
 * KURA_MOUNT is one prefix ("/kura", the default) served by KURA_POOL (the
 * default pool when unset), or a ':'-separated list of PREFIX=POOL pairs.
 * Parsing is cheap and needs no engine call; the pool is mapped the first
 * time a path under its prefix is used, so a preloaded process that never
 * touches the prefix pays nothing.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kp.h"

struct kp_mount kp_mounts[KP_MAX_MOUNTS];
int kp_nmounts;
__thread int kp_inside;
int kp_debug_on;
pid_t kp_pid;

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mount_lock = PTHREAD_MUTEX_INITIALIZER;

static void add_mount(const char *prefix, size_t plen, const char *pool)
{
	/* `kura run` refuses such prefixes with the reason; set by hand, they
	 * are dropped, and said so under KURA_DEBUG. */
	int shown = plen < 200 ? (int)plen : 200;
	if (kp_nmounts >= KP_MAX_MOUNTS || plen == 0 || plen >= PATH_MAX || prefix[0] != '/') {
		kp_debug("KURA_MOUNT: prefix '%.*s' ignored: %s", shown, prefix,
			 kp_nmounts >= KP_MAX_MOUNTS ? "too many prefixes" : "not an absolute path below PATH_MAX");
		return;
	}
	struct kp_mount *m = &kp_mounts[kp_nmounts];
	memcpy(m->prefix, prefix, plen);
	m->prefix[plen] = '\0';
	kp_normalise(m->prefix);
	m->plen = strlen(m->prefix);
	if (m->plen <= 1) { /* "/" as a prefix would swallow the whole host */
		kp_debug("KURA_MOUNT: prefix '%.*s' ignored: it names /", shown, prefix);
		return;
	}
	if (pool && *pool)
		snprintf(m->pool, sizeof m->pool, "%s", pool);
	else if (kura_default_pool_path(m->pool, sizeof m->pool) < 0)
		return;
	kp_nmounts++;
}

static void parse(void)
{
	const char *mnt = getenv("KURA_MOUNT");
	const char *pool = getenv("KURA_POOL");
	kp_debug_on = getenv("KURA_DEBUG") && *getenv("KURA_DEBUG");
	kp_pid = (pid_t)kp_syscall(SYS_getpid);
	if (!mnt || !*mnt)
		mnt = "/kura";
	while (*mnt) {
		const char *end = strchr(mnt, ':');
		size_t len = end ? (size_t)(end - mnt) : strlen(mnt);
		const char *eq = memchr(mnt, '=', len);
		if (eq) {
			char p[PATH_MAX];
			size_t pl = len - (size_t)(eq + 1 - mnt);
			if (pl < sizeof p) {
				memcpy(p, eq + 1, pl);
				p[pl] = '\0';
				add_mount(mnt, (size_t)(eq - mnt), p);
			}
		} else {
			add_mount(mnt, len, pool);
		}
		mnt += len + (end ? 1 : 0);
	}
}

void kp_config(void)
{
	pthread_once(&config_once, parse);
}

kura_fs *kp_fs(int m)
{
	struct kp_mount *mt = &kp_mounts[m];
	kura_fs *fs = __atomic_load_n(&mt->fs, __ATOMIC_ACQUIRE);
	kp_creds_sync(); /* the engine call that follows checks them */
	if (fs)
		return fs;
	sighold_lock(&mount_lock);
	if (!mt->fs) {
		/* Programs store host paths in symlinks: the engine resolves
		 * them as the host would see them from the prefix. */
		struct kura_mount_opts opts = { .persist = KURA_PERSIST_AUTO, .host_prefix = mt->prefix };
		int err = 0;
		kp_inside++;
		fs = kura_mount(mt->pool, &opts, &err);
		/* A pool this user may only read is mounted read-only, as the
		 * kernel mounts a read-only device: reads work, changes EROFS. */
		if (!fs && err == -EACCES) {
			opts.read_only = 1;
			fs = kura_mount(mt->pool, &opts, &err);
		}
		kp_inside--;
		if (!fs) {
			kp_debug("mount %s: %s", mt->pool, kura_last_error());
			sighold_unlock(&mount_lock);
			errno = err ? -err : EIO;
			return NULL;
		}
		__atomic_store_n(&mt->fs, fs, __ATOMIC_RELEASE);
		kp_notify_attach(m);
	}
	sighold_unlock(&mount_lock);
	return mt->fs;
}

void kp_mount_all(void)
{
	static int done; /* a pool missing now, or unreadable after a drop, stays so */
	if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
		return;
	kp_config();
	int er = errno;
	for (int m = 0; m < kp_nmounts; m++)
		if (kp_fs(m))
			kp_lock_exec_table(m); /* the lock table too: attached as the pool's users are */
	errno = er;
}

/* Adopts an already mounted engine (after exec). */
void kp_set_fs(int m, kura_fs *fs)
{
	kura_set_host_prefix(fs, kp_mounts[m].prefix); /* kura_mount_inherit got no host_prefix */
	__atomic_store_n(&kp_mounts[m].fs, fs, __ATOMIC_RELEASE);
	kp_notify_attach(m);
}

void kp_debug(const char *fmt, ...)
{
	if (!kp_debug_on)
		return;
	char buf[512];
	int n = snprintf(buf, sizeof buf, "kura[%d]: ", (int)kp_pid);
	va_list ap;
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof buf - 2)
		n = (int)sizeof buf - 2;
	buf[n++] = '\n';
	/* A raw write: stderr's stream may itself be one of ours. */
	kp_syscall(SYS_write, 2, buf, (size_t)n);
}

int kp_unsupported(const char *what, int err)
{
	/* A small fixed table of names already reported; enough for a debug aid. */
	static const char *seen[64];
	static pthread_mutex_t lk = PTHREAD_MUTEX_INITIALIZER;
	if (kp_debug_on) {
		int fresh = 1;
		sighold_lock(&lk);
		for (int i = 0; i < 64 && seen[i]; i++)
			if (strcmp(seen[i], what) == 0)
				fresh = 0;
		for (int i = 0; fresh && i < 64; i++)
			if (!seen[i]) {
				seen[i] = what;
				break;
			}
		sighold_unlock(&lk);
		if (fresh)
			kp_debug("%s is not supported on kura files (%s)", what, strerror(err));
	}
	errno = err;
	return -1;
}

/* ---- fork ---- */

static void fork_prepare(void)
{
	kp_vcwd_fork_prepare();
	kp_map_fork_prepare();
	pthread_mutex_lock(&mount_lock);
	pthread_mutex_lock(kp_tab_lock());
	kp_lock_fork_prepare(); /* before the engine's fd table is frozen: it reads it */
	for (int i = 0; i < kp_nmounts; i++)
		if (kp_mounts[i].fs)
			kura_fork_prepare(kp_mounts[i].fs);
	kp_creds_fork_prepare();
}

static void fork_parent(void)
{
	kp_creds_fork_done();
	for (int i = kp_nmounts - 1; i >= 0; i--)
		if (kp_mounts[i].fs)
			kura_fork_parent(kp_mounts[i].fs);
	kp_lock_fork_parent();
	pthread_mutex_unlock(kp_tab_lock());
	pthread_mutex_unlock(&mount_lock);
	kp_map_fork_done();
	kp_vcwd_fork_done();
}

static void fork_child(void)
{
	kp_pid = (pid_t)kp_syscall(SYS_getpid);
	kp_creds_fork_done();
	for (int i = kp_nmounts - 1; i >= 0; i--)
		if (kp_mounts[i].fs)
			kura_fork_child(kp_mounts[i].fs);
	kp_lock_fork_child();
	pthread_mutex_unlock(kp_tab_lock());
	pthread_mutex_unlock(&mount_lock);
	kp_map_fork_done();
	kp_vcwd_fork_done();
}

/* The last process of a pool to exit writes it home and leaves nothing
 * behind in /dev/shm (a program that dies by a signal cannot: the next
 * mount takes over what it left, kura gc removes it).  Every process lets
 * go of its descriptions first, as the kernel closes a process's files:
 * a forked child holds a reference on each it inherited, which would
 * otherwise keep files unlinked since allocated until the pool is next
 * mounted alone.  glibc flushes stdio buffers after the destructors, so
 * they are flushed here first, while the descriptors still work; this
 * destructor runs after the program's and its other libraries' (the
 * preloaded library is finalised after them), so nothing of theirs can
 * write to a kura descriptor afterwards. */
__attribute__((destructor)) static void kp_fini(void)
{
	fflush(NULL);
	kp_release_all();
	for (int i = 0; i < kp_nmounts; i++) {
		kura_fs *fs = __atomic_load_n(&kp_mounts[i].fs, __ATOMIC_ACQUIRE);
		if (fs) {
			kp_inside++;
			kura_release(fs);
			kp_inside--;
			kp_notify_fini(i);
		}
	}
}

/* Eager: a program such as /bin/echo writes to an inherited fd 1 before it
 * calls anything we wrap, so inherited descriptors are adopted here. */
__attribute__((constructor)) static void kp_init(void)
{
	kp_config();
	kp_creds_init(); /* after exec: whatever the new image runs as */
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	kp_inherit();
}
