/*
 * backend_errbody.c — what a store's error answer says (pure): the code
 * and message of the body that came with a failed request (its first
 * BACKEND_ERRBODY_MAX bytes, so often cut short).
 *
 * Read leniently, by field, since the body may be cut anywhere:
 *   S3, GCS XML, AIStore's S3 API   <Error><Code>C</Code><Message>M</Message>...
 *   GCS JSON                        {"error": {"code": 403, "message": "M",
 *                                    "errors": [{"reason": "forbidden", ...}]}}
 *   AIStore                         {"message": "M", "status": 404, ...}
 *   anything else                   an HTML page's <title>, else the first line
 * Only Code and Message are taken from XML (an S3 <Error> also carries the
 * string to sign and the access key's id); the output is printable ASCII,
 * every other byte escaped as \xNN, truncated to fit.
 *
 * JSON is walked with the one JSON reader (disk_json.h) as far as it is
 * well-formed; a body cut inside the wanted string falls back to its first
 * line. Non-goals: validating the body (a cut document is the normal case).
 */
#include <stdio.h>
#include <string.h>

#include "backend_i.h"
#include "backend_io_i.h"
#include "disk_json.h"

/* Append in[0..len) to out (cap bytes, NUL-terminated) escaped: printable
 * ASCII as is (whitespace runs as one space), every other byte \xNN. */
static void put_escaped(char *out, size_t cap, const char *in, size_t len)
{
	size_t o = strlen(out);
	int space = o > 0 && out[o - 1] == ' ';

	for (size_t i = 0; i < len && o + 1 < cap; i++) {
		unsigned char c = (unsigned char)in[i];

		if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
			if (!space && o > 0)
				out[o++] = ' ';
			space = 1;
			continue;
		}
		space = 0;
		if (c >= 0x21 && c < 0x7f) {
			out[o++] = (char)c;
		} else {
			if (o + 5 > cap)
				break;
			snprintf(out + o, cap - o, "\\x%02x", c);
			o += 4;
		}
	}
	while (o > 0 && out[o - 1] == ' ')
		o--;
	out[o] = '\0';
}

static const char *find(const char *s, size_t len, const char *needle)
{
	size_t n = strlen(needle);

	for (size_t i = 0; n <= len && i <= len - n; i++)
		if (memcmp(s + i, needle, n) == 0)
			return s + i;
	return NULL;
}

/* The text of the first <tag>...</tag> (up to the body's end when cut). */
static int xml_field(const char *b, size_t len, const char *tag, char *out, size_t cap)
{
	char open[40], close[40];
	const char *s, *e;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	s = find(b, len, open);
	if (!s)
		return 0;
	s += strlen(open);
	e = find(s, len - (size_t)(s - b), close);
	if (!e)
		e = find(s, len - (size_t)(s - b), "<");
	if (!e)
		e = b + len;
	out[0] = '\0';
	put_escaped(out, cap, s, (size_t)(e - s));
	return 1;
}

/* Into out (cap bytes, escaped): the string or number token v, when out
 * is still empty. */
static void json_take(const struct disk_json_tok *v, char *out, size_t cap)
{
	char tmp[BACKEND_ERRBODY_MAX + 1]; /* a token of the body always fits */
	ssize_t n;

	if (out[0] || v->len >= sizeof(tmp))
		return;
	if (v->type == DISK_JSON_STRING)
		n = disk_json_str(v, tmp, sizeof(tmp));
	else if (v->type == DISK_JSON_NUMBER)
		memcpy(tmp, v->p, (size_t)(n = (ssize_t)v->len));
	else
		return;
	if (n > 0)
		put_escaped(out, cap, tmp, (size_t)n);
}

/* The first string or number members named "reason", "code" and "message"
 * at any depth of a JSON body, walked with the one JSON reader (disk_json.h)
 * as far as the body is well-formed: a cut body gives what came before the
 * cut. */
static void json_fields(const char *b, size_t len, char *reason, size_t reasoncap, char *code,
			size_t codecap, char *msg, size_t msgcap)
{
	struct disk_json j;
	struct disk_json_tok k, v;
	unsigned depth = 1;
	int more, t;

	disk_json_init(&j, b, len, 0);
	if (disk_json_enter(&j, DISK_JSON_OBJECT) < 0)
		return;
	while (depth > 0) {
		memset(&k, 0, sizeof(k)); /* stays empty for an array's item */
		more = disk_json_next(&j, &k);
		if (more < 0)
			return;
		if (more == 0) {
			depth--;
			continue;
		}
		t = disk_json_peek(&j);
		if (t == DISK_JSON_OBJECT || t == DISK_JSON_ARRAY) {
			if (disk_json_enter(&j, (enum disk_json_type)t) < 0)
				return;
			depth++;
			continue;
		}
		if (t < 0 || disk_json_value(&j, &v) < 0)
			return;
		if (!k.p)
			continue;
		if (disk_json_streq(&k, "reason"))
			json_take(&v, reason, reasoncap);
		else if (disk_json_streq(&k, "code"))
			json_take(&v, code, codecap);
		else if (disk_json_streq(&k, "message"))
			json_take(&v, msg, msgcap);
	}
}

void backend__errbody_parse(const char *body, size_t len, char *code, size_t codecap, char *msg,
			    size_t msgcap)
{
	size_t i = 0;

	code[0] = msg[0] = '\0';
	while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n'))
		i++;
	if (i == len)
		return;
	body += i;
	len -= i;
	if (body[0] == '{') {
		/* GCS nests {"error": {...}}: its "reason" is the code; AIStore's
		 * top level has "message" and a numeric "status" */
		char reason[256] = "";

		json_fields(body, len, reason, codecap < sizeof(reason) ? codecap : sizeof(reason),
			    code, codecap, msg, msgcap);
		if (reason[0]) {
			code[0] = '\0';
			put_escaped(code, codecap, reason, strlen(reason));
		}
		if (code[0] || msg[0])
			return;
	}
	if (find(body, len, "<Error>") || find(body, len, "<Code>")) {
		xml_field(body, len, "Code", code, codecap);
		xml_field(body, len, "Message", msg, msgcap);
		if (code[0] || msg[0])
			return;
	}
	if (xml_field(body, len, "title", msg, msgcap) && msg[0])
		return;
	{
		const char *nl = memchr(body, '\n', len);
		size_t n = nl ? (size_t)(nl - body) : len;

		put_escaped(msg, msgcap < 161 ? msgcap : 161, body, n);
	}
}
