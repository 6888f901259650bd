/*
 * fs_ctl.c — the files of MOUNTPOINT/.shardfs/: counters as JSON (stats)
 * and as Prometheus text (metrics), and the commands written to control
 * (prefetch, refresh). Rendered on GETATTR (and on open with
 * --strict-open) in a layout that is the same in every snapshot (see
 * fs_ctl_render). Never contains credentials:
 * the source is shown as the backend describes it.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disk_json.h"
#include "fs_view.h"
#include "shardfs_config.h"

const char *const fs_ctl_names[FS_CTL_COUNT] = {".shardfs", "stats", "metrics", "control", "plans"};

struct out {
	char *buf;
	size_t len, cap;
	int err;
};

static void outf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void outf(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->err)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			o->err = -EINVAL;
			return;
		}
		if ((size_t)n < o->cap - o->len) {
			o->len += (size_t)n;
			return;
		}
		size_t cap = (o->cap + (size_t)n + 1) * 2;
		char *p = realloc(o->buf, cap);

		if (!p) {
			o->err = -ENOMEM;
			return;
		}
		o->buf = p;
		o->cap = cap;
	}
}

/* A JSON string literal of s (quotes, control characters and DEL escaped:
 * disk_json_esc). */
static void out_json_str(struct out *o, const char *s)
{
	outf(o, "\"");
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		char e[8];

		outf(o, "%.*s", (int)disk_json_esc(*p, e), e);
	}
	outf(o, "\"");
}

/* The objects prefetch commands asked for: their bytes, how many of them
 * are cached now, how many their latest prefetch skipped because they did
 * not fit, and how many of them are still being prefetched; the same of
 * the objects the latest run named (fs_ctl_run; run_before: of those,
 * bytes cached when it named them). */
struct pf_progress {
	uint64_t want, have, unfit, pending;
	uint64_t run, run_want, run_have, run_unfit, run_pending, run_before;
};

static void prefetch_progress(struct fs *fs, struct pf_progress *p)
{
	int run;

	memset(p, 0, sizeof(*p));
	run = fs_ctl_run(fs, &p->run_before);
	p->run = (uint64_t)run;
	for (uint32_t i = 0; i < fs->nobjs; i++) {
		struct fs_obj *o = fs_obj(fs, i);
		struct cachetier_obj *raw;
		uint64_t unfit = 0, size, have = 0, pending = 0;
		int tag = atomic_load(&o->prefetch);

		if (!tag || !fs_obj_live(o))
			continue;
		size = fs_obj_size(o);
		disk_mutex_lock(&o->lock);
		raw = o->raw;
		disk_mutex_unlock(&o->lock);
		if (raw) {
			have = cachetier_obj_cached_bytes(raw);
			pending = (uint64_t)cachetier_obj_prefetch_state(raw, &unfit);
		}
		p->want += size;
		p->have += have;
		p->pending += pending;
		p->unfit += unfit;
		if (run && tag == run) {
			p->run_want += size;
			p->run_have += have;
			p->run_pending += pending;
			p->run_unfit += unfit;
		}
	}
}

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
};

static void collect_snapshot(struct fs *fs, struct ctl_snapshot *s)
{
	struct fs_warm_progress wp;

	memset(s, 0, sizeof(*s));
	cachetier_get_stats(fs->ct, &s->cs);
	backend_get_stats(fs->be, &s->bs);
	prefetch_progress(fs, &s->pf);
	fs_plan_totals(fs, &s->plan);
	fetch_link_get(fs->fetch, &s->link);
	cachetier_batch_stats(fs->ct, &s->batch);
	s->link_ttfb_ms = s->link.ttfb_ns / 1000000;
	fs_warm_progress(fs, &wp);
	s->warm_state = wp.state;
	s->warm_wanted = wp.wanted;
	s->warm_done = wp.done;
	s->warm_unfit = wp.unfit;
	for (uint32_t i = 0; i < fs->nobjs; i++) {
		const struct fs_obj *o = fs_obj(fs, i);

		if (fs_obj_live(o) && atomic_load(&o->known) != FS_INFO_MISSING) {
			s->objects++;
			s->shards += o->codec >= 0;
		}
	}
	fs_ns_rdlock(fs);
	for (uint32_t i = 0; i < fs->ndirs; i++)
		s->dirs += !fs->dirs[i].gone;
	fs_ns_unlock(fs);
	s->source_bytes = fs->total_bytes;
	s->offline = (uint64_t)fs->offline;
	s->fill_threads = fs->cfg.ct.fill_threads;
	s->connections = fs->cfg.be.connections;
	s->cache_room = fs_cache_room(fs);
}

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

#define FS(f)                                                                                      \
	CTL_FS, offsetof(struct fs_counters, f) +                                                  \
		    0 * sizeof(char[_Generic(((struct fs_counters *)0)->f, atomic_ullong : 1,      \
					     unsigned long long : 1)])
#define SNAP(f)                                                                                    \
	CTL_SNAP, offsetof(struct ctl_snapshot, f) +                                               \
		      0 * sizeof(char[_Generic(((struct ctl_snapshot *)0)->f, uint64_t : 1)])
