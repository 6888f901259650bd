/*
 * test_idxrewrite.c — an index file read in place and rewritten in place
 * (same size) after load checked it: every offset the reader decodes from
 * it is checked at use (shardidx_i.h, shardidx__rec_in_bounds), so a reader
 * never leaves the file's tables and never answers a byte from outside them.
 *
 * Seeded random shards (IDXREWRITE_SEED, IDXREWRITE_ROUNDS): files,
 * old GNU sparse files, symlinks, hardlinks, nested explicit and implied
 * directories; each saved as version 4 and as version 2, loaded in place
 * from a heap buffer (so the ASan build sees every byte read past a
 * section's end) and once mapped from a file (MAP_SHARED, as the cache's
 * index files are, rewritten through write(2)), then rewritten in place:
 * random bytes, a random u64 or u32 (0, all ones, an entry number, a
 * table length), at random places of the file and of its last sections
 * (the side tables). Then every entry is
 * read (entry_get, its symlink's target byte by byte, dir_get, lookup of
 * its name, its whole map) on fresh cursors and again after a first pass
 * warmed them. Each answer is either the original's (the index built
 * from the tar), or a clear error (-EINVAL/-EBADMSG; map also -EIO), or,
 * when the rewrite hit the bytes that encode it, another answer inside
 * the index: a name of at most 255 bytes (not . or ..), a parent
 * before the entry, a canon and a child range inside the entries, a
 * symlink target NUL-terminated inside its size (a byte of it rewritten
 * to NUL ends it early: in bounds, as any other byte of it rewritten),
 * extents inside the entry and the stream. A rewrite of the
 * header only (read once at load) changes no answer: all are the
 * original's. Without the checks at use the ASan build reports a
 * heap-buffer-overflow (a sparse row, a segment, a symlink target, a
 * directory's child range or a name read past its section).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "shardidx.h"
#include "test_tar.h"

/* A random shard of about n members into t (NUL blocks at the end). */
static void random_shard(uint64_t *s, uint32_t n, struct tarw *t)
{
	static const char *const dirs[] = {"", "a/", "a/b/", "c/", "c/dd/e/", "train/", "zz/"};
	static const char *const exts[] = {"jpg", "cls", "json", "txt", "jpg.meta"};
	char(*files)[128] = calloc(n + 1, 128);
	uint32_t nfiles = 0, key = rnd_n(s, 1000);

	if (!files)
		FAIL("calloc");
	for (uint32_t i = 0; i < n; i++) {
		const char *d = dirs[rnd_n(s, sizeof(dirs) / sizeof(dirs[0]))];
		char name[128];
		uint32_t kind = rnd_n(s, 12);
		uint64_t mtime = 1700000000 + rnd_n(s, 100000);

		if (rnd_n(s, 3) == 0)
			key += 1 + rnd_n(s, 3);
		snprintf(name, sizeof(name), "%ss%06u.%s", d, key,
			 exts[rnd_n(s, sizeof(exts) / sizeof(exts[0]))]);
		if (kind == 0) {
			size_t l = strlen(name);

			name[l] = '/';
			name[l + 1] = 0;
			tar_add(t, name, '5', NULL, 0755, mtime, 0);
		} else if (kind <= 2) {
			tar_add(t, name, '2', rnd_n(s, 2) ? "../target/of/it" : "t", 0777, mtime,
				0);
		} else if (kind == 3 && nfiles > 0) {
			tar_add(t, name, '1', files[rnd_n(s, nfiles)], 0644, mtime, 0);
		} else if (kind <= 5) {
			tar_sparse(t, s, name, mtime);
			snprintf(files[nfiles++], 128, "%s", name);
		} else {
			tar_add(t, name, '0', NULL, 0644, mtime, rnd_n(s, 1500));
			snprintf(files[nfiles++], 128, "%s", name);
		}
	}
	tar_room(t, 1024);
	t->len += 1024;
	free(files);
}

/* ---- the reads and what each may answer ----------------------------------------- */

