/*
 * cachetier_memread.c — a range of an object read into the caller's
 * memory, asynchronously, past the unit store (cachetier.h:
 * cachetier_obj_read_mem): for the scheduler's stage (fetch/fetch_stage.c),
 * which keeps planned bytes the cache could take only by evicting in
 * bounded memory. The read asks the store for the object's listed version
 * as the fills and the bypass read do (If-Match with the listed ETag, the
 * answer's ETag compared: -ESTALE on a change; the store's retry budget,
 * stall bound, breaker and resumes after a cut body, from the same
 * version), and the bytes go into the caller's buffer in order, received
 * there by the engine when it takes the offer (memread_mem: no copy). Nothing is written to the
 * cache directory, no unit is filled, evicted or punched. Also the small queries the stage needs:
 * the cache's free room, whether a range is all cached, an object's extra reference.
 *
 * The watermark (progress): as the bytes land, the caller is told how far
 * they reach (progress(arg, end): [off, end) of the buffer is the object's,
 * final), so it may serve a part before the whole read ended. Why a byte
 * below the watermark is the listed version's, whatever later attempts do:
 * - the watermark moves only in memread_sink, which the store calls with a
 *   body's bytes only after that answer's head passed the store's checks
 *   (backend_io_attempt.c, headers_complete: a 2xx; its ETag equal to the
 *   listed one sent as If-Match, also against servers that ignore
 *   If-Match, and to the first answer's; its total size equal to the
 *   listed size; a 206's Content-Range starting at the byte asked, not
 *   longer than the range; a 200 skipped up to it), and only with bytes in
 *   order: at off == next, each byte once (memread_sink refuses others);
 * - a resumed or retried attempt asks from next (memread_done, the
 *   engine's resume: range_off + delivered), with the same If-Match and
 *   size, and memread_mem offers the engine memory only at next: no
 *   attempt writes below the watermark, so a byte below it is never
 *   rewritten (a reader may hold a pointer to it), and bytes an attempt
 *   wrote past next that its sink did not take (a cut, a refused answer)
 *   stay above the watermark until an accepted answer writes them again;
 * - the bytes are in the buffer before memread_sink runs (received there,
 *   or copied by it), and progress runs after next moved, on the same
 *   thread: a caller that publishes end with a release store (and reads
 *   it with an acquire load) sees them.
 * A read that fails later (-ESTALE: the object changed between attempts;
 * -EIO, the budget spent) changes none of them: they were the listed
 * version's bytes when they were taken, as a fill's units are.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cachetier_i.h"

struct ct_memread {
	struct cachetier *ct;
	struct ct_mem_sink s;
	char *key, *etag;
	uint64_t size; /* the version's size (backend_pread_version's) */
	unsigned flags;
	cachetier_mem_done_fn done;
	cachetier_mem_progress_fn progress; /* or NULL */
	void *arg;
};

/* backend_sink_cb: the bytes at off, in order, of an answer whose head
 * passed the store's checks; received into the caller's buffer already
 * when memread_mem offered it (no copy). The watermark moves here only. */
static int memread_sink(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct ct_memread *m = arg;
	struct ct_mem_sink *s = &m->s;
	unsigned char *dst;

	if (len == 0)
		return 0;
	if (off != s->next || len > s->end - off)
		return -EIO;
	dst = s->buf + (off - s->start);
	if (dst != buf)
		memcpy(dst, buf, len);
	s->next += len;
	if (m->progress)
		m->progress(m->arg, s->next);
	return 0;
}

/* backend_sink_mem_cb: the caller's buffer at the next byte due, so the
 * engine receives into it (the I/O thread copies nothing). */
static void *memread_mem(void *arg, uint64_t off, size_t *len)
{
	struct ct_mem_sink *s = &((struct ct_memread *)arg)->s;

	if (off != s->next || off >= s->end)
		return NULL;
	if (*len > s->end - off)
		*len = (size_t)(s->end - off);
	return s->buf + (off - s->start);
}

static void memread_end(struct ct_memread *m, int err)
{
	cachetier_mem_done_fn done = m->done;
	void *arg = m->arg;

	free(m->key);
	free(m->etag);
	free(m);
	done(arg, err);
}

/* backend_done_cb: a read that ended short of its end (the store's answer
 * ended early without an error) is asked again from where it stopped, as
 * the fills do; a read that moved nothing is an object shorter than its
 * size said (-EIO). The store's I/O thread, or the caller's for a store
 * that reads in the calling thread. */
