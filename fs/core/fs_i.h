/*
 * fs_i.h — private to fs/core/: the mounted filesystem's state, shared by
 * the namespace, the shard loader, the control files, the operations
 * (fs_ops.h) and the core's own tests. The FUSE adapter, the tools and the
 * command's main see only the public API in include/ (fs_core.h), which
 * this header includes; meson gives them no path to this one. No FUSE type
 * appears here: fs/core/ builds without libfuse.
 *
 * The namespace (directories and objects of the source) is built at mount
 * from the backend's listing and changes only by versions: a refresh (or a
 * lookup that finds a local file changed) appends new objects and shards
 * at new indexes and marks the old ones stale or gone, so an inode number
 * never changes its meaning. Objects and shards live in blocks that never
 * move and are freed only at unmount; directories' entry lists are
 * protected by ns_lock (fs_ns.h). Shard indexes are loaded lazily, on the first
 * lookup or readdir inside a shard's directory, and are immutable once
 * loaded.
 */
#ifndef FS_I_H
#define FS_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/types.h>

#include "backend.h"
#include "cachetier.h"
#include "disk.h"
#include "disk_lock.h"
#include "fs_core.h"
#include "fs_core_ctl.h"
#include "fs_core_opt.h"
#include "fs_core_sidecar.h"
#include "fetch.h"
#include "shardidx.h"

/* ---- configuration (filled from the option tables in fs_opt.c) ---------
 * Every default is in those tables; nothing else applies one. */

struct fs_config {
	char *source;
	char *mountpoint;
	char *log_file;	      /* --log-file; none: stderr in foreground, else CACHE/.../log */
	char *fuse_opts;      /* -o, comma-joined */
	int foreground;	      /* -f */
	int debug;	      /* -d: FUSE request debugging, implies -f */
	unsigned max_threads; /* --threads: FUSE worker threads */
	uint64_t
	    kernel_ra_bytes;	/* --kernel-readahead: the mount's bdi readahead, 0: the kernel's */
	double entry_timeout_s; /* --timeout: entry/attr/negative timeouts: data is immutable */
	/* The remote store's settings (--endpoint, --no-sign, --connections,
	 * --ca-file, --retry-budget, --stall-timeout, --connect-timeout),
	 * handed to backend_open as they are (the daemon sets be.log);
	 * be.endpoint and be.ca_file are owned (fs_opt_free). */
	struct backend_config be;
	/* The cache tier's (--cache-dir or its computed default, --cache-size,
	 * --min-free, --min-free-percent, --max-decode-ratio,
	 * --max-decoded-size, --readahead, --chunk-size; fill_threads follows
	 * --connections), handed to cachetier_open as they are; ct.source stays
	 * NULL (the backend's description); ct.cache_dir is owned. */
	struct cachetier_config ct;
	uint64_t cache_size_bytes; /* ct.cache_size_bytes, for fs_warm.c (fs_opt.c sets it) */
	int chunk_size_given; /* --chunk-size was given (else fs_opt.c sizes it to the cache) */
	int readahead_given;  /* --readahead was given (said in the log line of its cap) */
	int max_connections_given;	/* --max-connections was given */
	int prefetch_connections_given; /* --prefetch-connections was given */
	unsigned uid, gid;		/* --uid, --gid: the owner every file shows */
	int uid_given, gid_given;	/* given (else the mounting user's) */
	/* --plan-lookahead: bytes of planned paths fetched ahead of the readers */
	uint64_t plan_lookahead_bytes;
	/* --plan-gap: bytes between planned extents of one object fetched
	 * with them in one request until the link is measured (0: never) */
	uint64_t plan_gap_bytes;
	uint64_t plan_memory_bytes; /* --plan-memory: the stage's bound (fetch/fetch_stage.c) */
	/* --get-batch: ais:// sources fetch planned windows with AIStore's
	 * GetBatch (enum fs_get_batch) */
	int get_batch;
	/* --imagefolder-build-memory: heap the imagefolder view's build sorts
	 * in before it writes sorted runs to the cache directory */
	uint64_t if_build_memory;
	/* --prefetch-shards: shards fetched ahead of an in-order reader */
	unsigned prefetch_shards;
	int warm;	   /* --warm: enum fs_warm_mode */
	int strict_open;   /* --strict-open: answer every open (no zero-cost opens) */
	int xattr;	   /* --xattr: user.shardfs.* xattrs; off: getxattr/listxattr answer
			    * ENOSYS, which the kernel caches for the mount */
	int no_xattr;	   /* --no-xattr: off, the default (wins over --xattr) */
	int sidecar;	   /* index --sidecar: also write NAME.tar.idx beside local shards */
	int layout;	   /* --layout: enum fs_layout */
	int class_from;	   /* --class-from: enum fs_class_from */
	int class_gaps;	   /* --class-gaps: enum fs_class_gaps */
	int listing_attrs; /* --listing-attrs: enum fs_listing_attrs */
};

