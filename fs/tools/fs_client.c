/*
 * fs_client.c — the commands that talk to a running mount through its
 * files, without FUSE: stats, refresh, plan (prefetch: fs_prefetch.c),
 * and the helpers they share (fs_client_i.h). They read the control files
 * (MOUNTPOINT/.shardfs/stats) and send commands as the FS_CTL_IOC ioctl on
 * MOUNTPOINT/.shardfs/control (fs_core_ctl.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs_core.h"
#include "fs_core_ctl.h"
#include "fs_core_opt.h"
#include "fs_client_i.h"
#include "fs_mountid.h"
#include "fs_tools.h"

/* The usage of a command that takes MOUNTPOINT (and, with more, further
 * arguments): -1 to go on, or the exit status after --help (0, on stdout)
 * or a wrong command line (2). A "--" first is dropped from *argc, *argv
 * (a MOUNTPOINT may then begin with '-'). */
int fs_client_usage(int *argcp, char ***argvp, const char *synopsis, const char *about, int more)
{
	int argc = *argcp, dashes = argc >= 1 && strcmp((*argvp)[0], "--") == 0;
	char **argv = *argvp + dashes;

	argc -= dashes;
	*argcp = argc;
	*argvp = argv;
	if (!dashes && argc >= 1 &&
	    (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0) && argc == 1) {
		printf("usage: shardfs %s\n\n%s", synopsis, about);
		return 0;
	}
	if (!dashes && argc >= 1 && argv[0][0] == '-' && argv[0][1] && strcmp(argv[0], "-h") != 0 &&
	    strcmp(argv[0], "--help") != 0) {
		/* the command's name: the synopsis's first word */
		fprintf(stderr, "shardfs %.*s: unknown option %s\nusage: shardfs %s\n",
			(int)strcspn(synopsis, " "), synopsis, FS_Q(argv[0]), synopsis);
		return 2;
	}
	if (argc < 1 || (!more && argc != 1) || (!dashes && argv[0][0] == '-')) {
		fprintf(stderr, "usage: shardfs %s\n", synopsis);
		return 2;
	}
	return -1;
}

/* Say why the mount m (as path names it) cannot be used; err: the errno
 * of the attempt (opening or reading a file of its .shardfs). A dead
 * daemon, a mount of another user (the control file is its owner's only,
 * and without allow_other the whole mount is) each have their own
 * message. */
void fs_client_say_not_usable(const char *path, const struct fs_mnt *m, int err)
{
	if (err == ENOTCONN)
		fs_say_dead_mount(FS_Q(path));
	else if (m->state == FS_MNT_HUNG)
		fs_mnt_say_hung(path, m);
	else if ((err == EACCES || err == EPERM) && m->owner >= 0 && (uid_t)m->owner != geteuid())
		fprintf(stderr,
			"shardfs: %s: permission denied: only the user who mounted it "
			"(uid %ld) can %s\n",
			FS_Q(path), m->owner,
			m->allow_other ? "send commands to it"
				       : "use it (it was mounted without -o allow_other)");
	else
		fprintf(stderr, "shardfs: %s: %s\n", FS_Q(path), strerror(err));
}

void fs_client_say_lost(const char *lead, const char *mnt, int err)
{
	fputs(lead, stderr);
	if (err == -ENOTCONN)
		fs_say_dead_mount(FS_Q(mnt));
	else
		fprintf(stderr, "shardfs: lost the mount at %s: %s\n", FS_Q(mnt),
			strerror(err < 0 ? -err : EIO));
}

/* fs_client_say_cache_gone on a stats document already read. */
static int say_cache_gone(const char *cmd, const char *mnt, const struct fs_stats_doc *stats)
{
	const char *dir = fs_stats_get(stats, "cache_dir");
	uint64_t gone = 0;

	if (fs_stats_u64(stats, "cache_dir_removed", &gone) < 0 || !gone || !dir)
		return 0;
	fprintf(stderr,
		"shardfs: %s: the cache directory %s was removed under the mount %s: what is "
		"not cached fails with EIO (the mount's log went with it): unmount and mount "
		"again\n",
		cmd, FS_Q(dir), FS_Q(mnt));
	return 1;
}

