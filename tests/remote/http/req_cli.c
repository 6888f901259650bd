/*
 * req_cli.c — drives the remote stores' asynchronous ranged reads
 * (backend_read_version_async) for test_http.py's tests of the request
 * path and for measuring it (syscalls, instructions per request):
 *
 *   req_cli SOURCE KEY OFF LEN COUNT WINDOW [BUDGET_S]
 *
 * reads [OFF + i*LEN, OFF + (i+1)*LEN) of KEY for i < COUNT (wrapping to
 * OFF when a range passes the object's end, as its size says), at most
 * WINDOW in flight, as BACKEND_READ_SMALL reads, then prints
 * "bytes N", "errors N", "fnv HEX" (FNV-1a 64 of the bytes in range
 * order) and the store's counters, one "name value" a line. The store's
 * log lines go to stderr as "log: MSG". Exit 0 when every read succeeded.
 * REQ_CLI_COUNT=1: the bytes are counted, not kept (fnv 0): for measuring
 * the request path without the copy and the hash.
 * REQ_CLI_PAUSE=N: the reads are BACKEND_READ_PAUSABLE and the sink answers
 * BACKEND_SINK_FULL to every piece N times before it takes it (the same
 * bytes must come again, at the same offset); "pauses N" says how often.
 * Each refusal is followed by a backend_sink_ready from another thread (as
 * the cache tier's fill writer does); with REQ_CLI_NOWAKE=1 by none (the
 * store's BACKEND_PAUSE_BACKSTOP_MS bound resumes the transfer).
 * REQ_CLI_SYNC=OFF:LEN: the reads are ordinary (not small: they hold the
 * WINDOW connections), and once all are sent a synchronous read of
 * [OFF, OFF + LEN) (backend_pread_version) is made, which a thread waits
 * for: it runs past the connections (max_connections is WINDOW + 1) and
 * prints "sync BYTES FNV" as soon as it returns, before the others end
 * (their stall bound is 120 s in this mode, not 5: none ends by it first).
 * REQ_CLI_MEM=N: the sink offers its own memory (backend_sink_mem_cb) as a
 * fill does, up to the next multiple of N bytes from the read's start (a
 * unit's edge), and takes a piece that arrives there without a copy;
 * "sink_inplace N" and "sink_copied N" say how its bytes came. With
 * REQ_CLI_PAUSE too, a refused piece's place in its memory is overwritten
 * (0x5a) at the store's next len-0 call, as a fill's writer may reuse a
 * buffer: the piece must come again from the store's own copy.
 * REQ_CLI_CONNECT_S=S: the store's connect_timeout_s.
 * REQ_CLI_SIZE=N: the object's size is N (no ETag): no HEAD is made, so the
 * reads are the store's first requests. A failed read prints "error I
 * WHAT" with the store's record of it (backend_last_error).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "disk.h"

struct job {
	char errmsg[400]; /* the store's record of its failure */
	unsigned char *buf;
	uint64_t off;
	size_t len, got;
	int err;
	unsigned full;	   /* BACKEND_SINK_FULL answered to the piece now offered */
	uint64_t full_off; /* ... at this offset */
	size_t full_len;   /* ... of this length */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned inflight;
static int count_only;
static unsigned pause_n;
static _Atomic unsigned long pauses;
static int no_wake;
static size_t mem_n;
static _Atomic unsigned long long sink_inplace, sink_copied;
static struct backend *be_g;
static sem_t wake_sem; /* posted per refusal: waker() says backend_sink_ready */
static _Atomic int wake_stop;

static void *waker(void *arg)
{
	(void)arg;
	for (;;) {
		while (sem_wait(&wake_sem) < 0 && errno == EINTR)
			;
		if (atomic_load(&wake_stop))
			return NULL;
		backend_sink_ready(be_g);
	}
}

static int sink(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct job *j = arg;

	if (!len) {
		if (mem_n && j->full && j->buf) /* the refused piece's place is reused */
			memset(j->buf + (j->full_off - j->off), 0x5a, j->full_len);
		return 0;
	}
	if (off < j->off || off - j->off + len > j->len)
		return -EIO;
	if (pause_n) {
		if (j->full && off != j->full_off)
			return -EIO; /* not the same bytes again */
		if (j->full < pause_n) {
			j->full++;
			j->full_off = off;
			j->full_len = len;
			pauses++;
			if (!no_wake)
				sem_post(&wake_sem);
			return BACKEND_SINK_FULL;
		}
		j->full = 0;
	}
	j->got += len;
	if (count_only)
		return 0;
	j->got -= len;
	if (buf == j->buf + (off - j->off)) { /* received where sink_mem offered */
		sink_inplace += len;
	} else {
		memcpy(j->buf + (off - j->off), buf, len);
		sink_copied += len;
	}
	j->got += len;
	return 0;
}

