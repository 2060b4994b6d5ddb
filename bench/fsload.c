/* fsload: metadata operations and filebench-like personalities through
 * plain libc calls, so that `kura run` serves them from a pool and the same
 * binary run alone measures the kernel's file system.  bench/report.py
 * drives it; every timed phase stops at a deadline, so a slow system (a
 * disk pool syncing every call) costs seconds, not hours.
 *
 *   fsload meta-setup DIR NFILES NREADDIR
 *       DIR/s with NFILES empty files, DIR/r with NREADDIR (untimed)
 *   fsload meta DIR NFILES SECONDS
 *       timed phases, each until its work is done or SECONDS pass:
 *       create  empty files in DIR/c (open O_CREAT|O_EXCL + close)
 *       stat    the files of DIR/s, round after round
 *       rename  each file of DIR/s to a new name in the same directory
 *       unlink  the files of DIR/s
 *       mkdir   a tree of fanout 10 in DIR/t, breadth first, NFILES at most
 *       dotdot  stat "../f0000000" from DIR/c/sub, beside the files create made
 *       readdir whole listings of DIR/r, round after round
 *       prints "PHASE OPS_PER_SECOND COUNT" a line (readdir: entries/s)
 *   fsload fileset DIR PERSONALITY NFILES
 *       the personality's files, preallocated as filebench does (untimed)
 *   fsload run DIR PERSONALITY NFILES PROCS[,PROCS...] SECONDS
 *       PROCS worker processes run the personality's loop on disjoint
 *       shares of the files for SECONDS (then as many as the next count
 *       says, on the files as the last run left them); prints a line
 *       "procs P ops/s N MB/s N" a run (one op is one filebench flowop:
 *       an open, a whole-file read, ...)
 *
 * Personalities, after filebench's fileserver.f, varmail.f and webserver.f
 * (fixed sizes instead of gamma-distributed ones, fewer files):
 *   fileserver  128 KiB files in directories of 20, 80% preallocated; loop:
 *               create, write whole file, close, open, append up to 16 KiB,
 *               close, open, read whole file, close, delete, stat
 *   varmail     16 KiB files in one directory, 80% preallocated; loop:
 *               delete, create, append, fsync, close, open, read whole,
 *               append, fsync, close, open, read whole, close
 *   webserver   16 KiB files in directories of 20, all preallocated; loop:
 *               ten times open, read whole file, close; then append 16 KiB
 *               to a shared log
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IOSIZE (1 << 20)
#define APPEND_MAX 16384

static void die(const char *fmt, ...)
{
	va_list ap;
	int e = errno;
	va_start(ap, fmt);
	fputs("fsload: ", stderr);
	vfprintf(stderr, fmt, ap);
	if (e)
		fprintf(stderr, ": %s", strerror(e));
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long number(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || v < 0)
		die("not a number: %s", s);
	return v;
}

static double seconds(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	if (*s == '\0' || *end != '\0' || v <= 0)
		die("not a duration: %s", s);
	return v;
}

static void xmkdir(const char *p)
{
	if (mkdir(p, 0755) != 0 && errno != EEXIST)
		die("mkdir %s", p);
}

static void touch(const char *p)
{
	int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0644);
	if (fd < 0)
		die("create %s", p);
	if (close(fd) != 0)
		die("close %s", p);
}

static void populate(const char *dir, long n)
{
	char p[4096];
	xmkdir(dir);
	for (long i = 0; i < n; i++) {
		snprintf(p, sizeof p, "%s/f%07ld", dir, i);
		touch(p);
	}
}

/* ---- metadata ---------------------------------------------------------- */

static void report(const char *phase, long count, double secs)
{
	printf("%s %.1f %ld\n", phase, count / secs, count);
	fflush(stdout);
}

/* Path of directory i of a breadth-first tree of fanout 10 rooted at root
 * (i = 0): its parent is (i - 1) / 10. */
static void tree_path(char *out, size_t len, const char *root, long i)
{
	if (i == 0) {
		snprintf(out, len, "%s", root);
		return;
	}
	tree_path(out, len, root, (i - 1) / 10);
	size_t n = strlen(out);
	snprintf(out + n, len - n, "/d%ld", (i - 1) % 10);
}

