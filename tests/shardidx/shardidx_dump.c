/*
 * shardidx_dump — test driver for the shardidx module.
 *
 *   shardidx_dump FILE             index FILE every way, check, print JSON
 *   shardidx_dump --fuzz SEED N FILE...   N mutated / garbage inputs
 *   shardidx_dump --idxfuzz SEED FILE      corrupt a saved index every way
 *
 * Default mode builds the index of a tar file by pread-ing at want() (seeking
 * over data) and by feeding the whole stream in odd chunk sizes (1, 7, 511,
 * 512, 4096, random), asserts every build saves to identical bytes, that
 * save/load/save is the identity, checks the structure through the public
 * API, then prints one JSON object per entry and a final {"info": ...} line.
 * Byte strings (names, targets) are printed with every byte outside
 * printable ASCII escaped as \u00XX, so a reader decodes them as latin-1.
 * Content hashes are SHA-256 of the bytes read through shardidx_map from the
 * tar file (holes as zeros); an entry whose range is not in the stream
 * prints "eio": true instead.
 *
 * Exit status: 0 ok, 1 a check failed (message on stderr), 2 usage/IO error.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardidx.h"
#include "sha256.h"
#include "check.h"

static const char *g_ctx = ""; /* what is being checked, for messages */
static char g_msg[200];	       /* the last build's shardidx_builder_message */
/* the last build's shardidx_builder_skipped, which its index must say */
static char g_skip[SHARDIDX_SKIPPED_MAX + 1];

