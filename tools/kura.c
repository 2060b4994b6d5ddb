/*
 * kura.c — the `kura` command: dispatch, help, and the pool-level commands
 * (mkfs, fsck, upgrade, info).  File-level commands live in cli_inspect.c, tree
 * copies in cli_import.c / cli_export.c (and stage-in/stage-out, with
 * cli_stage.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *synopsis;
	const char *help;
};

int cmd_run(int argc, char **argv); /* cli_run.c */
int cmd_mount(int argc, char **argv); /* cli_mount.c */
int cmd_umount(int argc, char **argv);

static const struct command commands[] = {
	{ "mkfs", cmd_mkfs, "mkfs [POOL] [--size SIZE] [--mode MODE] [--force]",
	  "Create a pool file.  SIZE is bytes or a number with a binary suffix:\n"
	  "K, M, G, T (also KiB, MiB, GiB, TiB); case does not matter.  Without\n"
	  "--size the pool is 1 GiB (sparse).  A new pool file gets exactly MODE\n"
	  "(octal, the umask not applied; default 0600: its owner's alone; 0660\n"
	  "shares it with a group, who can then read and change every file in\n"
	  "it).  An existing non-empty file is only overwritten with --force, and\n"
	  "a pool that a process has mounted never is.  Without POOL the default\n"
	  "pool is created.\n" },
	{ "fsck", cmd_fsck, "fsck [POOL] [--repair]",
	  "Check every invariant of an unmounted pool and print one line per\n"
	  "problem.  --repair frees leaked blocks and inodes and reclaims orphans.\n"
	  "Exit status: 0 clean, 1 problems found, 2 pool unusable.\n" },
	{ "gc", cmd_gc, "gc [POOL]",
	  "Tidy what processes that ended without doing so (killed ones, say)\n"
	  "left of the pool in /dev/shm: a disk pool's working copy is written\n"
	  "home first.  A pool some process has mounted is left as it is.\n" },
	{ "upgrade", cmd_upgrade, "upgrade [POOL]",
	  "Bring a pool of an older format up to this kura's, in place, then\n"
	  "reclaim what the old format left unused (as fsck --repair).  Older\n"
	  "kuras cannot read the pool afterwards; a crash midway leaves it in\n"
	  "one format or the other, and running upgrade again finishes.\n" },
	{ "info", cmd_info, "info [POOL]",
	  "Mount the pool read-only and print its format version, sizes, space\n"
	  "usage, object counts and persistence back end.\n" },
	{ "ls", cmd_ls, "ls [-l] [-a] POOL:/path...",
	  "List a directory inside a pool, sorted by name (byte order).\n"
	  "  -l  long format: mode, links, uid, gid, size, mtime, name\n"
	  "  -a  include . and ..\n"
	  "Listing a non-directory prints just that entry.\n" },
	{ "stat", cmd_stat, "stat [-L] POOL:/path...",
	  "Print every stat field of a pool path.  Symbolic links are described\n"
	  "themselves unless -L (follow) is given.\n" },
	{ "cat", cmd_cat, "cat POOL:/path...",
	  "Write the contents of pool files to standard output.\n" },
	{ "import", cmd_import, "import SRC POOL:/path",
	  "Copy the host tree SRC into the pool at /path.  /path is created with\n"
	  "its parents; if it already is a directory SRC's contents go into it.\n"
	  "Modes, times (ns), symlinks and hard links are kept; owners too when\n"
	  "run as root.  FIFOs and sockets are kept as such, device nodes too\n"
	  "when run as root (skipped with a warning otherwise).\n"
	  "If the default pool is named and does not exist yet, it is created.\n"
	  "SRC may also be a single regular file.  Exit status 1 if anything\n"
	  "could not be copied (skipped device nodes do not count).\n" },
	{ "export", cmd_export, "export POOL:/path DST",
	  "Recreate the pool tree /path under the host directory DST (created if\n"
	  "missing; /path's contents go into it).  Modes, times (ns), symlinks and\n"
	  "hard links are kept; owners too when run as root; FIFOs, sockets and\n"
	  "(as root) device nodes too.  If /path is a regular file it is copied\n"
	  "into DST under its own name.\n" },
	{ "stage-in", cmd_stage_in, "stage-in [-j N] [--verify] [--rclone] SRC POOL:/path",
	  "Stage a host tree (a shared file system's, say) into a pool: import's\n"
	  "copy, with N threads filling files over 256 KiB (default 4) and files the pool\n"
	  "already holds unchanged left alone (same size, modification time and\n"
	  "mode), so running it again after an interruption goes on where it\n"
	  "stopped.  --verify reads every copied file back and compares it.  On\n"
	  "a terminal the progress line gives bytes/s, the share done and an ETA.\n"
	  "--rclone: SRC is an rclone remote (REMOTE:path, :backend:path), and\n"
	  "rclone copies from it into the pool through a private kura mount.\n" },
	{ "stage-out", cmd_stage_out, "stage-out [-j N] [--verify] [--watch [--settle SECS] | --rclone] POOL:/path DST",
	  "Stage a pool tree out to a host directory: export's copy, with N\n"
	  "threads (default 4), files DST already holds unchanged left alone\n"
	  "(resumable), --verify as for stage-in.  --watch goes on after the\n"
	  "first pass, copying each file that changes once it has not changed\n"
	  "for SECS seconds (default 2: taken as closed and no longer written),\n"
	  "until SIGINT or SIGTERM.  --rclone: DST is an rclone remote, which\n"
	  "rclone copies into from the pool through a private kura mount.\n" },
	{ "run", cmd_run, "run [--pool POOL] [--mount PREFIX] [--] COMMAND [ARGS...]",
	  "Run COMMAND with libkura.so preloaded: paths under PREFIX (default\n"
	  "/kura) are served from POOL (default: the default pool, created if\n"
	  "missing).  Sets KURA_POOL, KURA_MOUNT and LD_PRELOAD for COMMAND.\n" },
	{ "mount", cmd_mount, "mount POOL DIR [-o OPTIONS] [-f]",
	  "Mount POOL on DIR through FUSE for every program (static, Go, set-id,\n"
	  "other users' with -o allow_other), beside kura run users of the same\n"
	  "pool.  Returns once the mount is usable; -f stays in the foreground.\n"
	  "Options: ro, allow_other, default_permissions, others to FUSE.\n" },
	{ "umount", cmd_umount, "umount DIR",
	  "Unmount what kura mount put on DIR and wait for its server to exit.\n" },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void print_usage(FILE *out)
{
	fputs("usage: kura COMMAND [ARGS...]\n\nCommands:\n", out);
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(out, "  kura %s\n", commands[i].synopsis);
	fputs("\n"
	      "POOL:/path names a path inside a pool file.  The operand is split at the\n"
	      "first ':' (so pool file names must not contain ':').  A POOL of\n"
	      "'default' or an empty one (':/path') means the default pool,\n"
	      "$XDG_DATA_HOME/kura/default.pool or ~/.local/share/kura/default.pool.\n"
	      "An operand without ':' names a pool's root directory.\n"
	      "\n"
	      "Run 'kura COMMAND --help' for details of one command; 'kura --version' for the version.\n",
	      out);
}

void cli_print_command_help(const char *cmd, FILE *out)
{
	for (size_t i = 0; i < NCOMMANDS; i++) {
		if (strcmp(commands[i].name, cmd) == 0) {
			fprintf(out, "usage: kura %s\n\n%s", commands[i].synopsis, commands[i].help);
			return;
		}
	}
}

int cli_want_help(const char *cmd, int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			break;
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			cli_print_command_help(cmd, stdout);
			return 1;
		}
	}
	return 0;
}

