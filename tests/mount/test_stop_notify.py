#!/usr/bin/env python3
"""A SIGTERM while the notifier's invalidation waits for a request no worker will answer
(fs_ll_stop.c, fs_ll__notify_stop; fs_notify.c, fs_notify_cancel). A mount of a fault:// store
(hold_at) of one shard of two members, --threads 2:

  reader A reads member 0 past the hold: its pages stay locked, its worker waits for the unit
  the store holds; 'shardfs refresh' after the shard changed: its worker waits for the
  notifier (fs_notify_drain), whose invalidation of member 0 waits for A's pages (the thread
  is seen in state D); reader B reads member 1: no worker is free, so its request waits in the
  kernel with its pages locked (B seen in state D). Then SIGTERM to the daemon (and the hold
  lifted): A's wait is cancelled, the notifier goes on to member 1 and waits for B's pages.

Checked: the daemon exits within 25 s of the signal (a prompt exit takes well under a second;
the refresh's drain would wait 30 s; the poll's own bound, 60 s, is against a hang), its log
has no line that the notifier's (or any core) thread did not end, and says the stop answered B's request;
B's read fails (ENOTCONN, or ECONNABORTED when the kernel tried the read again after the
answer and the unmount's end of the connection answered it). Before the drain: the stop waits the notifier's whole bound
(FS_THREAD_JOIN_S, 10 s) twice (the adapter's stop, then fs_close's), logs "notifier: its
thread did not end within 10 s of the stop" and "a thread of the core did not stop". Exit: 0
pass, 1 fail, 77 skip (no usable /dev/fuse).

libfuse may start a spare worker beyond --threads now and then: it answers B (ESTALE) before
the signal and the scenario is not reached; the test then tries again on a mount of its own
(at most 5 tries; 2 of about 40 runs needed a second). Likewise when the stop empties the
notifier's queue before the notifier, freed from A's pages by the cancel, takes member 1 (no
line of the stop's answers, B ended by the unmount): a race the scheduler decides
after the signal, lost now and then on a busy machine (once in a run of the suite two tests at
a time).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

MIB = 1 << 20
HOLD_AT = 8 * MIB + MIB // 2  # inside member 0, in a chunk of its own (--chunk-size 1M)


def state(pid, tid):
    """The thread's state letter (R, S, D, ...), or None once it is gone."""
    try:
        with open('/proc/%d/task/%d/stat' % (pid, tid)) as f:
            return f.read().rsplit(')', 1)[1].split()[0]
    except OSError:
        return None


def notifier_tid(pid):
    for t in os.listdir('/proc/%d/task' % pid):
        try:
            with open('/proc/%d/task/%s/comm' % (pid, t)) as f:
                if f.read().strip() == 'shardfs-notify':
                    return int(t)
        except OSError:
            pass
    return None


class Reader(threading.Thread):
    def __init__(self, fd, off):
        super().__init__(daemon=True)
        self.fd, self.off, self.tid, self.result = fd, off, None, None
        self.started_ev = threading.Event()

    def run(self):
        self.tid = threading.get_native_id()
        self.started_ev.set()
        try:
            self.result = os.pread(self.fd, 4096, self.off)
        except OSError as e:
            self.result = e.errno


