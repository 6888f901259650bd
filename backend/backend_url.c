/*
 * backend_url.c — the one URL parser of backend/: every http(s) and file://
 * URL (sources, --endpoint, credential endpoints, redirect targets) is
 * split by curl's own parser (CURLU), the one that decides where curl
 * connects. So the host that a request is signed for, and the origin that
 * decides whether signed headers follow a redirect, are the host curl
 * talks to: no second parser can disagree with it.
 *
 * The one percent-encoder is here too (backend__uri_encode: RFC 3986's
 * rule, which SigV4 requires); the decoder, backend__pct_decode, is in
 * backend_listing.c with the listing parsers that use it most.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "backend_i.h"

static int unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

ssize_t backend__uri_encode(char *dst, size_t cap, const char *src, size_t len, int keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)src[i];

		if (unreserved(c) || (keep_slash && c == '/')) {
			if (o + 1 >= cap)
				return -ENAMETOOLONG;
			dst[o++] = (char)c;
		} else {
			if (o + 3 >= cap)
				return -ENAMETOOLONG;
			dst[o++] = '%';
			dst[o++] = hex[c >> 4];
			dst[o++] = hex[c & 15];
		}
	}
	if (o >= cap)
		return -ENAMETOOLONG;
	dst[o] = '\0';
	return (ssize_t)o;
}

static int curl_part(CURLU *h, CURLUPart part, unsigned flags, char **out)
{
	char *s = NULL;
	CURLUcode rc = curl_url_get(h, part, &s, flags);

	*out = NULL;
	if (rc == CURLUE_OUT_OF_MEMORY)
		return -ENOMEM;
	if (rc != CURLUE_OK || !s)
		return 0; /* absent */
	*out = strdup(s);
	curl_free(s);
	return *out ? 0 : -ENOMEM;
}

void backend__url_free(struct backend_url *u)
{
	if (!u)
		return;
	free(u->scheme);
	free(u->host);
	free(u->port);
	free(u->path);
	free(u->query);
	free(u->fragment);
	free(u->authority);
	free(u->origin);
	free(u->base);
	memset(u, 0, sizeof(*u));
}

/* "host[:port]" as curl sends it in Host:, and "scheme://host:port" with
 * the port always written (so that http://h and http://h:80 compare equal) */
static int url_compose(struct backend_url *u, const char *default_port)
{
	const char *port = u->port ? u->port : default_port;
	int shown = u->port && strcmp(u->port, default_port) != 0; /* curl's Host: rule */
	size_t al = strlen(u->host) + 1 + strlen(port) + 1;
	size_t ol = strlen(u->scheme) + 3 + al;

	u->authority = malloc(al);
	u->origin = malloc(ol);
	if (!u->authority || !u->origin)
		return -ENOMEM;
	snprintf(u->authority, al, "%s%s%s", u->host, shown ? ":" : "", shown ? port : "");
	snprintf(u->origin, ol, "%s://%s:%s", u->scheme, u->host, port);
	for (char *p = u->origin; *p; p++) /* scheme and host compare without case */
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
	return 0;
}

int backend__url_parse(struct backend_url *u, const char *url)
{
	char *user = NULL, *password = NULL;
	CURLU *h;
	CURLUcode rc;
	int err;

	memset(u, 0, sizeof(*u));
	if (!url || (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0 &&
		     strncasecmp(url, "file://", 7) != 0))
		return -EINVAL;
	h = curl_url();
	if (!h)
		return -ENOMEM;
	/* PATH_AS_IS: the path as written ("/a/../b" is not made "/b": the
	 * callers refuse such names instead of reading another object) */
	rc = curl_url_set(h, CURLUPART_URL, url, CURLU_PATH_AS_IS);
	if (rc != CURLUE_OK) {
		err = rc == CURLUE_OUT_OF_MEMORY ? -ENOMEM : -EINVAL;
		goto out;
	}
	if ((err = curl_part(h, CURLUPART_SCHEME, 0, &u->scheme)) < 0 ||
	    (err = curl_part(h, CURLUPART_USER, 0, &user)) < 0 ||
	    (err = curl_part(h, CURLUPART_PASSWORD, 0, &password)) < 0 ||
	    (err = curl_part(h, CURLUPART_HOST, 0, &u->host)) < 0 ||
	    (err = curl_part(h, CURLUPART_PORT, 0, &u->port)) < 0 ||
	    (err = curl_part(h, CURLUPART_PATH, 0, &u->path)) < 0 ||
	    (err = curl_part(h, CURLUPART_QUERY, 0, &u->query)) < 0 ||
	    (err = curl_part(h, CURLUPART_FRAGMENT, 0, &u->fragment)) < 0)
		goto out;
	u->userinfo = user || password;
	err = -EINVAL;
	if (!u->scheme || !u->path)
		goto out;
	for (char *p = u->scheme; *p; p++)
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
	if (strcmp(u->scheme, "file") == 0) {
		/* curl accepts only file:///PATH and file://localhost/PATH */
		free(u->host);
		u->host = NULL;
		err = u->path[0] == '/' ? 0 : -EINVAL;
		goto out;
	}
	/* curl reads "http:///x" as host x: refuse what only looks like no host */
	if (!u->host || !*u->host || url[strlen(u->scheme) + 3] == '/')
		goto out;
	err = url_compose(u, strcmp(u->scheme, "https") == 0 ? "443" : "80");
	if (err < 0)
		goto out;
	/* the URL without query and fragment, as curl writes it */
	if (curl_url_set(h, CURLUPART_QUERY, NULL, 0) != CURLUE_OK ||
	    curl_url_set(h, CURLUPART_FRAGMENT, NULL, 0) != CURLUE_OK) {
		err = -ENOMEM;
		goto out;
	}
	err = curl_part(h, CURLUPART_URL, 0, &u->base);
	if (err == 0 && !u->base)
		err = -EINVAL;
out:
	free(user);
	free(password);
	curl_url_cleanup(h);
	if (err < 0)
		backend__url_free(u);
	return err;
}

