/*
 * evict_bench.c — the CPU cost of evicting a GB (tests/bench/evict_bench.sh).
 *
 *   evict_bench DIR GB RUNS
 *
 * DIR/src holds 8 objects of GB/8 GiB each (sparse files: the fault://
 * store reads them without a disk), served through fault:// (a store that
 * reads in the calling thread, so every CPU-second is this process's). Each
 * run reads the data through a fresh cache tier (8 MiB chunks of 64 KiB
 * units, readahead, as the daemon's defaults), twice: with a cache larger than the data (the
 * baseline: the same fills, no eviction) and with a cache of a quarter of it (about three quarters
 * of the bytes are evicted). E1 reads every object in order, 1 MiB at a time (whole chunks, evicted
 * a chunk at a time); E2 reads every 100 KB sample once in a shuffled order (seed 1: random misses
 * that would evict fill only their units, evicted a few units at a time, as a shuffled or planned
 * epoch's); E3 (with EB_PLAN: a tree with cachetier_plan_done) reads E2's samples in E2's order
 * as a planned epoch does (every sample marked first at its place in the order, the plan's
 * position moved as it reads, each sample read by the plan after its read, its units shared with
 * a neighbour not read yet marked again for it: the others are then needed by no plan, the units
 * a planned epoch's evictions take first, and the only ones an eviction's longer punches take
 * ahead of their turn). Process CPU (user +
 * system) per side is measured by getrusage; the row is the
 * difference per GiB evicted, median of RUNS runs. The difference holds all the smaller
 * cache costs more or less: eviction, but also E2's extra fill requests (a random miss that
 * would evict fills only its units) and less writeback (punched bytes are never synced): each
 * pass's fills and bytes fetched are printed. Not a test: it prints a table.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../unit/test_rng.h" /* the tests' one xorshift64: rnd */
#include "backend.h"
#include "cachetier.h"
#ifdef EB_POLICY
#include "fetch.h"
#endif

#define NOBJ 8
#define MiB  (1024.0 * 1024.0)

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

#define SAMPLE (100u * 1000u) /* E2's reads: a sample of 100 KB */

/* E2's order: every sample of every object, shuffled (seed 1). */
static uint64_t *samples(uint64_t each, size_t *n)
{
	size_t per = (size_t)((each + SAMPLE - 1) / SAMPLE), k = 0;
	uint64_t *v = malloc(per * NOBJ * sizeof(*v)), x = 88172645463325252ull;

	if (!v)
		exit(1);
	for (int i = 0; i < NOBJ; i++)
		for (size_t j = 0; j < per; j++)
			v[k++] = (uint64_t)i << 48 | j * SAMPLE;
	for (size_t i = k; i > 1; i--) {
		uint64_t t;
		size_t r;

		r = (size_t)(rnd(&x) % i);
		t = v[i - 1];
		v[i - 1] = v[r];
		v[r] = t;
	}
	*n = k;
	return v;
}

/* One pass through a fresh tier of cache bytes in DIR/cache-N: every
 * object read in order (random 0), or every sample of 100 KB in a shuffled
 * order (random 1); returns CPU-s, *evicted the bytes evicted. */
/* The tier's own CPU accounting (cachetier_stats.evict_cpu_ns, flush_cpu_ns:
 * the threads making room, the threads writing maps) of the last pass, in
 * s; evict_bench.sh defines EB_CPU_STATS where the tree has them. */
static double room_s, flush_s;
/* The holes the last pass punched (cachetier_stats.punches; -1 where the
 * tree has no such count: evict_bench.sh defines EB_PUNCHES where it has). */
static double punches;
/* The puncher thread's CPU of the last pass, in s (cachetier_stats.punch_cpu_ns; -1 where the
 * tree has none: evict_bench.sh defines EB_PUNCH_CPU where it has) */
static double punch_s;
/* ... and its batches (wake-ups that found punches queued: punch_batches,
 * with EB_PUNCH_CPU; -1 without) */
static double punch_b;
/* EB_ROOM (evict_bench.sh, where the tree has cachetier_stats.room_waits):
 * each pass's log line gives the room counters too */
