/*
 * fs_ctl_i.h — what fs_ctl.c (the control files' rendering and commands)
 * and fs_ctl_counters.c (the table of every counter) share: one moment's
 * values (struct ctl_snapshot) and the table's row. Private to the two.
 */
#ifndef FS_CTL_I_H
#define FS_CTL_I_H

#include <stddef.h>
#include <stdint.h>

#include "fs_view.h"

/* The objects prefetch commands asked for: their bytes, how many of them
 * are cached now, how many their latest prefetch skipped because they did
 * not fit, and how many of them are still being prefetched; the same of
 * the objects the latest run named (fs_ctl_run; run_before: of those,
 * bytes cached when it named them). */
struct pf_progress {
	uint64_t want, have, unfit, pending;
	uint64_t run, run_want, run_have, run_unfit, run_pending, run_before;
};

/* One moment's values of everything a counter shows that is not a field
 * of fs->c: gathered once per rendering (collect_snapshot). */
struct ctl_snapshot {
	struct cachetier_stats cs;
	struct backend_stats bs;
	struct pf_progress pf;
	uint64_t objects, shards, dirs; /* live ones (old versions stay until unmount) */
	uint64_t source_bytes, offline, fill_threads, connections, cache_room;
	uint64_t warm_state, warm_wanted, warm_done, warm_unfit;
	struct fs_plan_totals plan;
	struct fetch_link link;
	uint64_t link_ttfb_ms;
	struct cachetier_batch_result batch;
	struct fetch_stage_stats stage;
};

/* Every counter, in the order of the stats file: its name (a JSON key, and
 * shardfs_NAME in metrics), its help text (metrics' # HELP), its type, and
 * where its value lives: a relaxed atomic of fs->c (FS) or a uint64_t of
 * the snapshot (SNAP), as an offset checked for its type at compile time.
 * A counter more is one line here. */
enum ctl_type {
	CTL_COUNTER,   /* only ever counts up: shardfs_NAME_total, a Prometheus counter */
	CTL_GAUGE,     /* goes up and down, or is set once */
	CTL_GAUGE_MS,  /* a gauge in milliseconds: NAME_ms in stats, shardfs_NAME_seconds */
	CTL_COUNTER_MS /* counts up, in milliseconds: NAME_ms in stats,
			* shardfs_NAME_seconds_total */
};
enum ctl_src { CTL_FS, CTL_SNAP };
struct ctl_counter {
	const char *name;
	const char *help;
	enum ctl_type type;
	enum ctl_src src;
	size_t off;
};

/* The table, in the order of the stats file (fs_ctl_counters.c) */
extern const struct ctl_counter fs_ctl_counters[];
extern const size_t fs_ctl_ncounters;

#endif
