/*
 * cachetier_write.c — the fill writer of the unit store: one thread
 * (cachetier__writer_main) that takes the buffers of up to 128 KiB
 * (FILL_BUF_BYTES) the fills' sinks gather on the store's I/O thread
 * (cachetier_fill.c) and the batch fill's writes (cachetier__write_push),
 * computes each unit's CRC32C, writes the buffers (a direct fill's through
 * the direct writers, several in flight: cachetier_direct.c), makes the units they
 * complete valid (fill_publish) and ends each run (fill_run_end), so the
 * I/O thread only moves bytes. What it takes at one wake-up (a batch) it
 * groups by fill: a fill's buffers that follow each other go with one
 * pwritev a CT_WRITEV_MAX of them (each unit's CRC32C after its bytes'
 * write: cachetier__run_writev), and its units are made valid once, after the last of its
 * buffers in the batch is written (one lock fcntl a fill and batch, not
 * one a buffer, made before ct->lock is taken: cachetier__run_land), and
 * one take of ct->lock serves every fill of the batch, with no system
 * call under it (the readers' wake-up after it). The queue is a
 * lock-free stack (ct->wr.wq) and a semaphore (ct->wr.wsem) posted once per
 * batch: only by the push that finds the stack empty (the writer takes the
 * whole stack at each wake-up, so a push onto a non-empty stack is taken
 * with the one that posted). The sinks' buffers come from a pool
 * (cachetier__buf_get) the writer gives them back to, carved from chunks
 * of huge pages (disk_arena.h): no malloc, no fresh (faulted and zeroed)
 * 4 KiB pages per buffer.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "cachetier_i.h"

/* Hand a and b (each if not NULL), then c, to the fill writer with one
 * push: lock-free, never waits (the store's I/O thread). */
void cachetier__wq_push3(struct cachetier *ct, struct fill_buf *a, struct fill_buf *b,
			 struct fill_buf *c)
{
	struct fill_buf *head = atomic_load_explicit(&ct->wr.wq, memory_order_relaxed);
	struct fill_buf *first = a ? a : b ? b : c; /* the oldest: last in the chain */
	unsigned nbufs =
	    (a && a->slot && !a->end) + (b && b->slot && !b->end) + (c->slot && !c->end);

	/* a fill's bytes (fill_write takes them off) */
	atomic_fetch_add_explicit(&ct->wr.wq_bufs, nbufs, memory_order_relaxed);
	if (b)
		b->next = a;
	c->next = b ? b : a;
	do
		first->next = head;
	while (!atomic_compare_exchange_weak_explicit(&ct->wr.wq, &head, c, memory_order_release,
						      memory_order_relaxed));
	/* the stack was empty: the writer has taken (or will take, after the
	 * post it has not consumed yet) everything pushed before, so it needs
	 * a wake-up for this one; a push onto a non-empty stack rides with the
	 * push that found it empty and posted */
	if (!head)
		sem_post(&ct->wr.wsem);
}

void cachetier__wq_push2(struct cachetier *ct, struct fill_buf *a, struct fill_buf *b)
{
	cachetier__wq_push3(ct, NULL, a, b);
}

void cachetier__wq_push(struct cachetier *ct, struct fill_buf *b)
{
	cachetier__wq_push2(ct, NULL, b);
}

/* The sinks' buffers: a pool of free ones (ct->wr.bpool, disk_arena.h)
 * under ct->wr.bpool_lock (a leaf: nothing is taken under it, held for a
 * pointer swap but at a new chunk's map), kept up to FILL_POOL_MAX (8 MiB:
 * the bytes of the fills in flight). A lock-free stack would need its
 * whole list taken and walked to pop one safely from several threads (the
 * store's I/O thread, the fill workers of a store that reads in the
 * caller): a cache miss per buffer walked. */
#define FILL_POOL_MAX 64u

/* A sink buffer's bytes start at a CT_DIO_ALIGN boundary, so a prefetch
 * fill's writes go through O_DIRECT as they are (cachetier_direct.c): its
 * header lies in the block before them (BUF_HEAD bytes for it, at least
 * the header's). */
#define BUF_HEAD   CT_DIO_ALIGN
#define BUF_STRIDE (BUF_HEAD + FILL_BUF_BYTES)
_Static_assert(offsetof(struct fill_buf, data) <= BUF_HEAD &&
		   offsetof(struct fill_buf, data) % _Alignof(struct fill_buf) == 0,
	       "a sink buffer's header fits in the block before its bytes");

/* The buffers are blocks of the arena's chunks of 2 MiB (disk_arena.h),
 * each at an address that is a multiple of its size and madvise'd
 * MADV_HUGEPAGE: a fresh chunk is one page fault of a huge page, not 33
 * faults of a 4 KiB page a buffer. A fresh mount's first prefetch touched
 * some 115 new buffers, 3,800 faults, at 11-17 us each on the bench
 * machine's VM (a fault there costs a trap to the hypervisor): 0.1 CPU-s
 * per GB of L4 (tests/bench/README.md, "L4: the fill buffers' page
 * faults"). A chunk's first block holds the arena's header; then
 * BCHUNK_BUFS buffers of BUF_STRIDE. A chunk goes back to the kernel when
 * its last buffer comes back to a pool already holding FILL_POOL_MAX
 * (and all of them at stop). */
