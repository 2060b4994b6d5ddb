/*
 * cwd.c — the virtual working directory: chdir, fchdir, getcwd and their
 * kin while it lies in a pool, and the /proc/self links (cwd, exe) that
 * name what the kernel cannot know.
 *
 * While the working directory is inside a prefix the kernel's own cwd is
 * left where it was and the layer keeps the virtual one: its name, kp_vcwd
 * (path.c), and a kura descriptor on the directory.  Relative paths are
 * looked up from the descriptor, so they follow the directory wherever it
 * is renamed, as the kernel's cwd does; the name is brought up to date
 * when it is asked for (getcwd, /proc/self/cwd, exec) or when ".." may
 * climb out of the pool.  A directory the process may search but not read
 * cannot be opened: it is kept by name alone, as before the descriptor.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kp.h"

/* Whether path is /proc/self/NAME (or thread-self's, or this pid's). */
static int proc_self_link(const char *path, const char *name)
{
	if (strncmp(path, "/proc/", 6) != 0)
		return 0;
	const char *s = path + 6;
	if (strncmp(s, "self/", 5) == 0)
		s += 5;
	else if (strncmp(s, "thread-self/", 12) == 0)
		s += 12;
	else {
		char *end;
		if (strtol(s, &end, 10) != (long)getpid() || *end != '/')
			return 0;
		s = end + 1;
	}
	return strcmp(s, name) == 0;
}

/* /proc/self/cwd while the working directory is in a pool: the kernel's
 * link names the directory the kernel has, not the virtual one. */
int kp_proc_cwd(const char *path)
{
	return kp_vcwd[0] && proc_self_link(path, "cwd");
}

/* /proc/self/exe of a program run from a pool: the kernel's link names the
 * copy it runs (memfd:exec-from-pool), and programs that find their own
 * files beside themselves (stdbuf its library, interpreters their
 * prefix) need the pool path. */
char *kp_pool_exe;

int kp_proc_exe(const char *path)
{
	return kp_pool_exe && proc_self_link(path, "exe");
}

/* The descriptor and its mount in one word, read without a lock by every
 * relative lookup: mount << 32 | (descriptor + 1), 0 for none. */
static uint64_t vcwd_ref;
static pthread_mutex_t vcwd_lock = PTHREAD_MUTEX_INITIALIZER;

/* A descriptor the working directory no longer uses is closed a few
 * changes later, not at once: another thread may be between a lookup
 * that took it and the engine call that uses it, and a number closed now
 * could by then name another file. */
#define RETIRED 8
static uint64_t retired[RETIRED];
static unsigned next_retired;

int kp_vcwd_dir(int *mnt)
{
	uint64_t v = __atomic_load_n(&vcwd_ref, __ATOMIC_ACQUIRE);
	if (!v)
		return -1;
	*mnt = (int)(v >> 32);
	return (int)(uint32_t)v - 1;
}

static void close_ref(uint64_t v)
{
	kura_fs *fs = v ? kp_fs((int)(v >> 32)) : NULL;
	if (fs)
		kura_close(fs, (int)(uint32_t)v - 1);
}

/* With vcwd_lock: the directory becomes host (the kernel's when ""), held
 * by kfd in mount mnt (-1: by name alone). */
static void switch_vcwd(const char *host, int mnt, int kfd)
{
	uint64_t old = __atomic_exchange_n(&vcwd_ref, kfd < 0 ? 0 : (uint64_t)mnt << 32 | (uint32_t)(kfd + 1),
					   __ATOMIC_ACQ_REL);
	if (host != kp_vcwd)
		snprintf(kp_vcwd, sizeof kp_vcwd, "%s", host);
	if (old) {
		unsigned i = next_retired++ % RETIRED;
		close_ref(retired[i]);
		retired[i] = old;
	}
}

