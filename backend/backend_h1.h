/*
 * backend_h1.h — private to backend/: the pieces of HTTP/1.1 the lean
 * engine (backend_io_lean.c) speaks itself, pure functions with no I/O:
 * which URLs it may take (plain http to a literal IP address or a name), the request
 * head of a GET, and the framing of a response head (status, Content-Length,
 * Connection). What the headers mean for a ranged read (Content-Range, ETag,
 * ...) is decided by backend_io_attempt.c for both engines: the head's lines
 * are handed to it one by one (backend__h1_lines).
 *
 * Anything this parser does not read as plain is BACKEND_H1_UNSUP, not an
 * error: the engine then asks curl, which reads every HTTP answer (1xx,
 * chunked or other transfer codings, a body up to the close, obsolete line
 * folding, bare LF line ends, a head over BACKEND_H1_HEAD_MAX, conflicting
 * Content-Lengths). Non-goals: HTTP/1.0 requests, pipelining, trailers.
 */
#ifndef BACKEND_H1_H
#define BACKEND_H1_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Most bytes of a response head read (curl allows more: such a head goes to curl). */
#define BACKEND_H1_HEAD_MAX 16384
#define BACKEND_H1_UNSUP    (-2) /* an answer or URL this engine leaves to curl */

/* Longest host name the lean engine resolves (DNS: 253) */
#define BACKEND_H1_NAME_MAX 253

/* An http:// URL the lean engine may take: a literal IPv4 or bracketed IPv6
 * host (or, backend__h1_url_name, a host name), an optional port, no
 * userinfo, no fragment, a path and query of visible ASCII only (sent as
 * they are, as curl sends them). */
struct backend_h1_url {
	struct sockaddr_storage sa; /* the address, with its port; salen 0 for a name */
	socklen_t salen;
	char name[BACKEND_H1_NAME_MAX + 1]; /* the host name to resolve, or "" */
	unsigned port;
	char hostport[BACKEND_H1_NAME_MAX + 16]; /* the Host header's value: curl's (no ":80") */
	const char *path; /* into the URL: "/..." up to its end ("/" when none) */
	size_t path_len;
};
/* 0, or BACKEND_H1_UNSUP for any URL curl must take. */
int backend__h1_url(const char *url, struct backend_h1_url *u);
/* The same, a host name taken too (letters, digits, '-', '_' and '.', not
 * beginning with '-' or '.', at most BACKEND_H1_NAME_MAX bytes): then
 * u->name is set (in lower case: names are compared so) and u->sa is not. */
int backend__h1_url_name(const char *url, struct backend_h1_url *u);

/* The request head "GET PATH HTTP/1.1" with Host, Range (when range is not
 * NULL or "": "bytes=RANGE") and the extra header lines (each "Name: value",
 * n of them; a line with CR, LF or NUL, or without a name, is refused) into
 * buf. Returns its length, -1 when it does not fit in cap, or
 * BACKEND_H1_UNSUP for a line that cannot be sent. */
ssize_t backend__h1_request(char *buf, size_t cap, const struct backend_h1_url *u,
			    const char *range, const char *const *hdrs, size_t n);

/* The framing of a response head. */
struct backend_h1_head {
	long status;
	int minor;	   /* HTTP/1.<minor> */
	int have_clen;	   /* a Content-Length (each one given says the same) */
	uint64_t clen;	   /* ... its value */
	int keep;	   /* the connection may carry the next request */
	size_t head_len;   /* bytes of the head, its blank line included */
	uint64_t body_len; /* bytes of body that follow (0 for 204, 304) */
};
/* Reads the head at buf[0, len): its length (> 0) when complete, 0 when more
 * bytes are needed (len < BACKEND_H1_HEAD_MAX), BACKEND_H1_UNSUP for an
 * answer curl must read, -1 for one that is not HTTP/1.x. A GET's answer
 * (a HEAD's is not read here). */
ssize_t backend__h1_head(const char *buf, size_t len, struct backend_h1_head *h);
/* Calls line(arg, LINE, LEN) for each line of a complete head (head_len
 * bytes, as backend__h1_head found it), its CRLF included, the status line
 * first and the blank line last (as curl's header callback gets them); stops
 * at the first non-zero answer and returns it, else 0. */
int backend__h1_lines(const char *buf, size_t head_len,
		      int (*line)(void *arg, const char *l, size_t len), void *arg);
/* The value of a complete head's Location header (buf[0, len): up to its CR, trimmed at the
 * front; its status line is not a header), or NULL. */
const char *backend__h1_location(const char *buf, size_t len);

#endif
