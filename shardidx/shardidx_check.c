/*
 * shardidx_check.c — does one tar header describe one index entry?
 *
 * An index that was not built from the exact object version it is used
 * with (a sidecar NAME.tar.idx, whose identity the store cannot confirm)
 * is trusted per member only after the member's own ustar header checks
 * out: the caller reads the 512 bytes just before the member's data with
 * the data and asks shardidx_check_header. No I/O here; any thread.
 */
#include <errno.h>
#include <string.h>

#include "shardidx.h"
#include "shardidx_i.h"

/* Largest size an octal size field holds (11 digits); a larger member's
 * size comes in a pax header or as base-256. */
#define OCTAL_SIZE_MAX 077777777777ull

/* A numeric field: octal (space or NUL padded) or base-256 (top bit set).
 * 0 or -EBADMSG. */
static int check_num(const unsigned char *f, size_t len, int *base256, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;

	*base256 = (f[0] & 0x80) != 0;
	if (*base256) {
		if (f[0] & 0x40)
			return -EBADMSG; /* negative */
		v = f[0] & 0x3f;
		for (i = 1; i < len; i++) {
			if (v > UINT64_MAX / 256)
				return -EBADMSG;
			v = v * 256 + f[i];
		}
		*out = v;
		return 0;
	}
	while (i < len && f[i] == ' ')
		i++;
	for (; i < len && f[i] != 0 && f[i] != ' '; i++) {
		if (f[i] < '0' || f[i] > '7')
			return -EBADMSG;
		v = v * 8 + (uint64_t)(f[i] - '0');
	}
	for (; i < len; i++)
		if (f[i] != 0 && f[i] != ' ')
			return -EBADMSG;
	*out = v;
	return 0;
}

/* The header checksum: unsigned or (old writers) signed sum of the block
 * with the checksum field taken as spaces. */
static int check_sum(const unsigned char *h)
{
	uint64_t stored;
	uint32_t u = 0;
	int32_t s = 0;
	int b256;

	if (check_num(h + 148, 8, &b256, &stored) < 0 || b256)
		return 0;
	for (size_t i = 0; i < BLK; i++) {
		unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];

		u += c;
		s += (signed char)c;
	}
	return stored == (uint64_t)u || (s >= 0 && stored == (uint64_t)s);
}

static int type_matches(unsigned char flag, uint8_t type)
{
	switch (type) {
	case SHARDIDX_REG:
		return flag == '0' || flag == '\0' || flag == '7';
	case SHARDIDX_DIR:
		return flag == '5';
	case SHARDIDX_SYMLINK:
		return flag == '2';
	default:
		return 0;
	}
}

static int all_ascii(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s >= 0x80)
			return 0;
	return 1;
}

int shardidx_check_header(const void *hdr, const struct shardidx_entry *e)
{
	const unsigned char *h = hdr;
	char name[100 + 1 + 155 + 1];
	const char *base;
	size_t nlen, plen = 0;
	uint64_t size;
	int b256;

	if (!h || !e)
		return -EINVAL;
	if (!check_sum(h))
		return -EBADMSG;
	if (!type_matches(h[156], e->type))
		return -ESTALE;
	if (check_num(h + 124, 12, &b256, &size) < 0)
		return -EBADMSG;
	/* a size past the octal field's reach came in a pax header: the
	 * field may hold anything a writer chose then */
	if (e->type == SHARDIDX_REG && size != e->size && (b256 || e->size <= OCTAL_SIZE_MAX))
		return -ESTALE;
	/* the ustar name: prefix "/" name */
	if (memcmp(h + 257, "ustar", 5) == 0) {
		plen = strnlen((const char *)h + 345, 155);
		memcpy(name, h + 345, plen);
		if (plen)
			name[plen++] = '/';
	}
	nlen = strnlen((const char *)h, 100);
	memcpy(name + plen, h, nlen);
	name[plen + nlen] = '\0';
	while (plen + nlen > 0 && name[plen + nlen - 1] == '/')
		name[plen + --nlen] = '\0'; /* a directory's trailing '/' */
	/* a name that fills the field (or more) came in a GNU long-name or pax
	 * header before this one, and a name of non-ASCII bytes may have: a
	 * writer puts what it likes in the field then. Not compared. */
	if (nlen >= 99 || !all_ascii(e->name))
		return 0;
	base = strrchr(name, '/');
	base = base ? base + 1 : name;
	return strcmp(base, e->name) == 0 ? 0 : -ESTALE;
}
