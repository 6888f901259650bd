/*
 * fs_pack_plan.c — the pure part of 'shardfs pack': from the list
 * of files of INPUT_DIR to member names, samples and shards. No I/O, so
 * tests/fuzz/fuzz_pack.c runs it on arbitrary file lists; the contract is
 * in fs_pack_i.h, the rules are described in fs_pack.c's header.
 *
 * Class-folder names: <class>_<path inside the class without its
 * extension>, '/' and '.' made '_', then '.' and the extension. The
 * extension is "bin" when the file has none, an empty one, one over
 * FS_PACK_EXT_MAX bytes, or "cls" (that name belongs to the generated class
 * member). The key is cut (at a UTF-8 character boundary) so that
 * KEY_<n>.EXT and KEY.cls fit in one 255-byte name component. Files whose
 * keys agree get _<n> (the smallest n that is free) in sorted order.
 *
 * Order: members are sorted by sample key, then by name, so the files of
 * one sample are always adjacent (plain strcmp order is not enough: "a.p/q"
 * sorts between "a.jpg" and "a.z", which share the key "a").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_pack_i.h"

/* "_" and the longest unsigned: the room a _<n> suffix needs. */
#define DEDUP_SUFFIX_MAX 11

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

int fs_pack_plan_add(struct fs_pack_plan *p, const char *rel, uint64_t size, int64_t mtime,
		     uint32_t mode)
{
	struct fs_pack_file *f;

	if (p->nfiles == p->capfiles) {
		size_t cap = p->capfiles ? p->capfiles * 2 : 256;
		struct fs_pack_file *n = realloc(p->files, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		p->files = n;
		p->capfiles = cap;
	}
	f = &p->files[p->nfiles];
	memset(f, 0, sizeof(*f));
	f->rel = strdup(rel);
	if (!f->rel)
		return -ENOMEM;
	f->size = size;
	f->mtime = mtime;
	f->mode = mode;
	f->cls = -1;
	p->nfiles++;
	return 0;
}

/* Class-folder tree: no files at the top, at least one class directory.
 * Returns 1 (classes set), 0 (not one) or -ENOMEM. */
static int detect_classes(struct fs_pack_plan *p)
{
	size_t cap = 0;

	if (p->nfiles == 0)
		return 0;
	for (size_t i = 0; i < p->nfiles; i++)
		if (!strchr(p->files[i].rel, '/'))
			return 0;
	/* files come in walk order, so each class's files are contiguous */
	for (size_t i = 0; i < p->nfiles; i++) {
		const char *rel = p->files[i].rel;
		size_t cl = (size_t)(strchr(rel, '/') - rel);

		if (p->nclasses == 0 || strncmp(p->classes[p->nclasses - 1], rel, cl) != 0 ||
		    p->classes[p->nclasses - 1][cl] != '\0') {
			if (p->nclasses == cap) {
				char **nc =
				    realloc(p->classes, (cap = cap ? cap * 2 : 16) * sizeof(*nc));

				if (!nc)
					return -ENOMEM;
				p->classes = nc;
			}
			p->classes[p->nclasses] = strndup(rel, cl);
			if (!p->classes[p->nclasses])
				return -ENOMEM;
			p->nclasses++;
		}
		p->files[i].cls = (int)p->nclasses - 1;
	}
	/* walk sorts each directory's names with strcmp: byte order of UTF-8
	 * is code point order, Python's sorted() order, so class i here is
	 * torchvision's class i */
	return 1;
}

uint64_t fs_pack_tar_bytes(const char *name, uint64_t size)
{
	size_t len = strlen(name);
	int pax = len > 99;
	uint64_t hdr;

	for (const unsigned char *c = (const unsigned char *)name; *c && !pax; c++)
		pax = *c >= 0x80;
	hdr = 512 + (pax ? 1024 + ((uint64_t)len + 511) / 512 * 512 : 0);
	if (size > UINT64_MAX - 511)
		return UINT64_MAX;
	return sat_add(hdr, (size + 511) / 512 * 512);
}

size_t fs_pack_keylen(const char *m)
{
	const char *base = strrchr(m, '/'), *dot;

	base = base ? base + 1 : m;
	dot = strchr(base, '.');
	return dot ? (size_t)(dot - m) : strlen(m);
}

/* Sample key first, then the whole name: one sample's files are adjacent. */
static int cmp_member(const void *a, const void *b)
{
	const char *x = ((const struct fs_pack_file *)a)->member;
	const char *y = ((const struct fs_pack_file *)b)->member;
	size_t kx = fs_pack_keylen(x), ky = fs_pack_keylen(y);
	int c = memcmp(x, y, kx < ky ? kx : ky);

	if (c)
		return c;
	if (kx != ky)
		return kx < ky ? -1 : 1;
	return strcmp(x, y);
}

/* The longest prefix of s[0..n) that ends at a UTF-8 character boundary
 * (bytes that are not UTF-8 are cut anywhere). */
static size_t utf8_cut(const char *s, size_t n, size_t max)
{
	size_t cut = max;

	if (n <= max)
		return n;
	/* at most 3 steps back: a UTF-8 character has at most 3 continuation bytes */
	while (cut > 0 && max - cut < 3 && ((unsigned char)s[cut] & 0xc0) == 0x80 &&
	       ((unsigned char)s[cut - 1] & 0x80))
		cut--;
	return cut > 0 ? cut : max;
}

/* Member name of file f of a class-folder tree: a malloc'd string. */
static char *class_member(const struct fs_pack_plan *p, const struct fs_pack_file *f)
{
	const char *in = strchr(f->rel, '/') + 1, *dot = strrchr(in, '.');
	const char *slash = strrchr(in, '/');
	size_t inlen = strlen(in);
	size_t stem = dot && (!slash || dot > slash) && dot != in ? (size_t)(dot - in) : inlen;
	const char *ext = stem < inlen ? in + stem + 1 : "";
	const char *cname = p->classes[f->cls];
	size_t extlen = strlen(ext), keymax, cl, kl, n;
	char *m;

	if (extlen == 0 || extlen > FS_PACK_EXT_MAX || strcmp(ext, "cls") == 0) {
		ext = "bin";
		extlen = 3;
	}
	/* room for _<n>, '.', and the longer of EXT and "cls" */
	keymax = FS_PACK_NAME_MAX - DEDUP_SUFFIX_MAX - 1 - (extlen > 3 ? extlen : 3);
	n = strlen(cname) + 1 + stem + 1 + extlen + 1;
	m = malloc(n);
	if (!m)
		return NULL;
	cl = strlen(cname);
	memcpy(m, cname, cl);
	m[cl] = '_';
	memcpy(m + cl + 1, in, stem);
	kl = utf8_cut(m, cl + 1 + stem, keymax);
	for (size_t i = 0; i < kl; i++)
		if (m[i] == '/' || m[i] == '.')
			m[i] = '_';
	m[kl] = '.';
	memcpy(m + kl + 1, ext, extlen + 1);
	return m;
}

/* Is some member other than files[skip] in sample key k[0..kl)? */
static int key_taken(const struct fs_pack_plan *p, size_t skip, const char *k, size_t kl)
{
	for (size_t j = 0; j < p->nfiles; j++) {
		const char *m = p->files[j].member;

		if (j != skip && fs_pack_keylen(m) == kl && memcmp(m, k, kl) == 0)
			return 1;
	}
	return 0;
}

int fs_pack_plan_members(struct fs_pack_plan *p)
{
	unsigned char *dup = NULL;
	int err = detect_classes(p);

	if (err < 0)
		return err;
	if (p->nfiles == 0)
		return 0; /* (qsort of a NULL array is undefined, even of 0 elements) */
	err = 0;
	for (size_t i = 0; i < p->nfiles; i++) {
		struct fs_pack_file *f = &p->files[i];

		f->member = f->cls >= 0 ? class_member(p, f) : strdup(f->rel);
		if (!f->member)
			return -ENOMEM;
	}
	if (p->nfiles > 1) /* no files: files may be NULL */
		qsort(p->files, p->nfiles, sizeof(*p->files), cmp_member);
	/* class-folder keys must be unique: every file after the first of a
	 * run of equal keys gets _<n>. The runs are found before any renaming
	 * (a renamed neighbour must not hide a third equal key). */
	dup = calloc(p->nfiles ? p->nfiles : 1, 1);
	if (!dup)
		return -ENOMEM;
	for (size_t i = 1; i < p->nfiles; i++) {
		const char *a = p->files[i - 1].member, *b = p->files[i].member;
		size_t kl = fs_pack_keylen(b);

		dup[i] = p->files[i].cls >= 0 && kl == fs_pack_keylen(a) && memcmp(a, b, kl) == 0;
	}
	for (size_t i = 1; i < p->nfiles && !err; i++) {
		struct fs_pack_file *f = &p->files[i];
		size_t kl = fs_pack_keylen(f->member);

		if (!dup[i])
			continue;
		for (unsigned k = 1;; k++) {
			size_t n = strlen(f->member) + DEDUP_SUFFIX_MAX + 1;
			char *m = malloc(n);

			if (!m) {
				err = -ENOMEM;
				break;
			}
			snprintf(m, n, "%.*s_%u%s", (int)kl, f->member, k, f->member + kl);
			if (!key_taken(p, i, m, fs_pack_keylen(m))) {
				free(f->member);
				f->member = m;
				break;
			}
			free(m);
		}
	}
	free(dup);
	if (err)
		return err;
	if (p->nfiles > 1) /* no files: files may be NULL */
		qsort(p->files, p->nfiles, sizeof(*p->files), cmp_member);
	/* samples: runs of equal keys */
	p->samples = calloc(p->nfiles ? p->nfiles : 1, sizeof(*p->samples));
	if (!p->samples)
		return -ENOMEM;
	for (size_t i = 0; i < p->nfiles;) {
		size_t kl = fs_pack_keylen(p->files[i].member), j = i;
		struct fs_pack_sample *s = &p->samples[p->nsamples++];

		s->key = strndup(p->files[i].member, kl);
		if (!s->key)
			return -ENOMEM;
		s->first = i;
		for (; j < p->nfiles && fs_pack_keylen(p->files[j].member) == kl &&
		       strncmp(p->files[j].member, p->files[i].member, kl) == 0;
		     j++) {
			s->bytes = sat_add(s->bytes,
					   fs_pack_tar_bytes(p->files[j].member, p->files[j].size));
			if (p->files[j].cls >= 0)
				s->bytes =
				    sat_add(s->bytes, fs_pack_tar_bytes(p->files[j].member, 16));
		}
		s->n = j - i;
		i = j;
	}
	return 0;
}

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void fs_pack_plan_shuffle(struct fs_pack_plan *p, uint64_t seed)
{
	uint64_t st = seed;

	for (size_t i = p->nsamples; i > 1; i--) {
		size_t j = (size_t)(splitmix64(&st) % i);
		struct fs_pack_sample t = p->samples[i - 1];

		p->samples[i - 1] = p->samples[j];
		p->samples[j] = t;
	}
}

int fs_pack_plan_split(struct fs_pack_plan *p, uint64_t max_size, unsigned long long max_count)
{
	uint64_t count = 0, bytes = 0;

	free(p->starts);
	p->nshards = 0;
	p->starts = calloc(p->nsamples + 1, sizeof(*p->starts));
	if (!p->starts)
		return -ENOMEM;
	/* 1024: the end-of-archive marker */
	for (size_t s = 0; s < p->nsamples; s++) {
		if (s == 0 || count == max_count ||
		    (count && sat_add(sat_add(bytes, p->samples[s].bytes), 1024) > max_size)) {
			p->starts[p->nshards++] = s;
			count = 0;
			bytes = 0;
		}
		count++;
		bytes = sat_add(bytes, p->samples[s].bytes);
	}
	p->starts[p->nshards] = p->nsamples;
	return 0;
}

void fs_pack_plan_free(struct fs_pack_plan *p)
{
	for (size_t i = 0; i < p->nfiles; i++) {
		free(p->files[i].rel);
		free(p->files[i].member);
	}
	free(p->files);
	for (size_t i = 0; i < p->nclasses; i++)
		free(p->classes[i]);
	free(p->classes);
	for (size_t i = 0; i < p->nsamples; i++)
		free(p->samples[i].key);
	free(p->samples);
	free(p->starts);
	memset(p, 0, sizeof(*p));
}
