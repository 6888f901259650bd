/*
 * test_h1.c — the lean HTTP engine's pure parts (backend_h1.c): which URLs it
 * takes, the request head it sends, the framing it reads from a response
 * head; and the head's lines handed to the header checks both engines share
 * (backend_io_attempt.c: Content-Range, a Range ignored).
 *
 * Generated cases, seeded and replayable: H1_SEED=N (default 1, printed)
 * and H1_CASES=N (default 400). Each generated head has random header-name
 * case, whitespace, extra headers, a Content-Length given once or twice, a
 * Connection header or not; its expected framing is computed by the
 * generator. Every head is also cut at every byte (each prefix must ask for
 * more, never answer), followed by body bytes (not part of the head), and
 * mutated into what the engine leaves to curl (folding, a bare LF, a second
 * conflicting Content-Length, Transfer-Encoding, a 1xx, a head over the
 * bound): exact results and counts.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_h1.h"
#include "backend_io_i.h"
#include "check.h"
#include "test_rng.h"

static uint64_t rng; /* test_rng.h's state, from the seed */

/* name in a random mix of cases */
static void name_case(char *dst, const char *name)
{
	for (size_t i = 0; name[i]; i++) {
		char c = name[i];

		if (c >= 'a' && c <= 'z' && rnd_n(&rng, 2))
			c = (char)(c - 32);
		dst[i] = c;
		dst[i + 1] = '\0';
	}
}

static const char *ws(void)
{
	static const char *w[] = {"", " ", "  ", "\t", " \t"};

	return w[rnd_n(&rng, 5)];
}

struct gen {
	char head[4096];
	size_t len;
	long status;
	int have_clen;
	uint64_t clen, body_len;
	int keep;
};

__attribute__((format(printf, 2, 3))) static void add(struct gen *g, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	g->len += (size_t)vsnprintf(g->head + g->len, sizeof(g->head) - g->len, fmt, ap);
	va_end(ap);
}

static void gen_head(struct gen *g)
{
	static const long statuses[] = {200, 206, 204, 304, 404, 403, 416, 500, 503, 412};
	static const char *extra[] = {"ETag: \"abc\"",
				      "Server: nginx/1.22.1",
				      "Last-Modified: Tue, 01 Dec 2026 10:00:00 GMT",
				      "Content-Type: application/x-tar",
				      "X-Amz-Request-Id: 0F00",
				      "Accept-Ranges: bytes",
				      "Content-Range: bytes 0-9/10"};
	char name[64], v[64];
	int minor = rnd_n(&rng, 4) ? 1 : 0;
	unsigned nextra = rnd_n(&rng, 5), conn = rnd_n(&rng, 4);

	memset(g, 0, sizeof(*g));
	g->status = statuses[rnd_n(&rng, 10)];
	snprintf(v, sizeof(v), "HTTP/1.%d %ld", minor, g->status);
	add(g, "%s%s\r\n", v, rnd_n(&rng, 3) ? " Some Reason" : (rnd_n(&rng, 2) ? " " : ""));
	g->have_clen = g->status == 204 || g->status == 304 ? rnd_n(&rng, 2) : 1;
	g->clen = g->have_clen ? rnd(&rng) % (rnd_n(&rng, 2) ? 100 : 1u << 30) : 0;
	for (unsigned i = 0; i <= nextra; i++) {
		if (i == nextra / 2 && g->have_clen) {
			unsigned times =
			    1 + rnd_n(&rng, 2); /* a duplicate saying the same is fine */

			for (unsigned t = 0; t < times; t++) {
				name_case(name, "content-length");
				snprintf(v, sizeof(v), "%" PRIu64, g->clen);
				add(g, "%s:%s", name, ws());
				add(g, "%s%s\r\n", v, ws());
			}
		}
		if (i < nextra)
			add(g, "%s\r\n", extra[rnd_n(&rng, 7)]);
	}
	g->keep = minor == 1;
	if (conn == 1) {
		name_case(name, "connection");
		add(g, "%s:%sclose\r\n", name, ws());
		g->keep = 0;
	} else if (conn == 2) {
		name_case(name, "connection");
		add(g, "%s: keep-alive%s\r\n", name, ws());
		g->keep = 1;
	} else if (conn == 3) {
		add(g, "Connection: upgrade,%sClose\r\n", ws());
		g->keep = 0;
	}
	add(g, "\r\n");
	g->body_len = g->status == 204 || g->status == 304 ? 0 : g->clen;
}

