/*
 * fetch.h — the fetch scheduler: what is fetched and when, decided per
 * reader stream (docs/architecture.md: scheduler -> store -> backend).
 *
 * The core tells it what readers do; it decides what the store
 * (cachetier/) fetches. A stream is one reader reading one object: the
 * reader is the task that sent the read (the FUSE request's pid: a thread
 * of a multithreaded reader is a reader of its own; FETCH_READER_SELF for
 * the daemon's own reads: index builds, class maps), the object is the
 * store's object the bytes come from. Each stream has its own readahead
 * window, which grows while its reads stay sequential and resets on its
 * own seek; each reader has its own shard cursor (fetch_shard_read). So
 * two readers each reading a different shard in order both get readahead,
 * and one reader's seek or shuffled reads leave another's window alone.
 *
 * Streams live in a bounded table (256 entries: 32 stripes of 8,
 * fetch_stream.c; each stripe with its own mutex: a leaf lock, never held
 * across a call into the store); a new stream takes its stripe's least recently
 * used entry (retired: a reader coming back starts a new window). Nothing
 * is kept per reader beyond its entries, so a reader that exits costs an
 * entry until it is retired. An object's stream is keyed by the object's
 * address: a freed object's stream may be found by a new object at the
 * same address, which costs at most one wrong window guess.
 *
 * Threads: any. Nothing here blocks but the store's own reads.
 */
#ifndef FETCH_H
#define FETCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct cachetier;
struct cachetier_obj;
struct cachetier_pin;
struct cachetier_batch_piece;
struct cachetier_policy;

/* The daemon's own reads (not a reader's): one stream per object. */
#define FETCH_READER_SELF 0u

struct fetch;

/* A scheduler for the store ct: installs its rules on ct (a window's cap
 * is the rules', cachetier_readahead_max). 0 or -ENOMEM. */
int fetch_new(struct cachetier *ct, struct fetch **out);
void fetch_free(struct fetch *s); /* accepts NULL */

/* cachetier_obj_read_begin for reader: the read moves reader's stream of
 * o, and the chunks its window says are queued past the read's end
 * (cachetier_obj_read_begin_ahead). Same errors and pin contract. */
int fetch_read_begin(struct fetch *s, uint32_t reader, struct cachetier_obj *o, uint64_t off,
		     uint64_t len, int *fd, uint64_t *fd_off, struct cachetier_pin **pin);
/* cachetier_obj_pread for reader, through its stream as fetch_read_begin. */
ssize_t fetch_pread(struct fetch *s, uint32_t reader, struct cachetier_obj *o, void *buf,
		    size_t len, uint64_t off);

/* ---- fetch_stage.c: planned bytes staged in memory --------------------------
 * The planner (below) fetches a planned span whose bytes the cache could
 * keep only by evicting into the stage's memory (--plan-memory) instead of
 * the cache (fetch_rules.c's fetch__rules_stage; fetch/README.md, "The
 * stage"). A read of [off, off + len) of o that lies within a staged span
 * is answered from there: copied into dst (fetch_stage_read) or held for
 * a reply (fetch_stage_hold),
 * once its own bytes are in (the span's read may still run; a wait until
 * then is bounded by the store's retry budget and stall bound). Returns 1
 * when answered (all len bytes, from the listed version), 0 when the
 * caller reads the ordinary way: no stage, no staged span holds the
 * range, or its span failed (an error, a cut or short answer, a changed
 * version: counted as a fallback; bytes served before it failed were the
 * listed version's); never part of a range, never a failed span's bytes.
 * -EINTR: the calling thread's request was given up while it waited for
 * the span (cachetier_request_stop; the span goes on for its other reads).
 * fetch_pread tries it first. */
int fetch_stage_read(struct fetch *s, struct cachetier_obj *o, void *dst, size_t len, uint64_t off);
/* fetch_stage_read without a copy: *ptr points at the staged bytes, which
 * stay (the span is not freed) until fetch_stage_release(*ref); a reply
 * is made from them. 1, or 0 or -EINTR (*ptr and *ref NULL) as
 * fetch_stage_read. */