#define BCHUNK_BUFS ((DISK_ARENA_CHUNK - CT_DIO_ALIGN) / BUF_STRIDE)
_Static_assert(BCHUNK_BUFS >= 8, "a chunk holds several sink buffers");
_Static_assert(FILL_BUFS_MAX % BCHUNK_BUFS == 0 && FILL_BUFS_MAX <= FILL_POOL_MAX,
	       "the prefetch fills' most sink buffers fill whole chunks, all kept");

/* Under ASan the arena poisons a pooled buffer; each buffer's block before
 * its header (past the previous buffer's end) is poisoned here while it
 * is out, as malloc's redzones are. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define BUF_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#else
#define BUF_POISON(p, n) ((void)(p), (void)(n))
#endif
#define BUF_LEAD (BUF_HEAD - offsetof(struct fill_buf, data))

void cachetier__buf_pool_init(struct cachetier *ct)
{
	/* with direct fills, also the CT_DIO_HELD the writer may hold
	 * (dio_hold): kept, not unmapped and faulted
	 * fresh again at each burst */
	int err = disk_arena_init(&ct->wr.bpool, BUF_STRIDE, CT_DIO_ALIGN,
				  FILL_POOL_MAX + (ct->cfg.direct_fills ? CT_DIO_HELD : 0u));

	assert(err == 0 && ct->wr.bpool.per == BCHUNK_BUFS);
	(void)err;
}

struct fill_buf *cachetier__buf_get(struct cachetier *ct)
{
	char *blk;
	unsigned n, peak;

	disk_mutex_lock(&ct->wr.bpool_lock);
	blk = disk_arena_take(&ct->wr.bpool);
	if (!blk) {
		void *ch = disk_arena_chunk_map();

		blk = ch ? disk_arena_add(&ct->wr.bpool, ch) : NULL;
		if (blk)
			atomic_fetch_add_explicit(&ct->wr.buf_chunks, 1, memory_order_relaxed);
	}
	disk_mutex_unlock(&ct->wr.bpool_lock);
	if (!blk)
		return NULL;
	n = atomic_fetch_add(&ct->wr.bufs_out, 1) + 1;
	peak = atomic_load_explicit(&ct->wr.bufs_peak, memory_order_relaxed);
	while (n > peak &&
	       !atomic_compare_exchange_weak_explicit(&ct->wr.bufs_peak, &peak, n,
						      memory_order_relaxed, memory_order_relaxed))
		;
	BUF_POISON(blk, BUF_LEAD);
	return (struct fill_buf *)(blk + BUF_LEAD);
}

/* b back in the pool, its count left alone. */
static void buf_give(struct cachetier *ct, struct fill_buf *b)
{
	void *gone;

	disk_mutex_lock(&ct->wr.bpool_lock);
	gone = disk_arena_give(&ct->wr.bpool, b->data - BUF_HEAD);
	disk_mutex_unlock(&ct->wr.bpool_lock);
	disk_arena_chunk_unmap(gone);
}

/* A buffer out of the pool's count (FILL_BUFS_MAX): put back, or held for
 * a direct write (dio_hold). */
static void buf_unout(struct cachetier *ct)
{
	/* under the resume mark with a sink paused for a buffer (buf_room):
	 * the paused transfers asked again, one wake-up of the store's I/O
	 * thread; the count falls before the flag is read (both sequentially
	 * consistent), so a pause never misses it */
	if (atomic_fetch_sub(&ct->wr.bufs_out, 1) - 1 < FILL_BUFS_RESUME &&
	    atomic_load(&ct->wr.bufs_wake) && atomic_exchange(&ct->wr.bufs_wake, 0)) {
		atomic_fetch_add_explicit(&ct->wr.pool_wakes, 1, memory_order_relaxed);
		backend_sink_ready(ct->be);
	}
}

void cachetier__buf_put(struct cachetier *ct, struct fill_buf *b)
{
	if (!b)
		return;
	buf_give(ct, b);
	buf_unout(ct);
}

/* The same handshake as the sinks' FILL_WQ_MAX (cachetier_fill.c,
 * sink_full), on the pool's count: the flag is set before the count is
 * read again, and every put reads it after its count falls
 * (cachetier__buf_put), so a pause here always has its wake-up: the put's
 * that leaves fewer than FILL_BUFS_RESUME out (the buffers out are queued,
 * being written, or held by running transfers, which push them; a paused
 * sink's kept one goes at the store's poll), or the store's 1 s bound on a
 * pause. */
