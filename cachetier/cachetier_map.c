/*
 * cachetier_map.c — the unit store of remote objects (its files and map here;
 * queues in cachetier_queue.c, fills in cachetier_fill.c, reads in
 * cachetier_read.c): a remote object
 * is fetched once, in chunks of cfg.chunk_bytes (one range request each,
 * streamed into the file as the bytes arrive: backend_read_version_cb),
 * ahead of a sequential reader, into a sparse local file, and served from
 * it across reads and remounts.
 *
 * On disk, per object (name = hash of key, version and size, so a changed
 * object never meets old bytes; the version is backend_version_tag's: the
 * ETag, else size and mtime, as everywhere else):
 *   data/<hash>      sparse data file; chunk i at offset i * chunk_bytes
 *   data/<hash>.map  which units are valid (format below)
 *
 * Units: state (enum ct_unit), state file byte, map bit, lock, pin and
 * eviction are per unit (ct->unit: 64 KiB, at most 128 a chunk; an eighth
 * of a chunk under 512 KiB; a whole chunk in objects of more than
 * UNITS_MAX units); f->unit_bytes is the unit. A fill is one request for a run of empty units
 * within one chunk (a ct_job, a worker's slot): readahead, prefetch and a miss of a sequential
 * reader (or one whose chunk fits the cache without evicting) fill every empty unit of the chunk; a
 * random miss that needs an eviction fills only the units its read covers, so a shuffled reader of
 * data bigger than the cache fetches about what it reads (mountpoint-s3 starts random reads at 1
 * MiB + 128 KiB for the same reason). The data file is named by the hash with the unit size, so a
 * file of another unit size (an older version's chunk-sized units) is
 * never opened for reads; it is evicted like any other object.
 * The map is the only thing trusted after a restart. Protocol:
 *   fill:  pwrite the fill's pieces as they arrive (a failed fill punches
 *          them) → mark valid in memory (readers are served from
 *          the page cache at once) → (batched: with cfg.durable_delay_s,
 *          once the earliest unrecorded fill is that old, naming the units
 *          that old; without it every MAP_BATCH_CHUNKS chunks and every
 *          second, at object close; every unit at cachetier_close; by
 *          the flusher thread, never on a fill worker) note the units
 *          (ST_NAMED) → fdatasync(data) → write the map atomically.
 *   evict: mark units EVICTING in memory → if one was ST_NAMED: unlink the
 *          map + fsync the directory → punch the units out → mark them
 *          EMPTY (and rewrite the map of the units that stayed).
 * So a persisted map only ever claims units whose bytes were durable
 * before the map was written (each was written before the fdatasync that
 * precedes the map), and no map claims a unit being punched. A
 * crash loses at most the units not yet recorded; they are fetched again.
 *
 * Map format (little-endian):
 *   0  magic "SHCHMAP\1"   8  u32 version    12 u32 unit bytes
 *   16 u64 object size     24 u32 units      28 u32 key length
 *   32 u32 ETag length     36 u32 mtime bytes 40 key, ETag, [mtime], bitmap
 *   (mtime bytes: 8 for a version without an ETag, whose i64 mtime follows
 *   the empty ETag, else 0: maps of versions with one are as before;
 *   bit i of byte i/8 = unit i valid), u32 CRC32C per unit (of its
 *   bytes; 0 for units not valid), then u64 FNV-1a of all before.
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
/* Most units an object is kept in (cachetier__file_open). */
#define UNITS_MAX (1u << 20)

/* ---- map format ---- */

