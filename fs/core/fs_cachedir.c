/*
 * fs_cachedir.c — the cache directory is trusted only when no other user
 * can place or replace a name in it (docs/usage.md, --cache-dir).
 *
 * The daemon creates, writes, truncates and punches files under the cache
 * directory by name, and appends its log there, with its own rights (root
 * for a system mount). A user who can rename or create entries on that
 * path can swap a name for a symbolic link to a file of the daemon's user
 * (a log appended to /etc/..., a cache file written over a file it names)
 * or hand it cache files of their making. So before the cache tier opens
 * it, every directory from / down to the cache directory is checked, as
 * OpenSSH checks a user's files:
 *  - above the cache directory: owned by root or by this user, and
 *    writable by no one else unless sticky (/tmp: others cannot rename an
 *    entry they do not own);
 *  - the cache directory, its v1/ and each directory in v1/ (one per
 *    source): owned by this user and writable by no one else.
 * Directories inside those (meta/, data/, decoded/) were then made by this
 * user or root. The cache directory is created first (0700, like the cache
 * tier's own mkdir -p), so nobody can make it between the check and its
 * use, and the path resolved (no symbolic link left) replaces the one
 * given: what the cache tier opens is what was checked.
 *
 * The checks run in one order, and the first that fails is the one said
 * (before anything about sizes: the option parser runs them before it
 * fits --cache-size to the disk), each naming the directory and its cause:
 *  1. the directory exists or can be created (each missing directory
 *     made in turn: the one that cannot be made, and the errno: EROFS,
 *     EACCES, ENOTDIR naming the path that is not a directory, ENOENT
 *     naming a symbolic link on the path whose target is missing). The
 *     option parser's call makes nothing (a command refused after its
 *     options leaves no directory behind): it checks the first missing
 *     directory's parent and leaves the rest to the mount's call, which
 *     makes it and runs every check;
 *  2. it is a directory;
 *  3. its filesystem is not mounted read-only (EROFS: a read-only tmpfs
 *     of mode 1777 was refused as "writable by other users");
 *  4. this user can write and enter it (EACCES);
 *  5. the trust rule above: owners, then modes, from / down.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fs_i.h"

/* 0 when the directory path may be trusted (inside: the cache directory or
 * below it); else -EPERM after saying why on stderr (dir: the --cache-dir
 * given, for the message) */
static int trust_one(const char *dir, const char *path, int inside)
{
	struct stat st;
	uid_t me = geteuid();

	if (lstat(path, &st) < 0)
		return 0;	   /* gone: the cache tier says so */
	if (S_ISLNK(st.st_mode)) { /* realpath resolved it: swapped meanwhile */
		fprintf(stderr, "shardfs: cache directory %s: %s changed to a symbolic link\n",
			FS_Q(dir), FS_Q(path));
		return -EPERM;
	}
	if (st.st_uid != me && (inside || st.st_uid != 0)) {
		fprintf(stderr,
			"shardfs: cache directory %s: %s is owned by uid %ld, not by this user "
			"(uid %ld)%s: its owner could replace what the daemon writes there; give "
			"--cache-dir a directory of this user's (in fstab: cache-dir=DIR)\n",
			FS_Q(dir), FS_Q(path), (long)st.st_uid, (long)me, inside ? "" : " or root");
		return -EPERM;
	}
	if ((st.st_mode & 022) && (inside || !(st.st_mode & S_ISVTX))) {
		fprintf(stderr,
			"shardfs: cache directory %s: %s is writable by other users (mode %04o): "
			"they could replace what the daemon writes there; 'chmod go-w %s' or give "
			"another --cache-dir\n",
			FS_Q(dir), FS_Q(path), (unsigned)(st.st_mode & 07777), FS_Q(path));
		return -EPERM;
	}
	return 0;
}

/* Each directory in v1/ (one per source) and v1/ itself. */
static int trust_v1(const char *dir, const char *real)
{
	char path[PATH_MAX];
	struct dirent *e;
	DIR *d;
	int err, n = snprintf(path, sizeof(path), "%s/v1", real);

	if (n < 0 || (size_t)n >= sizeof(path))
		return 0; /* the cache tier says ENAMETOOLONG */
	err = trust_one(dir, path, 1);
	if (err < 0)
		return err;
	d = opendir(path);
	if (!d)
		return 0;
	while (err == 0 && (e = readdir(d))) {
		if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN)
			continue; /* files (usage), and links: no source's */
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		n = snprintf(path, sizeof(path), "%s/v1/%s", real, e->d_name);
		if (n > 0 && (size_t)n < sizeof(path))
			err = trust_one(dir, path, 1);
	}
	closedir(d);
	return err;
}

/* The cache directory dir cannot be used: why (printf), then the hint of
 * the cache tier's own refusal (fs_core.c). Returns err. */
