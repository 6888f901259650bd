"""Link emulator of the tests and benchmarks: an HTTP object store on 127.0.0.1 that behaves
like a remote object store on a real link, for tests/bench/link_bench.py, scale_bench.py and the
tests that need a link (tests/mount/test_plan.py, tests/lib/test_linkemu.py).

`Emu` starts the C emulator, tests/lib/linkemu.c (built as BUILD/tests/linkemu next to
BUILD/shardfs; its header says what it serves): one thread on epoll, a timer heap for the delay
before each response, bodies by sendfile(2), SO_MAX_PACING_RATE per connection. This file also
holds the emulator it replaced, in Python (CPython http.server, a thread per connection: some
290 us of CPU per request against the C one's few tens), kept as the reference the C one is
measured against (`Emu(..., impl='python')`, link_bench.py's row L0b) and runnable as a script:

    python3 tests/lib/shardfs_test/linkemu.py --root DIR [--delay-ms 30] [--rate-mb 60]
                                              [--port-file F]
    python3 tests/lib/shardfs_test/linkemu.py --s3-keys N --s3-object FILE [--s3-bucket B]
                                              [--s3-prefix P] [--delay-ms 30] [--rate-mb 60] ...

Both serve the same: every request waits --delay-ms before its response starts (an object
store's time to first byte), and every connection sends at most --rate-mb MB/s (10^6 bytes):
the kernel paces the socket (SO_MAX_PACING_RATE, TCP's own pacing), so the rate costs no CPU
here and holds for each connection separately, as a store's per-connection throughput does;
there is no cap on the sum.

Serves files under DIR: GET and HEAD, one byte range (206, Content-Range), If-Match (412),
an ETag "mtime-size" in hex as nginx's, keep-alive (HTTP/1.1); a path ending in "/" gets an
nginx-style JSON autoindex listing. Why not nginx: its limit_rate lets each request send a
full second's worth before it throttles (ngx_http_write_filter: rate x (elapsed + 1)), so an
8 MiB range request at 60 MB/s is never slowed at all.

S3 mode (--s3-keys N): instead of DIR, a bucket of N keys generated from a pattern,
PREFIX + "shard-%06d.tar" (S3Pattern), served through the S3 API the way S3 answers it, behind
the same delay and pacing: ListObjectsV2 (GET /BUCKET?list-type=2, pages of at most max-keys,
capped at 1000, real ListBucketResult XML with KeyCount, IsTruncated, opaque continuation
tokens, ETags quoted as &quot;), HEAD and ranged GET of each key. Key i's object is FILE's
bytes followed by 512 * (i % 8) zero bytes (a tar may end in more zeros: it stays a valid
shard), so the sizes differ and a client that shows a wrong one is caught. It signs nothing
and checks nothing but the query: a delimiter, or list-type other than 2, is refused (shardfs
sends neither). Why not s3rver behind a proxy: s3rver walks and stats its whole bucket
directory for every page (its listing is quadratic in the keys: at 68,000 keys its pages take
0.6 s at the start and 2 s near the end, against S3's few tens of ms), so it measures itself,
not the client. Pages are generated from the key list, so every page costs the same.

Both modes: GET /__stats (no delay, not counted) answers JSON counters: requests, bytes_sent,
and in S3 mode list_requests, list_bytes, heads, gets, other; the C emulator adds connections
and its own CPU seconds (cpu_s, cpu_user_s, cpu_sys_s).

Prints "port N" on stdout (and writes N to --port-file) once it listens; runs until killed.
"""
import argparse
import base64
import bisect
import email.utils
import hashlib
import http.client
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler
from xml.sax.saxutils import escape

S3_LAST_MODIFIED = 1767225600  # 2026-01-01T00:00:00Z: every key's mtime in S3 mode


