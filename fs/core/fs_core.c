/*
 * fs_core.c — the core's lifecycle (fs_core.h): the composition root that
 * opens the backend and the cache tier, initialises every lock of struct
 * fs, builds the namespace, starts the core's threads, and undoes all of it
 * in fs_close, in the opposite order.
 *
 * Order of fs_close: fs_cancel (transfers and cache waits end now instead
 * of after their retry budgets, threads are told to stop); the threads are
 * joined (warm, plan fetcher, notifier: fs_thread.c bounds the joins); the
 * views, shard indexes and namespace are freed (after keeping what a brace
 * pattern's mount learned); the cache tier closes (recording what it
 * filled), then the backend; the locks, the configuration and fs last.
 *
 * Non-goals: the FUSE session (fs/fuse starts the notifier with its
 * operations, and serves); parsing the command line (fs_opt.c).
 */
#include <errno.h>
#include <limits.h>
#include <mntent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "fs_i.h"
#include "fs_view.h"

/* What a source error means, for the terminal. */
static const char *source_error(int err, const char *source)
{
	/* a local source (a path, file://) is read with the rights of the user
	 * who mounts: EACCES there is no matter of credentials */
	int local = !strstr(source, "://") || strncmp(source, "file://", 7) == 0;

	if (err == -EACCES && local)
		return "Permission denied: this user cannot read it or search a directory on its "
		       "path (a local source is read with the rights of the user who mounts; "
		       "ls -ld each directory of the path)";
	switch (err) {
	case -EPROTONOSUPPORT:
		return "unknown kind of source (see 'shardfs --help')";
	case -EINVAL:
		return "not a valid source (see 'shardfs --help')";
	case -EKEYREJECTED:
		return "the store's TLS certificate cannot be verified (--ca-file adds a CA)";
	case -EACCES:
		return "access denied (check the credentials in the environment)";
	case -EREMCHG: /* backend_s3.c: the store asks for another region */
		return "the bucket is in another region";
	case -ETIMEDOUT:
		return "timed out";
	case -ENOTDIR: /* a local path that is a file: a shard, a device, a FIFO */
		return "not a directory: a local source is the directory that holds the shards (to "
		       "mount one shard, mount its directory)";
	case -ELOOP: /* fs_ns_list.c; also a loop of symbolic links */
		return "the source is the mount point, lies inside it, or holds it: its listing "
		       "would read the mount itself (a mount point outside the source, a source "
		       "outside the mount point)";
	default:
		return strerror(-err);
	}
}

/* Take the hard limit of open files: the cache tier sizes its set of open
 * local shard fds from the soft limit (cachetier_obj.c), so raise it first. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* A cache disk that cannot take one chunk per connection above its
 * reserve makes every remote fill wait for eviction, and compressed shards
 * fail with ENOSPC: say so on the terminal (the mount still goes ahead). */
static void warn_small_disk(struct fs *fs)
{
	uint64_t avail, reserve, room, chunk = fs->cfg.ct.chunk_bytes;
	unsigned conns = fs->cfg.be.connections;

	if (cachetier_disk(fs->ct, &avail, &reserve) < 0)
		return;
	room = avail > reserve ? avail - reserve : 0;
	if (room >= chunk * conns)
		return;
	fprintf(stderr,
		"shardfs: warning: the cache disk of %s has %.1f MiB free above its %.1f MiB "
		"reserve, less than one chunk per connection (%u x %.1f MiB): free space there, "
		"use another --cache-dir, or lower --connections or --chunk-size\n",
		fs->cfg.ct.cache_dir, (double)room / (1 << 20), (double)reserve / (1 << 20), conns,
		(double)chunk / (1 << 20));
}

/* Options that only some sources use, given to another (their values
 * differ from the defaults, so they were given): one row each, said on the
 * terminal; the mount goes ahead. Before, each did nothing without a word
 * ('--get-batch auto' on s3://, a user's hope of batched reads). */
