/*
 * cachetier_evict.c — capacity of the cache tier: how many bytes the
 * cache directory holds, and eviction of least recently used units when a
 * fill needs room.
 *
 * Usage is the directory's: the counter in CACHE_DIR/v1/usage that every
 * process sharing the directory (any source) adds its fills and decoded
 * copies to and takes its evictions from (cachetier_share.c), plus this
 * process's fills in flight (ct->reserved: a unit leaves it as it lands
 * or is committed, in one step with its entry in the counter; the sums
 * read under ct->acct_lock, cachetier__acct_get), plus bytes it is evicting
 * beyond two eviction batches (ct->evicting: taken off the counter when
 * chosen, so no two evictions choose them, but on disk until punched; a
 * fill that fits once they are gone counts up to two batches of them as
 * gone, room_over, and waits only for the rest). A fill reserves its bytes, then, while usage
 * exceeds cfg.cache_size_bytes or the filesystem's free space (statvfs)
 * would drop below cfg.min_free_bytes, evicts unit by unit, least
 * recently read first, across objects: a unit's last use is this
 * process's last read or fill of it (ct_file.uatime), and for a unit this
 * process never touched its object's last read by any process (the state
 * file) or, for objects not open here, their map's mtime. Units ahead
 * of their readers (unit_ahead: filled ahead and not read since, or past
 * where a sequential reader is) go last, the latest used first; a
 * prefetch fill (spare_ahead) never evicts them, and evicts at all only while the units filled
 * ahead stay within the rules' share (ahead_share: half the cache), so a reader of an object bigger
 * than the cache evicts what it read, never what is ahead of it, and a shard fetched ahead of it
 * never evicts the shard being read. With reading plans (cachetier_plan.c's marks) the order has
 * classes: units no plan needs (read by their plan, or fetched between planned extents) first,
 * least recently used first; then the units no plan speaks of, as above; then units a plan needs,
 * the furthest next use first (Belady's rule); a prefetch fill evicts a planned unit only when that
 * unit is needed later than its own. An eviction takes one object's units in a batch (below),
 * planned units only while they come before every other object's first unit. Cost: the victim comes
 * from the order kept as units change (cachetier_evheap.c: O(log n) in the objects, plus the
 * units marked since the last pick), and evict() takes its object's units from that object's own
 * kept order (cachetier__ev_walk_next: O(log units) a unit looked at, about two a unit evicted;
 * no sort, no look at its other units; the sort it replaced is kept for tests, evict_sorted); the
 * units taken are punched a span at a time, joined across short gaps that hold nothing (join_gaps),
 * on the puncher's thread (cachetier_punch.c). A unit goes when no process pins or fills it
 * (cachetier_fill.c: the unit's write lock on auxfd). Objects of earlier mounts, other processes
 * and other sources are opened for it from their maps. When nothing is left to evict, the data
 * directories are scanned again (at most once a second) for objects other processes added. Decoded
 * copies are evicted too, least recently used (evict_dec), after the units no plan needs, before
 * any unit no plan speaks of read more recently and before units a plan needs. Units fetched only
 * because they lay between planned extents of one request (ct_file.gap,
 * cachetier_obj_prefetch_span), not read since and not marked by a plan, count as units no plan
 * needs, and are never spared as ahead.
 *
 * Full cache: when nothing evictable is left (every valid unit pinned by
 * a reader), the fill goes ahead into its file anyway and the cache runs
 * over its limit; so does a fill bigger than the cache (a chunk of
 * --chunk-size in a smaller one). The next fill evicts it back down, and
 * with none coming the flusher does, within a second of the read ending
 * or the fill being done (cachetier_fill.c, flush_over_limit). A read
 * never fails because the cache is full. With readers pinning at most P
 * bytes, the directory stays within max(limit, P) + one chunk per fill
 * thread of each process (+ room_over while punches run) while they read,
 * and within the limit once they are done.
 *
 * The scan of the directory at open (and the rescan when nothing is left
 * to evict) is cachetier_scan.c.
 *
 * Threads: make_room runs on fill workers with ct->lock held and drops it
 * around file operations (lock order in cachetier_i.h); an eviction's
 * punch runs on the puncher (cachetier_punch.c), or on the evicting
 * thread when the puncher's queue is full.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cachetier_evkey.h"

int64_t cachetier__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t cachetier__cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t cachetier__plan_near(const struct cachetier *ct, const struct ct_file *f, uint32_t c)
{
	return near_at(f, c, atomic_load_explicit(&ct->plan_now, memory_order_relaxed));
}

/* May a unit of key k go in the eviction that took the first unit of its
 * object, when another object's first is 'next'? Within the classes of
 * units no plan needs or speaks of, an eviction takes its object's units
 * of classes up to next's (a batch: one map write for many units); units
 * a plan needs only up to next itself (Belady's order across objects). */
