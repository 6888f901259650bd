/*
 * cachetier_span.c — what the fetch scheduler's planner
 * (fetch/fetch_planner.c) needs of the unit store beyond
 * cachetier_obj_prefetch_range: each fill's timing (cachetier__link_note,
 * handed to the observer cachetier_set_fill_timing installed: the link is
 * measured in fetch/fetch_link.c), spans of planned extents fetched with
 * the bytes between them (cachetier_obj_prefetch_span: which units are
 * planned and which lie between, as the caller's pieces say), and what the
 * readers hold (cachetier_held_get: the bytes they pin, the share of the
 * cache fills ahead may take as the rules say, the unit). Under ct->lock.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "cachetier_i.h"

int64_t cachetier__mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void cachetier__link_note(struct cachetier *ct, int64_t ttfb_ns, uint64_t bytes, int64_t xfer_ns)
{
	if (ct->timing_fn)
		ct->timing_fn(ct->timing_ctx, ttfb_ns, bytes, xfer_ns);
}

void cachetier_set_fill_timing(struct cachetier *ct, cachetier_fill_timing_fn fn, void *ctx)
{
	cachetier__lock(ct);
	ct->timing_fn = fn;
	ct->timing_ctx = ctx;
	disk_mutex_unlock(&ct->lock);
}

void cachetier_held_get(struct cachetier *ct, struct cachetier_held *h)
{
	uint64_t pinned = 0;

	cachetier__lock(ct);
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
	h->ahead_max = cachetier__ahead_share(ct); /* the rules' */
	disk_mutex_unlock(&ct->lock);
	h->pinned = pinned;
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
	cachetier__lock(ct);
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
					cachetier__ua_set(f, c, now);
					cachetier__unread_set(f, c, 1);
				}
			} else if (f->ust[c] == UNIT_EMPTY) {
				f->gap[c] = 1; /* fetched only because it lies between */
			}
		}
		cachetier__ev_mark_units(ct, f, c0, c1); /* eviction's order (cachetier_evheap.c) */
		err = cachetier__range_push(ct, f, c0, c1, mode == CACHETIER_PF_EVICT, 0);
		cachetier__work_wake(ct); /* within a cachetier_wake_hold: once at its end */
	}
	disk_mutex_unlock(&ct->lock);
	return err;
}
