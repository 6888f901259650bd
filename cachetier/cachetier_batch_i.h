/*
 * cachetier_batch_i.h — what the batch fills (cachetier_batch.c: requests,
 * their answers, commits), their version rule (cachetier_batchv.c: the
 * HEAD groups and their HEADs) and the batch reads into memory
 * (cachetier_batchm.c: the stage's GetBatch windows, which use the slots
 * only: their version rule is a HEAD per object of the window and per
 * object of its first request) share.
 * Only those three files include it.
 */
#ifndef CACHETIER_BATCH_I_H
#define CACHETIER_BATCH_I_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cachetier_i.h"

/* A run and the version rule: in no HEAD group yet; in one (grp), its
 * HEAD not back; decided (vres). Changed under ct->lock. */
enum { BT_OPEN, BT_IN, BT_DECIDED };

/* One item: units [c, c + n) of f, all claimed by this batch. */
struct bt_run {
	struct ct_file *f;
	uint32_t c, n;
	uint64_t start, end; /* the item's bytes in the object */
	uint64_t next;	     /* object offset of the next byte expected (the sink's) */
	uint32_t *crc;	     /* CRC32C per unit, as bytes arrive */
	int err;	     /* the item's outcome (0, -ESTALE, or another errno) */
	int werr;	     /* the fill writer's first write error */
	uint64_t wrote;	     /* bytes the fill writer wrote, in ct->wr_bytes and not in
			      * ct->wr_gone yet (bt_wr_gone: as they land or are punched) */
	size_t obj;	     /* its object in the request's table (bt_work.obj) */
	int done;	     /* committed at its group's HEAD, before the answer ended */
	int vres;	     /* BT_DECIDED: the version rule's answer (0, -ESTALE, -EIO) */
	uint8_t cov;	     /* BT_*: where the version rule is for it */
	uint8_t grp;	     /* BT_IN, BT_DECIDED: its group (BG_*) */
};

/* An object's HEAD groups in a request (cachetier_batchv.c): BG_FIRST,
 * the items that arrived whole before its HEAD was sent but the object's
 * last; BG_REST, the others. Each gets exactly one HEAD of its own (or a
 * shared one another request sent after its items arrived). A group is
 * idle (taking items), asked (in slot BR_EARLY: the request's thread;
 * BR_END: the answer's reader, bt_read), done (res). Under ct->lock. */
enum { BG_FIRST, BG_REST };
enum { BR_EARLY, BR_END };
enum { BO_IDLE, BO_ASK, BO_DONE };
struct bt_grp {
	uint64_t need; /* the first HEAD number (f->bc_sent) that may confirm it */
	uint64_t seq;  /* the number of the HEAD of it this request sent, while out */
	int res;       /* BO_DONE: the HEAD's answer (0, -ESTALE, -EIO) */
	uint32_t n;    /* its runs */
	uint8_t st;
	uint8_t slot; /* BO_ASK: the thread that asks (BR_*) */
};
struct bt_obj {
	struct ct_file *f;
	size_t last;	    /* its last run in the request */
	uint32_t nrun;	    /* its runs in the request */
	unsigned mine;	    /* HEADs of it this request has in flight */
	uint64_t mine_last; /* the number of the last HEAD of it this request sent */
	struct bt_grp g[2]; /* [BG_FIRST], [BG_REST] */
	/* each group's HEAD's first hop, sent when the request starts
	 * (backend_head_ahead; NULL: none): taken by the confirmation that
	 * sends the group's own HEAD (under ct->lock), the others dropped at
	 * the request's end (bt_request) */
	struct backend_head_ahead *ahead[2];
	uint8_t waited; /* counted in head_waits */
	uint8_t stale;	/* a group found it changed (counted once in stale) */
};

/* A request's working arrays, one allocation (bt_work_new, cachetier_batch.c): the batch
 * read's items and outcomes, its objects, and two slots of HEADs (the
 * keys sent, their answers and errnos, the group each is of: [0, nruns)
 * for BR_EARLY, [nruns, 2 nruns) for BR_END, which may run at once; each
 * group asked has a run of its own, so a slot needs at most nruns). */
