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
 * Non-goals: a general HTML parser. JSON is read by disk/disk_json.h: any
 * valid value is accepted for unknown fields, but only objects in one array
 * are entries.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "backend_i.h"
#include "disk_json.h"

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

#define JSON_MAX_DEPTH 32

/* The fields of one entry of a JSON listing. */
struct jent {
	char name[LISTING_NAME_MAX + 1], type[16], mtime[64];
	long name_len, type_len, mtime_len; /* -1: absent, too long or holding a NUL */
	int have_name, have_type, size_ok, have_size;
	uint64_t size;
};

/* A string value into out (cap bytes): its length, or -1 when unusable. */
static long j_text(const struct disk_json_tok *v, char *out, size_t cap)
{
	ssize_t n = disk_json_str(v, out, cap);

	if (n < 0)
		out[0] = '\0';
	return n < 0 ? -1 : (long)n;
}

/* One member k: v of an entry object. Fields of other types than these are
 * left as absent, as are unknown ones. */
static void j_entry_value(const struct disk_json_tok *k, const struct disk_json_tok *v,
			  struct jent *e)
{
	if (v->type == DISK_JSON_STRING) {
		if (disk_json_streq(k, "name")) {
			e->name_len = j_text(v, e->name, sizeof(e->name));
			e->have_name = 1;
		} else if (disk_json_streq(k, "type")) {
			e->type_len = j_text(v, e->type, sizeof(e->type));
			e->have_type = 1;
		} else if (disk_json_streq(k, "mtime")) {
			e->mtime_len = j_text(v, e->mtime, sizeof(e->mtime));
		}
	} else if (v->type == DISK_JSON_NUMBER && disk_json_streq(k, "size")) {
		/* a size is an off_t, and so is one past its end */
		e->size_ok = disk_json_u64(v, &e->size) == 0 && e->size < INT64_MAX;
		e->have_size = 1;
	}
}

/* The entry object at j into e. Returns 0 or a negative errno. */
static int j_entry(struct disk_json *j, struct jent *e)
{
	struct disk_json_tok k, v;
	int more;

	memset(e, 0, sizeof(*e));
	e->name_len = e->type_len = e->mtime_len = -1;
	if (disk_json_enter(j, DISK_JSON_OBJECT) < 0)
		return j->err;
	while ((more = disk_json_next(j, &k)) > 0) {
		if (disk_json_value(j, &v) < 0)
			return j->err;
		j_entry_value(&k, &v, e);
	}
	return more;
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

/* Entries are handed out as they are read: a document found malformed
 * later gives -EINVAL after them (the caller drops the whole listing). */
int backend__listing_json(const char *body, size_t len, backend__listent_cb cb, void *arg)
{
	struct disk_json j;
	struct jent e;
	int err, more;

	disk_json_init(&j, body, len, JSON_MAX_DEPTH);
	if (disk_json_enter(&j, DISK_JSON_ARRAY) < 0)
		return -EINVAL;
	while ((more = disk_json_next(&j, NULL)) > 0) {
		if (j_entry(&j, &e) < 0)
			return -EINVAL;
		err = j_entry_emit(&e, cb, arg);
		if (err)
			return err;
	}
	if (more < 0 || disk_json_end(&j) < 0)
		return -EINVAL;
	return 0;
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
					unsigned char u[4];
					size_t n = disk_json_utf8((uint32_t)v, u);

					if (o + n >= cap)
						return -1;
					memcpy(out + o, u, n);
					o += n;
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
