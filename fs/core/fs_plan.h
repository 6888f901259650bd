/*
 * fs_plan.h — reading plans (fs_plan.c) and the thread that fetches ahead
 * along them (fs_plan_fetch.c; the decisions are fetch/fetch_planner.c's). The published plans,
 * their lock, generation and listener live behind the opaque struct fs_plans that fs->plans points
 * to, made by fs_open (fs_plans_new) and freed by fs_close; nothing outside
 * fs_plan.c and fs_plan_use.c (which share fs_plan_i.h) touches its fields.
 */
#ifndef FS_PLAN_H
#define FS_PLAN_H

#include <stdint.h>
#include <sys/types.h>

struct fs_op_stop; /* fs_core_ops.h */

struct fs;
struct fs_plans;

/* Reading plans at once (fs_plan.c): a new name past it drops the plan
 * published longest ago. */
#define FS_PLAN_MAX 64

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
 * a lookahead of its choosing; the listener (fs_plan_set_listener) says when
 * the set of plans changed. A plan never changes once published except for its read marks
 * and position (atomics): a replaced plan stays valid while referenced. */
/* FS_PLAN_NAME_MAX: fs_core_ctl.h */
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
	uint32_t missing;  /* paths of the file that name nothing in the mount
			    * (skipped), and planned paths whose object the source
			    * removed since (a refresh) */
	uint32_t failed;   /* paths of the file whose lookup failed (skipped): their
			    * shard could not be read or indexed */
	uint32_t read;	   /* extents marked read */
	uint32_t position; /* 1 + index of the furthest extent read (0: none read) */
	uint64_t bytes;	   /* sum of the extents' len */
	uint64_t fnv;	   /* FNV-1a 64 of the found paths as given, each with '\n' */
};
/* Read FILE (opened with the rights of the sender, user uid and group gid:
 * fs_ctl_open_as) and publish it as plan name (NULL: "pid-PID"). 0, or -EINVAL
 * (a relative FILE, a bad name, a FILE inside the mount, not a regular
 * file), -EISDIR, -EFBIG (past FS_PLAN_FILE_MAX or 2^32-1 paths), -ENOMEM,
 * or open's error (-ENOENT, -EACCES), -EINTR (stop said the sender gave up
 * waiting: asked after each piece of the file read). Blocks: may index
 * shards. */
int fs_plan_publish(struct fs *fs, const char *name, pid_t pid, const char *file,
		    const struct fs_op_stop *stop, uid_t uid, gid_t gid);
/* Does path (absolute) name something inside the mount at mp (its
 * realpath), following symbolic links, "." and "..", or through a bind
 * mount of it, without ever looking at mp or below it (fs_plan_path.c)?
 * 1 inside, 0 not (or not resolvable: opening it fails on its own),
 * -ELOOP, -ENAMETOOLONG, -ENOMEM. Any thread. */
int fs_plan_path_inside(const char *mp, const char *path);
/* fs_plan_path_inside with the rights of user uid, group gid, no
 * supplementary group (fs_ctl_as): a component the sender cannot look at
 * ends the resolution (0: its open fails on its own, EACCES). */
int fs_plan_path_inside_as(const char *mp, const char *path, uid_t uid, gid_t gid);
/* Drop plan name (NULL: "pid-PID"): 0 or -ENOENT. */
int fs_plan_clear(struct fs *fs, const char *name, pid_t pid);
/* A read of [off, off + size) of ino (an object's or a member's: fs_op_read
 * gives a layout's other inode of a member as the member's, fs_view.h
 * member_of), after its bytes were pinned: marks the path read in every
 * plan that has it: a read at offset 0 marks its first occurrence not read
 * yet (a new read of the file), one at another offset only the first when
 * none is read (it continues a read). Every read of a planned path (of
 * each request of a path read in several) makes the units its bytes read
 * so far cover needed by no plan (fs_plan.c, next use). Reads the kernel
 * answers from its page cache never come here. Cheap when no plan is
 * published. Returns 1 when the listener is due (the read moved a plan's
 * position to its wake point or past it): the caller calls fs_plan_wake
 * once the read's reply is sent and its cache units released, so that a
 * fetcher woken by it finds the units the read is done with evictable;
 * else 0. */
int fs_plan_note_read(struct fs *fs, uint64_t ino, uint64_t off, uint64_t size);
/* Call the listener (fs_plan_set_listener), for a read fs_plan_note_read
 * said it is due for. */
void fs_plan_wake(struct fs *fs);
/* fn(ctx) is called after every publish and clear and after a read that
 * marked a planned path and moved its plan's position to the plan's wake
 * point or past it (fs_plan_wake_at; so a fetcher can wake up; from
 * fs_plan_wake, once the read is done), on the thread that did it, with
 * no lock of fs_plan.c held; it must not block. Set it once, before
 * requests are served (NULL: none). */
void fs_plan_set_listener(struct fs *fs, void (*fn)(void *ctx), void *ctx);
/* The listener needs no call for reads of p until p's position reaches
 * position (0, as published: every read that marks a path). Any thread. */
void fs_plan_wake_at(struct fs_plan *p, uint32_t position);
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
 * thread, woken by fs_plan_set_listener's hook, runs the fetch scheduler's
 * planner (fetch_planner_pass, fetch/fetch_planner.c), which decides what
 * of each plan is fetched, how much and when. Start after the namespace is
 * built; stop after cachetier_cancel (accepts a fetcher that never
 * started). */
void fs_plan_fetch_start(struct fs *fs);
int fs_plan_fetch_stop(struct fs *fs); /* fs_thread_stop's result */
/* Sums over the plans now, for stats. */
struct fs_plan_totals {
	uint64_t plans, paths, missing, failed, read, position, bytes;
};
void fs_plan_totals(struct fs *fs, struct fs_plan_totals *t);
/* .shardfs/plans: one line per plan (fs_plan_info's fields). */
int fs_plan_render(struct fs *fs, char **buf, size_t *len);
/* Drop every plan (at unmount; accepts a core without plans). */
void fs_plan_free_all(struct fs *fs);
/* The plans' state, empty: 0 or -ENOMEM (fs_open); freed by fs_plans_free
 * (fs_close, after fs_plan_free_all; NULL: nothing). */
int fs_plans_new(struct fs_plans **pl);
void fs_plans_free(struct fs_plans *pl);

#endif
