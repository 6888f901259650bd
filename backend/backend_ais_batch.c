/*
 * backend_ais_batch.c — backend_batch_read for ais:// sources: AIStore's
 * GetBatch (its docs/get_batch.md; request and answer types apc.MossReq,
 * MossIn, MossOut in its api/apc/ml.go).
 *
 * The request: GET ENDPOINT/v1/ml/moss/BUCKET?provider=ais with the JSON
 * body {"mime":".tar","in":[{"objname":"PREFIX/KEY","start":OFF,
 * "length":LEN},...],"coer":true,"onob":true,"strm":true}: a TAR stream
 * (streaming, no metadata part), members named by object name only
 * (onob), a missing object a member "__404__/OBJNAME" of size 0 (coer:
 * continue on error). The proxy answers 307 to the designated target; the
 * I/O engine follows it with the same body (backend_req.body).
 *
 * The answer is parsed as it arrives by a minimal TAR header reader. It
 * lives here, not in shardidx/ (where shard parsing lives), because it is
 * the framing of one HTTP answer, not a shard: it reads only what
 * AIStore's writer (Go's archive/tar: USTAR, PAX when a name does not fit)
 * produces, and checks every header: its checksum, the name of the item
 * in its place (or __404__/ it), the size asked for. Anything else (a GNU
 * or global header, a bad checksum, a name out of order, a size other than
 * asked) is -EIO for that item, none of whose bytes were delivered, and
 * ends that answer. Bounds: a PAX header of at most BATCH_PAX_MAX bytes,
 * at most BATCH_TRAIL_MAX bytes after the last item.
 *
 * Rounds: one request asks for every item not answered yet. When an answer
 * ends before its last item (cut, bad header), the item it was in is -EIO
 * (bytes of it the sink got are to be dropped: GetBatch has no version
 * check, so a resume could mix versions) and the items after it are asked
 * for again in a new request. Every round answers at least one item (when
 * it answers none, its first is -EIO), so a batch of n items makes at most
 * n requests. An answer that fails before any byte (after the engine's
 * retries within its budget) fails every item still asked for. A first
 * request refused with 400, 404 or 405 (a store without GetBatch: an
 * AIStore before it, or a proxy that does not pass /v1/ml) is
 * -EOPNOTSUPP for the call and every item, as for stores other than ais://;
 * a 5xx is retried by the engine as any request's (its retry budget), then
 * -EIO.
 *
 * Rounds go one after the other from the I/O thread (round_done starts
 * the next): backend__ais_batch_submit returns at once and its done runs
 * on the I/O thread once every item's outcome is set, so a caller with
 * several requests in flight needs no thread each (a staged window's,
 * cachetier_batchm.c); backend__ais_batch_read waits for that done.
 *
 * Threads: backend_batch_read blocks its caller; the parser, the sink and
 * backend_batch_read_submit's done run on the I/O thread (the sink's
 * contract is backend_sink_cb's).
 */
#include <errno.h>
#include <inttypes.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_i.h"
#include "backend_io_i.h"

#define BATCH_PAX_MAX	(64 * 1024)
#define BATCH_TRAIL_MAX (64 * 1024)
#define BATCH_MISSING	"__404__/"
#define BATCH_EPROTO	(-EPROTO) /* the answer broke the format: ends it */

enum tstate { T_HDR, T_PAX, T_DATA, T_PAD, T_DONE };

struct batch {
	const struct backend_batch_item *items;
	size_t n;
	char **names; /* the object names: prefix + key */
	backend_batch_sink_cb cb;
	void *arg;
	int *err;
	int sink_err; /* the sink's errno: the batch stops */

