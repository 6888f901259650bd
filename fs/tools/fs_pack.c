/*
 * fs_pack.c — 'shardfs pack [OPTIONS] INPUT_DIR OUTPUT_PREFIX':
 * a directory tree becomes WebDataset shards PREFIX-000000.tar, ... with a
 * sidecar index NAME.tar.idx beside each.
 *
 * Samples:
 *  - a class-folder tree (torchvision ImageFolder layout: INPUT_DIR holds
 *    only directories, one per class, and the files are below them): every
 *    file is a sample <key>.<ext> plus <key>.cls holding the class index in
 *    sorted class-name order (torchvision's rule). The key is
 *    <class>_<path inside the class without the extension>, with '/' and
 *    '.' made '_' (a WebDataset key ends at its first '.'), and _<n> added
 *    when two files would share a key; the extension is "bin" when the file
 *    has none (or "cls", which names the class member); keys are cut so a
 *    member name fits 255 bytes.
 *  - any other tree keeps its relative paths; files whose paths agree up
 *    to the first '.' of the base name form one sample.
 * Samples are in sorted key order, or a seeded shuffle of it (--shuffle:
 * splitmix64 + Fisher-Yates, so one seed gives one order everywhere).
 *
 * Determinism: the same input and options give the same bytes. Members
 * carry the file's mtime (seconds) and permission bits; uid, gid, uname
 * and gname are 0 and empty; pax extended headers only where ustar cannot
 * hold a name; gzip without a timestamp.
 *
 * Sidecars: the uncompressed tar stream passes through a shardidx builder
 * as it is written, so the index describes exactly the written bytes; it is
 * saved with fs_sidecar_ident (codec, size, tail checksum, mtime, inode).
 *
 * The naming, grouping, shuffling and splitting above is fs_pack_plan.c
 * (pure, fuzzed by tests/fuzz/fuzz_pack.c, contract in fs_pack_i.h); this
 * file walks INPUT_DIR and writes what the plan says.
 *
 * Symbolic links are never followed (a link to /etc/passwd must not
 * become a member holding its contents): each is skipped with a warning
 * naming it and counted in the summary; files are opened O_NOFOLLOW, so a
 * file replaced by a link during the pack fails it. INPUT_DIR itself may
 * be a link. The directory of OUTPUT_PREFIX must exist (exit 2 when not):
 * pack creates no directories, so a typo in it is not a new tree. It is
 * opened once, and every file is made relative to that fd under a temp name
 * created O_EXCL and renamed into place (the sidecar by fs_sidecar_write_at,
 * index --sidecar's writer): a link planted at any name pack writes is never
 * followed, and the directory swapped for a link changes nothing outside.
 *
 * Non-goals: hardlinks, symlinks and empty directories are not packed
 * (samples are regular files); no multi-process packing.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disk.h"
#include "fs_core.h"
#include "fs_core_opt.h"
#include "fs_core_sidecar.h"
#include "shardidx.h"
#include "fs_tools.h"
#include "fs_pack_i.h"

struct pk {
	const char *in, *prefix;
	const char *base; /* prefix's last component */
	int outfd;	  /* the directory of prefix, opened once */
	uint64_t max_size;
	uint64_t max_count;	   /* 0: no limit */
	int shuffle, force, codec; /* codec: enum fs_codec */
	uint64_t seed;
	char *compress; /* --compress, turned into codec */
	struct fs_pack_plan plan;
	int tty;
	size_t symlinks; /* skipped by the walk */
};

#define PK(field) offsetof(struct pk, field)

static const struct fs_opt pack_opts[] = {
    /* a shard of about 1 GB streams for seconds at a store's rate and
     * keeps the number of objects of a large dataset in the thousands */
    {"max-size", 0, FS_OPT_SIZE, PK(max_size), 0, "1G", 1, UINT64_MAX, "SIZE",
     "most bytes per shard (unless one sample is larger)"},
    {"max-count", 0, FS_OPT_U64, PK(max_count), 0, NULL, 1, UINT64_MAX, "N",
     "most samples per shard (default: no limit)"},
    {"shuffle", 0, FS_OPT_U64, PK(seed), PK(shuffle) + 1, NULL, 0, UINT64_MAX, "SEED",
     "shuffle the samples with this seed (default: sorted order)"},
    {"compress", 0, FS_OPT_STR, PK(compress), 0, NULL, 0, 0, "zstd|gzip",
     "compress the shards (.tar.zst / .tar.gz; default: plain .tar)"},
    {"force", 0, FS_OPT_FLAG, PK(force), 0, NULL, 0, 0, NULL, "overwrite existing shards"},
    {NULL, 0, 0, 0, 0, NULL, 0, 0, NULL, NULL},
};

