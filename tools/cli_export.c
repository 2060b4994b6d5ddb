/*
 * cli_export.c — `kura export POOL:/path DST`: recreate a pool tree on the
 * host.  The mirror image of cli_import.c, with the same ordering rules:
 * create owner-writable, fill, then owner, mode, and times last.
 * Host objects are addressed relative to an open parent directory so a
 * symlink swapped in during the export cannot redirect writes elsewhere.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

struct exp {
	kura_fs *fs;
	char *buf;
	struct cli_linkmap *links;
	int as_root;
	unsigned long errors;
	int fatal;
};

static void fail(struct exp *c, const char *path, int err)
{
	cli_err("export", path, err);
	c->errors++;
	if (err == ENOSPC || err == EDQUOT || err == EROFS || err == EIO || err == ENOMEM)
		c->fatal = 1;
}

static void attrs_out(struct exp *c, const char *kpath, const char *hpath)
{
	int r = cli_xattrs_out(c->fs, kpath, hpath);
	if (r)
		fail(c, hpath, r);
}

/* A non-directory in the way on the host is replaced, like cp(1) with
 * --remove-destination; a directory in the way is an error. */
static int make_room(int dfd, const char *name)
{
	struct stat st;

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	return unlinkat(dfd, name, 0) < 0 ? -errno : 0;
}

static int write_all(int fd, const char *buf, size_t len, off_t off)
{
	while (len) {
		ssize_t w = pwrite(fd, buf, len, off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += w;
		len -= (size_t)w;
		off += w;
	}
	return 0;
}

static int copy_data(struct exp *c, int kfd, int fd, const char *kpath, const char *hpath)
{
	off_t pos = 0, written_end = 0;
	int sparse = 1, r;
	struct stat st;

	for (;;) {
		off_t data = pos, hole = (off_t)INT64_MAX;

		if (sparse) {
			data = kura_lseek(c->fs, kfd, pos, SEEK_DATA);
			if (data == -ENXIO)
				break;
			if (data < 0) {
				sparse = 0;
				data = pos;
			} else {
				hole = kura_lseek(c->fs, kfd, data, SEEK_HOLE);
				if (hole < 0)
					hole = (off_t)INT64_MAX;
			}
		}
		pos = data;
		while (pos < hole) {
			size_t want = CLI_COPY_BUF;
			ssize_t n;
			if ((off_t)want > hole - pos)
				want = (size_t)(hole - pos);
			n = kura_pread(c->fs, kfd, c->buf, want, pos);
			if (n < 0) {
				fail(c, kpath, (int)-n);
				return -1;
			}
			if (n == 0)
				goto eof;
			r = write_all(fd, c->buf, (size_t)n, pos);
			if (r < 0) {
				fail(c, hpath, -r);
				return -1;
			}
			pos += n;
			written_end = pos;
			cli_progress_add(0, (uint64_t)n);
		}
		if (!sparse)
			break;
	}
eof:
	if (kura_fstat(c->fs, kfd, &st) == 0 && st.st_size > written_end &&
	    ftruncate(fd, st.st_size) < 0) {
		fail(c, hpath, errno);
		return -1;
	}
	return 0;
}

static void export_file(struct exp *c, int dfd, const char *name, const char *hpath,
			const char *kpath, const struct stat *st, int kflags)
{
	struct timespec ts[2] = { st->st_atim, st->st_mtim };
	int fd, kfd;

	if (st->st_nlink > 1) {
		const char *first = cli_linkmap_get(c->links, 0, st->st_ino);
		if (first) {
			int r = linkat(AT_FDCWD, first, dfd, name, 0) < 0 ? -errno : 0;
			if (r == -EEXIST && (r = make_room(dfd, name)) == 0)
				r = linkat(AT_FDCWD, first, dfd, name, 0) < 0 ? -errno : 0;
			if (r == 0) {
				cli_progress_add(1, 0);
				return;
			}
			if (r != -EMLINK) {
				fail(c, hpath, -r);
				return;
			}
		}
	}
	kfd = kura_open(c->fs, kpath, O_RDONLY | kflags, 0);
	if (kfd < 0) {
		fail(c, kpath, -kfd);
		return;
	}
	fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST) {
		int r = make_room(dfd, name);
		if (r < 0)
			errno = -r;
		else
			fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
				    0600);
	}
	if (fd < 0) {
		fail(c, hpath, errno);
		kura_close(c->fs, kfd);
		return;
	}
	if (copy_data(c, kfd, fd, kpath, hpath) < 0) {
		/* A truncated copy with placeholder mode looks like a real file;
		 * better to leave nothing. */
		close(fd);
		unlinkat(dfd, name, 0);
		kura_close(c->fs, kfd);
		return;
	}
	if (c->as_root && fchown(fd, st->st_uid, st->st_gid) < 0)
		fail(c, hpath, errno);
	else if (fchmod(fd, st->st_mode & 07777) < 0)
		fail(c, hpath, errno);
	else if (futimens(fd, ts) < 0)
		fail(c, hpath, errno);
	else if (st->st_nlink > 1 && cli_linkmap_put(c->links, 0, st->st_ino, hpath) < 0)
		fail(c, hpath, ENOMEM);
	if (close(fd) < 0)
		fail(c, hpath, errno);
	kura_close(c->fs, kfd);
	attrs_out(c, kpath, hpath);
	cli_progress_add(1, 0);
}

