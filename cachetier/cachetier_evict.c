/*
 * cachetier_evict.c — capacity of the cache tier: how many bytes it holds,
 * and eviction of least recently used objects when a fill needs room.
 *
 * Usage = bytes of valid chunks (ct->used) + fills in flight (ct->reserved)
 * + decoded copies (ct->decoded_used) + bytes being evicted (ct->evicting:
 * taken off 'used' when chosen, so no two evictions choose them, but on
 * disk until punched; a fill that fits once they are gone waits for them).
 * A fill reserves its chunk, then, while usage exceeds cfg.cache_size_bytes
 * or the filesystem's free space (statvfs) would drop below
 * cfg.min_free_bytes, evicts the least recently used object (last
 * read_begin or open; scanned objects: their map's mtime): every valid
 * chunk of it that no reader has pinned. An object of a previous session
 * (not opened now) goes whole: map, then data file. Decoded copies count
 * but are never evicted (they are rebuilt only by a full decode; a later
 * issue may add them).
 *
 * Full cache: when nothing evictable is left (every valid chunk pinned by
 * a reader), the fill goes ahead into its file anyway and the cache runs
 * over its limit; the next fills evict it back down as pins are released.
 * A read never fails because the cache is full. With readers pinning at
 * most P bytes, the cache stays within max(limit, P) + one chunk per fill
 * thread.
 *
 * At open the usage is rebuilt by scanning the maps in data/: valid maps are
 * counted (and bytes of their data files beyond the valid chunks, left by
 * a crash, are punched out); data files without a valid map, and temp
 * files of dead processes, are removed.
 *
 * Threads: make_room runs on fill workers with ct->lock held and drops it
 * around file operations (lock order in cachetier_i.h); scan runs in
 * cachetier_open before any worker exists.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cachetier_i.h"

int64_t cachetier__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint64_t file_chunk_len(const struct cachetier *ct, const struct ct_file *f, uint32_t c)
{
	uint64_t off = (uint64_t)c * ct->cfg.chunk_bytes;

	return f->size - off < ct->cfg.chunk_bytes ? f->size - off : ct->cfg.chunk_bytes;
}

/* The least recently used entry with bytes not yet tried in this round. */
static struct ct_file *victim(struct cachetier *ct)
{
	struct ct_file *best = NULL;

	for (struct ct_file *f = ct->files; f; f = f->next) {
		if (f->bytes == 0 || f->opening || f->evicting || f->evict_round == ct->evict_round)
			continue;
		if (!best || f->atime_ns < best->atime_ns)
			best = f;
	}
	return best;
}

/* Evict what can go of f; returns the bytes freed. ct->lock held on entry
 * and return, dropped in between. */
