/* check.h — the check the atomic-group test programs share: counts, and
 * on failure says where, what and errno (flushed: the programs fork). */
#ifndef ATOMIC_CHECK_H
#define ATOMIC_CHECK_H
#include <errno.h>
#include <stdio.h>
#include <string.h>

static int failures, checks;
#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		checks++;                                                     \
		if (!(cond)) {                                                \
			failures++;                                           \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);           \
			printf(__VA_ARGS__);                                  \
			printf(" (errno %s)\n", strerrorname_np(errno) ?: "?"); \
			fflush(stdout);                                       \
		}                                                             \
	} while (0)

#endif
