/*
 * backend_xml.c — a small, bounded XML scanner for the two documents the
 * object stores send us: ListObjectsV2 pages (ListBucketResult) and S3
 * error bodies (<Error><Code/><Message/></Error>).
 *
 * Non-goals: a general XML parser. No DTDs (a <!DOCTYPE> is refused, so no
 * entity can expand), no namespaces beyond ignoring a "prefix:" on element
 * names, no attributes beyond skipping them. Only the five predefined
 * entities and numeric character references are decoded.
 *
 * Hostile input: the scanner only moves forward through [xml, xml+len),
 * never reads past the end, never recurses, keeps at most XML_MAX_DEPTH open
 * elements, and copies text only into buffers with a fixed bound (keys
 * BACKEND_S3_KEY_MAX, other fields far less). A <Contents> whose key is too
 * long, not decodable or missing, or whose size is not a number that fits
 * in an off_t, is skipped and counted (a key too long also apart, with its
 * start, for the listing's line); a document that is not well formed
 * fails as a whole with -EBADMSG.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend_i.h"

#define XML_MAX_DEPTH	32
#define XML_FIELD_MAX	256  /* Size, ETag, LastModified, IsTruncated, Code */
#define XML_TOKEN_MAX	4096 /* NextContinuationToken */
#define XML_MESSAGE_MAX 1024

enum xml_kind { XML_EOF, XML_START, XML_END, XML_EMPTY, XML_TEXT, XML_CDATA };

struct xml_tok {
	enum xml_kind kind;
	const char *s; /* name (start/end/empty) or raw text */
	size_t n;
};

struct xml_scan {
	const char *p, *end;
};

static const char *find(const char *p, const char *end, const char *needle)
{
	size_t n = strlen(needle);

	while ((size_t)(end - p) >= n) {
		const char *q = memchr(p, needle[0], (size_t)(end - p) - n + 1);

		if (!q)
			return NULL;
		if (memcmp(q, needle, n) == 0)
			return q;
		p = q + 1;
	}
	return NULL;
}

static int is_name_char(unsigned char c)
{
	return c > ' ' && c != '<' && c != '>' && c != '/' && c != '=' && c != '"' && c != '\'';
}

