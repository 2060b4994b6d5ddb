/* super.c — mkfs, mount, recovery and orphans (see super.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "acl.h"
#include "alloc.h"
#include "crc.h"
#include "inode.h"
#include "xattr.h"
#include "super.h"

static __thread char last_error[512];

void set_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof last_error, fmt, ap);
	va_end(ap);
}

const char *kura_last_error(void)
{
	return last_error[0] ? last_error : "no error";
}

static uint32_t super_crc(const struct kura_super *sb)
{
	return crc32c(0, sb, offsetof(struct kura_super, crc));
}

void super_geometry(uint64_t nblocks, struct kura_super *sb)
{
	/* The log must hold the undo records of the largest single operation: a
	 * write or truncate of the whole pool logs about 1/400 of it. */
	uint64_t log_blocks = nblocks / 64;
	if (log_blocks < 64)
		log_blocks = 64;
	if (log_blocks > 262144)
		log_blocks = 262144;
	sb->block_size = KURA_BLOCK;
	sb->nblocks = nblocks;
	sb->pool_size = nblocks * KURA_BLOCK;
	sb->log_block = LOG_FIRST;
	sb->log_blocks = log_blocks;
	sb->bitmap_block = LOG_FIRST + log_blocks;
	sb->bitmap_blocks = (nblocks + KURA_BLOCK * 8 - 1) / (KURA_BLOCK * 8);
	sb->first_data_block = sb->bitmap_block + sb->bitmap_blocks;
}

/* Format 1 differs only in the free inode slots' back links (kura_inode.prev,
 * then reserved and zero), which upgrade_format adds. */
#define KURA_OLDEST_UPGRADABLE 1u

static int check_super(const struct kura_super *sb, uint64_t size, int upgrade, char *why, size_t whylen)
{
	if (sb->magic != KURA_MAGIC) {
		snprintf(why, whylen, "not a kura pool (no kura signature in the superblock)");
		return -EINVAL;
	}
	if (super_crc(sb) != sb->crc) {
		snprintf(why, whylen, "superblock checksum mismatch (the superblock is damaged)");
		return -EUCLEAN;
	}
	if (sb->version != KURA_VERSION && !(upgrade && sb->version >= KURA_OLDEST_UPGRADABLE && sb->version < KURA_VERSION)) {
		if (sb->version < KURA_OLDEST_UPGRADABLE)
			snprintf(why, whylen,
				 "pool format version %u is older than this kura's (%u): export it with the kura that made "
				 "it and import it into a new pool",
				 sb->version, KURA_VERSION);
		else if (sb->version < KURA_VERSION)
			snprintf(why, whylen,
				 "pool format version %u is older than this kura's (%u): `kura upgrade POOL` brings it up "
				 "to date in place (older kuras cannot read it then)",
				 sb->version, KURA_VERSION);
		else
			snprintf(why, whylen, "unsupported format version %u (this kura reads version %u)", sb->version,
				 KURA_VERSION);
		return -EPROTONOSUPPORT;
	}
	struct kura_super want;
	super_geometry(sb->nblocks, &want);
	if (sb->block_size != KURA_BLOCK || sb->pool_size != sb->nblocks * KURA_BLOCK ||
	    sb->log_block != want.log_block || sb->log_blocks != want.log_blocks ||
	    sb->bitmap_block != want.bitmap_block || sb->bitmap_blocks != want.bitmap_blocks ||
	    sb->first_data_block != want.first_data_block || sb->first_data_block >= sb->nblocks) {
		snprintf(why, whylen, "superblock geometry is inconsistent (%llu blocks)",
			 (unsigned long long)sb->nblocks);
		return -EUCLEAN;
	}
	if (sb->pool_size != size) {
		snprintf(why, whylen, "pool is %s: the superblock records %llu bytes but the file has %llu",
			 size < sb->pool_size ? "truncated" : "larger than its format", (unsigned long long)sb->pool_size,
			 (unsigned long long)size);
		return -EUCLEAN;
	}
	uint64_t root_off = sb->root_ino << INODE_SHIFT;
	if (root_off < sb->first_data_block * KURA_BLOCK || root_off >= sb->pool_size) {
		snprintf(why, whylen, "superblock names an impossible root inode %llu",
			 (unsigned long long)sb->root_ino);
		return -EUCLEAN;
	}
	return 0;
}

