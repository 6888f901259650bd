/*
 * backend_s3.c — object stores that speak the S3 API: s3:// (AWS S3 and
 * S3-compatible servers), gs:// (Google Cloud Storage's XML API, which is
 * S3-compatible for these calls), and the shared core of ais:// (see
 * backend_ais.c for what AIStore uses of it).
 *
 * Requests, all through the I/O engine (backend_io_i.h):
 *   list  GET  BUCKET?list-type=2&max-keys=1000&prefix=P[&continuation-token=T]
 *              (ListObjectsV2, paginated; bounded page size and page count)
 *   stat  HEAD BUCKET/KEY
 *   pread GET  BUCKET/KEY with Range: bytes=A-B (never a suffix range)
 * Addressing: AWS endpoints use virtual-hosted style
 * (https://BUCKET.s3.REGION.amazonaws.com/KEY) unless the bucket has a dot
 * (TLS wildcard certificates do not cover it); any other endpoint
 * (--endpoint, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, GCS) path style
 * (ENDPOINT/BUCKET/KEY). Keys are URI-encoded once per segment; the path
 * and query that are signed are byte for byte the ones sent.
 *
 * Authentication: SigV4 with UNSIGNED-PAYLOAD (every request is a
 * body-less GET or HEAD), re-signed by the engine's sign callback on every
 * attempt (fresh x-amz-date); the engine never runs it for a redirect to
 * another origin, so neither Authorization nor the session token can leak
 * there. GCS: SigV4 with HMAC keys (region "auto"), or an OAuth token as
 * "Authorization: Bearer". --no-sign: no authentication at all.
 *
 * Errors: 401/403 are -EACCES at once (the engine never retries them), so a
 * wrong secret fails the mount's listing in one round trip. The engine
 * keeps the first bytes of every error answer with its request; the
 * <Error> Code and Message say *why* (SignatureDoesNotMatch,
 * InvalidAccessKeyId, AccessDenied, a wrong region) in the calling
 * thread's backend_last_error, for listings, HEADs and GETs alike.
 * Credentials never appear in be->desc or in that text.
 * Header lines with a token are built on the stack and cleansed; curl's
 * copies of them are zeroed when freed (backend__creds_curl_init).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <openssl/crypto.h>

#include "backend_i.h"
#include "disk.h"
#include "backend_io_i.h"

/* A ListObjectsV2 page of 1000 keys of at most 1024 bytes is ~1.5 MB. */
#define OS_LIST_PAGE_MAX (32u << 20)
/* 100,000 pages of 1000: far more objects than one mount can hold. */
#define OS_LIST_MAX_PAGES 100000
/*
 * Endless listings: a broken or hostile store may answer
 * IsTruncated=true forever. Besides the page cap above, a listing fails
 *  - when a continuation token comes back that was seen before (a loop;
 *    tokens are remembered as 64-bit hashes, 8 bytes a page),
 *  - after OS_LIST_EMPTY_MAX truncated pages in a row without a key (a
 *    store makes progress; AWS may send an empty page now and then),
 *  - after OS_LIST_ENTRIES_MAX keys in all (as the http(s) listing).
 */
#define OS_LIST_EMPTY_MAX   1000
#define OS_LIST_ENTRIES_MAX 10000000ul
#define OS_PATH_MAX	    8192

/* ---- requests --------------------------------------------------------- */

/* What the sign callback needs besides the engine's request. */
struct os_call {
	struct backend_req req;
	struct backend_objstore *os;
	const char *path;  /* as sent, encoded */
	const char *query; /* canonical, or "" */
};

static int slist_add(struct curl_slist **h, const char *line)
{
	struct curl_slist *l = curl_slist_append(*h, line);

	if (!l)
		return -ENOMEM;
	*h = l;
	return 0;
}

struct sign_args {
	struct backend_objstore *os;
	const char *method, *path, *query;
	struct curl_slist **h;
};