static const struct fs_opt *const pack_groups[] = {pack_opts, NULL};

const struct fs_opt_cmd fs_pack_cmd = {
    "pack",
    "[OPTIONS] INPUT_DIR OUTPUT_PREFIX",
    "Make WebDataset shards OUTPUT_PREFIX-000000.tar, ... from a directory tree,\n"
    "each with a sidecar index NAME.tar.idx. A class-folder tree (INPUT_DIR/CLASS/FILE,\n"
    "as torchvision's ImageFolder reads it) becomes samples KEY.EXT + KEY.cls (the class\n"
    "index in sorted class-name order); any other tree keeps its paths.\n",
    pack_groups,
    2,
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Walk dir (relative path rel, "" at the top) in sorted order. */
static int walk(struct pk *p, const char *rel)
{
	char path[PATH_MAX];
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	int err = 0;

	snprintf(path, sizeof(path), "%s%s%s", p->in, *rel ? "/" : "", rel);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			char **nn = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof(*nn));

			if (!nn) {
				err = -ENOMEM;
				break;
			}
			names = nn;
		}
		names[n] = strdup(de->d_name);
		if (!names[n]) {
			err = -ENOMEM;
			break;
		}
		n++;
	}
	closedir(d);
	if (!err && n > 1) /* an empty directory's names may be NULL */
		qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n && !err; i++) {
		char sub[PATH_MAX], full[PATH_MAX];
		struct stat st;
		int m = snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", names[i]);

		if (m < 0 || (size_t)m >= sizeof(sub) ||
		    snprintf(full, sizeof(full), "%s/%s", p->in, sub) >= (int)sizeof(full)) {
			err = -ENAMETOOLONG;
			break;
		}
		if (lstat(full, &st) < 0) {
			err = -errno;
			fprintf(stderr, "shardfs: pack: %s: %s\n", FS_Q(full), strerror(-err));
			break;
		}
		if (S_ISLNK(st.st_mode)) {
			p->symlinks++;
			fprintf(stderr,
				"shardfs: pack: %s: a symbolic link, skipped (links are not "
				"followed)\n",
				FS_Q(full));
		} else if (S_ISDIR(st.st_mode))
			err = walk(p, sub);
		else if (S_ISREG(st.st_mode))
			err = fs_pack_plan_add(&p->plan, sub, (uint64_t)st.st_size,
					       (int64_t)st.st_mtim.tv_sec, st.st_mode & 0777);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return err;
}

/* ---- writing one shard ---------------------------------------------------- */

struct pk_out {
	int fd;
	uint64_t pos;
	struct shardidx_builder *b;
	int b_done; /* the builder saw the end of the archive, or failed */
	int err;
};

static la_ssize_t out_write(struct archive *a, void *arg, const void *buf, size_t len)
{
	struct pk_out *o = arg;
	uint64_t want;
	size_t done = 0;

	(void)a;
	if (!o->b_done && (want = shardidx_builder_want(o->b)) < o->pos + len && want >= o->pos) {
		int r = shardidx_builder_feed(o->b, (const char *)buf + (want - o->pos),
					      len - (size_t)(want - o->pos));

		if (r != 0)
			o->b_done = 1;
		if (r < 0)
			o->err = r;
	}
	while (done < len) {
		ssize_t w = write(o->fd, (const char *)buf + done, len - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			o->err = w < 0 ? -errno : -EIO;
			archive_set_error(a, EIO, "write failed");
			return -1;
		}
		done += (size_t)w;
	}
	o->pos += len;
	return (la_ssize_t)len;
}

static int add_member(struct archive *a, const char *name, uint64_t size, int64_t mtime,
		      uint32_t mode, int fd, const void *mem)
{
	struct archive_entry *e = archive_entry_new();
	char buf[65536];
	uint64_t left = size;
	int err = 0, h;

	if (!e)
		return -ENOMEM;
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, (mode_t)mode);
	archive_entry_set_size(e, (la_int64_t)size);
	archive_entry_set_mtime(e, (time_t)mtime, 0);
	archive_entry_set_uid(e, 0);
	archive_entry_set_gid(e, 0);
	/* ARCHIVE_WARN: a name that is not UTF-8 cannot be translated for the
	 * pax header; libarchive writes it as its bytes (hdrcharset=BINARY),
	 * as a shard made by any tar holds it */
	h = archive_write_header(a, e);
	if (h != ARCHIVE_OK && h != ARCHIVE_WARN) {
		fprintf(stderr, "shardfs: pack: member %s: %s\n", FS_Q(name),
			archive_error_string(a));
		err = -EIO;
	}
	while (!err && left) {
		size_t n = left < sizeof(buf) ? (size_t)left : sizeof(buf);
		const void *src = mem;

		if (!mem) {
			ssize_t r = read(fd, buf, n);

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				err = r < 0 ? -errno : -EIO; /* the file shrank under us */
				break;
			}
			n = (size_t)r;
			src = buf;
		}
		if (archive_write_data(a, src, n) != (la_ssize_t)n)
			err = -EIO;
		left -= n;
		if (mem)
			mem = (const char *)mem + n;
	}
	archive_entry_free(e);
	return err;
}

