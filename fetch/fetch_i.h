/*
 * fetch_i.h — the fetch scheduler's private state (fetch.h is its
 * contract): struct fetch, shared by fetch_stream.c (the stream table),
 * fetch_link.c (the link as the store's fills saw it) and fetch_planner.c.
 */
#ifndef FETCH_I_H
#define FETCH_I_H

#include <stdatomic.h>
#include <stdint.h>

#include "cachetier.h"
#include "disk_lock.h"
#include "fetch.h"

/* A fill request of at most this many bytes of a planned range (a range
 * prefetch: cachetier_obj_prefetch_range, _span) is small (rules_small,
 * fetch_rules.c): it may be one of the store's small_fills in flight
 * instead of its fill_threads, and asks the store for a small read
 * (BACKEND_READ_SMALL). At 60 MB/s per connection 1 MiB takes 17 ms, less
 * than the 30 ms a request waits for its first byte: such requests are
 * bound by latency, so more of them in flight add throughput without
 * competing for the link's rate. */
#define FETCH_SMALL_FILL_BYTES (1u << 20)

/* Once the cache is full, units filled ahead of their readers (readahead,
 * prefetch, plans: not read yet) stay within 1/FETCH_AHEAD_SHARE of it
 * (rules_ahead_share: a prefetch fill evicts only within it): the rest is
 * the readers', so a reader of an object bigger than the cache evicts
 * what it read, never what is ahead of it. */
#define FETCH_AHEAD_SHARE 2

/* The table: far more streams than a loader's readers read at once. */
#define FETCH_STRIPES 32u
#define FETCH_WAYS    8u

struct fetch_stream {
	uint32_t reader;
	uintptr_t obj;	 /* 0: the reader's shard cursor; else the object */
	uint64_t used;	 /* the stripe's clock at its last use (0: free) */
	uint64_t end;	 /* where the stream's last read ended */
	uint64_t run;	 /* bytes read in its current sequential run */
	uint64_t window; /* its readahead window in bytes; 0: random access */
	uint64_t handed; /* chunks up to the window's front handed to the store (the
			  * front's chunk + 1; 0: none): fetch_stream.c, steps */
	uint32_t shard;	 /* cursor: the shard the reader read last */
	uint32_t in_row; /* cursor: reads of it in a row, less one */
};

struct fetch_stripe {
	struct disk_mutex lock; /* a leaf (DISK_LOCK_FETCH_STREAM): protects the fields below */
	uint64_t clock;
	struct fetch_stream e[FETCH_WAYS];
};

/* The link as the store's fills saw it (fetch_link.c): decayed sums, each
 * sample weighing 7/8 of the one before. */
struct fetch_link_meter {
	struct disk_mutex lock; /* a leaf (DISK_LOCK_FETCH_LINK), taken under the store's lock */
	int64_t ttfb_ns;	/* time to first byte of a fill's request (EWMA) */
	uint64_t bytes;		/* bytes after the first byte, of fills of FETCH_LINK_RATE_MIN+ */
	uint64_t ns;		/* ... and the time they took */
	uint64_t samples;	/* fills measured (time to first byte) */
	uint64_t rate_samples;	/* rate samples: long fills, and spans summed to as long */
	/* the stage's spans since the last rate sample (fetch__link_span):
	 * bytes after each one's first delivery, and the time they took */
	uint64_t span_bytes, span_ns;
	uint64_t spans; /* spans measured */
};

struct fetch_stage;

struct fetch {
	struct cachetier *ct;
	_Atomic(struct fetch_stage *) stage; /* fetch_stage.c; NULL: --plan-memory 0 */
	uint64_t ra_max; /* the cap of a window (rules_window_max, cachetier_readahead_max) */
	atomic_ullong streams, retired;
	struct fetch_stripe stripe[FETCH_STRIPES];
	struct fetch_link_meter link;
};

/* fetch_link.c: start measuring the link of s->ct's fills; stop (before
 * s is freed). */
void fetch__link_start(struct fetch *s);
void fetch__link_stop(struct fetch *s);
/* fetch_link.c: a fill's timing (the store's callback); a span read's
 * (fetch_stage.c): the bytes after its first delivery and the time from
 * that delivery to its last byte; the estimate as fetch_link_get gives
 * it. m's lock is initialised (fetch__link_start, or a test's). */
void fetch__link_fill(struct fetch_link_meter *m, int64_t ttfb_ns, uint64_t bytes, int64_t xfer_ns);
void fetch__link_span(struct fetch_link_meter *m, uint64_t bytes, int64_t xfer_ns);
void fetch__link_read(struct fetch_link_meter *m, struct fetch_link *l);

/* fetch_stage.c: the stage of s, of max bytes (0: none; made once, by the
 * first planner); freed by fetch_free once its reads ended. */
