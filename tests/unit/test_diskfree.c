/*
 * test_diskfree.c — the free-space check counts each byte of this
 * process's fills in flight once (cachetier.c, cachetier__disk_free): the
 * last statvfs's estimate has the fills begun since in it; the reserved
 * bytes it does not have (fills begun before it, not landed) are taken
 * off it. On a tmpfs of 8 MiB mounted by the test (root; else those tests are
 * skipped), against the fault:// test store with async=1 and hold_at= (a fill
 * held in flight while a file exists): the disk's free bytes are set by a
 * filler file, not timed.
 *
 * test_pending: --min-free 256 KiB (bound: statvfs at every check once a
 * unit was made room for since). Object C's 4 units cached. A PF_EVICT
 * prefetch of A's 2 units (128 KiB) held before its first byte: reserved,
 * nothing written. A filler file leaves the disk S = the reserve + 512 KiB
 * + slack free (0 <= slack < 64 KiB). A reader of B's second chunk (8
 * units, 512 KiB) asks for room: the disk holds it only without A's 128
 * KiB still to come, so it evicts (C's 4 units, one batch; before the mend the check
 * ignored A's reserved bytes, evicted nothing, and once A's hold went the
 * disk kept slack - 128 KiB less than the reserve: 2 checks failed).
 * At the end, every fill ended, the disk keeps its reserve, every byte
 * read exact.
 *
 * test_since: below. Before the mend 3 of the 16 checks failed.
 *
 * test_written: below; bytes a fill wrote but did not land yet counted
 * once. Before the mend 2 of its checks failed.
 *
 * test_batch_written: below; the same for a batch fill's bytes written
 * while its item's HEAD is out. Before the mend 2 of its checks failed.
 *
 * test_estimate: below; the estimate between two statvfs calls counts
 * each byte once, against a model, byte for byte. Runs without root (the
 * others are then skipped). Before free_wrote 1 of its 2 checks failed
 * (300 of 379 answers differed).
 *
 * Every wait for a state is a poll of the tier's counters bounded at 60 s
 * (a failed check, never a sleep that decides a count).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "backend.h"
#include "cachetier.h"
#include "cachetier_i.h"
#include "check.h"
#include "test_util.h"

#define UNIT	(64u * 1024)
#define CHUNK	(8 * UNIT) /* units of 64 KiB */
#define RESERVE (256u * 1024)

static char tmpdir[256], disk[300];

