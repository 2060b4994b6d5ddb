/*
 * fileio.c — the data half of the descriptor API: read, write, seek,
 * truncate, allocate and sync an open file, and its attributes through the
 * descriptor.  Opening and closing, directory streams and mount are
 * files.c's.
 *
 * An offset is guarded by its description's own lock (ofile_lock_pos), so
 * read() and write() on one description are serialised like Linux's f_pos
 * lock, while different descriptions proceed in parallel.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "api.h"
#include "creds.h"
#include "group.h"
#include "inode.h"
#include "ofile.h"
#include "super.h"

/* ---- the process's file size limit ---------------------------------------- */

/* RLIMIT_FSIZE as the layer last read it is media_fsize_limit: one
 * process-wide value, as the kernel's is, read with a relaxed load on
 * every write (what the common RLIM_INFINITY costs). */
void kura_set_fsize_limit(uint64_t limit)
{
	__atomic_store_n(&media_fsize_limit, limit, __ATOMIC_RELAXED);
}

int kura_own_ftruncate(int fd, uint64_t size)
{
	return media_ftruncate(fd, size);
}

int fsize_check(uint64_t size, uint64_t end)
{
	return end > size && end > __atomic_load_n(&media_fsize_limit, __ATOMIC_RELAXED) ? KURA_XFSZ : 0;
}

/* Linux's generic_write_check_limits: a write that starts at or past the
 * limit fails, one that crosses it is cut short.  off + *count cannot
 * wrap: both are below 2^63. */
static inline int fsize_cut(uint64_t off, size_t *count)
{
	uint64_t limit = __atomic_load_n(&media_fsize_limit, __ATOMIC_RELAXED);
	if (__builtin_expect(off + *count <= limit, 1))
		return 0;
	if (off >= limit)
		return KURA_XFSZ;
	*count = (size_t)(limit - off);
	return 0;
}

/* ---- data ---------------------------------------------------------------- */

static ssize_t read_at(struct kura_fs *fs, struct ofile *of, void *buf, size_t count, uint64_t off)
{
	if ((of->flags & O_ACCMODE) == O_WRONLY)
		return -EBADF;
	ssize_t ret;
	FS_READ(fs, ret, {
		const struct kura_inode *ip = ino_get(fs, of->ino);
		if (!ip)
			ret = -EBADF;
		else if (S_ISDIR(ip->mode))
			ret = -EISDIR;
		else if (group_open(of))
			ret = group_read(fs, of, buf, count, off);
		else
			ret = inode_read(fs, ip, buf, count, off);
	});
	return ret;
}

static ssize_t write_at(struct kura_fs *fs, struct ofile *of, const void *buf, size_t count, uint64_t *off,
			int append)
{
	if ((of->flags & O_ACCMODE) == O_RDONLY)
		return -EBADF;
	if (count > (size_t)SSIZE_MAX)
		count = SSIZE_MAX;
	if (count == 0)
		return 0; /* as Linux: not even O_APPEND moves the offset */
	int err = fs_begin(fs);
	if (err)
		return err;
	ssize_t ret;
	const struct kura_inode *ip = ino_get(fs, of->ino);
	int group = group_open(of);
	if (!ip) {
		ret = -EBADF;
	} else if (group) {
		/* O_SYNC too waits for the commit: the group is durable whole. */
		int64_t size = group_size(fs, of);
		if (append && size >= 0)
			*off = (uint64_t)size;
		ret = size < 0 ? size : fsize_cut(*off, &count);
		if (!ret)
			ret = group_write(fs, of, buf, count, *off);
	} else {
		if (append)
			*off = ip->size;
		ret = fsize_cut(*off, &count);
		if (!ret) {
			kill_privs(fs, of->ino, ip);
			ret = inode_write(fs, of->ino, buf, count, *off);
		}
	}
	int end = fs_end(fs, ret < 0 ? (int)ret : 0);
	if (end >= 0 && ret > 0 && !group && (of->flags & (O_SYNC | O_DSYNC)))
		end = fs_sync(fs);
	return end < 0 ? end : ret;
}

ssize_t kura_read(kura_fs *fs, int fd, void *buf, size_t count)
{
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	ofile_lock_pos(of);
	ssize_t n = read_at(fs, of, buf, count, of->pos);
	if (n > 0)
		of->pos += (uint64_t)n;
	ofile_unlock_pos(of);
	ofile_put(fs, of);
	return n;
}

