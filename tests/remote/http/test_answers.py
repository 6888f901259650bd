#!/usr/bin/env python3
"""Answers real servers give that neither nginx nor the fault proxy gives on demand, to both HTTP
engines (curl and the lean one, --http-engine auto), through req_cli:

    test_answers.py SHARDFS GROUP REQ_CLI

The object is 300,000 seeded random bytes (SHARDFS_TEST_SEED) served by a scripted server
(shardfs_test.rawhttp); req_cli reads 5 ranges of 20,000 bytes from 1,000 on, one at a time,
after curl's HEAD. Every case checks the exact bytes (FNV-1a 64), exit 0, requests 6, failures
0 and the exact attempts, short bodies and connections (req_cli's and the server's).

Groups:
  framing  HTTP/1.0 answers with the server closing after each, and HTTP/1.0 answers on a
           connection the server keeps open (no keep-alive said: never reused); Connection:
           close on every answer (nginx's keepalive_requests 1); the first 3 answers' heads and
           bodies sent a byte per segment; 7 stray bytes after the second GET's body (the
           connection is not used again: one more connection, no failed attempt); a status line
           with no reason phrase ("HTTP/1.1 206").
  cuts     the connection closed at every class of offset of an answer: before its first
           byte, in the status line, in the headers, 2 bytes before the head's end, at its end,
           1 byte into the body, halfway, 1 byte short of the end; once on the kept connection
           (the second GET) and once on the lean engine's fresh one (the first GET): the bytes
           before the cut are kept, the rest asked for again (short_bodies 1 from the head's
           end on, 0 before it for both engines: curl counted 1 for a cut after the status
           line and before Content-Length's line), exact bytes; every GET cut in the status
           line, in the headers, 2 bytes before the head's end: the read fails with the same
           words from both engines ("HTTP 206: the connection closed inside the answer's
           headers" once the status line is whole; the lean engine said "Failure when
           receiving data from the peer", curl "Transferred a partial file" for the last).
  mountcuts the same classes of cut through a mount (the cache tier's fills: the lean engine
           receives into the fill's memory): every second GET of a 12 MiB shard's raw read
           (--chunk-size 1M) cut; 25 GETs, 12 cut, exact bytes, no read, fill or store
           failure, store_short_bodies 12 for the cuts in the body.
  reasons  answers to a ranged GET that are not the
           range, through a mount, one object each: a 206 of another range, a 206 that ends
           before the range's end and the object's, a 206 without Content-Range, a 206 longer
           than its range, a 204, a multipart/byteranges 206, a 200 of the range's bytes with
           its Content-Range (not "the object changed"): each read fails with EIO (as on
           main) and the daemon's log line names the status and the cause (on main: only
           "Input/output error").
  unsup    every GET answered in chunked framing: curl reads each; the lean engine leaves
           each to curl (asked again) until 3 in a row turn it off for the store: 9 requests
           at the server for 5 reads, not 11, and one log line.
  encoding answers whose bytes are not the object's (before backend_io_attempt.c refused
           them, each gave other bytes or failed with no log line): nginx with gzip_static always and an X.gz beside X (a 200 of X.gz's
           bytes with Content-Encoding: gzip to every range, though no encoding was asked
           for: both engines return them as X's, exit 0), a 200 with Content-Encoding: gzip (the whole
           object compressed; both engines return the compressed bytes as the object's, exit
           0), a 206 with Content-Encoding: gzip of a compressible range (a short body: its
           compressed bytes kept as the range's first ones; the read fails after 45 attempts),
           and a server with no ETag whose object grew between requests (206s with another
           total: mixed bytes, exit 0). Each must fail the read or give the object's bytes,
           never exit 0 with other bytes; through a mount of the gzip_static nginx, a failed
           read of the shard must have a log line naming Content-Encoding.
  nometag  (before the answers' size check: 9 of 12 members other bytes, exit 0) a mount of Python's http.server (no ETag,
           Range ignored) whose shard is replaced by rename under it with one of another
           size: every member read is the old version's bytes or an error, never other bytes.
  coded    a Transfer-Encoding frames the body and a Content-Length beside it says nothing
           (RFC 9112 6.3); before backend_io_attempt.c read its header the length was taken
           for the object's size: every GET answered 200 in chunked framing with
           "Content-Length: 7" beside it (a server that ignores Range): both engines read the
           exact bytes (on main: exit 1, "the object is 7 bytes now, not 300000", ESTALE); and
           a mount's refresh whose listing (JSON, chunked) is cut in its body with one
           Content-Length beside it, then resumed and answered whole with another (what the
           fault proxy's 'trunc' makes of nginx's chunked listing: model-smallcache's
           refresh that failed with ESTALE): the refresh succeeds, "0 new, 0 removed, 0
           changed; 1 object, 1 shard", 2 listing requests (on main: ESTALE), the second
           without a Range (a listing is restarted, not resumed: no ETag pins its bytes).
  splice   a body no strong ETag pins, cut, with another copy in the next answer: a mount's
           JSON listing cut inside its first name, the directory changed: the mount shows
           exactly the second copy, store_restarts 1, no Range asked (before the restart: a
           made-up name spliced from both); a streamed read of an object with no ETag, cut,
           its bytes changed: the read fails "not resumed" (before: exit 0, mixed bytes).
No sleeps: every piece is sent at once and every cut is a close at a byte count.
"""
import errno
import gzip
import io
import os
import re
import subprocess
import sys
import tarfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))