	/* one round's parser, I/O thread */
	size_t cur;	 /* item of the next (or current) member */
	size_t answered; /* items answered in this round */
	int in_item;	 /* cur's header was read: its data is arriving */
	int broken;	 /* the answer broke the format at cur */
	uint64_t got;	 /* bytes of the answer seen */
	enum tstate st;
	unsigned char hdr[512];
	size_t hlen;
	char *pax; /* the PAX header's records */
	size_t paxlen, paxwant;
	char *paxpath; /* its "path", for the next member */
	uint64_t left; /* data bytes of the member (T_DATA) or padding (T_PAD) */
	uint64_t pad;
	uint64_t pos; /* object offset of cur's next byte */
	uint64_t trail;

	/* the read's rounds (round_start, round_done): its own memory */
	struct backend_objstore *os;
	char *url;
	char *body; /* the round's request body */
	struct backend_req req;
	int ret; /* the call's answer, once finished */
	backend_batch_done_cb done;
	void *darg;
};

static uint64_t octal(const unsigned char *p, size_t n, int *bad)
{
	uint64_t v = 0;
	size_t i = 0;

	while (i < n && p[i] == ' ')
		i++;
	for (; i < n && p[i] >= '0' && p[i] <= '7'; i++) {
		if (v >> 60)
			*bad = 1;
		v = v * 8 + (uint64_t)(p[i] - '0');
	}
	if (i < n && p[i] != '\0' && p[i] != ' ')
		*bad = 1; /* base-256 or garbage: never for sizes we ask */
	return v;
}

/* The PAX records "LEN path=VALUE\n": keep path; others are ignored. */
static int pax_parse(struct batch *b)
{
	size_t i = 0;

	while (i < b->paxlen) {
		size_t len = 0, j = i, klen;
		const char *kv, *eq;

		while (j < b->paxlen && b->pax[j] >= '0' && b->pax[j] <= '9' && len < BATCH_PAX_MAX)
			len = len * 10 + (size_t)(b->pax[j++] - '0');
		if (j >= b->paxlen || b->pax[j] != ' ' || len <= j - i + 1 || len > b->paxlen - i ||
		    b->pax[i + len - 1] != '\n')
			return BATCH_EPROTO;
		kv = b->pax + j + 1;
		klen = len - (j + 1 - i) - 1;
		eq = memchr(kv, '=', klen);
		if (!eq)
			return BATCH_EPROTO;
		if ((size_t)(eq - kv) == 4 && memcmp(kv, "path", 4) == 0) {
			free(b->paxpath);
			b->paxpath = strndup(eq + 1, klen - (size_t)(eq - kv) - 1);
			if (!b->paxpath)
				return -ENOMEM;
		}
		i += len;
	}
	return 0;
}

static int all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* A complete 512-byte header in b->hdr. */
static int header(struct batch *b)
{
	const unsigned char *h = b->hdr;
	uint64_t sum = 0, want, size;
	char name[256 + 156];
	const char *nm;
	const struct backend_batch_item *it;
	int bad = 0;

	if (all_zero(h, 512)) {
		b->st = T_DONE; /* the end of the archive */
		return 0;
	}
	for (size_t i = 0; i < 512; i++)
		sum += (i >= 148 && i < 156) ? ' ' : h[i];
	want = octal(h + 148, 8, &bad);
	size = octal(h + 124, 12, &bad);
	if (bad || sum != want || b->cur >= b->n)
		return BATCH_EPROTO;
	if (h[156] == 'x') {
		if (size > BATCH_PAX_MAX || b->pax)
			return BATCH_EPROTO;
		b->pax = malloc(size ? size : 1);
		if (!b->pax)
			return -ENOMEM;
		b->paxlen = 0;
		b->paxwant = size;
		b->pad = (512 - size % 512) % 512;
		b->st = T_PAX;
		return 0;
	}
	if (h[156] != '0' && h[156] != '\0')
		return BATCH_EPROTO;
	if (b->paxpath) {
		nm = b->paxpath;
	} else if (memcmp(h + 257, "ustar\0", 6) == 0 && h[345]) {
		snprintf(name, sizeof(name), "%.155s/%.100s", (const char *)h + 345,
			 (const char *)h);
		nm = name;
	} else {
		snprintf(name, sizeof(name), "%.100s", (const char *)h);
		nm = name;
	}
	it = &b->items[b->cur];
	if (strcmp(nm, b->names[b->cur]) == 0 && size == it->len) {
		b->in_item = 1;
		b->left = size;
		b->pos = it->off;
		b->pad = (512 - size % 512) % 512;
		b->st = T_DATA;
	} else if (size == 0 && strncmp(nm, BATCH_MISSING, strlen(BATCH_MISSING)) == 0 &&
		   strcmp(nm + strlen(BATCH_MISSING), b->names[b->cur]) == 0) {
		b->err[b->cur++] = -ENOENT;
		b->answered++;
		b->st = T_HDR;
	} else {
		return BATCH_EPROTO; /* out of order, or not the size asked */
	}
	free(b->paxpath);
	b->paxpath = NULL;
	free(b->pax);
	b->pax = NULL;
	return 0;
}

