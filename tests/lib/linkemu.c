/* linkemu: the link emulator of the tests and benchmarks, in C (tests/lib/shardfs_test/linkemu.py
 * starts it; built for tests only, never installed).
 *
 *   linkemu --root DIR [--delay-ms 30] [--rate-mb 60] [--port 0] [--port-file F] [--etag nginx]
 *           [--ais [--ais-objects-port P]]
 *   linkemu --s3-keys N --s3-object FILE [--s3-bucket bench] [--s3-prefix P] [...]
 *
 * An HTTP/1.1 object store on 127.0.0.1 that behaves like a remote one on a real link: every
 * response starts --delay-ms after its request arrived (a timer heap, no thread sleeps) and
 * every connection sends at most --rate-mb MB/s (10^6 B): the kernel paces the socket
 * (SO_MAX_PACING_RATE, TCP's own pacing), so the cap costs no CPU here and holds for each
 * connection apart, with no cap on the sum. One thread, epoll (edge-triggered, each socket
 * registered once), bodies by sendfile(2), keep-alive and pipelined requests. Per request of a
 * file, about five syscalls: a recv (a short one says the socket is drained: no second recv to
 * see EAGAIN), a stat of the path (a served file is kept open while its path names the same
 * inode: no open, fstat, close), the head by send (MSG_MORE), the body by sendfile, and the
 * epoll_wait that the delay's timer or the socket wakes (tests/bench/README.md, emulator).
 *
 * Root mode serves the files under DIR: GET and HEAD, one byte range (206 + Content-Range; an
 * unsatisfiable one 416 with "Content-Range: bytes * /SIZE"), If-Match (412), nginx's ETag
 * "MTIME-SIZE" in hex (--etag nginx, the default: a validator shardfs takes as weak) or, with
 * --etag store, an opaque token that changes with any rewrite (strong, as object stores
 * give), and a path ending in "/" that names a directory gets an nginx-style
 * JSON autoindex (name, type, mtime, size; sorted by name).
 *
 * With --ais, root mode also answers what the AIStore stand-in of the tests
 * (tests/lib/shardfs_test/s3servers.py AisStandIn, root mode, no fault armed) answers: the
 * listing and HEAD under /s3/BUCKET/, object GETs redirected (to --ais-objects-port, another
 * emulator on the same files, as an AIStore proxy sends them to a target: a client's
 * connections per host are not shared with the proxy's; else here), GetBatch: AIS mode, in
 * linkemu_ais.c (linkemu.h: what the two files share), so that the link bench's L9 does not
 * run a store in CPython on the client's cores.
 *
 * S3 mode: a bucket of N keys PREFIX + "shard-%06d.tar", key i's bytes FILE's followed by
 * 512 * (i % 8) zeros, ETag the MD5 of "i:size" (quoted): ListObjectsV2 (list-type=2 only, no
 * delimiter, max-keys capped at 1000, opaque continuation tokens), HEAD and ranged GET (no
 * suffix ranges: 400 InvalidRange), errors as S3's XML.
 *
 * GET /__stats answers at once (no delay, not counted) a JSON object: requests (answered after
 * the delay), bytes_sent (body bytes handed to the kernel), connections (accepted), cpu_s (this
 * process's user + system seconds, getrusage), cpu_user_s, cpu_sys_s, and in S3 mode
 * list_requests, list_bytes, heads, gets, other; with --ais AisStandIn's counters moss_requests,
 * moss_redirects, moss_items, moss_missing, moss_refused, moss_ms (GetBatch answers' time from
 * their start after the delay to their last byte, summed), moss_inflight_max, redirects,
 * s3_head, s3_get, s3_head_ms, unsupported.
 *
 * Prints "port N" on stdout (and writes N to --port-file, by rename) once it listens; runs until
 * killed (SIGTERM). A request head over 16 KiB gets 431, a malformed one 400, then the
 * connection closes; a method other than GET and HEAD gets 501. A request body is refused (400)
 * but with --ais: at most 8 MiB, by Content-Length (GetBatch's JSON). */
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

#ifndef SO_MAX_PACING_RATE
#define SO_MAX_PACING_RATE 47
#endif

#define BODY_CAP (8u << 20) /* a request body (AIS mode's GetBatch) */
#define S3_MAXN	 1000000    /* keys are "%06d": sorted as numbers only below this */
#define LAST_MOD "Thu, 01 Jan 2026 00:00:00 GMT" /* every key's mtime in S3 mode */

