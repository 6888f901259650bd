/*
 * test_chunkstore.c — the cache tier's unit store for remote objects,
 * without a mount, against the fault:// test store (a local directory
 * served as if remote, with injected delays and failures).
 *
 * Every read is compared byte for byte with the source file (random data,
 * seed printed; TEST_SEED repeats a run). Covered: random reads across
 * chunk boundaries through pread and through read_begin's fd; 8 concurrent
 * readers while a small cache evicts, with the cache directory's real disk
 * usage sampled against the limit; readahead of a sequential reader and
 * none for random reads (through the fetch scheduler's streams, fetch/:
 * two readers of one object keep their own windows, a seek resets only
 * its reader's); persistence across a reopen with the store gone;
 * a fill killed with SIGKILL (then everything reread exactly); a corrupt
 * map; fill errors reaching the reader and a retry succeeding; fills cut
 * midway leaving nothing on the disk, then exact bytes; a changed
 * object never served from old chunks; batch fills (the store's batch
 * read: requests, items, no room, failed, cut and replaced items);
 * objects of an earlier mount opened by readers while an eviction loads
 * them; cached units damaged (a byte
 * flipped, a hole, the data file cut) between opens, under another tier
 * on the directory and under the running tier; reads begun on one thread
 * and ended on another; a fill's first units read while the store holds
 * its last (test_land); the durability delay (test_durable: units younger
 * than it named in no map, then kill -9 and nothing of them trusted; a
 * clean close names every unit; units older than it named by the
 * flusher); the punches of one eviction (test_punch_join: units joined
 * across gaps that hold nothing, not across a wide gap, a locked one or
 * one holding bytes; exact punch counts); a fill whose room an eviction in
 * flight covers starting without a room wait (test_room_inflight); an eviction's punch
 * on the puncher, the fill not waiting for it, its units neither served nor refilled
 * until punched, and close punching what is queued (test_punch_queue); a dozen one-unit
 * evictions all queued, punched in one batch with adjacent units merged (test_punch_batch);
 * idle read locks
 * (test_idle_locks: exact fcntl counts of reads of held units, own and another tier's eviction
 * after a release request, a close); the fetch rules the store asks (test_rule_*:
 * fetch/fetch_rules.c, each failing with its no-rules answer; the eight it asked
 * before issue 36 #2 are test_rules.c's). Helpers shared with the other unit tests
 * of the tier: test_util.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "cachetier.h"
#include "check.h"
#include "fetch.h"
#include "test_util.h"

#define CHUNK	(64u * 1024)
#define NOBJ	8
#define NCACHED 5 /* test_reopen_race: objects an earlier mount cached */
/* test_reopen_race's rounds: 60, or 20 under TSan, where a round costs some
 * 1.1 s and 60 took chunkstore near its time limit (each round is the
 * whole race again; TSan sees the race within a round) */
#if defined(__SANITIZE_THREAD__)
#define RACE_ROUNDS 20
#else
#define RACE_ROUNDS 60
#endif

static char tmpdir[256];
static unsigned char *data[NOBJ + 1]; /* NOBJ: the "big" object */
static size_t sizes[NOBJ + 1];
static char keys[NOBJ + 1][32];

static void write_src(const char *key, const void *buf, size_t len)
{
	char path[sizeof(tmpdir) + 5 + 300];

	snprintf(path, sizeof(path), "%s/src/%s", tmpdir, key);
	write_file(path, buf, len);
}

static struct backend *store(const char *query)
{
	char src[512];
	struct backend *be;
	int err;

	snprintf(src, sizeof(src), "fault://%s/src%s%s", tmpdir, *query ? "?" : "", query);
	err = backend_open(&be, src, NULL);
	if (err < 0) {
		fprintf(stderr, "backend_open %s: %d\n", src, err);
		exit(1);
	}
	return be;
}

/* A cache tier in tmpdir/<name> with chunks of chunk bytes; the source
 * string is fixed so that stores with different fault settings share one
 * per-source directory. */
/* cachetier_config.durable_delay_s of the tiers tier() opens (test_durable
 * sets it; 0 elsewhere: maps within about a second) */
static double durable_delay_s;

static struct cachetier *tier_chunk(struct backend *be, const char *name, uint64_t size,
				    unsigned threads, uint32_t chunk)
{
	struct cachetier_config cc;
	struct cachetier *ct;
	char dir[512];

	snprintf(dir, sizeof(dir), "%s/%s", tmpdir, name);
	tier_config(&cc, dir, size, threads, chunk);
	cc.durable_delay_s = durable_delay_s;
	ct = tier_open(&cc, be);
	cachetier_set_policy(ct, fetch_store_rules()); /* the scheduler's, as fetch_new installs */
	return ct;
}

static struct cachetier *tier(struct backend *be, const char *name, uint64_t size, unsigned threads)
{
	return tier_chunk(be, name, size, threads, CHUNK);
}

static struct cachetier_obj *obj(struct cachetier *ct, struct backend *be, int i)
{
	struct backend_objinfo info;
	struct cachetier_obj *o = NULL;
	int err = backend_stat(be, keys[i], &info);

	CHECK(err == 0, "stat %s: %d", keys[i], err);
	err = cachetier_obj_open(ct, &info, CACHETIER_RAW, &o);
	CHECK(err == 0, "open %s: %d", keys[i], err);
	if (err)
		exit(1);
	return o;
}

/* The fetch scheduler the readahead tests read through (fetch/fetch.h:
 * the store queues readahead only as a scheduler's stream asks), and the
 * reader they read as; NULL: reads go to the store directly (no
 * readahead). */
static struct fetch *fx;
static uint32_t fx_reader;

/* Read [off, off+len) of object i, by pread (mode 0) or through the fd of
 * read_begin (mode 1), through fx when set; 0 when the bytes are exact,
 * else the error. */
static int read_check(struct cachetier_obj *o, int i, uint64_t off, size_t len, int mode)
{
	unsigned char *buf = malloc(len ? len : 1);
	size_t want = off >= sizes[i] ? 0 : (len < sizes[i] - off ? len : sizes[i] - off);
	int err = 0;

	if (mode == 0) {
		ssize_t n = fx ? fetch_pread(fx, fx_reader, o, buf, len, off)
			       : cachetier_obj_pread(o, buf, len, off);

		if (n < 0)
			err = (int)n;
		else if ((size_t)n != want)
			err = -ERANGE;
	} else {
		struct cachetier_pin *pin;
		uint64_t fd_off;
		int fd;

		err = fx ? fetch_read_begin(fx, fx_reader, o, off, want, &fd, &fd_off, &pin)
			 : cachetier_obj_read_begin(o, off, want, &fd, &fd_off, &pin);
		if (err == 0) {
			if (pread(fd, buf, want, (off_t)fd_off) != (ssize_t)want)
				err = -ERANGE;
			cachetier_obj_read_end(pin);
		}
	}
	if (err == 0 && memcmp(buf, data[i] + off, want) != 0)
		err = -EILSEQ;
	free(buf);
	return err;
}

static char *data_dir(struct cachetier *ct)
{
	static char path[600];

	snprintf(path, sizeof(path), "%s/data", cachetier_dir(ct));
	return path;
}

static int count_maps(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		n += strlen(de->d_name) == 20 && strcmp(de->d_name + 16, ".map") == 0;
	closedir(d);
	return n;
}

/* ---- random reads ---- */

static void test_random(uint64_t seed)
{
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-random", 1ull << 30, 4);
	struct cachetier_obj *o[NOBJ + 1];
	uint64_t s = seed;
	int fd, bad = 0;
	uint64_t fo;
	struct cachetier_pin *pin;

	for (int i = 0; i <= NOBJ; i++)
		o[i] = obj(ct, be, i);
	for (int k = 0; k < 400; k++) {
		int i = (int)(rnd(&s) % (NOBJ + 1));
		uint64_t off = rnd(&s) % (sizes[i] + 1);
		size_t len = (size_t)(rnd(&s) % (k % 4 == 0 ? 3 * CHUNK : 5000));
		int err = read_check(o[i], i, off, len, k & 1);

		if (err && bad++ < 5)
			CHECK(err == 0, "random read %d obj %d off %llu len %zu: %d", k, i,
			      (unsigned long long)off, len, err);
	}
	CHECK(bad == 0, "%d random reads wrong", bad);
	CHECK(cachetier_obj_read_begin(o[0], sizes[0], 1, &fd, &fo, &pin) == -EIO && !pin,
	      "past end");
	CHECK(cachetier_obj_read_begin(o[0], sizes[0], 0, &fd, &fo, &pin) == 0,
	      "empty read at end");
	cachetier_obj_read_end(pin);
	for (int i = 0; i <= NOBJ; i++)
		cachetier_obj_unref(o[i]);
	cachetier_close(ct);
	backend_close(be);
}

/* ---- readahead ---- */

static void test_sequential(void)
{
	struct backend *be = store("delay_ms=2");
	struct cachetier *ct = tier(be, "c-seq", 1ull << 30, 4);
	struct cachetier_obj *o = obj(ct, be, NOBJ);
	struct cachetier_stats st, st2;
	size_t step = 16 * 1024, nreads = 0, nchunks = (sizes[NOBJ] + CHUNK - 1) / CHUNK;
	int bad = 0;

	CHECK(fetch_new(ct, &fx) == 0, "fetch_new");
	fx_reader = 1;

	for (uint64_t off = 0; off < sizes[NOBJ]; off += step, nreads++)
		bad += read_check(o, NOBJ, off, step, nreads & 1) != 0;
	CHECK(bad == 0, "%d sequential reads wrong", bad);
	stats(ct, &st);
	printf("sequential: %zu reads, %zu chunks: hits %llu misses %llu readahead_fills %llu "
	       "fetched %llu\n",
	       nreads, nchunks, (unsigned long long)st.hits, (unsigned long long)st.misses,
	       (unsigned long long)st.readahead_fills, (unsigned long long)st.bytes_fetched);
	CHECK(st.readahead_fills > 0, "no readahead");
	CHECK(st.readahead_fills + 2 >= nchunks, "readahead fetched only %llu of %zu chunks",
	      (unsigned long long)st.readahead_fills, nchunks);
	CHECK(st.misses <= nchunks, "misses %llu > chunks %zu", (unsigned long long)st.misses,
	      nchunks);
	CHECK(st.hits + st.misses == nreads, "hits+misses %llu != reads %zu",
	      (unsigned long long)(st.hits + st.misses), nreads);
	/* the first read waited for its fill, which the store delays 2 ms */
	CHECK(st.misses >= 1 && st.miss_wait_ms >= 2, "misses %llu waited %llu ms, not >= 2",
	      (unsigned long long)st.misses, (unsigned long long)st.miss_wait_ms);
	CHECK(st.bytes_fetched == sizes[NOBJ], "fetched %llu, object %zu",
	      (unsigned long long)st.bytes_fetched, sizes[NOBJ]);
	CHECK(st.fills == nchunks, "fills %llu", (unsigned long long)st.fills);
	CHECK(cachetier_obj_cached_bytes(o) == sizes[NOBJ], "cached_bytes %llu",
	      (unsigned long long)cachetier_obj_cached_bytes(o));
	/* again: all hits, nothing fetched */
	for (uint64_t off = 0; off < sizes[NOBJ]; off += step)
		bad += read_check(o, NOBJ, off, step, 0) != 0;
	stats(ct, &st2);
	CHECK(bad == 0, "second pass wrong");
	CHECK(st2.hits - st.hits == nreads && st2.misses == st.misses &&
		  st2.miss_wait_ms == st.miss_wait_ms,
	      "second pass not all hits (waited %llu ms more)",
	      (unsigned long long)(st2.miss_wait_ms - st.miss_wait_ms));
	CHECK(st2.bytes_fetched == st.bytes_fetched, "second pass fetched");
	CHECK(st2.bytes_used == sizes[NOBJ] && st2.bytes_limit == 1ull << 30,
	      "bytes_used %llu limit %llu", (unsigned long long)st2.bytes_used,
	      (unsigned long long)st2.bytes_limit);
	fetch_free(fx);
	fx = NULL;
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
}

/* The free-space check (cachetier__disk_avail) calls statvfs once per 4
 * chunks made room for (a quarter of the 16-chunk reserve here), not once
 * per fill: the big object read in order by one fill thread, a chunk a
 * fill, is 65 fills and ceil(65 / 4) = 17 calls (the old check: 65). With
 * the reserve of a byte (tier_config) the bound is 0: a call per fill.
 * The disk of tmpdir has far more than the reserve free. */
static void test_free_check(void)
{
	struct backend *be = store("");
	uint64_t nchunks = (sizes[NOBJ] + CHUNK - 1) / CHUNK;

	for (int strict = 0; strict < 2; strict++) {
		struct cachetier_config cc;
		struct cachetier_stats st;
		struct cachetier_obj *o;
		struct cachetier *ct;
		char dir[512];
		int bad = 0;

		snprintf(dir, sizeof(dir), "%s/c-free%d", tmpdir, strict);
		tier_config(&cc, dir, 1ull << 30, 1, CHUNK);
		if (!strict)
			cc.min_free_bytes = 16 * CHUNK;
		ct = tier_open(&cc, be);
		cachetier_set_policy(ct, fetch_store_rules());
		o = obj(ct, be, NOBJ);
		CHECK(fetch_new(ct, &fx) == 0, "fetch_new");
		fx_reader = 1;
		for (uint64_t off = 0; off < sizes[NOBJ]; off += CHUNK)
			bad += read_check(o, NOBJ, off, CHUNK, 0) != 0;
		CHECK(bad == 0, "free check: %d reads wrong", bad);
		stats(ct, &st);
		CHECK(st.fills == nchunks &&
			  st.room_statfs == (strict ? nchunks : (nchunks + 3) / 4),
		      "free check (reserve %llu): %llu fills, %llu statvfs calls",
		      (unsigned long long)cc.min_free_bytes, (unsigned long long)st.fills,
		      (unsigned long long)st.room_statfs);
		fetch_free(fx);
		fx = NULL;
		cachetier_obj_unref(o);
		cachetier_close(ct);
	}
	backend_close(be);
}

/* Two readers of the big object at once (fetch/: a stream per reader and
 * object). Reader 1 reads [0, 24 chunks) in order in 16 KiB reads; after
 * each of its reads, reader 2 reads 4 KiB at a chunk of [40, 64) far from
 * its last (a seek every read). Reader 1's window (from offset 0: the
 * whole 8 chunks at once) stays open through reader 2's seeks: chunks
 * 0..31 are fetched as readahead (its last read ends at chunk 24, whose
 * window reaches chunk 31), reader 2's 12 chunks on demand (a seek opens
 * no window). Then reader 1 seeks (to chunk 34) and reads on 4 KiB: its
 * window is reset, no readahead. One stream for the object (reader 2's
 * reads resetting reader 1's window, as c787ef0's window per object did)
 * gives 9 readahead fills (the first read's window, chunks 0..8), every
 * other chunk on demand. Exact counts: before the count, chunks 0..31 are
 * read straight from the store (waiting for what is queued) and every fill
 * has ended (fills_idle); a chunk queued ahead counts as readahead even
 * when its reader reached it first. */
static void test_streams_seek(void)
{
	static const unsigned seeks[] = {40, 52, 44, 56, 48, 60, 42, 54, 46, 58, 50, 62};
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-streams", 1ull << 30, 4);
	struct cachetier_obj *o = obj(ct, be, NOBJ);
	struct cachetier_stats st;
	size_t step = 16 * 1024, k = 0;
	int bad = 0;

	CHECK(fetch_new(ct, &fx) == 0, "fetch_new");
	for (uint64_t off = 0; off < 24 * CHUNK; off += step) {
		fx_reader = 1;
		bad += read_check(o, NOBJ, off, step, (int)(k & 1)) != 0;
		if (off % (2 * CHUNK) == 0 && k < sizeof(seeks) / sizeof(seeks[0])) {
			fx_reader = 2;
			bad += read_check(o, NOBJ, seeks[k] * (uint64_t)CHUNK + 100, 4096, 0) != 0;
			k++;
		}
	}
	/* every chunk reader 1's window could have queued is waited for: a
	 * read of them straight from the store (no stream) waits for those
	 * queued or filling and fills any not queued on demand; then no fill
	 * is left queued or running */
	{
		struct cachetier_pin *pin;
		uint64_t fd_off;
		int fd;

		CHECK(cachetier_obj_read_begin(o, 0, 32 * (uint64_t)CHUNK, &fd, &fd_off, &pin) == 0,
		      "streams: chunks 0..31");
		cachetier_obj_read_end(pin);
	}
	fills_idle(ct);
	stats(ct, &st);
	printf("streams: reader 1 in order, reader 2 seeking: readahead_fills %llu fills %llu\n",
	       (unsigned long long)st.readahead_fills, (unsigned long long)st.fills);
	CHECK(bad == 0, "%d reads wrong", bad);
	CHECK(k == sizeof(seeks) / sizeof(seeks[0]), "reader 2 read %zu times", k);
	CHECK(st.readahead_fills == 32 && st.fills == 32 + 12,
	      "two streams: readahead_fills %llu (want 32), fills %llu (want 44)",
	      (unsigned long long)st.readahead_fills, (unsigned long long)st.fills);
	/* reader 1 seeks: its own window resets (no readahead from there) */
	fx_reader = 1;
	bad += read_check(o, NOBJ, 34 * (uint64_t)CHUNK, 4096, 0) != 0;
	bad += read_check(o, NOBJ, 34 * (uint64_t)CHUNK + 4096, 4096, 1) != 0;
	fills_idle(ct);
	stats(ct, &st);
	CHECK(bad == 0, "%d reads wrong after the seek", bad);
	CHECK(st.readahead_fills == 32 && st.fills == 32 + 12 + 1,
	      "after reader 1's seek: readahead_fills %llu (want 32), fills %llu (want 45)",
	      (unsigned long long)st.readahead_fills, (unsigned long long)st.fills);
	fetch_free(fx);
	fx = NULL;
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
}

static void test_random_no_readahead(uint64_t seed)
{
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-rand-ra", 1ull << 30, 4);
	struct cachetier_obj *o = obj(ct, be, NOBJ);
	size_t nchunks = (sizes[NOBJ] + CHUNK - 1) / CHUNK;
	char *touched = calloc(nchunks, 1);
	uint64_t s = seed ^ 0x5555, touched_bytes = 0;
	struct cachetier_stats st;
	int bad = 0;

	uint64_t prev_end = 0;

	CHECK(fetch_new(ct, &fx) == 0, "fetch_new");
	fx_reader = 1;

	for (int k = 0; k < 40; k++) {
		uint64_t off = CHUNK + rnd(&s) % (sizes[NOBJ] - CHUNK - 4096);
		size_t len = 1 + (size_t)(rnd(&s) % 4096);

		/* within a chunk of the last read is near-sequential by design */
		if (off + CHUNK >= prev_end && off <= prev_end + CHUNK) {
			k--;
			continue;
		}
		prev_end = off + len;

		bad += read_check(o, NOBJ, off, len, k & 1) != 0;
		for (uint64_t c = off / CHUNK; c <= (off + len - 1) / CHUNK; c++)
			touched[c] = 1;
	}
	for (size_t c = 0; c < nchunks; c++) {
		if (touched[c])
			touched_bytes += c + 1 == nchunks ? sizes[NOBJ] - c * CHUNK : CHUNK;
	}
	fills_idle(ct); /* a readahead, had one been queued, has landed */
	stats(ct, &st);
	printf("random: touched %llu bytes, fetched %llu, readahead_fills %llu\n",
	       (unsigned long long)touched_bytes, (unsigned long long)st.bytes_fetched,
	       (unsigned long long)st.readahead_fills);
	CHECK(bad == 0, "%d reads wrong", bad);
	CHECK(st.readahead_fills == 0, "random reads read ahead %llu chunks",
	      (unsigned long long)st.readahead_fills);
	CHECK(st.bytes_fetched == touched_bytes, "fetched %llu for %llu touched",
	      (unsigned long long)st.bytes_fetched, (unsigned long long)touched_bytes);
	fetch_free(fx);
	fx = NULL;
	free(touched);
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
}

/* ---- concurrent readers, small cache ---- */

struct conc {
	struct cachetier *ct;
	struct backend *be;
	struct cachetier_obj **o;
	uint64_t seed;
	int bad;
	int reads;
};

/* Reads each concurrent reader makes (a fixed count, not a time: the
 * test's checks, one per fresh handle's open, are the same in every run
 * of a seed) */
#define CONC_READS 400

static void *reader_main(void *arg)
{
	struct conc *c = arg;
	uint64_t s = c->seed;

	for (int k = 0; k < CONC_READS; k++) {
		int i = (int)(rnd(&s) % NOBJ);
		uint64_t off = rnd(&s) % sizes[i];
		size_t len = 1 + (size_t)(rnd(&s) % CHUNK);
		struct cachetier_obj *o = c->o[i];
		int fresh = rnd(&s) % 8 == 0, err;

		if (fresh) /* sometimes through a fresh handle, else the shared one */
			o = obj(c->ct, c->be, i);
		err = read_check(o, i, off, len, (int)(rnd(&s) & 1));
		if (fresh)
			cachetier_obj_unref(o);
		if (err) {
			if (c->bad++ < 3)
				fprintf(stderr, "concurrent read obj %d off %llu len %zu: %d\n", i,
					(unsigned long long)off, len, err);
		}
		c->reads++;
	}
	return NULL;
}

struct du_mon {
	const char *dir;
	atomic_int *stop;
	uint64_t max;
	int nfiles;
	unsigned samples;    /* samples that saw at least one data file */
	unsigned dir_errors; /* opendir failures: the bound below means nothing then */
};

/* Samples the disk usage of the data files. The files stay open between
 * samples (live chunk files are never unlinked, only punched), so one
 * sample is a quick run of fstat calls rather than a directory walk: less
 * skew between files. */
static void *du_main(void *arg)
{
	struct du_mon *m = arg;
	int fds[64], nfd = 0;

	for (unsigned k = 0; !atomic_load(m->stop); k++) {
		uint64_t b = 0;

		if (k % 64 == 0) { /* pick up new files */
			DIR *d = opendir(m->dir);
			struct dirent *de;

			m->dir_errors += !d;
			for (int i = 0; i < nfd; i++)
				close(fds[i]);
			nfd = 0;
			while (d && (de = readdir(d)) && nfd < 64) {
				if (de->d_name[0] != '.' && strlen(de->d_name) == 16)
					fds[nfd] = openat(dirfd(d), de->d_name, O_RDONLY);
				if (de->d_name[0] != '.' && strlen(de->d_name) == 16 &&
				    fds[nfd] >= 0)
					nfd++;
			}
			if (d)
				closedir(d);
		}
		for (int i = 0; i < nfd; i++) {
			struct stat st;

			if (fstat(fds[i], &st) == 0)
				b += (uint64_t)st.st_blocks * 512;
		}
		m->samples += nfd > 0;
		if (b > m->max) {
			m->max = b;
			m->nfiles = nfd;
		}
		usleep(500);
	}
	for (int i = 0; i < nfd; i++)
		close(fds[i]);
	return NULL;
}

static void test_concurrent(uint64_t seed)
{
	struct backend *be = store("delay_ms=1");
	const uint64_t limit = 24 * CHUNK;
	const unsigned threads = 4;
	struct cachetier *ct = tier(be, "c-conc", limit, threads);
	struct cachetier_obj *o[NOBJ];
	struct conc c[8];
	pthread_t t[8], mt;
	atomic_int stop = 0;
	struct du_mon mon = {data_dir(ct), &stop, 0, 0, 0, 0};
	struct cachetier_stats st;
	int bad = 0, reads = 0;

	for (int i = 0; i < NOBJ; i++)
		o[i] = obj(ct, be, i);
	pthread_create(&mt, NULL, du_main, &mon);
	for (int k = 0; k < 8; k++) {
		c[k] = (struct conc){ct, be, o, seed * 31 + (uint64_t)k + 1, 0, 0};
		pthread_create(&t[k], NULL, reader_main, &c[k]);
	}
	/* the readers end after CONC_READS reads each; the disk monitor samples until then */
	for (int k = 0; k < 8; k++) {
		pthread_join(t[k], NULL);
		bad += c[k].bad;
		reads += c[k].reads;
	}
	atomic_store(&stop, 1);
	pthread_join(mt, NULL);
	stats(ct, &st);
	printf("concurrent: %d reads, fills %llu, evictions %llu (%llu bytes), max on disk %llu "
	       "(limit %llu + %u fill threads x %u), used %llu\n",
	       reads, (unsigned long long)st.fills, (unsigned long long)st.evictions,
	       (unsigned long long)st.evicted_bytes, (unsigned long long)mon.max,
	       (unsigned long long)limit, threads, CHUNK, (unsigned long long)st.bytes_used);
	CHECK(bad == 0, "%d concurrent reads wrong", bad);
	CHECK(reads == 8 * CONC_READS, "%d reads, want %d", reads, 8 * CONC_READS);
	/* the readers' seeded reads touch more distinct chunks than the cache holds */
	CHECK(st.evictions > 0, "no evictions");
	/* the bound below holds for samples that were taken: the data directory opened each
	 * time, data files seen in at least one sample (the readers ran past the first) */
	printf("concurrent: %u samples of the data files, %u opendir failures\n", mon.samples,
	       mon.dir_errors);
	CHECK(mon.dir_errors == 0 && mon.samples > 0 && mon.nfiles > 0,
	      "disk monitor: %u samples, %u opendir failures, %d files at the peak", mon.samples,
	      mon.dir_errors, mon.nfiles);
	/* one chunk per fill thread, two eviction batches (a chunk each
	 * here) of bytes being punched that fills count as freed
	 * (cachetier_evict.c, room_over), plus a block of slack per file for
	 * the short last chunk and the extent tree */
	CHECK(mon.max <= limit + (threads + 2) * CHUNK + (uint64_t)mon.nfiles * 8192,
	      "cache dir reached %llu bytes", (unsigned long long)mon.max);
	CHECK(st.bytes_used <= limit + threads * CHUNK, "bytes_used %llu",
	      (unsigned long long)st.bytes_used);
	for (int i = 0; i < NOBJ; i++)
		cachetier_obj_unref(o[i]);
	cachetier_close(ct);
	backend_close(be);
}

