/*
 * fs_core_ops.h — the filesystem's operations, without FUSE (fs_ops.c):
 * part of the core's public API (fs_core.h). Inside the core, fs_ops.h
 * includes it with the core's state (fs_i.h).
 *
 * One function per request kind: each takes a computed inode number
 * (fs_i.h; FUSE's root is 1), returns 0 (or a length) or a negative errno, and fills plain
 * structs: struct stat, struct fs_entry, a directory-entry callback, a read
 * extent of a file descriptor or a buffer. The FUSE adapter (fs/fuse/fs_ll.c)
 * decodes a request, calls one of these and replies once; unit tests call
 * them without a mount. Threads: any number of callers at once (see the
 * locking notes in fs_i.h).
 */
#ifndef FS_CORE_OPS_H
#define FS_CORE_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include "fs_core.h"

struct cachetier_pin; /* a pinned range of the cache tier (fs_op_read) */

/* An entry as a lookup or a readdirplus answers it. */
struct fs_entry {
	uint64_t ino;	  /* 0: no inode (a lookup: a negative entry, "no such name",
			   * cached for timeout; a listing: the name only) */
	struct stat attr; /* attr.st_ino is ino (a hard link: its target's); a
			   * listed name without an inode: only st_ino and the type
			   * bits of st_mode count */
	double timeout;	  /* entry and attribute timeout, seconds */
};

/* A request starts on the calling thread (the FUSE adapter: at each
 * request's start): the cache tier's change watch then reads its events
 * once in the request, not at each check (cachetier_request_begin). */
void fs_op_begin(void);
/* How long the kernel may cache ino's entry and attributes. */
double fs_op_timeout(const struct fs *fs, uint64_t ino);
/* Is ino a file of the dataset (an object, a member, an imagefolder file),
 * whose failed reads count in read_errors? */
int fs_op_is_data(const struct fs *fs, uint64_t ino);
/* ino's attributes. A control file renders a new snapshot here (fs_ctl.c). */
int fs_op_getattr(struct fs *fs, uint64_t ino, struct stat *st);
/* name in directory parent: 0 with e filled (e->ino 0: a negative entry), or
 * a negative errno. A name of a local object that changed is replaced by
 * its new version first (fs_ns_replace). Counts the lookup. A file found
 * makes parent's listings carry every entry's attributes (fs_op_readdir). */
int fs_op_lookup(struct fs *fs, uint64_t parent, const char *name, struct fs_entry *e);
/* A symlink member's target (inside the shard's index: valid until unmount). */
int fs_op_readlink(struct fs *fs, uint64_t ino, const char **target);

/* What an open answers. */
struct fs_open {
	uint64_t fh;	/* a control file's snapshot (fs_op_read, fs_op_release) */
	int direct_io;	/* control files: no page cache */
	int keep_cache; /* data: immutable, keep the kernel's pages */
	int noflush;
};
/* Open ino with open(2) flags. */
int fs_op_open(struct fs *fs, uint64_t ino, int flags, struct fs_open *o);
void fs_op_release(struct fs *fs, uint64_t ino, uint64_t fh);

/* A read's answer: the bytes at [fd_off, fd_off + len) of fd (pin set:
 * the cache tier holds them until fs_op_read_done, which may run on
 * another thread), or buf[0..len), or nothing (len 0, end of file). */
struct fs_read {
	struct cachetier_pin *pin;
	int fd;
	uint64_t fd_off;
	char *buf;   /* malloc'd, or the stage's bytes (stage) */
	void *stage; /* the staged span buf points into (fetch_stage_hold), or NULL */
	size_t len;
	struct fs *fs;	 /* counted in reads_inflight until fs_op_read_done */
	int plan_wake;	 /* fs_plan_wake is due once the read is done */
	uint32_t reader; /* who reads (fs_op_read_by), for the views' reads */
};
/* Read [off, off + size) of ino (fh: the open's, 0 when not opened).
 * Counts the read and its bytes (the caller counts failures: read_errors);
 * a changed remote object (-ESTALE) is marked so. Call fs_op_read_done
 * after a success, once its reply is sent: until then the read counts in
 * reads_inflight (its cache units stay pinned). */
int fs_op_read(struct fs *fs, uint64_t ino, uint64_t fh, uint64_t off, size_t size,
	       struct fs_read *r);
