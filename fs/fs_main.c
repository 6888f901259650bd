/*
 * fs_main.c — the shardfs command: mount, umount, stats, --help, --version.
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
		"  umount MOUNTPOINT                   unmount and wait for the daemon to finish\n"
		"  stats MOUNTPOINT                    print the counters of a running mount\n"
		"  prefetch MOUNTPOINT [PATH...]       fill the cache with PATHs (default: all), with progress\n"
		"  index [--sidecar] SOURCE            build every shard's index ('shardfs index --help')\n"
		"  pack [OPTIONS] INPUT_DIR PREFIX     make WebDataset shards ('shardfs pack --help')\n"
		"  --help, -h                          this help\n"
		"  --version, -V                       print the version\n\n"
		"SOURCE: a local directory (/data/shards, file:///data/shards), an HTTP(S) URL\n"
		"with brace ranges (https://host/d/shard-{000000..000099}.tar) or of a directory\n"
		"listing (https://host/d/), s3://bucket/prefix/, gs://bucket/prefix/ or\n"
		"ais://bucket/prefix/. Credentials come from the environment (AWS_ACCESS_KEY_ID,\n"
		"AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE, AWS_REGION,\n"
		"AWS_ENDPOINT_URL, GCS_HMAC_ACCESS_ID/GCS_HMAC_SECRET, GOOGLE_OAUTH_ACCESS_TOKEN,\n"
		"AIS_ENDPOINT), never from the command line.\n");
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

/* Many shards each keep an fd open: take the hard limit. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static int mount_run(struct fs *fs, int ready_fd)
{
	struct backend_config bc = {0};
	struct cachetier_config cc = {0};
	char logpath[PATH_MAX];
	int err;

	bc.endpoint = fs->cfg.endpoint;
	bc.no_sign = fs->cfg.no_sign;
	bc.connections = fs->cfg.connections;
	bc.ca_file = fs->cfg.ca_file;
	bc.retry_budget_s = fs->cfg.retry_budget_s;
	bc.stall_timeout_s = fs->cfg.stall_timeout_s;
	err = backend_open(&fs->be, fs->cfg.source, &bc);
	if (err < 0) {
		const char *why = backend_last_error(NULL);

		fprintf(stderr, "shardfs: source %s: %s%s%s\n", fs->cfg.source, source_error(err),
			why && *why ? ": " : "", why ? why : "");
		return err;
	}
	cc.cache_dir = fs->cfg.cache_dir;
	cc.source = backend_describe(fs->be);
	cc.cache_size_bytes = fs->cfg.cache_size_bytes;
	cc.readahead_max_bytes = fs->cfg.readahead_max_bytes;
	cc.chunk_bytes = (uint32_t)(fs->cfg.chunk_bytes > (1u << 30) ? (1u << 30) : fs->cfg.chunk_bytes);
	/* one more fill thread than connections: one writes its chunk to disk
	 * while every connection is busy fetching the next */
	cc.fill_threads = fs->cfg.connections + 1;
	err = cachetier_open(&fs->ct, &cc, fs->be);
	if (err < 0) {
		fprintf(stderr, "shardfs: cache directory %s: %s\n", fs->cfg.cache_dir,
			strerror(-err));
		return err;
	}
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
	err = fs_ns_build(fs);
	if (err < 0) {
		const char *why = backend_last_error(fs->be);

		fprintf(stderr, "shardfs: cannot list %s: %s%s%s\n", fs->cfg.source, source_error(err),
			why && *why ? ": " : "", why ? why : "");
		return err;
	}
	if (fs->nobjs == 0)
		fs_log(FS_LOG_WARN, "source %s has no objects", backend_describe(fs->be));
	raise_nofile();
	fs->uid = getuid();
	fs->gid = getgid();
	fs->mount_time = (int64_t)time(NULL);
	err = fs_ll_run(fs, ready_fd);
	if (err < 0 && ready_fd >= 0)
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

