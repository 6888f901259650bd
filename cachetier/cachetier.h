/*
 * cachetier — the local SSD/NVMe directory between the backend and readers.
 *
 * It does four things:
 *  - makes an object's bytes readable through a file descriptor, so the FUSE
 *    layer can answer reads by splicing from it. A local source needs no
 *    copy: the fd is the source file itself. At most local_fds_max such
 *    fds are open at once: the least recently used is closed and reopened
 *    on demand (a reopened file that is no longer the one first opened
 *    gives -ESTALE).
 *  - keeps a unit store of remote objects: fetched in chunks of
 *    chunk_bytes by a pool of fill threads, ahead of sequential readers,
 *    into sparse local files that later reads and later mounts are served
 *    from; within cache_size_bytes and min_free_bytes by evicting least
 *    recently used objects; crash-safe (a unit is recorded only once its
 *    bytes are durable).
 *  - decodes compressed shards (.tar.gz/.tgz, .tar.zst) once into the cache
 *    directory; members are then read with random access from the decoded
 *    copy. A stream that is damaged part-way keeps its valid prefix and
 *    records where the damage is. A stream that decodes past a
 *    decompression-bomb bound or past the disk's room is refused whole.
 *  - stores small metadata blobs (shard indexes, fs's kept listing and
 *    imagefolder class maps) crash-safely: disk_write_atomic (temp file,
 *    fsync, rename, fsync of the directory); they are read into the heap
 *    or mapped read-only (shard indexes: page cache, not heap).
 *
 * On-disk layout (created 0700, files 0600):
 *   CACHE_DIR/v1/<source-hash>/source       the source string, for humans
 *   CACHE_DIR/v1/<source-hash>/meta/<h>     blobs, <h> = hash of the blob name
 *   CACHE_DIR/v1/<source-hash>/meta/f-<g>/<h>  blobs of a family, <g> = hash of
 *                                           the family's name (cachetier_meta_put_in)
 *   CACHE_DIR/v1/<source-hash>/decoded/<h>  decoded streams, <h> = hash of key, ETag, codec
 *   CACHE_DIR/v1/<source-hash>/data/<h>     remote objects' units (sparse), <h> = hash
 *                                           of key, ETag, size
 *   CACHE_DIR/v1/<source-hash>/data/<h>.map which units are valid (format in
 *                                           cachetier_map.c)
 *   CACHE_DIR/v1/<source-hash>/data/<h>.st  the units' state shared by the
 *                                           processes using the object
 *   CACHE_DIR/v1/usage                      bytes cached in the whole directory
 * Any number of processes may share one cache directory, for one source or
 * several (README.md: "Sharing one cache directory").
 *
 * Threads: all functions may be called from any thread; they may block on
 * disk I/O and, for decoding and remote reads, on the backend. Errors: 0
 * or negative errno.
 */
#ifndef CACHETIER_H
#define CACHETIER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "backend.h"

struct cachetier;
struct cachetier_obj;

/* Every field is the caller's choice: cachetier_open applies no defaults
 * (the mount's, with the reasons for them, are in fs/core/fs_opt.c's option
 * table) and only clamps what cannot work, as each field says. */
struct cachetier_config {
	const char *cache_dir;	      /* root of the cache directory (created 0700) */
	const char *source;	      /* source string; selects the per-source subdirectory */
	uint64_t cache_size_bytes;    /* most bytes of cached data in the whole directory
				       * (0: nothing is kept that no reader pins) */
	uint64_t min_free_bytes;      /* free space kept on the cache filesystem: at most
				       * this (0: none) ... */
	unsigned min_free_percent;    /* ... and at most this percentage of the
				       * filesystem's size (0: no cap); see cachetier_disk */
	unsigned max_decode_ratio;    /* a decoded copy past 64 MiB stays within this many
				       * times the compressed bytes read (0: no bound) */
	uint64_t max_decoded_bytes;   /* most bytes of one decoded copy (0: no bound) */
	uint32_t chunk_bytes;	      /* fill unit, one range GET: at most 1 GiB, rounded up to
				       * whole 4 KiB blocks (0 works as 4 KiB) */
	uint64_t readahead_max_bytes; /* the largest window of a sequential reader asked
				       * for (--readahead): the rules cap it (window_max) */
	unsigned fill_threads;	      /* fills in flight at once but those of small planned
				       * ranges: the store's connections + 1 (0 works as 1) */
	unsigned small_fills;	      /* most fills in flight when those of small planned ranges
				       * (the rules' small ones) count too: the store's
				       * max_connections (below fill_threads - 1: fill_threads - 1) */
	unsigned cursor_fills;	      /* a prefetch cursor's fill starts only while fewer large
				       * prefetch fills run (--prefetch-connections; 0: no
				       * bound but fill_threads') */
	unsigned local_fds_max;	      /* most fds of local source files kept open at once
				       * (0: RLIMIT_NOFILE's soft limit less a reserve) */
	int direct_fills;	      /* enum cachetier_direct: which prefetch fills' whole
				       * blocks are written with O_DIRECT (cachetier_direct.c) */
	int weak_etag_trust;	      /* 1: an object whose ETag is weak or mtime-derived is
				       * not compared with the store before units filled
				       * since are served (0: it is; cachetier_read.c) */
	double durable_delay_s;	      /* a unit this process filled is named in its object's
				       * map (after an fdatasync) once it is this old: a
				       * crash loses at most the fills of this long (and of
				       * the flusher's next pass, about a second); units
				       * evicted younger are never named, nor synced unless an
				       * older unit of their object is (the fdatasync covers
				       * the whole data file) (0: every
				       * unit at the flusher's next batch, about a second;
				       * cachetier_map.c) */
};

enum cachetier_codec {
	CACHETIER_RAW = 0,  /* the object's bytes as stored */
	CACHETIER_GZIP = 1, /* gzip (also multi-member) decoded */
	CACHETIER_ZSTD = 2, /* zstd (also multi-frame) decoded */
};

