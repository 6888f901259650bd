/*
 * test_directfill.c — a prefetch fill's bytes written with O_DIRECT
 * (cachetier__dio_writev, cachetier_direct.h).
 *
 * test_seeded (seeded, TEST_SEED): 300 writes of 1 to CT_WRITEV_MAX
 * buffers at 4 KiB-aligned addresses, as the sinks' pool gives them, of
 * seeded lengths (whole blocks up to 128 KiB, or a partial block: a
 * shard's last unit, a buffer sent part-full; an eighth of all but the
 * first empty) from a seeded unit offset (an eighth not block-aligned) of
 * a file of 64 units of 16 KiB, each written twice, direct and buffered
 * (cachetier__run_writev), over a file of zeros: the file's bytes exact
 * and each unit's CRC32C the one of its bytes written, both ways; the
 * bytes written direct exactly the write's whole blocks from an aligned
 * offset (ct_dio.bytes), and none of those blocks' pages in the page cache
 * afterwards (mincore over a mapping of the file, read before any read of
 * it), while the buffered write's are (the check can see pages).
 * test_tmpfs: the same writes into a file on /dev/shm (tmpfs, which has no
 * direct I/O to give: statx without STATX_DIOALIGN) are buffered, the
 * right bytes and CRCs, the fallback counted once (fallbacks 1 after 20
 * writes, no direct byte, no O_DIRECT fd kept). test_off: with the option
 * off (ct_dio.on 0) nothing goes direct. test_tier: through a tier (the
 * fill writer, cachetier_write.c): a prefetch fill direct but for a
 * shard's last partial block, a demand read's fills buffered, the bytes
 * and stored CRCs exact; on tmpfs every fill buffered, counted once.
 * test_modes: which prefetches each --direct-fills mode writes direct
 * (off, auto, prefetch: `shardfs prefetch`'s alone). test_inflight
 * (seeded): several writes in flight on the direct writers' pool, short
 * and refused direct writes forced (below). The fill writer's jobs of held
 * buffers (cachetier_write.c, dio_hold): test_tier and test_modes count a
 * job and a direct pwritev a run exactly; test_big (below) a 16 MiB fill
 * in exactly 8 jobs of CT_DIO_IOV buffers, one at a bound of 8 held
 * buffers in 16 jobs of 8, and 20 fills at once within CT_DIO_HELD held
 * buffers.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "backend.h"
#include "cachetier.h"
#include "cachetier_i.h"
#include "check.h"
#include "disk.h"
#include "test_rng.h"
#include "test_util.h"

#define UNIT	 16384u
#define NUNITS	 64u
#define FILE_LEN ((size_t)NUNITS * UNIT)
#define BUFMAX	 (128u * 1024u)
#define WRITES	 300

static char tmpdir[256];
static unsigned char *bufs[CT_WRITEV_MAX];
static unsigned char *want, *got;

/* Pages of [off, off + len) of fd in the page cache (mincore); -1 when
 * it cannot be told. */
static long resident(int fd, uint64_t off, uint64_t len)
{
	long page = sysconf(_SC_PAGESIZE), n = 0;
	uint64_t a = off - off % (uint64_t)page;
	size_t mlen = (size_t)(off + len - a);
	size_t np = (mlen + (size_t)page - 1) / (size_t)page;
	unsigned char *vec;
	void *m;

	if (!len)
		return 0;
	vec = malloc(np);
	m = mmap(NULL, mlen, PROT_READ, MAP_SHARED, fd, (off_t)a);
	if (m == MAP_FAILED || !vec || mincore(m, mlen, vec) < 0) {
		if (m != MAP_FAILED)
			munmap(m, mlen);
		free(vec);
		return -1;
	}
	for (size_t i = 0; i < np; i++)
		n += vec[i] & 1;
	munmap(m, mlen);
	free(vec);
	return n;
}

/* A file of zeros, its pages out of the page cache. */
static void zero_file(struct ct_file *f, const char *what, int i)
{
	CHECK(ftruncate(f->datafd, 0) == 0 && ftruncate(f->datafd, (off_t)FILE_LEN) == 0 &&
		  posix_fadvise(f->datafd, 0, 0, POSIX_FADV_DONTNEED) == 0,
	      "%s write %d: truncate", what, i);
}

/* The bytes of the write's whole blocks from off, as cachetier__dio_writev
 * takes them (aligned buffers: each buffer's whole blocks while they are
 * whole, the first partial one's whole blocks last). */
static uint64_t direct_part(const struct iovec *iov, int n, uint64_t off)
{
	uint64_t d = 0;

	if (off % CT_DIO_ALIGN)
		return 0;
	for (int k = 0; k < n; k++) {
		d += iov[k].iov_len - iov[k].iov_len % CT_DIO_ALIGN;
		if (iov[k].iov_len % CT_DIO_ALIGN)
			break;
	}
	return d;
}

/* One seeded write, direct (mode 1) then buffered (0), each over a file
 * of zeros: bytes, CRCs, direct bytes and page cache checked. */
