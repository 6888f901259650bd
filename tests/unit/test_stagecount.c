/*
 * test_stagecount.c — the stage's count of a path's bytes read
 * (fetch/fetch_stageread.c, piece_note_read): a path is read in full once the
 * union of the bytes reads got of it is all of it, whatever the order,
 * the repeats (the kernel reads a page again after another process
 * dropped the page cache) and the overlaps of the reads; and a piece
 * goes at the read (or the end of its read into memory, or the release
 * of a reply's hold) that completes its last path, never before.
 *
 * Seeded rounds (TEST_SEED repeats one): each stages 1-4 disjoint pieces
 * of one object (a tar header or not before the first path, 1-3 planned
 * paths of 1-40 KiB with gaps between them), read into memory by this
 * test (fetch__stage_add_via with a read that records its callbacks; the
 * bytes are in at once, the read's end comes at a random point of the
 * round). The reads: every path cut into random pieces, page-sized ones
 * among them, then as many again repeated from those and ranges anywhere
 * in the piece (headers, gaps, across paths), shuffled; some lent to a
 * reply (fetch_stage_hold) released after the next operation. After
 * every operation, against a model of bytes read per path: each read
 * answered from the stage (1, exact bytes) while its piece lives and not
 * once it went, the stage's memory (now) exactly the live pieces' buffers
 * (fetch__stagebuf_size of each),
 * the reads and bytes answered exact; at each round's end nothing left.
 * No read, hold or release takes the tier's lock (cachetier_lock_takes on
 * this thread: 0), the piece that goes at one of them included: its object
 * reference is dropped by the planner's next pass (fetch__stage_plans),
 * which the test makes at each round's end and which frees every piece
 * gone (stage_dead: 0 after it).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cachetier.h"
#include "check.h"
#include "fetch.h"
#include "fetch_i.h"
#include "fetch_stage_i.h"
#include "test_util.h"
#include "test_stage.h"

#define OBJ	(4u << 20)
#define SLOT	(512u * 1024)
#define NPIECE	4
#define NSUB	3
#define SUB_MAX (40u * 1024)
#define ROUNDS	300
#define KEY	"s.tar"

static char tmpdir[256];
static unsigned char *data;
static uint64_t rs; /* the round's generator */

/* A piece the test staged: its span, its paths, the model of bytes read. */
struct mpiece {
	uint64_t off, end;
	struct cachetier_piece sub[NSUB];
	unsigned char *seen[NSUB]; /* a byte of each path read: 1 */
	unsigned nsub, holds;
	int done, complete, gone;
	struct mem_rec rd; /* its read into memory (rec_read) */
};
static struct mpiece mp[NPIECE];
static int nmp;

static const int plan_id; /* the plan: compared by address only */

static uint64_t rn(uint64_t n)
{
	return n ? rnd(&rs) % n : 0;
}

enum op_kind { OP_READ, OP_DONE };
struct op {
	enum op_kind kind;
	int piece;
	uint64_t a, b;
};

static struct op *ops;
static size_t nops, capops;

static void push(enum op_kind k, int piece, uint64_t a, uint64_t b)
{
	if (nops == capops) {
		capops = capops ? 2 * capops : 256;
		ops = realloc(ops, capops * sizeof(*ops));
		if (!ops)
			FAIL("realloc");
	}
	ops[nops++] = (struct op){k, piece, a, b};
}

/* Model: [a, b) of piece m read; its complete flag updated. */
static void model_read(struct mpiece *m, uint64_t a, uint64_t b)
{
	int all = 1;

	for (unsigned i = 0; i < m->nsub; i++) {
		uint64_t so = m->sub[i].off, se = so + m->sub[i].len;
		uint64_t lo = a > so ? a : so, hi = b < se ? b : se;

		for (uint64_t x = lo; x < hi; x++)
			m->seen[i][x - so] = 1;
		for (uint64_t x = 0; x < m->sub[i].len && all; x++)
			all = m->seen[i][x];
	}
	m->complete = all;
}

static uint64_t live_bytes(void)
{
	uint64_t n = 0;

	for (int i = 0; i < nmp; i++)
		n += mp[i].gone ? 0 : fetch__stagebuf_size((size_t)(mp[i].end - mp[i].off), NULL);
	return n;
}

/* Model: does piece m go now (every path read, its read ended, no hold)? */
static void model_settle(struct mpiece *m)
{
	if (!m->gone && m->complete && m->done && m->holds == 0)
		m->gone = 1;
}

/* the stage's lock taken by reads (read_locks): a hold or a read that
 * finds no piece 1, a hold 1 (its find and count under one take), a read
 * answered 2 (its find and count, then the end of the hold kept for its
 * copy), a release 1; no bytes here are carried by a piece in flight, so
 * no take is made around the cache's look */
static uint64_t reads_want, bytes_want, locks_want;

/* the tier's lock taken by reads, holds and releases (this thread's
 * cachetier_lock_takes across each call) since the last check: want 0 */
static uint64_t tier_takes;

/* pieces gone and not freed yet (the stage's dead list) */
static unsigned stage_dead(struct fetch *s)
{
	struct fetch_stage *st = atomic_load(&s->stage);

	return st ? (unsigned)atomic_load(&st->ndead) : 0;
}

