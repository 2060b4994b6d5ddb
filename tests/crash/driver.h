/*
 * driver.h — what the crash test entries run: seq-1 (each table entry
 * alone), seq-2 (pairs, all or a seeded sample), seeded random workloads
 * shrunk to a minimal failing list when one fails, and the summary lines.
 */
#ifndef CRASH_DRIVER_H
#define CRASH_DRIVER_H

#include "crash/explore.h"

/* Runs a workload; a harness error counts as a violation so it cannot pass
 * silently. */
static int drv_run(struct ex *x, const int *ops, int n)
{
	static uint64_t number;
	if (x->cfg.nshards > 1 && number++ % (uint64_t)x->cfg.nshards != (uint64_t)x->cfg.shard)
		return 0;
	wk_note_ops(ops, n);
	int v = ex_workload(x, ops, n);
	if (v < 0) {
		x->st->violations++;
		v = 1;
	}
	/* Long runs say how far they are. */
	if (x->cfg.progress && x->st->workloads % 250 == 0)
		printf("  shard %d: %llu workloads, %llu images checked, %llu recovery-crash images, %llu violations\n",
		       x->cfg.shard, (unsigned long long)x->st->workloads, (unsigned long long)x->st->checked,
		       (unsigned long long)x->st->recov_checked, (unsigned long long)x->st->violations);
	return v;
}

/* Fixed workloads for bug patterns that need a particular sequence, which
 * seq-2 only samples in CI and seq-1 never builds (tests/crash/README.md).
 * Slots: foo is open three times (0 rw, 1 append, and 4 once opened again). */
static const char *const drv_scenarios[] = {
	/* 11: sizes through several descriptors, truncate, fallocate */
	"ftrunc:foo:100,append3:foo,falloc:foo:keep,append4k:foo,ftrunc:foo:4097",
	"falloc:foo:0+16k,ftrunc:foo:100,falloc:foo:zero,append4k:foo,falloc:foo:punch",
	/* unwritten blocks (layout.h) over blocks just freed with bytes in
	 * them: a small write into one, whole ones past the end, and a
	 * truncate that frees some still unwritten */
	"pwrite:foo:8k@8192,ftrunc:foo:100,falloc:foo:keep,ftrunc:foo:12288,pwrite:foo:5000@3000,pwrite:foo:8k@8192,"
	"ftrunc:foo:4097",
	"open:foo:trunc,append3:foo,pwrite:baz:70@0,trunc:A/foo:10,pwrite:A/foo:200@4000",
	/* 8: link counts and names change together */
	"link:foo:A/C/l,unlink:foo,close:foo,close:foo-append",
	"link:bar:bar2,rename:foo:bar,noreplace:bar:baz",
	"link:A/foo:B/bar,exchange:foo:A/foo,rename:A/foo:B/foo",
	/* 12: identities freed just before a crash are not handed out twice */
	"unlink:B/foo,creat:baz,mkdir:D",
	"unlink:foo,close:foo,close:foo-append,creat:baz,rmdir:A/C,mkdir:B/E",
	/* space given back: an inode block freed and two buckets merged by one
	 * unlink, then new identities; and the same through rename */
	"unlink:G/solo,creat:baz,mkdir:D,unlink:B/foo",
	"rename:G/solo:A/solo,unlink:A/bar,creat:A/C/new",
	/* a page a map wrote, after records of the same page, at a checkpoint
	 * (file model: the 12 KiB journal fills) and in a seal */
	"pwrite:foo:5000@3000,mapwrite:foo:6k@1000",
	"mapwrite:foo:10@100,falloc:foo:0+16k,falloc:foo:punch,mapwrite:foo:6k@1000",
	"pwrite:foo:2@63,append4k:foo,mapwrite:foo:6k@1000,unlink:G/solo",
	/* fsync mode: fresh blocks written behind (they may still go home),
	 * then changed before the sync that seals them: replaced by a
	 * whole-block rewrite and taken again by the next one; changed in
	 * place by a small write */
	"pwrite:foo:8k@8192,pwrite:foo:8k@8192,pwrite:foo:8k@8192,fsync:foo",
	"pwrite:foo:4k@4096,pwrite:foo:5000@3000,fsync:foo",
	/* 10: atomic groups, all or nothing at the commit; an abort and a
	 * close leave nothing; writes through another description meanwhile */
	"gbegin:foo,pwrite:foo:5000@3000,ftrunc:foo:100,pwrite:foo:8k@8192,gcommit:foo",
	"gbegin:foo,pwrite:foo:1k@100,gmapwrite:foo:6k@1000,pwrite:foo:100@5990,gcommit:foo",
	"gbegin:foo,pwrite:foo:8k@8192,falloc:foo:zero,gabort:foo,pwrite:foo:1@0",
	"gbegin:foo,append4k:foo,pwrite:foo:4k@4096,append3:foo,gcommit:foo",
	"gbegin:A/foo,pwrite:A/foo:200@4000,gbegin:foo,ftrunc:foo:4097,gcommit:A/foo,gmapwrite:foo:6k@1000,gcommit:foo",
	"gbegin:foo,pwrite:foo:5000@3000,unlink:foo,gcommit:foo,close:foo",
	"gbegin:foo,gmapwrite:foo:6k@1000,falloc:foo:punch,close:foo,fsync:foo",
	/* groups one after another on one description: each takes the shadow
	 * its predecessor's commit emptied and kept (group.c) */
	"gbegin:foo,pwrite:foo:5000@3000,gcommit:foo,gbegin:foo,pwrite:foo:4k@4096,ftrunc:foo:100,gcommit:foo,"
	"gbegin:foo,pwrite:foo:8k@8192,gabort:foo",
	"gbegin:foo,pwrite:foo:1k@100,gcommit:foo,gbegin:foo,gmapwrite:foo:6k@1000,gcommit:foo,gbegin:foo,"
	"pwrite:foo:1@0,gcommit:foo",
	/* groups of two files, and name changes, in one kura_group_commit:
	 * all of it or none (the gmapwrite one on the file model only) */
	"gbegin:foo,gbegin:A/foo,pwrite:foo:5000@3000,pwrite:A/foo:200@4000,gset:foo+A/foo",
	"gbegin:foo,pwrite:foo:8k@8192,gbegin:A/foo,pwrite:A/foo:200@4000,gset:foo+A/foo+mv:A/foo:B/foo",
	"gbegin:foo,append4k:foo,gset:foo+new:baz+rm:bar",
	"gbegin:A/foo,gmapwrite:A/foo:100@3900,gbegin:foo,gmapwrite:foo:6k@1000,pwrite:foo:1@0,"
	"gset:foo+A/foo+mv:A/foo:B/foo",
};

