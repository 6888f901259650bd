"""Servers for the http(s) remote tests, Python 3 stdlib only: nginx on 127.0.0.1 with a
generated config (JSON and HTML autoindex, raw files, a 307 redirector standing in for an
AIStore proxy, optionally TLS servers with certificates made by make_tls), and a small
fault-injecting HTTP proxy in front of it.

For shell scripts (tests/bench/lib_nginx.sh): python3 -m shardfs_test.web serve PREFIX ROOT
starts Nginx(PREFIX, ROOT) without an access log, prints "port N" once it listens and runs
until SIGTERM or SIGINT, when it stops nginx."""

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from . import diag
from .net import free_port, stop_process, wait_port  # noqa: F401 (tests use web.free_port)

NGINX = '/usr/sbin/nginx'
OPENSSL = shutil.which('openssl') or '/usr/bin/openssl'


_CNF = '''[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[leaf]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = %(san)s
'''


def make_tls(d):
    """A throwaway CA (P-256, valid 2 days) and two server certificates it signed: one for
    IP:127.0.0.1 and one for DNS:example.invalid (the wrong name for 127.0.0.1). Returns a
    dict of paths: ca, cert, key, bad_cert, bad_key. Needs the openssl CLI."""
    os.makedirs(d, exist_ok=True)

    def run(*args):
        r = subprocess.run([OPENSSL] + list(args), cwd=d, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        if r.returncode != 0:
            raise RuntimeError('openssl %s failed: %s' % (' '.join(args),
                                                          r.stdout.decode(errors='replace')))

    def cnf(name, san):
        p = os.path.join(d, name + '.cnf')
        with open(p, 'w') as f:
            f.write(_CNF % dict(san=san))
        return p

    key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes']
    c = cnf('ca', 'IP:127.0.0.1')
    run('req', '-x509', '-config', c, '-extensions', 'ca', '-subj', '/CN=shardfs test CA',
        '-days', '2', *key, '-keyout', 'ca.key', '-out', 'ca.pem')
    out = {'ca': os.path.join(d, 'ca.pem')}
    for name, cn, san, serial in (('server', '127.0.0.1', 'IP:127.0.0.1', '2'),
                                  ('wrong', 'example.invalid', 'DNS:example.invalid', '3')):
        c = cnf(name, san)
        run('req', '-new', '-config', c, '-subj', '/CN=' + cn, *key, '-keyout', name + '.key',
            '-out', name + '.csr')
        run('x509', '-req', '-in', name + '.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key',
            '-set_serial', serial, '-days', '2', '-extfile', c, '-extensions', 'leaf',
            '-out', name + '.pem')
    out.update(cert=os.path.join(d, 'server.pem'), key=os.path.join(d, 'server.key'),
               bad_cert=os.path.join(d, 'wrong.pem'), bad_key=os.path.join(d, 'wrong.key'))
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)  # nginx's worker may run as another user
    return out


