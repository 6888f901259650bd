/*
 * cachetier_direct.c — prefetch fills' bytes written with O_DIRECT.
 *
 * Which fills: those of a prefetch (ct_slot.pf: `shardfs prefetch` and
 * the warm, an object's cursor; a plan's lookahead, a range), which no
 * reader waits on when they start (cachetier_write.c, fill_write). A demand
 * or readahead fill stays buffered: its reader preads the units from the
 * data file right after they land, from the page cache. For the others
 * the page cache's copy, the dirty pages' writeback and, at their
 * eviction, the punch's folio work are spent on bytes nobody reads soon
 * (cachetier/README.md, "Direct fills").
 *
 * How: a second fd of the data file, opened with O_DIRECT by the fill
 * writer at its first direct write of the object (f->dfd), used for the
 * whole blocks (CT_DIO_ALIGN) of a write from an aligned offset out of
 * buffers at aligned addresses (the sinks' pool buffers are:
 * cachetier__buf_get); what follows the first piece that is not (a
 * shard's last partial unit, a buffer the sink sent part-full) goes
 * through the buffered fd after them.
 *
 * Several in flight: a direct pwritev waits for the disk, and one at a
 * time on the fill writer it made the prefetch 65 % slower than buffered
 * (tests/bench/README.md). So the writer submits each write as a job
 * (cachetier__dio_submit) to a pool of CT_DIO_THREADS threads, which write
 * the jobs in the order queued, and goes on with the next buffers and
 * fills of its batch; at most CT_DIO_JOBS are in flight (a ring the
 * writer reaps oldest first when it is full), and every job of a batch is
 * reaped before any of the batch's units lands (cachetier_write.c,
 * dio_drain): a unit is still published only after the write of its last
 * byte returned, and a failed job fails its run as a failed pwritev did.
 * Each wait (the reap's) is for writes under way or queued before: at
 * most CT_DIO_JOBS writes of up to 512 KiB each; none waits on a lock
 * held across a write. Without the pool (no thread started) a job is
 * written in the submitter, as before.
 *
 * The CRC32C before the write: each unit's CRC32C is computed over the
 * job's bytes in their order when it is submitted, while the sink's bytes
 * are fresh in the cache (after a direct write they were cold: 26 % of
 * the samples were the CRC's). They are the very bytes written: O_DIRECT
 * has the device read the user buffers themselves (no copy), the buffered
 * rest reads them too, and nothing writes a sink buffer from its push
 * until the job is reaped (the writer gives it back to the pool only
 * then). A job that fails leaves its run failed: its CRCs are never
 * stored.
 *
 * Mixing direct writes with buffered reads and writes of the same file:
 * a unit is published (readable) only after the write of its last byte
 * returned (cachetier_write.c), so no reader reads a range whose direct
 * write is under way; a direct write invalidates the page cache's pages of
 * its range, and a buffered write of a partial block shares no block with
 * a direct one (direct ranges are whole blocks, the buffered rest starts
 * where they end). Durability is unchanged: the flusher's fdatasync of the
 * data fd before a map names a unit covers a direct write's metadata (the
 * file's size, its allocated extents) as it does a buffered one's.
 *
 * A file system that refuses O_DIRECT (EINVAL at the open or a write; no
 * STATX_DIOALIGN, as tmpfs, whose pages are the page cache anyway; an
 * alignment CT_DIO_ALIGN does not meet) is refused once for the tier
 * (ct_dio.refused, counted in direct_fallbacks), silently: every fill is
 * buffered from then on. What it does not do: direct reads (readers read
 * through the page cache as before), or direct writes of a batch's or a
 * demand fill's bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cachetier_i.h"

/* The data directory's file system refuses O_DIRECT: counted once. */
static void dio_refuse(struct ct_dio *d)
{
	if (!atomic_exchange(&d->refused, 1))
		atomic_fetch_add(&d->fallbacks, 1);
}

/* f's O_DIRECT fd, opened at its first use: the fd, or -1 (refused,
 * d->refused set; or another error: this write buffered). */
static int dio_fd(struct ct_dio *d, struct ct_file *f)
{
	struct statx sx;
	int fd;

	if (f->dfd >= 0)
		return f->dfd;
	/* the data file exists: its buffered fd is open (file_load) */
	fd = openat(f->dirfd, f->hash, O_RDWR | O_DIRECT | O_CLOEXEC);
	if (fd < 0) {
		if (errno == EINVAL)
			dio_refuse(d);
		return -1;
	}
	/* what the file system asks of a direct write (its logical block
	 * size): none said (tmpfs) or more than CT_DIO_ALIGN: refused */
	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) < 0 ||
	    !(sx.stx_mask & STATX_DIOALIGN) || !sx.stx_dio_offset_align || !sx.stx_dio_mem_align ||
	    CT_DIO_ALIGN % sx.stx_dio_offset_align || CT_DIO_ALIGN % sx.stx_dio_mem_align) {
		close(fd);
		dio_refuse(d);
		return -1;
	}
	f->dfd = fd;
	return fd;
}

