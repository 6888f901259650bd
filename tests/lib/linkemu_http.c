/* linkemu_http.c: the link emulator's HTTP (linkemu.c has the server): a request's head parsed
 * in place, the response heads and bodies, the growable strings they are made in, and root
 * mode's files (paths resolved under --root, ETags, If-Match, one byte range, files kept open
 * between requests). One thread: nothing here is locked. */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "linkemu.h"

#define BODY_CAP (8u << 20) /* a request body (AIS mode's GetBatch) */

/* ---- a growable string ------------------------------------------------------------------ */

void buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t c = b->cap ? b->cap : 4096;
		while (c < b->len + n + 1)
			c *= 2;
		char *q = realloc(b->p, c);
		if (!q)
			die("out of memory");
		b->p = q;
		b->cap = c;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

void buf_str(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

void buf_fmt(struct buf *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof tmp)
		die("internal: a formatted piece over %zu bytes", sizeof tmp);
	buf_add(b, tmp, (size_t)n);
}

/* XML text as Python's xml.sax.saxutils.escape: & < > (and " when quot) */
void buf_xml(struct buf *b, const char *s, int quot)
{
	for (; *s; s++) {
		switch (*s) {
		case '&':
			buf_str(b, "&amp;");
			break;
		case '<':
			buf_str(b, "&lt;");
			break;
		case '>':
			buf_str(b, "&gt;");
			break;
		case '"':
			buf_str(b, quot ? "&quot;" : "\"");
			break;
		default:
			buf_add(b, s, 1);
		}
	}
}

/* A JSON string of the bytes s as Python's json.dumps of os.listdir's str: UTF-8 decoded,
 * non-ASCII as \uXXXX (surrogate pairs above U+FFFF), a byte that is not UTF-8 as \udcXX
 * (surrogateescape). */
void buf_json_str(struct buf *b, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	buf_str(b, "\"");
	while (*s) {
		unsigned c = *s;
		if (c < 0x80) {
			if (c == '"' || c == '\\')
				buf_fmt(b, "\\%c", c);
			else if (c == '\n')
				buf_str(b, "\\n");
			else if (c == '\r')
				buf_str(b, "\\r");
			else if (c == '\t')
				buf_str(b, "\\t");
			else if (c == '\b')
				buf_str(b, "\\b");
			else if (c == '\f')
				buf_str(b, "\\f");
			else if (c < 0x20 || c == 0x7f)
				buf_fmt(b, "\\u%04x", c);
			else
				buf_add(b, (const char *)s, 1);
			s++;
			continue;
		}
		int n = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
		if (c >= 0xf5)
			n = 0;
		uint32_t cp = n == 4 ? c & 7 : n == 3 ? c & 15 : c & 31;
		for (int i = 1; i < n; i++) {
			if ((s[i] & 0xc0) != 0x80) {
				n = 0;
				break;
			}
			cp = cp << 6 | (s[i] & 0x3f);
		}
		if (n && ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp < 0xe000))) ||
			  (n == 4 && (cp < 0x10000 || cp > 0x10ffff))))
			n = 0;
		if (!n) {
			buf_fmt(b, "\\udc%02x", c);
			s++;
			continue;
		}
		if (cp >= 0x10000) {
			cp -= 0x10000;
			buf_fmt(b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
		} else {
			buf_fmt(b, "\\u%04x", cp);
		}
		s += n;
	}
	buf_str(b, "\"");
}

/* ---- responses -------------------------------------------------------------------------- */

static const char *reason(int code)
{
	switch (code) {
	case 200:
		return "OK";
	case 206:
		return "Partial Content";
	case 307:
		return "Temporary Redirect";
	case 400:
		return "Bad Request";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 412:
		return "Precondition Failed";
	case 416:
		return "Requested Range Not Satisfiable";
	case 431:
		return "Request Header Fields Too Large";
	case 501:
		return "Not Implemented";
	}
	return "Unknown";
}

