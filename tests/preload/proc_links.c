/* This process's links in /proc with its working directory and a file in
 * the directory argv[1]: test_preload.py compares the output on tmpfs and
 * on kura, where the kernel's own links would name the kernel's working
 * directory, not the virtual one. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void show(const char *link)
{
	char buf[PATH_MAX];
	ssize_t n = readlink(link, buf, sizeof buf - 1);
	buf[n > 0 ? n : 0] = 0;
	char shown[64];
	snprintf(shown, sizeof shown, "%s", link);
	if (strncmp(link, "/proc/", 6) == 0 && link[6] >= '1' && link[6] <= '9')
		snprintf(shown, sizeof shown, "/proc/PID%s", strchr(link + 6, '/'));
	printf("%s -> %s\n", shown, n < 0 ? "(error)" : buf);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: proc_links DIR\n");
		return 2;
	}
	if (chdir(argv[1]) < 0) {
		perror(argv[1]);
		return 1;
	}
	int fd = open("f", O_RDWR | O_CREAT, 0600);
	char link[64];
	show("/proc/self/cwd");
	show("/proc/thread-self/cwd");
	snprintf(link, sizeof link, "/proc/%d/cwd", (int)getpid());
	show(link);
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	show(link);
	snprintf(link, sizeof link, "/dev/fd/%d", fd);
	show(link);
	unlink("f");
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	show(link);
	if (chdir("/") == 0)
		show("/proc/self/cwd");
	return 0;
}