static uint64_t free_bytes(const char *path)
{
	struct statvfs sv;

	if (statvfs(path, &sv) != 0)
		FAIL("statvfs %s", path);
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

/* A tier in disk/SUB over the fault:// store (async, held while hold
 * exists), readahead a chunk, the reserve RESERVE; small_fills: 3 slots. */
static struct cachetier *df_tier(const char *sub, int small_fills, struct backend **be, char *hold,
				 size_t holdsz)
{
	struct cachetier_config cc;
	char dir[400];

	*be = fault_store(tmpdir, "async=1&hold_at=0");
	snprintf(dir, sizeof(dir), "%s/%s", disk, sub);
	snprintf(hold, holdsz, "%s/src.hold", tmpdir);
	tier_config(&cc, dir, 1ull << 30, 2, CHUNK);
	cc.readahead_max_bytes = CHUNK;
	cc.small_fills = small_fills;
	cc.min_free_bytes = RESERVE;
	return tier_open(&cc, *be);
}

/* A file disk/NAME of n bytes (the disk's free bytes set, not timed). */
static void filler_write(char *path, size_t pathsz, const char *name, uint64_t n)
{
	unsigned char *fill = calloc(1, n);
	int fd;

	snprintf(path, pathsz, "%s/%s", disk, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (!fill || fd < 0 || write(fd, fill, n) != (ssize_t)n || close(fd) != 0)
		FAIL("filler of %llu bytes", (unsigned long long)n);
	free(fill);
}

static void test_pending(uint64_t *s)
{
	unsigned char *a = src_object(tmpdir, "a.tar", 2 * UNIT, s),
		      *b = src_object(tmpdir, "b.tar", 2 * CHUNK, s),
		      *c = src_object(tmpdir, "c.tar", 4 * UNIT, s);
	struct cachetier_stats st0, st;
	struct cachetier_obj *oa, *ob, *oc;
	struct backend *be;
	char hold[300], filler[400];
	struct cachetier *ct = df_tier("c", 0, &be, hold, sizeof(hold));
	uint64_t S0, S, F, slack, end;

	oa = obj_open(ct, be, "a.tar");
	ob = obj_open(ct, be, "b.tar");
	oc = obj_open(ct, be, "c.tar");

	/* C cached (a read from offset 0 before the hold exists) */
	CHECK(obj_exact(oc, c, 0, 4 * UNIT), "C read exact");
	fills_idle(ct);

	/* A's fill held before its first byte: 128 KiB reserved, none written */
	flag_file(hold, 1);
	CHECK(cachetier_obj_prefetch_range(oa, 0, 2 * UNIT, CACHETIER_PF_EVICT) == 0,
	      "A's prefetch range");
	count_reach(ct, TC_FILLS_INFLIGHT, 1, "A's fill in flight");

	/* the disk: the reserve, B's chunk and slack < 64 KiB free */
	S0 = free_bytes(disk);
	F = (S0 - RESERVE - CHUNK - UNIT / 2) & ~(uint64_t)4095;
	filler_write(filler, sizeof(filler), "filler", F);
	S = free_bytes(disk);
	slack = S - RESERVE - CHUNK;
	printf("pending: free %llu after a filler of %llu: reserve + chunk + %llu\n",
	       (unsigned long long)S, (unsigned long long)F, (unsigned long long)slack);
	CHECK(S >= RESERVE + CHUNK && slack < UNIT, "the slack %lld is in [0, 65536)",
	      (long long)(S - RESERVE - CHUNK));

	/* B's second chunk: room for it and A's 128 KiB still to come */
	stats(ct, &st0);
	CHECK(obj_exact(ob, b, CHUNK, CHUNK), "B's chunk 1 read exact");
	stats(ct, &st);
	printf("pending: B's read evicted %llu units\n",
	       (unsigned long long)(st.evict_units - st0.evict_units));
	CHECK(st.evict_units - st0.evict_units == 4,
	      "B's read evicted %llu units, want 4 (C's, one batch: A's pending 131072 bytes "
	      "less the slack %llu are 2 units; 0 before the mend)",
	      (unsigned long long)(st.evict_units - st0.evict_units), (unsigned long long)slack);

	/* A's hold goes: its bytes land; the disk keeps its reserve */
	flag_file(hold, 0);
	CHECK(prefetch_ended(oa), "A's prefetch ended");
	fills_idle(ct);
	end = free_bytes(disk);
	CHECK(end >= RESERVE,
	      "free at the end %llu, want the reserve %u or more (before the mend: "
	      "the reserve less 131072 - slack)",
	      (unsigned long long)end, RESERVE);
	CHECK(obj_exact(oa, a, 0, 2 * UNIT), "A exact");
	unlink(filler);
	tier_end(ct, be, oa, ob, oc, NULL);
	free(a);
	free(b);
	free(c);
}

/* test_since: --min-free 256 KiB again (bound 64 KiB). X (one unit of
 * 4 KiB) prefetched with PF_FIT and held before its first byte: its check
 * makes the first statvfs, the disk then the reserve + 132 KiB free (a
 * filler file), and 4 KiB are made room for since. Y's PF_FIT prefetch of
 * 64 KiB: the estimate (132 KiB less X's 4 KiB) clears Y and the bound
 * exactly with X counted once, so no statvfs is made (room_statfs 1);
 * before the mend X's 4 KiB were counted in the estimate and again in
 * reserved, and the check made a statvfs more (room_statfs 2: 1 check
 * failed). Y fits either way (0 unfit), X and Y exact. */
static void test_since(uint64_t *s)
{
	unsigned char *x = src_object(tmpdir, "x.tar", 4096, s),
		      *y = src_object(tmpdir, "y.tar", UNIT, s);
	struct cachetier_stats st;
	struct cachetier_obj *ox, *oy;
	struct backend *be;
	char hold[300], filler[400];
	struct cachetier *ct = df_tier("c2", 1, &be, hold, sizeof(hold)); /* X and Y held at once */
	uint64_t S0, F, S;

	ox = obj_open(ct, be, "x.tar");
	oy = obj_open(ct, be, "y.tar");

	/* the disk: the reserve + 132 KiB free when X's check looks */
	S0 = free_bytes(disk);
	F = S0 - RESERVE - 132 * 1024;
	filler_write(filler, sizeof(filler), "filler2", F);
	S = free_bytes(disk);
	CHECK(S == RESERVE + 132 * 1024, "since: free %llu, want the reserve + 135168",
	      (unsigned long long)S);

	flag_file(hold, 1);
	CHECK(cachetier_obj_prefetch_range(ox, 0, 4096, CACHETIER_PF_FIT) == 0, "X's range");
	count_reach(ct, TC_FILLS_INFLIGHT, 1, "since: X's fill held");
	CHECK(cachetier_obj_prefetch_range(oy, 0, UNIT, CACHETIER_PF_FIT) == 0, "Y's range");
	count_reach(ct, TC_FILLS_INFLIGHT, 2, "since: Y's fill held");
	stats(ct, &st);
	printf("since: statvfs calls %llu, unfit %llu\n", (unsigned long long)st.room_statfs,
	       (unsigned long long)st.unfit_bytes);
	CHECK(st.room_statfs == 1 && st.unfit_bytes == 0,
	      "since: statvfs calls %llu (want 1: X's; 2 before the mend), unfit %llu (want 0)",
	      (unsigned long long)st.room_statfs, (unsigned long long)st.unfit_bytes);
	flag_file(hold, 0);
	CHECK(prefetch_ended(ox) && prefetch_ended(oy), "since: the prefetches ended");
	fills_idle(ct);
	CHECK(obj_exact(ox, x, 0, 4096) && obj_exact(oy, y, 0, UNIT), "since: X and Y exact");
	unlink(filler);
	tier_end(ct, be, ox, oy, NULL);
	free(x);
	free(y);
}

/* test_written: --min-free 256 KiB, chunks of 384 KiB (units of 48 KiB: a
 * sink buffer of 128 KiB ends inside a unit). A's PF_FIT prefetch of its
 * chunk (8 units) is held at 128 KiB: the writer wrote one buffer, units
 * 0-1 landed (96 KiB, the usage) and 32 KiB of unit 2 are on the disk,
 * still reserved (288 KiB reserved, 256 KiB of it not written). The room
 * (cachetier_room) is then exactly the disk's free bytes less the reserve
 * and A's 256 KiB still to come; and with the disk set (a filler file) to
 * the reserve + 256 KiB + one unit + slack (0 <= slack < 4 KiB), B's PF_FIT
 * prefetch of one unit fits (cachetier__disk_free after a statvfs made
 * now): fetched, 0 bytes unfit. Before the mend the 32 KiB written were
 * counted on the disk and again in reserved: a room 32 KiB short, B unfit
 * (2 checks failed). A's hold goes: A and B exact, the reserve kept. */
#define WCHUNK (384u * 1024)
#define WUNIT  (WCHUNK / 8)

static void test_written(uint64_t *s)
{
	unsigned char *a = src_object(tmpdir, "wa.tar", WCHUNK, s),
		      *b = src_object(tmpdir, "wb.tar", WUNIT, s);
	const uint64_t pend = WCHUNK - 3 * WUNIT + (WUNIT - 32 * 1024); /* 256 KiB */
	struct cachetier_config cc;
	struct cachetier_stats st;
	struct cachetier_obj *oa, *ob;
	struct backend *be = fault_store(tmpdir, "async=1&hold_at=131072");
	char dir[400], hold[300], filler[400];
	struct cachetier *ct;
	uint64_t S = 0, S2, room = 0, F, end;
	int landed = 0, steady = 0;

	snprintf(dir, sizeof(dir), "%s/c3", disk);
	snprintf(hold, sizeof(hold), "%s/src.hold", tmpdir);
	tier_config(&cc, dir, 1ull << 30, 2, WCHUNK);
	cc.readahead_max_bytes = WCHUNK;
	cc.min_free_bytes = RESERVE;
	ct = tier_open(&cc, be);
	oa = obj_open(ct, be, "wa.tar");
	ob = obj_open(ct, be, "wb.tar");

	flag_file(hold, 1);
	CHECK(cachetier_obj_prefetch_range(oa, 0, WCHUNK, CACHETIER_PF_FIT) == 0, "A's range");
	/* units 0-1 landed (a poll bounded at 60 s) */
	for (int i = 0; i < 60000 && !landed; i++) {
		landed = cachetier_obj_range_cached(oa, 0, 2 * WUNIT);
		if (!landed)
			usleep(1000);
	}
	CHECK(landed, "written: A's units 0-1 landed");
	CHECK(!cachetier_obj_range_cached(oa, 2 * WUNIT, WUNIT), "written: A's unit 2 not landed");
	/* the disk's free bytes and the room, until the disk holds still
	 * between two looks (the flusher's map writes) */
	for (int i = 0; i < 1000 && !steady; i++) {
		S = free_bytes(disk);
		room = cachetier_room(ct);
		S2 = free_bytes(disk);
		steady = S == S2;
	}
	printf("written: free %llu, room %llu\n", (unsigned long long)S, (unsigned long long)room);
	CHECK(steady && S > RESERVE + pend && room == S - RESERVE - pend,
	      "written: room %llu, want free %llu - the reserve - %llu (A's bytes still to "
	      "come; 32768 less before the mend)",
	      (unsigned long long)room, (unsigned long long)S, (unsigned long long)pend);

	/* the disk: the reserve, A's 256 KiB to come, B's unit and slack */
	F = (S - RESERVE - pend - WUNIT) & ~(uint64_t)4095;
	filler_write(filler, sizeof(filler), "filler3", F);
	S = free_bytes(disk);
	CHECK(S >= RESERVE + pend + WUNIT && S - (RESERVE + pend + WUNIT) < 4096,
	      "written: free %llu, want the reserve + %llu + slack < 4096", (unsigned long long)S,
	      (unsigned long long)(pend + WUNIT));
	CHECK(cachetier_obj_prefetch_range(ob, 0, WUNIT, CACHETIER_PF_FIT) == 0, "B's range");
	CHECK(prefetch_ended(ob), "written: B's prefetch ended");
	stats(ct, &st);
	CHECK(st.unfit_bytes == 0 && cachetier_obj_range_cached(ob, 0, WUNIT),
	      "written: B fetched, unfit %llu (want 0; 49152 before the mend)",
	      (unsigned long long)st.unfit_bytes);

	flag_file(hold, 0);
	CHECK(prefetch_ended(oa), "written: A's prefetch ended");
	fills_idle(ct);
	end = free_bytes(disk);
	CHECK(end >= RESERVE, "written: free at the end %llu, want the reserve %u or more",
	      (unsigned long long)end, RESERVE);
	CHECK(obj_exact(oa, a, 0, WCHUNK) && obj_exact(ob, b, 0, WUNIT), "written: A and B exact");
	unlink(filler);
	tier_end(ct, be, oa, ob, NULL);
	free(a);
	free(b);
}

/* The bytes allocated on the disk to the data files under dir (names of
 * 16 characters: an object's hash, not its state file or map), recursively. */
static uint64_t data_alloc(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	uint64_t sum = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char p[1200];
		struct stat st;

		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (lstat(p, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode))
			sum += data_alloc(p);
		else if (S_ISREG(st.st_mode) && strlen(e->d_name) == 16)
			sum += (uint64_t)st.st_blocks * 512;
	}
	closedir(d);
	return sum;
}

struct bw_call {
	struct cachetier *ct;
	struct cachetier_batch_piece p;
	int err;
};

static void *bw_fill(void *arg)
{
	struct bw_call *c = arg;
	size_t end = 1;

	c->err = cachetier_batch_fill(c->ct, &c->p, 1, &end, 1, 1, 1);
	return NULL;
}

/* test_batch_written: --min-free 256 KiB, a batch fill (the fault store's
 * batch=1) of G's 4 units (256 KiB, one item) whose HEAD is held
 * (heads=1 while the hold file exists): the fill writer wrote the item
 * (the data file holds 256 KiB), the units are not valid, the 256 KiB
 * still reserved. The room (cachetier_room) is then exactly the disk's
 * free bytes less the reserve (none of G's bytes still to come); and with
 * the disk set (a filler file) to the reserve + one unit + slack (0 <=
 * slack < 4 KiB), H's PF_FIT prefetch of one unit fits (a statvfs made
 * now): fetched, 0 bytes unfit. Before the mend the batch's written bytes
 * were counted on the disk and again in reserved until the HEAD returned:
 * a room 256 KiB short, H unfit (2 checks failed). The HEAD goes: G and H
 * exact, the reserve kept. */
static void test_batch_written(uint64_t *s)
{
	unsigned char *g = src_object(tmpdir, "bg.tar", 4 * UNIT, s),
		      *h = src_object(tmpdir, "bh.tar", UNIT, s);
	struct cachetier_config cc;
	struct cachetier_stats st;
	struct cachetier_obj *og, *oh;
	struct backend *be = fault_store(tmpdir, "batch=1&heads=1");
	char dir[400], hold[300], filler[400];
	struct cachetier *ct;
	struct bw_call call;
	pthread_t th;
	uint64_t S = 0, S2, room = 0, F, end, wrote = 0;
	int steady = 0;

	snprintf(dir, sizeof(dir), "%s/c4", disk);
	snprintf(hold, sizeof(hold), "%s/src.hold", tmpdir);
	tier_config(&cc, dir, 1ull << 30, 2, CHUNK);
	cc.readahead_max_bytes = CHUNK;
	cc.min_free_bytes = RESERVE;
	ct = tier_open(&cc, be);
	og = obj_open(ct, be, "bg.tar");
	oh = obj_open(ct, be, "bh.tar");

	flag_file(hold, 1);
	call = (struct bw_call){ct, {og, 0, 4 * UNIT}, 0};
	if (pthread_create(&th, NULL, bw_fill, &call) != 0)
		FAIL("pthread_create");
	/* the item written (a poll bounded at 60 s), its HEAD held */
	for (int i = 0; i < 60000 && wrote != 4 * UNIT; i++) {
		wrote = data_alloc(dir);
		if (wrote != 4 * UNIT)
			usleep(1000);
	}
	CHECK(wrote == 4 * UNIT, "batch written: the data file holds %llu bytes, want 262144",
	      (unsigned long long)wrote);
	CHECK(!cachetier_obj_range_cached(og, 0, UNIT), "batch written: G not valid (HEAD held)");
	/* The data file holds the item's bytes while the writer's pwritev
	 * runs; the writer counts them (wr_bytes) just after it returns, so
	 * for that moment they are off the disk and still in reserved (a
	 * TSan run met it). So the room is read until it counts them once,
	 * with the disk holding still between two looks (a poll bounded at
	 * 60 s): before the mend it never does, 256 KiB short for as long as
	 * the HEAD is held. */
	for (int i = 0; i < 60000; i++) {
		S = free_bytes(disk);
		room = cachetier_room(ct);
		S2 = free_bytes(disk);
		steady = S == S2;
		if (steady && S > RESERVE && room == S - RESERVE)
			break;
		usleep(1000);
	}
	printf("batch written: free %llu, room %llu\n", (unsigned long long)S,
	       (unsigned long long)room);
	CHECK(steady && S > RESERVE && room == S - RESERVE,
	      "batch written: room %llu, want free %llu - the reserve (262144 less before the "
	      "mend)",
	      (unsigned long long)room, (unsigned long long)S);

	/* the disk: the reserve, H's unit and slack */
	F = (S - RESERVE - UNIT) & ~(uint64_t)4095;
	filler_write(filler, sizeof(filler), "filler4", F);
	S = free_bytes(disk);
	CHECK(S >= RESERVE + UNIT && S - (RESERVE + UNIT) < 4096,
	      "batch written: free %llu, want the reserve + 65536 + slack < 4096",
	      (unsigned long long)S);
	CHECK(cachetier_obj_prefetch_range(oh, 0, UNIT, CACHETIER_PF_FIT) == 0, "H's range");
	CHECK(prefetch_ended(oh), "batch written: H's prefetch ended");
	stats(ct, &st);
	CHECK(st.unfit_bytes == 0 && cachetier_obj_range_cached(oh, 0, UNIT),
	      "batch written: H fetched, unfit %llu (want 0; 65536 before the mend)",
	      (unsigned long long)st.unfit_bytes);

	unlink(filler);
	flag_file(hold, 0);
	pthread_join(th, NULL);
	CHECK(call.err == 0, "batch written: the batch fill: %d", call.err);
	fills_idle(ct);
	end = free_bytes(disk);
	CHECK(end >= RESERVE, "batch written: free at the end %llu, want the reserve %u or more",
	      (unsigned long long)end, RESERVE);
	CHECK(cachetier_obj_range_cached(og, 0, 4 * UNIT) && obj_exact(og, g, 0, 4 * UNIT) &&
		  obj_exact(oh, h, 0, UNIT),
	      "batch written: G (from the batch) and H exact");
	tier_end(ct, be, og, oh, NULL);
	free(g);
	free(h);
}

/* ---- test_estimate ---- */

/* The tier whose disk is faked (NULL: every call the real one) and the
 * thread whose calls are answered: fk_free bytes free (f_frsize 1: any
 * byte count), calls counted. */
static struct cachetier *fk_ct;
static pthread_t fk_thread;
static uint64_t fk_free, fk_calls;

/* fstatvfs of this program (the tier's calls come here; with
 * _FILE_OFFSET_BITS=64 the symbol is fstatvfs64): the real one, or the
 * fake disk's answer. */
int fstatvfs(int fd, struct statvfs *sv)
{
	static int (*real)(int, struct statvfs *);

	if (!__atomic_load_n(&fk_ct, __ATOMIC_ACQUIRE) ||
	    !pthread_equal(pthread_self(), fk_thread)) {
		if (!real)
			*(void **)&real =
			    dlsym(RTLD_NEXT, sizeof(off_t) == 8 ? "fstatvfs64" : "fstatvfs");
		return real ? real(fd, sv) : -1;
	}
	fk_calls++;
	memset(sv, 0, sizeof(*sv));
	sv->f_bsize = 4096;
	sv->f_frsize = 1;
	sv->f_blocks = sv->f_bfree = sv->f_bavail = fk_free;
	return 0;
}

/* A fill of the model: len bytes reserved, wrote of them written, landed
 * of those landed; since: begun after the last statvfs (its bytes made
 * room for since); at_s: else its bytes written at that statvfs. */
struct ef_fill {
	uint64_t len, wrote, landed, at_s;
	int since;
};

/* The model's fills not landed whole. */
static int ef_live(const struct ef_fill *f, int n)
{
	int live = 0;

	for (int i = 0; i < n; i++)
		live += f[i].landed < f[i].len;
	return live;
}

#define EF_MAX	 64 /* the model's fills: in flight, or ended since the statvfs */
#define EF_LIVE	 6  /* in flight at most */
#define EF_STEPS 2000

/* The model's answer of cachetier__disk_free(ct, len, own) with the
 * asking fill's own bytes reserved and none of its bytes made room for:
 * *stat whether a statvfs is due (the decision: the last answer a less
 * the bytes made room for since, used, clears the reserve, len, the
 * others' bytes it lacks and the bound), the answer after it: the disk's
 * free bytes now less every other fill's bytes not written; else a less
 * used less, of the fills begun before the statvfs, the bytes not
 * written at it. */
static uint64_t ef_model(const struct ef_fill *f, int n, int known, uint64_t a, uint64_t dfree,
			 uint64_t len, uint64_t keep, uint64_t bound, int *stat)
{
	uint64_t used = 0, lack = 0, towrite = 0;

	for (int i = 0; i < n; i++) {
		if (f[i].since)
			used += f[i].len;
		else
			lack += f[i].len - f[i].at_s;
		towrite += f[i].len - f[i].wrote;
	}
	*stat = !(known && used < bound && a >= used && a - used >= keep + len + lack + bound);
	if (*stat)
		return dfree > towrite ? dfree - towrite : 0;
	return a - used > lack ? a - used - lack : 0;
}

/* test_estimate: seeded steps on a tier whose disk answers a fake
 * statvfs (fstatvfs above, the test thread's calls; a reserve of 1 MiB:
 * a statvfs per 256 KiB made room for, or nearer the reserve than the
 * bound). The fill writer's accounts are moved as the fills move them
 * (the tier's workers idle): a fill begins (its bytes reserved, then its
 * room check, cachetier__disk_free with own its bytes, then its bytes
 * made room for, as make_room_near), writes (wr_bytes, the disk's free
 * bytes less them), lands written bytes (wr_gone, then out of reserved),
 * another program takes or frees disk bytes, or a PF_FIT-like look
 * (own 0) asks. Every check's answer equals the model's (ef_model) byte
 * for byte, and so does whether it made a statvfs. Before free_wrote the
 * estimate took every reserved byte not made room for since as not on
 * the dfree (the fills begun before the statvfs counted twice by their
 * bytes written at it) and took the fills begun since off reserved even
 * once landed (counted not at all); with cachetier__resv_unwritten's
 * written part stopped at 0 the second stays. */
static void test_estimate(uint64_t seed)
{
	struct ef_fill f[EF_MAX];
	struct cachetier_config cc;
	struct backend *be = fault_store(tmpdir, "async=1");
	char dir[400];
	struct cachetier *ct;
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 7, a = 0, dfree = 64ull << 20, keep, bound;
	int n = 0, known = 0, checks = 0, bad = 0, stats_made = 0;

	snprintf(dir, sizeof(dir), "%s/c0", tmpdir);
	tier_config(&cc, dir, 1ull << 30, 2, CHUNK);
	cc.min_free_bytes = 1u << 20;
	ct = tier_open(&cc, be);
	keep = ct->cfg.min_free_bytes;
	bound = 4ull * CHUNK < keep / 4 ? 4ull * CHUNK : keep / 4;
	fk_free = dfree;
	fk_thread = pthread_self();
	__atomic_store_n(&fk_ct, ct, __ATOMIC_RELEASE);
	for (int step = 0; step < EF_STEPS || ef_live(f, n); step++) {
		uint32_t op = step < EF_STEPS ? rnd_n(&s, 10) : 9; /* then: end every fill */
		uint64_t len = 0, own = 0, got, want, calls0 = fk_calls;
		int i = n ? (int)rnd_n(&s, (uint32_t)n) : 0, stat;

		if (op == 0 && n < EF_MAX &&
		    ef_live(f, n) < EF_LIVE) { /* a fill begins: reserve, check, made room for */
			len = 1 + rnd_n(&s, 200000);
			own = len;
			atomic_fetch_add(&ct->reserved, len);
		} else if (op == 1) { /* a PF_FIT-like look */
			len = 1 + rnd_n(&s, 200000);
		} else if (op <= 4 && n && f[i].wrote < f[i].len) { /* a write */
			uint64_t w = f[i].len - f[i].wrote;	    /* the rest, or a part of it */

			if (rnd_n(&s, 2))
				w = 1 + rnd_n(&s, (uint32_t)w);

			f[i].wrote += w;
			dfree -= w;
			fk_free = dfree;
			atomic_fetch_add(&ct->wr_bytes, w);
			continue;
		} else if ((op <= 7 || op == 9) && n && f[i].landed < f[i].wrote) { /* a landing */
			uint64_t l = f[i].wrote - f[i].landed; /* all written, or a part */

			if (op != 9 && rnd_n(&s, 2))
				l = 1 + rnd_n(&s, (uint32_t)l);

			f[i].landed += l;
			atomic_fetch_add(&ct->wr_gone, l); /* just before it lands */
			atomic_fetch_sub(&ct->reserved, l);
			continue;
		} else if (op == 9 && n) { /* the end: written whole */
			uint64_t w = f[i].len - f[i].wrote;

			f[i].wrote += w;
			dfree -= w;
			fk_free = dfree;
			atomic_fetch_add(&ct->wr_bytes, w);
			continue;
		} else if (op == 8) { /* another program: bytes taken or freed */
			uint64_t d = rnd_n(&s, 300000);

			dfree = rnd_n(&s, 2) || dfree < (8ull << 20) ? dfree + d : dfree - d;
			fk_free = dfree;
			continue;
		} else {
			continue;
		}
		/* the check: the fills but the asker's (a landed one stays
		 * until the next statvfs: it was made room for, or not written
		 * at it, still) */
		want = ef_model(f, n, known, a, dfree, len, keep, bound, &stat);
		cachetier__lock(ct);
		got = cachetier__disk_free(ct, len, own);
		if (own)
			ct->room_bytes += len;
		disk_mutex_unlock(&ct->lock);
		checks++;
		if (got != want || (fk_calls != calls0) != stat) {
			if (bad++ < 5)
				fprintf(
				    stderr,
				    "estimate: step %d: %s of %llu: %llu, want %llu (%s statvfs, "
				    "want %s)\n",
				    step, own ? "a fill's room" : "a look", (unsigned long long)len,
				    (unsigned long long)got, (unsigned long long)want,
				    fk_calls != calls0 ? "a" : "no", stat ? "one" : "none");
		}
		if (stat) { /* the model's statvfs: ended fills drop out */
			int k = 0;

			stats_made++;
			known = 1;
			a = dfree;
			for (int j = 0; j < n; j++) {
				if (f[j].landed == f[j].len)
					continue;
				f[j].since = 0;
				f[j].at_s = f[j].wrote;
				f[k++] = f[j];
			}
			n = k;
		}
		if (own)
			f[n++] = (struct ef_fill){len, 0, 0, 0, 1};
	}
	__atomic_store_n(&fk_ct, NULL, __ATOMIC_RELEASE);
	printf("estimate: reserve %llu, bound %llu: %d checks, %d statvfs calls (the model's "
	       "%d), %d answers differ\n",
	       (unsigned long long)keep, (unsigned long long)bound, checks, (int)fk_calls,
	       stats_made, bad);
	CHECK(bad == 0, "estimate: %d of %d answers differ from the model's", bad, checks);
	CHECK(checks > 100 && stats_made > 10 && checks - stats_made > 50,
	      "estimate: %d checks, %d of them with a statvfs (want both kinds)", checks,
	      stats_made);
	tier_end(ct, be, NULL);
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "df", 20261201u);
	uint64_t s = seed * 2654435761u + 1;
	int err;

	test_estimate(seed);
	snprintf(disk, sizeof(disk), "%s/disk", tmpdir);
	if (mkdir(disk, 0700) != 0)
		FAIL("mkdir %s", disk);
	if (mount("tmpfs", disk, "tmpfs", MS_NOSUID | MS_NODEV, "size=8m,mode=0700") != 0) {
		err = errno;
		printf("SKIP: the tests on a tmpfs: it cannot be mounted here (%s: root is "
		       "needed)\n",
		       strerror(err));
		rmdir(disk);
		return test_end("diskfree", tmpdir, seed); /* test_estimate's checks */
	}
	test_pending(&s);
	test_since(&s);
	test_written(&s);
	test_batch_written(&s);
	if (umount2(disk, MNT_DETACH) != 0)
		CHECK(0, "umount %s: %s", disk, strerror(errno));
	return test_end("diskfree", tmpdir, seed);
}
