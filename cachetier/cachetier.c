/*
 * cachetier.c — the cache directory, and object handles that make a
 * stream's bytes readable from a file descriptor: a local source file, a
 * decoded copy (cachetier_decode.c) or, for remote objects, the unit
 * store (cachetier_map.c, capacity in cachetier_evict.c). The object
 * table is in cachetier_obj.c, reads of an object in cachetier_objread.c.
 *
 * Configuration: every field is the caller's (the mount's defaults, with
 * the reasons for them, are in fs/core/fs_opt.c's option table). cachetier_open
 * only clamps what cannot work, as cachetier.h says for each field.
 *
 * Derived at open, not configured: local_fds_max 0 means the soft
 * RLIMIT_NOFILE (fs raises it to the hard limit before opening the cache
 * tier) less a reserve for every other fd the process holds: /dev/fuse and
 * two splice-pipe fds per FUSE thread, curl's connections and libuv,
 * decoded copies and objects' data files, the log, directories while listing. The
 * reserve is a quarter of the limit, at least 128 and at most 4096 fds.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cachetier_i.h"

int cachetier_codec_sniff(const void *buf, size_t len)
{
	const unsigned char *p = buf;

	if (len >= 2 && p[0] == 0x1f && p[1] == 0x8b)
		return CACHETIER_GZIP;
	if (len >= 4 && p[0] == 0x28 && p[1] == 0xb5 && p[2] == 0x2f && p[3] == 0xfd)
		return CACHETIER_ZSTD;
	/* a skippable frame (pzstd starts with one); the decoder skips it */
	if (len >= 4 && (p[0] & 0xf0) == 0x50 && p[1] == 0x2a && p[2] == 0x4d && p[3] == 0x18)
		return CACHETIER_ZSTD;
	return -1;
}

void cachetier__note_version(struct cachetier *ct, enum ct_format kind, const char *name)
{
	static const char *const what[CT_FMT_COUNT] = {
	    [CT_FMT_MAP] = "chunk map",
	    [CT_FMT_REC] = "decode record",
	};
	static const char *const redo[CT_FMT_COUNT] = {
	    [CT_FMT_MAP] = "its chunks are fetched again",
	    [CT_FMT_REC] = "the shard is decoded again",
	};

	if (atomic_exchange(&ct->version_noted[kind], 1))
		return;
	backend_log(ct->be, BACKEND_LOG_WARN,
		    "cache %s: %s %s is of another version: not used, %s (others like it are not "
		    "logged)",
		    ct->dir, what[kind], name, redo[kind]);
}

void cachetier__note_corrupt(struct cachetier *ct, const char *file, const char *key, uint32_t n,
			     const char *why, const char *then)
{
	atomic_fetch_add(&ct->units_corrupt, n);
	if (atomic_exchange(&ct->corrupt_noted, 1))
		return;
	backend_log(ct->be, BACKEND_LOG_WARN,
		    "cache %s: %u %s of %s (%s): %s: %s (cache_units_corrupt counts them; "
		    "others like it are not logged)",
		    ct->dir, n, n == 1 ? "unit" : "units", file, key ? key : "?", why, then);
}

void cachetier__hash_hex(const void *data, size_t len, char out[17])
{
	snprintf(out, 17, "%016llx", (unsigned long long)disk_fnv64(data, len));
}

#define OBJ_TAB_MIN 256

static unsigned local_fds_default(void)
{
	struct rlimit rl;
	uint64_t lim = 1u << 20, reserve;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		lim = (uint64_t)rl.rlim_cur;
	reserve = lim / 4;
	if (reserve < 128)
		reserve = 128;
	if (reserve > 4096)
		reserve = 4096;
	if (lim < reserve + 16)
		return 16; /* a tiny limit: a few local fds, and hope */
	lim -= reserve;
	return lim > (1u << 30) ? 1u << 30 : (unsigned)lim;
}

static int open_subdir(int dirfd, const char *name, int *out)
{
	if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
		return -errno;
	*out = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return *out < 0 ? -errno : 0;
}

/* Sanity clamps of ct->cfg (the defaults are the caller's) and what
 * follows from it: the unit of random fills (ct->upc, ct->unit). */
