/* path.c — path resolution (see path.h). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "dir.h"
#include "dir_index.h"
#include "inode.h"
#include "path.h"

/* ---- host prefix (kura_mount_opts.host_prefix) ----
 * Written only when a walk escapes, so walks that stay in the pool (every
 * walk of a mount without the option) never touch it. */
static __thread char escaped[PATH_MAX];

const char *kura_escaped_path(void)
{
	return escaped;
}

/* The host path head[0..hl) + (slash ? "/" : "") + tail becomes this
 * thread's escaped path. */
static int escape(const char *head, size_t hl, int slash, const char *tail)
{
	size_t tl = strlen(tail), sl = slash ? 1 : 0;
	if (hl + sl + tl >= sizeof escaped)
		return -ENAMETOOLONG;
	memcpy(escaped, head, hl);
	escaped[hl] = '/';
	memcpy(escaped + hl + sl, tail, tl + 1);
	return KURA_ESCAPED;
}

int kura_set_host_prefix(kura_fs *fs, const char *prefix)
{
	char *copy = NULL;
	size_t len = 0;
	if (prefix) {
		len = strnlen(prefix, PATH_MAX);
		if (prefix[0] != '/' || len >= PATH_MAX)
			return -EINVAL;
		while (len && prefix[len - 1] == '/')
			len--; /* "/kura/" is "/kura", and "/" is "": every target starts with it + '/' */
		if (!(copy = strndup(prefix, len)))
			return -ENOMEM;
	}
	free(fs->host_prefix);
	fs->host_prefix = copy;
	fs->host_plen = len;
	size_t parent = len;
	while (parent && prefix[parent - 1] != '/')
		parent--;
	fs->host_parent = parent ? parent - 1 : 0; /* "/a/b" -> "/a", "/kura" -> "" (then "/" + rest) */
	return 0;
}

/* Where the last component of path (plen bytes) begins, 0 if nothing
 * comes before it: the part a remembered walk may stand for. */
static size_t prefix_len(const char *path, size_t plen)
{
	while (plen && path[plen - 1] == '/')
		plen--;
	const char *slash = plen ? memrchr(path, '/', plen) : NULL;
	return slash ? (size_t)(slash - path) + 1 : 0;
}

/* A remembered walk holds while every directory on it is still one and
 * may still be searched: ENOTDIR and EACCES are the full walk's to give. */
static int memo_holds(const struct kura_fs *fs, const struct walk_memo *m)
{
	for (unsigned i = 0; i <= m->n; i++) {
		const struct kura_inode *ip = ino_get(fs, m->dirs[i]);
		if (!ip || !S_ISDIR(ip->mode) || (i < m->n && perm_check(fs, ip, X_OK)))
			return 0;
	}
	return 1;
}

