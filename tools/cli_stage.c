/*
 * cli_stage.c — what `kura stage-in` and `kura stage-out` add to import and
 * export (seed 002's staging between a shared file system and a pool):
 * several threads filling files while the walk goes on, files already
 * identical left alone so that a stopped stage resumes where it stopped,
 * contents compared afterwards on request, and an ETA on the progress line.
 *
 * stage-in's walk (cli_import.c; one thread) makes every name:
 * directories, hard links, symlinks, special files and each regular file's
 * empty inode, so links and directory times are settled by it alone.  A
 * worker then fills a regular file over STAGE_SMALL_FILE through the two
 * descriptors the walk opened for it and gives it its owner, mode and
 * times last (the walk fills smaller ones itself).  Filling a
 * file does not touch its directory, so a directory's times, set by the
 * walk once its entries exist, stay as the source's.  stage-out walks with
 * several threads instead (cli_export_par.c), since there the host's
 * creates are the costly part.
 *
 * "Identical" is rsync's quick check: a regular file of the same size,
 * modification time (to the nanosecond) and permission bits.  A file whose
 * copy was interrupted still has the time of the interruption, never the
 * source's, so the next run copies it again.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_stage.h"

/* Each queued file holds two descriptors: the bound keeps a deep queue
 * well under the usual limit of 1,024. */
#define STAGE_QUEUE_MAX 128
#define STAGE_JOBS_MAX 64

struct cli_stage {
	pthread_mutex_t mu;
	pthread_cond_t more, room;
	struct cli_stage_job *head, *tail;
	unsigned queued;
	int closing;
	int nthreads;
	pthread_t threads[STAGE_JOBS_MAX];
	cli_stage_fill_fn fill;
	void *ctx;
};

static void *worker(void *arg)
{
	struct cli_stage *s = arg;
	char *buf = malloc(CLI_COPY_BUF);

	for (;;) {
		pthread_mutex_lock(&s->mu);
		while (!s->head && !s->closing)
			pthread_cond_wait(&s->more, &s->mu);
		struct cli_stage_job *j = s->head;
		if (j) {
			s->head = j->next;
			if (!s->head)
				s->tail = NULL;
			s->queued--;
			pthread_cond_signal(&s->room);
		}
		pthread_mutex_unlock(&s->mu);
		if (!j)
			break;
		/* Without a buffer the job still ends: fill reports ENOMEM. */
		s->fill(s->ctx, j, buf);
		free(j->src);
		free(j->dst);
		free(j);
	}
	free(buf);
	return NULL;
}

int cli_threads_start(pthread_t *v, int n, void *(*fn)(void *), void *arg)
{
	int started = 0;

	while (started < n && pthread_create(&v[started], NULL, fn, arg) == 0)
		started++;
	return started;
}

void cli_threads_stop(pthread_mutex_t *mu, pthread_cond_t *more, int *closing, pthread_t *v, int n)
{
	pthread_mutex_lock(mu);
	*closing = 1;
	pthread_cond_broadcast(more);
	pthread_mutex_unlock(mu);
	for (int i = 0; i < n; i++)
		pthread_join(v[i], NULL);
}

struct cli_stage *cli_stage_start(int jobs, cli_stage_fill_fn fill, void *ctx)
{
	struct cli_stage *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->more, NULL);
	pthread_cond_init(&s->room, NULL);
	s->fill = fill;
	s->ctx = ctx;
	s->nthreads = cli_threads_start(s->threads, jobs < STAGE_JOBS_MAX ? jobs : STAGE_JOBS_MAX, worker, s);
	if (s->nthreads == 0) {
		free(s);
		return NULL;
	}
	return s;
}

