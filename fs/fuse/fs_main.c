/*
 * fs_main.c — the shardfs command: mount, --help, --version, and the
 * dispatch to the commands that need no FUSE (fs/tools/: umount, stats,
 * prefetch, refresh, plan in fs_client.c; pack; index).
 *
 * mount forks before doing any work: the child opens the source, lists
 * it, mounts and only then tells the waiting parent through a pipe that the
 * mount is ready, so "shardfs mount ... && ls MNT" works and every startup
 * error reaches the user's terminal with a non-zero exit. Until then the
 * child lives only as long as the parent waits for it: it gets SIGTERM
 * when the parent dies (PR_SET_PDEATHSIG: Ctrl-C, kill, kill -9 of
 * 'shardfs mount'), which ends it and the credential helpers it runs
 * (backend_kill_helpers), and a ready byte that nobody reads any more
 * (EPIPE) unmounts it again (fs_ll.c): no mount appears after the command
 * failed.
 */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "fs_i.h"
#include "shardfs_config.h"
#include "fs_ll.h"

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: shardfs COMMAND [ARGS]\n\n"
	    "Mount a WebDataset dataset (tar shards) as a read-only directory: every shard\n"
	    "shows as its raw .tar file and as a directory of its members.\n\n"
	    "commands:\n"
	    "  mount [OPTIONS] SOURCE MOUNTPOINT   mount; returns once ready ('shardfs mount "
	    "--help')\n"
	    "  umount MOUNTPOINT                   unmount (also a mount whose daemon died) and "
	    "wait\n"
	    "                                      for the daemon to finish\n"
	    "  stats MOUNTPOINT                    print the counters of a running mount\n"
	    "  prefetch MOUNTPOINT [PATH...]       fill the cache with PATHs (default: all), with "
	    "progress\n"
	    "  refresh MOUNTPOINT                  list the source again: show new, removed, "
	    "changed shards\n"
	    "  plan MOUNTPOINT FILE [--name NAME]  publish the order in which files will be read\n"
	    "  index [OPTIONS] SOURCE              build every shard's index ('shardfs index "
	    "--help')\n"
	    "  pack [OPTIONS] INPUT_DIR PREFIX     make WebDataset shards ('shardfs pack --help')\n"
	    "  --help, -h                          this help\n"
	    "  --version, -V                       print the version\n\n"
	    "%s"
	    "Credentials come from the environment and the usual files, never from the\n"
	    "command line; the first source that has them is used (see README.md):\n"
	    "  s3://  1. AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN)\n"
	    "         2. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN, exchanged\n"
	    "            with STS (AWS_ENDPOINT_URL_STS)\n"
	    "         3. the AWS_PROFILE (default) profile of ~/.aws/credentials\n"
	    "            (AWS_SHARED_CREDENTIALS_FILE)\n"
	    "         4. that profile's credential_process (~/.aws/config, AWS_CONFIG_FILE),\n"
	    "            killed after --credential-timeout\n"
	    "         5. the container endpoint: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or\n"
	    "            _FULL_URI (+ AWS_CONTAINER_AUTHORIZATION_TOKEN[_FILE])\n"
	    "         6. the EC2 instance metadata service (IMDSv2; AWS_EC2_METADATA_DISABLED)\n"
	    "  gs://  GOOGLE_OAUTH_ACCESS_TOKEN, GCS_HMAC_ACCESS_ID/GCS_HMAC_SECRET, the AWS keys\n"
	    "         of 1 and 3, then the GCE metadata server (GCE_METADATA_HOST; NO_GCE_CHECK)\n"
	    "Metadata services are asked with short timeouts (AWS_METADATA_SERVICE_TIMEOUT,\n"
	    "GCE_METADATA_TIMEOUT). Also: AWS_REGION, AWS_ENDPOINT_URL(_S3), AIS_ENDPOINT.\n",
	    fs_opt_sources_help);
}

static void version(void)
{
	printf("shardfs %s (libfuse %d.%d)\n", SHARDFS_VERSION, FUSE_MAJOR_VERSION,
	       FUSE_MINOR_VERSION);
}

