/*
 * cachetier_chunk.c — the chunk store of remote objects: a remote object
 * is fetched once, in chunks of cfg.chunk_bytes (one backend_pread each),
 * ahead of a sequential reader, into a sparse local file, and served from
 * it across reads and remounts.
 *
 * On disk, per object (name = hash of key, ETag and size, so a changed
 * object never meets old bytes):
 *   data/<hash>      sparse data file; chunk i at offset i * chunk_bytes
 *   data/<hash>.map  which chunks are valid (format below)
 * The map is the only thing trusted after a restart. Protocol:
 *   fill:  pwrite chunk → mark valid in memory (readers are served from
 *          the page cache at once) → (batched: every MAP_BATCH_CHUNKS
 *          chunks, every second, at object close and cachetier_close; by
 *          the flusher thread, never on a fill worker) note the valid
 *          chunks → fdatasync(data) → write the map atomically.
 *   evict: mark chunks EVICTING in memory → unlink the map + fsync the
 *          directory → punch the chunks out → mark them EMPTY (and rewrite
 *          the map of the chunks that stayed).
 * So a persisted map only ever claims chunks whose bytes were durable
 * before the map was written (each was written before the fdatasync that
 * precedes the map), and no map claims a chunk being punched. A
 * crash loses at most the chunks not yet recorded; they are fetched again.
 *
 * Map format (little-endian):
 *   0  magic "SHCHMAP\1"   8  u32 version    12 u32 chunk_bytes
 *   16 u64 object size     24 u32 nchunks    28 u32 key length
 *   32 u32 ETag length     36 u32 0          40 key, ETag, bitmap
 *   (bit i of byte i/8 = chunk i valid), then u64 FNV-1a of all before.
 *
 * Fills: cfg.fill_threads workers take jobs from three queues in order:
 * demand (a reader waits), readahead, prefetch (a cursor per object, so a
 * prefetch of a huge object queues nothing up front). A chunk has one
 * state (enum ct_chunk), so concurrent misses of one chunk share one fill.
 * Readers wait on ct->chunk_cond for just the chunks they need; a failed
 * fill leaves the chunk EMPTY with its error, which every reader that was
 * waiting for that fill returns; the next read retries.
 *
 * Readahead: a read that starts near where the previous read of the
 * object ended (up to one chunk further, a quarter chunk back) is
 * sequential (the tolerance covers index building, which skips over small
 * gaps, and kernel readahead arriving slightly out of order); its window
 * doubles from one chunk up to
 * cfg.readahead_max_bytes and the chunks of the window past the read are
 * queued without waiting. Any other read resets the window.
 *
 * Pins: read_begin pins the chunks of its range (also while it waits), and
 * read_end, on the same thread, unpins them; eviction never touches a
 * pinned chunk. read_end finds its read by thread id because its
 * signature carries no range (fs calls both on one FUSE thread).
 *
 * Non-goals: sharing one cache dir between two running processes;
 * caching the compressed bytes of shards that are decoded (the decoder
 * reads through the backend and keeps the decoded copy instead).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cachetier_i.h"

#define MAP_MAGIC     "SHCHMAP\1"
#define MAP_VERSION   1u
#define MAP_HDR	      40u
#define MAP_MAX_BYTES (64u << 20)
/* Map writes are batched: each costs a file write, two fsyncs and a
 * rename. Chunks filled but not yet recorded are only refetched after a
 * crash, so the batch bounds the refetch, not correctness. */
#define MAP_BATCH_CHUNKS 16u
#define MAP_BATCH_NS	 1000000000LL

static uint64_t chunk_off(const struct cachetier *ct, uint32_t c)
{
	return (uint64_t)c * ct->cfg.chunk_bytes;
}

static uint64_t chunk_len(const struct cachetier *ct, const struct ct_file *f, uint32_t c)
{
	uint64_t off = chunk_off(ct, c);

	return f->size - off < ct->cfg.chunk_bytes ? f->size - off : ct->cfg.chunk_bytes;
}

/* ---- map format ---- */