static int key_within(struct ev_key k, struct ev_key next)
{
	if (k.cls != next.cls)
		return k.cls < next.cls;
	return k.cls != EV_PLANNED || !key_less(next, k);
}

struct ev_cand {
	struct ev_key k;
	uint32_t c;
};

/* Eviction order; unit order among equals (the first is taken first). */
static int cand_cmp(const void *pa, const void *pb)
{
	const struct ev_cand *a = pa, *b = pb;

	if (key_less(a->k, b->k))
		return -1;
	if (key_less(b->k, a->k))
		return 1;
	return a->c < b->c ? -1 : a->c > b->c;
}

static int u32_cmp(const void *pa, const void *pb)
{
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;

	return a < b ? -1 : a > b;
}

/* Take units b[0..nb) of f (live, ct->lock held) for an eviction: sorted,
 * each run of adjacent ones write-locked on auxfd with one fcntl (a run
 * that conflicts: unit by unit), and each one locked whose state byte this
 * call clears (not another process's eviction first) is EVICTING: appended
 * to out, its bytes added to *freed, *named set when a map may name it
 * (ST_NAMED). Read locks this process holds idle on stfd (no read pins
 * the units: cachetier_read.c) go first, a run in one fcntl, under
 * ct->lock, so no read of this process takes them again meanwhile. A unit
 * another process holds posts a release request (one per call): that
 * process drops its idle locks on f at its next read or flusher pass, and
 * a later eviction here takes them (skipped meanwhile, as a pinned unit).
 * Returns how many it took. */
static uint32_t take(struct cachetier *ct, struct ct_file *f, uint32_t *b, uint32_t nb,
		     uint32_t *out, uint64_t *freed, int *named)
{
	uint32_t n = 0;
	int wanted = 0;

	qsort(b, nb, sizeof(*b), u32_cmp);
	disk_mutex_lock(&f->lock); /* its pins and idle read locks (cachetier_read.c) */
	for (uint32_t i = 0; i < nb;) {
		uint32_t k = i + 1;
		int run;

		while (k < nb && b[k] == b[k - 1] + 1)
			k++;
		cachetier__lazy_drop(ct, f, b[i], b[k - 1] + 1);
		run = cachetier__ofd_lock_n(f->auxfd, F_WRLCK, LK_UNIT(b[i]), k - i, 0) == 0;
		for (; i < k; i++) {
			uint32_t c = b[i];
			uint64_t len = cachetier__unit_len(f, c);
			int old;

			if (f->held[c])
				continue; /* a read here pins it without ct->lock
					   * (cachetier_read.c): as a pinned unit */
			if (!run && cachetier__ofd_lock(f->auxfd, F_WRLCK, LK_UNIT(c), 0) < 0) {
				wanted = 1;
				continue; /* pinned or being filled by another process */
			}
			old = cachetier__st_clear(f, c);
			if (!old) {
				cachetier__ofd_lock(f->auxfd, F_UNLCK, LK_UNIT(c), 0);
				continue; /* another process evicted it first */
			}
			*named |= old == ST_NAMED;
			if (f->ust[c] == UNIT_VALID) {
				f->bytes -= len;
				ct->used -= len;
			}
			cachetier__unit_set(f, c, UNIT_EVICTING);
			/* whoever fills it next: checked if not us (here, not at
			 * the punch's end, which takes no ct->lock) */
			f->seen[c] = 0;
			/* gone: whoever fills it next says whether a plan needs it
			 * (a plan's mark stays) */
			atomic_compare_exchange_strong(&f->nu[c], &(uint32_t){CT_NU_DONE},
						       CT_NU_NONE);
			__atomic_store_n(&f->fill_ns[c], 0, __ATOMIC_RELAXED);
			out[n++] = c;
			*freed += len;
		}
	}
	disk_mutex_unlock(&f->lock);
	if (wanted) {
		cachetier__want_post(ct, f);
		ct->lock_requests++;
	}
	return n;
}

/* Most units that hold nothing a punch spans between two runs of an
 * eviction (join_gaps): 2 MiB of 64 KiB units. */
#define EV_GAP_MAX 32u

