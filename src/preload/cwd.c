/*
 * cwd.c — the virtual working directory: chdir, fchdir, getcwd and their
 * kin while it lies in a pool, and the /proc/self links (cwd, exe) that
 * name what the kernel cannot know.
 *
 * While the working directory is inside a prefix the kernel's own cwd is
 * left where it was and kp_vcwd (path.c) holds the virtual one, a name.
 */
#define _GNU_SOURCE
#include <fcntl.h>
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

static int set_vcwd(const char *host)
{
	size_t l = strlen(host);
	if (l >= sizeof kp_vcwd)
		return -ENAMETOOLONG;
	memcpy(kp_vcwd, host, l + 1);
	return 0;
}

KP_EXPORT int chdir(const char *path)
{
	struct kp_path kp;
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
			kp_vcwd[0] = '\0';
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
	if (r == 0)
		r = set_vcwd(kp.host);
	return (int)kp_ret(r);
}

KP_EXPORT int fchdir(int fd)
{
	kp_config();
	struct kp_fd *e = kp_get(fd);
	if (!e) {
		int r = REAL(fchdir)(fd);
		if (r == 0) {
			kp_vcwd[0] = '\0';
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
	return (int)kp_ret(set_vcwd(host));
}

/* Linux's getcwd fails with ENOENT once the working directory is removed
 * (readlink -e . and realpath rely on it); the virtual one is a name, so
 * the name must still lead to a directory. */
static int vcwd_gone(void)
{
	struct kp_path kp;
	struct stat st;
	if (kp_classify(AT_FDCWD, kp_vcwd, &kp) || kp.where != KP_KURA || !kp_fs(kp.mnt))
		return 0;
	int r = kura_fstatat(kp_fs(kp.mnt), kp.kdirfd, kp.p, &st, 0);
	return r == -ENOENT || r == -ENOTDIR || (r == 0 && !S_ISDIR(st.st_mode));
}

KP_EXPORT char *getcwd(char *buf, size_t size)
{
	if (!kp_vcwd[0])
		return REAL(getcwd)(buf, size);
	if (vcwd_gone()) {
		errno = ENOENT;
		return NULL;
	}
	size_t l = strlen(kp_vcwd) + 1;
	if (!buf) {
		buf = malloc(size > l ? size : l);
		if (!buf)
			return NULL;
		size = size > l ? size : l;
	}
	if (size == 0) {
		errno = EINVAL;
		return NULL;
	}
	if (l > size) {
		errno = ERANGE;
		return NULL;
	}
	memcpy(buf, kp_vcwd, l);
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
	if (vcwd_gone()) {
		errno = ENOENT;
		return NULL;
	}
	return strdup(kp_vcwd);
}