from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import net  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log  # noqa: E402
from shardfs_test.rawhttp import Answer, Scripted  # noqa: E402

OFF, LEN, COUNT = 1000, 20000, 5
ENGINES = ('curl', 'auto')


def fnv64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return '%016x' % h


def read_all(env, cli, data, answer, engine):
    """req_cli's 5 reads through a Scripted server of data: ({name: value}, exit status,
    server); the want bytes' fnv is out['want']."""
    srv = Scripted(data, answer)
    env.env['REQ_CLI_ENGINE'] = engine
    try:
        r = env.run([cli, srv.url('o/x.bin'), 'x.bin', str(OFF), str(LEN), str(COUNT), '1',
                     '5'], timeout=120)
    finally:
        srv.close()
        env.env.pop('REQ_CLI_ENGINE', None)
    out = {}
    for ln in r.stdout.decode().splitlines():
        k, _, v = ln.partition(' ')
        out[k] = int(v) if v.isdigit() and k != 'fnv' else v
    err = r.stderr.decode(errors='replace').strip()
    log('%s: exit %d %r server conns %d requests %d%s' % (
        engine, r.returncode, out, srv.conns, srv.requests, ('\n' + err[-800:]) if err else ''))
    return out, r.returncode, srv, err


def want_fnv(data):
    return fnv64(b''.join(data[OFF + i * LEN:OFF + (i + 1) * LEN] for i in range(COUNT)))


def check_case(ck, label, out, rc, srv, data, attempts, short, conns):
    ck.eq('%s: exit' % label, rc, 0)
    ck.eq('%s: bytes' % label, out.get('bytes'), COUNT * LEN)
    ck.eq('%s: fnv' % label, out.get('fnv'), want_fnv(data))
    ck.eq('%s: requests, attempts, failures' % label,
          (out.get('requests'), out.get('attempts'), out.get('failures')), (6, attempts, 0))
    if short is not None:
        ck.eq('%s: short_bodies' % label, out.get('short_bodies'), short)
    ck.eq('%s: connections (req_cli, server)' % label, (out.get('connects'), srv.conns),
          (conns, conns))


def group_framing(env, ck, cli, data):
    # curl keeps its HEAD's connection for the GETs; the lean engine opens one of its own
    plain = {'curl': 1, 'auto': 2}
    for e in ENGINES:
        lean = 5 if e == 'auto' else 0
        cases = [
            ('http/1.0 closed', lambda n, m, r, d: Answer.ranged(
                m, r, d, version=b'HTTP/1.0', close=True), 6),
            ('http/1.0 kept open', lambda n, m, r, d: Answer.ranged(
                m, r, d, version=b'HTTP/1.0'), 6),
            ('connection: close', lambda n, m, r, d: Answer.ranged(
                m, r, d, extra=[b'Connection: close'], close=True), 6),
            ('trickled', lambda n, m, r, d: Answer.ranged(
                m, r, d, piece=1 if m == 'GET' and n <= 3 else None), plain[e]),
            ('stray bytes', stray, plain[e] + 1),
            ('no reason phrase', no_reason, plain[e]),
        ]
        for name, fn, conns in cases:
            label = '%s %s' % (e, name)
            out, rc, srv, _ = read_all(env, cli, data, fn, e)
            check_case(ck, label, out, rc, srv, data, 6, 0, conns)
            ck.eq('%s: lean attempts' % label, out.get('lean_attempts'), lean)


def chunked(n, m, r, d):
    """A correct 206 of the range in chunked framing (no Content-Length), which curl reads and
    the lean engine leaves to it."""
    if m != 'GET' or not r:
        return None
    a, b = r
    body = d[a:b + 1]
    half = len(body) // 2
    framed = b''.join(b'%x\r\n' % len(p) + p + b'\r\n' for p in (body[:half], body[half:]))
    return Answer(Answer.head(b'206 Partial Content', [
        b'Content-Range: bytes %d-%d/%d' % (a, b, len(d)), b'Transfer-Encoding: chunked',
        b'ETag: "e1"']) + framed + b'0\r\n\r\n')


