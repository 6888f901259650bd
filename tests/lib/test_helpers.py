"""Tests of the test helpers themselves (tests/lib/shardfs_test/mount.py): they must not let a
defect pass as green.

usage: test_helpers.py SHARDFS GROUP
  crash    a test whose daemon dies by SIGSEGV (the test itself checks nothing wrong) fails,
           naming the signal; one whose daemon the test kills on purpose (ml.kill_daemon) and
           one whose daemon exits cleanly pass. A test whose check fails and whose poll then
           times out says why, once each: the tail of its daemon's log, the mount's stats and
           its server's requests (mount.Env.diagnose); one that fails after its unmount prints
           its daemon's log and the last stats it read
  skip     a skip after a failure fails; a test that checks nothing fails; a skip of an allowed
           kind exits 77, but fails under CI=true and with SHARDFS_TEST_STRICT=1
  nofuse   with /dev/fuse hidden (a mount namespace: an empty tmpfs over /dev, a device node
           without a driver or /dev/null bound over /dev/fuse) tests/lib/precheck.py and a
           mount test fail with one clear message, under CI=true and without it; so does
           tests/run.sh (--builds none), which stops at its precheck
  standin  the AIStore stand-in's GetBatch answers in root mode (shardfs_test.s3servers, as
           tests/bench/link_bench.py serves them, members sent with sendfile) are the answers
           it builds in memory: the same status and bytes for 60 seeded requests (ranges,
           missing objects with and without coer, names longer than USTAR holds), and each
           member the exact bytes of its file's range; its listing and HEADs give each file
           the ETag the C link emulator gives it (--etag nginx and store); in upstream mode, an
           upstream that closed its kept connection (s3rver's keep-alive timeout) costs the
           client nothing: the request sent again on a new one, never a 502 of its own
Inner groups (run by the ones above in a child process): inner-segv, inner-kill, inner-clean,
inner-fail-skip, inner-nocheck, inner-skip, inner-mount, inner-diag, inner-diag-ended."""

import http.client
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import s3servers  # noqa: E402
from shardfs_test import web  # noqa: E402

HERE = os.path.abspath(__file__)
PRECHECK = os.path.join(os.path.dirname(HERE), 'precheck.py')
RUN_SH = os.path.join(os.path.dirname(os.path.dirname(HERE)), 'run.sh')


def mount_one(env):
    src = env.path('src')
    os.makedirs(src)
    ml.write_file(os.path.join(src, 'a.tar'), ml.tar_bytes([('x.txt', b'hello\n')]))
    return ml.Mount(env, src, cache_dir=env.path('cache'))


def inner_segv(env, ck):
    # a sanitized daemon would catch the SIGSEGV, report it and abort (SIGABRT): let the
    # signal kill it as it kills a plain build's
    for var in ('ASAN_OPTIONS', 'UBSAN_OPTIONS'):
        env.env[var] = ':'.join(filter(None, [os.environ.get(var), 'handle_segv=0']))
    m = mount_one(env)
    with m:
        ck.eq('inner-segv: x.txt', ml.read_all(os.path.join(m.mnt, 'a', 'x.txt')), b'hello\n')
        pid = m.stats()['pid']
        os.kill(pid, signal.SIGSEGV)  # as if the daemon crashed
        ml.poll(lambda: not ml.pid_alive(pid), what='the daemon to die')
    ml.log('inner-segv: ends %r' % m.ends())


def inner_kill(env, ck):
    m = mount_one(env)
    with m:
        pid = m.stats()['pid']
        ml.kill_daemon(env, pid, signal.SIGKILL)
        ck.ok(ml.poll(lambda: not ml.pid_alive(pid)), 'inner-kill: the daemon is alive')


def inner_clean(env, ck):
    m = mount_one(env)
    with m:
        ck.eq('inner-clean: x.txt', ml.read_all(os.path.join(m.mnt, 'a', 'x.txt')), b'hello\n')
    ck.eq('inner-clean: how the daemon ended', list(m.ends().values()), ['exited with status 0'])


