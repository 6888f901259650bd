/*
 * test_sigv4.c — SigV4 signing against AWS's published examples, and the
 * encoding helpers and credentials files around it.
 *
 * Vectors:
 * - the four header-signed examples of the S3 API reference ("Signature
 *   Calculations for the Authorization Header: Transferring Payload in a
 *   Single Chunk", section "Examples: Signature Calculations"): GET Object
 *   with Range bytes=0-9, PUT Object "test$file.text", GET Bucket Lifecycle
 *   and GET Bucket (List Objects) ?max-keys=2&prefix=J, with the key
 *   AKIAIOSFODNN7EXAMPLE, 20130524T000000Z, us-east-1, examplebucket;
 * - get-vanilla and get-vanilla-query-order-key-case of AWS's SigV4 test
 *   suite (AKIDEXAMPLE, 20150830T123600Z, service "service", which signs no
 *   x-amz-content-sha256).
 *
 * Usage: test_sigv4            run the tests
 *        test_sigv4 sign ...   the signing tool of test_sigv4_botocore.py
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_i.h"
#include "check.h"

#define EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define T20130524 1369353600 /* 2013-05-24T00:00:00Z */
#define T20150830 1440938160 /* 2015-08-30T12:36:00Z */

static struct backend_creds example_creds = {
    .access_key = (char *)"AKIAIOSFODNN7EXAMPLE",
    .secret_key = (char *)"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
};

static const char *sig_of(const char *auth)
{
	const char *s = strstr(auth, "Signature=");

	return s ? s + 10 : "";
}

static void test_s3_examples(void)
{
	struct backend_sigv4_out out;
	struct backend_sigv4_req rq = {
	    .method = "GET",
	    .host = "examplebucket.s3.amazonaws.com",
	    .path = "/test.txt",
	    .payload_hash = EMPTY_SHA,
	    .content_sha256 = 1,
	    .now = T20130524,
	    .region = "us-east-1",
	    .service = "s3",
	};
	struct backend_kv range[] = {{"Range", "bytes=0-9"}};
	struct backend_kv put[] = {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
				   {"x-amz-storage-class", "REDUCED_REDUNDANCY"}};
	struct backend_kv list[] = {{"prefix", "J"}, {"max-keys", "2"}};
	struct backend_kv lifecycle[] = {{"lifecycle", NULL}};
	char q[256], path[256];
	int err;

	/* GET Object, Range signed */
	rq.headers = range;
	rq.nheaders = 1;
	err = backend__sigv4_sign(&rq, &example_creds, &out);
	CHECK(err == 0, "GET object: err %d", err);
	CHECK(strcmp(out.amz_date, "20130524T000000Z") == 0, "amz date %s", out.amz_date);
	CHECK(
	    strcmp(out.authorization,
		   "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
		   "aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
		   "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41") ==
		0,
	    "GET object: %s", out.authorization);

	/* PUT Object: key "test$file.text" encoded once, signed payload */
	CHECK(backend__uri_encode(path, sizeof(path), "/test$file.text", 15, 1) == 17 &&
		  strcmp(path, "/test%24file.text") == 0,
	      "encode %s", path);
	rq.method = "PUT";
	rq.path = path;
	rq.headers = put;
	rq.nheaders = 2;
	rq.payload_hash = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072";
	err = backend__sigv4_sign(&rq, &example_creds, &out);
	CHECK(err == 0, "PUT: err %d", err);
	CHECK(
	    strstr(out.authorization,
		   "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,"),
	    "PUT signed headers: %s", out.authorization);
	CHECK(strcmp(sig_of(out.authorization),
		     "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd") == 0,
	      "PUT: %s", out.authorization);

	/* GET Bucket Lifecycle: a query parameter without a value */
	CHECK(backend__sigv4_query(q, sizeof(q), lifecycle, 1) == 10 &&
		  strcmp(q, "lifecycle=") == 0,
	      "lifecycle query %s", q);
	rq.method = "GET";
	rq.path = "/";
	rq.query = q;
	rq.headers = NULL;
	rq.nheaders = 0;
	rq.payload_hash = EMPTY_SHA;
	err = backend__sigv4_sign(&rq, &example_creds, &out);
	CHECK(err == 0 &&
		  strcmp(sig_of(out.authorization),
			 "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543") == 0,
	      "lifecycle: %d %s", err, out.authorization);

	/* GET Bucket (List Objects): parameters given out of order */
	CHECK(backend__sigv4_query(q, sizeof(q), list, 2) > 0 &&
		  strcmp(q, "max-keys=2&prefix=J") == 0,
	      "list query %s", q);
	err = backend__sigv4_sign(&rq, &example_creds, &out);
	CHECK(err == 0 &&
		  strcmp(sig_of(out.authorization),
			 "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7") == 0,
	      "list: %d %s", err, out.authorization);
	CHECK(strcmp(out.payload_hash, EMPTY_SHA) == 0, "payload hash %s", out.payload_hash);

	/* UNSIGNED-PAYLOAD is what shardfs sends */
	rq.payload_hash = NULL;
	err = backend__sigv4_sign(&rq, &example_creds, &out);
	CHECK(err == 0 && strcmp(out.payload_hash, "UNSIGNED-PAYLOAD") == 0, "unsigned: %s",
	      out.payload_hash);
	CHECK(strcmp(sig_of(out.authorization),
		     "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7") != 0,
	      "unsigned payload must change the signature");
}

