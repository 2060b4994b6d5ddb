/*
 * links.c — symlinks that cross a prefix's edge, in either direction, and
 * realpath: where a path really leads once the pool's and the host's
 * symlinks have both been followed.  path.c classifies; this file walks.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kp.h"

/* The host form of a kura path is normalised; what its last component
 * asks ("file/.", "file/..", "file/") is checked by the engine first. */
int kp_check_last_form(const struct kp_path *kp)
{
	size_t l = strlen(kp->p);
	if (kp->where != KP_KURA || !l || (kp->p[l - 1] != '.' && kp->p[l - 1] != '/'))
		return 0;
	kura_fs *fs = kp_fs(kp->mnt);
	struct stat st;
	int r = fs ? kura_fstatat(fs, kp->kdirfd, kp->p, &st, 0) : -errno;
	return r == KURA_ESCAPED ? 0 : r;
}


/* ---- symlinks across a prefix, and realpath ----
 * The engine is mounted with the prefix as its host_prefix: it follows a
 * symlink while it stays in the pool, and a target elsewhere (or a ".."
 * above the pool's root) ends the call with KURA_ESCAPED and the host path
 * left to resolve, where the call is then made.  The kernel would never
 * come back from a host symlink that leads into a prefix, so such links
 * met after an escape are followed here; every escape and every such link
 * counts toward Linux's limit of 40, which ends loops through the host. */

#define KP_MAXHOPS 40

/* Resolves the absolute path `path` one component at a time, as the
 * kernel would.  whole (realpath): every symlink, through the wrappers so
 * that both sides of a prefix are seen; `path` becomes the resolved path,
 * or -errno.  !whole (after an escape, or after a kernel call on a host
 * path failed): host components only, with the kernel's calls, until one
 * lies under a prefix: then returns 1 with `path` = that component's
 * path + the unresolved rest; else 0 with `path` left
 * for the kernel (which also reports whatever is wrong with it).  follow:
 * a symlink in the last component is followed (a trailing slash always). */
/* Whether a call with this follow argument (kp.h: 0, 1 or KP_NAME) follows
 * a symlink in the last component, which has_slash says a slash follows:
 * a lookup does then, an operation on the name itself never. */
static int follows_last(int follow, int has_slash)
{
	return follow == 1 || (follow == 0 && has_slash);
}

static int walk_layers(char *path, int whole, int follow, int *hops)
{
	char todo[PATH_MAX], done[PATH_MAX], link[PATH_MAX];
	size_t tl = strlen(path), dl = 0;
	if (tl >= sizeof todo)
		return -ENAMETOOLONG;
	memcpy(todo, path, tl + 1);
	done[0] = '\0';
	char *rest = todo;
	for (;;) {
		while (*rest == '/')
			rest++;
		if (!*rest)
			break;
		char *end = strchrnul(rest, '/');
		size_t len = (size_t)(end - rest);
		const char *after = end;
		while (*after == '/')
			after++;
		if (len == 1 && rest[0] == '.') {
			rest = end;
			continue;
		}
		if (len == 2 && rest[0] == '.' && rest[1] == '.') {
			/* done holds no symlinks, so ".." is lexical there */
			while (dl && done[dl - 1] != '/')
				dl--;
			if (dl)
				dl--;
			done[dl] = '\0';
			rest = end;
			continue;
		}
		if (dl + 1 + len >= sizeof done)
			return -ENAMETOOLONG;
		done[dl] = '/';
		memcpy(done + dl + 1, rest, len);
		done[dl + 1 + len] = '\0';
		size_t el = strlen(end);
		if (!whole && kp_mount_of(done) >= 0) {
			if (dl + 1 + len + el >= PATH_MAX)
				return -ENAMETOOLONG;
			memcpy(path, done, dl + 1 + len);
			memcpy(path + dl + 1 + len, end, el + 1);
			return 1;
		}
		if (!*after && !follows_last(follow, *end != '\0'))
			break;
		struct stat st;
		int r = whole ? lstat(done, &st) : REAL(fstatat)(AT_FDCWD, done, &st, AT_SYMLINK_NOFOLLOW);
		if (r < 0)
			return whole ? -errno : 0;
		if (S_ISLNK(st.st_mode)) {
			if (++*hops > KP_MAXHOPS)
				return -ELOOP;
			ssize_t n = whole ? readlink(done, link, sizeof link) : REAL(readlink)(done, link, sizeof link);
			if (n <= 0)
				return !whole ? 0 : n < 0 ? -errno : -ENOENT;
			if ((size_t)n + el >= sizeof link)
				return -ENAMETOOLONG;
			memcpy(link + n, end, el + 1); /* target + the rest */
			memcpy(todo, link, (size_t)n + el + 1);
			rest = todo;
			if (link[0] == '/')
				dl = 0;
			done[dl] = '\0';
			continue;
		}
		if (*end && !S_ISDIR(st.st_mode))
			return whole ? -ENOTDIR : 0;
		dl += 1 + len;
		rest = end;
	}
	if (whole) {
		if (!dl)
			done[dl++] = '/';
		memcpy(path, done, dl);
		path[dl] = '\0';
	}
	return 0;
}