void http_date(time_t t, char out[64])
{
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, 64, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

static const char *date_now(void)
{
	static char s[64];
	static time_t at = -1;
	time_t t = time(NULL);
	if (t != at) {
		http_date(t, s);
		at = t;
	}
	return s;
}

/* The status line and the common headers, then extra (CRLF-terminated lines, or "") and
 * Content-Length (or, for CHUNKED, Transfer-Encoding: chunked); the body is set by the
 * caller. */
/* a head built by appends (no printf per request: its formatting was most of the emulator's
 * own user time); over cap is a bug of this file: dies */
struct hb {
	char *p;
	size_t len, cap;
};

static void hb_put(struct hb *h, const char *s, size_t n)
{
	if (h->len + n >= h->cap) /* only the S3 error path echoes client bytes: cut, as a
				     server would refuse them */
		die("internal: response head over %zu bytes", h->cap);
	memcpy(h->p + h->len, s, n);
	h->len += n;
	h->p[h->len] = 0;
}

static void hb_str(struct hb *h, const char *s)
{
	hb_put(h, s, strlen(s));
}

static void hb_u64(struct hb *h, uint64_t v)
{
	char d[20];
	size_t i = sizeof d;
	do {
		d[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	hb_put(h, d + i, sizeof d - i);
}

void resp_head(struct conn *c, int code, const char *extra, uint64_t length)
{
	struct hb h = {c->hdr, 0, HDR_CAP};
	hb_str(&h, "HTTP/1.1 ");
	hb_u64(&h, (uint64_t)code);
	hb_str(&h, " ");
	hb_str(&h, reason(code));
	hb_str(&h, "\r\nServer: linkemu\r\nDate: ");
	hb_str(&h, date_now());
	hb_str(&h, "\r\n");
	hb_str(&h, extra);
	if (length == CHUNKED) {
		hb_str(&h, "Transfer-Encoding: chunked");
	} else {
		hb_str(&h, "Content-Length: ");
		hb_u64(&h, length);
	}
	hb_str(&h, "\r\n");
	if (c->close_after)
		hb_str(&h, "Connection: close\r\n");
	hb_str(&h, "\r\n");
	c->hdr_len = h.len;
	c->hdr_off = 0;
	c->state = C_SEND;
}

void resp_plain(struct conn *c, int code)
{
	resp_head(c, code, "", 0);
}

/* a body from memory (taken over: freed when sent); HEAD sends the head only */
void resp_mem(struct conn *c, int code, const char *extra, char *body, size_t len)
{
	resp_head(c, code, extra, len);
	if (c->head) {
		free(body);
		return;
	}
	c->mem_owned = body;
	c->mem = body;
	c->mem_left = len;
}

/* ---- root mode -------------------------------------------------------------------------- */

int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	ch = tolower(ch);
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	return -1;
}

/* %XX-decoded copy of s[0..n) into out (cap bytes); -1 when it holds a NUL or is too long */
int pct_decode(const char *s, size_t n, char *out, size_t cap, int plus)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		int ch = (unsigned char)s[i];
		if (ch == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
			ch = hexval(s[i + 1]) << 4 | hexval(s[i + 2]);
			i += 2;
		} else if (plus && ch == '+') {
			ch = ' ';
		}
		if (!ch || o + 1 >= cap)
			return -1;
		out[o++] = (char)ch;
	}
	out[o] = 0;
	return 0;
}

/* root + the decoded path, '.' and '..' resolved as os.path.normpath does; -1 when it leaves
 * the root */
