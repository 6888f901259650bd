#!/usr/bin/python3
"""What the store answered to a failed request reaches the user (docs/faults.md "Hostile or
broken servers", "The cache tier"): real mounts of nginx on 127.0.0.1, and the fault proxy.

usage: test_errctx.py SHARDFS GROUP
GROUP:
  refused     nginx answers the GETs of one shard with 403 and an S3 <Error> body, of another
              with 400 and an AIStore-style JSON body (their listing works): 40 raw reads and 5
              member lookups of each get the error (EACCES for 401/403, else EIO: as
              docs/sources.md says), each a request to the store; the daemon log has exactly
              one line per object and cause, naming the key, the status and the body's code and
              message; fill_errors counts the failed fills
  parallel    four shards refused with four statuses and codes (400, 401, 403, 409), read by
              four threads at once: each object's one log line has its own status and code
              (the failure is recorded with the request, not per store)
  breaker     the store's circuit breaker is open (a read spent its retry budget on 503s; the
              probe's object still answers 503) while the store answers listings: an explicit
              'shardfs refresh' asks the store itself and succeeds, and its answer closes the
              breaker; open again (b.tar's 503s), it closes when the probe's object answers
              400 (an answer, not a store failure), without a refresh

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse, or no nginx).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

# name: (status, body, content type, the code and message the log line must show)
S3_XML = ('<?xml version="1.0" encoding="UTF-8"?>\\n<Error><Code>%s</Code><Message>%s</Message>'
          '<Resource>/b/%s</Resource><RequestId>4442587FB7D0A2F9</RequestId></Error>')
REFUSED = {
    'a.tar': (403, S3_XML % ('AccessDenied', 'Access Denied by policy p-17', 'a.tar'),
              'application/xml', 'AccessDenied', 'Access Denied by policy p-17'),
    'b.tar': (400, '{"message":"object b.tar is being migrated","method":"GET",'
              '"remote_addr":"127.0.0.1","node":"t[x1]","status":400}',
              'application/json', '', 'object b.tar is being migrated'),
}
PARALLEL = {
    'p0.tar': (400, S3_XML % ('InvalidRequest', 'Bad range for p0', 'p0.tar'),
               'application/xml', 'InvalidRequest', 'Bad range for p0'),
    'p1.tar': (401, S3_XML % ('InvalidToken', 'The token of p1 is malformed', 'p1.tar'),
               'application/xml', 'InvalidToken', 'The token of p1 is malformed'),
    'p2.tar': (403, S3_XML % ('AccessDenied', 'Denied for p2', 'p2.tar'),
               'application/xml', 'AccessDenied', 'Denied for p2'),
    'p3.tar': (409, S3_XML % ('OperationAborted', 'A conflicting operation on p3', 'p3.tar'),
               'application/xml', 'OperationAborted', 'A conflicting operation on p3'),
}


class RefusingNginx(web.Nginx):
    """web.Nginx plus /refuse/: the same tree as /json/ (JSON autoindex), except that the GETs
    of the names in `refused` are answered with their status and body."""

    def __init__(self, prefix, root, refused):
        super().__init__(prefix, root)
        locs = ''.join(
            "            location = /refuse/%s { default_type %s; return %d '%s'; }\n" % (
                n, ctype, st, body) for n, (st, body, ctype, _, _) in sorted(refused.items()))
        extra = ('        location /refuse/ { alias %s/; autoindex on; autoindex_format json;\n'
                 '%s        }\n' % (self.root, locs))
        with open(self.conf) as f:
            conf = f.read()
        conf = conf.replace('        location /files/', extra + '        location /files/', 1)
        with open(self.conf, 'w') as f:
            f.write(conf)


def make_tar(env, path, name):
    stage = env.path('stage-' + name)
    os.makedirs(stage, exist_ok=True)
    with open(os.path.join(stage, name + '.txt'), 'wb') as f:
        f.write(b'x' * 3000)
    subprocess.run(['tar', '--format=gnu', '-cf', path, '-C', stage, name + '.txt'], check=True)


def reader_errno(status):
    """What a reader gets for a fill the store refused with status (docs/sources.md)."""
    return errno.EACCES if status in (401, 403) else errno.EIO


def read_errno(path):
    """The errno of a read of path's first bytes (0: it read)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return e.errno
    try:
        os.read(fd, 4096)
        return 0
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)