/* ---- persistence ---- */

static int read_all_exact(struct cachetier *ct, struct backend *be, uint64_t seed)
{
	uint64_t s = seed;
	int bad = 0;

	for (int i = 0; i <= NOBJ; i++) {
		struct cachetier_obj *o = obj(ct, be, i);

		bad += read_check(o, i, 0, sizes[i], 0) != 0;
		for (int k = 0; k < 20; k++) {
			uint64_t off = rnd(&s) % sizes[i];

			bad +=
			    read_check(o, i, off, 1 + (size_t)(rnd(&s) % (2 * CHUNK)), k & 1) != 0;
		}
		cachetier_obj_unref(o);
	}
	return bad;
}

static void test_persist(uint64_t seed)
{
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-persist", 1ull << 30, 4);
	struct cachetier_obj *o[NOBJ + 1];
	struct cachetier_stats st;
	int done = 0, bad;

	for (int i = 0; i <= NOBJ; i++) {
		o[i] = obj(ct, be, i);
		CHECK(cachetier_obj_prefetch(o[i], CACHETIER_PF_EVICT) == 0, "prefetch");
	}
	for (int w = 0; w < 6000 && !done; w++) {
		done = 1;
		for (int i = 0; i <= NOBJ; i++)
			done &= cachetier_obj_cached_bytes(o[i]) == sizes[i];
		if (!done)
			usleep(10000);
	}
	CHECK(done, "prefetch did not finish");
	stats(ct, &st);
	CHECK(st.readahead_fills == st.fills, "prefetch fills %llu of %llu counted",
	      (unsigned long long)st.readahead_fills, (unsigned long long)st.fills);
	for (int i = 0; i <= NOBJ; i++)
		cachetier_obj_unref(o[i]);
	cachetier_close(ct);
	backend_close(be);

	/* the store is gone: every read must come from the cache */
	be = store("fail_every=1&fail_after_bytes=1");
	ct = tier(be, "c-persist", 1ull << 30, 4);
	bad = read_all_exact(ct, be, seed);
	stats(ct, &st);
	CHECK(bad == 0, "%d reads after reopen wrong", bad);
	CHECK(st.fills == 0 && st.bytes_fetched == 0 && st.misses == 0 && st.fill_errors == 0,
	      "reopen went to the store: fills %llu fetched %llu misses %llu errors %llu",
	      (unsigned long long)st.fills, (unsigned long long)st.bytes_fetched,
	      (unsigned long long)st.misses, (unsigned long long)st.fill_errors);
	CHECK(st.hits > 0, "no hits");
	cachetier_close(ct);
	backend_close(be);
}

/* ---- objects of an earlier mount, opened while an eviction takes them ---- */

/* Open fds of this process on files under dir (the cache directory). */
static int fds_under(const char *dir)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	char link[300], target[1024];
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		ssize_t len;

		snprintf(link, sizeof(link), "/proc/self/fd/%s", de->d_name);
		len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = 0;
		n += strncmp(target, dir, strlen(dir)) == 0 && target[strlen(dir)] == '/';
	}
	closedir(d);
	return n;
}

struct race {
	struct cachetier *ct;
	struct backend *be;
	int first, n, bad;
	pthread_barrier_t *go;
};

/* Open objects first, first+1, ... (n of them, wrapping at NCACHED or
 * NOBJ + 1) and read each whole. */
static void *race_main(void *arg)
{
	struct race *r = arg;

	pthread_barrier_wait(r->go);
	for (int k = 0; k < r->n; k++) {
		int i = r->first + k;
		struct cachetier_obj *o;

		if (r->first < NCACHED)
			i %= NCACHED;
		else
			i = NCACHED + (i - NCACHED) % (NOBJ + 1 - NCACHED);
		o = obj(r->ct, r->be, i);
		r->bad += read_check(o, i, 0, sizes[i], k & 1) != 0;
		cachetier_obj_unref(o);
	}
	return NULL;
}

/* A mount over a full cache of an earlier one: its first fills (of
 * objects not cached) evict objects of the earlier mount, which an
 * eviction loads from their maps, while other readers open those same
 * objects. Both loads of one object once opened its state file twice,
 * and a lock taken on the replaced description was never released: every
 * fill then hung. Checks, over many rounds: exact bytes, no fd of the
 * cache directory left after close (each load's fds are closed exactly
 * once), and the tier closes. */
static void test_reopen_race(void)
{
	struct backend *be = store("");
	enum { NTHR = 6 };
	int rounds = 0, bad = 0, leaked = 0;
	uint64_t cached = 0;
	char dir[512], cmd[600];

	snprintf(dir, sizeof(dir), "%s/c-race", tmpdir);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	for (int i = 0; i < NCACHED; i++)
		cached += (sizes[i] + CHUNK - 1) / CHUNK * CHUNK;
	for (int round = 0; round < RACE_ROUNDS; round++) {
		struct cachetier *ct;
		struct cachetier_obj *o[NCACHED];
		struct race r[NTHR];
		pthread_t t[NTHR];
		pthread_barrier_t go;
		int done = 0, left;

		if (system(cmd) != 0)
			fprintf(stderr, "warning: %s failed\n", cmd);
		/* an earlier mount cached objects 0 .. NCACHED-1 */
		ct = tier(be, "c-race", 1ull << 30, 4);
		for (int i = 0; i < NCACHED; i++) {
			o[i] = obj(ct, be, i);
			cachetier_obj_prefetch(o[i], CACHETIER_PF_EVICT);
		}
		for (int w = 0; w < 60000 && !done; w++) {
			done = 1;
			for (int i = 0; i < NCACHED; i++)
				done &= cachetier_obj_cached_bytes(o[i]) == sizes[i];
			if (!done)
				usleep(1000);
		}
		CHECK(done, "round %d: prefetch did not finish", round);
		for (int i = 0; i < NCACHED; i++)
			cachetier_obj_unref(o[i]);
		cachetier_close(ct);

		/* exactly full: every new fill evicts */
		ct = tier(be, "c-race", cached, 4);
		pthread_barrier_init(&go, NULL, NTHR);
		for (int k = 0; k < NTHR; k++) {
			/* even threads open the cached objects, odd ones fill others */
			r[k] = (struct race){ct, be, k % 2 ? NCACHED + k : k, k % 2 ? 2 : NCACHED,
					     0,	 &go};
			pthread_create(&t[k], NULL, race_main, &r[k]);
		}
		for (int k = 0; k < NTHR; k++) {
			pthread_join(t[k], NULL);
			bad += r[k].bad;
		}
		pthread_barrier_destroy(&go);
		cachetier_close(ct);
		left = fds_under(dir);
		if (left != 0 && leaked++ < 3)
			fprintf(stderr, "round %d: %d fds of the cache dir open after close\n",
				round, left);
		rounds++;
		if (left != 0)
			break; /* the next rounds would count them again */
	}
	printf("reopen race: %d rounds, %d reads wrong, %d rounds leaked fds\n", rounds, bad,
	       leaked);
	CHECK(bad == 0, "%d whole-object reads wrong", bad);
	CHECK(leaked == 0, "a load left fds of the cache directory open");
	backend_close(be);
}

/* ---- crash in the middle of fills ---- */

/* ---- a prefetch that must not evict ---- */

/* A cache of 20 chunks holds what a reader read; PF_FIT prefetches of
 * every object (far more than the cache) fill only the room left: no
 * eviction, the reader's object stays whole, the directory stays within
 * the limit, and every chunk asked for is either cached or counted as not
 * fitting. Then PF_EVICT (a reader's prefetch) does evict. */
static void test_prefetch_fit(void)
{
	struct backend *be = store("");
	uint64_t size = 20 * CHUNK, asked = 0, cached = 0, unfit = 0;
	struct cachetier *ct = tier(be, "c-fit", size, 4);
	struct cachetier_obj *o[NOBJ + 1];
	struct cachetier_stats st;
	int running = 1;

	for (int i = 0; i <= NOBJ; i++)
		o[i] = obj(ct, be, i);
	CHECK(read_check(o[0], 0, 0, sizes[0], 0) == 0, "read of object 0");
	for (int i = 1; i <= NOBJ; i++) {
		CHECK(cachetier_obj_prefetch(o[i], CACHETIER_PF_FIT) == 0, "prefetch");
		asked += sizes[i];
	}
	for (int w = 0; w < 6000 && running; w++) {
		running = 0;
		for (int i = 1; i <= NOBJ; i++)
			running |= cachetier_obj_prefetch_state(o[i], NULL);
		if (running)
			usleep(10000);
	}
	CHECK(!running, "PF_FIT prefetches did not end");
	for (int i = 1; i <= NOBJ; i++) {
		uint64_t u = 0;

		cachetier_obj_prefetch_state(o[i], &u);
		unfit += u;
		cached += cachetier_obj_cached_bytes(o[i]);
	}
	stats(ct, &st);
	CHECK(st.evictions == 0, "PF_FIT evicted %llu objects", (unsigned long long)st.evictions);
	CHECK(cachetier_obj_cached_bytes(o[0]) == sizes[0], "the reader's object lost bytes");
	CHECK(st.bytes_used <= size, "usage %llu past the limit %llu",
	      (unsigned long long)st.bytes_used, (unsigned long long)size);
	CHECK(st.bytes_used + CHUNK > size, "usage %llu: the room was not filled",
	      (unsigned long long)st.bytes_used);
	CHECK(cached + unfit == asked && st.unfit_bytes == unfit,
	      "cached %llu + unfit %llu != asked %llu (unfit_bytes %llu)",
	      (unsigned long long)cached, (unsigned long long)unfit, (unsigned long long)asked,
	      (unsigned long long)st.unfit_bytes);
	for (int i = 1; i <= NOBJ; i++)
		CHECK(read_check(o[i], i, 0, sizes[i], 0) == 0, "read of object %d", i);
	/* a reader's prefetch makes room like a read */
	CHECK(cachetier_obj_prefetch(o[0], CACHETIER_PF_EVICT) == 0, "prefetch");
	CHECK(cachetier_obj_prefetch(o[NOBJ], CACHETIER_PF_EVICT) == 0, "prefetch");
	for (int w = 0; w < 6000 && cachetier_obj_prefetch_state(o[NOBJ], NULL); w++)
		usleep(10000);
	stats(ct, &st);
	CHECK(st.evictions > 0, "PF_EVICT did not evict");
	for (int i = 0; i <= NOBJ; i++)
		cachetier_obj_unref(o[i]);
	cachetier_close(ct);
	backend_close(be);
}

/* cachetier_obj_prefetch_range fetches exactly the units behind its
 * range, a chunk a request, PF_FIT stops at the room the cache has, and
 * the range is then read without a fill. */
static void test_prefetch_range(void)
{
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-range", 1ull << 30, 4);
	struct cachetier_obj *o = obj(ct, be, NOBJ);
	/* units of CHUNK / 8: the range's from unit 40 to unit 64, and the last */
	uint64_t big = sizes[NOBJ], want = 3 * CHUNK + CHUNK / 8 + (big - 64 * CHUNK), unfit = 1;
	struct cachetier_stats st;

	CHECK(cachetier_obj_prefetch_range(o, big, 1, CACHETIER_PF_FIT) == -EINVAL, "past the end");
	CHECK(cachetier_obj_prefetch_range(o, 5, big, CACHETIER_PF_FIT) == -EINVAL, "too long");
	CHECK(cachetier_obj_prefetch_range(o, big, 0, CACHETIER_PF_FIT) == 0, "empty at the end");
	CHECK(!cachetier_obj_prefetch_state(o, NULL), "an empty range started a prefetch");
	/* from inside chunk 5 to inside chunk 8: chunks 5 to 7 whole, the first
	 * unit of chunk 8 (4 requests, one a chunk) */
	CHECK(cachetier_obj_prefetch_range(o, 5 * CHUNK + 100, 3 * CHUNK, CACHETIER_PF_FIT) == 0,
	      "prefetch range");
	CHECK(prefetch_ended(o), "range prefetch did not end");
	/* the last chunk (and unit), 1234 bytes */
	CHECK(cachetier_obj_prefetch_range(o, big - 1, 1, CACHETIER_PF_EVICT) == 0,
	      "prefetch range");
	CHECK(prefetch_ended(o), "range prefetch did not end");
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.bytes_fetched == want && st.fills == 5,
	      "fetched %llu bytes in %llu fills, want %llu in 5",
	      (unsigned long long)st.bytes_fetched, (unsigned long long)st.fills,
	      (unsigned long long)want);
	CHECK(cachetier_obj_cached_bytes(o) == want, "cached %llu, want %llu",
	      (unsigned long long)cachetier_obj_cached_bytes(o), (unsigned long long)want);
	cachetier_obj_prefetch_state(o, &unfit);
	CHECK(unfit == 0, "unfit %llu", (unsigned long long)unfit);
	CHECK(read_check(o, NOBJ, 5 * CHUNK + 100, 3 * CHUNK, 1) == 0, "read of the range");
	CHECK(read_check(o, NOBJ, 64 * CHUNK, big - 64 * CHUNK, 1) == 0, "read of the last chunk");
	stats(ct, &st);
	CHECK(st.bytes_fetched == want && st.misses == 0 && st.hits == 2,
	      "reads of the prefetched range: fetched %llu, misses %llu, hits %llu",
	      (unsigned long long)st.bytes_fetched, (unsigned long long)st.misses,
	      (unsigned long long)st.hits);
	cachetier_obj_unref(o);
	cachetier_close(ct);

	/* ranges of one object far apart, asked one after the other, fetch
	 * their own units only (not what lies between): 2 units of chunk 20
	 * and 1 of chunk 50, in 2 requests; a range fetched already adds
	 * nothing */
	ct = tier(be, "c-range-apart", 1ull << 30, 4);
	o = obj(ct, be, NOBJ);
	CHECK(cachetier_obj_prefetch_range(o, 20 * CHUNK, CHUNK / 8 + 1, CACHETIER_PF_EVICT) == 0 &&
		  cachetier_obj_prefetch_range(o, 50 * CHUNK + 5, 10, CACHETIER_PF_EVICT) == 0,
	      "two ranges");
	CHECK(prefetch_ended(o), "range prefetches did not end");
	CHECK(cachetier_obj_prefetch_range(o, 20 * CHUNK, CHUNK / 8, CACHETIER_PF_EVICT) == 0,
	      "again");
	CHECK(prefetch_ended(o), "range prefetch did not end");
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.bytes_fetched == 3 * (CHUNK / 8) && st.fills == 2 &&
		  cachetier_obj_cached_bytes(o) == 3 * (CHUNK / 8),
	      "ranges apart: fetched %llu bytes in %llu fills, want %u in 2",
	      (unsigned long long)st.bytes_fetched, (unsigned long long)st.fills, 3 * (CHUNK / 8));
	CHECK(read_check(o, NOBJ, 20 * CHUNK, CHUNK / 4, 1) == 0 &&
		  read_check(o, NOBJ, 50 * CHUNK, CHUNK / 8, 1) == 0,
	      "reads of the ranges");
	stats(ct, &st);
	CHECK(st.misses == 0 && st.bytes_fetched == 3 * (CHUNK / 8),
	      "ranges apart read: %llu misses", (unsigned long long)st.misses);
	cachetier_obj_unref(o);
	cachetier_close(ct);

	/* PF_FIT into a cache of 3 chunks: 3 of the 6 asked fit, 3 are skipped */
	ct = tier(be, "c-range-fit", 3 * CHUNK, 4);
	o = obj(ct, be, NOBJ);
	CHECK(cachetier_obj_prefetch_range(o, 10 * CHUNK, 6 * CHUNK, CACHETIER_PF_FIT) == 0,
	      "prefetch range");
	CHECK(prefetch_ended(o), "range prefetch did not end");
	fills_idle(ct);
	cachetier_obj_prefetch_state(o, &unfit);
	stats(ct, &st);
	CHECK(cachetier_obj_cached_bytes(o) == 3 * CHUNK && unfit == 3 * CHUNK &&
		  st.evictions == 0 && st.bytes_fetched == 3 * CHUNK,
	      "PF_FIT range: cached %llu, unfit %llu, evictions %llu, fetched %llu",
	      (unsigned long long)cachetier_obj_cached_bytes(o), (unsigned long long)unfit,
	      (unsigned long long)st.evictions, (unsigned long long)st.bytes_fetched);
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
}

/* A range handed over for a reader ahead (a plan) whose units are partly
 * here already (a neighbour's read brought them) spares those units like
 * the ones it fetches: the next eviction takes a unit that was read and is
 * not needed ahead, not the oldest one the range still needs. Cache of 4
 * units of CHUNK / 8; units A, B, C read in that order; a range over A and
 * the empty unit after it; then a miss needs a unit's room: B goes, A stays. */
static void test_range_spares_present(void)
{
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-range-spare", 4 * (CHUNK / 8), 4);
	struct cachetier_obj *o = obj(ct, be, NOBJ);
	uint64_t u = CHUNK / 8, a = 10 * CHUNK, b = 20 * CHUNK, c = 30 * CHUNK, e = 40 * CHUNK;
	struct cachetier_stats st;

	CHECK(read_check(o, NOBJ, a, u, 1) == 0 && read_check(o, NOBJ, b, u, 1) == 0 &&
		  read_check(o, NOBJ, c, u, 1) == 0,
	      "reads of A, B, C");
	CHECK(cachetier_obj_prefetch_range(o, a, 2 * u, CACHETIER_PF_EVICT) == 0, "range over A");
	CHECK(prefetch_ended(o), "range prefetch did not end");
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.bytes_fetched == 4 * u && st.evictions == 0 && st.misses == 3,
	      "A, B, C and the unit after A: fetched %llu, evictions %llu, misses %llu",
	      (unsigned long long)st.bytes_fetched, (unsigned long long)st.evictions,
	      (unsigned long long)st.misses);
	CHECK(read_check(o, NOBJ, e, u, 1) == 0, "read of E");
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.evictions == 1 && st.evicted_bytes == u && st.misses == 4,
	      "E made room for itself: evictions %llu (%llu bytes), misses %llu",
	      (unsigned long long)st.evictions, (unsigned long long)st.evicted_bytes,
	      (unsigned long long)st.misses);
	CHECK(read_check(o, NOBJ, a, 2 * u, 1) == 0, "read of the range");
	stats(ct, &st);
	CHECK(st.misses == 4 && st.bytes_fetched == 5 * u,
	      "the range was spared (else A goes, not B): misses %llu, fetched %llu",
	      (unsigned long long)st.misses, (unsigned long long)st.bytes_fetched);
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
}

/* Is the first unit (CHUNK / 8) of object i cached? */
static int unit0(struct cachetier_obj *o)
{
	return cachetier_obj_cached_bytes(o) > 0;
}

/* Eviction by next use (cachetier_plan_*): a cache of 4 units of CHUNK / 8,
 * read with probes (one unit each, no readahead), so every miss past the
 * fourth evicts exactly one unit. Units P1, P2 (planned at now + 10 and
 * now + 0x200: past 2^32, a serial number), L (no plan) and D (planned,
 * then read by its plan) are read in that order, oldest first, so least
 * recently used would evict P1, P2, L, D; by next use the order is D (no
 * plan needs it), L (no plan speaks of it), P2 (furthest), P1. Then
 * planned units against each other, a second plan's nearer use winning and
 * a further one not; a prefetch fill that would evict only units needed
 * sooner than its own is skipped; one that is needed first evicts the
 * furthest, and its unit no plan marked (bytes between planned extents)
 * is the next to go. */
/* A reader's readahead window over units this process holds and trusts
 * (fetch_stream.c, "Steps"): the store queues the window only at the reads
 * where it took a step (its front moved into a chunk not handed over yet),
 * and only those reads take ct->lock, at their begin (1 take each: a
 * read's end drops its pins under its object's lock alone); every other
 * read of the pass takes none, and no read makes an fcntl or checks its
 * data file. With chunks of 64 KiB, reads of 16 KiB
 * and a window of 8 chunks, the first read's front is in chunk 9 (8 by
 * index) and the front enters every later chunk once: steps = chunks - 8.
 * The store before took ct->lock at every read with a window (2 a read:
 * 2 x 260 here), then at the begin and the end of a step's read (2 x 57). */
static void test_read_window(void)
{
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-window", 1ull << 30, 4);
	struct cachetier_obj *o = obj(ct, be, NOBJ);
	struct cachetier_stats st0, st;
	uint64_t size = sizes[NOBJ], step = 16 * 1024, nchunks = (size + CHUNK - 1) / CHUNK,
		 nreads = 0, takes, steps, w;
	int bad = 0;

	CHECK(fetch_new(ct, &fx) == 0, "fetch_new");
	w = cachetier_readahead_max(ct);
	CHECK(w == 8 * (uint64_t)CHUNK, "window: the cap is %llu, want 8 chunks",
	      (unsigned long long)w);
	fx_reader = 1; /* the first pass fills every unit and reads it once (trusted) */
	for (uint64_t off = 0; off < size; off += step)
		bad += read_check(o, NOBJ, off, step, 0) != 0;
	fills_idle(ct);
	stats(ct, &st0);
	fx_reader = 2; /* a new stream: its full window from offset 0 */
	takes = cachetier_lock_takes();
	for (uint64_t off = 0; off < size; off += step, nreads++)
		bad += read_check(o, NOBJ, off, step, (int)(nreads & 1)) != 0;
	takes = cachetier_lock_takes() - takes;
	stats(ct, &st);
	steps = nchunks - w / CHUNK;
	printf("window: %llu reads of %llu chunks with a window of %llu chunks: ct->lock "
	       "taken %llu times (%llu steps), fcntl %llu, file checks %llu\n",
	       (unsigned long long)nreads, (unsigned long long)nchunks,
	       (unsigned long long)(w / CHUNK), (unsigned long long)takes,
	       (unsigned long long)steps,
	       (unsigned long long)(st.unit_read_locks - st0.unit_read_locks),
	       (unsigned long long)(st.read_file_checks - st0.read_file_checks));
	CHECK(bad == 0, "window: %d reads wrong", bad);
	CHECK(takes == steps && st.read_locks - st0.read_locks == takes,
	      "window: %llu reads took ct->lock %llu times (counted %llu), want %llu (1 at "
	      "each of %llu steps)",
	      (unsigned long long)nreads, (unsigned long long)takes,
	      (unsigned long long)(st.read_locks - st0.read_locks), (unsigned long long)steps,
	      (unsigned long long)steps);
	CHECK(st.unit_read_locks == st0.unit_read_locks &&
		  st.read_file_checks == st0.read_file_checks,
	      "window: %llu fcntl calls and %llu file checks by reads of units held and "
	      "trusted, want 0 and 0",
	      (unsigned long long)(st.unit_read_locks - st0.unit_read_locks),
	      (unsigned long long)(st.read_file_checks - st0.read_file_checks));
	CHECK(st.hits - st0.hits == nreads && st.misses == st0.misses &&
		  st.bytes_fetched == st0.bytes_fetched,
	      "window: %llu hits of %llu reads, %llu misses and %llu bytes fetched more, "
	      "want all hits",
	      (unsigned long long)(st.hits - st0.hits), (unsigned long long)nreads,
	      (unsigned long long)(st.misses - st0.misses),
	      (unsigned long long)(st.bytes_fetched - st0.bytes_fetched));
	fetch_free(fx);
	fx = NULL;
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
}

/* Object B's miss (a fill, its publish, its read's begin and end) on a
 * thread of its own, while object A's read is pinned on the main thread:
 * the takes of ct->lock by its read's end (on its thread) into end. */
struct objlock_b {
	struct cachetier_obj *o;
	int bad;
	uint64_t end;
};

static void *objlock_b_main(void *arg)
{
	struct objlock_b *b = arg;
	unsigned char buf[CHUNK / 8];
	struct cachetier_pin *p;
	uint64_t fd_off, takes;
	int fd;

	b->bad = cachetier_obj_read_begin(b->o, 0, sizeof(buf), &fd, &fd_off, &p) != 0;
	if (b->bad)
		return NULL;
	b->bad = pread(fd, buf, sizeof(buf), (off_t)fd_off) != (ssize_t)sizeof(buf) ||
		 memcmp(buf, data[0], sizeof(buf)) != 0;
	takes = cachetier_lock_takes();
	cachetier_obj_read_end(p);
	b->end = cachetier_lock_takes() - takes;
	return NULL;
}

/* A read's end takes its object's lock, not the tier's (cachetier_read.c,
 * cachetier__file_read_end; ct_file.lock guards the units' pins and idle
 * read locks): object A's read (a miss: ct->lock once, at its begin) pins
 * its unit; object B is filled, published and read on another thread
 * meanwhile (its read's end takes ct->lock 0 times on its thread); then
 * A's read's end takes ct->lock 0 times (counted on the reading thread,
 * cachetier_lock_takes, and by the tier, read_locks). The store before
 * took ct->lock at every read's end (1 each). */
static void test_read_end_objlock(void)
{
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-objlock", 64 * CHUNK, 4);
	struct cachetier_obj *oa = obj(ct, be, NOBJ);
	struct objlock_b b = {.o = obj(ct, be, 0)};
	uint64_t u = CHUNK / 8, off = 5 * CHUNK, fd_off, takes, begin, end;
	struct cachetier_stats st1, st;
	struct cachetier_pin *p;
	unsigned char buf[CHUNK / 8];
	pthread_t t;
	int fd, err;

	takes = cachetier_lock_takes();
	err = cachetier_obj_read_begin(oa, off, u, &fd, &fd_off, &p);
	begin = cachetier_lock_takes() - takes;
	CHECK(err == 0 && begin == 1, "objlock: A's miss: %d, ct->lock taken %llu times, want 1",
	      err, (unsigned long long)begin);
	if (err)
		exit(1);
	CHECK(pthread_create(&t, NULL, objlock_b_main, &b) == 0, "pthread_create");
	pthread_join(t, NULL);
	CHECK(pread(fd, buf, u, (off_t)fd_off) == (ssize_t)u &&
		  memcmp(buf, data[NOBJ] + off, u) == 0,
	      "objlock: A's bytes");
	stats(ct, &st1);
	takes = cachetier_lock_takes();
	cachetier_obj_read_end(p);
	end = cachetier_lock_takes() - takes;
	stats(ct, &st);
	printf("objlock: A's read took ct->lock %llu times at its begin, %llu at its end; B's "
	       "read's end (on another thread, A pinned) %llu\n",
	       (unsigned long long)begin, (unsigned long long)end, (unsigned long long)b.end);
	CHECK(b.bad == 0 && b.end == 0,
	      "objlock: B's read: %d wrong, its end took ct->lock %llu times, want 0", b.bad,
	      (unsigned long long)b.end);
	CHECK(end == 0 && st.read_locks == st1.read_locks,
	      "objlock: A's read's end took ct->lock %llu times (the tier counted %llu), want 0",
	      (unsigned long long)end, (unsigned long long)(st.read_locks - st1.read_locks));
	cachetier_obj_unref(b.o);
	cachetier_obj_unref(oa);
	cachetier_close(ct);
	backend_close(be);
}

