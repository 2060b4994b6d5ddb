/*
 * cli.h — shared helpers of the `kura` command-line tool.
 *
 * Exit codes used throughout: 0 success, 1 failure, 2 usage error
 * (fsck additionally: 1 = problems found, 2 = pool unusable).
 */
#ifndef KURA_CLI_H
#define KURA_CLI_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/stat.h>

#include "kura.h"

#define CLI_EXIT_OK 0
#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

/* Big enough that per-call overhead vanishes against the copy itself. */
#define CLI_COPY_BUF (1u << 20)

/* ---- messages (cli_util.c) ---- */

/* "kura: CMD: PATH: strerror(errnum)" on stderr; errnum is positive. */
void cli_err(const char *cmd, const char *path, int errnum);
/* "kura: CMD: formatted text" on stderr. */
void cli_msg(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Prints "Try 'kura CMD --help'" and returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ---- sizes ---- */

/* Parse "4096", "64K", "64KiB", "1G", ... (powers of 1024).  Returns 0 or
 * -1 with a static explanation in *why. */
int cli_parse_size(const char *s, uint64_t *out, const char **why);
/* "1.5 GiB" style; returns buf. */
const char *cli_human(uint64_t bytes, char *buf, size_t len);

/* ---- pool operands ---- */

struct cli_target {
	char pool[4096];  /* resolved pool file path */
	char path[4096];  /* path inside the pool, always absolute */
	int is_default;   /* pool came from kura_default_pool_path() */
	const char *arg;  /* the operand as typed, for messages */
};

/* Split "POOL:/path" at the first ':'.  An operand without ':' names a pool
 * and means its root.  "default" or an empty POOL select the default pool.
 * Returns 0, or -1 after printing a message. */
int cli_parse_target(const char *cmd, const char *arg, struct cli_target *t);
/* Make sure the default pool exists, creating it (and its directory) at
 * KURA_DEFAULT_POOL_SIZE if missing.  Returns 0 or -1 after a message. */
int cli_ensure_default_pool(const char *cmd, const char *pool);
/* mkdir -p of a host directory; returns 0 or -errno. */
int cli_mkdir_p(const char *dir, mode_t mode);
/* Mount or print "kura: POOL: reason" and return NULL. */
kura_fs *cli_mount(const char *pool, int read_only);
/* Writes a working copy left in /dev/shm home and removes the pool's
 * objects there, unless a process has the pool mounted; returns how many
 * objects are left (or -errno). */
int cli_tidy_pool(const char *pool);
/* Whether a process has the pool mounted (a guess that may be stale as soon
 * as it returns; never a reason to skip a check, only to choose one). */
int cli_pool_mounted_elsewhere(const char *pool);
/* Join a directory and a name inside the pool ("/" + "a" -> "/a"). */
char *cli_join(const char *dir, const char *name);

/* Copies the extended attributes of a host file into a pool file, or the
 * other way; symlinks themselves at both ends.  What the destination
 * cannot hold is skipped, as cp -a does; 0 or the first other errno. */
int cli_xattrs_in(kura_fs *fs, const char *host_path, const char *kpath);
int cli_xattrs_out(kura_fs *fs, const char *kpath, const char *host_path);

/* ---- formatting ---- */

/* "drwxr-xr-x" into buf (at least 11 bytes). */
void cli_mode_string(mode_t mode, char *buf);
const char *cli_type_name(mode_t mode);

/* ---- progress (only drawn when stderr is a terminal) ---- */

void cli_progress_start(const char *verb);
void cli_progress_add(uint64_t files, uint64_t bytes); /* thread-safe */
/* Whether a line is drawn at all (stderr a terminal). */
int cli_progress_shown(void);
/* The whole job, when known: the line shows a percentage and an ETA. */
void cli_progress_expect(uint64_t files, uint64_t bytes);
/* Clears the line so a message can be printed cleanly. */
void cli_progress_clear(void);
/* Final summary (terminal only). */
void cli_progress_finish(void);

/* ---- inode -> path map for hard links (cli_util.c) ---- */

struct cli_linkmap;
struct cli_linkmap *cli_linkmap_new(void);
void cli_linkmap_free(struct cli_linkmap *m);
/* Returns the stored path for (dev, ino), or NULL. */
const char *cli_linkmap_get(struct cli_linkmap *m, uint64_t dev, uint64_t ino);
/* Stores a copy of path; returns 0 or -ENOMEM. */
int cli_linkmap_put(struct cli_linkmap *m, uint64_t dev, uint64_t ino, const char *path);

/* ---- commands ---- */

int cmd_mkfs(int argc, char **argv);
int cmd_fsck(int argc, char **argv);
int cmd_upgrade(int argc, char **argv);
int cmd_gc(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_stage_in(int argc, char **argv);  /* cli_import.c */
int cmd_stage_out(int argc, char **argv); /* cli_export.c */

/* Returns 1 if argv holds --help/-h (before any "--"), after printing the
 * command's help. */
int cli_want_help(const char *cmd, int argc, char **argv);
void cli_print_command_help(const char *cmd, FILE *out);

#endif