int fetch_stage_hold(struct fetch *s, struct cachetier_obj *o, size_t len, uint64_t off, char **ptr,
		     void **ref);
void fetch_stage_release(void *ref); /* accepts NULL; any thread */
/* What the stage did (since fetch_new; all 0 without a stage). */
struct fetch_stage_stats {
	uint64_t pieces, bytes;	    /* spans staged (their reads started), their bytes */
	uint64_t reads, read_bytes; /* reads answered from the stage, their bytes */
	uint64_t fallbacks;	    /* reads of a staged span that failed: read the ordinary way */
	uint64_t failed;	    /* staged spans whose read failed (error, cut, version) */
	uint64_t dropped; /* spans freed before all their paths were read (room, plan gone) */
	uint64_t full;	  /* spans that did not fit the stage: went to the store */
	uint64_t waits;	  /* reads that waited for their own bytes of a span to arrive */
	uint64_t wait_ms, wait_ms_ns; /* their time waiting: ms, and ns summed (the stage's) */
	uint64_t peak, now, max;      /* its memory: the most, now, its bound (--plan-memory) */
	/* a new span's waits for room: spans wholly read that a reply held or
	 * whose read had not ended (stage_make_room) */
	uint64_t room_waits;
	/* its buffers (fetch_stagebuf.c, page runs of one region): runs
	 * taken, the region's 2 MiB chunks faulted in, spans refused for no
	 * free run (their bytes fit), the region's free bytes now */
	uint64_t buf_runs, buf_chunks, buf_nofit, buf_free;
	/* the stage's lock taken by reads: one take for a read's find and its
	 * count (fetch_stage_hold, fetch_stage_read), one for a held reply's
	 * release, one more when carried bytes were looked up in the cache */
	uint64_t read_locks;
	/* the stage's lock taken by the planner's adds (fetch__stage_add_via):
	 * one a span placed or refused (the room, the run, the piece listed
	 * and counted), one more for a span whose read did not start */
	uint64_t add_locks;
};
void fetch_stage_stats_get(struct fetch *s, struct fetch_stage_stats *st);

/* The store's prefetch rules (fetch_rules.c: how many prefetch fills run
 * beside readers' fills, which stop part-way for a reader, the slow start
 * after readahead), for cachetier_set_policy; fetch_new installs them. */
const struct cachetier_policy *fetch_store_rules(void);

/* --warm auto warms a dataset of at most this share of --cache-size
 * (percent): the rest is room for readers and other datasets sharing the
 * directory. fetch_warm_auto_max: that many bytes of cache_size. */
#define FETCH_WARM_AUTO_PERCENT 90u
uint64_t fetch_warm_auto_max(uint64_t cache_size);
/* Does --warm auto warm a dataset of total bytes: within
 * fetch_warm_auto_max(cache_size), and within the disk's free space above
 * its reserve (disk) and what the cache holds already (used: it may be
 * this dataset's; the fill stops at the limit anyway)? 1 or 0. */
int fetch_warm_auto_fits(uint64_t total, uint64_t cache_size, uint64_t disk, uint64_t used);
/* A probe read of the core (a sidecar's spot check, a codec sniff): not a
 * reader's, so it moves no stream, fetches nothing ahead, and a miss
 * fills only the units it reads (cachetier_obj_pread_probe). */
ssize_t fetch_pread_probe(struct cachetier_obj *o, void *buf, size_t len, uint64_t off);

/* Fetch the whole object o for a user's `shardfs prefetch` (cold 1) or the
 * warm-up at mount (--warm, cold 0): in the background, after readers'
 * fills, only into the room the cache has, never evicting what readers use
 * (CACHETIER_PF_FIT: what does not fit is skipped and counted); a cold
 * one's fills are CACHETIER_PF_COLD (written around the page cache by
 * --direct-fills prefetch). 0 or the store's error. */
int fetch_obj_fill(struct fetch *s, struct cachetier_obj *o, int cold);

/* reader read a member of shard (shards numbered in the order their
 * objects are listed): 1 when this read moves reader in order to shard
 * from shard - 1 after FETCH_INORDER_READS reads of it in a row (the
 * caller then fetches the shards after it), else 0. Per reader: another
 * reader's reads in between change nothing. */
