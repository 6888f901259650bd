/*
 * fs_i.h — private to fs/: the mounted filesystem's state, shared by the
 * namespace, the shard loader, the control files, the operations (fs_ops.h),
 * the offline tools, the FUSE adapter and the CLI. No FUSE type appears here:
 * fs/core/ builds without libfuse.
 *
 * The namespace (directories and objects of the source) is built at mount
 * from the backend's listing and changes only by versions: a refresh (or a
 * lookup that finds a local file changed) appends new objects and shards
 * at new indexes and marks the old ones stale or gone, so an inode number
 * never changes its meaning. Objects and shards live in blocks that never
 * move and are freed only at unmount; directories' entry lists are
 * protected by fs->ns_lock. Shard indexes are loaded lazily, on the first
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
#include "shardidx.h"

#define SHARDFS_VERSION "0.1.0"

/* ---- configuration (filled from the option tables in fs_opt.c) ---------
 * Every default is in those tables; nothing else applies one. */

struct fs_config {
	char *source;
	char *mountpoint;
	char *log_file;		/* --log-file; none: stderr in foreground, else CACHE/.../log */
	char *fuse_opts;	/* -o, comma-joined */
	int foreground;		/* -f */
	int debug;		/* -d: FUSE request debugging, implies -f */
	unsigned max_threads;	/* --threads: FUSE worker threads */
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
	/* --plan-lookahead: bytes of planned paths fetched ahead of the readers */
	uint64_t plan_lookahead_bytes;
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
	int listing_attrs; /* --listing-attrs: enum fs_listing_attrs */
};

/* --warm: fill the cache with the whole dataset in the background (fs_warm.c).
 * The values of this enum, fs_layout and fs_class_from are the positions
 * of their names in the option's table (FS_OPT_ENUM: "off|auto|all"). */
enum fs_warm_mode { FS_WARM_OFF = 0, FS_WARM_AUTO = 1, FS_WARM_ALL = 2 };
/* warm_state in stats */
enum fs_warm_state {
	FS_WARM_STATE_OFF = 0,
	FS_WARM_STATE_RUNNING = 1,
	FS_WARM_STATE_DONE = 2,	   /* every byte of the dataset is cached */
	FS_WARM_STATE_STOPPED = 3, /* ended short: the cache is full (it never evicts to warm),
				    * or fills failed */
};

/* What the mount shows (docs/design.md section 1) */
enum fs_layout { FS_LAYOUT_SHARDS = 0, FS_LAYOUT_IMAGEFOLDER = 1 };
enum fs_class_from { FS_CLASS_CLS = 0, FS_CLASS_DIR = 1, FS_CLASS_KEY_PREFIX = 2 };
/* --listing-attrs: which entries of a listing carry attributes (fs_op_readdir) */
enum fs_listing_attrs { FS_LISTING_AUTO = 0, FS_LISTING_ALL = 1 };

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
	/* --layout imagefolder (fs_if_view.c) */
	FS_K_IFCLASS = 6, /* a class directory at the root: a = class index */
	FS_K_IFFILE = 7,  /* a sample's image: a = shard index, b = entry index (canon) */
	/* .shardfs/samples.tsv, wids.json and dali/ (fs_loaderidx.c) */
	FS_K_LIDX = 8, /* a = what, b = source dir, shard or generation */
};

#define FS_INO_KIND_SHIFT 60
#define FS_INO_A_BITS	  28
#define FS_INO_B_BITS	  32
#define FS_MAX_SHARDS	  (1u << FS_INO_A_BITS)
_Static_assert(4 + FS_INO_A_BITS + FS_INO_B_BITS == 64, "inode fields fill 64 bits");
_Static_assert(FS_K_CTL < 16 && FS_K_LIDX < 16, "kind fits in 4 bits");

/* .shardfs/plans (FS_CTL_PLANS and after) is reachable by name only:
 * listings of .shardfs show the files before FS_CTL_LISTED. */
enum fs_ctl {
	FS_CTL_DIR = 0,
	FS_CTL_STATS,
	FS_CTL_METRICS,
	FS_CTL_CONTROL,
	FS_CTL_PLANS,
	FS_CTL_COUNT
};
#define FS_CTL_LISTED FS_CTL_PLANS

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
 * read it only under fs->ns_lock (read), change it under the write lock. */
struct fs_dir {
	char *name;		/* base name ("" for the root); never changes */
	uint32_t parent;	/* index of the parent dir (root: 0); never changes */
	struct fs_dirent *ents; /* sorted by name (strcmp), unique */
	uint32_t nents;
	uint32_t nsubdirs;
	int64_t mtime; /* newest object mtime below it */
	int gone;      /* no object below it any more: ESTALE */
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
	pthread_mutex_t lock;	     /* protects raw; serialises learning info */
	struct cachetier_obj *raw;   /* opened on first read, kept until unmount */
	atomic_int prefetch;	     /* the id of the latest prefetch run that asked for it, 0:
				      * none (progress in stats; fs->pf_run) */
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
	 * then). Set and cleared under fs->refresh_lock. */
	int changed_since_refresh;
};

