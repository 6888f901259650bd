/*
 * cachetier_check.c — the unit store's checks of units before a read
 * serves them (cachetier_read.c asks, cachetier__units_check): a unit this
 * process does not trust is read back and its CRC32C compared with its
 * fill's, the data file must still hold the read's units (a cut) and have
 * no hole in them (a punch); the watch of each data file (units_watch,
 * cachetier_watch.c) says which units this process may trust; a damaged
 * unit is made empty and fetched again (cachetier__unit_corrupt).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cachetier_i.h"

/* Unit c of f (UNIT_VALID) is damaged (its bytes fail their CRC32C, or the
 * data file ends before it): counted, and made empty in the state file
 * (the map is written again without it) and here, so the next read of it
 * fetches it again. ct->lock held; f->lock taken (its pins, its state). */
void cachetier__unit_corrupt(struct cachetier *ct, struct ct_file *f, uint32_t c)
{
	uint64_t len = cachetier__unit_len(f, c);

	/* no read pins it without ct->lock from now on (those that did read
	 * on, as pinned ones do) */
	atomic_fetch_and(&f->fp[c], ~FP_ARMED);
	if (cachetier__st_set(f, c, 0)) /* cleared before its read lock goes */
		cachetier__usage_add(ct, -(int64_t)len);
	disk_mutex_lock(&f->lock);
	if (f->held[c]) { /* pinned, or idle */
		cachetier__unit_unlock(f, c);
		ct->unit_read_locks++;
		f->held[c] = 0;
		if (f->pins[c] == 0)
			ct->idle_units--;
	}
	cachetier__unit_set(f, c, UNIT_EMPTY);
	f->dirty++; /* the map batch: under f->lock */
	disk_mutex_unlock(&f->lock);
	f->seen[c] = 0;
	f->bytes -= len;
	ct->used -= len;
	cachetier__ev_mark_units(ct, f, c, c + 1);
}

/* Units of [c0, c1) of f (valid: wholly written) that a hole in the data
 * file now overlaps (a punch under the running mount would read as zeros):
 * tag 2 (failed). One lseek(SEEK_HOLE) for a range without holes; size is
 * the data file's size (past it: the cut, which the caller sees). */
static void holes_check(struct ct_file *f, uint32_t c0, uint32_t c1, uint64_t size, uint8_t *tag)
{
	uint64_t end = cachetier__unit_off(f, c1 - 1) + cachetier__unit_len(f, c1 - 1),
		 pos = cachetier__unit_off(f, c0);

	if (end > size)
		end = size;
	while (pos < end) {
		off_t h = lseek(f->datafd, (off_t)pos, SEEK_HOLE), d;

		if (h < 0 || (uint64_t)h >= end)
			return; /* none (or no SEEK_HOLE here: the CRCs are the check) */
		d = lseek(f->datafd, h, SEEK_DATA);
		if (d < 0 || (uint64_t)d > end)
			d = (off_t)end;
		for (uint64_t c = (uint64_t)h / f->unit_bytes;
		     c < c1 && c * f->unit_bytes < (uint64_t)d; c++)
			if (c >= c0)
				tag[c - c0] = 2;
		pos = (uint64_t)d;
	}
}

/* The live check is on unless SHARDFS_BENCH_NO_LIVE_CHECK is set in the
 * environment (tests/bench/livecheck_bench.py measures its cost against
 * the same reads without it; not an option: nobody should turn it off). */
static int live_check_off;
static pthread_once_t live_check_once = PTHREAD_ONCE_INIT;

static void live_check_init(void)
{
	const char *e = getenv("SHARDFS_BENCH_NO_LIVE_CHECK");

	live_check_off = e && *e && strcmp(e, "0") != 0;
}

int cachetier__live_check_off(void)
{
	pthread_once(&live_check_once, live_check_init);
	return live_check_off;
}

/* Units of f this process trusts (seen 1, 3) are trusted only while nothing
 * else changed its data file: the file's inode is watched
 * (cachetier_watch.c; an event for a write, a truncation, a punched hole or
 * any fallocate, queued before the call that makes it returns). Where it
 * can be had the watch is fanotify's, made when f is opened, before any
 * fill of it (units_watch_start): its events say who wrote, and this
 * process's own writes (its fills, whose units carry the CRC32C of the
 * bytes written, and its evictions' punches, whose units are emptied
 * first) are not changes, so a unit filled here is trusted from its fill
 * (seen 3) and the fills of a file do not send the units readers trust
 * back to a check. Else it is inotify's, added at the first check of f,
 * before any of its units can be trusted; inotify does not say who wrote,
 * so a unit filled here is checked at its first read (seen 2), and while
 * fills of f run the units a read serves are checked again (a pread and a
 * CRC each). When the watch's change count moved since the last look,
 * every unit this process trusts goes back to "check at its next read"
 * (seen 2) and f->wgen moves, so a check that began before does not mark
 * its units trusted. Once nothing writes, a read costs one read() of the
 * watch's fd that finds nothing. No watch to be had (fs.fanotify's marks
 * limit and then fs.inotify.max_user_watches): every read checks every
 * unit it serves (logged once). ct->lock held; takes the watch's own lock
 * (never held across ct->lock). */
