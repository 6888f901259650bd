/*
 * backend_i.h — private to backend/: the operations table every store
 * implements, and the constructor of each store.
 */
#ifndef BACKEND_I_H
#define BACKEND_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend.h"
#include "disk_lock.h"

struct backend_io;

/* Where log lines go (backend_config's log and log_arg). */
struct backend_logger {
	backend_log_fn fn; /* NULL: stderr */
	void *arg;
};

struct backend_ops {
	void (*close)(struct backend *be);
	int (*list)(struct backend *be, backend_list_cb cb, void *arg);
	int (*stat)(struct backend *be, const char *key, struct backend_objinfo *info);
	/* backend_stat_many; NULL: stat one key after the other */
	int (*stat_many)(struct backend *be, const char *const *keys, size_t n,
			 struct backend_objinfo *info, int *err);
	/* etag: the version the bytes must come from (NULL or "": any); a store
	 * that can tell answers -ESTALE when the object is another version now */
	ssize_t (*pread)(struct backend *be, const char *key, const char *etag, uint64_t size,
			 void *buf, size_t len, uint64_t off);
	int (*open_fd)(struct backend *be, const char *key);
	/* where the credentials come from (backend_credentials_source); NULL
	 * when the store never signs */
	const char *(*credentials)(const struct backend *be);
	/* backend_read_version_cb; NULL: backend__read_cb_pread serves it */
	ssize_t (*read_cb)(struct backend *be, const char *key, const char *etag, uint64_t size,
			   uint64_t off, size_t len, backend_sink_cb cb, void *arg);
	/* backend_read_version_async_mem (key checked, len > 0; mem may be
	 * NULL, and a store may ignore it); NULL: read_cb (or
	 * backend__read_cb_pread) in the calling thread, then done */
	void (*read_async)(struct backend *be, const char *key, const char *etag, uint64_t size,
			   uint64_t off, size_t len, unsigned flags, backend_sink_cb cb,
			   backend_sink_mem_cb mem, void *arg, backend_done_cb done, void *darg);
	/* backend_batch_read (keys checked, n > 0, every len > 0); NULL: the
	 * store has no batch read (-EOPNOTSUPP) */
	int (*batch_read)(struct backend *be, const struct backend_batch_item *items, size_t n,
			  backend_batch_sink_cb cb, void *arg, int *err);
	/* backend_batch_read_submit (checked as batch_read's, n > 0); NULL:
	 * -EOPNOTSUPP, the caller reads with batch_read */
	int (*batch_submit)(struct backend *be, const struct backend_batch_item *items, size_t n,
			    backend_batch_sink_cb cb, void *arg, int *err,
			    backend_batch_done_cb done, void *darg);
	/* backend_head_ahead (key checked; NULL: none, follow stats), its
	 * follow (h not NULL) and drop; NULL: the store never splits a HEAD */
	struct backend_head_ahead *(*head_ahead)(struct backend *be, const char *key);
	int (*head_follow)(struct backend *be, struct backend_head_ahead *h, const char *key,
			   struct backend_objinfo *info);
	void (*head_drop)(struct backend *be, struct backend_head_ahead *h);
	/* backend_head_follow_submit (h not NULL, info zeroed) and
	 * backend_head_drop_nowait; NULL: follow and drop then */
	int (*head_follow_submit)(struct backend *be, struct backend_head_ahead *h, const char *key,
				  struct backend_objinfo *info, backend_head_done_cb done,
				  void *arg);
	void (*head_drop_nowait)(struct backend *be, struct backend_head_ahead *h);
	/* backend_head_follow_many (keys checked, err[] 0 or the key's
	 * errno, info[] zeroed); NULL: none is ever sent ahead */
	int (*head_follow_many)(struct backend *be, struct backend_head_ahead *const *h,
				const char *const *keys, size_t n, struct backend_objinfo *info,
				int *err);
};

