"""Loopback servers for the s3:// gs:// ais:// tests (Python stdlib + Debian's python3-botocore).

- S3rver: s3rver (npm, pinned 3.7.1, installed by install-s3rver.sh) on 127.0.0.1, a free port.
  It checks only that the key id exists (and is run with --allow-mismatched-signatures), and it
  mishandles suffix ranges.
- SigV4Proxy: in front of s3rver (keys and bearers may change while it runs: temporary
  credentials; counts per key id as 'sig_ok:AKID'; 'hold' stops one response midway; of the
  requests it forwards, counts list_requests (list_continuations of them) and every other
  request by method, object_head and object_get). For each request it recomputes the
  signature with botocore's own S3SigV4Auth from the shared secret, over exactly the headers
  the client says it signed, and answers 403 with an S3 <Error> (SignatureDoesNotMatch,
  InvalidAccessKeyId, AccessDenied, RequestTimeTooSkewed) when they differ; otherwise it forwards
  the request (keep-alive to s3rver, response body streamed back, Range passed through). Requests
  without Authorization are allowed only for the buckets named 'anonymous'. A suffix range
  (bytes=-N) is refused with 400 and counted: shardfs must never send one.
- AisStandIn: a STAND-IN for an AIStore proxy, because AIStore itself is not installable here.
  It implements only what backend_ais.c uses: the S3-compatible listing and HEAD under /s3/
  (forwarded to s3rver; a HEAD of an object first answered with a 307 to the "target", this
  server with dt=t1, as AIStore's proxy answers its S3 HEAD by default: counted head_redirects,
  then s3_head at the target) and the native GET /v1/objects/BUCKET/KEY, answered with a 307 redirect
  to the object's URL on s3rver (the "target"), as an AIStore proxy does; and GetBatch
  (GET /v1/ml/moss/BUCKET with a JSON body) as AIStore's docs/get_batch.md documents it
  (AisStandIn says which parts).

Each server has a /__stats JSON endpoint with its counters.
"""

import datetime
import email.utils
import hmac
import http.client
import http.server
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tarfile
import threading
import time
import urllib.parse
from xml.sax.saxutils import escape

import botocore.auth
import botocore.awsrequest
import botocore.credentials

from .net import Handler, LoopbackServer, ThreadingServer, free_port, stop_process, wait_port

NPM_PREFIX = os.environ.get('SHARDFS_NPM_PREFIX', '/var/tmp/shardfs-npm')
S3RVER_BIN = os.path.join(NPM_PREFIX, 'node_modules', '.bin', 's3rver')
S3RVER_KEY = 'S3RVER'     # s3rver's built-in account: the key id it accepts
S3RVER_SECRET = 'S3RVER'


def s3_error(code, message, status):
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message>'
            '<RequestId>shardfs-test</RequestId></Error>' % (code, message)).encode()
    return status, body


class S3rver:
    def __init__(self, workdir):
        self.dir = os.path.join(workdir, 's3rver-data')
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.log = open(os.path.join(workdir, 's3rver.log'), 'wb')
        self.proc = subprocess.Popen(
            [S3RVER_BIN, '-d', self.dir, '-a', '127.0.0.1', '-p', str(self.port), '--silent',
             '--allow-mismatched-signatures', '--no-vhost-buckets'],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            # s3rver's ListObjectsV2 continuation tokens use DES, which Node 20's OpenSSL 3
            # only has in its legacy provider (without it, every truncated listing is a 500)
            env=dict(os.environ, NODE_OPTIONS='--openssl-legacy-provider'))
        try:
            wait_port(self.port, self.proc)
        except BaseException:
            # not listening within the bound (a busy machine): stopped here, or it outlives
            # the test (nothing else holds it: the constructor never returned)
            self.stop()
            raise

    def stop(self):
        stop_process(self.proc)
        self.log.close()

    # -- direct access (test set-up), signed with botocore like any client --
    def request(self, method, path, body=b'', headers=None, query=''):
        url = 'http://127.0.0.1:%d%s%s' % (self.port, path, '?' + query if query else '')
        req = botocore.awsrequest.AWSRequest(method=method, url=url, data=body,
                                             headers=dict(headers or {}))
        botocore.auth.S3SigV4Auth(botocore.credentials.Credentials(S3RVER_KEY, S3RVER_SECRET),
                                  's3', 'us-east-1').add_auth(req)
        conn = http.client.HTTPConnection('127.0.0.1', self.port, timeout=60)
        try:
            conn.request(method, path + ('?' + query if query else ''), body=body,
                         headers=dict(req.headers.items()))
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def create_bucket(self, name):
        st, body = self.request('PUT', '/' + name)
        if st != 200:
            raise RuntimeError('create bucket %s: %d %r' % (name, st, body[:300]))

    def put(self, bucket, key, data):
        st, body = self.request('PUT', '/%s/%s' % (bucket, urllib.parse.quote(key, safe='/~')),
                                body=data)
        if st != 200:
            raise RuntimeError('put %s/%s: %d %r' % (bucket, key, st, body[:300]))