struct tally {
	unsigned long same, err, other;
};

/* An answer of entry_get that is not the original's: inside the index. */
static void check_other_entry(const struct shardidx_entry *x, uint32_t i, uint32_t n)
{
	size_t nl = strnlen(x->name, sizeof(x->name));

	/* a byte of it rewritten to NUL ends it early (in bounds) */
	CHECK(nl <= 255 && strcmp(x->name, ".") && strcmp(x->name, ".."),
	      "entry %u: a name of %zu bytes '%s'", i, nl, x->name);
	CHECK(x->type >= SHARDIDX_REG && x->type <= SHARDIDX_SYMLINK, "entry %u: type %u", i,
	      x->type);
	CHECK(x->parent == SHARDIDX_NONE || x->parent < i, "entry %u: parent %u", i, x->parent);
	CHECK(x->canon < n, "entry %u: canon %u of %u", i, x->canon, n);
	if (x->type == SHARDIDX_DIR)
		CHECK(x->first_child <= n && x->nchild <= n - x->first_child,
		      "entry %u: children [%u, +%u) of %u", i, x->first_child, x->nchild, n);
	if (x->type == SHARDIDX_SYMLINK) {
		/* byte by byte: a target read past its table is what ASan sees */
		uint64_t l = 0;

		CHECK(x->link != NULL, "entry %u: a symlink without a target", i);
		while (x->link && x->link[l])
			l++;
		CHECK(l <= x->size, "entry %u: a target of %" PRIu64 " bytes, size %" PRIu64, i, l,
		      x->size);
	}
}

/* The whole map of entry i: the original's extents, an error, or extents
 * inside the entry's size and the stream. */
static void check_map(const struct shardidx *ix, const struct shardidx *ref, uint32_t i,
		      uint64_t size, uint64_t stream_size, struct tally *t)
{
	struct shardidx_extent ex[4], ey[4];
	uint64_t pos = 0;
	int differ = 0;

	for (int calls = 0; pos < size && calls < 64; calls++) {
		int nx = shardidx_map(ix, i, pos, size - pos, ex, 4);
		int ny = shardidx_map(ref, i, pos, size - pos, ey, 4);

		if (nx < 0) {
			CHECK(nx == -EIO || nx == -EINVAL || nx == -EBADMSG, "map of %u: %d", i,
			      nx);
			t->err++;
			return;
		}
		CHECK(nx > 0, "map of %u at %" PRIu64 " of %" PRIu64 ": nothing", i, pos, size);
		if (nx <= 0)
			return;
		differ |= nx != ny;
		for (int k = 0; k < nx; k++) {
			const struct shardidx_extent *e = &ex[k];

			CHECK(e->logical == pos && e->len > 0 && e->len <= size - pos,
			      "map of %u: extent [%" PRIu64 ", +%" PRIu64 ") at %" PRIu64
			      " of %" PRIu64,
			      i, e->logical, e->len, pos, size);
			CHECK(e->hole || (e->stream_off <= stream_size &&
					  e->len <= stream_size - e->stream_off),
			      "map of %u: stream [%" PRIu64 ", +%" PRIu64 ") past %" PRIu64, i,
			      e->stream_off, e->len, stream_size);
			if (e->logical != pos || !e->len || e->len > size - pos)
				return;
			differ |= k >= ny || e->stream_off != ey[k].stream_off ||
				  e->len != ey[k].len || e->hole != ey[k].hole;
			pos += e->len;
		}
	}
	if (differ)
		t->other++;
	else
		t->same++;
}

