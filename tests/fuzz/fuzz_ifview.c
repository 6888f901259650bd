/*
 * fuzz_ifview.c — libFuzzer harness for fs__if_open (fs/core/fs_if_blob.c),
 * the validation of a saved imagefolder view (a cache file that may be
 * corrupt), version 4.
 *
 * Each input is opened twice: as it is (the checksum must reject nearly
 * every mutation), and with its length padded to 8 and its checksum fixed
 * up, so that the structural validation behind the checksum is what gets
 * fuzzed; both are opened with the fingerprint, shard count and
 * --class-from the header itself names, so they are not stopped at
 * -ESTALE. Whatever opens must keep fs_if_blob.c's promises, which the
 * lookups (fs_if_view.c) rely on without checking again: every class name
 * inside the names and NUL-terminated, classes sorted and contiguous over
 * the files, every file's shard below the shard count and its entry (the
 * record's low 30 bits; its kind of name above) below that shard's count,
 * the counts and the shards' index checksums inside the blob, every file's
 * name decodable (fs_if_name_at from its
 * block's head, and fs_if_name_next from the one before: the same bytes),
 * not empty, without '/', ascending strictly within its class, and found
 * again by fs_if_file_lookup (the same file). fs_if_blob.c is included
 * whole (its checksum is static); what it calls to write a view is never
 * reached here.
 */
#include "fs_if_blob.c"
#include "check.h"

/* The writers' calls (never made by fs__if_open). */
int cachetier_meta_pwrite(struct cachetier_meta_writer *w, const void *buf, size_t len,
			  uint64_t off)
{
	(void)w, (void)buf, (void)len, (void)off;
	abort();
}

int cachetier_meta_pread(struct cachetier_meta_writer *w, void *buf, size_t len, uint64_t off)
{
	(void)w, (void)buf, (void)len, (void)off;
	abort();
}

int fs_sort_iter_open(struct fs_sort *s, struct fs_sort_iter **it)
{
	(void)s, (void)it;
	abort();
}

int fs_sort_next(struct fs_sort_iter *it, const void **rec, size_t *len)
{
	(void)it, (void)rec, (void)len;
	abort();
}

void fs_sort_iter_close(struct fs_sort_iter *it)
{
	(void)it;
}

void fs_log(enum fs_log_level level, const char *fmt, ...)
{
	(void)level, (void)fmt;
}

int fs__if_prev_keep(struct if_prev *pv, const void *rec, size_t len)
{
	(void)pv, (void)rec, (void)len;
	abort();
}

/* What an opened view promises (see the header). */
static void walk(const struct fs_ifview *v, const unsigned char *b, size_t len)
{
	const char *end = (const char *)b + len, *prev = NULL;
	char name[SHARDIDX_NAME_MAX + 1], seq[SHARDIDX_NAME_MAX + 1], before[SHARDIDX_NAME_MAX + 1];
	uint32_t next = 0;

	ENSURE(v->strtab_len > 0 && v->strtab + v->strtab_len <= end &&
	       v->strtab[v->strtab_len - 1] == '\0');
	ENSURE(v->names + v->names_len <= b + len && v->blocks + 8 * (size_t)v->nblocks <= b + len);
	ENSURE(v->counts + 4 * (size_t)v->nshards <= v->sums &&
	       v->sums + 8 * (size_t)v->nshards <= b + len);
	for (uint32_t c = 0; c < v->nclasses; c++) {
		uint32_t first, n;
		int64_t mtime;
		const char *cname = fs_if_class(v, c, &first, &n, &mtime);
		uint64_t pos = 0;
		int sl = 0;

		ENSURE(cname >= v->strtab && cname < v->strtab + v->strtab_len);
		ENSURE(first == next && n <= v->nfiles - first);
		ENSURE(!prev || strcmp(prev, cname) < 0);
		for (uint32_t j = 0; j < n; j++) {
			uint32_t shard, entry, s2, e2;
			uint64_t after;
			int nl = fs_if_name_at(v, c, j, name, &after);

			fs_if_file(v, first + j, &shard, &entry);
			ENSURE(entry <= IFV_ENTRY_MASK &&
			       fs_if_file_kind(v, first + j) <= IFV_NAME_LINK);
			ENSURE(shard < v->nshards);
			ENSURE((const char *)v->counts + 4 * (size_t)(shard + 1) <= end);
			ENSURE(entry < disk_le32_get(v->counts + 4 * (size_t)shard));
			ENSURE(nl > 0 && (size_t)nl == strlen(name) && !strchr(name, '/'));
			if (j == 0) {
				memcpy(seq, name, (size_t)nl + 1);
			} else {
				ENSURE(fs_if_name_next(v, &pos, seq, sl) == nl);
				ENSURE(strcmp(seq, name) == 0 && strcmp(before, name) < 0);
			}
			pos = after;
			sl = nl;
			memcpy(before, name, (size_t)nl + 1);
			ENSURE(fs_if_file_lookup(v, c, name, (size_t)nl, &s2, &e2) ==
			       (int64_t)(first + j));
			ENSURE(s2 == shard && e2 == entry);
		}
		prev = cname;
		next += n;
	}
	ENSURE(next == v->nfiles);
}

static void try_open(const uint8_t *data, size_t size)
{
	unsigned char *buf = malloc(size ? size : 1); /* exact size: overreads are caught */
	struct ifv_meta want = {0}, got;
	struct fs_ifview v;
	int r;

	ENSURE(buf);
	if (size)
		memcpy(buf, data, size);
	if (size >= IFV_HDR) {
		want.fp = disk_le64_get(buf + 24);
		want.nshards = disk_le32_get(buf + 36);
		want.class_from = disk_le32_get(buf + 72);
	}
	memset(&v, 0, sizeof(v));
	r = fs__if_open(&v, buf, size, &want, &got);
	ENSURE(r == 0 || r == -EBADMSG || r == -EPROTO || r == -ESTALE);
	if (r == 0)
		walk(&v, buf, size);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t padded = (size + 7) & ~(size_t)7;
	uint8_t *fixed;

	try_open(data, size);
	if (padded < IFV_HDR || padded > (64u << 20))
		return 0;
	fixed = calloc(1, padded);
	ENSURE(fixed);
	memcpy(fixed, data, size);
	memcpy(fixed, IFV_MAGIC, 8);
	disk_le32_put(fixed + 8, IFV_VERSION);
	disk_le64_put(fixed + 16, ifv_sum(fixed, padded));
	try_open(fixed, padded);
	free(fixed);
	return 0;
}
