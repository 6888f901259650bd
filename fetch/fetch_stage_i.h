/*
 * fetch_stage_i.h — the stage's pieces and table, shared by its two files
 * (fetch_stage.c: the stage, its pieces' placement, room and reads into
 * memory; fetch_stageread.c: its read side). Private to fetch/.
 */
#ifndef FETCH_STAGE_I_H
#define FETCH_STAGE_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "fetch_i.h"

enum stage_state { STAGE_INFLIGHT = 0, STAGE_OK, STAGE_FAILED };

/* Bytes [a, b) of a planned path that reads got. */
struct stage_run {
	uint64_t a, b;
};

/* Runs a path keeps in place before it takes an array of its own, and
 * the most it keeps (a path read in more disjoint pieces than that is
 * never counted read: its piece goes for room or with its plan; the
 * kernel reads a path through the page cache in pages, mostly in order). */
#define STAGE_SUB_RUNS	   2u
#define STAGE_SUB_RUNS_MAX 64u

/* A planned path's data in a piece: [off, end) (its tar header, staged
 * with a first piece, not counted), and the bytes of it reads got: their
 * union (runs, sorted, disjoint, not touching; got: their bytes), so a
 * byte read again (the kernel reads a page again after another process
 * dropped the page cache) counts once. lost: more than STAGE_SUB_RUNS_MAX
 * runs, or an array for more could not be had: the path is never counted
 * read (its piece goes for room or with its plan). */
struct stage_sub {
	uint64_t off, end, got;
	struct stage_run *run; /* in[] or its own array (cap runs) */
	uint32_t nrun, cap;
	int lost;
	struct stage_run in[STAGE_SUB_RUNS];
};

/* A read waiting for bytes [.., end) of a piece (on its stack). */
struct stage_waiter {
	struct stage_waiter *next;
	uint64_t end;
	int woken;
	pthread_cond_t cond;
};

struct stage_piece {
	struct stage_piece *next;
	struct fetch_stage *st;
	struct cachetier_obj *o; /* referenced */
	uint64_t off, end;
	unsigned char *buf; /* NULL once it failed and no read held it, or went */
	size_t size;	    /* buf's size (fetch__stagebuf_size: whole pages) */
	uint64_t counted;   /* its bytes in st->bytes (0 once buf is back in the pool) */
	/* the watermark: [off, have) of buf is in (stage_progress); and the
	 * lowest end a waiter needs (UINT64_MAX: none) */
	_Atomic uint64_t have, need;
	struct stage_waiter *waiters;
	enum stage_state state;
	int err;
	const void *plan; /* its plan (compared, never followed) */
	uint64_t seq;	  /* its order of staging (stage_pick: the oldest of equal fits) */
	uint32_t last;	  /* the plan index of its last planned path */
	unsigned readers; /* reads copying from it now */
	uint32_t nsub, left;
	struct stage_sub sub[];
};

/* The pieces' lists: a piece is listed by its object and the MiB its
 * first byte is in (STAGE_BUCKET_LOG2), hashed (stage_list: the top
 * STAGE_LISTS_LOG2 bits). A read of [a, b) looks only at the lists of its
 * object's MiBs from a - the longest span staged to a: a piece that holds
 * it starts there. One list of every piece (300-400 in the planned epoch
 * of tests/bench/link_bench.py) cost 6 % of the daemon's CPU in the scan,
 * a list per object (its 40-50 pieces there) 3 %. */
#define STAGE_LISTS_LOG2  8u
#define STAGE_LISTS	  (1u << STAGE_LISTS_LOG2)
#define STAGE_BUCKET_LOG2 20u

struct fetch_stage {
	struct disk_mutex lock;
	pthread_cond_t cond;		       /* a piece's read ended, or a piece went */
	struct stage_piece *head[STAGE_LISTS]; /* by object and MiB (stage_list) */
	struct stage_piece *dead;	       /* gone, unlinked: freed by fetch__stage_reap */
	atomic_int ndead;
	uint64_t max, bytes;	/* bytes: the pieces' buffers' sizes */
	uint64_t span_max, seq; /* the longest span staged; pieces staged */
	unsigned inflight;
	struct fetch_stage_stats c;
	struct fetch_stage_pool pool; /* the region's runs (fetch_stagebuf.c) */
};

/* The list of o's pieces that start in MiB m (off >> STAGE_BUCKET_LOG2). */
static inline struct stage_piece **fetch__stage_list(struct fetch_stage *st,
						     const struct cachetier_obj *o, uint64_t m)
{
	uint64_t h = ((uint64_t)(uintptr_t)o ^ (m * 0xff51afd7ed558ccdull)) * 0x9e3779b97f4a7c15ull;

	return &st->head[h >> (64u - STAGE_LISTS_LOG2)]; /* the top bits: one of STAGE_LISTS */
}

/* fetch_stage.c, st->lock held but fetch__stage_piece_free and
 * fetch__stage_reap (unlocked): a piece unlinked freed (its object
 * reference dropped); a piece unlinked, its buffer back in the region;
 * a piece unlinked onto the list the planner's pass frees (reads' threads
 * and the I/O thread: no take of the store's lock); that list freed (the
 * planner's thread, fetch__stage_free); p's waiters whose bytes are
 * below end woken; a failed piece no read holds, its buffer back. */
void fetch__stage_piece_free(struct stage_piece *p);
void fetch__stage_unlink(struct fetch_stage *st, struct stage_piece *p);
void fetch__stage_bury(struct fetch_stage *st, struct stage_piece *p);
void fetch__stage_reap(struct fetch_stage *st);
void fetch__stage_wake(struct stage_piece *p, uint64_t end);
void fetch__stage_drop_buf(struct fetch_stage *st, struct stage_piece *p);

#endif
