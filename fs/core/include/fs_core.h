/*
 * fs_core.h — the filesystem core's lifecycle, for the programs built on
 * it: the FUSE adapter (fs/fuse), the tools (fs/tools) and the tests.
 *
 * fs_open is the composition root: it takes a parsed configuration
 * (fs_opt_parse_mount or fs_opt_parse_index), opens the backend and the
 * cache tier, initialises every lock of the core, builds the namespace
 * and, for a mount, starts the core's threads (the warm fill, the plan
 * fetcher). fs_cancel wakes every wait; fs_close stops every thread and
 * closes and frees everything fs_open made. No caller opens, cancels or
 * closes the backend or the cache tier itself.
 *
 * The rest of the public API: fs_core_ops.h (the operations the adapter
 * turns into replies), fs_core_opt.h (option tables), fs_core_ctl.h (the
 * control files and the protocol of the commands that talk to a mount),
 * fs_core_sidecar.h (indexes for the offline tools). Nothing here names a
 * type of the backend or the cache tier: fs/fuse and fs/tools see only
 * fs/core/include/ (meson gives them no other path into the core).
 *
 * Threads: fs_open and fs_close on one thread (the owner's); fs_cancel from
 * any thread (not from a signal handler), as often as wanted.
 */
#ifndef FS_CORE_H
#define FS_CORE_H

#include <stddef.h>
#include <stdint.h>

struct fs;
struct fs_config;

enum fs_open_flag {
	/* What a mount does before it is served: the backend's lines go to
	 * the core's log, which moves to --log-file (or the cache
	 * directory's log) unless --foreground; --debug; a warning on stderr
	 * when the cache disk cannot take one chunk per connection; the
	 * layout's view is built now and what it left out said on stderr
	 * (--layout imagefolder); the warm fill and the plan fetcher start
	 * (each decides from the configuration whether it runs). */
	FS_OPEN_MOUNT = 1,
};

/* Open the core on *cfg, whose contents it takes (cfg is zeroed, and freed
 * with fs_opt_free by fs_close, or here on an error); flags: enum
 * fs_open_flag. Every error is said on stderr, naming the source or the
 * cache directory. Returns 0 with *fs set, or a negative errno
 * (-EPROTONOSUPPORT, -EINVAL: a bad source; -EACCES, -ETIMEDOUT,
 * -EKEYREJECTED: the store refused; the cache directory's -errno; the
 * listing's; the layout view's build's), *fs NULL. Blocks: lists the
 * source (within the backend's retry budget and timeouts). */
int fs_open(struct fs_config *cfg, unsigned flags, struct fs **fs);
/* Cancel what runs: the backend's transfers end with -ECANCELED, waits of
 * the cache tier return, the core's threads are told to stop. Never
 * blocks (takes short locks only); the core stays usable for freeing
 * only. */
void fs_cancel(struct fs *fs);
/* fs_cancel, then stop and join every thread of the core (the notifier
 * too, if the adapter started it), keep what a brace pattern's mount
 * learned (fs_ns_keep_learned), free the namespace, the views, the plans
 * and the control files' snapshots, close the cache tier (which records
 * what it filled) and the backend, free the configuration and fs. Call
 * when no request runs any more. Bound: each thread is joined within
 * FS_THREAD_JOIN_S (10 s; milliseconds in practice, fs_thread.c); a thread
 * that does not end by then is logged and left running, and fs is then
 * not freed (leaked, never freed under it). Accepts NULL. */
void fs_close(struct fs *fs);

/* Until the caller installs handlers of its own, SIGTERM, SIGINT and
 * SIGHUP end the process at once (exit status 128 + the signal), and the
 * credential helpers it runs (backend_kill_helpers) with it: for a mount
 * before it is ready, and for the commands that open a source (index). */
void fs_exit_on_signals(void);

/* ---- the configuration -------------------------------------------------
 * Parsed from a command line (fs_core_opt.h: fs_opt_parse_mount,
 * fs_opt_parse_index) into a configuration made by fs_config_new, handed to
 * fs_open, and freed with fs_config_free. */
/* A zeroed configuration: 0 or -ENOMEM. */
int fs_config_new(struct fs_config **cfg);
/* Free what cfg holds and cfg (NULL: nothing). */
void fs_config_free(struct fs_config *cfg);
/* What the FUSE adapter applies itself, pointing into cfg (or fs's). */
struct fs_mount_args {
	const char *source;	  /* SOURCE as given */
	const char *mountpoint;	  /* resolved (realpath) */
	char **fuse_opts;	  /* -o, comma-joined, or NULL; the adapter may replace
				   * it (free the old, malloc the new: cfg owns it) */
	int foreground;		  /* -f (-d implies it) */
	int debug;		  /* -d: FUSE request debugging */
	unsigned max_threads;	  /* --threads: FUSE worker threads */
	uint64_t kernel_ra_bytes; /* --kernel-readahead: bytes, 0: the kernel's own */
};
void fs_config_mount_args(struct fs_config *cfg, struct fs_mount_args *a);
/* The same for the configuration fs was opened with. */
void fs_mount_args(struct fs *fs, struct fs_mount_args *a);
/* index --sidecar was given. */
int fs_config_sidecar(const struct fs_config *cfg);