/* Readers of one object against its fills' publishes and its evictions
 * (the TSan build runs it: pins dropped under the object's lock alone,
 * eviction and the fill writer under the tier's lock and the object's):
 * 4 threads, seeded reads of the big object (CONC_READS each, half
 * through read_begin's fd, half through pread) in a cache of 8 chunks, a
 * quarter of the object: every read exact, and the close's check
 * (cachetier__run_check, every debug build) finds no pin left and every
 * unit held idle counted once. */
static void *one_obj_main(void *arg)
{
	struct conc *c = arg;
	uint64_t s = c->seed;

	for (int k = 0; k < CONC_READS; k++) {
		uint64_t off = rnd(&s) % sizes[NOBJ];
		size_t len = 1 + (size_t)(rnd(&s) % CHUNK);
		int err = read_check(c->o[0], NOBJ, off, len, (int)(rnd(&s) & 1));

		if (err && c->bad++ < 3)
			fprintf(stderr, "one object: read off %llu len %zu: %d\n",
				(unsigned long long)off, len, err);
		c->reads++;
	}
	return NULL;
}

static void test_one_obj_threads(uint64_t seed)
{
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-one-obj", 8 * CHUNK, 2);
	struct cachetier_obj *o = obj(ct, be, NOBJ);
	struct cachetier_stats st;
	struct conc c[4];
	pthread_t t[4];
	int bad = 0, reads = 0;

	for (int k = 0; k < 4; k++) {
		c[k] = (struct conc){ct, be, &o, seed * 17 + (uint64_t)k + 1, 0, 0};
		pthread_create(&t[k], NULL, one_obj_main, &c[k]);
	}
	for (int k = 0; k < 4; k++) {
		pthread_join(t[k], NULL);
		bad += c[k].bad;
		reads += c[k].reads;
	}
	stats(ct, &st);
	printf("one object: %d reads by 4 threads, %llu fills, %llu evictions\n", reads,
	       (unsigned long long)st.fills, (unsigned long long)st.evictions);
	CHECK(bad == 0 && reads == 4 * CONC_READS, "one object: %d of %d reads wrong", bad, reads);
	CHECK(st.evictions > 0, "one object: no evictions");
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
}

/* Reads without ct->lock (cachetier_read.c): a read asking for no
 * readahead whose units this process holds read-locked and trusts pins
 * them with a compare-and-swap each and takes no ct->lock, counted on the
 * reading thread (cachetier_lock_takes); a read with a unit it does not
 * hold takes ct->lock at its begin and its end; eviction never takes a
 * unit such a read pins. A probe (cachetier_obj_pread_probe: a tar
 * header's spot check) of held, trusted units takes no ct->lock either
 * (the store before took it at every probe: 1). */
static void test_read_unlocked(void)
{
	struct backend *be = store("");
	uint64_t u = CHUNK / 8, off = 3 * CHUNK, boff = 10 * CHUNK, takes, fd_off, lo, hi;
	struct cachetier_stats st;
	struct cachetier_pin *p;
	struct cachetier *a;
	struct cachetier_obj *oa;
	unsigned char buf[3 * CHUNK / 8];
	int fd, err, bad = 0;

	a = tier(be, "c-unlocked", 64 * CHUNK, 4);
	oa = obj(a, be, NOBJ);
	CHECK(read_check(oa, NOBJ, off, 3 * u, 1) == 0, "unlocked: first read");
	fills_idle(a);
	takes = cachetier_lock_takes();
	for (int i = 0; i < 20; i++)
		bad += read_check(oa, NOBJ, off + (uint64_t)i * 100, 3 * u - (uint64_t)i * 100,
				  1) != 0;
	CHECK(bad == 0 && cachetier_lock_takes() - takes == 0,
	      "unlocked: 20 reads again of held units: %d wrong, ct->lock taken %llu times, want 0",
	      bad, (unsigned long long)(cachetier_lock_takes() - takes));
	/* a plan's marks of next use: no lock either */
	takes = cachetier_lock_takes();
	err = cachetier_plan_mark(oa, off, 3 * u, 100);
	err = err ? err : cachetier_plan_read(oa, off, 3 * u, off + 3 * u, 1, &lo, &hi);
	CHECK(
	    err == 0 && lo == off && hi == off + 3 * u && cachetier_lock_takes() - takes == 0,
	    "unlocked: a plan's mark and read: %d, units [%llu, %llu), ct->lock taken %llu times, "
	    "want 0",
	    err, (unsigned long long)lo, (unsigned long long)hi,
	    (unsigned long long)(cachetier_lock_takes() - takes));
	/* the chunk's units its fill filled ahead (no read pinned them) came
	 * read-locked and armed from their fill: their first read takes no
	 * ct->lock either */
	takes = cachetier_lock_takes();
	bad = read_check(oa, NOBJ, off + 3 * u, 5 * u, 1) != 0;
	CHECK(bad == 0 && cachetier_lock_takes() - takes == 0,
	      "unlocked: the first read of 5 units filled ahead: %d wrong, ct->lock taken %llu "
	      "times, want 0",
	      bad, (unsigned long long)(cachetier_lock_takes() - takes));
	/* a probe of 512 bytes across two of those units: no lock */
	{
		unsigned char h[512];
		uint64_t at = off + 4 * u - 256;
		ssize_t n;

		takes = cachetier_lock_takes();
		n = cachetier_obj_pread_probe(oa, h, sizeof(h), at);
		takes = cachetier_lock_takes() - takes;
		CHECK(n == (ssize_t)sizeof(h) && memcmp(h, data[NOBJ] + at, sizeof(h)) == 0 &&
			  takes == 0,
		      "unlocked: a probe of 2 held units: %zd, ct->lock taken %llu times, want 0",
		      n, (unsigned long long)takes);
	}
	/* a unit not valid yet: with ct->lock at the read's begin (its end:
	 * its object's lock alone) */
	takes = cachetier_lock_takes();
	bad = read_check(oa, NOBJ, off + 8 * u, u, 1) != 0;
	CHECK(bad == 0 && cachetier_lock_takes() - takes == 1,
	      "unlocked: a miss: %d wrong, ct->lock taken %llu times, want 1", bad,
	      (unsigned long long)(cachetier_lock_takes() - takes));
	stats(a, &st);
	CHECK(st.hits == 22 && st.misses == 2,
	      "unlocked: %llu hits, %llu misses; want 22 (without ct->lock), 2",
	      (unsigned long long)st.hits, (unsigned long long)st.misses);
	cachetier_obj_unref(oa);
	cachetier_close(a);

	/* a unit pinned without ct->lock is not evicted: a cache of 4 units
	 * holds the 3 read; a read of 2 more needs one out, and all 3 are
	 * pinned so (the fill goes over the limit); once the pins go, the next
	 * read's fill evicts */
	a = tier(be, "c-unlocked-ev", 4 * u, 4);
	oa = obj(a, be, NOBJ);
	CHECK(read_check(oa, NOBJ, off, 3 * u, 1) == 0, "unlocked ev: first read");
	fills_idle(a);
	takes = cachetier_lock_takes();
	err = cachetier_obj_read_begin(oa, off, 3 * u, &fd, &fd_off, &p);
	CHECK(err == 0 && cachetier_lock_takes() - takes == 0,
	      "unlocked ev: pinned without ct->lock: %d, %llu takes", err,
	      (unsigned long long)(cachetier_lock_takes() - takes));
	CHECK(read_check(oa, NOBJ, boff, 2 * u, 1) == 0, "unlocked ev: second read");
	fills_idle(a);
	stats(a, &st);
	CHECK(st.evictions == 0, "unlocked ev: %llu evictions while the 3 units are pinned, want 0",
	      (unsigned long long)st.evictions);
	if (err == 0) {
		CHECK(pread(fd, buf, sizeof(buf), (off_t)fd_off) == (ssize_t)sizeof(buf) &&
			  memcmp(buf, data[NOBJ] + off, sizeof(buf)) == 0,
		      "unlocked ev: the pinned units' bytes");
		cachetier_obj_read_end(p);
	}
	CHECK(read_check(oa, NOBJ, boff + 2 * u, u, 1) == 0, "unlocked ev: third read");
	fills_idle(a);
	stats(a, &st);
	CHECK(st.evictions >= 1, "unlocked ev: %llu evictions once unpinned, want 1 or more",
	      (unsigned long long)st.evictions);
	CHECK(read_check(oa, NOBJ, off, 3 * u, 1) == 0, "unlocked ev: the first units again");
	cachetier_obj_unref(oa);
	cachetier_close(a);
	backend_close(be);
}

static void test_plan_order(void)
{
	struct backend *be = store("");
	uint64_t u = CHUNK / 8, unfit = 0;
	struct cachetier *ct = tier(be, "c-plan", 4 * u, 4);
	struct cachetier_obj *o[7], *x;
	struct cachetier_stats st;
	uint32_t now = 0xFFFFFF00u;
	uint64_t lo, hi;
	unsigned char buf[64];
	int present;

	for (int i = 0; i < 7; i++)
		o[i] = obj(ct, be, i);
	x = o[4];
	cachetier_plan_now(ct, now);
	CHECK(cachetier_plan_mark(o[0], 0, u, now + 10) == 0 &&
		  cachetier_plan_mark(o[1], 100, 10, now + 0x200) == 0 &&
		  cachetier_plan_mark(o[3], 0, u, now + 5) == 0,
	      "marks");
	CHECK(cachetier_plan_mark(o[0], sizes[0], 1, now) == -EINVAL, "a mark past the end");
	for (int i = 0; i < 4; i++)
		CHECK(cachetier_obj_pread_probe(o[i], buf, sizeof(buf), 0) == sizeof(buf),
		      "read of unit 0 of object %d", i);
	CHECK(cachetier_plan_done(o[3], 10, 20, &lo, &hi) == 0 && lo == 0 && hi == u,
	      "done: the units' bytes [%llu, %llu)", (unsigned long long)lo,
	      (unsigned long long)hi);
	/* X1 (no plan): D goes, though read last */
	CHECK(cachetier_obj_pread_probe(x, buf, sizeof(buf), 0) == sizeof(buf), "X1");
	CHECK(unit0(o[0]) && unit0(o[1]) && unit0(o[2]) && !unit0(o[3]),
	      "X1 evicted D (the unit no plan needs): P1 %d, P2 %d, L %d, D %d", unit0(o[0]),
	      unit0(o[1]), unit0(o[2]), unit0(o[3]));
	/* X2 (planned at now + 20): L goes, the older unplanned unit */
	CHECK(cachetier_plan_mark(x, u, u, now + 20) == 0, "mark X2");
	CHECK(cachetier_obj_pread_probe(x, buf, sizeof(buf), u) == sizeof(buf), "X2");
	CHECK(unit0(o[0]) && unit0(o[1]) && !unit0(o[2]), "X2 evicted L: P1 %d, P2 %d, L %d",
	      unit0(o[0]), unit0(o[1]), unit0(o[2]));
	/* X3 (now + 15): X1 goes, unplanned before any planned unit */
	CHECK(cachetier_plan_mark(x, 2 * u, u, now + 15) == 0, "mark X3");
	CHECK(cachetier_obj_pread_probe(x, buf, sizeof(buf), 2 * u) == sizeof(buf), "X3");
	CHECK(unit0(o[0]) && unit0(o[1]) && cachetier_obj_cached_bytes(x) == 2 * u,
	      "X3 evicted X1: P1 %d, P2 %d, X holds %llu", unit0(o[0]), unit0(o[1]),
	      (unsigned long long)cachetier_obj_cached_bytes(x));
	/* X4 (now + 1): P2 goes, the furthest (now + 0x200 wrapped past 0) */
	CHECK(cachetier_plan_mark(x, 3 * u, u, now + 1) == 0, "mark X4");
	CHECK(cachetier_obj_pread_probe(x, buf, sizeof(buf), 3 * u) == sizeof(buf), "X4");
	CHECK(unit0(o[0]) && !unit0(o[1]), "X4 evicted P2 (furthest): P1 %d, P2 %d", unit0(o[0]),
	      unit0(o[1]));
	/* a second plan needs X2 at now + 3: the nearer use wins; a third's
	 * at now + 100 changes nothing. X5 (now + 2): X3 (now + 15) goes */
	CHECK(cachetier_plan_mark(x, u, u, now + 3) == 0 &&
		  cachetier_plan_mark(x, u, u, now + 100) == 0,
	      "marks of X2");
	CHECK(cachetier_plan_mark(x, 4 * u, u, now + 2) == 0, "mark X5");
	CHECK(cachetier_obj_pread_probe(x, buf, sizeof(buf), 4 * u) == sizeof(buf), "X5");
	CHECK(unit0(o[0]) && cachetier_obj_cached_bytes(x) == 3 * u,
	      "X5 evicted X3: P1 %d, X holds %llu", unit0(o[0]),
	      (unsigned long long)cachetier_obj_cached_bytes(x));
	present = cachetier_obj_pread_probe(x, buf, sizeof(buf), u) == sizeof(buf);
	stats(ct, &st);
	CHECK(present && st.misses == 9 && st.hits == 1, "X2 still there: misses %llu, hits %llu",
	      (unsigned long long)st.misses, (unsigned long long)st.hits);
	/* X6 (now + 4): P1 (now + 10) goes */
	CHECK(cachetier_plan_mark(x, 5 * u, u, now + 4) == 0, "mark X6");
	CHECK(cachetier_obj_pread_probe(x, buf, sizeof(buf), 5 * u) == sizeof(buf), "X6");
	CHECK(!unit0(o[0]) && cachetier_obj_cached_bytes(x) == 4 * u, "X6 evicted P1");
	stats(ct, &st);
	CHECK(st.evictions == 6 && st.evicted_bytes == 6 * u && st.bytes_fetched == 10 * u,
	      "reads: evictions %llu (%llu bytes), fetched %llu", (unsigned long long)st.evictions,
	      (unsigned long long)st.evicted_bytes, (unsigned long long)st.bytes_fetched);
	/* cached now: X2 (3), X4 (1), X5 (2), X6 (4). A range prefetch of units
	 * 0 and 1 of object 5, unit 0 planned at now + 50: every unit it could
	 * evict is needed sooner, so it is skipped */
	CHECK(cachetier_plan_mark(o[5], 0, 1, now + 50) == 0, "mark R0 far");
	CHECK(cachetier_obj_prefetch_range(o[5], 0, 2 * u, CACHETIER_PF_EVICT) == 0, "range R");
	CHECK(prefetch_ended(o[5]), "range prefetch did not end");
	fills_idle(ct);
	cachetier_obj_prefetch_state(o[5], &unfit);
	stats(ct, &st);
	CHECK(unfit == 2 * u && st.evictions == 6 && cachetier_obj_cached_bytes(o[5]) == 0,
	      "a far prefetch evicted nearer units: unfit %llu, evictions %llu",
	      (unsigned long long)unfit, (unsigned long long)st.evictions);
	/* R0 needed first (now + 0): X6 and X2 (the furthest) go, in one
	 * eviction; R1, which no plan marked, is then the first to go for a
	 * read of object 6 */
	CHECK(cachetier_plan_mark(o[5], 0, 1, now) == 0, "mark R0 first");
	CHECK(cachetier_obj_prefetch_range(o[5], 0, 2 * u, CACHETIER_PF_EVICT) == 0, "range R");
	CHECK(prefetch_ended(o[5]), "range prefetch did not end");
	fills_idle(ct);
	stats(ct, &st);
	CHECK(cachetier_obj_cached_bytes(o[5]) == 2 * u && cachetier_obj_cached_bytes(x) == 2 * u &&
		  st.evictions == 7 && st.bytes_fetched == 12 * u,
	      "a near prefetch: R cached %llu, X %llu, evictions %llu, fetched %llu",
	      (unsigned long long)cachetier_obj_cached_bytes(o[5]),
	      (unsigned long long)cachetier_obj_cached_bytes(x), (unsigned long long)st.evictions,
	      (unsigned long long)st.bytes_fetched);
	CHECK(cachetier_obj_pread_probe(o[6], buf, sizeof(buf), 0) == sizeof(buf), "Y");
	stats(ct, &st);
	CHECK(cachetier_obj_cached_bytes(o[5]) == u && cachetier_obj_cached_bytes(x) == 2 * u &&
		  st.evictions == 8,
	      "Y evicted R1 (between planned ranges): R %llu, X %llu",
	      (unsigned long long)cachetier_obj_cached_bytes(o[5]),
	      (unsigned long long)cachetier_obj_cached_bytes(x));
	CHECK(cachetier_obj_pread_probe(o[5], buf, sizeof(buf), 0) == sizeof(buf), "R0");
	stats(ct, &st);
	CHECK(st.misses == 11, "R0 still there: misses %llu", (unsigned long long)st.misses);
	/* reset: every planned unit is needed by none; a read of object 6's
	 * unit 1 evicts the least recently used of them: X4 (read before X5) */
	cachetier_plan_reset(ct);
	CHECK(cachetier_obj_pread_probe(o[6], buf, sizeof(buf), u) == sizeof(buf), "Y2");
	present = cachetier_obj_pread_probe(x, buf, sizeof(buf), 4 * u) == sizeof(buf);
	stats(ct, &st);
	CHECK(present && st.misses == 12 && cachetier_obj_cached_bytes(x) == u,
	      "after reset: X4 evicted, X5 kept: misses %llu, X %llu",
	      (unsigned long long)st.misses, (unsigned long long)cachetier_obj_cached_bytes(x));
	for (int i = 0; i < 7; i++)
		cachetier_obj_unref(o[i]);
	cachetier_close(ct);
	backend_close(be);
}

/* The state file (data/<hash>.st) of the one object a tier has open. */
static int st_path(struct cachetier *ct, char *path, size_t len)
{
	DIR *d = opendir(data_dir(ct));
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d))) {
		if (strlen(de->d_name) == 19 && strcmp(de->d_name + 16, ".st") == 0) {
			snprintf(path, len, "%s/%s", data_dir(ct), de->d_name);
			n++;
		}
	}
	if (d)
		closedir(d);
	return n == 1 ? 0 : -1;
}

/* One eviction's punches (cachetier_stats.punches): a cache of n units of
 * CHUNK / 8, units of the big object read with probes (one unit each, no
 * readahead) at the unit numbers in at[] (oldest first), then object 0's
 * first 'take' units read at once, so that one eviction takes that many
 * of the big object's units, least recently used first. A gap between two
 * units taken that holds nothing is punched with them in one call (at
 * most 32 units); a unit that holds bytes, or that another process locks
 * (lock_gap: a read lock on its unit lock, as a reader of another process
 * holds), splits the punch. Checks the punches, that the evicted units
 * are gone and the rest kept, and the bytes of every unit read again. */
static void punch_case(const char *name, const uint32_t *at, int n, int take, int lock_gap,
		       uint64_t punches, int kept)
{
	struct backend *be = store("");
	uint64_t u = CHUNK / 8;
	struct cachetier *ct = tier(be, name, (uint64_t)n * u, 4);
	struct cachetier_obj *big = obj(ct, be, NOBJ), *x;
	struct cachetier_stats st0, st;
	unsigned char buf[64];
	char path[700];
	int fd = -1, err;

	for (int i = 0; i < n; i++)
		CHECK(cachetier_obj_pread_probe(big, buf, sizeof(buf), at[i] * u) == sizeof(buf),
		      "%s: read of unit %u", name, at[i]);
	if (lock_gap >= 0) {
		struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET};

		fl.l_start = (off_t)(1ll << 32) + lock_gap; /* LK_UNIT (cachetier_i.h) */
		fl.l_len = 1;
		fd = st_path(ct, path, sizeof(path)) == 0 ? open(path, O_RDWR) : -1;
		CHECK(fd >= 0 && fcntl(fd, F_OFD_SETLK, &fl) == 0, "%s: lock unit %d of %s", name,
		      lock_gap, path);
	}
	fills_idle(ct);
	stats(ct, &st0);
	x = obj(ct, be, 0);
	err = read_check(x, 0, 0, (size_t)take * u, 0);
	CHECK(err == 0, "%s: read of object 0: %d", name, err);
	stats(ct, &st);
	CHECK(st.evictions - st0.evictions == 1 &&
		  st.evicted_bytes - st0.evicted_bytes == take * u &&
		  st.punches - st0.punches == punches,
	      "%s: %llu evictions of %llu bytes in %llu punches (want 1 of %llu in %llu)", name,
	      (unsigned long long)(st.evictions - st0.evictions),
	      (unsigned long long)(st.evicted_bytes - st0.evicted_bytes),
	      (unsigned long long)(st.punches - st0.punches), (unsigned long long)(take * u),
	      (unsigned long long)punches);
	CHECK(cachetier_obj_cached_bytes(big) == (uint64_t)(n - take) * u, "%s: big holds %llu",
	      name, (unsigned long long)cachetier_obj_cached_bytes(big));
	if (fd >= 0)
		close(fd);
	/* the unit kept is served from the cache (a hit), the others fetched
	 * again: exact bytes either way */
	stats(ct, &st0);
	if (kept >= 0) {
		err = read_check(big, NOBJ, (uint64_t)kept * u, u, 1);
		stats(ct, &st);
		CHECK(err == 0 && st.misses == st0.misses, "%s: unit %d kept: %d, misses %llu",
		      name, kept, err, (unsigned long long)(st.misses - st0.misses));
	}
	for (uint32_t c = 0; c <= at[n - 1]; c++) {
		err = read_check(big, NOBJ, (uint64_t)c * u, u, c & 1);
		CHECK(err == 0, "%s: unit %u read again: %d", name, c, err);
	}
	cachetier_obj_unref(x);
	cachetier_obj_unref(big);
	cachetier_close(ct);
	backend_close(be);
}

static void test_punch_join(void)
{
	static const uint32_t spread[] = {0, 2, 4, 6}, wide[] = {0, 33, 67}, two[] = {0, 2},
			      mid[] = {0, 2, 1};

	/* gaps of one unit that hold nothing: one punch for four units */
	punch_case("c-punch-spread", spread, 4, 4, -1, 1, -1);
	/* gaps of 32 units (joined) and 33 (not) */
	punch_case("c-punch-wide", wide, 3, 3, -1, 2, -1);
	/* the gap's unit locked by another process: not punched */
	punch_case("c-punch-locked", two, 2, 2, 1, 2, -1);
	/* the gap's unit holds bytes (read last: kept) */
	punch_case("c-punch-valid", mid, 3, 2, -1, 2, 1);
}

/* A fill whose room an eviction in flight already covers starts without
 * waiting for that eviction's punch (cachetier_evict.c, room_over). A cache
 * of 16 chunks full of the big object's units, named in its map by a clean
 * close; the next tier on the directory opens it from its map to evict it.
 * The test holds the object's LK_MAP (as a map write of another process
 * would), so the eviction that a probe of object 0 makes (one batch: a
 * chunk's 8 units, for its 1 unit) stays in flight after it took its units,
 * before its map unlink and punch, for up to LK_MAP_WAIT_MS (2 s). A probe
 * of object 1 then needs 1 unit, which that batch covers: it starts and
 * ends without a room wait, and without a second eviction. Before the
 * change it waited for the first eviction's end (room_waits 1). */
struct room_read {
	struct cachetier_obj *o;
	unsigned char buf[64];
	ssize_t n;
};

static void *room_read_main(void *arg)
{
	struct room_read *r = arg;

	r->n = cachetier_obj_pread_probe(r->o, r->buf, sizeof(r->buf), 0);
	return NULL;
}

