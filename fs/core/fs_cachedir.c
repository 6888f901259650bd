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
 * given: what the cache tier opens is what was checked. A path that cannot
 * be resolved is left to the cache tier, which reports its errno with the
 * --cache-dir hint.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
		fprintf(stderr, "shardfs: cache directory %s: %s changed to a symbolic link\n", dir,
			path);
		return -EPERM;
	}
	if (st.st_uid != me && (inside || st.st_uid != 0)) {
		fprintf(stderr,
			"shardfs: cache directory %s: %s is owned by uid %ld, not by this user "
			"(uid %ld)%s: its owner could replace what the daemon writes there; give "
			"--cache-dir a directory of this user's (in fstab: cache-dir=DIR)\n",
			dir, path, (long)st.st_uid, (long)me, inside ? "" : " or root");
		return -EPERM;
	}
	if ((st.st_mode & 022) && (inside || !(st.st_mode & S_ISVTX))) {
		fprintf(stderr,
			"shardfs: cache directory %s: %s is writable by other users (mode %04o): "
			"they could replace what the daemon writes there; 'chmod go-w %s' or give "
			"another --cache-dir\n",
			dir, path, (unsigned)(st.st_mode & 07777), path);
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

int fs_cachedir_trust(const char **dirp)
{
	const char *dir = *dirp;
	char *real, *p;
	int err = 0;

	(void)disk_mkdirs(dir, 0700); /* errors are the cache tier's to report */
	real = realpath(dir, NULL);
	if (!real)
		return 0; /* the cache tier reports the errno */
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