def attempt(env, k):
    """One try of the scenario on a mount of its own: what it saw (a dict)."""
    src = env.path('src-%d' % k)
    os.makedirs(src)
    m0 = bytes(env.rng.getrandbits(8) for _ in range(4096)) * (16 * MIB // 4096)
    m1 = bytes(env.rng.getrandbits(8) for _ in range(4096)) * (2 * MIB // 4096)
    shard = os.path.join(src, 's0.tar')
    ml.write_file(shard, ml.tar_bytes([('m0.bin', m0), ('m1.bin', m1)]))
    hold = src + '.hold'
    cache = env.path('cache-%d' % k)
    m = ml.Mount(env, 'fault://' + src + '?hold_at=%d&log=1' % HOLD_AT, cache_dir=cache,
                 extra=['--threads', '2', '--warm', 'off', '--chunk-size', '1M',
                        '--readahead', '1M'])
    m.mount()
    pid = m.stats()['pid']
    fa = os.open(os.path.join(m.mnt, 's0', 'm0.bin'), os.O_RDONLY)
    fb = os.open(os.path.join(m.mnt, 's0', 'm1.bin'), os.O_RDONLY)
    seen = {'notifier': notifier_tid(pid)}
    if seen['notifier'] is None:
        m.umount()
        return seen
    ntid = seen['notifier']
    ml.write_file(hold, b'')
    a = Reader(fa, HOLD_AT + 4096)
    a.start()
    ml.poll(lambda: os.path.exists(src + '.log') and
            any(ln.startswith('hold ') for ln in open(src + '.log').read().splitlines()),
            what='the store holds A\'s fill')
    # the shard changes: the refresh marks it stale and queues its members' invalidations
    with open(shard, 'ab') as f:
        f.write(b'\0' * 1024)
    refresh = subprocess.Popen([env.shardfs, 'refresh', m.mnt], env=env.env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ml.poll(lambda: state(pid, ntid) == 'D', what='the notifier held by A\'s pages')
    b = Reader(fb, 0)
    b.start()
    b.started_ev.wait()
    ml.poll(lambda: state(os.getpid(), b.tid) == 'D', what='B\'s read waiting in the kernel')
    # no worker is free: A's waits for the store, the refresh's for the notifier
    seen['before'] = (refresh.poll(), state(pid, ntid))
    t0 = time.monotonic()
    ml.kill_daemon(env, pid, signal.SIGTERM)
    os.unlink(hold)
    ml.poll(lambda: not ml.pid_alive(pid), timeout=60, what='the daemon\'s exit')
    seen['took'] = time.monotonic() - t0
    log('the daemon exited %.2f s after SIGTERM' % seen['took'])
    a.join(60)
    b.join(60)
    refresh.wait(60)
    seen['b'] = b.result
    os.close(fa)
    os.close(fb)
    m.umount(quiet=True)
    text = ml.logs_under(cache)
    seen['bad'] = [ln for ln in text.splitlines()
                   if 'did not end within' in ln or 'did not stop' in ln]
    seen['said'] = [ln for ln in text.splitlines() if 'the notifier\'s stop answered' in ln]
    log('the stop said: %r' % seen['said'])
    return seen


def run(env, ck):
    for k in range(5):
        seen = attempt(env, k)
        # ESTALE: a spare worker libfuse started answered B before the signal (the changed
        # shard's member); the scenario was not reached: again, on a mount of its own
        if seen.get('b') == errno.ESTALE:
            log('attempt %d: B was answered before the stop (ESTALE): again' % k)
            continue
        # no answer by the stop (B ended by the unmount): the stop emptied the notifier's
        # queue before the notifier, freed from A's pages, took member 1's invalidation (a
        # race the scheduler decides after the signal: a busy machine loses it now and
        # then); the notifier never waited for B: again, on a mount of its own
        if seen.get('notifier') is not None and not seen['said']:
            log('attempt %d: the stop emptied the queue before the notifier took B\'s '
                'member: again' % k)
            continue
        break
    ck.ok(seen['notifier'] is not None, 'the daemon has a thread shardfs-notify')
    if seen['notifier'] is None:
        return
    ck.eq('before the signal: the refresh waits, the notifier is held', seen['before'],
          (None, 'D'))
    # a prompt exit takes well under a second; without the answers or the cancel the exit
    # waits a whole bound: the notifier's 10 s twice (those log lines, checked below), or
    # the refresh's drain, 30 s (no line: only the time tells it); under 25 s leaves a busy
    # CI machine's ASan daemon room and still tells a 30 s wait apart
    ck.ok(seen['took'] < 25,
          'the daemon exited %.2f s after SIGTERM, want under 25 s' % seen['took'])
    ck.ok(seen['b'] in (errno.ENOTCONN, errno.ECONNABORTED),
          'B\'s read failed with ENOTCONN (the stop\'s answer) or ECONNABORTED (the end of the '
          'connection, for the read the kernel tried again): %r' % (seen['b'],))
    ck.eq('log lines of threads left running at the stop', seen['bad'], [])
    ck.ok(len(seen['said']) == 1,
          'one line that the stop answered the requests left: %r' % seen['said'])


if __name__ == '__main__':
    ml.main_wrapper(run, sys.argv[1], 'stop-notify', deadline=180)
