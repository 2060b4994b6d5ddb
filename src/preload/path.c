/*
 * path.c — which file system a path names.
 *
 * (Symlinks that cross a prefix's edge, and realpath: links.c; the
 * working directory's calls and /proc/self's links: cwd.c.)
 *
 * A path is served by kura when, made absolute and normalised lexically
 * ("." and ".." and repeated slashes), it lies under a mount prefix.  While
 * the working directory is inside a prefix the kernel's own cwd is left
 * where it was and kp_vcwd holds the virtual one; every relative path is
 * then joined to it here, and one that leaves the prefix reaches the kernel
 * as the absolute path it denotes.  Paths that never touch a prefix reach
 * the kernel exactly as given.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kp.h"

char kp_vcwd[PATH_MAX];
static char real_cwd[PATH_MAX]; /* cached kernel cwd, "" if unknown */
static int real_cwd_known;

void kp_refresh_real_cwd(void)
{
	kp_inside++;
	if (!REAL(getcwd)(real_cwd, sizeof real_cwd))
		real_cwd[0] = '\0';
	kp_inside--;
	real_cwd_known = 1;
}

void kp_normalise(char *p)
{
	char *out = p, *in = p;
	/* out always ends without a slash except for the root itself */
	*out++ = '/';
	while (*in) {
		while (*in == '/')
			in++;
		if (!*in)
			break;
		char *end = strchrnul(in, '/');
		size_t len = (size_t)(end - in);
		if (len == 1 && in[0] == '.') {
			/* skip */
		} else if (len == 2 && in[0] == '.' && in[1] == '.') {
			if (out > p + 1) {
				out--;
				while (out > p + 1 && out[-1] != '/')
					out--;
				if (out > p + 1)
					out--;
			}
		} else {
			if (out > p + 1)
				*out++ = '/';
			memmove(out, in, len);
			out += len;
		}
		in = end;
	}
	*out = '\0';
}

int kp_mount_of(const char *p)
{
	for (int i = 0; i < kp_nmounts; i++) {
		size_t n = kp_mounts[i].plen;
		if (strncmp(p, kp_mounts[i].prefix, n) == 0 && (p[n] == '/' || p[n] == '\0'))
			return i;
	}
	return -1;
}

/* Does the path have a component that lexical normalisation would change? */
static int needs_norm(const char *p)
{
	for (const char *s = p; *s; s++) {
		if (s[0] != '/')
			continue;
		if (s[1] == '/')
			return 1;
		if (s[1] == '.' && (s[2] == '/' || s[2] == '\0'))
			return 1;
		if (s[1] == '.' && s[2] == '.' && (s[3] == '/' || s[3] == '\0'))
			return 1;
	}
	return 0;
}

static int has_dotdot(const char *p)
{
	for (const char *s = p; (s = strstr(s, "..")); s += 2)
		if ((s == p || s[-1] == '/') && (s[2] == '/' || s[2] == '\0'))
			return 1;
	return 0;
}

/* out->buf holds an absolute normalised path: classify it. */
static int classify_abs(struct kp_path *out, int orig_is_exact)
{
	int m = kp_mount_of(out->buf);
	if (m < 0) {
		out->where = orig_is_exact ? KP_KERNEL : KP_KERNEL_ABS;
		out->p = out->buf;
		return 0;
	}
	memcpy(out->host, out->buf, strlen(out->buf) + 1);
	out->where = KP_KURA;
	out->mnt = m;
	out->kdirfd = KURA_AT_ROOT;
	out->p = out->buf + kp_mounts[m].plen;
	if (!*out->p)
		out->p = "/";
	return 0;
}

/* The mount whose prefix is exactly stack[0..sl), unless a longer prefix
 * continues it (then the path may still enter that one); else -1. */
static int prefix_is(const char *stack, size_t sl)
{
	int m = -1;
	for (int i = 0; i < kp_nmounts; i++) {
		const struct kp_mount *k = &kp_mounts[i];
		if (k->plen == sl && !memcmp(k->prefix, stack, sl))
			m = m < 0 ? i : m;
		else if (k->plen > sl && !memcmp(k->prefix, stack, sl) && k->prefix[sl] == '/')
			return -1;
	}
	return m;
}

/* Where the absolute path src enters a pool: its components are taken
 * lexically ("." and ".." and repeated slashes, as the layer always has
 * for host paths) until they spell a prefix.  Returns the offset in src
 * of what follows (left as written), with *mnt, or -1 if it never does. */
