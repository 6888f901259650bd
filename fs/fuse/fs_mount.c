/*
 * fs_mount.c — 'shardfs mount' (fs_fuse.h): the mount's checks of its
 * arguments (-o options, the mountpoint), the fork, and the core's
 * lifecycle around the FUSE session: fs_open, fs_ll_run, fs_close.
 *
 * mount forks before doing any work: the child opens the source, lists
 * it, mounts and only then tells the waiting parent through a pipe that the
 * mount is ready, so "shardfs mount ... && ls MNT" works and every startup
 * error reaches the user's terminal with a non-zero exit. Until then the
 * child lives only as long as the parent waits for it: it gets SIGTERM
 * when the parent dies (PR_SET_PDEATHSIG: Ctrl-C, kill, kill -9 of
 * 'shardfs mount'), which ends it and the credential helpers it runs
 * (fs_exit_on_signals), and a ready byte that nobody reads any more
 * (EPIPE) unmounts it again (fs_ll.c): no mount appears after the command
 * failed.
 */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <stddef.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <fuse_lowlevel.h>

#include "fs_core.h"
#include "fs_core_ctl.h"
#include "fs_core_opt.h"
#include "fs_fuse.h"
#include "fs_ll.h"

/* The daemon's allocations of this size or more are mappings of their own
 * (mallopt M_MMAP_THRESHOLD, below). */
#define FS_MMAP_MIN (256 * 1024)

