/*
 * fs_sort.c — an external sort of variable-length records within a memory
 * budget (the imagefolder view's build: fs_if_build.c).
 *
 * Records are added into an arena; when the arena and its index would pass
 * the budget, they are sorted and written as one run to a scratch file of
 * the cache directory (cachetier_scratch_open: nameless, freed when closed
 * or when the process dies). fs_sort_finish sorts what is left, in memory
 * when nothing was written (no file at all: a small dataset never touches
 * the disk), else writes it as the last run and merges runs, fanin at a
 * time, until at most fanin remain. Iterators merge those (a heap of run
 * readers with a 64 KiB buffer each) and can be opened again: a caller may
 * read the sorted records twice. Without a comparison function records
 * keep the order they were added in (a spool).
 *
 * A run in the scratch file: records one after another, each a u32 length
 * (native order: the file never leaves the process) and its bytes.
 * Not thread-safe: the caller serialises adds.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs_i.h"

#define SORT_BUF   (64u << 10) /* a run reader's buffer, and the writer's */
#define SORT_FANIN 64u	       /* most runs merged at once */

struct sort_run {
	uint64_t off, len;
};

struct fs_sort {
	struct cachetier *ct;
	fs_sort_cmp cmp;
	size_t budget;
	unsigned char *arena; /* records: u32 length, bytes */
	size_t used, cap;
	size_t *idx; /* arena offsets of the records, sorted at a spill */
	size_t n, idxcap;
	int fd; /* scratch file of the runs, -1 until the first spill */
	uint64_t end;
	struct sort_run *runs;
	size_t nruns, first; /* runs [first, nruns) are live */
	unsigned fanin;
	uint64_t count;
};

/* A buffered reader of one run. */
struct run_reader {
	int fd;
	uint64_t pos, end; /* file bytes not yet in buf */
	unsigned char *buf;
	size_t cap, len, at; /* buf[at, len) unread */
	const unsigned char *cur;
	uint32_t curlen;
	size_t run; /* its index: the order of a spool's records */
};

struct fs_sort_iter {
	struct fs_sort *s;
	size_t i; /* in memory: the next record */
	struct run_reader *r;
	size_t nr;
	size_t *heap, nheap;
	int started;
};

int fs_sort_new(struct cachetier *ct, size_t budget, fs_sort_cmp cmp, struct fs_sort **out)
{
	struct fs_sort *s = calloc(1, sizeof(*s));

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->ct = ct;
	s->cmp = cmp;
	s->budget = budget < 1024 ? 1024 : budget;
	s->fd = -1;
	s->fanin = (unsigned)(s->budget / (2 * SORT_BUF));
	s->fanin = s->fanin < 2 ? 2 : s->fanin > SORT_FANIN ? SORT_FANIN : s->fanin;
	*out = s;
	return 0;
}

void fs_sort_free(struct fs_sort *s)
{
	if (!s)
		return;
	if (s->fd >= 0)
		close(s->fd);
	free(s->arena);
	free(s->idx);
	free(s->runs);
	free(s);
}

int fs_sort_spilled(const struct fs_sort *s)
{
	return s->nruns > 0;
}

uint64_t fs_sort_runs(const struct fs_sort *s)
{
	return s->nruns;
}

uint64_t fs_sort_count(const struct fs_sort *s)
{
	return s->count;
}

static int idx_cmp(const void *pa, const void *pb, void *ctx)
{
	const struct fs_sort *s = ctx;
	const unsigned char *a = s->arena + *(const size_t *)pa,
			    *b = s->arena + *(const size_t *)pb;
	uint32_t la, lb;

	memcpy(&la, a, 4);
	memcpy(&lb, b, 4);
	return s->cmp(a + 4, la, b + 4, lb);
}

/* pwrite all of buf at off. 0 or -errno. */
/* A run being written: records buffered, appended at s->end. */
struct run_writer {
	struct fs_sort *s;
	unsigned char *buf;
	size_t len;
	uint64_t start;
};

static int rw_flush(struct run_writer *w)
{
	int err = disk_pwrite_all(w->s->fd, w->buf, w->len, w->s->end);

	if (err == 0)
		w->s->end += w->len;
	w->len = 0;
	return err;
}

static int rw_put(struct run_writer *w, const void *rec, uint32_t len)
{
	int err = 0;

	if (w->len + 4 + len > SORT_BUF && w->len)
		err = rw_flush(w);
	if (err == 0 && 4 + (size_t)len > SORT_BUF) {
		memcpy(w->buf, &len, 4);
		err = disk_pwrite_all(w->s->fd, w->buf, 4, w->s->end);
		if (err == 0)
			err = disk_pwrite_all(w->s->fd, rec, len, w->s->end + 4);
		if (err == 0)
			w->s->end += 4 + (uint64_t)len;
		return err;
	}
	if (err == 0) {
		memcpy(w->buf + w->len, &len, 4);
		memcpy(w->buf + w->len + 4, rec, len);
		w->len += 4 + (size_t)len;
	}
	return err;
}

