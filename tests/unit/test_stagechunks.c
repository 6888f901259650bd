/*
 * test_stagechunks.c — the 2 MiB chunks of the stage's region a planned
 * epoch faults in (fetch/fetch_stagebuf.c: fetch__stagebuf_fit, _take,
 * _put; the control file's plan_stage_chunks), on seeded epochs shaped as
 * the planner's (TEST_SEED repeats a run; EPOCHS of them).
 *
 * An epoch: a plan of PATHS paths of 60-140 KiB; batches handed over as
 * fetch_planner.c does for a staged plan: once the reader's position
 * reached the mark, the paths up to its lookahead (LA bytes past the
 * position), the next mark a quarter of the paths ahead then; a batch's
 * paths grouped into spans (most one path, some two or three of the
 * batch, with up to a quarter more bytes between them), taken in the
 * order of their first path, each the class of its bytes
 * (fetch__stagebuf_size). The reader reads the paths in order but for
 * its workers' lag (a path read up to LAG paths late); a span goes back
 * once each of its paths was read.
 *
 * Checked after every take, exactly: the chunks counted (pl.chunks) are
 * the chunks any run ever reached (a flag a chunk in the test), and the
 * range take asks the caller to fault in is exactly the chunks it reached
 * first. Checked per epoch: the chunks faulted in are at most the fewest
 * the epoch's peak of pages in spans needs, plus SLACK (the region's
 * fragmentation); and no span found no run (the region is twice the
 * lookahead). On this shape the first fit faults in 269 chunks over the 12
 * epochs where their peaks need 263 (a best fit, tried: 265); a next fit
 * from a cursor (spreading the runs over the region) faults in all 32 of
 * every epoch, and 12 checks fail. So the chunks an epoch faults in are
 * its peak's, and the peak is the lookahead's (about 1.3 x it: the paths
 * read late and the bytes spans carry between their paths).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "disk_arena.h"
#include "fetch_i.h"
#include "test_rng.h"

#define EPOCHS 12
#define PATHS  6000
#define PAGE   4096u
#define CHUNKP (DISK_ARENA_CHUNK / PAGE)
#define REGION (64u << 20)  /* --plan-memory's default */
#define LA     (REGION / 2) /* a staged plan's lookahead: half the stage */
#define LAG    96u	    /* a path read up to this many paths late */
#define SLACK  1u	    /* chunks past the fewest the peak needs */
#define NSPAN  (PATHS)	    /* spans at most one a path */

static uint64_t rng; /* test_rng.h's state, from the seed */

struct span {
	size_t at, size; /* its run: first page, bytes */
	unsigned left;	 /* paths not read yet */
	int live;
};

