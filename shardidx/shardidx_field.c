/*
 * shardidx_field.c — the fields of a tar header block and the numbers in
 * them and in pax records; small buffers of the builder.
 *
 * Header checksums are checked as tar does (unsigned or signed sum). Where
 * tar readers disagree this follows GNU tar: a numeric field may start
 * with one NUL and ends at a NUL or space (what follows is not read).
 *
 * Contract: pure functions of their arguments (the sbuf ones own s->p); no
 * allocation but sbuf_set's, no I/O. Non-goals: which field a member uses
 * (shardidx_build.c, shardidx_pax.c).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardidx_i.h"

int shardidx__sbuf_set(struct sbuf *s, const char *p, size_t len)
{
	char *q = malloc(len + 1);

	if (!q)
		return -ENOMEM;
	memcpy(q, p, len);
	q[len] = 0;
	free(s->p);
	s->p = q;
	s->len = len;
	s->set = 1;
	return 0;
}

void shardidx__sbuf_clear(struct sbuf *s)
{
	free(s->p);
	s->p = NULL;
	s->len = 0;
	s->set = 0;
}

uint64_t shardidx__round_blk(uint64_t n)
{
	return (n + BLK - 1) & ~(uint64_t)(BLK - 1);
}

uint32_t shardidx__clamp_mtime(int64_t t)
{
	if (t < 0)
		return 0;
	if (t > (int64_t)UINT32_MAX)
		return UINT32_MAX;
	return (uint32_t)t;
}

/*
 * A numeric header field, read as GNU tar reads it: GNU base-256 (high bit
 * of the first byte set; 0x40 is the sign), else octal: one leading NUL and
 * then leading spaces are skipped, the digits end at a NUL, a space or the
 * end of the field, and what follows that end is not looked at (a field
 * with no digits is 0). Any other byte after the digits: -EBADMSG.
 */
int shardidx__num_field(const unsigned char *f, size_t len, int64_t *out)
{
	size_t i = 0;
	int64_t v = 0;

	if (f[0] & 0x80) {
		v = (int64_t)(f[0] & 0x3f) - (int64_t)(f[0] & 0x40);
		for (i = 1; i < len; i++) {
			if (v > INT64_MAX / 256 || v < INT64_MIN / 256)
				return -EBADMSG;
			v = v * 256 + f[i];
		}
		*out = v;
		return 0;
	}
	if (len && f[0] == 0)
		i = 1;
	while (i < len && f[i] == ' ')
		i++;
	for (; i < len && f[i] >= '0' && f[i] <= '7'; i++)
		v = v * 8 + (f[i] - '0'); /* 12 octal digits fit easily */
	if (i < len && f[i] != 0 && f[i] != ' ')
		return -EBADMSG;
	*out = v;
	return 0;
}

int shardidx__cksum_ok(const unsigned char *h)
{
	int64_t stored;
	uint32_t u = 0;
	int32_t s = 0;

	if (shardidx__num_field(h + 148, 8, &stored) || (h[148] & 0x80))
		return 0;
	for (size_t i = 0; i < BLK; i++) {
		unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];

		u += c;
		s += (signed char)c;
	}
	return stored == (int64_t)u || stored == (int64_t)s;
}

int shardidx__is_zero_block(const unsigned char *h)
{
	for (size_t i = 0; i < BLK; i++)
		if (h[i])
			return 0;
	return 1;
}

int shardidx_looks_like_tar(const void *buf, size_t len)
{
	const unsigned char *h = buf;

	if (len >= 262 && memcmp(h + 257, "ustar", 5) == 0)
		return 1;
	return len >= BLK && (shardidx__is_zero_block(h) || shardidx__cksum_ok(h));
}

int shardidx_header_describes(const void *hdr, const struct shardidx_entry *e)
{
	const unsigned char *h = hdr;
	char name[101];
	const char *base;
	int64_t size;

	if (!shardidx__cksum_ok(h) || shardidx__num_field(h + 124, 12, &size) || size < 0 ||
	    (uint64_t)size != e->size)
		return 0;
	memcpy(name, h, 100);
	name[100] = '\0';
	base = strrchr(name, '/');
	base = base ? base + 1 : name;
	/* a name too long for the field came in a pax/GNU header before: size only */
	return strcmp(base, e->name) == 0 || strlen(e->name) > 90 || strlen(name) >= 99;
}

/* Decimal digits only, no sign; returns 0 or -EBADMSG. */
int shardidx__parse_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;

	if (!len)
		return -EBADMSG;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EBADMSG;
		if (v > (UINT64_MAX - 9) / 10)
			return -EBADMSG;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return 0;
}

/* pax time, read as GNU tar reads it: [-]digits[.digits] at the start of
 * the value, anything after them ignored ("999xxx" is 999; *used: the
 * bytes read); floored to whole seconds. -EBADMSG when the value does not
 * start with a digit (the caller then ignores the record, as GNU tar does). */
int shardidx__parse_time(const char *s, size_t len, int64_t *out, size_t *used)
{
	size_t i = 0, j;
	int neg = 0, frac = 0;
	uint64_t v;

	if (len && s[0] == '-') {
		neg = 1;
		i = 1;
	}
	for (j = i; j < len && s[j] >= '0' && s[j] <= '9'; j++)
		;
	if (j == i || shardidx__parse_u64(s + i, j - i, &v))
		return -EBADMSG;
	if (j < len && s[j] == '.') {
		for (j++; j < len && s[j] >= '0' && s[j] <= '9'; j++) {
			if (s[j] != '0')
				frac = 1;
		}
	}
	*used = j;
	if (v > (uint64_t)INT64_MAX - 1)
		v = (uint64_t)INT64_MAX - 1;
	*out = neg ? -(int64_t)v - frac : (int64_t)v;
	return 0;
}
