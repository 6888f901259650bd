/*
 * fuzz_pack.c — libFuzzer harness for 'shardfs pack''s input handling
 * (fs/tools/fs_pack_plan.c): how the files of INPUT_DIR become member names,
 * sample keys, classes, a shuffled order and shards. No filesystem: the
 * input describes the tree.
 *
 * Input: 16 bytes of options (max_size, max_count, shuffle seed, flags),
 * then paths separated by '\n' (a trailing " =SIZE" decimal gives the
 * file's size). The paths are made into what pack's walk could produce
 * (fs_pack_i.h's precondition): components that are empty, ".", ".." or
 * hold NUL dropped, components cut to 255 bytes, duplicates and files that
 * are also a directory of another path dropped, then added in walk order
 * (component-wise strcmp, depth first).
 *
 * Checked (fs_pack_i.h's contract): member names are safe (non-empty, no
 * leading '/', no empty, "." or ".." component, components of at most 255
 * bytes) and unique together with the generated KEY.cls members; plain
 * trees keep their paths; class-folder members are KEY.EXT with a plain
 * key and extension; samples cover the files in order, group equal keys,
 * have unique keys; the class index matches the path; planning twice gives
 * the same names; the shuffle is a permutation; shards are consecutive,
 * non-empty, within max_count and max_size (or one sample).
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_pack_i.h"
#include "check.h"

#define MAX_FILES 512

struct in_file {
	char *path;
	uint64_t size;
};

static uint64_t get_le(const uint8_t *p, size_t n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* Walk order: component by component, each with strcmp. */
static int walk_cmp(const void *a, const void *b)
{
	const char *x = ((const struct in_file *)a)->path, *y = ((const struct in_file *)b)->path;

	for (;;) {
		size_t lx = strcspn(x, "/"), ly = strcspn(y, "/");
		size_t l = lx < ly ? lx : ly;
		int c = memcmp(x, y, l);

		if (c)
			return c;
		if (lx != ly) /* a shorter component sorts first, as strcmp says */
			return lx < ly ? -1 : 1;
		if (!x[lx] || !y[ly])
			return (x[lx] != 0) - (y[ly] != 0);
		x += lx + 1;
		y += ly + 1;
	}
}

/* One line of input into a walk-able path (or NULL). */
static char *clean_path(const char *s, size_t n, uint64_t *size)
{
	char *out = malloc(n + 1);
	size_t o = 0, i = 0;
	const char *eq = NULL;

	if (!out)
		return NULL;
	*size = 0;
	for (size_t k = n; k > 0; k--) {
		if (s[k - 1] == '=' && k >= 2 && s[k - 2] == ' ') {
			eq = s + k - 1;
			break;
		}
	}
	if (eq) {
		for (const char *q = eq + 1; q < s + n && *q >= '0' && *q <= '9'; q++)
			*size = *size * 10 % (1ull << 62) + (uint64_t)(*q - '0');
		n = (size_t)(eq - 1 - s);
	}
	while (i < n) {
		size_t j = i;

		while (j < n && s[j] != '/')
			j++;
		if (j - i == 0 || (j - i == 1 && s[i] == '.') ||
		    (j - i == 2 && s[i] == '.' && s[i + 1] == '.') || memchr(s + i, '\0', j - i)) {
			/* dropped */
		} else {
			size_t l = j - i > FS_PACK_NAME_MAX ? FS_PACK_NAME_MAX : j - i;

			if (o)
				out[o++] = '/';
			memcpy(out + o, s + i, l);
			o += l;
		}
		i = j + 1;
	}
	out[o] = '\0';
	if (!o) {
		free(out);
		return NULL;
	}
	return out;
}