int main(void)
{
	const char *env = getenv("TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 10) : 20261203u; /* fixed in CI */
	static uint64_t len[PATHS];
	static uint32_t span_of[PATHS], order[PATHS];
	static struct span sp[NSPAN];
	uint64_t all_chunks = 0, all_need = 0;

	printf("seed %llu (set TEST_SEED to repeat)\n", (unsigned long long)seed);
	rng = seed * 2654435761u + 1;
	for (int e = 0; e < EPOCHS; e++) {
		struct fetch_stage_pool pl;
		unsigned char reached[REGION / DISK_ARENA_CHUNK] = {0};
		uint64_t model_chunks = 0, live = 0, peak = 0, before = 0, top = 0;
		uint32_t next = 0, mark = 0, position = 0, nsp = 0, nofit = 0;
		uint64_t *at_bytes = calloc(PATHS + 1, sizeof(uint64_t));

		if (!at_bytes || fetch__stagebuf_init(&pl, REGION) < 0 ||
		    fetch__stagebuf_map(&pl) < 0)
			FAIL("epoch %d: no memory", e);
		for (uint32_t i = 0; i < PATHS; i++) {
			len[i] = 60u * 1024 + rnd_n(&rng, 80u * 1024);
			at_bytes[i + 1] = at_bytes[i] + len[i];
			span_of[i] = UINT32_MAX;
		}
		/* the read order: path i at i + a lag of up to LAG, sorted */
		{
			static uint64_t key[PATHS];

			for (uint32_t i = 0; i < PATHS; i++) {
				key[i] = ((uint64_t)(i + rnd_n(&rng, LAG)) << 32) | i;
			}
			for (uint32_t i = 1; i < PATHS; i++) { /* insertion sort: nearly sorted */
				uint64_t k = key[i];
				uint32_t j = i;

				while (j > 0 && key[j - 1] > k) {
					key[j] = key[j - 1];
					j--;
				}
				key[j] = k;
			}
			for (uint32_t i = 0; i < PATHS; i++)
				order[i] = (uint32_t)key[i];
		}
		for (uint32_t r = 0; r <= PATHS; r++) {
			/* a batch due: the paths up to LA bytes past the position */
			if (position >= mark && next < PATHS) {
				uint32_t from = next, first_span = nsp;

				while (next < PATHS && at_bytes[next] < at_bytes[position] + LA)
					next++;
				for (uint32_t i = from; i < next; i++) {
					uint32_t k, more;
					uint64_t bytes;

					if (span_of[i] != UINT32_MAX)
						continue;
					k = nsp++;
					span_of[i] = k;
					bytes = len[i];
					sp[k] = (struct span){.left = 1};
					/* a quarter of the spans join one or two later
					 * paths of the batch, the bytes between them
					 * with them */
					more = rnd_n(&rng, 4) == 0 ? 1 + rnd_n(&rng, 2) : 0;
					for (uint32_t m = 0; m < more && i + 1 < next; m++) {
						uint32_t j = i + 1 + rnd_n(&rng, next - i - 1);

						if (span_of[j] != UINT32_MAX)
							continue;
						span_of[j] = k;
						sp[k].left++;
						bytes +=
						    len[j] + rnd_n(&rng, (uint32_t)(len[j] / 4));
					}
					sp[k].size = fetch__stagebuf_size((size_t)bytes, NULL);
				}
				/* taken in the order of their first path (span_cmp) */
				for (uint32_t k = first_span; k < nsp; k++) {
					size_t at = fetch__stagebuf_fit(&pl, sp[k].size), nfault;
					size_t n = sp[k].size / PAGE, c0, c1, lo = SIZE_MAX, hi = 0;
					void *fault, *buf;

					if (at >= pl.pages) {
						nofit++;
						continue;
					}
					buf = fetch__stagebuf_take(&pl, at, sp[k].size, &fault,
								   &nfault);
					CHECK(buf == pl.base + at * PAGE, "epoch %d: take at %zu",
					      e, at);
					sp[k].at = at;
					sp[k].live = 1;
					top = at + n > top ? at + n : top;
					live += sp[k].size;
					peak = live > peak ? live : peak;
					c0 = at / CHUNKP;
					c1 = (at + n - 1) / CHUNKP;
					for (size_t c = c0; c <= c1; c++) {
						if (reached[c])
							continue;
						reached[c] = 1;
						model_chunks++;
						lo = c < lo ? c : lo;
						hi = c + 1;
					}
					CHECK(pl.chunks == model_chunks,
					      "epoch %d: %llu chunks counted, %llu reached", e,
					      (unsigned long long)pl.chunks,
					      (unsigned long long)model_chunks);
					CHECK(hi ? fault == pl.base + lo * CHUNKP * PAGE &&
						       nfault == (hi - lo) * CHUNKP * PAGE
						 : fault == NULL && nfault == 0,
					      "epoch %d: the range to fault in is not the chunks "
					      "reached first",
					      e);
				}
				mark = position + (next - position) / 4 + 1;
			}
			if (r == PATHS)
				break;
			/* the next read */
			{
				uint32_t i = order[r], k = span_of[i];

				position = i + 1 > position ? i + 1 : position;
				if (k != UINT32_MAX && sp[k].live && --sp[k].left == 0) {
					fetch__stagebuf_put(&pl, pl.base + sp[k].at * PAGE,
							    sp[k].size);
					live -= sp[k].size;
					sp[k].live = 0;
				}
			}
		}
		before = (peak + DISK_ARENA_CHUNK - 1) / DISK_ARENA_CHUNK;
		printf("epoch %d: %u spans, peak %.1f MiB in spans (%llu chunks at least), the "
		       "highest run's end %.1f MiB, %llu chunks faulted in, %u found no run\n",
		       e, nsp, (double)peak / (1 << 20), (unsigned long long)before,
		       (double)top * PAGE / (1 << 20), (unsigned long long)pl.chunks, nofit);
		CHECK(nofit == 0, "epoch %d: %u spans found no run", e, nofit);
		CHECK(pl.chunks <= before + SLACK,
		      "epoch %d: %llu chunks faulted in, the peak needs %llu (+%u)", e,
		      (unsigned long long)pl.chunks, (unsigned long long)before, SLACK);
		all_chunks += pl.chunks;
		all_need += before;
		fetch__stagebuf_fini(&pl);
		free(at_bytes);
	}
	printf("all epochs: %llu chunks faulted in, the peaks need %llu\n",
	       (unsigned long long)all_chunks, (unsigned long long)all_need);
	return check_summary("stagechunks");
}