static void test_suite_vanilla(void)
{
	struct backend_creds cr = {
	    .access_key = (char *)"AKIDEXAMPLE",
	    .secret_key = (char *)"wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
	};
	struct backend_sigv4_req rq = {
	    .method = "GET",
	    .host = "example.amazonaws.com",
	    .path = "/",
	    .payload_hash = EMPTY_SHA,
	    .now = T20150830,
	    .region = "us-east-1",
	    .service = "service",
	};
	struct backend_kv params[] = {{"Param2", "value2"}, {"Param1", "value1"}};
	struct backend_sigv4_out out;
	char q[128];
	int err;

	err = backend__sigv4_sign(&rq, &cr, &out);
	CHECK(err == 0 &&
		  strcmp(out.authorization,
			 "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
			 "aws4_request, SignedHeaders=host;x-amz-date, "
			 "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d"
			 "763fbf31") == 0,
	      "get-vanilla: %d %s", err, out.authorization);
	backend__sigv4_query(q, sizeof(q), params, 2);
	rq.query = q;
	err = backend__sigv4_sign(&rq, &cr, &out);
	CHECK(err == 0 &&
		  strcmp(sig_of(out.authorization),
			 "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500") == 0,
	      "get-vanilla-query-order-key-case: %s (%s)", out.authorization, q);
}

static void test_token_and_errors(void)
{
	struct backend_creds cr = example_creds;
	struct backend_sigv4_req rq = {
	    .method = "HEAD",
	    .host = "b.s3.us-west-2.amazonaws.com",
	    .path = "/a%20b",
	    .content_sha256 = 1,
	    .now = T20130524,
	    .region = "us-west-2",
	    .service = "s3",
	};
	struct backend_kv dup[] = {{"Host", "x"}};
	struct backend_sigv4_out out;
	int err;

	cr.session_token = (char *)"FQoGZXIvYXdzEXAMPLE";
	err = backend__sigv4_sign(&rq, &cr, &out);
	CHECK(err == 0 &&
		  strstr(out.authorization, "SignedHeaders=host;x-amz-content-sha256;x-amz-date;"
					    "x-amz-security-token,"),
	      "token signed: %d %s", err, out.authorization);
	CHECK(!strstr(out.authorization, "wJalr") && !strstr(out.authorization, "FQoG"),
	      "no secret in the header");
	rq.headers = dup;
	rq.nheaders = 1;
	CHECK(backend__sigv4_sign(&rq, &cr, &out) == -EINVAL, "duplicate host must fail");
	rq.nheaders = 0;
	rq.path = "relative";
	CHECK(backend__sigv4_sign(&rq, &cr, &out) == -EINVAL, "relative path must fail");
	rq.path = "/";
	cr.access_key = (char *)"AKIA/bad";
	CHECK(backend__sigv4_sign(&rq, &cr, &out) == -EINVAL, "key id with '/' must fail");
	cr.access_key = NULL;
	CHECK(backend__sigv4_sign(&rq, &cr, &out) == -EINVAL, "no key must fail");
}

