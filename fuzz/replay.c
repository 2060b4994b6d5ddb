/*
 * replay.c — runs fuzz inputs through LLVMFuzzerTestOneInput without
 * libFuzzer, so the corpus is replayed (as a regression test) by builds that
 * have no clang.  Arguments are files or directories of inputs.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return 1;
	}
	static uint8_t buf[1 << 20];
	size_t n = fread(buf, 1, sizeof buf, f);
	fclose(f);
	/* A copy of exactly n bytes, so ASan sees reads past the input. */
	uint8_t *in = malloc(n ? n : 1);
	memcpy(in, buf, n);
	LLVMFuzzerTestOneInput(in, n);
	free(in);
	return 0;
}

int main(int argc, char **argv)
{
	int runs = 0, bad = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st)) {
			perror(argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			bad |= run_file(argv[i]);
			runs++;
			continue;
		}
		struct dirent **list;
		int n = scandir(argv[i], &list, NULL, alphasort);
		for (int k = 0; k < n; k++) {
			char p[4096];
			snprintf(p, sizeof p, "%s/%s", argv[i], list[k]->d_name);
			if (list[k]->d_name[0] != '.' && !stat(p, &st) && S_ISREG(st.st_mode)) {
				bad |= run_file(p);
				runs++;
			}
			free(list[k]);
		}
		free(n >= 0 ? list : NULL);
	}
	printf("replayed %d inputs\n", runs);
	return bad || runs == 0;
}