int path_walk(const struct kura_fs *fs, uint64_t start, const char *path, int flags, struct walk *w)
{
	char buf[2][PATH_MAX + KURA_SYMLINK_MAX + 2];
	int which = 0, links = 0;
	size_t plen = strnlen(path, PATH_MAX);
	if (plen >= PATH_MAX)
		return -ENAMETOOLONG;
	if (plen == 0)
		return -ENOENT;
	/* The path itself until a symlink is spliced into a buffer. */
	const char *p = path;
	uint64_t root = fs->sb->root_ino;
	uint64_t cur = start ? start : root;
	/* Field by field: the name buffer is filled before it is read, and
	 * clearing it costs a walk more than the rest of a short path. */
	w->dir = w->ino = 0;
	w->type = 0;
	w->len = 0;
	w->name[0] = '\0';
	w->dot = w->trailing_slash = w->toolong = 0;
	/* The leading directories as this thread last walked them, when
	 * nothing since can have changed where they lead (dir_index.h). */
	uint64_t seq = dir_index_seq(fs), memo_start = path[0] == '/' ? 0 : cur;
	size_t memo_len = lock_no_binds(&fs->lk) ? prefix_len(path, plen) : 0;
	struct walk_memo memo;
	int remember = 0;
	if (memo_len) {
		if (dir_index_walk_recall(fs, memo_start, path, memo_len, seq, &memo) && memo_holds(fs, &memo)) {
			cur = memo.dirs[memo.n];
			p = path + memo_len;
		} else {
			memo.n = 0;
			remember = 1;
		}
	}
	for (;;) {
		if (*p == '/') {
			cur = root;
			while (*p == '/')
				p++;
		}
		const struct kura_inode *dip = ino_get(fs, cur);
		if (!dip)
			return -EUCLEAN;
		if (!*p) {
			/* The path names a directory with no last component ("/", "a/.."+"/"). */
			w->dir = cur;
			w->ino = cur;
			w->type = DT_DIR;
			w->len = 0;
			w->dot = 1;
			return 0;
		}
		if (!S_ISDIR(dip->mode))
			return -ENOTDIR;
		const char *name = p;
		while (*p && *p != '/')
			p++;
		size_t len = (size_t)(p - name);
		int slash = *p == '/';
		while (*p == '/')
			p++;
		int last = !*p;
		int err = perm_check(fs, dip, X_OK);
		if (err)
			return err;
		int dotname = (len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.');
		if (remember) {
			/* Only a plain descent, no symlink, no dot, is remembered. */
			if (last && !links && (size_t)(name - path) == memo_len && memo.n) {
				memo.dirs[memo.n] = cur;
				dir_index_walk_remember(fs, memo_start, path, memo_len, seq, &memo);
			}
			if (last || links || dotname || memo.n == WALK_MEMO_DIRS)
				remember = 0;
			else
				memo.dirs[memo.n++] = cur;
		}
		if (last && slash && (flags & WALK_CREAT) && !dotname)
			return -EISDIR;
		if (len > KURA_NAME_MAX) {
			/* rename resolves both parents before it judges either name */
			if (!last || (flags & (WALK_PARENT | WALK_DEFER_LONG)) != (WALK_PARENT | WALK_DEFER_LONG))
				return -ENAMETOOLONG;
			w->dir = cur;
			w->toolong = 1;
			return 0;
		}
		uint64_t child;
		unsigned type;
		int dot = dotname;
		if (len == 1 && name[0] == '.') {
			child = cur;
			type = DT_DIR;
		} else if (dot) {
			/* With a host prefix the pool's root has a parent: the
			 * host directory holding the prefix, as a mount point's. */
			if (cur == root && fs->host_prefix)
				return escape(fs->host_prefix, fs->host_parent, 1, p);
			child = dip->parent;
			type = DT_DIR;
			if (!child)
				return -EUCLEAN; /* a directory without a parent link is damage */
		} else {
			err = dir_lookup(fs, dip, name, len, &child, &type);
			if (err == -ENOENT && last && (flags & WALK_PARENT)) {
				child = 0;
				type = 0;
			} else if (err) {
				return err;
			}
		}
		/* A walk goes on in the root bound over a name, except at the
		 * last name of a call on the name itself (rmdir finds the
		 * point, to refuse it); open(O_CREAT) of an existing name is
		 * a lookup. */
		if (child && (!last || (flags & (WALK_PARENT | WALK_CREAT)) != WALK_PARENT) &&
		    !(len == 1 && name[0] == '.'))
			child = lock_bind_cross(&fs->lk, child);
		const struct kura_inode *cip = child ? ino_get(fs, child) : NULL;
		if (child && !cip)
			return -EUCLEAN;
		/* A trailing slash makes a lookup follow a final symlink, but not an
		 * operation on the name itself (rename, unlink, rmdir, link). */
		if (cip && S_ISLNK(cip->mode) &&
		    (!last || (flags & WALK_FOLLOW) || (slash && !(flags & WALK_PARENT)))) {
			if (++links > KURA_SYMLOOP_MAX)
				return -ELOOP;
			if (cip->size == 0 || cip->size > KURA_SYMLINK_MAX)
				return cip->size ? -EUCLEAN : -ENOENT;
			/* Splice: target + "/" + rest, built in the other buffer. */
			char *nb = buf[which ^ 1];
			size_t tl = (size_t)inode_read(fs, cip, nb, cip->size, 0);
			size_t rest = strlen(p);
			if (tl + 1 + rest + (slash ? 1 : 0) >= sizeof buf[0])
				return -ENAMETOOLONG;
			nb[tl] = '/';
			memmove(nb + tl + 1, p, rest);
			nb[tl + 1 + rest] = 0; /* p may be the caller's, changing under us */
			if (last && !slash)
				nb[tl] = 0;
			if (fs->host_prefix) {
				if (nb[0] == '/') {
					size_t pl = fs->host_plen;
					if (strncmp(nb, fs->host_prefix, pl) || (nb[pl] != '/' && nb[pl]))
						return escape("", 0, 0, nb);
					cur = root; /* the prefix itself is the root, even with nothing after it */
					which ^= 1;
					p = nb + pl;
					continue;
				}
			}
			which ^= 1;
			p = nb;
			continue;
		}
		if (!last) {
			if (!cip)
				return -ENOENT;
			cur = child;
			continue;
		}
		if (slash && cip && !S_ISDIR(cip->mode) && !(flags & WALK_PARENT))
			return -ENOTDIR; /* with WALK_PARENT the caller decides, as Linux's errno differs per call */
		w->dir = cur;
		w->ino = child;
		w->type = cip ? dtype_of(cip->mode) : 0;
		w->len = len;
		memcpy(w->name, name, len);
		w->name[len] = 0;
		w->dot = dot;
		w->trailing_slash = slash;
		return 0;
	}
}
