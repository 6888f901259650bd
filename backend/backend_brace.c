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

int backend__brace_expand(const char *pattern, size_t max, char ***out, size_t *n)
{
	struct brace_part *parts = NULL;
	size_t nparts = 0, cap = 0, maxlen = 0;
	uint64_t total = 1;
	const char *p = pattern, *lit = pattern;
	char **v = NULL;
	char *buf = NULL;
	uint64_t *idx = NULL;
	int err = -EINVAL;

	*out = NULL;
	*n = 0;
	for (;;) {
		const char *open = strpbrk(p, "{}");
		const char *close = NULL;
		struct brace_part bp;
		int k;

		memset(&bp, 0, sizeof(bp));
		if (open && *open == '}')
			goto fail; /* unbalanced */
		if (open) {
			close = strpbrk(open + 1, "{}");
			if (!close || *close == '{')
				goto fail; /* unbalanced or nested */
			k = brace_classify(open + 1, (size_t)(close - open - 1), &bp);
			if (k < 0)
				goto fail;
			if (k == 0) {
				p = close + 1; /* literal: part of the text */
				continue;
			}
		}
		if (nparts == cap) {
			struct brace_part *np;

			cap = cap ? cap * 2 : 8;
			np = realloc(parts, cap * sizeof(*parts));
			if (!np) {
				err = -ENOMEM;
				goto fail;
			}
			parts = np;
		}
		bp.lit = lit;
		bp.lit_len = open ? (size_t)(open - lit) : strlen(lit);
		maxlen += bp.lit_len;
		if (bp.kind) {
			if (bp.count > max || total > max / bp.count) {
				err = -E2BIG;
				goto fail;
			}
			total *= bp.count;
			maxlen += alt_maxlen(&bp);
		}
		parts[nparts++] = bp;
		if (!open)
			break;
		p = lit = close + 1;
	}
	if (total > max) {
		err = -E2BIG;
		goto fail;
	}
	err = -ENOMEM;
	v = calloc((size_t)total, sizeof(*v));
	idx = calloc(nparts, sizeof(*idx));
	buf = malloc(maxlen + 1);
	if (!v || !idx || !buf)
		goto fail;
	for (uint64_t t = 0; t < total; t++) {
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
	*n = (size_t)total;
	err = 0;
	v = NULL;
fail:
	free(v);
	free(idx);
	free(buf);
	free(parts);
	return err;
}
