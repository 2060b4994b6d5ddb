/*
 * explore.h — the crash-state explorer.
 *
 * For one workload: run it on a plain pool and dump the state after every
 * entry (the reference); run it again on a pool with the back end of the
 * chosen model (pmem or file) and a tracer recording every media event;
 * replay the trace through the persistence model (model.h) and, at every
 * fence and every return from an entry, build crash images from the pending
 * units (lines or pages) — none, all, the flushed ones, each unit alone and
 * all but each, a spread of prefixes of a multi-write unit, pairs, all
 * combinations when few, seeded random ones — and check each distinct one:
 *
 *   recovery (mount) succeeds; fsck finds nothing; the dump equals the
 *   reference after entry j for some j between the last entry that returned
 *   and the one in flight; a second, ordinary mount changes nothing; the pool
 *   stays usable (create, write, read back, rename, mkdir in every directory,
 *   then delete everything; fsck again); and crashing recovery itself at its
 *   fences leads, after another recovery, to the same state.
 *
 * Images are laid onto one scratch pool file that mirrors the durable image;
 * every byte changed for a check (the image's lines, and everything the
 * engine writes, seen through its tracer) is saved in an undo log and put
 * back, so an image costs its checks, not a 4 MiB copy.
 */
#ifndef CRASH_EXPLORE_H
#define CRASH_EXPLORE_H

#include "crash/check.h"

/* ---- one workload --------------------------------------------------------- */

