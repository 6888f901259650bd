/*
 * fs_prefetch.c — 'shardfs prefetch': the client command that asks a
 * running mount to fill its cache with PATHs and follows its progress
 * through the mount's counters (fs_client.c holds the other clients and
 * the helpers they share: fs_client_i.h).
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
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs_core.h"
#include "fs_core_ctl.h"
#include "fs_core_opt.h"
#include "fs_client_i.h"
#include "fs_mountid.h"
#include "fs_tools.h"

/* The prefetch numbers of a stats snapshot: of the objects the latest
 * prefetch run named (run: its id), which is this command's while no other
 * began since. */
struct pf_stats {
	uint64_t want, have, unfit, pending, before, run, room, limit, fetched, errors;
	/* the mount's source is a local directory: its shards are read in
	 * place, so what is asked counts as cached and nothing is fetched */
	int local;
};

static int pf_stats_read(const char *mnt, struct pf_stats *p)
{
	static const struct {
		const char *name;
		size_t off;
	} fields[] = {
	    {"prefetch_run_bytes", offsetof(struct pf_stats, want)},
	    {"prefetch_run_cached_bytes", offsetof(struct pf_stats, have)},
	    {"prefetch_run_unfit_bytes", offsetof(struct pf_stats, unfit)},
	    {"prefetch_run_pending", offsetof(struct pf_stats, pending)},
	    {"prefetch_run_before_bytes", offsetof(struct pf_stats, before)},
	    {"prefetch_run", offsetof(struct pf_stats, run)},
	    {"cache_room_bytes", offsetof(struct pf_stats, room)},
	    {"cache_bytes_limit", offsetof(struct pf_stats, limit)},
	    {"bytes_fetched", offsetof(struct pf_stats, fetched)},
	    {"fill_errors", offsetof(struct pf_stats, errors)},
	};
	struct fs_stats_doc stats;
	int err = fs_mnt_read_stats(mnt, &stats);

	const char *src;

	for (size_t i = 0; err == 0 && i < sizeof(fields) / sizeof(fields[0]); i++)
		err = fs_stats_u64(&stats, fields[i].name,
				   (uint64_t *)(void *)((char *)p + fields[i].off));
	if (err == 0) {
		src = fs_stats_get(&stats, "source");
		p->local = src && (!strstr(src, "://") || strncmp(src, "file://", 7) == 0);
	}
	fs_stats_doc_free(&stats);
	return err;
}

/* Exit status of 'shardfs prefetch' (also in its --help and README.md). */
#define PF_EXIT_OK 0 /* everything asked for that fits is cached */
/* a PATH was refused, the mount was lost or is being unmounted, or bytes
 * that fit are not cached (fills failed, or readers' fills evicted them
 * meanwhile) */
#define PF_EXIT_ERR 1
#define PF_EXIT_INT 130 /* SIGINT or SIGTERM: stopped following; the mount goes on */
/* pf_follow: another run began; this command's PATHs are checked instead
 * (pf_join). Never an exit status. */
#define PF_OVERRUN (-1)

/* The signal that asked 'shardfs prefetch' to stop following (0: none). Its
 * handler is installed without SA_RESTART: a wait on the mount (the ioctl)
 * ends with EINTR, the mount having ended the wait at the kernel's
 * interrupt (fs_ctl.c), and the loop looks at this. */
static atomic_int pf_stop_sig; /* lock-free: a signal handler's store */

static void pf_on_signal(int sig)
{
	pf_stop_sig = sig;
}

/* One 'shardfs prefetch': the mount, its counters before the commands
 * (s0, when have_s0) and now (s), of its run (run: the id). */
struct pf_run {
	const char *mnt;
	struct pf_stats s0, s;
	uint64_t run;
	int ctl; /* its control file, open while it follows the run (-1: closed) */
	int have_s0;
	int tty;     /* stdout is a terminal: a progress bar, else a line every 5 s */
	int ended;   /* the mount's prefetch of these objects is over */
	int overrun; /* another prefetch run began: the counters are no longer ours */
	/* the bytes said up front not to fit (pf_say_plan: what was missing
	 * less the cache's room as the run began), which the summary's figure
	 * is held against (pf_say_unfit) */
	uint64_t unfit0;
};

