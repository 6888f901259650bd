/*
 * backend_listing.c — pure parsers of the http(s) store (declared in
 * backend_i.h, tested by tests/unit/test_http_parse.c): URL splitting,
 * percent-coding, and autoindex pages (nginx "autoindex_format json", and
 * HTML pages of <a href> links as nginx, Apache and Python's http.server
 * write them).
 *
 * Everything here reads untrusted bytes: the body is not NUL-terminated,
 * every read is bounded by len, and an entry is handed out only when its
 * name is one safe path component. What is not understood is skipped, not
 * guessed: a listing can hide an object, never invent one outside the
 * directory.
 *
 * Non-goals: a general JSON or HTML parser. The JSON parser accepts any
 * valid JSON value for unknown fields but only flat objects in one array.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "backend_i.h"

/* Longest name component (NAME_MAX) after decoding. */
#define LISTING_NAME_MAX 255

/* ------------------------------------------------------------------------ */
/* percent-decoding (URLs are parsed in backend_url.c)                      */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

ssize_t backend__pct_decode(const char *in, size_t len, char *out, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		char c = in[i];

		if (c == '%') {
			int h, l;

			if (i + 2 >= len)
				return -EINVAL;
			h = hexval(in[i + 1]);
			l = hexval(in[i + 2]);
			if (h < 0 || l < 0)
				return -EINVAL;
			c = (char)(h * 16 + l);
			i += 2;
		}
		if (c == '\0')
			return -EINVAL;
		if (o + 1 >= cap)
			return -ENAMETOOLONG;
		out[o++] = c;
	}
	if (o >= cap)
		return -ENAMETOOLONG;
	out[o] = '\0';
	return (ssize_t)o;
}

/* A decoded name is one safe path component. */
static int name_ok(const char *s, size_t len)
{
	if (len == 0 || len > LISTING_NAME_MAX)
		return 0;
	if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
		return 0;
	return memchr(s, '/', len) == NULL && memchr(s, '\0', len) == NULL;
}

/* ------------------------------------------------------------------------ */
/* JSON (nginx autoindex_format json)                                        */

struct jp {
	const char *p, *end;
	int depth;
};

#define JSON_MAX_DEPTH 32