/* --warm: fill the cache with the whole dataset in the background (fs_warm.c).
 * The values of this enum, fs_layout and fs_class_from are the positions
 * of their names in the option's table (FS_OPT_ENUM: "off|auto|all"). */
enum fs_warm_mode { FS_WARM_OFF = 0, FS_WARM_AUTO = 1, FS_WARM_ALL = 2 };

/* What the mount shows (docs/design.md section 1) */
enum fs_layout { FS_LAYOUT_SHARDS = 0, FS_LAYOUT_IMAGEFOLDER = 1 };
enum fs_class_from { FS_CLASS_CLS = 0, FS_CLASS_DIR = 1, FS_CLASS_KEY_PREFIX = 2 };
/* --class-gaps: .cls values missing below the largest (fs_if_view.c's prepare) */
enum fs_class_gaps { FS_GAPS_REFUSE = 0, FS_GAPS_EMPTY = 1 };
/* --listing-attrs: which entries of a listing carry attributes (fs_op_readdir) */
enum fs_listing_attrs { FS_LISTING_AUTO = 0, FS_LISTING_ALL = 1, FS_LISTING_LOOKED = 2 };
/* --get-batch: off (ranged GETs, as other stores), auto (ais:// sources) */
enum fs_get_batch { FS_GET_BATCH_OFF = 0, FS_GET_BATCH_AUTO = 1 };

/* ---- inode numbers ---------------------------------------------------------
 * Computed, never allocated: kind in the top 4 bits, then 28 bits of shard
 * and 32 bits of member index. The root directory is FUSE's inode 1. What
 * each kind does is its view's table of operations (fs_view.h). */
enum fs_kind {
	FS_K_DIR = 1,	 /* a directory of the source: a = dir index */
	FS_K_OBJ = 2,	 /* an object as a plain file: a = object index */
	FS_K_SHARD = 3,	 /* a shard's member tree root: a = shard index */
	FS_K_MEMBER = 4, /* a member: a = shard index, b = entry index */
	FS_K_CTL = 5,	 /* .shardfs and its files: a = enum fs_ctl */
	/* the mounted layout's own kinds, FS_K_LAYOUT + i for i below
	 * FS_LAYOUT_KINDS: their views are its (fs_view.h: struct
	 * fs_layout_ops), their a and b its own (imagefolder: fs_if_i.h) */
	FS_K_LAYOUT = 6,
	/* .shardfs/samples.tsv, wids.json and dali/ (fs_loaderidx.c) */
	FS_K_LIDX = 8, /* a = what, b = source dir, shard or generation */
};
#define FS_LAYOUT_KINDS 2
_Static_assert(FS_K_LAYOUT + FS_LAYOUT_KINDS <= FS_K_LIDX, "a layout's kinds are its own");

#define FS_INO_KIND_SHIFT 60
#define FS_INO_A_BITS	  28
#define FS_INO_B_BITS	  32
#define FS_MAX_SHARDS	  (1u << FS_INO_A_BITS)
_Static_assert(4 + FS_INO_A_BITS + FS_INO_B_BITS == 64, "inode fields fill 64 bits");
_Static_assert(FS_K_CTL < 16 && FS_K_LIDX < 16, "kind fits in 4 bits");

static inline uint64_t fs_ino(enum fs_kind k, uint32_t a, uint32_t b)
{
	if (k == FS_K_DIR && a == 0)
		return 1; /* FUSE_ROOT_ID */
	return ((uint64_t)k << FS_INO_KIND_SHIFT) | ((uint64_t)a << FS_INO_B_BITS) | b;
}

static inline enum fs_kind fs_ino_kind(uint64_t ino)
{
	return ino == 1 ? FS_K_DIR : (enum fs_kind)(ino >> FS_INO_KIND_SHIFT);
}

/* The next component of path[0, len) at or after *at, empty and '.'
 * components skipped: its length, *at at its start; 0 at the path's end
 * (the walks of a path: fs_plan.c's resolve, fs_plan_index.c, fs_ctl.c's
 * prefetch). */
static inline size_t fs_path_comp(const char *path, size_t len, size_t *at)
{
	size_t i = *at;

	while (i < len) {
		size_t j = i;

		while (j < len && path[j] != '/')
			j++;
		if (j > i && !(j - i == 1 && path[i] == '.')) {
			*at = i;
			return j - i;
		}
		i = j + 1;
	}
	*at = len;
	return 0;
}

/* Order of the NUL-terminated name m against name[0, len) (not
 * terminated): strcmp's, for the binary searches over sorted names. */
static inline int fs_name_cmp(const char *m, const char *name, size_t len)
{
	int c = strncmp(m, name, len);

	return c == 0 && m[len] != '\0' ? 1 : c; /* m longer: after name */
}

