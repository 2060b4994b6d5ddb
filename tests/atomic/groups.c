/* groups — atomic groups as a preloaded program sees them (kura_atomic.h,
 * F2FS's ioctls, stores through shared maps), run by tests/test_atomic.py.
 *
 *   groups DIR            the checks; prints "ok N" or "FAIL ..." lines
 *   groups DIR --fallback DIR is not kura's: the calls must fall back
 *
 * Exit status: 0 when every check passed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "kura_atomic.h"

#define F2FS_IOCTL_MAGIC 0xf5
#define F2FS_IOC_START_ATOMIC_WRITE _IO(F2FS_IOCTL_MAGIC, 1)
#define F2FS_IOC_COMMIT_ATOMIC_WRITE _IO(F2FS_IOCTL_MAGIC, 2)
#define F2FS_IOC_ABORT_VOLATILE_WRITE _IO(F2FS_IOCTL_MAGIC, 5)
#define F2FS_IOC_GET_FEATURES _IOR(F2FS_IOCTL_MAGIC, 12, uint32_t)
#define F2FS_FEATURE_ATOMIC_WRITE 0x0004

#define PG 4096
#define NPAGES 64

#include "check.h"

static char path[4096];

/* Every page of the file holds one repeated byte: which one, or -1 if
 * the pages disagree (a torn group), -2 if unreadable. */
static int uniform(const char *p, size_t pages)
{
	int fd = open(p, O_RDONLY);
	if (fd < 0)
		return -2;
	static char buf[NPAGES * PG];
	ssize_t n = pread(fd, buf, pages * PG, 0);
	close(fd);
	if (n != (ssize_t)(pages * PG))
		return -2;
	for (size_t i = 1; i < pages * PG; i++)
		if (buf[i] != buf[0])
			return -1;
	return (unsigned char)buf[0];
}

