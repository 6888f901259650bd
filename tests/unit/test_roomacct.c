/*
 * test_roomacct.c — the room's accounts (cachetier_share.c, "the byte
 * accounts"; struct cachetier's reserved): every byte of a fill is counted
 * in exactly one of the directory's usage and this process's reserved
 * bytes at every moment, so no room check (a PF_FIT prefetch's pf_fits,
 * make_room, cachetier_room, the flusher's over-limit check) counts a unit
 * twice. Against the fault:// test store with async=1 (fills end on the
 * tier's fill writer).
 *
 * test_land_room: a PF_FIT prefetch range of 7 units of 64 KiB of object A
 * in a cache of 11 units, its read held by the store after 4 units
 * (hold_at: 2 full buffers of 128 KiB): the writer lands units 0-3 (valid
 * in the state file, in the directory's usage) and the run goes on, so
 * nobody takes them. Then the room is exactly the cache less A's 7 units
 * (cachetier_room: 4 units, 262,144 bytes), and a PF_FIT range of 4 units
 * of object B fits exactly: fetched whole, 0 bytes unfit, nothing
 * evicted, room 0 after it. The store before counted the 4 landed units
 * twice (in the usage at their landing, in reserved until a reader or
 * the run's end took them): room 0 and B's 262,144 bytes unfit (the
 * remote-cache-prefetch flake: a prefetch stopped at 6.68 MiB of 8).
 * The hold removed: 11 units used, room 0, both ranges exact.
 *
 * test_steps (generated: seeded sequences, TEST_SEED): the fill API driven
 * step by step on one object of 24 units in a cache of 32 (the store's
 * fills in flight are the test's own runs; the tier's workers and writer
 * idle): begin a run (claim 1-4 empty units, reserve their bytes as
 * fill_begin does), land some of its units (written, cachetier__run_land,
 * cachetier__run_landed: committed as they land), end it (the rest
 * written and committed, cachetier__run_commit, or aborted with an error,
 * cachetier__run_abort, its reservation released as fill_end does), evict
 * (cachetier__make_room for a fill of one unit over the limit, the
 * puncher held so the bytes stay being punched; drained first), read a
 * valid unit (a probe: exact bytes). After every step, in one look under
 * the accounts' lock (cachetier__acct_get): reserved is exactly the runs'
 * bytes not landed or committed, the usage exactly the bytes the state
 * file says valid, evicting exactly the bytes taken by evictions not
 * punched yet: every byte in exactly one of the three. 300 steps; the
 * close's debug check finds no byte left reserved. The store before
 * counted a landed unit in the usage and in reserved until it was taken: a
 * landing that leaves reserved alone (mutated in) fails the look of the
 * first land step and every look after it (112 of 300 steps, seed
 * 20261201), and the close's assertion.
 *
 * test_disk_room: cachetier_room on a disk smaller than the cache (a
 * filesystem the test models: fstatvfs interposed below, its free space
 * DISK, 32 units, less the directory's usage, which is what a filesystem
 * shows of landed units), A's range of 7 units held after 4 as in
 * test_land_room. The room is the disk's free space less the reserve (a
 * unit) and A's 3 units still to come: 24 units. Then the call's
 * free-space check itself lets A's 3 units land (the hold removed, the
 * accounts awaited) before it answers: the room stays 24 units, A's units
 * each counted once (on the disk and in the usage, out of reserved). The
 * store before read the accounts first: A's 3 units in reserved and on
 * the disk, a room of 21 units (1 of 135 checks fails).
 *
 * Every wait for a state is a poll of the tier's counters bounded at 60 s
 * (a failed check, never a sleep that decides a count).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "backend.h"
#include "cachetier.h"
#include "cachetier_i.h"
#include "check.h"
#include "test_util.h"

#define UNIT  (64u * 1024)
#define CHUNK (8u * UNIT) /* 8 units a chunk */
#define RUN   (7u * UNIT) /* A's range: 3 full buffers of 128 KiB and a half one */
#define SIZE  (3u * CHUNK)

