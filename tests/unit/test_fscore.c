/*
 * test_fscore.c — the filesystem core (fs/core/include/fs_core_ops.h) without a mount.
 *
 * Writes a local directory of small tar shards (and plain files whose names
 * conflict with them), opens the core on it with the core's lifecycle
 * (fs_open after the mount's option parsing; fs_close at the end of each
 * case, so the ASan build's leak check covers everything fs_close frees)
 * and drives fs_op_* directly: lookups, listings (with offsets),
 * attributes, name-conflict rules, extended attributes, control files,
 * reads compared byte for byte (fd extents and copied buffers), the
 * imagefolder layout's class and file names, and a source listed by name
 * only (a brace pattern's way) learned lazily. The core is linked without
 * libfuse: this test's meson target lists no fuse dependency.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs_ops.h"
#include "fs_plan_i.h"
#include "fs_view.h"
#include "check.h"
#include "shardidx.h"
#include "test_rng.h"

static char tmp[] = "/tmp/test_fscore.XXXXXX";

/* ---- writing the source ---------------------------------------------------- */

struct member {
	const char *name;
	char type;	  /* '0' file, '5' directory, '1' hard link, '2' symlink */
	const char *data; /* a link's: its target (linkname); it has no data */
};

/* data for a member: a pattern long enough to span several reads */
static char *pattern(const char *seed, size_t len)
{
	char *p = malloc(len + 1);

	for (size_t i = 0; i < len; i++)
		p[i] = (char)(seed[i % strlen(seed)] + (char)(i / 7 % 5));
	p[len] = '\0';
	return p;
}

/* v as width - 1 octal digits and a NUL (v fits: the test's values are small) */
static void octal(char *dst, size_t width, uint64_t v)
{
	char tmpbuf[32];

	snprintf(tmpbuf, sizeof(tmpbuf), "%0*" PRIo64, (int)width - 1, v);
	memcpy(dst, tmpbuf, width);
}

/* A ustar archive of members into buf; returns its length. */
static size_t tar_write(const struct member *m, size_t n, char **out)
{
	size_t cap = 1024 * 2, len = 0;
	char *buf = calloc(1, cap);

	for (size_t i = 0; i < n; i++) {
		int is_link = m[i].type == '1' || m[i].type == '2';
		size_t dlen = m[i].data && !is_link ? strlen(m[i].data) : 0;
		size_t need = len + 512 + (dlen + 511) / 512 * 512 + 1024;
		char *h;
		unsigned sum = 0;

		if (need > cap) {
			buf = realloc(buf, need);
			memset(buf + cap, 0, need - cap);
			cap = need;
		}
		h = buf + len;
		snprintf(h, 100, "%s", m[i].name);
		octal(h + 100, 8, m[i].type == '5' ? 0755 : 0644);
		octal(h + 108, 8, 0);
		octal(h + 116, 8, 0);
		octal(h + 124, 12, dlen);
		octal(h + 136, 12, 1700000000);
		h[156] = m[i].type;
		if (is_link)
			snprintf(h + 157, 100, "%s", m[i].data);
		memcpy(h + 257, "ustar", 6);
		memcpy(h + 263, "00", 2);
		memset(h + 148, ' ', 8);
		for (int k = 0; k < 512; k++)
			sum += (unsigned char)h[k];
		snprintf(h + 148, 8, "%06o", sum);
		len += 512;
		if (dlen) {
			memcpy(buf + len, m[i].data, dlen);
			len += (dlen + 511) / 512 * 512;
		}
	}
	len += 1024; /* two zero blocks */
	*out = buf;
	return len;
}

static void path_of(char *buf, size_t size, const char *rel)
{
	snprintf(buf, size, "%s/src/%s", tmp, rel);
}

static void write_file(const char *rel, const char *data, size_t len)
{
	char path[4096];
	FILE *f;

	path_of(path, sizeof(path), rel);
	f = fopen(path, "wb");
	if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

static void make_dir(const char *rel)
{
	char path[4096];

	path_of(path, sizeof(path), rel);
	if (mkdir(path, 0755) < 0) {
		perror(path);
		exit(1);
	}
}

static void write_shard(const char *rel, const struct member *m, size_t n)
{
	char *buf;
	size_t len = tar_write(m, n, &buf);

	write_file(rel, buf, len);
	free(buf);
}

/* ---- opening the core ------------------------------------------------------ */

/* Open the core on source (NULL: the local directory src) with its cache in
 * cache-NAME (NULL: the layout's name). */
static void fs_open_core_at(struct fs **fs, const char *layout, const char *source,
			    const char *name)
{
	char cache[4096], src[4096], mnt[4096];
	char *argv[] = {"--cache-dir",	cache, "--warm", "off", "--layout", (char *)layout,
			"--class-from", "cls", src,	 mnt,	NULL};
	struct fs_config cfg;
	int err;

	snprintf(cache, sizeof(cache), "%s/cache-%s", tmp, name ? name : layout);
	if (source)
		snprintf(src, sizeof(src), "%s", source);
	else
		snprintf(src, sizeof(src), "%s/src", tmp);
	snprintf(mnt, sizeof(mnt), "%s/mnt", tmp);
	memset(&cfg, 0, sizeof(cfg));
	err = fs_opt_parse_mount(10, argv, &cfg);
	if (err) {
		fprintf(stderr, "fs_opt_parse_mount: %d\n", err);
		exit(1);
	}
	/* as a mount opens it, but for the daemon's log and the layout's
	 * eager build (FS_OPEN_MOUNT) */
	err = fs_open(&cfg, 0, fs);
	if (err < 0) {
		fprintf(stderr, "opening the core: %s\n", strerror(-err));
		exit(1);
	}
	(*fs)->mount_time = 1700000000;
}

static void fs_open_core(struct fs **fs, const char *layout)
{
	fs_open_core_at(fs, layout, NULL, NULL);
}

static void fs_close_core(struct fs *fs)
{
	fs_close(fs);
}

/* ---- driving it -------------------------------------------------------------- */

/* The inode at path (relative to the root, '/'-separated): 0 when a
 * component is a negative entry, or a negative errno. checked: each entry's
 * inode is checked against its attributes' (a CHECK); else a mismatch is
 * -EPROTO (for a thread that checks what it read once at its end). */
static int64_t walk_by(struct fs *fs, const char *path, int checked)
{
	char buf[4096], *save = NULL;
	uint64_t ino = 1;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		struct fs_entry e;
		int err = fs_op_lookup(fs, ino, c, &e);

		if (err < 0)
			return err;
		if (e.ino == 0)
			return 0;
		if (checked)
			CHECK(e.attr.st_ino == e.ino, "%s: entry ino %" PRIu64 " attr ino %" PRIu64,
			      path, e.ino, (uint64_t)e.attr.st_ino);
		else if (e.attr.st_ino != e.ino)
			return -EPROTO;
		ino = e.ino;
	}
	return (int64_t)ino;
}

static int64_t walk(struct fs *fs, const char *path)
{
	return walk_by(fs, path, 1);
}

struct names {
	char text[8192]; /* names joined with ' ' */
	unsigned n, stop_after;
	uint64_t last_next;
};

static int collect(void *ctx, const char *name, const struct fs_entry *e, uint64_t next)
{
	struct names *l = ctx;
	size_t len = strlen(l->text);

	(void)e;
	if (l->stop_after && l->n == l->stop_after)
		return 1;
	snprintf(l->text + len, sizeof(l->text) - len, "%s%s", len ? " " : "", name);
	l->n++;
	l->last_next = next;
	return 0;
}

/* The listing of path from offset off, as "name name ...". */
static const char *list(struct fs *fs, const char *path, uint64_t off, struct names *l)
{
	int64_t ino = walk(fs, path);
	int err;

	memset(l, 0, sizeof(*l));
	CHECK(ino > 0, "%s: walk gave %" PRId64, path, ino);
	if (ino <= 0)
		return "";
	err = fs_op_readdir(fs, (uint64_t)ino, off, collect, l);
	CHECK(err == 0, "readdir %s: %s", path, strerror(-err));
	return l->text;
}

/* Read all of ino in reads of step bytes (as the kernel does), into out. */
static int read_all(struct fs *fs, uint64_t ino, size_t step, char *out, size_t cap, size_t *len)
{
	uint64_t off = 0;

	for (;;) {
		struct fs_read r;
		int err = fs_op_read(fs, ino, 0, off, step, &r);

		if (err < 0)
			return err;
		if (r.len == 0)
			break;
		if (off + r.len > cap) {
			fs_op_read_done(&r);
			return -EFBIG;
		}
		if (r.pin) {
			if (pread(r.fd, out + off, r.len, (off_t)r.fd_off) != (ssize_t)r.len)
				err = -EIO;
		} else {
			memcpy(out + off, r.buf, r.len);
		}
		off += r.len;
		fs_op_read_done(&r);
		if (err < 0)
			return err;
	}
	*len = (size_t)off;
	return 0;
}

/* Compare the file at path in the core with want[0..wlen), read in steps. */
static void check_bytes(struct fs *fs, const char *path, const char *want, size_t wlen)
{
	static char got[1 << 20];
	static const size_t steps[] = {1 << 17, 4096, 1000};
	int64_t ino = walk(fs, path);

	CHECK(ino > 0, "%s: walk gave %" PRId64, path, ino);
	if (ino <= 0)
		return;
	for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
		size_t len = 0;
		int err = read_all(fs, (uint64_t)ino, steps[s], got, sizeof(got), &len);

		CHECK(err == 0, "%s: read: %s", path, strerror(-err));
		CHECK(len == wlen && memcmp(got, want, wlen) == 0,
		      "%s in steps of %zu: %zu bytes, want %zu, %s", path, steps[s], len, wlen,
		      len == wlen ? "different bytes" : "different length");
	}
}

static char *slurp(const char *rel, size_t *len)
{
	char path[4096];
	struct stat st;
	char *buf;
	int fd;

	path_of(path, sizeof(path), rel);
	fd = open(path, O_RDONLY);
	if (fd < 0 || fstat(fd, &st) < 0)
		return NULL;
	buf = malloc((size_t)st.st_size + 1);
	*len = (size_t)pread(fd, buf, (size_t)st.st_size, 0);
	close(fd);
	return buf;
}

/* ---- the tests ---------------------------------------------------------------- */

static char *big0, *big1;

static void make_source(void)
{
	char path[4096];
	const struct member s0[] = {
	    {"s0.jpg", '0', big0}, {"s0.cls", '0', "3"}, {"s1.jpg", '0', "image s1\n"},
	    {"s1.cls", '0', "1"},  {"d", '5', NULL},	 {"d/n.txt", '0', "nested\n"},
	};
	const struct member s1[] = {
	    {"s0.jpg", '0', big1}, {"s0.cls", '0', "3"},	  {"s2.png", '0', "png s2\n"},
	    {"s2.cls", '0', "1"},  {"s3.txt", '0', "no image\n"},
	};
	const struct member x[] = {{"a.txt", '0', "from x.tar\n"}};
	const struct member y[] = {{"c.txt", '0', "from y.tar\n"}};

	snprintf(path, sizeof(path), "%s/src", tmp);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/mnt", tmp);
	mkdir(path, 0755);
	make_dir("train");
	write_shard("train/shard-000000.tar", s0, sizeof(s0) / sizeof(s0[0]));
	write_shard("train/shard-000001.tar", s1, sizeof(s1) / sizeof(s1[0]));
	/* a plain file x beside x.tar: the file keeps the name x */
	write_shard("x.tar", x, 1);
	write_file("x", "plain x\n", 8);
	/* a directory d/y beside d/y.tar: the directory keeps the name y */
	make_dir("d");
	make_dir("d/y");
	write_file("d/y/plain.txt", "plain\n", 6);
	write_shard("d/y.tar", y, 1);
}

