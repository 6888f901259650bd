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
 * Threads: fs_open and fs_close on one thread (the owner's); fs_cancel from
 * any thread (not from a signal handler), as often as wanted.
 */
#ifndef FS_CORE_H
#define FS_CORE_H

#define SHARDFS_VERSION "0.1.0"

struct fs;
struct fs_config;

/* fs_opt.c: what SOURCE may be, for help texts */
extern const char *const fs_opt_sources_help;

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

#endif