static void warn_unused_opts(struct fs *fs)
{
	const char *src = fs->cfg.source;
	int ais = strncmp(src, "ais://", 6) == 0, local = backend_is_local(fs->be);
	int signs = strncmp(src, "s3://", 5) == 0 || strncmp(src, "gs://", 5) == 0;
	const struct {
		int unused;
		const char *what;
	} rows[] = {
	    {fs->cfg.get_batch == FS_GET_BATCH_AUTO && !ais,
	     "--get-batch auto is for ais:// sources: it does nothing for this one"},
	    {fs->cfg.be.no_sign && !signs,
	     "--no-sign is for s3:// and gs:// sources: it does nothing for this one"},
	    {fs->cfg.ct.direct_fills != CACHETIER_DIRECT_OFF && local,
	     "--direct-fills is for remote sources: a local source's shards are read in place, "
	     "nothing fills the cache"},
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (rows[i].unused)
			fprintf(stderr, "shardfs: warning: %s\n", rows[i].what);
}

/* A cache smaller than one chunk (a --chunk-size given: else fs_opt.c
 * sizes chunks to the cache): every fill of a chunk takes it over its
 * limit while it runs (the flusher evicts it back down after): say so.
 * Only a remote source fills the cache. */
static void warn_small_cache(struct fs *fs)
{
	uint64_t size = fs->cfg.ct.cache_size_bytes, chunk = fs->cfg.ct.chunk_bytes;
	char a[32], b[32];

	if (size >= chunk || backend_is_local(fs->be))
		return;
	fs_human_bytes(size, a, sizeof(a));
	fs_human_bytes(chunk, b, sizeof(b));
	fprintf(stderr,
		"shardfs: warning: --cache-size %s is smaller than one chunk (--chunk-size %s): "
		"each fill of a chunk takes the cache over its size until it is evicted again; "
		"give a --chunk-size of at most an eighth of --cache-size, or leave it out (then "
		"it is sized to the cache)\n",
		a, b);
}

/* A stage (--plan-memory) of more than half of this machine's memory may
 * hold that much of planned bytes at once: say so before it does. */
static void warn_big_stage(struct fs *fs)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t mem = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
	char a[32], b[32];

	if (!mem || fs->cfg.plan_memory_bytes <= mem / 2 || backend_is_local(fs->be))
		return;
	fs_human_bytes(fs->cfg.plan_memory_bytes, a, sizeof(a));
	fs_human_bytes(mem, b, sizeof(b));
	fprintf(stderr,
		"shardfs: warning: --plan-memory %s is more than half of this machine's memory "
		"(%s): the stage may hold that much of planned bytes at once; give less\n",
		a, b);
}

/* An open-file limit (raised to its hard limit at open) below what the
 * store's connections, the FUSE threads (a /dev/fuse clone and a splice
 * pipe each) and the cache tier's reserve take: connections past it fail
 * and are retried, and reads slow down with no other sign (a planned epoch
 * at ulimit -n 64: 5.8 s, not 0.6 s). Say so at mount. */
static void warn_few_fds(struct fs *fs)
{
	struct rlimit rl;
	uint64_t want = (uint64_t)fs->cfg.be.max_connections + 3u * fs->cfg.max_threads + 128u;

	if (backend_is_local(fs->be) || getrlimit(RLIMIT_NOFILE, &rl) < 0 ||
	    rl.rlim_cur == RLIM_INFINITY || (uint64_t)rl.rlim_cur >= want)
		return;
	fprintf(stderr,
		"shardfs: warning: the open-file limit is %llu (ulimit -n): --max-connections %u "
		"and --threads %u want about %llu; connections past it fail and are retried, "
		"and reads are slower: raise it (ulimit -n, systemd's LimitNOFILE=) or give "
		"lower ones\n",
		(unsigned long long)rl.rlim_cur, fs->cfg.be.max_connections, fs->cfg.max_threads,
		(unsigned long long)want);
}

/* The readahead window's cap as the fetch scheduler's rules set it (at
 * most an eighth of --cache-size, at least one chunk), said once at mount
 * when it is not --readahead (given or the default). */
static void log_readahead(struct fs *fs)
{
	uint64_t asked = fs->cfg.ct.readahead_max_bytes, used = cachetier_readahead_max(fs->ct);
	char a[32], u[32], c[32];
	const char *dflt = fs->cfg.readahead_given ? "" : " (the default)";

	if (used == asked || backend_is_local(fs->be))
		return;
	fs_human_bytes(asked, a, sizeof(a));
	fs_human_bytes(used, u, sizeof(u));
	if (used < asked) {
		fs_human_bytes(fs->cfg.ct.cache_size_bytes, c, sizeof(c));
		fs_log(FS_LOG_INFO,
		       "--readahead %s%s is more than an eighth of --cache-size %s: a reader's "
		       "readahead window is at most %s",
		       a, dflt, c, u);
	} else {
		fs_human_bytes(fs->cfg.ct.chunk_bytes, c, sizeof(c));
		fs_log(FS_LOG_INFO,
		       "--readahead %s%s is less than one chunk (--chunk-size %s): a reader's "
		       "readahead window is at most %s",
		       a, dflt, c, u);
	}
}

