/*
 * test_http_parse.c — unit tests of the pure parsers of the http(s) store
 * (backend_brace.c, backend_listing.c): brace expansion, URL splitting,
 * percent-coding, nginx JSON and HTML autoindex pages, hostile inputs.
 * Every expectation is an exact string.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_i.h"
#include "check.h"

/* ---- brace expansion ---------------------------------------------------- */

/* Expand pat and join the names with ' '; returns the error or 0. */
static int expand_join(const char *pat, size_t max, char *out, size_t cap)
{
	char **v;
	size_t n, o = 0;
	int err = backend__brace_expand(pat, max, &v, &n);

	out[0] = '\0';
	if (err < 0)
		return err;
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(out + o, o < cap ? cap - o : 0, "%s%s", i ? " " : "", v[i]);
	backend__strv_free(v, n);
	return 0;
}

static void brace_eq(const char *pat, const char *want)
{
	char got[4096];
	int err = expand_join(pat, BACKEND_BRACE_MAX, got, sizeof(got));

	CHECK(err == 0 && strcmp(got, want) == 0, "'%s': got '%s' (err %d), want '%s'", pat, got,
	      err, want);
}

static void brace_err(const char *pat, size_t max, int want)
{
	char got[4096];
	int err = expand_join(pat, max, got, sizeof(got));

	CHECK(err == want, "'%s': got err %d ('%s'), want %d", pat, err, got, want);
}

static void test_brace(void)
{
	char **v;
	size_t n;

	brace_eq("a.tar", "a.tar");
	brace_eq("s-{0..3}.tar", "s-0.tar s-1.tar s-2.tar s-3.tar");
	brace_eq("s-{8..11}", "s-8 s-9 s-10 s-11");
	brace_eq("s-{000..003}.tar", "s-000.tar s-001.tar s-002.tar s-003.tar");
	brace_eq("{098..101}", "098 099 100 101");
	brace_eq("{0..0}", "0");
	brace_eq("{3..1}", "3 2 1");
	brace_eq("{03..1}", "03 02 01");
	brace_eq("{1..03}", "01 02 03");
	brace_eq("{a,b,c}.tar", "a.tar b.tar c.tar");
	brace_eq("x{,y}z", "xz xyz");
	brace_eq("{train,val}/s-{0..1}.tar", "train/s-0.tar train/s-1.tar val/s-0.tar val/s-1.tar");
	brace_eq("{a,b}{1..2}{x,y}", "a1x a1y a2x a2y b1x b1y b2x b2y");
	brace_eq("lit{}eral", "lit{}eral"); /* no ',' or '..': kept literally */
	brace_eq("lit{abc}", "lit{abc}");
	brace_eq("{abc}{1..2}", "{abc}1 {abc}2");
	brace_eq("http://h:80/d/shard-{000000..000002}.tar",
		 "http://h:80/d/shard-000000.tar http://h:80/d/shard-000001.tar "
		 "http://h:80/d/shard-000002.tar");
	brace_eq("{999999999999999998..999999999999999999}",
		 "999999999999999998 999999999999999999");

	brace_err("s-{0..3", BACKEND_BRACE_MAX, -EINVAL);
	brace_err("s-0..3}", BACKEND_BRACE_MAX, -EINVAL);
	brace_err("{a,{b,c}}", BACKEND_BRACE_MAX, -EINVAL);
	brace_err("{a..c}", BACKEND_BRACE_MAX, -EINVAL);
	brace_err("{1..}", BACKEND_BRACE_MAX, -EINVAL);
	brace_err("{..2}", BACKEND_BRACE_MAX, -EINVAL);
	brace_err("{-1..2}", BACKEND_BRACE_MAX, -EINVAL);
	brace_err("{0..10..2}", BACKEND_BRACE_MAX, -EINVAL);
	brace_err("{1234567890123456789..1}", BACKEND_BRACE_MAX, -EINVAL); /* 19 digits */
	brace_err("}", BACKEND_BRACE_MAX, -EINVAL);
	/* the cap, checked before allocating */
	brace_err("{0..1000000}", BACKEND_BRACE_MAX, -E2BIG);
	brace_err("{0..999}{0..999}{0..1}", BACKEND_BRACE_MAX, -E2BIG);
	brace_err("{0..999999999999999999}{0..999999999999999999}", BACKEND_BRACE_MAX, -E2BIG);
	brace_err("{0..9}", 9, -E2BIG);
	brace_err("{0..2}{0..2}", 8, -E2BIG);
	CHECK(backend__brace_expand("{0..2}{0..2}", 9, &v, &n) == 0 && n == 9, "cap 9 holds 9");
	backend__strv_free(v, n);
	/* exactly at the default cap */
	CHECK(backend__brace_expand("{0..999}{000..999}", BACKEND_BRACE_MAX, &v, &n) == 0 &&
		  n == 1000000 && strcmp(v[0], "0000") == 0 && strcmp(v[999999], "999999") == 0 &&
		  strcmp(v[1000], "1000") == 0,
	      "1000000 names");
	backend__strv_free(v, n);
	backend__strv_free(NULL, 0);
}

