/*
 * test_indexmap.c — shard indexes read in place from mapped cache blobs
 * (cachetier_meta_map, shardidx_load_in_place), as the daemon reads them.
 *
 *  - the mapping's contract: -ENOENT, an empty blob, the bytes put; a put
 *    under the same name (another process reindexing: a rename) leaves a
 *    mapping the bytes it was made of; an unlinked blob stays readable;
 *  - a blob changed in place (written over with its own byte, truncated):
 *    cachetier_meta_changed says so, then and after, and the mapping reads
 *    zeros (no fault past a cut end); a put over the name, a removal, a
 *    mapping unmapped while another of the inode stays, a mapping made
 *    after the change: no change; a blob cut while its mapping is read
 *    reads zeros, no fault (cachetier_guard.c), and a fault in a mapping
 *    that is no blob's still ends the process;
 *  - readers while the blob is replaced: 4 threads map, validate and read
 *    the blob while a writer puts version A, version B, a truncated copy
 *    and a copy with a flipped byte in turn; every load is either one of
 *    the two versions, equal entry for entry and extent for extent to the
 *    index built from its tar, or rejected (-EBADMSG): never another
 *    index, never a crash; each of A, B and a rejection happens at least
 *    once (the writer puts more rounds, a bounded count, until it has). A
 *    long-lived index of version A is checked throughout and after;
 *  - blob families (cachetier_meta_put_in/map_in/remove/sweep): a family's
 *    blobs are apart from plain blobs and other families of the same names;
 *    a sweep removes exactly the family's other blobs (counted), and the
 *    partial blob of a put by a dead process, never a live process's, never
 *    another family's or another source's; a mapping of a swept blob keeps
 *    its bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "cachetier.h"
#include "check.h"
#include "disk.h"
#include "shardidx.h"

#define NAME	    "index|test"
#define READERS	    4
#define ROUNDS	    200 /* puts by the writer */
#define MIN_READ    50	/* loads each reader makes at least */
#define MORE_ROUNDS 100 /* at most ROUNDS * this puts, until the interleaving is seen */

static char tmpdir[] = "/tmp/test_indexmap.XXXXXX";

/* ---- two versions of a shard and their indexes --------------------------- */

struct version {
	const char *ident;
	unsigned char *tar;
	size_t tar_len;
	struct shardidx *ref; /* built from the tar on the heap */
	void *blob;	      /* shardidx_save of ref */
	size_t blob_len;
};

static void octal(char *dst, size_t width, uint64_t v)
{
	char b[32];

	snprintf(b, sizeof(b), "%0*" PRIo64, (int)width - 1, v);
	memcpy(dst, b, width);
}

/* A ustar archive of n members named PREFIX%05u.EXT (i), member i of size
 * base + 7 * i. */
static void make_version(struct version *v, const char *ident, const char *prefix, const char *ext,
			 unsigned n, size_t base)
{
	size_t cap = 1024, len = 0;
	unsigned char *buf = calloc(1, cap);
	struct shardidx_builder *b;
	int err;

	for (unsigned i = 0; i < n; i++) {
		size_t dlen = base + 7 * (size_t)i,
		       need = len + 512 + (dlen + 511) / 512 * 512 + 1024;
		char *h;
		unsigned sum = 0;

		if (need > cap) {
			buf = realloc(buf, need * 2);
			memset(buf + cap, 0, need * 2 - cap);
			cap = need * 2;
		}
		h = (char *)buf + len;
		snprintf(h, 100, "%s%05u.%s", prefix, i, ext);
		octal(h + 100, 8, 0644);
		octal(h + 108, 8, 0);
		octal(h + 116, 8, 0);
		octal(h + 124, 12, dlen);
		octal(h + 136, 12, 1700000000 + i);
		h[156] = '0';
		memcpy(h + 257, "ustar", 6);
		memcpy(h + 263, "00", 2);
		memset(h + 148, ' ', 8);
		for (int k = 0; k < 512; k++)
			sum += (unsigned char)h[k];
		snprintf(h + 148, 8, "%06o", sum);
		len += 512;
		memset(buf + len, 'a' + (int)(i % 26), dlen);
		len += (dlen + 511) / 512 * 512;
	}
	len += 1024;
	v->ident = ident;
	v->tar = buf;
	v->tar_len = len;
	b = shardidx_builder_new();
	if (!b)
		FAIL("builder_new");
	err = shardidx_builder_feed(b, buf, len);
	if (err != 1)
		FAIL("%s: feed: %d", ident, err);
	err = shardidx_builder_finish(b, len, &v->ref);
	if (err)
		FAIL("%s: finish: %d", ident, err);
	err = shardidx_save(v->ref, ident, strlen(ident), &v->blob, &v->blob_len);
	if (err)
		FAIL("%s: save: %d", ident, err);
}