static void meta(const char *dir, long n, double secs)
{
	char p[4096], q[4096];
	struct stat st;
	double t0, end;
	long i, done;

	if (n < 1) {
		errno = 0;
		die("meta: NFILES must be at least 1");
	}
	/* create */
	snprintf(q, sizeof q, "%s/c", dir);
	xmkdir(q);
	t0 = now();
	end = t0 + secs;
	for (i = 0; i < n && (i & 15 || now() < end); i++) {
		snprintf(p, sizeof p, "%s/c/f%07ld", dir, i);
		touch(p);
	}
	report("create", i, now() - t0);

	/* stat, round after round until the deadline (one round at least) */
	t0 = now();
	end = t0 + secs;
	for (done = 0; done < n || (done & 255) || now() < end; done++) {
		snprintf(p, sizeof p, "%s/s/f%07ld", dir, done % n);
		if (stat(p, &st) != 0 || !S_ISREG(st.st_mode))
			die("stat %s", p);
	}
	report("stat", done, now() - t0);

	/* rename */
	t0 = now();
	end = t0 + secs;
	for (i = 0; i < n && (i & 15 || now() < end); i++) {
		snprintf(p, sizeof p, "%s/s/f%07ld", dir, i);
		snprintf(q, sizeof q, "%s/s/g%07ld", dir, i);
		if (rename(p, q) != 0)
			die("rename %s", p);
	}
	long renamed = i;
	report("rename", i, now() - t0);

	/* unlink */
	t0 = now();
	end = t0 + secs;
	for (i = 0; i < n && (i & 15 || now() < end); i++) {
		snprintf(p, sizeof p, "%s/s/%c%07ld", dir, i < renamed ? 'g' : 'f', i);
		if (unlink(p) != 0)
			die("unlink %s", p);
	}
	report("unlink", i, now() - t0);

	/* mkdir tree */
	snprintf(q, sizeof q, "%s/t", dir);
	t0 = now();
	end = t0 + secs;
	for (i = 0; i < n && (i & 15 || now() < end); i++) {
		tree_path(p, sizeof p, q, i);
		if (mkdir(p, 0755) != 0)
			die("mkdir %s", p);
	}
	report("mkdir", i, now() - t0);

	/* stat through "..": from a directory beside the NFILES files create
	 * made, of one of them, round after round */
	snprintf(q, sizeof q, "%s/c/sub", dir);
	xmkdir(q);
	int back = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (back < 0 || chdir(q) != 0)
		die("chdir %s", q);
	t0 = now();
	end = t0 + secs;
	for (done = 0; done < 256 || (done & 255) || now() < end; done++)
		if (stat("../f0000000", &st) != 0 || !S_ISREG(st.st_mode))
			die("stat ../f0000000 from %s", q);
	if (fchdir(back) != 0)
		die("fchdir back from %s", q);
	close(back);
	report("dotdot", done, now() - t0);

	/* readdir: whole listings of DIR/r */
	snprintf(q, sizeof q, "%s/r", dir);
	long entries = 0, per = -1;
	t0 = now();
	end = t0 + secs;
	do {
		DIR *d = opendir(q);
		struct dirent *e;
		long k = 0;
		if (!d)
			die("opendir %s", q);
		while ((e = readdir(d)))
			if (e->d_name[0] != '.')
				k++;
		closedir(d);
		if (per >= 0 && k != per)
			die("readdir %s: %ld entries, then %ld", q, per, k);
		per = k;
		entries += k;
	} while (now() < end);
	report("readdir", entries, now() - t0);
}

/* ---- personalities ----------------------------------------------------- */

struct persona {
	const char *name;
	long filesize;
	int dirwidth; /* 0: one directory */
	int prealloc; /* percent */
};

static const struct persona personas[] = {
	{ "fileserver", 128 << 10, 20, 80 },
	{ "varmail", 16 << 10, 0, 80 },
	{ "webserver", 16 << 10, 20, 100 },
};

static const struct persona *persona(const char *name)
{
	for (size_t i = 0; i < sizeof personas / sizeof *personas; i++)
		if (!strcmp(personas[i].name, name))
			return &personas[i];
	errno = 0;
	die("no personality %s (fileserver, varmail, webserver)", name);
	return NULL;
}

static char *iobuf;

static void file_path(char *out, size_t len, const char *dir, const struct persona *ps, long i)
{
	if (ps->dirwidth)
		snprintf(out, len, "%s/d%04ld/f%07ld", dir, i / ps->dirwidth, i);
	else
		snprintf(out, len, "%s/f%07ld", dir, i);
}

static int preallocated(const struct persona *ps, long i)
{
	return (i % 100) < ps->prealloc;
}

