/*
 * backend_creds.c — where object-store credentials, regions and endpoints
 * come from: the environment and the usual files, never argv (DESIGN.md
 * section 1).
 *
 * AWS order (as the AWS CLI): AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY
 * (+ AWS_SESSION_TOKEN), else the [AWS_PROFILE] section ("default" when
 * unset) of AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials. GCS:
 * GOOGLE_OAUTH_ACCESS_TOKEN (sent as a bearer token), else HMAC keys from
 * GCS_HMAC_ACCESS_ID + GCS_HMAC_SECRET, else the AWS ones.
 *
 * Non-goals: instance metadata (IMDS), SSO, credential_process, assume-role
 * profiles: they need network calls or other programs at mount time.
 *
 * Secrets are copied into heap buffers that backend__creds_clear zeroes
 * (OPENSSL_cleanse) before freeing. Nothing here logs or formats a secret.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "backend_i.h"

/* A credentials file larger than this is not a credentials file. */
#define CREDS_FILE_MAX (1u << 20)

static void secret_free(char *s)
{
	if (s) {
		OPENSSL_cleanse(s, strlen(s));
		free(s);
	}
}

void backend__creds_clear(struct backend_creds *c)
{
	if (!c)
		return;
	free(c->access_key);
	secret_free(c->secret_key);
	secret_free(c->session_token);
	secret_free(c->bearer);
	memset(c, 0, sizeof(*c));
}

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

static int set(char **dst, const char *s, size_t n)
{
	char *d = strndup(s, n);

	if (!d)
		return -ENOMEM;
	secret_free(*dst);
	*dst = d;
	return 0;
}

static int from_env(struct backend_creds *c, const char *id_var, const char *secret_var,
		    const char *token_var)
{
	const char *id = env(id_var), *secret = env(secret_var);
	const char *token = token_var ? env(token_var) : NULL;

	if (!id || !secret)
		return 0;
	if (set(&c->access_key, id, strlen(id)) < 0 ||
	    set(&c->secret_key, secret, strlen(secret)) < 0 ||
	    (token && set(&c->session_token, token, strlen(token)) < 0)) {
		backend__creds_clear(c);
		return -ENOMEM;
	}
	return 1;
}

static void trim(const char **s, const char **e)
{
	while (*s < *e && (**s == ' ' || **s == '\t'))
		(*s)++;
	while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t' || (*e)[-1] == '\r'))
		(*e)--;
}

/* Read a whole small file; returns 0 with a NUL-terminated buffer, -ENOENT
 * when it does not exist, other negative errnos. */
static int slurp(const char *path, char **out, size_t *outlen)
{
	struct stat st;
	size_t got = 0;
	char *buf;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > CREDS_FILE_MAX) {
		close(fd);
		return -EINVAL;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	*out = buf;
	*outlen = got;
	return 0;
}

int backend__creds_file(struct backend_creds *c, const char *path, const char *profile)
{
	char *buf = NULL;
	size_t len = 0;
	const char *p, *end;
	int in_section = 0, err;

	err = slurp(path, &buf, &len);
	if (err < 0)
		return err;
	p = buf;
	end = buf + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end, *s = p, *eq;

		p = nl ? nl + 1 : end;
		trim(&s, &e);
		if (s == e || *s == '#' || *s == ';')
			continue;
		if (*s == '[') {
			const char *ns = s + 1, *ne = e;

			if (ne[-1] != ']')
				continue;
			ne--;
			trim(&ns, &ne);
			in_section = (size_t)(ne - ns) == strlen(profile) &&
				     memcmp(ns, profile, (size_t)(ne - ns)) == 0;
			continue;
		}
		if (!in_section)
			continue;
		eq = memchr(s, '=', (size_t)(e - s));
		if (!eq)
			continue;
		{
			const char *ks = s, *ke = eq, *vs = eq + 1, *ve = e;
			char **dst = NULL;
			size_t kn;

			trim(&ks, &ke);
			trim(&vs, &ve);
			kn = (size_t)(ke - ks);
			if (kn == 17 && memcmp(ks, "aws_access_key_id", kn) == 0)
				dst = &c->access_key;
			else if (kn == 21 && memcmp(ks, "aws_secret_access_key", kn) == 0)
				dst = &c->secret_key;
			else if (kn == 17 && memcmp(ks, "aws_session_token", kn) == 0)
				dst = &c->session_token;
			if (dst && vs < ve && set(dst, vs, (size_t)(ve - vs)) < 0) {
				err = -ENOMEM;
				break;
			}
		}
	}
	OPENSSL_cleanse(buf, len);
	free(buf);
	if (err == 0 && (!c->access_key || !c->secret_key))
		err = 0; /* section absent or incomplete: no credentials from this file */
	if (err < 0 || !c->access_key || !c->secret_key)
		backend__creds_clear(c);
	return err;
}

