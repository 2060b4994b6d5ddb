/*
 * ops.h — model_test's operations, each applied to both sides and compared,
 * with the descriptor slots they open, use and close, and their weights.
 * Included once, by model_test.c (model/common.h says why).
 */
#ifndef MODEL_OPS_H
#define MODEL_OPS_H

#include "model/common.h"
#include "model/compare.h"
#include "model/gen.h"

/* ---- descriptors ------------------------------------------------------- */

static int free_slot(void)
{
	for (int i = 0; i < NSLOTS; i++)
		if (!slots[i].used)
			return i;
	return -1;
}

static int pick_slot(void)
{
	int idx[NSLOTS], n = 0;
	for (int i = 0; i < NSLOTS; i++)
		if (slots[i].used)
			idx[n++] = i;
	return n ? idx[rn(n)] : -1;
}

static void close_slot(int i)
{
	long k = kura_close(fs, slots[i].kfd);
	long r = kres(close(slots[i].rfd));
	slots[i].used = 0;
	cmp_ret("close", k, r);
}

static void close_all(void)
{
	for (int i = 0; i < NSLOTS; i++)
		if (slots[i].used)
			close_slot(i);
}

static off_t ref_size(int rfd)
{
	struct stat st;
	if (fstat(rfd, &st) < 0)
		fail("reference fstat: %s", strerror(errno));
	return st.st_size;
}

/* ---- operations -------------------------------------------------------- */

static void op_open(void)
{
	int s = free_slot();
	if (s < 0) {
		s = pick_slot();
		close_slot(s);
	}
	char rel[2048], kp[2100], rp[2400];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	static const int acc[] = {O_RDONLY, O_WRONLY, O_RDWR, O_RDWR};
	int flags = acc[rn(4)];
	if (pct(50))
		flags |= O_CREAT;
	if ((flags & O_CREAT) && pct(25))
		flags |= O_EXCL;
	if (pct(12))
		flags |= O_TRUNC;
	if (pct(20))
		flags |= O_APPEND;
	if (pct(8))
		flags |= O_DIRECTORY;
	if (pct(8))
		flags |= O_NOFOLLOW;
	/* Opening a directory needs O_RDONLY and no O_CREAT; make that common
	 * enough that directory descriptors are exercised. */
	if (pct(5))
		flags = O_RDONLY | O_DIRECTORY;
	int mode = gen_mode(0);
	op_desc("open %s flags=%#o mode=%04o", kp, flags, mode);
	long k = kura_open(fs, kp, flags, (mode_t)mode);
	long r = kres(open(rp, flags | O_CLOEXEC, mode));
	if ((k >= 0) != (r >= 0)) {
		if (k >= 0)
			kura_close(fs, (int)k);
		if (r >= 0)
			close((int)r);
		fail("open: kura %ld (%s), reference %ld (%s)", k, en(k), r, en(r));
	}
	if (k < 0) {
		cmp_ret("open", k, r);
		return;
	}
	count("open", r);
	struct stat st;
	fstat((int)r, &st);
	slots[s] = (struct slot){.used = 1, .kfd = (int)k, .rfd = (int)r, .isdir = S_ISDIR(st.st_mode), .flags = flags};
	snprintf(slots[s].path, sizeof slots[s].path, "%.590s", kp);
	snprintf(cur_op + strlen(cur_op), sizeof oplog[0] - strlen(cur_op), " -> kfd %ld", k);
}

static void op_close(void)
{
	int s = pick_slot();
	if (s < 0)
		return;
	int kfd = slots[s].kfd, rfd = slots[s].rfd;
	op_desc("close kfd %d (%s)", kfd, slots[s].path);
	close_slot(s);
	/* The numbers are now dangling on both sides: EBADF expected.  A dup of
	 * the same description in another slot has a different number. */
	char b[4];
	long k = kura_read(fs, kfd, b, sizeof b);
	long r = kres(read(rfd, b, sizeof b));
	cmp_ret("read after close", k, r);
}

