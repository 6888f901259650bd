/*
 * fs_ctl.c — the files of MOUNTPOINT/.shardfs/: counters as JSON (stats)
 * and as Prometheus text (metrics), and the commands written to control
 * (prefetch, refresh). Rendered on GETATTR (and on open with
 * --strict-open) in a layout that is the same in every snapshot (see
 * fs_ctl_render). Never contains credentials:
 * the source is shown as the backend describes it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs_i.h"

const char *const fs_ctl_names[FS_CTL_COUNT] = {".shardfs", "stats", "metrics", "control"};

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

/* A JSON string literal of s (control characters and quotes escaped). */
static void out_json_str(struct out *o, const char *s)
{
	outf(o, "\"");
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			outf(o, "\\%c", *p);
		else if (*p < 0x20)
			outf(o, "\\u%04x", *p);
		else
			outf(o, "%c", *p);
	}
	outf(o, "\"");
}

struct counter {
	const char *name;
	const char *help;
	uint64_t value;
	int gauge; /* 1: a value that goes up and down (or is set once); 0: only ever counts up */
};

/* The objects prefetch commands asked for: their bytes, how many of them
 * are cached now, how many their latest prefetch skipped because they did
 * not fit, and how many of them are still being prefetched. */
struct pf_progress {
	uint64_t want, have, unfit, pending;
};

static void prefetch_progress(struct fs *fs, struct pf_progress *p)
{
	memset(p, 0, sizeof(*p));
	for (uint32_t i = 0; i < fs->nobjs; i++) {
		struct fs_obj *o = fs_obj(fs, i);
		struct cachetier_obj *raw;
		uint64_t unfit = 0;

		if (!atomic_load(&o->prefetch) || !fs_obj_live(o))
			continue;
		p->want += o->info.size;
		pthread_mutex_lock(&o->lock);
		raw = o->raw;
		pthread_mutex_unlock(&o->lock);
		if (!raw)
			continue;
		p->have += cachetier_obj_cached_bytes(raw);
		p->pending += (uint64_t)cachetier_obj_prefetch_state(raw, &unfit);
		p->unfit += unfit;
	}
}

/* Live objects, shards and directories (old versions stay until unmount). */
static void live_counts(struct fs *fs, uint64_t *objs, uint64_t *shards, uint64_t *dirs)
{
	*objs = *shards = *dirs = 0;
	for (uint32_t i = 0; i < fs->nobjs; i++) {
		const struct fs_obj *o = fs_obj(fs, i);

		if (fs_obj_live(o)) {
			(*objs)++;
			*shards += o->codec >= 0;
		}
	}
	fs_ns_rdlock(fs);
	for (uint32_t i = 0; i < fs->ndirs; i++)
		*dirs += !fs->dirs[i].gone;
	fs_ns_unlock(fs);
}

