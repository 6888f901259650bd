/*
 * cachetier_i.h — private to cachetier/.
 *
 * Locks (mutexes of this process, ranked: DISK_LOCK_CT_* in disk_lock.h,
 * the daemon's whole order in docs/architecture.md "Lock order"; and the
 * OFD locks other processes see), in this order:
 *   1. ct_file.maplock — one per cached remote object; serialises writing
 *      and unlinking its map file (an eviction takes it only to unlink a
 *      map that names a unit it evicts; punches run without it). Taken
 *      with no other lock held.
 *   2. cachetier.lock — everything else: the object table, the file table,
 *      every unit state (written under it and its object's lock, 2b,
 *      read under either; a punch's end under 2b alone), pin, queue and
 *      counter (but ct->evicting, atomic: a punch's end lowers it without
 *      the lock; the puncher's queue, under its own leaf lock,
 *      cachetier_punch.h; the lock-free words of reads without it, ct_file.fp and fatime,
 *      plans' marks, ct_file.nu, and eviction's marks, ct_file.ev.dirty:
 *      cachetier_read.c, cachetier_plan.c, cachetier_evheap.c; and what
 *      2b lists). Held only for short
 *      in-memory work; never across backend I/O, file writes, unlinks or
 *      fsync (eviction drops it around its file operations).
 *   3. cachetier.fds.fd_lock — the bounded set of open local source fds
 *      (cachetier_obj.c). Taken with no other lock held; held for list work
 *      and close() of local files only, never across an open.
 *   2b. ct_file.lock — one per cached remote object, after cachetier.lock:
 *      its units' states (ct_file.ust: written under both locks, only
 *      through cachetier__unit_set, which asserts this one; read under
 *      either), its units' pins (ct_file.pins: a pin is taken under both locks and
 *      dropped under this one alone, by a read's end; atomic words, so
 *      cachetier.lock's holders may look without it where a pin seen that
 *      has just gone only spares a unit), its idle read locks (held, lazy)
 *      and cachetier.idle_units (atomic); the readers waiting for its units
 *      (ct_file.uwaits, ugen: a reader waits on its own condition variable
 *      with this lock, having dropped cachetier.lock) and its landed marks
 *      (ct_file.landed: set by the fill writer under this lock alone,
 *      cachetier__run_landed; cleared by a commit under both). Whatever
 *      decides by a pin or a held unit under cachetier.lock (eviction's
 *      take, the fill writer's unit_done, a damaged unit, a close) takes it
 *      inside; whatever wakes every waiting reader under cachetier.lock
 *      (cachetier__units_wake) takes each waiting object's. One object's at
 *      a time; held across no condition wait but its readers' (with no
 *      other lock held); never across a call into the backend; no other
 *      ranked lock is taken under it (its system calls: lock fcntls on the
 *      object's state file, its readers' wake-ups, and a fill queue's
 *      wake-up when the writer's publish queues a withdrawn prefetch unit
 *      again).
 * maplock may be held while taking lock; never the other way round. The
 * inotify watch's lock (cachetier_watch.c) is a leaf after them.
 *
 *   4. (other processes) the OFD locks of cachetier_share.c: taken with
 *      F_OFD_SETLK, never blocking while ct->lock is held (waits poll
 *      outside it), except LK_MAP, taken only under maplock.
 *
 * Threads: FUSE threads (any cachetier_* call), the fill workers, the flusher (cachetier_fill.c),
 * the fill writer (cachetier_write.c) and the puncher (cachetier_punch.c: its queue's lock, each
 * object's lock for its punches' ends, ct->lock only to wake a make_room that waits), created
 * in cachetier_open and joined in cachetier_close, and the store's I/O thread, which runs each
 * fill's sink and done callback: they copy bytes and push buffers to the fill writer, lock-free,
 * and take no lock and call no disk (CT_OFF_LOOP asserts it in debug builds). The fill writer
 * writes them, makes units readable as they land under their object's lock alone (their
 * readers commit them) and ends runs and fills (takes ct->lock once a batch that holds a run's
 * end, with no system call under it: lock fcntls before, readers' wake-ups after; never
 * maplock). Every call into
 * the backend (fills, the bypass read, stat) is made with no cachetier lock held, and the locks
 * of other processes taken under ct->lock never block. A batch fill's requests
 * (cachetier_batch.c) run on threads of their own, created and joined by cachetier_batch_fill.
 */
#ifndef CACHETIER_I_H
#define CACHETIER_I_H

#include <assert.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "cachetier.h"
#include "disk.h"
#include "disk_arena.h"
#include "disk_lock.h"
#include "cachetier_fillbuf.h"
#include "cachetier_direct.h" /* O_DIRECT fills (cachetier_direct.c) */
#include "cachetier_evheap.h"

/* Debug builds (the test suite's: assert on) check that code which calls
 * into the disk (a write, a punch, an fcntl, an fsync) or takes a lock a
 * reader or a fill may hold never runs on the store's I/O thread: the loop
 * only moves bytes (its fills' sinks hand buffers to the fill writer). */
#define CT_OFF_LOOP() assert(!backend_on_io_thread())

#include "cachetier_unit.h" /* a unit's states, the state file's locks, struct ct_file */

/* What a read pins (struct cachetier_pin's kind). */
enum ct_pin_kind {
	CT_PIN_FD,     /* o->fd as it is: nothing pinned */
	CT_PIN_DEC,    /* a decoded copy: o->dpins */
	CT_PIN_FILE,   /* the unit store: units [c0, c1) of o->file */
	CT_PIN_BYPASS, /* a read served past the cache: fd, a memfd */
	CT_PIN_LOCAL,  /* a local source's fd: o->fd_pins */
};

/* One read between cachetier_obj_read_begin and read_end (the handle
 * read_begin returns): malloc'd by read_begin, freed by read_end, used by
 * one thread at a time (the reader's), so no lock guards it. */
struct cachetier_pin {
	struct cachetier_obj *o;
	enum ct_pin_kind kind;
	uint32_t c0, c1; /* CT_PIN_FILE: the pinned units */
	int fast;	 /* CT_PIN_FILE: pinned without ct->lock (ct_file.fp) */
	int fd;		 /* CT_PIN_BYPASS: memfd holding the read's bytes from offset 0 */
};

/* Where a read into memory puts the store's bytes (cachetier__mem_sink,
 * cachetier_objread.c): buf holds [start, end), next is the offset of the
 * next byte due (bytes out of order or past end: -EIO). For the bypass read
 * and the weak ETag's probe. */
struct ct_mem_sink {
	unsigned char *buf;
	uint64_t start, next, end;
};
int cachetier__mem_sink(void *arg, uint64_t off, const void *buf, size_t len);

/* A decoded copy on disk, of any source (decoded/<name>): for LRU
 * eviction. Entries live until cachetier_close; one not on disk (evicted,
 * or not decoded yet) has bytes == 0. Protected by ct->lock. */
struct ct_dec {
	struct ct_dec *next; /* in ct->decs */
	int dirfd;	     /* decoded/ of its source (not owned) */
	char name[17];
	uint64_t bytes;
	int64_t atime_ns;
	unsigned evict_round;
};

struct ct_fill; /* a fill's request state (below) */

