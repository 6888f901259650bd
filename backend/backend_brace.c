/*
 * backend_brace.c — WebDataset brace notation, a pure function
 * (declared in backend_i.h, tested by tests/unit/test_http_parse.c).
 *
 * "shard-{000..119}.tar" and "{train,val}/s-{0..1}.tar" expand as Python's
 * braceexpand (what WebDataset uses) does for these forms: numeric ranges
 * keep zero padding, lists may hold empty items, several braces multiply,
 * the leftmost varying slowest. The number of names is computed before
 * anything is allocated, so a hostile pattern cannot make us allocate more
 * than max names. Non-goals: nesting, letter ranges, steps ("{0..10..2}"),
 * backslash escapes — these are errors rather than silent guesses.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend_i.h"

/* Digits of a range bound: 18 keep every value below 10^18 < 2^63. */
#define BRACE_MAX_DIGITS 18

struct brace_part {
	const char *lit; /* literal text before the brace (or the tail) */
	size_t lit_len;
	int kind;	  /* 0: none (tail), 1: list, 2: range */
	const char *body; /* list: inside the braces */
	size_t body_len;
	uint64_t count;	 /* alternatives */
	uint64_t lo, hi; /* range */
	int desc;	 /* range runs downwards */
	int width;	 /* range: zero-pad to this many digits, 0: none */
};

static int parse_bound(const char *s, size_t len, uint64_t *v)
{
	uint64_t x = 0;

	if (len == 0 || len > BRACE_MAX_DIGITS)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		x = x * 10 + (uint64_t)(s[i] - '0');
	}
	*v = x;
	return 0;
}

/* Classify the inside of one brace. Returns 1 when it is a list or range
 * (p filled), 0 when it is kept literally, -EINVAL when malformed. */
static int brace_classify(const char *b, size_t len, struct brace_part *p)
{
	const char *dots = NULL;
	size_t commas = 0;

	for (size_t i = 0; i < len; i++)
		if (b[i] == ',')
			commas++;
	for (size_t i = 0; i + 1 < len; i++)
		if (b[i] == '.' && b[i + 1] == '.') {
			dots = b + i;
			break;
		}
	if (commas) {
		p->kind = 1;
		p->body = b;
		p->body_len = len;
		p->count = commas + 1;
		return 1;
	}
	if (dots) {
		const char *a = b, *z = dots + 2;
		size_t alen = (size_t)(dots - b), zlen = len - alen - 2;

		if (parse_bound(a, alen, &p->lo) < 0 || parse_bound(z, zlen, &p->hi) < 0)
			return -EINVAL;
		p->kind = 2;
		p->desc = p->lo > p->hi;
		p->count = (p->desc ? p->lo - p->hi : p->hi - p->lo) + 1;
		p->width = 0;
		if ((alen > 1 && a[0] == '0') || (zlen > 1 && z[0] == '0'))
			p->width = (int)(alen > zlen ? alen : zlen);
		return 1;
	}
	return 0; /* "{}" or "{abc}": literal */
}

/* Write alternative i of p at dst (cap bytes, enough by construction). */
static size_t alt_write(const struct brace_part *p, uint64_t i, char *dst)
{
	if (p->kind == 1) {
		const char *s = p->body, *end = p->body + p->body_len;
		const char *c;

		while (i--)
			s = (const char *)memchr(s, ',', (size_t)(end - s)) + 1;
		c = memchr(s, ',', (size_t)(end - s));
		if (!c)
			c = end;
		memcpy(dst, s, (size_t)(c - s));
		return (size_t)(c - s);
	} else {
		uint64_t v = p->desc ? p->lo - i : p->lo + i;
		char tmp[24];
		int n = 0;

		do {
			tmp[n++] = (char)('0' + v % 10);
			v /= 10;
		} while (v);
		while (n < p->width)
			tmp[n++] = '0';
		for (int k = 0; k < n; k++)
			dst[k] = tmp[n - 1 - k];
		return (size_t)n;
	}
}

static size_t alt_maxlen(const struct brace_part *p)
{
	if (p->kind == 1)
		return p->body_len;
	return (size_t)(p->width > 20 ? p->width : 20);
}