int fetch__stage_new(struct fetch *s, uint64_t max);
void fetch__stage_free(struct fetch *s);
uint64_t fetch__stage_max(struct fetch *s); /* 0: no stage */
/* The stage's region (fetch_stagebuf.c) and its bytes; NULL: none. */
const void *fetch__stage_region(struct fetch *s, size_t *bytes);
/* Stage bytes [off, end) of o for plan (its path index last is the
 * span's last planned path, position the plan's now), the planned paths'
 * data sub[0..nsub) (without their tar headers): the store's read into
 * memory is started. 0, or the
 * span goes to the store: -ENOSPC (no room after the pressure rule),
 * -EOPNOTSUPP (no stage, or an object without units), -ESTALE, -ENOMEM. */
int fetch__stage_add(struct fetch *s, struct cachetier_obj *o, uint64_t off, uint64_t end,
		     const struct cachetier_piece *sub, size_t nsub, const void *plan,
		     uint32_t last, uint32_t position);
/* The same with another read into memory than the store's ranged one
 * (cachetier_obj_read_mem's contract: 0 and done runs once, or an errno
 * and it does not): a staged GetBatch window's (fetch_batch.c). */
typedef int (*fetch_stage_read_fn)(void *ctx, struct cachetier_obj *o, uint64_t off, size_t len,
				   void *buf, cachetier_mem_progress_fn progress,
				   cachetier_mem_done_fn done, void *arg);
int fetch__stage_add_via(struct fetch *s, struct cachetier_obj *o, uint64_t off, uint64_t end,
			 const struct cachetier_piece *sub, size_t nsub, const void *plan,
			 uint32_t last, uint32_t position, fetch_stage_read_fn read, void *ctx);
/* fetch_batch.c: a GetBatch window's staged spans (cachetier_batch_read_mem).
 * fetch__batch_mem_add (a fetch_stage_read_fn, ctx a fetch_batch_mem)
 * takes a span's read; fetch__batch_mem_run sends those taken as the
 * store's batch reads into memory, one window
 * (cachetier_batch_read_mem: a HEAD per object of the window, and per
 * object of its first request) split as
 * fetch_batch_fill splits a window (at most par requests), and ends each
 * read it could not hand over (done(arg, err)); then empties bm. Returns 0, or
 * -EOPNOTSUPP when the store refused its batch read (the window's reads
 * then go the ordinary way). */
struct fetch_batch_mem {
	struct cachetier_batch_mem *it;
	size_t n, cap;
};
int fetch__batch_mem_add(void *ctx, struct cachetier_obj *o, uint64_t off, size_t len, void *buf,
			 cachetier_mem_progress_fn progress, cachetier_mem_done_fn done, void *arg);
int fetch__batch_mem_run(struct cachetier *ct, struct fetch_batch_mem *bm, unsigned par);
/* The plans now (plans[0..n)): pieces of any other plan are the first
 * the stage frees for room. */
void fetch__stage_plans(struct fetch *s, void *const *plans, size_t n);
/* fetch_stagebuf.c: the stage's buffers, page runs of one region of
 * --plan-memory's bytes (the pool: in the stage; every call but _init and
 * _fini under its lock, no system call but _map's one mmap). fetch__stagebuf_size: a span of
 * len bytes' buffer size (its class: whole pages, at most 1/8 more) and
 * class. _init: the page bitmaps, no region yet; -ENOMEM. _map: the region
 * mapped if it is not (2 MiB-aligned, DISK_ARENA_HUGE's policy, nothing faulted in:
 * the stage's first span); -ENOMEM. _fit: the first page of the first free
 * run of size bytes (a class's size) now, pl->pages: none (first fit, one
 * scan). _take: that run (at, from _fit under the same hold of the lock)
 * marked taken, its buffer, and the chunks of the region it reaches first
 * ([*fault, + *nfault), 0 bytes: none), which the caller faults in with
 * the lock released (disk_arena_prefault) before the span's read starts.
 * _put: buf's run free again. */
struct fetch_stage_pool {
	unsigned char *base; /* the region (NULL: none) */
	size_t pages;	     /* its pages */
	uint64_t *used;	     /* a bit a page: in a span's run */
	uint64_t *faulted;   /* a bit a 2 MiB chunk: faulted in */
	uint64_t free_bytes; /* the region's pages in no run */
	/* runs taken, chunks faulted in, spans whose bytes fit the stage's
	 * count but no free run (fetch_stage.c counts those) */
	uint64_t runs, chunks, nofit;
};
size_t fetch__stagebuf_size(size_t len, unsigned *cls);
int fetch__stagebuf_init(struct fetch_stage_pool *pl, uint64_t max);
void fetch__stagebuf_fini(struct fetch_stage_pool *pl);
int fetch__stagebuf_map(struct fetch_stage_pool *pl);
size_t fetch__stagebuf_fit(const struct fetch_stage_pool *pl, size_t size);
void *fetch__stagebuf_take(struct fetch_stage_pool *pl, size_t at, size_t size, void **fault,
			   size_t *nfault);
void fetch__stagebuf_put(struct fetch_stage_pool *pl, void *buf, size_t size);
/* fetch_rules.c: the stage's admission and its reads' size class. */
int fetch__rules_stage(uint64_t len, uint64_t room, int cached);
int fetch__rules_stage_small(uint64_t len);

#endif
