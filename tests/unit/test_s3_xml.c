/*
 * test_s3_xml.c — the ListObjectsV2 / S3 error scanner of backend_xml.c:
 * exact outputs for real-looking documents, and hostile ones (huge sizes,
 * missing tags, nested garbage, unterminated markup, 1 MB names, deep
 * nesting, random bytes) that must fail cleanly and never crash. Run it
 * under ASan/UBSan to make "never crash" mean "never reads out of bounds".
 * Random inputs are seeded; the seed is printed (SHARDFS_TEST_SEED sets it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_i.h"
#include "check.h"

struct got {
	int n;
	char keys[8][256];
	uint64_t sizes[8];
	int64_t mtimes[8];
	char etags[8][80];
	size_t maxkey;
	int stop_after;
};

static int collect(void *arg, const struct backend_s3_entry *e)
{
	struct got *g = arg;

	if (strlen(e->key) != e->keylen)
		return -100;
	if (g->n < 8) {
		snprintf(g->keys[g->n], sizeof(g->keys[0]), "%s", e->key);
		g->sizes[g->n] = e->size;
		g->mtimes[g->n] = e->mtime;
		snprintf(g->etags[g->n], sizeof(g->etags[0]), "%s", e->etag);
	}
	if (e->keylen > g->maxkey)
		g->maxkey = e->keylen;
	g->n++;
	if (g->stop_after && g->n == g->stop_after)
		return 7;
	return 0;
}

static int parse(const char *xml, struct got *g, struct backend_s3_page *pg)
{
	memset(g, 0, sizeof(*g));
	return backend__s3_xml_list(xml, strlen(xml), collect, g, pg);
}

static void test_real(void)
{
	static const char doc[] =
	    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
	    "<Name>bucket</Name><Prefix>train/</Prefix><KeyCount>3</KeyCount>"
	    "<MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>"
	    "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</"
	    "NextContinuationToken>"
	    "<Contents><Key>train/shard-000000.tar</Key>"
	    "<LastModified>2009-10-12T17:50:30.000Z</LastModified>"
	    "<ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag><Size>434234</Size>"
	    "<StorageClass>STANDARD</StorageClass>"
	    "<Owner><ID>75aa57f0</ID><DisplayName>mtd@amazon.com</DisplayName></Owner></Contents>\n"
	    "  <Contents>\n    <Key>train/a &amp; b &lt;c&gt; &apos;d&apos; "
	    "&#65;&#x42;&#xe9;&#x1F600;</Key>\n"
	    "    <Size> 0 </Size>\n    <LastModified>2024-02-29T23:59:59+01:00</LastModified>\n"
	    "  </Contents>"
	    "<Contents><Key><![CDATA[train/raw&amp;]]></Key><Size>18446744073709551615</Size></"
	    "Contents>"
	    "<Contents><Key>train/nosize</Key></Contents>"
	    "<Contents><Size>5</Size></Contents>"
	    "<Contents><Key>train/big</Key><Size>9223372036854775807</Size><ETag/></Contents>"
	    "<!-- a comment <Contents><Key>x</Key><Size>1</Size></Contents> -->"
	    "</ListBucketResult>\n";
	struct got g;
	struct backend_s3_page pg;
	int err = parse(doc, &g, &pg);

	CHECK(err == 0, "real doc: %d", err);
	CHECK(pg.truncated == 1, "truncated");
	CHECK(pg.next_token &&
		  strcmp(pg.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=") == 0,
	      "token %s", pg.next_token ? pg.next_token : "(null)");
	CHECK(g.n == 3 && pg.entries == 3 && pg.skipped == 3, "n %d skipped %zu", g.n, pg.skipped);
	CHECK(strcmp(g.keys[0], "train/shard-000000.tar") == 0 && g.sizes[0] == 434234 &&
		  g.mtimes[0] == 1255369830 &&
		  strcmp(g.etags[0], "\"fba9dede5f27731c9771645a39863328\"") == 0,
	      "entry 0: %s %llu %lld %s", g.keys[0], (unsigned long long)g.sizes[0],
	      (long long)g.mtimes[0], g.etags[0]);
	CHECK(strcmp(g.keys[1], "train/a & b <c> 'd' AB\xc3\xa9\xf0\x9f\x98\x80") == 0 &&
		  g.sizes[1] == 0 && g.mtimes[1] == 1709247599 && g.etags[1][0] == '\0',
	      "entry 1: %s %lld", g.keys[1], (long long)g.mtimes[1]);
	/* CDATA is raw; a size beyond off_t skips the entry; 2^63-1 is fine */
	CHECK(strcmp(g.keys[2], "train/big") == 0 && g.sizes[2] == 9223372036854775807ull,
	      "entry 2: %s", g.keys[2]);
	free(pg.next_token);

	CHECK(parse("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>", &g,
		    &pg) == 0 &&
		  g.n == 0 && !pg.truncated && !pg.next_token,
	      "empty listing");
	CHECK(parse("<ListBucketResult/>", &g, &pg) == 0 && g.n == 0, "empty element root");
	CHECK(parse("<s3:ListBucketResult><s3:Contents><s3:Key>k</s3:Key><s3:Size>1</s3:Size>"
		    "</s3:Contents></s3:ListBucketResult>",
		    &g, &pg) == 0 &&
		  g.n == 1 && strcmp(g.keys[0], "k") == 0,
	      "prefixed names");

	memset(&g, 0, sizeof(g));
	g.stop_after = 1;
	CHECK(backend__s3_xml_list(doc, strlen(doc), collect, &g, &pg) == 7 && g.n == 1,
	      "callback stops the listing");
	free(pg.next_token);
}

