"""The link emulator itself (tests/lib/linkemu.c, started by shardfs_test.linkemu.Emu): exact
status, headers and bytes of every answer, and exact counts of requests.

usage: test_linkemu.py SHARDFS GROUP
  root  a directory of seeded files (empty, one byte, 300 KB, names with a space, a quote and
        non-ASCII, a subdirectory, a symlink): GET whole, ranges A-B, A-, -N, past the end
        (clamped), 416 (start at or past the size, B < A) with "Content-Range: bytes */SIZE",
        HEAD (headers, no body), If-Match (the ETag, '*', a list holding it: 200; another: 412),
        nginx's ETag and Last-Modified from the file's stat, 404, 403 for '..' out of the root,
        the JSON autoindex byte for byte as linkemu.py's, all on one keep-alive connection;
        two requests pipelined in one write; HTTP/1.0 and Connection: close close after the
        answer; a file served, then rewritten in place, replaced by another inode of the same
        size and mtime (while another connection is mid-way through 12 MB of the old one:
        the old bytes to its end, the new ones to the next request), removed (404) and made
        again (the emulator keeps served files open between requests); 400 (malformed), 431 (a head over 16 KiB), 501 (POST); /__stats: requests
        (exactly those answered after the delay), connections, bytes_sent (exactly the body
        bytes), cpu_s
  s3    S3 mode (a bucket of 2,345 generated keys): ListObjectsV2 pages (max-keys, prefix,
        start-after, continuation tokens followed to the end) byte for byte as linkemu.py's
        S3Pattern builds them, bad tokens, list-type and delimiter refused; HEAD and GET of keys
        (the template's bytes then 512 * (i % 8) zeros), ranges across the zeros, 412, 416, 400
        for a suffix range, NoSuchKey, NoSuchBucket; the counters list_requests, heads, gets,
        other, list_bytes, requests, bytes_sent exact
  ais   AIS mode (--ais) against the Python AisStandIn (root mode) on the same files: GetBatch
        (the proxy's 307, the target's chunked TAR byte for byte as AisStandIn's and as built
        here from the files: whole objects, ranges, to the end, an empty file, a missing
        object with coer (__404__/) and without (404), onob off, a name split into a USTAR
        prefix; 416 for ranges past the end; 400 for what the stand-in refuses), requests
        pipelined in one write and each with its body in a write of its own; HEAD and the
        listing as AisStandIn's; object GETs redirected here, or to --ais-objects-port; the
        moss_* counters exact; 3 answers held on the link by clients that do not read (a
        handshake: exact in-flight counts, then lower bounds of the pacing only)
  aisgen  generated GetBatch requests (seeded: 400 a run, SHARDFS_TEST_SEED replays one), each
        sent to the C stand-in and to AisStandIn: the same status, and the same TAR bytes when
        200. Entries of the files, of missing, odd and hostile names ('..', '/', '', a NUL,
        a lone surrogate, 99 bytes), start and length of every JSON kind (bools, floats,
        strings, null, past int64), flags of other kinds, bodies cut, nested, with duplicate
        keys or trailing bytes. Failed before both refused what AIStore's int64 fields do not
        decode (AisStandIn took true as 1 and numbers past int64) and names with a NUL (the C
        one cut the name there) or a lone surrogate (AisStandIn's thread died on it): seed
        20240611: 12 of 400 answered apart, seed 2: 8; seeds 1 and 3: AisStandIn died
File contents and the requests' ranges come from a seed (SHARDFS_TEST_SEED, printed). The delay is
30 ms and the rate 60 MB/s (the benches' link) but nothing here is timed against an upper
bound (ais's held answers check lower bounds of the pacing, which load only makes longer).
LINKEMU_IMPL=python runs the same checks on linkemu.py's own server (the reference), apart from
those of answers it never gave (a malformed or oversized head, a bad range, CPU in the stats)."""

import email.utils
import hashlib
import http.client
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shardfs_test import linkemu  # noqa: E402
from shardfs_test import mount as ml  # noqa: E402

IMPL = os.environ.get('LINKEMU_IMPL', 'c')


def start(env, **kw):
    return linkemu.Emu(kw.pop('root', None), 30, 60, env.tmp, kw.pop('tag', 'test'),
                       shardfs=env.shardfs, impl=IMPL, **kw)


def raw_exchange(port, data, nresp):
    """Send data on a new connection, read nresp answers to GETs (status line, headers, a
    Content-Length body); returns [(status, headers dict, body)] and whether the server closed
    the connection after them."""
    s = socket.create_connection(('127.0.0.1', port), timeout=60)
    try:
        s.sendall(data)
        f = s.makefile('rb')
        out = []
        for _ in range(nresp):
            status = int(f.readline().split()[1])
            h = {}
            while True:
                ln = f.readline().decode('latin-1').rstrip('\r\n')
                if not ln:
                    break
                k, _, v = ln.partition(':')
                h[k.strip().lower()] = v.strip()
            out.append((status, h, f.read(int(h.get('content-length', '0')))))
        try:
            return out, f.read(1) == b''
        except ConnectionResetError:  # closed with the rest of our request unread
            return out, True
    finally:
        s.close()


class Client:
    """One keep-alive connection; counts the requests it sends (not /__stats)."""

    def __init__(self, port):
        self.c = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
        self.sent = 0
        self.body_bytes = 0

    def req(self, method, path, headers=None):
        self.c.request(method, path, headers=headers or {})
        r = self.c.getresponse()
        body = r.read()
        self.sent += 1
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body

    def close(self):
        self.c.close()


def etag_of(path):
    st = os.stat(path)
    return '"%x-%x"' % (int(st.st_mtime), st.st_size), \
        email.utils.formatdate(st.st_mtime, usegmt=True)


