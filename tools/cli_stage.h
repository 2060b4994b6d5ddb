/*
 * cli_stage.h — parallel, resumable tree copies for stage-in/stage-out
 * (cli_stage.c), shared by cli_import.c and cli_export.c.
 */
#ifndef KURA_CLI_STAGE_H
#define KURA_CLI_STAGE_H
#include <pthread.h>
#include <sys/stat.h>

#include "kura.h"

struct cli_stage_opts {
	int jobs;      /* worker threads filling files */
	int verify;    /* compare each file's contents after its copy */
	int watch;     /* stage-out: pass after pass until SIGINT/SIGTERM */
	double settle; /* --watch: a file unchanged this long is no longer being written */
	int rclone;    /* the host side is an rclone remote (cli_rclone.c) */
	int first;     /* argv index of the first operand */
};

/* Files up to this size are filled by the thread that makes their names
 * (a stage-in's walk, a stage-out's directory task): handing one over
 * costs more than its copy. */
#define STAGE_SMALL_FILE (256u << 10)

/* A regular file whose name the walk made, to be filled by a worker. */
struct cli_stage_job {
	int src_fd, dst_fd;
	char *src, *dst; /* paths, for messages */
	struct stat st;  /* the source's */
	struct cli_stage_job *next;
};

/* Fills j (contents, then owner, mode, times), closes both descriptors and
 * reports what failed; buf is CLI_COPY_BUF bytes or NULL (out of memory). */
typedef void (*cli_stage_fill_fn)(void *ctx, struct cli_stage_job *j, char *buf);

struct cli_stage;
struct cli_stage *cli_stage_start(int jobs, cli_stage_fill_fn fill, void *ctx);
/* Queues a file, waiting while the queue is full; 0 or -ENOMEM (the
 * caller still owns the descriptors then). */
int cli_stage_add(struct cli_stage *s, int src_fd, int dst_fd, const char *src, const char *dst,
		  const struct stat *st);
/* Waits for every queued file; s is gone afterwards.  NULL is fine. */
void cli_stage_finish(struct cli_stage *s);

/* Up to n threads running fn(arg), their ids in v; how many started. */
int cli_threads_start(pthread_t *v, int n, void *(*fn)(void *), void *arg);
/* Sets *closing under mu, wakes the threads waiting on more, joins them. */
void cli_threads_stop(pthread_mutex_t *mu, pthread_cond_t *more, int *closing, pthread_t *v, int n);

/* rsync's quick check: the copy need not be made again. */
int cli_stage_identical(const struct stat *src, const struct stat *dst);
/* 0 when a host file and a pool file hold the same bytes, 1 when not,
 * -errno when one could not be read; buf is CLI_COPY_BUF bytes. */
int cli_stage_compare(int host_fd, kura_fs *fs, int kfd, char *buf);
/* -j/--jobs N, --verify, and for stage-out --watch and --settle SECONDS;
 * 0, or an exit status after a usage message. */
int cli_stage_parse(const char *cmd, int argc, char **argv, int with_watch, struct cli_stage_opts *o);
/* The options and two operands of import/export (none but "--"), or of
 * stage-in/stage-out (so: theirs); -1 with *first the index of the first
 * operand, or an exit status after --help or a usage message. */
int cli_copy_args(const char *cmd, int argc, char **argv, struct cli_stage_opts *so, int with_watch,
		  const char *operands, int *first);
/* stage-in (out 0) or stage-out (out 1) between POOL:/path and an rclone
 * remote, through a private `kura mount`; an exit status. */
int cli_rclone_stage(const char *cmd, int out, const struct cli_stage_opts *so, const char *pool_arg,
		     const char *remote);
#endif