static uint64_t rng_next(uint64_t *s)
{
	/* splitmix64 */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* ---- building ------------------------------------------------------------ */

/* shardidx_builder_finish, and the index says the first member left out
 * byte for byte as the builder said it (g_skip). */
static int finish(struct shardidx_builder *b, uint64_t n, struct shardidx **ix)
{
	int r;

	snprintf(g_skip, sizeof(g_skip), "%s", shardidx_builder_skipped(b, NULL));
	r = shardidx_builder_finish(b, n, ix);
	if (r == 0 && strcmp(shardidx_skipped_first(*ix), g_skip) != 0)
		FAIL("%s: the index's first member left out '%s', the builder's '%s'", g_ctx,
		     shardidx_skipped_first(*ix), g_skip);
	return r;
}

/* Random access: read [want, want + rd) from memory, as a pread caller would. */
static struct shardidx *build_seek(const unsigned char *d, size_t n, size_t rd)
{
	struct shardidx_builder *b = shardidx_builder_new();
	struct shardidx *ix = NULL;
	int r;

	if (!b)
		FAIL("builder_new");
	for (;;) {
		uint64_t w = shardidx_builder_want(b);
		size_t len;

		if (w >= n)
			break;
		len = n - w < rd ? (size_t)(n - w) : rd;
		r = shardidx_builder_feed(b, d + w, len);
		if (r != 0)
			break;
	}
	snprintf(g_msg, sizeof(g_msg), "%s", shardidx_builder_message(b));
	r = finish(b, n, &ix);
	if (r)
		FAIL("%s: finish (seek %zu): %d", g_ctx, rd, r);
	return ix;
}

/* Sequential: the whole stream in chunks; chunk 0 means random sizes. */
static struct shardidx *build_seq(const unsigned char *d, size_t n, size_t chunk, uint64_t *rng)
{
	struct shardidx_builder *b = shardidx_builder_new();
	struct shardidx *ix = NULL;
	size_t cur = 0;
	int r = 0;

	if (!b)
		FAIL("builder_new");
	while (cur < n && r == 0) {
		size_t c = chunk ? chunk : 1 + (size_t)(rng_next(rng) % 3000);
		uint64_t w = shardidx_builder_want(b);

		if (c > n - cur)
			c = n - cur;
		if (w < cur)
			FAIL("%s: want() went backwards: %" PRIu64 " < %zu", g_ctx, w, cur);
		if (w < cur + c)
			r = shardidx_builder_feed(b, d + w, cur + c - w);
		cur += c;
	}
	r = finish(b, n, &ix);
	if (r)
		FAIL("%s: finish (seq %zu): %d", g_ctx, chunk, r);
	return ix;
}

/* The real caller: pread at want() on a file descriptor. */
static struct shardidx *build_fd(int fd, uint64_t fsize)
{
	struct shardidx_builder *b = shardidx_builder_new();
	struct shardidx *ix = NULL;
	unsigned char buf[8192];
	int r;

	if (!b)
		FAIL("builder_new");
	for (;;) {
		uint64_t w = shardidx_builder_want(b);
		ssize_t got;

		if (w >= fsize)
			break;
		got = pread(fd, buf, sizeof(buf), (off_t)w);
		if (got <= 0)
			FAIL("pread: %s", strerror(errno));
		if (shardidx_builder_feed(b, buf, (size_t)got) != 0)
			break;
	}
	r = finish(b, fsize, &ix);
	if (r)
		FAIL("finish (fd): %d", r);
	return ix;
}

static void save(const struct shardidx *ix, const char *ident, void **buf, size_t *len)
{
	int r = shardidx_save(ix, ident, strlen(ident), buf, len);

	if (r)
		FAIL("%s: save: %d", g_ctx, r);
}

static void same(const struct shardidx *a, const struct shardidx *b, const char *what)
{
	void *x, *y;
	size_t xl, yl;

	save(a, "id", &x, &xl);
	save(b, "id", &y, &yl);
	if (xl != yl || memcmp(x, y, xl))
		FAIL("%s: %s: indexes differ (%zu vs %zu bytes)", g_ctx, what, xl, yl);
	free(x);
	free(y);
}

/* ---- structural checks ---------------------------------------------------- */

static void check_map(const struct shardidx *ix, uint32_t i, const struct shardidx_entry *e,
		      const struct shardidx_info *inf)
{
	struct shardidx_extent ext[3];
	uint64_t off = 0;
	int r, trunc = !!(e->flags & SHARDIDX_F_TRUNCATED);

	r = shardidx_map(ix, i, 0, e->size, ext, 3);
	if (trunc && r != -EIO && e->size)
		FAIL("%s: entry %u truncated but map gives %d", g_ctx, i, r);
	if (!trunc && r < 0)
		FAIL("%s: entry %u: map %d", g_ctx, i, r);
	if (r < 0)
		return;
	while (off < e->size) {
		r = shardidx_map(ix, i, off, e->size - off, ext, 3);
		if (r <= 0)
			FAIL("%s: entry %u: map at %" PRIu64 ": %d", g_ctx, i, off, r);
		for (int k = 0; k < r; k++) {
			if (ext[k].logical != off || !ext[k].len)
				FAIL("%s: entry %u: extent %d not contiguous", g_ctx, i, k);
			if (!ext[k].hole && ext[k].stream_off + ext[k].len > inf->stream_size)
				FAIL("%s: entry %u: extent past the stream", g_ctx, i);
			if (ext[k].hole && !(e->flags & SHARDIDX_F_SPARSE))
				FAIL("%s: entry %u: hole in a non-sparse entry", g_ctx, i);
			off += ext[k].len;
		}
	}
	if (off != e->size)
		FAIL("%s: entry %u: extents cover %" PRIu64 " of %" PRIu64, g_ctx, i, off, e->size);
	if (shardidx_map(ix, i, e->size, 10, ext, 3) != 0)
		FAIL("%s: entry %u: map past the end not empty", g_ctx, i);
}

static void check(const struct shardidx *ix)
{
	struct shardidx_info inf;
	struct shardidx_entry e, c;
	uint32_t first, n, *in_sample;

	shardidx_get_info(ix, &inf);
	shardidx_root(ix, &first, &n);
	if (first != 0 || n > inf.nentries)
		FAIL("%s: bad root range", g_ctx);
	in_sample = calloc(inf.nentries + 1, sizeof(*in_sample));
	if (!in_sample)
		FAIL("oom");
	if (shardidx_entry_get(ix, inf.nentries, &e) != -EINVAL)
		FAIL("%s: entry_get out of range accepted", g_ctx);
	{
		uint32_t df, dn, dp;

		if (shardidx_dir_get(ix, inf.nentries, &df, &dn, &dp) != -EINVAL)
			FAIL("%s: dir_get out of range accepted", g_ctx);
	}
	for (uint32_t i = 0; i < inf.nentries; i++) {
		uint32_t lo, hi;
		int64_t f;

		if (shardidx_entry_get(ix, i, &e))
			FAIL("%s: entry_get %u", g_ctx, i);
		if (!e.name[0] || strchr(e.name, '/') || !strcmp(e.name, ".") ||
		    !strcmp(e.name, "..") || strlen(e.name) > 255)
			FAIL("%s: entry %u: bad name '%s'", g_ctx, i, e.name);
		if (e.parent == SHARDIDX_NONE) {
			lo = 0;
			hi = n;
		} else {
			if (shardidx_entry_get(ix, e.parent, &c) || c.type != SHARDIDX_DIR)
				FAIL("%s: entry %u: parent not a dir", g_ctx, i);
			lo = c.first_child;
			hi = c.first_child + c.nchild;
		}
		if (i < lo || i >= hi)
			FAIL("%s: entry %u outside its parent's children", g_ctx, i);
		/* a directory's row: what its entry says, without decoding it */
		{
			uint32_t df = 0, dn = 0, dp = 0;
			int dr = shardidx_dir_get(ix, i, &df, &dn, &dp);

			if (e.type == SHARDIDX_DIR
				? dr || df != e.first_child || dn != e.nchild || dp != e.parent
				: dr != -ENOTDIR)
				FAIL("%s: dir_get of entry %u: %d %u %u %u", g_ctx, i, dr, df, dn,
				     dp);
		}
		f = shardidx_lookup(ix, e.parent, e.name, strlen(e.name));
		if (f != i)
			FAIL("%s: lookup of entry %u '%s' gives %" PRId64, g_ctx, i, e.name, f);
		if (e.mode & ~07777)
			FAIL("%s: entry %u: mode", g_ctx, i);
		switch (e.type) {
		case SHARDIDX_DIR: {
			uint32_t nsub = 0;

			for (uint32_t j = e.first_child; j < e.first_child + e.nchild; j++) {
				if (shardidx_entry_get(ix, j, &c) || c.parent != i)
					FAIL("%s: dir %u child %u", g_ctx, i, j);
				nsub += c.type == SHARDIDX_DIR;
			}
			if (e.nlink != 2 + nsub)
				FAIL("%s: dir %u nlink %u", g_ctx, i, e.nlink);
			if (shardidx_map(ix, i, 0, 1, NULL, 0) != -EINVAL)
				FAIL("%s: map of a dir accepted", g_ctx);
			break;
		}
		case SHARDIDX_SYMLINK:
			if (!e.link || strlen(e.link) != e.size)
				FAIL("%s: symlink %u", g_ctx, i);
			break;
		case SHARDIDX_REG:
			if (e.canon != i) {
				if (!(e.flags & SHARDIDX_F_HARDLINK))
					FAIL("%s: %u canon without HARDLINK", g_ctx, i);
				if (shardidx_entry_get(ix, e.canon, &c) || c.type != SHARDIDX_REG ||
				    c.canon != e.canon || c.size != e.size ||
				    c.data_off != e.data_off || c.nlink != e.nlink || c.nlink < 2)
					FAIL("%s: hardlink %u -> %u inconsistent", g_ctx, i,
					     e.canon);
			} else if (e.flags & SHARDIDX_F_HARDLINK) {
				FAIL("%s: %u HARDLINK but its own canon", g_ctx, i);
			}
			check_map(ix, i, &e, &inf);
			break;
		default:
			FAIL("%s: entry %u: type %d", g_ctx, i, e.type);
		}
	}
	for (uint32_t s = 0, at = 0; s < inf.nsamples; s++) {
		uint32_t nf, nn;

		if (shardidx_sample_get(ix, s, &first, &n) || !n || first + n > inf.nentries)
			FAIL("%s: sample %u", g_ctx, s);
		/* the walk without the table gives the same samples */
		if (shardidx_sample_next(ix, at, &nf, &nn) || nf != first || nn != n)
			FAIL("%s: sample %u: next from %u gives %u+%u, not %u+%u", g_ctx, s, at, nf,
			     nn, first, n);
		at = first + n;
		for (uint32_t j = first; j < first + n; j++)
			in_sample[j]++;
	}
	if (inf.nsamples) {
		shardidx_sample_get(ix, inf.nsamples - 1, &first, &n);
		if (shardidx_sample_next(ix, first + n, &first, &n) != -ENOENT)
			FAIL("%s: a sample after the last", g_ctx);
	}
	if (shardidx_sample_get(ix, inf.nsamples, &first, &n) != -EINVAL)
		FAIL("%s: sample out of range accepted", g_ctx);
	for (uint32_t i = 0; i < inf.nentries; i++) {
		shardidx_entry_get(ix, i, &e);
		if (in_sample[i] != (e.type != SHARDIDX_DIR))
			FAIL("%s: entry %u in %u samples", g_ctx, i, in_sample[i]);
	}
	free(in_sample);
}

/* save -> load -> save is the identity. */
static int try_load(const unsigned char *b, size_t n, const char *ident);

static void roundtrip(const struct shardidx *ix)
{
	void *a, *b, *c;
	size_t al, bl;
	struct shardidx *ix2 = NULL;
	int r;

	save(ix, "ident-1", &a, &al);
	b = malloc(al);
	if (!b)
		FAIL("oom");
	memcpy(b, a, al);
	r = shardidx_load(b, al, "ident-1", 7, &ix2);
	if (r)
		FAIL("%s: load of a fresh save: %d", g_ctx, r);
	save(ix2, "ident-1", &c, &bl);
	if (al != bl || memcmp(a, c, al))
		FAIL("%s: save/load/save differs", g_ctx);
	if (strcmp(shardidx_skipped_first(ix2), shardidx_skipped_first(ix)) != 0)
		FAIL("%s: loaded, the first member left out is '%s', built '%s'", g_ctx,
		     shardidx_skipped_first(ix2), shardidx_skipped_first(ix));
	check(ix2);
	shardidx_free(ix2);
	if (try_load(a, al, "ident-1") != 0)
		FAIL("%s: in-place loads of a fresh save", g_ctx);
	free(a);
	free(c);
}

/* ---- JSON ------------------------------------------------------------------- */

static void json_str(const char *s, size_t len)
{
	putchar('"');
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void json_path(const struct shardidx *ix, uint32_t i)
{
	uint32_t chain[4096];
	int depth = 0;
	struct shardidx_entry e;
	char *buf;
	size_t len = 0;

	while (i != SHARDIDX_NONE && depth < 4096) {
		chain[depth++] = i;
		shardidx_entry_get(ix, i, &e);
		i = e.parent;
	}
	buf = malloc((size_t)depth * 257 + 1);
	if (!buf)
		FAIL("oom");
	while (depth--) {
		shardidx_entry_get(ix, chain[depth], &e);
		size_t l = strlen(e.name);

		memcpy(buf + len, e.name, l);
		len += l;
		if (depth)
			buf[len++] = '/';
	}
	json_str(buf, len);
	free(buf);
}

static const char *type_name(int t)
{
	return t == SHARDIDX_DIR ? "dir" : t == SHARDIDX_SYMLINK ? "symlink" : "file";
}

static int content_hash(const struct shardidx *ix, uint32_t i, uint64_t size, int fd, char hex[65])
{
	static unsigned char buf[1 << 16];
	struct shardidx_extent ext[4];
	struct sha256 h;
	uint64_t off = 0;
	int r;

	sha256_init(&h);
	while (off < size) {
		r = shardidx_map(ix, i, off, size - off, ext, 4);
		if (r < 0)
			return r;
		if (r == 0)
			FAIL("map returned no extent");
		for (int k = 0; k < r; k++) {
			uint64_t done = 0;

			while (done < ext[k].len) {
				size_t n = ext[k].len - done < sizeof(buf) ? ext[k].len - done
									   : sizeof(buf);

				if (ext[k].hole) {
					memset(buf, 0, n);
				} else {
					ssize_t got =
					    pread(fd, buf, n, (off_t)(ext[k].stream_off + done));

					if (got != (ssize_t)n)
						FAIL("short pread of mapped data");
				}
				sha256_update(&h, buf, n);
				done += n;
			}
			off += ext[k].len;
		}
	}
	sha256_hex(&h, hex);
	return 0;
}

static void print_json(const struct shardidx *ix, int fd)
{
	struct shardidx_info inf;
	struct shardidx_entry e;

	shardidx_get_info(ix, &inf);
	for (uint32_t i = 0; i < inf.nentries; i++) {
		char hex[65];

		shardidx_entry_get(ix, i, &e);
		printf("{\"i\": %u, \"path\": ", i);
		json_path(ix, i);
		printf(", \"type\": \"%s\", \"mode\": %u, \"mtime\": %" PRId64
		       ", \"size\": %" PRIu64
		       ", \"nlink\": %u, \"flags\": %u, \"data_off\": %" PRIu64 ", \"canon\": ",
		       type_name(e.type), e.mode, e.mtime, e.size, e.nlink, e.flags, e.data_off);
		json_path(ix, e.canon);
		if (e.link) {
			printf(", \"link\": ");
			json_str(e.link, strlen(e.link));
		}
		if (e.type == SHARDIDX_REG) {
			if (content_hash(ix, i, e.size, fd, hex) == -EIO)
				printf(", \"eio\": true");
			else
				printf(", \"sha256\": \"%s\"", hex);
		}
		printf("}\n");
	}
	/* the builder's message, JSON-safe: bytes other than printable ASCII,
	 * quotes and backslashes as '?' */
	for (char *m = g_msg; *m; m++)
		if (*m < 0x20 || *m > 0x7e || *m == '"' || *m == '\\')
			*m = '?';
	printf("{\"info\": {\"nentries\": %u, \"nsamples\": %u, \"stream_size\": %" PRIu64
	       ", \"end_off\": %" PRIu64 ", \"damage\": %d, \"damage_off\": %" PRIu64
	       ", \"skipped\": %u, \"mem_bytes\": %zu, \"message\": \"%s\"",
	       inf.nentries, inf.nsamples, inf.stream_size, inf.end_off, inf.damage, inf.damage_off,
	       inf.skipped, inf.mem_bytes, g_msg);
	/* the first member left out, in hex (its bytes as stored): as the
	 * builder said it, and as a saved and loaded copy of ix says it */
	{
		void *sb;
		size_t sl;
		struct shardidx *lx = NULL;

		save(ix, "id", &sb, &sl);
		if (shardidx_load(sb, sl, "id", 2, &lx) != 0)
			FAIL("%s: load of a fresh save", g_ctx);
		printf(", \"skip_built\": \"");
		for (const char *m = g_skip; *m; m++)
			printf("%02x", (unsigned char)*m);
		printf("\", \"skip_loaded\": \"");
		for (const char *m = shardidx_skipped_first(lx); *m; m++)
			printf("%02x", (unsigned char)*m);
		printf("\"}}\n");
		shardidx_free(lx);
	}
	for (uint32_t s = 0; s < inf.nsamples; s++) {
		uint32_t first, n;

		shardidx_sample_get(ix, s, &first, &n);
		printf("{\"sample\": [%u, %u]}\n", first, n);
	}
}

/* ---- modes ------------------------------------------------------------------- */

static unsigned char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	unsigned char *d = NULL;
	long sz;

	if (!f || fseek(f, 0, SEEK_END) || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fprintf(stderr, "shardidx_dump: %s: %s\n", path, strerror(errno));
		exit(2);
	}
	d = malloc((size_t)sz + 1);
	if (!d || fread(d, 1, (size_t)sz, f) != (size_t)sz) {
		fprintf(stderr, "shardidx_dump: read %s failed\n", path);
		exit(2);
	}
	fclose(f);
	*n = (size_t)sz;
	return d;
}

/* Build every way, compare, check, round-trip. Returns the seek-built index. */
static struct shardidx *build_all(const unsigned char *d, size_t n, uint64_t *rng, int heavy)
{
	static const size_t chunks[] = {1, 7, 511, 512, 4096, 0};
	struct shardidx *ref = build_seek(d, n, 512), *ix;

	ix = build_seek(d, n, 1 << 20);
	same(ref, ix, "seek 512 vs seek 1M");
	shardidx_free(ix);
	for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++) {
		if (!heavy && chunks[k] == 1 && n > (1u << 16))
			continue;
		ix = build_seq(d, n, chunks[k], rng);
		same(ref, ix, chunks[k] ? "seek vs sequential" : "seek vs random chunks");
		shardidx_free(ix);
	}
	check(ref);
	roundtrip(ref);
	return ref;
}