/* ---- mkfs ---- */

int cmd_mkfs(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "size", required_argument, NULL, 's' },
		{ "force", no_argument, NULL, 'f' },
		{ "mode", required_argument, NULL, 'm' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t size = KURA_DEFAULT_POOL_SIZE;
	int force = 0, c, r;
	mode_t mode = 0600;
	char *end;
	struct cli_target t;
	const char *why;
	char hb[32];

	if (cli_want_help("mkfs", argc, argv))
		return CLI_EXIT_OK;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":s:fm:", longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
			mode = (mode_t)strtoul(optarg, &end, 8);
			if (!*optarg || *end || mode > 0777)
				return cli_usage_error("mkfs", "invalid mode '%s': an octal mode up to 0777", optarg);
			break;
		case 's':
			if (cli_parse_size(optarg, &size, &why) < 0)
				return cli_usage_error("mkfs", "invalid size '%s': %s", optarg, why);
			break;
		case 'f':
			force = 1;
			break;
		case ':':
			return cli_usage_error("mkfs", "option '%s' needs a value", argv[optind - 1]);
		default:
			return cli_usage_error("mkfs", "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (argc - optind > 1)
		return cli_usage_error("mkfs", "too many operands");
	if (cli_parse_target("mkfs", optind < argc ? argv[optind] : "default", &t) < 0)
		return CLI_EXIT_USAGE;
	if (size < KURA_MIN_POOL_SIZE)
		return cli_usage_error("mkfs", "size %s is too small: a pool needs at least %s",
				       cli_human(size, hb, sizeof(hb)), "4 MiB");
	if (t.is_default) {
		char *dir = strdup(t.pool), *slash = strrchr(dir, '/');
		if (slash && slash != dir) {
			*slash = '\0';
			r = cli_mkdir_p(dir, 0700);
			if (r < 0) {
				cli_err("mkfs", dir, -r);
				free(dir);
				return CLI_EXIT_FAIL;
			}
		}
		free(dir);
	}
	r = kura_mkfs_mode(t.pool, size, force, mode);
	if (r < 0) {
		const char *reason = kura_last_error();
		if (reason && *reason)
			cli_msg("mkfs", "%s", reason);
		else
			cli_err("mkfs", t.pool, -r);
		if (r == -EEXIST && !force)
			cli_msg("mkfs", "%s: not empty; use --force to overwrite it", t.pool);
		return CLI_EXIT_FAIL;
	}
	size &= ~(uint64_t)4095;
	printf("created %s: %llu bytes (%s)\n", t.pool, (unsigned long long)size,
	       cli_human(size, hb, sizeof(hb)));
	return CLI_EXIT_OK;
}

/* ---- fsck ---- */

struct fsck_lines {
	char **v;
	size_t n, cap;
};

static void fsck_collect(void *ctx, const char *line)
{
	struct fsck_lines *l = ctx;

	if (l->n == l->cap) {
		size_t ncap = l->cap ? l->cap * 2 : 32;
		char **nv = realloc(l->v, ncap * sizeof(*nv));
		if (!nv)
			return;
		l->v = nv;
		l->cap = ncap;
	}
	l->v[l->n] = strdup(line ? line : "(null)");
	if (l->v[l->n])
		l->n++;
}

static void fsck_flush(struct fsck_lines *l, FILE *out, const char *prefix)
{
	for (size_t i = 0; i < l->n; i++) {
		fprintf(out, "%s%s\n", prefix, l->v[i]);
		free(l->v[i]);
	}
	free(l->v);
	memset(l, 0, sizeof(*l));
}

int cmd_fsck(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "repair", no_argument, NULL, 'r' },
		{ NULL, 0, NULL, 0 },
	};
	struct fsck_lines lines = { 0 };
	struct cli_target t;
	int repair = 0, c, r;

	if (cli_want_help("fsck", argc, argv))
		return CLI_EXIT_OK;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "r", longopts, NULL)) != -1) {
		if (c == 'r')
			repair = 1;
		else
			return cli_usage_error("fsck", "unknown option '%s'", argv[optind - 1]);
	}
	if (argc - optind > 1)
		return cli_usage_error("fsck", "too many operands");
	if (cli_parse_target("fsck", optind < argc ? argv[optind] : "default", &t) < 0)
		return CLI_EXIT_USAGE;

	/* Lines are buffered because only the return value tells whether they
	 * are findings (stdout) or the reason the pool is unusable (stderr). */
	r = kura_fsck(t.pool, repair, fsck_collect, &lines);
	if (r < 0) {
		/* The engine's own reason is more specific than strerror. */
		if (lines.n == 0)
			cli_err("fsck", t.pool, -r);
		fsck_flush(&lines, stderr, "kura: fsck: ");
		return 2;
	}
	fsck_flush(&lines, stdout, "");
	if (r == 0) {
		printf("%s: clean\n", t.pool);
		return CLI_EXIT_OK;
	}
	printf("%s: %d problem%s found%s\n", t.pool, r, r == 1 ? "" : "s",
	       repair ? ", repair attempted" : "");
	if (repair) {
		int again = kura_fsck(t.pool, 0, fsck_collect, &lines);
		fsck_flush(&lines, stdout, "after repair: ");
		if (again == 0)
			printf("%s: clean after repair\n", t.pool);
		else if (again > 0)
			printf("%s: %d problem%s remain after repair\n", t.pool, again,
			       again == 1 ? "" : "s");
		else
			cli_err("fsck", t.pool, -again);
	}
	return CLI_EXIT_FAIL;
}

