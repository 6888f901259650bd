/*
 * fetch_link.c — the link as the store's fills and the stage's span reads
 * saw it (fetch.h: fetch_link_get): every fill that got its bytes reports
 * the time from its request to the first byte and from there to the last
 * (cachetier_set_fill_timing); the estimate is a decayed average (each
 * sample weighs 1/8, the ones before 7/8 of what they weighed): the time
 * to first byte of every fill, the rate of fills of FETCH_LINK_RATE_MIN
 * bytes or more (bytes over time summed, so long fills weigh by their
 * length: a short one says more about the first TCP window than about the
 * connection's pace). The planner sizes its lookahead and its gap from it
 * (fetch_planner.c).
 *
 * Not in force: nothing calls fetch__link_span but its test (the stage
 * does not time its spans). In the planned epoch of tests/bench/link_bench.py at
 * load 31-43 the rule below read 237.8 MB/s a connection where the
 * emulator paces 60 and the fills' rule read 54.4: a short span's
 * deliveries after its first bunch up when the store's I/O thread is
 * late (tests/bench/README.md, "The stage's spans and the link meter").
 * The rule, kept with its test (tests/unit/test_linkmeter.c):
 *
 * The stage's span reads (fetch_stage.c, --plan-memory: most of a planned
 * epoch's bytes, in spans of some 100-300 KB, each far below
 * FETCH_LINK_RATE_MIN) feed the rate too, by their own rule
 * (fetch__link_span): a span counts the bytes that came after its first
 * delivery over the time from that delivery to its last byte, the time
 * its connection was busy moving them; its time to first byte is never
 * part of it (30 ms before 2 ms of transfer would read as a fifteenth of
 * the rate), and the bytes of its first delivery neither (they came at
 * the first byte, in no time: a span that came whole in it says nothing).
 * The spans' bytes and times are summed until they reach
 * FETCH_LINK_RATE_MIN bytes, then go into the average as one sample, as
 * a fill of that length would. Their time to first byte is not taken (it
 * runs from the read's start, which may wait for a connection).
 *
 * Locks: the meter's own, a leaf, taken in the store's callback (with the
 * store's lock held) and by readers of the estimate.
 */
#include <stdint.h>

#include "fetch_i.h"

/* Fills shorter than this measure no rate (they last a few ms after the
 * first byte, which bursts of the first congestion windows may bring
 * faster than the connection's pace: fills of 256 KiB measured 1.5-3 x
 * the 60 MB/s of tests/bench/link_bench.py's emulator). */
#define FETCH_LINK_RATE_MIN (1u << 20)

/* One rate sample of bytes over ns into the decayed sums (m->lock held). */
static void rate_add(struct fetch_link_meter *m, uint64_t bytes, uint64_t ns)
{
	m->bytes = m->bytes - m->bytes / 8 + bytes;
	m->ns = m->ns - m->ns / 8 + ns;
	m->rate_samples++;
}

void fetch__link_fill(struct fetch_link_meter *m, int64_t ttfb_ns, uint64_t bytes, int64_t xfer_ns)
{
	if (ttfb_ns < 0)
		ttfb_ns = 0;
	disk_mutex_lock(&m->lock);
	if (m->samples == 0)
		m->ttfb_ns = ttfb_ns;
	else
		m->ttfb_ns += (ttfb_ns - m->ttfb_ns) / 8;
	m->samples++;
	if (bytes >= FETCH_LINK_RATE_MIN && xfer_ns > 0)
		rate_add(m, bytes, (uint64_t)xfer_ns);
	disk_mutex_unlock(&m->lock);
}

void fetch__link_span(struct fetch_link_meter *m, uint64_t bytes, int64_t xfer_ns)
{
	if (bytes == 0 || xfer_ns <= 0)
		return; /* whole in its first delivery: no rate in it */
	disk_mutex_lock(&m->lock);
	m->span_bytes += bytes;
	m->span_ns += (uint64_t)xfer_ns;
	m->spans++;
	if (m->span_bytes >= FETCH_LINK_RATE_MIN) {
		rate_add(m, m->span_bytes, m->span_ns);
		m->span_bytes = m->span_ns = 0;
	}
	disk_mutex_unlock(&m->lock);
}

static void link_note(void *ctx, int64_t ttfb_ns, uint64_t bytes, int64_t xfer_ns)
{
	fetch__link_fill(ctx, ttfb_ns, bytes, xfer_ns);
}

void fetch__link_read(struct fetch_link_meter *m, struct fetch_link *l)
{
	disk_mutex_lock(&m->lock);
	l->ttfb_ns = m->samples ? (uint64_t)m->ttfb_ns : 0;
	l->rate = 0;
	if (m->rate_samples && m->ns)
		l->rate = (uint64_t)((double)m->bytes * 1e9 / (double)m->ns);
	l->samples = m->samples;
	disk_mutex_unlock(&m->lock);
}

void fetch_link_get(struct fetch *s, struct fetch_link *l)
{
	fetch__link_read(&s->link, l);
}

void fetch__link_start(struct fetch *s)
{
	disk_mutex_init(&s->link.lock, DISK_LOCK_FETCH_LINK);
	cachetier_set_fill_timing(s->ct, link_note, &s->link);
}

void fetch__link_stop(struct fetch *s)
{
	cachetier_set_fill_timing(s->ct, NULL, NULL); /* no call after it returns */
	disk_mutex_destroy(&s->link.lock);
}
