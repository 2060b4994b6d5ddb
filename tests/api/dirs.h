/*
 * dirs.h — api_test's checks of directory listings: readdir cookies under
 * churn and a 50,000-entry directory.  Included once, by api_test.c
 * (api/common.h says why).
 */
#ifndef API_DIRS_H
#define API_DIRS_H

#include "api/common.h"

/* ---- directories -------------------------------------------------------- */

struct seen {
	char **names;
	int *count;
	size_t n;
};

static int find_name(char **names, size_t n, const char *name)
{
	/* names are "e<number>": index directly. */
	if (name[0] != 'e')
		return -1;
	char *end;
	long i = strtol(name + 1, &end, 10);
	if (*end || i < 0 || (size_t)i >= n || strcmp(names[i], name))
		return -1;
	return (int)i;
}

static void test_readdir_cookies(void)
{
	section = "readdir cookies";
	enum { N = 5000 };
	char p[300];
	EXPECT(kura_mkdir(fs, "/rd", 0755), 0);
	int made = 0;
	for (int i = 0; i < N; i++) {
		snprintf(p, sizeof p, "/rd/e%d", i);
		made += kura_mknod(fs, p, S_IFREG | 0644, 0) == 0;
	}
	CHECK(made == N, "created %d of %d entries", made, N);

	int err = 0;
	kura_dir *d = kura_opendir(fs, "/rd", &err);
	if (!CHECK(d != NULL, "opendir /rd: %s", en(err)))
		return;
	struct kura_dirent e;
	char (*first)[256] = calloc(N + 2, 256);
	int n = 0;
	while (n < N + 2 && kura_readdir(d, &e) == 1)
		memcpy(first[n++], e.name, 256);
	CHECK(n == N + 2, "readdir returned %d entries, expected %d", n, N + 2);
	CHECK(n >= 2 && !strcmp(first[0], ".") && !strcmp(first[1], ".."), "'.' and '..' are not first: '%s' '%s'",
	      first[0], first[1]);

	/* telldir/seekdir resume at the same place. */
	kura_rewinddir(d);
	for (int i = 0; i < 100; i++)
		kura_readdir(d, &e);
	long pos = kura_telldir(d);
	char after[50][256];
	int ok = 1;
	for (int i = 0; i < 50; i++) {
		ok &= kura_readdir(d, &e) == 1;
		memcpy(after[i], e.name, 256);
	}
	kura_seekdir(d, pos);
	for (int i = 0; i < 50; i++) {
		ok &= kura_readdir(d, &e) == 1;
		ok &= !strcmp(after[i], e.name);
	}
	CHECK(ok, "seekdir(telldir) does not resume at the same entry");
	CHECK(!strcmp(after[0], first[100]), "after rewinddir + 100 entries got '%s', first pass had '%s'", after[0],
	      first[100]);
	/* rewinddir shows the directory as it is now: not an entry removed
	 * after the stream read past it into its batch (dirstream.c). */
	kura_rewinddir(d);
	for (int i = 0; i < 3; i++)
		kura_readdir(d, &e);
	snprintf(p, sizeof p, "/rd/%s", first[3]);
	EXPECT(kura_unlink(fs, p), 0);
	kura_rewinddir(d);
	int gone_seen = 0, listed = 0;
	while (kura_readdir(d, &e) == 1) {
		gone_seen += !strcmp(e.name, first[3]);
		listed++;
	}
	CHECK(!gone_seen && listed == N + 1, "after an unlink and rewinddir: '%s' listed %d times, %d entries", first[3],
	      gone_seen, listed);
	EXPECT(kura_mknod(fs, p, S_IFREG | 0644, 0), 0);
	/* next_cookie resumes right after its entry. */
	kura_rewinddir(d);
	uint64_t cookie = 0;
	for (int i = 0; i < 300; i++) {
		kura_readdir(d, &e);
		if (i == 199)
			cookie = e.next_cookie;
	}
	kura_seekdir(d, (long)cookie);
	CHECK(kura_readdir(d, &e) == 1 && !strcmp(e.name, first[200]), "seekdir(next_cookie of #199) gave '%s', want '%s'",
	      e.name, first[200]);
	/* A cookie taken then used on a fresh handle works too. */
	kura_closedir(d);
	d = kura_opendir(fs, "/rd", &err);
	if (d) {
		kura_seekdir(d, (long)cookie);
		CHECK(kura_readdir(d, &e) == 1 && !strcmp(e.name, first[200]),
		      "cookie on a new handle gave '%s', want '%s'", e.name, first[200]);
		kura_closedir(d);
	}
	free(first);

	/* Stable entries e0..e4999 stay; v<k> entries come and go between
	 * readdir calls.  Every stable entry must appear exactly once and no
	 * name twice. */
	enum { V = 20000 };
	char **names = malloc(N * sizeof *names);
	int *cnt = calloc(N, sizeof *cnt);
	for (int i = 0; i < N; i++) {
		names[i] = malloc(16);
		snprintf(names[i], 16, "e%d", i);
	}
	int nextv = 0, oldestv = 0, vseen = 0, dup_v = 0, bad = 0;
	unsigned char *vcnt = calloc(V, 1);
	for (; nextv < 500; nextv++) {
		snprintf(p, sizeof p, "/rd/v%d", nextv);
		kura_mknod(fs, p, S_IFREG | 0644, 0);
	}
	d = kura_opendir(fs, "/rd", &err);
	if (!CHECK(d != NULL, "opendir /rd: %s", en(err)))
		return;
	int calls = 0, r;
	while ((r = kura_readdir(d, &e)) == 1) {
		if (!strcmp(e.name, ".") || !strcmp(e.name, ".."))
			continue;
		int i = find_name(names, N, e.name);
		if (i >= 0)
			cnt[i]++;
		else if (e.name[0] == 'v') {
			long v = strtol(e.name + 1, NULL, 10);
			if (v >= 0 && v < V && vcnt[v]++)
				dup_v++;
			vseen++;
		} else
			bad++;
		if (++calls % 7 == 0 && nextv + 4 < V) {
			/* Churn: two removals and four additions. */
			for (int k = 0; k < 2 && oldestv < nextv; k++, oldestv++) {
				snprintf(p, sizeof p, "/rd/v%d", oldestv);
				kura_unlink(fs, p);
			}
			for (int k = 0; k < 4; k++, nextv++) {
				snprintf(p, sizeof p, "/rd/v%d", nextv);
				kura_mknod(fs, p, S_IFREG | 0644, 0);
			}
		}
	}
	CHECK(r == 0, "readdir ended with %d (%s)", r, en(r));
	kura_closedir(d);
	int missing = 0, twice = 0, first_missing = -1, first_twice = -1;
	for (int i = 0; i < N; i++) {
		if (cnt[i] == 0 && missing++ == 0)
			first_missing = i;
		if (cnt[i] > 1 && twice++ == 0)
			first_twice = i;
	}
	CHECK(missing == 0, "%d stable entries skipped during churn (first: e%d)", missing, first_missing);
	CHECK(twice == 0, "%d stable entries returned twice during churn (first: e%d)", twice, first_twice);
	CHECK(dup_v == 0, "%d churned entries returned twice", dup_v);
	CHECK(bad == 0, "%d unknown names returned", bad);
	printf("  readdir churn: %d calls, %d churned names seen, %d added, %d removed\n", calls, vseen, nextv - 500,
	       oldestv);

	/* Clean up through a fresh listing: it must hold exactly what's left. */
	d = kura_opendir(fs, "/rd", &err);
	int left = 0;
	while (d && kura_readdir(d, &e) == 1)
		if (strcmp(e.name, ".") && strcmp(e.name, ".."))
			left++;
	if (d)
		kura_closedir(d);
	CHECK(left == N + (nextv - oldestv), "listing after churn has %d entries, expected %d", left,
	      N + (nextv - oldestv));
	for (int i = 0; i < N; i++) {
		snprintf(p, sizeof p, "/rd/e%d", i);
		kura_unlink(fs, p);
		free(names[i]);
	}
	for (int v = oldestv; v < nextv; v++) {
		snprintf(p, sizeof p, "/rd/v%d", v);
		kura_unlink(fs, p);
	}
	EXPECT(kura_rmdir(fs, "/rd"), 0);
	free(names);
	free(cnt);
	free(vcnt);
}