/* Is ix, entry for entry and extent for extent, the index ref? 1 when so. */
static int same_index(const struct shardidx *ix, const struct shardidx *ref)
{
	struct shardidx_info a, b;
	struct shardidx_entry x, y;
	struct shardidx_extent ex, ey;

	shardidx_get_info(ix, &a);
	shardidx_get_info(ref, &b);
	if (a.nentries != b.nentries || a.nsamples != b.nsamples || a.stream_size != b.stream_size)
		return 0;
	for (uint32_t i = 0; i < a.nentries; i++) {
		if (shardidx_entry_get(ix, i, &x) || shardidx_entry_get(ref, i, &y) ||
		    strcmp(x.name, y.name) || x.size != y.size || x.data_off != y.data_off ||
		    x.mtime != y.mtime || x.mode != y.mode || x.type != y.type ||
		    x.parent != y.parent || x.nlink != y.nlink)
			return 0;
		if (shardidx_lookup(ix, SHARDIDX_NONE, x.name, strlen(x.name)) != i)
			return 0;
		if (shardidx_map(ix, i, 1, x.size, &ex, 1) != (x.size > 1) ||
		    shardidx_map(ref, i, 1, y.size, &ey, 1) != (y.size > 1) ||
		    (x.size > 1 && (ex.stream_off != ey.stream_off || ex.len != ey.len)))
			return 0;
	}
	return shardidx_lookup(ix, SHARDIDX_NONE, "nope", 4) == -ENOENT;
}

static struct version va, vb;

static const struct version *version_of(const void *ident, size_t len)
{
	if (len == strlen(va.ident) && !memcmp(ident, va.ident, len))
		return &va;
	if (len == strlen(vb.ident) && !memcmp(ident, vb.ident, len))
		return &vb;
	return NULL;
}

static void release_map(void *m)
{
	cachetier_meta_unmap(m);
}

/* Map the blob and read it in place; *v: the version it says it is. */
static int map_load(struct cachetier *ct, struct shardidx **ix, const struct version **v)
{
	struct cachetier_meta *m;
	const void *data, *ident;
	size_t len, identlen;
	int err = cachetier_meta_map(ct, NAME, &m, &data, &len);

	*ix = NULL;
	*v = NULL;
	if (err < 0)
		return err;
	err = shardidx_ident(data, len, &ident, &identlen);
	if (err < 0) {
		cachetier_meta_unmap(m);
		return err;
	}
	*v = version_of(ident, identlen);
	if (!*v) {
		cachetier_meta_unmap(m);
		return -ESTALE;
	}
	return shardidx_load_in_place(data, len, ident, identlen, release_map, m, ix);
}

/* ---- the contract ------------------------------------------------------------ */