#define C CTL_COUNTER
#define G CTL_GAUGE
static const struct ctl_counter ctl_counters[] = {
    {"objects", "objects in the source", G, SNAP(objects)},
    {"shards", "objects that are shards", G, SNAP(shards)},
    {"source_dirs", "directories in the source", G, SNAP(dirs)},
    {"source_bytes", "bytes of all objects in the source", G, SNAP(source_bytes)},
    {"hidden_names", "names hidden by a conflict (x.tar and x.tar.gz, a shard and a directory)", G,
     FS(hidden_names)},
    {"source_offline", "1: the store was unreachable at mount, the listing came from the cache", G,
     SNAP(offline)},
    {"brace_learned",
     "objects of a brace pattern whose size and ETag the store told on first need (one HEAD "
     "each)",
     C, FS(brace_learned)},
    {"brace_missing", "names of a brace pattern the store does not have (404): ENOENT, not listed",
     C, FS(brace_missing)},
    {"index_built", "shard indexes built by reading the shard", C, FS(index_built)},
    {"index_loaded", "shard indexes loaded from the cache directory", C, FS(index_loaded)},
    {"index_errors", "shards that could not be indexed", C, FS(index_errors)},
    {"index_save_errors", "indexes that could not be saved", C, FS(index_save_errors)},
    {"index_saved_rejected",
     "saved indexes in the cache directory found unusable at load (damaged, cut or of another "
     "version): built again from the shard",
     C, FS(index_saved_rejected)},
    {"index_unsaved",
     "shard indexes served from memory because the cache disk had no room to save them", C,
     FS(index_unsaved)},
    {"index_removed",
     "indexes of shards' older versions removed from the cache directory (replaced by this "
     "mount's)",
     C, FS(index_removed)},
    {"index_bytes_scanned", "shard bytes read to build indexes", C, FS(index_bytes_scanned)},
    {"index_mem_bytes", "heap memory held by loaded indexes", G, FS(index_mem_bytes)},
    {"index_mapped_bytes", "index files mapped read-only (page cache, not heap)", G,
     FS(index_mapped_bytes)},
    {"members", "entries in loaded shard indexes", G, FS(members)},
    {"damaged_shards", "loaded shards with damage", G, FS(damaged_shards)},
    {"skipped_members", "members left out (unsafe names, special files)", C, FS(skipped_members)},
    {"lookups", "lookup requests", C, FS(lookups)},
    {"getattrs", "getattr requests", C, FS(getattrs)},
    {"readdirs", "readdir requests", C, FS(readdirs)},
    {"listed_names_only", "listed entries given by name and type only (--listing-attrs)", C,
     FS(listed_names_only)},
    {"reads", "read requests", C, FS(reads)},
    {"read_bytes", "bytes returned by reads", C, FS(read_bytes)},
    {"read_errors", "reads answered with an error", C, FS(read_errors)},
    {"reads_inflight",
     "reads of files being answered now (until their reply is sent and the cache units "
     "they read are released; reads of .shardfs files not counted)",
     G, FS(reads_inflight)},
    {"op_errors", "other requests that failed (answers such as ENOENT not counted)", C,
     FS(op_errors)},
    {"xattr_requests",
     "getxattr and listxattr requests (without --xattr the kernel stops after "
     "the first ENOSYS)",
     C, FS(xattr_requests)},
    {"decoded_streams", "compressed shards decoded into the cache", C, SNAP(cs.decoded_streams)},
    {"decoded_bytes", "bytes written by decoding", C, SNAP(cs.decoded_bytes)},
    {"decoded_reused", "decoded copies reused from the cache", C, SNAP(cs.decoded_reused)},
    {"cache_hits", "read ranges found in the cache", C, SNAP(cs.hits)},
    {"cache_misses", "read ranges that waited for a fill", C, SNAP(cs.misses)},
    {"cache_miss_wait_ms", "time those reads waited for their units, summed", CTL_COUNTER_MS,
     SNAP(cs.miss_wait_ms)},
    {"bytes_fetched", "bytes fetched from the store into the cache", C, SNAP(cs.bytes_fetched)},
    {"bytes_received",
     "body bytes the remote store sent that reached the daemon (more than bytes_fetched when a "
     "server ignores Range)",
     C, SNAP(bs.bytes_received)},
    {"fills", "fill requests completed: a chunk, or the units a random read needed", C,
     SNAP(cs.fills)},
    {"fills_inflight", "fill requests running now", G, SNAP(cs.fills_inflight)},
    {"fill_threads",
     "fills in flight at once but those of small planned ranges (one more than connections)", G,
     SNAP(fill_threads)},
    {"connections", "most parallel connections to a remote store", G, SNAP(connections)},
    {"fill_errors", "units whose fill failed", C, SNAP(cs.fill_errors)},
    {"readahead_fills", "fills started by readahead or prefetch", C, SNAP(cs.readahead_fills)},
    {"cache_queued_waits", "units reads waited for whose fill was queued, not started", C,
     SNAP(cs.queued_waits)},
    {"prefetch_withdrawn",
     "prefetch and warm fills stopped part-way to free a connection for a reader's fill", C,
     SNAP(cs.prefetch_withdrawn)},
    {"evictions", "objects evicted from the cache", C, SNAP(cs.evictions)},
    {"evicted_bytes", "bytes evicted from the cache", C, SNAP(cs.evicted_bytes)},
    {"decoded_evictions", "decoded copies evicted (decoded again when read)", C,
     SNAP(cs.decoded_evictions)},
    {"cache_peer_units", "units read that another process or an earlier mount filled", C,
     SNAP(cs.peer_units)},
    {"cache_weak_probes",
     "units fetched again to compare with the cached ones: objects with a weak or "
     "mtime-derived ETag (nginx), one per fill read",
     C, SNAP(cs.weak_probes)},
    {"cache_weak_changed",
     "objects found changed under a weak or mtime-derived ETag: their cached units dropped, "
     "ESTALE for the old version",
     C, SNAP(cs.weak_changed)},
    {"cache_peer_waits", "fills that waited for another process filling the same unit", C,
     SNAP(cs.peer_waits)},
    {"cache_room_waits", "fills that waited for another's eviction", C, SNAP(cs.room_waits)},
    {"cache_room_wait_ms", "time they waited", CTL_COUNTER_MS, SNAP(cs.room_wait_ms)},
    {"cache_room_make_ms", "time fills spent making room", CTL_COUNTER_MS, SNAP(cs.room_make_ms)},
    {"cache_units_corrupt",
     "cached units found damaged (bad CRC32C, data file cut) and fetched again; decoded copies: "
     "read failed with EIO",
     C, SNAP(cs.units_corrupt)},
    {"cache_units_checked",
     "cached units read back and their CRC32C checked before a read served them", C,
     SNAP(cs.units_checked)},
    {"cache_watch_own",
     "data files watched with fanotify: this mount's own fills are no change to them", G,
     SNAP(cs.watch_own)},
    {"cache_bypass_reads", "reads served from the store without caching: no room on the disk", C,
     SNAP(cs.bypass_reads)},
    {"cache_bypass_bytes", "bytes of those reads", C, SNAP(cs.bypass_bytes)},
    {"cache_bytes_used", "cached bytes in the whole cache directory", G, SNAP(cs.bytes_used)},
    {"cache_bytes_limit", "the cache size limit", G, SNAP(cs.bytes_limit)},
    {"cache_room_bytes", "bytes the cache can take without evicting (limit and disk reserve)", G,
     SNAP(cache_room)},
    {"cache_unfit_bytes", "bytes prefetch and warm fills skipped: no room without evicting", C,
     SNAP(cs.unfit_bytes)},
    {"local_fds_open", "local shard files open now (bounded by the open-file limit)", G,
     SNAP(cs.local_fds_open)},
    {"local_fd_reopens", "local shard files opened again after the bound closed them", C,
     SNAP(cs.local_fd_reopens)},
    {"prefetch_requests", "objects asked to be prefetched", C, FS(prefetch_requests)},
    {"prefetch_errors", "prefetch requests that failed", C, FS(prefetch_errors)},
    {"shard_prefetches", "shards fetched ahead of an in-order reader", C, FS(shard_prefetches)},
    {"prefetch_bytes", "bytes of the objects asked to be prefetched", G, SNAP(pf.want)},
    {"prefetch_cached_bytes", "of those, bytes in the cache now", G, SNAP(pf.have)},
    {"prefetch_unfit_bytes", "of those, bytes their prefetch skipped: the cache was full", G,
     SNAP(pf.unfit)},
    {"prefetch_pending", "of those objects, how many are still being prefetched", G,
     SNAP(pf.pending)},
    {"prefetch_run", "the latest prefetch run (a 'shardfs prefetch'): its id, 0: none", G,
     SNAP(pf.run)},
    {"prefetch_run_bytes", "bytes of the objects the latest prefetch run named", G,
     SNAP(pf.run_want)},
    {"prefetch_run_before_bytes", "of those, bytes cached when the run named them", G,
     SNAP(pf.run_before)},
    {"prefetch_run_cached_bytes", "of those, bytes in the cache now", G, SNAP(pf.run_have)},
    {"prefetch_run_unfit_bytes", "of those, bytes skipped: the cache was full", G,
     SNAP(pf.run_unfit)},
    {"prefetch_run_pending", "of those objects, how many are still being prefetched", G,
     SNAP(pf.run_pending)},
    {"warm_state", "warm fill: 0 off, 1 running, 2 done, 3 stopped (cache full or errors)", G,
     SNAP(warm_state)},
    {"warm_bytes_wanted", "bytes of the objects the warm fill fetches", G, SNAP(warm_wanted)},
    {"warm_bytes_done", "of those, bytes in the cache now", G, SNAP(warm_done)},
    {"warm_unfit_bytes", "of those, bytes the warm skipped: the cache was full", G,
     SNAP(warm_unfit)},
    {"store_requests", "requests to the remote store", C, SNAP(bs.requests)},
    {"store_attempts", "HTTP attempts of those requests (retries, redirects)", C,
     SNAP(bs.attempts)},
    {"store_failures",
     "requests that spent their retry budget: the store went down (but for "
     "GetBatch's, which fail alone)",
     C, SNAP(bs.failures)},
    {"store_fast_fails", "requests failed at once (EIO) while the store was down", C,
     SNAP(bs.fast_fails)},
    {"store_probes", "probes of the store while it was down", C, SNAP(bs.probes)},
    {"store_cancels", "requests cancelled at shutdown", C, SNAP(bs.cancels)},
    {"store_down", "1 while the store is down (requests fail at once)", G, SNAP(bs.down)},
    {"store_list_requests",
     "listing pages asked of the store (ListObjectsV2 pages of 1000 keys, autoindex pages): at "
     "mount and at each refresh",
     C, SNAP(bs.list_requests)},
    {"store_short_bodies",
     "answers whose body ended before their headers said (cut, Content-Length short of the "
     "range): retried from where they stopped",
     C, SNAP(bs.short_bodies)},
    {"store_range_ignored", "answers 200 (the whole object) to a ranged GET: Range ignored", C,
     SNAP(bs.range_ignored)},
    {"store_pauses", "fill transfers paused: the fill writer had no room for their bytes", C,
     SNAP(bs.pauses)},
    {"store_resumes", "paused fill transfers resumed (the fill writer's wake-ups, or the bound)", C,
     SNAP(bs.resumes)},
    {"store_pause_backstops", "paused fill transfers resumed by the 1 s bound, not a wake-up", C,
     SNAP(bs.pause_backstops)},
    {"index_sidecar", "shard indexes loaded from a sidecar NAME.tar.idx", C, FS(index_sidecar)},
    {"index_sidecar_rejected", "sidecar indexes ignored (stale or corrupt)", C,
     FS(index_sidecar_rejected)},
    {"index_rejected_on_read",
     "sidecar indexes a member's own tar header disproved on its first read (rejected, built "
     "from the shard; ESTALE for files opened through them)",
     C, FS(index_rejected_on_read)},
    {"index_changed",
     "saved indexes whose file in the cache directory was changed in place under the mount "
     "(dropped, built from the shard; ESTALE for files opened through them)",
     C, FS(index_changed)},
    {"index_unwatched",
     "saved indexes read into memory, not mapped: no inotify watch could be had to see a "
     "change of their file",
     C, FS(index_unwatched)},
    {"imagefolder_images", "files in the imagefolder view", G, FS(if_images)},
    {"imagefolder_no_image", "samples left out: no image member", G, FS(if_no_image)},
    {"imagefolder_no_class", "samples left out: no usable class", G, FS(if_no_class)},
    {"imagefolder_dup_dropped", "samples left out: name taken", G, FS(if_dup_dropped)},
    {"imagefolder_shards_indexed", "shards indexed to build the view", G, FS(if_shards_indexed)},
    {"imagefolder_build_ms", "time to build the view", CTL_GAUGE_MS, FS(if_build_ms)},
    {"imagefolder_cls_reads", ".cls members read from shards (not from the cache)", C,
     FS(if_cls_reads)},
    {"imagefolder_view_loaded", "views mapped from the cache directory (no shard indexed)", C,
     FS(if_view_loaded)},
    {"imagefolder_view_saved", "views built and saved in the cache directory", C,
     FS(if_view_saved)},
    {"imagefolder_view_rejected", "saved views of these shards found corrupt (then rebuilt)", C,
     FS(if_view_rejected)},
    {"imagefolder_view_changed",
     "saved views whose file in the cache directory was changed in place under the mount "
     "(dropped, built again)",
     C, FS(if_view_changed)},
    {"imagefolder_view_mapped", "1 while the view is mapped from the cache directory, not heap", G,
     FS(if_view_mapped)},
    {"imagefolder_view_removed",
     "older views of this dataset removed from the cache directory (replaced by this mount's)", C,
     FS(if_view_removed)},
    {"imagefolder_classes_removed",
     "class maps of shards' older versions removed from the cache directory (replaced by this "
     "mount's)",
     C, FS(if_cls_removed)},
    {"imagefolder_build_runs",
     "sorted runs the view's builds wrote to the cache directory (0: sorted in memory)", C,
     FS(if_build_runs)},
    {"refreshes", "refreshes of the source's listing", C, FS(refreshes)},
    {"refresh_added", "objects new at a refresh", C, FS(refresh_added)},
    {"refresh_removed", "objects removed at a refresh", C, FS(refresh_removed)},
    {"refresh_changed", "objects changed at a refresh (indexed again)", C, FS(refresh_changed)},
    {"changes_noticed", "objects found changed or removed (ESTALE for the old version)", C,
     FS(stale_noticed)},
    {"loader_index_builds", "builds of .shardfs/samples.tsv and wids.json", C, FS(lidx_builds)},
    {"loader_index_shards_skipped",
     "shards the last build left out of wids.json: compressed (these have no DALI index either), "
     "not indexable, or a path that is not UTF-8",
     G, FS(lidx_shards_skipped)},
    {"loader_index_members_skipped",
     "regular members of plain shards left out of the DALI indexes at the last build (no "
     "extension, white space in the name, hardlinks, sparse)",
     G, FS(lidx_members_skipped)},
    {"plans", "reading plans published now (plan command; .shardfs/plans)", G, SNAP(plan.plans)},
    {"plans_published", "plan commands taken (a plan replaced or dropped counts too)", C,
     FS(plans_published)},
    {"plan_paths", "paths in the plans now (found in the mount)", G, SNAP(plan.paths)},
    {"plan_missing", "paths of the plans now that were not found and are skipped", G,
     SNAP(plan.missing)},
    {"plan_bytes", "bytes behind the paths of the plans now", G, SNAP(plan.bytes)},
    {"plan_read", "paths of the plans now that were read", G, SNAP(plan.read)},
    {"plan_position",
     "sum over the plans now of their position (1 + the furthest planned path read)", G,
     SNAP(plan.position)},
    {"plan_hits", "reads that landed on a planned path not read yet", C, FS(plan_hits)},
    {"plan_fetch_paths", "planned paths handed to the cache tier to fetch ahead of their reader", C,
     FS(pf.paths)},
    {"plan_fetch_bytes", "bytes of the planned paths handed to the cache tier to fetch ahead", C,
     FS(pf.bytes)},
    {"plan_fetch_ranges",
     "ranges handed to the cache tier to fetch ahead: planned paths of one object close together "
     "and the bytes between them (one request each, or one per chunk it lies in)",
     C, FS(pf.ranges)},
    {"plan_fetch_gap_bytes", "bytes between planned paths fetched with them (evicted first)", C,
     FS(pf.gap_bytes)},
    {"plan_gap_bytes",
     "the largest gap between planned paths fetched in one request, at the last batch: rate x "
     "time to first byte as measured (--plan-gap before the first measurement)",
     G, FS(pf.gap)},
    {"plan_batch_requests",
     "batch reads of planned windows (ais://: AIStore GetBatch requests; a cut answer's rest "
     "is asked again within one)",
     C, SNAP(batch.requests)},
    {"plan_batch_items", "items of the batch reads: runs of units of one object", C,
     SNAP(batch.items)},
    {"plan_batch_bytes", "bytes the batch reads delivered and the cache kept", C,
     SNAP(batch.bytes)},
    {"plan_batch_failed_items",
     "items of batch reads failed or cut, or of an object the HEAD after the answer could not "
     "confirm: their units left empty (fetched on demand)",
     C, SNAP(batch.failed)},
    {"plan_batch_stale_objects",
     "objects a HEAD after a batch read found changed or gone: that read's units of them "
     "dropped",
     C, SNAP(batch.stale)},
    {"plan_batch_unfit_bytes",
     "bytes of batch reads left out: no room without evicting what a plan needs sooner", C,
     SNAP(batch.unfit)},
    {"plan_batch_refused", "1: the store refused its batch read; plans use ranged GETs", G,
     SNAP(batch.refused)},
    {"plan_batch_slot_waits",
     "batch read requests that waited for a free connection (their units unclaimed meanwhile)", C,
     SNAP(batch.slot_waits)},
    {"plan_batch_heads",
     "HEADs the version rule made after batch reads (one object each; one may confirm the "
     "answers of several reads that ended before it was sent)",
     C, SNAP(batch.heads)},
    {"plan_batch_heads_shared",
     "objects of a batch read confirmed by a HEAD another read made after this one's answer "
     "ended (a HEAD saved)",
     C, SNAP(batch.heads_shared)},
    {"plan_batch_head_waits",
     "objects of a batch read that found a HEAD of them in flight, sent before its answer "
     "ended, and waited for it to end (then for the next)",
     C, SNAP(batch.head_waits)},
    {"plan_lookahead_bytes",
     "bytes of planned paths fetched ahead of their readers at the last batch, over the plans: "
     "what the link needs in flight, within the cache after what readers hold, at most "
     "--plan-lookahead",
     G, FS(pf.lookahead)},
    {"link_ttfb_ms", "time to first byte of the store's fills, as measured (decayed average)",
     CTL_GAUGE_MS, SNAP(link_ttfb_ms)},
    {"link_rate_bytes",
     "bytes per second one connection delivered after its first byte, as measured (fills of "
     "1 MiB or more; 0 until one)",
     G, SNAP(link.rate)},
};
#undef FS
#undef SNAP
#undef C
#undef G

