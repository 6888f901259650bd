/* linkemu_ais.c: the link emulator's AIS mode (linkemu --ais; linkemu.c is the server it runs
 * in, linkemu.h what the two share).
 *
 * What shardfs_test.s3servers.AisStandIn answers in root mode with no fault armed, for the
 * benches (its CPython costs a store's CPU on the client's cores): under /s3/BUCKET the
 * listing (ListObjectsV2, one page of at most 1000 keys: more is 501) and HEAD of the files
 * under --root, a HEAD as AIStore's proxy answers it (a 307 to the target, this server with
 * dt=t1, which answers it: two answers, each after the delay; counted head_redirects, then
 * s3_head); GET /v1/objects/BUCKET/KEY redirected (307) to /KEY on this server; GetBatch
 * (GET /v1/ml/moss/BUCKET?provider=ais, a JSON body) as AIStore documents it: the proxy's 307
 * to dt=t1, then the target's TAR stream (chunked, one member per entry in order, named
 * OBJNAME with onob else BUCKET/OBJNAME, USTAR headers byte for byte as AisStandIn's; a
 * missing object a member __404__/NAME of size 0 with coer, else 404; a range outside the
 * object 416, no data), the members' data by sendfile. Every answer waits --delay-ms, as any
 * other. Refused with 400 (counted moss_refused) as by AisStandIn: other formats, buffered
 * mode, entry fields other than objname, start, length; and here also a name that does not fit
 * a USTAR header (AisStandIn writes PAX). The fault knobs are AisStandIn's only. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>

#include <linux/sockios.h>

#include "linkemu.h"

/* AisStandIn's counters (GET /__stats with --ais) */
static struct {
	uint64_t moss_requests, moss_redirects, moss_items, moss_missing, moss_refused;
	uint64_t moss_ns, moss_inflight, moss_inflight_max, redirects, s3_head, s3_get;
	uint64_t s3_head_ns, unsupported, head_redirects;
} st;

/* A GetBatch answer ends when its last byte has left for the client, not when it was handed to
 * the kernel: the socket's buffer takes a whole answer of a few MB at once, and the pacing
 * (--rate-mb) sends it after. So an answer handed over with bytes still queued (SIOCOUTQ: not
 * sent or not acknowledged) is kept here as draining: its connection's bytes written up to its
 * end (conn.wrote then), looked at again when the queue, at the pacing rate, should have sent
 * it (at least 1 ms, at most DRAIN_LOOK_MAX_NS later), and ended at the first look that finds
 * the queue holds no byte of it, or when its connection closes. It counts in flight
 * (moss_inflight, moss_inflight_max) and in moss_ms until then. Observed, not estimated: an
 * answer whose client does not read stays in flight until it does, however long, so a test
 * can hold answers on the link and count them exactly (lib-linkemu-ais). (Counted at the
 * hand-over, every answer ended at once: at most 1 in flight for 8 at once, about 1 ms each
 * for 1.3 MB at 60 MB/s; estimated from the queue at the hand-over, the count depended on
 * when the emulator ran.) */
#define DRAIN_LOOK_MAX_NS 50000000u
struct drain {
	struct conn *c;
	uint64_t end;  /* c->wrote at the answer's end */
	uint64_t t0;   /* the answer's start */
	uint64_t next; /* the next look */
};
static struct drain *drains;
static size_t ndrain, drain_cap;

/* the next look at an answer with left bytes still queued before its end */
static uint64_t drain_next(uint64_t now, uint64_t left)
{
	uint64_t d = cfg.rate_bps ? left * 1000000000u / cfg.rate_bps : 0;
	if (d < 1000000u)
		d = 1000000u;
	if (d > DRAIN_LOOK_MAX_NS)
		d = DRAIN_LOOK_MAX_NS;
	return now + d;
}

static void drain_end(size_t i, uint64_t now)
{
	st.moss_ns += now - drains[i].t0;
	st.moss_inflight--;
	drains[i] = drains[--ndrain];
}

/* the bytes of c's queue at or before end, 0 when none (or the queue cannot be read) */
static uint64_t drain_left(struct conn *c, uint64_t end)
{
	int q = 0;
	if (ioctl(c->fd, SIOCOUTQ, &q) || q <= 0)
		return 0;
	uint64_t after = c->wrote - end; /* bytes of later answers on c, queued after it */
	return (uint64_t)q > after ? (uint64_t)q - after : 0;
}