struct backend {
	const struct backend_ops *ops;
	char *desc;	       /* for logs; never holds credentials */
	int local;	       /* 1: objects are local files */
	void *impl;	       /* the store's own state */
	struct backend_io *io; /* remote stores: their I/O thread (cancel, stats); else NULL */
	unsigned long id;      /* names be in the threads' failure records */
	struct disk_mutex error_lock; /* DISK_LOCK_BE_ERROR: protects logged, nlogged */
	uint64_t *logged;	      /* failures logged: hashes of (key, cause) */
	size_t nlogged;
	struct backend_logger log; /* from backend_config, set before the store opens */
	/* listing pages requested (ListObjectsV2 pages, autoindex pages): any
	 * thread, backend_get_stats reads it */
	atomic_ullong list_requests;
};

/* One log line through lg (the config's callback, or stderr when it has
 * none): the one way backend/ logs. Any thread. */
void backend__log(const struct backend_logger *lg, enum backend_log_level level, const char *fmt,
		  ...) __attribute__((format(printf, 3, 4)));

/* Record the reason of the calling thread's last failure on be, for
 * backend_last_error: the one way every store reports one (a failed
 * request: backend__req_failed, backend_io_i.h). be == NULL while a store
 * opens (be is not handed out yet): the reason of this thread's failing
 * backend_open. Any thread; never pass credentials. */
void backend__set_error(struct backend *be, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The code and message of a store's error answer (body[0..len), perhaps
 * cut short: S3/GCS XML <Error>, GCS and AIStore JSON, else an HTML title
 * or the first line) into code and msg, printable ASCII (other bytes as
 * \xNN), "" when absent (backend_errbody.c; pure). */
void backend__errbody_parse(const char *body, size_t len, char *code, size_t codecap, char *msg,
			    size_t msgcap);

/* Local directory store: root is an absolute or relative directory path. */
int backend__local_open(struct backend *be, const char *root);

/* Remote stores. Each parses its SOURCE, fills be (ops, desc without
 * credentials, impl) and returns 0, or a negative errno after recording a
 * one-line reason with backend__set_error(NULL, ...), which the caller
 * reads with backend_last_error(NULL). */
int backend__http_open(struct backend *be, const char *source, const struct backend_config *cfg);
int backend__s3_open(struct backend *be, const char *source, const struct backend_config *cfg);
int backend__gs_open(struct backend *be, const char *source, const struct backend_config *cfg);
int backend__ais_open(struct backend *be, const char *source, const struct backend_config *cfg);
/* Test store: a local directory served as if remote, with injected faults. */
int backend__fault_open(struct backend *be, const char *source, const struct backend_config *cfg);

/* backend_read_version_cb over be's pread: reads of at most 1 MiB into one
 * buffer, each handed to cb (local stores, and the fault store over its
 * local one). */
ssize_t backend__read_cb_pread(struct backend *be, const char *key, const char *etag, uint64_t size,
			       uint64_t off, size_t len, backend_sink_cb cb, void *arg);

/* A read of this thread on be succeeded: its failure record goes (the
 * async reads' done wrappers, on the I/O thread). */
void backend__failure_clear(const struct backend *be);

/* Join root and key into buf; -ENAMETOOLONG when it does not fit, -EINVAL
 * for keys that could escape the root ('..' components, absolute). */
int backend__key_check(const char *key);

/* ---- s3 / gs / ais (backend_sigv4.c, backend_xml.c, backend_creds_*.c,
 * backend_s3.c, backend_ais.c) ----------------------------------------- */

#include <pthread.h>
#include <time.h>

struct backend_io;

struct backend_kv {
	const char *name;
	const char *value;
};

/* The one percent-encoder (backend_url.c), for SigV4 and every URL we
 * build: RFC 3986 (A-Z a-z 0-9 - . _ ~ kept, every other byte as %XX upper
 * case); '/' is kept when keep_slash (object paths: each segment encoded
 * once). Writes a NUL-terminated string; returns its length
 * or -ENAMETOOLONG when it does not fit in cap. */
ssize_t backend__uri_encode(char *dst, size_t cap, const char *src, size_t len, int keep_slash);

/* Canonical query string: each name and value URI-encoded, sorted by name
 * then value, joined with '&' ("a=1&b=", a NULL value counts as ""). The
 * same string serves as the request's query, so what is signed is what is
 * sent. Returns its length or -ENAMETOOLONG / -ENOMEM. */
ssize_t backend__sigv4_query(char *dst, size_t cap, const struct backend_kv *params, size_t n);

