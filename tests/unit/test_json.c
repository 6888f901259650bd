/*
 * test_json.c — the JSON reader (disk/disk_json.h) on generated documents.
 *
 * Each round writes a random document from a seed (nested objects and
 * arrays, strings with every escape, \u of 1-, 2- and 3-byte characters and
 * surrogate pairs, raw bytes >= 0x80, numbers up to and past UINT64_MAX) and
 * knows what it holds; the reader must give back exactly that: each
 * top-level member by disk_json_get, its string unescaped, its number's
 * value or -ERANGE. Then every proper prefix of the document (a truncated
 * answer) must be -EBADMSG, and random byte flips must give an error or a
 * token inside the input, never more. Every document is read from the end
 * of a page whose next page is unmapped, so a read past the end crashes
 * the test in the plain build too (ASan catches it anyway).
 * Fixed cases: nesting at the limit and one past it (-ELOOP, and why says
 * so), the syntax errors one by one, \u0000, disk_json_esc round trips.
 *
 * Replayable: JSON_SEED=N (default 1) and JSON_ROUNDS=N (default 300);
 * a failure prints the seed of its round.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "disk_json.h"
#include "test_rng.h"

/* ---- a guarded buffer: the input ends where the mapping does ---------- */

static char *guard_base;
static size_t guard_page;

#define GUARD_PAGES 16