static char tmpdir[256];
static unsigned char *data[2];
static const char *keys[2] = {"a.tar", "b.tar"};

/* A tier in tmpdir/<name>: a cache of size bytes, chunks of CHUNK, 2 fill
 * threads and a slot for a small fill (3 fills at once), no rules. */
static struct cachetier *tier(struct backend *be, const char *name, uint64_t size)
{
	return tier_small(tmpdir, name, be, size, CHUNK);
}

static void test_land_room(void)
{
	char gate[sizeof(tmpdir) + 16];
	struct backend *be;
	struct cachetier *ct;
	struct cachetier_obj *a, *b;
	struct cachetier_stats st;
	uint64_t room, unfit = 0;
	int ended;

	snprintf(gate, sizeof(gate), "%s/src.hold", tmpdir);
	flag_file(gate, 1);
	be = fault_store(tmpdir, "async=1&hold_at=262144"); /* 4 units: 2 full buffers */
	ct = tier(be, "c-land", 11 * (uint64_t)UNIT);
	a = obj_open(ct, be, keys[0]);
	b = obj_open(ct, be, keys[1]);
	CHECK(cachetier_obj_prefetch_range(a, 0, RUN, CACHETIER_PF_FIT) == 0, "land: A's range");
	cached_wait(a, 4 * UNIT, "land: A's units 0-3 landed");
	count_reach(ct, TC_FILLS_INFLIGHT, 1, "land: A's run held in flight");
	room = cachetier_room(ct);
	stats(ct, &st);
	printf("land: A's 4 of 7 units landed, its run in flight: room %llu bytes, used %llu\n",
	       (unsigned long long)room, (unsigned long long)st.bytes_used);
	CHECK(st.bytes_used == 4 * UNIT, "land: %llu bytes used, want the 4 units landed",
	      (unsigned long long)st.bytes_used);
	CHECK(room == 4 * UNIT,
	      "land: room %llu bytes, want %u (the cache less A's 7 units, each counted once)",
	      (unsigned long long)room, 4 * UNIT);

	/* B's 4 units fit exactly in what A's run leaves */
	CHECK(cachetier_obj_prefetch_range(b, 0, 4 * UNIT, CACHETIER_PF_FIT) == 0,
	      "land: B's range");
	ended = prefetch_ended(b);
	(void)cachetier_obj_prefetch_state(b, &unfit);
	count_reach(ct, TC_FILLS_INFLIGHT, 1, "land: B's fill ended");
	stats(ct, &st);
	room = cachetier_room(ct);
	printf("land: B's range of 4 units: %llu bytes fetched, %llu unfit, evictions %llu, room "
	       "%llu\n",
	       (unsigned long long)cachetier_obj_cached_bytes(b), (unsigned long long)unfit,
	       (unsigned long long)st.evictions, (unsigned long long)room);
	CHECK(ended, "land: B's prefetch ended");
	CHECK(unfit == 0 && st.unfit_bytes == 0 && cachetier_obj_cached_bytes(b) == 4 * UNIT,
	      "land: B's range %llu bytes unfit (tier %llu), %llu fetched, want 0 and %u: it "
	      "fits exactly",
	      (unsigned long long)unfit, (unsigned long long)st.unfit_bytes,
	      (unsigned long long)cachetier_obj_cached_bytes(b), 4 * UNIT);
	CHECK(st.evictions == 0 && room == 0, "land: evictions %llu, room %llu, want 0 and 0",
	      (unsigned long long)st.evictions, (unsigned long long)room);

	flag_file(gate, 0);
	count_reach(ct, TC_FILLS_INFLIGHT, 0, "land: A's fill ended");
	stats(ct, &st);
	room = cachetier_room(ct);
	CHECK(st.bytes_used == 11 * (uint64_t)UNIT && room == 0,
	      "land: the end: %llu bytes used, room %llu, want %u and 0",
	      (unsigned long long)st.bytes_used, (unsigned long long)room, 11 * UNIT);
	CHECK(obj_exact(a, data[0], 0, RUN) && obj_exact(b, data[1], 0, 4 * UNIT),
	      "land: A's 7 units and B's 4 exact");
	/* debug builds: no byte left reserved (cachetier__run_check) */
	tier_end(ct, be, b, a, NULL);
}

