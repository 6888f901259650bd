/*
 * check.h — the assertions of the C tests (tests/unit, tests/shardidx, tests/fuzz).
 * One test program is one translation unit: the counters are static to it, and atomic
 * (threads of a test may check).
 *
 *   CHECK(cond, fmt, ...)  counts a check; a false cond prints
 *                          "FAIL file:line: cond: message" on stderr, counts a failure and
 *                          the test goes on (so one run reports every broken check).
 *   FAIL(fmt, ...)         prints "FAIL file:line: message" on stderr and exits 1: for a
 *                          state the rest of the program cannot go on from.
 *   ENSURE(cond)           a broken contract aborts: libFuzzer reports the crash with the
 *                          input that broke it (the fuzz harnesses).
 *   check_failures(), check_count()   the counts so far.
 *   check_summary(name)    prints "name: N checks passed" on stdout, or
 *                          "name: F of N checks failed" on stderr; returns the exit code
 *                          (0 or 1: also when no check was made) for main to return.
 */
#ifndef SHARDFS_TEST_CHECK_H
#define SHARDFS_TEST_CHECK_H

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static inline atomic_int *check__failures(void)
{
	static atomic_int n;
	return &n;
}

static inline atomic_int *check__count(void)
{
	static atomic_int n;
	return &n;
}

static inline int check_failures(void)
{
	return atomic_load(check__failures());
}

static inline int check_count(void)
{
	return atomic_load(check__count());
}

static inline int check_summary(const char *name)
{
	if (check_failures()) {
		fprintf(stderr, "%s: %d of %d checks failed\n", name, check_failures(),
			check_count());
		return 1;
	}
	if (check_count() == 0) { /* a test that checked nothing proves nothing */
		fprintf(stderr, "%s: no check was made\n", name);
		return 1;
	}
	printf("%s: %d checks passed\n", name, check_count());
	return 0;
}

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		atomic_fetch_add(check__count(), 1);                                               \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);            \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			atomic_fetch_add(check__failures(), 1);                                    \
		}                                                                                  \
	} while (0)

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                               \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fprintf(stderr, "\n");                                                             \
		exit(1);                                                                           \
	} while (0)

#define ENSURE(cond)                                                                               \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: contract broken: %s\n", __FILE__, __LINE__,   \
				#cond);                                                            \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

#endif