/* Check each PATH (argv[1..argc)) before anything is sent: not empty,
 * in the mount (a path inside it, or one relative to its root), there and
 * readable by this user; a typo then fails at once, with one line for each
 * PATH that fails, and no prefetch run begun. PF_EXIT_OK or PF_EXIT_ERR. */
static int pf_check_paths(const char *mnt, int argc, char **argv)
{
	char rel[PATH_MAX], full[PATH_MAX];
	int rc = PF_EXIT_OK;

	for (int i = 1; i < argc; i++) {
		const char *r;
		int outside = 0, n, err = 0;
		struct stat st;

		if (!argv[i][0]) {
			/* "$DIR" of an unset variable: not the whole mount */
			fprintf(stderr,
				"shardfs: prefetch: an empty PATH names nothing in the mount "
				"(give no PATH to prefetch everything)\n");
			rc = PF_EXIT_ERR;
			continue;
		}
		r = fs_client_mount_relative(mnt, argv[i], rel, sizeof(rel), &outside);
		n = snprintf(full, sizeof(full), "%s%s%s", mnt, r[0] ? "/" : "", r);
		if (n < 0 || (size_t)n >= sizeof(full))
			err = ENAMETOOLONG;
		else if (stat(full, &st) < 0 || access(full, R_OK) < 0)
			err = errno;
		if (!err)
			continue;
		rc = PF_EXIT_ERR;
		if (err == ENOENT && outside)
			fprintf(stderr,
				"shardfs: prefetch %s: outside the mount %s, and no '%s' in it\n",
				FS_Q(argv[i]), FS_Q(mnt), FS_Q(r));
		else
			fprintf(stderr, "shardfs: prefetch %s: %s\n", FS_Q(argv[i]),
				err == ENOENT ? "no such file or directory in the mount"
					      : strerror(err));
	}
	return rc;
}

/* Send 'prefetch PATH' for each PATH (none: everything; each checked
 * already: pf_check_paths, but it may have gone since) on the control
 * file fd; the exit status so far, and in *sent how many were taken (taken[i]
 * set for each argv[i] taken: argc entries, the first for everything). */
static int pf_send(int fd, const char *mnt, int argc, char **argv, int *sent, char *taken)
{
	char rel[PATH_MAX], esc[4 * PATH_MAX], line[4 * PATH_MAX + 16];
	int rc = PF_EXIT_OK;

	*sent = 0;
	for (int i = argc > 1 ? 1 : 0; i < argc; i++) {
		int outside = 0, n, err;
		const char *r;

		r = argc > 1 ? fs_client_mount_relative(mnt, argv[i], rel, sizeof(rel), &outside)
			     : "";
		err = fs_client_ctl_escape(r, esc, sizeof(esc));

		n = snprintf(line, sizeof(line), "prefetch %s\n", esc);
		if (err == 0)
			err = n < 0 || (size_t)n >= sizeof(line) ? -ENAMETOOLONG
								 : fs_client_ctl_send(fd, line);
		if (err == -ENOENT && outside)
			fprintf(stderr,
				"shardfs: prefetch %s: outside the mount %s, and no '%s' in it\n",
				FS_Q(argv[i]), FS_Q(mnt), FS_Q(r));
		else if (err < 0)
			fprintf(stderr, "shardfs: prefetch %s: %s\n",
				argc > 1 ? FS_Q(argv[i]) : "(all)",
				err == -ENOENT ? "no such file or directory in the mount"
					       : strerror(-err));
		if (err < 0) {
			rc = PF_EXIT_ERR;
			continue;
		}
		(*sent)++;
		taken[i] = 1;
		if (err == 1)
			printf("prefetch: %s is inside a shard: prefetching the whole shard\n",
			       FS_Q(argv[i]));
	}
	return rc;
}

/* Up front: what was asked, what was cached when it was asked (its fills
 * may be done by now), and what fits in room, the cache's room before the
 * run began (the room now has lost what this run's first fills took, which
 * are still counted missing: room and missing are of one moment); the
 * bytes said not to fit (0: none said). */
static uint64_t pf_say_plan(const struct pf_stats *s, uint64_t room)
{
	char a[32], b[32], c[32], d[32];
	uint64_t before = s->before < s->want ? s->before : s->want;
	uint64_t missing = s->want - before;

	fs_human_bytes(s->want, a, sizeof(a));
	fs_human_bytes(before, b, sizeof(b));
	fs_human_bytes(room, c, sizeof(c));
	fs_human_bytes(s->limit, d, sizeof(d));
	if (s->local && !missing)
		printf("prefetch: %s asked, all of it read in place: the source is a local "
		       "directory, nothing to fetch\n",
		       a);
	else if (!missing)
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
	return missing > room ? missing - room : 0;
}

