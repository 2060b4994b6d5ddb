/*
 * compare.h — model_test's checkpoint: the whole tree, every file's
 * contents, the hard-link structure and the open descriptors compared
 * between kura and the reference, and the pruning of entries too deep for
 * any op to reach.  Included once, by model_test.c (model/common.h says
 * why).
 */
#ifndef MODEL_COMPARE_H
#define MODEL_COMPARE_H

#include "model/common.h"
#include "model/gen.h"

/* ---- state comparison -------------------------------------------------- */

struct inopair {
	uint64_t k, r;
	char rel[64];
};
static struct inopair *pairs;
static size_t npairs, cappairs;
static uint64_t tree_bytes;

struct dent {
	char name[256];
	unsigned char type;
	uint64_t ino;
};

static int dent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dent *)a)->name, ((const struct dent *)b)->name);
}

static int pair_cmp_k(const void *a, const void *b)
{
	const struct inopair *x = a, *y = b;
	return x->k < y->k ? -1 : x->k > y->k ? 1 : (x->r < y->r ? -1 : x->r > y->r);
}

static int pair_cmp_r(const void *a, const void *b)
{
	const struct inopair *x = a, *y = b;
	return x->r < y->r ? -1 : x->r > y->r ? 1 : (x->k < y->k ? -1 : x->k > y->k);
}

static const char *type_name(mode_t m)
{
	return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : "other";
}

static size_t list_kura(const char *rel, struct dent **out)
{
	char p[4096];
	snprintf(p, sizeof p, "/%s", rel);
	int err = 0;
	kura_dir *d = kura_opendir(fs, p, &err);
	if (!d)
		fail("checkpoint: kura_opendir(%s) failed: %s", p, en(err ? err : -EIO));
	size_t n = 0, cap = 16;
	struct dent *v = malloc(cap * sizeof *v);
	struct kura_dirent e;
	int r, pos = 0;
	while ((r = kura_readdir(d, &e)) == 1) {
		/* "." and ".." are documented to come first. */
		if (pos == 0 || pos == 1) {
			const char *want = pos == 0 ? "." : "..";
			if (strcmp(e.name, want))
				fail("checkpoint: readdir(%s) entry %d is '%s', expected '%s'", p, pos, e.name, want);
			if (e.type != DT_DIR)
				fail("checkpoint: readdir(%s) '%s' has type %d", p, want, e.type);
			pos++;
			continue;
		}
		pos++;
		if (n == cap)
			v = realloc(v, (cap *= 2) * sizeof *v);
		snprintf(v[n].name, sizeof v[n].name, "%s", e.name);
		v[n].type = e.type;
		v[n].ino = e.ino;
		n++;
	}
	if (r < 0)
		fail("checkpoint: kura_readdir(%s) failed: %s", p, en(r));
	if (pos < 2)
		fail("checkpoint: readdir(%s) returned no '.'/'..'", p);
	kura_closedir(d);
	qsort(v, n, sizeof *v, dent_cmp);
	*out = v;
	return n;
}

static size_t list_ref(const char *rel, struct dent **out)
{
	char p[4096];
	rpath(p, sizeof p, rel);
	DIR *d = opendir(p);
	if (!d)
		fail("checkpoint: reference opendir(%s): %s", p, strerror(errno));
	size_t n = 0, cap = 16;
	struct dent *v = malloc(cap * sizeof *v);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (n == cap)
			v = realloc(v, (cap *= 2) * sizeof *v);
		snprintf(v[n].name, sizeof v[n].name, "%s", e->d_name);
		v[n].type = e->d_type;
		n++;
	}
	closedir(d);
	qsort(v, n, sizeof *v, dent_cmp);
	*out = v;
	return n;
}