/* Every table entry alone, then the fixed scenarios. */
static CRASH_UNUSED int drv_seq1(struct ex *x)
{
	int bad = 0;
	for (int i = 0; i < WK_NOPS; i++)
		bad += drv_run(x, &i, 1) > 0;
	for (size_t k = 0; k < sizeof drv_scenarios / sizeof *drv_scenarios; k++) {
		int ops[MAX_ENTRIES], n = wk_parse(drv_scenarios[k], ops, MAX_ENTRIES - WK_SLOTS);
		bad += n < 0 || drv_run(x, ops, n) > 0;
	}
	return bad;
}

/* Pairs (i, j); when sample > 0 only those whose seeded hash falls in the
 * sample (out of 1000), so CI covers a spread of pairs, not a prefix. */
static CRASH_UNUSED int drv_seq2(struct ex *x, int per_mille)
{
	int bad = 0;
	for (int i = 0; i < WK_NOPS; i++)
		for (int j = 0; j < WK_NOPS; j++) {
			if (per_mille < 1000 && mix64(x->cfg.seed ^ (uint64_t)(i * 1000 + j)) % 1000 >= (uint64_t)per_mille)
				continue;
			int ops[2] = { i, j };
			bad += drv_run(x, ops, 2) > 0;
		}
	return bad;
}

static int drv_fails(struct ex *x, const int *ops, int n)
{
	struct ex_stats quiet = { 0 }, *saved = x->st;
	struct ex_cfg c = x->cfg;
	x->st = &quiet;
	x->cfg.stop_first = 1;
	x->cfg.max_print = 0;
	wk_note_ops(ops, n);
	int v = ex_workload(x, ops, n);
	x->st = saved;
	x->cfg = c;
	return v != 0;
}

/* Delta debugging: drop chunks, then single entries, while it still fails. */
static int drv_shrink(struct ex *x, int *ops, int n)
{
	int chunks = 2;
	while (n >= 2) {
		int size = (n + chunks - 1) / chunks, reduced = 0;
		for (int start = 0; start < n; start += size) {
			int cand[MAX_ENTRIES], m = 0;
			for (int i = 0; i < n; i++)
				if (i < start || i >= start + size)
					cand[m++] = ops[i];
			if (m && drv_fails(x, cand, m)) {
				memcpy(ops, cand, (size_t)m * sizeof *ops);
				n = m;
				chunks = chunks > 2 ? chunks - 1 : 2;
				reduced = 1;
				break;
			}
		}
		if (!reduced) {
			if (chunks >= n)
				break;
			chunks = chunks * 2 < n ? chunks * 2 : n;
		}
	}
	return n;
}

/* Runs a generated workload; if it fails, shrinks it and prints the
 * replay command.  Returns 1 if it failed. */
