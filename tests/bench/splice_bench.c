/*
 * splice_bench.c — what a fill's bytes cost on their way from a socket to the cache's data
 * file, several ways, with the daemon's two threads (tests/bench/README.md, "L4: term by term"):
 *
 *   recv    a receiving thread recv()s each 128 KiB buffer (64 KiB a call) and hands it to a
 *           writing thread, which pwrite()s it and computes its CRC32C after the write (the
 *           fill path of today: the store's I/O thread and the fill writer);
 *   splice  the receiving thread splice()s the socket's bytes into a pipe (the kernel moves
 *           page references, no copy) and hands the pipe over; the writing thread splice()s
 *           the pipe into the file (the one copy), then pread()s the bytes back from the page
 *           cache into a buffer for their CRC32C (the CRC per unit kept);
 *   splicemap  as splice, the CRC32C read from a read-only shared mapping of the file
 *           instead of a pread() back;
 *   falloc  as recv, the writing thread fallocate()s each request's range (8 MiB) at its first
 *           buffer, so the writes land in allocated (unwritten) extents: no delayed
 *           allocation's reservation a block;
 *   bigN    as recv, the writing thread waits for N MiB of a request's buffers (or its end)
 *           and writes them with one pwritev();
 *   directN as bigN through an O_DIRECT descriptor of the file (no page cache copy, no
 *           delayed allocation), each object at a 4 KiB boundary of the file, an object's
 *           last partial block written buffered; the CRC32C after the write, as recv's.
 *
 * Each with 64 buffers or pipes in flight (the fill writer's FILL_WQ_MAX; bigN and directN:
 * twice N MiB's, at least 64), a mutex and a condition variable between the threads, one
 * connection, 8 MiB ranged GETs of each object in turn. Prints each thread's CPU
 * (CLOCK_THREAD_CPUTIME_ID) per GB, then checks that the file holds the bytes: each object's
 * CRC32C read back (after the figures are taken) against the one the writing thread computed; a
 * mismatch fails the run. On stderr: the writing thread's write calls and its waits (wake-ups).
 *
 *   splice_bench PORT DIR recv|splice|splicemap|falloc|bigN|directN OUTFILE NAME...
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
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bench_tool.h"
#include "disk.h"

#define BUF_BYTES  (128u << 10)
#define RECV_BYTES (64u << 10)
#define NSLOTS	   64u
#define SLOTS_MAX  1024u /* bigN, directN: 2 * N MiB of buffers, N at most 64 */
#define PIPE_BYTES (1u << 20)
#define REQ_BYTES  (8ull << 20)
#define BLK	   4096u

enum mode { M_RECV, M_SPLICE, M_SPLICEMAP, M_FALLOC, M_BIG, M_DIRECT };

struct slot {
	char *buf; /* recv */
	int pp[2]; /* splice */
	uint64_t off;
	size_t len;
	uint64_t alloc; /* falloc: the request's length, on its first buffer */
	int last;	/* the request's last buffer */
};

static struct slot slots[SLOTS_MAX];
static unsigned nslots = NSLOTS, batch = 1; /* buffers in flight; a write's most */
static unsigned q_head, q_tail;		    /* filled: [q_tail, q_head) */
static unsigned q_lasts;		    /* requests' last buffers queued, not taken */
static int q_end, outfd, dfd = -1;
static enum mode mode;
static const char *map; /* splicemap: the file mapped for the CRC */
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cond = PTHREAD_COND_INITIALIZER;
static uint32_t crc_written; /* the writer's: CRC32C of the objects' bytes, in order */
static double writer_cpu;
static unsigned long writer_calls, writer_waits;

static void write_all(int fd, const void *p, size_t len, uint64_t off)
{
	while (len) {
		ssize_t w = pwrite(fd, p, len, (off_t)off);

		if (w <= 0)
			bench_die("pwrite");
		writer_calls++;
		p = (const char *)p + w;
		len -= (size_t)w;
		off += (uint64_t)w;
	}
}

/* slots [t, t + n) (following each other in the file) with one pwritev through fd; the
 * direct mode's last partial block (the object's end) buffered after */
