/*
 * socket.c — Unix-domain sockets and FIFOs named by a path in a pool.
 *
 * FIFOs: a FIFO node in the pool stands for a kernel FIFO in the private
 * directory of the node's owner (below), named by the node's token and
 * inode, made at the first open; an open of the node opens it, so readers
 * and writers of any process of the pool meet in one kernel pipe, with the
 * kernel's blocking and O_NONBLOCK rules.
 *
 * Sockets: the kernel cannot bind a socket to a path it does not see, so a
 * socket bound to a kura path is bound by the kernel in a private directory
 * of the node's owner, /tmp/kura-<uid> (0700, checked before every use:
 * a directory someone else made or opened up is refused, so nobody can
 * plant a socket there or reach one through it), and the pool holds its
 * node: bind makes an S_IFSOCK node whose token (random, stored in the
 * node) names the kernel's file "<token>-<inode>" there, and connect,
 * sendto and sendmsg to the path go to the file the node names.  So the
 * socket is reached by its path exactly while the node is there, as on
 * Linux: unlinking it leaves the listener unreachable, and a new bind at
 * the same path makes a new node with a new token.  Connecting needs write
 * permission on the node, as the kernel asks.
 *
 * Device nodes: opening one opens the device it names, through a node the
 * kernel already has for it in /dev (so the kernel's permissions on that
 * node apply too), or, for root, a node made in root's private directory.
 * Only in a pool owned by root or by the caller: anyone who can write a
 * pool file can put any device number in it, which must not send another
 * user's (or root's) program to a device it did not mean to open, the
 * reason for mounting with nodev.
 *
 * What differs: only the owner's processes (and root) can connect to a
 * socket or open a FIFO, the directory being private; the kernel's file
 * stays behind in it after the node goes.  getsockname, getpeername, accept and recvfrom give the path
 * back for sockets this process bound; one bound by another process shows
 * the kernel's path.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sys/sysmacros.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kp.h"


#define SUN_OFF offsetof(struct sockaddr_un, sun_path)

/* The path of a pathname AF_UNIX address (NUL-terminated in path), or 0. */
static int unix_path(const struct sockaddr *a, socklen_t len, char *path)
{
	/* An address the program does not have is the kernel's to refuse. */
	if (!a || len <= SUN_OFF || !KP_MEM_OK(a, len < sizeof(struct sockaddr_un) ? len : sizeof(struct sockaddr_un)) ||
	    a->sa_family != AF_UNIX)
		return 0;
	const struct sockaddr_un *u = (const void *)a;
	size_t n = len - SUN_OFF;
	if (n > sizeof u->sun_path)
		n = sizeof u->sun_path;
	if (!n || !u->sun_path[0])
		return 0; /* abstract or unnamed */
	memcpy(path, u->sun_path, n);
	path[n] = 0;
	return 1;
}

#define PRIVATE_DIR "/tmp/kura-"

/* The kernel's path for a node (owner, ino, token) in the owner's private
 * directory, made if make is set (by the owner, or by root for them).  -1
 * with errno (refused, as given) if the directory is not the owner's alone. */
