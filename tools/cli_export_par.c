/*
 * cli_export_par.c — stage-out's parallel walk.  Making names on the host
 * (openat with O_CREAT, mkdirat) costs the kernel more than the pool's
 * side of a copy, and one walk thread making them all while workers only
 * fill files left the creates on one core.  Here every thread takes a
 * whole directory: it makes the directory's entries, fills its small
 * files, and queues each subdirectory as a task for any thread.  Two
 * threads thus never make names in one directory (each create locks its
 * directory's inode), and big files are tasks of their own so that a
 * directory of them is still filled side by side.
 *
 * A directory's owner, mode and times are set once everything below it
 * is done, as the one-thread walk does after its recursion: the pending
 * count of each queued directory is 1 for its own listing plus one for
 * each subdirectory and big file of its not yet finished, and the last to
 * finish sets the attributes and tells the parent.  A subdirectory's task
 * opens it relative to the parent's descriptor, which stays open until
 * then; as the tasks are taken newest first (depth first), the open
 * descriptors are about the tree's depth per thread, whatever its width.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_export.h"

#define PAR_THREADS_MAX 64
/* A queued big file holds two descriptors: bounded as cli_stage.c's queue. */
#define PAR_FILES_MAX 128

struct task {
	struct task *next;
	struct exp_dir *dir; /* the directory to walk, or the file's directory */
	int is_file;
	int kfd, fd, has;
	char *kpath, *hpath;
	struct stat st;
};

struct exp_par {
	pthread_mutex_t mu;
	pthread_cond_t more, idle;
	struct task *top; /* newest first */
	unsigned busy;    /* tasks queued or being run */
	unsigned files;   /* file tasks queued (read without the lock too) */
	int closing;
	int nthreads;
	pthread_t threads[PAR_THREADS_MAX];
	struct exp *c;
};

static void free_dir(struct exp_dir *d)
{
	free(d->name);
	free(d->hpath);
	free(d->kpath);
	free(d);
}

void exp_par_release(struct exp *c, struct exp_dir *d)
{
	while (d && d->queued && __atomic_sub_fetch(&d->pending, 1, __ATOMIC_ACQ_REL) == 0) {
		struct exp_dir *parent = d->parent;
		exp_dir_done(c, d);
		free_dir(d);
		d = parent;
	}
}

static void run(struct exp *c, struct task *t)
{
	struct exp_dir *d = t->dir;

	if (t->is_file) {
		exp_fill_file(c, t->kfd, t->fd, t->kpath, t->hpath, &t->st, t->has);
		free(t->kpath);
		free(t->hpath);
	} else if (d->fd >= 0 || exp_dir_open(c, d) == 0) {
		export_contents(c, d);
	}
	exp_par_release(c, d);
}

static void *worker(void *arg)
{
	struct exp_par *p = arg;
	char *buf = malloc(CLI_COPY_BUF);

	/* Without a buffer the thread still runs its tasks: fills report ENOMEM. */
	exp_set_thread_buf(buf);
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->top && !p->closing)
			pthread_cond_wait(&p->more, &p->mu);
		struct task *t = p->top;
		if (!t)
			break;
		p->top = t->next;
		if (t->is_file)
			__atomic_sub_fetch(&p->files, 1, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&p->mu);
		run(p->c, t);
		free(t);
		pthread_mutex_lock(&p->mu);
		if (--p->busy == 0)
			pthread_cond_broadcast(&p->idle);
	}
	pthread_mutex_unlock(&p->mu);
	free(buf);
	return NULL;
}

struct exp_par *exp_par_start(struct exp *c, int threads)
{
	struct exp_par *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->more, NULL);
	pthread_cond_init(&p->idle, NULL);
	p->c = c;
	p->nthreads = cli_threads_start(p->threads, threads < PAR_THREADS_MAX ? threads : PAR_THREADS_MAX, worker, p);
	if (p->nthreads == 0) {
		free(p);
		return NULL;
	}
	return p;
}

static void push(struct exp_par *p, struct task *t)
{
	pthread_mutex_lock(&p->mu);
	t->next = p->top;
	p->top = t;
	p->busy++;
	if (t->is_file)
		__atomic_add_fetch(&p->files, 1, __ATOMIC_RELAXED);
	pthread_cond_signal(&p->more);
	pthread_mutex_unlock(&p->mu);
}

static char *dup_or_null(const char *s, int *failed)
{
	char *r = s ? strdup(s) : NULL;

	if (s && !r)
		*failed = 1;
	return r;
}

int exp_par_dir(struct exp_par *p, const struct exp_dir *tmpl, struct exp_dir *parent)
{
	struct task *t = calloc(1, sizeof(*t));
	struct exp_dir *d = malloc(sizeof(*d));
	int failed = 0;

	if (!t || !d) {
		free(t);
		free(d);
		return -ENOMEM;
	}
	*d = *tmpl;
	d->name = dup_or_null(tmpl->name, &failed);
	d->hpath = dup_or_null(tmpl->hpath, &failed);
	d->kpath = dup_or_null(tmpl->kpath, &failed);
	if (failed) {
		free_dir(d);
		free(t);
		return -ENOMEM;
	}
	d->queued = 1;
	d->pending = 1;
	d->parent = parent && parent->queued ? parent : NULL;
	if (d->parent)
		__atomic_add_fetch(&d->parent->pending, 1, __ATOMIC_RELAXED);
	t->dir = d;
	push(p, t);
	return 0;
}

int exp_par_file(struct exp_par *p, struct exp_dir *d, int kfd, int fd, const char *kpath, const char *hpath,
		 const struct stat *st, int has)
{
	struct task *t;

	/* Read without the lock: a queue a little over the bound is harmless. */
	if (__atomic_load_n(&p->files, __ATOMIC_RELAXED) >= PAR_FILES_MAX)
		return -EAGAIN;
	t = calloc(1, sizeof(*t));
	if (!t || !(t->kpath = strdup(kpath)) || !(t->hpath = strdup(hpath))) {
		if (t)
			free(t->kpath);
		free(t);
		return -ENOMEM;
	}
	t->is_file = 1;
	t->dir = d;
	t->kfd = kfd;
	t->fd = fd;
	t->has = has;
	t->st = *st;
	if (d->queued)
		__atomic_add_fetch(&d->pending, 1, __ATOMIC_RELAXED);
	push(p, t);
	return 0;
}

void exp_par_wait(struct exp_par *p)
{
	pthread_mutex_lock(&p->mu);
	while (p->busy)
		pthread_cond_wait(&p->idle, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

void exp_par_stop(struct exp_par *p)
{
	if (!p)
		return;
	cli_threads_stop(&p->mu, &p->more, &p->closing, p->threads, p->nthreads);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->more);
	pthread_cond_destroy(&p->idle);
	free(p);
}