static char *read_target(struct exp *c, const char *kpath)
{
	size_t cap = 256;

	for (;;) {
		char *buf = malloc(cap + 1);
		ssize_t n;
		if (!buf) {
			fail(c, kpath, ENOMEM);
			return NULL;
		}
		n = kura_readlink(c->fs, kpath, buf, cap);
		if (n < 0) {
			fail(c, kpath, (int)-n);
			free(buf);
			return NULL;
		}
		if ((size_t)n < cap) {
			buf[n] = '\0';
			return buf;
		}
		free(buf);
		cap *= 4;
	}
}

/* FIFOs, sockets and device nodes come back as the nodes they were
 * (device nodes only for root, as mknod(2) allows; skipped otherwise). */
static void export_special(struct exp *c, int dfd, const char *name, const char *hpath, const char *kpath,
			   const struct stat *st)
{
	struct timespec ts[2] = { st->st_atim, st->st_mtim };
	int r;

	if ((S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) && !c->as_root) {
		cli_msg("export", "%s: skipping %s (only root makes device nodes)", kpath, cli_type_name(st->st_mode));
		return;
	}
	r = mknodat(dfd, name, st->st_mode & (S_IFMT | 07777), st->st_rdev) < 0 ? -errno : 0;
	if (r == -EEXIST && (r = make_room(dfd, name)) == 0)
		r = mknodat(dfd, name, st->st_mode & (S_IFMT | 07777), st->st_rdev) < 0 ? -errno : 0;
	if (r < 0) {
		fail(c, hpath, -r);
		return;
	}
	if (c->as_root && fchownat(dfd, name, st->st_uid, st->st_gid, AT_SYMLINK_NOFOLLOW) < 0)
		fail(c, hpath, errno);
	else if (fchmodat(dfd, name, st->st_mode & 07777, AT_SYMLINK_NOFOLLOW) < 0)
		fail(c, hpath, errno);
	else if (utimensat(dfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
		fail(c, hpath, errno);
	attrs_out(c, kpath, hpath);
	cli_progress_add(1, 0);
}

static void export_symlink(struct exp *c, int dfd, const char *name, const char *hpath,
			   const char *kpath, const struct stat *st)
{
	struct timespec ts[2] = { st->st_atim, st->st_mtim };
	char *target = read_target(c, kpath);
	int r;

	if (!target)
		return;
	r = symlinkat(target, dfd, name) < 0 ? -errno : 0;
	if (r == -EEXIST && (r = make_room(dfd, name)) == 0)
		r = symlinkat(target, dfd, name) < 0 ? -errno : 0;
	free(target);
	if (r < 0) {
		fail(c, hpath, -r);
		return;
	}
	if (c->as_root && fchownat(dfd, name, st->st_uid, st->st_gid, AT_SYMLINK_NOFOLLOW) < 0)
		fail(c, hpath, errno);
	else if (utimensat(dfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
		fail(c, hpath, errno);
	attrs_out(c, kpath, hpath);
	cli_progress_add(1, 0);
}

static void export_dir(struct exp *c, int dfd, const char *name, const char *hpath,
		       const char *kpath, const struct stat *st);

struct names {
	char **v;
	size_t n, cap;
};

static void free_names(struct names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i]);
	free(ns->v);
}

/* The listing is read completely before recursing so that at most one kura
 * directory handle is open at a time, however deep the tree. */
static int list_dir(struct exp *c, const char *kpath, struct names *ns)
{
	struct kura_dirent de;
	int err = 0, r;
	kura_dir *d = kura_opendir(c->fs, kpath, &err);

	memset(ns, 0, sizeof(*ns));
	if (!d) {
		fail(c, kpath, err < 0 ? -err : EIO);
		return -1;
	}
	while ((r = kura_readdir(d, &de)) > 0) {
		if (strcmp(de.name, ".") == 0 || strcmp(de.name, "..") == 0)
			continue;
		if (ns->n == ns->cap) {
			size_t ncap = ns->cap ? ns->cap * 2 : 64;
			char **nv = realloc(ns->v, ncap * sizeof(*nv));
			if (!nv) {
				r = -ENOMEM;
				break;
			}
			ns->v = nv;
			ns->cap = ncap;
		}
		if (!(ns->v[ns->n] = strdup(de.name))) {
			r = -ENOMEM;
			break;
		}
		ns->n++;
	}
	kura_closedir(d);
	if (r < 0) {
		fail(c, kpath, -r);
		/* Still export what was listed: a partial copy beats none. */
	}
	return 0;
}

static void export_contents(struct exp *c, int fd, const char *hpath, const char *kpath)
{
	struct names ns;

	if (list_dir(c, kpath, &ns) < 0)
		return;
	for (size_t i = 0; i < ns.n && !c->fatal; i++) {
		char *kp = cli_join(kpath, ns.v[i]);
		char *hp = cli_join(hpath, ns.v[i]);
		struct stat st;
		int r;

		if (!kp || !hp) {
			fail(c, kpath, ENOMEM);
		} else if ((r = kura_lstat(c->fs, kp, &st)) < 0) {
			fail(c, kp, -r);
		} else if (S_ISDIR(st.st_mode)) {
			export_dir(c, fd, ns.v[i], hp, kp, &st);
		} else if (S_ISREG(st.st_mode)) {
			export_file(c, fd, ns.v[i], hp, kp, &st, O_NOFOLLOW);
		} else if (S_ISLNK(st.st_mode)) {
			export_symlink(c, fd, ns.v[i], hp, kp, &st);
		} else {
			export_special(c, fd, ns.v[i], hp, kp, &st);
		}
		free(kp);
		free(hp);
	}
	free_names(&ns);
}

static void set_dir_attrs(struct exp *c, int fd, const char *hpath, const struct stat *st)
{
	struct timespec ts[2] = { st->st_atim, st->st_mtim };

	if (c->as_root && fchown(fd, st->st_uid, st->st_gid) < 0)
		fail(c, hpath, errno);
	else if (fchmod(fd, st->st_mode & 07777) < 0)
		fail(c, hpath, errno);
	else if (futimens(fd, ts) < 0)
		fail(c, hpath, errno);
}

static void export_dir(struct exp *c, int dfd, const char *name, const char *hpath,
		       const char *kpath, const struct stat *st)
{
	struct stat hst;
	int fd;

	if (mkdirat(dfd, name, 0700) < 0) {
		int e = errno;
		/* An existing directory is merged into; anything else blocks. */
		if (e != EEXIST || fstatat(dfd, name, &hst, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(hst.st_mode)) {
			fail(c, hpath, e);
			return;
		}
	}
	fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		fail(c, hpath, errno);
		return;
	}
	export_contents(c, fd, hpath, kpath);
	if (!c->fatal)
		set_dir_attrs(c, fd, hpath, st);
	close(fd);
	attrs_out(c, kpath, hpath);
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');

	return s && s[1] ? s + 1 : p;
}

int cmd_export(int argc, char **argv)
{
	struct exp c = { 0 };
	struct cli_target t;
	struct stat kst, hst;
	const char *dst;
	int first = 1, r, dfd = -1;

	if (cli_want_help("export", argc, argv))
		return CLI_EXIT_OK;
	if (argc > 1 && strcmp(argv[1], "--") == 0)
		first = 2;
	else
		for (int i = 1; i < argc; i++)
			if (argv[i][0] == '-' && argv[i][1] != '\0')
				return cli_usage_error("export", "unknown option '%s'", argv[i]);
	if (argc - first != 2)
		return cli_usage_error("export", "expected POOL:/path and DST operands");
	if (cli_parse_target("export", argv[first], &t) < 0)
		return CLI_EXIT_USAGE;
	dst = argv[first + 1];
	c.fs = cli_mount(t.pool, 1);
	if (!c.fs)
		return CLI_EXIT_FAIL;
	c.buf = malloc(CLI_COPY_BUF);
	c.links = cli_linkmap_new();
	c.as_root = geteuid() == 0;
	if (!c.buf || !c.links) {
		fail(&c, dst, ENOMEM);
		goto out;
	}
	r = kura_stat(c.fs, t.path, &kst);
	if (r < 0) {
		fail(&c, t.arg, -r);
		goto out;
	}
	if (!S_ISDIR(kst.st_mode) && !S_ISREG(kst.st_mode)) {
		cli_msg("export", "%s: cannot export a %s", t.arg, cli_type_name(kst.st_mode));
		c.errors++;
		goto out;
	}

	cli_progress_start("export");
	if (stat(dst, &hst) == 0) {
		if (!S_ISDIR(hst.st_mode)) {
			fail(&c, dst, ENOTDIR);
			goto out;
		}
		dfd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0) {
			fail(&c, dst, errno);
			goto out;
		}
		/* Existing destination: only its contents are ours to set. */
		if (S_ISDIR(kst.st_mode)) {
			export_contents(&c, dfd, dst, t.path);
		} else {
			char *hp = cli_join(dst, base_name(t.path));
			if (hp)
				export_file(&c, dfd, base_name(t.path), hp, t.path, &kst, 0);
			free(hp);
		}
	} else if (errno == ENOENT) {
		char *parent = strdup(dst), *slash;
		size_t n = strlen(parent);
		while (n > 1 && parent[n - 1] == '/')
			parent[--n] = '\0';
		slash = strrchr(parent, '/');
		if (slash && slash != parent) {
			*slash = '\0';
			r = cli_mkdir_p(parent, 0777);
			if (r < 0) {
				fail(&c, parent, -r);
				free(parent);
				goto out;
			}
		}
		free(parent);
		if (S_ISDIR(kst.st_mode)) {
			export_dir(&c, AT_FDCWD, dst, dst, t.path, &kst);
		} else if (mkdir(dst, 0777) < 0) {
			fail(&c, dst, errno);
		} else if ((dfd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
			fail(&c, dst, errno);
		} else {
			char *hp = cli_join(dst, base_name(t.path));
			if (hp)
				export_file(&c, dfd, base_name(t.path), hp, t.path, &kst, 0);
			free(hp);
		}
	} else {
		fail(&c, dst, errno);
	}
	cli_progress_finish();
	if (c.fatal)
		cli_msg("export", "stopped early; %s is incomplete", dst);
out:
	if (dfd >= 0)
		close(dfd);
	free(c.buf);
	cli_linkmap_free(c.links);
	r = kura_unmount(c.fs);
	if (r < 0)
		fail(&c, t.pool, -r);
	return c.errors ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
