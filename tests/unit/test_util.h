/*
 * test_util.h — helpers the unit tests of the cache tier share
 * (test_chunkstore.c, test_fillwake.c, test_rules.c, test_roomacct.c,
 * test_objlock.c, test_fillwrite.c, ...): the seeded generator of their data
 * (test_rng.h), a source file written whole, a test tier's config and open
 * (a small one: tier_small) and its end (tier_end), an object opened and its
 * bytes compared, the tier's counters and the waits for one to reach a
 * value, the fault store's flag files (DIR.hold: a read held while it
 * exists) and its log (DIR.log: one line a read). One test program is one
 * translation unit: every helper is static inline (a program uses the ones
 * it needs). Include after check.h, backend.h and cachetier.h.
 */
#ifndef SHARDFS_TEST_UTIL_H
#define SHARDFS_TEST_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_rng.h" /* rnd(s): the tests' data and their random choices */

/* Write len bytes of buf to path (created or truncated); a failure ends
 * the program (FAIL): nothing after it means anything. */
static inline void write_file(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0)
		FAIL("cannot write %s", path);
}

/* A watched file's fd: DIR/NAME made (truncated) read-write with "abcd"
 * (the watch tests, test_watchcount.c and test_watchreq.c); a failure ends
 * the program. */
static inline int watch_file(const char *dir, const char *name)
{
	char path[400];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		FAIL("open %s: %s", path, strerror(errno));
	if (pwrite(fd, "abcd", 4, 0) != 4)
		FAIL("pwrite %s", path);
	return fd;
}

/* A change a watch sees: one byte written in the file fd. */
static inline void watch_change(int fd)
{
	if (pwrite(fd, "x", 1, 1) != 1)
		FAIL("pwrite: %s", strerror(errno));
}

/* The fault store over DIR/src with the fault options query
 * (fault://DIR/src?query); a failure ends the program. */
static inline struct backend *fault_store(const char *dir, const char *query)
{
	char src[700];
	struct backend *be;
	int err;

	snprintf(src, sizeof(src), "fault://%s/src?%s", dir, query);
	err = backend_open(&be, src, NULL);
	if (err < 0)
		FAIL("backend_open %s: %d", src, err);
	return be;
}

/* The config of a test tier in dir: a cache of size bytes, chunks of chunk
 * bytes, threads fill threads, readahead of 8 chunks, a disk reserve of a
 * byte, and a fixed source string (so that stores with other fault
 * settings share one per-source directory); the caller changes the rest. */
static inline void tier_config(struct cachetier_config *cc, const char *dir, uint64_t size,
			       unsigned threads, uint32_t chunk)
{
	memset(cc, 0, sizeof(*cc));
	cc->cache_dir = dir;
	cc->source = "test-source";
	cc->cache_size_bytes = size;
	cc->min_free_bytes = 1;
	cc->chunk_bytes = chunk;
	cc->readahead_max_bytes = 8 * (uint64_t)chunk;
	cc->fill_threads = threads;
}

/* Open the tier cc says over be (not owned); a failure ends the program. */
static inline struct cachetier *tier_open(const struct cachetier_config *cc, struct backend *be)
{
	struct cachetier *ct;
	int err = cachetier_open(&ct, cc, be);

	if (err < 0)
		FAIL("cachetier_open %s: %d", cc->cache_dir, err);
	return ct;
}

/* Object key of be opened in ct as it is stored (CACHETIER_RAW); a
 * failure ends the program. */
static inline struct cachetier_obj *obj_open(struct cachetier *ct, struct backend *be,
					     const char *key)
{
	struct backend_objinfo info;
	struct cachetier_obj *o = NULL;
	int err = backend_stat(be, key, &info);

	if (err == 0)
		err = cachetier_obj_open(ct, &info, CACHETIER_RAW, &o);
	if (err)
		FAIL("open %s: %d", key, err);
	return o;
}

/* Are bytes [off, off + len) read through o (cachetier_obj_pread) those of
 * want at off? 1 yes, 0 no (short, an error, other bytes). */