/* Credentials. The secret fields point into memory that core dumps leave
 * out (backend_creds_secret.c), zeroed when backend__creds_clear frees it: set them
 * only through backend__creds_*; a struct filled by hand (tests) is never
 * cleared. */
struct backend_creds {
	char *access_key; /* NULL: anonymous */
	char *secret_key;
	char *session_token; /* AWS_SESSION_TOKEN or aws_session_token, or NULL */
	char *bearer;	     /* GCS OAuth access token, or NULL */
};

struct backend_sigv4_req {
	const char *method; /* "GET", "HEAD", ... */
	const char *host;   /* the Host header exactly as sent (port only if not default) */
	const char *path;   /* canonical URI: the request path as sent, already encoded */
	const char *query;  /* canonical query string (backend__sigv4_query) or "" / NULL */
	const struct backend_kv *headers; /* further headers to sign (e.g. range), any case */
	size_t nheaders;
	const char *payload_hash; /* hex SHA-256 of the body, or NULL for "UNSIGNED-PAYLOAD" */
	int content_sha256;	  /* 1: sign (and send) x-amz-content-sha256, as S3 requires */
	time_t now;		  /* request time (UTC seconds) */
	const char *region;	  /* "us-east-1"; GCS: "auto" */
	const char *service;	  /* "s3" */
};

#define BACKEND_SIGV4_AUTH_MAX 1024

/* What the caller sends besides its own headers: x-amz-date (always),
 * x-amz-content-sha256 (when content_sha256), x-amz-security-token (when
 * the credentials have a session token) and Authorization. */
struct backend_sigv4_out {
	char amz_date[17];			    /* 20130524T000000Z */
	char payload_hash[65];			    /* value of x-amz-content-sha256 */
	char authorization[BACKEND_SIGV4_AUTH_MAX]; /* AWS4-HMAC-SHA256 Credential=... */
};

/* Pure: computes the AWS Signature Version 4 of one request. Returns 0,
 * -EINVAL for missing fields, -ENAMETOOLONG when something does not fit,
 * -ENOMEM, -EIO when libcrypto fails. Never logs; secret-derived buffers
 * are cleansed before returning. */
int backend__sigv4_sign(const struct backend_sigv4_req *rq, const struct backend_creds *cr,
			struct backend_sigv4_out *out);

/* One <Contents> of a ListObjectsV2 page. */
struct backend_s3_entry {
	const char *key; /* decoded, NUL-terminated, no NUL inside */
	size_t keylen;
	uint64_t size;
	int64_t mtime; /* LastModified, seconds since the epoch, 0 if absent */
	char etag[80]; /* as listed (quotes kept), "" if absent or too long */
};

typedef int (*backend__s3_entry_cb)(void *arg, const struct backend_s3_entry *e);

struct backend_s3_page {
	int truncated;		/* IsTruncated was "true" */
	char *next_token;	/* NextContinuationToken (malloc'd, decoded) or NULL */
	size_t entries;		/* entries handed to cb */
	size_t skipped;		/* <Contents> without a usable Key or Size */
	size_t toolong;		/* of them, keys longer than BACKEND_S3_KEY_MAX */
	char first_toolong[64]; /* the first one's first bytes, raw */
};

/* Why r (a refused listing page: its status and error body) was refused:
 * the error of be set in words that name the cause; -EREMCHG when it is
 * the region (requests signed for region, the bucket in another), else err
 * (backend_s3_refused.c). anonymous: --no-sign. */
struct backend_req;
int backend__s3_refused(struct backend *be, const struct backend_req *r, const char *region,
			int anonymous, int err);
/* A failed HEAD or GET of key (method) whose answer (301, 400, 403) names
 * the bucket's region, another than region, the one signed for: 1 with the
 * error of be set in the listing's words (prefixed "METHOD KEY: "), else 0
 * (backend_s3_refused.c). */
int backend__s3_region_failed(struct backend *be, const char *method, const char *key,
			      const struct backend_req *r, const char *region);

/* Longest key accepted from a listing (S3 allows 1024 bytes). */
#define BACKEND_S3_KEY_MAX 4096

