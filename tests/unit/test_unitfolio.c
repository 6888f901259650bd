/*
 * test_unitfolio.c — a fill of less than a chunk written a unit a pwritev
 * (cachetier__writev_units, cachetier_punch.h): the page cache makes a
 * folio as long as a write, and a punch of some units of a longer folio
 * zeroes their part and splits it (tests/bench/README.md, "Unit folios").
 *
 * test_slices (seeded, TEST_SEED): 400 writes of 1 to CT_WRITEV_MAX
 * buffers of seeded lengths (1 byte to 3 units, so a buffer may end inside
 * a unit, span several, or lie inside one; an eighth of all but the first
 * empty, as a last one may be) from a seeded offset of a file
 * of 64 units, each as the fill writer hands them: the file's bytes exact
 * (each write over a file of zeros); each unit's CRC32C the one of its
 * bytes written (crc[] as run_crc fills it: unit c0 + k's at k); and the
 * pwritev calls of this thread, counted by the kernel (/proc/thread-self/io,
 * syscw), exactly one per unit the write touches. The same buffers through
 * cachetier__run_writev: the same bytes and CRCs in one pwritev, so the
 * count checks the split, not the counter. test_empty_last: a unit and an
 * empty buffer after it make one write and no error.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "backend.h"
#include "cachetier.h"
#include "cachetier_i.h"
#include "check.h"
#include "disk.h"
#include "test_rng.h"
#include "test_util.h"

#define UNIT   4096u
#define NUNITS 64u
#define WRITES 400

static char tmpdir[256];

/* This thread's write system calls so far (the kernel's count); -1 when
 * it has none to give. */
static long long syscw(void)
{
	char buf[512];
	long long v = -1;
	int fd = open("/proc/thread-self/io", O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	const char *p;

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	p = strstr(buf, "syscw:");
	if (p)
		v = strtoll(p + 6, NULL, 10);
	return v;
}

/* One write of the seeded buffers through writev_units (split 1) or
 * run_writev (0): bytes, CRCs and write calls checked. */
static void one(struct ct_file *f, unsigned char *want, unsigned char *got, uint64_t *s, int i,
		int split)
{
	struct iovec iov[CT_WRITEV_MAX];
	unsigned char *bufs[CT_WRITEV_MAX];
	uint32_t crc[NUNITS] = {0};
	int n = 1 + (int)(rnd(s) % CT_WRITEV_MAX);
	size_t len = 0;
	uint64_t off;
	uint32_t c0, c1;
	long long before, calls;
	int err;

	for (int k = 0; k < n; k++) {
		/* an eighth of them empty (the first never: some bytes) */
		size_t l = k && rnd(s) % 8 == 0 ? 0 : 1 + (size_t)(rnd(s) % (3 * UNIT));

		bufs[k] = malloc(l ? l : 1);
		for (size_t j = 0; j < l; j++)
			bufs[k][j] = (unsigned char)rnd(s);
		iov[k] = (struct iovec){.iov_base = bufs[k], .iov_len = l};
		len += l;
	}
	off = rnd(s) % ((uint64_t)NUNITS * UNIT - len + 1);
	c0 = (uint32_t)(off / UNIT);
	c1 = (uint32_t)((off + len - 1) / UNIT) + 1;
	memset(want, 0, (size_t)NUNITS * UNIT);
	for (int k = 0, at = 0; k < n; k++) {
		memcpy(want + off + (size_t)at, bufs[k], iov[k].iov_len);
		at += (int)iov[k].iov_len;
	}
	CHECK(ftruncate(f->datafd, 0) == 0 && ftruncate(f->datafd, (off_t)NUNITS * UNIT) == 0,
	      "write %d: truncate", i);
	before = syscw();
	err = split ? cachetier__writev_units(f, c0, crc, off, iov, n)
		    : cachetier__run_writev(f, c0, crc, off, iov, n);
	calls = syscw() - before;
	CHECK(err == 0, "write %d: error %d", i, err);
	CHECK(pread(f->datafd, got, (size_t)NUNITS * UNIT, 0) == (ssize_t)NUNITS * UNIT &&
		  memcmp(got, want, (size_t)NUNITS * UNIT) == 0,
	      "write %d (split %d): %d buffers, %zu bytes at %llu: the file's bytes differ", i,
	      split, n, len, (unsigned long long)off);
	for (uint32_t c = c0; c < c1; c++) {
		uint64_t a = (uint64_t)c * UNIT > off ? (uint64_t)c * UNIT : off;
		uint64_t b =
		    (uint64_t)(c + 1) * UNIT < off + len ? (uint64_t)(c + 1) * UNIT : off + len;
		uint32_t w = disk_crc32c_sw(0, want + a, (size_t)(b - a));

		CHECK(crc[c - c0] == w, "write %d (split %d): unit %u's CRC %08x, want %08x", i,
		      split, c, crc[c - c0], w);
	}
	if (before >= 0)
		CHECK(calls == (split ? (long long)(c1 - c0) : 1),
		      "write %d (split %d): %lld write calls for %u units, want %u", i, split,
		      calls, c1 - c0, split ? c1 - c0 : 1);
	for (int k = 0; k < n; k++)
		free(bufs[k]);
}

/* A unit's bytes, then an empty buffer (a unit's end is where a buffer
 * ends, and the fill's last buffer may be empty): one write, no error
 * (an empty slice alone would be a pwritev of nothing, which reads as a
 * failed write). */
static void test_empty_last(struct ct_file *f)
{
	static unsigned char a[UNIT], b[1];
	struct iovec iov[2] = {{.iov_base = a, .iov_len = UNIT}, {.iov_base = b, .iov_len = 0}};
	uint32_t crc[1] = {0};
	long long before = syscw(), calls;
	int err;

	memset(a, 0x5a, sizeof(a));
	err = cachetier__writev_units(f, 1, crc, UNIT, iov, 2);
	calls = syscw() - before;
	CHECK(err == 0, "empty last buffer: error %d", err);
	CHECK(crc[0] == disk_crc32c_sw(0, a, UNIT), "empty last buffer: CRC %08x", crc[0]);
	if (before >= 0)
		CHECK(calls == 1, "empty last buffer: %lld write calls, want 1", calls);
}

static void test_slices(uint64_t seed)
{
	char path[400];
	struct ct_file f;
	unsigned char *want = malloc((size_t)NUNITS * UNIT), *got = malloc((size_t)NUNITS * UNIT);
	uint64_t s = seed * 2654435761u + 7;

	snprintf(path, sizeof(path), "%s/data", tmpdir);
	memset(&f, 0, sizeof(f));
	f.unit_bytes = UNIT;
	f.nunits = NUNITS;
	f.datafd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (f.datafd < 0 || !want || !got)
		FAIL("open %s: %s", path, strerror(errno));
	if (syscw() < 0)
		printf("no /proc/thread-self/io: the write calls are not counted\n");
	test_empty_last(&f);
	for (int i = 0; i < WRITES; i++)
		one(&f, want, got, &s, i, i % 4 != 3); /* a quarter unsplit */
	close(f.datafd);
	free(want);
	free(got);
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "uf", 20261201u);

	test_slices(seed);
	return test_end("unitfolio", tmpdir, seed);
}
