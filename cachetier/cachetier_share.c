/*
 * cachetier_share.c — what several processes on one cache directory share:
 * the usage counter of the whole directory, and per remote object a state
 * file that says which units are present and who is filling, pinning or
 * evicting them. The protocol itself is described in cachetier/README.md
 * ("Sharing one cache directory"); this file holds its primitives.
 *
 * Two kinds of shared file, both mapped MAP_SHARED and changed only with
 * atomic operations (so a process killed with -9 never leaves a torn
 * field), and both guarded by open-file-description locks (F_OFD_SETLK),
 * which the kernel drops when the last fd of a dead process closes:
 *
 *   CACHE_DIR/v1/usage        bytes cached in the whole directory (every
 *                             source), and an epoch that changes each time
 *                             the counter is rebuilt from the disk.
 *   <source>/data/<hash>.st   one object: header, then one byte per unit
 *                             (ST_VALID: its bytes are in data/<hash>),
 *                             then (at a multiple of 4) a u32 CRC32C per
 *                             unit, stored before its byte says valid.
 *
 * Presence: each process that uses a shared file holds a read lock on its
 * byte LK_PRESENCE. A process that gets the write lock there is alone: it
 * (re)initialises the file from the durable truth (the maps on disk), sets
 * 'ready', and converts its lock to a read lock. Nobody else reads the
 * file before 'ready'. Files are never unlinked while a process might use
 * them: only under the write presence lock, and an opener checks after
 * locking that the file it locked is still the one at the path.
 *
 * Threads: any; no function here takes ct->lock. Lock waits poll (with a
 * growing sleep up to 20 ms) so that cachetier_close is never stuck behind
 * another process.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cachetier_i.h"

#define USAGE_MAGIC   "SHUSAGE\1"
#define USAGE_VERSION 1u
#define USAGE_BYTES   4096u
/* usage file fields */
#define U_VERSION 8  /* u32 */
#define U_READY	  12 /* u32, atomic */
#define U_EPOCH	  16 /* u64, atomic */
#define U_USED	  24 /* i64, atomic: bytes of valid units and decoded copies */
#define U_WANT	  32 /* u32, atomic: release requests posted in the directory */

#define ST_MAGIC   "SHCHST\0\1"
#define ST_VERSION 2u /* 2: a CRC32C per unit after the state bytes */
/* state file fields */
#define S_VERSION 8  /* u32 */
#define S_READY	  12 /* u32, atomic */
#define S_UNIT	  16 /* u32 unit bytes */
#define S_NUNITS  20 /* u32 */
#define S_SIZE	  24 /* u64 object size */
#define S_EPOCH	  32 /* u64: usage epoch its valid units are counted in */
#define S_ATIME	  40 /* i64, atomic: last read by any process (LRU) */
#define S_WANT	  48 /* u32, atomic: release requests for this object's unit locks */

void cachetier__backoff(unsigned *sleep_us, unsigned max_us)
{
	struct timespec ts = {0, (long)*sleep_us * 1000};

	nanosleep(&ts, NULL);
	if (*sleep_us < max_us)
		*sleep_us *= 2;
}

void cachetier__cond_wait_s(pthread_cond_t *cond, struct disk_mutex *lock, unsigned secs)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += secs;
	disk_cond_timedwait(cond, lock, &ts);
}

int cachetier__ofd_lock(int fd, short type, off_t off, int wait)
{
	return cachetier__ofd_lock_n(fd, type, off, 1, wait);
}

int cachetier__ofd_lock_n(int fd, short type, off_t off, off_t n, int wait)
{
	struct flock fl;
	unsigned sleep_us = 100;

	CT_OFF_LOOP();
	int64_t deadline = wait > 1 ? cachetier__now_ns() + (int64_t)wait * 1000000 : 0;

	memset(&fl, 0, sizeof(fl));
	fl.l_type = type;
	fl.l_whence = SEEK_SET;
	fl.l_start = off;
	fl.l_len = n;
	for (;;) {
		if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
			return 0;
		if (errno != EAGAIN && errno != EACCES && errno != EINTR)
			return -errno;
		if (!wait || (deadline && cachetier__now_ns() > deadline))
			return -EAGAIN;
		cachetier__backoff(&sleep_us, 20000);
	}
}

/* Map fd (of at least len bytes) shared; NULL on failure. */
static unsigned char *map_shared(int fd, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

static uint32_t ld32(const unsigned char *p)
{
	return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE);
}

static void st32(unsigned char *p, uint32_t v)
{
	__atomic_store_n((uint32_t *)p, v, __ATOMIC_RELEASE);
}

static uint64_t ld64(const unsigned char *p)
{
	return __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE);
}

static void st64(unsigned char *p, uint64_t v)
{
	__atomic_store_n((uint64_t *)p, v, __ATOMIC_RELEASE);
}

