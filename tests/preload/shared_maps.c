/* Shared maps: stores through a map, write() and other processes' maps see
 * the same bytes; SIGBUS past the end of the file; growth, mremap, partial
 * munmap, unlink while mapped, fork; Linux's refusals.  The output must be
 * the same on tmpfs and on kura. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define PG 4096

static sigjmp_buf jb;
static volatile int faults;

static void on_bus(int sig)
{
	(void)sig;
	faults++;
	siglongjmp(jb, 1);
}

/* Reads one byte at p, or says it faulted. */
static const char *probe(volatile char *p)
{
	static char out[16];
	if (sigsetjmp(jb, 1))
		return "SIGBUS";
	snprintf(out, sizeof out, "%d", *p);
	return out;
}

static const char *store(volatile char *p, char c)
{
	if (sigsetjmp(jb, 1))
		return "SIGBUS";
	*p = c;
	return "stored";
}

static char *file(const char *base, const char *name)
{
	static char p[4][4096];
	static int i;
	char *s = p[i++ % 4];
	snprintf(s, 4096, "%s/%s", base, name);
	return s;
}

static void show_errno(const char *what, void *r)
{
	printf("%s: %s\n", what, r == MAP_FAILED ? strerror(errno) : "mapped");
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	const char *b = argv[1];
	signal(SIGBUS, on_bus);
	char buf[64];

	/* write() <-> map, in one process */
	int fd = open(file(b, "f"), O_RDWR | O_CREAT, 0644);
	ftruncate(fd, 3 * PG);
	char *m = mmap(NULL, 3 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	show_errno("map rw", m);
	memcpy(m + 100, "through-map", 11);
	pread(fd, buf, 11, 100);
	printf("pread sees: %.11s\n", buf);
	pwrite(fd, "by-pwrite", 9, PG + 7);
	printf("map sees: %.9s\n", m + PG + 7);
	char big[PG];
	memset(big, 'w', sizeof big);
	pwrite(fd, big, PG, 2 * PG); /* a whole block: must land where the map is */
	printf("whole-block write seen: %c%c\n", m[2 * PG], m[3 * PG - 1]);

	/* another process, by fork and by its own map */
	pid_t pid = fork();
	if (pid == 0) {
		m[5] = 'K';
		int fd2 = open(file(b, "f"), O_RDWR);
		char *m2 = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd2, 0);
		m2[6] = 'L';
		munmap(m2, PG);
		_exit(0);
	}
	waitpid(pid, NULL, 0);
	pread(fd, buf, 2, 5);
	printf("child stores: %c%c map %c%c\n", buf[0], buf[1], m[5], m[6]);

	/* partial munmap: the other pages stay */
	munmap(m + PG, PG);
	printf("after partial munmap: %c %c\n", m[100], m[2 * PG]);
	munmap(m, PG);
	munmap(m + 2 * PG, PG);

	/* past the end of the file, and growth */
	ftruncate(fd, PG);
	m = mmap(NULL, 3 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	printf("page 0: %s, page 1: %s\n", probe(m + 100), probe(m + PG));
	ftruncate(fd, 2 * PG);
	printf("after growth page 1: %s\n", probe(m + PG + 1));
	printf("store: %s\n", store(m + PG + 1, 'g'));
	pread(fd, buf, 1, PG + 1);
	printf("pread of the grown page: %c\n", buf[0]);
	pwrite(fd, "z", 1, 2 * PG + 3); /* grows by write */
	printf("page 2 after write: %s\n", probe(m + 2 * PG + 3));
	ftruncate(fd, PG);
	printf("after shrink page 1: %s\n", probe(m + PG));

	/* mremap growth keeps contents */
	ftruncate(fd, 4 * PG);
	char *r = mremap(m, 3 * PG, 4 * PG, MREMAP_MAYMOVE);
	show_errno("mremap", r);
	printf("after mremap: %c\n", r[100]);
	printf("page 3: %s\n", store(r + 3 * PG, 'R'));
	pread(fd, buf, 1, 3 * PG);
	printf("pread page 3: %c\n", buf[0]);
	msync(r, 4 * PG, MS_SYNC);
	printf("msync: %d\n", msync(r, 4 * PG, MS_SYNC));
	/* Growing again and again, as SQLite grows its map of a database:
	 * each mremap takes the whole of what the last one gave. */
	size_t len = 4 * PG;
	for (int i = 0; i < 4 && r != MAP_FAILED; i++, len += 2 * PG) {
		ftruncate(fd, (off_t)(len + 2 * PG));
		r = mremap(r, len, len + 2 * PG, MREMAP_MAYMOVE);
		printf("mremap to %zu pages: %s\n", (len + 2 * PG) / PG, r == MAP_FAILED ? strerror(errno) : "ok");
	}
	if (r != MAP_FAILED)
		printf("after growing: %c %c\n", r[100], r[3 * PG]);
	munmap(r, len);

	/* unlink while mapped */
	m = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	unlink(file(b, "f"));
	m[0] = 'U';
	printf("unlinked, mapped: %c%c\n", m[0], m[100]);
	munmap(m, PG);

	/* Calls that copy to or from a map's pages: pages that came within
	 * the file since the mmap serve as any page does; from a page still
	 * past the end a call copies up to it, or fails with EFAULT. */
	fd = open(file(b, "h"), O_RDWR | O_CREAT, 0644);
	int other = open(file(b, "h2"), O_RDWR | O_CREAT, 0644);
	ftruncate(fd, PG);
	m = mmap(NULL, 6 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ftruncate(fd, 4 * PG);
	printf("write from a grown page: %zd\n", write(other, m + PG, 16));
	pwrite(other, "grown", 5, 0);
	printf("pread into a grown page: %zd\n", pread(other, m + 2 * PG, 5, 0));
	pread(fd, buf, 5, 2 * PG);
	printf("the map shows %.5s, the file has %.5s\n", m + 2 * PG, buf);
	struct iovec iv[2] = { { m + 3 * PG, 8 }, { m + 4 * PG - 4, 8 } };
	printf("writev, one element across the end: %zd\n", pwritev(other, iv, 2, 0));
	ssize_t n = write(other, m + 5 * PG, 16);
	printf("write from past the end: %zd %s\n", n, n < 0 ? strerror(errno) : "");
	lseek(other, 0, SEEK_SET);
	n = read(other, m + 5 * PG, 16);
	printf("read into past the end: %zd %s\n", n, n < 0 ? strerror(errno) : "");
	printf("pwrite across the end: %zd\n", pwrite(other, m + 4 * PG - 8, 16, 0));
	munmap(m, 6 * PG);
	close(other);
	close(fd);

	/* refusals and private maps */
	fd = open(file(b, "g"), O_RDWR | O_CREAT, 0644);
	write(fd, "private!", 8);
	close(fd);
	fd = open(file(b, "g"), O_RDONLY);
	show_errno("rw map of O_RDONLY", mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
	m = mmap(NULL, PG, PROT_READ, MAP_SHARED, fd, 0);
	show_errno("ro map of O_RDONLY", m);
	printf("mprotect to write: %s\n", mprotect(m, PG, PROT_READ | PROT_WRITE) ? strerror(errno) : "ok");
	munmap(m, PG);
	char *p = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	p[0] = 'X';
	pread(fd, buf, 8, 0);
	printf("private store unseen: %.8s / %.8s\n", buf, p);
	munmap(p, PG);
	close(fd);
	fd = open(file(b, "g"), O_WRONLY);
	show_errno("map of O_WRONLY", mmap(NULL, PG, PROT_READ, MAP_SHARED, fd, 0));
	close(fd);
	fd = open(b, O_RDONLY | O_DIRECTORY);
	show_errno("map of a directory", mmap(NULL, PG, PROT_READ, MAP_SHARED, fd, 0));
	close(fd);
	fd = open(file(b, "g"), O_RDWR);
	show_errno("unaligned offset", mmap(NULL, PG, PROT_READ, MAP_SHARED, fd, 100));
	show_errno("zero length", mmap(NULL, 0, PROT_READ, MAP_SHARED, fd, 0));
	close(fd);
	printf("faults: %d\n", faults);
	return 0;
}