static void one(struct ct_dio *d, struct ct_file *f, uint64_t *s, int i, const char *what,
		uint64_t expect_direct_ok)
{
	struct iovec iov[CT_WRITEV_MAX];
	int n = 1 + (int)(rnd(s) % CT_WRITEV_MAX);
	size_t len = 0;
	uint64_t off, dpart;
	uint32_t c0, c1;

	for (int k = 0; k < n; k++) {
		size_t l;

		if (k && rnd(s) % 8 == 0)
			l = 0;
		else if (rnd(s) % 4 == 0) /* a partial block */
			l = 1 + (size_t)(rnd(s) % BUFMAX);
		else /* whole blocks */
			l = CT_DIO_ALIGN * (1 + (size_t)(rnd(s) % (BUFMAX / CT_DIO_ALIGN)));
		for (size_t j = 0; j < l; j++)
			bufs[k][j] = (unsigned char)rnd(s);
		iov[k] = (struct iovec){.iov_base = bufs[k], .iov_len = l};
		len += l;
	}
	off = (uint64_t)UNIT * (rnd(s) % (NUNITS - (len + UNIT - 1) / UNIT + 1));
	if (rnd(s) % 8 == 0 && off + len + 512 <= FILE_LEN)
		off += 512; /* not aligned: all buffered */
	c0 = (uint32_t)(off / UNIT);
	c1 = (uint32_t)((off + len - 1) / UNIT) + 1;
	memset(want, 0, FILE_LEN);
	for (int k = 0, at = 0; k < n; k++) {
		memcpy(want + off + (size_t)at, bufs[k], iov[k].iov_len);
		at += (int)iov[k].iov_len;
	}
	dpart = expect_direct_ok ? direct_part(iov, n, off) : 0;
	for (int mode = 1; mode >= 0; mode--) {
		uint32_t crc[NUNITS] = {0};
		uint64_t before = atomic_load(&d->bytes);
		long res;
		int err;

		zero_file(f, what, i);
		err = mode ? cachetier__dio_writev(d, f, c0, crc, off, iov, n)
			   : cachetier__run_writev(f, c0, crc, off, iov, n);
		CHECK(err == 0, "%s write %d (direct %d): error %d", what, i, mode, err);
		/* before any read of the file: what the write left cached */
		res = resident(f->datafd, off, mode ? dpart : len);
		if (mode)
			CHECK(atomic_load(&d->bytes) - before == dpart,
			      "%s write %d: %llu bytes direct, want %llu (%d buffers, %zu bytes at "
			      "%llu)",
			      what, i, (unsigned long long)(atomic_load(&d->bytes) - before),
			      (unsigned long long)dpart, n, len, (unsigned long long)off);
		if (res >= 0 && mode)
			CHECK(res == 0,
			      "%s write %d: %ld pages of the %llu bytes written direct in the page "
			      "cache, want 0",
			      what, i, res, (unsigned long long)dpart);
		else if (res >= 0 && len >= CT_DIO_ALIGN)
			CHECK(res > 0, "%s write %d: no page of a buffered write in the page cache",
			      what, i);
		CHECK(pread(f->datafd, got, FILE_LEN, 0) == (ssize_t)FILE_LEN &&
			  memcmp(got, want, FILE_LEN) == 0,
		      "%s write %d (direct %d): %d buffers, %zu bytes at %llu: the file's bytes "
		      "differ",
		      what, i, mode, n, len, (unsigned long long)off);
		for (uint32_t c = c0; c < c1; c++) {
			uint64_t a = (uint64_t)c * UNIT > off ? (uint64_t)c * UNIT : off;
			uint64_t b = (uint64_t)(c + 1) * UNIT < off + len ? (uint64_t)(c + 1) * UNIT
									  : off + len;
			uint32_t w = disk_crc32c_sw(0, want + a, (size_t)(b - a));

			CHECK(crc[c - c0] == w,
			      "%s write %d (direct %d): unit %u's CRC %08x, want %08x", what, i,
			      mode, c, crc[c - c0], w);
		}
	}
}

/* f: data file NAME in directory dir. */
static void file_open(struct ct_file *f, const char *dir)
{
	memset(f, 0, sizeof(*f));
	f->unit_bytes = UNIT;
	f->nunits = NUNITS;
	memcpy(f->hash, "0123456789abcdef", 17);
	f->dfd = -1;
	f->dirfd = open(dir, O_RDONLY | O_DIRECTORY);
	f->datafd =
	    f->dirfd >= 0 ? openat(f->dirfd, f->hash, O_RDWR | O_CREAT | O_TRUNC, 0644) : -1;
	if (f->datafd < 0)
		FAIL("open %s/%s: %s", dir, f->hash, strerror(errno));
}

static void file_close(struct ct_file *f)
{
	cachetier__dio_close(f);
	unlinkat(f->dirfd, f->hash, 0);
	close(f->datafd);
	close(f->dirfd);
}

static void test_seeded(uint64_t seed)
{
	struct ct_dio d = {.on = 1};
	struct ct_file f;
	uint64_t s = seed * 2654435761u + 11;

	file_open(&f, tmpdir);
	for (int i = 0; i < WRITES; i++)
		one(&d, &f, &s, i, "disk", 1);
	printf("disk: %d writes, %llu bytes direct, fallbacks %llu\n", WRITES,
	       (unsigned long long)atomic_load(&d.bytes),
	       (unsigned long long)atomic_load(&d.fallbacks));
	CHECK(atomic_load(&d.fallbacks) == 0 && !atomic_load(&d.refused),
	      "disk: O_DIRECT refused on %s (fallbacks %llu)", tmpdir,
	      (unsigned long long)atomic_load(&d.fallbacks));
	CHECK(f.dfd >= 0, "disk: no O_DIRECT fd kept");
	file_close(&f);
}