static int __attribute__((format(printf, 3, 4)))
unusable(const char *dir, int err, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "shardfs: cache directory %s: ", FS_Q(dir));
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "; name one this user can write with --cache-dir DIR (in fstab: "
			"cache-dir=DIR). Without it the cache directory is "
			"$XDG_CACHE_HOME/shardfs, else $HOME/.cache/shardfs, else "
			"/var/cache/shardfs\n");
	return err;
}

/* Why this user cannot write in the directory path (checks 3 and 4 of the
 * header: its filesystem read-only, -EROFS, or access's errno): 0 if it can. */
static int write_refused(const char *path)
{
	struct statvfs sv;

	if (statvfs(path, &sv) == 0 && (sv.f_flag & ST_RDONLY))
		return -EROFS;
	return access(path, W_OK | X_OK) < 0 ? -errno : 0;
}

/* path, which stat found missing, is a symbolic link whose target is
 * missing: say so (mkdir would fail with EEXIST, realpath with ENOENT, and
 * "DIR: No such file or directory" of a link 'ls' shows leaves the user to
 * guess) and return -ENOENT; else 0. Its target is not made: the link may
 * name a disk not mounted yet. */
static int dangling(const char *dir, const char *path)
{
	char to[PATH_MAX];
	ssize_t n = readlink(path, to, sizeof(to) - 1);

	if (n < 0)
		return 0; /* not a link: missing, to be made */
	to[n] = '\0';
	return unusable(dir, -ENOENT,
			"%s is a symbolic link to %s, which does not exist: make that directory or "
			"give --cache-dir another",
			path, to);
}

/* Checks 1 and 2 (the header): dir there and a directory, or made (mkdir
 * -p, 0700) when make is set. Without make nothing is created: the first
 * missing directory is checked against its parent (check 1's errnos) and 1
 * returned, the rest left to the call that makes it. 0, 1, or a negative
 * errno after saying which path failed. */
static int usable_made(const char *dir, int make)
{
	char buf[PATH_MAX];
	size_t n = strlen(dir), parent = 0;
	struct stat st;

	if (n == 0 || n >= sizeof(buf))
		return unusable(dir, -ENAMETOOLONG, "%s", strerror(ENAMETOOLONG));
	memcpy(buf, dir, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		buf[i] = '\0';
		if (stat(buf, &st) == 0) {
			if (!S_ISDIR(st.st_mode))
				return unusable(dir, -ENOTDIR, "%s is not a directory", buf);
		} else if (errno != ENOENT) {
			int e = errno;

			return unusable(dir, -e, "%s: %s", buf, strerror(e));
		} else if (dangling(dir, buf) < 0) {
			return -ENOENT;
		} else if (!make) {
			/* its parent: what the path holds before it, "/" or "." */
			char up[PATH_MAX];
			int e;

			if (parent > 0)
				snprintf(up, sizeof(up), "%.*s", (int)parent, buf);
			else
				snprintf(up, sizeof(up), "%s", buf[0] == '/' ? "/" : ".");
			e = write_refused(up);
			return e < 0 ? unusable(dir, e, "cannot create %s: %s", buf, strerror(-e))
				     : 1;
		} else if (mkdir(buf, 0700) < 0 && errno != EEXIST) {
			int e = errno;

			return unusable(dir, -e, "cannot create %s: %s", buf, strerror(e));
		}
		buf[i] = dir[i];
		parent = i;
	}
	return 0;
}

/* Checks 3 and 4 (the header) of real, the resolved dir. */
static int usable_writable(const char *dir, const char *real)
{
	int e = write_refused(real);

	if (e == -EROFS)
		return unusable(dir, e, "%s: the filesystem of %s is mounted read-only",
				strerror(-e), real);
	if (e < 0)
		return unusable(dir, e, "%s: this user (uid %ld) cannot write %s", strerror(-e),
				(long)geteuid(), real);
	return 0;
}

int fs_cachedir_trust(const char **dirp, int make)
{
	const char *dir = *dirp;
	char *real, *p;
	int err = usable_made(dir, make);

	if (err != 0)
		return err < 0 ? err : 0; /* 1: not there yet, nothing made */
	real = realpath(dir, NULL);
	if (!real) {
		err = -errno;
		return unusable(dir, err, "%s", strerror(-err));
	}
	err = usable_writable(dir, real);
	if (err < 0) {
		free(real);
		return err;
	}
	/* every directory above it: "/", "/a", "/a/b", ... */
	err = trust_one(dir, "/", 0);
	for (p = strchr(real + 1, '/'); err == 0 && p; p = strchr(p + 1, '/')) {
		*p = '\0';
		err = trust_one(dir, real, 0);
		*p = '/';
	}
	if (err == 0 && strcmp(real, "/") != 0)
		err = trust_one(dir, real, 1);
	if (err == 0)
		err = trust_v1(dir, real);
	if (err < 0) {
		free(real);
		return err;
	}
	/* the path checked is the one opened: a symbolic link on the way
	 * (the given path's own, say) is not followed again */
	free((char *)*dirp);
	*dirp = real;
	return 0;
}