/* Open dirfd/name and lock its presence byte: *alone is set when this
 * process holds the write lock (and must initialise, then call
 * presence_shared). Retries when the file it locked was unlinked or
 * replaced meanwhile. Returns the fd or a negative errno. */
static int presence_open(int dirfd, const char *name, int create, int *alone)
{
	for (;;) {
		struct stat st, pst;
		int fd = openat(dirfd, name, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
		int err;

		if (fd < 0)
			return -errno;
		err = cachetier__ofd_lock(fd, F_WRLCK, LK_PRESENCE, 0);
		*alone = err == 0;
		if (err == -EAGAIN)
			err = cachetier__ofd_lock(fd, F_RDLCK, LK_PRESENCE, 1);
		if (err == 0 && (fstat(fd, &st) < 0 || fstatat(dirfd, name, &pst, 0) < 0 ||
				 st.st_ino != pst.st_ino || st.st_dev != pst.st_dev))
			err = -EAGAIN; /* unlinked or replaced while we locked it */
		if (err == 0)
			return fd;
		close(fd);
		if (err != -EAGAIN || !create)
			return err == -EAGAIN ? -ENOENT : err;
	}
}

/* ---- the directory's usage counter ---- */

int cachetier__usage_open(struct cachetier *ct, int v1fd, int *alone)
{
	struct stat st;
	int fd, err;

	for (;;) {
		fd = presence_open(v1fd, "usage", 1, alone);
		if (fd < 0)
			return fd;
		err = fstat(fd, &st) < 0 ? -errno : 0;
		/* only the initialiser sizes it; a ready file has its size */
		if (err == 0 && st.st_size < USAGE_BYTES)
			err = !*alone ? -EBADMSG : -posix_fallocate(fd, 0, USAGE_BYTES);
		if (err < 0) {
			close(fd);
			return err;
		}
		ct->usage = map_shared(fd, USAGE_BYTES);
		if (!ct->usage) {
			err = -errno;
			close(fd);
			return err;
		}
		ct->usagefd = fd;
		if (*alone ||
		    (memcmp(ct->usage, USAGE_MAGIC, 8) == 0 &&
		     ld32(ct->usage + U_VERSION) == USAGE_VERSION && ld32(ct->usage + U_READY)))
			return 0;
		/* the process that initialised it died before it was ready */
		munmap(ct->usage, USAGE_BYTES);
		ct->usage = NULL;
		ct->usagefd = -1;
		close(fd);
		{
			unsigned us = 1000;

			cachetier__backoff(&us, us);
		}
	}
}

/* Alone: start a new epoch with 'used' bytes, and share the file. */
int cachetier__usage_ready(struct cachetier *ct, uint64_t used)
{
	uint64_t epoch = 1;

	if (memcmp(ct->usage, USAGE_MAGIC, 8) == 0 && ld32(ct->usage + U_VERSION) == USAGE_VERSION)
		epoch = ld64(ct->usage + U_EPOCH) + 1;
	st32(ct->usage + U_READY, 0);
	memcpy(ct->usage, USAGE_MAGIC, 8);
	st32(ct->usage + U_VERSION, USAGE_VERSION);
	st64(ct->usage + U_EPOCH, epoch);
	st64(ct->usage + U_USED, used);
	st32(ct->usage + U_READY, 1);
	return cachetier__ofd_lock(ct->usagefd, F_RDLCK, LK_PRESENCE, 1);
}

void cachetier__usage_close(struct cachetier *ct)
{
	if (ct->usage)
		munmap(ct->usage, USAGE_BYTES);
	if (ct->usagefd >= 0)
		close(ct->usagefd);
	ct->usage = NULL;
	ct->usagefd = -1;
}

void cachetier__usage_add(struct cachetier *ct, int64_t delta)
{
	if (ct->usage)
		__atomic_fetch_add((int64_t *)(ct->usage + U_USED), delta, __ATOMIC_ACQ_REL);
}

uint64_t cachetier__usage_get(const struct cachetier *ct)
{
	int64_t v;

	if (!ct->usage)
		return 0;
	v = __atomic_load_n((const int64_t *)(ct->usage + U_USED), __ATOMIC_ACQUIRE);
	return v < 0 ? 0 : (uint64_t)v;
}

/* ---- the room's accounts ---- */

void cachetier__acct_move(struct cachetier *ct, uint64_t unreserve, uint64_t usage)
{
	disk_mutex_lock(&ct->acct_lock);
	if (usage)
		cachetier__usage_add(ct, (int64_t)usage);
	atomic_fetch_sub(&ct->reserved, unreserve);
	disk_mutex_unlock(&ct->acct_lock);
}

void cachetier__acct_evict(struct cachetier *ct, uint64_t freed)
{
	disk_mutex_lock(&ct->acct_lock);
	cachetier__usage_add(ct, -(int64_t)freed);
	atomic_fetch_add(&ct->evicting, freed);
	disk_mutex_unlock(&ct->acct_lock);
}

void cachetier__acct_get(struct cachetier *ct, struct ct_room *r)
{
	disk_mutex_lock(&ct->acct_lock);
	r->usage = cachetier__usage_get(ct);
	r->reserved = atomic_load(&ct->reserved);
	r->evicting = atomic_load(&ct->evicting);
	r->wr_gone = atomic_load(&ct->wr_gone);
	disk_mutex_unlock(&ct->acct_lock);
}

uint64_t cachetier__usage_epoch(const struct cachetier *ct)
{
	return ct->usage ? ld64(ct->usage + U_EPOCH) : 0;
}

/* ---- an object's state file ---- */

/* Offset of the CRC array in a state file of nunits units. */
static size_t st_crc_off(uint32_t nunits)
{
	return ((size_t)ST_HDR + nunits + 3u) & ~(size_t)3u;
}

static size_t st_bytes(uint32_t nunits)
{
	return (st_crc_off(nunits) + (size_t)nunits * 4u + 4095u) & ~(size_t)4095u;
}

int cachetier__st_open(struct ct_file *f, int create, int *alone)
{
	char name[24];
	struct stat st;
	int fd, err;

	snprintf(name, sizeof(name), "%s.st", f->hash);
	fd = presence_open(f->dirfd, name, create, alone);
	if (fd < 0)
		return fd;
	f->st_len = st_bytes(f->nunits);
	err = fstat(fd, &st) < 0 ? -errno : 0;
	if (err == 0 && (uint64_t)st.st_size < f->st_len) {
		/* only the initialiser grows it; others see a ready header */
		/* allocated, not only sized: a store into a page of the
		 * mapping that a full disk cannot back would be a SIGBUS */
		if (!*alone)
			err = -EBADMSG;
		else
			err = -posix_fallocate(fd, 0, (off_t)f->st_len);
	}
	if (err == 0) {
		f->st = map_shared(fd, f->st_len);
		if (!f->st)
			err = -errno;
	}
	if (err == 0 && !*alone &&
	    (memcmp(f->st, ST_MAGIC, 8) != 0 || ld32(f->st + S_VERSION) != ST_VERSION ||
	     !ld32(f->st + S_READY) || ld32(f->st + S_UNIT) != f->unit_bytes ||
	     ld32(f->st + S_NUNITS) != f->nunits || ld64(f->st + S_SIZE) != f->size))
		err = -EBADMSG; /* its initialiser died, or a hash collision */
	if (err < 0) {
		if (f->st)
			munmap(f->st, f->st_len);
		f->st = NULL;
		close(fd);
		return err;
	}
	f->stfd = fd;
	return 0;
}

uint64_t cachetier__st_old_bytes(const struct ct_file *f, uint64_t epoch)
{
	uint64_t sum = 0;

	if (memcmp(f->st, ST_MAGIC, 8) != 0 || ld32(f->st + S_VERSION) != ST_VERSION ||
	    ld32(f->st + S_UNIT) != f->unit_bytes || ld32(f->st + S_NUNITS) != f->nunits ||
	    ld64(f->st + S_SIZE) != f->size || ld64(f->st + S_EPOCH) != epoch)
		return UINT64_MAX; /* not counted in this epoch */
	for (uint32_t c = 0; c < f->nunits; c++) {
		if (cachetier__st_get(f, c))
			sum += cachetier__unit_len(f, c);
	}
	return sum;
}

int cachetier__st_ready(struct ct_file *f, const unsigned char *bitmap, const unsigned char *crcs,
			uint64_t epoch)
{
	st32(f->st + S_READY, 0);
	memcpy(f->st, ST_MAGIC, 8);
	st32(f->st + S_VERSION, ST_VERSION);
	st32(f->st + S_UNIT, f->unit_bytes);
	st32(f->st + S_NUNITS, f->nunits);
	st64(f->st + S_SIZE, f->size);
	st64(f->st + S_EPOCH, epoch);
	st64(f->st + S_ATIME, (uint64_t)cachetier__now_ns());
	for (uint32_t c = 0; c < f->nunits; c++) {
		st32(f->st + st_crc_off(f->nunits) + (size_t)c * 4,
		     bitmap && crcs ? disk_le32_get(crcs + (size_t)c * 4) : 0);
		__atomic_store_n(
		    f->st + ST_HDR + c,
		    (unsigned char)(bitmap && (bitmap[c / 8] & (1u << (c % 8))) ? ST_NAMED : 0),
		    __ATOMIC_RELEASE);
	}
	st32(f->st + S_READY, 1);
	return cachetier__ofd_lock(f->stfd, F_RDLCK, LK_PRESENCE, 1);
}

void cachetier__st_close(struct ct_file *f)
{
	if (f->st)
		munmap(f->st, f->st_len);
	if (f->stfd >= 0)
		close(f->stfd);
	if (f->auxfd >= 0)
		close(f->auxfd);
	f->st = NULL;
	f->stfd = f->auxfd = -1;
}

int cachetier__st_set(struct ct_file *f, uint32_t c, int valid)
{
	return __atomic_exchange_n(f->st + ST_HDR + c, (unsigned char)(valid ? ST_VALID : 0),
				   __ATOMIC_ACQ_REL) != 0;
}

int cachetier__st_clear(struct ct_file *f, uint32_t c)
{
	return __atomic_exchange_n(f->st + ST_HDR + c, (unsigned char)0, __ATOMIC_ACQ_REL);
}

int cachetier__st_name(struct ct_file *f, uint32_t c)
{
	unsigned char b = ST_VALID;

	/* from ST_VALID only: a byte an eviction cleared meanwhile stays clear
	 * (and is not named), one it clears after this sees ST_NAMED */
	if (__atomic_compare_exchange_n(f->st + ST_HDR + c, &b, (unsigned char)ST_NAMED, 0,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return 1;
	return b == ST_NAMED;
}

uint32_t cachetier__st_crc(const struct ct_file *f, uint32_t c)
{
	return ld32(f->st + st_crc_off(f->nunits) + (size_t)c * 4);
}

void cachetier__st_set_crc(struct ct_file *f, uint32_t c, uint32_t crc)
{
	st32(f->st + st_crc_off(f->nunits) + (size_t)c * 4, crc);
}

void cachetier__st_touch(struct ct_file *f, int64_t now_ns)
{
	st64(f->st + S_ATIME, (uint64_t)now_ns);
}

int64_t cachetier__st_atime(const struct ct_file *f)
{
	return (int64_t)ld64(f->st + S_ATIME);
}

/* Release requests: counters, not flags, so no holder clears what another
 * evictor posted; a holder compares with the value it last acted on. Any
 * start value is fine (a file of an earlier release holds zeros there, a
 * first look at a moved counter costs one drop). */
void cachetier__want_post(struct cachetier *ct, struct ct_file *f)
{
	__atomic_fetch_add((uint32_t *)(void *)(f->st + S_WANT), 1u, __ATOMIC_ACQ_REL);
	if (ct->usage)
		__atomic_fetch_add((uint32_t *)(void *)(ct->usage + U_WANT), 1u, __ATOMIC_ACQ_REL);
}

uint32_t cachetier__st_want(const struct ct_file *f)
{
	return ld32(f->st + S_WANT);
}

uint32_t cachetier__want_dir(const struct cachetier *ct)
{
	return ct->usage ? ld32(ct->usage + U_WANT) : 0;
}

/* ---- reaping what a dead process left ---- */

int64_t cachetier__reap(struct cachetier *ct, int dirfd, const char *hash, int count)
{
	unsigned char hdr[ST_HDR];
	char name[24];
	uint64_t sum = 0;
	int alone = 0, fd;

	snprintf(name, sizeof(name), "%s.st", hash);
	fd = presence_open(dirfd, name, 1, &alone);
	if (fd < 0)
		return fd;
	if (!alone) { /* a running process uses it */
		close(fd);
		return -EBUSY;
	}
	if (count && pread(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr) &&
	    memcmp(hdr, ST_MAGIC, 8) == 0 && disk_le32_get(hdr + S_VERSION) == ST_VERSION &&
	    disk_le64_get(hdr + S_EPOCH) == cachetier__usage_epoch(ct)) {
		/* its valid units are counted in the usage: give them back */
		uint32_t unit_bytes = disk_le32_get(hdr + S_UNIT);
		uint32_t nunits = disk_le32_get(hdr + S_NUNITS);
		uint64_t size = disk_le64_get(hdr + S_SIZE);
		unsigned char *bits = unit_bytes && nunits == (size + unit_bytes - 1) / unit_bytes
					  ? malloc(nunits)
					  : NULL;

		if (bits && pread(fd, bits, nunits, ST_HDR) == (ssize_t)nunits) {
			for (uint32_t c = 0; c < nunits; c++) {
				uint64_t off = (uint64_t)c * unit_bytes;

				if (bits[c])
					sum += size - off < unit_bytes ? size - off : unit_bytes;
			}
		}
		free(bits);
	}
	unlinkat(dirfd, hash, 0);
	snprintf(name, sizeof(name), "%s.map", hash);
	unlinkat(dirfd, name, 0);
	snprintf(name, sizeof(name), "%s.st", hash);
	unlinkat(dirfd, name, 0);
	close(fd); /* openers waiting on it find it unlinked and start anew */
	if (sum)
		cachetier__usage_add(ct, -(int64_t)sum);
	return (int64_t)sum;
}