/* One fill in flight (ct->slots: cfg.fill_threads + cfg.small_fills of
 * them; free while busy is 0). A worker takes a free slot before fill_begin and
 * sends the request; the request's done callback ends the fill (fill_end)
 * and frees the slot, on the store's I/O thread (or in the worker for a
 * store that reads in the caller). 'f' ... 'small' are protected by
 * ct->lock; 'withdraw' is set under it and read by the fill's sink on the
 * I/O thread, 'got' written by that sink and read under ct->lock to pick
 * which prefetch fill to withdraw. 'fill' is the fill's own (see there). */
struct ct_slot {
	struct cachetier *ct;
	struct ct_file *f;	/* the units being filled; NULL: none */
	int busy;		/* taken by a worker (from before fill_begin, which may drop
				 * ct->lock, until fill_end): not free even while f is NULL */
	uint32_t c, n;		/* units [c, c + n) */
	int pf;			/* a prefetch (or warm) fill: enum ct_pf_kind; 0: none */
	int small;		/* a small planned range (the rules' small) */
	int direct;		/* its whole blocks written with O_DIRECT (--direct-fills) */
	atomic_int withdraw;	/* stop this prefetch fill: a reader's fill needs its connection */
	atomic_ullong got;	/* bytes of the chunk received so far */
	unsigned long long seq; /* start order (the youngest is withdrawn first on a tie) */
	struct ct_fill *fill;	/* allocated with the slot, freed at close */
};

/* A queued range prefetch of units [next, end) of f
 * (cachetier_obj_prefetch_range): ranges are looked at in the order they
 * were asked for, each from its cursor next; units are claimed only when a
 * worker takes them, so a reader reaching one first fills it on demand. */
struct ct_range {
	struct ct_file *f;
	uint32_t next, end;
	int evict; /* CACHETIER_PF_EVICT was asked */
	struct ct_range *link;
};

/* What a prefetch fill is (ct_slot.pf, queue_next): 0 none. */
enum ct_pf_kind {
	CT_PF_OBJ = 1,	     /* of an object's cursor (ct->pf) */
	CT_PF_RANGE_FIT = 2, /* of a range (ct->pr), PF_FIT */
	CT_PF_RANGE_EVICT = 3,
};

/* A queued fill of units [c, c + n) of f, all UNIT_QUEUED by it. */
struct ct_job {
	struct ct_file *f;
	uint32_t c, n;
	int ra; /* queued by readahead (counts in readahead_fills) */
	struct ct_job *next;
};

/* The fill writer's state (struct cachetier's wr): the sinks push, the
 * writer's thread takes (cachetier_write.c). */
struct ct_writer {
	/* fills' sinks (on the store's I/O thread) push buffers of bytes
	 * here, lock-free; the writer's thread writes them, checksums them
	 * and commits their units */
	_Atomic(struct fill_buf *) wq; /* pushed buffers, newest first */
	sem_t wsem;		       /* posted by a push onto an empty wq, and at stop */
	struct disk_mutex bpool_lock;  /* a leaf: the pool of free sink buffers */
	struct disk_arena bpool;       /* ... (cachetier__buf_get), under bpool_lock */
	struct ct_dio dio;	       /* prefetch fills' O_DIRECT writes (cachetier_direct.h) */
	atomic_int wstop;	       /* the writer leaves once wq is empty */
	atomic_uint wq_bufs;	       /* fills' buffers of bytes pushed, not yet written: at
					* FILL_WQ_MAX the sinks pause their transfers */
	atomic_int wq_wake;	   /* a sink paused: the writer calls backend_sink_ready at half */
	atomic_uint bufs_out;	   /* sink buffers out of the pool (FILL_BUFS_MAX) */
	atomic_uint bufs_peak;	   /* ... the most at once (tests) */
	atomic_int bufs_wake;	   /* a sink paused for one: a put under FILL_BUFS_RESUME wakes */
	atomic_ullong pool_wakes;  /* ... those wake-ups (backend_sink_ready; tests) */
	atomic_ullong buf_chunks;  /* the pool's chunks mapped, all told (fill_pool_maps) */
	atomic_int whold;	   /* tests: the writer takes nothing (cachetier_write_hold) */
	atomic_ullong fill_writes; /* the writer's pwrite(v) calls of fills' bytes */
	atomic_ullong fill_publishes; /* ... its passes making units readable (object's lock) */
	uint64_t wlocked_calls;	      /* ... their lock fcntls under ct->lock (fill_locked_calls) */
	atomic_ullong wlock_takes;    /* ... its takes of ct->lock (after each batch) */
	atomic_ullong wlock_busy;     /* ... those that found it held */
	pthread_t writer;
	int have_writer;
};

/* The bounded set of open local source fds (struct cachetier's fds;
 * cachetier_obj.c). */
struct ct_fdbound {
	/* Open fds of local source files (objects with 'local' set): at most
	 * fd_max; the least recently used unpinned one is closed when a
	 * new one would pass it, and reopened by the next read. */
	struct disk_mutex fd_lock;	       /* DISK_LOCK_CT_FD: protects the fields below */
	struct cachetier_obj *fd_mru, *fd_lru; /* open ones, most recent first */
	unsigned fd_open;		       /* open local source fds */
	unsigned fd_max;		       /* read-only after open */
	uint64_t fd_reopens;		       /* fds opened again after a close */
};

/* The cache tier's own files that carry a version (cachetier__note_version). */
enum ct_format { CT_FMT_MAP, CT_FMT_REC, CT_FMT_COUNT };