int fetch_shard_read(struct fetch *s, uint32_t reader, uint32_t shard);
/* What fetch_shards_ahead asks the core of shard next, one of the shards
 * after the one read: -1 to stop (another directory: shards of one
 * directory are consecutive; or past the last shard), 0 to skip it (fetched
 * ahead once already: the core marks each shard the first time it is
 * asked; or gone), 1 to fetch it: *o its store object, or NULL when it
 * could not be opened (then counted, not fetched). */
typedef int (*fetch_next_shard_fn)(void *ctx, uint32_t next, struct cachetier_obj **o);
/* reader read a member of shard: when that moves it in order
 * (fetch_shard_read), the count shards after it (--prefetch-shards) are
 * fetched ahead, each once, making room as a reader's reads do (evicting
 * what was read longest ago: CACHETIER_PF_EVICT; for a reader that gets
 * there soon). Returns how many shards were asked for (shard_prefetches). */
unsigned fetch_shards_ahead(struct fetch *s, uint32_t reader, uint32_t shard, unsigned count,
			    fetch_next_shard_fn next, void *ctx);
/* Reads of one shard in a row before a move to the next is reading in
 * order: a shuffled reader moves to the next shard by chance every few
 * reads, and each shard fetched ahead for it is mostly evicted before it
 * is read. */
#define FETCH_INORDER_READS 8u

/* The link as the store's fills saw it (fetch_link.c: decayed averages,
 * recent fills weighing most): the time from a fill's request to its first
 * byte, and the rate one connection delivered after it (from fills of 1 MiB
 * or more; 0 until one). All 0 before the first fill. Any thread. */
struct fetch_link {
	uint64_t ttfb_ns;
	uint64_t rate; /* bytes per second */
	uint64_t samples;
};
void fetch_link_get(struct fetch *s, struct fetch_link *l);

/* What the stream table holds (totals since fetch_new). */
struct fetch_stats {
	uint64_t streams;	  /* streams started (a reader's first read of an object, or
				   * its first shard read: its cursor) */
	uint64_t streams_retired; /* of them, retired to make room for another */
};
void fetch_stats_get(struct fetch *s, struct fetch_stats *st);

/* ---- fetch_plan.c: a reading plan's lookahead ------------------------------
 * How far ahead of its reader a plan's fetcher (fs/core/fs_plan_fetch.c)
 * hands extents to the store; pure, any thread. What it is sized from: */
struct fetch_plan_sizing {
	/* the link: one connection's rate (bytes per second) and its time to
	 * first byte as measured, 0 until measured; gap stands in for their
	 * product until both are (--plan-gap) */
	uint64_t rate, ttfb_ns, gap;
	unsigned connections; /* connections planned ranges may use (0 works as 1) */
	uint64_t sample;      /* the plan's mean planned path: one request's bytes */
	unsigned plans;	      /* plans now: the link and the ceiling are split over them */
	uint64_t ceiling;     /* --plan-lookahead, for all plans */
	/* the cache (cachetier_held_get): its size, the bytes readers pin,
	 * what fills ahead may hold in a full cache, its unit; and the cache
	 * bytes the plans hold ahead of their readers besides this plan's
	 * lookahead (other plans' paths handed over and not read, paths
	 * behind a position not read yet) */
	uint64_t cache, pinned, ahead_max, held;
	uint32_t unit;
	/* the stage's memory (--plan-memory; 0: none): with a stage the
	 * cache's bound is the stage's, FETCH_PLAN_STAGE_SHARE of it over
	 * the plans (planned bytes the cache cannot keep are staged) */
	uint64_t stage;
};
/* The share of the stage the plans' lookahead may fill, in planned bytes:
 * half (as fills ahead hold at most half a full cache: FETCH_AHEAD_SHARE),
 * the other half for spans behind a plan's position its reader's workers
 * have not read yet (they read batches side by side) and the bytes
 * between planned paths a span carries (at most a quarter of its planned
 * bytes: fetch_planner.c, PFX_GAP_SHARE). */