static int rw_open(struct fs_sort *s, struct run_writer *w)
{
	w->s = s;
	w->len = 0;
	w->start = s->end;
	w->buf = malloc(SORT_BUF);
	if (!w->buf)
		return -ENOMEM;
	if (s->fd < 0) {
		s->fd = cachetier_scratch_open(s->ct);
		if (s->fd < 0) {
			int err = s->fd;

			s->fd = -1;
			free(w->buf);
			return err;
		}
	}
	return 0;
}

/* Record the run w wrote. */
static int rw_close(struct run_writer *w, int err)
{
	struct fs_sort *s = w->s;

	if (err == 0 && w->len)
		err = rw_flush(w);
	free(w->buf);
	if (err == 0 && s->nruns == SIZE_MAX / sizeof(*s->runs))
		err = -ENOMEM;
	if (err == 0) {
		struct sort_run *r = realloc(s->runs, (s->nruns + 1) * sizeof(*r));

		if (!r)
			return -ENOMEM;
		s->runs = r;
		r[s->nruns++] = (struct sort_run){w->start, s->end - w->start};
	}
	return err;
}

/* Sort the records in memory (and keep them there). */
static void sort_arena(struct fs_sort *s)
{
	if (s->cmp && s->n > 1)
		qsort_r(s->idx, s->n, sizeof(*s->idx), idx_cmp, s);
}

/* Write the records in memory as one sorted run. */
static int spill(struct fs_sort *s)
{
	struct run_writer w;
	int err;

	sort_arena(s);
	err = rw_open(s, &w);
	if (err < 0)
		return err;
	for (size_t i = 0; err == 0 && i < s->n; i++) {
		uint32_t len;

		memcpy(&len, s->arena + s->idx[i], 4);
		err = rw_put(&w, s->arena + s->idx[i] + 4, len);
	}
	err = rw_close(&w, err);
	s->used = s->n = 0;
	return err;
}

int fs_sort_add(struct fs_sort *s, const void *rec, size_t len)
{
	int err;

	if (len > UINT32_MAX - 8)
		return -E2BIG;
	if (s->n && s->used + 4 + len + (s->n + 1) * sizeof(size_t) > s->budget) {
		err = spill(s);
		if (err < 0)
			return err;
	}
	if (s->used + 4 + len > s->cap) {
		size_t cap = s->cap ? s->cap : 4096;
		unsigned char *a;

		while (cap < s->used + 4 + len)
			cap *= 2;
		a = realloc(s->arena, cap);
		if (!a)
			return -ENOMEM;
		s->arena = a;
		s->cap = cap;
	}
	if (s->n == s->idxcap) {
		size_t cap = s->idxcap ? s->idxcap * 2 : 256;
		size_t *x = realloc(s->idx, cap * sizeof(*x));

		if (!x)
			return -ENOMEM;
		s->idx = x;
		s->idxcap = cap;
	}
	{
		uint32_t l = (uint32_t)len;

		memcpy(s->arena + s->used, &l, 4);
	}
	memcpy(s->arena + s->used + 4, rec, len);
	s->idx[s->n++] = s->used;
	s->used += 4 + len;
	s->count++;
	return 0;
}

/* ---- reading runs ---- */

/* Make need bytes from at contiguous in r->buf: 0, or -EIO (the run ends
 * short: this process wrote it, so only a failing disk). */
static int rr_want(struct run_reader *r, size_t need)
{
	if (r->len - r->at >= need)
		return 0;
	memmove(r->buf, r->buf + r->at, r->len - r->at);
	r->len -= r->at;
	r->at = 0;
	if (need > r->cap) {
		unsigned char *b = realloc(r->buf, need);

		if (!b)
			return -ENOMEM;
		r->buf = b;
		r->cap = need;
	}
	while (r->len < need) {
		size_t want = r->cap - r->len;
		ssize_t n;

		if (want > r->end - r->pos)
			want = (size_t)(r->end - r->pos);
		if (want == 0)
			return -EIO;
		n = pread(r->fd, r->buf + r->len, want, (off_t)r->pos);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		r->len += (size_t)n;
		r->pos += (uint64_t)n;
	}
	return 0;
}

/* The run's next record into r->cur: 1, 0 at its end, or -errno. */
static int rr_next(struct run_reader *r)
{
	int err;

	r->cur = NULL;
	if (r->len == r->at && r->pos == r->end)
		return 0;
	err = rr_want(r, 4);
	if (err == 0) {
		memcpy(&r->curlen, r->buf + r->at, 4);
		err = rr_want(r, 4 + (size_t)r->curlen);
	}
	if (err < 0)
		return err;
	r->cur = r->buf + r->at + 4;
	r->at += 4 + (size_t)r->curlen;
	return 1;
}

