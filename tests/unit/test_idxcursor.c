/*
 * test_idxcursor.c — the per-thread cursors of shardidx_entry_get and
 * shardidx_map on compact indexes (versions 3 and 4, shardidx_index.c).
 *
 *  - seeded random shards (IDXCURSOR_SEED, IDXCURSOR_ROUNDS): sizes around
 *    the blocks of 16 entries and random ones, nested directories, names
 *    sharing prefixes, symlinks, hardlinks, explicit and implied
 *    directories, modes and mtimes; each saved as version 4 and loaded
 *    twice. Every entry read from a loaded index, in every order the
 *    daemon reads them (in order, a listing's name then its attributes,
 *    then the canon of a hardlink, the same entry again, forward jumps in
 *    and across blocks, backwards, random, the two loads of one shard and
 *    the heap index interleaved), equals, field for field, the entry of
 *    the index built from the tar (a flat index: no cursor); extents too;
 *    lookups (which scan with the same cursors) find each entry;
 *  - an index freed and another loaded (often at the same address) gives
 *    the new one's entries, never the cursor of the freed one;
 *  - 4 threads read the same loads at once, each compared as above;
 *  - counts (shardidx_decodes): a listing of n members that asks each
 *    member's name then its attributes decodes n entries (plus the
 *    entries before the first in its block), not one per ask; a hardlink's
 *    canon costs its block's prefix once; asking the same entry again or
 *    mapping it costs nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shardidx.h"
#include "test_tar.h"

/* A random shard of about n members into t (NUL blocks at the end). */
static void random_shard(uint64_t *s, uint32_t n, struct tarw *t)
{
	static const char *const dirs[] = {"", "a/", "a/b/", "c/", "c/dd/e/", "train/", "zz/"};
	static const char *const exts[] = {"jpg", "cls", "json", "txt", "jpg.meta"};
	char(*files)[128] = calloc(n + 1, 128);
	uint32_t nfiles = 0;
	uint32_t key = rnd_n(s, 1000);

	for (uint32_t i = 0; i < n; i++) {
		const char *d = dirs[rnd_n(s, sizeof(dirs) / sizeof(dirs[0]))];
		char name[128];
		uint32_t kind = rnd_n(s, 20);
		unsigned mode = rnd_n(s, 4) ? 0644 : rnd_n(s, 07777 + 1);
		uint64_t mtime = rnd_n(s, 3) ? 1700000000 + i / 3 : rnd(s) % 4000000000u;

		if (rnd_n(s, 3) == 0)
			key += 1 + rnd_n(s, 3);
		if (rnd_n(s, 8) == 0)
			snprintf(name, sizeof(name), "%sx%.*s", d, (int)rnd_n(s, 60),
				 "qwertyuiopasdfghjklzxcvbnmqwertyuiopasdfghjklzxcvbnm0123456789");
		else
			snprintf(name, sizeof(name), "%ss%06u.%s", d, key,
				 exts[rnd_n(s, sizeof(exts) / sizeof(exts[0]))]);
		if (kind == 0) { /* a directory of its own, maybe one implied already */
			size_t l = strlen(name);

			name[l] = '/';
			name[l + 1] = 0;
			tar_add(t, name, '5', NULL, 0755, mtime, 0);
		} else if (kind == 1) {
			tar_add(t, name, '2', rnd_n(s, 2) ? "../target/of/it" : "t", 0777, mtime,
				0);
		} else if (kind <= 3 && nfiles > 0) {
			tar_add(t, name, '1', files[rnd_n(s, nfiles)], mode, mtime, 0);
		} else {
			tar_add(t, name, '0', NULL, mode, mtime, rnd_n(s, 4) ? rnd_n(s, 1500) : 0);
			snprintf(files[nfiles++], 128, "%s", name);
		}
	}
	tar_room(t, 1024);
	t->len += 1024;
	free(files);
}

/* ---- indexes ------------------------------------------------------------------ */

struct shard {
	struct shardidx *ref;	/* built from the tar: flat records, no cursor */
	struct shardidx *v3[2]; /* its version 4 file, loaded twice */
	void *blob;
	size_t blob_len;
	uint32_t n;
};

static struct shardidx *load_v3(const struct shard *sh)
{
	void *copy = malloc(sh->blob_len);
	struct shardidx *ix = NULL;
	struct shardidx_info inf;
	int err;

	if (!copy)
		FAIL("malloc");
	memcpy(copy, sh->blob, sh->blob_len);
	err = shardidx_load(copy, sh->blob_len, "id", 2, &ix);
	if (err)
		FAIL("load: %d", err);
	shardidx_get_info(ix, &inf);
	if (inf.in_place_bytes == 0)
		FAIL("the version 4 file was not read in place (not compact?)");
	return ix;
}