static void write_all(int fd, long n, const char *what)
{
	while (n > 0) {
		ssize_t w = write(fd, iobuf, n > IOSIZE ? IOSIZE : (size_t)n);
		if (w <= 0)
			die("write %s", what);
		n -= w;
	}
}

static void fileset(const char *dir, const struct persona *ps, long n)
{
	char p[4096];
	xmkdir(dir);
	for (long i = 0; i < n; i++) {
		if (ps->dirwidth && i % ps->dirwidth == 0) {
			snprintf(p, sizeof p, "%s/d%04ld", dir, i / ps->dirwidth);
			xmkdir(p);
		}
		if (!preallocated(ps, i))
			continue;
		file_path(p, sizeof p, dir, ps, i);
		int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0644);
		if (fd < 0)
			die("create %s", p);
		write_all(fd, ps->filesize, p);
		if (close(fd) != 0)
			die("close %s", p);
	}
}

struct worker {
	const char *dir;
	const struct persona *ps;
	long n, procs, id;
	char *exists; /* of this worker's files: index i / procs */
	uint64_t rng;
	long ops;
	long long bytes;
	char path[4096];
};

static uint64_t rnd(struct worker *w)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return w->rng;
}

/* A file of this worker that exists (or not), its path in w->path; -1 when
 * 64 random picks found none. */
static long pick(struct worker *w, int want)
{
	long mine = (w->n - w->id + w->procs - 1) / w->procs;
	for (int tries = 0; mine > 0 && tries < 64; tries++) {
		long k = (long)(rnd(w) % (uint64_t)mine);
		if (w->exists[k] == want) {
			long i = k * w->procs + w->id;
			file_path(w->path, sizeof w->path, w->dir, w->ps, i);
			return k;
		}
	}
	return -1;
}

static int op_open(struct worker *w, int flags)
{
	int fd = open(w->path, flags, 0644);
	if (fd < 0)
		die("open %s", w->path);
	w->ops++;
	return fd;
}

static void op_close(struct worker *w, int fd)
{
	if (close(fd) != 0)
		die("close %s", w->path);
	w->ops++;
}

static void op_read_whole(struct worker *w, int fd)
{
	ssize_t r;
	while ((r = read(fd, iobuf, IOSIZE)) > 0)
		w->bytes += r;
	if (r < 0)
		die("read %s", w->path);
	w->ops++;
}

static void op_write(struct worker *w, int fd, long n)
{
	write_all(fd, n, w->path);
	w->bytes += n;
	w->ops++;
}

static void op_fsync(struct worker *w, int fd)
{
	if (fsync(fd) != 0)
		die("fsync %s", w->path);
	w->ops++;
}

static void op_unlink(struct worker *w, long k)
{
	if (unlink(w->path) != 0)
		die("unlink %s", w->path);
	w->exists[k] = 0;
	w->ops++;
}

static long append_size(struct worker *w)
{
	return 1 + (long)(rnd(w) % APPEND_MAX);
}

static void fileserver_loop(struct worker *w)
{
	struct stat st;
	long k;
	int fd;
	if ((k = pick(w, 0)) >= 0) {
		fd = op_open(w, O_CREAT | O_EXCL | O_WRONLY);
		w->exists[k] = 1;
		op_write(w, fd, w->ps->filesize);
		op_close(w, fd);
	}
	if ((k = pick(w, 1)) >= 0) {
		fd = op_open(w, O_WRONLY | O_APPEND);
		op_write(w, fd, append_size(w));
		op_close(w, fd);
	}
	if ((k = pick(w, 1)) >= 0) {
		fd = op_open(w, O_RDONLY);
		op_read_whole(w, fd);
		op_close(w, fd);
	}
	if ((k = pick(w, 1)) >= 0)
		op_unlink(w, k);
	if ((k = pick(w, 1)) >= 0) {
		if (stat(w->path, &st) != 0)
			die("stat %s", w->path);
		w->ops++;
	}
}

static void varmail_loop(struct worker *w)
{
	long k;
	int fd;
	if ((k = pick(w, 1)) >= 0)
		op_unlink(w, k);
	if ((k = pick(w, 0)) >= 0) {
		fd = op_open(w, O_CREAT | O_EXCL | O_WRONLY | O_APPEND);
		w->exists[k] = 1;
		op_write(w, fd, append_size(w));
		op_fsync(w, fd);
		op_close(w, fd);
	}
	if ((k = pick(w, 1)) >= 0) {
		fd = op_open(w, O_RDWR | O_APPEND);
		op_read_whole(w, fd);
		op_write(w, fd, append_size(w));
		op_fsync(w, fd);
		op_close(w, fd);
	}
	if ((k = pick(w, 1)) >= 0) {
		fd = op_open(w, O_RDONLY);
		op_read_whole(w, fd);
		op_close(w, fd);
	}
}