int fs_client_say_cache_gone(const char *cmd, const char *mnt)
{
	struct fs_stats_doc stats;
	int said;

	if (fs_mnt_read_stats(mnt, &stats) < 0)
		return 0;
	said = say_cache_gone(cmd, mnt, &stats);
	fs_stats_doc_free(&stats);
	return said;
}

/* The shardfs mount at path, as the kernel has it (fs_mountid.h): 0 when
 * it answers; else 1 after saying why not (an empty path, no mount there,
 * a path inside one, a dead daemon, another user's). */
int fs_client_mount(const char *path, struct fs_mnt *m)
{
	struct stat st;
	int err;

	if (!path[0]) {
		/* "$MNT" of an unset variable: not "shardfs: : No such file" */
		fprintf(stderr, "shardfs: MOUNTPOINT is an empty path\n");
		return 1;
	}
	err = fs_mnt_identify(path, m);
	if (err == 0 && m->state == FS_MNT_LIVE)
		return 0;
	if (err == 0)
		fs_client_say_not_usable(path, m, m->err);
	else if (err != -ENOENT)
		fprintf(stderr, "shardfs: %s: %s\n", FS_Q(path), strerror(-err));
	else if (stat(path, &st) < 0)
		fprintf(stderr, "shardfs: %s: %s\n", FS_Q(path), strerror(errno));
	else
		fs_mnt_say_not_a_mount(path);
	return 1;
}

int fs_stats_main(int argc, char **argv)
{
	struct fs_stats_doc stats;
	struct fs_mnt m;
	int err, rc = fs_client_usage(
		     &argc, &argv, "stats MOUNTPOINT",
		     "Print the counters of a running mount (MOUNTPOINT/.shardfs/stats), one\n"
		     "per line; MOUNTPOINT/.shardfs/metrics has them in Prometheus text format.\n",
		     0);

	if (rc >= 0)
		return rc;
	if (fs_client_mount(argv[0], &m))
		return 1;
	err = fs_mnt_read_stats(m.dir, &stats);
	if (err < 0) {
		fs_client_say_not_usable(argv[0], &m, -err);
		return 1;
	}
	/* one line a field: its name and its value as it is (a string without
	 * its quotes and escapes; control characters, which would break the
	 * line, as \uXXXX) */
	for (size_t i = 0; i < stats.n; i++) {
		printf("%-22s ", stats.f[i].name);
		for (const unsigned char *p = (const unsigned char *)stats.f[i].value; *p; p++)
			if (*p < 0x20)
				printf("\\u%04x", *p);
			else
				putchar(*p);
		putchar('\n');
	}
	fs_stats_doc_free(&stats);
	return 0;
}

double fs_client_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Where PATH lies relative to the mount root: paths inside the mount
 * (absolute, or relative to the working directory) lose the mount prefix;
 * anything else is taken as relative to the mount root already, and
 * *outside is set when PATH names something that exists outside the mount
 * (so an error can say so rather than only "not in the mount"). */
const char *fs_client_mount_relative(const char *mnt, const char *path, char *buf, size_t n,
				     int *outside)
{
	char *abs = realpath(path, NULL);
	size_t ml = strlen(mnt);

	*outside = 0;
	if (abs && strncmp(abs, mnt, ml) == 0 && (abs[ml] == '/' || abs[ml] == '\0')) {
		snprintf(buf, n, "%s", abs[ml] ? abs + ml + 1 : "");
		free(abs);
		return buf;
	}
	*outside = abs != NULL;
	free(abs);
	while (*path == '/')
		path++;
	return path;
}

/* A PATH or FILE argument as a command line carries it (fs_ctl.h): every
 * byte up to 0x20 (blanks, which the mount trims at a line's ends, a
 * newline, which ends the line), 0x7f and a backslash as "\xHH". 0, or
 * -ENAMETOOLONG when out (cap bytes) cannot hold it. */
int fs_client_ctl_escape(const char *in, char *out, size_t cap)
{
	size_t o = 0;

	for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
		int esc = *p <= 0x20 || *p == 0x7f || *p == '\\';

		if (o + (esc ? 4 : 1) >= cap)
			return -ENAMETOOLONG;
		if (esc)
			o += (size_t)snprintf(out + o, cap - o, "\\x%02x", *p);
		else
			out[o++] = (char)*p;
	}
	out[o] = '\0';
	return 0;
}