def check_range(ck, cl, what, path, url, data, rng, want, emu_counts):
    """GET url with Range rng: want is (start, end) of data, or None for 416."""
    code, h, body = cl.req('GET', url, {'Range': rng})
    size = len(data)
    if want is None:
        ck.eq('%s %s: status' % (what, rng), code, 416)
        ck.eq('%s %s: Content-Range' % (what, rng), h.get('content-range'), 'bytes */%d' % size)
        ck.eq('%s %s: body' % (what, rng), body, b'')
        return
    a, b = want
    ck.eq('%s %s: status' % (what, rng), code, 206)
    ck.eq('%s %s: Content-Range' % (what, rng), h.get('content-range'),
          'bytes %d-%d/%d' % (a, b - 1, size))
    ck.eq('%s %s: Content-Length' % (what, rng), h.get('content-length'), str(b - a))
    ck.eq('%s %s: bytes' % (what, rng), body, data[a:b])
    emu_counts['bytes'] += b - a


def group_root(env, ck):
    rng = env.rng
    root = env.path('root')
    os.makedirs(os.path.join(root, 'sub', 'deeper'))
    files = {'empty.bin': b'', 'one.bin': b'x',
             'big.tar': bytes(rng.getrandbits(8) for _ in range(300000)),
             'with space.bin': b'a b\n', 'quo"te.bin': b'q', 'caf\u00e9-\U0001f600.bin': b'uni',
             'sub/inner.bin': bytes(rng.getrandbits(8) for _ in range(5000))}
    for n, d in files.items():
        ml.write_file(os.path.join(root, n), d)
    os.symlink('big.tar', os.path.join(root, 'link.tar'))
    emu = start(env, root=root, tag='root')
    counts = {'bytes': 0}
    cl = Client(emu.port)
    try:
        big = files['big.tar']
        p = os.path.join(root, 'big.tar')
        etag, lm = etag_of(p)
        code, h, body = cl.req('GET', '/big.tar')
        ck.eq('GET big.tar: status', code, 200)
        ck.eq('GET big.tar: bytes', body, big)
        counts['bytes'] += len(big)
        ck.eq('GET big.tar: ETag', h.get('etag'), etag)
        ck.eq('GET big.tar: Last-Modified', h.get('last-modified'), lm)
        ck.eq('GET big.tar: Accept-Ranges', h.get('accept-ranges'), 'bytes')
        ck.eq('GET big.tar: Content-Length', h.get('content-length'), str(len(big)))
        ck.ok('content-range' not in h, 'GET big.tar: no Content-Range on a 200')
        n = len(big)
        cases = [('bytes=0-0', (0, 1)), ('bytes=0-%d' % (n - 1), (0, n)),
                 ('bytes=%d-' % (n - 1), (n - 1, n)), ('bytes=-1', (n - 1, n)),
                 ('bytes=-%d' % (n + 50), (0, n)), ('bytes=100-%d' % (n + 999), (100, n)),
                 ('bytes=%d-' % n, None), ('bytes=%d-%d' % (n + 5, n + 9), None),
                 ('bytes=10-9', None), ('bytes=-0', None)]
        for _ in range(20):
            a = rng.randrange(n)
            b = rng.randrange(a, n)
            cases.append(('bytes=%d-%d' % (a, b), (a, b + 1)))
        for r, want in cases:
            check_range(ck, cl, 'big.tar', p, '/big.tar', big, r, want, counts)
        for name in ('empty.bin', 'one.bin', 'with space.bin', 'quo"te.bin',
                     'caf\u00e9-\U0001f600.bin', 'sub/inner.bin'):
            from urllib.parse import quote
            code, h, body = cl.req('GET', '/' + quote(name))
            ck.eq('GET %r: status' % name, code, 200)
            ck.eq('GET %r: bytes' % name, body, files[name])
            ck.eq('GET %r: ETag' % name, h.get('etag'), etag_of(os.path.join(root, name))[0])
            counts['bytes'] += len(files[name])
        check_range(ck, cl, 'empty.bin', None, '/empty.bin', b'', 'bytes=0-', None, counts)
        code, h, body = cl.req('GET', '/link.tar', {'Range': 'bytes=5-9'})
        ck.eq('symlink: bytes of its target', (code, body), (206, big[5:10]))
        counts['bytes'] += 5
        code, h, body = cl.req('HEAD', '/big.tar')
        ck.eq('HEAD: status, Content-Length, ETag, body', (code, h.get('content-length'),
                                                          h.get('etag'), body),
              (200, str(n), etag, b''))
        code, h, body = cl.req('HEAD', '/big.tar', {'Range': 'bytes=10-19'})
        ck.eq('HEAD with a range', (code, h.get('content-length'), h.get('content-range'),
                                    body), (206, '10', 'bytes 10-19/%d' % n, b''))
        for im, want in ((etag, 200), ('*', 200), ('"0-0", %s , "1-1"' % etag, 200),
                         ('"0-0"', 412), (etag[:-2] + '"', 412)):
            code, h, body = cl.req('GET', '/one.bin', {'If-Match': im.replace(
                etag, etag_of(os.path.join(root, 'one.bin'))[0])})
            ck.eq('If-Match %s: status' % im, code, want)
            ck.eq('If-Match %s: body' % im, body, b'x' if want == 200 else b'')
            counts['bytes'] += len(body)
        code, h, body = cl.req('GET', '/big.tar', {'If-Match': '"1-2"', 'Range': 'bytes=0-9'})
        ck.eq('If-Match wrong with a range: 412, no body', (code, body), (412, b''))
        ck.eq('missing file', cl.req('GET', '/nope.bin')[0], 404)
        ck.eq("'..' out of the root", cl.req('GET', '/sub/../../etc/passwd')[0], 403)
        code, _, body = cl.req('GET', '/sub/deeper/../inner.bin')
        ck.eq("'..' inside the root", (code, body), (200, files['sub/inner.bin']))
        counts['bytes'] += len(body)
        # the autoindex, byte for byte as linkemu.py's (json.dumps of sorted entries)
        for rel in ('/', '/sub/'):
            d = os.path.join(root, rel.strip('/'))
            ents = []
            for name in sorted(os.listdir(d)):
                st = os.stat(os.path.join(d, name))
                e = {'name': name, 'type': 'directory' if os.path.isdir(os.path.join(d, name))
                     else 'file', 'mtime': email.utils.formatdate(st.st_mtime, usegmt=True)}
                if e['type'] == 'file':
                    e['size'] = st.st_size
                ents.append(e)
            code, h, body = cl.req('GET', rel)
            ck.eq('autoindex %s: status, type' % rel, (code, h.get('content-type')),
                  (200, 'application/json'))
            ck.eq('autoindex %s: bytes' % rel, body, json.dumps(ents).encode())
            code, h, body = cl.req('HEAD', rel)
            ck.eq('HEAD autoindex %s' % rel, (code, h.get('content-length'), body),
                  (200, str(len(json.dumps(ents).encode())), b''))
        ck.eq('a file with a slash after it: the file', cl.req('GET', '/one.bin/')[2], b'x')
        counts['bytes'] += 1

        # two requests in one write: both answered, in order, on the connection
        two = (b'GET /one.bin HTTP/1.1\r\nHost: x\r\n\r\n'
               b'GET /big.tar HTTP/1.1\r\nHost: x\r\nRange: bytes=7-8\r\n\r\n')
        got, closed = raw_exchange(emu.port, two + b'GET /one.bin HTTP/1.1\r\n'
                                   b'Connection: close\r\n\r\n', 3)
        ck.eq('pipelined: answers', [(s, b) for s, _, b in got],
              [(200, b'x'), (206, big[7:9]), (200, b'x')])
        ck.ok(closed, 'Connection: close: closed after the answer')
        counts['bytes'] += 4
        got, closed = raw_exchange(emu.port, b'GET /one.bin HTTP/1.0\r\n\r\n', 1)
        ck.eq('HTTP/1.0: answer', (got[0][0], got[0][2]), (200, b'x'))
        ck.ok(closed, 'HTTP/1.0: closed after the answer')
        counts['bytes'] += 1
        # a file served, then changed under the emulator (it keeps served files open between
        # requests, linkemu.c's ofile): rewritten in place, replaced by another inode of the
        # same size and mtime (nginx's ETag the same: only the bytes tell), a range read while
        # another connection still sends from the old inode, removed, made again
        sw = os.path.join(root, 'swap.bin')
        ml.write_file(sw, b'one1')
        os.utime(sw, (1700000000, 1700000000))
        code, h, body = cl.req('GET', '/swap.bin')
        ck.eq('swap.bin first: status, bytes, ETag', (code, body, h.get('etag')),
              (200, b'one1', etag_of(sw)[0]))
        with open(sw, 'r+b') as f:  # in place: the same inode, another size and mtime
            f.write(b'two22')
        os.utime(sw, (1700000100, 1700000100))
        code, h, body = cl.req('GET', '/swap.bin')
        ck.eq('swap.bin rewritten in place: status, bytes, ETag, Last-Modified',
              (code, body, h.get('etag'), h.get('last-modified')),
              (200, b'two22', etag_of(sw)[0], etag_of(sw)[1]))
        # a body still being sent over the swap: 12 MB, more than the socket buffers hold
        # while this side reads none of it, so the emulator is mid-sendfile when the other
        # connection's request finds the new inode and drops the old one from its table
        big_tail = os.path.join(root, 'slow.bin')
        slow = rng.randbytes(12000000)
        ml.write_file(big_tail, slow)
        s2 = socket.create_connection(('127.0.0.1', emu.port), timeout=60)
        s2.sendall(b'GET /slow.bin HTTP/1.1\r\nHost: x\r\n\r\n')
        f2 = s2.makefile('rb')
        ck.eq('slow.bin: status line', f2.readline(), b'HTTP/1.1 200 OK\r\n')
        tmp = os.path.join(root, 'slow.tmp')
        ml.write_file(tmp, bytes(len(slow)))
        os.rename(tmp, big_tail)  # another inode while the first answer is sent
        code, _, body = cl.req('GET', '/slow.bin', {'Range': 'bytes=0-9'})
        ck.eq('slow.bin while the old one is sent: the new inode\'s bytes', (code, body),
              (206, bytes(10)))
        while f2.readline() not in (b'\r\n', b''):
            pass
        ck.eq('slow.bin: the old inode\'s bytes to the end, replaced meanwhile',
              f2.read(len(slow)) == slow, True)
        s2.close()
        tmp = os.path.join(root, 'swap.tmp')
        ml.write_file(tmp, b'thr33')  # same size, same mtime: the same nginx ETag
        os.utime(tmp, (1700000100, 1700000100))
        os.rename(tmp, sw)
        code, h, body = cl.req('GET', '/swap.bin')
        ck.eq('swap.bin replaced by another inode of the same size and mtime: bytes, ETag',
              (code, body, h.get('etag')), (200, b'thr33', etag_of(sw)[0]))
        os.unlink(sw)
        ck.eq('swap.bin removed: 404', cl.req('GET', '/swap.bin')[0], 404)
        ml.write_file(sw, b'four')
        code, _, body = cl.req('GET', '/swap.bin', {'Range': 'bytes=1-2'})
        ck.eq('swap.bin made again: its bytes', (code, body), (206, b'ou'))
        counts['bytes'] += 4 + 5 + len(slow) + 10 + 5 + 2
        sent_delayed_extra = 1  # slow.bin's own connection
        sent_delayed = cl.sent + 3 + 1 + sent_delayed_extra  # the pipelined three, the HTTP/1.0 one, slow.bin's
        if IMPL == 'c':
            got, closed = raw_exchange(emu.port, b'GET nothing\r\n\r\n', 1)
            ck.eq('malformed request line: 400, closed', (got[0][0], closed), (400, True))
            got, closed = raw_exchange(emu.port, b'GET /one.bin HTTP/1.1\r\nX: ' +
                                       b'a' * 20000 + b'\r\n\r\n', 1)
            ck.eq('a head over 16 KiB: 431, closed', (got[0][0], closed), (431, True))
            got, closed = raw_exchange(emu.port, b'POST /one.bin HTTP/1.1\r\n'
                                       b'Content-Length: 0\r\n\r\n'
                                       b'GET /one.bin HTTP/1.1\r\nConnection: close\r\n\r\n',
                                       2)
            ck.eq('POST: 501, the next request answered', [(s, b) for s, _, b in got],
                  [(501, b''), (200, b'x')])
            counts['bytes'] += 1
            sent_delayed += 1
            code, h, body = cl.req('GET', '/big.tar', {'Range': 'bytes=x-3'})
            ck.eq('a range that is no number: the whole file', (code, len(body)), (200, n))
            counts['bytes'] += n
            sent_delayed += 1
        st = emu.stats()
        ck.eq('stats: requests (every one answered after the delay, not /__stats)',
              st['requests'], sent_delayed)
        ck.eq('stats: bytes_sent (the bodies of files)', st['bytes_sent'], counts['bytes'])
        if IMPL == 'c':
            ck.eq('stats: connections', st['connections'], 1 + 5 + 1 + 1)
            ck.ok(isinstance(st['cpu_s'], float) and st['cpu_s'] >= 0 and
                  abs(st['cpu_s'] - st['cpu_user_s'] - st['cpu_sys_s']) < 1e-5,
                  'stats: cpu_s = cpu_user_s + cpu_sys_s (%r)' % st)
        ck.eq('stats again: not counted', emu.stats()['requests'], sent_delayed)
    finally:
        cl.close()
        emu.stop()