static void test_tmpfs(uint64_t seed)
{
	struct ct_dio d = {.on = 1};
	struct ct_file f;
	uint64_t s = seed * 2654435761u + 13;
	char dir[] = "/dev/shm/shardfs-df-XXXXXX";

	if (!mkdtemp(dir)) {
		printf("no /dev/shm: the fallback is not checked\n");
		return;
	}
	file_open(&f, dir);
	for (int i = 0; i < 20; i++)
		one(&d, &f, &s, i, "tmpfs", 0);
	CHECK(atomic_load(&d.fallbacks) == 1 && atomic_load(&d.refused) == 1,
	      "tmpfs: fallbacks %llu, want 1 (counted once)",
	      (unsigned long long)atomic_load(&d.fallbacks));
	CHECK(atomic_load(&d.bytes) == 0, "tmpfs: %llu bytes direct, want 0",
	      (unsigned long long)atomic_load(&d.bytes));
	CHECK(f.dfd == -1, "tmpfs: an O_DIRECT fd kept");
	file_close(&f);
	rmdir(dir);
}

static void test_off(uint64_t seed)
{
	struct ct_dio d = {.on = 0};
	struct ct_file f;
	uint64_t s = seed * 2654435761u + 17;

	file_open(&f, tmpdir);
	for (int i = 0; i < 10; i++)
		one(&d, &f, &s, i, "off", 0);
	CHECK(atomic_load(&d.bytes) == 0 && atomic_load(&d.fallbacks) == 0 && f.dfd == -1,
	      "off: %llu bytes direct, fallbacks %llu", (unsigned long long)atomic_load(&d.bytes),
	      (unsigned long long)atomic_load(&d.fallbacks));
	file_close(&f);
}

/* test_inflight: writes in flight on the pool, as the fill writer has
 * them. IF_ROUNDS seeded rounds, each of 1 to CT_DIO_JOBS + 3 writes (past
 * the ring: the oldest reaped first) of 1 to CT_WRITEV_MAX buffers of up
 * to 24 KiB (whole blocks; a partial one: a sixteenth, and half the
 * rounds' last; own aligned buffers each) that follow each other from a
 * seeded offset (an eighth not aligned), over a file of zeros; every third write submitted has its
 * direct pwritev cut to half its blocks (ct_dio.cut_every: a short write, the rest buffered), and
 * round IF_ROUNDS - 10's first write fails as a refusal (EINVAL: ct_dio.einval_at), reaped before
 * the next is submitted. After each round: the file's bytes and each unit's CRC32C exact, every
 * job's error 0, the bytes written direct and the direct writes exactly those the writes' whole
 * blocks and cuts give (none once refused), fallbacks 0 before the refusal and 1 after. */
#define IF_ROUNDS 60
#define IF_WRITES (CT_DIO_JOBS + 3)
#define IF_BUF	  (24u * 1024u)

