/*
 * fs_ll_stop.c — stopping the FUSE session: the signal handlers and the
 * stop thread (fs_ll_i.h), for fs_ll_run.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fs_ll_i.h"

/* ---- stopping -----------------------------------------------------------------
 * SIGTERM, SIGINT, SIGHUP, and the end of the session (an unmount: the
 * kernel ends the connection and libfuse marks the session exited) stop the
 * daemon at once, whatever is in flight. fuse_session_loop_mt only returns
 * once every worker finished its request, and a request may wait for the
 * store; so the stop thread marks the session exited, cancels the core
 * (fs_cancel: running transfers end with -ECANCELED, waiting readers get
 * -ECANCELED, the core's threads are told to stop), and wakes the main thread out
 * of the loop's sem_wait with STOP_WAKE_SIG (the loop looks at the exit flag
 * only when a worker ends or a signal interrupts it; it is sent again until
 * the loop returned, as it may arrive just before sem_wait). The signal
 * handlers only write the signal number to a pipe. The notifier's stop
 * (fs_ll__notify_stop, below) and unmounting follow in fs_ll_run, then
 * fs_close (fs_mount.c) closes the core.
 */
#define STOP_WAKE_SIG SIGRTMIN
#define STOP_POLL_MS  250 /* how soon the end of the session is noticed */

static int stop_pipe_w = -1; /* for the handler: the write end of stop->pipe */

static const int stop_sigs[3] = {SIGTERM, SIGINT, SIGHUP};

static void stop_signal(int sig)
{
	int saved = errno;
	char c = (char)sig;

	if (write(stop_pipe_w, &c, 1) < 0) {
		/* the pipe is full: a stop is on its way already */
	}
	errno = saved;
}

static void stop_wake(int sig)
{
	(void)sig; /* only interrupts the main thread's sem_wait */
}

static const char *stop_sig_name(int sig)
{
	return sig == SIGTERM  ? "SIGTERM"
	       : sig == SIGINT ? "SIGINT"
	       : sig == SIGHUP ? "SIGHUP"
			       : "?";
}

static void *stop_main(void *arg)
{
	struct ll_stop *st = arg;
	struct fs *fs = st->fs;
	int sig = 0;

	for (;;) {
		struct pollfd p = {.fd = st->pipe[0], .events = POLLIN};
		char c;

		if (poll(&p, 1, STOP_POLL_MS) > 0 && read(st->pipe[0], &c, 1) == 1) {
			if (c == 0)
				return NULL; /* the loop ended and nothing asked to stop */
			sig = c;
			break;
		}
		if (fuse_session_exited(st->se))
			break;
	}
	if (sig)
		fs_log(FS_LOG_INFO, "%s: stopping; requests in flight are cancelled",
		       stop_sig_name(sig));
	else
		fs_log(FS_LOG_INFO, "the session ended: requests in flight are cancelled");
	/* exited first: a worker whose request the cancel ends takes no other
	 * (one left to the kernel is answered at the notifier's stop, below) */
	fuse_session_exit(st->se);
	fs_cancel(fs);
	disk_mutex_lock(&st->lock);
	while (!st->loop_done) {
		struct timespec ts;

		pthread_kill(st->main, STOP_WAKE_SIG);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		disk_cond_timedwait(&st->cond, &st->lock, &ts);
	}
	disk_mutex_unlock(&st->lock);
	return NULL;
}

/* Restore the signal handlers and free what stop_start set up (the stop
 * thread is not running). */
static void stop_release(struct ll_stop *st)
{
	for (int i = 0; i < 3; i++)
		sigaction(stop_sigs[i], &st->old[i], NULL);
	sigaction(STOP_WAKE_SIG, &st->old[3], NULL);
	stop_pipe_w = -1;
	close(st->pipe[0]);
	close(st->pipe[1]);
	pthread_cond_destroy(&st->cond);
	disk_mutex_destroy(&st->lock);
}

