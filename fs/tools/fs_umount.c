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
#include <sys/ioctl.h>
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
	char st;

	if (pid <= 0 || kill((pid_t)pid, 0) != 0)
		return 0;
	st = fs_mnt_pid_state(pid); /* 0: not read, taken as running */
	return st != 'Z' && st != 'X';
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

/* What link (a /proc/PID/{cwd,root,fd/N}) is of the mount at dir (device
 * dev): LINK_OUT not in it (a daemon's fd of the directory the mount
 * covers has the same path and holds nothing; a link gone meanwhile: its
 * fd closed, its process ended), LINK_IN a file or directory in it,
 * LINK_CTL a file of its .shardfs, a control file. The link is read once:
 * read again, a control file closed between the reads (its user leaving,
 * a reader of the counters between two reads) looked like a file that is
 * not one (mount-ctlwait-umount-prefetch, 3 of 8 runs two at a time). */
enum link_kind { LINK_OUT, LINK_IN, LINK_CTL };

static enum link_kind link_kind(const char *link, const char *dir, dev_t dev)
{
	char t[PATH_MAX];
	ssize_t n = readlink(link, t, sizeof(t) - 1);
	size_t dl = strlen(dir);
	struct stat st;

	if (n <= 0)
		return LINK_OUT;
	t[n] = '\0';
	if (strncmp(t, dir, dl) != 0 || (t[dl] != '\0' && t[dl] != '/'))
		return LINK_OUT;
	/* a dead mount's files answer no stat: they count */
	if (stat(link, &st) < 0 ? errno == ENOENT : st.st_dev != dev)
		return LINK_OUT;
	return strncmp(t + dl, "/.shardfs/", 10) == 0 ? LINK_CTL : LINK_IN;
}

/* What holds a mount busy, as /proc shows this user's processes: how many
 * hold it, and of them how many hold only control files (.shardfs/stats,
 * control...: 'shardfs prefetch' following its run, 'shardfs stats', a
 * reader of the counters), which leave by themselves or at an
 * umount-notice. */
struct holders {
	int found, ctl_only;
};

/* What a process holds of the mount at dir (device dev): NULL nothing,
 * else why it holds it; *ctl_only set when that is control files only. */
static const char *holder_why(long pid, const char *dir, dev_t dev, int *ctl_only)
{
	char path[320];
	const char *why = NULL;
	DIR *fds;

	*ctl_only = 0;
	snprintf(path, sizeof(path), "/proc/%ld/cwd", pid);
	if (link_kind(path, dir, dev) != LINK_OUT)
		return "its working directory";
	snprintf(path, sizeof(path), "/proc/%ld/root", pid);
	if (link_kind(path, dir, dev) != LINK_OUT)
		return "its root directory";
	snprintf(path, sizeof(path), "/proc/%ld/fd", pid);
	fds = opendir(path);
	for (struct dirent *d; fds && (d = readdir(fds));) {
		enum link_kind k;

		snprintf(path, sizeof(path), "/proc/%ld/fd/%.20s", pid, d->d_name);
		if (d->d_name[0] == '.' || (k = link_kind(path, dir, dev)) == LINK_OUT)
			continue;
		if (k != LINK_CTL) {
			why = "an open file";
			*ctl_only = 0;
			break;
		}
		why = "a control file open (.shardfs/)";
		*ctl_only = 1;
	}
	if (fds)
		closedir(fds);
	return why;
}

/* The name a holder is shown by: its comm, and for shardfs its command
 * ('shardfs prefetch'). */