static void test_encoding(void)
{
	char b[64];
	struct backend_kv p[] = {{"continuation-token", "1/a+b=c d"},
				 {"prefix", "train/ü"},
				 {"list-type", "2"},
				 {"max-keys", "1000"}};
	char q[256];

	CHECK(backend__uri_encode(b, sizeof(b), "a b/c~d-e_f.g*", 14, 1) > 0 &&
		  strcmp(b, "a%20b/c~d-e_f.g%2A") == 0,
	      "path encode: %s", b);
	CHECK(backend__uri_encode(b, sizeof(b), "a/b", 3, 0) > 0 && strcmp(b, "a%2Fb") == 0,
	      "query encode: %s", b);
	CHECK(backend__uri_encode(b, 4, "abcd", 4, 0) == -ENAMETOOLONG, "overflow");
	CHECK(backend__uri_encode(b, 4, "%", 1, 0) == 3 && strcmp(b, "%25") == 0, "exact fit %s",
	      b);
	CHECK(backend__sigv4_query(q, sizeof(q), p, 4) > 0 &&
		  strcmp(q, "continuation-token=1%2Fa%2Bb%3Dc%20d&list-type=2&max-keys=1000&"
			    "prefix=train%2F%C3%BC") == 0,
	      "query: %s", q);
	CHECK(backend__sigv4_query(q, 10, p, 4) == -ENAMETOOLONG && q[0] == '\0', "query overflow");
}

/* What the first credentials of a chain are. */
struct got {
	char key[64];
	int token, bearer;
};

static int got_cb(void *arg, const struct backend_creds *c)
{
	struct got *g = arg;

	snprintf(g->key, sizeof(g->key), "%s", c->access_key ? c->access_key : "");
	g->token = c->session_token != NULL;
	g->bearer = c->bearer != NULL;
	return 0;
}

/* The first credentials of a mount's chain (gcs: GCS's), into *g. */
static int chain_first(int gcs, struct got *g)
{
	static const struct backend_logger log; /* lines to stderr */
	struct backend_credsrc *s = NULL;
	char why[256] = "";
	int err = backend__credsrc_open(&s, gcs, NULL, 5, "test", &log, why, sizeof(why));

	memset(g, 0, sizeof(*g));
	if (err == 0 && !s)
		err = -ENOENT;
	if (err == 0)
		err = backend__credsrc_use(s, got_cb, g);
	backend__credsrc_close(s);
	return err;
}

static void test_creds_file(void)
{
	char path[] = "/tmp/shardfs-test-creds-XXXXXX";
	int fd = mkstemp(path);
	static const char text[] = "# comment\n"
				   "[default]\n"
				   "aws_access_key_id = AKIADEFAULT\n"
				   "aws_secret_access_key=secretdefault \r\n"
				   "\n"
				   "[ other ]\n"
				   "  aws_access_key_id=AKIAOTHER\n"
				   "aws_secret_access_key = s/other+x\n"
				   "aws_session_token = tok=\n"
				   "[partial]\n"
				   "aws_access_key_id=AKIAPARTIAL\n";
	struct backend_creds c = {0};
	struct backend_endpoint ep;
	struct got g;

	CHECK(fd >= 0, "mkstemp");
	if (fd < 0)
		return;
	CHECK(write(fd, text, sizeof(text) - 1) == (ssize_t)sizeof(text) - 1, "write");
	close(fd);
	CHECK(backend__creds_file(&c, path, "default") == 0 && c.access_key &&
		  strcmp(c.access_key, "AKIADEFAULT") == 0 &&
		  strcmp(c.secret_key, "secretdefault") == 0 && !c.session_token,
	      "default profile");
	backend__creds_clear(&c);
	CHECK(backend__creds_file(&c, path, "other") == 0 && c.access_key &&
		  strcmp(c.access_key, "AKIAOTHER") == 0 &&
		  strcmp(c.secret_key, "s/other+x") == 0 && c.session_token &&
		  strcmp(c.session_token, "tok=") == 0,
	      "other profile");
	backend__creds_clear(&c);
	CHECK(backend__creds_file(&c, path, "partial") == 0 && !c.access_key,
	      "incomplete profile gives nothing");
	CHECK(backend__creds_file(&c, path, "nope") == 0 && !c.access_key, "missing profile");
	CHECK(backend__creds_file(&c, "/nonexistent/creds", "default") == -ENOENT, "no file");

	/* the static links of a mount's chain (the environment, then the file) */
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	setenv("AWS_PROFILE", "other", 1);
	unsetenv("AWS_ACCESS_KEY_ID");
	CHECK(chain_first(0, &g) == 0 && strcmp(g.key, "AKIAOTHER") == 0 && g.token,
	      "AWS_PROFILE + AWS_SHARED_CREDENTIALS_FILE: %s", g.key);
	setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	CHECK(chain_first(0, &g) == 0 && strcmp(g.key, "AKIAENV") == 0 && !g.token,
	      "environment first: %s", g.key);
	setenv("GCS_HMAC_ACCESS_ID", "GOOGID", 1);
	setenv("GCS_HMAC_SECRET", "googsecret", 1);
	CHECK(chain_first(1, &g) == 0 && strcmp(g.key, "GOOGID") == 0 && !g.bearer, "gcs hmac: %s",
	      g.key);
	setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.token", 1);
	CHECK(chain_first(1, &g) == 0 && g.bearer && !g.key[0], "gcs oauth");
	unlink(path);

	CHECK(backend__endpoint_parse(&ep, "http://127.0.0.1:9000/") == 0 &&
		  strcmp(ep.host, "127.0.0.1:9000") == 0 && strcmp(ep.path, "") == 0 &&
		  strcmp(ep.base, "http://127.0.0.1:9000") == 0,
	      "endpoint %s %s", ep.host, ep.base);
	CHECK(backend__endpoint_parse(&ep, "https://s3.example.com:443/s3/") == 0 &&
		  strcmp(ep.host, "s3.example.com") == 0 && strcmp(ep.path, "/s3") == 0 && ep.https,
	      "endpoint default port %s %s", ep.host, ep.path);
	CHECK(backend__endpoint_parse(&ep, "http://u:p@h/") == -EINVAL, "userinfo refused");
	CHECK(backend__endpoint_parse(&ep, "ftp://h/") == -EINVAL, "scheme refused");
	CHECK(backend__endpoint_parse(&ep, "http:///x") == -EINVAL, "no host refused");
}

