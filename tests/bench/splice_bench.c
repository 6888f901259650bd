/*
 * splice_bench.c — what a fill's bytes cost on their way from a socket to the cache's data
 * file, three ways, with the daemon's two threads (tests/bench/README.md, "L4: term by term"):
 *
 *   recv    a receiving thread recv()s each 128 KiB buffer (64 KiB a call) and hands it to a
 *           writing thread, which pwrite()s it and computes its CRC32C after the write (the
 *           fill path of today: the store's I/O thread and the fill writer);
 *   splice  the receiving thread splice()s the socket's bytes into a pipe (the kernel moves
 *           page references, no copy) and hands the pipe over; the writing thread splice()s
 *           the pipe into the file (the one copy), then pread()s the bytes back from the page
 *           cache into a buffer for their CRC32C (the CRC per unit kept);
 *   splicemap  as splice, the CRC32C read from a read-only shared mapping of the file
 *           instead of a pread() back.
 *
 * Each with 64 buffers or pipes in flight (the fill writer's FILL_WQ_MAX), a mutex and a
 * condition variable between the threads, one connection, 8 MiB ranged GETs of each object
 * in turn. Prints each thread's CPU (CLOCK_THREAD_CPUTIME_ID) per GB, then checks that the
 * file holds the bytes: its CRC32C read back whole (after the figures are taken) against the
 * one the writing thread computed; a mismatch fails the run.
 *
 *   splice_bench PORT DIR recv|splice|splicemap OUTFILE NAME...
 *
 * PORT: a link emulator serving DIR (tests/lib/linkemu.c, --root DIR); NAME: files under DIR.
 * Run by tests/bench/splice_bench.sh.
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_tool.h"
#include "disk.h"

#define BUF_BYTES  (128u << 10)
#define RECV_BYTES (64u << 10)
#define NSLOTS	   64u
#define PIPE_BYTES (1u << 20)
#define REQ_BYTES  (8ull << 20)

struct slot {
	char *buf; /* recv */
	int pp[2]; /* splice */
	uint64_t off;
	size_t len;
};

static struct slot slots[NSLOTS];
static unsigned q_head, q_tail; /* filled: [q_tail, q_head) */
static int q_end, use_splice, outfd;
static const char *map; /* splicemap: the file mapped for the CRC */
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cond = PTHREAD_COND_INITIALIZER;
static uint32_t crc_written; /* the writer's: CRC32C of the file's bytes, in order */
static double writer_cpu;

static void *writer(void *arg)
{
	char *back = bench_alloc(BUF_BYTES);
	double c0 = bench_thread_cpu();

	(void)arg;
	for (;;) {
		struct slot *s;

		pthread_mutex_lock(&q_lock);
		while (q_tail == q_head && !q_end)
			pthread_cond_wait(&q_cond, &q_lock);
		if (q_tail == q_head) {
			pthread_mutex_unlock(&q_lock);
			break;
		}
		s = &slots[q_tail % NSLOTS];
		pthread_mutex_unlock(&q_lock);
		if (!use_splice) {
			if (pwrite(outfd, s->buf, s->len, (off_t)s->off) != (ssize_t)s->len)
				bench_die("pwrite");
			crc_written = disk_crc32c_update(crc_written, s->buf, s->len);
		} else {
			size_t done = 0;

			while (done < s->len) {
				loff_t o = (loff_t)(s->off + done);
				ssize_t w =
				    splice(s->pp[0], NULL, outfd, &o, s->len - done, SPLICE_F_MOVE);

				if (w <= 0)
					bench_die("splice to the file");
				done += (size_t)w;
			}
			if (map) { /* the page cache's pages mapped: no copy back */
				crc_written = disk_crc32c_update(crc_written, map + s->off, s->len);
			} else {
				if (pread(outfd, back, s->len, (off_t)s->off) != (ssize_t)s->len)
					bench_die("pread");
				crc_written = disk_crc32c_update(crc_written, back, s->len);
			}
		}
		pthread_mutex_lock(&q_lock);
		q_tail++;
		pthread_cond_signal(&q_cond);
		pthread_mutex_unlock(&q_lock);
	}
	writer_cpu = bench_thread_cpu() - c0;
	free(back);
	return NULL;
}