static uint64_t evict(struct cachetier *ct, struct ct_file *f)
{
	char name[24];
	uint32_t *list = NULL, n = 0;
	uint64_t freed = 0;
	int had_map;

	f->evict_round = ct->evict_round;
	if (f->live) {
		list = malloc((size_t)f->nchunks * sizeof(*list));
		if (!list)
			return 0;
		for (uint32_t c = 0; c < f->nchunks; c++) {
			if (f->cst[c] == CH_VALID && f->pins[c] == 0) {
				f->cst[c] = CH_EVICTING;
				list[n++] = c;
				freed += file_chunk_len(ct, f, c);
			}
		}
		if (n == 0) {
			free(list);
			return 0;
		}
	} else {
		freed = f->bytes;
	}
	f->evicting = 1;
	f->bytes -= freed;
	ct->used -= freed;
	ct->evicting += freed;
	ct->evictions++;
	ct->evicted_bytes += freed;
	pthread_mutex_unlock(&ct->lock);

	/* the map goes first and durably: no map may claim a punched chunk */
	pthread_mutex_lock(&f->maplock);
	snprintf(name, sizeof(name), "%s.map", f->hash);
	had_map = unlinkat(ct->datafd, name, 0) == 0;
	if (had_map)
		fsync(ct->datafd);
	if (f->live) {
		for (uint32_t i = 0; i < n; i++) {
			/* Fails only where holes are unsupported: the bytes stay
			 * on disk unaccounted, but are never served. */
			fallocate(f->datafd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				  (off_t)((uint64_t)list[i] * ct->cfg.chunk_bytes),
				  (off_t)file_chunk_len(ct, f, list[i]));
		}
	} else {
		unlinkat(ct->datafd, f->hash, 0);
	}
	pthread_mutex_unlock(&f->maplock);

	pthread_mutex_lock(&ct->lock);
	f->evicting = 0;
	ct->evicting -= freed;
	if (f->live) {
		unsigned valid = 0;

		for (uint32_t i = 0; i < n; i++)
			f->cst[list[i]] = CH_EMPTY;
		for (uint32_t c = 0; c < f->nchunks; c++)
			valid += f->cst[c] == CH_VALID;
		if (had_map && valid)
			f->dirty += valid; /* the unlinked map recorded some of them */
	} else {
		/* not live and not opening: nobody holds f; openers that waited
		 * look it up again */
		for (struct ct_file **pp = &ct->files; *pp; pp = &(*pp)->next) {
			if (*pp == f) {
				*pp = f->next;
				break;
			}
		}
		pthread_mutex_destroy(&f->maplock);
		free(f);
	}
	pthread_cond_broadcast(&ct->chunk_cond);
	free(list);
	return freed;
}

void cachetier__make_room(struct cachetier *ct, uint64_t len)
{
	uint64_t want_free = 0;
	struct statvfs sv;

	/* statvfs without the lock: it is a syscall, and approximate anyway */
	pthread_mutex_unlock(&ct->lock);
	if (fstatvfs(ct->datafd, &sv) == 0) {
		uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;

		if (avail < ct->cfg.min_free_bytes + len)
			want_free = ct->cfg.min_free_bytes + len - avail;
	}
	pthread_mutex_lock(&ct->lock);
	ct->evict_round++;
	for (;;) {
		uint64_t total = ct->used + ct->reserved + atomic_load(&ct->decoded_used);
		struct ct_file *f;
		uint64_t freed;

		if (total + ct->evicting <= ct->cfg.cache_size_bytes && want_free == 0)
			break;
		if (total <= ct->cfg.cache_size_bytes && want_free == 0) {
			/* evictions running on other threads make the room; their
			 * bytes leave the disk when they finish: wait, do not write
			 * over them (nor evict more than needed) */
			pthread_cond_wait(&ct->chunk_cond, &ct->lock);
			continue;
		}
		f = victim(ct);
		if (!f)
			break; /* everything left is pinned: fill over the limit */
		freed = evict(ct, f);
		want_free = freed >= want_free ? 0 : want_free - freed;
	}
}

/* Drop a temp file of a process that no longer runs. */
static void scan_tmp(int dirfd, const char *name)
{
	char *end;
	long pid;

	errno = 0;
	pid = strtol(name + 5, &end, 10);
	if (errno || end == name + 5 || *end != '.' || pid <= 0)
		return;
	if (pid != getpid() && kill((pid_t)pid, 0) < 0 && errno == ESRCH)
		unlinkat(dirfd, name, 0);
}

static int is_hash(const char *s, size_t n)
{
	if (n != 16)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	}
	return 1;
}

