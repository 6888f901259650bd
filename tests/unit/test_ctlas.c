/*
 * test_ctlas.c — a thread of a root daemon switched to a sender's rights
 * (fs/core/fs_ctl_open.c, fs_ctl_as: setfsuid, setfsgid, no supplementary
 * group) changes nothing another thread may do meanwhile (ROUNDS rounds).
 *
 * The process (root) takes two supplementary groups. Each round, thread A
 * runs fs_ctl_as as nobody (65534:65534); inside it, A sees its own ids
 * and no group and cannot open the cache file (root's, 0600, in root's
 * 0700 directory), then hands over to thread B (a FUSE thread serving
 * meanwhile) and waits for it. B, while A is switched: reads the cache
 * file's bytes, creates a new cache file (owned by root: created with B's
 * fsuid), and sees fsuid 0, fsgid 0 and both groups. After B is done, A
 * still cannot open the file; after fs_ctl_as, A has root's ids and both
 * groups back and opens it. The handovers are pipes, each wait bounded
 * (WAIT_MS, then the test fails). Needs root (else skipped: 77); run
 * under TSan too (the unit suite). A switch of the whole process (the C
 * library's setgroups, which every thread takes) fails B's group checks.
 * Then a child as nobody stands for a daemon not run as root (not_root).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs_ctl.h"
#include "fs_plan.h"
#include "check.h"

#define ROUNDS	50
#define WAIT_MS 30000
#define NOBODY	65534
#define BYTES	"cache bytes\n"

static char dir[64], cache[128];
static int to_b[2], to_a[2];
static const gid_t groups[2] = {4242, 4343};

/* one byte from fd within WAIT_MS: 0, or -1 (the other thread is stuck) */
static int wait_byte(int fd)
{
	struct timespec t0, t;
	char c;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd p = {fd, POLLIN, 0};
		long ms;
		int r;

		clock_gettime(CLOCK_MONOTONIC, &t);
		ms = WAIT_MS - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
		if (ms <= 0)
			return -1;
		r = poll(&p, 1, (int)ms);
		if (r < 0 && errno == EINTR)
			continue; /* a signal (the C library's id broadcast): wait on */
		if (r != 1 || read(fd, &c, 1) != 1)
			return -1;
		return 0;
	}
}

/* this thread's groups are exactly want[0..n) */
static int groups_are(const gid_t *want, int n)
{
	gid_t g[16];
	int k = getgroups(16, g);

	if (k != n)
		return 0;
	for (int i = 0; i < n; i++)
		if (g[i] != want[i])
			return 0;
	return 1;
}

static void *thread_b(void *arg)
{
	(void)arg;
	for (int round = 0; round < ROUNDS; round++) {
		char buf[32] = "", path[160];
		struct stat st;
		int fd;

		if (wait_byte(to_b[0]) < 0) {
			CHECK(0, "round %d: A never handed over", round);
			return NULL;
		}
		/* A is switched to nobody now, and waits */
		CHECK((uid_t)syscall(SYS_setfsuid, -1) == 0, "round %d: B's fsuid", round);
		CHECK((gid_t)syscall(SYS_setfsgid, -1) == 0, "round %d: B's fsgid", round);
		CHECK(groups_are(groups, 2), "round %d: B's groups", round);
		fd = open(cache, O_RDONLY | O_CLOEXEC);
		CHECK(fd >= 0, "round %d: B opens the cache file: %s", round, strerror(errno));
		if (fd >= 0) {
			CHECK(read(fd, buf, sizeof(buf)) == (ssize_t)strlen(BYTES) &&
				  strcmp(buf, BYTES) == 0,
			      "round %d: B reads '%s'", round, buf);
			close(fd);
		}
		snprintf(path, sizeof(path), "%s/new%d", dir, round);
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		CHECK(fd >= 0, "round %d: B creates a cache file: %s", round, strerror(errno));
		if (fd >= 0) {
			CHECK(fstat(fd, &st) == 0 && st.st_uid == 0 && st.st_gid == 0,
			      "round %d: B's new file is %u:%u, not root's", round,
			      (unsigned)st.st_uid, (unsigned)st.st_gid);
			close(fd);
			unlink(path);
		}
		if (write(to_a[1], "b", 1) != 1)
			FAIL("write to A: %s", strerror(errno));
	}
	return NULL;
}