static inline int obj_exact(struct cachetier_obj *o, const unsigned char *want, uint64_t off,
			    size_t len)
{
	unsigned char *buf = malloc(len ? len : 1);
	ssize_t n = buf ? cachetier_obj_pread(o, buf, len, off) : -1;
	int ok = n == (ssize_t)len && memcmp(buf, want + off, len) == 0;

	free(buf);
	return ok;
}

/* The tier's counters now (cachetier_get_stats), zeroed first. */
static inline void stats(struct cachetier *ct, struct cachetier_stats *st)
{
	memset(st, 0, sizeof(*st));
	cachetier_get_stats(ct, st);
}

/* A small test tier in dir/name over be: a cache of size bytes, chunks of
 * chunk bytes, 2 fill threads, readahead of a chunk, a slot for a small
 * fill (3 fills at once), no rules. */
static inline struct cachetier *tier_small(const char *dir, const char *name, struct backend *be,
					   uint64_t size, uint32_t chunk)
{
	struct cachetier_config cc;
	char path[600];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	tier_config(&cc, path, size, 2, chunk);
	cc.readahead_max_bytes = chunk;
	cc.small_fills = 1;
	return tier_open(&cc, be);
}

/* The end of a tier a test opened: the objects given (the list ends with
 * NULL) unreferenced in that order, the tier closed (debug builds: no
 * unit left filling or queued, no byte left reserved:
 * cachetier__run_check), then its store be (NULL: one the caller keeps). */
__attribute__((sentinel)) static inline void tier_end(struct cachetier *ct, struct backend *be, ...)
{
	struct cachetier_obj *o;
	va_list ap;

	va_start(ap, be);
	while ((o = va_arg(ap, struct cachetier_obj *)) != NULL)
		cachetier_obj_unref(o);
	va_end(ap);
	cachetier_close(ct);
	if (be)
		backend_close(be);
}

/* The tier's counters a test waits for (count_reach, cached_wait). */
enum tier_count {
	TC_FILLS_INFLIGHT,
	TC_BUFS_QUEUED,
	TC_UNIT_WAITERS,
	TC_WRITER_LOCKS,
	TC_PUNCHES_PENDING
};

static inline uint64_t tier_count_of(const struct cachetier_stats *st, enum tier_count w)
{
	switch (w) {
	case TC_FILLS_INFLIGHT:
		return st->fills_inflight;
	case TC_BUFS_QUEUED:
		return st->fill_bufs_queued;
	case TC_UNIT_WAITERS:
		return st->unit_waiters;
	case TC_WRITER_LOCKS:
		return st->fill_writer_locks;
	case TC_PUNCHES_PENDING:
		return st->punches_pending;
	}
	return 0;
}

/* Wait (up to 60 s: the bound only against a hang) until the tier's
 * count w is want; a failed check says name otherwise. */
static inline void count_reach(struct cachetier *ct, enum tier_count w, uint64_t want,
			       const char *name)
{
	static const char *const what[] = {"fills in flight", "buffers queued", "unit waiters",
					   "writer's takes of ct->lock", "punches pending"};
	struct cachetier_stats st;
	uint64_t v = 0;

	for (int i = 0; i < 6000; i++) {
		stats(ct, &st);
		v = tier_count_of(&st, w);
		if (v == want)
			return;
		usleep(10000);
	}
	CHECK(0, "%s: %llu %s after 60 s, want %llu", name, (unsigned long long)v, what[w],
	      (unsigned long long)want);
}

/* Wait (up to 60 s: the bound only against a hang) until o's bytes valid
 * in its state file are want; a failed check says name otherwise. */
static inline void cached_wait(struct cachetier_obj *o, uint64_t want, const char *name)
{
	uint64_t v = 0;

	for (int i = 0; i < 6000; i++) {
		v = cachetier_obj_cached_bytes(o);
		if (v == want)
			return;
		usleep(10000);
	}
	CHECK(0, "%s: %llu bytes valid after 60 s, want %llu", name, (unsigned long long)v,
	      (unsigned long long)want);
}