/* Every lock of struct fs and the subsystems' states, before anything may
 * take one: 0 or -ENOMEM. */
static int core_locks_init(struct fs *fs)
{
	fs_thread_init(&fs->pfx, "plan fetcher", "shardfs-plan");
	fs_learn_init(fs);
	if (fs_ns_new(&fs->ns) < 0 || fs_ctl_new(&fs->ctl) < 0 || fs_notify_new(&fs->notify) < 0 ||
	    fs_if_new(&fs->imagefolder) < 0 || fs_lidx_new(&fs->lidx) < 0 ||
	    fs_plans_new(&fs->plans) < 0)
		return -ENOMEM;
	return fs_warm_new(&fs->warm);
}

static void core_locks_destroy(struct fs *fs)
{
	fs_thread_destroy(&fs->pfx);
	fs_learn_destroy(fs);
	fs_warm_free(fs->warm);
	fs_plans_free(fs->plans); /* emptied by fs_ctl_clear */
	fs_ctl_free(fs->ctl);
	fs_if_free(fs->imagefolder); /* its views freed by the layout's free hook */
	fs_notify_free(fs->notify);
	fs_ns_free(fs->ns);
	fs_lidx_free(fs->lidx);
}

/* The daemon's log: the log file (unless in the foreground) and --debug. */
static int core_log_open(struct fs *fs)
{
	char logpath[PATH_MAX];

	if (!fs->cfg.foreground) {
		if (fs->cfg.log_file)
			snprintf(logpath, sizeof(logpath), "%s", fs->cfg.log_file);
		else
			snprintf(logpath, sizeof(logpath), "%s/log", cachetier_dir(fs->ct));
		if (fs_log_open_file(logpath) < 0) {
			int err = -errno;

			fprintf(stderr, "shardfs: log file %s: %s\n", FS_Q(logpath),
				strerror(-err));
			return err;
		}
	}
	fs_log_set_debug(fs->cfg.debug);
	return 0;
}

/* The backend and the cache tier. */
static int core_open_stores(struct fs *fs, unsigned flags)
{
	int err;

	/* a mount's log is the core's (stderr until the log file opens);
	 * otherwise plain lines on stderr; both quote the names by one rule */
	if (flags & FS_OPEN_MOUNT)
		fs->cfg.be.log = fs_log_backend;
	else if (!fs->cfg.be.log)
		fs->cfg.be.log = fs_log_backend_plain;
	err = backend_open(&fs->be, fs->cfg.source, &fs->cfg.be);
	if (err < 0) {
		const char *why = backend_last_error(NULL);

		fprintf(stderr, "shardfs: source %s: %s%s%s\n", FS_Q(fs->cfg.source),
			source_error(err, fs->cfg.source), why && *why ? ": " : "", why ? why : "");
		return err;
	}
	raise_nofile(); /* before cachetier_open, which sizes its fd bound from it */
	err = fs_cachedir_trust(&fs->cfg.ct.cache_dir, 1); /* says why not */
	if (err < 0)
		return err;
	err = cachetier_open(&fs->ct, &fs->cfg.ct, fs->be);
	if (err < 0) {
		int perm = err == -EACCES || err == -EPERM || err == -EROFS || err == -ENOENT;

		/* the user may not know which directory was chosen, nor why */
		fprintf(stderr, "shardfs: cache directory %s: %s%s\n", FS_Q(fs->cfg.ct.cache_dir),
			strerror(-err),
			perm ? "; name one this user can write with --cache-dir DIR (in fstab: "
			       "cache-dir=DIR). Without it the cache directory is "
			       "$XDG_CACHE_HOME/shardfs, else $HOME/.cache/shardfs, else "
			       "/var/cache/shardfs"
			     : "");
		return err;
	}
	err = fetch_new(fs->ct, &fs->fetch);
	if (err < 0)
		return err;
	if (!(flags & FS_OPEN_MOUNT))
		return 0;
	warn_unused_opts(fs);
	warn_small_disk(fs);
	warn_small_cache(fs);
	warn_big_stage(fs);
	warn_few_fds(fs);
	err = core_log_open(fs);
	if (err < 0)
		return err;
	log_readahead(fs);
	if (backend_credentials_source(fs->be))
		fs_log(FS_LOG_INFO, "%s: credentials from %s", backend_describe(fs->be),
		       backend_credentials_source(fs->be));
	return 0;
}