static inline uint32_t fs_ino_a(uint64_t ino)
{
	return ino == 1 ? 0 : (uint32_t)((ino >> FS_INO_B_BITS) & (FS_MAX_SHARDS - 1));
}

static inline uint32_t fs_ino_b(uint64_t ino)
{
	return (uint32_t)ino;
}

/* ---- namespace ------------------------------------------------------------ */

struct fs_dirent {
	const char *name; /* points into the object's key or the dir's name */
	uint8_t kind;	  /* FS_K_DIR, FS_K_OBJ or FS_K_SHARD */
	uint32_t idx;	  /* dir, object or shard index */
};

/* Everything in a dir except name and parent may change at a refresh:
 * read it only under ns_lock (read), change it under the write lock. */
struct fs_dir {
	char *name;		/* base name ("" for the root); never changes */
	uint32_t parent;	/* index of the parent dir (root: 0); never changes */
	struct fs_dirent *ents; /* sorted by name (strcmp), unique */
	uint32_t nents;
	uint32_t nsubdirs;
	int64_t mtime; /* newest object mtime below it */
	int gone;      /* no object below it any more: ESTALE */
	mode_t perm;   /* its permission bits: a local source's, else 0555 */
};

/* The version state of an object (fs_obj.state). */
enum fs_obj_state {
	FS_OBJ_LIVE = 0,  /* the current version of its key */
	FS_OBJ_STALE = 1, /* the source's object changed: a newer version replaces it */
	FS_OBJ_GONE = 2,  /* the source's object was removed */
};

/* What the mount knows of an object's size, mtime, mode and ETag (fs_obj.known). */
enum fs_obj_known {
	FS_INFO_KNOWN = 0,   /* info is complete */
	FS_INFO_LAZY = 1,    /* the listing gave the name only (a brace pattern's):
			      * fs_obj_learn asks the store on first need */
	FS_INFO_MISSING = 2, /* the store has no such object (404): ENOENT, not listed */
};

struct fs_obj {
	char *key;		     /* relative key */
	const char *base;	     /* base name, inside key */
	struct backend_objinfo info; /* info.key == key; size, mtime, mode and etag
				      * only once known is FS_INFO_KNOWN (read it with
				      * acquire, or after fs_obj_learn said 0): learning
				      * writes them under lock, then publishes known */
	atomic_int known;	     /* enum fs_obj_known; only ever leaves LAZY */
	uint32_t dir;		     /* parent dir index */
	int codec;		     /* -1: not a shard; else the enum cachetier_codec its
				      * name suggests (the shard's bytes decide: fs_shard.codec) */
	uint32_t shard;		     /* shard index when codec >= 0 */
	struct disk_mutex lock;	     /* DISK_LOCK_OBJ: protects raw; serialises learning info */
	struct cachetier_obj *raw;   /* opened on first read, kept until unmount */
	atomic_int prefetch;	     /* the id of the latest prefetch run that asked for it, 0:
				      * none (progress in stats; fs_ctl_run) */
	atomic_int ahead;	     /* 1 once fetched ahead of an in-order reader */
	atomic_int warm;	     /* 1: part of the warm fill (fs_warm.c) */
	atomic_int state;	     /* enum fs_obj_state; only ever leaves LIVE */
	/* 1: a read found this version's sidecar index wrong (fs_shard_reject);
	 * a version replacing it with the same ETag (fs_ns_replace) inherits
	 * it and builds its index from the shard. Only ever set. */
	atomic_int sidecar_rejected;
	/* 1: a lookup put this version in place of one the last refresh (or
	 * the mount) showed (fs_ns_replace): the next refresh counts it as
	 * changed, unless it finds it changed again or removed (counted
	 * then). Set and cleared under refresh_lock. */
	int changed_since_refresh;
	/* 1: its store answered FS_ETAG_PROBES HEADs in a row with a new
	 * ETag at the same size and mtime (fs_ns_replace): the ETag cannot
	 * tell a version. Reads fail with EPROTO, unless --weak-etag trust,
	 * whose version has no ETag (info.etag "": its size is checked).
	 * Set before the version is published, then only read. */
	int etag_unusable;
	/* Learning it (fs_learn.c), all three under fs->learn_lock: learning
	 * is 1 while one thread's HEAD for it is in flight (no other thread
	 * asks: they wait on fs->learn_cond until learn_gen, the count of its
	 * learnings ended, moves; then known says what it found, or learn_err,
	 * the error of that HEAD, when it stayed LAZY). */
	int learning;
	uint32_t learn_gen;
	int learn_err;
};