/* Headers for one attempt with credentials c (under the source's lock). */
static int os_sign_with(void *arg, const struct backend_creds *c)
{
	struct sign_args *a = arg;
	struct backend_objstore *os = a->os;
	struct backend_sigv4_req rq = {0};
	struct backend_sigv4_out out;
	char line[BACKEND_SIGV4_AUTH_MAX + 64];
	int err;

	if (os->auth == OS_AUTH_BEARER) {
		int n = c->bearer
			    ? snprintf(line, sizeof(line), "Authorization: Bearer %s", c->bearer)
			    : -1;

		err = (n < 0 || (size_t)n >= sizeof(line)) ? -ENAMETOOLONG : slist_add(a->h, line);
		OPENSSL_cleanse(line, sizeof(line));
		backend__creds_regs_clear();
		return err;
	}
	rq.method = a->method;
	rq.host = os->ep.host;
	rq.path = a->path;
	rq.query = a->query;
	rq.payload_hash = NULL; /* UNSIGNED-PAYLOAD */
	rq.content_sha256 = 1;
	rq.now = time(NULL);
	rq.region = os->region;
	rq.service = "s3";
	err = backend__sigv4_sign(&rq, c, &out);
	if (err < 0)
		return err;
	snprintf(line, sizeof(line), "x-amz-date: %s", out.amz_date);
	err = slist_add(a->h, line);
	if (!err) {
		snprintf(line, sizeof(line), "x-amz-content-sha256: %s", out.payload_hash);
		err = slist_add(a->h, line);
	}
	if (!err && c->session_token && c->session_token[0]) {
		int n = snprintf(line, sizeof(line), "x-amz-security-token: %s", c->session_token);

		err = (n < 0 || (size_t)n >= sizeof(line)) ? -ENAMETOOLONG : slist_add(a->h, line);
		OPENSSL_cleanse(line, sizeof(line));
		backend__creds_regs_clear();
	}
	if (!err) {
		snprintf(line, sizeof(line), "Authorization: %s", out.authorization);
		err = slist_add(a->h, line);
	}
	return err;
}

/* Headers for one attempt, signed with the credentials current now (a
 * refresh swaps them between attempts, never during one). Runs on the I/O
 * thread; never blocks
 * but for the source's lock, which nothing holds across I/O. -EACCES once
 * the credentials have expired without a refresh. */
static int os_sign_headers(struct backend_objstore *os, const char *method, const char *path,
			   const char *query, struct curl_slist **h)
{
	struct sign_args a = {os, method, path, query, h};

	if (os->auth == OS_AUTH_NONE || !os->creds)
		return 0;
	return backend__credsrc_use(os->creds, os_sign_with, &a);
}

static int os_sign_cb(void *arg, struct backend_req *r, struct curl_slist **headers)
{
	struct os_call *c = arg;

	return os_sign_headers(c->os, r->method, c->path, c->query, headers);
}

/* Set up c for METHOD of base + path [? query]. Returns 0 or -errno. */
static int os_call_init(struct os_call *c, struct backend_objstore *os, const char *method,
			const char *path, const char *query)
{
	size_t n = strlen(os->ep.base) - strlen(os->ep.path) + strlen(path) + 2 +
		   (query ? strlen(query) : 0);
	char *url = malloc(n);

	memset(c, 0, sizeof(*c));
	if (!url)
		return -ENOMEM;
	/* ep.base ends with ep.path; path already starts with it */
	snprintf(url, n, "%.*s%s%s%s", (int)(strlen(os->ep.base) - strlen(os->ep.path)),
		 os->ep.base, path, query && *query ? "?" : "", query ? query : "");
	c->os = os;
	c->path = path;
	c->query = query ? query : "";
	c->req.method = method;
	c->req.url = url;
	c->req.sign = os_sign_cb;
	c->req.sign_arg = c;
	return 0;
}

static void os_call_free(struct os_call *c)
{
	free(c->req.url);
	c->req.url = NULL;
}

/* Encoded request path of an object: PREFIX_PATH + encode(prefix + key). */
static int os_object_path(struct backend_objstore *os, const char *pfx, const char *key, char *buf,
			  size_t cap)
{
	size_t pl = strlen(pfx), kl = strlen(os->prefix), l = strlen(key);
	char *raw;
	ssize_t n;

	if (pl >= cap)
		return -ENAMETOOLONG;
	raw = malloc(kl + l + 1);
	if (!raw)
		return -ENOMEM;
	memcpy(raw, os->prefix, kl);
	memcpy(raw + kl, key, l + 1);
	memcpy(buf, pfx, pl);
	n = backend__uri_encode(buf + pl, cap - pl, raw, kl + l, 1);
	free(raw);
	return n < 0 ? (int)n : 0;
}

/* ---- operations --------------------------------------------------------- */

/* Record why a request of be failed: refused before it was sent (-EACCES,
 * status 0: the credentials expired and no refresh has worked yet), or the
 * store's answer (backend__req_failed). */
static void os_failed(struct backend *be, const char *method, const char *key,
		      const struct backend_req *r, int err)
{
	struct backend_objstore *os = be->impl;

	if (backend__s3_region_failed(be, method, key, r, os->region))
		return; /* the store named the bucket's region: said so */
	if (err == -EACCES && r->status == 0 && !r->error[0] && os->creds)
		backend__set_error(be,
				   "%s: %s %s: the credentials from %s have expired and could "
				   "not be refreshed yet",
				   be->desc, method, key, backend__credsrc_name(os->creds));
	else
		backend__req_failed(be, method, key, r, err);
}