/* The answer's head, read a byte at a time (the same in both modes): its length, or -1. */
static int read_head(int fd)
{
	char h[4096];
	size_t n = 0;

	while (n < sizeof(h)) {
		if (recv(fd, h + n, 1, 0) != 1)
			return -1;
		n++;
		if (n >= 4 && memcmp(h + n - 4, "\r\n\r\n", 4) == 0)
			return strncmp(h, "HTTP/1.1 206", 12) == 0 ? (int)n : -1;
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa;
	uint64_t base = 0, total = 0;
	unsigned nreq = 0;
	double c0, reader_cpu;
	uint32_t crc_file = 0;
	pthread_t wt;
	int fd;

	if (argc < 6 || (strcmp(argv[3], "recv") != 0 && strcmp(argv[3], "splice") != 0 &&
			 strcmp(argv[3], "splicemap") != 0)) {
		fprintf(stderr,
			"usage: splice_bench PORT DIR recv|splice|splicemap OUTFILE NAME...\n");
		return 2;
	}
	use_splice = strcmp(argv[3], "recv") != 0;
	bench_addr(&sa, argv[1]);
	fd = bench_connect(&sa);
	outfd = open(argv[4], O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (outfd < 0)
		bench_die(argv[4]);
	for (unsigned i = 0; i < NSLOTS; i++) {
		if (use_splice) {
			/* a pipe's slot holds a socket buffer's piece (a page or less),
			 * not a page's worth of bytes: room for 256 of them */
			if (pipe(slots[i].pp) < 0 ||
			    fcntl(slots[i].pp[1], F_SETPIPE_SZ, (int)PIPE_BYTES) < (int)PIPE_BYTES)
				bench_die("pipe");
		} else {
			slots[i].buf = bench_alloc(BUF_BYTES);
		}
	}
	for (int k = 5; k < argc; k++) {
		struct stat st;
		char path[4096];

		snprintf(path, sizeof(path), "%s/%s", argv[2], argv[k]);
		if (stat(path, &st) < 0)
			bench_die(path);
		total += (uint64_t)st.st_size;
	}
	if (ftruncate(outfd, (off_t)total) < 0)
		bench_die("ftruncate");
	if (strcmp(argv[3], "splicemap") == 0) {
		void *m = mmap(NULL, (size_t)total, PROT_READ, MAP_SHARED, outfd, 0);

		if (m == MAP_FAILED)
			bench_die("mmap");
		map = m;
	}
	if (pthread_create(&wt, NULL, writer, NULL) != 0)
		bench_die("pthread_create");
	c0 = bench_thread_cpu();
	for (int k = 5; k < argc; k++) {
		char path[4096], req[512];
		struct stat st;

		snprintf(path, sizeof(path), "%s/%s", argv[2], argv[k]);
		if (stat(path, &st) < 0)
			bench_die(path);
		for (uint64_t off = 0; off < (uint64_t)st.st_size; off += REQ_BYTES) {
			uint64_t end = off + REQ_BYTES < (uint64_t)st.st_size
					   ? off + REQ_BYTES
					   : (uint64_t)st.st_size;
			int n =
			    snprintf(req, sizeof(req),
				     "GET /%s HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: bytes=%llu-%llu"
				     "\r\n\r\n",
				     argv[k], (unsigned long long)off, (unsigned long long)end - 1);

			if (write(fd, req, (size_t)n) != n || read_head(fd) < 0)
				bench_die("request");
			nreq++;
			for (uint64_t at = off; at < end;) {
				struct slot *s;
				size_t len = end - at < BUF_BYTES ? (size_t)(end - at) : BUF_BYTES;

				pthread_mutex_lock(&q_lock);
				while (q_head - q_tail == NSLOTS)
					pthread_cond_wait(&q_cond, &q_lock);
				s = &slots[q_head % NSLOTS];
				pthread_mutex_unlock(&q_lock);
				s->off = base + at;
				s->len = len;
				for (size_t got = 0; got < len;) {
					size_t want =
					    len - got < RECV_BYTES ? len - got : RECV_BYTES;
					ssize_t r = use_splice ? splice(fd, NULL, s->pp[1], NULL,
									want, SPLICE_F_MOVE)
							       : recv(fd, s->buf + got, want, 0);

					if (r <= 0)
						bench_die(use_splice ? "splice from the socket"
								     : "recv");
					got += (size_t)r;
				}
				at += len;
				pthread_mutex_lock(&q_lock);
				q_head++;
				pthread_cond_signal(&q_cond);
				pthread_mutex_unlock(&q_lock);
			}
		}
		base += (uint64_t)st.st_size;
	}
	reader_cpu = bench_thread_cpu() - c0;
	pthread_mutex_lock(&q_lock);
	q_end = 1;
	pthread_cond_signal(&q_cond);
	pthread_mutex_unlock(&q_lock);
	pthread_join(wt, NULL);
	/* the file's bytes, read back, against what the writer checksummed */
	for (uint64_t at = 0; at < total;) {
		static char b[1 << 20];
		ssize_t r = pread(outfd, b, sizeof(b), (off_t)at);

		if (r <= 0)
			bench_die("pread");
		crc_file = disk_crc32c_update(crc_file, b, (size_t)r);
		at += (uint64_t)r;
	}
	printf("%s %.4f %.4f %.4f CPU-s/GB (receiver, writer, both) %.3f GB, %llu bytes, %u "
	       "requests%s\n",
	       argv[3], reader_cpu / ((double)total / 1e9), writer_cpu / ((double)total / 1e9),
	       (reader_cpu + writer_cpu) / ((double)total / 1e9), (double)total / 1e9,
	       (unsigned long long)total, nreq, crc_file == crc_written ? "" : " CRC MISMATCH");
	return crc_file == crc_written ? 0 : 1;
}