/* The units the last pass's evictions looked at in their objects' kept
 * order and the units they evicted (cachetier_stats.evict_looked,
 * evict_units; -1 where the tree has none: evict_bench.sh defines
 * EB_LOOKED where it has). With EVICT_BENCH_VERIFY=1 in the environment
 * (a tree with EB_LOOKED), every pick and every eviction's list is also
 * made the old way and compared (cachetier_evict_verify: slower, not for
 * timing): sorted is the units the old sort looked at, differ the picks
 * and lists that differed. */
static double looked, units, sorted, differ;

static double pass(const char *dir, struct backend *be, uint64_t cache, int n, int random,
		   uint64_t *evicted, uint64_t *evictions)
{
	struct cachetier_obj *objs[NOBJ];
	uint64_t sizes[NOBJ], *order = NULL;
	size_t norder = 0;
#ifdef EB_PLAN
	size_t *pos = NULL, per; /* E3: each sample's place in the order */
#endif
	struct cachetier_config cc = {0};
	struct cachetier_stats st;
	struct cachetier *ct;
	char cdir[600], cmd[700];
	static char buf[1 << 20];
	double t0;
	int err;

	snprintf(cdir, sizeof(cdir), "%s/cache-%d", dir, n);
	cc.cache_dir = cdir;
	cc.source = "evict-bench";
	cc.cache_size_bytes = cache;
	cc.min_free_bytes = 1;
	/* the daemon's defaults (fs/core/fs_opt.c): 8 MiB chunks, 4
	 * connections (fill threads: one more), a window of 4 chunks */
	cc.chunk_bytes = 8u << 20;
	cc.readahead_max_bytes = 32u << 20;
	cc.fill_threads = 5;
#ifdef EB_DURABLE_DELAY_S
	/* the option table's --durable-delay (evict_bench.sh reads it there) */
	cc.durable_delay_s = EB_DURABLE_DELAY_S;
#endif
	err = cachetier_open(&ct, &cc, be);
	if (err < 0) {
		fprintf(stderr, "cachetier_open %s: %s\n", cdir, strerror(-err));
		exit(1);
	}
#ifdef EB_POLICY /* a tree whose store takes its fill rules from the fetch scheduler */
	cachetier_set_policy(ct, fetch_store_rules()); /* the scheduler's, as the daemon's store */
#endif
	for (int i = 0; i < NOBJ; i++) {
		struct backend_objinfo info;
		char key[32];

		snprintf(key, sizeof(key), "obj-%d", i);
		if (backend_stat(be, key, &info) < 0 ||
		    cachetier_obj_open(ct, &info, CACHETIER_RAW, &objs[i]) < 0) {
			fprintf(stderr, "open %s failed\n", key);
			exit(1);
		}
		sizes[i] = info.size;
	}
	if (random)
		order = samples(sizes[0], &norder);
#ifdef EB_PLAN
	/* E3: the whole epoch marked first, as the scheduler's plan marks
	 * its lookahead: each sample at its place in the order */
	per = (size_t)((sizes[0] + SAMPLE - 1) / SAMPLE);
	if (random == 2) {
		pos = malloc(norder * sizeof(*pos));
		if (!pos)
			exit(1);
		cachetier_plan_now(ct, 0);
		for (size_t k = 0; k < norder; k++) {
			int i = (int)(order[k] >> 48);
			uint64_t off = order[k] & ((1ull << 48) - 1);

			pos[(size_t)i * per + off / SAMPLE] = k;
			cachetier_plan_mark(objs[i], off,
					    off + SAMPLE <= sizes[i] ? SAMPLE : sizes[i] - off,
					    (uint32_t)k);
		}
	}
#endif
#ifdef EB_LOOKED
	if (getenv("EVICT_BENCH_VERIFY") && atoi(getenv("EVICT_BENCH_VERIFY")))
		cachetier_evict_verify(ct, 1, NULL);
#endif
	t0 = cpu_s();
	for (int i = 0; !random && i < NOBJ; i++) {
		for (uint64_t off = 0; off < sizes[i]; off += sizeof(buf)) {
			ssize_t r = cachetier_obj_pread(objs[i], buf, sizeof(buf), off);

			if (r <= 0) {
				fprintf(stderr, "read %d at %llu: %zd\n", i,
					(unsigned long long)off, r);
				exit(1);
			}
		}
	}
	for (size_t k = 0; k < norder; k++) {
		int i = (int)(order[k] >> 48);
		uint64_t off = order[k] & ((1ull << 48) - 1);
		size_t len = off + SAMPLE <= sizes[i] ? SAMPLE : (size_t)(sizes[i] - off);
		ssize_t r;

#ifdef EB_PLAN
		if (random == 2) /* E3: the plan's place */
			cachetier_plan_now(ct, (uint32_t)k);
#endif
		r = cachetier_obj_pread(objs[i], buf, len, off);
#ifdef EB_PLAN
		if (random == 2) { /* ... its read: needed by no plan now, but for
				    * units its neighbours not read yet share */
			uint64_t lo, hi, j = off / SAMPLE;

			cachetier_plan_done(objs[i], off, len, &lo, &hi);
			for (int d = -1; d <= 1; d += 2) {
				uint64_t nj = j + (uint64_t)(int64_t)d, noff = nj * SAMPLE;

				if ((d < 0 && j == 0) || noff >= sizes[i] || pos[i * per + nj] <= k)
					continue;
				cachetier_plan_mark(objs[i], noff,
						    noff + SAMPLE <= sizes[i] ? SAMPLE
									      : sizes[i] - noff,
						    (uint32_t)pos[i * per + nj]);
			}
		}
#endif
		if (r != (ssize_t)len) {
			fprintf(stderr, "read %d at %llu: %zd\n", i, (unsigned long long)off, r);
			exit(1);
		}
	}
	free(order);
#ifdef EB_PLAN
	free(pos);
#endif
	for (int i = 0; i < NOBJ; i++)
		cachetier_obj_unref(objs[i]);
	memset(&st, 0, sizeof(st));
	cachetier_get_stats(ct, &st);
#ifdef EB_PUNCH_CPU
	/* the punches still queued are the pass's too: their CPU is counted
	 * once they are done (close would drain them, after the stats) */
	while (st.punches_pending > 0) {
		nanosleep(&(struct timespec){0, 1000000}, NULL);
		cachetier_get_stats(ct, &st);
	}
	punch_s = st.punch_cpu_ns / 1e9;
	punch_b = (double)st.punch_batches;
#else
	punch_s = punch_b = -1;
#endif
	sorted = differ = -1;
#ifdef EB_LOOKED
	{
		uint64_t vc[CT_EVV_N];

		cachetier_evict_verify(ct, -1, vc);
		if (vc[2]) { /* verified */
			sorted = (double)vc[7];
			differ = (double)(vc[3] + vc[5]);
		}
	}
#endif
	cachetier_close(ct);
	t0 = cpu_s() - t0;
	*evicted = st.evicted_bytes;
	*evictions = st.evictions;
#ifdef EB_CPU_STATS
	room_s = st.evict_cpu_ns / 1e9;
	flush_s = st.flush_cpu_ns / 1e9;
#else
	room_s = flush_s = -1;
#endif
#ifdef EB_PUNCHES
	punches = (double)st.punches;
#else
	punches = -1;
#endif
#ifdef EB_LOOKED
	looked = (double)st.evict_looked;
	units = (double)st.evict_units;
#else
	looked = units = -1;
#endif
	fprintf(stderr,
		"  pass %s, cache %llu MiB: %llu fills, %llu MiB fetched, %.3f CPU-s (making room "
		"%.3f, writing maps %.3f, puncher %.3f), %.0f punches in %.0f batches\n",
		random == 2 ? "shuffled, planned"
		: random    ? "shuffled"
			    : "in order",
		(unsigned long long)(cache >> 20), (unsigned long long)st.fills,
		(unsigned long long)(st.bytes_fetched >> 20), t0, room_s, flush_s, punch_s, punches,
		punch_b);
#ifdef EB_ROOM
	/* the threads making room: their wall time, and how often and long
	 * they waited for another thread's eviction to end */
	fprintf(stderr, "  making room %llu ms (wall), of it %llu ms in %llu room waits\n",
		(unsigned long long)st.room_make_ms, (unsigned long long)st.room_wait_ms,
		(unsigned long long)st.room_waits);
#endif
	if (units > 0)
		fprintf(stderr,
			"  %.0f units evicted, %.0f looked at in the kept order (%.2f a unit)%s\n",
			units, looked, looked / units, sorted < 0 ? "" : ",");
	if (units > 0 && sorted >= 0)
		fprintf(
		    stderr,
		    "  verified: the old sort looked at %.0f (%.2f a unit), %.0f picks or lists "
		    "differed\n",
		    sorted, sorted / units, differ);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cdir);
	if (system(cmd) != 0)
		fprintf(stderr, "warning: could not remove %s\n", cdir);
	return t0;
}

