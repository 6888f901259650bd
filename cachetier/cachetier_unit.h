/*
 * cachetier_unit.h — private to cachetier/, included by cachetier_i.h: the
 * unit store's record of one remote object (struct ct_file), the states of
 * its units, their next use by plans, and the byte-range locks of its state
 * file. The locks that guard these fields are cachetier_i.h's (its comment
 * at the top, and each field's here).
 */
#ifndef CACHETIER_UNIT_H
#define CACHETIER_UNIT_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "disk_lock.h"
#include "cachetier_evheap.h"

struct cachetier__watch;
struct ct_watch_rec;

/* States of one unit of a cached remote object. */
enum ct_unit {
	UNIT_EMPTY = 0, /* not on disk (or not trusted) */
	UNIT_QUEUED,	/* exactly one ct_job for it sits in a fill queue */
	UNIT_FILLING,	/* a worker is fetching and writing it */
	UNIT_VALID,	/* written (maybe not yet durable): may be served */
	UNIT_EVICTING,	/* being punched out of the data file */
};

/* A unit's next use by a reading plan (ct_file.nu, cachetier_plan.c):
 * none marked it, or one read it and none needs it again; any other value
 * is the plan position of its next use (serial, against ct->plan_now). */
#define CT_NU_NONE  0u
#define CT_NU_DONE  1u
#define CT_NU_FIRST 2u /* the least value of a position */

/* Byte-range locks (F_OFD_SETLK) on an object's state file data/<hash>.st
 * and on CACHE_DIR/v1/usage; offsets name locks, not bytes
 * (cachetier_share.c, protocol in README.md). */
#define LK_PRESENCE    0    /* R: a process uses the file; W: it is initialising it */
#define LK_MAP	       1    /* W: writing or unlinking the object's map */
#define LK_MAP_WAIT_MS 2000 /* most a map write or unlink waits for LK_MAP */
#define LK_UNIT(c)     ((off_t)(1ll << 32) + (off_t)(c)) /* W: filling or evicting; R: pinned */
#define ST_HDR	       64u /* state file: header bytes before one byte per unit */

/* One remote object in the unit store: data/<hash> + data/<hash>.map.
 * An entry exists for every object with bytes on disk (found by the scan
 * at open: 'live' == 0) and for every object opened in this session
 * ('live' == 1: identity, fd and unit arrays valid). A live entry stays
 * live until cachetier_close, so workers and readers may use f->key,
 * f->datafd, f->size and f->nunits without the lock once they saw
 * f->live under it. pins, held and lazy, uwaits and ugen: f->lock
 * (cachetier_i.h, 2b); ust: written under f->lock (cachetier__unit_set,
 * cachetier_run.h: asserted), under ct->lock too but at a commit as the
 * fill writer lands units (cachetier__run_landed) and a punch's end
 * (EVICTING to EMPTY), read under either (atomic words). What a commit
 * writes (issue 36 #1: under f->lock alone as units land): the map batch
 * (dirty, dirty_ns, map_ns) under f->lock; seen under f->lock at a
 * commit and a change of the file, else of valid units under ct->lock;
 * bytes, ufills, lazy atomic; uatime and unread relaxed atomic words
 * (cachetier__ua, cachetier__unread). The rest of the per-unit fields
 * and everything else: docs/architecture.md, "Lock order". */