static int drv_run_shrinking(struct ex *x, int *ops, int n, const char *kind, uint64_t seed)
{
	if (drv_run(x, ops, n) <= 0)
		return 0;
	int m = drv_shrink(x, ops, n);
	char spec[4096];
	wk_format(ops, m, spec, sizeof spec);
	printf("%s workload (seed %llu) shrunk from %d to %d entries; replay: build/tests/crash_test "
	       "--replay '%s'%s\n",
	       kind, (unsigned long long)seed, n, m, spec, ex_flags(x));
	return 1;
}

static void drv_random_ops(uint64_t seed, int *ops, int n)
{
	uint64_t s = seed;
	for (int i = 0; i < n; i++)
		ops[i] = (int)(ex_rand(&s) % WK_NOPS);
}

/* count random workloads of len entries; a failing one is shrunk and its
 * replay command printed.  Returns the number that failed. */
static CRASH_UNUSED int drv_random(struct ex *x, uint64_t seed, int count, int len)
{
	int bad = 0;
	for (int w = 0; w < count; w++) {
		int ops[MAX_ENTRIES];
		uint64_t s = seed + (uint64_t)w;
		drv_random_ops(s, ops, len);
		bad += drv_run_shrinking(x, ops, len, "random", s);
	}
	return bad;
}

/* Entries that act on a group or on the files groups are opened on. */
static const char *const drv_group_entries[] = {
	"pwrite:foo:1@0", "pwrite:foo:3@4095", "pwrite:foo:5000@3000", "pwrite:foo:8k@8192", "pwrite:foo:10@20000",
	"append3:foo", "append4k:foo", "ftrunc:foo:100", "ftrunc:foo:4097", "ftrunc:foo:12288",
	"falloc:foo:0+16k", "falloc:foo:punch", "falloc:foo:zero", "gmapwrite:foo:6k@1000", "mapwrite:foo:10@100",
	"pwrite:A/foo:200@4000", "gbegin:A/foo", "gcommit:A/foo", "gmapwrite:A/foo:100@3900", "unlink:foo",
	"rename:foo:baz", "fsync:foo", "gabort:foo", "gcommit:foo", "gbegin:foo", "gset:foo+A/foo",
	"gset:foo+A/foo+mv:A/foo:B/foo", "gset:foo+new:baz+rm:bar", "gmapahead:foo:100@4000",
};

/* An entry of the list; the pmem model cannot hold a map's stores
 * (wk_model_ok), so there it draws again rather than lose the workload. */
static int drv_group_entry(const struct ex *x, uint64_t *s)
{
	int n = (int)(sizeof drv_group_entries / sizeof *drv_group_entries), op;
	do
		op = wk_lookup(drv_group_entries[ex_rand(s) % (uint64_t)n]);
	while (!x->cfg.file && (wk_table[op].kind == K_MAPWRITE || wk_table[op].kind == K_GMAPWRITE));
	return op;
}

/* count workloads that open a group on foo, run 2 to 6 entries from the
 * list above, then commit it (mostly), abort it or leave it to the close
 * at the end, and one more entry after. */
static CRASH_UNUSED int drv_groups(struct ex *x, uint64_t seed, int count)
{
	int bad = 0;
	for (int w = 0; w < count; w++) {
		uint64_t s = seed * 7919 + (uint64_t)w;
		int ops[MAX_ENTRIES], n = 0, len = 2 + (int)(ex_rand(&s) % 5);
		ops[n++] = wk_lookup("gbegin:foo");
		for (int i = 0; i < len; i++)
			ops[n++] = drv_group_entry(x, &s);
		uint64_t end = ex_rand(&s) % 8;
		if (end < 6)
			ops[n++] = wk_lookup("gcommit:foo");
		else if (end == 6)
			ops[n++] = wk_lookup("gabort:foo");
		ops[n++] = drv_group_entry(x, &s);
		bad += drv_run_shrinking(x, ops, n, "group", s);
	}
	return bad;
}

static void drv_summary(const struct ex_stats *st, const char *what)
{
	printf("%s: %llu workloads, %llu entries, %llu crash points; crash images generated %llu, distinct "
	       "images checked %llu, recovery-crash images %llu; violations %llu; %.1f s, %.0f images/s\n",
	       what, (unsigned long long)st->workloads, (unsigned long long)st->entries,
	       (unsigned long long)st->points, (unsigned long long)st->generated, (unsigned long long)st->checked,
	       (unsigned long long)st->recov_checked, (unsigned long long)st->violations, st->seconds,
	       st->seconds > 0 ? (st->checked + st->recov_checked) / st->seconds : 0.0);
	if (st->group_checked)
		printf("%s: %llu of the images checked crash a workload with an atomic group\n", what,
		       (unsigned long long)st->group_checked);
}

#endif
