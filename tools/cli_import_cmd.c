/*
 * cli_import_cmd.c — `kura import` and `kura stage-in`: the destination
 * made ready, then the walk of cli_import.c, with stage-in's workers and
 * ETA.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_import.h"

static int kura_mkdir_parents(kura_fs *fs, const char *path, mode_t mode)
{
	char *p = strdup(path);
	struct stat st;
	int r = 0;

	if (!p)
		return -ENOMEM;
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		r = kura_mkdir(fs, p, mode);
		if (r == -EEXIST) {
			r = kura_stat(fs, p, &st);
			if (r == 0 && !S_ISDIR(st.st_mode))
				r = -ENOTDIR;
		}
		*s = '/';
		if (r < 0)
			break;
	}
	free(p);
	return r;
}

static const char *base_name(const char *p)
{
	size_t n = strlen(p);
	const char *s;

	while (n > 1 && p[n - 1] == '/')
		n--;
	for (s = p + n; s > p && s[-1] != '/'; s--)
		;
	return s;
}

static uint64_t scan_files, scan_bytes;

static int count_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)path, (void)flag, (void)ftw;
	scan_files++;
	if (S_ISREG(st->st_mode))
		scan_bytes += (uint64_t)st->st_size;
	return 0;
}

static int import_main(struct imp *c, const char *src, const char *target);

int cmd_import(int argc, char **argv)
{
	struct imp c = { .cmd = "import" };
	int first, r = cli_copy_args(c.cmd, argc, argv, NULL, 0, "SRC and POOL:/path", &first);

	return r >= 0 ? r : import_main(&c, argv[first], argv[first + 1]);
}

int cmd_stage_in(int argc, char **argv)
{
	struct cli_stage_opts so;
	struct imp c = { .cmd = "stage-in", .so = &so };
	int first, r = cli_copy_args(c.cmd, argc, argv, &so, 0, "SRC and POOL:/path", &first);

	if (r >= 0)
		return r;
	return so.rclone ? cli_rclone_stage(c.cmd, 0, &so, argv[first + 1], argv[first])
			 : import_main(&c, argv[first], argv[first + 1]);
}

/* c: cmd and so set, the rest zero. */
static int import_main(struct imp *c_in, const char *src, const char *target)
{
	struct imp c = *c_in;
	struct cli_target t;
	struct stat st, kst, pst;
	int r, dest_is_dir = 0;
	mode_t um;

	if (cli_parse_target(c.cmd, target, &t) < 0)
		return CLI_EXIT_USAGE;
	if (stat(src, &st) < 0) {
		cli_err(c.cmd, src, errno);
		return CLI_EXIT_FAIL;
	}
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
		cli_msg(c.cmd, "%s: cannot import a %s", src, cli_type_name(st.st_mode));
		return CLI_EXIT_FAIL;
	}
	if (t.is_default && cli_ensure_default_pool(c.cmd, t.pool) < 0)
		return CLI_EXIT_FAIL;
	c.fs = cli_mount(t.pool, 0);
	if (!c.fs)
		return CLI_EXIT_FAIL;
	c.buf = malloc(CLI_COPY_BUF);
	c.links = cli_linkmap_new();
	if (!c.buf || !c.links) {
		cli_err(c.cmd, src, ENOMEM);
		free(c.buf);
		cli_linkmap_free(c.links);
		kura_unmount(c.fs);
		return CLI_EXIT_FAIL;
	}
	c.as_root = geteuid() == 0;
	if (stat(t.pool, &pst) == 0) {
		c.have_pool = 1;
		c.pool_dev = pst.st_dev;
		c.pool_ino = pst.st_ino;
	}
	um = umask(0);
	umask(um);

	r = kura_stat(c.fs, t.path, &kst);
	if (r == 0) {
		dest_is_dir = S_ISDIR(kst.st_mode);
		if (!dest_is_dir && S_ISDIR(st.st_mode)) {
			cli_err(c.cmd, t.arg, ENOTDIR);
			c.errors++;
			goto out;
		}
	} else if (r == -ENOENT) {
		r = kura_mkdir_parents(c.fs, t.path, 0777 & ~um);
		if (r < 0) {
			cli_err(c.cmd, t.arg, -r);
			c.errors++;
			goto out;
		}
	} else {
		cli_err(c.cmd, t.arg, -r);
		c.errors++;
		goto out;
	}

	cli_progress_start(c.cmd);
	if (c.so && cli_progress_shown() && nftw(src, count_one, 64, FTW_PHYS) == 0)
		cli_progress_expect(scan_files, scan_bytes);
	if (c.so && c.so->jobs > 1 && !(c.stage = cli_stage_start(c.so->jobs, imp_fill_job, &c)))
		cli_msg(c.cmd, "no worker threads; copying with one");
	if (S_ISDIR(st.st_mode)) {
		if (dest_is_dir) {
			/* Existing destination: only its contents are ours to set. */
			int fd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (fd < 0) {
				imp_fail(&c, src, errno);
			} else {
				import_contents(&c, fd, src, t.path, 0);
				close(fd);
			}
		} else {
			import_dir(&c, AT_FDCWD, src, src, t.path, &st, 0);
		}
	} else if (dest_is_dir) {
		char *kp = cli_join(t.path, base_name(src));
		if (kp)
			import_file(&c, AT_FDCWD, src, src, kp, &st, 0, 0);
		else
			imp_fail(&c, src, ENOMEM);
		free(kp);
	} else {
		import_file(&c, AT_FDCWD, src, src, t.path, &st, 0, 0);
	}
	cli_stage_finish(c.stage);
	cli_progress_finish();
	if (c.skipped)
		cli_msg(c.cmd, "skipped %lu special file%s", c.skipped, c.skipped == 1 ? "" : "s");
	if (imp_stopped(&c))
		cli_msg(c.cmd, "stopped early; %s is incomplete", t.arg);
out:
	free(c.buf);
	cli_linkmap_free(c.links);
	r = kura_unmount(c.fs);
	if (r < 0) {
		cli_err(c.cmd, t.pool, -r);
		c.errors++;
	}
	return c.errors ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