/* An end tag at x->p ("</name>", white space before '>'): t, 0 or -EBADMSG. */
static int xml_end_tag(struct xml_scan *x, struct xml_tok *t)
{
	const char *end = x->end, *s = x->p + 2, *q = s;

	while (q < end && is_name_char((unsigned char)*q))
		q++;
	if (q == s)
		return -EBADMSG;
	t->s = s;
	t->n = (size_t)(q - s);
	while (q < end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n'))
		q++;
	if (q >= end || *q != '>')
		return -EBADMSG;
	t->kind = XML_END;
	x->p = q + 1;
	return 0;
}

/* A start tag at x->p: its name, attributes (quoted values may hold '>'),
 * '>' or '/>' (an empty element): t, 0 or -EBADMSG. */
static int xml_start_tag(struct xml_scan *x, struct xml_tok *t)
{
	const char *p = x->p, *end = x->end, *q = p + 1;

	while (q < end && is_name_char((unsigned char)*q))
		q++;
	if (q == p + 1)
		return -EBADMSG;
	t->s = p + 1;
	t->n = (size_t)(q - (p + 1));
	while (q < end) {
		if (*q == '"' || *q == '\'') {
			const char *c = memchr(q + 1, *q, (size_t)(end - q - 1));

			if (!c)
				return -EBADMSG;
			q = c + 1;
			continue;
		}
		if (*q == '<')
			return -EBADMSG;
		if (*q == '>') {
			t->kind = (q[-1] == '/' && q - 1 >= p + 1 + t->n) ? XML_EMPTY : XML_START;
			x->p = q + 1;
			return 0;
		}
		q++;
	}
	return -EBADMSG;
}

/* Next token. Returns 0, or -EBADMSG for malformed markup. */
static int xml_next(struct xml_scan *x, struct xml_tok *t)
{
	const char *p = x->p, *end = x->end, *q;

	if (p >= end) {
		t->kind = XML_EOF;
		return 0;
	}
	if (*p != '<') {
		q = memchr(p, '<', (size_t)(end - p));
		t->kind = XML_TEXT;
		t->s = p;
		t->n = (size_t)((q ? q : end) - p);
		x->p = q ? q : end;
		return 0;
	}
	if (end - p >= 2 && p[1] == '?') { /* processing instruction / declaration */
		q = find(p + 2, end, "?>");
		if (!q)
			return -EBADMSG;
		x->p = q + 2;
		t->kind = XML_TEXT; /* an empty text token: no recursion on hostile input */
		t->s = q + 2;
		t->n = 0;
		return 0;
	}
	if (end - p >= 4 && memcmp(p, "<!--", 4) == 0) {
		q = find(p + 4, end, "-->");
		if (!q)
			return -EBADMSG;
		x->p = q + 3;
		t->kind = XML_TEXT; /* an empty text token: comments split nothing */
		t->s = q + 3;
		t->n = 0;
		return 0;
	}
	if (end - p >= 9 && memcmp(p, "<![CDATA[", 9) == 0) {
		q = find(p + 9, end, "]]>");
		if (!q)
			return -EBADMSG;
		t->kind = XML_CDATA;
		t->s = p + 9;
		t->n = (size_t)(q - (p + 9));
		x->p = q + 3;
		return 0;
	}
	if (end - p >= 2 && p[1] == '!')
		return -EBADMSG; /* DOCTYPE and friends: never in an S3 answer */
	if (end - p >= 2 && p[1] == '/')
		return xml_end_tag(x, t);
	return xml_start_tag(x, t);
}

/* Local part of a (possibly prefixed) element name equals want. */
static int name_is(const struct xml_tok *t, const char *want)
{
	const char *s = t->s, *colon = memchr(s, ':', t->n);
	size_t n = t->n;

	if (colon) {
		n -= (size_t)(colon + 1 - s);
		s = colon + 1;
	}
	return n == strlen(want) && memcmp(s, want, n) == 0;
}

/* ---- text fields --------------------------------------------------------- */

struct field {
	char *p;
	size_t len, cap;
	int bad;  /* overflow, bad entity, NUL */
	int over; /* overflow: p holds the first cap - 1 bytes */
};

static void field_reset(struct field *f)
{
	f->len = 0;
	f->bad = 0;
	f->over = 0;
	if (f->cap)
		f->p[0] = '\0';
}

static void field_put(struct field *f, const char *s, size_t n)
{
	if (f->bad)
		return;
	if (n >= f->cap - f->len) { /* what fits is kept: a key's start, said */
		n = f->cap - f->len - 1;
		memcpy(f->p + f->len, s, n);
		f->len += n;
		f->p[f->len] = '\0';
		f->bad = f->over = 1;
		return;
	}
	memcpy(f->p + f->len, s, n);
	f->len += n;
	f->p[f->len] = '\0';
}

static void field_utf8(struct field *f, unsigned long cp)
{
	char u[4];
	size_t n;

	if (cp == 0 || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
		f->bad = 1;
		return;
	}
	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | (cp >> 6));
		u[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | (cp >> 12));
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | (cp >> 18));
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	field_put(f, u, n);
}

/* Append raw text, decoding entities (decode == 0 for CDATA). */
static void field_text(struct field *f, const char *s, size_t n, int decode)
{
	const char *end = s + n;

	if (memchr(s, '\0', n)) {
		f->bad = 1;
		return;
	}
	if (!decode) {
		field_put(f, s, n);
		return;
	}
	while (s < end && !f->bad) {
		const char *amp = memchr(s, '&', (size_t)(end - s));
		const char *semi;
		size_t en;

		if (!amp) {
			field_put(f, s, (size_t)(end - s));
			return;
		}
		field_put(f, s, (size_t)(amp - s));
		semi = memchr(amp, ';', (size_t)(end - amp) < 12 ? (size_t)(end - amp) : 12);
		if (!semi) {
			f->bad = 1;
			return;
		}
		en = (size_t)(semi - amp - 1);
		if (en == 3 && memcmp(amp + 1, "amp", 3) == 0)
			field_put(f, "&", 1);
		else if (en == 2 && memcmp(amp + 1, "lt", 2) == 0)
			field_put(f, "<", 1);
		else if (en == 2 && memcmp(amp + 1, "gt", 2) == 0)
			field_put(f, ">", 1);
		else if (en == 4 && memcmp(amp + 1, "quot", 4) == 0)
			field_put(f, "\"", 1);
		else if (en == 4 && memcmp(amp + 1, "apos", 4) == 0)
			field_put(f, "'", 1);
		else if (en >= 2 && amp[1] == '#') {
			int hexa = amp[2] == 'x' || amp[2] == 'X';
			const char *d = amp + 2 + hexa;
			unsigned long cp = 0;

			if (d == semi)
				f->bad = 1;
			for (; d < semi && !f->bad; d++) {
				int v;

				if (*d >= '0' && *d <= '9')
					v = *d - '0';
				else if (hexa && *d >= 'a' && *d <= 'f')
					v = *d - 'a' + 10;
				else if (hexa && *d >= 'A' && *d <= 'F')
					v = *d - 'A' + 10;
				else {
					f->bad = 1;
					break;
				}
				cp = cp * (hexa ? 16 : 10) + (unsigned long)v;
				if (cp > 0x10ffff)
					f->bad = 1;
			}
			if (!f->bad)
				field_utf8(f, cp);
		} else {
			f->bad = 1;
		}
		s = semi + 1;
	}
}

