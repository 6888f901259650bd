/*
 * httpsrv.c — the hand-driven HTTP/1.1 test server's pieces of httpsrv.h (the C tests of the
 * remote stores' I/O loop). Blocking socket calls on the caller's thread; the one lock is
 * this file's, held only to record or await a read's end. It makes no CHECK (check.h's counters
 * are its own translation unit's): a failure here is a FAIL, which ends the test.
 */
#include "httpsrv.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
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

int httpsrv_wait_for(int (*cond)(void *), void *arg, int wait_s)
{
	for (int i = 0; i < wait_s * 1000; i++) {
		struct timespec ms = {0, 1000000};

		if (cond(arg))
			return 0;
		nanosleep(&ms, NULL);
	}
	return cond(arg) ? 0 : -1;
}

int httpsrv_client_fd(unsigned port)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int found = -1;

	if (!d)
		return -1;
	while (found < 0 && (e = readdir(d))) {
		struct sockaddr_in a;
		socklen_t l = sizeof(a);
		int fd;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		fd = (int)strtol(e->d_name, NULL, 10);
		if (getsockname(fd, (struct sockaddr *)&a, &l) == 0 && a.sin_family == AF_INET &&
		    ntohs(a.sin_port) == port)
			found = fd;
	}
	closedir(d);
	return found;
}

void httpsrv_accept_client(int lfd, int wait_s, int *c, int *cfd)
{
	struct sockaddr_in peer;
	socklen_t pl = sizeof(peer);
	struct pollfd p = {.fd = lfd, .events = POLLIN};

	if (poll(&p, 1, wait_s * 1000) != 1)
		FAIL("no connection within %d s", wait_s);
	*c = accept(lfd, (struct sockaddr *)&peer, &pl);
	if (*c < 0)
		FAIL("accept: %s", strerror(errno));
	*cfd = httpsrv_client_fd(ntohs(peer.sin_port));
	if (*cfd < 0)
		FAIL("the client's socket (port %u) not found", ntohs(peer.sin_port));
}

void httpsrv_fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (unsigned char)(seed >> 16);
	}
}

int httpsrv_inq(int fd)
{
	int n = -1;

	return ioctl(fd, SIOCINQ, &n) == 0 ? n : -1;
}

int httpsrv_rcvlowat(int fd)
{
	int v = 0;
	socklen_t l = sizeof(v);

	return getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, &l) == 0 ? v : -1;
}

struct backend *httpsrv_lean_store(unsigned port, int wait_s, int stall_s)
{
	struct backend_config cfg = {0};
	struct backend *be;
	char url[128];
	int err;

	cfg.connections = 1;
	cfg.max_connections = 1;
	cfg.http_engine = 1;	/* the lean engine */
	cfg.retry_budget_s = 0; /* one attempt: a stall fails the read */
	cfg.connect_timeout_s = wait_s;
	cfg.stall_timeout_s = stall_s;
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/d/obj", port);
	err = backend_open(&be, url, &cfg);
	if (err < 0)
		FAIL("backend_open %s: %s", url, strerror(-err));
	return be;
}