/* Parse a ListObjectsV2 (ListBucketResult) body. Bounded and safe against
 * hostile input: returns 0, the callback's non-zero value, -EBADMSG for a
 * body that is not a well-formed ListBucketResult, or -ENOMEM. page is
 * filled (free next_token with free()) also on error. */
int backend__s3_xml_list(const char *xml, size_t len, backend__s3_entry_cb cb, void *arg,
			 struct backend_s3_page *page);

/* Parse an S3 <Error> body into Code and Message (printable ASCII only,
 * truncated to fit). Returns 0 or -EBADMSG; outputs are "" on failure. */
int backend__s3_xml_error(const char *xml, size_t len, char *code, size_t codecap, char *msg,
			  size_t msgcap);

/* ISO 8601 "2013-05-24T00:00:00.000Z" (or an offset +hh:mm) to epoch
 * seconds. Returns 0 or -EINVAL. */
int backend__iso8601_parse(const char *s, size_t len, int64_t *out);

/* The section 'profile' of an AWS credentials file (backend_creds_file.c;
 * the chain's file link). Returns 0 (an empty result means: none found) or
 * a negative errno. */
int backend__creds_file(struct backend_creds *c, const char *path, const char *profile);
void backend__creds_clear(struct backend_creds *c); /* zeroes and frees; accepts NULL */
/* Copy the secret variables of the environment (AWS_SECRET_ACCESS_KEY,
 * AWS_SESSION_TOKEN, GCS_HMAC_SECRET, GOOGLE_OAUTH_ACCESS_TOKEN) into secret
 * memory and overwrite their values in place: /proc/PID/environ and core
 * dumps no longer show them; backend__creds_* still find them. Idempotent;
 * not thread-safe against setenv. Returns 0 or -ENOMEM. */
int backend__creds_scrub_env(void);
/* Make this the first curl_global_init of the process, with allocators that
 * zero the blocks curl frees (its copies of header lines with tokens; not
 * its large receive buffers). Call it before anything else uses curl.
 * Returns 0, or -EIO when curl did not initialise. */
int backend__creds_curl_init(void);
/* The transport settings every curl easy handle of backend gets (e: a
 * CURL *): no signals, http(s) only, redirects not followed (signed
 * headers never go to another host), peer and host verified, against
 * ca_file when not NULL. */
void backend__curl_harden(void *e, const char *ca_file);
/* Zero the calling thread's vector registers, where string and memory
 * functions leave the last bytes they moved (a core dump holds them). */
void backend__creds_regs_clear(void);
/* A source of credentials for one mount: the chain in backend_creds_chain.c's
 * order, with a refresh thread for credentials that expire. */
struct backend_credsrc;
/* Find and fetch the first credentials (blocking, and bounded: metadata
 * services and STS are asked with short timeouts, a credential_process is
 * killed after process_timeout_s, <= 0: 3600 s). gcs: the GCS chain. label
 * names the source in log lines. Returns 0 with *out (NULL when no source
 * has any: why may then say what was tried), or a negative errno with a
 * one-line why (never a secret; -ETIMEDOUT: a helper or service did not
 * answer in time). Logs "credentials from SOURCE" through log, and the
 * refresh thread's lines too. */
int backend__credsrc_open(struct backend_credsrc **out, int gcs, const char *ca_file,
			  double process_timeout_s, const char *label,
			  const struct backend_logger *log, char *why, size_t whycap);
/* Stop the refresh (killing a credential_process it waits for) and free s;
 * accepts NULL. */
void backend__credsrc_close(struct backend_credsrc *s);
typedef int (*backend__creds_use_cb)(void *arg, const struct backend_creds *c);
/* fn(arg, current credentials) under the source's lock (fn must not block;
 * what it copies stays valid after a refresh), or -EACCES once they have
 * expired and no refresh has worked. Any thread. */
int backend__credsrc_use(struct backend_credsrc *s, backend__creds_use_cb fn, void *arg);
/* 1 when the credentials are a bearer token (GCS OAuth), else 0 */
int backend__credsrc_bearer(struct backend_credsrc *s);
const char *backend__credsrc_name(const struct backend_credsrc *s);
/* AWS_REGION, else AWS_DEFAULT_REGION, else "us-east-1". */
void backend__aws_region(char *buf, size_t cap);