static int make_file(const char *name, int byte)
{
	snprintf(path, sizeof path, "%s", name);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	static char buf[NPAGES * PG];
	memset(buf, byte, sizeof buf);
	if (fd < 0 || pwrite(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf || fsync(fd))
		return -1;
	return fd;
}

/* What a separate process, with its own open of the file, reads at off. */
static int other_reads(const char *p, off_t off)
{
	pid_t pid = fork();
	if (pid == 0) {
		unsigned char c = 0;
		int fd = open(p, O_RDONLY);
		_exit(fd >= 0 && pread(fd, &c, 1, off) == 1 ? c : 255);
	}
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void writes(const char *dir)
{
	char name[4200];
	snprintf(name, sizeof name, "%s/w", dir);
	int fd = make_file(name, 'a');
	CHECK(kura_atomic_fbegin(fd) == 1, "fbegin: a group");
	CHECK(kura_atomic_fbegin(fd) == -1 && errno == EBUSY, "a second fbegin: EBUSY");
	CHECK(pwrite(fd, "b", 1, 5 * PG) == 1 && write(fd, "bb", 2) == 2, "writes in the group");
	CHECK(ftruncate(fd, 10 * PG + 7) == 0, "truncate in the group");
	struct stat st;
	CHECK(fstat(fd, &st) == 0 && st.st_size == 10 * PG + 7, "fstat: the group's size (%lld)", (long long)st.st_size);
	char c = 0;
	CHECK(pread(fd, &c, 1, 5 * PG) == 1 && c == 'b', "the group reads its write");
	CHECK(other_reads(name, 5 * PG) == 'a', "another process reads the old byte");
	void *p = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(p == MAP_FAILED && errno == ENODEV, "mmap through the group's descriptor: ENODEV");
	CHECK(fsync(fd) == 0, "fsync commits");
	CHECK(other_reads(name, 5 * PG) == 'b', "committed: others read it");
	CHECK(stat(name, &st) == 0 && st.st_size == 10 * PG + 7, "committed size");
	/* Abort. */
	CHECK(kura_atomic_fbegin(fd) == 1 && pwrite(fd, "z", 1, 0) == 1, "a group to abort");
	CHECK(kura_atomic_fabort(fd) == 0, "fabort");
	CHECK(pread(fd, &c, 1, 0) == 1 && c == 'b', "aborted: the old byte (%c)", c);
	/* Close aborts. */
	CHECK(kura_atomic_fbegin(fd) == 1 && pwrite(fd, "z", 1, 0) == 1, "a group to close");
	close(fd);
	CHECK(other_reads(name, 0) == 'b', "closed without a commit: aborted");
	/* F2FS's ioctls, as SQLite uses them. */
	fd = open(name, O_RDWR);
	uint32_t features = 0;
	CHECK(ioctl(fd, F2FS_IOC_GET_FEATURES, &features) == 0 && (features & F2FS_FEATURE_ATOMIC_WRITE),
	      "F2FS_IOC_GET_FEATURES: atomic write");
	CHECK(ioctl(fd, F2FS_IOC_START_ATOMIC_WRITE) == 0 && ioctl(fd, F2FS_IOC_START_ATOMIC_WRITE) == 0,
	      "START_ATOMIC_WRITE, twice (the kernel's answer: 0)");
	CHECK(pwrite(fd, "q", 1, 0) == 1 && other_reads(name, 0) == 'b', "a write, unseen");
	CHECK(ioctl(fd, F2FS_IOC_COMMIT_ATOMIC_WRITE) == 0 && other_reads(name, 0) == 'q', "COMMIT_ATOMIC_WRITE");
	CHECK(ioctl(fd, F2FS_IOC_START_ATOMIC_WRITE) == 0 && pwrite(fd, "r", 1, 0) == 1, "another");
	CHECK(ioctl(fd, F2FS_IOC_ABORT_VOLATILE_WRITE) == 0 && pread(fd, &c, 1, 0) == 1 && c == 'q',
	      "ABORT_VOLATILE_WRITE");
	CHECK(ioctl(fd, F2FS_IOC_ABORT_VOLATILE_WRITE) == 0, "abort without a group: 0");
	CHECK(ioctl(fd, F2FS_IOC_COMMIT_ATOMIC_WRITE) == 0, "commit without a group: an fsync");
	close(fd);
	unlink(name);
}

/* Stores through a shared map join the group; others see them at the
 * commit; an abort takes them back.  other_map: another process maps the
 * file meanwhile (the commit then copies into the file's blocks). */
static void maps(const char *dir, int other_map)
{
	char name[4200];
	snprintf(name, sizeof name, "%s/m%d", dir, other_map);
	int fd = make_file(name, 'a');
	char *m = mmap(NULL, NPAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED, "mmap");
	if (m == MAP_FAILED)
		return;
	int rd = open(name, O_RDONLY); /* another description */
	int pipefd[2];
	pid_t watcher = -1;
	if (other_map && pipe(pipefd) == 0) {
		watcher = fork();
		if (watcher == 0) { /* maps the file itself and reports page 3's byte on request */
			int f = open(name, O_RDONLY);
			char *w = mmap(NULL, NPAGES * PG, PROT_READ, MAP_SHARED, f, 0);
			char req;
			while (read(pipefd[0], &req, 1) == 1)
				_exit(w == MAP_FAILED ? 255 : (unsigned char)w[3 * PG]);
			_exit(254);
		}
		usleep(200000); /* lets the watcher map it */
	}
	m[0] = 'x'; /* before any group: straight to the file */
	char c = 0;
	CHECK(pread(rd, &c, 1, 0) == 1 && c == 'x', "a store without a group reaches the file");
	CHECK(kura_atomic_fbegin(fd) == 1, "fbegin with a map");
	memset(m + 3 * PG, 'm', PG);
	m[7 * PG + 100] = 'n';
	CHECK(pwrite(fd, "p", 1, 9 * PG) == 1, "a write() in the group");
	CHECK(m[9 * PG] == 'p', "the map shows the group's write()");
	CHECK(pread(fd, &c, 1, 3 * PG + 17) == 1 && c == 'm', "read() through the group sees the map's store");
	CHECK(pread(rd, &c, 1, 3 * PG) == 1 && c == 'a', "another description does not");
	CHECK(read(rd, m + 20 * PG, 1) == 1 && m[20 * PG] == 'x', "read() into the protected map works");
	CHECK(other_reads(name, 7 * PG + 100) == 'a', "nor another process");
	CHECK(kura_atomic_fcommit(fd) == 0, "commit");
	CHECK(pread(rd, &c, 1, 3 * PG + 4095) == 1 && c == 'm', "committed: the map's store is in the file");
	CHECK(other_reads(name, 7 * PG + 100) == 'n' && other_reads(name, 20 * PG) == 'x', "others see it");
	CHECK(m[3 * PG] == 'm' && m[9 * PG] == 'p', "the map still shows the group's bytes");
	if (watcher > 0) {
		int st;
		CHECK(write(pipefd[1], "?", 1) == 1, "ask the watcher");
		waitpid(watcher, &st, 0);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 'm', "another process's map shows the commit (%d)",
		      WEXITSTATUS(st));
		close(pipefd[0]);
		close(pipefd[1]);
	}
	m[30 * PG] = 'y'; /* the map is writable again after the group */
	CHECK(pread(rd, &c, 1, 30 * PG) == 1 && c == 'y', "a store after the commit reaches the file");
	/* Abort: the map shows the file again. */
	CHECK(kura_atomic_fbegin(fd) == 1, "fbegin again");
	m[3 * PG] = 'Q';
	m[40 * PG] = 'Q';
	CHECK(kura_atomic_fabort(fd) == 0, "abort");
	CHECK(m[3 * PG] == 'm' && m[40 * PG] == 'a', "aborted: the map shows the file (%c %c)", m[3 * PG], m[40 * PG]);
	CHECK(pread(rd, &c, 1, 40 * PG) == 1 && c == 'a', "and the file never had it");
	munmap(m, NPAGES * PG);
	close(rd);
	close(fd);
	unlink(name);
}

/* A process killed at a random moment in a run of groups, each setting
 * every page to its own byte through the map, pwrite or both: the file
 * always holds one group whole. */
static void kills(const char *dir)
{
	char name[4200];
	snprintf(name, sizeof name, "%s/k", dir);
	close(make_file(name, 'A'));
	srand((unsigned)getpid());
	int torn = 0, rounds = 24, last = 'A';
	for (int r = 0; r < rounds; r++) {
		pid_t pid = fork();
		if (pid == 0) {
			int fd = open(name, O_RDWR);
			char *m = mmap(NULL, NPAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (fd < 0 || m == MAP_FAILED)
				_exit(3);
			for (int g = 0;; g++) {
				int byte = 'B' + (g + r * 7) % 24;
				if (kura_atomic_fbegin(fd) != 1)
					_exit(4);
				for (int p = 0; p < NPAGES; p++) {
					if ((p + g) % 3)
						memset(m + (size_t)p * PG, byte, PG);
					else {
						static char page[PG];
						memset(page, byte, PG);
						if (pwrite(fd, page, PG, (off_t)p * PG) != PG)
							_exit(5);
					}
				}
				if (kura_atomic_fcommit(fd))
					_exit(6);
			}
		}
		struct timespec ts = { 0, (rand() % 20000) * 1000L };
		nanosleep(&ts, NULL);
		kill(pid, SIGKILL);
		int st;
		waitpid(pid, &st, 0);
		int u = uniform(name, NPAGES);
		if (u < 0)
			torn++;
		else
			last = u;
	}
	CHECK(torn == 0, "%d of %d kills left a torn group (last whole: %c)", torn, rounds, last);
	unlink(name);
}

/* A new file of NPAGES pages of 'a' in dir, mapped shared and writable;
 * NULL if that failed (counted). */
static char *mapped_file(const char *dir, const char *leaf, char *name, int *fd)
{
	snprintf(name, 4200, "%s/%s", dir, leaf);
	*fd = make_file(name, 'a');
	char *m = mmap(NULL, NPAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	CHECK(m != MAP_FAILED, "mmap %s", name);
	return m == MAP_FAILED ? NULL : m;
}

/* Threads storing into different pages of one map at once: every store
 * faults in its own thread, and all of them land in the group. */
struct storer {
	char *m;
	int first, n, byte;
};

static void *store_pages(void *arg)
{
	struct storer *s = arg;
	for (int r = 0; r < 50; r++)
		for (int p = s->first; p < s->first + s->n; p++)
			s->m[(size_t)p * PG + (size_t)(r * 67 % PG)] = (char)s->byte;
	return NULL;
}

static void threads(const char *dir)
{
	char name[4200];
	int fd;
	char *m = mapped_file(dir, "t", name, &fd);
	if (!m)
		return;
	CHECK(kura_atomic_fbegin(fd) == 1, "fbegin");
	enum { T = 4 };
	pthread_t th[T];
	struct storer st[T];
	for (int i = 0; i < T; i++) {
		st[i] = (struct storer){ m, i * (NPAGES / T), NPAGES / T, 'A' + i };
		pthread_create(&th[i], NULL, store_pages, &st[i]);
	}
	for (int i = 0; i < T; i++)
		pthread_join(th[i], NULL);
	CHECK(other_reads(name, 0) == 'a', "before the commit, others see none of the threads' stores");
	CHECK(kura_atomic_fcommit(fd) == 0, "commit");
	int ok = 1;
	for (int i = 0; i < T; i++)
		ok &= other_reads(name, (off_t)st[i].first * PG + 67) == 'A' + i;
	CHECK(ok, "every thread's stores committed");
	munmap(m, NPAGES * PG);
	close(fd);
	unlink(name);
}

/* A group is shared with a forked child (one description): the child
 * commits it; the parent's map stores then reach the file again, and the
 * parent can open a new group.  A second description of the file in the
 * same process cannot open one of its own while the first is open. */
static void forked(const char *dir)
{
	char name[4200];
	int fd;
	char *m = mapped_file(dir, "f", name, &fd);
	if (!m)
		return;
	CHECK(kura_atomic_fbegin(fd) == 1, "fbegin");
	int fd2 = open(name, O_RDWR);
	CHECK(kura_atomic_fbegin(fd2) == -1 && errno == EBUSY, "a second description of the file: EBUSY");
	close(fd2);
	m[0] = 'p';
	pid_t pid = fork();
	if (pid == 0)
		_exit(pwrite(fd, "c", 1, PG) == 1 && kura_atomic_fcommit(fd) == 0 ? 0 : 1);
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child commits the shared group");
	CHECK(other_reads(name, 0) == 'p' && other_reads(name, PG) == 'c', "both the parent's store and the child's write");
	m[2 * PG] = 'q'; /* no group now: straight to the file */
	CHECK(other_reads(name, 2 * PG) == 'q', "a store after the child's commit reaches the file");
	CHECK(kura_atomic_fbegin(fd) == 1, "a new group in the parent");
	m[3 * PG] = 'r';
	CHECK(other_reads(name, 3 * PG) == 'a' && kura_atomic_fcommit(fd) == 0 && other_reads(name, 3 * PG) == 'r',
	      "and it works");
	munmap(m, NPAGES * PG);
	close(fd);
	unlink(name);
}

/* A run of stores through a map takes the pages after it over early
 * (src/preload/groupmap.c).  A page taken so that nothing stored into
 * keeps what the file has at the commit, here another description's
 * write; a store into one joins the group, also one a forked child makes,
 * which the parent's commit must notice. */
static void runs(const char *dir)
{
	char name[4200];
	int fd;
	char *m = mapped_file(dir, "r", name, &fd);
	if (!m)
		return;
	int other = open(name, O_RDWR); /* outside the group */
	CHECK(kura_atomic_fbegin(fd) == 1, "fbegin");
	/* Pages 0 to 7 in order: the takes at 1, 3 and 6 (a run's second
	 * store and the first past what was taken) add 1, 2 and 4 pages, so
	 * 8 to 10 are taken and not stored into. */
	for (int p = 0; p < 8; p++)
		m[p * PG] = 'r';
	CHECK(pwrite(other, "o", 1, 9 * PG) == 1, "another description writes page 9");
	m[8 * PG + 1] = 's';
	CHECK(kura_atomic_fcommit(fd) == 0, "commit");
	CHECK(other_reads(name, 0) == 'r' && other_reads(name, 7 * PG) == 'r', "the run's stores committed");
	CHECK(other_reads(name, 8 * PG + 1) == 's' && other_reads(name, 8 * PG) == 'a',
	      "a store into a page taken ahead committed, and only it");
	CHECK(other_reads(name, 9 * PG) == 'o', "a page taken ahead, never stored into, keeps the other write (%c)",
	      other_reads(name, 9 * PG));
	CHECK(m[9 * PG] == 'o' && m[10 * PG] == 'a', "the map shows the file after the commit");
	/* Forked in the middle of a run: pages 16 to 22 stored, 23 to 26
	 * taken ahead; the child stores into 23. */
	CHECK(kura_atomic_fbegin(fd) == 1, "fbegin again");
	for (int p = 16; p < 23; p++)
		m[p * PG] = 'R';
	pid_t pid = fork();
	if (pid == 0) {
		m[23 * PG + 5] = 'k';
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child stores into the group");
	CHECK(kura_atomic_fcommit(fd) == 0, "the parent commits");
	CHECK(other_reads(name, 22 * PG) == 'R' && other_reads(name, 23 * PG + 5) == 'k',
	      "the child's store into a page taken ahead before the fork committed (%c)",
	      other_reads(name, 23 * PG + 5));
	/* A child alive at the commit still shows the pages taken ahead: the
	 * commit must not free their blocks for reuse (here by a new file's
	 * writes), or the child's map would show that file. */
	CHECK(kura_atomic_fbegin(fd) == 1, "a group with a child alive");
	for (int p = 28; p < 35; p++) /* 35 to 38 taken ahead */
		m[p * PG] = 'S';
	int go[2];
	CHECK(pipe(go) == 0, "a pipe");
	pid = fork();
	if (pid == 0) {
		char c;
		if (read(go[0], &c, 1) != 1)
			_exit(2);
		_exit(m[36 * PG] == 'a' && m[37 * PG + 9] == 'a' ? 0 : 1);
	}
	CHECK(kura_atomic_fcommit(fd) == 0, "commit while the child maps the pages");
	char other_name[4200];
	snprintf(other_name, sizeof other_name, "%s/r2", dir);
	int fill = open(other_name, O_RDWR | O_CREAT | O_TRUNC, 0644);
	static char zs[64 * PG];
	memset(zs, 'Z', sizeof zs);
	CHECK(fill >= 0 && pwrite(fill, zs, sizeof zs, 0) == (ssize_t)sizeof zs && fsync(fill) == 0,
	      "another file written after the commit");
	CHECK(write(go[1], "g", 1) == 1, "tell the child");
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's map still shows the file's bytes (%d)",
	      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	CHECK(other_reads(name, 36 * PG) == 'a' && other_reads(name, 34 * PG) == 'S', "the commit");
	close(fill);
	unlink(other_name);
	close(go[0]);
	close(go[1]);
	/* A map the program made inaccessible, made first: the layer must
	 * read the pages it takes ahead through the other one. */
	char *hidden = mmap(NULL, NPAGES * PG, PROT_NONE, MAP_SHARED, fd, 0);
	munmap(m, NPAGES * PG);
	m = mmap(NULL, NPAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(hidden != MAP_FAILED && m != MAP_FAILED, "a PROT_NONE map, then a writable one");
	if (m == MAP_FAILED)
		return;
	CHECK(kura_atomic_fbegin(fd) == 1, "a group beside the hidden map");
	for (int p = 50; p < 58; p++)
		m[p * PG] = 'h';
	CHECK(kura_atomic_fcommit(fd) == 0 && other_reads(name, 57 * PG) == 'h' && other_reads(name, 59 * PG) == 'a',
	      "its stores committed, the pages taken ahead not");
	if (hidden != MAP_FAILED)
		munmap(hidden, NPAGES * PG);
	/* Abort: pages taken ahead go with the rest. */
	CHECK(kura_atomic_fbegin(fd) == 1, "a group to abort");
	for (int p = 40; p < 48; p++)
		m[p * PG] = 'z';
	CHECK(kura_atomic_fabort(fd) == 0 && m[40 * PG] == 'a' && m[49 * PG] == 'a', "aborted: the map shows the file");
	m[49 * PG] = 'w'; /* no group now: straight to the file */
	CHECK(other_reads(name, 49 * PG) == 'w', "a store after the abort reaches the file");
	munmap(m, NPAGES * PG);
	close(other);
	close(fd);
	unlink(name);
}

static void fallback(const char *dir)
{
	char name[4200];
	snprintf(name, sizeof name, "%s/f", dir);
	int fd = make_file(name, 'a');
	CHECK(kura_atomic_fbegin(fd) == 0, "not kura's: no group, writes go through");
	CHECK(pwrite(fd, "b", 1, 0) == 1 && other_reads(name, 0) == 'b', "the write is there at once");
	CHECK(kura_atomic_fcommit(fd) == 0, "commit: an fdatasync");
	CHECK(kura_atomic_fabort(fd) == -1 && errno == ENOTSUP, "abort: ENOTSUP");
	close(fd);
	unlink(name);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (argc > 2 && !strcmp(argv[2], "--fallback")) {
		fallback(argv[1]);
	} else {
		writes(argv[1]);
		maps(argv[1], 0);
		maps(argv[1], 1);
		threads(argv[1]);
		forked(argv[1]);
		runs(argv[1]);
		kills(argv[1]);
	}
	printf("%d checks, %d failed\n", checks, failures);
	return failures != 0;
}