class S3Pattern:
    """The bucket of S3 mode: keys PREFIX + 'shard-%06d.tar' for i in range(n), sorted (the
    index is zero-padded), key i's bytes the template's plus 512 * (i % 8) zeros."""

    def __init__(self, bucket, prefix, n, template):
        self.bucket, self.prefix, self.template = bucket, prefix, template
        self.keys = [prefix + 'shard-%06d.tar' % i for i in range(n)]
        self.index = {k: i for i, k in enumerate(self.keys)}

    def size(self, i):
        return len(self.template) + 512 * (i % 8)

    def etag(self, i):
        return '"%s"' % hashlib.md5(b'%d:%d' % (i, self.size(i))).hexdigest()

    def data(self, i, start, end):
        t = self.template
        return t[start:min(end, len(t))] + bytes(max(0, end - max(start, len(t))))

    @staticmethod
    def token(key):
        return base64.b64encode(b'after\0' + key.encode()).decode()

    @staticmethod
    def untoken(tok):
        """The key a continuation token continues after, or None when it is not one of ours."""
        try:
            raw = base64.b64decode(tok.encode(), validate=True)
        except ValueError:
            return None
        return raw[6:].decode(errors='replace') if raw.startswith(b'after\0') else None

    def page(self, prefix, after, max_keys):
        """(keys, truncated) of a ListObjectsV2 page: keys under prefix, after 'after'."""
        lo = bisect.bisect_left(self.keys, prefix)
        hi = bisect.bisect_left(self.keys, prefix + '\U0010ffff')
        start = max(lo, bisect.bisect_right(self.keys, after)) if after else lo
        stop = min(start + max_keys, hi)
        return self.keys[start:stop], stop < hi

    def listing(self, q):
        """(status, XML body) of ListObjectsV2 with query dict q (first values)."""
        if q.get('list-type') != '2':
            return 400, s3_error_xml('InvalidArgument', 'only list-type=2 here')
        if 'delimiter' in q:
            return 501, s3_error_xml('NotImplemented', 'no delimiter here')
        try:
            max_keys = min(int(q.get('max-keys', '1000')), 1000)
        except ValueError:
            return 400, s3_error_xml('InvalidArgument', 'max-keys')
        prefix, after = q.get('prefix', ''), q.get('start-after', '')
        tok = q.get('continuation-token')
        if tok is not None:
            after = self.untoken(tok)
            if after is None:
                return 400, s3_error_xml('InvalidArgument', 'The continuation token provided '
                                         'is incorrect')
        keys, truncated = self.page(prefix, after, max_keys) if max_keys > 0 else ([], False)
        out = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.'
               'amazonaws.com/doc/2006-03-01/"><Name>%s</Name><Prefix>%s</Prefix>'
               '<KeyCount>%d</KeyCount><MaxKeys>%d</MaxKeys><IsTruncated>%s</IsTruncated>' % (
                   escape(self.bucket), escape(prefix), len(keys), max_keys,
                   'true' if truncated else 'false')]
        if tok is not None:
            out.append('<ContinuationToken>%s</ContinuationToken>' % escape(tok))
        if truncated:
            out.append('<NextContinuationToken>%s</NextContinuationToken>' % escape(
                self.token(keys[-1])))
        for k in keys:
            i = self.index[k]
            out.append('<Contents><Key>%s</Key><LastModified>2026-01-01T00:00:00.000Z'
                       '</LastModified><ETag>%s</ETag><Size>%d</Size><StorageClass>STANDARD'
                       '</StorageClass></Contents>' % (escape(k), escape(
                           self.etag(i), {'"': '&quot;'}), self.size(i)))
        out.append('</ListBucketResult>')
        return 200, ''.join(out).encode()


def s3_error_xml(code, msg):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s'
            '</Message><RequestId>linkemu</RequestId></Error>' % (code, escape(msg))).encode()