static void config_clamp(struct cachetier *ct)
{
	if (!ct->cfg.max_decode_ratio) /* 0: no ratio bound */
		ct->cfg.max_decode_ratio = UINT_MAX;
	if (!ct->cfg.max_decoded_bytes) /* 0: no size bound */
		ct->cfg.max_decoded_bytes = UINT64_MAX;
	if (!ct->cfg.min_free_percent || ct->cfg.min_free_percent > 100) /* 0: no cap */
		ct->cfg.min_free_percent = 100;
	if (ct->cfg.chunk_bytes > 1u << 30) /* one request each, refetched whole */
		ct->cfg.chunk_bytes = 1u << 30;
	/* whole 4 KiB blocks (at least one), so punching a chunk frees exactly
	 * its blocks */
	ct->cfg.chunk_bytes = ct->cfg.chunk_bytes ? (ct->cfg.chunk_bytes + 4095u) & ~4095u : 4096u;
	/* a random miss that does not fit fills only the units it reads
	 * (cachetier_read.c): 64 KiB (at most 128 a chunk, in whole 4 KiB
	 * blocks), so a random read of a 100 KB sample fetches about 1.6x its
	 * bytes; chunks under 512 KiB: an eighth of the chunk (or all of it) */
	ct->upc = ct->cfg.chunk_bytes % (8u * 4096u) == 0 ? 8u : 1u;
	if (ct->cfg.chunk_bytes >= 8u * 65536u) {
		uint32_t blocks = ct->cfg.chunk_bytes / 4096u;

		ct->upc = ct->cfg.chunk_bytes / 65536u > 128u ? 128u : ct->cfg.chunk_bytes / 65536u;
		while (blocks % ct->upc) /* whole blocks a unit */
			ct->upc--;
	}
	ct->unit = ct->cfg.chunk_bytes / ct->upc;
	if (!ct->cfg.fill_threads) /* fills must run somewhere */
		ct->cfg.fill_threads = 1;
	if (ct->cfg.small_fills < ct->cfg.fill_threads - 1)
		ct->cfg.small_fills = ct->cfg.fill_threads > 1 ? ct->cfg.fill_threads - 1 : 1;
}

int cachetier_open(struct cachetier **out, const struct cachetier_config *cfg, struct backend *be)
{
	struct cachetier *ct;
	struct statvfs sv;
	char hash[17], path[PATH_MAX];
	const char *source = cfg->source ? cfg->source : backend_describe(be);
	int err, n;

	*out = NULL;
	ct = calloc(1, sizeof(*ct));
	if (!ct)
		return -ENOMEM;
	ct->be = be;
	ct->dirfd = ct->metafd = ct->decfd = ct->datafd = ct->v1fd = ct->usagefd = -1;
	disk_mutex_init(&ct->lock, DISK_LOCK_CT);
	disk_mutex_init(&ct->fds.fd_lock, DISK_LOCK_CT_FD);
	disk_mutex_init(&ct->acct_lock, DISK_LOCK_CT_ACCT);
	disk_mutex_init(&ct->wr.bpool_lock, DISK_LOCK_CT_BPOOL);
	cachetier__buf_pool_init(ct);
	pthread_cond_init(&ct->cond, NULL);
	pthread_cond_init(&ct->unit_cond, NULL);
	pthread_cond_init(&ct->room_cond, NULL);
	pthread_cond_init(&ct->work_cond, NULL);
	pthread_cond_init(&ct->flush_cond, NULL);
	ct->dq_tail = &ct->dq;
	ct->rq_tail = &ct->rq;
	ct->pf_tail = &ct->pf;
	ct->pr_tail = &ct->pr;
	ct->cfg = *cfg;
	ct->wr.dio.on = cfg->direct_fills != 0; /* prefetch fills (cachetier_direct.c) */
	config_clamp(ct);
	if (!ct->cfg.local_fds_max)
		ct->cfg.local_fds_max = local_fds_default();
	ct->fds.fd_max = ct->cfg.local_fds_max;
	ct->obj_tab_size = OBJ_TAB_MIN;
	ct->obj_tab = calloc(ct->obj_tab_size, sizeof(*ct->obj_tab));
	ct->watch = cachetier__watch_new();
	if (!ct->obj_tab || !ct->watch) {
		err = -ENOMEM;
		goto fail;
	}
	ct->cfg.cache_dir = NULL; /* not kept: the caller's strings */
	ct->cfg.source = NULL;

	cachetier__hash_hex(source, strlen(source), hash);
	n = snprintf(path, sizeof(path), "%s/v1/%s", cfg->cache_dir, hash);
	if (n < 0 || (size_t)n >= sizeof(path)) {
		err = -ENAMETOOLONG;
		goto fail;
	}
	err = disk_mkdirs(path, 0700);
	if (err < 0)
		goto fail;
	ct->dir = strdup(path);
	path[n - 17] = '\0'; /* CACHE_DIR/v1 */
	ct->v1fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ct->v1fd < 0) {
		err = -errno;
		goto fail;
	}
	path[n - 17] = '/';
	ct->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!ct->dir || ct->dirfd < 0) {
		err = ct->dir ? -errno : -ENOMEM;
		goto fail;
	}
	/* the reserve scales with the filesystem (defaults above) */
	if (fstatvfs(ct->dirfd, &sv) == 0) {
		uint64_t pct = (uint64_t)sv.f_blocks * sv.f_frsize / 100 * ct->cfg.min_free_percent;

		if (pct < ct->cfg.min_free_bytes)
			ct->cfg.min_free_bytes = pct;
	}
	err = open_subdir(ct->dirfd, "meta", &ct->metafd);
	if (err < 0)
		goto fail;
	err = open_subdir(ct->dirfd, "decoded", &ct->decfd);
	if (err < 0)
		goto fail;
	err = open_subdir(ct->dirfd, "data", &ct->datafd);
	if (err < 0)
		goto fail;
	err = cachetier__scan(ct);
	if (err < 0)
		goto fail;
	/* the puncher before the fill workers: their evictions hand it punches */
	err = cachetier__punch_start(ct);
	if (err < 0)
		goto fail;
	err = cachetier__units_start(ct);
	if (err < 0)
		goto fail;
	/* For humans looking at the cache directory: which source is this. */
	err = disk_write_atomic(ct->dirfd, "source", source, strlen(source), 0600);
	if (err < 0)
		goto fail;
	*out = ct;
	return 0;