struct cachetier_stats {
	uint64_t decoded_streams; /* compressed objects decoded into the cache */
	uint64_t decoded_bytes;	  /* bytes written by decoding */
	uint64_t decoded_reused;  /* decoded copies found in the cache and reused */
	uint64_t meta_reads;	  /* blobs found */
	uint64_t meta_writes;	  /* blobs written */
	/* the unit store of remote objects */
	uint64_t hits;		  /* read ranges found present */
	uint64_t misses;	  /* read ranges that waited for a fill */
	uint64_t miss_wait_ms;	  /* their time waiting for their units, summed */
	uint64_t bytes_fetched;	  /* bytes written by fills */
	uint64_t fills;		  /* fill requests completed (a chunk, or a random read's units) */
	uint64_t fills_inflight;  /* fill requests running now */
	uint64_t fills_queued;	  /* fills not running yet: jobs on the demand and readahead
				   * queues, and fills a worker took and is starting (room);
				   * planned ranges and prefetch cursors not counted (their
				   * objects' prefetch state says when those end) */
	uint64_t fill_errors;	  /* fills that failed (backend errors): once each,
				   * whatever its units */
	uint64_t readahead_fills; /* fills started by readahead or prefetch */
	uint64_t queued_waits;	  /* units reads found queued, their fill not started, and
				   * waited for: once per read and unit (the rules' promote
				   * moves such a readahead fill to the demand queue) */
	uint64_t unfit_bytes;	  /* bytes of prefetch fills skipped: no room without evicting
				   * (PF_FIT), or without evicting units filled ahead (PF_EVICT) */
	uint64_t evictions;	  /* evictions: one or more units of an object, or a decoded copy */
	uint64_t evicted_bytes;
	uint64_t decoded_evictions;  /* decoded copies evicted (also in evictions) */
	uint64_t evict_cpu_ns;	     /* CPU time of the threads making room for fills, in the
				      * calls that must evict: picking victims, unlinking maps,
				      * punching; a room check that finds room is not counted */
	uint64_t map_writes;	     /* maps written (or unlinked: nothing left to name) */
	uint64_t map_write_errors;   /* map writes that failed (tried again a second later) */
	uint64_t flush_cpu_ns;	     /* CPU time of the threads writing maps (their fdatasync
				      * of the data file, the map's atomic write) */
	uint64_t punches;	     /* holes punched by evictions (fallocate calls) */
	uint64_t punches_queued;     /* evictions whose punch went to the puncher thread (the
				      * rest punched on their own thread: queue full, closing) */
	uint64_t punches_pending;    /* punches queued or running on the puncher now */
	uint64_t punch_batches;	     /* the puncher's wake-ups that found punches queued (each
				      * punches all of them: fewer than punches_queued when
				      * evictions queue faster than it punches) */
	uint64_t punch_cpu_ns;	     /* CPU time of the puncher thread (its punches, their
				      * unlocks and ends, its wake-ups), as of its last punch */
	uint64_t punch_tier_locks;   /* the puncher's takes of the tier's lock (only to wake a
				      * fill that waits for the bytes punched: its batches'
				      * ends take their objects' locks alone) */
	uint64_t evict_units;	     /* units evicted (taken by evictions) */
	uint64_t evict_looked;	     /* units evictions looked at in their objects' kept order
				      * (each one taken out, checked, put back when not
				      * taken: about one a unit evicted, cachetier_evheap.c) */
	uint64_t evicting_waits;     /* reads that waited for units being punched */
	uint64_t room_waits;	     /* calls making room for a fill that waited for other
				      * threads' evictions to end (room_cond) */
	uint64_t room_wait_ms;	     /* their time waiting, summed */
	uint64_t room_statfs;	     /* statvfs calls of the free-space check of fills and
				      * decodings (cachetier/README.md, "Free space") */
	uint64_t room_make_ms;	     /* time of the threads making room for fills (wall clock,
				      * the waits included), summed */
	uint64_t tier_lock_waits;    /* takes of the tier's lock (ct->lock) that found it held
				      * by another thread (disk_mutex_waits) */
	uint64_t tier_lock_wait_ms;  /* their time blocked, summed */
	uint64_t file_lock_waits;    /* takes of the cached objects' own locks (ct_file.lock:
				      * their units' pins) that found one held by another
				      * thread, all objects summed */
	uint64_t file_lock_wait_ms;  /* their time blocked, summed */
	uint64_t peer_units;	     /* units read that another process (or mount) filled */
	uint64_t weak_probes;	     /* units fetched again to compare, for objects whose ETag
				      * is weak or mtime-derived (nginx) */
	uint64_t weak_changed;	     /* objects whose bytes changed under such an ETag: their
				      * units dropped, ESTALE for the old version */
	uint64_t peer_waits;	     /* fills that waited for another process's fill of a unit */
	uint64_t work_wakes;	     /* fill workers woken to start jobs (one per batch of pushes
				      * at most while one woken has not run) */
	uint64_t workers_waiting;    /* fill workers waiting for work, none woken (now) */
	uint64_t fill_writes;	     /* the fill writer's writes of fills' bytes (one per run
				      * of a fill's buffers it took together: one pwritev, or
				      * for a fill shorter than 512 KiB one a unit,
				      * cachetier_punch.h) */
	uint64_t fill_publishes;     /* the fill writer's passes making a fill's units readable
				      * as they land (each a lock fcntl, then its object's
				      * lock alone) */
	uint64_t direct_bytes;	     /* fills' bytes written with O_DIRECT (prefetch fills:
				      * cachetier_direct.c) */
	uint64_t direct_fallbacks;   /* the data directory's file system refused O_DIRECT
				      * (tmpfs): 1, and every fill is buffered since */
	uint64_t fill_bufs_queued;   /* buffers of fills' bytes waiting for the fill writer
				      * (now) */
	uint64_t fill_pool_maps;     /* 2 MiB mappings of the fill sinks' buffer pool made,
				      * all told (each fresh memory the kernel zeroes) */
	uint64_t fill_writer_locks;  /* the fill writer's takes of the tier's lock (as of its
				      * last batch; one a batch that holds a run's end) */
	uint64_t fill_writer_busy;   /* ... those that found it held (in tier_lock_waits) */
	uint64_t fill_worker_busy;   /* the fill workers' takes of the tier's lock that found
				      * it held (in tier_lock_waits) */
	uint64_t fill_locked_calls;  /* lock fcntl calls of the fill writer's passes made
				      * while it holds the tier's lock (only idle locks past
				      * their cap dropped: the conversions are made before) */
	uint64_t unit_waiters;	     /* reads waiting for units now */
	uint64_t unit_waiter_wakes;  /* wake-ups sent to reads waiting for units (a fill wakes
				      * only those waiting for units it made valid or ended) */
	uint64_t unit_waits_quiet;   /* ... of them that changed none of the read's units so
				      * (an eviction, a punch elsewhere): it waited on under
				      * its object's lock, with no take of the tier's lock */
	uint64_t unit_read_locks;    /* fcntl calls of reads on their units' read locks (taken,
				      * dropped; idle locks dropped for an eviction) */
	uint64_t read_locks;	     /* takes of the tier's lock by reads' own threads
				      * (read_begin, each return from a wait for units;
				      * read_end only when release requests came: else it
				      * takes its object's lock alone); a read of units held,
				      * trusted and armed whose window needs no queueing
				      * takes none */
	uint64_t read_file_checks;   /* reads that checked their data file's size and holes
				      * (one fstat and one lseek(SEEK_HOLE) a read: a unit of
				      * it to CRC-check, or the file not watched) */
	uint64_t lock_requests;	     /* release requests posted: an eviction met a unit
				      * another process holds */
	uint64_t lock_releases;	     /* idle units released on another process's request */
	uint64_t prefetch_withdrawn; /* prefetch fills stopped part-way because a demand or
				      * readahead fill needed their connection (fetched again
				      * later) */
	uint64_t units_corrupt;	     /* units found damaged (a failed CRC32C, a data file cut
				      * short) and made empty: fetched again (decoded copies:
				      * the read fails with EIO, decoded again) */
	uint64_t units_checked;	     /* cached units read back and their CRC32C checked before
				      * a read served them (cachetier__units_check) */
	uint64_t watch_own;	     /* data files watched with fanotify now: this process's
				      * own writes are no change to them */
	uint64_t bypass_reads;	     /* reads served from the store past the cache: no room */
	uint64_t bypass_bytes;
	uint64_t bytes_used;  /* cached bytes on disk now, the whole directory */
	uint64_t bytes_limit; /* cache_size_bytes in force */
	/* local sources */
	uint64_t local_fds_open;   /* fds of local source files open now */
	uint64_t local_fd_reopens; /* reopened after the fd bound had closed them */
};

/* The codec whose magic bytes start buf (the first bytes of an object):
 * CACHETIER_GZIP (1f 8b), CACHETIER_ZSTD (a zstd or skippable frame), or
 * -1 when buf starts with neither (plain bytes, e.g. a tar). */
int cachetier_codec_sniff(const void *buf, size_t len);