static int private_path(uid_t owner, const char *kind, uint64_t ino, uint64_t token, int make, int refused,
			char *out, size_t cap)
{
	char dir[64];
	snprintf(dir, sizeof dir, PRIVATE_DIR "%u", (unsigned)owner);
	if (make && mkdir(dir, 0700) == 0) {
		if (geteuid() != owner && lchown(dir, owner, (gid_t)-1) < 0)
			return -1;
	} else if (make && errno != EEXIST) {
		return -1;
	}
	struct stat st;
	if (lstat(dir, &st) < 0)
		return -1;
	if (!S_ISDIR(st.st_mode) || st.st_uid != owner || (st.st_mode & 077)) {
		errno = refused; /* not theirs alone: never reach anything through it */
		return -1;
	}
	if (snprintf(out, cap, "%s/%s%016llx-%llx", dir, kind, (unsigned long long)token, (unsigned long long)ino) >=
	    (int)cap) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

static int kernel_addr(uid_t owner, uint64_t ino, uint64_t token, int make, struct sockaddr_un *u, socklen_t *len)
{
	memset(u, 0, sizeof *u);
	u->sun_family = AF_UNIX;
	if (private_path(owner, "", ino, token, make, make ? EACCES : ECONNREFUSED, u->sun_path, sizeof u->sun_path))
		return -1;
	*len = (socklen_t)(SUN_OFF + strlen(u->sun_path) + 1);
	return 0;
}

/* ---- what fstat of an open FIFO shows ----
 * The descriptor is the kernel's private FIFO, whose fstat would name
 * another device and inode than stat of the pool path: programs that check
 * that the file they opened is the one they looked at (cp, tar) take that
 * for a file replaced under them.  So fstat, fchmod and fchown of a private
 * FIFO this process opened answer for its pool node.  The FIFO is known by
 * the kernel's identity of it, not by descriptor number: dups and a forked
 * child's copies are recognised, and a number reused for another file is
 * not taken for it. */
struct fifo_seen {
	dev_t kdev;
	ino_t kino;
	uint64_t ino;       /* the pool node */
	char *host;         /* its host path at the open */
	struct stat st;     /* its stat then, shown if the path no longer leads to it */
};
static struct fifo_seen *seen;
static size_t nseen, cap_seen;
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

static void remember_fifo(int fd, const struct kp_path *kp, const struct stat *node)
{
	struct stat k;
	if (REAL(fstat)(fd, &k) || !kp->host[0])
		return;
	sighold_lock(&seen_lock);
	size_t i = 0;
	while (i < nseen && (seen[i].kdev != k.st_dev || seen[i].kino != k.st_ino))
		i++;
	if (i == nseen && nseen == cap_seen) {
		size_t cap = cap_seen ? cap_seen * 2 : 8;
		struct fifo_seen *n = realloc(seen, cap * sizeof *n);
		if (!n)
			goto out;
		seen = n;
		cap_seen = cap;
	}
	char *host = strdup(kp->host);
	if (!host)
		goto out;
	if (i == nseen)
		nseen++;
	else
		free(seen[i].host);
	seen[i] = (struct fifo_seen){ k.st_dev, k.st_ino, node->st_ino, host, *node };
out:
	sighold_unlock(&seen_lock);
}

/* The pool node behind kernel FIFO k, as it is now: 1 with *st (and its
 * path in kp, "" if the path no longer leads to it), else 0. */
static int fifo_node(const struct stat *k, struct stat *st, struct kp_path *kp)
{
	if (!S_ISFIFO(k->st_mode) || !__atomic_load_n(&nseen, __ATOMIC_ACQUIRE))
		return 0;
	char host[PATH_MAX];
	uint64_t ino = 0;
	sighold_lock(&seen_lock);
	for (size_t i = 0; i < nseen; i++)
		if (seen[i].kdev == k->st_dev && seen[i].kino == k->st_ino) {
			ino = seen[i].ino;
			*st = seen[i].st;
			snprintf(host, sizeof host, "%s", seen[i].host);
		}
	sighold_unlock(&seen_lock);
	if (!ino)
		return 0;
	struct stat now;
	if (kp_classify(AT_FDCWD, host, kp) == 0 && kp->where == KP_KURA && kp_fs(kp->mnt) &&
	    kura_fstatat(kp_fs(kp->mnt), kp->kdirfd, kp->p, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
	    now.st_ino == ino && S_ISFIFO(now.st_mode)) {
		*st = now;
		/* Kept: after a rename the path leads elsewhere, and the
		 * last state seen is the best answer left. */
		sighold_lock(&seen_lock);
		for (size_t i = 0; i < nseen; i++)
			if (seen[i].kdev == k->st_dev && seen[i].kino == k->st_ino)
				seen[i].st = now;
		sighold_unlock(&seen_lock);
	} else {
		kp->where = KP_KERNEL;
	}
	return 1;
}

int kp_fifo_stat_of(int fd, struct stat *st)
{
	struct kp_path kp;
	struct stat node;
	if (REAL(fstat)(fd, st))
		return -1;
	if (!fifo_node(st, &node, &kp))
		return 0;
	*st = node;
	return 1;
}

int kp_fifo_fstat(int fd, struct stat *st)
{
	return kp_fifo_stat_of(fd, st) < 0 ? -1 : 0;
}

int kp_fifo_fchange(int fd, mode_t mode, uid_t uid, gid_t gid, int chown)
{
	struct kp_path kp;
	struct stat k, node;
	if (REAL(fstat)(fd, &k) || !fifo_node(&k, &node, &kp) || kp.where != KP_KURA)
		return chown ? REAL(fchown)(fd, uid, gid) : REAL(fchmod)(fd, mode);
	kura_fs *fs = kp_fs(kp.mnt);
	int r = chown ? kura_fchownat(fs, kp.kdirfd, kp.p, uid, gid, AT_SYMLINK_NOFOLLOW)
		      : kura_fchmodat(fs, kp.kdirfd, kp.p, mode, AT_SYMLINK_NOFOLLOW);
	if (r == 0)
		fifo_node(&k, &node, &kp); /* what fstat shows follows */
	return (int)kp_ret(r);
}

int kp_fifo_open(const struct kp_path *kp, kura_fs *fs, int flags)
{
	int kdirfd = kp->kdirfd;
	const char *path = kp->p;
	uint64_t ino, token;
	uid_t owner;
	int r = kura_socket_name(fs, kdirfd, path, AT_KURA_FIFO, &ino, &token, &owner);
	if (r < 0)
		return r;
	char fifo[sizeof(((struct sockaddr_un *)0)->sun_path) + 64];
	uid_t me = geteuid();
	if (private_path(owner, "fifo-", ino, token, me == owner || me == 0, EACCES, fifo, sizeof fifo) < 0)
		return -errno;
	if (mkfifo(fifo, 0600) == 0 && me != owner && lchown(fifo, owner, (gid_t)-1) < 0)
		return -errno;
	struct stat st;
	if (lstat(fifo, &st) < 0)
		return -errno;
	if (!S_ISFIFO(st.st_mode) || st.st_uid != owner)
		return -EACCES;
	int fd = REAL(open)(fifo, (flags & ~(O_CREAT | O_EXCL | O_TRUNC | O_DIRECTORY | O_PATH)) | O_NOFOLLOW, 0);
	if (fd < 0)
		return -errno;
	struct stat node;
	if (kura_fstatat(fs, kdirfd, path, &node, 0) == 0 && node.st_ino == ino)
		remember_fifo(fd, kp, &node);
	return fd;
}

/* A node in /dev (or one level below) of the type and number wanted. */
static int find_dev_node(mode_t type, dev_t rdev, char *out, size_t cap)
{
	static const char *const dirs[] = { "/dev", "/dev/block", "/dev/char", "/dev/pts", "/dev/mapper", "/dev/net" };
	for (size_t d = 0; d < sizeof dirs / sizeof *dirs; d++) {
		DIR *dp = opendir(dirs[d]);
		if (!dp)
			continue;
		struct dirent *de;
		while ((de = readdir(dp))) {
			struct stat st;
			if (snprintf(out, cap, "%s/%s", dirs[d], de->d_name) >= (int)cap || lstat(out, &st))
				continue;
			if ((st.st_mode & S_IFMT) == type && st.st_rdev == rdev) {
				closedir(dp);
				return 0;
			}
		}
		closedir(dp);
	}
	return -1;
}

int kp_dev_open(int mnt, kura_fs *fs, int kdirfd, const char *path, int flags)
{
	struct stat st, pool;
	if (kura_fstatat(fs, kdirfd, path, &st, (flags & O_NOFOLLOW) ? AT_SYMLINK_NOFOLLOW : 0) < 0 ||
	    (!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode)))
		return -EACCES;
	int acc = flags & O_ACCMODE;
	int mask = acc == O_RDONLY ? R_OK : acc == O_WRONLY ? W_OK : R_OK | W_OK;
	if (kura_faccessat(fs, kdirfd, path, mask, AT_EACCESS) < 0)
		return -EACCES;
	uid_t me = geteuid();
	if (stat(kp_mounts[mnt].pool, &pool) || (pool.st_uid != 0 && pool.st_uid != me))
		return -EACCES;
	char node[PATH_MAX];
	if (find_dev_node(st.st_mode & S_IFMT, st.st_rdev, node, sizeof node)) {
		if (me != 0 || private_path(0, S_ISCHR(st.st_mode) ? "chr-" : "blk-", minor(st.st_rdev),
					    major(st.st_rdev), 1, EACCES, node, sizeof node) < 0)
			return -EACCES;
		if (mknod(node, (st.st_mode & S_IFMT) | 0600, st.st_rdev) < 0 && errno != EEXIST)
			return -errno;
	}
	int fd = REAL(open)(node, (flags & ~(O_CREAT | O_EXCL | O_DIRECTORY | O_PATH)) | O_NOFOLLOW, 0);
	if (fd < 0)
		return -errno;
	struct stat got;
	if (fstat(fd, &got) || (got.st_mode & S_IFMT) != (st.st_mode & S_IFMT) || got.st_rdev != st.st_rdev) {
		close(fd);
		return -EACCES; /* replaced under us */
	}
	return fd;
}

/* Kernel paths this process bound, and the pool paths they stand for. */
static struct bound {
	char kernel[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
	char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
} *bound;
static size_t nbound, capbound;
static pthread_mutex_t bound_lock = PTHREAD_MUTEX_INITIALIZER;

static void remember(const struct sockaddr_un *u, const char *path)
{
	sighold_lock(&bound_lock);
	if (nbound == capbound) {
		size_t cap = capbound ? capbound * 2 : 16;
		struct bound *b = realloc(bound, cap * sizeof *b);
		if (!b) {
			sighold_unlock(&bound_lock);
			return; /* getsockname then shows the kernel's path */
		}
		bound = b, capbound = cap;
	}
	snprintf(bound[nbound].kernel, sizeof bound->kernel, "%s", u->sun_path);
	snprintf(bound[nbound].path, sizeof bound->path, "%s", path);
	nbound++;
	sighold_unlock(&bound_lock);
}

/* An address the kernel gave back: the path for one of ours. */
static void translate_back(struct sockaddr *a, socklen_t *len, socklen_t cap)
{
	if (!a || !len || *len <= SUN_OFF + 1 || a->sa_family != AF_UNIX)
		return;
	struct sockaddr_un *u = (void *)a;
	size_t n = strnlen(u->sun_path, *len - SUN_OFF);
	if (n < sizeof PRIVATE_DIR || memcmp(u->sun_path, PRIVATE_DIR, sizeof PRIVATE_DIR - 1))
		return;
	sighold_lock(&bound_lock);
	for (size_t i = 0; i < nbound; i++) {
		if (strlen(bound[i].kernel) != n || memcmp(bound[i].kernel, u->sun_path, n))
			continue;
		size_t plen = strlen(bound[i].path);
		struct sockaddr_un out = { .sun_family = AF_UNIX };
		memcpy(out.sun_path, bound[i].path, plen < sizeof out.sun_path ? plen : sizeof out.sun_path);
		socklen_t full = (socklen_t)(SUN_OFF + plen + (plen < sizeof out.sun_path));
		memcpy(a, &out, full < cap ? full : cap); /* truncated as the kernel truncates */
		*len = full;
		break;
	}
	sighold_unlock(&bound_lock);
}

KP_EXPORT int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
	if (!unix_path(addr, len, path))
		return REAL(bind)(fd, addr, len);
	RESOLVE(AT_FDCWD, path, kp);
	if (kp.where != KP_KURA)
		return REAL(bind)(fd, addr, len);
	KFS(kp);
	uint64_t token, ino;
	if (getrandom(&token, sizeof token, 0) != sizeof token)
		return -1;
	token |= 1; /* never 0, the token of a node made by mknod */
	long r = KP_ENGINE(kp, 0, kura_mknodat(fs, kp.kdirfd, kp.p, S_IFSOCK | 0777, (dev_t)token));
	if (r == -EEXIST) {
		errno = EADDRINUSE;
		return -1;
	}
	if (r < 0)
		return (int)kp_ret(r);
	uint64_t got;
	uid_t owner;
	if ((r = kura_socket_name(fs, kp.kdirfd, kp.p, AT_SYMLINK_NOFOLLOW, &ino, &got, &owner)) < 0 || got != token)
		return (int)kp_ret(r < 0 ? r : -EADDRINUSE);
	struct sockaddr_un u;
	socklen_t ulen;
	if (kernel_addr(owner, ino, token, 1, &u, &ulen) < 0 || REAL(bind)(fd, (struct sockaddr *)&u, ulen) < 0) {
		int e = errno;
		kura_unlinkat(fs, kp.kdirfd, kp.p, 0);
		errno = e;
		return -1;
	}
	remember(&u, path);
	if (KP_WATCHED(kp.mnt))
		kp_notify_at(kp.mnt, kp.kdirfd, kp.p, IN_CREATE, KN_CHILD);
	return 0;
}

/* The kernel address for a path in a pool that a socket is sent to:
 * 1 with *u filled, 0 for an address to pass on as it is, -1 with errno. */
static int target_of(const struct sockaddr *addr, socklen_t len, struct sockaddr_un *u, socklen_t *ulen)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
	if (!unix_path(addr, len, path))
		return 0;
	RESOLVE(AT_FDCWD, path, kp);
	if (kp.where != KP_KURA)
		return 0;
	KFS(kp);
	uint64_t ino, token;
	uid_t owner;
	long r = KP_ENGINE(kp, 1, kura_socket_name(fs, kp.kdirfd, kp.p, 0, &ino, &token, &owner));
	if (r == 0)
		r = KP_ENGINE(kp, 1, kura_faccessat(fs, kp.kdirfd, kp.p, W_OK, AT_EACCESS));
	if (r < 0)
		return (int)kp_ret(r);
	return kernel_addr(owner, ino, token, 0, u, ulen) < 0 ? -1 : 1;
}

