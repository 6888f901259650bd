/* linkemu: the link emulator of the tests and benchmarks, in C (tests/lib/shardfs_test/linkemu.py
 * starts it; built for tests only, never installed).
 *
 *   linkemu --root DIR [--delay-ms 30] [--rate-mb 60] [--port 0] [--port-file F] [--etag nginx]
 *           [--ais [--ais-objects-port P]]
 *   linkemu --s3-keys N --s3-object FILE [--s3-bucket bench] [--s3-prefix P] [...]
 *
 * An HTTP/1.1 object store on 127.0.0.1 that behaves like a remote one on a real link: every
 * response starts --delay-ms after its request arrived (a timer heap, no thread sleeps) and
 * every connection sends at most --rate-mb MB/s (10^6 B): the kernel paces the socket
 * (SO_MAX_PACING_RATE, TCP's own pacing), so the cap costs no CPU here and holds for each
 * connection apart, with no cap on the sum. One thread, epoll (edge-triggered, each socket
 * registered once), bodies by sendfile(2), keep-alive and pipelined requests. Per request of a
 * file, about five syscalls: a recv (a short one says the socket is drained: no second recv to
 * see EAGAIN), a stat of the path (a served file is kept open while its path names the same
 * inode: no open, fstat, close), the head by send (MSG_MORE), the body by sendfile, and the
 * epoll_wait that the delay's timer or the socket wakes (tests/bench/README.md, emulator).
 *
 * Root mode serves the files under DIR: GET and HEAD, one byte range (206 + Content-Range; an
 * unsatisfiable one 416 with "Content-Range: bytes * /SIZE"), If-Match (412), nginx's ETag
 * "MTIME-SIZE" in hex (--etag nginx, the default: a validator shardfs takes as weak) or, with
 * --etag store, an opaque token that changes with any rewrite (strong, as object stores
 * give), and a path ending in "/" that names a directory gets an nginx-style
 * JSON autoindex (name, type, mtime, size; sorted by name).
 *
 * With --ais, root mode also answers what the AIStore stand-in of the tests
 * (tests/lib/shardfs_test/s3servers.py AisStandIn, root mode, no fault armed) answers: the
 * listing and HEAD under /s3/BUCKET/, object GETs redirected (to --ais-objects-port, another
 * emulator on the same files, as an AIStore proxy sends them to a target: a client's
 * connections per host are not shared with the proxy's; else here), GetBatch: AIS mode, in
 * linkemu_ais.c (linkemu.h: what the two files share), so that the link bench's L9 does not
 * run a store in CPython on the client's cores.
 *
 * S3 mode: a bucket of N keys PREFIX + "shard-%06d.tar", key i's bytes FILE's followed by
 * 512 * (i % 8) zeros, ETag the MD5 of "i:size" (quoted): ListObjectsV2 (list-type=2 only, no
 * delimiter, max-keys capped at 1000, opaque continuation tokens), HEAD and ranged GET (no
 * suffix ranges: 400 InvalidRange), errors as S3's XML.
 *
 * GET /__stats answers at once (no delay, not counted) a JSON object: requests (answered after
 * the delay), bytes_sent (body bytes handed to the kernel), connections (accepted), cpu_s (this
 * process's user + system seconds, getrusage), cpu_user_s, cpu_sys_s, and in S3 mode
 * list_requests, list_bytes, heads, gets, other; with --ais AisStandIn's counters moss_requests,
 * moss_redirects, moss_items, moss_missing, moss_refused, moss_ms (GetBatch answers' time from
 * their start after the delay to their last byte on the link, summed), moss_inflight (now:
 * started, not all sent; linkemu_ais.c), moss_draining (of those, handed to the kernel with
 * bytes still queued), moss_inflight_max, redirects,
 * s3_head (HEADs answered at the target), s3_get, s3_head_ms, unsupported, head_redirects
 * (HEADs the proxy sent to the target: AIStore's S3 HEAD is a 307).
 *
 * Prints "port N" on stdout (and writes N to --port-file, by rename) once it listens; runs until
 * killed (SIGTERM). A request head over 16 KiB gets 431, a malformed one 400, then the
 * connection closes; a method other than GET and HEAD gets 501. A request body is refused (400)
 * but with --ais: at most 8 MiB, by Content-Length (GetBatch's JSON). */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "linkemu.h"