fail:
	cachetier_close(ct);
	return err;
}

void cachetier_cancel(struct cachetier *ct)
{
	if (!ct)
		return;
	/* the flag that cachetier__units_stop sets: workers leave their loop,
	 * waiting readers leave read_begin with -ECANCELED */
	disk_mutex_lock(&ct->lock);
	__atomic_store_n(&ct->stopping, 1, __ATOMIC_RELEASE); /* fill_claim reads it unlocked */
	pthread_cond_broadcast(&ct->work_cond);
	cachetier__units_wake(ct);
	pthread_cond_broadcast(&ct->room_cond);
	pthread_cond_broadcast(&ct->flush_cond);
	disk_mutex_unlock(&ct->lock);
}

void cachetier_close(struct cachetier *ct)
{
	if (!ct)
		return;
	cachetier__batch_stop(ct); /* batch fill requests use the files */
	/* every queued punch done; evictions from here on punch themselves */
	cachetier__punch_stop(ct);
	/* joins the fill workers, records every filled unit in its map */
	cachetier__units_stop(ct);
	cachetier__punch_free(ct);
	/* Objects still referenced are the caller's bug; release their fds. */
	for (size_t i = 0; ct->obj_tab && i < ct->obj_tab_size; i++) {
		while (ct->obj_tab[i]) {
			struct cachetier_obj *o = ct->obj_tab[i];

			ct->obj_tab[i] = o->next;
			cachetier__obj_free(ct, o);
		}
	}
	free(ct->obj_tab);
	while (ct->decs) {
		struct ct_dec *d = ct->decs;

		ct->decs = d->next;
		free(d);
	}
	cachetier__usage_close(ct);
	for (unsigned i = 0; i < ct->nsrcfds; i++)
		close(ct->srcfds[i]);
	free(ct->srcfds);
	if (ct->v1fd >= 0)
		close(ct->v1fd);
	if (ct->datafd >= 0)
		close(ct->datafd);
	if (ct->decfd >= 0)
		close(ct->decfd);
	if (ct->metafd >= 0)
		close(ct->metafd);
	cachetier__watch_close(ct->watch);
	if (ct->dirfd >= 0)
		close(ct->dirfd);
	pthread_cond_destroy(&ct->work_cond);
	pthread_cond_destroy(&ct->flush_cond);
	pthread_cond_destroy(&ct->unit_cond);
	pthread_cond_destroy(&ct->room_cond);
	pthread_cond_destroy(&ct->cond);
	disk_mutex_destroy(&ct->wr.bpool_lock);
	disk_mutex_destroy(&ct->fds.fd_lock);
	disk_mutex_destroy(&ct->acct_lock);
	disk_mutex_destroy(&ct->lock);
	free(ct->dir);
	free(ct);
}

const char *cachetier_dir(const struct cachetier *ct)
{
	return ct->dir;
}