int backend__creds_aws(struct backend_creds *c)
{
	char path[4096];
	const char *file = env("AWS_SHARED_CREDENTIALS_FILE");
	const char *profile = env("AWS_PROFILE");
	int err;

	memset(c, 0, sizeof(*c));
	err = from_env(c, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN");
	if (err != 0)
		return err < 0 ? err : 0;
	if (!file) {
		const char *home = env("HOME");

		if (!home)
			return 0;
		if (snprintf(path, sizeof(path), "%s/.aws/credentials", home) >= (int)sizeof(path))
			return 0;
		file = path;
	}
	err = backend__creds_file(c, file, profile ? profile : "default");
	if (err == -ENOENT)
		err = 0;
	return err;
}

int backend__creds_gcs(struct backend_creds *c)
{
	const char *tok = env("GOOGLE_OAUTH_ACCESS_TOKEN");
	int err;

	memset(c, 0, sizeof(*c));
	if (tok) {
		/* a header value: refuse anything that could split the header */
		for (const char *q = tok; *q; q++)
			if ((unsigned char)*q < 0x20 || *q == 0x7f)
				return -EINVAL;
		return set(&c->bearer, tok, strlen(tok));
	}
	err = from_env(c, "GCS_HMAC_ACCESS_ID", "GCS_HMAC_SECRET", NULL);
	if (err != 0)
		return err < 0 ? err : 0;
	return backend__creds_aws(c);
}

void backend__aws_region(char *buf, size_t cap)
{
	const char *r = env("AWS_REGION");

	if (!r)
		r = env("AWS_DEFAULT_REGION");
	snprintf(buf, cap, "%s", r ? r : "us-east-1");
}

int backend__endpoint_parse(struct backend_endpoint *ep, const char *url)
{
	const char *p, *hs, *he, *path;
	size_t n;
	int w;

	memset(ep, 0, sizeof(*ep));
	if (strncmp(url, "https://", 8) == 0) {
		ep->https = 1;
		p = url + 8;
	} else if (strncmp(url, "http://", 7) == 0) {
		p = url + 7;
	} else {
		return -EINVAL;
	}
	hs = p;
	while (*p && *p != '/' && *p != '?' && *p != '#')
		p++;
	he = p;
	if (he == hs || memchr(hs, '@', (size_t)(he - hs)))
		return -EINVAL; /* no host, or userinfo (credentials never go in URLs) */
	if (*p == '?' || *p == '#')
		return -EINVAL;
	path = p;
	n = strlen(path);
	while (n > 0 && path[n - 1] == '/')
		n--;
	for (const char *q = hs; q < he; q++)
		if ((unsigned char)*q <= ' ' || *q == '\\' || (unsigned char)*q >= 0x7f)
			return -EINVAL;
	/* curl leaves the default port out of Host: so must the signature */
	{
		size_t hn = (size_t)(he - hs);
		const char *dflt = ep->https ? ":443" : ":80";
		size_t dn = strlen(dflt);

		if (hn > dn && memcmp(he - dn, dflt, dn) == 0 && hs[0] != '[')
			hn -= dn;
		if (hn >= sizeof(ep->host))
			return -ENAMETOOLONG;
		memcpy(ep->host, hs, hn);
		ep->host[hn] = '\0';
	}
	if (n >= sizeof(ep->path))
		return -ENAMETOOLONG;
	memcpy(ep->path, path, n);
	ep->path[n] = '\0';
	w = snprintf(ep->base, sizeof(ep->base), "%s://%s%.*s", ep->https ? "https" : "http",
		     ep->host, (int)n, path);
	if (w < 0 || (size_t)w >= sizeof(ep->base))
		return -ENAMETOOLONG;
	return 0;
}