/* Open the cache tier on top of be (not owned; must outlive ct). */
int cachetier_open(struct cachetier **out, const struct cachetier_config *cfg, struct backend *be);
void cachetier_close(struct cachetier *ct); /* accepts NULL */
/* Begin shutdown without waiting: fill workers take no more work, and every
 * read_begin that waits for a unit, now or later, returns -ECANCELED.
 * Fills already running end with the backend (backend_cancel them first).
 * cachetier_close still follows. Any thread; accepts NULL. */
void cachetier_cancel(struct cachetier *ct);
void cachetier_get_stats(struct cachetier *ct, struct cachetier_stats *st);
/* How many times the calling thread took a cache tier's main lock (any
 * tier's, since the thread started): tests count a read's takes with it
 * (a planned read of units this process holds and trusts takes none). */
uint64_t cachetier_lock_takes(void);
/* ... of those, the takes that found it held by another thread (tests
 * tell who met the lock busy: counted in tier_lock_waits too). */
uint64_t cachetier_lock_busy(void);
/* A batch of fill jobs (prefetch ranges, spans) pushed between on 1 and
 * on 0 wakes a fill worker once, at its end, not once per push; no worker
 * starts a job meanwhile, so the caller does no waiting inside. Nests.
 * Any thread. */
void cachetier_wake_hold(struct cachetier *ct, int on);
/* Tests: while hold is set, evictions' punches stay queued for the
 * puncher (cachetier_punch.c; their units stay being evicted, readers of
 * them wait), up to its queue's bound; cachetier_close still does them. */
void cachetier_punch_hold(struct cachetier *ct, int hold);
/* Tests: with 'on' set (a negative one: as it was), every victim pick of an eviction (and every
 * look at the bytes filled ahead) is made twice, by the order kept as units change and by the scan
 * of every unit it replaced, and the two compared (cachetier_evheap.c); so is every eviction's
 * walk of its object's units, against the sort of all of them it replaced (cachetier_evict.c).
 * counts (when not NULL) gets, since open: [0] picks, [1] units the kept order looked at, [2]
 * units the scans looked at (0 while 'on' was never set), [3] picks whose answers differed,
 * [4] evictions whose lists were compared, [5] those whose lists differed, [6] units evictions
 * looked at in the kept order, [7] units the sorts looked at, [8] units evicted, [9] picks made
 * again before they were compared: a unit was marked between the kept order's answer and the
 * scan's (a change without ct->lock while the pick ran: they did not look at one state). */
#define CT_EVV_N 10
void cachetier_evict_verify(struct cachetier *ct, int on, uint64_t counts[CT_EVV_N]);
/* Tests: with verify on, fn(arg) runs once, in the next pick, between the kept order's answer
 * and the scan's, on the picking thread with ct->lock held: it may only make changes that run
 * without ct->lock (plans' marks and reads). */
void cachetier_evict_verify_hook(struct cachetier *ct, void (*fn)(void *arg), void *arg);
/* Tests: while hold is set, the fill writer takes nothing the fills'
 * sinks push (it piles up, up to the sinks' bound, FILL_WQ_MAX buffers);
 * at its end the writer takes the pile as one batch. */
void cachetier_write_hold(struct cachetier *ct, int hold);
/* The per-source directory in use (for logs). */
const char *cachetier_dir(const struct cachetier *ct);

/* Free space of the cache filesystem now (f_bavail) and the reserve kept
 * free on it: min(min_free_bytes, min_free_percent of its size), fixed at
 * open. */
int cachetier_disk(struct cachetier *ct, uint64_t *avail_bytes, uint64_t *reserve_bytes);

/* Open a readable stream of object 'info' decoded with 'codec'. For a
 * codec other than RAW this decodes the whole object into the cache the
 * first time (blocking; concurrent callers for one object share the work)
 * and reuses the decoded copy afterwards. The returned handle is
 * referenced once; release with cachetier_obj_unref.
 * A decode is whole or an error, never a copy cut at a limit: -EFBIG when
 * it passes max_decode_ratio or max_decoded_bytes (cachetier_obj_refusal
 * says which; a later open with bounds no looser fails at once, without
 * decoding again), -ENOSPC when the disk has no room above its reserve
 * even after evicting (tried again by the next open). A damaged stream
 * (truncated, corrupt) is not an error: see cachetier_obj_damage. */
int cachetier_obj_open(struct cachetier *ct, const struct backend_objinfo *info,
		       enum cachetier_codec codec, struct cachetier_obj **out);

enum cachetier_bound {
	CACHETIER_BOUND_RATIO = 1, /* max_decode_ratio */
	CACHETIER_BOUND_SIZE = 2,  /* max_decoded_bytes */
};

/* Why the decode of (info, codec) was refused with -EFBIG. */
struct cachetier_refusal {
	enum cachetier_bound bound;
	uint64_t decoded_bytes;	   /* decoded when it stopped */
	uint64_t compressed_bytes; /* compressed bytes read by then */
	unsigned max_decode_ratio; /* the bounds in force then */
	uint64_t max_decoded_bytes;
};

/* Fill *r for an object whose cachetier_obj_open failed with -EFBIG;
 * -ENOENT when no refusal is recorded. */
int cachetier_obj_refusal(struct cachetier *ct, const struct backend_objinfo *info,
			  enum cachetier_codec codec, struct cachetier_refusal *r);
void cachetier_obj_unref(struct cachetier_obj *o); /* accepts NULL */

/* Bytes readable from the stream (the decoded size; for a damaged
 * compressed object, the valid prefix). */
uint64_t cachetier_obj_size(const struct cachetier_obj *o);
/* 0, or the negative errno of damage found while decoding, with the
 * compressed offset where it was found in *off. */
int cachetier_obj_damage(const struct cachetier_obj *o, uint64_t *off);

/* One read between cachetier_obj_read_begin and cachetier_obj_read_end:
 * what it pins (opaque; owned by the reader). */
struct cachetier_pin;

/* Make [off, off+len) of the stream readable from a local file and say
 * where: *fd (do not close it) at *fd_off. For remote objects this fetches
 * the missing units (several in parallel, a chunk a request; a unit that
 * is already being fetched is waited for, never fetched twice), blocks until they are
 * present; no readahead (cachetier_obj_read_begin_ahead: the caller's
 * window). On success
 * *pin is the read's handle: the range (and *fd) stays valid and
 * unevicted until cachetier_obj_read_end(*pin), which every successful
 * read_begin must be paired with, exactly once, on any thread (a FUSE
 * reply may end the read on another thread than the one that began it).
 * o must stay referenced until then, and every pin must be ended before
 * cachetier_close. Never -ENOTSUP. Returns 0, -EIO when the range
 * lies past cachetier_obj_size, the backend's error of a failed fill
 * (-EIO, -ENOENT, -EACCES, -ESTALE; a later call retries), -ECANCELED
 * when the cache tier is closing, -ENOMEM. A local source file whose fd the bound
 * on open fds had closed is reopened here: -ESTALE when it is no longer
 * the file first opened (replaced or rewritten), or the open's error.
 * On an error *pin is NULL and nothing is pinned. */
int cachetier_obj_read_begin(struct cachetier_obj *o, uint64_t off, uint64_t len, int *fd,
			     uint64_t *fd_off, struct cachetier_pin **pin);
/* cachetier_obj_read_begin with readahead: the chunks of [off + len, off
 * + len + ahead) not cached are queued behind demand fills without
 * waiting (one request a chunk), and a miss of the read fills its whole
 * chunk. ahead is the caller's window (the fetch scheduler's, sched/:
 * this module decides no readahead); 0 as cachetier_obj_read_begin. */
