/*
 * fs_main.c — the shardfs command: mount, umount, stats, prefetch, refresh,
 * --help, --version.
 *
 * mount forks before doing any work: the child opens the source, lists
 * it, mounts and only then tells the waiting parent through a pipe that the
 * mount is ready, so "shardfs mount ... && ls MNT" works and every startup
 * error reaches the user's terminal with a non-zero exit.
 */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <mntent.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "fs_i.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shardfs COMMAND [ARGS]\n\n"
		"Mount a WebDataset dataset (tar shards) as a read-only directory: every shard\n"
		"shows as its raw .tar file and as a directory of its members.\n\n"
		"commands:\n"
		"  mount [OPTIONS] SOURCE MOUNTPOINT   mount; returns once ready ('shardfs mount --help')\n"
		"  umount MOUNTPOINT                   unmount (also a mount whose daemon died) and wait\n"
		"                                      for the daemon to finish\n"
		"  stats MOUNTPOINT                    print the counters of a running mount\n"
		"  prefetch MOUNTPOINT [PATH...]       fill the cache with PATHs (default: all), with progress\n"
		"  refresh MOUNTPOINT                  list the source again: show new, removed, changed shards\n"
		"  index [OPTIONS] SOURCE              build every shard's index ('shardfs index --help')\n"
		"  pack [OPTIONS] INPUT_DIR PREFIX     make WebDataset shards ('shardfs pack --help')\n"
		"  --help, -h                          this help\n"
		"  --version, -V                       print the version\n\n"
		"%s"
		"Credentials come from the environment (AWS_ACCESS_KEY_ID,\n"
		"AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE, AWS_REGION,\n"
		"AWS_ENDPOINT_URL, GCS_HMAC_ACCESS_ID/GCS_HMAC_SECRET, GOOGLE_OAUTH_ACCESS_TOKEN,\n"
		"AIS_ENDPOINT), never from the command line.\n",
		fs_opt_sources_help);
}

void fs_say_dead_mount(const char *mnt)
{
	fprintf(stderr,
		"shardfs: the daemon of %s is gone (the mount answers \"%s\"); "
		"'shardfs umount %s' cleans up\n",
		mnt, strerror(ENOTCONN), mnt);
}

/* Say why path cannot be used: a dead mount gets its own message. */
static void say_path_error(const char *what, const char *path, int err)
{
	if (err == ENOTCONN)
		fs_say_dead_mount(path);
	else
		fprintf(stderr, "shardfs: %s%s: %s\n", what, path, strerror(err));
}

static int is_help(const char *a)
{
	return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0;
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
	default:
		return strerror(-err);
	}
}

/* Take the hard limit of open files: the cache tier sizes its set of open
 * local shard fds from the soft limit (cachetier.c), so raise it first. */
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
	uint64_t avail, reserve, room, chunk = fs->cfg.chunk_bytes;
	unsigned conns = fs->cfg.connections;

	if (cachetier_disk(fs->ct, &avail, &reserve) < 0)
		return;
	room = avail > reserve ? avail - reserve : 0;
	if (room >= chunk * conns)
		return;
	fprintf(stderr,
		"shardfs: warning: the cache disk of %s has %.1f MiB free above its %.1f MiB "
		"reserve, less than one chunk per connection (%u x %.1f MiB): free space there, "
		"use another --cache-dir, or lower --connections or --chunk-size\n",
		fs->cfg.cache_dir, (double)room / (1 << 20), (double)reserve / (1 << 20), conns,
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
		fprintf(stderr, "shardfs: imagefolder: cannot build the view: %s\n", strerror(-err));
		return err;
	}
	no_image = fs->c.if_no_image;
	no_class = fs->c.if_no_class;
	dup = fs->c.if_dup_dropped;
	bad_shards = fs->c.index_errors;
	left = no_image + no_class + dup;
	if (left == 0 && bad_shards == 0 && v->nfiles > 0)
		return 0;
	fprintf(stderr, "shardfs: imagefolder: %u images in %u classes from %u shards",
		v->nfiles, v->nclasses, fs->nshards);
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
		fprintf(stderr, "shardfs: imagefolder: %llu shards could not be indexed (see the log)\n",
			bad_shards);
	if (fs->nshards == 0)
		fprintf(stderr, "shardfs: imagefolder: the source has no shards\n");
	return 0;
}

