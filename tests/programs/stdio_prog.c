/* The C scenario: stdio and the libc calls that glibc implements with
 * internal system calls (fopen, freopen, fdopen, getline, scandir, nftw,
 * glob, realpath, mkstemp, remove).  Run with the working directory at the
 * scenario root; prints only file-system independent facts. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int walk_cb(const char *p, const struct stat *st, int type, struct FTW *f)
{
	(void)f;
	printf("nftw %s %s %lld\n", p, type == FTW_D ? "dir" : type == FTW_F ? "file" : type == FTW_SL ? "link" : "other",
	       S_ISDIR(st->st_mode) ? -1LL : (long long)st->st_size);
	return 0;
}

static int cmp_lines(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void)
{
	char buf[256], *line = NULL, *lines[64];
	size_t cap = 0;
	int n = 0;

	FILE *f = fopen("out.txt", "w");
	if (!f) { perror("fopen w"); return 1; }
	for (int i = 0; i < 100; i++) fprintf(f, "row %d %s\n", i, i % 2 ? "odd" : "even");
	fputs("last\n", f);
	printf("ftell after writes: %ld\n", ftell(f));
	fclose(f);

	f = fopen("out.txt", "r");
	fgets(buf, sizeof buf, f);
	printf("first: %s", buf);
	fseek(f, -5, SEEK_END);
	printf("tail: %s", fgets(buf, sizeof buf, f));
	rewind(f);
	int c = fgetc(f);
	ungetc(c, f);
	printf("fgetc/ungetc: %c%c\n", c, fgetc(f));
	struct stat st;
	fstat(fileno(f), &st);
	printf("fstat(fileno): size %lld mode %o\n", (long long)st.st_size, st.st_mode & 07777);
	fclose(f);

	f = fopen("out.txt", "a+");
	fputs("appended\n", f);
	fseek(f, 0, SEEK_SET);
	while (getline(&line, &cap, f) > 0) n++;
	printf("lines after a+: %d\n", n);
	fclose(f);

	f = fopen("out.txt", "wx");
	printf("fopen wx on existing: %s\n", f ? "opened" : strerror(errno));
	f = fopen("nodir/x", "r");
	printf("fopen missing: %s\n", f ? "opened" : strerror(errno));
	errno = 0;
	f = fopen("out.txt", "re");
	printf("fopen re: FD_CLOEXEC %d\n", f ? !!(fcntl(fileno(f), F_GETFD) & FD_CLOEXEC) : -1);
	if (f) fclose(f);

	int fd = open("fd.txt", O_CREAT | O_RDWR | O_TRUNC, 0644);
	f = fdopen(fd, "w+");
	fprintf(f, "via fdopen %d\n", 42);
	fflush(f);
	printf("fdopen size: %lld\n", (long long)lseek(fd, 0, SEEK_END));
	fclose(f);

	f = fopen("bin.dat", "wb");
	setvbuf(f, NULL, _IOFBF, 1000);
	for (int i = 0; i < 10000; i++) fwrite(&i, sizeof i, 1, f);
	fclose(f);
	f = fopen("bin.dat", "rb");
	int v[3];
	fseeko(f, 4000 * sizeof(int), SEEK_SET);
	size_t got = fread(v, sizeof(int), 3, f);
	printf("fread %zu: %d %d %d ftello %lld\n", got, v[0], v[1], v[2], (long long)ftello(f));
	fclose(f);

	fflush(stdout);
	int saved = dup(1);
	if (!freopen("stdout.txt", "w", stdout)) { perror("freopen"); return 1; }
	printf("this line went to stdout.txt\n");
	fflush(stdout);
	dup2(saved, 1); /* stdout (fd 1) is the original output again */
	close(saved);

	mkdir("tree", 0755);
	mkdir("tree/sub", 0700);
	fclose(fopen("tree/a.c", "w"));
	fclose(fopen("tree/b.h", "w"));
	fclose(fopen("tree/sub/c.c", "w"));
	symlink("a.c", "tree/link");
	rename("fd.txt", "tree/fd.txt");
	remove("bin.dat");

	struct dirent **names;
	int k = scandir("tree", &names, NULL, alphasort);
	printf("scandir %d:", k);
	for (int i = 0; i < k; i++) { printf(" %s", names[i]->d_name); free(names[i]); }
	printf("\n");
	free(names);

	DIR *d = opendir("tree");
	struct dirent *e;
	n = 0;
	while ((e = readdir(d)) && n < 64) lines[n++] = strdup(e->d_name);
	closedir(d);
	qsort(lines, n, sizeof *lines, cmp_lines);
	printf("readdir:");
	for (int i = 0; i < n; i++) { printf(" %s", lines[i]); free(lines[i]); }
	printf("\n");

	fflush(stdout);
	/* nftw visits in readdir order: sort its output. */
	FILE *p = popen("sort", "w");
	if (p) {
		int out = dup(1);
		dup2(fileno(p), 1);
		nftw("tree", walk_cb, 8, FTW_PHYS);
		fflush(stdout);
		dup2(out, 1);
		close(out);
		pclose(p);
	}

	glob_t g;
	if (glob("tree/*.[ch]", 0, NULL, &g) == 0) {
		for (size_t i = 0; i < g.gl_pathc; i++) printf("glob %s\n", g.gl_pathv[i]);
		globfree(&g);
	}

	char rp[PATH_MAX], cwd[PATH_MAX];
	getcwd(cwd, sizeof cwd);
	if (realpath("tree/sub/../link", rp))
		printf("realpath: %s\n", strncmp(rp, cwd, strlen(cwd)) == 0 ? rp + strlen(cwd) : rp);
	chdir("tree/sub");
	getcwd(rp, sizeof rp);
	printf("getcwd: %s\n", strncmp(rp, cwd, strlen(cwd)) == 0 ? rp + strlen(cwd) : rp);
	chdir(cwd);

	char tmpl[] = "tree/tmpXXXXXX";
	fd = mkstemp(tmpl);
	write(fd, "mkstemp\n", 8);
	fstat(fd, &st);
	printf("mkstemp: size %lld mode %o\n", (long long)st.st_size, st.st_mode & 0777);
	close(fd);
	unlink(tmpl);

	f = fopen("stdout.txt", "r");
	printf("stdout.txt: %s", fgets(buf, sizeof buf, f));
	fclose(f);
	free(line);
	return 0;
}