int cachetier_obj_read_begin_ahead(struct cachetier_obj *o, uint64_t off, uint64_t len,
				   uint64_t ahead, int *fd, uint64_t *fd_off,
				   struct cachetier_pin **pin);
/* cachetier_obj_read_begin_ahead whose caller says whether its window took
 * a step (queue 1: the chunks of the window not cached are queued, as
 * _ahead does) or not (queue 0: an earlier read handed this window's
 * chunks over already; nothing is queued, and a read of units this
 * process holds and trusts takes no lock all readers share). The window
 * (ahead) still decides how much a miss fills and what eviction spares
 * ahead of the reader. The fetch scheduler's streams call it (fetch/). */
int cachetier_obj_read_begin_win(struct cachetier_obj *o, uint64_t off, uint64_t len,
				 uint64_t ahead, int queue, int *fd, uint64_t *fd_off,
				 struct cachetier_pin **pin);
/* Bytes of one chunk of o's unit store (a fill's request); 0 when o has
 * none (a local source, a decoded copy): nothing to fetch ahead. */
uint64_t cachetier_obj_chunk_bytes(const struct cachetier_obj *o);
/* The largest readahead window of a reader: readahead_max_bytes as the
 * rules cap it (window_max: fetch/'s, at most an eighth of the cache, at
 * least a chunk); without rules as configured. Any thread. */
uint64_t cachetier_readahead_max(struct cachetier *ct);
/* End the read of pin: unpins its range and frees pin. Any thread; may
 * close a file (a bypass read's memfd, a decoded copy evicted meanwhile);
 * never blocks on the backend. Accepts NULL. */
void cachetier_obj_read_end(struct cachetier_pin *pin);

/* How a prefetch makes room. */
enum cachetier_prefetch_mode {
	/* for a reader coming soon: when the cache is full, evicts the units
	 * read longest ago, never units filled ahead (readahead, prefetch)
	 * and not read yet, and only while those stay within half of
	 * cache_size_bytes; a chunk it cannot make room for so is skipped and
	 * counted like a PF_FIT one */
	CACHETIER_PF_EVICT = 0,
	/* only into room the cache has: never evicts. A chunk that would need
	 * an eviction (the directory's usage plus fills in flight past
	 * cache_size_bytes, or the disk's free space past its reserve) is
	 * skipped and counted (cachetier_obj_prefetch_state, unfit_bytes) */
	CACHETIER_PF_FIT = 1,
	/* as PF_FIT, for a reader that may come much later or never (a user's
	 * `shardfs prefetch`): under CACHETIER_DIRECT_PREFETCH its fills are
	 * written around the page cache. An object asked again in another
	 * mode (the warm, a reader's shards ahead) is filled through it from
	 * then on */
	CACHETIER_PF_COLD = 2,
};

/* Which fills are written with O_DIRECT (cachetier_config.direct_fills;
 * the order of --direct-fills' names). */
enum cachetier_direct {
	CACHETIER_DIRECT_OFF = 0, /* none: every fill through the page cache */
	/* every prefetch fill: the cursors' (PF_COLD, PF_FIT, PF_EVICT) and the
	 * ranges' (a plan's lookahead, a range prefetch) */
	CACHETIER_DIRECT_AUTO = 1,
	CACHETIER_DIRECT_PREFETCH = 2, /* the PF_COLD cursors' fills only */
};

/* Start fetching the whole object in the background (large sequential
 * fills at full parallelism, after demand and readahead fills); returns at
 * once. Objects are filled one after another in the order they were asked
 * for, except that an object a reader reads (read_begin) moves to the
 * front. Asking again for an object whose prefetch runs adds nothing but
 * may turn a PF_FIT prefetch into PF_EVICT; asking again after it ended
 * looks at every chunk again. cachetier_obj_cached_bytes tells the progress
 * (it may fall again when the cache evicts). A chunk whose fill fails is
 * left for a later read or prefetch. Chunks are claimed through the same
 * fill path as reads, so processes sharing the directory fetch each chunk
 * once. Local objects and decoded copies are cached already. */
int cachetier_obj_prefetch(struct cachetier_obj *o, enum cachetier_prefetch_mode mode);
/* Fetch the units behind [off, off+len) in the background (a planner
 * that knows which members a reader will read). Ranges, of any objects,
 * are queued in the order they are asked for and fetched in that order,
 * after demand and readahead fills and before whole-object prefetches:
 * the empty units of each, of 64 KiB, one request per chunk they lie in,
 * with the same pacing, withdrawal and PF_FIT / PF_EVICT room rules. A
 * unit is claimed only when its fill starts: a reader that reaches it
 * first fills it on demand, and a range whose units are all filled by then
 * costs nothing. Units filled so count as filled ahead until read (spared
 * by prefetch evictions, evicted last). The caller bounds how much it
 * queues (each range holds a few dozen bytes until it is fetched).
 * cachetier_obj_prefetch_state counts o's queued ranges as running.
 * Returns 0, -EINVAL when the range passes cachetier_obj_size, or
 * -ENOMEM. */
int cachetier_obj_prefetch_range(struct cachetier_obj *o, uint64_t off, uint64_t len,
				 enum cachetier_prefetch_mode mode);
/* One planned extent of a span: bytes [off, off + len) of the object. */
struct cachetier_piece {
	uint64_t off, len;
};
/* Fetch the bytes from x[0].off to the end of the last piece as one range
 * (cachetier_obj_prefetch_range: queued in the order asked, one request
 * per chunk it lies in), for a planner that found the bytes between
 * nearby planned extents cheaper than another request. x: n pieces by
 * offset (they may overlap). Units that no piece touches and that are
 * not cached are fetched "in between": counted as filled ahead but never
 * spared, and evicted before anything else while no read or later range
 * or span names them. Returns 0, -EINVAL (a piece past
 * cachetier_obj_size, or not sorted), -ENOMEM. */
int cachetier_obj_prefetch_span(struct cachetier_obj *o, const struct cachetier_piece *x, size_t n,
				enum cachetier_prefetch_mode mode);

/* ---- the fill rules (the fetch scheduler's: fetch_store_rules) -----------
 * The store executes fills; every decision about them is the rules'
 * (cachetier_set_policy): which queue the next fill comes from and how
 * many fills of each kind run at once, where a fill's run of units ends
 * (the chunk), which planned ranges are small, how many prefetch fills run
 * beside readers', which stop part-way for a reader, the slow start after
 * readahead, how much a reader's miss fills, whether a fill a reader
 * waits for is served as a miss, whether the cursor of the object a
 * reader reads goes first, the cap of a readahead window, a decoder's
 * window, whether a batch request with no room ends its call, the share
 * of the cache fills ahead may hold. Each is called with the
 * store's lock held and only computes. Without rules (a store no
 * scheduler drives: unit tests of the store) the store serves its queues
 * in the order listed in any free slot, stops none, a fill is the empty
 * units asked (a miss: the units its read needs) within one chunk, no
 * range is small, a queued fill stays in its queue, the cursors in the
 * order asked, a window's cap is the one configured, a decoder reads
 * with no readahead, a batch fill tries each of its requests, and fills
 * ahead may hold the whole cache. */