struct fs_shard {
	uint32_t obj;			      /* the shard's object */
	char *dirname;			      /* name of its member directory */
	pthread_mutex_t lock;		      /* serialises loading */
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
	atomic_int rejected; /* 1 once a read found ix wrong (fs_shard_reject) */
};

struct fs_notify; /* a queued kernel cache invalidation (fs_notify.c) */
/* How the notifier sends an invalidation to the kernel (given by the FUSE
 * adapter); called on the notifier thread only. */
struct fs_notify_ops {
	void (*inval_inode)(void *ctx, uint64_t ino);
	void (*inval_entry)(void *ctx, uint64_t parent, const char *name, size_t len);
};

/* ---- counters (all relaxed atomics; read for stats) ----------------------- */
struct fs_counters {
	atomic_ullong lookups, getattrs, readdirs, reads, read_bytes, read_errors;
	atomic_ullong op_errors; /* requests but reads that failed (fs_ll.c's reply helper) */
	atomic_ullong index_built, index_loaded, index_errors, index_bytes_scanned;
	atomic_ullong index_save_errors, members, damaged_shards, skipped_members;
	atomic_ullong index_removed; /* older versions' index blobs this mount removed */
	atomic_ullong index_mem_bytes, index_mapped_bytes;
	atomic_ullong prefetch_requests, prefetch_errors, shard_prefetches;
	/* Imagefolder view and sidecar indexes */
	atomic_ullong if_images, if_no_image, if_no_class, if_dup_dropped, if_shards_indexed;
	atomic_ullong if_build_ms, if_cls_reads, index_sidecar, index_sidecar_rejected;
	/* sidecar indexes a member's tar header disproved on its first read */
	atomic_ullong index_rejected_on_read;
	atomic_ullong index_unsaved; /* indexes served from memory: the cache disk is full */
	atomic_ullong if_view_loaded, if_view_saved, if_view_rejected, if_view_mapped;
	atomic_ullong if_view_removed; /* older views' blobs this mount removed */
	atomic_ullong if_cls_removed;  /* older versions' class maps this mount removed */
	atomic_ullong if_build_runs;
	/* sources that change under the mount (fs_ns.c) */
	atomic_ullong refreshes, refresh_added, refresh_removed, refresh_changed, stale_noticed;
	atomic_ullong hidden_names;   /* entries hidden by a name conflict at the last listing */
	atomic_ullong xattr_requests; /* getxattr and listxattr requests */
	/* loader indexes (fs_loaderidx.c): builds of samples.tsv and wids.json;
	 * of the last build, shards left out of the DALI and wids indexes and
	 * members left out of the DALI files */
	atomic_ullong lidx_builds, lidx_shards_skipped, lidx_members_skipped;
	/* reading plans (fs_plan.c): plan commands taken; planned paths read */
	atomic_ullong plans_published, plan_hits;
	/* fs_plan_fetch.c: planned paths and their bytes handed to the cache
	 * tier to fetch ahead */
	atomic_ullong plan_fetch_paths, plan_fetch_bytes;
	/* brace sources (fs_learn.c): objects whose size and ETag the store
	 * told on first need; named objects the store does not have (404) */
	atomic_ullong brace_learned, brace_missing;
	/* listings (fs_op_readdir): entries given as a name and type only */
	atomic_ullong listed_names_only;
};

/* Snapshots of control files, one per open. A READ may still be in flight
 * when RELEASE frees its snapshot (the kernel issues direct-I/O reads
 * asynchronously and returns on the first short one), so the file handle
 * is a generation number looked up under a lock, never a pointer. */
#define FS_CTL_SNAPS 1024
struct fs_ctl_snap {
	uint64_t gen; /* 0: free */
	char *buf;
	size_t len;
};

/* Slots of fs->looked_dirs (a power of two). */
#define FS_LOOKED_BITS	12
#define FS_LOOKED_SLOTS (1u << FS_LOOKED_BITS)

/* Reading plans at once (fs_plan.c): a new name past it drops the plan
 * published longest ago. */
#define FS_PLAN_MAX 64

struct fs {
	struct fs_config cfg;
	pthread_mutex_t ctl_lock; /* protects ctl_snaps, ctl_gen and ctl_cur */
	struct fs_ctl_snap ctl_snaps[FS_CTL_SNAPS];
	uint64_t ctl_gen;
	/* Without OPEN requests (zero-cost opens) a control file is read through
	 * the page cache: every GETATTR renders a new snapshot here and reports
	 * its size and a new mtime, so the kernel drops the old pages, and the
	 * READ that follows serves this snapshot. */
	struct fs_ctl_snap ctl_cur[FS_CTL_COUNT];
	int no_open; /* set once in init: OPEN answers ENOSYS */
	struct backend *be;
	struct cachetier *ct;