class _Handler(Handler):
    def send_simple(self, status, body=b'', ctype='application/xml', extra=()):
        self.reply(status, body, ctype, extra)

    def stats_answer(self):
        if self.path == '/__stats':
            with self.server.owner.lock:
                body = json.dumps(self.server.owner.stats).encode()
            self.send_simple(200, body, 'application/json')
            return True
        return False

    def forward(self, path):
        """Send this request to s3rver and stream the answer back (keep-alive upstream). A kept
        connection s3rver closed while idle (Node's keep-alive timeout, 5 s: a client connection
        that waited that long between two requests, e.g. a version HEAD after a slow GetBatch
        answer) fails before any answer: the request is sent again once on a new connection
        (counted as upstream_reconnects), never answered 502 for the stand-in's own sake (a
        client would retry it: one request of the client's counted twice here). A 502 of the
        stand-in's making is counted as upstream_failed."""
        owner = self.server.owner
        n = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(n) if n else None
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ('connection', 'keep-alive', 'host')}
        headers['Host'] = '127.0.0.1:%d' % owner.upstream
        auth = headers.get('Authorization')
        if auth and 'Credential=' in auth:
            # s3rver knows one key id; the signature was checked already (SigV4Proxy.verify)
            headers['Authorization'] = re.sub(r'Credential=[^/]+/', 'Credential=%s/' % S3RVER_KEY,
                                              auth)
            headers.pop('x-amz-security-token', None)
            headers.pop('X-Amz-Security-Token', None)
        elif auth and auth.startswith('Bearer '):
            headers.pop('Authorization', None)  # checked already; s3rver serves it unsigned
        while True:
            conn = getattr(self, '_up', None)
            kept = conn is not None
            if conn is None:
                conn = self._up = http.client.HTTPConnection('127.0.0.1', owner.upstream,
                                                             timeout=60)
            try:
                conn.request(self.command, path, body=body, headers=headers)
                r = conn.getresponse()
                break
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self._up = None
                # a kept connection closed by s3rver (reset, or closed before the answer's
                # first byte: RemoteDisconnected is a ConnectionResetError): once more, new
                if kept and isinstance(e, ConnectionError):
                    owner.count('upstream_reconnects')
                    continue
                owner.count('upstream_failed')
                self.send_simple(502, b'upstream failed', 'text/plain')
                return
        self.send_response(r.status)
        length = r.getheader('Content-Length')
        for k, v in r.getheaders():
            if k.lower() in ('connection', 'keep-alive', 'transfer-encoding', 'content-length'):
                continue
            self.send_header(k, v)
        if self.command == 'HEAD':
            if length is not None:
                self.send_header('Content-Length', length)
            self.end_headers()
            r.read()
            return
        if length is not None:
            self.send_header('Content-Length', length)
            self.end_headers()
            hold = getattr(owner, 'hold', None)
            while True:
                chunk = r.read(256 * 1024)
                if not chunk:
                    break
                self.wfile.write(chunk)
                if hold is not None and hold['match'] in path and not hold['reached'].is_set():
                    # part of the body is out: stop here until the test says go
                    self.wfile.flush()
                    hold['akid'] = getattr(self, '_akid', None)
                    hold['reached'].set()
                    hold['go'].wait(300)
        else:
            data = r.read()
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            hold = getattr(owner, 'hold', None)
            if hold is not None and hold['match'] in path and not hold['reached'].is_set():
                half = len(data) // 2
                self.wfile.write(data[:half])
                self.wfile.flush()
                hold['akid'] = getattr(self, '_akid', None)
                hold['reached'].set()
                hold['go'].wait(300)
                data = data[half:]
            self.wfile.write(data)


class _ProxyHandler(_Handler):
    def do_GET(self):
        self.handle_s3()

    def do_HEAD(self):
        self.handle_s3()

    def handle_s3(self):
        if self.stats_answer():
            return
        owner = self.server.owner
        owner.count('requests')
        rng = self.headers.get('Range')
        if rng is not None and re.match(r'^\s*bytes\s*=\s*-', rng):
            owner.count('suffix_ranges')
            self.send_simple(*s3_error('InvalidRange', 'suffix ranges are refused here', 400))
            return
        if rng is not None:
            owner.count('ranged_gets')
        verdict = owner.verify(self)
        if verdict is not None:
            owner.count('refused')
            owner.count('refused_' + verdict[0])
            self.send_simple(*s3_error(verdict[0], verdict[1], 403))
            return
        if '?' in self.path and 'list-type=2' in self.path:
            owner.count('list_requests')
            if 'continuation-token=' in self.path:
                owner.count('list_continuations')
        else:
            owner.count('object_' + self.command.lower())  # object_head, object_get
        owner.count('forwarded')
        self.forward(self.path)