static void test_inflight(uint64_t seed)
{
	static unsigned char *ib[IF_WRITES][CT_WRITEV_MAX];
	struct ct_dio d = {.on = 1, .cut_every = 3};
	struct ct_file f;
	uint64_t s = seed * 2654435761u + 29, wbytes = 0, wwrites = 0;
	int refused = 0;

	for (int w = 0; w < IF_WRITES; w++)
		for (int k = 0; k < CT_WRITEV_MAX; k++)
			if (posix_memalign((void **)&ib[w][k], CT_DIO_ALIGN, IF_BUF) != 0)
				FAIL("posix_memalign");
	file_open(&f, tmpdir);
	cachetier__dio_start(&d);
	CHECK(d.nthreads == CT_DIO_THREADS, "inflight: %d pool threads, want %d", d.nthreads,
	      CT_DIO_THREADS);
	for (int r = 0; r < IF_ROUNDS; r++) {
		struct iovec iov[IF_WRITES][CT_WRITEV_MAX];
		int nw = 1 + (int)(rnd(&s) % IF_WRITES), nb[IF_WRITES], errs = 0;
		size_t len = 0;
		uint64_t off, at;
		uint32_t crc[NUNITS] = {0};
		struct ct_dio_job *j;

		for (int w = 0; w < nw; w++) {
			nb[w] = 1 + (int)(rnd(&s) % CT_WRITEV_MAX);
			for (int k = 0; k < nb[w]; k++) {
				int part = (w == nw - 1 && k == nb[w] - 1 && rnd(&s) % 2) ||
					   rnd(&s) % 16 == 0;
				size_t l =
				    part ? 1 + (size_t)(rnd(&s) % IF_BUF)
					 : CT_DIO_ALIGN *
					       (1 + (size_t)(rnd(&s) % (IF_BUF / CT_DIO_ALIGN)));

				for (size_t x = 0; x < l; x++)
					ib[w][k][x] = (unsigned char)rnd(&s);
				iov[w][k] = (struct iovec){.iov_base = ib[w][k], .iov_len = l};
				len += l;
			}
		}
		off = (uint64_t)UNIT * (rnd(&s) % (NUNITS - (len + UNIT - 1) / UNIT + 1));
		if (rnd(&s) % 8 == 0 && off + len + 512 <= FILE_LEN)
			off += 512;
		zero_file(&f, "inflight", r);
		memset(want, 0, FILE_LEN);
		at = off;
		for (int w = 0; w < nw; w++) {
			uint64_t dp = 0;
			int cut = 0;

			for (int k = 0; k < nb[w]; k++) {
				memcpy(want + at + dp, iov[w][k].iov_base, iov[w][k].iov_len);
				dp += iov[w][k].iov_len;
			}
			if (r == IF_ROUNDS - 10 && w == 0) {
				while ((j = cachetier__dio_oldest(&d))) {
					cachetier__dio_reap(&d, j);
					errs += j->err != 0;
				}
				d.einval_at = d.submitted + 1;
				cut = -1;
			} else if (d.cut_every && (d.submitted + 1) % d.cut_every == 0) {
				cut = 1;
			}
			dp = refused || cut < 0 ? 0 : direct_part(iov[w], nb[w], at);
			if (cut > 0)
				dp = dp / CT_DIO_ALIGN / 2 * CT_DIO_ALIGN;
			wbytes += dp;
			wwrites += dp != 0;
			while (!(j = cachetier__dio_job(&d))) { /* the ring full: the oldest */
				struct ct_dio_job *o = cachetier__dio_oldest(&d);

				cachetier__dio_reap(&d, o);
				errs += o->err != 0;
			}
			cachetier__dio_submit(&d, j, &f, 0, crc, at, iov[w], nb[w]);
			CHECK(j->cut == cut, "inflight round %d write %d: cut %d, want %d", r, w,
			      j->cut, cut);
			for (int k = 0; k < nb[w]; k++)
				at += iov[w][k].iov_len;
			if (cut < 0) { /* the refusal reaped alone: what follows is buffered */
				cachetier__dio_reap(&d, j);
				errs += j->err != 0;
				refused = 1;
			}
		}
		while ((j = cachetier__dio_oldest(&d))) {
			cachetier__dio_reap(&d, j);
			errs += j->err != 0;
		}
		CHECK(errs == 0, "inflight round %d: %d jobs failed", r, errs);
		CHECK(atomic_load(&d.bytes) == wbytes && atomic_load(&d.writes) == wwrites,
		      "inflight round %d: %llu bytes in %llu writes direct, want %llu in %llu", r,
		      (unsigned long long)atomic_load(&d.bytes),
		      (unsigned long long)atomic_load(&d.writes), (unsigned long long)wbytes,
		      (unsigned long long)wwrites);
		CHECK(atomic_load(&d.fallbacks) == (unsigned long long)refused &&
			  atomic_load(&d.refused) == refused,
		      "inflight round %d: fallbacks %llu, want %d", r,
		      (unsigned long long)atomic_load(&d.fallbacks), refused);
		CHECK(pread(f.datafd, got, FILE_LEN, 0) == (ssize_t)FILE_LEN &&
			  memcmp(got, want, FILE_LEN) == 0,
		      "inflight round %d: %d writes, %zu bytes at %llu: the file's bytes differ", r,
		      nw, len, (unsigned long long)off);
		for (uint32_t c = (uint32_t)(off / UNIT); c * (uint64_t)UNIT < off + len; c++) {
			uint64_t a = (uint64_t)c * UNIT > off ? (uint64_t)c * UNIT : off;
			uint64_t b = (uint64_t)(c + 1) * UNIT < off + len ? (uint64_t)(c + 1) * UNIT
									  : off + len;

			CHECK(crc[c] == disk_crc32c_sw(0, want + a, (size_t)(b - a)),
			      "inflight round %d: unit %u's CRC", r, c);
		}
	}
	printf("inflight: %d rounds, %llu bytes in %llu direct writes, fallbacks %llu\n", IF_ROUNDS,
	       (unsigned long long)wbytes, (unsigned long long)wwrites,
	       (unsigned long long)atomic_load(&d.fallbacks));
	cachetier__dio_stop(&d);
	file_close(&f);
	for (int w = 0; w < IF_WRITES; w++)
		for (int k = 0; k < CT_WRITEV_MAX; k++)
			free(ib[w][k]);
}

/* A tier over the fault store (its reads on threads of their own), the
 * option on, in dir/name: a prefetch range of a whole object of 20 units
 * of 64 KiB and 5 bytes goes direct but its last 5 bytes (exactly 20
 * units' bytes: the sinks' buffers end at units or hold a whole 128 KiB,
 * so every buffer is whole blocks but the last), a demand read of another
 * object none; both exact, and exact again from a tier opened over a store
 * that fails every read (the CRC32Cs stored check). On tmpfs (shm): no
 * byte direct, the fallback counted once, the bytes exact. */
#define T_UNIT	(64u * 1024)
#define T_CHUNK (8u * T_UNIT)
#define T_SIZE	(20u * T_UNIT + 5)

