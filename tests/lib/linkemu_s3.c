/* linkemu_s3.c: the link emulator's listings (linkemu.c has the server): root mode's JSON
 * autoindex of a directory, and S3 mode (a bucket of generated keys: ListObjectsV2, HEAD and
 * ranged GET, S3's XML errors). One thread: nothing here is locked. */
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

#define LAST_MOD "Thu, 01 Jan 2026 00:00:00 GMT" /* every key's mtime in S3 mode */

void serve_listing(struct conn *c, const char *path)
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
		counts.list_bytes += errlen;
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
	counts.list_bytes += b.len;
	resp_mem(c, 200, "Content-Type: application/xml\r\n", b.p, b.len);
}

char zeros[4096];

void serve_s3(struct conn *c, const char *path, const char *qs)
{
	const char *p = path;
	while (*p == '/')
		p++;
	const char *slash = strchr(p, '/');
	size_t bl = slash ? (size_t)(slash - p) : strlen(p);
	const char *key = slash ? slash + 1 : "";
	if (bl != strlen(cfg.bucket) || memcmp(p, cfg.bucket, bl)) {
		counts.other++;
		char name[1024];
		snprintf(name, sizeof name, "%.*s", (int)bl, p);
		s3_error(c, 404, "NoSuchBucket", name);
		return;
	}
	if (!*key) {
		if (c->head) {
			counts.other++;
			s3_error(c, 405, "MethodNotAllowed", "HEAD");
			return;
		}
		counts.list_requests++;
		s3_listing(c, qs);
		return;
	}
	if (c->head)
		counts.heads++;
	else
		counts.gets++;
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