struct list_state {
	struct backend *be;
	backend_list_cb cb;
	void *arg;
	size_t plen;
	size_t hidden;
	size_t entries; /* keys received, shown or not */
	/* keys that cannot be paths (a//b, ../x, /x, .): never shown, and said
	 * once when the listing ends (a user would see them missing with no
	 * word); the first, escaped, for that line */
	size_t unpathed;
	char first_unpathed[160];
	/* entries the parser skipped (backend_xml.c), said the same way: keys
	 * longer than BACKEND_S3_KEY_MAX (the first's start), and the others
	 * (no key, an undecodable one, no size that is a number) */
	size_t toolong, unread;
	char first_toolong[160];
};

/* s[0..n) into out (cap >= 8) as a line of the log can hold it: bytes
 * below 0x20, 0x7f and '\\' as \xHH, cut with "..." when it does not fit. */
static void key_shown(const char *s, size_t n, char *out, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		int esc = c < 0x20 || c == 0x7f || c == '\\';

		if (o + (esc ? 4 : 1) + 4 > cap) {
			memcpy(out + o, "...", 3);
			o += 3;
			break;
		}
		if (esc)
			o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
		else
			out[o++] = (char)c;
	}
	out[o] = '\0';
}

static int list_entry(void *arg, const struct backend_s3_entry *e)
{
	struct list_state *ls = arg;
	struct backend_objstore *os = ls->be->impl;
	struct backend_objinfo info;
	const char *rel;

	if (++ls->entries > OS_LIST_ENTRIES_MAX)
		return -EFBIG;
	if (e->keylen <= ls->plen || memcmp(e->key, os->prefix, ls->plen) != 0) {
		ls->hidden++; /* outside the prefix: a server bug, never shown */
		return 0;
	}
	rel = e->key + ls->plen;
	/* "dir/" markers and keys that cannot be paths (a//b, ../x) are not objects */
	if (rel[strlen(rel) - 1] == '/') {
		ls->hidden++;
		return 0;
	}
	if (backend__key_check(rel) < 0) {
		if (!ls->unpathed++)
			key_shown(rel, strlen(rel), ls->first_unpathed, sizeof(ls->first_unpathed));
		return 0;
	}
	memset(&info, 0, sizeof(info));
	info.key = rel;
	info.size = e->size;
	info.mtime = e->mtime;
	info.mode = 0644;
	snprintf(info.etag, sizeof(info.etag), "%s", e->etag);
	return ls->cb(ls->arg, &info);
}

/* Remember token in the set (open addressing, at most half full); 1 when
 * it was seen before, 0, or -ENOMEM. A hash collision reads as a loop:
 * 2^-64 a pair. */
static int token_seen(uint64_t **set, size_t *n, size_t *cap, const char *token)
{
	uint64_t h = disk_fnv64(token, strlen(token));
	size_t i;

	h |= 1; /* 0 marks a free slot */
	if (2 * (*n + 1) > *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		uint64_t *ns = calloc(nc, sizeof(*ns));

		if (!ns)
			return -ENOMEM;
		for (size_t k = 0; k < *cap; k++) {
			if (!(*set)[k])
				continue;
			for (i = (size_t)(*set)[k] & (nc - 1); ns[i]; i = (i + 1) & (nc - 1))
				;
			ns[i] = (*set)[k];
		}
		free(*set);
		*set = ns;
		*cap = nc;
	}
	for (i = (size_t)h & (*cap - 1); (*set)[i]; i = (i + 1) & (*cap - 1))
		if ((*set)[i] == h)
			return 1;
	(*set)[i] = h;
	(*n)++;
	return 0;
}

/* GET the listing page after token (NULL: the first) into *body (free it;
 * *len bytes). *query: the query string sent (the caller frees it).
 * Returns 0, or a negative errno with the error set. */
