/*
 * backend_creds_http.c — the credential services asked over HTTP: STS
 * AssumeRoleWithWebIdentity, the container endpoint (ECS/EKS), the EC2
 * instance metadata service (IMDSv2) and the GCE metadata server
 * (backend__creds_fetch_webid/_container/_imds/_gce), with one blocking curl
 * easy handle per request on the calling thread (never on the I/O loop).
 *
 * Contract: each request is bounded by the source's timeout_ms (a metadata
 * service is asked up to s->attempts times: AWS_METADATA_SERVICE_NUM_ATTEMPTS);
 * an answer is at most CREDS_HTTP_MAX bytes, in secret memory; metadata
 * services are never asked through a proxy. Errors come back as a negative
 * errno with a one-line why that never holds a secret.
 *
 * Non-goals: redirects (never followed: backend__curl_harden), SSO.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "backend_creds_i.h"

/* ---- HTTP (blocking, on the calling thread) ----------------------------------- */

struct http_call {
	const char *method; /* "GET", "PUT", "POST" */
	const char *url;
	struct curl_slist *hdrs;
	const char *body; /* POST body, or NULL */
	size_t bodylen;
	long timeout_ms;
	const char *ca_file;
	int no_proxy; /* metadata services: never through a proxy */
	/* results */
	long status;
	int google; /* the answer had Metadata-Flavor: Google */
	char *resp; /* secret memory of CREDS_HTTP_MAX + 1 bytes, NUL-terminated */
	size_t resplen;
	int toolong;
};

static size_t http_write(char *d, size_t sz, size_t n, void *arg)
{
	struct http_call *c = arg;
	size_t len = sz * n;

	if (len > CREDS_HTTP_MAX - c->resplen) {
		c->toolong = 1;
		return 0;
	}
	memcpy(c->resp + c->resplen, d, len);
	c->resplen += len;
	c->resp[c->resplen] = '\0';
	backend__creds_regs_clear();
	return len;
}

static size_t http_header(char *d, size_t sz, size_t n, void *arg)
{
	struct http_call *c = arg;
	size_t len = sz * n;
	static const char want[] = "metadata-flavor:";

	if (len > sizeof(want) - 1 && strncasecmp(d, want, sizeof(want) - 1) == 0) {
		const char *v = d + sizeof(want) - 1, *e = d + len;

		backend__creds_trim(&v, &e);
		while (e > v && (e[-1] == '\n' || e[-1] == '\r'))
			e--;
		c->google = (size_t)(e - v) == 6 && memcmp(v, "Google", 6) == 0;
	}
	return len;
}

/* Perform c. Returns 0 with c->status and c->resp (free with backend__creds_secret_free;
 * also on error), or -EIO / -ETIMEDOUT / -EMSGSIZE / -ENOMEM with why. */
static int http_perform(struct http_call *c, char *why, size_t whycap)
{
	CURL *e;
	CURLcode rc;
	int err = 0;

	c->status = 0;
	c->resplen = 0;
	c->google = 0;
	c->toolong = 0;
	c->resp = backend__creds_secret_alloc(CREDS_HTTP_MAX);
	e = curl_easy_init();
	if (!c->resp || !e) {
		if (e)
			curl_easy_cleanup(e);
		backend__creds_why(why, whycap, "out of memory");
		return -ENOMEM;
	}
	curl_easy_setopt(e, CURLOPT_URL, c->url);
	backend__curl_harden(e, c->ca_file);
	if (c->no_proxy)
		curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->timeout_ms);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->hdrs);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, http_write);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, http_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
	if (strcmp(c->method, "POST") == 0) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)c->bodylen);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->body ? c->body : "");
	} else if (strcmp(c->method, "PUT") == 0) {
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, 0L);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
	}
	rc = curl_easy_perform(e);
	if (rc == CURLE_OK) {
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &c->status);
	} else if (c->toolong) {
		backend__creds_why(why, whycap, "answer larger than %u bytes", CREDS_HTTP_MAX);
		err = -EMSGSIZE;
	} else if (rc == CURLE_OPERATION_TIMEDOUT) {
		backend__creds_why(why, whycap, "timed out: no answer within %.3g s",
				   (double)c->timeout_ms / 1000);
		err = -ETIMEDOUT;
	} else {
		backend__creds_why(why, whycap, "%s", curl_easy_strerror(rc));
		err = -EIO;
	}
	curl_easy_cleanup(e);
	backend__creds_regs_clear();
	return err;
}

