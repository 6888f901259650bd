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
 * Streams live in a bounded table (FETCH_STREAMS entries, in stripes of a
 * few entries, each with its own mutex: a leaf lock, never held across a
 * call into the store); a new stream takes its stripe's least recently
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

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct cachetier;
struct cachetier_obj;
struct cachetier_pin;

/* The daemon's own reads (not a reader's): one stream per object. */
#define FETCH_READER_SELF 0u

struct fetch;

/* A scheduler for the store ct (its readahead cap is the store's,
 * cachetier_readahead_max). 0 or -ENOMEM. */
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

/* reader read a member of shard (shards numbered in the order their
 * objects are listed): 1 when this read moves reader in order to shard
 * from shard - 1 after FETCH_INORDER_READS reads of it in a row (the
 * caller then fetches the shards after it), else 0. Per reader: another
 * reader's reads in between change nothing. */
int fetch_shard_read(struct fetch *s, uint32_t reader, uint32_t shard);
/* Reads of one shard in a row before a move to the next is reading in
 * order: a shuffled reader moves to the next shard by chance every few
 * reads, and each shard fetched ahead for it is mostly evicted before it
 * is read. */
#define FETCH_INORDER_READS 8u

/* What the stream table holds (totals since fetch_new). */
struct fetch_stats {
	uint64_t streams;	  /* streams started (a reader's first read of an object, or
				   * its first shard read: its cursor) */
	uint64_t streams_retired; /* of them, retired to make room for another */
};
void fetch_stats_get(struct fetch *s, struct fetch_stats *st);

#endif