/* Compress the tar file open at src (read from its start) into the file
 * open at dst with libarchive's raw format. */
static int compress_file(struct pk *p, int src, int dst, const char *name)
{
	struct archive *a = archive_write_new();
	struct archive_entry *e = archive_entry_new();
	char buf[65536];
	off_t off = 0;
	int err = 0;
	struct stat st;

	if (!a || !e || fstat(src, &st) < 0) {
		err = a && e ? -errno : -ENOMEM;
		goto out;
	}
	archive_write_set_format_raw(a);
	if (p->codec == FS_CODEC_ZSTD) {
		archive_write_add_filter_zstd(a);
	} else {
		archive_write_add_filter_gzip(a);
		archive_write_set_filter_option(a, "gzip", "timestamp", NULL); /* no mtime */
	}
	archive_write_set_bytes_in_last_block(a, 1);
	if (archive_write_open_fd(a, dst) != ARCHIVE_OK) {
		fprintf(stderr, "shardfs: pack: %s: %s\n", FS_Q(name), archive_error_string(a));
		err = -EIO;
		goto out;
	}
	archive_entry_set_pathname(e, "data");
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_size(e, st.st_size);
	if (archive_write_header(a, e) != ARCHIVE_OK)
		err = -EIO;
	for (;;) {
		ssize_t n = err ? 0 : pread(src, buf, sizeof(buf), off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			err = n < 0 ? -errno : err;
			break;
		}
		off += n;
		if (archive_write_data(a, buf, (size_t)n) != n)
			err = -EIO;
	}
	if (archive_write_close(a) != ARCHIVE_OK && !err)
		err = -EIO;
out:
	archive_entry_free(e);
	archive_write_free(a);
	return err;
}

static const char *shard_ext(const struct pk *p)
{
	return p->codec == FS_CODEC_ZSTD   ? ".tar.zst"
	       : p->codec == FS_CODEC_GZIP ? ".tar.gz"
					   : ".tar";
}

/* The files of sample sm into the archive a, each followed by its class
 * member (KEY.cls) when it has a class: 0, or the first error (a file that
 * cannot be opened is said on stderr). */
static int add_sample(const struct pk *p, struct archive *a, const struct fs_pack_sample *sm)
{
	int err = 0;

	for (size_t i = sm->first; i < sm->first + sm->n && !err; i++) {
		const struct fs_pack_file *f = &p->plan.files[i];
		char full[PATH_MAX];
		int fd;

		snprintf(full, sizeof(full), "%s/%s", p->in, f->rel);
		fd = open(full, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0) {
			err = -errno;
			fprintf(stderr, "shardfs: pack: %s: %s\n", FS_Q(full), strerror(errno));
			break;
		}
		err = add_member(a, f->member, f->size, f->mtime, f->mode, fd, NULL);
		close(fd);
		if (!err && f->cls >= 0) {
			char name[PATH_MAX], num[16];
			size_t kl = fs_pack_keylen(f->member);
			int nl = snprintf(num, sizeof(num), "%d", f->cls);

			snprintf(name, sizeof(name), "%.*s.cls", (int)kl, f->member);
			err = add_member(a, name, (uint64_t)nl, f->mtime, 0644, -1, num);
		}
	}
	return err;
}

/* Shard no's path, PREFIX-NNNNNN and the codec's extension, made in path
 * (for messages); returns its name at p->outfd, the same text after
 * PREFIX's directory (p->base), or NULL when that name is longer than
 * NAME_MAX or the path than PATH_MAX. */
static const char *shard_path(const struct pk *p, size_t no, char path[PATH_MAX])
{
	int n = snprintf(path, PATH_MAX, "%s-%06zu%s", p->prefix, no, shard_ext(p));
	const char *name = path + (p->base - p->prefix);

	if (n < 0 || n >= PATH_MAX || strlen(name) > NAME_MAX)
		return NULL;
	return name;
}

