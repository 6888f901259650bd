/*
 * backend_s3_refused.c — why an S3 store refused a listing, in words that
 * name the cause: the credentials, anonymous access, or the region (the
 * requests signed for one region, the bucket in another: S3's
 * AuthorizationHeaderMalformed names the region it wants; said as "access
 * denied" a user checks keys that are right). backend_s3.c's listing calls
 * it with the answer's status and error body; its failed HEADs and GETs
 * ask it whether the answer named the bucket's region (a 301
 * PermanentRedirect, or a HEAD's 400 or 403, say it only in their
 * x-amz-bucket-region header: backend_io_attempt.c keeps it).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend_i.h"
#include "backend_io_i.h"

/* A region name at s (up to n bytes, ending at term or n): 1 and it in
 * out (cap >= 64), else 0. A region is letters, digits, '-', '_', '.'. */
static int region_at(const char *s, size_t n, char term, char *out, size_t cap)
{
	size_t i;

	for (i = 0; i < n && i + 1 < cap && s[i] != term; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return 0;
		out[i] = c;
	}
	if (i == 0 || i >= n || s[i] != term)
		return 0;
	out[i] = '\0';
	return 1;
}

/* The region a refusal asks for: its x-amz-bucket-region header, else
 * S3's <Region> of its error body (AuthorizationHeaderMalformed,
 * PermanentRedirect), else the message's "expecting 'R'" (S3's and its
 * stand-ins' words). 1 and it in out, or 0. */
static int region_asked(const struct backend_req *r, const char *msg, char *out, size_t cap)
{
	static const char tag[] = "<Region>", exp[] = "expecting '";
	const char *p = memmem(r->errbody, r->errbody_len, tag, sizeof(tag) - 1);

	if (region_at(r->bucket_region, strlen(r->bucket_region) + 1, '\0', out, cap))
		return 1;
	if (p) {
		p += sizeof(tag) - 1;
		if (region_at(p, (size_t)(r->errbody + r->errbody_len - p), '<', out, cap))
			return 1;
	}
	p = strstr(msg, exp);
	return p && region_at(p + sizeof(exp) - 1, strlen(p + sizeof(exp) - 1), '\'', out, cap);
}

/* A refusal for the region (the requests are signed for another one than
 * the bucket's, or sent to another region's endpoint): said as such, not
 * as "access denied" (a user checks the keys, which are right). 1 when r
 * is one, with the error set; else 0. */
static int region_refused(struct backend *be, const struct backend_req *r, const char *region,
			  const char *what, const char *code, const char *msg)
{
	char want[64];
	int named = region_asked(r, msg, want, sizeof(want));

	if (named && strcmp(want, region) == 0)
		return 0; /* the same region: not the cause */
	if (!named && strcmp(code, "PermanentRedirect") != 0 &&
	    strcmp(code, "IllegalLocationConstraintException") != 0 &&
	    !(strcmp(code, "AuthorizationHeaderMalformed") == 0 && strstr(msg, "region")))
		return 0;
	if (named)
		backend__set_error(
		    be,
		    "%s: %sthe bucket is in region '%s', and the requests were signed "
		    "for region '%s' (AWS_REGION, else AWS_DEFAULT_REGION, else "
		    "us-east-1): set AWS_REGION=%s (HTTP %ld%s%s%s%s)",
		    be->desc, what, want, region, want, r->status, code[0] ? " " : "", code,
		    msg[0] ? ": " : "", msg);
	else
		backend__set_error(be,
				   "%s: %sthe bucket is in another region than '%s', the one the "
				   "requests were signed for (AWS_REGION, else AWS_DEFAULT_REGION, "
				   "else us-east-1), and the store does not say which: set "
				   "AWS_REGION to the bucket's (HTTP %ld%s%s%s%s)",
				   be->desc, what, region, r->status, code[0] ? " " : "", code,
				   msg[0] ? ": " : "", msg);
	return 1;
}

int backend__s3_region_failed(struct backend *be, const char *method, const char *key,
			      const struct backend_req *r, const char *region)
{
	char code[128], msg[384], what[160];

	if (r->status != 301 && r->status != 400 && r->status != 403)
		return 0;
	backend__errbody_parse(r->errbody, r->errbody_len, code, sizeof(code), msg, sizeof(msg));
	snprintf(what, sizeof(what), "%s %.*s%s: ", method, 120, key,
		 strlen(key) > 120 ? "..." : "");
	return region_refused(be, r, region, what, code, msg);
}

int backend__s3_refused(struct backend *be, const struct backend_req *r, const char *region,
			int anonymous, int err)
{
	char code[128], msg[384];
	const char *what;

	backend__errbody_parse(r->errbody, r->errbody_len, code, sizeof(code), msg, sizeof(msg));
	if (region_refused(be, r, region, "", code, msg))
		return -EREMCHG;
	if (strcmp(code, "SignatureDoesNotMatch") == 0 || strcmp(code, "InvalidAccessKeyId") == 0 ||
	    strcmp(code, "InvalidToken") == 0 || strcmp(code, "ExpiredToken") == 0 ||
	    strcmp(code, "InvalidSecurity") == 0)
		what = "the credentials were refused";
	else if (r->status == 400)
		what = "the request was refused";
	else if (anonymous)
		what = "access denied to anonymous requests (--no-sign)";
	else
		what = "access denied";
	backend__set_error(be, "%s: %s (HTTP %ld%s%s%s%s)", be->desc, what, r->status,
			   code[0] ? " " : "", code, msg[0] ? ": " : "", msg);
	return err;
}
