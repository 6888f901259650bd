#!/usr/bin/python3
"""shardfs mount tests: the waits on the control file ('prefetch-wait', 'umount-notice') and the
commands that use them ('shardfs prefetch', 'shardfs umount'). Every prefetch here is held: the
mount's source is nginx behind a proxy that holds every ranged GET until the test releases it,
so a prefetch run is in flight for as long as a check needs, with no sleep.

usage: test_ctl_wait.py SHARDFS GROUP
GROUP:
  umount-prefetch  'shardfs umount' while 'shardfs prefetch' follows its run: with a reader's
                   working directory in the mount too, exit 1 naming both (the prefetch as
                   'shardfs prefetch', with what Ctrl-C does) and no notice sent; with the
                   prefetch alone, exit 0 (the mount gone, the daemon exited 0) and the prefetch
                   ends with exit 1 saying the mount is being unmounted (main before this test
                   refused it as busy); a control file held open by a process that never leaves:
                   one notice, exit 1 after the bound (FS_UMOUNT_LEAVE_MS) naming it; a
                   control-file user /proc shows gone while the kernel holds the mount
                   (unseen_user): it leaves after 6 busy tries since the notice, exit 0; it
                   never leaves, exit 1 at the bound saying so (main before: exit 1 after 5
                   tries, some 10 ms apart); again with a reader of
                   the counters reading .shardfs/stats again and again meanwhile: a
                   control-file user, not another holder (before: the umount gave up at its
                   first look in 2 of 2 runs; 8 of the 33 checks fail on main)
  wait-eintr       'prefetch-wait RUN 1000' from a process, signalled (SIGUSR1, a handler) while
                   the mount holds its wait: the ioctl ends with EINTR and the mount counts one
                   interrupted wait (prefetch_wait_interrupts 1); a 'umount-notice' ends a held
                   wait with ESHUTDOWN, 'umount-notice 0' withdraws it; bad notices are EINVAL
  client-waits     'shardfs prefetch' under strace: a wait that fails EINTR (a stop and continue,
                   injected) is sent again, not turned into polling; a mount without
                   'prefetch-wait' (EINVAL injected from the first wait on) is polled every
                   20 ms: exactly 3 control ioctls, no wait reaches the mount, the summary after
                   the release; SIGINT while it follows: exit 130 and one line saying it stopped
                   following and that the mount goes on (the run then completes)
  second-prefetch  a second 'shardfs prefetch' while one runs, of overlapping shards, every
                   GET held until the test releases it: the first says it waits for its own
                   PATHs (the mount's counters are the second's now) and still runs while held;
                   released, both exit 0, the first saying every byte it asked for is cached,
                   the second its own summary, each shard fetched once (bytes_fetched and
                   prefetch_cached_bytes exact, the members read back from the cache exact);
                   again with the first's own shard answered 400: the first exits 1 naming it
                   (not cached), the second exits 0 (main before this test: the first exited 0
                   as soon as the second began, its bytes cached or not)
"""
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import hostile  # noqa: E402
from shardfs_test import web  # noqa: E402

log = ml.log
SIZE = 3 << 20  # the one member's bytes


class Held:
    """A mount of nginx's tree behind a HoldProxy that holds every ranged GET: src/s0.tar (one
    member x.bin of SIZE bytes); release() lets the fills through."""

    def __init__(self, env, tag):
        if not shutil.which('nginx'):
            raise ml.Skip('nginx is not installed (sh scripts/install-deps.sh --test)')
        self.env = env
        self.src = env.path('src-' + tag)
        os.makedirs(self.src)
        self.data = os.urandom(SIZE)
        ml.write_file(os.path.join(self.src, 's0.tar'), ml.tar_bytes([('x.bin', self.data)]))
        self.size = os.path.getsize(os.path.join(self.src, 's0.tar'))
        self.ng = web.Nginx(env.path('nginx-' + tag), self.src).start()
        self.px = web.HoldProxy(self.ng.port, 0)
        self.m = ml.Mount(env, self.px.url('json/'), cache_dir=env.path('cache-' + tag),
                          extra=['--warm', 'off', '--chunk-size', '1M'])

    def __enter__(self):
        self.m.mount()
        return self

    def __exit__(self, *exc):
        self.px.release.set()
        self.m.umount(quiet=True)
        self.px.close()
        self.ng.stop()
        return False


