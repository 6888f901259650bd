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
#include <time.h>
#include <unistd.h>

#include "disk_json.h"
#include "fs_ctl_i.h"
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

/* An object's cache tier object, NULL while it has none. */
static struct cachetier_obj *pf_raw(struct fs_obj *o)
{
	struct cachetier_obj *raw;

	disk_mutex_lock(&o->lock);
	raw = o->raw;
	disk_mutex_unlock(&o->lock);
	return raw;
}

/* One object of a prefetch: what is cached of it (have), whether its
 * prefetch runs (pending) and the bytes it skipped (unfit). pending is
 * read first: a fill ends (its units valid, its pf_inflight dropped) in
 * one step under ct->lock, so an object no fill runs for when pending is
 * read shows every unit its fills made valid when have is read after it.
 * The other order let a run's end be seen with its last fill's units not
 * counted (pending read 0 just after have missed them): a prefetch that
 * cached every byte said "not cached" and exited 1. */
static void pf_obj(struct fs_obj *o, uint64_t *have, uint64_t *pending, uint64_t *unfit)
{
	struct cachetier_obj *raw = pf_raw(o);

	*have = *pending = *unfit = 0;
	if (raw) {
		*pending = (uint64_t)cachetier_obj_prefetch_state(raw, unfit);
		*have = cachetier_obj_cached_bytes(raw);
	}
}