struct cachetier {
	struct backend *be;		/* not owned */
	struct cachetier_config cfg;	/* with defaults applied; read-only after open */
	uint32_t unit;			/* fill unit of random misses: chunk_bytes / upc */
	uint32_t upc;			/* units per chunk (cachetier_open) */
	char *dir;			/* CACHE_DIR/v1/<source-hash> */
	int dirfd;			/* O_DIRECTORY fd of dir */
	int metafd;			/* dir/meta */
	struct cachetier__watch *watch; /* of mapped blobs (cachetier_watch.c); NULL: none */
	int decfd;			/* dir/decoded */
	int datafd;			/* dir/data: objects' data files and maps */
	struct disk_mutex lock;		/* DISK_LOCK_CT: all below not marked otherwise */
	pthread_cond_t cond;		/* signalled when an object leaves OBJ_OPENING */
	pthread_cond_t unit_cond;	/* unit states, file opening/evicting changed */
	/* readers waiting for units (cachetier__units_wait) wait on their
	 * object's list (ct_file.uwaits, under its lock), each on a condition
	 * variable of its own: a fill wakes only those of the units it made
	 * valid or ended (cachetier_run.c). uw_files (ct->lock): the objects
	 * that may have such readers, which units_wake walks; unit_waiters:
	 * readers waiting now, unit_waiter_wakes: wake-ups sent to them,
	 * unit_waits_quiet: those that found none of the reader's units changed
	 * so, after which it waited on with no take of ct->lock (atomic:
	 * changed under their object's lock) */
	struct ct_file *uw_files;
	atomic_ullong unit_waiters, unit_waiter_wakes, unit_waits_quiet;
	pthread_cond_t room_cond; /* an eviction ended (ct->evicting went down) */
	/* make_room's threads about to look at ct->evicting or waiting on
	 * room_cond (under ct->lock; atomic): a punch's end, which lowers
	 * ct->evicting without ct->lock, takes it to wake room_cond only when
	 * one is there (cachetier_punch.c, punch_end) */
	atomic_uint room_waiters;
	pthread_cond_t work_cond;	/* fill queues got work, or stopping */
	pthread_cond_t flush_cond;	/* a map batch is due, or stopping */
	struct cachetier_obj **obj_tab; /* open objects: chains by hash of name */
	size_t obj_tab_size;		/* buckets, a power of two */
	size_t nobjs;			/* objects in obj_tab */
	struct ct_file *files;		/* every object of the unit store */
	struct ct_dec *decs;		/* every decoded copy (cachetier_evict.c) */
	struct cachetier_obj *dec_objs; /* open objects with a decoded copy */
	struct ct_job *dq, **dq_tail;	/* demand fills (readers wait) */
	struct ct_job *rq, **rq_tail;	/* readahead fills */
	struct ct_file *pf, **pf_tail;	/* objects being prefetched, in the order they are
					 * filled (a reader's object moves to the front) */
	struct ct_range *pr, **pr_tail; /* range prefetches, in the order asked: looked at
					 * before the objects of ct->pf */
	unsigned pf_running;		/* prefetch fills in flight (the rules' next limits them) */
	unsigned rd_queued;		/* jobs in dq and rq */
	unsigned rd_inflight;		/* demand and readahead fills in flight */
	unsigned ra_busy;		/* readahead jobs queued and fills in flight */
	unsigned pf_cap, pf_quiet;	/* the prefetch rules' state (cachetier_pf_counts) */
	const struct cachetier_policy *policy; /* the prefetch rules (NULL: none) */
	unsigned pf_withdrawing;     /* prefetch fills asked to stop that have not ended yet */
	struct ct_slot *slots;	     /* fills in flight: a slot each (nslots) */
	unsigned nslots;	     /* written only by units_start/units_stop */
	unsigned small_inflight;     /* fills in flight of small planned ranges (ct_slot.small) */
	unsigned long long fill_seq; /* fills started (ct_slot.seq) */
	pthread_t *workers;	     /* fill threads; the array is written only by open/close */
	unsigned nworkers;
	pthread_t flusher; /* writes the batched maps; off the fill path */
	int have_flusher;
	struct ct_writer wr;	/* the fill writer (cachetier_write.c) */
	atomic_ullong wk_busy;	/* the fill workers' takes of ct->lock that found it held */
	struct ct_puncher *pun; /* evictions' punches off the fill workers (cachetier_punch.c) */
	int stopping;
	unsigned work_idle, work_woken, wake_hold, wake_held; /* cachetier__work_wake */
	uint64_t work_wakes;
	unsigned evict_round;
	struct ct_evorder ev; /* eviction's order (cachetier_evheap.h) */
	/* the plan position now (cachetier_plan_now; read without the lock) */
	_Atomic uint32_t plan_now;
	atomic_int plan_marked; /* a plan marked units (cachetier_plan_mark) */
	int v1fd;		/* CACHE_DIR/v1 */
	int usagefd;		/* CACHE_DIR/v1/usage (cachetier_share.c) */
	unsigned char *usage;	/* mapped shared: the directory's usage */
	int *srcfds;		/* other sources' data/, decoded/ dir pairs */
	unsigned nsrcfds;
	int64_t rescan_ns; /* last rescan for objects of other processes */
	/* reads ended and fills done (atomic: a read's end moves it under its
	 * file's lock alone): when it moved since the flusher last found the
	 * cache over its limit, something may have become evictable
	 * (flush_over_limit; room_gen_tried under ct->lock) */
	atomic_ullong room_gen;
	uint64_t room_gen_tried;
	/* bytes of valid units this process knows of (stats); atomic: a
	 * commit of landed units adds to it under their object's lock alone */
	atomic_ullong used;
	/* The room's accounts (cachetier_share.c, "the byte accounts"): every
	 * byte of a fill is in exactly one of the directory's usage and
	 * reserved at every moment, and every byte an eviction took is in
	 * exactly one of usage and evicting until its punch ends: a byte moves
	 * between two of them in one step under acct_lock (a leaf,
	 * DISK_LOCK_CT_ACCT), and a sum of them is read under it
	 * (cachetier__acct_get); a change of one alone is an atomic add.
	 * reserved: bytes of this process's fills in flight not landed or
	 * committed yet (a fill's unit leaves it when it lands,
	 * cachetier__run_landed, or is committed, adopted or aborted) */
	struct disk_mutex acct_lock;
	atomic_ullong reserved;
	/* Of reserved, the bytes a fill wrote already (on the disk: statvfs
	 * counts them used) as two running totals, so a reader that reads the
	 * first before a statvfs and the second after it takes off no byte
	 * written after the statvfs: wr_bytes, bytes the fill writer wrote
	 * (added after each write); wr_gone, those of them out of reserved
	 * again (added just before their units land, so a look between the
	 * two counts them twice, never none; or once their failed run punched
	 * them). Each an atomic add of the fill writer's. wr_bytes - wr_gone:
	 * written, not landed (cachetier__disk_free, cachetier_room: counted
	 * once, on the disk) */
	atomic_ullong wr_bytes, wr_gone;
	/* bytes being punched out, still on disk: raised by an eviction
	 * under ct->lock, lowered by its punch's end without it (atomic) */
	atomic_ullong evicting;
	uint64_t hits, misses, fills_inflight, fill_errors;
	/* bytes fetched, fills' requests: atomic (a commit of landed units
	 * counts them under their object's lock alone) */
	atomic_ullong bytes_fetched, fills;
	atomic_ullong hits_fast; /* hits served without ct->lock (cachetier_read.c) */
	/* reads' own takes of ct->lock, their data file checks (fstat and
	 * SEEK_HOLE): cachetier_stats.read_locks, read_file_checks */
	atomic_ullong read_locks, read_file_checks;
	uint64_t miss_wait_ns; /* the misses' time waiting for their units, summed */
	uint64_t readahead_fills, evictions, evicted_bytes;
	uint64_t queued_waits;	    /* cachetier__queue_wait calls (cachetier_stats) */
	uint64_t evicting_waits;    /* reads that waited for units being punched */
	uint64_t unfit_bytes;	    /* prefetch fills skipped: no room without evicting */
	uint64_t decoded_evictions; /* decoded copies evicted */
	/* CPU time (CLOCK_THREAD_CPUTIME_ID) of make_room and of map writes
	 * (cachetier_stats; the eviction bench, tests/bench/evict_bench.c) */
	atomic_ullong evict_cpu_ns, flush_cpu_ns;
	atomic_ullong map_writes, map_write_errors; /* cachetier_stats' */
	atomic_int map_fail_said; /* the first failed map write said (cachetier_map.c) */
	atomic_ullong punches;	  /* fallocate punches of evictions (cachetier_stats) */
	uint64_t peer_units;	  /* units served that another process filled */
	/* make_room's calls that waited for other threads' evictions, those waits, its time */
	uint64_t room_waits, room_wait_ns, room_make_ns;
	/* the free-space check (cachetier__disk_avail): bytes made room for
	 * since open, the last statvfs's free bytes, room_bytes then and
	 * wr_bytes just before it (free_wrote), its calls (room_statfs) */
	uint64_t room_bytes, free_avail, free_base, free_wrote, free_calls;
	int free_known;
	/* idle read locks (cachetier_read.c, "release on demand"): fcntl calls
	 * of the read path on unit locks (taken, dropped), release requests
	 * this process posted, units it released on another's request, and
	 * the directory's request counter (U_WANT) last acted on; the read
	 * path's counters and idle_units are atomic: a read's end changes
	 * them under its file's lock alone (cachetier_read.c) */
	atomic_ullong unit_read_locks, lock_releases;
	uint64_t lock_requests;
	uint32_t want_seen;
	_Atomic uint32_t idle_units; /* units held idle now (held, no pin), at most CT_IDLE_MAX */
	uint64_t weak_probes;	     /* anchors fetched again for weak ETags (cachetier_read.c) */
	uint64_t weak_changed;	     /* objects found changed under a weak ETag */
	uint64_t peer_waits;	     /* fills that waited for another process's fill */
	uint64_t pf_withdrawn;	     /* prefetch fills stopped to free a connection for a reader */
	/* batch reads (cachetier_batch*.c): requests running now (each wakes
	 * unit_cond at its end), whether one was answered (later calls return
	 * without waiting for theirs), totals (refused: the store refused it) */
	unsigned batch_running;
	unsigned batch_windows; /* the stage's GetBatch windows' threads (cachetier_batchm.c) */
	int batch_answered;
	struct cachetier_batch_result batch;
	atomic_ullong decoded_used; /* bytes of decoded copies (evicted too: evict_dec) */
	/* who is told each fill's timing (cachetier_set_fill_timing: the fetch
	 * scheduler's link measurement), under ct->lock */
	cachetier_fill_timing_fn timing_fn;
	void *timing_ctx;
	atomic_ullong decoded_streams, decoded_bytes, decoded_reused, meta_reads, meta_writes;
	atomic_ullong batch_threads; /* threads started for batch reads (cachetier__batch_thread) */
	atomic_int version_noted[CT_FMT_COUNT];	  /* cachetier__note_version logged it */
	atomic_ullong units_corrupt;		  /* cachetier__note_corrupt */
	atomic_int corrupt_noted;		  /* ... logged it */
	atomic_ullong bypass_reads, bypass_bytes; /* reads served past the cache (no room) */
	atomic_int bypass_noted;
	atomic_int watch_fail_noted; /* a data file got no inotify watch: logged */
	atomic_int watch_own_noted;  /* data files watched with inotify, not fanotify: logged */
	atomic_ullong units_checked; /* cachetier__units_check: units read back and CRC'd */
	atomic_ullong watch_own;     /* live data files with a fanotify record */
	struct ct_fdbound fds;	     /* the bounded set of open local source fds */
};

