/*
 * backend_io_resolve.c — the host names of the lean engine (contract:
 * backend_io_i.h): a name is resolved off the I/O thread's loop
 * (uv_getaddrinfo: libuv's thread pool, as curl's threaded resolver
 * resolves in a thread of its own), at most one resolution of a name at a
 * time, its answer (up to IO_RESOLVE_ADDRS addresses, in the resolver's
 * order, the one a connection last reached first) kept IO_RESOLVE_TTL_MS
 * (curl's CURLOPT_DNS_CACHE_TIMEOUT default, 60 s) for IO_RESOLVE_MAX names.
 * A failed lookup is not kept (curl keeps none either): the next attempt
 * asks again. Connections that wait for a name are bounded by
 * connect_timeout_s, as curl's connect bound covers its resolution
 * (backend_io_lean.c's tick); a lookup that never ends keeps its slot (and
 * a thread of the pool) until it ends, and new connections to that name
 * wait on it, bounded the same way, instead of starting another.
 */
#include <errno.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <uv.h>

#include "backend_h1.h"
#include "backend_io_i.h"

enum { RES_FREE, RES_PENDING, RES_OK };

struct io_rent {
	struct backend_io *io;
	int state;
	uint64_t t_ns; /* RES_OK: answered at */
	char name[BACKEND_H1_NAME_MAX + 1];
	struct sockaddr_storage sa[IO_RESOLVE_ADDRS];
	socklen_t salen[IO_RESOLVE_ADDRS];
	unsigned naddr;
	struct io_rwait *waiters;
	uv_getaddrinfo_t req;
};

static void take_answer(struct io_rent *e, const struct addrinfo *ai)
{
	e->naddr = 0;
	for (; ai && e->naddr < IO_RESOLVE_ADDRS; ai = ai->ai_next) {
		if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
		    ai->ai_addrlen > sizeof(e->sa[0]))
			continue;
		memcpy(&e->sa[e->naddr], ai->ai_addr, ai->ai_addrlen);
		e->salen[e->naddr++] = ai->ai_addrlen;
	}
}

static void resolved_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *ai)
{
	struct io_rent *e = req->data;
	struct io_rwait *w;

	if (status == 0)
		take_answer(e, ai);
	uv_freeaddrinfo(ai);
	if (e->io->res_closed) { /* the loop is ending: nobody waits */
		e->state = RES_FREE;
		return;
	}
	if (status == 0 && e->naddr) {
		e->state = RES_OK;
		e->t_ns = uv_hrtime();
	} else {
		e->state = RES_FREE;
		atomic_fetch_add_explicit(&e->io->n_resolve_failures, 1, memory_order_relaxed);
	}
	/* each waiter may end its attempt, and so start another (which may
	 * wait here again): take the list first */
	w = e->waiters;
	e->waiters = NULL;
	while (w) {
		struct io_rwait *next = w->next;

		w->ent = NULL;
		w->next = NULL;
		backend__io_lean_resolved(w, e->state == RES_OK ? e->sa : NULL, e->salen, e->naddr);
		w = next;
	}
}

int backend__io_resolve(struct backend_io *io, const char *name, struct io_rwait *w,
			const struct sockaddr_storage **sa, const socklen_t **salen,
			unsigned *naddr)
{
	uint64_t now = uv_hrtime();
	struct io_rent *e = NULL, *spare = NULL, *oldest = NULL;
	struct addrinfo hints;

	if (!io->rtab) {
		io->rtab = calloc(IO_RESOLVE_MAX, sizeof(*io->rtab));
		if (!io->rtab)
			return -ENOMEM;
	}
	for (unsigned i = 0; i < IO_RESOLVE_MAX; i++) {
		struct io_rent *t = &io->rtab[i];

		if (t->state == RES_OK && now - t->t_ns > (uint64_t)IO_RESOLVE_TTL_MS * 1000000u)
			t->state = RES_FREE; /* too old */
		if (t->state != RES_FREE && strcmp(t->name, name) == 0)
			e = t;
		else if (t->state == RES_FREE && !spare)
			spare = t;
		else if (t->state == RES_OK && (!oldest || t->t_ns < oldest->t_ns))
			oldest = t;
	}
	if (e && e->state == RES_OK) {
		atomic_fetch_add_explicit(&io->n_resolve_hits, 1, memory_order_relaxed);
		*sa = e->sa;
		*salen = e->salen;
		*naddr = e->naddr;
		return 0;
	}
	if (!e) { /* a new lookup */
		e = spare ? spare : oldest;
		if (!e)
			return -EAGAIN; /* every slot waits for a lookup: curl's then */
		memset(&hints, 0, sizeof(hints));
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		e->io = io;
		e->req.data = e;
		e->waiters = NULL;
		snprintf(e->name, sizeof(e->name), "%s", name);
		if (uv_getaddrinfo(&io->loop, &e->req, resolved_cb, e->name, NULL, &hints) < 0) {
			e->state = RES_FREE;
			return -EAGAIN;
		}
		e->state = RES_PENDING;
		atomic_fetch_add_explicit(&io->n_resolves, 1, memory_order_relaxed);
	}
	w->ent = e;
	w->next = e->waiters;
	e->waiters = w;
	return 1;
}

void backend__io_resolve_forget(struct io_rwait *w)
{
	struct io_rent *e = w->ent;
	struct io_rwait **pp;

	if (!e)
		return;
	for (pp = &e->waiters; *pp && *pp != w;)
		pp = &(*pp)->next;
	if (*pp)
		*pp = w->next;
	w->ent = NULL;
	w->next = NULL;
}

void backend__io_resolve_prefer(struct backend_io *io, const char *name,
				const struct sockaddr_storage *sa, socklen_t salen)
{
	for (unsigned i = 0; io->rtab && i < IO_RESOLVE_MAX; i++) {
		struct io_rent *e = &io->rtab[i];

		if (e->state != RES_OK || strcmp(e->name, name) != 0)
			continue;
		for (unsigned k = 1; k < e->naddr; k++) {
			if (e->salen[k] != salen || memcmp(&e->sa[k], sa, salen) != 0)
				continue;
			e->sa[k] = e->sa[0];
			e->salen[k] = e->salen[0];
			e->sa[0] = *sa;
			e->salen[0] = salen;
			break;
		}
		return;
	}
}

void backend__io_resolve_shutdown(struct backend_io *io)
{
	io->res_closed = 1;
	for (unsigned i = 0; io->rtab && i < IO_RESOLVE_MAX; i++)
		if (io->rtab[i].state == RES_PENDING)
			uv_cancel((uv_req_t *)&io->rtab[i].req); /* one under way ends by itself */
}

void backend__io_resolve_free(struct backend_io *io)
{
	free(io->rtab);
	io->rtab = NULL;
}
