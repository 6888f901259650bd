/*
 * backend_http.c — http:// and https:// sources (docs/design.md section 1).
 *
 * Three forms of SOURCE:
 *   - brace pattern "http://h/d/shard-{000..099}.tar" (WebDataset notation,
 *     backend_brace.c), and a single URL "http://h/d/x.tar" as its
 *     one-name case: the object table is fixed at open; keys are the
 *     decoded paths after the longest common directory prefix. Listing
 *     asks for none of them: it gives the names only (name_only), after
 *     one 1-byte GET of the first URL that shows the server answers; sizes
 *     and ETags come from HEADs when the caller asks (stat, stat_many:
 *     several at once).
 *   - directory "http://h/d/" (ends in '/'): an autoindex page (nginx JSON
 *     or HTML, backend_listing.c) is fetched and subdirectories are walked;
 *     keys are the decoded names joined by '/'; a key's URL is the source
 *     URL plus the key percent-encoded. Files an HTML page lists without a
 *     size are HEADed.
 * Reads are ranged GETs through the I/O engine (backend_io_*.c), which owns
 * retries, redirects and TLS. A query string in SOURCE (say, a token) is
 * sent with every request and never shown in be->desc; neither is URL
 * userinfo.
 *
 * Threads: list, stat and pread block the calling thread on the engine; any
 * number may run at once. The object table is immutable after open.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_i.h"
#include "backend_io_i.h"
#include "disk.h"

/*
 * Caps of a directory walk (a hostile or broken server may serve
 * an endless listing, e.g. a page that links to itself under new names).
 * Each one fails the listing, so the mount fails with a reason instead of
 * showing a silently partial tree:
 *   depth   32 levels below the source (-ELOOP): real datasets are a few
 *           levels deep; a self-linking page hits this after 33 GETs;
 *   entries 10 million names in all (-EFBIG): more than one mount holds;
 *   pages   100,000 directory pages (-EFBIG): each is a sequential GET;
 *   bytes   64 MiB per page and 1 GiB of pages in all (-EFBIG): about ten
 *           million nginx JSON entries, matching the entries cap.
 * Memory: a page's parsed names are freed before its subdirectories are
 * walked; what stays is one list of subdirectory keys per level.
 */
#define HTTP_LIST_DEPTH_MAX   32
#define HTTP_LIST_ENTRIES_MAX 10000000ul
#define HTTP_LIST_PAGES_MAX   100000ul
#define HTTP_LIST_BODY_MAX    (64ul << 20)
#define HTTP_LIST_TOTAL_MAX   (1ul << 30)
#define HTTP_URL_MAX	      8192
/* A pattern's name answered by a page (pat_probe): the page is read up to
 * this much to see whether it is a directory listing. */
#define HTTP_PROBE_BODY_MAX (1ul << 20)

struct http_obj {
	char *key;
	char *url;
};

struct http {
	struct backend *be; /* whose last error report() sets */
	struct backend_io *io;
	int dir;	       /* directory form */
	char *base;	       /* dir: the source URL up to its last '/' (raw) */
	char *query;	       /* dir: "?..." of the source, or "" */
	struct http_obj *objs; /* pattern form, sorted by key */
	size_t nobjs;
	unsigned window; /* HEADs in flight while listing */
};

/* The pattern's object sought by key (disk_bsearch). */
struct obj_key {
	const struct http *h;
	const char *key;
};

static int obj_key_cmp(const void *ctx, size_t i)
{
	const struct obj_key *k = ctx;

	return strcmp(k->h->objs[i].key, k->key);
}

