/*
 * test_ioconn.c — the remote stores' I/O loop (backend/backend_io_loop.c) when a
 * connection is given up before its connect completed, then the next one.
 *
 * A listener on 127.0.0.1 with a backlog of 0 whose accept queue holds one connection
 * that is never accepted drops every SYN after it: a connect to it stays in progress
 * for as long as the test wants, whatever the machine's speed. A read through the http
 * store is sent to it; once its socket is seen in SYN-SENT (/proc/net/tcp), its sink's
 * poll stops it (the read ends with the sink's error). libcurl 7.88 to 8.1 closes such a
 * socket with close() alone, without CURLOPT_CLOSESOCKETFUNCTION, and says
 * CURL_POLL_REMOVE after: a poll handle kept for it watches a closed fd (libuv aborts
 * once it hands that fd to epoll_ctl; uv_poll_init refuses the number to the next socket
 * that gets it). Then the queued connection is accepted and closed, so the listener
 * takes connections again, every free fd number below the stopped socket's is taken
 * (so the next socket gets its number, the lowest free one), and ROUNDS reads follow,
 * each answered by a server thread (one connection each, closed after the answer, so
 * that each read opens a socket with that number). Each must give the exact bytes. On the code
 * before the fix, the first of them failed (the new socket's number still had the stale handle:
 * CURL_SOCKET_BAD, "could not connect").
 *
 * No timing: every wait is for an event (the SYN-SENT socket, a read's end), bounded by
 * WAIT_S (a hang fails the test).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "httpsrv.h"

#define ROUNDS 4
#define LEN    1000
#define WAIT_S 30

struct rd {
	struct httpsrv_end end;
	atomic_int stop; /* the sink's poll fails the read */
	size_t got;
	unsigned char buf[LEN];
};

static unsigned char body[LEN];

static int sink(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct rd *r = arg;

	if (!len)
		return atomic_load(&r->stop) ? -ECONNABORTED : 0;
	if (off + len > LEN)
		return -EIO;
	memcpy(r->buf + off, buf, len);
	r->got += len;
	return 0;
}

/* The fd of this process's socket in SYN-SENT to 127.0.0.1:port, or -1. */
static int syn_sent_fd(unsigned port)
{
	char line[512], want[32], path[64], link[64], sock[64];
	unsigned long inode = 0;
	FILE *f = fopen("/proc/net/tcp", "r");
	int fd = -1;

	if (!f)
		FAIL("/proc/net/tcp: %s", strerror(errno));
	/* rem_address 0100007F:PORT, st 02 (SYN_SENT), then tx:rx tr:when retrnsmt uid
	 * timeout inode */
	snprintf(want, sizeof(want), "0100007F:%04X 02", port);
	while (!inode && fgets(line, sizeof(line), f)) {
		const char *at = strstr(line, want);

		if (at && sscanf(at + strlen(want), " %*s %*s %*s %*s %*s %lu", &inode) != 1)
			inode = 0;
	}
	fclose(f);
	if (!inode)
		return -1;
	snprintf(sock, sizeof(sock), "socket:[%lu]", inode);
	for (int i = 0; i < 1024 && fd < 0; i++) {
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", i);
		n = readlink(path, link, sizeof(link) - 1);
		if (n > 0) {
			link[n] = '\0';
			if (strcmp(link, sock) == 0)
				fd = i;
		}
	}
	return fd;
}

/* The server: ROUNDS connections, one at a time: read a request's head, answer its
 * range of body (206), close. */
static void *serve(void *arg)
{
	int lfd = *(int *)arg;

	for (int i = 0; i < ROUNDS; i++) {
		unsigned a = 0, b = 0;
		struct pollfd p = {.fd = lfd, .events = POLLIN};
		int c;

		/* no connection: the read failed before it connected (checked in main) */
		if (poll(&p, 1, WAIT_S * 1000) != 1)
			return NULL;
		c = accept(lfd, NULL, NULL);
		if (c < 0)
			FAIL("accept: %s", strerror(errno));
		if (httpsrv_read_range(c, LEN, &a, &b, i) < 0)
			FAIL("request %d: the connection ended before its head", i);
		httpsrv_head206(c, a, b, LEN, "Connection: close\r\n", "answer");
		httpsrv_send(c, body + a, b - a + 1, "answer's body");
		close(c);
	}
	return NULL;
}