#ifndef SO_MAX_PACING_RATE
#define SO_MAX_PACING_RATE 47
#endif

#define S3_MAXN 1000000 /* keys are "%06d": sorted as numbers only below this */

_Noreturn void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("linkemu: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		die("out of memory (%zu bytes)", n);
	return p;
}

/* ---- configuration ---------------------------------------------------------------------- */

struct cfg cfg = {.tmpl_fd = -1};

/* ---- connections ------------------------------------------------------------------------ */

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the timer heap: connections waiting for their response's start ----------------------- */

static struct conn **heap;
static size_t heap_len, heap_cap;
static uint64_t heap_seq;

static int heap_less(const struct conn *a, const struct conn *b)
{
	return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

static void heap_push(struct conn *c)
{
	if (heap_len == heap_cap) {
		heap_cap = heap_cap ? heap_cap * 2 : 64;
		heap = realloc(heap, heap_cap * sizeof *heap);
		if (!heap)
			die("out of memory");
	}
	c->seq = heap_seq++;
	size_t i = heap_len++;
	while (i && heap_less(c, heap[(i - 1) / 2])) {
		heap[i] = heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	heap[i] = c;
}

static struct conn *heap_pop(void)
{
	struct conn *top = heap[0], *last = heap[--heap_len];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		const struct conn *mc = last;
		if (l < heap_len && heap_less(heap[l], mc)) {
			m = l;
			mc = heap[l];
		}
		if (l + 1 < heap_len && heap_less(heap[l + 1], mc))
			m = l + 1;
		if (m == i)
			break;
		heap[i] = heap[m];
		i = m;
	}
	if (heap_len)
		heap[i] = last;
	return top;
}

static int ep;

static void parts_free(struct conn *c)
{
	for (size_t i = 0; i < c->nparts; i++)
		free(c->parts[i].path);
	free(c->parts);
	free(c->moss_mem);
	c->parts = NULL;
	c->moss_mem = NULL;
	c->nparts = c->part_i = 0;
}

static void conn_close(struct conn *c)
{
	ais_conn_close(c);
	close(c->fd);
	body_done(c);
	free(c->mem_owned);
	free(c->body);
	parts_free(c);
	free(c);
}

static void resp_done(struct conn *c)
{
	body_done(c);
	free(c->mem_owned);
	c->mem_owned = NULL;
	c->mem = NULL;
	c->mem_left = 0;
	c->file_left = 0;
	free(c->body);
	c->body = NULL;
	c->body_len = 0;
	parts_free(c);
	ais_answer_done(c);
	memmove(c->in, c->in + c->req_len, c->in_len - c->req_len);
	c->in_len -= c->req_len;
	c->req_len = 0;
	c->state = C_READ;
}

enum { S_DONE, S_AGAIN, S_ERR };

static int send_some(struct conn *c)
{
again:
	while (c->hdr_off < c->hdr_len) {
		int more = c->file_left || c->mem_left ? MSG_MORE : 0;
		ssize_t n =
		    send(c->fd, c->hdr + c->hdr_off, c->hdr_len - c->hdr_off, MSG_NOSIGNAL | more);
		if (n < 0)
			return errno == EAGAIN ? S_AGAIN : S_ERR;
		c->hdr_off += (size_t)n;
		c->wrote += (uint64_t)n;
	}
	while (c->file_left) {
		size_t want = c->file_left < (1u << 30) ? (size_t)c->file_left : 1u << 30;
		ssize_t n = sendfile(c->fd, c->body_fd, &c->file_off, want);
		if (n < 0)
			return errno == EAGAIN ? S_AGAIN : S_ERR;
		if (n == 0)
			return S_ERR; /* the file got shorter */
		c->file_left -= (uint64_t)n;
		c->wrote += (uint64_t)n;
		counts.bytes_sent += (uint64_t)n;
	}
	while (c->mem_left) {
		ssize_t n = send(c->fd, c->mem, c->mem_left,
				 MSG_NOSIGNAL | (c->part_i < c->nparts ? MSG_MORE : 0));
		if (n < 0)
			return errno == EAGAIN ? S_AGAIN : S_ERR;
		c->mem += n;
		c->mem_left -= (size_t)n;
		c->wrote += (uint64_t)n;
		if (!cfg.root && c->mem_owned == NULL)
			counts.bytes_sent += (uint64_t)n; /* an S3 object's zeros */
	}
	if (c->part_i < c->nparts) { /* a GetBatch answer's next part */
		const struct part *p = &c->parts[c->part_i++];
		body_done(c);
		if (p->len) {
			c->body_fd = open(p->path, O_RDONLY | O_CLOEXEC);
			if (c->body_fd < 0)
				return S_ERR; /* gone since the answer began: cut it */
			c->file_off = (off_t)p->off;
			c->file_left = p->len;
		}
		c->mem = c->moss_mem + p->mem_off;
		c->mem_left = p->mem_len;
		goto again;
	}
	return S_DONE;
}

/* Drive a connection as far as it goes without blocking (edge-triggered: until EAGAIN). */
static void conn_run(struct conn *c)
{
	for (;;) {
		if (c->state == C_WAIT)
			return;
		if (c->state == C_BODY) {
			while (c->body_len < c->clen) {
				ssize_t n = recv(c->fd, c->body + c->body_len,
						 (size_t)c->clen - c->body_len, 0);
				if (n > 0) {
					c->body_len += (size_t)n;
					continue;
				}
				if (n < 0 && (errno == EAGAIN || errno == EINTR))
					return;
				conn_close(c);
				return;
			}
			c->state = C_WAIT;
			c->deadline = now_ns() + cfg.delay_ns;
			heap_push(c);
			return;
		}
		if (c->state == C_SEND) {
			int r = send_some(c);
			if (r == S_AGAIN)
				return;
			if (r == S_ERR || c->close_after) {
				conn_close(c);
				return;
			}
			resp_done(c);
			continue;
		}
		/* C_READ: a whole head in the buffer? */
		char *e = c->in_len >= 4 ? memmem(c->in, c->in_len, "\r\n\r\n", 4) : NULL;
		if (!e) {
			if (c->in_len == IN_CAP) {
				c->req_len = c->in_len;
				c->close_after = 1;
				c->head = 0;
				resp_plain(c, 431);
				continue;
			}
			/* edge-triggered: a short recv read all there was, and whatever comes
			 * after it is a new edge (its event clears drained): no recv to see
			 * EAGAIN. Not once the peer's end was seen (hup): its recv of 0 closes */
			if (c->drained && !c->hup)
				return;
			size_t want = IN_CAP - c->in_len;
			ssize_t n = recv(c->fd, c->in + c->in_len, want, 0);
			if (n > 0) {
				c->in_len += (size_t)n;
				c->drained = (size_t)n < want;
				continue;
			}
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				return;
			conn_close(c); /* the client closed, or an error */
			return;
		}
		c->req_len = (size_t)(e - c->in) + 4;
		if (parse_request(c)) {
			c->close_after = 1;
			c->head = 0;
			resp_plain(c, 400);
			continue;
		}
		c->head = !strcmp(c->method, "HEAD");
		c->close_after = !c->keep_alive;
		if (!c->head && strcmp(c->method, "GET")) {
			c->head = 0;
			c->close_after |= c->clen != 0; /* its body unread */
			resp_plain(c, 501);
			continue;
		}
		if (!c->head && !strcmp(c->target, "/__stats")) {
			serve_stats(c); /* at once, not counted */
			continue;
		}
		if (c->clen) { /* the body: what came with the head, then recv'd into it */
			size_t have = c->in_len - c->req_len;
			c->body = xmalloc((size_t)c->clen + 1);
			c->body_len = have < c->clen ? have : (size_t)c->clen;
			memcpy(c->body, c->in + c->req_len, c->body_len);
			c->req_len += c->body_len;
			c->state = C_BODY;
			continue;
		}
		c->state = C_WAIT;
		c->deadline = now_ns() + cfg.delay_ns;
		heap_push(c);
		return;
	}
}

static int lsock;

static void accept_all(void)
{
	for (;;) {
		int fd = accept4(lsock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
				return;
			if (errno == EMFILE || errno == ENFILE) {
				fprintf(stderr, "linkemu: accept: %s\n", strerror(errno));
				return;
			}
			die("accept: %s", strerror(errno));
		}
		counts.connections++;
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (cfg.rate_bps) {
			uint64_t r = cfg.rate_bps;
			/* the kernel takes an unsigned long (64 bits here); bytes per second */
			if (setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &r, sizeof r))
				die("SO_MAX_PACING_RATE: %s", strerror(errno));
		}
		struct conn *c = xmalloc(sizeof *c);
		memset(c, 0, offsetof(struct conn, hdr));
		c->fd = fd;
		c->body_fd = -1;
		c->state = C_READ;
		struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
					 .data.ptr = c};
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev))
			die("epoll_ctl: %s", strerror(errno));
		conn_run(c);
	}
}

