/*
 * shm.h — objects in /dev/shm that stand beside a pool (lock tables, the
 * working copy).  Anyone may create a name there first, so an object is
 * used only if a user of the pool made it.
 */
#ifndef KURA_SHM_H
#define KURA_SHM_H

#include <stddef.h>
#include <sys/stat.h>

/* 0 if the open object fd may serve the pool whose stat is pool: a regular
 * file made by one of the pool's users (root, this user, the pool's owner;
 * when the pool is open to its group, one with the pool's group, which
 * only members can give; when it is open to all, anyone), and open to no
 * one the pool is closed to.  Else -EPERM, and why (naming name) says whose
 * it is. */
int shm_trusted(int fd, const char *name, const struct stat *pool, char *why, size_t whylen);

#endif