static void memread_done(void *arg, int err, uint64_t bytes)
{
	struct ct_memread *m = arg;

	if (err == 0 && m->s.next < m->s.end) {
		if (bytes == 0) {
			err = -EIO;
		} else {
			backend_read_version_async_mem(m->ct->be, m->key, m->etag, m->size,
						       m->s.next, (size_t)(m->s.end - m->s.next),
						       m->flags, memread_sink, memread_mem, m,
						       memread_done, m);
			return;
		}
	}
	memread_end(m, err);
}

int cachetier_obj_can_read_mem(const struct cachetier_obj *o)
{
	if (!o->file || o->dec || o->local)
		return 0; /* local files are read in place; decoded copies whole */
	/* an ETag that does not pin the bytes (weak, mtime-derived): the unit
	 * store's weak validator guards the object (cachetier_weak.c), a read
	 * into memory could not; with --weak-etag trust the ETag is taken */
	return o->ct->cfg.weak_etag_trust || !cachetier__etag_weak(o->file->etag, o->file->size);
}

int cachetier_obj_mem_weak(const struct cachetier_obj *o)
{
	return o->file && !o->dec && !o->local && !o->ct->cfg.weak_etag_trust &&
	       cachetier__etag_weak(o->file->etag, o->file->size);
}

int cachetier_obj_read_mem(struct cachetier_obj *o, uint64_t off, size_t len, void *buf, int small,
			   cachetier_mem_progress_fn progress, cachetier_mem_done_fn done,
			   void *arg)
{
	struct ct_memread *m;

	if (!cachetier_obj_can_read_mem(o))
		return -EOPNOTSUPP;
	if (len == 0 || off > o->size || len > o->size - off)
		return -EINVAL;
	if (atomic_load(&o->collided))
		return -ESTALE;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->ct = o->ct;
	m->s = (struct ct_mem_sink){.buf = buf, .start = off, .next = off, .end = off + len};
	m->key = strdup(o->file->key);
	m->etag = o->file->etag[0] ? strdup(o->file->etag) : NULL;
	m->size = o->file->size;
	m->flags = small ? BACKEND_READ_SMALL : 0;
	m->done = done;
	m->progress = progress;
	m->arg = arg;
	if (!m->key || (o->file->etag[0] && !m->etag)) {
		free(m->key);
		free(m->etag);
		free(m);
		return -ENOMEM;
	}
	backend_read_version_async_mem(o->ct->be, m->key, m->etag, m->size, off, len, m->flags,
				       memread_sink, memread_mem, m, memread_done, m);
	return 0;
}

int cachetier_obj_stale(const struct cachetier_obj *o)
{
	return atomic_load(&o->collided) != 0;
}

void cachetier_obj_ref(struct cachetier_obj *o)
{
	cachetier__lock(o->ct);
	o->refs++;
	disk_mutex_unlock(&o->ct->lock);
}

uint64_t cachetier_room(struct cachetier *ct)
{
	/* the bytes fills wrote, read before the disk's free space: all of
	 * them are on the disk it shows */
	uint64_t wrote = atomic_load(&ct->wr_bytes);
	uint64_t used, room, avail, keep;
	int disk = cachetier_disk(ct, &avail, &keep);
	struct ct_room r;

	/* the accounts after the disk's free space: a unit that lands between
	 * the two is in the usage and on the disk, out of reserved (read
	 * before, it was in reserved and on the disk: counted twice) */
	cachetier__acct_get(ct, &r); /* each byte in one of the three */
	used = r.usage + r.reserved + r.evicting;
	room = used < ct->cfg.cache_size_bytes ? ct->cfg.cache_size_bytes - used : 0;
	/* the disk, when it is the smaller limit (a small tmpfs or container
	 * disk under the default --cache-size): its free space above the
	 * reserve the cache leaves, less what fills in flight will write
	 * (reserved less the bytes of it written before the statvfs: on the
	 * disk already, not counted twice) */
	if (disk == 0) {
		keep += cachetier__resv_unwritten(&r, wrote);
		avail = avail > keep ? avail - keep : 0;
		if (avail < room)
			room = avail;
	}
	return room;
}

int cachetier_obj_range_cached(struct cachetier_obj *o, uint64_t off, uint64_t len)
{
	struct ct_file *f = o->file;
	int all = 1;

	if (!f || len == 0 || off >= o->size)
		return 0;
	if (len > o->size - off)
		len = o->size - off;
	cachetier__lock(o->ct);
	if (!f->live) {
		all = 0;
	} else {
		uint32_t c0 = (uint32_t)(off / f->unit_bytes);
		uint32_t c1 = (uint32_t)((off + len - 1) / f->unit_bytes);

		for (uint32_t c = c0; c <= c1 && c < f->nunits && all; c++)
			all = f->ust[c] == UNIT_VALID;
	}
	disk_mutex_unlock(&o->ct->lock);
	return all;
}