/* ---- URLs and percent-coding --------------------------------------------- */

/* "scheme|userinfo|authority|path|query|origin|base" of url, or "ERR" */
static void url_eq(const char *url, const char *want)
{
	struct backend_url u;
	char got[1100];
	int err = backend__url_parse(&u, url);

	if (err < 0) {
		CHECK(strcmp(want, "ERR") == 0, "'%s': parse failed", url);
		return;
	}
	snprintf(got, sizeof(got), "%s|%d|%s|%s|%s|%s|%s", u.scheme, u.userinfo,
		 u.authority ? u.authority : "", u.path, u.query ? u.query : "",
		 u.origin ? u.origin : "", u.base ? u.base : "");
	CHECK(strcmp(got, want) == 0, "'%s': got '%s', want '%s'", url, got, want);
	backend__url_free(&u);
}

static void origin_eq(const char *url, const char *want)
{
	char *o = backend__url_origin(url);

	CHECK((!o && !want) || (o && want && strcmp(o, want) == 0),
	      "origin of '%s': '%s', want '%s'", url, o ? o : "(null)", want ? want : "(null)");
	free(o);
}

static void file_eq(const char *url, const char *want)
{
	char *path = NULL;
	const char *why;
	int err = backend__file_url_path(url, &path, &why);

	CHECK((err < 0 && !want) || (err == 0 && want && strcmp(path, want) == 0),
	      "file path of '%s': %d '%s', want '%s'", url, err, path ? path : "",
	      want ? want : "(error)");
	free(path);
}

static void endpoint_eq(const char *url, int want_err, const char *host, const char *path,
			const char *base)
{
	struct backend_endpoint ep;
	int err = backend__endpoint_parse(&ep, url);

	CHECK(err == want_err &&
		  (err < 0 || (strcmp(ep.host, host) == 0 && strcmp(ep.path, path) == 0 &&
			       strcmp(ep.base, base) == 0)),
	      "endpoint '%s': %d host '%s' path '%s' base '%s'", url, err, ep.host, ep.path,
	      ep.base);
}