def inner_fail_skip(env, ck):
    ck.eq('inner-fail-skip: a check that fails', 1, 2)
    raise ml.Skip('a skip after a failure', 'tool')


def inner_nocheck(env, ck):
    pass


def inner_skip(env, ck):
    raise ml.Skip('an allowed kind of skip', 'tool')


def inner_mount(env, ck):
    m = mount_one(env)
    with m:
        ck.eq('inner-mount: x.txt', ml.read_all(os.path.join(m.mnt, 'a', 'x.txt')), b'hello\n')


def served_mount(env):
    """a.tar served by nginx, mounted with a --log-file: (nginx, the Mount)."""
    src = env.path('src')
    os.makedirs(src)
    ml.write_file(os.path.join(src, 'a.tar'), ml.tar_bytes([('x.txt', b'hello\n')]))
    ng = web.Nginx(env.path('nginx'), src).start()
    return ng, ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                        extra=['--log-file', env.path('daemon.log')])


def inner_diag(env, ck):
    ng, m = served_mount(env)
    try:
        with m:
            ck.eq('inner-diag: x.txt', ml.read_all(os.path.join(m.mnt, 'a', 'x.txt')), b'hello\n')
            ck.eq('inner-diag: a check that fails', 1, 2)
            ck.eq('inner-diag: a second one', 3, 4)
            # a condition that never comes: the bound is the test's, not a window
            ml.poll(lambda: False, timeout=1, what='inner-diag: a condition that never comes')
    finally:
        ng.stop()


def inner_diag_ended(env, ck):
    ng, m = served_mount(env)
    try:
        with m:
            ck.eq('inner-diag-ended: x.txt', ml.read_all(os.path.join(m.mnt, 'a', 'x.txt')),
                  b'hello\n')
            m.stats()
    finally:
        ng.stop()
    raise OSError('inner-diag-ended: an error after the unmount')


def run_inner(env, group, extra_env=None, prefix=()):
    e = dict(os.environ)
    for k in ('CI', 'SHARDFS_TEST_STRICT', 'SHARDFS_TEST_ALLOW_SKIP'):
        e.pop(k, None)
    e.update(extra_env or {})
    r = subprocess.run(list(prefix) + [sys.executable, HERE, env.shardfs, group],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=e, timeout=120)
    out = r.stdout.decode(errors='replace')
    ml.log('--- %s -> rc=%r\n%s---' % (group, r.returncode, out))
    return r.returncode, out


def group_crash(env, ck):
    rc, out = run_inner(env, 'inner-segv')
    ck.eq('a daemon killed by SIGSEGV: exit status of its test', rc, 1)
    ck.ok('was killed by signal SIGSEGV' in out and 'FAIL: daemon ' in out,
          'the failure does not name SIGSEGV: %r' % out[-2000:])
    rc, out = run_inner(env, 'inner-kill')
    ck.eq('a daemon killed on purpose: exit status of its test', rc, 0)
    rc, out = run_inner(env, 'inner-clean')
    ck.eq('a daemon that exits cleanly: exit status of its test', rc, 0)
    ck.eq('... no diagnosis printed', out.count('==== diagnosis'), 0)
    rc, out = run_inner(env, 'inner-diag')
    ck.eq('a failed check and a poll timed out: exit status', rc, 1)
    heads = re.findall(r'^==== diagnosis of [^:]*: (.*)$', out, re.M)
    ck.eq('... a diagnosis for the failed check and one for the timeout, the second failed check '
          'none', heads, ["the failed check: 'inner-diag: a check that fails: expected 2, got 1'",
                          'timed out after 1s waiting for inner-diag: a condition that never '
                          'comes'])
    for what, pat in (('the daemon log\'s tail', r'^  \S+ shardfs\[\d+\] info: mounted http://'),
                      ('the stats now', r'^---- its stats now:\n  version=\S+ pid=\d+'),
                      ('the bytes read', r'^  .*\bread_bytes=6\b'),
                      ('the access log', r'^  .*"GET /json/a\.tar HTTP/1\.1" 206 ')):
        ck.eq('... each diagnosis shows %s' % what, len(re.findall(pat, out, re.M)), 2)
    rc, out = run_inner(env, 'inner-diag-ended')
    ck.eq('an exception after the unmount: exit status', rc, 1)
    ck.eq('... one diagnosis', re.findall(r'^==== diagnosis of [^:]*: (.*)$', out, re.M),
          ['the exception'])
    ck.ok(re.search(r'^---- its stats: not mounted; the last the test read:\n  version=', out,
                    re.M) and re.search(r'shardfs\[\d+\] info: mounted http://', out),
          'the diagnosis of an ended mount: its log and the last stats read: %r' % out[-3000:])