/* Read every entry of ix as the daemon does; count the answers into t. */
static void read_all(const struct shardidx *ix, const struct shardidx *ref, struct tally *t)
{
	uint32_t n = shardidx_count(ref);
	struct shardidx_info inf;

	shardidx_get_info(ref, &inf);
	for (uint32_t i = 0; i < n; i++) {
		struct shardidx_entry x = {0}, y = {0};
		uint32_t first, cnt, parent;
		int64_t found;
		int rc;

		if (shardidx_entry_get(ref, i, &y) < 0)
			FAIL("the built index's entry %u", i);
		rc = shardidx_entry_get(ix, i, &x);
		if (rc < 0) {
			CHECK(rc == -EINVAL || rc == -EBADMSG, "entry %u: %d", i, rc);
			t->err++;
		} else if (same_entry(&x, &y)) {
			t->same++;
		} else {
			check_other_entry(&x, i, n);
			t->other++;
		}
		if (rc == 0 && x.type == SHARDIDX_REG)
			check_map(ix, ref, i, x.size, inf.stream_size, t);
		rc = shardidx_dir_get(ix, i, &first, &cnt, &parent);
		if (rc == 0)
			CHECK(first <= n && cnt <= n - first &&
				  (parent == SHARDIDX_NONE || parent < i),
			      "dir_get of %u: [%u, +%u) of %u, parent %u", i, first, cnt, n,
			      parent);
		else
			CHECK(rc == -ENOTDIR || rc == -EINVAL || rc == -EBADMSG,
			      "dir_get of %u: %d", i, rc);
		found = shardidx_lookup(ix, y.parent, y.name, strlen(y.name));
		CHECK(found == i || found == -ENOENT || found == -EBADMSG ||
			  (found >= 0 && found < n),
		      "lookup of entry %u '%s': %" PRId64, i, y.name, found);
	}
}

/* ---- rewrites --------------------------------------------------------------------- */

