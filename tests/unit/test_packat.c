/*
 * test_packat.c — 'shardfs pack' (fs_pack_main) makes every file it writes
 * (a shard's temp files, the shard, its sidecar NAME.idx) relative to its
 * output directory opened once, each under a temp name created O_EXCL,
 * never through a path string: seeded generated trees (TEST_SEED repeats a
 * run; ROUNDS rounds, the codec, the files and k drawn each round) packed one sample a
 * shard, with one hostile change a round at a drawn shard k, made in a
 * window of pack's own (-Wl,--wrap):
 *
 *   'o' nothing: exit 0, every shard and sidecar a regular file, no temp
 *       file left;
 *   't' before shard k is written (shardidx_builder_new, wrapped): symbolic
 *       links to a victim file outside planted at the names of its temp
 *       files, as pack made them before (PATH.tmp.PID, PATH.raw.PID) and as
 *       disk_tmp_open makes them (DIR/.tmp.PID.N, N < TMP_SEQS): never
 *       followed (exit 1, the name taken: -EEXIST), every link left as it
 *       was;
 *   'l' between shard k's rename into place and its sidecar's write
 *       (fs_sidecar_id_fd, wrapped): a link at the sidecar's name: left as
 *       it is, the pack refused (exit 1);
 *   's' in the same window: the output directory moved away and a link to
 *       a directory outside put in its place: every file still lands in the
 *       directory pack opened (exit 0), nothing is written outside.
 *
 * Exact bytes of the victim and of every link, exact exit codes and file
 * counts. Before (fs/tools/fs_pack.c at 2634975: paths from the working
 * directory, temp files opened O_TRUNC without O_EXCL): 't' writes the
 * victim through the link, 's' writes shards and sidecars outside.
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
#include "fs_core_sidecar.h"
#include "fs_tools.h"
#include "test_files.h"
#include "test_rng.h"

#define ROUNDS	 8
#define TMP_SEQS 512 /* more than the temp files of every round together */
#define VICTIM	 "victim bytes: never to be written\n"

static char how;	    /* this round's change: 'o', 't', 'l', 's' */
static int k;		    /* at shard k */
static int nbuilt, nlooked; /* shards begun, identities looked at */
static int nchanged;
static const char *ext; /* the round's shard extension */
static char top[256], out[300], outside[300], moved[300], elsewhere[320], victim[320];

static void plant(const char *at)
{
	if (symlink(victim, at) < 0)
		die(at);
}

/* the links of 't': shard k's temp names, old and new */
static void plant_temps(void)
{
	char path[8192];
	int pid = (int)getpid();

	snprintf(path, sizeof(path), "%s/ds-%06d%s.tmp.%d", out, k, ext, pid);
	plant(path);
	snprintf(path, sizeof(path), "%s/ds-%06d%s.raw.%d", out, k, ext, pid);
	plant(path);
	for (int n = 0; n < TMP_SEQS; n++) {
		snprintf(path, sizeof(path), "%s/.tmp.%d.%d", out, pid, n);
		plant(path);
	}
}

struct shardidx_builder;
struct shardidx_builder *__real_shardidx_builder_new(void);
struct shardidx_builder *__wrap_shardidx_builder_new(void);

/* a shard begun: the window before its files are made */
struct shardidx_builder *__wrap_shardidx_builder_new(void)
{
	if (how == 't' && nbuilt == k) {
		plant_temps();
		nchanged++;
	}
	nbuilt++;
	return __real_shardidx_builder_new();
}

int __real_fs_sidecar_id_fd(int fd, int codec, struct fs_sidecar_id *id);
int __wrap_fs_sidecar_id_fd(int fd, int codec, struct fs_sidecar_id *id);

/* a shard renamed into place: the window before its sidecar's write */
int __wrap_fs_sidecar_id_fd(int fd, int codec, struct fs_sidecar_id *id)
{
	int err = __real_fs_sidecar_id_fd(fd, codec, id);
	char path[8192];

	if (nlooked++ != k)
		return err;
	if (how == 'l') {
		snprintf(path, sizeof(path), "%s/ds-%06d%s.idx", out, k, ext);
		plant(path);
		nchanged++;
	} else if (how == 's') {
		if (rename(out, moved) < 0 || symlink(elsewhere, out) < 0)
			die(out);
		nchanged++;
	}
	return err;
}

/* entries of dir: all (but . and ..), and those that are temp files of
 * pack's (".tmp." or ".raw" in the name and not a symbolic link) */
static int entries(const char *dir, int *temps)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	*temps = 0;
	if (!d)
		return -1;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		n++;
		if ((strstr(de->d_name, ".tmp.") || strstr(de->d_name, ".raw")) &&
		    de->d_type != DT_LNK)
			(*temps)++;
	}
	closedir(d);
	return n;
}