static size_t collect(struct fs *fs, struct counter *c, size_t max)
{
	struct cachetier_stats cs;
	struct backend_stats bs;
	struct fs_warm_progress wp;
	struct pf_progress pf;
	uint64_t nobjs, nshards, ndirs;
	size_t n = 0;

	cachetier_get_stats(fs->ct, &cs);
	backend_get_stats(fs->be, &bs);
	prefetch_progress(fs, &pf);
	fs_warm_progress(fs, &wp);
	live_counts(fs, &nobjs, &nshards, &ndirs);
#define C(nm, hp, v)                                                                               \
	do {                                                                                       \
		if (n < max)                                                                       \
			c[n++] = (struct counter){nm, hp, (uint64_t)(v), 0};                       \
	} while (0)
#define G(nm, hp, v)                                                                               \
	do {                                                                                       \
		if (n < max)                                                                       \
			c[n++] = (struct counter){nm, hp, (uint64_t)(v), 1};                       \
	} while (0)
	G("objects", "objects in the source", nobjs);
	G("shards", "objects that are shards", nshards);
	G("source_dirs", "directories in the source", ndirs);
	G("source_bytes", "bytes of all objects in the source", fs->total_bytes);
	G("hidden_names", "names hidden by a conflict (x.tar and x.tar.gz, a shard and a directory)",
	  fs->c.hidden_names);
	G("source_offline", "1: the store was unreachable at mount, the listing came from the cache",
	  fs->offline);
	C("index_built", "shard indexes built by reading the shard", fs->c.index_built);
	C("index_loaded", "shard indexes loaded from the cache directory", fs->c.index_loaded);
	C("index_errors", "shards that could not be indexed", fs->c.index_errors);
	C("index_save_errors", "indexes that could not be saved", fs->c.index_save_errors);
	C("index_bytes_scanned", "shard bytes read to build indexes", fs->c.index_bytes_scanned);
	G("index_mem_bytes", "memory held by loaded indexes", fs->c.index_mem_bytes);
	G("members", "entries in loaded shard indexes", fs->c.members);
	G("damaged_shards", "loaded shards with damage", fs->c.damaged_shards);
	C("skipped_members", "members left out (unsafe names, special files)",
	  fs->c.skipped_members);
	C("lookups", "lookup requests", fs->c.lookups);
	C("getattrs", "getattr requests", fs->c.getattrs);
	C("readdirs", "readdir requests", fs->c.readdirs);
	C("reads", "read requests", fs->c.reads);
	C("read_bytes", "bytes returned by reads", fs->c.read_bytes);
	C("read_errors", "reads answered with an error", fs->c.read_errors);
	C("op_errors", "other requests that failed (answers such as ENOENT not counted)",
	  fs->c.op_errors);
	C("decoded_streams", "compressed shards decoded into the cache", cs.decoded_streams);
	C("decoded_bytes", "bytes written by decoding", cs.decoded_bytes);
	C("decoded_reused", "decoded copies reused from the cache", cs.decoded_reused);
	C("cache_hits", "read ranges found in the cache", cs.hits);
	C("cache_misses", "read ranges that waited for a fill", cs.misses);
	C("bytes_fetched", "bytes fetched from the store into the cache", cs.bytes_fetched);
	C("fills", "chunk fills completed", cs.fills);
	G("fills_inflight", "chunk fills running now", cs.fills_inflight);
	G("fill_threads", "cache fill threads (one more than connections)", fs->fill_threads);
	G("connections", "most parallel connections to a remote store", fs->cfg.connections);
	C("fill_errors", "chunk fills that failed", cs.fill_errors);
	C("readahead_fills", "fills started by readahead or prefetch", cs.readahead_fills);
	C("prefetch_withdrawn",
	  "prefetch and warm fills stopped part-way to free a connection for a reader's fill",
	  cs.prefetch_withdrawn);
	C("evictions", "objects evicted from the cache", cs.evictions);
	C("evicted_bytes", "bytes evicted from the cache", cs.evicted_bytes);
	C("decoded_evictions", "decoded copies evicted (decoded again when read)",
	  cs.decoded_evictions);
	C("cache_peer_chunks", "chunks read that another process or an earlier mount filled",
	  cs.peer_chunks);
	C("cache_peer_waits", "fills that waited for another process filling the same chunk",
	  cs.peer_waits);
	G("cache_bytes_used", "cached bytes in the whole cache directory", cs.bytes_used);
	G("cache_bytes_limit", "the cache size limit", cs.bytes_limit);
	G("cache_room_bytes",
	  "bytes the cache can take without evicting (limit and disk reserve)", fs_cache_room(fs));
	C("cache_unfit_bytes", "bytes prefetch and warm fills skipped: no room without evicting",
	  cs.unfit_bytes);
	G("local_fds_open", "local shard files open now (bounded by the open-file limit)",
	  cs.local_fds_open);
	C("local_fd_reopens", "local shard files opened again after the bound closed them",
	  cs.local_fd_reopens);
	C("prefetch_requests", "objects asked to be prefetched", fs->c.prefetch_requests);
	C("prefetch_errors", "prefetch requests that failed", fs->c.prefetch_errors);
	C("shard_prefetches", "shards fetched ahead of an in-order reader", fs->c.shard_prefetches);
	G("prefetch_bytes", "bytes of the objects asked to be prefetched", pf.want);
	G("prefetch_cached_bytes", "of those, bytes in the cache now", pf.have);
	G("prefetch_unfit_bytes", "of those, bytes their prefetch skipped: the cache was full",
	  pf.unfit);
	G("prefetch_pending", "of those objects, how many are still being prefetched", pf.pending);
	G("warm_state", "warm fill: 0 off, 1 running, 2 done, 3 stopped (cache full or errors)",
	  wp.state);
	G("warm_bytes_wanted", "bytes of the objects the warm fill fetches", wp.wanted);
	G("warm_bytes_done", "of those, bytes in the cache now", wp.done);
	G("warm_unfit_bytes", "of those, bytes the warm skipped: the cache was full", wp.unfit);
	C("store_requests", "requests to the remote store", bs.requests);
	C("store_attempts", "HTTP attempts of those requests (retries, redirects)", bs.attempts);
	C("store_failures", "requests that spent their retry budget: the store went down",
	  bs.failures);
	C("store_fast_fails", "requests failed at once (EIO) while the store was down",
	  bs.fast_fails);
	C("store_probes", "probes of the store while it was down", bs.probes);
	C("store_cancels", "requests cancelled at shutdown", bs.cancels);
	G("store_down", "1 while the store is down (requests fail at once)", bs.down);
	/* ---- issue 5 ---- */
	C("index_sidecar", "shard indexes loaded from a sidecar NAME.tar.idx", fs->c.index_sidecar);
	C("index_sidecar_rejected", "sidecar indexes ignored (stale or corrupt)",
	  fs->c.index_sidecar_rejected);
	G("imagefolder_images", "files in the imagefolder view", fs->c.if_images);
	G("imagefolder_no_image", "samples left out: no image member", fs->c.if_no_image);
	G("imagefolder_no_class", "samples left out: no usable class", fs->c.if_no_class);
	G("imagefolder_dup_dropped", "samples left out: name taken", fs->c.if_dup_dropped);
	G("imagefolder_shards_indexed", "shards indexed to build the view", fs->c.if_shards_indexed);
	G("imagefolder_build_ms", "milliseconds to build the view", fs->c.if_build_ms);
	C("imagefolder_cls_reads", ".cls members read from shards (not from the cache)",
	  fs->c.if_cls_reads);
	/* ---- end issue 5 ---- */
	C("refreshes", "refreshes of the source's listing", fs->c.refreshes);
	C("refresh_added", "objects new at a refresh", fs->c.refresh_added);
	C("refresh_removed", "objects removed at a refresh", fs->c.refresh_removed);
	C("refresh_changed", "objects changed at a refresh (indexed again)", fs->c.refresh_changed);
	C("changes_noticed", "objects found changed or removed (ESTALE for the old version)",
	  fs->c.stale_noticed);
#undef C
#undef G
	if (n == max)
		fs_log(FS_LOG_ERR, "control: more counters than CTL_COUNTERS_MAX; some are missing");
	return n;
}