/* ---- gc ---- */

int cmd_gc(int argc, char **argv)
{
	struct cli_target t;
	if (cli_want_help("gc", argc, argv))
		return CLI_EXIT_OK;
	if (argc > 2 || (argc == 2 && argv[1][0] == '-' && argv[1][1]))
		return cli_usage_error("gc", argc > 2 ? "too many operands" : "unknown option '%s'", argv[1]);
	if (cli_parse_target("gc", argc == 2 ? argv[1] : "default", &t) < 0)
		return CLI_EXIT_USAGE;
	int left = cli_tidy_pool(t.pool);
	if (left < 0) {
		cli_err("gc", t.pool, -left);
		return 2;
	}
	if (left)
		printf("%s: in use: its %d object%s in /dev/shm stay%s\n", t.pool, left, left == 1 ? "" : "s",
		       left == 1 ? "s" : "");
	else
		printf("%s: nothing left in /dev/shm\n", t.pool);
	return CLI_EXIT_OK;
}

/* ---- upgrade ---- */

int cmd_upgrade(int argc, char **argv)
{
	struct cli_target t;
	if (cli_want_help("upgrade", argc, argv))
		return CLI_EXIT_OK;
	if (argc > 2 || (argc == 2 && argv[1][0] == '-' && argv[1][1]))
		return cli_usage_error("upgrade", argc > 2 ? "too many operands" : "unknown option '%s'", argv[1]);
	if (cli_parse_target("upgrade", argc == 2 ? argv[1] : "default", &t) < 0)
		return CLI_EXIT_USAGE;
	struct kura_mount_opts opts = { .persist = KURA_PERSIST_AUTO };
	int err = 0;
	kura_fs *fs = kura_mount(t.pool, &opts, &err);
	if (fs) {
		struct kura_info in;
		kura_info(fs, &in);
		kura_unmount(fs);
		printf("%s: already format version %u\n", t.pool, in.format_version);
		return CLI_EXIT_OK;
	}
	if (err != -EPROTONOSUPPORT) {
		fprintf(stderr, "kura: %s\n", kura_last_error());
		return 2;
	}
	opts.upgrade = 1;
	fs = kura_mount(t.pool, &opts, &err);
	if (!fs) {
		fprintf(stderr, "kura: %s\n", kura_last_error());
		return 2;
	}
	struct kura_info in;
	kura_info(fs, &in);
	kura_unmount(fs);
	printf("%s: now format version %u\n", t.pool, in.format_version);
	/* What the old format never gave back (empty inode blocks, buckets
	 * that could merge) fsck --repair reclaims. */
	struct fsck_lines lines = { 0 };
	int r = kura_fsck(t.pool, 1, fsck_collect, &lines);
	fsck_flush(&lines, stdout, "reclaimed: ");
	if (r >= 0)
		r = kura_fsck(t.pool, 0, fsck_collect, &lines);
	if (r != 0) {
		fsck_flush(&lines, stdout, "");
		fprintf(stderr, "kura: %s: upgraded, but fsck %s\n", t.pool, r < 0 ? strerror(-r) : "finds problems");
		return CLI_EXIT_FAIL;
	}
	printf("%s: clean\n", t.pool);
	return CLI_EXIT_OK;
}

