/*
 * backend — object stores behind one interface: list, stat, range read.
 *
 * A backend is opened from a SOURCE string (docs/design.md section 1). Keys are
 * object names relative to the source's prefix, '/'-separated, never
 * starting with '/'. Stores: local directories (plain paths, file:///PATH
 * and file://localhost/PATH),
 * and remote ones (http(s), s3, gs, ais) served by one I/O thread that runs
 * a libuv loop driving a libcurl multi handle (backend_io_i.h).
 *
 * Threads: every function may be called from any thread concurrently and
 * may block (local I/O, or waiting for the I/O thread; the I/O thread
 * itself blocks only in what its callers' sink callbacks do: cachetier's
 * only copy bytes there). Errors: 0 or a
 * negative errno; each foreign error family (errno of the OS, HTTP status,
 * curl codes) is mapped in exactly one place inside this module: -ENOENT
 * for a missing object (404), -EACCES when refused (401/403), -ESTALE when
 * the object changed under a read (ETag mismatch, 412), -EKEYREJECTED when
 * the store's TLS certificate cannot be verified, -EINVAL for a malformed
 * or unsupported URL, -EIO when retries ran out (the store is unreachable
 * or failing) and at once while the store is down (another request ran out
 * of retries and no answer came since: backend_io_i.h), -ECANCELED after
 * backend_cancel.
 * -ETIMEDOUT is never returned (it becomes -EIO after the retry budget).
 */
#ifndef BACKEND_H
#define BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct backend;

/* Log levels of backend_log_fn, most severe first. */
enum backend_log_level { BACKEND_LOG_ERROR, BACKEND_LOG_WARN, BACKEND_LOG_INFO };
/* Where the backend's log lines go: one call per line; msg has no newline
 * and never a credential. Called from any thread, several at once, and
 * from the I/O and credential-refresh threads: it must not block long or
 * call back into the backend. */
typedef void (*backend_log_fn)(void *arg, enum backend_log_level level, const char *msg);

/* One log line through be's log callback (backend_config.log; stderr without
 * one), for the modules above backend that have no log of their own
 * (cachetier). Any thread. */
