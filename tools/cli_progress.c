/*
 * cli_progress.c — a one-line progress display on stderr.
 *
 * Only drawn when stderr is a terminal so that scripts and logs see nothing
 * but real messages.  Redraws are throttled: a tree of tiny files would
 * otherwise spend more time in write(2) to the tty than copying.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static struct {
	int active;
	int drawn;
	const char *verb;
	uint64_t files, bytes;
	uint64_t total_files, total_bytes; /* 0: not known */
	struct timespec start, last;
} prog;
/* stage-in/stage-out workers report too. */
static pthread_mutex_t prog_lock = PTHREAD_MUTEX_INITIALIZER;

static double elapsed(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

static void draw(const struct timespec *now)
{
	char hb[32], rb[32];
	double secs = elapsed(&prog.start, now);
	uint64_t rate = secs > 0.05 ? (uint64_t)((double)prog.bytes / secs) : 0;

	fprintf(stderr, "\r\033[K%s: %llu files, %s (%s/s)", prog.verb,
		(unsigned long long)prog.files, cli_human(prog.bytes, hb, sizeof(hb)),
		cli_human(rate, rb, sizeof(rb)));
	if (prog.total_bytes || prog.total_files) {
		/* Bytes say more about the time left than files, unless the
		 * files are empty. */
		double done = prog.total_bytes ? (double)prog.bytes / (double)prog.total_bytes
					       : (double)prog.files / (double)prog.total_files;
		char tb[32];
		fprintf(stderr, " of %s, %.0f%%", cli_human(prog.total_bytes, tb, sizeof(tb)),
			done > 1 ? 100.0 : done * 100);
		if (done > 0.01 && done < 1) {
			long left = (long)(secs / done - secs + 0.5);
			fprintf(stderr, ", ETA %ld:%02ld", left / 60, left % 60);
		}
	}
	fflush(stderr);
	prog.drawn = 1;
	prog.last = *now;
}

void cli_progress_start(const char *verb)
{
	prog.active = isatty(STDERR_FILENO);
	prog.drawn = 0;
	prog.verb = verb;
	prog.files = prog.bytes = 0;
	prog.total_files = prog.total_bytes = 0;
	clock_gettime(CLOCK_MONOTONIC, &prog.start);
	prog.last = prog.start;
}

void cli_progress_add(uint64_t files, uint64_t bytes)
{
	struct timespec now;

	pthread_mutex_lock(&prog_lock);
	prog.files += files;
	prog.bytes += bytes;
	if (prog.active) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (elapsed(&prog.last, &now) >= 0.1)
			draw(&now);
	}
	pthread_mutex_unlock(&prog_lock);
}

int cli_progress_shown(void)
{
	return prog.active;
}

void cli_progress_expect(uint64_t files, uint64_t bytes)
{
	prog.total_files = files;
	prog.total_bytes = bytes;
}

void cli_progress_clear(void)
{
	if (prog.active && prog.drawn) {
		fputs("\r\033[K", stderr);
		prog.drawn = 0;
	}
}

void cli_progress_finish(void)
{
	struct timespec now;

	if (!prog.active)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	draw(&now);
	fputc('\n', stderr);
	prog.drawn = 0;
	prog.active = 0;
}