def group_unsup(env, ck, cli, data):
    """Every GET answered chunked: curl reads all 5 with 6 requests (its HEAD's too); the
    lean engine leaves each to curl, which asks again, until LEAN_UNSUP_MAX (3) in a row
    turn it off for the store: 1 + 3 x 2 + 2 = 9 requests, not 11."""
    for e, reqs in (('curl', 6), ('auto', 9)):
        out, rc, srv, err = read_all(env, cli, data, chunked, e)
        ck.eq('%s chunked: exit' % e, rc, 0)
        ck.eq('%s chunked: fnv' % e, out.get('fnv'), want_fnv(data))
        ck.eq('%s chunked: requests at the server' % e, srv.requests, reqs)
        ck.eq('%s chunked: failures' % e, out.get('failures'), 0)
        if e == 'auto':
            ck.eq('auto chunked: the switch to curl logged once',
                  err.count('its reads go through curl from now on'), 1)


def stray(n, m, r, d):
    a = Answer.ranged(m, r, d)
    if m == 'GET' and n == 2:
        a.raw += b'GARBAGE'
    return a


def no_reason(n, m, r, d):
    a = Answer.ranged(m, r, d)
    a.raw = a.raw.replace(b' Partial Content\r\n', b'\r\n', 1).replace(b' OK\r\n', b'\r\n', 1)
    return a