KP_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	struct sockaddr_un u;
	socklen_t ulen;
	int t = target_of(addr, len, &u, &ulen);
	if (t < 0)
		return -1;
	return t ? REAL(connect)(fd, (struct sockaddr *)&u, ulen) : REAL(connect)(fd, addr, len);
}

KP_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr, socklen_t len)
{
	struct sockaddr_un u;
	socklen_t ulen;
	int t = target_of(addr, len, &u, &ulen);
	if (t < 0)
		return -1;
	kp_map_kernel_buffer(buf, n);
	return t ? REAL(sendto)(fd, buf, n, flags, (struct sockaddr *)&u, ulen) : REAL(sendto)(fd, buf, n, flags, addr, len);
}

KP_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct sockaddr_un u;
	socklen_t ulen;
	int t = msg ? target_of(msg->msg_name, msg->msg_namelen, &u, &ulen) : 0;
	if (t < 0)
		return -1;
	if (msg && KP_MEM_OK(msg, sizeof *msg))
		kp_map_kernel_iov(msg->msg_iov, msg->msg_iovlen);
	if (!t)
		return REAL(sendmsg)(fd, msg, flags);
	struct msghdr m = *msg;
	m.msg_name = &u;
	m.msg_namelen = ulen;
	return REAL(sendmsg)(fd, &m, flags);
}