static void j_ws(struct jp *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int utf8_put(char *out, size_t *o, size_t cap, uint32_t cp)
{
	unsigned char b[4];
	size_t n;

	if (cp < 0x80) {
		b[0] = (unsigned char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (unsigned char)(0xc0 | (cp >> 6));
		b[1] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (unsigned char)(0xe0 | (cp >> 12));
		b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		b[2] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		b[0] = (unsigned char)(0xf0 | (cp >> 18));
		b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
		b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		b[3] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	if (out) {
		if (*o + n >= cap)
			return -1; /* too long: the caller marks the value unusable */
		memcpy(out + *o, b, n);
	}
	*o += n;
	return 0;
}

static int j_hex4(struct jp *j, uint32_t *v)
{
	uint32_t x = 0;

	if (j->end - j->p < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		int h = hexval(j->p[i]);

		if (h < 0)
			return -1;
		x = x * 16 + (uint32_t)h;
	}
	j->p += 4;
	*v = x;
	return 0;
}

/* A string at j->p (at its '"'). With out: decoded into out (cap bytes,
 * NUL-terminated); *len = -1 when it did not fit or held a NUL. Returns 0
 * or -EINVAL (syntax). */
static int j_string(struct jp *j, char *out, size_t cap, long *len)
{
	size_t o = 0;
	int bad = 0;

	if (j->p >= j->end || *j->p != '"')
		return -EINVAL;
	j->p++;
	for (;;) {
		unsigned char c;

		if (j->p >= j->end)
			return -EINVAL;
		c = (unsigned char)*j->p++;
		if (c == '"')
			break;
		if (c < 0x20)
			return -EINVAL;
		if (c == '\\') {
			uint32_t cp;

			if (j->p >= j->end)
				return -EINVAL;
			c = (unsigned char)*j->p++;
			switch (c) {
			case '"':
			case '\\':
			case '/':
				break;
			case 'b':
				c = '\b';
				break;
			case 'f':
				c = '\f';
				break;
			case 'n':
				c = '\n';
				break;
			case 'r':
				c = '\r';
				break;
			case 't':
				c = '\t';
				break;
			case 'u':
				if (j_hex4(j, &cp) < 0)
					return -EINVAL;
				if (cp >= 0xd800 && cp < 0xdc00) {
					uint32_t lo;

					if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u')
						return -EINVAL;
					j->p += 2;
					if (j_hex4(j, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
						return -EINVAL;
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				} else if (cp >= 0xdc00 && cp < 0xe000) {
					return -EINVAL;
				}
				if (cp == 0)
					bad = 1;
				if (!bad && utf8_put(out, &o, cap, cp) < 0)
					bad = 1;
				continue;
			default:
				return -EINVAL;
			}
		}
		if (out && !bad) {
			if (o + 1 >= cap)
				bad = 1;
			else
				out[o++] = (char)c;
		}
	}
	if (out) {
		out[bad ? 0 : o] = '\0';
		*len = bad ? -1 : (long)o;
	}
	return 0;
}

/* A number: *v gets its value when it is a non-negative integer that fits
 * in 63 bits, else *ok = 0. Returns -EINVAL on a syntax error. */
static int j_number(struct jp *j, uint64_t *v, int *ok)
{
	const char *s = j->p;
	uint64_t x = 0;
	int integer = 1, fits = 1;

	if (j->p < j->end && *j->p == '-') {
		integer = 0;
		j->p++;
	}
	if (j->p >= j->end || *j->p < '0' || *j->p > '9')
		return -EINVAL;
	while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
		if (x > (UINT64_MAX / 2 - 9) / 10)
			fits = 0;
		else
			x = x * 10 + (uint64_t)(*j->p - '0');
		j->p++;
	}
	if (j->p < j->end && *j->p == '.') {
		integer = 0;
		j->p++;
		if (j->p >= j->end || *j->p < '0' || *j->p > '9')
			return -EINVAL;
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
		integer = 0;
		j->p++;
		if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
			j->p++;
		if (j->p >= j->end || *j->p < '0' || *j->p > '9')
			return -EINVAL;
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	(void)s;
	*ok = integer && fits;
	*v = x;
	return 0;
}

static int j_lit(struct jp *j, const char *w)
{
	size_t n = strlen(w);

	if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0)
		return -EINVAL;
	j->p += n;
	return 0;
}

/* Consume open (after blanks), then blanks: 1 when close follows at once
 * (consumed too: an empty array or object), 0 when values follow, -EINVAL
 * when open is not there. */
static int j_open(struct jp *j, char open, char close)
{
	j_ws(j);
	if (j->p >= j->end || *j->p != open)
		return -EINVAL;
	j->p++;
	j_ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		return 1;
	}
	return 0;
}

/* After a value inside an array or object that close ends: 1 when a ','
 * follows (another value comes), 0 when close does, either consumed;
 * -EINVAL otherwise. */
static int j_more(struct jp *j, char close)
{
	j_ws(j);
	if (j->p >= j->end)
		return -EINVAL;
	if (*j->p == ',') {
		j->p++;
		return 1;
	}
	if (*j->p != close)
		return -EINVAL;
	j->p++;
	return 0;
}

/* Skip any value. */
static int j_skip(struct jp *j)
{
	uint64_t v;
	int ok, err;

	j_ws(j);
	if (j->p >= j->end)
		return -EINVAL;
	switch (*j->p) {
	case '"':
		return j_string(j, NULL, 0, NULL);
	case 't':
		return j_lit(j, "true");
	case 'f':
		return j_lit(j, "false");
	case 'n':
		return j_lit(j, "null");
	case '[':
	case '{': {
		char close = *j->p == '[' ? ']' : '}';
		int more;

		if (++j->depth > JSON_MAX_DEPTH)
			return -EINVAL;
		more = j_open(j, *j->p, close) == 0;
		while (more) {
			j_ws(j);
			if (close == '}') {
				if ((err = j_string(j, NULL, 0, NULL)) < 0)
					return err;
				j_ws(j);
				if (j->p >= j->end || *j->p != ':')
					return -EINVAL;
				j->p++;
			}
			if ((err = j_skip(j)) < 0)
				return err;
			more = j_more(j, close);
			if (more < 0)
				return more;
		}
		j->depth--;
		return 0;
	}
	default:
		return j_number(j, &v, &ok);
	}
}

/* The fields of one entry of a JSON listing. */
struct jent {
	char name[LISTING_NAME_MAX + 1], type[16], mtime[64];
	long name_len, type_len, mtime_len; /* -1: too long */
	int have_name, have_type, size_ok, have_size;
	uint64_t size;
};

/* One value of key in an entry object (j after the ':' and blanks). */
static int j_entry_value(struct jp *j, const char *key, long key_len, struct jent *e)
{
	int err = 0;

	if (key_len < 0 || j->p >= j->end) {
		err = j_skip(j);
	} else if (strcmp(key, "name") == 0 && *j->p == '"') {
		err = j_string(j, e->name, sizeof(e->name), &e->name_len);
		e->have_name = 1;
	} else if (strcmp(key, "type") == 0 && *j->p == '"') {
		err = j_string(j, e->type, sizeof(e->type), &e->type_len);
		e->have_type = 1;
	} else if (strcmp(key, "mtime") == 0 && *j->p == '"') {
		err = j_string(j, e->mtime, sizeof(e->mtime), &e->mtime_len);
	} else if (strcmp(key, "size") == 0 && *j->p != '"' && *j->p != '[' && *j->p != '{' &&
		   *j->p != 't' && *j->p != 'f' && *j->p != 'n') {
		err = j_number(j, &e->size, &e->size_ok);
		e->have_size = 1;
	} else {
		err = j_skip(j);
	}
	return err < 0 ? err : 0;
}

/* The entry object at j into e. Returns 0 or a negative errno. */
static int j_entry(struct jp *j, struct jent *e)
{
	int err, more;

	memset(e, 0, sizeof(*e));
	e->name_len = e->type_len = e->mtime_len = -1;
	more = j_open(j, '{', '}');
	if (more < 0)
		return more;
	for (more = !more; more;) {
		char key[16];
		long key_len = -1;

		j_ws(j);
		if ((err = j_string(j, key, sizeof(key), &key_len)) < 0)
			return err;
		j_ws(j);
		if (j->p >= j->end || *j->p != ':')
			return -EINVAL;
		j->p++;
		j_ws(j);
		if ((err = j_entry_value(j, key, key_len, e)) < 0)
			return err;
		more = j_more(j, '}');
		if (more < 0)
			return more;
	}
	return 0;
}

/* Hand e to cb when it is a usable file or directory. 0 or cb's answer. */
static int j_entry_emit(const struct jent *e, backend__listent_cb cb, void *arg)
{
	struct backend__listent le = {0};
	int is_file;

	if (!e->have_name || !e->have_type || e->name_len <= 0 || e->type_len <= 0 ||
	    !name_ok(e->name, (size_t)e->name_len))
		return 0;
	is_file = strcmp(e->type, "file") == 0;
	le.name = e->name;
	le.is_dir = strcmp(e->type, "directory") == 0;
	if (e->mtime_len > 0) {
		time_t t = curl_getdate(e->mtime, NULL);

		le.mtime = t > 0 ? (int64_t)t : 0;
	}
	/* a file whose size is not a sane integer is skipped: reading it could
	 * only go wrong */
	if (!le.is_dir && !(is_file && (!e->have_size || e->size_ok)))
		return 0;
	le.has_size = is_file && e->have_size;
	le.size = le.has_size ? e->size : 0;
	return cb(arg, &le);
}

int backend__listing_json(const char *body, size_t len, backend__listent_cb cb, void *arg)
{
	struct jp j = {body, body + len, 0};
	struct jent e;
	int err, more;

	more = j_open(&j, '[', ']');
	if (more < 0)
		return more;
	for (more = !more; more;) {
		err = j_entry(&j, &e);
		if (err < 0)
			return err;
		err = j_entry_emit(&e, cb, arg);
		if (err)
			return err;
		more = j_more(&j, ']');
		if (more < 0)
			return more;
	}
	j_ws(&j);
	return j.p == j.end ? 0 : -EINVAL;
}

/* ------------------------------------------------------------------------ */
/* HTML                                                                       */

/* Decode the few character references an href can hold (&amp; &lt; &gt;
 * &quot; &apos; &#N; &#xN;) into out. Returns the length or -1. */
static long html_unescape(const char *in, size_t len, char *out, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned long c = (unsigned char)in[i];

		if (c == '&') {
			static const struct {
				const char *name;
				char c;
			} ents[] = {{"amp;", '&'},  {"lt;", '<'},    {"gt;", '>'},
				    {"quot;", '"'}, {"apos;", '\''}, {"#39;", '\''}};
			size_t k;

			for (k = 0; k < sizeof(ents) / sizeof(ents[0]); k++) {
				size_t n = strlen(ents[k].name);

				if (len - i - 1 >= n && memcmp(in + i + 1, ents[k].name, n) == 0) {
					c = (unsigned char)ents[k].c;
					i += n;
					break;
				}
			}
			if (k == sizeof(ents) / sizeof(ents[0]) && i + 2 < len &&
			    in[i + 1] == '#') {
				const char *semi = memchr(in + i, ';', len - i);
				int hx = in[i + 2] == 'x' || in[i + 2] == 'X';
				unsigned long v = 0;
				const char *q;

				if (!semi)
					return -1;
				for (q = in + i + 2 + hx; q < semi; q++) {
					int h = hx ? hexval(*q)
						   : (*q >= '0' && *q <= '9' ? *q - '0' : -1);

					if (h < 0 || v > 0x10ffff)
						return -1;
					v = v * (hx ? 16 : 10) + (unsigned long)h;
				}
				if (q == in + i + 2 + hx || v == 0 || v > 0x10ffff)
					return -1;
				{
					size_t oo = o;

					if (utf8_put(out, &oo, cap, (uint32_t)v) < 0)
						return -1;
					o = oo;
				}
				i = (size_t)(semi - in);
				continue;
			}
		}
		if (o + 1 >= cap)
			return -1;
		out[o++] = (char)c;
	}
	out[o] = '\0';
	return (long)o;
}

/* One href: is it a direct child of this directory? */
static int html_href(const char *h, size_t hlen, backend__listent_cb cb, void *arg)
{
	char raw[3 * LISTING_NAME_MAX + 8], name[LISTING_NAME_MAX + 2];
	struct backend__listent e = {0};
	long rl;
	ssize_t nl;
	int is_dir = 0;

	if (hlen == 0 || hlen >= sizeof(raw))
		return 0;
	rl = html_unescape(h, hlen, raw, sizeof(raw));
	if (rl <= 0)
		return 0;
	/* absolute, scheme-relative, with a scheme, a query or a fragment */
	if (raw[0] == '/' || memchr(raw, ':', (size_t)rl) || memchr(raw, '?', (size_t)rl) ||
	    memchr(raw, '#', (size_t)rl))
		return 0;
	if (strncmp(raw, "./", 2) == 0) {
		memmove(raw, raw + 2, (size_t)rl - 1);
		rl -= 2;
	}
	if (rl > 0 && raw[rl - 1] == '/') {
		is_dir = 1;
		raw[--rl] = '\0';
	}
	nl = backend__pct_decode(raw, (size_t)rl, name, sizeof(name));
	if (nl <= 0 || !name_ok(name, (size_t)nl))
		return 0;
	e.name = name;
	e.is_dir = is_dir;
	return cb(arg, &e);
}

int backend__listing_html(const char *body, size_t len, backend__listent_cb cb, void *arg)
{
	const char *p = body, *end = body + len;

	while (p < end) {
		const char *lt = memchr(p, '<', (size_t)(end - p));
		const char *gt;
		const char *a;

		if (!lt)
			break;
		p = lt + 1;
		if (end - p >= 3 && memcmp(p, "!--", 3) == 0) { /* comment */
			const char *q = p + 3;

			while (q + 2 < end && memcmp(q, "-->", 3) != 0)
				q++;
			p = q + 3;
			continue;
		}
		if (end - p < 2 || (p[0] != 'a' && p[0] != 'A') ||
		    (p[1] != ' ' && p[1] != '\t' && p[1] != '\n' && p[1] != '\r'))
			continue;
		gt = memchr(p, '>', (size_t)(end - p));
		if (!gt)
			break;
		/* attributes of <a ...>: find href= */
		a = p + 1;
		while (a < gt) {
			const char *nm, *v;
			size_t nmlen, vlen;

			while (a < gt && (*a == ' ' || *a == '\t' || *a == '\n' || *a == '\r'))
				a++;
			nm = a;
			while (a < gt && *a != '=' && *a != ' ' && *a != '\t' && *a != '\n' &&
			       *a != '\r')
				a++;
			nmlen = (size_t)(a - nm);
			if (nmlen == 0) {
				a++;
				continue;
			}
			if (a >= gt || *a != '=')
				continue; /* attribute without value */
			a++;
			if (a < gt && (*a == '"' || *a == '\'')) {
				const char *q = memchr(a + 1, *a, (size_t)(end - a - 1));

				if (!q)
					return 0;
				v = a + 1;
				vlen = (size_t)(q - v);
				a = q + 1;
				if (q >= gt) { /* '>' inside the quoted value */
					gt = memchr(q, '>', (size_t)(end - q));
					if (!gt)
						return 0;
				}
			} else {
				v = a;
				while (a < gt && *a != ' ' && *a != '\t' && *a != '\n' &&
				       *a != '\r')
					a++;
				vlen = (size_t)(a - v);
			}
			if (nmlen == 4 && strncasecmp(nm, "href", 4) == 0) {
				int err = html_href(v, vlen, cb, arg);

				if (err)
					return err;
				break;
			}
		}
		p = gt + 1;
	}
	return 0;
}

int backend__listing_parse(const char *body, size_t len, backend__listent_cb cb, void *arg)
{
	size_t i = 0;

	while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r'))
		i++;
	if (i < len && body[i] == '[')
		return backend__listing_json(body, len, cb, arg);
	return backend__listing_html(body, len, cb, arg);
}
