/*
 * model_test — randomized differential test of kura against the kernel.
 *
 * Every operation is applied twice: to a kura pool through kura.h and to a
 * reference directory tree on tmpfs through ordinary system calls.  Return
 * values and errno values must agree after every step, and the whole
 * observable state (names, types, modes, sizes, link counts, contents,
 * symlink targets, hard-link structure, open descriptors) must agree at
 * regular checkpoints and after every remount.
 *
 * usage: model_test [seed [ops]]
 *   seed: argv[1], else $KURA_MODEL_SEED, else derived from time and pid
 *   ops:  argv[2], else $KURA_MODEL_OPS, else 100000
 *   $KURA_MODEL_DIR_NLINK=0 skips the directory link-count comparison.
 *   $KURA_MODEL_STATS=1 prints, per operation, how often each outcome came.
 *   $KURA_MODEL_KEEP=1 leaves the pool and the reference tree after a failure.
 *
 * Runs as root in CI, where the kernel bypasses read/write permission checks
 * (only access(X_OK) on a file without any x bit fails); kura, mounted with
 * the process's ids, is expected to answer exactly the same.
 */
#include "model/common.h"
#include "model/gen.h"
#include "model/compare.h"
#include "model/ops.h"

/* ---- mount / remount --------------------------------------------------- */

static void fsck_report(void *ctx, const char *line)
{
	(void)ctx;
	fprintf(stderr, "  fsck: %s\n", line);
}

static void do_mount(void)
{
	struct kura_mount_opts o = {0};
	int err = 0;
	fs = kura_mount(pool_path, &o, &err);
	if (!fs)
		fail("kura_mount(%s) failed: %s (%s)", pool_path, en(err ? err : -EIO), kura_last_error());
}

static void do_unmount_fsck(void)
{
	int r = kura_unmount(fs);
	fs = NULL;
	if (r < 0)
		fail("kura_unmount failed: %s", en(r));
	r = kura_fsck(pool_path, 0, fsck_report, NULL);
	if (r != 0)
		fail("kura_fsck after unmount returned %d (problems listed above)", r);
}

static void op_remount(void)
{
	op_desc("remount (close all descriptors, unmount, fsck, mount)");
	/* Kernel descriptors go too, so the open sets stay identical. */
	close_all();
	do_unmount_fsck();
	do_mount();
	check_state();
}

int main(int argc, char **argv)
{
	const char *e;
	if (argc > 1)
		seed = strtoull(argv[1], NULL, 0);
	else if ((e = getenv("KURA_MODEL_SEED")) && *e)
		seed = strtoull(e, NULL, 0);
	else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
	}
	if (argc > 2)
		nops = strtol(argv[2], NULL, 0);
	else if ((e = getenv("KURA_MODEL_OPS")) && *e)
		nops = strtol(e, NULL, 0);
	if ((e = getenv("KURA_MODEL_DIR_NLINK")) && !strcmp(e, "0"))
		cmp_dir_nlink = 0;
	printf("model: seed %" PRIu64 ", %ld ops\n", seed, nops);
	fflush(stdout);

	uint64_t sm = seed;
	for (int i = 0; i < 4; i++)
		rng_s[i] = splitmix(&sm);
	for (size_t i = 0; i < sizeof data_buf; i++)
		data_buf[i] = (unsigned char)rnd();
	memset(name255, 'n', 255);
	memset(name256, 'n', 256);
	kbuf = malloc(MAX_IO);
	rbuf = malloc(MAX_IO);

	/* Modes are compared as given; kura never applies a umask. */
	umask(0);
	snprintf(pool_path, sizeof pool_path, "/dev/shm/kura-model-%d.pool", (int)getpid());
	snprintf(ref_root, sizeof ref_root, "/dev/shm/kura-model-%d", (int)getpid());
	ref_root_len = strlen(ref_root);
	nftw(ref_root, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
	if (mkdir(ref_root, 0755) < 0) {
		fprintf(stderr, "model: mkdir %s: %s\n", ref_root, strerror(errno));
		return 1;
	}
	int r = kura_mkfs(pool_path, POOL_SIZE, 1);
	if (r < 0) {
		fprintf(stderr, "model: kura_mkfs(%s): %s (%s)\n", pool_path, en(r), kura_last_error());
		cleanup();
		return 1;
	}
	do_mount();
	/* The pool's root is created by mkfs with whatever mode it picks; align
	 * the reference root with it so the root's mode is not a difference. */
	struct stat st;
	if (kura_stat(fs, "/", &st) == 0)
		chmod(ref_root, st.st_mode & 07777);
	check_state();

	int total = 0;
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		total += ops[i].weight;
	for (opno = 0; opno < nops; opno++) {
		cur_op = NULL;
		trailing_slash = 0;
		oplog[opno % LOGN][0] = 0;
		if (rn(REMOUNT_ONE_IN) == 0) {
			op_remount();
			continue;
		}
		int x = (int)rn((uint64_t)total);
		size_t i = 0;
		while (x >= ops[i].weight)
			x -= ops[i++].weight;
		ops[i].fn();
		if (opno % CHECK_EVERY == CHECK_EVERY - 1) {
			op_note("periodic checkpoint after this op");
			check_state();
		}
	}
	opno = nops - 1;
	op_note("final checkpoint");
	check_state();
	op_note("final unmount and fsck");
	close_all();
	do_unmount_fsck();
	if (getenv("KURA_MODEL_STATS"))
		print_tally();
	printf("model: %ld ops, %ld state comparisons, seed %" PRIu64 ": OK\n", nops, ncompares, seed);
	cleanup();
	return 0;
}