int resolve(const char *rel, char *out, size_t cap)
{
	size_t rl = strlen(cfg.root);
	if (rl + 2 > cap)
		return -1;
	memcpy(out, cfg.root, rl);
	size_t o = rl;
	const char *p = rel;
	while (*p) {
		while (*p == '/')
			p++;
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (!n)
			break;
		if (n == 1 && p[0] == '.') {
		} else if (n == 2 && p[0] == '.' && p[1] == '.') {
			if (o == rl)
				return -1;
			while (o > rl && out[o - 1] != '/')
				o--;
			o--; /* the '/' */
		} else {
			if (o + 1 + n + 1 > cap)
				return -1;
			out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		p += n;
	}
	out[o] = 0;
	return 0;
}

int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* whether If-Match (when given) lets etag through: "*" or one of its comma-separated tags */
int if_match_ok(const char *im, const char *etag)
{
	if (!im)
		return 1;
	size_t el = strlen(etag);
	const char *p = im;
	while (*p == ' ' || *p == '\t')
		p++;
	if (!strcmp(p, "*"))
		return 1;
	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		const char *e = strchr(p, ',');
		const char *end = e ? e : p + strlen(p);
		const char *t = end;
		while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
			t--;
		if ((size_t)(t - p) == el && !memcmp(p, etag, el))
			return 1;
		if (!e)
			return 0;
		p = e + 1;
	}
}

static int parse_u64(const char *s, size_t n, uint64_t *v)
{
	if (!n || n > 19)
		return -1;
	uint64_t x = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		x = x * 10 + (uint64_t)(s[i] - '0');
	}
	*v = x;
	return 0;
}

/* "bytes=A-B", "bytes=A-" or "bytes=-N" (one range) into *a, *b (b: UINT64_MAX when open),
 * RG_NONE when there is no Range or it is not one range of bytes (then the whole body). */
int parse_range(const char *r, uint64_t *a, uint64_t *b)
{
	if (!r || strncmp(r, "bytes=", 6) || strchr(r, ','))
		return RG_NONE;
	const char *s = r + 6, *dash = strchr(s, '-');
	if (!dash)
		return RG_BAD;
	size_t al = (size_t)(dash - s), bl = strlen(dash + 1);
	*b = UINT64_MAX;
	if (bl && parse_u64(dash + 1, bl, b))
		return RG_BAD;
	if (!al)
		return bl ? RG_SUFFIX : RG_BAD;
	if (parse_u64(s, al, a))
		return RG_BAD;
	return RG_ONE;
}

/* the ETag of a file: nginx's "MTIME-SIZE", or with --etag store an opaque token */
void file_etag(const struct stat *sb, char etag[64])
{
	if (cfg.etag_store) {
		/* FNV-1a over what changes with any rewrite (ctime too: touch -d cannot put it
		 * back), one opaque token: a strong validator, as S3's, GCS's and AIStore's */
		uint64_t h = 1469598103934665603ULL,
			 v[6] = {(uint64_t)sb->st_dev,
				 (uint64_t)sb->st_ino,
				 (uint64_t)sb->st_size,
				 (uint64_t)sb->st_mtim.tv_sec,
				 (uint64_t)sb->st_mtim.tv_nsec,
				 (uint64_t)sb->st_ctim.tv_sec ^
				     ((uint64_t)sb->st_ctim.tv_nsec << 32)};
		for (size_t i = 0; i < sizeof v; i++) {
			h ^= ((const unsigned char *)v)[i];
			h *= 1099511628211ULL;
		}
		snprintf(etag, 64, "\"%016llx\"", (unsigned long long)h);
	} else {
		snprintf(etag, 64, "\"%llx-%llx\"", (unsigned long long)sb->st_mtime,
			 (unsigned long long)sb->st_size);
	}
}

/* ---- open files: root mode's files kept open between requests --------------------------- */

/* A file served before, open: a request stats its path (one syscall) and, while the path
 * still names the same inode (st_dev, st_ino), sends from this fd, where it opened, fstat'ed
 * and closed the file each time (three). The fd keeps its inode alive, so no other file can
 * take its inode number while it is here; a rewrite in place is the same inode, read through
 * the same fd, and the validators (ETag, Last-Modified) are made again from the stat when its
 * size, mtime or ctime changed. A path that names another inode (a file renamed over it) or
 * none gets a new open (or its 404), and the old entry goes once the responses sending from
 * it are done (refs). A slot per hash of the path, OF_SLOTS of them: a collision replaces. */