static int os_list_page(struct backend *be, const char *token, char **query, void **body,
			size_t *len)
{
	struct backend_objstore *os = be->impl;
	struct backend_kv params[4] = {{"list-type", "2"}, {"max-keys", "1000"}};
	size_t np = 2, plen = strlen(os->prefix), qcap;
	struct os_call c;
	long st;
	int ret;

	if (plen)
		params[np++] = (struct backend_kv){"prefix", os->prefix};
	if (token)
		params[np++] = (struct backend_kv){"continuation-token", token};
	qcap = 3 * (plen + (token ? strlen(token) : 0)) + 128;
	free(*query);
	*query = malloc(qcap);
	if (!*query)
		return -ENOMEM;
	ret = (int)backend__sigv4_query(*query, qcap, params, np);
	if (ret < 0)
		return ret;
	ret = os_call_init(&c, os, "GET", os->list_path, *query);
	if (ret < 0)
		return ret;
	atomic_fetch_add(&be->list_requests, 1);
	c.req.past_breaker = 1; /* a listing is asked for: it asks the store itself */
	ret = backend_io_get(os->io, &c.req, body, len, OS_LIST_PAGE_MAX);
	st = c.req.status;
	if (ret >= 0) {
		os_call_free(&c);
		return 0;
	}
	/* a 301 PermanentRedirect names the bucket's region in a header only */
	if (st == 401 || st == 403 || st == 400 || (st == 301 && c.req.bucket_region[0]))
		ret = backend__s3_refused(be, &c.req, os->region, os->auth == OS_AUTH_NONE, ret);
	else if (st == 404)
		backend__set_error(be, "%s: no such bucket (HTTP 404)", be->desc);
	else if (ret == -EFBIG)
		backend__set_error(be, "%s: a listing page is larger than %u bytes", be->desc,
				   OS_LIST_PAGE_MAX);
	else
		backend__req_failed(be, "GET", "", &c.req, ret);
	/* as the http store's listings: a refresh's failure says why in the log */
	backend__log(&be->log, BACKEND_LOG_ERROR, "%s", backend_last_error(be));
	os_call_free(&c);
	return ret;
}

/* Where a listing is, between its pages. */
struct list_walk {
	char *token;	/* the continuation token to send next, or NULL */
	uint64_t *seen; /* hashes of the tokens sent so far (token_seen) */
	size_t nseen, capseen;
	unsigned empty; /* truncated pages in a row without a key */
	int page_no;
};

/* After the truncated page number w->page_no: take page->next_token (set
 * to NULL) as the next one to send, unless the listing does not move on
 * (endless listings, above). Returns 0, or -EIO with the error set, or
 * -ENOMEM. */
static int os_list_follow(struct backend *be, struct list_walk *w, struct backend_s3_page *page,
			  int got_keys)
{
	int ret;

	if (!page->next_token || !page->next_token[0] ||
	    (w->token && strcmp(w->token, page->next_token) == 0)) {
		backend__set_error(be, "%s: truncated listing without a new continuation token",
				   be->desc);
		return -EIO;
	}
	w->empty = got_keys ? 0 : w->empty + 1;
	if (w->empty >= OS_LIST_EMPTY_MAX) {
		backend__set_error(be, "%s: %u truncated listing pages in a row without a key",
				   be->desc, w->empty);
		return -EIO;
	}
	ret = token_seen(&w->seen, &w->nseen, &w->capseen, page->next_token);
	if (ret > 0) {
		backend__set_error(be,
				   "%s: the listing loops (continuation token repeated after %d "
				   "pages)",
				   be->desc, w->page_no + 1);
		return -EIO;
	}
	if (ret < 0)
		return ret;
	free(w->token);
	w->token = page->next_token;
	page->next_token = NULL;
	return 0;
}

static int os_list(struct backend *be, backend_list_cb cb, void *arg)
{
	struct backend_objstore *os = be->impl;
	struct list_state ls = {be, cb, arg, strlen(os->prefix), 0, 0, 0, "", 0, 0, ""};
	struct list_walk w = {0};
	char *query = NULL;
	int ret = 0;

	for (w.page_no = 0;; w.page_no++) {
		struct backend_s3_page page;
		void *body = NULL;
		size_t len = 0, before;

		if (w.page_no >= OS_LIST_MAX_PAGES) {
			backend__set_error(be, "%s: listing has more than %d pages", be->desc,
					   OS_LIST_MAX_PAGES);
			ret = -EFBIG;
			break;
		}
		ret = os_list_page(be, w.token, &query, &body, &len);
		if (ret < 0)
			break;
		before = ls.entries;
		ret = backend__s3_xml_list(body, len, list_entry, &ls, &page);
		free(body);
		if (page.toolong && !ls.toolong)
			key_shown(page.first_toolong, strlen(page.first_toolong), ls.first_toolong,
				  sizeof(ls.first_toolong));
		ls.toolong += page.toolong;
		ls.unread += page.skipped - page.toolong;
		if (ret == -EFBIG && ls.entries > OS_LIST_ENTRIES_MAX)
			backend__set_error(be, "%s: listing has more than %lu keys", be->desc,
					   OS_LIST_ENTRIES_MAX);
		if (ret == -EBADMSG) {
			backend__set_error(be,
					   "%s: the store's listing is not a ListBucketResult "
					   "document",
					   be->desc);
			ret = -EIO;
		}
		if (ret == 0 && page.truncated)
			ret = os_list_follow(be, &w, &page, ls.entries != before);
		free(page.next_token);
		if (ret != 0 || !page.truncated)
			break;
	}
	if (ret == 0 && ls.unpathed)
		backend__log(&be->log, BACKEND_LOG_WARN,
			     "%s: %zu %s of the listing not shown: not a path (an empty, '.' or "
			     "'..' component, or a leading '/'; the first: '%s')",
			     be->desc, ls.unpathed, ls.unpathed == 1 ? "key" : "keys",
			     ls.first_unpathed);
	if (ret == 0 && ls.toolong)
		backend__log(&be->log, BACKEND_LOG_WARN,
			     "%s: %zu %s of the listing not shown: longer than %d bytes (the first "
			     "begins '%s...')",
			     be->desc, ls.toolong, ls.toolong == 1 ? "key" : "keys",
			     BACKEND_S3_KEY_MAX, ls.first_toolong);
	if (ret == 0 && ls.unread)
		backend__log(&be->log, BACKEND_LOG_WARN,
			     "%s: %zu %s of the listing not shown: without a key, with a key that "
			     "cannot be decoded, or without a size that is a number",
			     be->desc, ls.unread, ls.unread == 1 ? "entry" : "entries");
	free(w.seen);
	free(w.token);
	free(query);
	return ret;
}

