/*
 * fuse_ops.h — kura mount's FUSE server: the operations (fuse_ops.c) for
 * cli_mount.c, and what they share: the node table (fuse_nodes.c) and
 * each request's bracket (fuse_req.c).
 */
#ifndef KURA_FUSE_OPS_H
#define KURA_FUSE_OPS_H

#include <stddef.h>
#include "kura.h"

struct fuse_lowlevel_ops;

/* The operations, serving fs from now on (one pool per process). */
int kura_fuse_prepare(kura_fs *fs, const struct fuse_lowlevel_ops **ops, size_t *size);
/* After the session loop: closes what the kernel left open. */
void kura_fuse_finish(void);

/* ---- fuse_nodes.c ---- */

#include <stdint.h>

/* The engine's root inode number is FUSE_ROOT_ID; the others are as is. */
void nodes_init(uint64_t root_ino);
uint64_t to_node(uint64_t ino);
uint64_t to_ino(uint64_t node);
/* The kernel took count more references to node id, reached as name in
 * parent: remember (or refresh) the way to it.  0 or -ENOMEM. */
int node_ref(uint64_t id, uint64_t parent, const char *name, uint64_t count);
/* The kernel forgot count references; the last one drops the node. */
void node_unref(uint64_t id, uint64_t count);
/* A rename through the mount moved id to name in parent. */
void node_move(uint64_t id, uint64_t parent, const char *name);
/* The path of node id ("/" the root), with "/name" appended when name is
 * given, as the recorded parents spell it, in *out (malloc'd): 0, -ESTALE
 * for a node the kernel holds no reference to, -ENAMETOOLONG, -ENOMEM. */
int node_path(uint64_t id, const char *name, char **out);
/* The mount opened descriptor fd of node id (0, -ENOMEM, -ESTALE), or
 * is about to close it. */
int node_add_fd(uint64_t id, int fd);
void node_del_fd(uint64_t id, int fd);
/* A duplicate of one of those descriptors, for the caller to close, or
 * -ENOENT when there is none. */
int node_dup_fd(uint64_t id, kura_fs *fs);

/* ---- fuse_req.c (only with <fuse_lowlevel.h>) ---- */

#ifdef FUSE_USE_VERSION
#include <fuse_lowlevel.h>

extern kura_fs *kfs;
/* FUSE_CAP_DONT_MASK was granted: the umask comes with the request. */
extern int dont_mask;

/* The path of node id, checked to still name that inode now. */
int resolve(fuse_ino_t id, char **out);
/* The path of name in directory node parent. */
int child_path(fuse_ino_t parent, const char *name, char **out);

/* Where a call on a node goes, as the *at calls take it. */
struct target {
	int dirfd;
	const char *path;
	int flags;
};

/* Its path, or when it has no name any more a duplicate of a descriptor
 * the server holds open of it, in *fd for the caller to close. */
int reach(fuse_ino_t id, char **path, int *fd, struct target *t);

/* The caller's credentials, the engine's for this thread until leave. */
struct caller {
	struct kura_creds c;
	gid_t few[32];
	gid_t *groups;
};

void enter(fuse_req_t req, struct caller *k);
void leave(struct caller *k);

/* Every handler is one of these brackets; err < 0 is answered here. */
#define BEGIN(req)              \
	struct caller caller_;  \
	enter(req, &caller_);   \
	int err = 0, tfd = -1;  \
	char *path = NULL, *path2 = NULL
#define END(req)                                \
	do {                                    \
		leave(&caller_);                \
		free(path);                     \
		free(path2);                    \
		if (tfd >= 0)                   \
			kura_close(kfs, tfd);   \
		if (err < 0)                    \
			fuse_reply_err(req, -err); \
	} while (0)

void fill_entry(struct fuse_entry_param *e, const struct stat *st, uint32_t gen);
/* Answers a lookup-like request with what path names now, the kernel
 * taking a reference to it as name in parent.  0, or -errno unanswered. */
int reply_entry(fuse_req_t req, fuse_ino_t parent, const char *name, const char *path);

/* ---- fuse_files.c: open files and directories ---- */

/* The engine descriptor of the handle fi carries, or -1 for none. */
int handle_fd(struct fuse_file_info *fi);
/* At the end: closes what the kernel left open. */
void handles_close_all(void);
void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi);
void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off, struct fuse_file_info *fi);
void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len, struct fuse_file_info *fi);
void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi);
void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
			fuse_ino_t ino_out, off_t off_out, struct fuse_file_info *fi_out, size_t len, int flags);
#endif

#endif