static void expect_bad(const char *what, const char *xml)
{
	struct got g;
	struct backend_s3_page pg;
	int err = parse(xml, &g, &pg);

	CHECK(err == -EBADMSG, "%s: expected -EBADMSG, got %d", what, err);
	free(pg.next_token);
}

static void expect_skip(const char *what, const char *xml)
{
	struct got g;
	struct backend_s3_page pg;
	int err = parse(xml, &g, &pg);

	CHECK(err == 0 && g.n == 0 && pg.skipped == 1, "%s: err %d n %d skipped %zu", what, err,
	      g.n, pg.skipped);
	free(pg.next_token);
}

static void test_hostile(void)
{
	expect_bad("empty", "");
	expect_bad("text only", "hello");
	expect_bad("wrong root", "<Error><Code>AccessDenied</Code></Error>");
	expect_bad("unterminated root", "<ListBucketResult><Contents><Key>a</Key>");
	expect_bad("unterminated tag", "<ListBucketResult><Contents");
	expect_bad("unterminated comment", "<ListBucketResult><!-- ");
	expect_bad("unterminated cdata", "<ListBucketResult><![CDATA[ ");
	expect_bad("unterminated pi", "<?xml ");
	expect_bad("unterminated attr", "<ListBucketResult a=\"x>");
	expect_bad("mismatched", "<ListBucketResult><Contents></Key></ListBucketResult>");
	expect_bad("two roots", "<ListBucketResult/><ListBucketResult/>");
	expect_bad("trailing text", "<ListBucketResult/>junk");
	expect_bad("doctype",
		   "<!DOCTYPE x [<!ENTITY a \"aaaa\">]><ListBucketResult>&a;</ListBucketResult>");
	expect_bad("stray close", "</ListBucketResult>");
	expect_bad("lt in tag", "<ListBucketResult <x>");
	expect_bad("bad token entity",
		   "<ListBucketResult><NextContinuationToken>&bogus;</NextContinuationToken>"
		   "</ListBucketResult>");
	expect_skip("huge size",
		    "<ListBucketResult><Contents><Key>k</Key>"
		    "<Size>99999999999999999999999</Size></Contents></ListBucketResult>");
	expect_skip("2^63", "<ListBucketResult><Contents><Key>k</Key>"
			    "<Size>9223372036854775808</Size></Contents></ListBucketResult>");
	expect_skip("negative", "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size>"
				"</Contents></ListBucketResult>");
	expect_skip("hex size", "<ListBucketResult><Contents><Key>k</Key><Size>0x10</Size>"
				"</Contents></ListBucketResult>");
	expect_skip("empty key", "<ListBucketResult><Contents><Key></Key><Size>1</Size>"
				 "</Contents></ListBucketResult>");
	expect_skip("empty-element key", "<ListBucketResult><Contents><Key/><Size>1</Size>"
					 "</Contents></ListBucketResult>");
	expect_skip("nul entity", "<ListBucketResult><Contents><Key>a&#0;b</Key><Size>1</Size>"
				  "</Contents></ListBucketResult>");
	expect_skip("surrogate", "<ListBucketResult><Contents><Key>a&#xD800;</Key><Size>1</Size>"
				 "</Contents></ListBucketResult>");
	expect_skip("too big cp", "<ListBucketResult><Contents><Key>&#x110000;</Key><Size>1</Size>"
				  "</Contents></ListBucketResult>");
	expect_skip("long cp", "<ListBucketResult><Contents><Key>&#99999999999999999999;</Key>"
			       "<Size>1</Size></Contents></ListBucketResult>");
	expect_skip("unknown entity", "<ListBucketResult><Contents><Key>&nbsp;</Key><Size>1</Size>"
				      "</Contents></ListBucketResult>");
	expect_skip("bare amp", "<ListBucketResult><Contents><Key>a & b</Key><Size>1</Size>"
				"</Contents></ListBucketResult>");
	expect_skip("markup in key",
		    "<ListBucketResult><Contents><Key>a<b>x</b></Key><Size>1</Size>"
		    "</Contents></ListBucketResult>");
	{
		/* a raw NUL inside a key */
		static const char doc[] =
		    "<ListBucketResult><Contents><Key>a\0b</Key><Size>1</Size>"
		    "</Contents></ListBucketResult>";
		struct got g;
		struct backend_s3_page pg;

		memset(&g, 0, sizeof(g));
		CHECK(backend__s3_xml_list(doc, sizeof(doc) - 1, collect, &g, &pg) == 0 &&
			  g.n == 0 && pg.skipped == 1,
		      "raw NUL in key");
	}
	{
		/* 1 MB key: skipped; a 4096-byte key: accepted */
		size_t n = 1 << 20;
		char *doc = malloc(n + 200), *p = doc;
		struct got g;
		struct backend_s3_page pg;

		p += snprintf(p, 100, "<ListBucketResult><Contents><Key>");
		memset(p, 'k', n);
		p += n;
		snprintf(p, 100, "</Key><Size>1</Size></Contents></ListBucketResult>");
		CHECK(parse(doc, &g, &pg) == 0 && g.n == 0 && pg.skipped == 1, "1 MB key skipped");
		p = doc + snprintf(doc, 100, "<ListBucketResult><Contents><Key>");
		memset(p, 'k', BACKEND_S3_KEY_MAX);
		p += BACKEND_S3_KEY_MAX;
		snprintf(p, 100, "</Key><Size>1</Size></Contents></ListBucketResult>");
		CHECK(parse(doc, &g, &pg) == 0 && g.n == 1 && g.maxkey == BACKEND_S3_KEY_MAX,
		      "4096-byte key kept");
		/* 1 MB continuation token: the page cannot be continued */
		p = doc + snprintf(doc, 100, "<ListBucketResult><NextContinuationToken>");
		memset(p, 't', n);
		p += n;
		snprintf(p, 100, "</NextContinuationToken></ListBucketResult>");
		CHECK(parse(doc, &g, &pg) == -EBADMSG, "1 MB token refused");
		free(pg.next_token);
		/* deep nesting */
		p = doc + snprintf(doc, 100, "<ListBucketResult>");
		for (int i = 0; i < 100000; i++)
			p += snprintf(p, 8, "<a>");
		*p = '\0';
		CHECK(parse(doc, &g, &pg) == -EBADMSG, "deep nesting refused");
		/* many comments and PIs: no recursion */
		p = doc + snprintf(doc, 100, "<ListBucketResult>");
		for (int i = 0; i < 50000; i++) /* 600 KB */
			p += snprintf(p, 16, "<?x?><!---->");
		snprintf(p, 100, "</ListBucketResult>");
		CHECK(parse(doc, &g, &pg) == 0, "many PIs");
		free(doc);
	}
	{
		/* nested garbage and unknown elements are ignored */
		struct got g;
		struct backend_s3_page pg;

		CHECK(
		    parse(
			"<ListBucketResult><Foo><Contents><Key>deep</Key><Size>1</Size></Contents>"
			"</Foo><Contents><Bar><Key>x</Key></Bar><Key>ok</Key><Size>2</Size>"
			"<Key2>z</Key2></Contents></ListBucketResult>",
			&g, &pg) == 0 &&
			g.n == 1 && strcmp(g.keys[0], "ok") == 0 && g.sizes[0] == 2,
		    "nested garbage: n %d %s", g.n, g.keys[0]);
		CHECK(parse("<ListBucketResult><Contents><Key>a</Key><Key>b</Key><Size>1</Size>"
			    "<Size>3</Size></Contents></ListBucketResult>",
			    &g, &pg) == 0 &&
			  g.n == 1 && strcmp(g.keys[0], "b") == 0 && g.sizes[0] == 3,
		      "repeated fields: the last wins");
	}
}