static int os_stat(struct backend *be, const char *key, struct backend_objinfo *info)
{
	struct backend_objstore *os = be->impl;
	char path[OS_PATH_MAX];
	struct os_call c;
	int err;

	err = os_object_path(os, os->head_prefix, key, path, sizeof(path));
	if (err < 0)
		return err;
	err = os_call_init(&c, os, "HEAD", path, os->head_query);
	if (err < 0)
		return err;
	err = backend_io_head(os->io, &c.req);
	if (err == 0) {
		backend_io_head_info(info, key, &c.req);
	} else {
		os_failed(be, "HEAD", key, &c.req, err);
	}
	os_call_free(&c);
	return err;
}

/* The URL of key's HEAD as os_stat sends it (malloc'd), or NULL; os_stat
 * for another file of the store (backend_ais_head.c). */
char *backend__os_head_url(struct backend_objstore *os, const char *key)
{
	char path[OS_PATH_MAX];
	struct os_call c;

	if (os_object_path(os, os->head_prefix, key, path, sizeof(path)) < 0 ||
	    os_call_init(&c, os, "HEAD", path, os->head_query) < 0)
		return NULL;
	return c.req.url;
}

int backend__os_stat(struct backend *be, const char *key, struct backend_objinfo *info)
{
	return os_stat(be, key, info);
}

/* stat_many: HEADs of any keys, os->head_window at once (one after the
 * other they cost a round trip each: a GetBatch request's confirmation,
 * a brace pattern's learning) */
struct os_heads {
	struct backend *be;
	const char *const *keys;
	struct backend_objinfo *info;
	int *err;
	size_t *at; /* the keys asked: the i-th HEAD is of keys[at[i]] */
	struct os_head_slot {
		struct os_call c;
		char path[OS_PATH_MAX];
	} * slot; /* per request in flight: what its signature needs */
};

static int os_head_make(void *arg, size_t i, unsigned slot, struct backend_req *r)
{
	struct os_heads *x = arg;
	struct backend_objstore *os = x->be->impl;
	struct os_head_slot *s = &x->slot[slot];
	int err = os_object_path(os, os->head_prefix, x->keys[x->at[i]], s->path, sizeof(s->path));

	if (err == 0)
		err = os_call_init(&s->c, os, "HEAD", s->path, os->head_query);
	if (err < 0)
		return err; /* -ENOMEM (the path was checked): no more HEADs */
	*r = s->c.req;	    /* signed with s->c (os_sign_cb), which stays while r runs */
	return 0;
}

static int os_head_answer(void *arg, size_t i, unsigned slot, struct backend_req *r, int err)
{
	struct os_heads *x = arg;
	size_t k = x->at[i];

	(void)slot;
	x->err[k] = err;
	if (err == 0)
		backend_io_head_info(&x->info[k], x->keys[k], r);
	else
		os_failed(x->be, "HEAD", x->keys[k], r, err);
	free(r->url);
	r->url = NULL;
	return 0;
}

static int os_stat_many(struct backend *be, const char *const *keys, size_t n,
			struct backend_objinfo *info, int *err)
{
	struct backend_objstore *os = be->impl;
	unsigned w = os->head_window && os->head_window < n ? os->head_window : (unsigned)n;
	struct os_heads x = {be,
			     keys,
			     info,
			     err,
			     malloc((n ? n : 1) * sizeof(size_t)),
			     calloc(w ? w : 1, sizeof(*x.slot))};
	char path[OS_PATH_MAX];
	size_t m = 0;
	int ret;