static void check_stage(struct fetch *s, int round, size_t k, const char *what)
{
	struct fetch_stage_stats st;

	fetch_stage_stats_get(s, &st);
	CHECK(st.now == live_bytes(), "round %d op %zu (%s): stage holds %llu, live pieces %llu",
	      round, k, what, (unsigned long long)st.now, (unsigned long long)live_bytes());
	CHECK(st.reads == reads_want && st.read_bytes == bytes_want,
	      "round %d op %zu: %llu reads / %llu bytes answered, want %llu / %llu", round, k,
	      (unsigned long long)st.reads, (unsigned long long)st.read_bytes,
	      (unsigned long long)reads_want, (unsigned long long)bytes_want);
	CHECK(st.read_locks == locks_want,
	      "round %d op %zu (%s): the stage's lock taken %llu times, want %llu", round, k, what,
	      (unsigned long long)st.read_locks, (unsigned long long)locks_want);
	CHECK(tier_takes == 0,
	      "round %d op %zu (%s): reads took the tier's lock %llu times, want 0", round, k, what,
	      (unsigned long long)tier_takes);
	tier_takes = 0;
}

/* fetch_stage_release, its takes of the tier's lock counted */
static void release_counted(void *ref)
{
	uint64_t t0 = cachetier_lock_takes();

	fetch_stage_release(ref);
	tier_takes += cachetier_lock_takes() - t0;
}

static void round_run(struct fetch *s, struct cachetier_obj *o, int round)
{
	void *held_ref = NULL;
	int held_piece = -1;
	unsigned char *buf = malloc(SLOT);

	if (!buf)
		FAIL("malloc");
	nmp = 1 + (int)rn(NPIECE);
	nops = 0;
	for (int i = 0; i < nmp; i++) {
		struct mpiece *m = &mp[i];
		uint64_t x;

		memset(m, 0, sizeof(*m));
		m->off = (uint64_t)i * SLOT + rn(4096);
		x = m->off + (rn(2) ? 512 : 0); /* a tar header staged, not counted */
		m->nsub = 1 + (unsigned)rn(NSUB);
		for (unsigned j = 0; j < m->nsub; j++) {
			x += j ? rn(8192) : 0; /* the gap to the path before */
			m->sub[j].off = x;
			m->sub[j].len = 1 + rn(SUB_MAX);
			x += m->sub[j].len;
			m->seen[j] = calloc(1, m->sub[j].len);
			if (!m->seen[j])
				FAIL("calloc");
		}
		m->end = x + rn(2) * rn(4096); /* bytes carried past the last path, or none */
		CHECK(fetch__stage_add_via(s, o, m->off, m->end, m->sub, m->nsub, &plan_id,
					   (uint32_t)i, 0, rec_read, &m->rd) == 0,
		      "round %d: piece %d staged", round, i);
		memcpy(m->rd.buf, data + m->off, m->end - m->off);
		m->rd.progress(m->rd.arg, m->end); /* every byte in */
		/* every path cut into random reads (some a page) */
		for (unsigned j = 0; j < m->nsub; j++) {
			uint64_t a = m->sub[j].off, e = a + m->sub[j].len;

			while (a < e) {
				uint64_t l = rn(3) == 0 ? 4096 : 1 + rn(16384);

				if (l > e - a)
					l = e - a;
				push(OP_READ, i, a, a + l);
				a += l;
			}
		}
	}
	/* as many again: repeats of those, and ranges anywhere in a piece */
	for (size_t k = 0, n = nops; k < n; k++) {
		if (rn(2)) {
			struct op r = ops[rn(n)];

			push(OP_READ, r.piece, r.a, r.b);
		} else {
			struct mpiece *m = &mp[rn((uint64_t)nmp)];
			uint64_t a = m->off + rn(m->end - m->off);
			uint64_t b = a + 1 + rn(m->end - a);

			push(OP_READ, (int)(m - mp), a, b);
		}
	}
	for (int i = 0; i < nmp; i++)
		push(OP_DONE, i, 0, 0);
	for (size_t k = nops; k > 1; k--) { /* shuffled */
		size_t j = rn(k);
		struct op t = ops[k - 1];

		ops[k - 1] = ops[j];
		ops[j] = t;
	}
	for (size_t k = 0; k < nops; k++) {
		struct op *op = &ops[k];
		struct mpiece *m = &mp[op->piece];
		int got, want = !m->gone, hold = op->kind == OP_READ && rn(4) == 0;
		char *ptr = NULL;
		void *ref = NULL;

		if (op->kind == OP_DONE) {
			m->done = 1;
			m->rd.donefn(m->rd.arg, 0);
			model_settle(m);
		} else {
			size_t len = (size_t)(op->b - op->a);
			uint64_t t0 = cachetier_lock_takes();

			if (hold) {
				got = fetch_stage_hold(s, o, len, op->a, &ptr, &ref);
				CHECK(got == want && (!got || memcmp(ptr, data + op->a, len) == 0),
				      "round %d op %zu: hold of [%llu, %llu) of piece %d: %d, want "
				      "%d",
				      round, k, (unsigned long long)op->a,
				      (unsigned long long)op->b, op->piece, got, want);
			} else {
				got = fetch_stage_read(s, o, buf, len, op->a);
				CHECK(got == want && (!got || memcmp(buf, data + op->a, len) == 0),
				      "round %d op %zu: read of [%llu, %llu) of piece %d: %d, want "
				      "%d",
				      round, k, (unsigned long long)op->a,
				      (unsigned long long)op->b, op->piece, got, want);
			}
			tier_takes += cachetier_lock_takes() - t0;
			locks_want += 1 + (!hold && got);
			if (got) {
				reads_want++;
				bytes_want += len;
			}
			if (want) {
				model_read(m, op->a, op->b);
				m->holds += got && ref;
				model_settle(m);
			}
		}
		/* the hold of the operation before ends after this one */
		if (held_ref) {
			release_counted(held_ref);
			locks_want++;
			mp[held_piece].holds--;
			model_settle(&mp[held_piece]);
		}
		held_ref = ref;
		held_piece = ref ? op->piece : -1;
		check_stage(s, round, k, op->kind == OP_DONE ? "done" : "read");
	}
	if (held_ref) {
		release_counted(held_ref);
		locks_want++;
		mp[held_piece].holds--;
		model_settle(&mp[held_piece]);
	}
	check_stage(s, round, nops, "end");
	/* the planner's pass frees the pieces gone (their object references) */
	{
		void *const plans[1] = {(void *)&plan_id};

		fetch__stage_plans(s, plans, 1);
		CHECK(stage_dead(s) == 0, "round %d: %u pieces gone and not freed after a pass",
		      round, stage_dead(s));
	}
	for (int i = 0; i < nmp; i++) {
		CHECK(mp[i].gone, "round %d: piece %d read in full and gone", round, i);
		for (unsigned j = 0; j < mp[i].nsub; j++)
			free(mp[i].seen[j]);
	}
	free(buf);
}

