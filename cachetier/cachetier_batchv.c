/*
 * cachetier_batchv.c — the version rule of the batch fills
 * (cachetier_batch.c): which HEADs confirm a GetBatch request's items.
 *
 * GetBatch has no If-Match: its bytes are of whichever version each object
 * had while it was read. An item's units are kept only when its object's
 * ETag and size, as listed (ct_file's identity, the data file's name), are
 * what a HEAD of it says that was sent after the item arrived (why that is
 * enough: cachetier/README.md, "GetBatch's version rule"). Until then its
 * units stay unserved (filling). An object replaced before or while its
 * items were read, or after but before that HEAD, has another ETag at that
 * HEAD (or is gone): the items it confirms are punched, their units empty
 * with -ESTALE, as a fill's If-Match failure leaves them. One replaced and
 * put back (the same ETag: the same bytes) before the HEAD is the one case
 * the rule does not see. A failed HEAD leaves its items' units empty with
 * no error (fetched on demand, by version).
 *
 * HEAD groups: which HEAD confirms which item. Each object of a request
 * has two groups, each confirmed by one HEAD sent after its items arrived:
 *   BG_FIRST  the object's items that arrived whole before that HEAD was
 *             sent, except its last item of the request (when it has two
 *             or more): the HEAD goes once its first item arrived whole;
 *   BG_REST   the others: its last item, and those that arrived after
 *             BG_FIRST's HEAD was sent; the HEAD goes once its last item
 *             arrived whole (or the answer ended, if that item failed).
 * So a request whose items all arrive whole sends exactly min(k, 2) HEADs
 * for an object with k items in it, whenever the items arrive and the
 * request's threads look: a function of the request, not of timing. When
 * an object's every item arrived before its first HEAD was sent, both
 * HEADs go out at once and the second confirms its last item only (the
 * price of a count that does not depend on timing); an item that failed
 * may spare a HEAD (a group with no item sends none). The object's first
 * item is valid one HEAD after it arrived, not after its last item of the
 * request (which often is the request's last).
 *
 * Shared HEADs. A HEAD confirms every item of its object that arrived
 * before it was sent, so requests share them (cachetier__batch_confirm):
 * a group's HEAD is sent when no other request's HEAD of its object is in
 * flight (those of a slot's groups in one backend_stat_many, in
 * parallel); a group that finds one in flight, sent before its items
 * arrived, waits for it to end, then sends its own or finds one that
 * another request sent after its items arrived, and takes its answer. An
 * urgent request (the caller names them: the first of each window, whose
 * units a reader reaches first) never waits for a HEAD sent before its
 * items arrived: it sends its own at once. A request never shares nor
 * waits for its own HEADs (ct_file.bc_by, bt_obj.mine): so sharing only
 * takes away HEADs another request sent; without another request of the
 * object at once the count is the groups'. Counted: heads, heads_shared,
 * head_waits.
 *
 * A HEAD's two hops (AIStore: the proxy's 307 to the object's target, then
 * the target's answer; backend.h, backend_head_ahead): the first goes when
 * the request starts, one per group (cachetier_batch.c bt_ahead), its
 * redirect kept; a group's own HEAD follows its group's (the target's
 * answer, the only one that says anything of the object, sent at the time
 * the rule above says), so it costs one round trip after its items
 * arrived, not two. A group confirmed by another request's HEAD drops its
 * redirect unfollowed at the request's end.
 */
#include <errno.h>
#include <string.h>

#include "cachetier_batch_i.h"

size_t cachetier__batch_look(struct bt_req *q, size_t from, size_t upto, int slot, int final)
{
	struct bt_work *w = &q->w;
	size_t nask = 0;

	for (size_t i = from; i < upto && i < q->nruns; i++) {
		struct bt_run *r = &q->runs[i];
		struct bt_obj *o = &w->obj[r->obj];
		int g;

		if (r->cov != BT_OPEN || r->next != r->end || (final && w->err[i] != 0))
			continue;
		/* the last item of an object of several is always BG_REST's:
		 * its own HEAD, sent after it arrived, whatever came before */
		if (o->nrun >= 2 && i == o->last)
			g = BG_REST;
		else
			g = o->g[BG_FIRST].st == BO_IDLE ? BG_FIRST : BG_REST;
		r->grp = (uint8_t)g;
		r->cov = BT_IN;
		o->g[g].n++;
	}
	for (size_t j = 0; j < w->nobj; j++) {
		struct bt_obj *o = &w->obj[j];

		for (int g = BG_FIRST; g <= BG_REST; g++) {
			struct bt_grp *gr = &o->g[g];

			if (gr->st != BO_IDLE || gr->n == 0)
				continue;
			/* BG_REST is due at its object's last item (or the end) */
			if (g == BG_REST && !final && q->runs[o->last].cov == BT_OPEN)
				continue;
			gr->st = BO_ASK;
			gr->slot = (uint8_t)slot;
			nask++;
		}
	}
	return nask;
}