static int dbl_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	char src[600], path[700];
	struct backend *be;
	double gb, per[64], base[64], ev[64], room[64], flush[64], punch[64], pcpu[64], own[64],
	    look[64];
	uint64_t total, each, evicted = 0, evictions = 0, e0, n0;
	int runs, err;

	if (argc != 4 || (gb = atof(argv[2])) <= 0 || (runs = atoi(argv[3])) < 1 || runs > 64) {
		fprintf(stderr, "usage: %s DIR GB RUNS\n", argv[0]);
		return 2;
	}
	each = (uint64_t)(gb * 1024 * MiB / NOBJ) & ~(uint64_t)0xfffff;
	total = each * NOBJ;
	snprintf(src, sizeof(src), "%s/src", argv[1]);
	mkdir(src, 0755);
	for (int i = 0; i < NOBJ; i++) {
		int fd;

		snprintf(path, sizeof(path), "%s/obj-%d", src, i);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || ftruncate(fd, (off_t)each) < 0 || close(fd) < 0) {
			perror(path);
			return 1;
		}
	}
	snprintf(path, sizeof(path), "fault://%s", src);
	err = backend_open(&be, path, NULL);
	if (err < 0) {
		fprintf(stderr, "backend_open %s: %s\n", path, strerror(-err));
		return 1;
	}
	printf("%-44s %10s %10s %12s\n", "row (median of runs)", "baseline", "evicting",
	       "CPU-s/GiB ev");