int super_load(int fd, uint64_t size, int upgrade, struct kura_super *out, int *used_copy, char *why, size_t whylen)
{
	char why2[200];
	*used_copy = 0;
	if (size < 2 * KURA_BLOCK) {
		snprintf(why, whylen, "not a kura pool (only %llu bytes)", (unsigned long long)size);
		return -EINVAL;
	}
	if (pread(fd, out, sizeof *out, SB_PRIMARY * KURA_BLOCK) != sizeof *out) {
		snprintf(why, whylen, "cannot read the superblock: %s", strerror(errno));
		return -EIO;
	}
	int err = check_super(out, size, upgrade, why, whylen);
	if (!err || err == -EPROTONOSUPPORT)
		return err;
	/* A truncated pool fails the same way in both copies; say so once. */
	struct kura_super copy;
	if (pread(fd, &copy, sizeof copy, SB_COPY * KURA_BLOCK) != sizeof copy)
		return err;
	int err2 = check_super(&copy, size, upgrade, why2, sizeof why2);
	if (err2) {
		if (err == -EINVAL && err2 != -EINVAL) {
			snprintf(why, whylen, "%s", why2);
			return err2;
		}
		return err;
	}
	*out = copy;
	*used_copy = 1;
	return 0;
}

int kura_mkfs(const char *path, uint64_t size, int force)
{
	return kura_mkfs_mode(path, size, force, 0600);
}

/* The processes that have path open, by /proc/PID/fd (those this user may
 * see), as " 123 456", for a message. */
static void holders(const char *path, char *out, size_t cap)
{
	struct stat want, st;
	out[0] = 0;
	if (stat(path, &want))
		return;
	DIR *proc = opendir("/proc");
	struct dirent *p;
	size_t used = 0, n = 0;
	while (proc && (p = readdir(proc)) && n < 8) {
		if (p->d_name[0] < '1' || p->d_name[0] > '9' || atoi(p->d_name) == getpid())
			continue;
		char dir[300];
		snprintf(dir, sizeof dir, "/proc/%s/fd", p->d_name);
		DIR *fds = opendir(dir);
		struct dirent *f;
		while (fds && (f = readdir(fds))) {
			char link[600];
			snprintf(link, sizeof link, "%s/%s", dir, f->d_name);
			if (f->d_name[0] != '.' && !stat(link, &st) && st.st_dev == want.st_dev && st.st_ino == want.st_ino) {
				used += (size_t)snprintf(out + used, cap - used, " %s", p->d_name);
				if (used >= cap)
					used = cap - 1;
				n++;
				break;
			}
		}
		if (fds)
			closedir(fds);
	}
	if (proc)
		closedir(proc);
}