static void shard_make(struct shard *sh, const struct tarw *t)
{
	struct shardidx_builder *b = shardidx_builder_new();
	int err;

	if (!b)
		FAIL("builder_new");
	err = shardidx_builder_feed(b, t->b, t->len);
	if (err != 1)
		FAIL("feed: %d", err);
	err = shardidx_builder_finish(b, t->len, &sh->ref);
	if (err)
		FAIL("finish: %d", err);
	err = shardidx_save(sh->ref, "id", 2, &sh->blob, &sh->blob_len);
	if (err)
		FAIL("save: %d", err);
	if (sh->blob_len < 12 || ((unsigned char *)sh->blob)[8] != 4)
		FAIL("the file saved is not version 4 (compact)");
	sh->n = shardidx_count(sh->ref);
	sh->v3[0] = load_v3(sh);
	sh->v3[1] = load_v3(sh);
}

static void shard_free(struct shard *sh)
{
	shardidx_free(sh->ref);
	shardidx_free(sh->v3[0]);
	shardidx_free(sh->v3[1]);
	free(sh->blob);
	memset(sh, 0, sizeof(*sh));
}

/* Entry i of ix against the built index's: 1 when equal (a check). */
static int check_entry(const struct shard *sh, const struct shardidx *ix, uint32_t i,
		       struct shardidx_entry *out, const char *how)
{
	struct shardidx_entry x = {0}, y = {0};
	int ok = shardidx_entry_get(ix, i, &x) == 0 && shardidx_entry_get(sh->ref, i, &y) == 0 &&
		 same_entry(&x, &y);

	CHECK(ok, "%s: entry %u of %u: '%s' against '%s'", how, i, sh->n, x.name, y.name);
	if (out)
		*out = x;
	return ok;
}

static int check_map(const struct shard *sh, const struct shardidx *ix, uint32_t i, uint64_t *s)
{
	struct shardidx_extent ex[4], ey[4];
	struct shardidx_entry y;
	uint64_t off, len;
	int nx, ny;

	if (shardidx_entry_get(sh->ref, i, &y) < 0)
		return 0;
	off = y.size ? rnd_n(s, (uint32_t)y.size) : 0;
	len = 1 + rnd_n(s, 2000);
	nx = shardidx_map(ix, i, off, len, ex, 4);
	ny = shardidx_map(sh->ref, i, off, len, ey, 4);
	for (int k = 0; nx == ny && k < nx; k++)
		if (ex[k].logical != ey[k].logical || ex[k].stream_off != ey[k].stream_off ||
		    ex[k].len != ey[k].len || ex[k].hole != ey[k].hole)
			nx = -1000; /* the extents differ (compared by field: the struct pads) */
	CHECK(nx == ny, "map of entry %u: %d against %d extents", i, nx, ny);
	return nx == ny;
}

static _Thread_local unsigned long seen_kind[4], seen_hard, seen_dirs_listed;

/* Every order the daemon reads entries in, on both loads and the built
 * index interleaved; returns the failures (the checks counted are one
 * per walk). */
static int walk_all(const struct shard *sh, uint64_t *s)
{
	uint32_t n = sh->n, bad = 0, last = 0;
	struct shardidx_entry e, d;

	/* in order */
	for (uint32_t i = 0; i < n; i++) {
		bad += !check_entry(sh, sh->v3[0], i, &e, "in order");
		seen_kind[e.type & 3]++;
		seen_hard += e.canon != i;
	}
	/* backwards */
	for (uint32_t i = n; i-- > 0;)
		bad += !check_entry(sh, sh->v3[1], i, NULL, "backwards");
	/* each directory's listing: name, attributes (canon), as readdirplus */
	for (int64_t dir = -1; dir < (int64_t)n; dir++) {
		uint32_t first, cnt;

		if (dir < 0) {
			shardidx_root(sh->v3[0], &first, &cnt);
		} else {
			if (shardidx_entry_get(sh->ref, (uint32_t)dir, &d) ||
			    d.type != SHARDIDX_DIR)
				continue;
			first = d.first_child;
			cnt = d.nchild;
			seen_dirs_listed++;
		}
		for (uint32_t k = 0; k < cnt; k++) {
			bad += !check_entry(sh, sh->v3[0], first + k, &e, "listing's name");
			bad += !check_entry(sh, sh->v3[0], e.canon, NULL, "listing's attributes");
			if (e.type == SHARDIDX_REG)
				bad += !check_map(sh, sh->v3[0], e.canon, s);
		}
	}
	/* random: the same again, the next, a jump within reach of the block,
	 * anywhere; on either load or the built index */
	for (uint32_t r = 0; r < 6 * n; r++) {
		uint32_t i, w = rnd_n(s, 5);
		const struct shardidx *ix = rnd_n(s, 5) ? sh->v3[rnd_n(s, 2)] : sh->ref;

		i = w == 0 ? last : w == 1 ? last + 1 : w == 2 ? last + rnd_n(s, 18) : rnd_n(s, n);
		if (w == 3 && last > 0)
			i = last - 1 - rnd_n(s, last < 20 ? last : 20);
		if (i >= n)
			i = rnd_n(s, n);
		bad += !check_entry(sh, ix, i, &e, "random");
		if (e.type == SHARDIDX_REG && rnd_n(s, 4) == 0)
			bad += !check_map(sh, ix, i, s);
		if (rnd_n(s, 4) == 0) { /* a lookup, then the attributes it found */
			int64_t f = shardidx_lookup(ix, e.parent, e.name, strlen(e.name));

			CHECK(f == i, "lookup of entry %u '%s': %" PRId64, i, e.name, f);
			bad += f != i || !check_entry(sh, ix, i, NULL, "after a lookup");
		}
		last = i;
	}
	/* out of range stays -EINVAL, and leaves the cursors usable */
	CHECK(shardidx_entry_get(sh->v3[0], n, &e) == -EINVAL, "entry_get(n)");
	CHECK(shardidx_map(sh->v3[0], n, 0, 1, NULL, 0) == -EINVAL, "map(n)");
	if (n > 0)
		bad += !check_entry(sh, sh->v3[0], n - 1, NULL, "after a miss");
	return (int)bad;
}