void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("linkemu: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		die("out of memory (%zu bytes)", n);
	return p;
}

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

/* ---- configuration and counters --------------------------------------------------------- */

struct cfg cfg = {.tmpl_fd = -1};

static struct {
	uint64_t requests, bytes_sent, connections;
	uint64_t list_requests, list_bytes, heads, gets, other;
} st;

/* ---- connections ------------------------------------------------------------------------ */

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the timer heap: connections waiting for their response's start ----------------------- */

static struct conn **heap;
static size_t heap_len, heap_cap;
static uint64_t heap_seq;

static int heap_less(const struct conn *a, const struct conn *b)
{
	return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

static void heap_push(struct conn *c)
{
	if (heap_len == heap_cap) {
		heap_cap = heap_cap ? heap_cap * 2 : 64;
		heap = realloc(heap, heap_cap * sizeof *heap);
		if (!heap)
			die("out of memory");
	}
	c->seq = heap_seq++;
	size_t i = heap_len++;
	while (i && heap_less(c, heap[(i - 1) / 2])) {
		heap[i] = heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	heap[i] = c;
}

static struct conn *heap_pop(void)
{
	struct conn *top = heap[0], *last = heap[--heap_len];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		const struct conn *mc = last;
		if (l < heap_len && heap_less(heap[l], mc)) {
			m = l;
			mc = heap[l];
		}
		if (l + 1 < heap_len && heap_less(heap[l + 1], mc))
			m = l + 1;
		if (m == i)
			break;
		heap[i] = heap[m];
		i = m;
	}
	if (heap_len)
		heap[i] = last;
	return top;
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
static int pct_decode(const char *s, size_t n, char *out, size_t cap, int plus)
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

static void serve_listing(struct conn *c, const char *path)
{
	DIR *d = opendir(path);
	if (!d) {
		resp_plain(c, 404);
		return;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			names = realloc(names, cap * sizeof *names);
			if (!names)
				die("out of memory");
		}
		names[n] = strdup(de->d_name);
		if (!names[n])
			die("out of memory");
		n++;
	}
	qsort(names, n, sizeof *names, name_cmp);
	struct buf b = {0};
	buf_str(&b, "[");
	int first = 1;
	for (size_t i = 0; i < n; i++) {
		struct stat sb;
		if (fstatat(dirfd(d), names[i], &sb, 0) == 0) { /* a dangling link: left out */
			char when[64];
			http_date(sb.st_mtime, when);
			buf_str(&b, first ? "{\"name\": " : ", {\"name\": ");
			first = 0;
			buf_json_str(&b, names[i]);
			buf_fmt(&b, ", \"type\": \"%s\", \"mtime\": \"%s\"",
				S_ISDIR(sb.st_mode) ? "directory" : "file", when);
			if (!S_ISDIR(sb.st_mode))
				buf_fmt(&b, ", \"size\": %lld", (long long)sb.st_size);
			buf_str(&b, "}");
		}
		free(names[i]);
	}
	free(names);
	closedir(d);
	buf_str(&b, "]");
	resp_mem(c, 200, "Content-Type: application/json\r\n", b.p, b.len);
}

/* whether If-Match (when given) lets etag through: "*" or one of its comma-separated tags */
static int if_match_ok(const char *im, const char *etag)
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

enum { RG_NONE, RG_ONE, RG_SUFFIX, RG_BAD };

/* "bytes=A-B", "bytes=A-" or "bytes=-N" (one range) into *a, *b (b: UINT64_MAX when open),
 * RG_NONE when there is no Range or it is not one range of bytes (then the whole body). */
static int parse_range(const char *r, uint64_t *a, uint64_t *b)
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
static void body_done(struct conn *c)
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

/* ---- S3 mode ---------------------------------------------------------------------------- */

static uint64_t s3_size(long i)
{
	return cfg.tmpl_size + 512u * (uint64_t)(i % 8);
}

static void s3_etag(long i, char out[40])
{
	char in[64];
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int n = snprintf(in, sizeof in, "%ld:%" PRIu64, i, s3_size(i));
	if (!EVP_Digest(in, (size_t)n, md, &mdlen, EVP_md5(), NULL) || mdlen != 16)
		die("MD5 failed (OpenSSL)");
	out[0] = '"';
	for (int k = 0; k < 16; k++)
		snprintf(out + 1 + 2 * k, 3, "%02x", md[k]);
	out[33] = '"';
	out[34] = 0;
}

/* the key's index, or -1 */
static long s3_index(const char *key)
{
	size_t pl = strlen(cfg.prefix);
	if (strncmp(key, cfg.prefix, pl) || strncmp(key + pl, "shard-", 6))
		return -1;
	const char *d = key + pl + 6;
	for (int k = 0; k < 6; k++)
		if (d[k] < '0' || d[k] > '9')
			return -1;
	if (strcmp(d + 6, ".tar"))
		return -1;
	long i = strtol(d, NULL, 10);
	return i < cfg.s3_n ? i : -1;
}

static char *s3_error_xml(const char *code, const char *msg, size_t *len)
{
	struct buf b = {0};
	buf_fmt(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>",
		code);
	buf_xml(&b, msg, 0);
	buf_str(&b, "</Message><RequestId>linkemu</RequestId></Error>");
	*len = b.len;
	return b.p;
}

static void s3_error(struct conn *c, int code, const char *scode, const char *msg)
{
	size_t len;
	char *x = s3_error_xml(scode, msg, &len);
	resp_mem(c, code, "", x, len);
}

/* first index whose key is >= s (upper: > s) */
static long s3_bisect(const char *s, int upper)
{
	long lo = 0, hi = cfg.s3_n;
	while (lo < hi) {
		long mid = lo + (hi - lo) / 2;
		int r = strcmp(cfg.keys[mid], s);
		if (r < 0 || (upper && r == 0))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void b64_encode(const unsigned char *in, size_t n, struct buf *b)
{
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
			     (i + 2 < n ? in[i + 2] : 0);
		char q[4] = {B64[v >> 18], B64[v >> 12 & 63], i + 1 < n ? B64[v >> 6 & 63] : '=',
			     i + 2 < n ? B64[v & 63] : '='};
		buf_add(b, q, 4);
	}
}

/* strict base64 (padding as required); -1 when it is not */
static int b64_decode(const char *s, struct buf *out)
{
	size_t n = strlen(s);
	if (n % 4)
		return -1;
	for (size_t i = 0; i < n; i += 4) {
		uint32_t v = 0;
		int pad = 0;
		for (int k = 0; k < 4; k++) {
			const char *p = s[i + k] ? strchr(B64, s[i + k]) : NULL;
			if (s[i + k] == '=' && i + 4 == n && k >= 2) {
				pad++;
				v <<= 6;
				continue;
			}
			if (!p || pad)
				return -1;
			v = v << 6 | (uint32_t)(p - B64);
		}
		unsigned char q[3] = {(unsigned char)(v >> 16), (unsigned char)(v >> 8),
				      (unsigned char)v};
		buf_add(out, (const char *)q, (size_t)(3 - pad));
	}
	return 0;
}

void query_free(struct query *q)
{
	free(q->list_type);
	free(q->delimiter);
	free(q->max_keys);
	free(q->prefix);
	free(q->start_after);
	free(q->token);
}

/* the first value of each key we read, '+' and %XX decoded (parse_qs, keep_blank_values) */
int parse_query(const char *qs, struct query *q)
{
	memset(q, 0, sizeof *q);
	while (qs && *qs) {
		const char *amp = strchr(qs, '&');
		size_t n = amp ? (size_t)(amp - qs) : strlen(qs);
		const char *eq = memchr(qs, '=', n);
		size_t kl = eq ? (size_t)(eq - qs) : n;
		char k[64], *v = xmalloc(n + 1);
		if (n && (pct_decode(qs, kl, k, sizeof k, 1) ||
			  pct_decode(eq ? eq + 1 : qs + n, eq ? n - kl - 1 : 0, v, n + 1, 1))) {
			free(v);
			if (kl < sizeof k) /* a key we do not read, or a NUL: refused */
				return -1;
			goto next;
		}
		if (!n) {
			free(v);
			goto next;
		}
		char **slot = !strcmp(k, "list-type")		 ? &q->list_type
			      : !strcmp(k, "delimiter")		 ? &q->delimiter
			      : !strcmp(k, "max-keys")		 ? &q->max_keys
			      : !strcmp(k, "prefix")		 ? &q->prefix
			      : !strcmp(k, "start-after")	 ? &q->start_after
			      : !strcmp(k, "continuation-token") ? &q->token
								 : NULL;
		if (slot && !*slot)
			*slot = v;
		else
			free(v);
	next:
		qs = amp ? amp + 1 : NULL;
	}
	return 0;
}

static void s3_listing(struct conn *c, const char *qs)
{
	struct query q;
	int code = 200;
	struct buf b = {0};
	char *err = NULL;
	size_t errlen = 0;
	if (parse_query(qs, &q)) {
		err = s3_error_xml("InvalidArgument", "query", &errlen);
		code = 400;
	} else if (!q.list_type || strcmp(q.list_type, "2")) {
		err = s3_error_xml("InvalidArgument", "only list-type=2 here", &errlen);
		code = 400;
	} else if (q.delimiter) {
		err = s3_error_xml("NotImplemented", "no delimiter here", &errlen);
		code = 501;
	}
	long max_keys = 1000;
	if (!err && q.max_keys) {
		char *e;
		errno = 0;
		long v = strtol(q.max_keys, &e, 10);
		while (*e == ' ')
			e++;
		if (errno || e == q.max_keys || *e) {
			err = s3_error_xml("InvalidArgument", "max-keys", &errlen);
			code = 400;
		} else {
			max_keys = v < 1000 ? v : 1000;
		}
	}
	struct buf after = {0};
	if (!err) {
		if (q.start_after)
			buf_str(&after, q.start_after);
		if (q.token) {
			struct buf raw = {0};
			if (b64_decode(q.token, &raw) || raw.len < 6 ||
			    memcmp(raw.p, "after\0", 6)) {
				err = s3_error_xml("InvalidArgument",
						   "The continuation token provided is incorrect",
						   &errlen);
				code = 400;
			} else {
				after.len = 0;
				buf_add(&after, raw.p + 6, raw.len - 6);
			}
			free(raw.p);
		}
	}
	if (err) {
		st.list_bytes += errlen;
		query_free(&q);
		free(after.p);
		resp_mem(c, code, "Content-Type: application/xml\r\n", err, errlen);
		return;
	}
	const char *prefix = q.prefix ? q.prefix : "";
	long lo = 0, hi = 0, start = 0, stop = 0;
	if (max_keys > 0) {
		struct buf top = {0};
		buf_str(&top, prefix);
		buf_str(&top, "\xf4\x8f\xbf\xbf"); /* U+10FFFF: above every key under prefix */
		lo = s3_bisect(prefix, 0);
		hi = s3_bisect(top.p, 0);
		free(top.p);
		start = after.len ? s3_bisect(after.p, 1) : lo;
		if (start < lo)
			start = lo;
		if (start > hi)
			start = hi;
		stop = start + max_keys < hi ? start + max_keys : hi;
	}
	int truncated = stop < hi;
	buf_str(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult "
		    "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>");
	buf_xml(&b, cfg.bucket, 0);
	buf_str(&b, "</Name><Prefix>");
	buf_xml(&b, prefix, 0);
	buf_fmt(&b,
		"</Prefix><KeyCount>%ld</KeyCount><MaxKeys>%ld</MaxKeys><IsTruncated>%s"
		"</IsTruncated>",
		stop - start, max_keys, truncated ? "true" : "false");
	if (q.token) {
		buf_str(&b, "<ContinuationToken>");
		buf_xml(&b, q.token, 0);
		buf_str(&b, "</ContinuationToken>");
	}
	if (truncated) {
		struct buf raw = {0}, tok = {0};
		buf_add(&raw, "after\0", 6);
		buf_str(&raw, cfg.keys[stop - 1]);
		b64_encode((const unsigned char *)raw.p, raw.len, &tok);
		buf_str(&b, "<NextContinuationToken>");
		buf_xml(&b, tok.p, 0);
		buf_str(&b, "</NextContinuationToken>");
		free(raw.p);
		free(tok.p);
	}
	for (long i = start; i < stop; i++) {
		long k = s3_index(cfg.keys[i]);
		char etag[40];
		s3_etag(k, etag);
		buf_str(&b, "<Contents><Key>");
		buf_xml(&b, cfg.keys[i], 0);
		buf_str(&b, "</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>");
		buf_xml(&b, etag, 1);
		buf_fmt(&b,
			"</ETag><Size>%" PRIu64 "</Size><StorageClass>STANDARD</StorageClass>"
			"</Contents>",
			s3_size(k));
	}
	buf_str(&b, "</ListBucketResult>");
	query_free(&q);
	free(after.p);
	st.list_bytes += b.len;
	resp_mem(c, 200, "Content-Type: application/xml\r\n", b.p, b.len);
}

char zeros[4096];

static void serve_s3(struct conn *c, const char *path, const char *qs)
{
	const char *p = path;
	while (*p == '/')
		p++;
	const char *slash = strchr(p, '/');
	size_t bl = slash ? (size_t)(slash - p) : strlen(p);
	const char *key = slash ? slash + 1 : "";
	if (bl != strlen(cfg.bucket) || memcmp(p, cfg.bucket, bl)) {
		st.other++;
		char name[1024];
		snprintf(name, sizeof name, "%.*s", (int)bl, p);
		s3_error(c, 404, "NoSuchBucket", name);
		return;
	}
	if (!*key) {
		if (c->head) {
			st.other++;
			s3_error(c, 405, "MethodNotAllowed", "HEAD");
			return;
		}
		st.list_requests++;
		s3_listing(c, qs);
		return;
	}
	if (c->head)
		st.heads++;
	else
		st.gets++;
	long i = s3_index(key);
	if (i < 0) {
		s3_error(c, 404, "NoSuchKey", key);
		return;
	}
	uint64_t size = s3_size(i);
	char etag[40];
	s3_etag(i, etag);
	if (!if_match_ok(c->if_match, etag)) {
		s3_error(c, 412, "PreconditionFailed", key);
		return;
	}
	uint64_t start = 0, end = size, a = 0, b = 0;
	int code = 200, rk = parse_range(c->range, &a, &b);
	if (rk == RG_SUFFIX) {
		s3_error(c, 400, "InvalidRange", "no suffix ranges");
		return;
	}
	if (rk == RG_BAD) {
		s3_error(c, 400, "InvalidRange", c->range);
		return;
	}
	char extra[512];
	int n =
	    snprintf(extra, sizeof extra,
		     "ETag: %s\r\nAccept-Ranges: bytes\r\nLast-Modified: " LAST_MOD "\r\n", etag);
	if (rk == RG_ONE) {
		start = a;
		end = b == UINT64_MAX ? size : (b + 1 < size ? b + 1 : size);
		if (start >= size || start >= end) {
			s3_error(c, 416, "InvalidRange", c->range);
			return;
		}
		code = 206;
		snprintf(extra + n, sizeof extra - (size_t)n,
			 "Content-Range: bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64 "\r\n", start,
			 end - 1, size);
	}
	resp_head(c, code, extra, end - start);
	if (c->head)
		return;
	/* the template's bytes by sendfile, then the zeros after it from memory */
	if (start < cfg.tmpl_size) {
		c->body_fd = cfg.tmpl_fd; /* shared by every response: sendfile's own offset */
		c->file_off = (off_t)start;
		c->file_left = (end < cfg.tmpl_size ? end : cfg.tmpl_size) - start;
	}
	uint64_t z0 = start > cfg.tmpl_size ? start : cfg.tmpl_size;
	if (end > z0) {
		c->mem = zeros;
		c->mem_left = (size_t)(end - z0); /* at most 7 * 512 */
	}
}

/* ---- the request ------------------------------------------------------------------------ */

static void serve_stats(struct conn *c)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double u = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
	double s = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	struct buf b = {0};
	buf_fmt(&b,
		"{\"requests\": %" PRIu64 ", \"bytes_sent\": %" PRIu64 ", \"connections\": %" PRIu64
		", \"cpu_s\": %.6f, \"cpu_user_s\": %.6f, \"cpu_sys_s\": %.6f",
		st.requests, st.bytes_sent, st.connections, u + s, u, s);
	if (cfg.keys)
		buf_fmt(&b,
			", \"list_requests\": %" PRIu64 ", \"list_bytes\": %" PRIu64
			", \"heads\": %" PRIu64 ", \"gets\": %" PRIu64 ", \"other\": %" PRIu64,
			st.list_requests, st.list_bytes, st.heads, st.gets, st.other);
	if (cfg.ais)
		ais_stats(&b);
	buf_str(&b, "}");
	resp_mem(c, 200, "Content-Type: application/json\r\n", b.p, b.len);
}

/* the response to the parsed request, after its delay */
static void respond(struct conn *c)
{
	st.requests++;
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
static int parse_request(struct conn *c)
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

static int ep;

static void parts_free(struct conn *c)
{
	for (size_t i = 0; i < c->nparts; i++)
		free(c->parts[i].path);
	free(c->parts);
	free(c->moss_mem);
	c->parts = NULL;
	c->moss_mem = NULL;
	c->nparts = c->part_i = 0;
}

static void conn_close(struct conn *c)
{
	ais_answer_done(c);
	close(c->fd);
	body_done(c);
	free(c->mem_owned);
	free(c->body);
	parts_free(c);
	free(c);
}

static void resp_done(struct conn *c)
{
	body_done(c);
	free(c->mem_owned);
	c->mem_owned = NULL;
	c->mem = NULL;
	c->mem_left = 0;
	c->file_left = 0;
	free(c->body);
	c->body = NULL;
	c->body_len = 0;
	parts_free(c);
	ais_answer_done(c);
	memmove(c->in, c->in + c->req_len, c->in_len - c->req_len);
	c->in_len -= c->req_len;
	c->req_len = 0;
	c->state = C_READ;
}

enum { S_DONE, S_AGAIN, S_ERR };

static int send_some(struct conn *c)
{
again:
	while (c->hdr_off < c->hdr_len) {
		int more = c->file_left || c->mem_left ? MSG_MORE : 0;
		ssize_t n =
		    send(c->fd, c->hdr + c->hdr_off, c->hdr_len - c->hdr_off, MSG_NOSIGNAL | more);
		if (n < 0)
			return errno == EAGAIN ? S_AGAIN : S_ERR;
		c->hdr_off += (size_t)n;
	}
	while (c->file_left) {
		size_t want = c->file_left < (1u << 30) ? (size_t)c->file_left : 1u << 30;
		ssize_t n = sendfile(c->fd, c->body_fd, &c->file_off, want);
		if (n < 0)
			return errno == EAGAIN ? S_AGAIN : S_ERR;
		if (n == 0)
			return S_ERR; /* the file got shorter */
		c->file_left -= (uint64_t)n;
		st.bytes_sent += (uint64_t)n;
	}
	while (c->mem_left) {
		ssize_t n = send(c->fd, c->mem, c->mem_left,
				 MSG_NOSIGNAL | (c->part_i < c->nparts ? MSG_MORE : 0));
		if (n < 0)
			return errno == EAGAIN ? S_AGAIN : S_ERR;
		c->mem += n;
		c->mem_left -= (size_t)n;
		if (!cfg.root && c->mem_owned == NULL)
			st.bytes_sent += (uint64_t)n; /* an S3 object's zeros */
	}
	if (c->part_i < c->nparts) { /* a GetBatch answer's next part */
		const struct part *p = &c->parts[c->part_i++];
		body_done(c);
		if (p->len) {
			c->body_fd = open(p->path, O_RDONLY | O_CLOEXEC);
			if (c->body_fd < 0)
				return S_ERR; /* gone since the answer began: cut it */
			c->file_off = (off_t)p->off;
			c->file_left = p->len;
		}
		c->mem = c->moss_mem + p->mem_off;
		c->mem_left = p->mem_len;
		goto again;
	}
	return S_DONE;
}

/* Drive a connection as far as it goes without blocking (edge-triggered: until EAGAIN). */
static void conn_run(struct conn *c)
{
	for (;;) {
		if (c->state == C_WAIT)
			return;
		if (c->state == C_BODY) {
			while (c->body_len < c->clen) {
				ssize_t n = recv(c->fd, c->body + c->body_len,
						 (size_t)c->clen - c->body_len, 0);
				if (n > 0) {
					c->body_len += (size_t)n;
					continue;
				}
				if (n < 0 && (errno == EAGAIN || errno == EINTR))
					return;
				conn_close(c);
				return;
			}
			c->state = C_WAIT;
			c->deadline = now_ns() + cfg.delay_ns;
			heap_push(c);
			return;
		}
		if (c->state == C_SEND) {
			int r = send_some(c);
			if (r == S_AGAIN)
				return;
			if (r == S_ERR || c->close_after) {
				conn_close(c);
				return;
			}
			resp_done(c);
			continue;
		}
		/* C_READ: a whole head in the buffer? */
		char *e = c->in_len >= 4 ? memmem(c->in, c->in_len, "\r\n\r\n", 4) : NULL;
		if (!e) {
			if (c->in_len == IN_CAP) {
				c->req_len = c->in_len;
				c->close_after = 1;
				c->head = 0;
				resp_plain(c, 431);
				continue;
			}
			/* edge-triggered: a short recv read all there was, and whatever comes
			 * after it is a new edge (its event clears drained): no recv to see
			 * EAGAIN. Not once the peer's end was seen (hup): its recv of 0 closes */
			if (c->drained && !c->hup)
				return;
			size_t want = IN_CAP - c->in_len;
			ssize_t n = recv(c->fd, c->in + c->in_len, want, 0);
			if (n > 0) {
				c->in_len += (size_t)n;
				c->drained = (size_t)n < want;
				continue;
			}
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				return;
			conn_close(c); /* the client closed, or an error */
			return;
		}
		c->req_len = (size_t)(e - c->in) + 4;
		if (parse_request(c)) {
			c->close_after = 1;
			c->head = 0;
			resp_plain(c, 400);
			continue;
		}
		c->head = !strcmp(c->method, "HEAD");
		c->close_after = !c->keep_alive;
		if (!c->head && strcmp(c->method, "GET")) {
			c->head = 0;
			c->close_after |= c->clen != 0; /* its body unread */
			resp_plain(c, 501);
			continue;
		}
		if (!c->head && !strcmp(c->target, "/__stats")) {
			serve_stats(c); /* at once, not counted */
			continue;
		}
		if (c->clen) { /* the body: what came with the head, then recv'd into it */
			size_t have = c->in_len - c->req_len;
			c->body = xmalloc((size_t)c->clen + 1);
			c->body_len = have < c->clen ? have : (size_t)c->clen;
			memcpy(c->body, c->in + c->req_len, c->body_len);
			c->req_len += c->body_len;
			c->state = C_BODY;
			continue;
		}
		c->state = C_WAIT;
		c->deadline = now_ns() + cfg.delay_ns;
		heap_push(c);
		return;
	}
}

static int lsock;

static void accept_all(void)
{
	for (;;) {
		int fd = accept4(lsock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
				return;
			if (errno == EMFILE || errno == ENFILE) {
				fprintf(stderr, "linkemu: accept: %s\n", strerror(errno));
				return;
			}
			die("accept: %s", strerror(errno));
		}
		st.connections++;
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (cfg.rate_bps) {
			uint64_t r = cfg.rate_bps;
			/* the kernel takes an unsigned long (64 bits here); bytes per second */
			if (setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &r, sizeof r))
				die("SO_MAX_PACING_RATE: %s", strerror(errno));
		}
		struct conn *c = xmalloc(sizeof *c);
		memset(c, 0, offsetof(struct conn, hdr));
		c->fd = fd;
		c->body_fd = -1;
		c->state = C_READ;
		struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
					 .data.ptr = c};
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev))
			die("epoll_ctl: %s", strerror(errno));
		conn_run(c);
	}
}