enum obj_state { OBJ_OPENING, OBJ_READY, OBJ_FAILED };

struct cachetier_obj {
	struct cachetier *ct;
	struct cachetier_obj *next; /* chain in ct->obj_tab, protected by ct->lock */
	char *name;		    /* "<codec>:<tag>:<key>", the table key (obj_name) */
	const char *key;	    /* the key, inside name */
	int refs;		    /* protected by ct->lock */
	enum obj_state state;	    /* protected by ct->lock; waiters use ct->cond */
	int err;		    /* OBJ_FAILED: negative errno */
	int fd;			    /* local source or decoded copy; -1 for the unit store
				     * (local sources: -1 while closed by the fd bound) */
	/* Local source files only; protected by ct->fds.fd_lock. The fd stays open
	 * while pinned (between read_begin and read_end); identity is what the
	 * first open saw: a reopened file must match it, else -ESTALE. */
	int local;
	unsigned fd_pins;
	struct cachetier_obj *fd_prev, *fd_next; /* in ct->fds.fd_mru list while fd >= 0 */
	dev_t dev;
	ino_t ino;
	int64_t mtime_ns;
	struct ct_file *file; /* remote raw objects: the unit store entry */
	uint64_t size;	      /* readable bytes */
	int damage;	      /* 0 or negative errno found while decoding */
	uint64_t damage_off;  /* compressed offset of the damage */
	/* decoded copies (evictable; decoded again on demand), protected by
	 * ct->lock: */
	struct ct_dec *dec;	     /* its entry, or NULL */
	struct cachetier_obj *dnext; /* in ct->dec_objs */
	enum cachetier_codec codec;
	struct backend_objinfo info; /* info.key points into 'name' */
	atomic_int collided;	     /* the store's bytes changed under its weak ETag
				      * (cachetier_read.c): reads give ESTALE, opens of its
				      * name make a new object */
	unsigned dpins;		     /* reads between read_begin and read_end */
	int redecoding;		     /* a thread decodes it again (others wait on ct->cond) */
	int dbad;		     /* its copy failed a unit's CRC32C: reads fail with EIO
				      * until the copy is closed and decoded again; protected
				      * by ct->lock */
	/* The decoded copy's unit checks (cachetier__decode sets them with
	 * o->fd, while no read uses the copy: the opener, or obj_redecode
	 * with o->fd < 0; freed by the next decode or obj_free). A reader
	 * reads them without the lock between read_begin and read_end (its
	 * pin keeps o->fd, and so them, from changing). */
	uint32_t *dcrc;		   /* CRC32C per CT_DEC_UNIT bytes of the copy, from its
				    * record or its decode here; NULL: none (the copy is
				    * served unchecked) */
	_Atomic uint8_t *dchecked; /* per unit: 1 once its CRC32C matched here */
	uint64_t dunits;	   /* units of dcrc and dchecked */
	/* the decoded copy's inotify watch (cachetier_objread.c, obj_dec_watch):
	 * a change of the file clears dchecked; protected by ct->lock */
	struct ct_watch_rec *dwrec; /* NULL: not watched (yet) */
	int dwfd;		    /* the fd it watches the inode of (-1: none) */
	atomic_int dwfail;	    /* no watch to be had: every read checks its units */
	uint64_t dwevents;	    /* the record's change count when dchecked was cleared */
	atomic_uint dwgen;	    /* moved at each clear: a check begun before does not mark */
};

/* A file of kind 'kind' named 'name' is of another version (-EPROTO): the
 * caller drops it and builds it again. Logged through the backend's log,
 * once per kind and process (an upgrade finds one in every object). */
void cachetier__note_version(struct cachetier *ct, enum ct_format kind, const char *name);
/* n units of cache file 'file' (relative to the source's cache
 * directory) holding object 'key' were found damaged (a failed CRC32C, a
 * data file shorter than its map or than a valid unit): counted in
 * units_corrupt; the first is logged through the backend's log (once per
 * process), saying 'why' and what happens ('then'). Any thread, any lock
 * held. */
/* Bytes [*next, end) of version etag (of size bytes) of key into sink (backend_read_version_cb),
 * asked for again from where an answer stopped: *next is the sink's own
 * position, which it moves as bytes land. 0; -EIO when the object ends
 * before end; or the store's error. Blocks (the store's retry budget bounds
 * each request); no lock held. Fills and the full-disk bypass. */
int cachetier__read_version(struct cachetier *ct, const char *key, const char *etag, uint64_t size,
			    const uint64_t *next, uint64_t end, backend_sink_cb sink, void *arg);
void cachetier__note_corrupt(struct cachetier *ct, const char *file, const char *key, uint32_t n,
			     const char *why, const char *then);
/* 64-bit FNV-1a (disk_fnv64), rendered as 16 hex digits into out[17]. */
void cachetier__hash_hex(const void *data, size_t len, char out[17]);

/* Has process pid exited? A zombie has: in a container whose init does
 * not reap, a killed daemon stays one for good. cachetier_evict.c. */

/* Read all of dirfd/name (a regular file of min..max bytes, else
 * -EBADMSG) into a malloc'ed *buf. cachetier_meta.c. */
int cachetier__read_file(int dirfd, const char *name, uint64_t min, uint64_t max,
			 unsigned char **buf, size_t *len);