/* Trim ASCII blanks in place (numbers and flags may be pretty-printed). */
static const char *field_trim(struct field *f, size_t *n)
{
	const char *s = f->p, *e = f->p + f->len;

	while (s < e && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n'))
		s++;
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
		e--;
	*n = (size_t)(e - s);
	return s;
}

static int parse_u64(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;

	if (n == 0 || n > 19)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > (uint64_t)INT64_MAX) /* must fit an off_t */
		return -EINVAL;
	*out = v;
	return 0;
}

/* ---- ISO 8601 ------------------------------------------------------------ */

static int num(const char *s, size_t n, int *out)
{
	int v = 0;

	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return 0;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

int backend__iso8601_parse(const char *s, size_t len, int64_t *out)
{
	int y, mo, d, h, mi, se, oh = 0, om = 0, sign = 0;
	static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	size_t i = 19;

	if (len < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') ||
	    s[13] != ':' || s[16] != ':' || num(s, 4, &y) || num(s + 5, 2, &mo) ||
	    num(s + 8, 2, &d) || num(s + 11, 2, &h) || num(s + 14, 2, &mi) || num(s + 17, 2, &se))
		return -EINVAL;
	if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || h > 23 || mi > 59 || se > 60)
		return -EINVAL;
	if (s[i] == '.') { /* fraction: ignored */
		i++;
		if (i >= len || s[i] < '0' || s[i] > '9')
			return -EINVAL;
		while (i < len && s[i] >= '0' && s[i] <= '9')
			i++;
	}
	if (i + 1 == len && (s[i] == 'Z' || s[i] == 'z')) {
		sign = 0;
	} else if (i + 6 == len && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':' &&
		   !num(s + i + 1, 2, &oh) && !num(s + i + 4, 2, &om) && oh < 24 && om < 60) {
		sign = s[i] == '+' ? 1 : -1;
	} else {
		return -EINVAL;
	}
	*out = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se -
	       sign * (oh * 3600 + om * 60);
	return 0;
}

/* ---- ListObjectsV2 -------------------------------------------------------- */

enum list_field { F_NONE, F_KEY, F_SIZE, F_ETAG, F_MTIME, F_TRUNC, F_TOKEN, F_IGNORE };

/* The state of one ListObjectsV2 page being parsed. */
struct list_parse {
	struct xml_tok stack[XML_MAX_DEPTH]; /* the open elements */
	int depth, in_contents, seen_root;
	enum list_field cur; /* the field whose text is being read */
	struct field key, small, token;
	char smallbuf[XML_FIELD_MAX];
	struct backend_s3_entry e; /* the <Contents> being read */
	int have_key, have_size, entry_bad;
	backend__s3_entry_cb cb;
	void *arg;
	struct backend_s3_page *page;
};

/* Text or CDATA t: into the current field. 0 or -EBADMSG. */
static int list_text(struct list_parse *p, const struct xml_tok *t)
{
	int decode = t->kind == XML_TEXT;

	if (p->depth == 0) { /* only blanks outside the root */
		for (size_t i = 0; i < t->n; i++)
			if (t->s[i] != ' ' && t->s[i] != '\t' && t->s[i] != '\r' && t->s[i] != '\n')
				return -EBADMSG;
		return 0;
	}
	if (p->cur == F_KEY)
		field_text(&p->key, t->s, t->n, decode);
	else if (p->cur == F_TOKEN)
		field_text(&p->token, t->s, t->n, decode);
	else if (p->cur != F_NONE && p->cur != F_IGNORE)
		field_text(&p->small, t->s, t->n, decode);
	return 0;
}

/* Start tag (or empty element) t: pushed. 0; 1 for an empty root (not
 * pushed, nothing more to do with it); -EBADMSG. */