struct cachetier_pf_counts {
	unsigned fill_threads; /* large fills at once: the store's connections and one */
	unsigned small_fills;  /* fills at once, small planned ranges too, less one */
	unsigned cursor_fills; /* large prefetch fills at once for a cursor's to start (0: any) */
	unsigned rd_queued;    /* demand and readahead jobs queued */
	unsigned rd_inflight;  /* demand and readahead fills in flight */
	unsigned ra_busy;      /* readahead jobs queued and fills in flight */
	unsigned cap, quiet;   /* the rules' own state, kept by the store (in and out) */
};
/* A fill slot as the rules see it. */
struct cachetier_pf_slot {
	uint64_t got, len;	/* bytes received of its run's len */
	unsigned long long seq; /* fills started before it and it: its age */
	uint8_t inflight;	/* a fill runs in it */
	uint8_t stopping;	/* asked to stop already */
	uint8_t pf;		/* a prefetch fill */
	uint8_t small;		/* of a small planned range */
	uint8_t pinned;		/* a reader waits for one of its units */
	uint8_t same;		/* of the object of the reader's job just queued */
};
/* The store's queues, which the rules' next picks the next fill from:
 * readers' misses (demand), readahead, planned ranges (at the front of the
 * range queue), objects' prefetch cursors. */
enum cachetier_queue {
	CACHETIER_Q_NONE = 0, /* no fill now */
	CACHETIER_Q_DEMAND,
	CACHETIER_Q_READAHEAD,
	CACHETIER_Q_RANGE,
	CACHETIER_Q_CURSOR,
};
/* What the queues hold and what runs, as the rules' next sees them. */
struct cachetier_queue_heads {
	unsigned fills_inflight; /* fills in flight */
	unsigned small_inflight; /* of them, small planned ranges (the rules' small) */
	unsigned pf_running;	 /* of them, prefetch fills (ranges and cursors) */
	uint8_t demand;		 /* a demand job is queued */
	uint8_t readahead;	 /* a readahead job is queued */
	uint8_t cursor;		 /* an object's prefetch cursor has units left */
	int8_t range;		 /* the front range's next fill: 1 small, 0 large, -1 no range */
};
/* Which fill the store asks the rules to bound (cachetier_policy.run). */
enum cachetier_fill_kind {
	CACHETIER_FILL_DEMAND = 0, /* a reader's miss */
	CACHETIER_FILL_READAHEAD,  /* a chunk of a reader's readahead window */
	CACHETIER_FILL_RANGE,	   /* a planned range's next fill */
	CACHETIER_FILL_CURSOR,	   /* an object's prefetch cursor's next fill */
};
struct cachetier_policy {
	/* the state before any reader (cachetier_set_policy) */
	void (*start)(struct cachetier_pf_counts *k);
	/* a reader's job was queued (ra: readahead; the store counted it) */
	void (*reader_job)(struct cachetier_pf_counts *k, int ra);
	/* a prefetch fill ended with all its bytes */
	void (*pf_ended)(struct cachetier_pf_counts *k);
	/* after a reader's job was queued (ra: readahead): stop[i] = 1 for each
	 * prefetch fill of slots s[0..n) to stop (zeroed by the caller) */
	void (*pf_yield)(const struct cachetier_pf_counts *k, const struct cachetier_pf_slot *s,
			 unsigned n, int ra, uint8_t *stop);
	/* a reader's miss (not a probe): 1 fills the missed unit's whole chunk,
	 * 0 only the units the read needs. streams: the read has a readahead
	 * window; used: the cache's bytes used, reserved and being evicted;
	 * chunk: the object's chunk; cache: the cache's size */
	int (*miss_whole)(int streams, uint64_t used, uint64_t chunk, uint64_t cache);
	/* the queue the store's next fill comes from (the order and the limits
	 * of fills in flight); NONE: none now */
	enum cachetier_queue (*next)(const struct cachetier_pf_counts *k,
				     const struct cachetier_queue_heads *q);
	/* the bounds of one fill of kind around unit c of an object of nunits
	 * units, group of them to a chunk: the store fills the empty units
	 * around c within [*lo, *hi) (in: what was asked; out: within it) as
	 * one request */
	void (*run)(enum cachetier_fill_kind kind, uint32_t c, uint32_t group, uint32_t nunits,
		    uint32_t *lo, uint32_t *hi);
	/* a planned range's fill of len bytes is small: it may be one of the
	 * store's small_fills in flight and is sent as a small read */
	int (*small)(uint64_t len);
	/* a reader waits for a unit that a queued fill of kind holds (the
	 * readahead queue's: a reader caught up with its window): 1 moves that
	 * fill to the demand queue, 0 leaves it where it is */
	int (*promote)(enum cachetier_fill_kind kind);
	/* a reader reads an object whose prefetch cursor runs and is not the
	 * first of the cursors (the rules' next takes the first): 1 moves it
	 * to the front, 0 leaves the order as asked */
	int (*cursor_front)(void);
	/* the largest readahead window of a reader, given asked (the store's
	 * readahead_max_bytes, --readahead), the store's chunk and the size of
	 * its cache (cachetier_readahead_max reports it) */
	uint64_t (*window_max)(uint64_t asked, uint64_t chunk, uint64_t cache);
	/* a decoder reads a compressed object's raw bytes (cachetier_decode.c):
	 * the readahead window of its reads, given max (window_max's cap) */
	uint64_t (*decode_ahead)(uint64_t max);
	/* request g of a batch fill's nreq (cachetier_batch_fill) got no room
	 * without evicting what is needed sooner: 1 ends the call (none of the
	 * later requests is fetched), 0 goes on with the next */
	int (*batch_unfit)(size_t g, size_t nreq);
	/* the most bytes units filled ahead of their readers (readahead,
	 * prefetch: not read yet) may hold once a cache of cache bytes is
	 * full: a prefetch fill evicts only while they stay within it (the
	 * rest is the readers'); cachetier_held_get reports it */
	uint64_t (*ahead_share)(uint64_t cache);
};
/* Install the prefetch rules p (static; NULL: none), before fills start or
 * at any time. Any thread. */
void cachetier_set_policy(struct cachetier *ct, const struct cachetier_policy *p);

/* One planned range of a batch fill: bytes [off, off + len) of object o
 * (a remote object's unit store; others are skipped). */
