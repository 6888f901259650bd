"""Servers for the http(s) remote tests, Python 3 stdlib only: nginx on 127.0.0.1 with a
generated config (JSON and HTML autoindex, raw files, a 307 redirector standing in for an
AIStore proxy), and a small fault-injecting HTTP proxy in front of it."""

import os
import socket
import subprocess
import threading
import time

NGINX = '/usr/sbin/nginx'


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc=None, timeout=15.0):
    t = time.monotonic() + timeout
    while time.monotonic() < t:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError('server exited with %r before listening' % proc.returncode)
        try:
            socket.create_connection(('127.0.0.1', port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError('nothing listens on 127.0.0.1:%d after %.0fs' % (port, timeout))


class Nginx:
    """nginx serving root at:
         http://127.0.0.1:port/files/...   raw files (no listing)
         http://127.0.0.1:port/json/...    the same tree, autoindex_format json
         http://127.0.0.1:port/html/...    the same tree, autoindex html
       and a redirector at http://127.0.0.1:redirect_port/X -> 307 -> http://127.0.0.1:port/X."""

    def __init__(self, prefix, root):
        self.prefix = os.path.abspath(prefix)
        self.root = os.path.abspath(root)
        self.port = free_port()
        self.redirect_port = free_port()
        self.proc = None
        os.makedirs(os.path.join(self.prefix, 'tmp'), exist_ok=True)
        user = 'user root root;\n' if os.geteuid() == 0 else ''
        tmp = os.path.join(self.prefix, 'tmp')
        conf = '''%(user)sworker_processes 1;
pid %(p)s/nginx.pid;
error_log %(p)s/error.log warn;
events { worker_connections 1024; }
http {
    access_log %(p)s/access.log;
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
        location /json/ { alias %(root)s/; autoindex on; autoindex_format json; }
        location /html/ { alias %(root)s/; autoindex on; autoindex_format html; }
    }
    server {
        listen 127.0.0.1:%(rport)d;
        location / { return 307 http://127.0.0.1:%(port)d$request_uri; }
    }
}
''' % dict(user=user, p=self.prefix, t=tmp, port=self.port, rport=self.redirect_port,
           root=self.root)
        self.conf = os.path.join(self.prefix, 'nginx.conf')
        with open(self.conf, 'w') as f:
            f.write(conf)

    def url(self, path=''):
        return 'http://127.0.0.1:%d/%s' % (self.port, path)

    def redirect_url(self, path=''):
        return 'http://127.0.0.1:%d/%s' % (self.redirect_port, path)

    def start(self):
        self.errlog = open(os.path.join(self.prefix, 'stderr.log'), 'wb')
        self.proc = subprocess.Popen([NGINX, '-c', self.conf, '-p', self.prefix, '-g',
                                      'daemon off;'], stdin=subprocess.DEVNULL,
                                     stdout=self.errlog, stderr=self.errlog)
        wait_port(self.port, self.proc)
        wait_port(self.redirect_port, self.proc)
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
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


class FaultProxy:
    """An HTTP/1.1 proxy on 127.0.0.1 in front of an upstream (nginx). It reads each request,
    fetches the full answer from the upstream over a fresh connection, and relays it with
    keep-alive — unless a fault applies. Faults (set through attributes, any time):
      mode = 'pass'     relay everything
             '503'      answer 503 (Retry-After: 0)
             'cut'      send the headers and half the body, then close the connection
             'stall'    send the headers and a few body bytes, then nothing (until shutdown)
      count = N         the fault hits the next N matching requests, then 'pass'; -1: always
      methods = {...}   methods the fault applies to (default GET only)
    Counters: requests, faults."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.port = free_port()
        self.mode = 'pass'
        self.count = 0
        self.methods = {'GET'}
        self.requests = 0
        self.faults = 0
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(('127.0.0.1', self.port))
        self.sock.listen(128)
        self.conns = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def url(self, path=''):
        return 'http://127.0.0.1:%d/%s' % (self.port, path)

    def set(self, mode, count=-1, methods=('GET',)):
        with self.lock:
            self.mode, self.count, self.methods = mode, count, set(methods)
            self.faults = 0

    def _take_fault(self, method):
        with self.lock:
            self.requests += 1
            if self.mode == 'pass' or method not in self.methods or self.count == 0:
                return 'pass'
            if self.count > 0:
                self.count -= 1
            self.faults += 1
            return self.mode

    def _accept(self):
        while not self.stop_ev.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

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

    def _fetch(self, head):
        """Send the request head to the upstream (Connection: close); return (status line,
        header lines, body)."""
        out = []
        for line in head:
            if line.lower().startswith((b'connection:', b'keep-alive:')):
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
                method = head[0].split(b' ', 1)[0].decode('latin-1')
                fault = self._take_fault(method)
                if fault == '503':
                    c.sendall(b'HTTP/1.1 503 Service Unavailable\r\nRetry-After: 0\r\n'
                              b'Content-Length: 5\r\n\r\nbusy\n')
                    continue
                status, hdrs, body = self._fetch(head)
                hdrs = [h for h in hdrs if not h.lower().startswith((b'connection:',
                                                                    b'keep-alive:'))]
                if method == 'HEAD':
                    hb = status + b''.join(hdrs) + b'\r\n'
                else:
                    hb = status + b''.join(hdrs) + b'Connection: keep-alive\r\n\r\n'
                if fault == 'cut' and len(body) > 1:
                    c.sendall(hb + body[:len(body) // 2])
                    return
                if fault == 'stall':
                    c.sendall(hb + body[:min(len(body), 100)])
                    self.stop_ev.wait()
                    return
                c.sendall(hb + (b'' if method == 'HEAD' else body))
        except OSError:
            return
        finally:
            try:
                c.close()
            except OSError:
                pass

    def close(self):
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
