/*
 * test_disk.c — the on-disk toolkit (disk/disk.h): FNV-1a against the
 * reference vectors, little-endian fields, the binary search (every value
 * in every range of a sorted array with repeats), the blob envelope's
 * verdicts (-EBADMSG for a torn or corrupted blob, -EPROTO for another
 * version) and crash-safe writes (the file has exactly the new bytes, no
 * temp file is left, a write into a missing directory fails and changes
 * nothing).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "disk.h"

/* a check whose condition says it all */
#define EXPECT(c) CHECK(c, "%s", "false")

static void test_fnv_le(void)
{
	unsigned char b[8];

	/* the reference vectors of FNV-1a (draft-eastlake-fnv) */
	EXPECT(disk_fnv64("", 0) == 0xcbf29ce484222325ull);
	EXPECT(disk_fnv64("a", 1) == 0xaf63dc4c8601ec8cull);
	EXPECT(disk_fnv64("foobar", 6) == 0x85944171f73967e8ull);
	EXPECT(disk_fnv32_update(DISK_FNV32_INIT, "a", 1) == 0xe40c292cu);
	EXPECT(disk_fnv32_update(DISK_FNV32_INIT, "foobar", 6) == 0xbf9cf968u);
	EXPECT(disk_fnv64_update(disk_fnv64("foo", 3), "bar", 3) == disk_fnv64("foobar", 6));
	disk_le64_put(b, 0x0807060504030201ull);
	EXPECT(b[0] == 1 && b[7] == 8);
	EXPECT(disk_le64_get(b) == 0x0807060504030201ull);
	EXPECT(disk_le32_get(b + 4) == 0x08070605u);
	EXPECT(disk_le16_get(b + 2) == 0x0403);
	disk_le32_put(b, 0xdeadbeefu);
	disk_le16_put(b + 4, 0xcafe);
	EXPECT(disk_le32_get(b) == 0xdeadbeefu && disk_le16_get(b + 4) == 0xcafe);
}

/* A sorted array with repeats, read through disk_bsearch's callback. */
struct bs_ctx {
	const int *v;
	int want;
	unsigned calls;
};

static int bs_cmp(const void *ctx, size_t i)
{
	struct bs_ctx *c = (struct bs_ctx *)ctx;

	c->calls++;
	return c->v[i] < c->want ? -1 : c->v[i] > c->want;
}

/* Never 0: asks for the first element not below want (a split point). */
static int bs_below(const void *ctx, size_t i)
{
	const struct bs_ctx *c = ctx;

	return c->v[i] < c->want ? -1 : 1;
}

static void test_bsearch(void)
{
	static const int v[] = {1, 3, 3, 3, 7, 9, 11, 20};
	const size_t n = sizeof(v) / sizeof(v[0]);
	int found;

	/* every value from below the first to past the last, in every range */
	for (size_t lo = 0; lo <= n; lo++) {
		for (size_t hi = lo; hi <= n; hi++) {
			for (int want = 0; want <= 21; want++) {
				struct bs_ctx c = {v, want, 0};
				size_t first = lo, i;

				while (first < hi && v[first] < want)
					first++;
				i = disk_bsearch(lo, hi, bs_cmp, &c, &found);
				CHECK(found == (first < hi && v[first] == want) &&
					  (found ? v[i] == want && i >= lo && i < hi : i == first),
				      "[%zu, %zu) %d: %zu found %d", lo, hi, want, i, found);
				CHECK(c.calls <= 4, "%u calls for %zu elements", c.calls, hi - lo);
				EXPECT(disk_bsearch(lo, hi, bs_below, &c, NULL) == first);
			}
		}
	}
}

static void test_blob(void)
{
	unsigned char b[DISK_BLOB_HDR + 5] = {0};

	memcpy(b + DISK_BLOB_HDR, "hello", 5);
	disk_le32_put(b + 12, 5);
	disk_blob_seal(b, sizeof(b), "TESTBLOB", 3);
	EXPECT(memcmp(b, "TESTBLOB", 8) == 0 && disk_le32_get(b + 8) == 3);
	EXPECT(disk_le64_get(b + 16) == disk_fnv64("hello", 5));
	EXPECT(disk_le32_get(b + 12) == 5);
	EXPECT(disk_blob_check(b, sizeof(b), "TESTBLOB", 3) == 0);
	EXPECT(disk_blob_check(b, sizeof(b), "TESTBLOB", 4) == -EPROTO);
	EXPECT(disk_blob_check(b, sizeof(b), "OTHERBLB", 3) == -EBADMSG);
	EXPECT(disk_blob_check(b, sizeof(b) - 1, "TESTBLOB", 3) == -EBADMSG);
	EXPECT(disk_blob_check(b, DISK_BLOB_HDR - 1, "TESTBLOB", 3) == -EBADMSG);
	b[DISK_BLOB_HDR] ^= 1;
	EXPECT(disk_blob_check(b, sizeof(b), "TESTBLOB", 3) == -EBADMSG);
}

