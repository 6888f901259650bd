/*
 * cachetier_chunk.c — the chunk store of remote objects: a remote object
 * is fetched once, in chunks of cfg.chunk_bytes (one range request each,
 * streamed into the file as the bytes arrive: backend_read_version_cb),
 * ahead of a sequential reader, into a sparse local file, and served from
 * it across reads and remounts.
 *
 * On disk, per object (name = hash of key, ETag and size, so a changed
 * object never meets old bytes):
 *   data/<hash>      sparse data file; chunk i at offset i * chunk_bytes
 *   data/<hash>.map  which units are valid (format below)
 *
 * Units: every per-chunk thing below — state (enum ct_chunk), state file
 * byte, map bit, lock, pin, eviction — is kept per unit (ct->unit: 64 KiB,
 * at most 128 a chunk; an eighth of a chunk under 512 KiB; a whole chunk
 * in objects of more than UNITS_MAX units), and f->cb is the unit: "chunk c" in the comments of
 * this file means unit c where it speaks of state. A fill is one request for a run of empty units
 * within one chunk (a ct_job, a worker's slot): readahead, prefetch and a miss of a sequential
 * reader (or one whose chunk fits the cache without evicting) fill every empty unit of the chunk; a
 * random miss that needs an eviction fills only the units its read covers, so a shuffled reader of
 * data bigger than the cache fetches about what it reads (mountpoint-s3 starts random reads at 1
 * MiB + 128 KiB for the same reason). The data file is named by the hash with the unit size, so a
 * file of another unit size (an older version's chunk-sized units) is
 * never opened for reads; it is evicted like any other object.
 * The map is the only thing trusted after a restart. Protocol:
 *   fill:  pwrite the chunk's pieces as they arrive (a failed fill punches
 *          them) → mark valid in memory (readers are served from
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
 *   0  magic "SHCHMAP\1"   8  u32 version    12 u32 unit bytes
 *   16 u64 object size     24 u32 units      28 u32 key length
 *   32 u32 ETag length     36 u32 0          40 key, ETag, bitmap
 *   (bit i of byte i/8 = unit i valid), u32 CRC32C per unit (of its
 *   bytes; 0 for units not valid), then u64 FNV-1a of all before.
 *
 * Fills: cfg.fill_threads workers take jobs from three queues in order:
 * demand (a reader waits), readahead, prefetch (a cursor per object, so a
 * prefetch of a huge object queues nothing up front; an object a reader
 * reads moves to the front; prefetch fills leave two workers to demand and
 * readahead, take only connections demand fills leave idle, pause while
 * readahead runs, and are withdrawn part-way when readers need their
 * connections (pf_yield, pf_max); a PF_FIT prefetch skips, never evicts
 * for, a chunk that does not fit). A chunk has one
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
 * queued without waiting. A read at offset 0 starts at the full window;
 * elsewhere the window opens only once RA_MIN_RUN bytes were read in
 * sequence (the requests of one shuffled sample are in sequence too).
 * Any other read resets the window.
 *
 * Pins: read_begin pins the chunks of its range (also while it waits), and
 * read_end, on the same thread, unpins them; eviction never touches a
 * pinned chunk. read_end finds its read by thread id because its
 * signature carries no range (fs calls both on one FUSE thread).
 *
 * Sharing: several processes may use one cache directory at once. Each
 * chunk's truth while they run is the state file data/<hash>.st
 * (cachetier_share.c), not this process's cst[]: a fill holds the chunk's
 * write lock (F_OFD_SETLK on stfd) from before its fetch until the state
 * says valid; a reader holds the chunk's read lock from read_begin to
 * read_end and trusts a chunk only after taking it and seeing it valid in
 * the state file; an eviction takes the write lock on auxfd (so it
 * excludes this process's own readers and fills too), clears the state,
 * then punches. A chunk another process is filling is waited for (the
 * lock is polled), never fetched twice. The protocol is in README.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cachetier_i.h"

#define MAP_MAGIC     "SHCHMAP\1"
#define MAP_VERSION   2u /* 2: a CRC32C per unit after the bitmap */
#define MAP_HDR	      40u
#define MAP_MAX_BYTES (64u << 20)
/* Map writes are batched: each costs a file write, two fsyncs and a
 * rename. Chunks filled but not yet recorded are only refetched after a
 * crash, so the batch bounds the refetch, not correctness. */
#define MAP_BATCH_CHUNKS 16u /* chunks' worth of units */
#define MAP_BATCH_NS	 1000000000LL
/* Most units an object is kept in (cachetier__file_open). */
#define UNITS_MAX (1u << 20)

static uint64_t chunk_off(const struct ct_file *f, uint32_t c)
{
	return (uint64_t)c * f->cb;
}

#define chunk_len(f, c) cachetier__chunk_len(f, c)

/* Bytes of units [c, c + n) of f. */
static uint64_t run_len(const struct ct_file *f, uint32_t c, uint32_t n)
{
	return (uint64_t)(n - 1) * f->cb + chunk_len(f, c + n - 1);
}

static void chunk_unlock(struct ct_file *f, uint32_t c)
{
	cachetier__ofd_lock(f->stfd, F_UNLCK, LK_CHUNK(c), 0);
}

/* ---- map format ---- */