	if (!x.at || !x.slot) {
		free(x.at);
		free(x.slot);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		if (err[i] == 0)
			err[i] = os_object_path(os, os->head_prefix, keys[i], path, sizeof(path));
		if (err[i] == 0) {
			x.at[m++] = i;
			err[i] = -EIO; /* until its answer: a batch stopped early (ENOMEM)
					* leaves no key looking answered */
		}
	}
	ret = backend_io_run_many(os->io, m, w, os_head_make, os_head_answer, &x);
	free(x.at);
	free(x.slot);
	return ret;
}

/* A ranged GET of key, into buf or (buf NULL) to cb. */
static ssize_t os_get(struct backend *be, const char *key, const char *etag, uint64_t size,
		      void *buf, uint64_t off, size_t len, backend_sink_cb cb, void *arg)
{
	struct backend_objstore *os = be->impl;
	char path[OS_PATH_MAX];
	struct os_call c;
	ssize_t n;
	int err;

	if (len == 0)
		return 0;
	if (len > SSIZE_MAX)
		len = SSIZE_MAX;
	err = os_object_path(os, os->get_prefix, key, path, sizeof(path));
	if (err < 0)
		return err;
	err = os_call_init(&c, os, "GET", path, os->get_query);
	if (err < 0)
		return err;
	n = backend__io_get(os->io, &c.req, etag, size, off, len, buf, cb, arg);
	/* S3 answers a range that starts at or past the end with 416 and no
	 * "Content-Range: bytes * /SIZE" (which the engine would turn into
	 * EOF itself): that is end of object, not an error */
	if (n == -EINVAL && c.req.status == 416)
		n = 0;
	if (n < 0)
		os_failed(be, "GET", key, &c.req, (int)n);
	os_call_free(&c);
	return n;
}

static ssize_t os_pread(struct backend *be, const char *key, const char *etag, uint64_t size,
			void *buf, size_t len, uint64_t off)
{
	return os_get(be, key, etag, size, buf, off, len, NULL, NULL);
}

static ssize_t os_read_cb(struct backend *be, const char *key, const char *etag, uint64_t size,
			  uint64_t off, size_t len, backend_sink_cb cb, void *arg)
{
	return os_get(be, key, etag, size, NULL, off, len, cb, arg);
}

/* An asynchronous GET (os_read_async), with backend__async_new. */
struct os_async {
	struct backend_async a;
	struct os_call c; /* c.path points at path below */
	char path[OS_PATH_MAX];
};

static void os_async_release(struct backend_async *a)
{
	os_call_free(&((struct os_async *)a)->c);
	free(a);
}

static void os_read_async(struct backend *be, const char *key, const char *etag, uint64_t size,
			  uint64_t off, size_t len, unsigned flags, backend_sink_cb cb,
			  backend_sink_mem_cb mem, void *arg, backend_done_cb done, void *darg)
{
	struct backend_objstore *os = be->impl;
	struct os_async *a = backend__async_new(sizeof(*a), 0, be, key, etag, size, done, darg);
	int err = a ? os_object_path(os, os->get_prefix, key, a->path, sizeof(a->path)) : -ENOMEM;

	if (err == 0)
		err = os_call_init(&a->c, os, "GET", a->path, os->get_query);
	if (err < 0) {
		if (a)
			os_async_release(&a->a);
		done(darg, err, 0);
		return;
	}
	/* a range at or past the end (416 without the object's size): the end
	 * of the object, as os_get says */
	a->a.eof416 = 1;
	a->a.failed = os_failed;
	a->a.release = os_async_release;
	backend__async_start(os->io, &a->a, &a->c.req, off, len > SSIZE_MAX ? SSIZE_MAX : len,
			     flags, cb, mem, arg);
}

static void os_close(struct backend *be)
{
	struct backend_objstore *os = be->impl;

	if (!os)
		return;
	backend_io_close(os->io);
	backend__credsrc_close(os->creds);
	free(os->bucket);
	free(os->prefix);
	free(os->list_path);
	free(os->head_prefix);
	free(os->get_prefix);
	free(os->ca_file);
	free(os);
	be->impl = NULL;
}

static const char *os_credentials(const struct backend *be)
{
	const struct backend_objstore *os = be->impl;

	return os->creds ? backend__credsrc_name(os->creds) : NULL;
}

/* GetBatch is AIStore's: other object stores have no batch read */
static int os_batch_read(struct backend *be, const struct backend_batch_item *items, size_t n,
			 backend_batch_sink_cb cb, void *arg, int *err)
{
	const struct backend_objstore *os = be->impl;

	if (os->kind != OS_AIS)
		return -EOPNOTSUPP;
	return backend__ais_batch_read(be, items, n, cb, arg, err);
}