/* ---- info ---- */

int cmd_info(int argc, char **argv)
{
	struct kura_info in;
	struct cli_target t;
	kura_fs *fs;
	char h1[32], h2[32], h3[32];
	uint64_t used, freeb;
	int r;

	if (cli_want_help("info", argc, argv))
		return CLI_EXIT_OK;
	if (argc > 2)
		return cli_usage_error("info", "too many operands");
	if (argc == 2 && argv[1][0] == '-' && argv[1][1] != '\0')
		return cli_usage_error("info", "unknown option '%s'", argv[1]);
	if (cli_parse_target("info", argc == 2 ? argv[1] : "default", &t) < 0)
		return CLI_EXIT_USAGE;
	fs = cli_mount(t.pool, 1);
	if (!fs)
		return CLI_EXIT_FAIL;
	memset(&in, 0, sizeof(in));
	r = kura_info(fs, &in);
	if (r < 0) {
		cli_err("info", t.pool, -r);
		kura_unmount(fs);
		return CLI_EXIT_FAIL;
	}
	freeb = in.blocks_free * in.block_size;
	used = (in.blocks_total - in.blocks_free) * in.block_size;
	printf("pool:           %s\n", t.pool);
	printf("format version: %u\n", in.format_version);
	printf("pool size:      %llu (%s)\n", (unsigned long long)in.pool_size,
	       cli_human(in.pool_size, h1, sizeof(h1)));
	printf("block size:     %llu\n", (unsigned long long)in.block_size);
	printf("blocks:         %llu total, %llu free\n",
	       (unsigned long long)in.blocks_total, (unsigned long long)in.blocks_free);
	printf("used:           %llu (%s)\n", (unsigned long long)used, cli_human(used, h2, sizeof(h2)));
	printf("free:           %llu (%s)\n", (unsigned long long)freeb, cli_human(freeb, h3, sizeof(h3)));
	printf("log size:       %llu\n", (unsigned long long)in.log_size);
	printf("files:          %llu\n", (unsigned long long)in.files);
	printf("directories:    %llu\n", (unsigned long long)in.directories);
	printf("symlinks:       %llu\n", (unsigned long long)in.symlinks);
	printf("orphans:        %llu\n", (unsigned long long)in.orphans);
	printf("persistence:    %s\n", in.persist ? in.persist : "unknown");
	printf("durable:        %s\n", in.sync && !strcmp(in.sync, "fsync") ? "at fsync (KURA_SYNC=fsync)"
							 : "when each call returns (KURA_SYNC=op)");
	r = kura_unmount(fs);
	if (r < 0) {
		cli_err("info", t.pool, -r);
		return CLI_EXIT_FAIL;
	}
	return CLI_EXIT_OK;
}