/* fs_op_read by reader: the id of the task that sent the read (the FUSE
 * request's pid; 0, as fs_op_read gives, for one that has none). Each
 * reader has its own readahead stream of each file it reads and its own
 * shard cursor (fetch/fetch.h), so readers reading at once do not reset
 * each other's readahead. */
int fs_op_read_by(struct fs *fs, uint64_t ino, uint64_t fh, uint64_t off, size_t size,
		  uint32_t reader, struct fs_read *r);
void fs_op_read_done(struct fs_read *r);
/* A write from user uid (group gid), process pid: only .shardfs/control
 * takes them, each a whole command line (fs_ctl_command_as). */
int fs_op_write(struct fs *fs, uint64_t ino, const char *buf, size_t size, uid_t uid, gid_t gid,
		pid_t pid);
/* Has the sender of a request given up waiting for it (the kernel
 * interrupted the request: a signal, the sender killed)? Work that may
 * take long for one request (reading a plan file) asks now and then and
 * ends with -EINTR. NULL: never. */
struct fs_op_stop {
	int (*asked)(void *arg);
	void *arg;
};
/* The calling thread's request (begun: fs_op_begin) ends its waits for the
 * store with -EINTR once stop->asked says its sender gave up: a read's wait
 * for its units' fill or for a staged span, looked at every
 * CACHETIER_STOP_TICK_MS (100 ms); the fill goes on for other readers and
 * what the read pinned is released. An index build the request makes is
 * given up with it (counted in index_builds_interrupted; a waiter or the
 * next request builds again), and a request that finds another one
 * building the index it needs (a lookup, getattr, open, listing or read)
 * gives up its wait for that build the same way (counted in
 * index_waits_interrupted). stop must live until the request's end
 * (the next fs_op_begin on the thread clears it). */
void fs_op_stop_on(const struct fs_op_stop *stop);
/* An ioctl cmd from user uid (group gid), process pid, with the argument
 * in_buf[0..in_len): the control command (FS_CTL_IOC) gives
 * fs_ctl_command_as's result, everything else -ENOTTY. */
int fs_op_ioctl(struct fs *fs, uint64_t ino, unsigned cmd, uid_t uid, gid_t gid, pid_t pid,
		const void *in_buf, size_t in_len, const struct fs_op_stop *stop);

/* Can ino be listed? */
int fs_op_opendir(struct fs *fs, uint64_t ino);
/* One directory entry: name, e (ino 0: list the name without an inode), and
 * the offset of the next entry. Returns nonzero to stop (the reply is full). */
typedef int (*fs_dirent_fn)(void *ctx, const char *name, const struct fs_entry *e, uint64_t next);
/* List directory ino from offset off (0 ".", 1 "..", 2 + i entry i): fn for
 * each entry until it stops or the listing ends. Entries whose attributes
 * fail are skipped. With --listing-attrs looked (and auto in the shards
 * layout), files are listed by name and type only (e->ino 0,
 * listed_names_only) unless a file of ino was looked up (fs_op_lookup);
 * directories always carry their attributes. Counts the
 * readdir. A directory that cannot be listed because it is gone (a shard
 * removed from the store, its index not built) gives ESTALE, never ENOENT:
 * glibc's readdir takes ENOENT for the end of the directory (an empty
 * listing). */
int fs_op_readdir(struct fs *fs, uint64_t ino, uint64_t off, fs_dirent_fn fn, void *ctx);

void fs_op_statfs(struct fs *fs, struct statvfs *sv);
/* access(2) with mask: 0, or -EROFS for a write anywhere but control. */
int fs_op_access(struct fs *fs, uint64_t ino, int mask);
/* A setattr: only truncating .shardfs/control to 0 is accepted
 * (truncate_only: the request sets the size to 0 and nothing else),
 * answering its attributes in st; everything else -EROFS. */
int fs_op_setattr(struct fs *fs, uint64_t ino, int truncate_only, struct stat *st);

/* Extended attribute name of ino into buf (NUL-terminated): its length, or
 * -ENODATA, -ENOSYS (--no-xattr), ... */
#define FS_XATTR_MAX (4096 + 64)
int fs_op_getxattr(struct fs *fs, uint64_t ino, const char *name, char *buf, size_t size);
/* The names of ino's extended attributes, each NUL-terminated, into buf:
 * their total length, or a negative errno. */
int fs_op_listxattr(struct fs *fs, uint64_t ino, char *buf, size_t size);

/* What ino is, for a log line: the object's key, and " member NAME". */
void fs_op_describe(struct fs *fs, uint64_t ino, char *buf, size_t size);

#endif