static void test_room_inflight(void)
{
	struct backend *be = store("");
	const uint64_t u = CHUNK / 8, limit = 16 * CHUNK;
	struct cachetier *ct = tier(be, "c-room", limit, 4);
	struct cachetier_obj *big = obj(ct, be, NOBJ), *o1;
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1, .l_len = 1};
	struct room_read r0 = {0};
	struct cachetier_stats st;
	unsigned char buf[64];
	char path[700];
	pthread_t t;
	ssize_t n;
	int fd, i;

	CHECK(read_check(big, NOBJ, 0, limit, 0) == 0, "room: fill the cache");
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.bytes_used == limit && st.evictions == 0, "room: %llu bytes used, %llu evictions",
	      (unsigned long long)st.bytes_used, (unsigned long long)st.evictions);
	cachetier_obj_unref(big);
	cachetier_close(ct); /* names every unit in the map */

	ct = tier(be, "c-room", limit, 4);
	/* LK_MAP (cachetier_i.h) of the only state file: the big object's */
	fd = st_path(ct, path, sizeof(path)) == 0 ? open(path, O_RDWR) : -1;
	CHECK(fd >= 0 && fcntl(fd, F_OFD_SETLK, &fl) == 0, "room: LK_MAP of %s", path);
	r0.o = obj(ct, be, 0);
	pthread_create(&t, NULL, room_read_main, &r0);
	/* its eviction took its units (a state, polled; 60 s at most) */
	for (i = 0; i < 6000; i++) {
		stats(ct, &st);
		if (st.evictions >= 1)
			break;
		usleep(10000);
	}
	CHECK(st.evictions == 1 && st.evicted_bytes == 8 * u,
	      "room: first eviction: %llu of %llu bytes (want 1 of %llu)",
	      (unsigned long long)st.evictions, (unsigned long long)st.evicted_bytes,
	      (unsigned long long)(8 * u));
	o1 = obj(ct, be, 1);
	n = cachetier_obj_pread_probe(o1, buf, sizeof(buf), 0);
	stats(ct, &st);
	CHECK(n == (ssize_t)sizeof(buf) && memcmp(buf, data[1], sizeof(buf)) == 0,
	      "room: object 1's probe: %zd", n);
	CHECK(st.room_waits == 0 && st.evictions == 1,
	      "room: object 1's fill: %llu room waits, %llu evictions (want 0, 1)",
	      (unsigned long long)st.room_waits, (unsigned long long)st.evictions);
	if (fd >= 0)
		close(fd); /* the eviction goes on */
	pthread_join(t, NULL);
	CHECK(r0.n == (ssize_t)sizeof(r0.buf) && memcmp(r0.buf, data[0], sizeof(r0.buf)) == 0,
	      "room: object 0's probe: %zd", r0.n);
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.room_waits == 0 && st.evictions == 1 && st.evicted_bytes == 8 * u &&
		  st.bytes_used == limit - 6 * u,
	      "room: after: %llu room waits, %llu evictions of %llu bytes, %llu bytes used",
	      (unsigned long long)st.room_waits, (unsigned long long)st.evictions,
	      (unsigned long long)st.evicted_bytes, (unsigned long long)st.bytes_used);
	/* the big object's first chunk fetched again, the rest from the cache */
	big = obj(ct, be, NOBJ);
	CHECK(read_check(big, NOBJ, 0, 2 * CHUNK, 1) == 0, "room: the evicted units read again");
	cachetier_obj_unref(big);
	cachetier_obj_unref(o1);
	cachetier_obj_unref(r0.o);
	cachetier_close(ct);
	backend_close(be);
}

/* An eviction's punch runs on the puncher (cachetier_punch.c), not on the
 * fill that evicted. A cache of 16 chunks full of the big object's units;
 * chunk 0 read again before the others; the puncher held
 * (cachetier_punch_hold). A probe at chunk 20 needs one
 * unit's room: its eviction takes chunk 0's 8 units (the least recently
 * used) and queues their punch; the probe returns exact bytes while the
 * punch waits (punches 0, 1 queued and pending). A reader of unit 0 then
 * waits (evicting_waits 1; nothing fetched for it) until the hold ends,
 * then gets exact bytes from a refill after the punch (one punch). Held
 * again, probes fill the cache and the next eviction (chunk 1) is queued
 * when the tier closes: close punches it (a hole over chunk 1 in the data
 * file) and leaves unit 0's refill (data at offset 0). Before the puncher
 * the probe's fill punched itself (punches 1 when it returned). */
static void test_punch_queue(void)
{
	struct backend *be = store("");
	const uint64_t u = CHUNK / 8, limit = 16 * CHUNK;
	struct cachetier *ct = tier(be, "c-punchq", limit, 4);
	struct cachetier_obj *big = obj(ct, be, NOBJ);
	struct room_read r = {0};
	struct cachetier_stats st;
	unsigned char buf[64];
	uint64_t fetched;
	char path[700];
	pthread_t t;
	ssize_t n;
	off_t at0, at1;
	int fd, i;

	CHECK(read_check(big, NOBJ, 0, limit, 0) == 0, "punchq: fill the cache");
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.bytes_used == limit && st.evictions == 0,
	      "punchq: %llu bytes used, %llu evictions", (unsigned long long)st.bytes_used,
	      (unsigned long long)st.evictions);
	/* the order of last use: chunk 0, then the rest (the fills ended in
	 * any order) */
	CHECK(read_check(big, NOBJ, 0, CHUNK, 0) == 0 &&
		  read_check(big, NOBJ, CHUNK, limit - CHUNK, 0) == 0,
	      "punchq: read again");
	cachetier_punch_hold(ct, 1);
	n = cachetier_obj_pread_probe(big, buf, sizeof(buf), 20 * CHUNK);
	stats(ct, &st);
	CHECK(n == (ssize_t)sizeof(buf) && memcmp(buf, data[NOBJ] + 20 * CHUNK, sizeof(buf)) == 0,
	      "punchq: probe at chunk 20: %zd", n);
	CHECK(st.evictions == 1 && st.evicted_bytes == 8 * u && st.punches == 0 &&
		  st.punches_queued == 1 && st.punches_pending == 1,
	      "punchq: the fill returned before its punch: %llu evictions (%llu bytes), punches "
	      "%llu, queued %llu, pending %llu (want 1, %llu, 0, 1, 1)",
	      (unsigned long long)st.evictions, (unsigned long long)st.evicted_bytes,
	      (unsigned long long)st.punches, (unsigned long long)st.punches_queued,
	      (unsigned long long)st.punches_pending, (unsigned long long)(8 * u));
	fetched = st.bytes_fetched;
	/* a reader of an evicted unit waits for the punch (a state, polled;
	 * 60 s at most) */
	r.o = big;
	pthread_create(&t, NULL, room_read_main, &r);
	for (i = 0; i < 6000; i++) {
		stats(ct, &st);
		if (st.evicting_waits >= 1)
			break;
		usleep(10000);
	}
	CHECK(
	    st.evicting_waits == 1 && st.bytes_fetched == fetched && st.punches == 0 &&
		st.punches_pending == 1 && r.n == 0,
	    "punchq: reader of a unit being punched: %llu waits, fetched %llu more, punches %llu, "
	    "pending %llu, returned %zd (want 1, 0, 0, 1, 0)",
	    (unsigned long long)st.evicting_waits, (unsigned long long)(st.bytes_fetched - fetched),
	    (unsigned long long)st.punches, (unsigned long long)st.punches_pending, r.n);
	cachetier_punch_hold(ct, 0);
	pthread_join(t, NULL);
	CHECK(r.n == (ssize_t)sizeof(r.buf) && memcmp(r.buf, data[NOBJ], sizeof(r.buf)) == 0,
	      "punchq: reader after the punch: %zd", r.n);
	fills_idle(ct);
	stats(ct, &st);
	CHECK(
	    st.punches == 1 && st.punches_pending == 0 && st.bytes_fetched == fetched + u &&
		st.evictions == 1,
	    "punchq: after: punches %llu, pending %llu, fetched %llu more, evictions %llu (want 1, "
	    "0, %llu, 1)",
	    (unsigned long long)st.punches, (unsigned long long)st.punches_pending,
	    (unsigned long long)(st.bytes_fetched - fetched), (unsigned long long)st.evictions,
	    (unsigned long long)u);
	/* held again: probes fill the cache (6 units), the 7th evicts chunk 1 */
	cachetier_punch_hold(ct, 1);
	for (i = 0; i < 7; i++) {
		n = cachetier_obj_pread_probe(big, buf, sizeof(buf), (uint64_t)(24 + i) * CHUNK);
		CHECK(n == (ssize_t)sizeof(buf) &&
			  memcmp(buf, data[NOBJ] + (24 + i) * CHUNK, sizeof(buf)) == 0,
		      "punchq: probe at chunk %d: %zd", 24 + i, n);
	}
	stats(ct, &st);
	CHECK(st.evictions == 2 && st.evicted_bytes == 16 * u && st.punches == 1 &&
		  st.punches_pending == 1,
	      "punchq: second eviction queued: %llu evictions (%llu bytes), punches %llu, pending "
	      "%llu (want 2, %llu, 1, 1)",
	      (unsigned long long)st.evictions, (unsigned long long)st.evicted_bytes,
	      (unsigned long long)st.punches, (unsigned long long)st.punches_pending,
	      (unsigned long long)(16 * u));
	CHECK(st_path(ct, path, sizeof(path)) == 0, "punchq: the big object's state file");
	path[strlen(path) - 3] = '\0'; /* its data file */
	cachetier_obj_unref(big);
	cachetier_close(ct); /* held: close punches it */
	fd = open(path, O_RDONLY);
	at0 = fd >= 0 ? lseek(fd, 0, SEEK_DATA) : -1;
	at1 = fd >= 0 ? lseek(fd, CHUNK, SEEK_DATA) : -1;
	CHECK(at0 == 0 && at1 >= (off_t)(2 * CHUNK),
	      "punchq: after close: data at %lld (want 0: unit 0's refill), from chunk 1 at %lld "
	      "(want >= %u: punched)",
	      (long long)at0, (long long)at1, 2 * CHUNK);
	if (fd >= 0)
		close(fd);
	backend_close(be);
}

/* The puncher takes every queued punch in one wake-up and merges the
 * adjacent units of one object's punches into one hole (cachetier_punch.c,
 * punch_batch). A cache of 16 chunks (128 units) full: the big object's
 * units 0-103 and object 0's units 0-23, every one marked by a plan:
 * object 0's 24 and the big object's 80-103 needed furthest, alternately
 * (object 0's unit 23 last, then the big object's 103, object 0's 22, ...),
 * the big object's 0-79 sooner. The puncher held, 12 probes of the big
 * object (units 200-211, each marked near first) each evict exactly one
 * unit (the furthest: the next is the other object's), 12 evictions, all
 * queued (punches 0, queued 12, pending 12, no room wait: 12 units are
 * within room_over's 16). Released, the puncher punches them in 1 batch
 * with 2 holes (object 0's units 18-23, the big object's 98-103). Before
 * the batches: the 9th to 12th evictions found the queue (8) full and
 * punched themselves (punches 4, queued 8), and the 12 queued made 12
 * holes. The evicted units then read exact bytes again. The batch's ends
 * (12 punches: units EMPTY under their object's lock, bytes off
 * ct->evicting) take ct->lock 0 times on the puncher (punch_tier_locks: no
 * fill waits for the bytes); before, the puncher took it at its start and
 * for each batch's ends (2 here). */
static void test_punch_batch(void)
{
	struct backend *be = store("");
	const uint64_t u = CHUNK / 8, limit = 16 * CHUNK;
	struct cachetier *ct = tier(be, "c-punchb", limit, 4);
	struct cachetier_obj *a = obj(ct, be, NOBJ), *b = obj(ct, be, 0);
	const uint32_t now = 10;
	struct cachetier_stats st;
	unsigned char buf[64];
	int ok = 1;

	CHECK(read_check(a, NOBJ, 0, 104 * u, 0) == 0 && read_check(b, 0, 0, 24 * u, 0) == 0,
	      "punchb: fill the cache");
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.bytes_used == limit && st.evictions == 0,
	      "punchb: %llu bytes used, %llu evictions", (unsigned long long)st.bytes_used,
	      (unsigned long long)st.evictions);
	cachetier_plan_now(ct, now);
	ok &= cachetier_plan_mark(a, 0, 80 * u, now + 100) == 0;
	for (uint32_t j = 0; j < 24; j++) {
		ok &= cachetier_plan_mark(b, j * u, u, now + 1000 + 2 * j + 1) == 0;
		ok &= cachetier_plan_mark(a, (80 + j) * u, u, now + 1000 + 2 * j) == 0;
	}
	CHECK(ok, "punchb: marks");
	cachetier_punch_hold(ct, 1);
	for (uint32_t i = 0; i < 12; i++) {
		ssize_t n;

		CHECK(cachetier_plan_mark(a, (200 + i) * u, u, now + 50) == 0, "punchb: mark %u",
		      200 + i);
		n = cachetier_obj_pread_probe(a, buf, sizeof(buf), (200 + i) * u);
		CHECK(n == (ssize_t)sizeof(buf) &&
			  memcmp(buf, data[NOBJ] + (200 + i) * u, sizeof(buf)) == 0,
		      "punchb: probe at unit %u: %zd", 200 + i, n);
	}
	stats(ct, &st);
	CHECK(st.evictions == 12 && st.evicted_bytes == 12 * u && st.punches == 0 &&
		  st.punches_queued == 12 && st.punches_pending == 12 && st.room_waits == 0,
	      "punchb: held: %llu evictions (%llu bytes), punches %llu, queued %llu, pending %llu, "
	      "room waits %llu (want 12, %llu, 0, 12, 12, 0)",
	      (unsigned long long)st.evictions, (unsigned long long)st.evicted_bytes,
	      (unsigned long long)st.punches, (unsigned long long)st.punches_queued,
	      (unsigned long long)st.punches_pending, (unsigned long long)st.room_waits,
	      (unsigned long long)(12 * u));
	CHECK(cachetier_obj_cached_bytes(b) == 18 * u,
	      "punchb: object 0 holds %llu bytes (want %llu)",
	      (unsigned long long)cachetier_obj_cached_bytes(b), (unsigned long long)(18 * u));
	cachetier_punch_hold(ct, 0);
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.punches == 2 && st.punch_batches == 1 && st.punches_pending == 0,
	      "punchb: released: punches %llu in %llu batches, pending %llu (want 2, 1, 0)",
	      (unsigned long long)st.punches, (unsigned long long)st.punch_batches,
	      (unsigned long long)st.punches_pending);
	CHECK(st.punch_tier_locks == 0,
	      "punchb: the puncher took ct->lock %llu times for 1 batch of 12 ends (want 0)",
	      (unsigned long long)st.punch_tier_locks);
	CHECK(read_check(b, 0, 18 * u, 6 * u, 0) == 0 && read_check(a, NOBJ, 98 * u, 6 * u, 0) == 0,
	      "punchb: the evicted units read again");
	cachetier_obj_unref(a);
	cachetier_obj_unref(b);
	cachetier_close(ct);
	backend_close(be);
}

static void test_crash(uint64_t seed)
{
	struct cachetier_stats st;
	struct backend *be;
	struct cachetier *ct;
	char dir[600], path[700];
	uint64_t total = 0;
	int status, bad, maps, ready[2];
	struct pollfd pf = {0};
	pid_t pid;

	fflush(NULL);
	if (pipe(ready) != 0)
		FAIL("pipe: %s", strerror(errno));
	pid = fork();
	if (pid == 0) {
		struct backend *cbe = store("delay_ms=40");
		struct cachetier *cct = tier(cbe, "c-crash", 1ull << 30, 2);
		unsigned char *buf = malloc(16384);
		int told = 0;

		/* a sequential reader of every object but the last (which so stays uncached),
		 * over and over until killed; it tells the parent once a map is on the disk, and
		 * the parent kills it then, while it fills the objects after */
		close(ready[0]);
		for (;;) {
			for (int i = 0; i < NOBJ; i++) {
				struct cachetier_obj *o = obj(cct, cbe, i);

				for (uint64_t off = 0; off < sizes[i]; off += 16384)
					cachetier_obj_pread(o, buf, 16384, off);
				cachetier_obj_unref(o);
				if (!told && count_maps(data_dir(cct)) > 0)
					told = write(ready[1], "m", 1) == 1;
			}
		}
	}
	CHECK(pid > 0, "fork");
	close(ready[1]);
	/* a hold, not a timing window: wait (within a deadline) for the child's word */
	pf.fd = ready[0];
	pf.events = POLLIN;
	CHECK(poll(&pf, 1, 120 * 1000) == 1, "the child wrote no map within 120 s");
	close(ready[0]);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	CHECK(WIFSIGNALED(status), "child was not killed");

	be = store("");
	ct = tier(be, "c-crash", 1ull << 30, 4);
	maps = count_maps(data_dir(ct));
	bad = read_all_exact(ct, be, seed);
	stats(ct, &st);
	for (int i = 0; i <= NOBJ; i++)
		total += sizes[i];
	printf("crash: %d maps survived; reopen fetched %llu of %llu bytes\n", maps,
	       (unsigned long long)st.bytes_fetched, (unsigned long long)total);
	CHECK(bad == 0, "%d reads after the crash wrong", bad);
	CHECK(maps > 0 && st.bytes_fetched < total, "nothing survived the crash");
	snprintf(dir, sizeof(dir), "%s", data_dir(ct));
	cachetier_close(ct);

	/* damage a map: its object must be fetched again, never misread */
	{
		DIR *d = opendir(dir);
		struct dirent *de;
		int damaged = 0;

		while (d && (de = readdir(d)) && !damaged) {
			int fd;
			unsigned char b;

			if (strlen(de->d_name) != 20 || strcmp(de->d_name + 16, ".map") != 0)
				continue;
			snprintf(path, sizeof(path), "%s/%.20s", dir, de->d_name);
			fd = open(path, O_RDWR);
			if (fd >= 0 && pread(fd, &b, 1, 45) == 1) {
				b ^= 0x40;
				damaged = pwrite(fd, &b, 1, 45) == 1;
			}
			if (fd >= 0)
				close(fd);
		}
		if (d)
			closedir(d);
		CHECK(damaged, "no map to damage");
	}
	ct = tier(be, "c-crash", 1ull << 30, 4);
	bad = read_all_exact(ct, be, seed + 1);
	stats(ct, &st);
	CHECK(bad == 0, "%d reads after map damage wrong", bad);
	CHECK(st.bytes_fetched > 0, "the damaged map was trusted");
	cachetier_close(ct);
	backend_close(be);
}

/* ---- the durability delay ---- */

/* cfg.durable_delay_s: a unit is named in its object's map (after an
 * fdatasync) once it is that old. (1) With a delay of an hour, a child
 * reads every object whole and closes each (without the delay each close
 * writes its map): no map exists; killed with -9, the next tier trusts
 * none of its units (no map), fetches every byte again, exactly once, and
 * serves each exactly. (2) A clean close names every unit: the tier after
 * it serves everything with the store failing every request. (3) With a
 * delay of a second, the flusher names an object's units once they are
 * that old (waited for, within 60 s). */
static void test_durable(uint64_t seed)
{
	struct cachetier_stats st;
	struct backend *be;
	struct cachetier *ct;
	struct cachetier_obj *o;
	uint64_t total = 0;
	int status, bad, maps = 0, ready[2];
	struct pollfd pf = {0};
	char word = 0;
	pid_t pid;

	for (int i = 0; i <= NOBJ; i++)
		total += sizes[i];
	durable_delay_s = 3600;
	fflush(NULL);
	if (pipe(ready) != 0)
		FAIL("pipe: %s", strerror(errno));
	pid = fork();
	if (pid == 0) {
		struct backend *cbe = store("");
		struct cachetier *cct = tier(cbe, "c-durable", 1ull << 30, 4);
		int cbad = read_all_exact(cct, cbe, seed);

		fills_idle(cct);
		/* y: exact bytes and no map; else n */
		word = cbad == 0 && count_maps(data_dir(cct)) == 0 ? 'y' : 'n';
		if (write(ready[1], &word, 1) != 1)
			_exit(1);
		for (;;)
			pause(); /* killed here, its tier open */
	}
	CHECK(pid > 0, "fork");
	close(ready[1]);
	pf.fd = ready[0];
	pf.events = POLLIN;
	CHECK(poll(&pf, 1, 120 * 1000) == 1 && read(ready[0], &word, 1) == 1,
	      "the child did not read its objects within 120 s");
	close(ready[0]);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	CHECK(WIFSIGNALED(status), "child was not killed");
	CHECK(word == 'y', "the child read wrong bytes, or a map named units younger than the "
			   "durability delay (its object's close wrote it)");

	be = store("");
	ct = tier(be, "c-durable", 1ull << 30, 4);
	maps = count_maps(data_dir(ct));
	bad = read_all_exact(ct, be, seed + 1);
	stats(ct, &st);
	printf("durable: after kill -9: %d maps, fetched %llu of %llu bytes\n", maps,
	       (unsigned long long)st.bytes_fetched, (unsigned long long)total);
	CHECK(maps == 0, "%d maps after the kill: units younger than the delay were named", maps);
	CHECK(bad == 0, "%d reads after the kill wrong", bad);
	CHECK(st.bytes_fetched == total,
	      "after the kill: fetched %llu bytes of %llu: units "
	      "younger than the delay were trusted (or fetched twice)",
	      (unsigned long long)st.bytes_fetched, (unsigned long long)total);
	/* (2) a clean close names every unit, young or not */
	cachetier_close(ct);
	backend_close(be);
	be = store("fail_every=1&fail_after_bytes=1");
	ct = tier(be, "c-durable", 1ull << 30, 4);
	bad = read_all_exact(ct, be, seed + 2);
	stats(ct, &st);
	CHECK(bad == 0, "%d reads after a clean close wrong", bad);
	CHECK(st.fills == 0 && st.bytes_fetched == 0,
	      "after a clean close: %llu fills, %llu bytes fetched (units left unnamed)",
	      (unsigned long long)st.fills, (unsigned long long)st.bytes_fetched);
	cachetier_close(ct);
	backend_close(be);

	/* (3) units older than the delay are named by the flusher */
	durable_delay_s = 1;
	be = store("");
	ct = tier(be, "c-durable-1s", 1ull << 30, 4);
	o = obj(ct, be, 0);
	CHECK(read_check(o, 0, 0, sizes[0], 0) == 0, "object 0 wrong");
	cachetier_obj_unref(o);
	for (int w = 0; w < 6000 && (maps = count_maps(data_dir(ct))) == 0; w++)
		usleep(10000);
	CHECK(maps == 1, "%d maps 60 s after the fill with a delay of 1 s", maps);
	cachetier_close(ct);
	backend_close(be);
	durable_delay_s = 0;
}

/* ---- the cache directory removed under an open tier ---- */

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Remove every file of dir, then dir (as rm -rf would). */
static void remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char path[900];

	CHECK(d != NULL, "opendir %s: %s", dir, strerror(errno));
	while (d && (de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		CHECK(unlink(path) == 0, "unlink %s: %s", path, strerror(errno));
	}
	if (d)
		closedir(d);
	CHECK(rmdir(dir) == 0, "rmdir %s: %s", dir, strerror(errno));
}

/* test_mapgone: the tier's data directory removed while an object is
 * open. Its reads stay exact (the open data file); its map cannot be
 * written, and a failed write is tried again once a batch (a second), not
 * at once: the flusher that found the map due again at once retried
 * without pause for as long as the write failed (hundreds a second). The
 * bound is a count against the time taken: a busy machine only makes
 * fewer attempts. (An object opened afterwards fails with ENOENT, which
 * fs_shard.c tells the user as EIO: mount-hostile10-cachegone-read.) */
static void test_mapgone(uint64_t seed)
{
	struct backend *be;
	struct cachetier *ct;
	struct cachetier_obj *o, *o1 = NULL;
	struct backend_objinfo info;
	struct cachetier_stats st;
	double t0, took;
	int err;

	(void)seed;
	/* with a durability delay a failed map is due again at once (its
	 * dirty time cleared): the case that spun */
	durable_delay_s = 1;
	be = store("");
	ct = tier(be, "c-mapgone", 1ull << 30, 4);
	o = obj(ct, be, 0);
	remove_dir(data_dir(ct));
	t0 = mono_s();
	CHECK(read_check(o, 0, 0, sizes[0], 0) == 0, "object 0 after the removal: wrong bytes");
	/* three failed writes take two retry delays, about 2 s; watched for
	 * 4 s at least (a flusher that spun did so in bursts) */
	for (int w = 0; w < 6000; w++) {
		stats(ct, &st);
		if (st.map_write_errors >= 3 && mono_s() - t0 >= 4)
			break;
		usleep(10000);
	}
	took = mono_s() - t0;
	stats(ct, &st);
	printf("mapgone: %llu map writes failed in %.2f s, %llu written\n",
	       (unsigned long long)st.map_write_errors, took, (unsigned long long)st.map_writes);
	CHECK(st.map_write_errors >= 3, "%llu map writes failed within 60 s (want 3: retried)",
	      (unsigned long long)st.map_write_errors);
	CHECK(st.map_write_errors <= 2 + (uint64_t)took,
	      "%llu failed map writes in %.2f s: retried without pause (once a second wanted)",
	      (unsigned long long)st.map_write_errors, took);
	CHECK(st.map_writes == 0, "%llu maps written into a removed directory",
	      (unsigned long long)st.map_writes);
	CHECK(read_check(o, 0, 0, sizes[0], 0) == 0, "object 0 read again: wrong bytes");
	CHECK(backend_stat(be, keys[1], &info) == 0, "stat %s", keys[1]);
	err = cachetier_obj_open(ct, &info, CACHETIER_RAW, &o1);
	CHECK(err == -ENOENT, "object 1 opened after the removal: %d (%s), want ENOENT", err,
	      strerror(-err));
	if (o1)
		cachetier_obj_unref(o1);
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
	durable_delay_s = 0;
}

/* ---- fill errors ---- */

static void test_errors(void)
{
	struct backend *be = store("fail_every=3");
	struct cachetier *ct = tier(be, "c-errors", 1ull << 30, 4);
	struct cachetier_obj *o = obj(ct, be, NOBJ);
	size_t nchunks = (sizes[NOBJ] + CHUNK - 1) / CHUNK;
	int eio = 0, other = 0, gaveup = 0;
	struct cachetier_stats st;

	for (size_t c = 0; c < nchunks; c += 3) {
		int err = -1;

		for (int tries = 0; tries < 20 && err != 0; tries++) {
			err = read_check(o, NOBJ, c * CHUNK + 10, 100, tries & 1);
			if (err == -EIO)
				eio++;
			else if (err != 0)
				other++;
		}
		gaveup += err != 0;
	}
	stats(ct, &st);
	printf("errors: %d reads got EIO, fill_errors %llu\n", eio,
	       (unsigned long long)st.fill_errors);
	CHECK(eio > 0 && st.fill_errors > 0, "no fill error reached a reader");
	CHECK(other == 0, "%d reads failed with something else than EIO or wrong bytes", other);
	CHECK(gaveup == 0, "%d reads never succeeded", gaveup);
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
}

/* ---- fills cut mid-chunk ---- */

/* Allocated bytes of the data files (data/<16 hex>) of ct's directory. */
static uint64_t data_blocks(struct cachetier *ct)
{
	DIR *d = opendir(data_dir(ct));
	struct dirent *de;
	uint64_t b = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char path[900];
		struct stat st;

		if (strlen(de->d_name) != 16)
			continue;
		snprintf(path, sizeof(path), "%s/%s", data_dir(ct), de->d_name);
		if (stat(path, &st) == 0)
			b += (uint64_t)st.st_blocks * 512;
	}
	closedir(d);
	return b;
}