static void test_shards_layout(void)
{
	struct fs *fs;
	struct names l;
	struct fs_entry e;
	struct stat st;
	char buf[FS_XATTR_MAX];
	size_t len = 0;
	char *raw;
	int64_t ino;
	int n;

	fs_open_core(&fs, "shards");
	CHECK(fs->nshards == 4 && fs->nobjs == 6, "%u shards, %u objects", fs->nshards, fs->nobjs);

	/* listings: sorted, "." and ".." first, .shardfs never listed */
	CHECK(strcmp(list(fs, "", 0, &l), ". .. d train x x.tar") == 0, "root: %s", l.text);
	CHECK(strcmp(list(fs, "train", 0, &l),
		     ". .. shard-000000 shard-000000.tar shard-000001 shard-000001.tar") == 0,
	      "train: %s", l.text);
	CHECK(strcmp(list(fs, "train/shard-000000", 0, &l), ". .. d s0.cls s0.jpg s1.cls s1.jpg") ==
		  0,
	      "shard-000000: %s", l.text);
	CHECK(strcmp(list(fs, "train/shard-000000/d", 0, &l), ". .. n.txt") == 0, "d: %s", l.text);
	/* offsets: resume after the 4th entry; a full reply stops the listing */
	CHECK(strcmp(list(fs, "train/shard-000000", 4, &l), "s0.jpg s1.cls s1.jpg") == 0,
	      "from offset 4: %s", l.text);
	memset(&l, 0, sizeof(l));
	l.stop_after = 3;
	CHECK(fs_op_readdir(fs, (uint64_t)walk(fs, "train/shard-000000"), 0, collect, &l) == 0 &&
		  strcmp(l.text, ". .. d") == 0 && l.last_next == 3,
	      "stopped listing: %s, next %" PRIu64, l.text, l.last_next);

	/* name conflicts: a file beats a shard's member directory, a source
	 * directory beats it too; both counted */
	CHECK(strcmp(list(fs, "d", 0, &l), ". .. y y.tar") == 0, "d: %s", l.text);
	CHECK(strcmp(list(fs, "d/y", 0, &l), ". .. plain.txt") == 0, "d/y: %s", l.text);
	ino = walk(fs, "x");
	CHECK(ino > 0 && fs_op_getattr(fs, (uint64_t)ino, &st) == 0 && S_ISREG(st.st_mode) &&
		  st.st_size == 8,
	      "x is the plain file");
	check_bytes(fs, "x", "plain x\n", 8);
	check_bytes(fs, "d/y/plain.txt", "plain\n", 6);
	CHECK(fs->c.hidden_names == 2, "hidden_names %llu", (unsigned long long)fs->c.hidden_names);

	/* lookups: negative entries carry the timeout, a file is no directory */
	CHECK(fs_op_lookup(fs, 1, "nonexistent", &e) == 0 && e.ino == 0 &&
		  e.timeout == fs->cfg.entry_timeout_s,
	      "negative lookup: ino %" PRIu64 " timeout %g", e.ino, e.timeout);
	CHECK(fs_op_lookup(fs, (uint64_t)walk(fs, "x"), "z", &e) == -ENOTDIR,
	      "lookup in a plain file");
	ino = walk(fs, "train/shard-000000/s1.jpg");
	CHECK(fs_op_opendir(fs, (uint64_t)ino) == -ENOTDIR, "opendir of a member file");
	CHECK(walk(fs, "train/shard-000000/nope") == 0, "negative member lookup");

	/* attributes; a lookup counts once per name */
	n = (int)fs->c.lookups;
	ino = walk(fs, "train/shard-000000/s0.jpg");
	CHECK(fs->c.lookups == (unsigned long long)n + 3, "lookups %llu, want %d + 3",
	      (unsigned long long)fs->c.lookups, n);
	CHECK(ino > 0 && fs_op_getattr(fs, (uint64_t)ino, &st) == 0 && S_ISREG(st.st_mode) &&
		  (st.st_mode & 07777) == 0644 && st.st_size == (off_t)strlen(big0) &&
		  st.st_mtime == 1700000000 && st.st_nlink == 1,
	      "s0.jpg attributes: mode %o size %lld", (unsigned)st.st_mode, (long long)st.st_size);
	ino = walk(fs, "train/shard-000000");
	CHECK(ino > 0 && fs_op_getattr(fs, (uint64_t)ino, &st) == 0 && S_ISDIR(st.st_mode) &&
		  (st.st_mode & 07777) == 0555 && st.st_nlink == 1,
	      "member directory attributes");

	/* reads, byte for byte: members (fd extents), raw shards, plain files */
	check_bytes(fs, "train/shard-000000/s0.jpg", big0, strlen(big0));
	check_bytes(fs, "train/shard-000001/s0.jpg", big1, strlen(big1));
	check_bytes(fs, "train/shard-000000/d/n.txt", "nested\n", 7);
	raw = slurp("train/shard-000001.tar", &len);
	check_bytes(fs, "train/shard-000001.tar", raw, len);
	free(raw);
	{
		struct fs_read r;
		uint64_t rd = fs->c.reads;

		ino = walk(fs, "train/shard-000000/s1.jpg");
		CHECK(fs_op_read(fs, (uint64_t)ino, 0, 9, 100, &r) == 0 && r.len == 0,
		      "read at the end: %zu bytes", r.len);
		fs_op_read_done(&r);
		CHECK(fs_op_read(fs, (uint64_t)walk(fs, "train"), 0, 0, 100, &r) == -EISDIR,
		      "read of a directory");
		CHECK(fs->c.reads == rd + 2, "reads counted: %llu",
		      (unsigned long long)fs->c.reads);
	}

	/* extended attributes: where a sample lives; off by default (ENOSYS,
	 * which the kernel remembers), on with --xattr, off again with
	 * --no-xattr */
	ino = walk(fs, "train/shard-000001/s2.png");
	CHECK(fs_op_getxattr(fs, (uint64_t)ino, "user.shardfs.key", buf, sizeof(buf)) == -ENOSYS &&
		  fs_op_listxattr(fs, (uint64_t)ino, buf, sizeof(buf)) == -ENOSYS,
	      "xattrs off by default");
	fs->cfg.xattr = 1;
	n = fs_op_getxattr(fs, (uint64_t)ino, "user.shardfs.key", buf, sizeof(buf));
	CHECK(n == 2 && memcmp(buf, "s2", 2) == 0, "key xattr: %d", n);
	n = fs_op_getxattr(fs, (uint64_t)ino, "user.shardfs.shard", buf, sizeof(buf));
	CHECK(n == 22 && memcmp(buf, "train/shard-000001.tar", 22) == 0, "shard xattr: %d %.*s", n,
	      n > 0 ? n : 0, buf);
	n = fs_op_getxattr(fs, (uint64_t)ino, "user.shardfs.size", buf, sizeof(buf));
	CHECK(n == 1 && buf[0] == '7', "size xattr: %d", n);
	n = fs_op_listxattr(fs, (uint64_t)ino, buf, sizeof(buf));
	CHECK(n == 19 + 20 + 18 + 17, "listxattr: %d", n);
	CHECK(fs_op_listxattr(fs, (uint64_t)walk(fs, "train"), buf, sizeof(buf)) == 0,
	      "a directory has no xattrs");
	CHECK(fs_op_getxattr(fs, (uint64_t)walk(fs, "x"), "user.shardfs.key", buf, sizeof(buf)) ==
		  -ENODATA,
	      "a plain file has no xattrs");
	fs->cfg.no_xattr = 1;
	CHECK(fs_op_getxattr(fs, (uint64_t)ino, "user.shardfs.key", buf, sizeof(buf)) == -ENOSYS,
	      "--no-xattr wins over --xattr");
	fs->cfg.xattr = fs->cfg.no_xattr = 0;

	/* the loader indexes: by name only, generated from the indexes */
	{
		size_t tlen;
		char *tsv = malloc(1 << 16);

		ino = walk(fs, ".shardfs/samples.tsv");
		/* their kind (8) sets bit 63: ino < 0 here; errors are > -4096 */
		CHECK(ino < -4096 && tsv, ".shardfs/samples.tsv: %" PRId64, ino);
		if (ino < -4096 && tsv &&
		    read_all(fs, (uint64_t)ino, 7, tsv, (1 << 16) - 1, &tlen) == 0) {
			tsv[tlen] = '\0';
			CHECK(strncmp(tsv, "path\tshard\toffset\tsize\tkey\n", 27) == 0,
			      "samples.tsv header: %.40s", tsv);
			CHECK(strstr(tsv, "train/shard-000001/s2.png\ttrain/shard-000001.tar\t"),
			      "samples.tsv has s2.png: %s", tsv);
		}
		free(tsv);
		CHECK(walk(fs, ".shardfs/wids.json") < -4096, ".shardfs/wids.json");
		CHECK(walk(fs, ".shardfs/dali/train/shard-000001.idx") < -4096,
		      ".shardfs/dali/train/shard-000001.idx");
		CHECK(walk(fs, ".shardfs/dali/train/nothere.idx") == 0,
		      "no DALI index of no shard");
	}

	/* control files: reachable by name, read as a snapshot */
	ino = walk(fs, ".shardfs/stats");
	CHECK(ino > 0, ".shardfs/stats");
	if (ino > 0) {
		struct fs_open o;
		struct fs_read r;

		CHECK(fs_op_open(fs, (uint64_t)ino, O_RDONLY, &o) == 0 && o.fh && o.direct_io,
		      "open stats");
		CHECK(fs_op_open(fs, (uint64_t)ino, O_WRONLY, &o) == -EROFS, "stats for writing");
		CHECK(fs_op_open(fs, (uint64_t)ino, O_RDONLY, &o) == 0 &&
			  fs_op_read(fs, (uint64_t)ino, o.fh, 0, 65536, &r) == 0 && r.buf &&
			  memmem(r.buf, r.len, "\"lookups\":", 10),
		      "stats has lookups");
		fs_op_read_done(&r);
		fs_op_release(fs, (uint64_t)ino, o.fh);
		CHECK(fs_op_read(fs, (uint64_t)ino, o.fh, 0, 100, &r) == -EIO,
		      "a read after release");
	}
	CHECK(strcmp(list(fs, ".shardfs", 0, &l), ". .. stats metrics control") == 0,
	      ".shardfs: %s", l.text);
	CHECK(fs_op_write(fs, (uint64_t)walk(fs, "x"), "x", 1, 0, 0, 0) == -EROFS, "write");
	fs_close_core(fs);
}

static void test_imagefolder_layout(void)
{
	struct fs *fs;
	struct names l;
	struct stat st;
	int64_t ino;

	fs_open_core(&fs, "imagefolder");
	/* classes from .cls; the second s0 of class 3 is named after its shard;
	 * samples without an image (s3, d/n, and the members of x.tar and
	 * y.tar) are left out before their class is asked; a class lists its
	 * files in the order of their names (strcmp: the view's) */
	CHECK(strcmp(list(fs, "", 0, &l), ". .. 1 3") == 0, "root: %s", l.text);
	CHECK(strcmp(list(fs, "1", 0, &l), ". .. s1.jpg s2.png") == 0, "class 1: %s", l.text);
	CHECK(strcmp(list(fs, "3", 0, &l), ". .. s0.jpg s0~shard-000001.jpg") == 0, "class 3: %s",
	      l.text);
	CHECK(fs->c.if_images == 4 && fs->c.if_no_image == 4 && fs->c.if_no_class == 0 &&
		  fs->c.if_dup_dropped == 0,
	      "images %llu, no image %llu, no class %llu, dropped %llu",
	      (unsigned long long)fs->c.if_images, (unsigned long long)fs->c.if_no_image,
	      (unsigned long long)fs->c.if_no_class, (unsigned long long)fs->c.if_dup_dropped);
	ino = walk(fs, "3/s0~shard-000001.jpg");
	CHECK(ino > 0 && fs_op_getattr(fs, (uint64_t)ino, &st) == 0 && S_ISREG(st.st_mode) &&
		  st.st_ino == (ino_t)ino && st.st_nlink == 1 && st.st_size == (off_t)strlen(big1),
	      "image file attributes");
	check_bytes(fs, "3/s0.jpg", big0, strlen(big0));
	check_bytes(fs, "3/s0~shard-000001.jpg", big1, strlen(big1));
	check_bytes(fs, "1/s2.png", "png s2\n", 7);
	CHECK(walk(fs, "train") == 0, "the source's directories are not in the view");
	CHECK(walk(fs, ".shardfs/stats") > 0, ".shardfs in the view's root");
	ino = walk(fs, "");
	CHECK(fs_op_getattr(fs, 1, &st) == 0 && S_ISDIR(st.st_mode) && st.st_nlink == 1,
	      "the view's root");
	CHECK(fs->c.if_view_saved == 1 && fs->c.if_view_loaded == 0 && fs->c.if_view_mapped == 1,
	      "first core: view saved %llu, loaded %llu, mapped %llu",
	      (unsigned long long)fs->c.if_view_saved, (unsigned long long)fs->c.if_view_loaded,
	      (unsigned long long)fs->c.if_view_mapped);
	fs_close_core(fs);

	/* the same shards and cache directory: the saved view is mapped, no
	 * shard indexed; the same names, attributes, bytes and counts; the
	 * names are the view's: listing a class without attributes (find
	 * with --listing-attrs looked; auto gives them in this layout) loads
	 * no shard's index; the attributes are the members' in the shards'
	 * saved indexes (loaded from the cache directory, never built: no
	 * shard byte read), one index per shard a getattr meets */
	fs_open_core(&fs, "imagefolder");
	CHECK(fs->cfg.listing_attrs == FS_LISTING_AUTO, "default --listing-attrs %d",
	      fs->cfg.listing_attrs);
	fs->cfg.listing_attrs = FS_LISTING_LOOKED;
	CHECK(strcmp(list(fs, "3", 0, &l), ". .. s0.jpg s0~shard-000001.jpg") == 0,
	      "class 3 again: %s", l.text);
	CHECK(strcmp(list(fs, "", 0, &l), ". .. 1 3") == 0, "root again: %s", l.text);
	CHECK(fs->c.if_view_loaded == 1 && fs->c.if_view_saved == 0 &&
		  fs->c.if_shards_indexed == 0 && fs->c.index_built == 0 &&
		  fs->c.index_loaded == 0 && fs->c.if_images == 4 && fs->c.if_no_image == 4,
	      "second core: loaded %llu, saved %llu, shards indexed %llu, indexes built %llu, "
	      "loaded %llu, images %llu, no image %llu",
	      (unsigned long long)fs->c.if_view_loaded, (unsigned long long)fs->c.if_view_saved,
	      (unsigned long long)fs->c.if_shards_indexed, (unsigned long long)fs->c.index_built,
	      (unsigned long long)fs->c.index_loaded, (unsigned long long)fs->c.if_images,
	      (unsigned long long)fs->c.if_no_image);
	ino = walk(fs, "3/s0~shard-000001.jpg");
	CHECK(ino > 0 && fs_op_getattr(fs, (uint64_t)ino, &st) == 0 && S_ISREG(st.st_mode) &&
		  st.st_nlink == 1 && st.st_size == (off_t)strlen(big1) && fs->c.index_built == 0,
	      "image file attributes from the saved index (indexes built %llu)",
	      (unsigned long long)fs->c.index_built);
	CHECK(fs->c.index_loaded == 1, "the getattr of one file loaded %llu indexes, want 1",
	      (unsigned long long)fs->c.index_loaded);
	check_bytes(fs, "3/s0~shard-000001.jpg", big1, strlen(big1));
	check_bytes(fs, "1/s2.png", "png s2\n", 7);
	fs_close_core(fs);
}

/* A shard rewritten under the core: its old inodes answer ESTALE (reads,
 * attributes), and a lookup of its name finds the new version at new
 * inode numbers. */
static void test_change(void)
{
	const struct member v2[] = {{"s2.png", '0', "png s2, version 2\n"}, {"s2.cls", '0', "1"}};
	struct fs *fs;
	struct fs_read r;
	struct stat st;
	struct names l;
	int64_t old, shard_old, now;
	unsigned long long changed;

	fs_open_core(&fs, "shards");
	old = walk(fs, "train/shard-000001/s2.png");
	shard_old = walk(fs, "train/shard-000001");
	check_bytes(fs, "train/shard-000001/s2.png", "png s2\n", 7);
	write_shard("train/shard-000001.tar", v2, 2);
	CHECK(fs_op_read(fs, (uint64_t)old, 0, 0, 100, &r) == -ESTALE, "read of the old member");
	CHECK(fs_op_getattr(fs, (uint64_t)shard_old, &st) == -ESTALE, "the old member directory");
	changed = fs->c.stale_noticed;
	now = walk(fs, "train/shard-000001/s2.png");
	CHECK(now > 0 && now != old, "new member inode %" PRId64 " (old %" PRId64 ")", now, old);
	check_bytes(fs, "train/shard-000001/s2.png", "png s2, version 2\n", 18);
	CHECK(strcmp(list(fs, "train/shard-000001", 0, &l), ". .. s2.cls s2.png") == 0,
	      "new listing: %s", l.text);
	CHECK(fs->c.stale_noticed == changed, "noticed once: %llu, then %llu", changed,
	      (unsigned long long)fs->c.stale_noticed);
	fs_close_core(fs);
}

/* A source listed by name only (a brace pattern's way, here the fault
 * store's names_only=1): nothing is learned before it is needed; a lookup
 * or getattr learns one object, a listing all it shows; a name the store
 * does not have is a negative entry, counted once and not listed; what was
 * learned is kept for a later mount that finds the store unreachable. */
static void test_lazy(void)
{
	const struct member a[] = {{"a.txt", '0', "from a.tar\n"}};
	const struct member b[] = {{"b.txt", '0', "from b.tar\n"}};
	char source[4096], path[4096];
	struct fs *fs;
	struct names l;
	struct stat st;
	int64_t ino;
	size_t alen = 0;
	char *abytes;

	make_dir("lazy");
	write_shard("lazy/a.tar", a, 1);
	write_shard("lazy/b.tar", b, 1);
	write_shard("lazy/c.tar", b, 1);
	write_file("lazy/d.txt", "plain d\n", 8);
	abytes = slurp("lazy/a.tar", &alen);
	snprintf(source, sizeof(source), "fault://%s/src/lazy?names_only=1", tmp);
	fs_open_core_at(&fs, "shards", source, "lazy");
	CHECK(fs->lazy == 1, "a names-only listing makes a lazy namespace");
	CHECK(fs->c.brace_learned == 0, "learned at build: %llu",
	      (unsigned long long)fs->c.brace_learned);
	path_of(path, sizeof(path), "lazy/c.tar");
	unlink(path); /* named, not on the store */
	ino = walk(fs, "a.tar");
	CHECK(ino > 0 && fs_op_getattr(fs, (uint64_t)ino, &st) == 0 && (size_t)st.st_size == alen,
	      "a.tar: size %lld, want %zu", (long long)st.st_size, alen);
	CHECK(fs->c.brace_learned == 1, "a lookup learns one: %llu",
	      (unsigned long long)fs->c.brace_learned);
	CHECK(walk(fs, "c.tar") == 0 && walk(fs, "c") == 0 && walk(fs, "c/b.txt") == 0,
	      "a missing name is a negative entry");
	CHECK(fs->c.brace_missing == 1, "missing counted once: %llu",
	      (unsigned long long)fs->c.brace_missing);
	CHECK(strcmp(list(fs, "", 0, &l), ". .. a a.tar b b.tar d.txt") == 0, "listing: %s",
	      l.text);
	CHECK(fs->c.brace_learned == 3 && fs->c.brace_missing == 1, "after the listing: %llu, %llu",
	      (unsigned long long)fs->c.brace_learned, (unsigned long long)fs->c.brace_missing);
	CHECK(fs->total_bytes == alen * 2 + 8, "total_bytes %llu",
	      (unsigned long long)fs->total_bytes);
	check_bytes(fs, "a.tar", abytes, alen);
	check_bytes(fs, "b/b.txt", "from b.tar\n", 11);
	CHECK(fs_ns_keep_learned(fs) == 0, "keeping what was learned");
	fs_close_core(fs);
	/* the store unreachable: the listing kept, with sizes, not lazy */
	snprintf(source, sizeof(source), "fault://%s/src/lazy?names_only=1&fail_list=1", tmp);
	fs_open_core_at(&fs, "shards", source, "lazy");
	CHECK(fs->offline == 1 && fs->lazy == 0, "offline %d, lazy %d", fs->offline, fs->lazy);
	CHECK(strcmp(list(fs, "", 0, &l), ". .. a a.tar b b.tar d.txt") == 0, "offline listing: %s",
	      l.text);
	ino = walk(fs, "a.tar");
	CHECK(ino > 0 && fs_op_getattr(fs, (uint64_t)ino, &st) == 0 && (size_t)st.st_size == alen,
	      "offline a.tar: size %lld, want %zu", (long long)st.st_size, alen);
	fs_close_core(fs);
	free(abytes);
}

/* Learning a brace pattern's names from several threads: each is asked
 * of the store once. The fault store logs each HEAD (heads=1) and holds
 * them while DIR.hold exists: fs_learn_all claims the three names and its
 * first HEAD is held; a lookup's fs_obj_learn of a found name and of a
 * missing one then wait for its answers (brace_waits 2) instead of asking:
 * three HEADs in all, the size and ENOENT to the waiters. */
struct learn_arg {
	struct fs *fs;
	uint32_t obj;
	int err;
};

static void *learn_all_main(void *p)
{
	fs_learn_all(((struct learn_arg *)p)->fs);
	return NULL;
}

