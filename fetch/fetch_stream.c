/*
 * fetch_stream.c — reader streams (fetch.h): the stream table, each
 * stream's readahead window and each reader's shard cursor.
 *
 * Readahead: a read that starts near where the stream's previous read
 * ended (up to one chunk further, a quarter chunk back) is sequential (the
 * tolerance covers index building, which skips over small gaps, and kernel
 * readahead arriving slightly out of order); the stream's window doubles
 * from one chunk up to the store's readahead cap and the store queues the
 * chunks of the window past the read without waiting
 * (cachetier_obj_read_begin_ahead). A read at offset 0 starts at the full
 * window; elsewhere the window opens only once FETCH_MIN_RUN bytes were
 * read in sequence (the requests of one shuffled sample are in sequence
 * too). Any other read of the stream (a seek) resets its window, and only
 * its own.
 *
 * Steps: the store queues a window's chunks only when the window took a
 * step, that is when its front (the window's last byte, at most the
 * object's) moved into a chunk past the last one handed over
 * (cachetier_obj_read_begin_win's queue): once per chunk the reader moves
 * and at each doubling, not at every read. The reads in between queue
 * nothing, so a read of units the store holds and trusts takes no lock
 * all readers share (a reader of 256 KiB reads and 8 MiB chunks: one read
 * in 32 takes it). A chunk of the window evicted before the reader got
 * there is queued again at the next step, or filled by the read's miss.
 *
 * The table: FETCH_STRIPES stripes of FETCH_WAYS entries; a key (reader,
 * object; object 0: the reader's shard cursor) hashes to one stripe and
 * lives in one of its entries, the stripe's least recently used one taken
 * for a new key. Each stripe's mutex is a leaf: held for a lookup and a
 * few additions, never across a call into the store.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "fetch_i.h"

/* Bytes a stream not at an object's start reads in sequence before its
 * readahead starts. */
#define FETCH_MIN_RUN (1u << 20)

int fetch_new(struct cachetier *ct, struct fetch **out)
{
	struct fetch *s = calloc(1, sizeof(*s));

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->ct = ct;
	for (unsigned i = 0; i < FETCH_STRIPES; i++)
		disk_mutex_init(&s->stripe[i].lock, DISK_LOCK_FETCH_STREAM);
	fetch__link_start(s);
	cachetier_set_policy(ct, fetch_store_rules());
	s->ra_max = cachetier_readahead_max(ct); /* as the rules cap it */
	*out = s;
	return 0;
}

void fetch_free(struct fetch *s)
{
	if (!s)
		return;
	fetch__link_stop(s);
	fetch__stage_free(s);
	for (unsigned i = 0; i < FETCH_STRIPES; i++)
		disk_mutex_destroy(&s->stripe[i].lock);
	free(s);
}

static struct fetch_stripe *stripe_of(struct fetch *s, uint32_t reader, uintptr_t obj)
{
	uint64_t h = ((uint64_t)reader << 32 ^ (uint64_t)obj) * 0x9E3779B97F4A7C15ull;

	return &s->stripe[(h >> 32) % FETCH_STRIPES];
}

/* The entry of (reader, obj) in its stripe, a new one (zeroed) when none:
 * the stripe's lock held. */
static struct fetch_stream *stream_get(struct fetch *s, struct fetch_stripe *sp, uint32_t reader,
				       uintptr_t obj)
{
	struct fetch_stream *e = &sp->e[0];

	sp->clock++;
	for (unsigned i = 0; i < FETCH_WAYS; i++) {
		struct fetch_stream *c = &sp->e[i];

		if (c->used && c->reader == reader && c->obj == obj) {
			c->used = sp->clock;
			return c;
		}
		if (c->used < e->used)
			e = c; /* a free one (0) first, else the least recently used */
	}
	if (e->used)
		atomic_fetch_add_explicit(&s->retired, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->streams, 1, memory_order_relaxed);
	*e = (struct fetch_stream){.reader = reader, .obj = obj, .used = sp->clock};
	return e;
}

/* Move stream e by a read of [off, end) of an object of size bytes in
 * chunks of chunk bytes: the bytes past end to fetch ahead (0: none), and
 * *queue 1 when the window took a step (above: the store queues it). */
