/*
 * fs_plan_i.h — what fs_plan.c (plans: publish, read marks),
 * fs_plan_read.c (a plan file's lines resolved into extents),
 * fs_plan_use.c (next use: the marks eviction orders planned units by) and
 * fs_plan_index.c (a plan's shards indexed several at once) share: the
 * published plans' state and a plan's fields. Nothing else in
 * the core includes it (fs_plan.h is the subsystem's interface).
 */
#ifndef FS_PLAN_I_H
#define FS_PLAN_I_H

#include "disk_lock.h"
#include "fs_view.h"

#define PLAN_NONE UINT32_MAX
/* Planned paths being read at once whose units not read yet keep their
 * marks (next use, fs_plan_use.c): far more than a loader's readers read at once
 * (each reads one path at a time); a path started before the last
 * PLAN_READING was left part-read (use_reading). */
#define PLAN_READING 64

/* The published plans (fs_plan.h): fs->plans, from fs_open to fs_close. */
struct fs_plans {
	struct disk_rwlock lock;	/* DISK_LOCK_PLANS: protects v[] */
	struct fs_plan *v[FS_PLAN_MAX]; /* each holds a reference */
	uint64_t seq;			/* the last plan's publish order (under lock) */
	atomic_uint n;			/* plans published now (reads skip the lock at 0) */
	void (*listener)(void *ctx);	/* fs_plan_set_listener: set before serving */
	void *listener_ctx;
	/* bytes: the furthest any plan's readers got, on the plans' clock
	 * (next use, fs_plan_use.c) */
	atomic_ullong clock;
	/* next uses (fs_plan_use.c): a publish or clear marks every plan
	 * again with it held exclusive; a read's marks take it shared, so
	 * reads never wait for each other on it. Lock order: use_lock, then
	 * reading_lock or lock, then the cache tier's */
	struct disk_rwlock use_lock; /* DISK_LOCK_PLAN_USE */
	/* planned paths being read (fs_plan_use.c: use_reading): started and
	 * not read whole yet, the one started first at [0]; under use_lock
	 * shared and reading_lock (a leaf: list work only), or use_lock
	 * exclusive */
	struct disk_mutex reading_lock; /* DISK_LOCK_PLAN_READING */
	struct plan_reading {
		struct fs_plan_extent x;
		uint64_t got;  /* bytes its requests read so far */
		uint64_t next; /* where its last request ended */
	} reading[PLAN_READING];
	/* entries of reading[]: written under the locks above, read without
	 * them by a read of a whole path (fs_plan__use_read: none being read,
	 * no list to keep) */
	atomic_uint nreading;
};

struct fs_plan {
	atomic_uint refs;
	struct fs *fs; /* the mount it was published on (plans go before it closes) */
	char name[FS_PLAN_NAME_MAX + 1];
	pid_t pid;
	uint64_t seq; /* publish order: when the array is full the lowest goes */
	struct fs_plan_extent *ext;
	uint32_t n, missing, failed; /* failed: paths whose lookup failed */
	uint64_t bytes, fnv;
	/* key -> its first extent: open addressing over nslots (a power of
	 * 2), a slot holds an extent index + 1 (0: empty); next[i] is the
	 * next extent after i with the same key (PLAN_NONE: none) */
	uint32_t *slots, nslots, *next;
	atomic_uchar *done; /* per extent: 1 once marked read */
	uint64_t *cum;	    /* cum[i]: bytes of extents [0, i), for i in [0, n] */
	atomic_uint nread, position;
	atomic_uint wake_at; /* fs_plan_wake_at: reads below it call no listener */
	uint64_t base;	     /* the plan clock at publish: extent i is read at base + cum[i] */
	uint32_t *byoff;     /* extent indices by (object, offset): who shares a unit */
	uint32_t *rank;	     /* rank[i]: extent i's place in byoff */
	/* extents whose object the source removed since (fs_plan_get_info's
	 * missing): (1 + the low 32 bits of fs->c.stale_noticed when counted)
	 * << 32 | the count, in one word (0: not counted yet) */
	atomic_ullong gone;
};