/* REQ_CLI_MEM: the job's buffer at off, up to the next multiple of mem_n
 * from the read's start */
static void *sink_mem(void *arg, uint64_t off, size_t *len)
{
	struct job *j = arg;
	size_t at, edge;

	if (!j->buf || off < j->off || off - j->off >= j->len)
		return NULL;
	at = (size_t)(off - j->off);
	edge = (at / mem_n + 1) * mem_n;
	if (edge > j->len)
		edge = j->len;
	if (*len > edge - at)
		*len = edge - at;
	return j->buf + at;
}

/* the read's store and key: a failed read is logged as the cache tier's
 * fills log theirs (backend_log_failure, in done) */
static struct backend *log_be;
static const char *log_key;

static void done(void *arg, int err, uint64_t bytes)
{
	struct job *j = arg;

	(void)bytes;
	if (err < 0) /* the I/O thread's record is this read's while done runs */
		snprintf(j->errmsg, sizeof(j->errmsg), "%s", backend_last_error(be_g));
	backend_log_failure(log_be, log_key, err, "read");
	pthread_mutex_lock(&mu);
	j->err = err;
	inflight--;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
}

static void log_line(void *arg, enum backend_log_level level, const char *msg)
{
	(void)arg;
	(void)level;
	fprintf(stderr, "log: %s\n", msg);
}

