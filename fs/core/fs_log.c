/*
 * fs_log.c — one log for the daemon: stderr in the foreground, a file once
 * it runs in the background. Lines carry a UTC timestamp and a level.
 * Callers never pass credentials (the backend describes sources without
 * them). Every message reaches the log through fs_quote's rule (a
 * backslash as \\, \n, \t, \r, \xHH for other control bytes and for bytes
 * that are not UTF-8), whatever names it holds (of shards, members, keys,
 * paths, from any module: the backend's and the cache tier's lines come
 * through fs_log_backend): every call is exactly one line, and unquoting the
 * line gives the message's bytes back. Safe to call from any thread: each
 * line is one write(2).
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fs_i.h"

/* The length of the UTF-8 sequence at p (1 to 4), or 0 when the bytes
 * there are not one (a stray continuation, an overlong form, a surrogate,
 * past U+10FFFF, cut short). */
static int utf8_len(const unsigned char *p)
{
	unsigned char lo = 0x80, hi = 0xbf;
	int len;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (p[0] == 0xe0)
		lo = 0xa0;
	else if (p[0] == 0xed)
		hi = 0x9f;
	else if (p[0] == 0xf0)
		lo = 0x90;
	else if (p[0] == 0xf4)
		hi = 0x8f;
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (int i = 2; i < len; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return len;
}

/* The quoted form of the unit at p (fs_quote's rule) into unit (at least
 * 5 bytes); its length. *adv: the bytes of p it stands for. */
static int quote_unit(const unsigned char *p, char *unit, int *adv)
{
	int len = utf8_len(p);

	*adv = len ? len : 1;
	if (*p == '\\' || *p == '\n' || *p == '\t' || *p == '\r') {
		unit[0] = '\\';
		unit[1] = *p == '\n' ? 'n' : *p == '\t' ? 't' : *p == '\r' ? 'r' : '\\';
		return 2;
	}
	if (*p < 0x20 || *p == 0x7f || !len) {
		unit[0] = '\\';
		unit[1] = 'x';
		unit[2] = "0123456789abcdef"[*p >> 4];
		unit[3] = "0123456789abcdef"[*p & 15];
		return 4;
	}
	memcpy(unit, p, (size_t)len);
	return len;
}

/* set at the daemon's start (core_log_open, fs_core.c), when the cache
 * tier's threads may log already: atomic */
static atomic_int log_fd = 2;
static atomic_int log_debug;

int fs_log_open_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

	if (fd < 0)
		return -1;
	atomic_store_explicit(&log_fd, fd, memory_order_relaxed);
	return 0;
}

int fs_log_fd(void)
{
	return atomic_load_explicit(&log_fd, memory_order_relaxed);
}

void fs_log_set_debug(int on)
{
	atomic_store_explicit(&log_debug, on, memory_order_relaxed);
}

void fs_log(enum fs_log_level lvl, const char *fmt, ...)
{
	static const char *const names[] = {"error", "warning", "info", "debug"};
	char line[96 + 4 * 2048], msg[2048]; /* each byte of msg 4 at most */
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n, m;

	if (lvl == FS_LOG_DEBUG && !atomic_load_explicit(&log_debug, memory_order_relaxed))
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line),
		     "%04d-%02d-%02dT%02d:%02d:%02dZ shardfs[%d] %s: ", tm.tm_year + 1900,
		     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)getpid(),
		     names[lvl]);
	va_start(ap, fmt);
	m = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	if ((size_t)m >= sizeof(msg))
		m = sizeof(msg) - 1;
	/* One call is one line, by fs_quote's rule: no name can forge or
	 * split a line, and each says which bytes it holds. */
	for (int i = 0, adv; i < m && (size_t)n + 5 < sizeof(line); i += adv)
		n += quote_unit((const unsigned char *)msg + i, line + n, &adv);
	line[n++] = '\n';
	if (write(atomic_load_explicit(&log_fd, memory_order_relaxed), line, (size_t)n) < 0) {
		/* nowhere left to report it */
	}
}

void fs_log_backend(void *arg, enum backend_log_level level, const char *msg)
{
	static const enum fs_log_level lvl[] = {
	    [BACKEND_LOG_ERROR] = FS_LOG_ERR,
	    [BACKEND_LOG_WARN] = FS_LOG_WARN,
	    [BACKEND_LOG_INFO] = FS_LOG_INFO,
	};

	(void)arg;
	fs_log((unsigned)level < sizeof(lvl) / sizeof(lvl[0]) ? lvl[level] : FS_LOG_INFO, "%s",
	       msg);
}

void fs_log_backend_plain(void *arg, enum backend_log_level level, const char *msg)
{
	char line[16 + 4 * 1024]; /* a backend's message is 1,023 bytes at most */
	int n = snprintf(line, sizeof(line), "shardfs: ");

	(void)arg;
	(void)level;
	for (int i = 0, adv; msg[i] && (size_t)n + 5 < sizeof(line); i += adv)
		n += quote_unit((const unsigned char *)msg + i, line + n, &adv);
	line[n++] = '\n';
	if (write(2, line, (size_t)n) < 0) {
		/* nowhere left to report it */
	}
}

void fs_human_bytes(uint64_t b, char *out, size_t n)
{
	const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)b;
	int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(out, n, u ? "%.2f %s" : "%.0f %s", v, units[u]);
}

const char *fs_quote(const char *s, char *buf, size_t n)
{
	/* cut: the last end of a unit that leaves room for "...(N bytes)" */
	size_t o = 0, cut = 0, total = strlen(s);
	const unsigned char *p = (const unsigned char *)s;

	if (!total) {
		snprintf(buf, n, "''");
		return buf;
	}
	while (*p) {
		char unit[8];
		int len, u = quote_unit(p, unit, &len);

		if (o + (size_t)u >= n) {
			snprintf(buf + cut, n - cut, "...(%zu bytes)", total);
			return buf;
		}
		memcpy(buf + o, unit, (size_t)u);
		o += (size_t)u;
		if (o + 32 < n)
			cut = o;
		p += len;
	}
	buf[o] = '\0';
	return buf;
}