/* Send command lines to a running mount (FS_CTL_IOC on its control file).
 * Returns what the mount's fs_ctl_command returned, or a negative errno. */
int fs_client_ctl_send(int fd, const char *cmd)
{
	char buf[FS_CTL_IOC_LEN];
	int r;

	if (strlen(cmd) >= sizeof(buf))
		return -ENAMETOOLONG;
	memset(buf, 0, sizeof(buf));
	memcpy(buf, cmd, strlen(cmd));
	r = ioctl(fd, FS_CTL_IOC, buf);
	return r < 0 ? -errno : r;
}

/* The counters 'shardfs refresh' reports, from a stats snapshot (src, when
 * not NULL: the source's path as given, srcsize bytes). */
#define REFRESH_COUNTS 6
static int refresh_counts(const char *mnt, uint64_t v[REFRESH_COUNTS], char *src, size_t srcsize)
{
	static const char *const keys[REFRESH_COUNTS] = {"refresh_added",   "refresh_removed",
							 "refresh_changed", "objects",
							 "shards",	    "source_links_refused"};
	struct fs_stats_doc stats;
	int err = fs_mnt_read_stats(mnt, &stats);

	for (int i = 0; err == 0 && i < REFRESH_COUNTS; i++)
		err = fs_stats_u64(&stats, keys[i], &v[i]);
	if (err == 0 && src) {
		const char *p = fs_stats_get(&stats, "source_path");

		snprintf(src, srcsize, "%s", p ? p : "");
	}
	fs_stats_doc_free(&stats);
	return err;
}

/* A refresh failed with err: say why (which path is gone, for a local
 * source), what the mount shows now (the listing of its last mount or
 * refresh, counts), from the counters still readable. */
static void refresh_say_failed(const char *arg, int err, const uint64_t before[REFRESH_COUNTS],
			       const char *src)
{
	int local = src[0] == '/';

	if (local && (err == -ENOENT || err == -ENOTDIR || err == -EACCES)) {
		fprintf(stderr,
			"shardfs: refresh of %s failed: its source directory %s %s (%s); the "
			"mount still shows the listing of its last mount or refresh (%" PRIu64
			" %s, %" PRIu64 " %s), read from the directory that listing found "
			"(moved away: still read; removed: only what the cache holds); put "
			"the directory back and run 'shardfs refresh' again, or unmount\n",
			FS_Q(arg), FS_Q(src),
			err == -ENOENT	  ? "is gone"
			: err == -ENOTDIR ? "is no longer a directory"
					  : "cannot be opened",
			strerror(-err), before[3], fs_plural(before[3], "object", "objects"),
			before[4], fs_plural(before[4], "shard", "shards"));
		return;
	}
	fprintf(stderr,
		"shardfs: refresh of %s failed: %s; the mount still shows the listing of its "
		"last mount or refresh (%" PRIu64 " %s, %" PRIu64 " %s) (see the mount's log)\n",
		FS_Q(arg),
		err == -EIO	? "the source cannot be listed"
		: err == -ELOOP ? "the source is now the mount point, inside it, or holds it (its "
				  "listing would read the mount itself)"
				: strerror(-err),
		before[3], fs_plural(before[3], "object", "objects"), before[4],
		fs_plural(before[4], "shard", "shards"));
}

/* 'shardfs refresh MOUNTPOINT': send "refresh" on the control file (it
 * returns once the mount shows the source as it is now) and say what
 * changed, from the counters before and after. */
