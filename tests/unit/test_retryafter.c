/*
 * test_retryafter.c — a 503's or 429's Retry-After (RFC 9110 10.2.3) as the
 * engines read it (backend_io_attempt.c): backend__io_retry_after_ms's
 * values, exact: delta-seconds (leading zeros, blanks around, too large:
 * saturated, never wrapped), HTTP-dates in the three forms (past: 0; 90 s
 * ahead: 90 s), and hostile ones refused (a sign, a fraction, a unit,
 * trailing bytes, a NUL, nothing, garbage, a value too long to be a date).
 * Then seeded strings (SHARDFS_TEST_SEED, printed): random digit strings
 * against a reference sum, random bytes never read as a wait unless all
 * digits. Then through a head's lines, as both engines hand them over: a
 * 503's and a 429's Retry-After is kept for the retry, a 200's or a bad
 * one is not, and the next answer's status line forgets it. Before the
 * change Retry-After was not read at all (every check here fails to build).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_io_i.h"
#include "check.h"
#include "test_rng.h"

#define SAT_S ((uint64_t)INT64_MAX / 1000)

static void ra_eq(const char *v, size_t len, int64_t now, int want_err, int64_t want_ms)
{
	int64_t ms = -7;
	int err = backend__io_retry_after_ms(v, len, now, &ms);

	CHECK(err == want_err && (err < 0 || ms == want_ms),
	      "Retry-After '%.*s': err %d, %" PRId64 " ms; want err %d, %" PRId64 " ms", (int)len,
	      v, err, ms, want_err, want_ms);
}

static void ra(const char *v, int want_err, int64_t want_ms)
{
	ra_eq(v, strlen(v), (int64_t)time(NULL), want_err, want_ms);
}

static void test_values(void)
{
	char date[64], big[200];
	int64_t now = (int64_t)time(NULL);
	time_t ahead = (time_t)(now + 90);
	struct tm tm;

	ra("1", 0, 1000);
	ra("0", 0, 0);
	ra(" 120 ", 0, 120000);
	ra("\t007", 0, 7000);
	ra("86400", 0, 86400000);
	ra("9223372036854775", 0, (int64_t)(9223372036854775ull * 1000));
	ra("99999999999999999999999999999999", 0, (int64_t)SAT_S * 1000);
	ra("18446744073709551617", 0, (int64_t)SAT_S * 1000); /* 2^64 + 1: no wrap */
	ra("-1", -EINVAL, 0);
	ra("+5", -EINVAL, 0);
	ra("1.5", -EINVAL, 0);
	ra("5s", -EINVAL, 0);
	ra("5 5", -EINVAL, 0);
	ra("", -EINVAL, 0);
	ra("   ", -EINVAL, 0);
	ra("soon", -EINVAL, 0);
	ra("0x10", -EINVAL, 0);
	ra_eq("1\0", 2, now, -EINVAL, 0);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	ra(big, -EINVAL, 0);
	/* dates: the past is no wait, the three forms read alike */
	ra("Sun, 06 Nov 1994 08:49:37 GMT", 0, 0);
	ra("Sunday, 06-Nov-94 08:49:37 GMT", 0, 0);
	ra("Sun Nov  6 08:49:37 1994", 0, 0);
	ra_eq("Sun, 06 Nov 1994 08:49:37 GMT", 29, 784111777 - 30, 0, 30000);
	gmtime_r(&ahead, &tm);
	strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
	ra_eq(date, strlen(date), now, 0, 90000);
	ra_eq(date, strlen(date), now + 90, 0, 0);
	ra_eq(date, strlen(date), now + 1000, 0, 0);
}

static uint64_t rng; /* test_rng.h's state, from the seed */

static void test_seeded(void)
{
	const char *e = getenv("SHARDFS_TEST_SEED");
	uint64_t seed = e ? strtoull(e, NULL, 10) : 20240611;
	char v[48];

	printf("seed %" PRIu64 " (SHARDFS_TEST_SEED)\n", seed);
	rng = seed * 2654435761u + 1;
	for (int i = 0; i < 20000; i++) {
		size_t n = 1 + rnd(&rng) % 30;
		uint64_t s = 0;

		for (size_t k = 0; k < n; k++) {
			v[k] = (char)('0' + rnd(&rng) % 10);
			if (s < SAT_S)
				s = s * 10 + (uint64_t)(v[k] - '0');
		}
		if (s > SAT_S)
			s = SAT_S;
		ra_eq(v, n, 0, 0, (int64_t)s * 1000);
	}
	for (int i = 0; i < 20000; i++) {
		size_t n = rnd(&rng) % (sizeof(v) - 1);
		int digits = n > 0, blank = 1;
		int64_t ms = -7;
		int err;

		for (size_t k = 0; k < n; k++) {
			v[k] = (char)(rnd(&rng) % 4 == 0 ? '0' + rnd(&rng) % 10 : rnd(&rng) % 256);
			digits &= v[k] >= '0' && v[k] <= '9';
			blank &= v[k] == ' ' || v[k] == '\t';
		}
		err = backend__io_retry_after_ms(v, n, 1000000000, &ms);
		CHECK(err == 0 || err == -EINVAL, "case %d: err %d", i, err);
		CHECK(!digits || err == 0, "case %d: %zu digits refused", i, n);
		CHECK(!blank || err == -EINVAL, "case %d: blanks read as a wait", i);
		CHECK(err < 0 || ms >= 0, "case %d: a negative wait %" PRId64, i, ms);
	}
}

static void header(struct io_easy *es, const char *line)
{
	char buf[128];
	size_t n = strlen(line);

	memcpy(buf, line, n);
	CHECK(backend__io_on_header(buf, 1, n, es) == n, "header '%s' refused", line);
}

static void test_head(void)
{
	struct backend_io *io = calloc(1, sizeof(*io));
	struct backend_req r = {0};
	struct xfer x = {0};
	struct io_easy es = {0};

	if (!io)
		FAIL("out of memory");
	r.method = "GET";
	r.range_len = 4096;
	x.io = io;
	x.r = &r;
	es.x = &x;
	x.easy = &es;
	backend__io_attempt_reset(&x);
	header(&es, "HTTP/1.1 503 Service Unavailable\r\n");
	header(&es, "Retry-After: 1\r\n");
	CHECK(x.ra_ms == 1000, "a 503's Retry-After: 1 kept as %" PRId64 " ms", x.ra_ms);
	header(&es, "HTTP/1.1 429 Too Many Requests\r\n");
	CHECK(x.ra_ms == -1, "the next status line kept %" PRId64 " ms", x.ra_ms);
	header(&es, "retry-after:   30\r\n");
	CHECK(x.ra_ms == 30000, "a 429's retry-after: 30 kept as %" PRId64 " ms", x.ra_ms);
	header(&es, "HTTP/1.1 503 Service Unavailable\r\n");
	header(&es, "Retry-After: -5\r\n");
	CHECK(x.ra_ms == -1, "a 503's Retry-After: -5 kept as %" PRId64 " ms", x.ra_ms);
	header(&es, "HTTP/1.1 200 OK\r\n");
	header(&es, "Retry-After: 5\r\n");
	CHECK(x.ra_ms == -1, "a 200's Retry-After kept as %" PRId64 " ms", x.ra_ms);
	free(io);
}

int main(void)
{
	test_values();
	test_seeded();
	test_head();
	return check_summary("test_retryafter");
}
