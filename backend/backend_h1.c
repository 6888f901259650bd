/*
 * backend_h1.c — the HTTP/1.1 the lean engine speaks itself (contract:
 * backend_h1.h): its URLs, a GET's request head, a response head's framing.
 * Pure: no I/O, no allocation.
 *
 * A response head is read only when it is plain: "HTTP/1.0" or "HTTP/1.1",
 * a three-digit status that is not 1xx, CRLF line ends, header lines
 * "name: value" with a token name, at most one Content-Length value (given
 * once or more), no Transfer-Encoding, and a Content-Length unless the
 * status has no body (204, 304). Everything else is BACKEND_H1_UNSUP (curl
 * reads it), or -1 when it does not begin as HTTP/1.x at all.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "backend_h1.h"

static int visible(unsigned char c)
{
	return c > 0x20 && c < 0x7f;
}

static int name_ok(const char *h, size_t n)
{
	if (n == 0 || n > BACKEND_H1_NAME_MAX || h[0] == '-' || h[0] == '.')
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)h[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return 0;
	}
	return 1;
}

/* The host of the authority [h, p) (h after "http://", p at its path):
 * copied to host (a bracketed IPv6 literal without its brackets, *hl its
 * length); *port: its port's digits, or NULL when it gives none. */
static int url_host(const char *h, const char *p, char host[BACKEND_H1_NAME_MAX + 1], size_t *hl,
		    const char **port)
{
	const char *he;

	*port = NULL;
	if (memchr(h, '@', (size_t)(p - h)))
		return BACKEND_H1_UNSUP; /* userinfo: curl's basic auth */
	if (*h == '[') {
		he = memchr(h, ']', (size_t)(p - h));
		if (!he)
			return BACKEND_H1_UNSUP;
		if (he + 1 < p) {
			if (he[1] != ':')
				return BACKEND_H1_UNSUP;
			*port = he + 2;
		}
		h++;
	} else {
		he = memchr(h, ':', (size_t)(p - h));
		if (he)
			*port = he + 1;
		else
			he = p;
	}
	*hl = (size_t)(he - h);
	if (*hl > BACKEND_H1_NAME_MAX)
		return BACKEND_H1_UNSUP;
	memcpy(host, h, *hl);
	host[*hl] = '\0';
	return 0;
}

/* The port [port, p): 1 to 65535, digits only, none after them. */
static int url_port(const char *port, const char *p, unsigned long *pn)
{
	const char *q = port;

	*pn = 0;
	while (q < p && *q >= '0' && *q <= '9' && *pn <= 65535)
		*pn = *pn * 10 + (unsigned long)(*q++ - '0');
	if (q == port || q != p || *pn == 0 || *pn > 65535)
		return BACKEND_H1_UNSUP;
	return 0;
}

/* u's address: an IPv6 literal (v6), a dotted quad, else with names a
 * host name (u->name, in lower case; no address: the caller looks it up). */
static int url_addr(struct backend_h1_url *u, const char *host, size_t hl, int v6, unsigned long pn,
		    int names)
{
	if (v6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&u->sa;

		if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1)
			return BACKEND_H1_UNSUP;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)pn);
		u->salen = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&u->sa;

		/* dotted quad only: inet_pton refuses "1", "0x7f.1" and the like,
		 * which curl would resolve as names (and so does a name's lookup) */
		if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
			s4->sin_family = AF_INET;
			s4->sin_port = htons((uint16_t)pn);
			u->salen = sizeof(*s4);
		} else if (names && name_ok(host, hl)) {
			for (size_t i = 0; i <= hl; i++)
				u->name[i] =
				    (char)(host[i] >= 'A' && host[i] <= 'Z' ? host[i] - 'A' + 'a'
									    : host[i]);
			memset(&u->sa, 0, sizeof(u->sa));
		} else {
			return BACKEND_H1_UNSUP;
		}
	}
	return 0;
}

/* u's path from p (after the authority): visible bytes, no fragment; none
 * is "/". */
static int url_path(struct backend_h1_url *u, const char *p)
{
	if (*p == '#')
		return BACKEND_H1_UNSUP;
	for (const char *q = p; *q; q++)
		if (!visible((unsigned char)*q) || *q == '#')
			return BACKEND_H1_UNSUP;
	if (*p == '/') {
		u->path = p;
		u->path_len = strlen(p);
	} else {
		u->path = "/"; /* "http://h" or "http://h?q": curl asks for "/" (and "/?q") */
		u->path_len = 1;
		if (*p)
			return BACKEND_H1_UNSUP;
	}
	return 0;
}