int cachetier__map_parse(const unsigned char *buf, size_t len, struct ct_map *m)
{
	uint64_t need;

	if (len < MAP_HDR + 8 || memcmp(buf, MAP_MAGIC, 8) != 0)
		return -EBADMSG;
	if (cachetier__le32_get(buf + 8) != MAP_VERSION)
		return -EPROTO;
	if (cachetier__le64_get(buf + len - 8) != cachetier__fnv64(buf, len - 8))
		return -EBADMSG;
	m->chunk_bytes = cachetier__le32_get(buf + 12);
	m->size = cachetier__le64_get(buf + 16);
	m->nchunks = cachetier__le32_get(buf + 24);
	m->keylen = cachetier__le32_get(buf + 28);
	m->etaglen = cachetier__le32_get(buf + 32);
	need = (uint64_t)MAP_HDR + m->keylen + m->etaglen + ((uint64_t)m->nchunks + 7) / 8 + 8;
	if (m->chunk_bytes == 0 || need != len ||
	    m->nchunks != (m->size + m->chunk_bytes - 1) / m->chunk_bytes)
		return -EBADMSG;
	m->key = (const char *)buf + MAP_HDR;
	m->etag = m->key + m->keylen;
	m->bitmap = (const unsigned char *)m->etag + m->etaglen;
	return 0;
}

uint64_t cachetier__map_bytes(const struct ct_map *m)
{
	uint64_t sum = 0;

	for (uint32_t c = 0; c < m->nchunks; c++) {
		uint64_t off = (uint64_t)c * m->chunk_bytes;

		if (m->bitmap[c / 8] & (1u << (c % 8)))
			sum += m->size - off < m->chunk_bytes ? m->size - off : m->chunk_bytes;
	}
	return sum;
}

int cachetier__map_read(int dirfd, const char *name, unsigned char **buf, size_t *len)
{
	return cachetier__read_file(dirfd, name, MAP_HDR + 8, MAP_MAX_BYTES, buf, len);
}

/* Encode f's valid chunks. Called with ct->lock held (reads f->cst). */
static unsigned char *map_encode(struct cachetier *ct, struct ct_file *f, size_t *len)
{
	size_t klen = strlen(f->key), elen = strlen(f->etag), blen = ((size_t)f->nchunks + 7) / 8;
	size_t n = MAP_HDR + klen + elen + blen + 8;
	unsigned char *buf = calloc(1, n), *bm;

	if (!buf)
		return NULL;
	memcpy(buf, MAP_MAGIC, 8);
	cachetier__le32_put(buf + 8, MAP_VERSION);
	cachetier__le32_put(buf + 12, ct->cfg.chunk_bytes);
	cachetier__le64_put(buf + 16, f->size);
	cachetier__le32_put(buf + 24, f->nchunks);
	cachetier__le32_put(buf + 28, (uint32_t)klen);
	cachetier__le32_put(buf + 32, (uint32_t)elen);
	memcpy(buf + MAP_HDR, f->key, klen);
	memcpy(buf + MAP_HDR + klen, f->etag, elen);
	bm = buf + MAP_HDR + klen + elen;
	for (uint32_t c = 0; c < f->nchunks; c++) {
		if (f->cst[c] == CH_VALID)
			bm[c / 8] |= (unsigned char)(1u << (c % 8));
	}
	cachetier__le64_put(buf + n - 8, cachetier__fnv64(buf, n - 8));
	*len = n;
	return buf;
}

/* Persist f's map if chunks were filled since the last write. Takes
 * f->maplock then ct->lock; call with neither held. */
void cachetier__file_flush(struct cachetier *ct, struct ct_file *f)
{
	char name[24];
	unsigned char *buf;
	unsigned dirty;
	size_t len = 0;
	int err;

	pthread_mutex_lock(&f->maplock);
	pthread_mutex_lock(&ct->lock);
	if (!f->live || f->dirty == 0) {
		pthread_mutex_unlock(&ct->lock);
		pthread_mutex_unlock(&f->maplock);
		return;
	}
	buf = map_encode(ct, f, &len);
	dirty = f->dirty;
	f->dirty = 0;
	f->map_ns = cachetier__now_ns();
	pthread_mutex_unlock(&ct->lock);
	snprintf(name, sizeof(name), "%s.map", f->hash);
	/* every chunk buf claims was written before this: make them durable
	 * before any map says so (eviction waits on maplock meanwhile) */
	err = !buf ? -ENOMEM : fdatasync(f->datafd) < 0 ? -errno : 0;
	if (err == 0)
		err = cachetier__write_atomic(ct, ct->datafd, name, buf, len);
	if (err < 0) { /* try again at the next batch */
		pthread_mutex_lock(&ct->lock);
		f->dirty += dirty;
		pthread_mutex_unlock(&ct->lock);
	}
	pthread_mutex_unlock(&f->maplock);
	free(buf);
}

