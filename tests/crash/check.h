/*
 * check.h — the explorer's checks of one crash image: recovery with the
 * engine's writes undone afterwards, fsck, the state against the reference,
 * usability, crashes during recovery; and which images a crash point makes
 * (explore.h says what the explorer does).
 */
#ifndef CRASH_CHECK_H
#define CRASH_CHECK_H

#include "crash/ex.h"

/* ---- the engine's writes during a check ----------------------------------- */

static void ex_undo_tracer(void *ctx, enum media_event ev, uint64_t off, const void *data, uint64_t len)
{
	struct ex *x = ctx;
	if (ev == MEDIA_STORE || ev == MEDIA_NT || ev == MEDIA_DISK_WRITE) {
		undo_save(&x->u, off, len);
	} else if (ev == MEDIA_STORE64) {
		undo_save(&x->u, off, 8);
	}
	if (x->rtr_on)
		trace_add(&x->rtr, ev, off, data, len);
}

/* A file back end mount's stores go to its working copy, not the pool. */
static void ex_undo_tracer_disk(void *ctx, enum media_event ev, uint64_t off, const void *data, uint64_t len)
{
	if (ev != MEDIA_STORE && ev != MEDIA_STORE64 && ev != MEDIA_NT)
		ex_undo_tracer(ctx, ev, off, data, len);
}

static void ex_record_tracer(void *ctx, enum media_event ev, uint64_t off, const void *data, uint64_t len)
{
	trace_add(ctx, ev, off, data, len);
}

struct fsck_first {
	char line[400];
	int n;
};

static void fsck_note(void *ctx, const char *line)
{
	struct fsck_first *f = ctx;
	if (!strncmp(line, "note:", 5))
		return;
	if (!f->n++)
		snprintf(f->line, sizeof f->line, "%s", line);
}

static int ex_fsck(struct ex *x, char *why, size_t len)
{
	struct fsck_first f = { .n = 0 };
	int r = kura_fsck(x->scratch_path, 0, fsck_note, &f);
	if (r != 0)
		snprintf(why, len, "fsck: %d problems, first: %s", r, f.line);
	return r;
}

/* Mounts the scratch pool the way kura_mount does, but with the tracer in
 * place before recovery, so recovery's writes are undoable (and, with
 * record, traced for crashing recovery itself).  Returns the dump hash, or 0
 * with why filled. */
/* The file model: a machine crash lost the working copy, so recovery is an
 * ordinary first mount (journal replay, a new copy), traced from its start;
 * the unmount's checkpoint belongs to recovery too. */
static uint64_t ex_recover_dump_file(struct ex *x, struct sbuf *dump, int record, int *nrec, char *why,
				     size_t len)
{
	if (record) {
		trace_reset(&x->rtr);
		x->rtr_on = 1;
	}
	media_mount_tracer = (struct media_tracer){ .event = ex_undo_tracer_disk, .ctx = x };
	struct kura_mount_opts o = { .persist = KURA_PERSIST_FILE, .sync = KURA_SYNC_OP };
	int err = 0;
	kura_fs *fs = kura_mount(x->scratch_path, &o, &err);
	uint64_t h = 0;
	if (!fs) {
		snprintf(why, len, "mount failed (%s): %s", strerror(-err), kura_last_error());
	} else {
		if (nrec)
			*nrec = journal_replayed;
		h = dump_fs(fs, dump);
		if (!h)
			snprintf(why, len, "recovered tree unreadable: %.300s", dump->p);
		kura_unmount(fs);
	}
	media_mount_tracer = (struct media_tracer){ 0 };
	x->rtr_on = 0;
	return h;
}