static char big[BACKEND_H1_HEAD_MAX * 2];

static void check_gen(struct gen *g, unsigned *cuts)
{
	struct backend_h1_head h;
	ssize_t rc = backend__h1_head(g->head, g->len, &h);

	CHECK(rc == (ssize_t)g->len, "head of %zu bytes: %zd\n%s", g->len, rc, g->head);
	CHECK(h.status == g->status && h.have_clen == g->have_clen && h.clen == g->clen &&
		  h.body_len == g->body_len && h.keep == g->keep,
	      "framing: status %ld/%ld clen %d:%" PRIu64 "/%d:%" PRIu64 " body %" PRIu64 "/%" PRIu64
	      " keep %d/%d\n%s",
	      h.status, g->status, h.have_clen, h.clen, g->have_clen, g->clen, h.body_len,
	      g->body_len, h.keep, g->keep, g->head);
	/* every cut asks for more */
	for (size_t k = 0; k < g->len; k++) {
		rc = backend__h1_head(g->head, k, &h);
		(*cuts)++;
		if (rc != 0) {
			CHECK(rc == 0, "cut at %zu of %zu: %zd\n%s", k, g->len, rc, g->head);
			break;
		}
	}
	/* body bytes after it are not the head's */
	memcpy(big, g->head, g->len);
	memset(big + g->len, 'B', 100);
	big[g->len + 3] = '\n';
	CHECK(backend__h1_head(big, g->len + 100, &h) == (ssize_t)g->len, "head + body");
}

/* g's head with its line i (1: the first header) replaced by what */
static size_t mutate(const struct gen *g, char *out, unsigned at, const char *what)
{
	const char *p = g->head;
	size_t n = 0;

	for (unsigned i = 0; i < at; i++)
		p = strstr(p, "\r\n") + 2;
	n = (size_t)(p - g->head);
	memcpy(out, g->head, n);
	n += (size_t)sprintf(out + n, "%s", what);
	memcpy(out + n, p, g->len - (size_t)(p - g->head));
	return n + g->len - (size_t)(p - g->head);
}

static void test_generated(unsigned ncases)
{
	static char m[8192];
	struct backend_h1_head h;
	unsigned cuts = 0, unsup = 0;
	struct gen g;

	for (unsigned i = 0; i < ncases; i++) {
		size_t n;

		gen_head(&g);
		check_gen(&g, &cuts);
		/* what goes to curl: each mutation of this head */
		n = mutate(&g, m, 1, " folded continuation\r\n");
		CHECK(backend__h1_head(m, n, &h) == BACKEND_H1_UNSUP, "folding\n%s", m);
		n = mutate(&g, m, 1, "Transfer-Encoding: chunked\r\n");
		CHECK(backend__h1_head(m, n, &h) == BACKEND_H1_UNSUP, "TE\n%s", m);
		n = mutate(&g, m, 1, "X-Bare: lf\n");
		CHECK(backend__h1_head(m, n, &h) == BACKEND_H1_UNSUP, "bare LF\n%s", m);
		n = mutate(&g, m, 1, "Bad Name: x\r\n");
		CHECK(backend__h1_head(m, n, &h) == BACKEND_H1_UNSUP, "space in a name\n%s", m);
		if (g.have_clen) {
			char cl[64];

			snprintf(cl, sizeof(cl), "content-LENGTH: %" PRIu64 "\r\n", g.clen + 1);
			n = mutate(&g, m, 1 + rnd_n(&rng, 2), cl);
			CHECK(backend__h1_head(m, n, &h) == BACKEND_H1_UNSUP, "conflict\n%s", m);
			snprintf(cl, sizeof(cl), "Content-Length: %" PRIu64 ", %" PRIu64 "\r\n",
				 g.clen, g.clen);
			n = mutate(&g, m, 1, cl);
			CHECK(backend__h1_head(m, n, &h) == BACKEND_H1_UNSUP, "a list\n%s", m);
			unsup += 2;
		}
		unsup += 4;
	}
	/* a head in a prefix of another: a 1xx, a 3-digit status only */
	CHECK(backend__h1_head("HTTP/1.1 100 Continue\r\n\r\n", 25, &h) == BACKEND_H1_UNSUP, "1xx");
	printf("h1: %u generated heads, %u cuts, %u mutations left to curl\n", ncases, cuts, unsup);
	CHECK(cuts > ncases * 40, "%u cuts of %u heads", cuts, ncases);
}