/* More than the table has (collect says so in the log if it ever is not). */
#define CTL_COUNTERS_MAX 128
/* Characters of a value's field: the digits of UINT64_MAX */
#define CTL_VALUE_WIDTH 20

static void render_stats(struct fs *fs, struct out *o)
{
	struct counter c[CTL_COUNTERS_MAX];
	size_t n = collect(fs, c, CTL_COUNTERS_MAX);

	outf(o, "{\n  \"version\": ");
	out_json_str(o, SHARDFS_VERSION);
	outf(o, ",\n  \"pid\": %d,\n  \"source\": ", (int)getpid());
	out_json_str(o, backend_describe(fs->be));
	outf(o, ",\n  \"cache_dir\": ");
	out_json_str(o, cachetier_dir(fs->ct));
	outf(o, ",\n  \"layout\": \"%s\",\n  \"mount_time\": %" PRId64,
	     fs->cfg.layout == FS_LAYOUT_IMAGEFOLDER ? "imagefolder" : "shards", /* issue 5 */
	     fs->mount_time);
	outf(o, ",\n");
	/* each value padded (after its comma) to a fixed width: see
	 * fs_ctl_render */
	for (size_t i = 0; i < n; i++) {
		int w = snprintf(NULL, 0, "%" PRIu64, c[i].value);

		outf(o, "  \"%s\": %" PRIu64 "%s%*s\n", c[i].name, c[i].value,
		     i + 1 < n ? "," : "", CTL_VALUE_WIDTH - w, "");
	}
	outf(o, "}\n");
}