/* What *len says, read only if the program has it (else the kernel's
 * call answers EFAULT, and nothing is translated). */
static socklen_t cap_of(const socklen_t *len)
{
	return len && KP_MEM_OK(len, sizeof *len) ? *len : 0;
}

/* getsockname, getpeername and accept share a signature and an answer. */
static int named(int (*real)(int, struct sockaddr *, socklen_t *), int fd, struct sockaddr *addr, socklen_t *len)
{
	socklen_t cap = cap_of(len);
	int r = real(fd, addr, len);
	if (r >= 0)
		translate_back(addr, len, cap);
	return r;
}

KP_EXPORT int getsockname(int fd, struct sockaddr *addr, socklen_t *len) { return named(REAL(getsockname), fd, addr, len); }
KP_EXPORT int getpeername(int fd, struct sockaddr *addr, socklen_t *len) { return named(REAL(getpeername), fd, addr, len); }
KP_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len) { return named(REAL(accept), fd, addr, len); }

KP_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	socklen_t cap = cap_of(len);
	int r = REAL(accept4)(fd, addr, len, flags);
	if (r >= 0 && addr)
		translate_back(addr, len, cap);
	return r;
}

KP_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr, socklen_t *len)
{
	socklen_t cap = cap_of(len);
	kp_map_kernel_buffer(buf, n);
	ssize_t r = REAL(recvfrom)(fd, buf, n, flags, addr, len);
	if (r >= 0 && addr)
		translate_back(addr, len, cap);
	return r;
}

KP_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	if (!msg || !KP_MEM_OK(msg, sizeof *msg))
		return REAL(recvmsg)(fd, msg, flags);
	socklen_t cap = msg->msg_name ? msg->msg_namelen : 0;
	kp_map_kernel_iov(msg->msg_iov, msg->msg_iovlen);
	ssize_t r = REAL(recvmsg)(fd, msg, flags);
	if (r >= 0 && msg->msg_name)
		translate_back(msg->msg_name, &msg->msg_namelen, cap);
	return r;
}

/* A page of a kura map the file grew into is mapped in before the kernel
 * is handed it (mapsync.c), as for write and read. */
KP_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	kp_map_kernel_buffer(buf, n);
	return REAL(send)(fd, buf, n, flags);
}

KP_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	kp_map_kernel_buffer(buf, n);
	return REAL(recv)(fd, buf, n, flags);
}
