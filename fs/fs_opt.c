/*
 * fs_opt.c — the mount command line, as data: one table of options with
 * their type, the field they fill (offsetof into struct fs_config), their
 * argument and their help text. The help output is generated from the same
 * table, so it cannot drift from what is parsed.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_i.h"

enum opt_type { OPT_FLAG, OPT_STR, OPT_UINT, OPT_SECONDS, OPT_APPEND, OPT_SIZE, OPT_COUNT /* 0..1024 */ };

struct opt {
	const char *lng;
	char shrt;
	enum opt_type type;
	size_t off;
	const char *arg;
	const char *help;
};

static const struct opt mount_opts[] = {
	{"foreground", 'f', OPT_FLAG, offsetof(struct fs_config, foreground), NULL,
	 "stay in the foreground and log to stderr"},
	{"debug", 'd', OPT_FLAG, offsetof(struct fs_config, debug), NULL,
	 "log every FUSE request (implies -f)"},
	{"cache-dir", 0, OPT_STR, offsetof(struct fs_config, cache_dir), "DIR",
	 "cache directory, created 0700 (default: $XDG_CACHE_HOME/shardfs or ~/.cache/shardfs)"},
	{"log-file", 0, OPT_STR, offsetof(struct fs_config, log_file), "FILE",
	 "log file in the background (default: 'log' in the source's cache directory)"},
	{"threads", 0, OPT_UINT, offsetof(struct fs_config, max_threads), "N",
	 "most FUSE worker threads (default: 16)"},
	{"timeout", 0, OPT_SECONDS, offsetof(struct fs_config, entry_timeout_s), "SECONDS",
	 "kernel cache time of names and attributes (default: 86400; data is immutable)"},
	{"cache-size", 0, OPT_SIZE, offsetof(struct fs_config, cache_size_bytes), "SIZE",
	 "most bytes of remote data kept in the cache directory (default: 20G)"},
	{"readahead", 0, OPT_SIZE, offsetof(struct fs_config, readahead_max_bytes), "SIZE",
	 "largest readahead window of a sequential reader (default: 64M; at most 1/8 of --cache-size)"},
	{"chunk-size", 0, OPT_SIZE, offsetof(struct fs_config, chunk_bytes), "SIZE",
	 "unit of cache fills, one range request each (default: 8M)"},
	{"max-decode-ratio", 0, OPT_UINT, offsetof(struct fs_config, max_decode_ratio), "N",
	 "refuse a compressed shard (EFBIG) that decodes, past its first 64M, to more than N "
	 "times the compressed bytes read: a decompression bomb (default: 500; real shards "
	 "1-140)"},
	{"max-decoded-size", 0, OPT_SIZE, offsetof(struct fs_config, max_decoded_bytes), "SIZE",
	 "refuse a compressed shard (EFBIG) that decodes to more than SIZE (default: 64G)"},
	{"min-free", 0, OPT_SIZE, offsetof(struct fs_config, min_free_bytes), "SIZE",
	 "free space the cache keeps on its disk: the smaller of SIZE and --min-free-percent "
	 "of the disk (default: 1G)"},
	{"min-free-percent", 0, OPT_UINT, offsetof(struct fs_config, min_free_percent), "N",
	 "see --min-free; 1 to 100 (default: 5)"},
	{"prefetch-shards", 0, OPT_COUNT, offsetof(struct fs_config, prefetch_shards), "N",
	 "shards fetched ahead of a reader that reads shards in order (default: 2)"},
	{"strict-open", 0, OPT_FLAG, offsetof(struct fs_config, strict_open), NULL,
	 "answer every open: opening a file for writing fails at open (EROFS), at the cost of a "
	 "round trip per open (default: opens cost nothing, writes fail with EROFS)"},
	{"no-xattr", 0, OPT_FLAG, offsetof(struct fs_config, no_xattr), NULL,
	 "no extended attributes (no user.shardfs.*): `ls -l` then costs one round trip per file "
	 "instead of three (default: xattrs on)"},
	{"endpoint", 0, OPT_STR, offsetof(struct fs_config, endpoint), "URL",
	 "remote store endpoint (default: AWS_ENDPOINT_URL, AIS_ENDPOINT, or the store's own)"},
	{"no-sign", 0, OPT_FLAG, offsetof(struct fs_config, no_sign), NULL,
	 "anonymous requests to S3/GCS (public buckets)"},
	{"connections", 0, OPT_UINT, offsetof(struct fs_config, connections), "N",
	 "most parallel connections to a remote store (default: 8)"},
	{"ca-file", 0, OPT_STR, offsetof(struct fs_config, ca_file), "FILE",
	 "CA bundle that verifies the store's TLS certificate (default: the system's)"},
	{"retry-budget", 0, OPT_SECONDS, offsetof(struct fs_config, retry_budget_s), "SECONDS",
	 "give up retrying a remote request after this long, then EIO (default: 30)"},
	{"stall-timeout", 0, OPT_SECONDS, offsetof(struct fs_config, stall_timeout_s), "SECONDS",
	 "retry a remote transfer that received nothing for this long (default: 20)"},
	/* issue 5 */
	{"layout", 0, OPT_STR, offsetof(struct fs_config, layout_name), "shards|imagefolder",
	 "what the mount shows: shards and their members, or <class>/<image> (default: shards)"},
	{"class-from", 0, OPT_STR, offsetof(struct fs_config, class_from_name), "cls|dir|key-prefix",
	 "imagefolder class: the .cls integer, the member's directory, the key up to '_' (default: cls)"},
	{"option", 'o', OPT_APPEND, offsetof(struct fs_config, fuse_opts), "OPT[,OPT...]",
	 "FUSE mount options, e.g. allow_other (then default_permissions applies)"},
};