/* One data/<hash>.map: count it, or remove it and its data file. */
static int scan_map(struct cachetier *ct, const char *hash)
{
	char mapname[24];
	unsigned char *buf = NULL;
	struct ct_file *f = NULL;
	struct stat st, mst;
	struct ct_map m;
	size_t len = 0;
	uint64_t bytes = 0, end = 0;
	int fd = -1, err;

	snprintf(mapname, sizeof(mapname), "%s.map", hash);
	err = cachetier__map_read(ct->datafd, mapname, &buf, &len);
	if (err == -ENOMEM)
		return err;
	if (err == 0)
		err = cachetier__map_parse(buf, len, &m);
	if (err == 0 && m.chunk_bytes != ct->cfg.chunk_bytes)
		err = -ESTALE; /* another chunk size: start over */
	if (err == 0) {
		fd = openat(ct->datafd, hash, O_RDWR | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) < 0 || fstatat(ct->datafd, mapname, &mst, 0) < 0)
			err = -EBADMSG;
	}
	if (err == 0) {
		bytes = cachetier__map_bytes(&m);
		for (uint32_t c = 0; c < m.nchunks; c++) {
			if (m.bitmap[c / 8] & (1u << (c % 8)))
				end = (uint64_t)c * m.chunk_bytes +
				      (m.size - (uint64_t)c * m.chunk_bytes < m.chunk_bytes
					   ? m.size - (uint64_t)c * m.chunk_bytes
					   : m.chunk_bytes);
		}
		if ((uint64_t)st.st_size < end)
			err = -EBADMSG;
	}
	if (err == 0 && (uint64_t)st.st_blocks * 512 > bytes + (uint64_t)m.nchunks * 4096) {
		/* chunks written but never recorded (a crash): free them */
		for (uint32_t c = 0; c < m.nchunks; c++) {
			uint64_t off = (uint64_t)c * m.chunk_bytes;

			if (!(m.bitmap[c / 8] & (1u << (c % 8))) && off < (uint64_t)st.st_size)
				fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					  (off_t)off, (off_t)m.chunk_bytes);
		}
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	if (err < 0) {
		unlinkat(ct->datafd, mapname, 0);
		unlinkat(ct->datafd, hash, 0);
		return 0;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	memcpy(f->hash, hash, 17);
	f->datafd = -1;
	f->bytes = bytes;
	f->atime_ns = (int64_t)mst.st_mtim.tv_sec * 1000000000LL + mst.st_mtim.tv_nsec;
	pthread_mutex_init(&f->maplock, NULL);
	f->next = ct->files;
	ct->files = f;
	ct->used += bytes;
	return 0;
}

static int scan_data(struct cachetier *ct)
{
	int fd = dup(ct->datafd), err = 0;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	/* pass 1: maps (and temp files) */
	while ((de = readdir(d)) && err == 0) {
		size_t n = strlen(de->d_name);
		char hash[17];

		if (strncmp(de->d_name, ".tmp.", 5) == 0)
			scan_tmp(ct->datafd, de->d_name);
		else if (n == 20 && strcmp(de->d_name + 16, ".map") == 0 &&
			 is_hash(de->d_name, 16)) {
			memcpy(hash, de->d_name, 16);
			hash[16] = '\0';
			err = scan_map(ct, hash);
		}
	}
	/* pass 2: data files no valid map speaks for */
	rewinddir(d);
	while ((de = readdir(d)) && err == 0) {
		int known = 0;

		if (!is_hash(de->d_name, strlen(de->d_name)))
			continue;
		for (struct ct_file *f = ct->files; f && !known; f = f->next)
			known = strcmp(f->hash, de->d_name) == 0;
		if (!known)
			unlinkat(ct->datafd, de->d_name, 0);
	}
	closedir(d);
	return err;
}

/* Decoded copies: every regular file but records and temp files. */
static int scan_decoded(struct cachetier *ct)
{
	int fd = dup(ct->decfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	uint64_t sum = 0;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		struct stat st;

		if (!is_hash(de->d_name, strlen(de->d_name)) ||
		    fstatat(ct->decfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		sum += (uint64_t)st.st_size;
	}
	closedir(d);
	atomic_store(&ct->decoded_used, sum);
	return 0;
}

int cachetier__scan(struct cachetier *ct)
{
	int err = scan_data(ct);

	return err < 0 ? err : scan_decoded(ct);
}
