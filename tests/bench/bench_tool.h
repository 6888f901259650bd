/*
 * bench_tool.h — what tests/bench's C floor tools (floor_bench.c, splice_bench.c) share: the
 * end of a run on a failed call, a thread's CPU time, and a connection to the link emulator on
 * loopback. Static inline, a header alone: link_bench.py builds each tool with one cc line.
 */
#ifndef SHARDFS_BENCH_TOOL_H
#define SHARDFS_BENCH_TOOL_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

/* what failed, with errno's words; the run ends (exit 1) */
static inline void bench_die(const char *what)
{
	perror(what);
	exit(1);
}

/* the calling thread's CPU time in s (CLOCK_THREAD_CPUTIME_ID) */
static inline double bench_thread_cpu(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* len bytes (a multiple of 4096 or not) at a 4 KiB boundary; none left ends the run */
static inline char *bench_alloc(size_t len)
{
	char *b = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);

	if (!b)
		bench_die("aligned_alloc");
	return b;
}

/* 127.0.0.1:PORT (port: the command line's decimal) */
static inline void bench_addr(struct sockaddr_in *sa, const char *port)
{
	*sa = (struct sockaddr_in){.sin_family = AF_INET};
	sa->sin_port = htons((uint16_t)atoi(port));
	inet_pton(AF_INET, "127.0.0.1", &sa->sin_addr);
}

/* A TCP connection to sa with TCP_NODELAY (a request a write); a failure ends the run. */
static inline int bench_connect(const struct sockaddr_in *sa)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (fd < 0 || setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 ||
	    connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0)
		bench_die("connect");
	return fd;
}

#endif