/* Decode object 'info' with codec into a new file in ct->decfd named
 * 'name'; fills o->fd, *size (the decoded size: o->size is read without
 * the lock, so a decode again leaves it to its caller to compare), o->damage,
 * o->damage_off. Reuses a complete
 * earlier decode when its record matches: then also o->dcrc, o->dchecked
 * and o->dunits (its units are checked as they are first read; NULL for a
 * copy this call wrote). o's fd is closed and no read uses o. -EFBIG /
 * -ENOSPC: refused whole (cachetier_decode.c). */
int cachetier__decode(struct cachetier *ct, const struct backend_objinfo *info,
		      enum cachetier_codec codec, const char *name, struct cachetier_obj *o,
		      uint64_t *size);

/* A decoded copy's unit: what one CRC32C of its decode record covers
 * (the last unit: what is left). A record of another unit size is not
 * used (decoded again). */
#define CT_DEC_UNIT (64u << 10)

/* Remove decoded copy 'name' and its record (record first, so no process
 * reuses the copy after this); fd >= 0: only when the name is still the
 * file open as fd (not another decode's copy renamed over it since).
 * Returns 1 when this call's unlink of the copy succeeded (its bytes left
 * the usage), else 0. A process that has the copy open keeps reading the
 * unlinked file until it closes it. No lock held; file I/O. */
int cachetier__decode_drop(struct cachetier *ct, const char *name, int fd);

/* The refusal recorded for decoded copy 'name' (cachetier_obj_refusal). */
int cachetier__decode_refusal(struct cachetier *ct, const char *name, struct cachetier_refusal *r);

/* cachetier_obj.c — the object table and the local source fds. */
/* Release an object that left the table. */
void cachetier__obj_free(struct cachetier *ct, struct cachetier_obj *o);
/* o's fd, reopened when the bound had closed it, pinned until local_unpin. */
int cachetier__local_pin(struct cachetier_obj *o, int *fd);
void cachetier__local_unpin(struct cachetier_obj *o);

/* The unit store: cachetier_map.c (files and maps), cachetier_queue.c
 * (fill queues, prefetch policy), cachetier_fill.c (fill workers, the
 * flusher), cachetier_read.c (reads, readahead). */
int cachetier__units_start(struct cachetier *ct); /* fill workers; after the scan */
void cachetier__units_stop(struct cachetier *ct); /* join workers, flush maps, free files */
int cachetier__file_open(struct cachetier *ct, const struct backend_objinfo *info,
			 struct ct_file **out);
/* Pin units [*c0, *c1) of f, those of [off, off + len), present and
 * held until file_read_end with the same units (any thread). probe:
 * cachetier_obj_pread_probe's read (no readahead, units only). ahead:
 * the caller's window past the read; queue: its chunks are to be queued
 * (the window took a step; 0: an earlier read queued them). *fast: 1 when
 * the units were pinned without ct->lock (given back to file_read_end). */
int cachetier__file_read_begin(struct cachetier *ct, struct ct_file *f, uint64_t off, uint64_t len,
			       int probe, uint64_t ahead, int queue, uint32_t *c0, uint32_t *c1,
			       int *fast);
void cachetier__file_read_end(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1,
			      int fast);
/* Most a reader waits for a change of unit states (unit_cond) before it
 * looks at its units again: a change whose wake-up is missed costs that
 * long, never a hung read. */
#define UNITS_WAIT_BOUND_S 1
/* Unit c of f (UNIT_VALID) is damaged: counted, made empty here and in
 * the state file (cachetier_read.c). ct->lock held. */
void cachetier__unit_corrupt(struct cachetier *ct, struct ct_file *f, uint32_t c);
/* Before a read serves units [c0, c1) of f (valid, pinned, read-locked):
 * those it does not trust checked (cachetier_check.c); how many failed or
 * are no longer valid, or -errno. ct->lock held, dropped around file I/O. */
int cachetier__units_check(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1);
/* Weak validators (cachetier_weak.c): 1 when etag does not pin the bytes
 * of an object of size bytes; weak_check before units [c0, c1) of f are
 * served: 0, -ESTALE (the store's bytes changed under the ETag) or the
 * store's error; ct->lock held, dropped while the anchor is fetched. */
int cachetier__etag_weak(const char *etag, uint64_t size);
int cachetier__weak_check(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1);
/* Prefetch units [c0, c1) of f as its object's cursor (cachetier_obj_prefetch). */
int cachetier__file_prefetch(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1,
			     int mode);
/* Queue units [c0, c1) of f as a range (cachetier_obj_prefetch_range):
 * 0 or -ENOMEM. */
int cachetier__file_prefetch_range(struct cachetier *ct, struct ct_file *f, uint32_t c0,
				   uint32_t c1, int mode);
int cachetier__file_prefetch_state(struct cachetier *ct, struct ct_file *f, uint64_t *unfit);
void cachetier__file_flush(struct cachetier *ct, struct ct_file *f);
/* Map format shared with the scan: parse and check buf; on success fill
 * the fields and point *bitmap into buf. Identity is checked by the caller. */
struct ct_map {
	uint32_t unit_bytes, nunits;
	uint64_t size;
	const char *key; /* not NUL-terminated */
	size_t keylen;
	const char *etag;
	size_t etaglen;
	int64_t mtime; /* a version without an ETag's (else 0) */
	const unsigned char *bitmap;
	const unsigned char *crcs; /* u32 CRC32C per unit (valid units' only mean anything) */
};
int cachetier__map_parse(const unsigned char *buf, size_t len, struct ct_map *m);
int cachetier__map_read(int dirfd, const char *name, unsigned char **buf, size_t *len);
uint64_t cachetier__map_bytes(const struct ct_map *m); /* bytes of the valid units */
/* cachetier_map.c: free f: its fds and memory (its files on disk stay; no
 * read may pin it). */
void cachetier__file_free(struct ct_file *f);
/* cachetier_queue.c — the queues; all with ct->lock held. */
/* Queue one fill of units [c, c + n) of f, all UNIT_EMPTY (their states
 * QUEUED under f->lock: taken; _flocked: the caller holds it). */
int cachetier__queue_push(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n, int ra);
int cachetier__queue_push_flocked(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n,
				  int ra);
/* Queue one fill of the UNIT_EMPTY units around unit c within [lo, hi). */
int cachetier__queue_run(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t lo,
			 uint32_t hi, int ra);
/* The last unit a fill of kind around unit c of f would take, as the rules
 * bound it (c past the end: the last unit's). */
uint32_t cachetier__queue_last(const struct cachetier *ct, const struct ct_file *f,
			       enum cachetier_fill_kind kind, uint32_t c);
/* A reader waits for unit c of f, UNIT_QUEUED: its fill moves to the
 * demand queue if the rules say (promote; without rules it stays). */
void cachetier__queue_wait(struct cachetier *ct, struct ct_file *f, uint32_t c);
/* A reader reads f: its prefetch cursor, if one runs, goes to the front
 * of the cursors if the rules say (cursor_front; without rules it stays). */
void cachetier__queue_read(struct cachetier *ct, struct ct_file *f);
/* The readahead window of a decoder's reads of its raw object, as the
 * rules say (decode_ahead; without rules 0). Takes ct->lock. */
uint64_t cachetier__decode_ahead(struct cachetier *ct);
/* Request g of a batch fill's nreq got no room: 1 when the call ends
 * there, as the rules say (batch_unfit; without rules 0). Takes ct->lock. */