static uint64_t ctl_value(const struct ctl_counter *k, struct fs *fs, const struct ctl_snapshot *s)
{
	if (k->src == CTL_FS)
		return atomic_load_explicit((atomic_ullong *)((char *)&fs->c + k->off),
					    memory_order_relaxed);
	return *(const uint64_t *)(const void *)((const char *)s + k->off);
}

/* Characters of a value's field: the digits of UINT64_MAX */
#define CTL_VALUE_WIDTH 20
#define NCOUNTERS	(sizeof(ctl_counters) / sizeof(ctl_counters[0]))

static void render_stats(struct fs *fs, const struct ctl_snapshot *s, struct out *o)
{
	outf(o, "{\n  \"version\": ");
	out_json_str(o, SHARDFS_VERSION);
	outf(o, ",\n  \"pid\": %d,\n  \"source\": ", (int)getpid());
	out_json_str(o, backend_describe(fs->be));
	outf(o, ",\n  \"cache_dir\": ");
	out_json_str(o, cachetier_dir(fs->ct));
	outf(o, ",\n  \"layout\": \"%s\",\n  \"mount_time\": %" PRId64, fs_layout_of(fs)->name,
	     fs->mount_time);
	outf(o, ",\n");
	/* each value padded (after its comma) to a fixed width: see
	 * fs_ctl_render */
	for (size_t i = 0; i < NCOUNTERS; i++) {
		uint64_t v = ctl_value(&ctl_counters[i], fs, s);
		int w = snprintf(NULL, 0, "%" PRIu64, v);

		outf(o, "  \"%s\": %" PRIu64 "%s%*s\n", ctl_counters[i].name, v,
		     i + 1 < NCOUNTERS ? "," : "", CTL_VALUE_WIDTH - w, "");
	}
	outf(o, "}\n");
}