/* Join the runs of units list[0..n) of f (sorted, taken: write-locked on
 * auxfd, EVICTING) across each gap of at most EV_GAP_MAX units that hold
 * nothing (state byte clear, EMPTY here, no reader waiting), so that one
 * punch covers both runs: a punch over a hole frees nothing and costs
 * little, a punch call costs about 17 us beyond the pages it frees (a shuffled
 * epoch's evictions take runs of two or three units). A gap is
 * write-locked on auxfd with one fcntl, as the units taken are (no
 * process fills it meanwhile, nor this one: its fills lock on stfd) and
 * its state bytes read again under the lock (a fill of another process
 * that ended before the lock set them: not joined); its units become
 * EVICTING (this process's readers wait for the punch's end, as for the
 * units taken) and are written to gaps[]. Returns how many. ct->lock
 * held; f->lock taken for the states. */
static uint32_t join_gaps(struct ct_file *f, const uint32_t *list, uint32_t n, uint32_t *gaps)
{
	uint32_t ng = 0;

	for (uint32_t i = 0; i + 1 < n; i++) {
		uint32_t a = list[i] + 1, b = list[i + 1], c;

		if (b == a || b - a > EV_GAP_MAX)
			continue;
		for (c = a; c < b && f->ust[c] == UNIT_EMPTY && f->pins[c] == 0 &&
			    !cachetier__st_get(f, c);
		     c++)
			;
		if (c < b || cachetier__ofd_lock_n(f->auxfd, F_WRLCK, LK_UNIT(a), b - a, 0) < 0)
			continue;
		for (c = a; c < b && !cachetier__st_get(f, c); c++)
			;
		if (c < b) { /* filled by another process before the lock */
			cachetier__ofd_lock_n(f->auxfd, F_UNLCK, LK_UNIT(a), b - a, 0);
			continue;
		}
		disk_mutex_lock(&f->lock); /* the states (cachetier__unit_set) */
		for (c = a; c < b; c++) {
			cachetier__unit_set(f, c, UNIT_EVICTING);
			gaps[ng++] = c;
		}
		disk_mutex_unlock(&f->lock);
	}
	return ng;
}

/* Merge sorted a[0..na) and sorted b[0..nb) (no unit in both) into out. */
static void merge_units(const uint32_t *a, uint32_t na, const uint32_t *b, uint32_t nb,
			uint32_t *out)
{
	uint32_t i = 0, j = 0, k = 0;

	while (i < na || j < nb)
		out[k++] = j == nb || (i < na && a[i] < b[j]) ? a[i++] : b[j++];
}

/* An object not live in this process (of an earlier mount, another
 * process or source) is opened from its map first: 1 to go on evicting
 * it unit by unit, 0 when it cannot be now (marked for this round, or
 * with nothing this process can evict). ct->lock held. */
static int evict_live(struct cachetier *ct, struct ct_file *f)
{
	int err;

	if (f->live)
		return 1;
	err = cachetier__file_open_mapped(ct, f);
	cachetier__ev_mark(ct, f); /* its units now (cachetier_evheap.c) */
	f->evict_round = ct->evict_round;
	if (err == -EBUSY)
		return 0; /* a reader is loading it: not this round */
	if (err < 0 || !f->live) {
		f->bytes = 0; /* nothing this process can evict */
		return 0;
	}
	if (f->opening || f->evicting)
		return 0;
	f->evict_round = 0; /* live now: unit by unit */
	return 1;
}

/* f's evictable units in eviction order into cand (room for f->nunits):
 * the *nw within next (key_within) first, sorted once (picking the first
 * of all units for each unit evicted cost units x evicted key comparisons
 * under ct->lock), then the *nrest others, not sorted: within keys come
 * first in eviction order, and past them an eviction takes a unit only
 * while it has taken none (its first ones held by another process), so
 * the rest is sorted only then (a planned epoch's eviction takes a few
 * units of an object holding hundreds). ct->lock held. */
static void evict_cands(struct ct_file *f, const struct ev_ctx *x, struct ev_key next,
			struct ev_cand *cand, uint32_t *nw, uint32_t *nrest)
{
	int64_t fat = file_at(f);

	*nw = *nrest = 0;
	for (uint32_t c = st_next(f, 0); c < f->nunits; c = st_next(f, c + 1)) {
		struct ev_cand e;

		if (!unit_evictable(f, c, x))
			continue;
		e = (struct ev_cand){unit_key(f, c, fat, x), c};
		if (key_within(e.k, next))
			cand[(*nw)++] = e;
		else
			cand[f->nunits - 1 - (*nrest)++] = e;
	}
	memmove(cand + *nw, cand + f->nunits - *nrest, *nrest * sizeof(*cand));
	qsort(cand, *nw, sizeof(*cand), cand_cmp);
}