static int h1_url(const char *url, struct backend_h1_url *u, int names)
{
	const char *h, *p, *port;
	char host[BACKEND_H1_NAME_MAX + 1];
	unsigned long pn = 80;
	size_t hl;
	int v6;

	memset(u, 0, sizeof(*u));
	if (strncasecmp(url, "http://", 7) != 0)
		return BACKEND_H1_UNSUP;
	h = url + 7;
	p = h + strcspn(h, "/?#");
	v6 = *h == '[';
	if (url_host(h, p, host, &hl, &port) < 0 || (port && url_port(port, p, &pn) < 0) ||
	    url_addr(u, host, hl, v6, pn, names) < 0)
		return BACKEND_H1_UNSUP;
	u->port = (unsigned)pn;
	if (pn == 80)
		snprintf(u->hostport, sizeof(u->hostport), "%s%s%s", v6 ? "[" : "", host,
			 v6 ? "]" : "");
	else
		snprintf(u->hostport, sizeof(u->hostport), "%s%s%s:%lu", v6 ? "[" : "", host,
			 v6 ? "]" : "", pn);
	return url_path(u, p);
}

int backend__h1_url(const char *url, struct backend_h1_url *u)
{
	return h1_url(url, u, 0);
}

int backend__h1_url_name(const char *url, struct backend_h1_url *u)
{
	return h1_url(url, u, 1);
}

struct out {
	char *b;
	size_t cap, len;
	int over;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->over || n > o->cap - o->len) {
		o->over = 1;
		return;
	}
	memcpy(o->b + o->len, s, n);
	o->len += n;
}