static void test_url(void)
{
	char buf[64];

	url_eq("http://h/d/x.tar", "http|0|h|/d/x.tar||http://h:80|http://h/d/x.tar");
	url_eq("https://h:8443/", "https|0|h:8443|/||https://h:8443|https://h:8443/");
	url_eq("http://h", "http|0|h|/||http://h:80|http://h/");
	url_eq("http://h?x=1", "http|0|h|/|x=1|http://h:80|http://h/");
	url_eq("HTTP://u:p@h:1/a/b?tok=1&y=2#frag",
	       "http|1|h:1|/a/b|tok=1&y=2|http://h:1|http://u:p@h:1/a/b");
	url_eq("http://h/p#x?y", "http|0|h|/p||http://h:80|http://h/p");
	url_eq("http://[::1]:8080/p",
	       "http|0|[::1]:8080|/p||http://[::1]:8080|http://[::1]:8080/p");
	/* the default port is left out of Host: (as curl sends it), not out of the origin */
	url_eq("https://S3.Example.com:443/s3/",
	       "https|0|S3.Example.com|/s3/||"
	       "https://s3.example.com:443|https://S3.Example.com:443/s3/");
	url_eq("http://h/d/../x", "http|0|h|/d/../x||http://h:80|http://h/d/../x");
	url_eq("file:///a/b", "file|0||/a/b|||");
	url_eq("file://localhost/a/b", "file|0||/a/b|||");
	url_eq("ftp://h/p", "ERR");
	url_eq("http:///p", "ERR");
	url_eq("http://u@/p", "ERR");
	url_eq("http://:80/p", "ERR");
	url_eq("http://a@b@h/p", "ERR");
	url_eq("http://h:99999/p", "ERR");
	url_eq("http://h/a b", "ERR");
	url_eq("s3://b/p", "ERR");
	url_eq("file://otherhost/a", "ERR");

	/* the origin is the host curl connects to, whatever precedes an '@' */
	origin_eq("http://good.example@evil.example/x", "http://evil.example:80");
	origin_eq("http://good.example\\@evil.example/x", "http://evil.example:80");
	origin_eq("HTTPS://Host:443/x", "https://host:443");
	origin_eq("https://host/x", "https://host:443");
	origin_eq("http://host:8080/x", "http://host:8080");
	origin_eq("ftp://host/x", NULL);
	origin_eq("file:///x", NULL);

	file_eq("file:///data/shards", "/data/shards");
	file_eq("file://localhost/data/shards", "/data/shards");
	file_eq("file://LOCALHOST/data/my%20shards", "/data/my shards");
	file_eq("file://otherhost/data", NULL);
	file_eq("file:///data?x=1", NULL);
	file_eq("file:///data#f", NULL);
	file_eq("file:///a%00b", NULL);
	file_eq("file:///a%zz", NULL);
	file_eq("file://localhost", NULL);

	endpoint_eq("http://127.0.0.1:9000/", 0, "127.0.0.1:9000", "", "http://127.0.0.1:9000");
	endpoint_eq("https://s3.example.com:443/s3/", 0, "s3.example.com", "/s3",
		    "https://s3.example.com/s3");
	endpoint_eq("http://u:p@h/", -EINVAL, NULL, NULL, NULL);
	endpoint_eq("http://h/?x=1", -EINVAL, NULL, NULL, NULL);
	endpoint_eq("ftp://h/", -EINVAL, NULL, NULL, NULL);
	endpoint_eq("http:///x", -EINVAL, NULL, NULL, NULL);

	CHECK(backend__pct_decode("a%20b%2Fc%41+", 13, buf, sizeof(buf)) == 7 &&
		  strcmp(buf, "a b/cA+") == 0,
	      "decode got '%s'", buf);
	CHECK(backend__pct_decode("a%20b", 5, buf, sizeof(buf)) == 3 && strcmp(buf, "a b") == 0,
	      "decode got '%s'", buf);
	CHECK(backend__pct_decode("%e2%82%ac", 9, buf, sizeof(buf)) == 3 &&
		  strcmp(buf, "\xe2\x82\xac") == 0,
	      "decode utf-8");
	CHECK(backend__pct_decode("a%2", 3, buf, sizeof(buf)) == -EINVAL, "truncated escape");
	CHECK(backend__pct_decode("a%", 2, buf, sizeof(buf)) == -EINVAL, "bare %%");
	CHECK(backend__pct_decode("a%zz", 4, buf, sizeof(buf)) == -EINVAL, "bad hex");
	CHECK(backend__pct_decode("a%00b", 5, buf, sizeof(buf)) == -EINVAL, "encoded NUL");
	CHECK(backend__pct_decode("abcd", 4, buf, 4) == -ENAMETOOLONG, "no room for NUL");
	CHECK(backend__pct_decode("abcd", 4, buf, 5) == 4, "exact fit");
	CHECK(backend__pct_decode("", 0, buf, 1) == 0 && buf[0] == '\0', "empty");

	/* object keys in URL paths: the SigV4 encoder with '/' kept */
	CHECK(backend__uri_encode(buf, sizeof(buf), "d/a b%?#&+\xc3\xa9~._-", 16, 1) == 32 &&
		  strcmp(buf, "d/a%20b%25%3F%23%26%2B%C3%A9~._-") == 0,
	      "encode got '%s'", buf);
	CHECK(backend__uri_encode(buf, 3, "abc", 3, 1) == -ENAMETOOLONG, "encode no room");
	CHECK(backend__uri_encode(buf, 3, " ", 1, 1) == -ENAMETOOLONG, "encode %%20 needs 4");
	CHECK(backend__uri_encode(buf, 4, " ", 1, 1) == 3, "encode %%20 fits 4");
}

