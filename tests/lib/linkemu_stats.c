/* linkemu_stats.c: the link emulator's counters and GET /__stats (linkemu.c has the server).
 * One thread: nothing here is locked. */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "linkemu.h"

struct linkemu_stats counts;

void serve_stats(struct conn *c)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double u = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
	double s = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	struct buf b = {0};
	buf_fmt(&b,
		"{\"requests\": %" PRIu64 ", \"bytes_sent\": %" PRIu64 ", \"connections\": %" PRIu64
		", \"cpu_s\": %.6f, \"cpu_user_s\": %.6f, \"cpu_sys_s\": %.6f",
		counts.requests, counts.bytes_sent, counts.connections, u + s, u, s);
	if (cfg.keys)
		buf_fmt(&b,
			", \"list_requests\": %" PRIu64 ", \"list_bytes\": %" PRIu64
			", \"heads\": %" PRIu64 ", \"gets\": %" PRIu64 ", \"other\": %" PRIu64,
			counts.list_requests, counts.list_bytes, counts.heads, counts.gets,
			counts.other);
	if (cfg.ais)
		ais_stats(&b);
	buf_str(&b, "}");
	resp_mem(c, 200, "Content-Type: application/json\r\n", b.p, b.len);
}
