/*
 * cachetier_punch.h — private to cachetier/: the puncher
 * (cachetier_punch.c); included at the end of cachetier_i.h, whose types
 * it uses.
 */
#ifndef CACHETIER_PUNCH_H
#define CACHETIER_PUNCH_H

/* Most punches queued for the puncher; an eviction that finds the queue
 * full punches its units itself (as every eviction did before). The bytes
 * queued are bounded apart from it (room_over, cachetier_evict.c): a
 * planned epoch's evictions of a few units each queue dozens within it
 * (at most 64: the puncher's batch mask). */
#define CT_PUNCH_QUEUE_MAX 64u

/* One eviction's punch: units list[0..n) of f taken (sorted; their bytes,
 * freed, off the usage and in ct->evicting), gaps[0..ng) joined to them
 * (join_gaps), all[0..n + ng) both merged; every one UNIT_EVICTING and
 * write-locked on f->auxfd until punched. had_map: the eviction unlinked
 * f's map. The arrays are malloc'd; cachetier__punch_end frees them. */
struct ct_punch {
	struct ct_file *f;
	uint32_t *list, *gaps, *all;
	uint32_t n, ng;
	uint64_t freed;
	int had_map;
	struct ct_punch *next;
};

/* The puncher's state; its own lock (rank DISK_LOCK_CT_PUNCH, a leaf:
 * taken under ct->lock by an eviction's submit, alone by the puncher)
 * guards the queue and the flags; the counts are atomic (the stats read
 * them with no lock). */
struct ct_puncher {
	pthread_t thread;
	int have_thread;
	struct disk_mutex lock;		   /* the queue, stop, hold */
	pthread_cond_t cond;		   /* a punch queued, the hold ended, or stop */
	struct ct_punch *q, **tail;	   /* queued, oldest first */
	unsigned n;			   /* punches in q, at most CT_PUNCH_QUEUE_MAX */
	int stop;			   /* drain q and leave; evictions punch themselves */
	int hold;			   /* tests: q stays (cachetier_punch_hold), until stop */
	atomic_uint pending;		   /* punches in q or being punched by the puncher */
	atomic_ullong queued;		   /* punches handed to the puncher */
	atomic_ullong wakes;		   /* batches: wake-ups that found punches queued */
	atomic_ullong tier_locks;	   /* the puncher's takes of ct->lock (punch_end) */
	_Atomic unsigned long long cpu_ns; /* the thread's CPU time after its last punch */
};

/* Start the puncher (cachetier_open, before the fill workers); stop it:
 * every queued punch done, the thread joined (cachetier_close, before the
 * fill workers stop; evictions after it punch themselves). Stop accepts a
 * tier whose start failed or never ran. */
int cachetier__punch_start(struct cachetier *ct);
void cachetier__punch_stop(struct cachetier *ct);
void cachetier__punch_free(struct cachetier *ct);
/* Hand p to the puncher, or, with its queue full, the puncher stopped or
 * here set (an eviction for the filesystem's free space: its caller
 * checks statvfs next, which counts bytes not punched yet), punch it here.
 * ct->lock held on entry and return (dropped to punch here); takes the
 * puncher's lock. Not on the I/O thread. */
void cachetier__punch_submit(struct cachetier *ct, struct ct_punch *p, int here);

/* A fill's buffers iov[0..n) (at most CT_WRITEV_MAX, following each other
 * from off) written as cachetier__run_writev writes them, but one pwritev
 * a unit: for a fill shorter than one pwritev's most, 512 KiB
 * (cachetier_write.c, fill_write: a random read's, whose units an eviction
 * may take apart). The page cache makes a folio as
 * long as a write at an aligned offset (up to 512 KiB here), and a punch
 * of some units of a folio zeroes their part and splits it, the dearest
 * part of a shuffled epoch's punches; a folio a unit is punched whole
 * (tests/bench/README.md, "Unit folios"). A longer fill (a sequential
 * reader's, a chunk's) keeps its long writes: its evictions take whole
 * chunks, whose long folios go whole. 0 or -errno; not on the
 * I/O thread. */
struct iovec;
int cachetier__writev_units(struct ct_file *f, uint32_t c0, uint32_t *crc, uint64_t off,
			    const struct iovec *iov, int n);

#endif