/* Below this many seconds a rate says more about when the counters were
 * read than about the link: 'in under 0.1 s' is said instead. */
#define PF_RATE_MIN_S 0.1

/* The rate of got bytes fetched in secs seconds into out: MB/s, kB/s
 * below 0.1 MB/s, B/s below 0.1 kB/s, so that no rate of bytes fetched
 * reads 0.0; "N fetched in under 0.1 s" when secs is shorter than
 * PF_RATE_MIN_S (a fast fill: a rate over a time that rounds to 0 would be
 * anything). Returns the rate (0: none said). */
static double pf_rate(uint64_t got, double secs, char *out, size_t n)
{
	double rate;

	if (secs < PF_RATE_MIN_S) {
		char b[32];

		fs_human_bytes(got, b, sizeof(b));
		snprintf(out, n, "%s fetched in under %.1f s", b, PF_RATE_MIN_S);
		return 0;
	}
	rate = (double)got / secs;
	if (rate >= 1e5)
		snprintf(out, n, "%.1f MB/s", rate / 1e6);
	else if (rate >= 100)
		snprintf(out, n, "%.1f kB/s", rate / 1e3);
	else
		snprintf(out, n, "%.0f B/s", rate);
	return rate;
}

/* One progress report of the loop in pf_follow: a bar on a terminal (at
 * most 4 a second), else a line every 5 s; always at the end. secs: since
 * the run began to be followed. Returns whether it printed. */
static int pf_report(const struct pf_run *r, double secs, double since_print)
{
	const struct pf_stats *s = &r->s;
	char have_str[32], want_str[32], rate_s[64];
	double rate = 0;

	if (since_print < (r->tty ? 0.25 : 5) && !r->ended)
		return 0;
	/* the rate of what this run fetched from the store, not of what was
	 * cached already; all of it cached with nothing fetched here is
	 * "already cached" only when it was so as the run began: else another
	 * mount on the cache directory fetched it meanwhile (pf_summary) */
	if (!r->have_s0)
		rate_s[0] = '\0'; /* what this run fetched is not known */
	else if (s->fetched <= r->s0.fetched)
		snprintf(rate_s, sizeof(rate_s), "%s",
			 s->have < s->want ? (r->ended ? "" : "waiting for the store")
			 : s->local	   ? ""
			 : s->before >= s->want
			     ? "already cached"
			     : "fetched by another mount on the cache directory");
	else
		rate = pf_rate(s->fetched - r->s0.fetched, secs, rate_s, sizeof(rate_s));
	fs_human_bytes(s->have, have_str, sizeof(have_str));
	fs_human_bytes(s->want, want_str, sizeof(want_str));
	if (r->tty) {
		int pct = s->want ? (int)(100.0 * (double)s->have / (double)s->want) : 100;
		int bar = pct > 100 ? 20 : pct / 5;
		double eta = rate > 0 && s->want > s->have ? (double)(s->want - s->have) / rate : 0;

		printf("\r[%.*s%.*s] %3d%%  %s / %s  %s  ETA %d:%02d ", bar, "####################",
		       20 - bar, "--------------------", pct, have_str, want_str, rate_s,
		       (int)eta / 60, (int)eta % 60);
	} else {
		printf("prefetch: %s of %s %s%s%s\n", have_str, want_str,
		       s->local && s->have >= s->want ? "read in place" : "cached",
		       rate_s[0] ? ", " : "", rate_s);
	}
	fflush(stdout);
	return 1;
}

/* Wait until the mount's prefetch of run r is over or ms milliseconds
 * passed (at most FS_CTL_WAIT_MAX_MS): a 'prefetch-wait' command on the
 * control file, which the mount answers within 10 ms of the run's end.
 * 1 over (or another run began), 0 not yet, or a negative errno: -EINVAL
 * from a mount without the command, -EINTR when a signal came (a stop and
 * continue, or SIGINT: pf_stop_sig), -ESHUTDOWN when 'shardfs umount' asks
 * the control file's users to leave (umount-notice). */