def spawn_prefetch(env, mnt, tag, prefix=()):
    """'shardfs prefetch MNT' in the background, its output to files: (Popen, out, err)."""
    out = open(env.path('pf-%s.out' % tag), 'w+b')
    err = open(env.path('pf-%s.err' % tag), 'w+b')
    p = subprocess.Popen(list(prefix) + [env.shardfs, 'prefetch', mnt], stdin=subprocess.DEVNULL,
                         stdout=out, stderr=err, env=env.env)
    return p, out, err


ended = hostile.ended  # wait for a spawned command: (exit status, stdout, stderr)


def waits_past(m, n):
    """Poll until the mount has answered more than n prefetch-waits (begun: counted at their
    start); the count."""
    return ml.poll(lambda: (lambda v: v if v > n else None)(m.stats()['prefetch_waits']),
                   what='a prefetch-wait past %d on %s' % (n, m.mnt))


def group_umount_prefetch(env, ck):
    with Held(env, 'a') as h:
        m = h.m
        pid = m.stats()['pid']
        p, out, err = spawn_prefetch(env, m.mnt, 'a')
        holder = None
        try:
            waits_past(m, 0)  # it follows its run (and holds the control file open)
            # a reader's working directory too: busy, no notice, the prefetch left alone
            holder = subprocess.Popen(['sleep', '600'], cwd=m.mnt, stdin=subprocess.DEVNULL)
            r = env.run([env.shardfs, 'umount', m.mnt], timeout=ml.UMOUNT_TIMEOUT, files=True)
            e = r.stderr.decode(errors='replace')
            log('reader + prefetch: umount rc=%r %s' % (r.returncode, e))
            ck.eq('reader + prefetch: umount exit', r.returncode, 1)
            ck.ok('pid %d (sleep): its working directory' % holder.pid in e,
                  'reader + prefetch: the reader not named: %r' % e)
            ck.ok('pid %d (shardfs prefetch): a control file open (.shardfs/): it follows a '
                  'prefetch (Ctrl-C ends it; the mount\'s prefetch goes on)' % p.pid in e,
                  'reader + prefetch: the prefetch not named as one: %r' % e)
            ck.ok(ml.is_mounted(m.mnt), 'reader + prefetch: unmounted')
            ck.eq('reader + prefetch: notices sent', m.stats().get('umount_notices'), 0)
            ck.eq('reader + prefetch: the prefetch still follows', p.poll(), None)
            holder.kill()
            holder.wait()
            holder = None
            # the prefetch alone: it is asked to leave, and the mount goes
            r = env.run([env.shardfs, 'umount', m.mnt], timeout=ml.UMOUNT_TIMEOUT, files=True)
            log('prefetch alone: umount rc=%r %s' % (r.returncode, r.stderr.decode()))
            ck.eq('prefetch alone: umount exit', r.returncode, 0)
            ck.ok(not ml.is_mounted(m.mnt), 'prefetch alone: %s still mounted' % m.mnt)
            rc, o, e = ended(p, out, err)
            ck.eq('prefetch alone: prefetch exit', rc, 1)
            ck.eq('prefetch alone: what prefetch says', e,
                  "shardfs: prefetch: %s is being unmounted ('shardfs umount'): stopped "
                  "following the prefetch\n" % m.mnt)
            env.reap()
            ck.eq('prefetch alone: how the daemon ended', m.ends().get(pid),
                  'exited with status 0')
        finally:
            if holder:
                holder.kill()
                holder.wait()
            if p.poll() is None:
                p.kill()
                p.wait()
    # a control file held by a process that never leaves: one notice, then busy
    with Held(env, 'b') as h:
        m = h.m
        fd = os.open(os.path.join(m.mnt, '.shardfs', 'stats'), os.O_RDONLY)
        try:
            r = env.run([env.shardfs, 'umount', m.mnt], timeout=ml.UMOUNT_TIMEOUT, files=True)
            e = r.stderr.decode(errors='replace')
            log('stats held: umount rc=%r %s' % (r.returncode, e))
            ck.eq('stats held: umount exit', r.returncode, 1)
            ck.ok('pid %d (' % os.getpid() in e and 'a control file open (.shardfs/)' in e,
                  'stats held: the holder not named: %r' % e)
            ck.ok(ml.is_mounted(m.mnt), 'stats held: unmounted')
            ck.eq('stats held: notices sent', m.stats().get('umount_notices'), 1)
            # the notice was withdrawn: a wait is a wait again (run 1 is no run: over at once)
            ck.eq('stats held: a prefetch-wait after it', ml.control_errno(
                m.mnt, 'prefetch-wait 1 10'), None)
        finally:
            os.close(fd)
        r = env.run([env.shardfs, 'umount', m.mnt], timeout=ml.UMOUNT_TIMEOUT, files=True)
        ck.eq('stats closed: umount exit', r.returncode, 0)
    unseen_user(env, ck, 'c', True)
    unseen_user(env, ck, 'd', False)
    unseen_user(env, ck, 'e', False, churn=True)


