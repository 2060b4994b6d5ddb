/* super.c — the superblock, mkfs and why a mount failed (see super.h). */
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

void clear_error(void)
{
	last_error[0] = 0;
}

const char *kura_last_error(void)
{
	return last_error[0] ? last_error : "no error";
}

uint32_t super_crc(const struct kura_super *sb)
{
	return crc32c(0, sb, offsetof(struct kura_super, crc));
}

uint32_t super_version(const struct kura_fs *fs)
{
	/* The pool's own superblock, not fs->sb: this mount or another may
	 * have marked it since, and a rolled-back transaction unmarks it.  A
	 * damaged primary (the mount read the copy) leaves fs->sb's word. */
	const struct kura_super *cur = media_ptr(&fs->m, SB_PRIMARY * KURA_BLOCK);
	return cur->version <= KURA_VERSION && super_crc(cur) == cur->crc ? cur->version : fs->sb->version;
}

void super_mark_version(struct kura_fs *fs, uint32_t version)
{
	if (super_version(fs) >= version)
		return;
	struct kura_super next = *fs->sb;
	next.version = version;
	next.crc = super_crc(&next);
	tx_write(&fs->tx, SB_COPY * KURA_BLOCK, &next, sizeof next);
	tx_write(&fs->tx, SB_PRIMARY * KURA_BLOCK, &next, sizeof next);
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
	if (sb->version != KURA_VERSION && sb->version != KURA_VERSION_AS_IS &&
	    !(upgrade && sb->version >= KURA_OLDEST_UPGRADABLE && sb->version < KURA_VERSION)) {
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

const char *super_unfit_file(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
	case S_IFCHR:
		return NULL;
	case S_IFDIR: return "a directory";
	case S_IFIFO: return "a FIFO";
	case S_IFSOCK: return "a socket";
	case S_IFBLK: return "a block device (pools live in files on it, or on device-DAX)";
	default: return "not a regular file";
	}
}

/* ftruncate, saying why not: `size` is the size asked of mkfs. */
static int size_file(const char *path, int fd, uint64_t bytes, uint64_t size)
{
	int err = media_ftruncate(fd, bytes);
	if (!err)
		return 0;
	set_error("%s: cannot size pool to %llu bytes: %s", path, (unsigned long long)size, strerror(-err));
	return err;
}

/* Maps the pool being made and gives its metadata (the blocks before the
 * root's, and that one) storage, so that stores to them cannot fault. */
static int map_with_metadata(const char *path, int fd, uint64_t bytes, uint64_t meta_end, enum media_fill how,
			     struct media *m)
{
	int err = media_map(m, fd, bytes, KURA_PERSIST_AUTO, 0);
	if (err) {
		set_error("%s: cannot map a pool of %llu bytes: %s", path, (unsigned long long)bytes, strerror(-err));
		return err;
	}
	/* Stored through the map, a hole the file system cannot fill is a
	 * SIGBUS. */
	if ((err = media_back(m, 0, meta_end, how))) {
		set_error("%s: no room for the pool's metadata (%llu MiB) on its file system: %s", path,
			  (unsigned long long)(meta_end >> 20), strerror(-err));
		media_unmap(m);
	}
	return err;
}

int kura_mkfs_mode(const char *path, uint64_t size, int force, mode_t mode)
{
	media_fsize_refresh();
	last_error[0] = 0;
	uint64_t nblocks = size / KURA_BLOCK;
	if (size < KURA_MIN_POOL_SIZE) {
		set_error("%s: pool size %llu is below the minimum of %llu bytes", path, (unsigned long long)size,
			  (unsigned long long)KURA_MIN_POOL_SIZE);
		return -EINVAL;
	}
	/* A new pool gets exactly the mode asked for, not less the umask: it
	 * says who may use the pool (see README, "Who can use a pool"). */
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode & 07777), created = fd >= 0;
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
	const char *unfit = super_unfit_file(st.st_mode);
	if (unfit) {
		set_error("%s: is %s, where a pool cannot be made", path, unfit);
		err = -EINVAL;
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
	struct kura_super *sb = calloc(1, sizeof *sb);
	if (!sb) {
		err = -ENOMEM;
		goto out;
	}
	super_geometry(nblocks, sb);
	if (sb->first_data_block + 16 > nblocks) {
		set_error("%s: pool too small for its own metadata", path);
		err = -EINVAL;
		goto out_sb;
	}
	sb->magic = KURA_MAGIC;
	sb->version = KURA_VERSION;
	sb->root_ino = (sb->first_data_block * KURA_BLOCK) >> INODE_SHIFT;
	sb->created_sec = time(NULL);
	if (getrandom(sb->hash_key, sizeof sb->hash_key, 0) != sizeof sb->hash_key ||
	    getrandom(sb->uuid, sizeof sb->uuid, 0) != sizeof sb->uuid) {
		err = -EIO;
		set_error("%s: no randomness for the pool's keys", path);
		goto out_sb;
	}
	sb->crc = super_crc(sb);

	/* Over a file with contents (--force), the new pool's size, its map
	 * and its metadata's space are all taken while the old contents are
	 * still whole, then the file is emptied: a size the file system
	 * refuses (EFBIG on ext4), a map the address space refuses (ENOMEM
	 * for an exabyte on tmpfs) or a full file system loses nothing. */
	uint64_t pool_bytes = nblocks * KURA_BLOCK, zero_end = (sb->first_data_block + 1) * KURA_BLOCK;
	struct media m;
	if (S_ISREG(st.st_mode) && st.st_size > 0) {
		int grown = (uint64_t)st.st_size < pool_bytes;
		if (grown && (err = size_file(path, fd, pool_bytes, size)))
			goto out_sb;
		if ((err = map_with_metadata(path, fd, pool_bytes, zero_end, MEDIA_FILL_COPIES, &m))) {
			if (grown)
				(void)!ftruncate(fd, st.st_size); /* what it grew by held only zeros */
			if (err == -ENOSPC || err == -EDQUOT) {
				char why[sizeof last_error];
				snprintf(why, sizeof why, "%s", last_error);
				set_error("%s, beside the old contents, which are kept (remove the file to give "
					  "the new pool their room)", why);
			}
			goto out_sb;
		}
		media_unmap(&m);
		if ((err = size_file(path, fd, 0, size)))
			goto out_sb;
	}
	if (S_ISREG(st.st_mode) && (err = size_file(path, fd, pool_bytes, size)))
		goto out_sb;
	/* Everything but the superblocks first: until they are written the file
	 * is not a pool, so a crash during mkfs leaves nothing mountable. */
	if ((err = map_with_metadata(path, fd, pool_bytes, zero_end, MEDIA_FILL_STORES, &m))) {
		if (S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0)
			err = -errno;
		goto out_sb;
	}
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
	if (fsync(fd)) {
		err = -errno;
		set_error("%s: fsync: %s", path, strerror(-err));
	}
out_sb:
	free(sb);
out:
	if (err && created) {
		/* A file this call made and could not make a pool of goes again,
		 * if the name still leads to it. */
		struct stat now;
		if (fstat(fd, &st) == 0 && stat(path, &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino)
			unlink(path);
	}
	close(fd);
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
