/* mount.c — mapping a pool, recovery, orphans and unmounting (see super.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "acl.h"
#include "alloc.h"
#include "inode.h"
#include "xattr.h"
#include "super.h"

/* ---- orphans ----------------------------------------------------------- */

int orphan_reclaim(struct kura_fs *fs)
{
	int n = 0;
	while (fs_state(fs)->orphans) {
		uint64_t ino = fs_state(fs)->orphans;
		int err = fs_begin(fs);
		if (err)
			return err;
		const struct kura_inode *ip = ino_get(fs, ino);
		if (!ip || ip->nlink) {
			/* A damaged list: drop it rather than loop, and never free an
			 * inode that still has names; fsck reports leaks. */
			tx_write64(&fs->tx, STATE_OFF(orphans), 0);
			tx_write64(&fs->tx, STATE_OFF(norphans), 0);
			fs_end(fs, 0);
			return -EUCLEAN;
		}
		tx_write64(&fs->tx, STATE_OFF(orphans), ip->link);
		tx_write64(&fs->tx, STATE_OFF(norphans), fs_state(fs)->norphans - 1);
		inode_dispose(fs, ino);
		err = fs_end(fs, 0);
		if (err)
			return err;
		n++;
	}
	return n;
}

static enum kura_sync sync_mode(const struct kura_mount_opts *opts)
{
	const char *e = getenv("KURA_SYNC");
	if (e && !strcmp(e, "op"))
		return KURA_SYNC_OP;
	if (e && !strcmp(e, "fsync"))
		return KURA_SYNC_FSYNC;
	return opts->sync;
}

/* The file back end, read-write: the working copy and its journal.  The
 * caller holds the pool's flock, so no other mount decides at the same time
 * whether it is alone and whether the copy is current, and none attaches
 * before a copy made here is whole: formatting its undo log's head after
 * another mount had committed reset the epoch under it, and recovery then
 * replayed that mount's retired records (tests/mount_race_test.c). */
static int open_copy(struct kura_fs *fs, int *alone, char *why,
		     size_t whylen)
{
	const struct kura_super *sb = fs->sb;
	int err = lock_attach_held(&fs->lk, fs->pool_fd, alone);
	if (err) {
		snprintf(why, whylen, "cannot attach the shared lock table: %s",
			 fs->lk.why[0] ? fs->lk.why : strerror(-err));
		return err;
	}
	int created = 0;
	fs->copy_fd = journal_open_copy(fs->pool_fd, sb, *alone, &created, why, whylen);
	if (fs->copy_fd < 0)
		return fs->copy_fd;
	err = media_map_copy(&fs->m, fs->copy_fd, journal_copy_size(sb), sb->pool_size, fs->pool_fd);
	if (err) {
		snprintf(why, whylen, "cannot map the working copy: %s", strerror(-err));
		if (created)
			journal_remove_copy(fs->pool_fd);
		return err;
	}
	uint64_t undo = journal_undo_off(sb), undo_len = sb->log_blocks * KURA_BLOCK;
	if (created) /* a new copy reads as zeros */
		tx_format(&fs->m, undo, 0);
	tx_init(&fs->tx, &fs->m, undo, undo_len);
	journal_init(&fs->j, &fs->m, sb, created);
	fs->j.sync_each_op = !fs->fsync_mode;
	fs->m.fresh_cached = fs->j.sync_each_op;
	fs->tx.j = &fs->j;
	/* Direct I/O where the file system has it: see journal.h. */
	char self[64];
	snprintf(self, sizeof self, "/proc/self/fd/%d", fs->pool_fd);
	fs->m.dio_fd = open(self, O_RDWR | O_DIRECT | O_DSYNC | O_CLOEXEC);
	return 0;
}

/* ---- mapping ------------------------------------------------------------ */

/* Format 1 to this one, in steps that each leave a pool format 1 reads
 * (which ignores the back links), the version last: a crash anywhere
 * leaves a pool of one format or the other, and upgrading again finishes.
 * Chunked so that no transaction outgrows the log.  Inode blocks and
 * directory buckets format 1 never gave back are left to fsck --repair. */
static int upgrade_format(struct kura_fs *fs)
{
	uint64_t cursor = 0, prev = 0;
	int err = 0;
	/* 2 to 3 adds a state field that format 2 left zero, 3 to 4 an entry
	 * format 3 never holds: nothing to do. */
	do {
		if (fs->sb->version >= 2)
			break;
		if ((err = fs_begin(fs)))
			return err;
		err = fs_end(fs, inode_link_back(fs, &cursor, &prev, 1024));
	} while (!err && cursor);
	if (err || (err = fs_begin(fs)))
		return err;
	super_mark_version(fs, KURA_VERSION);
	return fs_end(fs, 0);
}

/* The superblock of an opened pool (st: its fstat), checked; on failure
 * the reason is set, naming the path. */
