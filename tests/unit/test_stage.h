/*
 * test_stage.h — the rig the stage's unit tests share (test_stagebuf.c,
 * test_stagecount.c): one seeded source object behind the fault store, a
 * test tier over it, a fetch scheduler with a stage of the test's size,
 * the object open; and a read into memory the test drives (rec_read
 * records the stage's buffer and callbacks in the struct mem_rec its ctx
 * names: the test writes the bytes and ends the read when it chooses, no
 * store I/O). Static inline: one test program is one translation unit.
 * Include after check.h, backend.h, cachetier.h, fetch.h, fetch_i.h and
 * test_util.h.
 */
#ifndef SHARDFS_TEST_STAGE_H
#define SHARDFS_TEST_STAGE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* A read into memory the stage asked for, as rec_read recorded it. */
struct mem_rec {
	void *buf, *arg;
	cachetier_mem_progress_fn progress;
	cachetier_mem_done_fn donefn;
};

/* fetch_stage_read_fn for fetch__stage_add_via: ctx is the struct mem_rec
 * to fill; the read is the test's to drive (0: started). */
static inline int rec_read(void *ctx, struct cachetier_obj *o, uint64_t off, size_t len, void *buf,
			   cachetier_mem_progress_fn progress, cachetier_mem_done_fn done,
			   void *arg)
{
	struct mem_rec *r = ctx;

	(void)o;
	(void)off;
	(void)len;
	r->buf = buf;
	r->arg = arg;
	r->progress = progress;
	r->donefn = done;
	return 0;
}

struct stage_rig {
	char dir[256 + 16]; /* the tier's directory: TMPDIR/cache */
	unsigned char *data;
	struct backend *be;
	struct cachetier *ct;
	struct fetch *s;
	struct cachetier_obj *o;
};

/* Source object key of size bytes drawn from *rs in tmpdir, the fault store
 * over it, a tier of 64 MiB (2 workers, 64 KiB units), a scheduler with a
 * stage of stage_bytes, the object open. A failure ends the program. */
static inline void stage_rig_open(struct stage_rig *r, const char *tmpdir, const char *key,
				  size_t size, uint64_t *rs, size_t stage_bytes)
{
	struct cachetier_config cc;
	int err;

	r->data = src_object(tmpdir, key, size, rs);
	r->be = fault_store(tmpdir, "");
	snprintf(r->dir, sizeof(r->dir), "%s/cache", tmpdir);
	tier_config(&cc, r->dir, 64u << 20, 2, 64u * 1024);
	r->ct = tier_open(&cc, r->be);
	err = fetch_new(r->ct, &r->s);
	if (err)
		FAIL("fetch_new: %d", err);
	if (fetch__stage_new(r->s, stage_bytes) != 0)
		FAIL("fetch__stage_new");
	r->o = obj_open(r->ct, r->be, key);
}

static inline void stage_rig_close(struct stage_rig *r)
{
	cachetier_obj_unref(r->o);
	fetch_free(r->s);
	cachetier_close(r->ct);
	backend_close(r->be);
	free(r->data);
}

#endif