/* ---- listings ------------------------------------------------------------ */

struct acc {
	char s[8192];
	size_t o;
	int stop_after; /* return 7 after this many entries (0: never) */
	int n;
};

static int acc_cb(void *arg, const struct backend__listent *e)
{
	struct acc *a = arg;

	a->o += (size_t)snprintf(a->s + a->o, sizeof(a->s) - a->o,
				 "%s|%c|%s%" PRIu64 "|%" PRId64 ";", e->name, e->is_dir ? 'd' : 'f',
				 e->has_size ? "" : "?", e->has_size ? e->size : 0, e->mtime);
	if (a->o >= sizeof(a->s))
		a->o = sizeof(a->s) - 1;
	a->n++;
	return a->stop_after && a->n >= a->stop_after ? 7 : 0;
}

static void json_eq(const char *body, int want_err, const char *want)
{
	struct acc a = {.o = 0};
	int err;

	a.s[0] = '\0';
	err = backend__listing_parse(body, strlen(body), acc_cb, &a);
	CHECK(err == want_err && strcmp(a.s, want) == 0,
	      "json %s\n  got err %d '%s'\n  want %d '%s'", body, err, a.s, want_err, want);
}

static void html_eq(const char *body, const char *want)
{
	struct acc a = {.o = 0};
	int err;

	a.s[0] = '\0';
	err = backend__listing_html(body, strlen(body), acc_cb, &a);
	CHECK(err == 0 && strcmp(a.s, want) == 0, "html %s\n  got err %d '%s'\n  want '%s'", body,
	      err, a.s, want);
}