static int read_super(const char *path, int fd, const struct stat *st, int upgrade, struct kura_super *sb,
		      int *used_copy)
{
	char why[300];
	const char *unfit = super_unfit_file(st->st_mode);
	if (unfit) {
		set_error("%s: is %s, not a pool", path, unfit);
		return S_ISDIR(st->st_mode) ? -EISDIR : -EINVAL;
	}
	uint64_t size = (uint64_t)st->st_size;
	if (S_ISCHR(st->st_mode)) {
		/* device-DAX has no st_size: trust the superblock, then check it. */
		struct kura_super probe;
		if (pread(fd, &probe, sizeof probe, 0) == sizeof probe && probe.magic == KURA_MAGIC)
			size = probe.pool_size;
	}
	int err = super_load(fd, size, upgrade, sb, used_copy, why, sizeof why);
	if (err)
		set_error("%s: %s", path, why);
	return err;
}

int kura_probe(const char *path)
{
	clear_error();
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), err = 0, used_copy = 0;
	struct kura_super *sb = malloc(sizeof *sb);
	struct stat st;
	if (fd < 0 || fstat(fd, &st)) {
		err = -errno;
		set_error("%s: cannot open pool: %s", path, strerror(-err));
	} else if (!sb) {
		err = -ENOMEM;
		set_error("%s: out of memory", path);
	} else {
		err = read_super(path, fd, &st, 0, sb, &used_copy);
	}
	if (fd >= 0)
		close(fd);
	free(sb);
	return err;
}

