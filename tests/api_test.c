/*
 * api_test — deterministic checks of kura.h's POSIX edge cases.
 *
 * Every check states the expected value and prints expected vs got when it
 * differs; the test goes on after a failure so one run shows them all, and
 * exits 1 if any failed.  Where Linux and POSIX allow more than one answer,
 * the check accepts exactly the documented alternatives and says so.
 */
#include "api/paths.h"
#include "api/files.h"
#include "api/dirs.h"
#include "api/pool.h"
#include "api/binds.h"
#include "api/dir_index.h"
#include "api/walk_memo.h"

int main(void)
{
	snprintf(pool, sizeof pool, "/dev/shm/kura-api-%d.pool", (int)getpid());
	int r = kura_mkfs(pool, POOL_SIZE, 1);
	if (r < 0) {
		printf("FATAL: kura_mkfs(%s): %s (%s)\n", pool, en(r), kura_last_error());
		return 1;
	}
	mount_rw();
	struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
	    {"name errors", test_name_errors},     {"symlinks", test_symlinks},
	    {"trailing slash", test_trailing_slash}, {"descriptors", test_descriptors},
	    {"append", test_append},
	    {"sparse/truncate", test_sparse_truncate}, {"unlink while open", test_unlink_open},
	    {"statvfs/info", test_statvfs_info},   {"readdir cookies", test_readdir_cookies},
	    {"50k directory", test_big_dir},       {"200 MiB file", test_big_file},
	    {"read-only mount", test_read_only},   {"pool errors", test_pool_errors},
	    {"full pool", test_full_pool},         {"reopen/O_TMPFILE", test_reopen_tmpfile},
	    {"host prefix", test_host_prefix},     {"generation", test_generation},
	    {"change times", test_change_times},   {"binds", test_binds},
	    {"directory index", test_dir_index},   {"remembered walks", test_walk_memo},
	};
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
		int f0 = nfail;
		tests[i].fn();
		printf("%-20s %s\n", tests[i].name, nfail == f0 ? "ok" : "FAILED");
		fflush(stdout);
	}
	section = "final fsck";
	EXPECT(kura_unmount(fs), 0);
	EXPECT(kura_fsck(pool, 0, fsck_line, NULL), 0);
	unlink(pool);
	printf("%d passed, %d failed\n", npass, nfail);
	return nfail ? 1 : 0;
}