/* Tests (cachetier_evict_verify): f's evictable units in the order
 * evict() took them in before it kept them in order (evict_cands, then
 * the rest sorted), into a new array (*n of them; NULL: no memory);
 * counts the units it looked at. ct->lock held. */
static struct ev_cand *evict_sorted(struct cachetier *ct, struct ct_file *f, const struct ev_ctx *x,
				    struct ev_key next, uint32_t *n)
{
	struct ev_cand *cand = malloc((size_t)(f->nunits ? f->nunits : 1) * sizeof(*cand));
	uint32_t nw, nrest;

	*n = 0;
	if (!cand)
		return NULL;
	for (uint32_t c = st_next(f, 0); c < f->nunits; c = st_next(f, c + 1))
		ct->ev.sorted++;
	evict_cands(f, x, next, cand, &nw, &nrest);
	qsort(cand + nw, nrest, sizeof(*cand), cand_cmp);
	*n = nw + nrest;
	return cand;
}

/* Tests: the units evict() walked (walk[0..n), their keys; all: it
 * found none left after them) against the sort's (cand[0..ncand), taken
 * before the walk): counts the lists compared and those that differ. */
static void evict_check(struct cachetier *ct, const struct ct_file *f, const struct ev_cand *walk,
			uint32_t n, int all, const struct ev_cand *cand, uint32_t ncand)
{
	uint32_t i = 0;

	while (i < n && i < ncand && walk[i].c == cand[i].c && !key_less(walk[i].k, cand[i].k) &&
	       !key_less(cand[i].k, walk[i].k))
		i++;
	ct->ev.lists++;
	if (i < n || (all && ncand != n)) {
		ct->ev.list_mismatch++;
		fprintf(stderr,
			"evict: %s: unit %u of the walk (%u units%s) is %u {%d %lld}, the sort's "
			"(%u) %u {%d %lld}\n",
			f->hash, i, n, all ? ", none left" : "", i < n ? walk[i].c : UINT32_MAX,
			i < n ? walk[i].k.cls : -1, i < n ? (long long)walk[i].k.at : 0LL, ncand,
			i < ncand ? cand[i].c : UINT32_MAX, i < ncand ? cand[i].k.cls : -1,
			i < ncand ? (long long)cand[i].k.at : 0LL);
	}
}

/* A map may name a unit of an eviction of f: it goes first and durably,
 * so no map claims a punched unit (LK_MAP: a flusher of any process
 * snapshots the state after this; map_encode names no unit whose byte is
 * clear). Units never named (younger than the durability delay, ST_VALID)
 * need none of it: no map names them and none can. 1 when there was a
 * map. ct->lock not held. */
static int evict_unmap(struct ct_file *f)
{
	char name[24];
	int had_map;

	disk_mutex_lock(&f->maplock);
	/* bounded (LK_MAP_WAIT_MS): the map goes whether or not LK_MAP could
	 * be had; without it only another process's map write racing this
	 * one could claim a punched unit */
	cachetier__ofd_lock(f->stfd, F_WRLCK, LK_MAP, LK_MAP_WAIT_MS);
	snprintf(name, sizeof(name), "%s.map", f->hash);
	had_map = unlinkat(f->dirfd, name, 0) == 0;
	if (had_map)
		fsync(f->dirfd);
	cachetier__ofd_lock(f->stfd, F_UNLCK, LK_MAP, 0);
	disk_mutex_unlock(&f->maplock);
	return had_map;
}

/* Evict units of f, first in eviction order first, until 'want' bytes
 * are freed (at least one unit) or the next one is not within 'next'
 * (key_within): each one the state file says is valid that no process
 * pins or fills (its write lock on auxfd succeeds).
 * The punch goes to the puncher (cachetier_punch.c), or is made here when
 * 'here' is set (or the puncher's queue is full).
 * Returns the bytes freed; 0 marks f given up on for this round. ct->lock
 * held on entry and return, dropped in between. */
