/*
 * test_sidecarat.c — 'shardfs index --sidecar' (fs_index_shards) writes each
 * sidecar NAME.tar.idx relative to the shard's directory as the backend
 * opens it below the source's top, never through a path string: seeded
 * generated trees (TEST_SEED repeats a run; ROUNDS rounds) of shards in
 * nested directories are opened as a mount would (fs_open), then each is
 * changed hostilely between the look at the shard's file for the sidecar's
 * identity (fs_sidecar_id_fd, wrapped: -Wl,--wrap) and the sidecar's write:
 *
 *   'o' nothing: the sidecar is written, a regular file, no temp file left;
 *   'l' a symbolic link planted at the sidecar's name, to a victim file
 *       outside the tree: left as it is (readlink the same), the victim's
 *       bytes the same, the shard's sidecar refused with -ELOOP;
 *   'd' a directory at the sidecar's name: left alone, -EISDIR;
 *   'f' an old sidecar (a regular file): replaced by the new one;
 *   's' the shard's directory swapped for a symbolic link to a directory
 *       outside the tree holding a directory of the same name: nothing is
 *       written outside, the sidecar refused with -EXDEV.
 *
 * Exact counts (fs_index_report, each refusal's errno by name) and exact
 * bytes of what lies outside. Before (fs/core/fs_core_index.c at 557315b:
 * a path string, disk_write_atomic from the working directory): 'l' links
 * replaced by the sidecar, 's' sidecars written outside the tree.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "fs_core.h"
#include "fs_core_opt.h"
#include "fs_core_sidecar.h"
#include "shardidx.h"
#include "test_files.h"
#include "test_rng.h"
#include "test_tar.h"

#define ROUNDS	6
#define NSHARDS 12
#define VICTIM	"victim bytes: never to be written\n"

/* what each shard's sidecar met (the say callback), by the shard's key */
struct shard {
	char key[256];
	char dir[128]; /* its directory below the top ("" the top) */
	char how;      /* 'o', 'l', 'd', 'f', 's' */
	int said;      /* the errno say got (0: none) */
};
static struct shard shards[NSHARDS];
static int nsaid_other;

/* path: a ustar archive of one member (name, data), by test_tar.h's
 * writer: the member's bytes over its fill, then the two zero blocks that
 * end an archive (tar_room keeps them) */
static void tar_one(const char *path, const char *name, const char *data)
{
	struct tarw t = {0};
	size_t dlen = strlen(data);

	tar_add(&t, name, '0', NULL, 0644, 1700000000u, dlen);
	memcpy(t.b + t.len - (dlen + 511) / 512 * 512, data, dlen);
	put(path, t.b, t.len + 1024);
	free(t.b);
}

static const char *cur_src, *cur_out; /* the round's source and outside directory */
static int nchanged;

/* Shard i's hostile change, made between the look and the write. */
static void change(int i)
{
	struct shard *s = &shards[i];
	char path[8192], path2[8192];

	snprintf(path, sizeof(path), "%s/%s.idx", cur_src, s->key);
	switch (s->how) {
	case 'l':
		snprintf(path2, sizeof(path2), "%s/victim", cur_out);
		if (symlink(path2, path) < 0)
			die(path);
		break;
	case 'd':
		if (mkdir(path, 0755) < 0)
			die(path);
		break;
	case 'f':
		put(path, "an old sidecar", 14);
		break;
	case 's':
		/* the directory moved outside, a link to it in its place */
		snprintf(path, sizeof(path), "%s/%s", cur_src, s->dir);
		snprintf(path2, sizeof(path2), "%s/o%d", cur_out, i);
		if (rename(path, path2) < 0 || symlink(path2, path) < 0)
			die(path);
		break;
	}
	nchanged++;
}

int __real_fs_sidecar_id_fd(int fd, int codec, struct fs_sidecar_id *id);
int __wrap_fs_sidecar_id_fd(int fd, int codec, struct fs_sidecar_id *id);