static void test_fuzz(unsigned seed)
{
	static const char *pieces[] = {
	    "<ListBucketResult>",
	    "</ListBucketResult>",
	    "<Contents>",
	    "</Contents>",
	    "<Key>",
	    "</Key>",
	    "<Size>",
	    "</Size>",
	    "12",
	    "&amp;",
	    "&#x41;",
	    "&",
	    "<",
	    ">",
	    "<!--",
	    "-->",
	    "<![CDATA[",
	    "]]>",
	    "<?",
	    "?>",
	    "\"",
	    "'",
	    "/>",
	    "<IsTruncated>",
	    "</IsTruncated>",
	    "true",
	    "<NextContinuationToken>",
	    "</NextContinuationToken>",
	    "x",
	    " ",
	    "\0",
	    "<ETag>",
	    "</ETag>",
	    "<LastModified>",
	    "2020-01-01T00:00:00Z",
	    "</LastModified>",
	};
	char doc[4096];
	int n = 0;

	srand(seed);
	for (int iter = 0; iter < 20000; iter++) {
		size_t len = 0;
		int parts = rand() % 40;
		struct got g;
		struct backend_s3_page pg;
		char code[32], msg[64];
		int err;

		for (int i = 0; i < parts; i++) {
			const char *pc = pieces[rand() % (int)(sizeof(pieces) / sizeof(pieces[0]))];
			size_t pl = pc[0] ? strlen(pc) : 1;

			if (len + pl >= sizeof(doc))
				break;
			memcpy(doc + len, pc, pl);
			len += pl;
		}
		if (rand() % 4 == 0 && len > 0) /* flip random bytes */
			for (int k = 0; k < 3; k++)
				doc[rand() % (int)len] = (char)(rand() & 0xff);
		memset(&g, 0, sizeof(g));
		err = backend__s3_xml_list(doc, len, collect, &g, &pg);
		free(pg.next_token);
		if (err == 0)
			n++;
		if (err != 0 && err != -EBADMSG && err != -100) {
			CHECK(0, "fuzz seed %u iter %d: unexpected %d", seed, iter, err);
			break;
		}
		CHECK(err != -100, "fuzz: key length mismatch");
		backend__s3_xml_error(doc, len, code, sizeof(code), msg, sizeof(msg));
	}
	printf("fuzz: seed %u, %d of 20000 random documents parsed\n", seed, n);
}

