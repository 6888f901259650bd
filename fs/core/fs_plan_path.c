/*
 * fs_plan_path.c — is a plan file inside this mount (fs_plan_path_inside,
 * fs_plan.h)?
 *
 * A plan file is read by the request handler that got 'plan', so one
 * inside the mount would be read from the mount by the mount itself: with
 * every handler thread busy (--threads 1: this one), its lookups wait for
 * a handler forever, and the sender, the mount and its unmount hang. The
 * check must therefore never ask the mount anything: the path is resolved
 * one component at a time as open(2) would resolve it (lstat, readlink;
 * "." and ".." on the resolved prefix), and each prefix is compared, as a
 * string, with the mount points of this mount before it is looked at. The
 * mount points are this mount's and its bind mounts' in the daemon's
 * namespace (/proc/self/mountinfo: the entries with the device number of
 * the mountpoint's entry), so a symlink into the mount, a path through a
 * bind mount of it or through a symlinked directory is caught too.
 * In a command, the path is resolved with the sender's rights
 * (fs_plan_path_inside_as: lstat and readlink run as the sender, as its own
 * open would), so whether a path in a directory the sender cannot search
 * leads into the mount, loops or is too long, is not the sender's to learn:
 * EACCES there, as the open's.
 * Not caught: a path whose resolution the kernel does by magic rather
 * than by the link's text (a /proc/PID/fd/N of a file opened through a
 * lazily unmounted copy), and a file that changes between the check and
 * the open (the sender is the mount's owner or root).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs_core_ctl.h"
#include "fs_ctl.h"
#include "fs_plan.h"

/* Symbolic links followed at most (the kernel's own bound). */
#define PLAN_LINKS_MAX 40

/* The mount points of mp's filesystem (mp and its bind mounts), as
 * strings one after another, each with its NUL, then an empty one; NULL
 * when none is known (then mp alone counts). Free with free. */
static char *mount_points(const char *mp)
{
	char dev[64] = "", *line = NULL, *out = NULL;
	size_t cap = 0, len = 0, ocap = 0;
	struct fs_mountinfo mi;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return NULL;
	while (getline(&line, &cap, f) > 0) /* the last entry on mp is on top */
		if (fs_mountinfo_split(line, &mi) == 0 && strcmp(mi.point, mp) == 0)
			snprintf(dev, sizeof(dev), "%s", mi.dev);
	rewind(f);
	while (dev[0] && getline(&line, &cap, f) > 0) {
		size_t n;

		if (fs_mountinfo_split(line, &mi) < 0 || strcmp(mi.dev, dev) != 0)
			continue;
		n = strlen(mi.point) + 1;
		if (len + n + 1 > ocap) {
			size_t nc = (len + n + 1) * 2;
			char *no = realloc(out, nc);

			if (!no)
				break;
			out = no;
			ocap = nc;
		}
		memcpy(out + len, mi.point, n);
		len += n;
		out[len] = '\0';
	}
	free(line);
	fclose(f);
	return out;
}

/* Is path p the mount point pt or below it? */
static int at_or_under(const char *p, const char *pt)
{
	size_t n = strlen(pt);

	if (n <= 1)
		return 0; /* a mount on / would be everything: not ours */
	return strncmp(p, pt, n) == 0 && (p[n] == '/' || p[n] == '\0');
}

static int inside(const char *p, const char *mp, const char *pts)
{
	if (at_or_under(p, mp))
		return 1;
	for (; pts && *pts; pts += strlen(pts) + 1)
		if (at_or_under(p, pts))
			return 1;
	return 0;
}

/* The resolution of path against mp and its mount points pts (with the
 * rights of this thread: fs_plan_path_inside_as runs it as the sender). */
static int resolve(const char *mp, const char *pts, const char *path)
{
	char cur[PATH_MAX] = "", cand[PATH_MAX], link[PATH_MAX];
	char *rest = malloc(2 * PATH_MAX), *tmp = malloc(2 * PATH_MAX), *r;
	int links = 0, ret = 0;

	if (!rest || !tmp) {
		ret = -ENOMEM;
		goto out;
	}
	if (!mp || strlen(path) >= 2 * PATH_MAX)
		goto out; /* no mount point known; or open fails with ENAMETOOLONG */
	strcpy(rest, path);
	for (r = rest; *r;) {
		struct stat st;
		size_t n, cl, rl;
		ssize_t ln;

		while (*r == '/')
			r++;
		n = strcspn(r, "/");
		if (n == 0)
			break;
		if (n == 1 && r[0] == '.') {
			r += n;
			continue;
		}
		if (n == 2 && r[0] == '.' && r[1] == '.') {
			char *sl = strrchr(cur, '/');

			if (sl)
				*sl = '\0';
			r += n;
			continue;
		}
		cl = strlen(cur);
		if (cl + 1 + n >= sizeof(cand)) {
			ret = -ENAMETOOLONG;
			break;
		}
		memcpy(cand, cur, cl);
		cand[cl] = '/';
		memcpy(cand + cl + 1, r, n);
		cand[cl + 1 + n] = '\0';
		r += n;
		if (inside(cand, mp, pts)) {
			ret = 1;
			break;
		}
		if (lstat(cand, &st) < 0)
			break; /* open fails on its own, without asking the mount */
		if (!S_ISLNK(st.st_mode)) {
			strcpy(cur, cand);
			continue;
		}
		ln = readlink(cand, link, sizeof(link) - 1);
		if (ln < 0)
			break;
		link[ln] = '\0';
		if (++links > PLAN_LINKS_MAX) {
			ret = -ELOOP;
			break;
		}
		rl = strlen(r);
		if ((size_t)ln + 1 + rl >= 2 * PATH_MAX) {
			ret = -ENAMETOOLONG;
			break;
		}
		/* the link's text, then what was left of the path */
		memcpy(tmp, link, (size_t)ln);
		tmp[ln] = '/';
		memcpy(tmp + ln + 1, r, rl + 1);
		memcpy(rest, tmp, (size_t)ln + 2 + rl);
		r = rest;
		if (link[0] == '/')
			cur[0] = '\0';
	}
out:
	free(rest);
	free(tmp);
	return ret;
}

int fs_plan_path_inside(const char *mp, const char *path)
{
	char *pts = mp ? mount_points(mp) : NULL;
	int ret = resolve(mp, pts, path);

	free(pts);
	return ret;
}

struct resolve_arg {
	const char *mp, *pts, *path;
};

static int resolve_fn(void *arg)
{
	const struct resolve_arg *a = arg;

	return resolve(a->mp, a->pts, a->path);
}

int fs_plan_path_inside_as(const char *mp, const char *path, uid_t uid, gid_t gid)
{
	/* the mount points are the daemon's to know (its namespace); the path's
	 * components are looked at as the sender would look */
	struct resolve_arg a = {mp, mp ? mount_points(mp) : NULL, path};
	int ret = fs_ctl_as(uid, gid, resolve_fn, &a);

	if (ret == -EPERM) {
		/* a daemon not run as root, a sender of another user: resolved
		 * with the daemon's rights, whose verdict is not the sender's to
		 * learn: inside or unresolvable, the file is refused as one the
		 * sender may not read */
		ret = resolve(mp, a.pts, path);
		if (ret != 0)
			ret = -EACCES;
	}
	free((char *)a.pts);
	return ret;
}
