# Thin wrapper over CMake; the build itself is described in CMakeLists.txt.
KURA_MODEL_OPS ?= 100000
CMAKE_ARGS = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKURA_MODEL_OPS=$(KURA_MODEL_OPS)
CTEST = ctest --output-on-failure -j2
# The nested makes CMake runs would otherwise announce every directory change.
MAKEFLAGS += --no-print-directory

.PHONY: all deps build check check-release check-asan check-tsan demo bench bench-durable bench-maps bench-kv bench-sqlite-batch bench-groups bench-report bench-quick model-long crash-full fuzz-long pjdfstest pjdfstest-fuse sqlite-full install clean

all: deps build

deps:
	@scripts/deps.sh

build:
	cmake -S . -B build $(CMAKE_ARGS) -DKURA_SANITIZE=
	cmake --build build -j2

# -k: a failing configuration does not hide the results of the others, yet
# make still exits non-zero.
# The SQLite source tree is the real-world import/export round trip of
# test_cli; the script fetches it when it can and says why when it cannot.
check: all
	@scripts/sqlite-src.sh build/third_party >/dev/null
	@$(MAKE) -k check-release check-asan check-tsan

check-release: build
	cd build && $(CTEST)

check-asan:
	cmake -S . -B build-asan $(CMAKE_ARGS) -DKURA_SANITIZE=address
	cmake --build build-asan -j2
	cd build-asan && UBSAN_OPTIONS=print_stacktrace=1 $(CTEST)

check-tsan:
	cmake -S . -B build-tsan $(CMAKE_ARGS) -DKURA_SANITIZE=thread
	cmake --build build-tsan -j2
	cd build-tsan && TSAN_OPTIONS=second_deadlock_stack=1 $(CTEST)

demo: all
	scripts/demo.sh

bench: all
	scripts/bench.sh

# kura on a disk pool against the kernel file system of the same disk, both
# durability modes (bench/durable.py says what each figure is).
bench-durable: all
	python3 bench/durable.py

# Loads and stores through a shared map of a kura file against tmpfs.
bench-maps: all
	python3 bench/maps.py

# The kv example (examples/kv, on atomic groups) against LevelDB:
# fillrandom/readrandom on a memory pool beside tmpfs, fillsync on a disk
# pool beside ext4 (bench/kv.py).
bench-kv: all
	python3 bench/kv.py

# SQLite with and without batch atomic write (atomic groups) on kura,
# beside tmpfs and ext4: 1,000 single-insert transactions.
bench-sqlite-batch: all
	bash bench/sqlite_batch_atomic.sh

# The cost of an atomic group's commit (one page of a 256 MiB map, one
# pwrite) on a memory pool, beside msync/fdatasync of a page on tmpfs.
bench-groups: all
	bash bench/groups.sh

# kura against the kernel with real programs (fio, metadata calls, SQLite's
# speedtest1, RocksDB's db_bench, filebench-like personalities), memory pool
# beside tmpfs and disk pool (both durability modes) beside the disk's file
# system, drawn: build/report/report.md and a PNG per workload group
# (bench/report.py).  About half an hour; bench-quick: a few minutes.
bench-report: all
	python3 bench/report.py --scale full

bench-quick: all
	python3 bench/report.py --scale quick

# Reconfigures build/ for the long run and back, so only test properties
# change and nothing is recompiled.
model-long: all
	cmake -S . -B build $(CMAKE_ARGS) -DKURA_MODEL_OPS=2000000
	(cd build && ctest --output-on-failure --no-tests=error -V -R model); rc=$$?; \
	  cmake -S . -B build $(CMAKE_ARGS) >/dev/null; exit $$rc

# The crash explorer unbounded: every entry, every pair of entries and a long
# random run, with larger per-crash-point budgets (tests/crash_test.c), under
# the pmem model (64-byte lines) and the file back end's (4 KiB pages of the
# pool file, written by the journal) in both durability modes.
crash-full: all
	build/tests/crash_test --full --jobs $$(nproc)
	build/tests/crash_test --full --jobs $$(nproc) --persist file
	build/tests/crash_test --full --jobs $$(nproc) --persist file --sync fsync
	build/tests/crash_test --full --jobs $$(nproc) --persist file --sync mixed

# The libFuzzer target for FUZZ_RUNS executions (default 10 million), built
# without comparison tracing (CMakeLists.txt says why), FUZZ_JOBS side by side
# at low priority: about 750 per second per core here, so 10 million take
# about two hours on two cores.  New inputs go to build/scratch/fuzz-long/new,
# findings to build/scratch/fuzz-long/ (crash-*, timeout-*, oom-*, leak-*);
# the corpus is only read.  fuzz/long.sh sums the executions.
FUZZ_RUNS ?= 10000000
FUZZ_JOBS ?= $(shell nproc)
fuzz-long: build
	cmake --build build --target pool_fuzz_long || { echo "fuzz-long: no libFuzzer build here (it needs clang with libclang-rt)"; exit 1; }
	fuzz/long.sh $(CURDIR)/build/fuzz/pool_fuzz_long $(FUZZ_RUNS) $(FUZZ_JOBS) build/scratch/fuzz-long $(CURDIR)/fuzz/corpus

# SQLite's full test suite (full.test: every test once, its fulltestonly)
# on tmpfs and under kura; make check runs veryquick.  Hours, not minutes.
# SQLITE_TF_ARGS=--start=FILE goes on from a test file.
sqlite-full: all
	scripts/sqlite-testfixture.sh full $(SQLITE_TF_ARGS)

# The POSIX suite pjdfstest on tmpfs and under kura (memory and file pools),
# as root; fails for any test failing under kura only.  Installs it with
# cargo the first time.
pjdfstest: all
	scripts/pjdfstest.sh

# The same suite through `kura mount` (FUSE) instead of kura run.
pjdfstest-fuse: all
	PJDFSTEST_KINDS=fuse scripts/pjdfstest.sh

# Installs bin/kura, lib/libkura.so (with its soname), lib/libkura_core.a,
# include/kura.h, the pkg-config file, man pages and bash completion under
# PREFIX (default /usr/local); DESTDIR stages it elsewhere, as packagers do.
# Installed for real by root, the new library goes into ld.so's cache.
PREFIX ?= /usr/local
install: build
	DESTDIR=$(DESTDIR) cmake --install build --prefix $(PREFIX)
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

clean:
	rm -rf build build-asan build-tsan