struct cachetier_batch_piece {
	struct cachetier_obj *o;
	uint64_t off, len;
};
/* What batch fills did (cachetier_batch_stats: totals since open). */
struct cachetier_batch_result {
	uint64_t requests;   /* backend_batch_read calls (AIStore GetBatch requests; the rest
			      * of an answer cut midway is asked again within one) */
	uint64_t items;	     /* items asked for: runs of units of one object */
	uint64_t bytes;	     /* bytes of items received whole and kept */
	uint64_t failed;     /* items failed, cut, or of an object the HEAD could not
			      * confirm: their units left empty, no error kept */
	uint64_t stale;	     /* objects whose HEAD after their items said another version
			      * (or none): their units empty with -ESTALE */
	uint64_t peer;	     /* units another process filled (taken, not fetched) */
	uint64_t skipped;    /* units another process was filling (left to it) */
	uint64_t unfit;	     /* bytes left out: no room without evicting what is needed */
	uint64_t refused;    /* 1 once the store refused its batch read */
	uint64_t slot_waits; /* requests that waited for a slot (their units
			      * unclaimed meanwhile) */
	/* HEADs the version rule made (one object each); objects of a request
	 * confirmed by a HEAD another request made after this one's items of
	 * it arrived (a HEAD saved); objects of a request that found a HEAD of
	 * it in flight (sent before its items arrived) and waited for its end
	 * (counted as they wait) */
	uint64_t heads;
	uint64_t heads_shared;
	uint64_t head_waits;
	uint64_t threads; /* threads started: two a batch fill's request, one a window */
};
/* Fetch the units behind the pieces p[0..n) (a window of a reading plan,
 * in plan order, several objects) with the store's batch read
 * (backend_batch_read: for ais://, AIStore's GetBatch), as the caller split
 * them into nreq requests (the fetch scheduler decides: fetch_batch_fill):
 * request g has pieces [ends[g - 1], ends[g]) (ends[-1] = 0; increasing,
 * the last n; else -EINVAL).
 * A request's units not valid are claimed, once it has a slot (below),
 * as a fill claims them (this process's unit
 * states, the other processes' OFD unit locks: a unit another process
 * fills is left to it, not waited for); until then a reader fetches them
 * on demand. Room is made as a PF_EVICT
 * prefetch makes it (by next use: a request that would evict what is
 * needed sooner is left out, and so are the later ones if the rules'
 * batch_unfit says), each request's
 * items are its maximal runs of claimed units of one object, and each
 * item's bytes go to the object's data file at their offset with each
 * unit's CRC32C as they arrive.
 * The version rule: GetBatch has no If-Match, so a request's units are
 * kept only for objects whose listed ETag and size a HEAD (backend_stat_many)
 * sent after the object's last item of the request arrived confirmed
 * (each object's units valid once its own HEAD returned, while the answer
 * goes on); an object the HEAD says changed
 * or gone has its units punched and empty with -ESTALE (as a fill's
 * If-Match failure), one whose HEAD failed has them punched and empty
 * with no error. A HEAD confirms every item of its object that arrived
 * before it was sent: the first urgent requests of the call (0 to nreq)
 * send their HEADs at once; the others, finding a HEAD of an object in
 * flight, wait for it to end and share the next one with every request
 * that waited (cachetier_batch.c says the rule and its cost). Units of a failed or
 * cut item are punched and empty with no error kept (a reader fetches
 * them on demand, by version). Then: valid (state file, usage, map batch),
 * readers woken.
 * Requests run on threads of their own, at most par of every call at once
 * (a call waits for a slot: that is its backpressure, each wait bounded by
 * the requests', which the store's retry budget and stall timeout bound).
 * Until one request of this tier was answered, a call returns when its
 * requests ended (the store may refuse the batch read: the caller learns
 * it for that window); afterwards once its last request started. No lock
 * held; any thread but the store's I/O thread. Returns 0; -EOPNOTSUPP
 * when the store has no batch read or refused it (then and from then on:
 * nothing stays claimed, the caller fetches the window another way);
 * -EINVAL (a piece past cachetier_obj_size); -ENOMEM; -ECANCELED
 * (cachetier_cancel). cachetier_close waits for the requests in flight. */
int cachetier_batch_fill(struct cachetier *ct, const struct cachetier_batch_piece *p, size_t n,
			 const size_t *ends, size_t nreq, unsigned par, size_t urgent);
/* Totals of the batch fills since cachetier_open. Any thread. */
void cachetier_batch_stats(struct cachetier *ct, struct cachetier_batch_result *r);

/* Each fill that got its bytes reports how long its request took to the
 * first byte (ttfb_ns) and from there to its last (xfer_ns), for bytes
 * bytes, to fn(ctx) (the fetch scheduler measures the link from them:
 * fetch_link_get); called on the fill writer's thread with ct's lock held:
 * it must only take leaf locks and return at once. fn NULL: nobody. Any
 * thread. */
typedef void (*cachetier_fill_timing_fn)(void *ctx, int64_t ttfb_ns, uint64_t bytes,
					 int64_t xfer_ns);
void cachetier_set_fill_timing(struct cachetier *ct, cachetier_fill_timing_fn fn, void *ctx);

/* What a planner sizing how far ahead it fetches (fs/core/fs_plan_fetch.c)
 * must leave to the readers (cachetier_span.c): the bytes readers of this
 * process pin now (units between read_begin and read_end, decoded copies a
 * read uses: never evicted), the most bytes units filled ahead of their
 * readers may hold once the cache is full (a prefetch fill beyond it
 * evicts nothing and is skipped as unfit: the rules' ahead_share, half of
 * cache_size_bytes), and the unit a range's bytes are fetched in (a range
 * costs its whole units). Any thread; takes ct->lock for O(units of every
 * live object), no I/O. */
struct cachetier_held {
	uint64_t pinned;
	uint64_t ahead_max;
	uint32_t unit;
};
void cachetier_held_get(struct cachetier *ct, struct cachetier_held *h);

/* ---- cachetier_memread.c: a range into the caller's memory ----------------
 * Read [off, off + len) of remote object o's listed version into buf
 * (len bytes, the caller's until done runs), past the unit store: nothing
 * is written to the cache directory. The store's version checks (If-Match
 * with the listed ETag; -ESTALE when the object changed), retry budget,
 * stall bound, breaker and resumes after a cut body apply, as to fills;
 * small: a planned range of at most FETCH_SMALL_FILL_BYTES (the store's
 * small reads, past 'connections'). done(arg, err) runs exactly once, on
 * the store's I/O thread (or in this call for a store that reads in the
 * caller): err 0 when all len bytes are in buf, else a negative errno
 * (the bytes in buf are then not to be used); it must be quick and must
 * not call into the store but the backend's own calls. progress (or
 * NULL) runs on the same thread each time bytes landed, with end: [off,
 * end) of buf holds the listed version's bytes, final (never written
 * again, also when the read fails later: cachetier_memread.c's header says
 * why), end only growing; it must be as quick (no lock a reader holds
 * long, no disk call). Returns 0 (done will run) or, done not run: -EOPNOTSUPP (a local object, a
 * decoded copy, or an ETag that does not pin the bytes, weak or mtime-derived, unless
 * weak_etag_trust: the unit store's weak validator guards those), -EINVAL (a range past the
 * object), -ESTALE (its bytes changed under a weak ETag), -ENOMEM. */
typedef void (*cachetier_mem_done_fn)(void *arg, int err);
typedef void (*cachetier_mem_progress_fn)(void *arg, uint64_t end);
/* 1 when cachetier_obj_read_mem may read o (not a local object, a decoded
 * copy, or one whose ETag does not pin its bytes, as it says), else 0. */
int cachetier_obj_can_read_mem(const struct cachetier_obj *o);
/* 1 when o is a remote object that cachetier_obj_read_mem refuses only for
 * its ETag (weak or mtime-derived, and weak_etag_trust not set), else 0. */
int cachetier_obj_mem_weak(const struct cachetier_obj *o);
int cachetier_obj_read_mem(struct cachetier_obj *o, uint64_t off, size_t len, void *buf, int small,
			   cachetier_mem_progress_fn progress, cachetier_mem_done_fn done,
			   void *arg);
/* 1 when o's bytes changed under its weak ETag (its reads give ESTALE). */
int cachetier_obj_stale(const struct cachetier_obj *o);
/* One more reference of o (released with cachetier_obj_unref). */
void cachetier_obj_ref(struct cachetier_obj *o);
/* Bytes the cache could take now without evicting: --cache-size less what
 * the directory holds, fills in flight reserve and evictions still punch;
 * at most the filesystem's free space above --min-free less what fills in
 * flight reserve (a disk smaller than --cache-size is the limit then).
 * Calls fstatvfs: not for an event loop. */
uint64_t cachetier_room(struct cachetier *ct);
/* 1 when every unit behind [off, off + len) of o is valid in the cache now
 * (0 for objects without units). */
int cachetier_obj_range_cached(struct cachetier_obj *o, uint64_t off, uint64_t len);

/* One item of a batch read into memory (cachetier_batch_read_mem): bytes
 * [off, off + len) of object o (cachetier_obj_can_read_mem) into buf. */
