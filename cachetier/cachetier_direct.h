/*
 * cachetier_direct.h — prefetch fills written with O_DIRECT
 * (cachetier_direct.c): bytes no reader waits for gain nothing from the
 * page cache, whose copy, dirty writeback and later folio work on a punch
 * are all waste for them (cachetier/README.md, "Direct fills"). Private to
 * the cache tier; included by cachetier_i.h.
 */
#ifndef CACHETIER_DIRECT_H
#define CACHETIER_DIRECT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/uio.h>

struct ct_file;
struct ct_slot;
struct fill_buf;

/* What a direct write's buffers, offsets and lengths are aligned to: a
 * page, a multiple of every logical block size a data file system here
 * asks for (statx's STATX_DIOALIGN, checked at the first open: one that
 * asks for more, or says nothing, is refused). The sinks' buffers start
 * at such an address (cachetier__buf_get). */
#define CT_DIO_ALIGN 4096u

/* The direct writers: threads that each wait for one direct pwritev at a
 * time, and the writes submitted and not yet reaped (in flight: queued or
 * under way), at most. Two threads: the fill writer's CPU work (CRC32C,
 * landing, the next batch) goes on while the disk writes, and the disk
 * of the bench VM wrote no faster with more 512 KiB writes at once
 * (cachetier/README.md, "Direct fills"). */
#define CT_DIO_THREADS 2
#define CT_DIO_JOBS    8
/* A job's buffers at most: 16 sink buffers of 128 KiB, 2 MiB a direct
 * pwritev. The fill writer holds a direct fill's buffers that follow each
 * other (pending) until CT_DIO_IOV of them, or its run's end, make a job
 * (cachetier_write.c, dio_hold): a few large writes a GB, not one a batch
 * (tests/bench/README.md, "L4: direct fills of 2 MiB"). */
#define CT_DIO_IOV 16
/* The sink buffers the fill writer holds for direct writes at most
 * (pending or in a job not yet reaped): 16 MiB. Held buffers leave the
 * sinks' counts (FILL_BUFS_MAX, FILL_WQ_MAX: a sink never pauses for
 * them); at the bound the writer submits the fill with the most pending
 * and reaps the oldest job (its wait: the disk's) before it holds more.
 * The pool keeps this many more buffers (cachetier_write.c,
 * FILL_POOL_MAX). */
#define CT_DIO_HELD 128

/* One direct write in flight: n buffers from off (the caller's: slot and
 * bufs, the sink buffers it gives back once the job is reaped). */
struct ct_dio_job {
	struct ct_file *f;
	int dfd; /* f's O_DIRECT fd, or -1: the whole job buffered */
	int cut; /* tests: its direct pwritev cut short (ct_dio.cut_every) */
	int n;	 /* buffers in iov */
	struct iovec iov[CT_DIO_IOV];
	uint64_t off;		 /* the object offset of iov[0]'s first byte */
	size_t len;		 /* the bytes of iov */
	int err;		 /* 0 or -errno, once done */
	int done;		 /* protected by ct_dio.lock */
	struct ct_dio_job *next; /* the queue, protected by ct_dio.lock */
	struct ct_slot *slot;	 /* the caller's */
	struct fill_buf *bufs;	 /* ... */
};

