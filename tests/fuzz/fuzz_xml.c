/*
 * fuzz_xml.c — libFuzzer harness for the S3/GCS XML scanner (backend_xml.c):
 * the ListObjectsV2 page parser, the <Error> body parser and the ISO 8601
 * parser they use, on arbitrary bytes (an exact-size copy, not
 * NUL-terminated, so any read past the body is caught by ASan).
 * Every contract of backend_i.h on their outputs is checked; a broken one
 * aborts, which libFuzzer reports as a crash.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_i.h"
#include "check.h"

struct seen {
	size_t n;
	size_t stop_at; /* 0: never stop */
};

static int on_entry(void *arg, const struct backend_s3_entry *e)
{
	struct seen *s = arg;

	ENSURE(e->key && strlen(e->key) == e->keylen);
	ENSURE(e->keylen <= BACKEND_S3_KEY_MAX);
	ENSURE(memchr(e->etag, 0, sizeof(e->etag)));
	s->n++;
	return s->stop_at && s->n == s->stop_at ? 42 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *xml = malloc(size ? size : 1);
	struct backend_s3_page page;
	struct seen s = {0, 0};
	char code[64], msg[256];
	size_t codecap, msgcap;
	int64_t t;
	int r;

	ENSURE(xml);
	if (size)
		memcpy(xml, data, size);

	r = backend__s3_xml_list(xml, size, on_entry, &s, &page);
	ENSURE(r == 0 || r == -EBADMSG || r == -ENOMEM);
	ENSURE(page.entries == s.n);
	ENSURE(!page.next_token || strlen(page.next_token) < size + 1);
	free(page.next_token);

	/* a callback that stops early: its value comes back, nothing after it */
	if (s.n > 1) {
		struct seen s2 = {0, 1 + size % s.n};

		r = backend__s3_xml_list(xml, size, on_entry, &s2, &page);
		ENSURE(r == 42 && s2.n == s2.stop_at);
		free(page.next_token);
	}

	/* error bodies, with output sizes from tiny to roomy */
	codecap = size ? data[0] % sizeof(code) : sizeof(code);
	msgcap = size > 1 ? data[1] % sizeof(msg) : sizeof(msg);
	memset(code, 'X', sizeof(code));
	memset(msg, 'X', sizeof(msg));
	r = backend__s3_xml_error(xml, size, code, codecap, msg, msgcap);
	ENSURE(r == 0 || r == -EBADMSG);
	if (codecap) {
		ENSURE(memchr(code, 0, codecap));
		for (const char *p = code; *p; p++)
			ENSURE(*p >= 0x20 && *p < 0x7f);
	}
	if (msgcap) {
		ENSURE(memchr(msg, 0, msgcap));
		for (const char *p = msg; *p; p++)
			ENSURE(*p >= 0x20 && *p < 0x7f);
	}
	for (size_t i = codecap; i < sizeof(code); i++)
		ENSURE(code[i] == 'X'); /* nothing written past the capacity */
	for (size_t i = msgcap; i < sizeof(msg); i++)
		ENSURE(msg[i] == 'X');

	/* timestamps: the whole input, and its first 40 bytes */
	r = backend__iso8601_parse(xml, size, &t);
	ENSURE(r == 0 || r == -EINVAL);
	r = backend__iso8601_parse(xml, size < 40 ? size : 40, &t);
	ENSURE(r == 0 || r == -EINVAL);

	free(xml);
	return 0;
}