/* Does reader a's record come before b's? */
static int rr_less(const struct fs_sort *s, const struct run_reader *a, const struct run_reader *b)
{
	int c = s->cmp ? s->cmp(a->cur, a->curlen, b->cur, b->curlen) : 0;

	return c < 0 || (c == 0 && a->run < b->run);
}

static void heap_down(struct fs_sort_iter *it, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;

		if (l < it->nheap && rr_less(it->s, &it->r[it->heap[l]], &it->r[it->heap[m]]))
			m = l;
		if (l + 1 < it->nheap &&
		    rr_less(it->s, &it->r[it->heap[l + 1]], &it->r[it->heap[m]]))
			m = l + 1;
		if (m == i)
			return;
		size_t t = it->heap[i];

		it->heap[i] = it->heap[m];
		it->heap[m] = t;
		i = m;
	}
}

static void iter_free(struct fs_sort_iter *it)
{
	for (size_t i = 0; it->r && i < it->nr; i++)
		free(it->r[i].buf);
	free(it->r);
	free(it->heap);
	free(it);
}

/* An iterator over runs [lo, hi), or over the records in memory. */
static int iter_open(struct fs_sort *s, size_t lo, size_t hi, struct fs_sort_iter **out)
{
	struct fs_sort_iter *it = calloc(1, sizeof(*it));

	*out = NULL;
	if (!it)
		return -ENOMEM;
	it->s = s;
	if (hi > lo) {
		it->nr = hi - lo;
		it->r = calloc(it->nr, sizeof(*it->r));
		it->heap = calloc(it->nr, sizeof(*it->heap));
		if (!it->r || !it->heap) {
			iter_free(it);
			return -ENOMEM;
		}
		for (size_t i = 0; i < it->nr; i++) {
			struct run_reader *r = &it->r[i];

			r->fd = s->fd;
			r->pos = s->runs[lo + i].off;
			r->end = r->pos + s->runs[lo + i].len;
			r->run = lo + i;
			r->cap = SORT_BUF;
			r->buf = malloc(r->cap);
			if (!r->buf) {
				iter_free(it);
				return -ENOMEM;
			}
		}
	}
	*out = it;
	return 0;
}

int fs_sort_iter_open(struct fs_sort *s, struct fs_sort_iter **out)
{
	return iter_open(s, s->first, s->nruns, out);
}

int fs_sort_next(struct fs_sort_iter *it, const void **rec, size_t *len)
{
	int err;

	if (!it->r) {
		uint32_t l;

		if (it->i >= it->s->n)
			return 0;
		memcpy(&l, it->s->arena + it->s->idx[it->i], 4);
		*rec = it->s->arena + it->s->idx[it->i++] + 4;
		*len = l;
		return 1;
	}
	if (!it->started) {
		it->started = 1;
		for (size_t i = 0; i < it->nr; i++) {
			err = rr_next(&it->r[i]);
			if (err < 0)
				return err;
			if (err > 0)
				it->heap[it->nheap++] = i;
		}
		for (size_t i = it->nheap / 2; i-- > 0;)
			heap_down(it, i);
	} else if (it->nheap) {
		err = rr_next(&it->r[it->heap[0]]);
		if (err < 0)
			return err;
		if (err == 0)
			it->heap[0] = it->heap[--it->nheap];
		heap_down(it, 0);
	}
	if (!it->nheap)
		return 0;
	*rec = it->r[it->heap[0]].cur;
	*len = it->r[it->heap[0]].curlen;
	return 1;
}

void fs_sort_iter_close(struct fs_sort_iter *it)
{
	if (it)
		iter_free(it);
}

/* Merge runs [first, first + k) into one new run; their bytes are freed. */
static int merge_some(struct fs_sort *s, size_t k)
{
	struct fs_sort_iter *it;
	struct run_writer w;
	const void *rec;
	size_t len;
	int err = iter_open(s, s->first, s->first + k, &it), got;

	if (err < 0)
		return err;
	err = rw_open(s, &w);
	if (err < 0) {
		iter_free(it);
		return err;
	}
	while (err == 0 && (got = fs_sort_next(it, &rec, &len)) != 0)
		err = got < 0 ? got : rw_put(&w, rec, (uint32_t)len);
	iter_free(it);
	err = rw_close(&w, err);
	if (err < 0)
		return err;
	for (size_t i = s->first; i < s->first + k; i++)
		fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)s->runs[i].off,
			  (off_t)s->runs[i].len); /* space only: failing costs disk, not bytes */
	s->first += k;
	return 0;
}

int fs_sort_finish(struct fs_sort *s)
{
	int err = 0;

	if (!s->nruns) {
		sort_arena(s);
		return 0;
	}
	if (s->n)
		err = spill(s);
	free(s->arena);
	free(s->idx);
	s->arena = NULL;
	s->idx = NULL;
	s->cap = s->idxcap = 0;
	while (err == 0 && s->nruns - s->first > s->fanin)
		err = merge_some(s, s->fanin);
	return err;
}