static void test_fixed(void)
{
	struct backend_h1_head h;
	static const struct {
		const char *head;
		ssize_t rc; /* -3: the head's length */
		long status;
		uint64_t body;
		int keep;
	} cases[] = {
	    {"HTTP/1.1 206 Partial Content\r\nContent-Length: 5\r\n\r\n", -3, 206, 5, 1},
	    {"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", -3, 200, 0, 1},
	    {"HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\n", -3, 200, 7, 0},
	    {"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 7\r\n\r\n", -3, 200, 7,
	     1},
	    {"HTTP/1.1 204 No Content\r\n\r\n", -3, 204, 0, 1},
	    {"HTTP/1.1 200 OK\r\n\r\n", BACKEND_H1_UNSUP, 0, 0, 0}, /* up to the close */
	    {"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", BACKEND_H1_UNSUP, 0, 0, 0},
	    {"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n", BACKEND_H1_UNSUP, 0,
	     0, 0},
	    {"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", BACKEND_H1_UNSUP, 0, 0, 0},
	    {"HTTP/2 200\r\n\r\n", -1, 0, 0, 0},
	    {"HTTP/1.2 200 OK\r\n\r\n", -1, 0, 0, 0},
	    {"HTTP/1.1 20 OK\r\n\r\n", -1, 0, 0, 0},
	    {"HTTP/1.1 2000 OK\r\n\r\n", -1, 0, 0, 0},
	    {"ICY 200 OK\r\n\r\n", -1, 0, 0, 0},
	    {"HTTP/1.1 200 OK\r\nNoColon\r\n\r\n", BACKEND_H1_UNSUP, 0, 0, 0},
	    {"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n", BACKEND_H1_UNSUP, 0, 0, 0},
	    {"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n", BACKEND_H1_UNSUP, 0, 0, 0},
	    {"HTTP", 0, 0, 0, 0},
	    {"HTTX", -1, 0, 0, 0},
	    {"", 0, 0, 0, 0},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = strlen(cases[i].head);
		ssize_t rc = backend__h1_head(cases[i].head, len, &h);
		ssize_t want = cases[i].rc == -3 ? (ssize_t)len : cases[i].rc;

		CHECK(rc == want, "case %zu: %zd, want %zd: %s", i, rc, want, cases[i].head);
		if (rc > 0)
			CHECK(h.status == cases[i].status && h.body_len == cases[i].body &&
				  h.keep == cases[i].keep,
			      "case %zu: status %ld body %" PRIu64 " keep %d", i, h.status,
			      h.body_len, h.keep);
	}
	/* oversized: a head that has not ended by the bound goes to curl, one
	 * that ends within it is read */
	memcpy(big, "HTTP/1.1 200 OK\r\n", 17);
	for (size_t i = 17; i < sizeof(big); i++)
		big[i] = (i % 80 == 78) ? '\r' : (i % 80 == 79) ? '\n' : 'x';
	for (size_t i = 17; i < sizeof(big); i += 80)
		memcpy(big + i, "X-F:", 4);
	CHECK(backend__h1_head(big, BACKEND_H1_HEAD_MAX - 1, &h) == 0, "below the bound");
	CHECK(backend__h1_head(big, BACKEND_H1_HEAD_MAX, &h) == BACKEND_H1_UNSUP, "at the bound");
	CHECK(backend__h1_head(big, sizeof(big), &h) == BACKEND_H1_UNSUP, "past the bound");
}