struct kura_fs *fs_open(const char *path, const struct kura_mount_opts *opts, int reclaim, int *errp)
{
	struct kura_mount_opts defaults = { 0 };
	if (!opts)
		opts = &defaults;
	clear_error();
	media_fsize_refresh(); /* the mount's own files may pass the program's limit */
	int err = 0;
	struct kura_fs *fs = calloc(1, sizeof *fs);
	struct kura_super *sb = calloc(1, sizeof *sb);
	char why[300];
	if (!fs || !sb) {
		err = -ENOMEM;
		set_error("%s: out of memory", path);
		goto fail;
	}
	static uint64_t mounts;
	fs->mount_id = __atomic_add_fetch(&mounts, 1, __ATOMIC_RELAXED);
	fs->pool_fd = -1;
	fs->copy_fd = -1;
	fs->read_only = opts->read_only;
	fs->acl_permission = acl_permission;
	if (opts->host_prefix && (err = kura_set_host_prefix(fs, opts->host_prefix))) {
		set_error("%s: host prefix '%s': %s", path, opts->host_prefix, strerror(-err));
		goto fail;
	}
	/* O_NONBLOCK: a FIFO given as the pool must be refused, not waited on
	 * for a writer (it changes nothing for a file or a DAX device). */
	fs->pool_fd = open(path, (opts->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NONBLOCK);
	if (fs->pool_fd < 0) {
		err = -errno;
		set_error("%s: cannot open pool: %s", path, strerror(-err));
		goto fail;
	}
	struct stat st;
	if (fstat(fs->pool_fd, &st)) {
		err = -errno;
		set_error("%s: %s", path, strerror(-err));
		goto fail;
	}
	/* Held while the mount lives (this descriptor's open file description
	 * carries it, forks included), so kura_mkfs can tell a pool in use.
	 * Waits while mkfs (or kura run's tidying) holds the write lock: both
	 * hold it briefly, and a holder that dies loses it. */
	struct flock in_use = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
	int locked;
	while ((locked = fcntl(fs->pool_fd, F_OFD_SETLKW, &in_use)) < 0 && errno == EINTR)
		;
	if (S_ISREG(st.st_mode) && locked < 0 && errno != EINVAL) {
		err = -errno;
		set_error("%s: cannot lock the pool file: %s", path, strerror(-err));
		goto fail;
	}
	int used_copy = 0;
	if ((err = read_super(path, fs->pool_fd, &st, opts->upgrade && !opts->read_only, sb, &used_copy)))
		goto fail;
	fs->sb = sb;
	fs->nblocks = sb->nblocks;
	fs->first_data_block = sb->first_data_block;
	fs->meta_reserve = alloc_meta_reserve(sb->nblocks - sb->first_data_block);
	err = media_map(&fs->m, fs->pool_fd, sb->pool_size, opts->persist, opts->read_only);
	if (err) {
		set_error("%s: cannot map pool: %s", path, strerror(-err));
		goto fail;
	}
	int alone = 0;
	/* Held from attaching until this mount is set up and, when it is alone,
	 * has reclaimed the orphans of mounts that died: a mount attaching
	 * meanwhile could see a half-made copy, or have its own unlinked open
	 * files taken for orphans.  Any failure below closes pool_fd, which
	 * drops it. */
	while (flock(fs->pool_fd, LOCK_EX) && errno == EINTR)
		;
	/* fsync by default on a disk: README says why. */
	fs->fsync_mode = fs->m.kind == KURA_PERSIST_FILE && sync_mode(opts) != KURA_SYNC_OP;
	if (fs->m.kind == KURA_PERSIST_FILE && !opts->read_only) {
		media_unmap(&fs->m);
		err = open_copy(fs, &alone, why, sizeof why);
		if (err) {
			set_error("%s: %s", path, why);
			goto fail_copy;
		}
	} else {
		/* Left by the file back end: its records are durable there and
		 * replay here; then the region becomes an undo log again (only in
		 * this process's view when read-only). */
		if (journal_is_journal(&fs->m, sb)) {
			journal_replay_mapped(&fs->m, sb);
			if (opts->read_only)
				tx_format_view(&fs->m, sb->log_block * KURA_BLOCK);
			else
				tx_format(&fs->m, sb->log_block * KURA_BLOCK, sb->log_blocks * KURA_BLOCK);
		}
		if (tx_check_head(&fs->m, sb->log_block * KURA_BLOCK)) {
			err = -EUCLEAN;
			set_error("%s: the undo log's header is damaged", path);
			goto fail_unmap;
		}
		tx_init(&fs->tx, &fs->m, sb->log_block * KURA_BLOCK, sb->log_blocks * KURA_BLOCK);
		err = lock_attach_held(&fs->lk, fs->pool_fd, &alone);
		if (err) {
			set_error("%s: cannot attach the shared lock table: %s", path,
				  fs->lk.why[0] ? fs->lk.why : strerror(-err));
			goto fail_tx;
		}
	}
	fs->pool_path = strdup(path);
	pthread_mutex_init(&fs->fd_mutex, NULL);
	if (!opts->no_recover) {
		fs_lock_for_read(fs);
		lock_write_begin(&fs->lk);
		if (fs->tx.j) /* a copy left by processes that died: as took_lock does after one */
			journal_repair(fs->tx.j, tx_head_epoch(&fs->tx));
		tx_recover(&fs->tx);
		lock_write_end(&fs->lk);
		lock_release(&fs->lk);
	}
	if (!ino_get(fs, sb->root_ino) || !S_ISDIR(ino_get(fs, sb->root_ino)->mode)) {
		err = -EUCLEAN;
		set_error("%s: the root directory's inode is damaged", path);
		fs_close(fs);
		goto out;
	}
	fs->mounted_alone = alone;
	fs->state_fd = -1;
	if (sb->version != KURA_VERSION && (sb->version != KURA_VERSION_AS_IS || (opts->upgrade && !opts->read_only))) {
		if ((err = upgrade_format(fs))) {
			set_error("%s: cannot upgrade from format version %u: %s", path, sb->version, strerror(-err));
			fs_close(fs);
			goto out;
		}
		sb->version = KURA_VERSION;
	}
	if (alone && reclaim && !opts->read_only && !opts->no_recover)
		orphan_reclaim(fs);
	flock(fs->pool_fd, LOCK_UN);
	(void)used_copy;
	return fs;
fail_copy:
	lock_detach(&fs->lk, fs->pool_fd);
	if (fs->copy_fd >= 0)
		close(fs->copy_fd);
fail_tx:
	tx_destroy(&fs->tx);
fail_unmap:
	media_unmap(&fs->m);
fail:
	if (fs && fs->pool_fd >= 0)
		close(fs->pool_fd);
	if (fs)
		free(fs->host_prefix);
	free(fs);
	free(sb);
out:
	if (errp)
		*errp = err;
	return NULL;
}

int fs_close(struct kura_fs *fs)
{
	int err = 0;
	if (fs->tx.j) {
		/* The last mount out writes everything home and removes the copy,
		 * under the pool's flock so that no mount attaches meanwhile. */
		while (flock(fs->pool_fd, LOCK_EX) && errno == EINTR)
			;
		if (lock_is_last(&fs->lk)) {
			fs_lock_for_read(fs);
			err = journal_checkpoint(&fs->j);
			lock_release(&fs->lk);
			if (!err)
				journal_remove_copy(fs->pool_fd);
		}
	}
	if (!err && fs->m.io_err)
		err = -EIO;
	lock_detach(&fs->lk, fs->pool_fd);
	tx_destroy(&fs->tx);
	media_unmap(&fs->m);
	if (fs->copy_fd >= 0)
		close(fs->copy_fd);
	if (fs->m.dio_fd >= 0)
		close(fs->m.dio_fd);
	close(fs->pool_fd);
	free(fs->pending_free);
	free(fs->fds);
	free(fs->pool_path);
	free(fs->host_prefix);
	free((void *)fs->sb);
	pthread_mutex_destroy(&fs->fd_mutex);
	free(fs);
	return err;
}