/* ---- what the FUSE adapter asks of an open core ------------------------- */
/* For the log and the mount's fsname: the source's description (no
 * credentials; backend_describe), and the namespace's counts now. */
const char *fs_describe(const struct fs *fs);
void fs_counts(const struct fs *fs, uint32_t *objs, uint32_t *shards, uint32_t *dirs);
/* At the session's start: the kernel can do without OPEN (and RELEASE) and
 * without OPENDIR; the core decides (--strict-open keeps OPEN) and
 * remembers. fs_no_open / fs_no_opendir: 1 when such a request is to be
 * answered ENOSYS (the kernel then stops sending it). */
void fs_session_caps(struct fs *fs, int can_skip_open, int can_skip_opendir);
int fs_no_open(const struct fs *fs);
int fs_no_opendir(const struct fs *fs);
/* Count a GETATTR request (getattrs), a failed read of a data file
 * (read_errors) and any other failed request (op_errors). */
void fs_count_getattr(struct fs *fs);
void fs_count_read_error(struct fs *fs);
void fs_count_op_error(struct fs *fs);
/* Count n inodes the kernel forgot (forgets: one a FORGET, each of a
 * BATCH_FORGET's). */
void fs_count_forgets(struct fs *fs, uint64_t n);
/* The requests the adapter counts by kind (opens, releases, flushes,
 * ioctls): every one that reached the daemon, an OPEN answered ENOSYS
 * (zero-cost opens) and a FLUSH answered ENOSYS (the kernel sends no
 * more) too. With lookups, getattrs, reads and xattr_requests they say
 * what a sample costs in FUSE requests (docs/counters.md). */
enum fs_request { FS_REQ_OPEN, FS_REQ_RELEASE, FS_REQ_FLUSH, FS_REQ_IOCTL };
void fs_count_request(struct fs *fs, enum fs_request kind);

/* ---- the notifier (fs_notify.c) ------------------------------------------ */
/* How the notifier sends an invalidation to the kernel (given by the FUSE
 * adapter); called on the notifier thread only. */
struct fs_notify_ops {
	void (*inval_inode)(void *ctx, uint64_t ino);
	void (*inval_entry)(void *ctx, uint64_t parent, const char *name, size_t len);
};

/* Start the notifier thread, which sends kernel cache invalidations through
 * ops (with ctx) once the adapter can: 0 or -errno. */
int fs_notify_start(struct fs *fs, const struct fs_notify_ops *ops, void *ctx);
/* Stop the notifier; what is still queued is dropped (the kernel's caches
 * go with the mount). Joins its thread within FS_THREAD_JOIN_S (10 s): 0,
 * or -ETIMEDOUT when a send is still held up (logged; fs_close then frees
 * nothing). Accepts a notifier that never started or stopped already;
 * fs_close calls it too. */
int fs_notify_stop(struct fs *fs);

/* ---- the log (fs_log.c): stderr, or a file once the daemon runs ---------- */
enum fs_log_level { FS_LOG_ERR, FS_LOG_WARN, FS_LOG_INFO, FS_LOG_DEBUG };
void fs_log(enum fs_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int fs_log_open_file(const char *path);
int fs_log_fd(void); /* the log's descriptor (2: stderr) */
/* The noun that goes with a count in a message: one when n is 1, else
 * many ("1 shard", "0 shards", "2 directories"). Every count a message
 * puts before a noun takes its noun from here (wording-plurals checks). */
static inline const char *fs_plural(uint64_t n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}
/* b as "12.34 MiB" (B, KiB, MiB, GiB, TiB) into out. */
void fs_human_bytes(uint64_t b, char *out, size_t n);
/* fs_log.c — the one way a path (or any other argument a user gave, or a
 * name of the source) reaches a message of the shardfs command on stderr:
 * its bytes as they are, but a backslash as "\\", a newline, tab and
 * carriage return as "\n", "\t", "\r", every other byte below 0x20, 0x7f
 * and each byte that is not part of UTF-8 as "\xHH", and an empty one as
 * ''; so a message stays one line and says which bytes were given. What
 * does not fit buf (n bytes) is cut and said: "...(N bytes)". Returns buf.
 * FS_Q(s) quotes into a buffer of its own that lives to the end of the
 * enclosing block (one per use). */
#define FS_QUOTE_MAX 512
const char *fs_quote(const char *s, char *buf, size_t n);
#define FS_Q(s) fs_quote((s), (char[FS_QUOTE_MAX]){0}, FS_QUOTE_MAX)
/* FS_Q for a message that puts the value in '...' itself: '' when empty */
#define FS_QV(s) ((s)[0] ? FS_Q(s) : "")
void fs_log_set_debug(int on);

#endif