static int pf_wait(const struct pf_run *r, int ms)
{
	char line[64];

	snprintf(line, sizeof(line), "prefetch-wait %" PRIu64 " %d\n", r->run, ms);
	return fs_client_ctl_send(r->ctl, line);
}

static void pf_close(struct pf_run *r)
{
	if (r->ctl >= 0)
		close(r->ctl);
	r->ctl = -1;
}

/* A signal asked to stop following (pf_stop_sig): say where the run
 * stands and that the mount goes on with it. PF_EXIT_INT. */
static int pf_stopped(const struct pf_run *r)
{
	char have[32], want[32];

	fs_human_bytes(r->s.have, have, sizeof(have));
	fs_human_bytes(r->s.want, want, sizeof(want));
	fprintf(stderr,
		"%sshardfs: prefetch: %s: stopped following (%s of %s cached); the mount "
		"goes on with the prefetch ('shardfs stats %s' shows it)\n",
		r->tty ? "\n" : "", pf_stop_sig == SIGINT ? "interrupted (SIGINT)" : "SIGTERM",
		have, want, FS_Q(r->mnt));
	return PF_EXIT_INT;
}

/* Follow the mount's counters until every byte asked is cached or the
 * mount's prefetch of them is over (what did not fit was skipped, failed
 * fills gave up); r->s holds them as read last. They are read again only
 * when a report is due (4 times a second on a terminal, every 5 s
 * otherwise) and at the end: in between the command waits on the mount
 * (pf_wait), which answers at the run's end, so the command ends within
 * about 10 ms of the last fill without reading the stats file over and
 * over (each read renders every counter). A mount without 'prefetch-wait'
 * is read every 20 ms. The exit status so far; r->ended says whether it
 * ended. */
static int pf_follow(struct pf_run *r)
{
	double t0 = fs_client_now(), last_print = 0, last_progress = t0;
	uint64_t last_have = 0;
	int waits = r->ctl >= 0; /* the mount takes 'prefetch-wait' */

	for (int first = 1;; first = 0) {
		struct pf_stats *s = &r->s;
		double t = fs_client_now();

		if (pf_stop_sig)
			return pf_stopped(r);
		/* the first time, the counters the plan was said from */
		int err = first ? 0 : pf_stats_read(r->mnt, s);

		if (err < 0) {
			if (pf_stop_sig) /* the read was interrupted */
				return pf_stopped(r);
			fs_client_say_lost(r->tty ? "\n" : "", r->mnt, err);
			return PF_EXIT_ERR;
		}
		if (s->run != r->run) {
			r->overrun = 1;
			return PF_OVERRUN;
		}
		r->ended = s->have >= s->want || s->pending == 0;
		if (s->have != last_have) {
			last_have = s->have;
			last_progress = t;
		}
		if (pf_report(r, t - t0, t - last_print))
			last_print = t;
		if (r->ended)
			return PF_EXIT_OK;
		if (t - last_progress > 120) {
			/* a safety net: the mount's fills give up within their retry
			 * budget, so this is not reached while the daemon works */
			fprintf(stderr,
				"\nshardfs: prefetch made no progress for 2 minutes (%" PRIu64
				" fill %s; see the log)\n",
				s->errors, fs_plural(s->errors, "error", "errors"));
			return PF_EXIT_ERR;
		}
		/* until the next report is due, or the run is over */
		while (waits) {
			double left = (r->tty ? 0.25 : 5) - (fs_client_now() - last_print);
			int ms, w;

			if (left <= 0)
				break;
			ms = left * 1000 >= FS_CTL_WAIT_MAX_MS ? FS_CTL_WAIT_MAX_MS
							       : (int)(left * 1000) + 1;
			w = pf_wait(r, ms);
			if (w == 1 || pf_stop_sig)
				break;
			if (w == -ESHUTDOWN) {
				pf_close(r);
				fprintf(stderr,
					"%sshardfs: prefetch: %s is being unmounted ('shardfs "
					"umount'): stopped following the prefetch\n",
					r->tty ? "\n" : "", FS_Q(r->mnt));
				return PF_EXIT_ERR;
			}
			/* -EINTR without a stop asked: a stop and continue
			 * (Ctrl-Z, fg); the wait goes on */
			if (w < 0 && w != -EINTR) {
				waits = 0; /* an older mount (or a failure): poll */
				pf_close(r);
			}
		}
		if (!waits && !pf_stop_sig)
			nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
	}
}