static uint64_t ex_recover_dump(struct ex *x, struct sbuf *dump, int record, int *nrec, char *why, size_t len)
{
	if (x->cfg.file)
		return ex_recover_dump_file(x, dump, record, nrec, why, len);
	/* Recovery runs on the modelled back end: its own crashes are explored
	 * (the memory back end's log records assume a store order that the
	 * line model does not keep). */
	struct kura_mount_opts o = { .persist = KURA_PERSIST_PMEM,
				     .no_recover = 1 };
	int err = 0;
	kura_fs *fs = kura_mount(x->scratch_path, &o, &err);
	if (!fs) {
		snprintf(why, len, "mount failed (%s): %s", strerror(-err), kura_last_error());
		return 0;
	}
	fs->m.tracer.event = ex_undo_tracer;
	fs->m.tracer.ctx = x;
	if (record) {
		trace_reset(&x->rtr);
		x->rtr_on = 1;
	}
	/* What fs_open does after mapping when recovery is on. */
	fs_lock_for_read(fs);
	lock_write_begin(&fs->lk);
	int n = tx_recover(&fs->tx);
	lock_write_end(&fs->lk);
	fs_unlock_for_read(fs);
	if (nrec)
		*nrec = n;
	if (fs_state(fs)->orphans)
		orphan_reclaim(fs);
	x->rtr_on = 0;
	uint64_t h = dump_fs(fs, dump);
	if (!h)
		snprintf(why, len, "recovered tree unreadable: %.300s", dump->p);
	kura_unmount(fs);
	return h;
}

static int rm_tree(kura_fs *fs, const char *dir)
{
	int err = 0;
	kura_dir *d = kura_opendir(fs, dir, &err);
	if (!d)
		return err;
	char names[64][300];
	int n = 0;
	struct kura_dirent e;
	while (n < 64 && kura_readdir(d, &e) == 1)
		if (strcmp(e.name, ".") && strcmp(e.name, ".."))
			snprintf(names[n++], sizeof names[0], "%s/%s", strcmp(dir, "/") ? dir : "", e.name);
	kura_closedir(d);
	for (int i = 0; i < n && !err; i++) {
		struct stat st;
		err = kura_lstat(fs, names[i], &st);
		if (!err && S_ISDIR(st.st_mode)) {
			err = rm_tree(fs, names[i]);
			if (!err)
				err = kura_rmdir(fs, names[i]);
		} else if (!err) {
			err = kura_unlink(fs, names[i]);
		}
		if (err)
			return err;
	}
	return n == 64 ? rm_tree(fs, dir) : 0;
}

/* Inode numbers in use, so that what the usability pass creates can be
 * checked to be new: the dump names link classes, not numbers, so a
 * recovered allocator handing out a live inode again could hide there. */
struct ino_set {
	uint64_t v[512];
	int n;
};

static int ino_fresh(struct ino_set *s, uint64_t ino)
{
	for (int i = 0; i < s->n; i++)
		if (s->v[i] == ino)
			return 0;
	if (s->n < 512)
		s->v[s->n++] = ino;
	return 1;
}

/* Create, write, read back, rename and mkdir in every directory, then
 * delete everything.  Returns 0 or writes what failed into why. */
