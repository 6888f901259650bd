/*
 * cachetier_fillbuf.h — a fill's buffers and request state, between the
 * fill workers that send its requests (cachetier_fill.c), the sink on the
 * store's I/O thread that gathers its bytes, and the fill writer that
 * writes them (cachetier_write.c). Private to the cache tier; included by
 * cachetier_i.h.
 */
#ifndef CACHETIER_FILLBUF_H
#define CACHETIER_FILLBUF_H

#include <errno.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdint.h>

struct ct_file;
struct ct_slot;
struct ct_wjob;

/* The fill's request state and its buffers: cachetier_fill.c sends the
 * requests and gathers the bytes, the fill writer (cachetier_write.c)
 * writes them. */
/* Where a fill's bytes go: into the data file at their own offset (chunk
 * i of the object is at i * chunk_bytes in both). The sink runs on the
 * store's I/O thread, which only moves bytes: it gathers the pieces curl
 * hands over (a few KiB each on a paced link) in buffers of FILL_BUF_BYTES
 * (the lean engine receives into the buffer's free end, which the sink
 * offers: cachetier_fill.c, fill_sink_mem; no copy then)
 * and pushes each full one, lock-free, to the fill writer (cachetier_write.c),
 * which computes each unit's CRC32C, writes the buffer with one pwrite and
 * makes the units it completes readable at once (fill_publish). A partial
 * buffer goes at the run's end, and at the store's poll while no bytes
 * arrive (about once a second) when it completes a unit: a reader waiting
 * for a unit waits for the buffer it ends in, not for the fill's end.
 * Buffers waiting for the writer are the bytes of fills in flight: at most
 * nslots runs of at most a chunk each. */
#define FILL_BUF_BYTES (128u * 1024u)
/* Most fill buffers waiting for the writer (8 MiB) before a fill's sink
 * answers BACKEND_SINK_FULL (the store's I/O thread then stops reading that
 * socket until the writer catches up): without it a prefetch had up to
 * 1,146 buffers (143 MiB) in flight, each fresh one faulted in. */
#define FILL_WQ_MAX 64u
/* ... and a paused fill goes on once the writer is down to this many (a
 * quarter: 2 MiB left to write while the store's I/O thread resumes the
 * paused transfers, whose bytes wait in their sockets). At half, a 513 MB
 * prefetch paused 481-710 times (6 runs), 286-520 at a quarter, each pause
 * a refused piece copied out and back (tests/bench/README.md, L4). */
#define FILL_WQ_RESUME (FILL_WQ_MAX / 4u)
/* Most sink buffers out of the pool (gathered by sinks, queued for the
 * writer or being written) before a prefetch fill (no reader waits on it)
 * that needs a fresh buffer pauses instead (the same pause and wake-up as
 * FILL_WQ_MAX's). The pool's memory is fresh to this process, zeroed by the
 * kernel at its first touch, and on the bench machine's VM a fresh 2 MiB
 * chunk costs some 8 ms of CPU (tests/bench/README.md, "L4: the fill
 * pool's fresh memory"): without it a prefetch's 33 fills in flight, each
 * holding a buffer, plus FILL_WQ_MAX queued took 7-8 chunks; with it 4
 * (15 buffers a chunk: cachetier_write.c). A reader's fill is never held
 * by it. */
#define FILL_BUFS_MAX 60u
/* ... and a prefetch fill paused so takes a fresh buffer again only while
 * fewer than this many are out (half): it goes on with room for a run of
 * buffers, not for one, and the pool's count travels 30 buffers between a
 * pause and the resume it needs (resumed at FILL_WQ_RESUME queued, 33
 * fills each holding a buffer were 11 under the pause's count: 28-43
 * resume passes a 513 MB prefetch, some 17 pauses each; tests/bench/
 * README.md, L4 loop7). The put that leaves fewer out with a sink paused
 * so wakes the paused transfers (backend_sink_ready), and each one asked
 * then takes its buffer at the ask while fewer are out, so a pass resumes
 * as many fills as the pool has buffers for under the mark, not every
 * paused one. */
#define FILL_BUFS_RESUME (FILL_BUFS_MAX / 2u)

/* A buffer of a fill's bytes on its way from the sink to the writer; or,
 * with end set, the end of a run (the slot's own message, no data). */
struct fill_buf {
	struct fill_buf *next; /* in ct->wr.wq */
	struct ct_slot *slot;  /* a fill's; NULL: a job's (cachetier__write_push) */
	struct ct_wjob *job;   /* a job's: with used 0, its barrier */
	struct ct_file *f;     /* a job's write: into f, */
	uint32_t c0;	       /* ... CRC32C of unit c0 + k into crc[k], */
	uint32_t *crc;
	int *werr;	 /* ... its first error, */
	uint64_t *wrote; /* ... its bytes written (also in ct->wr_bytes) */
	uint64_t off;	 /* object offset of data[0] */
	size_t used;	 /* bytes in data */
	int end;	 /* the run ended; err: how */
	int err;
	char data[]; /* FILL_BUF_BYTES (none in an end) */
};