/* The tier's direct writes (struct cachetier's wr.dio). */
struct ct_dio {
	int on;			 /* cfg.direct_fills: set at open, read only after */
	atomic_int refused;	 /* the data directory's file system refused O_DIRECT (an
				  * open's or a write's EINVAL, no STATX_DIOALIGN: tmpfs):
				  * every fill is buffered from then on */
	atomic_ullong bytes;	 /* bytes written with O_DIRECT */
	atomic_ullong writes;	 /* direct pwritevs that wrote bytes */
	atomic_ullong fallbacks; /* 1 once refused (counted once: per file system) */
	/* tests: every cut_every-th job submitted has its direct pwritev cut
	 * to half its blocks (a short write: the rest buffered); the
	 * einval_at-th fails as a refusal (EINVAL) would. 0: never. */
	unsigned cut_every, einval_at, submitted;
	/* the pool (cachetier__dio_start): its threads take q's jobs in order */
	pthread_mutex_t lock; /* a leaf: the queue and the jobs' done */
	pthread_cond_t work;  /* a job queued, or stop */
	pthread_cond_t fin;   /* a job done */
	struct ct_dio_job *q, **qt;
	int stop, nthreads;
	pthread_t th[CT_DIO_THREADS];
	/* the submitter's (the fill writer's) ring of jobs: [head, head + count) in flight */
	struct ct_dio_job jobs[CT_DIO_JOBS];
	unsigned head, count;
	/* the fill writer's: sink buffers held (pending in a fill, or in a
	 * job not reaped: at most CT_DIO_HELD), and the fills with buffers
	 * pending (linked by ct_fill.dnext) */
	unsigned held;
	struct ct_slot *pend;
	/* tests: jobs submitted by the fill writer, their buffers, the most
	 * buffers held at once, and the jobs submitted at CT_DIO_HELD */
	atomic_ullong jobs_sub, jobs_bufs;
	atomic_uint held_peak;
	atomic_ullong held_flushes;
	unsigned held_max; /* tests: the bound in place of CT_DIO_HELD (0: it), set before a fill */
};

/* The pool's threads started (up to CT_DIO_THREADS; none started: each
 * job is written in the submitter, as before the pool); idempotent. Its
 * stop, after every job was reaped: its threads joined. The submitter. */
void cachetier__dio_start(struct ct_dio *d);
void cachetier__dio_stop(struct ct_dio *d);
/* A free job of the ring for a submit, or NULL when CT_DIO_JOBS are in
 * flight: reap the oldest (cachetier__dio_oldest, _wait) first. */
struct ct_dio_job *cachetier__dio_job(struct ct_dio *d);
/* Job j's buffers iov[0..n) (at most CT_DIO_IOV, following each other
 * from off) of a prefetch fill: each unit's CRC32C over them computed now,
 * in the submitter (the bytes the write reads: nothing writes the buffers
 * until the job is reaped), then the bytes written by the pool as
 * cachetier__run_writev writes them, but their whole blocks through f's
 * O_DIRECT fd (f->dfd, opened here at its first use): from off, while the
 * buffers start at an aligned address and offset, each buffer's whole
 * blocks; the rest (a shard's last partial unit, a buffer the sink sent
 * part-full, what a short direct write left) through the buffered fd,
 * after them. Refused (d->refused set, counted once): the whole job
 * buffered. The job is in flight until reaped: its bytes are on the disk
 * once cachetier__dio_wait returned, and only then may the caller publish
 * their units or reuse the buffers. The submitter (the fill writer). */
void cachetier__dio_submit(struct ct_dio *d, struct ct_dio_job *j, struct ct_file *f, uint32_t c0,
			   uint32_t *crc, uint64_t off, const struct iovec *iov, int n);
/* The oldest job in flight (NULL: none), and its reap: waits until it is
 * done (its writes returned: bounded by the disk's writes of at most
 * CT_DIO_JOBS jobs, the pool's threads taking them in order) and frees
 * its place; its err then says how it went (0 or -errno). */
struct ct_dio_job *cachetier__dio_oldest(struct ct_dio *d);
void cachetier__dio_reap(struct ct_dio *d, struct ct_dio_job *j);
/* One write, submitted and reaped at once: 0 or -errno (the tests). */
int cachetier__dio_writev(struct ct_dio *d, struct ct_file *f, uint32_t c0, uint32_t *crc,
			  uint64_t off, const struct iovec *iov, int n);
/* f's O_DIRECT fd closed (with its data file's). */
void cachetier__dio_close(struct ct_file *f);

#endif
