/*
 * backend_io_loop.c — the I/O thread of the remote stores (contract:
 * backend_io_i.h): its loop, the queue from other threads, and the
 * engine's life (open, cancel, close, stats).
 *
 * One thread runs a libuv loop; the loop drives a libcurl multi handle with
 * the multi_socket API as in curl's docs/examples/multi-uv.c: curl tells us
 * which sockets to watch (CURLMOPT_SOCKETFUNCTION, one uv_poll_t each) and
 * when to call it back (CURLMOPT_TIMERFUNCTION, one uv_timer_t). Other
 * threads hand requests over through a mutex-protected queue and
 * uv_async_send; on_async makes each an xfer (backend_io_xfer.c), or fails
 * it at once while the store is down (backend_io_breaker.c).
 * backend_io_cancel sets 'halted': everything completes with -ECANCELED
 * (cancel_all) and nothing starts any more; close does the same first.
 *
 * A connection's socket gets its poll handle when curl opens it
 * (CURLOPT_OPENSOCKETFUNCTION) and loses it when curl closes it
 * (CURLOPT_CLOSESOCKETFUNCTION): between two transfers on a kept-alive
 * connection (curl's CURL_POLL_REMOVE) the handle stays as it is, so a
 * reused connection costs no epoll_ctl, ioctl or allocation; an idle
 * socket that becomes readable (the server closed it) stops being
 * polled, and curl finds it dead when it would reuse it. Other sockets
 * curl asks us to watch (a resolver's) get a handle per CURL_POLL_IN/OUT
 * run, closed at CURL_POLL_REMOVE.
 *
 * Only a connected socket is kept so: libcurl 7.88 to 8.1 (Debian 12's
 * 7.88.1 among them) close a socket whose connect has not completed (a
 * transfer removed, cancelled or aborted while connecting) with close()
 * alone, without CURLOPT_CLOSESOCKETFUNCTION (curl's cf-socket.c, "not
 * active"; fixed in 8.2.0), and say CURL_POLL_REMOVE after. A handle kept
 * then watches a closed fd: libuv aborts the process when it next hands
 * that fd to epoll_ctl (EBADF, or EPERM once another thread's open took
 * the number), and uv_poll_init refuses the number (EEXIST) to the next
 * socket that gets it. curl asks CURL_POLL_IN only once a socket is
 * connected (while connecting it asks CURL_POLL_OUT alone), and closes a
 * connected socket through CURLOPT_CLOSESOCKETFUNCTION: so a socket never
 * asked for reading loses its handle at CURL_POLL_REMOVE (sock.conn_in),
 * and a number curl opens again that still has a handle (a close nobody
 * said) loses the stale handle first (on_opensocket).
 *
 * Non-goals: more than one loop thread per store; PUT/POST (the one
 * request body is a GET's JSON: backend_req.body), HTTP caching, cookies.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <uv.h>

#include "backend_i.h"
#include "backend_io_i.h"

struct sock {
	uv_poll_t poll; /* first: the handle is freed as struct sock */
	curl_socket_t fd;
	struct backend_io *io;
	struct sock *prev, *next; /* io->socks */
	int conn;		  /* a connection's: in io->sockv from open to close */
	int conn_in;		  /* curl asked CURL_POLL_IN: connected (see above) */
	int idle;		  /* CURL_POLL_REMOVE: no transfer uses it now */
	int events;		  /* UV_READABLE | UV_WRITABLE polled now */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