def lookup_errno(path):
    try:
        os.listdir(path)
        return 0
    except OSError as e:
        return e.errno


def log_lines(path):
    try:
        with open(path, errors='replace') as f:
            return f.read().splitlines()
    except OSError:
        return []


def failure_lines(logf, name):
    """The log's lines that record a failed request of name with its HTTP status."""
    return [ln for ln in log_lines(logf) if name in ln and re.search(r'HTTP \d{3}', ln)]


def check_lines(ck, what, logf, table):
    for name, (st, _, _, code, msg) in sorted(table.items()):
        lines = failure_lines(logf, name)
        log('%s: %s: %r' % (what, name, lines))
        ck.eq('%s: log lines of %s' % (what, name), len(lines), 1)
        for ln in lines:
            want = 'HTTP %d%s: %s' % (st, ' ' + code if code else '', msg)
            ck.ok(want in ln, '%s: %s: %r lacks %r' % (what, name, ln, want))
            for other, (ost, _, _, ocode, _) in table.items():
                if other != name:
                    ck.ok('HTTP %d' % ost not in ln and (not ocode or ocode == code or
                                                         ocode not in ln),
                          '%s: %s: the line has %s\'s answer: %r' % (what, name, other, ln))


def group_refused(env, ck):
    src = env.path('src')
    os.makedirs(src)
    for n in ('a.tar', 'b.tar', 'c.tar'):
        make_tar(env, os.path.join(src, n), n[0])
    ng = RefusingNginx(env.path('nginx'), src, REFUSED).start()
    logf = env.path('daemon.log')
    try:
        with ml.Mount(env, ng.url('refuse/'), cache_dir=env.path('cache'),
                      extra=['--warm', 'off', '--log-file', logf]) as m:
            ck.eq('c.tar reads', read_errno(os.path.join(m.mnt, 'c.tar')), 0)
            for n in ('a.tar', 'b.tar'):
                errs = [read_errno(os.path.join(m.mnt, n)) for _ in range(40)]
                errs += [lookup_errno(os.path.join(m.mnt, n[:-4])) for _ in range(5)]
                want = reader_errno(REFUSED[n][0])
                ck.ok(all(e == want for e in errs),
                      '%s: every read and lookup gets %s: %r' % (
                          n, errno.errorcode[want],
                          sorted(set(errno.errorcode.get(e, e) for e in errs))))
            st = m.stats()
            ck.ok(st['fill_errors'] >= 2 * 45, 'fill_errors %d < 90' % st['fill_errors'])
            refused_gets = [r for r in ng.requests() if '/refuse/a.tar' in r]
            log('GETs of a.tar at nginx: %d' % len(refused_gets))
            ck.ok(len(refused_gets) >= 40, 'a.tar was asked %d times, not once a read' %
                  len(refused_gets))
            check_lines(ck, 'refused', logf, REFUSED)
    finally:
        ng.stop()