void cachetier__dio_close(struct ct_file *f)
{
	if (f->dfd >= 0)
		close(f->dfd);
	f->dfd = -1;
}

/* v[0..n) through fd from off, all of it (a short write goes on from
 * where it stopped): 0 or -errno. The buffered part of a job. */
static int buf_pwritev(int fd, const struct iovec *iov, int n, uint64_t off)
{
	struct iovec v[CT_DIO_IOV];

	for (int k = 0; k < n; k++)
		v[k] = iov[k];
	return disk_pwritev_all(fd, v, n, off);
}

/* Job j's bytes to the disk (a pool thread, or the submitter without
 * one): its whole blocks from an aligned off through j->dfd, each
 * buffer's while it starts at an aligned address, up to the first
 * partial block; the rest from where the direct part stopped (its end, a
 * short write's end, its start after a refusal) through the buffered fd.
 * Touches j and d's atomics only. */
static void job_run(struct ct_dio *d, struct ct_dio_job *j)
{
	struct iovec v[CT_DIO_IOV], rest[CT_DIO_IOV];
	size_t dlen = 0, done = 0;
	int nd = 0, nr = 0;

	j->err = 0;
	if (j->dfd >= 0 && !(j->off % CT_DIO_ALIGN) &&
	    !atomic_load_explicit(&d->refused, memory_order_relaxed)) {
		for (int k = 0; k < j->n; k++) {
			size_t l = j->iov[k].iov_len, whole = l - l % CT_DIO_ALIGN;

			if ((uintptr_t)j->iov[k].iov_base % CT_DIO_ALIGN)
				break;
			if (whole)
				v[nd++] = (struct iovec){.iov_base = j->iov[k].iov_base,
							 .iov_len = whole};
			dlen += whole;
			if (whole < l)
				break;
		}
	}
	if (j->cut && dlen) { /* tests: half the blocks, as a short write */
		size_t keep = dlen / CT_DIO_ALIGN / 2 * CT_DIO_ALIGN, at = 0;
		int k = 0;

		for (; k < nd && at + v[k].iov_len <= keep; k++)
			at += v[k].iov_len;
		if (k < nd && keep > at)
			v[k++].iov_len = keep - at;
		nd = k;
		dlen = keep;
	}
	if (j->cut < 0) { /* tests: refused, as a file system's EINVAL */
		dio_refuse(d);
		dlen = 0;
	}
	while (dlen) {
		ssize_t w = pwritev(j->dfd, v, nd, (off_t)j->off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EINVAL) /* refused: this job and later ones buffered */
			dio_refuse(d);
		else if (w < 0)
			j->err = -errno;
		else
			done = (size_t)w;
		break;
	}
	if (j->err)
		return;
	if (done) {
		atomic_fetch_add_explicit(&d->bytes, done, memory_order_relaxed);
		atomic_fetch_add_explicit(&d->writes, 1, memory_order_relaxed);
	}
	/* the rest, from byte done on (a short write's too), buffered */
	for (size_t at = 0, i = 0; i < (size_t)j->n; i++) {
		size_t l = j->iov[i].iov_len;

		if (at + l > done && l)
			rest[nr++] = at >= done
					 ? j->iov[i]
					 : (struct iovec){.iov_base = (char *)j->iov[i].iov_base +
								      (done - at),
							  .iov_len = at + l - done};
		at += l;
	}
	if (nr)
		j->err = buf_pwritev(j->f->datafd, rest, nr, j->off + done);
}

