/*
 * cachetier_evheap.h — private to cachetier/: eviction's order kept as
 * units change (cachetier_evheap.c), its fields in each object
 * (ct_file.ev) and in the tier (cachetier.ev), and the calls the code that
 * changes units makes; included by cachetier_i.h. Everything: ct->lock,
 * but the lock-free mark (dirty, dnext; cachetier__ev_mark).
 */
#ifndef CACHETIER_EVHEAP_H
#define CACHETIER_EVHEAP_H

#include <stdatomic.h>
#include <stdint.h>

struct cachetier;
struct ct_file;

/* A unit's place in the eviction order (cachetier_evkey.h): class, then
 * 'at' (the smaller first). */
struct ev_key {
	int cls;
	int64_t at;
};

/* An object's place. */
struct ct_evfile {
	uint32_t pos[3];    /* 1 + its index in the tier's h[i]; 0: not in it */
	struct ev_key k[2]; /* its first unit's key: of all units, of those not ahead */
	uint32_t u[2];	    /* ... that unit (UINT32_MAX: none) */
	int64_t exp;	    /* when a unit of it stops being ahead by time (INT64_MAX: none) */
	int64_t fat;	    /* its last use (file_at) when computed whole */
	int uold;	    /* a unit placed untouched: its key is fat's ... */
	int uold_ahead;	    /* ... and one of them ahead (its key is minus fat) */
	/* its evictable units in eviction order (as the heaps' first keys
	 * see it: a fill that may evict anything), two heaps of unit numbers:
	 * units no plan needs or speaks of (uh[0]) and units a plan needs
	 * (uh[1]); each unit's key as placed (ucls, uat: a planned unit's raw
	 * mark) and 1 + its index in its heap (upos; UPOS_H1 set: uh[1]; 0:
	 * in neither). A key as placed is never later than the unit's own
	 * (the changes that move a unit forward mark it): a heap's first unit
	 * is checked when looked at, placed again when its key moved back,
	 * and taken out when it may not be evicted. NULL: not built. */
	uint32_t *uh[2], un[2], *upos;
	int64_t *uat;
	uint8_t *ucls;
	uint64_t ahead;		/* its bytes filled ahead and spared (summed in the tier's) */
	uint8_t *held;		/* per unit: counted in ahead */
	uint64_t seq;		/* its place in ct->files (equal keys: the later one first) */
	uint64_t chk;		/* the pick that last computed its keys */
	_Atomic uint64_t range; /* units marked since: end << 32 | first; 0: none */
	/* ... and each of them: a bit a unit, set before the range (NULL until
	 * its units' heaps are built: a mark then marks all; nmw words) */
	_Atomic(_Atomic uint64_t *) mbits;
	uint32_t nmw;
	atomic_int dirty;      /* on the tier's dirty (marked) */
	struct ct_file *dnext; /* ... the next there */
};

struct ct_evheap {
	struct ct_file **v;
	uint32_t n, cap;
};

/* The tier's order: heaps of objects by their first unit's key (all
 * units; units not ahead) and by when a unit stops being ahead; objects
 * marked since the last pick (lock-free); the bytes filled ahead; the
 * objects a pick set aside; tests' checks and counts
 * (cachetier_evict_verify). */
struct ct_evorder {
	struct ct_evheap h[3];
	_Atomic(struct ct_file *) dirty;
	uint64_t ahead, seq, picks;
	struct ct_file **park;
	uint32_t npark, cpark;
	int verify;
	uint64_t examined, scanned, mismatch;
	int64_t cur_fat;		/* evict()'s walk: the object's last use */
	uint64_t lists, list_mismatch;	/* evict()'s lists compared with the sort, differing */
	uint64_t looked, sorted, units; /* units evict() looked at; the sort's; units evicted */
	uint64_t raced;			/* checked picks made again: a unit marked meanwhile */
	void (*hook)(void *);		/* cachetier_evict_verify_hook */
	void *hook_arg;
};

/* mark_units: units [c0, c1) of f changed in a way that may bring one
 * of them forward in the eviction order or change its bytes filled ahead
 * (it became valid, unpinned or was lost, was read, named by a range,
 * marked or read by a plan): they are looked at again at the next pick.
 * mark: all of f's (its object was opened or evicted from, its reader's
 * place moved, a plan's reset). Any thread, with or without ct->lock
 * (lock-free). link: f was just put at the head of ct->files (ct->lock
 * held). free: the heaps go (cachetier_close, before the files: no other
 * thread runs). */
void cachetier__ev_mark_units(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1);
void cachetier__ev_mark(struct cachetier *ct, struct ct_file *f);
void cachetier__ev_link(struct cachetier *ct, struct ct_file *f);
void cachetier__ev_free(struct cachetier *ct);

/* UPOS_H1: a unit's place (ct_evfile.upos) is in uh[1]. */
#define UPOS_H1 0x80000000u

#endif
