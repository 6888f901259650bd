/*
 * test_punchrun.c — longer punches (cachetier_evict.c, run_extend): an
 * eviction also takes the units no plan needs that the next eviction of
 * its object would take (the next batch in its order) and that lie next
 * to a unit it takes, directly or across units that hold nothing (joined
 * then: join_gaps), so its punches are fewer and longer; every other
 * rule as before.
 *
 * Seeded: each round a fresh tier over the fault:// store whose cache (96
 * units of 8 KiB) is full of object O, every unit of O marked by a plan
 * and then read by it (done: no plan needs it) unit by unit in a random
 * order (its last use: the least recently used goes first),
 * then 40 probes of object B's units, each marked as needed first: a probe
 * that finds no room evicts one batch of O (6 units: a sixteenth of the
 * cache) plus the units of its next batch next to them. The test keeps a
 * model of that rule and checks, exactly, after the punches ended: which
 * of O's units are valid (its state file); that the data file holds data
 * at each valid unit and a hole at each other (SEEK_DATA); the bytes used
 * (O's valid units and B's probed ones); the evictions, units evicted and
 * holes punched (each eviction's runs, joined across its gaps that hold
 * nothing). With run_extend taking none (each eviction its batch alone)
 * 17 of the 360 checks fail: the evictions, units evicted and holes in
 * every round; the units valid, the holes and the bytes used in 3.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "cachetier.h"
#include "check.h"
#include "test_util.h"

#define CHUNK	(64u * 1024)
#define U	(CHUNK / 8) /* units of 8 KiB */
#define N	96u	    /* O's units: the cache */
#define NB	40u	    /* B's units probed */
#define BATCH	6u	    /* ev_batch: the cache / 16 (under a chunk) */
#define GAP_MAX 32u	    /* EV_GAP_MAX */

static char tmpdir[256];

/* The data file of n bytes under dir (a name of 16 characters, no dot). */
static int data_file(const char *dir, uint64_t n, char *out, size_t outsz)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int found = 0;

	if (!d)
		return 0;
	while (!found && (e = readdir(d))) {
		char p[1200];
		struct stat st;

		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (lstat(p, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode))
			found = data_file(p, n, out, outsz);
		else if (S_ISREG(st.st_mode) && strlen(e->d_name) == 16 &&
			 (uint64_t)st.st_size == n) {
			snprintf(out, outsz, "%s", p);
			found = 1;
		}
	}
	closedir(d);
	return found;
}

/* The model of O's units: valid[c]; order[] (the eviction order: least
 * recently used first); the counts the evictions add. */
struct model {
	int valid[N];
	uint32_t order[N];
	uint64_t evictions, units, punches, runs_units;
};

static int m_hole(const struct model *m, const int *in, uint32_t c)
{
	return !m->valid[c] && !in[c];
}

/* run_touches: c next to a unit in in[] (1 or 2) on side dir, directly or
 * across at most GAP_MAX units holding nothing. */
static int m_touches(const struct model *m, const int *in, uint32_t c, int dir)
{
	for (uint32_t k = 1; k <= GAP_MAX + 1; k++) {
		uint32_t d = c + (uint32_t)(dir * (int)k);

		if (d >= N)
			return 0;
		if (in[d])
			return 1;
		if (!m_hole(m, in, d))
			return 0;
	}
	return 0;
}

/* One eviction of the model: the batch, its next batch's units that
 * touch it (extend: the rule on), its punches (runs of the units taken
 * and the gaps of at most GAP_MAX units holding nothing between them). */
static void m_evict(struct model *m, int extend)
{
	int in[N] = {0};
	uint32_t w = 0, l[BATCH], nl = 0, i = 0;
	int last = -1;

	for (; i < N && w < BATCH; i++) {
		if (m->valid[m->order[i]]) {
			in[m->order[i]] = 1;
			w++;
		}
	}
	for (; i < N && nl < BATCH; i++) {
		if (m->valid[m->order[i]])
			l[nl++] = m->order[i];
	}
	if (extend) {
		/* sorted, then the two sweeps */
		for (uint32_t a = 0; a < nl; a++)
			for (uint32_t b = a + 1; b < nl; b++)
				if (l[b] < l[a]) {
					uint32_t t = l[a];

					l[a] = l[b];
					l[b] = t;
				}
		for (uint32_t a = 0; a < nl; a++)
			if (m_touches(m, in, l[a], -1))
				in[l[a]] = 2;
		for (uint32_t a = nl; a-- > 0;)
			if (!in[l[a]] && m_touches(m, in, l[a], 1))
				in[l[a]] = 2;
	}
	m->evictions++;
	/* the punches: units taken, gaps joined, one hole a maximal run */
	for (uint32_t c = 0; c < N; c++) {
		if (!in[c])
			continue;
		m->units++;
		m->runs_units++;
		if (last >= 0 && c == (uint32_t)last + 1) {
			last = (int)c;
			continue;
		}
		if (last >= 0 && c - (uint32_t)last - 1 <= GAP_MAX) {
			uint32_t g = (uint32_t)last + 1;

			while (g < c && !m->valid[g])
				g++;
			if (g == c) { /* a gap of holes: joined */
				m->runs_units += c - (uint32_t)last - 1;
				last = (int)c;
				continue;
			}
		}
		m->punches++;
		last = (int)c;
	}
	for (uint32_t c = 0; c < N; c++)
		if (in[c])
			m->valid[c] = 0;
}