static void *learn_one_main(void *p)
{
	struct learn_arg *a = p;

	a->err = fs_obj_learn(a->fs, a->obj);
	return NULL;
}

/* Lines of file path equal to key (NULL: all lines); -1 when unreadable. */
static int count_lines(const char *path, const char *key)
{
	char line[512];
	int n = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		n += !key || strcmp(line, key) == 0;
	}
	fclose(f);
	return n;
}

static uint32_t obj_named(struct fs *fs, const char *key)
{
	for (uint32_t i = 0; i < fs->nobjs; i++)
		if (strcmp(fs_obj(fs, i)->key, key) == 0)
			return i;
	CHECK(0, "no object %s", key);
	return 0;
}

static void test_lazy_once(void)
{
	const struct member a[] = {{"a.txt", '0', "from a.tar\n"}};
	char source[4096], heads[4096], hold[4096], path[4096];
	struct learn_arg all, one[2];
	pthread_t th[3];
	struct fs *fs;
	int i;

	make_dir("once");
	write_shard("once/a.tar", a, 1);
	write_shard("once/b.tar", a, 1);
	write_shard("once/c.tar", a, 1);
	snprintf(source, sizeof(source), "fault://%s/src/once?names_only=1&heads=1", tmp);
	path_of(heads, sizeof(heads), "once.heads");
	path_of(hold, sizeof(hold), "once.hold");
	fs_open_core_at(&fs, "shards", source, "once");
	path_of(path, sizeof(path), "once/c.tar");
	unlink(path); /* named, not on the store */
	write_file("once.hold", "", 0);
	all.fs = fs;
	pthread_create(&th[0], NULL, learn_all_main, &all);
	/* its first HEAD in flight: every name claimed (a bounded poll, no
	 * timing: the hold keeps it there) */
	for (i = 0; i < 60000 && count_lines(heads, NULL) < 1; i++)
		usleep(1000);
	CHECK(count_lines(heads, NULL) == 1, "the learner's first HEAD held: %d",
	      count_lines(heads, NULL));
	one[0] = (struct learn_arg){fs, obj_named(fs, "a.tar"), 1};
	one[1] = (struct learn_arg){fs, obj_named(fs, "c.tar"), 1};
	pthread_create(&th[1], NULL, learn_one_main, &one[0]);
	pthread_create(&th[2], NULL, learn_one_main, &one[1]);
	/* until both wait, or one asked the store itself (a second HEAD) */
	for (i = 0;
	     i < 60000 && atomic_load(&fs->c.brace_waits) < 2 && count_lines(heads, NULL) == 1; i++)
		usleep(1000);
	CHECK(atomic_load(&fs->c.brace_waits) == 2, "both lookups wait: brace_waits %llu",
	      (unsigned long long)atomic_load(&fs->c.brace_waits));
	unlink(hold);
	for (i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	CHECK(one[0].err == 0 && one[1].err == -ENOENT, "the waiters' answers: %d, %d", one[0].err,
	      one[1].err);
	CHECK(count_lines(heads, NULL) == 3 && count_lines(heads, "a.tar") == 1 &&
		  count_lines(heads, "b.tar") == 1 && count_lines(heads, "c.tar") == 1,
	      "each name asked once: %d HEADs", count_lines(heads, NULL));
	CHECK(fs->c.brace_learned == 2 && fs->c.brace_missing == 1, "learned %llu, missing %llu",
	      (unsigned long long)fs->c.brace_learned, (unsigned long long)fs->c.brace_missing);
	CHECK(fs_obj_learn(fs, one[0].obj) == 0 && count_lines(heads, NULL) == 3,
	      "a learned name is not asked again");
	fs_close_core(fs);
}

/* The counters: stats and metrics come from one table, so every numeric
 * stats field is one metrics family of the right type and value; the CLI's
 * reader takes the stats document back (and refuses what is not one). */
static void test_counters(void)
{
	static const char *const header[] = {"version",	  "pid",    "source",	 "source_path",
					     "cache_dir", "layout", "mount_time"};
	struct fs *fs;
	struct fs_stats_doc d;
	char *st = NULL, *mx = NULL, *text;
	size_t stl = 0, mxl = 0, fams = 0;
	uint64_t v;

	fs_open_core(&fs, "shards");
	fs->c.lookups = 1234567;
	fs->c.if_build_ms = 2500;
	CHECK(fs_ctl_render(fs, FS_CTL_STATS, &st, &stl) == 0, "render stats");
	CHECK(fs_ctl_render(fs, FS_CTL_METRICS, &mx, &mxl) == 0, "render metrics");
	if (!st || !mx)
		goto out;
	text = strndup(st, stl);
	CHECK(text && fs_stats_parse(text, &d) == 0, "stats parses");
	free(text);
	CHECK(d.n > 70, "%zu stats fields", d.n);
	for (size_t i = 0; i < d.n && i < 7; i++)
		CHECK(strcmp(d.f[i].name, header[i]) == 0, "field %zu: %s", i, d.f[i].name);
	CHECK(fs_stats_u64(&d, "lookups", &v) == 0 && v == 1234567, "lookups %" PRIu64, v);
	CHECK(fs_stats_u64(&d, "pid", &v) == 0 && v == (uint64_t)getpid(), "pid");
	CHECK(fs_stats_get(&d, "layout") && strcmp(fs_stats_get(&d, "layout"), "shards") == 0,
	      "layout");
	CHECK(fs_stats_u64(&d, "source", &v) == -EPROTO, "a string is no number");
	CHECK(fs_stats_u64(&d, "no_such_counter", &v) == -ENOENT, "a missing field");
	/* each counter of stats is a family of metrics: NAME_total for a
	 * counter, NAME for a gauge, NAME_seconds (a gauge) or NAME_seconds_total
	 * (a counter) for NAME_ms */
	for (size_t i = 7; i < d.n; i++) {
		const char *nm = d.f[i].name;
		size_t nl = strlen(nm);
		int ms = nl > 3 && strcmp(nm + nl - 3, "_ms") == 0;
		char fam[128], want[256];
		const char *type = NULL, *p;

		snprintf(fam, sizeof(fam), "shardfs_%.*s", (int)(ms ? nl - 3 : nl), nm);
		for (const char *const *t = (const char *const[]){"counter", "gauge", NULL}; *t;
		     t++) {
			snprintf(want, sizeof(want), "# TYPE %s%s%s %s\n", fam,
				 ms ? "_seconds" : "", strcmp(*t, "counter") == 0 ? "_total" : "",
				 *t);
			if (memmem(mx, mxl, want, strlen(want)))
				type = *t;
		}
		CHECK(type != NULL, "no metrics family for %s", nm);
		if (!type)
			continue;
		fams++;
		snprintf(want, sizeof(want), "\n%s%s%s ", fam, ms ? "_seconds" : "",
			 strcmp(type, "counter") == 0 ? "_total" : "");
		p = memmem(mx, mxl, want, strlen(want));
		CHECK(p != NULL, "no sample of %s", nm);
		if (p && !ms) {
			p += strlen(want) + strspn(p + strlen(want), " ");
			CHECK(strtoull(p, NULL, 10) == strtoull(d.f[i].value, NULL, 10),
			      "%s: metrics %.20s, stats %s", nm, p, d.f[i].value);
		}
	}
	{
		const char *p = memmem(mx, mxl, "\nshardfs_imagefolder_build_seconds ", 35);

		CHECK(p && strncmp(p + 35 + strspn(p + 35, " "), "2.500\n", 6) == 0,
		      "imagefolder_build_ms as seconds");
	}
	CHECK(!memmem(mx, mxl, "millisecond", 11), "a help text in seconds names milliseconds");
	{
		size_t n = 0;

		for (const char *p = mx; (p = memmem(p, mxl - (size_t)(p - mx), "# TYPE ", 7)); p++)
			n++;
		CHECK(n == fams && n == d.n - 7, "%zu families, %zu counters", n, d.n - 7);
	}
	fs_stats_doc_free(&d);

	/* the reader: escapes undone, anything else refused */
	CHECK(fs_stats_parse("{\"a\": \"x\\\"y\\\\z\\u0001\", \"b\": 7}  \n", &d) == 0 &&
		  d.n == 2 && strcmp(d.f[0].value, "x\"y\\z\x01") == 0 &&
		  fs_stats_u64(&d, "b", &v) == 0 && v == 7,
	      "escapes");
	fs_stats_doc_free(&d);
	CHECK(fs_stats_parse("{}", &d) == 0 && d.n == 0, "empty");
	fs_stats_doc_free(&d);
	for (const char *const *bad =
		 (const char *const[]){"", "[]", "{\"a\": 1", "{\"a\" 1}", "{\"a\": x}",
				       "{\"a\": \"\\q\"}", "{\"a\": 1 \"b\": 2}", NULL};
	     *bad; bad++)
		CHECK(fs_stats_parse(*bad, &d) == -EPROTO && d.buf == NULL, "accepted '%s'", *bad);
out:
	free(st);
	free(mx);
	fs_close_core(fs);
}

/* ---- reading plans: the interface a fetcher uses (fs_i.h) ------------------- */

static int plan_wakeups;

static void plan_listener(void *ctx)
{
	(void)ctx;
	plan_wakeups++;
}

/* Read ino at off through the operations (as a FUSE read would). */
static void read_at(struct fs *fs, int64_t ino, uint64_t off)
{
	struct fs_read r;

	CHECK(ino > 0 && fs_op_read(fs, (uint64_t)ino, 0, off, 4096, &r) == 0, "read %" PRId64,
	      ino);
	fs_op_read_done(&r);
}

static void test_plan(void)
{
	struct fs *fs;
	struct fs_plan *p[4];
	struct fs_plan_info in;
	struct fs_plan_extent x[8];
	uint32_t idx[8], from = 0, n;
	char file[4096], cmd[4200];
	const char lines[] = "train/shard-000000/s0.jpg\nx\nnope\n\ntrain/shard-000001/s2.png\n"
			     "train//shard-000000/./s0.jpg\n";
	int64_t s0;

	fs_open_core(&fs, "shards");
	fs_plan_set_listener(fs, plan_listener, NULL);
	snprintf(file, sizeof(file), "%s/plan.txt", tmp);
	write_file("../plan.txt", lines, sizeof(lines) - 1);
	snprintf(cmd, sizeof(cmd), "plan t1 %s\n", file);
	CHECK(fs_ctl_command(fs, cmd, strlen(cmd), 123, NULL) == 0, "plan t1");
	CHECK(plan_wakeups == 1, "published: %d wakeups", plan_wakeups);
	CHECK(fs_plan_list(fs, p, 4) == 1, "one plan");
	fs_plan_get_info(p[0], &in);
	CHECK(strcmp(in.name, "t1") == 0 && in.pid == 123 && in.paths == 4 && in.missing == 1 &&
		  in.read == 0 && in.position == 0,
	      "plan t1: %s pid %d, %u paths, %u missing", in.name, (int)in.pid, in.paths,
	      in.missing);
	n = fs_plan_ahead(p[0], &from, x, idx, 8);
	CHECK(n == 4 && from == 4, "%u extents ahead", n);
	CHECK(x[0].off == 512 && x[0].len == 300 * 1000 + 17 && x[0].flags == 0 &&
		  x[0].obj == fs_shard(fs, fs_ino_a(x[0].key))->obj &&
		  fs_ino_kind(x[0].key) == FS_K_MEMBER,
	      "s0.jpg: [%" PRIu64 ", +%" PRIu64 ") of object %u", x[0].off, x[0].len, x[0].obj);
	CHECK(fs_ino_kind(x[1].key) == FS_K_OBJ && x[1].off == 0 && x[1].len == 8 &&
		  strcmp(fs_obj(fs, x[1].obj)->key, "x") == 0,
	      "x: the whole object");
	CHECK(x[3].key == x[0].key && idx[3] == 3, "the same path twice: one key");
	CHECK(in.bytes == 2 * x[0].len + x[1].len + x[2].len, "bytes %" PRIu64, in.bytes);
	/* reads mark: offset 0 the next occurrence, elsewhere only when none is */
	s0 = walk(fs, "train/shard-000000/s0.jpg");
	read_at(fs, s0, 0);
	fs_plan_get_info(p[0], &in);
	CHECK(in.read == 1 && in.position == 1 && plan_wakeups == 2,
	      "after a read: %u read, "
	      "position %u",
	      in.read, in.position);
	from = in.position;
	n = fs_plan_ahead(p[0], &from, x, idx, 8);
	CHECK(n == 3 && idx[0] == 1 && idx[2] == 3, "ahead of position 1: %u", n);
	read_at(fs, s0, 4096); /* continues the read: no mark */
	fs_plan_get_info(p[0], &in);
	CHECK(in.read == 1 && plan_wakeups == 2, "a continued read marks nothing: %u", in.read);
	read_at(fs, s0, 0); /* a new read: the second occurrence */
	fs_plan_get_info(p[0], &in);
	CHECK(in.read == 2 && in.position == 4, "second read: %u read, position %u", in.read,
	      in.position);
	from = 0;
	n = fs_plan_ahead(p[0], &from, x, idx, 1);
	CHECK(n == 1 && idx[0] == 1 && from == 2, "max 1: index %u, from %u", idx[0], from);
	/* replaced and cleared: a held plan stays valid */
	CHECK(fs_ctl_command(fs, cmd, strlen(cmd), 123, NULL) == 0, "replaced");
	CHECK(fs_ctl_command(fs, "plan-clear t1\n", 14, 0, NULL) == 0, "plan-clear t1");
	CHECK(fs_ctl_command(fs, "plan-clear t1\n", 14, 0, NULL) == -ENOENT, "plan-clear again");
	CHECK(fs_plan_list(fs, p + 1, 3) == 0 && plan_wakeups == 5, "no plans: %d wakeups",
	      plan_wakeups);
	fs_plan_get_info(p[0], &in);
	CHECK(in.paths == 4 && in.read == 2, "the replaced plan, still held");
	fs_plan_put(p[0]);
	CHECK(fs_ctl_command(fs, "plan t2 rel/plan.txt\n", 21, 0, NULL) == -EINVAL,
	      "relative FILE");
	CHECK(fs_ctl_command(fs, "plan t2\n", 8, 0, NULL) == -EINVAL, "no FILE");
	snprintf(cmd, sizeof(cmd), "plan %s\n", file);
	CHECK(fs_ctl_command(fs, cmd, strlen(cmd), 77, NULL) == 0 && fs_plan_list(fs, p, 4) == 1,
	      "default name");
	fs_plan_get_info(p[0], &in);
	CHECK(strcmp(in.name, "pid-77") == 0, "named %s", in.name);
	fs_plan_put(p[0]);
	fs_close_core(fs);
}

/* ---- a plan's publication in batches (fs/core/fs_plan_read.c) --------------------- */

#define PB_SHARDS  4
#define PB_SAMPLES 48
#define PB_PATHS   2048

/* tmp/pb: PB_SHARDS shards of PB_SAMPLES samples (an image of a seeded
 * size and its class of 3), a directory, a nested file, a symlink and a
 * hard link each; a plain file and a directory beside them. */
static void pb_source(uint64_t *seed)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/pb", tmp);
	mkdir(path, 0755);
	for (int s = 0; s < PB_SHARDS; s++) {
		struct member m[2 * PB_SAMPLES + 4];
		char names[2 * PB_SAMPLES][32], cls[PB_SAMPLES][4], rel[64];
		char *data[PB_SAMPLES];
		size_t n = 0;

		for (int i = 0; i < PB_SAMPLES; i++) {
			data[i] = pattern(i % 2 ? "odd-" : "even-", 1 + rnd_n(seed, 3000));
			snprintf(names[2 * i], sizeof(names[0]), "k%03d.jpg", i);
			snprintf(names[2 * i + 1], sizeof(names[0]), "k%03d.cls", i);
			snprintf(cls[i], sizeof(cls[0]), "%u", rnd_n(seed, 3));
			m[n++] = (struct member){names[2 * i], '0', data[i]};
			m[n++] = (struct member){names[2 * i + 1], '0', cls[i]};
		}
		m[n++] = (struct member){"sub", '5', NULL};
		m[n++] = (struct member){"sub/n.txt", '0', "nested\n"};
		m[n++] = (struct member){"ln", '2', "k000.jpg"};
		m[n++] = (struct member){"hl", '1', "k001.jpg"};
		snprintf(rel, sizeof(rel), "../pb/p-%06d.tar", s);
		write_shard(rel, m, n);
		for (int i = 0; i < PB_SAMPLES; i++)
			free(data[i]);
	}
	write_file("../pb/plain.bin", "plain\n", 6);
	snprintf(path, sizeof(path), "%s/pb/dir", tmp);
	mkdir(path, 0755);
}