static int ex_usability(kura_fs *fs, const char *dump, char *why, size_t len)
{
	static char buf[5000], back[5000];
	wk_pattern(buf, sizeof buf, 99, 0);
	struct ino_set used = { .n = 0 };
	for (const char *l = dump; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		char path[600];
		struct stat st;
		if (sscanf(l, "%599s", path) == 1 && !kura_lstat(fs, path, &st))
			ino_fresh(&used, st.st_ino);
	}
	const char *l = dump;
	while (l && *l) {
		char path[600];
		unsigned mode = 0;
		if (sscanf(l, "%599s %o", path, &mode) == 2 && S_ISDIR(mode)) {
			char f[700], g[700], sub[700];
			snprintf(f, sizeof f, "%s/u.f", strcmp(path, "/") ? path : "");
			snprintf(g, sizeof g, "%s/u.g", strcmp(path, "/") ? path : "");
			snprintf(sub, sizeof sub, "%s/u.d", strcmp(path, "/") ? path : "");
			int fd = kura_open(fs, f, O_CREAT | O_EXCL | O_RDWR, 0644);
			if (fd < 0) {
				snprintf(why, len, "usability: create %s: %s", f, strerror(-fd));
				return -1;
			}
			struct stat st;
			int fresh = !kura_fstat(fs, fd, &st) && ino_fresh(&used, st.st_ino);
			ssize_t w = kura_pwrite(fs, fd, buf, sizeof buf, 0);
			ssize_t r = kura_pread(fs, fd, back, sizeof back, 0);
			kura_close(fs, fd);
			if (!fresh) {
				snprintf(why, len, "usability: created %s with inode %llu, already in use", f,
					 (unsigned long long)st.st_ino);
				return -1;
			}
			if (w != (ssize_t)sizeof buf || r != (ssize_t)sizeof back || memcmp(buf, back, sizeof buf)) {
				snprintf(why, len, "usability: write/read back %s: %zd/%zd", f, w, r);
				return -1;
			}
			int e = kura_rename(fs, f, g, 0);
			if (!e)
				e = kura_mkdir(fs, sub, 0755);
			if (e) {
				snprintf(why, len, "usability: rename/mkdir in %s: %s", path, strerror(-e));
				return -1;
			}
			if (!kura_lstat(fs, sub, &st) && !ino_fresh(&used, st.st_ino)) {
				snprintf(why, len, "usability: mkdir %s got inode %llu, already in use", sub,
					 (unsigned long long)st.st_ino);
				return -1;
			}
		}
		l = strchr(l, '\n');
		if (l)
			l++;
	}
	int e = rm_tree(fs, "/");
	if (e) {
		snprintf(why, len, "usability: deleting everything: %s", strerror(-e));
		return -1;
	}
	return 0;
}

static int ex_match(struct ex *x, uint64_t h, int lo, int hi)
{
	for (int j = lo; j <= hi; j++) {
		if (x->H[j] == h)
			return 1;
		for (int k = 0; j > lo && k < x->nmix[j]; k++)
			if (x->Hmix[j][k] == h)
				return 1;
	}
	return 0;
}

/* Crash recovery itself: replay what recovery wrote, as its own trace, and
 * crash it at each of its fences. */
static void ex_recovery_crashes(struct ex *x, uint64_t want, uint64_t image)
{
	if (x->cfg.recov_lines < 0 || !x->rtr.n)
		return;
	struct trace rt = x->rtr; /* checks below must not touch it */
	memset(&x->rtr, 0, sizeof x->rtr);
	size_t mark = x->u.n;
	struct pmodel m = { 0 };
	pm_init(&m, x->cfg.file, x->S, POOL_SIZE, NULL, &x->u, 2);
	m.h = image ^ 0x5245434f56ull; /* same image hash scheme, its own key space */
	char why[600];
	for (size_t i = 0; i <= rt.n && !x->stop; i++) {
		struct tev *e = i < rt.n ? &rt.e[i] : NULL;
		if (e && !pm_event(&m, &rt, e))
			continue;
		/* none, all, then each unit alone */
		long nimg = 2 + (m.npl < (size_t)x->cfg.recov_lines ? (long)m.npl : x->cfg.recov_lines);
		for (long k = 0; k < nimg && m.npl; k++) {
			size_t m2 = x->u.n;
			uint64_t key = m.h;
			for (size_t l = 0; l < m.npl; l++) {
				uint32_t pre = k == 0 ? 0 : k == 1 ? m.pl[l].n : (l == (size_t)(k - 2) ? m.pl[l].n : 0);
				if (!pre)
					continue;
				uint8_t img[UNIT_MAX];
				uint64_t at = m.pl[l].line * m.unit;
				pm_line_image(&m, l, pre, img);
				key ^= line_hash(&m, m.pl[l].line, x->S + at) ^ line_hash(&m, m.pl[l].line, img);
				undo_save(&x->u, at, m.unit);
				memcpy(x->S + at, img, m.unit);
			}
			if (!kset_add(&x->seen, key)) {
				undo_rollback(&x->u, m2);
				continue;
			}
			x->st->recov_checked++;
			uint64_t h = ex_recover_dump(x, &x->dbuf2, 0, NULL, why, sizeof why);
			if (!h)
				ex_violation(x, "crash during recovery (its fence %zu, image %ld): %s", i, k, why);
			else if (h != want)
				ex_violation(x, "crash during recovery (its fence %zu, image %ld) recovers to another state",
					     i, k);
			else if (ex_fsck(x, why, sizeof why))
				ex_violation(x, "crash during recovery (its fence %zu, image %ld): %s", i, k, why);
			undo_rollback(&x->u, m2);
		}
		if (e)
			pm_fence(&m);
	}
	undo_rollback(&x->u, mark);
	pm_free(&m);
	x->rtr = rt;
}