/* One call to a metadata service, never through a proxy: up to
 * s->attempts tries of method on url until an answer (until: that status;
 * 0: any below 500). c->ca_file is the caller's. On a transport error,
 * with name_url, why starts with the url. Returns http_perform's result. */
static int meta_call(struct backend_credsrc *s, struct http_call *c, const char *method,
		     const char *url, struct curl_slist *h, long until, int name_url, char *why,
		     size_t whycap)
{
	int err = 0;

	c->method = method;
	c->url = url;
	c->hdrs = h;
	c->timeout_ms = s->timeout_ms;
	c->no_proxy = 1;
	for (int i = 0; i < s->attempts; i++) {
		backend__creds_secret_free(c->resp);
		c->resp = NULL;
		err = http_perform(c, why, whycap);
		if (err == 0 && (until ? c->status == until : c->status < 500))
			break;
	}
	if (err < 0 && name_url) {
		char tmp[256];

		snprintf(tmp, sizeof(tmp), "%s", why);
		backend__creds_why(why, whycap, "%s: %s", url, tmp);
	}
	return err;
}

/* A header line "name: value" with a secret value, made in secret memory;
 * curl copies it (and wipes its copy when freeing it). */
static int slist_secret(struct curl_slist **h, const char *name, const char *value)
{
	size_t n = strlen(name) + 2 + strlen(value);
	char *line = backend__creds_secret_alloc(n);
	struct curl_slist *l;

	if (!line)
		return -ENOMEM;
	snprintf(line, n + 1, "%s: %s", name, value);
	l = curl_slist_append(*h, line);
	backend__creds_secret_free(line);
	if (!l)
		return -ENOMEM;
	*h = l;
	return 0;
}

/* ---- the sources that fetch ----------------------------------------------- */

/* Append a header line without secrets to *h: 0, or -ENOMEM with *h as it was. */
static int slist_plain(struct curl_slist **h, const char *line)
{
	struct curl_slist *l = curl_slist_append(*h, line);

	if (!l)
		return -ENOMEM;
	*h = l;
	return 0;
}

/* The AssumeRoleWithWebIdentity form of s with the token tok, in secret
 * memory (*body; free with backend__creds_secret_free). Returns 0, -ENAMETOOLONG with why,
 * or -ENOMEM. */
static int webid_body(struct backend_credsrc *s, const char *tok, size_t toklen, char **body,
		      char *why, size_t whycap)
{
	char arn[4096], sess[256];
	char *enc = NULL;
	size_t bodycap;
	ssize_t na, ns;

	*body = NULL;
	/* form values, URL-encoded by the one encoder (the token into secret
	 * memory: curl_easy_escape would put it on the heap) */
	na = backend__uri_encode(arn, sizeof(arn), s->role_arn, strlen(s->role_arn), 0);
	ns = backend__uri_encode(sess, sizeof(sess), s->session_name, strlen(s->session_name), 0);
	if (na < 0 || ns < 0) {
		backend__creds_why(why, whycap,
				   "AWS_ROLE_ARN or AWS_ROLE_SESSION_NAME is too long");
		return -ENAMETOOLONG;
	}
	enc = backend__creds_secret_alloc(3 * toklen + 1);
	if (!enc)
		return -ENOMEM;
	if (backend__uri_encode(enc, 3 * toklen + 1, tok, toklen, 0) < 0) {
		backend__creds_secret_free(enc); /* cannot happen: 3 bytes a byte fit */
		return -ENOMEM;
	}
	bodycap = strlen(enc) + strlen(arn) + strlen(sess) + 128;
	*body = backend__creds_secret_alloc(bodycap);
	if (*body)
		snprintf(*body, bodycap + 1,
			 "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=%s"
			 "&RoleSessionName=%s&WebIdentityToken=%s",
			 arn, sess, enc);
	backend__creds_secret_free(enc);
	return *body ? 0 : -ENOMEM;
}

/* The Credentials of an AssumeRoleWithWebIdentity answer (XML) into out
 * and *exp. Returns 0, -EBADMSG or -ENOMEM. */