/* Prometheus conventions: counters are named *_total, times are in seconds
 * (a stats field NAME_ms becomes NAME_seconds, or NAME_seconds_total for a
 * counter). */
static void render_metrics(struct fs *fs, const struct ctl_snapshot *s, struct out *o)
{
	static const char *const suffix[] = {"_total", "", "_seconds", "_seconds_total"};
	static const char *const type[] = {"counter", "gauge", "gauge", "counter"};

	for (size_t i = 0; i < NCOUNTERS; i++) {
		const struct ctl_counter *k = &ctl_counters[i];
		int ms = k->type == CTL_GAUGE_MS || k->type == CTL_COUNTER_MS;
		int len = (int)strlen(k->name) - (ms ? 3 : 0); /* without "_ms" */
		uint64_t v = ctl_value(k, fs, s);

		outf(o, "# HELP shardfs_%.*s%s %s\n# TYPE shardfs_%.*s%s %s\nshardfs_%.*s%s ", len,
		     k->name, suffix[k->type], k->help, len, k->name, suffix[k->type],
		     type[k->type], len, k->name, suffix[k->type]);
		/* right-aligned in a fixed width (the format allows any number
		 * of blanks between name and value): see fs_ctl_render */
		if (ms)
			outf(o, "%*" PRIu64 ".%03u\n", CTL_VALUE_WIDTH - 4, v / 1000,
			     (unsigned)(v % 1000));
		else
			outf(o, "%*" PRIu64 "\n", CTL_VALUE_WIDTH, v);
	}
}