static uint64_t evict(struct cachetier *ct, struct ct_file *f, uint64_t want,
		      const struct ev_ctx *x, struct ev_key next, int here)
{
	uint32_t *list = NULL, *batch, *all, *seen, n = 0, ns = 0, ng, nsorted = 0;
	struct ev_cand *walk = NULL, *sorted = NULL;
	size_t nu;
	struct ct_punch *p;
	uint64_t freed = 0;
	int had_map = 0, named = 0, done = 0;

	if (!evict_live(ct, f))
		return 0;
	nu = f->nunits ? f->nunits : 1; /* known once live */
	list = malloc(nu * sizeof(*list));
	batch = malloc(nu * sizeof(*batch));
	all = malloc(nu * sizeof(*all));
	seen = malloc(nu * sizeof(*seen));
	p = malloc(sizeof(*p));
	if (ct->ev.verify)
		walk = malloc(nu * sizeof(*walk));
	if (!list || !batch || !all || !seen || !p || (ct->ev.verify && !walk)) {
		free(list);
		free(batch);
		free(all);
		free(seen);
		free(walk);
		free(p);
		return 0;
	}
	cachetier__ev_walk_begin(ct, f, x);
	if (walk)
		sorted = evict_sorted(ct, f, x, next, &nsorted);
	/* in batches: the next units in eviction order (f's kept order,
	 * cachetier__ev_walk_next: no sort, no look at its other units) up to
	 * 'want' (or to next, key_within), locked a run of adjacent units at
	 * a time (one fcntl a run, not one a unit); a unit another process
	 * pins, fills or evicted first is left out, and the next batch goes
	 * on from where this one stopped */
	while (!done && (freed < want || n == 0)) {
		uint32_t nb = 0;
		uint64_t more = 0;

		while (freed + more < want || n + nb == 0) {
			struct ev_key k;
			uint32_t c = cachetier__ev_walk_next(ct, f, x, &k);

			if (c == UINT32_MAX) {
				done = 2; /* none left */
				break;
			}
			if (walk)
				walk[ns] = (struct ev_cand){k, c};
			seen[ns++] = c;
			if (n + nb > 0 && !key_within(k, next)) {
				done = 1; /* another object's unit goes first */
				break;
			}
			batch[nb++] = c;
			more += cachetier__unit_len(f, c);
		}
		n += take(ct, f, batch, nb, list + n, &freed, &named);
	}
	if (walk && sorted)
		evict_check(ct, f, walk, ns, done == 2, sorted, nsorted);
	free(walk);
	free(sorted);
	/* the units looked at and not taken back in f's order, f's place in
	 * the objects' order again */
	cachetier__ev_walk_end(ct, f, x, seen, ns);
	free(seen);
	ct->ev.units += n;
	if (n == 0) {
		free(batch);
		free(all);
		free(list);
		free(p);
		f->evict_round = ct->evict_round; /* nothing of it can go now */
		return 0;
	}
	/* the punches' spans: the units taken, joined across short gaps
	 * that hold nothing (batch: the gaps' units) */
	qsort(list, n, sizeof(*list), u32_cmp);
	ng = join_gaps(f, list, n, batch);
	merge_units(list, n, batch, ng, all);
	cachetier__acct_evict(ct, freed); /* from the usage to evicting in one step */
	f->evicting = 1;
	ct->evictions++;
	ct->evicted_bytes += freed;
	disk_mutex_unlock(&ct->lock);

	if (named)
		had_map = evict_unmap(f);
	/* one hole per span of adjacent units, taken or joined gaps (a unit
	 * a call cost a quarter of a random epoch's fills in fallocate with a
	 * small cache), and one fcntl to unlock it: handed to the puncher
	 * (cachetier_punch.c), so this fill does not wait for a discard. The
	 * object is no longer marked (readers, fills and evictions of its
	 * other units go on); the units stay UNIT_EVICTING and locked, their
	 * bytes in ct->evicting, until punched. */
	p->f = f;
	p->list = list;
	p->n = n;
	p->gaps = batch;
	p->ng = ng;
	p->all = all;
	p->freed = freed;
	p->had_map = had_map;
	cachetier__lock(ct);
	f->evicting = 0;
	cachetier__units_wake(ct); /* cachetier__file_open waits on f->evicting */
	cachetier__punch_submit(ct, p, here);
	return freed;
}

struct ct_dec *cachetier__dec_entry(struct cachetier *ct, int dirfd, const char *name)
{
	struct ct_dec *d;

