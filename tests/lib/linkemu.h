/* linkemu.h: what the link emulator's files share (linkemu.c: the server, its loop and
 * connections; linkemu_http.c: requests and responses, root mode's files; linkemu_s3.c: the
 * JSON autoindex and S3 mode; linkemu_stats.c: the counters and GET /__stats; linkemu_ais.c:
 * AIS mode, --ais). One thread: nothing here is locked. */
#ifndef LINKEMU_H
#define LINKEMU_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#define IN_CAP	16384
#define HDR_CAP 2048
#define CHUNKED UINT64_MAX /* resp_head's length of a chunked answer */

_Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *xmalloc(size_t n);

/* ---- a growable string (NUL-terminated; buf_fmt's pieces at most 511 bytes) ------------- */

struct buf {
	char *p;
	size_t len, cap;
};

void buf_add(struct buf *b, const char *s, size_t n);
void buf_str(struct buf *b, const char *s);
void buf_fmt(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_xml(struct buf *b, const char *s, int quot);
void buf_json_str(struct buf *b, const char *str);

/* ---- configuration ---------------------------------------------------------------------- */

struct cfg {
	const char *root; /* realpath; NULL in S3 mode */
	uint64_t delay_ns;
	uint64_t rate_bps;
	int etag_store;	   /* --etag store: an opaque strong ETag, as object stores give */
	int ais;	   /* --ais: the AIStore stand-in's API besides the files (root mode) */
	long port;	   /* the port it listens on (AIS mode's redirects name it) */
	long objects_port; /* --ais-objects-port: where object GETs are redirected (0: here) */
	/* S3 mode */
	long s3_n;
	const char *bucket, *prefix;
	int tmpl_fd;
	uint64_t tmpl_size;
	char **keys; /* sorted */
};

extern struct cfg cfg;

/* ---- connections ------------------------------------------------------------------------ */

struct ofile; /* linkemu_http.c: a file of root mode kept open between requests */

enum { C_READ, C_BODY, C_WAIT, C_SEND };
enum { K_OTHER, K_HEAD, K_MOSS };

struct part {
	char *path; /* NULL: no file bytes */
	uint64_t off, len;
	size_t mem_off, mem_len;
};

struct conn {
	int fd;
	int state;
	int close_after;
	int head; /* the request is HEAD */
	size_t in_len, req_len;
	/* the parsed request, pointing into in[] (NUL-terminated in place) */
	char *method, *target, *range, *if_match;
	int keep_alive;
	/* a request body (AIS mode's GetBatch): Content-Length bytes, after the head */
	uint64_t clen;
	char *body;
	size_t body_len;
	/* a GetBatch answer: parts sent after the above, each a file range then memory bytes
	 * of moss_mem; timed from its start (kind, t0) */
	struct part *parts;
	size_t nparts, part_i;
	char *moss_mem;
	int kind;
	uint64_t t0;
	/* the response: the head, then file bytes (sendfile), then memory bytes */
	size_t hdr_len, hdr_off;
	int body_fd;	       /* owned (closed when the response is done) unless body_of */
	struct ofile *body_of; /* root mode's file: body_fd is its fd, a reference held */
	int drained;	       /* a recv came back short since the last epoll event: the
				  socket holds nothing more to read until the next one */
	int hup;	       /* an event said the peer's end (or an error) came */
	off_t file_off;
	uint64_t file_left;
	char *mem_owned;
	const char *mem;
	size_t mem_left;
	uint64_t deadline;
	uint64_t seq;
	uint64_t wrote; /* bytes handed to the kernel on this connection (AIS mode's drains) */
	/* the buffers last: a new connection zeroes what is above them */
	char hdr[HDR_CAP];
	char in[IN_CAP];
};

uint64_t now_ns(void);
/* a response's file bytes sent or dropped: its fd closed or its open file let go (linkemu_http.c)
 */
void body_done(struct conn *c);

/* ---- counters (linkemu_stats.c) --------------------------------------------------------- */

struct linkemu_stats {
	uint64_t requests, bytes_sent, connections;
	uint64_t list_requests, list_bytes, heads, gets, other;
};

extern struct linkemu_stats counts;

/* GET /__stats: the counters as a JSON object, at once */
void serve_stats(struct conn *c);

/* ---- requests (linkemu_http.c) ---------------------------------------------------------- */

/* Parse the head in in[0..req_len) in place. 0: a request; -1: malformed */
int parse_request(struct conn *c);
/* the response to the parsed request, after its delay */
void respond(struct conn *c);
/* percent-decode s[0..n) into out[cap] (plus: '+' is a blank); 0 or -1 */
int pct_decode(const char *s, size_t n, char *out, size_t cap, int plus);
/* whether If-Match (when given) lets etag through: "*" or one of its comma-separated tags */
int if_match_ok(const char *im, const char *etag);

/* parse_range's verdicts on a Range header */
enum { RG_NONE, RG_ONE, RG_SUFFIX, RG_BAD };
int parse_range(const char *r, uint64_t *a, uint64_t *b);

/* ---- responses (linkemu_http.c) ---------------------------------------------------------- */

void http_date(time_t t, char out[64]);
void resp_head(struct conn *c, int code, const char *extra, uint64_t length);
void resp_plain(struct conn *c, int code);
void resp_mem(struct conn *c, int code, const char *extra, char *body, size_t len);
extern char zeros[4096];

/* root mode's pieces AIS mode answers from too */
int hexval(int ch); /* of a hex digit; -1 when ch is not one */
int resolve(const char *rel, char *out, size_t cap);
int name_cmp(const void *a, const void *b);
void file_etag(const struct stat *sb, char etag[64]);

struct query {
	char *list_type, *delimiter, *max_keys, *prefix, *start_after, *token;
	int has_delimiter;
};

int parse_query(const char *qs, struct query *q);
void query_free(struct query *q);

/* ---- listings (linkemu_s3.c) ---------------------------------------------------------- */

/* root mode's JSON autoindex of directory path */
void serve_listing(struct conn *c, const char *path);
/* S3 mode's answer to path?qs */
void serve_s3(struct conn *c, const char *path, const char *qs);

/* ---- AIS mode (linkemu_ais.c) ----------------------------------------------------------- */

/* AIS mode's paths (/s3/, /v1/); 0 when path is none of them (a file) */
int serve_ais(struct conn *c, const char *path, const char *qs, const char *raw);
/* the end of a timed answer: sent (a GetBatch answer with bytes still queued is draining
 * until they left: ais_look); its connection closing ends it and c's drains */
void ais_answer_done(struct conn *c);
void ais_conn_close(struct conn *c);
/* when a draining answer is looked at next (UINT64_MAX: none); the looks due at now */
uint64_t ais_next_look(void);
void ais_look(uint64_t now);
/* AIS mode's counters into GET /__stats's JSON object (after a field, before the '}') */
void ais_stats(struct buf *b);

#endif