struct pb_names {
	char (*v)[64];
	unsigned n, cap;
	const char *dir;
};

static int pb_collect(void *ctx, const char *name, const struct fs_entry *e, uint64_t next)
{
	struct pb_names *l = ctx;

	(void)e;
	(void)next;
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || l->n == l->cap)
		return 0;
	snprintf(l->v[l->n++], sizeof(l->v[0]), "%s%s%s", l->dir, *l->dir ? "/" : "", name);
	return 0;
}

/* Every path of the mount to depth 2 (the root's entries, theirs). */
static void pb_paths(struct fs *fs, struct pb_names *l)
{
	unsigned top;

	l->dir = "";
	CHECK(fs_op_readdir(fs, 1, 0, pb_collect, l) == 0, "readdir /");
	top = l->n;
	for (unsigned k = 0; k < top; k++) {
		int64_t ino = walk_by(fs, l->v[k], 0);
		char dir[64];

		snprintf(dir, sizeof(dir), "%s", l->v[k]);
		l->dir = dir;
		if (ino > 0)
			(void)fs_op_readdir(fs, (uint64_t)ino, 0, pb_collect, l);
	}
}

/* A seeded plan file of PB_PATHS lines: the mount's paths (files mostly,
 * repeated), and lines that name nothing or no file: missing names, '.',
 * '..', empty components, the mount point before a path, overlong and
 * empty lines, a '\r' at the end, a NUL, .shardfs; its plain paths (the
 * mount's, as listed) in plain too. */
static void pb_plan(const struct pb_names *l, uint64_t *seed, const char *mnt, const char *file,
		    const char *plain)
{
	FILE *f = fopen(file, "wb"), *g = fopen(plain, "wb");
	static char lng[4200];

	memset(lng, 'a', sizeof(lng) - 1);
	for (unsigned k = 0; f && k < PB_PATHS; k++) {
		const char *p = l->v[rnd_n(seed, l->n)];

		switch (rnd_n(seed, 24)) {
		case 0:
			fprintf(f, "%s/nope%u\n", p, k);
			break;
		case 1:
			fprintf(f, "%s/.\n", p);
			break;
		case 2:
			fprintf(f, "%s/../%s\n", p, p);
			break;
		case 3:
			fprintf(f, "./%s//\n", p);
			break;
		case 4:
			fprintf(f, "%s/%s\n", mnt, p);
			break;
		case 5:
			fprintf(f, "%s\n", rnd_n(seed, 2) ? lng : "");
			break;
		case 6:
			fprintf(f, "%s\r\n", p);
			break;
		case 7:
			fprintf(f, "%s%c\n", p, 0);
			break;
		case 8:
			fprintf(f, "%s\n", rnd_n(seed, 2) ? ".shardfs/stats" : ".shardfs");
			break;
		case 9:
			fprintf(f, "/%s\n", p);
			break;
		default:
			fprintf(f, "%s\n", p);
			if (g)
				fprintf(g, "%s\n", p);
			break;
		}
	}
	if (!f || fclose(f) != 0 || !g || fclose(g) != 0)
		FAIL("%s", file);
}

/* Publish file as plan name with batches of batch lines; its info and
 * extents (in plan order, at most cap) into *in, x; shardidx decodes in
 * *decodes. */
static uint32_t pb_publish(struct fs *fs, const char *name, const char *file, uint32_t batch,
			   struct fs_plan_info *in, struct fs_plan_extent *x, uint32_t cap,
			   uint64_t *decodes)
{
	struct fs_plan *p[FS_PLAN_MAX];
	char cmd[4200];
	size_t n;
	uint32_t from = 0, got = 0;
	uint64_t d0 = shardidx_decodes();

	fs_plan__batch = batch;
	snprintf(cmd, sizeof(cmd), "plan %s %s\n", name, file);
	CHECK(fs_ctl_command(fs, cmd, strlen(cmd), 1, NULL) == 0, "plan %s", name);
	*decodes = shardidx_decodes() - d0;
	fs_plan__batch = 16u << 10;
	n = fs_plan_list(fs, p, FS_PLAN_MAX);
	memset(in, 0, sizeof(*in));
	for (size_t k = 0; k < n; k++) {
		fs_plan_get_info(p[k], in);
		if (strcmp(in->name, name) == 0) {
			got = fs_plan_ahead(p[k], &from, x, NULL, cap);
			k = n;
		}
	}
	for (size_t k = 0; k < n; k++)
		fs_plan_put(p[k]);
	if (strcmp(in->name, name) != 0)
		memset(in, 0, sizeof(*in));
	return got;
}

/* The same plan file published a line at a time (fs_plan__batch 1: each
 * line resolved whole before the next, as before batches), in one batch
 * and in batches of 7: the same extents in the same order, the same paths,
 * missing, failed, bytes and fnv; seeded plans in both layouts. In the
 * imagefolder layout, whose lookups read no index, the batch's getattrs in
 * their members' order decode each index entry at most once (a shuffled
 * order decodes some half a block an entry); in the shards layout, whose
 * members' lookups read the index, the same decodes as one by one. A
 * publish on a mount whose shards are all indexed makes no first pass over
 * the file (fs_plan__index_ahead). */
static void test_plan_batch(void)
{
	static struct fs_plan_extent xa[PB_PATHS], xb[PB_PATHS];
	static char names[1024][64];
	uint64_t seed = 0x5eedb47c4ULL + (uint64_t)time(NULL) % 1000;
	char file[4096], plain[4096], mnt[4096];

	printf("plan batches: seed %" PRIu64 "\n", seed);
	pb_source(&seed);
	snprintf(file, sizeof(file), "%s/pb-plan.txt", tmp);
	snprintf(plain, sizeof(plain), "%s/pb-plain.txt", tmp);
	snprintf(mnt, sizeof(mnt), "%s/mnt", tmp);
	for (int round = 0; round < 6; round++) {
		const char *layout = round % 2 ? "imagefolder" : "shards";
		struct pb_names l = {names, 0, 1024, ""};
		struct fs_plan_info ia, ib;
		uint64_t da, db, entries = 0, lines0, lines;
		uint32_t na, nb;
		char src[4096];
		struct fs *fs;

		snprintf(src, sizeof(src), "%s/pb", tmp);
		/* the paths and the plan from a core that lists them, then
		 * published on a core opened again: no index loaded (the
		 * saved ones, compact: decoded entry by entry, are loaded by
		 * the first pass; the view mapped) */
		fs_open_core_at(&fs, layout, src, round % 2 ? "pb-if" : "pb-shards");
		pb_paths(fs, &l);
		pb_plan(&l, &seed, mnt, file, plain);
		fs_close_core(fs);
		fs_open_core_at(&fs, layout, src, round % 2 ? "pb-if" : "pb-shards");
		lines0 = fs_plan__index_lines();
		na = pb_publish(fs, "one", file, 1, &ia, xa, PB_PATHS, &da);
		lines = fs_plan__index_lines() - lines0;
		CHECK(lines > 0, "round %d: no index loaded: the first pass read %" PRIu64 " lines",
		      round, lines);
		nb = pb_publish(fs, "all", file, 16u << 10, &ib, xb, PB_PATHS, &db);
		CHECK(fs_plan__index_lines() - lines0 == lines,
		      "round %d: every index loaded: the first pass read %" PRIu64 " lines", round,
		      fs_plan__index_lines() - lines0 - lines);
		CHECK(na > PB_PATHS / 2 && na == ia.paths && nb == ib.paths && na == nb &&
			  ia.missing == ib.missing && ia.failed == ib.failed &&
			  ia.bytes == ib.bytes && ia.fnv == ib.fnv && ia.missing > 0,
		      "round %d (%s): paths %u/%u, missing %u/%u, failed %u/%u, bytes %" PRIu64
		      "/%" PRIu64 ", fnv %" PRIx64 "/%" PRIx64,
		      round, layout, ia.paths, ib.paths, ia.missing, ib.missing, ia.failed,
		      ib.failed, ia.bytes, ib.bytes, ia.fnv, ib.fnv);
		for (uint32_t k = 0; k < na && k < nb; k++)
			CHECK(memcmp(&xa[k], &xb[k], sizeof(xa[k])) == 0,
			      "round %d: extent %u: key %" PRIx64 "/%" PRIx64 " [%" PRIu64
			      ", +%" PRIu64 ") / [%" PRIu64 ", +%" PRIu64 ")",
			      round, k, xa[k].key, xb[k].key, xa[k].off, xa[k].len, xb[k].off,
			      xb[k].len);
		nb = pb_publish(fs, "seven", file, 7, &ib, xb, PB_PATHS, &db);
		CHECK(nb == na && ib.missing == ia.missing && ib.fnv == ia.fnv &&
			  memcmp(xa, xb, na * sizeof(*xa)) == 0,
		      "round %d: batches of 7: %u paths, missing %u", round, nb, ib.missing);
		/* the plain paths: the index decodes of their attributes */
		na = pb_publish(fs, "plain1", plain, 1, &ia, xa, PB_PATHS, &da);
		nb = pb_publish(fs, "plainb", plain, 16u << 10, &ib, xb, PB_PATHS, &db);
		CHECK(na == nb && ia.fnv == ib.fnv && memcmp(xa, xb, na * sizeof(*xa)) == 0,
		      "round %d: plain paths: %u/%u", round, na, nb);
		for (uint32_t s = 0; s < PB_SHARDS; s++) {
			struct shardidx *ix;
			struct cachetier_obj *stream;

			if (fs_shard_index(fs, s, &ix, &stream) == 0)
				entries += shardidx_count(ix);
		}
		printf("round %d (%s): index decodes of %u plain paths: one by one %" PRIu64
		       ", a batch %" PRIu64 ", %" PRIu64 " entries\n",
		       round, layout, na, da, db, entries);
		if (round % 2)
			CHECK(db <= entries && da > 2 * entries,
			      "round %d: index decodes %" PRIu64 " in a batch (at most the %" PRIu64
			      " entries), %" PRIu64 " one by one",
			      round, db, entries, da);
		else /* the members' lookups read the index: nothing deferred */
			CHECK(db == da,
			      "round %d: index decodes %" PRIu64 " in a batch, %" PRIu64
			      " one by one",
			      round, db, da);
		fs_close_core(fs);
	}
}

/* ---- reader streams (fetch/fetch.h) --------------------------------------------- */

#define ST_SHARDS  8
#define ST_MEMBERS 8

/* tmp/streams/d/s-N.tar: ST_SHARDS shards of ST_MEMBERS members m0..m7 of
 * 1000 bytes each (a shard is one unit of the cache: one fill). */
static void streams_source(void)
{
	struct member m[ST_MEMBERS];
	char names[ST_MEMBERS][8], rel[64];
	char *data = pattern("stream-", 1000);

	make_dir("../streams");
	make_dir("../streams/d");
	for (int i = 0; i < ST_MEMBERS; i++) {
		snprintf(names[i], sizeof(names[i]), "m%d", i);
		m[i] = (struct member){names[i], '0', data};
	}
	for (int k = 0; k < ST_SHARDS; k++) {
		snprintf(rel, sizeof(rel), "../streams/d/s-%d.tar", k);
		write_shard(rel, m, ST_MEMBERS);
	}
	free(data);
}

/* The core on fault://tmp/streams (a remote store: fills are counted),
 * fetching one shard ahead of a reader in order, its cache in cache-NAME. */
static void streams_open(struct fs **fs, const char *name)
{
	char cache[4096], src[4096], mnt[4096];
	char *argv[] = {"--cache-dir", cache, "--warm", "off", "--prefetch-shards",
			"1",	       src,   mnt,	NULL};
	struct fs_config cfg;

	snprintf(cache, sizeof(cache), "%s/cache-%s", tmp, name);
	snprintf(src, sizeof(src), "fault://%s/streams", tmp);
	snprintf(mnt, sizeof(mnt), "%s/mnt", tmp);
	memset(&cfg, 0, sizeof(cfg));
	if (fs_opt_parse_mount(8, argv, &cfg) != 0 || fs_open(&cfg, 0, fs) != 0) {
		fprintf(stderr, "streams: opening the core failed\n");
		exit(1);
	}
}

/* reader reads member m of shard k (4 KiB from its start). */
static void streams_read(struct fs *fs, uint32_t reader, int k, int m)
{
	char path[64];
	struct fs_read r;
	int64_t ino;

	snprintf(path, sizeof(path), "d/s-%d/m%d", k, m);
	ino = walk(fs, path);
	CHECK(ino > 0 && fs_op_read_by(fs, (uint64_t)ino, 0, 0, 4096, reader, &r) == 0 &&
		  r.len == 1000,
	      "reader %u: read %s", reader, path);
	fs_op_read_done(&r);
}

/* Every fill and shard prefetch of fs ended (bounded: 60 s); the store's
 * fills then. */
static uint64_t streams_fills(struct fs *fs)
{
	struct cachetier_stats st;

	for (int i = 0; i < 6000; i++) {
		int running = 0;

		for (uint32_t o = 0; o < fs->nobjs; o++) {
			struct cachetier_obj *raw;

			if (fs_obj_raw(fs, o, &raw) == 0)
				running |= cachetier_obj_prefetch_state(raw, NULL);
		}
		cachetier_get_stats(fs->ct, &st);
		if (!running && st.fills_inflight == 0)
			return st.fills;
		usleep(10000);
	}
	CHECK(0, "streams: fills still running after 60 s");
	return 0;
}

/* ctl sent to fs: fs_ctl_command's answer. */
static int ctl(struct fs *fs, const char *line)
{
	return fs_ctl_command(fs, line, strlen(line), 1, NULL);
}

/* 'prefetch-check MS [PATH]' (fs_ctl.c), exact answers on fault://
 * (a remote store: nothing is cached until fetched): a shard never
 * prefetched is FS_CTL_CHECK_MISSING; once a prefetch of it ended,
 * FS_CTL_CHECK_CACHED, also for a member of it (a member names its whole
 * shard, looked up or not); a directory with one of its shards not
 * cached, MISSING; a path not in the mount, or below a file, -ENOENT; a bad MS -EINVAL. A check
 * begins no run, asks for no fill and, unless refused, counts one prefetch wait. */
static void test_prefetch_check(void)
{
	struct cachetier_stats st0, st1;
	uint64_t waits0, before;
	struct fs *fs;
	char line[64];
	int r = -1, run0;

	streams_open(&fs, "pfcheck");
	run0 = fs_ctl_run(fs, &before);
	waits0 = fs->c.prefetch_waits;
	cachetier_get_stats(fs->ct, &st0);
	CHECK(ctl(fs, "prefetch-check 0 d/s-0.tar\n") == FS_CTL_CHECK_MISSING,
	      "pfcheck: never prefetched: MISSING");
	CHECK(ctl(fs, "prefetch-check 0 d\n") == FS_CTL_CHECK_MISSING,
	      "pfcheck: a directory never prefetched: MISSING");
	CHECK(ctl(fs, "prefetch-check 0\n") == FS_CTL_CHECK_MISSING,
	      "pfcheck: everything: MISSING");
	CHECK(ctl(fs, "prefetch-check 0 nope\n") == -ENOENT, "pfcheck: not in the mount: ENOENT");
	CHECK(ctl(fs, "prefetch-check 0 d/nope.tar\n") == -ENOENT, "pfcheck: not in d: ENOENT");
	snprintf(line, sizeof(line), "prefetch-check %d d/s-0.tar\n", FS_CTL_WAIT_MAX_MS + 1);
	CHECK(ctl(fs, line) == -EINVAL, "pfcheck: MS above FS_CTL_WAIT_MAX_MS: EINVAL");
	CHECK(ctl(fs, "prefetch-check x d/s-0.tar\n") == -EINVAL, "pfcheck: MS not a number");
	cachetier_get_stats(fs->ct, &st1);
	CHECK(fs_ctl_run(fs, &before) == run0, "pfcheck: no run begun by the checks");
	CHECK(st1.fills == st0.fills, "pfcheck: no fill asked by the checks: %llu -> %llu",
	      (unsigned long long)st0.fills, (unsigned long long)st1.fills);
	/* a check refused (ENOENT, EINVAL) does not wait */
	CHECK(fs->c.prefetch_waits - waits0 == 3, "pfcheck: 3 checks waited, counted %llu",
	      (unsigned long long)(fs->c.prefetch_waits - waits0));
	CHECK(ctl(fs, "prefetch-start\n") == 0 && ctl(fs, "prefetch d/s-0.tar\n") == 0,
	      "pfcheck: prefetch d/s-0.tar");
	/* the wait: FS_CTL_WAIT_MAX_MS a check, 60 s in all */
	for (int i = 0; i < 60 * 1000 / FS_CTL_WAIT_MAX_MS; i++) {
		snprintf(line, sizeof(line), "prefetch-check %d d/s-0.tar\n", FS_CTL_WAIT_MAX_MS);
		r = ctl(fs, line);
		if (r != FS_CTL_CHECK_RUNNING)
			break;
	}
	CHECK(r == FS_CTL_CHECK_CACHED, "pfcheck: prefetched: CACHED, got %d", r);
	CHECK(ctl(fs, "prefetch-check 0 d/s-0.tar\n") == FS_CTL_CHECK_CACHED,
	      "pfcheck: again at once: CACHED");
	CHECK(ctl(fs, "prefetch-check 0 d/s-0\n") == FS_CTL_CHECK_CACHED,
	      "pfcheck: its member directory: CACHED");
	r = ctl(fs, "prefetch-check 0 d/s-0/m3\n");
	CHECK(r == FS_CTL_CHECK_CACHED, "pfcheck: a member of it: CACHED, got %d", r);
	CHECK(ctl(fs, "prefetch-check 0 d/s-1.tar\n") == FS_CTL_CHECK_MISSING,
	      "pfcheck: another shard: MISSING");
	CHECK(ctl(fs, "prefetch-check 0 d\n") == FS_CTL_CHECK_MISSING,
	      "pfcheck: d, one shard of 8 cached: MISSING");
	/* below a shard's directory the mount looks up no member: the whole
	 * shard ('shardfs prefetch' checks its PATHs itself, fs_prefetch.c) */
	r = ctl(fs, "prefetch-check 0 d/s-0/nope\n");
	CHECK(r == FS_CTL_CHECK_CACHED, "pfcheck: below s-0/: the shard, CACHED, got %d", r);
	r = ctl(fs, "prefetch-check 0 d/s-0.tar/x\n");
	CHECK(r == -ENOENT, "pfcheck: below a file: ENOENT, got %d", r);
	fs_close_core(fs);
}