int cachetier__map_parse(const unsigned char *buf, size_t len, struct ct_map *m)
{
	uint64_t need;
	uint32_t mlen;

	if (len < MAP_HDR + 8 || memcmp(buf, MAP_MAGIC, 8) != 0)
		return -EBADMSG;
	if (disk_le32_get(buf + 8) != MAP_VERSION)
		return -EPROTO;
	if (disk_le64_get(buf + len - 8) != disk_fnv64(buf, len - 8))
		return -EBADMSG;
	m->unit_bytes = disk_le32_get(buf + 12);
	m->size = disk_le64_get(buf + 16);
	m->nunits = disk_le32_get(buf + 24);
	m->keylen = disk_le32_get(buf + 28);
	m->etaglen = disk_le32_get(buf + 32);
	mlen = disk_le32_get(buf + 36);
	need = (uint64_t)MAP_HDR + m->keylen + m->etaglen + mlen + ((uint64_t)m->nunits + 7) / 8 +
	       (uint64_t)m->nunits * 4 + 8;
	if (m->unit_bytes == 0 || need != len || (mlen != 0 && mlen != 8) ||
	    (mlen != 0) != (m->etaglen == 0) ||
	    m->nunits != (m->size + m->unit_bytes - 1) / m->unit_bytes)
		return -EBADMSG;
	m->key = (const char *)buf + MAP_HDR;
	m->etag = m->key + m->keylen;
	m->mtime = mlen ? (int64_t)disk_le64_get((const unsigned char *)m->etag) : 0;
	m->bitmap = (const unsigned char *)m->etag + m->etaglen + mlen;
	m->crcs = m->bitmap + ((size_t)m->nunits + 7) / 8;
	return 0;
}

uint64_t cachetier__map_bytes(const struct ct_map *m)
{
	uint64_t sum = 0;

	for (uint32_t c = 0; c < m->nunits; c++) {
		uint64_t off = (uint64_t)c * m->unit_bytes;

		if (m->bitmap[c / 8] & (1u << (c % 8)))
			sum += m->size - off < m->unit_bytes ? m->size - off : m->unit_bytes;
	}
	return sum;
}

int cachetier__map_read(int dirfd, const char *name, unsigned char **buf, size_t *len)
{
	return cachetier__read_file(dirfd, name, MAP_HDR + 8, MAP_MAX_BYTES, buf, len);
}

/* Map writes are batched: each costs a file write, two fsyncs and a
 * rename. Units filled but not yet recorded are only refetched after a
 * crash, so the batch bounds the refetch, not correctness. Without a
 * durability delay (cfg.durable_delay_s 0): every MAP_BATCH_CHUNKS chunks'
 * worth of units, and every MAP_BATCH_NS. */
#define MAP_BATCH_CHUNKS 16u /* chunks' worth of units */
#define MAP_BATCH_NS	 1000000000LL
/* a map whose write failed is tried again this long after (a batch) */
#define MAP_RETRY_NS MAP_BATCH_NS

/* The durability delay in ns (cfg.durable_delay_s; 0: none). */
static int64_t delay_ns(const struct cachetier *ct)
{
	double d = ct->cfg.durable_delay_s;

	return d > 0 ? (d < 1e9 ? (int64_t)(d * 1e9) : (int64_t)1e18) : 0;
}

/* May map_encode name unit c of f (its byte ST_VALID): every valid unit
 * without a delay, and at close ('all'); else one this process filled at
 * least the delay ago (a unit of another process is named by that
 * process's flusher; one a killed process filled stays unnamed: fetched
 * again after a restart). Naming any valid unit is safe: its bytes were
 * written before its byte said valid, and the fdatasync before the map
 * covers them; the delay only spares young units the sync and the map. */
static int may_name(const struct ct_file *f, uint32_t c, int64_t now, int64_t delay, int all)
{
	int64_t at;

	if (all || delay == 0)
		return 1;
	at = __atomic_load_n(&f->fill_ns[c], __ATOMIC_RELAXED);
	return at != 0 && now - at >= delay;
}

/* Encode the units f's state file says are valid and may be named
 * (may_name; or named before: ST_NAMED) into *out (NULL when none is);
 * *young: units left unnamed that this process filled, *young_ns the
 * earliest of their fills. Called with LK_MAP held. */