/* shard i and its sidecar in dir: regular files */
static int shard_in(const char *dir, int i)
{
	char path[8192];
	struct stat st;

	snprintf(path, sizeof(path), "%s/ds-%06d%s", dir, i, ext);
	if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
		return 0;
	snprintf(path, sizeof(path), "%s/ds-%06d%s.idx", dir, i, ext);
	return lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

static void round_run(int round)
{
	static const char hows[] = "otls";
	static const char *const codecs[] = {NULL, "gzip", "zstd"};
	static const char *const exts[] = {".tar", ".tar.gz", ".tar.zst"};
	char in[512], prefix[600], path[8192], buf[4096];
	char *argv[8]; /* the words after 'shardfs pack' */
	int argc = 0, nfiles = 2 + (int)rnd_n(&rng, 5), codec = (int)rnd_n(&rng, 3);
	int rc, want_rc, n, temps, where_shards;
	const char *where;
	size_t len;

	how = hows[round % (int)(sizeof(hows) - 1)]; /* each change ROUNDS / 4 times */
	k = (int)rnd_n(&rng, (uint32_t)nfiles);
	ext = exts[codec];
	snprintf(top, sizeof(top), "%s/r%d", tmp, round);
	snprintf(in, sizeof(in), "%s/in", top);
	snprintf(out, sizeof(out), "%s/out", top);
	snprintf(moved, sizeof(moved), "%s/moved", top);
	snprintf(outside, sizeof(outside), "%s/outside", top);
	snprintf(elsewhere, sizeof(elsewhere), "%s/elsewhere", outside);
	snprintf(victim, sizeof(victim), "%s/victim", outside);
	if (mkdir(top, 0755) < 0 || mkdir(in, 0755) < 0 || mkdir(out, 0755) < 0 ||
	    mkdir(outside, 0755) < 0 || mkdir(elsewhere, 0755) < 0)
		die(top);
	put(victim, VICTIM, strlen(VICTIM));
	for (int i = 0; i < nfiles; i++) {
		snprintf(path, sizeof(path), "%s/s%02d.txt", in, i);
		len = (size_t)snprintf(buf, sizeof(buf), "sample %d of round %d\n", i, round);
		put(path, buf, len);
	}
	snprintf(prefix, sizeof(prefix), "%s/ds", out);
	argv[argc++] = "--max-count";
	argv[argc++] = "1";
	if (codecs[codec]) {
		argv[argc++] = "--compress";
		argv[argc++] = (char *)codecs[codec];
	}
	argv[argc++] = in;
	argv[argc++] = prefix;
	argv[argc] = NULL;
	nbuilt = nlooked = nchanged = 0;
	fflush(stdout);
	rc = fs_pack_main(argc, argv);
	want_rc = how == 't' || how == 'l' ? 1 : 0;
	CHECK(rc == want_rc, "round %d ('%c' at shard %d of %d, %s): exit %d, want %d", round, how,
	      k, nfiles, ext, rc, want_rc);
	CHECK(nchanged == (how != 'o'), "round %d: %d changes made, want %d", round, nchanged,
	      how != 'o');
	/* the shards written: all, or those before k (k's too for 'l': its
	 * sidecar is what was refused) */
	where = how == 's' ? moved : out;
	where_shards = how == 't' ? k : how == 'l' ? k + 1 : nfiles;
	for (int i = 0; i < where_shards; i++) {
		if (how == 'l' && i == k) {
			struct stat st;

			snprintf(path, sizeof(path), "%s/ds-%06d%s", where, i, ext);
			CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode),
			      "round %d: shard %d in place before its sidecar", round, i);
			continue;
		}
		CHECK(shard_in(where, i), "round %d ('%c'): shard %d and its sidecar in %s", round,
		      how, i, where);
	}
	/* what is in the directory: shards and sidecars (2 a shard), the
	 * links planted, no temp file */
	n = entries(where, &temps);
	CHECK(temps == 0, "round %d ('%c'): %d temp files left in %s", round, how, temps, where);
	CHECK(n == 2 * where_shards + (how == 't' ? 2 + TMP_SEQS : 0),
	      "round %d ('%c'): %d entries in %s, want %d", round, how, n, where,
	      2 * where_shards + (how == 't' ? 2 + TMP_SEQS : 0));
	if (how == 'l') {
		ssize_t r;

		snprintf(path, sizeof(path), "%s/ds-%06d%s.idx", out, k, ext);
		r = readlink(path, buf, sizeof(buf));
		CHECK(r == (ssize_t)strlen(victim) && memcmp(buf, victim, (size_t)r) == 0,
		      "round %d: the link at %s left as it was", round, path);
	} else if (how == 't') {
		int same = 0;

		snprintf(path, sizeof(path), "%s/ds-%06d%s.tmp.%d", out, k, ext, (int)getpid());
		for (int i = 0; i < 2 + TMP_SEQS; i++) {
			ssize_t r;

			if (i == 1)
				snprintf(path, sizeof(path), "%s/ds-%06d%s.raw.%d", out, k, ext,
					 (int)getpid());
			else if (i >= 2)
				snprintf(path, sizeof(path), "%s/.tmp.%d.%d", out, (int)getpid(),
					 i - 2);
			r = readlink(path, buf, sizeof(buf));
			same += r == (ssize_t)strlen(victim) && memcmp(buf, victim, (size_t)r) == 0;
		}
		CHECK(same == 2 + TMP_SEQS,
		      "round %d: %d of the %d links planted left as they were", round, same,
		      2 + TMP_SEQS);
	}
	n = entries(elsewhere, &temps);
	CHECK(n == 0, "round %d ('%c'): %d entries written outside, in %s", round, how, n,
	      elsewhere);
	n = entries(outside, &temps);
	CHECK(n == 2, "round %d ('%c'): %d entries outside, want the victim and elsewhere/", round,
	      how, n);
	len = get(victim, buf, sizeof(buf));
	CHECK(len == strlen(VICTIM) && memcmp(buf, VICTIM, len) == 0,
	      "round %d ('%c'): the victim outside keeps its bytes", round, how);
}

int main(void)
{
	return test_rounds_main("packat", ROUNDS, round_run);
}
