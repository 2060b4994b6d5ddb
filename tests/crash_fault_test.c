/*
 * crash_fault_test.c — the crash explorer must be able to fail.
 *
 * For each bug src/fault.h can inject (a commit that drops one flush, a
 * directory entry written in place without undo, a grown size made durable
 * before the data, a file back end whose msync misses a page), under each
 * persistence model it applies to, run the seq-1 workloads with the bug
 * switched on until the explorer reports a violation.  A check passes when
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
	[FAULT_FILE_RUN_START] = "msync misses the page below a merged dirty run",
};

/* The file back end's bookkeeping bug means nothing to pmem: there it
 * would pass unseen, rightly. */
static int applies(int fault, int file)
{
	return fault != FAULT_FILE_RUN_START || file;
}

int main(void)
{
	struct ex_cfg cfg = { .point_budget = 48, .exh_bound = 64, .random = 4, .recov_lines = 4, .usability = 1,
			      .stop_first = 1, .max_print = 100, .seed = 0x6b757261 };
	struct ex_stats st = { 0 };
	struct ex x;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (ex_init(&x, &cfg, &st)) {
		printf("cannot set up the scratch pools\n");
		return 1;
	}
	double t0 = now_sec();
	for (int k = 0; k < 2 * (FAULT_COUNT - 1); k++) {
		int f = 1 + k / 2, file = k % 2;
		if (!applies(f, file))
			continue;
		x.cfg.fault = f;
		x.cfg.file = file;
		uint64_t before = st.checked;
		int caught = -1;
		for (int i = 0; i < WK_NOPS && caught < 0; i++) {
			int v = ex_workload(&x, &i, 1);
			if (v > 0)
				caught = i;
			else if (v < 0)
				break;
		}
		const char *model = file ? "file" : "pmem";
		printf("fault %d (%s), %s model: %s after %llu images%s%s\n", f, fault_name[f], model,
		       caught >= 0 ? "caught" : "MISSED", (unsigned long long)(st.checked - before),
		       caught >= 0 ? " by " : "", caught >= 0 ? wk_table[caught].name : "");
		expect(caught >= 0, "the %s model missed injected bug %d (%s)", model, f, fault_name[f]);
		if (caught < 0)
			continue;
		x.cfg.fault = FAULT_NONE;
		uint64_t v0 = st.violations;
		int clean = ex_workload(&x, &caught, 1) == 0 && st.violations == v0;
		expect(clean, "workload %s also fails without the injected bug", wk_table[caught].name);
	}

	/* Shrinking: random workloads with the size-before-data bug until one
	 * fails, then delta debugging to a minimal list. */
	x.cfg.fault = FAULT_SIZE_BEFORE_DATA;
	x.cfg.file = 0;
	x.cfg.max_print = 0;
	int ops[MAX_ENTRIES], len = 10, found = 0;
	for (uint64_t seed = 1; seed < 50 && !found; seed++) {
		drv_random_ops(seed, ops, len);
		found = drv_fails(&x, ops, len);
	}
	expect(found, "no random workload exposed the size-before-data bug");
	if (found) {
		int m = drv_shrink(&x, ops, len);
		char spec[4096];
		wk_format(ops, m, spec, sizeof spec);
		printf("shrunk a failing random workload from %d to %d entries: --replay '%s' --fault %d\n", len, m,
		       spec, FAULT_SIZE_BEFORE_DATA);
		expect(m >= 1 && m <= 2 && drv_fails(&x, ops, m), "shrinking ended at %d entries (%s)", m, spec);
		x.cfg.fault = FAULT_NONE;
		expect(!drv_fails(&x, ops, m), "the shrunk workload also fails without the bug");
	}
	st.seconds = now_sec() - t0;
	drv_summary(&st, "fault tests");
	ex_fini(&x);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