int fs_refresh_main(int argc, char **argv)
{
	uint64_t before[REFRESH_COUNTS], after[REFRESH_COUNTS];
	struct fs_mnt m;
	char path[PATH_MAX + 32], src[PATH_MAX + 32];
	int fd, err,
	    rc = fs_client_usage(
		&argc, &argv, "refresh MOUNTPOINT",
		"List the source of a running mount again: new shards appear, removed "
		"ones\ngo, changed ones are indexed again when next looked up (their "
		"old view\ngives ESTALE). Prints what changed.\n",
		0);

	if (rc >= 0)
		return rc;
	if (fs_client_mount(argv[0], &m))
		return 1;
	snprintf(path, sizeof(path), "%s/.shardfs/control", m.dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	err = fd < 0 ? -errno : refresh_counts(m.dir, before, src, sizeof(src));
	if (err < 0) {
		fs_client_say_not_usable(argv[0], &m, -err);
		if (fd >= 0)
			close(fd);
		return 1;
	}
	err = fs_client_ctl_send(fd, "refresh\n");
	close(fd);
	if (err < 0) {
		refresh_say_failed(argv[0], err, before, src);
		fs_client_say_cache_gone("refresh", m.dir);
		return 1;
	}
	err = refresh_counts(m.dir, after, NULL, 0);
	if (err < 0) {
		fs_client_say_lost("", argv[0], err);
		return 1;
	}
	printf("refreshed %s: %" PRIu64 " new, %" PRIu64 " removed, %" PRIu64 " changed; %" PRIu64
	       " %s, %" PRIu64 " %s",
	       FS_Q(argv[0]), after[0] - before[0], after[1] - before[1], after[2] - before[2],
	       after[3], fs_plural(after[3], "object", "objects"), after[4],
	       fs_plural(after[4], "shard", "shards"));
	/* links the listing refused: the paths they are at are not in the
	 * mount, and the user may expect them (each named in the log) */
	if (after[5])
		printf("; %" PRIu64 " symbolic %s refused: %s out of the source directory "
		       "(an absolute target, or one past its top; where openat2 is missing, "
		       "every link below it): not listed, each named in the mount's log",
		       after[5], fs_plural(after[5], "link", "links"),
		       after[5] == 1 ? "it leads" : "they lead");
	printf("\n");
	return 0;
}

/* The line of plan name in MOUNTPOINT/.shardfs/plans (name, pid, paths,
 * missing, failed, read, position, bytes, fnv), printed as a summary
 * (*missing: its paths not in the mount; *failed: those whose lookup
 * failed): 0, or -ENOENT when there is none. */
static int plan_say(const char *mnt, const char *name, uint64_t *missing, uint64_t *failed)
{
	char *text = fs_mnt_read_ctl(mnt, "plans"), *line, *save = NULL;
	int err = -ENOENT;

	if (!text)
		return -errno;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *f[9], *s2 = NULL;
		int n = 0;

		for (char *t = strtok_r(line, "\t", &s2); t && n < 9; t = strtok_r(NULL, "\t", &s2))
			f[n++] = t;
		if (n == 9 && strcmp(f[0], name) == 0) {
			char human[32];
			uint64_t bytes = strtoull(f[7], NULL, 10);

			fs_human_bytes(bytes, human, sizeof(human));
			*missing = strtoull(f[3], NULL, 10);
			*failed = strtoull(f[4], NULL, 10);
			printf("plan '%s': %s path%s, %s; %s path%s not in the mount (skipped)",
			       name, f[2], strcmp(f[2], "1") == 0 ? "" : "s", human, f[3],
			       strcmp(f[3], "1") == 0 ? "" : "s");
			if (*failed)
				printf("; %" PRIu64 " %s could not be looked up (skipped)", *failed,
				       fs_plural(*failed, "path", "paths"));
			printf("\n");
			err = 0;
			break;
		}
	}
	free(text);
	return err;
}

/* Say why the mount at mnt refused "plan" (abs: the plan file) or
 * "plan-clear" (abs NULL) of plan name; err: its negative errno. */
static void plan_say_refused(const char *mnt, const char *name, const char *abs, int err)
{
	if (!abs && err == -ENOENT)
		fprintf(stderr, "shardfs plan: %s has no plan named '%s'\n", FS_Q(mnt), name);
	else if (err == -EINVAL)
		fprintf(stderr,
			"shardfs plan: the mount refused the plan file %s: not a regular "
			"file, or inside the mount (see the mount's log)\n",
			FS_Q(abs));
	else if (err == -ENOTTY)
		fprintf(stderr, "shardfs: %s: %s\n", FS_Q(mnt), strerror(ENOTTY));
	else
		fprintf(stderr, "shardfs plan: the mount cannot read the plan file %s: %s%s\n",
			FS_Q(abs ? abs : ""), strerror(-err),
			err == -EACCES ? " (the mount opens it with the sender's rights: "
					 "a file this user can read)"
				       : "");
}