struct fs_shard {
	uint32_t obj;		/* the shard's object */
	char *dirname;		/* name of its member directory */
	struct disk_mutex lock; /* DISK_LOCK_SHARD: serialises loading */
	/* a thread builds the index under lock now: set under lock, cleared
	 * under fs->built_lock with a broadcast of built_cond, so that a
	 * request with a stop waits for it there, not on lock */
	atomic_int building;
	struct shardidx *_Atomic ix;	      /* set once, then immutable; reads a mapping
					       * of its cache file, unmapped at unmount
					       * (fs_shards_release) */
	struct cachetier_obj *_Atomic stream; /* decoded (or raw) tar stream */
	_Atomic int err; /* 0, or the error that refused the shard whole (-EFBIG,
			  * -ENOSPC): sticks, so loading is not tried again */
	int codec;	 /* enum cachetier_codec of the shard's bytes; set by
			  * the load, valid once ix is published */
	/* NULL: ix is trusted (built from the shard, or saved in this cache
	 * dir under the object's version). Else ix came from a sidecar: one
	 * bit per entry, set once that member's own tar header checked out
	 * (fs_member_read); published before ix, freed at unmount. */
	_Atomic uint64_t *_Atomic checked;
	/* the object (version) of the sidecar ix came from, when checked is
	 * set; written before checked is published. A refresh whose listing
	 * shows that sidecar changed or removed replaces the shard's object
	 * (ap_merge, fs_ns_apply.c), so the new sidecar is loaded. */
	uint32_t sidecar_obj;
	/* ix's mapping of its file in the cache dir, watched for changes in
	 * place (fs_shard_index asks before handing ix out); NULL: ix is in
	 * the heap. Set before ix is published, released with it. */
	struct cachetier_meta *meta;
	atomic_int rejected; /* 1 once ix was found wrong (fs_shard_reject) or
			      * its file changed (fs_shard_index) */
};

/* ---- counters (all relaxed atomics; read for stats) -----------------------
 * A plain struct in struct fs (fs->c), not behind a subsystem's pointer:
 * every part of the core counts into it, with no lock and no call;
 * fs_ctl.c reads it to render stats and metrics (fs_ctl.h). */
struct fs_counters {
	atomic_ullong lookups, getattrs, readdirs, reads, read_bytes, read_errors;
	atomic_ullong reads_interrupted; /* of reads, ended by fs_op_stop_on's stop */
	/* requests that gave up their wait for another's index build (fs_shard.c) */
	atomic_ullong index_waits_interrupted;
	/* index builds given up with the request that made them (fs_shard.c) */
	atomic_ullong index_builds_interrupted;
	atomic_ullong reads_inflight; /* fs_op_read to fs_op_read_done */
	atomic_ullong op_errors;      /* requests but reads that failed (fs_ll.c's reply helper) */
	atomic_ullong index_built, index_loaded, index_errors, index_bytes_scanned;
	atomic_ullong index_save_errors, members, damaged_shards, skipped_members;
	atomic_ullong index_removed; /* older versions' index blobs this mount removed */
	atomic_ullong index_mem_bytes, index_mapped_bytes;
	atomic_ullong prefetch_requests, prefetch_errors, shard_prefetches;
	atomic_ullong prefetch_waits; /* 'prefetch-wait' commands (fs_ctl.c) */
	atomic_ullong prefetch_wait_interrupts, umount_notices; /* (fs_ctl.c) */
	/* Imagefolder view and sidecar indexes */
	atomic_ullong if_images, if_no_image, if_no_class, if_dup_dropped, if_shards_indexed;
	atomic_ullong if_build_ms, if_cls_reads, index_sidecar, index_sidecar_rejected;
	/* sidecar indexes a member's tar header disproved on its first read */
	atomic_ullong index_rejected_on_read;
	/* saved indexes whose file changed in place under the mount (dropped,
	 * built again), and ones read into memory since no watch could be had */
	atomic_ullong index_changed, index_unwatched;
	/* checks that a mapped index's file is unchanged (fs_shard_index_unchanged) */
	atomic_ullong index_checks;
	atomic_ullong index_unsaved; /* indexes served from memory: the cache disk is full */
	/* shards a plan's publish found not indexed and built ahead of its
	 * paths (fs_plan_index.c), and of them the builds that ended */
	atomic_ullong plan_index_wanted, plan_index_done;
	/* saved indexes found unusable at load (damaged, cut, another version): built again */
	atomic_ullong index_saved_rejected;
	atomic_ullong if_view_loaded, if_view_saved, if_view_rejected, if_view_mapped;
	atomic_ullong if_view_changed; /* its file changed in place under the mount */
	atomic_ullong if_view_removed; /* older views' blobs this mount removed */
	atomic_ullong if_cls_removed;  /* older versions' class maps this mount removed */
	atomic_ullong if_build_runs;
	/* sources that change under the mount (fs_ns.c) */
	atomic_ullong refreshes, refresh_added, refresh_removed, refresh_changed, stale_noticed;
	/* objects marked stale or gone because the source changed (stale_noticed
	 * also counts a version dropped for its index: a generation) */
	atomic_ullong source_changes;
	atomic_ullong etag_unusable; /* objects whose ETag changes at every answer */
	/* cache files that could not be opened: the cache directory was
	 * removed under the mount (fs_shard.c, cache_gone) */
	atomic_ullong cache_dir_gone;
	atomic_ullong hidden_names; /* entries hidden by a name conflict at the last listing */
	/* a local source's symbolic links its last listing refused (out of
	 * the tree: backend_local_refused) */
	atomic_ullong source_links_refused;
	atomic_ullong xattr_requests; /* getxattr and listxattr requests */
	/* loader indexes (fs_loaderidx.c): builds of samples.tsv and wids.json;
	 * of the last build, shards left out of the DALI and wids indexes and
	 * members left out of the DALI files */
	atomic_ullong lidx_builds, lidx_shards_skipped, lidx_members_skipped;
	/* reading plans (fs_plan.c): plan commands taken; planned paths read */
	atomic_ullong plans_published, plan_hits;
	/* the plan fetcher (fetch/fetch_planner.c): planned paths and their
	 * bytes handed to the store to fetch ahead, ranges handed over (one or
	 * more planned extents and the bytes between them), those bytes
	 * between, the gap in force and the lookahead (over the plans) at the
	 * last batch */
	struct fetch_plan_counters pf;
	/* brace sources (fs_learn.c): objects whose size and ETag the store
	 * told on first need; named objects the store does not have (404);
	 * names a learner needed while another thread's HEAD for them was in
	 * flight, so it waited for that answer instead of asking again */
	atomic_ullong brace_learned, brace_missing, brace_waits;
	/* listings (fs_op_readdir): entries given as a name and type only */
	atomic_ullong listed_names_only;
	/* inodes the kernel forgot (FUSE FORGET, fs_count_forgets): the next
	 * path to one of them costs a LOOKUP again */
	atomic_ullong forgets;
	/* requests no operation of the core counts, by kind (fs_count_request:
	 * the adapter counts them, answered or refused) */
	atomic_ullong opens, releases, flushes, ioctls;
};