#define OF_SLOTS 64

struct ofile {
	char *path;
	int fd;
	unsigned refs;	/* 1 for the table, 1 per response sending from it */
	struct stat sb; /* of the last stat that matched */
	char etag[64], lm[64];
};

static struct ofile *oftab[OF_SLOTS];

static void ofile_put(struct ofile *of)
{
	if (--of->refs)
		return;
	close(of->fd);
	free(of->path);
	free(of);
}

static size_t ofile_slot(const char *path)
{
	uint64_t h = 1469598103934665603ULL;
	for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
		h ^= *p;
		h *= 1099511628211ULL;
	}
	return (size_t)(h % OF_SLOTS);
}

static void ofile_drop(size_t slot)
{
	if (oftab[slot])
		ofile_put(oftab[slot]);
	oftab[slot] = NULL;
}

static void ofile_validators(struct ofile *of, const struct stat *sb)
{
	of->sb = *sb;
	file_etag(sb, of->etag);
	http_date(sb->st_mtime, of->lm);
}

static int same_version(const struct stat *a, const struct stat *b)
{
	return a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec && a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
	       a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* The open regular file at path, its validators those of now; NULL (404) when there is none */
static struct ofile *ofile_get(const char *path)
{
	size_t slot = ofile_slot(path);
	struct ofile *of = oftab[slot];
	struct stat sb;
	if (stat(path, &sb) || !S_ISREG(sb.st_mode)) {
		if (of && !strcmp(of->path, path))
			ofile_drop(slot);
		return NULL;
	}
	if (of && !strcmp(of->path, path) && of->sb.st_dev == sb.st_dev &&
	    of->sb.st_ino == sb.st_ino) {
		if (!same_version(&of->sb, &sb))
			ofile_validators(of, &sb);
		return of;
	}
	/* not here, or another inode now: open it; what was opened is what fstat says */
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		close(fd);
		return NULL;
	}
	ofile_drop(slot);
	of = xmalloc(sizeof *of);
	of->path = strdup(path);
	if (!of->path)
		die("out of memory");
	of->fd = fd;
	of->refs = 1;
	ofile_validators(of, &sb);
	oftab[slot] = of;
	return of;
}

static void serve_file(struct conn *c, const char *path)
{
	struct ofile *of = ofile_get(path);
	if (!of) {
		resp_plain(c, 404);
		return;
	}
	uint64_t size = (uint64_t)of->sb.st_size;
	if (!if_match_ok(c->if_match, of->etag)) {
		resp_plain(c, 412);
		return;
	}
	uint64_t start = 0, end = size, a = 0, b = 0;
	int code = 200, rk = parse_range(c->range, &a, &b);
	if (rk == RG_BAD) { /* linkemu.py failed on these (int()); nginx ignores them */
		rk = RG_NONE;
	}
	if (rk == RG_ONE) {
		start = a;
		end = b == UINT64_MAX ? size : (b + 1 < size ? b + 1 : size);
	} else if (rk == RG_SUFFIX) {
		start = b >= size ? 0 : size - b;
	}
	char extra[512];
	if (rk != RG_NONE) {
		if (start >= size || start >= end) {
			snprintf(extra, sizeof extra, "Content-Range: bytes */%" PRIu64 "\r\n",
				 size);
			resp_head(c, 416, extra, 0);
			return;
		}
		code = 206;
	}
	struct hb h = {extra, 0, sizeof extra};
	hb_str(&h, "ETag: ");
	hb_str(&h, of->etag);
	hb_str(&h, "\r\nLast-Modified: ");
	hb_str(&h, of->lm);
	hb_str(&h, "\r\nAccept-Ranges: bytes\r\n");
	if (code == 206) {
		hb_str(&h, "Content-Range: bytes ");
		hb_u64(&h, start);
		hb_str(&h, "-");
		hb_u64(&h, end - 1);
		hb_str(&h, "/");
		hb_u64(&h, size);
		hb_str(&h, "\r\n");
	}
	resp_head(c, code, extra, end - start);
	if (c->head || end == start)
		return;
	of->refs++;
	c->body_of = of;
	c->body_fd = of->fd;
	c->file_off = (off_t)start;
	c->file_left = end - start;
}

