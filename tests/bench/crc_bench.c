/*
 * crc_bench.c — the CPU cost of the cache units' CRC32C (cachetier), each
 * figure against the same work without it, in one run:
 *
 *   fill   the fill's sink: 64 KiB pieces pwrite'n into a page-cached file
 *          (what cachetier_fill.c's fill_sink_write does per piece) with
 *          and without the CRC of each piece
 *   first  a first read of units another process filled: 128 KiB reads
 *          (pread, standing in for the FUSE reply's splice) with and
 *          without the check (fstat, pread of each 64 KiB unit, CRC)
 *   read   every later read: 128 KiB reads with and without the fstat
 *   crc    the CRC alone on hot 64 KiB pieces: each method the CPU has
 *          (disk_crc32c_by: the table, the one-stream instruction, three
 *          interleaved streams), and the one disk_crc32c_update chose
 *
 * Prints one line per figure: "NAME  CPU-ms-per-GB-with  CPU-ms-per-GB-without"
 * (crc: "crc-METHOD  ms-per-GB  GB/s  x-table", chosen: "crc-chosen METHOD"). CPU time is the
 * process's (CLOCK_PROCESS_CPUTIME_ID), median of --runs. Not a test.
 *
 *   crc_bench FILE [MB] [RUNS]   FILE: a scratch file (its directory's disk
 *                                holds MB of page cache), removed at the end
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "disk.h"

#define PIECE (64u * 1024)
#define READ  (128u * 1024)

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return v[n / 2];
}

static volatile uint32_t sink; /* keeps the CRCs from being optimised away */

/* The fill's sink over the whole file: ms of CPU per GB. */
static double fill(int fd, unsigned char *buf, uint64_t bytes, int crc)
{
	double t = cpu_s();
	uint32_t c = 0;

	for (uint64_t off = 0; off < bytes; off += PIECE) {
		buf[0] = (unsigned char)off; /* a new piece each time */
		if (crc)
			c = disk_crc32c_update(c, buf, PIECE);
		if (disk_pwrite_all(fd, buf, PIECE, off) != 0) {
			perror("pwrite");
			exit(1);
		}
	}
	sink = c;
	return (cpu_s() - t) * 1e3 / ((double)bytes / 1e9);
}

/* Reads of READ bytes over the whole file; check 2: each unit's pread and
 * CRC and an fstat (a first read), 1: the fstat (every later read). */
static double reads(int fd, unsigned char *buf, unsigned char *unit, uint64_t bytes, int check)
{
	double t = cpu_s();
	uint32_t c = 0;
	struct stat st;

	for (uint64_t off = 0; off < bytes; off += READ) {
		if (check && fstat(fd, &st) != 0) {
			perror("fstat");
			exit(1);
		}
		for (uint32_t u = 0; check == 2 && u < READ / PIECE; u++) {
			if (disk_pread_all(fd, unit, PIECE, off + u * PIECE) != 0) {
				perror("pread");
				exit(1);
			}
			c ^= disk_crc32c_update(0, unit, PIECE);
		}
		if (disk_pread_all(fd, buf, READ, off) != 0) {
			perror("pread");
			exit(1);
		}
	}
	sink = c;
	return (cpu_s() - t) * 1e3 / ((double)bytes / 1e9);
}

static double crc_only(const unsigned char *buf, uint64_t bytes, int method)
{
	double t = cpu_s();
	uint32_t c = 0;

	for (uint64_t off = 0; off < bytes; off += PIECE)
		c = disk_crc32c_by(method, c, buf, PIECE);
	sink = c;
	return (cpu_s() - t) * 1e3 / ((double)bytes / 1e9);
}

int main(int argc, char **argv)
{
	uint64_t mb = argc > 2 ? strtoull(argv[2], NULL, 10) : 512;
	int runs = argc > 3 ? atoi(argv[3]) : 5, fd;
	uint64_t bytes = mb << 20;
	unsigned char *buf = malloc(READ), *unit = malloc(PIECE);
	double a[3][64], b[3][64], m[DISK_CRC_METHODS][64];

	if (argc < 2 || runs < 1 || runs > 64 || !buf || !unit) {
		fprintf(stderr, "usage: crc_bench FILE [MB] [RUNS<=64]\n");
		return 2;
	}
	for (uint32_t i = 0; i < READ; i++)
		buf[i] = (unsigned char)(i * 2654435761u >> 13);
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	fill(fd, buf, bytes, 0); /* untimed: the file's pages exist, in the page cache */
	for (int r = 0; r < runs; r++) {
		/* alternate the order so neither side always runs second */
		if (r & 1) {
			b[0][r] = fill(fd, buf, bytes, 0);
			a[0][r] = fill(fd, buf, bytes, 1);
		} else {
			a[0][r] = fill(fd, buf, bytes, 1);
			b[0][r] = fill(fd, buf, bytes, 0);
		}
		a[1][r] = reads(fd, buf, unit, bytes, 2);
		b[1][r] = reads(fd, buf, unit, bytes, 0);
		a[2][r] = reads(fd, buf, unit, bytes, 1);
		b[2][r] = reads(fd, buf, unit, bytes, 0);
		for (int k = 0; k < DISK_CRC_METHODS; k++)
			m[k][r] = disk_crc32c_supported(k) ? crc_only(buf, bytes, k) : 0;
	}
	close(fd);
	unlink(argv[1]);
	printf("fill  %.1f  %.1f\n", median(a[0], runs), median(b[0], runs));
	printf("first  %.1f  %.1f\n", median(a[1], runs), median(b[1], runs));
	printf("read  %.1f  %.1f\n", median(a[2], runs), median(b[2], runs));
	{
		double sw = median(m[DISK_CRC_TABLE], runs);

		for (int k = 0; k < DISK_CRC_METHODS; k++) {
			double v = disk_crc32c_supported(k) ? median(m[k], runs) : 0;

			if (v > 0)
				printf("crc-%s  %.1f  %.2f  %.2f\n", disk_crc32c_name(k), v,
				       1e3 / v, sw / v);
		}
		printf("crc-chosen %s\n", disk_crc32c_name(disk_crc32c_method()));
	}
	free(buf);
	free(unit);
	return 0;
}