int cachetier__buf_room(struct cachetier *ct, unsigned limit)
{
	if (atomic_load_explicit(&ct->wr.bufs_out, memory_order_relaxed) < limit)
		return 1;
	atomic_store(&ct->wr.bufs_wake, 1);
	return atomic_load(&ct->wr.bufs_out) < limit;
}

void cachetier__buf_pool_free(struct cachetier *ct)
{
	/* at stop every buffer is back: no fill, no writer */
	disk_mutex_lock(&ct->wr.bpool_lock);
	disk_arena_fini(&ct->wr.bpool);
	disk_mutex_unlock(&ct->wr.bpool_lock);
}

/* The fill writer: b's bytes to the data file, each unit's CRC32C as they
 * pass (while they are in the CPU's cache; tests/bench/crc_bench.sh), then
 * the units they complete made valid. After a write error the run's later
 * bytes are dropped (its end fails the run). */

/* A buffer of the fill's bytes written (or dropped): back to the pool,
 * and the sinks told when the queue is down to FILL_WQ_RESUME with one
 * paused. */
static void wq_done(struct cachetier *ct)
{
	/* down to a quarter with a sink paused (cachetier_fill.c, sink_full): its
	 * transfer goes on (one wake-up of the store's I/O thread, not a poll) */
	if (atomic_fetch_sub(&ct->wr.wq_bufs, 1) - 1 <= FILL_WQ_RESUME &&
	    atomic_load(&ct->wr.wq_wake) && atomic_exchange(&ct->wr.wq_wake, 0))
		backend_sink_ready(ct->be);
}

static void buf_done(struct cachetier *ct, struct fill_buf *b)
{
	cachetier__buf_put(ct, b);
	wq_done(ct);
}

/* A direct job reaped (the oldest in flight: its writes returned): its
 * bytes counted as written (on the disk now, still reserved: wr_bytes,
 * the run's wcnt), or its error the run's (its units are not landed: the
 * run fails and punches to wtop), and its sink buffers given back. The
 * fill writer; before its fill's units are landed (dio_drain). */
static void dio_reap_one(struct cachetier *ct)
{
	struct ct_dio_job *j = cachetier__dio_oldest(&ct->wr.dio);
	struct ct_fill *fl = j->slot->fill;
	struct fill_buf *b = j->bufs;

	cachetier__dio_reap(&ct->wr.dio, j);
	if (j->err == 0) {
		atomic_fetch_add(&ct->wr_bytes, j->len);
		fl->wcnt += j->len;
	} else if (fl->werr == 0) {
		fl->werr = j->err;
	}
	for (int k = 0; k < j->n; k++) {
		struct fill_buf *next = b->next;

		buf_give(ct, b); /* held (dio_hold): out of the sinks' counts already */
		ct->wr.dio.held--;
		b = next;
	}
}

/* Every direct job in flight reaped: the batch's fills land only after. */
static void dio_drain(struct cachetier *ct)
{
	while (cachetier__dio_oldest(&ct->wr.dio))
		dio_reap_one(ct);
}

/* Direct fills' buffers held until they make a large job: a prefetch
 * fill's sink pushes its buffers one or two a batch (33 fills in flight
 * share the writer), so a job of what one batch holds was 160 KiB on
 * average, some 6,500 direct writes and as many wake-ups of the direct
 * writers a GB (tests/bench/README.md, "fill8"). The writer holds a direct
 * fill's buffers that follow each other (fl->dp, pending) and submits them
 * as one job of CT_DIO_IOV (2 MiB) once it has that many, at its run's end
 * (fill_group_write), or when it holds CT_DIO_HELD buffers (the fill with
 * the most pending first). No unit of a pending buffer lands before its
 * job is reaped (fl->wnext moves at the submit): a reader of a direct
 * fill's unit waits for its 2 MiB or its run's end. Held buffers leave
 * the sinks' counts at the hold (FILL_WQ_MAX's and FILL_BUFS_MAX's, each
 * with its wake-up), so a sink never pauses for buffers the writer holds
 * while it sleeps: every hold is bounded by CT_DIO_HELD. */
static void dio_unlist(struct ct_dio *d, struct ct_slot *slot)
{
	struct ct_slot **p = &d->pend;

	while (*p != slot)
		p = &(*p)->fill->dnext;
	*p = slot->fill->dnext;
	slot->fill->dnext = NULL;
}

/* The fill's pending buffers submitted as one job (dropped if its run
 * failed: a failed run's later bytes are dropped, as fill_write drops
 * them). */