static void test_error_and_dates(void)
{
	char code[64], msg[128];
	int64_t t;
	static const char e403[] =
	    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SignatureDoesNotMatch</Code>"
	    "<Message>The request signature we calculated does not match the signature you "
	    "provided. Check your key and signing method.</Message>"
	    "<AWSAccessKeyId>AKIA</AWSAccessKeyId><StringToSign>x</StringToSign>"
	    "<RequestId>4442587FB7D0A2F9</RequestId></Error>";

	CHECK(backend__s3_xml_error(e403, strlen(e403), code, sizeof(code), msg, sizeof(msg)) ==
		      0 &&
		  strcmp(code, "SignatureDoesNotMatch") == 0 &&
		  strncmp(msg, "The request signature we calculated", 35) == 0,
	      "error: %s / %s", code, msg);
	CHECK(backend__s3_xml_error("<Error><Code>A&amp;B\x01</Code></Error>", 37, code, 4, msg,
				    sizeof(msg)) == 0 &&
		  strcmp(code, "A&B") == 0 && msg[0] == '\0',
	      "error truncated: %s", code);
	CHECK(backend__s3_xml_error("<Error><Code>x", 14, code, sizeof(code), msg, sizeof(msg)) ==
		      -EBADMSG &&
		  code[0] == '\0',
	      "unterminated error");
	CHECK(backend__s3_xml_error("<html>nope</html>", 17, code, sizeof(code), msg,
				    sizeof(msg)) == -EBADMSG,
	      "not an error document");

	CHECK(backend__iso8601_parse("1970-01-01T00:00:00Z", 20, &t) == 0 && t == 0, "epoch");
	CHECK(backend__iso8601_parse("2013-05-24T00:00:00.000Z", 24, &t) == 0 && t == 1369353600,
	      "2013 %lld", (long long)t);
	CHECK(backend__iso8601_parse("2000-03-01T00:00:00-05:30", 25, &t) == 0 &&
		  t == 951868800 + 5 * 3600 + 1800,
	      "offset %lld", (long long)t);
	CHECK(backend__iso8601_parse("2013-02-30T00:00:00Z", 20, &t) == -EINVAL, "feb 30");
	CHECK(backend__iso8601_parse("2013-05-24 00:00:00Z", 20, &t) == -EINVAL, "no T");
	CHECK(backend__iso8601_parse("2013-05-24T00:00:00", 19, &t) == -EINVAL, "no zone");
	CHECK(backend__iso8601_parse("2013-05-24T00:00:00.Z", 21, &t) == -EINVAL, "empty fraction");
	CHECK(backend__iso8601_parse("2013-05-24T00:00:00Zjunk", 24, &t) == -EINVAL, "junk");
}

