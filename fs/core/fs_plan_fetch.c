/*
 * fs_plan_fetch.c — the plan fetcher's thread: the core tells the fetch
 * scheduler's planner (fetch/fetch_planner.c, which decides what of the
 * plans is fetched, how much and when) about its plans, and wakes it.
 *
 * One thread. fs_plan.c's listener hook wakes it at every publish, clear
 * and read of a planned path (once the read's reply is sent and the cache
 * units it pinned are released: fs_plan_wake); it then runs one pass of
 * the planner (fetch_planner_pass). The planner sees the plans through
 * struct fetch_plans_src: the adapters below, over fs_plan.h.
 *
 * Non-goals: local sources (their files are read in place).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs_i.h"

_Static_assert(FETCH_PLANS_MAX == FS_PLAN_MAX, "a pass looks at every plan");
_Static_assert((int)FETCH_PLAN_DECODED == (int)FS_PLAN_DECODED &&
		   (int)FETCH_PLAN_HEADER == (int)FS_PLAN_HEADER,
	       "the planner's flags are the plans' flags");

/* Extents converted per call (the planner asks for at most this many). */
#define PFX_AHEAD_MAX 64u

static void pfx_wake(void *ctx)
{
	struct fs *fs = ctx;

	fs_thread_wake(&fs->pfx);
}

static size_t src_list(void *ctx, void **out, size_t max)
{
	struct fs_plan *p[FS_PLAN_MAX];
	size_t n = fs_plan_list(ctx, p, max < FS_PLAN_MAX ? max : FS_PLAN_MAX);

	for (size_t i = 0; i < n; i++)
		out[i] = p[i];
	return n;
}

static void src_put(void *plan)
{
	fs_plan_put(plan);
}

static void src_info(const void *plan, struct fetch_plan_info *in)
{
	struct fs_plan_info i;

	fs_plan_get_info(plan, &i);
	in->paths = i.paths;
	in->read = i.read;
	in->position = i.position;
	in->bytes = i.bytes;
}

static uint32_t src_ahead(const void *plan, uint32_t *from, struct fetch_plan_extent *out,
			  uint32_t *idx, uint32_t max)
{
	struct fs_plan_extent x[PFX_AHEAD_MAX];
	uint32_t n = fs_plan_ahead(plan, from, x, idx, max < PFX_AHEAD_MAX ? max : PFX_AHEAD_MAX);

	for (uint32_t k = 0; k < n; k++) {
		out[k].obj = x[k].obj;
		out[k].flags = x[k].flags;
		out[k].off = x[k].off;
		out[k].len = x[k].len;
	}
	return n;
}

static uint64_t src_bytes_before(const void *plan, uint32_t i)
{
	return fs_plan_bytes_before(plan, i);
}

static void src_wake_at(void *plan, uint32_t position)
{
	fs_plan_wake_at(plan, position);
}

static int src_raw(void *ctx, uint32_t obj, struct cachetier_obj **raw)
{
	return fs_obj_raw(ctx, obj, raw);
}

static void src_batch_refused(void *ctx)
{
	(void)ctx;
	fs_log(FS_LOG_WARN, "plan: the store refused GetBatch (/v1/ml/moss): "
			    "planned paths are fetched with ranged GETs");
}

static void src_stage_weak(void *ctx, uint32_t obj)
{
	const struct fs_obj *o = fs_obj(ctx, obj);

	fs_log(FS_LOG_WARN,
	       "plan: --plan-memory stages nothing of '%s' nor of any other object whose ETag is "
	       "weak or made of the mtime and size (as nginx's): --weak-etag trust takes such "
	       "ETags as they are; their planned spans go through the cache (counted in "
	       "plan_stage_weak; said once)",
	       o->key);
}

static void *pfx_main(void *arg)
{
	struct fs *fs = arg;

	while (!fs_thread_wait(&fs->pfx, 0))
		fetch_planner_pass(fs->planner);
	return NULL;
}

void fs_plan_fetch_start(struct fs *fs)
{
	struct fetch_plans_src src = {
	    .ctx = fs,
	    .list = src_list,
	    .put = src_put,
	    .info = src_info,
	    .ahead = src_ahead,
	    .bytes_before = src_bytes_before,
	    .wake_at = src_wake_at,
	    .raw = src_raw,
	    .batch_refused = src_batch_refused,
	    .stage_weak = src_stage_weak,
	};
	struct fetch_plan_config cfg = {
	    .gap = fs->cfg.plan_gap_bytes,
	    .lookahead = fs->cfg.plan_lookahead_bytes,
	    .memory = fs->cfg.plan_memory_bytes,
	    .cache_size = fs->cfg.cache_size_bytes,
	    .chunk = fs->cfg.ct.chunk_bytes,
	    .connections = fs->cfg.be.connections,
	    .max_connections = fs->cfg.be.max_connections,
	    .get_batch =
		fs->cfg.get_batch == FS_GET_BATCH_AUTO && strncmp(fs->cfg.source, "ais://", 6) == 0,
	};

	if (backend_is_local(fs->be) || fs->cfg.plan_lookahead_bytes == 0)
		return;
	if (fetch_planner_new(fs->fetch, &src, &cfg, &fs->c.pf, &fs->planner) < 0) {
		fs_log(FS_LOG_ERR, "plan: no memory: plans are kept but not fetched ahead");
		return;
	}
	fs_plan_set_listener(fs, pfx_wake, fs);
	if (fs_thread_start(&fs->pfx, pfx_main, fs) < 0) {
		fs_plan_set_listener(fs, NULL, NULL);
		fetch_planner_free(fs->planner);
		fs->planner = NULL;
		fs_log(FS_LOG_ERR, "plan: plans are kept but not fetched ahead");
	}
}

int fs_plan_fetch_stop(struct fs *fs)
{
	int err = fs_thread_stop(&fs->pfx);

	if (err == 0) {
		fetch_planner_free(fs->planner); /* puts the plans it held */
		fs->planner = NULL;
	}
	return err;
}