static const char plan_synopsis[] = "plan MOUNTPOINT FILE [--name NAME]\n"
				    "       shardfs plan MOUNTPOINT --clear [--name NAME]";

struct plan_args {
	const char *mnt, *file, *name;
	int clear;
};

/* shardfs plan's arguments into a; --help said. -1: go on; else the exit
 * status (0 after --help, 2 after a usage error, said). */
static int plan_args(int argc, char **argv, struct plan_args *a)
{
	int dashes = 0;

	*a = (struct plan_args){.name = "default"};
	for (int i = 0; i < argc; i++) {
		const char *s = argv[i];

		if (!dashes && strcmp(s, "--") == 0) {
			dashes = 1; /* MOUNTPOINT and FILE only after it */
		} else if (!dashes && (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0)) {
			if (argc != 1) { /* alone, as every command's --help */
				fprintf(stderr, "usage: shardfs %s\n", plan_synopsis);
				return 2;
			}
			printf(
			    "usage: shardfs %s\n\n"
			    "Publish a reading plan to a running mount: FILE holds mount-relative\n"
			    "paths (or absolute ones below MOUNTPOINT), one per line, in the\n"
			    "order they will be read. The mount resolves each to the bytes\n"
			    "behind it and keeps them in that order under\n"
			    "NAME (default: 'default'); a later plan with the same NAME\n"
			    "replaces it, other names are kept (several readers, several jobs).\n"
			    "Paths not in the mount are skipped and counted, and so are paths\n"
			    "whose shard could not be read or indexed, apart. Reads of planned\n"
			    "paths advance the plan (stats: plans, plan_paths, plan_missing,\n"
			    "plan_failed, plan_hits; MOUNTPOINT/.shardfs/plans). --clear drops\n"
			    "plan NAME.\n"
			    "A relative FILE is taken from the current directory; the mount\n"
			    "reads it with the rights of the user who sends the plan (its\n"
			    "daemon's user must be able to reach it too). The shards the\n"
			    "paths name whose index is not loaded yet are indexed first, several\n"
			    "at once (over a slow link: minutes); the wait shows its progress on\n"
			    "stderr and gives up after no progress for 2 minutes (no index build\n"
			    "ended, no shard byte read; nothing is published). Ctrl-C: nothing is\n"
			    "published either. Exit status: 0 done (also with paths skipped\n"
			    "that name nothing in the mount), 1 refused or given up (says why),\n"
			    "or published with paths skipped whose lookup failed (their shard\n"
			    "could not be read or indexed: a store down, a cache directory\n"
			    "removed, a shard refused whole; they may be in the mount: says so,\n"
			    "and why when the mount's counters tell) or lines skipped that name\n"
			    "a path only without a carriage return or blanks at their ends (a\n"
			    "line is a path as it is: CRLF line ends are said, with the first\n"
			    "such line), 2 usage.\n",
			    plan_synopsis);
			return 0;
		} else if (!dashes && strcmp(s, "--clear") == 0) {
			a->clear = 1;
		} else if (!dashes && strcmp(s, "--name") == 0) {
			if (i + 1 == argc) {
				fprintf(stderr,
					"shardfs plan: option '--name' needs NAME\nusage: "
					"shardfs %s\n",
					plan_synopsis);
				return 2;
			}
			a->name = argv[++i];
		} else if (!dashes && strncmp(s, "--name=", 7) == 0) {
			a->name = s + 7;
		} else if (!dashes && s[0] == '-' && s[1]) {
			fprintf(stderr, "shardfs plan: unknown option %s\nusage: shardfs %s\n",
				FS_Q(s), plan_synopsis);
			return 2;
		} else if (!a->mnt) {
			a->mnt = s;
		} else if (!a->file) {
			a->file = s;
		} else {
			fprintf(stderr, "usage: shardfs %s\n", plan_synopsis);
			return 2;
		}
	}
	if (!a->mnt || !a->clear == !a->file) {
		fprintf(stderr, "usage: shardfs %s\n", plan_synopsis);
		return 2;
	}
	if (strlen(a->name) == 0 || strlen(a->name) > FS_PLAN_NAME_MAX ||
	    strspn(a->name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") !=
		strlen(a->name)) {
		fprintf(stderr, "shardfs plan: bad name '%s': 1 to %d of A-Z a-z 0-9 . _ : -\n",
			FS_Q(a->name), FS_PLAN_NAME_MAX);
		return 2;
	}
	return -1;
}

/* The control line of a's command into line[size] ("plan NAME PATH" with
 * FILE's absolute path, which goes to *abs for the caller to free, or
 * "plan-clear NAME"). 0, or 1 after saying why not. */
static int plan_line(const struct plan_args *a, char *line, size_t size, char **abs)
{
	char esc[4 * PATH_MAX];
	int n;

	*abs = NULL;
	if (a->file && !a->file[0]) {
		fprintf(stderr, "shardfs plan: FILE is an empty path\n");
		return 1;
	}
	if (a->file) {
		/* the daemon reads FILE: it needs the absolute path */
		*abs = realpath(a->file, NULL);
		if (!*abs) {
			fprintf(stderr, "shardfs plan: cannot read the plan file %s: %s\n",
				FS_Q(a->file), strerror(errno));
			return 1;
		}
	}
	n = *abs && fs_client_ctl_escape(*abs, esc, sizeof(esc)) < 0 ? -1
	    : a->clear ? snprintf(line, size, "plan-clear %s\n", a->name)
		       : snprintf(line, size, "plan %s %s\n", a->name, esc);
	if (n < 0 || (size_t)n >= size) {
		fprintf(stderr, "shardfs plan: the plan file's path is too long\n");
		free(*abs);
		*abs = NULL;
		return 1;
	}
	return 0;
}

/* The plan command gives up once the mount's index builds for it made no
 * progress (no build ended, no byte of a shard read) for this long. */
#define PLAN_IDLE_S 120

/* The counters the plan command's progress follows. */
struct plan_progress {
	uint64_t wanted, done, scanned, index_errors;
};

static int plan_progress_read(const char *mnt, struct plan_progress *p)
{
	struct fs_stats_doc stats;
	int err = fs_mnt_read_stats(mnt, &stats);

	if (err == 0)
		err = fs_stats_u64(&stats, "plan_index_wanted", &p->wanted);
	if (err == 0)
		err = fs_stats_u64(&stats, "plan_index_done", &p->done);
	if (err == 0)
		err = fs_stats_u64(&stats, "index_bytes_scanned", &p->scanned);
	if (err == 0)
		err = fs_stats_u64(&stats, "index_errors", &p->index_errors);
	fs_stats_doc_free(&stats);
	return err;
}

static atomic_int plan_sig; /* lock-free: a signal handler's store */

static void plan_on_signal(int sig)
{
	plan_sig = sig;
}

/* Send line on the control file fd from a child process, and follow the
 * mount's index builds for it meanwhile: a line to stderr every 5 s (a
 * terminal: one line rewritten every second), none for a wait shorter
 * than that. Gives up after PLAN_IDLE_S s without progress (the child's
 * request is interrupted: the mount stops publishing between two shards'
 * builds); a mount without these counters (an older shardfs) is waited
 * for as before, without progress and without that bound.
 * Returns what fs_client_ctl_send returned, -ETIMEDOUT after giving up, or -EINTR
 * after SIGINT or SIGTERM; *errors0: the mount's index_errors before the
 * request (UINT64_MAX: not read). */
static int plan_send(int fd, const char *mnt, const char *line, uint64_t *errors0)
{
	struct sigaction sa = {.sa_handler = plan_on_signal}, old_int, old_term;
	struct plan_progress p0 = {0}, p = {0}, last = {0};
	int tty = isatty(2), have0, status, err = 0, shown = 0;
	double t0 = fs_client_now(), last_print = t0, last_move = t0;
	pid_t pid;

	have0 = plan_progress_read(mnt, &p0) == 0;
	*errors0 = have0 ? p0.index_errors : UINT64_MAX;
	last = p0;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	pid = fork();
	if (pid < 0) {
		err = -errno;
		goto out;
	}
	if (pid == 0) {
		/* the handlers stay: a signal interrupts the request, and the
		 * mount's answer (-EINTR) ends it */
		err = fs_client_ctl_send(fd, line);
		_exit(err < 0 ? (-err < 255 ? -err : 255) : 0);
	}
	for (;;) {
		struct timespec ts = {0, 100 * 1000 * 1000};
		pid_t w = waitpid(pid, &status, WNOHANG);
		double t = fs_client_now();

		if (w == pid)
			break;
		if (w < 0 && errno != EINTR) {
			err = -errno;
			break;
		}
		if (plan_sig || (have0 && t - last_move > PLAN_IDLE_S)) {
			if (!err)
				err = plan_sig ? -EINTR : -ETIMEDOUT;
			kill(pid, SIGTERM);
			while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
				;
			goto said;
		}
		if (t - last_print >= (tty ? 1 : 5) && have0 && plan_progress_read(mnt, &p) == 0) {
			char b[32];

			if (p.done != last.done || p.scanned != last.scanned ||
			    p.wanted != last.wanted)
				last_move = t;
			last = p;
			fs_human_bytes(p.scanned - p0.scanned, b, sizeof(b));
			fprintf(stderr,
				"%sshardfs plan: indexing the plan's shards: %" PRIu64
				" of %" PRIu64 " done, %s read (%.0f s)%s",
				tty ? "\r" : "", p.done - p0.done, p.wanted - p0.wanted, b, t - t0,
				tty ? "" : "\n");
			shown = 1;
			last_print = t;
		}
		nanosleep(&ts, NULL);
	}
said:
	if (shown && tty)
		fprintf(stderr, "\n");
	if (!err)
		err = WIFEXITED(status) ? -WEXITSTATUS(status) : -EINTR;
out:
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	return err;
}

/* A published plan skipped failed paths whose lookup failed (their shards
 * could not be read or indexed: .shardfs/plans' failed): say why when one
 * stats read tells, the cache directory removed or index builds that
 * failed since the request (errors0: index_errors before it; a reader's
 * failed build meanwhile is said too: the words say "may"), else say
 * plainly that they were skipped (index_errors need not move: a shard
 * refused whole keeps the error of its first build, counted then; a
 * brace pattern's shard whose size could not be learnt is counted
 * elsewhere). The command then exits 1: a plan published without paths
 * that may be in the mount is never a silent success. */
static void plan_why_failed(const char *mnt, uint64_t errors0, uint64_t failed)
{
	struct fs_stats_doc stats;
	uint64_t errors = 0;
	int said = 0;

	if (fs_mnt_read_stats(mnt, &stats) == 0) {
		said = say_cache_gone("plan", mnt, &stats);
		if (!said && errors0 != UINT64_MAX &&
		    fs_stats_u64(&stats, "index_errors", &errors) == 0 && errors > errors0) {
			fprintf(stderr,
				"shardfs plan: shards could not be indexed while the plan was "
				"published (index_errors +%" PRIu64
				": see the mount's log): the paths skipped may lie "
				"in them, not be missing from the mount\n",
				errors - errors0);
			said = 1;
		}
		fs_stats_doc_free(&stats);
	}
	if (!said)
		fprintf(stderr,
			"shardfs plan: %" PRIu64 " %s could not be looked up: %s could not be read "
			"or indexed (see the mount's log); the plan was published without %s\n",
			failed, fs_plural(failed, "path", "paths"),
			fs_plural(failed, "its shard", "their shards"),
			failed == 1 ? "it" : "them");
}

/* Most lines of a plan file plan_why_trimmed looks up: its cost stays
 * bounded on a huge file (each lookup may index a shard). */
#define PLAN_TRIM_LOOKS 1000

/* Whether path (a plan file's line: mount-relative, or absolute) names
 * something in the mount at mnt. */
static int plan_path_there(const char *mnt, const char *path)
{
	char full[PATH_MAX];
	struct stat st;
	int n = path[0] == '/' ? snprintf(full, sizeof(full), "%s", path)
			       : snprintf(full, sizeof(full), "%s/%s", mnt, path);

	return n > 0 && (size_t)n < sizeof(full) && lstat(full, &st) == 0;
}

/* The mount takes a plan file's line as the path it is, byte for byte: a
 * '\r' of CRLF line ends, or blanks at either end, are part of it, so a
 * plan file written so skips paths that are there (and exits 0: 'N paths
 * not in the mount'). After a plan that skipped paths: read the file
 * (the user's, as the user) and count the lines with a '\r' or blanks at
 * their ends that name nothing as they are but a path without them (at
 * most PLAN_TRIM_LOOKS looked up); say them, with the first's number. 1
 * when said (the command then exits 1), else 0. */
static int plan_why_trimmed(const char *mnt, const char *file)
{
	FILE *f = fopen(file, "re");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	uint64_t lineno = 0, found = 0, first = 0;
	unsigned looks = 0;

	if (!f)
		return 0;
	while (looks < PLAN_TRIM_LOOKS && (n = getline(&line, &cap, f)) > 0) {
		size_t a = 0, b = (size_t)n;

		lineno++;
		if (line[b - 1] == '\n')
			line[--b] = '\0';
		if (b && line[b - 1] == '\r')
			b--;
		while (a < b && (line[a] == ' ' || line[a] == '\t'))
			a++;
		while (b > a && (line[b - 1] == ' ' || line[b - 1] == '\t'))
			b--;
		if (b == a || (a == 0 && line[b] == '\0'))
			continue; /* empty, or nothing at its ends */
		looks++;
		if (plan_path_there(mnt, line))
			continue; /* a name that ends so: planned as it is */
		line[b] = '\0';
		if (plan_path_there(mnt, line + a) && !found++)
			first = lineno;
	}
	free(line);
	fclose(f);
	if (!found)
		return 0;
	fprintf(stderr,
		"shardfs plan: %" PRIu64 " %s of %s %s a path of the mount only without the "
		"carriage return or blanks at %s ends (the first: line %" PRIu64
		"): a line is a path as it is, byte for byte; write the file with plain "
		"newline line ends and no blanks around the paths\n",
		found, fs_plural(found, "line", "lines"), FS_Q(file), found == 1 ? "names" : "name",
		found == 1 ? "its" : "their", first);
	return 1;
}

int fs_plan_main(int argc, char **argv)
{
	struct plan_args a;
	struct fs_mnt m;
	char path[PATH_MAX + 32], *abs = NULL;
	char line[4 * PATH_MAX + FS_PLAN_NAME_MAX + 16];
	uint64_t missing = 0, failed = 0, errors0 = UINT64_MAX;
	int fd, err;

	err = plan_args(argc, argv, &a);
	if (err >= 0)
		return err;
	/* the mount first: a FILE is only worth a word once there is a mount */
	if (fs_client_mount(a.mnt, &m))
		return 1;
	snprintf(path, sizeof(path), "%s/.shardfs/control", m.dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fs_client_say_not_usable(a.mnt, &m, errno);
		return 1;
	}
	if (plan_line(&a, line, sizeof(line), &abs)) {
		close(fd);
		return 1;
	}
	err = a.clear ? fs_client_ctl_send(fd, line) : plan_send(fd, m.dir, line, &errors0);
	close(fd);
	if (err == -ETIMEDOUT || err == -EINTR) {
		fprintf(stderr, "shardfs plan: %s; the plan '%s' was not published\n",
			err == -EINTR ? "interrupted"
				      : "the mount's index builds made no progress for "
					"2 minutes: gave up (see the mount's log)",
			a.name);
		free(abs);
		return 1;
	}
	if (err < 0) {
		plan_say_refused(a.mnt, a.name, abs, err);
		fs_client_say_cache_gone("plan", m.dir);
		free(abs);
		return 1;
	}
	if (a.clear) {
		printf("plan '%s' cleared\n", a.name);
		free(abs);
		return 0;
	}
	if (plan_say(m.dir, a.name, &missing, &failed) < 0)
		printf("plan '%s' published (replaced since by another plan)\n", a.name);
	/* paths whose lookup failed may be in the mount, and a line with a
	 * '\r' or blanks at its ends counts as not in it: not skips to exit 0
	 * on; paths that name nothing are (the plan is what the mount has) */
	err = 0;
	if (failed) {
		plan_why_failed(m.dir, errors0, failed);
		err = 1;
	}
	if (missing && abs && plan_why_trimmed(m.dir, abs))
		err = 1;
	free(abs);
	return err;
}