struct ct_file {
	struct ct_file *next;	/* in ct->files */
	char hash[17];		/* file name: hash of key, version, size, unit bytes */
	int dirfd;		/* the data/ directory it lives in (not owned) */
	int foreign;		/* another source's object: evicted, never filled */
	int live;		/* identity, datafd and arrays below are set */
	int opening;		/* a thread is loading it (others wait on unit_cond) */
	int evicting;		/* an eviction is working on it (ditto) */
	_Atomic uint64_t bytes; /* bytes of UNIT_VALID units, counted in ct->used */
	int64_t atime_ns;	/* last access (CLOCK_REALTIME), for LRU */
	unsigned evict_round;	/* last eviction round that considered it */
	/* live only */
	char *key;
	char etag[80];
	uint64_t size;
	int64_t mtime;	     /* the version's, without an ETag (backend_version_same) */
	uint32_t unit_bytes; /* unit bytes: what a state byte, a map bit, a lock and an
			      * eviction cover (the arrays below are per unit) */
	uint32_t nunits;     /* units */
	uint32_t group;	     /* units per chunk (a sequential fill's request) */
	int datafd;	     /* data/<hash>, O_RDWR */
	int dfd;	     /* data/<hash>, O_RDWR | O_DIRECT: opened by the fill writer at
			      * its first direct write of f (-1: not yet; the writer's
			      * until f closes, cachetier_direct.c) */
	int stfd;	     /* data/<hash>.st: presence and this process's unit locks */
	int auxfd;	     /* the same file opened again: eviction's unit locks */
	unsigned char *st;   /* data/<hash>.st mapped shared (cachetier_share.c) */
	size_t st_len;
	uint8_t *held;	    /* per unit: stfd holds its read lock (valid; pinned, or idle:
			     * kept past its last unpin until this process evicts it, another
			     * process asks for it or the object closes, cachetier_read.c) */
	atomic_int lazy;    /* a unit may be held idle (held, no pin): cachetier__lazy_drop */
	uint32_t want_seen; /* the state file's release requests (S_WANT) last acted on */
	uint8_t *seen;	    /* per unit: 1 checked here (its CRC32C) and its data file not
			     * changed since; 2 filled here or checked before a change: its
			     * CRC32C is checked at its next read; 3 filled here while the
			     * file's watch ignores this process's writes (f->wown): trusted,
			     * 1 once served; 4 being filled when the file changed (2 once
			     * filled); 0 none (another process's: checked at its first
			     * read here, cachetier_read.c) */
	int64_t *uatime;    /* per unit: this process's last read or fill of it (CLOCK_REALTIME ns);
			     * 0: untouched here (the object's last use stands for it) */
	uint8_t *unread;    /* per unit: filled ahead (readahead, prefetch), not read since:
			     * 1, else 0 (the bytes filled ahead: 1s found with memchr) */
	uint8_t *gap;	    /* per unit: queued only because it lies between planned extents of a
			     * span (cachetier_obj_prefetch_span) and no plan named it since: while
			     * unread it is not spared and goes first (cachetier_evict.c); a read
			     * or a range naming it clears it */
	_Atomic uint32_t *nu;	/* per unit: next use by a plan, CT_NU_* or a plan position
				 * (cachetier_plan.c; atomic: plans mark without ct->lock) */
	_Atomic uint8_t *ust;	/* enum ct_unit per unit: written under lock and ct->lock
				 * (cachetier__unit_set only), read under either (a waiting
				 * reader looks under lock alone, cachetier__units_wait) */
	_Atomic uint32_t *pins; /* readers inside read_begin/read_end per unit (lock: a
				 * pin is taken under ct->lock and lock, dropped
				 * under lock alone; atomic: ct->lock's holders may
				 * look without lock where a pin seen that has just
				 * gone only spares a unit) */
	/* reads without ct->lock: cachetier_fast.h */
	_Atomic uint32_t *fp;
	int64_t *fatime;
	atomic_int fast_ok;
	_Atomic uint64_t wev_fast;
	int *uerr;	      /* the error of the last failed fill per unit */
	unsigned dirty;	      /* valid units not yet in the persisted map */
	int64_t map_ns;	      /* when the map was last written */
	int64_t retry_ns;     /* a failed map write: not due again before this
			       * (MAP_RETRY_NS after it; 0: none failed) */
	atomic_int remap;     /* a punch's end found units of an unlinked map still valid: the
			       * map is due again (folded into dirty under ct->lock by the
			       * flusher's look, cachetier_map.c; set without it) */
	int64_t dirty_ns;     /* with cfg.durable_delay_s: the earliest fill of a unit dirty
			       * counts (0: none known, the map is due at once; cachetier_map.c) */
	int64_t *fill_ns;     /* per unit: when this process filled it (CLOCK_REALTIME ns; 0: not
			       * here), the age the durability delay goes by; read by the map's
			       * encoder without ct->lock (atomic loads and stores) */
	uint64_t ra_end;      /* end of the last read with a window (eviction's unit_ahead) */
	uint64_t ra_window;   /* that read's readahead window (fetch/); 0: none */
	uint32_t pf_next;     /* prefetch cursor: the next unit to look at */
	uint32_t pf_end;      /* ... up to this one (exclusive) */
	int pf_listed;	      /* in ct->pf list */
	int pf_evict;	      /* its prefetch fills may evict (CACHETIER_PF_EVICT was asked) */
	int pf_cold;	      /* only CACHETIER_PF_COLD was asked (no reader soon) */
	unsigned pf_inflight; /* prefetch fills of it running now */
	uint64_t pf_unfit;    /* bytes its latest prefetch skipped: no room without evicting */
	unsigned pr_queued;   /* its ranges in ct->pr (cachetier_obj_prefetch_range) */
	struct ct_file *pf_link, **pf_pprev; /* ct->pf list, doubly linked */
	struct disk_mutex maplock;	     /* DISK_LOCK_CT_MAP: before ct->lock */
	struct disk_mutex lock;		     /* DISK_LOCK_CT_FILE: after ct->lock (below) */
	/* readers waiting for its units (cachetier__units_wait, cachetier_run.c):
	 * uwaits and ugen under lock (ugen moves at every wake-up of them, so a
	 * reader that looked at its units under lock and finds it moved looks
	 * again instead of waiting); uw_next under ct->lock, uw_listed under
	 * ct->lock and lock (on ct->uw_files: a reader woken lists itself again
	 * under lock alone while it is set) */
	struct ct_uwait *uwaits;
	uint64_t ugen;
	struct ct_file *uw_next;
	int uw_listed;
	/* the data file's inotify watch (cachetier_check.c, units_watch) */
	struct cachetier__watch *w; /* NULL: not watched (yet) */
	struct ct_watch_rec *wrec;  /* its record */
	uint64_t wevents;	    /* the record's change count when seen[] last went 1 -> 2 */
	uint32_t wgen;		    /* bumped at each change seen (a check begun before does
				     * not set seen to 1) */
	int wfail;		    /* no watch to be had: every read checks its units */
	int wown;		    /* the watch (fanotify, from before any fill) ignores this
				     * process's writes: seen 3 for its fills */
	/* a weak or mtime-derived ETag (cachetier_weak.c) */
	_Atomic uint64_t ufills; /* units this process filled (cachetier__unit_done) */
	uint64_t probed;	 /* ufills that the last probe of the anchor covered */
	int probing;		 /* a reader is probing the anchor (others wait on unit_cond) */
	int anchor_set;		 /* anchor and anchor_crc hold the first unit served here */
	uint32_t anchor;	 /* that unit */
	uint32_t anchor_crc;	 /* its CRC32C then */
	uint32_t vgen;		 /* bumped when the store's bytes are found changed under
				  * the ETag (weak_drop; ct->lock): a read begun before
				  * ends with ESTALE (cachetier__file_read_begin) */
	/* the batch fills' shared version HEADs (cachetier_batchv.c;
	 * ct->lock): HEADs of it started (numbered 1, 2, ... in the order
	 * sent), the highest number of those that ended and its outcome, how
	 * many are in flight, and the request that sent the one that ended
	 * (bt_req.id: a request never shares its own) */
	uint64_t bc_sent, bc_done, bc_by;
	int bc_res;
	unsigned bc_inflight;
	struct ct_evfile ev; /* its place in eviction's order (cachetier_evheap.h) */
};

