/*
 * test_cachetier.c — unit tests of backend (local) and cachetier without a
 * mount: listing, key checks, decoding of gzip and zstd shards (whole,
 * multi-member, truncated, corrupt), reuse of decoded copies, a decoded
 * copy cut under an open object (EIO, then decoded again), a byte flipped
 * and a hole punched in decoded copies between two opens (EIO, then decoded
 * again: their units' CRC32Cs), refusal past
 * max_decoded_bytes (whole or error, remembered), metadata
 * blobs, and the modes of what the cache directory holds.
 *
 * Data is random (seed printed) and compressed here with zlib and libzstd,
 * so every expectation is exact: decoded bytes equal the original bytes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "backend.h"
#include "cachetier.h"
#include "check.h"

static char tmpdir[256];

static void write_file(const char *rel, const void *buf, size_t len)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/src/%s", tmpdir, rel);
	f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

static unsigned char *gzip_bytes(const unsigned char *in, size_t len, size_t *outlen)
{
	z_stream zs;
	size_t cap = compressBound((uLong)len) + 64;
	unsigned char *out = malloc(cap);

	memset(&zs, 0, sizeof(zs));
	deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
	zs.next_in = (unsigned char *)in;
	zs.avail_in = (uInt)len;
	zs.next_out = out;
	zs.avail_out = (uInt)cap;
	if (deflate(&zs, Z_FINISH) != Z_STREAM_END)
		exit(1);
	*outlen = zs.total_out;
	deflateEnd(&zs);
	return out;
}

static unsigned char *zstd_bytes(const unsigned char *in, size_t len, size_t *outlen)
{
	size_t cap = ZSTD_compressBound(len);
	unsigned char *out = malloc(cap);
	ZSTD_CCtx *c = ZSTD_createCCtx();

	ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
	*outlen = ZSTD_compress2(c, out, cap, in, len);
	if (ZSTD_isError(*outlen))
		exit(1);
	ZSTD_freeCCtx(c);
	return out;
}

struct found {
	int n;
	int saw_nested;
};

static int list_cb(void *arg, const struct backend_objinfo *info)
{
	struct found *f = arg;

	f->n++;
	if (strcmp(info->key, "sub/dir/nested.bin") == 0 && info->size == 5)
		f->saw_nested = 1;
	return 0;
}

/* Open object 'key' decoded with codec; check size, damage and bytes. */
static void check_decode(struct cachetier *ct, struct backend *be, const char *key,
			 enum cachetier_codec codec, const unsigned char *want, size_t wantlen,
			 int want_damage)
{
	struct backend_objinfo info;
	struct cachetier_obj *o = NULL;
	unsigned char *got;
	int err;

	err = backend_stat(be, key, &info);
	CHECK(err == 0, "stat %s: %d", key, err);
	err = cachetier_obj_open(ct, &info, codec, &o);
	CHECK(err == 0, "open %s: %d", key, err);
	if (err)
		return;
	CHECK(cachetier_obj_size(o) == wantlen, "%s: size %llu, want %zu", key,
	      (unsigned long long)cachetier_obj_size(o), wantlen);
	CHECK(cachetier_obj_damage(o, NULL) == want_damage, "%s: damage %d, want %d", key,
	      cachetier_obj_damage(o, NULL), want_damage);
	got = malloc(wantlen + 1);
	CHECK(cachetier_obj_pread(o, got, wantlen + 1, 0) == (ssize_t)wantlen, "%s: pread", key);
	CHECK(memcmp(got, want, wantlen) == 0, "%s: decoded bytes differ", key);
	{
		struct cachetier_pin *pin;
		int fd;
		uint64_t fo;

		CHECK(cachetier_obj_read_begin(o, 0, wantlen, &fd, &fo, &pin) == 0,
		      "%s: fd in range", key);
		cachetier_obj_read_end(pin);
		CHECK(cachetier_obj_read_begin(o, wantlen, 1, &fd, &fo, &pin) == -EIO,
		      "%s: fd past end", key);
	}
	free(got);
	cachetier_obj_unref(o);
}