static int ex_init(struct ex *x, const struct ex_cfg *cfg, struct ex_stats *st)
{
	memset(x, 0, sizeof *x);
	x->cfg = *cfg;
	x->st = st;
	static int instances; /* one process may explore several models at once */
	int k = instances++;
	snprintf(x->work_path, sizeof x->work_path, "/dev/shm/kura-crash-%d.%d-work.pool", getpid(), k);
	snprintf(x->ref_path, sizeof x->ref_path, "/dev/shm/kura-crash-%d.%d-ref.pool", getpid(), k);
	snprintf(x->scratch_path, sizeof x->scratch_path, "/dev/shm/kura-crash-%d.%d-scratch.pool", getpid(), k);
	if (kura_mkfs(x->scratch_path, POOL_SIZE, 1)) {
		fprintf(stderr, "mkfs %s: %s\n", x->scratch_path, kura_last_error());
		return -1;
	}
	int fd = open(x->scratch_path, O_RDWR);
	x->S = fd < 0 ? MAP_FAILED : mmap(NULL, POOL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (fd >= 0)
		close(fd);
	if (x->S == MAP_FAILED)
		return -1;
	/* Attached for the whole run, so each check's mount finds the shared
	 * table instead of creating and zeroing a fresh one (most of a mount's
	 * cost).  Mounts then never see themselves alone, so none reclaims
	 * orphans on its own: ex_recover_dump does that explicitly.  Not in
	 * the file model, whose recovery is a first mount, alone. */
	int alone = 0;
	fd = open(x->scratch_path, O_RDWR);
	if (fd < 0 || (!cfg->file && lock_attach(&x->hold, fd, &alone)))
		return -1;
	close(fd);
	x->D = malloc(POOL_SIZE);
	x->u.base = x->S;
	return x->D ? 0 : -1;
}

static void ex_fini(struct ex *x)
{
	if (!x->cfg.file)
		lock_detach(&x->hold, -1); /* one process: nobody attaches meanwhile */
	munmap(x->S, POOL_SIZE);
	free(x->D);
	unlink(x->work_path);
	unlink(x->ref_path);
	unlink(x->scratch_path);
	trace_free(&x->tr);
	trace_free(&x->rtr);
	pm_free(&x->pm);
	for (int i = 0; i <= MAX_ENTRIES; i++)
		free(x->Hdump[i]);
	free(x->u.e);
	free(x->u.bytes);
	free(x->seen.k);
	sb_free(&x->dbuf);
	sb_free(&x->dbuf2);
	sb_free(&x->msg);
}

/* The reference run: the state after setup and after every entry. */
static int ex_reference(struct ex *x, const int *ops, int nops)
{
	if (kura_mkfs(x->ref_path, POOL_SIZE, 1))
		return -1;
	kura_fs *fs = kura_mount(x->ref_path, &(struct kura_mount_opts){ .persist = KURA_PERSIST_MEMORY }, NULL);
	struct wk_ctx c;
	if (!fs || wk_setup(fs, &c))
		return -1;
	x->nops = 0;
	for (int i = 0; i < nops && x->nops < MAX_ENTRIES - WK_SLOTS; i++)
		x->ops[x->nops++] = &wk_table[ops[i]];
	/* Closing what is still open is part of the workload, decided once the
	 * entries have run. */
	int user = x->nops;
	if (!user)
		for (int k = wk_open_slots(&c); k > 0; k--)
			x->ops[x->nops++] = &wk_close_auto;
	for (int j = 0; j <= x->nops; j++) {
		x->nmix[j] = 0;
		if (j && x->ops[j - 1]->kind == K_MAPWRITE)
			x->nmix[j] = wk_mapwrite_mixes(fs, &c, x->ops[j - 1], x->Hmix[j], &x->dbuf);
		if (j) {
			x->res[j - 1] = wk_run(fs, &c, x->ops[j - 1]);
			if (j == user)
				for (int k = wk_open_slots(&c); k > 0; k--)
					x->ops[x->nops++] = &wk_close_auto;
		}
		x->H[j] = dump_fs(fs, &x->dbuf);
		free(x->Hdump[j]);
		x->Hdump[j] = strndup(x->dbuf.p, x->dbuf.n);
	}
	kura_unmount(fs);
	return 0;
}

/* --sync mixed: entry j runs in op mode, as another process of the pool
 * in KURA_SYNC=op would, if it is odd and changes the pool whenever it
 * succeeds (an op-mode change seals what fsync mode left pending before
 * it, so it is a sync point for the oracle).  An fsync in op mode syncs
 * what is pending too. */
static int ex_op_mode_entry(const struct ex *x, int j)
{
	if (!x->cfg.mixed || j % 2 == 0)
		return 0;
	switch (x->ops[j]->kind) {
	case K_CREAT: case K_MKNOD: case K_MKDIR: case K_RMDIR: case K_WRITE: case K_PWRITE: case K_FTRUNC:
	case K_TRUNC: case K_LINK: case K_UNLINK: case K_RENAME: case K_SYMLINK: case K_FSYNC: case K_CHMOD:
		return 1;
	default:
		return 0;
	}
}

static int ex_traced(struct ex *x)
{
	if (kura_mkfs(x->work_path, POOL_SIZE, 1))
		return -1;
	enum kura_persist kind = x->cfg.file ? KURA_PERSIST_FILE : KURA_PERSIST_PMEM;
	kura_fs *fs = kura_mount(x->work_path,
				 &(struct kura_mount_opts){ .persist = kind,
							    .sync = x->cfg.fsync_mode ? KURA_SYNC_FSYNC : KURA_SYNC_OP },
				 NULL);
	struct wk_ctx c;
	if (!fs || wk_setup(fs, &c))
		return -1;
	if (x->cfg.file && kura_syncfs(fs)) /* the set-up is where every crash may go back to */
		return -1;
	/* KURA_PERSIST in the environment overrides the mount option; the
	 * model must describe the back end that really ran. */
	if (fs->m.kind != kind) {
		fprintf(stderr, "harness: the traced pool runs the %s back end, not the modelled one\n",
			media_kind_name(&fs->m));
		kura_unmount(fs);
		return -1;
	}
	if (!x->cfg.file)
		memcpy(x->D, fs->m.base, POOL_SIZE);
	else if (pread(fs->pool_fd, x->D, POOL_SIZE, 0) != (ssize_t)POOL_SIZE)
		return -1; /* the durable image is the pool file, not the copy */
	trace_reset(&x->tr);
	fs->m.tracer.event = ex_record_tracer;
	fs->m.tracer.ctx = &x->tr;
	int bad = -1;
	long bad_r = 0;
	kura_fault = x->cfg.fault;
	for (int j = 0; j < x->nops; j++) {
		media_mark(&fs->m, 'O', (uint64_t)j + 1);
		if (x->cfg.mixed)
			fs->j.sync_each_op = ex_op_mode_entry(x, j);
		long r = wk_run(fs, &c, x->ops[j]);
		if (x->cfg.mixed)
			fs->j.sync_each_op = 0;
		media_mark(&fs->m, 'o', (uint64_t)j + 1);
		if (r != x->res[j] && bad < 0)
			bad = j, bad_r = r;
	}
	kura_fault = FAULT_NONE;
	fs->m.tracer.event = NULL;
	kura_unmount(fs);
	if (bad >= 0 && !x->cfg.fault) {
		fprintf(stderr, "harness: entry %d (%s) returned %ld in the traced run, %ld before\n", bad + 1,
			x->ops[bad]->name, bad_r, x->res[bad]);
		return -1;
	}
	return 0;
}

/* Explores one workload; returns its violations (or -1 on a harness error). */
static int ex_workload(struct ex *x, const int *ops, int nops)
{
	x->wl_viol = 0;
	x->stop = 0;
	x->wl_group = 0;
	for (int i = 0; i < nops; i++) /* a gset commits groups, or at least runs the group commit */
		x->wl_group |= wk_table[ops[i]].kind == K_GBEGIN || wk_table[ops[i]].kind == K_GSET;
	x->point_no = 0;
	if (!wk_model_ok(ops, nops, x->cfg.file))
		return 0;
	wk_format(ops, nops, x->spec, sizeof x->spec);
	if (ex_reference(x, ops, nops) || ex_traced(x)) {
		fprintf(stderr, "harness: cannot run workload %s: %s\n", x->spec, kura_last_error());
		return -1;
	}
	x->st->workloads++;
	x->st->entries += (uint64_t)x->nops;
	memcpy(x->S, x->D, POOL_SIZE);
	pm_init(&x->pm, x->cfg.file, x->D, POOL_SIZE, x->S, NULL, 1);
	kset_clear(&x->seen);
	/* The oldest state a crash may show: in op mode the last entry that
	 * returned; in fsync mode the last fsync that returned (the set-up
	 * was synced), any later state being a prefix of what followed. */
	int inflight = 0, done = 0, synced = 0;
#define LO() (x->cfg.fsync_mode ? synced : inflight ? inflight - 1 : done)
	for (size_t i = 0; i < x->tr.n && !x->stop; i++) {
		struct tev *e = &x->tr.e[i];
		x->event_no = i;
		if (pm_event(&x->pm, &x->tr, e)) {
			ex_point(x, LO(), inflight ? inflight : done);
			pm_fence(&x->pm);
		} else if (e->kind == MEDIA_MARK) {
			if (e->off == 'O')
				inflight = (int)e->len;
			if (e->off == 'o') {
				done = (int)e->len;
				inflight = 0;
				enum wk_kind k = x->ops[done - 1]->kind;
				/* a gset's kura_group_commit is durable when it
				 * returns, as gcommit */
				if ((k == K_FSYNC || k == K_MAPWRITE || k == K_GCOMMIT || k == K_GSET) &&
				    x->res[done - 1] == 0)
					synced = done;
				if (ex_op_mode_entry(x, done - 1) && x->res[done - 1] >= 0)
					synced = done;
				ex_point(x, LO(), done);
			}
		}
	}
#undef LO
	if (memcmp(x->S, x->D, POOL_SIZE)) {
		fprintf(stderr, "harness: the scratch pool drifted from the durable image (workload %s)\n", x->spec);
		return -1;
	}
	return x->wl_viol;
}

#endif