static long pool_entry(const char *src, int *mnt)
{
	char stack[PATH_MAX];
	size_t sl = 0;
	for (const char *in = src;;) {
		while (*in == '/')
			in++;
		if (!*in)
			return -1;
		const char *end = strchrnul(in, '/');
		size_t len = (size_t)(end - in);
		if (len == 2 && in[0] == '.' && in[1] == '.') {
			while (sl && stack[sl - 1] != '/')
				sl--;
			if (sl)
				sl--;
		} else if (len != 1 || in[0] != '.') {
			if (sl + 1 + len >= sizeof stack)
				return -1;
			stack[sl++] = '/';
			memcpy(stack + sl, in, len);
			sl += len;
			int m = prefix_is(stack, sl);
			if (m >= 0) {
				*mnt = m;
				return end - src;
			}
		}
		in = end;
	}
}

/* rest ("" or "/..."), without its "." components but a last one and
 * without repeated slashes, which mean nothing to a walk, into dst ("/"
 * for ""): its length, or 0 if it does not fit in cap. */
static size_t squeeze(const char *rest, char *dst, size_t cap)
{
	size_t n = 0;
	for (const char *in = rest;;) {
		while (*in == '/')
			in++;
		if (!*in)
			break;
		const char *end = strchrnul(in, '/'), *after = end;
		while (*after == '/')
			after++;
		size_t len = (size_t)(end - in);
		int dot = len == 1 && in[0] == '.', last = !*after;
		if (!dot || last) {
			if (n + len + 3 > cap)
				return 0;
			dst[n++] = '/';
			memcpy(dst + n, in, len);
			n += len;
			if (last && *end && !dot)
				dst[n++] = '/'; /* a trailing slash asks for a directory */
		}
		in = after;
	}
	if (!n)
		dst[n++] = '/';
	dst[n] = '\0';
	return n;
}

/* The absolute path src (writable, possibly longer than PATH_MAX before
 * its "." and ".." are taken out) classified into out.
 *
 * A kura path goes to the engine as written after the prefix: the engine
 * resolves ".." physically, as Linux does (a missing, non-directory or
 * looping component before it fails the call; a symlink's ".." is its
 * target's parent), and hands one above the pool's root back to the layer
 * (KURA_ESCAPED) as a mount point's parent would be.
 *
 * A kernel path is normalised lexically, but Linux judges a last component
 * before it resolves it: "d/." and "d/.." are names of kinds of their own
 * (rmdir answers EINVAL and ENOTEMPTY, rename EBUSY, mkdir EEXIST), and a
 * trailing slash asks for a directory, so the form of the last component
 * is put back on the normalised path. */
int kp_classify_norm(struct kp_path *out, char *src, int orig_is_exact)
{
	int mnt;
	long at = pool_entry(src, &mnt);
	if (at >= 0) {
		size_t pl = kp_mounts[mnt].plen;
		memcpy(out->buf, kp_mounts[mnt].prefix, pl);
		size_t rl = squeeze(src + at, out->buf + pl, sizeof out->buf - pl);
		if (!rl)
			return -ENAMETOOLONG;
		memcpy(out->host, out->buf, pl + rl + 1);
		out->where = KP_KURA;
		out->mnt = mnt;
		out->kdirfd = KURA_AT_ROOT;
		out->p = out->buf + pl;
		return 0;
	}
	size_t l = strlen(src);
	int slash = l > 1 && src[l - 1] == '/';
	while (l > 1 && src[l - 1] == '/')
		l--;
	size_t s = l;
	while (s > 0 && src[s - 1] != '/')
		s--;
	int dot = l - s == 1 && src[s] == '.', dotdot = l - s == 2 && src[s] == '.' && src[s + 1] == '.';
	const char *suffix = dot ? "/." : dotdot ? "/.." : slash ? "/" : "";
	if (dotdot)
		src[s] = '\0'; /* the directory ".." is taken in */
	kp_normalise(src);
	size_t dl = strlen(src);
	if (dl >= sizeof out->buf || (dotdot && dl + 3 >= sizeof out->buf))
		return -ENAMETOOLONG;
	memcpy(out->buf, src, dl + 1);
	if (dotdot) {
		strcpy(out->buf + dl, "/..");
		kp_normalise(out->buf);
	}
	classify_abs(out, orig_is_exact);
	if (!*suffix)
		return 0;
	int m = kp_mount_of(src);
	if (dotdot && (m < 0 ? out->where == KP_KURA : m != out->mnt || !src[kp_mounts[m].plen]))
		return 0;
	if (!dotdot)
		dl = strlen(out->buf);
	if (!strcmp(src, "/"))
		suffix++;
	if (dl + strlen(suffix) >= sizeof out->buf)
		return -ENAMETOOLONG;
	memcpy(out->buf, src, dl);
	strcpy(out->buf + dl, suffix);
	out->p = out->where == KP_KURA ? out->buf + kp_mounts[out->mnt].plen : out->buf;
	if (out->where == KP_KURA) /* callers that start over from it need the form too */
		memcpy(out->host, out->buf, strlen(out->buf) + 1);
	return 0;
}