def group_skip(env, ck):
    rc, out = run_inner(env, 'inner-fail-skip')
    ck.eq('a skip after a failure: exit status', rc, 1)
    ck.ok('expected 2, got 1' in out, 'the failure before the skip is not shown: %r' % out)
    rc, out = run_inner(env, 'inner-nocheck')
    ck.eq('a test that checks nothing: exit status', rc, 1)
    ck.ok('made no check' in out, 'no check made: %r' % out)
    rc, out = run_inner(env, 'inner-skip')
    ck.eq('an allowed skip: exit status', rc, ml.SKIP)
    ck.ok('SKIP: an allowed kind of skip' in out, 'the skip does not say why: %r' % out)
    for var in ({'CI': 'true'}, {'SHARDFS_TEST_STRICT': '1'}, {'SHARDFS_TEST_ALLOW_SKIP': 'host'}):
        rc, out = run_inner(env, 'inner-skip', var)
        ck.eq('a skip with %r: exit status' % var, rc, 1)
        ck.ok('allows no skip' in out and 'an allowed kind of skip' in out,
              'a skip with %r does not say why it fails: %r' % (var, out))


def group_nofuse(env, ck):
    if not ml.has_cap_sys_admin():
        raise ml.Skip('a mount namespace needs CAP_SYS_ADMIN', 'host')
    nodev = env.path('nodev')
    os.makedirs(nodev)
    hides = {'tmpfs over /dev': 'mount -t tmpfs none /dev',
             '/dev/null over /dev/fuse': 'mount --bind /dev/null /dev/fuse',
             'a device without a driver over /dev/fuse':
             'mount -t tmpfs none {0} && mknod {0}/fuse c 0 0 && mount --bind {0}/fuse '
             '/dev/fuse'.format(nodev)}
    for what, hide in sorted(hides.items()):
        for ci in ({}, {'CI': 'true'}):
            label = '%s%s' % (what, ' CI=true' if ci else '')
            e = dict(os.environ)
            e.pop('CI', None)
            e.update(ci)
            r = subprocess.run(['unshare', '-m', '--propagation', 'private', 'sh', '-c',
                                '%s && exec "$0" "$@"' % hide, sys.executable, PRECHECK],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=e, timeout=120)
            out = r.stdout.decode(errors='replace')
            ml.log('precheck, %s -> rc=%r %r' % (label, r.returncode, out))
            ck.eq('precheck, %s: exit status' % label, r.returncode, 1)
            ck.ok(len(out.splitlines()) == 1 and out.startswith('precheck: this machine cannot '
                                                                 'mount: ') and '/dev/fuse' in out,
                  'precheck, %s: not one clear line: %r' % (label, out))
            # a mount test: fails (no skip), saying why
            rc, out = run_inner(env, 'inner-mount', ci, prefix=(
                'unshare', '-m', '--propagation', 'private', 'sh', '-c',
                '%s && exec "$@"' % hide, 'sh'))
            ck.eq('mount test, %s: exit status' % label, rc, 1)
            want = 'shardfs mount failed' if 'null' in what else 'cannot open /dev/fuse'
            ck.ok(want in out, 'mount test, %s: the failure does not say %r: %r'
                  % (label, want, out[-2000:]))
            if 'driver' not in what:
                continue
            # the whole command: tests/run.sh stops at its precheck, before it builds anything
            r = subprocess.run(['unshare', '-m', '--propagation', 'private', 'sh', '-c',
                                '%s && exec bash "$0" --builds none' % hide, RUN_SH],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=e, timeout=300)
            out = r.stdout.decode(errors='replace')
            ml.log('tests/run.sh, %s -> rc=%r %r' % (label, r.returncode, out))
            ck.eq('tests/run.sh, %s: exit status' % label, r.returncode, 1)
            ck.eq('tests/run.sh, %s: its last lines' % label,
                  [ln.split(':')[0] for ln in out.splitlines()[-2:]], ['precheck', 'tests'])
            ck.ok(out.endswith('tests: FAILED (precheck)\n') and 'cannot open /dev/fuse' in out,
                  'tests/run.sh, %s: not one clear failure: %r' % (label, out[-2000:]))


