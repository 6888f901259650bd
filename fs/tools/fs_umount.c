/*
 * fs_umount.c — 'shardfs umount': unmounts the shardfs mount a path names
 * as the kernel has it (fs_mountid.h); a busy one is reported with what
 * holds it, and its daemon (only the process that is the daemon of that
 * mount) is stopped only with --force.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs_core.h"
#include "fs_core_ctl.h"
#include "fs_mountid.h"
#include "fs_tools.h"

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

/* Run fusermount3 -u (lazy: -z) on dir; 0 when it unmounted, else 1 with
 * its complaint in err. */
static int run_fusermount(const char *dir, int lazy, char *err, size_t cap)
{
	size_t elen = 0;
	pid_t child;
	int status, efd[2];

	err[0] = '\0';
	if (pipe2(efd, O_CLOEXEC) < 0) {
		snprintf(err, cap, "shardfs: %s\n", strerror(errno));
		return 1;
	}
	child = fork();
	if (child == 0) {
		dup2(efd[1], STDERR_FILENO);
		execlp("fusermount3", "fusermount3", lazy ? "-uz" : "-u", "--", dir, (char *)NULL);
		fprintf(stderr, "shardfs: cannot run fusermount3: %s\n", strerror(errno));
		_exit(127);
	}
	close(efd[1]);
	for (;;) { /* its complaint; the pipe must drain, the tail is enough */
		ssize_t n = read(efd[0], err + elen, cap - 1 - elen);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		elen += (size_t)n;
		if (elen == cap - 1)
			elen = 0;
	}
	err[elen] = '\0';
	close(efd[0]);
	return child < 0 || waitpid(child, &status, 0) < 0 || !WIFEXITED(status) ||
	       WEXITSTATUS(status) != 0;
}

/* 1 when link (a /proc/PID/{cwd,root,fd/N}) is dir or below it, on the
 * mount's device dev: a daemon's fd of the directory the mount covers has
 * the same path and holds nothing. */
static int link_inside(const char *link, const char *dir, dev_t dev)
{
	char t[PATH_MAX];
	ssize_t n = readlink(link, t, sizeof(t) - 1);
	size_t dl = strlen(dir);
	struct stat st;

	if (n <= 0)
		return 0;
	t[n] = '\0';
	if (strncmp(t, dir, dl) != 0 || (t[dl] != '\0' && t[dl] != '/'))
		return 0;
	/* a dead mount's files answer no stat: they count */
	return stat(link, &st) < 0 || st.st_dev == dev;
}

/* Say which processes hold the mount at dir (device dev) busy (a working
 * directory, root or open file inside it), up to 8 of them, on stderr. */
static void say_holders(const char *dir, dev_t dev)
{
	DIR *proc = opendir("/proc");
	struct dirent *e;
	int shown = 0, more = 0;

	while (proc && (e = readdir(proc))) {
		char path[320], comm[64] = "?";
		const char *why = NULL;
		long pid = strtol(e->d_name, NULL, 10);
		DIR *fds;
		FILE *f;

		if (pid <= 0 || pid == (long)getpid())
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/cwd", pid);
		if (link_inside(path, dir, dev))
			why = "its working directory";
		snprintf(path, sizeof(path), "/proc/%ld/root", pid);
		if (!why && link_inside(path, dir, dev))
			why = "its root directory";
		snprintf(path, sizeof(path), "/proc/%ld/fd", pid);
		fds = why ? NULL : opendir(path);
		for (struct dirent *d; fds && !why && (d = readdir(fds));) {
			snprintf(path, sizeof(path), "/proc/%ld/fd/%.20s", pid, d->d_name);
			if (d->d_name[0] != '.' && link_inside(path, dir, dev))
				why = "an open file";
		}
		if (fds)
			closedir(fds);
		if (!why)
			continue;
		if (shown == 8) {
			more++;
			continue;
		}
		snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
		f = fopen(path, "re");
		if (f) {
			if (fgets(comm, sizeof(comm), f))
				comm[strcspn(comm, "\n")] = '\0';
			fclose(f);
		}
		fprintf(stderr, "  pid %ld (%s): %s\n", pid, comm, why);
		shown++;
	}
	if (proc)
		closedir(proc);
	if (more)
		fprintf(stderr, "  and %d more\n", more);
	if (!shown)
		fprintf(stderr,
			"  (no process of this user found: another user's, or a mapping)\n");
}

/* The daemon of the live mount m: the pid its stats name, when that
 * process is the daemon of m (fs_mnt_is_daemon); else -1. */
static long mount_daemon(const struct fs_mnt *m)
{
	struct fs_stats_doc stats;
	uint64_t v = 0;
	long pid = -1;

	if (m->state == FS_MNT_LIVE && fs_mnt_read_stats(m->dir, &stats) == 0) {
		if (fs_stats_u64(&stats, "pid", &v) == 0 && v > 0 && v <= INT_MAX)
			pid = (long)v;
		fs_stats_doc_free(&stats);
	}
	return pid > 0 && fs_mnt_is_daemon(m, pid) ? pid : -1;
}

static const char umount_synopsis[] = "umount [--force | --stale] MOUNTPOINT";

/* The command line: -1 when it is parsed (*path, *force, *stale set),
 * else the exit status (0 after --help, 2 for a usage error). */