struct bt_work {
	struct backend_batch_item *items;
	int *err;
	struct bt_obj *obj;
	size_t nobj;
	const char **keys;
	struct backend_objinfo *info;
	int *herr;
	size_t *lead;
	struct backend_head_ahead **ahead; /* the HEADs' first hops, as keys */
	void *block;
};

/* What the sink tells the request's thread while the answer arrives
 * (bt_request): lock-free, so the store's I/O thread never waits. */
struct bt_live {
	sem_t arrive;	    /* posted at each item that came whole, and at the answer's end */
	atomic_size_t upto; /* runs [0, upto) were answered (the items come in order) */
	atomic_int ended;   /* backend_batch_read returned */
};

/* One request: items runs[0..nruns). */
struct bt_req {
	struct cachetier *ct;
	struct bt_run *runs;
	size_t nruns;
	uint64_t id;	   /* unique among requests: whose HEAD a file's last one was */
	uint64_t bytes;	   /* reserved for its runs not committed yet */
	int room;	   /* room was made: it runs */
	int own;	   /* one block with its runs and CRCs, freed by its thread */
	int urgent;	   /* confirms at once: never waits for a HEAD sent before its items */
	int ret;	   /* backend_batch_read's answer */
	struct ct_wjob wj; /* its writes, by the fill writer (cachetier__write_push) */
	struct cachetier_batch_result res;
	pthread_t th;
	int started;
	struct bt_work w;
	struct bt_live *live; /* NULL: no early commit (the answer read on this thread) */
	size_t asked;	      /* bt_early: runs [0, asked) were looked at */
};

/* cachetier_batch.c, no lock held: a slot for one request of the batch
 * fills or the batch reads into memory (at most par of them run at once,
 * ct->batch_running; par 0: a first call's request, which takes one without
 * waiting). A wait is counted (batch.slot_waits) and is on unit_cond in
 * bounded waits of 1 s each, while the tier runs. 0: taken (the request
 * gives it back: batch_running--, unit_cond broadcast); -ECANCELED: the
 * tier stops; -EOPNOTSUPP: the store refused a batch read. */
int cachetier__batch_slot(struct cachetier *ct, unsigned par);

/* cachetier_batch.c: a thread of the batch fills or the batch reads into
 * memory (fn(arg)), detached or not, on a stack of BT_STACK_BYTES: 0, or
 * pthread_create's errno. An epoch starts about a thousand of them (a
 * staged window: its own; until 2026-12-03 one per request and one per
 * object too, now submitted: cachetier_batchm.c), each living
 * for a request; on the default stack (the process's limit, 8 MiB here)
 * glibc keeps only 5 stacks for reuse (40 MiB), so most got a fresh mmap,
 * its page faults and, at their end, an munmap whose TLB shootdown
 * interrupts the other core: the GetBatch epoch's daemon spent 0.3-0.4
 * CPU-s more than the ranged one's, all of it in threads gone by the
 * epoch's end (tests/bench/README.md, batch8). At BT_STACK_BYTES 80 stay
 * cached. What runs on them: the store's blocking calls (backend_batch_read,
 * backend_head_follow, backend_stat_many: a URL, a path, a request struct
 * on the stack) and the stage's done callbacks. Each one started is
 * counted (ct->batch_threads: the batch results' threads). */
#define BT_STACK_BYTES (512u * 1024)
int cachetier__batch_thread(struct cachetier *ct, pthread_t *th, int detached, void *(*fn)(void *),
			    void *arg);

/* cachetier_batchv.c. ct->lock held: runs [from, upto) that came whole
 * (final: the answer ended, err[] read too) join their object's group;
 * groups due are asked in slot (BR_*). Returns the groups asked. */
size_t cachetier__batch_look(struct bt_req *q, size_t from, size_t upto, int slot, int final);
/* No lock held: one HEAD (or a shared one) for each group asked in slot;
 * returns when every one is done. */
void cachetier__batch_confirm(struct bt_req *q, int slot);
/* ct->lock held: each run whose group is done takes its answer. */
void cachetier__batch_decide(struct bt_req *q);

#endif