static void render_metrics(struct fs *fs, struct out *o)
{
	struct counter c[CTL_COUNTERS_MAX];
	size_t n = collect(fs, c, CTL_COUNTERS_MAX);

	/* Prometheus conventions: counters are named *_total, times are in
	 * seconds (a stats field NAME_ms becomes NAME_seconds) */
	for (size_t i = 0; i < n; i++) {
		size_t nl = strlen(c[i].name);
		int ms = nl > 3 && strcmp(c[i].name + nl - 3, "_ms") == 0;
		const char *sfx = ms ? "_seconds" : c[i].gauge ? "" : "_total";
		int len = (int)(ms ? nl - 3 : nl);

		outf(o, "# HELP shardfs_%.*s%s %s\n# TYPE shardfs_%.*s%s %s\nshardfs_%.*s%s ", len,
		     c[i].name, sfx, c[i].help, len, c[i].name, sfx, c[i].gauge ? "gauge" : "counter",
		     len, c[i].name, sfx);
		/* right-aligned in a fixed width (the format allows any number
		 * of blanks between name and value): see fs_ctl_render */
		if (ms)
			outf(o, "%*" PRIu64 ".%03u\n", CTL_VALUE_WIDTH - 4, c[i].value / 1000,
			     (unsigned)(c[i].value % 1000));
		else
			outf(o, "%*" PRIu64 "\n", CTL_VALUE_WIDTH, c[i].value);
	}
}

int fs_ctl_render(struct fs *fs, enum fs_ctl which, char **buf, size_t *len)
{
	struct out o = {0};

	if (which == FS_CTL_STATS)
		render_stats(fs, &o);
	else if (which == FS_CTL_METRICS)
		render_metrics(fs, &o);
	else
		return -EISDIR;
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
	 * moments). Only a much longer rendering grows the size. */
	{
		size_t want = which == FS_CTL_STATS ? 4096 : 32768;
		char *p;

		while (o.len + 2 > want)
			want *= 2;
		p = realloc(o.buf, want);
		if (!p) {
			free(o.buf);
			return -ENOMEM;
		}
		memset(p + o.len, ' ', want - o.len - 1);
		p[want - 1] = '\n';
		*buf = p;
		*len = want;
	}
	return 0;
}

/* Every object at or below namespace directory d. fs->ns_lock held. */
static void prefetch_dir(struct fs *fs, uint32_t d, int *n)
{
	const struct fs_dir *dir = &fs->dirs[d];

	for (uint32_t i = 0; i < dir->nents; i++) {
		const struct fs_dirent *e = &dir->ents[i];

		if (e->kind == FS_K_DIR)
			prefetch_dir(fs, e->idx, n);
		else if (e->kind == FS_K_OBJ && fs_obj_prefetch(fs, e->idx) == 0)
			(*n)++;
	}
}

/* Resolve PATH (relative to the mount root, '/'-separated) in the source
 * namespace and prefetch what it names. fs->ns_lock held. */
static int prefetch_path_locked(struct fs *fs, const char *path, size_t len)
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
			if (fs_obj_prefetch(fs, obj) < 0)
				return -EIO;
			return j < len ? 1 : 0;
		}
		i = j + 1;
	}
	prefetch_dir(fs, d, &n);
	fs_log(FS_LOG_INFO, "prefetch of '%.*s': %d objects", (int)len, path, n);
	return 0;
}

static int prefetch_path(struct fs *fs, const char *path, size_t len)
{
	int err;

	fs_ns_rdlock(fs);
	err = prefetch_path_locked(fs, path, len);
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

int fs_ctl_command(struct fs *fs, const char *buf, size_t len)
{
	size_t i = 0;
	int err = 0, inside_shard = 0;

	while (i < len && err >= 0) {
		size_t j = i, k;

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
				err = prefetch_path(fs, buf + p, k - p);
				inside_shard |= err == 1;
			} else if (k - i == 7 && memcmp(buf + i, "refresh", 7) == 0) {
				err = refresh(fs);
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