static void op_dup(void)
{
	int s = pick_slot(), d = free_slot();
	if (s < 0 || d < 0)
		return;
	op_desc("dup kfd %d (%s)", slots[s].kfd, slots[s].path);
	long k = kura_dup(fs, slots[s].kfd);
	long r = kres(dup(slots[s].rfd));
	if ((k >= 0) != (r >= 0)) {
		if (r >= 0)
			close((int)r);
		fail("dup: kura %ld (%s), reference %ld (%s)", k, en(k), r, en(r));
	}
	if (k < 0) {
		cmp_ret("dup", k, r);
		return;
	}
	slots[d] = slots[s];
	slots[d].kfd = (int)k;
	slots[d].rfd = (int)r;
	snprintf(cur_op + strlen(cur_op), sizeof oplog[0] - strlen(cur_op), " -> kfd %ld", k);
}

static void op_write(void)
{
	int s = pick_slot();
	if (s < 0)
		return;
	size_t n = gen_size();
	const unsigned char *src = data_buf + rn(sizeof data_buf - n);
	long k, r;
	if (pct(50)) {
		op_desc("write kfd %d (%s) len %zu", slots[s].kfd, slots[s].path, n);
		k = kura_write(fs, slots[s].kfd, src, n);
		r = kres(write(slots[s].rfd, src, n));
	} else {
		off_t off = gen_off(slots[s].isdir ? 0 : ref_size(slots[s].rfd));
		/* On an O_APPEND descriptor Linux's pwrite appends whatever the
		 * offset (pwrite(2), BUGS), where POSIX would honour it; kura sides
		 * with Linux, so this is compared like any other call. */
		op_desc("pwrite kfd %d (%s) len %zu off %lld%s", slots[s].kfd, slots[s].path, n, (long long)off,
			(slots[s].flags & O_APPEND) ? " (O_APPEND)" : "");
		k = kura_pwrite(fs, slots[s].kfd, src, n, off);
		r = kres(pwrite(slots[s].rfd, src, n, off));
	}
	cmp_ret("write", k, r);
}

static void op_read(void)
{
	int s = pick_slot();
	if (s < 0)
		return;
	size_t n = gen_size();
	long k, r;
	memset(kbuf, 0xa5, n);
	memset(rbuf, 0xa5, n);
	if (pct(50)) {
		op_desc("read kfd %d (%s) len %zu", slots[s].kfd, slots[s].path, n);
		k = kura_read(fs, slots[s].kfd, kbuf, n);
		r = kres(read(slots[s].rfd, rbuf, n));
	} else {
		off_t off = gen_off(slots[s].isdir ? 0 : ref_size(slots[s].rfd));
		op_desc("pread kfd %d (%s) len %zu off %lld", slots[s].kfd, slots[s].path, n, (long long)off);
		k = kura_pread(fs, slots[s].kfd, kbuf, n, off);
		r = kres(pread(slots[s].rfd, rbuf, n, off));
	}
	cmp_ret("read", k, r);
	if (k > 0 && memcmp(kbuf, rbuf, (size_t)k)) {
		size_t i = 0;
		while (kbuf[i] == rbuf[i])
			i++;
		fail("read: bytes differ at buffer offset %zu: kura 0x%02x, reference 0x%02x", i, kbuf[i], rbuf[i]);
	}
}

static void check_seek_data_hole(int s, int whence, off_t from, off_t kpos)
{
	/* Hole granularity differs (tmpfs pages vs kura blocks), so the positions
	 * may differ; check only what any correct answer satisfies, against the
	 * reference's bytes. */
	char pp[64];
	snprintf(pp, sizeof pp, "/proc/self/fd/%d", slots[s].rfd);
	int fd = open(pp, O_RDONLY);
	if (fd < 0)
		fail("reopen reference via %s: %s", pp, strerror(errno));
	off_t size = ref_size(fd);
	if (whence == SEEK_DATA) {
		if (kpos < from || kpos >= size)
			fail("SEEK_DATA from %lld returned %lld, outside [from, size=%lld)", (long long)from,
			     (long long)kpos, (long long)size);
		for (off_t o = from; o < kpos;) {
			size_t n = (size_t)(kpos - o < MAX_IO ? kpos - o : MAX_IO);
			ssize_t got = pread(fd, rbuf, n, o);
			if (got <= 0)
				break;
			for (ssize_t i = 0; i < got; i++)
				if (rbuf[i])
					fail("SEEK_DATA from %lld returned %lld, but byte %lld is nonzero", (long long)from,
					     (long long)kpos, (long long)(o + i));
			o += got;
		}
	} else {
		if (kpos < from || kpos > size)
			fail("SEEK_HOLE from %lld returned %lld, outside [from, size=%lld]", (long long)from,
			     (long long)kpos, (long long)size);
		unsigned char c = 0;
		if (kpos < size && pread(fd, &c, 1, kpos) == 1 && c)
			fail("SEEK_HOLE from %lld returned %lld, but that byte is nonzero", (long long)from,
			     (long long)kpos);
	}
	close(fd);
}