/* base + "/" + path, classified by classify_norm: a relative path too long
 * to join may still name a file the kernel would find from the directory,
 * once "." and ".." are taken out. */
static int classify_join(struct kp_path *out, const char *base, const char *path, int orig_is_exact)
{
	char big[2 * PATH_MAX + 2];
	size_t la = strnlen(base, PATH_MAX), lb = strnlen(path, PATH_MAX);
	memcpy(big, base, la);
	big[la] = '/';
	memcpy(big + la + 1, path, lb);
	big[la + 1 + lb] = '\0';
	return kp_classify_norm(out, big, orig_is_exact);
}

/* Whether the last component of a prefix is a component of p: only then
 * can a lexical step of p lie under the prefix.  A path that does not is
 * the kernel's alone, and goes to it as given: it resolves ".." after a
 * symlink physically, which lexical normalisation would not. */
static int names_prefix(const char *p)
{
	for (int i = 0; i < kp_nmounts; i++) {
		const char *base = strrchr(kp_mounts[i].prefix, '/') + 1;
		size_t bl = strlen(base);
		if (!bl)
			return 1;
		for (const char *s = p; (s = strstr(s, base)); s++)
			if ((s == p || s[-1] == '/') && (s[bl] == '/' || s[bl] == '\0'))
				return 1;
	}
	return 0;
}

int kp_join(char *dst, const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la + 1 + lb + 1 > PATH_MAX)
		return -ENAMETOOLONG;
	memcpy(dst, a, la);
	dst[la] = '/';
	memcpy(dst + la + 1, b, lb + 1);
	return 0;
}