static void test_contract(struct cachetier *ct)
{
	struct cachetier_meta *m, *m2;
	const struct version *v;
	struct shardidx *ix;
	const void *data, *data2;
	size_t len, len2;
	char path[512];

	CHECK(cachetier_meta_map(ct, "absent", &m, &data, &len) == -ENOENT && !m,
	      "absent blob: -ENOENT");
	CHECK(cachetier_meta_put(ct, "empty", "", 0) == 0, "put an empty blob");
	CHECK(cachetier_meta_map(ct, "empty", &m, &data, &len) == 0 && m && !data && len == 0,
	      "empty blob maps to nothing");
	cachetier_meta_unmap(m);
	cachetier_meta_unmap(NULL);

	CHECK(cachetier_meta_put(ct, NAME, va.blob, va.blob_len) == 0, "put A");
	CHECK(cachetier_meta_map(ct, NAME, &m, &data, &len) == 0 && len == va.blob_len &&
		  !memcmp(data, va.blob, len) && ((uintptr_t)data & 7) == 0,
	      "mapped A: its bytes, 8-byte aligned");
	/* another process reindexes: a new file renamed over the name */
	CHECK(cachetier_meta_put(ct, NAME, vb.blob, vb.blob_len) == 0, "put B over A");
	CHECK(len == va.blob_len && !memcmp(data, va.blob, len), "A's mapping keeps A's bytes");
	CHECK(cachetier_meta_map(ct, NAME, &m2, &data2, &len2) == 0 && len2 == vb.blob_len &&
		  !memcmp(data2, vb.blob, len2),
	      "a new mapping has B");
	cachetier_meta_unmap(m2);
	/* the blob unlinked (by hand): the mapping stays */
	snprintf(path, sizeof(path), "rm -f '%s'/meta/*", cachetier_dir(ct));
	CHECK(system(path) == 0, "unlink every blob");
	CHECK(!memcmp(data, va.blob, va.blob_len), "A's mapping outlives its file");
	CHECK(shardidx_load_in_place(data, len, va.ident, strlen(va.ident), release_map, m, &ix) ==
		      0 &&
		  same_index(ix, va.ref),
	      "A read in place from the mapping of an unlinked file");
	shardidx_free(ix);
	CHECK(map_load(ct, &ix, &v) == -ENOENT, "no blob after the unlink");
}

/* ---- blobs changed in place under a mapping ------------------------------------ */

/* Path of blob name's file: the only regular file in meta/ (the caller
 * removed the others). */
static void only_blob(struct cachetier *ct, char *buf, size_t size)
{
	char cmd[700];
	FILE *p;

	snprintf(cmd, sizeof(cmd), "find '%s/meta' -maxdepth 1 -type f ! -name '.*'",
		 cachetier_dir(ct));
	p = popen(cmd, "r");
	if (!p || !fgets(buf, (int)size, p))
		FAIL("no blob file in meta/");
	buf[strcspn(buf, "\n")] = '\0';
	pclose(p);
}

/* Put blob name alone in meta/ and map it twice: *m then *m2 (NULL: once). */
static void put_map(struct cachetier *ct, const char *name, struct cachetier_meta **m,
		    const void **data, struct cachetier_meta **m2, char *path, size_t size)
{
	const void *d2;
	size_t len;
	char cmd[700];

	snprintf(cmd, sizeof(cmd), "rm -f '%s'/meta/*", cachetier_dir(ct));
	if (system(cmd) != 0)
		FAIL("rm");
	CHECK(cachetier_meta_put(ct, name, va.blob, va.blob_len) == 0, "put %s", name);
	CHECK(cachetier_meta_map(ct, name, m, data, &len) == 0 && len == va.blob_len &&
		  cachetier_meta_watched(*m),
	      "%s mapped and watched", name);
	if (m2)
		CHECK(cachetier_meta_map(ct, name, m2, &d2, &len) == 0, "%s mapped again", name);
	only_blob(ct, path, size);
}

static int all_zero(const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++)
		if (p[i])
			return 0;
	return 1;
}

/* A fault outside every mapped blob still ends the process (the guard's
 * handler passes it on): a child maps a file of its own and reads past the
 * end it cut. Killed by SIGBUS, or ended by a sanitizer's handler, which
 * the guard's passes it to (an error exit, or SIGABRT with abort_on_error). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
void __sanitizer_set_report_path(const char *path);
#endif

static void test_foreign_fault(void)
{
	char path[600];
	int status = 0, fd;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/foreign", tmpdir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0 && ftruncate(fd, 8192) == 0, "a file to map");
	pid = fork();
	if (pid == 0) {
		volatile const char *p = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
		/* the report this fault makes is expected: not in the run's
		 * sanitizer directory, which fails the run */
		snprintf(path, sizeof(path), "%s/sanitizer-expected", tmpdir);
		__sanitizer_set_report_path(path);