/* What an error answer says (backend_errbody.c): every store's body, cut short or not. */
static void test_errbody(void)
{
	static const struct {
		const char *body, *code, *msg;
	} cases[] = {
	    {"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code>"
	     "<Message>Access Denied</Message><RequestId>4442587FB7D0A2F9</RequestId></Error>",
	     "AccessDenied", "Access Denied"},
	    /* cut inside the message (the first 1 KiB only is kept) */
	    {"<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calc",
	     "SignatureDoesNotMatch", "The request signature we calc"},
	    /* GCS JSON: the reason is the code */
	    {"{\n \"error\": {\n  \"code\": 403,\n  \"message\": \"a@b.iam.gserviceaccount.com "
	     "does not have storage.objects.get access\",\n  \"errors\": [{\"message\": \"x\", "
	     "\"domain\": \"global\", \"reason\": \"forbidden\"}]}}",
	     "forbidden", "a@b.iam.gserviceaccount.com does not have storage.objects.get access"},
	    /* AIStore: message and a numeric status, no code */
	    {"{\"message\":\"bck ais://b: object \\\"x.tar\\\" does not exist\",\"method\":\"GET\","
	     "\"status\":404}",
	     "", "bck ais://b: object \"x.tar\" does not exist"},
	    /* JSON cut inside the message: the reader stops there, the first line is shown */
	    {"{\"status\":404,\"message\":\"bck ais://b: obj", "",
	     "{\"status\":404,\"message\":\"bck ais://b: obj"},
	    /* JSON cut after the message: what came before the cut */
	    {"{\"message\":\"gone\",\"status\":4", "", "gone"},
	    {"<html>\r\n<head><title>403 Forbidden</title></head>\r\n<body></body></html>", "",
	     "403 Forbidden"},
	    {"busy\n", "", "busy"},
	    {"  \n", "", ""},
	    {"", "", ""},
	    /* bytes that are not printable are escaped, whitespace runs are one space */
	    {"<Error><Code>A\x01"
	     "B</Code><Message>line one\r\n\tline\xff two</Message></Error>",
	     "A\\x01B", "line one line\\xff two"},
	};
	char code[64], msg[128];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		backend__errbody_parse(cases[i].body, strlen(cases[i].body), code, sizeof(code),
				       msg, sizeof(msg));
		CHECK(strcmp(code, cases[i].code) == 0, "errbody %zu: code '%s', want '%s'", i,
		      code, cases[i].code);
		CHECK(strcmp(msg, cases[i].msg) == 0, "errbody %zu: message '%s', want '%s'", i,
		      msg, cases[i].msg);
	}
	/* bounded: a long message is cut to the room given, NUL-terminated */
	backend__errbody_parse("<Error><Code>AAAAAAAAAAAAAAAAAAAAAAAA</Code><Message>"
			       "\x80\x80\x80\x80\x80\x80\x80\x80\x80</Message></Error>",
			       86, code, 8, msg, 10);
	CHECK(strlen(code) == 7 && strlen(msg) <= 9, "bounded: '%s' '%s'", code, msg);
	/* any mix of the pieces, cut anywhere: within the room passed (a NUL inside it, nothing
	 * written past it: the rest of the arrays keep their fill), no read past len (ASan) */
	{
		static const char *const bits[] = {
		    "{", "}", "\"", ":", ",", "\\", "\"message\"", "\"reason\"", "\"code\"", "403",
		    "<Error>", "<Code>", "</Code>", "<Message>", "</Message>", "<title>", "\n",
		    "\x01", "\xff", " ", "x",
		    /* whole fields, so that the room is filled on each path */
		    "{\"error\":{\"code\":\"", "{\"code\":", "{\"message\":\"", "\"reason\":\"",
		    "<Error><Code>", "<Message>", "0123456789abcdefghijklmnopqrstuvwxyz"};
		unsigned st = 7;
		int bounded = 0, with_code = 0, with_msg = 0, iters = 20000;

		for (int iter = 0; iter < iters; iter++) {
			char doc[256], *heap;
			size_t len = 0, ccap = 1 + (size_t)iter % sizeof(code),
			       mcap = 1 + (size_t)iter % sizeof(msg), cl, ml, k2;
			int k = 1 + (int)((st = st * 1103515245u + 12345u) >> 16) % 24, past = 0;

			for (int j = 0; j < k; j++) {
				const char *b = bits[((st = st * 1103515245u + 12345u) >> 16) %
						     (sizeof(bits) / sizeof(bits[0]))];
				size_t bl = strlen(b);

				if (len + bl > sizeof(doc))
					break;
				memcpy(doc + len, b, bl);
				len += bl;
			}
			heap = malloc(len ? len : 1); /* exactly len: ASan sees any overread */
			if (!heap)
				break;
			memcpy(heap, doc, len);
			memset(code, 0x5a, sizeof(code));
			memset(msg, 0x5a, sizeof(msg));
			backend__errbody_parse(heap, len, code, ccap, msg, mcap);
			free(heap);
			cl = strnlen(code, ccap);
			ml = strnlen(msg, mcap);
			for (k2 = ccap; k2 < sizeof(code); k2++)
				past |= code[k2] != 0x5a;
			for (k2 = mcap; k2 < sizeof(msg); k2++)
				past |= msg[k2] != 0x5a;
			if (cl >= ccap || ml >= mcap || past) {
				CHECK(0,
				      "errbody fuzz %d: code %zu bytes in room %zu, message %zu in "
				      "%zu, %s past the room",
				      iter, cl, ccap, ml, mcap,
				      past ? "written" : "nothing written");
				break;
			}
			bounded++;
			with_code += cl > 0;
			with_msg += ml > 0;
		}
		CHECK(bounded == iters, "errbody fuzz: %d of %d bounded", bounded, iters);
		/* the generator reaches the parser's fields, not only its fallback */
		CHECK(with_code > 100 && with_msg > 1000, "errbody fuzz: %d codes, %d messages",
		      with_code, with_msg);
	}
}

int main(void)
{
	const char *s = getenv("SHARDFS_TEST_SEED");
	unsigned seed = s ? (unsigned)strtoul(s, NULL, 10) : 20240611u;

	test_real();
	test_hostile();
	test_error_and_dates();
	test_errbody();
	test_fuzz(seed);
	return check_summary("s3_xml");
}