static void test_json(void)
{
	/* what nginx 1.22 writes */
	json_eq("[\n"
		"{ \"name\":\"sub\", \"type\":\"directory\", \"mtime\":\"Thu, 26 Nov 2026 01:45:33 "
		"GMT\" },\n"
		"{ \"name\":\"shard-0.tar\", \"type\":\"file\", \"mtime\":\"Wed, 29 May 2024 "
		"10:00:00 GMT\", "
		"\"size\":2242560 }\n]\n",
		0, "sub|d|?0|1795657533;shard-0.tar|f|2242560|1716976800;");
	json_eq("[]", 0, "");
	json_eq("  [ ]  ", 0, "");
	/* escapes: quotes, backslash, \u with a surrogate pair, "\/" */
	json_eq(
	    "[{\"name\":\"a\\\"b\\\\c\\u00e9\\ud83d\\ude00\\/x\",\"type\":\"file\",\"size\":1}]", 0,
	    "");
	json_eq("[{\"name\":\"a\\\"b\\\\c\\u00e9\\ud83d\\ude00.x\",\"type\":\"file\",\"size\":1}]",
		0, "a\"b\\c\xc3\xa9\xf0\x9f\x98\x80.x|f|1|0;");
	/* unsafe names are skipped: '/', '..', '.', empty, NUL */
	json_eq("[{\"name\":\"a/b\",\"type\":\"file\",\"size\":1},"
		"{\"name\":\"..\",\"type\":\"directory\"},"
		"{\"name\":\".\",\"type\":\"directory\"},"
		"{\"name\":\"\",\"type\":\"file\",\"size\":1},"
		"{\"name\":\"n\\u0000ul\",\"type\":\"file\",\"size\":1},"
		"{\"name\":\"..x\",\"type\":\"file\",\"size\":2}]",
		0, "..x|f|2|0;");
	/* missing fields, wrong types, other types, unknown fields of any shape */
	json_eq("[{\"type\":\"file\",\"size\":1},"
		"{\"name\":\"notype\",\"size\":1},"
		"{\"name\":\"nosize\",\"type\":\"file\"},"
		"{\"name\":\"link\",\"type\":\"other\",\"size\":1},"
		"{\"name\":7,\"type\":\"file\",\"size\":1},"
		"{\"name\":\"strsize\",\"type\":\"file\",\"size\":\"12\"},"
		"{\"name\":\"x\",\"type\":\"file\",\"size\":3,\"extra\":{\"a\":[1,2.5e3,true,null,"
		"\"s\"]}},"
		"{}]",
		0, "nosize|f|?0|0;strsize|f|?0|0;x|f|3|0;");
	/* hostile numbers: too big, negative, fractional, exponent: the file is skipped */
	json_eq("[{\"name\":\"big\",\"type\":\"file\",\"size\":99999999999999999999999999},"
		"{\"name\":\"max\",\"type\":\"file\",\"size\":9223372036854775807},"
		"{\"name\":\"neg\",\"type\":\"file\",\"size\":-1},"
		"{\"name\":\"frac\",\"type\":\"file\",\"size\":1.5},"
		"{\"name\":\"exp\",\"type\":\"file\",\"size\":1e3},"
		"{\"name\":\"ok\",\"type\":\"file\",\"size\":0}]",
		0, "ok|f|0|0;");
	/* a bad mtime is only unknown */
	json_eq("[{\"name\":\"t\",\"type\":\"file\",\"size\":5,\"mtime\":\"yesterday\"}]", 0,
		"t|f|5|0;");
	/* a name longer than NAME_MAX is skipped, the rest parsed */
	{
		char body[1024], name[300];

		memset(name, 'n', 256);
		name[256] = '\0';
		snprintf(body, sizeof(body),
			 "[{\"name\":\"%s\",\"type\":\"file\",\"size\":1},"
			 "{\"name\":\"y\",\"type\":\"file\",\"size\":1}]",
			 name);
		json_eq(body, 0, "y|f|1|0;");
	}
	/* syntax errors */
	json_eq("[", -EINVAL, "");
	json_eq("[{\"name\":\"a\",\"type\":\"file\",\"size\":1}", -EINVAL, "a|f|1|0;");
	json_eq("[{\"name\":\"a\" \"type\":\"file\"}]", -EINVAL, "");
	json_eq("[{\"name\":\"a\",}]", -EINVAL, "");
	json_eq("[{\"name\":\"a\"},]", -EINVAL, "");
	json_eq("[{\"name\":\"a\\q\"}]", -EINVAL, "");
	json_eq("[{\"name\":\"a\\ud800\"}]", -EINVAL, "");
	json_eq("[{\"name\":\"a\nb\"}]", -EINVAL, "");
	json_eq("[1]", -EINVAL, "");
	json_eq("[{\"name\":\"a\",\"type\":\"file\",\"size\":1}] x", -EINVAL, "a|f|1|0;");
	json_eq("[{\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
		"]]]]]]]}]",
		-EINVAL, "");
	json_eq("[{\"name\":\"a\",\"type\":\"file\",\"size\":tru}]", -EINVAL, "");
	/* the callback stops the walk with its value */
	{
		struct acc a = {.o = 0, .stop_after = 1};
		const char *b = "[{\"name\":\"a\",\"type\":\"file\",\"size\":1},"
				"{\"name\":\"b\",\"type\":\"file\",\"size\":1}]";

		CHECK(backend__listing_json(b, strlen(b), acc_cb, &a) == 7 && a.n == 1, "stop");
	}
	/* not NUL-terminated: the parser must stop at len */
	{
		char b[] = "[{\"name\":\"a\",\"type\":\"file\",\"size\":12}]XXXX";
		struct acc a = {.o = 0};

		CHECK(backend__listing_json(b, strlen(b) - 4, acc_cb, &a) == 0 &&
			  strcmp(a.s, "a|f|12|0;") == 0,
		      "bounded: %s", a.s);
		CHECK(backend__listing_json(b, 30, acc_cb, &a) == -EINVAL, "cut short");
	}
}

