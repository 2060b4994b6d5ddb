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

struct kura_dir {
	kura_fs *fs;
	int fd;
	uint64_t cookie; /* 0 ".", 1 "..", then 2 + key */
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
	struct dir_entry de;
	uint64_t key = d->cookie - 2;
	FS_READ(fs, ret, {
		const struct kura_inode *ip = ino_get(fs, of->ino);
		key = d->cookie - 2;
		ret = ip ? dir_next(fs, ip, &key, &de) : -EBADF;
	});
	if (ret == 1) {
		ent->ino = de.ino;
		ent->type = (unsigned char)de.type;
		memcpy(ent->name, de.name, de.name_len + 1);
		d->cookie = key + 2;
		ent->next_cookie = d->cookie;
	} else if (ret == 0) {
		d->cookie = DIR_COOKIE_END + 2;
	}
	ofile_put(fs, of);
	return ret;
}

int kura_dirfd(kura_dir *d)
{
	return d->fd;
}

/* Finds the name under which dir is linked in parent (a scan of parent). */
long kura_telldir(kura_dir *d)
{
	return (long)d->cookie;
}

void kura_seekdir(kura_dir *d, long cookie)
{
	d->cookie = cookie < 0 ? 0 : (uint64_t)cookie;
}

void kura_rewinddir(kura_dir *d)
{
	d->cookie = 0;
}

int kura_closedir(kura_dir *d)
{
	int err = kura_close(d->fs, d->fd);
	free(d);
	return err;
}