/* ---- test_steps ---- */

#define SUNITS 24u /* the object's units */
#define SRUNS  3   /* runs open at once, at most */

struct srun {
	uint32_t c, n, landed; /* units [c, c + n), [c, c + landed) landed */
	uint32_t crc[4];
	int claim[4];
};

struct smodel {
	struct cachetier *ct;
	struct cachetier_obj *o;
	struct ct_file *f;
	struct srun runs[SRUNS];
	int nruns;
	uint64_t reserved, evicting; /* what the fill API was told */
	unsigned bad;		     /* steps whose look failed (at most 3 printed) */
};

/* The look after a step: the accounts in one step against the model. */
static void s_check(struct smodel *m, int step, const char *what)
{
	struct ct_file *f = m->f;
	struct ct_room r;
	uint64_t valid = 0;

	cachetier__lock(m->ct);
	for (uint32_t u = 0; u < f->nunits; u++)
		valid += cachetier__st_get(f, u) ? cachetier__unit_len(f, u) : 0;
	cachetier__acct_get(m->ct, &r);
	disk_mutex_unlock(&m->ct->lock);
	if (r.reserved == m->reserved && r.usage == valid && r.evicting == m->evicting)
		return;
	if (m->bad++ < 3)
		fprintf(stderr,
			"steps: after step %d (%s): reserved %llu (want %llu), usage %llu (the "
			"state file's valid bytes %llu), evicting %llu (want %llu)\n",
			step, what, (unsigned long long)r.reserved, (unsigned long long)m->reserved,
			(unsigned long long)r.usage, (unsigned long long)valid,
			(unsigned long long)r.evicting, (unsigned long long)m->evicting);
}

/* Write the bytes of units [c, c + n) of run x (their CRCs into x->crc). */
static void s_write(struct smodel *m, struct srun *x, uint32_t c, uint32_t n)
{
	uint64_t off = cachetier__unit_off(m->f, c), len = cachetier__run_len(m->f, c, n);

	CHECK(cachetier__run_write(m->f, x->c, x->crc, off, data[0] + off, (size_t)len) == 0,
	      "steps: write of units %u-%u", c, c + n - 1);
}

static int s_begin(struct smodel *m, uint64_t *s)
{
	struct ct_file *f = m->f;
	uint32_t c = (uint32_t)(rnd(s) % SUNITS), n = 1 + (uint32_t)(rnd(s) % 4), k = 0;
	struct srun *x;
	int waited = 0;

	if (m->nruns == SRUNS)
		return 0;
	while (k < n && c + k < SUNITS && f->ust[c + k] == UNIT_EMPTY)
		k++;
	if (k == 0)
		return 0;
	x = &m->runs[m->nruns++];
	*x = (struct srun){.c = c, .n = k};
	cachetier__lock(m->ct);
	cachetier__run_claim(m->ct, f, c, k);
	m->ct->reserved += cachetier__run_len(f, c, k); /* as fill_begin */
	disk_mutex_unlock(&m->ct->lock);
	m->reserved += cachetier__run_len(f, c, k);
	cachetier__run_lock(m->ct, f, c, k, 0, x->claim, &waited);
	for (uint32_t i = 0; i < k; i++)
		CHECK(x->claim[i] == 1, "steps: claim of unit %u: %d", c + i, x->claim[i]);
	return 1;
}