static const char *source_error(int err)
{
	switch (err) {
	case -EPROTONOSUPPORT:
		return "unknown kind of source (see 'shardfs --help')";
	case -EINVAL:
		return "not a valid source (see 'shardfs --help')";
	case -EKEYREJECTED:
		return "the store's TLS certificate cannot be verified (--ca-file adds a CA)";
	case -EACCES:
		return "access denied (check the credentials in the environment)";
	case -ETIMEDOUT:
		return "timed out";
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

/* --layout imagefolder: build the view now, before the mount is ready, and
 * say on the caller's stderr what it left out and why (an empty view that
 * mounts silently looks like a bug in the data loader). */
static int imagefolder_report(struct fs *fs)
{
	static const char *const why_class[] = {
	    "no .cls member, or one that is not an integer (--class-from cls)",
	    "the image is not in a directory inside its shard (--class-from dir)",
	    "the key has no '_' (--class-from key-prefix)",
	};
	const struct fs_ifview *v;
	unsigned long long no_image, no_class, dup, bad_shards, left;
	int err = fs_if_get(fs, &v);

	if (err < 0) {
		fprintf(stderr, "shardfs: imagefolder: cannot build the view: %s\n",
			strerror(-err));
		if (err == -ENOSPC)
			fprintf(
			    stderr,
			    "shardfs: imagefolder: its cache directory %s is full: a dataset "
			    "larger than --imagefolder-build-memory is sorted in runs there and "
			    "its view written there; free space there, use another --cache-dir, "
			    "or raise --imagefolder-build-memory to build it in memory\n",
			    fs->cfg.ct.cache_dir);
		return err;
	}
	no_image = fs->c.if_no_image;
	no_class = fs->c.if_no_class;
	dup = fs->c.if_dup_dropped;
	bad_shards = fs->c.index_errors;
	left = no_image + no_class + dup;
	if (left == 0 && bad_shards == 0 && v->nfiles > 0)
		return 0;
	fprintf(stderr, "shardfs: imagefolder: %u images in %u classes from %u shards", v->nfiles,
		v->nclasses, fs->nshards);
	if (left)
		fprintf(stderr, "; %llu of %llu samples left out", left, left + v->nfiles);
	fprintf(stderr, "\n");
	if (no_class)
		fprintf(stderr, "shardfs: imagefolder: %llu samples without a class: %s\n",
			no_class, why_class[fs->cfg.class_from]);
	if (no_image)
		fprintf(stderr,
			"shardfs: imagefolder: %llu samples without an image member (jpg, jpeg, "
			"png, webp, bmp, ppm, pgm, tif, tiff)\n",
			no_image);
	if (dup)
		fprintf(stderr, "shardfs: imagefolder: %llu samples whose name was taken\n", dup);
	if (bad_shards)
		fprintf(stderr,
			"shardfs: imagefolder: %llu shards could not be indexed (see the log)\n",
			bad_shards);
	if (fs->nshards == 0)
		fprintf(stderr, "shardfs: imagefolder: the source has no shards\n");
	return 0;
}

static int mount_run(struct fs *fs, int ready_fd)
{
	char logpath[PATH_MAX];
	int err;

	/* the daemon's log (stderr until the log file opens); 'index' keeps
	 * the backend's default, plain lines on stderr */
	fs->cfg.be.log = fs_log_backend;
	err = backend_open(&fs->be, fs->cfg.source, &fs->cfg.be);
	if (err < 0) {
		const char *why = backend_last_error(NULL);

		fprintf(stderr, "shardfs: source %s: %s%s%s\n", fs->cfg.source, source_error(err),
			why && *why ? ": " : "", why ? why : "");
		return err;
	}
	raise_nofile(); /* before cachetier_open, which sizes its fd bound from it */
	err = cachetier_open(&fs->ct, &fs->cfg.ct, fs->be);
	if (err < 0) {
		fprintf(stderr, "shardfs: cache directory %s: %s\n", fs->cfg.ct.cache_dir,
			strerror(-err));
		return err;
	}
	warn_small_disk(fs);
	if (!fs->cfg.foreground) {
		if (fs->cfg.log_file)
			snprintf(logpath, sizeof(logpath), "%s", fs->cfg.log_file);
		else
			snprintf(logpath, sizeof(logpath), "%s/log", cachetier_dir(fs->ct));
		if (fs_log_open_file(logpath) < 0) {
			err = -errno;
			fprintf(stderr, "shardfs: log file %s: %s\n", logpath, strerror(errno));
			return err;
		}
	}
	fs_log_set_debug(fs->cfg.debug);
	if (backend_credentials_source(fs->be))
		fs_log(FS_LOG_INFO, "%s: credentials from %s", backend_describe(fs->be),
		       backend_credentials_source(fs->be));
	err = fs_ns_build(fs);
	if (err < 0) {
		const char *why = backend_last_error(fs->be);

		fprintf(stderr, "shardfs: cannot list %s: %s%s%s\n", fs->cfg.source,
			source_error(err), why && *why ? ": " : "", why ? why : "");
		return err;
	}
	if (fs->nobjs == 0)
		fs_log(FS_LOG_WARN, "source %s has no objects", backend_describe(fs->be));
	fs->uid = getuid();
	fs->gid = getgid();
	fs->mount_time = (int64_t)time(NULL);
	if (fs->cfg.layout == FS_LAYOUT_IMAGEFOLDER) {
		err = imagefolder_report(fs);
		if (err < 0)
			return err;
	}
	fs_warm_start(fs);
	fs_plan_fetch_start(fs);
	err = fs_ll_run(fs, ready_fd);
	/* -EPIPE, -EINTR: nobody waits any more (fs_ll_run) */
	if (err < 0 && ready_fd >= 0 && err != -EPIPE && err != -EINTR)
		fprintf(stderr, "shardfs: cannot mount at %s (see above)\n", fs->cfg.mountpoint);
	fs_log(FS_LOG_INFO, "unmounted %s", fs->cfg.mountpoint);
	return err;
}

#define FUSE_SUPER_MAGIC 0x65735546

static int mount_answers(const char *mnt)
{
	struct statfs sf;

	return statfs(mnt, &sf) == 0 && sf.f_type == FUSE_SUPER_MAGIC;
}

/* The -o list opts the way libfuse reads it (fuse_opt.c: a backslash takes
 * the next character as it is, or with three octal digits, the first 0 to
 * 3, that byte; a NUL byte ends the option), so that every later look at it
 * (nonempty, allow_other, the refused options) sees the options libfuse
 * will see: "s\\uid" and "\\163uid" are "suid". A comma or backslash inside
 * an option stays escaped. Returns a malloc'd string, or NULL (ENOMEM). */
static char *fuse_opts_canonical(const char *opts)
{
	char *out = malloc(2 * strlen(opts) + 1), *w = out;
	const char *p = opts;

	if (!out)
		return NULL;
	while (*p) {
		int ended = 0;

		if (w != out)
			*w++ = ',';
		for (; *p && *p != ','; p++) {
			char c = *p;

			if (c == '\\' && p[1]) {
				p++;
				c = *p;
				if (p[0] >= '0' && p[0] <= '3' && p[1] >= '0' && p[1] <= '7' &&
				    p[2] >= '0' && p[2] <= '7') {
					c = (char)((p[0] - '0') * 64 + (p[1] - '0') * 8 +
						   (p[2] - '0'));
					p += 2;
				}
			}
			if (c == '\0')
				ended = 1;
			if (ended)
				continue;
			if (c == ',' || c == '\\')
				*w++ = '\\';
			*w++ = c;
		}
		if (*p == ',')
			p++;
	}
	*w = '\0';
	return out;
}

/* The length of the first option of the canonical -o list p. */
static size_t fuse_opt_len(const char *p)
{
	size_t n = 0;

	while (p[n] && p[n] != ',')
		n += p[n] == '\\' && p[n + 1] ? 2 : 1;
	return n;
}

/* The first option of the canonical -o list opts that would undo what every
 * mount is, nosuid and nodev (NULL when none). */
static const char *fuse_opt_refused(const char *opts)
{
	static const char *const refused[] = {"suid", "dev"};

	for (const char *p = opts; p && *p;) {
		size_t len = fuse_opt_len(p);

		for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
			if (len == strlen(refused[i]) && strncmp(p, refused[i], len) == 0)
				return refused[i];
		p += len + (p[len] ? 1 : 0);
	}
	return NULL;
}

/* Remove every option name from the canonical -o list opts (in place); 1
 * when it was there. */
static int take_fuse_opt(char *opts, const char *name)
{
	size_t n = strlen(name);
	char *p = opts, *w = opts;
	int found = 0;

	if (!opts)
		return 0;
	while (*p) {
		size_t len = fuse_opt_len(p);
		int more = p[len] != '\0';

		if (len == n && strncmp(p, name, n) == 0) {
			found = 1;
		} else if (len) {
			if (w != opts)
				*w++ = ',';
			memmove(w, p, len);
			w += len;
		}
		p += len + (more ? 1 : 0);
	}
	*w = '\0';
	return found;
}

/* 1 when directory path has no entries but . and .. (or cannot be read:
 * the mount reports that itself). */
static int dir_is_empty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int empty = 1;

	if (!d)
		return 1;
	while (empty && (e = readdir(d)))
		empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
	closedir(d);
	return empty;
}

/* Until the mount is ready, SIGTERM, SIGINT and SIGHUP (and the parent's
 * death, which sends SIGTERM) end the process at once, and the credential
 * helpers it runs with it; fs_ll_run's own handlers take over before it
 * mounts. */
static void prestart_signal(int sig)
{
	backend_kill_helpers();
	_exit(128 + sig);
}

static void prestart_handlers(void)
{
	static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = prestart_signal;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
}

static int cmd_mount(int argc, char **argv)
{
	struct fs fs;
	struct stat st;
	int pfd[2] = {-1, -1}, err, err2, nonempty;
	const char *refused;
	pid_t pid, parent = 0;

	memset(&fs, 0, sizeof(fs));
	pthread_mutex_init(&fs.ctl_lock, NULL);
	pthread_mutex_init(&fs.if_lock, NULL);
	pthread_rwlock_init(&fs.plan_lock, NULL);
	err = fs_opt_parse_mount(argc, argv, &fs.cfg);
	if (err) {
		fs_opt_free(&fs.cfg);
		/* a usage error is 2, as for every command; a mountpoint that
		 * cannot be resolved is 1 */
		return err > 0 ? 0 : err == -EINVAL ? 2 : 1;
	}
	if (fs.cfg.fuse_opts) {
		char *canon = fuse_opts_canonical(fs.cfg.fuse_opts);

		if (!canon) {
			err = -ENOMEM;
			goto out;
		}
		free(fs.cfg.fuse_opts);
		fs.cfg.fuse_opts = canon;
	}
	refused = fuse_opt_refused(fs.cfg.fuse_opts);
	if (refused) {
		fprintf(
		    stderr,
		    "shardfs: mount: -o %s is refused: a shardfs mount is always ro,nosuid,nodev "
		    "(setuid bits and device files in shards are never honoured)\n",
		    refused);
		fs_opt_free(&fs.cfg);
		return 2;
	}
	nonempty = take_fuse_opt(fs.cfg.fuse_opts, "nonempty");
	if (fs_is_shardfs_mount_abs(fs.cfg.mountpoint)) {
		struct statfs sf;

		/* statfs always reaches the daemon (stat may be answered from
		 * the kernel's attribute cache) */
		if (statfs(fs.cfg.mountpoint, &sf) < 0 && errno == ENOTCONN)
			fs_say_dead_mount(fs.cfg.mountpoint);
		else
			fprintf(
			    stderr,
			    "shardfs: %s is already a shardfs mount; 'shardfs umount %s' first\n",
			    fs.cfg.mountpoint, fs.cfg.mountpoint);
		err = -EBUSY;
		goto out;
	}
	if (stat(fs.cfg.mountpoint, &st) < 0 || !S_ISDIR(st.st_mode)) {
		if (errno == ENOTCONN)
			fs_say_dead_mount(fs.cfg.mountpoint);
		else
			fprintf(stderr, "shardfs: mountpoint %s is not a directory\n",
				fs.cfg.mountpoint);
		err = -ENOTDIR;
		goto out;
	}
	if (!nonempty && !dir_is_empty(fs.cfg.mountpoint)) {
		fprintf(stderr,
			"shardfs: mountpoint %s is not empty: the mount would hide its files "
			"(-o nonempty mounts over them)\n",
			fs.cfg.mountpoint);
		err = -ENOTEMPTY;
		goto out;
	}
	if (!fs.cfg.foreground) {
		if (pipe2(pfd, O_CLOEXEC) < 0) {
			err = -errno;
			goto out;
		}
		parent = getpid();
		pid = fork();
		if (pid < 0) {
			err = -errno;
			goto out;
		}
		if (pid > 0) {
			char ok;
			ssize_t n;

			close(pfd[1]);
			do {
				n = read(pfd[0], &ok, 1);
			} while (n < 0 && errno == EINTR);
			close(pfd[0]);
			/* mounted; the kernel's INIT may still fail. statfs waits for
			 * INIT and fails if the session died */
			if (n == 1 && ok == 0 && !mount_answers(fs.cfg.mountpoint)) {
				fprintf(stderr, "shardfs: the mount at %s does not answer\n",
					fs.cfg.mountpoint);
				n = 0;
			}
			fs_opt_free(&fs.cfg);
			return n == 1 && ok == 0 ? 0 : 1;
		}
		close(pfd[0]);
		setsid();
		prestart_handlers();
		/* the parent may have died before prctl: then it is not ours */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
			_exit(1);
	} else {
		prestart_handlers();
	}
	err = mount_run(&fs, pfd[1]);
	/* fills still running (readahead, prefetch) end now instead of after
	 * their retry budgets; then the cache records what was filled */
	backend_cancel(fs.be);
	cachetier_cancel(fs.ct);
	fs_warm_stop(&fs);
	fs_plan_fetch_stop(&fs);
	fs_if_free(&fs);
	fs_shards_release(&fs);
	err2 = fs_ns_keep_learned(&fs);
	if (err2 < 0)
		fs_log(FS_LOG_WARN, "listing not kept in the cache: %s", strerror(-err2));
	fs_ns_free(&fs);
	fs_ctl_free(&fs);
	cachetier_close(fs.ct);
	backend_close(fs.be);
out:
	fs_opt_free(&fs.cfg);
	return err < 0 ? 1 : 0;
}

/* glibc gives each thread that allocates an arena of its own, up to 8 per
 * core, and an arena keeps the pages it once held. The daemon's 30 to 50
 * threads (FUSE workers with libfuse's 1 MiB request buffers, fills,
 * fetches) then hold more and more of it: in stress-soak on 2 cores, the
 * default let a local mount grow from 25 MB to 57 MB in 120 s (45 MB after
 * a plateau at 300 s, 82 MB for the remote mount); with 4 arenas three runs
 * ended at 25 to 43 MB (51 to 55 MB remote). Reads of 8 KiB and more
 * splice from the cache files; libfuse copies smaller replies through
 * malloc, which 4 arenas serve without contention at these rates. */
#define MAIN_MALLOC_ARENAS 4

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

#ifdef M_ARENA_MAX
	mallopt(M_ARENA_MAX, MAIN_MALLOC_ARENAS);
#endif

	if (!cmd) {
		usage(stderr);
		return 2;
	}
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
		version();
		return 0;
	}
	if (strcmp(cmd, "mount") == 0)
		return cmd_mount(argc - 2, argv + 2);
	if (strcmp(cmd, "umount") == 0 || strcmp(cmd, "unmount") == 0)
		return fs_umount_main(argc - 2, argv + 2);
	if (strcmp(cmd, "stats") == 0)
		return fs_stats_main(argc - 2, argv + 2);
	if (strcmp(cmd, "prefetch") == 0)
		return fs_prefetch_main(argc - 2, argv + 2);
	if (strcmp(cmd, "refresh") == 0)
		return fs_refresh_main(argc - 2, argv + 2);
	if (strcmp(cmd, "plan") == 0)
		return fs_plan_main(argc - 2, argv + 2);
	if (strcmp(cmd, "pack") == 0)
		return fs_pack_main(argc - 2, argv + 2);
	if (strcmp(cmd, "index") == 0)
		return fs_index_main(argc - 2, argv + 2);
	fprintf(stderr, "shardfs: unknown command '%s' (see 'shardfs --help')\n", cmd);
	return 2;
}