void backend__strv_free(char **v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* A pattern cut into parts: each a literal text and the brace after it
 * (kind 0: none, the pattern's end). */
struct brace_parse {
	struct brace_part *parts;
	size_t nparts, cap;
	size_t maxlen;	/* the longest name's length */
	uint64_t total; /* the names: the product of the braces' counts */
};

/* Part bp (its literal from lit to open, or lit's end) appended to bp's
 * parse, the product kept within max. 0, -ENOMEM or -E2BIG. */
static int parse_push(struct brace_parse *ps, struct brace_part *bp, const char *lit,
		      const char *open, size_t max)
{
	if (ps->nparts == ps->cap) {
		size_t cap = ps->cap ? ps->cap * 2 : 8;
		struct brace_part *np = realloc(ps->parts, cap * sizeof(*ps->parts));

		if (!np)
			return -ENOMEM;
		ps->parts = np;
		ps->cap = cap;
	}
	bp->lit = lit;
	bp->lit_len = open ? (size_t)(open - lit) : strlen(lit);
	ps->maxlen += bp->lit_len;
	if (bp->kind) {
		if (bp->count > max || ps->total > max / bp->count)
			return -E2BIG;
		ps->total *= bp->count;
		ps->maxlen += alt_maxlen(bp);
	}
	ps->parts[ps->nparts++] = *bp;
	return 0;
}

/* The pattern's parts: "{" to the next "}" is a brace unless
 * brace_classify calls it literal; an unbalanced or nested brace is
 * -EINVAL, more than max names -E2BIG. 0 or a negative errno (ps->parts
 * is the caller's to free either way). */
static int brace_parse(const char *pattern, size_t max, struct brace_parse *ps)
{
	const char *p = pattern, *lit = pattern;
	int err;

	memset(ps, 0, sizeof(*ps));
	ps->total = 1;
	for (;;) {
		const char *open = strpbrk(p, "{}");
		const char *close = NULL;
		struct brace_part bp;
		int k;

		memset(&bp, 0, sizeof(bp));
		if (open && *open == '}')
			return -EINVAL; /* unbalanced */
		if (open) {
			close = strpbrk(open + 1, "{}");
			if (!close || *close == '{')
				return -EINVAL; /* unbalanced or nested */
			k = brace_classify(open + 1, (size_t)(close - open - 1), &bp);
			if (k < 0)
				return -EINVAL;
			if (k == 0) {
				p = close + 1; /* literal: part of the text */
				continue;
			}
		}
		err = parse_push(ps, &bp, lit, open, max);
		if (err < 0)
			return err;
		if (!open)
			return ps->total > max ? -E2BIG : 0;
		p = lit = close + 1;
	}
}

/* Every name of the parse, in order (the rightmost brace varies fastest),
 * into a new array at *out. 0 or -ENOMEM. */
static int brace_names(const struct brace_parse *ps, char ***out)
{
	const struct brace_part *parts = ps->parts;
	size_t nparts = ps->nparts;
	char **v = calloc((size_t)ps->total, sizeof(*v));
	uint64_t *idx = calloc(nparts, sizeof(*idx));
	char *buf = malloc(ps->maxlen + 1);
	int err = -ENOMEM;

	if (!v || !idx || !buf)
		goto fail;
	for (uint64_t t = 0; t < ps->total; t++) {
		size_t len = 0;

		for (size_t i = 0; i < nparts; i++) {
			memcpy(buf + len, parts[i].lit, parts[i].lit_len);
			len += parts[i].lit_len;
			if (parts[i].kind)
				len += alt_write(&parts[i], idx[i], buf + len);
		}
		buf[len] = '\0';
		v[t] = strdup(buf);
		if (!v[t]) {
			backend__strv_free(v, (size_t)t);
			v = NULL;
			goto fail;
		}
		/* odometer: the rightmost brace varies fastest */
		for (size_t i = nparts; i-- > 0;) {
			if (!parts[i].kind)
				continue;
			if (++idx[i] < parts[i].count)
				break;
			idx[i] = 0;
		}
	}
	*out = v;
	v = NULL;
	err = 0;
fail:
	free(v);
	free(idx);
	free(buf);
	return err;
}

int backend__brace_expand(const char *pattern, size_t max, char ***out, size_t *n)
{
	struct brace_parse ps;
	int err;

	*out = NULL;
	*n = 0;
	err = brace_parse(pattern, max, &ps);
	if (err == 0)
		err = brace_names(&ps, out);
	if (err == 0)
		*n = (size_t)ps.total;
	free(ps.parts);
	return err;
}