def group_cuts(env, ck, cli, data):
    status_len = len(b'HTTP/1.1 206 Partial Content\r\n')
    for e in ENGINES:
        # n 1: curl sends it on its HEAD's kept connection, the lean engine on a new one;
        # n 2: a kept connection for both
        for n_cut in (1, 2):
            kept = e == 'curl' or n_cut == 2
            a0 = OFF + (n_cut - 1) * LEN
            head_len = Answer.ranged('GET', (a0, a0 + LEN - 1), data).raw.index(b'\r\n\r\n') + 4
            total = head_len + LEN
            cuts = [0, 5, status_len + 10, head_len - 2, head_len, head_len + 1,
                    head_len + LEN // 2, total - 1]
            for cut in cuts:
                label = '%s GET %d cut at %d/%d' % (e, n_cut, cut, total)

                def fn(n, m, r, d, cut=cut, n_cut=n_cut):
                    a = Answer.ranged(m, r, d)
                    if n == n_cut:
                        a.cut = cut
                    return a
                out, rc, srv, _ = read_all(env, cli, data, fn, e)
                # a kept connection closed before the first byte of the answer (curl: before
                # the status line's end) is the server's idle close: the request is sent again
                # on a new connection, not counted as an attempt; any other cut is one
                silent = kept and (cut == 0 or (e == 'curl' and cut < status_len))
                attempts = 6 if silent else 7
                base = 1 if e == 'curl' else 2
                # a cut in the head is no short body (no body began), for both engines
                short = 1 if cut >= head_len else 0
                check_case(ck, label, out, rc, srv, data, attempts, short, base + 1)
                ck.eq('%s: server requests' % label, srv.requests, 7)
    # every GET cut at one place of its head: both engines fail the read with the same words
    # (a retry budget of 1 s), none counts a short body
    for name, cut in (('in the status line', 5), ('in the headers', status_len + 10),
                      ('2 bytes before the head\'s end', -2)):
        said = {}
        for e in ENGINES:
            def fn(n, m, r, d, cut=cut):
                a = Answer.ranged(m, r, d)
                if m == 'GET':
                    a.cut = cut if cut > 0 else a.raw.index(b'\r\n\r\n') + 4 + cut
                return a
            srv = Scripted(data, fn)
            env.env['REQ_CLI_ENGINE'] = e
            try:
                r = env.run([cli, srv.url('o/x.bin'), 'x.bin', str(OFF), str(LEN), '1', '1',
                             '1'], timeout=120)
            finally:
                srv.close()
                env.env.pop('REQ_CLI_ENGINE', None)
            out = dict(ln.partition(' ')[::2] for ln in r.stdout.decode().splitlines())
            said[e] = re.sub(r'^0 GET http://127\.0\.0\.1:\d+/', '', out.get('error', ''))
            ck.eq('%s every GET cut %s: exit, short bodies' % (e, name),
                  (r.returncode, out.get('short_bodies')), (1, '0'))
        log('every GET cut %s: %r' % (name, said))
        ck.eq('every GET cut %s: the same words from both engines' % name, said['auto'],
              said['curl'])
        if cut != 5:
            ck.eq('every GET cut %s: the words' % name, said['curl'],
                  "o/x.bin: HTTP 206: the connection closed inside the answer's headers")


def group_encoding(env, ck, cli, data):
    text = b''.join(b'line %08d of a text member\n' % i for i in range(12000))

    def gz200(n, m, r, d):
        if m != 'GET':
            return None
        body = gzip.compress(d, mtime=0)
        return Answer(Answer.head(b'200 OK', [b'Content-Length: %d' % len(body),
                                              b'Content-Encoding: gzip', b'ETag: "e1"']) + body)

    def gz206(n, m, r, d):
        if m != 'GET' or not r:
            return None
        a, b = r
        body = gzip.compress(d[a:b + 1], mtime=0)
        return Answer(Answer.head(b'206 Partial Content', [
            b'Content-Range: bytes %d-%d/%d' % (a, b, len(d)), b'Content-Length: %d' % len(body),
            b'Content-Encoding: gzip', b'ETag: "e1"']) + body)

    def grown(n, m, r, d):
        dd = d if n < 3 else d[:50000] + b'X' * 100 + d[50000:]
        if not r:
            return Answer(Answer.head(b'200 OK', [b'Content-Length: %d' % len(dd)]) +
                          (b'' if m == 'HEAD' else dd))
        a, b = r[0], min(r[1], len(dd) - 1)
        return Answer(Answer.head(b'206 Partial Content', [
            b'Content-Range: bytes %d-%d/%d' % (a, b, len(dd)),
            b'Content-Length: %d' % (b - a + 1)]) + dd[a:b + 1])

    # nginx with gzip_static always and a .gz beside the object: its bytes, Content-Encoding:
    # gzip, 200 to every range (a mount shows the .gz bytes as the raw .tar)
    src = env.path('gzsrc')
    os.makedirs(src)
    with open(os.path.join(src, 'x.bin'), 'wb') as f:
        f.write(text)
    with open(os.path.join(src, 'x.bin.gz'), 'wb') as f:
        f.write(gzip.compress(text, mtime=0))
    for d, _, files in os.walk(env.tmp):
        os.chmod(d, 0o755)
        for fn in files:
            os.chmod(os.path.join(d, fn), 0o644)
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        for e in ENGINES:
            env.env['REQ_CLI_ENGINE'] = e
            r = env.run([cli, ng.url('gzstatic/x.bin'), 'x.bin', str(OFF), str(LEN), str(COUNT),
                         '1', '5'], timeout=120)
            env.env.pop('REQ_CLI_ENGINE', None)
            out = dict(ln.partition(' ')[::2] for ln in r.stdout.decode().splitlines())
            err = r.stderr.decode(errors='replace')
            log('%s nginx gzip_static: exit %d %r %s' % (e, r.returncode, out, err.strip()[-600:]))
            if r.returncode == 0:
                ck.eq('%s nginx gzip_static: bytes when the read succeeds' % e, out.get('fnv'),
                      want_fnv(text))
        # through a mount: the shard x.tar (X.gz beside it) is its bytes or an error that the
        # log explains
        os.rename(os.path.join(src, 'x.bin'), os.path.join(src, 'x.tar'))
        os.rename(os.path.join(src, 'x.bin.gz'), os.path.join(src, 'x.tar.gz'))
        logf = env.path('daemon.log')
        with ml.Mount(env, ng.url('gzstatic/{x,y}.tar'), cache_dir=env.path('cache'),
                      extra=['--log-file', logf, '--warm', 'off']) as m:
            try:
                with open(os.path.join(m.mnt, 'x.tar'), 'rb') as f:
                    got = f.read()
                ck.ok(got == text, 'mount, nginx gzip_static: x.tar read %d bytes, not its own'
                      % len(got))
            except OSError as ex:
                with open(logf, errors='replace') as f:
                    lg = f.read()
                log('mount, nginx gzip_static: %s; log:\n%s' % (ex, lg[-1500:]))
                ck.ok('Content-Encoding' in lg, 'mount, nginx gzip_static: the read failed '
                      '(%s) and the log does not name Content-Encoding' % ex)
    finally:
        ng.stop()
    for e in ENGINES:
        for name, obj, fn in (('gzip 200', data, gz200), ('gzip 206', text, gz206),
                              ('no etag, grown', data, grown)):
            label = '%s %s' % (e, name)
            out, rc, srv, err = read_all(env, cli, obj, fn, e)
            # req_cli shows no request's error text: failing is the answer here (the mount's
            # log line is checked above)
            if rc == 0:
                ck.eq('%s: bytes when the read succeeds' % label, out.get('fnv'), want_fnv(obj))
            else:
                ck.ok(out.get('failures', 0) >= 0, '%s: failed' % label)


def make_shard(path, rng, n):
    """A GNU tar of n members m00.bin.. of 200-600 KB seeded random bytes: {name: bytes}."""
    members = {}
    with tarfile.open(path, 'w', format=tarfile.GNU_FORMAT) as t:
        for k in range(n):
            b = bytes(rng.getrandbits(8) for _ in range(rng.randrange(200000, 600000)))
            members['m%02d.bin' % k] = b
            ti = tarfile.TarInfo('m%02d.bin' % k)
            ti.size = len(b)
            t.addfile(ti, io.BytesIO(b))
    return members


def group_nometag(env, ck, cli, data):
    """Python's http.server (python3 -m http.server: no ETag, Last-Modified to the second,
    Range ignored: a 200 of the whole file to every read) serving a.tar; a mount of
    http://.../{a,b}.tar with --cache-size 2M reads 2 members, then a.tar is replaced by rename
    with another tar (other member sizes: another object size); every member read then must be
    the old version's bytes or fail (ESTALE, EIO), never other bytes. On main 9 of the 12 are
    other bytes, exit 0."""
    srcd = env.path('pysrc')
    os.makedirs(srcd)
    old = make_shard(os.path.join(srcd, 'a.tar'), env.rng, 12)
    new = make_shard(env.path('new.tar'), env.rng, 12)
    port = net.free_port()
    srv = subprocess.Popen([sys.executable, '-m', 'http.server', '--bind', '127.0.0.1',
                            '--directory', srcd, str(port)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        net.wait_port(port, srv)
        url = 'http://127.0.0.1:%d/{a,b}.tar' % port
        with ml.Mount(env, url, cache_dir=env.path('cache'),
                      extra=['--cache-size', '2M', '--warm', 'off']) as m:
            d = os.path.join(m.mnt, 'a')
            ck.eq('members listed', sorted(os.listdir(d)), sorted(old))
            for k in ('m00.bin', 'm01.bin'):
                with open(os.path.join(d, k), 'rb') as f:
                    ck.ok(f.read() == old[k], 'before the change: %s differs' % k)
            os.replace(env.path('new.tar'), os.path.join(srcd, 'a.tar'))
            res = {}
            for k in sorted(old):
                try:
                    with open(os.path.join(d, k), 'rb') as f:
                        got = f.read()
                    r = 'old' if got == old[k] else 'new' if got == new.get(k) else 'other'
                except OSError as e:
                    r = errno.errorcode.get(e.errno, str(e.errno))
                res[r] = res.get(r, 0) + 1
            log('after the change: %r' % res)
            ck.eq('after the change: members read as other bytes', res.get('other', 0), 0)
    finally:
        net.stop_process(srv)


def group_mountcuts(env, ck, cli, data):
    """Through a mount (the cache tier's fills, whose sink offers its own memory to the lean
    engine): a 12 MiB object read whole as a shard's raw .tar (--chunk-size 1M: 13 ranged
    GETs), the scripted server cutting every second GET it receives at one class of offset
    (before its first byte, in the status line, in the headers, 2 bytes before the head's end,
    1 byte into the body, halfway, 1 byte short). Each cut answer is asked for again (and cut
    again when it is an even one), so the server gets 2 x 13 - 1 = 25 GETs and cuts 12 of
    them, in any order of arrival. Exact bytes, read_errors, fill_errors and store_failures 0;
    store_short_bodies 12 for the cuts in the body and 0 for the cuts in the head (both
    engines: no body began; curl counted some of those before xfer_done looked at hdr_done)."""
    big = bytes(env.rng.getrandbits(8) for _ in range(1 << 20)) * 12
    classes = ('none', 'status', 'header', 'head end', 'body 1', 'half', 'last')
    for e in ENGINES:
        for cls in classes:
            label = '%s mount cut %s' % (e, cls)
            gets = [0]

            def fn(n, m, r, d, cls=cls, gets=gets):
                a = Answer.ranged(m, r, d)
                if m != 'GET' or not r:
                    return a
                with lock:
                    gets[0] += 1
                    g = gets[0]
                if g % 2 == 0:
                    hl = a.raw.index(b'\r\n\r\n') + 4
                    a.cut = {'none': 0, 'status': 5, 'header': 40, 'head end': hl - 2,
                             'body 1': hl + 1, 'half': hl + (len(a.raw) - hl) // 2,
                             'last': len(a.raw) - 1}[cls]
                return a
            srv = Scripted(big, fn)
            try:
                with ml.Mount(env, srv.url('{a,b}.tar'), cache_dir=env.path('c-%s-%s' % (
                        e, cls.replace(' ', ''))), extra=['--http-engine', e, '--chunk-size',
                                                          '1M', '--warm', 'off']) as m:
                    try:
                        with open(os.path.join(m.mnt, 'a.tar'), 'rb') as f:
                            got = f.read()
                        ck.ok(got == big, '%s: a.tar read %d bytes, not its own' % (
                            label, len(got)))
                    except OSError as ex:
                        ck.fail('%s: a.tar: %s' % (label, ex))
                    st = m.stats()
            finally:
                srv.close()
            log('%s: %d GETs, %r' % (label, gets[0], {k: st.get(k) for k in (
                'store_attempts', 'store_lean_attempts', 'store_short_bodies', 'store_failures',
                'read_errors', 'fill_errors')}))
            ck.eq('%s: GETs' % label, gets[0], 25)
            ck.eq('%s: read_errors, fill_errors, store_failures' % label,
                  (st.get('read_errors'), st.get('fill_errors'), st.get('store_failures')),
                  (0, 0, 0))
            if cls in ('body 1', 'half', 'last'):
                ck.eq('%s: store_short_bodies' % label, st.get('store_short_bodies'), 12)
            else:
                ck.eq('%s: store_short_bodies' % label, st.get('store_short_bodies'), 0)
            if e == 'auto':
                ck.ok(st.get('store_lean_attempts', 0) > 0, '%s: no lean attempt' % label)


def bad_206(name, rng, d):
    """The answer of case name (REASONS) to a ranged GET of rng."""
    a, b = rng
    ok = Answer.ranged('GET', rng, d)
    if name == 'shifted':  # an honest 206 of another range
        return Answer.ranged('GET', (a + 512, b + 512), d)
    if name == 'ends early':  # a 206 that stops before the range's end and the object's
        return Answer.ranged('GET', (a, a + (b - a) // 2), d)
    if name == 'no content-range':
        ok.raw = re.sub(rb'Content-Range: [^\r]*\r\n', b'', ok.raw, count=1)
        return ok
    if name == 'longer than its range':
        body = d[a:b + 1] + d[b + 1:b + 1001]
        return Answer(Answer.head(b'206 Partial Content', [
            b'Content-Range: bytes %d-%d/%d' % (a, b, len(d)),
            b'Content-Length: %d' % len(body), b'ETag: "e1"']) + body)
    if name == '204':
        return Answer(Answer.head(b'204 No Content', [b'ETag: "e1"']))
    if name == 'multipart':
        part = d[a:b + 1]
        mp = (b'--B0UND\r\nContent-Type: application/octet-stream\r\n'
              b'Content-Range: bytes %d-%d/%d\r\n\r\n' % (a, b, len(d)) + part +
              b'\r\n--B0UND--\r\n')
        return Answer(Answer.head(b'206 Partial Content', [
            b'Content-Type: multipart/byteranges; boundary=B0UND',
            b'Content-Length: %d' % len(mp), b'ETag: "e1"']) + mp)
    if name == '200 of the range':  # the range's bytes labelled 200, with its Content-Range
        return Answer(Answer.head(b'200 OK', [
            b'Content-Range: bytes %d-%d/%d' % (a, b, len(d)),
            b'Content-Length: %d' % (b - a + 1), b'ETag: "e1"']) + d[a:b + 1])
    raise ValueError(name)


REASONS = ('shifted', 'ends early', 'no content-range', 'longer than its range', '204',
           'multipart', '200 of the range')


def group_reasons(env, ck, cli, data):
    """Answers to a ranged GET that are not the range, through a mount: each read fails with
    EIO and the daemon's log says why (the status and what is wrong with it), not only
    "Input/output error". One object per case (s0.tar..s5.tar of one brace pattern, 2 MiB
    each, --chunk-size 64K); every ranged GET from 1 MiB on is answered so, the rest
    correctly; a 4096-byte pread at 1 MiB + 100 of each raw .tar."""
    obj = bytes(env.rng.getrandbits(8) for _ in range(1 << 16)) * 32

    def fn(n, m, r, d, path):
        mm = re.search(r'/s(\d)\.tar$', path)
        if m != 'GET' or not r or not mm or r[0] < (1 << 20):
            return None
        return bad_206(REASONS[int(mm.group(1))], r, d)
    srv = Scripted(obj, fn, with_path=True)
    logf = env.path('daemon.log')
    try:
        with ml.Mount(env, srv.url('s{0..%d}.tar' % (len(REASONS) - 1)),
                      cache_dir=env.path('cache'),
                      extra=['--chunk-size', '64K', '--warm', 'off', '--prefetch-shards', '0',
                             '--retry-budget', '2', '--log-file', logf]) as m:
            for i, name in enumerate(REASONS):
                fd = os.open(os.path.join(m.mnt, 's%d.tar' % i), os.O_RDONLY)
                try:
                    got = os.pread(fd, 4096, (1 << 20) + 100)
                    ck.fail('%s: the read returned %d bytes%s' % (
                        name, len(got), '' if got != obj[(1 << 20) + 100:][:4096] else
                        ' (the right ones)'))
                except OSError as e:
                    ck.eq('%s: errno' % name, errno.errorcode.get(e.errno), 'EIO')
                finally:
                    os.close(fd)
    finally:
        srv.close()
    with open(logf, errors='replace') as f:
        text = f.read()
    for i, name in enumerate(REASONS):
        lines = [ln for ln in text.splitlines() if 's%d.tar' % i in ln and 'failed' in ln]
        log('%s: %s' % (name, lines))
        ck.ok(any(re.search(r'HTTP 20[046]', ln) for ln in lines),
              '%s: no log line of s%d.tar names the status and the cause: %r' % (
                  name, i, lines))


lock = threading.Lock()


def chunk_frame(body, parts=2):
    """body in chunked framing: parts chunks, then the last chunk."""
    step = max(1, -(-len(body) // parts))
    return b''.join(b'%x\r\n' % len(body[i:i + step]) + body[i:i + step] + b'\r\n'
                    for i in range(0, len(body), step)) + b'0\r\n\r\n'


def group_coded(env, ck, cli, data):
    def whole_coded(n, m, r, d):
        if m != 'GET':
            return None
        return Answer(Answer.head(b'200 OK', [b'Transfer-Encoding: chunked',
                                              b'Content-Length: 7', b'ETag: "e1"']) +
                      chunk_frame(d, 3))
    for e in ENGINES:
        out, rc, srv, err = read_all(env, cli, data, whole_coded, e)
        label = '%s 200 chunked with Content-Length: 7' % e
        ck.eq('%s: exit' % label, rc, 0)
        ck.eq('%s: fnv' % label, out.get('fnv'), want_fnv(data))
        ck.eq('%s: failures' % label, out.get('failures'), 0)
        ck.ok('it changed' not in err, '%s: logged as a changed object' % label)

    # a mount of a listing the refresh reads through two answers of different lengths
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w', format=tarfile.GNU_FORMAT) as t:
        ti = tarfile.TarInfo('k.txt')
        ti.size = 5
        t.addfile(ti, io.BytesIO(b'hello'))
    shard = buf.getvalue()
    listing = (b'[\n{ "name":"a.tar", "type":"file", "mtime":"Mon, 30 Nov 2026 09:00:00 GMT", '
               b'"size":%d }\n]\n' % len(shard))
    phase = {'refresh': False, 'lists': 0, 'ranged': 0}

    # the shard's answers carry the ETag nginx gives it (the listing's mtime and size in hex)
    etag = b'ETag: "%x-%x"' % (1796029200, len(shard))

    def fn(n, m, r, d, path):
        if not path.endswith('/'):  # the shard
            a = Answer.ranged(m, r, d)
            a.raw = a.raw.replace(b'ETag: "e1"', etag, 1)
            return a
        with lock:
            phase['lists'] += 1
            phase['ranged'] += r is not None
            k = phase['lists']
        hdrs = [b'Content-Type: application/json', b'Transfer-Encoding: chunked']
        if not phase['refresh']:
            return Answer(Answer.head(b'200 OK', hdrs) + chunk_frame(listing))
        framed = chunk_frame(listing, 4)
        if k == 1:  # the first attempt: cut in its body, a length beside the chunks
            a = Answer(Answer.head(b'200 OK', hdrs + [b'Content-Length: 40']) + framed)
            a.cut = a.raw.index(b'\r\n\r\n') + 4 + len(framed) // 2
            return a
        # the next attempt: the whole listing, another length beside it
        return Answer(Answer.head(b'200 OK', hdrs + [b'Content-Length: 60']) + framed)
    srv = Scripted(shard, fn, with_path=True)
    try:
        with ml.Mount(env, srv.url('d/'), cache_dir=env.path('cache-coded'),
                      extra=['--warm', 'off', '--stall-timeout', '5']) as m:
            ck.eq('coded listing: mounted entries', sorted(os.listdir(m.mnt)), ['a', 'a.tar'])
            with lock:
                phase['refresh'] = True
                phase['lists'] = phase['ranged'] = 0
            r = env.run([env.shardfs, 'refresh', m.mnt], timeout=120)
            out = r.stdout.decode(errors='replace').strip()
            log('coded listing: refresh rc %r %s %s; %r' % (
                r.returncode, out, r.stderr.decode(errors='replace').strip(), phase))
            ck.eq('coded listing: refresh exit', r.returncode, 0)
            ck.ok(out.endswith(': 0 new, 0 removed, 0 changed; 1 object, 1 shard'),
                  'coded listing: refresh said %r' % out)
            with open(os.path.join(m.mnt, 'a', 'k.txt'), 'rb') as f:
                ck.eq('coded listing: member after the refresh', f.read(), b'hello')
            logtext = ml.logs_under(env.path('cache-coded'))
            ck.ok('it changed' not in logtext, 'coded listing: the daemon logged a changed object')
        # the first attempt, cut, and its restart from the first byte (no ETag pins a
        # listing: asked for whole again, not resumed with a Range)
        ck.eq('coded listing: listing requests (ranged) in the refresh',
              (phase['lists'], phase['ranged']), (2, 0))
    finally:
        srv.close()


def group_splice(env, ck, cli, data):
    """A body no strong ETag pins, cut, and another copy of it in the next answer: never
    spliced. (a) A mount's JSON listing (nginx's: chunked, no ETag, no length, Range ignored)
    cut in the middle of its first name, the directory changed before the second answer: the
    mount shows exactly the second copy's names, store_restarts 1, the second listing request
    asks for the whole body (no Range). (b) a streamed ranged read (req_cli: the sink passed the
    bytes on) of an object with no ETag, cut halfway, its bytes changed (same size) before the
    next answer: the read fails with "not resumed" in its words, restarts 0, the other reads
    are the new bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w', format=tarfile.GNU_FORMAT) as t:
        ti = tarfile.TarInfo('k.txt')
        ti.size = 5
        t.addfile(ti, io.BytesIO(b'hello'))
    shard = buf.getvalue()

    def listing(name):
        return (b'[\n{ "name":"%s", "type":"file", "mtime":"Mon, 30 Nov 2026 09:00:00 GMT", '
                b'"size":%d },\n{ "name":"keep.tar", "type":"file", '
                b'"mtime":"Mon, 30 Nov 2026 09:00:00 GMT", "size":%d }\n]\n' % (
                    name, len(shard), len(shard)))
    first, second = listing(b'old-000000000000.tar'), listing(b'new-111111111111.tar')
    assert len(first) == len(second)
    phase = {'lists': 0, 'ranged': 0}

    def fn(n, m, r, d, path):
        if not path.endswith('/'):  # a shard: every name is the same bytes, nginx's ETag
            a = Answer.ranged(m, r, d)
            a.raw = a.raw.replace(b'ETag: "e1"', b'ETag: "%x-%x"' % (1796029200, len(d)), 1)
            return a
        with lock:
            k = phase['lists']
            phase['lists'] += 1
            phase['ranged'] += r is not None
        hdrs = [b'Content-Type: application/json', b'Transfer-Encoding: chunked']
        if k == 0:  # cut in the middle of the first name
            framed = chunk_frame(first, 4)
            a = Answer(Answer.head(b'200 OK', hdrs) + framed)
            a.cut = a.raw.index(b'old-000000') + 10
            return a
        return Answer(Answer.head(b'200 OK', hdrs) + chunk_frame(second, 4))
    srv = Scripted(shard, fn, with_path=True)
    try:
        with ml.Mount(env, srv.url('d/'), cache_dir=env.path('cache-splice'),
                      extra=['--warm', 'off', '--stall-timeout', '5']) as m:
            names = sorted(os.listdir(m.mnt))
            st = m.stats()
            log('splice listing: %r, %r, store_restarts %r' % (names, phase,
                                                                 st.get('store_restarts')))
            ck.eq('splice listing: mounted entries (the second copy)', names,
                  ['keep', 'keep.tar', 'new-111111111111', 'new-111111111111.tar'])
            try:
                with open(os.path.join(m.mnt, 'new-111111111111', 'k.txt'), 'rb') as f:
                    got = f.read()
            except OSError as e:
                got = 'error %s' % errno.errorcode.get(e.errno, e.errno)
            ck.eq('splice listing: a member of the second copy', got, b'hello')
            ck.eq('splice listing: store_restarts', st.get('store_restarts'), 1)
        ck.eq('splice listing: listing requests (ranged)', (phase['lists'], phase['ranged']),
              (2, 0))
    finally:
        srv.close()

    # (b) a streamed read of an object with no ETag, cut, changed before the next answer
    other = bytes(b ^ 0x5a for b in data)

    def noetag(n, m, r, d):
        a = Answer.ranged(m, r, d if n == 0 else other)
        a.raw = a.raw.replace(b'ETag: "e1"\r\n', b'', 1)
        if n == 0:
            a.cut = a.raw.index(b'\r\n\r\n') + 4 + LEN // 2
        return a
    env.env['REQ_CLI_SIZE'] = str(len(data))  # no HEAD: the first GET is request 0
    try:
        for e in ENGINES:
            out, rc, srv, err = read_all(env, cli, data, noetag, e)
            label = '%s streamed read, no ETag, cut' % e
            ck.eq('%s: exit, errors' % label, (rc, out.get('errors')), (1, 1))
            ck.ok('not resumed' in str(out.get('error')), '%s: the failure says %r' % (
                label, out.get('error')))
            ck.eq('%s: restarts' % label, out.get('restarts'), 0)
            ck.eq('%s: bytes of the other reads' % label, out.get('bytes'), (COUNT - 1) * LEN)
            ck.eq('%s: fnv of the other reads (the new bytes)' % label, out.get('fnv'),
                  fnv64(b''.join(other[OFF + i * LEN:OFF + (i + 1) * LEN]
                                 for i in range(1, COUNT))))
    finally:
        env.env.pop('REQ_CLI_SIZE', None)


GROUPS = {'splice': group_splice, 'framing': group_framing, 'cuts': group_cuts, 'encoding': group_encoding,
          'unsup': group_unsup, 'coded': group_coded,
          'nometag': group_nometag, 'mountcuts': group_mountcuts, 'reasons': group_reasons}


def run_group(env, ck, group, cli):
    data = bytes(env.rng.getrandbits(8) for _ in range(300000))
    GROUPS[group](env, ck, cli, data)


def main():
    if len(sys.argv) != 4 or sys.argv[2] not in GROUPS:
        print(__doc__)
        return 2
    ml.main_wrapper(run_group, sys.argv[1], 'answers-' + sys.argv[2], deadline=170,
                    needs_fuse=sys.argv[2] in ('nometag', 'mountcuts', 'reasons', 'coded', 'splice'),
                    group=sys.argv[2], cli=sys.argv[3])


if __name__ == '__main__':
    sys.exit(main())
