/*
 * crash_test.c — the crash-state explorer over the engine (tests/crash/).
 *
 *   crash_test                  bounded sweep for make check: seq-1 (with the
 *                               fixed scenarios), a sample of seq-2, a few
 *                               random workloads
 *   crash_test --full           all of seq-1 and seq-2 and a long random run
 *                               (make crash-full)
 *   crash_test --replay LIST [--fault N]
 *                               one workload, entries by name, comma-separated
 *   crash_test --random SEED COUNT LEN
 *   --groups-only N             the atomic-group phase alone, N workloads (with
 *                               --full at crash-full's depth)
 *   --jobs N (with the sweeps) splits the workloads over N processes
 *   --persist pmem|file         the persistence model explored: pmem (64-byte
 *                               lines, clwb + sfence; the default) or the file
 *                               back end (4 KiB pages, msync)
 *
 * CRASH_SCALE (per mille of the bounded sweep's seq-2 sample) trims the
 * sweep; sanitizer builds use a smaller sample by default, and so does the
 * file model, which make check runs as a second sweep.
 */
#include <sys/wait.h>
#include "crash/driver.h"

static int passed, failed;

static void expect(int ok, const char *what)
{
	if (ok) {
		passed++;
	} else {
		failed++;
		printf("FAIL %s\n", what);
	}
}

int main(int argc, char **argv)
{
	struct ex_cfg cfg = { .point_budget = 48, .exh_bound = 64, .random = 4, .recov_lines = 4, .usability = 1,
			      .max_print = 3, .seed = 0x6b757261 };
	struct ex_stats st = { 0 };
	struct ex x;
	setvbuf(stdout, NULL, _IOLBF, 0);
	int full = argc > 1 && !strcmp(argv[1], "--full");
	const char *replay = NULL;
	uint64_t rseed = 0;
	int rcount = 0, rlen = 0, groups_only = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--replay") && i + 1 < argc)
			replay = argv[++i];
		else if (!strcmp(argv[i], "--fault") && i + 1 < argc)
			cfg.fault = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--random") && i + 3 < argc) {
			rseed = strtoull(argv[++i], NULL, 0);
			rcount = atoi(argv[++i]);
			rlen = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--groups-only") && i + 1 < argc) {
			groups_only = atoi(argv[++i]); /* that many group workloads, no other phase */
		} else if (!strcmp(argv[i], "--jobs") && i + 1 < argc) {
			cfg.nshards = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--persist") && i + 1 < argc && !strcmp(argv[i + 1], "file")) {
			/* its own seed: the two sweeps sample different pairs */
			cfg.file = 1;
			cfg.seed ^= 0x66696c65;
			i++;
		} else if (!strcmp(argv[i], "--persist") && i + 1 < argc && !strcmp(argv[i + 1], "pmem")) {
			i++;
		} else if (!strcmp(argv[i], "--sync") && i + 1 < argc &&
			   (!strcmp(argv[i + 1], "fsync") || !strcmp(argv[i + 1], "op") ||
			    !strcmp(argv[i + 1], "mixed"))) {
			cfg.mixed = !strcmp(argv[++i], "mixed");
			cfg.fsync_mode = cfg.mixed || !strcmp(argv[i], "fsync");
			cfg.seed ^= cfg.mixed ? 0x6d69786564ull : cfg.fsync_mode ? 0x6673796e63ull : 0;
		} else if (strcmp(argv[i], "--full")) {
			fprintf(stderr,
				"usage: %s [--full | --replay LIST [--fault N] | --random SEED COUNT LEN] "
				"[--groups-only N] [--persist pmem|file] [--sync op|fsync|mixed] [--jobs N]\n",
				argv[0]);
			return 2;
		}
	}
	if (cfg.fsync_mode && !cfg.file) {
		fprintf(stderr, "--sync fsync or mixed needs --persist file: the other back ends are always op\n");
		return 2;
	}
	/* A journal of a few records, so that short workloads checkpoint and
	 * take the large path (records bigger than the journal) too.  In fsync
	 * mode a record holds everything since the last sync, and data blocks
	 * go home without one: a smaller journal fills as fast. */
	if (cfg.file)
		kura_journal_cap = 12 * 1024;
	/* And in fsync mode every commit writes its pending blocks behind, so
	 * that crashes land between those writes and the seals that count on
	 * them. */
	kura_write_behind_step = 1;
	if (full) {
		cfg.point_budget = 160;
		cfg.exh_bound = 256;
		cfg.random = 8;
		cfg.progress = 1;
	}
	/* Shards run as children; each reports its counts through a pipe. */
	int pipefd[2] = { -1, -1 }, nsh = cfg.nshards > 1 && !replay && !rcount ? cfg.nshards : 1;
	double tp = now_sec();
	if (nsh > 1) {
		if (pipe(pipefd))
			return 1;
		for (int k = 0; k < nsh; k++) {
			pid_t pid = fork();
			if (pid == 0) {
				cfg.shard = k;
				close(pipefd[0]);
				goto run;
			}
		}
		close(pipefd[1]);
		struct ex_stats all[5] = { 0 }, part[5];
		int children_failed = 0;
		while (read(pipefd[0], part, sizeof part) == (ssize_t)sizeof part)
			for (int k = 0; k < 5; k++) {
				all[k].workloads += part[k].workloads;
				all[k].group_checked += part[k].group_checked;
				all[k].entries += part[k].entries;
				all[k].points += part[k].points;
				all[k].generated += part[k].generated;
				all[k].checked += part[k].checked;
				all[k].recov_checked += part[k].recov_checked;
				all[k].violations += part[k].violations;
				/* shards run side by side: a phase lasts as long as its slowest shard */
				if (part[k].seconds > all[k].seconds)
					all[k].seconds = part[k].seconds;
			}
		for (int k = 0; k < nsh; k++) {
			int status = 0;
			wait(&status);
			children_failed += !WIFEXITED(status) || WEXITSTATUS(status);
		}
		static const char *names[5] = { "seq-1", "seq-2", "random", "groups", "total" };
		all[4].seconds = now_sec() - tp;
		for (int k = 0; k < 5; k++)
			drv_summary(&all[k], names[k]);
		printf("%d shards; %d passed, %d failed\n", nsh, nsh - children_failed, children_failed);
		return children_failed != 0;
	}