int kura_mkfs_mode(const char *path, uint64_t size, int force, mode_t mode)
{
	last_error[0] = 0;
	uint64_t nblocks = size / KURA_BLOCK;
	if (size < KURA_MIN_POOL_SIZE) {
		set_error("%s: pool size %llu is below the minimum of %llu bytes", path, (unsigned long long)size,
			  (unsigned long long)KURA_MIN_POOL_SIZE);
		return -EINVAL;
	}
	/* A new pool gets exactly the mode asked for, not less the umask: it
	 * says who may use the pool (see README, "Who can use a pool"). */
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode & 07777);
	if (fd >= 0)
		fchmod(fd, mode & 07777);
	else if (errno == EEXIST)
		fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		set_error("%s: cannot create pool: %s", path, strerror(e));
		return -e;
	}
	struct stat st;
	int err = 0;
	if (fstat(fd, &st)) {
		err = -errno;
		set_error("%s: %s", path, strerror(-err));
		goto out;
	}
	if (S_ISREG(st.st_mode) && st.st_size > 0 && !force) {
		set_error("%s: file exists and is not empty (use --force to overwrite)", path);
		err = -EEXIST;
		goto out;
	}
	/* Every mount holds a read lock on the pool's first byte (fs_open):
	 * a pool in use is never formatted, --force or not, and this lock,
	 * held to the end, keeps mounts out meanwhile. */
	struct flock in_use = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
	if (S_ISREG(st.st_mode) && fcntl(fd, F_OFD_SETLK, &in_use) < 0) {
		char pids[128];
		holders(path, pids, sizeof pids);
		set_error("%s: the pool is in use (mounted by process%s%s); unmount it first", path,
			  strchr(pids + (pids[0] != 0), ' ') ? "es" : "", pids[0] ? pids : " unknown");
		err = -EBUSY;
		goto out;
	}
	if (S_ISREG(st.st_mode) && (ftruncate(fd, 0) || ftruncate(fd, (off_t)(nblocks * KURA_BLOCK)))) {
		err = -errno;
		set_error("%s: cannot size pool to %llu bytes: %s", path, (unsigned long long)size, strerror(-err));
		goto out;
	}
	struct kura_super *sb = calloc(1, sizeof *sb);
	if (!sb) {
		err = -ENOMEM;
		goto out;
	}
	super_geometry(nblocks, sb);
	if (sb->first_data_block + 16 > nblocks) {
		set_error("%s: pool too small for its own metadata", path);
		err = -EINVAL;
		free(sb);
		goto out;
	}
	sb->magic = KURA_MAGIC;
	sb->version = KURA_VERSION;
	sb->root_ino = (sb->first_data_block * KURA_BLOCK) >> INODE_SHIFT;
	sb->created_sec = time(NULL);
	if (getrandom(sb->hash_key, sizeof sb->hash_key, 0) != sizeof sb->hash_key ||
	    getrandom(sb->uuid, sizeof sb->uuid, 0) != sizeof sb->uuid) {
		err = -EIO;
		set_error("%s: no randomness for the pool's keys", path);
		free(sb);
		goto out;
	}
	sb->crc = super_crc(sb);

	struct media m;
	err = media_map(&m, fd, nblocks * KURA_BLOCK, KURA_PERSIST_AUTO, 0);
	if (err) {
		set_error("%s: cannot map pool: %s", path, strerror(-err));
		free(sb);
		goto out;
	}
	/* Everything but the superblocks first: until they are written the file
	 * is not a pool, so a crash during mkfs leaves nothing mountable. */
	uint64_t zero_end = (sb->first_data_block + 1) * KURA_BLOCK;
	media_memset(&m, 0, 0, zero_end);
	tx_format(&m, sb->log_block * KURA_BLOCK, sb->log_blocks * KURA_BLOCK);
	uint64_t used = sb->first_data_block + 1; /* metadata + the root's inode block */
	uint64_t bm = sb->bitmap_block * KURA_BLOCK;
	for (uint64_t w = 0; w < used / 64; w++)
		media_store64(&m, bm + w * 8, ~0ull);
	if (used % 64)
		media_store64(&m, bm + (used / 64) * 8, (1ull << (used % 64)) - 1);
	/* Bits past the last block are marked used so no search can return them. */
	uint64_t bits_total = sb->bitmap_blocks * KURA_BLOCK * 8;
	for (uint64_t b = nblocks; b < bits_total; b++) {
		uint64_t off = bm + (b / 64) * 8;
		uint64_t w = *(const uint64_t *)media_ptr(&m, off);
		media_store64(&m, off, w | (1ull << (b % 64)));
	}
	uint64_t root = sb->root_ino;
	struct kura_inode ri = { .mode = S_IFDIR | 0755, .nlink = 2, .uid = getuid(), .gid = getgid(),
				 .parent = root };
	ts_now(&ri.ctime);
	ri.atime = ri.mtime = ri.ctime;
	media_store(&m, root << INODE_SHIFT, &ri, sizeof ri);
	for (unsigned i = 1; i < INODES_PER_BLOCK; i++) {
		uint64_t next = i + 1 < INODES_PER_BLOCK ? root + i + 1 : 0;
		uint64_t prev = i > 1 ? root + i - 1 : 0;
		media_store64(&m, ((root + i) << INODE_SHIFT) + offsetof(struct kura_inode, link), next);
		media_store64(&m, ((root + i) << INODE_SHIFT) + offsetof(struct kura_inode, prev), prev);
	}
	struct kura_state state = { .free_blocks = nblocks - used, .inode_free = root + 1, .ndirs = 1,
				    .next_generation = 1 };
	media_store(&m, STATE_BLOCK * KURA_BLOCK, &state, sizeof state);
	media_flush(&m, 0, zero_end);
	media_flush(&m, bm, sb->bitmap_blocks * KURA_BLOCK);
	media_fence(&m);
	media_store(&m, SB_COPY * KURA_BLOCK, sb, sizeof *sb);
	media_store(&m, SB_PRIMARY * KURA_BLOCK, sb, sizeof *sb);
	media_persist(&m, 0, 2 * KURA_BLOCK);
	media_unmap(&m);
	free(sb);
	if (fsync(fd)) {
		err = -errno;
		set_error("%s: fsync: %s", path, strerror(-err));
	}