uint64_t ais_next_look(void)
{
	uint64_t t = UINT64_MAX;
	for (size_t i = 0; i < ndrain; i++)
		if (drains[i].next < t)
			t = drains[i].next;
	return t;
}

void ais_look(uint64_t now)
{
	for (size_t i = 0; i < ndrain;) {
		struct drain *d = &drains[i];
		if (d->next > now) {
			i++;
			continue;
		}
		uint64_t left = drain_left(d->c, d->end);
		if (!left) {
			drain_end(i, now); /* the last one moved here: looked at next */
			continue;
		}
		d->next = drain_next(now, left);
		i++;
	}
}

/* the time of an answer that ends now: GetBatch's, a HEAD's */
static void answer_end(struct conn *c, uint64_t now)
{
	if (c->kind == K_MOSS) {
		st.moss_ns += now - c->t0;
		st.moss_inflight--;
	} else if (c->kind == K_HEAD) {
		st.s3_head_ns += now - c->t0;
	}
	c->kind = K_OTHER;
}

void ais_conn_close(struct conn *c)
{
	uint64_t now = now_ns();
	answer_end(c, now); /* cut, or handed over just before the close */
	for (size_t i = 0; i < ndrain;)
		if (drains[i].c == c)
			drain_end(i, now);
		else
			i++;
}

struct jp {
	const char *p, *e;
};

