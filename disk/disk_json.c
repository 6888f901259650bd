/*
 * disk_json.c — the JSON reader of disk_json.h: a cursor over untrusted
 * bytes, without allocation or recursion. Every read of the input is
 * checked against end first.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "disk_json.h"

static int fail(struct disk_json *j, const char *at, const char *why, int err)
{
	if (!j->err) {
		j->err = err;
		j->why = why;
		j->at = (size_t)(at - j->start);
	}
	return j->err;
}

static void ws(struct disk_json *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = (char)(c | 0x20);
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* The 4 hex digits at p[0..4) (p + 4 <= e checked): the value, or -1. */
static long hex4(const char *p, const char *e)
{
	long v = 0;

	if (e - p < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		int h = hexval(p[i]);

		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

/* The escape at *q (its backslash; before e): decoded to UTF-8 into b, *q
 * moved past it. Returns how many bytes (1-4), 0 for \u0000, or -1 when
 * malformed. */
static int str_unit(const char **q, const char *e, unsigned char b[4])
{
	const char *p = *q;
	long cp, lo;

	if (e - p < 2)
		return -1;
	if (p[1] != 'u') {
		static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
		const char *k = p[1] ? memchr(from, p[1], sizeof(from) - 1) : NULL;

		if (!k)
			return -1;
		b[0] = (unsigned char)to[k - from];
		*q = p + 2;
		return 1;
	}
	/* \uXXXX, a high surrogate only with its low one */
	cp = hex4(p + 2, e);
	if (cp < 0 || (cp >= 0xdc00 && cp < 0xe000))
		return -1;
	p += 6;
	if (cp >= 0xd800 && cp < 0xdc00) {
		if (e - p < 6 || p[0] != '\\' || p[1] != 'u')
			return -1;
		lo = hex4(p + 2, e);
		if (lo < 0xdc00 || lo >= 0xe000)
			return -1;
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
		p += 6;
	}
	*q = p;
	return cp == 0 ? 0 : (int)disk_json_utf8((uint32_t)cp, b);
}

/* A string at j->p ('"'). */
static int scan_string(struct disk_json *j)
{
	const char *s = j->p, *p = j->p + 1, *e = j->end;

	for (;;) {
		unsigned char b[4];

		while (p < e && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20)
			p++;
		j->p = p;
		if (p >= e)
			return fail(j, s, "a string is cut short", -EBADMSG);
		if (*p == '"')
			break;
		if (*p != '\\')
			return fail(j, p, "a control byte in a string", -EBADMSG);
		/* the closing quote is not known yet: bound the escape by end */
		if (str_unit(&j->p, e, b) < 0)
			return fail(j, j->p, "a bad escape (or a lone surrogate) in a string",
				    -EBADMSG);
		p = j->p;
	}
	j->p = p + 1;
	return 0;
}

static int digits(struct disk_json *j)
{
	const char *s = j->p;

	while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
		j->p++;
	return j->p > s;
}

/* A number at j->p: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
static int scan_number(struct disk_json *j)
{
	const char *s = j->p;

	if (*j->p == '-')
		j->p++;
	if (j->p < j->end && *j->p == '0')
		j->p++;
	else if (!digits(j))
		return fail(j, s, "not a value", -EBADMSG);
	if (j->p < j->end && *j->p == '.') {
		j->p++;
		if (!digits(j))
			return fail(j, s, "a number without digits after its '.'", -EBADMSG);
	}
	if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
		j->p++;
		if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
			j->p++;
		if (!digits(j))
			return fail(j, s, "a number without digits in its exponent", -EBADMSG);
	}
	if (j->p < j->end && *j->p >= '0' && *j->p <= '9')
		return fail(j, s, "a number with a leading zero", -EBADMSG);
	return 0;
}

static int scan_literal(struct disk_json *j, const char *w)
{
	size_t n = strlen(w);

	if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0)
		return fail(j, j->p, "not a value", -EBADMSG);
	j->p += n;
	return 0;
}

/* A scalar at j->p (after blanks) into t. */
static int scalar(struct disk_json *j, struct disk_json_tok *t)
{
	const char *s = j->p;
	int err;

	switch (*j->p) {
	case '"':
		t->type = DISK_JSON_STRING;
		err = scan_string(j);
		break;
	case 't':
		t->type = DISK_JSON_TRUE;
		err = scan_literal(j, "true");
		break;
	case 'f':
		t->type = DISK_JSON_FALSE;
		err = scan_literal(j, "false");
		break;
	case 'n':
		t->type = DISK_JSON_NULL;
		err = scan_literal(j, "null");
		break;
	default:
		t->type = DISK_JSON_NUMBER;
		err = scan_number(j);
		break;
	}
	t->p = s;
	t->len = (size_t)(j->p - s);
	if (!err && j->depth > 0)
		j->state = 1;
	return err;
}

void disk_json_init(struct disk_json *j, const void *buf, size_t len, unsigned max_depth)
{
	memset(j, 0, sizeof(*j));
	j->start = j->p = buf;
	j->end = len ? j->start + len : j->start; /* buf may be NULL when len is 0 */
	j->max_depth =
	    max_depth && max_depth < DISK_JSON_MAX_DEPTH ? max_depth : DISK_JSON_MAX_DEPTH;
}

/* The byte a value starts with, after blanks; -1 at the end of input. */
static int value_start(struct disk_json *j)
{
	ws(j);
	if (j->p >= j->end) {
		fail(j, j->p, "the document is cut short (a value is missing)", -EBADMSG);
		return -1;
	}
	return (unsigned char)*j->p;
}

int disk_json_enter(struct disk_json *j, enum disk_json_type type)
{
	int c;

	if (j->err)
		return j->err;
	c = value_start(j);
	if (c < 0)
		return j->err;
	if (c != (type == DISK_JSON_OBJECT ? '{' : '['))
		return fail(j, j->p,
			    type == DISK_JSON_OBJECT ? "not an object where one is expected"
						     : "not an array where one is expected",
			    -EBADMSG);
	if (j->depth >= j->max_depth)
		return fail(j, j->p, "nested too deep", -ELOOP);
	if (type == DISK_JSON_OBJECT)
		j->objs |= 1ull << j->depth;
	else
		j->objs &= ~(1ull << j->depth);
	j->depth++;
	j->p++;
	j->state = 0;
	return 0;
}

int disk_json_value(struct disk_json *j, struct disk_json_tok *t)
{
	const char *s;
	unsigned base = j->depth;
	int c, more;

	if (j->err)
		return j->err;
	c = value_start(j);
	if (c < 0)
		return j->err;
	s = j->p;
	if (c != '{' && c != '[')
		return scalar(j, t);
	t->type = c == '{' ? DISK_JSON_OBJECT : DISK_JSON_ARRAY;
	if (disk_json_enter(j, t->type) < 0)
		return j->err;
	/* walk it without recursion: the cursor's depth is the stack */
	while (j->depth > base) {
		more = disk_json_next(j, NULL);
		if (more < 0)
			return more;
		if (more == 0)
			continue;
		c = value_start(j);
		if (c < 0)
			return j->err;
		if (c == '{' || c == '[') {
			if (disk_json_enter(j, c == '{' ? DISK_JSON_OBJECT : DISK_JSON_ARRAY) < 0)
				return j->err;
		} else {
			struct disk_json_tok tmp;

			if (scalar(j, &tmp) < 0)
				return j->err;
		}
	}
	t->p = s;
	t->len = (size_t)(j->p - s);
	return 0;
}

int disk_json_next(struct disk_json *j, struct disk_json_tok *key)
{
	struct disk_json_tok k;
	int obj;
	char close;

	if (j->err)
		return j->err;
	if (j->depth == 0)
		return fail(j, j->p, "no container to walk", -EBADMSG);
	if (j->state == 2 && disk_json_value(j, &k) < 0) /* the item left unread */
		return j->err;
	obj = (int)(j->objs >> (j->depth - 1)) & 1;
	close = obj ? '}' : ']';
	ws(j);
	if (j->p >= j->end)
		return fail(j, j->p, obj ? "an object is cut short" : "an array is cut short",
			    -EBADMSG);
	if (*j->p == close) {
		j->p++;
		j->depth--;
		j->state = 1;
		return 0;
	}
	if (j->state == 1) {
		if (*j->p != ',')
			return fail(j, j->p,
				    obj ? "a ',' or '}' expected" : "a ',' or ']' expected",
				    -EBADMSG);
		j->p++;
		ws(j);
		if (j->p < j->end && *j->p == close)
			return fail(j, j->p, "a ',' before a closing bracket", -EBADMSG);
	}
	j->state = 2;
	if (!obj)
		return 1;
	ws(j);
	if (j->p >= j->end || *j->p != '"')
		return fail(j, j->p, "a member's name (a string) expected", -EBADMSG);
	if (scalar(j, &k) < 0)
		return j->err;
	ws(j);
	if (j->p >= j->end || *j->p != ':')
		return fail(j, j->p, "a ':' after a member's name expected", -EBADMSG);
	j->p++;
	j->state = 2;
	if (key)
		*key = k;
	return 1;
}

int disk_json_peek(struct disk_json *j)
{
	int c;

	if (j->err)
		return j->err;
	ws(j);
	if (j->p >= j->end)
		return -EBADMSG;
	c = (unsigned char)*j->p;
	switch (c) {
	case '{':
		return DISK_JSON_OBJECT;
	case '[':
		return DISK_JSON_ARRAY;
	case '"':
		return DISK_JSON_STRING;
	case 't':
		return DISK_JSON_TRUE;
	case 'f':
		return DISK_JSON_FALSE;
	case 'n':
		return DISK_JSON_NULL;
	default:
		return c == '-' || (c >= '0' && c <= '9') ? DISK_JSON_NUMBER : -EBADMSG;
	}
}

int disk_json_end(struct disk_json *j)
{
	if (j->err)
		return j->err;
	ws(j);
	if (j->depth > 0 || j->p != j->end)
		return fail(j, j->p, "bytes after the document", -EBADMSG);
	return 0;
}

int disk_json_get(const void *buf, size_t len, const char *key, struct disk_json_tok *val)
{
	struct disk_json j;
	struct disk_json_tok k;
	int found = 0, more;

	disk_json_init(&j, buf, len, DISK_JSON_MAX_DEPTH);
	if (disk_json_enter(&j, DISK_JSON_OBJECT) < 0)
		return j.err;
	while ((more = disk_json_next(&j, &k)) > 0) {
		if (!found && disk_json_streq(&k, key)) {
			if (disk_json_value(&j, val) < 0)
				return j.err;
			found = 1;
		}
	}
	if (more < 0 || disk_json_end(&j) < 0)
		return j.err;
	return found ? 0 : -ENOENT;
}

/* How many bytes of q[0..e) come before the first backslash. */
static size_t run(const char *q, const char *e)
{
	const char *b = memchr(q, '\\', (size_t)(e - q));

	return (size_t)((b ? b : e) - q);
}

/* The next piece of a string's contents at *q (before e, its closing
 * quote): a run of plain bytes, in place, or one escape decoded into b.
 * *from gets where its bytes are. Returns how many (> 0), 0 for \u0000,
 * -1 when malformed. */
static int str_piece(const char **q, const char *e, unsigned char b[4], const void **from)
{
	size_t n = run(*q, e);

	if (n == 0) {
		*from = b;
		return str_unit(q, e, b);
	}
	if (n > INT_MAX) /* the rest comes as the next piece */
		n = INT_MAX;
	*from = *q;
	*q += n;
	return (int)n;
}

/* Where a string's pieces go: copied to out[0..cap) (cap > 0; a NUL must
 * still fit), or, with out NULL, compared with z[0..cap). o counts the
 * bytes so far. */
struct str_sink {
	char *out;
	const char *z;
	size_t cap, o;
};

/* The string token t unescaped into k, piece by piece. Returns 0, -ENOSPC
 * (copy: it does not fit; compare: it differs), -EILSEQ (\u0000), -EINVAL
 * (not a string). */
static int str_walk(const struct disk_json_tok *t, struct str_sink *k)
{
	const char *q, *e;

	if (t->type != DISK_JSON_STRING || t->len < 2)
		return -EINVAL;
	q = t->p + 1;
	e = t->p + t->len - 1;
	while (q < e) {
		unsigned char b[4];
		const void *from;
		int n = str_piece(&q, e, b, &from);

		if (n <= 0)
			return n < 0 ? -EINVAL : -EILSEQ;
		if (k->out ? k->o + (size_t)n >= k->cap
			   : k->o + (size_t)n > k->cap || memcmp(k->z + k->o, from, (size_t)n))
			return -ENOSPC;
		if (k->out)
			memcpy(k->out + k->o, from, (size_t)n);
		k->o += (size_t)n;
	}
	return 0;
}

ssize_t disk_json_str(const struct disk_json_tok *t, char *out, size_t cap)
{
	struct str_sink k = {out, NULL, cap, 0};
	int err;

	if (t->type == DISK_JSON_STRING && cap == 0)
		return -ENOSPC;
	err = str_walk(t, &k);
	if (err < 0)
		return err;
	out[k.o] = '\0';
	return (ssize_t)k.o;
}

int disk_json_streq(const struct disk_json_tok *t, const char *z)
{
	struct str_sink k = {NULL, z, strlen(z), 0};

	return str_walk(t, &k) == 0 && k.o == k.cap;
}

int disk_json_u64(const struct disk_json_tok *t, uint64_t *v)
{
	uint64_t x = 0;

	if (t->type != DISK_JSON_NUMBER || t->len == 0)
		return -EINVAL;
	for (size_t i = 0; i < t->len; i++) {
		unsigned d = (unsigned)(t->p[i] - '0');

		if (d > 9)
			return -EINVAL; /* '-', '.', 'e': not an unsigned integer */
	}
	for (size_t i = 0; i < t->len; i++) {
		unsigned d = (unsigned)(t->p[i] - '0');

		if (x > (UINT64_MAX - d) / 10)
			return -ERANGE;
		x = x * 10 + d;
	}
	*v = x;
	return 0;
}

size_t disk_json_utf8(uint32_t cp, unsigned char out[4])
{
	if (cp < 0x80) {
		out[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (unsigned char)(0xc0 | (cp >> 6));
		out[1] = (unsigned char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (unsigned char)(0xe0 | (cp >> 12));
		out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (unsigned char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (unsigned char)(0xf0 | (cp >> 18));
	out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (unsigned char)(0x80 | (cp & 0x3f));
	return 4;
}

size_t disk_json_esc(unsigned char c, char out[8])
{
	static const char hex[] = "0123456789abcdef";

	if (c == '"' || c == '\\') {
		out[0] = '\\';
		out[1] = (char)c;
		return 2;
	}
	if (c < 0x20 || c == 0x7f) {
		memcpy(out, "\\u00", 4);
		out[4] = hex[c >> 4];
		out[5] = hex[c & 15];
		return 6;
	}
	out[0] = (char)c;
	return 1;
}
