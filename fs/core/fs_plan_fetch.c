/*
 * fs_plan_fetch.c — fetching ahead along the reading plans (fs_i.h): a
 * shuffled epoch over a remote dataset larger than the cache misses on
 * nearly every sample, and each miss waits a round trip; a reader that
 * published its order (fs_plan.c) gets its samples fetched before it asks,
 * at the rate of every connection instead of one round trip per sample.
 *
 * One thread. fs_plan.c's listener hook wakes it at every publish, clear
 * and read of a planned path; it then looks at each plan: from the plan's
 * position (1 + the furthest planned path read) on, the extents not read
 * yet, in plan order, are handed to the cache tier as range prefetches
 * (cachetier_obj_prefetch_range, CACHETIER_PF_EVICT: they may evict what
 * was read, never what was fetched ahead and not read yet) until the
 * bytes from the position to the last extent handed over reach the
 * plan's share of the lookahead. The cache tier fetches ranges in the
 * order given, after demand and readahead fills, one request per chunk a
 * range lies in, and skips units that are there already; a reader that
 * reaches an extent first fills it on demand.
 *
 * The lookahead: --plan-lookahead, at most a quarter of --cache-size (the
 * rest holds what readers read meanwhile, and what other plans and mounts
 * sharing the directory need), split evenly over the plans published now.
 * So what is fetched ahead fits in the cache with room to spare and is not
 * evicted before its reader gets there. A plan's members of compressed
 * shards are fetched as whole objects (decoding reads from the start).
 *
 * Non-goals: local sources (their files are read in place); ordering
 * between plans (each has its share; the cache tier serves ranges in the
 * order handed over, so plans interleave at the pace of their readers).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs_i.h"

/* Extents looked at per call of fs_plan_ahead. */
#define PFX_BATCH 64u

/* What the fetcher knows of one plan: the plan (a reference held), the
 * index of the next extent to hand over and how much of it was handed
 * over already (the lookahead's end cut it). */
struct pfx_plan {
	struct fs_plan *p;
	uint32_t next;
	uint64_t part;
};

static void pfx_wake(void *ctx)
{
	struct fs *fs = ctx;

	fs_thread_wake(&fs->pfx);
}

/* Hand bytes [from, to) of extent x to the cache tier (all of a
 * compressed shard's at from 0: decoding needs the whole object). */
static void pfx_issue(struct fs *fs, const struct fs_plan_extent *x, uint64_t from, uint64_t to)
{
	struct cachetier_obj *raw;
	int err;

	if (fs_obj_raw(fs, x->obj, &raw) < 0)
		return; /* logged */
	if (x->flags & FS_PLAN_DECODED) {
		if (from > 0)
			return;
		err = cachetier_obj_prefetch(raw, CACHETIER_PF_EVICT);
		to = x->len;
	} else {
		/* the header with the first piece (FS_PLAN_HEADER) */
		uint64_t hdr = from == 0 && (x->flags & FS_PLAN_HEADER) ? 512 : 0;

		err = cachetier_obj_prefetch_range(raw, x->off + from - hdr, to - from + hdr,
						   CACHETIER_PF_EVICT);
	}
	if (err < 0)
		return; /* the object changed size (a refresh) or no memory: a reader fetches it */
	if (from == 0)
		fs->c.plan_fetch_paths++;
	fs->c.plan_fetch_bytes += to - from;
}

/* Hand over the extents of plan s from its position on, up to share bytes
 * past the position: an extent across that end only up to it (the rest
 * once the position moves). */
static void pfx_plan(struct fs *fs, struct pfx_plan *s, uint64_t share)
{
	struct fs_plan_extent x[PFX_BATCH];
	uint32_t idx[PFX_BATCH];
	struct fs_plan_info in;
	uint64_t limit;

	fs_plan_get_info(s->p, &in);
	if (s->next < in.position) {
		s->next = in.position;
		s->part = 0;
	}
	limit = fs_plan_bytes_before(s->p, in.position) + share;
	while (s->next < in.paths && fs_plan_bytes_before(s->p, s->next) < limit) {
		uint32_t from = s->next, n = fs_plan_ahead(s->p, &from, x, idx, PFX_BATCH);

		for (uint32_t k = 0; k < n; k++) {
			uint64_t at = fs_plan_bytes_before(s->p, idx[k]), part = 0, to;

			if (at >= limit) {
				s->next = idx[k];
				s->part = 0;
				return;
			}
			if (idx[k] == s->next)
				part = s->part;
			to = x[k].len < limit - at ? x[k].len : limit - at;
			if (to > part)
				pfx_issue(fs, &x[k], part, to);
			if (to < x[k].len) {
				s->next = idx[k];
				s->part = to > part ? to : part;
				return;
			}
		}
		s->next = from;
		s->part = 0;
	}
}

/* One pass: the plans now (those that went are dropped from st, new ones
 * start at their position), each fetched ahead within its share. */
static size_t pfx_pass(struct fs *fs, struct pfx_plan *st, size_t nst)
{
	struct fs_plan *now[FS_PLAN_MAX];
	struct pfx_plan next[FS_PLAN_MAX];
	size_t n = fs_plan_list(fs, now, FS_PLAN_MAX);
	uint64_t budget = fs->cfg.cache_size_bytes / 4, share;

	if (fs->cfg.plan_lookahead_bytes < budget)
		budget = fs->cfg.plan_lookahead_bytes;
	share = n ? budget / n : 0;
	for (size_t i = 0; i < n; i++) {
		next[i].p = now[i];
		next[i].next = 0;
		next[i].part = 0;
		for (size_t k = 0; k < nst; k++) {
			if (st[k].p == now[i])
				next[i] = st[k];
		}
	}
	for (size_t k = 0; k < nst; k++)
		fs_plan_put(st[k].p);
	for (size_t i = 0; i < n; i++) {
		if (share > 0)
			pfx_plan(fs, &next[i], share);
		st[i] = next[i];
	}
	return n;
}

static void *pfx_main(void *arg)
{
	struct fs *fs = arg;
	struct pfx_plan st[FS_PLAN_MAX];
	size_t nst = 0;

	while (!fs_thread_wait(&fs->pfx, 0))
		nst = pfx_pass(fs, st, nst);
	for (size_t k = 0; k < nst; k++)
		fs_plan_put(st[k].p);
	return NULL;
}

void fs_plan_fetch_start(struct fs *fs)
{
	if (backend_is_local(fs->be) || fs->cfg.plan_lookahead_bytes == 0)
		return;
	fs_plan_set_listener(fs, pfx_wake, fs);
	if (fs_thread_start(&fs->pfx, pfx_main, fs) < 0) {
		fs_plan_set_listener(fs, NULL, NULL);
		fs_log(FS_LOG_ERR, "plan: plans are kept but not fetched ahead");
	}
}

int fs_plan_fetch_stop(struct fs *fs)
{
	return fs_thread_stop(&fs->pfx);
}
