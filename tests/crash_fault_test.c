/*
 * crash_fault_test.c — the crash explorer must be able to fail.
 *
 * For each bug src/fault.h can inject (a commit that drops one flush, a
 * directory entry written in place without undo, a grown size made durable
 * before the data, a journal sync skipped, a journal record whose checksum
 * misses its payload, a checkpoint that reuses the journal before its home
 * writes are durable, an msync whose map stores no record carries, an
 * op-mode commit ahead of what fsync mode left pending), under each
 * persistence model and durability mode it
 * applies to, run the seq-1 workloads with the bug switched on until the
 * explorer reports a violation.  A check passes when
 * the bug is caught and the same workload is clean with the bug off (so the
 * violation is the bug's, not the harness's).  Then a random workload with a
 * bug is shrunk by delta debugging to a minimal failing list that still
 * fails on replay.
 */
#include "crash/driver.h"

static int passed, failed;

static void expect(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void expect(int ok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (ok) {
		passed++;
	} else {
		failed++;
		printf("FAIL ");
		vprintf(fmt, ap);
		printf("\n");
	}
	va_end(ap);
}

static const char *fault_name[FAULT_COUNT] = {
	[FAULT_DROP_FLUSH] = "drop one flush at commit",
	[FAULT_DIR_IN_PLACE] = "directory entry added in place",
	[FAULT_SIZE_BEFORE_DATA] = "size persisted before data",
	[FAULT_DROP_SYNC] = "a journal sync skipped",
	[FAULT_RECORD_CRC_HEAD] = "journal record checksum misses its payload",
	[FAULT_CHECKPOINT_EARLY] = "checkpoint retires records before homes are durable",
	[FAULT_MAP_UNRECORDED] = "msync leaves a map's stores out of the journal",
	[FAULT_SEAL_HOME_EARLY] = "a seal links blocks written home before they are durable",
	[FAULT_MAP_HOME_UNRECORDED] = "a checkpoint writes a map's unrecorded stores home",
	[FAULT_GROUP_SPLIT_COMMIT] = "an atomic group commits in two transactions",
	[FAULT_MIXED_UNSEALED] = "an op-mode commit ahead of fsync-mode changes left pending",
	[FAULT_UNWRITTEN_EARLY] = "an unwritten block's bit cleared before its data",
	[FAULT_BEHIND_STALE] = "a block written behind, changed, and left out of the seal",
};

enum { PMEM, FILE_OP, FILE_FSYNC, FILE_MIXED, NMODELS };
static const char *model_name[NMODELS] = { "pmem", "file (op)", "file (fsync)", "file (fsync and op mixed)" };

/* A bug lives in one layer: the journal's mean nothing to pmem, and the
 * undo log's flushes nothing to the file back end, whose copy is memory. */
static int applies(int fault, int model)
{
	/* The mixed model's own bug is the mixing; the others are the
	 * single modes' to catch. */
	if ((fault == FAULT_MIXED_UNSEALED) != (model == FILE_MIXED))
		return 0;
	switch (fault) {
	case FAULT_DROP_FLUSH: return model == PMEM;
	/* In fsync mode the disk sees the copy only as a seal takes it, between
	 * transactions, where the early size has been joined by its data. */
	case FAULT_SIZE_BEFORE_DATA: return model != FILE_FSYNC;
	case FAULT_DROP_SYNC:
	case FAULT_RECORD_CRC_HEAD:
	case FAULT_CHECKPOINT_EARLY:
	case FAULT_MAP_UNRECORDED:
	case FAULT_MAP_HOME_UNRECORDED: return model != PMEM;
	case FAULT_SEAL_HOME_EARLY:
	case FAULT_BEHIND_STALE: return model == FILE_FSYNC;
	/* In fsync mode the disk sees a state only as a sync seals it: a
	 * group's commit in two transactions, or a bit cleared before the
	 * data it vouches for, is sealed whole by the sync after it. */
	case FAULT_GROUP_SPLIT_COMMIT:
	case FAULT_UNWRITTEN_EARLY: return model != FILE_FSYNC;
	default: return 1;
	}
}

int main(void)
{
	struct ex_cfg cfg = { .point_budget = 48, .exh_bound = 64, .random = 4, .recov_lines = 4, .usability = 1,
			      .stop_first = 1, .max_print = 100, .seed = 0x6b757261 };
	struct ex_stats st = { 0 };
	struct ex xs[NMODELS];
	setvbuf(stdout, NULL, _IOLBF, 0);
	kura_journal_cap = 12 * 1024; /* checkpoints in short workloads, as crash_test */
	kura_write_behind_step = 1;   /* and writes behind at every commit */
	for (int mo = 0; mo < NMODELS; mo++) {
		cfg.file = mo != PMEM;
		cfg.fsync_mode = mo == FILE_FSYNC || mo == FILE_MIXED;
		cfg.mixed = mo == FILE_MIXED;
		if (ex_init(&xs[mo], &cfg, &st)) {
			printf("cannot set up the scratch pools\n");
			return 1;
		}
	}
	double t0 = now_sec();
	for (int k = 0; k < NMODELS * (FAULT_COUNT - 1); k++) {
		int f = 1 + k / NMODELS, mo = k % NMODELS;
		if (!applies(f, mo))
			continue;
		struct ex *x = &xs[mo];
		x->cfg.fault = f;
		uint64_t before = st.checked;
		int caught = -1;
		/* In fsync mode an entry reaches the disk when something syncs it,
		 * and only in a record of everything since the last sync, with
		 * data gone home without one: ROUNDS entry-and-fsync pairs fill
		 * the journal enough to checkpoint. */
		enum { ROUNDS = 3 };
		int fsync_op = wk_lookup("fsync:foo"), nops = mo == FILE_FSYNC ? 2 * ROUNDS : 1, wl[2 * ROUNDS];
		/* A group's commit needs a group with blocks before it: single
		 * entries cannot show that bug, and trying them all costs minutes. */
		int single = f != FAULT_GROUP_SPLIT_COMMIT && f != FAULT_UNWRITTEN_EARLY && mo != FILE_MIXED;
		for (int i = 0; i < WK_NOPS && caught < 0 && single; i++) {
			for (int r = 0; r < ROUNDS; r++)
				wl[2 * r] = i, wl[2 * r + 1] = fsync_op;
			int v = ex_workload(x, wl, nops);
			if (v > 0)
				caught = i;
			else if (v < 0)
				break;
		}
		/* Some bugs need a sequence (a map's page after records of it):
		 * the fixed scenarios have them. */
		int seq[MAX_ENTRIES], nseq = 0;
		const char *by = caught >= 0 ? wk_table[caught].name : "";
		for (size_t k = 0; caught < 0 && k < sizeof drv_scenarios / sizeof *drv_scenarios; k++) {
			nseq = wk_parse(drv_scenarios[k], seq, MAX_ENTRIES - WK_SLOTS);
			if (nseq > 0 && ex_workload(x, seq, nseq) > 0)
				caught = WK_NOPS, by = drv_scenarios[k];
		}
		const char *model = model_name[mo];
		printf("fault %d (%s), %s model: %s after %llu images%s%s\n", f, fault_name[f], model,
		       caught >= 0 ? "caught" : "MISSED", (unsigned long long)(st.checked - before),
		       caught >= 0 ? " by " : "", by);
		expect(caught >= 0, "the %s model missed injected bug %d (%s)", model, f, fault_name[f]);
		x->cfg.fault = FAULT_NONE;
		if (caught < 0)
			continue;
		uint64_t v0 = st.violations;
		for (int r = 0; r < ROUNDS && caught < WK_NOPS; r++)
			wl[2 * r] = caught;
		int clean = (caught < WK_NOPS ? ex_workload(x, wl, nops) : ex_workload(x, seq, nseq)) == 0 &&
			    st.violations == v0;
		expect(clean, "workload %s also fails without the injected bug", by);
	}

	/* Shrinking: random workloads with the size-before-data bug until one
	 * fails, then delta debugging to a minimal list. */
	struct ex *x = &xs[PMEM];
	x->cfg.fault = FAULT_SIZE_BEFORE_DATA;
	x->cfg.max_print = 0;
	int ops[MAX_ENTRIES], len = 10, found = 0;
	for (uint64_t seed = 1; seed < 50 && !found; seed++) {
		drv_random_ops(seed, ops, len);
		found = drv_fails(x, ops, len);
	}
	expect(found, "no random workload exposed the size-before-data bug");
	if (found) {
		int m = drv_shrink(x, ops, len);
		char spec[4096];
		wk_format(ops, m, spec, sizeof spec);
		printf("shrunk a failing random workload from %d to %d entries: --replay '%s' --fault %d\n", len, m,
		       spec, FAULT_SIZE_BEFORE_DATA);
		expect(m >= 1 && m <= 2 && drv_fails(x, ops, m), "shrinking ended at %d entries (%s)", m, spec);
		x->cfg.fault = FAULT_NONE;
		expect(!drv_fails(x, ops, m), "the shrunk workload also fails without the bug");
	}
	st.seconds = now_sec() - t0;
	drv_summary(&st, "fault tests");
	for (int mo = 0; mo < NMODELS; mo++)
		ex_fini(&xs[mo]);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