static void holder_name(long pid, char *name, size_t cap)
{
	char path[64], args[256];
	ssize_t n;
	FILE *f;
	int fd;

	snprintf(name, cap, "?");
	snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
	f = fopen(path, "re");
	if (f) {
		if (fgets(name, (int)cap, f))
			name[strcspn(name, "\n")] = '\0';
		fclose(f);
	}
	if (strcmp(name, "shardfs") != 0)
		goto out;
	snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd < 0 ? -1 : read(fd, args, sizeof(args) - 1);
	if (fd >= 0)
		close(fd);
	if (n > 0) {
		args[n] = '\0';
		/* "shardfs\0prefetch\0...": the second argument */
		if (strlen(args) + 1 < (size_t)n)
			snprintf(name, cap, "shardfs %.40s", args + strlen(args) + 1);
	}
out: /* a name is the process's to choose: one line, printable */
	for (char *c = name; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
}

/* Count which processes hold the mount at dir (device dev) busy (a working
 * directory, root or open file inside it) into *h; with say, name up to 8
 * of them on stderr. */
static void scan_holders(const char *dir, dev_t dev, int say, struct holders *h)
{
	DIR *proc = opendir("/proc");
	struct dirent *e;
	int more = 0;

	h->found = h->ctl_only = 0;
	while (proc && (e = readdir(proc))) {
		char name[96];
		long pid = strtol(e->d_name, NULL, 10);
		int ctl;
		const char *why;

		if (pid <= 0 || pid == (long)getpid())
			continue;
		why = holder_why(pid, dir, dev, &ctl);
		if (!why)
			continue;
		h->found++;
		h->ctl_only += ctl;
		if (!say)
			continue;
		if (h->found > 8) {
			more++;
			continue;
		}
		holder_name(pid, name, sizeof(name));
		fprintf(stderr, "  pid %ld (%s): %s%s\n", pid, FS_Q(name), why,
			ctl && strcmp(name, "shardfs prefetch") == 0
			    ? ": it follows a prefetch (Ctrl-C ends it; the mount's prefetch "
			      "goes on)"
			    : "");
	}
	if (proc)
		closedir(proc);
	if (more)
		fprintf(stderr, "  and %d more\n", more);
	if (say && !h->found)
		fprintf(stderr,
			"  (no process of this user found: another user's, or a mapping)\n");
}

/* Send a command line to the mount at dir's control file: 0, or a
 * negative errno. */
static int umount_ctl(const char *dir, const char *line)
{
	char buf[FS_CTL_IOC_LEN], path[PATH_MAX + 32];
	int fd, r;

	snprintf(path, sizeof(path), "%s/.shardfs/control", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	memset(buf, 0, sizeof(buf));
	snprintf(buf, sizeof(buf), "%s", line);
	r = ioctl(fd, FS_CTL_IOC, buf) < 0 ? -errno : 0;
	close(fd);
	return r;
}

/* The longest 'shardfs umount' waits for a busy mount's control-file users
 * to leave (docs/usage.md): 'shardfs prefetch' leaves within one look of
 * its wait (10 ms) of the notice; a reader of the counters, once it closes
 * them. */
#define FS_UMOUNT_LEAVE_MS 5000

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* fusermount found the live mount m busy. When what holds it is control
 * files only (struct holders), ask their users to leave (umount-notice:
 * 'shardfs prefetch' stops following) and unmount once they left, within
 * FS_UMOUNT_LEAVE_MS. A user gone from /proc may hold the mount a while
 * longer (an exiting process's files close after its fd table went; a
 * file passed over a socket and not received is in no process's table):
 * fusermount is tried again while it says busy and no holder shows, at
 * growing intervals (LEAVE_STEP_MS doubled up to LEAVE_STEP_MAX_MS), until
 * the bound; until 2026-12-03 it gave up after 5 tries some 10 ms apart
 * (mount-ctlwait-umount-prefetch, once, at load). 0 unmounted; else 1 (the
 * notice withdrawn, err fusermount's last complaint; past the bound, said
 * on stderr). */
#define LEAVE_STEP_MS	  10
#define LEAVE_STEP_MAX_MS 250

static int umount_leave(const struct fs_mnt *m, char *err, size_t cap)
{
	char line[64];
	struct holders h;
	int64_t now, end = mono_ms() + FS_UMOUNT_LEAVE_MS;
	int64_t step = LEAVE_STEP_MS, wait;

	scan_holders(m->dir, m->dev, 0, &h);
	if (m->state != FS_MNT_LIVE || !h.ctl_only || h.found != h.ctl_only)
		return 1;
	snprintf(line, sizeof(line), "umount-notice %d\n", FS_UMOUNT_LEAVE_MS);
	umount_ctl(m->dir, line); /* an older mount: its users may still leave */
	for (;;) {
		wait = LEAVE_STEP_MS; /* a look at /proc: cheap */
		if (!h.found) {
			if (run_fusermount(m->dir, 0, err, cap) == 0)
				return 0;
			if (!strstr(err, strerror(EBUSY)))
				break;
			wait = step; /* a run of fusermount: a fork and exec */
			step = step * 2 < LEAVE_STEP_MAX_MS ? step * 2 : LEAVE_STEP_MAX_MS;
		}
		if (h.found != h.ctl_only)
			break;
		now = mono_ms();
		if (now >= end) {
			fprintf(stderr,
				"shardfs: %s is still busy %d s after its control-file users were "
				"asked to leave\n",
				FS_Q(m->dir), FS_UMOUNT_LEAVE_MS / 1000);
			break;
		}
		if (wait > end - now)
			wait = end - now;
		nanosleep(&(struct timespec){wait / 1000, (long)(wait % 1000) * 1000 * 1000}, NULL);
		scan_holders(m->dir, m->dev, 0, &h);
	}
	umount_ctl(m->dir, "umount-notice 0\n");
	return 1;
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
	int dashes = 0;

	for (int i = 0; i < argc; i++) {
		if (!dashes && strcmp(argv[i], "--") == 0) {
			dashes = 1; /* MOUNTPOINT only after it */
			continue;
		}
		if (dashes) {
			if (*path) {
				fprintf(stderr, "usage: shardfs %s\n", umount_synopsis);
				return 2;
			}
			*path = argv[i];
			continue;
		}
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			if (argc != 1) { /* alone, as every command's --help */
				fprintf(stderr, "usage: shardfs %s\n", umount_synopsis);
				return 2;
			}
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
			    "When only control files (.shardfs/) hold it, their users are asked "
			    "to\n"
			    "leave ('shardfs prefetch' stops following) and it waits up to 5 s "
			    "for\n"
			    "them before it says the mount is busy.\n"
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
				FS_Q(argv[i]), umount_synopsis);
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
	int r;

	if (!path[0]) {
		fprintf(stderr, "shardfs: MOUNTPOINT is an empty path\n");
		return 1;
	}
	r = fs_mnt_identify(path, m);
	if (r == -ENOENT && stale)
		return 0; /* nothing to clean */
	if (r < 0) {
		struct stat st;

		if (r != -ENOENT)
			fprintf(stderr, "shardfs: %s: %s\n", FS_Q(path), strerror(-r));
		else if (stat(path, &st) < 0)
			fprintf(stderr, "shardfs: %s: %s\n", FS_Q(path), strerror(errno));
		else
			fs_mnt_say_not_a_mount(path);
		return 1;
	}
	if (m->owner >= 0 && (uid_t)m->owner != geteuid() && geteuid() != 0) {
		fprintf(stderr,
			"shardfs: %s was mounted by uid %ld: only that user (or root) can "
			"unmount it\n",
			FS_Q(path), m->owner);
		return 1;
	}
	if (stale && m->state != FS_MNT_DEAD) {
		fprintf(stderr,
			"shardfs: %s is a shardfs mount whose daemon %s: not unmounted "
			"(--stale cleans only a dead one)\n",
			FS_Q(path), m->state == FS_MNT_LIVE ? "runs" : "may run");
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
		if (fs_mnt_pid_stopped(pid))
			kill((pid_t)pid, SIGCONT); /* so that it takes the SIGTERM */
		/* the daemon stops itself on SIGTERM: it cancels what is
		 * in flight, detaches the mount and exits */
		fprintf(stderr,
			"shardfs: %s is busy: stopped its daemon %ld (--force; reads in "
			"flight fail, the mount is detached)\n",
			FS_Q(path), pid);
		return 0;
	}
	if (busy && force && m->state == FS_MNT_DEAD) {
		if (run_fusermount(m->dir, 1, err, errcap) == 0)
			return 0;
		fputs(err, stderr);
		fprintf(stderr, "shardfs: unmounting %s failed\n", FS_Q(path));
		return 1;
	}
	if (busy && !force) {
		struct holders h;

		fprintf(stderr, "shardfs: %s is busy, not unmounted; held by:\n", FS_Q(path));
		scan_holders(m->dir, m->dev, 1, &h);
		fprintf(stderr,
			"shardfs: end those, or 'shardfs umount --force %s' stops the "
			"daemon (their reads and open files then fail)\n",
			FS_Q(path));
		return 1;
	}
	fputs(err, stderr);
	fprintf(stderr, "shardfs: unmounting %s failed%s\n", FS_Q(path),
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
	pid = m.state == FS_MNT_HUNG ? fs_mnt_find_daemon(&m) : mount_daemon(&m);
	if (run_fusermount(m.dir, stale, err, sizeof(err)) != 0 &&
	    (force || stale || !strstr(err, strerror(EBUSY)) ||
	     umount_leave(&m, err, sizeof(err)) != 0) &&
	    umount_failed(path, &m, pid, force, err, sizeof(err)) != 0)
		return 1;
	/* wait for the daemon to finish writing its state (60 s at most) */
	for (int i = 0; i < 600 && pid_running(pid) && !fs_mnt_pid_stopped(pid); i++) {
		struct timespec ts = {0, 100 * 1000 * 1000};

		nanosleep(&ts, NULL);
	}
	if (pid_running(pid) && fs_mnt_pid_stopped(pid)) {
		fprintf(stderr,
			"shardfs: unmounted %s, but its daemon %ld is stopped: it finishes once "
			"continued ('kill -CONT %ld')\n",
			FS_Q(path), pid, pid);
		return 1;
	}
	if (pid_running(pid)) {
		fprintf(stderr, "shardfs: unmounted, but daemon %ld is still running\n", pid);
		return 1;
	}
	return 0;
}