static void writev_slots(int fd, unsigned t, unsigned n)
{
	struct iovec iov[SLOTS_MAX];
	struct slot *s0 = &slots[t % nslots], *sl = &slots[(t + n - 1) % nslots];
	size_t total = 0, tail = 0, done = 0;
	int k;

	for (unsigned i = 0; i < n; i++) {
		struct slot *s = &slots[(t + i) % nslots];

		iov[i] = (struct iovec){.iov_base = s->buf, .iov_len = s->len};
		total += s->len;
	}
	if (fd == dfd) {
		tail = sl->len % BLK;
		iov[n - 1].iov_len -= tail;
		total -= tail;
	}
	k = 0;
	while (done < total) {
		ssize_t w;

		while (iov[k].iov_len == 0)
			k++;
		w = pwritev(fd, iov + k, (int)n - k, (off_t)(s0->off + done));
		if (w <= 0)
			bench_die(fd == dfd ? "pwritev (O_DIRECT)" : "pwritev");
		writer_calls++;
		done += (size_t)w;
		for (size_t left = (size_t)w; left;) { /* a short write goes on */
			size_t d = left < iov[k].iov_len ? left : iov[k].iov_len;

			iov[k].iov_base = (char *)iov[k].iov_base + d;
			iov[k].iov_len -= d;
			left -= d;
			if (iov[k].iov_len == 0 && k + 1 < (int)n)
				k++;
		}
	}
	if (tail)
		write_all(outfd, sl->buf + sl->len - tail, tail, sl->off + sl->len - tail);
}