/* A fill streams into the data file as the store hands bytes over; one cut
 * midway (half the chunk written) must leave nothing on the disk and
 * nothing marked, and the next fill of the chunk must write exact bytes. */
static void test_cut(void)
{
	struct backend *be = store("cut_every=1");
	struct cachetier *ct = tier(be, "c-cut", 1ull << 30, 4);
	struct cachetier_obj *o = obj(ct, be, NOBJ);
	size_t nchunks = (sizes[NOBJ] + CHUNK - 1) / CHUNK;
	struct cachetier_stats st;
	int other = 0, gaveup = 0, eio = 0;

	for (size_t c = 0; c < 4; c++) {
		int err = read_check(o, NOBJ, c * CHUNK + 5, 100, (int)(c & 1));

		CHECK(err == -EIO, "chunk %zu of a store that cuts every read: %d", c, err);
	}
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.fill_errors >= 4 && st.fills == 0 && st.bytes_fetched == 0,
	      "cut fills: %llu errors, %llu fills, %llu bytes", (unsigned long long)st.fill_errors,
	      (unsigned long long)st.fills, (unsigned long long)st.bytes_fetched);
	CHECK(data_blocks(ct) == 0, "cut fills left %llu bytes in the data file",
	      (unsigned long long)data_blocks(ct));
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);

	/* every other read cut: each chunk is read exactly in the end */
	be = store("cut_every=2");
	ct = tier(be, "c-cut", 1ull << 30, 4);
	o = obj(ct, be, NOBJ);
	for (size_t c = 0; c < nchunks; c++) {
		int err = -1;

		for (int tries = 0; tries < 20 && err != 0; tries++) {
			err = read_check(o, NOBJ, c * CHUNK + (c * 977) % CHUNK, CHUNK, tries & 1);
			if (err == -EIO)
				eio++;
			else if (err != 0)
				other++;
		}
		gaveup += err != 0;
	}
	CHECK(read_check(o, NOBJ, 0, sizes[NOBJ], 0) == 0, "whole object after cut fills");
	fills_idle(ct);
	stats(ct, &st);
	printf("cut: %d reads got EIO, fill_errors %llu, fills %llu\n", eio,
	       (unsigned long long)st.fill_errors, (unsigned long long)st.fills);
	CHECK(st.fill_errors > 0, "no fill was cut");
	CHECK(other == 0, "%d reads failed with something else than EIO or wrong bytes", other);
	CHECK(gaveup == 0, "%d reads never succeeded", gaveup);
	CHECK(st.bytes_fetched == sizes[NOBJ], "bytes fetched %llu, object %zu",
	      (unsigned long long)st.bytes_fetched, sizes[NOBJ]);
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
}

/* ---- bytes in pieces ---- */

/* A store that hands a read's bytes over in pieces of any size (piece=P,
 * as a network does; every other configuration also cuts every 4th read)
 * into a tier of 512 KiB chunks (a fill gathers its bytes in a buffer of
 * 128 KiB and writes it when full: pieces straddle units, the buffer and
 * runs): every object read whole is exact, and after a reopen on a store
 * that fails every read, every unit served from the disk matches the
 * CRC32C its fill recorded as the pieces passed (no unit corrupt, nothing
 * fetched). */
static void test_pieces(uint64_t seed)
{
	static const size_t fixed[] = {7, 4095, 65536, 131071, 131072, 131073, 400000};
	uint64_t s = seed * 31 + 7;

	for (int k = 0; k < 10; k++) {
		size_t p = k < 7 ? fixed[k] : 1 + (size_t)(rnd(&s) % 300000);
		struct cachetier_stats st;
		struct backend *be;
		struct cachetier *ct;
		char q[96], name[32];
		int gaveup = 0, bad = 0;

		snprintf(q, sizeof(q), "piece=%zu%s", p, k % 2 ? "&cut_every=4" : "");
		snprintf(name, sizeof(name), "c-pieces-%d", k);
		be = store(q);
		ct = tier_chunk(be, name, 1ull << 30, 4, 8 * CHUNK);
		for (int i = 0; i <= NOBJ; i++) {
			struct cachetier_obj *o = obj(ct, be, i);
			int err = -1;

			for (int tries = 0; tries < 20 && err != 0; tries++)
				err = read_check(o, i, 0, sizes[i], tries & 1);
			gaveup += err != 0;
			cachetier_obj_unref(o);
		}
		CHECK(gaveup == 0, "pieces of %zu: %d objects never read exactly", p, gaveup);
		fills_idle(ct);
		cachetier_close(ct);
		backend_close(be);

		be = store("fail_every=1&fail_after_bytes=1");
		ct = tier_chunk(be, name, 1ull << 30, 4, 8 * CHUNK);
		for (int i = 0; i <= NOBJ; i++) {
			struct cachetier_obj *o = obj(ct, be, i);

			bad += read_check(o, i, 0, sizes[i], i & 1) != 0;
			cachetier_obj_unref(o);
		}
		stats(ct, &st);
		CHECK(bad == 0 && st.units_corrupt == 0 && st.bytes_fetched == 0,
		      "pieces of %zu, after reopen: %d objects wrong, %llu units corrupt, %llu "
		      "bytes fetched",
		      p, bad, (unsigned long long)st.units_corrupt,
		      (unsigned long long)st.bytes_fetched);
		cachetier_close(ct);
		backend_close(be);
	}
}

/* ---- units readable as they land ---- */

/* A fill's units are readable as they land, not when the fill ends: the
 * store holds a fill of the first 512 KiB chunk (8 units of 64 KiB) after
 * its first 7 units' bytes (hold_at) until the test lets it go. The fill
 * writer has then written the 3 full buffers of 128 KiB (units 0-5; unit
 * 6's bytes wait in the sink's partial buffer), so a read of unit 0
 * returns its exact bytes while the fill still runs, and the fill stays
 * in flight with no request counted and exactly 6 units valid. One fill thread: nothing else is
 * fetched. On a store whose units became valid only at the fill's end, the read waits for the hold
 * (the store gives up after 30 s: -EIO). */
static void test_land(void)
{
	char gate[sizeof(tmpdir) + 16];
	struct cachetier_stats st;
	struct backend *be;
	struct cachetier *ct;
	struct cachetier_obj *o;
	uint64_t held;
	int fd, err;

	snprintf(gate, sizeof(gate), "%s/src.hold", tmpdir);
	fd = open(gate, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0, "create %s", gate);
	if (fd >= 0)
		close(fd);
	be = store("hold_at=458752");
	ct = tier_chunk(be, "c-land", 1ull << 30, 1, 8 * CHUNK);
	o = obj(ct, be, NOBJ);
	err = read_check(o, NOBJ, 5, 1000, 0);
	/* the writer may still be on the buffers after unit 0's: up to 60 s */
	for (int i = 0; i < 6000 && cachetier_obj_cached_bytes(o) < 6 * 64 * 1024; i++)
		usleep(10000);
	stats(ct, &st);
	held = cachetier_obj_cached_bytes(o);
	printf("land: read of unit 0 during its fill: %d, fills %llu, valid %llu bytes\n", err,
	       (unsigned long long)st.fills, (unsigned long long)held);
	CHECK(err == 0, "unit 0 read while its fill is held: %d", err);
	CHECK(st.fills == 0 && st.fills_inflight == 1, "while held: fills %llu, in flight %llu",
	      (unsigned long long)st.fills, (unsigned long long)st.fills_inflight);
	CHECK(held == 6 * 64 * 1024, "while held: %llu bytes valid, not 6 units",
	      (unsigned long long)held);
	unlink(gate);
	CHECK(read_check(o, NOBJ, 0, 8 * CHUNK, 1) == 0, "the chunk after the hold");
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.fills >= 1 && st.fill_errors == 0, "after the hold: fills %llu, errors %llu",
	      (unsigned long long)st.fills, (unsigned long long)st.fill_errors);
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
}

/* ---- a changed object ---- */

static void test_changed(uint64_t seed)
{
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-changed", 1ull << 30, 4);
	struct backend_objinfo a, b;
	struct cachetier_obj *o;
	struct timespec ts[2];
	char path[512];
	uint64_t s = seed ^ 0xabcdef;

	o = obj(ct, be, 0);
	CHECK(read_check(o, 0, 0, sizes[0], 0) == 0, "first version");
	cachetier_obj_unref(o);
	backend_stat(be, keys[0], &a);

	for (size_t k = 0; k < sizes[0]; k++)
		data[0][k] = (unsigned char)rnd(&s);
	write_src(keys[0], data[0], sizes[0]);
	snprintf(path, sizeof(path), "%s/src/%s", tmpdir, keys[0]);
	clock_gettime(CLOCK_REALTIME, &ts[0]);
	ts[0].tv_sec += 100;
	ts[1] = ts[0];
	utimensat(AT_FDCWD, path, ts, 0);
	backend_stat(be, keys[0], &b);
	CHECK(strcmp(a.etag, b.etag) != 0, "ETag did not change");

	o = obj(ct, be, 0);
	CHECK(read_check(o, 0, 0, sizes[0], 0) == 0, "new version served from old chunks");
	CHECK(read_check(o, 0, CHUNK - 7, 100, 1) == 0, "new version (fd)");
	cachetier_obj_unref(o);
	cachetier_close(ct);
	ct = tier(be, "c-changed", 1ull << 30, 4);
	o = obj(ct, be, 0);
	CHECK(read_check(o, 0, 0, sizes[0], 1) == 0, "new version after reopen");
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
}

/* Object i as a store without ETags lists it: its ETag emptied, so its
 * version is its size and mtime (backend_version_same). */
static struct cachetier_obj *obj_noetag(struct cachetier *ct, struct backend *be, int i,
					struct backend_objinfo *info)
{
	struct cachetier_obj *o = NULL;
	int err = backend_stat(be, keys[i], info);

	CHECK(err == 0, "stat %s: %d", keys[i], err);
	info->etag[0] = '\0';
	err = cachetier_obj_open(ct, info, CACHETIER_RAW, &o);
	CHECK(err == 0, "open %s without an ETag: %d", keys[i], err);
	if (err)
		exit(1);
	return o;
}

/* A version without an ETag rewritten to other bytes of the same size
 * with a new mtime: the new version never meets the old one's units, in
 * the running tier nor after a reopen (its map keeps the mtime: the new
 * version's units are served from it, no fill; the old version's map is
 * no map of the new one's file). */
static void test_changed_noetag(uint64_t seed)
{
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-changed-noetag", 1ull << 30, 4);
	struct backend_objinfo a, b;
	struct cachetier_obj *o;
	struct cachetier_stats st;
	struct timespec ts[2];
	char path[512];
	uint64_t s = seed ^ 0x5a5e512e;
	const int i = 1;

	o = obj_noetag(ct, be, i, &a);
	CHECK(read_check(o, i, 0, sizes[i], 0) == 0, "first version");
	cachetier_obj_unref(o);
	cachetier_close(ct);
	ct = tier(be, "c-changed-noetag", 1ull << 30, 4);

	for (size_t k = 0; k < sizes[i]; k++)
		data[i][k] = (unsigned char)rnd(&s);
	write_src(keys[i], data[i], sizes[i]);
	snprintf(path, sizeof(path), "%s/src/%s", tmpdir, keys[i]);
	ts[0].tv_sec = a.mtime + 100;
	ts[0].tv_nsec = 0;
	ts[1] = ts[0];
	utimensat(AT_FDCWD, path, ts, 0);
	o = obj_noetag(ct, be, i, &b);
	CHECK(b.size == a.size && b.mtime == a.mtime + 100, "same size, mtime 100 s on");
	CHECK(read_check(o, i, 0, sizes[i], 0) == 0, "new version served from old units");
	CHECK(read_check(o, i, CHUNK - 7, 100, 1) == 0, "new version (fd)");
	cachetier_obj_unref(o);
	cachetier_close(ct);

	ct = tier(be, "c-changed-noetag", 1ull << 30, 4);
	o = obj_noetag(ct, be, i, &b);
	CHECK(read_check(o, i, 0, sizes[i], 1) == 0, "new version after reopen");
	stats(ct, &st);
	CHECK(st.fills == 0, "new version after reopen: %llu fills, not 0 (its map not taken)",
	      (unsigned long long)st.fills);
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
}

/* ---- batch fills ---- */

static void batch_stats(struct cachetier *ct, struct cachetier_batch_result *r)
{
	memset(r, 0, sizeof(*r));
	cachetier_batch_stats(ct, r);
}

/* A window of a plan fetched with the store's batch read (the fault
 * store's batch=1 answers it as AIStore's GetBatch does), units of
 * CHUNK / 8. First calls of a tier return once their requests ended, so
 * every count is exact when the call returns:
 * - a window under 1 MiB is one request; its items are the runs of units
 *   of one object in plan order, each unit once (a piece over a unit an
 *   earlier piece claimed adds nothing); its reads then miss nothing; the
 *   same window again asks for nothing;
 * - 4 MiB in 65 pieces with par 4: 4 requests of 17, 17, 17 and 14
 *   pieces' runs, the object exact;
 * - no room: a cache of 4 units, each needed by the plan sooner than the
 *   window: nothing fetched or evicted, the window's bytes unfit, its
 *   units left unclaimed; the window needed first: the 2 units needed
 *   furthest ahead evicted, one request;
 * - a failed item (every 3rd read fails) and a cut one (every 2nd read is
 *   cut): their units empty, counted failed, nothing of the cut item left
 *   on the disk, read exactly on demand after (the cut one after a reopen);
 * - an object replaced before its answer (another ETag at the HEAD after):
 *   counted stale, its units empty (ESTALE for a reader waiting for them;
 *   the fault store cannot tell versions apart, so a later read of the old
 *   open object would fetch again), a new open of it reads exactly;
 * - a store with no batch read: -EOPNOTSUPP, refused, nothing left
 *   claimed. */
static void test_batch(void)
{
	const uint64_t u = CHUNK / 8;
	struct backend *be = store("batch=1");
	struct cachetier *ct = tier(be, "c-batch", 1ull << 30, 4);
	struct cachetier_obj *o[NOBJ + 1], *b;
	struct cachetier_batch_result r;
	struct cachetier_batch_piece w[65];
	struct cachetier_stats st;
	unsigned char buf[64];
	uint32_t now = 1000;
	int err;

	for (int i = 0; i <= NOBJ; i++)
		o[i] = obj(ct, be, i);
	b = o[NOBJ];
	w[0] = (struct cachetier_batch_piece){b, 100, 3 * u}; /* units 0-3 */
	w[1] = (struct cachetier_batch_piece){o[1], 0, 10};   /* unit 0 */
	w[2] = (struct cachetier_batch_piece){b, 10 * u, 1};  /* unit 10 */
	w[3] = (struct cachetier_batch_piece){b, 3 * u, 5};   /* unit 3 again */
	err = fetch_batch_fill(ct, w, 4, 4);
	batch_stats(ct, &r);
	CHECK(err == 0 && r.requests == 1 && r.items == 3 && r.bytes == 6 * u && r.failed == 0 &&
		  r.unfit == 0 && r.stale == 0 && r.refused == 0,
	      "one window: %d, %llu requests, %llu items, %llu bytes, %llu failed", err,
	      (unsigned long long)r.requests, (unsigned long long)r.items,
	      (unsigned long long)r.bytes, (unsigned long long)r.failed);
	CHECK(cachetier_obj_cached_bytes(b) == 5 * u && cachetier_obj_cached_bytes(o[1]) == u,
	      "one window: cached %llu and %llu", (unsigned long long)cachetier_obj_cached_bytes(b),
	      (unsigned long long)cachetier_obj_cached_bytes(o[1]));
	CHECK(read_check(b, NOBJ, 100, 3 * u, 1) == 0 && read_check(o[1], 1, 0, 10, 0) == 0 &&
		  read_check(b, NOBJ, 10 * u, 1, 1) == 0 && read_check(b, NOBJ, 3 * u, 5, 0) == 0,
	      "one window: reads");
	stats(ct, &st);
	CHECK(st.misses == 0, "one window: %llu reads missed", (unsigned long long)st.misses);
	err = fetch_batch_fill(ct, w, 4, 4);
	batch_stats(ct, &r);
	CHECK(err == 0 && r.requests == 1 && r.items == 3, "the window again: %d, %llu requests",
	      err, (unsigned long long)r.requests);
	for (int i = 0; i <= NOBJ; i++)
		cachetier_obj_unref(o[i]);
	cachetier_close(ct);

	/* 4 MiB in 65 pieces, par 4 */
	ct = tier(be, "c-batch-split", 1ull << 30, 4);
	b = obj(ct, be, NOBJ);
	for (int i = 0; i < 65; i++)
		w[i] = (struct cachetier_batch_piece){b, (uint64_t)i * CHUNK,
						      i < 64 ? CHUNK : sizes[NOBJ] - 64 * CHUNK};
	err = fetch_batch_fill(ct, w, 65, 4);
	batch_stats(ct, &r);
	CHECK(
	    err == 0 && r.requests == 4 && r.items == 4 && r.bytes == sizes[NOBJ] && r.failed == 0,
	    "4 MiB: %d, %llu requests, %llu items, %llu bytes", err, (unsigned long long)r.requests,
	    (unsigned long long)r.items, (unsigned long long)r.bytes);
	CHECK(read_check(b, NOBJ, 0, sizes[NOBJ], 0) == 0, "4 MiB: the object");
	stats(ct, &st);
	CHECK(st.misses == 0, "4 MiB: %llu reads missed", (unsigned long long)st.misses);
	cachetier_obj_unref(b);
	cachetier_close(ct);

	/* no room: units 0 of objects 0-3 fill the cache, needed at now + 1
	 * to now + 4; the window (units 0-1 of object 5) at now + 50 */
	ct = tier(be, "c-batch-room", 4 * u, 4);
	for (int i = 0; i < 6; i++)
		o[i] = obj(ct, be, i);
	cachetier_plan_now(ct, now);
	for (int i = 0; i < 4; i++) {
		CHECK(cachetier_plan_mark(o[i], 0, u, now + 1 + (uint32_t)i) == 0, "mark %d", i);
		CHECK(cachetier_obj_pread_probe(o[i], buf, sizeof(buf), 0) == sizeof(buf),
		      "read of unit 0 of object %d", i);
	}
	CHECK(cachetier_plan_mark(o[5], 0, 2 * u, now + 50) == 0, "mark the window far");
	w[0] = (struct cachetier_batch_piece){o[5], 0, 2 * u};
	err = fetch_batch_fill(ct, w, 1, 4);
	batch_stats(ct, &r);
	stats(ct, &st);
	CHECK(err == 0 && r.requests == 0 && r.unfit == 2 * u && st.unfit_bytes == 2 * u &&
		  st.evictions == 0 && cachetier_obj_cached_bytes(o[5]) == 0,
	      "no room: %d, %llu requests, unfit %llu (tier %llu), %llu evictions", err,
	      (unsigned long long)r.requests, (unsigned long long)r.unfit,
	      (unsigned long long)st.unfit_bytes, (unsigned long long)st.evictions);
	for (int i = 0; i < 4; i++)
		CHECK(unit0(o[i]), "no room: unit 0 of object %d evicted", i);
	/* needed first: objects 3 and 2 (now + 4, now + 3) make the room */
	CHECK(cachetier_plan_mark(o[5], 0, 2 * u, now) == 0, "mark the window first");
	err = fetch_batch_fill(ct, w, 1, 4);
	batch_stats(ct, &r);
	stats(ct, &st);
	CHECK(err == 0 && r.requests == 1 && r.bytes == 2 * u && r.unfit == 2 * u &&
		  st.evicted_bytes == 2 * u && cachetier_obj_cached_bytes(o[5]) == 2 * u,
	      "needed first: %d, %llu requests, %llu bytes, evicted %llu", err,
	      (unsigned long long)r.requests, (unsigned long long)r.bytes,
	      (unsigned long long)st.evicted_bytes);
	CHECK(unit0(o[0]) && unit0(o[1]) && !unit0(o[2]) && !unit0(o[3]),
	      "needed first: evicted the furthest: %d %d %d %d", unit0(o[0]), unit0(o[1]),
	      unit0(o[2]), unit0(o[3]));
	CHECK(read_check(o[5], 5, 0, 2 * u, 1) == 0, "needed first: the window's bytes");
	for (int i = 0; i < 6; i++)
		cachetier_obj_unref(o[i]);
	cachetier_close(ct);
	backend_close(be);

	/* a failed item: the 3rd of 3 */
	be = store("batch=1&fail_every=3");
	ct = tier(be, "c-batch-fail", 1ull << 30, 4);
	for (int i = 0; i < 3; i++) {
		o[i] = obj(ct, be, i);
		w[i] = (struct cachetier_batch_piece){o[i], u, u};
	}
	err = fetch_batch_fill(ct, w, 3, 4);
	batch_stats(ct, &r);
	CHECK(err == 0 && r.requests == 1 && r.items == 3 && r.failed == 1 && r.bytes == 2 * u,
	      "a failed item: %d, %llu items, %llu failed, %llu bytes", err,
	      (unsigned long long)r.items, (unsigned long long)r.failed,
	      (unsigned long long)r.bytes);
	CHECK(cachetier_obj_cached_bytes(o[0]) == u && cachetier_obj_cached_bytes(o[1]) == u &&
		  cachetier_obj_cached_bytes(o[2]) == 0,
	      "a failed item: its units cached");
	/* a probe: no readahead to race for the store's next failing read */
	CHECK(cachetier_obj_pread_probe(o[2], buf, sizeof(buf), u) == sizeof(buf) &&
		  memcmp(buf, data[2] + u, sizeof(buf)) == 0,
	      "a failed item: read on demand");
	for (int i = 0; i < 3; i++)
		cachetier_obj_unref(o[i]);
	cachetier_close(ct);
	backend_close(be);

	/* a cut item: the 2nd of 2, half its bytes handed over */
	be = store("batch=1&cut_every=2");
	ct = tier(be, "c-batch-cut", 1ull << 30, 4);
	o[0] = obj(ct, be, 0);
	o[1] = obj(ct, be, 1);
	w[0] = (struct cachetier_batch_piece){o[0], 0, u};
	w[1] = (struct cachetier_batch_piece){o[1], 0, 2 * u};
	err = fetch_batch_fill(ct, w, 2, 4);
	batch_stats(ct, &r);
	CHECK(err == 0 && r.items == 2 && r.failed == 1 && r.bytes == u &&
		  cachetier_obj_cached_bytes(o[1]) == 0,
	      "a cut item: %d, %llu failed, %llu bytes", err, (unsigned long long)r.failed,
	      (unsigned long long)r.bytes);
	CHECK(data_blocks(ct) == u, "a cut item: %llu bytes on the disk, want %llu",
	      (unsigned long long)data_blocks(ct), (unsigned long long)u);
	cachetier_obj_unref(o[0]);
	cachetier_obj_unref(o[1]);
	cachetier_close(ct);
	backend_close(be);
	/* reopened on a store that cuts nothing (a read of this one races
	 * its own readahead for the next cut): object 0's unit kept, object
	 * 1 read on demand */
	be = store("batch=1");
	ct = tier(be, "c-batch-cut", 1ull << 30, 4);
	o[0] = obj(ct, be, 0);
	o[1] = obj(ct, be, 1);
	CHECK(cachetier_obj_cached_bytes(o[0]) == u && cachetier_obj_cached_bytes(o[1]) == 0,
	      "a cut item: after a reopen, cached %llu and %llu",
	      (unsigned long long)cachetier_obj_cached_bytes(o[0]),
	      (unsigned long long)cachetier_obj_cached_bytes(o[1]));
	CHECK(read_check(o[0], 0, 0, u, 0) == 0 && read_check(o[1], 1, 0, 2 * u, 0) == 0,
	      "a cut item: reads after");
	cachetier_obj_unref(o[0]);
	cachetier_obj_unref(o[1]);
	cachetier_close(ct);
	backend_close(be);

	/* an object replaced (its mtime: another ETag) after it was opened */
	be = store("batch=1");
	ct = tier(be, "c-batch-stale", 1ull << 30, 4);
	o[6] = obj(ct, be, 6);
	{
		struct timespec ts[2];
		char path[512];

		snprintf(path, sizeof(path), "%s/src/%s", tmpdir, keys[6]);
		clock_gettime(CLOCK_REALTIME, &ts[0]);
		ts[0].tv_sec += 200;
		ts[1] = ts[0];
		CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0, "utimensat");
	}
	w[0] = (struct cachetier_batch_piece){o[6], 0, 2 * u};
	err = fetch_batch_fill(ct, w, 1, 4);
	batch_stats(ct, &r);
	CHECK(err == 0 && r.requests == 1 && r.stale == 1 && r.bytes == 0 &&
		  cachetier_obj_cached_bytes(o[6]) == 0,
	      "a replaced object: %d, %llu stale, %llu bytes", err, (unsigned long long)r.stale,
	      (unsigned long long)r.bytes);
	cachetier_obj_unref(o[6]);
	o[6] = obj(ct, be, 6);
	CHECK(read_check(o[6], 6, 0, 2 * u, 0) == 0, "a replaced object: opened again");
	cachetier_obj_unref(o[6]);
	cachetier_close(ct);
	backend_close(be);

	/* no batch read */
	be = store("");
	ct = tier(be, "c-batch-refused", 1ull << 30, 4);
	o[0] = obj(ct, be, 0);
	w[0] = (struct cachetier_batch_piece){o[0], 0, 2 * u};
	err = fetch_batch_fill(ct, w, 1, 4);
	batch_stats(ct, &r);
	CHECK(err == -EOPNOTSUPP && r.refused == 1 && r.requests == 0 &&
		  cachetier_obj_cached_bytes(o[0]) == 0,
	      "no batch read: %d, refused %llu, %llu requests", err, (unsigned long long)r.refused,
	      (unsigned long long)r.requests);
	CHECK(read_check(o[0], 0, 0, 2 * u, 0) == 0, "no batch read: read on demand");
	cachetier_obj_unref(o[0]);
	cachetier_close(ct);
	backend_close(be);
}

