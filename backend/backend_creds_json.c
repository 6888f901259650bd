/*
 * backend_creds_json.c — the fields of the credential services' answers:
 * one field of the top-level JSON object (a string, or a scalar's text:
 * disk/disk_json.h reads it) and the text of one XML element (STS), and the
 * credentials taken from them (backend__creds_from_json,
 * backend__creds_take).
 *
 * Contract: input is untrusted and bounded by the caller (CREDS_HTTP_MAX);
 * every value is copied into secret memory; a JSON document that is not an
 * object gives -EBADMSG, never a partial result. No I/O, no locks.
 *
 * Non-goals: nested JSON values (skipped, not read), XML namespaces and
 * entities beyond the five predefined ones.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_creds_i.h"
#include "disk_json.h"

/* ---- JSON and XML fields ------------------------------------------------------ */

/* The value of "key" in the top-level JSON object js[0..len) (disk_json_get:
 * the whole document is checked): a string (escapes decoded, \u as UTF-8;
 * \u0000 refused) or a scalar's text, as a new secret buffer in *out.
 * Returns 0, -ENOENT when absent, -EBADMSG when js is not a JSON object,
 * -ENOMEM. */
int backend__creds_json_field(const char *js, size_t len, const char *key, char **out)
{
	struct disk_json_tok v;
	int err = disk_json_get(js, len, key, &v);
	char *d;

	*out = NULL;
	if (err == -ENOENT)
		return err;
	if (err < 0)
		return -EBADMSG;
	d = backend__creds_secret_alloc(v.len); /* zeroed, one byte more */
	if (!d)
		return -ENOMEM;
	if (v.type != DISK_JSON_STRING) {
		memcpy(d, v.p, v.len);
	} else if (disk_json_str(&v, d, v.len + 1) < 0) {
		backend__creds_secret_free(d);
		return -EBADMSG;
	}
	*out = d;
	return 0;
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