int cachetier__batch_unfit(struct cachetier *ct, size_t g, size_t nreq);
/* The next fill, from the queue the rules pick (the rules' next). */
/* A reader's miss of f (not a probe; ahead: its readahead window): fill
 * the missed unit's whole chunk (1) or only the units read (0), as the
 * rules say. ct->lock held. */
int cachetier__miss_whole(struct cachetier *ct, const struct ct_file *f, uint64_t ahead);
/* A prefetch fill ended with all its bytes: the rules' slow start. ct->lock held. */
void cachetier__pf_ended(struct cachetier *ct);
int cachetier__queue_next(struct cachetier *ct, struct ct_file **f, uint32_t *c, uint32_t *n,
			  int *ra, int *pf);
/* Is a fill of units [c, c + n) of f (pf: enum ct_pf_kind) a small
 * planned range (the rules' small; without rules none is)? */
int cachetier__fill_small(const struct cachetier *ct, const struct ct_file *f, uint32_t c,
			  uint32_t n, int pf);
/* The prefetch list ct->pf: take f off it, or put it at the back (front: 1). */
void cachetier__pf_unlink(struct cachetier *ct, struct ct_file *f);
void cachetier__pf_push(struct cachetier *ct, struct ct_file *f, int front);
/* The prefetch ranges ct->pr: queue units [c0, c1) of f; drop the front one. */
int cachetier__range_push(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1,
			  int evict, int front);
void cachetier__range_pop(struct cachetier *ct);

/* cachetier_map.c, shared with the fills (cachetier_fill.c, _batch.c); all
 * with ct->lock held. */
/* Is f's map due to be written: with cfg.durable_delay_s 0, a batch of
 * units or its timer; else its earliest unnamed fill is that old? */
int cachetier__flush_due(struct cachetier *ct, struct ct_file *f, int64_t now);
/* Unit u of f was filled by this process at now: the map is to name it
 * once it is cfg.durable_delay_s old. */
void cachetier__map_dirty(struct cachetier *ct, struct ct_file *f, uint32_t u, int64_t now);
/* cachetier_write.c: the fill writer's thread (cachetier__units_start
 * creates it) and its queue: wq_push hands b to it, lock-free, never waits
 * (any thread, the store's I/O thread too). cachetier_fill.c:
 * fill_next sends the request of the slot's next run, or ends the fill;
 * no lock held (the worker, or the fill writer after the run before). */
void *cachetier__writer_main(void *arg);
void cachetier__wq_push(struct cachetier *ct, struct fill_buf *b);
void cachetier__work_wake(struct cachetier *ct); /* jobs queued: a worker if needed (lock held) */
/* a (if not NULL), then b, in one push: one wake-up of the writer at most */
void cachetier__wq_push2(struct cachetier *ct, struct fill_buf *a, struct fill_buf *b);
/* a and b (each if not NULL), then c, in one push */
void cachetier__wq_push3(struct cachetier *ct, struct fill_buf *a, struct fill_buf *b,
			 struct fill_buf *c);
void cachetier__fill_next(struct ct_slot *slot);
/* The fill writer, ct->lock held: fill_skip gives the units from i on that
 * the slot does not fetch their outcome (cachetier__fill_next's scan) and
 * returns the next it fetches (slot->n: none); fill_end_locked ends the
 * fill (the slot is free once ct->lock is dropped). */
uint32_t cachetier__fill_skip(struct ct_slot *slot, uint32_t i);
void cachetier__fill_end_locked(struct ct_slot *slot);

/* cachetier_write.c: the fill writer for a sink of the store's I/O thread
 * other than a fill's (the batch fill's): write_push copies len bytes at
 * object offset off of f and hands them to the writer, which adds them to
 * the CRC32C of their units (crc[k]: unit c0 + k) and writes them to f's
 * data file (the first error into *werr; later writes are then dropped),
 * each write's bytes added to *wrote and to ct->wr_bytes once on the disk
 * (the caller adds them to ct->wr_gone as they leave reserved: landed or
 * punched): 0 or -ENOMEM; lock-free, never waits. write_wait (not on the
 * I/O thread): returns once every write j pushed before it is done. */
struct ct_wjob {
	sem_t done;
};
int cachetier__write_push(struct cachetier *ct, struct ct_wjob *j, struct ct_file *f, uint32_t c0,
			  uint32_t *crc, int *werr, uint64_t *wrote, uint64_t off, const void *buf,
			  size_t len);
void cachetier__write_wait(struct cachetier *ct, struct ct_wjob *j);

/* cachetier_batch.c: wait until no batch fill request runs (cachetier_close,
 * before the files go; after cachetier_cancel and backend_cancel they end
 * at once). No lock held. */
void cachetier__batch_stop(struct cachetier *ct);

/* cachetier_queue.c: the most bytes units filled ahead of their readers
 * may hold once the cache is full, as the rules say (ahead_share; without
 * rules the whole cache): a prefetch fill evicts only within it
 * (cachetier__make_room_near; cachetier_held_get tells planners). ct->lock
 * held. */
uint64_t cachetier__ahead_share(const struct cachetier *ct);

/* cachetier_span.c: a fill's request of bytes took ttfb_ns to its first
 * byte and xfer_ns from there to its last (the observer's call). The fill
 * writer, ct->lock held. */
void cachetier__link_note(struct cachetier *ct, int64_t ttfb_ns, uint64_t bytes, int64_t xfer_ns);
/* CLOCK_MONOTONIC in ns (the fills' timings). */
int64_t cachetier__mono_ns(void);

/* cachetier_share.c — state shared between processes. */
/* Lock byte off of fd (F_RDLCK, F_WRLCK, F_UNLCK); wait 1: poll until it
 * is granted; wait > 1: poll for at most that many ms; else -EAGAIN when
 * another holder conflicts. */
int cachetier__ofd_lock(int fd, short type, off_t off, int wait);
/* The same for bytes [off, off + n): one fcntl for a run of units (a
 * conflict anywhere in it fails the whole run, nothing taken). */
int cachetier__ofd_lock_n(int fd, short type, off_t off, off_t n, int wait);
/* Sleep *sleep_us, then double it up to max_us (lock polls). */
void cachetier__backoff(unsigned *sleep_us, unsigned max_us);
/* Wait on cond (lock held) for at most secs seconds: the caller looks
 * again at what it waits for, so a missed wake-up costs that long, never
 * a hung thread. */
void cachetier__cond_wait_s(pthread_cond_t *cond, struct disk_mutex *lock, unsigned secs);
int cachetier__usage_open(struct cachetier *ct, int v1fd, int *alone);
int cachetier__usage_ready(struct cachetier *ct, uint64_t used);
void cachetier__usage_close(struct cachetier *ct);
void cachetier__usage_add(struct cachetier *ct, int64_t delta);
uint64_t cachetier__usage_get(const struct cachetier *ct);
/* The room's accounts (struct cachetier's reserved, "every byte in exactly
 * one"): acct_move: unreserve bytes of fills leave reserved and usage
 * bytes join the directory's usage, in one step (a unit landed or
 * committed: its bytes; usage is 0 for a unit the state file had valid
 * already). acct_evict: freed bytes leave the usage for evicting in one
 * step. acct_get: the three read in one step (usage: the directory's,
 * other processes' changes in it at any moment). Any lock but one ranked
 * at or above DISK_LOCK_CT_ACCT held (not on the I/O thread). */