/* A pool thread: the queue's jobs in order, one at a time. */
static void *dio_main(void *arg)
{
	struct ct_dio *d = arg;

	pthread_mutex_lock(&d->lock);
	for (;;) {
		struct ct_dio_job *j = d->q;

		if (!j && d->stop)
			break;
		if (!j) {
			pthread_cond_wait(&d->work, &d->lock);
			continue;
		}
		d->q = j->next;
		if (!d->q)
			d->qt = &d->q;
		pthread_mutex_unlock(&d->lock);
		job_run(d, j);
		pthread_mutex_lock(&d->lock);
		j->done = 1;
		pthread_cond_broadcast(&d->fin);
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

void cachetier__dio_start(struct ct_dio *d)
{
	if (d->nthreads || d->stop)
		return;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->work, NULL);
	pthread_cond_init(&d->fin, NULL);
	d->qt = &d->q;
	for (int i = 0; i < CT_DIO_THREADS; i++) {
		if (pthread_create(&d->th[d->nthreads], NULL, dio_main, d) != 0)
			break; /* fewer threads (none: each job written in the submitter) */
		pthread_setname_np(d->th[d->nthreads], "shardfs-dio");
		d->nthreads++;
	}
	if (!d->nthreads) {
		d->stop = 1; /* none: not tried again (no thread reads it) */
		pthread_cond_destroy(&d->fin);
		pthread_cond_destroy(&d->work);
		pthread_mutex_destroy(&d->lock);
	}
}

void cachetier__dio_stop(struct ct_dio *d)
{
	assert(!d->count);
	if (!d->nthreads)
		return;
	pthread_mutex_lock(&d->lock);
	d->stop = 1;
	pthread_cond_broadcast(&d->work);
	pthread_mutex_unlock(&d->lock);
	for (int i = 0; i < d->nthreads; i++)
		pthread_join(d->th[i], NULL);
	d->nthreads = 0;
	pthread_cond_destroy(&d->fin);
	pthread_cond_destroy(&d->work);
	pthread_mutex_destroy(&d->lock);
}

struct ct_dio_job *cachetier__dio_job(struct ct_dio *d)
{
	if (d->count == CT_DIO_JOBS)
		return NULL;
	return &d->jobs[(d->head + d->count) % CT_DIO_JOBS];
}

struct ct_dio_job *cachetier__dio_oldest(struct ct_dio *d)
{
	return d->count ? &d->jobs[d->head] : NULL;
}

void cachetier__dio_submit(struct ct_dio *d, struct ct_dio_job *j, struct ct_file *f, uint32_t c0,
			   uint32_t *crc, uint64_t off, const struct iovec *iov, int n)
{
	size_t len = 0;

	CT_OFF_LOOP();
	assert(n > 0 && n <= CT_DIO_IOV && j == cachetier__dio_job(d));
	/* the CRCs first, while the sink's bytes are fresh in this core's
	 * cache: the direct write reads these very buffers (DMA from the user
	 * pages, no copy), and nothing writes them until the job is reaped */
	for (int k = 0; k < n; k++) {
		cachetier__run_crc(f, c0, crc, off + len, iov[k].iov_base, iov[k].iov_len);
		j->iov[k] = iov[k];
		len += iov[k].iov_len;
	}
	j->f = f;
	j->n = n;
	j->off = off;
	j->len = len;
	j->err = 0;
	j->done = 0;
	j->next = NULL;
	d->submitted++;
	j->cut = d->einval_at && d->submitted == d->einval_at ? -1
		 : d->cut_every				      ? d->submitted % d->cut_every == 0
							      : 0;
	j->dfd = d->on && !atomic_load_explicit(&d->refused, memory_order_relaxed) &&
			 !(off % CT_DIO_ALIGN)
		     ? dio_fd(d, f)
		     : -1;
	d->count++;
	if (!d->nthreads || j->dfd < 0) { /* buffered (or no pool): written here, now */
		job_run(d, j);
		j->done = 1;
		return;
	}
	pthread_mutex_lock(&d->lock);
	*d->qt = j;
	d->qt = &j->next;
	pthread_cond_signal(&d->work);
	pthread_mutex_unlock(&d->lock);
}

void cachetier__dio_reap(struct ct_dio *d, struct ct_dio_job *j)
{
	assert(d->count && j == &d->jobs[d->head]);
	if (d->nthreads) {
		pthread_mutex_lock(&d->lock);
		while (!j->done)
			pthread_cond_wait(&d->fin, &d->lock);
		pthread_mutex_unlock(&d->lock);
	}
	assert(j->done);
	d->head = (d->head + 1) % CT_DIO_JOBS;
	d->count--;
}

int cachetier__dio_writev(struct ct_dio *d, struct ct_file *f, uint32_t c0, uint32_t *crc,
			  uint64_t off, const struct iovec *iov, int n)
{
	struct ct_dio_job *j;

	while ((j = cachetier__dio_oldest(d)))
		cachetier__dio_reap(d, j);
	j = cachetier__dio_job(d);
	cachetier__dio_submit(d, j, f, c0, crc, off, iov, n);
	cachetier__dio_reap(d, j);
	return j->err;
}