static size_t read_back(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, size);

	if (fd >= 0)
		close(fd);
	return n < 0 ? 0 : (size_t)n;
}

static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	if (d)
		closedir(d);
	return n;
}

static void test_write_atomic(void)
{
	char dir[] = "/tmp/shardfs-test-disk-XXXXXX", path[128], got[64];
	int dfd;

	if (!mkdtemp(dir))
		FAIL("mkdtemp %s: %s", dir, strerror(errno));
	snprintf(path, sizeof(path), "%s/a.idx", dir);
	EXPECT(disk_write_atomic(AT_FDCWD, path, "first", 5, 0644) == 0);
	EXPECT(disk_write_atomic(AT_FDCWD, path, "second!", 7, 0644) == 0);
	EXPECT(read_back(path, got, sizeof(got)) == 7 && memcmp(got, "second!", 7) == 0);
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	EXPECT(dfd >= 0);
	EXPECT(disk_write_atomic(dfd, "b", "x", 1, 0600) == 0);
	EXPECT(disk_write_atomic(dfd, "missing/b", "x", 1, 0600) == -ENOENT);
	EXPECT(entries(dir) == 2); /* a.idx and b: no temp file left */
	EXPECT(read_back(path, got, sizeof(got)) == 7);
	unlinkat(dfd, "b", 0);
	close(dfd);
	unlink(path);
	rmdir(dir);
}

/* CRC32C: the vectors of RFC 3720 (iSCSI) B.4 and the check value, in
 * the CPU's instruction (when it has it) and the table; pieces of every
 * split and alignment give the CRC of the whole. */
static void test_crc32c(void)
{
	unsigned char z[32], f[32], inc[32], dec[32], big[1000];

	memset(z, 0, sizeof(z));
	memset(f, 0xff, sizeof(f));
	for (int i = 0; i < 32; i++) {
		inc[i] = (unsigned char)i;
		dec[i] = (unsigned char)(31 - i);
	}
	for (int sw = 0; sw < 2; sw++) {
		uint32_t (*crc)(uint32_t, const void *, size_t) =
		    sw ? disk_crc32c_sw : disk_crc32c_update;

		EXPECT(crc(0, "", 0) == 0);
		EXPECT(crc(0, "123456789", 9) == 0xe3069283u);
		EXPECT(crc(0, z, 32) == 0x8a9136aau);
		EXPECT(crc(0, f, 32) == 0x62a8ab43u);
		EXPECT(crc(0, inc, 32) == 0x46dd794eu);
		EXPECT(crc(0, dec, 32) == 0x113fdb5cu);
	}
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (unsigned char)(i * 131 + 7);
	for (size_t a = 0; a < 20; a++) {
		for (size_t cut = a; cut < sizeof(big); cut += 97) {
			uint32_t whole = disk_crc32c_sw(0, big + a, sizeof(big) - a);
			uint32_t c = disk_crc32c_update(0, big + a, cut - a);

			EXPECT(disk_crc32c_update(c, big + cut, sizeof(big) - cut) == whole);
			EXPECT(disk_crc32c_sw(disk_crc32c_sw(0, big + a, cut - a), big + cut,
					      sizeof(big) - cut) == whole);
		}
	}
	printf("crc32c: %s\n", disk_crc32c_name(disk_crc32c_method()));
}

static uint64_t rng_state;