def moss_get(port, body):
    """(status, body) of one GetBatch request at the stand-in's target (dt=t1: past the
    proxy's redirect), its chunked answer decoded."""
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
    try:
        conn.request('GET', '/v1/ml/moss/b?provider=ais&dt=t1', body=json.dumps(body),
                     headers={'Content-Type': 'application/json'})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def group_standin(env, ck):
    rng = env.rng
    root = env.path('bucket')
    os.makedirs(os.path.join(root, 'd'))
    files = {}
    for i in range(6):
        name = 'd/' + ('x' * rng.choice((1, 120))) + '-%d.tar' % i  # long ones: PAX headers
        files[name] = rng.randbytes(rng.choice((0, 1, 511, 512, 513, 70000, 300000)))
        with open(os.path.join(root, name), 'wb') as f:
            f.write(files[name])
    ais = s3servers.AisStandIn(None, root=root)
    try:
        for k in range(60):
            items, want = [], []
            for _ in range(rng.randint(1, 8)):
                name = rng.choice(sorted(files) + ['d/missing.tar'])
                data = files.get(name, b'')
                start = rng.randint(0, len(data))
                length = rng.choice((0, -1, rng.randint(1, len(data) - start + 2)))
                if start > 0 and length == 0:
                    length = -1
                items.append({'objname': name, 'start': start, 'length': length})
                want.append((name, data[start:] if length in (0, -1) else
                             data[start:start + length]))
            body = {'mime': '.tar', 'in': items, 'strm': True, 'coer': rng.random() < 0.5,
                    'onob': rng.random() < 0.5}
            ais.moss_sendfile = True
            got = moss_get(ais.port, body)
            ais.moss_sendfile = False
            built = moss_get(ais.port, body)
            ck.eq('request %d: the answer sent with sendfile vs built in memory (status, '
                  'bytes)' % k, got, built)
            if got[0] != 200:
                continue
            with tarfile.open(fileobj=io.BytesIO(got[1])) as t:
                members = [(m.name, t.extractfile(m).read()) for m in t.getmembers()]
            ck.eq('request %d: members' % k, len(members), len(items))
            for (mname, mdata), (name, data) in zip(members, want):
                if name not in files:
                    ck.ok(mname.startswith('__404__/') and mdata == b'',
                          'request %d: %s missing: member %r' % (k, name, mname))
                else:
                    ck.eq('request %d: %s: member bytes' % (k, mname), mdata, data)
        sent = ais.stats.get('moss_requests', 0)
        ck.eq('GetBatch requests answered', sent, 120)
    finally:
        ais.stop()
    standin_etags(env, ck, root, sorted(files))
    standin_upstream_closed(ck)


