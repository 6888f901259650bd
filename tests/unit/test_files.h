/*
 * test_files.h — the file helpers of the unit tests that build trees on
 * disk and look at what a tool left there (test_sidecarat.c,
 * test_packat.c): a failure that ends the program, a file written whole,
 * a file read back. One test program is one translation unit: every helper
 * is static inline.
 */
#ifndef SHARDFS_TEST_FILES_H
#define SHARDFS_TEST_FILES_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* what failed (perror), then exit 1: nothing after it means anything */
static inline void die(const char *what)
{
	perror(what);
	exit(1);
}

/* path made (or truncated) with len bytes of data; a failure ends the
 * program */
static inline void put(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0 || write(fd, data, len) != (ssize_t)len || close(fd) < 0)
		die(path);
}

/* up to cap bytes of path into buf (one read): their count, or (size_t)-1
 * when it cannot be opened or read */
static inline size_t get(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return (size_t)-1;
	n = read(fd, buf, cap);
	close(fd);
	return n < 0 ? (size_t)-1 : (size_t)n;
}

#endif