/* A path read in more disjoint pieces than the stage keeps runs for
 * (STAGE_SUB_RUNS_MAX, 64: every other page of 100, then the rest) is
 * served but never counted read: its piece stays until its plan goes. */
static void lost_path(struct fetch *s, struct cachetier_obj *o)
{
	struct fetch_stage_stats st;
	struct mpiece *m = &mp[0];
	unsigned char *buf = malloc(4096);
	int ok = 1;

	memset(m, 0, sizeof(*m));
	m->off = 0;
	m->end = 200 * 4096;
	m->sub[0] = (struct cachetier_piece){.off = 0, .len = m->end};
	CHECK(buf && fetch__stage_add_via(s, o, 0, m->end, m->sub, 1, &plan_id, 0, 0, rec_read,
					  &m->rd) == 0,
	      "lost: staged");
	memcpy(m->rd.buf, data, m->end);
	m->rd.progress(m->rd.arg, m->end);
	m->rd.donefn(m->rd.arg, 0);
	for (int pass = 0; pass < 2; pass++) {
		for (uint64_t pg = (uint64_t)pass; pg < 200; pg += 2)
			ok &= fetch_stage_read(s, o, buf, 4096, pg * 4096) == 1 &&
			      memcmp(buf, data + pg * 4096, 4096) == 0;
	}
	fetch_stage_stats_get(s, &st);
	CHECK(ok, "lost: every page served, exact");
	CHECK(st.now == fetch__stagebuf_size(200 * 4096, NULL),
	      "lost: the piece stays (memory %llu) though every byte was read",
	      (unsigned long long)st.now);
	fetch__stage_plans(s, NULL, 0);
	fetch_stage_stats_get(s, &st);
	CHECK(st.now == 0 && st.dropped == 1,
	      "lost: gone with its plan (memory %llu, dropped %llu)", (unsigned long long)st.now,
	      (unsigned long long)st.dropped);
	free(buf);
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "stagecount", 20261130u);
	struct stage_rig rig;
	struct cachetier_obj *o;
	struct fetch *s;
	struct fetch_stage_stats st;

	rs = seed * 2654435761u + 1;
	stage_rig_open(&rig, tmpdir, KEY, OBJ, &rs, 16u << 20);
	data = rig.data;
	s = rig.s;
	o = rig.o;
	for (int r = 0; r < ROUNDS; r++)
		round_run(s, o, r);
	lost_path(s, o);
	fetch_stage_stats_get(s, &st);
	printf("stagecount: %d rounds, %llu spans, %llu reads answered (%llu bytes), %llu "
	       "dropped\n",
	       ROUNDS, (unsigned long long)st.pieces, (unsigned long long)st.reads,
	       (unsigned long long)st.read_bytes, (unsigned long long)st.dropped);
	CHECK(st.dropped == 1 && st.failed == 0 && st.full == 0 && st.fallbacks == 0,
	      "nothing but lost_path's dropped (%llu), failed, full or fallen back",
	      (unsigned long long)st.dropped);
	stage_rig_close(&rig);
	free(ops);
	return test_end("stagecount", tmpdir, seed);
}
