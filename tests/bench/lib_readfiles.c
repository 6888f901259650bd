/* Sample-read benchmark helper for tests/bench/run.sh (compiled on the fly with cc).
 *
 *   lib_readfiles LISTFILE NPROCS [MAX_SECONDS]
 *
 * Reads the paths in LISTFILE (one per line), forks NPROCS readers; reader i
 * takes paths i, i+NPROCS, ... and for each does open, read until EOF (256 KB
 * buffer), close: plain syscalls, nothing else. Prints "FILES BYTES SECONDS"
 * (wall time from the fork to the last reader's exit). With MAX_SECONDS each
 * reader stops after that long (for very slow file systems) and FILES counts
 * what was read. Exits non-zero when any open or read fails. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s LISTFILE NPROCS [MAX_SECONDS]\n", argv[0]);
		return 2;
	}
	int np = atoi(argv[2]);
	double maxs = argc > 3 ? atof(argv[3]) : 0;
	FILE *f = fopen(argv[1], "r");
	if (!f) {
		perror(argv[1]);
		return 1;
	}
	size_t n = 0, cap = 1024;
	char **paths = malloc(cap * sizeof *paths);
	char *line = NULL;
	size_t lcap = 0;
	ssize_t len;
	while ((len = getline(&line, &lcap, f)) > 0) {
		if (line[len - 1] == '\n')
			line[--len] = 0;
		if (!len)
			continue;
		if (n == cap)
			paths = realloc(paths, (cap *= 2) * sizeof *paths);
		paths[n++] = strdup(line);
	}
	fclose(f);
	/* per-reader counters shared with the parent */
	long long *cnt = mmap(NULL, 2 * np * sizeof(long long), PROT_READ | PROT_WRITE,
			      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	double t0 = now();
	for (int p = 0; p < np; p++) {
		if (fork() == 0) {
			static char buf[256 * 1024];
			long long files = 0, bytes = 0;
			for (size_t i = p; i < n; i += np) {
				if (maxs > 0 && now() - t0 > maxs)
					break;
				int fd = open(paths[i], O_RDONLY);
				if (fd < 0) {
					perror(paths[i]);
					_exit(1);
				}
				ssize_t r;
				while ((r = read(fd, buf, sizeof buf)) > 0)
					bytes += r;
				if (r < 0) {
					perror(paths[i]);
					_exit(1);
				}
				close(fd);
				files++;
			}
			cnt[2 * p] = files;
			cnt[2 * p + 1] = bytes;
			_exit(0);
		}
	}
	int bad = 0, st;
	while (wait(&st) > 0)
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			bad = 1;
	double t = now() - t0;
	long long files = 0, bytes = 0;
	for (int p = 0; p < np; p++) {
		files += cnt[2 * p];
		bytes += cnt[2 * p + 1];
	}
	printf("%lld %lld %.6f\n", files, bytes, t);
	return bad;
}