static int mode_dump(const char *path)
{
	uint64_t rng = 12345;
	size_t n;
	unsigned char *d = slurp(path, &n);
	struct shardidx *ix, *ix2;
	int fd = open(path, O_RDONLY);

	if (fd < 0) {
		fprintf(stderr, "shardidx_dump: %s: %s\n", path, strerror(errno));
		return 2;
	}
	g_ctx = path;
	ix = build_all(d, n, &rng, 1);
	ix2 = build_fd(fd, n);
	same(ix, ix2, "memory vs pread");
	shardidx_free(ix2);
	print_json(ix, fd);
	shardidx_free(ix);
	close(fd);
	free(d);
	return 0;
}

static void fix_cksum(unsigned char *h)
{
	unsigned sum = 0;

	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum & 0777777);
	h[155] = ' ';
}

static int mode_fuzz(uint64_t seed, long iters, int nfiles, char **files)
{
	uint64_t rng = seed;
	size_t *len = calloc((size_t)nfiles, sizeof(*len));
	unsigned char **data = calloc((size_t)nfiles, sizeof(*data));
	char ctx[128];

	if (!len || !data)
		FAIL("oom");
	fprintf(stderr, "shardidx_dump --fuzz: seed %" PRIu64 "\n", seed);
	for (int f = 0; f < nfiles; f++)
		data[f] = slurp(files[f], &len[f]);
	for (long it = 0; it < iters; it++) {
		uint64_t kind = rng_next(&rng) % 6;
		int f = nfiles ? (int)(rng_next(&rng) % (uint64_t)nfiles) : 0;
		size_t n = nfiles ? len[f] : 0;
		unsigned char *d;
		struct shardidx *ix;

		if (!nfiles || kind == 0) { /* garbage */
			n = (size_t)(rng_next(&rng) % 8192);
			d = malloc(n + 1);
			for (size_t i = 0; i < n; i++)
				d[i] = (unsigned char)rng_next(&rng);
			if (n >= 512 && rng_next(&rng) % 2)
				fix_cksum(d);
		} else {
			d = malloc(n + 1);
			memcpy(d, data[f], n);
			if (kind == 1 && n) { /* truncate */
				n = (size_t)(rng_next(&rng) % n);
			} else if (kind == 2 && n) { /* byte flips */
				int k = 1 + (int)(rng_next(&rng) % 8);

				while (k--)
					d[rng_next(&rng) % n] ^=
					    (unsigned char)(1 + rng_next(&rng) % 255);
			} else if (n >= 512) { /* flips in one block, checksum fixed up */
				size_t blk = (size_t)(rng_next(&rng) % (n / 512)) * 512;
				int k = 1 + (int)(rng_next(&rng) % 6);

				while (k--) {
					size_t at = blk + (size_t)(rng_next(&rng) % 512);
					uint64_t v = rng_next(&rng);

					d[at] = (v & 256) ? (unsigned char)v
							  : (unsigned char)"0127 /\x80\xff"[v % 8];
				}
				fix_cksum(d + blk);
			}
		}
		snprintf(ctx, sizeof(ctx), "fuzz seed %" PRIu64 " iteration %ld", seed, it);
		g_ctx = ctx;
		ix = build_all(d, n, &rng, 0);
		shardidx_free(ix);
		free(d);
	}
	for (int f = 0; f < nfiles; f++)
		free(data[f]);
	free(data);
	free(len);
	printf("fuzz ok: %ld inputs\n", iters);
	return 0;
}