struct ct_room {
	uint64_t usage, reserved, evicting;
	uint64_t wr_gone; /* struct cachetier's, read in the same step */
};
void cachetier__acct_move(struct cachetier *ct, uint64_t unreserve, uint64_t usage);
void cachetier__acct_evict(struct cachetier *ct, uint64_t freed);
void cachetier__acct_get(struct cachetier *ct, struct ct_room *r);
/* Of r's reserved bytes, those not on the disk at a statvfs made after
 * wrote (ct->wr_bytes) was read and before r was: reserved less the bytes
 * written by then and not landed since (wrote - r->wr_gone; fewer when
 * some written after landed since: never more than were on the disk). */
static inline uint64_t cachetier__resv_unwritten(const struct ct_room *r, uint64_t wrote)
{
	uint64_t w = wrote > r->wr_gone ? wrote - r->wr_gone : 0;

	return r->reserved > w ? r->reserved - w : 0;
}
uint64_t cachetier__usage_epoch(const struct cachetier *ct);
/* f->hash, dirfd, unit_bytes, nunits and size set. Opens and maps data/<hash>.st
 * with the presence lock; *alone: initialise, then call st_ready. */
int cachetier__st_open(struct ct_file *f, int create, int *alone);
/* Alone: bytes the old state file counted in 'epoch' (UINT64_MAX: none). */
uint64_t cachetier__st_old_bytes(const struct ct_file *f, uint64_t epoch);
/* bitmap, crcs: a map's (NULL: nothing valid); crcs is a u32 CRC32C per unit. */
int cachetier__st_ready(struct ct_file *f, const unsigned char *bitmap, const unsigned char *crcs,
			uint64_t epoch);
void cachetier__st_close(struct ct_file *f);
/* Does the state file say unit c holds bytes (any process)? Inline: eviction
 * asks it of every unit of every live object at each eviction. */
static inline int cachetier__st_get(const struct ct_file *f, uint32_t c)
{
	return __atomic_load_n(f->st + ST_HDR + c, __ATOMIC_ACQUIRE) != 0;
}
int cachetier__st_set(struct ct_file *f, uint32_t c, int valid); /* returns the old value */
/* A valid unit's state byte is ST_VALID, or ST_NAMED once a map may name it
 * (a map loaded at open, or map_encode under LK_MAP): an eviction that
 * clears only ST_VALID bytes leaves every map as it is (no map names
 * them, none can: map_encode names a unit by a compare-and-swap from
 * ST_VALID), one that clears an ST_NAMED byte unlinks the map first. */
#define ST_VALID 1
#define ST_NAMED 2
/* Clear unit c's byte; returns the old one (0, ST_VALID, ST_NAMED). */
int cachetier__st_clear(struct ct_file *f, uint32_t c);
/* Unit c as named by a map about to be written: 1 when its byte is
 * ST_NAMED now (set from ST_VALID here, or already), 0 when it holds no
 * bytes. */
int cachetier__st_name(struct ct_file *f, uint32_t c);
/* The CRC32C of unit c's bytes: set by its fill before the unit's state
 * byte says valid (st_set's exchange publishes it), read by whoever checks it. */
uint32_t cachetier__st_crc(const struct ct_file *f, uint32_t c);
void cachetier__st_set_crc(struct ct_file *f, uint32_t c, uint32_t crc);
void cachetier__st_touch(struct ct_file *f, int64_t now_ns);
/* Release requests (README "Sharing one cache directory"): an eviction
 * whose write lock on a unit of f failed posts one (want_post: f's state
 * file's counter S_WANT and the directory's U_WANT, both moved by one);
 * holders read them (st_want, want_dir) and drop their idle read locks.
 * Atomics in the shared mappings; no lock. */
void cachetier__want_post(struct cachetier *ct, struct ct_file *f);
uint32_t cachetier__st_want(const struct ct_file *f);
uint32_t cachetier__want_dir(const struct cachetier *ct);
int64_t cachetier__st_atime(const struct ct_file *f);

/* Takes of ct->lock (of any tier) through cachetier__lock by this thread
 * (cachetier_lock_takes; cachetier_read.c). */
extern _Thread_local uint64_t cachetier__lock_takes;
/* ... those that found it held by another thread (cachetier_lock_busy) */
extern _Thread_local uint64_t cachetier__lock_busy;

/* ct->lock, with CT_OFF_LOOP's check. */
static inline void cachetier__lock(struct cachetier *ct)
{
	CT_OFF_LOOP();
	cachetier__lock_takes++;
	cachetier__lock_busy += (uint64_t)disk_mutex_lock(&ct->lock);
}

static inline uint64_t cachetier__unit_len(const struct ct_file *f, uint32_t c)
{
	uint64_t off = (uint64_t)c * f->unit_bytes;

	return f->size - off < f->unit_bytes ? f->size - off : f->unit_bytes;
}

static inline uint64_t cachetier__unit_off(const struct ct_file *f, uint32_t c)
{
	return (uint64_t)c * f->unit_bytes;
}

/* Bytes of units [c, c + n) of f. */
static inline uint64_t cachetier__run_len(const struct ct_file *f, uint32_t c, uint32_t n)
{
	return (uint64_t)(n - 1) * f->unit_bytes + cachetier__unit_len(f, c + n - 1);
}

static inline void cachetier__unit_unlock(struct ct_file *f, uint32_t c)
{
	cachetier__ofd_lock(f->stfd, F_UNLCK, LK_UNIT(c), 0);
}

/* Unit lock changes gathered into runs: adjacent units of one fd and
 * change go out as one fcntl (a read's units, a fill's, an eviction's
 * run: one lock call each, not one a unit). Only for changes that cannot
 * fail (F_UNLCK; F_RDLCK over this description's own F_WRLCK). calls,
 * when set, counts the fcntl calls the run makes (a read's: the tier's
 * unit_read_locks), here where they are made, not by the run's users. */
struct ct_lkrun {
	int fd;
	short type;
	uint32_t c, n;	 /* units [c, c + n) */
	uint64_t *calls; /* NULL: not counted */
};

static inline void cachetier__lkrun_flush(struct ct_lkrun *r)
{
	if (r->n) {
		cachetier__ofd_lock_n(r->fd, r->type, LK_UNIT(r->c), r->n, 0);
		if (r->calls)
			(*r->calls)++;
	}
	r->n = 0;
}

static inline void cachetier__lkrun_add(struct ct_lkrun *r, int fd, short type, uint32_t c)
{
	if (r->n && (r->fd != fd || r->type != type || r->c + r->n != c))
		cachetier__lkrun_flush(r);
	if (!r->n) {
		r->fd = fd;
		r->type = type;
		r->c = c;
	}
	r->n++;
}

/* Data file name of an object: hash of key, version (backend_version_tag:
 * its ETag, else its size and mtime), size and unit bytes. */
int cachetier__file_hash(const char *key, const char *etag, uint64_t size, int64_t mtime,
			 uint32_t unit_bytes, char hash[17]);
/* Read and check dirfd/<hash>.map: it parses and names this file (hash).
 * Units it claims past the data file's end (the file was cut) are dropped
 * from *m's bitmap, their count in *lost (when not NULL): fetched again.
 * *buf (freed by the caller) backs *m. -EPROTO: a map of another version
 * (noted). */
int cachetier__map_load(struct cachetier *ct, int dirfd, const char *hash, unsigned char **buf,
			struct ct_map *m, struct stat *data_st, uint32_t *lost);
/* Remove dirfd/<hash> (data, map, state) unless a running process uses
 * it; with 'count', its bytes counted in the usage leave it. Returns the
 * bytes, -EBUSY when in use, or a negative errno. */
