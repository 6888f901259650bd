/*
 * cachetier_objread.c — reads of an object (cachetier_obj.c): read_begin
 * and read_end dispatch to its local fd, its decoded copy (each unit
 * checked on its first read by this process, the copy decoded again when
 * evicted or damaged) or the unit store (cachetier_read.c), and a read the
 * unit store cannot fill for a full disk bypasses it into a memfd.
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

/* A decoded copy evicted (by this or another process) is decoded again:
 * from the same version of the object, to the same bytes. ct->lock held
 * on entry and return; dropped while decoding. */
static int obj_redecode(struct cachetier *ct, struct cachetier_obj *o)
{
	uint64_t size = o->size, decoded = 0;
	int damage = o->damage, err;

	o->redecoding = 1;
	disk_mutex_unlock(&ct->lock);
	err = 0;
	if (backend_is_local(ct->be)) {
		struct backend_objinfo now;

		/* a local file decodes from whatever is at its path now */
		err = backend_stat(ct->be, o->info.key, &now);
		if (err == 0 && !backend_version_same(now.etag, now.size, now.mtime, o->info.etag,
						      o->info.size, o->info.mtime))
			err = -ESTALE;
	}
	if (err == 0)
		err = cachetier__decode(ct, &o->info, o->codec, o->dec->name, o, &decoded);
	/* the decoded size comes back apart: o->size is read without the lock
	 * (obj_pread's bounds) and never changes while o lives */
	if (err == 0 && (decoded != size || o->damage != damage)) {
		close(o->fd); /* never serve another version under one index */
		o->fd = -1;
		err = -ESTALE;
	}
	disk_mutex_lock(&ct->lock);
	o->redecoding = 0;
	if (err == 0) {
		o->dbad = 0; /* a new copy: this process's, or checked as it is read */
		o->dec->bytes = size;
		o->dec->atime_ns = cachetier__now_ns();
	}
	pthread_cond_broadcast(&ct->cond);
	return err;
}

static void obj_dec_end(struct cachetier *ct, struct cachetier_obj *o)
{
	disk_mutex_lock(&ct->lock);
	/* an eviction that found it in use, or a read that found it damaged,
	 * left the fd to the last reader (o->dbad: the copy's name may hold
	 * another process's new copy by now); reads waiting for a damaged
	 * copy to close decode it again */
	if (--o->dpins == 0 && (o->dec->bytes == 0 || o->dbad) && o->fd >= 0) {
		close(o->fd);
		o->fd = -1;
		pthread_cond_broadcast(&ct->cond);
	}
	disk_mutex_unlock(&ct->lock);
}

/* A unit of o's decoded copy failed its CRC32C: the first reader to find
 * it (o->dbad) counts and logs it and drops the copy (record and file,
 * unless another decode's copy has replaced it under its name since: the
 * next read here, and any other process, decodes it again). The caller
 * holds a read's pin, so its obj_dec_end closes the fd (o->dbad) when no
 * other read uses it; reads that begin meanwhile wait for that
 * (obj_dec_begin). No lock held on entry; file I/O. */
static void obj_dec_damaged(struct cachetier *ct, struct cachetier_obj *o, uint64_t unit)
{
	char file[40], why[96];
	int first;

	disk_mutex_lock(&ct->lock);
	first = !o->dbad;
	o->dbad = 1;
	disk_mutex_unlock(&ct->lock);
	if (!first)
		return;
	snprintf(file, sizeof(file), "decoded/%s", o->dec->name);
	snprintf(why, sizeof(why), "unit %llu (%u bytes) of the decoded copy fails its CRC32C",
		 (unsigned long long)unit, CT_DEC_UNIT);
	cachetier__note_corrupt(ct, file, o->info.key, 1, why,
				"the read fails with EIO, the copy is removed and the next read "
				"decodes it again");
	if (cachetier__decode_drop(ct, o->dec->name, o->fd)) {
		disk_mutex_lock(&ct->lock);
		o->dec->bytes = 0; /* not on the disk any more (eviction passes it over) */
		disk_mutex_unlock(&ct->lock);
	}
}

/* A decoded copy is watched as the unit store's data files are
 * (cachetier_check.c, units_watch): its inode with inotify (IN_MODIFY: a
 * write, truncation, punched hole or fallocate). When the watch's change
 * count moved, every unit goes back to "check at its next read" (dchecked
 * 0) and dwgen moves, so a check that began before does not mark its unit.
 * A copy's fd changes when it is decoded again: its watch follows. No
 * watch to be had: every read checks its units. ct->lock held. */