char *backend__url_origin(const char *url)
{
	struct backend_url u;
	char *o;

	if (backend__url_parse(&u, url) < 0 || !u.origin) {
		backend__url_free(&u);
		return NULL;
	}
	o = u.origin;
	u.origin = NULL;
	backend__url_free(&u);
	return o;
}

char *backend__url_without_userinfo(const char *url)
{
	CURLU *h;
	char *s = NULL, *out = NULL;
	struct backend_url u;

	if (backend__url_parse(&u, url) < 0)
		return NULL;
	backend__url_free(&u);
	h = curl_url();
	if (h && curl_url_set(h, CURLUPART_URL, url, CURLU_PATH_AS_IS) == CURLUE_OK &&
	    curl_url_set(h, CURLUPART_USER, NULL, 0) == CURLUE_OK &&
	    curl_url_set(h, CURLUPART_PASSWORD, NULL, 0) == CURLUE_OK &&
	    curl_url_get(h, CURLUPART_URL, &s, 0) == CURLUE_OK)
		out = strdup(s);
	curl_free(s);
	curl_url_cleanup(h);
	return out;
}

char *backend__url_join(const char *base, const char *loc, size_t len)
{
	CURLU *h = curl_url();
	char *l = strndup(loc, len), *s = NULL, *out = NULL;

	/* as curl makes CURLINFO_REDIRECT_URL (its Curl_follow, FOLLOW_FAKE) */
	if (h && l && curl_url_set(h, CURLUPART_URL, base, 0) == CURLUE_OK &&
	    curl_url_set(h, CURLUPART_URL, l, CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK &&
	    curl_url_get(h, CURLUPART_URL, &s, 0) == CURLUE_OK)
		out = strdup(s);
	curl_free(s);
	curl_url_cleanup(h);
	free(l);
	return out;
}

void backend__url_host(const char *url, char *buf, size_t cap)
{
	struct backend_url u;

	if (backend__url_parse(&u, url) == 0 && u.host)
		snprintf(buf, cap, "%s", u.host);
	else
		snprintf(buf, cap, "?");
	backend__url_free(&u);
}

void backend__url_display(const char *url, char *buf, size_t cap)
{
	struct backend_url u;

	if (backend__url_parse(&u, url) == 0 && u.authority)
		snprintf(buf, cap, "%s://%s%s", u.scheme, u.authority, u.path);
	else
		snprintf(buf, cap, "(bad URL)");
	backend__url_free(&u);
}

int backend__endpoint_parse(struct backend_endpoint *ep, const char *url)
{
	struct backend_url u;
	size_t n;
	int w, err;

	memset(ep, 0, sizeof(*ep));
	err = backend__url_parse(&u, url);
	if (err < 0)
		return err;
	err = -EINVAL;
	/* credentials never go in URLs; an endpoint has no query */
	if (!u.authority || u.userinfo || u.query || u.fragment)
		goto out;
	ep->https = strcmp(u.scheme, "https") == 0;
	err = -ENAMETOOLONG;
	n = strlen(u.path);
	while (n > 0 && u.path[n - 1] == '/')
		n--;
	if (strlen(u.authority) >= sizeof(ep->host) || n >= sizeof(ep->path))
		goto out;
	snprintf(ep->host, sizeof(ep->host), "%s", u.authority);
	snprintf(ep->path, sizeof(ep->path), "%.*s", (int)n, u.path);
	w = snprintf(ep->base, sizeof(ep->base), "%s://%s%s", u.scheme, ep->host, ep->path);
	if (w < 0 || (size_t)w >= sizeof(ep->base))
		goto out;
	err = 0;
out:
	backend__url_free(&u);
	if (err < 0)
		memset(ep, 0, sizeof(*ep));
	return err;
}

int backend__file_url_path(const char *url, char **path, const char **why)
{
	struct backend_url u;
	ssize_t n;
	int err;

	*path = NULL;
	*why = "";
	err = backend__url_parse(&u, url);
	if (err == -ENOMEM)
		return err;
	if (err < 0 || strcmp(u.scheme, "file") != 0) {
		*why = "a file:// URL names a directory of this machine (file:///PATH or "
		       "file://localhost/PATH)";
		backend__url_free(&u);
		return -EINVAL;
	}
	if (u.query || u.fragment) {
		*why = "a file:// URL has no query or fragment";
		backend__url_free(&u);
		return -EINVAL;
	}
	*path = malloc(strlen(u.path) + 1);
	if (!*path) {
		backend__url_free(&u);
		return -ENOMEM;
	}
	n = backend__pct_decode(u.path, strlen(u.path), *path, strlen(u.path) + 1);
	backend__url_free(&u);
	if (n < 0) {
		free(*path);
		*path = NULL;
		*why = "bad percent escape in the path";
		return -EINVAL;
	}
	return 0;
}
