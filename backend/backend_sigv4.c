/*
 * backend_sigv4.c — AWS Signature Version 4 for header-signed requests.
 *
 * Pure functions: no I/O, no clock, no logging. The caller (backend_s3.c,
 * in the sign callback of each attempt) passes the time, the request's
 * parts and the credentials, and gets the header values to send.
 *
 * Canonical request (S3 rules, as botocore's S3SigV4Auth does):
 *   METHOD \n CANONICAL_URI \n CANONICAL_QUERY \n CANONICAL_HEADERS \n
 *   SIGNED_HEADERS \n PAYLOAD_HASH
 * - the URI is the path exactly as sent: S3 keys are encoded once per
 *   segment by whoever builds the URL (backend__uri_encode keep_slash=1),
 *   and never normalised or encoded twice (that is the rule of the other
 *   AWS services, which shardfs does not talk to);
 * - the query is built by backend__sigv4_query, whose output is also the
 *   query sent, so the two can never disagree;
 * - headers: lower-cased names sorted, values trimmed with inner runs of
 *   spaces collapsed. host, x-amz-date and (for S3) x-amz-content-sha256
 *   are always signed; x-amz-security-token when there is a session token;
 *   whatever else the caller lists. shardfs does not sign Range: the engine
 *   may rewrite it when it resumes a transfer, and S3 does not require it.
 *
 * Secrets: the derived keys, the "AWS4"+secret buffer and the canonical
 * request (it holds the session token) live on the stack and are cleansed
 * (OPENSSL_cleanse) before return; OpenSSL's HMAC clears its own copies of
 * the key when it frees them. Nothing here logs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "backend_i.h"

#define SIGV4_MAX_HEADERS 16
#define SIGV4_CANON_MAX	  16384

struct qpair {
	char *name;
	char *value;
};

static int qpair_cmp(const void *a, const void *b)
{
	const struct qpair *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : strcmp(x->value, y->value);
}

static char *encode_dup(const char *s)
{
	size_t len = s ? strlen(s) : 0;
	size_t cap = len * 3 + 1;
	char *d = malloc(cap);

	if (!d)
		return NULL;
	if (backend__uri_encode(d, cap, s ? s : "", len, 0) < 0) {
		free(d);
		return NULL;
	}
	return d;
}

ssize_t backend__sigv4_query(char *dst, size_t cap, const struct backend_kv *params, size_t n)
{
	struct qpair *p;
	size_t o = 0;
	ssize_t ret;

	if (cap == 0)
		return -ENAMETOOLONG;
	dst[0] = '\0';
	if (n == 0)
		return 0;
	p = calloc(n, sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		p[i].name = encode_dup(params[i].name);
		p[i].value = encode_dup(params[i].value);
		if (!p[i].name || !p[i].value) {
			ret = -ENOMEM;
			goto out;
		}
	}
	qsort(p, n, sizeof(*p), qpair_cmp);
	for (size_t i = 0; i < n; i++) {
		int w = snprintf(dst + o, cap - o, "%s%s=%s", i ? "&" : "", p[i].name, p[i].value);

		if (w < 0 || (size_t)w >= cap - o) {
			dst[0] = '\0';
			ret = -ENAMETOOLONG;
			goto out;
		}
		o += (size_t)w;
	}
	ret = (ssize_t)o;
out:
	for (size_t i = 0; i < n; i++) {
		free(p[i].name);
		free(p[i].value);
	}
	free(p);
	return ret;
}

/* ---- canonical request ---------------------------------------------------- */

struct hdr {
	char name[64];
	const char *value;
};

static int hdr_cmp(const void *a, const void *b)
{
	return strcmp(((const struct hdr *)a)->name, ((const struct hdr *)b)->name);
}

struct buf {
	char *p;
	size_t len, cap;
	int overflow;
};

static void buf_put(struct buf *b, const char *s, size_t n)
{
	if (b->overflow || n >= b->cap - b->len) {
		b->overflow = 1;
		return;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void buf_str(struct buf *b, const char *s)
{
	buf_put(b, s, strlen(s));
}

/* Trimall: drop leading/trailing blanks, collapse inner runs of spaces. */
static void buf_trimall(struct buf *b, const char *v)
{
	int space = 0, any = 0;

	for (; *v; v++) {
		if (*v == ' ' || *v == '\t') {
			space = any;
			continue;
		}
		if (space)
			buf_put(b, " ", 1);
		space = 0;
		any = 1;
		buf_put(b, v, 1);
	}
}

static void hex_of(char *out, const unsigned char *d, size_t n)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[d[i] >> 4];
		out[2 * i + 1] = hex[d[i] & 15];
	}
	out[2 * n] = '\0';
}

