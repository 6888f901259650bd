/*
 * cachetier_direct.h — prefetch fills written with O_DIRECT
 * (cachetier_direct.c): bytes no reader waits for gain nothing from the
 * page cache, whose copy, dirty writeback and later folio work on a punch
 * are all waste for them (cachetier/README.md, "Direct fills"). Private to
 * the cache tier; included by cachetier_i.h.
 */
#ifndef CACHETIER_DIRECT_H
#define CACHETIER_DIRECT_H

#include <stdatomic.h>
#include <stdint.h>

struct ct_file;
struct iovec;

/* What a direct write's buffers, offsets and lengths are aligned to: a
 * page, a multiple of every logical block size a data file system here
 * asks for (statx's STATX_DIOALIGN, checked at the first open: one that
 * asks for more, or says nothing, is refused). The sinks' buffers start
 * at such an address (cachetier__buf_get). */
#define CT_DIO_ALIGN 4096u

/* The tier's direct writes (struct cachetier's wr.dio). */
struct ct_dio {
	int on;			 /* cfg.direct_fills: set at open, read only after */
	atomic_int refused;	 /* the data directory's file system refused O_DIRECT (an
				  * open's or a write's EINVAL, no STATX_DIOALIGN: tmpfs):
				  * every fill is buffered from then on */
	atomic_ullong bytes;	 /* bytes written with O_DIRECT */
	atomic_ullong fallbacks; /* 1 once refused (counted once: per file system) */
};

/* A prefetch fill's buffers iov[0..n) (at most CT_WRITEV_MAX, following
 * each other from off), written as cachetier__run_writev writes them (the
 * same bytes, each unit's CRC32C over them once written), but their whole
 * blocks through f's O_DIRECT fd (f->dfd, opened at its first use): from
 * off, while the buffers start at an aligned address and offset, each
 * buffer's whole blocks; the rest (a shard's last partial unit, a
 * buffer the sink sent part-full) through the buffered fd, after them.
 * Refused (d->refused set, counted once): the whole write buffered. The
 * bytes a direct write wrote are on the disk, not in the page cache, when
 * it returns; readers see them only once their unit is published, after
 * this returns (cachetier_write.c), and their buffered reads then read
 * them from the disk. 0 or -errno. The fill writer; no lock held. */
int cachetier__dio_writev(struct ct_dio *d, struct ct_file *f, uint32_t c0, uint32_t *crc,
			  uint64_t off, const struct iovec *iov, int n);
/* f's O_DIRECT fd closed (with its data file's). */
void cachetier__dio_close(struct ct_file *f);

#endif