def group_parallel(env, ck):
    src = env.path('src')
    os.makedirs(src)
    for n in PARALLEL:
        make_tar(env, os.path.join(src, n), n[:2])
    ng = RefusingNginx(env.path('nginx'), src, PARALLEL).start()
    logf = env.path('daemon.log')
    try:
        with ml.Mount(env, ng.url('refuse/'), cache_dir=env.path('cache'),
                      extra=['--warm', 'off', '--log-file', logf]) as m:
            results = {}
            start = threading.Barrier(len(PARALLEL))

            def reader(n):
                start.wait()
                results[n] = [read_errno(os.path.join(m.mnt, n)) for _ in range(25)]

            threads = [threading.Thread(target=reader, args=(n,)) for n in sorted(PARALLEL)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for n, errs in sorted(results.items()):
                want = reader_errno(PARALLEL[n][0])
                ck.ok(all(e == want for e in errs), '%s: errnos %r, not all %s' % (
                    n, sorted(set(errno.errorcode.get(e, e) for e in errs)),
                    errno.errorcode[want]))
            ck.eq('readers done', sorted(results), sorted(PARALLEL))
            check_lines(ck, 'parallel', logf, PARALLEL)
    finally:
        ng.stop()


def group_breaker(env, ck):
    src = env.path('src')
    os.makedirs(src)
    for n in ('a.tar', 'b.tar'):
        make_tar(env, os.path.join(src, n), n[0])
    ng = web.Nginx(env.path('nginx'), src).start()
    px = web.FaultProxy(ng.port)
    logf = env.path('daemon.log')
    try:
        with ml.Mount(env, px.url('json/'), cache_dir=env.path('cache'),
                      extra=['--warm', 'off', '--retry-budget', '1', '--log-file', logf]) as m:
            # every GET of a.tar answers 503: the read spends its budget, the store is down
            px.set('503', match='/a.tar')
            ck.eq('a.tar while it answers 503', read_errno(os.path.join(m.mnt, 'a.tar')),
                  errno.EIO)
            st = m.stats()
            ck.eq('store_down after the budget', st['store_down'], 1)
            # the probe asks for a.tar's first byte: it goes on failing, the breaker stays
            # open; the listing's requests are answered
            ck.ok(ml.poll(lambda: m.stats()['store_probes'] >= 1, what='a probe'), 'probe')
            ck.eq('still down', m.stats()['store_down'], 1)
            r = env.run([env.shardfs, 'refresh', m.mnt], timeout=60)
            log('refresh: rc=%d %s %s' % (r.returncode, r.stdout.decode(errors='replace'),
                                          r.stderr.decode(errors='replace')))
            ck.eq('refresh while the breaker is open: exit status', r.returncode, 0)
            ck.ok(b'0 new, 0 removed, 0 changed' in r.stdout, 'refresh output %r' % r.stdout)
            st = m.stats()
            ck.eq('the listing\'s answer closed the breaker: store_down', st['store_down'], 0)
            ck.eq('store_failures', st['store_failures'], 1)
            downs = [ln for ln in log_lines(logf) if 'store down' in ln]
            log('store down lines: %r' % downs)
            ck.eq('"store down" log lines', len(downs), 1)
            ck.ok(downs and 'a.tar' in downs[0] and 'HTTP 503' in downs[0],
                  'the store down line names a.tar and HTTP 503: %r' % downs)
            # down again (b.tar's 503s); then b.tar answers 400: the probe's answer is an
            # answer of the store (any status but 408, 429 and 5xx), so the breaker closes
            # without a refresh
            px.set('503', match='/b.tar')
            ck.eq('b.tar while it answers 503', read_errno(os.path.join(m.mnt, 'b.tar')),
                  errno.EIO)
            ck.eq('store_down after b.tar\'s budget', m.stats()['store_down'], 1)
            px.set('400', match='/b.tar')
            ck.ok(ml.poll(lambda: m.stats()['store_down'] == 0),
                  'a probe answered 400 did not close the breaker')
            st = m.stats()
            ck.eq('store_failures after b.tar', st['store_failures'], 2)
            px.set('pass')
            for n in ('a.tar', 'b.tar'):
                with open(os.path.join(src, n), 'rb') as f:
                    want = f.read()
                with open(os.path.join(m.mnt, n), 'rb') as f:
                    ck.ok(f.read() == want, '%s exact after the faults' % n)
    finally:
        px.close()
        ng.stop()


GROUPS = {'refused': group_refused, 'parallel': group_parallel, 'breaker': group_breaker}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in GROUPS:
        print(__doc__)
        return 2
    if not os.path.exists(web.NGINX):
        return ml.skip_status('%s is not installed (scripts/install-deps.sh --test)' % web.NGINX)
    ml.main_wrapper(lambda env, ck: GROUPS[sys.argv[2]](env, ck), sys.argv[1],
                    'errctx-' + sys.argv[2], deadline=170)


if __name__ == '__main__':
    sys.exit(main())
