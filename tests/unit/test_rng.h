/*
 * test_rng.h — the one seeded generator of the unit tests: rnd(s), the
 * next 64 bits, and rnd_n(s, n), a draw in 0..n-1 (test_idxcursor.c,
 * test_idxrewrite.c through test_tar.h, test_mountinfo.c, test_h1.c,
 * test_json.c, test_planpath.c, test_retryafter.c, tests/bench/evict_bench.c,
 * and the cache tier's and the stage's tests through test_util.h): xorshift64 from a
 * state the test seeds and prints, so that a run repeats from its seed.
 * Static inline: one test program is one translation unit.
 */
#ifndef SHARDFS_TEST_RNG_H
#define SHARDFS_TEST_RNG_H

#include <stdint.h>

/* xorshift64 from *s (a printed seed repeats a run) */
static inline uint64_t rnd(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static inline uint32_t rnd_n(uint64_t *s, uint32_t n) /* 0..n-1 */
{
	return n ? (uint32_t)(rnd(s) % n) : 0;
}

#endif