#define FETCH_PLAN_STAGE_NUM 1u
#define FETCH_PLAN_STAGE_DEN 2u
/* The lookahead and its parts, in planned bytes (a plan's own, not over
 * the plans), and the bound that decided it. */
enum fetch_plan_bound {
	FETCH_PLAN_BOUND_LINK = 0,    /* the link's need (or the floor before it is measured) */
	FETCH_PLAN_BOUND_CEILING = 1, /* --plan-lookahead */
	FETCH_PLAN_BOUND_CACHE = 2,   /* the cache after what readers and the plans hold */
};
struct fetch_plan_lookahead {
	uint64_t inflight; /* bytes in flight that keep the connections busy (all plans):
			    * connections x (rate x ttfb + sample), gap for rate x ttfb
			    * until measured */
	uint64_t link;	   /* FETCH_PLAN_SAFETY x inflight / plans */
	uint64_t ceiling;  /* ceiling / plans */
	uint64_t cache;	   /* (min(cache - pinned, ahead_max) - held) x sample / (sample +
			    * unit): a planned path of s bytes costs about s + unit in the
			    * cache (its whole units); with a stage: stage / 2 / plans */
	uint64_t bytes;	   /* the lookahead: the least of link, ceiling and cache */
	enum fetch_plan_bound bound;
};
/* The link's need times this: the fetcher hands a batch over once the
 * reader is half-way through the last (what is ahead drops to half the
 * lookahead before the next batch: x 2), and a reader takes its samples in
 * bursts (a data loader's workers each take a batch at once: what was
 * fetched ahead must cover a burst as large as what is in flight: x 2). */
#define FETCH_PLAN_SAFETY 4u
void fetch_plan_lookahead(const struct fetch_plan_sizing *in, struct fetch_plan_lookahead *out);
/* The cache bytes a plan holds ahead of its reader (its held, for the other
 * plans' sizing): its unread paths behind its position (a reader's workers
 * read batches side by side: the position is the furthest read) of sample
 * bytes each, at most half its lookahead la (paths a reader skips then take
 * at most a third of its own: la' = room - la / 2 settles at 2/3 of the
 * room), plus the bytes handed over past its position (fetched, in flight or
 * queued), each path costing about its bytes and a unit. 0 when sample is. */
uint64_t fetch_plan_held(uint64_t unread, uint64_t sample, uint64_t la, uint64_t handed,
			 uint32_t unit);

/* ---- fetch_batch.c: GetBatch windows ---------------------------------------
 * A window of a reading plan (pieces p[0..n), in plan order, several
 * objects) fetched with the store's batch read (cachetier_batch_fill:
 * AIStore's GetBatch), split into requests of FETCH_BATCH_REQ_MIN (1 MiB)
 * or more of planned bytes, about equal, each a stretch of the plan's
 * order, at most par of them, as many at once (par: the connections the
 * planner gives batches). The store's errors and blocking
 * (cachetier_batch_fill). */
int fetch_batch_fill(struct cachetier *ct, const struct cachetier_batch_piece *p, size_t n,
		     unsigned par);
/* The split alone: ends[g] is one past request g's last piece (ends: par
 * entries, 1 when par is 0); returns the requests' count (0 when n is). */
size_t fetch_batch_split(const struct cachetier_batch_piece *p, size_t n, unsigned par,
			 size_t *ends);

/* ---- fetch_planner.c: fetching ahead along reading plans ------------------
 * The plans are the core's (fs/core/fs_plan.c); the planner decides what of
 * them is fetched and when: from each plan's position on, its extents not
 * read yet, in plan order, up to its lookahead (fetch_plan_lookahead),
 * grouped into spans across small gaps or (ais://) into GetBatch windows,
 * handed to the store. Whole rule: fetch_planner.c's opening comment. */
