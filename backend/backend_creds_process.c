/*
 * backend_creds_process.c — the credential_process source: a profile's
 * helper program, run with /bin/sh -c in a process group of its own, its
 * answer (JSON, Version 1) read from a pipe within a bound
 * (backend__creds_fetch_process), and the whole group killed on timeout,
 * at backend__credsrc_close or from a signal handler (backend_kill_helpers).
 *
 * Contract: a fetch blocks the calling thread (a mount's first fetch, or
 * the source's refresh thread) for at most the source's timeout_ms; never
 * the I/O loop. What the helper prints lives in secret memory.
 *
 * Non-goals: input to a helper (its stdin is /dev/null).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend_creds_i.h"
#include "disk.h"

/* ---- helper processes ---------------------------------------------------------
 * Every credential_process runs in a process group of its own, listed here
 * while it runs, so that backend_kill_helpers (from a signal handler) and
 * a timeout can kill it with everything it started. A slot is cleared
 * before its process is reaped, so no slot ever names a reused pid. */

static _Atomic pid_t helpers[CREDS_HELPERS_MAX];

static void helper_add(pid_t pg)
{
	for (int i = 0; i < CREDS_HELPERS_MAX; i++) {
		pid_t zero = 0;

		if (atomic_compare_exchange_strong(&helpers[i], &zero, pg))
			return;
	}
	/* more helpers than slots at once: cannot happen (one per source) */
}

static void helper_del(pid_t pg)
{
	for (int i = 0; i < CREDS_HELPERS_MAX; i++) {
		pid_t cur = pg;

		if (atomic_compare_exchange_strong(&helpers[i], &cur, 0))
			return;
	}
}

void backend_kill_helpers(void)
{
	int saved = errno;

	for (int i = 0; i < CREDS_HELPERS_MAX; i++) {
		pid_t pg = atomic_load(&helpers[i]);

		if (pg > 0)
			kill(-pg, SIGKILL);
	}
	errno = saved;
}

/* Milliseconds since t0 (CLOCK_MONOTONIC). */
static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long)((t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000);
}

/* The program of a credential_process command line (its first word, at
 * most 80 bytes), for messages: the rest may carry arguments best not
 * logged. */
static void process_program(const char *cmd, char *buf, size_t cap)
{
	size_t n;

	cmd += strspn(cmd, " \t");
	n = strcspn(cmd, " \t");
	if (n > 80)
		n = 80;
	snprintf(buf, cap, "%.*s", (int)n, cmd);
	for (char *p = buf; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
}

/* Wait (bounded: until deadline_ms after t0) for the helper pid to exit;
 * 1 when it did (not reaped yet), 0 when it still runs. */
static int process_exited(pid_t pid, const struct timespec *t0, long deadline_ms)
{
	for (;;) {
		siginfo_t si;

		memset(&si, 0, sizeof(si));
		if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0) {
			if (errno == EINTR)
				continue;
			return 1; /* not ours any more: nothing to wait for */
		}
		if (si.si_pid == pid)
			return 1;
		if (ms_since(t0) >= deadline_ms)
			return 0;
		poll(NULL, 0, 10);
	}
}

/* In the forked child: a process group of its own, SIGKILL when the
 * parent ends, stdin /dev/null, stdout the pipe's end wfd, then
 * /bin/sh -c cmd. Only async-signal-safe calls until exec. */
_Noreturn static void process_child(const char *cmd, int wfd, pid_t parent)
{
	int null = open("/dev/null", O_RDONLY);
	sigset_t none;

	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	/* what the daemon ignores or blocks is not the program's */
	signal(SIGPIPE, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (null >= 0)
		dup2(null, STDIN_FILENO);
	dup2(wfd, STDOUT_FILENO);
	closefrom(3); /* the FUSE device, sockets, the cache: not the program's */
	execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
	_exit(127);
}

/* Read the helper's answer from the non-blocking pipe fd into buf (at
 * most CREDS_HTTP_MAX bytes, *len of them) until its end of file, within
 * timeout_ms of t0: 0 at end of file, -ETIMEDOUT past the bound,
 * -EMSGSIZE when it printed too much, or -errno. */
static int process_read(int fd, char *buf, size_t *len, const struct timespec *t0, long timeout_ms)
{
	for (;;) {
		struct pollfd p = {fd, POLLIN, 0};
		long left = timeout_ms - ms_since(t0);
		ssize_t n;
		int r;

		if (left <= 0)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)left);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r <= 0)
			continue; /* EINTR, or the bound: looked at above */
		n = disk_read_some(fd, buf + *len, CREDS_HTTP_MAX - *len);
		if (n == -EAGAIN)
			continue;
		if (n <= 0)
			return (int)n; /* 0: the helper closed its end */
		*len += (size_t)n;
		if (*len == CREDS_HTTP_MAX)
			return -EMSGSIZE;
	}
}