	for (d = ct->decs; d; d = d->next) {
		if (d->dirfd == dirfd && strcmp(d->name, name) == 0)
			return d;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->dirfd = dirfd;
	snprintf(d->name, sizeof(d->name), "%s", name);
	d->next = ct->decs;
	ct->decs = d;
	return d;
}

/* Our open decoded copy named d->name is gone from the disk: close its fd
 * unless a read uses it (then the last read_end does). ct->lock held. */
static void dec_forget(struct cachetier *ct, struct ct_dec *d)
{
	d->bytes = 0;
	for (struct cachetier_obj *o = ct->dec_objs; o; o = o->dnext) {
		if (o->dec == d && o->fd >= 0 && o->dpins == 0) {
			close(o->fd);
			o->fd = -1;
		}
	}
}

void cachetier__dec_release(struct cachetier *ct)
{
	for (struct cachetier_obj *o = ct->dec_objs; o; o = o->dnext) {
		struct stat st;

		/* redecoding first: its decoder sets o->fd without the lock
		 * (obj_redecode, cachetier_objread.c) */
		if (o->dec && !o->redecoding && o->fd >= 0 && o->dpins == 0 &&
		    fstat(o->fd, &st) == 0 && st.st_nlink == 0)
			dec_forget(ct, o->dec); /* another process evicted it */
	}
}

/* The least recently used decoded copy not tried in this round that no
 * read of this process uses. */
static struct ct_dec *victim_dec(struct cachetier *ct)
{
	struct ct_dec *best = NULL;