static void test_url_request(unsigned ncases)
{
	struct backend_h1_url u;
	char buf[2048], want[2048], url[512];
	static const char *bad[] = {"https://127.0.0.1/x",
				    "http://user:pw@127.0.0.1/x",
				    "http://localhost/x",
				    "http://example.com:80/x",
				    "http://127.1/x",
				    "http://127.0.0.1/x#frag",
				    "http://127.0.0.1/a b",
				    "http://127.0.0.1:0/x",
				    "http://127.0.0.1:65536/x",
				    "http://127.0.0.1:8x/x",
				    "http://[::1/x",
				    "http://[::1]8080/x",
				    "http://127.0.0.1/\x7f",
				    "ftp://127.0.0.1/x"};
	const char *hdrs[2];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(backend__h1_url(bad[i], &u) == BACKEND_H1_UNSUP, "took %s", bad[i]);
	CHECK(backend__h1_url("HTTP://10.0.0.1", &u) == 0 && strcmp(u.path, "/") == 0 &&
		  strcmp(u.hostport, "10.0.0.1") == 0,
	      "no path");
	for (unsigned i = 0; i < ncases; i++) {
		unsigned a = rnd_n(&rng, 256), b = rnd_n(&rng, 256),
			 port = rnd_n(&rng, 3) ? 1 + rnd_n(&rng, 65535) : 80;
		int v6 = rnd_n(&rng, 4) == 0, explicit_port = port != 80 || rnd_n(&rng, 2);
		char host[64], hp[80], path[128], range[64];
		ssize_t n;

		if (v6)
			snprintf(host, sizeof(host), "[fd00::%x:%x]", a, b);
		else
			snprintf(host, sizeof(host), "10.%u.%u.%u", a, b, rnd_n(&rng, 256));
		snprintf(path, sizeof(path), "/bucket/train-%06u.tar%s", rnd_n(&rng, 1000000),
			 rnd_n(&rng, 3) ? "" : "?X-Amz-Signature=ab%2Fcd");
		if (explicit_port)
			snprintf(url, sizeof(url), "http://%s:%u%s", host, port, path);
		else
			snprintf(url, sizeof(url), "http://%s%s", host, path);
		CHECK(backend__h1_url(url, &u) == 0, "refused %s", url);
		if (port == 80)
			snprintf(hp, sizeof(hp), "%s", host);
		else
			snprintf(hp, sizeof(hp), "%s:%u", host, port);
		CHECK(strcmp(u.hostport, hp) == 0, "%s: host %s, want %s", url, u.hostport, hp);
		CHECK(u.sa.ss_family == (v6 ? AF_INET6 : AF_INET) &&
			  ntohs(((struct sockaddr_in *)&u.sa)->sin_port) == port,
		      "%s: address", url);
		range[0] = '\0';
		if (rnd_n(&rng, 4))
			snprintf(range, sizeof(range), "%u-%u", a * 1000, a * 1000 + b);
		hdrs[0] = "If-Match: \"etag-1\"";
		hdrs[1] = "Authorization: AWS4-HMAC-SHA256 Credential=x";
		n = backend__h1_request(buf, sizeof(buf), &u, range, hdrs, rnd_n(&rng, 3));
		snprintf(want, sizeof(want), "GET %s HTTP/1.1\r\nHost: %s\r\n%s%s%sAccept: */*\r\n",
			 path, hp, range[0] ? "Range: bytes=" : "", range, range[0] ? "\r\n" : "");
		CHECK(n > 0 && (size_t)n > strlen(want) && memcmp(buf, want, strlen(want)) == 0,
		      "%s: request\n%.*s\nwant\n%s", url, (int)(n > 0 ? n : 0), buf, want);
		CHECK(n > 4 && memcmp(buf + n - 4, "\r\n\r\n", 4) == 0, "%s: not ended", url);
		/* every shorter buffer is refused, never cut */
		for (size_t cap = 0; n > 0 && cap < (size_t)n; cap += 1 + rnd_n(&rng, 8))
			CHECK(backend__h1_request(buf, cap, &u, range, hdrs, 2) == -1 ||
				  (size_t)n < cap,
			      "%s: fits in %zu", url, cap);
	}
	hdrs[0] = "X-Evil: a\r\nHost: b";
	CHECK(backend__h1_request(buf, sizeof(buf), &u, NULL, hdrs, 1) == BACKEND_H1_UNSUP,
	      "header with CRLF");
	hdrs[0] = "NoColon";
	CHECK(backend__h1_request(buf, sizeof(buf), &u, NULL, hdrs, 1) == BACKEND_H1_UNSUP,
	      "header without a name");
}