static int cmp_key(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"root", required_argument, 0, 'r'},
					     {"s3-keys", required_argument, 0, 'k'},
					     {"s3-object", required_argument, 0, 'o'},
					     {"s3-bucket", required_argument, 0, 'b'},
					     {"s3-prefix", required_argument, 0, 'p'},
					     {"port", required_argument, 0, 'P'},
					     {"delay-ms", required_argument, 0, 'd'},
					     {"rate-mb", required_argument, 0, 'R'},
					     {"port-file", required_argument, 0, 'f'},
					     {"etag", required_argument, 0, 'e'},
					     {"ais", no_argument, 0, 'a'},
					     {"ais-objects-port", required_argument, 0, 'O'},
					     {"help", no_argument, 0, 'h'},
					     {0, 0, 0, 0}};
	const char *root = NULL, *object = NULL, *port_file = NULL;
	double delay_ms = 30, rate_mb = 60;
	long port = 0;
	cfg.s3_n = -1;
	cfg.bucket = "bench";
	cfg.prefix = "";
	int ch;
	char *e;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'r':
			root = optarg;
			break;
		case 'k':
			cfg.s3_n = strtol(optarg, &e, 10);
			if (*e || cfg.s3_n < 0 || cfg.s3_n > S3_MAXN)
				die("--s3-keys %s: a number of keys from 0 to %d", optarg, S3_MAXN);
			break;
		case 'o':
			object = optarg;
			break;
		case 'b':
			cfg.bucket = optarg;
			break;
		case 'p':
			cfg.prefix = optarg;
			break;
		case 'P':
			port = strtol(optarg, &e, 10);
			if (*e || port < 0 || port > 65535)
				die("--port %s: a TCP port (0: any free one)", optarg);
			break;
		case 'd':
			delay_ms = strtod(optarg, &e);
			if (*e || !(delay_ms >= 0 && delay_ms < 1e7))
				die("--delay-ms %s: milliseconds, 0 or more", optarg);
			break;
		case 'R':
			rate_mb = strtod(optarg, &e);
			if (*e || !(rate_mb >= 0 && rate_mb < 1e7))
				die("--rate-mb %s: MB/s per connection, 0 for no cap", optarg);
			break;
		case 'f':
			port_file = optarg;
			break;
		case 'a':
			cfg.ais = 1;
			break;
		case 'O':
			cfg.objects_port = strtol(optarg, &e, 10);
			if (*e || cfg.objects_port < 1 || cfg.objects_port > 65535)
				die("--ais-objects-port %s: a TCP port", optarg);
			break;
		case 'e':
			if (strcmp(optarg, "nginx") && strcmp(optarg, "store"))
				die("--etag %s: nginx (\"MTIME-SIZE\", weak: what nginx sends) or "
				    "store "
				    "(an opaque strong token, as object stores send)",
				    optarg);
			cfg.etag_store = !strcmp(optarg, "store");
			break;
		default:
			fprintf(stderr, "usage: linkemu --root DIR | --s3-keys N --s3-object FILE "
					"[--s3-bucket B] [--s3-prefix P]\n"
					"       [--delay-ms 30] [--rate-mb 60] [--port 0] "
					"[--port-file F] [--etag nginx|store]\n"
					"       [--ais [--ais-objects-port P]]\n");
			return ch == 'h' ? 0 : 2;
		}
	}
	if (optind < argc)
		die("unexpected argument '%s' (see --help)", argv[optind]);
	if (!root == (cfg.s3_n < 0) || (cfg.s3_n >= 0 && !object))
		die("give either --root DIR, or --s3-keys N with --s3-object FILE");
	if (cfg.ais && !root)
		die("--ais serves the files of --root DIR");
	cfg.delay_ns = (uint64_t)(delay_ms * 1e6);
	cfg.rate_bps = (uint64_t)(rate_mb * 1e6);
	if (root) {
		cfg.root = realpath(root, NULL);
		if (!cfg.root)
			die("--root %s: %s", root, strerror(errno));
	} else {
		cfg.tmpl_fd = open(object, O_RDONLY | O_CLOEXEC);
		struct stat sb;
		if (cfg.tmpl_fd < 0 || fstat(cfg.tmpl_fd, &sb))
			die("--s3-object %s: %s", object, strerror(errno));
		cfg.tmpl_size = (uint64_t)sb.st_size;
		cfg.keys = xmalloc((size_t)(cfg.s3_n ? cfg.s3_n : 1) * sizeof *cfg.keys);
		for (long i = 0; i < cfg.s3_n; i++) {
			size_t n = strlen(cfg.prefix) + 32;
			cfg.keys[i] = xmalloc(n);
			snprintf(cfg.keys[i], n, "%sshard-%06ld.tar", cfg.prefix, i);
		}
		qsort(cfg.keys, (size_t)cfg.s3_n, sizeof *cfg.keys, cmp_key);
	}
	signal(SIGPIPE, SIG_IGN);

	lsock = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(lsock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(lsock, (struct sockaddr *)&sa, sizeof sa) || listen(lsock, 1024))
		die("listen on 127.0.0.1:%ld: %s", port, strerror(errno));
	socklen_t sl = sizeof sa;
	getsockname(lsock, (struct sockaddr *)&sa, &sl);
	port = ntohs(sa.sin_port);
	cfg.port = port;
	ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lsock, &lev))
		die("epoll: %s", strerror(errno));
	if (port_file) {
		char tmp[4096];
		snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
		FILE *f = fopen(tmp, "w");
		if (!f || fprintf(f, "%ld\n", port) < 0 || fclose(f) || rename(tmp, port_file))
			die("--port-file %s: %s", port_file, strerror(errno));
	}
	printf("port %ld\n", port);
	fflush(stdout);

	struct epoll_event evs[256];
	for (;;) {
		int timeout = -1;
		if (heap_len) {
			uint64_t t = now_ns(), d = heap[0]->deadline;
			timeout = d <= t ? 0 : (int)((d - t + 999999) / 1000000);
		}
		int n = epoll_wait(ep, evs, 256, timeout);
		if (n < 0 && errno != EINTR)
			die("epoll_wait: %s", strerror(errno));
		for (int i = 0; i < n; i++) {
			if (!evs[i].data.ptr) {
				accept_all();
			} else {
				struct conn *c = evs[i].data.ptr;
				c->drained = 0;
				if (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
					c->hup = 1;
				conn_run(c);
			}
		}
		uint64_t t = now_ns();
		while (heap_len && heap[0]->deadline <= t) {
			struct conn *c = heap_pop();
			respond(c);
			conn_run(c);
		}
	}
}