static int s_land(struct smodel *m, uint64_t *s)
{
	struct srun *x;
	uint32_t k;

	if (m->nruns == 0)
		return 0;
	x = &m->runs[rnd(s) % (uint64_t)m->nruns];
	if (x->landed == x->n)
		return 0;
	k = 1 + (uint32_t)(rnd(s) % (x->n - x->landed));
	s_write(m, x, x->c + x->landed, k);
	cachetier__run_land(m->f, x->c + x->landed, k, x->crc + x->landed);
	cachetier__run_landed(m->ct, m->f, x->c + x->landed, k, x->landed + k == x->n, 1, 0);
	m->reserved -= cachetier__run_len(m->f, x->c + x->landed, k);
	x->landed += k;
	return 1;
}

static int s_end(struct smodel *m, uint64_t *s)
{
	int i = m->nruns ? (int)(rnd(s) % (uint64_t)m->nruns) : -1;
	struct srun *x;
	uint32_t c, n;
	uint64_t len;

	if (i < 0)
		return 0;
	x = &m->runs[i];
	c = x->c + x->landed;
	n = x->n - x->landed;
	len = n ? cachetier__run_len(m->f, c, n) : 0; /* run_len needs n >= 1 */
	cachetier__lock(m->ct);
	if (n && (rnd(s) & 1)) {
		s_write(m, x, c, n);
		cachetier__run_commit(m->ct, m->f, c, n, x->crc + x->landed, 0, NULL);
	} else if (n) {
		cachetier__run_abort(m->ct, m->f, c, n, -EIO, 1, 0, NULL);
		m->ct->reserved -= len; /* the caller's, as fill_end's */
	}
	cachetier__run_ended(m->f, x->c, x->n);
	disk_mutex_unlock(&m->ct->lock);
	m->reserved -= len;
	m->runs[i] = m->runs[--m->nruns];
	return 1;
}

/* Drain the puncher: every punch done, nothing being evicted. */
static void s_drain(struct smodel *m)
{
	struct cachetier_stats st;

	cachetier_punch_hold(m->ct, 0);
	for (int i = 0; i < 6000; i++) {
		stats(m->ct, &st);
		if (st.punches_pending == 0 && atomic_load(&m->ct->evicting) == 0)
			break;
		usleep(10000);
	}
	CHECK(st.punches_pending == 0, "steps: %llu punches pending after 60 s",
	      (unsigned long long)st.punches_pending);
	m->evicting = 0;
	cachetier_punch_hold(m->ct, 1);
}

static int s_evict(struct smodel *m)
{
	struct ct_file *f = m->f;
	uint8_t was[SUNITS];
	struct ct_room r;
	uint64_t x;

	s_drain(m);
	cachetier__lock(m->ct);
	cachetier__acct_get(m->ct, &r);
	for (uint32_t u = 0; u < SUNITS; u++)
		was[u] = f->ust[u] == UNIT_VALID;
	/* a fill of one unit over the limit (as fill_begin reserves it) */
	x = m->ct->cfg.cache_size_bytes - r.usage - r.reserved + UNIT;
	m->ct->reserved += x;
	(void)cachetier__make_room(m->ct, x, 0);
	m->ct->reserved -= x;
	for (uint32_t u = 0; u < SUNITS; u++)
		m->evicting += was[u] && f->ust[u] == UNIT_EVICTING ? cachetier__unit_len(f, u) : 0;
	disk_mutex_unlock(&m->ct->lock);
	return 1;
}

static int s_read(struct smodel *m, uint64_t *s)
{
	uint32_t u = (uint32_t)(rnd(s) % SUNITS);
	unsigned char buf[512];
	uint64_t off = (uint64_t)u * UNIT + rnd(s) % (UNIT - sizeof(buf));

	if (m->f->ust[u] != UNIT_VALID)
		return 0;
	CHECK(cachetier_obj_pread_probe(m->o, buf, sizeof(buf), off) == (ssize_t)sizeof(buf) &&
		  memcmp(buf, data[0] + off, sizeof(buf)) == 0,
	      "steps: unit %u read exact", u);
	return 1;
}