/* 'prefetch-check MS PATH' of argv[i] (i 0: everything): its answer (enum
 * fs_ctl_check) or a negative errno. */
static int pf_check(const struct pf_run *r, int argc, char **argv, int i, int ms)
{
	char rel[PATH_MAX], esc[4 * PATH_MAX], line[4 * PATH_MAX + 32];
	int outside = 0, n, err;
	const char *p =
	    argc > 1 ? fs_client_mount_relative(r->mnt, argv[i], rel, sizeof(rel), &outside) : "";

	err = fs_client_ctl_escape(p, esc, sizeof(esc));
	if (err < 0)
		return err;
	n = snprintf(line, sizeof(line), "prefetch-check %d %s\n", ms, esc);
	if (n < 0 || (size_t)n >= sizeof(line))
		return -ENAMETOOLONG;
	return fs_client_ctl_send(r->ctl, line);
}

/* Another prefetch run began on the mount while this one was followed (a
 * second 'shardfs prefetch'): the counters are of its objects now, not of
 * this command's, and objects both asked for are fetched once, for both.
 * So this command asks the mount about its own PATHs (prefetch-check:
 * whether every byte at or below each is cached, whoever fetched it),
 * waiting on the mount while a prefetch of them still runs, until none
 * does; then it says which PATHs are not cached. The exit status:
 * PF_EXIT_OK when every byte asked for is cached but what did not fit,
 * PF_EXIT_ERR when a PATH is not (or is gone, or the mount is being
 * unmounted, or cannot answer), PF_EXIT_INT after a signal. */
static int pf_join(struct pf_run *r, int argc, char **argv, const char *taken)
{
	int rc = PF_EXIT_OK, unfit = 0;

	printf("%sprefetch: another prefetch began on %s: waiting until the bytes this command "
	       "asked for are cached (objects both asked for are fetched once)\n",
	       r->tty ? "\n" : "", FS_Q(r->mnt));
	fflush(stdout);
	for (int i = argc > 1 ? 1 : 0; i < argc; i++) {
		const char *name = argc > 1 ? FS_Q(argv[i]) : "(all)";
		int c;

		if (!taken[i])
			continue;
		do
			c = pf_check(r, argc, argv, i, FS_CTL_WAIT_MAX_MS);
		while ((c == FS_CTL_CHECK_RUNNING || c == -EINTR) && !pf_stop_sig);
		if (pf_stop_sig) {
			fprintf(stderr,
				"shardfs: prefetch: %s: stopped following; the mount goes on with "
				"the prefetch ('shardfs stats %s' shows it)\n",
				pf_stop_sig == SIGINT ? "interrupted (SIGINT)" : "SIGTERM",
				FS_Q(r->mnt));
			return PF_EXIT_INT;
		}
		if (c == -ESHUTDOWN) {
			fprintf(stderr,
				"shardfs: prefetch: %s is being unmounted ('shardfs umount'): "
				"stopped following the prefetch\n",
				FS_Q(r->mnt));
			return PF_EXIT_ERR;
		}
		if (c == FS_CTL_CHECK_CACHED)
			continue;
		if (c == FS_CTL_CHECK_UNFIT) {
			unfit = 1;
			printf("prefetch: %s: cached but for bytes that did not fit\n", name);
			continue;
		}
		rc = PF_EXIT_ERR;
		if (c == FS_CTL_CHECK_MISSING) {
			fprintf(
			    stderr,
			    "shardfs: prefetch: %s: not every byte is cached (fills failed, see "
			    "the mount's log; or readers' fills evicted them)\n",
			    name);
		} else if (c == -EINVAL) {
			fprintf(
			    stderr,
			    "shardfs: prefetch: %s: cannot tell whether its bytes are cached: the "
			    "mount does not take 'prefetch-check' (an older shardfs?)\n",
			    name);
		} else {
			fprintf(stderr,
				"shardfs: prefetch: %s: cannot tell whether its bytes are "
				"cached: %s\n",
				name,
				c == -ENOENT ? "no longer in the mount"
					     : strerror(c < 0 ? -c : EIO));
		}
	}
	if (rc == PF_EXIT_OK)
		printf("prefetch: done: every byte asked for is cached%s\n",
		       unfit ? " but what did not fit" : "");
	return rc;
}