static void dio_flush(struct cachetier *ct, struct ct_slot *slot)
{
	struct ct_dio *d = &ct->wr.dio;
	struct ct_fill *fl = slot->fill;
	struct iovec iov[CT_DIO_IOV];
	struct fill_buf *b = fl->dp;
	struct ct_dio_job *j;
	int n = 0;

	if (!fl->dpn)
		return;
	dio_unlist(d, slot);
	fl->dp = NULL;
	fl->dpn = 0;
	if (fl->werr) {
		while (b) {
			struct fill_buf *next = b->next;

			buf_give(ct, b);
			d->held--;
			b = next;
		}
		return;
	}
	for (struct fill_buf *x = b; x; x = x->next)
		iov[n++] = (struct iovec){.iov_base = x->data, .iov_len = x->used};
	cachetier__dio_start(d);
	while (!(j = cachetier__dio_job(d)))
		dio_reap_one(ct); /* CT_DIO_JOBS in flight: the oldest first */
	j->slot = slot;
	j->bufs = b;
	cachetier__dio_submit(d, j, slot->f, slot->c, fl->crc, fl->doff, iov, n);
	atomic_fetch_add_explicit(&ct->wr.fill_writes, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&d->jobs_sub, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&d->jobs_bufs, (unsigned)n, memory_order_relaxed);
	fl->wnext = fl->dend; /* if it fails, fl->werr says so before any landing */
}

/* b, the next buffer of slot's direct fill, held: appended to its
 * pending ones, submitted with them once CT_DIO_IOV; first, at
 * CT_DIO_HELD held, the fill with the most pending submitted and the
 * oldest job reaped until there is room. */
static void dio_hold(struct cachetier *ct, struct ct_slot *slot, struct fill_buf *b)
{
	struct ct_dio *d = &ct->wr.dio;
	struct ct_fill *fl = slot->fill;

	unsigned bound = d->held_max ? d->held_max : CT_DIO_HELD;

	if (fl->dpn && fl->dend != b->off)
		dio_flush(ct, slot); /* not the next bytes (never in a run): a job of its own */
	while (d->held >= bound) {
		if (!cachetier__dio_oldest(d)) {
			struct ct_slot *big = d->pend;

			if (!big)
				break; /* never: what is held is pending or in a job */
			for (struct ct_slot *x = d->pend; x; x = x->fill->dnext)
				if (x->fill->dpn > big->fill->dpn)
					big = x;
			dio_flush(ct, big);
			atomic_fetch_add_explicit(&d->held_flushes, 1, memory_order_relaxed);
		}
		if (cachetier__dio_oldest(d))
			dio_reap_one(ct);
	}
	if (++d->held > atomic_load_explicit(&d->held_peak, memory_order_relaxed))
		atomic_store_explicit(&d->held_peak, d->held, memory_order_relaxed);
	buf_unout(ct);
	wq_done(ct);
	b->next = NULL;
	if (!fl->dpn) {
		fl->dpt = &fl->dp;
		fl->doff = b->off;
		fl->dnext = d->pend;
		d->pend = slot;
	}
	*fl->dpt = b;
	fl->dpt = &b->next;
	fl->dend = b->off + b->used;
	if (++fl->dpn == CT_DIO_IOV)
		dio_flush(ct, slot);
}

/* Every fill's pending buffers submitted (the writer's stop). */
static void dio_flush_all(struct cachetier *ct)
{
	while (ct->wr.dio.pend)
		dio_flush(ct, ct->wr.dio.pend);
}

/* A run longer than ALLOC_MIN written buffered: at its first write (its
 * bytes from the run's start, nothing written or allocated yet: wtop
 * there), its blocks allocated whole (cachetier__run_alloc), so its writes
 * land in allocated extents: ext4's delayed allocation reserved and mapped
 * each block of each write (ext4_da_write_begin, a seventh of a prefetch's
 * CPU: tests/bench/README.md, "L4: a run's blocks allocated before its
 * writes"). wtop is then the run's end: a run that fails punches every
 * block it allocated (fill_after), as a failed write's. A small fill's
 * (a random read's) runs are left as they were; a refused allocation
 * (ENOSPC, a file system without it) leaves the writes as they were. */
#define ALLOC_MIN (CT_WRITEV_MAX * FILL_BUF_BYTES)

static void fill_alloc(struct ct_slot *slot, struct ct_fill *fl, uint64_t off, uint64_t end)
{
	struct ct_file *f = slot->f;
	uint64_t start = cachetier__unit_off(f, slot->c + fl->i),
		 len = cachetier__run_len(f, slot->c + fl->i, fl->k - fl->i);

	if (off == start && fl->wtop == start && len > ALLOC_MIN && end < start + len &&
	    cachetier__run_alloc(f, start, len) == 0)
		fl->wtop = start + len;
}

/* The buffers of one fill from b on that follow each other (the next
 * one's bytes start where this one's end; at most CT_WRITEV_MAX, no run's
 * end between) written with one pwritev, then their CRCs; returns the
 * item after them. A direct fill's are a job submitted to the direct
 * writers instead (their CRCs first), its buffers held until it is reaped
 * (dio_reap_one), which is before the batch lands any unit (dio_drain):
 * several direct writes in flight while the writer goes on. */