/* ---- opening an object's chunk file ---- */

static void file_free(struct ct_file *f)
{
	if (!f)
		return;
	if (f->live && f->datafd >= 0)
		close(f->datafd);
	while (f->reads) {
		struct ct_read *r = f->reads;

		f->reads = r->next;
		free(r);
	}
	free(f->key);
	free(f->cst);
	free(f->pins);
	free(f->cerr);
	pthread_mutex_destroy(&f->maplock);
	free(f);
}

static struct ct_file *file_find(struct cachetier *ct, const char *hash)
{
	for (struct ct_file *f = ct->files; f; f = f->next) {
		if (strcmp(f->hash, hash) == 0)
			return f;
	}
	return NULL;
}

/* Load the identity, arrays and trusted chunks of f (f->opening is set,
 * so nobody else touches f's live fields). Returns the valid bytes, or a
 * negative errno. An unusable map is not an error: the object starts
 * empty and the stale map and bytes are dropped. */
static int64_t file_load(struct cachetier *ct, struct ct_file *f,
			 const struct backend_objinfo *info)
{
	uint32_t cb = ct->cfg.chunk_bytes;
	uint64_t nchunks = (info->size + cb - 1) / cb, valid = 0;
	unsigned char *buf = NULL;
	char mapname[24];
	struct ct_map m;
	struct stat st;
	size_t len = 0;
	int fd, err;

	if (nchunks > UINT32_MAX)
		return -EFBIG;
	f->key = strdup(info->key);
	f->cst = calloc(nchunks ? nchunks : 1, 1);
	f->pins = calloc(nchunks ? nchunks : 1, sizeof(*f->pins));
	f->cerr = calloc(nchunks ? nchunks : 1, sizeof(*f->cerr));
	if (!f->key || !f->cst || !f->pins || !f->cerr)
		return -ENOMEM;
	snprintf(f->etag, sizeof(f->etag), "%s", info->etag);
	f->size = info->size;
	f->nchunks = (uint32_t)nchunks;
	fd = openat(ct->datafd, f->hash, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	f->datafd = fd;
	if (fstat(fd, &st) < 0)
		return -errno;
	snprintf(mapname, sizeof(mapname), "%s.map", f->hash);
	err = cachetier__map_read(ct->datafd, mapname, &buf, &len);
	if (err == 0)
		err = cachetier__map_parse(buf, len, &m);
	if (err == 0 && (m.chunk_bytes != cb || m.size != f->size || m.keylen != strlen(f->key) ||
			 memcmp(m.key, f->key, m.keylen) != 0 || m.etaglen != strlen(f->etag) ||
			 memcmp(m.etag, f->etag, m.etaglen) != 0))
		err = -ESTALE;
	if (err == 0) {
		for (uint32_t c = 0; c < f->nchunks; c++) {
			if (!(m.bitmap[c / 8] & (1u << (c % 8))))
				continue;
			/* a data file shorter than a claimed chunk lost it */
			if ((uint64_t)st.st_size < chunk_off(ct, c) + chunk_len(ct, f, c)) {
				err = -EBADMSG;
				break;
			}
			f->cst[c] = CH_VALID;
			valid += chunk_len(ct, f, c);
		}
	}
	free(buf);
	if (err < 0) {
		/* no trusted map: forget every byte of the data file */
		memset(f->cst, CH_EMPTY, nchunks ? nchunks : 1);
		valid = 0;
		if (err != -ENOENT)
			unlinkat(ct->datafd, mapname, 0);
		if (st.st_size > 0 && ftruncate(fd, 0) < 0)
			return -errno;
	}
	return (int64_t)valid;
}

int cachetier__file_open(struct cachetier *ct, const struct backend_objinfo *info,
			 struct ct_file **out)
{
	char ident[4096 + 128], hash[17];
	struct ct_file *f;
	int64_t valid;
	int n;

	*out = NULL;
	n = snprintf(ident, sizeof(ident), "%s%c%s%c%llu", info->key, 0, info->etag, 0,
		     (unsigned long long)info->size);
	if (n < 0 || (size_t)n >= sizeof(ident))
		return -ENAMETOOLONG;
	cachetier__hash_hex(ident, (size_t)n, hash);

	pthread_mutex_lock(&ct->lock);
	for (;;) {
		f = file_find(ct, hash);
		if (!f || (!f->opening && !f->evicting))
			break;
		pthread_cond_wait(&ct->chunk_cond, &ct->lock);
	}
	if (f && f->live) {
		int same = strcmp(f->key, info->key) == 0 && strcmp(f->etag, info->etag) == 0 &&
			   f->size == info->size;

		f->atime_ns = cachetier__now_ns();
		pthread_mutex_unlock(&ct->lock);
		if (!same) /* a 64-bit hash collision between two live objects */
			return -EIO;
		*out = f;
		return 0;
	}
	if (!f) {
		f = calloc(1, sizeof(*f));
		if (!f) {
			pthread_mutex_unlock(&ct->lock);
			return -ENOMEM;
		}
		memcpy(f->hash, hash, sizeof(hash));
		f->datafd = -1;
		pthread_mutex_init(&f->maplock, NULL);
		f->next = ct->files;
		ct->files = f;
	}
	f->opening = 1;
	pthread_mutex_unlock(&ct->lock);

	valid = file_load(ct, f, info);

	pthread_mutex_lock(&ct->lock);
	ct->used -= f->bytes;
	f->opening = 0;
	if (valid < 0) {
		/* stays a not-live entry without bytes; the fd is not kept */
		if (f->datafd >= 0)
			close(f->datafd);
		f->datafd = -1;
		free(f->key);
		free(f->cst);
		free(f->pins);
		free(f->cerr);
		f->key = NULL;
		f->cst = NULL;
		f->pins = NULL;
		f->cerr = NULL;
		f->bytes = 0;
	} else {
		f->bytes = (uint64_t)valid;
		ct->used += f->bytes;
		f->live = 1;
		f->atime_ns = f->map_ns = cachetier__now_ns();
		*out = f;
	}
	pthread_cond_broadcast(&ct->chunk_cond);
	pthread_mutex_unlock(&ct->lock);
	return valid < 0 ? (int)valid : 0;
}

/* ---- queues (all with ct->lock held) ---- */

static int queue_push(struct cachetier *ct, struct ct_file *f, uint32_t c, int ra)
{
	struct ct_job *j = malloc(sizeof(*j));

	if (!j)
		return -ENOMEM;
	j->f = f;
	j->c = c;
	j->ra = ra;
	j->next = NULL;
	if (ra) {
		*ct->rq_tail = j;
		ct->rq_tail = &j->next;
	} else {
		*ct->dq_tail = j;
		ct->dq_tail = &j->next;
	}
	f->cst[c] = CH_QUEUED;
	pthread_cond_signal(&ct->work_cond);
	return 0;
}

/* Unlink the job *pp from a queue whose tail pointer is *tail. */
static struct ct_job *queue_pop(struct ct_job ***tail, struct ct_job **pp)
{
	struct ct_job *j = *pp;

	*pp = j->next;
	if (*tail == &j->next)
		*tail = pp;
	return j;
}

/* A reader needs a chunk that readahead queued: move it to the front
 * queue. Chunks queued on demand already are there. */
static void queue_promote(struct cachetier *ct, struct ct_file *f, uint32_t c)
{
	for (struct ct_job **pp = &ct->rq; *pp; pp = &(*pp)->next) {
		if ((*pp)->f == f && (*pp)->c == c) {
			struct ct_job *j = queue_pop(&ct->rq_tail, pp);

			j->next = NULL;
			*ct->dq_tail = j;
			ct->dq_tail = &j->next;
			return;
		}
	}
}

/* The next fill: demand, then readahead, then prefetch cursors. */
static int queue_next(struct cachetier *ct, struct ct_file **f, uint32_t *c, int *ra)
{
	struct ct_job *j = NULL;

	if (ct->dq)
		j = queue_pop(&ct->dq_tail, &ct->dq);
	else if (ct->rq)
		j = queue_pop(&ct->rq_tail, &ct->rq);
	if (j) {
		*f = j->f;
		*c = j->c;
		*ra = j->ra;
		free(j);
		return 1;
	}
	while (ct->pf) {
		struct ct_file *p = ct->pf;

		while (p->pf_next < p->nchunks && p->cst[p->pf_next] != CH_EMPTY)
			p->pf_next++;
		if (p->pf_next < p->nchunks) {
			*f = p;
			*c = p->pf_next++;
			*ra = 1;
			return 1;
		}
		ct->pf = p->pf_link;
		if (!ct->pf)
			ct->pf_tail = &ct->pf;
		p->pf_listed = 0;
		p->pf_link = NULL;
	}
	return 0;
}

/* ---- fill workers ---- */

/* Fetch chunk c into buf and write it to f's data file (durable only at
 * the next map flush). No locks. */
static int fill_chunk(struct cachetier *ct, struct ct_file *f, uint32_t c, char *buf, size_t len)
{
	uint64_t off = chunk_off(ct, c);
	size_t done = 0;

	while (done < len) {
		/* only from the listed version: chunks of two versions never mix */
		ssize_t n = backend_pread_version(ct->be, f->key, f->etag, buf + done, len - done,
						  off + done);

		if (n < 0)
			return (int)n;
		if (n == 0)
			return -EIO; /* the object is shorter than its size said */
		done += (size_t)n;
	}
	for (done = 0; done < len;) {
		ssize_t n = pwrite(f->datafd, buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		done += (size_t)n;
	}
	return 0;
}

static int flush_due(struct cachetier *ct, struct ct_file *f, int64_t now)
{
	return f->live && f->dirty &&
	       (f->dirty >= MAP_BATCH_CHUNKS || now - f->map_ns >= MAP_BATCH_NS);
}

/* Write the maps whose batch timer ran out. ct->lock held; dropped
 * around each write. */
static void flush_old_maps(struct cachetier *ct)
{
	int64_t now = cachetier__now_ns();
	struct ct_file *f;

again:
	for (f = ct->files; f; f = f->next) {
		if (flush_due(ct, f, now)) {
			/* live entries are never freed before close: f stays valid */
			pthread_mutex_unlock(&ct->lock);
			cachetier__file_flush(ct, f);
			pthread_mutex_lock(&ct->lock);
			goto again;
		}
	}
}

static void *worker_main(void *arg)
{
	struct cachetier *ct = arg;
	char *buf = malloc(ct->cfg.chunk_bytes);

	pthread_mutex_lock(&ct->lock);
	while (!ct->stopping) {
		struct ct_file *f;
		uint32_t c;
		uint64_t len;
		int ra, err;

		if (!queue_next(ct, &f, &c, &ra)) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&ct->work_cond, &ct->lock, &ts);
			continue;
		}
		len = chunk_len(ct, f, c);
		f->cst[c] = CH_FILLING;
		ct->reserved += len;
		ct->fills_inflight++;
		if (ra)
			ct->readahead_fills++;
		cachetier__make_room(ct, len);
		pthread_mutex_unlock(&ct->lock);

		err = buf ? fill_chunk(ct, f, c, buf, (size_t)len) : -ENOMEM;

		pthread_mutex_lock(&ct->lock);
		ct->reserved -= len;
		ct->fills_inflight--;
		if (err == 0) {
			f->cst[c] = CH_VALID;
			f->bytes += len;
			f->dirty++;
			ct->used += len;
			ct->fills++;
			ct->bytes_fetched += len;
		} else {
			f->cst[c] = CH_EMPTY;
			f->cerr[c] = err;
			ct->fill_errors++;
		}
		pthread_cond_broadcast(&ct->chunk_cond);
		if (flush_due(ct, f, cachetier__now_ns()))
			pthread_cond_signal(&ct->flush_cond);
	}
	pthread_mutex_unlock(&ct->lock);
	free(buf);
	return NULL;
}