static void put_cksum(unsigned char *b, size_t n)
{
	/* recompute the FNV-1a 64 checksum of the index file format */
	uint64_t h = 14695981039346656037ull;

	for (size_t i = 0; i < n; i++) {
		h ^= (i >= 16 && i < 24) ? 0 : b[i];
		h *= 1099511628211ull;
	}
	for (int i = 0; i < 8; i++)
		b[16 + i] = (unsigned char)(h >> (8 * i));
}

/* ---- loading in place ---------------------------------------------------------
 * An index read in place from read-only memory, as the daemon reads a mapped
 * index file: a write through it faults, and release must come exactly
 * once (at shardidx_free, or before an error or a decoding load returns). */
struct ro_buf {
	unsigned char *map; /* PROT_READ after the copy */
	size_t maplen;
	int released;
};

static void ro_release(void *arg)
{
	struct ro_buf *rb = arg;

	rb->released++;
}

/* Load b[0..n) from a read-only page-aligned copy at offset shift (0: in
 * place; 4: misaligned, so decoded into fresh arrays). */
static int load_ro(const unsigned char *b, size_t n, const char *ident, size_t shift,
		   struct ro_buf *rb, struct shardidx **ix)
{
	struct shardidx_info inf;
	int r;

	rb->released = 0;
	rb->maplen = n + shift + 1;
	rb->map =
	    mmap(NULL, rb->maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (rb->map == MAP_FAILED)
		FAIL("mmap: %s", strerror(errno));
	memcpy(rb->map + shift, b, n);
	if (mprotect(rb->map, rb->maplen, PROT_READ) < 0)
		FAIL("mprotect: %s", strerror(errno));
	*ix = (struct shardidx *)1; /* must be cleared on failure */
	r = shardidx_load_in_place(rb->map + shift, n, ident, strlen(ident), ro_release, rb, ix);
	if (r == 0) {
		/* versions 3 and 4 are read in place at any alignment */
		int any = n > 8 && b[8] >= 3;

		shardidx_get_info(*ix, &inf);
		if (inf.in_place_bytes != (shift && !any ? 0 : n) ||
		    rb->released != (shift && !any ? 1 : 0))
			FAIL(
			    "%s: loaded at shift %zu: in_place_bytes %zu of %zu, released %d times",
			    g_ctx, shift, inf.in_place_bytes, n, rb->released);
	} else if (*ix || rb->released != 1) {
		FAIL("%s: failed load (%d) at shift %zu: *out %p, released %d times", g_ctx, r,
		     shift, (void *)*ix, rb->released);
	}
	return r;
}

static void ro_done(struct ro_buf *rb, struct shardidx *ix)
{
	shardidx_free(ix);
	if (rb->released != 1)
		FAIL("%s: released %d times after free", g_ctx, rb->released);
	munmap(rb->map, rb->maplen);
}

/* Load b[0..n) three ways — a malloc'd copy (shardidx_load), read in place
 * from read-only memory, decoded from a misaligned copy — and return the
 * result, which must be the same each way; accepted indexes are checked
 * and must be the same index. */
static int try_load(const unsigned char *b, size_t n, const char *ident)
{
	unsigned char *c = malloc(n ? n : 1);
	struct shardidx *ix = NULL, *ro = NULL, *dec = NULL;
	struct ro_buf rb1, rb2;
	int r, r1, r2;

	memcpy(c, b, n);
	r = shardidx_load(c, n, ident, strlen(ident), &ix);
	r1 = load_ro(b, n, ident, 0, &rb1, &ro);
	r2 = load_ro(b, n, ident, 4, &rb2, &dec);
	if (r1 != r || r2 != r)
		FAIL("%s: load gives %d, in place %d, decoded %d", g_ctx, r, r1, r2);
	if (r == 0) {
		check(ix);
		check(ro);
		same(ix, ro, "loaded vs in place");
		same(ix, dec, "loaded vs decoded");
		if (strcmp(shardidx_skipped_first(ix), shardidx_skipped_first(ro)) ||
		    strcmp(shardidx_skipped_first(ix), shardidx_skipped_first(dec)))
			FAIL("%s: the first member left out differs in place or decoded", g_ctx);
	} else if (ix) {
		FAIL("%s: load failed but set *out", g_ctx);
	}
	shardidx_free(ix);
	ro_done(&rb1, ro);
	ro_done(&rb2, dec);
	return r;
}

/* The section of an index file of version v that holds byte i, by name. */
static const char *section_name(const unsigned char *b, size_t len, int v, size_t i)
{
	static const char *const v2[] = {"ident", "recs",  "names",  "sparse",
					 "segs",  "links", "samples"};
	static const char *const v4[] = {"ident",  "heads", "blocks", "dirs", "strs",
					 "sparse", "segs",  "links",  "skip"};
	int nsect = v == 4 ? 9 : 7;

	if (i < 96)
		return "header";
	if (i < 96 + 16 * (size_t)nsect)
		return "section table";
	for (int s = 0; s < nsect; s++) {
		uint64_t off = 0, l = 0;

		for (int k = 0; k < 8; k++) {
			off |= (uint64_t)b[96 + 16 * s + k] << (8 * k);
			l |= (uint64_t)b[104 + 16 * s + k] << (8 * k);
		}
		if (off <= len && i >= off && i - off < l)
			return v == 4 ? v4[s] : v2[s];
	}
	return "padding";
}

#define NAMED_MAX 16

/* Flips rejected (checksum as written) per section name. */
struct named {
	const char *name[NAMED_MAX];
	long n[NAMED_MAX];
	int count;
};

static void named_add(struct named *nm, const char *name)
{
	for (int k = 0; k < nm->count; k++)
		if (!strcmp(nm->name[k], name)) {
			nm->n[k]++;
			return;
		}
	if (nm->count < NAMED_MAX) {
		nm->name[nm->count] = name;
		nm->n[nm->count++] = 1;
	}
}

static int idxfuzz_version(uint64_t seed, const char *path, int version);

/* Two versions the loader reads: 4 (what save writes) and 2 (an older
 * release's cache, without members left out), the same seed each. */
static int mode_idxfuzz(uint64_t seed, const char *path)
{
	int r;

	fprintf(stderr, "shardidx_dump --idxfuzz: seed %" PRIu64 "\n", seed);
	size_t n, il;
	unsigned char *d = slurp(path, &n);
	struct shardidx *ix = build_seek(d, n, 4096);
	struct shardidx_info inf;
	void *ib;

	r = idxfuzz_version(seed, path, 4);
	shardidx_get_info(ix, &inf);
	if (r == 0 && inf.skipped) {
		/* version 2 cannot hold the first member left out: the hook
		 * saves version 4 */
		setenv("SHARDFS_INDEX_VERSION", "2", 1);
		save(ix, "ident", &ib, &il);
		unsetenv("SHARDFS_INDEX_VERSION");
		if (((unsigned char *)ib)[8] != 4)
			FAIL("%s: %u members left out, saved as version %d", path, inf.skipped,
			     ((unsigned char *)ib)[8]);
		printf(
		    "idxfuzz: %s: %u members left out: version 4 under SHARDFS_INDEX_VERSION=2\n",
		    path, inf.skipped);
		free(ib);
	} else if (r == 0) {
		r = idxfuzz_version(seed, path, 2);
	}
	shardidx_free(ix);
	free(d);
	return r;
}

static int idxfuzz_version(uint64_t seed, const char *path, int version)
{
	uint64_t rng = seed;
	size_t n, il;
	unsigned char *d = slurp(path, &n), *ib, *c;
	struct shardidx *ix;
	struct named nm = {0};
	long flips = 0, refixed_ok = 0, refixed_bad = 0;
	int r, nsect = version == 4 ? 9 : 7;

	g_ctx = path;
	ix = build_seek(d, n, 4096);
	if (version == 2)
		setenv("SHARDFS_INDEX_VERSION", "2", 1);
	save(ix, "ident", (void **)&ib, &il);
	unsetenv("SHARDFS_INDEX_VERSION");
	shardidx_free(ix);
	if (il < 9 || ib[8] != version)
		FAIL("%s: saved version %d, want %d", path, il > 8 ? ib[8] : -1, version);
	c = malloc(il);

	if ((r = try_load(ib, il, "ident")) != 0)
		FAIL("clean load: %d", r);
	if ((r = try_load(ib, il, "other")) != -ESTALE)
		FAIL("ident mismatch gives %d, want -ESTALE", r);
	if ((r = try_load(ib, il, "identx")) != -ESTALE)
		FAIL("ident length mismatch gives %d, want -ESTALE", r);
	memcpy(c, ib, il);
	c[8] ^= 0x40; /* any version but the one written */
	if ((r = try_load(c, il, "ident")) != -EPROTO)
		FAIL("another version gives %d, want -EPROTO", r);
	if ((r = try_load(ib, 0, "ident")) != -EBADMSG)
		FAIL("empty file gives %d", r);

	/* A section moved off 8-byte alignment (the checksum fixed): read in
	 * place its array would be misaligned, so the file is corrupt. */
	for (int sec = 0; sec < nsect; sec++) {
		uint64_t off = 0;

		memcpy(c, ib, il);
		for (int k = 0; k < 8; k++)
			off |= (uint64_t)c[96 + 16 * sec + k] << (8 * k);
		off += 4;
		for (int k = 0; k < 8; k++)
			c[96 + 16 * sec + k] = (unsigned char)(off >> (8 * k));
		put_cksum(c, il);
		g_ctx = "misaligned section";
		if ((r = try_load(c, il, "ident")) != -EBADMSG)
			FAIL("section %d at a misaligned offset gives %d", sec, r);
	}
	/* Truncation at every length. */
	for (size_t l = 0; l < il; l++) {
		g_ctx = "truncated index";
		if ((r = try_load(ib, l, "ident")) != -EBADMSG)
			FAIL("index truncated to %zu of %zu bytes gives %d", l, il, r);
	}
	/* Every byte (or a sample) flipped; then the same with the checksum
	 * recomputed, which exercises the structural validation. */
	for (size_t i = 0; i < il; i++) {
		if (il > 30000 && i >= 256 && rng_next(&rng) % (il / 20000 + 1))
			continue;
		unsigned char x = (unsigned char)(1 + rng_next(&rng) % 255);

		memcpy(c, ib, il);
		c[i] ^= x;
		g_ctx = "flipped index";
		r = try_load(c, il, "ident");
		if (r != -EBADMSG && r != -EPROTO)
			FAIL("index with byte %zu (%s) flipped loads with %d", i,
			     section_name(ib, il, version, i), r);
		flips++;
		named_add(&nm, section_name(ib, il, version, i));
		if (i >= 8 && i < 12)
			continue; /* version: -EPROTO by design */
		if (i >= 16 && i < 24)
			continue; /* the checksum itself */
		put_cksum(c, il);
		g_ctx = "flipped index, checksum fixed";
		r = try_load(c, il, "ident");
		if (r == 0)
			refixed_ok++;
		else if (r == -EBADMSG || r == -ESTALE ||
			 (r == -EPROTO && version < 4 && i >= 84 && i < 88))
			refixed_bad++; /* -EPROTO: an old file that counts members left out */
		else
			FAIL("byte %zu flipped, checksum fixed: %d", i, r);
	}
	printf("idxfuzz ok: version %d, %zu bytes, %ld flips rejected (", version, il, flips);
	for (int k = 0; k < nm.count; k++)
		printf("%s%s %ld", k ? ", " : "", nm.name[k], nm.n[k]);
	printf("); with checksum fixed: %ld rejected, %ld accepted and checked\n", refixed_bad,
	       refixed_ok);
	free(c);
	free(ib);
	free(d);
	return 0;
}

/* Save the index of a tar to a file (a fuzz corpus seed). */
static int mode_save(const char *path, const char *ident, const char *out)
{
	size_t n, il;
	unsigned char *d = slurp(path, &n);
	struct shardidx *ix = build_seek(d, n, 4096);
	void *ib;
	FILE *f;

	g_ctx = path;
	save(ix, ident, &ib, &il);
	f = fopen(out, "wb");
	if (!f || fwrite(ib, 1, il, f) != il || fclose(f) != 0)
		FAIL("%s: cannot write", out);
	shardidx_free(ix);
	free(ib);
	free(d);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "--save"))
		return mode_save(argv[2], argv[3], argv[4]);
	if (argc >= 5 && !strcmp(argv[1], "--fuzz")) {
		char *end;
		uint64_t seed = strtoull(argv[2], &end, 0);
		long iters = strtol(argv[3], NULL, 0);

		if (*end || iters < 0)
			return 2;
		return mode_fuzz(seed, iters, argc - 4, argv + 4);
	}
	if (argc == 4 && !strcmp(argv[1], "--idxfuzz")) {
		char *end;
		uint64_t seed = strtoull(argv[2], &end, 0);

		if (*end)
			return 2;
		return mode_idxfuzz(seed, argv[3]);
	}
	if (argc == 2 && argv[1][0] != '-')
		return mode_dump(argv[1]);
	fprintf(stderr, "usage: shardidx_dump FILE | --fuzz SEED N FILE... | --idxfuzz SEED FILE | "
			"--save FILE.tar IDENT OUT\n");
	return 2;
}