run:
	if (ex_init(&x, &cfg, &st)) {
		printf("cannot set up the scratch pools\n");
		return 1;
	}
	double t0 = now_sec();
	if (replay) {
		int ops[MAX_ENTRIES];
		int n = wk_parse(replay, ops, MAX_ENTRIES - WK_SLOTS);
		if (n < 0)
			return 2;
		x.cfg.max_print = 1000;
		int v = drv_run(&x, ops, n);
		st.seconds = now_sec() - t0;
		drv_summary(&st, "replay");
		ex_fini(&x);
		return v != 0;
	}
	if (rcount) {
		int bad = drv_random(&x, rseed, rcount, rlen);
		st.seconds = now_sec() - t0;
		drv_summary(&st, "random");
		ex_fini(&x);
		return bad != 0;
	}

	/* make check's sweep: every entry alone, a seeded sample of pairs,
	 * and random workloads. */
	int per_mille = full ? 1000 : cfg.file ? 15 : 30, group_count = cfg.file ? 40 : 80;
#if defined(__SANITIZE_ADDRESS__)
	/* ASan makes every image several times dearer; the plain build carries
	 * the sweep, this one looks for memory errors on a thinner slice. */
	if (!full) {
		per_mille = cfg.file ? 5 : 10;
		group_count = 4;
		x.cfg.point_budget = 32;
		x.cfg.random = 2;
	}
#endif
	const char *scale = getenv("CRASH_SCALE");
	if (scale && !full)
		per_mille = atoi(scale);

	struct ex_stats s1 = { 0 }, s2 = { 0 }, s3 = { 0 }, s4 = { 0 };
	double t = now_sec();
	int bad = 0;
	if (groups_only)
		goto groups;
	x.st = &s1;
	bad = drv_seq1(&x);
	s1.seconds = now_sec() - t;
	drv_summary(&s1, "seq-1");
	expect(bad == 0 && s1.violations == 0, "seq-1: every single entry and scenario survives every crash image");

	t = now_sec();
	x.st = &s2;
	bad = drv_seq2(&x, per_mille);
	s2.seconds = now_sec() - t;
	drv_summary(&s2, full ? "seq-2 (all pairs)" : "seq-2 (sample)");
	expect(bad == 0 && s2.violations == 0, "seq-2: pairs of entries survive every crash image");

	t = now_sec();
	x.st = &s3;
	bad = drv_random(&x, cfg.seed, full ? 400 : (per_mille >= 15 ? 12 : 2), full ? 12 : 6);
	s3.seconds = now_sec() - t;
	drv_summary(&s3, "random");
	expect(bad == 0 && s3.violations == 0, "random workloads survive every crash image");

	/* Atomic groups: a commit shows all of a group, nothing else shows
	 * any of it.  --groups-only N runs this phase alone (with --full at
	 * crash-full's depth), N workloads. */
groups:
	t = now_sec();
	x.st = &s4;
	/* Recovery is the same code whatever the workload, and the phases
	 * above crash it thoroughly: here its crashes are sampled thinner, so
	 * the sweep's time goes to more group workloads. */
	if (!full)
		x.cfg.recov_lines = 0;
	/* crash-full: 450 workloads at its depth, about 2,700 group images
	 * each (1.2 million; half an hour on two cores). */
	bad = drv_groups(&x, cfg.seed, groups_only ? groups_only : full ? 450 : group_count);
	x.cfg.recov_lines = cfg.recov_lines;
	s4.seconds = now_sec() - t;
	drv_summary(&s4, "groups");
	expect(bad == 0 && s4.violations == 0, "atomic groups survive every crash image");

	st.workloads = s1.workloads + s2.workloads + s3.workloads + s4.workloads;
	st.entries = s1.entries + s2.entries + s3.entries + s4.entries;
	st.points = s1.points + s2.points + s3.points + s4.points;
	st.generated = s1.generated + s2.generated + s3.generated + s4.generated;
	st.checked = s1.checked + s2.checked + s3.checked + s4.checked;
	st.recov_checked = s1.recov_checked + s2.recov_checked + s3.recov_checked + s4.recov_checked;
	st.violations = s1.violations + s2.violations + s3.violations + s4.violations;
	st.group_checked = s1.group_checked + s2.group_checked + s3.group_checked + s4.group_checked;
	st.seconds = now_sec() - t0;
	drv_summary(&st, "total");
	ex_fini(&x);
	if (pipefd[1] >= 0) {
		struct ex_stats part[5] = { s1, s2, s3, s4, st };
		if (write(pipefd[1], part, sizeof part) != (ssize_t)sizeof part)
			failed++;
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