static int set_vcwd(const char *host, int mnt, int kfd)
{
	if (strlen(host) >= sizeof kp_vcwd) {
		close_ref(kfd < 0 ? 0 : (uint64_t)mnt << 32 | (uint32_t)(kfd + 1));
		return -ENAMETOOLONG;
	}
	pthread_mutex_lock(&vcwd_lock);
	switch_vcwd(host, mnt, kfd);
	pthread_mutex_unlock(&vcwd_lock);
	return 0;
}

static void leave_vcwd(void)
{
	pthread_mutex_lock(&vcwd_lock);
	switch_vcwd("", 0, -1);
	pthread_mutex_unlock(&vcwd_lock);
}

/* Across fork: held, so that the child's copy is not locked by a thread
 * it does not have.  First of the layer's locks: it is taken before the
 * mount lock and the engine's (close_ref). */
void kp_vcwd_fork_prepare(void)
{
	pthread_mutex_lock(&vcwd_lock);
}

void kp_vcwd_fork_done(void)
{
	pthread_mutex_unlock(&vcwd_lock);
}

void kp_vcwd_adopt(int mnt, int kfd)
{
	if (!kp_vcwd[0]) { /* the name did not come over (or names no prefix) */
		close_ref((uint64_t)mnt << 32 | (uint32_t)(kfd + 1));
		return;
	}
	pthread_mutex_lock(&vcwd_lock);
	switch_vcwd(kp_vcwd, mnt, kfd);
	pthread_mutex_unlock(&vcwd_lock);
}

/* Without a descriptor: the name must still lead to a directory. */
static int vcwd_name_gone(void)
{
	struct kp_path kp;
	struct stat st;
	if (kp_classify(AT_FDCWD, kp_vcwd, &kp) || kp.where != KP_KURA || !kp_fs(kp.mnt))
		return 0;
	int r = kura_fstatat(kp_fs(kp.mnt), kp.kdirfd, kp.p, &st, 0);
	return r == -ENOENT || r == -ENOTDIR || (r == 0 && !S_ISDIR(st.st_mode));
}

int kp_vcwd_refresh(void)
{
	if (!kp_vcwd[0])
		return 0;
	int mnt, kfd = kp_vcwd_dir(&mnt);
	if (kfd < 0)
		return vcwd_name_gone() ? -ENOENT : 0;
	kura_fs *fs = kp_fs(mnt);
	char dir[PATH_MAX], host[PATH_MAX];
	int r = fs ? kura_getpath(fs, kfd, dir, sizeof dir) : -EBADF;
	if (r == -ERANGE)
		return -ENAMETOOLONG;
	if (r < 0)
		return r;
	if (snprintf(host, sizeof host, "%s%s", kp_mounts[mnt].prefix, strcmp(dir, "/") ? dir : "") >=
	    (int)sizeof host)
		return -ENAMETOOLONG;
	pthread_mutex_lock(&vcwd_lock);
	int now_mnt;
	if (kp_vcwd_dir(&now_mnt) == kfd && now_mnt == mnt) /* unless a chdir came between */
		snprintf(kp_vcwd, sizeof kp_vcwd, "%s", host);
	pthread_mutex_unlock(&vcwd_lock);
	return 0;
}