static void item_done(struct batch *b)
{
	b->err[b->cur++] = 0;
	b->answered++;
	b->in_item = 0;
	b->st = b->pad ? T_PAD : T_HDR;
	if (b->cur == b->n && b->st == T_HDR)
		b->st = T_DONE;
}

/* The engine's on_data: body bytes of the answer, in order (I/O thread). */
static int batch_data(void *arg, const void *buf, size_t len)
{
	struct batch *b = arg;
	const unsigned char *p = buf;
	int err;

	b->got += len;
	while (len) {
		size_t k;

		switch (b->st) {
		case T_HDR:
			k = 512 - b->hlen < len ? 512 - b->hlen : len;
			memcpy(b->hdr + b->hlen, p, k);
			b->hlen += k;
			if (b->hlen == 512) {
				b->hlen = 0;
				err = header(b);
				if (err < 0) {
					b->broken = 1;
					return err;
				}
				if (b->st == T_DATA && b->left == 0)
					item_done(b);
			}
			break;
		case T_PAX:
			k = b->paxwant - b->paxlen < len ? (size_t)(b->paxwant - b->paxlen) : len;
			memcpy(b->pax + b->paxlen, p, k);
			b->paxlen += k;
			if (b->paxlen == b->paxwant) {
				err = pax_parse(b);
				if (err < 0) {
					b->broken = 1;
					return err;
				}
				b->st = b->pad ? T_PAD : T_HDR;
			}
			break;
		case T_DATA:
			k = b->left < len ? (size_t)b->left : len;
			err = b->cb(b->arg, b->cur, b->pos, p, k);
			if (err < 0) {
				b->sink_err = err;
				return err;
			}
			b->pos += k;
			b->left -= k;
			if (b->left == 0)
				item_done(b);
			break;
		case T_PAD:
			k = b->pad < len ? (size_t)b->pad : len;
			b->pad -= k;
			if (b->pad == 0)
				b->st = b->cur == b->n ? T_DONE : T_HDR;
			break;
		default: /* T_DONE: end-of-archive blocks, bounded */
			k = len;
			b->trail += k;
			if (b->trail > BATCH_TRAIL_MAX)
				return BATCH_EPROTO;
			break;
		}
		p += k;
		len -= k;
	}
	return 0;
}

/* Append s as a JSON string (quotes included) to buf at *at. */
static int json_str(char *buf, size_t cap, size_t *at, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	if (*at + 1 >= cap)
		return -ENOMEM;
	buf[(*at)++] = '"';
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (*at + 7 >= cap)
			return -ENOMEM;
		if (c == '"' || c == '\\') {
			buf[(*at)++] = '\\';
			buf[(*at)++] = (char)c;
		} else if (c < 0x20) {
			memcpy(buf + *at, "\\u00", 4);
			buf[*at + 4] = hex[c >> 4];
			buf[*at + 5] = hex[c & 15];
			*at += 6;
		} else {
			buf[(*at)++] = (char)c;
		}
	}
	buf[(*at)++] = '"';
	return 0;
}