int kp_escape(struct kp_path *kp, int follow)
{
	return kp_escape_to(kp, kura_escaped_path(), follow);
}

int kp_escape_to(struct kp_path *kp, const char *h, int follow)
{
	if (++kp->hops > KP_MAXHOPS)
		return -ELOOP;
	size_t l = strlen(h);
	if (l >= sizeof kp->buf)
		return -ENAMETOOLONG;
	memcpy(kp->buf, h, l + 1);
	int r = walk_layers(kp->buf, 0, follow, &kp->hops);
	if (r < 0)
		return r;
	kp->host[0] = '\0';
	if (r == 0) {
		/* As it stands: the kernel resolves its ".." and host symlinks. */
		kp->where = KP_KERNEL_ABS;
		kp->p = kp->buf;
		return 0;
	}
	char src[PATH_MAX];
	memcpy(src, kp->buf, strlen(kp->buf) + 1);
	return kp_classify_norm(kp, src, 0);
}

/* One more walk of a kura path, for callers that hand kp.p on without an
 * engine call of their own to report the escape. */
static int resolve_escapes(struct kp_path *out)
{
	int r = 0;
	while (!r && out->where == KP_KURA) {
		kura_fs *fs = kp_fs(out->mnt);
		struct stat st;
		if (!fs || kura_fstatat(fs, out->kdirfd, out->p, &st, 0) != KURA_ESCAPED)
			break;
		r = kp_escape(out, 1);
	}
	return r;
}

int kp_resolve(int dirfd, const char *path, struct kp_path *out)
{
	int r = kp_classify(dirfd, path, out);
	return r ? r : resolve_escapes(out);
}

/* ---- host symlinks into a prefix ----
 * The kernel resolves host paths, and a host symlink that leads into a
 * prefix ends for it at a directory it does not have: ENOENT, or ENOTDIR
 * when a file holds the prefix's place.  Only after such a failure is the
 * path walked here (walk_layers, as after an escape), so successful host
 * calls cost nothing; the hops counted join the path's own, so loops
 * through both sides end in ELOOP. */

/* Whether the kernel resolved every directory of abs: then no symlink but
 * a followed last component can lead into a prefix, and the common failure,
 * a missing name in an existing directory, costs two calls, not a walk. */