static int cmd_mount(int argc, char **argv)
{
	struct fs fs;
	struct stat st;
	int pfd[2] = {-1, -1}, err;
	pid_t pid;

	memset(&fs, 0, sizeof(fs));
	pthread_mutex_init(&fs.ctl_lock, NULL);
	pthread_mutex_init(&fs.if_lock, NULL); /* issue 5 */
	err = fs_opt_parse_mount(argc, argv, &fs.cfg);
	if (err)
		goto out;
	if (stat(fs.cfg.mountpoint, &st) < 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "shardfs: mountpoint %s is not a directory\n", fs.cfg.mountpoint);
		err = -ENOTDIR;
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

/* Is path a mount point of type fuse.shardfs? Reads /proc/self/mounts,
 * without touching path itself (a dead daemon's mount answers ENOTCONN). */
static int is_shardfs_mount(const char *path)
{
	char want[PATH_MAX], line[8192];
	size_t n = strlen(path);
	int found = 0;
	FILE *f;

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
	f = fopen("/proc/self/mounts", "re");
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char *dev = strtok(line, " "), *mnt = strtok(NULL, " "), *type = strtok(NULL, " ");

		found = dev && mnt && type && strcmp(type, "fuse.shardfs") == 0 &&
			strcmp(mnt, want) == 0;
	}
	fclose(f);
	return found;
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

	if (argc != 1 || argv[0][0] == '-') {
		fprintf(stderr, "usage: shardfs umount MOUNTPOINT\n");
		return argc == 1 && (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)
			       ? 0
			       : 2;
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

	if (argc != 1 || argv[0][0] == '-') {
		fprintf(stderr, "usage: shardfs stats MOUNTPOINT\n");
		return 2;
	}
	stats = read_ctl(argv[0], "stats");
	if (!stats) {
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

static void human_bytes(uint64_t b, char *out, size_t n)
{
	const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)b;
	int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(out, n, u ? "%.2f %s" : "%.0f %s", v, units[u]);
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

static int cmd_prefetch(int argc, char **argv)
{
	char *mnt, path[PATH_MAX], rel[PATH_MAX], line[PATH_MAX + 16];
	double t0, last_print = 0, last_progress;
	uint64_t last_have = 0;
	int fd, tty = isatty(STDOUT_FILENO), rc = 0;

	if (argc < 1 || argv[0][0] == '-') {
		fprintf(stderr, "usage: shardfs prefetch MOUNTPOINT [PATH...]\n");
		return argc >= 1 && (!strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) ? 0 : 2;
	}
	mnt = realpath(argv[0], NULL);
	if (!mnt) {
		fprintf(stderr, "shardfs: %s: %s\n", argv[0], strerror(errno));
		return 1;
	}
	snprintf(path, sizeof(path), "%s/.shardfs/control", mnt);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "shardfs: %s is not a shardfs mount\n", argv[0]);
		free(mnt);
		return 1;
	}
	for (int i = argc > 1 ? 1 : 0; i < argc; i++) {
		const char *r = argc > 1 ? mount_relative(mnt, argv[i], rel, sizeof(rel)) : "";
		int n = snprintf(line, sizeof(line), "prefetch %s\n", r);

		if (n < 0 || (size_t)n >= sizeof(line) || write(fd, line, (size_t)n) != n) {
			fprintf(stderr, "shardfs: prefetch %s: %s\n", argc > 1 ? argv[i] : "(all)",
				errno == ENOENT ? "no such file or directory in the mount"
						: strerror(errno));
			rc = 1;
		}
	}
	close(fd);
	t0 = last_progress = now_s();
	for (;;) {
		char *stats = read_ctl(mnt, "stats"), have_s[32], want_s[32];
		long want = stats ? json_int(stats, "prefetch_bytes") : -1;
		long have = stats ? json_int(stats, "prefetch_cached_bytes") : -1;
		long errs = stats ? json_int(stats, "fill_errors") : -1;
		double t = now_s(), rate;

		free(stats);
		if (want < 0 || have < 0) {
			fprintf(stderr, "shardfs: lost the mount at %s\n", mnt);
			rc = 1;
			break;
		}
		if ((uint64_t)have != last_have) {
			last_have = (uint64_t)have;
			last_progress = t;
		}
		rate = t > t0 ? (double)have / (t - t0) : 0;
		human_bytes((uint64_t)have, have_s, sizeof(have_s));
		human_bytes((uint64_t)want, want_s, sizeof(want_s));
		if (tty) {
			int pct = want ? (int)(100.0 * (double)have / (double)want) : 100, bar = pct / 5;
			double eta = rate > 0 ? (double)(want - have) / rate : 0;

			printf("\r[%.*s%.*s] %3d%%  %s / %s  %.1f MB/s  ETA %d:%02d ", bar,
			       "####################", 20 - bar, "--------------------", pct, have_s,
			       want_s, rate / 1e6, (int)eta / 60, (int)eta % 60);
			fflush(stdout);
		} else if (t - last_print >= 5 || have >= want) {
			printf("prefetch: %s of %s cached, %.1f MB/s\n", have_s, want_s, rate / 1e6);
			fflush(stdout);
			last_print = t;
		}
		if (have >= want)
			break;
		if (t - last_progress > 120) {
			fprintf(stderr, "\nshardfs: prefetch made no progress for 2 minutes (%ld fill errors; see the log)\n",
				errs);
			rc = 1;
			break;
		}
		{
			struct timespec ts = {0, 250 * 1000 * 1000};

			nanosleep(&ts, NULL);
		}
	}
	if (tty)
		printf("\n");
	free(mnt);
	return rc;
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
	if (strcmp(cmd, "pack") == 0) /* issue 5 */
		return fs_pack_main(argc - 2, argv + 2);
	if (strcmp(cmd, "index") == 0) /* issue 5 */
		return fs_index_main(argc - 2, argv + 2);
	fprintf(stderr, "shardfs: unknown command '%s' (see 'shardfs --help')\n", cmd);
	return 2;
}