void fs_fuse_lib_version(int *major, int *minor)
{
	*major = FUSE_MAJOR_VERSION;
	*minor = FUSE_MINOR_VERSION;
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

void fs_mount_notify_ready(const char *mountpoint)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char msg[PATH_MAX + 64];
	size_t n = path ? strlen(path) : 0;
	int fd, len;

	/* an absolute path, or '@' for the abstract namespace */
	if (n == 0 || n >= sizeof(sa.sun_path) || (path[0] != '/' && path[0] != '@'))
		return;
	memcpy(sa.sun_path, path, n);
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	len = snprintf(msg, sizeof(msg), "READY=1\nMAINPID=%d\nSTATUS=mounted at %s\n",
		       (int)getpid(), mountpoint);
	if (len < 0 || (size_t)len >= sizeof(msg))
		len = snprintf(msg, sizeof(msg), "READY=1\nMAINPID=%d\n", (int)getpid());
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || sendto(fd, msg, (size_t)len, MSG_NOSIGNAL, (struct sockaddr *)&sa,
			     (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) < 0)
		fs_log(FS_LOG_WARN,
		       "cannot tell the service manager that the mount is ready "
		       "(NOTIFY_SOCKET %s): %s",
		       path, strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* A password in the SOURCE URL (scheme://user:password@host/...) leaves
 * argv: it is replaced by "***" in place (the rest of the argument moves
 * up, NUL bytes fill its end), before the fork, so that neither 'shardfs
 * mount' nor its daemon shows it in ps or /proc/PID/cmdline. The mount
 * uses the copy its configuration holds. */
static void scrub_source_password(int argc, char **argv, const char *source)
{
	for (int i = 0; i < argc; i++) {
		char *s = argv[i], *auth = strstr(s, "://"), *end, *at = NULL, *colon;
		size_t plen, rest;

		if (!auth || strcmp(s, source) != 0)
			continue;
		auth += 3;
		end = auth + strcspn(auth, "/?#");
		for (char *p = auth; p < end; p++)
			if (*p == '@')
				at = p; /* the last '@' ends the userinfo */
		colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
		if (!colon || at - colon - 1 <= 0)
			continue;
		plen = (size_t)(at - colon - 1);
		rest = strlen(at) + 1;
		if (plen <= 3) {
			memset(colon + 1, '*', plen);
			continue;
		}
		memcpy(colon + 1, "***", 3);
		memmove(colon + 4, at, rest);
		memset(colon + 4 + rest, 0, plen - 3);
	}
}

/* Mount options made canonical in *fuse_opts and checked: 0, with *nonempty
 * set (and taken out of them); 2 for a refused option (said); 1 out of
 * memory. */
static int mount_fuse_opts(char **fuse_opts, int *nonempty)
{
	const char *refused;

	if (*fuse_opts) {
		char *canon = fuse_opts_canonical(*fuse_opts);

		if (!canon)
			return 1;
		free(*fuse_opts);
		*fuse_opts = canon;
	}
	refused = fuse_opt_refused(*fuse_opts);
	if (refused) {
		fprintf(
		    stderr,
		    "shardfs: mount: -o %s is refused: a shardfs mount is always ro,nosuid,nodev "
		    "(setuid bits and device files in shards are never honoured)\n",
		    refused);
		return 2;
	}
	*nonempty = take_fuse_opt(*fuse_opts, "nonempty");
	return 0;
}

/* The mount point can take this mount: not a shardfs mount already (nor a
 * dead one), a directory, empty unless nonempty. Then the daemon holds it
 * (the directory the mount covers, so it keeps nothing busy) for its whole
 * life: 'shardfs umount' knows the daemon of a mount by it in
 * /proc/PID/fd (fs/tools/fs_mountid.c), whatever its working directory
 * and command line. 0, or -errno after saying why. */
static int mount_point_ready(const char *mp, int nonempty, int *lockfd)
{
	struct stat st;

	/* 'shardfs mount' of this mount point under way in another process
	 * (between its checks and its mount): it holds the directory locked
	 * (below). Without the lock both mounted, the second stacked over the
	 * first, whose daemon went on unseen. Not waited for: refused. A lock
	 * taken after the other mounted is the mount's root's, which the check
	 * after it finds mounted. */
	*lockfd = -1;
	if (!fs_mount_lookup(mp, NULL, NULL)) {
		*lockfd = open(mp, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
		if (*lockfd >= 0 && flock(*lockfd, LOCK_EX | LOCK_NB) < 0) {
			int err = errno == EWOULDBLOCK ? -EBUSY : -errno;

			if (err == -EBUSY)
				fprintf(stderr,
					"shardfs: another 'shardfs mount' at %s is under way (this "
					"one would be stacked over it)\n",
					FS_Q(mp));
			else
				fprintf(stderr, "shardfs: mountpoint %s: %s\n", FS_Q(mp),
					strerror(-err));
			close(*lockfd);
			*lockfd = -1;
			return err;
		}
	}
	if (fs_mount_lookup(mp, NULL, NULL)) {
		struct statfs sf;

		/* statfs always reaches the daemon (stat may be answered from
		 * the kernel's attribute cache) */
		if (statfs(mp, &sf) < 0 && errno == ENOTCONN)
			fs_say_dead_mount(FS_Q(mp));
		else
			fprintf(stderr,
				"shardfs: %s is already a shardfs mount; 'shardfs umount %s' "
				"first\n",
				FS_Q(mp), FS_Q(mp));
		return -EBUSY;
	}
	if (stat(mp, &st) < 0 || !S_ISDIR(st.st_mode)) {
		if (errno == ENOTCONN)
			fs_say_dead_mount(FS_Q(mp));
		else
			fprintf(stderr, "shardfs: mountpoint %s is not a directory\n", FS_Q(mp));
		return -ENOTDIR;
	}
	if (!nonempty && !dir_is_empty(mp)) {
		fprintf(stderr,
			"shardfs: mountpoint %s is not empty: the mount would hide its files "
			"(-o nonempty mounts over them)\n",
			FS_Q(mp));
		return -ENOTEMPTY;
	}
	if (open(mp, O_PATH | O_DIRECTORY | O_CLOEXEC) < 0) {
		int err = -errno;

		fprintf(stderr, "shardfs: mountpoint %s: %s\n", FS_Q(mp), strerror(-err));
		return err;
	}
	return 0;
}

/* Go to the background: the parent waits for the daemon's word on pipe
 * pfd (one byte 0: mounted) and for the mount to answer, and returns its
 * exit status (0 or 1) in *status; the daemon (a session of its own, ended
 * with its parent until it is mounted) returns with *status -1 and
 * pfd[1] its end. 0, or -errno. */
static int mount_daemonize(const char *mp, int pfd[2], int lockfd, int *status)
{
	pid_t pid, parent = getpid();

	*status = -1;
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
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
		if (n == 1 && ok == 0 && !mount_answers(mp)) {
			fprintf(stderr, "shardfs: the mount at %s does not answer\n", FS_Q(mp));
			n = 0;
		}
		*status = n == 1 && ok == 0 ? 0 : 1;
		return 0;
	}
	close(pfd[0]);
	/* the parent holds the mount point's lock until the mount is ready */
	if (lockfd >= 0)
		close(lockfd);
	setsid();
	fs_exit_on_signals();
	/* the parent may have died before prctl: then it is not ours */
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
		_exit(1);
	return 0;
}

int fs_fuse_mount_main(int argc, char **argv)
{
	struct fs_config *cfg;
	struct fs_mount_args a;
	struct fs *fs;
	int pfd[2] = {-1, -1}, err, nonempty = 0, r, lockfd = -1;

	if (fs_config_new(&cfg) < 0)
		return 1;
	err = fs_opt_parse_mount(argc, argv, cfg);
	if (err) {
		fs_config_free(cfg);
		/* a usage error is 2, as for every command; a mountpoint that
		 * cannot be resolved is 1 */
		return err > 0 ? 0 : err == -EINVAL ? 2 : 1;
	}
	fs_config_mount_args(cfg, &a);
	scrub_source_password(argc, argv, a.source);
	r = mount_fuse_opts(a.fuse_opts, &nonempty);
	if (r) {
		fs_config_free(cfg);
		return r;
	}
	err = mount_point_ready(a.mountpoint, nonempty, &lockfd);
	if (err < 0)
		goto out;
	if (!a.foreground) {
		err = mount_daemonize(a.mountpoint, pfd, lockfd, &r);
		if (err < 0)
			goto out;
		if (r >= 0) { /* the parent: the mount is ready, or failed */
			if (lockfd >= 0)
				close(lockfd);
			fs_config_free(cfg);
			return r;
		}
	} else {
		fs_exit_on_signals();
	}
#ifdef __GLIBC__
	/* Allocations of FS_MMAP_MIN and more get mappings of their own, given
	 * back when freed. glibc's default raises that bound to the largest
	 * block freed so far, after which the index builds' temporaries (their
	 * read buffers and arrays, a few MiB a shard for a moment) land in the
	 * FUSE threads' arenas, whose freed pages stay resident: 8.3 MB of
	 * RssAnon after `find` over a first mount of 860,000 members here,
	 * 4.2 MB with a fixed bound (tests/bench/index_bench.sh --only fmt
	 * measures it at 4.3 M). Below it (the fill writer's 128 KiB buffers)
	 * nothing changes. */
	mallopt(M_MMAP_THRESHOLD, FS_MMAP_MIN);
#endif
	/* fs_open takes what cfg holds: a.mountpoint lives until fs_close */
	err = fs_open(cfg, FS_OPEN_MOUNT, &fs);
	if (err < 0)
		goto out;
	/* -f: the lock is fs_ll_run's, released once mounted (in the
	 * background the parent holds it until the mount is ready) */
	err = fs_ll_run(fs, pfd[1], a.foreground ? lockfd : -1);
	/* -EPIPE, -EINTR: nobody waits any more (fs_ll_run) */
	if (err < 0 && pfd[1] >= 0 && err != -EPIPE && err != -EINTR)
		fprintf(stderr, "shardfs: cannot mount at %s (see above)\n", FS_Q(a.mountpoint));
	fs_log(FS_LOG_INFO, "unmounted %s", a.mountpoint);
	/* fills still running (readahead, prefetch) end now instead of after
	 * their retry budgets (fs_cancel); then the cache records what was
	 * filled */
	fs_close(fs);
out:
	fs_config_free(cfg);
	return err < 0 ? 1 : 0;
}
