/*
 * fuse_req.c — what every request of kura mount's server needs: the
 * caller's credentials for the engine, the way from a node to the engine
 * (a path, or an open descriptor), and entry replies.  See fuse_ops.c.
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fuse_lowlevel.h>

#include "fuse_ops.h"

kura_fs *kfs;
int dont_mask;

/* The path of node id, checked to still name that inode now (another
 * process may have renamed it, or put something else at its old name). */
int resolve(fuse_ino_t id, char **out)
{
	int err = node_path(id, NULL, out);
	if (err || id == FUSE_ROOT_ID)
		return err;
	struct stat st;
	err = kura_lstat(kfs, *out, &st);
	if (!err && st.st_ino != to_ino(id))
		err = -ESTALE;
	if (err) {
		free(*out);
		*out = NULL;
	}
	return err;
}

/* The path of name in directory node parent. */
int child_path(fuse_ino_t parent, const char *name, char **out)
{
	char *dir;
	int err = resolve(parent, &dir);
	if (err)
		return err;
	free(dir);
	return node_path(parent, name, out);
}

/* Where a call on node id goes, as the *at calls take it: its path, or
 * when it has no name any more (unlinked, or renamed away by another
 * process) a descriptor the mount holds open of it, duplicated into *fd
 * for the caller to close; the kernel asks for an open file's attributes
 * by its node alone (fstat), also after an unlink. */

int reach(fuse_ino_t id, char **path, int *fd, struct target *t)
{
	int err = resolve(id, path);
	if (!err) {
		*t = (struct target){ KURA_AT_ROOT, *path, AT_SYMLINK_NOFOLLOW };
		return 0;
	}
	if (err != -ENOENT && err != -ESTALE)
		return err;
	int d = node_dup_fd(id, kfs);
	if (d < 0)
		return err;
	*fd = d;
	*t = (struct target){ d, "", AT_EMPTY_PATH };
	return 0;
}

/* ---- credentials ---- */


void enter(fuse_req_t req, struct caller *k)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	k->c = (struct kura_creds){ .uid = ctx->uid, .fsuid = ctx->uid, .gid = ctx->gid, .fsgid = ctx->gid };
	/* Without FUSE_CAP_DONT_MASK the kernel applied the umask already. */
	k->c.umask = dont_mask ? ctx->umask : 0;
	k->groups = k->few;
	if (ctx->uid == 0) {
		k->c.caps = k->c.caps_permitted = KURA_CAPS_FS;
	} else {
		/* fuse_req_getgroups reads /proc/PID/task/TID/status: gone
		 * with the caller, which then gets no supplementary groups. */
		int n = fuse_req_getgroups(req, 32, k->few);
		if (n > 32 && (k->groups = malloc(n * sizeof(gid_t))))
			n = fuse_req_getgroups(req, n, k->groups);
		if (!k->groups) {
			k->groups = k->few;
			n = 32;
		}
		k->c.ngroups = n > 0 ? (size_t)n : 0;
		k->c.groups = k->groups;
	}
	kura_set_thread_creds(&k->c);
}

void leave(struct caller *k)
{
	kura_set_thread_creds(NULL);
	if (k->groups != k->few)
		free(k->groups);
}

/* ---- replies ---- */

void fill_entry(struct fuse_entry_param *e, const struct stat *st, uint32_t gen)
{
	memset(e, 0, sizeof *e);
	e->ino = to_node(st->st_ino);
	/* The kernel made the root with generation 0.  Other inode numbers
	 * are reused after their file is gone; the generation tells the
	 * kernel a cached inode of that number is another file now. */
	e->generation = e->ino == FUSE_ROOT_ID ? 0 : gen;
	e->attr = *st;
	e->attr_timeout = 0;
	e->entry_timeout = 0;
}

/* Answers a lookup-like request with what path names now, the kernel
 * taking a reference to it as name in parent.  0, or -errno unanswered. */
int reply_entry(fuse_req_t req, fuse_ino_t parent, const char *name, const char *path)
{
	struct stat st;
	uint32_t gen;
	int err = kura_fstatat_gen(kfs, KURA_AT_ROOT, path, &st, &gen, AT_SYMLINK_NOFOLLOW);
	if (err)
		return err;
	struct fuse_entry_param e;
	fill_entry(&e, &st, gen);
	if ((err = node_ref(e.ino, parent, name, 1)))
		return err;
	if (fuse_reply_entry(req, &e))
		node_unref(e.ino, 1); /* the kernel never took it (interrupted) */
	return 0;
}