/* The path of decoded copy of key (codec) in cache dir 'dir': its name is
 * the FNV-1a 64 of "<codec>:<etag>:<key>" (cachetier_obj.c obj_name). */
static void copy_path(struct backend *be, const char *dir, const char *key,
		      enum cachetier_codec codec, char *out, size_t outlen)
{
	struct backend_objinfo info;
	char name[600];
	uint64_t h = 0xcbf29ce484222325ull;

	CHECK(backend_stat(be, key, &info) == 0, "stat %s", key);
	snprintf(name, sizeof(name), "%d:%s:%s", (int)codec, info.etag, key);
	for (const char *p = name; *p; p++) {
		h ^= (unsigned char)*p;
		h *= 0x100000001b3ull;
	}
	snprintf(out, outlen, "%s/decoded/%016llx", dir, (unsigned long long)h);
}

/* Open key decoded with codec and read [off, off + len): the result of the
 * read, and the bytes in got. */
static ssize_t read_decoded(struct cachetier *ct, struct backend *be, const char *key,
			    enum cachetier_codec codec, unsigned char *got, size_t len,
			    uint64_t off)
{
	struct backend_objinfo info;
	struct cachetier_obj *o = NULL;
	ssize_t n;
	int err;

	backend_stat(be, key, &info);
	err = cachetier_obj_open(ct, &info, codec, &o);
	CHECK(err == 0, "open %s: %d", key, err);
	if (err)
		return err;
	n = cachetier_obj_pread(o, got, len, off);
	cachetier_obj_unref(o);
	return n;
}

/* One of the readers of test_damaged_copies' racing phase: reads all of
 * o in CT_DEC_UNIT pieces, starting at piece 'first' and wrapping; counts
 * wrong bytes and EIO replies. */
struct racer {
	pthread_t tid;
	struct cachetier_obj *o;
	const unsigned char *data;
	size_t n, first;
	int wrong, eio, other;
};

static void *racer_run(void *arg)
{
	struct racer *r = arg;
	size_t piece = 64u << 10, pieces = (r->n + piece - 1) / piece;
	unsigned char *buf = malloc(piece);

	for (size_t i = 0; buf && i < pieces; i++) {
		size_t off = (r->first + i) % pieces * piece;
		size_t len = r->n - off < piece ? r->n - off : piece;
		ssize_t got = cachetier_obj_pread(r->o, buf, len, off);

		if (got == -EIO)
			r->eio++;
		else if (got != (ssize_t)len)
			r->other++;
		else if (memcmp(buf, r->data + off, len) != 0)
			r->wrong++;
	}
	free(buf);
	return NULL;
}

/* A byte flipped in one decoded copy (whole.tar.zst) and a hole punched in
 * another (multi.tar.gz), both between two opens of the cache tier: a read
 * of a unit before the damage gives its bytes, a read of the damaged unit
 * fails with EIO (once each: units_corrupt), the copy and its record are
 * gone, and the next read decodes it again and gives the exact bytes; the
 * usage ends where it began; a third open reuses the new copies whole, and
 * a second tier open on the directory at the same time (as another process
 * would) fails the read of a copy flipped again, which the first tier then
 * decodes again and the second reuses. */