static void guard_init(void)
{
	guard_page = (size_t)sysconf(_SC_PAGESIZE);
	guard_base = mmap(NULL, (GUARD_PAGES + 1) * guard_page, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (guard_base == MAP_FAILED ||
	    mprotect(guard_base + GUARD_PAGES * guard_page, guard_page, PROT_NONE) < 0)
		FAIL("mmap: %s", strerror(errno));
}

/* s[0..len) copied so that its last byte is the last readable one. */
static const char *guarded(const char *s, size_t len)
{
	char *p = guard_base + GUARD_PAGES * guard_page - len;

	if (len > GUARD_PAGES * guard_page)
		FAIL("document of %zu bytes is too long for the guard", len);
	memcpy(p, s, len);
	return p;
}

/* ---- the generator ------------------------------------------------------ */

static uint64_t rng; /* test_rng.h's state, from the seed */

struct buf {
	char *p;
	size_t n, cap;
};

static void put(struct buf *b, const void *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		b->cap = (b->n + n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			FAIL("out of memory");
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void puts_(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

static void blanks(struct buf *b)
{
	static const char *const ws[] = {"", "", " ", "\n", "\t ", "\r\n  "};

	puts_(b, ws[rnd_n(&rng, 6)]);
}

static void utf8(struct buf *b, uint32_t cp)
{
	unsigned char u[4];
	size_t n;

	if (cp < 0x80) {
		u[0] = (unsigned char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (unsigned char)(0xc0 | cp >> 6);
		u[1] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (unsigned char)(0xe0 | cp >> 12);
		u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		u[0] = (unsigned char)(0xf0 | cp >> 18);
		u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
		u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		u[3] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	put(b, u, n);
}

/* A random string literal into doc, what it decodes to into want. */
static void gen_string(struct buf *doc, struct buf *want)
{
	unsigned n = rnd_n(&rng, 4) ? rnd_n(&rng, 12) : rnd_n(&rng, 300);
	char esc[16];

	puts_(doc, "\"");
	for (unsigned i = 0; i < n; i++) {
		uint32_t cp;

		switch (rnd_n(&rng, 8)) {
		case 0: { /* a short escape */
			static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
			unsigned k = rnd_n(&rng, 8);

			esc[0] = '\\';
			esc[1] = from[k];
			put(doc, esc, 2);
			put(want, &to[k], 1);
			break;
		}
		case 1: /* \u of 1, 2 or 3 UTF-8 bytes (not a surrogate, not NUL) */
			do
				cp = 1 + rnd_n(&rng, rnd_n(&rng, 2) ? 0x7f : 0xfffe);
			while (cp >= 0xd800 && cp < 0xe000);
			snprintf(esc, sizeof(esc), rnd_n(&rng, 2) ? "\\u%04x" : "\\u%04X", cp);
			puts_(doc, esc);
			utf8(want, cp);
			break;
		case 2: /* a surrogate pair */
			cp = 0x10000 + rnd_n(&rng, 0x100000);
			snprintf(esc, sizeof(esc), "\\u%04x\\u%04x",
				 0xd800 + ((cp - 0x10000) >> 10),
				 0xdc00 + ((cp - 0x10000) & 0x3ff));
			puts_(doc, esc);
			utf8(want, cp);
			break;
		case 3: /* a raw byte >= 0x80: passed through */
			esc[0] = (char)(0x80 + rnd_n(&rng, 0x80));
			put(doc, esc, 1);
			put(want, esc, 1);
			break;
		default: /* printable ASCII but the quote and the backslash */
			do
				esc[0] = (char)(0x20 + rnd_n(&rng, 0x5f));
			while (esc[0] == '"' || esc[0] == '\\');
			put(doc, esc, 1);
			put(want, esc, 1);
			break;
		}
	}
	puts_(doc, "\"");
}

/* A random number; *v and *fits its value when it is an unsigned integer
 * (fits 0: beyond UINT64_MAX), *integer 0 when it is not one. */
static void gen_number(struct buf *doc, uint64_t *v, int *integer, int *fits)
{
	char t[64];

	*integer = 1;
	*fits = 1;
	switch (rnd_n(&rng, 6)) {
	case 0:
		*v = rnd(&rng);
		snprintf(t, sizeof(t), "%" PRIu64, *v);
		break;
	case 1:
		*v = rnd_n(&rng, 1000);
		snprintf(t, sizeof(t), "%" PRIu64, *v);
		break;
	case 2: /* past UINT64_MAX: 18446744073709551616 and above, or just huge */
		*fits = 0;
		if (rnd_n(&rng, 2))
			snprintf(t, sizeof(t), "1844674407370955161%u", 6 + rnd_n(&rng, 4));
		else
			snprintf(t, sizeof(t), "%" PRIu64 "%" PRIu64 "0", rnd(&rng) | 1, rnd(&rng));
		break;
	case 3:
		*v = UINT64_MAX;
		snprintf(t, sizeof(t), "%" PRIu64, *v);
		break;
	case 4:
		*integer = 0;
		snprintf(t, sizeof(t), "-%u", 1 + rnd_n(&rng, 100));
		break;
	default:
		*integer = 0;
		snprintf(t, sizeof(t), "%u.%u%s", rnd_n(&rng, 100), rnd_n(&rng, 100),
			 rnd_n(&rng, 2)	  ? "e-7"
			 : rnd_n(&rng, 2) ? "E+300"
					  : "");
		break;
	}
	puts_(doc, t);
}

/* Any value, depth levels deep at most, into doc (what it is not known). */
static void gen_any(struct buf *doc, unsigned depth)
{
	struct buf junk = {0};
	uint64_t v;
	int a, b;

	switch (depth ? rnd_n(&rng, 7) : 2 + rnd_n(&rng, 5)) {
	case 0:
	case 1: {
		int obj = rnd_n(&rng, 2), n = (int)rnd_n(&rng, 4);

		puts_(doc, obj ? "{" : "[");
		for (int i = 0; i < n; i++) {
			if (i)
				puts_(doc, ",");
			blanks(doc);
			if (obj) {
				gen_string(doc, &junk);
				blanks(doc);
				puts_(doc, ":");
				blanks(doc);
			}
			gen_any(doc, depth - 1);
			blanks(doc);
		}
		puts_(doc, obj ? "}" : "]");
		break;
	}
	case 2:
		gen_string(doc, &junk);
		break;
	case 3:
		gen_number(doc, &v, &a, &b);
		break;
	default: {
		static const char *const lit[] = {"true", "false", "null"};

		puts_(doc, lit[rnd_n(&rng, 3)]);
	}
	}
	free(junk.p);
}

/* What a top-level member holds. */
struct member {
	char key[16];
	int kind; /* 0 string, 1 number, 2 anything else */
	struct buf s;
	uint64_t v;
	int integer, fits;
};

#define MEMBERS 8

/* A document of MEMBERS members named k0..k7 (the names written with
 * escapes sometimes). */
static void gen_doc(struct buf *doc, struct member *m)
{
	blanks(doc);
	puts_(doc, "{");
	for (int i = 0; i < MEMBERS; i++) {
		memset(&m[i], 0, sizeof(m[i]));
		snprintf(m[i].key, sizeof(m[i].key), "k%d", i);
		if (i)
			puts_(doc, ",");
		blanks(doc);
		if (rnd_n(&rng, 3) == 0) {
			char k[32];

			snprintf(k, sizeof(k), "\"\\u006b%d\"", i); /* \u006b is k */
			puts_(doc, k);
		} else {
			puts_(doc, "\"");
			puts_(doc, m[i].key);
			puts_(doc, "\"");
		}
		blanks(doc);
		puts_(doc, ":");
		blanks(doc);
		m[i].kind = (int)rnd_n(&rng, 3);
		if (m[i].kind == 0) {
			put(&m[i].s, "", 0);
			gen_string(doc, &m[i].s);
		} else if (m[i].kind == 1) {
			gen_number(doc, &m[i].v, &m[i].integer, &m[i].fits);
		} else {
			gen_any(doc, 1 + rnd_n(&rng, 6));
		}
		blanks(doc);
	}
	puts_(doc, "}");
	blanks(doc);
}

/* ---- the checks ---------------------------------------------------------- */

static void check_doc(const char *d, size_t len, struct member *m, uint64_t seed)
{
	for (int i = 0; i < MEMBERS; i++) {
		struct disk_json_tok t;
		int err = disk_json_get(d, len, m[i].key, &t);

		CHECK(err == 0, "seed %" PRIu64 ": %s: %d", seed, m[i].key, err);
		if (err)
			continue;
		CHECK(t.p >= d && t.p + t.len <= d + len, "seed %" PRIu64 ": token outside", seed);
		if (m[i].kind == 0) {
			char *out = malloc(t.len);
			ssize_t n = disk_json_str(&t, out, t.len);

			CHECK(n == (ssize_t)m[i].s.n && memcmp(out, m[i].s.p, m[i].s.n) == 0 &&
				  out[n] == '\0',
			      "seed %" PRIu64 ": %s: %zd bytes, want %zu", seed, m[i].key, n,
			      m[i].s.n);
			CHECK(m[i].s.n == 0 || disk_json_str(&t, out, m[i].s.n) == -ENOSPC,
			      "seed %" PRIu64 ": one byte short must be -ENOSPC", seed);
			CHECK(memchr(m[i].s.p, 0, m[i].s.n) || disk_json_streq(&t, m[i].s.p) == 1,
			      "seed %" PRIu64 ": streq", seed);
			free(out);
		} else if (m[i].kind == 1) {
			uint64_t v = 0;

			err = disk_json_u64(&t, &v);
			CHECK(!m[i].integer ? err == -EINVAL
			      : !m[i].fits  ? err == -ERANGE
					    : err == 0 && v == m[i].v,
			      "seed %" PRIu64 ": %s: %.*s gives %d %" PRIu64, seed, m[i].key,
			      (int)t.len, t.p, err, v);
		}
	}
	{
		struct disk_json_tok t;

		CHECK(disk_json_get(d, len, "absent", &t) == -ENOENT, "seed %" PRIu64, seed);
	}
}

static void test_generated(uint64_t seed0, unsigned rounds)
{
	for (unsigned r = 0; r < rounds; r++) {
		uint64_t seed = seed0 + r;
		struct buf doc = {0};
		struct member m[MEMBERS];
		const char *d;
		struct disk_json_tok t;
		int bad = 0;

		rng = seed * 0x9e3779b97f4a7c15ull + 1;
		gen_doc(&doc, m);
		if (doc.n > GUARD_PAGES * guard_page) {
			free(doc.p);
			continue;
		}
		d = guarded(doc.p, doc.n);
		check_doc(d, doc.n, m, seed);
		/* every proper prefix is cut short: -EBADMSG and nothing read past it
		 * (blanks after the object are not part of it: start from the '}') */
		for (size_t n = (size_t)(strrchr(doc.p, '}') - doc.p); n-- > 0;) {
			const char *p = guarded(doc.p, n);

			if (disk_json_get(p, n, "k0", &t) != -EBADMSG)
				bad++;
		}
		CHECK(bad == 0, "seed %" PRIu64 ": %d prefixes not refused", seed, bad);
		/* flipped bytes: an error, or a token inside the input */
		for (int k = 0; k < 64; k++) {
			char *p = (char *)guarded(doc.p, doc.n);
			int err;

			p[rnd_n(&rng, (unsigned)doc.n)] = (char)rnd(&rng);
			err = disk_json_get(p, doc.n, m[rnd_n(&rng, MEMBERS)].key, &t);
			if (err == 0 && (t.p < p || t.p + t.len > p + doc.n))
				bad++;
			if (err != 0 && err != -ENOENT && err != -EBADMSG)
				bad++;
		}
		CHECK(bad == 0, "seed %" PRIu64 ": flips gave %d bad answers", seed, bad);
		for (int i = 0; i < MEMBERS; i++)
			free(m[i].s.p);
		free(doc.p);
	}
}

/* Nesting: max_depth levels read, one more is -ELOOP with a why that says so. */
static void test_depth(void)
{
	char doc[6 * DISK_JSON_MAX_DEPTH];
	struct disk_json j;
	struct disk_json_tok t;

	for (unsigned depth = DISK_JSON_MAX_DEPTH; depth <= DISK_JSON_MAX_DEPTH + 1; depth++) {
		size_t n = 0;
		const char *d;

		/* [{"":[{"":[ ... 1 ... ]}]}] */
		for (unsigned i = 0; i < depth; i++) {
			if (i % 2) {
				memcpy(doc + n, "{\"\":", 4);
				n += 4;
			} else {
				doc[n++] = '[';
			}
		}
		doc[n++] = '1';
		for (unsigned i = depth; i-- > 0;)
			doc[n++] = i % 2 ? '}' : ']';
		d = guarded(doc, n);
		disk_json_init(&j, d, n, 0);
		if (depth == DISK_JSON_MAX_DEPTH) {
			CHECK(disk_json_value(&j, &t) == 0 && t.len == n && disk_json_end(&j) == 0,
			      "%u levels: %s", depth, j.why ? j.why : "");
		} else {
			CHECK(disk_json_value(&j, &t) == -ELOOP && j.why && strstr(j.why, "deep") &&
				  j.at == 5 * (DISK_JSON_MAX_DEPTH / 2),
			      "%u levels: %s at %zu", depth, j.why ? j.why : "", j.at);
		}
	}
	/* a lower limit of the caller's */
	disk_json_init(&j, "[[[1]]]", 7, 2);
	CHECK(disk_json_value(&j, &t) == -ELOOP, "max_depth 2");
	disk_json_init(&j, "[[1]]", 5, 2);
	CHECK(disk_json_value(&j, &t) == 0, "max_depth 2 allows 2");
	/* 100,000 brackets: refused at the limit, no stack used */
	{
		size_t n = 100000;
		char *deep = malloc(n);

		memset(deep, '[', n);
		CHECK(disk_json_get(deep, n, "k", &t) == -EBADMSG, "not an object");
		disk_json_init(&j, deep, n, 0);
		CHECK(disk_json_value(&j, &t) == -ELOOP, "deep array");
		free(deep);
	}
}

/* Documents that are wrong in one way each: -EBADMSG, why set. */
static void test_syntax(void)
{
	static const char *const bad[] = {
	    "",
	    " ",
	    "[",
	    "{",
	    "{\"a\"",
	    "{\"a\":",
	    "{\"a\":1",
	    "{\"a\" 1}",
	    "{\"a\":1,}",
	    "{,}",
	    "[1,]",
	    "[,1]",
	    "[1 2]",
	    "{\"a\":1 \"b\":2}",
	    "{a:1}",
	    "{'a':1}",
	    "[01]",
	    "[1.]",
	    "[.5]",
	    "[1e]",
	    "[-]",
	    "[+1]",
	    "[tru]",
	    "[nul]",
	    "[True]",
	    "[\"a\\q\"]",
	    "[\"\\u12\"]",
	    "[\"\\ud800\"]",
	    "[\"\\udc00\"]",
	    "[\"\\ud800\\u0041\"]",
	    "[\"a\nb\"]",
	    "[\"a\tb\"]",
	    "[\"abc]",
	    "[1]]",
	    "[1] [2]",
	    "{\"a\":1}}",
	    "[\"\\",
	    "[\"\\u00",
	    "\"\\ud83d\\ude0",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct disk_json j;
		struct disk_json_tok t;
		size_t n = strlen(bad[i]);
		const char *d = guarded(bad[i], n);
		int err;

		disk_json_init(&j, d, n, 0);
		err = disk_json_value(&j, &t);
		if (err == 0)
			err = disk_json_end(&j);
		CHECK(err == -EBADMSG && j.why && j.at <= n, "'%s': %d %s", bad[i], err,
		      j.why ? j.why : "(no why)");
	}
}

static void test_fixed(void)
{
	struct disk_json_tok t;
	struct disk_json j;
	char out[64];
	uint64_t v;
	const char *d;

	/* \u0000: a valid document, but no C string can hold it */
	d = "{\"a\":\"x\\u0000y\",\"b\":\"\\ud83d\\ude00\\u00e9\\u20ac\"}";
	CHECK(disk_json_get(d, strlen(d), "a", &t) == 0 &&
		  disk_json_str(&t, out, sizeof(out)) == -EILSEQ,
	      "\\u0000");
	CHECK(disk_json_get(d, strlen(d), "b", &t) == 0 &&
		  disk_json_str(&t, out, sizeof(out)) == 9 &&
		  strcmp(out, "\xf0\x9f\x98\x80\xc3\xa9\xe2\x82\xac") == 0,
	      "a surrogate pair, 2 and 3 bytes");
	/* the first of two members of one name; non-strings */
	d = "{\"a\":1,\"a\":2,\"n\":null,\"o\":{\"a\":3}}";
	CHECK(disk_json_get(d, strlen(d), "a", &t) == 0 && disk_json_u64(&t, &v) == 0 && v == 1,
	      "first of two");
	CHECK(disk_json_get(d, strlen(d), "o", &t) == 0 && t.type == DISK_JSON_OBJECT &&
		  t.len == 7 && disk_json_str(&t, out, sizeof(out)) == -EINVAL &&
		  disk_json_u64(&t, &v) == -EINVAL,
	      "an object's token");
	CHECK(disk_json_get(d, strlen(d), "n", &t) == 0 && t.type == DISK_JSON_NULL, "null");
	/* a nested member, as disk_json.h shows it */
	d = "{\"error\":{\"code\":403,\"message\":\"Access \\\"denied\\\"\"}}";
	CHECK(disk_json_get(d, strlen(d), "error", &t) == 0 && t.type == DISK_JSON_OBJECT &&
		  disk_json_get(t.p, t.len, "message", &t) == 0 &&
		  disk_json_str(&t, out, sizeof(out)) == 15 &&
		  strcmp(out, "Access \"denied\"") == 0,
	      "nested lookup");
	CHECK(disk_json_get(NULL, 0, "a", &t) == -EBADMSG, "no document");
	CHECK(disk_json_get("[1]", 3, "a", &t) == -EBADMSG, "not an object");
	CHECK(disk_json_get("{\"a\":1} x", 9, "a", &t) == -EBADMSG, "bytes after");
	CHECK(disk_json_get("{\"a\":1,\"b\":[}", 13, "a", &t) == -EBADMSG,
	      "malformed after the match: no value");
	/* a walk: the array's items, an object's members left unread are skipped */
	d = "[{\"x\":[1,{\"y\":2}],\"n\":\"q\"}, 7, \"s\"]";
	disk_json_init(&j, d, strlen(d), 0);
	CHECK(disk_json_enter(&j, DISK_JSON_ARRAY) == 0 && disk_json_next(&j, NULL) == 1 &&
		  disk_json_enter(&j, DISK_JSON_OBJECT) == 0 && disk_json_next(&j, &t) == 1 &&
		  disk_json_streq(&t, "x") && disk_json_next(&j, &t) == 1 &&
		  disk_json_streq(&t, "n") && disk_json_value(&j, &t) == 0 &&
		  disk_json_streq(&t, "q") && disk_json_next(&j, &t) == 0 &&
		  disk_json_next(&j, NULL) == 1 && disk_json_value(&j, &t) == 0 &&
		  disk_json_u64(&t, &v) == 0 && v == 7 && disk_json_next(&j, NULL) == 1 &&
		  disk_json_next(&j, NULL) == 0 && disk_json_end(&j) == 0,
	      "walk: %s", j.why ? j.why : "");
	disk_json_init(&j, "{}", 2, 0);
	CHECK(disk_json_enter(&j, DISK_JSON_ARRAY) == -EBADMSG &&
		  disk_json_next(&j, NULL) == -EBADMSG,
	      "a failed cursor stays failed");
	/* streq: an escaped name, a prefix is not equal */
	d = "{\"\\u0041b\":1}";
	CHECK(disk_json_get(d, strlen(d), "Ab", &t) == 0, "escaped name");
	CHECK(disk_json_get(d, strlen(d), "A", &t) == -ENOENT, "prefix");
	/* numbers at the edge */
	d = "{\"m\":18446744073709551615,\"o\":18446744073709551616,\"z\":0,\"e\":1e3}";
	CHECK(disk_json_get(d, strlen(d), "m", &t) == 0 && disk_json_u64(&t, &v) == 0 &&
		  v == UINT64_MAX,
	      "UINT64_MAX");
	CHECK(disk_json_get(d, strlen(d), "o", &t) == 0 && disk_json_u64(&t, &v) == -ERANGE,
	      "UINT64_MAX + 1");
	CHECK(disk_json_get(d, strlen(d), "z", &t) == 0 && disk_json_u64(&t, &v) == 0 && v == 0,
	      "0");
	CHECK(disk_json_get(d, strlen(d), "e", &t) == 0 && disk_json_u64(&t, &v) == -EINVAL,
	      "1e3 is not an integer");
}

/* Every byte escaped by disk_json_esc reads back as itself. */
/* disk_json_peek: each value's type from its first byte, nothing read;
 * the end of input or a stray byte is -EBADMSG and leaves the cursor able
 * to go on where it was. */
static void test_peek(void)
{
	static const struct {
		const char *doc;
		int type;
	} cases[] = {
	    {" {}", DISK_JSON_OBJECT},	{"[1]", DISK_JSON_ARRAY}, {"\"s\"", DISK_JSON_STRING},
	    {"-1", DISK_JSON_NUMBER},	{"7", DISK_JSON_NUMBER},  {"true", DISK_JSON_TRUE},
	    {"false", DISK_JSON_FALSE}, {"null", DISK_JSON_NULL}, {"", -EBADMSG},
	    {"  ", -EBADMSG},		{"}", -EBADMSG},	  {"x", -EBADMSG},
	};
	struct disk_json j;
	struct disk_json_tok t;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		disk_json_init(&j, cases[i].doc, strlen(cases[i].doc), 0);
		CHECK(disk_json_peek(&j) == cases[i].type && disk_json_peek(&j) == cases[i].type,
		      "peek '%s'", cases[i].doc);
		if (cases[i].type > 0)
			CHECK(disk_json_value(&j, &t) == 0 && (int)t.type == cases[i].type &&
				  disk_json_end(&j) == 0,
			      "peek '%s' read nothing", cases[i].doc);
	}
	disk_json_init(&j, "{\"a\":[", 6, 0);
	CHECK(disk_json_enter(&j, DISK_JSON_OBJECT) == 0 && disk_json_next(&j, &t) == 1 &&
		  disk_json_peek(&j) == DISK_JSON_ARRAY &&
		  disk_json_enter(&j, DISK_JSON_ARRAY) == 0 && disk_json_peek(&j) == -EBADMSG &&
		  disk_json_next(&j, NULL) == -EBADMSG && disk_json_peek(&j) == -EBADMSG,
	      "a cut document: peek at its end, then the cursor's error");
}

static void test_esc(void)
{
	struct buf doc = {0};
	struct disk_json_tok t = {DISK_JSON_STRING, NULL, 0};
	char out[300];

	puts_(&doc, "\"");
	for (unsigned c = 1; c < 256; c++) {
		char e[8];

		put(&doc, e, disk_json_esc((unsigned char)c, e));
	}
	puts_(&doc, "\"");
	t.p = doc.p;
	t.len = doc.n;
	{
		struct disk_json j;
		struct disk_json_tok s;

		disk_json_init(&j, doc.p, doc.n, 0);
		CHECK(disk_json_value(&j, &s) == 0 && disk_json_end(&j) == 0,
		      "escaped text parses");
	}
	CHECK(disk_json_str(&t, out, sizeof(out)) == 255, "255 bytes");
	for (unsigned c = 1; c < 256; c++)
		if ((unsigned char)out[c - 1] != c)
			CHECK(0, "byte %u came back as %u", c, (unsigned char)out[c - 1]);
	free(doc.p);
}

int main(void)
{
	const char *s = getenv("JSON_SEED"), *r = getenv("JSON_ROUNDS");
	uint64_t seed = s ? strtoull(s, NULL, 10) : 1;
	unsigned rounds = r ? (unsigned)strtoul(r, NULL, 10) : 300;

	guard_init();
	printf("JSON_SEED=%" PRIu64 " JSON_ROUNDS=%u\n", seed, rounds);
	test_generated(seed, rounds);
	test_depth();
	test_syntax();
	test_fixed();
	test_peek();
	test_esc();
	return check_summary("json");
}