static int list_open(struct list_parse *p, const struct xml_tok *t)
{
	if (p->depth == 0) {
		if (p->seen_root || !name_is(t, "ListBucketResult"))
			return -EBADMSG;
		p->seen_root = 1;
		if (t->kind == XML_EMPTY)
			return 1;
	} else if (p->depth == 1 && name_is(t, "Contents") && t->kind == XML_START) {
		p->in_contents = 1;
		p->have_key = p->have_size = p->entry_bad = 0;
		memset(&p->e, 0, sizeof(p->e));
		field_reset(&p->key);
	} else if (p->depth == 2 && p->in_contents && p->cur == F_NONE) {
		p->cur = name_is(t, "Key")	      ? F_KEY
			 : name_is(t, "Size")	      ? F_SIZE
			 : name_is(t, "ETag")	      ? F_ETAG
			 : name_is(t, "LastModified") ? F_MTIME
						      : F_IGNORE;
		field_reset(p->cur == F_KEY ? &p->key : &p->small);
	} else if (p->depth == 1 && p->cur == F_NONE) {
		p->cur = name_is(t, "IsTruncated")	       ? F_TRUNC
			 : name_is(t, "NextContinuationToken") ? F_TOKEN
							       : F_IGNORE;
		field_reset(p->cur == F_TOKEN ? &p->token : &p->small);
	} else if (p->cur != F_NONE && p->cur != F_IGNORE) {
		/* markup inside a text field: the field is garbage */
		if (p->cur == F_KEY)
			p->key.bad = 1;
		else if (p->cur == F_TOKEN)
			p->token.bad = 1;
		else
			p->small.bad = 1;
	}
	if (p->depth >= XML_MAX_DEPTH)
		return -EBADMSG;
	p->stack[p->depth++] = *t;
	return 0;
}

/* The end of a field of <Contents>. */
static void list_entry_field(struct list_parse *p)
{
	size_t n;
	const char *v = field_trim(&p->small, &n);

	switch (p->cur) {
	case F_KEY:
		if (p->key.bad || p->key.len == 0)
			p->entry_bad = 1;
		p->have_key = 1;
		break;
	case F_SIZE:
		if (p->small.bad || parse_u64(v, n, &p->e.size) < 0)
			p->entry_bad = 1;
		p->have_size = 1;
		break;
	case F_ETAG:
		if (!p->small.bad && n < sizeof(p->e.etag)) {
			memcpy(p->e.etag, v, n);
			p->e.etag[n] = '\0';
		}
		break;
	case F_MTIME:
		if (p->small.bad || backend__iso8601_parse(v, n, &p->e.mtime) < 0)
			p->e.mtime = 0;
		break;
	default:
		break;
	}
	p->cur = F_NONE;
}

/* The end of a field of the page (IsTruncated, NextContinuationToken).
 * 0, -EBADMSG or -ENOMEM. */
static int list_page_field(struct list_parse *p)
{
	size_t n;
	const char *v = field_trim(&p->small, &n);
	enum list_field cur = p->cur;

	p->cur = F_NONE;
	if (cur == F_TRUNC) {
		if (p->small.bad)
			return -EBADMSG;
		p->page->truncated = n == 4 && memcmp(v, "true", 4) == 0;
	} else if (cur == F_TOKEN) {
		if (p->token.bad)
			return -EBADMSG; /* cannot go on without it */
		free(p->page->next_token);
		p->page->next_token = strndup(p->token.p, p->token.len);
		if (!p->page->next_token)
			return -ENOMEM;
	}
	return 0;
}

/* End tag t (or the end of an empty element): popped. 0, the callback's
 * nonzero answer, or a negative errno. */
static int list_close(struct list_parse *p, const struct xml_tok *t)
{
	if (p->depth == 0 || p->stack[p->depth - 1].n != t->n ||
	    memcmp(p->stack[p->depth - 1].s, t->s, t->n) != 0)
		return -EBADMSG;
	p->depth--;
	if (p->depth == 2 && p->in_contents) {
		list_entry_field(p);
	} else if (p->depth == 1 && p->in_contents) {
		p->in_contents = 0;
		if (!p->have_key || !p->have_size || p->entry_bad) {
			p->page->skipped++;
			if (p->have_key && p->key.over && !p->page->toolong++) {
				size_t n = sizeof(p->page->first_toolong) - 1;

				memcpy(p->page->first_toolong, p->key.p, n);
				p->page->first_toolong[n] = '\0';
			}
			return 0;
		}
		p->e.key = p->key.p;
		p->e.keylen = p->key.len;
		p->page->entries++;
		return p->cb(p->arg, &p->e);
	} else if (p->depth == 1) {
		return list_page_field(p);
	}
	return 0;
}

