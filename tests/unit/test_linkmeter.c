/*
 * test_linkmeter.c — the link meter (fetch/fetch_link.c) fed with seeded
 * synthetic timings: fills (time to first byte, bytes, time after it) and
 * the stage's span reads (bytes after a span's first delivery, the time
 * from that delivery to its last byte). After every sample the meter's
 * time to first byte and rate are compared, exactly, with a model of its
 * rule (decayed sums, each sample 1/8; fills of 1 MiB or more give a rate;
 * spans summed until 1 MiB, then one sample): spans of 20-300 KB at 60 MB/s
 * read 60 MB/s (not the fifteenth of it their 30 ms to first byte would
 * make of 140 KB), spans below 1 MiB in all give no rate yet, a span that
 * came whole in its first delivery gives nothing, fills below 1 MiB no rate,
 * and fills and spans at two rates mix by their bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fetch_i.h"
#include "check.h"
#include "test_util.h"

#define MiB (1u << 20)

/* The meter's rule, as a model. */
struct model {
	int64_t ttfb;
	uint64_t samples, rate_samples, bytes, ns, pend_bytes, pend_ns;
};

static void model_rate(struct model *m, uint64_t bytes, uint64_t ns)
{
	m->bytes = m->bytes - m->bytes / 8 + bytes;
	m->ns = m->ns - m->ns / 8 + ns;
	m->rate_samples++;
}

static void model_fill(struct model *m, int64_t ttfb, uint64_t bytes, int64_t xfer)
{
	m->ttfb = m->samples == 0 ? ttfb : m->ttfb + (ttfb - m->ttfb) / 8;
	m->samples++;
	if (bytes >= MiB && xfer > 0)
		model_rate(m, bytes, (uint64_t)xfer);
}

static void model_span(struct model *m, uint64_t bytes, int64_t xfer)
{
	if (bytes == 0 || xfer <= 0)
		return;
	m->pend_bytes += bytes;
	m->pend_ns += (uint64_t)xfer;
	if (m->pend_bytes >= MiB) {
		model_rate(m, m->pend_bytes, m->pend_ns);
		m->pend_bytes = m->pend_ns = 0;
	}
}

static uint64_t model_get(const struct model *m)
{
	return m->rate_samples && m->ns ? (uint64_t)((double)m->bytes * 1e9 / (double)m->ns) : 0;
}

/* The meter and the model agree (what: the step). */
static void same(struct fetch_link_meter *lm, const struct model *m, const char *what)
{
	struct fetch_link l;

	fetch__link_read(lm, &l);
	CHECK(l.rate == model_get(m), "%s: rate %llu, the rule's %llu", what,
	      (unsigned long long)l.rate, (unsigned long long)model_get(m));
	CHECK(l.ttfb_ns == (m->samples ? (uint64_t)m->ttfb : 0), "%s: ttfb %llu, the rule's %lld",
	      what, (unsigned long long)l.ttfb_ns, (long long)m->ttfb);
}

static void meter_new(struct fetch_link_meter *lm, struct model *m)
{
	*lm = (struct fetch_link_meter){0};
	*m = (struct model){0};
	disk_mutex_init(&lm->lock, DISK_LOCK_FETCH_LINK);
}

/* ns to move bytes at rate bytes a second. */
static int64_t at(uint64_t bytes, uint64_t rate)
{
	return (int64_t)(bytes * 1000000000ull / rate);
}

int main(void)
{
	char dir[256];
	uint64_t seed = test_start(dir, sizeof(dir), "linkmeter", 20261201u), rs = seed;
	struct fetch_link_meter lm;
	struct fetch_link l;
	struct model m;
	char what[96];

	/* spans alone at 60 MB/s, each after 30 ms to its first byte (not
	 * part of its timing) and a first delivery of up to 64 KiB */
	meter_new(&lm, &m);
	for (int i = 0; i < 200; i++) {
		uint64_t len = 20000 + rnd(&rs) % 280000, first = 1 + rnd(&rs) % 65536;
		uint64_t after = first < len ? len - first : 0;

		fetch__link_span(&lm, after, at(after, 60000000));
		model_span(&m, after, at(after, 60000000));
		snprintf(what, sizeof(what), "spans at 60 MB/s, span %d (%llu bytes)", i,
			 (unsigned long long)len);
		same(&lm, &m, what);
	}
	fetch__link_read(&lm, &l);
	/* each span's time rounded down to the ns: a few B/s over */
	CHECK(l.rate >= 60000000 && l.rate <= 60000100, "spans at 60 MB/s read %llu B/s",
	      (unsigned long long)l.rate);
	CHECK(l.samples == 0, "spans are no time-to-first-byte samples: %llu",
	      (unsigned long long)l.samples);
	disk_mutex_destroy(&lm.lock);

	/* below 1 MiB in all: no rate; the span that passes it: one sample */
	meter_new(&lm, &m);
	for (int i = 0; i < 7; i++)
		fetch__link_span(&lm, 140000, at(140000, 60000000));
	fetch__link_read(&lm, &l);
	CHECK(l.rate == 0, "980,000 bytes of spans: rate %llu, want none yet",
	      (unsigned long long)l.rate);
	fetch__link_span(&lm, 140000, at(140000, 60000000));
	fetch__link_read(&lm, &l);
	/* 8 x 140,000 bytes over 8 x 2,333,333 ns */
	CHECK(l.rate == 60000008, "1,120,000 bytes of spans at 60 MB/s: rate %llu",
	      (unsigned long long)l.rate);
	/* a span whole in its first delivery, or of no time: nothing */
	fetch__link_span(&lm, 0, 5000000);
	fetch__link_span(&lm, 100000, 0);
	CHECK(lm.spans == 8 && lm.span_bytes == 0, "spans counted %llu, pending %llu",
	      (unsigned long long)lm.spans, (unsigned long long)lm.span_bytes);
	disk_mutex_destroy(&lm.lock);

	/* fills and spans: fills of 0.25-8 MiB at 60 MB/s (those below 1 MiB
	 * give no rate), 20-60 ms to first byte; spans at 40 MB/s */
	meter_new(&lm, &m);
	for (int i = 0; i < 300; i++) {
		if (rnd(&rs) % 3 == 0) {
			uint64_t len = MiB / 4 + rnd(&rs) % (8 * MiB);
			int64_t ttfb = 20000000 + (int64_t)(rnd(&rs) % 40000000);

			fetch__link_fill(&lm, ttfb, len, at(len, 60000000));
			model_fill(&m, ttfb, len, at(len, 60000000));
			snprintf(what, sizeof(what), "mixed, fill %d (%llu bytes)", i,
				 (unsigned long long)len);
		} else {
			uint64_t after = rnd(&rs) % 300000;

			fetch__link_span(&lm, after, at(after, 40000000));
			model_span(&m, after, at(after, 40000000));
			snprintf(what, sizeof(what), "mixed, span %d (%llu bytes)", i,
				 (unsigned long long)after);
		}
		same(&lm, &m, what);
	}
	fetch__link_read(&lm, &l);
	CHECK(l.rate > 40000000 && l.rate < 60000000,
	      "fills at 60 and spans at 40 MB/s: rate %llu between them",
	      (unsigned long long)l.rate);
	disk_mutex_destroy(&lm.lock);
	return test_end("linkmeter", dir, seed);
}