static int cmp_key(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"root", required_argument, 0, 'r'},
					     {"s3-keys", required_argument, 0, 'k'},
					     {"s3-object", required_argument, 0, 'o'},
					     {"s3-bucket", required_argument, 0, 'b'},
					     {"s3-prefix", required_argument, 0, 'p'},
					     {"port", required_argument, 0, 'P'},
					     {"delay-ms", required_argument, 0, 'd'},
					     {"rate-mb", required_argument, 0, 'R'},
					     {"port-file", required_argument, 0, 'f'},
					     {"etag", required_argument, 0, 'e'},
					     {"ais", no_argument, 0, 'a'},
					     {"ais-objects-port", required_argument, 0, 'O'},
					     {"help", no_argument, 0, 'h'},
					     {0, 0, 0, 0}};
	const char *root = NULL, *object = NULL, *port_file = NULL;
	double delay_ms = 30, rate_mb = 60;
	long port = 0;
	cfg.s3_n = -1;
	cfg.bucket = "bench";
	cfg.prefix = "";
	int ch;
	char *e;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'r':
			root = optarg;
			break;
		case 'k':
			cfg.s3_n = strtol(optarg, &e, 10);
			if (*e || cfg.s3_n < 0 || cfg.s3_n > S3_MAXN)
				die("--s3-keys %s: a number of keys from 0 to %d", optarg, S3_MAXN);
			break;
		case 'o':
			object = optarg;
			break;
		case 'b':
			cfg.bucket = optarg;
			break;
		case 'p':
			cfg.prefix = optarg;
			break;
		case 'P':
			port = strtol(optarg, &e, 10);
			if (*e || port < 0 || port > 65535)
				die("--port %s: a TCP port (0: any free one)", optarg);
			break;
		case 'd':
			delay_ms = strtod(optarg, &e);
			if (*e || !(delay_ms >= 0 && delay_ms < 1e7))
				die("--delay-ms %s: milliseconds, 0 or more", optarg);
			break;
		case 'R':
			rate_mb = strtod(optarg, &e);
			if (*e || !(rate_mb >= 0 && rate_mb < 1e7))
				die("--rate-mb %s: MB/s per connection, 0 for no cap", optarg);
			break;
		case 'f':
			port_file = optarg;
			break;
		case 'a':
			cfg.ais = 1;
			break;
		case 'O':
			cfg.objects_port = strtol(optarg, &e, 10);
			if (*e || cfg.objects_port < 1 || cfg.objects_port > 65535)
				die("--ais-objects-port %s: a TCP port", optarg);
			break;
		case 'e':
			if (strcmp(optarg, "nginx") && strcmp(optarg, "store"))
				die("--etag %s: nginx (\"MTIME-SIZE\", weak: what nginx sends) or "
				    "store "
				    "(an opaque strong token, as object stores send)",
				    optarg);
			cfg.etag_store = !strcmp(optarg, "store");
			break;
		default:
			fprintf(stderr, "usage: linkemu --root DIR | --s3-keys N --s3-object FILE "
					"[--s3-bucket B] [--s3-prefix P]\n"
					"       [--delay-ms 30] [--rate-mb 60] [--port 0] "
					"[--port-file F] [--etag nginx|store]\n"
					"       [--ais [--ais-objects-port P]]\n");
			return ch == 'h' ? 0 : 2;
		}
	}
	if (optind < argc)
		die("unexpected argument '%s' (see --help)", argv[optind]);
	if (!root == (cfg.s3_n < 0) || (cfg.s3_n >= 0 && !object))
		die("give either --root DIR, or --s3-keys N with --s3-object FILE");
	if (cfg.ais && !root)
		die("--ais serves the files of --root DIR");
	cfg.delay_ns = (uint64_t)(delay_ms * 1e6);
	cfg.rate_bps = (uint64_t)(rate_mb * 1e6);
	if (root) {
		cfg.root = realpath(root, NULL);
		if (!cfg.root)
			die("--root %s: %s", root, strerror(errno));
	} else {
		cfg.tmpl_fd = open(object, O_RDONLY | O_CLOEXEC);
		struct stat sb;
		if (cfg.tmpl_fd < 0 || fstat(cfg.tmpl_fd, &sb))
			die("--s3-object %s: %s", object, strerror(errno));
		cfg.tmpl_size = (uint64_t)sb.st_size;
		cfg.keys = xmalloc((size_t)(cfg.s3_n ? cfg.s3_n : 1) * sizeof *cfg.keys);
		for (long i = 0; i < cfg.s3_n; i++) {
			size_t n = strlen(cfg.prefix) + 32;
			cfg.keys[i] = xmalloc(n);
			snprintf(cfg.keys[i], n, "%sshard-%06ld.tar", cfg.prefix, i);
		}
		qsort(cfg.keys, (size_t)cfg.s3_n, sizeof *cfg.keys, cmp_key);
	}
	signal(SIGPIPE, SIG_IGN);

	lsock = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(lsock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(lsock, (struct sockaddr *)&sa, sizeof sa) || listen(lsock, 1024))
		die("listen on 127.0.0.1:%ld: %s", port, strerror(errno));
	socklen_t sl = sizeof sa;
	getsockname(lsock, (struct sockaddr *)&sa, &sl);
	port = ntohs(sa.sin_port);
	cfg.port = port;
	ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lsock, &lev))
		die("epoll: %s", strerror(errno));
	if (port_file) {
		char tmp[4096];
		snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
		FILE *f = fopen(tmp, "w");
		if (!f || fprintf(f, "%ld\n", port) < 0 || fclose(f) || rename(tmp, port_file))
			die("--port-file %s: %s", port_file, strerror(errno));
	}
	printf("port %ld\n", port);
	fflush(stdout);

	struct epoll_event evs[256];
	for (;;) {
		int timeout = -1;
		uint64_t d = ais_next_look(); /* AIS mode's answers draining */
		if (heap_len && heap[0]->deadline < d)
			d = heap[0]->deadline;
		if (d != UINT64_MAX) {
			uint64_t t = now_ns();
			timeout = d <= t ? 0 : (int)((d - t + 999999) / 1000000);
		}
		int n = epoll_wait(ep, evs, 256, timeout);
		if (n < 0 && errno != EINTR)
			die("epoll_wait: %s", strerror(errno));
		for (int i = 0; i < n; i++) {
			if (!evs[i].data.ptr) {
				accept_all();
			} else {
				struct conn *c = evs[i].data.ptr;
				c->drained = 0;
				if (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
					c->hup = 1;
				conn_run(c);
			}
		}
		uint64_t t = now_ns();
		ais_look(t);
		while (heap_len && heap[0]->deadline <= t) {
			struct conn *c = heap_pop();
			respond(c);
			conn_run(c);
		}
	}
}