/* ---- threads ------------------------------------------------------------------ */

struct reader {
	const struct shard *sh;
	uint64_t seed;
	int bad;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;

	for (int k = 0; k < 3; k++)
		r->bad += walk_all(r->sh, &r->seed);
	return NULL;
}

/* ---- counts ------------------------------------------------------------------- */

/* n regular members at the top level; members hard[0..nh) hardlinks to
 * member to. */
static void count_shard(struct shard *sh, uint32_t n, const uint32_t *hard, int nh, uint32_t to)
{
	struct tarw t = {0};
	char name[64], target[64];

	snprintf(target, sizeof(target), "m%05u.jpg", to);
	for (uint32_t i = 0; i < n; i++) {
		int h = 0;

		for (int k = 0; k < nh; k++)
			h |= hard[k] == i;
		snprintf(name, sizeof(name), "m%05u.jpg", i);
		if (h)
			tar_add(&t, name, '1', target, 0644, 1700000000, 0);
		else
			tar_add(&t, name, '0', NULL, 0644, 1700000000 + i, 100 + i);
	}
	tar_room(&t, 1024);
	t.len += 1024;
	shard_make(sh, &t);
	free(t.b);
}

/* Decodes of a listing of [first, first + cnt) as readdirplus asks it: the
 * name of each, then the attributes of its canon. */
static uint64_t listing_decodes(const struct shardidx *ix, uint32_t first, uint32_t cnt)
{
	struct shardidx_entry e, a;
	uint64_t before = shardidx_decodes();

	for (uint32_t k = 0; k < cnt; k++)
		if (shardidx_entry_get(ix, first + k, &e) < 0 ||
		    shardidx_entry_get(ix, e.canon, &a) < 0)
			CHECK(0, "entry %u", first + k);
	return shardidx_decodes() - before;
}

static void test_counts(void)
{
	struct shard sh;
	struct shardidx_entry e;
	struct shardidx_extent ex;
	uint64_t d, before;
	static const uint32_t hard[] = {20, 30};

	/* 100 members, no hardlinks: 100 decodes (a fresh cursor per ask decodes
	 * 1 + 2 + ... + 16 a block for the names and as many for the attributes:
	 * 1,652) */
	count_shard(&sh, 100, NULL, 0, 0);
	d = listing_decodes(sh.v3[0], 0, 100);
	CHECK(d == 100, "listing 100 members: %" PRIu64 " decodes, want 100", d);
	/* the same entry again, and its map: nothing decoded */
	before = shardidx_decodes();
	CHECK(shardidx_entry_get(sh.v3[0], 99, &e) == 0 &&
		  shardidx_map(sh.v3[0], 99, 0, 1, &ex, 1) == 1,
	      "entry 99 again");
	d = shardidx_decodes() - before;
	CHECK(d == 0, "entry 99 again and its map: %" PRIu64 " decodes, want 0", d);
	/* a listing from the middle of a block (offset 37: 37 % 16 = 5 before it) */
	d = listing_decodes(sh.v3[1], 37, 40);
	CHECK(d == 5 + 40, "listing from entry 37: %" PRIu64 " decodes, want 45", d);
	/* a lookup scans entry 50's block up to it (48, 49, 50); the attributes
	 * asked for next (a lookup's reply) decode nothing more */
	before = shardidx_decodes();
	CHECK(shardidx_lookup(sh.v3[0], SHARDIDX_NONE, "m00050.jpg", 10) == 50 &&
		  shardidx_entry_get(sh.v3[0], 50, &e) == 0 && !strcmp(e.name, "m00050.jpg"),
	      "lookup of m00050.jpg");
	d = shardidx_decodes() - before;
	CHECK(d == 3, "lookup and attributes of entry 50: %" PRIu64 " decodes, want 3", d);
	/* the built index decodes nothing */
	d = listing_decodes(sh.ref, 0, 100);
	CHECK(d == 0, "listing the built index: %" PRIu64 " decodes, want 0", d);
	shard_free(&sh);

	/* 40 members, 20 and 30 hardlinks to 3: the first canon costs 3 + 1,
	 * the second nothing (the other cursor holds it), the listing 40 */
	count_shard(&sh, 40, hard, 2, 3);
	CHECK(shardidx_entry_get(sh.v3[0], 20, &e) == 0 && e.canon == 3 && e.nlink == 3,
	      "entry 20: canon %u nlink %u", e.canon, e.nlink);
	d = listing_decodes(sh.v3[1], 0, 40);
	CHECK(d == 44, "listing 40 members with 2 hardlinks: %" PRIu64 " decodes, want 44", d);
	shard_free(&sh);
}