/* The bytes of this process's fills in flight but own's that a statvfs
 * made now does not have: reserved less the bytes written and not landed
 * (wrote: ct->wr_bytes read before that statvfs; cachetier__resv_unwritten). */
static uint64_t pend_fresh(struct cachetier *ct, uint64_t own, uint64_t wrote)
{
	struct ct_room r;
	uint64_t resv;

	cachetier__acct_get(ct, &r);
	resv = cachetier__resv_unwritten(&r, wrote);
	return resv > own ? resv - own : 0;
}

/* The bytes of this process's fills in flight but own's that the estimate
 * (the last statvfs's answer less used, the bytes made room for since:
 * the fills begun since, whole) does not have: of the fills begun before
 * that statvfs, the bytes not written at it. Reserved plus wr_gone is
 * every byte reserved since open but those that left reserved unwritten
 * here (a failed run's rest, a unit another process filled); less
 * free_wrote (ct->wr_bytes read just before the statvfs: the written
 * bytes it has, landed or not), own and used, that is the fills begun
 * before it less their bytes written by then, landed since or not. Not
 * cachetier__resv_unwritten(&r, free_wrote): its written part stops at 0
 * once fills begun since land more bytes than were written and not
 * landed at the statvfs, and a landed fill begun since, in used and out
 * of reserved, was then taken off the others' bytes (counted not at all,
 * as before free_wrote). A look between a unit's wr_gone and its landing
 * counts its bytes twice, never none. ct->lock held (used, free_wrote). */
static uint64_t pend_since(struct cachetier *ct, uint64_t own)
{
	struct ct_room r;
	uint64_t have, used = ct->room_bytes - ct->free_base;

	if (!ct->free_known) /* a statvfs is due: the fills' bytes not written */
		return pend_fresh(ct, own, atomic_load(&ct->wr_bytes));
	cachetier__acct_get(ct, &r);
	have = ct->free_wrote + own + used;
	return r.reserved + r.wr_gone > have ? r.reserved + r.wr_gone - have : 0;
}

uint64_t cachetier__disk_free(struct cachetier *ct, uint64_t len, uint64_t own)
{
	uint64_t calls = ct->free_calls, pend, avail;
	uint64_t wrote = atomic_load(&ct->wr_bytes); /* before a statvfs made below */

	/* what the estimate lacks now: its decision whether a statvfs is due
	 * is made with each byte counted once too */
	pend = pend_since(ct, own);
	avail = cachetier__disk_avail(ct, ct->cfg.min_free_bytes + len + pend);
	if (avail == UINT64_MAX)
		return avail;
	/* a statvfs made now has the reserved bytes written before it (a
	 * unit leaves reserved as it lands, and its bytes written before
	 * that are on the disk: taken off reserved, not counted twice); the
	 * estimate's answer is the one its decision was made with */
	if (ct->free_calls != calls)
		pend = pend_fresh(ct, own, wrote);
	return avail > pend ? avail - pend : 0;
}

int cachetier_disk(struct cachetier *ct, uint64_t *avail_bytes, uint64_t *reserve_bytes)
{
	struct statvfs sv;

	*reserve_bytes = ct->cfg.min_free_bytes;
	*avail_bytes = 0;
	if (fstatvfs(ct->dirfd, &sv) < 0)
		return -errno;
	*avail_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
	return 0;
}