int64_t cachetier__reap(struct cachetier *ct, int dirfd, const char *hash, int count);
/* cachetier_map.c: open f live from its map's identity (eviction of an
 * object this process did not open). */
int cachetier__file_open_mapped(struct cachetier *ct, struct ct_file *f);
/* cachetier_evict.c: the entry of decoded copy dirfd/name (added if
 * new). ct->lock held. NULL when out of memory. */
struct ct_dec *cachetier__dec_entry(struct cachetier *ct, int dirfd, const char *name);
/* Close the fds of decoded copies another process evicted (unlinked) that
 * no read here uses. ct->lock held. */
void cachetier__dec_release(struct cachetier *ct);
/* cachetier_evict.c: look for objects other processes added (rate-limited). */
void cachetier__rescan(struct cachetier *ct);

/* cachetier_evict.c — capacity. */
int cachetier__scan(struct cachetier *ct); /* at open: rebuild usage from data/ and decoded/ */
/* Make room for a fill of len bytes (already in ct->reserved), evicting
 * the least recently read units first. 'spare_ahead': never evict a
 * unit filled ahead and not read yet (a prefetch fill's room); returns
 * -ENOSPC when the room cannot be had otherwise (without it: 0 always, the
 * fill goes over the limit when everything is pinned). Called with
 * ct->lock held; drops and retakes it around file operations. */
int cachetier__make_room(struct cachetier *ct, uint64_t len, int spare_ahead);
/* The same for a prefetch fill (spare_ahead) whose units' nearest next use
 * by a plan is 'near' plan positions ahead (CT_NEAR_NONE: no plan needs
 * them): it evicts a unit a plan needs only when that unit's next use is
 * further. */
#define CT_NEAR_NONE INT64_MAX
int cachetier__make_room_near(struct cachetier *ct, uint64_t len, int spare_ahead, int64_t near);
/* Plan positions from now to unit c of f's next use (CT_NEAR_NONE: none
 * marked it, or no plan needs it again). ct->lock held. */
int64_t cachetier__plan_near(const struct cachetier *ct, const struct ct_file *f, uint32_t c);
/* cachetier_plan.c: units [c, c + n) of f were filled by one range
 * prefetch request: once plans mark units (ct->plan_marked), those valid
 * that no plan marked are needed by none (CT_NU_DONE: bytes fetched
 * between planned extents). ct->lock held. */
void cachetier__plan_filled(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n);
int64_t cachetier__now_ns(void);
/* This thread's CPU time in ns (CLOCK_THREAD_CPUTIME_ID). */
int64_t cachetier__cpu_ns(void);
/* The data disk's free bytes for a check that wants need of them (the
 * reserve and the bytes about to be written): statvfs's answer, or
 * without a call its last answer less the bytes made room for since
 * (room_bytes), while those stay under a bound and the estimate clears
 * need by that bound (cachetier_evict.c; README.md, "Free space").
 * UINT64_MAX when statvfs fails. ct->lock held; dropped around statvfs. */
uint64_t cachetier__disk_avail(struct cachetier *ct, uint64_t need);
/* The data disk's free bytes for a fill of len bytes once this process's
 * other fills in flight have written theirs, each of their bytes counted
 * once (cachetier.c): the estimate above (which has the fills begun since
 * its statvfs in it) less the reserved bytes it does not have (all of
 * them after a statvfs made now; else those past the bytes made room for
 * since). own: the asking fill's bytes already in ct->reserved (0 for a
 * caller that reserves nothing). UINT64_MAX when statvfs fails. ct->lock
 * held; dropped around statvfs. */
uint64_t cachetier__disk_free(struct cachetier *ct, uint64_t len, uint64_t own);

/* A temp file ".tmp.PID.N" (disk_tmp_open's name for a name without a
 * directory part) in dirfd of a process that no longer runs: unlinked.
 * Returns 1 when this call removed it, 0 otherwise (not such a name, the
 * process runs, or the unlink failed). */
int cachetier__tmp_drop(int dirfd, const char *name);

/* cachetier_watch.c: inotify watches of mapped blobs' inodes. new: NULL only without
 * memory; close: the tier lets go (the watch lives while a record does). add: watch fd's
 * inode, *rec its record, *seen its count now; 0 or -errno (no instance or watch to be
 * had). changed: 1 when rec's inode changed since seen. drop: the mapping lets go. */
struct cachetier__watch;
struct ct_watch_rec;
struct cachetier__watch *cachetier__watch_new(void);
void cachetier__watch_close(struct cachetier__watch *w);
int cachetier__watch_add(struct cachetier__watch *w, int fd, struct ct_watch_rec **rec,
			 uint64_t *seen);
int cachetier__watch_changed(struct cachetier__watch *w, const struct ct_watch_rec *r,
			     uint64_t seen);
void cachetier__watch_drop(struct cachetier__watch *w, struct ct_watch_rec *r);
/* add_own: the same with fanotify (data files): this process's own writes
 * are not changes; no descriptor kept; fails (-errno) where fanotify cannot
 * be had (the caller then uses watch_add). own: 1 for such a record.
 * drop_fd: drop any record; fd is an open fd of its inode (a fanotify
 * mark is removed through it). */
int cachetier__watch_add_own(struct cachetier__watch *w, int fd, struct ct_watch_rec **rec,
			     uint64_t *seen);
int cachetier__watch_own(const struct ct_watch_rec *r);
void cachetier__watch_drop_fd(struct cachetier__watch *w, struct ct_watch_rec *r, int fd);
/* cachetier_read.c: watch f's data file (open, f->datafd set, before any
 * fill of it) with fanotify where it can be had; no lock held. seen_filled:
 * the seen[] value of unit u this process just filled (ct->lock held). */
void cachetier__units_watch_start(struct cachetier *ct, struct ct_file *f);
uint8_t cachetier__seen_filled(const struct ct_file *f, uint32_t u);
/* 1 when SHARDFS_BENCH_NO_LIVE_CHECK is set: cache files are not watched
 * for changes under the mount (the bench's baseline; cachetier_read.c). */
int cachetier__live_check_off(void);
/* r's change count now (queued events read first: w's lock only then) */
uint64_t cachetier__watch_events(struct cachetier__watch *w, const struct ct_watch_rec *r);
/* Counts (tests): looks at w's fds, their read()s, takes of w's lock */
uint64_t cachetier__watch_reads(struct cachetier__watch *w);
uint64_t cachetier__watch_drains(struct cachetier__watch *w);
uint64_t cachetier__watch_locks(struct cachetier__watch *w);

/* cachetier_guard.c: a SIGBUS in a registered mapping reads zeros (a blob
 * cut under the process) and marks it (hit). add: registers [addr, addr + len), its slot or
 * -1 (no slot, or no handler could be installed); del: the slot goes,
 * before the mapping is unmapped. Process-wide; thread-safe. */
int cachetier__guard_add(const void *addr, size_t len);
void cachetier__guard_del(int slot);
int cachetier__guard_hit(int slot); /* 1 once a fault in slot's range read zeros */
/* Are the n bytes at s a file hash (16 lowercase hex digits)? */
int cachetier__is_hash(const char *s, size_t n);

/* The unit store's fill API (cachetier_run.c). */
#include "cachetier_run.h"
/* Idle read locks and reads without ct->lock (cachetier_read.c). */
#include "cachetier_fast.h"
#include "cachetier_punch.h" /* the puncher (cachetier_punch.c) */

#endif