static struct fill_buf *fill_write(struct cachetier *ct, struct fill_buf *b)
{
	struct ct_slot *slot = b->slot;
	struct ct_fill *fl = slot->fill;
	struct iovec iov[CT_WRITEV_MAX];
	struct fill_buf *x = b;
	uint64_t end = b->off;
	int n = 0;

	CT_OFF_LOOP();
	for (; x && !x->end && x->off == end && n < CT_WRITEV_MAX; x = x->next) {
		iov[n++] = (struct iovec){.iov_base = x->data, .iov_len = x->used};
		end += x->used;
	}
	if (fl->werr == 0) {
		if (!slot->direct)
			fill_alloc(slot, fl, b->off, end);
		if (end > fl->wtop) /* past the run's blocks allocated ahead, if any */
			fl->wtop = end;
		/* a prefetch's the option names (slot->direct: no reader waits on
		 * it, cachetier_direct.c) through O_DIRECT, its whole blocks,
		 * while the file system takes it (no folio then); else a fill
		 * shorter than one pwritev's most (a random read's) a unit a
		 * pwritev: folios a punch takes whole (cachetier_punch.h) */
		if (slot->direct && ct->wr.dio.on &&
		    !atomic_load_explicit(&ct->wr.dio.refused, memory_order_relaxed)) {
			/* held until they make a job (dio_hold): every buffer
			 * that follows, not CT_WRITEV_MAX */
			for (x = b, end = b->off; x && !x->end && x->off == end;) {
				struct fill_buf *next = x->next;

				end += x->used;
				dio_hold(ct, slot, x);
				x = next;
			}
			if (end > fl->wtop)
				fl->wtop = end;
			return x;
		}
		dio_flush(ct, slot); /* refused since its last hold: what it holds first */
		if ((uint64_t)slot->n * slot->f->unit_bytes < CT_WRITEV_MAX * FILL_BUF_BYTES)
			fl->werr =
			    cachetier__writev_units(slot->f, slot->c, fl->crc, b->off, iov, n);
		else
			fl->werr = cachetier__run_writev(slot->f, slot->c, fl->crc, b->off, iov, n);
		atomic_fetch_add_explicit(&ct->wr.fill_writes, 1, memory_order_relaxed);
		if (fl->werr == 0) {
			/* on the disk now, still reserved: counted once (wr_bytes) */
			atomic_fetch_add(&ct->wr_bytes, end - b->off);
			fl->wcnt += end - b->off;
			fl->wnext = end;
		}
	}
	while (b != x) {
		struct fill_buf *next = b->next;

		buf_done(ct, b);
		b = next;
	}
	return x;
}

/* The run's units whose bytes are all written (up to fl->wnext): the
 * first one past them. No lock. */
static uint32_t fill_landed(const struct ct_slot *slot, const struct ct_fill *fl)
{
	const struct ct_file *f = slot->f;
	uint32_t u = fl->land;

	while (u < fl->k &&
	       cachetier__unit_off(f, slot->c + u) + cachetier__unit_len(f, slot->c + u) <=
		   fl->wnext)
		u++;
	return u;
}

/* The written bytes (all written: landing units) of fl's run that leave
 * reserved, out of the written ones (ct->wr_gone) just before they do: a
 * look between the two counts them twice (on the disk and in reserved),
 * never not at all. The fill writer. */
static void wr_landing(struct cachetier *ct, struct ct_fill *fl, uint64_t n)
{
	atomic_fetch_add(&ct->wr_gone, n);
	fl->wcnt -= n;
}

/* The run's written bytes that did not land (a failed run's, punched)
 * out of the written ones. The fill writer. */
static void wr_gone(struct cachetier *ct, struct ct_fill *fl)
{
	if (fl->wcnt)
		atomic_fetch_add(&ct->wr_gone, fl->wcnt);
	fl->wcnt = 0;
}

/* A batch's first half for one fill, with no ct->lock: the items of the
 * fill (fl->wb, in the order pushed) written (a direct fill's submitted:
 * fill_write), fl->wend the run's end if the batch holds it (always the
 * fill's last item: the run's next items are pushed only once the writer
 * ended it); then, once every direct job of the batch was reaped
 * (dio_drain: its bytes on the disk), fill_group_land: the units they complete
 * landed (cachetier__run_land: CRCs stored, write locks turned into read
 * locks: the system calls of making them valid) and made readable under
 * their object's lock alone (cachetier__run_landed: marked landed, their
 * waiting readers woken, who commit them themselves: a unit is readable
 * as it lands, not when its fill ends, and the writer takes no ct->lock
 * for it). fl->wland: the first unit past them. */
static void fill_group_write(struct cachetier *ct, struct ct_slot *slot)
{
	struct ct_fill *fl = slot->fill;
	struct fill_buf *b = fl->wb;

	fl->wb = NULL;
	while (b && !b->end)
		b = fill_write(ct, b);
	assert(!b || (b->end && !b->next));
	fl->wend = b;
	if (b)
		dio_flush(ct, slot); /* the run's end: what it holds, a job */
}