static void puts_(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

ssize_t backend__h1_request(char *buf, size_t cap, const struct backend_h1_url *u,
			    const char *range, const char *const *hdrs, size_t n)
{
	struct out o = {buf, cap, 0, 0};

	for (size_t i = 0; i < n; i++) {
		const char *l = hdrs[i], *c = strchr(l, ':');

		if (!c || c == l || strpbrk(l, "\r\n"))
			return BACKEND_H1_UNSUP;
		for (const char *q = l; q < c; q++)
			if (!visible((unsigned char)*q))
				return BACKEND_H1_UNSUP;
	}
	puts_(&o, "GET ");
	put(&o, u->path, u->path_len);
	puts_(&o, " HTTP/1.1\r\nHost: ");
	puts_(&o, u->hostport);
	puts_(&o, "\r\n");
	if (range && *range) {
		puts_(&o, "Range: bytes=");
		puts_(&o, range);
		puts_(&o, "\r\n");
	}
	puts_(&o, "Accept: */*\r\n");
	for (size_t i = 0; i < n; i++) {
		puts_(&o, hdrs[i]);
		puts_(&o, "\r\n");
	}
	puts_(&o, "\r\n");
	return o.over ? -1 : (ssize_t)o.len;
}

static const char *ows(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	return p;
}

/* A header name's byte (RFC 9110's tchar): visible and none of the
 * delimiters DQUOTE ( ) , / : ; < = > ? @ [ \ ] { }, which are the set bits
 * of lo (bytes 0-63) and hi (64-127): a shift a byte, not a strchr. */
static int tchar(unsigned char c)
{
	const uint64_t lo = 0xfc00930400000000ull, hi = 0x2800000038000001ull;

	if (!visible(c))
		return 0;
	return !(((c < 64 ? lo : hi) >> (c & 63)) & 1);
}

/* Does the comma-separated list [p, end) hold the token tok? */
static int has_token(const char *p, const char *end, const char *tok)
{
	size_t tl = strlen(tok);

	while (p < end) {
		const char *s = ows(p, end), *e;

		e = s < end ? memchr(s, ',', (size_t)(end - s)) : NULL;
		const char *t;

		if (!e)
			e = end;
		t = e;
		while (t > s && (t[-1] == ' ' || t[-1] == '\t'))
			t--;
		if ((size_t)(t - s) == tl && strncasecmp(s, tok, tl) == 0)
			return 1;
		p = e + 1;
	}
	return 0;
}

/* The end of a head in buf (len bytes, scan of them looked at): past its
 * CRLF CRLF (*end; NULL: not there yet), the status line judged as soon as
 * it is there or cannot be. 0; -1: not HTTP/1.x; BACKEND_H1_UNSUP: a bare
 * LF (left to curl). */
static int head_end(const char *buf, size_t len, size_t scan, const char **end)
{
	*end = NULL;
	if (scan < 13) {
		if (memcmp(buf, "HTTP/1.", scan < 7 ? scan : 7) != 0)
			return -1;
	}
	/* line by line (memchr, not a test a byte), the same first finding as a
	 * byte's walk: a NUL before the line's LF, a bare LF, the empty line */
	for (const char *p = buf, *le; p < buf + scan; p = le + 1) {
		le = memchr(p, '\n', (size_t)(buf + scan - p));
		if (memchr(p, '\0', (size_t)((le ? le : buf + scan) - p)))
			return -1;
		if (!le)
			break;
		if (le == buf || le[-1] != '\r')
			return BACKEND_H1_UNSUP;
		if (le - buf >= 3 && le[-2] == '\n' && le[-3] == '\r') {
			*end = le + 1;
			break;
		}
	}
	if (scan >= 13 || *end) {
		if (len < 13 || memcmp(buf, "HTTP/1.", 7) != 0 ||
		    (buf[7] != '0' && buf[7] != '1') || buf[8] != ' ')
			return -1;
		for (int i = 9; i < 12; i++)
			if (buf[i] < '0' || buf[i] > '9')
				return -1;
		if (buf[12] != ' ' && buf[12] != '\r')
			return -1;
	}
	return 0;
}

/* One header line [p, eol) (eol at its CR) read into h: Content-Length
 * (one value, given once or more), Connection's close and keep-alive
 * tokens; 0, or BACKEND_H1_UNSUP (folding, not "token:", a length that is
 * a list, junk or conflicts, any Transfer-Encoding). */
static int head_field(struct backend_h1_head *h, const char *p, const char *eol, int *close,
		      int *keep_alive)
{
	const char *c = p, *v, *ve;
	uint64_t x = 0;

	if (*p == ' ' || *p == '\t')
		return BACKEND_H1_UNSUP; /* obsolete line folding */
	while (c < eol && tchar((unsigned char)*c))
		c++;
	if (c == p || c == eol || *c != ':')
		return BACKEND_H1_UNSUP; /* not "token:" */
	v = ows(c + 1, eol);
	ve = eol;
	while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
		ve--;
#define NAME(n) ((size_t)(c - p) == sizeof(n) - 1 && strncasecmp(p, n, sizeof(n) - 1) == 0)
	if (NAME("content-length")) {
		const char *q = v;

		while (q < ve && *q >= '0' && *q <= '9') {
			if (x > (UINT64_MAX - 9) / 10)
				return BACKEND_H1_UNSUP;
			x = x * 10 + (uint64_t)(*q++ - '0');
		}
		if (q == v || q != ve)
			return BACKEND_H1_UNSUP; /* a list, a sign, junk */
		if (h->have_clen && h->clen != x)
			return BACKEND_H1_UNSUP; /* conflicting lengths */
		h->have_clen = 1;
		h->clen = x;
	} else if (NAME("transfer-encoding")) {
		return BACKEND_H1_UNSUP;
	} else if (NAME("connection")) {
		*close |= has_token(v, ve, "close");
		*keep_alive |= has_token(v, ve, "keep-alive");
	}
#undef NAME
	return 0;
}

ssize_t backend__h1_head(const char *buf, size_t len, struct backend_h1_head *h)
{
	const char *p, *end;
	size_t scan = len < BACKEND_H1_HEAD_MAX ? len : BACKEND_H1_HEAD_MAX;
	int keep_alive = 0, close = 0, err;

	memset(h, 0, sizeof(*h));
	/* the end of the head, CRLF CRLF; a bare LF anywhere is left to curl */
	err = head_end(buf, len, scan, &end);
	if (err < 0)
		return err;
	if (!end)
		return len >= BACKEND_H1_HEAD_MAX ? BACKEND_H1_UNSUP : 0;
	h->minor = buf[7] - '0';
	h->status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
	if (h->status < 200)
		return BACKEND_H1_UNSUP; /* 1xx: interim answers, curl's to read */
	h->head_len = (size_t)(end - buf);
	p = (const char *)memchr(buf, '\n', h->head_len) + 1;
	while (p < end - 2) {
		const char *eol = (const char *)memchr(p, '\n', (size_t)(end - p)) - 1; /* its CR */

		if (head_field(h, p, eol, &close, &keep_alive) < 0)
			return BACKEND_H1_UNSUP;
		p = eol + 2;
	}
	if (h->status == 204 || h->status == 304) {
		h->body_len = 0;
	} else if (h->have_clen) {
		h->body_len = h->clen;
	} else {
		return BACKEND_H1_UNSUP; /* a body up to the close */
	}
	h->keep = !close && (h->minor == 1 || keep_alive);
	return (ssize_t)h->head_len;
}

int backend__h1_lines(const char *buf, size_t head_len,
		      int (*line)(void *arg, const char *l, size_t len), void *arg)
{
	const char *p = buf, *end = buf + head_len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl + 1 - p) : (size_t)(end - p);
		int rc = line(arg, p, n);

		if (rc)
			return rc;
		p += n;
	}
	return 0;
}

const char *backend__h1_location(const char *buf, size_t len)
{
	const char *p = memchr(buf, '\n', len), *end = buf + len;

	while (p && ++p < end) {
		if ((size_t)(end - p) > 9 && strncasecmp(p, "location:", 9) == 0) {
			p += 9;
			while (*p == ' ' || *p == '\t')
				p++;
			return p;
		}
		p = memchr(p, '\n', (size_t)(end - p));
	}
	return NULL;
}