/* The JSON body asking for items [from, n). malloc'd into *out. */
static int batch_body(struct batch *b, size_t from, char **out, size_t *outlen)
{
	size_t cap = 128, at = 0;
	char *buf;
	int err = 0;

	for (size_t i = from; i < b->n; i++)
		cap += 6 * strlen(b->names[i]) + 80;
	buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	at = (size_t)snprintf(buf, cap, "{\"mime\":\".tar\",\"in\":[");
	for (size_t i = from; i < b->n && !err; i++) {
		at += (size_t)snprintf(buf + at, cap - at, "%s{\"objname\":", i > from ? "," : "");
		err = json_str(buf, cap, &at, b->names[i]);
		if (!err)
			at += (size_t)snprintf(buf + at, cap - at,
					       ",\"start\":%" PRIu64 ",\"length\":%" PRIu64 "}",
					       b->items[i].off, b->items[i].len);
	}
	if (!err && at + 64 < cap)
		at += (size_t)snprintf(buf + at, cap - at,
				       "],\"coer\":true,\"onob\":true,\"strm\":true}");
	else
		err = -ENOMEM;
	if (err) {
		free(buf);
		return err;
	}
	*out = buf;
	*outlen = at;
	return 0;
}

static void round_done(void *arg, struct backend_req *r, int err);

/* The next round: a request for items [b->cur, n), its answer to
 * batch_data and its end to round_done. 0 (submitted: round_done will
 * run, perhaps already ran), or -ENOMEM (nothing asked). */
static int round_start(struct batch *b)
{
	size_t blen;
	int err = batch_body(b, b->cur, &b->body, &blen);

	if (err < 0)
		return err;
	memset(&b->req, 0, sizeof(b->req));
	b->req.method = "GET";
	b->req.url = b->url;
	b->req.body = b->body;
	b->req.body_len = blen;
	/* GetBatch's own endpoint failing says nothing of the objects, which
	 * the cache tier then fetches with ranged GETs: never the store down */
	b->req.solo = 1;
	b->req.on_data = batch_data;
	b->req.on_done = round_done;
	b->req.arg = b;
	b->answered = 0;
	b->in_item = 0;
	b->broken = 0;
	b->got = 0;
	b->st = T_HDR;
	b->hlen = 0;
	b->trail = 0;
	backend_io_submit(b->os->io, &b->req);
	return 0;
}

/* A round's answer ended with the engine's errno err: the round's result,
 * negative when no byte of an answer came (or -ENOMEM), else 1. */
static int round_result(struct batch *b, const struct backend_req *r, int err)
{
	free(b->pax);
	b->pax = NULL;
	free(b->paxpath);
	b->paxpath = NULL;
	free(b->body);
	b->body = NULL;
	if (err == 0 && b->got == 0 && b->cur < b->n)
		err = -EIO; /* an empty answer */
	/* a store without GetBatch: no such endpoint (404: with coer a
	 * missing object is a member, never the answer's status), method or
	 * request (400, 405) */
	if (err < 0 && b->got == 0 && b->cur == 0 &&
	    (r->status == 400 || r->status == 404 || r->status == 405))
		err = -EOPNOTSUPP;
	return err < 0 && b->got == 0 ? err : (err == -ENOMEM ? err : 1);
}

/* After a round whose result is r: 1 when items are left to ask for, 0
 * when the call is over (every err[] set, b->ret its answer). */