/* fs_thread.c: a background thread of the core (the warm fill, the plan
 * fetcher, the notifier) with its stop flag and wake-ups; every field is
 * the helper's. fs_open initialises them (fs_thread_init) and fs_close
 * stops, joins and destroys them. */
#define FS_THREAD_JOIN_S 10 /* fs_thread_stop waits at most this for the join */
struct fs_thread {
	const char *name;	/* for the log: "warm" */
	const char *comm;	/* the thread's name (top -H, perf): "shardfs-warm" */
	struct disk_mutex lock; /* DISK_LOCK_THREAD: protects stop and wake */
	pthread_cond_t cond;	/* stop or wake was set (CLOCK_MONOTONIC) */
	int stop, wake;
	int run;    /* started and not joined; the owner's thread only */
	int join_s; /* fs_thread_stop's bound: FS_THREAD_JOIN_S (a test may lower it) */
	pthread_t thread;
};
void fs_thread_init(struct fs_thread *t, const char *name, const char *comm);
/* Start fn(arg) on a new thread: 0, or -errno (logged; nothing runs). */
int fs_thread_start(struct fs_thread *t, void *(*fn)(void *), void *arg);
/* Any thread, never blocks but for the helper's lock: fs_thread_wake sets
 * wake, fs_thread_cancel sets stop (for good); both wake a waiting
 * fs_thread_wait. */
void fs_thread_wake(struct fs_thread *t);
void fs_thread_cancel(struct fs_thread *t);
/* For the thread's body: 1 once stop is set. */
int fs_thread_stopping(struct fs_thread *t);
/* For the thread's body: wait until wake or stop is set, at most timeout_ns
 * (<= 0: no bound but those); clears wake; 1 when stopping. */
int fs_thread_wait(struct fs_thread *t, long timeout_ns);
/* fs_thread_cancel, then join within join_s: 0 (joined, or never
 * started), or -ETIMEDOUT (logged; the thread still runs and may use what
 * it was given: the caller must not free it). Owner's thread only. */
int fs_thread_stop(struct fs_thread *t);
/* Free the lock and condition (not while the thread still runs: then a
 * no-op). */
void fs_thread_destroy(struct fs_thread *t);

/* Slots of fs->looked_dirs (a power of two). */
#define FS_LOOKED_BITS	12
#define FS_LOOKED_SLOTS (1u << FS_LOOKED_BITS)

struct fs {
	struct fs_config cfg;
	struct fs_ctl_state *ctl; /* fs_ctl.h: the control files' snapshots, the prefetch run */
	int no_open;		  /* set once in init: OPEN answers ENOSYS */
	struct backend *be;
	struct cachetier *ct;
	struct fetch *fetch; /* fetch.h: the fetch scheduler, its reader streams */