static void check_name(const char *m)
{
	size_t len = strlen(m), i = 0;

	ENSURE(len > 0);
	ENSURE(m[0] != '/');
	while (i <= len) {
		size_t j = i;

		while (j < len && m[j] != '/')
			j++;
		ENSURE(j > i);
		ENSURE(j - i <= FS_PACK_NAME_MAX);
		ENSURE(!(j - i == 1 && m[i] == '.'));
		ENSURE(!(j - i == 2 && m[i] == '.' && m[i + 1] == '.'));
		i = j + 1;
	}
}

static int cmp_strp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void check_unique(char **v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_strp);
	for (size_t i = 1; i < n; i++)
		ENSURE(strcmp(v[i - 1], v[i]) != 0);
}

static void check_plan(const struct fs_pack_plan *p, size_t nin)
{
	char **names = calloc(2 * p->nfiles + 1, sizeof(*names));
	char **keys = calloc(p->nsamples + 1, sizeof(*keys));
	size_t nn = 0, at = 0;

	ENSURE(names && keys);
	ENSURE(p->nfiles == nin);
	ENSURE((p->nfiles == 0) == (p->nsamples == 0));
	for (size_t c = 1; c < p->nclasses; c++)
		ENSURE(strcmp(p->classes[c - 1], p->classes[c]) < 0);
	for (size_t i = 0; i < p->nfiles; i++) {
		const struct fs_pack_file *f = &p->files[i];
		size_t kl = fs_pack_keylen(f->member);

		check_name(f->member);
		names[nn++] = f->member;
		if (p->nclasses == 0) {
			ENSURE(f->cls == -1);
			ENSURE(strcmp(f->member, f->rel) == 0);
		} else {
			const char *ext = f->member + kl + 1;
			const char *cname;
			char *cm;

			ENSURE(f->cls >= 0 && (size_t)f->cls < p->nclasses);
			cname = p->classes[f->cls];
			ENSURE(strncmp(f->rel, cname, strlen(cname)) == 0 &&
			       f->rel[strlen(cname)] == '/');
			ENSURE(!strchr(f->member, '/'));
			ENSURE(kl > 0 && kl < strlen(f->member));
			ENSURE(!memchr(f->member, '.', kl));
			ENSURE(*ext && strcmp(ext, "cls") != 0);
			cm = malloc(kl + 5);
			ENSURE(cm);
			memcpy(cm, f->member, kl);
			memcpy(cm + kl, ".cls", 5);
			check_name(cm);
			names[nn++] = cm;
		}
	}
	/* samples cover the files in order; a sample is one key */
	for (size_t s = 0; s < p->nsamples; s++) {
		const struct fs_pack_sample *sm = &p->samples[s];

		ENSURE(sm->first == at && sm->n > 0);
		if (p->nclasses)
			ENSURE(sm->n == 1);
		for (size_t i = sm->first; i < sm->first + sm->n; i++) {
			const char *m = p->files[i].member;

			ENSURE(fs_pack_keylen(m) == strlen(sm->key));
			ENSURE(memcmp(m, sm->key, strlen(sm->key)) == 0);
			ENSURE(sm->bytes >= fs_pack_tar_bytes(m, p->files[i].size));
		}
		at += sm->n;
		keys[s] = sm->key;
	}
	ENSURE(at == p->nfiles);
	check_unique(names, nn);
	check_unique(keys, p->nsamples);
	for (size_t i = 0; i < nn; i++) {
		size_t l = strlen(names[i]);

		/* the generated KEY.cls strings are ours */
		if (p->nclasses && l > 4 && strcmp(names[i] + l - 4, ".cls") == 0)
			free(names[i]);
	}
	free(names);
	free(keys);
}