int backend__s3_xml_list(const char *xml, size_t len, backend__s3_entry_cb cb, void *arg,
			 struct backend_s3_page *page)
{
	struct xml_scan x = {xml, xml + len};
	struct xml_tok t;
	struct list_parse lp, *p = &lp;
	int ret = 0;

	memset(page, 0, sizeof(*page));
	memset(p, 0, sizeof(*p));
	p->cb = cb;
	p->arg = arg;
	p->page = page;
	p->key.p = malloc(BACKEND_S3_KEY_MAX + 1);
	p->token.p = malloc(XML_TOKEN_MAX + 1);
	if (!p->key.p || !p->token.p) {
		ret = -ENOMEM;
		goto out;
	}
	p->key.cap = BACKEND_S3_KEY_MAX + 1;
	p->token.cap = XML_TOKEN_MAX + 1;
	p->small.p = p->smallbuf;
	p->small.cap = sizeof(p->smallbuf);
	field_reset(&p->key);
	field_reset(&p->token);
	field_reset(&p->small);
	for (;;) {
		ret = xml_next(&x, &t);
		if (ret < 0 || t.kind == XML_EOF)
			break;
		if (t.kind == XML_TEXT || t.kind == XML_CDATA) {
			ret = list_text(p, &t);
		} else {
			if (t.kind == XML_START || t.kind == XML_EMPTY) {
				ret = list_open(p, &t);
				if (ret != 0 || t.kind == XML_START) {
					if (ret < 0)
						break;
					ret = 0;
					continue;
				}
				t.kind = XML_END; /* <X/>: opened and closed at once */
			}
			ret = list_close(p, &t);
		}
		if (ret != 0)
			goto out;
	}
	if (ret == 0 && (!p->seen_root || p->depth != 0))
		ret = -EBADMSG;
out:
	free(p->key.p);
	free(p->token.p);
	return ret;
}

/* ---- <Error> --------------------------------------------------------------- */

static void copy_printable(char *dst, size_t cap, const struct field *f)
{
	size_t o = 0;

	if (cap == 0)
		return;
	for (size_t i = 0; i < f->len && o + 1 < cap; i++) {
		unsigned char c = (unsigned char)f->p[i];

		dst[o++] = (c >= 0x20 && c < 0x7f) ? (char)c : (c == '\n' || c == '\t') ? ' ' : '?';
	}
	dst[o] = '\0';
}

int backend__s3_xml_error(const char *xml, size_t len, char *code, size_t codecap, char *msg,
			  size_t msgcap)
{
	struct xml_scan x = {xml, xml + len};
	struct xml_tok t;
	char cbuf[XML_FIELD_MAX], mbuf[XML_MESSAGE_MAX];
	struct field fc = {cbuf, 0, sizeof(cbuf), 0, 0}, fm = {mbuf, 0, sizeof(mbuf), 0, 0};
	struct field *cur = NULL;
	int depth = 0, seen_root = 0, ret;

	if (codecap)
		code[0] = '\0';
	if (msgcap)
		msg[0] = '\0';
	field_reset(&fc);
	field_reset(&fm);
	for (;;) {
		ret = xml_next(&x, &t);
		if (ret < 0)
			return ret;
		if (t.kind == XML_EOF)
			break;
		switch (t.kind) {
		case XML_TEXT:
		case XML_CDATA:
			if (cur && depth == 2)
				field_text(cur, t.s, t.n, t.kind == XML_TEXT);
			break;
		case XML_START:
			if (depth == 0) {
				if (seen_root || !name_is(&t, "Error"))
					return -EBADMSG;
				seen_root = 1;
			} else if (depth == 1) {
				cur = name_is(&t, "Code")      ? &fc
				      : name_is(&t, "Message") ? &fm
							       : NULL;
				if (cur)
					field_reset(cur);
			}
			if (++depth > XML_MAX_DEPTH)
				return -EBADMSG;
			break;
		case XML_END:
			if (depth == 0)
				return -EBADMSG;
			if (--depth == 1)
				cur = NULL;
			break;
		default:
			break;
		}
	}
	if (!seen_root || depth != 0)
		return -EBADMSG;
	/* a message cut at the bound is still worth showing */
	copy_printable(code, codecap, &fc);
	copy_printable(msg, msgcap, &fm);
	return 0;
}