static void obj_dec_watch(struct cachetier *ct, struct cachetier_obj *o)
{
	uint64_t ev;

	if (o->dwrec && o->dwfd != o->fd) {
		cachetier__watch_drop(ct->watch, o->dwrec);
		o->dwrec = NULL;
	}
	if (!o->dwrec && !o->dwfail) {
		if (!ct->watch ||
		    cachetier__watch_add(ct->watch, o->fd, &o->dwrec, &o->dwevents) < 0) {
			o->dwrec = NULL;
			o->dwfail = 1;
		}
		o->dwfd = o->fd;
		if (o->dwrec)
			return; /* a change before now: the CRCs (o->dchecked as they are) */
	}
	if (o->dwfail)
		return; /* obj_dec_check checks every unit of every read */
	ev = cachetier__watch_events(ct->watch, o->dwrec);
	if (ev == o->dwevents)
		return;
	o->dwevents = ev;
	atomic_fetch_add(&o->dwgen, 1);
	for (uint64_t u = 0; u < o->dunits; u++)
		atomic_store(&o->dchecked[u], 0);
}

/* Before a read serves [off, off + len) of o's decoded copy (o->dcrc: its
 * record's CRCs, or its decode's here): each unit of the range not checked
 * since the copy was written or last changed is read (a pread of
 * CT_DEC_UNIT bytes) and its CRC32C compared with the recorded one. A hole
 * reads as zeros and fails (unless the unit was all zeros: then the bytes
 * are right). The caller holds the read's pin (o->fd and o->dcrc stay);
 * no lock held. 0, -EIO (a unit failed: obj_dec_damaged) or -ENOMEM. */
static int obj_dec_check(struct cachetier *ct, struct cachetier_obj *o, uint64_t off, uint64_t len,
			 unsigned gen)
{
	uint64_t u1 = (off + len - 1) / CT_DEC_UNIT + 1;
	unsigned char *buf = NULL;
	int err = 0;

	if (u1 > o->dunits)
		u1 = o->dunits;
	for (uint64_t u = off / CT_DEC_UNIT; u < u1 && err == 0; u++) {
		uint64_t at = u * CT_DEC_UNIT;
		size_t n = o->size - at < CT_DEC_UNIT ? (size_t)(o->size - at) : CT_DEC_UNIT;

		if (!o->dwfail && atomic_load(&o->dchecked[u]))
			continue;
		if (!buf && !(buf = malloc(CT_DEC_UNIT)))
			err = -ENOMEM;
		if (err == 0)
			err = disk_pread_all(o->fd, buf, n, at); /* -EIO: cut short */
		if (err == 0 && disk_crc32c_update(0, buf, n) != o->dcrc[u])
			err = -EIO;
		if (err == 0 && !o->dwfail) {
			/* marked, unless the file changed since obj_dec_watch
			 * looked (its clear runs after dwgen moves: whichever
			 * comes second leaves 0) */
			atomic_store(&o->dchecked[u], 1);
			if (atomic_load(&o->dwgen) != gen)
				atomic_store(&o->dchecked[u], 0);
		} else if (err == -EIO) {
			obj_dec_damaged(ct, o, u);
		}
	}
	free(buf);
	return err;
}

/* Pin o's decoded copy for a read of [off, off + len): decoded again
 * first when it was closed (evicted, found damaged); EIO when it is found
 * cut or damaged (then decoded again by a later read). May block: a
 * decode (another thread's too), the unit checks' preads, and, while a
 * copy found damaged is still used, until the reads using it end (each
 * one pin from read_begin to read_end: a FUSE reply). No lock held on
 * entry. */
static int obj_dec_begin(struct cachetier *ct, struct cachetier_obj *o, uint64_t off, uint64_t len,
			 int *fd)
{
	struct stat st;
	unsigned gen = 0;
	int err = 0;

	disk_mutex_lock(&ct->lock);
	/* o->dbad with the fd open: reads in flight use the damaged copy
	 * (its pins); the last one's read_end closes it */
	while (o->redecoding || (o->dbad && o->fd >= 0))
		disk_cond_wait(&ct->cond, &ct->lock);
	if (o->fd < 0)
		err = obj_redecode(ct, o);
	if (err == 0 && fstat(o->fd, &st) == 0 && (uint64_t)st.st_size < o->size) {
		/* the copy was cut under us: a read past its end would come
		 * back short. EIO, and the next read decodes it again (the
		 * decode record's size no longer matches the file) */
		char file[40];

		snprintf(file, sizeof(file), "decoded/%s", o->dec->name);
		cachetier__note_corrupt(ct, file, o->info.key, 1, "the decoded copy was cut",
					"the read fails with EIO, the next read decodes it again");
		if (o->dpins == 0) {
			close(o->fd);
			o->fd = -1;
		}
		err = -EIO;
	}
	if (err == 0) {
		o->dpins++;
		o->dec->atime_ns = cachetier__now_ns();
		*fd = o->fd;
		if (o->dcrc && !cachetier__live_check_off()) /* before the preads: a later change is
								seen next */
			obj_dec_watch(ct, o);
		gen = atomic_load(&o->dwgen);
	}
	disk_mutex_unlock(&ct->lock);
	if (err == 0 && o->dcrc && len > 0) {
		err = obj_dec_check(ct, o, off, len, gen);
		if (err < 0)
			obj_dec_end(ct, o);
	}
	return err;
}

