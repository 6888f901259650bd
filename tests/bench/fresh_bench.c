/*
 * fresh_bench.c — what a fresh 2 MiB chunk of anonymous memory costs on this machine, by page
 * policy (the stage region's and the fill arena's chunks, disk/disk_arena.c). Each mode maps
 * CHUNKS chunks of 2 MiB at 2 MiB-aligned addresses one at a time and faults each in; the
 * figure is the CPU (CLOCK_THREAD_CPUTIME_ID) and the wall time a chunk, and the minor faults
 * a chunk (getrusage RUSAGE_THREAD), from its mmap to its last page resident:
 *   huge      MADV_HUGEPAGE + MADV_POPULATE_WRITE (main's policy)
 *   small     MADV_NOHUGEPAGE + MADV_POPULATE_WRITE
 *   touch     MADV_NOHUGEPAGE, a byte written a 4 KiB page
 *   rehuge    as huge, each chunk mapped right after a faulted-in chunk of the same process
 *             was unmapped (its memory just freed)
 *   resmall   as small, likewise
 *   zero      memset of a resident chunk (what zeroing 2 MiB costs, no fault)
 * A round runs every mode once, in an order that rotates by round, each mode's chunks unmapped
 * at its end, then gap_ms of sleep. With --other MB a child process faults in and frees MB of
 * 4 KiB pages before each mode (the daemon's memory freed by another process just before).
 * Prints one line a mode a round and the medians; a failed call ends the run (exit 1).
 *
 * Usage: fresh_bench [--rounds N] [--chunks N] [--gap-ms N] [--other MB]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_tool.h"

#define CHUNK (2u * 1024u * 1024u)
#define PAGE  4096u
#define MAXR  64

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

enum mode { M_HUGE, M_SMALL, M_TOUCH, M_REHUGE, M_RESMALL, M_ZERO, NMODE };
static const char *const mname[NMODE] = {"huge", "small", "touch", "rehuge", "resmall", "zero"};

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long minflt(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_minflt;
}

/* a 2 MiB-aligned chunk, not faulted in */
static char *chunk_map(void)
{
	size_t span = 2 * (size_t)CHUNK, head;
	char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		bench_die("mmap");
	head = (CHUNK - (uintptr_t)m % CHUNK) % CHUNK;
	if (head)
		munmap(m, head);
	munmap(m + head + CHUNK, span - head - CHUNK);
	return m + head;
}

/* c faulted in by policy: huge or not, populated or touched */
static void chunk_fault(char *c, int huge, int populate)
{
	if (madvise(c, CHUNK, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE))
		bench_die("madvise");
	if (populate) {
		if (madvise(c, CHUNK, MADV_POPULATE_WRITE))
			bench_die("madvise(MADV_POPULATE_WRITE)");
	} else {
		for (size_t o = 0; o < CHUNK; o += PAGE)
			((volatile char *)c)[o] = 1;
	}
}

/* a child faults in and frees mb MiB of 4 KiB pages, then exits; waited for */
static void other_frees(unsigned mb)
{
	pid_t p;

	if (!mb)
		return;
	p = fork();
	if (p < 0)
		bench_die("fork");
	if (p == 0) {
		size_t n = (size_t)mb << 20;
		char *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (m == MAP_FAILED || madvise(m, n, MADV_NOHUGEPAGE))
			_exit(1);
		for (size_t o = 0; o < n; o += PAGE)
			m[o] = 1;
		_exit(0);
	}
	if (waitpid(p, NULL, 0) != p)
		bench_die("waitpid");
}

struct fig {
	double cpu, wall, flt; /* a chunk's: ms, ms, faults */
};

static struct fig run_mode(enum mode md, unsigned chunks, char **keep)
{
	double cpu = 0, wall = 0;
	long flt = 0;

	for (unsigned i = 0; i < chunks; i++) {
		double c0, w0;
		long f0;
		char *c;

		if (md == M_REHUGE || md == M_RESMALL) {
			char *old = chunk_map(); /* a chunk of ours faulted in, then freed */

			chunk_fault(old, md == M_REHUGE, 1);
			munmap(old, CHUNK);
		}
		if (md == M_ZERO) {
			c = keep[i];
			c0 = bench_thread_cpu(), w0 = now(), f0 = minflt();
			memset(c, (int)i, CHUNK);
			__asm__ volatile("" : : "r"(c) : "memory");
		} else {
			c0 = bench_thread_cpu(), w0 = now(), f0 = minflt();
			c = chunk_map();
			chunk_fault(c, md == M_HUGE || md == M_REHUGE, md != M_TOUCH);
			keep[i] = c;
		}
		cpu += bench_thread_cpu() - c0;
		wall += now() - w0;
		flt += minflt() - f0;
	}
	if (md != M_ZERO)
		for (unsigned i = 0; i < chunks; i++)
			munmap(keep[i], CHUNK);
	return (struct fig){cpu * 1e3 / chunks, wall * 1e3 / chunks, (double)flt / chunks};
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	unsigned rounds = 5, chunks = 64, gap_ms = 1000, other = 0;
	static double cpu[NMODE][MAXR], wall[NMODE][MAXR], flt[NMODE][MAXR];
	char **keep, **tmp;

	for (int i = 1; i + 1 < argc; i += 2) {
		unsigned v = (unsigned)strtoul(argv[i + 1], NULL, 10);

		if (!strcmp(argv[i], "--rounds"))
			rounds = v;
		else if (!strcmp(argv[i], "--chunks"))
			chunks = v;
		else if (!strcmp(argv[i], "--gap-ms"))
			gap_ms = v;
		else if (!strcmp(argv[i], "--other"))
			other = v;
		else {
			fprintf(stderr,
				"usage: %s [--rounds N] [--chunks N] [--gap-ms N] "
				"[--other MB]\n",
				argv[0]);
			return 2;
		}
	}
	if (rounds == 0 || rounds > MAXR || chunks == 0) {
		fprintf(stderr, "rounds 1..%d, chunks >= 1\n", MAXR);
		return 2;
	}
	keep = calloc(chunks, sizeof(*keep));
	tmp = calloc(chunks, sizeof(*tmp));
	if (!keep || !tmp)
		bench_die("calloc");
	for (unsigned i = 0; i < chunks; i++) { /* the zero mode's resident chunks */
		keep[i] = chunk_map();
		chunk_fault(keep[i], 1, 1);
	}
	printf(
	    "mode     round  cpu_ms/chunk  wall_ms/chunk  faults/chunk  (%u chunks, other %u MB, "
	    "gap %u ms)\n",
	    chunks, other, gap_ms);
	for (unsigned r = 0; r < rounds; r++) {
		for (unsigned k = 0; k < NMODE; k++) {
			enum mode md = (enum mode)((k + r) % NMODE);
			struct fig f;

			other_frees(other);
			f = run_mode(md, chunks, md == M_ZERO ? keep : tmp);
			cpu[md][r] = f.cpu, wall[md][r] = f.wall, flt[md][r] = f.flt;
			printf("%-8s %5u  %12.3f  %13.3f  %12.1f\n", mname[md], r, f.cpu, f.wall,
			       f.flt);
			fflush(stdout);
			usleep(gap_ms * 1000u);
		}
	}
	printf("median over %u rounds:\n", rounds);
	for (unsigned m = 0; m < NMODE; m++)
		printf("%-8s cpu %.3f ms  wall %.3f ms  faults %.1f a chunk\n", mname[m],
		       median(cpu[m], rounds), median(wall[m], rounds), median(flt[m], rounds));
	return 0;
}
