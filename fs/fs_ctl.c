/*
 * fs_ctl.c — the files of MOUNTPOINT/.shardfs/: counters as JSON (stats)
 * and as Prometheus text (metrics). Rendered on open into a private buffer,
 * so one reader sees one consistent snapshot. Never contains credentials:
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

const char *const fs_ctl_names[FS_CTL_COUNT] = {".shardfs", "stats", "metrics"};

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
};

static size_t collect(struct fs *fs, struct counter *c, size_t max)
{
	struct cachetier_stats cs;
	size_t n = 0;

	cachetier_get_stats(fs->ct, &cs);
#define C(nm, hp, v)                                                                               \
	do {                                                                                       \
		if (n < max)                                                                       \
			c[n++] = (struct counter){nm, hp, (uint64_t)(v)};                          \
	} while (0)
	C("objects", "objects in the source", fs->nobjs);
	C("shards", "objects that are shards", fs->nshards);
	C("source_dirs", "directories in the source", fs->ndirs);
	C("source_bytes", "bytes of all objects in the source", fs->total_bytes);
	C("index_built", "shard indexes built by reading the shard", fs->c.index_built);
	C("index_loaded", "shard indexes loaded from the cache directory", fs->c.index_loaded);
	C("index_errors", "shards that could not be indexed", fs->c.index_errors);
	C("index_save_errors", "indexes that could not be saved", fs->c.index_save_errors);
	C("index_bytes_scanned", "shard bytes read to build indexes", fs->c.index_bytes_scanned);
	C("index_mem_bytes", "memory held by loaded indexes", fs->c.index_mem_bytes);
	C("members", "entries in loaded shard indexes", fs->c.members);
	C("damaged_shards", "loaded shards with damage", fs->c.damaged_shards);
	C("skipped_members", "members left out (unsafe names, special files)",
	  fs->c.skipped_members);
	C("lookups", "lookup requests", fs->c.lookups);
	C("getattrs", "getattr requests", fs->c.getattrs);
	C("readdirs", "readdir requests", fs->c.readdirs);
	C("reads", "read requests", fs->c.reads);
	C("read_bytes", "bytes returned by reads", fs->c.read_bytes);
	C("read_errors", "reads answered with an error", fs->c.read_errors);
	C("decoded_streams", "compressed shards decoded into the cache", cs.decoded_streams);
	C("decoded_bytes", "bytes written by decoding", cs.decoded_bytes);
	C("decoded_reused", "decoded copies reused from the cache", cs.decoded_reused);
#undef C
	return n;
}

static void render_stats(struct fs *fs, struct out *o)
{
	struct counter c[64];
	size_t n = collect(fs, c, 64);

	outf(o, "{\n  \"version\": ");
	out_json_str(o, SHARDFS_VERSION);
	outf(o, ",\n  \"pid\": %d,\n  \"source\": ", (int)getpid());
	out_json_str(o, backend_describe(fs->be));
	outf(o, ",\n  \"cache_dir\": ");
	out_json_str(o, cachetier_dir(fs->ct));
	outf(o, ",\n  \"layout\": \"shards\",\n  \"mount_time\": %" PRId64, fs->mount_time);
	for (size_t i = 0; i < n; i++)
		outf(o, ",\n  \"%s\": %" PRIu64, c[i].name, c[i].value);
	outf(o, "\n}\n");
}

static void render_metrics(struct fs *fs, struct out *o)
{
	struct counter c[64];
	size_t n = collect(fs, c, 64);

	for (size_t i = 0; i < n; i++) {
		outf(o, "# HELP shardfs_%s %s\n# TYPE shardfs_%s gauge\nshardfs_%s %" PRIu64 "\n",
		     c[i].name, c[i].help, c[i].name, c[i].name, c[i].value);
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
	*buf = o.buf;
	*len = o.len;
	return 0;
}