static const struct backend_ops os_ops = {
    .close = os_close,
    .list = os_list,
    .stat = os_stat,
    .stat_many = os_stat_many,
    .pread = os_pread,
    .open_fd = NULL,
    .credentials = os_credentials,
    .read_cb = os_read_cb,
    .read_async = os_read_async,
    .batch_read = os_batch_read,
    .batch_submit = backend__ais_batch_submit,
    .head_ahead = backend__ais_head_ahead,
    .head_follow = backend__ais_head_follow,
    .head_drop = backend__ais_head_drop,
    .head_follow_submit = backend__ais_head_follow_submit,
    .head_drop_nowait = backend__ais_head_drop_nowait,
    .head_follow_many = backend__ais_head_follow_many,
};

/* ---- open ----------------------------------------------------------------- */

static int valid_bucket(const char *b, size_t n)
{
	if (n == 0 || n > 255)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = b[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '.' || c == '_'))
			return 0;
	}
	return 1;
}

static char *dup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dup_printf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

/* The endpoint URL of os (kind, bucket set) and its region: cfg's,
 * the environment's, or the store's default (in ebuf). *path_style: 0 for
 * a virtual-hosted AWS endpoint, else 1. */
static const char *os_endpoint(struct backend_objstore *os, const struct backend_config *cfg,
			       char *ebuf, size_t ebufcap, int *path_style)
{
	const char *endpoint = cfg->endpoint;

	*path_style = 1;
	if (os->kind == OS_S3) {
		backend__aws_region(os->region, sizeof(os->region));
		if (!endpoint)
			endpoint = getenv("AWS_ENDPOINT_URL_S3");
		if (!endpoint || !*endpoint)
			endpoint = getenv("AWS_ENDPOINT_URL");
		if (!endpoint || !*endpoint) {
			if (!strchr(os->bucket, '.')) {
				snprintf(ebuf, ebufcap, "https://%s.s3.%s.amazonaws.com",
					 os->bucket, os->region);
				*path_style = 0;
			} else {
				snprintf(ebuf, ebufcap, "https://s3.%s.amazonaws.com", os->region);
			}
			endpoint = ebuf;
		}
	} else if (os->kind == OS_GS) {
		snprintf(os->region, sizeof(os->region), "auto");
		if (!endpoint || !*endpoint)
			endpoint = "https://storage.googleapis.com";
	} else {
		snprintf(os->region, sizeof(os->region), "us-east-1");
		if (!endpoint || !*endpoint)
			endpoint = getenv("AIS_ENDPOINT");
		if (!endpoint || !*endpoint)
			endpoint = "http://localhost:8080";
	}
	return endpoint;
}

/* How os signs its requests, with its credential source when it has one.
 * Returns 0, or a negative errno with the error set (-EACCES: none found). */
static int os_auth(struct backend *be, struct backend_objstore *os, const char *source,
		   const struct backend_config *cfg)
{
	char why[768];
	int err;

	if (os->kind == OS_AIS || cfg->no_sign) {
		os->auth = OS_AUTH_NONE; /* no_sign, or AIStore without AuthN */
		return 0;
	}
	err = backend__credsrc_open(&os->creds, os->kind == OS_GS, cfg->ca_file,
				    cfg->credential_timeout_s, source, &be->log, why, sizeof(why));
	if (err < 0) {
		backend__set_error(NULL, "%s: cannot get credentials: %s", source,
				   why[0] ? why : strerror(-err));
		return err;
	}
	if (!os->creds) {
		backend__set_error(
		    NULL,
		    "%s: no credentials found (set %s, or use --no-sign for a public "
		    "bucket)%s%s%s",
		    source,
		    os->kind == OS_GS ? "GOOGLE_OAUTH_ACCESS_TOKEN, GCS_HMAC_ACCESS_ID/"
					"GCS_HMAC_SECRET or AWS_ACCESS_KEY_ID/"
					"AWS_SECRET_ACCESS_KEY, or run where the GCE metadata "
					"server answers"
				      : "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or "
					"~/.aws/credentials, or run with an instance role, web "
					"identity or container credentials",
		    why[0] ? " [" : "", why, why[0] ? "]" : "");
		return -EACCES;
	}
	os->auth = backend__credsrc_bearer(os->creds) ? OS_AUTH_BEARER : OS_AUTH_SIGV4;
	return 0;
}