static uint64_t rng(void)
{
	rng_state += 0x9e3779b97f4a7c15ull; /* splitmix64 */
	uint64_t z = rng_state;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Every method the CPU has against the table, on seeded random bytes:
 * random lengths 0..1 MiB+64 (a quarter of them short, a quarter at the
 * 3-stream block edges, a quarter at vpclmul's: its 1 KiB least, its
 * 256-byte steps, a 16-byte tail), every misalignment 0..63 in turn, a random
 * starting CRC, and the same bytes in two pieces split at a random point.
 * CRC_SEED=N repeats a run (default 1), CRC_ROUNDS=N (default 300). */
static void test_crc32c_methods(void)
{
	static const size_t edges[] = {64, 512, 4096};
	const char *s = getenv("CRC_SEED"), *r = getenv("CRC_ROUNDS");
	uint64_t seed = s ? strtoull(s, NULL, 10) : 1;
	unsigned rounds = r ? (unsigned)strtoul(r, NULL, 10) : 300, methods = 0;
	size_t max = (1u << 20) + 64, fails = 0;
	unsigned char *buf = malloc(max + 64);

	printf("CRC_SEED=%llu CRC_ROUNDS=%u\n", (unsigned long long)seed, rounds);
	EXPECT(buf != NULL);
	if (!buf)
		return;
	rng_state = seed;
	for (size_t i = 0; i < max + 64; i += 8) {
		uint64_t v = rng();

		memcpy(buf + i, &v, 8);
	}
	for (int m = 0; m < DISK_CRC_METHODS; m++) {
		if (!disk_crc32c_supported(m))
			continue;
		methods++;
		printf("crc32c method %s\n", disk_crc32c_name(m));
	}
	for (unsigned i = 0; i < rounds; i++) {
		size_t mis = i % 64, len, cut;
		uint32_t init = (uint32_t)rng(), want;

		switch (i % 4) {
		case 0:
			len = rng() % 600;
			break;
		case 1: /* three blocks of a size, give or take a little */
			len = 3 * edges[rng() % 3] * (1 + rng() % 4) + rng() % 17 - 8;
			break;
		case 2: /* vpclmul: 1 KiB and more, in 256-byte steps, give or take 16 */
			len = 1024 + 256 * (rng() % 8) + rng() % 33 - 16;
			break;
		default:
			len = rng() % (max + 1);
		}
		buf[mis + rng() % (len + 1)] ^= (unsigned char)(1 + rng() % 255);
		cut = len ? rng() % (len + 1) : 0;
		want = disk_crc32c_sw(init, buf + mis, len);
		for (int m = 0; m < DISK_CRC_METHODS; m++) {
			uint32_t got, two;

			if (!disk_crc32c_supported(m))
				continue;
			got = disk_crc32c_by(m, init, buf + mis, len);
			two = disk_crc32c_by(m, disk_crc32c_by(m, init, buf + mis, cut),
					     buf + mis + cut, len - cut);
			if ((got != want || two != want) && fails++ < 10)
				printf(
				    "crc32c %s: seed %llu round %u len %zu misalign %zu cut %zu: "
				    "%08x / %08x, table %08x\n",
				    disk_crc32c_name(m), (unsigned long long)seed, i, len, mis, cut,
				    got, two, want);
		}
		EXPECT(disk_crc32c_update(init, buf + mis, len) == want);
	}
	CHECK(fails == 0, "%zu mismatches", fails);
	printf("crc32c: %u methods x %u rounds\n", methods, rounds);
	free(buf);
}

/* disk_pid_gone: this process and a live child are not gone; a zombie child, a reaped one
 * and no process (pid <= 0: none asked) as the contract says. */
static void test_pid_gone(void)
{
	int fds[2], status;
	char c;
	pid_t pid;

	CHECK(disk_pid_gone(getpid()) == 0, "%s", "this process is not gone");
	CHECK(disk_pid_gone(0) == 0 && disk_pid_gone(-1) == 0, "%s", "pid <= 0: 0");
	EXPECT(pipe(fds) == 0);
	pid = fork();
	if (pid == 0) {
		close(fds[1]);
		(void)!read(fds[0], &c, 1); /* until the parent closes its end */
		_exit(0);
	}
	close(fds[0]);
	CHECK(pid > 0 && disk_pid_gone(pid) == 0, "live child %d: not gone", (int)pid);
	close(fds[1]); /* the child ends: a zombie until it is waited for */
	{
		siginfo_t si; /* its exit, leaving it a zombie (WNOWAIT) */
		CHECK(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) == 0, "%s", "child ended");
	}
	CHECK(disk_pid_gone(pid) == 1, "zombie child %d: gone", (int)pid);
	CHECK(waitpid(pid, &status, 0) == pid, "%s", "waited for");
	CHECK(disk_pid_gone(pid) == 1, "reaped child %d: gone", (int)pid);
}

int main(void)
{
	test_pid_gone();
	test_fnv_le();
	test_bsearch();
	test_crc32c();
	test_crc32c_methods();
	test_blob();
	test_write_atomic();
	return check_summary("disk");
}