	/* Objects and shards: blocks of FS_BLOCK elements that never move
	 * (fs_obj(), fs_shard()); appended under refresh_lock, the count
	 * published after the element is complete, freed at unmount. */
	struct fs_obj **objs;
	_Atomic uint32_t nobjs;
	struct fs_shard **shards;
	_Atomic uint32_t nshards;
	/* Lock order: refresh_lock, then ns_lock. refresh_lock serialises every
	 * change of the namespace (refresh, a lookup replacing a changed
	 * object); ns_lock (reader-preferring, so a reader may take it twice)
	 * protects dirs, ndirs and every dir's entries. Nothing blocks on I/O
	 * or on the kernel while holding ns_lock. */
	pthread_mutex_t refresh_lock;
	/* Objects a lookup dropped (removed) since the last refresh
	 * (fs_ns_replace): the next refresh counts them, as it would have had
	 * they still been named (replaced ones: changed_since_refresh). Under
	 * refresh_lock. */
	uint32_t replaced_removed;
	pthread_rwlock_t ns_lock;
	struct fs_dir *dirs;
	_Atomic uint32_t ndirs;
	_Atomic uint64_t total_bytes; /* of live objects */
	/* kernel cache invalidations, sent by one notifier thread (fs_notify.c)
	 * through nq_ops (set once at fs_notify_start) */
	const struct fs_notify_ops *nq_ops;
	void *nq_ctx;
	struct fs_notify *nq_head, **nq_tail; /* protected by nq_lock */
	pthread_mutex_t nq_lock;
	pthread_cond_t nq_cond; /* work queued, or stop */
	pthread_cond_t nq_idle; /* queue drained */
	int nq_busy;		/* the notifier is sending an item */
	int nq_run;		/* the notifier thread runs */
	pthread_t nq_thread;