ssize_t kura_pread(kura_fs *fs, int fd, void *buf, size_t count, off_t offset)
{
	if (offset < 0)
		return -EINVAL;
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	ssize_t n = read_at(fs, of, buf, count, (uint64_t)offset);
	ofile_put(fs, of);
	return n;
}

ssize_t kura_write(kura_fs *fs, int fd, const void *buf, size_t count)
{
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	ofile_lock_pos(of);
	uint64_t off = of->pos;
	ssize_t n = write_at(fs, of, buf, count, &off, of->flags & O_APPEND);
	if (n >= 0)
		of->pos = off + (uint64_t)n;
	ofile_unlock_pos(of);
	ofile_put(fs, of);
	return n;
}

ssize_t kura_pwrite(kura_fs *fs, int fd, const void *buf, size_t count, off_t offset)
{
	if (offset < 0)
		return -EINVAL;
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	uint64_t off = (uint64_t)offset;
	/* Linux appends even with pwrite when O_APPEND is set. */
	ssize_t n = write_at(fs, of, buf, count, &off, of->flags & O_APPEND);
	ofile_put(fs, of);
	return n;
}

off_t kura_lseek(kura_fs *fs, int fd, off_t offset, int whence)
{
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	ofile_lock_pos(of);
	int64_t base = 0, ret = 0;
	struct stat st;
	if (whence == SEEK_END || whence == SEEK_DATA || whence == SEEK_HOLE) {
		int err = kura_fstat(fs, fd, &st);
		if (err) {
			ret = err;
			goto out;
		}
	}
	switch (whence) {
	case SEEK_SET: base = 0; break;
	case SEEK_CUR: base = (int64_t)of->pos; break;
	case SEEK_END: base = st.st_size; break;
	case SEEK_DATA:
	case SEEK_HOLE:
		if (offset < 0) {
			ret = -ENXIO;
			goto out;
		}
		if (group_open(of)) {
			/* The view is all data: a hole is only at its end. */
			ret = (int64_t)offset >= st.st_size ? -ENXIO : whence == SEEK_DATA ? offset : st.st_size;
		} else {
			FS_READ(fs, ret, {
				const struct kura_inode *ip = ino_get(fs, of->ino);
				ret = ip ? inode_seek_data(fs, ip, (uint64_t)offset, whence == SEEK_DATA) : -EBADF;
			});
		}
		if (ret >= 0)
			of->pos = (uint64_t)ret;
		goto out;
	default:
		ret = -EINVAL;
		goto out;
	}
	if ((offset > 0 && base > INT64_MAX - offset) || base + offset < 0) {
		ret = offset > 0 ? -EOVERFLOW : -EINVAL;
		goto out;
	}
	of->pos = (uint64_t)(base + offset);
	ret = base + offset;
out:
	ofile_unlock_pos(of);
	ofile_put(fs, of);
	return (off_t)ret;
}

/* Linux checks the access mode before the file type for fallocate. */
static int regular_writable(struct kura_fs *fs, struct ofile *of)
{
	const struct kura_inode *ip = ino_get(fs, of->ino);
	if (!ip || (of->flags & O_ACCMODE) == O_RDONLY)
		return -EBADF;
	if (S_ISDIR(ip->mode))
		return -EISDIR;
	return 0;
}

/* fsize_check against the size the description sees (its group's view,
 * or the file's), for a file regular_writable passed. */
static int grows_past_limit(struct kura_fs *fs, struct ofile *of, uint64_t end)
{
	int64_t size = group_open(of) ? group_size(fs, of) : (int64_t)ino_get(fs, of->ino)->size;
	return size < 0 ? (int)size : fsize_check((uint64_t)size, end);
}

int kura_ftruncate(kura_fs *fs, int fd, off_t length)
{
	if (length < 0)
		return -EINVAL;
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	int err = fs_begin(fs);
	if (!err) {
		/* Linux: EINVAL for anything not a regular file open for writing. */
		err = regular_writable(fs, of) ? -EINVAL : 0;
		if (!err)
			err = grows_past_limit(fs, of, (uint64_t)length);
		if (!err && group_open(of))
			err = group_truncate(fs, of, (uint64_t)length);
		else if (!err)
			err = truncate_ino(fs, of->ino, (uint64_t)length);
		err = fs_end(fs, err);
	}
	ofile_put(fs, of);
	return err;
}