static int map_encode(struct ct_file *f, int64_t now, int64_t delay, int all, unsigned char **out,
		      size_t *len, unsigned *young, int64_t *young_ns)
{
	size_t klen = strlen(f->key), elen = strlen(f->etag), blen = ((size_t)f->nunits + 7) / 8;
	size_t mlen = elen ? 0 : 8; /* a version without an ETag: its mtime */
	size_t n = MAP_HDR + klen + elen + mlen + blen + (size_t)f->nunits * 4 + 8;
	unsigned char *buf = calloc(1, n), *bm, *crcs;
	unsigned valid = 0;

	*out = NULL;
	*len = 0;
	if (!buf)
		return -ENOMEM;
	memcpy(buf, MAP_MAGIC, 8);
	disk_le32_put(buf + 8, MAP_VERSION);
	disk_le32_put(buf + 12, f->unit_bytes);
	disk_le64_put(buf + 16, f->size);
	disk_le32_put(buf + 24, f->nunits);
	disk_le32_put(buf + 28, (uint32_t)klen);
	disk_le32_put(buf + 32, (uint32_t)elen);
	disk_le32_put(buf + 36, (uint32_t)mlen);
	memcpy(buf + MAP_HDR, f->key, klen);
	memcpy(buf + MAP_HDR + klen, f->etag, elen);
	if (mlen)
		disk_le64_put(buf + MAP_HDR + klen, (uint64_t)f->mtime);
	bm = buf + MAP_HDR + klen + elen + mlen;
	crcs = bm + blen;
	*young = 0;
	*young_ns = 0;
	for (uint32_t c = 0; c < f->nunits; c++) {
		if (!cachetier__st_get(f, c))
			continue;
		if (!may_name(f, c, now, delay, all) &&
		    __atomic_load_n(f->st + ST_HDR + c, __ATOMIC_ACQUIRE) != ST_NAMED) {
			int64_t at = __atomic_load_n(&f->fill_ns[c], __ATOMIC_RELAXED);

			if (at) {
				(*young)++;
				if (!*young_ns || at < *young_ns)
					*young_ns = at;
			}
			continue;
		}
		if (cachetier__st_name(f, c)) {
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

/* A punch's end asked for f's map again (ct_file.remap): due at once,
 * as it asked under ct->lock before. f->lock held (the map batch: a commit
 * of landed units adds to it under f->lock alone). */
static void remap_take(struct ct_file *f)
{
	if (atomic_load_explicit(&f->remap, memory_order_relaxed) &&
	    atomic_exchange_explicit(&f->remap, 0, memory_order_acquire)) {
		f->dirty++;
		f->dirty_ns = 0;
	}
}

/* cachetier__flush_due with f->lock held. */
static int flush_due_locked(struct cachetier *ct, struct ct_file *f, int64_t now)
{
	int64_t delay = delay_ns(ct);

	remap_take(f);
	if (!f->live || !f->dirty)
		return 0;
	if (f->retry_ns && now < f->retry_ns)
		return 0; /* its last write failed: once a batch, not at once */
	if (delay == 0)
		return f->dirty >= MAP_BATCH_CHUNKS * f->group || now - f->map_ns >= MAP_BATCH_NS;
	return now - f->dirty_ns >= delay;
}

int cachetier__flush_due(struct cachetier *ct, struct ct_file *f, int64_t now)
{
	int due;

	disk_mutex_lock(&f->lock);
	due = flush_due_locked(ct, f, now);
	disk_mutex_unlock(&f->lock);
	return due;
}

void cachetier__map_dirty(struct cachetier *ct, struct ct_file *f, uint32_t u, int64_t now)
{
	(void)ct;
	assert(disk_mutex_held(&f->lock));
	__atomic_store_n(&f->fill_ns[u], now, __ATOMIC_RELAXED);
	if (!f->dirty || (f->dirty_ns && now < f->dirty_ns))
		f->dirty_ns = now;
	f->dirty++;
}

/* Persist f's map if units were filled since the last write: what the
 * state file says is valid now and may be named (map_encode; also units
 * other processes filled: their bytes were written before they were
 * marked, so the fdatasync below covers them); with a durability delay,
 * only once it is due (cachetier__flush_due), but every valid unit once
 * the tier stops. Takes f->maplock, ct->lock, then LK_MAP; call with
 * none held. */
static void file_flush(struct cachetier *ct, struct ct_file *f);

/* Was the tier's data directory removed (its last link gone) while open?
 * Asked only after a file operation in it failed. */
static int dir_gone(struct cachetier *ct)
{
	struct stat st;

	return fstat(ct->datafd, &st) == 0 && st.st_nlink == 0;
}

/* Said once a tier: the first map write that failed, and what it costs
 * (its units are fetched again after a restart; the bytes served stay
 * exact). Later failures are counted (map_write_errors), not logged. */
static void map_write_failed(struct cachetier *ct, struct ct_file *f, int err)
{
	if (atomic_exchange(&ct->map_fail_said, 1))
		return;
	fprintf(stderr,
		"shardfs: cache: cannot write the map of %s in %s/data: %s%s; retried once a "
		"second; until it is written its units are fetched again after a restart "
		"(counter map_write_errors)\n",
		f->key, ct->dir, strerror(-err),
		dir_gone(ct) ? " (the cache directory was removed under the mount)" : "");
}

void cachetier__file_flush(struct cachetier *ct, struct ct_file *f)
{
	int64_t t0 = cachetier__cpu_ns();

	file_flush(ct, f);
	atomic_fetch_add(&ct->flush_cpu_ns, (unsigned long long)(cachetier__cpu_ns() - t0));
}

static void file_flush(struct cachetier *ct, struct ct_file *f)
{
	char name[24];
	unsigned char *buf = NULL;
	int64_t now = cachetier__now_ns(), delay = delay_ns(ct), young_ns = 0;
	unsigned dirty, young = 0;
	size_t len = 0;
	int err, all;

	CT_OFF_LOOP();
	disk_mutex_lock(&f->maplock);
	cachetier__lock(ct);
	all = ct->stopping;
	disk_mutex_lock(&f->lock); /* the map batch */
	remap_take(f);
	if (!f->live || f->dirty == 0 || (!all && f->retry_ns && now < f->retry_ns) ||
	    (delay && !all && !flush_due_locked(ct, f, now))) {
		disk_mutex_unlock(&f->lock);
		disk_mutex_unlock(&ct->lock);
		disk_mutex_unlock(&f->maplock);
		return;
	}
	dirty = f->dirty;
	f->dirty = 0;
	f->dirty_ns = 0;
	f->map_ns = now;
	f->retry_ns = 0; /* set again below if this write fails */
	disk_mutex_unlock(&f->lock);
	disk_mutex_unlock(&ct->lock);
	snprintf(name, sizeof(name), "%s.map", f->hash);
	/* the snapshot is taken under LK_MAP: an eviction clears the state
	 * before it takes LK_MAP to unlink the map, so no map written here can
	 * claim a unit that is punched afterwards */
	/* bounded: a map write that cannot get LK_MAP is retried at the
	 * next batch instead of holding maplock (an eviction waits on it) */
	err = cachetier__ofd_lock(f->stfd, F_WRLCK, LK_MAP, LK_MAP_WAIT_MS);
	if (err == 0) {
		err = map_encode(f, now, delay, all, &buf, &len, &young, &young_ns);
		/* every unit buf claims was written before this: make them
		 * durable before any map says so */
		if (err == 0 && !buf) /* nothing left to record */
			err = unlinkat(f->dirfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
		else if (err == 0)
			err = fdatasync(f->datafd) < 0 ? -errno : 0;
		if (err == 0 && buf)
			err = disk_write_atomic(f->dirfd, name, buf, len, 0600);
		cachetier__ofd_lock(f->stfd, F_UNLCK, LK_MAP, 0);
	}
	atomic_fetch_add(err < 0 ? &ct->map_write_errors : &ct->map_writes, 1);
	if (err < 0)
		map_write_failed(ct, f, err);
	if (err < 0 || young) {
		/* failed: try again a batch later (MAP_RETRY_NS), not at once
		 * (a flusher that found it due again at once retried without
		 * pause for as long as the write failed: a cache directory
		 * removed under the mount); young units: named once they are
		 * old enough */
		disk_mutex_lock(&f->lock);
		f->dirty += err < 0 ? dirty : young;
		if (err < 0) {
			f->dirty_ns = 0;
			f->retry_ns = cachetier__now_ns() + MAP_RETRY_NS;
		} else if (!f->dirty_ns || young_ns < f->dirty_ns) {
			f->dirty_ns = young_ns;
		}
		disk_mutex_unlock(&f->lock);
	}
	disk_mutex_unlock(&f->maplock);
	free(buf);
}

/* ---- opening an object's data file ---- */

/* Undo a (failed) load: f stays a not-live entry without bytes. */
static void file_unload(struct ct_file *f)
{
	if (f->wrec) /* a fanotify mark goes through the data file's fd */
		cachetier__watch_drop_fd(f->w, f->wrec, f->datafd);
	f->w = NULL;
	f->wrec = NULL;
	f->wfail = 0;
	f->wown = 0;
	cachetier__dio_close(f);
	if (f->datafd >= 0)
		close(f->datafd);
	f->datafd = -1;
	cachetier__st_close(f);
	free(f->key);
	free((void *)f->ust);
	free((void *)f->pins);
	free(f->uerr);
	free(f->held);
	free(f->seen);
	free(f->uatime);
	free(f->unread);
	free(f->gap);
	free((void *)f->nu);
	free(f->fill_ns);
	free((void *)f->fp);
	free(f->fatime);
	f->fill_ns = NULL;
	f->fp = NULL;
	f->fatime = NULL;
	atomic_store(&f->fast_ok, 0);
	f->uatime = NULL;
	f->unread = NULL;
	f->gap = NULL;
	f->nu = NULL;
	f->key = NULL;
	f->ust = NULL;
	f->pins = NULL;
	f->uerr = NULL;
	f->held = NULL;
	f->seen = NULL;
	f->bytes = 0;
}

void cachetier__file_free(struct ct_file *f)
{
	if (!f)
		return;
	file_unload(f);
	disk_mutex_destroy(&f->maplock);
	disk_mutex_destroy(&f->lock);
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

int cachetier__file_hash(const char *key, const char *etag, uint64_t size, int64_t mtime,
			 uint32_t unit_bytes, char hash[17])
{
	char ident[4096 + 128], tag[BACKEND_VERSION_TAG];
	int n;

	/* the tag of a version with an ETag is the ETag: those files keep
	 * their names */
	backend_version_tag(etag, size, mtime, tag);
	n = snprintf(ident, sizeof(ident), "%s%c%s%c%llu%c%u", key, 0, tag, 0,
		     (unsigned long long)size, 0, unit_bytes);

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
		err = !key || !etag
			  ? -ENOMEM
			  : cachetier__file_hash(key, etag, m->size, m->mtime, m->unit_bytes, h);
		if (err == 0 && strcmp(h, hash) != 0)
			err = -EBADMSG; /* not this file's map (or an old naming) */
	}
	if (err == 0 && fstatat(dirfd, hash, data_st, 0) < 0)
		err = -EBADMSG;
	if (lost)
		*lost = 0;
	for (uint32_t c = 0; err == 0 && c < m->nunits; c++) {
		uint64_t off = (uint64_t)c * m->unit_bytes;
		uint64_t clen = m->size - off < m->unit_bytes ? m->size - off : m->unit_bytes;
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
	if (err == 0 && (m.size != f->size || m.unit_bytes != f->unit_bytes ||
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
		   (uint64_t)st.st_blocks * 512 > valid + (uint64_t)f->nunits * 4096) {
		/* units written but never recorded (a crash): free them */
		for (uint32_t c = 0; c < f->nunits; c++) {
			if (!(m.bitmap[c / 8] & (1u << (c % 8))) &&
			    cachetier__unit_off(f, c) < (uint64_t)st.st_size)
				fallocate(f->datafd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					  (off_t)cachetier__unit_off(f, c), (off_t)f->unit_bytes);
		}
	}
	cachetier__usage_add(ct, (int64_t)valid - (int64_t)old);
	err = cachetier__st_ready(f, err == 0 ? m.bitmap : NULL, err == 0 ? m.crcs : NULL, epoch);
	free(buf);
	return err;
}

/* Load f's identity, arrays and the units the state file says are valid
 * (f->opening is set, so nobody else touches f's live fields). Returns
 * the valid bytes, or a negative errno. */
static int64_t file_load(struct cachetier *ct, struct ct_file *f, const char *key, const char *etag,
			 uint64_t size, int64_t mtime, uint32_t unit_bytes)
{
	uint64_t nunits = (size + unit_bytes - 1) / unit_bytes, valid = 0;
	char name[24];
	int alone = 0, err;

	if (nunits > UINT32_MAX)
		return -EFBIG;
	f->key = strdup(key);
	f->ust = calloc(nunits ? nunits : 1, 1);
	f->pins = calloc(nunits ? nunits : 1, sizeof(*f->pins));
	f->uerr = calloc(nunits ? nunits : 1, sizeof(*f->uerr));
	f->held = calloc(nunits ? nunits : 1, 1);
	f->seen = calloc(nunits ? nunits : 1, 1);
	f->uatime = calloc(nunits ? nunits : 1, sizeof(*f->uatime));
	f->unread = calloc(nunits ? nunits : 1, 1);
	f->gap = calloc(nunits ? nunits : 1, 1);
	f->nu = calloc(nunits ? nunits : 1, sizeof(*f->nu));
	f->fill_ns = calloc(nunits ? nunits : 1, sizeof(*f->fill_ns));
	f->fp = calloc(nunits ? nunits : 1, sizeof(*f->fp));
	f->fatime = calloc(nunits ? nunits : 1, sizeof(*f->fatime));
	if (!f->key || !f->ust || !f->pins || !f->uerr || !f->held || !f->seen || !f->uatime ||
	    !f->unread || !f->gap || !f->nu || !f->fill_ns || !f->fp || !f->fatime)
		return -ENOMEM;
	snprintf(f->etag, sizeof(f->etag), "%s", etag);
	f->size = size;
	f->mtime = etag[0] ? 0 : mtime; /* the map keeps it only then */
	f->unit_bytes = unit_bytes;
	/* units of this process's chunk size form its sequential requests; an
	 * object of other units (an earlier mount's, loaded to be evicted)
	 * fills a unit per request */
	f->group = unit_bytes == ct->unit ? ct->upc : 1;
	f->nunits = (uint32_t)nunits;
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
	/* watched before any fill of it (cachetier_check.c, units_watch) */
	cachetier__units_watch_start(ct, f);
	if (alone) {
		err = file_init_alone(ct, f);
		if (err < 0)
			return err;
	}
	disk_mutex_lock(&f->lock); /* the states (cachetier__unit_set) */
	for (uint32_t c = 0; c < f->nunits; c++) {
		if (cachetier__st_get(f, c)) {
			cachetier__unit_set(f, c, UNIT_VALID);
			valid += cachetier__unit_len(f, c);
		}
	}
	disk_mutex_unlock(&f->lock);
	return (int64_t)valid;
}

/* Make f live (ct->lock held on entry and return, dropped while loading). */
static int file_activate(struct cachetier *ct, struct ct_file *f, const char *key, const char *etag,
			 uint64_t size, int64_t mtime, uint32_t unit_bytes)
{
	int64_t valid;

	f->opening = 1;
	disk_mutex_unlock(&ct->lock);
	valid = file_load(ct, f, key, etag, size, mtime, unit_bytes);
	cachetier__lock(ct);
	ct->used -= f->bytes;
	if (valid == -ENOSPC || valid == -EDQUOT) {
		/* no room for its state file (allocated at its first open):
		 * evict down to the reserve, as a fill would, and load again */
		file_unload(f);
		ct->free_known = 0;
		(void)cachetier__make_room(ct, 0, 0);
		disk_mutex_unlock(&ct->lock);
		valid = file_load(ct, f, key, etag, size, mtime, unit_bytes);
		cachetier__lock(ct);
	}
	f->opening = 0;
	if (valid < 0) {
		file_unload(f);
	} else {
		f->bytes = (uint64_t)valid;
		ct->used += f->bytes;
		f->live = 1;
		f->atime_ns = f->map_ns = cachetier__now_ns();
	}
	cachetier__ev_mark(ct, f); /* its units (cachetier_evheap.c) */
	pthread_cond_broadcast(&ct->unit_cond);
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
	disk_mutex_unlock(&ct->lock);
	err = cachetier__map_load(ct, f->dirfd, f->hash, &buf, &m, &st, NULL);
	if (err == 0) {
		key = strndup(m.key, m.keylen);
		etag = strndup(m.etag, m.etaglen);
		if (!key || !etag || m.etaglen >= sizeof(f->etag))
			err = -ENOMEM;
	}
	cachetier__lock(ct);
	/* a reader's cachetier__file_open may have started loading f while
	 * the lock was dropped: a second load would open a second state file
	 * description and replace f's fds and arrays under the first (a lock
	 * taken on the replaced fd, such as LK_MAP, would then never be
	 * released) */
	if (err == 0 && (f->opening || f->evicting))
		err = -EBUSY;
	if (err == 0)
		err = f->live ? 0 : file_activate(ct, f, key, etag, m.size, m.mtime, m.unit_bytes);
	free(key);
	free(etag);
	free(buf);
	return err;
}

int cachetier__file_open(struct cachetier *ct, const struct backend_objinfo *info,
			 struct ct_file **out)
{
	uint32_t unit_bytes;
	char hash[17];
	struct ct_file *f;
	int err;

	*out = NULL;
	/* an object of more than UNITS_MAX units (64 GiB of 64 KiB) keeps its
	 * state per chunk: the per-unit arrays would take 20 bytes a unit */
	unit_bytes = info->size / ct->unit > UNITS_MAX ? ct->cfg.chunk_bytes : ct->unit;
	err =
	    cachetier__file_hash(info->key, info->etag, info->size, info->mtime, unit_bytes, hash);
	if (err < 0)
		return err;

	cachetier__lock(ct);
	for (;;) {
		f = file_find(ct, ct->datafd, hash);
		if (!f || (!f->opening && !f->evicting))
			break;
		disk_cond_wait(&ct->unit_cond, &ct->lock);
	}
	if (f && f->live) {
		int same = strcmp(f->key, info->key) == 0 &&
			   backend_version_same(f->etag, f->size, f->mtime, info->etag, info->size,
						info->mtime);

		f->atime_ns = cachetier__now_ns();
		cachetier__ev_mark(ct, f);
		disk_mutex_unlock(&ct->lock);
		if (!same) /* a 64-bit hash collision between two live objects */
			return -EIO;
		*out = f;
		return 0;
	}
	if (!f) {
		f = calloc(1, sizeof(*f));
		if (!f) {
			disk_mutex_unlock(&ct->lock);
			return -ENOMEM;
		}
		memcpy(f->hash, hash, sizeof(hash));
		f->dirfd = ct->datafd;
		f->datafd = f->dfd = f->stfd = f->auxfd = -1;
		disk_mutex_init(&f->maplock, DISK_LOCK_CT_MAP);
		disk_mutex_init(&f->lock, DISK_LOCK_CT_FILE);
		f->next = ct->files;
		ct->files = f;
		cachetier__ev_link(ct, f);
	}
	err = file_activate(ct, f, info->key, info->etag, info->size, info->mtime, unit_bytes);
	if (err == 0)
		*out = f;
	disk_mutex_unlock(&ct->lock);
	return err;
}