static void curl_init_once(void)
{
	curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ------------------------------------------------------------------------ */
/* curl <-> libuv glue (multi-uv.c pattern)                                   */

static void sock_free_cb(uv_handle_t *h)
{
	free(h->data);
}

static void sock_close(struct backend_io *io, struct sock *s)
{
	if (s->conn && (size_t)s->fd < io->nsockv)
		io->sockv[s->fd] = NULL;
	if (s->prev)
		s->prev->next = s->next;
	else
		io->socks = s->next;
	if (s->next)
		s->next->prev = s->prev;
	uv_poll_stop(&s->poll);
	uv_close((uv_handle_t *)&s->poll, sock_free_cb);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct sock *s = h->data;
	struct backend_io *io = s->io;
	int flags = 0, running;

	if (s->idle) { /* a kept connection the server closed (or wrote to) */
		uv_poll_stop(&s->poll);
		s->events = 0;
		return;
	}
	if (status < 0)
		flags = CURL_CSELECT_ERR;
	if (!status && (events & UV_READABLE))
		flags |= CURL_CSELECT_IN;
	if (!status && (events & UV_WRITABLE))
		flags |= CURL_CSELECT_OUT;
	curl_multi_socket_action(io->multi, s->fd, flags, &running);
	backend__io_check_multi_info(io);
}

static struct sock *sock_new(struct backend_io *io, curl_socket_t fd)
{
	struct sock *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	if (uv_poll_init_socket(&io->loop, &s->poll, fd) < 0) {
		free(s);
		return NULL;
	}
	s->poll.data = s;
	s->fd = fd;
	s->io = io;
	s->next = io->socks;
	if (io->socks)
		io->socks->prev = s;
	io->socks = s;
	return s;
}

static int on_socket(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp)
{
	struct backend_io *io = userp;
	struct sock *s = socketp;
	int events = 0;

	(void)e;
	if (!s && fd >= 0 && (size_t)fd < io->nsockv)
		s = io->sockv[fd]; /* a kept connection's, used again */
	if (what == CURL_POLL_REMOVE) {
		if (s && s->conn && s->conn_in) {
			s->idle = 1; /* polled as it is until it fires or closes */
		} else if (s) {
			/* not connected: curl may have closed the fd already (see
			 * above); if not, its close finds no handle (on_closesocket) */
			sock_close(io, s);
			curl_multi_assign(io->multi, fd, NULL);
		}
		return 0;
	}
	if (!s) {
		s = sock_new(io, fd);
		if (!s)
			return -1;
	}
	if (!socketp)
		curl_multi_assign(io->multi, fd, s);
	s->idle = 0;
	if (what & CURL_POLL_IN) {
		events |= UV_READABLE;
		s->conn_in = s->conn;
	}
	if (what & CURL_POLL_OUT)
		events |= UV_WRITABLE;
	if (events != s->events) { /* uv_poll_start costs two epoll_ctl */
		uv_poll_start(&s->poll, events, on_poll);
		s->events = events;
	}
	return 0;
}

void backend__io_lowat(struct backend_io *io, int fd, int *cur, uint64_t want, uint64_t max)
{
	int v = want > max ? (int)max : want ? (int)want : 1;

	if (v == (*cur ? *cur : 1))
		return;
	atomic_fetch_add_explicit(&io->n_marks, 1, memory_order_relaxed);
	/* a failure leaves the mark as it was: *cur says so */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) == 0)
		*cur = v;
}

/* curl opens a connection's socket: its poll handle, kept until it closes. */
static curl_socket_t on_opensocket(void *clientp, curlsocktype purpose, struct curl_sockaddr *addr)
{
	struct backend_io *io = clientp;
	curl_socket_t fd;
	struct sock *s;

	(void)purpose;
	fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
	if (fd < 0)
		return CURL_SOCKET_BAD;
	if ((size_t)fd < io->nsockv && io->sockv[fd])
		sock_close(io, io->sockv[fd]); /* curl closed it without telling */
	if ((size_t)fd >= io->nsockv) {
		size_t n = (size_t)fd + 16;
		struct sock **v = realloc(io->sockv, n * sizeof(*v));

		if (!v) {
			close(fd);
			return CURL_SOCKET_BAD;
		}
		memset(v + io->nsockv, 0, (n - io->nsockv) * sizeof(*v));
		io->sockv = v;
		io->nsockv = n;
	}
	s = sock_new(io, fd);
	if (!s) {
		close(fd);
		return CURL_SOCKET_BAD;
	}
	s->conn = 1;
	io->sockv[fd] = s;
	atomic_fetch_add_explicit(&io->n_connects, 1, memory_order_relaxed);
	return fd;
}

static int on_closesocket(void *clientp, curl_socket_t fd)
{
	struct backend_io *io = clientp;

	if (fd >= 0 && (size_t)fd < io->nsockv && io->sockv[fd])
		sock_close(io, io->sockv[fd]); /* before the fd can be another's */
	return close(fd);
}

struct io_easy *backend__io_easy_get(struct backend_io *io)
{
	struct io_easy *es;
	CURL *e;