static void tier_run(const char *dir, const char *name, const unsigned char *pf,
		     const unsigned char *rd, int shm)
{
	struct backend *be = fault_store(tmpdir, "async=1");
	struct cachetier_config cc;
	struct cachetier *ct;
	struct cachetier_obj *o, *r;
	struct cachetier_stats st;
	char path[600];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	tier_config(&cc, path, 1ull << 30, 2, T_CHUNK);
	cc.readahead_max_bytes = T_CHUNK;
	cc.small_fills = 1;
	cc.direct_fills = 1;
	ct = tier_open(&cc, be);
	o = obj_open(ct, be, "pf.tar");
	CHECK(cachetier_obj_prefetch_range(o, 0, T_SIZE, CACHETIER_PF_FIT) == 0,
	      "%s: prefetch range", name);
	cached_wait(o, T_SIZE, name);
	CHECK(prefetch_ended(o), "%s: prefetch did not end", name);
	fills_idle(ct);
	stats(ct, &st);
	printf("%s: prefetch of %u bytes: %llu direct, fallbacks %llu\n", name, T_SIZE,
	       (unsigned long long)st.direct_bytes, (unsigned long long)st.direct_fallbacks);
	CHECK(st.direct_bytes == (shm ? 0 : 20u * T_UNIT) && st.direct_fallbacks == (uint64_t)shm,
	      "%s: prefetch: %llu bytes direct, fallbacks %llu; want %u, %d", name,
	      (unsigned long long)st.direct_bytes, (unsigned long long)st.direct_fallbacks,
	      shm ? 0 : 20u * T_UNIT, shm);
	/* a job a run (three of 8, 8 and 4 units and 5 bytes): each run's
	 * buffers held until its end, one direct pwritev each */
	printf("%s: %llu jobs of %llu buffers, %llu direct writes\n", name,
	       (unsigned long long)atomic_load(&ct->wr.dio.jobs_sub),
	       (unsigned long long)atomic_load(&ct->wr.dio.jobs_bufs),
	       (unsigned long long)atomic_load(&ct->wr.dio.writes));
	CHECK(atomic_load(&ct->wr.dio.writes) == (shm ? 0u : 3u) &&
		  (shm || atomic_load(&ct->wr.dio.jobs_sub) == 3),
	      "%s: prefetch: %llu direct writes, %llu jobs; want %u", name,
	      (unsigned long long)atomic_load(&ct->wr.dio.writes),
	      (unsigned long long)atomic_load(&ct->wr.dio.jobs_sub), shm ? 0u : 3u);
	CHECK(obj_exact(o, pf, 0, T_SIZE), "%s: the prefetched object's bytes", name);
	r = obj_open(ct, be, "rd.tar");
	CHECK(obj_exact(r, rd, 0, T_SIZE), "%s: the read object's bytes", name);
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.direct_bytes == (shm ? 0 : 20u * T_UNIT) && st.direct_fallbacks == (uint64_t)shm,
	      "%s: after a demand read: %llu bytes direct, fallbacks %llu (its fills buffered)",
	      name, (unsigned long long)st.direct_bytes, (unsigned long long)st.direct_fallbacks);
	CHECK(st.fill_errors == 0 && st.units_corrupt == 0, "%s: %llu fill errors, %llu corrupt",
	      name, (unsigned long long)st.fill_errors, (unsigned long long)st.units_corrupt);
	CHECK(atomic_load(&ct->wr.dio.writes) == (shm ? 0u : 3u) && ct->wr.dio.held == 0 &&
		  !ct->wr.dio.pend,
	      "%s: after a demand read: %llu direct writes, %u buffers held", name,
	      (unsigned long long)atomic_load(&ct->wr.dio.writes), ct->wr.dio.held);
	cachetier_obj_unref(o);
	cachetier_obj_unref(r);
	cachetier_close(ct);
	backend_close(be);

	be = fault_store(tmpdir, "fail_every=1&fail_after_bytes=1");
	ct = tier_open(&cc, be);
	o = obj_open(ct, be, "pf.tar");
	r = obj_open(ct, be, "rd.tar");
	CHECK(obj_exact(o, pf, 0, T_SIZE) && obj_exact(r, rd, 0, T_SIZE),
	      "%s, reopened: the objects' bytes", name);
	stats(ct, &st);
	CHECK(st.bytes_fetched == 0 && st.units_corrupt == 0,
	      "%s, reopened: %llu bytes fetched, %llu units corrupt", name,
	      (unsigned long long)st.bytes_fetched, (unsigned long long)st.units_corrupt);
	cachetier_obj_unref(o);
	cachetier_obj_unref(r);
	cachetier_close(ct);
	backend_close(be);
}

static void test_tier(uint64_t seed)
{
	uint64_t s = seed * 2654435761u + 19;
	unsigned char *pf = src_object(tmpdir, "pf.tar", T_SIZE, &s);
	unsigned char *rd = src_object(tmpdir, "rd.tar", T_SIZE, &s);
	char shm[] = "/dev/shm/shardfs-dt-XXXXXX", cmd[100];

	tier_run(tmpdir, "disk", pf, rd, 0);
	if (mkdtemp(shm)) {
		tier_run(shm, "shm", pf, rd, 1);
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", shm);
		if (system(cmd) != 0)
			fprintf(stderr, "warning: could not remove %s\n", shm);
	}
	free(pf);
	free(rd);
}