/* The summary's "did not fit" (unfit bytes; printed as c) against the
 * figure said up front (r->unfit0): when the two read differently, say by
 * how much and why, so that no two figures of one run disagree unexplained.
 * More: the fills are whole (a chunk, or an object's last units), and one
 * that does not fit the room left is skipped whole, not cut to it; that
 * room is left unfilled (the room now, r->s.room, shows it), and readers'
 * fills take room too. Less: room was made meanwhile (a reader's fill, or
 * another mount on the cache directory, evicted; a file was removed). */
static void pf_say_unfit(const struct pf_run *r, uint64_t unfit, const char *c)
{
	char a[32], up[48], d[32], e[32];

	fs_human_bytes(r->unfit0, a, sizeof(a));
	if (strcmp(a, c) == 0)
		return;
	snprintf(up, sizeof(up), "%s%s", r->unfit0 ? "about " : "", r->unfit0 ? a : "none");
	fs_human_bytes(unfit > r->unfit0 ? unfit - r->unfit0 : r->unfit0 - unfit, d, sizeof(d));
	fs_human_bytes(r->s.room, e, sizeof(e));
	if (unfit > r->unfit0)
		printf(" (said up front: %s; %s more, as a fill is whole, a chunk of "
		       "--chunk-size or an object's last units, and one that does not fit the "
		       "room left is skipped whole; readers' fills take room too; the cache's "
		       "room now: %s)",
		       up, d, e);
	else
		printf(" (said up front: %s; %s less, as room was made meanwhile: evictions "
		       "for readers' fills or by another mount on the cache directory)",
		       up, d);
}

/* The summary: every byte asked is cached already, fetched now (by this
 * mount, or by another mount on the same cache directory meanwhile),
 * skipped because it did not fit, or missing (failed). The exit status. */
static int pf_summary(const struct pf_run *r)
{
	char a[32], b[32], c[32], d[32], e[32];
	uint64_t want = r->s.want, have = r->s.have < want ? r->s.have : want;
	uint64_t before = r->s.before;
	uint64_t unfit = r->s.unfit, got, missing, own, other;

	if (before > have)
		before = have; /* evicted meanwhile */
	got = have - before;
	/* got is what became cached meanwhile, whoever fetched it: this
	 * mount's own fetch is its bytes_fetched delta (which also counts its
	 * readers' fetches of other objects: never more than got); the rest
	 * was fetched by another mount that shares the cache directory */
	own = got;
	if (r->have_s0 && r->s.fetched >= r->s0.fetched && r->s.fetched - r->s0.fetched < got)
		own = r->s.fetched - r->s0.fetched;
	other = got - own;
	if (unfit > want - have)
		unfit = want - have;
	missing = want - have - unfit;
	fs_human_bytes(own, a, sizeof(a));
	fs_human_bytes(before, b, sizeof(b));
	fs_human_bytes(unfit, c, sizeof(c));
	if (r->s.local && !got && !unfit && have == want) {
		printf("prefetch: done: nothing fetched, %s read in place (a local source)\n", b);
		return PF_EXIT_OK;
	}
	printf("prefetch: done: %s fetched", a);
	if (other) {
		fs_human_bytes(other, e, sizeof(e));
		printf(", %s fetched meanwhile by another mount on the cache directory", e);
	}
	printf(", %s cached already, %s did not fit", b, c);
	pf_say_unfit(r, unfit, c);
	if (missing) {
		fs_human_bytes(missing, d, sizeof(d));
		uint64_t failed = r->s.errors - (r->have_s0 ? r->s0.errors : 0);

		printf(", %s not cached (%" PRIu64 " %s failed meanwhile, see the mount's log; "
		       "or readers' fills evicted them)\n",
		       d, failed, fs_plural(failed, "fill", "fills"));
		return PF_EXIT_ERR;
	}
	printf("\n");
	return PF_EXIT_OK;
}