static void prefetch_progress(struct fs *fs, struct pf_progress *p)
{
	int run;

	memset(p, 0, sizeof(*p));
	run = fs_ctl_run(fs, &p->run_before);
	p->run = (uint64_t)run;
	for (uint32_t i = 0; i < fs->nobjs; i++) {
		struct fs_obj *o = fs_obj(fs, i);
		uint64_t unfit, size, have, pending;
		int tag = atomic_load(&o->prefetch);

		if (!tag || !fs_obj_live(o))
			continue;
		size = fs_obj_size(o);
		pf_obj(o, &have, &pending, &unfit);
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

static void collect_snapshot(struct fs *fs, struct ctl_snapshot *s)
{
	struct fs_warm_progress wp;

	memset(s, 0, sizeof(*s));
	/* what a prefetch has cached before bytes_fetched: a unit counted
	 * there is counted in bytes_fetched too when this mount filled it, so
	 * 'shardfs prefetch' can tell its own fetches from another mount's */
	prefetch_progress(fs, &s->pf);
	cachetier_get_stats(fs->ct, &s->cs);
	backend_get_stats(fs->be, &s->bs);
	fs_plan_totals(fs, &s->plan);
	fetch_link_get(fs->fetch, &s->link);
	cachetier_batch_stats(fs->ct, &s->batch);
	fetch_stage_stats_get(fs->fetch, &s->stage);
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

static uint64_t ctl_value(const struct ctl_counter *k, struct fs *fs, const struct ctl_snapshot *s)
{
	if (k->src == CTL_FS)
		return atomic_load_explicit((atomic_ullong *)((char *)&fs->c + k->off),
					    memory_order_relaxed);
	return *(const uint64_t *)(const void *)((const char *)s + k->off);
}

/* Characters of a value's field: the digits of UINT64_MAX */
#define CTL_VALUE_WIDTH 20
#define NCOUNTERS	fs_ctl_ncounters

static void render_stats(struct fs *fs, const struct ctl_snapshot *s, struct out *o)
{
	outf(o, "{\n  \"version\": ");
	out_json_str(o, SHARDFS_VERSION);
	outf(o, ",\n  \"pid\": %d,\n  \"source\": ", (int)getpid());
	out_json_str(o, backend_describe(fs->be));
	/* a local source's path as given (made absolute): what each listing
	 * opens again; a remote source's is its description */
	outf(o, ",\n  \"source_path\": ");
	out_json_str(o, backend_local_source(fs->be) ? backend_local_source(fs->be)
						     : backend_describe(fs->be));
	outf(o, ",\n  \"cache_dir\": ");
	out_json_str(o, cachetier_dir(fs->ct));
	outf(o, ",\n  \"layout\": \"%s\",\n  \"mount_time\": %" PRId64, fs_layout_of(fs)->name,
	     fs->mount_time);
	outf(o, ",\n");
	/* each value padded (after its comma) to a fixed width: see
	 * fs_ctl_render */
	for (size_t i = 0; i < NCOUNTERS; i++) {
		uint64_t v = ctl_value(&fs_ctl_counters[i], fs, s);
		int w = snprintf(NULL, 0, "%" PRIu64, v);

		outf(o, "  \"%s\": %" PRIu64 "%s%*s\n", fs_ctl_counters[i].name, v,
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
		const struct ctl_counter *k = &fs_ctl_counters[i];
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
	int nomem; /* an object could not be added */
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

			if (!p) {
				c->nomem = 1;
				return; /* its size is asked for alone */
			}
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

	for (size_t clen; (clen = fs_path_comp(path, len, &i)) > 0; i += clen + 1) {
		const struct fs_dirent *e;
		size_t j = i + clen;

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
	}
	prefetch_dir(fs, d, c, &n, run);
	if (!c)
		fs_log(FS_LOG_INFO, "prefetch of %s%.*s%s: %d %s", len ? "'" : "the whole mount",
		       (int)len, path, len ? "'" : "", n,
		       fs_plural((uint64_t)n, "object", "objects"));
	return 0;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
				      : -1;
}

/* A PATH (prefetch) or FILE (plan) argument as sent, a[0..n), into out (cap
 * bytes, NUL-terminated): its bytes as they are, but "\xHH" (two hex
 * digits) stands for byte HH, so that a name with a blank at either end, a
 * newline or a carriage return (which the line's parsing would trim or cut)
 * can be sent (fs_ctl.h). Its length, or -EINVAL (\x00), or -ENAMETOOLONG. */
static int ctl_unescape(const char *a, size_t n, char *out, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		char c = a[i];

		if (c == '\\' && i + 3 < n && a[i + 1] == 'x' && hexval(a[i + 2]) >= 0 &&
		    hexval(a[i + 3]) >= 0) {
			c = (char)(hexval(a[i + 2]) * 16 + hexval(a[i + 3]));
			if (c == '\0')
				return -EINVAL;
			i += 3;
		}
		if (o + 1 >= cap)
			return -ENAMETOOLONG;
		out[o++] = c;
	}
	out[o] = '\0';
	return (int)o;
}

static int prefetch_path(struct fs *fs, const char *arg, size_t n, pid_t pid)
{
	struct pf_collect c = {0};
	char path[PATH_MAX];
	int err, run, len = ctl_unescape(arg, n, path, sizeof(path));

	if (len < 0)
		return len;
	run = fs_ctl_run_of(fs, pid, 0);

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
static int plan_command(struct fs *fs, int clear, const char *a, size_t n, uid_t uid, gid_t gid,
			pid_t pid, const struct fs_op_stop *stop)
{
	char name[FS_PLAN_NAME_MAX + 2], file[PATH_MAX];
	size_t nl = 0;
	int err;

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
	err = ctl_unescape(a, n, file, sizeof(file));
	return err < 0 ? err : fs_plan_publish(fs, nl ? name : NULL, pid, file, stop, uid, gid);
}

/* 'prefetch-wait RUN MS' (fs_ctl.h). The run's objects are gathered once;
 * then, every PF_WAIT_TICK_NS, two cursors walk them: past the objects
 * whose prefetch no longer runs, and past those cached whole. Objects are
 * filled one after another in the order asked, so each walk stops at the
 * first one still running (or not whole) and a look costs one or two
 * objects, not the run. When a cursor reaches the end, the run is looked at
 * whole as the prefetch_run_* counters compute it (every byte cached, or
 * no prefetch of its objects running) and the wait ends only if it is over
 * by that look; if not (a reader's fill evicted bytes, a prefetch began
 * again), the cursors start over. */
#define PF_WAIT_TICK_NS 10000000L

struct pf_wait {
	uint32_t *v;
	size_t n, idle, whole; /* the run's objects; the two cursors */
	int run;
};

static int pf_in_run(const struct fs_obj *o, int run)
{
	return atomic_load(&o->prefetch) == run && fs_obj_live(o);
}

/* 1 when w's run is over (or no longer the latest), else 0. */
static int pf_wait_over(struct fs *fs, struct pf_wait *w)
{
	uint64_t before, want = 0, have = 0, pending = 0, h, p, u;

	if (fs_ctl_run(fs, &before) != w->run)
		return 1;
	while (w->idle < w->n) {
		struct fs_obj *o = fs_obj(fs, w->v[w->idle]);
		struct cachetier_obj *raw = pf_in_run(o, w->run) ? pf_raw(o) : NULL;

		if (raw && cachetier_obj_prefetch_state(raw, NULL))
			break;
		w->idle++;
	}
	while (w->whole < w->n) {
		struct fs_obj *o = fs_obj(fs, w->v[w->whole]);
		struct cachetier_obj *raw = pf_in_run(o, w->run) ? pf_raw(o) : NULL;

		if (pf_in_run(o, w->run) &&
		    (raw ? cachetier_obj_cached_bytes(raw) : 0) < fs_obj_size(o))
			break;
		w->whole++;
	}
	if (w->idle < w->n && w->whole < w->n)
		return 0;
	for (size_t i = 0; i < w->n; i++) {
		struct fs_obj *o = fs_obj(fs, w->v[i]);

		if (!pf_in_run(o, w->run))
			continue;
		pf_obj(o, &h, &p, &u);
		want += fs_obj_size(o);
		have += h;
		pending += p;
	}
	if (have >= want || pending == 0)
		return 1;
	w->idle = w->whole = 0;
	return 0;
}

/* An unsigned decimal of s[*i..n) at most max, blanks after it skipped:
 * 0, or -EINVAL. */
static int ctl_num(const char *s, size_t n, size_t *i, uint64_t max, uint64_t *v)
{
	size_t j = *i;

	*v = 0;
	while (j < n && s[j] >= '0' && s[j] <= '9') {
		*v = *v * 10 + (uint64_t)(s[j++] - '0');
		if (*v > max)
			return -EINVAL;
	}
	if (j == *i)
		return -EINVAL;
	while (j < n && s[j] == ' ')
		j++;
	*i = j;
	return 0;
}

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One tick of a prefetch wait (prefetch-wait, prefetch-check) with left ns
 * to its end: -EINTR (the request given up, counted), -ESHUTDOWN (an
 * unmount is near), else 0 after sleeping up to PF_WAIT_TICK_NS. */
static int pf_wait_tick(struct fs *fs, const struct fs_op_stop *stop, int64_t now, int64_t left)
{
	if (stop && stop->asked(stop->arg)) {
		fs->c.prefetch_wait_interrupts++;
		return -EINTR;
	}
	if (fs_ctl_notice(fs) > now)
		return -ESHUTDOWN;
	if (left > PF_WAIT_TICK_NS)
		left = PF_WAIT_TICK_NS;
	nanosleep(&(struct timespec){0, (long)left}, NULL);
	return 0;
}

static int prefetch_wait(struct fs *fs, const char *a, size_t n, const struct fs_op_stop *stop)
{
	struct pf_wait w = {0};
	uint64_t run, ms, before;
	uint32_t nobjs = fs->nobjs;
	size_t i = 0;
	int64_t end;
	int over;

	if (ctl_num(a, n, &i, INT_MAX, &run) < 0 || run == 0 ||
	    ctl_num(a, n, &i, FS_CTL_WAIT_MAX_MS, &ms) < 0 || i != n)
		return -EINVAL;
	end = mono_ns() + (int64_t)ms * 1000000;
	w.run = (int)run;
	if (fs_ctl_run(fs, &before) != w.run)
		return 1;
	for (uint32_t k = 0; k < nobjs; k++) {
		if (!pf_in_run(fs_obj(fs, k), w.run))
			continue;
		if (w.n % 256 == 0) {
			uint32_t *p = realloc(w.v, (w.n + 256) * sizeof(*p));

			if (!p) {
				free(w.v);
				return -ENOMEM;
			}
			w.v = p;
		}
		w.v[w.n++] = k;
	}
	fs->c.prefetch_waits++;
	for (;;) {
		int64_t left, now;

		over = pf_wait_over(fs, &w);
		now = mono_ns();
		left = end - now;
		if (over || left <= 0)
			break;
		over = pf_wait_tick(fs, stop, now, left);
		if (over)
			break;
	}
	free(w.v);
	return over;
}

/* 'prefetch-check MS [PATH]' (fs_ctl.h): the objects PATH names are
 * gathered once, as a prefetch of PATH names them (no run begun, no object
 * tagged, no fill asked); every PF_WAIT_TICK_NS a cursor walks past those
 * whose prefetch no longer runs (a look costs one object or two, as
 * prefetch-wait's). At the end, or when MS passed, what is cached of them
 * says the answer: a command that another prefetch run overtook learns
 * whether the bytes it asked for are cached, whoever fetched them. */

/* The answer (enum fs_ctl_check) for c's objects as they are now. */
static int pf_check_state(struct fs *fs, const struct pf_collect *c)
{
	uint64_t want = 0, have = 0, unfit = 0, pending = 0, h, p, u;

	for (size_t i = 0; i < c->n; i++) {
		struct fs_obj *o = fs_obj(fs, c->v[i]);
		uint64_t size = fs_obj_size(o);

		if (atomic_load(&o->known) == FS_INFO_MISSING || !fs_obj_live(o))
			continue; /* no longer in the source: not asked for now */
		pf_obj(o, &h, &p, &u);
		want += size;
		have += h < size ? h : size;
		pending += p;
		unfit += u;
	}
	if (pending)
		return FS_CTL_CHECK_RUNNING;
	if (have >= want)
		return FS_CTL_CHECK_CACHED;
	return want - have <= unfit ? FS_CTL_CHECK_UNFIT : FS_CTL_CHECK_MISSING;
}

static int prefetch_check(struct fs *fs, const char *a, size_t n, const struct fs_op_stop *stop)
{
	struct pf_collect c = {0};
	char path[PATH_MAX];
	uint64_t ms;
	size_t i = 0, idle = 0;
	int64_t end;
	int len, err;

	if (ctl_num(a, n, &i, FS_CTL_WAIT_MAX_MS, &ms) < 0)
		return -EINVAL;
	len = ctl_unescape(a + i, n - i, path, sizeof(path));
	if (len < 0)
		return len;
	end = mono_ns() + (int64_t)ms * 1000000;
	fs_ns_rdlock(fs);
	err = prefetch_path_locked(fs, path, (size_t)len, &c, 0);
	fs_ns_unlock(fs);
	if (err == 0 && c.nomem)
		err = -ENOMEM;
	if (err < 0) {
		free(c.v);
		return err;
	}
	fs->c.prefetch_waits++;
	for (;;) {
		int64_t left, now;

		while (idle < c.n) {
			struct fs_obj *o = fs_obj(fs, c.v[idle]);
			struct cachetier_obj *raw = fs_obj_live(o) ? pf_raw(o) : NULL;

			if (raw && cachetier_obj_prefetch_state(raw, NULL))
				break;
			idle++;
		}
		err = idle < c.n ? FS_CTL_CHECK_RUNNING : pf_check_state(fs, &c);
		if (err == FS_CTL_CHECK_RUNNING)
			idle = idle < c.n ? idle : 0; /* one began again: look again */
		now = mono_ns();
		left = end - now;
		if (err != FS_CTL_CHECK_RUNNING || left <= 0)
			break;
		err = pf_wait_tick(fs, stop, now, left);
		if (err)
			break;
	}
	free(c.v);
	return err;
}

/* 'umount-notice MS' (fs_ctl.h): 0, or -EINVAL. */
static int umount_notice(struct fs *fs, const char *a, size_t n)
{
	uint64_t ms;
	size_t i = 0;

	if (ctl_num(a, n, &i, FS_CTL_NOTICE_MAX_MS, &ms) < 0 || i != n)
		return -EINVAL;
	fs_ctl_notice_set(fs, ms ? mono_ns() + (int64_t)ms * 1000000 : 0);
	if (ms)
		fs->c.umount_notices++;
	return 0;
}

int fs_ctl_command(struct fs *fs, const char *buf, size_t len, pid_t pid,
		   const struct fs_op_stop *stop)
{
	return fs_ctl_command_as(fs, buf, len, geteuid(), getegid(), pid, stop);
}

int fs_ctl_command_as(struct fs *fs, const char *buf, size_t len, uid_t uid, gid_t gid, pid_t pid,
		      const struct fs_op_stop *stop)
{
	size_t i = 0;
	int err = 0, inside_shard = 0, waited = -1;

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
			} else if (cmd_is(buf + i, k - i, "prefetch-wait", &a)) {
				err = waited = prefetch_wait(fs, buf + i + a, k - i - a, stop);
			} else if (cmd_is(buf + i, k - i, "prefetch-check", &a)) {
				err = waited = prefetch_check(fs, buf + i + a, k - i - a, stop);
			} else if (cmd_is(buf + i, k - i, "umount-notice", &a)) {
				err = umount_notice(fs, buf + i + a, k - i - a);
			} else if (k - i == 7 && memcmp(buf + i, "refresh", 7) == 0) {
				err = refresh(fs);
			} else if (cmd_is(buf + i, k - i, "plan", &a) ||
				   cmd_is(buf + i, k - i, "plan-clear", &a)) {
				err = plan_command(fs, k - i > 4 && buf[i + 4] == '-', buf + i + a,
						   k - i - a, uid, gid, pid, stop);
			} else {
				fs_log(FS_LOG_WARN, "control: unknown command '%.*s'", (int)(k - i),
				       buf + i);
				err = -EINVAL;
			}
		}
		i = j + 1;
	}
	return err < 0 ? err : waited >= 0 ? waited : inside_shard;
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
	*name = fs_ctl_counters[i].name;
	*help = fs_ctl_counters[i].help;
	*gauge = fs_ctl_counters[i].type == CTL_GAUGE || fs_ctl_counters[i].type == CTL_GAUGE_MS;
	return 0;
}