/* Two readers each reading a different shard in order on one mount, one
 * read each in turn: reader 100 shards 0, 1, 2 and reader 200 shards 4, 5,
 * 6, each shard's 8 members in order. Each has its own shard cursor
 * (fetch_shard_read), so each move to the next shard after 8 reads fetches
 * the shard after it (--prefetch-shards 1): shards 2, 3, 6 and 7, four
 * shard prefetches, and the store fills shards 0-3 and 4-7 once each: 8
 * fills. One cursor for the mount (c787ef0: the other reader's read in
 * between breaks every run) gives no shard prefetch and 6 fills. */
static void test_streams_two_readers(void)
{
	struct fs *fs;
	uint64_t fills;

	streams_open(&fs, "streams-two");
	for (int k = 0; k < 3; k++)
		for (int m = 0; m < ST_MEMBERS; m++) {
			streams_read(fs, 100, k, m);
			streams_read(fs, 200, 4 + k, m);
		}
	fills = streams_fills(fs);
	printf("streams: two readers in order: shard_prefetches %llu fills %llu\n",
	       (unsigned long long)fs->c.shard_prefetches, (unsigned long long)fills);
	CHECK(fs->c.shard_prefetches == 4 && fills == 8,
	      "two readers in order: shard_prefetches %llu (want 4), fills %llu (want 8)",
	      (unsigned long long)fs->c.shard_prefetches, (unsigned long long)fills);
	fs_close_core(fs);
}

/* A plan and an unplanned reader on one mount: reader 300 reads the
 * planned paths (one member of each of shards 7, 5, 4, 6, in that order,
 * twice round), reader 400 reads shards 0, 1, 2 in order, one read each in
 * turn. The plan's reads mark the plan (8 read, position 8) and nothing of
 * reader 400's; reader 400 keeps its cursor through the planned reads:
 * shards 2 and 3 fetched ahead (2 shard prefetches), 8 fills (shards 0-3,
 * the plan's 4-7). One cursor for the mount (c787ef0) gives none and 7. */
static void test_streams_plan(void)
{
	static const int order[] = {7, 5, 4, 6};
	const char lines[] = "d/s-7/m0\nd/s-5/m1\nd/s-4/m2\nd/s-6/m3\n"
			     "d/s-7/m4\nd/s-5/m5\nd/s-4/m6\nd/s-6/m7\n";
	char file[4096], cmd[4200];
	struct fs_plan *p;
	struct fs_plan_info in;
	struct fs *fs;
	uint64_t fills;
	int planned = 0;

	streams_open(&fs, "streams-plan");
	snprintf(file, sizeof(file), "%s/streams-plan.txt", tmp);
	write_file("../streams-plan.txt", lines, sizeof(lines) - 1);
	snprintf(cmd, sizeof(cmd), "plan p %s\n", file);
	CHECK(fs_ctl_command(fs, cmd, strlen(cmd), 300, NULL) == 0, "streams: plan p");
	for (int k = 0; k < 3; k++)
		for (int m = 0; m < ST_MEMBERS; m++) {
			streams_read(fs, 400, k, m);
			if ((m & 1) == 0 && planned < 8) {
				streams_read(fs, 300, order[planned % 4], planned);
				planned++;
			}
		}
	fills = streams_fills(fs);
	CHECK(fs_plan_list(fs, &p, 1) == 1, "streams: the plan");
	fs_plan_get_info(p, &in);
	fs_plan_put(p);
	printf("streams: a plan and a reader in order: plan read %u position %u, "
	       "shard_prefetches %llu fills %llu\n",
	       in.read, in.position, (unsigned long long)fs->c.shard_prefetches,
	       (unsigned long long)fills);
	CHECK(planned == 8 && in.read == 8 && in.position == 8,
	      "the plan: %d planned reads, %u read, position %u", planned, in.read, in.position);
	CHECK(fs->c.shard_prefetches == 2 && fills == 8,
	      "a plan and a reader in order: shard_prefetches %llu (want 2), fills %llu (want 8)",
	      (unsigned long long)fs->c.shard_prefetches, (unsigned long long)fills);
	fs_close_core(fs);
}

/* What the generic code asks the imagefolder layout (fs_view.h): prepare
 * builds the view; stats name it; a plan resolves an image file to its
 * member's bytes (the view's member_of), and a read of the file marks the
 * plan's path read. */
static void test_imagefolder_hooks(void)
{
	struct fs *fs;
	struct fs_plan *p;
	struct fs_plan_info in;
	struct fs_plan_extent x[4];
	struct fs_stats_doc d;
	struct stat sb;
	uint32_t idx[4], from = 0;
	char file[4096], cmd[4200], *st = NULL, *text;
	size_t stl = 0;
	const char lines[] = "3/s0.jpg\n1/s2.png\n3/nope.jpg\n";

	/* the shards' .cls values are 1 and 3: refused (0 and 2 missing) ... */
	fs_open_core_at(&fs, "imagefolder", NULL, "gaps");
	CHECK(fs_layout_of(fs)->prepare(fs) == -EINVAL, ".cls values 1 and 3: prepare refuses");
	fs_close_core(fs);
	/* ... unless --class-gaps empty: classes 0..3, 0 and 2 without files */
	fs_open_core(&fs, "imagefolder");
	fs->cfg.class_gaps = FS_GAPS_EMPTY;
	/* what the mount calls before it answers: the view built and published */
	CHECK(fs_layout_of(fs)->prepare && fs_layout_of(fs)->prepare(fs) == 0 && fs_if_ready(fs) &&
		  fs->c.if_images > 0,
	      "prepare: %llu images", (unsigned long long)fs->c.if_images);
	CHECK(fs_ctl_render(fs, FS_CTL_STATS, &st, &stl) == 0 && st, "render stats");
	text = st ? strndup(st, stl) : NULL;
	CHECK(text && fs_stats_parse(text, &d) == 0, "stats parses");
	CHECK(fs_stats_get(&d, "layout") && strcmp(fs_stats_get(&d, "layout"), "imagefolder") == 0,
	      "layout %s", fs_stats_get(&d, "layout"));
	fs_stats_doc_free(&d);
	free(text);
	free(st);
	snprintf(file, sizeof(file), "%s/ifplan.txt", tmp);
	write_file("../ifplan.txt", lines, sizeof(lines) - 1);
	snprintf(cmd, sizeof(cmd), "plan if %s\n", file);
	CHECK(fs_ctl_command(fs, cmd, strlen(cmd), 1, NULL) == 0 && fs_plan_list(fs, &p, 1) == 1,
	      "plan of image files");
	fs_plan_get_info(p, &in);
	CHECK(in.paths == 2 && in.missing == 1 && fs_plan_ahead(p, &from, x, idx, 4) == 2,
	      "%u paths, %u missing", in.paths, in.missing);
	CHECK(fs_ino_kind(x[0].key) == FS_K_MEMBER && x[0].off == 512 && x[0].len == strlen(big0) &&
		  x[0].obj == fs_shard(fs, fs_ino_a(x[0].key))->obj,
	      "3/s0.jpg as its member: [%" PRIu64 ", +%" PRIu64 ")", x[0].off, x[0].len);
	CHECK(fs_ino_kind(x[1].key) == FS_K_MEMBER && fs_op_getattr(fs, x[1].key, &sb) == 0 &&
		  x[1].len == (uint64_t)sb.st_size && x[1].key != (uint64_t)walk(fs, "1/s2.png"),
	      "1/s2.png as its member");
	read_at(fs, walk(fs, "1/s2.png"), 0);
	fs_plan_get_info(p, &in);
	CHECK(in.read == 1 && in.position == 2, "a read of the image file: %u read, position %u",
	      in.read, in.position);
	fs_plan_put(p);
	fs_close_core(fs);
}

/* ---- indexes mapped while others reindex ------------------------------------------
 * Three readers read every member of remap/keep.tar through core A, walking
 * each path again, while: every index file is unlinked from the cache
 * directory, a second core on the same cache directory (a remount) indexes
 * the shards again and puts their files (renamed over the names A mapped)
 * and closes (unmapping its mappings), remap/change.tar is rewritten and A
 * indexes its new version, and a third core loads the files B wrote. A's
 * mapping of keep.tar's index is the file it mapped first to the end: every
 * read is exact. */

#define REMAP_N 24

static char remap_names[REMAP_N][32], remap_data[2][REMAP_N][64];
static atomic_int remap_stop;

/* The members' names and both versions' bytes: filled once, before any
 * reader runs. */
static void remap_init(void)
{
	for (int i = 0; i < REMAP_N; i++) {
		snprintf(remap_names[i], sizeof(remap_names[i]), "k%02d.%s", i / 2,
			 i % 2 ? "cls" : "jpg");
		for (int v = 0; v < 2; v++)
			snprintf(remap_data[v][i], sizeof(remap_data[v][i]),
				 "version %d member %d %.*s\n", v, i, i,
				 "abcdefghijklmnopqrstuvwxyz");
	}
}

static void remap_members(struct member *m, int version)
{
	for (int i = 0; i < REMAP_N; i++) {
		m[i].name = remap_names[i];
		m[i].type = '0';
		m[i].data = remap_data[version][i];
	}
}

static void *remap_reader(void *arg)
{
	struct fs *fs = arg;
	char *got = malloc(4096), path[64];
	char first[128] = "";
	struct member m[REMAP_N];
	long rounds = 0, reads = 0, bad = 0;

	remap_members(m, 0);
	while (!atomic_load(&remap_stop) || rounds < 3) {
		for (int i = 0; i < REMAP_N; i++) {
			int64_t ino;
			size_t len = 0;
			int err;

			snprintf(path, sizeof(path), "remap/keep/%s", m[i].name);
			ino = walk_by(fs, path, 0);
			err = ino > 0 ? read_all(fs, (uint64_t)ino, 7, got, 4096, &len) : (int)ino;
			reads++;
			if (err == 0 && len == strlen(m[i].data) && !memcmp(got, m[i].data, len))
				continue;
			if (!bad++)
				snprintf(first, sizeof(first), "%s: %d, %zu bytes", path, err, len);
		}
		rounds++;
	}
	/* one check a reader: how many rounds it makes depends on the machine */
	CHECK(bad == 0, "reader: %ld of %ld reads wrong, the first %s", bad, reads, first);
	free(got);
	return NULL;
}

static void check_remap(struct fs *fs, int change_version)
{
	struct member m[REMAP_N];
	char path[64];

	remap_members(m, 0);
	for (int i = 0; i < REMAP_N; i += 5) {
		snprintf(path, sizeof(path), "remap/keep/%s", m[i].name);
		check_bytes(fs, path, m[i].data, strlen(m[i].data));
	}
	remap_members(m, change_version);
	for (int i = 0; i < REMAP_N; i += 3) {
		snprintf(path, sizeof(path), "remap/change/%s", m[i].name);
		check_bytes(fs, path, m[i].data, strlen(m[i].data));
	}
}

static void test_remap(void)
{
	struct member m[REMAP_N];
	struct fs *a, *b;
	pthread_t th[3];
	char cmd[4200];
	unsigned long long built;

	make_dir("remap");
	remap_init();
	remap_members(m, 0);
	write_shard("remap/keep.tar", m, REMAP_N);
	write_shard("remap/change.tar", m, REMAP_N);
	fs_open_core(&a, "shards");
	check_remap(a, 0);
	CHECK(a->c.index_mapped_bytes > 0, "A maps its indexes");
	for (int t = 0; t < 3; t++)
		pthread_create(&th[t], NULL, remap_reader, a);

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'/meta/*", cachetier_dir(a->ct));
	CHECK(system(cmd) == 0, "unlink the index files");
	fs_open_core(&b, "shards");
	check_remap(b, 0);
	CHECK(b->c.index_built >= 2 && b->c.index_loaded == 0,
	      "B indexes again: built %llu, loaded %llu", (unsigned long long)b->c.index_built,
	      (unsigned long long)b->c.index_loaded);
	fs_close_core(b);

	remap_members(m, 1);
	write_shard("remap/change.tar", m, REMAP_N);
	built = a->c.index_built;
	check_remap(a, 1);
	CHECK(a->c.index_built == built + 1, "A indexes change.tar's new version");
	CHECK(fs_ns_refresh(a) == 0, "refresh");

	/* the old version's index went when the new one was saved: one blob
	 * a shard stays in the cache directory, however often shards change */
	CHECK(a->c.index_removed == 1, "A removed change.tar's old index: %llu",
	      (unsigned long long)a->c.index_removed);
	snprintf(cmd, sizeof(cmd), "test $(find '%s'/meta -type f | wc -l) -eq 2",
		 cachetier_dir(a->ct));
	CHECK(system(cmd) == 0, "two index blobs for two shards");
	/* as a release before blob families saved them: plain blobs in meta/ */
	snprintf(cmd, sizeof(cmd), "cd '%s'/meta && mv f-*/* . && rmdir f-*", cachetier_dir(a->ct));
	CHECK(system(cmd) == 0, "move the index blobs out of their families");

	fs_open_core(&b, "shards");
	check_remap(b, 1);
	CHECK(b->c.index_built == 0 && b->c.index_loaded == 2,
	      "a third core loads what the others saved (plain blobs adopted): built %llu, "
	      "loaded %llu",
	      (unsigned long long)b->c.index_built, (unsigned long long)b->c.index_loaded);
	fs_close_core(b);
	snprintf(cmd, sizeof(cmd),
		 "test $(find '%s'/meta -maxdepth 1 -type f | wc -l) -eq 0 && "
		 "test $(find '%s'/meta -mindepth 2 -type f | wc -l) -eq 2",
		 cachetier_dir(a->ct), cachetier_dir(a->ct));
	CHECK(system(cmd) == 0, "the plain blobs moved into their families");

	atomic_store(&remap_stop, 1);
	for (int t = 0; t < 3; t++)
		pthread_join(th[t], NULL);
	check_remap(a, 1);
	fs_close_core(a);
}

/* collect, with a '+' after each name listed with attributes (an inode);
 * a name without one must still carry its inode number and type. */
static int collect_attrs(void *ctx, const char *name, const struct fs_entry *e, uint64_t next)
{
	struct names *l = ctx;
	size_t len;

	if (collect(ctx, name, e, next))
		return 1;
	len = strlen(l->text);
	if (e->ino)
		snprintf(l->text + len, sizeof(l->text) - len, "+");
	else if (strcmp(name, ".") && strcmp(name, ".."))
		CHECK(e->attr.st_ino != 0 && (S_ISREG(e->attr.st_mode) || S_ISLNK(e->attr.st_mode)),
		      "%s listed without attributes: st_ino %" PRIu64 " mode %o", name,
		      (uint64_t)e->attr.st_ino, (unsigned)e->attr.st_mode);
	return 0;
}

/* The listing of path from offset off (stopping after stop entries, 0: none)
 * marked by collect_attrs. */