static ssize_t kura_read_full(int fd, unsigned char *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = kura_read(fs, fd, b + got, n - got);
		if (r < 0)
			return r;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static ssize_t ref_read_full(int fd, unsigned char *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, b + got, n - got);
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static void cmp_contents(const char *rel)
{
	char kp[4200], rp[4400];
	snprintf(kp, sizeof kp, "/%s", rel);
	rpath(rp, sizeof rp, rel);
	int kfd = kura_open(fs, kp, O_RDONLY, 0);
	if (kfd < 0)
		fail("checkpoint: kura_open(%s, O_RDONLY) failed: %s", kp, en(kfd));
	int rfd = open(rp, O_RDONLY);
	if (rfd < 0)
		fail("checkpoint: reference open(%s): %s", rp, strerror(errno));
	uint64_t off = 0;
	for (;;) {
		ssize_t k = kura_read_full(kfd, kbuf, MAX_IO);
		ssize_t r = ref_read_full(rfd, rbuf, MAX_IO);
		if (k < 0)
			fail("checkpoint: kura_read(%s) at %" PRIu64 " failed: %s", kp, off, en(k));
		if (k != r)
			fail("checkpoint: %s: kura read %zd bytes at %" PRIu64 ", reference %zd", kp, k, off, r);
		if (memcmp(kbuf, rbuf, (size_t)k)) {
			size_t i = 0;
			while (kbuf[i] == rbuf[i])
				i++;
			fail("checkpoint: %s: contents differ at byte %" PRIu64 ": kura 0x%02x, reference 0x%02x",
			     kp, off + i, kbuf[i], rbuf[i]);
		}
		if (k == 0)
			break;
		off += (uint64_t)k;
	}
	kura_close(fs, kfd);
	close(rfd);
}

static void cmp_stat(const char *what, const struct stat *ks, const struct stat *rs, off_t lnk_adjust)
{
	if ((ks->st_mode & S_IFMT) != (rs->st_mode & S_IFMT))
		fail("%s: kura type %s, reference %s", what, type_name(ks->st_mode), type_name(rs->st_mode));
	if ((ks->st_mode & 07777) != (rs->st_mode & 07777) && !S_ISLNK(rs->st_mode))
		fail("%s: kura mode %04o, reference %04o", what, ks->st_mode & 07777, rs->st_mode & 07777);
	if (S_ISREG(rs->st_mode) && ks->st_size != rs->st_size)
		fail("%s: kura size %lld, reference %lld", what, (long long)ks->st_size, (long long)rs->st_size);
	if (S_ISLNK(rs->st_mode) && ks->st_size != rs->st_size - lnk_adjust)
		fail("%s: symlink size: kura %lld, reference %lld", what, (long long)ks->st_size,
		     (long long)(rs->st_size - lnk_adjust));
	if ((!S_ISDIR(rs->st_mode) || cmp_dir_nlink) && ks->st_nlink != rs->st_nlink)
		fail("%s: kura nlink %lu, reference %lu%s", what, (unsigned long)ks->st_nlink,
		     (unsigned long)rs->st_nlink,
		     S_ISDIR(rs->st_mode) ? " (directory; KURA_MODEL_DIR_NLINK=0 skips this)" : "");
}

/* Reference symlink size counts the ref_root prefix of absolute targets. */
static off_t ref_link_adjust(const char *rp)
{
	char t[8192];
	ssize_t n = readlink(rp, t, sizeof t - 1);
	if (n < 0)
		return 0;
	t[n] = 0;
	return ref_target_to_model(t) != t ? (off_t)ref_root_len : 0;
}

static void cmp_tree(const char *rel, int depth)
{
	struct dent *kv, *rv;
	size_t kn = list_kura(rel, &kv), rn_ = list_ref(rel, &rv);
	for (size_t i = 0, j = 0; i < kn || j < rn_;) {
		int c = i == kn ? 1 : j == rn_ ? -1 : strcmp(kv[i].name, rv[j].name);
		if (c < 0)
			fail("checkpoint: '/%s%s%.80s' exists in kura only", rel, *rel ? "/" : "", kv[i].name);
		if (c > 0)
			fail("checkpoint: '/%s%s%.80s' exists in the reference only", rel, *rel ? "/" : "", rv[j].name);
		if (i + 1 < kn && !strcmp(kv[i].name, kv[i + 1].name))
			fail("checkpoint: kura readdir(/%s) returns '%.80s' twice", rel, kv[i].name);
		i++, j++;
	}
	for (size_t i = 0; i < kn; i++) {
		char crel[4096], kp[4200], rp[4400];
		snprintf(crel, sizeof crel, "%s%s%s", rel, *rel ? "/" : "", kv[i].name);
		snprintf(kp, sizeof kp, "/%s", crel);
		rpath(rp, sizeof rp, crel);
		struct stat ks, rs;
		int k = kura_lstat(fs, kp, &ks);
		if (k < 0)
			fail("checkpoint: kura_lstat(%s) of a listed entry failed: %s", kp, en(k));
		if (lstat(rp, &rs) < 0)
			fail("checkpoint: reference lstat(%s): %s", rp, strerror(errno));
		char what[4300];
		snprintf(what, sizeof what, "checkpoint: lstat %s", kp);
		cmp_stat(what, &ks, &rs, S_ISLNK(rs.st_mode) ? ref_link_adjust(rp) : 0);
		unsigned char want = S_ISREG(ks.st_mode) ? DT_REG : S_ISDIR(ks.st_mode) ? DT_DIR : DT_LNK;
		if (kv[i].type != want)
			fail("checkpoint: readdir type of %s is %d, lstat says %s", kp, kv[i].type, type_name(ks.st_mode));
		if (kv[i].ino != (uint64_t)ks.st_ino)
			fail("checkpoint: readdir ino of %s is %" PRIu64 ", lstat says %" PRIu64, kp, kv[i].ino,
			     (uint64_t)ks.st_ino);
		if (S_ISREG(rs.st_mode)) {
			tree_bytes += (uint64_t)rs.st_size;
			cmp_contents(crel);
			if (npairs == cappairs)
				pairs = realloc(pairs, (cappairs = cappairs ? 2 * cappairs : 256) * sizeof *pairs);
			pairs[npairs].k = ks.st_ino;
			pairs[npairs].r = rs.st_ino;
			snprintf(pairs[npairs].rel, sizeof pairs[npairs].rel, "%.63s", crel);
			npairs++;
		} else if (S_ISLNK(rs.st_mode)) {
			char kt[8192], rt[8192];
			ssize_t kl = kura_readlink(fs, kp, kt, sizeof kt - 1);
			ssize_t rl = readlink(rp, rt, sizeof rt - 1);
			if (kl < 0 || rl < 0)
				fail("checkpoint: readlink(%s): kura %s, reference %s", kp, en(kl), rl < 0 ? strerror(errno) : "ok");
			kt[kl] = rt[rl] = 0;
			if (strcmp(kt, ref_target_to_model(rt)))
				fail("checkpoint: symlink %s: kura target '%.100s', reference '%.100s'", kp, kt,
				     ref_target_to_model(rt));
		} else if (S_ISDIR(rs.st_mode)) {
			cmp_tree(crel, depth + 1);
		}
	}
	free(kv);
	free(rv);
}

/* Remove a subtree on both sides, comparing every step. */
static void remove_both(const char *rel)
{
	char kp[4200], rp[4400];
	snprintf(kp, sizeof kp, "/%s", rel);
	rpath(rp, sizeof rp, rel);
	struct stat rs;
	if (lstat(rp, &rs) < 0)
		fail("prune: reference lstat(%s): %s", rp, strerror(errno));
	if (S_ISDIR(rs.st_mode)) {
		struct dent *rv;
		size_t n = list_ref(rel, &rv);
		for (size_t i = 0; i < n; i++) {
			char crel[4096];
			snprintf(crel, sizeof crel, "%s/%s", rel, rv[i].name);
			remove_both(crel);
		}
		free(rv);
		cmp_ret("prune: rmdir", kura_rmdir(fs, kp), kres(rmdir(rp)));
	} else {
		cmp_ret("prune: unlink", kura_unlink(fs, kp), kres(unlink(rp)));
	}
}

/*
 * Renames can nest directories arbitrarily deep, but generated paths reach
 * only four levels, so deeper entries would pile up out of reach of every
 * op (and out of reach of unlink when space runs short).  Entries at depth 5
 * and below are removed on both sides at each checkpoint.
 */
static void prune(const char *rel, int depth)
{
	struct dent *rv;
	size_t n = list_ref(rel, &rv);
	for (size_t i = 0; i < n; i++) {
		char crel[4096];
		snprintf(crel, sizeof crel, "%s%s%s", rel, *rel ? "/" : "", rv[i].name);
		if (depth + 1 >= 5)
			remove_both(crel);
		else if (rv[i].type == DT_DIR)
			prune(crel, depth + 1);
	}
	free(rv);
}

static void cmp_slots(void)
{
	for (int i = 0; i < NSLOTS; i++) {
		if (!slots[i].used)
			continue;
		struct stat ks, rs;
		int k = kura_fstat(fs, slots[i].kfd, &ks);
		if (k < 0)
			fail("checkpoint: kura_fstat(fd %d, '%s') failed: %s", slots[i].kfd, slots[i].path, en(k));
		if (fstat(slots[i].rfd, &rs) < 0)
			fail("checkpoint: reference fstat: %s", strerror(errno));
		char what[800];
		snprintf(what, sizeof what, "checkpoint: fstat of open fd %d (opened as %s)", slots[i].kfd, slots[i].path);
		cmp_stat(what, &ks, &rs, 0);
		if (S_ISREG(rs.st_mode)) {
			off_t ko = kura_lseek(fs, slots[i].kfd, 0, SEEK_CUR);
			off_t ro = lseek(slots[i].rfd, 0, SEEK_CUR);
			if (ko != ro)
				fail("checkpoint: offset of fd %d (%s): kura %lld, reference %lld", slots[i].kfd,
				     slots[i].path, (long long)ko, (long long)ro);
		}
	}
}

static void check_state(void)
{
	npairs = 0;
	tree_bytes = 0;
	trailing_slash = 0;
	struct stat ks, rs;
	int k = kura_stat(fs, "/", &ks);
	if (k < 0)
		fail("checkpoint: kura_stat(/) failed: %s", en(k));
	if (stat(ref_root, &rs) < 0)
		fail("checkpoint: reference stat(root): %s", strerror(errno));
	cmp_stat("checkpoint: stat /", &ks, &rs, 0);
	cmp_tree("", 0);
	cmp_slots();
	/* Two names share an inode in kura iff they share one in the reference:
	 * the ino mapping must be a bijection on the names seen. */
	if (npairs > 1) /* qsort of an empty (NULL) array is undefined */
		qsort(pairs, npairs, sizeof *pairs, pair_cmp_k);
	for (size_t i = 1; i < npairs; i++)
		if (pairs[i].k == pairs[i - 1].k && pairs[i].r != pairs[i - 1].r)
			fail("checkpoint: /%s and /%s are one inode in kura, two in the reference", pairs[i - 1].rel,
			     pairs[i].rel);
	if (npairs > 1)
		qsort(pairs, npairs, sizeof *pairs, pair_cmp_r);
	for (size_t i = 1; i < npairs; i++)
		if (pairs[i].r == pairs[i - 1].r && pairs[i].k != pairs[i - 1].k)
			fail("checkpoint: /%s and /%s are one inode in the reference, two in kura", pairs[i - 1].rel,
			     pairs[i].rel);
	pressure = tree_bytes > PRESSURE_BYTES;
	ncompares++;
	prune("", 0);
}

#endif