static int webid_creds(const char *resp, struct backend_creds *out, int64_t *exp)
{
	char *id = NULL, *secret = NULL, *token = NULL, *x = NULL;
	int err;

	err = backend__creds_xml_field(resp, "AccessKeyId", &id);
	if (!err)
		err = backend__creds_xml_field(resp, "SecretAccessKey", &secret);
	if (!err)
		err = backend__creds_xml_field(resp, "SessionToken", &token);
	if (!err)
		err = backend__creds_xml_field(resp, "Expiration", &x);
	if (!err && backend__iso8601_parse(x, strlen(x), exp) < 0)
		err = -EBADMSG;
	if (!err)
		err = backend__creds_take(out, &id, &secret, &token);
	backend__creds_secret_free(id);
	backend__creds_secret_free(secret);
	backend__creds_secret_free(token);
	backend__creds_secret_free(x);
	return err == -ENOMEM ? err : err < 0 ? -EBADMSG : 0;
}

int backend__creds_fetch_webid(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp,
			       char *why, size_t whycap)
{
	struct http_call c = {0};
	struct curl_slist *h = NULL;
	char *tok = NULL, *body = NULL;
	size_t toklen = 0;
	int err;

	memset(out, 0, sizeof(*out));
	err = backend__creds_slurp(s->token_file, &tok, &toklen);
	if (err < 0) {
		backend__creds_why(why, whycap, "cannot read AWS_WEB_IDENTITY_TOKEN_FILE %s: %s",
				   s->token_file, backend__creds_slurp_error(err));
		return err == -EINVAL ? -EACCES : err; /* not the source's fault */
	}
	while (toklen > 0 &&
	       (tok[toklen - 1] == '\n' || tok[toklen - 1] == '\r' || tok[toklen - 1] == ' '))
		tok[--toklen] = '\0';
	err = webid_body(s, tok, toklen, &body, why, whycap);
	if (err < 0)
		goto out;
	backend__creds_regs_clear();
	err = slist_plain(&h, "Content-Type: application/x-www-form-urlencoded");
	if (!err)
		err = slist_plain(&h, "Accept: application/xml");
	if (err < 0)
		goto out;
	c.method = "POST";
	c.url = s->url;
	c.hdrs = h;
	c.body = body;
	c.bodylen = strlen(body);
	c.timeout_ms = s->timeout_ms;
	c.ca_file = s->ca_file;
	err = http_perform(&c, why, whycap);
	if (err < 0)
		goto out;
	if (c.status != 200) {
		char *code = NULL, *msg = NULL;

		backend__creds_xml_field(c.resp, "Code", &code);
		backend__creds_xml_field(c.resp, "Message", &msg);
		backend__creds_why(
		    why, whycap, "STS %s answered HTTP %ld%s%s%s%s", s->url, c.status,
		    code ? " " : "", code && backend__creds_header_safe(code) ? code : "",
		    msg ? ": " : "", msg && backend__creds_header_safe(msg) ? msg : "");
		backend__creds_secret_free(code);
		backend__creds_secret_free(msg);
		err = c.status == 400 || c.status == 403 ? -EACCES : -EIO;
		goto out;
	}
	err = webid_creds(c.resp, out, exp);
	if (err == -EBADMSG)
		backend__creds_why(
		    why, whycap,
		    "STS %s: the AssumeRoleWithWebIdentity answer has no usable Credentials",
		    s->url);
out:
	if (err == -ENOMEM && !why[0])
		backend__creds_why(why, whycap, "out of memory");
	curl_slist_free_all(h);
	backend__creds_secret_free(c.resp);
	backend__creds_secret_free(tok);
	backend__creds_secret_free(body);
	if (err < 0)
		backend__creds_clear(out);
	return err;
}