KP_EXPORT int chdir(const char *path)
{
	struct kp_path kp;
	/* The name is what the symlink check below walks. */
	if (kp_vcwd[0] && KP_PATH_OK(path) && path[0] != '/')
		kp_vcwd_refresh();
	int r = kp_classify(AT_FDCWD, path, &kp);
	if (r)
		return (int)kp_ret(r);
	char phys[PATH_MAX];
again:
	if (kp.where == KP_KURA && kp.host[0]) {
		/* Linux's cwd is the directory itself, not the symlinks that led
		 * there, and those may lead out of the pool. */
		if ((r = kp_check_last_form(&kp)) || (r = kp_kura_realpath(kp.host, phys)) ||
		    (r = kp_classify(AT_FDCWD, phys, &kp)))
			return (int)kp_ret(r);
	}
	if (kp.where != KP_KURA) {
		r = REAL(chdir)(kp.p);
		if (r == 0) {
			leave_vcwd();
			kp_refresh_real_cwd();
		} else if (KP_HOST_MISS() && kp_host_link(&kp, AT_FDCWD, 1)) {
			goto again;
		}
		return r;
	}
	kura_fs *fs = kp_fs(kp.mnt);
	if (!fs)
		return -1;
	struct stat st;
	r = kura_fstatat(fs, kp.kdirfd, kp.p, &st, 0);
	if (r == 0 && !S_ISDIR(st.st_mode))
		r = -ENOTDIR;
	if (r == 0)
		r = kura_faccessat(fs, kp.kdirfd, kp.p, X_OK, AT_EACCESS); /* the file-system ids, as chdir(2) */
	if (r == 0 && !kp.host[0])
		r = -ENOENT;
	if (r == 0) {
		int kfd = kura_openat(fs, kp.kdirfd, kp.p, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
		r = set_vcwd(kp.host, kp.mnt, kfd < 0 ? -1 : kfd);
	}
	return (int)kp_ret(r);
}

KP_EXPORT int fchdir(int fd)
{
	kp_config();
	struct kp_fd *e = kp_get(fd);
	if (!e) {
		int r = REAL(fchdir)(fd);
		if (r == 0) {
			leave_vcwd();
			kp_refresh_real_cwd();
		}
		return r;
	}
	char dir[PATH_MAX], host[PATH_MAX];
	int r = kura_getpath(kp_fs(e->mnt), e->kfd, dir, sizeof dir);
	if (r == 0) /* Linux: not a directory first, then the search permission */
		r = kura_faccessat(kp_fs(e->mnt), e->kfd, "", X_OK, AT_EACCESS | AT_EMPTY_PATH);
	if (r < 0)
		return (int)kp_ret(r);
	if (snprintf(host, sizeof host, "%s%s", kp_mounts[e->mnt].prefix, strcmp(dir, "/") ? dir : "") >=
	    (int)sizeof host)
		return (int)kp_ret(-ENAMETOOLONG);
	int kfd = kura_dup(kp_fs(e->mnt), e->kfd);
	return (int)kp_ret(set_vcwd(host, e->mnt, kfd < 0 ? -1 : kfd));
}

/* Linux's getcwd fails with ENOENT once the working directory is removed
 * (readlink -e . and realpath rely on it), and names it where it is now. */
/* The working directory's name now, copied under the lock (a chdir in
 * another thread may be rewriting it): 0, "" if it became the kernel's
 * meanwhile, or -errno. */
static int vcwd_now(char *dst)
{
	int r = kp_vcwd_refresh();
	if (r < 0)
		return r;
	pthread_mutex_lock(&vcwd_lock);
	memcpy(dst, kp_vcwd, strlen(kp_vcwd) + 1);
	pthread_mutex_unlock(&vcwd_lock);
	return 0;
}

KP_EXPORT char *getcwd(char *buf, size_t size)
{
	char now[PATH_MAX];
	int r = kp_vcwd[0] ? vcwd_now(now) : (now[0] = '\0', 0);
	if (r < 0) {
		errno = -r;
		return NULL;
	}
	if (!now[0])
		return REAL(getcwd)(buf, size);
	size_t l = strlen(now) + 1;
	if (buf && size == 0) {
		errno = EINVAL;
		return NULL;
	}
	if (size && l > size) {
		errno = ERANGE;
		return NULL;
	}
	if (!buf && !(buf = malloc(size > l ? size : l)))
		return NULL;
	memcpy(buf, now, l);
	return buf;
}

KP_EXPORT char *__getcwd_chk(char *buf, size_t size, size_t buflen)
{
	(void)buflen;
	return getcwd(buf, size);
}

KP_EXPORT char *getwd(char *buf)
{
	return getcwd(buf, PATH_MAX);
}

KP_EXPORT char *get_current_dir_name(void)
{
	char now[PATH_MAX];
	int r = kp_vcwd[0] ? vcwd_now(now) : (now[0] = '\0', 0);
	if (r < 0) {
		errno = -r;
		return NULL;
	}
	return now[0] ? strdup(now) : REAL(get_current_dir_name)();
}