static void jp_ws(struct jp *j)
{
	while (j->p < j->e && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int jp_lit(struct jp *j, const char *lit)
{
	size_t n = strlen(lit);
	if ((size_t)(j->e - j->p) < n || memcmp(j->p, lit, n))
		return 0;
	j->p += n;
	return 1;
}

static void utf8_put(struct buf *b, uint32_t cp)
{
	char u[4];
	size_t n;
	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | cp >> 6);
		u[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | cp >> 12);
		u[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | cp >> 18);
		u[1] = (char)(0x80 | (cp >> 12 & 0x3f));
		u[2] = (char)(0x80 | (cp >> 6 & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	buf_add(b, u, n);
}

static int jp_hex4(struct jp *j, uint32_t *v)
{
	if (j->e - j->p < 4)
		return -1;
	*v = 0;
	for (int i = 0; i < 4; i++) {
		int h = hexval((unsigned char)j->p[i]);
		if (h < 0)
			return -1;
		*v = *v << 4 | (uint32_t)h;
	}
	j->p += 4;
	return 0;
}

/* a JSON string at j->p, decoded (UTF-8) into out when out is not NULL */
static int jp_str(struct jp *j, struct buf *out)
{
	if (j->p >= j->e || *j->p != '"')
		return -1;
	j->p++;
	while (j->p < j->e) {
		unsigned char ch = (unsigned char)*j->p++;
		if (ch == '"') {
			if (out)
				buf_add(out, "", 0); /* a string, even empty */
			return 0;
		}
		if (ch < 0x20)
			return -1;
		if (ch != '\\') {
			if (out)
				buf_add(out, (const char *)&ch, 1);
			continue;
		}
		if (j->p >= j->e)
			return -1;
		ch = (unsigned char)*j->p++;
		uint32_t cp;
		switch (ch) {
		case '"':
		case '\\':
		case '/':
			cp = ch;
			break;
		case 'b':
			cp = 8;
			break;
		case 'f':
			cp = 12;
			break;
		case 'n':
			cp = 10;
			break;
		case 'r':
			cp = 13;
			break;
		case 't':
			cp = 9;
			break;
		case 'u':
			if (jp_hex4(j, &cp))
				return -1;
			if (cp >= 0xd800 && cp < 0xdc00 && jp_lit(j, "\\u")) {
				uint32_t lo;
				if (jp_hex4(j, &lo) || lo < 0xdc00 || lo >= 0xe000)
					return -1;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			} else if (cp >= 0xd800 && cp < 0xe000) {
				return -1; /* a lone surrogate: no UTF-8 name */
			}
			break;
		default:
			return -1;
		}
		if (out)
			utf8_put(out, cp);
	}
	return -1;
}

/* a JSON number: *v and whether it is an integer (no fraction, no exponent, fits) */
static int jp_num(struct jp *j, int64_t *v, int *is_int)
{
	const char *s = j->p;
	if (j->p < j->e && *j->p == '-')
		j->p++;
	if (j->p >= j->e || !isdigit((unsigned char)*j->p))
		return -1;
	while (j->p < j->e && isdigit((unsigned char)*j->p))
		j->p++;
	*is_int = 1;
	if (j->p < j->e && *j->p == '.') {
		*is_int = 0;
		j->p++;
		while (j->p < j->e && isdigit((unsigned char)*j->p))
			j->p++;
	}
	if (j->p < j->e && (*j->p == 'e' || *j->p == 'E')) {
		*is_int = 0;
		j->p++;
		if (j->p < j->e && (*j->p == '+' || *j->p == '-'))
			j->p++;
		while (j->p < j->e && isdigit((unsigned char)*j->p))
			j->p++;
	}
	char tmp[32];
	size_t n = (size_t)(j->p - s);
	if (n >= sizeof tmp) {
		*is_int = 0;
		*v = 1;
		return 0;
	}
	memcpy(tmp, s, n);
	tmp[n] = 0;
	errno = 0;
	if (*is_int) {
		long long x = strtoll(tmp, NULL, 10);
		if (errno)
			*is_int = 0;
		*v = x;
	} else {
		*v = strtod(tmp, NULL) != 0;
	}
	return 0;
}

/* any JSON value (depth-bounded); *truthy: Python's bool() of it */
static int jp_value(struct jp *j, int depth, int *truthy)
{
	int t = 0;
	jp_ws(j);
	if (depth > 64 || j->p >= j->e)
		return -1;
	if (*j->p == '"') {
		const char *s = j->p;
		if (jp_str(j, NULL))
			return -1;
		t = j->p - s > 2;
	} else if (*j->p == '[' || *j->p == '{') {
		int obj = *j->p++ == '{';
		jp_ws(j);
		if (j->p < j->e && *j->p == (obj ? '}' : ']')) {
			j->p++;
		} else {
			t = 1;
			for (;;) {
				int x;
				if (obj) {
					jp_ws(j);
					if (jp_str(j, NULL))
						return -1;
					jp_ws(j);
					if (!jp_lit(j, ":"))
						return -1;
				}
				if (jp_value(j, depth + 1, &x))
					return -1;
				jp_ws(j);
				if (jp_lit(j, ","))
					continue;
				if (!jp_lit(j, obj ? "}" : "]"))
					return -1;
				break;
			}
		}
	} else if (jp_lit(j, "true")) {
		t = 1;
	} else if (jp_lit(j, "false") || jp_lit(j, "null")) {
		t = 0;
	} else {
		int64_t v;
		int is_int;
		if (jp_num(j, &v, &is_int))
			return -1;
		t = v != 0;
	}
	if (truthy)
		*truthy = t;
	return 0;
}

enum { E_OK, E_NOT_ENTRY, E_EXTRA, E_RANGE, E_NAME };

struct moss_in {
	struct buf name;
	int has_name;
	int64_t start, length;
	int bad;	 /* E_* */
	char extra[256]; /* E_EXTRA: the first field not implemented */
};

struct moss_req {
	struct moss_in *in;
	size_t n;
	int has_in; /* "in" is a list */
	int mime_ok, coer, onob, strm;
};

static void moss_req_free(struct moss_req *r)
{
	for (size_t i = 0; i < r->n; i++)
		free(r->in[i].name.p);
	free(r->in);
	r->in = NULL;
	r->n = 0;
}

/* one entry of "in" at j->p */
static int moss_entry(struct jp *j, struct moss_in *m)
{
	memset(m, 0, sizeof *m);
	jp_ws(j);
	if (j->p >= j->e || *j->p != '{') {
		m->bad = E_NOT_ENTRY;
		return jp_value(j, 1, NULL);
	}
	j->p++;
	jp_ws(j);
	int range_ok = 1;
	if (!jp_lit(j, "}")) {
		for (;;) {
			struct buf k = {0};
			jp_ws(j);
			if (jp_str(j, &k))
				return free(k.p), -1;
			jp_ws(j);
			if (!jp_lit(j, ":"))
				return free(k.p), -1;
			jp_ws(j);
			if (!strcmp(k.p, "objname")) {
				free(m->name.p);
				m->name = (struct buf){0};
				m->has_name = j->p < j->e && *j->p == '"';
				if (m->has_name ? jp_str(j, &m->name) : jp_value(j, 2, NULL))
					return free(k.p), -1;
			} else if (!strcmp(k.p, "start") || !strcmp(k.p, "length")) {
				int64_t v = 0;
				int is_int = 0;
				if (j->p < j->e &&
				    (*j->p == '-' || isdigit((unsigned char)*j->p))) {
					if (jp_num(j, &v, &is_int))
						return free(k.p), -1;
				} else if (jp_value(j, 2, NULL)) {
					return free(k.p), -1;
				}
				range_ok &= is_int;
				*(k.p[0] == 's' ? &m->start : &m->length) = v;
			} else {
				if (!m->extra[0])
					snprintf(m->extra, sizeof m->extra, "%s", k.p);
				if (jp_value(j, 2, NULL))
					return free(k.p), -1;
			}
			free(k.p);
			jp_ws(j);
			if (jp_lit(j, ","))
				continue;
			if (!jp_lit(j, "}"))
				return -1;
			break;
		}
	}
	if (!m->has_name)
		m->bad = E_NOT_ENTRY;
	else if (memchr(m->name.p, 0, m->name.len)) /* \u0000: no file's name */
		m->bad = E_NAME;
	else if (m->extra[0])
		m->bad = E_EXTRA;
	else if (!range_ok || m->start < 0 || m->length < -1 || (m->start && !m->length))
		m->bad = E_RANGE;
	return 0;
}

/* GetBatch's JSON body; -1: not JSON */
static int moss_parse(const char *body, size_t len, struct moss_req *r)
{
	struct jp j = {body, body + len};
	memset(r, 0, sizeof *r);
	r->mime_ok = 1;
	jp_ws(&j);
	if (j.p < j.e && *j.p != '{') { /* JSON, but no object: no "in" */
		if (jp_value(&j, 0, NULL))
			return -1;
		jp_ws(&j);
		return j.p == j.e ? 0 : -1;
	}
	if (!jp_lit(&j, "{"))
		return -1;
	jp_ws(&j);
	if (!jp_lit(&j, "}")) {
		for (;;) {
			struct buf k = {0};
			jp_ws(&j);
			if (jp_str(&j, &k))
				return free(k.p), -1;
			jp_ws(&j);
			if (!jp_lit(&j, ":"))
				return free(k.p), -1;
			jp_ws(&j);
			int err = 0, t;
			if (!strcmp(k.p, "in")) {
				moss_req_free(r);
				r->has_in = j.p < j.e && *j.p == '[';
				if (!r->has_in) {
					err = jp_value(&j, 1, NULL);
				} else {
					j.p++;
					jp_ws(&j);
					size_t cap = 0;
					if (!jp_lit(&j, "]")) {
						for (;;) {
							if (r->n == cap) {
								cap = cap ? 2 * cap : 16;
								r->in = realloc(
								    r->in, cap * sizeof *r->in);
								if (!r->in)
									die("out of memory");
							}
							err = moss_entry(&j, &r->in[r->n]);
							r->n++;
							jp_ws(&j);
							if (err || jp_lit(&j, "]"))
								break;
							if (!jp_lit(&j, ",")) {
								err = -1;
								break;
							}
						}
					}
				}
			} else if (!strcmp(k.p, "mime")) {
				struct buf m = {0};
				if (j.p < j.e && *j.p == '"') {
					err = jp_str(&j, &m);
					r->mime_ok =
					    !err && (!strcmp(m.p, "") || !strcmp(m.p, ".tar"));
				} else {
					err = jp_value(&j, 1, NULL);
					r->mime_ok = 0;
				}
				free(m.p);
			} else {
				err = jp_value(&j, 1, &t);
				if (!strcmp(k.p, "coer"))
					r->coer = t;
				else if (!strcmp(k.p, "onob"))
					r->onob = t;
				else if (!strcmp(k.p, "strm"))
					r->strm = t;
			}
			free(k.p);
			if (err)
				return -1;
			jp_ws(&j);
			if (jp_lit(&j, ","))
				continue;
			if (!jp_lit(&j, "}"))
				return -1;
			break;
		}
	}
	jp_ws(&j);
	return j.p == j.e ? 0 : -1;
}

/* a member's header as AisStandIn's moss_header (Python's tarfile, USTAR): -1 when the name
 * does not fit one (AisStandIn writes PAX then) or the size does not */
static int tar_header(const char *name, uint64_t size, unsigned char h[512])
{
	size_t nl = strlen(name), pl = 0;
	const char *nm = name;
	memset(h, 0, 512);
	if (nl > 100) { /* split at a '/': PREFIX (<= 155) and NAME (<= 100), the first that fits */
		const char *s = name;
		for (;;) {
			s = strchr(s, '/');
			if (!s)
				return -1;
			if ((size_t)(s - name) <= 155 && strlen(s + 1) <= 100)
				break;
			s++;
		}
		pl = (size_t)(s - name);
		nm = s + 1;
		nl = strlen(nm);
	}
	if (size >= (1ULL << 33))
		return -1;
	memcpy(h, nm, nl);
	memcpy(h + 100, "0000644", 8);
	memcpy(h + 108, "0000000", 8);
	memcpy(h + 116, "0000000", 8);
	snprintf((char *)h + 124, 12, "%011" PRIo64, size);
	memcpy(h + 136, "00000000000", 12);
	memset(h + 148, ' ', 8);
	h[156] = '0';
	memcpy(h + 257,
	       "ustar\0"
	       "00",
	       8);
	memcpy(h + 345, name, pl);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += h[i];
	char ck[8];
	snprintf(ck, sizeof ck, "%06o", sum);
	memcpy(h + 148, ck, 7); /* 6 digits and a NUL; the 8th stays a space */
	return 0;
}

static void json_message(struct conn *c, int code, const char *msg)
{
	struct buf b = {0};
	buf_str(&b, "{\"message\": ");
	buf_json_str(&b, msg);
	buf_str(&b, "}");
	resp_mem(c, code, "Content-Type: application/json\r\n", b.p, b.len);
}

static void moss_refuse(struct conn *c, const char *why)
{
	st.moss_refused++;
	json_message(c, 400, why);
}

/* the value of key in a query string (raw), or NULL */
static const char *query_raw(const char *qs, const char *key, size_t *n)
{
	size_t kl = strlen(key);
	while (qs && *qs) {
		const char *amp = strchr(qs, '&');
		size_t l = amp ? (size_t)(amp - qs) : strlen(qs);
		if (l >= kl && !memcmp(qs, key, kl) && (l == kl || qs[kl] == '=')) {
			*n = l > kl ? l - kl - 1 : 0;
			return l > kl ? qs + kl + 1 : qs + l;
		}
		qs = amp ? amp + 1 : NULL;
	}
	return NULL;
}

/* provider absent or "ais" */
static int provider_ais(const char *qs)
{
	size_t n;
	const char *v = query_raw(qs, "provider", &n);
	return !v || (n == 3 && !memcmp(v, "ais", 3));
}

/* (status, path, start, length) of one entry's bytes under the root: 404 missing, 416 out of
 * range (AisStandIn's moss_local) */
static int moss_local(const struct moss_in *m, char *path, size_t cap, uint64_t *start,
		      uint64_t *len)
{
	struct stat sb;
	if (m->name.p[0] == '/' || resolve(m->name.p, path, cap) ||
	    strlen(path) <= strlen(cfg.root) || stat(path, &sb) || !S_ISREG(sb.st_mode))
		return 404;
	uint64_t size = (uint64_t)sb.st_size, s = (uint64_t)m->start;
	uint64_t end = m->length <= 0 ? size : s + (uint64_t)m->length;
	if (s > size || end > size)
		return 416;
	*start = s;
	*len = end - s;
	return 200;
}

static void moss_answer(struct conn *c, const char *bucket)
{
	struct moss_req r;
	if (moss_parse(c->body ? c->body : "", c->body_len, &r)) {
		moss_req_free(&r);
		moss_refuse(c, "GetBatch: the request body is not JSON");
		return;
	}
	const char *why = NULL;
	if (!r.has_in || !r.n)
		why = "GetBatch: \"in\" must list at least one entry";
	else if (!r.mime_ok)
		why = "GetBatch: only \"mime\": \".tar\" is implemented by the stand-in";
	else if (!r.strm)
		why = "GetBatch: only streaming (\"strm\": true) is implemented by the stand-in";
	char msg[512];
	for (size_t i = 0; !why && i < r.n; i++) {
		const struct moss_in *m = &r.in[i];
		if (m->bad == E_NOT_ENTRY) {
			why = "GetBatch: an entry without \"objname\"";
		} else if (m->bad == E_NAME) {
			why = "GetBatch: an \"objname\" with a NUL";
		} else if (m->bad == E_EXTRA) {
			snprintf(msg, sizeof msg,
				 "GetBatch: the stand-in does not implement ['%s']", m->extra);
			why = msg;
		} else if (m->bad == E_RANGE) {
			snprintf(msg, sizeof msg,
				 "GetBatch: bad range start=%" PRId64 " length=%" PRId64, m->start,
				 m->length);
			why = msg;
		}
	}
	if (why) {
		moss_req_free(&r);
		moss_refuse(c, why);
		return;
	}
	struct buf mem = {0};
	struct part *parts = xmalloc((r.n + 1) * sizeof *parts);
	size_t np = 0;
	uint64_t prev_pad = 0, prev_off = 0, prev_len = 0, missing = 0;
	char *prev_path = NULL; /* the member before's file range: the next part's */
	for (size_t i = 0; i < r.n; i++) {
		const struct moss_in *m = &r.in[i];
		struct buf name = {0};
		if (!r.onob) {
			buf_str(&name, bucket);
			buf_str(&name, "/");
		}
		buf_str(&name, m->name.p);
		char path[8192];
		uint64_t start = 0, n = 0;
		int code = moss_local(m, path, sizeof path, &start, &n);
		if (code == 404 && r.coer) {
			struct buf miss = {0};
			buf_str(&miss, "__404__/");
			buf_str(&miss, name.p);
			free(name.p);
			name = miss;
			missing++;
			code = 200;
			n = 0;
		}
		unsigned char h[512];
		if (code == 200 && tar_header(name.p, n, h)) {
			snprintf(
			    msg, sizeof msg,
			    "GetBatch: %s: a name or size the C stand-in cannot write in USTAR",
			    m->name.p);
			code = 0;
		} else if (code != 200) {
			snprintf(msg, sizeof msg, "GetBatch: %s: status %d", m->name.p, code);
		}
		free(name.p);
		if (code != 200) {
			for (size_t k = 0; k < np; k++)
				free(parts[k].path);
			free(prev_path);
			free(parts);
			free(mem.p);
			moss_req_free(&r);
			if (code)
				json_message(c, code, msg);
			else
				moss_refuse(c, msg);
			return;
		}
		/* part i: the member before's data, its padding and the chunk's end, then this
		 * member's chunk head and header */
		struct part *p = &parts[np++];
		p->path = prev_path;
		p->off = prev_off;
		p->len = prev_len;
		p->mem_off = mem.len;
		if (i) {
			buf_add(&mem, zeros, (size_t)prev_pad);
			buf_str(&mem, "\r\n");
		}
		uint64_t pad = (512 - n % 512) % 512;
		buf_fmt(&mem, "%" PRIx64 "\r\n", 512 + n + pad);
		buf_add(&mem, (const char *)h, 512);
		p->mem_len = mem.len - p->mem_off;
		prev_path = n ? strdup(path) : NULL;
		if (n && !prev_path)
			die("out of memory");
		prev_off = start;
		prev_len = n;
		prev_pad = pad;
	}
	struct part *p = &parts[np++]; /* the last member's data, then the end of the TAR */
	p->path = prev_path;
	p->off = prev_off;
	p->len = prev_len;
	p->mem_off = mem.len;
	buf_add(&mem, zeros, (size_t)prev_pad);
	buf_str(&mem, "\r\n400\r\n");
	buf_add(&mem, zeros, 1024);
	buf_str(&mem, "\r\n0\r\n\r\n");
	p->mem_len = mem.len - p->mem_off;
	st.moss_items += r.n;
	st.moss_missing += missing;
	moss_req_free(&r);
	resp_head(c, 200, "Content-Type: application/x-tar\r\n", CHUNKED);
	c->parts = parts;
	c->nparts = np;
	c->part_i = 0;
	c->moss_mem = mem.p;
}

struct keys {
	char **k;
	size_t n, cap;
};

/* the files under dir (relative to the root: rel), recursively, as os.walk finds them */
static void walk(const char *dir, const char *rel, const char *prefix, struct keys *ks)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char path[8192], key[8192];
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		snprintf(key, sizeof key, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
		struct stat sb, lsb;
		if (stat(path, &sb))
			continue;
		if (S_ISDIR(sb.st_mode)) {
			/* os.walk lists a link to a directory as a directory and does not follow it
			 */
			if (!lstat(path, &lsb) && !S_ISLNK(lsb.st_mode))
				walk(path, key, prefix, ks);
			continue;
		}
		if (strncmp(key, prefix, strlen(prefix)))
			continue;
		if (ks->n == ks->cap) {
			ks->cap = ks->cap ? 2 * ks->cap : 64;
			ks->k = realloc(ks->k, ks->cap * sizeof *ks->k);
			if (!ks->k)
				die("out of memory");
		}
		ks->k[ks->n] = strdup(key);
		if (!ks->k[ks->n])
			die("out of memory");
		ks->n++;
	}
	closedir(d);
}

/* ListObjectsV2 of the root, one page (AisStandIn's local_s3) */
static void ais_listing(struct conn *c, const char *bucket, const char *qs)
{
	struct query q;
	if (parse_query(qs, &q)) {
		resp_plain(c, 400);
		return;
	}
	const char *prefix = q.prefix ? q.prefix : "";
	struct keys ks = {0};
	walk(cfg.root, "", prefix, &ks);
	if (ks.n)
		qsort(ks.k, ks.n, sizeof *ks.k, name_cmp);
	struct buf b = {0};
	if (ks.n > 1000) {
		buf_str(&b,
			"<Error><Code>NotImplemented</Code><Message>more than 1000 keys in root "
			"mode</Message></Error>");
		resp_mem(c, 501, "Content-Type: application/xml\r\n", b.p, b.len);
	} else {
		buf_str(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult "
			    "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>");
		buf_xml(&b, bucket, 0);
		buf_str(&b, "</Name><Prefix>");
		buf_xml(&b, prefix, 0);
		buf_fmt(&b,
			"</Prefix><KeyCount>%zu</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false"
			"</IsTruncated>",
			ks.n);
		for (size_t i = 0; i < ks.n; i++) {
			char path[8192], etag[64], when[64];
			struct stat sb;
			snprintf(path, sizeof path, "%s/%s", cfg.root, ks.k[i]);
			if (stat(path, &sb))
				memset(&sb, 0, sizeof sb);
			file_etag(&sb, etag);
			struct tm tm;
			time_t t = sb.st_mtime;
			gmtime_r(&t, &tm);
			strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S.000Z", &tm);
			buf_str(&b, "<Contents><Key>");
			buf_xml(&b, ks.k[i], 0);
			buf_fmt(&b, "</Key><LastModified>%s</LastModified><ETag>", when);
			buf_xml(&b, etag, 1);
			buf_fmt(&b,
				"</ETag><Size>%lld</Size><StorageClass>STANDARD</StorageClass>"
				"</Contents>",
				(long long)sb.st_size);
		}
		buf_str(&b, "</ListBucketResult>");
		resp_mem(c, 200, "Content-Type: application/xml\r\n", b.p, b.len);
	}
	for (size_t i = 0; i < ks.n; i++)
		free(ks.k[i]);
	free(ks.k);
	query_free(&q);
}

int serve_ais(struct conn *c, const char *path, const char *qs, const char *raw)
{
	if (!strncmp(path, "/s3/", 4)) {
		char bucket[1024];
		const char *b = path + 4, *sl = strchr(b, '/');
		snprintf(bucket, sizeof bucket, "%.*s", (int)(sl ? sl - b : (long)strlen(b)), b);
		if (!c->head) {
			st.s3_get++;
			ais_listing(c, bucket, qs);
			return 1;
		}
		size_t dn;
		if (sl && sl[1] && !query_raw(qs, "dt", &dn)) {
			/* the proxy: AIStore's S3 HEAD of an object is a 307 to the target that
			 * holds it (ais/prxs3.go headObjS3, by default), which answers it */
			st.head_redirects++;
			char loc[8192 + 128];
			snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%ld%s?%s%sdt=t1\r\n",
				 cfg.port, raw, qs ? qs : "", qs && *qs ? "&" : "");
			resp_head(c, 307, loc, 0);
			return 1;
		}
		st.s3_head++;
		c->kind = K_HEAD;
		c->t0 = now_ns();
		char fpath[8192];
		struct stat sb;
		const char *key = sl ? sl + 1 : "";
		if (key[0] == '/' || resolve(key, fpath, sizeof fpath) ||
		    strlen(fpath) <= strlen(cfg.root) || stat(fpath, &sb) || !S_ISREG(sb.st_mode)) {
			resp_plain(c, 404);
			return 1;
		}
		char etag[64], when[64], extra[256];
		file_etag(&sb, etag);
		http_date(sb.st_mtime, when);
		snprintf(extra, sizeof extra, "ETag: %s\r\nLast-Modified: %s\r\n", etag, when);
		resp_head(c, 200, extra, (uint64_t)sb.st_size);
		return 1;
	}
	if (strncmp(path, "/v1/", 4))
		return 0;
	if (!strncmp(path, "/v1/objects/", 12) && !c->head) {
		if (!provider_ais(qs)) {
			json_message(c, 400, "only provider=ais here");
			return 1;
		}
		st.redirects++;
		/* the object's path on this server: the raw path after /v1/objects/BUCKET/ */
		const char *k = strchr(raw + 12, '/');
		char loc[8192 + 128];
		snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%ld/%s\r\n",
			 cfg.objects_port ? cfg.objects_port : cfg.port, k ? k + 1 : "");
		resp_head(c, 307, loc, 0);
		return 1;
	}
	if (!strncmp(path, "/v1/ml/moss/", 12) && !c->head) {
		const char *bucket = path + 12;
		size_t n;
		if (!provider_ais(qs) || !*bucket || strchr(bucket, '/')) {
			moss_refuse(c, "only /v1/ml/moss/BUCKET?provider=ais here");
			return 1;
		}
		if (!query_raw(qs, "dt", &n)) {
			/* the proxy: phase 2 of AIStore's GetBatch redirects the GET to the
			 * designated target, which reads the same JSON body again */
			st.moss_redirects++;
			char loc[8192 + 128];
			snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%ld%s?%s&dt=t1\r\n",
				 cfg.port, raw, qs ? qs : "");
			resp_head(c, 307, loc, 0);
			return 1;
		}
		st.moss_requests++;
		c->kind = K_MOSS;
		c->t0 = now_ns();
		st.moss_inflight++; /* ended by ais_answer_done or, draining, ais_look */
		if (st.moss_inflight > st.moss_inflight_max)
			st.moss_inflight_max = st.moss_inflight;
		moss_answer(c, bucket);
		return 1;
	}
	st.unsupported++;
	json_message(c, 400, "not implemented by the AIS stand-in");
	return 1;
}