static uint64_t stream_read(struct fetch_stream *e, uint64_t off, uint64_t end, uint64_t chunk,
			    uint64_t max, uint64_t size, int *queue)
{
	uint64_t front;

	if (off == 0) {
		/* A read from an object's start is nearly always the start of a
		 * whole-object read (cat, cp, an index build, a decoder): it gets
		 * the full window at once. A ramp waits for one chunk's fill per
		 * doubling (about 0.17 s for 8 MiB on a link of 60 MB/s per
		 * connection and 30 ms to first byte), which made a fresh
		 * mount's cat of a 64 MB shard take two fill times, not one. */
		e->window = max;
		e->run = end;
		e->handed = 0; /* a new pass: its window is handed over again */
	} else if (off + chunk / 4 >= e->end && off <= e->end + chunk) {
		e->run += end - off;
		/* a run of fewer than FETCH_MIN_RUN bytes read is a small
		 * member read in a few requests (a shuffled sample), or reads
		 * that land near each other by chance: no readahead, or every
		 * sample of a shuffled epoch would fetch a window of chunks */
		if (e->window || e->run >= FETCH_MIN_RUN) {
			uint64_t w = e->window ? e->window * 2 : chunk;

			e->window = w < max ? w : max;
		}
	} else {
		e->window = 0;
		e->run = end - off;
	}
	e->end = end;
	*queue = 0;
	if (end >= size || !e->window) {
		e->handed = 0;
		return 0;
	}
	front = ((size - end > e->window ? end + e->window : size) - 1) / chunk + 1;
	if (front > e->handed) {
		*queue = 1;
		e->handed = front;
	}
	return e->window;
}

/* The bytes past [off, off + len) of o to fetch ahead for reader;
 * *queue: the window took a step. */
static uint64_t ahead_of(struct fetch *s, uint32_t reader, struct cachetier_obj *o, uint64_t off,
			 uint64_t len, int *queue)
{
	uint64_t chunk = cachetier_obj_chunk_bytes(o), size = cachetier_obj_size(o), ahead;
	struct fetch_stripe *sp;

	*queue = 0;
	if (chunk == 0 || off >= size) /* no unit store: nothing to fetch */
		return 0;
	if (len > size - off)
		len = size - off;
	sp = stripe_of(s, reader, (uintptr_t)o);
	disk_mutex_lock(&sp->lock);
	ahead = stream_read(stream_get(s, sp, reader, (uintptr_t)o), off, off + len, chunk,
			    s->ra_max, size, queue);
	disk_mutex_unlock(&sp->lock);
	return ahead;
}

int fetch_read_begin(struct fetch *s, uint32_t reader, struct cachetier_obj *o, uint64_t off,
		     uint64_t len, int *fd, uint64_t *fd_off, struct cachetier_pin **pin)
{
	int queue;
	uint64_t ahead = ahead_of(s, reader, o, off, len, &queue);

	return cachetier_obj_read_begin_win(o, off, len, ahead, queue, fd, fd_off, pin);
}

ssize_t fetch_pread(struct fetch *s, uint32_t reader, struct cachetier_obj *o, void *buf,
		    size_t len, uint64_t off)
{
	int queue, got = fetch_stage_read(s, o, buf, len, off);
	uint64_t ahead;

	if (got < 0)
		return got;
	if (got)
		return (ssize_t)len;
	ahead = ahead_of(s, reader, o, off, len, &queue);
	return cachetier_obj_pread_win(o, buf, len, off, ahead, queue);
}

int fetch_shard_read(struct fetch *s, uint32_t reader, uint32_t shard)
{
	struct fetch_stripe *sp = stripe_of(s, reader, 0);
	struct fetch_stream *e;
	int moved = 0;

	disk_mutex_lock(&sp->lock);
	e = stream_get(s, sp, reader, 0);
	if (e->shard == shard + 1) {
		e->in_row++;
	} else {
		/* only a move to the next shard after FETCH_INORDER_READS reads
		 * in a row of the one before counts as reading in order */
		moved = e->shard == shard && e->in_row + 1 >= FETCH_INORDER_READS;
		e->shard = shard + 1;
		e->in_row = 0;
	}
	disk_mutex_unlock(&sp->lock);
	return moved;
}

unsigned fetch_shards_ahead(struct fetch *s, uint32_t reader, uint32_t shard, unsigned count,
			    fetch_next_shard_fn next, void *ctx)
{
	unsigned asked = 0;

	if (!fetch_shard_read(s, reader, shard))
		return 0;
	for (unsigned i = 1; i <= count && shard + i > shard; i++) {
		struct cachetier_obj *o = NULL;
		int r = next(ctx, shard + i, &o);

		if (r < 0)
			break;
		if (r == 0)
			continue;
		asked++;
		if (o)
			cachetier_obj_prefetch(o, CACHETIER_PF_EVICT);
	}
	return asked;
}

int fetch_obj_fill(struct fetch *s, struct cachetier_obj *o, int cold)
{
	(void)s;
	return cachetier_obj_prefetch(o, cold ? CACHETIER_PF_COLD : CACHETIER_PF_FIT);
}

void fetch_stats_get(struct fetch *s, struct fetch_stats *st)
{
	st->streams = atomic_load_explicit(&s->streams, memory_order_relaxed);
	st->streams_retired = atomic_load_explicit(&s->retired, memory_order_relaxed);
}

ssize_t fetch_pread_probe(struct cachetier_obj *o, void *buf, size_t len, uint64_t off)
{
	return cachetier_obj_pread_probe(o, buf, len, off);
}