/* o's text padded with blanks to want bytes (doubled until it fits), the
 * last a newline, into *buf: see fs_ctl_render. Frees o's buffer on error. */
static int pad_snapshot(struct out *o, size_t want, char **buf, size_t *len)
{
	char *p;

	while (o->len + 2 > want)
		want *= 2;
	p = realloc(o->buf, want);
	if (!p) {
		free(o->buf);
		return -ENOMEM;
	}
	memset(p + o->len, ' ', want - o->len - 1);
	p[want - 1] = '\n';
	*buf = p;
	*len = want;
	return 0;
}

int fs_ctl_render(struct fs *fs, enum fs_ctl which, char **buf, size_t *len)
{
	struct out o = {0};
	struct ctl_snapshot s;

	if (which == FS_CTL_PLANS) {
		int err = fs_plan_render(fs, &o.buf, &o.len);

		if (err < 0)
			return err;
		return pad_snapshot(&o, 4096, buf, len);
	}
	if (which != FS_CTL_STATS && which != FS_CTL_METRICS)
		return -EISDIR;
	collect_snapshot(fs, &s);
	if (which == FS_CTL_STATS)
		render_stats(fs, &s, &o);
	else
		render_metrics(fs, &s, &o);
	if (o.err) {
		free(o.buf);
		return o.err;
	}
	/* A fixed size, padded with blanks (whitespace to JSON and to the
	 * Prometheus text format): without OPEN requests the kernel reads
	 * control files through its page cache, and a size that changed
	 * between one reader's GETATTR and another's READ would splice two
	 * snapshots (or zeros) into one read. The same holds for one reader:
	 * each read() may GETATTR (attribute timeout 0), which renders a new
	 * snapshot with a new mtime and drops the pages read so far, so a
	 * reader with a small buffer gets each part from another snapshot.
	 * Hence a fixed layout too: every value is padded to a fixed width
	 * and the rest never changes while mounted, so every byte offset
	 * holds the same thing in every snapshot; any splice of snapshots is
	 * a whole document whose values are each whole (maybe of different
	 * moments). Only a much longer rendering grows the size. (The plans
	 * file has lines that come and go: only its size is kept.) */
	return pad_snapshot(&o, which == FS_CTL_METRICS ? 32768 : 4096, buf, len);
}