static int sha256_hex(char out[65], const char *s, size_t n)
{
	unsigned char d[SHA256_DIGEST_LENGTH];

	if (!SHA256((const unsigned char *)s, n, d))
		return -EIO;
	hex_of(out, d, sizeof(d));
	return 0;
}

static int hmac(unsigned char out[32], const void *key, size_t keylen, const char *msg, size_t n)
{
	unsigned int olen = 0;

	if (!HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg, n, out, &olen) ||
	    olen != 32)
		return -EIO;
	return 0;
}

static int valid_token(const char *s, size_t max)
{
	size_t n = 0;

	for (; *s; s++, n++)
		if ((unsigned char)*s < 0x21 || (unsigned char)*s > 0x7e || *s == '/' || n >= max)
			return 0;
	return n > 0;
}

/* The headers to sign, lower-cased and sorted, into h (room for
 * rq->nheaders + 4): rq's, then host, x-amz-date, and the content hash and
 * session token headers when they are sent. Returns the count, or -EINVAL
 * (a name empty or too long, or given twice). */
static int sign_headers(const struct backend_sigv4_req *rq, const struct backend_creds *cr,
			const struct backend_sigv4_out *out, struct hdr *h)
{
	size_t nh = 0;

	for (size_t i = 0; i < rq->nheaders; i++) {
		size_t n = strlen(rq->headers[i].name);

		if (n == 0 || n >= sizeof(h[0].name))
			return -EINVAL;
		for (size_t j = 0; j <= n; j++) {
			char c = rq->headers[i].name[j];

			h[nh].name[j] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
		}
		h[nh].value = rq->headers[i].value ? rq->headers[i].value : "";
		nh++;
	}
	snprintf(h[nh].name, sizeof(h[nh].name), "host");
	h[nh++].value = rq->host;
	snprintf(h[nh].name, sizeof(h[nh].name), "x-amz-date");
	h[nh++].value = out->amz_date;
	if (rq->content_sha256) {
		snprintf(h[nh].name, sizeof(h[nh].name), "x-amz-content-sha256");
		h[nh++].value = out->payload_hash;
	}
	if (cr->session_token && cr->session_token[0]) {
		snprintf(h[nh].name, sizeof(h[nh].name), "x-amz-security-token");
		h[nh++].value = cr->session_token;
	}
	qsort(h, nh, sizeof(h[0]), hdr_cmp);
	for (size_t i = 1; i < nh; i++)
		if (strcmp(h[i - 1].name, h[i].name) == 0)
			return -EINVAL; /* a header given twice (e.g. host) */
	return (int)nh;
}

/* The canonical request of rq with the sorted headers h into canon (it
 * may hold the session token: the caller wipes it), their names into sh. */
static void sign_canon(const struct backend_sigv4_req *rq, const struct hdr *h, size_t nh,
		       const char *payload_hash, struct buf *canon, struct buf *sh)
{
	buf_str(canon, rq->method);
	buf_str(canon, "\n");
	buf_str(canon, rq->path);
	buf_str(canon, "\n");
	buf_str(canon, rq->query ? rq->query : "");
	buf_str(canon, "\n");
	for (size_t i = 0; i < nh; i++) {
		buf_str(canon, h[i].name);
		buf_str(canon, ":");
		buf_trimall(canon, h[i].value);
		buf_str(canon, "\n");
		if (i)
			buf_str(sh, ";");
		buf_str(sh, h[i].name);
	}
	buf_str(canon, "\n");
	buf_str(canon, sh->p);
	buf_str(canon, "\n");
	buf_str(canon, payload_hash);
}

/* The hex signature of the string to sign sts (stslen bytes): the HMAC
 * chain from "AWS4" + secret (slen bytes, at most 256) over date, region,
 * service. Wipes the keys it derives. Returns 0 or a negative errno. */
