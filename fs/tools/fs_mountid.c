/*
 * fs_mountid.c — which shardfs mount a path names, as the kernel says
 * (fs_mountid.h), and which process is its daemon. Nothing a path holds
 * is trusted for either: a directory of anybody's files can hold a
 * ".shardfs/stats", and so can a shard.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs_core_ctl.h"
#include "fs_mountid.h"
#include "fs_tools.h"

/* path made absolute against dir (NULL: the working directory) and
 * normalized without touching the filesystem: "//", "/./" and trailing
 * slashes go, ".." takes the component before it. 0, or -ENAMETOOLONG. */
static int lexical_abs(const char *path, const char *dir, char *out, size_t n)
{
	char buf[2 * PATH_MAX], cwd[PATH_MAX];
	size_t w = 0;
	const char *p;

	if (path[0] == '/') {
		if (strlen(path) >= sizeof(buf))
			return -ENAMETOOLONG;
		strcpy(buf, path);
	} else {
		if (!dir) {
			if (!getcwd(cwd, sizeof(cwd)))
				return -errno;
			dir = cwd;
		}
		if ((size_t)snprintf(buf, sizeof(buf), "%s/%s", dir, path) >= sizeof(buf))
			return -ENAMETOOLONG;
	}
	if (n < 2)
		return -ENAMETOOLONG;
	for (p = buf; *p;) {
		size_t len;

		while (*p == '/')
			p++;
		len = strcspn(p, "/");
		if (len == 0)
			break;
		if (len == 1 && p[0] == '.') {
			/* nothing */
		} else if (len == 2 && p[0] == '.' && p[1] == '.') {
			while (w > 0 && out[w - 1] != '/')
				w--;
			if (w > 0)
				w--;
		} else {
			if (w + 1 + len + 1 > n)
				return -ENAMETOOLONG;
			out[w++] = '/';
			memcpy(out + w, p, len);
			w += len;
		}
		p += len;
	}
	if (w == 0)
		out[w++] = '/';
	out[w] = '\0';
	return 0;
}

/* The absolute path of path: symlinks resolved where they can be (a dead
 * mount or another user's answers no lstat: then its parent is resolved
 * and the last component kept as written). */
static int resolve(const char *path, char *out, size_t n)
{
	char lex[PATH_MAX], *r = realpath(path, NULL), *slash, *parent;
	int err;

	if (r) {
		err = strlen(r) < n ? 0 : -ENAMETOOLONG;
		if (!err)
			strcpy(out, r);
		free(r);
		return err;
	}
	err = lexical_abs(path, NULL, lex, sizeof(lex));
	if (err < 0)
		return err;
	slash = strrchr(lex, '/');
	if (slash == lex) {
		parent = NULL;
	} else {
		*slash = '\0';
		parent = realpath(lex, NULL);
		*slash = '/';
	}
	if (parent) {
		err = (size_t)snprintf(out, n, "%s%s", strcmp(parent, "/") ? parent : "", slash) < n
			  ? 0
			  : -ENAMETOOLONG;
		free(parent);
		return err;
	}
	if (strlen(lex) >= n)
		return -ENAMETOOLONG;
	strcpy(out, lex);
	return 0;
}

/* The value of option name in a comma-separated list (NULL: absent; ""
 * for a flag). */
static const char *opt_in(const char *list, const char *name, char *val, size_t n)
{
	size_t len = strlen(name);

	for (const char *p = list; p && *p;) {
		size_t l = strcspn(p, ",");

		if (l >= len && strncmp(p, name, len) == 0 && (l == len || p[len] == '=')) {
			size_t v = l == len ? 0 : l - len - 1;

			if (v >= n)
				v = n - 1;
			memcpy(val, p + len + (l == len ? 0 : 1), v);
			val[v] = '\0';
			return val;
		}
		p += l + (p[l] ? 1 : 0);
	}
	return NULL;
}

/* The topmost mount at dir in /proc/self/mountinfo: 1 and m filled (but
 * state) when it is a shardfs mount, 0 when there is none or another
 * kind (-errno when mountinfo cannot be read). */