/* A mount of a source without shards: it may be right (a directory of
 * plain files), but a user who expected shards sees an empty or
 * shard-less mount and no error, so it is said in the log and, when the
 * log is a file, on stderr too, before 'shardfs mount' returns. The
 * imagefolder layout says its own (fs_if_view.c). */
static void core_say_no_shards(struct fs *fs)
{
	char what[160];

	if (fs->nshards > 0 || fs->cfg.layout == FS_LAYOUT_IMAGEFOLDER)
		return;
	if (fs->nobjs == 0)
		snprintf(what, sizeof(what), "is empty: the mount shows nothing");
	else
		snprintf(what, sizeof(what),
			 "holds no shards: the mount shows its %u other %s only", fs->nobjs,
			 fs_plural(fs->nobjs, "file", "files"));
	fs_log(FS_LOG_WARN, "source %s %s (shards are .tar, .tar.gz, .tgz and .tar.zst files)",
	       backend_describe(fs->be), what);
	if (fs_log_fd() != STDERR_FILENO)
		fprintf(
		    stderr,
		    "shardfs: warning: source %s %s (shards are .tar, .tar.gz, .tgz and .tar.zst "
		    "files)\n",
		    backend_describe(fs->be), what);
}

int fs_open(struct fs_config *cfg, unsigned flags, struct fs **out)
{
	struct fs *fs = calloc(1, sizeof(*fs));
	int err;

	*out = NULL;
	if (!fs) {
		fs_opt_free(cfg);
		return -ENOMEM;
	}
	fs->cfg = *cfg;
	memset(cfg, 0, sizeof(*cfg));
	err = core_locks_init(fs);
	/* the owner shown: --uid, --gid, else who mounted */
	fs->uid = fs->cfg.uid_given ? (uid_t)fs->cfg.uid : getuid();
	fs->gid = fs->cfg.gid_given ? (gid_t)fs->cfg.gid : getgid();
	fs->mount_time = (int64_t)time(NULL);
	if (err == 0)
		err = core_open_stores(fs, flags);
	if (err == 0) {
		err = fs_ns_build(fs);
		if (err < 0) {
			const char *why = backend_last_error(fs->be);

			fprintf(stderr, "shardfs: cannot list %s: %s%s%s\n", FS_Q(fs->cfg.source),
				source_error(err, fs->cfg.source), why && *why ? ": " : "",
				why ? why : "");
		}
	}
	if (err == 0 && (flags & FS_OPEN_MOUNT)) {
		core_say_no_shards(fs);
		if (fs_layout_of(fs)->prepare)
			err = fs_layout_of(fs)->prepare(fs);
	}
	if (err < 0) {
		fs_close(fs);
		return err;
	}
	if (flags & FS_OPEN_MOUNT) {
		fs_warm_start(fs);
		fs_plan_fetch_start(fs);
	}
	*out = fs;
	return 0;
}

void fs_cancel(struct fs *fs)
{
	if (!fs)
		return;
	backend_cancel(fs->be);
	cachetier_cancel(fs->ct);
	fs_warm_cancel(fs);
	fs_thread_cancel(&fs->pfx);
	fs_notify_cancel(fs); /* a refresh's wait for the notifier (fs_ctl.c) */
}