/* The objects a prefetch names, gathered first when the mount has objects
 * not known yet (a brace pattern's), so that their sizes are asked for
 * many at once and without ns_lock; NULL: prefetch them right away. */
struct pf_collect {
	uint32_t *v;
	size_t n, cap;
};

/* Start the prefetch of object obj for run: tag it with the run, and, the
 * first time the run names it, add what is cached of it now to the run's
 * "cached already" (before its fills start). fs_obj_prefetch's result. */
static int pf_start(struct fs *fs, uint32_t obj, int run)
{
	struct fs_obj *o = fs_obj(fs, obj);
	struct cachetier_obj *raw;
	uint64_t cached = 0;

	if (fs_obj_raw(fs, obj, &raw) == 0)
		cached = cachetier_obj_cached_bytes(raw);
	if (atomic_exchange(&o->prefetch, run) != run)
		fs_ctl_run_cached(fs, run, cached);
	return fs_obj_prefetch(fs, obj);
}

/* Prefetch object obj for run (counting it in *n), or add it to c. */
static void prefetch_one(struct fs *fs, uint32_t obj, struct pf_collect *c, int *n, int run)
{
	if (c) {
		if (c->n == c->cap) {
			size_t cap = c->cap ? c->cap * 2 : 256;
			uint32_t *p = realloc(c->v, cap * sizeof(*p));

			if (!p)
				return; /* its size is asked for alone */
			c->v = p;
			c->cap = cap;
		}
		c->v[c->n++] = obj;
		return;
	}
	switch (atomic_load(&fs_obj(fs, obj)->known)) {
	case FS_INFO_MISSING:
		return; /* a brace pattern's name the store does not have */
	case FS_INFO_LAZY:
		/* its size could not be learned (the store is down): no HEAD
		 * under ns_lock; a failed prefetch, as fs_obj_prefetch's */
		fs->c.prefetch_requests++;
		fs->c.prefetch_errors++;
		return;
	default:
		break;
	}
	if (pf_start(fs, obj, run) == 0)
		(*n)++;
}

