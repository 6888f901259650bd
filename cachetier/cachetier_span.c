/*
 * cachetier_span.c — what a planner (fs/core/fs_plan_fetch.c) needs of the
 * unit store beyond cachetier_obj_prefetch_range: the link as this
 * process's own fills saw it (cachetier_link_get), and spans of planned
 * extents fetched with the bytes between them (cachetier_obj_prefetch_span),
 * and what the readers hold (cachetier_held_get: the bytes they pin, the
 * share of the cache fills ahead may take, the unit).
 *
 * The link: every fill (cachetier_fill.c fill_chunk) that got its bytes
 * reports the time from its request to the first byte and from there to
 * the last; the estimate is a decayed average (each sample weighs 1/8, the
 * ones before 7/8 of what they weighed): the time to first byte of every
 * fill, the rate of fills of LINK_RATE_MIN bytes or more (bytes over time
 * summed, so long fills weigh by their length: a short one says more about
 * the first TCP window than about the connection's pace). Under ct->lock.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "cachetier_i.h"

/* Fills shorter than this measure no rate (they last a few ms after the
 * first byte, which bursts of the first congestion windows may bring
 * faster than the connection's pace: fills of 256 KiB measured 1.5-3 x
 * the 60 MB/s of tests/bench/link_bench.py's emulator). */
#define LINK_RATE_MIN (1u << 20)

int64_t cachetier__mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void cachetier__link_note(struct cachetier *ct, int64_t ttfb_ns, uint64_t bytes, int64_t xfer_ns)
{
	if (ttfb_ns < 0)
		ttfb_ns = 0;
	disk_mutex_lock(&ct->lock);
	if (ct->link_samples == 0)
		ct->link_ttfb_ns = ttfb_ns;
	else
		ct->link_ttfb_ns += (ttfb_ns - ct->link_ttfb_ns) / 8;
	ct->link_samples++;
	if (bytes >= LINK_RATE_MIN && xfer_ns > 0) {
		ct->link_bytes = ct->link_bytes - ct->link_bytes / 8 + bytes;
		ct->link_ns = ct->link_ns - ct->link_ns / 8 + (uint64_t)xfer_ns;
		ct->link_rate_samples++;
	}
	disk_mutex_unlock(&ct->lock);
}

void cachetier_link_get(struct cachetier *ct, struct cachetier_link *l)
{
	disk_mutex_lock(&ct->lock);
	l->ttfb_ns = ct->link_samples ? (uint64_t)ct->link_ttfb_ns : 0;
	l->rate = 0;
	if (ct->link_rate_samples && ct->link_ns)
		l->rate = (uint64_t)((double)ct->link_bytes * 1e9 / (double)ct->link_ns);
	l->samples = ct->link_samples;
	disk_mutex_unlock(&ct->lock);
}

void cachetier_held_get(struct cachetier *ct, struct cachetier_held *h)
{
	uint64_t pinned = 0;

	disk_mutex_lock(&ct->lock);
	for (const struct ct_file *f = ct->files; f; f = f->next) {
		for (uint32_t c = 0; f->live && c < f->nunits; c++) {
			if (f->pins[c] > 0)
				pinned += cachetier__unit_len(f, c);
		}
	}
	for (const struct cachetier_obj *o = ct->dec_objs; o; o = o->dnext) {
		if (o->dec && o->dpins > 0)
			pinned += o->dec->bytes;
	}
	disk_mutex_unlock(&ct->lock);
	h->pinned = pinned;
	h->ahead_max = ct->cfg.cache_size_bytes / CT_AHEAD_SHARE;
	h->unit = ct->unit;
}

int cachetier_obj_prefetch_span(struct cachetier_obj *o, const struct cachetier_piece *x, size_t n,
				enum cachetier_prefetch_mode mode)
{
	struct cachetier *ct = o->ct;
	struct ct_file *f = o->file;
	uint32_t c0, c1;
	uint64_t end = 0;
	int err = 0;

	for (size_t i = 0; i < n; i++) {
		if (x[i].off > o->size || x[i].len > o->size - x[i].off ||
		    (i > 0 && x[i].off < x[i - 1].off))
			return -EINVAL;
		if (x[i].off + x[i].len > end)
			end = x[i].off + x[i].len;
	}
	if (!f || n == 0 || end <= x[0].off)
		return 0;
	c0 = (uint32_t)(x[0].off / f->unit_bytes);
	c1 = (uint32_t)((end - 1) / f->unit_bytes + 1);
	disk_mutex_lock(&ct->lock);
	if (!ct->stopping) {
		int64_t now = cachetier__now_ns();
		size_t i = 0;

		for (uint32_t c = c0; c < c1; c++) {
			uint64_t lo = (uint64_t)c * f->unit_bytes, hi = lo + f->unit_bytes;
			int planned = 0;

			/* pieces are sorted by offset: skip those that end before c */
			while (i < n && x[i].off + x[i].len <= lo)
				i++;
			for (size_t k = i; k < n && x[k].off < hi && !planned; k++)
				planned = x[k].len > 0 && x[k].off + x[k].len > lo;
			if (planned) {
				/* as cachetier__file_prefetch_range: needed ahead */
				f->gap[c] = 0;
				if (f->ust[c] == UNIT_VALID && f->pins[c] == 0) {
					f->uatime[c] = now;
					f->unread[c] = 1;
				}
			} else if (f->ust[c] == UNIT_EMPTY) {
				f->gap[c] = 1; /* fetched only because it lies between */
			}
		}
		err = cachetier__range_push(ct, f, c0, c1, mode == CACHETIER_PF_EVICT, 0);
		pthread_cond_signal(&ct->work_cond);
	}
	disk_mutex_unlock(&ct->lock);
	return err;
}
