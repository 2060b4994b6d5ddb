/*
 * super.h — creating, checking and mapping a pool; recovery; orphans
 * (super.c: the superblock and mkfs; mount.c: mounting and orphans).
 */
#ifndef KURA_SUPER_H
#define KURA_SUPER_H

#include <stdint.h>
#include "fs.h"
#include "inode.h" /* orphan_add, orphan_remove */

/* Reads and validates the superblock of the pool open as fd (file size
 * `size`), falling back to the copy.  On failure returns -errno and writes a
 * reason into why.  *used_copy is set when the primary was unusable. */
int super_load(int fd, uint64_t size, int upgrade, struct kura_super *out, int *used_copy, char *why, size_t whylen);
/* What a pool cannot live in, as the error says it ("a FIFO"), or NULL for
 * a regular file or a character device (device-DAX). */
const char *super_unfit_file(mode_t mode);
/* The layout mkfs gives a pool of nblocks blocks. */
void super_geometry(uint64_t nblocks, struct kura_super *sb);

/* The checksum a superblock carries in its crc field. */
uint32_t super_crc(const struct kura_super *sb);

/* Records why a mount or mkfs failed (thread-local, see kura_last_error). */
void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void clear_error(void);

/* Frees every orphan: only when no other process has the pool mounted. */
int orphan_reclaim(struct kura_fs *fs);

/* Maps and attaches; used by kura_mount and fsck. */
/* reclaim: free orphans if no other process has the pool mounted (not when
 * the caller inherits open descriptions that may name them). */
struct kura_fs *fs_open(const char *path, const struct kura_mount_opts *opts, int reclaim, int *err);
/* Unmaps and detaches; the last mount out writes everything home first.
 * 0, or -errno if what it wrote may not be on the disk (a failed sync, a
 * checkpoint that failed: the working copy then stays for the next mount). */
int fs_close(struct kura_fs *fs);

#endif