#define NOPTS (sizeof(mount_opts) / sizeof(mount_opts[0]))

void fs_opt_mount_usage(FILE *f)
{
	fprintf(f, "usage: shardfs mount [OPTIONS] SOURCE MOUNTPOINT\n\n"
		   "Mount the WebDataset shards of SOURCE read-only at MOUNTPOINT. Returns once\n"
		   "the mount is ready (unless -f). SOURCE is a local directory or file:///path.\n\n"
		   "options:\n");
	for (size_t i = 0; i < NOPTS; i++) {
		const struct opt *o = &mount_opts[i];
		char left[64];

		if (o->shrt)
			snprintf(left, sizeof(left), "-%c, --%s%s%s", o->shrt, o->lng,
				 o->arg ? " " : "", o->arg ? o->arg : "");
		else
			snprintf(left, sizeof(left), "    --%s%s%s", o->lng, o->arg ? " " : "",
				 o->arg ? o->arg : "");
		fprintf(f, "  %-28s %s\n", left, o->help);
	}
	fprintf(f, "  %-28s %s\n", "-h, --help", "show this help");
}

static int opt_set(struct fs_config *cfg, const struct opt *o, const char *val)
{
	char *field = (char *)cfg + o->off;
	char *end;

	switch (o->type) {
	case OPT_FLAG:
		*(int *)field = 1;
		return 0;
	case OPT_STR: {
		char *s = strdup(val);

		if (!s)
			return -ENOMEM;
		free(*(char **)field);
		*(char **)field = s;
		return 0;
	}
	case OPT_UINT:
	case OPT_COUNT: {
		unsigned long long v, min = o->type == OPT_COUNT ? 0 : 1;

		errno = 0;
		v = strtoull(val, &end, 10);
		if (errno || end == val || *end || v < min || v > 1024 || val[0] == '-') {
			fprintf(stderr, "shardfs: --%s wants a number from %llu to 1024, not '%s'\n",
				o->lng, min, val);
			return -EINVAL;
		}
		*(unsigned *)field = (unsigned)v;
		return 0;
	}
	case OPT_SECONDS: {
		double v;

		errno = 0;
		v = strtod(val, &end);
		if (errno || end == val || *end || v < 0 || v > 1e9) {
			fprintf(stderr, "shardfs: --%s wants seconds, not '%s'\n", o->lng, val);
			return -EINVAL;
		}
		*(double *)field = v;
		return 0;
	}
	case OPT_SIZE: {
		uint64_t v;

		if (fs_parse_size(val, &v) < 0 || v == 0) {
			fprintf(stderr, "shardfs: --%s wants a size like 512M or 20G, not '%s'\n",
				o->lng, val);
			return -EINVAL;
		}
		*(uint64_t *)field = v;
		return 0;
	}
	case OPT_APPEND: {
		char **p = (char **)field;
		size_t n = (*p ? strlen(*p) + 1 : 0) + strlen(val) + 1;
		char *s = malloc(n);

		if (!s)
			return -ENOMEM;
		snprintf(s, n, "%s%s%s", *p ? *p : "", *p ? "," : "", val);
		free(*p);
		*p = s;
		return 0;
	}
	}
	return -EINVAL;
}

static const struct opt *opt_find(const char *arg, const char **val)
{
	*val = NULL;
	if (arg[1] == '-') {
		const char *name = arg + 2, *eq = strchr(name, '=');
		size_t n = eq ? (size_t)(eq - name) : strlen(name);

		for (size_t i = 0; i < NOPTS; i++) {
			if (strlen(mount_opts[i].lng) == n &&
			    strncmp(mount_opts[i].lng, name, n) == 0) {
				if (eq)
					*val = eq + 1;
				return &mount_opts[i];
			}
		}
		return NULL;
	}
	for (size_t i = 0; i < NOPTS; i++) {
		if (mount_opts[i].shrt && arg[1] == mount_opts[i].shrt) {
			if (arg[2])
				*val = arg + 2;
			return &mount_opts[i];
		}
	}
	return NULL;
}