static void webserver_loop(struct worker *w)
{
	for (int r = 0; r < 10; r++) {
		if (pick(w, 1) < 0)
			return;
		int fd = op_open(w, O_RDONLY);
		op_read_whole(w, fd);
		op_close(w, fd);
	}
	snprintf(w->path, sizeof w->path, "%s/log", w->dir);
	int fd = op_open(w, O_CREAT | O_WRONLY | O_APPEND);
	op_write(w, fd, APPEND_MAX);
	op_close(w, fd);
}

static void work(struct worker *w, double secs)
{
	void (*loop)(struct worker *) = !strcmp(w->ps->name, "fileserver") ? fileserver_loop
		: !strcmp(w->ps->name, "varmail")                            ? varmail_loop
									     : webserver_loop;
	long mine = (w->n - w->id + w->procs - 1) / w->procs;
	w->exists = calloc(mine > 0 ? mine : 1, 1);
	if (!w->exists)
		die("out of memory");
	/* What the fileset made, or an earlier run left: ask the file system. */
	for (long k = 0; k < mine; k++) {
		struct stat st;
		file_path(w->path, sizeof w->path, w->dir, w->ps, k * w->procs + w->id);
		w->exists[k] = stat(w->path, &st) == 0;
	}
	double end = now() + secs;
	do
		loop(w);
	while (now() < end);
}

static void run(const char *dir, const struct persona *ps, long n, long procs, double secs)
{
	int pfd[2];
	if (procs < 1 || pipe(pfd) != 0)
		die("pipe");
	double t0 = now();
	for (long id = 0; id < procs; id++) {
		pid_t pid = fork();
		if (pid < 0)
			die("fork");
		if (pid == 0) {
			struct worker w = { .dir = dir, .ps = ps, .n = n, .procs = procs, .id = id,
					    .rng = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1) };
			close(pfd[0]);
			work(&w, secs);
			char line[64];
			int len = snprintf(line, sizeof line, "%ld %lld\n", w.ops, w.bytes);
			if (write(pfd[1], line, len) != len)
				die("pipe");
			_exit(0);
		}
	}
	close(pfd[1]);
	long ops = 0;
	long long bytes = 0;
	FILE *in = fdopen(pfd[0], "r");
	long o;
	long long b;
	int got = 0;
	while (in && fscanf(in, "%ld %lld", &o, &b) == 2) {
		ops += o;
		bytes += b;
		got++;
	}
	int status, failed = 0;
	while (wait(&status) > 0)
		failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	double t = now() - t0;
	if (failed || got != procs) {
		errno = 0;
		die("%ld of %ld workers reported", (long)got, procs);
	}
	printf("procs %ld ops/s %.1f MB/s %.2f ops %ld\n", procs, ops / t, bytes / t / 1e6, ops);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";
	iobuf = malloc(IOSIZE);
	if (!iobuf)
		die("out of memory");
	memset(iobuf, 0x6b, IOSIZE);
	if (!strcmp(cmd, "meta-setup") && argc == 5) {
		char p[4096];
		xmkdir(argv[2]);
		snprintf(p, sizeof p, "%s/s", argv[2]);
		populate(p, number(argv[3]));
		snprintf(p, sizeof p, "%s/r", argv[2]);
		populate(p, number(argv[4]));
	} else if (!strcmp(cmd, "meta") && argc == 5) {
		meta(argv[2], number(argv[3]), seconds(argv[4]));
	} else if (!strcmp(cmd, "fileset") && argc == 5) {
		fileset(argv[2], persona(argv[3]), number(argv[4]));
	} else if (!strcmp(cmd, "run") && argc == 7) {
		for (char *p = argv[5], *next; p; p = next) {
			next = strchr(p, ',');
			if (next)
				*next++ = '\0';
			run(argv[2], persona(argv[3]), number(argv[4]), number(p), seconds(argv[6]));
		}
	} else {
		fprintf(stderr, "usage: fsload meta-setup DIR NFILES NREADDIR\n"
				"       fsload meta DIR NFILES SECONDS\n"
				"       fsload fileset DIR PERSONALITY NFILES\n"
				"       fsload run DIR PERSONALITY NFILES PROCS[,PROCS...] SECONDS\n");
		return 2;
	}
	return 0;
}