/* the file bytes of the response done (sent, or the connection closed) */
void body_done(struct conn *c)
{
	if (c->body_of)
		ofile_put(c->body_of);
	else if (c->body_fd >= 0 && c->body_fd != cfg.tmpl_fd) /* S3 mode's template: shared */
		close(c->body_fd);
	c->body_of = NULL;
	c->body_fd = -1;
}

static void serve_root(struct conn *c, const char *rel)
{
	char path[8192];
	if (resolve(rel, path, sizeof path)) {
		resp_plain(c, 403);
		return;
	}
	size_t rl = strlen(rel);
	struct stat sb;
	if (rl && rel[rl - 1] == '/' && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		serve_listing(c, path);
		return;
	}
	serve_file(c, path);
}

/* the response to the parsed request, after its delay */
void respond(struct conn *c)
{
	counts.requests++;
	char *t = c->target;
	char *qm = strchr(t, '?');
	if (qm)
		*qm++ = 0;
	char path[8192];
	if (pct_decode(t, strlen(t), path, sizeof path, 0)) {
		resp_plain(c, 400);
		return;
	}
	if (cfg.ais && serve_ais(c, path, qm, t))
		return;
	if (cfg.root)
		serve_root(c, path);
	else
		serve_s3(c, path, qm);
}

static int ieq_prefix(const char *line, const char *name, char **val)
{
	size_t n = strlen(name);
	if (strncasecmp(line, name, n) || line[n] != ':')
		return 0;
	char *v = (char *)line + n + 1;
	while (*v == ' ' || *v == '\t')
		v++;
	char *e = v + strlen(v);
	while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
		*--e = 0;
	*val = v;
	return 1;
}

/* Parse the head in in[0..req_len) in place. 0: a request; -1: malformed */
int parse_request(struct conn *c)
{
	char *p = c->in, *end = c->in + c->req_len - 4;
	*end = 0;
	char *eol = strstr(p, "\r\n");
	if (eol)
		*eol = 0;
	/* METHOD SP TARGET SP HTTP/1.x */
	char *sp1 = strchr(p, ' ');
	if (!sp1)
		return -1;
	*sp1 = 0;
	char *tgt = sp1 + 1, *sp2 = strchr(tgt, ' ');
	if (!sp2 || tgt[0] != '/')
		return -1;
	*sp2 = 0;
	const char *ver = sp2 + 1;
	if (strcmp(ver, "HTTP/1.1") && strcmp(ver, "HTTP/1.0"))
		return -1;
	c->method = p;
	c->target = tgt;
	c->range = c->if_match = NULL;
	c->clen = 0;
	c->keep_alive = !strcmp(ver, "HTTP/1.1");
	char *line = eol ? eol + 2 : end;
	while (line < end) {
		char *e = strstr(line, "\r\n");
		if (e)
			*e = 0;
		char *v;
		if (ieq_prefix(line, "Range", &v))
			c->range = v;
		else if (ieq_prefix(line, "If-Match", &v))
			c->if_match = v;
		else if (ieq_prefix(line, "Connection", &v)) {
			if (!strcasecmp(v, "close"))
				c->keep_alive = 0;
			else if (!strcasecmp(v, "keep-alive"))
				c->keep_alive = 1;
		} else if (ieq_prefix(line, "Content-Length", &v)) {
			/* no request bodies here but AIS mode's (GetBatch's JSON), at most
			 * BODY_CAP bytes */
			if (parse_u64(v, strlen(v), &c->clen) ||
			    (c->clen && (!cfg.ais || c->clen > BODY_CAP)))
				return -1;
		} else if (ieq_prefix(line, "Transfer-Encoding", &v)) {
			return -1;
		}
		if (!e)
			break;
		line = e + 2;
	}
	return 0;
}
