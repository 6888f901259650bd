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
 * Non-goals: validating the body (a cut document is the normal case); a
 * general JSON reader (the fields are found by name, strings decoded for
 * the common escapes only).
 */
#include <stdio.h>
#include <string.h>

#include "backend_i.h"

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

/* The value of the first "name": of a JSON text: a string (common escapes
 * decoded, \uXXXX kept as written) or a number. */
static int json_field(const char *b, size_t len, const char *name, char *out, size_t cap)
{
	char key[40], tmp[512];
	const char *p = b, *end = b + len;
	size_t t = 0;

	snprintf(key, sizeof(key), "\"%s\"", name);
	for (;;) {
		p = find(p, (size_t)(end - p), key);
		if (!p)
			return 0;
		p += strlen(key);
		while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
			p++;
		if (p < end && *p == ':')
			break; /* a key, not a value that reads the same */
	}
	p++;
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
		p++;
	if (p < end && *p == '"') {
		for (p++; p < end && *p != '"' && t + 1 < sizeof(tmp); p++) {
			if (*p == '\\' && p + 1 < end) {
				char c = *++p;

				tmp[t++] = c == 'n' || c == 't' || c == 'r' ? ' ' : c;
				continue;
			}
			tmp[t++] = *p;
		}
	} else {
		while (p < end && t + 1 < sizeof(tmp) &&
		       ((*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
			tmp[t++] = *p++;
	}
	if (t == 0)
		return 0;
	out[0] = '\0';
	put_escaped(out, cap, tmp, t);
	return 1;
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
		if (!json_field(body, len, "reason", code, codecap))
			json_field(body, len, "code", code, codecap);
		json_field(body, len, "message", msg, msgcap);
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