int cli_stage_add(struct cli_stage *s, int src_fd, int dst_fd, const char *src, const char *dst,
		  const struct stat *st)
{
	struct cli_stage_job *j = calloc(1, sizeof(*j));

	if (!j || !(j->src = strdup(src)) || !(j->dst = strdup(dst))) {
		if (j) {
			free(j->src);
			free(j);
		}
		return -ENOMEM;
	}
	j->src_fd = src_fd;
	j->dst_fd = dst_fd;
	j->st = *st;
	pthread_mutex_lock(&s->mu);
	while (s->queued >= STAGE_QUEUE_MAX)
		pthread_cond_wait(&s->room, &s->mu);
	if (s->tail)
		s->tail->next = j;
	else
		s->head = j;
	s->tail = j;
	s->queued++;
	pthread_cond_signal(&s->more);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

void cli_stage_finish(struct cli_stage *s)
{
	if (!s)
		return;
	cli_threads_stop(&s->mu, &s->more, &s->closing, s->threads, s->nthreads);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->more);
	pthread_cond_destroy(&s->room);
	free(s);
}

int cli_stage_identical(const struct stat *src, const struct stat *dst)
{
	return S_ISREG(src->st_mode) && S_ISREG(dst->st_mode) && src->st_size == dst->st_size &&
	       src->st_mtim.tv_sec == dst->st_mtim.tv_sec && src->st_mtim.tv_nsec == dst->st_mtim.tv_nsec &&
	       (src->st_mode & 07777) == (dst->st_mode & 07777);
}

int cli_stage_compare(int host_fd, kura_fs *fs, int kfd, char *buf)
{
	const size_t half = CLI_COPY_BUF / 2;
	char *a = buf, *b = buf + half;

	for (off_t pos = 0;; ) {
		ssize_t n = pread(host_fd, a, half, pos);
		if (n < 0)
			return -errno;
		ssize_t m = kura_pread(fs, kfd, b, half, pos);
		if (m < 0)
			return (int)m;
		/* Both sides are at rest: a short read is the end of the file. */
		if (n != m || memcmp(a, b, (size_t)n))
			return 1;
		if (n == 0)
			return 0;
		pos += n;
	}
}

int cli_stage_parse(const char *cmd, int argc, char **argv, int with_watch, struct cli_stage_opts *o)
{
	static const struct option longs[] = {
		{ "jobs", required_argument, NULL, 'j' },
		{ "verify", no_argument, NULL, 'v' },
		{ "watch", no_argument, NULL, 'w' },
		{ "settle", required_argument, NULL, 's' },
		{ "rclone", no_argument, NULL, 'r' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	*o = (struct cli_stage_opts){ .jobs = 4, .settle = 2.0 };
	opterr = 0;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "+j:", longs, NULL)) != -1) {
		char *end;
		switch (ch) {
		case 'j': {
			long n = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end || n < 1 || n > STAGE_JOBS_MAX)
				return cli_usage_error(cmd, "--jobs takes a number from 1 to %d, not '%s'",
						       STAGE_JOBS_MAX, optarg);
			o->jobs = (int)n;
			break;
		}
		case 'v':
			o->verify = 1;
			break;
		case 'r':
			o->rclone = 1;
			break;
		case 'w':
		case 's':
			if (!with_watch)
				return cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
			if (ch == 'w') {
				o->watch = 1;
				break;
			}
			o->settle = strtod(optarg, &end);
			if (*optarg == '\0' || *end || !(o->settle >= 0 && o->settle <= 86400))
				return cli_usage_error(cmd, "--settle takes seconds (0 to 86400), not '%s'", optarg);
			break;
		default:
			return cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
		}
	}
	o->first = optind;
	if (o->rclone && o->watch)
		return cli_usage_error(cmd, "--watch does not go with --rclone");
	return 0;
}

int cli_copy_args(const char *cmd, int argc, char **argv, struct cli_stage_opts *so, int with_watch,
		  const char *operands, int *first)
{
	if (cli_want_help(cmd, argc, argv))
		return CLI_EXIT_OK;
	if (so) {
		int r = cli_stage_parse(cmd, argc, argv, with_watch, so);
		if (r)
			return r;
		*first = so->first;
	} else if (argc > 1 && strcmp(argv[1], "--") == 0) {
		*first = 2;
	} else {
		*first = 1;
		for (int i = 1; i < argc; i++)
			if (argv[i][0] == '-' && argv[i][1] != '\0')
				return cli_usage_error(cmd, "unknown option '%s'", argv[i]);
	}
	if (argc - *first != 2)
		return cli_usage_error(cmd, "expected %s operands", operands);
	return -1;
}