struct cachetier_batch_mem {
	struct cachetier_obj *o;
	uint64_t off;
	size_t len;
	void *buf;
	cachetier_mem_progress_fn progress; /* or NULL */
	cachetier_mem_done_fn done;
	void *arg;
};
/* Read the window it[0..n), split into nreq requests of the store's batch
 * read (backend_batch_read: AIStore's GetBatch; request g has items
 * [ends[g - 1], ends[g]), ends[-1] being 0, ends[nreq - 1] == n), read at
 * once, into their buffers, past the unit store (the stage's GetBatch
 * windows: nothing written to the cache directory, no unit filled,
 * evicted or punched). GetBatch has no If-Match: an item is given once it
 * arrived and a HEAD sent after every item of its group began or failed
 * says its object's ETag and size are the listed ones (a group: an
 * object's items of the window, or of its first request and of its
 * others; why: cachetier_batchm.c's header); then progress(arg, off +
 * len) (all of buf is final) and done(arg, 0); else done(arg, err): -ESTALE (another
 * version or gone), -EIO (the HEAD failed, the item failed or was cut),
 * the store's errno, -EAGAIN (no thread), -ECANCELED (cachetier_cancel
 * before its request had a slot). Each done runs exactly once, on the
 * window's thread, never the caller's nor the I/O thread's; buf is
 * written until then. Each request takes a slot as a batch fill's
 * request takes one (at most par of both at once; the wait bounded as
 * theirs, on the caller's thread), submitted (a thread if the store can't);
 * counted in cachetier_batch_stats (requests, items, failed, stale,
 * heads; bytes: only the cache's). Returns 0 (every done will run),
 * -EOPNOTSUPP (every done will run; the store has no batch read or
 * refused it), or, none run: -ECANCELED (cachetier_cancel), -ENOMEM,
 * -EINVAL (an item past its object or not readable into memory, ends not
 * as said). No lock held; not the store's I/O thread. */
int cachetier_batch_read_mem(struct cachetier *ct, const struct cachetier_batch_mem *it, size_t n,
			     const size_t *ends, size_t nreq, unsigned par);

/* The latest prefetch of o: 1 while it runs (chunks left to look at, or
 * fills in flight), 0 once it ended or when none was asked. *unfit_bytes
 * (may be NULL): the bytes it skipped because they did not fit (see
 * enum cachetier_prefetch_mode). */
int cachetier_obj_prefetch_state(struct cachetier_obj *o, uint64_t *unfit_bytes);
uint64_t cachetier_obj_cached_bytes(const struct cachetier_obj *o);

/* Eviction by next use (cachetier_plan.c): a caller that knows when units
 * will be read again (reading plans) says so, and the cache evicts in this
 * order: units no plan needs (read by their plan and needed by none again,
 * or filled by a range prefetch that no mark named: bytes between planned
 * extents, once any mark was made), least recently used first; then units no plan speaks of,
 * least recently used first (those ahead of their readers last); then
 * units a plan needs, the one needed furthest ahead first (Belady's rule).
 * A prefetch fill evicts a planned unit only when that unit's next use is
 * further than its own units'. Positions are the caller's clock (e.g.
 * bytes of planned reading); they are serial numbers: a mark more than 2^31
 * positions from cachetier_plan_now's position is misread. Marks are kept in
 * memory only, 4 bytes per unit of the objects open here, and only by this
 * process: other processes sharing the directory evict in their own order.
 * Local objects and decoded copies have no units: the calls do nothing.
 * Any thread; in-memory work under the tier's lock, never blocking on I/O.
 *
 * now: the plan position now (reads have got this far).
 * mark: the units behind [off, off+len) are read next at position seq,
 *   unless a mark says sooner (the nearest of every plan's wins). 0, or
 *   -EINVAL when the range passes cachetier_obj_size.
 * read: the plan use of [off, off+len) (one path's bytes) was read up to
 *   byte upto (a path read in several requests: the bytes read so far;
 *   begun 0: but for the bytes before off, so the unit off lies in stays
 *   unless off is its first byte): the units behind [off, off+len) whose
 *   bytes of that range all lie before upto are needed by no plan now
 *   (the caller marks them again for a later use, e.g. of a neighbour
 *   sharing a unit); the others keep
 *   their mark until a read gets past them. [*lo, *hi) says which bytes
 *   the units made unneeded cover (*lo == *hi: none). 0 or -EINVAL.
 * done: read with upto = off + len: every unit behind [off, off+len).
 * reset: every unit a plan marked is needed by none (the caller then
 *   marks what the plans it keeps still need). */
void cachetier_plan_now(struct cachetier *ct, uint32_t now);
int cachetier_plan_mark(struct cachetier_obj *o, uint64_t off, uint64_t len, uint32_t seq);
int cachetier_plan_done(struct cachetier_obj *o, uint64_t off, uint64_t len, uint64_t *lo,
			uint64_t *hi);
int cachetier_plan_read(struct cachetier_obj *o, uint64_t off, uint64_t len, uint64_t upto,
			int begun, uint64_t *lo, uint64_t *hi);
void cachetier_plan_reset(struct cachetier *ct);

/* Copy bytes of the stream. Returns bytes read (short only at the end of
 * the stream) or a negative errno. */
ssize_t cachetier_obj_pread(struct cachetier_obj *o, void *buf, size_t len, uint64_t off);
/* cachetier_obj_pread with readahead (cachetier_obj_read_begin_ahead). */
ssize_t cachetier_obj_pread_ahead(struct cachetier_obj *o, void *buf, size_t len, uint64_t off,
				  uint64_t ahead);
/* cachetier_obj_pread with a window that took a step or not
 * (cachetier_obj_read_begin_win). */
ssize_t cachetier_obj_pread_win(struct cachetier_obj *o, void *buf, size_t len, uint64_t off,
				uint64_t ahead, int queue);
/* Like cachetier_obj_pread, for a small read that says nothing of what
 * comes next (a spot check of a tar header): it starts no readahead, and a
 * miss fills only the units it reads (a read at an object's start would
 * otherwise get a whole readahead window). */
ssize_t cachetier_obj_pread_probe(struct cachetier_obj *o, void *buf, size_t len, uint64_t off);

/* Metadata blobs keyed by an arbitrary name: the only way other modules
 * keep files in the cache directory. The bytes are the caller's format
 * (with its own magic, version and checksum). get: *buf is malloc'd
 * (caller frees); -ENOENT when absent. put: atomic (temp file, fsync,
 * rename, fsync of the directory). */
int cachetier_meta_get(struct cachetier *ct, const char *name, void **buf, size_t *len);
int cachetier_meta_put(struct cachetier *ct, const char *name, const void *buf, size_t len);

/* A blob mapped read-only (PROT_READ, MAP_SHARED): its bytes live in the
 * page cache, shared with every process that maps it, and the kernel may
 * drop them under memory pressure (they are read again from the file), so
 * a big index costs no heap. *data (8-byte aligned) and *len stay valid
 * until cachetier_meta_unmap (which accepts NULL); one holder (an index
 * read in place frees it with the index).
 * A blob is never changed in place — a put renames a new file over the
 * name — so a mapping keeps the bytes it was made of while another thread
 * or process puts a new blob under that name or removes it (the inode
 * lives on while mapped); the caller validates them once (its format's
 * checksum). Nothing here opens a mapped blob's name again. A cache file changed in place (by
 * hand, by a script) is caught by cachetier_meta_changed below. Returns 0, -ENOENT (absent),
 * -EBADMSG (not a regular file, or larger than the blob bound), -ENOMEM (no mapping could be made,
 * e.g. the process's vm.max_map_count is reached: cachetier_meta_get still works) or another
 * negative errno. An empty blob gives *data NULL, *len 0. The handle is independent of ct (it may
 * outlive cachetier_close). */