/* The URL of key into buf. */
static int http_url(struct http *h, const char *key, char *buf, size_t cap)
{
	struct obj_key k = {h, key};
	size_t i;
	int found;

	if (h->dir) {
		size_t bl = strlen(h->base);
		ssize_t n;

		if (bl >= cap)
			return -ENAMETOOLONG;
		memcpy(buf, h->base, bl);
		n = backend__uri_encode(buf + bl, cap - bl, key, strlen(key), 1);
		if (n < 0)
			return (int)n;
		if ((size_t)snprintf(buf + bl + (size_t)n, cap - bl - (size_t)n, "%s", h->query) >=
		    cap - bl - (size_t)n)
			return -ENAMETOOLONG;
		return 0;
	}
	i = disk_bsearch(0, h->nobjs, obj_key_cmp, &k, &found);
	if (!found)
		return -ENOENT;
	if ((size_t)snprintf(buf, cap, "%s", h->objs[i].url) >= cap)
		return -ENAMETOOLONG;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* many HEADs at once, results handled on the calling thread                  */

struct head_many_ctx {
	int listing;
	int (*url_of)(void *arg, size_t i, char **url);
	int (*on_result)(void *arg, size_t i, const struct backend_req *r, int err);
	void *arg;
	int stopped; /* a url_of or on_result said stop: later answers are dropped */
};

static int head_make(void *arg, size_t i, unsigned slot, struct backend_req *r)
{
	struct head_many_ctx *x = arg;
	char *url = NULL;
	int err = x->url_of(x->arg, i, &url);

	(void)slot;
	if (err < 0) {
		x->stopped = 1;
		return err;
	}
	r->method = "HEAD";
	r->url = url;
	r->past_breaker = x->listing;
	return 0;
}

static int head_answer(void *arg, size_t i, unsigned slot, struct backend_req *r, int err)
{
	struct head_many_ctx *x = arg;
	int ret = 0;

	(void)slot;
	if (!x->stopped) {
		ret = x->on_result(x->arg, i, r, err);
		x->stopped = ret != 0;
	}
	free(r->url);
	r->url = NULL;
	return ret;
}

/* HEAD url_of(i) for i < n, at most h->window at once (listing: a
 * listing's, sent even while the store is down); on_result runs on
 * this thread for each, in completion order; a non-zero return stops new
 * HEADs and becomes the result once those in flight are done (their
 * answers are dropped). */
static int head_many(struct http *h, size_t n, int listing,
		     int (*url_of)(void *arg, size_t i, char **url),
		     int (*on_result)(void *arg, size_t i, const struct backend_req *r, int err),
		     void *arg)
{
	struct head_many_ctx x = {listing, url_of, on_result, arg, 0};

	return backend_io_run_many(h->io, n, h->window, head_make, head_answer, &x);
}

/* ------------------------------------------------------------------------ */
/* pattern form                                                              */

/* A listing's request failed: the store's answer (status, the code and
 * message of its error body) or the transport's reason goes to
 * backend_last_error and to the log; returns err. */
static int report(struct http *h, const struct backend_req *r, int err)
{
	backend__req_failed(h->be, r->method ? r->method : "GET", "", r, err);
	backend__log(&h->be->log, BACKEND_LOG_ERROR, "%s", backend_last_error(h->be));
	return err;
}

/* A listing stops at a cap: the reason goes to backend_last_error and to
 * the log, as report() does for failed requests; returns err. */
__attribute__((format(printf, 3, 4))) static int list_fail(struct http *h, int err, const char *fmt,
							   ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	backend__set_error(h->be, "%s", msg);
	backend__log(&h->be->log, BACKEND_LOG_ERROR, "%s", msg);
	return err;
}

/* Does a listing parser take the page at url? (its answer to the probe
 * was a whole 200 body that starts as HTML or JSON does). 1: a listing,
 * 0: not one or not fetched (the reads will tell). */
static int count_ent(void *arg, const struct backend__listent *le)
{
	(void)le;
	++*(size_t *)arg;
	return 0;
}

static int pat_is_listing(struct http *h, char *url)
{
	struct backend_req r;
	size_t ents = 0;
	void *body = NULL;
	size_t len = 0;
	int err;

	memset(&r, 0, sizeof(r));
	r.method = "GET";
	r.url = url;
	r.past_breaker = 1; /* a listing's */
	if (backend_io_get(h->io, &r, &body, &len, HTTP_PROBE_BODY_MAX) < 0)
		return 0;
	err = backend__listing_parse(body, len, count_ent, &ents);
	free(body);
	return err >= 0;
}

/* One 1-byte GET of the i-th name. Returns 0 when the server answered
 * (any HTTP answer below 500, a 404 too: *missing says which), or a
 * negative errno with the error set: no answer or 5xx to the end of the
 * retry budget (-EIO), a refusal (-EACCES), an untrusted certificate, and
 * a name that is a directory (-EISDIR: the server redirects it to a URL
 * ending in '/', or answers it with an autoindex listing). */
static int pat_probe(struct http *h, size_t i, int *missing)
{
	char *url = h->objs[i].url;
	struct backend_req r;
	char byte = 0, shown[512];
	ssize_t n;

	memset(&r, 0, sizeof(r));
	r.method = "GET";
	r.url = url;
	r.range_off = 0;
	r.range_len = 1;
	r.past_breaker = 1; /* a listing's: asks the store even while it is down */
	n = backend_io_read(h->io, &r, &byte);
	backend__url_display(url, shown, sizeof(shown));
	if (r.dir_redirect)
		return list_fail(h, -EISDIR,
				 "%s is a directory (the server redirects it to a URL ending in "
				 "'/'): mount %s/ (with the trailing slash) or the URL it "
				 "redirects to",
				 shown, shown);
	/* unreachable: no HTTP answer at all (refused connection, TLS, time
	 * out) or 5xx until the retry budget ran out; refused: 401/403. Any
	 * other answer, even a broken one (a 206 past its range), is the
	 * server's: its reads will say so */
	if (n < 0 &&
	    (!r.status || r.status >= 500 || n == -EACCES || n == -ECANCELED || n == -ENOMEM))
		return report(h, &r, (int)n);
	/* a whole 200 answer to a ranged GET that starts as a page does: a
	 * server that lists a directory without redirecting to its '/' */
	if (n == 1 && r.status == 200 && (byte == '<' || byte == '[') && pat_is_listing(h, url))
		return list_fail(h, -EISDIR,
				 "%s answers with a directory listing: mount %s/ (with the "
				 "trailing slash) to mount the directory",
				 shown, shown);
	*missing = n == -ENOENT;
	return 0;
}

/* The names of the pattern, after one 1-byte GET of the first that shows
 * the server answers (pat_probe). When the first answers 404, the last is
 * asked too, and when it is missing as well the listing fails with -ENOENT
 * (a pattern that matches nothing, most likely a typo in it): two requests
 * at most, never one per name. Names missing between them are their
 * stat's business. */
static int pat_list(struct http *h, backend_list_cb cb, void *arg)
{
	int missing = 0, err;

	err = pat_probe(h, 0, &missing);
	if (err < 0)
		return err;
	if (missing) {
		char first[512], last[512];

		backend__url_display(h->objs[0].url, first, sizeof(first));
		backend__url_display(h->objs[h->nobjs - 1].url, last, sizeof(last));
		if (h->nobjs == 1)
			return list_fail(h, -ENOENT, "%s: not on the server (HTTP 404)", first);
		err = pat_probe(h, h->nobjs - 1, &missing);
		if (err < 0)
			return err;
		if (missing)
			return list_fail(h, -ENOENT,
					 "no name of the pattern is on the server: its first "
					 "(%s) and its last (%s) answer 404 (a typo in the "
					 "pattern?)",
					 first, last);
	}
	for (size_t i = 0; i < h->nobjs; i++) {
		struct backend_objinfo info;

		memset(&info, 0, sizeof(info));
		info.key = h->objs[i].key;
		info.name_only = 1;
		err = cb(arg, &info);
		if (err)
			return err;
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* stat_many: HEADs of any keys, several at once                              */

struct stat_batch {
	struct http *h;
	const char *const *keys;
	struct backend_objinfo *info;
	int *err;
	size_t *at; /* the keys asked: the i-th HEAD is of keys[at[i]] */
};

static int batch_url_of(void *arg, size_t i, char **url)
{
	struct stat_batch *sb = arg;
	char buf[HTTP_URL_MAX];
	int err = http_url(sb->h, sb->keys[sb->at[i]], buf, sizeof(buf));

	if (err < 0)
		return err; /* checked before: not reached */
	*url = strdup(buf);
	return *url ? 0 : -ENOMEM;
}

static int batch_result(void *arg, size_t i, const struct backend_req *r, int err)
{
	struct stat_batch *sb = arg;
	size_t k = sb->at[i];

	if (err == 0 && r->dir_redirect)
		err = -EISDIR;
	sb->err[k] = err;
	if (err == 0)
		backend_io_head_info(&sb->info[k], sb->keys[k], r);
	else if (err != -ENOENT && err != -EISDIR)
		/* why, for backend_last_error (this thread runs on_result) */
		backend__req_failed(sb->h->be, "HEAD", sb->keys[k], r, err);
	return 0;
}

static int http_stat_many(struct backend *be, const char *const *keys, size_t n,
			  struct backend_objinfo *info, int *err)
{
	struct stat_batch sb = {be->impl, keys, info, err, malloc((n ? n : 1) * sizeof(size_t))};
	char buf[HTTP_URL_MAX];
	size_t m = 0;
	int ret;

	if (!sb.at)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (err[i] == 0)
			err[i] = http_url(sb.h, keys[i], buf, sizeof(buf));
		if (err[i] == 0) {
			sb.at[m++] = i;
			err[i] = -EIO; /* until its answer: a batch stopped early (ENOMEM)
					* leaves no key looking answered */
		}
	}
	ret = head_many(sb.h, m, 0, batch_url_of, batch_result, &sb);
	free(sb.at);
	return ret;
}

/* ------------------------------------------------------------------------ */
/* directory form                                                            */

struct dir_ent {
	char *name;
	int is_dir, has_size;
	uint64_t size;
	int64_t mtime;
};

struct dir_page {
	struct dir_ent *e;
	size_t n, cap;
	int err;
};

static int page_add(void *arg, const struct backend__listent *le)
{
	struct dir_page *pg = arg;

	if (pg->n == pg->cap) {
		size_t cap = pg->cap ? pg->cap * 2 : 64;
		struct dir_ent *ne = realloc(pg->e, cap * sizeof(*ne));

		if (!ne)
			return -ENOMEM;
		pg->e = ne;
		pg->cap = cap;
	}
	pg->e[pg->n].name = strdup(le->name);
	if (!pg->e[pg->n].name)
		return -ENOMEM;
	pg->e[pg->n].is_dir = le->is_dir;
	pg->e[pg->n].has_size = le->has_size;
	pg->e[pg->n].size = le->size;
	pg->e[pg->n].mtime = le->mtime;
	pg->n++;
	return 0;
}

static int ent_cmp(const void *a, const void *b)
{
	const struct dir_ent *x = a, *y = b;

	return strcmp(x->name, y->name);
}

struct dir_walk {
	struct http *h;
	backend_list_cb cb;
	void *arg;
	size_t entries;
	size_t pages;
	uint64_t bytes; /* of all pages so far */
	/* files of the current page that need a HEAD (during head_many) */
	char **keys;
	size_t nkeys;
};

static int dir_url_of(void *arg, size_t i, char **url)
{
	struct dir_walk *dw = arg;
	char buf[HTTP_URL_MAX];
	int err = http_url(dw->h, dw->keys[i], buf, sizeof(buf));

	if (err < 0)
		return err;
	*url = strdup(buf);
	return *url ? 0 : -ENOMEM;
}

static int dir_result(void *arg, size_t i, const struct backend_req *r, int err)
{
	struct dir_walk *dw = arg;
	struct backend_objinfo info;

	if (err == -ENOENT)
		return 0; /* gone since the listing: not an object */
	if (err < 0)
		return report(dw->h, r, err);
	backend_io_head_info(&info, dw->keys[i], r);
	return dw->cb(dw->arg, &info);
}

static char *key_join(const char *prefix, const char *name)
{
	size_t pl = strlen(prefix), nl = strlen(name);
	char *k = malloc(pl + nl + 2);

	if (!k)
		return NULL;
	memcpy(k, prefix, pl);
	if (pl)
		k[pl++] = '/';
	memcpy(k + pl, name, nl + 1);
	return k;
}

static void dir_page_free(struct dir_page *pg)
{
	for (size_t i = 0; i < pg->n; i++)
		free(pg->e[i].name);
	free(pg->e);
	pg->e = NULL;
	pg->n = 0;
}

/* GET and parse the listing page of directory prefix ("" for the root) at
 * depth into pg (the caller frees it with dir_page_free, also on error).
 * Returns 0, 1 when a subdirectory vanished since its parent was listed,
 * or a negative errno with the error set. */
static int dir_page_get(struct dir_walk *dw, const char *prefix, int depth, struct dir_page *pg)
{
	struct http *h = dw->h;
	struct backend_req r;
	char url[HTTP_URL_MAX], shown[1024];
	void *body = NULL;
	size_t len = 0;
	int err;

	if (*prefix) {
		char *slash = key_join(prefix, "");

		if (!slash)
			return -ENOMEM;
		err = http_url(h, slash, url, sizeof(url));
		free(slash);
	} else {
		err = http_url(h, "", url, sizeof(url));
	}
	if (err < 0)
		return err;
	memset(&r, 0, sizeof(r));
	r.method = "GET";
	r.url = url;
	r.past_breaker = 1; /* a listing: asks the store even while it is down */
	atomic_fetch_add(&h->be->list_requests, 1);
	err = backend_io_get(h->io, &r, &body, &len, HTTP_LIST_BODY_MAX);
	if (err < 0) {
		if (err == -EFBIG) {
			backend__url_display(url, shown, sizeof(shown));
			return list_fail(h, err, "%s: listing larger than %lu bytes", shown,
					 HTTP_LIST_BODY_MAX);
		}
		if (depth == 0 || err != -ENOENT)
			return report(h, &r, err);
		return 1; /* a subdirectory vanished */
	}
	dw->bytes += len;
	if (dw->bytes > HTTP_LIST_TOTAL_MAX) {
		free(body);
		return list_fail(h, -EFBIG, "listing pages add up to more than %lu bytes",
				 HTTP_LIST_TOTAL_MAX);
	}
	err = backend__listing_parse(body, len, page_add, pg);
	free(body);
	if (err < 0) {
		backend__url_display(url, shown, sizeof(shown));
		list_fail(h, err, "%s: not an autoindex listing", shown);
	}
	return err;
}

/* Go through the sorted entries of pg, the page of directory prefix: hand
 * the files with a size to dw->cb; add the keys of the files without one
 * (to HEAD) to files, of the subdirectories to dirs (each room for pg->n).
 * Returns 0, the callback's nonzero answer, or a negative errno. */
static int dir_page_split(struct dir_walk *dw, const char *prefix, const struct dir_page *pg,
			  char **files, size_t *nf, char **dirs, size_t *nd)
{
	int err = 0;

	for (size_t i = 0; i < pg->n && !err; i++) {
		const struct dir_ent *e = &pg->e[i];
		struct backend_objinfo info = {0};
		char *key;

		if (i > 0 && strcmp(e->name, pg->e[i - 1].name) == 0)
			continue; /* listed twice */
		if (++dw->entries > HTTP_LIST_ENTRIES_MAX)
			return list_fail(dw->h, -EFBIG, "more than %lu entries in the listing",
					 HTTP_LIST_ENTRIES_MAX);
		key = key_join(prefix, e->name);
		if (!key)
			return -ENOMEM;
		if (e->is_dir) {
			dirs[(*nd)++] = key;
			continue;
		}
		if (!e->has_size) {
			files[(*nf)++] = key; /* HEADed by the caller */
			continue;
		}
		info.key = key;
		info.size = e->size;
		info.mtime = e->mtime;
		info.mode = 0644;
		/* nginx's own ETag: "mtime-size" in hex; a stand-in elsewhere */
		snprintf(info.etag, sizeof(info.etag), "\"%" PRIx64 "-%" PRIx64 "\"",
			 (uint64_t)e->mtime, e->size);
		err = dw->cb(dw->arg, &info);
		free(key);
	}
	return err;
}

/* List directory prefix ("" for the root) and, below it, its subdirectories. */
static int dir_walk(struct dir_walk *dw, const char *prefix, int depth)
{
	struct http *h = dw->h;
	struct dir_page pg = {0};
	size_t nf = 0, nd = 0;
	char **files = NULL, **dirs = NULL;
	int err;

	if (depth > HTTP_LIST_DEPTH_MAX)
		return list_fail(
		    h, -ELOOP,
		    "listing deeper than %d directories at '%.200s' (a page that links "
		    "to itself?)",
		    HTTP_LIST_DEPTH_MAX, prefix);
	if (++dw->pages > HTTP_LIST_PAGES_MAX)
		return list_fail(h, -EFBIG, "listing has more than %lu directory pages",
				 HTTP_LIST_PAGES_MAX);
	err = dir_page_get(dw, prefix, depth, &pg);
	if (err != 0) {
		err = err > 0 ? 0 : err; /* a vanished subdirectory lists nothing */
		goto out;
	}
	if (pg.n > 1) /* an empty page's e may be NULL */
		qsort(pg.e, pg.n, sizeof(*pg.e), ent_cmp);
	files = calloc(pg.n ? pg.n : 1, sizeof(*files));
	dirs = calloc(pg.n ? pg.n : 1, sizeof(*dirs));
	if (!files || !dirs) {
		err = -ENOMEM;
		goto out;
	}
	err = dir_page_split(dw, prefix, &pg, files, &nf, dirs, &nd);
	if (!err) {
		dw->keys = files;
		dw->nkeys = nf;
		err = head_many(h, nf, 1, dir_url_of, dir_result, dw);
		dw->keys = NULL;
		dw->nkeys = 0;
	}
	/* the page's names are copied into keys: free them before going deeper */
	dir_page_free(&pg);
	for (size_t i = 0; i < nd && !err; i++)
		err = dir_walk(dw, dirs[i], depth + 1);
out:
	for (size_t i = 0; i < nf; i++)
		free(files[i]);
	for (size_t i = 0; i < nd; i++)
		free(dirs[i]);
	free(files);
	free(dirs);
	dir_page_free(&pg);
	return err;
}

/* ------------------------------------------------------------------------ */
/* ops                                                                        */

static int http_list(struct backend *be, backend_list_cb cb, void *arg)
{
	struct http *h = be->impl;

	if (h->dir) {
		struct dir_walk dw = {h, cb, arg, 0, 0, 0, NULL, 0};

		return dir_walk(&dw, "", 0);
	}
	return pat_list(h, cb, arg);
}

static int http_stat(struct backend *be, const char *key, struct backend_objinfo *info)
{
	struct http *h = be->impl;
	struct backend_req r;
	char url[HTTP_URL_MAX];
	int err = http_url(h, key, url, sizeof(url));

	if (err < 0)
		return err;
	memset(&r, 0, sizeof(r));
	r.url = url;
	err = backend_io_head(h->io, &r);
	if (err < 0) {
		backend__req_failed(be, "HEAD", key, &r, err);
		return err;
	}
	if (r.dir_redirect)
		return -EISDIR; /* a directory: no object of that name */
	backend_io_head_info(info, key, &r);
	return 0;
}

/* The ranged GET of [off, off + len) of key, only from version etag when
 * given: into buf when it is not NULL, else handed to cb (as os_get). */
static ssize_t http_get(struct backend *be, const char *key, const char *etag, uint64_t size,
			void *buf, uint64_t off, size_t len, backend_sink_cb cb, void *arg)
{
	struct http *h = be->impl;
	struct backend_req r;
	char url[HTTP_URL_MAX];
	ssize_t n;
	int err;

	if (len == 0)
		return 0;
	err = http_url(h, key, url, sizeof(url));
	if (err < 0)
		return err;
	memset(&r, 0, sizeof(r));
	r.url = url;
	n = backend__io_get(h->io, &r, etag, size, off, len, buf, cb, arg);
	if (n < 0)
		backend__req_failed(be, "GET", key, &r, (int)n);
	return n;
}

static ssize_t http_pread(struct backend *be, const char *key, const char *etag, uint64_t size,
			  void *buf, size_t len, uint64_t off)
{
	return http_get(be, key, etag, size, buf, off, len, NULL, NULL);
}

static ssize_t http_read_cb(struct backend *be, const char *key, const char *etag, uint64_t size,
			    uint64_t off, size_t len, backend_sink_cb cb, void *arg)
{
	return http_get(be, key, etag, size, NULL, off, len, cb, arg);
}

/* An asynchronous GET (http_read_async): its URL after it (backend__async_new). */
struct http_async {
	struct backend_async a;
	struct backend_req r;
};

static void http_read_async(struct backend *be, const char *key, const char *etag, uint64_t size,
			    uint64_t off, size_t len, unsigned flags, backend_sink_cb cb,
			    backend_sink_mem_cb mem, void *arg, backend_done_cb done, void *darg)
{
	struct http *h = be->impl;
	char url[HTTP_URL_MAX];
	struct http_async *a = NULL;
	int err = http_url(h, key, url, sizeof(url));

	if (err == 0 &&
	    !(a = backend__async_new(sizeof(*a), strlen(url) + 1, be, key, etag, size, done, darg)))
		err = -ENOMEM;
	if (err < 0) {
		done(darg, err, 0);
		return;
	}
	a->r.url = strcpy(a->a.extra, url);
	backend__async_start(h->io, &a->a, &a->r, off, len, flags, cb, mem, arg);
}

static void http_free(struct http *h)
{
	if (!h)
		return;
	backend_io_close(h->io);
	for (size_t i = 0; i < h->nobjs; i++) {
		free(h->objs[i].key);
		free(h->objs[i].url);
	}
	free(h->objs);
	free(h->base);
	free(h->query);
	free(h);
}

static void http_close(struct backend *be)
{
	http_free(be->impl);
	be->impl = NULL;
}

static const struct backend_ops http_ops = {
    .close = http_close,
    .list = http_list,
    .stat = http_stat,
    .stat_many = http_stat_many,
    .pread = http_pread,
    .open_fd = NULL,
    .read_cb = http_read_cb,
    .read_async = http_read_async,
};

static int obj_cmp(const void *a, const void *b)
{
	const struct http_obj *x = a, *y = b;

	return strcmp(x->key, y->key);
}

/* The pattern's URL number i, on the server of the first (u0: the same
 * origin and userinfo), taken into h->objs[i] with its decoded path as
 * the key for now (urls[i] moves there). 0, -EINVAL (said) or -ENOMEM. */
static int pattern_take(struct http *h, const char *source, const struct backend_url *u0,
			char **urls, size_t i)
{
	struct backend_url u;
	char *path;
	ssize_t pl;
	size_t len;
	int err = backend__url_parse(&u, urls[i]);

	if (err == -ENOMEM)
		return err;
	if (err < 0 || !u.origin || strcmp(u.origin, u0->origin) != 0 ||
	    u.userinfo != u0->userinfo) {
		backend__url_free(&u);
		backend__set_error(NULL, "%s: every name must be on the same server", source);
		return -EINVAL;
	}
	len = strlen(u.path);
	path = malloc(len + 1);
	if (!path) {
		backend__url_free(&u);
		return -ENOMEM;
	}
	pl = backend__pct_decode(u.path, len, path, len + 1);
	backend__url_free(&u);
	if (pl < 0) {
		free(path);
		backend__set_error(NULL, "%s: bad percent escape", source);
		return -EINVAL;
	}
	h->objs[i].key = path; /* the decoded path for now */
	h->objs[i].url = urls[i];
	urls[i] = NULL;
	h->nobjs = i + 1;
	return 0;
}

/* The keys: each decoded path less the paths' longest common prefix cut
 * after a '/' (their common directory), each a usable object name. 0 or
 * -EINVAL (said). */
static int pattern_keys(struct http *h, const char *source)
{
	size_t n = h->nobjs, common = strlen(h->objs[0].key);

	for (size_t i = 1; i < n; i++) {
		size_t k = 0;

		while (k < common && h->objs[i].key[k] == h->objs[0].key[k])
			k++;
		common = k;
	}
	while (common > 0 && h->objs[0].key[common - 1] != '/')
		common--;
	for (size_t i = 0; i < n; i++) {
		char *k = h->objs[i].key;

		memmove(k, k + common, strlen(k + common) + 1);
		if (backend__key_check(k) < 0) {
			backend__set_error(NULL, "%s: '%s' is not a usable object name", source, k);
			return -EINVAL;
		}
	}
	return 0;
}

/* The objects sorted by key; the same name twice: keep one. */
static void pattern_sort_unique(struct http *h)
{
	size_t n = h->nobjs, w = 0;

	if (n > 1)
		qsort(h->objs, n, sizeof(*h->objs), obj_cmp);
	for (size_t i = 0; i < n; i++) {
		if (w > 0 && strcmp(h->objs[w - 1].key, h->objs[i].key) == 0) {
			free(h->objs[i].key);
			free(h->objs[i].url);
			continue;
		}
		h->objs[w++] = h->objs[i];
	}
	h->nobjs = w;
}

/* Pattern form: expand, split, find the common directory, make keys. */
static int http_open_pattern(struct http *h, const char *source)
{
	char **urls = NULL;
	size_t n = 0;
	struct backend_url u0 = {0};
	int err;

	err = backend__brace_expand(source, BACKEND_BRACE_MAX, &urls, &n);
	if (err < 0) {
		backend__set_error(NULL, "%s: %s", source,
				   err == -E2BIG
				       ? "brace pattern expands to more than 1000000 names"
				       : "malformed brace pattern");
		return err;
	}
	h->objs = calloc(n, sizeof(*h->objs));
	if (!h->objs) {
		err = -ENOMEM;
		goto out;
	}
	/* every URL must have the first one's origin and userinfo */
	err = backend__url_parse(&u0, urls[0]);
	if (err < 0 || !u0.origin) {
		backend__set_error(NULL, "%s: not an http(s)://host/path URL", urls[0]);
		err = err == -ENOMEM ? err : -EINVAL;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		err = pattern_take(h, source, &u0, urls, i);
		if (err < 0)
			goto out;
	}
	err = pattern_keys(h, source);
	if (err < 0)
		goto out;
	pattern_sort_unique(h);
out:
	backend__url_free(&u0);
	backend__strv_free(urls, n);
	return err;
}

static int http_open_dir(struct http *h, const struct backend_url *u)
{
	size_t ql = u->query ? strlen(u->query) : 0;

	h->dir = 1;
	h->base = strdup(u->base); /* ends with '/': the path does */
	h->query = malloc(ql + 2);
	if (!h->base || !h->query)
		return -ENOMEM;
	h->query[0] = '\0';
	if (u->query)
		snprintf(h->query, ql + 2, "?%s", u->query);
	return 0;
}

int backend__http_open(struct backend *be, const char *source, const struct backend_config *cfg)
{
	struct backend_url u;
	struct http *h;
	size_t dl;
	int err;

	if (strlen(source) >= HTTP_URL_MAX) {
		backend__set_error(NULL, "source URL longer than %d bytes", HTTP_URL_MAX);
		return -ENAMETOOLONG;
	}
	err = backend__url_parse(&u, source);
	if (err == -ENOMEM)
		return err;
	if (err < 0 || !u.origin) {
		backend__url_free(&u);
		backend__set_error(NULL, "%s: not an http(s)://host/path URL", source);
		return -EINVAL;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		backend__url_free(&u);
		return -ENOMEM;
	}
	h->window = 4 * (cfg->connections ? cfg->connections : 1);
	if (u.path[strlen(u.path) - 1] == '/')
		err = http_open_dir(h, &u);
	else
		err = http_open_pattern(h, source);
	if (err < 0)
		goto fail;
	/* desc: scheme://host/path, without userinfo and query */
	dl = strlen(u.scheme) + 3 + strlen(u.authority) + strlen(u.path) + 1;
	be->desc = malloc(dl);
	if (!be->desc) {
		err = -ENOMEM;
		goto fail;
	}
	snprintf(be->desc, dl, "%s://%s%s", u.scheme, u.authority, u.path);
	err = backend_io_open(&h->io, cfg);
	if (err < 0)
		goto fail;
	be->ops = &http_ops;
	be->local = 0;
	be->impl = h;
	h->be = be;
	be->io = h->io;
	backend__url_free(&u);
	return 0;
fail:
	backend__url_free(&u);
	http_free(h);
	return err;
}