	/* The namespace (fs_ns.h): its locks behind fs->ns; what they protect
	 * stays here, read on every request without a call. Objects and
	 * shards: blocks of FS_BLOCK elements that never move (fs_obj(),
	 * fs_shard()); appended under refresh_lock, the count published after
	 * the element is complete, freed at unmount. */
	struct fs_ns *ns;
	struct fs_obj **objs;
	_Atomic uint32_t nobjs;
	struct fs_shard **shards;
	_Atomic uint32_t nshards;
	/* dirs, ndirs and every dir's entries: under ns_lock (fs_ns_rdlock) */
	struct fs_dir *dirs;
	_Atomic uint32_t ndirs;
	_Atomic uint64_t total_bytes; /* of live objects */
	struct fs_notify *notify;     /* fs_notify.h: invalidations, their queue and thread */
	int no_opendir;		      /* set once in init: the kernel can skip OPENDIR */
	int offline;		      /* the store was unreachable at mount: cached listing */
	/* a listing gave names only (a brace pattern): its objects are
	 * FS_INFO_LAZY until fs_obj_learn; set at build, or by the first
	 * refresh of a mount that started offline; never cleared */
	atomic_int lazy;
	/* DISK_LOCK_LEARN (a leaf): every object's learning, learn_gen and
	 * learn_err; learn_cond: a learning ended (fs_learn.c) */
	struct disk_mutex learn_lock;
	pthread_cond_t learn_cond;
	/* DISK_LOCK_BUILT (a leaf): every shard's building flag is cleared
	 * under it; built_cond: a build ended (fs_shard.c, fs_shard_index) */
	struct disk_mutex built_lock;
	pthread_cond_t built_cond;
	uid_t uid;
	gid_t gid;
	int64_t mount_time;
	struct fs_counters c;
	atomic_int etag_unusable_said; /* 1 once the log said an object's ETag unusable */
	atomic_int cache_gone_said;    /* 1 once the log said the cache directory was removed */
	/* HEADs of sidecar names left running on threads of their own by
	 * requests that gave them up (fs_sidecar.c); fs_close waits for 0 */
	atomic_int sidecar_heads;
	/* Directories in which a file was looked up (fs_op_lookup): their
	 * listings give every entry's attributes (--listing-attrs auto). A
	 * lossy set: a slot holds the inode number of the last directory
	 * hashed to it (0: none), so a directory may drop out and is added
	 * again by its next lookup; relaxed atomics, no lock. */
	_Atomic uint64_t looked_dirs[FS_LOOKED_SLOTS];
	/* fs_if.h: the imagefolder view, its lock and the views replaced */
	struct fs_imagefolder *imagefolder;
	struct fs_lidx *lidx;	/* fs_lidx.h: the loader index files, their lock */
	struct fs_warm *warm;	/* fs_warm.h: the warm fill, its state and thread */
	struct fs_plans *plans; /* fs_plan.h: the published reading plans and their lock */
	/* fs_plan_fetch.c: the fetch scheduler's planner (NULL: none) and its
	 * thread, woken by fs_plan.c's listener */
	struct fetch_planner *planner;
	struct fs_thread pfx;
};

/* Blocks of objects and shards (fs->objs, fs->shards). */
#define FS_BLOCK_SHIFT 12
#define FS_BLOCK       (1u << FS_BLOCK_SHIFT)
#define FS_NBLOCKS     (FS_MAX_SHARDS >> FS_BLOCK_SHIFT)

static inline struct fs_obj *fs_obj(const struct fs *fs, uint32_t i)
{
	return &fs->objs[i >> FS_BLOCK_SHIFT][i & (FS_BLOCK - 1)];
}

static inline struct fs_shard *fs_shard(const struct fs *fs, uint32_t i)
{
	return &fs->shards[i >> FS_BLOCK_SHIFT][i & (FS_BLOCK - 1)];
}

static inline int fs_obj_live(const struct fs_obj *o)
{
	return atomic_load_explicit(&o->state, memory_order_acquire) == FS_OBJ_LIVE;
}

/* fs_log.c (the rest: fs_core.h) */
/* backend_config's log callback: the backend's lines into this log. */
void fs_log_backend(void *arg, enum backend_log_level level, const char *msg);
/* The backend's lines of a command that does not mount (index, pack, ...):
 * "shardfs: MSG" on stderr, MSG by fs_quote's rule, as fs_log's */
void fs_log_backend_plain(void *arg, enum backend_log_level level, const char *msg);
/* 0 when the cache directory *dir (made first, 0700, when make is set) can
 * be used: a directory, writable by this user on a writable filesystem, and
 * no other user can place or replace a name on its path; *dir is then
 * replaced by its resolved path (heap). Without make, a directory not there
 * yet is 0 once its first missing part could be made (nothing created).
 * Else a negative errno (-EPERM for the trust rule) after saying the first
 * check that failed on stderr (fs_cachedir.c; the option parser runs it,
 * without make, before it fits --cache-size to the disk) */
