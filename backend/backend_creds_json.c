/*
 * backend_creds_json.c — the fields of the credential services' answers:
 * a small JSON reader (one field of the top-level object: a string, or a
 * scalar's text)
 * and an XML one (the text of one element, STS), and the credentials taken
 * from them (backend__creds_from_json, backend__creds_take).
 *
 * Contract: input is untrusted and bounded by the caller (CREDS_HTTP_MAX);
 * every value is copied into secret memory; a JSON document that is not an
 * object gives -EBADMSG, never a partial result. No I/O, no locks.
 *
 * Non-goals: a general JSON or XML parser (nested values are skipped, not
 * read; XML namespaces and entities beyond the five predefined ones).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_creds_i.h"

/* ---- JSON and XML fields ------------------------------------------------------ */

static const char *json_ws(const char *p, const char *e)
{
	while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* Skip a JSON string starting at p ('"'); returns the byte after it or NULL. */
static const char *json_skip_str(const char *p, const char *e)
{
	for (p++; p < e; p++) {
		if (*p == '\\')
			p++;
		else if (*p == '"')
			return p + 1;
	}
	return NULL;
}

/* Skip any JSON value; NULL when malformed. Bounded nesting. */
static const char *json_skip(const char *p, const char *e)
{
	int depth = 0;

	p = json_ws(p, e);
	do {
		if (p >= e)
			return NULL;
		if (*p == '"') {
			p = json_skip_str(p, e);
			if (!p)
				return NULL;
		} else if (*p == '{' || *p == '[') {
			if (++depth > 64)
				return NULL;
			p++;
		} else if (*p == '}' || *p == ']') {
			if (--depth < 0)
				return NULL;
			p++;
		} else {
			p++;
		}
		if (depth > 0)
			p = json_ws(p, e);
	} while (depth > 0);
	/* a scalar: run to the next delimiter */
	while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n' &&
	       *p != '\r' && *p != '\t')
		p++;
	return p;
}

/* The value of "key" in the top-level JSON object js[0..len): a string
 * (escapes decoded; \u only for ASCII) or a scalar's text, as a new secret
 * buffer in *out. Returns 0, -ENOENT when absent, -EBADMSG when js is not
 * a JSON object, -ENOMEM. */
int backend__creds_json_field(const char *js, size_t len, const char *key, char **out)
{
	const char *p = js, *e = js + len;
	size_t kl = strlen(key);

	*out = NULL;
	p = json_ws(p, e);
	if (p >= e || *p != '{')
		return -EBADMSG;
	p = json_ws(p + 1, e);
	if (p < e && *p == '}')
		return -ENOENT;
	while (p < e) {
		const char *ks, *ke, *vs, *ve;
		int match;

		if (*p != '"')
			return -EBADMSG;
		ks = p + 1;
		ke = json_skip_str(p, e);
		if (!ke)
			return -EBADMSG;
		match = (size_t)(ke - 1 - ks) == kl && memcmp(ks, key, kl) == 0;
		p = json_ws(ke, e);
		if (p >= e || *p != ':')
			return -EBADMSG;
		vs = json_ws(p + 1, e);
		ve = json_skip(vs, e);
		if (!ve || ve == vs)
			return -EBADMSG;
		if (match) {
			char *d = backend__creds_secret_alloc((size_t)(ve - vs));
			size_t n = 0;

			if (!d)
				return -ENOMEM;
			if (*vs != '"') {
				memcpy(d, vs, (size_t)(ve - vs));
				*out = d;
				return 0;
			}
			for (const char *q = vs + 1; q < ve - 1; q++) {
				char ch = *q;

				if (ch == '\\') {
					q++;
					switch (*q) {
					case 'n':
						ch = '\n';
						break;
					case 't':
						ch = '\t';
						break;
					case 'r':
						ch = '\r';
						break;
					case 'b':
						ch = '\b';
						break;
					case 'f':
						ch = '\f';
						break;
					case 'u': {
						unsigned v = 0;

						if (ve - 1 - q < 5) {
							backend__creds_secret_free(d);
							return -EBADMSG;
						}
						for (int i = 1; i <= 4; i++) {
							char h = q[i];

							v <<= 4;
							if (h >= '0' && h <= '9')
								v |= (unsigned)(h - '0');
							else if ((h | 0x20) >= 'a' &&
								 (h | 0x20) <= 'f')
								v |= (unsigned)((h | 0x20) - 'a' +
										10);
							else
								v = 0x10000;
						}
						if (v == 0 || v > 0x7f) {
							backend__creds_secret_free(d);
							return -EBADMSG;
						}
						ch = (char)v;
						q += 4;
						break;
					}
					default:
						ch = *q;
						break;
					}
				}
				d[n++] = ch;
			}
			d[n] = '\0';
			*out = d;
			return 0;
		}
		p = json_ws(ve, e);
		if (p < e && *p == ',') {
			p = json_ws(p + 1, e);
			continue;
		}
		if (p < e && *p == '}')
			return -ENOENT;
		return -EBADMSG;
	}
	return -EBADMSG;
}