/* Every object at or below namespace directory d. ns_lock held. */
static void prefetch_dir(struct fs *fs, uint32_t d, struct pf_collect *c, int *n, int run)
{
	const struct fs_dir *dir = &fs->dirs[d];

	for (uint32_t i = 0; i < dir->nents; i++) {
		const struct fs_dirent *e = &dir->ents[i];

		if (e->kind == FS_K_DIR)
			prefetch_dir(fs, e->idx, c, n, run);
		else if (e->kind == FS_K_OBJ)
			prefetch_one(fs, e->idx, c, n, run);
	}
}

/* Resolve PATH (relative to the mount root, '/'-separated) in the source
 * namespace and prefetch what it names (or gather it into c). ns_lock
 * held. */
static int prefetch_path_locked(struct fs *fs, const char *path, size_t len, struct pf_collect *c,
				int run)
{
	uint32_t d = 0;
	size_t i = 0;
	int n = 0;

	while (i < len) {
		const struct fs_dirent *e;
		size_t j = i;

		while (j < len && path[j] != '/')
			j++;
		if (j == i || (j - i == 1 && path[i] == '.')) {
			i = j + 1;
			continue;
		}
		e = fs_ns_lookup(fs, d, path + i, j - i);
		if (!e)
			return -ENOENT;
		if (e->kind == FS_K_DIR) {
			d = e->idx;
		} else {
			/* a file or a shard's directory: its object. Below a
			 * shard's directory (a member): the whole shard, since
			 * the cache holds objects; nothing may follow a file. */
			uint32_t obj = e->kind == FS_K_OBJ ? e->idx : fs_shard(fs, e->idx)->obj;

			while (j < len && path[j] == '/')
				j++;
			if (j < len && e->kind != FS_K_SHARD)
				return -ENOENT;
			if (c) {
				prefetch_one(fs, obj, c, &n, run);
				return 0;
			}
			if (atomic_load(&fs_obj(fs, obj)->known) == FS_INFO_MISSING)
				return -ENOENT;
			if (atomic_load(&fs_obj(fs, obj)->known) == FS_INFO_LAZY)
				return -EIO; /* not learned: the store is down */
			if (pf_start(fs, obj, run) < 0)
				return -EIO;
			return j < len ? 1 : 0;
		}
		i = j + 1;
	}
	prefetch_dir(fs, d, c, &n, run);
	if (!c)
		fs_log(FS_LOG_INFO, "prefetch of '%.*s': %d objects", (int)len, path, n);
	return 0;
}

static int prefetch_path(struct fs *fs, const char *path, size_t len, pid_t pid)
{
	struct pf_collect c = {0};
	int err, run = fs_ctl_run_of(fs, pid, 0);

	if (fs->lazy) {
		fs_ns_rdlock(fs);
		err = prefetch_path_locked(fs, path, len, &c, run);
		fs_ns_unlock(fs);
		if (err == 0)
			fs_objs_learn(fs, c.v, c.n);
		free(c.v);
	}
	fs_ns_rdlock(fs);
	err = prefetch_path_locked(fs, path, len, NULL, run);
	fs_ns_unlock(fs);
	return err;
}

/* List the source again; the write returns once the kernel's caches of
 * what changed are invalidated (so 'ls' right after shows the new state). */
static int refresh(struct fs *fs)
{
	int err = fs_ns_refresh(fs);

	fs_notify_drain(fs, 30);
	return err;
}

/* Does line s[0..n) start with the command word w (then a blank or its
 * end)? Then *arg is where its argument starts (blanks skipped). */
static int cmd_is(const char *s, size_t n, const char *w, size_t *arg)
{
	size_t wl = strlen(w), a = wl;

	if (n < wl || memcmp(s, w, wl) != 0 || (n > wl && s[wl] != ' '))
		return 0;
	while (a < n && s[a] == ' ')
		a++;
	*arg = a;
	return 1;
}

/* 'plan [NAME] FILE' and 'plan-clear [NAME]' (a NAME has no blank; FILE,
 * absolute, is the rest of the line). */
static int plan_command(struct fs *fs, int clear, const char *a, size_t n, pid_t pid,
			const struct fs_op_stop *stop)
{
	char name[FS_PLAN_NAME_MAX + 2], file[PATH_MAX];
	size_t nl = 0;

	if (n && (clear || a[0] != '/')) {
		while (nl < n && a[nl] != ' ')
			nl++;
		if (nl > FS_PLAN_NAME_MAX)
			return -EINVAL;
		memcpy(name, a, nl);
		name[nl] = '\0';
		a += nl;
		n -= nl;
		while (n && *a == ' ')
			a++, n--;
	}
	if (clear)
		return n ? -EINVAL : fs_plan_clear(fs, nl ? name : NULL, pid);
	if (n == 0)
		return -EINVAL;
	if (n >= sizeof(file))
		return -ENAMETOOLONG;
	memcpy(file, a, n);
	file[n] = '\0';
	return fs_plan_publish(fs, nl ? name : NULL, pid, file, stop);
}