/* the identity looked at, then the shard whose file fd is changed */
int __wrap_fs_sidecar_id_fd(int fd, int codec, struct fs_sidecar_id *id)
{
	int err = __real_fs_sidecar_id_fd(fd, codec, id);
	char link[64], real[8192];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, real, sizeof(real) - 1);
	if (n < 0)
		die(link);
	real[n] = '\0';
	for (int i = 0; i < NSHARDS; i++) {
		size_t kl = strlen(shards[i].key);

		if ((size_t)n > kl + 5 && strcmp(real + n - kl, shards[i].key) == 0 &&
		    strncmp(real + n - kl - 5, "/src/", 5) == 0) {
			change(i);
			return err;
		}
	}
	fprintf(stderr, "no shard is %s\n", real);
	return err;
}

static void say(const char *name, int sidecar, int err, void *arg)
{
	(void)arg;
	for (int i = 0; i < NSHARDS; i++) {
		size_t kl = strlen(shards[i].key), nl = strlen(name);

		/* name: the sidecar's path (the source's path, the key, ".idx") */
		if (sidecar && nl > kl + 4 && strcmp(name + nl - 4, ".idx") == 0 &&
		    strncmp(name + nl - 4 - kl, shards[i].key, kl) == 0 &&
		    name[nl - 5 - kl] == '/') {
			shards[i].said = -err;
			return;
		}
	}
	fprintf(stderr, "say: %s (sidecar %d): %s\n", name, sidecar, strerror(-err));
	nsaid_other++;
}

/* the entries of dir whose name holds ".tmp." (disk_tmp_open's temp files) */
static int temps_in(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)) != NULL)
		n += strstr(de->d_name, ".tmp.") != NULL;
	closedir(d);
	return n;
}