#define FETCH_PLANS_MAX 64 /* plans looked at in one pass (the core's FS_PLAN_MAX) */
enum fetch_plan_flag {
	/* the extent is a compressed shard's whole raw object: fetched whole */
	FETCH_PLAN_DECODED = 1,
	/* its first piece also fetches the 512-byte tar header before off */
	FETCH_PLAN_HEADER = 4,
};
/* One planned path: bytes [off, off + len) of the core's object obj. */
struct fetch_plan_extent {
	uint32_t obj;	/* the core's object number (fetch_plans_src.raw) */
	uint32_t flags; /* enum fetch_plan_flag (other bits ignored) */
	uint64_t off, len;
};
/* What the planner needs of a plan. */
struct fetch_plan_info {
	uint32_t paths;	   /* extents, in reading order */
	uint32_t read;	   /* extents marked read */
	uint32_t position; /* 1 + index of the furthest extent read (0: none read) */
	uint64_t bytes;	   /* sum of the extents' len */
};
/* The core's plans, as the planner sees them (a plan is an opaque pointer;
 * every function but list and raw takes one; called on the planner's
 * thread with no lock of the planner held). */
struct fetch_plans_src {
	void *ctx;
	/* the plans now, each referenced (put each): how many, at most max */
	size_t (*list)(void *ctx, void **out, size_t max);
	void (*put)(void *plan);
	void (*info)(const void *plan, struct fetch_plan_info *in);
	/* extents from index *from on not marked read, in plan order, at most
	 * max into out with their indexes in idx; *from moves past the last
	 * looked at (the extent count at the end) */
	uint32_t (*ahead)(const void *plan, uint32_t *from, struct fetch_plan_extent *out,
			  uint32_t *idx, uint32_t max);
	uint64_t (*bytes_before)(const void *plan, uint32_t i); /* bytes of extents before i */
	/* reads of plan need no wake until its position reaches position
	 * (0: every read; UINT32_MAX: none) */
	void (*wake_at)(void *plan, uint32_t position);
	/* the store's object of the core's object obj: 0 or < 0 (logged by the core) */
	int (*raw)(void *ctx, uint32_t obj, struct cachetier_obj **raw);
	/* the store refused GetBatch (called once; NULL: nothing to say) */
	void (*batch_refused)(void *ctx);
	/* the stage refused a span of the core's object obj for the object's
	 * ETag (weak or mtime-derived, no --weak-etag trust): called once, at
	 * the first such span (NULL: nothing to say) */
	void (*stage_weak)(void *ctx, uint32_t obj);
};
struct fetch_plan_config {
	uint64_t gap;		  /* --plan-gap: rate x ttfb until measured; 0: no spans */
	uint64_t lookahead;	  /* --plan-lookahead, for all plans */
	uint64_t cache_size;	  /* --cache-size */
	uint64_t chunk;		  /* the store's chunk: the largest gap */
	unsigned connections;	  /* --connections */
	unsigned max_connections; /* --max-connections */
	int get_batch;		  /* windows go with GetBatch (ais://, --get-batch auto) */
	uint64_t memory;	  /* --plan-memory: the stage's bound (0: no stage) */
};
/* What the planner did (relaxed atomics; the core's stats read them). */
struct fetch_plan_counters {
	atomic_ullong paths, bytes;	      /* planned paths handed over, their bytes */
	atomic_ullong ranges, gap_bytes, gap; /* ranges handed over, bytes between planned
					       * extents fetched with them, the gap at the
					       * last batch */
	atomic_ullong lookahead;	      /* the lookahead at the last batch, over the plans */
	atomic_ullong stage_weak;	      /* spans the stage refused for their object's
					       * weak ETag (src.stage_weak) */
};
struct fetch_planner;
/* A planner over s's store, sized by s's link; counts into *c (kept by
 * the caller). 0 or -ENOMEM. */
int fetch_planner_new(struct fetch *s, const struct fetch_plans_src *src,
		      const struct fetch_plan_config *cfg, struct fetch_plan_counters *c,
		      struct fetch_planner **out);
/* One pass over the plans: each with a batch due gets it handed to the
 * store. Call it on one thread at a time, at every publish, clear and due
 * read of a plan. May block in a GetBatch window (bounded as the store's
 * batch fill is). */
void fetch_planner_pass(struct fetch_planner *pl);
void fetch_planner_free(struct fetch_planner *pl); /* accepts NULL; puts its plans */

#endif