int fs_cachedir_trust(const char **dir, int make);

/* fs_ns*.c: the namespace (fs_ns.h) */

/* fs_learn.c: the size, mtime and ETag of objects a listing named only (a
 * brace pattern's), learned on first need and kept for the mount's life.
 * fs_obj_learn: 0 once obj's info is known (asking the store now when it is
 * not), -ENOENT when the store does not have it (remembered: counted in
 * brace_missing and logged once; listings leave it out), or the store's
 * error (-EIO, -EACCES: not remembered, asked again next time). Blocks;
 * never call it holding ns_lock or obj's lock. */
int fs_obj_learn(struct fs *fs, uint32_t obj);
/* Learn objs[0..n) that are not known yet, asking the store for many at
 * once (backend_stat_many); errors are left for fs_obj_learn to find.
 * Objects another thread is learning are not asked again: it waits for
 * their answers before it returns. */
void fs_objs_learn(struct fs *fs, const uint32_t *objs, size_t n);
/* The learning lock and condition of fs (fs_open, fs_close). */
void fs_learn_init(struct fs *fs);
void fs_learn_destroy(struct fs *fs);
/* Learn every live object of the mount that is not known yet. */
void fs_learn_all(struct fs *fs);
/* Learn the objects of the entries [from, from + FS_LEARN_AHEAD) of source
 * directory dir when one of the first FS_LEARN_NEAR is not known, and of
 * the windows after it until FS_LEARN_NEAR entries that a listing shows
 * (not missing) were seen: what a listing (readdirplus) from entry from is
 * about to show. Takes ns_lock itself; call without it. */
#define FS_LEARN_AHEAD 4096
#define FS_LEARN_NEAR  (FS_LEARN_AHEAD / 2)
void fs_dir_learn(struct fs *fs, uint32_t dir, uint32_t from);
/* 1 when ino is an object or a shard's directory whose object is not known
 * yet (a listing shows its name without attributes). */
int fs_ino_unlearned(const struct fs *fs, uint64_t ino);
/* The object's size once known, else 0 (for sums over objects). */
static inline uint64_t fs_obj_size(const struct fs_obj *o)
{
	return atomic_load_explicit(&o->known, memory_order_acquire) == FS_INFO_KNOWN ? o->info.size
										      : 0;
}

/* fs_shard.c: lazily loaded shard indexes and the raw object streams.
 * fs_shard_index: shard's index (loaded on first use) and its stream; a
 * mapped index whose file changed in place is dropped (-ESTALE: below). */
int fs_shard_index(struct fs *fs, uint32_t shard, struct shardidx **ix,
		   struct cachetier_obj **stream);
/* 0, or -ESTALE when the file shard's loaded index is mapped from changed
 * in place since it was validated (the index is then dropped: counted in
 * index_changed, logged once, the object's version marked stale). For a
 * caller that read the index after fs_shard_index, before it answers. */
int fs_shard_index_unchanged(struct fs *fs, uint32_t shard);
/* A FUSE request starts on the calling thread (fs_op_begin): fs_shard_index
 * then skips its own check when this thread's last one, in this request,
 * was of the same shard and passed. */
void fs_shard_request_begin(void);
/* A codec's name in index identities and log lines (CACHETIER_RAW, _GZIP,
 * _ZSTD), fs_shard.c's. */
extern const char *const fs_codec_names[3];
/* fs_sidecar.c: *ix gets the sidecar's index of shard object o (codec, its
 * stream), or NULL when there is none or it is unusable (logged and
 * counted); *sobj gets the sidecar's object. 0, or -EINTR when the calling
 * thread's request gave up its reads of the store (cachetier_request_stop:
 * within CACHETIER_STOP_TICK_MS; nothing logged or counted). */
int fs_sidecar_load(struct fs *fs, const struct fs_obj *o, int codec, struct cachetier_obj *stream,
		    struct shardidx **ix, uint32_t *sobj);
/* Wait for the HEADs a given-up request left running (fs_sidecar.c): 0, or
 * -ETIMEDOUT past FS_THREAD_JOIN_S (the caller keeps the fs). */
int fs_sidecar_drain(struct fs *fs);
int fs_obj_raw(struct fs *fs, uint32_t obj, struct cachetier_obj **raw);
/* 1 when entry idx of shard's index (loaded) has to be checked against its
 * own tar header before its bytes are served: the index came from a
 * sidecar and no read checked that member yet (fs_shard.checked). */
int fs_shard_unchecked(struct fs *fs, uint32_t shard, uint32_t idx);
/* Entry idx's tar header hdr (the 512 bytes before its data) checked out:
 * mark it so. */