/* The text of the first <tag>...</tag> in x, entities decoded, as a new
 * secret buffer. Returns 0, -ENOENT or -ENOMEM. */
int backend__creds_xml_field(const char *x, const char *tag, char **out)
{
	char open[64], close[64];
	const char *s, *e;
	char *d;
	size_t n = 0;

	*out = NULL;
	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	s = strstr(x, open);
	if (!s)
		return -ENOENT;
	s += strlen(open);
	e = strstr(s, close);
	if (!e)
		return -ENOENT;
	d = backend__creds_secret_alloc((size_t)(e - s));
	if (!d)
		return -ENOMEM;
	for (const char *q = s; q < e; q++) {
		static const struct {
			const char *ent;
			char ch;
		} ents[] = {{"&amp;", '&'},
			    {"&lt;", '<'},
			    {"&gt;", '>'},
			    {"&quot;", '"'},
			    {"&apos;", '\''}};
		size_t i, l = 0;

		for (i = 0; *q == '&' && i < sizeof(ents) / sizeof(ents[0]); i++) {
			l = strlen(ents[i].ent);
			if ((size_t)(e - q) >= l && memcmp(q, ents[i].ent, l) == 0)
				break;
		}
		if (*q == '&' && i < sizeof(ents) / sizeof(ents[0])) {
			d[n++] = ents[i].ch;
			q += l - 1;
		} else {
			d[n++] = *q;
		}
	}
	d[n] = '\0';
	*out = d;
	return 0;
}

/* A credential string goes into a header line: refuse control bytes. */
int backend__creds_header_safe(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

/* Move id, secret and token (secret memory; token may be NULL or "": none)
 * into out, taking the ones it keeps (set to NULL). Returns 0, -EBADMSG
 * when id or secret is empty or one has control bytes, or -ENOMEM. */
int backend__creds_take(struct backend_creds *out, char **id, char **secret, char **token)
{
	int err;

	if (!(*id)[0] || !(*secret)[0] || !backend__creds_header_safe(*id) ||
	    !backend__creds_header_safe(*secret) || (*token && !backend__creds_header_safe(*token)))
		return -EBADMSG;
	err = backend__creds_set_plain(&out->access_key, *id, strlen(*id));
	if (err < 0)
		return err;
	out->secret_key = *secret;
	*secret = NULL;
	if (*token && (*token)[0]) {
		out->session_token = *token;
		*token = NULL;
	}
	return 0;
}

/* Fill out from fields id/secret/token/expiration of a JSON document (the
 * IMDS, container and credential_process shapes). exp: 0 when the document
 * has no expiration. */
int backend__creds_from_json(const char *js, size_t len, const char *token_key,
			     struct backend_creds *out, int64_t *exp, char *why, size_t whycap)
{
	char *id = NULL, *secret = NULL, *token = NULL, *expiration = NULL;
	int err;

	memset(out, 0, sizeof(*out));
	*exp = 0;
	err = backend__creds_json_field(js, len, "AccessKeyId", &id);
	if (err == 0)
		err = backend__creds_json_field(js, len, "SecretAccessKey", &secret);
	if (err == -EBADMSG) {
		backend__creds_why(why, whycap, "the answer is not a JSON object");
		goto out;
	}
	if (err < 0) {
		backend__creds_why(why, whycap, "the answer has no AccessKeyId/SecretAccessKey");
		err = err == -ENOMEM ? err : -EBADMSG;
		goto out;
	}
	err = backend__creds_json_field(js, len, token_key, &token);
	if (err < 0 && err != -ENOENT)
		goto out;
	err = backend__creds_json_field(js, len, "Expiration", &expiration);
	if (err == 0 && backend__iso8601_parse(expiration, strlen(expiration), exp) < 0) {
		backend__creds_why(why, whycap, "the answer's Expiration is not a date");
		err = -EBADMSG;
		goto out;
	}
	if (err < 0 && err != -ENOENT)
		goto out;
	err = backend__creds_take(out, &id, &secret, &token);
	if (err == -EBADMSG)
		backend__creds_why(why, whycap, "the answer's credentials are empty or malformed");
out:
	backend__creds_secret_free(id);
	backend__creds_secret_free(secret);
	backend__creds_secret_free(token);
	backend__creds_secret_free(expiration);
	return err;
}
