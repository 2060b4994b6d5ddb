/*
 * cli_export_cmd.c — `kura export` and `kura stage-out`: a pass of the walk
 * in cli_export.c, with stage-out's workers and ETA, and --watch's passes
 * until SIGINT or SIGTERM.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli_export.h"

/* One walk of POOL:/path into dst. */
static void export_pass(struct exp *c, const struct cli_target *t, const struct stat *kst, const char *dst)
{
	struct stat hst;
	struct exp_dir top = { .fd = AT_FDCWD, .at_fd = AT_FDCWD, .hpath = (char *)dst, .kpath = (char *)t->path };
	int dfd = -1, r;

	if (stat(dst, &hst) == 0) {
		if (!S_ISDIR(hst.st_mode)) {
			exp_fail(c, dst, ENOTDIR);
			return;
		}
		dfd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0) {
			exp_fail(c, dst, errno);
			return;
		}
		/* Existing destination: only its contents are ours to set. */
		top.fd = dfd;
		if (S_ISDIR(kst->st_mode)) {
			if (c->par && exp_par_dir(c->par, &top, NULL) == 0)
				dfd = -1; /* the task's now, closed when it is done */
			else
				export_contents(c, &top);
		} else {
			char *hp = cli_join(dst, exp_base_name(t->path));
			if (hp)
				export_file(c, &top, exp_base_name(t->path), hp, t->path, kst, 0);
			free(hp);
		}
	} else if (errno == ENOENT) {
		char *parent = strdup(dst), *slash;
		if (!parent) {
			exp_fail(c, dst, ENOMEM);
			return;
		}
		size_t n = strlen(parent);
		while (n > 1 && parent[n - 1] == '/')
			parent[--n] = '\0';
		slash = strrchr(parent, '/');
		if (slash && slash != parent) {
			*slash = '\0';
			r = cli_mkdir_p(parent, 0777);
			if (r < 0) {
				exp_fail(c, parent, -r);
				free(parent);
				return;
			}
		}
		free(parent);
		if (S_ISDIR(kst->st_mode)) {
			export_dir(c, &top, dst, dst, t->path, kst);
		} else if (mkdir(dst, 0777) < 0) {
			exp_fail(c, dst, errno);
		} else if ((dfd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
			exp_fail(c, dst, errno);
		} else {
			char *hp = cli_join(dst, exp_base_name(t->path));
			top.fd = dfd;
			if (hp)
				export_file(c, &top, exp_base_name(t->path), hp, t->path, kst, 0);
			free(hp);
		}
	} else {
		exp_fail(c, dst, errno);
	}
	/* Tasks may still use top and dfd. */
	if (c->par)
		exp_par_wait(c->par);
	if (dfd >= 0)
		close(dfd);
}

/* Files and bytes under kpath, for the progress line's ETA. */
static void count_tree(struct exp *c, const char *kpath, uint64_t *files, uint64_t *bytes)
{
	struct names ns;
	struct stat st;

	if (kura_lstat(c->fs, kpath, &st) < 0)
		return;
	++*files;
	if (S_ISREG(st.st_mode))
		*bytes += (uint64_t)st.st_size;
	if (!S_ISDIR(st.st_mode) || exp_list_dir(c, kpath, &ns) < 0)
		return;
	for (size_t i = 0; i < ns.n; i++) {
		char *kp = cli_join(kpath, ns.v[i]);
		if (kp)
			count_tree(c, kp, files, bytes);
		free(kp);
	}
	exp_free_names(&ns);
}

/* A pass over the tree with the threads, if any. */
static void staged_pass(struct exp *c, const struct cli_target *t, const struct stat *kst, const char *dst)
{
	if (c->so && c->so->jobs > 1 && !(c->par = exp_par_start(c, c->so->jobs)))
		cli_msg(c->cmd, "no worker threads; copying with one");
	export_pass(c, t, kst, dst);
	exp_par_stop(c->par);
	c->par = NULL;
}

static volatile sig_atomic_t stop_watching;

static void on_stop(int sig)
{
	(void)sig;
	stop_watching = 1;
}