/* Checks the image now laid on the scratch pool; lo..hi is the window of
 * reference states it may show. */
static void ex_check(struct ex *x, int lo, int hi, uint64_t image)
{
	char why[1200];
	size_t mark = x->u.n;
	int nrec = 0;
	x->st->checked++;
	x->st->group_checked += x->wl_group;
	uint64_t h = ex_recover_dump(x, &x->dbuf, 1, &nrec, why, sizeof why);
	if (!h) {
		ex_violation(x, "%s", why);
		goto out;
	}
	if (!ex_match(x, h, lo, hi)) {
		char d[600];
		dump_diff(x->dbuf.p, x->Hdump[hi], d, sizeof d);
		ex_violation(x, "recovered state is none of the states after entries %d..%d; vs %d: %s", lo, hi, hi, d);
		goto out;
	}
	if (ex_fsck(x, why, sizeof why)) {
		ex_violation(x, "after recovery, %s", why);
		goto out;
	}
	if (x->cfg.usability) {
		int err = 0;
		/* Traced from its start: a pool left by the file back end turns its
		 * log region back into an undo log at this mount. */
		media_mount_tracer = (struct media_tracer){ .event = ex_undo_tracer, .ctx = x };
		kura_fs *fs = kura_mount(x->scratch_path, &(struct kura_mount_opts){ .persist = KURA_PERSIST_MEMORY },
					 &err);
		media_mount_tracer = (struct media_tracer){ 0 };
		if (!fs) {
			ex_violation(x, "second mount failed: %s", kura_last_error());
			goto out;
		}
		fs->m.tracer.event = ex_undo_tracer;
		fs->m.tracer.ctx = x;
		uint64_t h2 = dump_fs(fs, &x->dbuf2);
		int bad = h2 != h;
		if (!bad && ex_usability(fs, x->dbuf2.p, why, sizeof why))
			bad = 2;
		kura_unmount(fs);
		if (bad == 1) {
			ex_violation(x, "recovery is not idempotent: a second mount shows another state");
			goto out;
		}
		if (bad == 2) {
			ex_violation(x, "%s", why);
			goto out;
		}
		if (ex_fsck(x, why, sizeof why)) {
			ex_violation(x, "after the usability pass, %s", why);
			goto out;
		}
	}
	undo_rollback(&x->u, mark);
	if (nrec > 0)
		ex_recovery_crashes(x, h, image);
out:
	undo_rollback(&x->u, mark);
}

/* Lays the image chosen by p (a prefix per pending line) on the scratch
 * pool and checks it, unless the same image was checked for this window. */
static void ex_try(struct ex *x, const uint32_t *p, int lo, int hi)
{
	x->st->generated++;
	uint64_t h = x->pm.h ^ mix64((uint64_t)lo * 1000003u + (uint64_t)hi);
	size_t mark = x->u.n;
	for (size_t i = 0; i < x->pm.npl; i++) {
		if (!p[i])
			continue;
		uint64_t l = x->pm.pl[i].line, unit = x->pm.unit;
		pm_line_image(&x->pm, i, p[i], x->line_buf);
		if (!memcmp(x->line_buf, x->D + l * unit, unit))
			continue;
		h ^= line_hash(&x->pm, l, x->D + l * unit) ^ line_hash(&x->pm, l, x->line_buf);
		undo_save(&x->u, l * unit, unit);
		memcpy(x->S + l * unit, x->line_buf, unit);
	}
	if (kset_add(&x->seen, h)) {
		x->cur_p = p;
		ex_check(x, lo, hi, h);
		x->cur_p = NULL;
	}
	undo_rollback(&x->u, mark);
}