/* Shard no (samples first .. first + n) written as NAME (the prefix's base
 * name, the number, the codec's extension) in the output directory open at
 * p->outfd, with its sidecar NAME.idx: every file is made there under a
 * temp name created O_EXCL (disk_tmp_open: a link planted at any name is
 * never followed) and renamed into place relative to that directory, so a
 * directory swapped for a link meanwhile changes nothing outside it. */
static int write_shard(struct pk *p, unsigned no, size_t first, size_t n)
{
	char path[PATH_MAX], rawname[NAME_MAX + 8], idx[NAME_MAX + 8];
	char tmp[PATH_MAX], raw[PATH_MAX];
	const char *name = shard_path(p, no, path);
	struct pk_out o = {.fd = -1};
	struct archive *a = archive_write_new();
	struct shardidx *ix = NULL;
	struct fs_sidecar_id sid;
	int fd = -1, rawfd = -1, err = 0;

	if (!name) {
		err = -ENAMETOOLONG;
		goto out;
	}
	snprintf(rawname, sizeof(rawname), "%s.raw", name);
	snprintf(idx, sizeof(idx), "%s.idx", name);
	o.b = shardidx_builder_new();
	fd = disk_tmp_open(p->outfd, name, O_RDWR, 0644, tmp, sizeof(tmp));
	if (fd >= 0 && p->codec != FS_CODEC_RAW) {
		rawfd = disk_tmp_open(p->outfd, rawname, O_RDWR, 0644, raw, sizeof(raw));
		if (rawfd < 0)
			err = rawfd;
	}
	if (!a || !o.b || fd < 0 || err) {
		err = fd < 0 ? fd : err ? err : -ENOMEM;
		goto out;
	}
	o.fd = p->codec == FS_CODEC_RAW ? fd : rawfd;
	archive_write_set_format_pax_restricted(a);
	archive_write_set_bytes_per_block(a, 10240);
	/* end after the end-of-archive marker: no padding to a whole record, so
	 * --max-size holds exactly (readers do not need the padding) */
	archive_write_set_bytes_in_last_block(a, 1);
	if (archive_write_open2(a, &o, NULL, out_write, NULL, NULL) != ARCHIVE_OK) {
		err = -EIO;
		goto out;
	}
	for (size_t s = first; s < first + n && !err; s++)
		err = add_sample(p, a, &p->plan.samples[s]);
	if (archive_write_close(a) != ARCHIVE_OK && !err)
		err = o.err ? o.err : -EIO;
	if (!err && o.err)
		err = o.err;
	if (err)
		goto out;
	err = shardidx_builder_finish(o.b, o.pos, &ix);
	o.b = NULL;
	if (err)
		goto out;
	if (p->codec != FS_CODEC_RAW) {
		err = compress_file(p, rawfd, fd, path);
		if (err)
			goto out;
	}
	err = disk_commit(p->outfd, fd, tmp, name);
	if (err)
		goto out;
	tmp[0] = '\0'; /* renamed: nothing to remove */
	/* the identity of the finished file (rename keeps mtime and inode) */
	err = fs_sidecar_id_fd(fd, p->codec, &sid);
	if (!err)
		err = fs_sidecar_write_at(p->outfd, idx, ix, &sid);
out:
	if (err)
		fprintf(stderr, "shardfs: pack: %s: %s\n", FS_Q(path), strerror(-err));
	if (rawfd >= 0) {
		close(rawfd);
		unlinkat(p->outfd, raw, 0);
	}
	if (fd >= 0) {
		close(fd);
		if (tmp[0])
			unlinkat(p->outfd, tmp, 0);
	}
	shardidx_builder_free(o.b);
	shardidx_free(ix);
	archive_write_free(a);
	return err;
}

/* Open the directory of PREFIX (its dirname, "." without a '/') as
 * p->outfd, once: every file pack writes is made relative to it, never
 * through the path again; p->base gets PREFIX's last component. 0, or
 * -ENOENT / -ENOTDIR / another -errno of its open, with the message
 * printed. */
static int open_prefix_dir(struct pk *p)
{
	char dir[PATH_MAX];
	char *slash;
	int n = snprintf(dir, sizeof(dir), "%s", p->prefix);

	if (n < 0 || (size_t)n >= sizeof(dir))
		return -ENAMETOOLONG;
	slash = strrchr(dir, '/');
	p->base = slash ? p->prefix + (slash - dir) + 1 : p->prefix;
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	p->outfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p->outfd < 0) {
		int err = -errno;

		if (err == -ENOTDIR)
			fprintf(stderr, "shardfs: pack: output directory %s: not a directory\n",
				FS_Q(dir));
		else
			fprintf(stderr, "shardfs: pack: output directory %s: %s%s\n", FS_Q(dir),
				strerror(-err),
				err == -ENOENT ? " (pack creates none: make it first)" : "");
		return err;
	}
	return 0;
}