static void op_lseek(void)
{
	int s = pick_slot();
	if (s < 0)
		return;
	/* Directory offsets are opaque cookies with unrelated values on each side. */
	if (slots[s].isdir)
		return;
	off_t size = ref_size(slots[s].rfd);
	static const int wh[] = {SEEK_SET, SEEK_CUR, SEEK_END, SEEK_DATA, SEEK_HOLE};
	int w = wh[rn(5)];
	off_t off;
	switch (w) {
	case SEEK_SET:
		off = pct(5) ? -1 - (off_t)rn(10) : gen_off(size);
		break;
	case SEEK_CUR:
	case SEEK_END:
		off = (off_t)rn(10000) - 5000;
		break;
	default:
		off = pct(70) ? (off_t)rn((uint64_t)size + 1) : gen_off(size);
		break;
	}
	static const char *wn[] = {"SEEK_SET", "SEEK_CUR", "SEEK_END", "SEEK_DATA", "SEEK_HOLE"};
	op_desc("lseek kfd %d (%s) %lld %s", slots[s].kfd, slots[s].path, (long long)off, wn[w]);
	off_t from = lseek(slots[s].rfd, 0, SEEK_CUR);
	(void)from;
	long k = kura_lseek(fs, slots[s].kfd, off, w);
	long r = kres(lseek(slots[s].rfd, off, w));
	if (w == SEEK_DATA || w == SEEK_HOLE) {
		count("lseek data/hole", r);
		/* Preallocated blocks are data to kura but holes to tmpfs; both
		 * answers are allowed, so a reference ENXIO only obliges kura's
		 * answer to agree with the contents (checked below). */
		int prealloc_ok = w == SEEK_DATA && r == -ENXIO && k >= 0;
		if ((k < 0 || r < 0) && k != r && !prealloc_ok)
			fail("lseek %s: kura %ld (%s), reference %ld (%s)", wn[w], k, en(k), r, en(r));
		if (k >= 0) {
			check_seek_data_hole(s, w, off, k);
			/* Resynchronise the shared offset to the reference's. */
			long want = r >= 0 ? r : (long)from;
			long k2 = kura_lseek(fs, slots[s].kfd, want, SEEK_SET);
			cmp_ret("lseek resync", k2, want);
		}
		return;
	}
	cmp_ret("lseek", k, r);
}

static void op_truncate(void)
{
	int s = pick_slot();
	off_t cur = 0;
	int by_fd = s >= 0 && pct(50);
	if (by_fd && !slots[s].isdir)
		cur = ref_size(slots[s].rfd);
	off_t len;
	int x = (int)rn(100);
	if (x < 25)
		len = 0;
	else if (x < 50)
		len = (off_t)rn((uint64_t)cur + 1);
	else if (x < 65)
		len = cur + (off_t)rn(5000);
	else if (x < 80)
		len = (off_t)(rn(16) * 4096) + (off_t)rn(3) - 1;
	else if (x < 97)
		len = (off_t)rn(pressure ? 65536 : 4 << 20);
	else
		len = -1;
	if (len < -1)
		len = 0;
	long k, r;
	if (by_fd) {
		op_desc("ftruncate kfd %d (%s) %lld", slots[s].kfd, slots[s].path, (long long)len);
		k = kura_ftruncate(fs, slots[s].kfd, len);
		r = kres(ftruncate(slots[s].rfd, len));
	} else {
		char rel[2048], kp[2100], rp[2400];
		gen_path(rel, sizeof rel);
		kpath(kp, sizeof kp, rel);
		rpath(rp, sizeof rp, rel);
		op_desc("truncate %s %lld", kp, (long long)len);
		k = kura_truncate(fs, kp, len);
		r = kres(truncate(rp, len));
	}
	cmp_ret("truncate", k, r);
}

