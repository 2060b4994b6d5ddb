/*
 * fuse_nodes.c — the nodes the kernel holds of a mounted pool: FUSE node
 * ids, their lookup counts, and the way to each (parent node, name) that
 * the engine's path calls need (see fuse_ops.c's head comment).
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fuse_lowlevel.h>

#include "fuse_ops.h"

struct node {
	fuse_ino_t id;
	fuse_ino_t parent; /* 0 for the root */
	char *name;
	uint64_t nlookup;
	/* The mount's open descriptors of it: the way to a node whose names
	 * are gone (an unlinked file a program still has open). */
	int *fds;
	size_t nfds, capfds;
	struct node *next;
};

static struct {
	pthread_mutex_t mu;
	struct node **tab;
	size_t cap, n;
} nodes = { .mu = PTHREAD_MUTEX_INITIALIZER };

static uint64_t root_ino;

uint64_t to_node(uint64_t ino)
{
	return ino == root_ino ? FUSE_ROOT_ID : ino;
}

uint64_t to_ino(uint64_t id)
{
	return id == FUSE_ROOT_ID ? root_ino : id;
}

static struct node **slot_of(fuse_ino_t id)
{
	struct node **p = &nodes.tab[(id * 0x9e3779b97f4a7c15ull >> 17) & (nodes.cap - 1)];
	while (*p && (*p)->id != id)
		p = &(*p)->next;
	return p;
}

static int grow(void)
{
	size_t cap = nodes.cap ? nodes.cap * 2 : 1024;
	struct node **tab = calloc(cap, sizeof *tab), **old = nodes.tab;
	if (!tab)
		return -ENOMEM;
	size_t oldcap = nodes.cap;
	nodes.tab = tab;
	nodes.cap = cap;
	for (size_t i = 0; i < oldcap; i++) {
		for (struct node *n = old[i], *next; n; n = next) {
			next = n->next;
			n->next = NULL;
			*slot_of(n->id) = n;
		}
	}
	free(old);
	return 0;
}

/* The kernel took `count` more references to id, reached as name in
 * parent: remember (or refresh) the way to it. */
int node_ref(fuse_ino_t id, fuse_ino_t parent, const char *name, uint64_t count)
{
	if (id == FUSE_ROOT_ID)
		return 0;
	char *copy = strdup(name);
	if (!copy)
		return -ENOMEM;
	pthread_mutex_lock(&nodes.mu);
	int err = 0;
	if (nodes.n >= nodes.cap * 3 / 4 && (err = grow()) < 0) {
		pthread_mutex_unlock(&nodes.mu);
		free(copy);
		return err;
	}
	struct node **p = slot_of(id);
	if (!*p) {
		struct node *n = calloc(1, sizeof *n);
		if (!n) {
			pthread_mutex_unlock(&nodes.mu);
			free(copy);
			return -ENOMEM;
		}
		n->id = id;
		*p = n;
		nodes.n++;
	}
	free((*p)->name);
	(*p)->name = copy;
	(*p)->parent = parent;
	(*p)->nlookup += count;
	pthread_mutex_unlock(&nodes.mu);
	return 0;
}

void node_unref(fuse_ino_t id, uint64_t count)
{
	pthread_mutex_lock(&nodes.mu);
	struct node **p = nodes.cap ? slot_of(id) : NULL;
	struct node *n = p ? *p : NULL;
	if (n && (n->nlookup -= count < n->nlookup ? count : n->nlookup) == 0) {
		*p = n->next;
		nodes.n--;
		free(n->name);
		free(n->fds);
		free(n);
	}
	pthread_mutex_unlock(&nodes.mu);
}

/* A rename through the mount moved id to name in parent; no reference
 * changes hands. */
void node_move(fuse_ino_t id, fuse_ino_t parent, const char *name)
{
	char *copy = strdup(name);
	pthread_mutex_lock(&nodes.mu);
	struct node **p = nodes.cap ? slot_of(id) : NULL;
	if (p && *p && copy) {
		free((*p)->name);
		(*p)->name = copy;
		(*p)->parent = parent;
		copy = NULL;
	}
	pthread_mutex_unlock(&nodes.mu);
	free(copy); /* not held (or no memory: the next lookup finds it) */
}

/* "/a/b" for node id (then "/name" when name is given), by its recorded
 * parents; -ESTALE for a node the kernel holds no reference to. */
int node_path(fuse_ino_t id, const char *name, char **out)
{
	char buf[PATH_MAX];
	size_t pos = sizeof buf - 1;
	buf[pos] = '\0';
	int err = 0;
	if (name) {
		size_t len = strlen(name);
		if (len + 1 > pos)
			return -ENAMETOOLONG;
		pos -= len;
		memcpy(buf + pos, name, len);
		buf[--pos] = '/';
	}
	pthread_mutex_lock(&nodes.mu);
	for (int depth = 0; id != FUSE_ROOT_ID; depth++) {
		struct node **p = nodes.cap ? slot_of(id) : NULL;
		if (!p || !*p || depth > PATH_MAX / 2) {
			err = -ESTALE;
			break;
		}
		size_t len = strlen((*p)->name);
		if (len + 1 > pos) {
			err = -ENAMETOOLONG;
			break;
		}
		pos -= len;
		memcpy(buf + pos, (*p)->name, len);
		buf[--pos] = '/';
		id = (*p)->parent;
	}
	pthread_mutex_unlock(&nodes.mu);
	if (err)
		return err;
	*out = strdup(pos == sizeof buf - 1 ? "/" : buf + pos);
	return *out ? 0 : -ENOMEM;
}

void nodes_init(uint64_t root)
{
	root_ino = root;
}

int node_add_fd(uint64_t id, int fd)
{
	pthread_mutex_lock(&nodes.mu);
	struct node **p = nodes.cap ? slot_of(id) : NULL;
	struct node *n = p ? *p : NULL;
	int err = n ? 0 : -ESTALE;
	if (n && n->nfds == n->capfds) {
		size_t cap = n->capfds ? 2 * n->capfds : 4;
		int *fds = realloc(n->fds, cap * sizeof *fds);
		if (fds) {
			n->fds = fds;
			n->capfds = cap;
		} else {
			err = -ENOMEM;
		}
	}
	if (!err)
		n->fds[n->nfds++] = fd;
	pthread_mutex_unlock(&nodes.mu);
	return err;
}

void node_del_fd(uint64_t id, int fd)
{
	pthread_mutex_lock(&nodes.mu);
	struct node **p = nodes.cap ? slot_of(id) : NULL;
	struct node *n = p ? *p : NULL;
	for (size_t i = 0; n && i < n->nfds; i++) {
		if (n->fds[i] == fd) {
			n->fds[i] = n->fds[--n->nfds];
			break;
		}
	}
	pthread_mutex_unlock(&nodes.mu);
}

int node_dup_fd(uint64_t id, kura_fs *fs)
{
	pthread_mutex_lock(&nodes.mu);
	struct node **p = nodes.cap ? slot_of(id) : NULL;
	/* Duplicated under the lock: a release may close the original as
	 * soon as it is let go. */
	int fd = p && *p && (*p)->nfds ? kura_dup(fs, (*p)->fds[0]) : -ENOENT;
	pthread_mutex_unlock(&nodes.mu);
	return fd;
}
