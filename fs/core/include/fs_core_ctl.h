/*
 * fs_core_ctl.h — the control files of a mount and the protocol of the
 * commands that talk to a running mount (fs/tools/fs_client.c): the files
 * of .shardfs, the control ioctl, the stats document read back, the
 * counters' documentation (the man page, fs/tools/fs_man.c). Part of the
 * core's public API (fs_core.h).
 */
#ifndef FS_CORE_CTL_H
#define FS_CORE_CTL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>

/* Undo /proc/self/mountinfo's octal escapes of a field (\040 a blank,
 * \011 a tab, \012 a newline, \134 a backslash) in place (fs_mountinfo.c;
 * fs_mountinfo_split unescapes a line's paths with it). */
void fs_mountinfo_unescape(char *s);

/* Fields of a mountinfo line read at most: a separator further on is not
 * looked for (the line is refused). */
#define FS_MOUNTINFO_FIELDS_MAX 64

/* One line of /proc/self/mountinfo split in place (fs_mountinfo_split):
 * pointers into the line, valid while it is. */
struct fs_mountinfo {
	char *dev;	       /* field 3, "MAJOR:MINOR" as written */
	unsigned major, minor; /* field 3's numbers */
	char *root, *point;    /* fields 4 and 5, unescaped */
	char *options;	       /* field 6, the mount's options as written */
	char *type;	       /* after the separator "-": the filesystem's type, */
	char *source;	       /* its source (unescaped) */
	char *super;	       /* and the superblock's options as written */
};

/* Split line (one line of mountinfo; it ends at its first newline, which
 * is cut) in place into *mi (fs_mountinfo.c): fields apart by runs of
 * blanks, the separator "-" the first one from field 7 on with three
 * fields after it among the first FS_MOUNTINFO_FIELDS_MAX (later fields
 * are ignored), field 3 two decimal numbers of 32 bits apart by ':'. 0, or
 * -EINVAL for a line of another shape (*mi is not set then; the line's
 * blanks may be cut). */
int fs_mountinfo_split(char *line, struct fs_mountinfo *mi);
/* Does path (absolute) name something inside the shardfs mount at mp,
 * resolved without ever asking that mount (fs_plan_path.c, fs_plan.h):
 * 1 inside, 0 not, or a negative errno; for 'shardfs index' too. */
int fs_plan_path_inside(const char *mp, const char *path);

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

/* fs_ctl.c: the names of the .shardfs control files. */
extern const char *const fs_ctl_names[FS_CTL_COUNT];

/* Commands reach a running mount as this ioctl on MOUNTPOINT/.shardfs/control
 * opened read-only (the mount is read-only, so nothing on it can be opened
 * for writing): the argument is FS_CTL_IOC_LEN bytes holding command lines
 * as fs_ctl_command takes them, NUL-terminated. ioctl returns what
 * fs_ctl_command does (-1 with errno for an error). Only the mount's owner
 * (and root) may send commands. */
#define FS_CTL_IOC_LEN 8192
#define FS_CTL_IOC     _IOW('S', 0x01, char[FS_CTL_IOC_LEN])
/* The longest wait a 'prefetch-wait RUN MS' command may ask for (fs_ctl.h):
 * a request handler is held at most this long. */
#define FS_CTL_WAIT_MAX_MS 1000
/* What a 'prefetch-check MS [PATH]' command answers (fs_ctl.h), of the
 * objects at or below PATH: every byte cached; a prefetch of one of them
 * still runs (MS passed first); not every byte cached, nothing running, and
 * what is missing the prefetch skipped because it did not fit; bytes that
 * fit are not cached (fills failed, or readers' fills evicted them). */
enum fs_ctl_check {
	FS_CTL_CHECK_CACHED = 0,
	FS_CTL_CHECK_RUNNING = 1,
	FS_CTL_CHECK_UNFIT = 2,
	FS_CTL_CHECK_MISSING = 3,
};
/* The longest notice an 'umount-notice MS' command may give (fs_ctl.h):
 * 'shardfs umount' waits at most FS_UMOUNT_LEAVE_MS (fs_umount.c) for the
 * control file's users to leave, and gives that. */
#define FS_CTL_NOTICE_MAX_MS 60000

/* A reading plan's name (plan [NAME] FILE): [A-Za-z0-9._:-], 1 to 64
 * characters (fs_plan.c). */
#define FS_PLAN_NAME_MAX 64

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

/* fs_ctl.c: the i-th counter of .shardfs/stats, for the man page
 * (fs/tools/fs_man.c): its name, help text, and 1 for a gauge, 0 for a
 * counter. 0, or -ENOENT past the table's end. */
int fs_ctl_counter_doc(size_t i, const char **name, const char **help, int *gauge);

/* fs_core.c: is the absolute path abs a mount point of type fuse.shardfs?
 * Reads the mount table with getmntent_r (which undoes its escapes, so a
 * mount point with a space is found) and never touches the path itself (a
 * dead daemon's mount answers ENOTCONN). 1 when it is, with the mount's
 * owner (its user_id option, or -1) in *owner and whether it has
 * allow_other in *allow_other (each may be NULL); else 0. */
int fs_mount_lookup(const char *abs, long *owner, int *allow_other);

#endif
