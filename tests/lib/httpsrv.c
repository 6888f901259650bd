/*
 * httpsrv.c — the hand-driven HTTP/1.1 test server's pieces of httpsrv.h (the C tests of the
 * remote stores' I/O loop). Blocking socket calls on the caller's thread; the one lock is
 * this file's, held only to record or await a read's end. It makes no CHECK (check.h's counters
 * are its own translation unit's): a failure here is a FAIL, which ends the test.
 */
#include "httpsrv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

int httpsrv_listen(int backlog, unsigned *port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int one = 1, lfd;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, backlog) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0)
		FAIL("listener: %s", strerror(errno));
	*port = ntohs(sa.sin_port);
	return lfd;
}

int httpsrv_read_range(int c, unsigned len, unsigned *a, unsigned *b, int i)
{
	char req[4096];
	size_t n = 0;
	const char *rg;

	for (;;) {
		ssize_t k;

		if (n == sizeof(req) - 1)
			FAIL("request %d: a head of more than %zu bytes", i, n);
		k = read(c, req + n, 1); /* byte by byte: nothing of the next */
		if (k <= 0)
			return -1;
		n += (size_t)k;
		req[n] = '\0';
		if (n >= 4 && memcmp(req + n - 4, "\r\n\r\n", 4) == 0)
			break;
	}
	rg = strstr(req, "Range: bytes=");
	if (!rg || sscanf(rg, "Range: bytes=%u-%u", a, b) != 2 || *b >= len || *a > *b)
		FAIL("request %d: no range of the body: %s", i, req);
	return 0;
}

void httpsrv_send(int c, const void *p, size_t n, const char *what)
{
	if (write(c, p, n) != (ssize_t)n)
		FAIL("%s: write: %s", what, strerror(errno));
}

void httpsrv_head206(int c, unsigned a, unsigned b, unsigned len, const char *extra,
		     const char *what)
{
	char h[512];

	snprintf(h, sizeof(h),
		 "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %u-%u/%u\r\n"
		 "Content-Length: %u\r\nETag: \"e1\"\r\n%s\r\n",
		 a, b, len, b - a + 1, extra);
	httpsrv_send(c, h, strlen(h), what);
}

void httpsrv_done(void *arg, int err, uint64_t bytes)
{
	struct httpsrv_end *e = arg;

	(void)bytes;
	pthread_mutex_lock(&mu);
	e->err = err;
	e->done = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

void httpsrv_wait_done(struct httpsrv_end *e, int wait_s, const char *what)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += wait_s;
	pthread_mutex_lock(&mu);
	while (!e->done)
		if (pthread_cond_timedwait(&cv, &mu, &t) == ETIMEDOUT)
			FAIL("%s: no end within %d s", what, wait_s);
	pthread_mutex_unlock(&mu);
}
