/*
 * floor_bench.c — the lean serving path of a planned epoch, without FUSE: what the daemon's
 * part of it costs on this machine today (row "L8g floor", tests/bench/README.md).
 *
 *   receivers  CONNS threads, one connection each, take the ranges in the list's order (the
 *              plan's), a ranged GET each (one request a sample), its answer recv()ed
 *              into one of 64 buffers (the stage's memory), the head apart;
 *   reply      one thread write()s each buffer, in the list's order, into a pipe (1 MiB):
 *              one copy from the daemon's memory into pages the kernel owns, as the FUSE
 *              reply's writev to /dev/fuse copies into the reader's page cache pages;
 *   reader     one thread read()s the pipe into its own buffer (the loader's read: the
 *              second copy, the loader's CPU, not the daemon's) and computes the CRC32C of
 *              the stream for the check.
 *
 * The daemon's part is receivers + reply. Prints each part's CPU (CLOCK_THREAD_CPUTIME_ID)
 * per GB, then checks, after the figures are taken, that the reader got exactly the bytes
 * asked, in order: their count against the ranges' sum and their CRC32C against the ranges
 * read from the files under DIR; a mismatch fails the run (exit 1).
 *
 *   floor_bench PORT DIR CONNS RANGES
 *
 * PORT: a link emulator serving DIR (tests/lib/linkemu.c, --root DIR); RANGES: a file of
 * lines "NAME OFFSET LENGTH" (NAME a file under DIR, LENGTH > 0). Run by link_bench.py
 * (row L8g floor) and tests/bench/test_floor.py.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_tool.h"
#include "disk.h"

#define NSLOTS	   64u
#define PIPE_BYTES (1 << 20)
#define READ_BYTES (128u << 10)
#define MAX_CONNS  256

struct range {
	char *name;
	uint64_t off;
	size_t len;
	int slot; /* its buffer once received, else -1 */
};

static struct range *rg;
static size_t nrg, next_req;
static char *bufs[NSLOTS];
static int free_slots[NSLOTS];
static unsigned nfree;
static int pp[2];
static struct sockaddr_in sa;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static double recv_cpu, reply_cpu, reader_cpu;
static uint64_t reader_bytes;
static uint32_t reader_crc;

/* The answer's head, recv()ed into h with what of the body came with it, which goes to dst;
 * its Content-Length must be want. Returns the body bytes already in dst. */
static size_t read_head(int fd, size_t want, char *dst)
{
	char h[4096], *end, *cl;
	size_t n = 0, hl, extra;

	for (;;) {
		ssize_t r = recv(fd, h + n, sizeof(h) - 1 - n, 0);

		if (r <= 0)
			bench_die("recv of a head");
		n += (size_t)r;
		h[n] = 0;
		end = strstr(h, "\r\n\r\n");
		if (end)
			break;
		if (n == sizeof(h) - 1) {
			fprintf(stderr, "floor_bench: a head over %zu bytes\n", sizeof(h));
			exit(1);
		}
	}
	hl = (size_t)(end - h) + 4;
	extra = n - hl; /* one request in flight a connection: nothing past this body */
	*end = 0;
	cl = strcasestr(h, "\r\nContent-Length: ");
	if (strncmp(h, "HTTP/1.1 206", 12) != 0 || !cl ||
	    strtoull(cl + 18, NULL, 10) != (unsigned long long)want || extra > want) {
		fprintf(stderr, "floor_bench: not the 206 of %zu bytes asked: %.200s\n", want, h);
		exit(1);
	}
	memcpy(dst, h + hl, extra);
	return extra;
}

static void *receiver(void *arg)
{
	int fd;
	double c0 = bench_thread_cpu();

	(void)arg;
	fd = bench_connect(&sa);
	for (;;) {
		char req[4608];
		struct range *r;
		int slot, n;

		pthread_mutex_lock(&lock);
		while (nfree == 0 && next_req < nrg)
			pthread_cond_wait(&cond, &lock);
		if (next_req == nrg) {
			pthread_mutex_unlock(&lock);
			break;
		}
		/* the buffer first, then the range: a range in flight always has its buffer,
		 * so the reply thread's next range is never stuck behind full buffers */
		slot = free_slots[--nfree];
		r = &rg[next_req++];
		pthread_mutex_unlock(&lock);
		n = snprintf(
		    req, sizeof(req),
		    "GET /%s HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: bytes=%llu-%llu\r\n\r\n",
		    r->name, (unsigned long long)r->off, (unsigned long long)(r->off + r->len - 1));
		if (n <= 0 || (size_t)n >= sizeof(req) || write(fd, req, (size_t)n) != n)
			bench_die("request");
		for (size_t got = read_head(fd, r->len, bufs[slot]); got < r->len;) {
			ssize_t k = recv(fd, bufs[slot] + got, r->len - got, 0);

			if (k <= 0)
				bench_die("recv of a body");
			got += (size_t)k;
		}
		pthread_mutex_lock(&lock);
		r->slot = slot;
		pthread_cond_broadcast(&cond);
		pthread_mutex_unlock(&lock);
	}
	close(fd);
	pthread_mutex_lock(&lock);
	recv_cpu += bench_thread_cpu() - c0;
	pthread_mutex_unlock(&lock);
	return NULL;
}