/* Large direct writes through a tier on the disk: chunks of 16 MiB, so
 * units of 128 KiB, each unit a sink buffer exactly (a buffer ends at a
 * unit or holds 128 KiB). One object of a chunk prefetched by one fill
 * thread: its 128 buffers written direct in 8 jobs of CT_DIO_IOV (16) buffers,
 * 8 pwritevs of 2 MiB (at most 4 buffers a batch, one batch's, before
 * them: at least 32). Then 20 objects of 2 MiB (16 buffers each)
 * prefetched at once by as many fill threads: the writer holds at most
 * CT_DIO_HELD buffers (its peak),
 * every buffer goes direct in some job (jobs' buffers, bytes direct
 * exact), none held once idle, and every byte and stored CRC32C exact (a
 * tier reopened over a store that fails every read). */
#define BIG_CHUNK (16u << 20)
#define BIG_SIZE  (2u << 20)
#define BIG_OBJS  21 /* big0.tar of a chunk, then 20 of BIG_SIZE at once */

static void test_big(uint64_t seed)
{
	uint64_t s = seed * 2654435761u + 31;
	unsigned char *src[BIG_OBJS + 1], *srcb;
	char key[BIG_OBJS + 1][32], *keyb = key[BIG_OBJS];
	struct cachetier_obj *o[BIG_OBJS];
	struct cachetier_config cc;
	struct cachetier_stats st;
	struct backend *be;
	struct cachetier *ct;
	char path[600];
	uint64_t jobs, nbufs;

	for (int k = 0; k <= BIG_OBJS; k++) { /* the last: the bound's */
		snprintf(key[k], sizeof(key[k]), "big%d.tar", k);
		src[k] = src_object(tmpdir, key[k], k && k < BIG_OBJS ? BIG_SIZE : BIG_CHUNK, &s);
	}
	srcb = src[BIG_OBJS];
	be = fault_store(tmpdir, "async=1");
	snprintf(path, sizeof(path), "%s/big", tmpdir);
	tier_config(&cc, path, 1ull << 30, 1, BIG_CHUNK);
	cc.readahead_max_bytes = BIG_CHUNK;
	cc.direct_fills = CACHETIER_DIRECT_AUTO;
	ct = tier_open(&cc, be);
	o[0] = obj_open(ct, be, key[0]);
	CHECK(cachetier_obj_prefetch(o[0], CACHETIER_PF_COLD) == 0, "big: prefetch");
	cached_wait(o[0], BIG_CHUNK, key[0]);
	CHECK(prefetch_ended(o[0]), "big: prefetch did not end");
	fills_idle(ct);
	stats(ct, &st);
	printf("big: one fill of %u bytes: %llu jobs of %llu buffers, %llu direct writes, %llu "
	       "bytes direct\n",
	       BIG_CHUNK, (unsigned long long)atomic_load(&ct->wr.dio.jobs_sub),
	       (unsigned long long)atomic_load(&ct->wr.dio.jobs_bufs),
	       (unsigned long long)atomic_load(&ct->wr.dio.writes),
	       (unsigned long long)st.direct_bytes);
	CHECK(atomic_load(&ct->wr.dio.jobs_sub) == BIG_CHUNK / FILL_BUF_BYTES / CT_DIO_IOV &&
		  atomic_load(&ct->wr.dio.jobs_bufs) == BIG_CHUNK / FILL_BUF_BYTES &&
		  atomic_load(&ct->wr.dio.writes) == BIG_CHUNK / FILL_BUF_BYTES / CT_DIO_IOV &&
		  st.direct_bytes == BIG_CHUNK,
	      "big: one fill: %llu jobs of %llu buffers, %llu direct writes, %llu bytes direct; "
	      "want %u of %u, %u, %u",
	      (unsigned long long)atomic_load(&ct->wr.dio.jobs_sub),
	      (unsigned long long)atomic_load(&ct->wr.dio.jobs_bufs),
	      (unsigned long long)atomic_load(&ct->wr.dio.writes),
	      (unsigned long long)st.direct_bytes, BIG_CHUNK / FILL_BUF_BYTES / CT_DIO_IOV,
	      BIG_CHUNK / FILL_BUF_BYTES, BIG_CHUNK / FILL_BUF_BYTES / CT_DIO_IOV, BIG_CHUNK);
	CHECK(obj_exact(o[0], src[0], 0, BIG_CHUNK), "big: one fill: the bytes");
	cachetier_obj_unref(o[0]);

	/* the bound's other path: held at a bound of 8 (ct_dio.held_max) with no
	 * job in flight (each batch reaps its jobs), the fill with the most
	 * pending (the one) submitted at once: 16 jobs of 8 buffers, 15 of them
	 * at the bound, the last at the run's end */
	ct->wr.dio.held_max = 8;
	atomic_store(&ct->wr.dio.held_peak, 0);
	jobs = atomic_load(&ct->wr.dio.jobs_sub);
	nbufs = atomic_load(&ct->wr.dio.jobs_bufs);
	o[0] = obj_open(ct, be, keyb);
	CHECK(cachetier_obj_prefetch(o[0], CACHETIER_PF_COLD) == 0, "big: bound: prefetch");
	cached_wait(o[0], BIG_CHUNK, keyb);
	CHECK(prefetch_ended(o[0]), "big: bound: prefetch did not end");
	fills_idle(ct);
	printf("big: held at most 8: %llu jobs of %llu buffers, %llu at the bound, peak %u\n",
	       (unsigned long long)(atomic_load(&ct->wr.dio.jobs_sub) - jobs),
	       (unsigned long long)(atomic_load(&ct->wr.dio.jobs_bufs) - nbufs),
	       (unsigned long long)atomic_load(&ct->wr.dio.held_flushes),
	       atomic_load(&ct->wr.dio.held_peak));
	CHECK(atomic_load(&ct->wr.dio.jobs_sub) - jobs == 16 &&
		  atomic_load(&ct->wr.dio.jobs_bufs) - nbufs == 128 &&
		  atomic_load(&ct->wr.dio.held_flushes) == 15 &&
		  atomic_load(&ct->wr.dio.held_peak) == 8 && ct->wr.dio.held == 0,
	      "big: held at most 8: %llu jobs of %llu buffers, %llu at the bound, peak %u, %u "
	      "held; want 16 of 128, 15, 8, 0",
	      (unsigned long long)(atomic_load(&ct->wr.dio.jobs_sub) - jobs),
	      (unsigned long long)(atomic_load(&ct->wr.dio.jobs_bufs) - nbufs),
	      (unsigned long long)atomic_load(&ct->wr.dio.held_flushes),
	      atomic_load(&ct->wr.dio.held_peak), ct->wr.dio.held);
	CHECK(obj_exact(o[0], srcb, 0, BIG_CHUNK), "big: bound: the bytes");
	cachetier_obj_unref(o[0]);
	cachetier_close(ct);

	snprintf(path, sizeof(path), "%s/bigmany", tmpdir);
	tier_config(&cc, path, 1ull << 30, BIG_OBJS, BIG_CHUNK);
	cc.readahead_max_bytes = BIG_CHUNK;
	cc.direct_fills = CACHETIER_DIRECT_AUTO;
	ct = tier_open(&cc, be);
	for (int k = 1; k < BIG_OBJS; k++) {
		o[k] = obj_open(ct, be, key[k]);
		CHECK(cachetier_obj_prefetch(o[k], CACHETIER_PF_COLD) == 0, "big: prefetch %d", k);
	}
	for (int k = 1; k < BIG_OBJS; k++) {
		cached_wait(o[k], BIG_SIZE, key[k]);
		CHECK(prefetch_ended(o[k]), "big: prefetch %d did not end", k);
	}
	fills_idle(ct);
	stats(ct, &st);
	jobs = atomic_load(&ct->wr.dio.jobs_sub);
	nbufs = atomic_load(&ct->wr.dio.jobs_bufs);
	printf("big: %d fills at once: %llu jobs of %llu buffers, %llu direct writes, held at "
	       "most %u, %llu jobs at the bound\n",
	       BIG_OBJS - 1, (unsigned long long)jobs, (unsigned long long)nbufs,
	       (unsigned long long)atomic_load(&ct->wr.dio.writes),
	       atomic_load(&ct->wr.dio.held_peak),
	       (unsigned long long)atomic_load(&ct->wr.dio.held_flushes));
	CHECK(nbufs == (uint64_t)(BIG_OBJS - 1) * BIG_SIZE / FILL_BUF_BYTES &&
		  st.direct_bytes == (uint64_t)(BIG_OBJS - 1) * BIG_SIZE &&
		  atomic_load(&ct->wr.dio.writes) == jobs &&
		  jobs >= (uint64_t)(BIG_OBJS - 1) * BIG_SIZE / FILL_BUF_BYTES / CT_DIO_IOV,
	      "big: %d fills: %llu jobs of %llu buffers, %llu direct writes, %llu bytes direct",
	      BIG_OBJS - 1, (unsigned long long)jobs, (unsigned long long)nbufs,
	      (unsigned long long)atomic_load(&ct->wr.dio.writes),
	      (unsigned long long)st.direct_bytes);
	CHECK(atomic_load(&ct->wr.dio.held_peak) <= CT_DIO_HELD && ct->wr.dio.held == 0 &&
		  !ct->wr.dio.pend,
	      "big: %d fills: %u buffers held at most (bound %u), %u held idle", BIG_OBJS - 1,
	      atomic_load(&ct->wr.dio.held_peak), CT_DIO_HELD, ct->wr.dio.held);
	CHECK(st.fill_errors == 0 && st.units_corrupt == 0 && st.fill_bufs_queued == 0,
	      "big: %llu fill errors, %llu corrupt, %llu queued",
	      (unsigned long long)st.fill_errors, (unsigned long long)st.units_corrupt,
	      (unsigned long long)st.fill_bufs_queued);
	for (int k = 1; k < BIG_OBJS; k++) {
		CHECK(obj_exact(o[k], src[k], 0, BIG_SIZE), "big: object %d's bytes", k);
		cachetier_obj_unref(o[k]);
	}
	cachetier_close(ct);
	backend_close(be);

	be = fault_store(tmpdir, "fail_every=1&fail_after_bytes=1");
	ct = tier_open(&cc, be);
	for (int k = 1; k < BIG_OBJS; k++) {
		o[k] = obj_open(ct, be, key[k]);
		CHECK(obj_exact(o[k], src[k], 0, BIG_SIZE), "big, reopened: object %d's bytes", k);
		cachetier_obj_unref(o[k]);
	}
	stats(ct, &st);
	CHECK(st.bytes_fetched == 0 && st.units_corrupt == 0,
	      "big, reopened: %llu bytes fetched, %llu units corrupt",
	      (unsigned long long)st.bytes_fetched, (unsigned long long)st.units_corrupt);
	cachetier_close(ct);
	backend_close(be);
	for (int k = 0; k <= BIG_OBJS; k++)
		free(src[k]);
}