static void units_watch(struct cachetier *ct, struct ct_file *f)
{
	uint64_t ev;

	if (!f->wrec && !f->wfail) {
		int err = ct->watch
			      ? cachetier__watch_add(ct->watch, f->datafd, &f->wrec, &f->wevents)
			      : -ENOSYS;

		if (err == 0) {
			f->w = ct->watch;
			return;
		}
		f->wfail = 1;
		if (!atomic_exchange(&ct->watch_fail_noted, 1))
			backend_log(ct->be, BACKEND_LOG_WARN,
				    "cache %s: data/%s (%s) gets no inotify watch (%s): "
				    "every read of its units checks their CRC32C (raise "
				    "fs.inotify.max_user_watches; others like it are not logged)",
				    ct->dir, f->hash, f->key, strerror(-err));
	}
	if (!f->wrec)
		return;
	ev = cachetier__watch_events(f->w, f->wrec);
	if (ev == f->wevents)
		return;
	f->wevents = ev;
	f->wgen++;
	/* under f->lock: a commit of landed units (the fill writer's, under
	 * f->lock alone: cachetier_run.c) sets a unit's seen and arms it
	 * either before this (then revoked here) or after (then it finds 4) */
	disk_mutex_lock(&f->lock);
	for (uint32_t c = 0; c < f->nunits; c++) {
		if (f->seen[c] == 1 || f->seen[c] == 3) {
			f->seen[c] = 2;
			atomic_fetch_and(&f->fp[c], ~FP_ARMED);
		} else if (f->ust[c] == UNIT_FILLING) {
			f->seen[c] = 4; /* its pwrite may be in: not trusted as filled */
		}
	}
	/* after the units' revocation: a read without ct->lock that sees this
	 * count sees them revoked (fast_begin) */
	atomic_store_explicit(&f->wev_fast, ev, memory_order_release);
	disk_mutex_unlock(&f->lock);
}

void cachetier__units_watch_start(struct cachetier *ct, struct ct_file *f)
{
	int err;

	const char *e = getenv("SHARDFS_TEST_WATCH_INOTIFY"); /* tests: today's rule */

	if (!ct->watch || cachetier__live_check_off() || f->wrec || (e && *e && strcmp(e, "0")))
		return;
	err = cachetier__watch_add_own(ct->watch, f->datafd, &f->wrec, &f->wevents);
	if (err == 0) {
		f->w = ct->watch;
		f->wown = 1;
		atomic_fetch_add(&ct->watch_own, 1);
		return;
	}
	if (!atomic_exchange(&ct->watch_own_noted, 1))
		backend_log(
		    ct->be, BACKEND_LOG_INFO,
		    "cache %s: data/%s gets no fanotify watch (%s: a kernel before 5.13, "
		    "no permission, a filesystem without file handles, or "
		    "fs.fanotify.max_user_marks reached): it is watched with inotify, whose "
		    "events do not say who wrote, so this mount's own fills send its units "
		    "back to a CRC32C check at their next read (others like it are not "
		    "logged)",
		    ct->dir, f->hash, strerror(-err));
}

uint8_t cachetier__seen_filled(const struct ct_file *f, uint32_t u)
{
	return f->wown && f->seen[u] != 4 ? 3 : 2;
}

/* Unit c of f is served by a read here (its check passed, or it was
 * trusted): filled here and trusted (3), it is now as checked (1); the
 * first unit served here is a weak ETag's anchor (cachetier_weak.c). ct->lock
 * held. */
static void unit_served(struct ct_file *f, uint32_t c)
{
	if (f->seen[c] == 3)
		f->seen[c] = 1;
	if (!f->anchor_set && f->seen[c] == 1) {
		/* what a weak ETag's later fills are compared with */
		f->anchor_set = 1;
		f->anchor = c;
		f->anchor_crc = cachetier__st_crc(f, c);
		f->probed = f->ufills;
	}
}