/* Returns 0, 1 when help was shown, or a negative errno after printing why. */
int fs_opt_parse_mount(int argc, char **argv, struct fs_config *cfg)
{
	const char *pos[2];
	int npos = 0, only_pos = 0, err;

	cfg->max_threads = 16; /* FUSE threads block on disk and decode; 16 keeps 2 cores busy */
	cfg->prefetch_shards = 2; /* one shard being read, two on the way: hides a fill's latency */
	cfg->entry_timeout_s = 86400; /* an object never changes for one ETag */
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *val;
		const struct opt *o;

		if (only_pos || a[0] != '-' || a[1] == '\0') {
			if (npos == 2) {
				fprintf(stderr, "shardfs: unexpected argument '%s'\n", a);
				return -EINVAL;
			}
			pos[npos++] = a;
			continue;
		}
		if (strcmp(a, "--") == 0) {
			only_pos = 1;
			continue;
		}
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			fs_opt_mount_usage(stdout);
			return 1;
		}
		o = opt_find(a, &val);
		if (!o) {
			fprintf(stderr, "shardfs: unknown option '%s' (see 'shardfs mount --help')\n",
				a);
			return -EINVAL;
		}
		if (o->type == OPT_FLAG && val) {
			fprintf(stderr, "shardfs: option '%s' takes no value\n", a);
			return -EINVAL;
		}
		if (o->type != OPT_FLAG && !val) {
			if (i + 1 >= argc) {
				fprintf(stderr, "shardfs: option '%s' needs %s\n", a, o->arg);
				return -EINVAL;
			}
			val = argv[++i];
		}
		err = opt_set(cfg, o, val);
		if (err < 0)
			return err;
	}
	if (npos != 2) {
		fprintf(stderr, "shardfs: mount needs SOURCE and MOUNTPOINT\n");
		fs_opt_mount_usage(stderr);
		return -EINVAL;
	}
	if (cfg->debug)
		cfg->foreground = 1;
	if (cfg->min_free_percent > 100) {
		fprintf(stderr, "shardfs: --min-free-percent wants 1 to 100, not %u\n",
			cfg->min_free_percent);
		return -EINVAL;
	}
	/* issue 5: --layout and --class-from */
	if (cfg->layout_name && strcmp(cfg->layout_name, "shards") != 0) {
		if (strcmp(cfg->layout_name, "imagefolder") != 0) {
			fprintf(stderr, "shardfs: --layout wants shards or imagefolder, not '%s'\n",
				cfg->layout_name);
			return -EINVAL;
		}
		cfg->layout = FS_LAYOUT_IMAGEFOLDER;
	}
	if (cfg->class_from_name) {
		static const char *const names[] = {"cls", "dir", "key-prefix"};

		cfg->class_from = -1;
		for (int i = 0; i < 3; i++)
			if (strcmp(cfg->class_from_name, names[i]) == 0)
				cfg->class_from = i;
		if (cfg->class_from < 0) {
			fprintf(stderr, "shardfs: --class-from wants cls, dir or key-prefix, not '%s'\n",
				cfg->class_from_name);
			return -EINVAL;
		}
	}
	cfg->source = strdup(pos[0]);
	cfg->mountpoint = realpath(pos[1], NULL);
	if (!cfg->mountpoint) {
		fprintf(stderr, "shardfs: mountpoint %s: %s\n", pos[1], strerror(errno));
		return -errno;
	}
	if (!cfg->cache_dir) {
		const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
		char buf[4096];

		if (xdg && xdg[0] == '/')
			snprintf(buf, sizeof(buf), "%s/shardfs", xdg);
		else if (home && home[0] == '/')
			snprintf(buf, sizeof(buf), "%s/.cache/shardfs", home);
		else
			snprintf(buf, sizeof(buf), "/var/cache/shardfs");
		cfg->cache_dir = strdup(buf);
	}
	if (!cfg->source || !cfg->cache_dir)
		return -ENOMEM;
	return 0;
}

void fs_opt_free(struct fs_config *cfg)
{
	free(cfg->source);
	free(cfg->mountpoint);
	free(cfg->cache_dir);
	free(cfg->log_file);
	free(cfg->fuse_opts);
	free(cfg->endpoint);
	free(cfg->ca_file);
	free(cfg->layout_name);     /* issue 5 */
	free(cfg->class_from_name); /* issue 5 */
	memset(cfg, 0, sizeof(*cfg));
}

int fs_parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'T': case 't': shift += 10; /* fall through */
	case 'G': case 'g': shift += 10; /* fall through */
	case 'M': case 'm': shift += 10; /* fall through */
	case 'K': case 'k': shift += 10; end++; break;
	case '\0': break;
	default: return -EINVAL;
	}
	if (*end == 'i' || *end == 'B')
		end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
	if (*end || (shift && v > (~0ull >> shift)))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}