static void op_fallocate(void)
{
	int s = pick_slot();
	if (s < 0)
		return;
	/* tmpfs supports exactly these modes; FALLOC_FL_ZERO_RANGE has no kernel
	 * counterpart here and is covered by api_test. */
	static const int modes[] = {0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				    FALLOC_FL_PUNCH_HOLE};
	int mode = modes[pct(97) ? rn(3) : 3];
	off_t size = slots[s].isdir ? 0 : ref_size(slots[s].rfd);
	off_t off = pct(3) ? -4096 : pct(40) ? (off_t)rn((uint64_t)size + 1) : (off_t)rn(2 << 20);
	off_t len = pct(3) ? 0 : 1 + (off_t)rn(pressure ? 16384 : 1 << 20);
	op_desc("fallocate kfd %d (%s) mode %#x off %lld len %lld", slots[s].kfd, slots[s].path, mode,
		(long long)off, (long long)len);
	long k = kura_fallocate(fs, slots[s].kfd, mode, off, len);
	long r = kres(fallocate(slots[s].rfd, mode, off, len));
	cmp_ret("fallocate", k, r);
}

static void op_stat(void)
{
	struct stat ks, rs;
	long k, r;
	int s = pick_slot();
	off_t adj = 0;
	if (s >= 0 && pct(33)) {
		op_desc("fstat kfd %d (%s)", slots[s].kfd, slots[s].path);
		k = kura_fstat(fs, slots[s].kfd, &ks);
		r = kres(fstat(slots[s].rfd, &rs));
	} else {
		char rel[2048], kp[2100], rp[2400];
		gen_path(rel, sizeof rel);
		kpath(kp, sizeof kp, rel);
		rpath(rp, sizeof rp, rel);
		int l = pct(50);
		op_desc("%s %s", l ? "lstat" : "stat", kp);
		k = l ? kura_lstat(fs, kp, &ks) : kura_stat(fs, kp, &ks);
		r = kres(l ? lstat(rp, &rs) : stat(rp, &rs));
		if (l && r == 0 && S_ISLNK(rs.st_mode))
			adj = ref_link_adjust(rp);
	}
	cmp_ret("stat", k, r);
	if (k == 0)
		cmp_stat("stat", &ks, &rs, adj);
}

static void op_mkdir(void)
{
	char rel[2048], kp[2100], rp[2400];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	int mode = gen_mode(1);
	op_desc("mkdir %s %04o", kp, mode);
	cmp_ret("mkdir", kura_mkdir(fs, kp, (mode_t)mode), kres(mkdir(rp, (mode_t)mode)));
}

static void op_rmdir(void)
{
	char rel[2048], kp[2100], rp[2400];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	op_desc("rmdir %s", kp);
	cmp_ret("rmdir", kura_rmdir(fs, kp), kres(rmdir(rp)));
}

static void op_unlink(void)
{
	char rel[2048], kp[2100], rp[2400];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	op_desc("unlink %s", kp);
	cmp_ret("unlink", kura_unlink(fs, kp), kres(unlink(rp)));
}

static void op_link(void)
{
	char r1[2048], r2[2048], k1[2100], k2[2100], p1[2400], p2[2400];
	/* Prefer an existing regular file as the source, so that hard links
	 * actually form instead of mostly failing with ENOENT or EPERM. */
	for (int tries = 0; tries < 4; tries++) {
		gen_path(r1, sizeof r1);
		struct stat st;
		char rp[2400];
		rpath(rp, sizeof rp, r1);
		if (lstat(rp, &st) == 0 && S_ISREG(st.st_mode))
			break;
	}
	gen_path(r2, sizeof r2);
	kpath(k1, sizeof k1, r1);
	kpath(k2, sizeof k2, r2);
	rpath(p1, sizeof p1, r1);
	rpath(p2, sizeof p2, r2);
	op_desc("link %s %s", k1, k2);
	cmp_ret("link", kura_link(fs, k1, k2), kres(link(p1, p2)));
}