/* Before a read serves units [c0, c1) of f (all UNIT_VALID, pinned and
 * read-locked): each unit this process does not trust (units_watch: not
 * checked here since its data file last changed, nor filled here under a
 * watch that tells our writes from others') matches the CRC32C its fill
 * recorded (a pread and a CRC of the unit), and, once per read for the
 * whole range, the data file still holds them (one fstat: a file cut
 * under the running mount would otherwise make the reply short) and has
 * no hole in them (one lseek: a punch would read as zeros, which an
 * all-zero unit's CRC would not tell). The fstat and the lseek are made
 * only when a unit of the range is checked, or when nothing watches the
 * file (no watch, or the watch turned off): a cut or a punch by another
 * process since a unit was last checked or filled is an event that
 * units_watch has just read, which puts every trusted unit back to
 * "check" (seen 2), so a read whose units are all trusted (seen 1 or 3)
 * needs neither, and is served with
 * ct->lock held throughout (no file I/O). Units that fail are made
 * empty (cachetier__unit_corrupt). Returns how many failed or are no longer valid
 * (another reader here found them damaged meanwhile), or -errno. ct->lock held
 * on entry and return; dropped around the file I/O (the pins and read
 * locks keep the units from eviction and refill meanwhile). */
int cachetier__units_check(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1)
{
	uint8_t tagbuf[64], *tag = tagbuf; /* per unit: 1 check its CRC, 2 failed */
	unsigned char *buf = NULL;
	uint32_t checks = 0, gen;
	int bad = 0, stale = 0, err = 0, live;
	struct stat st;

	if (c1 - c0 > sizeof(tagbuf) && !(tag = calloc(c1 - c0, 1)))
		return -ENOMEM;
	if (tag == tagbuf)
		memset(tagbuf, 0, sizeof(tagbuf));
	live = !cachetier__live_check_off();
	if (live)
		units_watch(ct,
			    f); /* before the preads below: a change after it is seen next time */
	gen = f->wgen;
	for (uint32_t c = c0; c < c1; c++) {
		if (live ? (f->seen[c] != 1 && f->seen[c] != 3) || f->wfail : !f->seen[c]) {
			tag[c - c0] = 1;
			checks++;
		}
	}
	if (live && !checks) { /* all trusted, the file watched (!wfail): unchanged */
		for (uint32_t c = c0; c < c1; c++)
			unit_served(f, c);
		if (tag != tagbuf)
			free(tag);
		return 0;
	}
	atomic_fetch_add(&ct->units_checked, checks);
	atomic_fetch_add_explicit(&ct->read_file_checks, 1, memory_order_relaxed);
	disk_mutex_unlock(&ct->lock);
	if (fstat(f->datafd, &st) < 0)
		err = -errno;
	if (err == 0)
		holes_check(f, c0, c1, (uint64_t)st.st_size, tag);
	if (err == 0 && checks && !(buf = malloc(f->unit_bytes)))
		err = -ENOMEM;
	for (uint32_t c = c0; c < c1 && err == 0; c++) {
		uint64_t len = cachetier__unit_len(f, c);

		if ((uint64_t)st.st_size < cachetier__unit_off(f, c) + len) {
			tag[c - c0] = 2; /* cut: the read would come back short */
		} else if (tag[c - c0] == 1) {
			int e =
			    disk_pread_all(f->datafd, buf, (size_t)len, cachetier__unit_off(f, c));

			if (e < 0 && e != -EIO)
				err = e;
			else if (e < 0 ||
				 disk_crc32c_update(0, buf, (size_t)len) != cachetier__st_crc(f, c))
				tag[c - c0] = 2;
		}
	}
	free(buf);
	cachetier__lock(ct);
	for (uint32_t c = c0; c < c1 && err == 0; c++) {
		if (f->ust[c] != UNIT_VALID) {
			/* another reader here found it damaged meanwhile (and
			 * counted it) */
			stale++;
		} else if (tag[c - c0] == 2) {
			cachetier__unit_corrupt(ct, f, c);
			bad++;
		} else if (tag[c - c0] == 1) {
			if (!f->seen[c])
				ct->peer_units++;
			/* trusted from now on unless the file changed since
			 * units_watch looked (then: checked again) */
			f->seen[c] = gen == f->wgen && !f->wfail ? 1 : 2;
			unit_served(f, c);
		} else {
			unit_served(f, c); /* trusted, not checked */
		}
	}
	if (tag != tagbuf)
		free(tag);
	if (err == 0 && bad &&
	    (uint64_t)st.st_size <
		cachetier__unit_off(f, c1 - 1) + cachetier__unit_len(f, c1 - 1)) {
		/* cut: every unit past the cut is gone too, also those a later
		 * fill's pwrite would turn into a hole before them */
		uint32_t more = 0;

		for (uint32_t c = (uint32_t)((uint64_t)st.st_size / f->unit_bytes); c < f->nunits;
		     c++) {
			if ((c < c0 || c >= c1) && f->ust[c] == UNIT_VALID) {
				cachetier__unit_corrupt(ct, f, c);
				more++;
			}
		}
		cachetier__note_corrupt(ct, f->hash, f->key, (uint32_t)bad + more,
					"the data file was cut", "fetched again");
	} else if (err == 0 && bad) {
		cachetier__note_corrupt(ct, f->hash, f->key, (uint32_t)bad,
					"a hole in them or their bytes fail their CRC32C",
					"fetched again");
	}
	return err < 0 ? err : bad + stale;
}