/* backend_sink_cb of a struct ct_mem_sink: may run on the store's I/O
 * thread; no locks, no file (the loop only moves bytes: DISK_OFF_LOOP). */
int cachetier__mem_sink(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct ct_mem_sink *s = arg;

	if (len == 0)
		return 0;
	if (off != s->next || len > s->end - off)
		return -EIO;
	memcpy(s->buf + (off - s->start), buf, len);
	s->next += len;
	return 0;
}

/* A full disk degrades, it does not stop: the fill of units of
 * [off, off + len) of remote object o failed with no room on the disk
 * (eviction freed what it could; -ENOSPC or -EDQUOT), so the range is
 * fetched from the store (its listed version) into a memfd that read_end
 * closes, and served from there without caching it. Memory: len bytes
 * until read_end (FUSE reads are at most 1 MiB). Counted in bypass_reads
 * and bypass_bytes; the first is logged. Blocks for the fetch (the store's
 * retry budget bounds it); no lock held on entry. 0 or the store's error. */
static int obj_bypass(struct cachetier_obj *o, uint64_t off, uint64_t len, int nospc,
		      struct cachetier_pin *p)
{
	struct cachetier *ct = o->ct;
	/* the reader's thread writes the bytes into the memfd once they are all there */
	struct ct_mem_sink s = {.start = off, .next = off, .end = off + len};
	int err = 0, fd = memfd_create("shardfs-bypass", MFD_CLOEXEC);

	if (fd < 0)
		return -errno;
	s.buf = malloc(len ? len : 1);
	err = !s.buf ? -ENOMEM
		     : cachetier__read_version(ct, o->file->key, o->file->etag, o->file->size,
					       &s.next, s.end, cachetier__mem_sink, &s);
	if (err == 0)
		err = disk_pwrite_all(fd, s.buf, len, 0);
	free(s.buf);
	if (err < 0) {
		close(fd);
		return err;
	}
	atomic_fetch_add(&ct->bypass_reads, 1);
	atomic_fetch_add(&ct->bypass_bytes, len);
	if (!atomic_exchange(&ct->bypass_noted, 1))
		backend_log(ct->be, BACKEND_LOG_WARN,
			    "cache %s: no room on the disk for %s (%s, nothing left to evict): "
			    "reads of bytes not cached are served from the store without caching "
			    "them (cache_bypass_reads counts them; not logged again)",
			    ct->dir, o->file->key, strerror(-nospc));
	p->kind = CT_PIN_BYPASS;
	p->fd = fd;
	return 0;
}

/* A read of [off, off + len) of f's units whose next unit holds no bytes
 * (a hole of the sparse data file: not fetched, evicted, or still being
 * filled) asks the disk for exactly its own pages (POSIX_FADV_WILLNEED)
 * before the reply's splice or pread reads them. Otherwise that read's
 * readahead, sized by the data file's one readahead state (every reader's
 * reads, in any order, look sequential to it) and grown in large folios,
 * runs past the read's end into the hole, where the file system zero-fills
 * a page for every block not mapped: in the planned cold epoch a third of
 * the cache hits' disk read (tests/bench/README.md). The pages so read
 * carry no readahead mark, so the read that finds them starts none. A read
 * whose next unit is cached (a reader of cached bytes in a row) keeps the
 * kernel's readahead, and a read of the object's last unit has no hole
 * past it. A hint: its failure changes nothing but the readahead. */
