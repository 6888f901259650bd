#!/usr/bin/env python3
"""A hostile newcomer's servers against the remote data path (both HTTP engines: curl and the
lean one, --http-engine auto), through a mount:

    test_hostile3.py SHARDFS GROUP

The object is 300,000 seeded random bytes (SHARDFS_TEST_SEED), mounted as a.tar of the brace
pattern {a,b}.tar (--warm off); a read is 4096 bytes at 196,608 of a.tar (past the first units), made by a child process
(a FUSE read that waits cannot be killed: the child is waited for at most 60 s, then the
mount is detached with 'shardfs umount --force', and the wait counts as a failure).

Groups:
  trickle   a slowloris server: every GET answered with a 206 head, then one body byte every
            0.1 s for as long as the connection lasts (never silent, so never a stall by
            --stall-timeout alone). With --stall-timeout 1 --retry-budget 3 the read fails
            with EIO (before the trickle check: it waited for the whole range at 10 bytes a
            second, 64 KiB = 1.8 hours, and could not be killed), the log names the trickle
            ("the transfer trickled"), the mount answers a listing, and once the server
            answers whole again a read gives the exact bytes. Then header lines without end
            (a 206 status line, then one 60-byte header line every 0.1 s): the same (curl's
            words a trickle, the lean engine's no whole header line: it has none until the
            head ends). The mount's own requests are answered whole. Then the
            head itself a byte every 0.1 s: a stall, whose words say what was missed ("no
            whole header line nor body byte for 1 s"; before: "no bytes for 1 s", untrue).
  redirects GETs answered with a 302 that goes nowhere: a loop (each Location another query
            of the same path), a 302 without a Location, a 302 to an ftp:// URL. Each read
            fails with EIO and the daemon's log line says which (before: only "HTTP 302").
  fdlimit   the daemon under an open-file limit of 64 (prlimit --nofile=64:64): the mount
            warns on stderr naming the limit and what --max-connections and --threads want
            (before: nothing said, and reads 9 times slower), and a read is exact.
  retryafter  the first GET of the read's range answered 503 with Retry-After: 1, then the
            range: the read is exact after exactly 2 GETs of it, store_retry_after 1, and the
            second GET came no sooner than 1 s after the first (server-side monotonic clock:
            a lower bound only; before, the backoff's jitter over 100 ms); then every GET of
            the range answered 503 with Retry-After: 120 under --retry-budget 3: EIO after
            exactly 1 GET (not retried for 3 s), the log names the server's wait ("120 s
            (Retry-After)"); the same with 429.
The server paces its bytes; no check depends on a time: each asserts an outcome.
"""
import os
import re
import socket
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))

from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402
from shardfs_test.rawhttp import Answer, Scripted  # noqa: E402
from shardfs_test.web import LoopbackProxy  # noqa: E402

ENGINES = ('curl', 'auto')
READ_WAIT = 60  # seconds a read child is waited for (expected: a few)
OFF = 3 * 65536  # where a read is: past the unit the mount's own first GET may have cached

READER = r'''
import os, sys
try:
    fd = os.open(sys.argv[1], os.O_RDONLY)
    b = os.pread(fd, 4096, int(sys.argv[2]))
    sys.stdout.buffer.write(b)
except OSError as e:
    sys.stderr.write('errno %d\n' % e.errno)
    sys.exit(3)
'''


class Trickle(LoopbackProxy):
    """HEAD: the object's head. GET: per mode: 'body' a 206 head then a body byte every
    0.1 s; 'head' a 206 status line then a header line every 0.1 s; 'slowhead' the 206's head a
    byte every 0.1 s, then its body; 'whole' the correct 206."""

    def __init__(self, data):
        self.data, self.mode, self.gets = data, 'body', 0
        super().__init__(None)  # no upstream: every answer is made here

    def _serve(self, c):
        buf = b''
        try:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while not self.stop_ev.is_set():
                while b'\r\n\r\n' not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, buf = buf.split(b'\r\n\r\n', 1)
                lines = head.decode('latin1').split('\r\n')
                method = lines[0].split(' ')[0]
                rng = None
                for ln in lines[1:]:
                    m = re.match(r'(?i)range:\s*bytes=(\d+)-(\d*)', ln)
                    if m:
                        a = int(m.group(1))
                        b = int(m.group(2)) if m.group(2) else len(self.data) - 1
                        rng = (a, min(b, len(self.data) - 1))
                ans = Answer.ranged(method, rng, self.data)
                with self.lock:
                    mode = self.mode
                    if method == 'GET':
                        self.gets += 1
                if method != 'GET' or mode == 'whole':
                    c.sendall(ans.raw)
                    continue
                hl = ans.raw.index(b'\r\n\r\n') + 4
                if mode == 'body':
                    c.sendall(ans.raw[:hl])
                    for i in range(hl, len(ans.raw)):
                        if self.stop_ev.wait(0.1):
                            return
                        c.sendall(ans.raw[i:i + 1])
                elif mode == 'slowhead':
                    for i in range(hl):
                        if self.stop_ev.wait(0.1):
                            return
                        c.sendall(ans.raw[i:i + 1])
                    c.sendall(ans.raw[hl:])
                else:
                    c.sendall(b'HTTP/1.1 206 Partial Content\r\n')
                    i = 0
                    while not self.stop_ev.wait(0.1):
                        c.sendall(b'X-Pad-%06d: %s\r\n' % (i, b'p' * 44))
                        i += 1
                return
        except OSError:
            return
        finally:
            c.close()