static int mount_run(struct fs *fs, int ready_fd)
{
	struct backend_config bc;
	struct cachetier_config cc;
	char logpath[PATH_MAX];
	int err;

	fs_opt_backend_config(&fs->cfg, &bc);
	/* the daemon's log (stderr until the log file opens); 'index' keeps
	 * the backend's default, plain lines on stderr */
	bc.log = fs_log_backend;
	err = backend_open(&fs->be, fs->cfg.source, &bc);
	if (err < 0) {
		const char *why = backend_last_error(NULL);

		fprintf(stderr, "shardfs: source %s: %s%s%s\n", fs->cfg.source, source_error(err),
			why && *why ? ": " : "", why ? why : "");
		return err;
	}
	fs_opt_cachetier_config(&fs->cfg, backend_describe(fs->be), &cc);
	fs->fill_threads = cc.fill_threads;
	raise_nofile(); /* before cachetier_open, which sizes its fd bound from it */
	err = cachetier_open(&fs->ct, &cc, fs->be);
	if (err < 0) {
		fprintf(stderr, "shardfs: cache directory %s: %s\n", fs->cfg.cache_dir,
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

		fprintf(stderr, "shardfs: cannot list %s: %s%s%s\n", fs->cfg.source, source_error(err),
			why && *why ? ": " : "", why ? why : "");
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
	err = fs_ll_run(fs, ready_fd);
	if (err < 0 && ready_fd >= 0)
		fprintf(stderr, "shardfs: cannot mount at %s (see above)\n", fs->cfg.mountpoint);
	fs_log(FS_LOG_INFO, "unmounted %s", fs->cfg.mountpoint);
	return err;
}

static int is_shardfs_mount_abs(const char *abs);

#define FUSE_SUPER_MAGIC 0x65735546

static int mount_answers(const char *mnt)
{
	struct statfs sf;

	return statfs(mnt, &sf) == 0 && sf.f_type == FUSE_SUPER_MAGIC;
}

/* Remove every option name from the comma-separated list opts (in place);
 * 1 when it was there. */
static int take_fuse_opt(char *opts, const char *name)
{
	size_t n = strlen(name);
	char *p = opts, *w = opts;
	int found = 0;

	if (!opts)
		return 0;
	while (*p) {
		char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);

		if (len == n && strncmp(p, name, n) == 0) {
			found = 1;
		} else if (len) {
			if (w != opts)
				*w++ = ',';
			memmove(w, p, len);
			w += len;
		}
		p += len + (e ? 1 : 0);
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

static int cmd_mount(int argc, char **argv)
{
	struct fs fs;
	struct stat st;
	int pfd[2] = {-1, -1}, err, nonempty;
	pid_t pid;

	memset(&fs, 0, sizeof(fs));
	pthread_mutex_init(&fs.ctl_lock, NULL);
	pthread_mutex_init(&fs.if_lock, NULL); /* issue 5 */
	err = fs_opt_parse_mount(argc, argv, &fs.cfg);
	if (err)
		goto out;
	nonempty = take_fuse_opt(fs.cfg.fuse_opts, "nonempty");
	if (is_shardfs_mount_abs(fs.cfg.mountpoint)) {
		struct statfs sf;

		/* statfs always reaches the daemon (stat may be answered from
		 * the kernel's attribute cache) */
		if (statfs(fs.cfg.mountpoint, &sf) < 0 && errno == ENOTCONN)
			fs_say_dead_mount(fs.cfg.mountpoint);
		else
			fprintf(stderr,
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
	}
	err = mount_run(&fs, pfd[1]);
	/* fills still running (readahead, prefetch) end now instead of after
	 * their retry budgets; then the cache records what was filled */
	backend_cancel(fs.be);
	cachetier_cancel(fs.ct);
	fs_warm_stop(&fs);
	fs_if_free(&fs); /* issue 5 */
	fs_shards_release(&fs);
	fs_ns_free(&fs);
	for (int i = 0; i < FS_CTL_SNAPS; i++)
		free(fs.ctl_snaps[i].buf);
	for (int i = 0; i < FS_CTL_COUNT; i++)
		free(fs.ctl_cur[i].buf);
	cachetier_close(fs.ct);
	backend_close(fs.be);
out:
	fs_opt_free(&fs.cfg);
	return err < 0 ? 1 : 0;
}

/* Read a control file of a running mount into a malloc'd string. */
static char *read_ctl(const char *mnt, const char *name)
{
	char path[PATH_MAX], *buf = NULL;
	size_t len = 0, cap = 0;
	int fd;

	snprintf(path, sizeof(path), "%s/.shardfs/%s", mnt, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	for (;;) {
		ssize_t n;

		if (len + 4096 + 1 > cap) {
			char *p = realloc(buf, cap = (cap + 4096) * 2);

			if (!p) {
				free(buf);
				close(fd);
				return NULL;
			}
			buf = p;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (buf)
		buf[len] = '\0';
	return buf;
}

static long json_int(const char *json, const char *key)
{
	char pat[64];
	const char *p;
	char *end;
	long v;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(json, pat);
	if (!p)
		return -1;
	errno = 0;
	v = strtol(p + strlen(pat), &end, 10);
	return errno || end == p + strlen(pat) ? -1 : v;
}

/* Is the absolute path abs a mount point of type fuse.shardfs? Reads the
 * mount table with getmntent_r (which undoes its escapes, so a mount point
 * with a space is found) and never touches the path itself (a dead
 * daemon's mount answers ENOTCONN). */
static int is_shardfs_mount_abs(const char *abs)
{
	struct mntent ent;
	char buf[3 * PATH_MAX];
	int found = 0;
	FILE *f = setmntent("/proc/self/mounts", "re");

	if (!f)
		return 0;
	while (!found && getmntent_r(f, &ent, buf, sizeof(buf)))
		found = strcmp(ent.mnt_type, "fuse.shardfs") == 0 && strcmp(ent.mnt_dir, abs) == 0;
	endmntent(f);
	return found;
}

/* The same for a path as given: relative to the working directory,
 * trailing slashes ignored, not resolved (it may not answer). */
static int is_shardfs_mount(const char *path)
{
	char want[PATH_MAX];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(want))
		return 0;
	if (path[0] == '/') {
		memcpy(want, path, n + 1);
	} else {
		char cwd[PATH_MAX];
		int m;

		if (!getcwd(cwd, sizeof(cwd)))
			return 0;
		m = snprintf(want, sizeof(want), "%s/%s", cwd, path);
		if (m < 0 || (size_t)m >= sizeof(want))
			return 0;
	}
	while ((n = strlen(want)) > 1 && want[n - 1] == '/')
		want[n - 1] = '\0';
	return is_shardfs_mount_abs(want);
}

/* Is pid still running? A zombie (exited, not yet reaped by its parent)
 * has finished its work and counts as gone. */
static int pid_running(long pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	if (pid <= 0 || kill((pid_t)pid, 0) != 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 1;
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* "pid (comm) S ..." */
	return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

static int cmd_umount(int argc, char **argv)
{
	char *stats, err[1024];
	size_t elen = 0;
	long pid;
	pid_t child;
	int status, efd[2];

	if (argc == 1 && is_help(argv[0])) {
		printf("usage: shardfs umount MOUNTPOINT\n\n"
		       "Unmount a shardfs mount and wait (up to 60 s) for its daemon to finish.\n"
		       "A mount whose daemon died is unmounted too.\n");
		return 0;
	}
	if (argc != 1 || argv[0][0] == '-') {
		fprintf(stderr, "usage: shardfs umount MOUNTPOINT\n");
		return 2;
	}
	stats = read_ctl(argv[0], "stats");
	pid = stats ? json_int(stats, "pid") : -1;
	free(stats);
	/* a daemon that died (kill -9) leaves a mount that only unmounts */
	if (pid <= 0 && !is_shardfs_mount(argv[0])) {
		fprintf(stderr, "shardfs: %s is not a shardfs mount\n", argv[0]);
		return 1;
	}
	if (pipe2(efd, O_CLOEXEC) < 0) {
		fprintf(stderr, "shardfs: %s\n", strerror(errno));
		return 1;
	}
	child = fork();
	if (child == 0) {
		dup2(efd[1], STDERR_FILENO);
		execlp("fusermount3", "fusermount3", "-u", "--", argv[0], (char *)NULL);
		fprintf(stderr, "shardfs: cannot run fusermount3: %s\n", strerror(errno));
		_exit(127);
	}
	close(efd[1]);
	for (;;) { /* fusermount3's complaint, shown unless the fallback below works */
		ssize_t n = read(efd[0], err + elen, sizeof(err) - 1 - elen);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		elen += (size_t)n;
		if (elen == sizeof(err) - 1)
			elen = 0; /* keep reading (the pipe must drain); the tail is enough */
	}
	err[elen] = '\0';
	close(efd[0]);
	if (child < 0 || waitpid(child, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0) {
		/* Busy (a reader waits in a read, a shell sits in the mount): the
		 * daemon stops itself on SIGTERM — cancels what is in flight, so
		 * waiting reads fail, detaches the mount and exits. */
		if (pid > 0 && pid_running(pid) && kill((pid_t)pid, SIGTERM) == 0) {
			fprintf(stderr,
				"shardfs: %s cannot be unmounted (busy): stopped daemon %ld instead "
				"(reads in flight fail; the mount is detached)\n",
				argv[0], pid);
		} else {
			fputs(err, stderr);
			fprintf(stderr, "shardfs: unmounting %s failed\n", argv[0]);
			return 1;
		}
	}
	/* wait for the daemon to finish writing its state (60 s at most) */
	for (int i = 0; i < 600 && pid_running(pid); i++) {
		struct timespec ts = {0, 100 * 1000 * 1000};

		nanosleep(&ts, NULL);
	}
	if (pid_running(pid)) {
		fprintf(stderr, "shardfs: unmounted, but daemon %ld is still running\n", pid);
		return 1;
	}
	return 0;
}

static int cmd_stats(int argc, char **argv)
{
	char *stats;

	if (argc == 1 && is_help(argv[0])) {
		printf("usage: shardfs stats MOUNTPOINT\n\n"
		       "Print the counters of a running mount (MOUNTPOINT/.shardfs/stats), one\n"
		       "per line; MOUNTPOINT/.shardfs/metrics has them in Prometheus text format.\n");
		return 0;
	}
	if (argc != 1 || argv[0][0] == '-') {
		fprintf(stderr, "usage: shardfs stats MOUNTPOINT\n");
		return 2;
	}
	stats = read_ctl(argv[0], "stats");
	if (!stats) {
		if (errno == ENOTCONN)
			fs_say_dead_mount(argv[0]);
		else
			fprintf(stderr, "shardfs: %s is not a shardfs mount\n", argv[0]);
		return 1;
	}
	/* JSON lines '  "key": value,' become 'key  value' */
	for (char *line = strtok(stats, "\n"); line; line = strtok(NULL, "\n")) {
		char *k = strchr(line, '"'), *ke, *v;
		size_t vl;

		if (!k)
			continue;
		ke = strchr(k + 1, '"');
		if (!ke || strncmp(ke, "\": ", 3) != 0)
			continue;
		v = ke + 3;
		vl = strlen(v);
		while (vl && v[vl - 1] == ' ') /* values are padded to a fixed width */
			v[--vl] = '\0';
		if (vl && v[vl - 1] == ',')
			v[--vl] = '\0';
		if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"') {
			v[vl - 1] = '\0';
			v++;
		}
		*ke = '\0';
		printf("%-22s %s\n", k + 1, v);
	}
	free(stats);
	return 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Where PATH lies relative to the mount root: paths inside the mount
 * (absolute, or relative to the working directory) lose the mount prefix;
 * anything else is taken as relative to the mount root already. */
static const char *mount_relative(const char *mnt, const char *path, char *buf, size_t n)
{
	char *abs = realpath(path, NULL);
	size_t ml = strlen(mnt);

	if (abs && strncmp(abs, mnt, ml) == 0 && (abs[ml] == '/' || abs[ml] == '\0')) {
		snprintf(buf, n, "%s", abs[ml] ? abs + ml + 1 : "");
		free(abs);
		return buf;
	}
	free(abs);
	while (*path == '/')
		path++;
	return path;
}

/* Send command lines to a running mount (FS_CTL_IOC on its control file).
 * Returns what the mount's fs_ctl_command returned, or a negative errno. */
static int ctl_send(int fd, const char *cmd)
{
	static char buf[FS_CTL_IOC_LEN];
	int r;

	if (strlen(cmd) >= sizeof(buf))
		return -ENAMETOOLONG;
	memset(buf, 0, sizeof(buf));
	memcpy(buf, cmd, strlen(cmd));
	r = ioctl(fd, FS_CTL_IOC, buf);
	return r < 0 ? -errno : r;
}

/* The prefetch numbers of a stats snapshot (-1: missing). */
struct pf_stats {
	long want, have, unfit, pending, room, limit, fetched, errors;
};

static int pf_stats_read(const char *mnt, struct pf_stats *p)
{
	char *stats = read_ctl(mnt, "stats");

	if (!stats)
		return -1;
	p->want = json_int(stats, "prefetch_bytes");
	p->have = json_int(stats, "prefetch_cached_bytes");
	p->unfit = json_int(stats, "prefetch_unfit_bytes");
	p->pending = json_int(stats, "prefetch_pending");
	p->room = json_int(stats, "cache_room_bytes");
	p->limit = json_int(stats, "cache_bytes_limit");
	p->fetched = json_int(stats, "bytes_fetched");
	p->errors = json_int(stats, "fill_errors");
	free(stats);
	return p->want < 0 || p->have < 0 || p->unfit < 0 || p->pending < 0 ? -1 : 0;
}

/* Exit status of 'shardfs prefetch' (also in its --help and README.md). */
#define PF_EXIT_OK 0  /* everything asked for that fits is cached */
#define PF_EXIT_ERR 1 /* a PATH was refused, the mount was lost, or bytes that fit are not
		       * cached (fills failed, or readers' fills evicted them meanwhile) */

static int cmd_prefetch(int argc, char **argv)
{
	char *mnt, path[PATH_MAX], rel[PATH_MAX], line[PATH_MAX + 16];
	char a[32], b[32], c[32], d[32];
	double t0, last_print = 0, last_progress;
	uint64_t last_have = 0;
	struct pf_stats s0, s;
	int fd, tty = isatty(STDOUT_FILENO), rc = PF_EXIT_OK, have_s0, ended = 0, sent = 0;

	if (argc >= 1 && is_help(argv[0])) {
		printf("usage: shardfs prefetch MOUNTPOINT [PATH...]\n\n"
		       "Fill the cache of a running mount with the objects at or below each PATH\n"
		       "(a shard, a directory, a file; none: everything) and follow the progress.\n"
		       "A PATH inside a shard's member directory prefetches that whole shard.\n"
		       "A prefetch fills only the room the cache has (--cache-size, the disk's\n"
		       "reserve) and never evicts: it says up front how much fits, fetches that,\n"
		       "and ends with what it fetched, what was cached already and what did not fit.\n\n"
		       "exit status: 0 when everything that fits is cached (bytes that did not fit\n"
		       "are no error); 1 when a PATH is not in the mount, the mount went away, or\n"
		       "bytes that fit are not cached (fills failed: see the mount's log).\n");
		return 0;
	}
	if (argc < 1 || argv[0][0] == '-') {
		fprintf(stderr, "usage: shardfs prefetch MOUNTPOINT [PATH...]\n");
		return 2;
	}
	mnt = realpath(argv[0], NULL);
	if (!mnt) {
		say_path_error("", argv[0], errno);
		return 1;
	}
	snprintf(path, sizeof(path), "%s/.shardfs/control", mnt);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOTCONN)
			fs_say_dead_mount(argv[0]);
		else
			fprintf(stderr, "shardfs: %s is not a shardfs mount\n", argv[0]);
		free(mnt);
		return 1;
	}
	/* what was cached before, and what had been fetched: the summary's
	 * "cached already" and the rate of this run */
	have_s0 = pf_stats_read(mnt, &s0) == 0;
	for (int i = argc > 1 ? 1 : 0; i < argc; i++) {
		const char *r = argc > 1 ? mount_relative(mnt, argv[i], rel, sizeof(rel)) : "";
		int n = snprintf(line, sizeof(line), "prefetch %s\n", r), err;

		err = n < 0 || (size_t)n >= sizeof(line) ? -ENAMETOOLONG : ctl_send(fd, line);
		if (err < 0) {
			fprintf(stderr, "shardfs: prefetch %s: %s\n", argc > 1 ? argv[i] : "(all)",
				err == -ENOENT ? "no such file or directory in the mount"
					       : strerror(-err));
			rc = PF_EXIT_ERR;
			continue;
		}
		sent++;
		if (err == 1)
			printf("prefetch: %s is inside a shard: prefetching the whole shard\n",
			       argv[i]);
	}
	close(fd);
	if (!sent) { /* the mount's progress would be of other prefetches */
		free(mnt);
		return rc;
	}
	/* up front: what was asked, what is cached, and what fits */
	if (pf_stats_read(mnt, &s) < 0) {
		fprintf(stderr, "shardfs: lost the mount at %s\n", mnt);
		free(mnt);
		return PF_EXIT_ERR;
	}
	{
		uint64_t missing = (uint64_t)(s.want - s.have);
		uint64_t room = s.room < 0 ? 0 : (uint64_t)s.room;

		fs_human_bytes((uint64_t)s.want, a, sizeof(a));
		fs_human_bytes((uint64_t)s.have, b, sizeof(b));
		fs_human_bytes(room, c, sizeof(c));
		fs_human_bytes(s.limit < 0 ? 0 : (uint64_t)s.limit, d, sizeof(d));
		if (s.have >= s.want)
			printf("prefetch: %s asked, all of it cached already\n", a);
		else
			printf("prefetch: %s asked, %s of it cached; the cache (--cache-size %s) "
			       "has room for %s more\n",
			       a, b, d, c);
		if (missing > room) {
			fs_human_bytes(missing - room, a, sizeof(a));
			printf("prefetch: about %s will not fit: a prefetch fills only free room "
			       "and never evicts (a larger --cache-size, or prefetch less)\n",
			       a);
		}
		fflush(stdout);
	}
	t0 = last_progress = now_s();
	for (;;) {
		char have_str[32], want_str[32], rate_s[48];
		double t = now_s(), rate = 0;

		if (pf_stats_read(mnt, &s) < 0) {
			fprintf(stderr, "%sshardfs: lost the mount at %s\n", tty ? "\n" : "", mnt);
			rc = PF_EXIT_ERR;
			break;
		}
		/* ended: all cached, or the mount's prefetch of these objects is
		 * over (what did not fit was skipped, failed fills gave up) */
		ended = s.have >= s.want || s.pending == 0;
		if ((uint64_t)s.have != last_have) {
			last_have = (uint64_t)s.have;
			last_progress = t;
		}
		/* the rate of what this run fetched from the store, not of what
		 * was cached already */
		if (have_s0 && s.fetched > s0.fetched && t - t0 >= 0.01)
			rate = (double)(s.fetched - s0.fetched) / (t - t0);
		if (have_s0 && s.fetched <= s0.fetched)
			snprintf(rate_s, sizeof(rate_s),
				 s.have >= s.want ? "already cached" : ended ? "" : "waiting for the store");
		else
			snprintf(rate_s, sizeof(rate_s), "%.1f MB/s", rate / 1e6);
		fs_human_bytes((uint64_t)s.have, have_str, sizeof(have_str));
		fs_human_bytes((uint64_t)s.want, want_str, sizeof(want_str));
		if (tty && (t - last_print >= 0.25 || ended)) {
			int pct = s.want ? (int)(100.0 * (double)s.have / (double)s.want) : 100;
			int bar = pct / 5;
			double eta = rate > 0 ? (double)(s.want - s.have) / rate : 0;

			printf("\r[%.*s%.*s] %3d%%  %s / %s  %s  ETA %d:%02d ", bar,
			       "####################", 20 - bar, "--------------------", pct,
			       have_str, want_str, rate_s, (int)eta / 60, (int)eta % 60);
			fflush(stdout);
			last_print = t;
		} else if (!tty && (t - last_print >= 5 || ended)) {
			printf("prefetch: %s of %s cached%s%s\n", have_str, want_str,
			       rate_s[0] ? ", " : "", rate_s);
			fflush(stdout);
			last_print = t;
		}
		if (ended)
			break;
		if (t - last_progress > 120) {
			/* a safety net: the mount's fills give up within their retry
			 * budget, so this is not reached while the daemon works */
			fprintf(stderr, "\nshardfs: prefetch made no progress for 2 minutes (%ld "
					"fill errors; see the log)\n",
				s.errors);
			rc = PF_EXIT_ERR;
			break;
		}
		{
			/* the counters are polled often enough that the command
			 * ends within 20 ms of the last fill (a 1 GB prefetch on
			 * a fast link takes about a second); the bar is redrawn
			 * at most 4 times a second */
			struct timespec ts = {0, 20 * 1000 * 1000};

			nanosleep(&ts, NULL);
		}
	}
	if (tty && sent)
		printf("\n");
	if (ended) {
		/* the summary: every byte asked is cached already, fetched now,
		 * skipped because it did not fit, or missing (failed) */
		uint64_t want = (uint64_t)s.want, have = (uint64_t)s.have;
		uint64_t before = have_s0 && s0.have > 0 ? (uint64_t)s0.have : 0;
		uint64_t unfit = (uint64_t)s.unfit, got, missing;

		if (have > want)
			have = want;
		if (before > have)
			before = have; /* evicted meanwhile */
		got = have - before;
		if (unfit > want - have)
			unfit = want - have;
		missing = want - have - unfit;
		fs_human_bytes(got, a, sizeof(a));
		fs_human_bytes(before, b, sizeof(b));
		fs_human_bytes(unfit, c, sizeof(c));
		printf("prefetch: done: %s fetched, %s cached already, %s did not fit", a, b, c);
		if (missing) {
			fs_human_bytes(missing, d, sizeof(d));
			printf(", %s not cached (%ld fills failed meanwhile, see the mount's log; or "
			       "readers' fills evicted them)",
			       d, have_s0 ? s.errors - s0.errors : s.errors);
			rc = PF_EXIT_ERR;
		}
		printf("\n");
	}
	free(mnt);
	return rc;
}

/* 'shardfs refresh MOUNTPOINT': write "refresh" into the control file (the
 * write returns once the mount shows the source as it is now) and say
 * what changed, from the counters before and after. */
static int ctl_send(int fd, const char *cmd);

static int cmd_refresh(int argc, char **argv)
{
	static const char *const keys[] = {"refresh_added", "refresh_removed", "refresh_changed",
					   "objects", "shards"};
	long before[5], after[5];
	char path[PATH_MAX], *stats;
	int fd, err;

	if (argc == 1 && is_help(argv[0])) {
		printf("usage: shardfs refresh MOUNTPOINT\n\n"
		       "List the source of a running mount again: new shards appear, removed ones\n"
		       "go, changed ones are indexed again when next looked up (their old view\n"
		       "gives ESTALE). Prints what changed.\n");
		return 0;
	}
	if (argc != 1 || argv[0][0] == '-') {
		fprintf(stderr, "usage: shardfs refresh MOUNTPOINT\n");
		return 2;
	}
	snprintf(path, sizeof(path), "%s/.shardfs/control", argv[0]);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	stats = fd >= 0 ? read_ctl(argv[0], "stats") : NULL;
	if (fd < 0 || !stats) {
		if (errno == ENOTCONN)
			fs_say_dead_mount(argv[0]);
		else
			fprintf(stderr, "shardfs: %s is not a shardfs mount\n", argv[0]);
		if (fd >= 0)
			close(fd);
		free(stats);
		return 1;
	}
	for (int i = 0; i < 5; i++)
		before[i] = json_int(stats, keys[i]);
	free(stats);
	err = ctl_send(fd, "refresh\n");
	close(fd);
	if (err < 0) {
		fprintf(stderr, "shardfs: refresh of %s failed: %s (see the mount's log)\n", argv[0],
			err == -EIO ? "the source cannot be listed" : strerror(-err));
		return 1;
	}
	stats = read_ctl(argv[0], "stats");
	if (!stats) {
		fprintf(stderr, "shardfs: lost the mount at %s\n", argv[0]);
		return 1;
	}
	for (int i = 0; i < 5; i++)
		after[i] = json_int(stats, keys[i]);
	free(stats);
	printf("refreshed %s: %ld new, %ld removed, %ld changed; %ld objects, %ld shards\n",
	       argv[0], after[0] - before[0], after[1] - before[1], after[2] - before[2], after[3],
	       after[4]);
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

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
		return cmd_umount(argc - 2, argv + 2);
	if (strcmp(cmd, "stats") == 0)
		return cmd_stats(argc - 2, argv + 2);
	if (strcmp(cmd, "prefetch") == 0)
		return cmd_prefetch(argc - 2, argv + 2);
	if (strcmp(cmd, "refresh") == 0)
		return cmd_refresh(argc - 2, argv + 2);
	if (strcmp(cmd, "pack") == 0) /* issue 5 */
		return fs_pack_main(argc - 2, argv + 2);
	if (strcmp(cmd, "index") == 0) /* issue 5 */
		return fs_index_main(argc - 2, argv + 2);
	fprintf(stderr, "shardfs: unknown command '%s' (see 'shardfs --help')\n", cmd);
	return 2;
}