static int sign_hmac(char sighex[65], const char *secret, size_t slen, const char *date,
		     const struct backend_sigv4_req *rq, const char *sts, size_t stslen)
{
	unsigned char k1[32], k2[32], k3[32], k4[32], sig[32];
	char ksecret[4 + 256];
	int err;

	memcpy(ksecret, "AWS4", 4);
	memcpy(ksecret + 4, secret, slen);
	if ((err = hmac(k1, ksecret, 4 + slen, date, 8)) < 0 ||
	    (err = hmac(k2, k1, 32, rq->region, strlen(rq->region))) < 0 ||
	    (err = hmac(k3, k2, 32, rq->service, strlen(rq->service))) < 0 ||
	    (err = hmac(k4, k3, 32, "aws4_request", 12)) < 0 ||
	    (err = hmac(sig, k4, 32, sts, stslen)) < 0)
		goto out;
	hex_of(sighex, sig, sizeof(sig));
out:
	OPENSSL_cleanse(ksecret, sizeof(ksecret));
	OPENSSL_cleanse(k1, sizeof(k1));
	OPENSSL_cleanse(k2, sizeof(k2));
	OPENSSL_cleanse(k3, sizeof(k3));
	OPENSSL_cleanse(k4, sizeof(k4));
	OPENSSL_cleanse(sig, sizeof(sig));
	return err;
}

int backend__sigv4_sign(const struct backend_sigv4_req *rq, const struct backend_creds *cr,
			struct backend_sigv4_out *out)
{
	struct hdr h[SIGV4_MAX_HEADERS + 4];
	int nh;
	char canon_mem[SIGV4_CANON_MAX], signed_mem[1024], sts[512], date[9], crhash[65];
	struct buf canon = {canon_mem, 0, sizeof(canon_mem), 0};
	struct buf sh = {signed_mem, 0, sizeof(signed_mem), 0};
	char sighex[65];
	size_t slen;
	struct tm tm;
	int w, err = 0;

	memset(out, 0, sizeof(*out));
	if (!rq || !cr || !rq->method || !rq->host || !rq->path || !rq->region || !rq->service ||
	    !cr->access_key || !cr->secret_key || rq->path[0] != '/')
		return -EINVAL;
	if (rq->nheaders > SIGV4_MAX_HEADERS)
		return -E2BIG;
	/* the key id and scope go into a header verbatim: no separators in them */
	if (!valid_token(cr->access_key, 128) || !valid_token(rq->region, 64) ||
	    !valid_token(rq->service, 64))
		return -EINVAL;
	slen = strlen(cr->secret_key);
	if (slen == 0 || slen > 256)
		return -EINVAL;
	if (!gmtime_r(&rq->now, &tm) ||
	    strftime(out->amz_date, sizeof(out->amz_date), "%Y%m%dT%H%M%SZ", &tm) != 16)
		return -EINVAL;
	memcpy(date, out->amz_date, 8);
	date[8] = '\0';
	snprintf(out->payload_hash, sizeof(out->payload_hash), "%s",
		 rq->payload_hash ? rq->payload_hash : "UNSIGNED-PAYLOAD");
	nh = sign_headers(rq, cr, out, h);
	if (nh < 0)
		return nh;
	sign_canon(rq, h, (size_t)nh, out->payload_hash, &canon, &sh);
	if (canon.overflow || sh.overflow) {
		err = -ENAMETOOLONG;
		goto out;
	}
	err = sha256_hex(crhash, canon.p, canon.len);
	if (err < 0)
		goto out;
	/* string to sign */
	w = snprintf(sts, sizeof(sts), "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s",
		     out->amz_date, date, rq->region, rq->service, crhash);
	if (w < 0 || (size_t)w >= sizeof(sts)) {
		err = -ENAMETOOLONG;
		goto out;
	}
	err = sign_hmac(sighex, cr->secret_key, slen, date, rq, sts, (size_t)w);
	if (err < 0)
		goto out;
	w = snprintf(out->authorization, sizeof(out->authorization),
		     "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=%s, "
		     "Signature=%s",
		     cr->access_key, date, rq->region, rq->service, sh.p, sighex);
	if (w < 0 || (size_t)w >= sizeof(out->authorization)) {
		out->authorization[0] = '\0';
		err = -ENAMETOOLONG;
	}
out:
	/* the canonical request holds the session token */
	OPENSSL_cleanse(canon_mem, canon.len + 1);
	backend__creds_regs_clear();
	return err;
}