def unseen_user(env, ck, tag, leaves, churn=False):
    """A control-file user that /proc shows gone while the kernel still holds the mount (as an
    exiting process's files close after its fd table went): .shardfs/stats open here (seen:
    the umount-notice goes out) and opened once more, that file passed over a unix socket and
    not received (held by the socket's queue, in no process's fds). fusermount3 runs through
    a wrapper that logs its exit status. The seen file closed, 'shardfs umount' finds no holder
    and fusermount says busy; leaves: after the 6th busy try since the notice (main gave up
    after 5: 6 in all with the one before the notice), the file received and closed, and the
    umount exits 0; else it exits 1 at the bound (FS_UMOUNT_LEAVE_MS) saying so, having tried
    more than 5 times since the notice, and the notice is withdrawn. churn: a reader of the
    counters beside it (a thread that reads .shardfs/stats again and again until the umount
    ends) is a control-file user too, never another holder: a file closed between two reads
    of its /proc link looked like an open file that is not a control file, and the umount gave
    up at once."""
    tries = env.path('fusermount-%s.log' % tag)
    wrap = env.path('wrap-%s' % tag)
    os.makedirs(wrap)
    ml.write_file(os.path.join(wrap, 'fusermount3'), (
        '#!/bin/sh\n%s "$@"\nrc=$?\necho $rc >>%s\nexit $rc\n'
        % (shutil.which('fusermount3'), tries)).encode())
    os.chmod(os.path.join(wrap, 'fusermount3'), 0o755)
    cmd_env = dict(env.env, PATH=wrap + os.pathsep + env.env.get('PATH', ''))

    def busy_tries():
        with open(tries, 'a+') as f:
            f.seek(0)
            return f.read().split()

    with Held(env, tag) as h:
        m = h.m
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        seen = os.open(os.path.join(m.mnt, '.shardfs', 'stats'), os.O_RDONLY)
        unseen = os.open(os.path.join(m.mnt, '.shardfs', 'stats'), os.O_RDONLY)
        socket.send_fds(a, [b'f'], [unseen])
        os.close(unseen)
        out = open(env.path('umount-%s.out' % tag), 'w+b')
        err = open(env.path('umount-%s.err' % tag), 'w+b')
        p = subprocess.Popen([env.shardfs, 'umount', m.mnt], stdin=subprocess.DEVNULL,
                             stdout=out, stderr=err, env=cmd_env)
        try:
            ml.poll(lambda: m.stats().get('umount_notices') == 1 or p.poll() is not None,
                    what='%s: the umount-notice sent' % tag)
            os.close(seen)
            seen = None
            if churn:
                def reader():
                    stats = os.path.join(m.mnt, '.shardfs', 'stats')
                    while p.poll() is None:
                        with open(stats, 'rb') as f:
                            f.read()
                th = threading.Thread(target=reader, daemon=True)
                th.start()
            if leaves:
                # the try before the notice, and 6 since
                ml.poll(lambda: len(busy_tries()) >= 7 or p.poll() is not None,
                        what='%s: 7 tries of fusermount3' % tag)
                n = len(busy_tries())
                _, fds, _, _ = socket.recv_fds(b, 1, 1)
                for fd in fds:
                    os.close(fd)
            rc, o, e = ended(p, out, err)
            if churn:
                th.join(60)
            t = busy_tries()
            log('%s: fusermount3 exit statuses %s' % (tag, ' '.join(t)))
            if leaves:
                ck.eq('%s: the user left after 6 busy tries since the notice: umount exit, '
                      'said' % tag, (rc, e), (0, ''))
                ck.eq('%s: fusermount3 busy 7 times first' % tag, t[:7], ['1'] * 7)
                ck.eq('%s: fusermount3 ran until it unmounted' % tag,
                      (len(t) > n, t[-1:]), (True, ['0']))
                ck.ok(not ml.is_mounted(m.mnt), '%s: %s still mounted' % (tag, m.mnt))
            else:
                ck.eq('%s: a user that never leaves: umount exit' % tag, rc, 1)
                ck.ok(e.startswith('shardfs: %s is still busy 5 s after its control-file users '
                                   'were asked to leave\nshardfs: %s is busy, not unmounted; '
                                   'held by:\n' % (m.mnt, m.mnt)),
                      '%s: what umount says: %r' % (tag, e))
                ck.ok(len(t) > 6 and set(t) == {'1'},
                      '%s: fusermount3 tried again while busy, up to the bound: %s' % (tag, t))
                ck.ok(ml.is_mounted(m.mnt), '%s: unmounted' % tag)
                ck.eq('%s: notices sent' % tag, m.stats().get('umount_notices'), 1)
                ck.eq('%s: the notice withdrawn: a prefetch-wait after it' % tag,
                      ml.control_errno(m.mnt, 'prefetch-wait 1 10'), None)
        finally:
            if seen is not None:
                os.close(seen)
            if p.poll() is None:
                p.kill()
                p.wait()
            a.close()
            b.close()


