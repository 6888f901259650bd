/*
 * fs_ctl_open.c — a file a control command names, opened with its sender's
 * rights (fs_ctl.h, fs_ctl_open_as).
 *
 * The daemon may read more than the user who sends it a command: a mount
 * by root with -o allow_other and --uid N takes commands from user N. A
 * plan file is read by the daemon, and what it says back (how many paths,
 * how many named nothing, on which lines) tells something of any file it
 * could open: 'shardfs plan MNT /etc/shadow' from user N counted the
 * lines of a file N cannot read. So the file is opened as the sender
 * would open it: in a daemon run as root, this thread's file-system user
 * and group ids are the sender's for the open (setfsuid and setfsgid are
 * per thread in the kernel; the raw system calls, so the C library does
 * not carry them to the other threads), with no supplementary group (the
 * sender's own are not known: a file only a supplementary group of the
 * sender may read is refused), then the daemon's are put back before
 * anything else runs on this thread. A daemon not run as root cannot take
 * another user's ids: it opens the file and keeps it only when the sender
 * owns it or anybody may read it. fs_ctl_as runs any function so: the
 * plan file's mount check resolves the path with the sender's rights too
 * (fs_plan_path.c, fs_plan_path_inside_as).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fs_ctl.h"

/* the daemon's supplementary groups, at most this many kept across the
 * open (more: the open is refused rather than losing some) */
#define OPEN_AS_GROUPS_MAX 1024

static int open_owned(const char *path, int flags, uid_t uid)
{
	struct stat st;
	int fd = open(path, flags);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || (st.st_uid != uid && !(st.st_mode & S_IROTH))) {
		close(fd);
		return -EACCES;
	}
	return fd;
}

int fs_ctl_as(uid_t uid, gid_t gid, int (*fn)(void *), void *arg)
{
	uid_t me = geteuid();
	gid_t *saved;
	int n, ret;

	if (uid == 0 || uid == me)
		return fn(arg);
	if (me != 0)
		return -EPERM;
	saved = malloc(OPEN_AS_GROUPS_MAX * sizeof(*saved));
	if (!saved)
		return -ENOMEM;
	n = getgroups(OPEN_AS_GROUPS_MAX, saved);
	if (n < 0 || syscall(SYS_setgroups, 0, NULL) < 0) {
		free(saved);
		return -EACCES;
	}
	syscall(SYS_setfsgid, gid);
	syscall(SYS_setfsuid, uid);
	/* setfsuid answers the old id, never an error: make sure it took */
	if ((uid_t)syscall(SYS_setfsuid, -1) != uid || (gid_t)syscall(SYS_setfsgid, -1) != gid)
		ret = -EACCES;
	else
		ret = fn(arg);
	syscall(SYS_setfsuid, me);
	syscall(SYS_setfsgid, getegid());
	if (syscall(SYS_setgroups, (size_t)n, saved) < 0)
		abort(); /* this thread would go on without the daemon's groups */
	free(saved);
	return ret;
}

struct open_arg {
	const char *path;
	int flags;
};

static int open_fn(void *arg)
{
	const struct open_arg *a = arg;
	int fd = open(a->path, a->flags);

	return fd < 0 ? -errno : fd;
}

int fs_ctl_open_as(const char *path, int flags, uid_t uid, gid_t gid)
{
	struct open_arg a = {path, flags};
	uid_t me = geteuid();

	if (me != 0 && uid != 0 && uid != me)
		return open_owned(path, flags, uid);
	return fs_ctl_as(uid, gid, open_fn, &a);
}
