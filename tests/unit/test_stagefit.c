/*
 * test_stagefit.c — the stage region's runs (fetch/fetch_stagebuf.c:
 * fetch__stagebuf_fit, _take, _put) against a model of a flag a page, on
 * seeded generated sequences (TEST_SEED repeats a run; ROUNDS rounds).
 *
 * Each round maps a region of a random size (a few pages to 64 MiB and an
 * odd page count, so the last word of bits is part-used), then takes and
 * gives back runs of random sizes (a page to a few hundred; in some rounds
 * mostly small ones, which fragment it). After every step: the run each
 * fit names is the model's first free run of its pages (first fit; none:
 * the region's page count), the free bytes are the model's, and every
 * page's bit is the model's. The searches and marks go a word of bits at a
 * time; the model goes a page at a time, as the code did before.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fetch_i.h"
#include "test_rng.h"

#define ROUNDS 120
#define STEPS  1500
#define PAGE   4096u
#define RUNS   4096

static uint64_t rng; /* test_rng.h's state, from the seed */

/* the model's first free run of n pages, or pages */
static size_t model_fit(const unsigned char *used, size_t pages, size_t n, uint64_t free_bytes)
{
	if (n == 0 || n * PAGE > free_bytes)
		return pages;
	for (size_t i = 0; i + n <= pages; i++) {
		size_t j = i;

		while (j < i + n && !used[j])
			j++;
		if (j == i + n)
			return i;
		i = j; /* j used: the next start is after it */
	}
	return pages;
}

int main(void)
{
	const char *env = getenv("TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 10) : 20261202u; /* fixed in CI */
	uint64_t fits = 0, nofits = 0;

	printf("seed %llu (set TEST_SEED to repeat)\n", (unsigned long long)seed);
	rng = seed * 2654435761u + 1;
	for (int round = 0; round < ROUNDS; round++) {
		size_t pages =
		    round % 4 == 0 ? 16384 : 1 + rnd_n(&rng, round % 4 == 1 ? 200 : 9000);
		struct fetch_stage_pool pl;
		unsigned char *used = calloc(pages, 1);
		struct {
			size_t at, n;
		} runs[RUNS];
		size_t nruns = 0, maxrun = round % 3 == 0 ? 8 : 400;
		uint64_t free_bytes = (uint64_t)pages * PAGE;

		if (!used || fetch__stagebuf_init(&pl, (uint64_t)pages * PAGE) < 0 ||
		    fetch__stagebuf_map(&pl) < 0)
			FAIL("round %d: no memory for %zu pages", round, pages);
		for (int step = 0; step < STEPS; step++) {
			if (nruns < RUNS && (nruns == 0 || rnd_n(&rng, 5) < 3)) {
				size_t n = 1 + rnd_n(&rng, (uint32_t)maxrun);
				size_t at = fetch__stagebuf_fit(&pl, n * PAGE);
				size_t want = model_fit(used, pages, n, free_bytes);
				void *fault, *buf;
				size_t nfault;

				fits++;
				CHECK(
				    at == want,
				    "round %d step %d: a run of %zu pages at %zu, the model's %zu "
				    "(%zu pages)",
				    round, step, n, at, want, pages);
				if (want >= pages) {
					nofits++;
					continue;
				}
				buf = fetch__stagebuf_take(&pl, want, n * PAGE, &fault, &nfault);
				CHECK(buf == pl.base + want * PAGE, "round %d step %d: take at %zu",
				      round, step, want);
				memset(used + want, 1, n);
				free_bytes -= n * PAGE;
				runs[nruns].at = want;
				runs[nruns++].n = n;
			} else {
				size_t k = rnd_n(&rng, (uint32_t)nruns);

				fetch__stagebuf_put(&pl, pl.base + runs[k].at * PAGE,
						    runs[k].n * PAGE);
				memset(used + runs[k].at, 0, runs[k].n);
				free_bytes += runs[k].n * PAGE;
				runs[k] = runs[--nruns];
			}
			int same = pl.free_bytes == free_bytes;

			for (size_t i = 0; i < pages; i++)
				same &= (int)((pl.used[i / 64] >> (i % 64)) & 1u) == used[i];
			CHECK(same,
			      "round %d step %d: the region's bits or free bytes are not the "
			      "model's",
			      round, step);
		}
		fetch__stagebuf_fini(&pl);
		free(used);
	}
	printf("fits: %llu, %llu of them none\n", (unsigned long long)fits,
	       (unsigned long long)nofits);
	CHECK(nofits > 100 && fits - nofits > 1000, "too few of a kind: %llu fits, %llu none",
	      (unsigned long long)fits, (unsigned long long)nofits);
	return check_summary("stagefit");
}