int cachetier__map_parse(const unsigned char *buf, size_t len, struct ct_map *m)
{
	uint64_t need;

	if (len < MAP_HDR + 8 || memcmp(buf, MAP_MAGIC, 8) != 0)
		return -EBADMSG;
	if (disk_le32_get(buf + 8) != MAP_VERSION)
		return -EPROTO;
	if (disk_le64_get(buf + len - 8) != disk_fnv64(buf, len - 8))
		return -EBADMSG;
	m->chunk_bytes = disk_le32_get(buf + 12);
	m->size = disk_le64_get(buf + 16);
	m->nchunks = disk_le32_get(buf + 24);
	m->keylen = disk_le32_get(buf + 28);
	m->etaglen = disk_le32_get(buf + 32);
	need = (uint64_t)MAP_HDR + m->keylen + m->etaglen + ((uint64_t)m->nchunks + 7) / 8 +
	       (uint64_t)m->nchunks * 4 + 8;
	if (m->chunk_bytes == 0 || need != len ||
	    m->nchunks != (m->size + m->chunk_bytes - 1) / m->chunk_bytes)
		return -EBADMSG;
	m->key = (const char *)buf + MAP_HDR;
	m->etag = m->key + m->keylen;
	m->bitmap = (const unsigned char *)m->etag + m->etaglen;
	m->crcs = m->bitmap + ((size_t)m->nchunks + 7) / 8;
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

/* Encode the chunks f's state file says are valid into *out (NULL when
 * none is). Called with LK_MAP held. */
static int map_encode(struct ct_file *f, unsigned char **out, size_t *len)
{
	size_t klen = strlen(f->key), elen = strlen(f->etag), blen = ((size_t)f->nchunks + 7) / 8;
	size_t n = MAP_HDR + klen + elen + blen + (size_t)f->nchunks * 4 + 8;
	unsigned char *buf = calloc(1, n), *bm, *crcs;
	unsigned valid = 0;

	*out = NULL;
	*len = 0;
	if (!buf)
		return -ENOMEM;
	memcpy(buf, MAP_MAGIC, 8);
	disk_le32_put(buf + 8, MAP_VERSION);
	disk_le32_put(buf + 12, f->cb);
	disk_le64_put(buf + 16, f->size);
	disk_le32_put(buf + 24, f->nchunks);
	disk_le32_put(buf + 28, (uint32_t)klen);
	disk_le32_put(buf + 32, (uint32_t)elen);
	memcpy(buf + MAP_HDR, f->key, klen);
	memcpy(buf + MAP_HDR + klen, f->etag, elen);
	bm = buf + MAP_HDR + klen + elen;
	crcs = bm + blen;
	for (uint32_t c = 0; c < f->nchunks; c++) {
		if (cachetier__st_get(f, c)) {
			/* the CRC was stored before the state byte said valid */
			bm[c / 8] |= (unsigned char)(1u << (c % 8));
			disk_le32_put(crcs + (size_t)c * 4, cachetier__st_crc(f, c));
			valid++;
		}
	}
	disk_le64_put(buf + n - 8, disk_fnv64(buf, n - 8));
	if (!valid) {
		free(buf);
		return 0;
	}
	*out = buf;
	*len = n;
	return 0;
}

/* Persist f's map if chunks were filled since the last write: what the
 * state file says is valid now (also chunks other processes filled: their
 * bytes were written before they were marked, so the fdatasync below
 * covers them). Takes f->maplock, ct->lock, then LK_MAP; call with none
 * held. */
void cachetier__file_flush(struct cachetier *ct, struct ct_file *f)
{
	char name[24];
	unsigned char *buf = NULL;
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
	dirty = f->dirty;
	f->dirty = 0;
	f->map_ns = cachetier__now_ns();
	pthread_mutex_unlock(&ct->lock);
	snprintf(name, sizeof(name), "%s.map", f->hash);
	/* the snapshot is taken under LK_MAP: an eviction clears the state
	 * before it takes LK_MAP to unlink the map, so no map written here can
	 * claim a chunk that is punched afterwards */
	/* bounded: a map write that cannot get LK_MAP is retried at the
	 * next batch instead of holding maplock (an eviction waits on it) */
	err = cachetier__ofd_lock(f->stfd, F_WRLCK, LK_MAP, LK_MAP_WAIT_MS);
	if (err == 0) {
		err = map_encode(f, &buf, &len);
		/* every chunk buf claims was written before this: make them
		 * durable before any map says so */
		if (err == 0 && !buf) /* nothing left to record */
			err = unlinkat(f->dirfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
		else if (err == 0)
			err = fdatasync(f->datafd) < 0 ? -errno : 0;
		if (err == 0 && buf)
			err = disk_write_atomic(f->dirfd, name, buf, len, 0600);
		cachetier__ofd_lock(f->stfd, F_UNLCK, LK_MAP, 0);
	}
	if (err < 0) { /* try again at the next batch */
		pthread_mutex_lock(&ct->lock);
		f->dirty += dirty;
		pthread_mutex_unlock(&ct->lock);
	}
	pthread_mutex_unlock(&f->maplock);
	free(buf);
}

/* ---- opening an object's chunk file ---- */

/* Undo a (failed) load: f stays a not-live entry without bytes. */
static void file_unload(struct ct_file *f)
{
	if (f->datafd >= 0)
		close(f->datafd);
	f->datafd = -1;
	cachetier__st_close(f);
	free(f->key);
	free(f->cst);
	free(f->pins);
	free(f->cerr);
	free(f->held);
	free(f->seen);
	free(f->catime);
	free(f->unread);
	f->catime = NULL;
	f->unread = NULL;
	f->key = NULL;
	f->cst = NULL;
	f->pins = NULL;
	f->cerr = NULL;
	f->held = NULL;
	f->seen = NULL;
	f->bytes = 0;
}

static void file_free(struct ct_file *f)
{
	if (!f)
		return;
	while (f->reads) {
		struct ct_read *r = f->reads;

		f->reads = r->next;
		free(r);
	}
	file_unload(f);
	pthread_mutex_destroy(&f->maplock);
	free(f);
}

static struct ct_file *file_find(struct cachetier *ct, int dirfd, const char *hash)
{
	for (struct ct_file *f = ct->files; f; f = f->next) {
		if (f->dirfd == dirfd && strcmp(f->hash, hash) == 0)
			return f;
	}
	return NULL;
}

int cachetier__file_hash(const char *key, const char *etag, uint64_t size, uint32_t cb,
			 char hash[17])
{
	char ident[4096 + 128];
	int n = snprintf(ident, sizeof(ident), "%s%c%s%c%llu%c%u", key, 0, etag, 0,
			 (unsigned long long)size, 0, cb);

	if (n < 0 || (size_t)n >= sizeof(ident))
		return -ENAMETOOLONG;
	cachetier__hash_hex(ident, (size_t)n, hash);
	return 0;
}

int cachetier__map_load(struct cachetier *ct, int dirfd, const char *hash, unsigned char **buf,
			struct ct_map *m, struct stat *data_st, uint32_t *lost)
{
	char mapname[24], h[17], *key = NULL, *etag = NULL;
	size_t len = 0;
	int err;

	snprintf(mapname, sizeof(mapname), "%s.map", hash);
	err = cachetier__map_read(dirfd, mapname, buf, &len);
	if (err == 0)
		err = cachetier__map_parse(*buf, len, m);
	if (err == -EPROTO)
		cachetier__note_version(ct, CT_FMT_MAP, mapname);
	if (err == 0) {
		key = strndup(m->key, m->keylen);
		etag = strndup(m->etag, m->etaglen);
		err = !key || !etag ? -ENOMEM
				    : cachetier__file_hash(key, etag, m->size, m->chunk_bytes, h);
		if (err == 0 && strcmp(h, hash) != 0)
			err = -EBADMSG; /* not this file's map (or an old naming) */
	}
	if (err == 0 && fstatat(dirfd, hash, data_st, 0) < 0)
		err = -EBADMSG;
	if (lost)
		*lost = 0;
	for (uint32_t c = 0; err == 0 && c < m->nchunks; c++) {
		uint64_t off = (uint64_t)c * m->chunk_bytes;
		uint64_t clen = m->size - off < m->chunk_bytes ? m->size - off : m->chunk_bytes;
		unsigned char *bm = *buf + (m->bitmap - *buf);

		/* a data file shorter than a claimed unit lost it (cut by
		 * hand, a disk error, a repair): fetched again */
		if ((bm[c / 8] & (1u << (c % 8))) && (uint64_t)data_st->st_size < off + clen) {
			bm[c / 8] &= (unsigned char)~(1u << (c % 8));
			if (lost)
				(*lost)++;
		}
	}
	free(key);
	free(etag);
	if (err < 0) {
		free(*buf);
		*buf = NULL;
	}
	return err;
}

/* Alone with f (the write presence lock on its state file): make the
 * state file say what the durable map says, punch or drop bytes no map
 * claims, and correct the directory's usage by what changed. */
static int file_init_alone(struct cachetier *ct, struct ct_file *f)
{
	uint64_t epoch = cachetier__usage_epoch(ct), old = cachetier__st_old_bytes(f, epoch);
	unsigned char *buf = NULL;
	char mapname[24];
	struct ct_map m;
	struct stat st;
	uint64_t valid = 0;
	uint32_t lost = 0;
	int err;

	snprintf(mapname, sizeof(mapname), "%s.map", f->hash);
	err = cachetier__map_load(ct, f->dirfd, f->hash, &buf, &m, &st, &lost);
	if (err == -ENOMEM)
		return err;
	if (err == 0 && lost) { /* the map is written again without them */
		f->dirty += lost;
		cachetier__note_corrupt(ct, f->hash, f->key, lost,
					"the data file is shorter than its map", "fetched again");
	}
	if (err == 0 && (m.size != f->size || m.chunk_bytes != f->cb ||
			 m.keylen != strlen(f->key) || memcmp(m.key, f->key, m.keylen) != 0))
		err = -ESTALE;
	if (err == 0)
		valid = cachetier__map_bytes(&m);
	/* What the usage counts for f now: what its old state file counted in
	 * this epoch, else (the counter was rebuilt from the maps) its map. */
	if (old == UINT64_MAX)
		old = valid;
	if (err < 0) {
		if (err != -ENOENT)
			unlinkat(f->dirfd, mapname, 0);
		if (ftruncate(f->datafd, 0) < 0) {
			free(buf);
			return -errno;
		}
	} else if (fstat(f->datafd, &st) == 0 &&
		   (uint64_t)st.st_blocks * 512 > valid + (uint64_t)f->nchunks * 4096) {
		/* chunks written but never recorded (a crash): free them */
		for (uint32_t c = 0; c < f->nchunks; c++) {
			if (!(m.bitmap[c / 8] & (1u << (c % 8))) &&
			    chunk_off(f, c) < (uint64_t)st.st_size)
				fallocate(f->datafd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					  (off_t)chunk_off(f, c), (off_t)f->cb);
		}
	}
	cachetier__usage_add(ct, (int64_t)valid - (int64_t)old);
	err = cachetier__st_ready(f, err == 0 ? m.bitmap : NULL, err == 0 ? m.crcs : NULL, epoch);
	free(buf);
	return err;
}

/* Load f's identity, arrays and the chunks the state file says are valid
 * (f->opening is set, so nobody else touches f's live fields). Returns
 * the valid bytes, or a negative errno. */
static int64_t file_load(struct cachetier *ct, struct ct_file *f, const char *key, const char *etag,
			 uint64_t size, uint32_t cb)
{
	uint64_t nchunks = (size + cb - 1) / cb, valid = 0;
	char name[24];
	int alone = 0, err;

	if (nchunks > UINT32_MAX)
		return -EFBIG;
	f->key = strdup(key);
	f->cst = calloc(nchunks ? nchunks : 1, 1);
	f->pins = calloc(nchunks ? nchunks : 1, sizeof(*f->pins));
	f->cerr = calloc(nchunks ? nchunks : 1, sizeof(*f->cerr));
	f->held = calloc(nchunks ? nchunks : 1, 1);
	f->seen = calloc(nchunks ? nchunks : 1, 1);
	f->catime = calloc(nchunks ? nchunks : 1, sizeof(*f->catime));
	f->unread = calloc(nchunks ? nchunks : 1, 1);
	if (!f->key || !f->cst || !f->pins || !f->cerr || !f->held || !f->seen || !f->catime ||
	    !f->unread)
		return -ENOMEM;
	snprintf(f->etag, sizeof(f->etag), "%s", etag);
	f->size = size;
	f->cb = cb;
	/* units of this process's chunk size form its sequential requests; an
	 * object of other units (an earlier mount's, loaded to be evicted)
	 * fills a unit per request */
	f->group = cb == ct->unit ? ct->upc : 1;
	f->nchunks = (uint32_t)nchunks;
	err = cachetier__st_open(f, 1, &alone);
	if (err < 0)
		return err;
	snprintf(name, sizeof(name), "%s.st", f->hash);
	f->auxfd = openat(f->dirfd, name, O_RDWR | O_CLOEXEC);
	if (f->auxfd < 0)
		return -errno;
	/* under the presence lock: nobody unlinks the data file meanwhile */
	f->datafd = openat(f->dirfd, f->hash, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (f->datafd < 0)
		return -errno;
	if (alone) {
		err = file_init_alone(ct, f);
		if (err < 0)
			return err;
	}
	for (uint32_t c = 0; c < f->nchunks; c++) {
		if (cachetier__st_get(f, c)) {
			f->cst[c] = CH_VALID;
			valid += chunk_len(f, c);
		}
	}
	return (int64_t)valid;
}

/* Make f live (ct->lock held on entry and return, dropped while loading). */
static int file_activate(struct cachetier *ct, struct ct_file *f, const char *key, const char *etag,
			 uint64_t size, uint32_t cb)
{
	int64_t valid;

	f->opening = 1;
	pthread_mutex_unlock(&ct->lock);
	valid = file_load(ct, f, key, etag, size, cb);
	pthread_mutex_lock(&ct->lock);
	ct->used -= f->bytes;
	f->opening = 0;
	if (valid < 0) {
		file_unload(f);
	} else {
		f->bytes = (uint64_t)valid;
		ct->used += f->bytes;
		f->live = 1;
		f->atime_ns = f->map_ns = cachetier__now_ns();
	}
	pthread_cond_broadcast(&ct->chunk_cond);
	return valid < 0 ? (int)valid : 0;
}

int cachetier__file_open_mapped(struct cachetier *ct, struct ct_file *f)
{
	unsigned char *buf = NULL;
	char *key = NULL, *etag = NULL;
	struct ct_map m;
	struct stat st;
	int err;

	if (f->opening || f->evicting)
		return -EBUSY; /* another thread loads or evicts it */
	pthread_mutex_unlock(&ct->lock);
	err = cachetier__map_load(ct, f->dirfd, f->hash, &buf, &m, &st, NULL);
	if (err == 0) {
		key = strndup(m.key, m.keylen);
		etag = strndup(m.etag, m.etaglen);
		if (!key || !etag || m.etaglen >= sizeof(f->etag))
			err = -ENOMEM;
	}
	pthread_mutex_lock(&ct->lock);
	/* a reader's cachetier__file_open may have started loading f while
	 * the lock was dropped: a second load would open a second state file
	 * description and replace f's fds and arrays under the first (a lock
	 * taken on the replaced fd, such as LK_MAP, would then never be
	 * released) */
	if (err == 0 && (f->opening || f->evicting))
		err = -EBUSY;
	if (err == 0)
		err = f->live ? 0 : file_activate(ct, f, key, etag, m.size, m.chunk_bytes);
	free(key);
	free(etag);
	free(buf);
	return err;
}

int cachetier__file_open(struct cachetier *ct, const struct backend_objinfo *info,
			 struct ct_file **out)
{
	uint32_t cb;
	char hash[17];
	struct ct_file *f;
	int err;

	*out = NULL;
	/* an object of more than UNITS_MAX units (64 GiB of 64 KiB) keeps its
	 * state per chunk: the per-unit arrays would take 20 bytes a unit */
	cb = info->size / ct->unit > UNITS_MAX ? ct->cfg.chunk_bytes : ct->unit;
	err = cachetier__file_hash(info->key, info->etag, info->size, cb, hash);
	if (err < 0)
		return err;

	pthread_mutex_lock(&ct->lock);
	for (;;) {
		f = file_find(ct, ct->datafd, hash);
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
		f->dirfd = ct->datafd;
		f->datafd = f->stfd = f->auxfd = -1;
		pthread_mutex_init(&f->maplock, NULL);
		f->next = ct->files;
		ct->files = f;
	}
	err = file_activate(ct, f, info->key, info->etag, info->size, cb);
	if (err == 0)
		*out = f;
	pthread_mutex_unlock(&ct->lock);
	return err;
}

/* ---- queues (all with ct->lock held) ---- */

/* Ask the prefetch fill of slot sl to stop (its sink ends it at the next
 * piece that arrives; worker_main then hands the chunk back). */
static void pf_withdraw(struct cachetier *ct, struct ct_slot *sl)
{
	atomic_store(&sl->withdraw, 1);
	ct->pf_withdrawing++;
	ct->pf_withdrawn++;
}

/* May the prefetch fill of slot sl be withdrawn for a reader's job on
 * object f: one that no reader waits for (its chunk is not pinned), not
 * asked already, and of another object (a reader of f wants f's prefetched
 * chunks soon: a shard fetched ahead of an in-order reader). */
static int pf_withdrawable(const struct ct_slot *sl, const struct ct_file *f)
{
	if (!sl->f || !sl->pf || sl->f == f || atomic_load(&sl->withdraw))
		return 0;
	for (uint32_t u = sl->c; u < sl->c + sl->n; u++) {
		if (sl->f->pins[u])
			return 0;
	}
	return 1;
}

/* Prefetch fills yield to readers, after a job for object f was queued
 * (ra: a readahead job).
 *  - A readahead job means a sequential reader streams: every prefetch
 *    fill in flight with less than half its chunk received stops, so the
 *    reader gets the connections and the link's (and this machine's)
 *    throughput at once; fills past half finish (stopping them would
 *    throw away more than it frees). Measured with tests/bench/link_bench.py
 *    (cat of a fresh mount while the warm runs): stopping only as many as
 *    the reader needs connections left the reader sharing the link with a
 *    full round of prefetch fills, at 0.6-0.8 of its speed without them.
 *  - Any job: when demand and readahead jobs wait for more connections than
 *    are free, prefetch fills stop (fewest bytes received first, so the
 *    least is fetched again) until they do not. A connection is free when
 *    no fill holds it (the mount runs one worker more than connections:
 *    fill_threads - 1 of them); fills asked to stop count as free.
 * Only fills pf_withdrawable allows are withdrawn. */
static void pf_yield(struct cachetier *ct, const struct ct_file *f, int ra)
{
	unsigned conns = ct->cfg.fill_threads > 1 ? ct->cfg.fill_threads - 1 : 1;
	uint64_t busy;

	for (unsigned i = 0; ra && i < ct->nworkers; i++) {
		struct ct_slot *sl = &ct->slots[i];

		if (pf_withdrawable(sl, f) && atomic_load_explicit(&sl->got, memory_order_relaxed) <
						  run_len(sl->f, sl->c, sl->n) / 2)
			pf_withdraw(ct, sl);
	}
	busy = ct->fills_inflight - ct->pf_withdrawing;

	while (busy + ct->rd_queued > conns) {
		struct ct_slot *best = NULL;

		for (unsigned i = 0; i < ct->nworkers; i++) {
			struct ct_slot *sl = &ct->slots[i];
			unsigned long long got, bgot;

			if (!pf_withdrawable(sl, f))
				continue;
			got = atomic_load_explicit(&sl->got, memory_order_relaxed);
			bgot = best ? atomic_load_explicit(&best->got, memory_order_relaxed) : 0;
			if (!best || got < bgot || (got == bgot && sl->seq > best->seq))
				best = sl;
		}
		if (!best)
			return;
		pf_withdraw(ct, best);
		busy--;
	}
}

/* Queue one fill of units [c, c + n) of f, all CH_EMPTY. */
static int queue_push(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n, int ra)
{
	struct ct_job *j = malloc(sizeof(*j));

	if (!j)
		return -ENOMEM;
	j->f = f;
	j->c = c;
	j->n = n;
	j->ra = ra;
	j->next = NULL;
	if (ra) {
		*ct->rq_tail = j;
		ct->rq_tail = &j->next;
	} else {
		*ct->dq_tail = j;
		ct->dq_tail = &j->next;
	}
	for (uint32_t u = c; u < c + n; u++)
		f->cst[u] = CH_QUEUED;
	ct->rd_queued++;
	ct->pf_quiet = 0;
	if (ra) {
		ct->ra_busy++;
		ct->pf_cap = 1; /* pf_max: the slow start after it */
	}
	pf_yield(ct, f, ra);
	pthread_cond_signal(&ct->work_cond);
	return 0;
}

/* The run of CH_EMPTY units around unit c (CH_EMPTY) within [lo, hi) and
 * within c's chunk: *a .. *b (exclusive). */
static void empty_run(const struct ct_file *f, uint32_t c, uint32_t lo, uint32_t hi, uint32_t *a,
		      uint32_t *b)
{
	uint32_t g0 = c - c % f->group, g1 = g0 + f->group;

	if (lo < g0)
		lo = g0;
	if (hi > g1)
		hi = g1;
	if (hi > f->nchunks)
		hi = f->nchunks;
	*a = c;
	*b = c + 1;
	while (*a > lo && f->cst[*a - 1] == CH_EMPTY)
		(*a)--;
	while (*b < hi && f->cst[*b] == CH_EMPTY)
		(*b)++;
}

/* Queue one fill of the CH_EMPTY units around unit c within [lo, hi) and
 * c's chunk (one range request). */
static int queue_run(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t lo, uint32_t hi,
		     int ra)
{
	uint32_t a, b;

	empty_run(f, c, lo, hi, &a, &b);
	return queue_push(ct, f, a, b - a, ra);
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
		if ((*pp)->f == f && (*pp)->c <= c && c < (*pp)->c + (*pp)->n) {
			struct ct_job *j = queue_pop(&ct->rq_tail, pp);

			j->next = NULL;
			*ct->dq_tail = j;
			ct->dq_tail = &j->next;
			return;
		}
	}
}

/* The prefetch list ct->pf: objects whose prefetch runs, doubly linked
 * (pf_pprev points at the link that points at the entry) so that a
 * reader's object moves to the front in O(1). */
static void pf_unlink(struct cachetier *ct, struct ct_file *f)
{
	*f->pf_pprev = f->pf_link;
	if (f->pf_link)
		f->pf_link->pf_pprev = f->pf_pprev;
	else
		ct->pf_tail = f->pf_pprev;
	f->pf_link = NULL;
	f->pf_pprev = NULL;
	f->pf_listed = 0;
}

static void pf_push(struct cachetier *ct, struct ct_file *f, int front)
{
	f->pf_listed = 1;
	if (front) {
		f->pf_link = ct->pf;
		f->pf_pprev = &ct->pf;
		if (ct->pf)
			ct->pf->pf_pprev = &f->pf_link;
		else
			ct->pf_tail = &f->pf_link;
		ct->pf = f;
	} else {
		f->pf_link = NULL;
		f->pf_pprev = ct->pf_tail;
		*ct->pf_tail = f;
		ct->pf_tail = &f->pf_link;
	}
}

/* Most prefetch fills in flight at once. While readers read (a demand or
 * readahead job was queued within the last round of prefetch fills:
 * pf_quiet < fill_threads): all workers but two (at least one), so that a
 * demand fill always finds a free worker and, with one worker more than
 * the backend's connections (as fs/ configures it), a free connection: a
 * reader's miss never waits for a prefetch fill to be withdrawn. With no
 * reader (a prefetch or a warm alone): all workers but one, every
 * connection (leaving one idle cost 1/connections of the throughput: 0.83
 * of 8 x rate with 8 connections on tests/bench/link_bench.py's link); a
 * reader's first miss then withdraws one (pf_yield). Less one for each
 * demand fill in flight, so that prefetch fills take only connections
 * readers leave idle (pf_yield withdraws the ones readers need). None while readahead is queued or
 * in flight (a sequential reader streams), and then a slow start: pf_cap starts again at one and
 * grows by one with each prefetch fill that completes (doubling per round of fills), so that a
 * reader reading what its readahead fetched does not share the machine with a full round of
 * prefetch fills at once, and a reader that keeps streaming stops them
 * again before they reach full parallelism. */
static unsigned pf_max(const struct cachetier *ct)
{
	unsigned n = ct->cfg.fill_threads;
	unsigned m = ct->pf_quiet < n ? (n > 2 ? n - 2 : 1) : (n > 1 ? n - 1 : 1);

	if (ct->ra_busy)
		return 0;
	m = ct->rd_inflight < m ? m - ct->rd_inflight : 0;
	return m < ct->pf_cap ? m : ct->pf_cap;
}

/* Drop the range at the front of ct->pr. */
static void range_pop(struct cachetier *ct)
{
	struct ct_range *r = ct->pr;

	ct->pr = r->link;
	if (!ct->pr)
		ct->pr_tail = &ct->pr;
	r->f->pr_queued--;
	free(r);
}

/* Queue units [c0, c1) of f as a range, at the back of ct->pr or (front:
 * a withdrawn fill's units) at its front. 0 or -ENOMEM. */
static int range_push(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1, int evict,
		      int front)
{
	struct ct_range *r = malloc(sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->f = f;
	r->next = c0;
	r->end = c1;
	r->evict = evict;
	f->pr_queued++;
	if (front) {
		r->link = ct->pr;
		if (!ct->pr)
			ct->pr_tail = &r->link;
		ct->pr = r;
	} else {
		r->link = NULL;
		*ct->pr_tail = r;
		ct->pr_tail = &r->link;
	}
	return 0;
}

/* A prefetch cursor (*next, up to end) over units of p takes its next
 * fill: the empty units from the first empty one at or after *next to the
 * end of their chunk (or at end), claimed for the worker (CH_QUEUED, on no
 * queue: a reader waits for them), in *c and *n; *next moves past them and
 * the filled units after them. 0: none left (*next reached end). ct->lock
 * held. */
static int cursor_take(struct ct_file *p, uint32_t *next, uint32_t end, uint32_t *c, uint32_t *n)
{
	uint32_t a, b;

	while (*next < end && p->cst[*next] != CH_EMPTY)
		(*next)++;
	if (*next >= end)
		return 0;
	empty_run(p, *next, *next, end, &a, &b);
	for (uint32_t u = a; u < b; u++)
		p->cst[u] = CH_QUEUED;
	*c = a;
	*n = b - a;
	*next = b;
	while (*next < end && p->cst[*next] != CH_EMPTY)
		(*next)++;
	return 1;
}

/* The next fill of the range at the front of ct->pr (cursor_take); the
 * range goes once its cursor reached its end. 1: one, in *f, *c, *n, *pf;
 * 0: the range had none left. ct->lock held. */
static int range_next(struct cachetier *ct, struct ct_file **f, uint32_t *c, uint32_t *n, int *pf)
{
	struct ct_range *r = ct->pr;
	int took = cursor_take(r->f, &r->next, r->end, c, n);

	*f = r->f;
	*pf = r->evict ? CT_PF_RANGE_EVICT : CT_PF_RANGE_FIT;
	if (r->next >= r->end)
		range_pop(ct);
	return took;
}

/* The next fill: demand, then readahead, then prefetch ranges, then prefetch cursors (the
 * object at the front of ct->pf first; at most pf_max in flight). *pf: a
 * prefetch cursor's chunk. An object whose cursor passed its last chunk
 * leaves the list at once, so its prefetch counts as ended once its fills
 * in flight are done. */
static int queue_next(struct cachetier *ct, struct ct_file **f, uint32_t *c, uint32_t *n, int *ra,
		      int *pf)
{
	struct ct_job *j = NULL;

	*pf = 0;
	if (ct->dq)
		j = queue_pop(&ct->dq_tail, &ct->dq);
	else if (ct->rq)
		j = queue_pop(&ct->rq_tail, &ct->rq);
	if (j) {
		ct->rd_queued--;
		*f = j->f;
		*c = j->c;
		*n = j->n;
		*ra = j->ra;
		free(j);
		return 1;
	}
	while (ct->pr && ct->pf_running < pf_max(ct)) {
		if (range_next(ct, f, c, n, pf)) {
			*ra = 1;
			return 1;
		}
	}
	while (ct->pf && ct->pf_running < pf_max(ct)) {
		struct ct_file *p = ct->pf;
		int took = cursor_take(p, &p->pf_next, p->pf_end, c, n);

		/* an object whose cursor passed its end leaves the list at once */
		if (p->pf_next >= p->pf_end)
			pf_unlink(ct, p);
		if (took) {
			*f = p;
			*ra = 1;
			*pf = CT_PF_OBJ;
			return 1;
		}
	}
	return 0;
}

/* May a PF_FIT prefetch fill of f (len bytes, its units claimed) go
 * ahead without evicting: the directory's usage, this process's fills in
 * flight and bytes being punched leave room for it within
 * cache_size_bytes, and the disk keeps its reserve? 1: yes; 0: no
 * (counted as unfit). ct->lock held on entry and return; dropped around
 * statvfs. */
static int pf_fits(struct cachetier *ct, struct ct_file *f, uint64_t len)
{
	uint64_t avail = UINT64_MAX;
	struct statvfs sv;

	pthread_mutex_unlock(&ct->lock);
	if (fstatvfs(ct->datafd, &sv) == 0)
		avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	pthread_mutex_lock(&ct->lock);
	if (cachetier__usage_get(ct) + ct->reserved + ct->evicting + len <=
		ct->cfg.cache_size_bytes &&
	    avail >= ct->cfg.min_free_bytes + ct->reserved + len)
		return 1;
	f->pf_unfit += len;
	ct->unfit_bytes += len;
	return 0;
}

/* ---- fill workers ---- */

/* Where a fill's bytes go: straight into the data file at their own offset
 * (chunk i of the object is at i * chunk_bytes in both). */
struct fill_sink {
	int fd;
	uint64_t start;	      /* the chunk's start */
	uint64_t next;	      /* object offset of the next byte expected */
	uint64_t end;	      /* the chunk's end */
	int wrote;	      /* a byte may have reached the file */
	struct ct_slot *slot; /* the worker's: progress, and a request to stop */
	uint32_t cb;	      /* unit bytes; start is a unit's start */
	uint32_t *crc;	      /* CRC32C of each unit of the run, as its bytes arrive */
};

/* The error a withdrawn prefetch fill stops with (pf_yield). */
#define FILL_WITHDRAWN (-ECANCELED)

/* backend_sink_cb: may run on the store's I/O thread; no locks. */
static int fill_sink_write(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct fill_sink *s = arg;
	size_t done = 0;

	if (atomic_load_explicit(&s->slot->withdraw, memory_order_relaxed))
		return FILL_WITHDRAWN;
	if (len == 0) /* the store's poll while no bytes arrive */
		return 0;
	/* the backend promises contiguous pieces inside the range: anything
	 * else would leave a hole in a chunk about to be marked valid */
	if (off != s->next || len > s->end - off)
		return -EIO;
	s->wrote = 1;
	/* each unit's CRC32C as its bytes pass, while they are in the CPU's
	 * cache (tests/bench/crc_bench.sh: about 0.12 ms of CPU a MB) */
	for (size_t at = 0; at < len;) {
		uint64_t u = (off + at - s->start) / s->cb;
		uint64_t uend = s->start + (u + 1) * s->cb - off;
		size_t piece = (size_t)(uend < len ? uend - at : len - at);

		s->crc[u] = disk_crc32c_update(s->crc[u], (const char *)buf + at, piece);
		at += piece;
	}
	while (done < len) {
		ssize_t n =
		    pwrite(s->fd, (const char *)buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		done += (size_t)n;
	}
	s->next += len;
	atomic_store_explicit(&s->slot->got, s->next - s->start, memory_order_relaxed);
	return 0;
}

/* Fetch chunk c into f's data file, each piece written as it arrives
 * (durable only at the next map flush), each unit's CRC32C into crc[]
 * (one per unit of the len bytes). On failure the chunk's range is
 * punched again: bytes of a failed fill (perhaps of a version that changed
 * meanwhile) are never counted, so they must not stay on the disk. The
 * caller holds the chunk's write lock, so no one else trusts or writes the
 * range. No ct->lock held. */
static int fill_chunk(struct cachetier *ct, struct ct_slot *slot, struct ct_file *f, uint32_t c,
		      size_t len, uint32_t *crc)
{
	uint64_t off = chunk_off(f, c);
	struct fill_sink s = {.fd = f->datafd,
			      .start = off,
			      .next = off,
			      .end = off + len,
			      .slot = slot,
			      .cb = f->cb,
			      .crc = crc};
	int err = 0;

	memset(crc, 0, sizeof(*crc) * ((len + f->cb - 1) / f->cb));
	while (s.next < s.end) {
		uint64_t from = s.next;
		/* only from the listed version: chunks of two versions never mix */
		ssize_t n = backend_read_version_cb(ct->be, f->key, f->etag, from,
						    (size_t)(s.end - from), fill_sink_write, &s);

		if (n < 0) {
			err = (int)n;
			break;
		}
		if (s.next == from) {
			err = -EIO; /* the object is shorter than its size said */
			break;
		}
	}
	if (err < 0 && s.wrote)
		(void)fallocate(f->datafd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
				(off_t)len);
	return err;
}

static int flush_due(struct cachetier *ct, struct ct_file *f, int64_t now)
{
	return f->live && f->dirty &&
	       (f->dirty >= MAP_BATCH_CHUNKS * f->group || now - f->map_ns >= MAP_BATCH_NS);
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

/* Claim chunk c of f for a fill: 1 when this process holds its write lock
 * and must fetch it, 0 when another process filled it meanwhile (nothing
 * held), or a negative errno (-ECANCELED when the cache tier closes while
 * another process's fill is awaited). No ct->lock held. */
static int fill_claim(struct cachetier *ct, struct ct_file *f, uint32_t c, int *waited)
{
	unsigned sleep_us = 200;

	for (;;) {
		int err;

		if (cachetier__st_get(f, c))
			return 0;
		err = cachetier__ofd_lock(f->stfd, F_WRLCK, LK_CHUNK(c), 0);
		if (err == 0) {
			if (!cachetier__st_get(f, c))
				return 1;
			chunk_unlock(f, c);
			return 0;
		}
		if (err != -EAGAIN)
			return err;
		/* another process fills or evicts it: wait for its lock to go */
		if (__atomic_load_n(&ct->stopping, __ATOMIC_ACQUIRE))
			return -ECANCELED;
		*waited = 1;
		cachetier__backoff(&sleep_us, 10000);
	}
}

/* Units [c, c + n) of f, claimed by a prefetch fill that is skipped, are
 * empty again; a reader that came to wait for one meanwhile gets it queued
 * on demand. ct->lock held. */
static void run_abandon(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n)
{
	for (uint32_t u = c; u < c + n; u++) {
		f->cst[u] = CH_EMPTY;
		if (f->pins[u] > 0 && queue_push(ct, f, u, 1, 0) < 0) {
			f->cerr[u] = -ENOMEM;
			ct->fill_errors++;
		}
	}
	pthread_cond_broadcast(&ct->chunk_cond);
}

/* A withdrawn prefetch fill of unit c of f ended without it: the unit
 * is empty again and its prefetch looks at it again (its object back at
 * the front of the prefetch order); a reader that came to wait for it
 * meanwhile gets it queued on demand. ct->lock held. */
static void pf_withdrawn(struct cachetier *ct, struct ct_file *f, uint32_t c, int pf)
{
	f->cst[c] = CH_EMPTY;
	if (f->pins[c] > 0 && queue_push(ct, f, c, 1, 0) < 0) {
		f->cerr[c] = -ENOMEM;
		ct->fill_errors++;
	}
	if (ct->stopping)
		return;
	if (pf != CT_PF_OBJ) { /* a range's unit: first of the ranges again */
		if (ct->pr && ct->pr->f == f && ct->pr->end == c)
			ct->pr->end = c + 1; /* the next unit of the same run */
		else if (ct->pr && ct->pr->f == f && ct->pr->next == c + 1)
			ct->pr->next = c;
		else if (range_push(ct, f, c, c + 1, pf == CT_PF_RANGE_EVICT, 1) < 0)
			ct->fill_errors++;
	} else if (!f->pf_listed) {
		f->pf_next = c;
		if (f->pf_end <= c)
			f->pf_end = c + 1;
		pf_push(ct, f, 1);
	} else if (c < f->pf_next) {
		f->pf_next = c;
	}
}

/* Fetch the units of [c, c + n) of f whose claim[] is 1, each maximal run
 * of them with one request; err[] gets each unit's result, crc[] the
 * CRC32C of each unit fetched. No ct->lock held. */
static void fill_claimed(struct cachetier *ct, struct ct_slot *slot, struct ct_file *f, uint32_t c,
			 uint32_t n, const int *claim, int *err, uint32_t *crc, unsigned *requests)
{
	for (uint32_t i = 0; i < n;) {
		uint32_t k = i;
		int e;

		if (claim[i] != 1) {
			err[i] = claim[i] < 0 ? claim[i] : 0;
			i++;
			continue;
		}
		while (k < n && claim[k] == 1)
			k++;
		e = fill_chunk(ct, slot, f, c + i, (size_t)run_len(f, c + i, k - i), crc + i);
		*requests += e == 0;
		for (; i < k; i++)
			err[i] = e;
	}
}

/* Start the fill of units [c, c + n) of f (len bytes; ra, pf: a readahead,
 * a prefetch fill): counted in flight, marked filling, published in slot,
 * room made. 0: go ahead (*peer: every unit is valid in the state file
 * already, another process filled it); -1: skipped (a PF_FIT prefetch
 * that does not fit, or a PF_EVICT one with nothing it may evict), the run
 * given back. ct->lock held. */
static int fill_begin(struct cachetier *ct, struct ct_slot *slot, struct ct_file *f, uint32_t c,
		      uint32_t n, int ra, int pf)
{
	uint64_t len = run_len(f, c, n);
	/* a PF_FIT prefetch never evicts: a run that needs room is
	 * skipped (units another process filled need none) */
	int fit = pf == CT_PF_RANGE_FIT || (pf == CT_PF_OBJ && !f->pf_evict), peer = 1;

	if (pf) { /* counted from here: its prefetch has not ended yet */
		f->pf_inflight++;
		ct->pf_running++;
	}
	for (uint32_t u = c; u < c + n && peer; u++)
		peer = cachetier__st_get(f, u);
	if (fit && !peer && pf_fits(ct, f, len) != 1) {
		f->pf_inflight--;
		ct->pf_running--;
		run_abandon(ct, f, c, n);
		return -1;
	}
	for (uint32_t u = c; u < c + n; u++)
		f->cst[u] = CH_FILLING;
	ct->reserved += len;
	ct->fills_inflight++;
	if (!pf)
		ct->rd_inflight++;
	slot->f = f;
	slot->c = c;
	slot->n = n;
	slot->pf = pf;
	slot->seq = ++ct->fill_seq;
	atomic_store(&slot->withdraw, 0);
	atomic_store(&slot->got, 0);
	if (ra)
		ct->readahead_fills++;
	if (!fit && !peer && cachetier__make_room(ct, len, pf) < 0) {
		/* a PF_EVICT prefetch fill only evicts chunks read
		 * already: none left, so it is skipped like an unfit one */
		ct->reserved -= len;
		ct->fills_inflight--;
		if (ra)
			ct->readahead_fills--;
		if (atomic_load(&slot->withdraw))
			ct->pf_withdrawing--; /* asked while room was made */
		slot->f = NULL;
		f->pf_inflight--;
		ct->pf_running--;
		f->pf_unfit += len;
		ct->unfit_bytes += len;
		run_abandon(ct, f, c, n);
		return -1;
	}
	return 0;
}

/* The outcome of unit u of a fill: err (0 or negative errno), claim (1:
 * this fill fetched it; else another process's fill did, waited: after
 * waiting for it), withdrawn (the fill was stopped for a reader: its
 * enum ct_pf_kind; 0: it was not). Valid,
 * empty with its error, or back to its prefetch; its write lock becomes
 * the pinning readers' read lock or goes. ct->lock held. */
static void unit_done(struct cachetier *ct, struct ct_file *f, uint32_t u, int err, int claim,
		      int waited, int withdrawn)
{
	uint64_t ulen = chunk_len(f, u);

	if (err < 0 && withdrawn) {
		pf_withdrawn(ct, f, u, withdrawn);
	} else if (err == 0) {
		f->cst[u] = CH_VALID;
		f->bytes += ulen;
		ct->used += ulen;
		/* no reader waits for it: filled ahead, spared by the
		 * evictions of prefetch fills until it is read */
		f->catime[u] = cachetier__now_ns();
		f->unread[u] = f->pins[u] == 0;
		if (claim == 1) {
			f->seen[u] = 1;
			f->dirty++;
			ct->bytes_fetched += ulen;
		} else {
			f->seen[u] = 0; /* another process filled it: checked when read */
			if (waited)
				ct->peer_waits++;
		}
	} else {
		f->cst[u] = CH_EMPTY;
		f->cerr[u] = err;
		ct->fill_errors++;
	}
	if (claim == 1) {
		/* readers waiting for it keep it pinned: the write lock
		 * becomes their read lock without a gap an eviction could
		 * use; otherwise it goes */
		if (err == 0 && f->pins[u] > 0) {
			cachetier__ofd_lock(f->stfd, F_RDLCK, LK_CHUNK(u), 0);
			f->held[u] = 1;
		} else {
			chunk_unlock(f, u);
		}
	}
}

/* A fill of units [c, c + n) of f ended (fill_begin's counts undone, each
 * unit's outcome in claim[] and errs[], requests sent): account for it and
 * wake whoever waits. ct->lock held. */
static void fill_end(struct cachetier *ct, struct ct_slot *slot, struct ct_file *f, uint32_t c,
		     uint32_t n, int ra, int pf, const int *claim, const int *errs,
		     const uint32_t *crc, int waited, unsigned requests)
{
	int err = 0, withdrawn;

	/* the units move from reserved to the directory's usage under
	 * ct->lock, so pf_fits never counts them in both (it would skip
	 * a fill that fits); each unit's CRC goes first: whoever sees the
	 * state byte valid sees its CRC */
	for (uint32_t i = 0; i < n; i++) {
		if (claim[i] != 1 || errs[i] != 0)
			continue;
		cachetier__st_set_crc(f, c + i, crc[i]);
		if (!cachetier__st_set(f, c + i, 1))
			cachetier__usage_add(ct, (int64_t)chunk_len(f, c + i));
	}
	ct->reserved -= run_len(f, c, n);
	ct->fills_inflight--;
	if (!pf)
		ct->rd_inflight--;
	if (!pf && ra)
		ct->ra_busy--;
	withdrawn = atomic_load(&slot->withdraw);
	if (withdrawn)
		ct->pf_withdrawing--;
	slot->f = NULL;
	if (pf) {
		f->pf_inflight--;
		ct->pf_running--;
	}
	for (uint32_t i = 0; i < n && err == 0; i++)
		err = errs[i];
	if (err < 0 && withdrawn && ra)
		ct->readahead_fills--; /* counted again when it is fetched */
	if (pf && err == 0 && !ct->ra_busy && ct->pf_cap < ct->cfg.fill_threads)
		ct->pf_cap++;
	if (pf && err == 0 && ct->pf_quiet < ct->cfg.fill_threads)
		ct->pf_quiet++;
	ct->fills += requests;
	for (uint32_t i = 0; i < n; i++)
		unit_done(ct, f, c + i, errs[i], claim[i], waited, withdrawn ? pf : 0);
	pthread_cond_broadcast(&ct->chunk_cond);
	if (withdrawn || (!pf && ra && ct->ra_busy == 0 && (ct->pf || ct->pr)))
		pthread_cond_broadcast(&ct->work_cond); /* prefetch may go on */
	else if (!pf && (ct->pf || ct->pr))
		pthread_cond_signal(&ct->work_cond);
	if (flush_due(ct, f, cachetier__now_ns()))
		pthread_cond_signal(&ct->flush_cond);
}

static void *worker_main(void *arg)
{
	struct ct_slot *slot = arg;
	struct cachetier *ct = slot->ct;
	int *claim = NULL, *errs = NULL;
	uint32_t *crc = NULL;

	/* per unit of a run: at most one chunk's units */
	claim = calloc(ct->upc, sizeof(*claim));
	errs = calloc(ct->upc, sizeof(*errs));
	crc = calloc(ct->upc, sizeof(*crc));
	pthread_mutex_lock(&ct->lock);
	while (!ct->stopping && claim && errs && crc) {
		struct ct_file *f;
		uint32_t c, n;
		int ra, pf, waited = 0;
		unsigned requests = 0;

		if (!queue_next(ct, &f, &c, &n, &ra, &pf)) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&ct->work_cond, &ct->lock, &ts);
			continue;
		}
		if (fill_begin(ct, slot, f, c, n, ra, pf) < 0)
			continue;
		pthread_mutex_unlock(&ct->lock);

		for (uint32_t i = 0; i < n; i++)
			claim[i] = fill_claim(ct, f, c + i, &waited);
		fill_claimed(ct, slot, f, c, n, claim, errs, crc, &requests);

		pthread_mutex_lock(&ct->lock);
		fill_end(ct, slot, f, c, n, ra, pf, claim, errs, crc, waited, requests);
	}
	pthread_mutex_unlock(&ct->lock);
	free(claim);
	free(errs);
	free(crc);
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
		cachetier__dec_release(ct); /* decoded copies other processes evicted */
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
	ct->pf_cap = ct->cfg.fill_threads;
	ct->pf_quiet = ct->cfg.fill_threads; /* no reader yet */
	ct->workers = calloc(ct->cfg.fill_threads, sizeof(*ct->workers));
	ct->slots = calloc(ct->cfg.fill_threads, sizeof(*ct->slots));
	if (!ct->workers || !ct->slots)
		return -ENOMEM;
	if (pthread_create(&ct->flusher, NULL, flusher_main, ct) != 0)
		return -EAGAIN;
	ct->have_flusher = 1;
	for (unsigned i = 0; i < ct->cfg.fill_threads; i++) {
		int err;

		ct->slots[i].ct = ct;
		err = pthread_create(&ct->workers[i], NULL, worker_main, &ct->slots[i]);

		if (err)
			return -err;
		ct->nworkers++;
	}
	return 0;
}

void cachetier__chunk_stop(struct cachetier *ct)
{
	struct ct_job *j;

	cachetier_cancel(ct);
	if (ct->have_flusher)
		pthread_join(ct->flusher, NULL);
	ct->have_flusher = 0;
	for (unsigned i = 0; i < ct->nworkers; i++)
		pthread_join(ct->workers[i], NULL);
	free(ct->workers);
	ct->workers = NULL;
	ct->nworkers = 0;
	free(ct->slots);
	ct->slots = NULL;

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
	ct->rd_queued = 0;
	ct->ra_busy = 0;
	while (ct->pf)
		pf_unlink(ct, ct->pf);
	while (ct->pr)
		range_pop(ct);
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

/* Bytes a reader not at an object's start reads in sequence before its
 * readahead starts. */
#define RA_MIN_RUN (1u << 20)

/* Queue readahead after a read of [off, end) of f. ct->lock held. */
static void ra_update(struct cachetier *ct, struct ct_file *f, uint64_t off, uint64_t end)
{
	uint64_t cb = (uint64_t)f->cb * f->group, max = ct->cfg.readahead_max_bytes;
	uint64_t last;

	/* forward gaps up to a chunk (index building skips small members);
	 * back up to a quarter chunk (kernel readahead requests overtaking
	 * each other) */
	if (off == 0) {
		/* A read from an object's start is nearly always the start of a
		 * whole-object read (cat, cp, an index build, a decoder): it gets
		 * the full window at once. A ramp waits for one chunk's fill per
		 * doubling (about 0.17 s for 8 MiB on a link of 60 MB/s per
		 * connection and 30 ms to first byte), which made a fresh
		 * mount's cat of a 64 MB shard take two fill times, not one. */
		f->ra_window = max;
		f->ra_run = end;
	} else if (off + cb / 4 >= f->ra_end && off <= f->ra_end + cb) {
		f->ra_run += end - off;
		/* a run of fewer than RA_MIN_RUN bytes read is a small member
		 * read in a few requests (a shuffled sample), or reads that land
		 * near each other by chance: no readahead, or every sample of a
		 * shuffled epoch would fetch a window of chunks */
		if (f->ra_window || f->ra_run >= RA_MIN_RUN) {
			uint64_t w = f->ra_window ? f->ra_window * 2 : cb;

			f->ra_window = w < max ? w : max;
		}
	} else {
		f->ra_window = 0;
		f->ra_run = end - off;
	}
	f->ra_end = end;
	if (!f->ra_window || end >= f->size)
		return;
	/* whole chunks: one request each, from the chunk the read ends in
	 * (its units before the read's end too: the read's own misses then
	 * join that request instead of splitting it) */
	last = ((end + f->ra_window - 1) / cb + 1) * f->group - 1;
	if (last >= f->nchunks)
		last = f->nchunks - 1;
	for (uint64_t c = end / f->cb; c <= last; c++) {
		if (f->cst[c] == CH_EMPTY && queue_run(ct, f, (uint32_t)c, 0, f->nchunks, 1) < 0)
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
	for (uint32_t c = r->c0; c < r->c1; c++) {
		if (--f->pins[c] == 0 && f->held[c]) {
			chunk_unlock(f, c);
			f->held[c] = 0;
		}
	}
}

/* A pinned chunk this process thinks valid: take its read lock, then
 * trust it only if the state file still says valid (another process may
 * have evicted it). Returns 1 when held, else marks it empty. ct->lock
 * held. */
static int chunk_hold(struct cachetier *ct, struct ct_file *f, uint32_t c)
{
	if (f->held[c])
		return 1;
	if (cachetier__ofd_lock(f->stfd, F_RDLCK, LK_CHUNK(c), 0) == 0) {
		if (cachetier__st_get(f, c)) {
			/* one filled by another process (or mount), not seen
			 * here yet, is checked before it is served (units_check) */
			f->held[c] = 1;
			return 1;
		}
		chunk_unlock(f, c);
	}
	/* evicted, or being evicted or filled, by another process */
	f->cst[c] = CH_EMPTY;
	f->seen[c] = 0;
	f->bytes -= chunk_len(f, c);
	ct->used -= chunk_len(f, c);
	return 0;
}

/* Unit c of f (CH_VALID) is damaged (its bytes fail their CRC32C, or the
 * data file ends before it): counted, and made empty in the state file
 * (the map is written again without it) and here, so the next read of it
 * fetches it again. ct->lock held. */
static void unit_corrupt(struct cachetier *ct, struct ct_file *f, uint32_t c)
{
	uint64_t len = chunk_len(f, c);

	if (cachetier__st_set(f, c, 0)) /* cleared before its read lock goes */
		cachetier__usage_add(ct, -(int64_t)len);
	if (f->held[c]) {
		chunk_unlock(f, c);
		f->held[c] = 0;
	}
	f->cst[c] = CH_EMPTY;
	f->seen[c] = 0;
	f->bytes -= len;
	ct->used -= len;
	f->dirty++;
}

/* Units of [c0, c1) of f (valid: wholly written) that a hole in the data
 * file now overlaps (a punch under the running mount would read as zeros):
 * tag 2 (failed). One lseek(SEEK_HOLE) for a range without holes; size is
 * the data file's size (past it: the cut, which the caller sees). */
static void holes_check(struct ct_file *f, uint32_t c0, uint32_t c1, uint64_t size, uint8_t *tag)
{
	uint64_t end = chunk_off(f, c1 - 1) + chunk_len(f, c1 - 1), pos = chunk_off(f, c0);

	if (end > size)
		end = size;
	while (pos < end) {
		off_t h = lseek(f->datafd, (off_t)pos, SEEK_HOLE), d;

		if (h < 0 || (uint64_t)h >= end)
			return; /* none (or no SEEK_HOLE here: the CRCs are the check) */
		d = lseek(f->datafd, h, SEEK_DATA);
		if (d < 0 || (uint64_t)d > end)
			d = (off_t)end;
		for (uint64_t c = (uint64_t)h / f->cb; c < c1 && c * f->cb < (uint64_t)d; c++)
			if (c >= c0)
				tag[c - c0] = 2;
		pos = (uint64_t)d;
	}
}

/* Before a read serves units [c0, c1) of f (all CH_VALID, pinned and
 * read-locked): the data file still holds them (one fstat: a file cut
 * under the running mount would otherwise make the reply short) and has
 * no hole in them (one lseek: a punch would read as zeros), and each
 * unit this process has not filled or served yet (another process's or an
 * earlier mount's) matches the CRC32C its fill recorded (a pread and a
 * CRC of the unit, once per unit and process). Units that fail are made
 * empty (unit_corrupt). Returns how many failed or are no longer valid
 * (another reader here found them damaged meanwhile), or -errno. ct->lock held
 * on entry and return; dropped around the file I/O (the pins and read
 * locks keep the units from eviction and refill meanwhile). */
static int units_check(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1)
{
	uint8_t tagbuf[64], *tag = tagbuf; /* per unit: 1 check its CRC, 2 failed */
	unsigned char *buf = NULL;
	uint32_t checks = 0;
	int bad = 0, stale = 0, err = 0;
	struct stat st;

	if (c1 - c0 > sizeof(tagbuf) && !(tag = calloc(c1 - c0, 1)))
		return -ENOMEM;
	if (tag == tagbuf)
		memset(tagbuf, 0, sizeof(tagbuf));
	for (uint32_t c = c0; c < c1; c++) {
		if (!f->seen[c]) {
			tag[c - c0] = 1;
			checks++;
		}
	}
	pthread_mutex_unlock(&ct->lock);
	if (fstat(f->datafd, &st) < 0)
		err = -errno;
	if (err == 0)
		holes_check(f, c0, c1, (uint64_t)st.st_size, tag);
	if (err == 0 && checks && !(buf = malloc(f->cb)))
		err = -ENOMEM;
	for (uint32_t c = c0; c < c1 && err == 0; c++) {
		uint64_t len = chunk_len(f, c);

		if ((uint64_t)st.st_size < chunk_off(f, c) + len) {
			tag[c - c0] = 2; /* cut: the read would come back short */
		} else if (tag[c - c0] == 1) {
			int e = disk_pread_all(f->datafd, buf, (size_t)len, chunk_off(f, c));

			if (e < 0 && e != -EIO)
				err = e;
			else if (e < 0 ||
				 disk_crc32c_update(0, buf, (size_t)len) != cachetier__st_crc(f, c))
				tag[c - c0] = 2;
		}
	}
	free(buf);
	pthread_mutex_lock(&ct->lock);
	for (uint32_t c = c0; c < c1 && err == 0; c++) {
		if (f->cst[c] != CH_VALID) {
			/* another reader here found it damaged meanwhile (and
			 * counted it) */
			stale++;
		} else if (tag[c - c0] == 2) {
			unit_corrupt(ct, f, c);
			bad++;
		} else if (tag[c - c0] == 1 && !f->seen[c]) {
			f->seen[c] = 1;
			ct->peer_chunks++;
		}
	}
	if (tag != tagbuf)
		free(tag);
	if (err == 0 && bad && (uint64_t)st.st_size < chunk_off(f, c1 - 1) + chunk_len(f, c1 - 1)) {
		/* cut: every unit past the cut is gone too, also those a later
		 * fill's pwrite would turn into a hole before them */
		uint32_t more = 0;

		for (uint32_t c = (uint32_t)((uint64_t)st.st_size / f->cb); c < f->nchunks; c++) {
			if ((c < c0 || c >= c1) && f->cst[c] == CH_VALID) {
				unit_corrupt(ct, f, c);
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

int cachetier__file_read_begin(struct cachetier *ct, struct ct_file *f, uint64_t off, uint64_t len,
			       int probe)
{
	uint64_t cb = f->cb;
	uint32_t c0 = (uint32_t)(off / cb), c1 = len ? (uint32_t)((off + len - 1) / cb + 1) : c0;
	struct ct_read *r = malloc(sizeof(*r));
	uint8_t reqbuf[64], *req = reqbuf; /* per unit: this read saw it queued or filling */
	int err = 0, waited = 0, whole, repairs = 0;

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
	cachetier__st_touch(f, f->atime_ns);
	for (uint32_t c = c0; c < c1; c++) { /* chunk LRU (cachetier_evict.c) */
		f->catime[c] = f->atime_ns;
		f->unread[c] = 0;
	}
	/* what readers touch is prefetched first */
	if (f->pf_listed && ct->pf != f) {
		pf_unlink(ct, f);
		pf_push(ct, f, 1);
	}
	/* a probe says nothing of what comes next: no readahead, and a miss
	 * fills only the units it reads */
	if (!probe)
		ra_update(ct, f, off, off + len);
	/* a miss fills its whole chunk when the reader streams or the chunk
	 * fits without evicting; else (random reads of data that does not
	 * fit) only the units it reads */
	whole = !probe && (f->ra_window > 0 || cachetier__usage_get(ct) + ct->reserved +
						       ct->evicting + (uint64_t)f->cb * f->group <=
						   ct->cfg.cache_size_bytes);
	for (;;) {
		int ready = 1;

		for (uint32_t c = c0; c < c1 && err == 0; c++) {
			if (f->cst[c] == CH_VALID && !chunk_hold(ct, f, c))
				req[c - c0] = 0; /* gone again: fetch it anew */
			switch (f->cst[c]) {
			case CH_VALID:
				break;
			case CH_EMPTY:
				if (req[c - c0]) { /* the fill this read waited for failed */
					err = f->cerr[c] < 0 ? f->cerr[c] : -EIO;
					break;
				}
				err = whole ? queue_run(ct, f, c, 0, f->nchunks, 0)
					    : queue_run(ct, f, c, c, c1, 0);
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
		if (err == 0 && ready) {
			int bad = units_check(ct, f, c0, c1);

			if (bad > 0 && ++repairs > 2)
				bad = -EIO; /* damaged again as fast as it is fetched */
			if (bad < 0)
				err = bad;
			if (bad > 0) { /* fetch the damaged units again */
				for (uint32_t c = c0; c < c1; c++) {
					if (f->cst[c] == CH_EMPTY)
						req[c - c0] = 0;
				}
				continue;
			}
		}
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

int cachetier__file_prefetch(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1,
			     int mode)
{
	if (c1 > f->nchunks)
		c1 = f->nchunks;
	if (c0 >= c1)
		return 0;
	pthread_mutex_lock(&ct->lock);
	if (f->pf_listed) {
		/* the running prefetch's cursor covers the new range too */
		f->pf_evict |= mode == CACHETIER_PF_EVICT;
		if (c0 < f->pf_next)
			f->pf_next = c0;
		if (c1 > f->pf_end)
			f->pf_end = c1;
	} else if (!ct->stopping) {
		f->pf_next = c0;
		f->pf_end = c1;
		f->pf_unfit = 0;
		f->pf_evict = mode == CACHETIER_PF_EVICT;
		pf_push(ct, f, 0);
		pthread_cond_broadcast(&ct->work_cond);
	}
	pthread_mutex_unlock(&ct->lock);
	return 0;
}

int cachetier__file_prefetch_range(struct cachetier *ct, struct ct_file *f, uint32_t c0,
				   uint32_t c1, int mode)
{
	int err = 0;

	if (c1 > f->nchunks)
		c1 = f->nchunks;
	if (c0 >= c1)
		return 0;
	pthread_mutex_lock(&ct->lock);
	if (!ct->stopping) {
		int64_t now = cachetier__now_ns();

		/* units of the range that are here already (a neighbour's read
		 * or fill brought them) are needed ahead as much as those the
		 * range fetches: spared like them, not left at the head of the
		 * LRU order where the next eviction takes them before their
		 * reader comes */
		for (uint32_t c = c0; c < c1; c++) {
			if (f->cst[c] == CH_VALID && f->pins[c] == 0) {
				f->catime[c] = now;
				f->unread[c] = 1;
			}
		}
		err = range_push(ct, f, c0, c1, mode == CACHETIER_PF_EVICT, 0);
		pthread_cond_signal(&ct->work_cond);
	}
	pthread_mutex_unlock(&ct->lock);
	return err;
}

int cachetier__file_prefetch_state(struct cachetier *ct, struct ct_file *f, uint64_t *unfit)
{
	int running;

	pthread_mutex_lock(&ct->lock);
	running = f->pf_listed || f->pr_queued > 0 || f->pf_inflight > 0;
	*unfit = f->pf_unfit;
	pthread_mutex_unlock(&ct->lock);
	return running;
}
