/* Threads with small stacks, as some programs create them, doing file
 * calls in the directory argv[1]: the layer's static TLS (which glibc puts
 * on each thread's stack) and its stack use must leave them room.
 * test_preload.py compares the output on tmpfs and on kura. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/sendfile.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *dir;

static void *file_calls(void *arg)
{
	size_t size = *(size_t *)arg;
	char path[256];
	snprintf(path, sizeof path, "%s/t%zu", dir, size);
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	struct stat st;
	char back[8] = "";
	int null = open("/dev/null", O_WRONLY);
	off_t from = 0;
	int ok = fd >= 0 && write(fd, "stack", 5) == 5 && pread(fd, back, 5, 0) == 5 && fstat(fd, &st) == 0 &&
		 st.st_size == 5 && !strcmp(back, "stack") && sendfile(null, fd, &from, 5) == 5 && close(fd) == 0 &&
		 rename(path, path) == 0 && unlink(path) == 0;
	close(null);
	return ok ? "ok" : "failed";
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: small_stacks DIR\n");
		return 2;
	}
	dir = argv[1];
	size_t sizes[] = { 65536, 131072, 262144 };
	for (int i = 0; i < 3; i++) {
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		int r = pthread_attr_setstacksize(&attr, sizes[i]);
		pthread_t t;
		void *res = "not run";
		if (!r)
			r = pthread_create(&t, &attr, file_calls, &sizes[i]);
		if (!r)
			pthread_join(t, &res);
		printf("stack %zu: create %s, file calls %s\n", sizes[i], r ? strerror(r) : "ok", (char *)res);
		pthread_attr_destroy(&attr);
	}
	return 0;
}