static void round_run(int r, const unsigned char *o_data, uint64_t *s)
{
	struct backend *be = fault_store(tmpdir, "");
	struct cachetier_config cc;
	struct cachetier_stats st;
	struct cachetier_obj *o, *b;
	struct model m;
	const uint32_t now = 10;
	unsigned char buf[64];
	char dir[400], path[1300];
	struct cachetier *ct;
	uint64_t used, lo = 1, hi = 0;
	int bad_valid = 0, bad_hole = 0, ok = 1, fd;

	snprintf(dir, sizeof(dir), "%s/c%d", tmpdir, r);
	tier_config(&cc, dir, (uint64_t)N * U, 2, CHUNK);
	ct = tier_open(&cc, be);
	o = obj_open(ct, be, "o.tar");
	b = obj_open(ct, be, "b.tar");
	memset(&m, 0, sizeof(m));
	CHECK(obj_exact(o, o_data, 0, (size_t)N * U), "round %d: O read exact", r);
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.bytes_used == (uint64_t)N * U && st.evictions == 0,
	      "round %d: the cache full of O: %llu bytes, %llu evictions", r,
	      (unsigned long long)st.bytes_used, (unsigned long long)st.evictions);
	/* O's eviction order: a random permutation */
	for (uint32_t c = 0; c < N; c++)
		m.order[c] = c;
	for (uint32_t c = N; c > 1; c--) {
		uint32_t k = (uint32_t)(rnd(s) % c), t = m.order[c - 1];

		m.order[c - 1] = m.order[k];
		m.order[k] = t;
	}
	/* marked by a plan, then read by it unit by unit in that order (each
	 * unit's last use: no plan needs it then) */
	cachetier_plan_now(ct, now);
	ok &= cachetier_plan_mark(o, 0, (uint64_t)N * U, now + 5) == 0;
	for (uint32_t i = 0; i < N; i++) {
		ok &= cachetier_plan_done(o, (uint64_t)m.order[i] * U, U, &lo, &hi) == 0 &&
		      lo == (uint64_t)m.order[i] * U && hi == lo + U;
		m.valid[i] = 1;
	}
	CHECK(ok, "round %d: reads and the plan's marks", r);
	used = N;
	for (uint32_t i = 0; i < NB; i++) {
		ssize_t n;

		if (used + 1 > N) {
			uint64_t u0 = m.units;

			m_evict(&m, 1);
			used -= m.units - u0;
		}
		used++;
		CHECK(cachetier_plan_mark(b, (uint64_t)i * U, U, now + 1) == 0,
		      "round %d: mark B %u", r, i);
		n = cachetier_obj_pread_probe(b, buf, sizeof(buf), (uint64_t)i * U);
		CHECK(n == (ssize_t)sizeof(buf), "round %d: probe of B's unit %u: %zd", r, i, n);
		fills_idle(ct); /* its eviction's punches ended */
	}
	stats(ct, &st);
	for (uint32_t c = 0; c < N; c++)
		bad_valid += cachetier_obj_range_cached(o, (uint64_t)c * U, U) != m.valid[c];
	fd = data_file(dir, (uint64_t)N * U, path, sizeof(path)) ? open(path, O_RDONLY) : -1;
	CHECK(fd >= 0, "round %d: O's data file", r);
	for (uint32_t c = 0; fd >= 0 && c < N; c++) {
		off_t at = lseek(fd, (off_t)c * U, SEEK_DATA);
		int data = at == (off_t)c * U;

		bad_hole += data != m.valid[c];
	}
	if (fd >= 0)
		close(fd);
	printf("round %d: %llu evictions, %llu units in %llu holes (mean %.2f units a hole)\n", r,
	       (unsigned long long)st.evictions, (unsigned long long)st.evict_units,
	       (unsigned long long)st.punches,
	       st.punches ? (double)m.runs_units / (double)st.punches : 0.0);
	CHECK(bad_valid == 0, "round %d: %d of O's units valid or not against the model", r,
	      bad_valid);
	CHECK(bad_hole == 0, "round %d: %d of O's units data or hole against the model", r,
	      bad_hole);
	CHECK(st.bytes_used == used * U && used == (N - m.units) + NB,
	      "round %d: %llu bytes used, want %llu", r, (unsigned long long)st.bytes_used,
	      (unsigned long long)(used * U));
	CHECK(st.evictions == m.evictions && st.evict_units == m.units,
	      "round %d: %llu evictions of %llu units, want %llu of %llu", r,
	      (unsigned long long)st.evictions, (unsigned long long)st.evict_units,
	      (unsigned long long)m.evictions, (unsigned long long)m.units);
	CHECK(st.punches == m.punches, "round %d: %llu holes punched, want %llu", r,
	      (unsigned long long)st.punches, (unsigned long long)m.punches);
	for (uint32_t c = 0; c < N; c++) {
		if (m.valid[c])
			ok &= obj_exact(o, o_data, (uint64_t)c * U, U);
	}
	CHECK(ok, "round %d: O's valid units read exact", r);
	tier_end(ct, be, o, b, NULL);
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "prun", 20261201u);
	uint64_t s = seed * 2654435761u + 1;
	unsigned char *o = src_object(tmpdir, "o.tar", (size_t)N * U, &s),
		      *b = src_object(tmpdir, "b.tar", (size_t)NB * U, &s);

	for (int r = 0; r < 4; r++)
		round_run(r, o, &s);
	free(o);
	free(b);
	return test_end("punchrun", tmpdir, seed);
}