static const char *list_attrs(struct fs *fs, const char *path, uint64_t off, unsigned stop,
			      struct names *l)
{
	int64_t ino = walk(fs, path);

	memset(l, 0, sizeof(*l));
	l->stop_after = stop;
	CHECK(ino > 0 && fs_op_readdir(fs, (uint64_t)ino, off, collect_attrs, l) == 0, "readdir %s",
	      path);
	return l->text;
}

/* --listing-attrs auto (the default): files are listed by name and type
 * until a file of their directory is looked up; directories always carry
 * attributes; listed_names_only counts the entries given without. */
static void test_listing_attrs(void)
{
	struct fs *fs;
	struct names l;
	unsigned long long before;
	uint64_t decodes;

	fs_open_core_at(&fs, "shards", NULL, "listing-attrs");
	CHECK(fs->cfg.listing_attrs == FS_LISTING_AUTO, "default --listing-attrs %d",
	      fs->cfg.listing_attrs);
	CHECK(strcmp(list_attrs(fs, "", 0, 0, &l), ". .. d+ train+ x x.tar") == 0, "root: %s",
	      l.text);
	CHECK(strcmp(list_attrs(fs, "train/shard-000000", 0, 0, &l),
		     ". .. d+ s0.cls s0.jpg s1.cls s1.jpg") == 0,
	      "shard-000000 before a lookup: %s", l.text);
	CHECK(fs->c.listed_names_only == 6, "listed_names_only %llu, want 2 + 4",
	      (unsigned long long)fs->c.listed_names_only);
	/* a reply that is full takes no more: the entry refused is not counted */
	CHECK(strcmp(list_attrs(fs, "train/shard-000001", 0, 4, &l), ". .. s0.cls s0.jpg") == 0,
	      "shard-000001 stopped: %s", l.text);
	CHECK(fs->c.listed_names_only == 8, "listed_names_only %llu, want 8",
	      (unsigned long long)fs->c.listed_names_only);
	/* neither a negative lookup nor a directory's marks a directory */
	CHECK(walk(fs, "train/shard-000001/nope") == 0 && walk(fs, "train") > 0 &&
		  walk(fs, "train/shard-000000/d") > 0,
	      "lookups of a missing name and of directories");
	CHECK(strcmp(list_attrs(fs, "train/shard-000001", 0, 0, &l),
		     ". .. s0.cls s0.jpg s2.cls s2.png s3.txt") == 0,
	      "shard-000001 after a negative lookup: %s", l.text);
	CHECK(strcmp(list_attrs(fs, "", 0, 0, &l), ". .. d+ train+ x x.tar") == 0,
	      "root after a directory's lookup: %s", l.text);
	/* a file looked up: every later listing of its directory, from any
	 * offset, gives attributes; other directories' do not change */
	CHECK(walk(fs, "train/shard-000000/s1.jpg") > 0, "lookup of s1.jpg");
	before = fs->c.listed_names_only;
	decodes = shardidx_decodes();
	CHECK(strcmp(list_attrs(fs, "train/shard-000000", 0, 0, &l),
		     ". .. d+ s0.cls+ s0.jpg+ s1.cls+ s1.jpg+") == 0,
	      "shard-000000 after a lookup: %s", l.text);
	/* its compact index decodes each name once, the attributes none (a
	 * fresh decode per ask: 1 + 2 + ... + 5 for the names, as many for the
	 * attributes, 30) */
	decodes = shardidx_decodes() - decodes;
	CHECK(decodes == 4,
	      "the listing of 5 members decoded %" PRIu64 " entries, want 4 (s1.jpg's "
	      "lookup left it decoded)",
	      decodes);
	CHECK(strcmp(list_attrs(fs, "train/shard-000000", 5, 0, &l), "s1.cls+ s1.jpg+") == 0,
	      "shard-000000 from offset 5: %s", l.text);
	CHECK(fs->c.listed_names_only == before, "listed_names_only %llu, want %llu",
	      (unsigned long long)fs->c.listed_names_only, before);
	CHECK(strcmp(list_attrs(fs, "train/shard-000000/d", 0, 0, &l), ". .. n.txt") == 0,
	      "d, a member directory of it: %s", l.text);
	CHECK(walk(fs, "x.tar") > 0 &&
		  strcmp(list_attrs(fs, "", 0, 0, &l), ". .. d+ train+ x+ x.tar+") == 0,
	      "root after a lookup of x.tar: %s", l.text);
	/* --listing-attrs all: every entry */
	fs->cfg.listing_attrs = FS_LISTING_ALL;
	before = fs->c.listed_names_only;
	CHECK(strcmp(list_attrs(fs, "train/shard-000001", 0, 0, &l),
		     ". .. s0.cls+ s0.jpg+ s2.cls+ s2.png+ s3.txt+") == 0,
	      "shard-000001 with --listing-attrs all: %s", l.text);
	CHECK(fs->c.listed_names_only == before, "listed_names_only %llu with all",
	      (unsigned long long)fs->c.listed_names_only);
	fs_close_core(fs);
}

/* collect_attrs with each name's file type given: NAME:T, T one of d, f, l
 * (S_IFDIR, S_IFREG, S_IFLNK), then '+' when listed with attributes. */
static int collect_types(void *ctx, const char *name, const struct fs_entry *e, uint64_t next)
{
	struct names *l = ctx;
	mode_t t = e->attr.st_mode & S_IFMT;
	size_t len;

	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return 0;
	if (collect(ctx, name, e, next))
		return 1;
	len = strlen(l->text);
	snprintf(l->text + len, sizeof(l->text) - len, ":%s%s",
		 t == S_IFDIR	? "d"
		 : t == S_IFREG ? "f"
		 : t == S_IFLNK ? "l"
				: "?",
		 e->ino ? "+" : "");
	return 0;
}

/* The entries a listing gave with attributes (up to 8), for comparing
 * them with each one's getattr. */
struct attrs_seen {
	unsigned n;
	struct fs_entry e[8];
};

static int collect_entries(void *ctx, const char *name, const struct fs_entry *e, uint64_t next)
{
	struct attrs_seen *a = ctx;

	(void)next;
	if (e->ino && strcmp(name, ".") && strcmp(name, "..") && a->n < 8)
		a->e[a->n++] = *e;
	return 0;
}

/* A lookup of name in parent on a thread of its own, in a FUSE request of
 * its own or not (req): its answer and the checks of the index's file. */
struct lookup_job {
	struct fs *fs;
	uint64_t parent;
	const char *name;
	int req;
	int err;
	struct fs_entry e;
	unsigned long long checks;
};

static void *lookup_job_run(void *arg)
{
	struct lookup_job *j = arg;
	unsigned long long c = j->fs->c.index_checks;

	if (j->req)
		fs_op_begin();
	j->err = fs_op_lookup(j->fs, j->parent, j->name, &j->e);
	j->checks = j->fs->c.index_checks - c;
	return NULL;
}

/* A member directory opened, or listed, on a thread that read no index
 * before (its cursors empty): the entries that decodes. */
struct dir_job {
	struct fs *fs;
	uint64_t ino;
	int list; /* 0: opendir */
	int req;  /* 1: in a FUSE request of its own (fs_op_begin first) */
	int err;
	uint64_t decodes;
	struct names l;
};

static void *dir_job_run(void *arg)
{
	struct dir_job *j = arg;
	uint64_t d = shardidx_decodes();

	if (j->req)
		fs_op_begin();
	j->err = j->list ? fs_op_readdir(j->fs, j->ino, 0, collect_types, &j->l)
			 : fs_op_opendir(j->fs, j->ino);
	j->decodes = shardidx_decodes() - d;
	return NULL;
}

/* A shard's members listed without attributes (find): each file by the
 * name and type its index entry gave the listing, no getattr asked, so
 * no check of the index's file but the listing's own two (a directory is
 * given with attributes, which came with its name too; a hard link's inode
 * is its target's: its getattr gives its type and checks). With attributes
 * (ls -lR) every entry but the hard link gets them with its name too.
 * index_checks counts the checks. */
static void test_listing_types(void)
{
	static const struct member m[] = {{"f", '0', "bytes of f\n"},
					  {"s", '2', "f"},
					  {"h", '1', "f"},
					  {"d", '5', NULL},
					  {"d/g", '0', "g\n"}};
	struct member m2[22] = {{"b", '5', NULL}, {"b/g", '0', "g\n"}};
	char src[4096], names[20][4];
	struct dir_job job;
	pthread_t th;
	struct fs *fs;
	struct names l;
	int64_t ino;
	unsigned long long checks;

	for (int k = 0; k < 20; k++) {
		snprintf(names[k], sizeof(names[k]), "c%02d", k);
		m2[2 + k] = (struct member){names[k], '0', "c\n"};
	}

	snprintf(src, sizeof(src), "%s/src-types", tmp);
	CHECK(mkdir(src, 0755) == 0, "mkdir %s", src);
	write_shard("../src-types/l.tar", m, sizeof(m) / sizeof(m[0]));
	/* b's child lies in the second block of 16 of the compact index */
	write_shard("../src-types/m.tar", m2, sizeof(m2) / sizeof(m2[0]));
	fs_open_core_at(&fs, "shards", src, "listing-types");
	ino = walk(fs, "m/b");
	CHECK(ino > 0, "walk m/b");
	/* opening it reads its directory row, listing it decodes its child
	 * from the head of that child's block: 16..21 (1, and 1 + 6 when its
	 * entry was decoded too) */
	for (int list = 0; list < 2; list++) {
		memset(&job, 0, sizeof(job));
		job.fs = fs;
		job.ino = (uint64_t)ino;
		job.list = list;
		CHECK(pthread_create(&th, NULL, dir_job_run, &job) == 0 &&
			  pthread_join(th, NULL) == 0,
		      "a thread");
		CHECK(job.err == 0 && (!list || strcmp(job.l.text, "g:f") == 0), "m/b %s: %d %s",
		      list ? "listed" : "opened", job.err, job.l.text);
		CHECK(job.decodes == (list ? 6u : 0u),
		      "%s m/b decoded %" PRIu64 " entries, want %u", list ? "listing" : "opening",
		      job.decodes, list ? 6u : 0u);
	}
	CHECK(fs_op_opendir(fs, (uint64_t)walk(fs, "m/c00")) == -ENOTDIR, "opendir of a file");
	ino = walk(fs, "l");
	CHECK(ino > 0 && walk(fs, "l/d") > 0, "walk l, l/d"); /* loads the index */
	for (int k = 0; k < 4; k++) {
		int attrs = k / 2, req = k % 2;
		/* the listing's own 2 (its start and end), + 2 for h, whose
		 * getattr answers (a hard link: its target's inode); d's and,
		 * with attributes, f's and s's came with their names. In a
		 * FUSE request (fs_op_begin) h's getattr's opening check
		 * (fs_shard_index) follows this thread's passed check of the
		 * same shard in the request and is skipped: 2 + 1; outside a
		 * request (a thread that never began one) every check is made.
		 * (Each entry's getattr asked: 6 and 10, 4 and 6 in a request.) */
		unsigned want = req ? 3u : 4u;

		fs->cfg.listing_attrs = attrs ? FS_LISTING_ALL : fs->cfg.listing_attrs;
		/* on a thread of its own: this one's request mark stays 0 */
		memset(&job, 0, sizeof(job));
		job.fs = fs;
		job.ino = (uint64_t)ino;
		job.list = 1;
		job.req = req;
		checks = fs->c.index_checks;
		CHECK(pthread_create(&th, NULL, dir_job_run, &job) == 0 &&
			  pthread_join(th, NULL) == 0,
		      "a thread");
		checks = fs->c.index_checks - checks;
		l = job.l;
		CHECK(job.err == 0, "readdir l: %d", job.err);
		CHECK(strcmp(l.text, attrs ? "d:d+ f:f+ h:f+ s:l+" : "d:d+ f:f h:f s:l") == 0,
		      "l listed %s attributes: %s", attrs ? "with" : "without", l.text);
		CHECK(checks == want,
		      "the listing %s attributes, %s a request, checked the index's file %llu "
		      "times, want %u",
		      attrs ? "with" : "without", req ? "in" : "outside", checks, want);
	}
	/* the attributes a listing gives are its entries' getattrs' to the
	 * byte, whichever gave them (d, f and s the listing's decode, h its
	 * target's getattr); each once, its inode too */
	for (int attrs = 0; attrs < 2; attrs++) {
		struct attrs_seen a;

		fs->cfg.listing_attrs = attrs ? FS_LISTING_ALL : FS_LISTING_LOOKED;
		memset(&a, 0, sizeof(a));
		CHECK(fs_op_readdir(fs, (uint64_t)ino, 0, collect_entries, &a) == 0, "readdir l");
		CHECK(a.n == (attrs ? 4u : 1u), "%u entries with attributes, want %u", a.n,
		      attrs ? 4u : 1u);
		for (unsigned k = 0; k < a.n; k++) {
			struct stat st;

			memset(&st, 0, sizeof(st));
			CHECK(fs_op_getattr(fs, a.e[k].ino, &st) == 0, "getattr %u", k);
			CHECK(memcmp(&st, &a.e[k].attr, sizeof(st)) == 0 &&
				  a.e[k].ino == (uint64_t)st.st_ino &&
				  a.e[k].timeout == fs_op_timeout(fs, a.e[k].ino),
			      "entry %u of l (listed %s attributes): mode %o nlink %lu size %lld "
			      "mtime %lld blocks %lld, its getattr: %o %lu %lld %lld %lld",
			      k, attrs ? "with" : "without", (unsigned)a.e[k].attr.st_mode,
			      (unsigned long)a.e[k].attr.st_nlink, (long long)a.e[k].attr.st_size,
			      (long long)a.e[k].attr.st_mtim.tv_sec,
			      (long long)a.e[k].attr.st_blocks, (unsigned)st.st_mode,
			      (unsigned long)st.st_nlink, (long long)st.st_size,
			      (long long)st.st_mtim.tv_sec, (long long)st.st_blocks);
		}
	}
	/* a lookup in l checks the index's file once after its reads: a name
	 * found by its getattr's check (before it answers), a name missed by
	 * its own; and before them at the request's first index (outside a
	 * request the getattr's opening check too) */
	for (int k = 0; k < 4; k++) {
		int found = k / 2, req = k % 2;
		unsigned want = found && !req ? 3u : 2u;
		struct lookup_job lj;

		memset(&lj, 0, sizeof(lj));
		lj.fs = fs;
		lj.parent = (uint64_t)ino;
		lj.name = found ? "f" : "nope";
		lj.req = req;
		CHECK(pthread_create(&th, NULL, lookup_job_run, &lj) == 0 &&
			  pthread_join(th, NULL) == 0,
		      "a thread");
		CHECK(lj.err == 0 && (lj.e.ino != 0) == found &&
			  (!found || S_ISREG(lj.e.attr.st_mode)),
		      "lookup of %s: %d, ino %" PRIu64, lj.name, lj.err, lj.e.ino);
		CHECK(lj.checks == want,
		      "a lookup of a name %s, %s a request, checked the index's file %llu times, "
		      "want %u",
		      found ? "found" : "missed", req ? "in" : "outside", lj.checks, want);
	}
	fs_close_core(fs);
}

/* ---- a member's tar header against its index entry (shardidx_check_header) -- */

static void reseal(char *h)
{
	unsigned sum = 0;

	memset(h + 148, ' ', 8);
	for (int k = 0; k < 512; k++)
		sum += (unsigned char)h[k];
	snprintf(h + 148, 8, "%06o", sum);
}