def standin_upstream_closed(ck):
    """Upstream mode (s3rver behind it): the stand-in keeps one upstream connection a client
    connection; s3rver closes one idle past its keep-alive timeout (Node's 5 s). Here the
    upstream (a small HTTP/1.1 server) closes its end of the kept connection after each answer,
    as s3rver's timeout would between two requests: each HEAD on one client connection is
    answered 200, each after the first sent again once on a new upstream connection
    (upstream_reconnects), none a 502 of the stand-in's making (upstream_failed 0: before, each
    was a 502 the client then sent again, one request counted twice at the stand-in)."""
    import http.server
    import socket
    import threading

    class Upstream(http.server.BaseHTTPRequestHandler):
        protocol_version = 'HTTP/1.1'

        def log_message(self, *a):
            pass

        def do_HEAD(self):
            self.send_response(200)
            self.send_header('Content-Length', '7')
            self.send_header('ETag', '"e"')
            self.end_headers()
            self.wfile.flush()
            # the keep-alive timeout's close, made sure before the next request: the stand-in
            # finds its kept connection closed when it sends there
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True

    up = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Upstream)
    t = threading.Thread(target=up.serve_forever, daemon=True)
    t.start()
    ais = s3servers.AisStandIn(up.server_address[1])
    n = 4
    try:
        conn = http.client.HTTPConnection('127.0.0.1', ais.port, timeout=30)
        got = []
        try:
            for _ in range(n):
                conn.request('HEAD', '/s3/b/d/x.tar?dt=t1')
                r = conn.getresponse()
                r.read()
                got.append(r.status)
        finally:
            conn.close()
        ck.eq('upstream closed after each answer: HEADs on one connection answered', got,
              [200] * n)
        ck.eq('upstream closed: HEADs at the target, sent again on a new upstream connection, '
              'the stand-in\'s own 502s',
              (ais.stats.get('s3_head', 0), ais.stats.get('upstream_reconnects', 0),
               ais.stats.get('upstream_failed', 0)), (n, n - 1, 0))
    finally:
        ais.stop()
        up.shutdown()
        up.server_close()


def head_etag(port, path):
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
    try:
        conn.request('HEAD', path)
        r = conn.getresponse()
        r.read()
        return r.status, r.getheader('ETag')
    finally:
        conn.close()


def standin_etags(env, ck, root, names):
    """Root mode: the stand-in lists and HEADs each file with the ETag the link emulator (C)
    gives it, for each --etag: the mount's redirected object GETs send If-Match with the listed
    ETag, and any other is answered 412 (link_bench.py's L9 found 0 images so)."""
    from shardfs_test.linkemu import Emu
    for mode in ('nginx', 'store'):
        emu = Emu(root, 0, 0, env.path(), 'etag-' + mode, shardfs=env.shardfs, etag=mode)
        ais = s3servers.AisStandIn(None, root=root, objects_port=emu.port, etag=mode)
        try:
            conn = http.client.HTTPConnection('127.0.0.1', ais.port, timeout=30)
            try:
                conn.request('GET', '/s3/b?list-type=2')
                listing = conn.getresponse().read().decode()
            finally:
                conn.close()
            listed = dict(re.findall(r'<Key>([^<]*)</Key>.*?<ETag>([^<]*)</ETag>', listing))
            ck.eq('--etag %s: keys listed' % mode, sorted(listed), names)
            for name in names:
                want = head_etag(emu.port, '/' + name)
                ck.eq('--etag %s: %s: the emulator\'s HEAD' % (mode, name), want[0], 200)
                # at the target (dt=t1): the proxy answers an object's HEAD with a 307 there,
                # as AIStore's does
                ck.eq('--etag %s: %s: the stand-in\'s HEAD at the target (status, ETag) vs the '
                      'emulator\'s' % (mode, name), head_etag(ais.port, '/s3/b/' + name +
                                                              '?dt=t1'), want)
                ck.eq('--etag %s: %s: the listed ETag vs the emulator\'s' % (mode, name),
                      listed.get(name, '').replace('&quot;', '"'), want[1])
        finally:
            ais.stop()
            emu.stop()


GROUPS = {'crash': (group_crash, 200), 'skip': (group_skip, 200), 'nofuse': (group_nofuse, 200),
          'standin': (group_standin, 200),
          'inner-segv': (inner_segv, 100), 'inner-kill': (inner_kill, 100),
          'inner-clean': (inner_clean, 100), 'inner-fail-skip': (inner_fail_skip, 100),
          'inner-nocheck': (inner_nocheck, 100), 'inner-skip': (inner_skip, 100),
          'inner-mount': (inner_mount, 100), 'inner-diag': (inner_diag, 100),
          'inner-diag-ended': (inner_diag_ended, 100)}

if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