/* test_sigv4 sign METHOD HOST PATH QUERY TIME REGION SERVICE [HEADER=VALUE...]
 * Credentials from SIGV4_ACCESS_KEY / SIGV4_SECRET_KEY / SIGV4_TOKEN (never
 * argv). QUERY is raw name=value pairs joined by '&' (names and values not
 * encoded; "-" for none), encoded and sorted here as backend_s3.c does.
 * Prints the canonical query and then the Authorization value. */
static int tool_sign(int argc, char **argv)
{
	struct backend_kv params[32], headers[16];
	size_t np = 0, nh = 0;
	char q[8192], *qs = NULL;
	struct backend_creds cr = {
	    .access_key = getenv("SIGV4_ACCESS_KEY"),
	    .secret_key = getenv("SIGV4_SECRET_KEY"),
	    .session_token = getenv("SIGV4_TOKEN"),
	};
	struct backend_sigv4_req rq = {0};
	struct backend_sigv4_out out;
	char *end;
	int err;

	if (argc < 9)
		return 2;
	rq.method = argv[2];
	rq.host = argv[3];
	rq.path = argv[4];
	rq.now = (time_t)strtoll(argv[6], &end, 10);
	if (*end)
		return 2;
	rq.region = argv[7];
	rq.service = argv[8];
	rq.content_sha256 = 1;
	if (strcmp(argv[5], "-") != 0) {
		qs = strdup(argv[5]);
		for (char *save = NULL, *tok = strtok_r(qs, "&", &save); tok && np < 32;
		     tok = strtok_r(NULL, "&", &save)) {
			char *eq = strchr(tok, '=');

			if (eq)
				*eq = '\0';
			params[np].name = tok;
			params[np++].value = eq ? eq + 1 : "";
		}
	}
	if (backend__sigv4_query(q, sizeof(q), params, np) < 0)
		return 1;
	rq.query = q;
	for (int i = 9; i < argc && nh < 16; i++) {
		char *eq = strchr(argv[i], '=');

		if (!eq)
			return 2;
		*eq = '\0';
		headers[nh].name = argv[i];
		headers[nh++].value = eq + 1;
	}
	rq.headers = headers;
	rq.nheaders = nh;
	err = backend__sigv4_sign(&rq, &cr, &out);
	free(qs);
	if (err < 0) {
		printf("error %d\n", err);
		return 1;
	}
	printf("%s\n%s\n", q, out.authorization);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "sign") == 0)
		return tool_sign(argc, argv);
	test_s3_examples();
	test_suite_vanilla();
	test_token_and_errors();
	test_encoding();
	test_creds_file();
	return check_summary("sigv4");
}