/* heads=1 store: the HEADs it answered (lines of DIR.heads) */
static unsigned heads_logged(void)
{
	char path[512];
	unsigned n = 0;
	FILE *f;
	int c;

	snprintf(path, sizeof(path), "%s/src.heads", tmpdir);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

/* The fault store's hold file src.SUFFIX: made (on: what it holds waits)
 * or removed (the hold goes) */
static void hold_file(const char *suffix, int on)
{
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/src.%s", tmpdir, suffix);
	if (!on) {
		CHECK(unlink(path) == 0, "unlink %s", path);
		return;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	CHECK(fd >= 0, "create %s", path);
	if (fd >= 0)
		close(fd);
}

/* heads=1 store: hold every HEAD's answer (on) or let them go */
static void heads_hold(int on)
{
	hold_file("hold", on);
}

/* Poll ct's batch counters until the one at off reaches want (a state,
 * not a time: at most 60 s, then a failed check). */
static void batch_reach(struct cachetier *ct, size_t off, uint64_t want, const char *what,
			struct cachetier_batch_result *r)
{
	for (int i = 0; i < 60000; i++) {
		batch_stats(ct, r);
		if (*(const uint64_t *)(const void *)((const char *)r + off) >= want)
			return;
		usleep(1000);
	}
	CHECK(0, "%s: never reached %llu", what, (unsigned long long)want);
}

#define REACH(ct, field, want, what, r)                                                            \
	batch_reach(ct, offsetof(struct cachetier_batch_result, field), want, what, r)

/* Poll the heads=1 store's log until it holds want HEADs (a state: at
 * most 60 s, then a failed check). */
static void heads_reach(unsigned want, const char *what)
{
	for (int i = 0; i < 60000 && heads_logged() < want; i++)
		usleep(1000);
	CHECK(heads_logged() >= want, "%s: %u HEADs, never %u", what, heads_logged(), want);
}

/* A window of len bytes at off of o as one request, urgent (its HEADs at
 * once) or not (it shares), 8 slots. */
static int batch_win(struct cachetier *ct, struct cachetier_obj *o, uint64_t off, uint64_t len,
		     int urgent)
{
	struct cachetier_batch_piece w = {o, off, len};
	size_t end = 1;

	return cachetier_batch_fill(ct, &w, 1, &end, 1, 8, urgent ? 1 : 0);
}

/* batch_hold=2 store: hold every batch answer after its second item (on)
 * or let them go */
static void batch_hold(int on)
{
	hold_file("bhold", on);
}

/* Poll o's cached bytes until they reach want (a state: at most 60 s,
 * then a failed check). */
static void cached_reach(struct cachetier_obj *o, uint64_t want, const char *what)
{
	for (int i = 0; i < 60000 && cachetier_obj_cached_bytes(o) < want; i++)
		usleep(1000);
	CHECK(cachetier_obj_cached_bytes(o) >= want, "%s: cached %llu, never %llu", what,
	      (unsigned long long)cachetier_obj_cached_bytes(o), (unsigned long long)want);
}

/* A probe of o's bytes [off, off + len) (object i): exact, no readahead. */
static int probe_check(struct cachetier_obj *o, int i, uint64_t off, size_t len)
{
	unsigned char *buf = malloc(len);
	int ok = buf && cachetier_obj_pread_probe(o, buf, len, off) == (ssize_t)len &&
		 memcmp(buf, data[i] + off, len) == 0;

	free(buf);
	return ok;
}

/* Each object's units committed at its own HEAD, sent when its last item
 * of the answer arrived (cachetier_batch.c, bt_early), exact counts with
 * the fault store's batch_hold=2 (every batch answer held after its 2nd
 * item while the test says) and heads=1 (each HEAD logged), units of
 * CHUNK / 8, one request of 3 objects (2 units each; after a first call,
 * so the call returns at once):
 * - held after 2 items: the HEADs of objects 0 and 1 are out (2 logged;
 *   a request's counters are added when it ends), their 4 units valid and
 *   read exactly with no miss, while object 2 has none and the request has
 *   not ended (0 more requests counted);
 * - released: 3 HEADs, none shared, 6 units kept, nothing stale;
 * - an object of another request (3 objects, object A = 3 listed first,
 *   B = 4, C = 5) replaced while the answer is held after A and B: A and
 *   B were kept at their own HEADs, C's HEAD sees the change: 1 stale, its
 *   units empty, and A and B still read exactly. */
static void test_batch_early(void)
{
	const uint64_t u = CHUNK / 8;
	struct backend *be = store("batch=1&heads=1&batch_hold=2");
	struct cachetier *ct = tier(be, "c-batch-early", 1ull << 30, 4);
	struct cachetier_obj *o[6];
	struct cachetier_batch_piece w[3];
	struct cachetier_batch_result r, r0;
	struct cachetier_stats st, st0;
	size_t end = 3;
	unsigned h0;
	int err;

	for (int i = 0; i < 6; i++)
		o[i] = obj(ct, be, i);
	/* a first call (one item: never held), which waits for its request */
	w[0] = (struct cachetier_batch_piece){o[0], 4 * u, u};
	err = fetch_batch_fill(ct, w, 1, 8);
	batch_stats(ct, &r0);
	CHECK(err == 0 && r0.requests == 1 && r0.heads == 1, "early: a first window: %d", err);

	h0 = heads_logged();
	stats(ct, &st0);
	batch_hold(1);
	for (int i = 0; i < 3; i++)
		w[i] = (struct cachetier_batch_piece){o[i], 0, 2 * u};
	CHECK(cachetier_batch_fill(ct, w, 3, &end, 1, 8, 0) == 0, "early: the window");
	heads_reach(h0 + 2, "early: the HEADs of objects 0 and 1");
	cached_reach(o[1], 2 * u, "early: object 1's units");
	cached_reach(o[0], 2 * u, "early: object 0's units");
	batch_stats(ct, &r);
	CHECK(heads_logged() - h0 == 2 && r.requests == r0.requests &&
		  cachetier_obj_cached_bytes(o[0]) == 3 * u &&
		  cachetier_obj_cached_bytes(o[1]) == 2 * u &&
		  cachetier_obj_cached_bytes(o[2]) == 0,
	      "early: held after 2 items: %u HEADs logged, %llu requests ended, cached %llu %llu "
	      "%llu",
	      heads_logged() - h0, (unsigned long long)(r.requests - r0.requests),
	      (unsigned long long)cachetier_obj_cached_bytes(o[0]),
	      (unsigned long long)cachetier_obj_cached_bytes(o[1]),
	      (unsigned long long)cachetier_obj_cached_bytes(o[2]));
	CHECK(probe_check(o[0], 0, 0, 2 * u) && probe_check(o[1], 1, 0, 2 * u),
	      "early: held: objects 0 and 1 read exactly");
	stats(ct, &st);
	CHECK(st.misses == st0.misses, "early: held: %llu reads missed",
	      (unsigned long long)(st.misses - st0.misses));
	batch_hold(0);
	REACH(ct, requests, r0.requests + 1, "early: the request", &r);
	batch_stats(ct, &r);
	CHECK(r.heads - r0.heads == 3 && r.heads_shared == r0.heads_shared &&
		  heads_logged() - h0 == 3 && r.bytes - r0.bytes == 6 * u && r.stale == 0 &&
		  r.failed == 0 && cachetier_obj_cached_bytes(o[2]) == 2 * u,
	      "early: released: %llu HEADs (%u logged), %llu shared, %llu bytes, %llu stale",
	      (unsigned long long)(r.heads - r0.heads), heads_logged() - h0,
	      (unsigned long long)(r.heads_shared - r0.heads_shared),
	      (unsigned long long)(r.bytes - r0.bytes), (unsigned long long)r.stale);
	CHECK(probe_check(o[2], 2, 0, 2 * u), "early: released: object 2 reads exactly");

	/* object 5 replaced while the answer is held after objects 3 and 4 */
	r0 = r;
	h0 = heads_logged();
	batch_hold(1);
	for (int i = 0; i < 3; i++)
		w[i] = (struct cachetier_batch_piece){o[3 + i], 0, 2 * u};
	CHECK(cachetier_batch_fill(ct, w, 3, &end, 1, 8, 0) == 0, "changed: the window");
	heads_reach(h0 + 2, "changed: the HEADs of objects 3 and 4");
	cached_reach(o[4], 2 * u, "changed: object 4's units");
	cached_reach(o[3], 2 * u, "changed: object 3's units");
	{
		struct timespec ts[2];
		char path[512];

		snprintf(path, sizeof(path), "%s/src/%s", tmpdir, keys[5]);
		clock_gettime(CLOCK_REALTIME, &ts[0]);
		ts[0].tv_sec += 600; /* another ETag than the other tests' */
		ts[1] = ts[0];
		CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0, "utimensat");
	}
	batch_hold(0);
	REACH(ct, requests, r0.requests + 1, "changed: the request", &r);
	batch_stats(ct, &r);
	CHECK(r.heads - r0.heads == 3 && r.stale - r0.stale == 1 && r.bytes - r0.bytes == 4 * u &&
		  heads_logged() - h0 == 3 && cachetier_obj_cached_bytes(o[3]) == 2 * u &&
		  cachetier_obj_cached_bytes(o[4]) == 2 * u &&
		  cachetier_obj_cached_bytes(o[5]) == 0,
	      "changed: %llu HEADs (%u logged), %llu stale, %llu bytes kept, cached %llu %llu %llu",
	      (unsigned long long)(r.heads - r0.heads), heads_logged() - h0,
	      (unsigned long long)(r.stale - r0.stale), (unsigned long long)(r.bytes - r0.bytes),
	      (unsigned long long)cachetier_obj_cached_bytes(o[3]),
	      (unsigned long long)cachetier_obj_cached_bytes(o[4]),
	      (unsigned long long)cachetier_obj_cached_bytes(o[5]));
	CHECK(probe_check(o[3], 3, 0, 2 * u) && probe_check(o[4], 4, 0, 2 * u),
	      "changed: objects 3 and 4 read exactly");
	for (int i = 0; i < 6; i++)
		cachetier_obj_unref(o[i]);
	cachetier_close(ct);
	backend_close(be);
}

/* Each item committed at a HEAD sent after it arrived, not after its
 * object's last item of the request (cachetier_batch.c, bt_early), exact
 * counts with the fault store's batch_hold=2 and heads=1 as
 * test_batch_early, units of CHUNK / 8, one request of 3 items (2 units
 * each) of 2 objects: A = object 2 at 0, B = object 3 at 0, A at 4 units
 * (A's last item of the request is the request's last); after a first
 * call on object 1, so the call returns at once:
 * - held after 2 items: 2 HEADs out (A's and B's), A's first item and B's
 *   item valid (2 units each) and read exactly with no miss, the request
 *   not ended (the rule before waited for A's last item: 1 HEAD, A none);
 * - A replaced while the answer is held, then released: A's second item
 *   gets a HEAD of its own (3 in all, none shared) that sees the change:
 *   1 stale, 4 units kept (A's first item, confirmed before the change,
 *   and B's), A's second item's units empty; A's first item and B still
 *   read exactly. */
static void test_batch_item(void)
{
	const uint64_t u = CHUNK / 8;
	struct backend *be = store("batch=1&heads=1&batch_hold=2");
	struct cachetier *ct = tier(be, "c-batch-item", 1ull << 30, 4);
	struct cachetier_obj *o1 = obj(ct, be, 1), *a = obj(ct, be, 2), *b = obj(ct, be, 3);
	struct cachetier_batch_piece w[3];
	struct cachetier_batch_result r, r0;
	struct cachetier_stats st, st0;
	size_t end = 3;
	unsigned h0;
	int err;

	w[0] = (struct cachetier_batch_piece){o1, 0, u};
	err = fetch_batch_fill(ct, w, 1, 8);
	batch_stats(ct, &r0);
	CHECK(err == 0 && r0.requests == 1 && r0.heads == 1, "item: a first window: %d", err);

	h0 = heads_logged();
	stats(ct, &st0);
	batch_hold(1);
	w[0] = (struct cachetier_batch_piece){a, 0, 2 * u};
	w[1] = (struct cachetier_batch_piece){b, 0, 2 * u};
	w[2] = (struct cachetier_batch_piece){a, 4 * u, 2 * u};
	CHECK(cachetier_batch_fill(ct, w, 3, &end, 1, 8, 0) == 0, "item: the window");
	heads_reach(h0 + 2, "item: the HEADs of A's first item and of B");
	cached_reach(b, 2 * u, "item: B's units");
	cached_reach(a, 2 * u, "item: A's first item's units");
	batch_stats(ct, &r);
	CHECK(heads_logged() - h0 == 2 && r.requests == r0.requests &&
		  cachetier_obj_cached_bytes(a) == 2 * u && cachetier_obj_cached_bytes(b) == 2 * u,
	      "item: held after 2 items: %u HEADs logged (2), %llu requests ended (0), cached A "
	      "%llu B %llu (%llu each)",
	      heads_logged() - h0, (unsigned long long)(r.requests - r0.requests),
	      (unsigned long long)cachetier_obj_cached_bytes(a),
	      (unsigned long long)cachetier_obj_cached_bytes(b), (unsigned long long)(2 * u));
	CHECK(probe_check(a, 2, 0, 2 * u) && probe_check(b, 3, 0, 2 * u),
	      "item: held: A's first item and B read exactly");
	stats(ct, &st);
	CHECK(st.misses == st0.misses, "item: held: %llu reads missed",
	      (unsigned long long)(st.misses - st0.misses));
	{
		struct timespec ts[2];
		char path[512];

		snprintf(path, sizeof(path), "%s/src/%s", tmpdir, keys[2]);
		clock_gettime(CLOCK_REALTIME, &ts[0]);
		ts[0].tv_sec += 800; /* another ETag than the other tests' */
		ts[1] = ts[0];
		CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0, "utimensat");
	}
	batch_hold(0);
	REACH(ct, requests, r0.requests + 1, "item: the request", &r);
	batch_stats(ct, &r);
	CHECK(r.heads - r0.heads == 3 && heads_logged() - h0 == 3 &&
		  r.heads_shared == r0.heads_shared && r.stale - r0.stale == 1 &&
		  r.bytes - r0.bytes == 4 * u && r.failed == r0.failed &&
		  cachetier_obj_cached_bytes(a) == 2 * u && cachetier_obj_cached_bytes(b) == 2 * u,
	      "item: released: %llu HEADs (3; %u logged), %llu shared (0), %llu stale (1), %llu "
	      "bytes kept (%llu), %llu failed, cached A %llu B %llu",
	      (unsigned long long)(r.heads - r0.heads), heads_logged() - h0,
	      (unsigned long long)(r.heads_shared - r0.heads_shared),
	      (unsigned long long)(r.stale - r0.stale), (unsigned long long)(r.bytes - r0.bytes),
	      (unsigned long long)(4 * u), (unsigned long long)(r.failed - r0.failed),
	      (unsigned long long)cachetier_obj_cached_bytes(a),
	      (unsigned long long)cachetier_obj_cached_bytes(b));
	CHECK(probe_check(a, 2, 0, 2 * u) && probe_check(b, 3, 0, 2 * u),
	      "item: released: A's first item and B read exactly");
	cachetier_obj_unref(o1);
	cachetier_obj_unref(a);
	cachetier_obj_unref(b);
	cachetier_close(ct);
	backend_close(be);
}

/* The HEAD count of a batch request is a function of its items, not of
 * when they arrive (cachetier_batchv.c: an object of k items gets
 * min(k, 2) HEADs, its first group's at its first item, its other's at
 * its last), exact counts with the fault store's batch_hold=1 (every
 * batch answer held after its first item while the test says) and heads=1
 * (each HEAD logged, its answer held while the test says), units of
 * CHUNK / 8, requests of 4 items of 2 units, [A at 0, A at 4 units, B at
 * 0, A at 8 units] (A 3 items, B 1: 3 HEADs), not urgent, each on other
 * objects (no HEAD to share), after a first call on object 1:
 * - free: no hold (the items arrive as fast as the store hands them
 *   over): 3 HEADs, none shared, no wait, 8 units kept;
 * - late: the answer held after A's first item and A's first HEAD held
 *   too, so the 3 other items arrive after it was sent: exactly 1 HEAD out
 *   while the answer is held (the rule per object had none: A's last item
 *   had not come), then, the answer released, the answer's end sends A's
 *   second group's and B's HEADs while A's first is still held (2 out: the
 *   store answers them one after the other, each held; no wait: a request
 *   never waits for its own HEAD, where the rule per look waited for A's),
 *   and once released 3 in all, none shared;
 * - answered: the answer held after A's first item until that item is
 *   valid (its HEAD answered), then released: 3 HEADs again;
 * every byte read exactly after each. */
static void test_batch_count(void)
{
	const uint64_t u = CHUNK / 8;
	struct backend *be = store("batch=1&heads=1&batch_hold=1");
	struct cachetier *ct = tier(be, "c-batch-count", 1ull << 30, 4);
	struct cachetier_obj *o1 = obj(ct, be, 1);
	struct cachetier_batch_piece w[4];
	struct cachetier_batch_result r, r0;
	const char *what[3] = {"free", "late", "answered"};
	const int oa[3] = {4, 6, 0}, ob[3] = {5, 7, NOBJ};
	int err;

	w[0] = (struct cachetier_batch_piece){o1, 0, u};
	err = fetch_batch_fill(ct, w, 1, 8);
	batch_stats(ct, &r0);
	CHECK(err == 0 && r0.requests == 1 && r0.heads == 1, "count: a first window: %d", err);
	for (int k = 0; k < 3; k++) {
		struct cachetier_obj *a = obj(ct, be, oa[k]), *b = obj(ct, be, ob[k]);
		unsigned h0 = heads_logged();
		size_t end = 4;

		batch_stats(ct, &r0);
		if (k > 0)
			batch_hold(1);
		if (k == 1)
			heads_hold(1);
		w[0] = (struct cachetier_batch_piece){a, 0, 2 * u};
		w[1] = (struct cachetier_batch_piece){a, 4 * u, 2 * u};
		w[2] = (struct cachetier_batch_piece){b, 0, 2 * u};
		w[3] = (struct cachetier_batch_piece){a, 8 * u, 2 * u};
		CHECK(cachetier_batch_fill(ct, w, 4, &end, 1, 8, 0) == 0, "count %s: the window",
		      what[k]);
		if (k > 0) {
			heads_reach(h0 + 1, "count: A's first HEAD");
			CHECK(heads_logged() - h0 == 1,
			      "count %s: held after A's first item: %u HEADs "
			      "out, want 1",
			      what[k], heads_logged() - h0);
		}
		if (k == 1) {
			batch_hold(0);
			/* the store answers a stat of many keys one key after the
			 * other, each held: the second of them waits for the release */
			heads_reach(h0 + 2, "count late: the answer's end's HEADs");
			batch_stats(ct, &r);
			CHECK(
			    heads_logged() - h0 == 2 && r.head_waits == r0.head_waits &&
				r.requests == r0.requests,
			    "count late: %u HEADs out while A's first is held (2), %llu waits (0), "
			    "%llu requests ended (0)",
			    heads_logged() - h0, (unsigned long long)(r.head_waits - r0.head_waits),
			    (unsigned long long)(r.requests - r0.requests));
			heads_hold(0);
		} else if (k == 2) {
			cached_reach(a, 2 * u, "count answered: A's first item");
			batch_hold(0);
		}
		REACH(ct, requests, r0.requests + 1, "count: the request", &r);
		CHECK(r.heads - r0.heads == 3 && heads_logged() - h0 == 3 &&
			  r.heads_shared == r0.heads_shared && r.head_waits == r0.head_waits &&
			  r.bytes - r0.bytes == 8 * u && r.stale == r0.stale &&
			  r.failed == r0.failed && cachetier_obj_cached_bytes(a) == 6 * u &&
			  cachetier_obj_cached_bytes(b) == 2 * u,
		      "count %s: %llu HEADs (3; %u logged), %llu shared (0), %llu waits (0), %llu "
		      "bytes kept (%llu), %llu stale, %llu failed, cached A %llu B %llu",
		      what[k], (unsigned long long)(r.heads - r0.heads), heads_logged() - h0,
		      (unsigned long long)(r.heads_shared - r0.heads_shared),
		      (unsigned long long)(r.head_waits - r0.head_waits),
		      (unsigned long long)(r.bytes - r0.bytes), (unsigned long long)(8 * u),
		      (unsigned long long)(r.stale - r0.stale),
		      (unsigned long long)(r.failed - r0.failed),
		      (unsigned long long)cachetier_obj_cached_bytes(a),
		      (unsigned long long)cachetier_obj_cached_bytes(b));
		CHECK(probe_check(a, oa[k], 0, 2 * u) && probe_check(a, oa[k], 4 * u, 2 * u) &&
			  probe_check(a, oa[k], 8 * u, 2 * u) && probe_check(b, ob[k], 0, 2 * u),
		      "count %s: every item read exactly", what[k]);
		cachetier_obj_unref(a);
		cachetier_obj_unref(b);
	}
	cachetier_obj_unref(o1);
	cachetier_close(ct);
	backend_close(be);
}

/* The version rule's HEADs shared between batch requests (cachetier_batch.c,
 * bt_confirm), exact counts with the fault store's heads=1 (each HEAD
 * logged, its answer held while the test says), units of CHUNK / 8, one
 * request per window (each under 1 MiB); calls after a tier's first return
 * at once, so each step waits for the counters (states, never times):
 * - a first window: one request, one HEAD;
 * - 3 windows of one object, each after the last ended: 3 HEADs, none
 *   shared (nothing to share with);
 * - 4 windows of one object while the first HEAD is held: the 3 requests
 *   that end while it is in flight wait for it (it was sent before they
 *   ended: it cannot confirm them), then share the next: 2 HEADs for 4
 *   requests, 2 objects confirmed by another's HEAD, every byte kept;
 * - an urgent request (the first of a window, fetch_batch.c) does not
 *   wait: with a HEAD held, an urgent request's own goes out at once (2
 *   out), the 2 that are not wait for both, then share a third: 3 HEADs
 *   for 4 requests;
 * - the trust rule across the sharing: 3 windows of another object, its
 *   first HEAD answered "unchanged" and held, the object changed, then
 *   released: the first request's units kept (its answer ended before that
 *   HEAD was sent), the 2 requests that waited get the next HEAD, which
 *   sees the change: 2 stale, their units empty, never served. */