static void check_split(const struct fs_pack_plan *p, uint64_t max_size,
			unsigned long long max_count)
{
	ENSURE(p->nshards >= (p->nsamples ? 1u : 0u));
	ENSURE(p->starts[p->nshards] == p->nsamples);
	if (p->nshards)
		ENSURE(p->starts[0] == 0);
	for (size_t i = 0; i < p->nshards; i++) {
		size_t a = p->starts[i], b = p->starts[i + 1];
		uint64_t bytes = 0;

		ENSURE(a < b);
		if (max_count)
			ENSURE(b - a <= max_count);
		for (size_t s = a; s < b; s++)
			bytes = bytes > UINT64_MAX - p->samples[s].bytes
				    ? UINT64_MAX
				    : bytes + p->samples[s].bytes;
		if (b - a > 1)
			ENSURE(bytes <= max_size && max_size - bytes >= 1024);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in_file in[MAX_FILES];
	struct fs_pack_plan p, q;
	uint64_t max_size, seed;
	unsigned long long max_count;
	size_t nin = 0, pos = 16, nuniq = 0;
	char **before;
	int shuffle;

	if (size < 16)
		return 0;
	max_size = get_le(data, 4) * 512 + 1; /* a few KiB to 2 TiB */
	max_count = get_le(data + 4, 1);      /* 0: no limit */
	seed = get_le(data + 5, 8);
	shuffle = data[13] & 1;
	while (pos < size && nin < MAX_FILES) {
		const uint8_t *nl = memchr(data + pos, '\n', size - pos);
		size_t n = nl ? (size_t)(nl - data) - pos : size - pos;
		char *path = clean_path((const char *)data + pos, n, &in[nin].size);

		if (path)
			in[nin++].path = path;
		pos += n + 1;
	}
	qsort(in, nin, sizeof(*in), walk_cmp);
	/* duplicates, and a file that is also a directory of the next path */
	for (size_t i = 0; i < nin; i++) {
		size_t l = strlen(in[i].path);

		if (i + 1 < nin &&
		    (strcmp(in[i].path, in[i + 1].path) == 0 ||
		     (strncmp(in[i].path, in[i + 1].path, l) == 0 && in[i + 1].path[l] == '/'))) {
			free(in[i].path);
			continue;
		}
		in[nuniq++] = in[i];
	}
	nin = nuniq;

	memset(&p, 0, sizeof(p));
	memset(&q, 0, sizeof(q));
	for (size_t i = 0; i < nin; i++) {
		ENSURE(fs_pack_plan_add(&p, in[i].path, in[i].size, 0, 0644) == 0);
		ENSURE(fs_pack_plan_add(&q, in[i].path, in[i].size, 0, 0644) == 0);
	}
	ENSURE(fs_pack_plan_members(&p) == 0);
	ENSURE(fs_pack_plan_members(&q) == 0);
	check_plan(&p, nin);
	/* deterministic */
	ENSURE(p.nsamples == q.nsamples && p.nfiles == q.nfiles);
	for (size_t i = 0; i < p.nfiles; i++)
		ENSURE(strcmp(p.files[i].member, q.files[i].member) == 0);

	/* the shuffle is a permutation of the samples */
	before = calloc(p.nsamples + 1, sizeof(*before));
	ENSURE(before);
	for (size_t s = 0; s < p.nsamples; s++)
		before[s] = p.samples[s].key;
	if (shuffle)
		fs_pack_plan_shuffle(&p, seed);
	{
		char **after = calloc(p.nsamples + 1, sizeof(*after));

		ENSURE(after);
		for (size_t s = 0; s < p.nsamples; s++)
			after[s] = p.samples[s].key;
		qsort(before, p.nsamples, sizeof(*before), cmp_strp);
		qsort(after, p.nsamples, sizeof(*after), cmp_strp);
		for (size_t s = 0; s < p.nsamples; s++)
			ENSURE(before[s] == after[s]);
		free(after);
	}
	free(before);
	ENSURE(fs_pack_plan_split(&p, max_size, max_count) == 0);
	check_split(&p, max_size, max_count);

	fs_pack_plan_free(&p);
	fs_pack_plan_free(&q);
	for (size_t i = 0; i < nin; i++)
		free(in[i].path);
	return 0;
}