/* What a helper that ran gave: err from reading its answer, its wait
 * status, and the answer buf (len bytes, room for a NUL after). Fills out
 * and *exp, or says why (naming the program prog) and returns < 0. */
static int process_answer(const struct backend_credsrc *s, const char *prog, int err, int status,
			  char *buf, size_t len, struct backend_creds *out, int64_t *exp, char *why,
			  size_t whycap)
{
	char *ver = NULL;

	if (err == -ETIMEDOUT) {
		backend__creds_why(
		    why, whycap,
		    "%s gave no credentials within %.3g s (--credential-timeout): killed it "
		    "and its process group",
		    prog, (double)s->timeout_ms / 1000);
		return err;
	}
	if (err == -EMSGSIZE) {
		backend__creds_why(why, whycap, "%s printed more than %u bytes: killed it", prog,
				   CREDS_HTTP_MAX);
		return err;
	}
	if (err < 0) {
		backend__creds_why(why, whycap, "%s: %s", prog, strerror(-err));
		return err;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		backend__creds_why(why, whycap, "%s exited with status %d", prog,
				   WIFEXITED(status) ? WEXITSTATUS(status)
						     : 128 + WTERMSIG(status));
		return -EIO;
	}
	buf[len] = '\0';
	if (backend__creds_json_field(buf, len, "Version", &ver) == 0 && strcmp(ver, "1") != 0) {
		backend__creds_why(why, whycap, "%s: Version %.16s is not 1", prog,
				   backend__creds_header_safe(ver) ? ver : "?");
		err = -EBADMSG;
	} else {
		err = backend__creds_from_json(buf, len, "SessionToken", out, exp, why, whycap);
		if (err < 0) {
			char tmp[256];

			snprintf(tmp, sizeof(tmp), "%s", why);
			backend__creds_why(why, whycap, "%s: %s", prog, tmp);
		}
	}
	backend__creds_secret_free(ver);
	return err;
}

/* Run s->process with /bin/sh -c and take the credentials it prints (JSON,
 * Version 1). It runs in a process group of its own (listed for
 * backend_kill_helpers, and in s->running for backend__credsrc_close),
 * stdin /dev/null, stdout a pipe, stderr ours (the terminal of 'shardfs
 * mount' until the mount is ready, then the log); SIGKILL when the thread
 * that started it ends. It must print at most CREDS_HTTP_MAX bytes and
 * exit with status 0 within s->timeout_ms of its start; otherwise its whole
 * group is killed: -ETIMEDOUT (or -EMSGSIZE) with why naming the program
 * and the bound. Blocks the calling thread for at most that bound. */
int backend__creds_fetch_process(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp,
				 char *why, size_t whycap)
{
	int pfd[2], status = 0, err = 0;
	char *buf, prog[96];
	size_t len = 0;
	pid_t pid, self = getpid();
	struct timespec t0;

	memset(out, 0, sizeof(*out));
	process_program(s->process, prog, sizeof(prog));
	buf = backend__creds_secret_alloc(CREDS_HTTP_MAX);
	if (!buf)
		return -ENOMEM;
	if (pipe2(pfd, O_CLOEXEC) < 0) {
		err = -errno;
		backend__creds_secret_free(buf);
		return err;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid = fork();
	if (pid < 0) {
		err = -errno;
		close(pfd[0]);
		close(pfd[1]);
		backend__creds_secret_free(buf);
		backend__creds_why(why, whycap, "cannot run %s: %s", prog, strerror(-err));
		return err;
	}
	if (pid == 0)
		process_child(s->process, pfd[1], self);
	setpgid(pid, pid); /* as the child does: whichever runs first */
	helper_add(pid);
	disk_mutex_lock(&s->lock);
	s->running = pid;
	disk_mutex_unlock(&s->lock);
	close(pfd[1]);
	fcntl(pfd[0], F_SETFL, O_NONBLOCK);
	err = process_read(pfd[0], buf, &len, &t0, s->timeout_ms);
	close(pfd[0]);
	/* after its end of file the program must exit within the bound too */
	if (err == 0 && !process_exited(pid, &t0, s->timeout_ms))
		err = -ETIMEDOUT;
	if (err < 0)
		kill(-pid, SIGKILL); /* the whole group: what it started too */
	disk_mutex_lock(&s->lock);
	s->running = 0;
	disk_mutex_unlock(&s->lock);
	helper_del(pid);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	backend__creds_regs_clear();
	err = process_answer(s, prog, err, status, buf, len, out, exp, why, whycap);
	backend__creds_secret_free(buf);
	return err;
}