static int switched(void *arg)
{
	int round = *(int *)arg, fd;

	CHECK((uid_t)syscall(SYS_setfsuid, -1) == NOBODY, "round %d: A's fsuid", round);
	CHECK((gid_t)syscall(SYS_setfsgid, -1) == NOBODY, "round %d: A's fsgid", round);
	CHECK(groups_are(NULL, 0), "round %d: A keeps a group", round);
	fd = open(cache, O_RDONLY | O_CLOEXEC);
	CHECK(fd < 0 && errno == EACCES, "round %d: A as nobody opens the cache file", round);
	if (fd >= 0)
		close(fd);
	if (write(to_b[1], "a", 1) != 1)
		FAIL("write to B: %s", strerror(errno));
	if (wait_byte(to_a[0]) < 0)
		return -ETIMEDOUT;
	fd = open(cache, O_RDONLY | O_CLOEXEC);
	CHECK(fd < 0 && errno == EACCES, "round %d: A as nobody, after B: opens it", round);
	if (fd >= 0)
		close(fd);
	return 7;
}

static int called(void *arg)
{
	(*(int *)arg)++;
	return 0;
}

/* A daemon not run as root (a child as nobody): fs_ctl_as runs nothing
 * for another user (-EPERM) and runs fn for its own; the plan file's
 * mount check for another user answers EACCES where its own resolution
 * finds the mount, 1 for its own user. The child's checks count in its
 * exit status: the number that failed. */
static void not_root(void)
{
	char top[64] = "/tmp/shardfs-ctlas-nr-XXXXXX", mp[96], link[96];
	int status, fails;
	pid_t pid;

	if (!mkdtemp(top) || chmod(top, 0755) < 0)
		FAIL("mkdtemp: %s", strerror(errno));
	snprintf(mp, sizeof(mp), "%s/mnt", top);
	snprintf(link, sizeof(link), "%s/link", top);
	if (mkdir(mp, 0755) < 0 || symlink(mp, link) < 0)
		FAIL("tree: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		FAIL("fork: %s", strerror(errno));
	if (pid == 0) {
		int n = 0, r;

		if (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
		    setresuid(NOBODY, NOBODY, NOBODY) < 0)
			_exit(100);
		r = fs_ctl_as(4242, 4242, called, &n);
		CHECK(r == -EPERM && n == 0, "not root, another user: %d, fn run %d times", r, n);
		r = fs_ctl_as(NOBODY, NOBODY, called, &n);
		CHECK(r == 0 && n == 1, "not root, its own user: %d, fn run %d times", r, n);
		r = fs_plan_path_inside_as(mp, link, 4242, 4242);
		CHECK(r == -EACCES, "not root, another user, a link into the mount: %d", r);
		r = fs_plan_path_inside_as(mp, link, NOBODY, NOBODY);
		CHECK(r == 1, "not root, its own user, a link into the mount: %d", r);
		_exit(check_failures());
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		FAIL("the child as nobody");
	fails = WEXITSTATUS(status);
	CHECK(fails == 0, "the child as nobody: %d failed (100: could not become nobody)", fails);
	unlink(link);
	rmdir(mp);
	rmdir(top);
}

int main(void)
{
	pthread_t b;
	int fd;

	if (geteuid() != 0) {
		printf("ctlas: skipped (needs root to switch ids)\n");
		return 77;
	}
	if (setgroups(2, groups) < 0)
		FAIL("setgroups: %s", strerror(errno));
	snprintf(dir, sizeof(dir), "/tmp/shardfs-ctlas-XXXXXX");
	if (!mkdtemp(dir) || chmod(dir, 0700) < 0)
		FAIL("mkdtemp: %s", strerror(errno));
	snprintf(cache, sizeof(cache), "%s/cache", dir);
	fd = open(cache, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, BYTES, strlen(BYTES)) != (ssize_t)strlen(BYTES))
		FAIL("cache file: %s", strerror(errno));
	close(fd);
	if (pipe2(to_b, O_CLOEXEC) < 0 || pipe2(to_a, O_CLOEXEC) < 0)
		FAIL("pipe: %s", strerror(errno));
	if (pthread_create(&b, NULL, thread_b, NULL) != 0)
		FAIL("pthread_create");
	for (int round = 0; round < ROUNDS; round++) {
		int r = fs_ctl_as(NOBODY, NOBODY, switched, &round);

		CHECK(r == 7, "round %d: fs_ctl_as answered %d, not the function's 7", round, r);
		if (r == -ETIMEDOUT)
			break;
		CHECK((uid_t)syscall(SYS_setfsuid, -1) == 0, "round %d: A's fsuid back", round);
		CHECK((gid_t)syscall(SYS_setfsgid, -1) == 0, "round %d: A's fsgid back", round);
		CHECK(groups_are(groups, 2), "round %d: A's groups back", round);
		fd = open(cache, O_RDONLY | O_CLOEXEC);
		CHECK(fd >= 0, "round %d: A opens the cache file again", round);
		if (fd >= 0)
			close(fd);
	}
	pthread_join(b, NULL);
	not_root();
	unlink(cache);
	rmdir(dir);
	return check_summary("ctlas");
}