/* A group's HEAD, sent by this request or another, goes out now (1), or
 * it waits for another request's in flight (0). ct->lock held. */
static int bt_send_now(const struct bt_req *q, const struct bt_obj *o, const struct bt_grp *gr)
{
	const struct ct_file *f = o->f;
	/* a HEAD of another request sent after the items arrived: the
	 * latest sent is not this request's (one of another between need
	 * and it is not seen: this request then sends its own) */
	int other_after = f->bc_sent >= gr->need && f->bc_sent != o->mine_last;

	if (f->bc_inflight == o->mine)
		return 1; /* none of another request in flight */
	return q->urgent && !other_after;
}

void cachetier__batch_confirm(struct bt_req *q, int slot)
{
	struct cachetier *ct = q->ct;
	struct bt_work *w = &q->w;
	size_t left = 0, base = slot == BR_EARLY ? 0 : q->nruns;
	const char **keys = w->keys + base;
	struct backend_objinfo *info = w->info + base;
	int *herr = w->herr + base;
	size_t *lead = w->lead + base;
	struct backend_head_ahead **ahead = w->ahead + base;

	cachetier__lock(ct);
	for (size_t j = 0; j < w->nobj; j++) {
		for (int g = BG_FIRST; g <= BG_REST; g++) {
			struct bt_grp *gr = &w->obj[j].g[g];

			if (gr->st == BO_ASK && gr->slot == slot) {
				gr->need = w->obj[j].f->bc_sent + 1; /* any HEAD from now on */
				gr->seq = 0;
				left++;
			}
		}
	}
	while (left > 0) {
		size_t nl = 0;

		for (size_t j = 0; j < 2 * w->nobj; j++) {
			struct bt_obj *o = &w->obj[j / 2];
			struct bt_grp *gr = &o->g[j % 2];
			struct ct_file *f = o->f;

			if (gr->st != BO_ASK || gr->slot != slot || gr->seq != 0)
				continue;
			if (f->bc_done >= gr->need && f->bc_by != q->id) {
				/* sent after the arrival by another request */
				gr->res = f->bc_res;
				gr->st = BO_DONE;
				q->res.heads_shared++;
				left--;
			} else if (bt_send_now(q, o, gr)) {
				f->bc_inflight++;
				o->mine++;
				gr->seq = ++f->bc_sent;
				o->mine_last = gr->seq;
				ahead[nl] = o->ahead[j % 2]; /* its first hop, sent ahead */
				o->ahead[j % 2] = NULL;
				keys[nl] = f->key;
				lead[nl++] = j;
			} else if (!o->waited) {
				o->waited = 1; /* counted now: a test sees who waits */
				ct->batch.head_waits++;
			}
		}
		if (nl > 0) {
			int all;

			disk_mutex_unlock(&ct->lock);
			/* the target's HEADs, sent now (after the items arrived);
			 * the proxy's hops went with the request (bt_ahead) */
			all = backend_head_follow_many(ct->be, ahead, keys, nl, info, herr);
			cachetier__lock(ct);
			for (size_t l = 0; l < nl; l++) {
				struct bt_obj *o = &w->obj[lead[l] / 2];
				struct bt_grp *gr = &o->g[lead[l] % 2];
				struct ct_file *f = o->f;
				int v = 0;

				if (all < 0 || (herr[l] < 0 && herr[l] != -ENOENT))
					v = -EIO;
				else if (herr[l] == -ENOENT ||
					 !backend_version_same(info[l].etag, info[l].size,
							       info[l].mtime, f->etag, f->size,
							       f->mtime))
					v = -ESTALE;
				f->bc_inflight--;
				o->mine--;
				if (gr->seq > f->bc_done) { /* the latest sent of those ended */
					f->bc_done = gr->seq;
					f->bc_res = v;
					f->bc_by = q->id;
				}
				gr->res = v;
				gr->seq = 0;
				gr->st = BO_DONE;
				left--;
			}
			q->res.heads += nl;
			pthread_cond_broadcast(&ct->unit_cond); /* waiters of these HEADs */
		} else if (left > 0) {
			cachetier__cond_wait_s(&ct->unit_cond, &ct->lock, 1);
		}
	}
	disk_mutex_unlock(&ct->lock);
}

void cachetier__batch_decide(struct bt_req *q)
{
	for (size_t i = 0; i < q->nruns; i++) {
		struct bt_run *r = &q->runs[i];
		struct bt_obj *o = &q->w.obj[r->obj];

		if (r->cov != BT_IN || o->g[r->grp].st != BO_DONE)
			continue;
		r->vres = o->g[r->grp].res;
		r->cov = BT_DECIDED;
		o->stale |= r->vres == -ESTALE;
	}
}
