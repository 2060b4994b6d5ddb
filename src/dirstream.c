/*
 * dirstream.c — directory streams of the public API (kura_opendir ...
 * kura_closedir): a descriptor of the directory and a position, the cookie
 * of an entry's place in the directory's hash order (dir.h), which
 * telldir and seekdir hand out as it is.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "dir.h"
#include "inode.h"
#include "ofile.h"

/* Entries are read a batch at a time (dir_next_batch) and handed out from
 * the stream: a snapshot, as glibc's buffer of getdents is, which POSIX
 * allows (whether an entry added or removed after opendir or rewinddir
 * shows is unspecified).  The position is always the one after the entry
 * last handed out, so telldir and seekdir are unchanged by it. */
#define STREAM_BATCH 32

struct kura_dir {
	kura_fs *fs;
	int fd;
	uint64_t cookie; /* 0 ".", 1 "..", then 2 + key */
	int nbatch, next; /* batch[next..nbatch) not handed out yet */
	uint64_t keys[STREAM_BATCH];
	struct dir_entry batch[STREAM_BATCH];
};

kura_dir *kura_opendir(kura_fs *fs, const char *path, int *err)
{
	int fd = kura_open(fs, path, O_RDONLY | O_DIRECTORY, 0);
	if (fd < 0) {
		if (err)
			*err = fd;
		return NULL;
	}
	kura_dir *d = kura_fdopendir(fs, fd, err);
	if (!d)
		kura_close(fs, fd);
	return d;
}

kura_dir *kura_fdopendir(kura_fs *fs, int fd, int *err)
{
	struct stat st;
	int e = kura_fstat(fs, fd, &st);
	if (!e && !S_ISDIR(st.st_mode))
		e = -ENOTDIR;
	if (!e && (kura_fd_flags(fs, fd) & O_ACCMODE) == O_WRONLY)
		e = -EBADF;
	if (e) {
		if (err)
			*err = e;
		return NULL;
	}
	kura_dir *d = calloc(1, sizeof *d);
	if (!d) {
		if (err)
			*err = -ENOMEM;
		return NULL;
	}
	d->fs = fs;
	d->fd = fd;
	return d;
}

int kura_readdir(kura_dir *d, struct kura_dirent *ent)
{
	struct kura_fs *fs = d->fs;
	struct ofile *of = ofile_get(fs, d->fd);
	if (!of)
		return -EBADF;
	int ret;
	if (d->cookie < 2) {
		FS_READ(fs, ret, {
			const struct kura_inode *ip = ino_get(fs, of->ino);
			ret = ip ? 1 : -EBADF;
			if (ip) {
				ent->ino = d->cookie == 0 ? of->ino : ip->parent;
				ent->type = DT_DIR;
				strcpy(ent->name, d->cookie == 0 ? "." : "..");
			}
		});
		if (ret == 1)
			ent->next_cookie = ++d->cookie;
		ofile_put(fs, of);
		return ret;
	}
	if (d->next == d->nbatch) {
		uint64_t key = d->cookie - 2;
		FS_READ(fs, ret, {
			const struct kura_inode *ip = ino_get(fs, of->ino);
			ret = ip ? dir_next_batch(fs, ip, key, d->batch, d->keys, STREAM_BATCH) : -EBADF;
		});
		if (ret <= 0) {
			if (ret == 0)
				d->cookie = DIR_COOKIE_END + 2;
			ofile_put(fs, of);
			return ret;
		}
		d->nbatch = ret;
		d->next = 0;
	}
	const struct dir_entry *de = &d->batch[d->next];
	ent->ino = de->ino;
	ent->type = (unsigned char)de->type;
	memcpy(ent->name, de->name, de->name_len + 1);
	d->cookie = d->keys[d->next++] + 1 + 2;
	ent->next_cookie = d->cookie;
	ofile_put(fs, of);
	return 1;
}

int kura_dirfd(kura_dir *d)
{
	return d->fd;
}

long kura_telldir(kura_dir *d)
{
	return (long)d->cookie;
}

void kura_seekdir(kura_dir *d, long cookie)
{
	uint64_t to = cookie < 0 ? 0 : (uint64_t)cookie;
	/* The batch holds what follows the current position only. */
	if (to != d->cookie)
		d->nbatch = d->next = 0;
	d->cookie = to;
}

/* A rewound stream shows the directory as it is now (POSIX). */
void kura_rewinddir(kura_dir *d)
{
	d->cookie = 0;
	d->nbatch = d->next = 0;
}

int kura_closedir(kura_dir *d)
{
	int err = kura_close(d->fs, d->fd);
	free(d);
	return err;
}
