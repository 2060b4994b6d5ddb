/* grown_map_kernel.c — a shared map of a file that another process then
 * grows: the pages the file grew into are the file's, for the kernel too.
 * A pipe's write from them, a read into them, a socket's send and recv, a
 * vector, and a write to a file of another file system must see the
 * file's bytes, as on Linux (under kura they answered EFAULT: the kernel
 * met pages the layer had not mapped in yet).  Usage: grown_map_kernel
 * BASE; the output must be the same on tmpfs and on kura. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define PG 4096

static void said(const char *what, long r)
{
	printf("%-32s %ld %s\n", what, r, r < 0 ? strerrorname_np(errno) : "");
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	char path[4096];
	snprintf(path, sizeof path, "%s/grown", argv[1]);
	int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
	if (fd < 0 || ftruncate(fd, PG))
		return 1;
	char *m = mmap(NULL, 8 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return 1;
	/* Another process grows the file to seven pages. */
	if (fork() == 0) {
		int g = open(path, O_RDWR);
		for (int i = 1; i < 7; i++) {
			char page[PG];
			memset(page, 'a' + i, sizeof page);
			if (pwrite(g, page, sizeof page, (off_t)i * PG) != PG)
				_exit(1);
		}
		_exit(0);
	}
	int st;
	wait(&st);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		return 1;

	int p[2], sv[2];
	char got[64] = { 0 };
	/* Non-blocking: a failed write must not leave its read waiting. */
	if (pipe2(p, O_NONBLOCK) || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv))
		return 1;
	said("write to a pipe from page 1", write(p[1], m + PG, 8));
	said("read it back", read(p[0], got, 8));
	printf("%-32s %.8s\n", "bytes", got);
	said("send from page 2", send(sv[0], m + 2 * PG, 8, 0));
	memset(got, 0, sizeof got);
	said("recv", recv(sv[1], got, 8, 0));
	printf("%-32s %.8s\n", "bytes", got);
	struct iovec iv[2] = { { m + 3 * PG, 4 }, { m + 4 * PG, 4 } };
	said("writev from pages 3 and 4", writev(p[1], iv, 2));
	memset(got, 0, sizeof got);
	said("read it back", read(p[0], got, 8));
	printf("%-32s %.8s\n", "bytes", got);
	said("send into page 4 (recv)", send(sv[0], "ZZ", 2, 0));
	said("recv into page 4", recv(sv[1], m + 4 * PG + 10, 2, 0));
	said("write to the pipe", write(p[1], "YY", 2));
	said("read into page 3", read(p[0], m + 3 * PG + 10, 2));
	char back[4] = { 0 };
	said("pread of page 3 and 4's bytes", pread(fd, back, 2, 3 * PG + 10) + pread(fd, back + 2, 2, 4 * PG + 10));
	printf("%-32s %.4s\n", "bytes", back);
	char out[4096];
	snprintf(out, sizeof out, "/tmp/grown_map_kernel.%d", (int)getpid());
	int k = open(out, O_CREAT | O_RDWR | O_TRUNC, 0600);
	said("write to a /tmp file from page 1", write(k, m + PG, 16));
	unlink(out);
	struct iovec sv5 = { m + 5 * PG, 8 }, rv6 = { m + 6 * PG + 20, 8 };
	struct msghdr sm = { .msg_iov = &sv5, .msg_iovlen = 1 }, rm = { .msg_iov = &rv6, .msg_iovlen = 1 };
	said("sendmsg from page 5", sendmsg(sv[0], &sm, 0));
	said("recvmsg into page 6", recvmsg(sv[1], &rm, 0));
	memset(back, 0, sizeof back);
	said("pread of page 6's bytes", pread(fd, back, 4, 6 * PG + 20));
	printf("%-32s %.4s\n", "bytes", back);
	said("write from past the end (page 7)", write(p[1], m + 7 * PG, 8));
	return 0;
}