static void op_symlink(void)
{
	char rel[2048], kp[2100], rp[2400], t[1100], rt[1400];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	gen_target(t, sizeof t, rel);
	if (t[0] == '/')
		snprintf(rt, sizeof rt, "%s%s", ref_root, t);
	else
		snprintf(rt, sizeof rt, "%s", t);
	op_desc("symlink %.200s %s", t, kp);
	cmp_ret("symlink", kura_symlink(fs, t, kp), kres(symlink(rt, rp)));
}

static void op_readlink(void)
{
	char rel[2048], kp[2100], rp[2400], kt[8192], rt[8192];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	op_desc("readlink %s", kp);
	long k = kura_readlink(fs, kp, kt, sizeof kt - 1);
	long r = kres(readlink(rp, rt, sizeof rt - 1));
	if (k < 0 || r < 0) {
		cmp_ret("readlink", k, r);
		return;
	}
	count("readlink", r);
	kt[k] = rt[r] = 0;
	if (strcmp(kt, ref_target_to_model(rt)))
		fail("readlink: kura '%.200s', reference '%.200s'", kt, ref_target_to_model(rt));
}

static void op_rename(void)
{
	char r1[2048], r2[2048], k1[2100], k2[2100], p1[2400], p2[2400];
	gen_path(r1, sizeof r1);
	if (pct(8)) {
		/* Into its own subtree: EINVAL when r1 is a directory. */
		size_t l = strlen(r1);
		snprintf(r1 + l, sizeof r1 - l, "/%s", pct(50) ? dnames[rn(4)] : fnames[rn(8)]);
		memcpy(r2, r1, strlen(r1) + 1);
		*strrchr(r1, '/') = 0;
	} else {
		gen_path(r2, sizeof r2);
	}
	kpath(k1, sizeof k1, r1);
	kpath(k2, sizeof k2, r2);
	rpath(p1, sizeof p1, r1);
	rpath(p2, sizeof p2, r2);
	int x = (int)rn(100);
	unsigned flags = x < 70 ? 0 : x < 85 ? RENAME_NOREPLACE : RENAME_EXCHANGE;
	op_desc("rename %s %s flags %s", k1, k2,
		flags == 0 ? "0" : flags == RENAME_NOREPLACE ? "NOREPLACE" : "EXCHANGE");
	long k = kura_rename(fs, k1, k2, flags);
	long r = kres(renameat2(AT_FDCWD, p1, AT_FDCWD, p2, flags));
	cmp_ret("rename", k, r);
}

static void op_chmod(void)
{
	char rel[2048], kp[2100], rp[2400];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	int mode = gen_mode(0);
	op_desc("chmod %s %04o", kp, mode);
	cmp_ret("chmod", kura_chmod(fs, kp, (mode_t)mode), kres(chmod(rp, (mode_t)mode)));
}

static void op_access(void)
{
	char rel[2048], kp[2100], rp[2400];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	static const int modes[] = {F_OK, R_OK, W_OK, X_OK, R_OK | W_OK, R_OK | X_OK, R_OK | W_OK | X_OK};
	int m = modes[rn(7)];
	op_desc("access %s %d", kp, m);
	cmp_ret("access", kura_access(fs, kp, m), kres(access(rp, m)));
}

static void op_fsync(void)
{
	int s = pick_slot();
	if (s < 0)
		return;
	op_desc("fsync kfd %d (%s)", slots[s].kfd, slots[s].path);
	cmp_ret("fsync", kura_fsync(fs, slots[s].kfd), kres(fsync(slots[s].rfd)));
}

struct opdef {
	void (*fn)(void);
	int weight;
};
static const struct opdef ops[] = {
    {op_open, 12},    {op_close, 5},    {op_dup, 2},      {op_write, 12}, {op_read, 8},
    {op_lseek, 5},    {op_truncate, 4}, {op_fallocate, 3}, {op_stat, 6},  {op_mkdir, 7},
    {op_rmdir, 4},    {op_unlink, 5},   {op_link, 3},     {op_symlink, 3}, {op_readlink, 2},
    {op_rename, 7},   {op_chmod, 2},    {op_access, 2},   {op_fsync, 1},
};

#endif