#endif

		if (p == MAP_FAILED || ftruncate(fd, 0) != 0)
			_exit(3);
		(void)p[4096];
		_exit(0); /* survived: wrong */
	}
	close(fd);
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork and wait");
	CHECK(
	    (WIFSIGNALED(status) && (WTERMSIG(status) == SIGBUS || WTERMSIG(status) == SIGABRT)) ||
		(WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3),
	    "a fault in a mapping that is no blob's ends the process (status 0x%x)", status);
}

static void test_changed(struct cachetier *ct)
{
	struct cachetier_meta *m, *m2;
	const void *data;
	char path[600];
	int fd;

	/* a put over the name, then a removal: no change of the mapped inode */
	put_map(ct, "c1", &m, &data, NULL, path, sizeof(path));
	CHECK(cachetier_meta_changed(m) == 0, "c1: unchanged after the map");
	CHECK(cachetier_meta_put(ct, "c1", vb.blob, vb.blob_len) == 0, "put B over c1");
	CHECK(cachetier_meta_changed(m) == 0, "c1: a put over the name is no change");
	CHECK(unlink(path) == 0, "unlink c1");
	CHECK(cachetier_meta_changed(m) == 0 && !memcmp(data, va.blob, va.blob_len),
	      "c1: a removal is no change, the bytes stay");
	cachetier_meta_unmap(m);

	/* one byte written over with itself: a change; zeros from then on, each ask */
	put_map(ct, "c2", &m, &data, NULL, path, sizeof(path));
	fd = open(path, O_WRONLY);
	CHECK(fd >= 0 && pwrite(fd, va.blob, 1, 0) == 1, "write c2 in place");
	close(fd);
	CHECK(cachetier_meta_changed(m) == 1, "c2: written in place: changed");
	CHECK(all_zero(data, va.blob_len), "c2: the mapping reads zeros");
	CHECK(cachetier_meta_changed(m) == 1, "c2: still changed");
	cachetier_meta_unmap(m);

	/* cut to nothing: a change, and no fault reading the old length */
	put_map(ct, "c3", &m, &data, NULL, path, sizeof(path));
	CHECK(truncate(path, 0) == 0, "truncate c3");
	CHECK(cachetier_meta_changed(m) == 1 && all_zero(data, va.blob_len),
	      "c3: truncated: changed, zeros where the bytes were");
	cachetier_meta_unmap(m);

	/* two mappings of one inode: the first unmapped, the second still watched; a
	 * mapping made after a change is not changed */
	put_map(ct, "c4", &m, &data, &m2, path, sizeof(path));
	cachetier_meta_unmap(m);
	CHECK(truncate(path, 1) == 0, "truncate c4");
	CHECK(cachetier_meta_changed(m2) == 1, "c4: the other mapping of the inode sees it");
	CHECK(cachetier_meta_map(ct, "c4", &m, &data, &(size_t){0}) == 0, "c4 mapped after");
	CHECK(cachetier_meta_changed(m) == 0, "c4: a mapping made after the change: unchanged");
	cachetier_meta_unmap(m);
	cachetier_meta_unmap(m2);

	/* cut while a reader is in the mapping (before anything asks): the
	 * reads past the new end read zeros instead of faulting, and the
	 * next ask says changed */
	put_map(ct, "c5", &m, &data, NULL, path, sizeof(path));
	CHECK(truncate(path, 0) == 0, "truncate c5");
	CHECK(all_zero(data, va.blob_len), "c5: cut under a reader: zeros, no fault");
	CHECK(cachetier_meta_changed(m) == 1, "c5: then changed");
	cachetier_meta_unmap(m);
	test_foreign_fault();
}

/* ---- readers while the blob is replaced ---------------------------------------- */

static atomic_int writer_done;
static atomic_long loads_a, loads_b, rejected;

static void *reader(void *arg)
{
	struct cachetier *ct = arg;

	for (long k = 0; k < MIN_READ || !atomic_load(&writer_done); k++) {
		const struct version *v;
		struct shardidx *ix;
		int err = map_load(ct, &ix, &v);

		if (err == -EBADMSG) {
			atomic_fetch_add(&rejected, 1);
			continue;
		}
		if (err < 0 || !v) {
			CHECK(0, "a load gives %d (%s)", err, v ? v->ident : "no version");
			continue;
		}
		CHECK(same_index(ix, v->ref), "a load of %s is %s entry for entry", v->ident,
		      v->ident);
		atomic_fetch_add(v == &va ? &loads_a : &loads_b, 1);
		shardidx_free(ix);
	}
	return NULL;
}