static void *reply(void *arg)
{
	double c0 = bench_thread_cpu();

	(void)arg;
	for (size_t i = 0; i < nrg; i++) {
		int slot;

		pthread_mutex_lock(&lock);
		while (rg[i].slot < 0)
			pthread_cond_wait(&cond, &lock);
		slot = rg[i].slot;
		pthread_mutex_unlock(&lock);
		for (size_t done = 0; done < rg[i].len;) {
			ssize_t w = write(pp[1], bufs[slot] + done, rg[i].len - done);

			if (w <= 0)
				bench_die("write to the pipe");
			done += (size_t)w;
		}
		pthread_mutex_lock(&lock);
		free_slots[nfree++] = slot;
		pthread_cond_broadcast(&cond);
		pthread_mutex_unlock(&lock);
	}
	reply_cpu = bench_thread_cpu() - c0;
	close(pp[1]);
	return NULL;
}

static void *reader(void *arg)
{
	char *b = bench_alloc(READ_BYTES);
	double c0 = bench_thread_cpu();

	(void)arg;
	for (;;) {
		ssize_t r = read(pp[0], b, READ_BYTES);

		if (r < 0)
			bench_die("read of the pipe");
		if (r == 0)
			break;
		reader_bytes += (uint64_t)r;
		reader_crc = disk_crc32c_update(reader_crc, b, (size_t)r);
	}
	reader_cpu = bench_thread_cpu() - c0;
	free(b);
	return NULL;
}

static void load_ranges(const char *path)
{
	FILE *f = fopen(path, "r");
	char name[4096];
	unsigned long long off, len;
	size_t cap = 0;

	if (!f)
		bench_die(path);
	while (fscanf(f, "%4095s %llu %llu", name, &off, &len) == 3) {
		if (len == 0 || len > (1ull << 30)) {
			fprintf(stderr, "floor_bench: %s: a length of 1 B to 1 GiB\n", name);
			exit(2);
		}
		if (nrg == cap) {
			cap = cap ? 2 * cap : 1024;
			rg = realloc(rg, cap * sizeof(*rg));
			if (!rg)
				bench_die("realloc");
		}
		rg[nrg].name = strdup(name);
		if (!rg[nrg].name)
			bench_die("strdup");
		rg[nrg].off = off;
		rg[nrg].len = (size_t)len;
		rg[nrg].slot = -1;
		nrg++;
	}
	if (!feof(f) || nrg == 0) {
		fprintf(stderr, "floor_bench: %s: lines NAME OFFSET LENGTH, at least one\n", path);
		exit(2);
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	pthread_t rt[MAX_CONNS], wt, dt;
	uint64_t asked = 0;
	uint32_t crc_files = 0;
	size_t maxlen = 0;
	int conns, ok;
	double gb;

	if (argc != 5 || (conns = atoi(argv[3])) < 1 || conns > MAX_CONNS) {
		fprintf(stderr, "usage: floor_bench PORT DIR CONNS(1-%d) RANGES\n", MAX_CONNS);
		return 2;
	}
	load_ranges(argv[4]);
	for (size_t i = 0; i < nrg; i++) {
		asked += rg[i].len;
		maxlen = rg[i].len > maxlen ? rg[i].len : maxlen;
	}
	for (unsigned i = 0; i < NSLOTS; i++) {
		bufs[i] = bench_alloc(maxlen);
		memset(bufs[i], 0, maxlen); /* faulted in before the figures: the stage's are */
		free_slots[nfree++] = (int)i;
	}
	if (pipe(pp) < 0 || fcntl(pp[1], F_SETPIPE_SZ, PIPE_BYTES) < PIPE_BYTES)
		bench_die("pipe");
	bench_addr(&sa, argv[1]);
	if (pthread_create(&dt, NULL, reader, NULL) != 0 ||
	    pthread_create(&wt, NULL, reply, NULL) != 0)
		bench_die("pthread_create");
	for (int i = 0; i < conns; i++)
		if (pthread_create(&rt[i], NULL, receiver, NULL) != 0)
			bench_die("pthread_create");
	for (int i = 0; i < conns; i++)
		pthread_join(rt[i], NULL);
	pthread_join(wt, NULL);
	pthread_join(dt, NULL);
	/* the ranges read from the files, in order, against what the reader got */
	for (size_t i = 0; i < nrg; i++) {
		char path[8192];
		int fd;

		snprintf(path, sizeof(path), "%s/%s", argv[2], rg[i].name);
		fd = open(path, O_RDONLY);
		if (fd < 0 || pread(fd, bufs[0], rg[i].len, (off_t)rg[i].off) != (ssize_t)rg[i].len)
			bench_die(path);
		close(fd);
		crc_files = disk_crc32c_update(crc_files, bufs[0], rg[i].len);
	}
	ok = reader_bytes == asked && reader_crc == crc_files;
	gb = (double)asked / 1e9;
	printf("floor %.4f %.4f %.4f %.4f CPU-s/GB (receivers, reply, both: the daemon's part; "
	       "reader) %llu bytes of %llu asked, %zu requests, %d connections%s\n",
	       recv_cpu / gb, reply_cpu / gb, (recv_cpu + reply_cpu) / gb, reader_cpu / gb,
	       (unsigned long long)reader_bytes, (unsigned long long)asked, nrg, conns,
	       ok ? "" : " MISMATCH");
	return ok ? 0 : 1;
}