/* stage-out --watch: pass after pass, each copying what changed and has
 * settled, until SIGINT or SIGTERM. */
static void watch(struct exp *c, const struct cli_target *t, const char *dst)
{
	struct sigaction sa = { .sa_handler = on_stop };
	struct stat kst;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	while (!stop_watching && !exp_stopped(c)) {
		struct timespec pause = { 0, 500000000L };
		nanosleep(&pause, NULL);
		if (stop_watching)
			break;
		int r = kura_stat(c->fs, t->path, &kst);
		if (r < 0) {
			exp_fail(c, t->arg, -r);
			break;
		}
		c->unsettled = 0;
		staged_pass(c, t, &kst, dst);
	}
	if (c->unsettled)
		cli_msg(c->cmd, "%lu file%s still changing when stopped, not copied", c->unsettled,
			c->unsettled == 1 ? " was" : "s were");
}

static int export_main(struct exp *c, const char *target, const char *dst);

int cmd_export(int argc, char **argv)
{
	struct exp c = { .cmd = "export" };
	int first, r = cli_copy_args(c.cmd, argc, argv, NULL, 0, "POOL:/path and DST", &first);

	return r >= 0 ? r : export_main(&c, argv[first], argv[first + 1]);
}

int cmd_stage_out(int argc, char **argv)
{
	struct cli_stage_opts so;
	struct exp c = { .cmd = "stage-out", .so = &so };
	int first, r = cli_copy_args(c.cmd, argc, argv, &so, 1, "POOL:/path and DST", &first);

	if (r >= 0)
		return r;
	return so.rclone ? cli_rclone_stage(c.cmd, 1, &so, argv[first], argv[first + 1])
			 : export_main(&c, argv[first], argv[first + 1]);
}

/* c: cmd and so set, the rest zero. */
static int export_main(struct exp *c_in, const char *target, const char *dst)
{
	struct exp c = *c_in;
	struct cli_target t;
	struct stat kst;
	int r;

	if (cli_parse_target(c.cmd, target, &t) < 0)
		return CLI_EXIT_USAGE;
	c.fs = cli_mount(t.pool, 1);
	if (!c.fs)
		return CLI_EXIT_FAIL;
	c.buf = malloc(CLI_COPY_BUF);
	c.links = cli_linkmap_new();
	c.as_root = geteuid() == 0;
	c.euid = geteuid();
	c.egid = getegid();
	c.umask = umask(0);
	umask(c.umask);
	if (!c.buf || !c.links) {
		exp_fail(&c, dst, ENOMEM);
		goto out;
	}
	r = kura_stat(c.fs, t.path, &kst);
	if (r < 0) {
		exp_fail(&c, t.arg, -r);
		goto out;
	}
	if (!S_ISDIR(kst.st_mode) && !S_ISREG(kst.st_mode)) {
		cli_msg(c.cmd, "%s: cannot export a %s", t.arg, cli_type_name(kst.st_mode));
		c.errors++;
		goto out;
	}

	cli_progress_start(c.cmd);
	if (c.so && cli_progress_shown()) {
		uint64_t files = 0, bytes = 0;
		count_tree(&c, t.path, &files, &bytes);
		cli_progress_expect(files, bytes);
	}
	staged_pass(&c, &t, &kst, dst);
	cli_progress_finish();
	if (c.so && c.so->watch && !exp_stopped(&c))
		watch(&c, &t, dst);
	if (exp_stopped(&c))
		cli_msg(c.cmd, "stopped early; %s is incomplete", dst);
out:
	free(c.buf);
	cli_linkmap_free(c.links);
	r = kura_unmount(c.fs);
	if (r < 0)
		exp_fail(&c, t.pool, -r);
	/* A watcher often outlives the preloaded programs it watched: as the
	 * last one out it removes the layer's tables they left in /dev/shm,
	 * as kura run does (nothing, if the pool is still mounted anywhere). */
	if (c.so && c.so->watch)
		cli_tidy_pool(t.pool);
	return c.errors ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