/* Wait (up to 60 s: the bound only against a hang) until no fill runs
 * and none is queued or being started, as the tier counts them
 * (fills_inflight, fills_queued), and no eviction's punch waits for the
 * puncher (punches_pending): a readahead queued but not started yet is
 * not idle. Prefetch ranges and cursors are not counted: a test that
 * prefetches waits for its prefetch to end first (prefetch_ended). */
static inline void fills_idle(struct cachetier *ct)
{
	struct cachetier_stats st;

	for (int i = 0; i < 6000; i++) {
		stats(ct, &st);
		if (st.fills_inflight == 0 && st.fills_queued == 0 && st.punches_pending == 0)
			return;
		usleep(10000);
	}
	CHECK(0, "fills not idle after 60 s: %llu running, %llu queued, %llu punches pending",
	      (unsigned long long)st.fills_inflight, (unsigned long long)st.fills_queued,
	      (unsigned long long)st.punches_pending);
}

/* Wait (up to 60 s: the bound only against a hang) until o's prefetch
 * ended; 1 when it did. */
static inline int prefetch_ended(struct cachetier_obj *o)
{
	for (int w = 0; w < 6000; w++) {
		if (!cachetier_obj_prefetch_state(o, NULL))
			return 1;
		usleep(10000);
	}
	return 0;
}

/* The start of a test program: stdout line-buffered (a hang still shows
 * how far it got), the seed (TEST_SEED, else seed: fixed in CI) printed
 * and returned, a temporary directory /tmp/shardfs-PREFIX-XXXXXX made in
 * dir (size bytes) with its store's folder src/ in it. */
static inline uint64_t test_start(char *dir, size_t size, const char *prefix, uint64_t seed)
{
	const char *env = getenv("TEST_SEED");
	char src[600];

	if (env)
		seed = strtoull(env, NULL, 10);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("seed %llu (set TEST_SEED to repeat)\n", (unsigned long long)seed);
	snprintf(dir, size, "/tmp/shardfs-%s-XXXXXX", prefix);
	if (!mkdtemp(dir))
		FAIL("mkdtemp %s", dir);
	snprintf(src, sizeof(src), "%s/src", dir);
	if (mkdir(src, 0755) != 0)
		FAIL("mkdir %s", src);
	return seed;
}

/* A source object of the store: size bytes from the generator (*s), written
 * to DIR/src/key and returned (malloc'd: the bytes every read is compared
 * with). */
static inline unsigned char *src_object(const char *dir, const char *key, size_t size, uint64_t *s)
{
	unsigned char *buf = malloc(size ? size : 1);
	char path[700];

	if (!buf)
		FAIL("malloc %zu", size);
	for (size_t k = 0; k < size; k++)
		buf[k] = (unsigned char)rnd(s);
	snprintf(path, sizeof(path), "%s/src/%s", dir, key);
	write_file(path, buf, size);
	return buf;
}

/* The end of a test program: its temporary directory dir removed when
 * every check passed, else named with the seed (to look at, and to repeat
 * the run: TEST_SEED); the summary (check_summary) is main's return. */
static inline int test_end(const char *name, const char *dir, uint64_t seed)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (check_failures() == 0 && system(cmd) != 0)
		fprintf(stderr, "warning: could not remove %s\n", dir);
	if (check_failures())
		fprintf(stderr, "%s: seed %llu; files in %s\n", name, (unsigned long long)seed,
			dir);
	return check_summary(name);
}

/* Make (on: a check) or remove the flag file path: the fault store's
 * DIR.hold (hold_at: a read over the hold offset waits while it exists).
 * Removing one that is not there is no error. */
static inline void flag_file(const char *path, int on)
{
	int fd;

	if (!on) {
		unlink(path);
		return;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	CHECK(fd >= 0, "create %s", path);
	if (fd >= 0)
		close(fd);
}

/* The fault store's log at path (log=1: DIR.log, one line a read, "read
 * KEY OFF LEN", and "hold KEY OFF" when a read starts to wait on
 * DIR.hold), into buf (NUL-terminated, empty when there is none yet). */
static inline void read_log(const char *path, char *buf, size_t size)
{
	ssize_t n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		n = read(fd, buf, size - 1);
		close(fd);
	}
	buf[n > 0 ? n : 0] = 0;
}

#endif