static void test_header_check(void)
{
	struct member m[] = {{"d/sub/k0.bin", '0', "hello, world"}};
	struct shardidx_entry e = {
	    .name = "k0.bin", .type = SHARDIDX_REG, .size = 12, .data_off = 512};
	char *tar, h[512], data[512];
	size_t len = tar_write(m, 1, &tar);

	CHECK(len >= 1024, "archive of %zu bytes", len);
	memcpy(h, tar, 512);
	CHECK(shardidx_check_header(h, &e) == 0, "the member's own header");
	e.size = 13;
	CHECK(shardidx_check_header(h, &e) == -ESTALE, "another size");
	e.size = 12;
	snprintf(e.name, sizeof(e.name), "%s", "k1.bin");
	CHECK(shardidx_check_header(h, &e) == -ESTALE, "another name");
	snprintf(e.name, sizeof(e.name), "%s", "k0.bin");
	e.type = SHARDIDX_DIR;
	CHECK(shardidx_check_header(h, &e) == -ESTALE, "a directory entry");
	e.type = SHARDIDX_SYMLINK;
	CHECK(shardidx_check_header(h, &e) == -ESTALE, "a symlink entry");
	e.type = SHARDIDX_REG;
	/* a byte changed after the checksum was made */
	h[0] ^= 1;
	CHECK(shardidx_check_header(h, &e) == -EBADMSG, "a bad checksum");
	h[0] ^= 1;
	/* member data where a header should be */
	memset(data, 'x', sizeof(data));
	CHECK(shardidx_check_header(data, &e) == -EBADMSG, "data bytes");
	memset(data, 0, sizeof(data));
	CHECK(shardidx_check_header(data, &e) == -EBADMSG, "a zero block");
	/* the ustar prefix field: prefix "a/b", name "k0.bin" */
	memset(h, 0, 100);
	memcpy(h, "k0.bin", 6);
	memcpy(h + 345, "a/b", 3);
	reseal(h);
	CHECK(shardidx_check_header(h, &e) == 0, "a name split into prefix and name");
	/* contiguous file type '7' and a v7 NUL type are regular files */
	h[156] = '7';
	reseal(h);
	CHECK(shardidx_check_header(h, &e) == 0, "type 7");
	h[156] = '\0';
	reseal(h);
	CHECK(shardidx_check_header(h, &e) == 0, "type NUL");
	h[156] = '1';
	reseal(h);
	CHECK(shardidx_check_header(h, &e) == -ESTALE, "a hard link header");
	h[156] = '0';
	/* a full name field: the name came in a long-name header, not compared */
	memset(h, 'n', 100);
	memset(h + 345, 0, 155);
	reseal(h);
	CHECK(shardidx_check_header(h, &e) == 0, "a full name field");
	/* non-ASCII names came in a pax header: not compared */
	memset(h, 0, 100);
	memcpy(h, "k?.bin", 6);
	reseal(h);
	CHECK(shardidx_check_header(h, &e) == -ESTALE, "an ASCII name differs");
	snprintf(e.name, sizeof(e.name), "%s", "k\xc3\xa9.bin");
	CHECK(shardidx_check_header(h, &e) == 0, "a non-ASCII name");
	snprintf(e.name, sizeof(e.name), "%s", "k?.bin");
	/* sizes past the octal field: base-256 compared, an octal field not */
	e.size = 1ull << 36;
	CHECK(shardidx_check_header(h, &e) == 0, "a pax size over the octal field");
	memset(h + 124, 0, 12);
	h[124] = (char)0x80;
	h[131] = 0x10; /* 2^36: byte 7 of the 11 after the marker */
	reseal(h);
	CHECK(shardidx_check_header(h, &e) == 0, "a base-256 size");
	e.size = (1ull << 36) + 1;
	CHECK(shardidx_check_header(h, &e) == -ESTALE, "a base-256 size that differs");
	CHECK(shardidx_check_header(NULL, &e) == -EINVAL, "NULL header");
	free(tar);
}

/* The lifecycle test's notifier operations: count what is sent. */
static atomic_int lc_inval_inodes, lc_inval_entries;

static void lc_inval_inode(void *ctx, uint64_t ino)
{
	lc_inval_inodes++;
}

static void lc_inval_entry(void *ctx, uint64_t parent, const char *name, size_t len)
{
	lc_inval_entries++;
}

static const struct fs_notify_ops lc_notify_ops = {lc_inval_inode, lc_inval_entry};

/* fs_open of argv[0..argc) as a mount opens it (FS_OPEN_MOUNT): 0 and *out, or the
 * error, checked with what in its messages. */
static int mount_open(const char *what, int argc, char **argv, struct fs **out)
{
	struct fs_config cfg;
	int err;

	*out = NULL;
	memset(&cfg, 0, sizeof(cfg));
	err = fs_opt_parse_mount(argc, argv, &cfg);
	CHECK(err == 0, "%s: options: %d", what, err);
	if (err) {
		fs_opt_free(&cfg);
		return err;
	}
	err = fs_open(&cfg, FS_OPEN_MOUNT, out);
	CHECK(err == 0, "%s: fs_open: %s", what, strerror(-err));
	return err;
}

/* The lifecycle with the core's threads running: a remote source
 * (fault://) opened as a mount opens it (FS_OPEN_MOUNT, in the foreground so
 * the log stays on stderr) with --warm all starts the warm thread and the
 * plan fetcher; the notifier starts as the FUSE adapter starts it and sends
 * what is queued; fs_close (after fs_cancel, or alone) stops and joins all
 * three while the warm's fills may still run, and frees everything (the
 * ASan build's leak check). */
static void test_lifecycle(void)
{
	char cache[4096], src[4096], mnt[4096];
	char *argv[] = {"-f", "--cache-dir", cache, "--warm", "all", src, mnt, NULL};

	snprintf(cache, sizeof(cache), "%s/cache-lifecycle", tmp);
	snprintf(src, sizeof(src), "fault://%s/src", tmp);
	snprintf(mnt, sizeof(mnt), "%s/mnt", tmp);
	for (int cancel = 0; cancel < 2; cancel++) {
		struct fs *fs;
		int err;

		if (mount_open("lifecycle", 7, argv, &fs) < 0)
			continue;
		CHECK(fs_warm_running(fs) && fs->pfx.run == 1,
		      "lifecycle: the warm thread (%d) and the plan fetcher (%d) run",
		      fs_warm_running(fs), fs->pfx.run);
		lc_inval_inodes = lc_inval_entries = 0;
		fs_notify_inode(fs, 7); /* dropped: the notifier has not started */
		err = fs_notify_start(fs, &lc_notify_ops, NULL);
		CHECK(err == 0 && fs_notify_running(fs), "lifecycle: the notifier starts: %d", err);
		fs_notify_inode(fs, 7);
		fs_notify_entry(fs, 1, "x", 1);
		fs_notify_drain(fs, 30);
		CHECK(
		    lc_inval_inodes == 1 && lc_inval_entries == 1,
		    "lifecycle: the notifier sent %d inode and %d entry invalidations, not 1 and 1",
		    (int)lc_inval_inodes, (int)lc_inval_entries);
		if (!cancel) /* as the adapter does before fs_close, which stops it again */
			CHECK(fs_notify_stop(fs) == 0 && !fs_notify_running(fs),
			      "lifecycle: the notifier stops");
		if (cancel)
			fs_cancel(fs);
		fs_close(fs);
	}
}

/* The stuck-notifier test's operation: it enters, then holds the send up until the test
 * releases it (as the kernel may hold an invalidation up while it waits for the very request
 * that noticed the change), at most NS_HOLD_S so that a stop that never returns fails the
 * test instead of hanging it. */
#define NS_HOLD_S (6 * FS_THREAD_JOIN_S)
static pthread_mutex_t ns_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ns_cond = PTHREAD_COND_INITIALIZER;
static int ns_entered, ns_release;

/* Wait on ns_cond until *flag reaches want or NS_HOLD_S pass: 1 if it did. ns_lock held. */
static int ns_wait(const int *flag, int want)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += NS_HOLD_S;
	while (*flag < want)
		if (pthread_cond_timedwait(&ns_cond, &ns_lock, &ts) != 0)
			break;
	return *flag >= want;
}

static void ns_inval_inode(void *ctx, uint64_t ino)
{
	pthread_mutex_lock(&ns_lock);
	ns_entered++;
	pthread_cond_broadcast(&ns_cond);
	ns_wait(&ns_release, 1);
	pthread_mutex_unlock(&ns_lock);
}

static const struct fs_notify_ops ns_notify_ops = {ns_inval_inode, lc_inval_entry};

/* The notifier's bounded stop (fs_thread.c): while a send is held up, fs_notify_stop gives
 * up on the join (-ETIMEDOUT; after FS_THREAD_JOIN_S in a daemon, at once here: the join's
 * bound lowered to 0 s, fs_notify_join_bound) and says the notifier still runs,
 * and drops what was queued behind the held send; once the send returns, the next stop
 * joins it (0) and fs_close frees everything (the ASan build's leak check). Nothing here
 * depends on time: the send cannot return before the test releases it. */
static void test_notify_stuck(void)
{
	char cache[4096], src[4096], mnt[4096];
	char *argv[] = {"-f", "--cache-dir", cache, src, mnt, NULL};
	struct fs *fs;
	int err, entered;

	snprintf(cache, sizeof(cache), "%s/cache-notify", tmp);
	snprintf(src, sizeof(src), "fault://%s/src", tmp);
	snprintf(mnt, sizeof(mnt), "%s/mnt", tmp);
	if (mount_open("notify stuck", 5, argv, &fs) < 0)
		return;
	lc_inval_entries = 0;
	err = fs_notify_start(fs, &ns_notify_ops, NULL);
	CHECK(err == 0 && fs_notify_running(fs), "notify stuck: the notifier starts: %d", err);
	fs_notify_inode(fs, 7);
	pthread_mutex_lock(&ns_lock);
	entered = ns_wait(&ns_entered, 1);
	pthread_mutex_unlock(&ns_lock);
	CHECK(entered, "notify stuck: the notifier did not send within %d s", NS_HOLD_S);
	fs_notify_inode(fs, 8);		/* queued behind the held send */
	fs_notify_entry(fs, 1, "x", 1); /* ditto */
	/* the held send cannot return before the release below: a stop that
	 * joins only an ended thread gives up at once, no time passes */
	fs_notify_join_bound(fs, 0);
	fprintf(stderr, "notify stuck: a stop while a send is held; its error 'notifier: its "
			"thread did not end within 0 s' is expected\n");
	err = fs_notify_stop(fs);
	CHECK(err == -ETIMEDOUT && fs_notify_running(fs),
	      "notify stuck: the stop of a held notifier gives %d (running %d), not -ETIMEDOUT "
	      "(running 1)",
	      err, fs_notify_running(fs));
	pthread_mutex_lock(&ns_lock);
	ns_release = 1;
	pthread_cond_broadcast(&ns_cond);
	pthread_mutex_unlock(&ns_lock);
	fs_notify_join_bound(fs, FS_THREAD_JOIN_S); /* the send returns: a bounded join */
	err = fs_notify_stop(fs);
	CHECK(err == 0 && !fs_notify_running(fs),
	      "notify stuck: once the send returned, the stop joins: %d (running %d)", err,
	      fs_notify_running(fs));
	CHECK(ns_entered == 1 && lc_inval_entries == 0,
	      "notify stuck: %d inode and %d entry sends, not 1 and 0 (what was queued behind the "
	      "held send is dropped at the stop)",
	      ns_entered, (int)lc_inval_entries);
	fs_close(fs);
}

/* ---- an index file cut between a member operation's check and its reads ------ */

/* cachetier_meta_changed, wrapped (meson: -Wl,--wrap=cachetier_meta_changed): once
 * armed, the next call that finds its blob unchanged cuts cut_path to nothing before it
 * returns. The member operation that asked then reads its mapped index after the cut
 * (the guard's zeros, cachetier_guard.c): the race of mount-indexmap-race, a file cut
 * between an operation's check (fs_shard_index) and its reads, made without timing. */
int __real_cachetier_meta_changed(struct cachetier_meta *m);
int __wrap_cachetier_meta_changed(struct cachetier_meta *m);
static char cut_path[4096];
static atomic_int cut_armed;

int __wrap_cachetier_meta_changed(struct cachetier_meta *m)
{
	int changed = __real_cachetier_meta_changed(m);

	/* cut_armed n: the n-th such call cuts (1: the next) */
	if (!changed && atomic_load(&cut_armed) > 0 && atomic_fetch_sub(&cut_armed, 1) == 1 &&
	    truncate(cut_path, 0) < 0)
		FAIL("truncate %s: %s", cut_path, strerror(errno));
	return changed;
}

#define CUT_N 40

/* collect, each name with its size: "name:size"; an entry without attributes "name:?". */
static int collect_sizes(void *ctx, const char *name, const struct fs_entry *e, uint64_t next)
{
	struct names *l = ctx;
	size_t len;

	if (collect(ctx, name, e, next))
		return 1;
	len = strlen(l->text);
	if (e->ino)
		snprintf(l->text + len, sizeof(l->text) - len, ":%lld", (long long)e->attr.st_size);
	else if (strcmp(name, ".") && strcmp(name, ".."))
		snprintf(l->text + len, sizeof(l->text) - len, ":?");
	return 0;
}

/* The one shard index blob of the cache directory of fs into cut_path: 1, or 0 when
 * there is not exactly one. */
static int find_index_blob(struct fs *fs)
{
	char cmd[4200], line[4096];
	FILE *f;
	int n = 0;

	snprintf(cmd, sizeof(cmd), "find '%s'/meta -mindepth 2 -type f -name '[0-9a-f]*'",
		 cachetier_dir(fs->ct));
	f = popen(cmd, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char magic[7] = {0};
		FILE *b;

		line[strcspn(line, "\n")] = '\0';
		b = fopen(line, "rb");
		/* a shard's index (SHRDIDX), not the imagefolder view's blob */
		if (b && fread(magic, 1, sizeof(magic), b) == sizeof(magic) &&
		    memcmp(magic, "SHRDIDX", 7) == 0) {
			snprintf(cut_path, sizeof(cut_path), "%s", line);
			n++;
		}
		if (b)
			fclose(b);
	}
	pclose(f);
	return n == 1;
}

/* The imagefolder view's getattr of a file and listing of a class with attributes
 * (names from the view, attributes from the shard's index, each getattr checking it
 * once, after its read; a failing getattr fails the listing: fs_if_view.c), with the
 * index file cut inside the k-th
 * check of a blob, for every k the operation makes: each answers ESTALE, or exactly
 * what it would answer uncut (names and sizes), never ENOENT or another file's name;
 * the view is never taken for wrong (if_view_rejected stays). k = 1 of getattr must
 * cut (its check after the read); some k of the listing must answer ESTALE. */
/* After a cut: the first operation that meets it may answer ESTALE (and replaces the
 * shard); the next reads the index built again. */
static void if_cut_repair(struct fs *fs, const char *d0)
{
	int64_t ino = walk(fs, "0/k00.jpg");

	if (ino == -ESTALE)
		ino = walk(fs, "0/k00.jpg");
	CHECK(ino > 0, "ifcut: 0/k00.jpg after the cut: %" PRId64, ino);
	check_bytes(fs, "0/k00.jpg", d0, strlen(d0));
}

static void if_cut_each_check(struct fs *fs, const char *d0, const char *d1)
{
	struct names l, want;
	uint64_t rejected = fs->c.if_view_rejected;
	int64_t cls = walk(fs, "0"), file = walk(fs, "0/k01.jpg");
	int stale = 0, err, cut;

	memset(&want, 0, sizeof(want));
	CHECK(cls > 0 && file > 0 && fs_op_readdir(fs, (uint64_t)cls, 0, collect_sizes, &want) == 0,
	      "ifcut: the uncut listing");
	for (int k = 1; k <= 8; k++) {
		struct stat st;

		if (!find_index_blob(fs)) {
			CHECK(0, "ifcut %d: no single shard index blob", k);
			break;
		}
		atomic_store(&cut_armed, k);
		err = fs_op_getattr(fs, (uint64_t)file, &st);
		cut = atomic_load(&cut_armed) == 0;
		atomic_store(&cut_armed, 0);
		CHECK(err == -ESTALE || (err == 0 && st.st_size == (off_t)strlen(d1)),
		      "ifcut %d: getattr of 0/k01.jpg (cut %d): %d, size %lld", k, cut, err,
		      (long long)st.st_size);
		CHECK(k > 1 || cut, "ifcut: getattr made no check of the index after its read");
		if_cut_repair(fs, d0); /* builds again what the cut took */
		cls = walk(fs, "0");
		file = walk(fs, "0/k01.jpg");
		if (!find_index_blob(fs)) {
			CHECK(0, "ifcut %d: no single shard index blob", k);
			break;
		}
		memset(&l, 0, sizeof(l));
		atomic_store(&cut_armed, k);
		err = fs_op_readdir(fs, (uint64_t)cls, 0, collect_sizes, &l);
		cut = atomic_load(&cut_armed) == 0;
		atomic_store(&cut_armed, 0);
		CHECK(err == -ESTALE || (err == 0 && strcmp(l.text, want.text) == 0),
		      "ifcut %d: listing of 0 (cut %d): %d, \"%s\", want ESTALE or \"%s\"", k, cut,
		      err, l.text, want.text);
		stale += err == -ESTALE;
		if_cut_repair(fs, d0);
		cls = walk(fs, "0");
		file = walk(fs, "0/k01.jpg");
	}
	CHECK(stale > 0, "ifcut: no cut met a listing");
	CHECK(fs->c.if_view_rejected == rejected, "ifcut: the view was taken for wrong %llu times",
	      (unsigned long long)(fs->c.if_view_rejected - rejected));
}