int backend__creds_fetch_container(struct backend_credsrc *s, struct backend_creds *out,
				   int64_t *exp, char *why, size_t whycap)
{
	struct http_call c = {0};
	struct curl_slist *h = NULL;
	char *auth = NULL;
	size_t alen = 0;
	int err = 0;

	memset(out, 0, sizeof(*out));
	if (s->token_file) {
		err = backend__creds_slurp(s->token_file, &auth, &alen);
		if (err < 0) {
			backend__creds_why(
			    why, whycap,
			    "cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE %s: %s",
			    s->token_file, backend__creds_slurp_error(err));
			return err == -EINVAL ? -EACCES : err;
		}
		while (alen > 0 && (auth[alen - 1] == '\n' || auth[alen - 1] == '\r'))
			auth[--alen] = '\0';
	} else {
		err = backend__creds_env_secret("AWS_CONTAINER_AUTHORIZATION_TOKEN", &auth);
		if (err < 0)
			return err;
	}
	if (auth && !backend__creds_header_safe(auth)) {
		backend__creds_why(why, whycap,
				   "the container authorization token has control characters");
		err = -EINVAL;
		goto out;
	}
	if (auth && auth[0] && (err = slist_secret(&h, "Authorization", auth)) < 0)
		goto out;
	err = slist_plain(&h, "Accept: application/json");
	if (err < 0)
		goto out;
	c.ca_file = s->ca_file;
	err = meta_call(s, &c, "GET", s->url, h, 200, 0, why, whycap);
	if (err < 0)
		goto out;
	if (c.status != 200) {
		backend__creds_why(why, whycap, "%s answered HTTP %ld", s->url, c.status);
		err = c.status == 401 || c.status == 403 ? -EACCES : -EIO;
		goto out;
	}
	err = backend__creds_from_json(c.resp, c.resplen, "Token", out, exp, why, whycap);
out:
	curl_slist_free_all(h);
	backend__creds_secret_free(c.resp);
	backend__creds_secret_free(auth);
	return err;
}

static int imds_get(struct backend_credsrc *s, const char *path, const char *token,
		    struct http_call *c, char *why, size_t whycap)
{
	struct curl_slist *h = NULL;
	char url[1024];
	int err = 0;

	snprintf(url, sizeof(url), "%s%s", s->url, path);
	if (token && (err = slist_secret(&h, "X-aws-ec2-metadata-token", token)) < 0)
		return err;
	memset(c, 0, sizeof(*c));
	err = meta_call(s, c, "GET", url, h, 0, 1, why, whycap);
	curl_slist_free_all(h);
	if (err == 0 && c->status != 200) {
		backend__creds_why(why, whycap, "%s answered HTTP %ld", url, c->status);
		err = c->status == 404 ? -ENOENT : -EIO;
	}
	return err;
}

/* IMDSv2's session token of s (a PUT): 0 and *token (NULL from a service
 * that is IMDSv1 only: 403, 404 or 405, as botocore takes them), or the
 * error, said in why. */
static int imds_token(struct backend_credsrc *s, char **token, char *why, size_t whycap)
{
	struct http_call c = {0};
	struct curl_slist *h;
	char url[1024];
	int err;

	*token = NULL;
	snprintf(url, sizeof(url), "%s/latest/api/token", s->url);
	h = curl_slist_append(NULL, "X-aws-ec2-metadata-token-ttl-seconds: 21600");
	if (!h)
		return -ENOMEM;
	err = meta_call(s, &c, "PUT", url, h, 0, 1, why, whycap);
	curl_slist_free_all(h);
	if (err == 0 && c.status == 200) {
		if (!c.resp[0] || !backend__creds_header_safe(c.resp)) {
			backend__creds_why(why, whycap,
					   "%s: the session token is empty or malformed", url);
			err = -EBADMSG;
		} else {
			*token = c.resp;
			c.resp = NULL;
		}
	} else if (err == 0 && c.status != 403 && c.status != 404 && c.status != 405) {
		backend__creds_why(why, whycap, "%s answered HTTP %ld", url, c.status);
		err = -EIO;
	}
	backend__creds_secret_free(c.resp);
	return err;
}

/* The instance's IAM role into s->role, unless known: 0, or the error,
 * said in why (c holds the answer, the caller frees it). */
static int imds_role(struct backend_credsrc *s, const char *token, struct http_call *c, char *why,
		     size_t whycap)
{
	const char *r, *re;
	int err;

	if (s->role[0])
		return 0;
	err = imds_get(s, "/latest/meta-data/iam/security-credentials/", token, c, why, whycap);
	if (err < 0)
		return err;
	r = c->resp;
	re = strchr(r, '\n');
	re = re ? re : r + c->resplen;
	backend__creds_trim(&r, &re);
	if (re == r || (size_t)(re - r) >= sizeof(s->role) || memchr(r, '/', (size_t)(re - r)) ||
	    !backend__creds_header_safe(c->resp)) {
		backend__creds_why(why, whycap, "%s: no IAM role in the instance metadata", s->url);
		return -ENOENT;
	}
	memcpy(s->role, r, (size_t)(re - r));
	s->role[re - r] = '\0';
	backend__creds_secret_free(c->resp);
	c->resp = NULL;
	return 0;
}