static void fill_group_land(struct cachetier *ct, struct ct_slot *slot)
{
	struct ct_fill *fl = slot->fill;

	fl->wland = fl->werr == 0 ? fill_landed(slot, fl) : fl->land;
	if (fl->wland > fl->land) {
		cachetier__run_land(slot->f, slot->c + fl->land, fl->wland - fl->land,
				    fl->crc + fl->land);
		atomic_fetch_add_explicit(&ct->wr.fill_publishes, 1, memory_order_relaxed);
	}
	/* the run goes on past the batch: its units readable now, their
	 * readers woken (they commit them); a run that ends in the batch is
	 * published whole under the batch's take, its readers woken after it
	 * (batch_publish: every unit of the run valid before any reader of
	 * it goes on, as a fill's end makes them) */
	if (!fl->wend && fl->wland > fl->land) {
		wr_landing(ct, fl,
			   cachetier__run_len(slot->f, slot->c + fl->land, fl->wland - fl->land));
		cachetier__run_landed(ct, slot->f, slot->c + fl->land, fl->wland - fl->land,
				      fl->wland == fl->k, 1, 0);
		fl->land = fl->wland;
	}
}

/* Units [c + pub, c + land) of the run, committed as they landed
 * (cachetier__run_landed; those of this batch here, with the run's end),
 * are published at the run's end: the fill's end leaves them alone
 * (FILL_PUBLISHED) and their bytes count as the fill's (pub_bytes: out of
 * ct->reserved since they landed). The fill writer; ct->lock held. */
static void fill_publish(struct cachetier *ct, struct ct_slot *slot, struct ct_fill *fl)
{
	struct ct_file *f = slot->f;
	uint32_t u = fl->land;

	if (fl->wland > u) { /* landed in this batch, the run's end with them */
		wr_landing(ct, fl, cachetier__run_len(f, slot->c + u, fl->wland - u));
		cachetier__run_landed(ct, f, slot->c + u, fl->wland - u, fl->wland == fl->k, 0, 1);
		u = fl->land = fl->wland;
	}
	if (u == fl->pub)
		return;
	for (uint32_t x = fl->pub; x < u; x++) {
		fl->pub_bytes += cachetier__unit_len(f, slot->c + x);
		fl->errs[x] = 0;
		fl->claim[x] = FILL_PUBLISHED;
	}
	fl->pub = u;
}

/* The run of slot ended with err (its bytes before the end written), under
 * the batch's take of ct->lock, after its landed units were made valid
 * (fill_publish): the link as this fill saw it noted, and, for the
 * last run of a store's fill on its I/O thread that leaves nothing to
 * punch, the fill's end (cachetier__fill_end_locked; the slot is another
 * fill's once ct->lock is dropped): 0. Otherwise 1: after the take a
 * failed run's bytes that no unit made valid are punched from fl->wfrom
 * (perhaps of a version that changed meanwhile: never counted, so they
 * must not stay on the disk) before their units' write locks go, then the
 * next run or the fill's end (fill_after). */
static int fill_run_end(struct cachetier *ct, struct ct_slot *slot, int err, int64_t now)
{
	struct ct_fill *fl = slot->fill;
	struct ct_file *f = slot->f;
	int punch;

	fl->wfrom = cachetier__unit_off(f, slot->c + fl->pub);
	if (fl->pub == fl->k)
		err = 0; /* every unit landed (and counted): an error after them costs none */
	else if (err == 0)
		err = fl->werr ? fl->werr : -EIO; /* -EIO never: every byte was written */
	if (err == 0 && fl->s.wrote) /* the link as this fill saw it (cachetier_span.c) */
		cachetier__link_note(ct, fl->s.first_ns - fl->t0, fl->s.end - fl->s.start,
				     now - fl->s.first_ns);
	for (uint32_t x = fl->pub; x < fl->k; x++)
		fl->errs[x] = err;
	fl->i = fl->k;
	punch = err < 0 && fl->wtop > fl->wfrom;
	if (!punch) {
		fl->wfrom = fl->wtop = fl->wnext;
		wr_gone(ct, fl); /* none left (every written unit landed) */
	}
	if (fl->async && !punch && cachetier__fill_skip(slot, fl->k) == slot->n) {
		cachetier__fill_end_locked(slot);
		return 0;
	}
	return 1;
}

/* After the batch's take: a run that ended without ending its fill
 * (fill_run_end's 1) punches what it must, then sends the next run
 * or ends the fill (cachetier__fill_next: a store on its I/O thread), or
 * its worker goes on (one reading in the caller). No lock held. */
static void fill_after(struct ct_slot *slot)
{
	struct ct_fill *fl = slot->fill;

	if (fl->wtop > fl->wfrom)
		cachetier__run_discard(slot->f, fl->wfrom, fl->wtop - fl->wfrom);
	wr_gone(slot->ct, fl); /* off the disk (still reserved until the fill's end) */
	if (fl->async)
		cachetier__fill_next(slot);
	else
		sem_post(&fl->run_sem);
}