def group_s3(env, ck):
    rng = env.rng
    tmpl = bytes(rng.getrandbits(8) for _ in range(7000))
    obj = env.path('template.tar')
    ml.write_file(obj, tmpl)
    N, bucket, prefix = 2345, 'bk', 'train/'
    emu = start(env, tag='s3', s3={'keys': N, 'object': obj, 'bucket': bucket,
                                   'prefix': prefix})
    ref = linkemu.S3Pattern(bucket, prefix, N, tmpl)
    cl = Client(emu.port)
    want = {'list_requests': 0, 'heads': 0, 'gets': 0, 'other': 0, 'list_bytes': 0}
    sent = 0
    try:
        def listing(query, q):
            code, h, body = cl.req('GET', '/%s?%s' % (bucket, query))
            wcode, wbody = ref.listing(q)
            ck.eq('list %s: status' % query, code, wcode)
            ck.eq('list %s: XML as S3Pattern\'s' % query, body, wbody)
            want['list_requests'] += 1
            want['list_bytes'] += len(body)
            return body
        # every page from the start, then by continuation token to the end
        import re
        tok, pages, keys = None, 0, []
        while True:
            q = {'list-type': '2', 'prefix': prefix}
            qs = 'list-type=2&prefix=train%2F'
            if tok:
                q['continuation-token'] = tok
                from urllib.parse import quote
                qs += '&continuation-token=' + quote(tok, safe='')
            body = listing(qs, q)
            pages += 1
            keys += re.findall(rb'<Key>([^<]*)</Key>', body)
            m = re.search(rb'<NextContinuationToken>([^<]*)<', body)
            if not m:
                break
            tok = m.group(1).decode()
        ck.eq('pages of 1000', pages, 3)
        ck.eq('every key listed once, in order', keys, [k.encode() for k in ref.keys])
        for qs, q in (('list-type=2&max-keys=7&prefix=train/shard-0011',
                       {'list-type': '2', 'max-keys': '7', 'prefix': 'train/shard-0011'}),
                      ('list-type=2&start-after=train/shard-002340.tar',
                       {'list-type': '2', 'start-after': 'train/shard-002340.tar'}),
                      ('list-type=2&max-keys=0', {'list-type': '2', 'max-keys': '0'}),
                      ('list-type=2&max-keys=5000&prefix=zzz',
                       {'list-type': '2', 'max-keys': '5000', 'prefix': 'zzz'}),
                      ('list-type=2&continuation-token=bm90IG91cnM%3D',
                       {'list-type': '2', 'continuation-token': 'not ours'}),
                      ('list-type=1', {'list-type': '1'}),
                      ('list-type=2&delimiter=%2F', {'list-type': '2', 'delimiter': '/'}),
                      ('list-type=2&max-keys=x', {'list-type': '2', 'max-keys': 'x'})):
            listing(qs, q)
        for _ in range(30):
            i = rng.randrange(N)
            key = prefix + 'shard-%06d.tar' % i
            size = ref.size(i)
            full = ref.data(i, 0, size)
            ck.eq('key %d: template then zeros' % i, full, tmpl + bytes(512 * (i % 8)))
            code, h, body = cl.req('HEAD', '/%s/%s' % (bucket, key))
            want['heads'] += 1
            ck.eq('HEAD %d' % i, (code, h.get('content-length'), h.get('etag'),
                                  h.get('last-modified'), body),
                  (200, str(size), ref.etag(i), 'Thu, 01 Jan 2026 00:00:00 GMT', b''))
            ck.eq('ETag %d: MD5 of "i:size"' % i, ref.etag(i),
                  '"%s"' % hashlib.md5(b'%d:%d' % (i, size)).hexdigest())
            a = rng.randrange(size)
            b = rng.randrange(a, size)
            for r, span in (('bytes=%d-%d' % (a, b), (a, b + 1)), (None, (0, size)),
                            ('bytes=%d-' % (len(tmpl) - 3), (len(tmpl) - 3, size))):
                code, h, body = cl.req('GET', '/%s/%s' % (bucket, key),
                                       {'Range': r} if r else {})
                want['gets'] += 1
                ck.eq('GET %d %s: status' % (i, r), code, 206 if r else 200)
                ck.eq('GET %d %s: bytes' % (i, r), body, full[span[0]:span[1]])
                if r:
                    ck.eq('GET %d %s: Content-Range' % (i, r), h.get('content-range'),
                          'bytes %d-%d/%d' % (span[0], span[1] - 1, size))
                want.setdefault('bytes', 0)
                want['bytes'] += len(body)
        k0 = prefix + 'shard-000003.tar'
        s3err = linkemu.s3_error_xml
        for what, method, path, hdrs, wcode, wbody, cnt in (
                ('If-Match other', 'GET', k0, {'If-Match': '"abc"'}, 412,
                 s3err('PreconditionFailed', k0), 'gets'),
                ('If-Match it', 'HEAD', k0, {'If-Match': ref.etag(3)}, 200, b'', 'heads'),
                ('416', 'GET', k0, {'Range': 'bytes=%d-' % ref.size(3)}, 416,
                 s3err('InvalidRange', 'bytes=%d-' % ref.size(3)), 'gets'),
                ('suffix range', 'GET', k0, {'Range': 'bytes=-5'}, 400,
                 s3err('InvalidRange', 'no suffix ranges'), 'gets'),
                ('no such key', 'GET', prefix + 'shard-%06d.tar' % N, {}, 404,
                 s3err('NoSuchKey', prefix + 'shard-%06d.tar' % N), 'gets'),
                ('no such key (HEAD)', 'HEAD', 'other', {}, 404, b'', 'heads')):
            code, h, body = cl.req(method, '/%s/%s' % (bucket, path), hdrs)
            ck.eq('%s: status, body' % what, (code, body), (wcode, wbody))
            want[cnt] += 1
        code, h, body = cl.req('GET', '/nobucket/x')
        ck.eq('no such bucket', (code, body), (404, s3err('NoSuchBucket', 'nobucket')))
        want['other'] += 1
        code, h, body = cl.req('HEAD', '/%s' % bucket)
        ck.eq('HEAD of the bucket: 405', code, 405)
        want['other'] += 1
        sent = cl.sent
        st = emu.stats()
        for k in ('list_requests', 'heads', 'gets', 'other', 'list_bytes'):
            ck.eq('stats: %s' % k, st.get(k, 0), want[k])
        ck.eq('stats: requests', st['requests'], sent)
        ck.eq('stats: bytes_sent (objects\' bytes)', st['bytes_sent'], want['bytes'])
    finally:
        cl.close()
        emu.stop()


