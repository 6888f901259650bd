/*
 * httpsrv.h — the pieces of a hand-driven HTTP/1.1 test server on 127.0.0.1 and of the reads
 * the C tests send it through the remote stores (tests/unit/test_ioconn.c, test_iolowat.c,
 * test_ioinplace.c, test_iopause.c): a listener, one request's Range read, a 206 answer's head, a
 * read's end awaited, the client's socket seen from the server (its queue, its mark), the lean
 * engine's store of one connection.
 *
 * Every failure of the server's own (a socket call, a request without a range of the body)
 * ends the test with FAIL (check.h). Every wait is bounded by the caller's seconds.
 */
#ifndef SHARDFS_TEST_HTTPSRV_H
#define SHARDFS_TEST_HTTPSRV_H

#include <stddef.h>
#include <stdint.h>

/* A read's end, as the remote store's done callback gives it: httpsrv_done's arg. */
struct httpsrv_end {
	int done, err;
};

/* A listener on 127.0.0.1 (a free port, SO_REUSEADDR, listen(backlog)); its port into *port. */
int httpsrv_listen(int backlog, unsigned *port);

/* Read one request's head from the connection c, byte by byte (nothing of a next request is
 * taken), and its "Range: bytes=a-b" into *a, *b (b < len, a <= b). Returns 0, or -1 if the
 * connection ended or failed before a whole head came (the caller says whether that fails). A
 * head without such a range fails the test, naming request i. */
int httpsrv_read_range(int c, unsigned len, unsigned *a, unsigned *b, int i);

/* Write all n bytes of p to c, or fail the test naming what. */
void httpsrv_send(int c, const void *p, size_t n, const char *what);

/* Write the head of a 206 answer of bytes a-b of an object of len bytes, ETag "e1", then the
 * header lines extra ("" or lines each ending in CRLF) and the empty line. */
void httpsrv_head206(int c, unsigned a, unsigned b, unsigned len, const char *extra,
		     const char *what);

/* The remote store's done callback (arg: a struct httpsrv_end *): records err, wakes waiters. */
void httpsrv_done(void *arg, int err, uint64_t bytes);

/* Wait until e is done, at most wait_s seconds (then fail the test naming what). */
void httpsrv_wait_done(struct httpsrv_end *e, int wait_s, const char *what);

/* Poll cond(arg) every millisecond until it holds: 0, or -1 after wait_s seconds. */
int httpsrv_wait_for(int (*cond)(void *), void *arg, int wait_s);

/* This process's TCP socket whose own port is port (the client's end of a connection the server
 * accepted from that port), or -1. */
int httpsrv_client_fd(unsigned port);

/* Accept one connection on lfd within wait_s seconds: the server's end into *c, the client's
 * (httpsrv_client_fd) into *cfd; else fail the test. */
void httpsrv_accept_client(int lfd, int wait_s, int *c, int *cfd);

/* p[0..n) the seeded bytes of a test's object (the same seed, the same bytes). */
void httpsrv_fill(unsigned char *p, size_t n, unsigned seed);

/* The bytes in fd's receive queue (SIOCINQ), or -1. */
int httpsrv_inq(int fd);

/* fd's receive mark (SO_RCVLOWAT), or -1. */
int httpsrv_rcvlowat(int fd);

struct backend;

/* The lean engine's store of http://127.0.0.1:port/d/ (object "obj"): one connection, one
 * attempt (no retry: a stall fails the read), connect bound wait_s and stall bound stall_s
 * seconds; a failure to open ends the test. */
struct backend *httpsrv_lean_store(unsigned port, int wait_s, int stall_s);

#endif