/* Wake the readers of units [c, c + n) of f: f->lock taken. */
static void fill_wake(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n)
{
	disk_mutex_lock(&f->lock);
	cachetier__units_landed(ct, f, c, n);
	disk_mutex_unlock(&f->lock);
}

static void batch_take(struct cachetier *ct, struct fill_buf *l, struct ct_slot ***gt);

/* Direct writes in flight (every fill of the batch a direct one, none
 * held): while the oldest job is not done and the sinks pushed more, the
 * writer takes it into the batch (batch_take) and submits it, up to
 * DIO_MORE takes, rather than wait for the disk with nothing submitted;
 * only then the batch drains and lands. A batch with a fill some reader
 * waits on (a demand or readahead fill: buffered) lands without waiting
 * for more. */
#define DIO_MORE 4

static void dio_more(struct cachetier *ct, struct ct_slot *groups, struct ct_slot **gt)
{
	struct ct_dio *d = &ct->wr.dio;

	for (int k = 0; k < DIO_MORE; k++) {
		struct ct_dio_job *j = cachetier__dio_oldest(d);
		struct fill_buf *l;

		for (struct ct_slot *slot = groups; slot; slot = slot->fill->wgn)
			if (!slot->direct)
				return;
		if (!j || atomic_load(&ct->wr.whold) || atomic_load(&ct->wr.wstop) ||
		    !atomic_load_explicit(&ct->wr.wq, memory_order_relaxed))
			return;
		l = atomic_exchange_explicit(&ct->wr.wq, NULL, memory_order_acquire);
		batch_take(ct, l, &gt);
		for (struct ct_slot *slot = groups; slot; slot = slot->fill->wgn)
			if (slot->fill->wb)
				fill_group_write(ct, slot);
	}
}

/* The fills of one batch (groups: their slots, linked by wgn, each with
 * its items in fl->wb): every fill's buffers written (the direct
 * ones' jobs reaped: dio_drain) and units landed first (fill_group_write,
 * fill_group_land: readable, their readers woken, under each
 * object's lock alone), then, only when a run ended, one take of ct->lock
 * for all of them (each ended run's landed units published, its end; one
 * take a batch with a run's end, none for a batch without, not one a
 * fill), then, with the lock dropped, the runs that go on sent. */
static void batch_publish(struct cachetier *ct, struct ct_slot *groups, struct ct_slot **gt)
{
	struct ct_slot *after = NULL, **at = &after;
	/* the ended runs' units published under the take: their readers,
	 * woken after it (a batch holds at most a run of each slot's) */
	struct wake_run {
		struct ct_file *f;
		uint32_t c, n;
	} wake[16];
	unsigned nwake = 0;
	int ends = 0, wrote = 0;
	int64_t now;

	for (struct ct_slot *slot = groups; slot; slot = slot->fill->wgn)
		fill_group_write(ct, slot);
	dio_more(ct, groups, gt);
	dio_drain(ct); /* the direct writes returned: their bytes on the disk */
	for (struct ct_slot *slot = groups; slot; slot = slot->fill->wgn) {
		slot->fill->wgrp = 0;
		fill_group_land(ct, slot);
		ends |= slot->fill->wend != NULL;
		wrote |= slot->fill->wend && slot->fill->s.wrote;
	}
	if (!ends)
		return;				/* units landed (readable), no run ended: no take */
	now = wrote ? cachetier__mono_ns() : 0; /* the runs' ends as the writer sees them */
	cachetier__lock(ct);
	while (groups) {
		struct ct_slot *slot = groups;
		struct ct_fill *fl = slot->fill;
		struct fill_buf *end = fl->wend;

		groups = fl->wgn; /* read first: the slot may end below */
		if (!end)
			continue; /* its landed units wait for its run's end (or a reader) */
		if (fl->wland > fl->pub && nwake < sizeof(wake) / sizeof(wake[0]))
			wake[nwake++] =
			    (struct wake_run){slot->f, slot->c + fl->pub, fl->wland - fl->pub};
		else if (fl->wland > fl->pub) /* more fills than kept: woken under the take */
			fill_wake(ct, slot->f, slot->c + fl->pub, fl->wland - fl->pub);
		fill_publish(ct, slot, fl);
		fl->wend = NULL;
		if (fill_run_end(ct, slot, end->err, now)) {
			fl->wgn = NULL;
			*at = slot;
			at = &fl->wgn;
		}
	}
	disk_mutex_unlock(&ct->lock);
	for (unsigned i = 0; i < nwake; i++)
		fill_wake(ct, wake[i].f, wake[i].c, wake[i].n);
	while (after) {
		struct ct_slot *slot = after;

		after = slot->fill->wgn; /* read first: the slot is the next run's */
		fill_after(slot);
	}
}

