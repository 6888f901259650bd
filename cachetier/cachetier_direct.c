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
 * through the buffered fd after them. Each unit's CRC32C is computed over
 * the very bytes written, in their order, after their write, as
 * cachetier__run_writev does.
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

/* v[0..n) (whole blocks from an aligned off) through fd: 0; -EINVAL
 * (refused); or another -errno. *done: the bytes written (a short write
 * stops there: the caller writes the rest buffered). */
static int dio_pwritev(int fd, const struct iovec *iov, int n, uint64_t off, size_t *done)
{
	ssize_t w;

	*done = 0;
	do
		w = pwritev(fd, iov, n, (off_t)off);
	while (w < 0 && errno == EINTR);
	if (w < 0)
		return -errno;
	*done = (size_t)w;
	return 0;
}

int cachetier__dio_writev(struct ct_dio *d, struct ct_file *f, uint32_t c0, uint32_t *crc,
			  uint64_t off, const struct iovec *iov, int n)
{
	struct iovec v[CT_WRITEV_MAX], rest[CT_WRITEV_MAX];
	size_t dlen = 0, done = 0;
	int nd = 0, nr = 0, k, fd, err;

	CT_OFF_LOOP();
	assert(n > 0 && n <= CT_WRITEV_MAX);
	if (!d->on || atomic_load_explicit(&d->refused, memory_order_relaxed) || off % CT_DIO_ALIGN)
		return cachetier__run_writev(f, c0, crc, off, iov, n);
	/* the whole blocks from off: each buffer's while it starts at an
	 * aligned address (and so offset); the first with a partial block
	 * ends them */
	for (k = 0; k < n; k++) {
		size_t l = iov[k].iov_len, whole = l - l % CT_DIO_ALIGN;

		if ((uintptr_t)iov[k].iov_base % CT_DIO_ALIGN)
			break;
		if (whole)
			v[nd++] = (struct iovec){.iov_base = iov[k].iov_base, .iov_len = whole};
		dlen += whole;
		if (whole < l)
			break;
	}
	if (!dlen || (fd = dio_fd(d, f)) < 0)
		return cachetier__run_writev(f, c0, crc, off, iov, n);
	err = dio_pwritev(fd, v, nd, off, &done);
	if (err == -EINVAL) { /* refused by the file system: this write and later ones buffered */
		dio_refuse(d);
		return cachetier__run_writev(f, c0, crc, off, iov, n);
	}
	if (err < 0)
		return err;
	atomic_fetch_add_explicit(&d->bytes, done, memory_order_relaxed);
	/* the CRCs of what was written direct, before the rest's (a unit's
	 * CRC32C runs over its bytes in order) */
	for (size_t at = 0, i = 0; at < done; i++) {
		size_t l = v[i].iov_len < done - at ? v[i].iov_len : done - at;

		cachetier__run_crc(f, c0, crc, off + at, v[i].iov_base, l);
		at += l;
	}
	/* the rest, from byte done on (a short write's too), buffered */
	for (size_t at = 0, i = 0; i < (size_t)n; i++) {
		size_t l = iov[i].iov_len;

		if (at + l > done && l)
			rest[nr++] =
			    at >= done
				? iov[i]
				: (struct iovec){.iov_base = (char *)iov[i].iov_base + (done - at),
						 .iov_len = at + l - done};
		at += l;
	}
	return nr ? cachetier__run_writev(f, c0, crc, off + done, rest, nr) : 0;
}