static int umount_args(int argc, char **argv, const char **path, int *force, int *stale)
{
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			printf(
			    "usage: shardfs %s\n\n"
			    "Unmount a shardfs mount and wait (up to 60 s) for its daemon to "
			    "finish.\n"
			    "A mount whose daemon died is unmounted too. MOUNTPOINT must be the "
			    "mount\n"
			    "point itself, a shardfs mount as the kernel lists it (/proc/mounts).\n"
			    "A busy mount (a process has its working directory or a file open in "
			    "it)\n"
			    "is not unmounted: the command names those processes and exits 1.\n"
			    "  --force  a busy mount: stop its daemon (SIGTERM; it detaches the "
			    "mount,\n"
			    "           and reads in flight and open files fail with ENOTCONN); a "
			    "busy\n"
			    "           mount whose daemon died: detach it lazily\n"
			    "  --stale  unmount only a mount whose daemon died (lazily); no mount "
			    "at\n"
			    "           MOUNTPOINT is no error; a mount that answers: exit 1 (the\n"
			    "           systemd unit runs this before it mounts)\n"
			    "Exit status: 0 unmounted (or, with --stale, nothing to do), 1 an "
			    "error\n"
			    "or a busy mount, 2 usage.\n",
			    umount_synopsis);
			return 0;
		}
		if (strcmp(argv[i], "--force") == 0 || strcmp(argv[i], "-f") == 0) {
			*force = 1;
		} else if (strcmp(argv[i], "--stale") == 0) {
			*stale = 1;
		} else if (argv[i][0] == '-' && argv[i][1] && !*path) {
			fprintf(stderr, "shardfs umount: unknown option %s\nusage: shardfs %s\n",
				argv[i], umount_synopsis);
			return 2;
		} else if (!*path) {
			*path = argv[i];
		} else {
			fprintf(stderr, "usage: shardfs %s\n", umount_synopsis);
			return 2;
		}
	}
	if (!*path || (*force && *stale)) {
		fprintf(stderr, "usage: shardfs %s\n", umount_synopsis);
		return 2;
	}
	return -1;
}

/* Identify the mount at path into *m and check that this user may
 * unmount it (and, with stale, that its daemon died): -1 to go on, else
 * the exit status (0: --stale and no mount there). */
static int umount_target(const char *path, int stale, struct fs_mnt *m)
{
	int r = fs_mnt_identify(path, m);

	if (r == -ENOENT && stale)
		return 0; /* nothing to clean */
	if (r < 0) {
		struct stat st;

		if (r != -ENOENT)
			fprintf(stderr, "shardfs: %s: %s\n", path, strerror(-r));
		else if (stat(path, &st) < 0)
			fprintf(stderr, "shardfs: %s: %s\n", path, strerror(errno));
		else
			fprintf(stderr, "shardfs: %s is not a shardfs mount\n", path);
		return 1;
	}
	if (m->owner >= 0 && (uid_t)m->owner != geteuid() && geteuid() != 0) {
		fprintf(stderr,
			"shardfs: %s was mounted by uid %ld: only that user (or root) can "
			"unmount it\n",
			path, m->owner);
		return 1;
	}
	if (stale && m->state != FS_MNT_DEAD) {
		fprintf(stderr,
			"shardfs: %s is a shardfs mount whose daemon %s: not unmounted "
			"(--stale cleans only a dead one)\n",
			path, m->state == FS_MNT_LIVE ? "runs" : "may run");
		return 1;
	}
	return -1;
}

/* fusermount failed on m with the message err: with force, a busy mount's
 * daemon pid is stopped (or a dead one's mount detached lazily); 0 when
 * the mount goes, else 1 after saying why (for a busy mount, who holds it). */
static int umount_failed(const char *path, const struct fs_mnt *m, long pid, int force, char *err,
			 size_t errcap)
{
	int busy = strstr(err, strerror(EBUSY)) != NULL;

	if (busy && force && pid > 0 && kill((pid_t)pid, SIGTERM) == 0) {
		/* the daemon stops itself on SIGTERM: it cancels what is
		 * in flight, detaches the mount and exits */
		fprintf(stderr,
			"shardfs: %s is busy: stopped its daemon %ld (--force; reads in "
			"flight fail, the mount is detached)\n",
			path, pid);
		return 0;
	}
	if (busy && force && m->state == FS_MNT_DEAD) {
		if (run_fusermount(m->dir, 1, err, errcap) == 0)
			return 0;
		fputs(err, stderr);
		fprintf(stderr, "shardfs: unmounting %s failed\n", path);
		return 1;
	}
	if (busy && !force) {
		fprintf(stderr, "shardfs: %s is busy, not unmounted; held by:\n", path);
		say_holders(m->dir, m->dev);
		fprintf(stderr,
			"shardfs: end those, or 'shardfs umount --force %s' stops the "
			"daemon (their reads and open files then fail)\n",
			path);
		return 1;
	}
	fputs(err, stderr);
	fprintf(stderr, "shardfs: unmounting %s failed%s\n", path,
		busy ? ": its daemon was not found (not stopped)" : "");
	return 1;
}

int fs_umount_main(int argc, char **argv)
{
	struct fs_mnt m;
	char err[1024];
	const char *path = NULL;
	long pid;
	int force = 0, stale = 0, r;

	r = umount_args(argc, argv, &path, &force, &stale);
	if (r >= 0)
		return r;
	r = umount_target(path, stale, &m);
	if (r >= 0)
		return r;
	pid = mount_daemon(&m);
	if (run_fusermount(m.dir, stale, err, sizeof(err)) != 0 &&
	    umount_failed(path, &m, pid, force, err, sizeof(err)) != 0)
		return 1;
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
