/*
 * shardidx_bench — index build throughput and index size.
 *
 *   shardidx_bench FILE.tar [REPEAT]
 *
 * Builds the index of FILE by pread-ing at want() (headers only, seeking
 * over data, as a local-shard caller does) REPEAT times and prints MB/s of
 * tar covered, entries, on-disk index bytes per entry and in-memory bytes per
 * entry. Compare with `cat FILE > /dev/null` for the sequential baseline.
 * Not a test; built with the tests.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shardidx.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct shardidx *ix = NULL;
	struct shardidx_info inf;
	struct stat st;
	static unsigned char buf[4096];
	int reps = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 3;
	double best = 1e30, t0, tsave, tload, tget, tlookup;
	void *sb;
	size_t sl;
	int fd;

	if (argc < 2 || reps < 1) {
		fprintf(stderr, "usage: shardidx_bench FILE.tar [REPEAT]\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY);
	if (fd < 0 || fstat(fd, &st)) {
		fprintf(stderr, "shardidx_bench: %s: %s\n", argv[1], strerror(errno));
		return 2;
	}
	for (int rep = 0; rep < reps; rep++) {
		struct shardidx_builder *b = shardidx_builder_new();
		t0 = now();
		int r;

		shardidx_free(ix);
		ix = NULL;
		if (!b)
			return 1;
		for (;;) {
			uint64_t w = shardidx_builder_want(b);
			ssize_t got;

			if (w >= (uint64_t)st.st_size)
				break;
			got = pread(fd, buf, sizeof(buf), (off_t)w);
			if (got <= 0 || shardidx_builder_feed(b, buf, (size_t)got) != 0)
				break;
		}
		r = shardidx_builder_finish(b, (uint64_t)st.st_size, &ix);
		if (r) {
			fprintf(stderr, "shardidx_bench: finish: %d\n", r);
			return 1;
		}
		if (now() - t0 < best)
			best = now() - t0;
	}
	{
		/* Sequential: every byte read and fed, as when streaming a remote shard. */
		static unsigned char big[1 << 20];
		struct shardidx_builder *b = shardidx_builder_new();
		struct shardidx *ix2 = NULL;
		uint64_t at = 0;
		t0 = now();
		ssize_t got;

		if (!b)
			return 1;
		while ((got = pread(fd, big, sizeof(big), (off_t)at)) > 0) {
			uint64_t w = shardidx_builder_want(b), end = at + (uint64_t)got;

			if (w < end && shardidx_builder_feed(b, big + (w - at), (size_t)(end - w)))
				break;
			at = end;
		}
		if (shardidx_builder_finish(b, (uint64_t)st.st_size, &ix2))
			return 1;
		printf("build (read and feed every byte): %.3f s = %.0f MB/s\n", now() - t0,
		       (double)st.st_size / 1e6 / (now() - t0));
		shardidx_free(ix2);
	}
	shardidx_get_info(ix, &inf);
	t0 = now();
	if (shardidx_save(ix, "bench", 5, &sb, &sl))
		return 1;
	tsave = now() - t0;
	{
		/* load: the checks a mount runs once over the saved file, read in place */
		struct shardidx *ix3;

		t0 = now();
		if (shardidx_load_in_place(sb, sl, "bench", 5, NULL, NULL, &ix3))
			return 1;
		tload = now() - t0;
		/* reads of the loaded file: every entry, then every name looked up
		 * in its directory (what stat and open over a mount ask) */
		t0 = now();
		for (uint32_t i = 0; i < inf.nentries; i++) {
			struct shardidx_entry e;

			if (shardidx_entry_get(ix3, i, &e) < 0)
				return 1;
		}
		tget = now() - t0;
		t0 = now();
		for (uint32_t i = 0; i < inf.nentries; i++) {
			struct shardidx_entry e;

			if (shardidx_entry_get(ix3, i, &e) < 0 ||
			    shardidx_lookup(ix3, e.parent, e.name, strlen(e.name)) != i)
				return 1;
		}
		tlookup = now() - t0 - tget;
		shardidx_free(ix3);
	}
	printf("file %s: %.1f MB, %u entries, %u samples, damage %d\n", argv[1],
	       (double)st.st_size / 1e6, inf.nentries, inf.nsamples, inf.damage);
	printf("build (pread at want): %.4f s = %.0f MB/s of tar, %.0f entries/s\n", best,
	       (double)st.st_size / 1e6 / best, inf.nentries / best);
	printf("index on disk: %zu bytes = %.1f bytes/entry; in memory: %zu bytes = %.1f "
	       "bytes/entry\n",
	       sl, (double)sl / (inf.nentries ? inf.nentries : 1), inf.mem_bytes,
	       (double)inf.mem_bytes / (inf.nentries ? inf.nentries : 1));
	printf("loaded file: entry_get %.0f ns/entry, lookup %.0f ns/name\n",
	       tget * 1e9 / (inf.nentries ? inf.nentries : 1),
	       tlookup * 1e9 / (inf.nentries ? inf.nentries : 1));
	printf("save: %.4f s = %.3f us/entry; load (checks every entry): %.4f s = %.3f us/entry\n",
	       tsave, tsave * 1e6 / (inf.nentries ? inf.nentries : 1), tload,
	       tload * 1e6 / (inf.nentries ? inf.nentries : 1));
	free(sb);
	shardidx_free(ix);
	close(fd);
	return 0;
}