int main(void)
{
	const char *se = getenv("IDXCURSOR_SEED"), *ro = getenv("IDXCURSOR_ROUNDS");
	uint64_t seed = se ? strtoull(se, NULL, 0) : 20261130, s;
	int rounds = ro ? atoi(ro) : 40, same_addr = 0;
	static const uint32_t sizes[] = {1, 15, 16, 17, 31, 32, 33, 255, 256, 257};

	unsetenv("SHARDFS_INDEX_VERSION");
	s = seed * 2 + 1;
	printf("seed %" PRIu64 ", %d rounds\n", seed, rounds);
	test_counts();

	for (int r = 0; r < rounds; r++) {
		struct shard sh = {0}, other = {0};
		struct tarw t = {0}, t2 = {0};
		uint32_t n = r < 10 ? sizes[r] : 1 + rnd_n(&s, 700);
		const void *addr;
		int bad;

		random_shard(&s, n, &t);
		shard_make(&sh, &t);
		bad = walk_all(&sh, &s);
		CHECK(bad == 0, "round %d (%u members, %u entries): %d entries differ", r, n, sh.n,
		      bad);

		/* free a load and load another shard: the new index, never the
		 * old one's cursor (this thread's cursors are on v3[0]'s last) */
		random_shard(&s, 1 + rnd_n(&s, 200), &t2);
		{
			struct shard tmp = {0};
			struct shardidx_entry e;

			shard_make(&tmp, &t2);
			shardidx_free(tmp.v3[0]);
			/* this thread's cursors on sh.v3[0], which goes */
			for (uint32_t i = 0; i < sh.n && i < tmp.n; i++)
				shardidx_entry_get(sh.v3[0], i, &e);
			shardidx_entry_get(sh.v3[0], 0, &e);
			addr = sh.v3[0];
			shardidx_free(sh.v3[0]);
			tmp.v3[0] = load_v3(&tmp);
			same_addr += (const void *)tmp.v3[0] == addr;
			bad = walk_all(&tmp, &s);
			CHECK(bad == 0,
			      "round %d: the index loaded after a free: %d entries differ", r, bad);
			other = tmp;
		}
		sh.v3[0] = load_v3(&sh);

		if (r % 8 == 0) { /* readers at once on the same loads */
			pthread_t th[4];
			struct reader rd[4];

			for (int k = 0; k < 4; k++) {
				rd[k] = (struct reader){.sh = k % 2 ? &sh : &other,
							.seed = rnd(&s) | 1};
				if (pthread_create(&th[k], NULL, reader_main, &rd[k]))
					FAIL("pthread_create");
			}
			for (int k = 0; k < 4; k++) {
				pthread_join(th[k], NULL);
				CHECK(rd[k].bad == 0, "round %d reader %d: %d entries differ", r, k,
				      rd[k].bad);
			}
		}
		shard_free(&sh);
		shard_free(&other);
		free(t.b);
		free(t2.b);
	}
	printf("a new load at a freed one's address: %d of %d rounds\n", same_addr, rounds);
	printf(
	    "entries walked in order: %lu files (%lu hardlinks), %lu directories (%lu listings), "
	    "%lu symlinks\n",
	    seen_kind[SHARDIDX_REG], seen_hard, seen_kind[SHARDIDX_DIR], seen_dirs_listed,
	    seen_kind[SHARDIDX_SYMLINK]);
	return check_summary("idxcursor");
}
