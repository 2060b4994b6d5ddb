/*
 * kura_atomic.h — atomic groups of writes for programs that must also run
 * without kura.  Header only: nothing to link.  Under kura (kura run, or
 * LD_PRELOAD=libkura.so) the calls reach kura_fbegin, kura_fcommit and
 * kura_fabort (kura.h); without it, or on a file kura does not serve, they
 * fall back to what the system offers: no group, a plain fdatasync.
 *
 *   int r = kura_atomic_fbegin(fd);   // 1: a group; 0: writes are not atomic
 *   ... pwrite(fd, ...) ...
 *   if (kura_atomic_fcommit(fd))     // atomic and durable (or fdatasync)
 *           ... error ...
 *
 * kura_atomic_fabort(fd) discards the group; where there is none to discard
 * (r was 0) it fails with ENOTSUP, since the writes already reached the file.
 *
 * Several files and names at once (kura_gbegin, kura.h):
 *
 *   int g = kura_atomic_gbegin();     // 1: a group; 0: nothing is atomic
 *   ... write files, rename, unlink, create ...
 *   if (kura_atomic_gcommit())        // atomic and durable (or sync())
 *           ... error ...
 */
#ifndef KURA_ATOMIC_H
#define KURA_ATOMIC_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <unistd.h>

typedef int (*kura_atomic_fn_)(int);
typedef int (*kura_atomic_fn0_)(void);

/* Looked up once per name and caller: dlsym costs more than a commit. */
#define kura_atomic_lookup_(type, name)                                                 \
	({                                                                             \
		static type fn_;                                                       \
		static int looked_;                                                    \
		if (!__atomic_load_n(&looked_, __ATOMIC_ACQUIRE)) {                    \
			__atomic_store_n(&fn_, (type)dlsym(RTLD_DEFAULT, name), __ATOMIC_RELAXED); \
			__atomic_store_n(&looked_, 1, __ATOMIC_RELEASE);               \
		}                                                                      \
		__atomic_load_n(&fn_, __ATOMIC_RELAXED);                               \
	})

/* 1: the descriptor's writes now form a group; 0: kura cannot group them
 * (not loaded, or not a kura file), and they go to the file as usual;
 * -1 with errno: an error (EBADF, EBUSY, ...). */
static inline int kura_atomic_fbegin(int fd)
{
	kura_atomic_fn_ f = kura_atomic_lookup_(kura_atomic_fn_, "kura_fbegin");
	if (!f)
		return 0;
	int saved = errno;
	if (f(fd) == 0)
		return 1;
	if (errno != ENOTSUP)
		return -1;
	errno = saved;
	return 0;
}

/* Commits the group (kura), or fdatasyncs the file: 0, or -1 with errno. */
static inline int kura_atomic_fcommit(int fd)
{
	kura_atomic_fn_ f = kura_atomic_lookup_(kura_atomic_fn_, "kura_fcommit");
	int saved = errno;
	if (f && f(fd) == 0)
		return 0;
	if (f && errno != ENOTSUP)
		return -1;
	errno = saved;
	return fdatasync(fd);
}

/* Discards the group: 0, or -1 with errno (ENOTSUP: there was none). */
static inline int kura_atomic_fabort(int fd)
{
	kura_atomic_fn_ f = kura_atomic_lookup_(kura_atomic_fn_, "kura_fabort");
	if (!f) {
		errno = ENOTSUP;
		return -1;
	}
	return f(fd);
}

/* 1: this process's writes to pool files and its changes of names in the
 * pool now form one group; 0: kura is not loaded; -1 with errno (EBUSY). */
static inline int kura_atomic_gbegin(void)
{
	kura_atomic_fn0_ f = kura_atomic_lookup_(kura_atomic_fn0_, "kura_gbegin");
	if (!f)
		return 0;
	return f() == 0 ? 1 : -1;
}

/* Commits the group (kura), or without kura makes everything durable
 * (sync: the writes were not grouped): 0, or -1 with errno. */
static inline int kura_atomic_gcommit(void)
{
	kura_atomic_fn0_ f = kura_atomic_lookup_(kura_atomic_fn0_, "kura_gcommit");
	if (f)
		return f();
	sync();
	return 0;
}

/* Discards the group: 0, or -1 with errno (ENOTSUP without kura). */
static inline int kura_atomic_gabort(void)
{
	kura_atomic_fn0_ f = kura_atomic_lookup_(kura_atomic_fn0_, "kura_gabort");
	if (!f) {
		errno = ENOTSUP;
		return -1;
	}
	return f();
}

#endif