static int mountinfo_find(const char *dir, struct fs_mnt *m)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	int found = 0;

	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		struct fs_mountinfo mi;
		char val[32];

		if (fs_mountinfo_split(line, &mi) < 0 || strcmp(mi.point, dir) != 0)
			continue;
		/* a later line at the same point is mounted over the earlier */
		found = strcmp(mi.type, "fuse.shardfs") == 0;
		if (!found)
			continue;
		snprintf(m->dir, sizeof(m->dir), "%s", mi.point);
		m->dev = makedev(mi.major, mi.minor);
		m->owner = -1;
		if (opt_in(mi.super, "user_id", val, sizeof(val)) && val[0]) {
			char *end;

			errno = 0;
			m->owner = strtol(val, &end, 10);
			if (errno || *end)
				m->owner = -1;
		}
		m->allow_other = opt_in(mi.super, "allow_other", val, sizeof(val)) != NULL;
	}
	free(line);
	fclose(f);
	return found;
}

/* 1 when the resolved path p is dir or below it (as strings). */
static int under(const char *p, const char *dir)
{
	size_t n = strlen(dir);

	if (n == 1)
		return 1; /* "/" */
	return strncmp(p, dir, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

int fs_mnt_source_loop(const char *path, char *mp, char *src, size_t n, int *holds)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char abs[PATH_MAX], *line = NULL, *real = NULL;
	size_t cap = 0;
	int r, found = 0;

	*holds = 0;
	if (!f)
		return -errno;
	r = lexical_abs(path, NULL, abs, sizeof(abs));
	/* the source inside a mount first: only then is it safe to resolve
	 * (realpath asks whatever the path crosses) for the other way round */
	for (int pass = 0; r == 0 && !found && pass < 2; pass++) {
		if (pass == 1 && !(real = realpath(abs, NULL)))
			break;
		rewind(f);
		while (!found && getline(&line, &cap, f) > 0) {
			struct fs_mountinfo mi;

			if (fs_mountinfo_split(line, &mi) < 0 ||
			    strcmp(mi.type, "fuse.shardfs") != 0)
				continue;
			/* a mount point in mountinfo is resolved already, as
			 * real is: compared as strings, no mount is looked at */
			found = pass == 0 ? fs_plan_path_inside(mi.point, abs) == 1
					  : under(mi.point, real);
			if (found) {
				snprintf(mp, n, "%s", mi.point);
				snprintf(src, n, "%s", mi.source);
				*holds = pass;
			}
		}
	}
	free(real);
	free(line);
	fclose(f);
	return r < 0 ? r : found;
}

/* path is no shardfs mount: said, with the mount it lies in when it is a
 * path inside one (a shard's directory: the user meant that mount) */
void fs_mnt_say_not_a_mount(const char *path)
{
	char mp[PATH_MAX], src[PATH_MAX];
	int holds = 0;

	if (fs_mnt_source_loop(path, mp, src, sizeof(mp), &holds) == 1 && !holds)
		fprintf(stderr,
			"shardfs: %s is not a shardfs mount: it lies inside the shardfs mount %s "
			"(give that mount point)\n",
			FS_Q(path), FS_Q(mp));
	else
		fprintf(stderr, "shardfs: %s is not a shardfs mount\n", FS_Q(path));
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* stat(path) within FS_MNT_ANSWER_MS: the first touch of a mount waits on
 * its daemon, which may be stopped or stuck, and a request the daemon does
 * not answer cannot be taken back; so a child makes it and this process
 * waits for the child's answer only that long (the child is then killed).
 * 0 with *st, -errno of the stat, or -ETIMEDOUT. */
static int stat_bounded(const char *path, struct stat *st)
{
	struct {
		int err;
		struct stat st;
	} r = {0};
	int64_t end = mono_ms() + FS_MNT_ANSWER_MS;
	int fds[2], err = -ETIMEDOUT;
	pid_t c;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	c = fork();
	if (c == 0) {
		close(fds[0]);
		r.err = stat(path, &r.st) < 0 ? errno : 0;
		_exit(write(fds[1], &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 1);
	}
	close(fds[1]);
	if (c < 0) {
		close(fds[0]);
		return -errno;
	}
	for (int64_t left; (left = end - mono_ms()) > 0;) {
		struct pollfd p = {.fd = fds[0], .events = POLLIN};
		int n = poll(&p, 1, (int)left);

		if (n < 0 && errno == EINTR)
			continue;
		if (n == 1 && read(fds[0], &r, sizeof(r)) == (ssize_t)sizeof(r)) {
			err = r.err ? -r.err : 0;
			*st = r.st;
		}
		break;
	}
	close(fds[0]);
	if (err == -ETIMEDOUT)
		kill(c, SIGKILL);
	/* a request not yet taken by the daemon ends at the kill; one it took
	 * ends when it answers or the mount goes (the child is then left to
	 * this process's parent) */
	for (int i = 0; i < 100 && waitpid(c, NULL, WNOHANG) == 0; i++)
		nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	return err;
}

long fs_mnt_find_daemon(const struct fs_mnt *m)
{
	DIR *proc = opendir("/proc");
	struct dirent *e;
	long found = -1;

	while (proc && found < 0 && (e = readdir(proc))) {
		long pid = strtol(e->d_name, NULL, 10);

		if (pid > 0 && fs_mnt_is_daemon(m, pid))
			found = pid;
	}
	if (proc)
		closedir(proc);
	return found;
}

char fs_mnt_pid_state(long pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* "pid (comm) S ..." */
	return p && p[1] == ' ' ? p[2] : 0;
}

int fs_mnt_pid_stopped(long pid)
{
	/* 'T' only: 't' is a tracer's stop (LeakSanitizer's at an ASan
	 * build's exit stops every thread for a moment) */
	return fs_mnt_pid_state(pid) == 'T';
}

void fs_mnt_say_hung(const char *path, const struct fs_mnt *m)
{
	long pid = fs_mnt_find_daemon(m);

	if (pid < 0)
		fprintf(stderr,
			"shardfs: %s: the mount does not answer within %d s, and no daemon of it "
			"was found ('shardfs umount %s' unmounts it)\n",
			FS_Q(path), FS_MNT_ANSWER_MS / 1000, FS_Q(path));
	else if (fs_mnt_pid_stopped(pid))
		fprintf(stderr,
			"shardfs: %s: its daemon (pid %ld) does not answer within %d s: it is "
			"stopped ('kill -CONT %ld' continues it)\n",
			FS_Q(path), pid, FS_MNT_ANSWER_MS / 1000, pid);
	else
		fprintf(stderr,
			"shardfs: %s: its daemon (pid %ld) does not answer within %d s: it may be "
			"stuck (see its log; 'shardfs umount %s' unmounts it)\n",
			FS_Q(path), pid, FS_MNT_ANSWER_MS / 1000, FS_Q(path));
}

int fs_mnt_identify(const char *path, struct fs_mnt *m)
{
	char abs[PATH_MAX], ctl[PATH_MAX + 32];
	struct stat st = {0};
	int r;

	memset(m, 0, sizeof(*m));
	m->owner = -1;
	r = resolve(path, abs, sizeof(abs));
	if (r < 0)
		return r;
	r = mountinfo_find(abs, m);
	if (r <= 0)
		return r < 0 ? r : -ENOENT;
	snprintf(ctl, sizeof(ctl), "%s/.shardfs/control", m->dir);
	r = stat_bounded(ctl, &st);
	if (r < 0) {
		m->state = r == -ENOTCONN		 ? FS_MNT_DEAD
			   : r == -ETIMEDOUT		 ? FS_MNT_HUNG
			   : r == -EACCES || r == -EPERM ? FS_MNT_DENIED
							 : FS_MNT_ERROR;
		m->err = -r;
		return 0;
	}
	/* the control file the daemon of this mount serves, not a file of
	 * the same name on a mount over or under it */
	if (st.st_dev != m->dev)
		return -ENOENT;
	m->state = FS_MNT_LIVE;
	return 0;
}

/* The arguments of process pid (its /proc cmdline): a malloc'd buffer of
 * NUL-terminated strings, *len its size; NULL when unreadable. */
static char *proc_cmdline(long pid, size_t *len)
{
	char path[64], *buf = NULL;
	size_t n = 0, cap = 0;
	int fd;

	snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	for (;;) {
		ssize_t k;

		if (n + 4096 > cap) {
			char *p = realloc(buf, cap += 8192);

			if (!p)
				break;
			buf = p;
		}
		k = read(fd, buf + n, cap - n - 1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	close(fd);
	if (buf)
		buf[n] = '\0';
	*len = n;
	return buf;
}

/* 1 when process pid holds an open file whose path is dir (a shardfs
 * daemon holds its mount point's directory: fs/fuse/fs_mount.c). */
static int holds_dir(long pid, const char *dir)
{
	char path[64], link[PATH_MAX];
	struct dirent *e;
	DIR *d;
	int found = 0;

	snprintf(path, sizeof(path), "/proc/%ld/fd", pid);
	d = opendir(path);
	while (d && !found && (e = readdir(d))) {
		char p[96];
		ssize_t n;

		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "/proc/%ld/fd/%.20s", pid, e->d_name);
		n = readlink(p, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		found = strcmp(link, dir) == 0;
	}
	if (d)
		closedir(d);
	return found;
}

int fs_mnt_is_daemon(const struct fs_mnt *m, long pid)
{
	char path[64], exe[PATH_MAX];
	const char *base;
	char *args;
	size_t len = 0;
	ssize_t n;
	int is_mount = 0;

	if (pid <= 0 || pid > INT_MAX || pid == (long)getpid())
		return 0;
	snprintf(path, sizeof(path), "/proc/%ld/exe", pid);
	n = readlink(path, exe, sizeof(exe) - 1);
	if (n <= 0)
		return 0;
	exe[n] = '\0';
	if (n > 10 && strcmp(exe + n - 10, " (deleted)") == 0)
		exe[n - 10] = '\0'; /* the binary was upgraded under it */
	base = strrchr(exe, '/');
	base = base ? base + 1 : exe;
	if (strcmp(base, "shardfs") != 0)
		return 0;
	args = proc_cmdline(pid, &len);
	if (!args)
		return 0;
	/* a 'shardfs mount' process ... */
	for (size_t i = 0; i < len && !is_mount; i += strlen(args + i) + 1)
		is_mount = i > 0 && strcmp(args + i, "mount") == 0;
	free(args);
	/* ... that holds this mount point */
	return is_mount && holds_dir(pid, m->dir);
}

/* Read a control file of a running mount into a malloc'd string (NULL with
 * errno set). */
char *fs_mnt_read_ctl(const char *mnt, const char *name)
{
	char path[PATH_MAX], *buf = NULL;
	size_t len = 0, cap = 0;
	int fd, err = 0;

	snprintf(path, sizeof(path), "%s/.shardfs/%s", mnt, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	for (;;) {
		ssize_t n;

		if (len + 4096 + 1 > cap) {
			char *p = realloc(buf, cap = (cap + 4096) * 2);

			if (!p) {
				err = ENOMEM;
				break;
			}
			buf = p;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			err = errno;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (err || !buf) {
		free(buf);
		errno = err ? err : EIO;
		return NULL;
	}
	buf[len] = '\0';
	return buf;
}

/* The stats of a running mount (MOUNTPOINT/.shardfs/stats): 0, or a
 * negative errno (-EPROTO: not a stats document). d is empty after an
 * error (fs_stats_doc_free accepts it either way). */
int fs_mnt_read_stats(const char *mnt, struct fs_stats_doc *d)
{
	char *text = fs_mnt_read_ctl(mnt, "stats");
	int err;

	memset(d, 0, sizeof(*d));
	if (!text)
		return -errno;
	err = fs_stats_parse(text, d);
	free(text);
	return err;
}