int fs_ll__stop_start(struct ll_stop *st, struct fs *fs, struct fuse_session *se)
{
	struct sigaction sa;
	int err;

	memset(st, 0, sizeof(*st));
	st->fs = fs;
	st->se = se;
	st->main = pthread_self();
	if (pipe2(st->pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	/* the reader blocks in poll, not in read */
	fcntl(st->pipe[0], F_SETFL, 0);
	disk_mutex_init(&st->lock, DISK_LOCK_FUSE_STOP);
	pthread_cond_init(&st->cond, NULL);
	stop_pipe_w = st->pipe[1];
	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	/* restart what the handler interrupts in the other threads */
	sa.sa_flags = SA_RESTART;
	sa.sa_handler = stop_signal;
	for (int i = 0; i < 3; i++)
		sigaction(stop_sigs[i], &sa, &st->old[i]);
	/* no SA_RESTART: the main thread's sem_wait must return */
	sa.sa_flags = 0;
	sa.sa_handler = stop_wake;
	sigaction(STOP_WAKE_SIG, &sa, &st->old[3]);
	signal(SIGPIPE, SIG_IGN);
	err = pthread_create(&st->thread, NULL, stop_main, st);
	if (err) {
		stop_release(st);
		return -err;
	}
	return 0;
}

void fs_ll__stop_finish(struct ll_stop *st)
{
	char zero = 0;

	disk_mutex_lock(&st->lock);
	st->loop_done = 1;
	pthread_cond_broadcast(&st->cond);
	disk_mutex_unlock(&st->lock);
	if (write(st->pipe[1], &zero, 1) < 0) {
		/* full of signal bytes: the thread is stopping anyway */
	}
	pthread_join(st->thread, NULL);
	stop_release(st);
}

/* ---- the notifier's stop ------------------------------------------------------
 * After the session loop no worker reads the device, yet the kernel may
 * still hold an invalidation the notifier sends (fs_notify.c) until a
 * request it queued is answered: invalidating an inode waits for the pages
 * a read locked, an entry for its directory's lock a lookup holds. Nothing
 * would answer them before the unmount, which comes after the notifier's
 * stop: the stop would wait its whole bound (FS_THREAD_JOIN_S) and fs_close
 * free nothing. So while fs_notify_stop joins the notifier a drain thread
 * reads the device and answers each request ENOTCONN (what the unmount's
 * end of the connection gives them); forgets, interrupts and notify replies
 * get no answer. */
/* a request with libfuse's largest max_write (256 pages) and its headers */
#define DRAIN_BUF ((size_t)sysconf(_SC_PAGESIZE) * 256 + 8192)

struct ll_drain {
	int fd;	     /* the session's device */
	int stop[2]; /* closed by fs_ll__notify_stop: the drain ends */
	unsigned answered;
};

static void drain_answer(struct ll_drain *d, const struct fuse_in_header *in)
{
	struct fuse_out_header out = {.len = sizeof(out), .error = -ENOTCONN, .unique = in->unique};

	switch (in->opcode) {
	case FUSE_FORGET:
	case FUSE_BATCH_FORGET:
	case FUSE_INTERRUPT:
	case FUSE_NOTIFY_REPLY:
		return; /* no answer wanted */
	default:
		break;
	}
	if (write(d->fd, &out, sizeof(out)) == (ssize_t)sizeof(out))
		d->answered++;
}

static void *drain_main(void *arg)
{
	struct ll_drain *d = arg;
	size_t cap = DRAIN_BUF;
	char *buf = malloc(cap);
	struct pollfd p[2] = {{.fd = d->stop[0], .events = POLLIN},
			      {.fd = d->fd, .events = POLLIN}};
	nfds_t n = buf ? 2 : 1;

	for (;;) {
		ssize_t got;

		if (poll(p, n, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents)
			break; /* the notifier stopped */
		if (n < 2 || !p[1].revents)
			continue;
		got = read(d->fd, buf, cap);
		if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == ENOENT))
			continue;
		if (got < (ssize_t)sizeof(struct fuse_in_header))
			n = 1; /* the connection ended: only the stop is left to wait for */
		else
			drain_answer(d, (const struct fuse_in_header *)buf);
	}
	free(buf);
	return NULL;
}

int fs_ll__notify_stop(struct fs *fs, int fd)
{
	struct ll_drain d = {.fd = fd, .stop = {-1, -1}};
	pthread_t t;
	int err;

	if (pipe2(d.stop, O_CLOEXEC) < 0)
		return fs_notify_stop(fs);
	if (pthread_create(&t, NULL, drain_main, &d) != 0) {
		close(d.stop[0]);
		close(d.stop[1]);
		return fs_notify_stop(fs);
	}
	err = fs_notify_stop(fs);
	close(d.stop[1]); /* POLLHUP for the drain */
	pthread_join(t, NULL);
	close(d.stop[0]);
	if (d.answered)
		fs_log(FS_LOG_INFO, "the notifier's stop answered %u %s the session left: ENOTCONN",
		       d.answered, fs_plural(d.answered, "request", "requests"));
	return err;
}
