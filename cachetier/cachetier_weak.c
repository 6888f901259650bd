/*
 * cachetier_weak.c — weak validators of the unit store's reads
 * (cachetier_read.c calls cachetier__weak_check before it serves units):
 * an object whose ETag does not pin its bytes has its first unit served
 * here fetched again and compared before units filled since are served.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cachetier_i.h"

/* ---- weak validators ----
 *
 * Every fill asks for the listed ETag (If-Match), which pins the bytes
 * only when the ETag changes with them. A weak ETag (W/"...") or one made
 * of the file's mtime and size (nginx's "mtime-size" in hex, Apache's
 * "inode-size-mtime"; the http listing's stand-in is nginx's) stays the
 * same through a rewrite of the same size with the mtime put back (touch
 * -d, touch -r, reproducible-build pipelines), and units of two versions
 * would then be served as one object. For such an object the first unit
 * this process serves is its anchor (its CRC32C kept in memory), and
 * before units filled here since the last look are served, the anchor's
 * bytes are fetched from the store again (one ranged GET of a unit, at
 * most one at a time per object, covering every fill that ended before
 * it) and their CRC32C compared: a mismatch drops every unit of the
 * object, gives ESTALE to the read and to every later read through the
 * objects open on it (o->collided; an open of its name makes a new
 * object), and the caller (fs/) looks the name up again. A strong ETag
 * costs one string test per read that serves a unit filled here. What it
 * does not see: a rewrite that leaves the anchor's bytes as they were, and
 * units filled before the first read here or by another process (taken
 * as the anchor's version). */

/* 1 when etag does not pin the bytes of an object of size bytes. */
int cachetier__etag_weak(const char *etag, uint64_t size)
{
	size_t len = strlen(etag), n;
	const char *p, *end;
	char hex[24];
	int parts = 0, sized = 0;

	if (strncmp(etag, "W/", 2) == 0)
		return 1;
	if (len < 4 || etag[0] != '"' || etag[len - 1] != '"')
		return 0;
	n = (size_t)snprintf(hex, sizeof(hex), "%llx", (unsigned long long)size);
	end = etag + len - 1;
	for (p = etag + 1; p <= end; p++) {
		const char *q = p;

		while (q < end && *q != '-') {
			if (!isxdigit((unsigned char)*q))
				return 0; /* an opaque token: taken as strong */
			q++;
		}
		parts++;
		if ((size_t)(q - p) == n && strncasecmp(p, hex, n) == 0)
			sized = 1;
		p = q;
	}
	return sized && parts >= 2 && parts <= 3;
}

/* The store's bytes of f changed under its ETag: every unit of f is made
 * empty (fetched again by the next reads), checks in flight do not trust
 * theirs (wgen), the objects open on f give ESTALE from now on, and the
 * next unit served is the new anchor. ct->lock held. */
static void weak_drop(struct cachetier *ct, struct ct_file *f, uint32_t a)
{
	uint32_t n = 0;

	for (uint32_t c = 0; c < f->nunits; c++) {
		if (f->ust[c] == UNIT_VALID) {
			cachetier__unit_corrupt(ct, f, c);
			n++;
		}
	}
	f->wgen++;
	f->vgen++; /* reads waiting meanwhile end with ESTALE, not their units' state */
	f->anchor_set = 0;
	f->probed = f->ufills;
	ct->weak_changed++;
	for (size_t i = 0; i < ct->obj_tab_size; i++)
		for (struct cachetier_obj *o = ct->obj_tab[i]; o; o = o->next)
			if (o->file == f)
				atomic_store(&o->collided, 1);
	backend_log(ct->be, BACKEND_LOG_WARN,
		    "%s: the store's bytes of unit %u changed, its ETag %s did not (a weak or "
		    "mtime-derived ETag: the object was rewritten with the same size and mtime): "
		    "its %u cached units are dropped, ESTALE for the old version, the next "
		    "lookup reads the new one",
		    f->key, a, f->etag, n);
}

/* Before units [c0, c1) of f (valid, pinned, read-locked) are served: when
 * f's ETag is weak and a unit of them was filled here after the last probe
 * began, the anchor is fetched again and compared (see above). 0; -ESTALE
 * (the bytes changed: weak_drop); or the store's error (its own -ESTALE
 * when the ETag changed too). ct->lock held on entry and return; dropped
 * while the probe is fetched (at most one per object: others wait for it,
 * UNITS_WAIT_BOUND_S at a time). */
int cachetier__weak_check(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1)
{
	for (;;) {
		uint64_t need = f->ufills;
		struct ct_mem_sink sink = {0}; /* the unit, checksummed once all there */
		uint32_t a, crc, got = 0;
		int trusted = 1, err;

		if (!f->anchor_set || f->probed >= need)
			return 0;
		for (uint32_t c = c0; c < c1 && trusted; c++)
			trusted = f->seen[c] == 1;
		if (trusted || ct->cfg.weak_etag_trust || !cachetier__etag_weak(f->etag, f->size))
			return 0;
		if (f->probing) {
			cachetier__cond_wait_s(&ct->unit_cond, &ct->lock, UNITS_WAIT_BOUND_S);
			continue;
		}
		f->probing = 1;
		a = f->anchor;
		crc = f->anchor_crc;
		sink.start = sink.next = cachetier__unit_off(f, a);
		sink.end = sink.next + cachetier__unit_len(f, a);
		disk_mutex_unlock(&ct->lock);
		sink.buf = malloc(sink.end - sink.start);
		err = !sink.buf ? -ENOMEM
				: cachetier__read_version(ct, f->key, f->etag, f->size, &sink.next,
							  sink.end, cachetier__mem_sink, &sink);
		if (err == 0 && sink.next != sink.end)
			err = -EIO;
		if (err == 0)
			got = disk_crc32c_update(0, sink.buf, sink.end - sink.start);
		free(sink.buf);
		disk_mutex_lock(&ct->lock);
		f->probing = 0;
		pthread_cond_broadcast(&ct->unit_cond);
		ct->weak_probes++;
		if (err < 0)
			return err;
		if (got != crc) {
			if (f->anchor_set && f->anchor == a && f->anchor_crc == crc)
				weak_drop(ct, f, a);
			return -ESTALE;
		}
		if (f->probed < need)
			f->probed = need;
	}
}