int cachetier__write_push(struct cachetier *ct, struct ct_wjob *j, struct ct_file *f, uint32_t c0,
			  uint32_t *crc, int *werr, uint64_t *wrote, uint64_t off, const void *buf,
			  size_t len)
{
	struct fill_buf *b = malloc(sizeof(*b) + len);

	if (!b)
		return -ENOMEM;
	*b = (struct fill_buf){.job = j,
			       .f = f,
			       .c0 = c0,
			       .crc = crc,
			       .werr = werr,
			       .wrote = wrote,
			       .off = off,
			       .used = len};
	memcpy(b->data, buf, len);
	cachetier__wq_push(ct, b);
	return 0;
}

void cachetier__write_wait(struct cachetier *ct, struct ct_wjob *j)
{
	struct fill_buf *b = calloc(1, sizeof(*b));

	CT_OFF_LOOP();
	if (!b) { /* no barrier to be had: wait for the queue to drain */
		while (atomic_load(&ct->wr.wq))
			sched_yield();
		return;
	}
	if (sem_init(&j->done, 0, 0) < 0) {
		free(b);
		return;
	}
	b->job = j;
	cachetier__wq_push(ct, b);
	while (sem_wait(&j->done) < 0 && errno == EINTR)
		;
	sem_destroy(&j->done);
}

/* The fill writer: a job's write (its units' CRC32C, then the bytes; on
 * the disk now and still reserved until its job's units land: counted in
 * ct->wr_bytes and the job's *wrote, as a fill's are) or its barrier
 * (every write pushed before it is done). */
static void job_write(struct cachetier *ct, struct fill_buf *b)
{
	struct ct_file *f = b->f;

	if (!b->used) {
		sem_post(&b->job->done);
	} else if (*b->werr == 0) {
		*b->werr = cachetier__run_write(f, b->c0, b->crc, b->off, b->data, b->used);
		if (*b->werr == 0) {
			atomic_fetch_add(&ct->wr_bytes, b->used);
			*b->wrote += b->used;
		}
	}
	free(b);
}

/* What the writer took (l, newest first), oldest first: the jobs' writes
 * and barriers in their order, each fill's items in theirs, appended to
 * its items in the batch (fl->wb); a fill not yet in the batch's groups
 * joins them at *gt (fills in the order of their first item). */
static void batch_take(struct cachetier *ct, struct fill_buf *l, struct ct_slot ***gt)
{
	struct fill_buf *fifo = NULL;

	while (l) { /* newest first: reversed */
		struct fill_buf *next = l->next;

		l->next = fifo;
		fifo = l;
		l = next;
	}
	while (fifo) {
		struct fill_buf *b = fifo;
		struct ct_fill *fl;

		fifo = b->next;
		if (b->job) {
			job_write(ct, b);
			continue;
		}
		fl = b->slot->fill;
		if (!fl->wgrp) { /* the fill's first item in the batch */
			fl->wgrp = 1;
			fl->wgn = NULL;
			**gt = b->slot;
			*gt = &fl->wgn;
		}
		if (!fl->wb)
			fl->wbt = &fl->wb;
		b->next = NULL;
		*fl->wbt = b;
		fl->wbt = &b->next;
	}
}

/* The fill writer's thread: takes what the sinks pushed (a batch), oldest
 * first: the jobs' writes and barriers in their order, each fill's items
 * in theirs (fill_group; fills in the order of their first item). */
void *cachetier__writer_main(void *arg)
{
	struct cachetier *ct = arg;

	for (;;) {
		struct fill_buf *l;
		struct ct_slot *groups = NULL, **gt = &groups;

		while (sem_wait(&ct->wr.wsem) < 0 && errno == EINTR)
			;
		if (atomic_load(&ct->wr.whold) && !atomic_load(&ct->wr.wstop))
			continue; /* the hold's end posts again */
		l = atomic_exchange_explicit(&ct->wr.wq, NULL, memory_order_acquire);
		if (!l && atomic_load(&ct->wr.wstop))
			break;
		batch_take(ct, l, &gt);
		if (groups)
			batch_publish(ct, groups, gt);
		atomic_store_explicit(&ct->wr.wlock_takes, cachetier__lock_takes,
				      memory_order_relaxed);
		atomic_store_explicit(&ct->wr.wlock_busy, cachetier__lock_busy,
				      memory_order_relaxed);
	}
	dio_flush_all(ct); /* none held at stop but a run's that never ended */
	dio_drain(ct);
	cachetier__dio_stop(&ct->wr.dio); /* every job was reaped */
	return NULL;
}

void cachetier_write_hold(struct cachetier *ct, int hold)
{
	atomic_store(&ct->wr.whold, hold != 0);
	if (!hold && ct->wr.have_writer)
		sem_post(&ct->wr.wsem); /* takes the pile (a spare wake-up finds none) */
}