static void test_batch_heads(void)
{
	const uint64_t u = CHUNK / 8;
	struct backend *be = store("batch=1&heads=1");
	struct cachetier *ct = tier(be, "c-batch-heads", 1ull << 30, 4);
	struct cachetier_obj *b = obj(ct, be, NOBJ), *o0 = obj(ct, be, 0), *o6 = obj(ct, be, 6);
	struct cachetier_batch_piece w;
	struct cachetier_batch_result r, r0;
	unsigned h0 = heads_logged();
	int err;

	w = (struct cachetier_batch_piece){o0, 0, u};
	err = fetch_batch_fill(ct, &w, 1, 8);
	batch_stats(ct, &r);
	CHECK(err == 0 && r.requests == 1 && r.heads == 1 && r.heads_shared == 0 &&
		  heads_logged() - h0 == 1,
	      "a first window: %d, %llu requests, %llu HEADs (%u logged)", err,
	      (unsigned long long)r.requests, (unsigned long long)r.heads, heads_logged() - h0);

	/* 3 windows, one after another */
	for (int i = 0; i < 3; i++) {
		CHECK(batch_win(ct, b, (uint64_t)i * 2 * u, 2 * u, 0) == 0, "window %d", i);
		REACH(ct, heads, 2 + (uint64_t)i, "one after another: its HEAD", &r);
	}
	batch_stats(ct, &r);
	CHECK(r.requests == 4 && r.heads == 4 && r.heads_shared == 0 && r.head_waits == 0 &&
		  heads_logged() - h0 == 4 && cachetier_obj_cached_bytes(b) == 6 * u,
	      "one after another: %llu requests, %llu HEADs (%u logged), %llu shared, %llu waits, "
	      "cached %llu",
	      (unsigned long long)r.requests, (unsigned long long)r.heads, heads_logged() - h0,
	      (unsigned long long)r.heads_shared, (unsigned long long)r.head_waits,
	      (unsigned long long)cachetier_obj_cached_bytes(b));

	/* 4 windows while the first HEAD is held */
	r0 = r;
	h0 = heads_logged();
	heads_hold(1);
	for (int i = 0; i < 4; i++)
		CHECK(batch_win(ct, b, (uint64_t)(8 + 2 * i) * u, 2 * u, 0) == 0, "held: window %d",
		      i);
	REACH(ct, head_waits, r0.head_waits + 3, "held: requests waiting for the HEAD out", &r);
	/* a HEAD is counted in flight before the store logs it: wait for the log */
	heads_reach(h0 + 1, "held: the HEAD out");
	CHECK(heads_logged() - h0 == 1, "held: %u HEADs out, want 1", heads_logged() - h0);
	heads_hold(0);
	REACH(ct, heads_shared, r0.heads_shared + 2, "held: shared", &r);
	REACH(ct, heads, r0.heads + 2, "held: HEADs", &r);
	REACH(ct, requests, r0.requests + 4, "held: requests", &r);
	CHECK(r.heads - r0.heads == 2 && r.heads_shared - r0.heads_shared == 2 &&
		  r.head_waits - r0.head_waits == 3 && heads_logged() - h0 == 2 &&
		  r.stale == r0.stale && r.bytes - r0.bytes == 8 * u &&
		  cachetier_obj_cached_bytes(b) == 14 * u,
	      "held: %llu HEADs (%u logged) for 4 requests, %llu shared, %llu waits, %llu stale, "
	      "%llu bytes kept, cached %llu",
	      (unsigned long long)(r.heads - r0.heads), heads_logged() - h0,
	      (unsigned long long)(r.heads_shared - r0.heads_shared),
	      (unsigned long long)(r.head_waits - r0.head_waits),
	      (unsigned long long)(r.stale - r0.stale), (unsigned long long)(r.bytes - r0.bytes),
	      (unsigned long long)cachetier_obj_cached_bytes(b));
	CHECK(read_check(b, NOBJ, 0, 16 * u, 1) == 0, "held: the object's bytes");

	/* an urgent request while a HEAD is held (units 6-7 are cached now:
	 * the read above fetched them on demand) */
	r0 = r;
	h0 = heads_logged();
	heads_hold(1);
	CHECK(batch_win(ct, b, 16 * u, 2 * u, 0) == 0, "urgent: a first window");
	heads_reach(h0 + 1, "urgent: the first HEAD out");
	CHECK(batch_win(ct, b, 18 * u, 2 * u, 1) == 0, "urgent: the urgent window");
	heads_reach(h0 + 2, "urgent: its own HEAD out at once");
	for (int i = 0; i < 2; i++)
		CHECK(batch_win(ct, b, (uint64_t)(20 + 2 * i) * u, 2 * u, 0) == 0,
		      "urgent: window %d after", i);
	REACH(ct, head_waits, r0.head_waits + 2, "urgent: the 2 others waiting", &r);
	CHECK(heads_logged() - h0 == 2, "urgent: %u HEADs out, want 2", heads_logged() - h0);
	heads_hold(0);
	REACH(ct, heads_shared, r0.heads_shared + 1, "urgent: shared", &r);
	REACH(ct, heads, r0.heads + 3, "urgent: HEADs", &r);
	CHECK(r.heads - r0.heads == 3 && r.heads_shared - r0.heads_shared == 1 &&
		  r.head_waits - r0.head_waits == 2 && heads_logged() - h0 == 3 &&
		  r.bytes - r0.bytes == 8 * u && cachetier_obj_cached_bytes(b) == 24 * u,
	      "urgent: %llu HEADs (%u logged) for 4 requests, %llu shared, %llu waits, %llu bytes "
	      "kept",
	      (unsigned long long)(r.heads - r0.heads), heads_logged() - h0,
	      (unsigned long long)(r.heads_shared - r0.heads_shared),
	      (unsigned long long)(r.head_waits - r0.head_waits),
	      (unsigned long long)(r.bytes - r0.bytes));

	/* changed while the first HEAD ("unchanged") is held */
	r0 = r;
	h0 = heads_logged();
	heads_hold(1);
	for (int i = 0; i < 3; i++)
		CHECK(batch_win(ct, o6, (uint64_t)i * 2 * u, 2 * u, 0) == 0, "changed: window %d",
		      i);
	REACH(ct, head_waits, r0.head_waits + 2, "changed: requests waiting for the HEAD out", &r);
	/* a HEAD is counted in flight before the store logs it: wait for the log */
	heads_reach(h0 + 1, "changed: the HEAD out");
	CHECK(heads_logged() - h0 == 1, "changed: %u HEADs out, want 1", heads_logged() - h0);
	{
		struct timespec ts[2];
		char path[512];

		snprintf(path, sizeof(path), "%s/src/%s", tmpdir, keys[6]);
		clock_gettime(CLOCK_REALTIME, &ts[0]);
		ts[0].tv_sec += 400; /* another ETag than test_batch's */
		ts[1] = ts[0];
		CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0, "utimensat");
	}
	heads_hold(0);
	REACH(ct, heads_shared, r0.heads_shared + 1, "changed: shared", &r);
	REACH(ct, heads, r0.heads + 2, "changed: HEADs", &r);
	REACH(ct, requests, r0.requests + 3, "changed: requests", &r);
	CHECK(r.heads - r0.heads == 2 && r.heads_shared - r0.heads_shared == 1 &&
		  r.stale - r0.stale == 2 && r.bytes - r0.bytes == 2 * u &&
		  cachetier_obj_cached_bytes(o6) == 2 * u && heads_logged() - h0 == 2,
	      "changed: %llu HEADs (%u logged), %llu shared, %llu stale, %llu bytes kept, cached "
	      "%llu",
	      (unsigned long long)(r.heads - r0.heads), heads_logged() - h0,
	      (unsigned long long)(r.heads_shared - r0.heads_shared),
	      (unsigned long long)(r.stale - r0.stale), (unsigned long long)(r.bytes - r0.bytes),
	      (unsigned long long)cachetier_obj_cached_bytes(o6));
	cachetier_obj_unref(b);
	cachetier_obj_unref(o0);
	cachetier_obj_unref(o6);
	cachetier_close(ct);
	backend_close(be);
}

/* ---- damaged cached bytes ---- */

#define UNIT (CHUNK / 8) /* the cache unit of a chunk under 512 KiB */

/* The path of the one data file in ct's data/ (the test opens one object). */
static void data_file(struct cachetier *ct, char *path, size_t size)
{
	DIR *d = opendir(data_dir(ct));
	struct dirent *de;

	path[0] = 0;
	while (d && (de = readdir(d))) {
		if (strlen(de->d_name) == 16)
			snprintf(path, size, "%s/%s", data_dir(ct), de->d_name);
	}
	if (d)
		closedir(d);
	CHECK(path[0], "no data file in %s", data_dir(ct));
}

/* Damage made by another process (a forked child), as a user or a tool
 * would: the tier's fanotify watch of its data files takes this process's
 * own writes for its fills and punches (cachetier_watch.c). op 0: flip the
 * byte at off, 1: punch [off, off + len), 2: cut the file to off bytes. */
static void damage(int op, const char *path, uint64_t off, uint64_t len)
{
	pid_t pid = fork();
	int status = 0;

	if (pid == 0) {
		int fd = open(path, O_RDWR), ok = fd >= 0;
		unsigned char b = 0;

		if (ok && op == 0) {
			ok = pread(fd, &b, 1, (off_t)off) == 1;
			b ^= 0x5a;
			ok = ok && pwrite(fd, &b, 1, (off_t)off) == 1;
		} else if (ok && op == 1) {
			ok = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
				       (off_t)len) == 0;
		} else if (ok) {
			ok = ftruncate(fd, (off_t)off) == 0;
		}
		_exit(ok ? 0 : 1);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
		  WEXITSTATUS(status) == 0,
	      "damage %d of %s by a child", op, path);
}

static void flip_byte(const char *path, uint64_t off)
{
	damage(0, path, off, 0);
}

static void punch(const char *path, uint64_t off, uint64_t len)
{
	damage(1, path, off, len);
}

static void cut_file(const char *path, uint64_t len)
{
	damage(2, path, len, 0);
}

/* Each cache unit carries the CRC32C of its bytes: a unit this tier did
 * not fill (an earlier open, another tier on the directory) is checked on
 * its first read; a bad one, a hole, or a data file shorter than its map
 * is fetched again (exact bytes, units_corrupt exact); a data file cut
 * under the running tier makes the read fetch again, never come back
 * short. */
static void test_damage(void)
{
	size_t size = sizes[NOBJ], nunits = (size + UNIT - 1) / UNIT;
	uint64_t cut = 60 * (uint64_t)CHUNK + 10, tail = size - (cut / UNIT) * UNIT;
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-damage", 1ull << 30, 4), *ct2;
	struct cachetier_obj *o, *o2;
	struct cachetier_stats st;
	char path[700];

	/* filled and recorded by one open */
	o = obj(ct, be, NOBJ);
	CHECK(read_check(o, NOBJ, 0, size, 0) == 0, "damage: first read");
	cachetier_obj_unref(o);
	fills_idle(ct);
	data_file(ct, path, sizeof(path));
	cachetier_close(ct);

	/* between opens: a byte flipped (unit 3), a hole (unit 7), the file
	 * cut inside unit cut / UNIT */
	flip_byte(path, 3 * UNIT + 100);
	punch(path, 7 * UNIT, 4096);
	cut_file(path, cut);
	ct = tier(be, "c-damage", 1ull << 30, 4);
	o = obj(ct, be, NOBJ);
	CHECK(read_check(o, NOBJ, 0, size, 1) == 0, "damage: reread after damage between opens");
	CHECK(read_check(o, NOBJ, 0, size, 0) == 0, "damage: reread (pread)");
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.units_corrupt == 2 + (nunits - cut / UNIT), "damage: units_corrupt %llu, want %zu",
	      (unsigned long long)st.units_corrupt, 2 + (nunits - (size_t)(cut / UNIT)));
	CHECK(st.bytes_fetched == 2 * UNIT + tail, "damage: fetched %llu, want %llu",
	      (unsigned long long)st.bytes_fetched, (unsigned long long)(2 * UNIT + tail));
	cachetier_obj_unref(o);

	/* a second tier on the directory: a byte its peer's unit lost is
	 * caught on its first read there */
	ct2 = tier(be, "c-damage", 1ull << 30, 4);
	o2 = obj(ct2, be, NOBJ);
	flip_byte(path, 20 * UNIT + 5);
	CHECK(read_check(o2, NOBJ, 0, size, 0) == 0, "damage: peer's read of a flipped byte");
	fills_idle(ct2);
	stats(ct2, &st);
	CHECK(st.units_corrupt == 1 && st.bytes_fetched == UNIT && st.peer_units == nunits - 1,
	      "damage: peer counted corrupt %llu fetched %llu peer units %llu",
	      (unsigned long long)st.units_corrupt, (unsigned long long)st.bytes_fetched,
	      (unsigned long long)st.peer_units);
	cachetier_obj_unref(o2);
	cachetier_close(ct2);

	/* cut to nothing under the running tier (the page cache goes with it):
	 * the read fetches the units again instead of coming back short */
	o = obj(ct, be, NOBJ);
	cut_file(path, 0);
	stats(ct, &st);
	{
		uint64_t before = st.units_corrupt, fetched = st.bytes_fetched;

		CHECK(read_check(o, NOBJ, 5 * UNIT + 3, 3 * UNIT, 1) == 0,
		      "damage: read of a file cut under the tier (fd)");
		CHECK(read_check(o, NOBJ, 0, size, 0) == 0, "damage: whole object after the cut");
		fills_idle(ct);
		stats(ct, &st);
		CHECK(st.units_corrupt - before == nunits, "damage: cut units counted %llu of %zu",
		      (unsigned long long)(st.units_corrupt - before), nunits);
		CHECK(st.bytes_fetched - fetched == size, "damage: refetched %llu of %zu",
		      (unsigned long long)(st.bytes_fetched - fetched), size);
	}
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);

	/* what was fetched again was recorded with its CRCs: the store gone,
	 * every byte comes from the cache and passes its check */
	be = store("fail_every=1&fail_after_bytes=1");
	ct = tier(be, "c-damage", 1ull << 30, 4);
	o = obj(ct, be, NOBJ);
	CHECK(read_check(o, NOBJ, 0, size, 0) == 0, "damage: reopen without the store");
	stats(ct, &st);
	CHECK(st.units_corrupt == 0 && st.bytes_fetched == 0 && st.peer_units == nunits,
	      "damage: reopen corrupt %llu fetched %llu peer units %llu",
	      (unsigned long long)st.units_corrupt, (unsigned long long)st.bytes_fetched,
	      (unsigned long long)st.peer_units);
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
}

/* Units this tier filled are trusted from their fill, and stay trusted
 * while this process's own fills write other units of their data file
 * (fanotify tells our writes from another process's); a byte another
 * process (a forked child) flips in a trusted unit is caught at the next
 * read (exact bytes, exact counts). inotify != 0: the same with the data
 * files' watch forced to inotify (SHARDFS_TEST_WATCH_INOTIFY), today's
 * rule where fanotify cannot be had: a fill's units are checked at their
 * first read, and every fill of the file sends the trusted units back to
 * a check. Exact units_checked either way. */
static void test_watch_own_fill(int inotify)
{
	struct backend *be = store("");
	struct cachetier *ct;
	struct cachetier_obj *o;
	struct cachetier_stats st;
	uint64_t checked, corrupt, fetched, d[6];
	const char *name = inotify ? "c-watch-ino" : "c-watch-fan";
	char path[700];
	int fan;

	if (inotify)
		setenv("SHARDFS_TEST_WATCH_INOTIFY", "1", 1);
	ct = tier(be, name, 1ull << 30, 4);
	o = obj(ct, be, NOBJ);
	/* units 0-3 filled by this read: fanotify, trusted as filled;
	 * inotify, checked as it serves them */
	stats(ct, &st);
	checked = st.units_checked;
	CHECK(read_check(o, NOBJ, 0, 4 * UNIT, 0) == 0, "watch: fill units 0-3");
	fills_idle(ct);
	stats(ct, &st);
	d[0] = st.units_checked - checked;
	fan = st.watch_own == 1;
	CHECK(inotify ? st.watch_own == 0 : 1, "watch: %llu data files on fanotify, want 0",
	      (unsigned long long)st.watch_own);
	if (!inotify && !fan) {
		struct utsname u;
		unsigned maj = 0, min = 0;

		/* unprivileged fanotify with file handles: Linux 5.13 */
		CHECK(uname(&u) == 0 && sscanf(u.release, "%u.%u", &maj, &min) == 2 &&
			  (maj < 5 || (maj == 5 && min < 13)),
		      "watch: no fanotify watch on Linux %u.%u", maj, min);
		printf("watch: no fanotify here (kernel < 5.13): inotify's counts\n");
	}
	checked = st.units_checked;
	CHECK(read_check(o, NOBJ, 0, 4 * UNIT, 0) == 0, "watch: trusted read of 0-3");
	stats(ct, &st);
	d[1] = st.units_checked - checked;

	/* this process fills other units of the same data file */
	CHECK(read_check(o, NOBJ, 40 * UNIT, 6 * UNIT, 0) == 0, "watch: fill units 40-45");
	fills_idle(ct);
	stats(ct, &st);
	checked = st.units_checked;
	CHECK(read_check(o, NOBJ, 0, 4 * UNIT, 0) == 0, "watch: read of 0-3 after our fill");
	stats(ct, &st);
	d[2] = st.units_checked - checked;

	/* another process flips a byte of trusted unit 1: the next read checks
	 * units 0-3 again, drops unit 1 and serves its bytes fetched again */
	data_file(ct, path, sizeof(path));
	flip_byte(path, 1 * UNIT + 77);
	stats(ct, &st);
	checked = st.units_checked;
	corrupt = st.units_corrupt;
	fetched = st.bytes_fetched;
	CHECK(read_check(o, NOBJ, 0, 4 * UNIT, 0) == 0, "watch: read after another's write");
	fills_idle(ct);
	stats(ct, &st);
	d[3] = st.units_checked - checked;
	d[4] = st.units_corrupt - corrupt;
	CHECK(d[4] == 1 && st.bytes_fetched - fetched == UNIT,
	      "watch: after another's write corrupt %llu (want 1) fetched %llu (want %u)",
	      (unsigned long long)d[4], (unsigned long long)(st.bytes_fetched - fetched), UNIT);
	checked = st.units_checked;
	CHECK(read_check(o, NOBJ, 0, 4 * UNIT, 0) == 0, "watch: read after the refetch");
	stats(ct, &st);
	d[5] = st.units_checked - checked;
	printf("watch (%s): units checked: fill read %llu, trusted read %llu, after our fill "
	       "%llu, after another's write %llu (corrupt %llu), after the refetch %llu\n",
	       fan ? "fanotify" : "inotify", (unsigned long long)d[0], (unsigned long long)d[1],
	       (unsigned long long)d[2], (unsigned long long)d[3], (unsigned long long)d[4],
	       (unsigned long long)d[5]);
	CHECK(d[0] == (fan ? 0u : 4u) && d[1] == 0,
	      "watch: fill read checked %llu (want %u), trusted read %llu (want 0)",
	      (unsigned long long)d[0], fan ? 0u : 4u, (unsigned long long)d[1]);
	CHECK(d[2] == (fan ? 0u : 4u), "watch: read after our own fill checked %llu units, want %u",
	      (unsigned long long)d[2], fan ? 0u : 4u);
	/* fanotify: 0-3 checked once, unit 1's refill trusted; inotify: the
	 * refill's own write sends 0, 2 and 3 back to a check too, and unit
	 * 1 is checked as filled, within the same read */
	CHECK(
	    d[3] == (fan ? 4u : 8u) && d[5] == 0,
	    "watch: after another's write checked %llu (want %u), after the refetch %llu (want 0)",
	    (unsigned long long)d[3], fan ? 4u : 8u, (unsigned long long)d[5]);
	cachetier_obj_unref(o);
	cachetier_close(ct);
	backend_close(be);
	if (inotify)
		unsetenv("SHARDFS_TEST_WATCH_INOTIFY");
}

/* ---- a read ended on another thread ---- */

struct pin_arg {
	struct cachetier_obj *o;
	uint64_t off[2];
	struct cachetier_pin *pin[2];
	int fd[2];
	uint64_t fd_off[2];
	int err;
};

/* Begins two reads of one object and leaves them pinned. */
static void *pin_main(void *arg)
{
	struct pin_arg *a = arg;

	for (int i = 0; i < 2 && a->err == 0; i++)
		a->err = cachetier_obj_read_begin(a->o, a->off[i], CHUNK / 8, &a->fd[i],
						  &a->fd_off[i], &a->pin[i]);
	return NULL;
}

/* Are the pinned bytes of read i of a exact? */
static int pin_exact(struct pin_arg *a, int i)
{
	unsigned char buf[CHUNK / 8];

	return pread(a->fd[i], buf, sizeof(buf), (off_t)a->fd_off[i]) == (ssize_t)sizeof(buf) &&
	       memcmp(buf, data[NOBJ] + a->off[i], sizeof(buf)) == 0;
}

/* A FUSE reply may end a read on another thread than the one that began
 * it: a thread begins two reads (units A and B) and exits; reads of six
 * other units then press a cache of four units, and A and B stay (their
 * bytes exact through the pins' fds); the main thread ends B, then A; four
 * more units then evict both (read again: two misses). */
static void test_pin_threads(void)
{
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-pin-threads", 4 * (CHUNK / 8), 4);
	struct pin_arg a = {.o = obj(ct, be, NOBJ), .off = {3 * CHUNK, 6 * CHUNK}};
	uint64_t u = CHUNK / 8, misses;
	struct cachetier_stats st;
	pthread_t t;

	CHECK(pthread_create(&t, NULL, pin_main, &a) == 0, "pthread_create");
	pthread_join(t, NULL);
	CHECK(a.err == 0 && a.pin[0] && a.pin[1], "read_begin of A and B: %d", a.err);
	if (a.err)
		exit(1);
	for (int i = 0; i < 6; i++)
		CHECK(read_check(a.o, NOBJ, (uint64_t)(10 + 6 * i) * CHUNK, u, 1) == 0,
		      "read of unit %d", i);
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.evictions >= 4, "six reads into two free units evicted %llu",
	      (unsigned long long)st.evictions);
	CHECK(pin_exact(&a, 0) && pin_exact(&a, 1), "pinned units changed under their reads");
	cachetier_obj_read_end(a.pin[1]);
	cachetier_obj_read_end(a.pin[0]);
	for (int i = 0; i < 4; i++)
		CHECK(read_check(a.o, NOBJ, (uint64_t)(11 + 6 * i) * CHUNK, u, 1) == 0,
		      "read of unit %d", 6 + i);
	fills_idle(ct);
	stats(ct, &st);
	misses = st.misses;
	CHECK(read_check(a.o, NOBJ, a.off[0], u, 1) == 0 &&
		  read_check(a.o, NOBJ, a.off[1], u, 1) == 0,
	      "reads of A and B");
	stats(ct, &st);
	CHECK(st.misses == misses + 2,
	      "A and B stayed pinned after read_end: %llu misses, want %llu",
	      (unsigned long long)st.misses, (unsigned long long)misses + 2);
	cachetier_obj_unref(a.o);
	cachetier_close(ct);
	backend_close(be);
}

/* Idle read locks (cachetier_read.c, README "Sharing one cache
 * directory"): a unit's read lock is taken at its first read and kept past
 * its last unpin, so reads of units this process holds make no fcntl
 * (unit_read_locks counts the read path's calls on unit locks, exact);
 * this process's own eviction drops the idle lock it evicts (one fcntl a
 * run); another process's eviction skips an idle unit and posts a release
 * request, the holder drops its idle locks at its next look (here a
 * zero-length read; else its flusher within a second) and the next
 * eviction gets them. Units of CHUNK / 8. With the locks dropped at every
 * read_end, as before, the 20 reads cost 40 calls and the other process
 * evicts at once. */
static void test_idle_locks(void)
{
	struct backend *be = store("");
	uint64_t u = CHUNK / 8, off = 3 * CHUNK, boff[3] = {10 * CHUNK, 12 * CHUNK, 14 * CHUNK};
	size_t blen[3] = {CHUNK / 8, CHUNK / 8, CHUNK / 4};
	struct cachetier_pin *pb[3] = {0}, *pz;
	struct cachetier_stats st, sb;
	struct cachetier *a, *b;
	struct cachetier_obj *oa, *ob;
	uint64_t locks, fd_off, cached;
	int fd, err, bad = 0;

	/* one process: reads again of units it holds make no fcntl */
	a = tier(be, "c-idle-one", 64 * CHUNK, 4);
	oa = obj(a, be, NOBJ);
	CHECK(read_check(oa, NOBJ, off, 3 * u, 1) == 0, "first read");
	stats(a, &st);
	locks = st.unit_read_locks;
	CHECK(locks == 0, "the first read's units came read-locked from their fill: %llu calls",
	      (unsigned long long)locks);
	for (int i = 0; i < 20; i++)
		bad += read_check(oa, NOBJ, off, 3 * u, 1) != 0;
	CHECK(bad == 0, "%d of 20 reads again wrong", bad);
	stats(a, &st);
	CHECK(st.unit_read_locks == locks, "20 reads of held units made %llu lock calls, want 0",
	      (unsigned long long)(st.unit_read_locks - locks));
	/* two units read and three the chunk's fill filled ahead: all held
	 * from their fill (cachetier__unit_filled_idle) */
	bad = 0;
	for (int i = 0; i < 10; i++)
		bad += read_check(oa, NOBJ, off + u, 5 * u, 1) != 0;
	stats(a, &st);
	CHECK(bad == 0 && st.unit_read_locks == locks,
	      "10 reads over 2 units read and 3 filled ahead: %d wrong, %llu lock calls, want 0",
	      bad, (unsigned long long)(st.unit_read_locks - locks));
	cachetier_obj_unref(oa);
	cachetier_close(a);

	/* own eviction: the idle lock of the unit it evicts goes first */
	a = tier(be, "c-idle-own", 4 * u, 4);
	oa = obj(a, be, NOBJ);
	CHECK(read_check(oa, NOBJ, off, 3 * u, 1) == 0, "own: first read");
	CHECK(read_check(oa, NOBJ, boff[0], 2 * u, 1) == 0, "own: second read");
	stats(a, &st);
	CHECK(st.evictions == 1 && st.evicted_bytes == u && st.unit_read_locks == 1,
	      "own: %llu evictions of %llu bytes, %llu lock calls; want 1 of %llu, 1 (the drop)",
	      (unsigned long long)st.evictions, (unsigned long long)st.evicted_bytes,
	      (unsigned long long)st.unit_read_locks, (unsigned long long)u);
	CHECK(read_check(oa, NOBJ, off, 3 * u, 1) == 0, "own: the evicted unit read again");
	cachetier_obj_unref(oa);
	cachetier_close(a);

	/* another process (a second tier on the directory: its own open file
	 * descriptions) evicts A's idle units after a request. A's limit is
	 * far above the directory's usage, so only B evicts; A's read fills
	 * its whole chunk (8 units, it fits A's limit) and A holds all 8 (the
	 * 3 it read and the 5 filled ahead, idle from their fill): B evicts
	 * none of them before A releases them. */
	a = tier(be, "c-idle-peer", 64 * CHUNK, 4);
	b = tier(be, "c-idle-peer", 4 * u, 4);
	oa = obj(a, be, NOBJ);
	ob = obj(b, be, NOBJ);
	CHECK(read_check(oa, NOBJ, off, 3 * u, 1) == 0, "peer: A's read");
	for (int i = 0; i < 2; i++) {
		err = cachetier_obj_read_begin(ob, boff[i], blen[i], &fd, &fd_off, &pb[i]);
		CHECK(err == 0, "peer: B's read %d: %d", i, err);
	}
	fills_idle(b);
	stats(b, &sb);
	cached = cachetier_obj_cached_bytes(ob);
	CHECK(sb.evictions == 0 && sb.evicted_bytes == 0 && sb.lock_requests >= 1 &&
		  cached == 10 * u,
	      "peer: B made %llu evictions of %llu bytes (want 0: A holds all 8 units of its "
	      "chunk), posted %llu requests (want 1 or more), %llu bytes cached (want %llu: "
	      "A's 8 units and B's 2)",
	      (unsigned long long)sb.evictions, (unsigned long long)sb.evicted_bytes,
	      (unsigned long long)sb.lock_requests, (unsigned long long)cached,
	      (unsigned long long)(10 * u));
	stats(a, &st);
	locks = st.unit_read_locks;
	err = cachetier_obj_read_begin(oa, 0, 0, &fd, &fd_off, &pz); /* A looks */
	CHECK(err == 0, "peer: A's empty read: %d", err);
	if (err == 0)
		cachetier_obj_read_end(pz);
	stats(a, &st);
	CHECK(st.lock_releases == 8 && st.unit_read_locks == 1,
	      "peer: A released %llu units (want 8) in %llu lock calls (want 1 in all)",
	      (unsigned long long)st.lock_releases, (unsigned long long)st.unit_read_locks);
	err = cachetier_obj_read_begin(ob, boff[2], blen[2], &fd, &fd_off, &pb[2]);
	CHECK(err == 0, "peer: B's read 2: %d", err);
	fills_idle(b);
	stats(b, &sb);
	cached = cachetier_obj_cached_bytes(ob);
	CHECK(sb.evicted_bytes == 8 * u && cached == 4 * u,
	      "peer: B evicted %llu bytes (want A's %llu), %llu cached (want B's %llu)",
	      (unsigned long long)sb.evicted_bytes, (unsigned long long)(8 * u),
	      (unsigned long long)cached, (unsigned long long)(4 * u));
	for (int i = 0; i < 3; i++)
		if (pb[i])
			cachetier_obj_read_end(pb[i]);
	CHECK(read_check(oa, NOBJ, off, 3 * u, 1) == 0, "peer: A's units read again");
	cachetier_obj_unref(ob);
	cachetier_obj_unref(oa);
	cachetier_close(b);
	cachetier_close(a);

	/* A's object closes (its tier stays open): its idle locks go, and B
	 * evicts at once, with no request */
	a = tier(be, "c-idle-close", 64 * CHUNK, 4);
	b = tier(be, "c-idle-close", 4 * u, 4);
	oa = obj(a, be, NOBJ);
	ob = obj(b, be, NOBJ);
	CHECK(read_check(oa, NOBJ, off, 3 * u, 1) == 0, "close: A's read");
	cachetier_obj_unref(oa);
	CHECK(read_check(ob, NOBJ, boff[0], 2 * u, 1) == 0, "close: B's read");
	stats(b, &sb);
	CHECK(sb.evictions == 1 && sb.evicted_bytes == 6 * u && sb.lock_requests == 0,
	      "close: B made %llu evictions of %llu bytes and %llu requests; want 1 of %llu "
	      "(A's chunk less what B keeps), 0",
	      (unsigned long long)sb.evictions, (unsigned long long)sb.evicted_bytes,
	      (unsigned long long)sb.lock_requests, (unsigned long long)(6 * u));
	cachetier_obj_unref(ob);
	cachetier_close(b);
	cachetier_close(a);
	backend_close(be);
}