static void test_replaced(struct cachetier *ct)
{
	unsigned char *bad = malloc(va.blob_len > vb.blob_len ? va.blob_len : vb.blob_len);
	const struct version *v;
	struct shardidx *held;
	pthread_t th[READERS];
	unsigned seed = 12345;

	CHECK(cachetier_meta_put(ct, NAME, va.blob, va.blob_len) == 0, "put A");
	CHECK(map_load(ct, &held, &v) == 0 && v == &va, "the long-lived index of A");
	for (int t = 0; t < READERS; t++)
		pthread_create(&th[t], NULL, reader, ct);
	/* ROUNDS puts, and more (a bounded count, no clock) until the readers have
	 * loaded each version and had a damaged copy rejected at least once: the
	 * interleaving this test is about, shown to have happened */
	for (int r = 0;
	     r < ROUNDS ||
	     (r < ROUNDS * MORE_ROUNDS &&
	      !(atomic_load(&loads_a) && atomic_load(&loads_b) && atomic_load(&rejected)));
	     r++) {
		const struct version *w = r % 2 ? &vb : &va;
		size_t at = (size_t)rand_r(&seed) % w->blob_len;
		int err;

		switch (r % 4) {
		case 0:
		case 1:
			err = cachetier_meta_put(ct, NAME, w->blob, w->blob_len);
			break;
		case 2: /* truncated */
			err = cachetier_meta_put(ct, NAME, w->blob, at);
			break;
		default: /* a flipped byte */
			memcpy(bad, w->blob, w->blob_len);
			bad[at] ^= (unsigned char)(1 + rand_r(&seed) % 255);
			err = cachetier_meta_put(ct, NAME, bad, w->blob_len);
			break;
		}
		CHECK(err == 0, "put %d: %d", r, err);
		if (r >= ROUNDS)
			sched_yield(); /* let the readers in */
		if (r % 16 == 0)
			CHECK(same_index(held, va.ref), "the long-lived index at put %d", r);
	}
	atomic_store(&writer_done, 1);
	for (int t = 0; t < READERS; t++)
		pthread_join(th[t], NULL);
	CHECK(same_index(held, va.ref), "the long-lived index after every put");
	shardidx_free(held);
	printf("replaced: %ld loads of A, %ld of B, %ld rejected\n", atomic_load(&loads_a),
	       atomic_load(&loads_b), atomic_load(&rejected));
	CHECK(atomic_load(&loads_a) > 0, "no reader loaded version A");
	CHECK(atomic_load(&loads_b) > 0, "no reader loaded version B while it was put");
	CHECK(atomic_load(&rejected) > 0, "no reader had a damaged copy rejected");
	free(bad);
}

/* ---- blob families -------------------------------------------------------------- */

/* The directory of family's blobs, as cachetier.h documents it. */
static void family_dir(struct cachetier *ct, const char *family, char *buf, size_t size)
{
	snprintf(buf, size, "%s/meta/f-%016" PRIx64, cachetier_dir(ct),
		 disk_fnv64(family, strlen(family)));
}

static void touch(const char *dir, const char *name)
{
	char path[700];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	if (fd < 0 || write(fd, "partial", 7) != 7)
		FAIL("%s", path);
	close(fd);
}