/* REQ_CLI_SYNC's read: "sync BYTES FNV" on stdout, flushed at once. */
static int sync_read(struct backend *be, const char *key, const char *etag, uint64_t size,
		     const char *spec)
{
	uint64_t off = strtoull(spec, NULL, 10);
	const char *colon = strchr(spec, ':');
	size_t n = colon ? strtoull(colon + 1, NULL, 10) : 0;
	unsigned char *buf = malloc(n ? n : 1);
	ssize_t got;

	if (!buf || !n) {
		fprintf(stderr, "req_cli: REQ_CLI_SYNC=OFF:LEN, LEN > 0\n");
		return -1;
	}
	got = backend_pread_version(be, key, etag, size, buf, n, off);
	if (got < 0) {
		fprintf(stderr, "req_cli: sync read: %s\n", strerror((int)-got));
		free(buf);
		return -1;
	}
	printf("sync %zd %016" PRIx64 "\n", got,
	       disk_fnv64_update(0xcbf29ce484222325ull, buf, (size_t)got));
	fflush(stdout);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	struct backend_config cfg = {0};
	struct backend_objinfo info;
	struct backend_stats st;
	struct backend *be;
	struct job *jobs;
	const char *sync_spec;
	pthread_t wt;
	uint64_t off0, size, bytes = 0, h = 0xcbf29ce484222325ull;
	size_t len, count, window, errors = 0;
	int err;

	if (argc < 7) {
		fprintf(stderr, "usage: req_cli SOURCE KEY OFF LEN COUNT WINDOW [BUDGET_S]\n");
		return 2;
	}
	count_only = getenv("REQ_CLI_COUNT") != NULL;
	pause_n = getenv("REQ_CLI_PAUSE") ? (unsigned)atoi(getenv("REQ_CLI_PAUSE")) : 0;
	no_wake = getenv("REQ_CLI_NOWAKE") != NULL;
	mem_n = getenv("REQ_CLI_MEM") ? strtoull(getenv("REQ_CLI_MEM"), NULL, 10) : 0;
	off0 = strtoull(argv[3], NULL, 10);
	len = strtoull(argv[4], NULL, 10);
	count = strtoull(argv[5], NULL, 10);
	window = strtoull(argv[6], NULL, 10);
	sync_spec = getenv("REQ_CLI_SYNC");
	cfg.connections = (unsigned)window;
	cfg.max_connections = (unsigned)window + (sync_spec != NULL);
	cfg.retry_budget_s = argc > 7 ? atof(argv[7]) : 10;
	/* REQ_CLI_CONNECT_S: connect_timeout_s (a lookup's bound too) */
	cfg.connect_timeout_s = getenv("REQ_CLI_CONNECT_S") ? atof(getenv("REQ_CLI_CONNECT_S")) : 0;
	/* REQ_CLI_SYNC: a held read must not end by the stall bound first */
	cfg.stall_timeout_s = sync_spec ? 120 : 5;
	cfg.log = log_line;
	/* REQ_CLI_ENGINE=auto: --http-engine auto (the lean engine) */
	cfg.http_engine = getenv("REQ_CLI_ENGINE") && strcmp(getenv("REQ_CLI_ENGINE"), "auto") == 0;
	if (!len || !count || !window) {
		fprintf(stderr, "req_cli: LEN, COUNT and WINDOW must be > 0\n");
		return 2;
	}
	err = backend_open(&be, argv[1], &cfg);
	if (err < 0) {
		fprintf(stderr, "req_cli: %s: %s\n", argv[1], strerror(-err));
		return 1;
	}
	memset(&info, 0, sizeof(info));
	if (getenv("REQ_CLI_SIZE"))
		info.size = strtoull(getenv("REQ_CLI_SIZE"), NULL, 10);
	else
		err = backend_stat(be, argv[2], &info);
	if (err < 0) {
		fprintf(stderr, "req_cli: %s: %s\n", argv[2], strerror(-err));
		return 1;
	}
	size = info.size;
	be_g = be;
	if (sem_init(&wake_sem, 0, 0) < 0 || pthread_create(&wt, NULL, waker, NULL) != 0)
		return 1;
	jobs = calloc(count, sizeof(*jobs));
	for (size_t i = 0; jobs && i < count; i++) {
		uint64_t o = off0 + (uint64_t)i * len;

		if (size >= off0 + len)
			o = off0 + (o - off0) % ((size - off0) / len * len);
		jobs[i].off = o;
		jobs[i].len = len;
		jobs[i].buf = count_only ? NULL : malloc(len);
		if (!count_only && !jobs[i].buf)
			return 1;
	}
	if (!jobs)
		return 1;
	for (size_t i = 0; i < count; i++) {
		pthread_mutex_lock(&mu);
		while (inflight >= window)
			pthread_cond_wait(&cv, &mu);
		inflight++;
		pthread_mutex_unlock(&mu);
		log_be = be;
		log_key = argv[2];
		backend_read_version_async_mem(
		    be, argv[2], info.etag, info.size, jobs[i].off, len,
		    (sync_spec ? 0 : BACKEND_READ_SMALL) | (pause_n ? BACKEND_READ_PAUSABLE : 0),
		    sink, mem_n ? sink_mem : NULL, &jobs[i], done, &jobs[i]);
	}
	if (sync_spec && sync_read(be, argv[2], info.etag, info.size, sync_spec) < 0)
		return 1;
	pthread_mutex_lock(&mu);
	while (inflight)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	atomic_store(&wake_stop, 1);
	sem_post(&wake_sem);
	pthread_join(wt, NULL);
	for (size_t i = 0; i < count; i++) {
		if (jobs[i].err < 0) {
			errors++;
			fprintf(stderr, "req_cli: read %zu at %" PRIu64 ": %s\n", i, jobs[i].off,
				strerror(-jobs[i].err));
			printf("error %zu %s\n", i, jobs[i].errmsg);
			free(jobs[i].buf);
			continue;
		}
		bytes += jobs[i].got;
		if (!count_only)
			h = disk_fnv64_update(h, jobs[i].buf, jobs[i].got);
		free(jobs[i].buf);
	}
	free(jobs);
	backend_get_stats(be, &st);
	printf("bytes %" PRIu64 "\nerrors %zu\nfnv %016" PRIx64 "\n", bytes, errors,
	       count_only ? 0 : h);
	printf("requests %" PRIu64 "\nattempts %" PRIu64 "\nfailures %" PRIu64 "\n", st.requests,
	       st.attempts, st.failures);
	printf("bytes_received %" PRIu64 "\nshort_bodies %" PRIu64 "\nrange_ignored %" PRIu64 "\n",
	       st.bytes_received, st.short_bodies, st.range_ignored);
	printf("restarts %" PRIu64 "\n", st.restarts);
	printf("pauses %lu\n", (unsigned long)pauses);
	printf("store_pauses %" PRIu64 "\nresumes %" PRIu64 "\npause_backstops %" PRIu64 "\n",
	       st.pauses, st.resumes, st.pause_backstops);
	printf("connects %" PRIu64 "\nlean_attempts %" PRIu64 "\n", st.connects, st.lean_attempts);
	printf("inplace_bytes %" PRIu64 "\ncopied_bytes %" PRIu64 "\n", st.recv_inplace_bytes,
	       st.recv_copied_bytes);
	printf("sink_inplace %llu\nsink_copied %llu\n", (unsigned long long)sink_inplace,
	       (unsigned long long)sink_copied);
	printf("resolves %" PRIu64 "\nresolve_hits %" PRIu64 "\nresolve_failures %" PRIu64 "\n",
	       st.resolves, st.resolve_hits, st.resolve_failures);
	backend_close(be);
	return errors ? 1 : 0;
}