static int parse_args(struct pk *p, int argc, char **argv)
{
	const char *pos[2];
	int err = fs_opt_parse(&fs_pack_cmd, p, argc, argv, pos);

	if (err)
		return err;
	if (p->compress && !strcmp(p->compress, "zstd")) {
		p->codec = FS_CODEC_ZSTD;
	} else if (p->compress && !strcmp(p->compress, "gzip")) {
		p->codec = FS_CODEC_GZIP;
	} else if (p->compress) {
		fprintf(stderr, "shardfs: pack: --compress wants zstd or gzip, not %s\n",
			FS_Q(p->compress));
		return -EINVAL;
	}
	p->in = pos[0];
	p->prefix = pos[1];
	return 0;
}

int fs_pack_main(int argc, char **argv)
{
	struct pk p;
	const struct fs_pack_plan *pl = &p.plan;
	int err, rc = 1;

	memset(&p, 0, sizeof(p));
	p.outfd = -1;
	p.tty = isatty(STDERR_FILENO);
	err = parse_args(&p, argc, argv);
	if (err) {
		free(p.compress);
		return err > 0 ? 0 : 2;
	}
	if (open_prefix_dir(&p) < 0) {
		rc = 2;
		goto out;
	}
	err = walk(&p, "");
	if (err < 0) {
		fprintf(stderr, "shardfs: pack: %s: %s\n", FS_Q(p.in), strerror(-err));
		goto out;
	}
	err = fs_pack_plan_members(&p.plan);
	if (err < 0) {
		fprintf(stderr, "shardfs: pack: %s\n", strerror(-err));
		goto out;
	}
	if (pl->nsamples == 0) {
		fprintf(stderr, "shardfs: pack: %s has no files\n", FS_Q(p.in));
		goto out;
	}
	if (p.shuffle)
		fs_pack_plan_shuffle(&p.plan, p.seed);
	/* plan the shards first, so nothing is written when one exists */
	err = fs_pack_plan_split(&p.plan, p.max_size, p.max_count);
	if (err < 0) {
		fprintf(stderr, "shardfs: pack: %s\n", strerror(-err));
		goto out;
	}
	if (pl->nshards > 1000000) {
		fprintf(stderr,
			"shardfs: pack: too many shards (%zu): PREFIX-NNNNNN names allow "
			"1000000\n",
			pl->nshards);
		goto out;
	}
	if (!p.force) {
		for (size_t i = 0; i < pl->nshards; i++) {
			char path[PATH_MAX];
			const char *name = shard_path(&p, i, path);
			struct stat st;

			/* anything at the name, a dangling link too (a name too
			 * long is write_shard's error) */
			if (name && fstatat(p.outfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
				fprintf(stderr,
					"shardfs: pack: %s exists (use --force to overwrite)\n",
					FS_Q(path));
				goto out;
			}
		}
	}
	for (size_t i = 0; i < pl->nshards; i++) {
		if (p.tty) {
			fprintf(stderr, "\rpack: shard %zu/%zu, %zu/%zu samples", i + 1,
				pl->nshards, pl->starts[i], pl->nsamples);
			fflush(stderr);
		}
		err =
		    write_shard(&p, (unsigned)i, pl->starts[i], pl->starts[i + 1] - pl->starts[i]);
		if (err < 0)
			goto out;
	}
	if (p.tty)
		fprintf(stderr, "\r\033[K");
	printf("packed %zu %s in %zu %s into %zu %s%s%s", pl->nfiles,
	       fs_plural(pl->nfiles, "file", "files"), pl->nsamples,
	       fs_plural(pl->nsamples, "sample", "samples"), pl->nshards,
	       fs_plural(pl->nshards, "shard", "shards"),
	       pl->nclasses ? " (class-folder tree)" : "", p.shuffle ? ", shuffled" : "");
	if (p.symlinks)
		printf("; %zu symbolic link%s skipped", p.symlinks, p.symlinks == 1 ? "" : "s");
	printf("\n");
	rc = 0;
out:
	if (p.outfd >= 0)
		close(p.outfd);
	fs_pack_plan_free(&p.plan);
	free(p.compress);
	return rc;
}