static void test_steps(uint64_t seed)
{
	static const char *what[] = {"begin", "land", "land", "end", "evict", "read"};
	struct backend *be = fault_store(tmpdir, "");
	struct smodel m = {0};
	uint64_t s = seed * 7919 + 3;
	unsigned done[6] = {0};

	m.ct = tier(be, "c-steps", 32 * (uint64_t)UNIT); /* eviction's batch: 2 units */
	m.o = obj_open(m.ct, be, keys[0]);
	m.f = m.o->file;
	cachetier_punch_hold(m.ct, 1);
	for (int step = 0; step < 300; step++) {
		int k = (int)(rnd(&s) % 6), did;

		if (k == 4 && rnd(&s) % 4) /* evictions rarer */
			k = 5;
		did = k == 0   ? s_begin(&m, &s)
		      : k <= 2 ? s_land(&m, &s)
		      : k == 3 ? s_end(&m, &s)
		      : k == 4 ? s_evict(&m)
			       : s_read(&m, &s);
		done[k] += (unsigned)did;
		if (did)
			s_check(&m, step, what[k]);
	}
	while (m.nruns) { /* every run ended */
		uint64_t t = 0;

		s_end(&m, &t);
		s_check(&m, 300, "end");
	}
	s_drain(&m);
	s_check(&m, 301, "drain");
	printf("steps: %u begun, %u landings, %u ended, %u evictions, %u reads; looks that "
	       "failed %u\n",
	       done[0], done[1] + done[2], done[3], done[4], done[5], m.bad);
	CHECK(m.bad == 0, "steps: %u looks found a byte counted twice or in none", m.bad);
	CHECK(done[0] > 10 && done[1] + done[2] > 10 && done[4] > 3,
	      "steps: too few steps of a kind (%u begun, %u landings, %u evictions)", done[0],
	      done[1] + done[2], done[4]);
	cachetier_punch_hold(m.ct, 0);
	/* debug builds: no byte left reserved (cachetier__run_check) */
	tier_end(m.ct, be, m.o, NULL);
}

/* ---- test_disk_room ---- */

#define DISK (32u * UNIT) /* the modelled filesystem */

static struct cachetier *md_ct; /* the tier whose disk is modelled (NULL: the real call) */
static pthread_t md_thread;	/* its next call here lets A's run land first (md_armed) */
static int md_armed, md_landed;
static char md_gate[sizeof(tmpdir) + 16];

/* Wait (up to 60 s: the bound only against a hang) until the accounts say
 * usage bytes landed and none reserved: 1 when they do. */
static int md_accounts(uint64_t usage)
{
	struct ct_room r = {0};

	for (int i = 0; i < 6000; i++) {
		cachetier__acct_get(md_ct, &r);
		if (r.usage == usage && r.reserved == 0)
			return 1;
		usleep(10000);
	}
	fprintf(stderr, "disk: usage %llu, reserved %llu after 60 s\n", (unsigned long long)r.usage,
		(unsigned long long)r.reserved);
	return 0;
}

/* fstatvfs of this program (the tier's calls come here; with
 * _FILE_OFFSET_BITS=64 the symbol is fstatvfs64): the real one, or the
 * modelled disk: DISK bytes, free those the directory's usage leaves.
 * Armed, the test thread's call first lets A's held run land. */
int fstatvfs(int fd, struct statvfs *sv)
{
	static int (*real)(int, struct statvfs *);
	struct cachetier *ct = __atomic_load_n(&md_ct, __ATOMIC_ACQUIRE);
	uint64_t used;

	if (!ct) {
		if (!real)
			*(void **)&real =
			    dlsym(RTLD_NEXT, sizeof(off_t) == 8 ? "fstatvfs64" : "fstatvfs");
		return real ? real(fd, sv) : -1;
	}
	if (md_armed && pthread_equal(pthread_self(), md_thread)) {
		md_armed = 0;
		flag_file(md_gate, 0);
		md_landed = md_accounts(7 * (uint64_t)UNIT);
	}
	used = cachetier__usage_get(ct);
	memset(sv, 0, sizeof(*sv));
	sv->f_bsize = sv->f_frsize = 4096;
	sv->f_blocks = DISK / 4096;
	sv->f_bfree = sv->f_bavail = used < DISK ? (DISK - used) / 4096 : 0;
	return 0;
}