class _Counting(LoopbackServer):
    """A stand-in with counters: stats {name: n}, under lock (and served at /__stats)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.stats = {}

    def count(self, k, n=1):
        with self.lock:
            self.stats[k] = self.stats.get(k, 0) + n


class SigV4Proxy(_Counting):
    """See the module docstring. keys: {access_key: (secret, session_token or None)}."""

    def __init__(self, upstream_port, keys, anonymous=(), region='us-east-1'):
        self.upstream = upstream_port
        self.keys = dict(keys)
        self.bearers = {}  # OAuth token -> label: accepted as 'Authorization: Bearer TOKEN'
        self.hold = None   # {'match', 'reached', 'go'} (threading.Event): see _Handler.forward
        self.anonymous = set(anonymous)
        self.region = region
        super().__init__()
        self.serve(_ProxyHandler)

    def verify(self, h):
        """None when the request may pass, else (Code, Message)."""
        auth = h.headers.get('Authorization')
        bucket = urllib.parse.urlsplit(h.path).path.lstrip('/').split('/', 1)[0]
        if auth is None:
            if bucket in self.anonymous:
                self.count('anonymous_ok')
                return None
            return ('AccessDenied', 'Access Denied')
        if auth.startswith('Bearer '):
            label = self.bearers.get(auth[7:])
            if label is None:
                return ('AccessDenied', 'bearer tokens are not accepted here')
            self.count('bearer_ok')
            self.count('bearer_ok:' + label)
            return None
        m = re.match(r'^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,'
                     r' ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$', auth)
        if not m:
            return ('AuthorizationHeaderMalformed', 'cannot parse the Authorization header')
        akid, date, region, service, signed, sig = m.groups()
        if akid not in self.keys:
            return ('InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist '
                    'in our records.')
        secret, token = self.keys[akid]
        names = signed.split(';')
        for must in ('host', 'x-amz-date', 'x-amz-content-sha256'):
            if must not in names:
                return ('AccessDenied', 'header %s must be signed' % must)
        amz_date = h.headers.get('x-amz-date', '')
        try:
            t = datetime.datetime.strptime(amz_date, '%Y%m%dT%H%M%SZ').replace(
                tzinfo=datetime.timezone.utc)
        except ValueError:
            return ('AccessDenied', 'bad x-amz-date')
        if abs(time.time() - t.timestamp()) > 900 or date != amz_date[:8]:
            return ('RequestTimeTooSkewed', 'request time too skewed')
        if token is not None and h.headers.get('x-amz-security-token') != token:
            return ('InvalidToken', 'The provided token is malformed or otherwise invalid.')
        if h.headers.get('x-amz-content-sha256') != 'UNSIGNED-PAYLOAD':
            self.count('signed_payload')
        headers = {}
        for n in names:
            v = h.headers.get_all(n)
            if v is None:
                return ('AccessDenied', 'signed header %s is missing' % n)
            headers[n] = ','.join(v)
        req = botocore.awsrequest.AWSRequest(method=h.command,
                                             url='http://%s%s' % (headers['host'], h.path),
                                             headers=headers)
        req.context['timestamp'] = amz_date
        auth_obj = botocore.auth.S3SigV4Auth(
            botocore.credentials.Credentials(akid, secret, h.headers.get('x-amz-security-token')),
            service, region)
        cr = auth_obj.canonical_request(req)
        want = auth_obj.signature(auth_obj.string_to_sign(req, cr), req)
        if not hmac.compare_digest(want, sig):
            return ('SignatureDoesNotMatch', 'The request signature we calculated does not '
                    'match the signature you provided. Check your key and signing method.')
        if region != self.region and service == 's3' and region != 'auto':
            return ('AuthorizationHeaderMalformed', "the region '%s' is wrong; expecting '%s'"
                    % (region, self.region))
        self.count('signature_ok')
        self.count('sig_ok:' + akid)
        h._akid = akid
        return None


SO_MAX_PACING_RATE = getattr(socket, 'SO_MAX_PACING_RATE', 47)  # as linkemu.py


def moss_entries(body):
    """A GetBatch request body's entries [(objname, start, length)] ([] when it is not one)."""
    try:
        req = json.loads(body)
        return [(it['objname'], it.get('start', 0), it.get('length', 0)) for it in req['in']]
    except (ValueError, KeyError, TypeError):
        return []


def moss_header(name, size):
    """A GetBatch answer's member header, as Go's archive/tar (AIStore's writer) writes it:
    USTAR when the name fits, else PAX."""
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode, ti.type = size, 0, 0o644, tarfile.REGTYPE
    try:
        return ti.tobuf(tarfile.USTAR_FORMAT, 'utf-8', 'surrogateescape')
    except ValueError:
        return ti.tobuf(tarfile.PAX_FORMAT, 'utf-8', 'surrogateescape')