static uint64_t ex_rand(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return mix64(*s);
}

static void ex_point(struct ex *x, int lo, int hi)
{
	x->point_no++;
	x->st->points++;
	size_t n = x->pm.npl;
	uint32_t *p = calloc(n + 1, sizeof *p), *c = calloc(n + 1, sizeof *c), *f = calloc(n + 1, sizeof *f);
	/* Prefixes tried one by one and combined exhaustively: unit i's are
	 * cut[cut0[i]] .. cut[cut0[i + 1] - 1], from 0 up to all of them.  A
	 * line's are all its words; a page gathers hundreds, so only where a
	 * store call begins (tears inside calls are left to the random images). */
	size_t *cut0 = calloc(n + 1, sizeof *cut0), ncut = 0;
	for (size_t i = 0; i < n; i++)
		ncut += x->pm.pl[i].n + 1;
	uint32_t *cut = calloc(ncut + 1, sizeof *cut), *q = calloc(n + 1, sizeof *q);
	ncut = 0;
	for (size_t i = 0; i < n; i++) {
		const struct pline *pl = &x->pm.pl[i];
		c[i] = pl->n;
		f[i] = pl->flushed;
		cut0[i] = ncut;
		cut[ncut++] = 0;
		for (uint32_t k = 1; k < pl->n; k++)
			if (!x->pm.file || pl->w[k].first)
				cut[ncut++] = k;
		cut[ncut++] = pl->n;
	}
	cut0[n] = ncut;
	long budget = x->cfg.point_budget;
#define SET(v) for (size_t k_ = 0; k_ < n; k_++) p[k_] = (v)
#define TRY()                                            \
	do {                                             \
		if (budget-- <= 0 || x->stop)            \
			goto out;                        \
		ex_try(x, p, lo, hi);                    \
	} while (0)
	SET(0);
	TRY();
	SET(c[k_]);
	TRY();
	SET(f[k_]);
	TRY();
	for (size_t i = 0; i < n; i++) {
		SET(0);
		p[i] = c[i];
		TRY();
		SET(c[k_]);
		p[i] = 0;
		TRY();
	}
	for (size_t i = 0; i < n; i++) {
		size_t inner = cut0[i + 1] - cut0[i] - 2, step = inner / 8 + 1;
		for (size_t k = 1; k <= inner; k += step) {
			SET(f[k_]);
			p[i] = cut[cut0[i] + k];
			TRY();
		}
	}
	if (n <= 24)
		for (size_t i = 0; i < n; i++)
			for (size_t j = i + 1; j < n; j++) {
				SET(0);
				p[i] = c[i];
				p[j] = c[j];
				TRY();
				SET(c[k_]);
				p[i] = p[j] = 0;
				TRY();
			}
	double combos = 1;
	for (size_t i = 0; i < n; i++)
		combos *= (double)(cut0[i + 1] - cut0[i]);
	if (combos <= x->cfg.exh_bound) {
		SET(0);
		for (;;) {
			TRY();
			size_t i = 0;
			while (i < n && cut0[i] + q[i] + 1 == cut0[i + 1])
				q[i] = 0, p[i] = 0, i++;
			if (i == n)
				break;
			p[i] = cut[cut0[i] + ++q[i]];
		}
	}
	uint64_t rs = x->cfg.seed ^ hash_bytes(x->point_no, x->spec, strlen(x->spec));
	for (int r = 0; r < x->cfg.random; r++) {
		for (size_t i = 0; i < n; i++) {
			uint64_t v = ex_rand(&rs);
			p[i] = v % 4 == 0 ? 0 : v % 4 == 1 ? c[i] : (uint32_t)((v >> 8) % (c[i] + 1));
		}
		TRY();
	}
#undef SET
#undef TRY
out:
	free(p);
	free(c);
	free(f);
	free(cut0);
	free(cut);
	free(q);
}

#endif