/* ---- URLs (backend_url.c): every http(s) and file:// URL is split by
 * curl's parser, the one that decides where curl connects --------------- */
struct backend_url {
	char *scheme;	 /* lower case: "http", "https" or "file" */
	int userinfo;	 /* the URL has a user or password before '@' */
	char *host;	 /* as curl reads it (IPv6 in brackets); NULL for file:// */
	char *port;	 /* the port when one is written, else NULL */
	char *path;	 /* as written, still percent-encoded, dot segments kept; "/" at least */
	char *query;	 /* after '?', or NULL */
	char *fragment;	 /* after '#', or NULL */
	char *authority; /* http(s): host[:port] as curl sends it in Host: (no default port) */
	char *origin;	 /* http(s): "scheme://host:port", port always written, lower case;
			  * else NULL */
	char *base;	 /* http(s): the URL without query and fragment, as curl writes it
			  * (userinfo kept); else NULL */
};
/* Parse an http://, https:// or file:// URL (file: only file:///PATH and
 * file://localhost/PATH). Returns 0 (free with backend__url_free), -EINVAL
 * for anything curl would not connect to as written, or -ENOMEM. */
int backend__url_parse(struct backend_url *u, const char *url);
void backend__url_free(struct backend_url *u); /* accepts a zeroed or freed u */
/* u.origin of url as a malloc'd string, or NULL (not an http(s) URL, ENOMEM):
 * requests to another origin never carry the signing headers. */
char *backend__url_origin(const char *url);
/* url without user:password@ (malloc'd), or NULL: a redirect to another
 * origin must not carry them. */
char *backend__url_without_userinfo(const char *url);
/* A Location header's value (loc, len bytes) resolved against base, as
 * curl's CURLINFO_REDIRECT_URL says it (malloc'd), or NULL. */
char *backend__url_join(const char *base, const char *loc, size_t len);
/* The host of url into buf ("?" when url is not an http(s) URL). */
void backend__url_host(const char *url, char *buf, size_t cap);
/* url as shown in errors and logs: scheme://host[:port]/path, without
 * userinfo, query and fragment ("(bad URL)" when it is not one). */
void backend__url_display(const char *url, char *buf, size_t cap);
/* The decoded absolute path of a file:// URL (malloc'd). Returns 0, -EINVAL
 * (another host, a query, a bad escape; *why says which, a static string)
 * or -ENOMEM. */
int backend__file_url_path(const char *url, char **path, const char **why);

/* A parsed endpoint URL: "http(s)://host[:port][/path]" (backend_url.c;
 * -EINVAL with userinfo, a query or a fragment). */
struct backend_endpoint {
	int https;
	char host[256]; /* host[:port] as curl sends it in Host (default port dropped) */
	char path[256]; /* the endpoint's own path without trailing '/': "" or "/s3" */
	char base[512]; /* scheme://host[:port] + path */
};
int backend__endpoint_parse(struct backend_endpoint *ep, const char *url);

/* The object stores' shared core (backend_s3.c), also used by ais://. */
enum os_kind { OS_S3, OS_GS, OS_AIS };
enum os_auth { OS_AUTH_NONE, OS_AUTH_SIGV4, OS_AUTH_BEARER };

struct backend_objstore {
	enum os_kind kind;
	enum os_auth auth;
	struct backend_io *io;
	struct backend_endpoint ep;
	char region[64];
	struct backend_credsrc *creds; /* NULL: no signing */
	char *bucket;
	char *prefix;	   /* raw key prefix: "" or ends with '/' */
	char *list_path;   /* encoded request paths, ep.path included */
	char *head_prefix; /* + encode(prefix + key) */
	char *get_prefix;
	const char *head_query; /* static strings */
	const char *get_query;
	char *ca_file;
	unsigned head_window; /* HEADs in flight in a stat_many: 4 x connections */
	/* 1: the endpoint answered a HEAD sent ahead itself (no redirect): no
	 * more are sent ahead (backend_head_ahead) */
	atomic_int head_direct;
};

/* backend_batch_read of an ais:// store (backend_ais_batch.c), the
 * object stores' batch_read for kind OS_AIS. */