/* Read locks taken and released a run of units at a time hold each unit
 * of the run against another process's eviction (a second tier on the
 * same directory stands for it), and release each one. A reads three
 * units and reads them again, pinned (its read locks: one run); B, with
 * its own reads pinned, fills past the limit of four units without
 * evicting any of A's (evictions 0; A's bytes exact through its pin); once
 * A's read ends, B's read of two more units evicts exactly A's three. */
static void test_peer_pins(void)
{
	struct backend *be = store("");
	struct cachetier *a = tier(be, "c-peer-pins", 4 * (CHUNK / 8), 4),
			 *b = tier(be, "c-peer-pins", 4 * (CHUNK / 8), 4);
	struct cachetier_obj *oa = obj(a, be, NOBJ), *ob = obj(b, be, NOBJ);
	struct cachetier_pin *pa, *pb[3] = {0};
	uint64_t u = CHUNK / 8, off = 3 * CHUNK, fd_off, bfd_off,
		 boff[3] = {10 * CHUNK, 12 * CHUNK, 14 * CHUNK};
	size_t blen[3] = {CHUNK / 8, CHUNK / 8, CHUNK / 4};
	unsigned char buf[3 * (CHUNK / 8)];
	struct cachetier_stats st;
	int fd, bfd, err;

	CHECK(read_check(oa, NOBJ, off, 3 * u, 1) == 0, "A's first read");
	err = cachetier_obj_read_begin(oa, off, 3 * u, &fd, &fd_off, &pa);
	CHECK(err == 0, "A's pinned read: %d", err);
	if (err)
		exit(1);
	for (int i = 0; i < 2; i++) {
		err = cachetier_obj_read_begin(ob, boff[i], blen[i], &bfd, &bfd_off, &pb[i]);
		CHECK(err == 0, "B's read %d: %d", i, err);
	}
	fills_idle(b);
	stats(b, &st);
	CHECK(st.evictions == 0, "B evicted %llu times while A pinned its units and B its own",
	      (unsigned long long)st.evictions);
	CHECK(pread(fd, buf, sizeof(buf), (off_t)fd_off) == (ssize_t)sizeof(buf) &&
		  memcmp(buf, data[NOBJ] + off, sizeof(buf)) == 0,
	      "A's pinned bytes changed under its read");
	cachetier_obj_read_end(pa);
	err = cachetier_obj_read_begin(ob, boff[2], blen[2], &bfd, &bfd_off, &pb[2]);
	CHECK(err == 0, "B's read 2: %d", err);
	fills_idle(b);
	stats(b, &st);
	CHECK(st.evictions == 1 && st.evicted_bytes == 3 * u,
	      "after A's read ended B evicted %llu bytes in %llu evictions, want A's %llu in 1",
	      (unsigned long long)st.evicted_bytes, (unsigned long long)st.evictions,
	      (unsigned long long)(3 * u));
	for (int i = 0; i < 3; i++)
		if (pb[i])
			cachetier_obj_read_end(pb[i]);
	cachetier_obj_unref(ob);
	cachetier_obj_unref(oa);
	cachetier_close(b);
	cachetier_close(a);
	backend_close(be);
}

/* ---- the fetch rules the store asks (fetch/fetch_rules.c, issue 36 #2):
 * each test passes with the rule and fails with its no-rules answer ---- */

/* window_max: --readahead (8 chunks here) within [a chunk, an eighth of
 * the cache]. A cache of 16 chunks caps it at 2 chunks, one of 4 chunks
 * raises its eighth (half a chunk) to one chunk, 1 GiB leaves 8. A reader
 * from the big object's start then gets a window of 2 chunks: chunks 0..2
 * are readahead (3 fills), the rest of chunks 0..7 read straight from the
 * store fill on demand (8 fills in all). Without the cap: 8 chunks, 9
 * readahead fills. */
static void test_rule_window_max(void)
{
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-rule-win", 16 * CHUNK, 4);
	struct cachetier_obj *o = obj(ct, be, NOBJ);
	struct cachetier_pin *pin;
	struct cachetier_stats st;
	uint64_t fd_off;
	int fd;

	CHECK(cachetier_readahead_max(ct) == 2 * CHUNK, "window_max: cache of 16 chunks: %llu",
	      (unsigned long long)cachetier_readahead_max(ct));
	CHECK(fetch_new(ct, &fx) == 0, "fetch_new");
	fx_reader = 1;
	CHECK(read_check(o, NOBJ, 0, 4096, 0) == 0, "window_max: the first read");
	CHECK(cachetier_obj_read_begin(o, 0, 8 * (uint64_t)CHUNK, &fd, &fd_off, &pin) == 0,
	      "window_max: chunks 0..7");
	cachetier_obj_read_end(pin);
	fills_idle(ct);
	stats(ct, &st);
	printf("rule window_max: readahead_fills %llu fills %llu fetched %llu\n",
	       (unsigned long long)st.readahead_fills, (unsigned long long)st.fills,
	       (unsigned long long)st.bytes_fetched);
	CHECK(st.readahead_fills == 3 && st.fills == 8 && st.bytes_fetched == 8 * CHUNK,
	      "window_max: readahead_fills %llu (want 3), fills %llu (want 8), fetched %llu",
	      (unsigned long long)st.readahead_fills, (unsigned long long)st.fills,
	      (unsigned long long)st.bytes_fetched);
	fetch_free(fx);
	fx = NULL;
	cachetier_obj_unref(o);
	cachetier_close(ct);
	ct = tier(be, "c-rule-win4", 4 * CHUNK, 4);
	CHECK(cachetier_readahead_max(ct) == CHUNK, "window_max: cache of 4 chunks: %llu",
	      (unsigned long long)cachetier_readahead_max(ct));
	cachetier_close(ct);
	ct = tier(be, "c-rule-win-big", 1ull << 30, 4);
	CHECK(cachetier_readahead_max(ct) == 8 * CHUNK, "window_max: cache of 1 GiB: %llu",
	      (unsigned long long)cachetier_readahead_max(ct));
	cachetier_close(ct);
	backend_close(be);
}

/* decode_ahead: a decoder (a gzip of the big object, read from the fault
 * store: no fd, so through the unit store) reads its compressed object in
 * order in reads of 1 MiB (cachetier_decode.c's DEC_IN_BYTES: 16 chunks)
 * with the full window (8 chunks): each read fills its own chunks not
 * queued yet on demand and queues the 8 after its end as readahead, so of
 * the gzip's 65 chunks, chunks 16-23, 32-39, 48-55 and 64 are readahead
 * fills (25), one fill a chunk (65). Without the rule (a window of 0): no
 * readahead fill. */
static void test_rule_decode_ahead(void)
{
	struct backend *be = store("");
	struct cachetier *ct = tier(be, "c-rule-dec", 1ull << 30, 4);
	struct cachetier_obj *o = NULL;
	struct backend_objinfo info;
	struct cachetier_stats st;
	unsigned char buf[4096];
	uint64_t nchunks, ahead = 0;
	char cmd[sizeof(tmpdir) * 2 + 400];
	int err;

	snprintf(cmd, sizeof(cmd), "gzip -n -1 -c '%s/src/%s' > '%s/src/rule-dec.tar.gz'", tmpdir,
		 keys[NOBJ], tmpdir);
	CHECK(system(cmd) == 0, "decode_ahead: %s", cmd);
	err = backend_stat(be, "rule-dec.tar.gz", &info);
	CHECK(err == 0, "decode_ahead: stat: %d", err);
	err = err ? err : cachetier_obj_open(ct, &info, CACHETIER_GZIP, &o);
	CHECK(err == 0, "decode_ahead: open: %d", err);
	if (err == 0) {
		CHECK(cachetier_obj_pread(o, buf, sizeof(buf), 0) == sizeof(buf) &&
			  memcmp(buf, data[NOBJ], sizeof(buf)) == 0,
		      "decode_ahead: decoded bytes");
		fills_idle(ct);
		stats(ct, &st);
		nchunks = (info.size + CHUNK - 1) / CHUNK;
		for (uint64_t r = 16; r < nchunks; r += 16) /* each read's window */
			ahead += nchunks - r < 8 ? nchunks - r : 8;
		printf("rule decode_ahead: %llu bytes in %llu chunks: readahead_fills %llu fills "
		       "%llu fetched %llu\n",
		       (unsigned long long)info.size, (unsigned long long)nchunks,
		       (unsigned long long)st.readahead_fills, (unsigned long long)st.fills,
		       (unsigned long long)st.bytes_fetched);
		CHECK(nchunks == 65 && ahead == 25,
		      "decode_ahead: the gzip has %llu chunks, not 65",
		      (unsigned long long)nchunks);
		CHECK(st.readahead_fills == ahead && st.fills == nchunks &&
			  st.bytes_fetched == info.size,
		      "decode_ahead: readahead_fills %llu (want %llu), fills %llu (want %llu), "
		      "fetched %llu",
		      (unsigned long long)st.readahead_fills, (unsigned long long)ahead,
		      (unsigned long long)st.fills, (unsigned long long)nchunks,
		      (unsigned long long)st.bytes_fetched);
		cachetier_obj_unref(o);
	}
	cachetier_close(ct);
	backend_close(be);
	snprintf(cmd, sizeof(cmd), "%s/src/rule-dec.tar.gz", tmpdir);
	unlink(cmd);
}

/* batch_unfit: a cache of 5 units of CHUNK / 8 holds units 0 of objects
 * 0-3, needed at now + 1 to now + 4. A batch fill of two requests in plan
 * order: 2 units of object 5 (now + 50: no room without evicting what is
 * needed sooner), then 1 unit of object 6 (now + 60: the free unit would
 * hold it). The first gets no room and ends the call: no request, the
 * first's 2 units unfit, object 6 not fetched. Without the rule the call
 * goes on: 1 request of object 6's unit. */
static void test_rule_batch_unfit(void)
{
	const uint64_t u = CHUNK / 8;
	struct backend *be = store("batch=1");
	struct cachetier *ct = tier(be, "c-rule-unfit", 5 * u, 4);
	struct cachetier_batch_piece w[2];
	struct cachetier_batch_result r;
	struct cachetier_obj *o[7];
	struct cachetier_stats st;
	unsigned char buf[64];
	const size_t ends[2] = {1, 2};
	uint32_t now = 1000;
	int err;

	for (int i = 0; i < 7; i++)
		o[i] = obj(ct, be, i);
	cachetier_plan_now(ct, now);
	for (int i = 0; i < 4; i++) {
		CHECK(cachetier_plan_mark(o[i], 0, u, now + 1 + (uint32_t)i) == 0, "mark %d", i);
		CHECK(cachetier_obj_pread_probe(o[i], buf, sizeof(buf), 0) == sizeof(buf),
		      "batch_unfit: read of unit 0 of object %d", i);
	}
	CHECK(cachetier_plan_mark(o[5], 0, 2 * u, now + 50) == 0 &&
		  cachetier_plan_mark(o[6], 0, u, now + 60) == 0,
	      "batch_unfit: marks");
	w[0] = (struct cachetier_batch_piece){o[5], 0, 2 * u};
	w[1] = (struct cachetier_batch_piece){o[6], 0, u};
	err = cachetier_batch_fill(ct, w, 2, ends, 2, 4, 1);
	batch_stats(ct, &r);
	stats(ct, &st);
	printf("rule batch_unfit: %d, %llu requests, %llu bytes, unfit %llu, object 6 cached "
	       "%llu\n",
	       err, (unsigned long long)r.requests, (unsigned long long)r.bytes,
	       (unsigned long long)r.unfit, (unsigned long long)cachetier_obj_cached_bytes(o[6]));
	CHECK(err == 0 && r.requests == 0 && r.bytes == 0 && r.unfit == 2 * u &&
		  st.evictions == 0 && cachetier_obj_cached_bytes(o[5]) == 0 &&
		  cachetier_obj_cached_bytes(o[6]) == 0,
	      "batch_unfit: %d, %llu requests (want 0), %llu bytes, unfit %llu (want %llu), "
	      "object 6 cached %llu (want 0)",
	      err, (unsigned long long)r.requests, (unsigned long long)r.bytes,
	      (unsigned long long)r.unfit, (unsigned long long)(2 * u),
	      (unsigned long long)cachetier_obj_cached_bytes(o[6]));
	for (int i = 0; i < 4; i++)
		CHECK(unit0(o[i]), "batch_unfit: unit 0 of object %d evicted", i);
	for (int i = 0; i < 7; i++)
		cachetier_obj_unref(o[i]);
	cachetier_close(ct);
	backend_close(be);
}

/* Make (on) or remove the fault store's DIR.hold (hold_at: a read over the
 * hold offset waits while it exists). */
static void rule_hold(int on)
{
	char path[sizeof(tmpdir) + 16];

	snprintf(path, sizeof(path), "%s/src.hold", tmpdir);
	flag_file(path, on);
}

/* Wait (up to 60 s) until fills fills ended and inflight run: a state, the
 * bound only against a hang. */
static void rule_fills_reach(struct cachetier *ct, uint64_t fills, uint64_t inflight,
			     const char *what)
{
	struct cachetier_stats st;

	for (int i = 0; i < 6000; i++) {
		stats(ct, &st);
		if (st.fills == fills && st.fills_inflight == inflight)
			return;
		usleep(10000);
	}
	CHECK(0, "%s: fills %llu in flight %llu, never %llu and %llu", what,
	      (unsigned long long)st.fills, (unsigned long long)st.fills_inflight,
	      (unsigned long long)fills, (unsigned long long)inflight);
}

/* cursor_front: prefetches of objects 1, 2, 3 in that order (PF_FIT) on a
 * store of 2 fill threads (one prefetch fill at a time), into a cache of
 * exactly objects 1 and 3 (whole chunks). The fault store holds the first
 * fill (object 1's chunk 0) until a reader has read object 3's chunk 1
 * (on demand); then object 3, which the reader reads, is prefetched
 * before object 2: objects 1 and 3 whole, nothing of object 2 (no room
 * left). Without the rule the order stays as asked: object 2 takes the
 * room object 3 needed. */
static void test_rule_cursor_front(void)
{
	struct backend *be;
	struct cachetier *ct;
	struct cachetier_obj *o[4];
	int ended = 1;

	rule_hold(1);
	be = store("hold_at=1");
	ct = tier(be, "c-rule-front", sizes[1] + sizes[3], 2);
	for (int i = 1; i <= 3; i++)
		o[i] = obj(ct, be, i);
	for (int i = 1; i <= 3; i++)
		CHECK(cachetier_obj_prefetch(o[i], CACHETIER_PF_FIT) == 0,
		      "cursor_front: prefetch");
	rule_fills_reach(ct, 0, 1, "cursor_front: object 1's chunk 0 held");
	CHECK(read_check(o[3], 3, CHUNK, 100, 1) == 0, "cursor_front: the read of object 3");
	rule_hold(0);
	for (int i = 1; i <= 3; i++)
		ended &= prefetch_ended(o[i]);
	CHECK(ended, "cursor_front: prefetches did not end");
	fills_idle(ct);
	printf("rule cursor_front: cached %llu %llu %llu of %zu %zu %zu\n",
	       (unsigned long long)cachetier_obj_cached_bytes(o[1]),
	       (unsigned long long)cachetier_obj_cached_bytes(o[2]),
	       (unsigned long long)cachetier_obj_cached_bytes(o[3]), sizes[1], sizes[2], sizes[3]);
	CHECK(cachetier_obj_cached_bytes(o[3]) == sizes[3] &&
		  cachetier_obj_cached_bytes(o[1]) == sizes[1] &&
		  cachetier_obj_cached_bytes(o[2]) == 0,
	      "cursor_front: cached %llu %llu %llu, want %zu 0 %zu",
	      (unsigned long long)cachetier_obj_cached_bytes(o[1]),
	      (unsigned long long)cachetier_obj_cached_bytes(o[2]),
	      (unsigned long long)cachetier_obj_cached_bytes(o[3]), sizes[1], sizes[3]);
	for (int i = 1; i <= 3; i++)
		cachetier_obj_unref(o[i]);
	cachetier_close(ct);
	backend_close(be);
}

/* The fault store's log (log=1: DIR.log, one line a read, "read KEY OFF
 * LEN", and "hold KEY OFF" when a read starts to wait on DIR.hold), into
 * buf (NUL-terminated, empty when there is none yet). */
static void rule_log(char *buf, size_t size)
{
	char path[sizeof(tmpdir) + 16];

	snprintf(path, sizeof(path), "%s/src.log", tmpdir);
	read_log(path, buf, size);
}

/* promote: a reader that waits for a unit its readahead queued gets that
 * fill next, before the rest of the window. A store of one fill thread
 * (one fill at a time, taken in queue order) that logs its reads (log=1)
 * and holds chunk 1's read before its first byte (hold_at) while DIR.hold
 * exists. A read of the big object's first 4 KiB with a window of 8
 * chunks queues chunks 0-8 as readahead and waits for chunk 0 (its first
 * queued wait, promoting chunk 0); the store then reads chunk 0, then
 * chunk 1, which it holds: its log says "hold". A thread then reads 4 KiB
 * of chunk 6 (no window): it finds chunk 6 queued and waits (queued_waits
 * 2 says it did, under the tier's lock, where the rule acted). The hold
 * goes: with the rule the store reads chunks 0, 1, 6, 2, 3, 4, 5, 7, 8;
 * without it (the fill stays in its queue) 0, 1, 2, ..., 8. No sleep
 * decides anything: each step waits for a state (the log's line, the
 * counter), bounded against a hang only. */
struct promote_arg {
	struct cachetier_obj *o;
	int ret;
};

static void *promote_main(void *arg)
{
	struct promote_arg *a = arg;

	a->ret = read_check(a->o, NOBJ, 6 * (uint64_t)CHUNK + 100, 4096, 0);
	return NULL;
}

static void test_rule_promote(void)
{
	static const unsigned order[] = {0, 1, 6, 2, 3, 4, 5, 7, 8};
	char log[4096], want[4096], path[sizeof(tmpdir) + 16];
	struct promote_arg a = {NULL, 1};
	struct cachetier_stats st;
	struct cachetier_pin *pin;
	struct backend *be;
	struct cachetier *ct;
	uint64_t fd_off;
	size_t at = 0;
	pthread_t th;
	int fd, err, i, started;

	snprintf(path, sizeof(path), "%s/src.log", tmpdir);
	unlink(path);
	rule_hold(1);
	be = store("hold_at=65536&log=1"); /* CHUNK: chunk 1's first byte */
	ct = tier(be, "c-rule-promote", 1ull << 30, 1);
	a.o = obj(ct, be, NOBJ);
	err = cachetier_obj_read_begin_ahead(a.o, 0, 4096, 8 * (uint64_t)CHUNK, &fd, &fd_off, &pin);
	CHECK(err == 0, "promote: the first read: %d", err);
	if (err == 0)
		cachetier_obj_read_end(pin);
	for (i = 0; i < 6000; i++) { /* the store holds chunk 1's read */
		rule_log(log, sizeof(log));
		if (strstr(log, "hold big.tar 65536\n"))
			break;
		usleep(10000);
	}
	CHECK(strcmp(log, "read big.tar 0 65536\nread big.tar 65536 65536\nhold big.tar 65536\n") ==
		  0,
	      "promote: the store's log before the reader:\n%s", log);
	stats(ct, &st);
	CHECK(st.queued_waits == 1 && st.fills == 1 && st.fills_inflight == 1 &&
		  st.fills_queued == 7,
	      "promote: chunk 1 held: queued waits %llu (want 1), fills %llu (1), in flight %llu "
	      "(1), queued %llu (7)",
	      (unsigned long long)st.queued_waits, (unsigned long long)st.fills,
	      (unsigned long long)st.fills_inflight, (unsigned long long)st.fills_queued);
	started = pthread_create(&th, NULL, promote_main, &a) == 0;
	CHECK(started, "promote: thread");
	for (i = 0; started && i < 6000; i++) { /* the thread waits for chunk 6 */
		stats(ct, &st);
		if (st.queued_waits == 2)
			break;
		usleep(10000);
	}
	CHECK(st.queued_waits == 2, "promote: queued_waits %llu, not 2",
	      (unsigned long long)st.queued_waits);
	rule_hold(0);
	if (started)
		pthread_join(th, NULL);
	fills_idle(ct);
	stats(ct, &st);
	rule_log(log, sizeof(log));
	for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
		at += (size_t)snprintf(want + at, sizeof(want) - at, "read big.tar %u 65536\n",
				       order[k] * CHUNK);
		if (k == 1)
			at +=
			    (size_t)snprintf(want + at, sizeof(want) - at, "hold big.tar 65536\n");
	}
	printf("rule promote: the waiting read %d, queued waits %llu, fills %llu, cached %llu; the "
	       "store's reads:\n%s",
	       a.ret, (unsigned long long)st.queued_waits, (unsigned long long)st.fills,
	       (unsigned long long)cachetier_obj_cached_bytes(a.o), log);
	CHECK(strcmp(log, want) == 0, "promote: the store read\n%swant\n%s", log, want);
	CHECK(a.ret == 0 && st.queued_waits == 2 && st.fills == 9 && st.fill_errors == 0 &&
		  st.readahead_fills == 9 && cachetier_obj_cached_bytes(a.o) == 9 * CHUNK,
	      "promote: the waiting read %d (want 0), queued waits %llu (2), fills %llu (9), "
	      "errors %llu (0), readahead fills %llu (9), cached %llu (%u)",
	      a.ret, (unsigned long long)st.queued_waits, (unsigned long long)st.fills,
	      (unsigned long long)st.fill_errors, (unsigned long long)st.readahead_fills,
	      (unsigned long long)cachetier_obj_cached_bytes(a.o), 9 * CHUNK);
	cachetier_obj_unref(a.o);
	cachetier_close(ct);
	backend_close(be);
	unlink(path);
}

/* The tests that may run alone (each opens its own store and tier):
 * TEST_ONLY=test_NAME runs one of them and nothing else (a loop over one
 * test); unset, main runs every test. */
static const struct {
	const char *name;
	void (*fn)(void);
} alone[] = {
    {"test_rule_window_max", test_rule_window_max},
    {"test_rule_decode_ahead", test_rule_decode_ahead},
    {"test_rule_batch_unfit", test_rule_batch_unfit},
    {"test_rule_cursor_front", test_rule_cursor_front},
    {"test_rule_promote", test_rule_promote},
    {"test_punch_queue", test_punch_queue},
    {"test_punch_batch", test_punch_batch},
    {"test_free_check", test_free_check},
    {"test_read_end_objlock", test_read_end_objlock},
    {"test_batch", test_batch},
    {"test_batch_heads", test_batch_heads},
    {"test_batch_early", test_batch_early},
    {"test_batch_item", test_batch_item},
    {"test_batch_count", test_batch_count},
};

static void run_alone(const char *name)
{
	for (size_t i = 0; i < sizeof(alone) / sizeof(alone[0]); i++) {
		if (strcmp(alone[i].name, name) == 0) {
			alone[i].fn();
			return;
		}
	}
	CHECK(0, "TEST_ONLY=%s: not a test that runs alone", name);
}

int main(void)
{
	const char *only = getenv("TEST_ONLY");
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "cs", 20240611u);
	uint64_t s = seed * 2654435761u + 1;

	for (int i = 0; i <= NOBJ; i++) {
		/* sizes across chunk boundaries; the big one has 64+ chunks */
		sizes[i] =
		    i == NOBJ ? 64 * CHUNK + 1234 : 3 * CHUNK + (size_t)(rnd(&s) % (9 * CHUNK));
		snprintf(keys[i], sizeof(keys[i]), i == NOBJ ? "big.tar" : "shard-%d.tar", i);
		data[i] = src_object(tmpdir, keys[i], sizes[i], &s);
	}

	if (only && *only) {
		run_alone(only);
		goto out;
	}
	test_random(seed);
	test_sequential();
	test_free_check();
	test_random_no_readahead(seed);
	test_streams_seek();
	test_concurrent(seed);
	test_persist(seed);
	test_pieces(seed);
	test_land();
	test_prefetch_fit();
	test_prefetch_range();
	test_range_spares_present();
	test_pin_threads();
	test_peer_pins();
	test_idle_locks();
	test_read_unlocked();
	test_read_end_objlock();
	test_one_obj_threads(seed);
	test_read_window();
	test_plan_order();
	test_punch_join();
	test_room_inflight();
	test_punch_queue();
	test_punch_batch();
	test_reopen_race();
	test_crash(seed);
	test_durable(seed);
	test_mapgone(seed);
	test_errors();
	test_cut();
	test_changed(seed);
	test_changed_noetag(seed);
	test_batch();
	test_batch_heads();
	test_batch_early();
	test_batch_item();
	test_batch_count();
	test_damage();
	test_watch_own_fill(0);
	test_watch_own_fill(1);
	test_rule_window_max();
	test_rule_decode_ahead();
	test_rule_batch_unfit();
	test_rule_cursor_front();
	test_rule_promote();

out:
	for (int i = 0; i <= NOBJ; i++)
		free(data[i]);
	return test_end("chunkstore", tmpdir, seed);
}