/* The role's credentials document in c (from path): -EIO, said in why,
 * when its Code is not Success; else 0. */
static int imds_code_ok(const struct backend_credsrc *s, const char *path,
			const struct http_call *c, char *why, size_t whycap)
{
	char *code = NULL;
	int err = 0;

	if (backend__creds_json_field(c->resp, c->resplen, "Code", &code) == 0 &&
	    strcmp(code, "Success") != 0) {
		backend__creds_why(why, whycap, "%s%s: Code is %.64s", s->url, path,
				   backend__creds_header_safe(code) ? code : "?");
		err = -EIO;
	}
	backend__creds_secret_free(code);
	return err;
}

int backend__creds_fetch_imds(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp,
			      char *why, size_t whycap)
{
	struct http_call c = {0};
	char path[512];
	char *token = NULL;
	int err;

	memset(out, 0, sizeof(*out));
	err = imds_token(s, &token, why, whycap);
	if (err < 0)
		goto out;
	/* the role name (once; looked up again when it is gone) */
	for (int pass = 0; pass < 2; pass++) {
		err = imds_role(s, token, &c, why, whycap);
		if (err < 0)
			goto out;
		snprintf(path, sizeof(path), "/latest/meta-data/iam/security-credentials/%s",
			 s->role);
		err = imds_get(s, path, token, &c, why, whycap);
		if (err == -ENOENT && pass == 0) {
			s->role[0] = '\0';
			backend__creds_secret_free(c.resp);
			c.resp = NULL;
			continue;
		}
		break;
	}
	if (err < 0)
		goto out;
	err = imds_code_ok(s, path, &c, why, whycap);
	if (err < 0)
		goto out;
	err = backend__creds_from_json(c.resp, c.resplen, "Token", out, exp, why, whycap);
	if (err < 0) {
		char tmp[256];

		snprintf(tmp, sizeof(tmp), "%s", why);
		backend__creds_why(why, whycap, "%s%s: %s", s->url, path, tmp);
	}
out:
	backend__creds_secret_free(c.resp);
	backend__creds_secret_free(token);
	return err;
}

int backend__creds_fetch_gce(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp,
			     char *why, size_t whycap)
{
	struct http_call c = {0};
	struct curl_slist *h;
	char url[1024];
	char *tok = NULL, *ttl = NULL, *type = NULL;
	int err = 0;

	memset(out, 0, sizeof(*out));
	snprintf(url, sizeof(url),
		 "http://%s/computeMetadata/v1/instance/service-accounts/default/token", s->url);
	h = curl_slist_append(NULL, "Metadata-Flavor: Google");
	if (!h)
		return -ENOMEM;
	err = meta_call(s, &c, "GET", url, h, 0, 1, why, whycap);
	curl_slist_free_all(h);
	if (err < 0)
		goto out;
	if (c.status != 200 || !c.google) {
		backend__creds_why(why, whycap, "%s answered HTTP %ld%s", url, c.status,
				   c.google ? "" : " without Metadata-Flavor: Google");
		err = c.status == 403 || c.status == 401 ? -EACCES : -EIO;
		goto out;
	}
	err = backend__creds_json_field(c.resp, c.resplen, "access_token", &tok);
	if (err == 0)
		err = backend__creds_json_field(c.resp, c.resplen, "expires_in", &ttl);
	if (err == 0 && backend__creds_json_field(c.resp, c.resplen, "token_type", &type) == 0 &&
	    strcasecmp(type, "Bearer") != 0)
		err = -EBADMSG;
	if (err == 0) {
		char *end;
		long long t;

		errno = 0;
		t = strtoll(ttl, &end, 10);
		if (errno || end == ttl || *end || t <= 0 || t > 7 * 86400 || !tok[0] ||
		    !backend__creds_header_safe(tok))
			err = -EBADMSG;
		else
			*exp = (int64_t)time(NULL) + t;
	}
	if (err < 0) {
		if (err != -ENOMEM)
			backend__creds_why(why, whycap,
					   "%s: the answer has no usable access_token/expires_in",
					   url);
		err = err == -ENOMEM ? err : -EBADMSG;
		goto out;
	}
	out->bearer = tok;
	tok = NULL;
out:
	backend__creds_secret_free(c.resp);
	backend__creds_secret_free(tok);
	backend__creds_secret_free(ttl);
	backend__creds_secret_free(type);
	return err;
}