	int no_opendir; /* set once in init: the kernel can skip OPENDIR */
	int offline;	/* the store was unreachable at mount: cached listing */
	/* a listing gave names only (a brace pattern): its objects are
	 * FS_INFO_LAZY until fs_obj_learn; set at build, or by the first
	 * refresh of a mount that started offline; never cleared */
	atomic_int lazy;
	atomic_uint last_shard; /* the shard whose members were read last (+1; 0: none) */
	atomic_uint shard_run;	/* reads of it since the first, in a row (fs_shard_touch) */
	uid_t uid;
	gid_t gid;
	int64_t mount_time;
	struct fs_counters c;
	/* Directories in which a file was looked up (fs_op_lookup): their
	 * listings give every entry's attributes (--listing-attrs auto). A
	 * lossy set: a slot holds the inode number of the last directory
	 * hashed to it (0: none), so a directory may drop out and is added
	 * again by its next lookup; relaxed atomics, no lock. */
	_Atomic uint64_t looked_dirs[FS_LOOKED_SLOTS];
	/* The imagefolder view, built on first use, then immutable */
	pthread_mutex_t if_lock; /* serialises building */
	struct fs_ifview *_Atomic ifv;
	struct fs_ifview *if_retired; /* views a refresh replaced; freed at unmount */
	/* fs_loaderidx.c: the newest samples.tsv/wids.json, built under
	 * if_lock, then immutable; older generations hang off it until unmount */
	struct fs_lidx_doc *_Atomic lidx;
	/* fs_warm.c: the warm fill. warm_on and the thread are set before it
	 * runs; warm_lock protects warm_stop (warm_cond wakes the thread). */
	int warm_on;		  /* a warm fill runs or ran */
	atomic_int warm_listed;	  /* every object of it was handed to the cache tier */
	atomic_int warm_state;	  /* enum fs_warm_state once it ended; 0 before */
	atomic_int warm_declined; /* a brace pattern's warm decided not to warm once
				   * the sizes were known (stats: off) */
	int warm_thread_run;
	pthread_t warm_thread;
	pthread_mutex_t warm_lock;
	pthread_cond_t warm_cond;
	int warm_stop;
	/* fs_ctl.c: the latest prefetch run (under ctl_lock). A run begins at a
	 * 'prefetch-start' command, or at a prefetch command from another
	 * process than the run's; its objects carry its id in o->prefetch, and
	 * the prefetch_run_* counters are of its objects only. */
	int pf_run;		/* its id, 1, 2, ...; 0: none yet */
	pid_t pf_run_pid;	/* the process that began it */
	uint64_t pf_run_before; /* bytes of its objects cached when it named them */
	/* fs_plan.c: the published reading plans. plan_lock (initialised with
	 * ctl_lock) protects plans[]; a plan itself is
	 * immutable but for its atomic read marks and position, and lives
	 * while referenced (fs_plan_put). */
	pthread_rwlock_t plan_lock;
	struct fs_plan *plans[FS_PLAN_MAX];
	atomic_uint nplans;		  /* plans published now (reads skip the lock at 0) */
	atomic_ullong plan_gen;		  /* changes at every publish and clear */
	void (*plan_listener)(void *ctx); /* fs_plan_set_listener: set before serving */
	void *plan_listener_ctx;
	/* bytes: the furthest any plan's readers got, on the plans' clock
	 * (fs_plan.c: next use) */
	atomic_ullong plan_clock;
	/* fs_plan_fetch.c: the fetcher; pfx_lock protects pfx_wake, pfx_stop */
	int pfx_run;
	pthread_t pfx_thread;
	pthread_mutex_t pfx_lock;
	pthread_cond_t pfx_cond;
	int pfx_wake, pfx_stop;
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

/* fs_log.c */
enum fs_log_level { FS_LOG_ERR, FS_LOG_WARN, FS_LOG_INFO, FS_LOG_DEBUG };
void fs_log(enum fs_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int fs_log_open_file(const char *path);
int fs_log_fd(void); /* the log's descriptor (2: stderr) */
/* b as "12.34 MiB" (B, KiB, MiB, GiB, TiB) into out. */
void fs_human_bytes(uint64_t b, char *out, size_t n);
void fs_log_set_debug(int on);
/* backend_config's log callback: the backend's lines into this log. */
void fs_log_backend(void *arg, enum backend_log_level level, const char *msg);

/* fs_ns.c: build the namespace from the backend's listing. */
int fs_ns_build(struct fs *fs);
void fs_ns_free(struct fs *fs);
/* List the source again and apply it: new objects appear (at new indexes),
 * removed ones are marked gone, changed ones (another ETag; local: size,
 * mtime, ctime or inode) are marked stale and replaced by a new version at
 * a new index. Kernel caches of what changed are invalidated through the
 * notifier. Blocks (listing); callable from any thread. Returns 0 or the
 * listing's error (then nothing changed). */
int fs_ns_refresh(struct fs *fs);
/* A brace pattern's mount keeps what it learned (sizes, ETags) as the
 * source's listing in the cache directory, merged with the one kept before,
 * for a later mount that finds the store unreachable. At unmount, when no
 * request runs; 0 or -errno (nothing learned: nothing written). */
int fs_ns_keep_learned(struct fs *fs);
/* Is object obj still the source's current version? 0, or -ESTALE once it
 * changed or went away (then it is marked so and the kernel's caches of it
 * are invalidated). Local sources stat the file (one fstatat) unless it is
 * marked already; remote ones only report the mark (their reads carry
 * If-Match and mark the object through fs_obj_mark_stale). */
int fs_obj_check(struct fs *fs, uint32_t obj);
/* Mark obj stale (changed) and queue the invalidations of its inodes. */
void fs_obj_mark_stale(struct fs *fs, uint32_t obj, enum fs_obj_state why);
/* Object obj is not live (or fs_obj_check said so) and a lookup found its
 * name: stat the source's object and replace obj's entries in its
 * directory with a new version at new indexes, or remove them when it is
 * gone. Returns 0 (look the name up again) or a negative errno. */
int fs_ns_replace(struct fs *fs, uint32_t obj);
/* Read lock of the directories (fs->ns_lock) around fs_ns_lookup and any
 * use of fs->dirs. */
void fs_ns_rdlock(struct fs *fs);
void fs_ns_unlock(struct fs *fs);
/* fs_ns.c: binary search for the name name[0..len) (no NUL needed) in elements
 * [lo, hi) of an array of structs of size stride, sorted by strcmp of the
 * string whose char * sits at offset name_off of each: the index found, or
 * -1. */
int64_t fs__bsearch_name(const void *base, size_t stride, size_t name_off, uint32_t lo, uint32_t hi,
			 const char *name, size_t len);
/* Entry named name[0..len) in dir, or NULL. */
const struct fs_dirent *fs_ns_lookup(const struct fs *fs, uint32_t dir, const char *name,
				     size_t len);
/* The codec of a shard name (-1 when it is no shard) and the length of its
 * member directory name. */
int fs_ns_shard_suffix(const char *name, size_t *dirlen);

/* fs_learn.c: the size, mtime and ETag of objects a listing named only (a
 * brace pattern's), learned on first need and kept for the mount's life.
 * fs_obj_learn: 0 once obj's info is known (asking the store now when it is
 * not), -ENOENT when the store does not have it (remembered: counted in
 * brace_missing and logged once; listings leave it out), or the store's
 * error (-EIO, -EACCES: not remembered, asked again next time). Blocks;
 * never call it holding ns_lock or obj's lock. */
int fs_obj_learn(struct fs *fs, uint32_t obj);
/* Learn objs[0..n) that are not known yet, asking the store for many at
 * once (backend_stat_many); errors are left for fs_obj_learn to find. */
void fs_objs_learn(struct fs *fs, const uint32_t *objs, size_t n);
/* Learn every live object of the mount that is not known yet. */
void fs_learn_all(struct fs *fs);
/* Learn the objects of the entries [from, from + FS_LEARN_AHEAD) of source
 * directory dir when one of the first FS_LEARN_NEAR is not known: what a
 * listing (readdirplus) from entry from is about to show. Takes ns_lock
 * itself; call without it. */
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

/* fs_shard.c: lazily loaded shard indexes and the raw object streams. */
int fs_shard_index(struct fs *fs, uint32_t shard, struct shardidx **ix,
		   struct cachetier_obj **stream);
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
 * that holds fs->if_lock (the imagefolder build: fs_ns_replace resets the
 * view under it), which calls fs_shards_replace_rejected once it let go of
 * it. Returns -ESTALE. */
int fs_shard_reject_deferred(struct fs *fs, uint32_t shard, const struct shardidx_entry *e,
			     const char *why);
/* Replace the object of every shard whose sidecar index was rejected and
 * that is still listed (fs_ns_replace; a no-op for those replaced already).
 * May block on stats of the source; must not hold fs->if_lock. */
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
/* A reader reads members of shard: when shards are read in order (a move
 * to the next shard after 8 reads in a row of the one before), fetch the
 * next cfg.prefetch_shards shards of the same directory ahead. */
void fs_shard_touch(struct fs *fs, uint32_t shard);
/* Start filling the cache with object obj for a prefetch command (counts
 * the request): only into free room, never evicting (CACHETIER_PF_FIT). */
int fs_obj_prefetch(struct fs *fs, uint32_t obj);

/* fs_warm.c: --warm. Decide from the mode, the dataset's size, the cache's
 * size and the disk's room whether to warm, say so in the log, and start
 * the warm thread (which hands every object to the cache tier as a PF_FIT
 * prefetch, in listing order, then follows it to its end). Call once,
 * after the namespace is built. fs_warm_stop joins the thread (call after
 * cachetier_cancel; accepts a warm that never started). */
void fs_warm_start(struct fs *fs);
void fs_warm_stop(struct fs *fs);
struct fs_warm_progress {
	uint64_t wanted; /* bytes of the objects being warmed */
	uint64_t done;	 /* of those, bytes cached now */
	uint64_t unfit;	 /* of those, bytes skipped: no room without evicting */
	unsigned state;	 /* enum fs_warm_state */
};
void fs_warm_progress(struct fs *fs, struct fs_warm_progress *p);
/* Bytes the cache can still take without evicting: the smaller of what
 * --cache-size leaves above the directory's usage and the disk's free
 * space above its reserve. */
uint64_t fs_cache_room(struct fs *fs);

/* Commands reach a running mount as this ioctl on MOUNTPOINT/.shardfs/control
 * opened read-only (the mount is read-only, so nothing on it can be opened
 * for writing): the argument is FS_CTL_IOC_LEN bytes holding command lines
 * as fs_ctl_command takes them, NUL-terminated. ioctl returns what
 * fs_ctl_command does (-1 with errno for an error). Only the mount's owner
 * (and root) may send commands. */
#define FS_CTL_IOC_LEN 8192
#define FS_CTL_IOC     _IOW('S', 0x01, char[FS_CTL_IOC_LEN])

/* fs_ctl.c: the .shardfs control files. */
extern const char *const fs_ctl_names[FS_CTL_COUNT];
/* Render control file 'which' into a malloc'd buffer. */
int fs_ctl_render(struct fs *fs, enum fs_ctl which, char **buf, size_t *len);
/* The stats document read back (the CLI, fs_client.c): its fields in the
 * order of the file; a value is a string's text (unescaped) or a number's
 * digits. fs_stats_parse returns 0, -EPROTO when text is not a flat JSON
 * object of strings and integers, or -ENOMEM. */
struct fs_stats_field {
	const char *name, *value;
};
struct fs_stats_doc {
	struct fs_stats_field *f;
	size_t n;
	char *buf; /* holds every name and value */
};
int fs_stats_parse(const char *text, struct fs_stats_doc *d);
void fs_stats_doc_free(struct fs_stats_doc *d);
/* The value of field name, or NULL. */
const char *fs_stats_get(const struct fs_stats_doc *d, const char *name);
/* The unsigned integer value of field name: 0, -ENOENT, or -EPROTO. */
int fs_stats_u64(const struct fs_stats_doc *d, const char *name, uint64_t *v);
/* fs_view_ctl.c: free every snapshot of the control files (at unmount,
 * when no request runs any more). */
void fs_ctl_free(struct fs *fs);
/* fs_loaderidx.c: name in .shardfs when it is a loader index (samples.tsv,
 * wids.json, dali): 0 with *ino (untouched when it is none), or the build's
 * error. fs_lidx_free frees every generation (fs_ctl_free calls it). */
int fs_lidx_lookup_ctl(struct fs *fs, const char *name, uint64_t *ino);
void fs_lidx_free(struct fs *fs);
/* Carry out the commands written to .shardfs/control (one per line):
 *   prefetch [PATH]   fill the cache with every object at or below PATH
 *                     (relative to the mount root; none: everything), as
 *                     part of the sender's prefetch run (fs->pf_run)
 *   prefetch-start    begin a new prefetch run for the sender
 *   refresh           list the source again (fs_ns_refresh) and wait until
 *                     the kernel's caches of what changed are invalidated
 *   plan [NAME] FILE  publish the reading plan in FILE (an absolute path the
 *                     daemon reads) under NAME (fs_plan_publish; none: the
 *                     sender's, "pid-PID" with pid, the sending process)
 *   plan-clear [NAME] drop the plan NAME (none: the sender's)
 * A PATH inside a shard's member directory prefetches the whole shard (the
 * cache holds objects, a member is a range of its shard).
 * Returns 0, 1 when a PATH named something inside a shard (so its shard
 * was prefetched), or -EINVAL / -ENOENT for a bad command or path, or the
 * listing's error of a refresh. */
int fs_ctl_command(struct fs *fs, const char *buf, size_t len, pid_t pid);

/* ---- fs_plan.c — reading plans ------------------------------------------
 * A reader says in which order it will read files: 'plan [NAME] FILE' on
 * the control file names a file of mount-relative paths, one per line, in
 * reading order. fs_plan_publish resolves each path as a lookup would
 * (every layout; a path of a member indexes its shard) to the bytes behind
 * it, an extent of one object as stored, and keeps them in that order as a
 * plan under NAME, replacing an earlier plan of that name. Paths that name
 * nothing (or a directory, a symlink, a control file) are skipped and
 * counted (one log line per plan). Reads of planned paths mark them read
 * (fs_plan_note_read) and move the plan's position.
 *
 * For a fetcher that fetches ahead of the readers: take the plans
 * (fs_plan_list, references held), and for each fetch the extents from
 * its position on (fs_plan_ahead: those not read yet, in plan order) up to
 * a lookahead of its choosing; fs_plan_gen says when the set of plans
 * changed. A plan never changes once published except for its read marks
 * and position (atomics): a replaced plan stays valid while referenced. */
#define FS_PLAN_NAME_MAX 64	    /* [A-Za-z0-9._:-], 1 to 64 characters */
#define FS_PLAN_FILE_MAX (1u << 30) /* largest plan file read */
enum fs_plan_flag {
	/* the path is a member of a compressed shard: [off, off + len) is the
	 * whole raw object (decoding reads it from its start), and stream_off
	 * is the member's data in the decoded stream */
	FS_PLAN_DECODED = 1,
	/* a sparse member: [off, off + len) spans its stored pieces */
	FS_PLAN_SPARSE = 2,
	/* the member's first read also reads the tar header just before off
	 * (a sidecar's index, checked member by member): fetch [off - 512,
	 * off) with it; len and the plan's byte counts are the file's bytes */
	FS_PLAN_HEADER = 4,
};
struct fs_plan_extent {
	uint64_t key;	     /* the path's file: FS_K_OBJ(obj) or FS_K_MEMBER(shard,
			      * canonical entry); imagefolder files as their member */
	uint32_t obj;	     /* the object holding the bytes (a member's: its shard's) */
	uint32_t flags;	     /* enum fs_plan_flag */
	uint64_t off, len;   /* bytes [off, off + len) of obj as stored */
	uint64_t stream_off; /* FS_PLAN_DECODED: the data's offset in the decoded stream */
};
struct fs_plan; /* opaque */
struct fs_plan_info {
	const char *name;  /* valid while the plan is referenced */
	pid_t pid;	   /* who sent it: the thread id of the request (its process's
			    * pid for a single-threaded sender) */
	uint32_t paths;	   /* extents (paths found), in reading order */
	uint32_t missing;  /* paths of the file that were skipped */
	uint32_t read;	   /* extents marked read */
	uint32_t position; /* 1 + index of the furthest extent read (0: none read) */
	uint64_t bytes;	   /* sum of the extents' len */
	uint64_t fnv;	   /* FNV-1a 64 of the found paths as given, each with '\n' */
};
/* Read FILE and publish it as plan name (NULL: "pid-PID"). 0, or -EINVAL
 * (a relative FILE, a bad name, a FILE inside the mount, not a regular
 * file), -EISDIR, -EFBIG (past FS_PLAN_FILE_MAX or 2^32-1 paths), -ENOMEM,
 * or open's error (-ENOENT, -EACCES). Blocks: may index shards. */
int fs_plan_publish(struct fs *fs, const char *name, pid_t pid, const char *file);
/* Drop plan name (NULL: "pid-PID"): 0 or -ENOENT. */
int fs_plan_clear(struct fs *fs, const char *name, pid_t pid);
/* A read of ino at off: marks the path read in every plan that has it: a
 * read at offset 0 marks its first occurrence not read yet (a new read of
 * the file), one at another offset only the first when none is read (it
 * continues a read). Reads the kernel answers from its page cache never
 * come here. Cheap when no plan is published. */
void fs_plan_note_read(struct fs *fs, uint64_t ino, uint64_t off);
/* Changes at every publish and clear. */
uint64_t fs_plan_gen(struct fs *fs);
/* fn(ctx) is called after every publish and clear and after a read that
 * marked a planned path (so a fetcher can wake up), on the thread that did
 * it, with no lock of fs_plan.c held; it must not block. Set it once,
 * before requests are served (NULL: none). */
void fs_plan_set_listener(struct fs *fs, void (*fn)(void *ctx), void *ctx);
/* The plans now, each referenced (fs_plan_put each): how many, at most max. */
size_t fs_plan_list(struct fs *fs, struct fs_plan **out, size_t max);
void fs_plan_put(struct fs_plan *p);
void fs_plan_get_info(const struct fs_plan *p, struct fs_plan_info *i);
/* Extents of p from index *from on that are not marked read, in plan
 * order, at most max into out (with their indexes in idx, when not NULL):
 * how many. *from moves past the last extent looked at (p's extent count
 * at the end). Start at the plan's position to fetch ahead of its reader. */
uint32_t fs_plan_ahead(const struct fs_plan *p, uint32_t *from, struct fs_plan_extent *out,
		       uint32_t *idx, uint32_t max);
/* Bytes of p's extents before index i (read or not; i past the end: all). */
uint64_t fs_plan_bytes_before(const struct fs_plan *p, uint32_t i);
/* fs_plan_fetch.c: fetching ahead along the plans (remote sources): a
 * thread, woken by fs_plan_set_listener's hook, hands the cache tier the
 * extents of each plan from its position on, in plan order, up to a
 * lookahead of --plan-lookahead bytes (at most a quarter of --cache-size)
 * split over the plans, as range prefetches that may evict what was read
 * (cachetier_obj_prefetch_range, CACHETIER_PF_EVICT). Start after the
 * namespace is built; stop after cachetier_cancel (accepts a fetcher that
 * never started). */
void fs_plan_fetch_start(struct fs *fs);
void fs_plan_fetch_stop(struct fs *fs);
/* Sums over the plans now, for stats. */
struct fs_plan_totals {
	uint64_t plans, paths, missing, read, position, bytes;
};
void fs_plan_totals(struct fs *fs, struct fs_plan_totals *t);
/* .shardfs/plans: one line per plan (fs_plan_info's fields). */
int fs_plan_render(struct fs *fs, char **buf, size_t *len);
/* Drop every plan (at unmount). */
void fs_plan_free_all(struct fs *fs);

/* fs_notify.c: kernel cache invalidations, queued for the notifier thread
 * (a request handler must not send them itself: the kernel may hold the
 * very locks the invalidation waits for). Without a started notifier they
 * are dropped. fs_notify_shard invalidates the member inodes [0, n) of
 * shard (and their imagefolder files). */
int fs_notify_start(struct fs *fs, const struct fs_notify_ops *ops, void *ctx);
/* Stop the notifier; what is still queued is dropped (the kernel's caches
 * go with the mount). Accepts a notifier that never started. */
void fs_notify_stop(struct fs *fs);
void fs_notify_inode(struct fs *fs, uint64_t ino);
void fs_notify_entry(struct fs *fs, uint64_t parent, const char *name, size_t len);
void fs_notify_shard(struct fs *fs, uint32_t shard, uint32_t n);
/* Wait until everything queued so far is sent (at most timeout_s). */
void fs_notify_drain(struct fs *fs, double timeout_s);

/* ---- fs_if_*.c — the --layout imagefolder view ----------
 * ROOT/<class>/<name>.<ext>: one file per sample (its image member). Built
 * once, on the first lookup or listing of the root, from every shard's
 * index (indexed in parallel), saved in the cache directory and mapped from
 * there (a later mount of the same shards maps it without indexing);
 * immutable afterwards, so readers take no lock. Files are the members themselves:
 * FS_K_IFFILE(shard, entry) is read and stat'ed like FS_K_MEMBER(shard, entry). */
struct fs_ifview {
	/* The view's blob (fs_if_blob.c: header, class and file records,
	 * string table), mapped from the cache directory (map) or, when it
	 * could not be saved or mapped, in the heap (heap). */
	const unsigned char *classes; /* nclasses records, sorted by name */
	const unsigned char *files;   /* nfiles records, sorted by name within a class */
	const unsigned char *shards;  /* nshards + 1 u32: where each shard's members start */
	const unsigned char *members; /* nfiles records: attributes in (shard, entry) order */
	const char *strtab;	      /* NUL-terminated names */
	uint64_t strtab_len;
	uint32_t nclasses, nfiles, nshards;
	struct cachetier_meta *map;
	void *heap;
	struct fs_ifview *retired_next; /* fs->if_retired list */
};
/* Class c: its name; files [*first, *first + *n) of the view; the newest
 * member mtime in it. */
const char *fs_if_class(const struct fs_ifview *v, uint32_t c, uint32_t *first, uint32_t *n,
			int64_t *mtime);
/* File i of the view: its name (unique within its class); the image
 * member (shard, canonical entry index). */
const char *fs_if_file(const struct fs_ifview *v, uint32_t i, uint32_t *shard, uint32_t *entry);
/* The view, built on first call (blocking: indexes every shard; built
 * again, at most IF_STALE_BUILDS times in all, when a .cls member disproves
 * a shard's sidecar index, once the shard is replaced). 0, or the build's
 * negative errno (-ESTALE when every build met a wrong sidecar). */
int fs_if_get(struct fs *fs, const struct fs_ifview **v);
void fs_if_free(struct fs *fs);
/* A refresh changed shards: drop the view (kept until unmount: readers
 * may hold it), so the next use builds it again; invalidates the kernel's
 * entries of its classes. */
void fs_if_reset(struct fs *fs);
/* Class named name[0..len), or -ENOENT. */
int64_t fs_if_class_lookup(const struct fs_ifview *v, const char *name, size_t len);
/* File of class c named name[0..len): its index in v->files, or -ENOENT. */
int64_t fs_if_file_lookup(const struct fs_ifview *v, uint32_t c, const char *name, size_t len);

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

/* fs_pack.c / fs_index.c — the pack and index commands */
int fs_pack_main(int argc, char **argv);
int fs_index_main(int argc, char **argv);
/* fs_client.c — the commands that talk to a running mount: shardfs umount,
 * stats, prefetch, refresh, plan (argv after the command's name; the exit
 * status). */
int fs_umount_main(int argc, char **argv);
int fs_stats_main(int argc, char **argv);
int fs_prefetch_main(int argc, char **argv);
int fs_refresh_main(int argc, char **argv);
int fs_plan_main(int argc, char **argv);
/* Is the absolute path abs a mount point of type fuse.shardfs (the mount
 * table)? */
int fs_is_shardfs_mount_abs(const char *abs);
/* The identity a sidecar NAME.tar.idx is saved with (fs_shard.c): codec,
 * size, an FNV-1a of the shard's last FS_SIDECAR_TAIL bytes, and the local
 * file's mtime (ns) and inode. */
#define FS_SIDECAR_TAIL (64u * 1024)
struct fs_sidecar_id {
	int codec;
	uint64_t size, tail_fnv, mtime_ns, ino, ctime_ns;
};
int fs_sidecar_ident(const struct fs_sidecar_id *id, char *buf, size_t bufsize, size_t *len);
/* The identity of the local shard file open at fd (fstat and a read of
 * its tail). */
int fs_sidecar_id_fd(int fd, int codec, struct fs_sidecar_id *id);
/* Write index ix as the sidecar at path (beside its shard), for the shard
 * whose identity is id: disk_write_atomic. 0 or -errno (fs/tools/fs_index.c). */
int fs_sidecar_write(const char *path, const struct shardidx *ix, const struct fs_sidecar_id *id);

/* fs_opt.c: command lines as data. A subcommand is a list of option tables;
 * each option fills one field of the command's config struct. */
enum fs_opt_type {
	FS_OPT_FLAG,	/* int, set to 1 */
	FS_OPT_STR,	/* char *, strdup'd (the previous value freed) */
	FS_OPT_UINT,	/* unsigned, digits only, within [min, max] */
	FS_OPT_U64,	/* uint64_t, digits only, within [min, max] */
	FS_OPT_SIZE,	/* uint64_t: digits and one optional K/M/G/T suffix, within [min, max] */
	FS_OPT_SECONDS, /* double, 0..1e9; min 1: more than 0 */
	FS_OPT_APPEND,	/* char *, values joined with ',' */
	FS_OPT_SIZE32,	/* uint32_t: like SIZE, max at most UINT32_MAX */
	FS_OPT_ENUM,	/* int: the position of the value among arg's '|'-separated names */
};
struct fs_opt {
	const char *lng; /* --lng (NULL ends a table) */
	char shrt;	 /* -c, or 0 */
	enum fs_opt_type type;
	size_t off;	   /* the field, offsetof in the command's config struct */
	size_t given_off;  /* 0, or 1 + offsetof an int set to 1 when the option is given */
	const char *def;   /* the default, parsed like a command-line value before argv
			    * (NULL: none, the field stays zero); --help shows it */
	uint64_t min, max; /* UINT, U64, SIZE: accepted range; SECONDS: min 1 means > 0 */
	const char *arg;   /* the value's name in --help (NULL: a flag) */
	const char *help;
};
struct fs_opt_cmd {
	const char *name;		    /* "mount" */
	const char *synopsis;		    /* "[OPTIONS] SOURCE MOUNTPOINT" */
	const char *about;		    /* paragraph after the usage line */
	const struct fs_opt *const *groups; /* option tables, NULL-terminated */
	int npos;			    /* positional arguments wanted */
};
extern const struct fs_opt_cmd fs_opt_mount_cmd, fs_opt_index_cmd;
extern const char *const fs_opt_sources_help; /* what SOURCE may be, for help texts */
/* Apply every default, then parse argv into cfg; the npos positional
 * arguments go to pos. 0, 1 when --help was shown (on stdout), or a
 * negative errno after printing why on stderr. */
int fs_opt_parse(const struct fs_opt_cmd *cmd, void *cfg, int argc, char **argv, const char **pos);
void fs_opt_usage(const struct fs_opt_cmd *cmd, FILE *f);
int fs_opt_parse_mount(int argc, char **argv, struct fs_config *cfg);
int fs_opt_parse_index(int argc, char **argv, struct fs_config *cfg);
void fs_opt_free(struct fs_config *cfg);
/* Digits with one optional K/M/G/T suffix (powers of 1024): 0, -EINVAL,
 * or -ERANGE past 2^64-1. */
int fs_parse_size(const char *s, uint64_t *out);

/* fs_opt.c: say on stderr that the daemon of mountpoint mnt is gone (its
 * mount answers ENOTCONN) and how to clean up. */
void fs_say_dead_mount(const char *mnt);

/* fs_ctl.c: the i-th counter of .shardfs/stats, for the man page
 * (fs/tools/fs_man.c): its name, help text, and 1 for a gauge, 0 for a
 * counter. 0, or -ENOENT past the table's end. */
int fs_ctl_counter_doc(size_t i, const char **name, const char **help, int *gauge);

#endif