static void put64(unsigned char *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

static void put32(unsigned char *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

/* Rewrite b[0..len) in place: random bytes, or a u64/u32 of a telling
 * value, at a random place; tail: in the last quarter (the side tables). */
static void rewrite(uint64_t *s, unsigned char *b, size_t len, uint32_t n, uint32_t hdr)
{
	uint32_t times = 1 + rnd_n(s, 4);

	for (uint32_t k = 0; k < times; k++) {
		size_t lo = rnd_n(s, 2) ? hdr : len - len / 4;
		size_t at = lo + rnd_n(s, (uint32_t)(len - lo));
		static const uint64_t big[] = {0, UINT64_MAX, 1ull << 40, 0x7fffffff, 4096};
		uint32_t vals[] = {0, UINT32_MAX, n, n + 1, n * 2, rnd_n(s, n + 1), 1u << 20};

		switch (rnd_n(s, 3)) {
		case 0:
			b[at] = (unsigned char)rnd(s);
			break;
		case 1:
			at &= ~(size_t)7;
			if (at + 8 <= len)
				put64(b + at, big[rnd_n(s, sizeof(big) / sizeof(big[0]))]);
			break;
		default:
			at &= ~(size_t)3;
			if (at + 4 <= len)
				put32(b + at, vals[rnd_n(s, sizeof(vals) / sizeof(vals[0]))]);
			break;
		}
	}
}

/* file[0..len) written to a fresh file (unlinked at once) and mapped
 * read-only and shared, as the cache's index files are; *fd for the
 * writes that rewrite it under the mapping. */
static unsigned char *map_file(const void *file, size_t len, int *fd)
{
	char path[] = "/tmp/idxrewrite.XXXXXX";
	void *m;

	*fd = mkstemp(path);
	if (*fd < 0)
		FAIL("mkstemp");
	unlink(path);
	if (write(*fd, file, len) != (ssize_t)len)
		FAIL("write");
	m = mmap(NULL, len, PROT_READ, MAP_SHARED, *fd, 0);
	if (m == MAP_FAILED)
		FAIL("mmap");
	return m;
}

static void nothing(void *arg)
{
	(void)arg;
}

int main(void)
{
	const char *e = getenv("IDXREWRITE_SEED");
	uint64_t seed = e ? strtoull(e, NULL, 0) : 0x1dc0ffee5eedull;
	int rounds = getenv("IDXREWRITE_ROUNDS") ? atoi(getenv("IDXREWRITE_ROUNDS")) : 24;
	struct tally all = {0}, hdr_only = {0};
	unsigned long trials = 0;
	uint64_t s = seed | 1;

	printf("IDXREWRITE_SEED=0x%" PRIx64 " IDXREWRITE_ROUNDS=%d\n", seed, rounds);
	for (int r = 0; r < rounds; r++) {
		struct tarw t = {0};
		struct shardidx_builder *bld = shardidx_builder_new();
		struct shardidx *ref = NULL;
		uint32_t n = 1 + rnd_n(&s, r % 3 == 0 ? 40 : 300);

		random_shard(&s, n, &t);
		if (!bld || shardidx_builder_feed(bld, t.b, t.len) != 1 ||
		    shardidx_builder_finish(bld, t.len, &ref))
			FAIL("building round %d's index", r);
		n = shardidx_count(ref);
		for (int ver = 4; ver >= 2; ver -= 2) { /* 4: the compact file, 2: the old */
			void *file;
			size_t len;

			struct shardidx_info ri;

			shardidx_get_info(ref, &ri);
			if (ver == 2 && ri.skipped)
				continue; /* version 2 cannot name a member left out: saved as 4 */
			setenv("SHARDFS_INDEX_VERSION", ver == 4 ? "4" : "2", 1);
			if (shardidx_save(ref, "id", 2, &file, &len))
				FAIL("save");
			if (((unsigned char *)file)[8] != ver)
				FAIL("saved version %u, not %d", ((unsigned char *)file)[8], ver);
			for (int k = 0; k < 13; k++) {
				/* a heap copy, 8-byte aligned: read in place, and every
				 * byte past a section is the ASan build's to see; the
				 * last: the file mapped as the daemon maps it, then
				 * rewritten through write(2) */
				int mapped = k == 12, fd = -1;
				unsigned char *b = mapped ? map_file(file, len, &fd) : malloc(len);
				struct shardidx *ix = NULL;
				struct shardidx_info inf;
				int hdr = k == 0;

				if (!b)
					FAIL("malloc");
				if (!mapped)
					memcpy(b, file, len);
				if (shardidx_load_in_place(b, len, "id", 2, nothing, NULL, &ix))
					FAIL("load of round %d version %d", r, ver);
				shardidx_get_info(ix, &inf);
				CHECK(inf.in_place_bytes == len, "read in place: %zu",
				      inf.in_place_bytes);
				if (k % 2) /* cursors warmed before the rewrite */
					read_all(ix, ref, &(struct tally){0});
				if (hdr) { /* the header only: read at load, never again */
					for (int j = 32; j < 96; j++)
						b[j] = (unsigned char)rnd(&s);
				} else if (mapped) {
					unsigned char *w = malloc(len);

					if (!w)
						FAIL("malloc");
					memcpy(w, file, len);
					rewrite(&s, w, len, n, 208);
					if (pwrite(fd, w, len, 0) != (ssize_t)len)
						FAIL("pwrite");
					free(w);
				} else {
					rewrite(&s, b, len, n, 208);
				}
				read_all(ix, ref, hdr ? &hdr_only : &all);
				read_all(ix, ref, hdr ? &hdr_only : &all); /* warm cursors */
				shardidx_free(ix);
				if (mapped) {
					munmap(b, len);
					close(fd);
				} else {
					free(b);
				}
				trials++;
			}
			free(file);
		}
		shardidx_free(ref);
		free(t.b);
	}
	CHECK(hdr_only.err == 0 && hdr_only.other == 0,
	      "a rewrite of the header changed %lu answers, failed %lu", hdr_only.other,
	      hdr_only.err);
	CHECK(all.err > 0 && all.other > 0 && all.same > 0,
	      "the rewrites gave every kind of answer (same %lu, error %lu, other %lu)", all.same,
	      all.err, all.other);
	printf("%lu rewrites: answers the original's %lu, errors %lu, others inside the index "
	       "%lu; header only: %lu the original's\n",
	       trials, all.same, all.err, all.other, hdr_only.same);
	return check_summary("idxrewrite");
}
