/*
 * ex.h — the crash explorer's state and configuration, and how it reports
 * a violation (explore.h says what the explorer does).
 */
#ifndef CRASH_EX_H
#define CRASH_EX_H

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "fault.h"
#include "fs.h"
#include "super.h"
#include "crash/dump.h"
#include "crash/model.h"
#include "crash/work.h"

#define POOL_SIZE (4ull << 20)
#define MAX_ENTRIES 64

struct ex_cfg {
	int point_budget;  /* images tried per crash point */
	int exh_bound;     /* enumerate all combinations when at most this many */
	int random;        /* seeded random images per crash point */
	int recov_lines;   /* crash recovery: each of this many pending lines alone (-1: off) */
	int usability;     /* second mount, usability and fsck on every image */
	int stop_first;    /* stop a workload at its first violation */
	int fault;         /* kura_fault during the traced run */
	int max_print;     /* violations printed in full */
	int file;          /* persistence model: 0 pmem (lines), 1 file back end (pages of the pool file) */
	int fsync_mode;    /* file model: KURA_SYNC=fsync, whose oracle is a prefix back to the last fsync */
	int mixed;         /* fsync mode, but every other changing entry runs as a process in op mode would */
	uint64_t seed;
	int progress;       /* print a line every 250 workloads */
	int shard, nshards; /* this process runs workloads numbered shard mod nshards */
};

struct ex_stats {
	uint64_t generated, checked, recov_checked, points, violations, workloads, entries;
	uint64_t group_checked; /* of checked: images of workloads with an atomic group in them */
	double seconds;
};

struct ex {
	struct ex_cfg cfg;
	struct ex_stats *st;
	char work_path[96], ref_path[96], scratch_path[96];
	uint8_t *S; /* the scratch pool, mapped */
	uint8_t *D; /* the durable image */
	struct lockh hold; /* keeps the scratch pool's lock table alive between mounts */
	struct undo u;
	struct trace tr, rtr;
	int rtr_on;
	struct pmodel pm;
	uint64_t H[MAX_ENTRIES + 1];
	char *Hdump[MAX_ENTRIES + 1];
	/* A map's stores reach the disk page by page, as the kernel writes a
	 * map's dirty pages back (a checkpoint may carry them home before
	 * msync records them): while mapwrite entry j is in flight, the state
	 * after j - 1 with any of its pages written is acceptable too. */
	uint64_t Hmix[MAX_ENTRIES + 1][WK_MIX_MAX];
	int nmix[MAX_ENTRIES + 1];
	long res[MAX_ENTRIES];
	const struct wk_op *ops[MAX_ENTRIES];
	int nops;
	char spec[4096];
	struct kset seen;
	struct sbuf dbuf, dbuf2, msg;
	uint64_t point_no, budget;
	size_t event_no;
	const uint32_t *cur_p; /* the image being checked, for reports */
	int wl_viol, stop;
	int wl_group; /* the workload has an atomic group entry */
	uint64_t checks_since_drift;
	uint8_t line_buf[UNIT_MAX];
};

static double now_sec(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The options that replay a run of this configuration. */
static const char *ex_flags(const struct ex *x)
{
	static char f[64];
	snprintf(f, sizeof f, "%s%s", x->cfg.file ? " --persist file" : "",
		 x->cfg.mixed ? " --sync mixed" : x->cfg.fsync_mode ? " --sync fsync" : "");
	if (x->cfg.fault)
		snprintf(f + strlen(f), sizeof f - strlen(f), " --fault %d", x->cfg.fault);
	return f;
}

static void ex_describe_image(struct ex *x, struct sbuf *out)
{
	sb_printf(out, "  crash point %llu (trace event %zu); pending %s (offset: writes persisted/pending):",
		  (unsigned long long)x->point_no, x->event_no, x->cfg.file ? "pages" : "lines");
	size_t shown = 0;
	for (size_t i = 0; i < x->pm.npl && x->cur_p; i++) {
		if (shown++ == 40) {
			sb_printf(out, " ...");
			break;
		}
		sb_printf(out, " 0x%llx:%u/%u", (unsigned long long)(x->pm.pl[i].line * x->pm.unit), x->cur_p[i],
			  x->pm.pl[i].n);
	}
	sb_printf(out, "\n");
}

static void ex_violation(struct ex *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ex_violation(struct ex *x, const char *fmt, ...)
{
	x->st->violations++;
	if (x->wl_viol++ == 0) {
		char why[1200];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, sizeof why, fmt, ap);
		va_end(ap);
		x->msg.n = 0;
		sb_printf(&x->msg, "VIOLATION: %s\n  workload: %s\n", why, x->spec);
		ex_describe_image(x, &x->msg);
		sb_printf(&x->msg, "  replay: build/tests/crash_test --replay '%s'%s\n", x->spec, ex_flags(x));
		if (x->st->violations <= (uint64_t)x->cfg.max_print)
			fputs(x->msg.p, stdout);
	}
	if (x->cfg.stop_first)
		x->stop = 1;
}

#endif