SO_MAX_PACING_RATE = getattr(socket, 'SO_MAX_PACING_RATE', 47)


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server_version = 'linkemu'

    def log_message(self, *a):
        pass

    def setup(self):
        super().setup()
        rate = self.server.rate_bps
        if rate:
            self.connection.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, rate)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_HEAD(self):
        self.serve(False)

    def do_GET(self):
        self.serve(True)

    def send_plain(self, code, body=b''):
        self.send_response(code)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        if body and self.command != 'HEAD':
            self.wfile.write(body)
        self.wfile.flush()

    def count(self, k, n=1):
        with self.server.stats_lock:
            self.server.stats[k] = self.server.stats.get(k, 0) + n

    def serve(self, body):
        u = urllib.parse.urlsplit(self.path)
        if u.path == '/__stats':
            with self.server.stats_lock:
                st = dict(self.server.stats, requests=self.server.requests,
                          bytes_sent=self.server.bytes_sent)
            return self.send_plain(200, json.dumps(st).encode())
        if self.server.delay_s:
            time.sleep(self.server.delay_s)
        with self.server.stats_lock:
            self.server.requests += 1
        if self.server.s3 is not None:
            return self.serve_s3(u, body)
        rel = urllib.parse.unquote(u.path)
        path = os.path.normpath(os.path.join(self.server.root, rel.lstrip('/')))
        if not (path + '/').startswith(self.server.root + '/'):
            return self.send_plain(403)
        if rel.endswith('/') and os.path.isdir(path):
            return self.listing(path, body)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return self.send_plain(404)
        try:
            st = os.fstat(fd)
            etag = '"%x-%x"' % (int(st.st_mtime), st.st_size)
            im = self.headers.get('If-Match')
            if im and im.strip() != '*' and etag not in [t.strip() for t in im.split(',')]:
                return self.send_plain(412)
            start, end, code = 0, st.st_size, 200
            rng = self.headers.get('Range')
            if rng and rng.startswith('bytes=') and ',' not in rng:
                a, _, b = rng[6:].partition('-')
                if a:
                    start = int(a)
                    end = min(int(b) + 1, st.st_size) if b else st.st_size
                else:
                    start = max(st.st_size - int(b), 0)
                if start >= st.st_size or start >= end:
                    self.send_response(416)
                    self.send_header('Content-Range', 'bytes */%d' % st.st_size)
                    self.send_header('Content-Length', '0')
                    self.end_headers()
                    return
                code = 206
            self.send_response(code)
            self.send_header('Content-Length', str(end - start))
            self.send_header('ETag', etag)
            self.send_header('Last-Modified', email.utils.formatdate(st.st_mtime, usegmt=True))
            self.send_header('Accept-Ranges', 'bytes')
            if code == 206:
                self.send_header('Content-Range', 'bytes %d-%d/%d' % (start, end - 1, st.st_size))
            self.end_headers()
            self.wfile.flush()
            if not body:
                return
            sock = self.connection.fileno()
            off = start
            while off < end:
                n = os.sendfile(sock, fd, off, min(end - off, 1 << 30))
                if n <= 0:
                    break
                off += n
            with self.server.stats_lock:
                self.server.bytes_sent += off - start
        finally:
            os.close(fd)

    def send_s3(self, code, data, headers=(), body=True):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        if body and data:
            self.wfile.write(data)
        self.wfile.flush()

    def serve_s3(self, u, body):
        s3 = self.server.s3
        bucket, _, key = urllib.parse.unquote(u.path).lstrip('/').partition('/')
        if bucket != s3.bucket:
            self.count('other')
            return self.send_s3(404, s3_error_xml('NoSuchBucket', bucket), body=body)
        if not key:
            self.count('other' if self.command != 'GET' else 'list_requests')
            if self.command != 'GET':
                return self.send_s3(405, s3_error_xml('MethodNotAllowed', self.command), body=body)
            q = {k: v[0] for k, v in urllib.parse.parse_qs(u.query, keep_blank_values=True).items()}
            code, data = s3.listing(q)
            self.count('list_bytes', len(data))
            return self.send_s3(code, data, [('Content-Type', 'application/xml')])
        i = s3.index.get(key)
        self.count('gets' if body else 'heads')
        if i is None:
            return self.send_s3(404, s3_error_xml('NoSuchKey', key), body=body)
        size, etag = s3.size(i), s3.etag(i)
        im = self.headers.get('If-Match')
        if im and im.strip() != '*' and etag not in [t.strip() for t in im.split(',')]:
            return self.send_s3(412, s3_error_xml('PreconditionFailed', key), body=body)
        start, end, code = 0, size, 200
        hdrs = [('ETag', etag), ('Accept-Ranges', 'bytes'),
                ('Last-Modified', email.utils.formatdate(S3_LAST_MODIFIED, usegmt=True))]
        rng = self.headers.get('Range')
        if rng and rng.startswith('bytes=') and ',' not in rng:
            a, _, b = rng[6:].partition('-')
            if not a:
                return self.send_s3(400, s3_error_xml('InvalidRange', 'no suffix ranges'),
                                    body=body)
            start, end = int(a), min(int(b) + 1, size) if b else size
            if start >= size or start >= end:
                return self.send_s3(416, s3_error_xml('InvalidRange', rng), body=body)
            code = 206
            hdrs.append(('Content-Range', 'bytes %d-%d/%d' % (start, end - 1, size)))
        if not body:
            self.send_response(code)
            for k, v in hdrs:
                self.send_header(k, v)
            self.send_header('Content-Length', str(end - start))
            self.end_headers()
            self.wfile.flush()
            return
        data = s3.data(i, start, end)
        self.send_s3(code, data, hdrs)
        with self.server.stats_lock:
            self.server.bytes_sent += len(data)

    def listing(self, path, body):
        ents = []
        for name in sorted(os.listdir(path)):
            st = os.stat(os.path.join(path, name))
            e = {'name': name, 'type': 'directory' if os.path.isdir(os.path.join(path, name))
                 else 'file', 'mtime': email.utils.formatdate(st.st_mtime, usegmt=True)}
            if e['type'] == 'file':
                e['size'] = st.st_size
            ents.append(e)
        data = json.dumps(ents).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)
        self.wfile.flush()