int fs_ctl_command(struct fs *fs, const char *buf, size_t len, pid_t pid,
		   const struct fs_op_stop *stop)
{
	size_t i = 0;
	int err = 0, inside_shard = 0;

	while (i < len && err >= 0) {
		size_t j = i, k, a;

		while (j < len && buf[j] != '\n')
			j++;
		k = j;
		while (k > i && (buf[k - 1] == '\r' || buf[k - 1] == ' '))
			k--;
		if (k > i) {
			if (k - i >= 8 && memcmp(buf + i, "prefetch", 8) == 0 &&
			    (k - i == 8 || buf[i + 8] == ' ')) {
				size_t p = i + 8;

				while (p < k && buf[p] == ' ')
					p++;
				err = prefetch_path(fs, buf + p, k - p, pid);
				inside_shard |= err == 1;
			} else if (k - i == 14 && memcmp(buf + i, "prefetch-start", 14) == 0) {
				fs_ctl_run_of(fs, pid, 1);
			} else if (k - i == 7 && memcmp(buf + i, "refresh", 7) == 0) {
				err = refresh(fs);
			} else if (cmd_is(buf + i, k - i, "plan", &a) ||
				   cmd_is(buf + i, k - i, "plan-clear", &a)) {
				err = plan_command(fs, k - i > 4 && buf[i + 4] == '-', buf + i + a,
						   k - i - a, pid, stop);
			} else {
				fs_log(FS_LOG_WARN, "control: unknown command '%.*s'", (int)(k - i),
				       buf + i);
				err = -EINVAL;
			}
		}
		i = j + 1;
	}
	return err < 0 ? err : inside_shard;
}

/* ---- the stats document read back (the CLI) ------------------------------ */

/* A name or value of the stats document copied to *w (*left bytes there),
 * NUL-terminated: a string unescaped, an integer as its text; *w moves past
 * the NUL. NULL for anything else. */
static char *stats_text(const struct disk_json_tok *t, char **w, size_t *left)
{
	char *s = *w;
	size_t neg = t->len && t->p[0] == '-';
	ssize_t n;

	if (t->type == DISK_JSON_STRING) {
		n = disk_json_str(t, s, *left);
	} else if (t->type == DISK_JSON_NUMBER && t->len > neg && t->len < *left &&
		   strspn(t->p + neg, "0123456789") == t->len - neg) {
		memcpy(s, t->p, t->len);
		s[t->len] = '\0';
		n = (ssize_t)t->len;
	} else {
		return NULL;
	}
	if (n < 0)
		return NULL;
	*w += n + 1;
	*left -= (size_t)n + 1;
	return s;
}

int fs_stats_parse(const char *text, struct fs_stats_doc *d)
{
	size_t cap = 0, len = strlen(text), left = len + 1;
	struct disk_json j;
	struct disk_json_tok k, v;
	char *w;
	int more;

	memset(d, 0, sizeof(*d));
	/* every name and value with its NUL fits in the text: each one
	 * leaves out at least one character of it (a quote or a separator) */
	d->buf = w = malloc(left);
	if (!d->buf)
		return -ENOMEM;
	disk_json_init(&j, text, len, 0);
	if (disk_json_enter(&j, DISK_JSON_OBJECT) < 0)
		goto bad;
	while ((more = disk_json_next(&j, &k)) > 0) {
		struct fs_stats_field f;

		if (disk_json_value(&j, &v) < 0 || !(f.name = stats_text(&k, &w, &left)) ||
		    !(f.value = stats_text(&v, &w, &left)))
			goto bad;
		if (d->n == cap) {
			struct fs_stats_field *nf;

			cap = cap * 2 + 64;
			nf = realloc(d->f, cap * sizeof(*nf));

			if (!nf) {
				fs_stats_doc_free(d);
				return -ENOMEM;
			}
			d->f = nf;
		}
		d->f[d->n++] = f;
	}
	if (more < 0 || disk_json_end(&j) < 0)
		goto bad;
	return 0;
bad:
	fs_stats_doc_free(d);
	return -EPROTO;
}

const char *fs_stats_get(const struct fs_stats_doc *d, const char *name)
{
	for (size_t i = 0; i < d->n; i++)
		if (strcmp(d->f[i].name, name) == 0)
			return d->f[i].value;
	return NULL;
}

int fs_stats_u64(const struct fs_stats_doc *d, const char *name, uint64_t *v)
{
	const char *s = fs_stats_get(d, name);
	unsigned long long x;
	char *end;

	if (!s)
		return -ENOENT;
	if (!isdigit((unsigned char)s[0]))
		return -EPROTO;
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno || *end)
		return -EPROTO;
	*v = x;
	return 0;
}

void fs_stats_doc_free(struct fs_stats_doc *d)
{
	free(d->f);
	free(d->buf);
	memset(d, 0, sizeof(*d));
}

int fs_ctl_counter_doc(size_t i, const char **name, const char **help, int *gauge)
{
	if (i >= NCOUNTERS)
		return -ENOENT;
	*name = ctl_counters[i].name;
	*help = ctl_counters[i].help;
	*gauge = ctl_counters[i].type == CTL_GAUGE || ctl_counters[i].type == CTL_GAUGE_MS;
	return 0;
}
