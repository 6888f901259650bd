/*
 * ais_batch_cli.c — drives backend_batch_read for test_s3.py's ais-batch
 * group: ais_batch_cli SOURCE OUTDIR KEY:OFF:LEN... reads the items in one
 * batch, writes item i's bytes to OUTDIR/i (at their offset within the
 * item) and prints one line per item, "i errno", then "requests N" (the
 * store's requests). Exit 0 when backend_batch_read returned 0, else 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"

struct out {
	int *fds;
	const struct backend_batch_item *items;
};

static int sink(void *arg, size_t i, uint64_t off, const void *buf, size_t len)
{
	struct out *o = arg;
	ssize_t w = pwrite(o->fds[i], buf, len, (off_t)(off - o->items[i].off));

	return w == (ssize_t)len ? 0 : -EIO;
}

static int parse_item(char *s, struct backend_batch_item *it)
{
	char *b = strrchr(s, ':'), *a, *end;

	if (!b)
		return -1;
	*b = '\0';
	a = strrchr(s, ':');
	if (!a)
		return -1;
	*a = '\0';
	it->key = s;
	it->off = strtoull(a + 1, &end, 10);
	if (*end)
		return -1;
	it->len = strtoull(b + 1, &end, 10);
	return *end ? -1 : 0;
}

int main(int argc, char **argv)
{
	struct backend *be;
	struct backend_config cfg = {.connections = 4, .retry_budget_s = 5, .stall_timeout_s = 5};
	struct backend_stats st;
	struct backend_batch_item *items;
	struct out o;
	int *err, ret;
	size_t n;

	if (argc < 4) {
		fprintf(stderr, "usage: ais_batch_cli SOURCE OUTDIR KEY:OFF:LEN...\n");
		return 2;
	}
	n = (size_t)argc - 3;
	items = calloc(n, sizeof(*items));
	err = calloc(n, sizeof(*err));
	o.fds = calloc(n, sizeof(*o.fds));
	o.items = items;
	if (!items || !err || !o.fds)
		return 2;
	for (size_t i = 0; i < n; i++) {
		char path[4096];

		if (parse_item(argv[3 + i], &items[i]) < 0) {
			fprintf(stderr, "bad item %s\n", argv[3 + i]);
			return 2;
		}
		snprintf(path, sizeof(path), "%s/%zu", argv[2], i);
		o.fds[i] = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (o.fds[i] < 0) {
			perror(path);
			return 2;
		}
	}
	ret = backend_open(&be, argv[1], &cfg);
	if (ret < 0) {
		fprintf(stderr, "open: %s\n", backend_last_error(NULL));
		return 2;
	}
	ret = backend_batch_read(be, items, n, sink, &o, err);
	for (size_t i = 0; i < n; i++)
		printf("%zu %d\n", i, ret < 0 ? ret : err[i]);
	backend_get_stats(be, &st);
	printf("requests %" PRIu64 "\n", st.requests);
	backend_close(be);
	for (size_t i = 0; i < n; i++)
		close(o.fds[i]);
	free(items);
	free(err);
	free(o.fds);
	return ret == 0 ? 0 : 1;
}