int backend__ais_batch_read(struct backend *be, const struct backend_batch_item *items, size_t n,
			    backend_batch_sink_cb cb, void *arg, int *err);
int backend__ais_batch_submit(struct backend *be, const struct backend_batch_item *items, size_t n,
			      backend_batch_sink_cb cb, void *arg, int *err,
			      backend_batch_done_cb done, void *darg);

int backend__os_open(struct backend *be, enum os_kind kind, const char *source,
		     const struct backend_config *cfg);
/* The object stores' HEAD (backend_s3.c): its URL for key (malloc'd; NULL:
 * no memory or a key too long), and the whole HEAD (the stat op). */
char *backend__os_head_url(struct backend_objstore *os, const char *key);
int backend__os_stat(struct backend *be, const char *key, struct backend_objinfo *info);
/* backend_head_ahead and its follow and drop for the object stores
 * (backend_ais_head.c): AIStore's only (another kind sends none ahead). */
struct backend_head_ahead *backend__ais_head_ahead(struct backend *be, const char *key);
int backend__ais_head_follow(struct backend *be, struct backend_head_ahead *h, const char *key,
			     struct backend_objinfo *info);
void backend__ais_head_drop(struct backend *be, struct backend_head_ahead *h);
int backend__ais_head_follow_submit(struct backend *be, struct backend_head_ahead *h,
				    const char *key, struct backend_objinfo *info,
				    backend_head_done_cb done, void *arg);
void backend__ais_head_drop_nowait(struct backend *be, struct backend_head_ahead *h);
int backend__ais_head_follow_many(struct backend *be, struct backend_head_ahead *const *h,
				  const char *const *keys, size_t n, struct backend_objinfo *info,
				  int *err);

/* ---- http(s): backend_http.c, with pure parsers that the unit tests call
 * directly (backend_brace.c, backend_listing.c) ---------------------------- */

/* Most names one SOURCE may expand to. */
#define BACKEND_BRACE_MAX 1000000

/* Expand WebDataset brace notation: "{A..B}" with decimal A, B (ascending
 * or descending; zero padding to the longer width when A or B starts with
 * '0' and has more than one digit), "{a,b,c}" lists (items may be empty),
 * several braces in one pattern (cartesian product, leftmost varies
 * slowest). A brace holding neither ',' nor ".." is kept literally, as
 * bash does. Nested or unbalanced braces are malformed. On success *out is
 * a malloc'd array of *n malloc'd strings (free with backend__strv_free).
 * Returns 0, -EINVAL (malformed), -E2BIG (more than max names), -ENOMEM. */
int backend__brace_expand(const char *pattern, size_t max, char ***out, size_t *n);
void backend__strv_free(char **v, size_t n); /* accepts NULL */

/* Decode %XX escapes of in[0..len) into out (NUL-terminated). Returns the
 * length, -EINVAL for a bad escape or an encoded NUL, -ENAMETOOLONG when
 * out is too small. '+' stays '+' (paths are not form data). */
ssize_t backend__pct_decode(const char *in, size_t len, char *out, size_t cap);

/* One entry of a directory listing, already checked: name is one decoded
 * path component, not empty, not "." or "..", without '/' or NUL. */
struct backend__listent {
	const char *name;
	int is_dir;
	int has_size; /* size is known (JSON files); HTML never has one */
	uint64_t size;
	int64_t mtime; /* seconds since the epoch, 0 when unknown */
};
typedef int (*backend__listent_cb)(void *arg, const struct backend__listent *e);

/* Parse an autoindex page: nginx "autoindex_format json" (a JSON array of
 * {"name","type","mtime","size"}) when the first non-blank byte is '[',
 * else HTML <a href="..."> links of direct children. Entries that are not
 * safe or not understood are skipped. Returns 0, -EINVAL for a malformed
 * JSON document, or the first non-zero value of cb. */
int backend__listing_parse(const char *body, size_t len, backend__listent_cb cb, void *arg);
int backend__listing_json(const char *body, size_t len, backend__listent_cb cb, void *arg);
int backend__listing_html(const char *body, size_t len, backend__listent_cb cb, void *arg);

#endif
