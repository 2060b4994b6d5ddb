/*
 * dl.c — dlopen(3) of a shared object stored in a pool.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kp.h"

extern char **environ;

/* ---- dlopen of a library stored in the pool ----
 * ld.so reads libraries with its own system calls, so a library under the
 * prefix is copied to a memfd and loaded through /proc/self/fd.  Libraries
 * it names in DT_NEEDED are looked up by ld.so itself and must be on the
 * host.
 *
 * ld.so knows a library it has loaded by the device and inode of what it
 * opened, so each pool file keeps its memfd (while its size and mtime stay
 * the same): a second dlopen of it, or one with RTLD_NOLOAD, finds the
 * same object instead of loading another copy with its own globals.
 * ld.so's messages name what it opened, and go on naming it for the life
 * of the object (dlsym's "undefined symbol" too); dlerror() gives them back
 * with the name the program passed instead of /proc/self/fd/N. */
#define DL_COPIES 64
static struct dl_copy {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	int mfd;
	ino_t mfd_ino; /* a program may close every descriptor: is mfd still ours? */
	char *name;    /* as the program named it first */
} dl_copies[DL_COPIES];
static int dl_ncopies;
static pthread_mutex_t dl_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread char dl_msg[1024];
static __thread int dl_msg_pending;

/* Every dl* call clears the error the last one left, dlsym too: resolving
 * dlerror lazily, between a failed dlopen and the program's dlerror(),
 * would lose the message.  So it is resolved before any of them. */
static char *(*real_dlerror)(void);
__attribute__((constructor)) static void resolve_dlerror(void)
{
	real_dlerror = (char *(*)(void))dlsym(RTLD_NEXT, "dlerror");
}

static void forget_copy(struct dl_copy *c)
{
	free(c->name);
	*c = dl_copies[--dl_ncopies];
}

static int copy_to_memfd(const char *path)
{
	int in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -1;
	int mfd = memfd_create("dlopen-from-pool", MFD_CLOEXEC);
	if (mfd < 0) {
		close(in);
		return -1;
	}
	ssize_t r = kp_copy_all(in, mfd);
	int err = errno;
	close(in);
	if (r < 0) {
		REAL(close)(mfd);
		errno = err;
		return -1;
	}
	return mfd;
}

/* The memfd for path's current contents; *kept says the table holds it. */
static int library_copy(const char *path, int *kept)
{
	struct stat st;
	*kept = 0;
	if (stat(path, &st))
		return -1;
	sighold_lock(&dl_lock);
	for (int i = 0; i < dl_ncopies; i++) {
		struct dl_copy *c = &dl_copies[i];
		struct stat mst;
		if (REAL(fstat)(c->mfd, &mst) || mst.st_ino != c->mfd_ino) {
			forget_copy(c); /* not ours now: not ours to close either */
			i--;
			continue;
		}
		if (c->dev == st.st_dev && c->ino == st.st_ino) {
			if (c->size == st.st_size && c->mtime.tv_sec == st.st_mtim.tv_sec &&
			    c->mtime.tv_nsec == st.st_mtim.tv_nsec) {
				*kept = 1;
				sighold_unlock(&dl_lock);
				return c->mfd;
			}
			/* Changed since: objects loaded from the old copy keep its pages. */
			REAL(close)(c->mfd);
			forget_copy(c);
			break;
		}
	}
	int mfd = copy_to_memfd(path);
	struct stat mst;
	char *name = mfd >= 0 ? strdup(path) : NULL;
	if (name && dl_ncopies < DL_COPIES && !REAL(fstat)(mfd, &mst)) {
		dl_copies[dl_ncopies++] =
			(struct dl_copy){ st.st_dev, st.st_ino, st.st_size, st.st_mtim, mfd, mst.st_ino, name };
		*kept = 1;
	} else {
		free(name);
	}
	sighold_unlock(&dl_lock);
	return mfd;
}

/* The name a program gave the copy in descriptor fd, or NULL. */
static const char *copy_name(int fd, int extra_fd, const char *extra_name)
{
	if (fd == extra_fd)
		return extra_name;
	for (int i = 0; i < dl_ncopies; i++)
		if (dl_copies[i].mfd == fd)
			return dl_copies[i].name;
	return NULL;
}

/* msg with each /proc/self/fd/N of a copy replaced by the copy's name, into
 * dl_msg; extra_fd names a copy the table does not hold (or -1). */
static void rename_copies(const char *msg, int extra_fd, const char *extra_name)
{
	static const char proc[] = "/proc/self/fd/";
	size_t at = 0;
	sighold_lock(&dl_lock);
	for (const char *p = msg; *p && at + 1 < sizeof dl_msg;) {
		const char *name = NULL;
		char *end = NULL;
		if (!strncmp(p, proc, sizeof proc - 1) && p[sizeof proc - 1] >= '0' && p[sizeof proc - 1] <= '9') {
			long fd = strtol(p + sizeof proc - 1, &end, 10);
			if (fd >= 0 && fd <= INT_MAX)
				name = copy_name((int)fd, extra_fd, extra_name);
		}
		if (name) {
			at += (size_t)snprintf(dl_msg + at, sizeof dl_msg - at, "%s", name);
			if (at >= sizeof dl_msg)
				at = sizeof dl_msg - 1;
			p = end;
		} else {
			dl_msg[at++] = *p++;
		}
	}
	dl_msg[at] = 0;
	sighold_unlock(&dl_lock);
}

KP_EXPORT char *dlerror(void)
{
	if (dl_msg_pending) {
		dl_msg_pending = 0;
		return dl_msg;
	}
	if (!real_dlerror) /* called from a constructor that ran before ours */
		resolve_dlerror();
	char *e = real_dlerror();
	if (!e || !strstr(e, "/proc/self/fd/"))
		return e;
	rename_copies(e, -1, NULL);
	return dl_msg;
}

KP_EXPORT void *dlopen(const char *file, int mode)
{
	struct kp_path kp;
	dl_msg_pending = 0;
	if (!KP_NN(file) || !strchr(file, '/') || kp_resolve(AT_FDCWD, file, &kp) != 0)
		return REAL(dlopen)(file, mode);
	if (kp.where != KP_KURA) /* kp.p: where a kura symlink led, if it left the pool */
		return REAL(dlopen)(kp.p, mode);
	int kept, mfd = library_copy(file, &kept);
	if (mfd < 0) {
		snprintf(dl_msg, sizeof dl_msg, "%s: cannot open shared object file: %s", file, strerror(errno));
		dl_msg_pending = 1;
		return NULL;
	}
	char proc[64];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", mfd);
	void *h = REAL(dlopen)(proc, mode);
	if (!h) {
		const char *e = real_dlerror();
		if (e) {
			rename_copies(e, mfd, file);
			dl_msg_pending = 1;
		}
	}
	if (!kept)
		REAL(close)(mfd); /* the mapping keeps the memfd's pages */
	return h;
}