static void test_html(void)
{
	/* what nginx 1.22 writes */
	html_eq("<html>\n<head><title>Index of /html/sub/</title></head>\n<body>\n"
		"<h1>Index of /html/sub/</h1><hr><pre><a href=\"../\">../</a>\n"
		"<a href=\"d%20ir/\">d ir/</a>          26-Nov-2026 01:45                   -\n"
		"<a href=\"readme%20a.txt\">readme a.txt</a>      26-Nov-2026 01:45       6\n"
		"<a href=\"shard-0.tar\">shard-0.tar</a>          26-Nov-2026 01:45   2242560\n"
		"</pre><hr></body>\n</html>\n",
		"d ir|d|?0|0;readme a.txt|f|?0|0;shard-0.tar|f|?0|0;");
	/* Apache style: sort links, icons, parent, absolute paths */
	html_eq("<tr><td><a href=\"?C=N;O=D\">Name</a></td><td><a href=\"/icons/x.gif\">i</a>"
		"<a href=\"/data/\">Parent Directory</a><a href=\"x.tar\">x.tar</a>"
		"<A HREF='y.tar'>y</A><a class=\"c\" href=z.tar>z</a>",
		"x.tar|f|?0|0;y.tar|f|?0|0;z.tar|f|?0|0;");
	/* hostile: leaving the directory, other hosts, schemes, fragments, deeper paths */
	html_eq("<a href=\"../x.tar\">u</a><a href=\"http://evil/x.tar\">e</a>"
		"<a href=\"//evil/x.tar\">s</a><a href=\"mailto:a@b\">m</a>"
		"<a href=\"javascript:alert(1)\">j</a><a href=\"#top\">t</a>"
		"<a href=\"a/b.tar\">deep</a><a href=\"%2e%2e/\">enc</a><a href=\"%2E%2E\">enc2</a>"
		"<a href=\"a%2Fb.tar\">slash</a><a href=\"a%00b\">nul</a><a href=\"%zz\">bad</a>"
		"<a href=\"\">empty</a><a href=\"./\">dot</a><a href=\".\">dot2</a>"
		"<a href=\"./ok.tar\">ok</a>",
		"ok.tar|f|?0|0;");
	/* entities and quotes in the href */
	html_eq(
	    "<a href=\"a&amp;b.tar\">x</a><a href=\"q&quot;.tar\">y</a><a href='s\"q.tar'>z</a>"
	    "<a href=\"&#x41;&#66;.tar\">w</a><a href=\"&bogus;.tar\">v</a><a href=\"&#0;\">n</a>",
	    "a&b.tar|f|?0|0;q\".tar|f|?0|0;s\"q.tar|f|?0|0;AB.tar|f|?0|0;&bogus;.tar|f|?0|0;");
	/* '>' inside a quoted value, comments, <abbr> is not <a>, attributes before href */
	html_eq("<!-- <a href=\"hidden.tar\"> --><abbr href=\"no.tar\">"
		"<a title=\"x>y\" href=\"gt.tar\">g</a><a\nhref=\"nl.tar\">n</a>",
		"gt.tar|f|?0|0;nl.tar|f|?0|0;");
	/* unterminated pieces never read past the end */
	html_eq("<a href=\"x.tar", "");
	html_eq("<a href=x.tar", "");
	html_eq("<!-- <a href=\"x.tar\">", "");
	html_eq("<", "");
	html_eq("", "");
	/* JSON detection: a page starting with '[' goes to the JSON parser */
	json_eq("\n [{\"name\":\"j\",\"type\":\"file\",\"size\":1}]", 0, "j|f|1|0;");
	json_eq("<html>[{\"name\":\"j\"}]</html>", 0, "");
}

int main(void)
{
	test_brace();
	test_url();
	test_json();
	test_html();
	return check_summary("test_http_parse");
}