static void test_big_dir(void)
{
	section = "50k directory";
	enum { N = 50000 };
	char p[64];
	struct stat st;
	struct kura_info i0, i1;
	EXPECT(kura_mkdir(fs, "/big", 0755), 0);
	EXPECT(kura_info(fs, &i0), 0);
	int fails = 0, first = -1;
	long ferr = 0;
	for (int i = 0; i < N; i++) {
		snprintf(p, sizeof p, "/big/file-%07d", i);
		int fd = kura_open(fs, p, O_CREAT | O_EXCL | O_WRONLY, 0600);
		if (fd >= 0 && i % 1000 == 0)
			kura_write(fs, fd, p, strlen(p));
		if (fd < 0 && fails++ == 0)
			first = i, ferr = fd;
		if (fd >= 0)
			kura_close(fs, fd);
	}
	CHECK(fails == 0, "%d creates failed (first #%d: %s)", fails, first, en(ferr));
	EXPECT(kura_info(fs, &i1), 0);
	CHECK(i1.files == i0.files + N, "info.files %" PRIu64 " -> %" PRIu64 ", expected +%d", i0.files, i1.files, N);
	remount();
	fails = 0;
	for (int i = 0; i < N; i++) {
		snprintf(p, sizeof p, "/big/file-%07d", i);
		int r = kura_stat(fs, p, &st);
		if ((r != 0 || !S_ISREG(st.st_mode) || st.st_size != (i % 1000 ? 0 : (off_t)strlen(p))) && fails++ == 0)
			first = i, ferr = r;
	}
	CHECK(fails == 0, "%d stats wrong (first #%d: %s)", fails, first, en(ferr));
	EXPECT_ERR(kura_stat(fs, "/big/file-9999999", &st), ENOENT);
	int err = 0, n = 0;
	kura_dir *d = kura_opendir(fs, "/big", &err);
	struct kura_dirent e;
	while (d && kura_readdir(d, &e) == 1)
		n++;
	if (d)
		kura_closedir(d);
	CHECK(n == N + 2, "readdir of the big directory: %d entries, expected %d", n, N + 2);
	EXPECT_ERR(kura_rmdir(fs, "/big"), ENOTEMPTY);
	fails = 0;
	for (int i = 0; i < N; i++) {
		snprintf(p, sizeof p, "/big/file-%07d", i);
		int r = kura_unlink(fs, p);
		if (r != 0 && fails++ == 0)
			first = i, ferr = r;
	}
	CHECK(fails == 0, "%d unlinks failed (first #%d: %s)", fails, first, en(ferr));
	n = 0;
	d = kura_opendir(fs, "/big", &err);
	while (d && kura_readdir(d, &e) == 1)
		n++;
	if (d)
		kura_closedir(d);
	CHECK(n == 2, "emptied big directory lists %d entries", n);
	EXPECT(kura_rmdir(fs, "/big"), 0);
	EXPECT(kura_info(fs, &i1), 0);
	CHECK(i1.files == i0.files, "info.files %" PRIu64 " after deleting all, was %" PRIu64, i1.files, i0.files);
}

#endif