def read_child(env, ck, label, m, path):
    """(returncode, stdout bytes, stderr text) of READER on path; None, after detaching the
    mount, when it did not end within READ_WAIT."""
    p = subprocess.Popen([sys.executable, '-c', READER, path, str(OFF)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env.env)
    try:
        out, err = p.communicate(timeout=READ_WAIT)
    except subprocess.TimeoutExpired:
        ck.fail('%s: the read did not end within %d s (a wait with no bound)' % (label,
                                                                               READ_WAIT))
        env.run([env.shardfs, 'umount', '--force', m.mnt], timeout=30)
        try:
            p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        return None
    return p.returncode, out, err.decode(errors='replace')


def group_trickle(env, ck, data):
    for e in ENGINES:
        # the words: a trickle; header lines without end are a trickle to curl (each line
        # arrives) and silence to the lean engine (no line until the head ends)
        for how, words in (('body', ('the transfer trickled',)),
                           ('head', ('the transfer trickled',
                                     'no whole header line nor body byte for 1 s')),
                           ('slowhead', ('no whole header line nor body byte for 1 s',))):
            label = '%s trickle %s' % (e, how)
            srv = Trickle(data)
            srv.mode = 'whole'  # the mount's own requests answered; the reads' not
            logf = env.path('log-trickle-%s-%s' % (e, how))
            try:
                m = ml.Mount(env, srv.url('{a,b}.tar'), cache_dir=env.path('c-%s-%s' % (e, how)),
                             extra=['--http-engine', e, '--warm', 'off', '--stall-timeout', '1',
                                    '--retry-budget', '3', '--log-file', logf])
                with m:
                    path = os.path.join(m.mnt, 'a.tar')
                    with srv.lock:
                        srv.mode = how
                    r = read_child(env, ck, label, m, path)
                    if r is None:
                        continue
                    rc, out, err = r
                    log('%s: rc %d, %d bytes, %s' % (label, rc, len(out), err.strip()))
                    ck.eq('%s: the read fails with EIO' % label, (rc, err.strip()),
                          (3, 'errno 5'))
                    text = open(logf, errors='replace').read() if os.path.exists(logf) else ''
                    ck.ok(any(w in text for w in words) and 'a.tar' in text,
                          '%s: no log line naming a.tar and %s: %s' % (
                              label, ' or '.join('"%s"' % w for w in words),
                              ml.short(text[-600:], 600)))
                    ck.ok('a.tar' in os.listdir(m.mnt), '%s: the mount does not list a.tar'
                          % label)
                    with srv.lock:
                        srv.mode = 'whole'

                    def good():
                        rr = read_child(env, ck, label + ' again', m, path)
                        return (-1, b'', 'hung') if rr is None else rr if rr[0] == 0 else None
                    rr = ml.poll(good, what='%s: a read after the server mends' % label)
                    ck.ok(rr is not None and rr[1] == data[OFF:OFF + 4096],
                          '%s: the read after the server mends is not the exact bytes' % label)
            finally:
                srv.close()


def group_redirects(env, ck, data):
    cases = (('loop', 'more than 5 redirects in a row'), ('noloc', 'HTTP 302 without a Location'),
             ('ftp', 'a redirect to a URL of another scheme (ftp)'))
    for e in ENGINES:
        for case, words in cases:
            label = '%s redirect %s' % (e, case)

            def fn(n, m, r, d, case=case):
                if m != 'GET':
                    return None
                loc = {'loop': [b'Location: /a.tar?hop=%d' % n], 'noloc': [],
                       'ftp': [b'Location: ftp://127.0.0.1/a.tar']}[case]
                return Answer(Answer.head(b'302 Found', loc + [b'Content-Length: 0']))
            srv = Scripted(data, fn)
            logf = env.path('log-redir-%s-%s' % (e, case))
            try:
                with ml.Mount(env, srv.url('{a,b}.tar'), cache_dir=env.path('r-%s-%s' % (e, case)),
                              extra=['--http-engine', e, '--warm', 'off', '--retry-budget', '3',
                                     '--log-file', logf]) as m:
                    r = read_child(env, ck, label, m, os.path.join(m.mnt, 'a.tar'))
                    if r is None:
                        continue
                    rc, out, err = r
                    log('%s: rc %d, %s; %d requests' % (label, rc, err.strip(), srv.requests))
                    ck.eq('%s: the read fails with EIO' % label, (rc, err.strip()),
                          (3, 'errno 5'))
                    text = open(logf, errors='replace').read() if os.path.exists(logf) else ''
                    ck.ok(words in text, '%s: no log line saying "%s": %s' % (
                        label, words, ml.short(text[-600:], 600)))
            finally:
                srv.close()


def group_fdlimit(env, ck, data):
    """A daemon under an open-file limit of 64 (prlimit): the mount says so on stderr, naming
    the limit and what the connections want, and still reads exact bytes."""
    srv = Scripted(data, lambda n, m, r, d: None)
    try:
        with ml.Mount(env, srv.url('{a,b}.tar'), cache_dir=env.path('fd'),
                      extra=['--warm', 'off'], prefix=['prlimit', '--nofile=64:64', '--']) as m:
            log('stderr: %s' % m.stderr.strip())
            ck.ok('the open-file limit is 64 (ulimit -n)' in m.stderr and
                  '--max-connections 256' in m.stderr,
                  'fdlimit: no warning of the limit at mount: %r' % m.stderr)
            r = read_child(env, ck, 'fdlimit', m, os.path.join(m.mnt, 'a.tar'))
            ck.ok(r is not None and r[0] == 0 and r[1] == data[OFF:OFF + 4096],
                  'fdlimit: the read is not the exact bytes: %r' % (r and (r[0], r[2]),))
    finally:
        srv.close()


def group_retryafter(env, ck, data):
    import time
    for e in ENGINES:
        for status in (b'503 Service Unavailable', b'429 Too Many Requests'):
            code = status[:3].decode()
            for wait, budget in (('1', '10'), ('120', '3')):
                label = '%s %s Retry-After: %s' % (e, code, wait)
                st = dict(armed=False, left=0, gets=[])

                def fn(n, m, r, d, st=st, status=status, wait=wait):
                    if m != 'GET' or not st['armed'] or r is None or not r[0] <= OFF <= r[1]:
                        return None
                    st['gets'].append(time.monotonic())
                    if st['left'] == 0:
                        return None
                    st['left'] -= 1
                    return Answer(Answer.head(status, [b'Retry-After: ' + wait.encode(),
                                                       b'Content-Length: 0']))
                srv = Scripted(data, fn)
                logf = env.path('log-ra-%s-%s-%s' % (e, code, wait))
                try:
                    with ml.Mount(env, srv.url('{a,b}.tar'),
                                  cache_dir=env.path('ra-%s-%s-%s' % (e, code, wait)),
                                  extra=['--http-engine', e, '--warm', 'off', '--retry-budget',
                                         budget, '--log-file', logf]) as m:
                        st0 = m.stats()
                        with srv.lock:
                            st['armed'] = True
                            st['left'] = 1 if wait == '1' else 1000
                        r = read_child(env, ck, label, m, os.path.join(m.mnt, 'a.tar'))
                        if r is None:
                            continue
                        rc, out, err = r
                        s1 = m.stats()
                        with srv.lock:
                            gets = list(st['gets'])
                        log('%s: rc %d, %s; %d GETs of the range' % (label, rc, err.strip(),
                                                                     len(gets)))
                        got = s1.get('store_retry_after', 0) - st0.get('store_retry_after', 0)
                        if wait == '1':
                            ck.ok(rc == 0 and out == data[OFF:OFF + 4096],
                                  '%s: the read is not the exact bytes (rc %d, %s)' % (
                                      label, rc, err.strip()))
                            ck.eq('%s: GETs of the range' % label, len(gets), 2)
                            ck.eq('%s: store_retry_after' % label, got, 1)
                            ck.ok(len(gets) == 2 and gets[1] - gets[0] >= 0.99,
                                  '%s: the second GET came %.3f s after the first, before '
                                  'the 1 s asked' % (label, gets[1] - gets[0] if len(gets) == 2
                                                     else -1))
                        else:
                            ck.eq('%s: the read fails with EIO' % label, (rc, err.strip()),
                                  (3, 'errno 5'))
                            ck.eq('%s: GETs of the range (no retry)' % label, len(gets), 1)
                            ck.eq('%s: store_retry_after' % label, got, 0)
                            text = (open(logf, errors='replace').read()
                                    if os.path.exists(logf) else '')
                            ck.ok('120 s (Retry-After)' in text and 'a.tar' in text,
                                  '%s: no log line naming a.tar and the server\'s wait: %s' % (
                                      label, ml.short(text[-600:], 600)))
                finally:
                    srv.close()


GROUPS = {'trickle': group_trickle, 'redirects': group_redirects, 'fdlimit': group_fdlimit,
          'retryafter': group_retryafter}


def run_group(env, ck, group):
    data = bytes(env.rng.getrandbits(8) for _ in range(300000))
    GROUPS[group](env, ck, data)


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in GROUPS:
        print(__doc__)
        return 2
    ml.main_wrapper(run_group, sys.argv[1], 'hostile3-' + sys.argv[2], deadline=400,
                    group=sys.argv[2])


if __name__ == '__main__':
    sys.exit(main())