static void *writer(void *arg)
{
	char *back = bench_alloc(BUF_BYTES);
	double c0 = bench_thread_cpu();

	(void)arg;
	for (;;) {
		struct slot *s;
		unsigned n = 1;

		pthread_mutex_lock(&q_lock);
		/* bigN, directN: until a batch's worth, a request's end or the end */
		while (q_head - q_tail < batch && !q_lasts && !q_end) {
			writer_waits++;
			pthread_cond_wait(&q_cond, &q_lock);
		}
		if (q_tail == q_head) {
			pthread_mutex_unlock(&q_lock);
			break;
		}
		if (batch > 1) { /* up to the first request's end, at most batch */
			n = 0;
			while (n < batch && q_tail + n != q_head &&
			       !slots[(q_tail + n) % nslots].last)
				n++;
			if (n < batch && q_tail + n != q_head) {
				n++; /* the last buffer of its request */
				q_lasts--;
			}
		} else if (slots[q_tail % nslots].last) {
			q_lasts--;
		}
		s = &slots[q_tail % nslots];
		pthread_mutex_unlock(&q_lock);
		if (mode == M_BIG || mode == M_DIRECT) {
			writev_slots(mode == M_DIRECT ? dfd : outfd, q_tail, n);
			for (unsigned i = 0; i < n; i++) {
				struct slot *x = &slots[(q_tail + i) % nslots];

				crc_written = disk_crc32c_update(crc_written, x->buf, x->len);
			}
		} else if (mode == M_RECV || mode == M_FALLOC) {
			if (s->alloc && fallocate(outfd, 0, (off_t)s->off, (off_t)s->alloc) < 0)
				bench_die("fallocate");
			write_all(outfd, s->buf, s->len, s->off);
			crc_written = disk_crc32c_update(crc_written, s->buf, s->len);
		} else {
			size_t done = 0;

			while (done < s->len) {
				loff_t o = (loff_t)(s->off + done);
				ssize_t w =
				    splice(s->pp[0], NULL, outfd, &o, s->len - done, SPLICE_F_MOVE);

				if (w <= 0)
					bench_die("splice to the file");
				writer_calls++;
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
		q_tail += n;
		pthread_cond_signal(&q_cond);
		pthread_mutex_unlock(&q_lock);
	}
	writer_cpu = bench_thread_cpu() - c0;
	free(back);
	return NULL;
}

/* The answer's head, read a byte at a time (the same in every mode): its length, or -1. */
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

static int mode_parse(const char *m)
{
	char *e;
	unsigned long mb;

	if (strcmp(m, "recv") == 0)
		mode = M_RECV;
	else if (strcmp(m, "splice") == 0)
		mode = M_SPLICE;
	else if (strcmp(m, "splicemap") == 0)
		mode = M_SPLICEMAP;
	else if (strcmp(m, "falloc") == 0)
		mode = M_FALLOC;
	else if (strncmp(m, "big", 3) == 0 || strncmp(m, "direct", 6) == 0) {
		mode = m[0] == 'b' ? M_BIG : M_DIRECT;
		mb = strtoul(m + (m[0] == 'b' ? 3 : 6), &e, 10);
		if (*e || mb < 1 || mb > 64)
			return -1;
		batch = (unsigned)(mb << 20) / BUF_BYTES;
		nslots = 2 * batch < NSLOTS ? NSLOTS : 2 * batch;
	} else
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa;
	uint64_t base = 0, total = 0, *bases;
	unsigned nreq = 0;
	double c0, reader_cpu;
	uint32_t crc_file = 0;
	pthread_t wt;
	int fd, use_splice;

	if (argc < 6 || mode_parse(argv[3]) < 0) {
		fprintf(stderr, "usage: splice_bench PORT DIR "
				"recv|splice|splicemap|falloc|bigN|directN OUTFILE NAME...\n");
		return 2;
	}
	use_splice = mode == M_SPLICE || mode == M_SPLICEMAP;
	bench_addr(&sa, argv[1]);
	fd = bench_connect(&sa);
	outfd = open(argv[4], O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (outfd < 0)
		bench_die(argv[4]);
	if (mode == M_DIRECT && (dfd = open(argv[4], O_WRONLY | O_DIRECT)) < 0)
		bench_die("O_DIRECT");
	for (unsigned i = 0; i < nslots; i++) {
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
	bases = calloc((size_t)argc, sizeof(*bases));
	if (!bases)
		bench_die("calloc");
	for (int k = 5; k < argc; k++) {
		struct stat st;
		char path[4096];

		snprintf(path, sizeof(path), "%s/%s", argv[2], argv[k]);
		if (stat(path, &st) < 0)
			bench_die(path);
		bases[k] = base;
		total += (uint64_t)st.st_size;
		base += (uint64_t)st.st_size;
		if (mode == M_DIRECT) /* each object at a block's start */
			base = (base + BLK - 1) & ~(uint64_t)(BLK - 1);
	}
	if (ftruncate(outfd, (off_t)base) < 0)
		bench_die("ftruncate");
	if (mode == M_SPLICEMAP) {
		void *m = mmap(NULL, (size_t)base, PROT_READ, MAP_SHARED, outfd, 0);

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
				while (q_head - q_tail == nslots)
					pthread_cond_wait(&q_cond, &q_lock);
				s = &slots[q_head % nslots];
				pthread_mutex_unlock(&q_lock);
				s->off = bases[k] + at;
				s->len = len;
				s->alloc = mode == M_FALLOC && at == off ? end - off : 0;
				s->last = at + len == end;
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
				q_lasts += s->last;
				pthread_cond_signal(&q_cond);
				pthread_mutex_unlock(&q_lock);
			}
		}
	}
	reader_cpu = bench_thread_cpu() - c0;
	pthread_mutex_lock(&q_lock);
	q_end = 1;
	pthread_cond_signal(&q_cond);
	pthread_mutex_unlock(&q_lock);
	pthread_join(wt, NULL);
	/* the file's bytes, object by object, read back, against what the writer checksummed */
	for (int k = 5; k < argc; k++) {
		uint64_t end;
		struct stat st;
		char path[4096];

		snprintf(path, sizeof(path), "%s/%s", argv[2], argv[k]);
		if (stat(path, &st) < 0)
			bench_die(path);
		end = bases[k] + (uint64_t)st.st_size;
		for (uint64_t at = bases[k]; at < end;) {
			static char b[1 << 20];
			size_t want = end - at < sizeof(b) ? (size_t)(end - at) : sizeof(b);
			ssize_t r = pread(outfd, b, want, (off_t)at);

			if (r <= 0)
				bench_die("pread");
			crc_file = disk_crc32c_update(crc_file, b, (size_t)r);
			at += (uint64_t)r;
		}
	}
	printf("%s %.4f %.4f %.4f CPU-s/GB (receiver, writer, both) %.3f GB, %llu bytes, %u "
	       "requests%s\n",
	       argv[3], reader_cpu / ((double)total / 1e9), writer_cpu / ((double)total / 1e9),
	       (reader_cpu + writer_cpu) / ((double)total / 1e9), (double)total / 1e9,
	       (unsigned long long)total, nreq, crc_file == crc_written ? "" : " CRC MISMATCH");
	fprintf(stderr, "%s: the writer's write calls %lu, waits %lu\n", argv[3], writer_calls,
		writer_waits);
	free(bases);
	return crc_file == crc_written ? 0 : 1;
}
