/*
 * fuzz_index.c — libFuzzer harness for shardidx_load (shardidx_save.c), the
 * loader of index files that may be corrupt.
 *
 * Each input is loaded twice: as it is (the checksum must reject nearly
 * every mutation), and with its length and checksum fields fixed up so that
 * the structural validation behind the checksum is what gets fuzzed; the
 * second load is given the identity stored in the file itself so it is not
 * stopped at -ESTALE. Whatever loads is walked in full (every entry,
 * lookup, map, sample), must save, and must load what it saved.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_shardidx_check.h"

#define HDR_SIZE 208u

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
	       ((uint32_t)p[3] << 24);
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32);
}

static void wr64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* The format's checksum: FNV-1a 64 with bytes 16..23 counted as zero. */
static uint64_t sum(const uint8_t *p, size_t len)
{
	uint64_t h = 14695981039346656037ull;

	for (size_t i = 0; i < len; i++) {
		h ^= (i >= 16 && i < 24) ? 0 : p[i];
		h *= 1099511628211ull;
	}
	return h;
}

static void try_load(const uint8_t *data, size_t size, const void *ident, size_t identlen,
		     uint64_t seed)
{
	struct shardidx *ix = NULL;
	uint8_t *buf = malloc(size ? size : 1); /* exact size: overreads are caught */
	int r;

	ENSURE(buf);
	if (size)
		memcpy(buf, data, size);
	r = shardidx_load(buf, size, ident, identlen, &ix); /* takes buf */
	ENSURE(r == 0 || r == -EBADMSG || r == -EPROTO || r == -ESTALE || r == -ENOMEM);
	ENSURE((r == 0) == (ix != NULL));
	if (!ix)
		return;
	fz_check(ix, seed);
	fz_roundtrip(ix, seed, NULL, NULL);
	shardidx_free(ix);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t seed = fz_hash(data, size);
	const void *ident = "id";
	size_t identlen = 2;
	uint8_t *fixed;

	/* 1. as it is, with the identity the seed corpus was saved with */
	try_load(data, size, ident, identlen, seed);
	if (size < 32)
		return 0;

	/* 2. length and checksum fixed up; identity taken from the file */
	fixed = malloc(size);
	ENSURE(fixed);
	memcpy(fixed, data, size);
	wr64(fixed + 24, size);
	if (size >= HDR_SIZE) {
		uint64_t off = rd64(fixed + 96), len = rd64(fixed + 104);

		if (off <= size && len <= size - off && len == rd32(fixed + 60)) {
			ident = fixed + off;
			identlen = (size_t)len;
		}
	}
	wr64(fixed + 16, sum(fixed, size));
	try_load(fixed, size, ident, identlen, seed);
	free(fixed);
	return 0;
}
