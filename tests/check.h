/* check.h — the assertion the unit tests share: counts, and on failure says
 * where and what; each test prints "N passed, M failed" and exits non-zero
 * if anything failed. */
#ifndef KURA_TEST_CHECK_H
#define KURA_TEST_CHECK_H
#include <stdio.h>

static int passed, failed;
#define CHECK(cond, ...)                                            \
	do {                                                        \
		if (cond) {                                         \
			passed++;                                   \
		} else {                                            \
			failed++;                                   \
			printf("FAIL %s:%d: ", __FILE__, __LINE__); \
			printf(__VA_ARGS__);                        \
			printf("\n");                               \
		}                                                   \
	} while (0)

#endif