int kura_fallocate(kura_fs *fs, int fd, int mode, off_t offset, off_t len)
{
	int known = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
	if (offset < 0 || len <= 0)
		return -EINVAL;
	if (mode & ~known)
		return -EOPNOTSUPP;
	if ((mode & FALLOC_FL_PUNCH_HOLE) && (!(mode & FALLOC_FL_KEEP_SIZE) || (mode & FALLOC_FL_ZERO_RANGE)))
		return -EOPNOTSUPP;
	if (offset < 0 || len <= 0)
		return -EINVAL;
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	int err = fs_begin(fs);
	if (!err) {
		err = regular_writable(fs, of);
		/* As tmpfs (shmem_fallocate), with FALLOC_FL_KEEP_SIZE too: the
		 * space is taken all the same.  Past kura's maximum size the
		 * plain EFBIG comes first, as vfs_fallocate's. */
		uint64_t end = (uint64_t)offset + (uint64_t)len;
		if (!err && !(mode & FALLOC_FL_PUNCH_HOLE) && end <= KURA_MAX_FILE_SIZE)
			err = grows_past_limit(fs, of, end);
		if (!err && group_open(of)) {
			err = group_fallocate(fs, of, mode, (uint64_t)offset, (uint64_t)len);
		} else if (!err) {
			kill_privs(fs, of->ino, ino_get(fs, of->ino));
			err = inode_fallocate(fs, of->ino, mode, (uint64_t)offset, (uint64_t)len);
		}
		err = fs_end(fs, err);
	}
	ofile_put(fs, of);
	return err;
}

int kura_fsync(kura_fs *fs, int fd)
{
	/* Changes are atomic and in order, so making all of them durable is
	 * what makes this file's durable, at the cost of one flush. */
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	int group = group_open(of);
	ofile_put(fs, of);
	return group ? kura_atomic_commit(fs, fd) : fs_sync(fs);
}

int kura_syncfs(kura_fs *fs)
{
	return fs_sync(fs);
}

int kura_fstat(kura_fs *fs, int fd, struct stat *st)
{
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	int ret;
	FS_READ(fs, ret, {
		const struct kura_inode *ip = ino_get(fs, of->ino);
		ret = ip ? 0 : -EBADF;
		if (ip)
			inode_to_stat(fs, of->ino, ip, st);
		if (ip && group_open(of)) {
			int64_t size = group_size(fs, of);
			if (size < 0)
				ret = (int)size;
			st->st_size = size;
		}
	});
	ofile_put(fs, of);
	return ret;
}

int kura_fchmod(kura_fs *fs, int fd, mode_t mode)
{
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	int err = attr_by_ino(fs, of->ino, 0, mode, 0, 0, NULL);
	ofile_put(fs, of);
	return err;
}

int kura_fchown(kura_fs *fs, int fd, uid_t uid, gid_t gid)
{
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	int err = attr_by_ino(fs, of->ino, 1, 0, uid, gid, NULL);
	ofile_put(fs, of);
	return err;
}

int kura_fsetflags(kura_fs *fs, int fd, unsigned flags)
{
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	/* Linux's order: a read-only file system, the owner, the flags. */
	int err = fs_begin(fs);
	if (!err) {
		const struct kura_inode *ip = ino_get(fs, of->ino);
		if (!ip)
			err = -EBADF;
		else if (!creds_owner(creds_of(fs), ip))
			err = -EPERM;
		else if (flags)
			err = -EOPNOTSUPP;
		else
			inode_touch(fs, of->ino, TOUCH_C);
		err = fs_end(fs, err);
	}
	ofile_put(fs, of);
	return err;
}

int kura_futimens(kura_fs *fs, int fd, const struct timespec times[2])
{
	if (times && times[0].tv_nsec == UTIME_OMIT && times[1].tv_nsec == UTIME_OMIT)
		return 0; /* as Linux, whatever fd is */
	struct ofile *of = ofile_get(fs, fd);
	if (!of)
		return -EBADF;
	int err = attr_by_ino(fs, of->ino, 2, 0, 0, 0, times);
	ofile_put(fs, of);
	return err;
}