/* The head's lines into the checks both engines share: a bad Content-Range
 * fails the attempt, a 200 to a range is counted and skipped to the offset. */
static int feed(void *arg, const char *l, size_t n)
{
	return backend__io_header_line(arg, l, n) < 0;
}

static void test_shared_checks(void)
{
	static const struct {
		const char *crange;
		unsigned clen;
		int abort_err;
	} cr[] = {
	    {"bytes 100-199/1000", 100, 0},    {"bytes 101-199/1000", 99, -EIO},
	    {"bytes 100-99/1000", 0, -EIO},    {"bytes 100-1000/1000", 901, -EIO},
	    {"bytes */1000", 0, -EIO},	       {"bytes 100-199/*", 100, -EIO},
	    {"items 100-199/1000", 100, -EIO}, {"bytes 100-150/151", 51, 0},
	    {"bytes 100-199/1000", 150, -EIO}, {"bytes 100-199/1000", 60, 0},
	};
	struct backend_io *io = calloc(1, sizeof(*io));
	struct backend_req r = {0};
	struct xfer x = {0};
	char head[256];

	if (!io)
		FAIL("out of memory");
	r.method = "GET";
	r.range_off = 100;
	r.range_len = 100;
	x.io = io;
	x.r = &r;
	x.want_start = 100;
	for (size_t i = 0; i < sizeof(cr) / sizeof(cr[0]); i++) {
		struct backend_h1_head h;
		int n = snprintf(head, sizeof(head),
				 "HTTP/1.1 206 Partial Content\r\nContent-Range: %s\r\n"
				 "Content-Length: %u\r\n\r\n",
				 cr[i].crange, cr[i].clen);

		CHECK(backend__h1_head(head, (size_t)n, &h) == n, "%s: head", cr[i].crange);
		backend__io_attempt_reset(&x);
		x.have_first = 0;
		backend__h1_lines(head, (size_t)n, feed, &x);
		CHECK(x.abort_err == cr[i].abort_err && x.hdr_done, "%s: abort_err %d, want %d",
		      cr[i].crange, x.abort_err, cr[i].abort_err);
	}
	backend__io_attempt_reset(&x);
	backend__h1_lines("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", 41, feed, &x);
	CHECK(x.range_ignored && x.skip == 100 && x.limit == 100 && io->n_range_ignored == 1,
	      "200 to a range: ignored %d skip %" PRIu64 " limit %" PRIu64, x.range_ignored, x.skip,
	      x.limit);
	free(io);
}

/* backend__h1_url_name: a host name taken (lower case), the rest as
 * backend__h1_url; literal addresses still parsed as addresses */