struct fill_sink {
	uint64_t start;	      /* the run's start */
	uint64_t next;	      /* object offset of the next byte expected */
	uint64_t end;	      /* the run's end */
	int wrote;	      /* a byte arrived */
	struct fill_buf *cur; /* being gathered; not pushed yet */
	struct ct_slot *slot; /* the fill's: progress, and a request to stop */
	uint32_t unit_bytes;  /* unit bytes; start is a unit's start */
	int64_t first_ns;     /* when its first byte arrived (0: none yet) */
	/* a full buffer kept for the run's last bytes, pushed with them
	 * (cachetier_fill.c, sink_full_buf) */
	struct fill_buf *full;
	/* paused for a fresh buffer (FILL_BUFS_MAX out): one is taken again
	 * only under FILL_BUFS_RESUME */
	int pool_wait;
	/* paused for the writer's queue (FILL_WQ_MAX): it goes on at
	 * FILL_WQ_RESUME */
	int q_wait;
};

/* A fill's request state, one per slot. The worker that took the slot
 * (fill_begin) writes it, then hands it to the request it sends
 * (fill_next); from then on the request's sink and done callback use s
 * (on the store's I/O thread, or in the worker for a store that reads in
 * the caller) and the fill writer the rest (the pushes order them), until
 * fill_finish frees the slot under ct->lock. */
struct ct_fill {
	int ra, waited;	    /* the job's readahead flag; a claim waited for another process */
	int async;	    /* the store reads on its I/O thread: the writer sends the next run */
	uint32_t i, k;	    /* the run being fetched: units [c + i, c + k) of the slot */
	int64_t t0;	    /* when its request was sent */
	struct fill_sink s; /* the run's sink */
	/* the writer's: */
	uint64_t wnext;	      /* the run's bytes are written up to this object offset */
	uint64_t wtop;	      /* ... and a write, or the run's blocks allocated at its
			       * first write (fill_alloc), reached at most this one: a
			       * failed pwritev (ENOSPC) may have written part of its
			       * bytes, which a failed run punches with the rest (never
			       * left allocated and uncounted) */
	uint32_t pub;	      /* units [c + i, c + pub) of the run are published (the writer's
			       * take of ct->lock: valid, or taken by their readers before) */
	uint32_t land;	      /* units [c + i, c + land) of the run landed: readable
			       * (cachetier__run_landed, under their object's lock) */
	uint64_t pub_bytes;   /* bytes of the fill's units made valid by fill_publish */
	uint64_t wcnt;	      /* the run's bytes written and in ct->wr_bytes, not landed
			       * (out of it at their landing or the run's end) */
	int werr;	      /* the run's first write error */
	sem_t run_sem;	      /* !async: the writer ended the run; the worker sends the next */
	struct fill_buf *end; /* the run's end message (no data) */
	int *claim;	      /* per unit of the fill (at most a chunk's): fill_claim's answer,
			       * FILL_PUBLISHED once fill_publish made it valid */
	int *errs;	      /* ... its outcome */
	uint32_t *crc;	      /* ... its CRC32C */
	/* the writer's batch (cachetier__writer_main): this fill's items in
	 * it, in order (wbt: the last one's next), and the next fill with
	 * items in it */
	struct fill_buf *wb, **wbt;
	struct ct_slot *wgn;
	int wgrp; /* in the batch's groups (wgn): set at its first item, cleared at landing */
	/* ... what it wrote before the batch's take of ct->lock
	 * (cachetier_write.c, fill_group_write): units [c + land, c + wland)
	 * landed, the run's end if the batch holds it; and, for a run that
	 * ended and goes on after the take, bytes to punch from wfrom to wnext */
	uint32_t wland;
	struct fill_buf *wend;
	uint64_t wfrom;
	/* a direct fill's buffers the writer holds, not yet a job
	 * (cachetier_write.c, dio_hold): dpn of them from dp (linked by next),
	 * bytes [doff, dend) of the object; dnext: the next fill with some
	 * (ct_dio.pend) */
	struct fill_buf *dp, **dpt;
	unsigned dpn;
	uint64_t doff, dend;
	struct ct_slot *dnext;
};

/* A sink's buffer (FILL_BUF_BYTES of data) from the pool, or from a new
 * chunk of them (cachetier_write.c); NULL when out of memory. buf_put gives
 * it back (the writer, or a failed run's sink; NULL is fine), and wakes the
 * paused sinks (backend_sink_ready) when it leaves fewer than
 * FILL_BUFS_RESUME out and one asked for it; buf_pool_init makes the empty
 * pool (the arena of disk_arena.h), buf_pool_free frees it at stop.
 * buf_room: may a prefetch fill's sink take a fresh buffer (fewer than
 * limit out: FILL_BUFS_MAX, or FILL_BUFS_RESUME for a sink paused for
 * one)? 0: no, and a put's wake-up under FILL_BUFS_RESUME covers the
 * caller's pause (the store's I/O thread, no lock). */
struct cachetier;
void cachetier__buf_pool_init(struct cachetier *ct);
struct fill_buf *cachetier__buf_get(struct cachetier *ct);
void cachetier__buf_put(struct cachetier *ct, struct fill_buf *b);
int cachetier__buf_room(struct cachetier *ct, unsigned limit);
void cachetier__buf_pool_free(struct cachetier *ct);

/* The error a withdrawn prefetch fill stops with (pf_yield). */
#define FILL_WITHDRAWN (-ECANCELED)
/* claim[] of a unit fill_publish made valid before the fill ended */
#define FILL_PUBLISHED 2

#endif