class Nginx:
    """nginx serving root at:
         http://127.0.0.1:port/files/...   raw files (no listing)
         http://127.0.0.1:port/gzstatic/... the same, with gzip_static always: a file X with an
                                           X.gz beside it is answered with X.gz's bytes and
                                           Content-Encoding: gzip, asked for or not
         http://127.0.0.1:port/json/...    the same tree, autoindex_format json
         http://127.0.0.1:port/html/...    the same tree, autoindex html
         http://127.0.0.1:port/deny/, /broken/, /notjson/  listings that fail: 403, 500, a
                                           truncated JSON array (200)
         http://127.0.0.1:port/redir, /listpage  a file name that is a directory: a 302 to
                                           /json/val/, a JSON listing (200)
       and a redirector at http://127.0.0.1:redirect_port/X -> 307 -> http://127.0.0.1:port/X.
       With tls (make_tls's dict), also https://127.0.0.1:tls_port/ (the same three locations,
       certificate for IP:127.0.0.1) and https://127.0.0.1:bad_tls_port/files/ (a certificate of
       the same CA for the wrong name). access_log=False: none (the benchmarks)."""

    def __init__(self, prefix, root, tls=None, access_log=True):
        self.prefix = os.path.abspath(prefix)
        self.root = os.path.abspath(root)
        self.port = free_port()
        self.redirect_port = free_port()
        self.tls_port = free_port() if tls else None
        self.bad_tls_port = free_port() if tls else None
        self.proc = None
        os.makedirs(os.path.join(self.prefix, 'tmp'), exist_ok=True)
        user = 'user root root;\n' if os.geteuid() == 0 else ''
        tmp = os.path.join(self.prefix, 'tmp')
        conf = '''%(user)sworker_processes 1;
pid %(p)s/nginx.pid;
error_log %(p)s/error.log warn;
events { worker_connections 1024; }
http {
    access_log %(alog)s;
    client_body_temp_path %(t)s/body;
    proxy_temp_path %(t)s/proxy;
    fastcgi_temp_path %(t)s/fastcgi;
    uwsgi_temp_path %(t)s/uwsgi;
    scgi_temp_path %(t)s/scgi;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush off;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    server {
        listen 127.0.0.1:%(port)d;
        location /files/ { alias %(root)s/; }
        location /norange/ { alias %(root)s/; max_ranges 0; }
        location /gzstatic/ { alias %(root)s/; gzip_static always; }
        location /json/ { alias %(root)s/; autoindex on; autoindex_format json; }
        location /html/ { alias %(root)s/; autoindex on; autoindex_format html; }
        location /deny/ { return 403; }
        location /broken/ { return 500; }
        location /notjson/ { default_type application/json; return 200 '[{"name": "a",'; }
        location = /redir { return 302 http://127.0.0.1:%(port)d/json/val/; }
        location = /listpage {
            default_type application/json;
            return 200 '[{"name": "a.tar", "type": "file", "size": 10240,
                         "mtime": "Thu, 01 Jan 2026 00:00:00 GMT"}]';
        }
    }
    server {
        listen 127.0.0.1:%(rport)d;
        location / { return 307 http://127.0.0.1:%(port)d$request_uri; }
    }
%(tls)s}
''' % dict(user=user, p=self.prefix, t=tmp, port=self.port, rport=self.redirect_port,
           alog=os.path.join(self.prefix, 'access.log') if access_log else 'off',
           root=self.root, tls=self._tls_conf(tls) if tls else '')
        self.conf = os.path.join(self.prefix, 'nginx.conf')
        with open(self.conf, 'w') as f:
            f.write(conf)

    def _tls_conf(self, tls):
        return '''    server {
        listen 127.0.0.1:%(port)d ssl;
        ssl_certificate %(cert)s;
        ssl_certificate_key %(key)s;
        location /files/ { alias %(root)s/; }
        location /json/ { alias %(root)s/; autoindex on; autoindex_format json; }
        location /html/ { alias %(root)s/; autoindex on; autoindex_format html; }
    }
    server {
        listen 127.0.0.1:%(bport)d ssl;
        ssl_certificate %(bcert)s;
        ssl_certificate_key %(bkey)s;
        location /files/ { alias %(root)s/; }
    }
''' % dict(port=self.tls_port, bport=self.bad_tls_port, root=self.root, cert=tls['cert'],
           key=tls['key'], bcert=tls['bad_cert'], bkey=tls['bad_key'])

    def url(self, path=''):
        return 'http://127.0.0.1:%d/%s' % (self.port, path)

    def tls_url(self, path=''):
        return 'https://127.0.0.1:%d/%s' % (self.tls_port, path)

    def bad_tls_url(self, path=''):
        return 'https://127.0.0.1:%d/%s' % (self.bad_tls_port, path)

    def redirect_url(self, path=''):
        return 'http://127.0.0.1:%d/%s' % (self.redirect_port, path)

    def start(self):
        self.errlog = open(os.path.join(self.prefix, 'stderr.log'), 'wb')
        self.proc = subprocess.Popen([NGINX, '-c', self.conf, '-p', self.prefix, '-g',
                                      'daemon off;'], stdin=subprocess.DEVNULL,
                                     stdout=self.errlog, stderr=self.errlog)
        wait_port(self.port, self.proc)
        wait_port(self.redirect_port, self.proc)
        for p in (self.tls_port, self.bad_tls_port):
            if p:
                wait_port(p, self.proc)
        self.diag = diag.add('nginx on port %d: its access log' % self.port, self.requests)
        return self

    def stop(self):
        if getattr(self, 'diag', None):
            diag.drop(self.diag)
            self.diag = None
        stop_process(self.proc)
        self.proc = None
        if getattr(self, 'errlog', None):
            self.errlog.close()
            self.errlog = None

    def requests(self):
        """Lines of the access log so far."""
        try:
            with open(os.path.join(self.prefix, 'access.log'), errors='replace') as f:
                return f.read().splitlines()
        except OSError:
            return []

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