/* The flusher: writes the maps whose batch is due (a worker signals a full
 * batch; the timer catches the rest), so the fdatasync before each map
 * never holds up a fill. */
static void *flusher_main(void *arg)
{
	struct cachetier *ct = arg;

	pthread_mutex_lock(&ct->lock);
	while (!ct->stopping) {
		struct timespec ts;

		flush_old_maps(ct);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		if (!ct->stopping)
			pthread_cond_timedwait(&ct->flush_cond, &ct->lock, &ts);
	}
	pthread_mutex_unlock(&ct->lock);
	return NULL;
}

int cachetier__chunk_start(struct cachetier *ct)
{
	ct->dq_tail = &ct->dq;
	ct->rq_tail = &ct->rq;
	ct->pf_tail = &ct->pf;
	ct->workers = calloc(ct->cfg.fill_threads, sizeof(*ct->workers));
	if (!ct->workers)
		return -ENOMEM;
	if (pthread_create(&ct->flusher, NULL, flusher_main, ct) != 0)
		return -EAGAIN;
	ct->have_flusher = 1;
	for (unsigned i = 0; i < ct->cfg.fill_threads; i++) {
		int err = pthread_create(&ct->workers[i], NULL, worker_main, ct);

		if (err)
			return -err;
		ct->nworkers++;
	}
	return 0;
}