/* A unit's time of use and filled-ahead mark (uatime, unread): written under
 * its object's lock alone by a commit of landed units (cachetier_run.c) and
 * under ct->lock by reads and queueing, read under either (eviction's
 * order): relaxed atomic words. */
static inline int64_t cachetier__ua(const struct ct_file *f, uint32_t c)
{
	return __atomic_load_n(&f->uatime[c], __ATOMIC_RELAXED);
}
static inline void cachetier__ua_set(struct ct_file *f, uint32_t c, int64_t v)
{
	__atomic_store_n(&f->uatime[c], v, __ATOMIC_RELAXED);
}
static inline int cachetier__unread(const struct ct_file *f, uint32_t c)
{
	return __atomic_load_n(&f->unread[c], __ATOMIC_RELAXED);
}
static inline void cachetier__unread_set(struct ct_file *f, uint32_t c, int v)
{
	__atomic_store_n(&f->unread[c], (uint8_t)v, __ATOMIC_RELAXED);
}
/* The first unit at or after c marked unread, or nunits (a scan of atomic
 * words: no memchr, which a commit's store under the object's lock alone
 * would race with). */
static inline uint32_t cachetier__unread_next(const struct ct_file *f, uint32_t c)
{
	while (c < f->nunits && !cachetier__unread(f, c))
		c++;
	return c;
}

#endif