int fs_prefetch_main(int argc, char **argv)
{
	struct pf_run r = {.tty = isatty(STDOUT_FILENO), .ctl = -1};
	struct sigaction sa = {.sa_handler = pf_on_signal};
	struct fs_mnt m;
	char path[PATH_MAX + 32], *mnt, *taken;
	int fd, rc, sent, f, err = 0;

	rc = fs_client_usage(
	    &argc, &argv, "prefetch MOUNTPOINT [PATH...]",
	    "Fill the cache of a running mount with the objects at or below each PATH\n"
	    "(a shard, a directory, a file; none: everything) and follow the progress.\n"
	    "A PATH inside a shard's member directory prefetches that whole shard.\n"
	    "A prefetch fills only the room the cache has (--cache-size, the disk's\n"
	    "reserve) and never evicts: it says up front how much fits, fetches that,\n"
	    "and ends with what it fetched, what was cached already and what did not fit.\n\n"
	    "Ctrl-C stops following (the mount goes on with the prefetch); 'shardfs\n"
	    "umount' of the mount makes it stop following too.\n\n"
	    "Another prefetch begun on the mount meanwhile fetches what both ask for once;\n"
	    "this one then waits until every byte of its own PATHs is cached, whoever\n"
	    "fetched it, and names each PATH that is not.\n\n"
	    "exit status: 0 when every byte asked for is cached as it exits, but bytes\n"
	    "that did not fit (said up front and at the end: no error); 1 when a PATH is\n"
	    "not in the mount, the mount went away or is being unmounted, or bytes that\n"
	    "fit are not cached (fills failed: see the mount's log; or readers' fills\n"
	    "evicted them); 130 after Ctrl-C or SIGTERM.\n",
	    1);
	if (rc >= 0)
		return rc;
	if (fs_client_mount(argv[0], &m))
		return 1;
	mnt = strdup(m.dir);
	taken = calloc((size_t)argc, 1);
	if (!mnt || !taken) {
		fprintf(stderr, "shardfs: %s\n", strerror(ENOMEM));
		rc = 1;
		goto out;
	}
	r.mnt = mnt;
	snprintf(path, sizeof(path), "%s/.shardfs/control", mnt);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fs_client_say_not_usable(argv[0], &m, errno);
		rc = 1;
		goto out;
	}
	/* every PATH checked first: a typo starts nothing */
	if (pf_check_paths(mnt, argc, argv) != PF_EXIT_OK) {
		close(fd);
		rc = PF_EXIT_ERR;
		goto out;
	}
	/* what had been fetched: the rate of this run */
	r.have_s0 = pf_stats_read(mnt, &r.s0) == 0;
	/* a run of its own: the counters followed are of the objects this
	 * command names, not of earlier prefetches' */
	if (fs_client_ctl_send(fd, "prefetch-start\n") < 0) {
		fprintf(stderr,
			"shardfs: prefetch: %s: the mount does not take 'prefetch-start' "
			"(an older shardfs?)\n",
			FS_Q(mnt));
		close(fd);
		rc = PF_EXIT_ERR;
		goto out;
	}
	rc = pf_send(fd, mnt, argc, argv, &sent, taken);
	/* kept open for the waits: 'shardfs umount' finds this command by it
	 * and asks it to leave (umount-notice) */
	r.ctl = fd;
	if (!sent || (err = pf_stats_read(mnt, &r.s)) < 0) {
		/* none sent: the mount's progress would be of other prefetches */
		if (sent)
			fs_client_say_lost("", mnt, err);
		rc = sent ? PF_EXIT_ERR : rc;
		goto out;
	}
	r.run = r.s.run;
	r.unfit0 = pf_say_plan(&r.s, r.have_s0 ? r.s0.room : r.s.room);
	/* Ctrl-C or SIGTERM: stop following and say so (pf_stopped) */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	f = pf_follow(&r);
	if (f == PF_OVERRUN) {
		/* the waits' control file, closed when the mount refused one */
		if (r.ctl < 0)
			r.ctl = open(path, O_RDONLY | O_CLOEXEC);
		f = pf_join(&r, argc, argv, taken);
		if (f != PF_EXIT_OK)
			rc = f;
		goto out;
	}
	if (f == PF_EXIT_INT) {
		rc = f;
		goto out;
	}
	if (f != PF_EXIT_OK)
		rc = PF_EXIT_ERR;
	if (r.tty)
		printf("\n");
	if (r.ended && pf_summary(&r) != PF_EXIT_OK)
		rc = PF_EXIT_ERR;
out:
	/* one check for every failure (a PATH refused, fills failed, a joined
	 * run's PATH not cached): a cache directory removed under the mount is
	 * the cause the mount's log can no longer tell */
	if (rc == PF_EXIT_ERR && mnt)
		fs_client_say_cache_gone("prefetch", mnt);
	pf_close(&r);
	free(taken);
	free(mnt);
	return rc;
}