static void test_url_name(void)
{
	struct backend_h1_url u;
	static const char *bad[] = {"http://-h/x",    "http://.h/x",   "http://h h/x",
				    "http://u@h/x",   "http://h/x#f",  "http://h:0/x",
				    "https://h/x",    "http://[h]/x",  "http://h%41/x",
				    "http://h:80x/x", "http://h\x01/x"};
	char longname[300];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(backend__h1_url_name(bad[i], &u) == BACKEND_H1_UNSUP, "took %s", bad[i]);
	CHECK(backend__h1_url_name("http://Store-1.Example_x.COM:8080/a?b", &u) == 0 &&
		  strcmp(u.name, "store-1.example_x.com") == 0 && u.port == 8080 && u.salen == 0 &&
		  strcmp(u.hostport, "Store-1.Example_x.COM:8080") == 0 &&
		  strcmp(u.path, "/a?b") == 0,
	      "a name: %s %u %s", u.name, u.port, u.hostport);
	CHECK(backend__h1_url_name("http://localhost", &u) == 0 && u.port == 80 &&
		  strcmp(u.hostport, "localhost") == 0 && strcmp(u.path, "/") == 0,
	      "localhost");
	CHECK(backend__h1_url_name("http://127.0.0.1:81/x", &u) == 0 && u.name[0] == '\0' &&
		  u.salen == sizeof(struct sockaddr_in),
	      "a literal address is an address");
	memset(longname, 'a', sizeof(longname));
	memcpy(longname, "http://", 7);
	strcpy(longname + 7 + 253, "/x");
	CHECK(backend__h1_url_name(longname, &u) == 0, "253 bytes of name");
	memset(longname + 7, 'a', 254);
	strcpy(longname + 7 + 254, "/x");
	CHECK(backend__h1_url_name(longname, &u) == BACKEND_H1_UNSUP, "254 bytes of name");
	CHECK(backend__h1_url("http://localhost/x", &u) == BACKEND_H1_UNSUP,
	      "backend__h1_url takes no name");
}

/* Every byte in a header's name, exactly: "X<b>Y: 1" is read as a header
 * when b is one of RFC 9110's tchar (written out here, not computed as the
 * engine does) or ':' (the name ends before it); a NUL is not HTTP (-1);
 * any other byte leaves the head to curl. 256 heads, 78 of them read. */
static void test_name_bytes(void)
{
	static const char tchars[] = "!#$%&'*+-.^_`|~0123456789"
				     "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
	struct backend_h1_head h;
	unsigned read = 0;

	for (unsigned b = 0; b < 256; b++) {
		char m[64];
		size_t n = (size_t)snprintf(m, sizeof(m),
					    "HTTP/1.1 200 OK\r\nX_Y: 1\r\n"
					    "Content-Length: 3\r\n\r\n");
		ssize_t rc, want;

		m[18] = (char)b;
		rc = backend__h1_head(m, n, &h);
		if (b == 0)
			want = -1;
		else if (b == ':' || memchr(tchars, (int)b, sizeof(tchars) - 1))
			want = (ssize_t)n;
		else
			want = BACKEND_H1_UNSUP;
		CHECK(rc == want, "name byte 0x%02x: %zd, want %zd", b, rc, want);
		if (rc > 0) {
			read++;
			CHECK(h.body_len == 3 && h.keep == 1, "name byte 0x%02x: body %" PRIu64, b,
			      h.body_len);
		}
	}
	CHECK(read == 78, "%u of 256 name bytes read", read);
}

int main(void)
{
	const char *s = getenv("H1_SEED"), *c = getenv("H1_CASES");
	uint64_t seed = s ? strtoull(s, NULL, 0) : 1;
	unsigned ncases = c ? (unsigned)strtoul(c, NULL, 0) : 400;

	printf("h1: seed %" PRIu64 " (H1_SEED), %u cases (H1_CASES)\n", seed, ncases);
	rng = seed * 0x9e3779b97f4a7c15ull + 1;
	test_fixed();
	test_name_bytes();
	test_generated(ncases);
	test_url_request(ncases);
	test_url_name();
	test_shared_checks();
	return check_summary("h1");
}