out:
	close(fd);
	return err;
}

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

/* ---- operation brackets -------------------------------------------------- */

/* acquired: lock_acquire's or lock_acquire_unless_tracee's answer. */
static int took_lock(struct kura_fs *fs, int acquired)
{
	if (acquired == 1) {
		/* The previous holder died mid-operation: its transaction is still
		 * in the log.  Undo it, then the pool is as it was before. */
		lock_write_begin(&fs->lk);
		if (fs->tx.j) {
			journal_leave(fs->tx.j);
			journal_repair(fs->tx.j, tx_head_epoch(&fs->tx));
		}
		tx_recover(&fs->tx);
		lock_mark_consistent(&fs->lk);
		lock_write_end(&fs->lk);
	}
	return acquired < 0 ? acquired : 0;
}

/* Callers that must have the lock (to give counts back) wait whatever
 * holds it; operations that may fail give up on a stopped tracee. */
void fs_lock_for_read(struct kura_fs *fs)
{
	took_lock(fs, lock_acquire(&fs->lk));
}

int fs_lock_for_read_or_fail(struct kura_fs *fs)
{
	return took_lock(fs, lock_acquire_unless_tracee(&fs->lk));
}

void fs_unlock_for_read(struct kura_fs *fs)
{
	lock_release(&fs->lk);
}

int fs_begin(struct kura_fs *fs)
{
	if (fs->read_only)
		return -EROFS;
	/* A failed msync: what this mount wrote may not be on the disk, so it
	 * says so instead of acknowledging more (remount to recover). */
	if (fs->m.io_err)
		return -EIO;
	int err = took_lock(fs, lock_acquire_unless_tracee(&fs->lk));
	if (err)
		return err;
	if (fs->tx.j)
		journal_enter(fs->tx.j);
	lock_write_begin(&fs->lk);
	alloc_drop_frees(fs);
	tx_begin(&fs->tx);
	ts_now(&fs->op_time);
	return 0;
}

int fs_end(struct kura_fs *fs, int ret)
{
	uint64_t lsn = 0;
	if (ret < 0 || fs->tx.err) {
		if (ret >= 0)
			ret = fs->tx.err;
		alloc_drop_frees(fs);
		tx_abort(&fs->tx);
	} else {
		alloc_apply_frees(fs);
		int err = tx_commit(&fs->tx);
		if (err)
			ret = err;
		else if (fs->m.io_err)
			ret = -EIO; /* applied, but not known durable */
		lsn = fs->tx.commit_lsn;
	}
	if (fs->tx.j)
		journal_leave(fs->tx.j);
	lock_write_end(&fs->lk);
	lock_release(&fs->lk);
	/* Outside the pool mutex, so that others commit while this waits and
	 * one flush covers them all. */
	if (lsn && fs->j.sync_each_op && ret >= 0) {
		int err = journal_sync(&fs->j, lsn);
		if (err)
			ret = err;
	}
	/* This operation is done whatever the sync says: a failed one sets
	 * io_err, which the next change reports. */
	if (fs->tx.j && ret >= 0 && journal_sync_due(&fs->j) && !lock_held_here(&fs->lk))
		fs_sync(fs);
	return ret;
}