/* ---- main ---- */

int main(int argc, char **argv)
{
	struct rlimit rl;

	/* Tree copies keep one descriptor per directory level open. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (argc < 2) {
		print_usage(stderr);
		return CLI_EXIT_USAGE;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
#ifndef KURA_VERSION_STRING
#define KURA_VERSION_STRING "unknown"
#endif
		printf("kura %s (pool format %u)\n", KURA_VERSION_STRING, kura_format_version());
		return CLI_EXIT_OK;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		if (argc > 2 && strcmp(argv[1], "help") == 0) {
			for (size_t i = 0; i < NCOMMANDS; i++) {
				if (strcmp(commands[i].name, argv[2]) == 0) {
					cli_print_command_help(argv[2], stdout);
					return CLI_EXIT_OK;
				}
			}
		}
		print_usage(stdout);
		return CLI_EXIT_OK;
	}
	for (size_t i = 0; i < NCOMMANDS; i++) {
		if (strcmp(commands[i].name, argv[1]) == 0) {
			int rc = commands[i].run(argc - 1, argv + 1);
			if (fflush(stdout) != 0 || ferror(stdout)) {
				if (errno != EPIPE)
					fprintf(stderr, "kura: %s: standard output: %s\n",
						argv[1], strerror(errno));
				return rc ? rc : CLI_EXIT_FAIL;
			}
			return rc;
		}
	}
	fprintf(stderr, "kura: unknown command '%s'\n", argv[1]);
	print_usage(stderr);
	return CLI_EXIT_USAGE;
}