static void obj_read_exact(const struct ct_file *f, uint64_t off, uint64_t len)
{
	uint64_t next;

	if (len == 0 || f->unit_bytes == 0)
		return;
	next = (off + len - 1) / f->unit_bytes + 1;
	if (next >= f->nunits || cachetier__st_get(f, (uint32_t)next))
		return;
	(void)posix_fadvise(f->datafd, (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
}

static int obj_read_begin(struct cachetier_obj *o, uint64_t off, uint64_t len, int *fd,
			  uint64_t *fd_off, int probe, uint64_t ahead, int queue,
			  struct cachetier_pin **pin)
{
	struct cachetier_pin *p;
	int err = 0;

	*pin = NULL;
	if (off > o->size || len > o->size - off)
		return -EIO;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->o = o;
	p->fd = -1;
	*fd_off = off;
	if (o->dec) {
		p->kind = CT_PIN_DEC;
		err = obj_dec_begin(o->ct, o, off, len, fd);
	} else if (o->file) {
		p->kind = CT_PIN_FILE;
		/* the store's bytes changed under a weak ETag (cachetier_weak.c,
		 * cachetier__weak_check): this object is the old version's, also when it
		 * was found while this read waited */
		err = atomic_load(&o->collided)
			  ? -ESTALE
			  : cachetier__file_read_begin(o->ct, o->file, off, len, probe, ahead,
						       queue, &p->c0, &p->c1, &p->fast);
		if (err == 0 && atomic_load(&o->collided)) {
			cachetier__file_read_end(o->ct, o->file, p->c0, p->c1, p->fast);
			err = -ESTALE;
		}
		if (err == -ENOSPC || err == -EDQUOT) {
			err = obj_bypass(o, off, len, err, p);
			*fd_off = 0;
		}
		*fd = p->kind == CT_PIN_BYPASS ? p->fd : o->file->datafd;
		if (err == 0 && p->kind == CT_PIN_FILE)
			obj_read_exact(o->file, off, len);
	} else if (o->local) {
		p->kind = CT_PIN_LOCAL;
		err = cachetier__local_pin(o, fd);
	} else {
		p->kind = CT_PIN_FD;
		*fd = o->fd;
	}
	if (err < 0) {
		free(p);
		return err;
	}
	*pin = p;
	return 0;
}

int cachetier_obj_read_begin(struct cachetier_obj *o, uint64_t off, uint64_t len, int *fd,
			     uint64_t *fd_off, struct cachetier_pin **pin)
{
	return obj_read_begin(o, off, len, fd, fd_off, 0, 0, 0, pin);
}

int cachetier_obj_read_begin_ahead(struct cachetier_obj *o, uint64_t off, uint64_t len,
				   uint64_t ahead, int *fd, uint64_t *fd_off,
				   struct cachetier_pin **pin)
{
	return obj_read_begin(o, off, len, fd, fd_off, 0, ahead, 1, pin);
}

int cachetier_obj_read_begin_win(struct cachetier_obj *o, uint64_t off, uint64_t len,
				 uint64_t ahead, int queue, int *fd, uint64_t *fd_off,
				 struct cachetier_pin **pin)
{
	return obj_read_begin(o, off, len, fd, fd_off, 0, ahead, queue, pin);
}

void cachetier_obj_read_end(struct cachetier_pin *p)
{
	if (!p)
		return;
	switch (p->kind) {
	case CT_PIN_DEC:
		obj_dec_end(p->o->ct, p->o);
		break;
	case CT_PIN_FILE:
		cachetier__file_read_end(p->o->ct, p->o->file, p->c0, p->c1, p->fast);
		break;
	case CT_PIN_BYPASS:
		close(p->fd);
		break;
	case CT_PIN_LOCAL:
		cachetier__local_unpin(p->o);
		break;
	case CT_PIN_FD:
		break;
	}
	free(p);
}

static ssize_t obj_pread(struct cachetier_obj *o, void *buf, size_t len, uint64_t off, int probe,
			 uint64_t ahead, int queue)
{
	struct cachetier_pin *pin;
	uint64_t fd_off;
	size_t done = 0;
	ssize_t ret;
	int fd, err;

	if (off >= o->size)
		return 0;
	if (len > o->size - off)
		len = (size_t)(o->size - off);
	/* remote objects: fetch and pin the units, then copy from the file */
	err = obj_read_begin(o, off, len, &fd, &fd_off, probe, ahead, queue, &pin);
	if (err < 0)
		return err;
	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(fd_off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* n == 0: the file shrank under us: never return zeros */
			ret = n < 0 ? -errno : -EIO;
			goto out;
		}
		done += (size_t)n;
	}
	ret = (ssize_t)done;
out:
	cachetier_obj_read_end(pin);
	return ret;
}

ssize_t cachetier_obj_pread(struct cachetier_obj *o, void *buf, size_t len, uint64_t off)
{
	return obj_pread(o, buf, len, off, 0, 0, 0);
}

ssize_t cachetier_obj_pread_ahead(struct cachetier_obj *o, void *buf, size_t len, uint64_t off,
				  uint64_t ahead)
{
	return obj_pread(o, buf, len, off, 0, ahead, 1);
}

ssize_t cachetier_obj_pread_win(struct cachetier_obj *o, void *buf, size_t len, uint64_t off,
				uint64_t ahead, int queue)
{
	return obj_pread(o, buf, len, off, 0, ahead, queue);
}

ssize_t cachetier_obj_pread_probe(struct cachetier_obj *o, void *buf, size_t len, uint64_t off)
{
	return obj_pread(o, buf, len, off, 1, 0, 0);
}

uint64_t cachetier_obj_chunk_bytes(const struct cachetier_obj *o)
{
	return o->file ? (uint64_t)o->file->unit_bytes * o->file->group : 0;
}
