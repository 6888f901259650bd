/*
 * test_files.h — the file helpers of the unit tests that build trees on
 * disk and look at what a tool left there (test_sidecarat.c,
 * test_packat.c): a failure that ends the program, a file written whole,
 * a file read back, and a seeded run of rounds (its seed, its generator,
 * its temp directory, kept when a check failed). One test program is one translation
 * unit: every helper is static inline. Include after check.h.
 */
#ifndef SHARDFS_TEST_FILES_H
#define SHARDFS_TEST_FILES_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* what failed (perror), then exit 1: nothing after it means anything */
static inline void die(const char *what)
{
	perror(what);
	exit(1);
}

/* path made (or truncated) with len bytes of data; a failure ends the
 * program */
static inline void put(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0 || write(fd, data, len) != (ssize_t)len || close(fd) < 0)
		die(path);
}

/* up to cap bytes of path into buf (one read): their count, or (size_t)-1
 * when it cannot be opened or read */
static inline size_t get(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return (size_t)-1;
	n = read(fd, buf, cap);
	close(fd);
	return n < 0 ? (size_t)-1 : (size_t)n;
}

/* the run's seed: TEST_SEED, else dflt (CI's), printed so that a run can be
 * repeated */
static inline uint64_t test_seed(uint64_t dflt)
{
	const char *env = getenv("TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 10) : dflt;

	printf("seed %llu (set TEST_SEED to repeat)\n", (unsigned long long)seed);
	return seed;
}

/* the end of test name's run, whose trees are below dir: kept and named
 * when a check failed (with the seed that repeats them), else removed;
 * check_summary's status */
static inline int trees_done(const char *name, const char *dir, uint64_t seed)
{
	char cmd[4200];

	if (check_failures()) {
		fprintf(stderr, "%s: seed %llu; trees left in %s\n", name, (unsigned long long)seed,
			dir);
	} else {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", dir);
	}
	return check_summary(name);
}

/* the seeded run's state (one test program is one translation unit): its
 * generator, seeded by test_rounds_main, and the temp directory its trees
 * are made below */
static uint64_t rng;
static char tmp[64];

/* main of test name: rounds calls of run (round 0 up) below a new temp
 * directory tmp, rng seeded from TEST_SEED (else CI's seed); trees_done's
 * status */
static inline int test_rounds_main(const char *name, int rounds, void (*run)(int round))
{
	uint64_t seed = test_seed(20261203u); /* fixed in CI */

	rng = seed * 2654435761u + 1;
	snprintf(tmp, sizeof(tmp), "/tmp/test_%s.XXXXXX", name);
	if (!mkdtemp(tmp))
		die("mkdtemp");
	for (int round = 0; round < rounds; round++)
		run(round);
	return trees_done(name, tmp, seed);
}

#endif