struct cachetier_meta;
int cachetier_meta_map(struct cachetier *ct, const char *name, struct cachetier_meta **m,
		       const void **data, size_t *len);
void cachetier_meta_unmap(struct cachetier_meta *m);
/* A mapping's file changed in place (cachetier_watch.c): the inode of each
 * mapped blob is watched (inotify, IN_MODIFY) from before the caller
 * validates it. changed: 1 once the file was written, truncated or had a
 * hole punched since it was mapped (a change made before the call returns
 * is seen; the mapping then reads zeros, never the file's new bytes nor a
 * fault past a new end, and the caller drops what it built on it), else 0.
 * A read of the mapping past the end of a file cut meanwhile reads zeros
 * instead of faulting (a SIGBUS handler, installed at the first mapping,
 * cachetier_guard.c) and makes changed say 1 at once.
 * Thread-safe. A removal or a put of the name changes nothing.
 * watched: 1 when changed can tell (an empty blob, or one whose watch was
 * set up), 0 when no watch could be had (no inotify instance left,
 * fs.inotify.max_user_watches reached): a caller that needs to know reads
 * the blob into memory (cachetier_meta_get) instead. */
int cachetier_meta_changed(struct cachetier_meta *m);
int cachetier_meta_watched(const struct cachetier_meta *m);

/* Blob families: blobs of one kind that replace each other (e.g. one per
 * version of a dataset), so that the old ones can be found and removed
 * although blob files are named by hashes. family is the caller's name for
 * the group (e.g. a kind and a hash of what the blobs depend on); a blob of
 * a family is put (or written in pieces: cachetier_meta_create_in), read,
 * mapped and removed with the same family (its file is
 * meta/f-<hash of family>/<hash of name>; family NULL: the plain blobs
 * above, the same files as cachetier_meta_put/map).
 * sweep: removes every blob of family except keep (NULL: all of them, and
 * then the family's directory when nothing else is in it) and the partial
 * blobs that puts of processes no longer running left;
 * *removed counts the blobs this call unlinked (one another process removed
 * first is not counted here). A blob being put by a running process is
 * left alone until its rename; after that a sweep of another process may
 * remove it before its writer maps it (the writer gets -ENOENT). Mappings
 * of removed blobs keep their bytes (above). Meta blobs are not counted in
 * the directory's usage, so removing one changes no byte counts.
 * remove: 0, -ENOENT (no such blob) or another negative errno.
 * adopt: moves the plain blob name (one put without a family, as releases
 * before families saved it) into family, by a rename (a mapping of it keeps
 * its bytes): 0, -ENOENT (no such plain blob) or another negative errno. */
int cachetier_meta_put_in(struct cachetier *ct, const char *family, const char *name,
			  const void *buf, size_t len);
int cachetier_meta_get_in(struct cachetier *ct, const char *family, const char *name, void **buf,
			  size_t *len);
int cachetier_meta_map_in(struct cachetier *ct, const char *family, const char *name,
			  struct cachetier_meta **m, const void **data, size_t *len);
int cachetier_meta_remove(struct cachetier *ct, const char *family, const char *name);
int cachetier_meta_sweep(struct cachetier *ct, const char *family, const char *keep,
			 unsigned *removed);
int cachetier_meta_adopt(struct cachetier *ct, const char *family, const char *name);

/* A blob written in pieces, for one too big to assemble in memory: create
 * opens a new temp file (".tmp.PID.N") in the blobs' directory; pwrite
 * puts bytes anywhere in it (what is never written reads as zeros), pread
 * reads them back (a checksum over the whole); commit makes it the blob
 * 'name' as put does (fsync, rename, fsync of the directory) and abort
 * drops it. Both free w, which is for one thread. A temp file left by a
 * process killed before either is removed by the next cachetier_open on
 * the directory. Errors: negative errno (-ENOSPC: the disk is full).
 * create_in: the same for a blob of a family (below; its temp file then
 * lives in the family's directory and a sweep removes it if its process
 * dies). */
struct cachetier_meta_writer;
int cachetier_meta_create(struct cachetier *ct, const char *name, struct cachetier_meta_writer **w);
int cachetier_meta_create_in(struct cachetier *ct, const char *family, const char *name,
			     struct cachetier_meta_writer **w);
int cachetier_meta_pwrite(struct cachetier_meta_writer *w, const void *buf, size_t len,
			  uint64_t off);
int cachetier_meta_pread(struct cachetier_meta_writer *w, void *buf, size_t len, uint64_t off);
int cachetier_meta_commit(struct cachetier_meta_writer *w);
void cachetier_meta_abort(struct cachetier_meta_writer *w);

/* Scratch space in the cache directory (a build's sorted runs): a new
 * file without a name (O_TMPFILE; else created and unlinked at once), read
 * and written by the caller through the fd, which it closes; its blocks
 * are freed at close, also when the process is killed. fd or -errno. */
int cachetier_scratch_open(struct cachetier *ct);

/* A request starts on the calling thread (the core marks each FUSE
 * request): the change watch of cache files (cachetier_watch.c) then reads
 * its queued events at the first check of the request on this thread, not
 * at every check. A thread that never calls it reads them at every check. */
void cachetier_request_begin(void);
/* The calling thread's request may be given up by its sender (a FUSE
 * request the kernel interrupted: a signal, the sender killed): asked(arg)
 * says so, and is polled by the request's waits for the store on this
 * thread (a read's wait for its units' fill; fetch/'s wait for a staged
 * span): each ends with -EINTR within CACHETIER_STOP_TICK_MS of it. The
 * fill, shared with other readers, goes on; what the read pinned is
 * released. stop NULL: never (cachetier_request_begin clears it). Returns
 * the stop it replaces (for a caller to put back). stop must live until
 * replaced. */
struct cachetier_stop {
	int (*asked)(void *arg);
	void *arg;
};
const struct cachetier_stop *cachetier_request_stop(const struct cachetier_stop *stop);
/* Has the calling thread's request been given up (its stop asked)? Has
 * it a stop at all (its waits then look every CACHETIER_STOP_TICK_MS)? */
int cachetier_request_stopped(void);
int cachetier_request_stoppable(void);
/* *t: the next time a wait of a request with a stop looks at it,
 * CACHETIER_STOP_TICK_MS from now on CLOCK_REALTIME (disk_cond_timedwait's
 * clock). */
void cachetier_request_tick(struct timespec *t);
/* Wait on cond (lock held; released while waiting, held again on return)
 * until done(arg), asked with lock held before each wait: 0 once it says
 * so. A request with a stop looks at it every CACHETIER_STOP_TICK_MS
 * (cachetier_request_tick): -EINTR once given up. -ETIMEDOUT once *until
 * (CLOCK_REALTIME) passed, done(arg) not; until NULL: no bound (a request
 * without a stop then waits for done alone). The one wait of fs/'s index
 * builds, the unit store's reads and fetch/'s stage. */
struct disk_mutex;
int cachetier_request_wait(pthread_cond_t *cond, struct disk_mutex *lock,
			   const struct timespec *until, int (*done)(void *arg), void *arg);
/* How often a wait of a request with a stop looks at it: the most an
 * interrupted reader waits past its interrupt (libfuse reads FUSE_INTERRUPT
 * on another thread and only sets a flag; a tick costs a wake-up of a
 * waiting thread, no lock of the tier). */
#define CACHETIER_STOP_TICK_MS 100

#endif