/* Which fills each --direct-fills mode writes direct: through a tier on
 * the disk, one object each prefetched as `shardfs prefetch` does
 * (CACHETIER_PF_COLD), as the warm (PF_FIT), as a reader's shards ahead
 * (PF_EVICT) and as a plan's range (a range, PF_FIT), one after another:
 * the bytes written direct after each exactly its 20 whole units' where
 * the mode names it (off: none; auto: all four; prefetch: the cold one
 * only), else none, and every object's bytes exact. */
static void test_modes(uint64_t seed)
{
	static const char *const keys[] = {"cold.tar", "warm.tar", "ahead.tar", "range.tar"};
	static const char *const names[] = {"off", "auto", "prefetch"};
	static const int direct[][4] = {{0, 0, 0, 0}, {1, 1, 1, 1}, {1, 0, 0, 0}};
	uint64_t s = seed * 2654435761u + 23;
	unsigned char *src[4];

	for (int k = 0; k < 4; k++)
		src[k] = src_object(tmpdir, keys[k], T_SIZE, &s);
	for (int m = CACHETIER_DIRECT_OFF; m <= CACHETIER_DIRECT_PREFETCH; m++) {
		struct backend *be = fault_store(tmpdir, "async=1");
		struct cachetier_config cc;
		struct cachetier *ct;
		struct cachetier_stats st;
		uint64_t before = 0, wbefore = 0;
		char path[600];

		snprintf(path, sizeof(path), "%s/modes-%s", tmpdir, names[m]);
		tier_config(&cc, path, 1ull << 30, 2, T_CHUNK);
		cc.readahead_max_bytes = T_CHUNK;
		cc.direct_fills = m;
		ct = tier_open(&cc, be);
		for (int k = 0; k < 4; k++) {
			struct cachetier_obj *o = obj_open(ct, be, keys[k]);
			int err =
			    k == 0   ? cachetier_obj_prefetch(o, CACHETIER_PF_COLD)
			    : k == 1 ? cachetier_obj_prefetch(o, CACHETIER_PF_FIT)
			    : k == 2 ? cachetier_obj_prefetch(o, CACHETIER_PF_EVICT)
				     : cachetier_obj_prefetch_range(o, 0, T_SIZE, CACHETIER_PF_FIT);

			CHECK(err == 0, "modes %s: %s: prefetch: %d", names[m], keys[k], err);
			cached_wait(o, T_SIZE, keys[k]);
			CHECK(prefetch_ended(o), "modes %s: %s: prefetch did not end", names[m],
			      keys[k]);
			fills_idle(ct);
			stats(ct, &st);
			CHECK(st.direct_bytes - before == (direct[m][k] ? 20u * T_UNIT : 0),
			      "modes %s: %s: %llu bytes direct, want %u", names[m], keys[k],
			      (unsigned long long)(st.direct_bytes - before),
			      direct[m][k] ? 20u * T_UNIT : 0);
			before = st.direct_bytes;
			/* a job a run: 3 pwritevs (8, 8, 4 units and 5 bytes) */
			CHECK(atomic_load(&ct->wr.dio.writes) - wbefore == (direct[m][k] ? 3u : 0u),
			      "modes %s: %s: %llu direct writes, want %u", names[m], keys[k],
			      (unsigned long long)(atomic_load(&ct->wr.dio.writes) - wbefore),
			      direct[m][k] ? 3u : 0u);
			wbefore = atomic_load(&ct->wr.dio.writes);
			CHECK(obj_exact(o, src[k], 0, T_SIZE), "modes %s: %s: the bytes", names[m],
			      keys[k]);
			cachetier_obj_unref(o);
		}
		stats(ct, &st);
		CHECK(st.direct_fallbacks == 0 && st.fill_errors == 0 && st.units_corrupt == 0,
		      "modes %s: %llu fallbacks, %llu fill errors, %llu corrupt", names[m],
		      (unsigned long long)st.direct_fallbacks, (unsigned long long)st.fill_errors,
		      (unsigned long long)st.units_corrupt);
		cachetier_close(ct);
		backend_close(be);
	}
	for (int k = 0; k < 4; k++)
		free(src[k]);
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "df", 20261201u);

	want = malloc(FILE_LEN);
	got = malloc(FILE_LEN);
	for (int k = 0; k < CT_WRITEV_MAX; k++)
		if (posix_memalign((void **)&bufs[k], CT_DIO_ALIGN, BUFMAX) != 0)
			FAIL("posix_memalign");
	if (!want || !got)
		FAIL("malloc");
	test_seeded(seed);
	test_tmpfs(seed);
	test_off(seed);
	test_inflight(seed);
	test_tier(seed);
	test_modes(seed);
	test_big(seed);
	for (int k = 0; k < CT_WRITEV_MAX; k++)
		free(bufs[k]);
	free(want);
	free(got);
	return test_end("directfill", tmpdir, seed);
}