static int round_next(struct batch *b, int r)
{
	size_t n = b->n;

	if (b->sink_err) {
		for (; b->cur < n; b->cur++)
			b->err[b->cur] = b->sink_err;
		b->ret = b->sink_err;
		return 0;
	}
	if (r < 0) { /* no byte of an answer: every item left fails */
		for (; b->cur < n; b->cur++)
			b->err[b->cur] = r;
		b->ret = r == -ENOMEM || r == -EOPNOTSUPP ? r : 0;
		return 0;
	}
	/* the answer ended before its last item: the item it was in (or,
	 * when it answered none, its first) is -EIO; the rest are asked for
	 * again */
	if (b->cur < n && (b->in_item || b->broken || b->answered == 0))
		b->err[b->cur++] = -EIO;
	return b->cur < n;
}

static void batch_free(struct batch *b)
{
	if (b->names)
		for (size_t i = 0; i < b->n; i++)
			free(b->names[i]);
	free(b->names);
	free(b->url);
	free(b);
}

/* Rounds from the one whose result is r on, until one is in flight (its
 * round_done goes on) or the call is over (done told, b freed). */
static void batch_step(struct batch *b, int r)
{
	backend_batch_done_cb done;
	void *darg;
	int ret;

	while (round_next(b, r)) {
		r = round_start(b);
		if (r == 0)
			return;
	}
	done = b->done;
	darg = b->darg;
	ret = b->ret;
	batch_free(b);
	done(darg, ret);
}

/* The engine's on_done of a round (I/O thread; or the submitting thread
 * when the engine refused it at once): the next round or the end. */
static void round_done(void *arg, struct backend_req *r, int err)
{
	struct batch *b = arg;

	batch_step(b, round_result(b, r, err));
}

int backend__ais_batch_submit(struct backend *be, const struct backend_batch_item *items, size_t n,
			      backend_batch_sink_cb cb, void *arg, int *err,
			      backend_batch_done_cb done, void *darg)
{
	struct backend_objstore *os = be->impl;
	struct batch *b;
	char benc[1024];
	size_t ulen;

	if (os->kind != OS_AIS)
		return -EOPNOTSUPP; /* (the object stores' op: AIStore's only) */
	if (backend__uri_encode(benc, sizeof(benc), os->bucket, strlen(os->bucket), 0) < 0)
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->os = os;
	b->items = items;
	b->n = n;
	b->cb = cb;
	b->arg = arg;
	b->err = err;
	b->done = done;
	b->darg = darg;
	b->names = calloc(n ? n : 1, sizeof(*b->names));
	ulen = strlen(os->ep.base) + strlen(benc) + 64;
	b->url = malloc(ulen);
	if (!b->names || !b->url) {
		batch_free(b);
		return -ENOMEM;
	}
	snprintf(b->url, ulen, "%s/v1/ml/moss/%s?provider=ais", os->ep.base, benc);
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(os->prefix) + strlen(items[i].key) + 1;

		err[i] = -EIO;
		b->names[i] = malloc(l);
		if (!b->names[i]) {
			batch_free(b);
			return -ENOMEM;
		}
		snprintf(b->names[i], l, "%s%s", os->prefix, items[i].key);
	}
	if (n == 0)
		batch_step(b, 1); /* nothing to ask: done now */
	else if (round_start(b) < 0)
		batch_step(b, -ENOMEM);
	return 0;
}

/* backend__ais_batch_read's wait for the submitted call's done. */
struct batch_wait {
	sem_t done;
	int ret;
};

static void batch_waited(void *arg, int ret)
{
	struct batch_wait *w = arg;

	w->ret = ret;
	sem_post(&w->done);
}

int backend__ais_batch_read(struct backend *be, const struct backend_batch_item *items, size_t n,
			    backend_batch_sink_cb cb, void *arg, int *err)
{
	struct batch_wait w;
	int ret;

	if (sem_init(&w.done, 0, 0) < 0)
		return -ENOMEM;
	ret = backend__ais_batch_submit(be, items, n, cb, arg, err, batch_waited, &w);
	if (ret == 0) {
		while (sem_wait(&w.done) < 0 && errno == EINTR)
			; /* the engine ends every round */
		ret = w.ret;
	}
	sem_destroy(&w.done);
	return ret;
}