static void round_run(int round)
{
	static const char hows[] = "oldfs";
	char top[256], src[512], out[512], cache[512], path[8192], path2[8192], buf[4096];
	char *argv[] = {"--sidecar", "--cache-dir", cache, src, NULL};
	struct fs_config *cfg;
	struct fs_index_report r;
	struct fs *fs;
	int want_sidecars = 0, want_failed = 0;
	size_t n;

	snprintf(top, sizeof(top), "%s/r%d", tmp, round);
	snprintf(src, sizeof(src), "%s/src", top);
	snprintf(out, sizeof(out), "%s/outside", top);
	snprintf(cache, sizeof(cache), "%s/cache", top);
	if (mkdir(top, 0755) < 0 || mkdir(src, 0755) < 0 || mkdir(out, 0755) < 0)
		die(top);
	snprintf(path, sizeof(path), "%s/victim", out);
	put(path, VICTIM, strlen(VICTIM));
	/* NSHARDS shards, each in a directory of its own (d<i>, nested at
	 * random below a<k>/), so that swapping one directory moves one shard */
	for (int i = 0; i < NSHARDS; i++) {
		struct shard *s = &shards[i];
		char name[64];

		memset(s, 0, sizeof(*s));
		s->how = hows[rnd_n(&rng, sizeof(hows) - 1)];
		if (rnd_n(&rng, 2)) {
			snprintf(s->dir, sizeof(s->dir), "a%u/d%d", rnd_n(&rng, 3), i);
			snprintf(path, sizeof(path), "%s/%.*s", src,
				 (int)(strchr(s->dir, '/') - s->dir), s->dir);
			if (mkdir(path, 0755) < 0 && errno != EEXIST)
				die(path);
		} else {
			snprintf(s->dir, sizeof(s->dir), "d%d", i);
		}
		snprintf(path, sizeof(path), "%s/%s", src, s->dir);
		if (mkdir(path, 0755) < 0)
			die(path);
		snprintf(s->key, sizeof(s->key), "%s/s%d.tar", s->dir, i);
		snprintf(name, sizeof(name), "m%d.txt", i);
		snprintf(path, sizeof(path), "%s/%s", src, s->key);
		tar_one(path, name, "member bytes\n");
	}
	if (fs_config_new(&cfg) < 0 || fs_opt_parse_index(4, argv, cfg) != 0)
		FAIL("round %d: the options", round);
	if (fs_open(cfg, 0, &fs) < 0)
		FAIL("round %d: fs_open of %s", round, src);
	fs_config_free(cfg);
	for (int i = 0; i < NSHARDS; i++) {
		want_sidecars += shards[i].how == 'o' || shards[i].how == 'f';
		want_failed += shards[i].how != 'o' && shards[i].how != 'f';
	}
	cur_src = src;
	cur_out = out;
	nsaid_other = 0;
	nchanged = 0;
	CHECK(fs_index_shards(fs, 1, &r, say, NULL) == 0, "round %d: fs_index_shards", round);
	CHECK(r.shards == NSHARDS, "round %d: %u shards", round, r.shards);
	CHECK(r.sidecars == (unsigned)want_sidecars, "round %d: %u sidecars written, want %d",
	      round, r.sidecars, want_sidecars);
	CHECK(r.failed == (unsigned)want_failed, "round %d: %u failed, want %d", round, r.failed,
	      want_failed);
	CHECK(nsaid_other == 0, "round %d: %d refusals of no shard's sidecar", round, nsaid_other);
	CHECK(nchanged == NSHARDS, "round %d: %d shards changed between look and write", round,
	      nchanged);
	for (int i = 0; i < NSHARDS; i++) {
		struct shard *s = &shards[i];
		struct stat st;
		int want = s->how == 'l'   ? ELOOP
			   : s->how == 'd' ? EISDIR
			   : s->how == 's' ? EXDEV
					   : 0;

		CHECK(s->said == want, "round %d: %s ('%c'): said %s, want %s", round, s->key,
		      s->how, s->said ? strerror(s->said) : "nothing",
		      want ? strerror(want) : "nothing");
		snprintf(path, sizeof(path), "%s/%s.idx", src, s->key);
		if (s->how == 'o' || s->how == 'f') {
			CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 14,
			      "round %d: %s ('%c'): a sidecar written", round, path, s->how);
		} else if (s->how == 'l') {
			n = (size_t)readlink(path, buf, sizeof(buf));
			snprintf(path2, sizeof(path2), "%s/victim", out);
			CHECK(n == strlen(path2) && memcmp(buf, path2, n) == 0,
			      "round %d: %s: the link planted is left as it was", round, path);
		} else if (s->how == 'd') {
			CHECK(lstat(path, &st) == 0 && S_ISDIR(st.st_mode),
			      "round %d: %s: the directory is left", round, path);
		} else {
			snprintf(path2, sizeof(path2), "%s/o%d/s%d.tar.idx", out, i, i);
			CHECK(lstat(path2, &st) < 0 && errno == ENOENT,
			      "round %d: %s: nothing written outside the tree", round, path2);
			snprintf(path2, sizeof(path2), "%s/o%d", out, i);
			CHECK(temps_in(path2) == 0, "round %d: no temp file left in %s", round,
			      path2);
		}
		if (s->how != 's') {
			snprintf(path2, sizeof(path2), "%s/%s", src, s->dir);
			CHECK(temps_in(path2) == 0, "round %d: no temp file left in %s", round,
			      path2);
		}
	}
	snprintf(path, sizeof(path), "%s/victim", out);
	n = get(path, buf, sizeof(buf));
	CHECK(n == strlen(VICTIM) && memcmp(buf, VICTIM, n) == 0,
	      "round %d: the victim outside keeps its bytes", round);
	CHECK(temps_in(out) == 0, "round %d: no temp file left outside", round);
	fs_close(fs);
}

int main(void)
{
	return test_rounds_main("sidecarat", ROUNDS, round_run);
}