int kp_classify(int dirfd, const char *path, struct kp_path *out)
{
	kp_config();
	out->hops = 0;
	out->where = KP_KERNEL;
	out->p = path;
	out->host[0] = '\0';
	if (kp_inside || !path || kp_nmounts == 0)
		return 0;
	/* Unreadable or too long: the kernel says so (EFAULT, ENAMETOOLONG),
	 * after any check of the call's other arguments it makes first. */
	if (kp_path_arg(path))
		return 0;
	/* Empty: ENOENT, unless the call takes AT_EMPTY_PATH and dirfd is a
	 * kura descriptor (then it is the engine's). */
	if (!*path && !kp_get(dirfd))
		return 0;
	if (path[0] == '/') {
		if (!needs_norm(path)) {
			int m = kp_mount_of(path);
			if (m < 0)
				return 0;
			size_t l = strlen(path);
			if (l >= PATH_MAX)
				return -ENAMETOOLONG;
			memcpy(out->host, path, l + 1);
			out->where = KP_KURA;
			out->mnt = m;
			out->kdirfd = KURA_AT_ROOT;
			out->p = path + kp_mounts[m].plen;
			if (!*out->p)
				out->p = "/";
			return 0;
		}
		size_t l = strlen(path);
		if (l >= PATH_MAX)
			return -ENAMETOOLONG;
		char src[PATH_MAX];
		memcpy(src, path, l + 1);
		int r = kp_classify_norm(out, src, 1);
		if (out->where == KP_KERNEL && !names_prefix(path))
			out->p = path;
		return r;
	}
	if (dirfd == AT_FDCWD) {
		if (kp_vcwd[0]) {
			int mnt, kfd = kp_vcwd_dir(&mnt);
			if (kfd < 0 || (!*path && kp_vcwd_named()))
				return classify_join(out, kp_vcwd, path, 0);
			if (has_dotdot(path)) {
				/* ".." may climb out of the prefix: by name, as the
				 * directory is named now.  Where the name (or it
				 * with path) is past PATH_MAX, the engine walks from
				 * the directory, and stays in the pool. */
				kp_vcwd_refresh();
				int r = kp_vcwd_named() ? classify_join(out, kp_vcwd, path, 0) : -ENAMETOOLONG;
				if (r != -ENAMETOOLONG)
					return r;
			}
			/* From the directory itself (cwd.c), which the host name,
			 * the last one known, may no longer reach.  Linux bounds
			 * the path given, not its join with the cwd's name. */
			int r = kp_vcwd_named() ? classify_join(out, kp_vcwd, path, 0) : -ENAMETOOLONG;
			if (r && r != -ENAMETOOLONG)
				return r;
			if (r)
				out->host[0] = '\0';
			out->where = KP_KURA;
			out->mnt = mnt;
			out->kdirfd = kfd;
			out->p = path;
			return 0;
		}
		if (!real_cwd_known)
			kp_refresh_real_cwd();
		if (!real_cwd[0])
			return 0;
		/* Only a cwd above a prefix, or a "..", can lead a relative path in. */
		int above = 0;
		size_t cl = strlen(real_cwd);
		for (int i = 0; i < kp_nmounts && !above; i++)
			above = strncmp(kp_mounts[i].prefix, real_cwd, cl) == 0 &&
				(cl == 1 || kp_mounts[i].prefix[cl] == '/');
		if (!above && !has_dotdot(path))
			return 0;
		char src[PATH_MAX];
		if (kp_join(src, real_cwd, path))
			return 0;
		int named = names_prefix(src);
		int r = kp_classify_norm(out, src, 1);
		if (out->where == KP_KERNEL && !named)
			out->p = path;
		return r;
	}
	struct kp_fd *e = kp_get(dirfd);
	if (!e)
		return 0; /* a kernel directory: the kernel resolves it */
	int dotdot = has_dotdot(path);
	if (dotdot) {
		/* ".." may climb out of the prefix: by the directory's name as
		 * it is now.  Where that (or it with path) is past PATH_MAX, the
		 * engine walks from the directory, and stays in the pool. */
		kura_fs *fs = kp_fs(e->mnt);
		if (!fs)
			return -errno;
		char dir[PATH_MAX], host[PATH_MAX];
		int r = kura_getpath(fs, e->kfd, dir, sizeof dir);
		if (r < 0 && r != -ERANGE)
			return r;
		if (r == 0 && snprintf(host, sizeof host, "%s%s", kp_mounts[e->mnt].prefix, dir) < (int)sizeof host &&
		    (r = classify_join(out, host, path, 0)) != -ENAMETOOLONG)
			return r;
	}
	out->where = KP_KURA;
	out->mnt = e->mnt;
	out->kdirfd = e->kfd;
	out->p = path;
	if (!dotdot && e->path && kp_join(out->host, e->path, path) == 0)
		kp_normalise(out->host);
	else
		out->host[0] = '\0';
	return 0;
}

/* "/proc/<pid>/fd/N": ours only for this process's own pid (another
 * process's placeholders are not in our table). */
static int procfd_of_pid(const char *s)
{
	char *end;
	long pid = strtol(s, &end, 10);
	if (pid != (long)getpid() || strncmp(end, "/fd/", 4) != 0)
		return -1;
	s = end + 4;
	long fd = strtol(s, &end, 10);
	if (end == s || *end || fd < 0 || fd > INT_MAX)
		return -1;
	return kp_get((int)fd) ? (int)fd : -1;
}

int kp_procfd(const char *path)
{
	const char *s;
	if (strncmp(path, "/proc/self/fd/", 14) == 0)
		s = path + 14;
	else if (strncmp(path, "/dev/fd/", 8) == 0)
		s = path + 8;
	else if (strncmp(path, "/proc/thread-self/fd/", 21) == 0)
		s = path + 21;
	else if (strncmp(path, "/proc/", 6) == 0 && path[6] >= '1' && path[6] <= '9')
		return procfd_of_pid(path + 6);
	else if (strcmp(path, "/dev/stdin") == 0)
		s = "0";
	else if (strcmp(path, "/dev/stdout") == 0)
		s = "1";
	else if (strcmp(path, "/dev/stderr") == 0)
		s = "2";
	else
		return -1;
	char *end;
	long fd = strtol(s, &end, 10);
	if (end == s || *end || fd < 0 || fd > INT_MAX)
		return -1;
	return kp_get((int)fd) ? (int)fd : -1;
}