void backend_log(struct backend *be, enum backend_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Settings of remote stores (local directories ignore them). The brackets
 * say what a zero or negative field means. */
struct backend_config {
	const char *endpoint; /* --endpoint: overrides AWS_ENDPOINT_URL, AIS_ENDPOINT, ... */
	int no_sign;	      /* --no-sign: anonymous S3/GCS requests */
	unsigned connections; /* most parallel connections to the store (0 works as 1) */
	/* most parallel connections when small reads (BACKEND_READ_SMALL) are in
	 * flight too: those may run past 'connections', up to this many transfers in
	 * all (below 'connections': 'connections') */
	unsigned max_connections;
	const char *ca_file;   /* --ca-file: CA bundle for TLS verification (NULL: system's) */
	double retry_budget_s; /* stop retrying a request after this long (<= 0: no retries) */
	/* give up a connection attempt after this (<= 0: curl's, 300 s) */
	double connect_timeout_s;
	/* a transfer with no bytes for this long is retried (<= 0: never) */
	double stall_timeout_s;
	/* a credential_process that has not printed its credentials and exited
	 * within this long is killed, with its process group (<= 0: 3600 s,
	 * the longest taken) */
	double credential_timeout_s;
	/* --http-engine: 0 (curl) every request through curl; 1 (auto) plain
	 * http:// GETs without a body to a literal IP address or a host name
	 * (resolved off the I/O thread), with no proxy in the environment,
	 * through the lean engine (backend_io_lean.c) */
	int http_engine;
	backend_log_fn log; /* log lines of every store (NULL: "shardfs: MSG" on stderr) */
	void *log_arg;	    /* log's first argument */
};
/* Every field is the caller's choice: the backend applies no defaults (the
 * mount's are in fs/core/fs_opt.c's option table) and only clamps what cannot
 * work, as each field says. backend_open(..., NULL) is a config of zeros. */

/* Counters of a remote store's requests (all 0 for local directories). */
struct backend_stats {
	uint64_t requests;   /* requests made (each may take several attempts) */
	uint64_t attempts;   /* HTTP attempts of those requests (retries, redirect hops) */
	uint64_t failures;   /* requests that spent their whole retry budget: the store went down */
	uint64_t fast_fails; /* requests failed at once with EIO because the store was down */
	uint64_t probes;     /* probe requests while the store was down */
	uint64_t cancels;    /* requests completed with ECANCELED by backend_cancel or close */
	uint64_t down;	     /* 1 while the store is down, else 0 */
	uint64_t list_requests; /* listing pages requested (ListObjectsV2, autoindex pages) */
	/* body bytes the store sent that reached us, every attempt's (what a GET
	 * skipped and what arrived after it stopped too): more than was asked for
	 * when a server ignores Range */
	uint64_t bytes_received;
	/* answers whose body ended before its headers said (a cut connection,
	 * a Content-Length short of the range): retried from where they stopped */
	uint64_t short_bodies;
	/* answers 200 (the whole object) to a ranged GET: the server ignored Range */
	uint64_t range_ignored;
	/* bodies cut after some bytes and asked for again from their first
	 * byte, what was had dropped: no strong ETag pinned their bytes (a
	 * listing), so resuming could splice two copies */
	uint64_t restarts;
	/* 503 and 429 answers whose Retry-After set the wait before the next
	 * attempt (backend_io_xfer.c xfer_retry) */
	uint64_t retry_after;
	/* BACKEND_READ_PAUSABLE reads: pieces a sink refused (BACKEND_SINK_FULL:
	 * the transfer paused), paused transfers resumed, and of those the ones
	 * resumed by the BACKEND_PAUSE_BACKSTOP_MS bound, not a
	 * backend_sink_ready */
	uint64_t pauses, resumes, pause_backstops;
	/* connections the engine opened (both engines), and the attempts the
	 * lean engine made (--http-engine auto: plain http:// ranged GETs) */
	uint64_t connects, lean_attempts;
	/* body bytes of object reads the lean engine handed to a sink: received
	 * straight into memory the sink offered (backend_sink_mem_cb: no copy
	 * out of the engine's buffer), and received into the engine's own
	 * buffer (the sink copies them, or offered none); the two add up to
	 * the bytes its sinks accepted */
	uint64_t recv_inplace_bytes, recv_copied_bytes;
	/* the lean engine's receives of an answer's body past its head that
	 * got bytes (a recv system call each: test io-inplace) */
	uint64_t recvs;
	/* the lean engine's system calls that set a socket's receive mark
	 * (SO_RCVLOWAT: a body's rest wakes the loop once; test io-marks) */
	uint64_t marks;
	/* the lean engine's host names: lookups made (off the I/O thread),
	 * connections that took a kept answer instead, and lookups that found
	 * no address */
	uint64_t resolves, resolve_hits, resolve_failures;
};

/* What list and stat report about one object. */
struct backend_objinfo {
	const char *key; /* relative key (list: valid during the callback only) */
	uint64_t size;	 /* bytes */
	int64_t mtime;	 /* seconds since the epoch */
	uint32_t mode;	 /* permission bits when the store has them, else 0644 */
	/* ETag or a stand-in (local: "size-mtime_ns-ino-ctime_ns"), NUL-terminated */
	char etag[80];
	/* list only: 1 when the listing knows the name and nothing else (the
	 * names of a brace pattern, which are not asked for at listing): size,
	 * mtime, mode and etag are 0 / "" until backend_stat_many or
	 * backend_stat says them, and the object may not exist (-ENOENT) */
	int name_only;
	/* list only, a local source's: 1 for a directory with nothing listed
	 * below it (an empty one; key: its path, mtime and mode its own, no
	 * size or etag), which is no object. Remote stores list objects only
	 * (S3's "dir/" markers are not listed): they have no empty directories */
	int dir;
};

/* One version identity for every layer that tells two versions of an
 * object apart (fs/core's refresh and lookup, the cache tier's object and
 * file names, saved indexes and class maps): a version is its size and its
 * ETag when it has one, else its size and mtime (a store that sends no
 * ETag, or an ETag the caller cannot use: pass ""). So a store without ETags
 * cannot tell a rewrite at the same size within the same second (its
 * Last-Modified has whole seconds).
 *
 * backend_version_tag writes what stands for the version beside the size:
 * etag, or ":<size>:<mtime>" when etag is "" (tag has BACKEND_VERSION_TAG
 * bytes); names and hashes of a version's saved state are made of it, so
 * those of versions with an ETag are what they were before the rule.
 * backend_version_same: 1 when the two are one version (same size, same
 * tag), else 0. */
#define BACKEND_VERSION_TAG 80
void backend_version_tag(const char *etag, uint64_t size, int64_t mtime,
			 char tag[BACKEND_VERSION_TAG]);
int backend_version_same(const char *etag_a, uint64_t size_a, int64_t mtime_a, const char *etag_b,
			 uint64_t size_b, int64_t mtime_b);

/* Called once per object, in no particular order. Return non-zero to stop
 * the listing (backend_list then returns that value). */
typedef int (*backend_list_cb)(void *arg, const struct backend_objinfo *info);

/* Open the backend for SOURCE. Returns -EPROTONOSUPPORT for a scheme that
 * is not implemented, -ENOENT / -ENOTDIR / -EACCES for a bad local path. */
int backend_open(struct backend **out, const char *source, const struct backend_config *cfg);
void backend_close(struct backend *be); /* accepts NULL */

/* Send SIGKILL to the process group of every helper program a backend of
 * this process runs now (a credential_process, and whatever it started:
 * each runs in a group of its own). Async-signal-safe: for the signal
 * handler of a process that exits at once (a mount stopped before it was
 * ready), so that no helper outlives it. */
void backend_kill_helpers(void);

/* Where a signing store's credentials come from, for the log ("instance
 * metadata (IMDSv2, role r)"; never a secret), or NULL when it signs
 * nothing. */
const char *backend_credentials_source(const struct backend *be);
/* A short description of the source for logs and stats (no credentials). */
const char *backend_describe(const struct backend *be);

/* 1 when the objects are local files (backend_open_fd works). */
int backend_is_local(const struct backend *be);
/* The absolute path of a local store's directory (symlinks resolved; a
 * file:// SOURCE decoded): key K is the file PATH/K. NULL for remote stores. */
const char *backend_local_path(const struct backend *be);
/* The path a local store lists, as given (made absolute at open, symlinks
 * not resolved): each listing opens it again (a source switched by a
 * rename or a symlink is followed). NULL for remote stores. */
const char *backend_local_source(const struct backend *be);
/* The directory that holds key in a local store, opened (O_RDONLY |
 * O_DIRECTORY) below the root the last listing found by the rule every
 * read follows (a symbolic link on the way is followed only while it stays
 * inside the tree): a writer of a file beside key (a sidecar index) creates
 * it relative to this fd, so a directory swapped for a link out of the
 * tree is never written through. The fd (the caller closes it), *base
 * pointing at key's last component; or -EXDEV (a link on the way leads
 * out), -ENOENT, -ENOTDIR, -EINVAL (a remote store, or an empty or "."
 * or ".." last component). */
int backend_local_dirfd(struct backend *be, const char *key, const char **base);
/* Symbolic links of a local store that its last whole listing refused:
 * they lead out of the source directory (an absolute target, or ".." past
 * its top), or, where openat2 is missing, any link below the top (*nofollow
 * set then). 0 for remote stores. */
uint64_t backend_local_refused(struct backend *be, int *nofollow);

/* 1 when backend_read_version_async returns at once and ends the read on
 * the store's I/O thread (remote stores); 0 when it reads in the calling
 * thread (local directories, fault://). */
int backend_reads_async(const struct backend *be);

/* 1 on a remote store's I/O thread (any store's), else 0: for debug
 * assertions of callers whose code must never run there (a disk write, a
 * contended lock; cachetier's CT_OFF_LOOP). */
int backend_on_io_thread(void);

/* List every object under the source, recursively. Hidden objects whose
 * name starts with '.' are listed too; symlinks to files are followed,
 * special files are skipped. A brace pattern lists its names without
 * asking for them (name_only), after one 1-byte GET of its first name that
 * shows the server answers (any HTTP answer below 500, 404 too; -EIO when
 * it cannot be reached or answers 5xx to the end of the retry budget, as
 * any listing; -EACCES for 401/403). */
int backend_list(struct backend *be, backend_list_cb cb, void *arg);

int backend_stat(struct backend *be, const char *key, struct backend_objinfo *info);

/* backend_stat of keys[0..n) at once: remote stores keep as many requests in
 * flight as a listing does (4 per connection), local ones stat one after
 * the other. info[i] (its key is keys[i]) and err[i] (0, or backend_stat's
 * errno: -ENOENT for a missing object) receive each answer; when some
 * failed otherwise, backend_last_error says why one of them did (its
 * request and the store's or the transport's reason). Returns 0, or a
 * negative errno when the batch could not be asked (-ENOMEM); blocks until
 * every answer is in. */
int backend_stat_many(struct backend *be, const char *const *keys, size_t n,
		      struct backend_objinfo *info, int *err);

/* A HEAD in two halves, for a caller whose answer must come from the
 * store after an event it waits for (a staged GetBatch window's version
 * HEAD, cachetier_batchm.c: after the item's first byte), on a store whose
 * endpoint redirects a HEAD to the node that answers it (AIStore: the
 * proxy's 307 to the object's target; its redirect names no object state
 * and holds no time limit or one-time token: ais/prxs3.go headObjS3,
 * ais/signverify.go). backend_head_ahead sends the HEAD to the endpoint at
 * once and keeps its redirect unfollowed; backend_head_follow, later,
 * sends the HEAD to the redirect's target (one hop instead of two) and
 * answers as backend_stat, from that answer only. When the endpoint did
 * not redirect (answered the HEAD itself, or failed), the kept answer is
 * dropped and the whole HEAD sent again: an answer is never older than
 * backend_head_follow's call. NULL from backend_head_ahead (another store,
 * an endpoint seen answering HEADs itself, no memory): backend_head_follow
 * of NULL is backend_stat. backend_head_drop ends one never followed (it
 * waits for the endpoint's answer: bounded by the store's retries).
 * Each takes h (follow and drop free it). Any thread but the I/O thread. */
struct backend_head_ahead;
struct backend_head_ahead *backend_head_ahead(struct backend *be, const char *key);
int backend_head_follow(struct backend *be, struct backend_head_ahead *h, const char *key,
			struct backend_objinfo *info);
void backend_head_drop(struct backend *be, struct backend_head_ahead *h);
/* backend_head_follow without waiting for its answer (`*_submit`): the
 * HEAD goes as soon as h's first half ended (at once when it has), from the
 * I/O thread; done(arg, err) then runs once, on the I/O thread (or, the
 * store stopping, on the calling thread before this returns), with
 * backend_head_follow's errno, info filled when it is 0 (info and key the
 * caller's, alive until done ran). So a caller waiting for several HEADs
 * needs no thread for each. Takes h and returns 0; -EOPNOTSUPP when h is
 * NULL or the store has no way to (h untouched: backend_head_follow it).
 * backend_head_drop_nowait ends h never followed without waiting (freed
 * when its first half ends). Any thread but the I/O thread. */
typedef void (*backend_head_done_cb)(void *arg, int err);
int backend_head_follow_submit(struct backend *be, struct backend_head_ahead *h, const char *key,
			       struct backend_objinfo *info, backend_head_done_cb done, void *arg);
void backend_head_drop_nowait(struct backend *be, struct backend_head_ahead *h);
/* backend_head_follow of several at once (the answers as backend_stat_many
 * gives them: info[i], err[i]; 0, or -ENOMEM when they could not all be
 * asked): h[i] NULL is keys[i]'s whole HEAD. The followed HEADs go out
 * together, then the whole ones together (an endpoint that answered one
 * ahead itself, or failed it: rare). Takes every h[i]. Blocks until every
 * answer is in; any thread but the I/O thread. */
int backend_head_follow_many(struct backend *be, struct backend_head_ahead *const *h,
			     const char *const *keys, size_t n, struct backend_objinfo *info,
			     int *err);

/* Read up to len bytes at off of the version whose ETag is etag and whose
 * size is size (as listed or stat'ed; NULL, 0: whichever is there). Returns
 * bytes read (short only at the end of the object) or a negative errno. A
 * remote store's answer that gives the object another size is -ESTALE (a
 * store that sends no ETag changes the size of a changed object, mostly);
 * one with a Content-Encoding but identity is -EIO (not the object's bytes
 * as stored). With an etag, remote stores
 * send If-Match and compare the answer's ETag, and return -ESTALE when the
 * object has changed since, so that bytes of two versions are never mixed.
 * Local stores ignore etag. A thread waits for this read (and for
 * backend_read_version_cb's): remote stores run it as a small read
 * (BACKEND_READ_SMALL), so it never queues behind the asynchronous reads
 * that hold 'connections' (fills ahead of a reader, a slow store). */
ssize_t backend_pread_version(struct backend *be, const char *key, const char *etag, uint64_t size,
			      void *buf, size_t len, uint64_t off);

/* Receives the bytes of a streamed read: len bytes of the object at offset
 * off (len > 0). Return 0 to go on, or a negative errno to stop the read,
 * which then returns that errno. Remote stores also call it with len 0
 * (buf NULL, off the next offset expected) while the request runs and no
 * bytes arrive — waiting for the first byte, or a stalled transfer — at
 * least about once a second, so that a reader can stop a read that
 * delivers nothing; answer those alike. Remote stores call it on their I/O
 * thread: it must be quick and must not wait for other threads; a pwrite
 * to a local file is fine, a call into the backend is not. */
typedef int (*backend_sink_cb)(void *arg, uint64_t off, const void *buf, size_t len);

/* backend_pread_version without a caller's buffer: the bytes of
 * [off, off + len) go to cb as they arrive, in order, each byte once, the
 * pieces contiguous from off (a retry after a cut body resumes after what
 * cb already has, from the same version). Returns the bytes delivered
 * (short only at the end of the object) or a negative errno; after an error
 * the bytes cb got are to be dropped. Remote stores hand over the receive
 * buffer's pieces (at most 64 KiB each, no copy); local ones read into a
 * buffer of at most 1 MiB per call. */
ssize_t backend_read_version_cb(struct backend *be, const char *key, const char *etag,
				uint64_t size, uint64_t off, size_t len, backend_sink_cb cb,
				void *arg);

/* How a backend_read_version_async ends: err 0 (bytes: the range, fewer
 * only at the end of the object) or a negative errno, as
 * backend_read_version_cb returns (after an error the bytes the sink got
 * are to be dropped); bytes: on success, those the sink accepted. */
typedef void (*backend_done_cb)(void *arg, int err, uint64_t bytes);

/* Flags of backend_read_version_async. */
#define BACKEND_READ_SMALL                                                                         \
	1u /* a small read (a planned range of at most a chunk): it may                            \
	    * run past 'connections', up to 'max_connections' */
/* The sink may answer BACKEND_SINK_FULL. Only for a store that reads
 * asynchronously (backend_reads_async): the others ignore the flag, and
 * their sinks must never answer it. */
#define BACKEND_READ_PAUSABLE 2u

/* A sink's answer, with BACKEND_READ_PAUSABLE: it took none of these bytes
 * (it has no room now). The transfer pauses (its socket is not read, so
 * TCP holds the sender back) until the sink's owner calls
 * backend_sink_ready (once it has room), or at the latest after
 * BACKEND_PAUSE_BACKSTOP_MS (a bound, not the way a transfer is meant to
 * go on: backend_stats.pause_backstops counts them). Then the sink is asked
 * with len 0 (the longest paused first): BACKEND_SINK_FULL again keeps
 * the transfer paused (the sink calls backend_sink_ready again when it has
 * room); 0 resumes it, and the same bytes, at the same offset, come again
 * (the sink may refuse them again); a negative errno stops the read. A
 * paused transfer is not a stall. The answer to a len-0 call of a transfer
 * that is not paused, or of one paused at the store's poll, is taken as
 * 0 (it stays paused). */
#define BACKEND_SINK_FULL	  1
#define BACKEND_PAUSE_BACKSTOP_MS 1000

/* The sinks that answered BACKEND_SINK_FULL may have room now: the store's
 * I/O thread asks each paused transfer's sink again (len 0), soon after.
 * Any thread, the I/O thread too (its sink may call it); never blocks,
 * takes no lock (one wake-up of the I/O thread, merged with others pending).
 * A no-op for a store that reads in the caller. */
void backend_sink_ready(struct backend *be);

/* backend_read_version_cb without waiting: the same read (its sink cb, the
 * same If-Match and -ESTALE rule, a retry after a cut body resuming after
 * what cb has, the same retry budget and stall bound, -ECANCELED after
 * backend_cancel), and when it ends, done(darg, err, bytes) runs exactly
 * once. Remote stores run it on their I/O thread: cb and done run there,
 * and the call returns at once (it never blocks, from any thread, the I/O
 * thread too). Local stores (and fault://) run the read in the calling
 * thread and call done before returning; so does every store for an error
 * found before a request is made (a bad key: -EINVAL; -ENOMEM). done must
 * be quick and must not wait for a thread that may wait for the backend;
 * it may call backend_last_error and backend_log_failure (which speak of
 * this read: the thread's record is this read's when done runs) and
 * backend_read_version_async (the next read), nothing else of the backend.
 * key and etag are copied; size is the same as backend_pread_version's. */
void backend_read_version_async(struct backend *be, const char *key, const char *etag,
				uint64_t size, uint64_t off, size_t len, unsigned flags,
				backend_sink_cb cb, void *arg, backend_done_cb done, void *darg);

/* A sink's offer of its own memory for the bytes at object offset off,
 * asked (on the I/O thread) before a receive with *len the most bytes
 * wanted: the memory where they may land (*len lowered to what fits, at
 * least 1), or NULL (the engine receives into its own buffer, as without
 * an offer). NULL with *len set to 0, for a BACKEND_READ_PAUSABLE read:
 * the sink is full, it would answer BACKEND_SINK_FULL to any piece now
 * (and its owner calls backend_sink_ready when it has room, as after that
 * answer): the transfer pauses before the receive, as if a piece had been
 * refused, and nothing is received. Only the receive writes it; the bytes received are then
 * handed to the sink's cb as ever (buf pointing into that memory, at off;
 * cb sees its own memory: it need not copy), before any other call of cb
 * or of this; no bytes (a receive that got none) leave it untouched. When
 * cb does not take them (BACKEND_SINK_FULL, an error) the engine copies
 * what it keeps out before cb's caller returns: from then on the memory is
 * the sink's alone (it may hand it to another thread). An offer changes no
 * check the bytes get: lengths, ranges, resume offsets and counters are
 * the same. Which engine asks: the lean one (backend.h's http_engine 1),
 * for a body's bytes after the answer's head (the head's own receive's
 * share of the body is handed over from the engine's buffer). */
typedef void *(*backend_sink_mem_cb)(void *arg, uint64_t off, size_t *len);

/* backend_read_version_async with a sink that may offer memory (mem, or
 * NULL: the same as backend_read_version_async). */
void backend_read_version_async_mem(struct backend *be, const char *key, const char *etag,
				    uint64_t size, uint64_t off, size_t len, unsigned flags,
				    backend_sink_cb cb, backend_sink_mem_cb mem, void *arg,
				    backend_done_cb done, void *darg);

/* One item of a batch read: len bytes (len > 0) at off of key. */
struct backend_batch_item {
	const char *key;
	uint64_t off;
	uint64_t len;
};
/* Receives item i's bytes, as backend_sink_cb receives an object's (the
 * same contract: I/O thread, quick, a negative errno stops the batch), but
 * never with len 0: a silent answer is bounded by the stall timeout. */
typedef int (*backend_batch_sink_cb)(void *arg, size_t i, uint64_t off, const void *buf,
				     size_t len);

/* Read items[0..n) with as few requests as the store allows: ais:// sends
 * one AIStore GetBatch (backend_ais_batch.c says the request, the checks
 * and the rounds), whose answer delivers each item's bytes to cb in item
 * order, each byte once, contiguous from the item's off. err[i] receives
 * item i's outcome: 0 (all len bytes delivered), -ENOENT (no such object),
 * -EIO (a wrong or cut answer: the bytes cb got for item i are to be
 * dropped), or the errno that failed the request. GetBatch reads no
 * particular version (it has no If-Match). Returns 0 when every err[i] is
 * set; -EOPNOTSUPP for stores other than ais:// (nothing asked; the test
 * store fault:// answers with batch=1, item by item) and for
 * an ais:// store that refused GetBatch (400, 404 or 405: no bytes), -EINVAL
 * for a bad key or a len of 0, -ENOMEM, or the sink's errno (err[] of the
 * items left set to it). Blocks; any thread but the I/O thread. */
int backend_batch_read(struct backend *be, const struct backend_batch_item *items, size_t n,
		       backend_batch_sink_cb cb, void *arg, int *err);
/* backend_batch_read without waiting (`*_submit`): the same requests, sink
 * and err[], but it returns at once and done(darg, ret) runs once, with
 * what backend_batch_read would have returned, every err[i] set: on the
 * I/O thread (or, the store stopping, on the calling thread before this
 * returns). items, err and arg stay the caller's and alive until then. So
 * a caller with several requests in flight needs no thread for each.
 * Returns 0 (done will run), or, done never runs and nothing was asked:
 * -EOPNOTSUPP (a store that cannot, or n 0: backend_batch_read it), -EINVAL,
 * -ENOMEM. Any thread but the I/O thread. */
typedef void (*backend_batch_done_cb)(void *darg, int ret);
int backend_batch_read_submit(struct backend *be, const struct backend_batch_item *items, size_t n,
			      backend_batch_sink_cb cb, void *arg, int *err,
			      backend_batch_done_cb done, void *darg);

/* Stop: every request in flight or waiting, now and later, completes at
 * once with -ECANCELED (transfers are aborted). For shutdown; there is no
 * way back. Returns without waiting; any thread; accepts NULL. */
void backend_cancel(struct backend *be);
void backend_get_stats(struct backend *be, struct backend_stats *st);

/* Local backends: open the object read-only and return a new fd the caller
 * closes. -ENOTSUP for remote backends. */
int backend_open_fd(struct backend *be, const char *key);

/* Why the calling thread's last request on be failed, as one line for the
 * log: the request, the URL as shown (no userinfo, query), the HTTP status
 * and the code and message of the store's error body ("GET
 * http://h/b/a.tar: HTTP 403 AccessDenied: Access Denied"), or the
 * transport's reason ("... : Connection refused"); "" when the thread's
 * last request on be succeeded or made none. Per request: each thread
 * has its own record (a thread's requests run one at a time), so requests
 * of other threads never overwrite it. With be == NULL: why the last
 * backend_open in this thread failed. Never contains credentials or the
 * URL's query. The text is copied per thread; valid until the next call
 * in the same thread. */
const char *backend_last_error(const struct backend *be);

/* Log the failure of the calling thread's last request on be (err, as it
 * returned; key: the object, what: "fill", "read", ...) through be's log
 * callback, once per object and cause: a later failure of the same key
 * with the same errno, HTTP status and error code is not logged again (so
 * 1000 reads of one refused object log one line). Logs nothing for
 * -ECANCELED and for a request failed at once while the store is down
 * (the outage has its own line). The memory of what was logged is bounded
 * (2048 objects and causes; then it starts again). Any thread. */
void backend_log_failure(struct backend *be, const char *key, int err, const char *what);

#endif