def raw_answer(f):
    """One answer from a file on a socket: (status, headers dict, body): a Content-Length body,
    or a chunked one kept raw (its framing included, up to its last chunk's CRLF)."""
    status = int(f.readline().split()[1])
    h = {}
    while True:
        ln = f.readline().decode('latin-1').rstrip('\r\n')
        if not ln:
            break
        k, _, v = ln.partition(':')
        h[k.strip().lower()] = v.strip()
    if h.get('transfer-encoding') != 'chunked':
        return status, h, f.read(int(h.get('content-length', '0')))
    raw = bytearray()
    while True:
        ln = f.readline()
        raw += ln
        n = int(ln.strip(), 16)
        raw += f.read(n + 2)
        if n == 0:
            return status, h, bytes(raw)


def dechunk(raw):
    out, i = bytearray(), 0
    while True:
        j = raw.index(b'\r\n', i)
        n = int(raw[i:j], 16)
        out += raw[j + 2:j + 2 + n]
        i = j + 4 + n
        if n == 0:
            return bytes(out)


def moss_exchange(port, reqs, split=False):
    """GetBatch requests [(path, body dict or bytes)] sent in one write on a new connection
    (pipelined), or with split, each request's head and body in two writes; their answers."""
    s = socket.create_connection(('127.0.0.1', port), timeout=60)
    try:
        f = s.makefile('rb')
        wire = []
        for path, body in reqs:
            b = body if isinstance(body, bytes) else json.dumps(body).encode()
            wire.append((('GET %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                          'Content-Length: %d\r\n\r\n' % (path, len(b))).encode(), b))
        if split:
            out = []
            for head, b in wire:
                s.sendall(head)
                s.sendall(b)
                out.append(raw_answer(f))
            return out
        s.sendall(b''.join(h + b for h, b in wire))
        return [raw_answer(f) for _ in reqs]
    finally:
        s.close()


def group_ais(env, ck):
    """AIS mode (linkemu.c --ais) against what it stands for, the Python AisStandIn in root
    mode on the same directory (and the TAR built here from the files)."""
    from shardfs_test import s3servers
    from urllib.parse import quote
    rng = env.rng
    root = env.path('ais')
    long_dir = 'd' * 70
    files = {'a.tar': bytes(rng.getrandbits(8) for _ in range(70000)),
             'b.tar': bytes(rng.getrandbits(8) for _ in range(1536)),
             'empty.bin': b'', 'sub/c.bin': bytes(rng.getrandbits(8) for _ in range(777)),
             long_dir + '/' + 'f' * 60: b'long name'}
    for n, d in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, n)), exist_ok=True)
        ml.write_file(os.path.join(root, n), d)
    emu = start(env, root=root, tag='ais', etag='store', ais=True)
    py = s3servers.AisStandIn(None, root=root, objects_port=emu.port, etag='store')
    try:
        a, b = files['a.tar'], files['b.tar']

        def member(name, data):
            return s3servers.moss_header(name, len(data)) + data + \
                b'\0' * ((512 - len(data) % 512) % 512)

        def req(items, **kw):
            d = {'mime': '.tar', 'in': items, 'coer': True, 'onob': True, 'strm': True}
            d.update(kw)
            return d
        x, y = rng.randrange(len(a) // 2), rng.randrange(1, len(a) // 2)
        cases = [  # (what, request, expected status, expected TAR or None)
            ('whole, range, to the end, an empty file, two levels',
             req([{'objname': 'a.tar'}, {'objname': 'a.tar', 'start': x, 'length': y},
                  {'objname': 'b.tar', 'start': 1000, 'length': -1},
                  {'objname': 'empty.bin', 'start': 0, 'length': 0},
                  {'objname': 'sub/c.bin', 'start': 0, 'length': 512}]), 200,
             member('a.tar', a) + member('a.tar', a[x:x + y]) + member('b.tar', b[1000:]) +
             member('empty.bin', b'') + member('sub/c.bin', files['sub/c.bin'][:512]) +
             b'\0' * 1024),
            ('a missing object with coer',
             req([{'objname': 'b.tar', 'start': 0, 'length': 5}, {'objname': 'gone.tar'}]),
             200, member('b.tar', b[:5]) + member('__404__/gone.tar', b'') + b'\0' * 1024),
            ('without onob: BUCKET/NAME; a name split into a USTAR prefix',
             req([{'objname': 'b.tar', 'start': 1535, 'length': 1},
                  {'objname': long_dir + '/' + 'f' * 60}], onob=False), 200,
             member('bench/b.tar', b[1535:]) + member('bench/%s/%s' % (long_dir, 'f' * 60),
                                                      b'long name') + b'\0' * 1024),
            ('a missing object without coer', req([{'objname': 'gone.tar'}], coer=False), 404,
             None),
            ('a range past the end', req([{'objname': 'b.tar', 'start': 1000,
                                          'length': 537}]), 416, None),
            ('a start past the end', req([{'objname': 'b.tar', 'start': 1537, 'length': -1}]),
             416, None),
            ('mime .zip', req([{'objname': 'a.tar'}], mime='.zip'), 400, None),
            ('not streaming', req([{'objname': 'a.tar'}], strm=False), 400, None),
            ('archpath', req([{'objname': 'a.tar', 'archpath': 'x'}]), 400, None),
            ('start without length', req([{'objname': 'a.tar', 'start': 3}]), 400, None),
            ('no objname', req([{'start': 0}]), 400, None),
            ('an empty "in"', req([]), 400, None),
            ('not JSON', b'{"in": [', 400, None),
        ]
        path = '/v1/ml/moss/bench?provider=ais'
        for impl, port in (('c', emu.port), ('python', py.port)):
            # the proxy's redirect to the target, which reads the body again
            [(code, h, body)] = moss_exchange(port, [(path, cases[0][1])])
            ck.eq('%s: the proxy redirects' % impl, (code, h.get('location')),
                  (307, 'http://127.0.0.1:%d%s&dt=t1' % (port, path)))
        answers = {}
        for impl, port in (('c', emu.port), ('python', py.port)):
            # the C side's requests: all pipelined in one write, then each split in two
            got = moss_exchange(port, [(path + '&dt=t1', c[1]) for c in cases])
            if impl == 'c':
                again = moss_exchange(port, [(path + '&dt=t1', c[1]) for c in cases],
                                      split=True)
                ck.eq('c: the same answers with bodies in their own writes',
                      [(s, b) for s, _, b in again], [(s, b) for s, _, b in got])
            answers[impl] = got
            for (what, _, status, tar), (code, h, body) in zip(cases, got):
                ck.eq('%s %s: status' % (impl, what), code, status)
                if tar is not None:
                    ck.eq('%s %s: chunked TAR' % (impl, what),
                          (h.get('transfer-encoding'), h.get('content-type')),
                          ('chunked', 'application/x-tar'))
                    ck.eq('%s %s: TAR bytes' % (impl, what), dechunk(body), tar)
                else:
                    ck.eq('%s %s: no TAR' % (impl, what), h.get('content-type'),
                          'application/json')
        for (what, _, status, tar), c, p in zip(cases, answers['c'], answers['python']):
            if tar is not None:  # the framing too: a chunk per member, then the end's
                ck.eq('%s: C answer byte for byte as AisStandIn\'s' % what, c[2], p[2])
        # HEAD, listing, object redirects
        cl, pc = Client(emu.port), Client(py.port)
        for k in ('a.tar', 'sub/c.bin', 'gone.tar'):
            # the proxy's 307 to the target, as AIStore's S3 HEAD (missing objects too: the
            # proxy does not look), then the target's answer
            for cli, port, impl in ((cl, emu.port, 'C'), (pc, py.port, 'AisStandIn')):
                code, h, body = cli.req('HEAD', '/s3/bench/' + quote(k))
                ck.eq('HEAD %s at the proxy (%s): a 307 to the target' % (k, impl),
                      (code, h.get('location'), body),
                      (307, 'http://127.0.0.1:%d/s3/bench/%s?dt=t1' % (port, quote(k)), b''))
            code, h, body = cl.req('HEAD', '/s3/bench/' + quote(k) + '?dt=t1')
            pcode, ph, _ = pc.req('HEAD', '/s3/bench/' + quote(k) + '?dt=t1')
            ck.eq('HEAD %s' % k, (code, h.get('etag'), h.get('content-length'),
                                  h.get('last-modified'), body),
                  (pcode, ph.get('etag'), ph.get('content-length'), ph.get('last-modified'),
                   b''))
        for qs in ('list-type=2', 'list-type=2&prefix=sub/', 'list-type=2&prefix=zz'):
            code, h, body = cl.req('GET', '/s3/bench?' + qs)
            pcode, _, pbody = pc.req('GET', '/s3/bench?' + qs)
            ck.eq('listing %s: as AisStandIn\'s' % qs, (code, body), (pcode, pbody))
        code, h, body = cl.req('GET', '/v1/objects/bench/sub/c.bin?provider=ais',
                               {'Range': 'bytes=0-9'})
        ck.eq('object GET: redirected to the file here', (code, h.get('location')),
              (307, 'http://127.0.0.1:%d/sub/c.bin' % emu.port))
        code, h, body = cl.req('GET', '/sub/c.bin', {'Range': 'bytes=0-9'})
        ck.eq('the redirect\'s target: the bytes', (code, body), (206, files['sub/c.bin'][:10]))
        code, h, body = cl.req('GET', '/v1/objects/bench/a.tar?provider=gcp')
        ck.eq('object GET of another provider', code, 400)
        emu2 = start(env, root=root, tag='ais2', etag='store', ais=True,
                     ais_objects_port=emu.port)
        try:
            c2 = Client(emu2.port)
            code, h, body = c2.req('GET', '/v1/objects/bench/sub/c.bin?provider=ais')
            ck.eq('object GET with --ais-objects-port: redirected there',
                  (code, h.get('location')), (307, 'http://127.0.0.1:%d/sub/c.bin' % emu.port))
            c2.close()
        finally:
            emu2.stop()
        cl.close()
        pc.close()
        stc, stp = emu.stats(), dict(py.stats)
        # the C side answered every target request twice (pipelined, then split)
        for k, twice in (('moss_requests', 2), ('moss_items', 2), ('moss_missing', 2),
                         ('moss_refused', 2), ('moss_redirects', 1), ('s3_head', 1),
                         ('head_redirects', 1)):
            ck.eq('stats %s: %d x AisStandIn\'s' % (k, twice), stc.get(k),
                  twice * stp.get(k, 0))
        ck.eq('stats: exact counts', [stc[k] for k in (
            'moss_requests', 'moss_redirects', 'moss_items', 'moss_missing', 'moss_refused',
            's3_head', 's3_get', 'redirects', 'moss_inflight_max', 'head_redirects')],
            [2 * len(cases), 1, 2 * (5 + 2 + 2), 2, 2 * 7, 3, 3, 1, 1, 3])
        moss_concurrent(env, ck, root, a)
    finally:
        py.stop()
        emu.stop()


def moss_concurrent(env, ck, root, a):
    """3 GetBatch answers at once, each MOSS_COPIES x a.tar (1.4 MB) on its own connection,
    paced at MOSS_RATE_MB: a handshake, no timing window. The clients read nothing at first
    and their receive buffers are small, so each answer, handed whole to the kernel, stays
    queued at the emulator for as long as the test holds it: all 3 in flight, all 3 draining,
    none ended (moss_ms 0), exactly, however busy the machine. Then the test reads them one by
    one, and after each the count falls by exactly one (the emulator looks at a draining
    answer's queue again within 50 ms; ml.poll's bound). Each answer is timed to its last byte
    on the link: moss_ms at least the time the test held them (its own clock, from seeing all
    3 handed over to each read's start; a lower bound, which load only makes longer). Each
    read takes at least what the pacing allows for the bytes still queued at its start (all
    but MOSS_EARLY: the small receive buffer and the kernel's first segments), also a lower
    bound. Counted at the hand-over (the first version): 0 draining, 1 at once, a few ms
    each; estimated from the queue at the hand-over (the version before this one): ended
    after a time whether or not the client read, so its counts depended on when the test
    looked; with no pacing each read took a few ms."""
    emu = linkemu.Emu(root, 30, MOSS_RATE_MB, env.tmp, 'ais-inflight', shardfs=env.shardfs,
                      impl=IMPL, etag='store', ais=True)
    try:
        body = json.dumps({'mime': '.tar', 'in': [{'objname': 'a.tar'}] * MOSS_COPIES,
                           'coer': True, 'onob': True, 'strm': True}).encode()
        head = ('GET /v1/ml/moss/bench?provider=ais&dt=t1 HTTP/1.1\r\nHost: x\r\n'
                'Content-Type: application/json\r\nContent-Length: %d\r\n\r\n'
                % len(body)).encode()
        want = MOSS_COPIES * (512 + (len(a) + 511) // 512 * 512) + 1024
        socks = []
        try:
            for _ in range(3):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                # before connect: the window it offers stays small
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.settimeout(60)
                s.connect(('127.0.0.1', emu.port))
                s.sendall(head + body)
            keys = ('moss_requests', 'moss_inflight', 'moss_draining', 'moss_inflight_max',
                    'moss_ms')
            # all 3 started and none mid-way through its hand-over to the kernel (then the
            # exact counts: a version that does not hold them fails at once, not at the bound)
            st = ml.poll(lambda: (lambda d: d if d.get('moss_requests') == 3 and d.get(
                'moss_inflight') == d.get('moss_draining') else None)(emu.stats())) or \
                emu.stats()
            held = time.monotonic()
            ck.eq('3 answers handed over, none read: requests, in flight, draining, at most, '
                  'ms', [st.get(k) for k in keys], [3, 3, 3, 3, 0])
            st = emu.stats()
            ck.eq('held: still 3 in flight, 3 draining, none ended',
                  [st.get(k) for k in keys], [3, 3, 3, 3, 0])
            lower, got = 0.0, []
            for i, s in enumerate(socks):
                t0 = time.monotonic()
                g = raw_answer(s.makefile('rb'))
                took = time.monotonic() - t0
                lower += t0 - held
                got.append((g[0], len(dechunk(g[2]))))
                least = (want - MOSS_EARLY) / (MOSS_RATE_MB * 1e6)
                ck.ok(took >= least, 'answer %d: read at the pacing rate at most (%.3f s, want '
                      '>= %.3f)' % (i, took, least))
                lower += least
                ml.log('moss_concurrent: answer %d read in %.3f s (at least %.3f), %.3f s after '
                       'all were handed over' % (i, took, least, t0 - held))
                left = 2 - i
                st = ml.poll(lambda: (lambda d: d if d.get('moss_inflight', -1) <= left else
                                      None)(emu.stats())) or emu.stats()
                ck.eq('answer %d read: in flight, draining' % i,
                      [st.get('moss_inflight'), st.get('moss_draining')], [left, left])
        finally:
            for s in socks:
                s.close()
        ck.eq('3 answers: status, bytes', got, [(200, want)] * 3)
        st = emu.stats()
        ck.eq('3 answers: requests, in flight, draining, at most',
              [st.get(k) for k in keys[:4]], [3, 0, 0, 3])
        ml.log('moss_concurrent: moss_ms %r, at least %d' % (st.get('moss_ms'), lower * 1000))
        ck.ok(st.get('moss_ms', 0) >= int(lower * 1000) - 3,
              '3 answers: timed to their last byte on the link (%r ms, want >= %d: held and '
              'paced)' % (st.get('moss_ms'), int(lower * 1000) - 3))
    finally:
        emu.stop()


# moss_concurrent's answers: 20 x a.tar (70 KB) at 2 MB/s, of which at most MOSS_EARLY bytes
# leave before their reader starts (the reader's buffer, 4 KB asked, and the kernel's first
# pacing segments, 64 KB each on loopback: 512 KB is far above both)
MOSS_COPIES, MOSS_RATE_MB, MOSS_EARLY = 20, 2.0, 512 * 1024


def moss_gen(rng, files):
    """One generated GetBatch request body (bytes) over files (names in the root)."""
    def name():
        c = rng.random()
        if c < 0.7:
            return rng.choice(files)
        if c < 0.8:
            return rng.choice(['../' + rng.choice(files), '/' + rng.choice(files), '', '.',
                               'sub', 'sub/', './a.tar', 'sub/../a.tar', 'a.tar/', '\u00e9.bin',
                               'x' * 99, 'a\x00b', 'gone.tar'])
        if c < 0.83:
            return rng.choice([1, None, True, [], {}, 1.5])
        return ''.join(rng.choice('ab/._-~\u00e9 ') for _ in range(rng.randrange(0, 12)))

    def num():
        if rng.random() < 0.6:
            return rng.choice([0, -1, rng.randrange(1, 2000), rng.randrange(2000, 70001)])
        return rng.choice([0, 1, -1, -2, 511, 512, 1535, 1536, 1537, 70000, 69999, 2**31,
                           2**53, 2**63 - 1, 2**63, 2**64, -2**63, 1.0, 1.5, '3', None, True,
                           1e3, -0.0])

    def entry():
        e = {}
        if rng.random() < 0.95:
            e['objname'] = name()
        c = rng.random()
        if c < 0.5:
            e['start'] = num()
            e['length'] = rng.choice([num(), rng.randrange(1, 70001 - max(0, e['start']))
                                      if isinstance(e['start'], int) and
                                      0 <= e['start'] < 70000 else num()])
        elif c < 0.55:
            e['start'] = num()
        elif c < 0.6:
            e['length'] = num()
        if rng.random() < 0.05:
            e[rng.choice(['archpath', 'opaque', 'uname', 'x'])] = 'v'
        return e

    d = {'mime': '.tar', 'in': [entry() for _ in range(rng.choice([0, 1, 1, 2, 3, 4] * 3 + [30]))],
         'coer': True,
         'onob': True, 'strm': True}
    for k in ('coer', 'onob', 'strm'):
        if rng.random() < 0.1:
            d[k] = rng.choice([False, 0, 1, None, 'true', [], {}])
    if rng.random() < 0.05:
        d['mime'] = rng.choice(['.zip', '', None, 'tar', '.TAR'])
    if rng.random() < 0.05:
        del d['mime']
    if rng.random() < 0.05:
        d[rng.choice(['x', 'opaque', 'uuid'])] = rng.choice([1, 'a', None])
    b = json.dumps(d).encode()
    c = rng.random()
    if c < 0.1:
        b = rng.choice([
            b.replace(b'"objname": "', b'"objname": "\\ud800', 1),
            b.replace(b'"objname": "', b'"objname": "\\u0000', 1),
            b.replace(b'"objname": "', b'"objname": "\\ud83d\\ude00', 1),
            b.replace(b'"start": ', b'"start": 5, "start": ', 1),
            b.replace(b'"objname": ', b'"objname": "b.tar", "objname": ', 1),
            b.replace(b'"strm": true', b'"strm": true, "strm": false', 1),
            b.replace(b'"length": ', b'"length": 1E2, "x":', 1),
            b.replace(b'"mime": ".tar"', b'"mime": "\\u002etar"', 1),
            b.replace(b'"in": [', b'"in": [' + b'[' * 30 + b']' * 30 + b',', 1),
            b.replace(b'true', b'True', 1), b.replace(b': ', b':\n\t ', 3), b + b'\n',
            b'[' + b + b']', b'{"in": {"objname": "a.tar"}, "strm": true}',
            b'{"in": [[{"objname": "a.tar"}]], "strm": true}'])
    elif c < 0.15:
        b = rng.choice([b[:rng.randrange(len(b))], b' ' + b + b' ', b + b'x',
                        b.replace(b'[', b'[[', 1)])
    return b


def group_aisgen(env, ck):
    """Generated GetBatch requests: the C stand-in answers each as AisStandIn does."""
    from shardfs_test import s3servers
    rng = env.rng
    root = env.path('ais')
    files = {'a.tar': rng.randbytes(70000), 'b.tar': rng.randbytes(1536), 'empty.bin': b'',
             'sub/c.bin': rng.randbytes(777)}
    for n, d in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, n)), exist_ok=True)
        ml.write_file(os.path.join(root, n), d)
    emu = start(env, root=root, tag='aisgen', etag='store', ais=True)
    py = s3servers.AisStandIn(None, root=root, objects_port=emu.port, etag='store')
    path = '/v1/ml/moss/bench?provider=ais&dt=t1'
    differ, codes = [], {}
    try:
        for i in range(400):
            b = moss_gen(rng, sorted(files))
            [(cs, _, cb)] = moss_exchange(emu.port, [(path, b)])
            [(ps, _, pb)] = moss_exchange(py.port, [(path, b)])
            codes[cs] = codes.get(cs, 0) + 1
            if cs != ps or (cs == 200 and cb != pb):
                differ.append((i, b[:200], cs, ps))
        ml.log('aisgen: statuses %r; %d differ: %r' % (sorted(codes.items()), len(differ),
                                                      differ[:5]))
        ck.eq('aisgen: requests the two stand-ins answer apart', len(differ), 0)
        ck.ok(codes.get(200, 0) > 0 and codes.get(400, 0) > 0,
              'aisgen: TARs and refusals both generated: %r' % sorted(codes.items()))
    finally:
        py.stop()
        emu.stop()


GROUPS = {'root': (group_root, 120), 's3': (group_s3, 120),
          'ais': (group_ais, 120), 'aisgen': (group_aisgen, 240)}

if __name__ == '__main__':
    if len(sys.argv) != 3 or sys.argv[2] not in GROUPS:
        print(__doc__)
        sys.exit(2)
    fn, deadline = GROUPS[sys.argv[2]]
    ml.main_wrapper(fn, sys.argv[1], sys.argv[2], deadline=deadline, needs_fuse=False)