static int only_host(const char *abs, int follow)
{
	size_t l = strlen(abs), s;
	while (l > 1 && abs[l - 1] == '/')
		l--;
	for (s = l; s > 0 && abs[s - 1] != '/'; s--)
		;
	if (s == 0 || l - s == 0 || (l - s == 1 && abs[s] == '.') || (l - s == 2 && abs[s] == '.' && abs[s + 1] == '.'))
		return 0;
	char dir[PATH_MAX];
	memcpy(dir, abs, s);
	dir[s] = '\0';
	struct stat st;
	if (REAL(fstatat)(AT_FDCWD, dir, &st, 0) < 0 || !S_ISDIR(st.st_mode))
		return 0;
	if (!follows_last(follow, abs[l] != '\0'))
		return 1;
	memcpy(dir, abs, l);
	dir[l] = '\0';
	return REAL(fstatat)(AT_FDCWD, dir, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISLNK(st.st_mode);
}

int kp_host_link(struct kp_path *kp, int kdirfd, int follow)
{
	int err = errno;
	/* hops: a path an escape led to was walked then. */
	if (kp->where == KP_KURA || kp->hops || kp_inside || kp_nmounts == 0 || !kp->p || !*kp->p)
		return 0;
	char abs[PATH_MAX], base[PATH_MAX];
	if (kp->p[0] == '/') {
		size_t l = strlen(kp->p);
		if (l >= sizeof abs)
			return 0;
		memcpy(abs, kp->p, l + 1);
	} else {
		if (kdirfd == AT_FDCWD) {
			kp_inside++;
			char *ok = REAL(getcwd)(base, sizeof base);
			kp_inside--;
			if (!ok) {
				errno = err;
				return 0;
			}
		} else {
			char proc[64];
			snprintf(proc, sizeof proc, "/proc/self/fd/%d", kdirfd);
			ssize_t n = REAL(readlink)(proc, base, sizeof base - 1);
			if (n <= 0 || base[0] != '/') {
				errno = err;
				return 0;
			}
			base[n] = '\0';
		}
		if (kp_join(abs, base, kp->p)) {
			errno = err;
			return 0;
		}
	}
	/* A name looked up in a prefix's parent ("kura" from a descriptor of
	 * "/", as rsync and fts do) is the prefix itself: walked, not judged
	 * by only_host's shortcut. */
	memcpy(base, abs, strlen(abs) + 1);
	kp_normalise(base);
	int r = kp_mount_of(base) < 0 && only_host(abs, follow) ? 0 : walk_layers(abs, 0, follow, &kp->hops);
	if (r <= 0) {
		errno = r < 0 ? -r : err;
		return 0;
	}
	/* The last component keeps its form ("file/" is ENOTDIR). */
	r = kp_classify_norm(kp, abs, 0);
	errno = r ? -r : err;
	return !r;
}

int kp_host_resolve(struct kp_path *kp, int kdirfd)
{
	if (!kp_host_link(kp, kdirfd, 1))
		return 0;
	int r = resolve_escapes(kp);
	if (r) {
		errno = -r;
		return 0;
	}
	return 1;
}

/* The physical path of `in`, an absolute normalised host path of a kura
 * file, as Linux's realpath would find it: out may lie outside the pool. */
int kp_kura_realpath(const char *in, char *out)
{
	int hops = 0;
	size_t l = strlen(in);
	if (l >= PATH_MAX)
		return -ENAMETOOLONG;
	memcpy(out, in, l + 1);
	return walk_layers(out, 1, 1, &hops);
}

KP_EXPORT char *realpath(const char *path, char *resolved)
{
	if (!KP_NN(path)) {
		errno = EINVAL;
		return NULL;
	}
	struct kp_path kp;
	int r = kp_classify(AT_FDCWD, path, &kp);
	if (r) {
		errno = -r;
		return NULL;
	}
	if (kp.where != KP_KURA || !kp.host[0]) {
		char *res = REAL(realpath)(kp.p, resolved);
		if (res || !KP_HOST_MISS() || !kp_host_link(&kp, AT_FDCWD, 1))
			return res;
	}
	char out[PATH_MAX];
	if (!(r = kp_check_last_form(&kp)))
		r = kp_kura_realpath(kp.host, out);
	if (r) {
		errno = -r;
		return NULL;
	}
	if (!resolved)
		return strdup(out);
	memcpy(resolved, out, strlen(out) + 1);
	return resolved;
}

KP_EXPORT char *__realpath_chk(const char *path, char *resolved, size_t len)
{
	(void)len;
	return realpath(path, resolved);
}

KP_EXPORT char *canonicalize_file_name(const char *path)
{
	return realpath(path, NULL);
}