void cachetier__chunk_stop(struct cachetier *ct)
{
	struct ct_job *j;

	pthread_mutex_lock(&ct->lock);
	ct->stopping = 1;
	pthread_cond_broadcast(&ct->work_cond);
	pthread_cond_broadcast(&ct->chunk_cond);
	pthread_cond_broadcast(&ct->flush_cond);
	pthread_mutex_unlock(&ct->lock);
	if (ct->have_flusher)
		pthread_join(ct->flusher, NULL);
	ct->have_flusher = 0;
	for (unsigned i = 0; i < ct->nworkers; i++)
		pthread_join(ct->workers[i], NULL);
	free(ct->workers);
	ct->workers = NULL;
	ct->nworkers = 0;

	/* queued fills never run: their chunks stay empty */
	pthread_mutex_lock(&ct->lock);
	while ((j = ct->dq) || (j = ct->rq)) {
		if (j == ct->dq)
			ct->dq = j->next;
		else
			ct->rq = j->next;
		j->f->cst[j->c] = CH_EMPTY;
		j->f->cerr[j->c] = -ECANCELED;
		free(j);
	}
	ct->dq_tail = &ct->dq;
	ct->rq_tail = &ct->rq;
	ct->pf = NULL;
	ct->pf_tail = &ct->pf;
	pthread_cond_broadcast(&ct->chunk_cond);
	pthread_mutex_unlock(&ct->lock);

	/* no other thread runs now: record every filled chunk, free */
	for (struct ct_file *f = ct->files; f; f = f->next)
		cachetier__file_flush(ct, f);
	while (ct->files) {
		struct ct_file *f = ct->files;

		ct->files = f->next;
		file_free(f);
	}
}