def store_etag(st):
    """tests/lib/linkemu.c's --etag store token of a file (os.stat_result): FNV-1a 64 over the
    little-endian bytes of dev, ino, size, mtime s, mtime ns, ctime s ^ (ctime ns << 32)."""
    m = (1 << 64) - 1
    v = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns // 10**9, st.st_mtime_ns % 10**9,
         (st.st_ctime_ns // 10**9) ^ ((st.st_ctime_ns % 10**9) << 32))
    h = 1469598103934665603
    for b in struct.pack('<6Q', *(x & m for x in v)):
        h = ((h ^ b) * 1099511628211) & m
    return '"%016x"' % h


class _AisHandler(_Handler):
    def setup(self):
        super().setup()
        rate = self.server.owner.rate_bps
        if rate:  # the link's pace, per connection, as linkemu.py's
            self.connection.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, rate)
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self):
        self.handle_ais()

    def do_HEAD(self):
        self.handle_ais()

    def handle_ais(self):
        if self.stats_answer():
            return
        owner = self.server.owner
        if owner.delay_s:
            time.sleep(owner.delay_s)  # the link's time to first byte, as linkemu.py's
        owner.count('requests')
        u = urllib.parse.urlsplit(self.path)
        if self.headers.get('Authorization'):
            owner.count('authorization_seen')
        if u.path.startswith('/s3/'):
            q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
            if self.command == 'HEAD' and u.path.find('/', 4) > 0 and 'dt' not in q and \
                    not owner.head_at_proxy:
                # the proxy: AIStore's S3 HEAD of an object is a 307 to the target that holds
                # it (ais/prxs3.go headObjS3, by default), which answers it
                owner.hold_at(owner.redirect_hold, u.path)
                owner.count('head_redirects')
                loc = 'http://127.0.0.1:%d%s?%s' % (owner.port, u.path, (
                    u.query + '&' if u.query else '') + 'dt=t1')
                self.send_simple(307, b'', 'text/plain', extra=[('Location', loc)])
                return
            if 'dt' in q:  # the target's: the store behind it knows no dt
                u = u._replace(query='&'.join(x for x in u.query.split('&')
                                              if x.partition('=')[0] != 'dt'))
            owner.count('s3_' + self.command.lower())
            if self.command == 'HEAD':
                owner.head_enter(u.path)
                try:
                    self.s3_api(owner, u)
                finally:
                    owner.head_leave()
                return
            self.s3_api(owner, u)
            return
        self.ais_api(owner, u)

    def s3_api(self, owner, u):
        """The S3-compatible API: listing (GET /s3/BUCKET?list-type=2...), HEAD of objects."""
        if 'continuation-token=' in u.query:
            owner.count('list_continuations')
        if owner.root is not None:
            t0 = time.monotonic()
            self.local_s3(u)
            if self.command == 'HEAD':  # its time at the stand-in after the delay, summed
                owner.count('s3_head_ms', int((time.monotonic() - t0) * 1000))
            return
        self.forward(u.path[3:] + ('?' + u.query if u.query else ''))

    def ais_api(self, owner, u):
        """AIStore's own API: GetBatch, object GETs (redirected)."""
        if u.path.startswith('/v1/ml/moss/') and self.command == 'GET':
            self.handle_moss(u)
            return
        if u.path.startswith('/v1/objects/') and self.command == 'GET':
            q = urllib.parse.parse_qs(u.query)
            if q.get('provider', ['ais']) != ['ais']:
                self.send_simple(400, b'{"message":"only provider=ais here"}', 'application/json')
                return
            rng = self.headers.get('Range')
            if rng is not None and re.match(r'^\s*bytes\s*=\s*-', rng):
                owner.count('suffix_ranges')
            owner.count('redirects')
            if owner.root is not None:  # the objects' server serves the bucket's directory
                loc = 'http://127.0.0.1:%d/%s' % (owner.objects_port, u.path[len(
                    '/v1/objects/'):].partition('/')[2])
            else:
                loc = 'http://127.0.0.1:%d/%s' % (owner.upstream, u.path[len('/v1/objects/'):])
            self.send_simple(307, b'', 'text/plain', extra=[('Location', loc)])
            return
        owner.count('unsupported')
        self.send_simple(400, b'{"message":"not implemented by the AIS stand-in"}',
                         'application/json')


    def local_file(self, key):
        """(path, os.stat_result) of key in the root directory, or (None, None)."""
        root = self.server.owner.root
        path = os.path.normpath(os.path.join(root, key))
        if not path.startswith(root + '/') or not os.path.isfile(path):
            return None, None
        return path, os.stat(path)

    def local_etag(self, st):
        """The ETag the link emulator gives the same file (root mode): its object GETs carry
        If-Match with the ETag listed here, and a different one answers 412."""
        if self.server.owner.etag == 'store':
            return store_etag(st)
        return '"%x-%x"' % (int(st.st_mtime), st.st_size)  # linkemu.py's (and nginx's)

    def local_s3(self, u):
        """Root mode: ListObjectsV2 (one page) and HEAD from the root directory."""
        bucket, _, key = urllib.parse.unquote(u.path[len('/s3/'):]).partition('/')
        if self.command == 'HEAD':
            path, st = self.local_file(key)
            if path is None:
                self.send_simple(404, b'')
                return
            self.send_response(200)
            self.send_header('Content-Length', str(st.st_size))
            self.send_header('ETag', self.local_etag(st))
            self.send_header('Last-Modified', email.utils.formatdate(st.st_mtime, usegmt=True))
            self.end_headers()
            return
        q = {k: v[0] for k, v in urllib.parse.parse_qs(u.query, keep_blank_values=True).items()}
        prefix, root = q.get('prefix', ''), self.server.owner.root
        keys = []
        for d, _, names in os.walk(root):
            for n in names:
                k = os.path.relpath(os.path.join(d, n), root)
                if k.startswith(prefix):
                    keys.append(k)
        keys.sort()
        if len(keys) > 1000:
            self.send_simple(501, b'<Error><Code>NotImplemented</Code><Message>more than 1000 '
                             b'keys in root mode</Message></Error>')
            return
        out = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.'
               'amazonaws.com/doc/2006-03-01/"><Name>%s</Name><Prefix>%s</Prefix><KeyCount>%d'
               '</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>' % (
                   escape(bucket), escape(prefix), len(keys))]
        for k in keys:
            st = os.stat(os.path.join(root, k))
            out.append('<Contents><Key>%s</Key><LastModified>%s</LastModified><ETag>%s</ETag>'
                       '<Size>%d</Size><StorageClass>STANDARD</StorageClass></Contents>' % (
                           escape(k), datetime.datetime.fromtimestamp(
                               int(st.st_mtime), datetime.timezone.utc).strftime(
                               '%Y-%m-%dT%H:%M:%S.000Z'),
                           escape(self.local_etag(st), {'"': '&quot;'}), st.st_size))
        out.append('</ListBucketResult>')
        self.send_simple(200, ''.join(out).encode())

    def moss_refuse(self, why):
        self.server.owner.count('moss_refused')
        self.send_simple(400, json.dumps({'message': why}).encode(), 'application/json')

    def moss_item(self, bucket, it):
        """(status, bytes) of one GetBatch entry from s3rver (root mode: from the root
        directory): 404 missing, 416 out of range."""
        if self.server.owner.root is not None:
            st, path, start, n = self.moss_local(it)
            if st != 200:
                return st, b''
            with open(path, 'rb') as f:
                f.seek(start)
                return 200, f.read(n)
        conn = http.client.HTTPConnection('127.0.0.1', self.server.owner.upstream, timeout=60)
        start, length = it.get('start', 0), it.get('length', 0)
        headers = {}
        if (start, length) != (0, 0):
            headers['Range'] = 'bytes=%d-%s' % (start, '' if length == -1 else start + length - 1)
        try:
            conn.request('GET', '/%s/%s' % (bucket, urllib.parse.quote(it['objname'], safe='/~')),
                         headers=headers)
            r = conn.getresponse()
            data = r.read()
        finally:
            conn.close()
        if r.status == 404:
            return 404, b''
        if r.status == 416 or (length > 0 and len(data) != length):
            return 416, b''
        if r.status not in (200, 206):
            return 502, b''
        return 200, data

    def handle_moss(self, u):
        owner = self.server.owner
        q = urllib.parse.parse_qs(u.query)
        n = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(n) if n else b''
        bucket = urllib.parse.unquote(u.path[len('/v1/ml/moss/'):])
        if q.get('provider', ['ais']) != ['ais'] or not bucket or '/' in bucket:
            self.moss_refuse('only /v1/ml/moss/BUCKET?provider=ais here')
            return
        with owner.lock:
            refuse = owner.moss_refuse_status
        if refuse is not None:
            # an AIStore without GetBatch (or a proxy that does not pass /v1/ml): no such route
            owner.count('moss_refused_status')
            self.send_simple(refuse, json.dumps({'message': 'no such API: %s' % u.path})
                             .encode(), 'application/json')
            return
        if 'dt' not in q:
            # the proxy: phase 2 of AIStore's GetBatch redirects the GET to the designated
            # target, which reads the same JSON body again
            owner.count('moss_redirects')
            loc = 'http://127.0.0.1:%d%s?%s' % (owner.port, u.path, u.query + '&dt=t1')
            self.send_simple(307, b'', 'text/plain', extra=[('Location', loc)])
            return
        owner.count('moss_requests')
        with owner.lock:
            owner.moss_inflight += 1
            owner.stats['moss_inflight_max'] = max(owner.stats.get('moss_inflight_max', 0),
                                                   owner.moss_inflight)
        t0 = time.monotonic()
        try:
            hold, pick = owner.moss_hold, owner.moss_hold_pick
            if hold is not None and (pick is None or pick(moss_entries(body))):
                owner.count('moss_held')
                if not hold.wait(30):
                    owner.count('moss_hold_expired')
            self.moss_answer(owner, bucket, body)
        finally:
            with owner.lock:
                owner.moss_inflight -= 1
                # the target's time from the request to the answer's last byte (the link's
                # delay and pacing included), summed
                owner.stats['moss_ms'] = owner.stats.get('moss_ms', 0) + int(
                    (time.monotonic() - t0) * 1000)

    def moss_local(self, it):
        """Root mode: (status, path, start, length) of one GetBatch entry's bytes in the root
        directory: 404 missing, 416 out of range."""
        path, st = self.local_file(it['objname'])
        if path is None:
            return 404, None, 0, 0
        start, length = it.get('start', 0), it.get('length', 0)
        end = st.st_size if length in (0, -1) else start + length
        if start > st.st_size or end > st.st_size:
            return 416, None, 0, 0
        return 200, path, start, end - start

    def moss_fail(self, it, st):
        """Strict mode, or a range outside the object: the request fails, no data."""
        self.send_simple(st, json.dumps({'message': 'GetBatch: %s: status %d' %
                                         (it['objname'], st)}).encode(), 'application/json')

    def moss_stream(self, owner, bucket, items, coer, onob):
        """Root mode with no fault armed: the TAR stream moss_answer builds, each member's
        data sent from its file with sendfile(2) as the link emulator sends bodies, not
        copied through Python (a target streams; the stand-in's CPU is on the client's
        cores, where a store's is not). The same members, bytes and errors; other chunks."""
        members = []
        for it in items:
            name = it['objname'] if onob else bucket + '/' + it['objname']
            st, path, start, n = self.moss_local(it)
            if st == 404 and coer:
                owner.count('moss_missing')
                members.append(('__404__/' + name, None, 0, 0))
                continue
            if st != 200:
                self.moss_fail(it, st)
                return
            members.append((name, path, start, n))
        owner.count('moss_items', len(members))
        self.send_response(200)
        self.send_header('Content-Type', 'application/x-tar')
        self.send_header('Transfer-Encoding', 'chunked')
        self.end_headers()
        sock = self.connection.fileno()
        for name, path, start, n in members:
            pad = (512 - n % 512) % 512
            hdr = moss_header(name, n)
            self.wfile.write(b'%x\r\n' % (len(hdr) + n + pad) + hdr)
            if n:
                fd = os.open(path, os.O_RDONLY)
                try:
                    off = start
                    while off < start + n:
                        k = os.sendfile(sock, fd, off, start + n - off)
                        if k <= 0:
                            raise ConnectionError('%s: shorter than it was' % path)
                        off += k
                finally:
                    os.close(fd)
            self.wfile.write(b'\0' * pad + b'\r\n')
        self.wfile.write(b'400\r\n' + b'\0' * 1024 + b'\r\n0\r\n\r\n')

    def moss_answer(self, owner, bucket, body):
        try:
            req = json.loads(body)
        except ValueError:
            self.moss_refuse('GetBatch: the request body is not JSON')
            return
        items = req.get('in') if isinstance(req, dict) else None
        if not isinstance(items, list) or not items:
            self.moss_refuse('GetBatch: "in" must list at least one entry')
            return
        if req.get('mime', '.tar') not in ('', '.tar'):
            self.moss_refuse('GetBatch: only "mime": ".tar" is implemented by the stand-in')
            return
        if not req.get('strm'):
            self.moss_refuse('GetBatch: only streaming ("strm": true) is implemented by the '
                             'stand-in')
            return
        for it in items:
            if not isinstance(it, dict) or not isinstance(it.get('objname'), str):
                self.moss_refuse('GetBatch: an entry without "objname"')
                return
            if '\0' in it['objname']:
                self.moss_refuse('GetBatch: an "objname" with a NUL')
                return
            try:
                it['objname'].encode()
            except UnicodeEncodeError:  # a lone surrogate (\ud800): the C stand-in's JSON
                self.moss_refuse('GetBatch: an "objname" that is not UTF-8')  # refuses it
                return
            extra = set(it) - {'objname', 'start', 'length'}
            if extra:
                self.moss_refuse('GetBatch: the stand-in does not implement %s' % sorted(extra))
                return
            start, length = it.get('start', 0), it.get('length', 0)
            # AIStore's are int64 fields: a bool (an int to Python) or a number past int64
            # does not decode (400)
            if (not all(isinstance(v, int) and not isinstance(v, bool) and
                        -2**63 <= v < 2**63 for v in (start, length)) or start < 0 or
                    length < -1 or (start != 0 and length == 0)):
                self.moss_refuse('GetBatch: bad range start=%r length=%r' % (start, length))
                return
        coer, onob = bool(req.get('coer')), bool(req.get('onob'))
        with owner.lock:
            # each target request's entries in order (a window's split, item by item)
            owner.moss_log.append([(it['objname'], it.get('start', 0), it.get('length', 0))
                                   for it in items])
            armed = (owner.moss_corrupt, owner.moss_cut_member, owner.moss_cut_at,
                     owner.moss_pause) != (None, None, None, None) or bool(owner.moss_lie)
        if owner.root is not None and owner.moss_sendfile and not armed:
            self.moss_stream(owner, bucket, items, coer, onob)
            return
        members = []
        for it in items:
            st, data = self.moss_item(bucket, it)
            name = it['objname'] if onob else bucket + '/' + it['objname']
            if st == 404 and coer:
                owner.count('moss_missing')
                members.append(('__404__/' + name, b''))
                continue
            if st != 200:
                self.moss_fail(it, st)
                return
            if it['objname'] in owner.moss_lie:
                owner.count('moss_lies')
                data = data[:-1]
            members.append((name, data))
        owner.count('moss_items', len(members))
        with owner.lock:
            corrupt, owner.moss_corrupt = owner.moss_corrupt, None
        if corrupt == 'order' and len(members) > 1:
            members[0], members[1] = members[1], members[0]
        out = bytearray()
        with owner.lock:
            cut_member = owner.moss_cut_member
        cut = None
        for name, data in members:
            if cut is None and cut_member is not None and name in (cut_member,
                                                                   bucket + '/' + cut_member):
                cut = len(out) + 512 + len(data) // 2  # (a name that fits a USTAR header)
                with owner.lock:
                    owner.moss_cut_member = None
            out += moss_header(name, len(data))
            out += data + b'\0' * ((512 - len(data) % 512) % 512)
        if corrupt == 'checksum':
            out[136] ^= 0x01  # the first header's mtime, after its checksum was computed
        pause_at = None
        with owner.lock:
            pause, owner.moss_pause = owner.moss_pause, None
        if pause is not None and members:
            pause_at = len(out) - len(members[-1][1]) - \
                (512 - len(members[-1][1]) % 512) % 512 + len(members[-1][1]) // 2
        out += b'\0' * 1024
        with owner.lock:
            if cut is None:
                cut, owner.moss_cut_at = owner.moss_cut_at, None
        self.send_response(200)
        self.send_header('Content-Type', 'application/x-tar')
        self.send_header('Transfer-Encoding', 'chunked')
        self.end_headers()
        if cut is not None:
            # one chunk that announces everything, and the connection closed in its middle
            owner.count('moss_cut')
            self.wfile.write(b'%x\r\n' % len(out) + bytes(out[:cut]))
            self.wfile.flush()
            self.close_connection = True
            return
        i = 0
        while i < len(out):
            j = min(i + 65536, len(out))
            if pause_at is not None and i < pause_at < j:
                j = pause_at
            c = bytes(out[i:j])
            self.wfile.write(b'%x\r\n' % len(c) + c + b'\r\n')
            i = j
            if pause_at is not None and i == pause_at:
                self.wfile.flush()
                owner.count('moss_paused')
                pause['reached'].set()
                pause['go'].wait(120)
                pause_at = None
        self.wfile.write(b'0\r\n\r\n')