static int exists(const char *dir, const char *name)
{
	char path[700];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

/* A pid that no longer runs: a child that has exited and been reaped. */
static pid_t dead_pid(void)
{
	pid_t pid = fork();

	if (pid < 0)
		FAIL("fork");
	if (pid == 0)
		_exit(0);
	waitpid(pid, NULL, 0);
	return pid;
}

/* Is family/name mapped with exactly bytes b (len n)? */
static int has_blob(struct cachetier *ct, const char *family, const char *name, const void *b,
		    size_t n)
{
	struct cachetier_meta *m;
	const void *data;
	size_t len;
	int ok;

	if (cachetier_meta_map_in(ct, family, name, &m, &data, &len) != 0)
		return 0;
	ok = len == n && !memcmp(data, b, n);
	cachetier_meta_unmap(m);
	return ok;
}

static void test_family(struct cachetier *ct, struct cachetier *other)
{
	static const char *const names[] = {"view-1", "view-2", "view-3"};
	struct cachetier_meta *m;
	char dir[600], tmp[64], live[64];
	const void *data;
	size_t len;
	unsigned n = 99;

	CHECK(cachetier_meta_sweep(ct, "fam", "view-3", &n) == 0 && n == 0,
	      "sweep of a family never put: nothing");
	CHECK(cachetier_meta_map_in(ct, "fam", "view-1", &m, &data, &len) == -ENOENT && !m,
	      "map in a family never put: -ENOENT");
	for (int i = 0; i < 3; i++)
		CHECK(cachetier_meta_put_in(ct, "fam", names[i], names[i], 6) == 0, "put %s",
		      names[i]);
	CHECK(cachetier_meta_put_in(ct, "fam2", "view-1", "other family", 12) == 0,
	      "put view-1 in another family");
	CHECK(cachetier_meta_put(ct, "view-1", "plain", 5) == 0, "put a plain view-1");
	CHECK(cachetier_meta_put_in(other, "fam", "view-1", "other source", 12) == 0,
	      "put view-1 of the family for another source");
	CHECK(has_blob(ct, "fam", "view-1", "view-1", 6) &&
		  has_blob(ct, "fam2", "view-1", "other family", 12) &&
		  has_blob(ct, NULL, "view-1", "plain", 5),
	      "one name in two families and plain: three blobs");
	CHECK(cachetier_meta_map_in(ct, "fam", "view-1", &m, &data, &len) == 0 && len == 6,
	      "map view-1");
	family_dir(ct, "fam", dir, sizeof(dir));
	snprintf(tmp, sizeof(tmp), ".tmp.%d.0", (int)dead_pid());
	snprintf(live, sizeof(live), ".tmp.%d.0", (int)getppid());
	touch(dir, tmp);
	touch(dir, live);
	touch(dir, "README");
	CHECK(cachetier_meta_sweep(ct, "fam", "view-3", &n) == 0 && n == 2,
	      "sweep keeping view-3: 2 removed (%u)", n);
	CHECK(!memcmp(data, "view-1", 6), "the mapping of a swept blob keeps its bytes");
	cachetier_meta_unmap(m);
	CHECK(!has_blob(ct, "fam", "view-1", "view-1", 6) &&
		  !has_blob(ct, "fam", "view-2", "view-2", 6) &&
		  has_blob(ct, "fam", "view-3", "view-3", 6),
	      "view-1 and view-2 gone, view-3 kept");
	CHECK(!exists(dir, tmp) && exists(dir, live) && exists(dir, "README"),
	      "a dead put's partial blob removed; a live one's and other files kept");
	CHECK(has_blob(ct, "fam2", "view-1", "other family", 12) &&
		  has_blob(ct, NULL, "view-1", "plain", 5) &&
		  has_blob(other, "fam", "view-1", "other source", 12),
	      "other families, plain blobs and other sources untouched");
	CHECK(cachetier_meta_sweep(ct, "fam", "view-3", &n) == 0 && n == 0, "sweep again: nothing");
	CHECK(cachetier_meta_remove(ct, "fam2", "view-1") == 0 &&
		  cachetier_meta_remove(ct, "fam2", "view-1") == -ENOENT &&
		  cachetier_meta_remove(ct, "nofam", "view-1") == -ENOENT,
	      "remove: 0, then -ENOENT; -ENOENT in a family never put");
	CHECK(has_blob(ct, NULL, "view-1", "plain", 5), "the plain view-1 is still there");
	CHECK(cachetier_meta_remove(ct, NULL, "view-1") == 0 &&
		  !has_blob(ct, NULL, "view-1", "plain", 5),
	      "remove a plain blob");
	CHECK(cachetier_meta_sweep(ct, "fam", NULL, &n) == 0 && n == 1 &&
		  !has_blob(ct, "fam", "view-3", "view-3", 6),
	      "sweep without a blob to keep: all gone (%u)", n);
	family_dir(ct, "fam", dir, sizeof(dir));
	CHECK(exists(dir, "README"), "a family directory with other files in it stays");
	CHECK(cachetier_meta_sweep(ct, NULL, NULL, &n) == -EINVAL, "sweep of plain blobs: -EINVAL");
	CHECK(has_blob(other, "fam", "view-1", "other source", 12), "another source's blob stays");

	/* adopt: a plain blob an earlier release saved moves into its family */
	CHECK(cachetier_meta_adopt(ct, "fam3", "index|a") == -ENOENT, "adopt of no blob: -ENOENT");
	family_dir(ct, "fam3", dir, sizeof(dir));
	CHECK(access(dir, F_OK) < 0 && errno == ENOENT, "and no family directory made");
	CHECK(cachetier_meta_put(ct, "index|a", "legacy", 6) == 0, "put a plain index|a");
	CHECK(cachetier_meta_map(ct, "index|a", &m, &data, &len) == 0 && len == 6, "map it");
	CHECK(cachetier_meta_adopt(ct, "fam3", "index|a") == 0, "adopt it into fam3");
	CHECK(has_blob(ct, "fam3", "index|a", "legacy", 6) &&
		  !has_blob(ct, NULL, "index|a", "legacy", 6),
	      "in the family now, no longer plain");
	CHECK(!memcmp(data, "legacy", 6), "a mapping of the adopted blob keeps its bytes");
	cachetier_meta_unmap(m);
	CHECK(cachetier_meta_adopt(ct, "fam3", "index|a") == -ENOENT, "adopt again: -ENOENT");
	CHECK(cachetier_meta_adopt(ct, NULL, "index|a") == -EINVAL,
	      "adopt without a family: -EINVAL");
	CHECK(cachetier_meta_put_in(ct, "fam3", "index|b", "newer", 5) == 0 &&
		  cachetier_meta_sweep(ct, "fam3", "index|b", &n) == 0 && n == 1 &&
		  !has_blob(ct, "fam3", "index|a", "legacy", 6),
	      "a newer blob's sweep removes the adopted one");
	CHECK(cachetier_meta_sweep(ct, "fam3", NULL, &n) == 0 && n == 1, "sweep all of fam3");
	family_dir(ct, "fam3", dir, sizeof(dir));
	CHECK(access(dir, F_OK) < 0 && errno == ENOENT, "its emptied directory removed");
	CHECK(cachetier_meta_put_in(ct, "fam3", "index|c", "again", 5) == 0 &&
		  has_blob(ct, "fam3", "index|c", "again", 5),
	      "a put in the family makes it again");
}

int main(void)
{
	struct cachetier_config cc = {0};
	struct backend *be;
	struct cachetier *ct;
	char src[600], cache[600], cmd[700];
	int err;

	if (!mkdtemp(tmpdir))
		FAIL("mkdtemp");
	snprintf(src, sizeof(src), "%s/src", tmpdir);
	snprintf(cache, sizeof(cache), "%s/cache", tmpdir);
	if (mkdir(src, 0755) < 0)
		FAIL("mkdir");
	make_version(&va, "version A", "a", "txt", 300, 1);
	make_version(&vb, "version B", "sample", "bin", 211, 600);
	err = backend_open(&be, src, NULL);
	if (err)
		FAIL("backend_open: %d", err);
	cc.cache_dir = cache;
	/* the cache tier applies no defaults: the mount's (fs/core/fs_opt.c) */
	cc.cache_size_bytes = 1ull << 30;
	cc.min_free_bytes = 1ull << 20;
	cc.chunk_bytes = 8u << 20;
	cc.readahead_max_bytes = 64ull << 20;
	cc.fill_threads = 3;
	err = cachetier_open(&ct, &cc, be);
	if (err)
		FAIL("cachetier_open: %d", err);
	test_contract(ct);
	test_changed(ct);
	test_replaced(ct);
	{
		struct cachetier *other;

		cc.source = "other-source";
		err = cachetier_open(&other, &cc, be);
		if (err)
			FAIL("cachetier_open of another source: %d", err);
		test_family(ct, other);
		cachetier_close(other);
	}
	cachetier_close(ct);
	backend_close(be);
	for (int i = 0; i < 2; i++) {
		struct version *v = i ? &vb : &va;

		shardidx_free(v->ref);
		free(v->blob);
		free(v->tar);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return check_summary("indexmap");
}