int main(void)
{
	struct backend_config cfg = {0};
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct backend *be;
	struct rd *stopped = calloc(1, sizeof(*stopped));
	char url[128];
	pthread_t srv;
	unsigned port;
	int lfd, held, err, fd, fill[64];
	size_t nfill = 0;
	struct pollfd p;

	for (size_t i = 0; i < LEN; i++)
		body[i] = (unsigned char)(i * 131 + 7);
	lfd = httpsrv_listen(0, &port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)port);
	/* the one connection the accept queue holds: every SYN after it is dropped */
	held = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (held < 0 || connect(held, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		FAIL("held connection: %s", strerror(errno));
	p = (struct pollfd){.fd = lfd, .events = POLLIN};
	if (poll(&p, 1, WAIT_S * 1000) != 1)
		FAIL("the held connection never reached the accept queue");

	cfg.connections = 1;
	cfg.max_connections = 1;
	cfg.retry_budget_s = 0; /* one attempt: a refused socket fails the read */
	cfg.connect_timeout_s = 2 * WAIT_S;
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/d/obj", port);
	err = backend_open(&be, url, &cfg);
	if (err < 0)
		FAIL("backend_open %s: %s", url, strerror(-err));

	/* 1: a read stopped while its connect is in progress */
	backend_read_version_async(be, "obj", NULL, 0, 0, LEN, 0, sink, stopped, httpsrv_done,
				   &stopped->end);
	for (int i = 0; (fd = syn_sent_fd(port)) < 0; i++) {
		struct timespec ms = {0, 1000000};

		if (i == WAIT_S * 1000)
			FAIL("no connect in SYN-SENT to port %u within %d s", port, WAIT_S);
		nanosleep(&ms, NULL);
	}
	atomic_store(&stopped->stop, 1);
	httpsrv_wait_done(&stopped->end, WAIT_S, "the stopped read");
	CHECK(stopped->end.err == -ECONNABORTED && stopped->got == 0,
	      "the stopped read: err %d (%s), %zu bytes", stopped->end.err,
	      strerror(-stopped->end.err), stopped->got);

	/* 2: the listener takes connections again (the held one accepted and closed:
	 * its fd comes and goes before the next read's socket is made) */
	{
		int c = accept(lfd, NULL, NULL);

		if (c < 0)
			FAIL("accept the held connection: %s", strerror(errno));
		close(c);
		close(held);
	}
	/* every free number below the stopped socket's taken: the next socket gets its
	 * number (the lowest free one) */
	for (;;) {
		int x = open("/dev/null", O_RDONLY | O_CLOEXEC);

		if (x < 0)
			FAIL("/dev/null: %s", strerror(errno));
		if (x >= fd) {
			close(x);
			if (x > fd)
				FAIL("fd %d (the stopped socket's) is still open", fd);
			break;
		}
		if (nfill == sizeof(fill) / sizeof(fill[0]))
			FAIL("more than %zu free fds below %d", nfill, fd);
		fill[nfill++] = x;
	}
	if (pthread_create(&srv, NULL, serve, &lfd) != 0)
		FAIL("server thread");
	for (int i = 0; i < ROUNDS; i++) {
		struct rd *r = calloc(1, sizeof(*r));
		uint64_t off = (uint64_t)i * 100, len = LEN - off;

		if (!r)
			FAIL("calloc");
		backend_read_version_async(be, "obj", NULL, 0, off, (size_t)len, 0, sink, r,
					   httpsrv_done, &r->end);
		httpsrv_wait_done(&r->end, WAIT_S, "a read after it");
		CHECK(r->end.err == 0 && r->got == len &&
			  memcmp(r->buf + off, body + off, len) == 0,
		      "read %d after the stopped one: err %d (%s), %zu of %u bytes%s", i,
		      r->end.err, strerror(-r->end.err), r->got, (unsigned)len,
		      r->end.err == 0 && r->got == len ? ", wrong bytes" : "");
		free(r);
	}
	pthread_join(srv, NULL);
	backend_close(be);
	for (size_t i = 0; i < nfill; i++)
		close(fill[i]);
	close(lfd);
	free(stopped);
	return check_summary("io-connect");
}