static void test_disk_room(void)
{
	struct cachetier_config cc;
	char dir[sizeof(tmpdir) + 16];
	struct backend *be;
	struct cachetier *ct;
	struct cachetier_obj *a;
	uint64_t room, want, avail, keep;

	snprintf(md_gate, sizeof(md_gate), "%s/src.hold", tmpdir);
	flag_file(md_gate, 1);
	be = fault_store(tmpdir, "async=1&hold_at=262144"); /* 4 units: 2 full buffers */
	snprintf(dir, sizeof(dir), "%s/c-disk", tmpdir);
	tier_config(&cc, dir, 1ull << 30, 2, CHUNK); /* the disk is the smaller limit */
	cc.readahead_max_bytes = CHUNK;
	cc.small_fills = 1;
	cc.min_free_bytes = UNIT;
	ct = tier_open(&cc, be);
	a = obj_open(ct, be, keys[0]);
	md_thread = pthread_self();
	__atomic_store_n(&md_ct, ct, __ATOMIC_RELEASE);
	CHECK(cachetier_disk(ct, &avail, &keep) == 0 && avail == DISK && keep == UNIT,
	      "disk: the modelled disk %llu bytes free, reserve %llu, want %u and %u",
	      (unsigned long long)avail, (unsigned long long)keep, DISK, UNIT);
	CHECK(cachetier_obj_prefetch_range(a, 0, RUN, CACHETIER_PF_FIT) == 0, "disk: A's range");
	cached_wait(a, 4 * UNIT, "disk: A's units 0-3 landed");
	count_reach(ct, TC_FILLS_INFLIGHT, 1, "disk: A's run held in flight");
	room = cachetier_room(ct);
	want = DISK - 4 * UNIT - UNIT - 3 * UNIT; /* A's landed, the reserve, A's to come */
	printf("disk: A's 4 of 7 units landed, its run in flight: room %llu bytes\n",
	       (unsigned long long)room);
	CHECK(room == want, "disk: room %llu bytes, want %llu", (unsigned long long)room,
	      (unsigned long long)want);

	/* A's last 3 units land within the room's call, at its free-space check */
	md_armed = 1;
	room = cachetier_room(ct);
	want = DISK - 7 * UNIT - UNIT; /* A's 7 units once each, the reserve */
	printf("disk: A's last 3 units landed during the call: room %llu bytes\n",
	       (unsigned long long)room);
	CHECK(md_landed, "disk: A's last 3 units landed within the call");
	CHECK(room == want,
	      "disk: room %llu bytes, want %llu (A's 7 units counted once: on the disk, not "
	      "in reserved too)",
	      (unsigned long long)room, (unsigned long long)want);
	count_reach(ct, TC_FILLS_INFLIGHT, 0, "disk: A's fill ended");
	__atomic_store_n(&md_ct, NULL, __ATOMIC_RELEASE);
	CHECK(obj_exact(a, data[0], 0, RUN), "disk: A's 7 units exact");
	/* debug builds: no byte left reserved (cachetier__run_check) */
	tier_end(ct, be, a, NULL);
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "ra", 20261201u);
	uint64_t s = seed * 2654435761u + 1;

	for (int i = 0; i < 2; i++)
		data[i] = src_object(tmpdir, keys[i], SIZE, &s);

	test_land_room();
	test_steps(seed);
	test_disk_room();

	for (int i = 0; i < 2; i++)
		free(data[i]);
	return test_end("roomacct", tmpdir, seed);
}