void fs_shard_mark_checked(struct fs *fs, uint32_t shard, uint32_t idx);
/* A read found entry e of shard's sidecar index wrong (its tar header is
 * another member's, or no header; why says which): the index is rejected
 * (counted in index_rejected_on_read, logged once), the object's version
 * is marked stale (files opened through the index get ESTALE) and
 * replaced by one whose index is built from the shard (fs_ns_replace: may
 * block on a stat of the source). Returns -ESTALE, for the read. */
int fs_shard_reject(struct fs *fs, uint32_t shard, const struct shardidx_entry *e, const char *why);
/* As fs_shard_reject, but the object is not replaced here: for a caller
 * that holds the imagefolder lock (the imagefolder build: fs_ns_replace resets the
 * view under it), which calls fs_shards_replace_rejected once it let go of
 * it. Returns -ESTALE. */
int fs_shard_reject_deferred(struct fs *fs, uint32_t shard, const struct shardidx_entry *e,
			     const char *why);
/* Replace the object of every shard whose index was rejected (a sidecar
 * a read disproved, a saved index changed in place) and
 * that is still listed (fs_ns_replace; a no-op for those replaced already).
 * May block on stats of the source; must not hold the imagefolder lock. */
void fs_shards_replace_rejected(struct fs *fs);
void fs_shards_release(struct fs *fs);
/* The blob family (cachetier_meta_put_in) of what the cache directory keeps
 * of the shard of object key key, one per key: kind FS_SAVED_INDEX (its
 * index) or FS_SAVED_CLASSES (imagefolder's class map); a version's save
 * sweeps the family of the other versions'. 0 or -ENAMETOOLONG. */
#define FS_SAVED_INDEX	 "index"
#define FS_SAVED_CLASSES "imagefolder-cls"
int fs_shard_family(const char *key, const char *kind, char *buf, size_t size);
/* The object of key key is gone from the source: remove its shard's saved
 * index and class map from the cache directory (counted in index_removed
 * and if_cls_removed; nothing for a key without them). */
void fs_shard_forget(struct fs *fs, const char *key);
/* reader (fetch.h) reads members of shard: the scheduler decides
 * (fetch_shards_ahead: a move to the next shard after 8 reads in a row of
 * the one before, by the same reader, fetches the next
 * cfg.prefetch_shards shards ahead); the core tells it which shards
 * follow in the same directory and marks each fetched ahead once. */
void fs_shard_touch(struct fs *fs, uint32_t reader, uint32_t shard);
/* Start filling the cache with object obj for a prefetch command (counts
 * the request): only into free room, never evicting (fetch_obj_fill). */
int fs_obj_prefetch(struct fs *fs, uint32_t obj);

/* fs_warm.c: --warm (fs_warm.h) */

/* fs_ctl.c, fs_view_ctl.c: the .shardfs control files (fs_ctl.h) */
/* fs_loaderidx.c: the loader index files (fs_lidx.h) */

/* fs_plan.c, fs_plan_fetch.c: reading plans (fs_plan.h) */

/* fs_notify.c: kernel cache invalidations (fs_notify.h) */

/* ---- fs_sort.c — an external sort within a memory budget ----------
 * Records (bytes) are added, then fs_sort_finish; iterators give them in
 * the order of cmp (a total order), or in the order added when cmp is
 * NULL. Past the budget, sorted runs go to a scratch file of the cache
 * directory (cachetier_scratch_open) and iterators merge them. An
 * iterator's record stays valid until its next call; several iterators
 * may be opened one after another. Adds are not thread-safe. Errors:
 * -ENOMEM, or the scratch file's (-ENOSPC: the cache disk is full). */
typedef int (*fs_sort_cmp)(const void *a, size_t alen, const void *b, size_t blen);
struct fs_sort;
struct fs_sort_iter;
int fs_sort_new(struct cachetier *ct, size_t budget, fs_sort_cmp cmp, struct fs_sort **s);
int fs_sort_add(struct fs_sort *s, const void *rec, size_t len);
int fs_sort_finish(struct fs_sort *s);
int fs_sort_spilled(const struct fs_sort *s);	/* runs were written to the disk */
uint64_t fs_sort_runs(const struct fs_sort *s); /* runs written, merged ones too */
uint64_t fs_sort_count(const struct fs_sort *s);
void fs_sort_free(struct fs_sort *s);
int fs_sort_iter_open(struct fs_sort *s, struct fs_sort_iter **it);
/* 1 and the next record, 0 at the end, or -errno. */
int fs_sort_next(struct fs_sort_iter *it, const void **rec, size_t *len);
void fs_sort_iter_close(struct fs_sort_iter *it);

#include "fs_ctl.h"
#include "fs_if.h"
#include "fs_lidx.h"
#include "fs_ns.h"
#include "fs_notify.h"
#include "fs_plan.h"
#include "fs_warm.h"

#endif