/* ---- reads ---- */

/* Queue readahead after a read of [off, end) of f. ct->lock held. */
static void ra_update(struct cachetier *ct, struct ct_file *f, uint64_t off, uint64_t end)
{
	uint64_t cb = ct->cfg.chunk_bytes, max = ct->cfg.readahead_max_bytes;
	uint64_t last;

	/* forward gaps up to a chunk (index building skips small members);
	 * back up to a quarter chunk (kernel readahead requests overtaking
	 * each other) */
	if (off + cb / 4 >= f->ra_end && off <= f->ra_end + cb) {
		uint64_t w = f->ra_window ? f->ra_window * 2 : cb;

		f->ra_window = w < max ? w : max;
	} else {
		f->ra_window = 0;
	}
	f->ra_end = end;
	if (!f->ra_window || end >= f->size)
		return;
	last = (end + f->ra_window - 1) / cb;
	if (last >= f->nchunks)
		last = f->nchunks - 1;
	for (uint64_t c = end / cb; c <= last; c++) {
		if (f->cst[c] == CH_EMPTY && queue_push(ct, f, (uint32_t)c, 1) < 0)
			break; /* out of memory: readahead is optional */
	}
}

/* Take read r off f's list and drop its pins. ct->lock held. */
static void read_unpin(struct ct_file *f, struct ct_read *r)
{
	for (struct ct_read **pp = &f->reads; *pp; pp = &(*pp)->next) {
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	}
	for (uint32_t c = r->c0; c < r->c1; c++)
		f->pins[c]--;
}

