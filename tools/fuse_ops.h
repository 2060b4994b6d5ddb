/*
 * fuse_ops.h — what cli_mount.c needs of fuse_ops.c, the FUSE low-level
 * operations serving a mounted pool.
 */
#ifndef KURA_FUSE_OPS_H
#define KURA_FUSE_OPS_H

#include <stddef.h>
#include "kura.h"

struct fuse_lowlevel_ops;

/* The operations, serving fs from now on (one pool per process). */
int kura_fuse_prepare(kura_fs *fs, const struct fuse_lowlevel_ops **ops, size_t *size);

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

#endif