void ais_answer_done(struct conn *c)
{
	uint64_t now = now_ns(), left = c->kind == K_MOSS ? drain_left(c, c->wrote) : 0;
	if (left) { /* handed over, bytes of it still queued: draining */
		if (ndrain == drain_cap) {
			drain_cap = drain_cap ? 2 * drain_cap : 16;
			drains = realloc(drains, drain_cap * sizeof *drains);
			if (!drains)
				die("out of memory");
		}
		drains[ndrain++] = (struct drain){
		    .c = c, .end = c->wrote, .t0 = c->t0, .next = drain_next(now, left)};
		c->kind = K_OTHER;
		return;
	}
	answer_end(c, now);
}

void ais_stats(struct buf *b)
{
	buf_fmt(b,
		", \"moss_requests\": %" PRIu64 ", \"moss_redirects\": %" PRIu64
		", \"moss_items\": %" PRIu64 ", \"moss_missing\": %" PRIu64
		", \"moss_refused\": %" PRIu64 ", \"moss_ms\": %" PRIu64
		", \"moss_inflight\": %" PRIu64 ", \"moss_draining\": %zu"
		", \"moss_inflight_max\": %" PRIu64 ", \"redirects\": %" PRIu64
		", \"s3_head\": %" PRIu64 ", \"s3_get\": %" PRIu64 ", \"s3_head_ms\": %.3f"
		", \"unsupported\": %" PRIu64 ", \"head_redirects\": %" PRIu64,
		st.moss_requests, st.moss_redirects, st.moss_items, st.moss_missing,
		st.moss_refused, st.moss_ns / 1000000, st.moss_inflight, ndrain,
		st.moss_inflight_max, st.redirects, st.s3_head, st.s3_get,
		(double)st.s3_head_ns / 1e6, st.unsupported, st.head_redirects);
}