int cachetier__file_read_begin(struct cachetier *ct, struct ct_file *f, uint64_t off, uint64_t len)
{
	uint64_t cb = ct->cfg.chunk_bytes;
	uint32_t c0 = (uint32_t)(off / cb), c1 = len ? (uint32_t)((off + len - 1) / cb + 1) : c0;
	struct ct_read *r = malloc(sizeof(*r));
	uint8_t reqbuf[64], *req = reqbuf; /* per chunk: this read saw it queued or filling */
	int err = 0, waited = 0;

	if (c1 - c0 > sizeof(reqbuf))
		req = calloc(c1 - c0, 1);
	else
		memset(reqbuf, 0, sizeof(reqbuf));
	if (!r || !req) {
		free(r);
		if (req != reqbuf)
			free(req);
		return -ENOMEM;
	}
	r->tid = pthread_self();
	r->c0 = c0;
	r->c1 = c1;

	pthread_mutex_lock(&ct->lock);
	for (uint32_t c = c0; c < c1; c++)
		f->pins[c]++;
	r->next = f->reads;
	f->reads = r;
	f->atime_ns = cachetier__now_ns();
	ra_update(ct, f, off, off + len);
	for (;;) {
		int ready = 1;

		for (uint32_t c = c0; c < c1 && err == 0; c++) {
			switch (f->cst[c]) {
			case CH_VALID:
				break;
			case CH_EMPTY:
				if (req[c - c0]) { /* the fill this read waited for failed */
					err = f->cerr[c] < 0 ? f->cerr[c] : -EIO;
					break;
				}
				err = queue_push(ct, f, c, 0);
				req[c - c0] = 1;
				ready = 0;
				break;
			case CH_QUEUED:
				if (!req[c - c0])
					queue_promote(ct, f, c);
				req[c - c0] = 1;
				ready = 0;
				break;
			case CH_FILLING:
				req[c - c0] = 1;
				ready = 0;
				break;
			default: /* CH_EVICTING: empty soon, then queued */
				ready = 0;
				break;
			}
		}
		if (err == 0 && !ready && ct->stopping)
			err = -ECANCELED;
		if (err < 0 || ready)
			break;
		waited = 1;
		pthread_cond_wait(&ct->chunk_cond, &ct->lock);
	}
	if (err < 0) {
		read_unpin(f, r);
		free(r);
	} else if (waited) {
		ct->misses++;
	} else {
		ct->hits++;
	}
	pthread_mutex_unlock(&ct->lock);
	if (req != reqbuf)
		free(req);
	return err;
}

void cachetier__file_read_end(struct cachetier *ct, struct ct_file *f)
{
	pthread_t self = pthread_self();
	struct ct_read *r;

	pthread_mutex_lock(&ct->lock);
	for (r = f->reads; r; r = r->next) {
		if (pthread_equal(r->tid, self))
			break;
	}
	if (r)
		read_unpin(f, r);
	pthread_mutex_unlock(&ct->lock);
	free(r);
}

int cachetier__file_prefetch(struct cachetier *ct, struct ct_file *f)
{
	pthread_mutex_lock(&ct->lock);
	if (!f->pf_listed && !ct->stopping) {
		f->pf_listed = 1;
		f->pf_next = 0;
		f->pf_link = NULL;
		*ct->pf_tail = f;
		ct->pf_tail = &f->pf_link;
		pthread_cond_broadcast(&ct->work_cond);
	}
	pthread_mutex_unlock(&ct->lock);
	return 0;
}
