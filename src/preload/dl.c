/*
 * dl.c — dlopen(3) of a shared object stored in a pool.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
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
 * ld.so's messages name what it opened; dlerror() gives them back with the
 * name the program passed instead of /proc/self/fd/N. */
#define DL_COPIES 64
static struct dl_copy {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	int mfd;
	ino_t mfd_ino; /* a program may close every descriptor: is mfd still ours? */
} dl_copies[DL_COPIES];
static int dl_ncopies;
static pthread_mutex_t dl_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread char dl_msg[1024];
static __thread int dl_msg_pending;

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
	pthread_mutex_lock(&dl_lock);
	for (int i = 0; i < dl_ncopies; i++) {
		struct dl_copy *c = &dl_copies[i];
		struct stat mst;
		if (REAL(fstat)(c->mfd, &mst) || mst.st_ino != c->mfd_ino) {
			*c = dl_copies[--dl_ncopies]; /* not ours now: not ours to close either */
			i--;
			continue;
		}
		if (c->dev == st.st_dev && c->ino == st.st_ino) {
			if (c->size == st.st_size && c->mtime.tv_sec == st.st_mtim.tv_sec &&
			    c->mtime.tv_nsec == st.st_mtim.tv_nsec) {
				*kept = 1;
				pthread_mutex_unlock(&dl_lock);
				return c->mfd;
			}
			/* Changed since: objects loaded from the old copy keep its pages. */
			REAL(close)(c->mfd);
			*c = dl_copies[--dl_ncopies];
			break;
		}
	}
	int mfd = copy_to_memfd(path);
	struct stat mst;
	if (mfd >= 0 && dl_ncopies < DL_COPIES && !REAL(fstat)(mfd, &mst)) {
		dl_copies[dl_ncopies++] = (struct dl_copy){ st.st_dev, st.st_ino, st.st_size, st.st_mtim, mfd, mst.st_ino };
		*kept = 1;
	}
	pthread_mutex_unlock(&dl_lock);
	return mfd;
}

/* ld.so's last message with proc replaced by name, for dlerror(). */
static void keep_message(const char *proc, const char *name)
{
	const char *e = REAL(dlerror)();
	if (!e)
		return;
	size_t plen = strlen(proc), at = 0;
	for (const char *p = e; *p && at + 1 < sizeof dl_msg;) {
		if (!strncmp(p, proc, plen) && (p[plen] < '0' || p[plen] > '9')) {
			at += (size_t)snprintf(dl_msg + at, sizeof dl_msg - at, "%s", name);
			if (at >= sizeof dl_msg)
				at = sizeof dl_msg - 1;
			p += plen;
		} else {
			dl_msg[at++] = *p++;
		}
	}
	dl_msg[at] = 0;
	dl_msg_pending = 1;
}

KP_EXPORT char *dlerror(void)
{
	if (dl_msg_pending) {
		dl_msg_pending = 0;
		return dl_msg;
	}
	return REAL(dlerror)();
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
	if (!h)
		keep_message(proc, file);
	if (!kept)
		REAL(close)(mfd); /* the mapping keeps the memfd's pages */
	return h;
}