class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def handle_error(self, request, client_address):
        # a client that closes early (aria2c drops connections it no longer needs) is normal
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


def find_exe(shardfs=None):
    """The C emulator's path: $SHARDFS_LINKEMU, else BUILD/tests/linkemu next to the shardfs
    binary BUILD/shardfs, else this tree's build-bench/ or build/ (a benchmark of another
    commit's shardfs uses this tree's emulator). Raises with what to do when there is none."""
    cands = []
    if os.environ.get('SHARDFS_LINKEMU'):
        cands.append(os.environ['SHARDFS_LINKEMU'])
    if shardfs:
        cands.append(os.path.join(os.path.dirname(os.path.abspath(shardfs)), 'tests', 'linkemu'))
    tree = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
    cands += [os.path.join(tree, b, 'tests', 'linkemu') for b in ('build-bench', 'build')]
    for c in cands:
        if os.access(c, os.X_OK):
            return c
    raise RuntimeError('the link emulator (tests/lib/linkemu.c) is not built: looked for %s; '
                       'build it with `meson compile -C BUILD tests/linkemu`, or set '
                       'SHARDFS_LINKEMU' % ', '.join(cands))


class Emu:
    """The link emulator in a child process on a free port, serving root; w is a work dir for
    its port file, tag names it. impl 'c' (default): tests/lib/linkemu.c, found by find_exe
    (exe, or the shardfs binary it is built beside); 'python': this file's server (the
    reference of link_bench.py's row L0b)."""

    def __init__(self, root, delay_ms, rate_mb, w, tag, timeout=60.0, s3=None, exe=None,
                 shardfs=None, impl='c', etag='nginx', ais=False, ais_objects_port=None):
        """s3: None, or S3 mode as a dict: keys (N), object (the template file), bucket and
        prefix (optional); root is then unused (None). etag (root mode): 'nginx' (nginx's
        "MTIME-SIZE", which shardfs takes as weak and checks with a probe per fill, --weak-etag)
        or 'store' (an opaque strong token, as S3, GCS and AIStore give; the C emulator only).
        ais (root mode, the C emulator only): also the AIStore stand-in's API (linkemu.c
        --ais: listing and HEAD under /s3/, object GETs redirected to this server, GetBatch),
        what s3servers.AisStandIn answers in root mode with no fault armed; object GETs
        redirected to ais_objects_port (another emulator on the same root) or to this one."""
        pf = os.path.join(w, 'emu-%s.port' % tag)
        if os.path.exists(pf):
            os.unlink(pf)
        args = ['--root', root] if root else []
        if s3:
            args += ['--s3-keys', str(s3['keys']), '--s3-object', s3['object'],
                     '--s3-bucket', s3.get('bucket', 'bench'), '--s3-prefix', s3.get('prefix', '')]
        if etag not in ('nginx', 'store') or (etag == 'store' and impl != 'c'):
            raise ValueError('etag: nginx, or store with impl c; not %r' % etag)
        if etag != 'nginx':
            args += ['--etag', etag]
        if ais:
            if impl != 'c' or not root:
                raise ValueError('ais: root mode of the C emulator only')
            args += ['--ais']
            if ais_objects_port:
                args += ['--ais-objects-port', str(ais_objects_port)]
        if impl == 'python':
            cmd = [sys.executable, os.path.abspath(__file__)]
        elif impl == 'c':
            cmd = [exe or find_exe(shardfs)]
        else:
            raise ValueError('impl: c or python, not %r' % impl)
        self.impl = impl
        self.p = subprocess.Popen(cmd + args + ['--delay-ms', str(delay_ms), '--rate-mb',
                                                str(rate_mb), '--port-file', pf],
                                  stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not os.path.exists(pf):  # written by rename: whole once it exists
            if self.p.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError('link emulator did not start (rc %r)' % self.p.returncode)
            time.sleep(0.05)
        with open(pf) as f:
            self.port = int(f.read())
        self.rate_mb, self.delay_ms = rate_mb, delay_ms

    def url(self, name=''):
        return 'http://127.0.0.1:%d/%s' % (self.port, name)

    def stats(self):
        """The emulator's counters (GET /__stats)."""
        c = http.client.HTTPConnection('127.0.0.1', self.port, timeout=60)
        try:
            c.request('GET', '/__stats')
            return json.loads(c.getresponse().read())
        finally:
            c.close()

    def cpu(self):
        """The emulator process's user + system CPU seconds now (/proc/PID/stat: both
        implementations, all threads)."""
        return sum(self.cpu_split())

    def cpu_split(self):
        """(user, system) CPU seconds of the emulator process now (/proc/PID/stat)."""
        with open('/proc/%d/stat' % self.p.pid) as f:
            v = f.read().rsplit(')', 1)[1].split()
        hz = os.sysconf('SC_CLK_TCK')
        return int(v[11]) / hz, int(v[12]) / hz

    def stop(self, timeout=10):
        """SIGTERM, then SIGKILL after timeout seconds (bounded)."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait(timeout=timeout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--root', help='directory to serve (not in S3 mode)')
    ap.add_argument('--s3-keys', type=int, help='S3 mode: a bucket of this many keys')
    ap.add_argument('--s3-object', help='S3 mode: the file every key\'s bytes start with')
    ap.add_argument('--s3-bucket', default='bench')
    ap.add_argument('--s3-prefix', default='', help='S3 mode: the keys\' prefix ("train/")')
    ap.add_argument('--port', type=int, default=0)
    ap.add_argument('--delay-ms', type=float, default=30.0,
                    help='wait before each response starts (default 30)')
    ap.add_argument('--rate-mb', type=float, default=60.0,
                    help='most MB/s (10^6 B) per connection, 0: no cap (default 60)')
    ap.add_argument('--port-file')
    a = ap.parse_args()
    if (a.root is None) == (a.s3_keys is None) or (a.s3_keys is not None and not a.s3_object):
        ap.error('either --root, or --s3-keys with --s3-object')
    srv = Server(('127.0.0.1', a.port), Handler)
    srv.root = os.path.realpath(a.root) if a.root else None
    srv.s3 = None
    if a.s3_keys is not None:
        with open(a.s3_object, 'rb') as f:
            srv.s3 = S3Pattern(a.s3_bucket, a.s3_prefix, a.s3_keys, f.read())
    srv.stats = {}
    srv.delay_s = a.delay_ms / 1000.0
    srv.rate_bps = int(a.rate_mb * 1e6)
    srv.stats_lock = threading.Lock()
    srv.requests = srv.bytes_sent = 0
    port = srv.server_address[1]
    if a.port_file:
        with open(a.port_file + '.tmp', 'w') as f:
            f.write('%d\n' % port)
        os.rename(a.port_file + '.tmp', a.port_file)
    print('port %d' % port, flush=True)
    srv.serve_forever()


if __name__ == '__main__':
    sys.exit(main())
