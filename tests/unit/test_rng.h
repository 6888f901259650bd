/*
 * test_rng.h — the seeded generator of the unit tests that draw with
 * rnd(s, n) (test_idxcursor.c, test_idxrewrite.c through test_tar.h,
 * test_mountinfo.c): xorshift64 from a state the test seeds and prints,
 * so that a run repeats from its seed. Static inline: one test program is
 * one translation unit.
 */
#ifndef SHARDFS_TEST_RNG_H
#define SHARDFS_TEST_RNG_H

#include <stdint.h>

/* xorshift64 from *s (a printed seed repeats a run) */
static inline uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static inline uint32_t rnd(uint64_t *s, uint32_t n) /* 0..n-1 */
{
	return n ? (uint32_t)(rng_next(s) % n) : 0;
}

#endif