	if (io->neasy)
		return io->easy_pool[--io->neasy];
	es = calloc(1, sizeof(*es));
	e = es ? curl_easy_init() : NULL;
	if (!e) {
		free(es);
		return NULL;
	}
	es->e = e;
	curl_easy_setopt(e, CURLOPT_PRIVATE, es);
	backend__curl_harden(e, io->ca_file);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, io->connect_ms);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, io->stall_s);
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, (long)IO_BUFFER_BYTES);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, backend__io_on_progress);
	curl_easy_setopt(e, CURLOPT_XFERINFODATA, es);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, es->errbuf);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, backend__io_on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, es);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, backend__io_on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, es);
	curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_opensocket);
	curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, io);
	curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_closesocket);
	curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, io);
	return es;
}

void backend__io_easy_put(struct backend_io *io, struct io_easy *es)
{
	es->x = NULL;
	if (io->neasy < IO_EASY_POOL && io->multi) {
		io->easy_pool[io->neasy++] = es;
	} else {
		curl_easy_cleanup(es->e);
		free(es);
	}
}

static void on_timeout(uv_timer_t *t)
{
	struct backend_io *io = t->data;
	int running;

	curl_multi_socket_action(io->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	backend__io_check_multi_info(io);
}

static int on_timer(CURLM *m, long timeout_ms, void *userp)
{
	struct backend_io *io = userp;

	(void)m;
	if (timeout_ms < 0)
		uv_timer_stop(&io->timer);
	else /* 0 means "now": a 0 ms timer fires on the loop's next turn, outside
	      * curl's callbacks (multi-uv.c's 1 ms would cost 1 ms per request) */
		uv_timer_start(&io->timer, on_timeout, (uint64_t)timeout_ms, 0);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* the queue from other threads, shutdown                                     */

/* Complete the queue q and every xfer with -ECANCELED; from now on the
 * loop starts nothing (halted). The handles stay open. */
static void cancel_all(struct backend_io *io, struct backend_req *q)
{
	io->halted = 1;
	uv_timer_stop(&io->probe_timer);
	while (q) {
		struct backend_req *next = q->next;

		q->next = NULL;
		atomic_fetch_add(&io->n_cancels, 1);
		q->on_done(q->arg, q, -ECANCELED);
		q = next;
	}
	while (io->all) {
		if (!io->all->probe)
			atomic_fetch_add(&io->n_cancels, 1);
		backend__io_xfer_finish(io->all, -ECANCELED);
	}
}

static void shutdown_loop(struct backend_io *io, struct backend_req *q)
{
	cancel_all(io, q);
	/* closes cached connections: on_closesocket closes their handles */
	curl_multi_cleanup(io->multi);
	io->multi = NULL;
	while (io->neasy) {
		struct io_easy *es = io->easy_pool[--io->neasy];

		curl_easy_cleanup(es->e);
		free(es);
	}
	while (io->xfer_free) {
		struct xfer *x = io->xfer_free;

		io->xfer_free = x->fnext;
		backend__io_xfer_release(x);
	}
	while (io->socks)
		sock_close(io, io->socks);
	backend__io_lean_shutdown(io);
	uv_close((uv_handle_t *)&io->timer, NULL);
	uv_close((uv_handle_t *)&io->probe_timer, NULL);
	uv_close((uv_handle_t *)&io->pause_timer, NULL);
	uv_close((uv_handle_t *)&io->async, NULL);
}

/* The paused transfer to ask next in a pass: the one paused longest (a
 * sink that takes its room at the ask, as a prefetch fill's takes its
 * buffer, resumes the oldest pauses first, not the newest transfers of
 * io->all again and again); NULL: none is left to ask. */
static struct xfer *paused_oldest(struct backend_io *io, int backstop, uint64_t now)
{
	uint64_t bound = (uint64_t)BACKEND_PAUSE_BACKSTOP_MS * 1000000u;
	struct xfer *best = NULL;

	for (struct xfer *x = io->all; x; x = x->next) {
		if (x->paused == 1 && (x->easy || x->lc) &&
		    (!backstop || now - x->paused_ns >= bound) &&
		    (!best || x->paused_ns < best->paused_ns))
			best = x;
	}
	return best;
}

/* Ask the paused transfers' sinks again (len 0), the longest paused first,
 * and resume those with room (curl offers a resumed transfer's held bytes
 * to its sink again, which may pause it again, or stop the transfer:
 * curl_easy_pause then fails, and curl says so nowhere else, so the attempt
 * ends here). After a backend_sink_ready (backstop 0) every paused transfer
 * is asked; at the bound's tick (backstop 1) only those paused for
 * BACKEND_PAUSE_BACKSTOP_MS or more. A transfer that ends may start others
 * (the list changes): each ask looks at the whole list, and a transfer is
 * asked at most once a pass (its 'paused' is 3 meanwhile; one paused again
 * waits for the next backend_sink_ready). The bound's timer stops when none
 * is left paused. */
static void resume_paused(struct backend_io *io, int backstop)
{
	uint64_t now = uv_hrtime();
	struct xfer *x;
	int left = 0;

	for (;;) {
		CURLcode c;

		x = paused_oldest(io, backstop, now);
		if (!x)
			break;
		x->progress_ns = uv_hrtime();
		/* a pause is no trickle: a new window at the next arrival */
		x->win_ns = 0;
		if (x->r->on_poll) { /* still full: left paused, nothing copied again */
			int err = x->r->on_poll(x->r->arg);

			if (err == BACKEND_SINK_FULL) {
				x->paused = 3;
				continue;
			}
			if (err < 0)
				x->abort_err = err; /* the transfer stops when it goes on */
		}
		x->paused = 0;
		atomic_fetch_add_explicit(&io->n_resumes, 1, memory_order_relaxed);
		if (backstop)
			atomic_fetch_add_explicit(&io->n_pause_backstops, 1, memory_order_relaxed);
		if (x->lc) { /* the lean engine's: it may end here (x then waits in
			      * io->xfer_free, untouched, until on_async) */
			backend__io_lean_resume(x);
			if (x->paused == 1)
				x->paused = 3;
			continue;
		}
		c = curl_easy_pause(x->easy->e, CURLPAUSE_CONT);
		if (x->paused == 1)
			x->paused = 3; /* paused again: asked at the next wake-up */
		if (c != CURLE_OK)
			backend__io_xfer_done(x, c);
	}
	for (x = io->all; x; x = x->next) {
		if (x->paused == 3)
			x->paused = 1;
		left |= x->paused == 1 && (x->easy || x->lc);
	}
	if (!left)
		uv_timer_stop(&io->pause_timer);
	backend__io_check_multi_info(io);
}

static void on_pause_timer(uv_timer_t *t)
{
	resume_paused(t->data, 1);
}

/* A transfer paused: its sink's backend_sink_ready resumes it; the timer
 * only bounds a pause none ends (it ticks every BACKEND_PAUSE_BACKSTOP_MS
 * while one is paused, so a pause lasts less than twice that). */
void backend__io_pause_note(struct backend_io *io)
{
	if (!uv_is_active((uv_handle_t *)&io->pause_timer))
		uv_timer_start(&io->pause_timer, on_pause_timer, BACKEND_PAUSE_BACKSTOP_MS,
			       BACKEND_PAUSE_BACKSTOP_MS);
}

void backend_io_sink_ready(struct backend_io *io)
{
	/* uv_async_send merges the wake-ups pending: one pass asks them all */
	atomic_store_explicit(&io->resume_asked, 1, memory_order_release);
	uv_async_send(&io->async);
}

static void on_async(uv_async_t *a)
{
	struct backend_io *io = a->data;
	struct backend_req *q;
	int closing, cancelled;

	disk_mutex_lock(&io->lock);
	q = io->q_head;
	io->q_head = io->q_tail = NULL;
	closing = io->closing;
	cancelled = io->cancelled;
	disk_mutex_unlock(&io->lock);
	if (closing) {
		shutdown_loop(io, q);
		return;
	}
	if (cancelled) {
		cancel_all(io, q);
		return;
	}
	if (atomic_exchange_explicit(&io->resume_asked, 0, memory_order_acquire))
		resume_paused(io, 0);
	while (q) {
		struct backend_req *r = q, *next = q->next;

		r->next = NULL;
		q = next;
		if (io->down && !r->past_breaker) {
			atomic_fetch_add(&io->n_fast_fails, 1);
			backend__io_fast_fail_words(r);
			r->on_done(r->arg, r, -EIO);
		} else if (backend__io_xfer_add(io, r, 0) < 0) {
			r->on_done(r->arg, r, -ENOMEM);
		}
	}
	backend__io_kick(io);
}

static _Thread_local int on_io_thread; /* backend_on_io_thread */

int backend_on_io_thread(void)
{
	return on_io_thread;
}

static void *io_thread(void *arg)
{
	struct backend_io *io = arg;

	on_io_thread = 1;
	disk_loop_thread(); /* it only moves bytes: no disk, no lock below the leaves (disk_lock.h)
			     */
	uv_run(&io->loop, UV_RUN_DEFAULT);
	return NULL;
}

int backend_io_open(struct backend_io **out, const struct backend_config *cfg)
{
	static const struct backend_config defaults;
	static const char *const proxy_vars[] = {"http_proxy", "HTTP_PROXY", "all_proxy",
						 "ALL_PROXY"};
	struct backend_io *io;
	int err = -ENOMEM;

	*out = NULL;
	if (!cfg)
		cfg = &defaults;
	pthread_once(&curl_once, curl_init_once);
	if (curl_init_result != CURLE_OK)
		return -ENOMEM;
	io = calloc(1, sizeof(*io));
	if (!io)
		return -ENOMEM;
	/* The caller's values (fs/core/fs_opt.c holds the defaults); only what
	 * cannot work is clamped, as backend.h says. */
	io->max_running = cfg->connections ? cfg->connections : 1;
	io->max_total =
	    cfg->max_connections > io->max_running ? cfg->max_connections : io->max_running;
	io->budget_ms = (cfg->retry_budget_s > 0 ? cfg->retry_budget_s : 0) * 1000.0;
	io->log.fn = cfg->log;
	io->log.arg = cfg->log_arg;
	/* rounded up: a timeout below 1 ms must not become curl's 0 (its
	 * default of 300 s) */
	io->connect_ms = (long)((cfg->connect_timeout_s > 0 ? cfg->connect_timeout_s : 0) * 1000.0);
	if (cfg->connect_timeout_s > 0 && (double)io->connect_ms < cfg->connect_timeout_s * 1000.0)
		io->connect_ms++;
	io->stall_s = (long)(cfg->stall_timeout_s > 0 ? cfg->stall_timeout_s + 0.999 : 0);
	io->stall_ns =
	    cfg->stall_timeout_s > 0 ? (uint64_t)(cfg->stall_timeout_s * 1e9) : UINT64_MAX;
	io->rng = uv_hrtime() ^ (uint64_t)(uintptr_t)io ^ 0x9e3779b97f4a7c15ull;
	if (!io->rng)
		io->rng = 1;
	if (cfg->ca_file && !(io->ca_file = strdup(cfg->ca_file)))
		goto fail_free;
	disk_mutex_init(&io->lock, DISK_LOCK_BE_QUEUE);
	if (uv_loop_init(&io->loop) < 0)
		goto fail_mutex;
	io->multi = curl_multi_init();
	if (!io->multi)
		goto fail_loop;
	curl_multi_setopt(io->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
	curl_multi_setopt(io->multi, CURLMOPT_SOCKETDATA, io);
	curl_multi_setopt(io->multi, CURLMOPT_TIMERFUNCTION, on_timer);
	curl_multi_setopt(io->multi, CURLMOPT_TIMERDATA, io);
	/* keep-alive: enough idle connections for the store and, behind a
	 * redirecting proxy (AIStore), its targets */
	curl_multi_setopt(io->multi, CURLMOPT_MAXCONNECTS, (long)io->max_total * 2 + 2);
	curl_multi_setopt(io->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)io->max_total);
	uv_async_init(&io->loop, &io->async, on_async);
	io->async.data = io;
	uv_timer_init(&io->loop, &io->timer);
	io->timer.data = io;
	uv_timer_init(&io->loop, &io->probe_timer);
	io->probe_timer.data = io;
	uv_timer_init(&io->loop, &io->pause_timer);
	io->pause_timer.data = io;
	backend__io_lean_init(io);
	io->lean = cfg->http_engine == 1;
	/* curl would send plain http through any of these (no_proxy aside): then every request
	 * stays curl's */
	for (size_t i = 0; i < sizeof(proxy_vars) / sizeof(proxy_vars[0]); i++) {
		const char *v = getenv(proxy_vars[i]);

		if (v && *v)
			io->lean = 0;
	}
	err = pthread_create(&io->thread, NULL, io_thread, io);
	if (!err)
		pthread_setname_np(io->thread, "shardfs-io"); /* top -H, perf */
	if (err) {
		err = -err;
		uv_close((uv_handle_t *)&io->async, NULL);
		uv_close((uv_handle_t *)&io->timer, NULL);
		uv_close((uv_handle_t *)&io->probe_timer, NULL);
		uv_close((uv_handle_t *)&io->pause_timer, NULL);
		uv_close((uv_handle_t *)&io->lean_tick, NULL);
		uv_close((uv_handle_t *)&io->lean_prep, NULL);
		uv_run(&io->loop, UV_RUN_DEFAULT);
		curl_multi_cleanup(io->multi);
		goto fail_loop;
	}
	*out = io;
	return 0;
fail_loop:
	uv_loop_close(&io->loop);
fail_mutex:
	disk_mutex_destroy(&io->lock);
fail_free:
	free(io->ca_file);
	free(io);
	return err;
}

void backend_io_close(struct backend_io *io)
{
	if (!io)
		return;
	disk_mutex_lock(&io->lock);
	io->closing = 1;
	disk_mutex_unlock(&io->lock);
	uv_async_send(&io->async);
	pthread_join(io->thread, NULL);
	uv_loop_close(&io->loop);
	backend__io_resolve_free(io);
	disk_mutex_destroy(&io->lock);
	free(io->probe_url);
	free(io->ca_file);
	free(io->sockv);
	free(io);
}

void backend_io_cancel(struct backend_io *io)
{
	if (!io)
		return;
	disk_mutex_lock(&io->lock);
	io->cancelled = 1;
	disk_mutex_unlock(&io->lock);
	uv_async_send(&io->async);
}

void backend_io_stats(struct backend_io *io, struct backend_stats *st)
{
	st->requests = atomic_load(&io->n_requests);
	st->attempts = atomic_load(&io->n_attempts);
	st->failures = atomic_load(&io->n_failures);
	st->fast_fails = atomic_load(&io->n_fast_fails);
	st->probes = atomic_load(&io->n_probes);
	st->cancels = atomic_load(&io->n_cancels);
	st->down = (uint64_t)atomic_load(&io->down_now);
	st->bytes_received = atomic_load(&io->n_bytes_received);
	st->short_bodies = atomic_load(&io->n_short_bodies);
	st->range_ignored = atomic_load(&io->n_range_ignored);
	st->restarts = atomic_load(&io->n_restarts);
	st->retry_after = atomic_load(&io->n_retry_after);
	st->pauses = atomic_load(&io->n_pauses);
	st->resumes = atomic_load(&io->n_resumes);
	st->pause_backstops = atomic_load(&io->n_pause_backstops);
	st->connects = atomic_load(&io->n_connects);
	st->lean_attempts = atomic_load(&io->n_lean_attempts);
	st->recv_inplace_bytes = atomic_load(&io->n_recv_inplace);
	st->recv_copied_bytes = atomic_load(&io->n_recv_copied);
	st->recvs = atomic_load(&io->n_recvs);
	st->marks = atomic_load(&io->n_marks);
	st->resolves = atomic_load(&io->n_resolves);
	st->resolve_hits = atomic_load(&io->n_resolve_hits);
	st->resolve_failures = atomic_load(&io->n_resolve_failures);
}

void backend_io_submit(struct backend_io *io, struct backend_req *r)
{
	int closing;

	r->next = NULL;
	r->priv = NULL;
	r->status = 0;
	r->etag[0] = '\0';
	r->size = 0;
	r->mtime = 0;
	r->delivered = 0;
	r->attempts = 0;
	r->error[0] = '\0';
	r->location = NULL;
	r->location_same_origin = 0;
	atomic_fetch_add(&io->n_requests, 1);
	disk_mutex_lock(&io->lock);
	closing = io->closing || io->cancelled;
	if (!closing) {
		if (io->q_tail)
			io->q_tail->next = r;
		else
			io->q_head = r;
		io->q_tail = r;
	}
	disk_mutex_unlock(&io->lock);
	if (closing) { /* cancelled, or racing with close: never queued */
		atomic_fetch_add(&io->n_cancels, 1);
		r->on_done(r->arg, r, -ECANCELED);
	} else
		uv_async_send(&io->async);
}