void fs_close(struct fs *fs)
{
	int err;

	if (!fs)
		return;
	fs_cancel(fs);
	/* a thread left running still uses fs: keep all of it */
	if (fs_warm_stop(fs) < 0 || fs_plan_fetch_stop(fs) < 0 || fs_notify_stop(fs) < 0 ||
	    fs_sidecar_drain(fs) < 0) {
		fs_log(FS_LOG_ERR, "a thread of the core did not stop: its state is not freed");
		return;
	}
	if (fs_layout_of(fs)->free)
		fs_layout_of(fs)->free(fs);
	fs_shards_release(fs);
	err = fs_ns_keep_learned(fs);
	if (err < 0)
		fs_log(FS_LOG_WARN, "listing not kept in the cache: %s", strerror(-err));
	fs_ns_clear(fs);
	fs_ctl_clear(fs);
	fetch_free(fs->fetch);
	cachetier_close(fs->ct);
	backend_close(fs->be);
	core_locks_destroy(fs);
	fs_opt_free(&fs->cfg);
	free(fs);
}

/* fs_exit_on_signals' handler: async-signal-safe. */
static void exit_on_signal(int sig)
{
	backend_kill_helpers();
	_exit(128 + sig);
}

void fs_exit_on_signals(void)
{
	static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = exit_on_signal;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
}

int fs_config_new(struct fs_config **cfg)
{
	*cfg = calloc(1, sizeof(**cfg));
	return *cfg ? 0 : -ENOMEM;
}

void fs_config_free(struct fs_config *cfg)
{
	if (!cfg)
		return;
	fs_opt_free(cfg);
	free(cfg);
}

void fs_config_mount_args(struct fs_config *cfg, struct fs_mount_args *a)
{
	a->source = cfg->source;
	a->mountpoint = cfg->mountpoint;
	a->fuse_opts = &cfg->fuse_opts;
	a->foreground = cfg->foreground;
	a->debug = cfg->debug;
	a->max_threads = cfg->max_threads;
	a->kernel_ra_bytes = cfg->kernel_ra_bytes;
}

int fs_config_sidecar(const struct fs_config *cfg)
{
	return cfg->sidecar;
}

void fs_mount_args(struct fs *fs, struct fs_mount_args *a)
{
	fs_config_mount_args(&fs->cfg, a);
}

const char *fs_describe(const struct fs *fs)
{
	return backend_describe(fs->be);
}

void fs_counts(const struct fs *fs, uint32_t *objs, uint32_t *shards, uint32_t *dirs)
{
	*objs = fs->nobjs;
	*shards = fs->nshards;
	*dirs = fs->ndirs;
}

void fs_session_caps(struct fs *fs, int can_skip_open, int can_skip_opendir)
{
	fs->no_opendir = can_skip_opendir != 0;
	fs->no_open = !fs->cfg.strict_open && can_skip_open;
}

int fs_no_open(const struct fs *fs)
{
	return fs->no_open;
}

int fs_no_opendir(const struct fs *fs)
{
	return fs->no_opendir;
}

void fs_count_getattr(struct fs *fs)
{
	fs->c.getattrs++;
}

void fs_count_read_error(struct fs *fs)
{
	fs->c.read_errors++;
}

void fs_count_op_error(struct fs *fs)
{
	fs->c.op_errors++;
}

void fs_count_forgets(struct fs *fs, uint64_t n)
{
	fs->c.forgets += n;
}

void fs_count_request(struct fs *fs, enum fs_request kind)
{
	switch (kind) {
	case FS_REQ_OPEN:
		fs->c.opens++;
		break;
	case FS_REQ_RELEASE:
		fs->c.releases++;
		break;
	case FS_REQ_FLUSH:
		fs->c.flushes++;
		break;
	case FS_REQ_IOCTL:
		fs->c.ioctls++;
		break;
	}
}

int fs_mount_lookup(const char *abs, long *owner, int *allow_other)
{
	struct mntent ent;
	char buf[3 * PATH_MAX];
	int found = 0;
	FILE *f = setmntent("/proc/self/mounts", "re");

	if (!f)
		return 0;
	while (!found && getmntent_r(f, &ent, buf, sizeof(buf)))
		found = strcmp(ent.mnt_type, "fuse.shardfs") == 0 && strcmp(ent.mnt_dir, abs) == 0;
	if (found) {
		const char *u = hasmntopt(&ent, "user_id");

		if (owner) {
			char *end;

			*owner = -1;
			if (u && u[7] == '=') {
				errno = 0;
				*owner = strtol(u + 8, &end, 10);
				if (errno || end == u + 8 || (*end && *end != ','))
					*owner = -1;
			}
		}
		if (allow_other)
			*allow_other = hasmntopt(&ent, "allow_other") != NULL;
	}
	endmntent(f);
	return found;
}
