/* fileflags.c — chattr's flags through ioctl: lsattr reads none on a new
 * file or directory, setting none succeeds for the owner and moves the
 * change time, a stranger may not even do that, and a flag the file
 * system does not keep is refused.  Usage: fileflags BASE; the output must
 * be the same on tmpfs and on kura (tmpfs keeps a few flags kura does not,
 * so those are left out here: tests/unit_procs.c checks that kura refuses them). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void said(const char *what, int r)
{
	printf("%-34s %d %s\n", what, r, r < 0 ? strerrorname_np(errno) : "");
}

static void flags_of(const char *what, int fd)
{
	int f = -1;
	struct fsxattr x;
	memset(&x, 0xff, sizeof x);
	int r = ioctl(fd, FS_IOC_GETFLAGS, &f);
	printf("%-34s %d flags %#x\n", what, r, f);
	r = ioctl(fd, FS_IOC_FSGETXATTR, &x);
	printf("%-34s %d xflags %#x extsize %u projid %u cowextsize %u\n", what, r, x.fsx_xflags, x.fsx_extsize,
	       x.fsx_projid, x.fsx_cowextsize);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	char f[4096], d[4096];
	snprintf(f, sizeof f, "%s/f", argv[1]);
	snprintf(d, sizeof d, "%s/d", argv[1]);
	int fd = open(f, O_CREAT | O_RDWR | O_TRUNC, 0666), dfd;
	if (fd < 0 || fchmod(fd, 0666) || mkdir(d, 0755) || (dfd = open(d, O_RDONLY | O_DIRECTORY)) < 0) {
		perror(argv[1]);
		return 1;
	}
	flags_of("new file", fd);
	flags_of("new directory", dfd);

	struct stat before, after;
	struct timespec pause = { 0, 20 * 1000 * 1000 };
	int none = 0;
	fstat(fd, &before);
	nanosleep(&pause, NULL);
	said("set none", ioctl(fd, FS_IOC_SETFLAGS, &none));
	fstat(fd, &after);
	printf("%-34s %s\n", "change time moved",
	       after.st_ctim.tv_sec != before.st_ctim.tv_sec || after.st_ctim.tv_nsec != before.st_ctim.tv_nsec ? "yes"
														   : "no");
	said("set none on a directory", ioctl(dfd, FS_IOC_SETFLAGS, &none));
	struct fsxattr x = { 0 };
	said("fsxattr none", ioctl(fd, FS_IOC_FSSETXATTR, &x));
	x.fsx_projid = 7;
	said("fsxattr project id", ioctl(fd, FS_IOC_FSSETXATTR, &x));
	int compress = FS_COMPR_FL;
	said("set compress", ioctl(fd, FS_IOC_SETFLAGS, &compress));
	flags_of("after the refusals", fd);
	said("get into nothing", ioctl(fd, FS_IOC_GETFLAGS, (int *)8));
	said("set from nothing", ioctl(fd, FS_IOC_SETFLAGS, (int *)8));

	/* Another user, who may write the file but does not own it. */
	fflush(stdout);
	pid_t c = fork();
	if (c == 0) {
		if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534))
			_exit(3);
		said("a stranger sets none", ioctl(fd, FS_IOC_SETFLAGS, &none));
		int g = -1;
		said("a stranger reads them", ioctl(fd, FS_IOC_GETFLAGS, &g));
		fflush(stdout);
		_exit(0);
	}
	int st;
	waitpid(c, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		printf("stranger's child: status %#x\n", st);
	return 0;
}
