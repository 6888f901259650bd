/*
 * fuzz_tar.c — libFuzzer harness for the tar parser / index builder
 * (shardidx_build.c, shardidx_tree.c) and everything a built index offers.
 *
 * The input is the tar stream itself, so real tars are seeds as they are.
 * Each run builds the index twice — sequentially in chunk sizes drawn from a
 * seed derived from the input, and by "seeking" (feeding at want() only, in
 * reads of a derived size) — and requires both to save to the same bytes;
 * then walks every entry, maps whole entries and random ranges, and checks
 * that save -> load -> save is the identity (fuzz_shardidx_check.h).
 * A contract broken aborts, so libFuzzer reports it as a crash.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_shardidx_check.h"

static struct shardidx *build_seq(const uint8_t *d, size_t n, uint64_t *rng)
{
	struct shardidx_builder *b = shardidx_builder_new();
	struct shardidx *ix = NULL;
	uint64_t mode = fz_rng(rng) % 4;
	size_t cur = 0;
	int r = 0;

	ENSURE(b);
	while (cur < n && r == 0) {
		/* mode 0: tiny chunks, 1: around a block, 2: big, 3: whole */
		size_t c = mode == 0   ? 1 + (size_t)(fz_rng(rng) % 17)
			   : mode == 1 ? 500 + (size_t)(fz_rng(rng) % 30)
			   : mode == 2 ? 1 + (size_t)(fz_rng(rng) % 5000)
				       : n;
		uint64_t w = shardidx_builder_want(b);

		if (c > n - cur)
			c = n - cur;
		ENSURE(w >= cur); /* want() never goes backwards */
		if (w < cur + c)
			r = shardidx_builder_feed(b, d + w, cur + c - w);
		ENSURE(r == 0 || r == 1 || (r < 0 && r >= -4095));
		cur += c;
	}
	if (r < 0) /* a damaged stream keeps answering with the same error */
		ENSURE(shardidx_builder_feed(b, d, 0) == r);
	ENSURE(shardidx_builder_message(b) != NULL);
	r = shardidx_builder_finish(b, n, &ix);
	ENSURE(r == 0 && ix);
	return ix;
}

static struct shardidx *build_seek(const uint8_t *d, size_t n, size_t rd)
{
	struct shardidx_builder *b = shardidx_builder_new();
	struct shardidx *ix = NULL;
	uint64_t prev = 0;
	int r;

	ENSURE(b);
	for (;;) {
		uint64_t w = shardidx_builder_want(b);
		size_t len;

		ENSURE(w >= prev);
		prev = w;
		if (w >= n)
			break;
		len = n - w < rd ? (size_t)(n - w) : rd;
		r = shardidx_builder_feed(b, d + w, len);
		if (r != 0)
			break;
		/* progress: a feed of len > 0 bytes moves want() forward */
		ENSURE(shardidx_builder_want(b) > w);
	}
	r = shardidx_builder_finish(b, n, &ix);
	ENSURE(r == 0 && ix);
	return ix;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t seed = fz_hash(data, size), rng = seed;
	static const size_t reads[] = {1, 512, 513, 4096, 65536};
	struct shardidx *a, *b;
	void *sa, *sb;
	size_t la, lb;
	/* an exact-size copy: reads past the end are caught by ASan */
	uint8_t *d = malloc(size ? size : 1);

	ENSURE(d);
	if (size)
		memcpy(d, data, size);
	a = build_seq(d, size, &rng);
	b = build_seek(d, size, reads[fz_rng(&rng) % 5]);
	fz_roundtrip(a, seed, &sa, &la);
	fz_check(a, seed);
	ENSURE(shardidx_save(b, "fuzz-ident", 10, &sb, &lb) == 0);
	ENSURE(la == lb && memcmp(sa, sb, la) == 0); /* both ways give one index */
	free(sa);
	free(sb);
	shardidx_free(a);
	shardidx_free(b);
	free(d);
	return 0;
}