void fs_fork_child(struct kura_fs *fs)
{
	char self[64];
	snprintf(self, sizeof self, "/proc/self/fd/%d", fs->pool_fd);
	int fd = open(self, (fs->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	if (fd >= 0) {
		dup3(fd, fs->pool_fd, O_CLOEXEC);
		close(fd);
	}
	lock_fork_child(&fs->lk);
}

int kura_release(kura_fs *fs)
{
	if (!fs || !fs->lk.t)
		return 0;
	int err = 0;
	while (flock(fs->pool_fd, LOCK_EX) && errno == EINTR)
		;
	if (lock_is_last(&fs->lk)) {
		if (fs->tx.j) {
			fs_lock_for_read(fs);
			err = journal_checkpoint(&fs->j);
			lock_release(&fs->lk);
			if (!err)
				journal_remove_copy(fs->pool_fd);
		}
		lock_remove(&fs->lk);
	}
	flock(fs->pool_fd, LOCK_UN);
	return err;
}

int fs_sync(struct kura_fs *fs)
{
	/* In op mode every operation that returned is durable already; one in
	 * flight (another thread's, another process's) need not be. */
	if (fs->tx.j && !fs->j.sync_each_op) {
		/* The pending changes become a record between two operations. */
		fs_lock_for_read(fs);
		int err = journal_seal(&fs->j);
		lock_release(&fs->lk);
		return err ? err : journal_sync_all(&fs->j);
	}
	return fs->m.io_err ? -EIO : 0;
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
	/* 2 to 3 adds a state field that format 2 left zero: nothing to do. */
	do {
		if (fs->sb->version >= 2)
			break;
		if ((err = fs_begin(fs)))
			return err;
		err = fs_end(fs, inode_link_back(fs, &cursor, &prev, 1024));
	} while (!err && cursor);
	if (err || (err = fs_begin(fs)))
		return err;
	struct kura_super next = *fs->sb;
	next.version = KURA_VERSION;
	next.crc = super_crc(&next);
	tx_write(&fs->tx, SB_COPY * KURA_BLOCK, &next, sizeof next);
	tx_write(&fs->tx, SB_PRIMARY * KURA_BLOCK, &next, sizeof next);
	return fs_end(fs, 0);
}

struct kura_fs *fs_open(const char *path, const struct kura_mount_opts *opts, int reclaim, int *errp)
{
	struct kura_mount_opts defaults = { 0 };
	if (!opts)
		opts = &defaults;
	last_error[0] = 0;
	int err = 0;
	struct kura_fs *fs = calloc(1, sizeof *fs);
	struct kura_super *sb = calloc(1, sizeof *sb);
	char why[300];
	if (!fs || !sb) {
		err = -ENOMEM;
		set_error("%s: out of memory", path);
		goto fail;
	}
	fs->pool_fd = -1;
	fs->copy_fd = -1;
	fs->read_only = opts->read_only;
	fs->acl_permission = acl_permission;
	if (opts->host_prefix && (err = kura_set_host_prefix(fs, opts->host_prefix))) {
		set_error("%s: host prefix '%s': %s", path, opts->host_prefix, strerror(-err));
		goto fail;
	}
	fs->pool_fd = open(path, (opts->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
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
	if (S_ISDIR(st.st_mode)) {
		err = -EISDIR;
		set_error("%s: is a directory, not a pool", path);
		goto fail;
	}
	int used_copy = 0;
	uint64_t size = (uint64_t)st.st_size;
	if (S_ISCHR(st.st_mode)) {
		/* device-DAX has no st_size: trust the superblock, then check it. */
		struct kura_super probe;
		if (pread(fs->pool_fd, &probe, sizeof probe, 0) == sizeof probe && probe.magic == KURA_MAGIC)
			size = probe.pool_size;
	}
	err = super_load(fs->pool_fd, size, opts->upgrade && !opts->read_only, sb, &used_copy, why, sizeof why);
	if (err) {
		set_error("%s: %s", path, why);
		goto fail;
	}
	fs->sb = sb;
	fs->nblocks = sb->nblocks;
	fs->first_data_block = sb->first_data_block;
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
	if (sb->version != KURA_VERSION) {
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

int kura_default_pool_path(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_DATA_HOME");
	const char *home = getenv("HOME");
	int n;
	if (xdg && *xdg)
		n = snprintf(buf, len, "%s/kura/default.pool", xdg);
	else if (home && *home)
		n = snprintf(buf, len, "%s/.local/share/kura/default.pool", home);
	else
		return -ENOENT;
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}