	for (struct ct_dec *d = ct->decs; d; d = d->next) {
		if (d->bytes == 0 || d->evict_round == ct->evict_round)
			continue;
		if (!best || d->atime_ns < best->atime_ns)
			best = d;
	}
	return best;
}

/* Evict decoded copy d: unlink it (the process whose unlink succeeds
 * takes its bytes off the usage), then its record; processes that have
 * it open keep reading the unlinked file until they let it go
 * (dec_release, within a second) and decode it again when read. ct->lock
 * held on entry and return, dropped in between. */
static uint64_t evict_dec(struct cachetier *ct, struct ct_dec *d)
{
	char rec[24];
	struct stat st;
	uint64_t freed = 0;
	int in_use = 0;

	d->evict_round = ct->evict_round;
	for (struct cachetier_obj *o = ct->dec_objs; o && !in_use; o = o->dnext)
		in_use = o->dec == d && (o->dpins > 0 || o->redecoding || o->state == OBJ_OPENING);
	if (in_use)
		return 0;
	disk_mutex_unlock(&ct->lock);
	if (fstatat(d->dirfd, d->name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
	    unlinkat(d->dirfd, d->name, 0) == 0) {
		freed = (uint64_t)st.st_size;
		cachetier__usage_add(ct, -(int64_t)freed);
		if (d->dirfd == ct->decfd) {
			unsigned long long cur = atomic_load(&ct->decoded_used);

			while (!atomic_compare_exchange_weak(&ct->decoded_used, &cur,
							     cur > freed ? cur - freed : 0))
				;
		}
	}
	snprintf(rec, sizeof(rec), "%s.rec", d->name);
	unlinkat(d->dirfd, rec, 0);
	cachetier__lock(ct);
	if (freed) {
		ct->evictions++;
		ct->evicted_bytes += freed;
		ct->decoded_evictions++;
	}
	dec_forget(ct, d);
	return freed;
}

static int make_room_near(struct cachetier *ct, uint64_t len, int spare_ahead, int64_t near,
			  uint64_t own, int64_t *cpu0);
static int make_room_timed(struct cachetier *ct, uint64_t len, int spare_ahead, int64_t near,
			   uint64_t own);

/* (a caller that reserved nothing: a decoded copy's write, a squeeze) */
int cachetier__make_room(struct cachetier *ct, uint64_t len, int spare_ahead)
{
	return make_room_timed(ct, len, spare_ahead, CT_NEAR_NONE, 0);
}

/* evict_cpu_ns counts the CPU of the calls that must evict, from the
 * moment they find it (before the prefetch's share check and the first
 * choice of a victim) to their return: the thread CPU clock is a syscall
 * (no vDSO for CLOCK_THREAD_CPUTIME_ID), so a call that finds room at
 * once or after waiting (the free-space check, a comparison) reads it not
 * at all, and one that must evict reads it twice whatever the number of
 * its evictions. */
int cachetier__make_room_near(struct cachetier *ct, uint64_t len, int spare_ahead, int64_t near)
{
	return make_room_timed(ct, len, spare_ahead, near, len); /* a fill: len reserved */
}

static int make_room_timed(struct cachetier *ct, uint64_t len, int spare_ahead, int64_t near,
			   uint64_t own)
{
	int64_t cpu0 = -1, w0 = cachetier__mono_ns();
	int err = make_room_near(ct, len, spare_ahead, near, own, &cpu0);

	if (cpu0 >= 0)
		atomic_fetch_add(&ct->evict_cpu_ns,
				 (unsigned long long)(cachetier__cpu_ns() - cpu0));
	ct->room_make_ns += (uint64_t)(cachetier__mono_ns() - w0);
	return err;
}

/* The bytes an eviction frees at least (when its object has them): a
 * chunk's worth, at most a sixteenth of the cache (a random reader's unit
 * fills would otherwise each unlink and rewrite a map). */
static uint64_t ev_batch(const struct cachetier *ct)
{
	return ct->cfg.chunk_bytes < ct->cfg.cache_size_bytes / 16 ? ct->cfg.chunk_bytes
								   : ct->cfg.cache_size_bytes / 16;
}

/* How many of the bytes being punched (ct->evicting: off the usage, still
 * on disk) a fill counts as freed: two eviction batches. A fill whose room
 * they cover starts without waiting for another thread's punch; the
 * directory then holds at most that much over the limit until the punches
 * end (README.md, "Bound"). */
static uint64_t room_over(const struct cachetier *ct)
{
	return 2 * ev_batch(ct);
}

/* The bytes made room for between two statvfs calls of the free-space
 * check at most: four chunks, at most a quarter of the reserve (0 with
 * a reserve under 4 bytes: every check calls statvfs). */
static uint64_t free_bound(const struct cachetier *ct)
{
	uint64_t b = 4 * (uint64_t)ct->cfg.chunk_bytes;

	return b < ct->cfg.min_free_bytes / 4 ? b : ct->cfg.min_free_bytes / 4;
}

uint64_t cachetier__disk_avail(struct cachetier *ct, uint64_t need)
{
	uint64_t used = ct->room_bytes - ct->free_base, bound = free_bound(ct), base, wrote, avail;
	struct statvfs sv;

	/* the last answer less every byte made room for since: no more
	 * than the disk has free unless another program wrote to it (seen
	 * at the next call, within bound bytes of this process's fills) */
	if (ct->free_known && used < bound && ct->free_avail >= used &&
	    ct->free_avail - used >= need + bound)
		return ct->free_avail - used;
	base = ct->room_bytes;
	wrote = atomic_load(&ct->wr_bytes); /* before the statvfs: on the disk at it */
	ct->free_calls++;
	/* statvfs without the lock: it is a syscall */
	disk_mutex_unlock(&ct->lock);
	avail = fstatvfs(ct->datafd, &sv) == 0 ? (uint64_t)sv.f_bavail * sv.f_frsize : UINT64_MAX;
	cachetier__lock(ct);
	if (avail == UINT64_MAX) {
		ct->free_known = 0;
		return avail;
	}
	if (!ct->free_known || base >= ct->free_base) { /* not older than the last */
		ct->free_avail = avail;
		ct->free_base = base;
		ct->free_wrote = wrote;
		ct->free_known = 1;
	}
	return avail;
}

/* Evictions running on other threads make the room, more than room_over
 * of it: their bytes leave the disk when they finish: wait, do not write
 * over them (nor evict more than needed). Only an eviction's end wakes this
 * wait (ct->evicting > 0 here, and it ends without waiting on anything):
 * the unit states' broadcasts at every fill's end would wake every fill
 * thread here. Counted in room_waits once a call (*waited). ct->lock held
 * (the wait drops it); the caller counted itself in ct->room_waiters. */
static void room_wait_punches(struct cachetier *ct, int *waited)
{
	int64_t w0 = cachetier__mono_ns();

	disk_cond_wait(&ct->room_cond, &ct->lock);
	atomic_fetch_sub(&ct->room_waiters, 1);
	ct->room_wait_ns += (uint64_t)(cachetier__mono_ns() - w0);
	ct->room_waits += !*waited;
	*waited = 1;
}

/* No victim found: other processes may have cached objects this one has
 * not seen yet, or units of objects live here (every live object's units
 * placed anew in eviction's order: cachetier_evheap.c). ct->lock held. */
static void room_rescan(struct cachetier *ct)
{
	int64_t r0 = ct->rescan_ns;

	cachetier__rescan(ct);
	for (struct ct_file *g = ct->files; g && ct->rescan_ns != r0; g = g->next) {
		if (g->live)
			cachetier__ev_mark(ct, g);
	}
}

/* One eviction toward a fill's room: the directory over its limit by
 * excess bytes (usage, fills in flight, punches past room_over) and
 * *want_free bytes of free space wanted. The victim is the first of
 * eviction's order, or a decoded copy used before it; a prefetch fill
 * (spare_ahead) evicts only while what was filled ahead stays within the
 * rules' share (half the cache: the rest is the readers', whose readahead
 * then evicts what they read, never what was fetched ahead for them).
 * 1: look again; 0: nothing left to evict (a fill over the limit); or
 * -ENOSPC (a prefetch fill: skipped). *rescanned: a rescan was made for
 * this call. ct->lock held (evictions drop it). */
static int room_evict(struct cachetier *ct, struct ev_ctx *x, uint64_t len, uint64_t excess,
		      uint64_t *want_free, int *rescanned)
{
	struct ev_key key, next;
	struct ct_dec *d;
	struct ct_file *f;
	uint64_t freed, need;

	x->now = cachetier__now_ns();
	if (x->spare && cachetier__ev_ahead(ct, x->now) + len > cachetier__ahead_share(ct))
		return -ENOSPC;
	x->pnow = atomic_load_explicit(&ct->plan_now, memory_order_relaxed);
	f = cachetier__ev_pick(ct, x, &key, &next);
	d = victim_dec(ct);
	/* a decoded copy goes before units no plan speaks of that were used
	 * after it, and before units a plan needs */
	if (d && (!f || key.cls > EV_LRU || (key.cls == EV_LRU && d->atime_ns < key.at))) {
		freed = evict_dec(ct, d);
		*want_free = freed >= *want_free ? 0 : *want_free - freed;
		return 1;
	}
	if (!f && !*rescanned) {
		*rescanned = 1;
		room_rescan(ct);
		return 1;
	}
	if (!f)				       /* everything left is pinned (or spared) */
		return x->spare ? -ENOSPC : 0; /* fill over the limit */
	need = excess > *want_free ? excess : *want_free;
	if (need < ev_batch(ct))
		need = ev_batch(ct);
	/* for free space (want_free) the punch is made here: the filesystem
	 * counts bytes not punched yet as used */
	freed = evict(ct, f, need ? need : 1, x, next, *want_free > 0);
	*want_free = freed >= *want_free ? 0 : *want_free - freed;
	return 1;
}

static int make_room_near(struct cachetier *ct, uint64_t len, int spare_ahead, int64_t near,
			  uint64_t own, int64_t *cpu0)
{
	struct ev_ctx x = {0, spare_ahead, near, ct, 0};
	uint64_t want_free = 0, avail;
	int rescanned = 0, waited = 0, r = 1;

	CT_OFF_LOOP();
	/* the other fills in flight count too, each byte once (own: this
	 * fill's bytes, reserved by its caller: cachetier__disk_free) */
	avail = cachetier__disk_free(ct, len, own);
	if (avail < ct->cfg.min_free_bytes + len)
		want_free = ct->cfg.min_free_bytes + len - avail;
	ct->room_bytes += len;
	ct->evict_round++;
	while (r > 0) {
		/* the whole directory's bytes (every process and source) plus
		 * this process's fills in flight */
		uint64_t total;
		/* bytes being punched that do not count as freed (room_over) */
		uint64_t over;
		struct ct_room acct;

		/* a punch's end lowers ct->evicting without ct->lock and takes it
		 * to wake room_cond only when it sees a waiter: counted before
		 * the look (both seq_cst), so that no end falls between the
		 * look and the wait unseen (cachetier_punch.c, punch_room) */
		atomic_fetch_add(&ct->room_waiters, 1);
		/* each byte in one of the three (cachetier__acct_get) */
		cachetier__acct_get(ct, &acct);
		total = acct.usage + acct.reserved;
		over = acct.evicting > room_over(ct) ? acct.evicting - room_over(ct) : 0;
		if (total + over <= ct->cfg.cache_size_bytes && want_free == 0) {
			atomic_fetch_sub(&ct->room_waiters, 1);
			break;
		}
		if (total <= ct->cfg.cache_size_bytes && want_free == 0) {
			room_wait_punches(ct, &waited);
			continue;
		}
		atomic_fetch_sub(&ct->room_waiters, 1); /* evicts: does not wait */
		if (*cpu0 < 0) /* must evict from here (cachetier__make_room_near) */
			*cpu0 = cachetier__cpu_ns();
		r = room_evict(ct, &x, len,
			       total + over > ct->cfg.cache_size_bytes
				   ? total + over - ct->cfg.cache_size_bytes
				   : 0,
			       &want_free, &rescanned);
	}
	return r < 0 ? r : 0;
}