# The waiting process of wait-eintr: one 'prefetch-wait RUN 1000' per line "go" on stdin, through
# libc's ioctl (Python's would retry EINTR), its result printed: the number, or the errno's name;
# "+sig" when SIGUSR1 came during it.
WAITER = r"""
import ctypes, errno, os, signal, sys
mnt, run = sys.argv[1], int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
req = (1 << 30) | (8192 << 16) | (ord('S') << 8) | 1
fd = os.open(os.path.join(mnt, '.shardfs', 'control'), os.O_RDONLY)
print('ready', flush=True)
for line in sys.stdin:
    buf = ctypes.create_string_buffer(b'prefetch-wait %d 1000\n' % run, 8192)
    del got[:]
    r = libc.ioctl(fd, ctypes.c_ulong(req), buf)
    res = str(r) if r >= 0 else errno.errorcode.get(ctypes.get_errno(), '?')
    print(res + ('+sig' if got else ''), flush=True)
"""


def group_wait_eintr(env, ck):
    with Held(env, 'e') as h:
        m = h.m
        ml.control(m.mnt, 'prefetch-start\nprefetch s0.tar\n')
        run = m.stats()['prefetch_run']
        ck.eq('held: the run pends', m.stats()['prefetch_run_pending'], 1)
        w = subprocess.Popen([sys.executable, '-c', WAITER, m.mnt, str(run)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env.env)
        try:
            ck.eq('waiter ready', w.stdout.readline(), b'ready\n')
            results = []
            n = m.stats()['prefetch_waits']
            # lockstep: a wait, seen begun by the mount, then the signal; a signal that came
            # after the wait ended by its 1 s (a slow machine) is no interrupt: again
            for _ in range(20):
                w.stdin.write(b'go\n')
                w.stdin.flush()
                n = waits_past(m, n)
                w.send_signal(signal.SIGUSR1)
                res = w.stdout.readline().decode().strip()
                results.append(res)
                if res != '0+sig' and res != '0':
                    break
            log('waits: %r' % results)
            ck.eq('the interrupted wait: its result', results[-1], 'EINTR+sig')
            ck.eq('the waits before it', [x for x in results[:-1] if x not in ('0', '0+sig')],
                  [])
            ck.eq('prefetch_wait_interrupts', m.stats().get('prefetch_wait_interrupts'), 1)
            # a notice ends a held wait at once with ESHUTDOWN (the notice given after the
            # mount began the wait)
            w.stdin.write(b'go\n')
            w.stdin.flush()
            n = waits_past(m, n)
            ck.eq('umount-notice 60000', ml.control_errno(m.mnt, 'umount-notice 60000'), None)
            ck.eq('the wait under the notice', w.stdout.readline().decode().strip(),
                  'ESHUTDOWN')
            w.stdin.write(b'go\n')
            w.stdin.flush()
            ck.eq('a new wait under the notice', w.stdout.readline().decode().strip(),
                  'ESHUTDOWN')
            ck.eq('umount_notices', m.stats().get('umount_notices'), 1)
            ck.eq('umount-notice 0', ml.control_errno(m.mnt, 'umount-notice 0'), None)
            # withdrawn: the next wait is held by the mount again, and a signal ends it
            w.stdin.write(b'go\n')
            w.stdin.flush()
            n = waits_past(m, n)
            h.px.release.set()
            ck.eq('after the withdrawal: the wait ends at the run\'s end',
                  w.stdout.readline().decode().strip(), '1')
            for bad in ('umount-notice', 'umount-notice 60001', 'umount-notice -1',
                        'umount-notice 5 5', 'umount-notice x'):
                ck.eq('%r: errno' % bad, ml.control_errno(m.mnt, bad), errno.EINVAL)
            ck.eq('umount_notices after the bad ones', m.stats().get('umount_notices'), 1)
        finally:
            w.stdin.close()
            w.wait(timeout=ml.POLL_TIMEOUT)


def strace_ioctls(path):
    """Control ioctls in an strace -e trace=openat,ioctl log, and opens of .shardfs/stats."""
    if not os.path.exists(path):  # strace has not begun yet
        return [], 0
    with open(path) as f:
        lines = f.read().splitlines()
    ioctls = [ln for ln in lines if 'ioctl(' in ln and '0x53, 0x1, 0x2000' in ln]
    opens = sum(1 for ln in lines if 'openat(' in ln and '/.shardfs/stats"' in ln
                and '= -1' not in ln)
    return ioctls, opens


def group_client_waits(env, ck):
    strace = shutil.which('strace')
    if not strace:
        raise ml.Skip('strace is not installed (sh scripts/install-deps.sh --test)')
    # LeakSanitizer cannot run under ptrace: the traced client goes without it
    if env.env.get('ASAN_OPTIONS'):
        env.env['ASAN_OPTIONS'] += ':detect_leaks=0'
    # ioctl 1 is isatty's TCGETS, 2 prefetch-start, 3 the prefetch line, 4 the first wait
    for tag, inject in (('eintr', 'error=EINTR:when=4'), ('einval', 'error=EINVAL:when=4+')):
        with Held(env, tag) as h:
            m = h.m
            w0 = m.stats()['prefetch_waits']
            slog = env.path('strace-%s.log' % tag)
            p, out, err = spawn_prefetch(env, m.mnt, tag, prefix=[
                strace, '-f', '-qq', '-o', slog, '-e', 'trace=openat,ioctl',
                '-e', 'inject=ioctl:' + inject])
            try:
                if tag == 'eintr':
                    # the third ioctl (the first wait) failed EINTR: the next one reaches the
                    # mount (main before this test polled from then on)
                    got = ml.poll(lambda: m.stats()['prefetch_waits'] > w0)
                    ck.ok(got, 'eintr: no wait reached the mount after the EINTR')
                else:
                    # polling: the stats file read again and again while the fill is held
                    ml.poll(lambda: strace_ioctls(slog)[1] >= 6,
                            what='polls of the stats file')
                h.px.release.set()
                rc, o, e = ended(p, out, err)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            st = m.stats()
            ioctls, opens = strace_ioctls(slog)
            log('%s: %d control ioctls, %d stats opens, waits %d' % (
                tag, len(ioctls), opens, st['prefetch_waits'] - w0))
            injected = [i for i, ln in enumerate(ioctls) if 'INJECTED' in ln]
            ck.eq('%s: the control ioctls injected' % tag, injected,
                  [2])
            ck.eq('%s: exit' % tag, rc, 0)
            ck.eq('%s: stderr' % tag, e, '')
            ck.ok('prefetch: done: ' in o, '%s: no summary: %r' % (tag, o))
            ck.eq('%s: the run cached' % tag, st['prefetch_run_cached_bytes'], h.size)
            if tag == 'eintr':
                ck.ok(st['prefetch_waits'] - w0 >= 1, 'eintr: no wait reached the mount')
                # prefetch-start, the prefetch line, the injected wait, the waits
                ck.eq('eintr: control ioctls', len(ioctls), 3 + st['prefetch_waits'] - w0)
            else:
                ck.eq('einval: control ioctls', len(ioctls), 3)
                ck.eq('einval: waits that reached the mount', st['prefetch_waits'] - w0, 0)
    # SIGINT while it follows: it says so, exit 130; the mount goes on with the run
    with Held(env, 'int') as h:
        m = h.m
        p, out, err = spawn_prefetch(env, m.mnt, 'int')
        try:
            waits_past(m, 0)
            p.send_signal(signal.SIGINT)
            rc, o, e = ended(p, out, err)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        ck.eq('sigint: exit', rc, 130)
        ck.eq('sigint: what it says', e,
              "shardfs: prefetch: interrupted (SIGINT): stopped following (0 B of %s cached); "
              "the mount goes on with the prefetch ('shardfs stats %s' shows it)\n"
              % (human(h.size), m.mnt))
        h.px.release.set()
        st = ml.poll(lambda: (lambda s: s if s['prefetch_run_pending'] == 0 else None)(
            m.stats()), what='the run\'s end')
        ck.eq('sigint: the mount finished the run', st['prefetch_run_cached_bytes'], h.size)
        ck.eq('sigint: x.bin', ml.read_result(os.path.join(m.mnt, 's0', 'x.bin')),
              ('ok', h.data))


def spawn_prefetch_paths(env, mnt, tag, names):
    """'shardfs prefetch MNT/NAME...' in the background: (Popen, out, err)."""
    out = open(env.path('pf-%s.out' % tag), 'w+b')
    err = open(env.path('pf-%s.err' % tag), 'w+b')
    p = subprocess.Popen([env.shardfs, 'prefetch', mnt] + [os.path.join(mnt, n) for n in names],
                         stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env.env)
    return p, out, err


said = hostile.said  # whether a spawned command's output file holds text yet


def group_second_prefetch(env, ck):
    if not shutil.which('nginx'):
        raise ml.Skip('nginx is not installed (sh scripts/install-deps.sh --test)')
    src = env.path('src-second')
    os.makedirs(src)
    data, sizes = {}, {}
    for i in range(6):
        name = 's%d.tar' % i
        data[name] = os.urandom(200000 + 4096 * i)
        ml.write_file(os.path.join(src, name), ml.tar_bytes([('x.bin', data[name])]))
        sizes[name] = os.path.getsize(os.path.join(src, name))
    ng = web.Nginx(env.path('nginx-second'), src).start()
    px = web.HoldProxy(ng.port, 0)
    m = ml.Mount(env, px.url('json/'), cache_dir=env.path('cache-second'),
                 extra=['--warm', 'off', '--chunk-size', '1M'])
    procs = []
    try:
        m.mount()
        for rnd, (a_names, b_names, refused) in enumerate(
                ((['s0.tar', 's1.tar'], ['s1.tar', 's2.tar'], None),
                 (['s3.tar', 's4.tar'], ['s4.tar', 's5.tar'], 's3.tar'))):
            tag = 'round %d' % (rnd + 1)
            px.release.clear()
            if refused:
                px.set('400', match='/' + refused)
            fetched0 = m.stats()['bytes_fetched']
            a = spawn_prefetch_paths(env, m.mnt, 'second-a%d' % rnd, a_names)
            procs.append(a[0])
            ml.poll(lambda: said(a[1], ' asked, '), what='%s: the first prefetch\'s plan' % tag)
            b = spawn_prefetch_paths(env, m.mnt, 'second-b%d' % rnd, b_names)
            procs.append(b[0])
            ml.poll(lambda: said(a[1], 'another prefetch began') or
                    said(a[2], 'another prefetch began'),
                    what='%s: the first prefetch seeing the second' % tag)
            ml.poll(lambda: said(b[1], ' asked, '), what='%s: the second prefetch\'s plan' % tag)
            ck.eq('%s: the first still runs while held' % tag, a[0].poll(), None)
            ck.eq('%s: the second still runs while held' % tag, b[0].poll(), None)
            px.release.set()
            rc_a, out_a, err_a = ended(*a)
            rc_b, out_b, err_b = ended(*b)
            ck.eq('%s: the first\'s exit' % tag, rc_a, 1 if refused else 0)
            ck.ok('prefetch: another prefetch began on %s: waiting until the bytes this '
                  'command asked for are cached (objects both asked for are fetched once)'
                  % m.mnt in out_a.splitlines(), '%s: the first does not join: %r' % (tag, out_a))
            if refused:
                ck.eq('%s: what the first says' % tag, err_a,
                      "shardfs: prefetch: %s: not every byte is cached (fills failed, see the "
                      "mount's log; or readers' fills evicted them)\n"
                      % os.path.join(m.mnt, refused))
            else:
                ck.eq('%s: the first\'s last line' % tag, out_a.splitlines()[-1:],
                      ['prefetch: done: every byte asked for is cached'])
                ck.eq('%s: the first\'s stderr' % tag, err_a, '')
            got = sum(sizes[n] for n in b_names)
            ck.eq('%s: the second\'s exit' % tag, rc_b, 0)
            ck.eq('%s: the second\'s summary' % tag, out_b.splitlines()[-1:],
                  ['prefetch: done: %s fetched, 0 B cached already, 0 B did not fit'
                   % human(got)])
            st = m.stats()
            fetched = sum(sizes[n] for n in set(a_names + b_names) if n != refused)
            ck.eq('%s: bytes_fetched (each shard once)' % tag,
                  st['bytes_fetched'] - fetched0, fetched)
            cached = sum(sizes[n] for n in sizes if n != refused and
                         int(n[1]) <= 2 + 3 * rnd)
            ck.eq('%s: prefetch_cached_bytes' % tag, st['prefetch_cached_bytes'], cached)
            ck.eq('%s: prefetch_pending' % tag, st['prefetch_pending'], 0)
            px.set('pass')
            for n in set(a_names + b_names) - {refused}:
                with open(os.path.join(m.mnt, n[:-4], 'x.bin'), 'rb') as f:
                    ck.ok(f.read() == data[n], '%s: %s/x.bin read back differs' % (tag, n))
            ck.eq('%s: read back from the cache' % tag,
                  m.stats()['bytes_fetched'] - fetched0, fetched)
    finally:
        hostile.end_all(procs, (m,), px, ng)


human = hostile.human  # fs_human_bytes (fs_log.c)


GROUPS = {'umount-prefetch': (group_umount_prefetch, 240),
          'wait-eintr': (group_wait_eintr, 240),
          'client-waits': (group_client_waits, 240),
          'second-prefetch': (group_second_prefetch, 240)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
