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

/* Set while the directory's name does not fit kp_vcwd (Linux's cwd may lie
 * deeper than PATH_MAX) or is not known (it was removed): kp_vcwd then
 * holds just its mount's prefix, and only the descriptor knows where it is. */
static int vcwd_unnamed;

int kp_vcwd_named(void)
{
	return !__atomic_load_n(&vcwd_unnamed, __ATOMIC_ACQUIRE);
}

/* With vcwd_lock: the directory becomes host (the kernel's when "", one
 * with no name kp_vcwd can hold when NULL), held by kfd in mount mnt (-1:
 * by name alone). */
static void switch_vcwd(const char *host, int mnt, int kfd)
{
	uint64_t old = __atomic_exchange_n(&vcwd_ref, kfd < 0 ? 0 : (uint64_t)mnt << 32 | (uint32_t)(kfd + 1),
					   __ATOMIC_ACQ_REL);
	if (!host)
		snprintf(kp_vcwd, sizeof kp_vcwd, "%s", kp_mounts[mnt].prefix);
	else if (host != kp_vcwd)
		snprintf(kp_vcwd, sizeof kp_vcwd, "%s", host);
	__atomic_store_n(&vcwd_unnamed, !host, __ATOMIC_RELEASE);
	if (old) {
		unsigned i = next_retired++ % RETIRED;
		close_ref(retired[i]);
		retired[i] = old;
	}
}

/* The host name of the directory kfd holds, of any length (malloc'd), or
 * NULL with errno (ENOENT: it was removed). */
static char *name_of(int mnt, int kfd)
{
	kura_fs *fs = kp_fs(mnt);
	if (!fs)
		return NULL;
	size_t pl = strlen(kp_mounts[mnt].prefix);
	for (size_t cap = PATH_MAX;; cap *= 4) {
		char *name = malloc(pl + cap);
		if (!name)
			return NULL;
		int r = kura_getpath(fs, kfd, name + pl, cap);
		if (r == 0) {
			memcpy(name, kp_mounts[mnt].prefix, pl);
			if (!strcmp(name + pl, "/"))
				name[pl] = '\0';
			return name;
		}
		free(name);
		if (r != -ERANGE || cap >= (1u << 24)) {
			errno = r == -ERANGE ? ENAMETOOLONG : -r;
			return NULL;
		}
	}
}

/* The directory kfd holds becomes the working one, named from the
 * descriptor; one that was removed may be, as on Linux (getcwd then says
 * ENOENT). */
static int set_vcwd_fd(int mnt, int kfd)
{
	char *name = name_of(mnt, kfd);
	if (!name && errno != ENOENT && errno != ENAMETOOLONG) {
		int er = errno;
		close_ref((uint64_t)mnt << 32 | (uint32_t)(kfd + 1));
		return -er;
	}
	sighold_lock(&vcwd_lock);
	switch_vcwd(name && strlen(name) < sizeof kp_vcwd ? name : NULL, mnt, kfd);
	sighold_unlock(&vcwd_lock);
	free(name);
	return 0;
}

/* By name alone: a directory the process may search but not read. */
static int set_vcwd_name(const char *host, int mnt)
{
	if (strlen(host) >= sizeof kp_vcwd)
		return -ENAMETOOLONG;
	sighold_lock(&vcwd_lock);
	switch_vcwd(host, mnt, -1);
	sighold_unlock(&vcwd_lock);
	return 0;
}

static void leave_vcwd(void)
{
	sighold_lock(&vcwd_lock);
	switch_vcwd("", 0, -1);
	sighold_unlock(&vcwd_lock);
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
	set_vcwd_fd(mnt, kfd);
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

char *kp_vcwd_name(void)
{
	int mnt, kfd = kp_vcwd_dir(&mnt);
	if (kfd >= 0)
		return name_of(mnt, kfd);
	if (kp_vcwd[0] && vcwd_name_gone()) {
		errno = ENOENT;
		return NULL;
	}
	sighold_lock(&vcwd_lock);
	char *name = strdup(kp_vcwd);
	sighold_unlock(&vcwd_lock);
	return name;
}

int kp_vcwd_refresh(void)
{
	int mnt, kfd = kp_vcwd_dir(&mnt);
	if (!kp_vcwd[0] || kfd < 0)
		return kp_vcwd[0] && vcwd_name_gone() ? -ENOENT : 0;
	char *name = name_of(mnt, kfd);
	if (!name && errno != ENAMETOOLONG)
		return -errno;
	sighold_lock(&vcwd_lock);
	int now_mnt;
	if (kp_vcwd_dir(&now_mnt) == kfd && now_mnt == mnt) { /* unless a chdir came between */
		const char *to = name && strlen(name) < sizeof kp_vcwd ? name : NULL;
		snprintf(kp_vcwd, sizeof kp_vcwd, "%s", to ? to : kp_mounts[mnt].prefix);
		__atomic_store_n(&vcwd_unnamed, !to, __ATOMIC_RELEASE);
	}
	sighold_unlock(&vcwd_lock);
	free(name);
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
	if (r == 0) {
		int kfd = kura_openat(fs, kp.kdirfd, kp.p, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
		if (kfd >= 0)
			r = set_vcwd_fd(kp.mnt, kfd);
		else /* by name alone, which must fit */
			r = kp.host[0] ? set_vcwd_name(kp.host, kp.mnt) : -ENAMETOOLONG;
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
	kura_fs *fs = kp_fs(e->mnt);
	struct stat st;
	int r = kura_fstat(fs, e->kfd, &st);
	if (r == 0 && !S_ISDIR(st.st_mode))
		r = -ENOTDIR;
	if (r == 0) /* Linux: not a directory first, then the search permission */
		r = kura_faccessat(fs, e->kfd, "", X_OK, AT_EACCESS | AT_EMPTY_PATH);
	int kfd = r < 0 ? r : kura_dup(fs, e->kfd);
	return (int)kp_ret(kfd < 0 ? kfd : set_vcwd_fd(e->mnt, kfd));
}

/* Linux's getcwd fails with ENOENT once the working directory is removed
 * (readlink -e . and realpath rely on it), and names it where it is now. */
KP_EXPORT char *getcwd(char *buf, size_t size)
{
	if (!kp_vcwd[0])
		return REAL(getcwd)(buf, size);
	/* Of any length: glibc walks up past what the kernel's getcwd returns. */
	char *now = kp_vcwd_name();
	if (!now)
		return NULL;
	if (!*now) { /* it became the kernel's meanwhile */
		free(now);
		return REAL(getcwd)(buf, size);
	}
	size_t l = strlen(now) + 1;
	int err = buf && size == 0 ? EINVAL : size && l > size ? ERANGE : buf && !KP_MEM_FILL_OK(buf, l) ? EFAULT : 0;
	if (!err && !buf && !(buf = malloc(size > l ? size : l)))
		err = ENOMEM;
	if (!err)
		memcpy(buf, now, l);
	free(now);
	if (err) {
		errno = err;
		return NULL;
	}
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
	if (!kp_vcwd[0])
		return REAL(get_current_dir_name)();
	char *now = kp_vcwd_name();
	if (now && !*now) {
		free(now);
		return REAL(get_current_dir_name)();
	}
	return now;
}