/* Line numbers of missing paths a publish's log line names (the first
 * ones). */
#define PLAN_LOG_LINES 8
/* The lines of a plan file left out (fs_plan__read), for the log. */
struct fs_plan_skipped {
	uint64_t lines[PLAN_LOG_LINES]; /* line numbers of the first paths not found */
	uint32_t not_found;		/* paths that name nothing (of p->missing) */
	uint32_t failed;		/* paths whose lookup failed (p->failed) */
	int failed_err;			/* the first one's errno */
};
/* fs_plan_read.c: read plan file path (opened with the rights of user uid,
 * group gid) a piece at a time and resolve its lines into p's extents
 * (ext, n, missing, failed, bytes, fnv; not indexed yet), what it left
 * out into *sk. 0, or open's error, -EISDIR, -EINVAL (not a regular file:
 * a FIFO is never waited on), -EFBIG (past FS_PLAN_FILE_MAX, read so far,
 * or 2^32-1 paths), -ENOMEM, -EINTR (stop), a read error. */
int fs_plan__read(struct fs *fs, struct fs_plan *p, const char *path, const struct fs_op_stop *stop,
		  uid_t uid, gid_t gid, struct fs_plan_skipped *sk);
/* fs_plan_read.c: lines a publish resolves at once at most (PLAN_BATCH, read
 * when a publish starts; a test's 1: each line resolved whole before the
 * next is read, in the file's order, as before batches). */
extern _Atomic uint32_t fs_plan__batch; /* a test sets it between publishes */

/* fs_plan_index.c: the shards plan file fd names, their indexes built
 * several at once (see there); fd is read from its start and left there.
 * 0, -EINTR (stop asked), or lseek's error. */
int fs_plan__index_ahead(struct fs *fs, int fd, const struct fs_op_stop *stop);
/* Lines fs_plan__index_ahead's first pass looked up so far (in this
 * process, every mount): a test's count. */
uint64_t fs_plan__index_lines(void);

/* fs_plan_use.c: next use (see there). Index p's extents by (object,
 * offset) at publish (byoff, rank): 0 or -ENOMEM. */
int fs_plan__use_index(struct fs_plan *p);
/* The first place in p->byoff at or after (obj, lo) (p->n: none): from
 * place at (an extent of obj near it: a few steps) when at < p->n, else by
 * binary search. */
uint32_t fs_plan__use_first(const struct fs_plan *p, uint32_t obj, uint64_t lo, uint32_t at);
/* Call fn(ctx, i) for each extent i of p not read yet whose bytes as
 * stored are of obj and reach into [lo, hi), in the order the marks are
 * made: those starting before lo, nearest first, then those from lo on;
 * at as for fs_plan__use_first. */
void fs_plan__use_each(const struct fs_plan *p, uint32_t obj, uint64_t lo, uint64_t hi, uint32_t at,
		       void (*fn)(void *ctx, uint32_t i), void *ctx);
/* The plans a read's key was found in (fs_plan_note_read): plan v[slot]
 * while its seq is seq, its extent i with the key. */
struct fs_plan_hit {
	uint64_t seq;
	uint32_t slot, i;
};
/* Drop every mark and mark every plan's extents not read yet (publish,
 * clear). */
void fs_plan__use_all(struct fs *fs);
/* p's position moved: the clock and the cache tier's now follow. */
void fs_plan__use_moved(struct fs *fs, const struct fs_plan *p);
/* A read of [off, off + size) of planned extent x landed; hits[nhits]:
 * where its key was found. */
void fs_plan__use_read(struct fs *fs, const struct fs_plan_extent *x, uint64_t off, uint64_t size,
		       const struct fs_plan_hit *hits, uint32_t nhits);

#endif