static void test_damaged_copies(struct backend *be, struct cachetier_config *cc,
				const unsigned char *data, size_t n)
{
	static const char *const keys[2] = {"whole.tar.zst", "multi.tar.gz"};
	static const enum cachetier_codec codecs[2] = {CACHETIER_ZSTD, CACHETIER_GZIP};
	const uint64_t unit = 64u << 10, bad[2] = {20 * unit + 100, 33 * unit + 4096};
	unsigned char *got = malloc(n);
	struct cachetier_stats st;
	struct cachetier *ct;
	char copies[2][700], rec[720];
	uint64_t used0;
	int err;

	/* copies written by this open (the cut test left them cut) */
	err = cachetier_open(&ct, cc, be);
	CHECK(err == 0, "damage: open: %d", err);
	if (err)
		return;
	for (int k = 0; k < 2; k++) {
		CHECK(read_decoded(ct, be, keys[k], codecs[k], got, n, 0) == (ssize_t)n &&
			  memcmp(got, data, n) == 0,
		      "damage: %s written", keys[k]);
		copy_path(be, cachetier_dir(ct), keys[k], codecs[k], copies[k], sizeof(copies[k]));
	}
	cachetier_close(ct);
	{
		int fd = open(copies[0], O_RDWR);
		unsigned char b = 0;

		CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)bad[0]) == 1, "damage: %s", copies[0]);
		b ^= 0x01;
		CHECK(fd >= 0 && pwrite(fd, &b, 1, (off_t)bad[0]) == 1, "damage: flip");
		close(fd);
		fd = open(copies[1], O_RDWR);
		CHECK(fd >= 0 && fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					   (off_t)bad[1], 8192) == 0,
		      "damage: punch %s", copies[1]);
		close(fd);
	}

	err = cachetier_open(&ct, cc, be);
	CHECK(err == 0, "damage: reopen: %d", err);
	if (err)
		return;
	cachetier_get_stats(ct, &st);
	used0 = st.bytes_used;
	for (int k = 0; k < 2; k++) {
		uint64_t u = bad[k] / unit;
		struct backend_objinfo info;
		struct cachetier_obj *o = NULL;
		struct stat sst;

		/* one open object throughout, as a mount holds it */
		backend_stat(be, keys[k], &info);
		err = cachetier_obj_open(ct, &info, codecs[k], &o);
		CHECK(err == 0, "damage: open %s: %d", keys[k], err);
		if (err)
			continue;
		/* the units before the damaged one read right */
		CHECK(cachetier_obj_pread(o, got, (size_t)(u * unit), 0) == (ssize_t)(u * unit) &&
			  memcmp(got, data, (size_t)(u * unit)) == 0,
		      "damage: %s before unit %llu", keys[k], (unsigned long long)u);
		CHECK(cachetier_obj_pread(o, got, 10, bad[k] - 5) == -EIO,
		      "damage: %s: the damaged unit's read is not EIO", keys[k]);
		cachetier_get_stats(ct, &st);
		CHECK(st.units_corrupt == (uint64_t)k + 1 && st.decoded_streams == (uint64_t)k &&
			  st.decoded_reused == (uint64_t)k + 1,
		      "damage: %s: corrupt %llu decoded %llu reused %llu", keys[k],
		      (unsigned long long)st.units_corrupt, (unsigned long long)st.decoded_streams,
		      (unsigned long long)st.decoded_reused);
		snprintf(rec, sizeof(rec), "%s.rec", copies[k]);
		CHECK(stat(copies[k], &sst) < 0 && errno == ENOENT, "damage: %s: copy left",
		      keys[k]);
		CHECK(stat(rec, &sst) < 0 && errno == ENOENT, "damage: %s: record left", keys[k]);
		/* decoded again: every byte */
		CHECK(cachetier_obj_pread(o, got, n, 0) == (ssize_t)n && memcmp(got, data, n) == 0,
		      "damage: %s: decoded again", keys[k]);
		cachetier_get_stats(ct, &st);
		CHECK(st.units_corrupt == (uint64_t)k + 1 && st.decoded_streams == (uint64_t)k + 1,
		      "damage: %s: corrupt %llu decoded %llu after", keys[k],
		      (unsigned long long)st.units_corrupt, (unsigned long long)st.decoded_streams);
		cachetier_obj_unref(o);
	}
	cachetier_get_stats(ct, &st);
	CHECK(st.bytes_used == used0, "damage: bytes_used %llu, was %llu",
	      (unsigned long long)st.bytes_used, (unsigned long long)used0);
	cachetier_close(ct);

	/* the new copies' records carry their CRCs: reused, every unit checked */
	err = cachetier_open(&ct, cc, be);
	CHECK(err == 0, "damage: third open: %d", err);
	if (err)
		return;
	for (int k = 0; k < 2; k++)
		CHECK(read_decoded(ct, be, keys[k], codecs[k], got, n, 0) == (ssize_t)n &&
			  memcmp(got, data, n) == 0,
		      "damage: %s reused", keys[k]);
	cachetier_get_stats(ct, &st);
	CHECK(st.units_corrupt == 0 && st.decoded_streams == 0 && st.decoded_reused == 2,
	      "damage: third open: corrupt %llu decoded %llu reused %llu",
	      (unsigned long long)st.units_corrupt, (unsigned long long)st.decoded_streams,
	      (unsigned long long)st.decoded_reused);

	/* another tier on the directory (as another process) while this one is
	 * open: a byte flipped in a copy it did not write fails its read, and
	 * the copy is decoded again by whoever reads next */
	{
		struct cachetier *ct2;
		struct cachetier_stats st2;
		int fd = open(copies[0], O_RDWR);
		unsigned char b = 0;

		CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)bad[0]) == 1, "damage: again %s",
		      copies[0]);
		b ^= 0x80;
		CHECK(fd >= 0 && pwrite(fd, &b, 1, (off_t)bad[0]) == 1, "damage: flip again");
		close(fd);
		err = cachetier_open(&ct2, cc, be);
		CHECK(err == 0, "damage: second tier: %d", err);
		if (err == 0) {
			CHECK(read_decoded(ct2, be, keys[0], codecs[0], got, n, 0) == -EIO,
			      "damage: second tier: the read is not EIO");
			CHECK(read_decoded(ct, be, keys[0], codecs[0], got, n, 0) == (ssize_t)n &&
				  memcmp(got, data, n) == 0,
			      "damage: first tier: decoded again");
			CHECK(read_decoded(ct2, be, keys[0], codecs[0], got, n, 0) == (ssize_t)n &&
				  memcmp(got, data, n) == 0,
			      "damage: second tier: the first tier's new copy");
			cachetier_get_stats(ct, &st);
			cachetier_get_stats(ct2, &st2);
			CHECK(st2.units_corrupt == 1 && st2.decoded_streams == 0 &&
				  st2.decoded_reused == 2 && st.units_corrupt == 0 &&
				  st.decoded_streams == 1,
			      "damage: second tier: corrupt %llu decoded %llu reused %llu; first "
			      "tier: corrupt %llu decoded %llu",
			      (unsigned long long)st2.units_corrupt,
			      (unsigned long long)st2.decoded_streams,
			      (unsigned long long)st2.decoded_reused,
			      (unsigned long long)st.units_corrupt,
			      (unsigned long long)st.decoded_streams);
			cachetier_close(ct2);
		}
	}
	cachetier_close(ct);

	/* racing readers of a copy flipped between opens: exact bytes or EIO
	 * for each, the damage counted once, the copy decoded again once */
	{
		struct racer rs[4];
		struct backend_objinfo info;
		struct cachetier_obj *o = NULL;
		int fd = open(copies[0], O_RDWR), eio = 0;
		unsigned char b = 0;

		CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)bad[0]) == 1, "race: %s", copies[0]);
		b ^= 0x10;
		CHECK(fd >= 0 && pwrite(fd, &b, 1, (off_t)bad[0]) == 1, "race: flip");
		close(fd);
		err = cachetier_open(&ct, cc, be);
		CHECK(err == 0, "race: open: %d", err);
		if (err)
			goto out;
		backend_stat(be, keys[0], &info);
		err = cachetier_obj_open(ct, &info, codecs[0], &o);
		CHECK(err == 0, "race: open %s: %d", keys[0], err);
		for (int i = 0; err == 0 && i < 4; i++) {
			memset(&rs[i], 0, sizeof(rs[i]));
			rs[i].o = o;
			rs[i].data = data;
			rs[i].n = n;
			rs[i].first = (size_t)(i * 6); /* all reach unit 20 soon, about together */
			pthread_create(&rs[i].tid, NULL, racer_run, &rs[i]);
		}
		for (int i = 0; err == 0 && i < 4; i++) {
			pthread_join(rs[i].tid, NULL);
			CHECK(rs[i].wrong == 0 && rs[i].other == 0,
			      "race: reader %d: %d wrong, %d other errors", i, rs[i].wrong,
			      rs[i].other);
			eio += rs[i].eio;
		}
		if (err == 0) {
			printf("race: %d reads of 64 KiB failed with EIO\n", eio);
			CHECK(eio >= 1, "race: no read failed");
			CHECK(cachetier_obj_pread(o, got, n, 0) == (ssize_t)n &&
				  memcmp(got, data, n) == 0,
			      "race: after");
			cachetier_get_stats(ct, &st);
			CHECK(st.units_corrupt == 1 && st.decoded_streams == 1,
			      "race: corrupt %llu decoded %llu",
			      (unsigned long long)st.units_corrupt,
			      (unsigned long long)st.decoded_streams);
			cachetier_obj_unref(o);
		}
		cachetier_close(ct);
	}