void cachetier_get_stats(struct cachetier *ct, struct cachetier_stats *st)
{
	st->decoded_streams = ct->decoded_streams;
	st->decoded_bytes = ct->decoded_bytes;
	st->decoded_reused = ct->decoded_reused;
	st->meta_reads = ct->meta_reads;
	st->meta_writes = ct->meta_writes;
	disk_mutex_lock(&ct->lock);
	st->hits = ct->hits + atomic_load(&ct->hits_fast);
	st->misses = ct->misses;
	st->miss_wait_ms = ct->miss_wait_ns / 1000000;
	st->bytes_fetched = ct->bytes_fetched;
	st->fills = ct->fills;
	st->fills_inflight = ct->fills_inflight;
	st->fills_queued = ct->rd_queued;
	for (unsigned i = 0; i < ct->nslots; i++) /* taken, not started: f still NULL */
		st->fills_queued += ct->slots[i].busy && !ct->slots[i].f;
	st->fill_errors = ct->fill_errors;
	st->readahead_fills = ct->readahead_fills;
	st->queued_waits = ct->queued_waits;
	st->unfit_bytes = ct->unfit_bytes;
	st->evictions = ct->evictions;
	st->evicted_bytes = ct->evicted_bytes;
	st->decoded_evictions = ct->decoded_evictions;
	st->evict_cpu_ns = atomic_load(&ct->evict_cpu_ns);
	st->room_statfs = ct->free_calls;
	st->flush_cpu_ns = atomic_load(&ct->flush_cpu_ns);
	st->map_writes = atomic_load(&ct->map_writes);
	st->map_write_errors = atomic_load(&ct->map_write_errors);
	st->punches = atomic_load(&ct->punches);
	st->punches_queued = ct->pun ? atomic_load(&ct->pun->queued) : 0;
	st->punches_pending = ct->pun ? atomic_load(&ct->pun->pending) : 0;
	st->punch_batches = ct->pun ? atomic_load(&ct->pun->wakes) : 0;
	st->punch_cpu_ns = ct->pun ? atomic_load(&ct->pun->cpu_ns) : 0;
	st->punch_tier_locks = ct->pun ? atomic_load(&ct->pun->tier_locks) : 0;
	st->evict_units = ct->ev.units;
	st->evict_looked = ct->ev.looked;
	st->evicting_waits = ct->evicting_waits;
	st->room_waits = ct->room_waits;
	st->room_wait_ms = ct->room_wait_ns / 1000000;
	st->room_make_ms = ct->room_make_ns / 1000000;
	{
		unsigned long long w, ns;

		disk_mutex_waits(&ct->lock, &w, &ns);
		st->tier_lock_waits = w;
		st->tier_lock_wait_ms = ns / 1000000;
		st->file_lock_waits = st->file_lock_wait_ms = 0;
		for (const struct ct_file *f = ct->files; f; f = f->next) {
			disk_mutex_waits(&f->lock, &w, &ns);
			st->file_lock_waits += w;
			st->file_lock_wait_ms += ns; /* ns until the sum is made */
		}
		st->file_lock_wait_ms /= 1000000;
	}
	st->peer_units = ct->peer_units;
	st->weak_probes = ct->weak_probes;
	st->weak_changed = ct->weak_changed;
	st->peer_waits = ct->peer_waits;
	st->work_wakes = ct->work_wakes;
	st->fill_writes = atomic_load(&ct->wr.fill_writes);
	st->fill_publishes = ct->wr.fill_publishes;
	st->fill_locked_calls = ct->wr.wlocked_calls;
	st->direct_bytes = atomic_load(&ct->wr.dio.bytes);
	st->direct_fallbacks = atomic_load(&ct->wr.dio.fallbacks);
	st->fill_bufs_queued = atomic_load(&ct->wr.wq_bufs);
	st->fill_pool_maps = atomic_load(&ct->wr.buf_chunks);
	st->fill_writer_locks = atomic_load(&ct->wr.wlock_takes);
	st->fill_writer_busy = atomic_load(&ct->wr.wlock_busy);
	st->fill_worker_busy = atomic_load(&ct->wk_busy);
	st->workers_waiting = ct->work_idle > ct->work_woken ? ct->work_idle - ct->work_woken : 0;
	st->unit_read_locks = ct->unit_read_locks;
	st->unit_waiters = ct->unit_waiters;
	st->unit_waiter_wakes = ct->unit_waiter_wakes;
	st->unit_waits_quiet = ct->unit_waits_quiet;
	st->read_locks = atomic_load_explicit(&ct->read_locks, memory_order_relaxed);
	st->read_file_checks = atomic_load_explicit(&ct->read_file_checks, memory_order_relaxed);
	st->lock_requests = ct->lock_requests;
	st->lock_releases = ct->lock_releases;
	st->prefetch_withdrawn = ct->pf_withdrawn;
	st->units_corrupt = atomic_load(&ct->units_corrupt);
	st->units_checked = atomic_load(&ct->units_checked);
	st->watch_own = atomic_load(&ct->watch_own);
	st->bypass_reads = atomic_load(&ct->bypass_reads);
	st->bypass_bytes = atomic_load(&ct->bypass_bytes);
	/* the whole directory: every process and source sharing it */
	st->bytes_used = cachetier__usage_get(ct);
	st->bytes_limit = ct->cfg.cache_size_bytes;
	disk_mutex_unlock(&ct->lock);
	disk_mutex_lock(&ct->fds.fd_lock);
	st->local_fds_open = ct->fds.fd_open;
	st->local_fd_reopens = ct->fds.fd_reopens;
	disk_mutex_unlock(&ct->fds.fd_lock);
}
