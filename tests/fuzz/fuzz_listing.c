/*
 * fuzz_listing.c — libFuzzer harness for the http(s) store's pure parsers
 * (backend_listing.c, backend_brace.c): nginx JSON and HTML autoindex pages,
 * URL splitting, percent-decoding/encoding, and brace expansion with a
 * small cap. Every input goes through all of them: the listing parsers get
 * an exact-size copy (not NUL-terminated: overreads are caught by ASan), the
 * string functions a NUL-terminated one. Contracts of backend_i.h on the
 * outputs are checked; a broken one aborts (libFuzzer reports a crash).
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_i.h"
#include "check.h"

/* Small, so one input cannot make the harness itself slow or huge. */
#define BRACE_CAP 256

struct seen {
	size_t n;
	size_t stop_at; /* 0: never */
};

static int on_ent(void *arg, const struct backend__listent *e)
{
	struct seen *s = arg;
	size_t l;

	ENSURE(e->name);
	l = strlen(e->name);
	ENSURE(l > 0 && !memchr(e->name, '/', l));
	ENSURE(strcmp(e->name, ".") && strcmp(e->name, ".."));
	ENSURE(e->is_dir == 0 || e->is_dir == 1);
	s->n++;
	return s->stop_at && s->n == s->stop_at ? 42 : 0;
}

static void listing(int (*fn)(const char *, size_t, backend__listent_cb, void *), const char *body,
		    size_t len)
{
	struct seen s = {0, 0};
	int r = fn(body, len, on_ent, &s);

	ENSURE(r == 0 || r == -EINVAL);
	if (r == 0 && s.n > 1) {
		struct seen s2 = {0, 1 + len % s.n};

		r = fn(body, len, on_ent, &s2);
		ENSURE(r == 42 && s2.n == s2.stop_at);
	}
}

static void url(const char *z, size_t len)
{
	struct backend_url u;
	char *dec, *enc, *dec2, *z0;
	ssize_t dl, el, dl2;

	/* curl's parser on any bytes: a result is self-consistent */
	z0 = malloc(len + 1);
	ENSURE(z0);
	memcpy(z0, z, len);
	z0[len] = '\0';
	if (backend__url_parse(&u, z0) == 0) {
		ENSURE(u.scheme && u.path && u.path[0] == '/');
		ENSURE(!strcmp(u.scheme, "file") ||
		       (u.host && *u.host && u.authority && u.origin && u.base));
		backend__url_free(&u);
	}
	free(z0);

	/* decode, encode the result, decode again: the same bytes */
	dec = malloc(len + 1);
	enc = malloc(3 * len + 1);
	dec2 = malloc(len + 1);
	ENSURE(dec && enc && dec2);
	dl = backend__pct_decode(z, len, dec, len + 1);
	ENSURE(dl == -EINVAL || (dl >= 0 && (size_t)dl <= len && dec[dl] == '\0'));
	if (dl >= 0) {
		ENSURE(strlen(dec) == (size_t)dl);
		el = backend__uri_encode(enc, 3 * (size_t)dl + 1, dec, (size_t)dl, 1);
		ENSURE(el >= 0 && (size_t)el == strlen(enc));
		dl2 = backend__pct_decode(enc, (size_t)el, dec2, len + 1);
		ENSURE(dl2 == dl && memcmp(dec, dec2, (size_t)dl) == 0);
		/* too small an output is -ENAMETOOLONG, never an overflow */
		if (el > 0)
			ENSURE(backend__uri_encode(enc, (size_t)el, dec, (size_t)dl, 1) ==
			       -ENAMETOOLONG);
		ENSURE(backend__pct_decode(z, len, dec2, (size_t)dl) == -ENAMETOOLONG);
	}
	free(dec);
	free(enc);
	free(dec2);
}

static void brace(const char *z)
{
	char **v = NULL;
	size_t n = 0;
	int r = backend__brace_expand(z, BRACE_CAP, &v, &n);

	ENSURE(r == 0 || r == -EINVAL || r == -E2BIG || r == -ENOMEM);
	if (r == 0) {
		ENSURE(n >= 1 && n <= BRACE_CAP && v);
		for (size_t i = 0; i < n; i++)
			ENSURE(v[i]);
		/* no brace pattern: the one name is the pattern itself */
		if (!strchr(z, '{') && !strchr(z, '}'))
			ENSURE(n == 1 && strcmp(v[0], z) == 0);
		backend__strv_free(v, n);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *body = malloc(size ? size : 1);
	char *z = malloc(size + 1);
	size_t zl;

	ENSURE(body && z);
	if (size)
		memcpy(body, data, size);
	listing(backend__listing_parse, body, size);
	listing(backend__listing_json, body, size);
	listing(backend__listing_html, body, size);

	memcpy(z, data, size);
	z[size] = '\0';
	zl = strlen(z);
	url(z, zl);
	brace(z);
	free(body);
	free(z);
	return 0;
}