out:
	free(got);
}

static int mode_of(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

int main(void)
{
	unsigned seed = 20240611u; /* fixed in CI; TEST_SEED gives another */
	size_t n = 3 * 1024 * 1024 + 123, glen, zlen, g2len;
	unsigned char *data = malloc(n), *gz, *zs, *gz2, *multi;
	struct backend *be;
	struct cachetier *ct;
	struct cachetier_config cc = {0};
	struct cachetier_stats st;
	struct found fnd = {0};
	char path[512];
	void *blob;
	size_t bloblen;
	int err;

	if (getenv("TEST_SEED"))
		seed = (unsigned)strtoul(getenv("TEST_SEED"), NULL, 10);
	printf("seed %u (set TEST_SEED to repeat)\n", seed);
	srand(seed);
	/* compressible but not trivial: random runs of random bytes */
	for (size_t i = 0; i < n;) {
		size_t run = 1 + (size_t)rand() % 64;
		unsigned char b = (unsigned char)rand();

		for (size_t j = 0; j < run && i < n; j++)
			data[i++] = (rand() % 4) ? b : (unsigned char)rand();
	}
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/shardfs-ut-XXXXXX");
	if (!mkdtemp(tmpdir))
		return 1;
	snprintf(path, sizeof(path), "%s/src", tmpdir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/src/sub", tmpdir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/src/sub/dir", tmpdir);
	mkdir(path, 0755);

	gz = gzip_bytes(data, n, &glen);
	zs = zstd_bytes(data, n, &zlen);
	/* two gzip members: the first half and the second half */
	gz2 = gzip_bytes(data + n / 2, n - n / 2, &g2len);
	{
		size_t h1;
		unsigned char *first = gzip_bytes(data, n / 2, &h1);

		multi = malloc(h1 + g2len);
		memcpy(multi, first, h1);
		memcpy(multi + h1, gz2, g2len);
		write_file("multi.tar.gz", multi, h1 + g2len);
		/* the same with the second member corrupted in the middle */
		multi[h1 + g2len / 2] ^= 0x55;
		write_file("multi-bad2.tar.gz", multi, h1 + g2len);
		free(first);
	}
	write_file("whole.tar.gz", gz, glen);
	write_file("whole.tar.zst", zs, zlen);
	write_file("trunc.tar.gz", gz, glen / 2);
	write_file("trunc.tar.zst", zs, zlen / 2);
	gz[glen / 2] ^= 0x55;
	write_file("bad.tar.gz", gz, glen);
	zs[zlen / 2] ^= 0x55;
	write_file("bad.tar.zst", zs, zlen);
	write_file("sub/dir/nested.bin", "hello", 5);
	write_file("empty.tar.gz", "", 0);

	/* backend: listing and keys */
	err = backend_open(&be, "/nonexistent/shardfs-test", NULL);
	CHECK(err == -ENOENT, "open of a missing dir: %d", err);
	err = backend_open(&be, "ftp://host/x/", NULL);
	CHECK(err == -EPROTONOSUPPORT, "unknown scheme: %d", err);
	snprintf(path, sizeof(path), "file://%s/src", tmpdir);
	err = backend_open(&be, path, NULL);
	CHECK(err == 0, "open file:// source: %d", err);
	if (err)
		return 1;
	err = backend_list(be, list_cb, &fnd);
	CHECK(err == 0 && fnd.n == 10 && fnd.saw_nested, "list: err %d, %d objects", err, fnd.n);
	{
		struct backend_objinfo info;
		char buf[8];

		CHECK(backend_stat(be, "../etc/passwd", &info) == -EINVAL, "'..' key refused");
		CHECK(backend_stat(be, "/etc/passwd", &info) == -EINVAL, "absolute key refused");
		CHECK(backend_stat(be, "sub/./dir/nested.bin", &info) == -EINVAL, "'.' refused");
		CHECK(backend_stat(be, "missing", &info) == -ENOENT, "missing key");
		CHECK(backend_pread_version(be, "sub/dir/nested.bin", NULL, 0, buf, 8, 1) == 4 &&
			  memcmp(buf, "ello", 4) == 0,
		      "pread");
	}

	/* cachetier: decoding */
	snprintf(path, sizeof(path), "%s/cache/deeper", tmpdir);
	cc.cache_dir = path;
	/* the cache tier applies no defaults: the mount's (fs/core/fs_opt.c) */
	cc.cache_size_bytes = 20ull << 30;
	cc.min_free_bytes = 1ull << 30;
	cc.chunk_bytes = 8u << 20;
	cc.readahead_max_bytes = 64ull << 20;
	cc.fill_threads = 9;
	err = cachetier_open(&ct, &cc, be);
	CHECK(err == 0, "cachetier_open: %d", err);
	if (err)
		return 1;
	CHECK(mode_of(path) == 0700, "cache dir mode %o", mode_of(path));
	CHECK(mode_of(cachetier_dir(ct)) == 0700, "source dir mode %o", mode_of(cachetier_dir(ct)));

	check_decode(ct, be, "whole.tar.gz", CACHETIER_GZIP, data, n, 0);
	check_decode(ct, be, "whole.tar.zst", CACHETIER_ZSTD, data, n, 0);
	check_decode(ct, be, "multi.tar.gz", CACHETIER_GZIP, data, n, 0);
	/* the corrupt second member is dropped whole; the first is kept */
	check_decode(ct, be, "multi-bad2.tar.gz", CACHETIER_GZIP, data, n / 2, -EBADMSG);
	/* a corrupt single member or frame: nothing can be trusted */
	check_decode(ct, be, "bad.tar.gz", CACHETIER_GZIP, data, 0, -EBADMSG);
	check_decode(ct, be, "bad.tar.zst", CACHETIER_ZSTD, data, 0, -EBADMSG);
	check_decode(ct, be, "empty.tar.gz", CACHETIER_GZIP, data, 0, 0);
	{
		/* truncated: a prefix of the original, damage -EIO */
		struct backend_objinfo info;
		struct cachetier_obj *o;
		unsigned char *got = malloc(n);
		const char *keys[] = {"trunc.tar.gz", "trunc.tar.zst"};

		for (int k = 0; k < 2; k++) {
			backend_stat(be, keys[k], &info);
			err =
			    cachetier_obj_open(ct, &info, k ? CACHETIER_ZSTD : CACHETIER_GZIP, &o);
			CHECK(err == 0, "%s: open %d", keys[k], err);
			if (err)
				continue;
			uint64_t sz = cachetier_obj_size(o);

			CHECK(sz > 0 && sz < n, "%s: prefix size %llu", keys[k],
			      (unsigned long long)sz);
			CHECK(cachetier_obj_damage(o, NULL) == -EIO, "%s: damage", keys[k]);
			CHECK(cachetier_obj_pread(o, got, n, 0) == (ssize_t)sz &&
				  memcmp(got, data, sz) == 0,
			      "%s: prefix bytes", keys[k]);
			cachetier_obj_unref(o);
		}
		free(got);
	}
	cachetier_get_stats(ct, &st);
	CHECK(st.decoded_streams == 9 && st.decoded_reused == 0, "decoded %llu reused %llu",
	      (unsigned long long)st.decoded_streams, (unsigned long long)st.decoded_reused);

	/* metadata blobs */
	CHECK(cachetier_meta_get(ct, "nope", &blob, &bloblen) == -ENOENT, "absent blob");
	CHECK(cachetier_meta_put(ct, "index|x", "abc", 3) == 0, "put");
	CHECK(cachetier_meta_put(ct, "index|x", "abcd", 4) == 0, "put again");
	err = cachetier_meta_get(ct, "index|x", &blob, &bloblen);
	CHECK(err == 0 && bloblen == 4 && memcmp(blob, "abcd", 4) == 0, "get");
	free(blob);
	cachetier_close(ct);

	/* a second cache tier on the same directory reuses decoded copies */
	err = cachetier_open(&ct, &cc, be);
	CHECK(err == 0, "reopen: %d", err);
	check_decode(ct, be, "whole.tar.gz", CACHETIER_GZIP, data, n, 0);
	check_decode(ct, be, "multi-bad2.tar.gz", CACHETIER_GZIP, data, n / 2, -EBADMSG);
	cachetier_get_stats(ct, &st);
	CHECK(st.decoded_streams == 0 && st.decoded_reused == 2, "reuse: decoded %llu reused %llu",
	      (unsigned long long)st.decoded_streams, (unsigned long long)st.decoded_reused);
	{
		/* a decoded copy cut under the open object: that read fails with
		 * EIO (never short), counted; the next read decodes it again */
		struct backend_objinfo info;
		struct cachetier_obj *o = NULL;
		unsigned char *got = malloc(n);
		char d[600], f[1200];
		DIR *dir;
		struct dirent *de;
		struct stat sst;
		int cut = 0;

		backend_stat(be, "whole.tar.gz", &info);
		err = cachetier_obj_open(ct, &info, CACHETIER_GZIP, &o);
		CHECK(err == 0, "cut copy: open %d", err);
		snprintf(d, sizeof(d), "%s/decoded", cachetier_dir(ct));
		dir = opendir(d);
		while (dir && (de = readdir(dir))) {
			snprintf(f, sizeof(f), "%s/%s", d, de->d_name);
			if (stat(f, &sst) == 0 && S_ISREG(sst.st_mode) && (size_t)sst.st_size == n)
				cut += truncate(f, (off_t)(n / 3)) == 0;
		}
		if (dir)
			closedir(dir);
		/* whole.tar.gz, whole.tar.zst, multi.tar.gz */
		CHECK(cut == 3, "cut copy: %d copies of %zu bytes cut", cut, n);
		if (err == 0) {
			CHECK(cachetier_obj_pread(o, got, n, 0) == -EIO, "cut copy: read not EIO");
			cachetier_get_stats(ct, &st);
			CHECK(st.units_corrupt == 1, "cut copy: units_corrupt %llu",
			      (unsigned long long)st.units_corrupt);
			CHECK(cachetier_obj_pread(o, got, n, 0) == (ssize_t)n &&
				  memcmp(got, data, n) == 0,
			      "cut copy: decoded again");
			cachetier_get_stats(ct, &st);
			CHECK(st.decoded_streams == 1 && st.units_corrupt == 1,
			      "cut copy: decoded %llu corrupt %llu",
			      (unsigned long long)st.decoded_streams,
			      (unsigned long long)st.units_corrupt);
			cachetier_obj_unref(o);
		}
		free(got);
	}
	{
		/* every file the cache holds is 0600, no temp files are left */
		char d[600];
		DIR *dir;
		struct dirent *de;
		int files = 0;

		snprintf(d, sizeof(d), "%s/decoded", cachetier_dir(ct));
		dir = opendir(d);
		while (dir && (de = readdir(dir))) {
			char f[1200];

			if (de->d_name[0] == '.' && (de->d_name[1] == '\0' || de->d_name[1] == '.'))
				continue;
			snprintf(f, sizeof(f), "%s/%s", d, de->d_name);
			CHECK(mode_of(f) == 0600, "%s mode %o", f, mode_of(f));
			CHECK(strncmp(de->d_name, ".tmp", 4) != 0, "temp file left: %s", f);
			files++;
		}
		if (dir)
			closedir(dir);
		CHECK(files == 18, "decoded dir holds %d files, want 18 (9 copies + 9 records)",
		      files);
	}
	cachetier_close(ct);
	test_damaged_copies(be, &cc, data, n);

	/* whole or error: a copy past max_decoded_bytes is refused, remembered while the
	 * bound is no looser, and decoded once it is raised */
	zs[zlen / 2] ^= 0x55; /* undo the corruption of bad.tar.zst */
	write_file("bound.tar.zst", zs, zlen);
	uint64_t refused_at = 0; /* the refusal's decoded_bytes in round 0 */

	for (int round = 0; round < 3; round++) {
		struct backend_objinfo info;
		struct cachetier_refusal r;
		struct cachetier_obj *o = NULL;
		uint64_t used0;

		cc.max_decoded_bytes = round < 2 ? 1u << 20 : 8u << 20;
		err = cachetier_open(&ct, &cc, be);
		CHECK(err == 0, "open with a bound: %d", err);
		if (err)
			break;
		cachetier_get_stats(ct, &st);
		used0 = st.bytes_used;
		backend_stat(be, "bound.tar.zst", &info);
		err = cachetier_obj_open(ct, &info, CACHETIER_ZSTD, &o);
		cachetier_get_stats(ct, &st);
		if (round < 2) {
			CHECK(err == -EFBIG, "round %d: open past the bound: %d", round, err);
			CHECK(cachetier_obj_refusal(ct, &info, CACHETIER_ZSTD, &r) == 0 &&
				  r.bound == CACHETIER_BOUND_SIZE &&
				  r.max_decoded_bytes == 1u << 20 && r.decoded_bytes > 1u << 20 &&
				  r.compressed_bytes <= zlen,
			      "round %d: refusal", round);
			CHECK(st.bytes_used == used0 && st.decoded_streams == 0,
			      "round %d: used %llu -> %llu, decoded %llu", round,
			      (unsigned long long)used0, (unsigned long long)st.bytes_used,
			      (unsigned long long)st.decoded_streams);
			/* remembered: round 1 (a new open) reports round 0's refusal (its
			 * decoded_bytes), and nothing was decoded into the cache */
			if (round == 0)
				refused_at = r.decoded_bytes;
			else
				CHECK(r.decoded_bytes == refused_at && st.decoded_bytes == 0,
				      "round 1: refusal not remembered: refusal at %llu (round 0: "
				      "%llu), "
				      "%llu bytes decoded",
				      (unsigned long long)r.decoded_bytes,
				      (unsigned long long)refused_at,
				      (unsigned long long)st.decoded_bytes);
		} else {
			CHECK(err == 0 && cachetier_obj_size(o) == n, "raised bound: %d", err);
			CHECK(st.bytes_used == used0 + n && st.decoded_streams == 1,
			      "raised bound: used %llu -> %llu", (unsigned long long)used0,
			      (unsigned long long)st.bytes_used);
			CHECK(cachetier_obj_refusal(ct, &info, CACHETIER_ZSTD, &r) == -ENOENT,
			      "no refusal once decoded");
		}
		cachetier_obj_unref(o);
		cachetier_close(ct);
	}
	backend_close(be);
	free(data);
	free(gz);
	free(zs);
	free(gz2);
	free(multi);
	{
		char cmd[600];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		if (system(cmd) != 0)
			fprintf(stderr, "warning: could not remove %s\n", tmpdir);
	}
	return check_summary("cachetier");
}