/* The request paths of os (encoded, as sent and signed). 0 or -ENOMEM. */
static int os_paths(struct backend_objstore *os, int path_style)
{
	char bucket_enc[1024];

	if (backend__uri_encode(bucket_enc, sizeof(bucket_enc), os->bucket, strlen(os->bucket), 0) <
	    0)
		return -ENOMEM;
	if (os->kind == OS_AIS) {
		/* listing and HEAD through AIStore's S3 API, GET through the native
		 * API (backend_ais.c says why) */
		os->list_path = dup_printf("%s/s3/%s", os->ep.path, bucket_enc);
		os->head_prefix = dup_printf("%s/s3/%s/", os->ep.path, bucket_enc);
		os->get_prefix = dup_printf("%s/v1/objects/%s/", os->ep.path, bucket_enc);
		os->head_query = "";
		os->get_query = "provider=ais";
	} else if (path_style) {
		os->list_path = dup_printf("%s/%s", os->ep.path, bucket_enc);
		os->head_prefix = dup_printf("%s/%s/", os->ep.path, bucket_enc);
		os->get_prefix = dup_printf("%s/%s/", os->ep.path, bucket_enc);
		os->head_query = os->get_query = "";
	} else {
		os->list_path = dup_printf("%s/", os->ep.path);
		os->head_prefix = dup_printf("%s/", os->ep.path);
		os->get_prefix = dup_printf("%s/", os->ep.path);
		os->head_query = os->get_query = "";
	}
	return os->list_path && os->head_prefix && os->get_prefix ? 0 : -ENOMEM;
}

int backend__os_open(struct backend *be, enum os_kind kind, const char *source,
		     const struct backend_config *cfg)
{
	static const char *const scheme[] = {"s3://", "gs://", "ais://"};
	const char *p = source + strlen(scheme[kind]);
	const char *slash = strchr(p, '/');
	size_t blen = slash ? (size_t)(slash - p) : strlen(p);
	const char *pfx = slash ? slash + 1 : "";
	struct backend_objstore *os;
	char ebuf[512];
	int err = -ENOMEM, path_style;

	if (!valid_bucket(p, blen)) {
		backend__set_error(NULL, "%s: not a valid bucket name", source);
		return -EINVAL;
	}
	/* secrets out of the environment (also with --no-sign and ais://, which
	 * do not read them: they must not stay in this process's environ), and
	 * curl's copies of token headers wiped when freed (backend_creds_secret.c) */
	if (backend__creds_scrub_env() < 0)
		return -ENOMEM;
	backend__creds_curl_init(); /* on failure backend_io_open reports it */
	os = calloc(1, sizeof(*os));
	if (!os)
		return -ENOMEM;
	os->kind = kind;
	os->bucket = strndup(p, blen);
	/* the prefix names a directory: "train" lists "train/..." only */
	os->prefix = dup_printf("%s%s", pfx, (*pfx && pfx[strlen(pfx) - 1] != '/') ? "/" : "");
	if (!os->bucket || !os->prefix)
		goto fail;
	if (strstr(os->prefix, "//") || os->prefix[0] == '/') {
		backend__set_error(NULL, "%s: empty path component in the prefix", source);
		err = -EINVAL;
		goto fail;
	}
	if (cfg->ca_file && !(os->ca_file = strdup(cfg->ca_file)))
		goto fail;
	err =
	    backend__endpoint_parse(&os->ep, os_endpoint(os, cfg, ebuf, sizeof(ebuf), &path_style));
	if (err < 0) {
		backend__set_error(NULL, "%s: bad endpoint URL (want http(s)://host[:port][/path])",
				   source);
		goto fail;
	}
	err = os_auth(be, os, source, cfg);
	if (err == 0)
		err = os_paths(os, path_style);
	if (err < 0)
		goto fail;
	err = -ENOMEM;
	be->desc = dup_printf("%s%s/%s", scheme[kind], os->bucket, os->prefix);
	if (!be->desc)
		goto fail;
	/* as http's: a HEAD is one round trip, queued by the engine beside the
	 * connections' transfers */
	os->head_window = 4 * (cfg->connections ? cfg->connections : 1);
	err = backend_io_open(&os->io, cfg);
	if (err < 0) {
		backend__set_error(NULL, "%s: cannot start the I/O thread: %s", source,
				   strerror(-err));
		goto fail;
	}
	be->ops = &os_ops;
	be->local = 0;
	be->impl = os;
	be->io = os->io;
	return 0;
fail:
	be->impl = os;
	os_close(be);
	free(be->desc);
	be->desc = NULL;
	return err;
}

int backend__s3_open(struct backend *be, const char *source, const struct backend_config *cfg)
{
	return backend__os_open(be, OS_S3, source, cfg);
}

int backend__gs_open(struct backend *be, const char *source, const struct backend_config *cfg)
{
	return backend__os_open(be, OS_GS, source, cfg);
}
