/*
 * notify_api.c — inotify_add_watch and inotify_rm_watch for instances that
 * watch pool paths, and what happens to those instances at exec
 * (notify_inst.c's opening comment says how an instance becomes ours).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <unistd.h>

#include "notify.h"

/* Under kn_mu: the kernel instance at fd becomes ours (see the top).  Its
 * watches keep their wds, read from fdinfo. */
static void kn_mark_fd(int fd);
static struct inst *take_over(int fd)
{
	char lnk[64], path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	ssize_t n = REAL(readlink)(path, lnk, sizeof lnk - 1);
	if (n < 0 || (lnk[n] = 0, strcmp(lnk, "anon_inode:inotify"))) {
		errno = EINVAL;
		return NULL;
	}
	int r = kn_start_thread();
	if (r) {
		errno = -r;
		return NULL;
	}
	struct inst *in = calloc(1, sizeof *in);
	int sv[2] = { -1, -1 };
	if (in)
		in->kfd = in->my = -1;
	int fl = REAL(fcntl)(fd, F_GETFL), fdfl = REAL(fcntl)(fd, F_GETFD);
	if (!in || fl < 0 || fdfl < 0 || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		goto fail;
	in->kfd = kn_high(REAL(fcntl)(fd, F_DUPFD_CLOEXEC, 3));
	in->my = kn_high(sv[1]);
	sv[1] = -1;
	if (in->kfd < 0 || in->my < 0 || REAL(fcntl)(in->kfd, F_SETFL, fl | O_NONBLOCK) < 0)
		goto fail;
	if (fl & O_NONBLOCK)
		REAL(fcntl)(sv[0], F_SETFL, O_NONBLOCK);
	snprintf(path, sizeof path, "/proc/self/fdinfo/%d", in->kfd);
	FILE *f = fopen(path, "re");
	char line[256];
	while (f && fgets(line, sizeof line, f)) {
		int wd;
		struct watch *w;
		if (sscanf(line, "inotify wd:%x", &wd) == 1 && (w = kn_add_slot(in))) {
			*w = (struct watch){ .wd = wd, .kwd = wd, .mnt = -1 };
			if (wd >= in->nextwd)
				in->nextwd = wd + 1;
		}
	}
	if (f)
		fclose(f);
	if (REAL(dup3)(sv[0], fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0)
		goto fail;
	REAL(close)(sv[0]);
	struct stat st;
	REAL(fstat)(fd, &st);
	in->dev = st.st_dev;
	in->ino = st.st_ino;
	in->ufd = fd;
	kn_mark_fd(fd);
	in->next = kn_insts;
	kn_insts = in;
	kn_kick();
	return in;
fail:;
	int er = errno;
	if (in) {
		if (in->kfd >= 0)
			REAL(close)(in->kfd);
		if (in->my >= 0)
			REAL(close)(in->my);
		free(in->w);
		free(in);
	}
	for (int i = 0; i < 2; i++)
		if (sv[i] >= 0)
			REAL(close)(sv[i]);
	errno = er;
	return NULL;
}

/* A pool watch: the kernel's checks, in its order. */
static int pool_watch(struct inst *in, struct kp_path *kp, uint32_t mask)
{
	kura_fs *fs = kp_fs(kp->mnt);
	if (!fs)
		return -1;
	int nofollow = mask & IN_DONT_FOLLOW ? AT_SYMLINK_NOFOLLOW : 0;
	struct stat st;
	int r = kura_fstatat(fs, kp->kdirfd, kp->p, &st, nofollow);
	if (!r && (mask & IN_ONLYDIR) && !S_ISDIR(st.st_mode))
		r = -ENOTDIR;
	if (!r)
		r = kura_faccessat(fs, kp->kdirfd, kp->p, R_OK, nofollow | AT_EACCESS);
	struct kn_ring *ring = kn_ring_get(kp->mnt);
	if (!r && !ring)
		r = -ENOSPC; /* no ring to hear from: as out of watches */
	if (r)
		return (int)kp_ret(r);
	kn_drain_all();
	uint32_t keep = mask & (IN_ALL_EVENTS | IN_ONESHOT | IN_EXCL_UNLINK);
	for (int i = 0; i < in->nw; i++) {
		struct watch *w = &in->w[i];
		if (w->kwd < 0 && w->mnt == kp->mnt && w->ino == (uint64_t)st.st_ino) {
			if (mask & IN_MASK_CREATE)
				return (int)kp_ret(-EEXIST);
			w->mask = (mask & IN_MASK_ADD) ? w->mask | keep : keep;
			return w->wd;
		}
	}
	if ((r = kn_ref(kp->mnt)))
		return (int)kp_ret(r);
	struct watch *w = kn_add_slot(in);
	if (!w) {
		kn_unref(kp->mnt);
		return (int)kp_ret(-ENOMEM);
	}
	*w = (struct watch){ .wd = kn_new_wd(in), .kwd = -1, .mnt = kp->mnt, .ino = (uint64_t)st.st_ino, .mask = keep };
	kn_kick();
	return w->wd;
}

/* A kernel watch through an instance of ours: the kernel's wd mapped. */
static int kernel_watch(struct inst *in, const char *p, uint32_t mask)
{
	int kwd = REAL(inotify_add_watch)(in->kfd, p, mask);
	if (kwd < 0)
		return -1;
	for (int i = 0; i < in->nw; i++)
		if (in->w[i].kwd == kwd)
			return in->w[i].wd;
	struct watch *w = kn_add_slot(in);
	if (!w) {
		REAL(inotify_rm_watch)(in->kfd, kwd);
		return (int)kp_ret(-ENOMEM);
	}
	*w = (struct watch){ .wd = kn_new_wd(in), .kwd = kwd, .mnt = -1 };
	return w->wd;
}

/* A process that may use a pool makes every instance ours at once: a
 * program may hand the descriptor to epoll, or dup it, before its first
 * watch, and both must then see the socket.  (An instance that came from
 * elsewhere becomes ours at its first pool watch.) */
KP_EXPORT int inotify_init1(int flags)
{
	kp_config();
	int fd = REAL(inotify_init1)(flags);
	if (fd < 0 || kp_nmounts == 0 || kp_inside)
		return fd;
	sighold_lock(&kn_mu);
	if (!take_over(fd))
		kp_debug("inotify instance %d stays the kernel's: %s", fd, strerror(errno));
	sighold_unlock(&kn_mu);
	return fd;
}

KP_EXPORT int inotify_init(void)
{
	return inotify_init1(0);
}

/* An instance another process feeds: its watches are that process's. */
static int inherited(const struct stat *st)
{
	sighold_lock(&kn_mu);
	int r = kn_inherited_here(st);
	sighold_unlock(&kn_mu);
	return r;
}

KP_EXPORT int inotify_add_watch(int fd, const char *path, uint32_t mask)
{
	kp_config();
	if (kp_nmounts == 0 || kp_inside)
		return REAL(inotify_add_watch)(fd, path, mask);
	struct stat st;
	int ours = 0; /* an instance of ours, or one a parent process feeds */
	if (REAL(fstat)(fd, &st) == 0 && S_ISSOCK(st.st_mode)) {
		sighold_lock(&kn_mu);
		ours = kn_find(&st) != NULL || kn_inherited_here(&st);
		sighold_unlock(&kn_mu);
	}
	struct kp_path kp;
	int r = 0;
	if (!ours) {
		/* A kernel instance: only a pool path is ours to serve. */
		if (!KP_PATH_OK(path) || (r = kp_classify(AT_FDCWD, path, &kp)) || kp.where != KP_KURA)
			return r ? (int)kp_ret(r) : REAL(inotify_add_watch)(fd, path, mask);
	}
	/* The kernel's checks, in its order: the mask, the descriptor, the path. */
	if ((mask & IN_MASK_ADD) && (mask & IN_MASK_CREATE))
		return (int)kp_ret(-EINVAL);
	if (!(mask & (IN_ALL_EVENTS | IN_ONESHOT | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK | IN_MASK_ADD |
		      IN_MASK_CREATE)))
		return (int)kp_ret(-EINVAL);
	if (REAL(fstat)(fd, &st) < 0)
		return -1;
	if (inherited(&st))
		return (int)kp_ret(-EOPNOTSUPP);
	if (ours && ((r = kp_path_arg(path)) || (r = kp_classify(AT_FDCWD, path, &kp))))
		return (int)kp_ret(r);
	sighold_lock(&kn_mu);
	struct inst *in = kn_find(&st);
	if (!in)
		in = take_over(fd);
	if (in)
		r = kp.where == KP_KURA ? pool_watch(in, &kp, mask) : kernel_watch(in, kp.p, mask);
	else
		r = -1;
	int er = errno;
	sighold_unlock(&kn_mu);
	errno = er;
	return r;
}

KP_EXPORT int inotify_rm_watch(int fd, int wd)
{
	struct stat st;
	if (REAL(fstat)(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return REAL(inotify_rm_watch)(fd, wd);
	if (inherited(&st))
		return (int)kp_ret(-EOPNOTSUPP);
	sighold_lock(&kn_mu);
	struct inst *in = kn_find(&st);
	int r = -EINVAL;
	kn_drain_all();
	for (int i = 0; in && i < in->nw; i++)
		if (in->w[i].wd == wd) {
			if (in->w[i].kwd >= 0)
				/* its IN_IGNORED comes through the kernel instance */
				r = REAL(inotify_rm_watch)(in->kfd, in->w[i].kwd) < 0 ? -errno : 0;
			else {
				kn_drop_watch(in, i, 1);
				r = 0;
			}
			kn_kick();
			break;
		}
	sighold_unlock(&kn_mu);
	if (!in)
		return REAL(inotify_rm_watch)(fd, wd);
	return (int)kp_ret(r);
}

void kp_notify_exec(int failed)
{
	sighold_lock(&kn_mu);
	for (struct inst *in = kn_insts; in; in = in->next) {
		struct stat st;
		int fl = REAL(fcntl)(in->ufd, F_GETFD);
		if (fl >= 0 && !(fl & FD_CLOEXEC) && REAL(fstat)(in->ufd, &st) == 0 && st.st_dev == in->dev &&
		    st.st_ino == in->ino)
			REAL(fcntl)(in->my, F_SETFD, failed ? FD_CLOEXEC : 0);
	}
	/* The new image watches nothing: it is not counted as a watcher. */
	for (int m = 0; m < KP_MAX_MOUNTS; m++)
		if (kn_pool_watches[m] && failed)
			kn_watcher_add(m);
		else if (kn_pool_watches[m])
			kn_watcher_drop(m);
	sighold_unlock(&kn_mu);
}

/* ---- read ----
 * The kernel's read of an instance returns as many whole events as fit,
 * and EINVAL when not even the first does; a packet of the socket is one
 * event, so read() of a descriptor of ours gathers packets.  Descriptor
 * numbers an instance was made at are marked, so that read() of any
 * other descriptor looks no further than one process-local load once
 * this process has an instance, and not at all before. */

#define FD_MARKS 4096
int kp_notify_fds;
static uint8_t fd_marks[FD_MARKS / 8];
static pthread_mutex_t read_lock = PTHREAD_MUTEX_INITIALIZER;

static void kn_mark_fd(int fd)
{
	if (fd >= 0 && fd < FD_MARKS) {
		__atomic_fetch_or(&fd_marks[fd / 8], (uint8_t)(1u << (fd % 8)), __ATOMIC_RELAXED);
		__atomic_store_n(&kp_notify_fds, 1, __ATOMIC_RELAXED);
	}
}

ssize_t kp_notify_read(int fd, void *buf, size_t n, int *served)
{
	*served = 0;
	struct stat st;
	if (fd < 0 || fd >= FD_MARKS || !(__atomic_load_n(&fd_marks[fd / 8], __ATOMIC_RELAXED) >> (fd % 8) & 1) ||
	    REAL(fstat)(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return 0;
	sighold_lock(&kn_mu);
	int mine = kn_find(&st) || kn_inherited_here(&st);
	sighold_unlock(&kn_mu);
	if (!mine)
		return 0;
	*served = 1;
	/* One reader at a time: the size peeked must be the packet taken. */
	pthread_mutex_lock(&read_lock);
	size_t done = 0;
	ssize_t r = 0;
	for (;;) {
		char hdr[EV_SZ];
		ssize_t len = recv(fd, hdr, sizeof hdr, MSG_PEEK | MSG_TRUNC | (done ? MSG_DONTWAIT : 0));
		if (len <= 0) {
			r = len;
			break;
		}
		if ((size_t)len > n - done) {
			if (!done) {
				errno = EINVAL;
				r = -1;
			}
			break;
		}
		if ((r = recv(fd, (char *)buf + done, (size_t)len, MSG_DONTWAIT)) <= 0)
			break;
		done += (size_t)r;
	}
	pthread_mutex_unlock(&read_lock);
	if (done)
		return (ssize_t)done;
	return r;
}
