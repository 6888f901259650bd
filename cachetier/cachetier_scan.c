/*
 * cachetier_scan.c — what the cache directory holds, found at open and
 * when eviction runs out of known units (cachetier_evict.c).
 *
 * At open every source's data/ is scanned: valid maps become entries (for
 * LRU); what no valid map speaks for is removed unless a running process
 * uses it (cachetier__reap), and so are temp files of dead processes. The
 * first process on the directory (alone on the usage file) rebuilds the
 * usage counter from the maps and decoded copies of every source.
 *
 * Threads: scan runs in cachetier_open before any worker exists; rescan
 * with ct->lock held (at most once a second, from make_room).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cachetier_i.h"

int cachetier__tmp_drop(int dirfd, const char *name)
{
	char *end;
	long pid;

	errno = 0;
	pid = strtol(name + 5, &end, 10);
	if (errno || end == name + 5 || *end != '.' || pid <= 0 || pid > INT_MAX)
		return 0;
	return pid != getpid() && disk_pid_gone((pid_t)pid) && unlinkat(dirfd, name, 0) == 0;
}

int cachetier__is_hash(const char *s, size_t n)
{
	if (n != 16)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	}
	return 1;
}

/* A DIR stream of its own over directory dirfd; NULL with errno set. */
static DIR *dir_open(int dirfd)
{
	int fd = dup(dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (!d && fd >= 0) {
		int e = errno;

		close(fd);
		errno = e;
	}
	return d;
}

/* Does dirfd's data/ hold an entry for hash? ct->lock held or no thread. */
static struct ct_file *entry_find(struct cachetier *ct, int dirfd, const char *hash)
{
	for (struct ct_file *f = ct->files; f; f = f->next) {
		if (f->dirfd == dirfd && strcmp(f->hash, hash) == 0)
			return f;
	}
	return NULL;
}

/* One data/<hash>.map: a not-live entry with its bytes for LRU (the
 * object is opened when it is evicted). Adds its bytes to *total. */
static int scan_map(struct cachetier *ct, int dirfd, const char *hash, int foreign, uint64_t *total)
{
	char mapname[24];
	unsigned char *buf = NULL;
	struct stat st, mst;
	struct ct_file *f;
	struct ct_map m;
	int err;

	snprintf(mapname, sizeof(mapname), "%s.map", hash);
	err = cachetier__map_load(ct, dirfd, hash, &buf, &m, &st, NULL);
	if (err == 0 && fstatat(dirfd, mapname, &mst, 0) < 0)
		err = -EBADMSG;
	if (err < 0) {
		free(buf);
		return err;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		free(buf);
		return -ENOMEM;
	}
	memcpy(f->hash, hash, 17);
	f->dirfd = dirfd;
	f->foreign = foreign;
	f->datafd = f->dfd = f->stfd = f->auxfd = -1;
	f->bytes = cachetier__map_bytes(&m);
	f->atime_ns = (int64_t)mst.st_mtim.tv_sec * 1000000000LL + mst.st_mtim.tv_nsec;
	disk_mutex_init(&f->maplock, DISK_LOCK_CT_MAP);
	disk_mutex_init(&f->lock, DISK_LOCK_CT_FILE);
	f->next = ct->files;
	ct->files = f;
	cachetier__ev_link(ct, f);
	ct->used += f->bytes;
	*total += f->bytes;
	free(buf);
	return 0;
}

/* One source's data/ directory: an entry per valid map not listed yet;
 * what no valid map speaks for (data, map and state files) is removed
 * unless a running process uses it (cachetier__reap), and so are temp
 * files of dead processes. 'count': reaped bytes leave the usage (not
 * while it is being rebuilt). */
static int scan_data(struct cachetier *ct, int dirfd, int foreign, int count, uint64_t *total)
{
	DIR *d = dir_open(dirfd);
	struct dirent *de;
	int err = 0;

	if (!d)
		return -errno;
	/* pass 1: maps (and temp files) */
	while ((de = readdir(d)) && err == 0) {
		size_t n = strlen(de->d_name);
		char hash[17];

		if (strncmp(de->d_name, ".tmp.", 5) == 0)
			cachetier__tmp_drop(dirfd, de->d_name);
		else if (n == 20 && strcmp(de->d_name + 16, ".map") == 0 &&
			 cachetier__is_hash(de->d_name, 16)) {
			memcpy(hash, de->d_name, 16);
			hash[16] = '\0';
			if (!entry_find(ct, dirfd, hash)) {
				err = scan_map(ct, dirfd, hash, foreign, total);
				if (err != -ENOMEM)
					err = 0;
			}
		}
	}
	/* pass 2: data and state files no valid map speaks for */
	rewinddir(d);
	while ((de = readdir(d)) && err == 0) {
		size_t n = strlen(de->d_name);
		char hash[17];

		if (!cachetier__is_hash(de->d_name, n < 16 ? n : 16) ||
		    !(n == 16 || (n == 19 && strcmp(de->d_name + 16, ".st") == 0) ||
		      (n == 20 && strcmp(de->d_name + 16, ".map") == 0)))
			continue;
		memcpy(hash, de->d_name, 16);
		hash[16] = '\0';
		if (!entry_find(ct, dirfd, hash))
			cachetier__reap(ct, dirfd, hash, count);
	}
	closedir(d);
	return err;
}

/* Decoded copies of one source: every regular file but records and temp
 * files; an entry each (for LRU: last use = mtime). Returns their bytes.
 * The partial output of a decoder killed mid-way (.tmp.PID.N of a process
 * that no longer runs) is removed, as nothing else would ever free it;
 * with 'count' its bytes leave the usage. */
static uint64_t scan_decoded(struct cachetier *ct, int decfd, int count)
{
	DIR *d = dir_open(decfd);
	struct dirent *de;
	uint64_t sum = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		struct stat st;

		if (strncmp(de->d_name, ".tmp.", 5) == 0) {
			/* its writer counted it in the usage as it grew (dec_write) */
			if (fstatat(decfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    cachetier__tmp_drop(decfd, de->d_name) && count)
				cachetier__usage_add(ct, -(int64_t)st.st_size);
			continue;
		}
		if (!cachetier__is_hash(de->d_name, strlen(de->d_name)) ||
		    fstatat(decfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		sum += (uint64_t)st.st_size;
		{
			struct ct_dec *e = cachetier__dec_entry(ct, decfd, de->d_name);

			if (e && e->bytes == 0) {
				e->bytes = (uint64_t)st.st_size;
				e->atime_ns =
				    (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
			}
		}
	}
	closedir(d);
	return sum;
}

/* Every source directory under CACHE_DIR/v1: scan its data/ (own: ours)
 * and decoded/; with 'decoded', add the decoded copies' bytes to *total.
 * Other sources' directory fds are kept in ct->srcfds (data/, decoded/
 * pairs; entries refer to them). */
static int scan_sources(struct cachetier *ct, int count, int decoded, uint64_t *total)
{
	const char *own = strrchr(ct->dir, '/') + 1;
	DIR *d = dir_open(ct->v1fd);
	struct dirent *de;
	int err = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d)) && err == 0) {
		char path[40];
		int dfd = -1, decfd = -1;
		uint64_t dec;
		struct stat b;

		if (!cachetier__is_hash(de->d_name, strlen(de->d_name)))
			continue;
		if (strcmp(de->d_name, own) == 0) {
			dfd = ct->datafd;
			decfd = ct->decfd;
		} else {
			snprintf(path, sizeof(path), "%.16s/data", de->d_name);
			if (fstatat(ct->v1fd, path, &b, 0) < 0)
				continue; /* not a source directory (or not yet) */
			for (unsigned i = 0; i + 1 < ct->nsrcfds && dfd < 0; i += 2) {
				struct stat a;

				if (fstat(ct->srcfds[i], &a) == 0 && a.st_ino == b.st_ino &&
				    a.st_dev == b.st_dev) {
					dfd = ct->srcfds[i];
					decfd = ct->srcfds[i + 1];
				}
			}
			if (dfd < 0) {
				int *nfds = realloc(ct->srcfds, (ct->nsrcfds + 2) * sizeof(*nfds));

				if (!nfds) {
					err = -ENOMEM;
					break;
				}
				ct->srcfds = nfds;
				dfd = openat(ct->v1fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
				snprintf(path, sizeof(path), "%.16s/decoded", de->d_name);
				decfd = openat(ct->v1fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
				if (dfd < 0 || decfd < 0) {
					if (dfd >= 0)
						close(dfd);
					if (decfd >= 0)
						close(decfd);
					continue;
				}
				ct->srcfds[ct->nsrcfds++] = dfd;
				ct->srcfds[ct->nsrcfds++] = decfd;
			}
		}
		err = scan_data(ct, dfd, dfd != ct->datafd, count, total);
		dec = scan_decoded(ct, decfd, count);
		if (decfd == ct->decfd)
			atomic_store(&ct->decoded_used, dec);
		if (decoded)
			*total += dec;
	}
	closedir(d);
	return err;
}

void cachetier__rescan(struct cachetier *ct)
{
	int64_t now = cachetier__now_ns();
	uint64_t total = 0;

	if (now - ct->rescan_ns < 1000000000LL)
		return;
	ct->rescan_ns = now;
	/* with ct->lock held: rare (under pressure, at most once a second),
	 * and entries are added to ct->files */
	scan_sources(ct, 1, 0, &total);
}

/* Blobs a process wrote in pieces (cachetier_meta_create) and did not
 * commit before it was killed: their temp files in meta/. Others are
 * written whole and renamed at once, but left too by a kill mid-write. */
static void scan_meta(struct cachetier *ct)
{
	DIR *d = dir_open(ct->metafd);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, ".tmp.", 5) == 0)
			cachetier__tmp_drop(ct->metafd, de->d_name);
	}
	closedir(d);
}

int cachetier__scan(struct cachetier *ct)
{
	uint64_t total = 0;
	int alone = 0, err;

	scan_meta(ct);

	err = cachetier__usage_open(ct, ct->v1fd, &alone);
	if (err < 0)
		return err;
	/* alone: no other process runs on this directory, and none can start
	 * before usage_ready: the usage is rebuilt from the maps and the
	 * decoded copies of every source */
	err = scan_sources(ct, !alone, alone, &total);
	if (err == 0 && alone)
		err = cachetier__usage_ready(ct, total);
	return err;
}