class AisStandIn(_Counting):
    """A stand-in for an AIStore proxy and its targets (see the module docstring).

    GetBatch follows AIStore's documented request and response (its docs/get_batch.md, and
    apc.MossReq/MossIn in api/apc/ml.go): GET /v1/ml/moss/BUCKET?provider=ais with a JSON body
    {"mime", "in": [{"objname", "start", "length"}], "coer", "onob", "strm"}; the proxy answers
    307 to a "target" (here: the same server with dt=t1), which reads the body again and answers
    one TAR stream (chunked), one member per entry in request order, named OBJNAME with onob,
    else BUCKET/OBJNAME; a missing object is a member '__404__/NAME' of size 0 with coer, else the
    request fails with 404; a range outside the object fails it with 416 (no data). Implemented:
    mime ".tar", streaming mode, objname with start/length (the documented forms (0,0), (N,L>0),
    (N,-1)). Not implemented, answered 400 and counted as moss_refused: other output formats,
    buffered (multipart) mode, archpath, bucket/provider/uname overrides, opaque.
    Faults for tests: moss_cut_at (bytes: the next GetBatch answer is cut there, once),
    moss_corrupt ('order': the next answer's first two members swapped; 'checksum': a bit of its
    first header flipped; once) and moss_lie (object names whose member says, and carries, one
    byte fewer than asked), moss_cut_member (an object name: the next answer with a member of it
    is cut in the middle of that member's data, once) and moss_refuse_status (a status, e.g.
    404: every GetBatch request is answered with it at the proxy, as by an AIStore without
    GetBatch; counted as moss_refused_status), head_barrier (N: the next HEADs wait until N are
    in flight at once, at most 5 s; stats head_inflight_max: the most HEADs in flight),
    head_hold (the first HEAD of a path with its match held until its go, at most 30 s),
    redirect_hold (the same at the proxy: the first 307 of a HEAD of such a path, before it is
    counted in head_redirects),
    head_at_proxy (True: the proxy answers an object's S3 HEAD itself, no 307, as AIStore does
    with its S3 reverse-proxy feature flag; counted s3_head only),
    moss_hold (a threading.Event: every GetBatch answer waits for it at the target, at most
    30 s; counted as moss_held, and as moss_hold_expired when the 30 s ran out; with
    moss_hold_pick, a function of the request's entries [(objname, start, length)], only the
    answers it returns true for), moss_pause (a dict of threading.Events 'reached' and 'go':
    the next answer stops in the middle of its last member's data, its first half sent, sets
    reached and waits for go, at most 120 s, then sends the rest; once; counted as
    moss_paused).

    Root mode (root: a directory; for tests/bench/link_bench.py): the bucket is that directory,
    listed (one page, at most 1000 keys) and HEAD answered from it with linkemu.py's ETags,
    GetBatch items read from its files, object GETs redirected to objects_port (the link emulator
    serving the same directory) instead of s3rver. etag: the ETag listed and given by HEAD,
    which must be the one the link emulator at objects_port gives (linkemu.Emu's etag: the
    mount's object GETs send If-Match with the listed ETag, and the emulator answers 412 to
    any other): 'nginx' ("MTIME-SIZE") or 'store' (linkemu.c's --etag store token,
    store_etag). delay_ms and rate_mb: linkemu.py's link (every
    answer waits delay_ms before it starts, every connection sends at most rate_mb MB/s: the
    kernel paces the socket). The link bench's L9 uses the C emulator's AIS mode instead
    (tests/lib/linkemu.c --ais: the same answers as root mode here with no fault armed, checked
    byte for byte by lib-linkemu-ais), so that no store runs in CPython on the client's cores;
    this class stays the functional tests' stand-in (its fault knobs). The members' data go out with sendfile(2) while no fault is armed (moss_stream), as
    the link emulator sends; moss_sendfile = False builds every answer in memory instead (the
    same bytes: tests/lib/test_helpers.py compares the two)."""

    def __init__(self, upstream_port, root=None, objects_port=None, delay_ms=0, rate_mb=0,
                 etag='nginx'):
        if etag not in ('nginx', 'store'):
            raise ValueError('etag: nginx or store, not %r' % etag)
        self.etag = etag
        self.upstream = upstream_port
        self.root = os.path.abspath(root) if root else None
        self.objects_port = objects_port
        self.delay_s = delay_ms / 1000.0
        self.rate_bps = int(rate_mb * 1e6)
        self.moss_inflight = 0
        self.moss_log = []  # [[(objname, start, length)] per target request]
        self.moss_sendfile = True
        self.moss_hold = None
        self.moss_hold_pick = None
        self.moss_pause = None
        self.moss_cut_member = None
        self.moss_refuse_status = None
        self.moss_cut_at = None
        self.moss_corrupt = None
        self.moss_lie = set()
        super().__init__()
        self.head_cv = threading.Condition(self.lock)
        self.head_inflight = 0
        self.head_barrier = 0  # see head_enter
        self.head_hold = None  # see head_enter
        self.redirect_hold = None  # see hold_at
        self.head_at_proxy = False
        self.serve(_AisHandler)

    def head_enter(self, path=''):
        """A HEAD arrives: counted in flight (stats head_inflight_max). With head_barrier N, the
        first HEADs wait until N are in flight at once (at most 60 s, once: then never again):
        a client that sends its HEADs one after the other keeps head_inflight_max at 1. With
        head_hold ({'match', 'reached', 'go', 'left'}: threading.Event each but match), the
        first HEAD whose path has match sets reached, waits for go (at most 120 s), sets left.
        Both bounds only end a failing client's wait: a busy machine may take seconds to send
        the HEADs a barrier waits for, or to read what a test reads while a HEAD is held."""
        self.hold_at(self.head_hold, path)
        with self.head_cv:
            self.head_inflight += 1
            self.stats['head_inflight_max'] = max(self.stats.get('head_inflight_max', 0),
                                                  self.head_inflight)
            self.head_cv.notify_all()
            if self.head_barrier:
                self.head_cv.wait_for(lambda: self.head_inflight >= self.head_barrier,
                                      timeout=60)
                self.head_barrier = 0

    @staticmethod
    def hold_at(hold, path):
        """head_hold's and redirect_hold's wait: the first request whose path has hold's match
        sets reached, waits for go (at most 120 s), sets left."""
        if hold is not None and hold['match'] in path and not hold['reached'].is_set():
            hold['reached'].set()
            hold['go'].wait(120)
            hold['left'].set()

    def head_leave(self):
        with self.head_cv:
            self.head_inflight -= 1

    def serve(self, handler_cls):
        """LoopbackServer.serve with linkemu.py's listen backlog (256): a mount opens up to
        --connections connections at once, and the default backlog of 5 drops SYNs (a second
        each, TCP's retransmission)."""
        self.port = free_port()
        self.httpd = _BackloggedServer(('127.0.0.1', self.port), handler_cls)
        self.httpd.owner = self
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()


class _BackloggedServer(ThreadingServer):
    request_queue_size = 256


def have_s3rver():
    return os.access(S3RVER_BIN, os.X_OK) and shutil.which('node') is not None
