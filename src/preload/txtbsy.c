/*
 * txtbsy.c — ETXTBSY for pool files: no writing to a program a process is
 * executing, no executing a file this process has open for writing.
 *
 * The kernel executes a pool file from a copy (proc.c), so it cannot know.
 * The executing process records, in the pool's lock table, the pool inode
 * and the identity of its copy before it copies; a record counts while
 * /proc/PID/exe is that copy (the program runs) or, until the exec, while
 * the process holds the copy at the descriptor it noted.  A process that
 * died or went on to execute something else so stops counting without
 * cleaning up, and its record is reused.  Scripts are not recorded: Linux
 * keeps a script writable once its interpreter runs.
 *
 * Writers look at the table only when it holds records, so an open for
 * writing costs a load while nothing runs from the pool.  The other
 * direction sees this process's own descriptors only: descriptions held by
 * other processes are not known to be alive (their holders may have died
 * without closing them).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kp.h"

/* Whether path (a /proc link) leads to the copy named by r. */
static int is_copy(const char *path, const struct kp_exec_rec *r)
{
	struct stat st;
	return REAL(stat)(path, &st) == 0 && (uint64_t)st.st_dev == r->kdev && (uint64_t)st.st_ino == r->kino;
}

/* 1 counts, 0 stale, -1 cannot tell (another user's process): counts.
 * The table is shared: a record is only a claim, checked against /proc. */
static int rec_counts(const struct kp_exec_rec *r)
{
	char path[64];
	if (r->pid <= 0)
		return 0;
	snprintf(path, sizeof path, "/proc/%d/exe", (int)r->pid);
	if (is_copy(path, r))
		return 1;
	int er = errno;
	if (r->fd >= 0) {
		snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)r->pid, (int)r->fd);
		if (is_copy(path, r))
			return 1;
	}
	return er == EACCES && kill(r->pid, 0) == 0 ? -1 : 0;
}

/* The table of mount m, or NULL; a process that cannot have it (the lock
 * table is another user's) does not ask again at every open. */
static struct kp_exec_table *exec_table(int m)
{
	static int unavailable[KP_MAX_MOUNTS];
	if (__atomic_load_n(&unavailable[m], __ATOMIC_RELAXED))
		return NULL;
	struct kp_exec_table *t = kp_lock_exec_table(m);
	if (!t)
		__atomic_store_n(&unavailable[m], 1, __ATOMIC_RELAXED);
	return t;
}

int kp_exec_mark(int m, uint64_t ino, int mfd)
{
	struct stat st;
	struct kp_exec_table *t = exec_table(m);
	if (!t || REAL(fstat)(mfd, &st) < 0)
		return 0;
	int mark = 0;
	kp_lock_exec_lock(m);
	for (int i = 0; i < KP_EXECS && !mark; i++) {
		struct kp_exec_rec *r = &t->rec[i];
		if (r->ino && rec_counts(r))
			continue;
		if (!r->ino)
			t->n++;
		*r = (struct kp_exec_rec){ .ino = ino, .kdev = st.st_dev, .kino = st.st_ino, .pid = kp_pid, .fd = mfd };
		mark = i + 1;
	}
	kp_lock_exec_unlock(m);
	return mark;
}

void kp_exec_unmark(int m, int mark)
{
	struct kp_exec_table *t = mark ? exec_table(m) : NULL;
	if (!t)
		return;
	kp_lock_exec_lock(m);
	struct kp_exec_rec *r = &t->rec[mark - 1];
	if (r->ino && r->pid == kp_pid) {
		r->ino = 0;
		t->n--;
	}
	kp_lock_exec_unlock(m);
}

int kp_exec_busy(int m, uint64_t ino)
{
	struct kp_exec_table *t = exec_table(m);
	if (!t || !__atomic_load_n(&t->n, __ATOMIC_ACQUIRE))
		return 0;
	int busy = 0;
	kp_lock_exec_lock(m);
	for (int i = 0; i < KP_EXECS && !busy; i++) {
		struct kp_exec_rec *r = &t->rec[i];
		if (r->ino != ino)
			continue;
		if (rec_counts(r))
			busy = 1;
		else {
			r->ino = 0;
			t->n--;
		}
	}
	kp_lock_exec_unlock(m);
	return busy;
}

struct writing {
	int m;
	uint64_t ino;
	int found;
};

static void writing_fd(int fd, struct kp_fd *e, void *arg)
{
	(void)fd;
	struct writing *w = arg;
	kura_fs *fs = kp_mounts[e->mnt].fs;
	if (w->found || e->mnt != w->m || !fs || (kura_fd_flags(fs, e->kfd) & O_ACCMODE) == O_RDONLY)
		return;
	w->found = kura_fd_ino(fs, e->kfd) == (int64_t)w->ino;
}

int kp_exec_writing(int m, uint64_t ino)
{
	struct writing w = { m, ino, 0 };
	kp_foreach(writing_fd, &w);
	return w.found;
}

int kp_exec_check_write(int m, int kdirfd, const char *path, int follow, int acc)
{
	struct kp_exec_table *t = exec_table(m);
	if (!t || !__atomic_load_n(&t->n, __ATOMIC_ACQUIRE))
		return 0;
	kura_fs *fs = kp_fs(m);
	struct stat st;
	if (!fs || kura_fstatat(fs, kdirfd, path, &st, follow ? 0 : AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
	    !kp_exec_busy(m, st.st_ino))
		return 0; /* the call itself reports what is wrong */
	int mask = acc == O_RDWR ? R_OK | W_OK : acc == O_WRONLY ? W_OK : R_OK; /* O_RDONLY|O_TRUNC writes too */
	int r = kura_faccessat(fs, kdirfd, path, mask | W_OK, AT_EACCESS | (follow ? 0 : AT_SYMLINK_NOFOLLOW));
	return r < 0 && r != KURA_ESCAPED ? r : -ETXTBSY;
}