/* A shard's mapped index file cut to nothing between a member operation's check of it
 * and its reads of the index: the operation answers ESTALE (the file changed while it
 * looked), never ENOENT for a member that exists; the next lookup builds the index
 * again and the member reads exactly. Each operation that reads entries by inode:
 * getattr, read, open of a directory's listing, readlink, the xattrs. */
static void test_index_cut(void)
{
	static const char *ops[] = {"getattr", "read", "opendir", "readlink", "getxattr"};
	struct member m[CUT_N + 2];
	char names[CUT_N][16], *datas[CUT_N];
	char src[4096];
	struct fs *fs;

	make_dir("cut");
	for (int i = 0; i < CUT_N; i++) {
		snprintf(names[i], sizeof(names[i]), "k%02d.bin", i);
		datas[i] = pattern(names[i], 100 + (size_t)i * 37);
		m[i] = (struct member){names[i], '0', datas[i]};
	}
	m[CUT_N] = (struct member){"d", '5', NULL};
	m[CUT_N + 1] = (struct member){"d/f.txt", '0', "in d"};
	write_shard("cut/s.tar", m, CUT_N + 2);
	snprintf(src, sizeof(src), "%s/src/cut", tmp);
	fs_open_core_at(&fs, "shards", src, "cut");
	fs->cfg.xattr = 1; /* --xattr: the member's getxattr reads its entry */
	for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
		const char *op = ops[o];
		const char *path = strcmp(op, "opendir") == 0 ? "s/d" : "s/k27.bin";
		uint64_t changed = fs->c.index_changed;
		int64_t ino = walk(fs, path);
		struct fs_read r;
		struct stat st;
		const char *target;
		char buf[256];
		int err;

		CHECK(ino > 0, "%s: walk %s gave %" PRId64, op, path, ino);
		if (ino <= 0 || !find_index_blob(fs)) {
			CHECK(0, "%s: no single index blob in the cache directory", op);
			continue;
		}
		atomic_store(&cut_armed, 1);
		if (strcmp(op, "getattr") == 0)
			err = fs_op_getattr(fs, (uint64_t)ino, &st);
		else if (strcmp(op, "read") == 0)
			err = fs_op_read(fs, (uint64_t)ino, 0, 0, 4096, &r);
		else if (strcmp(op, "opendir") == 0)
			err = fs_op_opendir(fs, (uint64_t)ino);
		else if (strcmp(op, "readlink") == 0)
			err = fs_op_readlink(fs, (uint64_t)ino, &target);
		else
			err =
			    fs_op_getxattr(fs, (uint64_t)ino, "user.shardfs.key", buf, sizeof(buf));
		CHECK(atomic_load(&cut_armed) == 0, "%s: the index file was not cut", op);
		CHECK(err == -ESTALE, "%s of %s after its index file was cut: %d (%s), not ESTALE",
		      op, path, err, strerror(err < 0 ? -err : 0));
		if (err == 0 && strcmp(op, "read") == 0)
			fs_op_read_done(&r);
		CHECK(fs->c.index_changed == changed + 1, "%s: index_changed %llu, want %llu", op,
		      (unsigned long long)fs->c.index_changed, (unsigned long long)changed + 1);
		/* the next lookup puts a version in its place, indexed again */
		check_bytes(fs, "s/k27.bin", datas[27], strlen(datas[27]));
	}
	fs_close_core(fs);

	/* the imagefolder view's lookup of a file (its name from the view, its attributes
	 * from the shard's index: the getattr fs_op_lookup makes): an index cut under it
	 * is ESTALE for that lookup alone, and no reason to drop the view
	 * (if_view_rejected stays, no view built again) */
	make_dir("cutif");
	m[0] = (struct member){"k00.jpg", '0', datas[0]};
	m[1] = (struct member){"k00.cls", '0', "0\n"};
	m[2] = (struct member){"k01.jpg", '0', datas[1]};
	m[3] = (struct member){"k01.cls", '0', "0\n"};
	write_shard("cutif/s.tar", m, 4);
	snprintf(src, sizeof(src), "%s/src/cutif", tmp);
	fs_open_core_at(&fs, "imagefolder", src, "cutif");
	CHECK(fs_layout_of(fs)->prepare(fs) == 0 && fs->c.if_images == 2, "cutif: %llu images",
	      (unsigned long long)fs->c.if_images);
	check_bytes(fs, "0/k01.jpg", datas[1], strlen(datas[1]));
	if (find_index_blob(fs)) {
		uint64_t rejected = fs->c.if_view_rejected, saved = fs->c.if_view_saved;
		int64_t ino;

		atomic_store(&cut_armed, 1);
		ino = walk(fs, "0/k01.jpg");
		CHECK(atomic_load(&cut_armed) == 0, "imagefolder: the index file was not cut");
		CHECK(ino == -ESTALE, "imagefolder lookup after its index file was cut: %" PRId64,
		      ino);
		CHECK(fs->c.if_view_rejected == rejected && fs->c.if_view_saved == saved,
		      "imagefolder: the view was dropped (rejected %llu, saved %llu, were %llu, "
		      "%llu)",
		      (unsigned long long)fs->c.if_view_rejected,
		      (unsigned long long)fs->c.if_view_saved, (unsigned long long)rejected,
		      (unsigned long long)saved);
		check_bytes(fs, "0/k01.jpg", datas[1], strlen(datas[1]));
	} else
		CHECK(0, "imagefolder: no single shard index blob in the cache directory");
	if_cut_each_check(fs, datas[0], datas[1]);
	fs_close_core(fs);
	for (int i = 0; i < CUT_N; i++)
		free(datas[i]);
}

/* ---- an imagefolder build over a shard that cannot be read ----------------- */

/* A listed shard gone before the view's build reads it (its first bytes, or
 * its opening, fail): the view goes on without it, and the shard is counted in
 * index_errors, which the mount's report names ("N shards could not be
 * indexed"), so a view short of a shard never looks whole. */
static void test_if_unreadable(void)
{
	const struct member a[] = {{"k.jpg", '0', "jpeg a\n"}, {"k.cls", '0', "0\n"}};
	const struct member b[] = {{"k.jpg", '0', "jpeg b\n"}, {"k.cls", '0', "0\n"}};
	char src[4096], path[4096];
	struct fs *fs;

	make_dir("ifgone");
	write_shard("ifgone/a.tar", a, 2);
	write_shard("ifgone/b.tar", b, 2);
	snprintf(src, sizeof(src), "%s/src/ifgone", tmp);
	fs_open_core_at(&fs, "imagefolder", src, "ifgone");
	path_of(path, sizeof(path), "ifgone/b.tar");
	unlink(path); /* listed, gone before the build reads it */
	CHECK(fs_layout_of(fs)->prepare(fs) == 0, "ifgone: prepare");
	CHECK(fs->c.if_images == 1 && fs->c.index_errors == 1,
	      "ifgone: %llu images, index_errors %llu (want 1, 1)",
	      (unsigned long long)fs->c.if_images, (unsigned long long)fs->c.index_errors);
	check_bytes(fs, "0/k.jpg", "jpeg a\n", 7);
	fs_close_core(fs);
}

/* fs_index_shards' say: a shard's error on stderr (the test expects none). */
static void index_say(const char *name, int sidecar, int err, void *arg)
{
	(void)arg;
	fprintf(stderr, "index: %s%s: %s\n", sidecar ? "sidecar " : "", name, strerror(-err));
}

/* ---- a sidecar's reads held while their request is given up -----------------
 * A shard's sidecar (s.tar.idx, written by fs_index_shards as 'shardfs index
 * --sidecar' writes it) read over the fault store, which holds the read
 * while DIR.hold exists. A request with a stop (fs_op_stop_on) builds the
 * shard's index; the test asks the stop while the store holds the read:
 *  - the sidecar's HEAD (a brace pattern's name, names_only=1&heads=1):
 *    the request ends with -EINTR while the HEAD is held, the HEAD's thread
 *    is counted in its own fs (sidecar_heads 1), and another fs of the
 *    same process drains and closes without waiting for it (0, not
 *    -ETIMEDOUT); released, its own fs drains (0);
 *  - the sidecar's bytes (async=1&hold_at, a read on a thread of its own as
 *    a remote store's I/O thread runs it): the request ends with -EINTR
 *    while the read is held, the read is released and ends on its own (its
 *    sink refuses: the request's buffer is gone), and the fs is closed with
 *    the read's thread in flight (fs_close waits for it: backend_close).
 * After each, a request without a stop reads the member's exact bytes
 * through the sidecar (index_sidecar 1, none rejected); the ASan build's
 * leak and use-after-free checks cover the given-up read's buffer. The
 * stop is bounded by the store: a request that did not leave would wait
 * for the held read, which the store fails with -EIO after 30 s (not
 * -EINTR). */
static atomic_int sc_asked;

static int sc_asked_fn(void *arg)
{
	(void)arg;
	return atomic_load(&sc_asked);
}

struct sc_reader {
	struct fs *fs;
	int64_t ret;
};

static void *sc_reader_main(void *p)
{
	struct sc_reader *r = p;
	struct fs_op_stop stop = {sc_asked_fn, NULL};

	fs_op_begin();
	fs_op_stop_on(&stop);
	r->ret = walk_by(r->fs, "s/a.txt", 0);
	return NULL;
}

static void *sc_close_main(void *p)
{
	fs_close(p);
	return NULL;
}

/* until count_lines(path, line) is 1: a bounded poll (no timing: the
 * store's hold keeps the read there) */
static int sc_wait_line(const char *path, const char *line)
{
	for (int i = 0; i < 60000 && count_lines(path, line) < 1; i++)
		usleep(1000);
	return count_lines(path, line);
}

static void sc_check_read(struct fs *fs, const char *data, const char *what)
{
	check_bytes(fs, "s/a.txt", data, strlen(data));
	CHECK(fs->c.index_sidecar == 1 && fs->c.index_sidecar_rejected == 0,
	      "%s: index from the sidecar %llu, rejected %llu", what,
	      (unsigned long long)fs->c.index_sidecar,
	      (unsigned long long)fs->c.index_sidecar_rejected);
}

static void test_sidecar_held(void)
{
	char *data = pattern("sidecar-held:", 3000);
	const struct member m[] = {{"a.txt", '0', data}, {"b.txt", '0', "b\n"}};
	char source[4096], heads[4096], hold[4096], log[4096], line[256];
	struct fs_index_report rep;
	struct sc_reader rd;
	struct fs *a, *b;
	struct stat st;
	pthread_t th;
	int err;

	make_dir("sc");
	write_shard("sc/s.tar", m, 2);
	path_of(heads, sizeof(heads), "sc.heads");
	path_of(hold, sizeof(hold), "sc.hold");
	path_of(log, sizeof(log), "sc.log");
	snprintf(source, sizeof(source), "%s/src/sc", tmp);
	fs_open_core_at(&a, "shards", source, "sc-index");
	err = fs_index_shards(a, 1, &rep, index_say, NULL);
	CHECK(err == 0 && rep.shards == 1 && rep.failed == 0 && rep.sidecars == 1,
	      "fs_index_shards: %d, %u shards, %u sidecars", err, (unsigned)rep.shards,
	      (unsigned)rep.sidecars);
	fs_close_core(a);
	path_of(source, sizeof(source), "sc/s.tar.idx");
	CHECK(stat(source, &st) == 0 && st.st_size > 2, "the sidecar written");

	/* the HEAD of the sidecar's name held; another fs closes meanwhile */
	snprintf(source, sizeof(source), "fault://%s/src/sc?names_only=1&heads=1", tmp);
	fs_open_core_at(&a, "shards", source, "sc-head");
	fs_open_core_at(&b, "shards", NULL, "sc-other");
	CHECK(walk(a, "s.tar") > 0, "s.tar learned before the hold");
	write_file("sc.hold", "", 0);
	atomic_store(&sc_asked, 0);
	rd = (struct sc_reader){a, 1};
	pthread_create(&th, NULL, sc_reader_main, &rd);
	CHECK(sc_wait_line(heads, "s.tar.idx") == 1, "the sidecar's HEAD held: %d",
	      count_lines(heads, "s.tar.idx"));
	atomic_store(&sc_asked, 1);
	pthread_join(th, NULL);
	CHECK(rd.ret == -EINTR, "given up during the HEAD: %" PRId64 ", want -EINTR", rd.ret);
	CHECK(access(hold, F_OK) == 0 && atomic_load(&a->sidecar_heads) == 1,
	      "the HEAD still held, counted in its fs: %d", (int)atomic_load(&a->sidecar_heads));
	CHECK(fs_sidecar_drain(b) == 0, "another fs drains without waiting for the held HEAD");
	fs_close_core(b);
	unlink(hold);
	CHECK(fs_sidecar_drain(a) == 0 && atomic_load(&a->sidecar_heads) == 0,
	      "its own fs drains once the HEAD is answered");
	CHECK(count_lines(heads, "s.tar.idx") == 1, "the sidecar's name asked once: %d",
	      count_lines(heads, "s.tar.idx"));
	sc_check_read(a, data, "after the HEAD");
	fs_close_core(a);

	/* the sidecar's bytes held on the store's thread; the fs closed with
	 * that read in flight */
	path_of(source, sizeof(source), "sc/s.tar.idx");
	stat(source, &st);
	snprintf(source, sizeof(source), "fault://%s/src/sc?async=1&log=1&hold_at=%lld", tmp,
		 (long long)st.st_size / 2);
	snprintf(line, sizeof(line), "hold s.tar.idx %lld", (long long)st.st_size / 2);
	/* first without a hold: the shard's bytes cached (the sidecar's never
	 * are), so that only the sidecar's read crosses hold_at later */
	fs_open_core_at(&a, "shards", source, "sc-read");
	sc_check_read(a, data, "before the hold");
	fs_close_core(a);
	unlink(log);
	fs_open_core_at(&a, "shards", source, "sc-read");
	write_file("sc.hold", "", 0);
	atomic_store(&sc_asked, 0);
	rd = (struct sc_reader){a, 1};
	pthread_create(&th, NULL, sc_reader_main, &rd);
	CHECK(sc_wait_line(log, line) == 1, "the sidecar's read held: %s", line);
	atomic_store(&sc_asked, 1);
	pthread_join(th, NULL);
	CHECK(rd.ret == -EINTR, "given up during the read: %" PRId64 ", want -EINTR", rd.ret);
	CHECK(access(hold, F_OK) == 0 && a->c.index_sidecar == 0 &&
		  a->c.index_sidecar_rejected == 0,
	      "the read still held, nothing said of the sidecar: rejected %llu",
	      (unsigned long long)a->c.index_sidecar_rejected);
	/* a second request builds the index through the sidecar once the
	 * store lets the reads go */
	unlink(hold);
	sc_check_read(a, data, "after the read");
	/* again with the fs closed while the read is held: the close and the
	 * release may come in either order (both end the same: the close
	 * waits for the store's thread) */
	fs_close_core(a);
	snprintf(source, sizeof(source), "fault://%s/src/sc?async=1&log=1&hold_at=%lld", tmp,
		 (long long)st.st_size / 2);
	unlink(log);
	fs_open_core_at(&a, "shards", source, "sc-read");
	write_file("sc.hold", "", 0);
	atomic_store(&sc_asked, 0);
	rd = (struct sc_reader){a, 1};
	pthread_create(&th, NULL, sc_reader_main, &rd);
	CHECK(sc_wait_line(log, line) == 1, "the sidecar's read held again: %s", line);
	atomic_store(&sc_asked, 1);
	pthread_join(th, NULL);
	CHECK(rd.ret == -EINTR, "given up again: %" PRId64 ", want -EINTR", rd.ret);
	pthread_create(&th, NULL, sc_close_main, a);
	unlink(hold);
	pthread_join(th, NULL);
	CHECK(count_lines(log, line) == 1, "the held read logged once");
	free(data);
}

int main(void)
{
	char cmd[4200];

	if (!mkdtemp(tmp)) {
		perror("mkdtemp");
		return 1;
	}
	big0 = pattern("shard0-sample0-", 300 * 1000 + 17);
	big1 = pattern("SHARD1/s0:", 70 * 1000 + 3);
	make_source();
	test_shards_layout();
	test_listing_attrs();
	test_listing_types();
	test_imagefolder_layout();
	test_change();
	test_counters();
	test_plan();
	test_plan_batch();
	test_imagefolder_hooks();
	test_lazy();
	test_lazy_once();
	test_remap();
	test_header_check();
	test_lifecycle();
	test_notify_stuck();
	streams_source();
	test_streams_two_readers();
	test_streams_plan();
	test_prefetch_check();
	test_index_cut();
	test_if_unreadable();
	test_sidecar_held();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmp);
	free(big0);
	free(big1);
	return check_summary("fscore");
}