#ifdef EB_PLAN
	const int passes = 3; /* E1, E2, E3 */
#else
	const int passes = 2;
#endif
	for (int random = 0; random < passes; random++) {
		static const char *const row[] = {"E1", "E2", "E3"};

		for (int r = 0; r < runs; r++) {
			/* alternate which side goes first: drift of a shared
			 * machine falls on both */
			double a, b;

			if (r & 1) {
				b = pass(argv[1], be, total / 4, 1, random, &evicted, &evictions);
				room[r] = room_s;
				flush[r] = flush_s;
				punch[r] = punches;
				pcpu[r] = punch_s;
				look[r] = units > 0 ? looked / units : -1;
				a = pass(argv[1], be, total * 2, 0, random, &e0, &n0);
			} else {
				a = pass(argv[1], be, total * 2, 0, random, &e0, &n0);
				b = pass(argv[1], be, total / 4, 1, random, &evicted, &evictions);
				room[r] = room_s;
				flush[r] = flush_s;
				punch[r] = punches;
				pcpu[r] = punch_s;
				look[r] = units > 0 ? looked / units : -1;
			}
			/* the eviction's own CPU per GB (1e9 bytes) evicted: the
			 * threads making room and the puncher (-1: not counted) */
			own[r] =
			    evicted && pcpu[r] >= 0 ? (room[r] + pcpu[r]) / (evicted / 1e9) : -1;
			if (evicted) {
				room[r] /= evicted / (1024 * MiB);
				flush[r] /= evicted / (1024 * MiB);
				if (punch[r] >= 0)
					punch[r] /= evicted / (1024 * MiB);
				if (pcpu[r] >= 0)
					pcpu[r] /= evicted / (1024 * MiB);
			}
			base[r] = a;
			ev[r] = b;
			per[r] = evicted ? (b - a) / (evicted / (1024 * MiB)) : 0;
			fprintf(stderr,
				"%s run %d: no eviction %.3f CPU-s (evicted %llu B), a quarter "
				"cache %.3f CPU-s, evicted %.3f GiB in %llu evictions\n",
				row[random], r + 1, a, (unsigned long long)e0, b,
				evicted / (1024 * MiB), (unsigned long long)evictions);
		}
		qsort(per, (size_t)runs, sizeof(*per), dbl_cmp);
		qsort(base, (size_t)runs, sizeof(*base), dbl_cmp);
		qsort(ev, (size_t)runs, sizeof(*ev), dbl_cmp);
		qsort(room, (size_t)runs, sizeof(*room), dbl_cmp);
		qsort(flush, (size_t)runs, sizeof(*flush), dbl_cmp);
		qsort(punch, (size_t)runs, sizeof(*punch), dbl_cmp);
		qsort(pcpu, (size_t)runs, sizeof(*pcpu), dbl_cmp);
		qsort(own, (size_t)runs, sizeof(*own), dbl_cmp);
		qsort(look, (size_t)runs, sizeof(*look), dbl_cmp);
		printf("%-44s %10.3f %10.3f %12.3f  (target <= 0.1)\n",
		       random == 2 ? "E3 evict: E2's samples read by a plan, cache 1/4"
		       : random	   ? "E2 evict: 100 KB samples shuffled, cache 1/4"
				   : "E1 evict: 8 objects in order, cache 1/4",
		       base[runs / 2], ev[runs / 2], per[runs / 2]);
		/* the tier's own accounting of the quarter cache's pass, per GiB
		 * evicted: the threads making room (room check, victims, map
		 * unlinks, punches) and writing maps (fdatasync, map writes) */
		printf("%-44s %10s %10.3f %12.3f  (making room; writing maps)\n",
		       random == 2 ? "E3 own: making room, writing maps /GiB"
		       : random	   ? "E2 own: making room, writing maps /GiB"
				   : "E1 own: making room, "
				     "writing maps /GiB",
		       "", room[runs / 2], flush[runs / 2]);
		/* fallocate calls of the quarter cache's pass per GiB evicted
		 * (-1: the tree does not count them) */
		printf("%-44s %10s %10s %12.0f  (punches)\n",
		       random == 2 ? "E3 holes punched /GiB"
		       : random	   ? "E2 holes punched /GiB"
				   : "E1 holes punched /GiB",
		       "", "", punch[runs / 2]);
		/* E1c, E2c: the cost of evicting a GB in its own row, against its
		 * budget (issue 37: <= 0.1 CPU-s per GB): the threads making room
		 * (fill workers, flusher: victims, takes, map unlinks, punches made
		 * there) plus the puncher thread, per GB (1e9 B) evicted */
		printf("%-44s %10.3f %10.3f %12.3f  (CPU-s/GB evicted: making room; puncher; "
		       "their sum; %.2fx the budget of 0.1)\n",
		       random == 2 ? "E3c eviction's own CPU /GB"
		       : random	   ? "E2c eviction's own CPU /GB"
				   : "E1c eviction's own CPU /GB",
		       room[runs / 2] * 1e9 / (1024 * MiB), pcpu[runs / 2] * 1e9 / (1024 * MiB),
		       own[runs / 2], own[runs / 2] / 0.1);
		/* units evictions looked at (in their objects' kept order) per
		 * unit evicted (-1: the tree does not count them; before the
		 * kept order an eviction looked at every unit of its object
		 * holding bytes: EVICT_BENCH_VERIFY=1 counts those too) */
		printf("%-44s %10s %10s %12.2f  (units looked at per unit evicted)\n",
		       random == 2 ? "E3 units looked at /unit evicted"
		       : random	   ? "E2 units looked at /unit evicted"
				   : "E1 units looked at /unit evicted",
		       "", "", look[runs / 2]);
	}
	backend_close(be);
	return 0;
}