class LoopbackProxy:
    """A listening socket on 127.0.0.1 (a free port) with a thread per connection: subclasses
    implement _serve(conn). Set a subclass's own attributes before calling __init__, which
    starts accepting."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.port = free_port()
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(('127.0.0.1', self.port))
        self.sock.listen(128)
        self.conns = []
        # a failed test prints the requests it saw (diag.py)
        self.diag = diag.add('%s on port %d (%s): its requests' % (
            type(self).__name__, self.port,
            'to port %d' % upstream_port if upstream_port is not None else 'no upstream'),
            self.request_lines)
        threading.Thread(target=self._accept, daemon=True).start()

    def request_lines(self):
        """The requests seen, one line each (a subclass that records them says how)."""
        return []

    def url(self, path=''):
        return 'http://127.0.0.1:%d/%s' % (self.port, path)

    def _accept(self):
        while not self.stop_ev.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        raise NotImplementedError

    def close(self):
        diag.drop(self.diag)
        self.stop_ev.set()
        try:
            self.sock.close()
        except OSError:
            pass
        with self.lock:
            for c in self.conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class FaultProxy(LoopbackProxy):
    """An HTTP/1.1 proxy on 127.0.0.1 in front of an upstream (nginx). It reads each request,
    fetches the full answer from the upstream over a fresh connection, and relays it with
    keep-alive — unless a fault applies. Faults (set through attributes, any time):
      mode = 'pass'     relay everything
             '503'      answer 503 (Retry-After: 0)
             '400'      answer 400 (an answer of the store, not a failure of it)
             'cut'      send the headers and half the body, then close the connection
             'stall'    send the headers and a few body bytes, then nothing (until shutdown)
             ranged GETs ("Range: bytes=A-B") only, other requests pass:
             'shift'    ask the upstream for bytes=A+512-B+512: an honest 206 of the wrong range
             'short'    ask the upstream for the first half of A-B: a 206 that ends mid-object
             'multipart' answer 206 multipart/byteranges (no Content-Range) with the right bytes
             'overclaim' fetch the first half of A-B, relay it with Content-Length of the half
                        but Content-Range: bytes A-B/T (they disagree)
             'trunc'    the 206's headers with Content-Length rewritten to trunc_bytes (default
                        0) and that many bytes of its body, connection kept: a short body
      count = N         the fault hits the next N matching requests, then 'pass'; -1: always
      methods = {...}   methods the fault applies to (default GET only)
      match = S         the fault applies only to request paths that contain S (None: all)
      on_fault = f      called as f(method, path) after a fault was served, before the
                        connection closes (e.g. to rewrite the object between a cut and the
                        resumed request)
      strip = {...}     request header names (lower case) dropped before the upstream sees them,
                        on every request (e.g. {'if-match'}: a server that ignores If-Match)
    Counters: requests, faults; log: (method, path, request headers) of every request.
    Random-rate mode (set_random): each matching request is faulted with probability `rate`,
    the fault drawn from a seeded RNG among
             '503'      as above
             'cut'      as above (headers, half the body, close)
             'trunc'    headers, a random-length prefix of the body, with Content-Length
                        rewritten to that length (framing consistent, Content-Range unchanged:
                        a 206 that claims A-B but carries less), connection kept
             'stall'    headers and a few body bytes, then nothing for stall_s seconds (or until
                        shutdown), then close
    fault_counts: {fault: number served} of the random mode."""

    def __init__(self, upstream_port):
        self.mode = 'pass'
        self.count = 0
        self.methods = {'GET'}
        self.on_fault = None
        self.match = None
        self.strip = set()
        self.requests = 0
        self.faults = 0
        self.log = []
        self.rate = 0.0
        self.rng = random.Random(0)
        self.rate_modes = ()
        self.fault_counts = {}
        self.stall_s = 5.0
        self.trunc_bytes = 0
        super().__init__(upstream_port)

    def set(self, mode, count=-1, methods=('GET',), on_fault=None, strip=(), match=None):
        with self.lock:
            self.mode, self.count, self.methods = mode, count, set(methods)
            self.on_fault, self.strip, self.match = on_fault, set(strip), match
            self.faults = 0
            self.log = []

    RANDOM_MODES = ('503', 'cut', 'trunc', 'stall')

    def set_random(self, rate, seed=1, modes=RANDOM_MODES, methods=('GET',), match=None,
                   stall_s=5.0):
        """Fault each matching request with probability rate (seeded: the same sequence of
        draws for the same seed), choosing uniformly among modes (of RANDOM_MODES)."""
        with self.lock:
            self.mode, self.count, self.methods = 'random', -1, set(methods)
            self.on_fault, self.strip, self.match = None, set(), match
            self.rate, self.rng, self.rate_modes = rate, random.Random(seed), tuple(modes)
            self.stall_s = stall_s
            self.fault_counts = {m: 0 for m in modes}
            self.faults = 0
            self.log = []

    RANGE_MODES = ('shift', 'short', 'multipart', 'overclaim', 'trunc')

    def request_lines(self):
        """The requests of log (since the last set), with their Range header; then the count
        of all and of the faults."""
        with self.lock:
            log, n, faults = list(self.log), self.requests, self.faults
        out = []
        for method, path, hdrs in log:
            rng = [h for h in hdrs if h.lower().startswith('range:')]
            out.append('%s %s%s' % (method, path, ' ' + rng[0] if rng else ''))
        return out + ['(%d requests in all, %d faults since the last set, mode %r)'
                      % (n, faults, self.mode)]

    def _take_fault(self, method, path, head):
        rng = self._range(head)
        with self.lock:
            self.requests += 1
            self.log.append((method, path, [h.decode('latin-1').rstrip('\r\n')
                                            for h in head[1:]]))
            if self.mode == 'pass' or method not in self.methods or self.count == 0:
                return 'pass'
            if self.match is not None and self.match not in path:
                return 'pass'
            if self.mode in self.RANGE_MODES and (rng is None or rng[1] is None):
                return 'pass'
            if self.mode == 'random':
                if self.rng.random() >= self.rate:
                    return 'pass'
                mode = self.rng.choice(self.rate_modes)
                self.faults += 1
                self.fault_counts[mode] = self.fault_counts.get(mode, 0) + 1
                return 'r-' + mode
            if self.count > 0:
                self.count -= 1
            self.faults += 1
            return self.mode

    @staticmethod
    def _read_head(f):
        lines = []
        while True:
            line = f.readline(65537)
            if not line:
                return None
            if line in (b'\r\n', b'\n'):
                return lines
            lines.append(line)

    @staticmethod
    def _range(head):
        """(A, B or None) of a "Range: bytes=A-B" request header, else None."""
        for line in head[1:]:
            m = re.match(rb'(?i)range:\s*bytes=(\d+)-(\d*)\s*$', line)
            if m:
                return int(m.group(1)), int(m.group(2)) if m.group(2) else None
        return None

    @staticmethod
    def _set_range(head, a, b):
        return [line if not line.lower().startswith(b'range:') else
                b'Range: bytes=%d-%d\r\n' % (a, b) for line in head]

    def _fetch(self, head):
        """Send the request head to the upstream (Connection: close); return (status line,
        header lines, body)."""
        out = []
        drop = tuple(h.encode() + b':' for h in self.strip)
        for line in head:
            if line.lower().startswith((b'connection:', b'keep-alive:') + drop):
                continue
            out.append(line)
        up = socket.create_connection(('127.0.0.1', self.upstream), timeout=30)
        try:
            up.sendall(b''.join(out) + b'Connection: close\r\n\r\n')
            f = up.makefile('rb')
            status = f.readline()
            hdrs = self._read_head(f) or []
            body = f.read()
        finally:
            up.close()
        return status, hdrs, body

    def _serve(self, c):
        f = c.makefile('rb')
        try:
            while not self.stop_ev.is_set():
                head = self._read_head(f)
                if not head:
                    return
                parts = head[0].split(b' ')
                method = parts[0].decode('latin-1')
                path = parts[1].decode('latin-1') if len(parts) > 1 else ''
                fault = self._take_fault(method, path, head)
                if fault in ('r-503', 'r-cut'):
                    fault = fault[2:]
                if fault == '503':
                    c.sendall(b'HTTP/1.1 503 Service Unavailable\r\nRetry-After: 0\r\n'
                              b'Content-Length: 5\r\n\r\nbusy\n')
                    self._after_fault(method, path)
                    continue
                if fault == '400':
                    c.sendall(b'HTTP/1.1 400 Bad Request\r\nContent-Length: 4\r\n\r\nbad\n')
                    self._after_fault(method, path)
                    continue
                rng = self._range(head)
                if fault == 'shift':
                    head = self._set_range(head, rng[0] + 512, rng[1] + 512)
                elif fault in ('short', 'overclaim'):
                    head = self._set_range(head, rng[0], rng[0] + (rng[1] - rng[0]) // 2)
                elif fault == 'multipart':
                    head = [line for line in head if not line.lower().startswith(b'range:')]
                status, hdrs, body = self._fetch(head)
                hdrs = [h for h in hdrs if not h.lower().startswith((b'connection:',
                                                                    b'keep-alive:'))]
                if fault == 'multipart' and status.split(b' ')[1:2] == [b'200']:
                    part = body[rng[0]:rng[1] + 1]
                    mp = (b'--B0UND\r\nContent-Type: application/octet-stream\r\n'
                          b'Content-Range: bytes %d-%d/%d\r\n\r\n' % (
                              rng[0], rng[0] + len(part) - 1, len(body)) +
                          part + b'\r\n--B0UND--\r\n')
                    status = b'HTTP/1.1 206 Partial Content\r\n'
                    hdrs = [h for h in hdrs if not h.lower().startswith((b'content-length:',
                                                                        b'content-type:'))]
                    hdrs += [b'Content-Type: multipart/byteranges; boundary=B0UND\r\n',
                             b'Content-Length: %d\r\n' % len(mp)]
                    body = mp
                elif fault == 'overclaim' and status.split(b' ')[1:2] == [b'206']:
                    hdrs = [re.sub(rb'(?i)^(content-range:\s*bytes )(\d+)-(\d+)/',
                                   lambda m: m.group(1) + b'%d-%d/' % (rng[0], rng[1]), h)
                            for h in hdrs]
                if method == 'HEAD':
                    hb = status + b''.join(hdrs) + b'\r\n'
                else:
                    hb = status + b''.join(hdrs) + b'Connection: keep-alive\r\n\r\n'
                if (fault == 'r-trunc' and method != 'HEAD' and len(body) > 1) or (
                        fault == 'trunc' and status.split(b' ')[1:2] == [b'206']):
                    with self.lock:
                        n = (self.rng.randrange(0, len(body)) if fault == 'r-trunc' else
                             min(self.trunc_bytes, len(body) - 1))
                    hdrs = [h for h in hdrs if not h.lower().startswith(b'content-length:')]
                    c.sendall(status + b''.join(hdrs) + b'Content-Length: %d\r\n' % n +
                              b'Connection: keep-alive\r\n\r\n' + body[:n])
                    if fault == 'trunc':
                        self._after_fault(method, path)
                    continue
                if fault == 'r-stall' and method != 'HEAD':
                    c.sendall(hb + body[:min(len(body), 100)])
                    self.stop_ev.wait(self.stall_s)
                    return
                if fault == 'cut' and len(body) > 1:
                    c.sendall(hb + body[:len(body) // 2])
                    self._after_fault(method, path)
                    return
                if fault == 'stall':
                    c.sendall(hb + body[:min(len(body), 100)])
                    self._after_fault(method, path)
                    self.stop_ev.wait()
                    return
                c.sendall(hb + (b'' if method == 'HEAD' else body))
                if fault != 'pass':
                    self._after_fault(method, path)
        except OSError:
            return
        finally:
            try:
                c.close()
            except OSError:
                pass

    def _after_fault(self, method, path):
        f = self.on_fault
        if f:
            f(method, path)



class GateProxy(FaultProxy):
    """A proxy that counts ranged GETs in flight (received, answer not yet sent) and holds
    each until `target` are in flight at once; from then on, or once `deadline` seconds have
    passed since the first ranged GET, the gate stays open. A client that runs `target`
    requests in parallel reaches the target without waiting; one that runs fewer is held
    until the deadline, and max_inflight says how many it ran. Counts, not timings, decide:
    the deadline only bounds how long a failing client waits. Ranged GETs of fewer than
    min_bytes (a header probe's unit) pass without being held or counted."""

    def __init__(self, upstream_port, target, deadline=30.0, min_bytes=0):
        self.target = target
        self.min_bytes = min_bytes
        self.deadline = deadline
        self.cond = threading.Condition()
        self.inflight = 0
        self.max_inflight = 0
        self.ranged = 0
        self.opened = False
        self.t_first = None
        super().__init__(upstream_port)

    def _fetch(self, head):
        rg = self._range(head) if head[0].startswith(b'GET ') else None
        ranged = rg is not None and (rg[1] is None or rg[1] + 1 - rg[0] >= self.min_bytes)
        if not ranged:
            return super()._fetch(head)
        with self.cond:
            self.inflight += 1
            self.ranged += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
            if self.t_first is None:
                self.t_first = time.monotonic()
            if self.inflight >= self.target:
                self.opened = True
                self.cond.notify_all()
            while not self.opened and not self.stop_ev.is_set():
                left = self.t_first + self.deadline - time.monotonic()
                if left <= 0:
                    self.opened = True
                    self.cond.notify_all()
                    break
                self.cond.wait(min(left, 1.0))
        try:
            return super()._fetch(head)
        finally:
            # the answer is sent right after; counting it out here is early by one send,
            # which only ever lowers max_inflight
            with self.cond:
                self.inflight -= 1


class HoldProxy(FaultProxy):
    """A FaultProxy whose ranged GETs that start at or past hold_from wait (before they are
    fetched) until the event release is set, or the proxy is closed."""

    def __init__(self, upstream_port, hold_from):
        self.hold_from = hold_from
        self.release = threading.Event()
        super().__init__(upstream_port)

    def _fetch(self, head):
        rng = self._range(head)
        if rng and rng[0] >= self.hold_from:
            while not self.release.is_set() and not self.stop_ev.is_set():
                self.release.wait(0.5)
        return super()._fetch(head)


class SlowProxy(LoopbackProxy):
    """HTTP/1.1 proxy on 127.0.0.1 in front of nginx. Relays each answer's body at most
    `rate` bytes/s per connection (None: unthrottled). Records every GET as a dict with
    path, range (a, b), sent (body bytes relayed), done (the whole body was relayed) and held.
    Holding: with hold_from set, a GET of a range that starts at or after hold_from relays its
    headers and the first hold_bytes of its body, sets held, and then waits until release()
    (or close) before it relays the rest: a fill that is deterministically in flight; with
    cut_held set, the held answer is cut there instead (the connection closed at release).
    refuse: None, or a function of a GET's record (path, range) that returns True for a GET
    to answer 400 Bad Request (recorded, not relayed). hold_heads: None, or a function of a
    HEAD's path: such a HEAD is recorded in heads, set held, and relayed only after release()
    (or close)."""

    def __init__(self, upstream_port):
        self.rate = None
        self.gets = []
        self.hold_from = None
        self.hold_paths = None  # or a function of a ranged GET's path: hold it too
        self.hold_bytes = 64 * 1024
        self.cut_held = False
        self.refuse = None
        self.hold_heads = None
        self.heads = []
        self.released = threading.Event()
        super().__init__(upstream_port)

    def request_lines(self):
        """Its GETs and held HEADs (since the last reset): method, path, range, bytes sent,
        done, held."""
        with self.lock:
            recs = [('GET', dict(r)) for r in self.gets] + [('HEAD', dict(r)) for r in self.heads]
        return ['%s %s range=%s sent=%d done=%s held=%s' % (m, r['path'], r['range'], r['sent'],
                                                            r['done'], r['held'])
                for m, r in recs]

    def held(self):
        with self.lock:
            return [dict(r) for r in self.gets + self.heads if r['held']]

    def release(self):
        self.hold_from = None
        self.hold_paths = None
        self.hold_heads = None
        self.released.set()

    def _relay(self, c, rec, b, hold):
        """Send body bytes b, stopping for the hold once hold_bytes were sent."""
        if hold and not rec['held'] and rec['sent'] + len(b) >= self.hold_bytes:
            k = self.hold_bytes - rec['sent']
            c.sendall(b[:k])
            with self.lock:
                rec['sent'] += k
                rec['held'] = True
            while not self.released.wait(0.1):
                if self.stop_ev.is_set():
                    return
            if self.cut_held:
                raise OSError('cut at the hold')
            b = b[k:]
        c.sendall(b)
        with self.lock:
            rec['sent'] += len(b)

    def _serve(self, c):
        f = c.makefile('rb')
        try:
            while not self.stop_ev.is_set():
                head = FaultProxy._read_head(f)
                if not head:
                    return
                parts = head[0].split(b' ')
                method = parts[0].decode('latin-1')
                rng = FaultProxy._range(head)
                rec = dict(path=parts[1].decode('latin-1'), range=rng, sent=0, done=False,
                           held=False)
                hold_from, hold_paths = self.hold_from, self.hold_paths
                hold = (method == 'GET' and rng is not None and
                        ((hold_from is not None and rng[0] >= hold_from) or
                         (hold_paths is not None and hold_paths(rec['path']))))
                if method == 'GET':
                    with self.lock:
                        self.gets.append(rec)
                    refuse = self.refuse
                    if refuse is not None and refuse(rec):
                        c.sendall(b'HTTP/1.1 400 Bad Request\r\nContent-Length: 4\r\n\r\nbad\n')
                        with self.lock:
                            rec['done'] = True
                        continue
                hold_heads = self.hold_heads
                if method == 'HEAD' and hold_heads is not None and hold_heads(rec['path']):
                    with self.lock:
                        self.heads.append(rec)
                        rec['held'] = True
                    while not self.released.wait(0.1):
                        if self.stop_ev.is_set():
                            return
                out = [ln for ln in head
                       if not ln.lower().startswith((b'connection:', b'keep-alive:'))]
                up = socket.create_connection(('127.0.0.1', self.upstream), timeout=30)
                try:
                    up.sendall(b''.join(out) + b'Connection: close\r\n\r\n')
                    uf = up.makefile('rb')
                    status = uf.readline()
                    hdrs = FaultProxy._read_head(uf) or []
                    hdrs = [h for h in hdrs if not h.lower().startswith((b'connection:',
                                                                         b'keep-alive:'))]
                    c.sendall(status + b''.join(hdrs) + b'\r\n')
                    t0 = time.monotonic()
                    while True:
                        b = uf.read1(65536) if method != 'HEAD' else b''
                        if not b:
                            break
                        self._relay(c, rec, b, hold)
                        rate = self.rate
                        if rate:
                            ahead = rec['sent'] / rate - (time.monotonic() - t0)
                            if ahead > 0:
                                time.sleep(ahead)
                        if self.stop_ev.is_set():
                            return
                    with self.lock:
                        rec['done'] = True
                finally:
                    up.close()
        except OSError:
            return
        finally:
            try:
                c.close()
            except OSError:
                pass

    def reset(self):
        with self.lock:
            self.gets = []


def main(argv):
    if len(argv) != 3 or argv[0] != 'serve':
        print('usage: python3 -m shardfs_test.web serve PREFIX ROOT', file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    ng = Nginx(argv[1], argv[2], access_log=False)
    try:
        ng.start()
        print('port %d' % ng.port, flush=True)
        return ng.proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        ng.stop()


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
