"""Link emulator of the benchmarks: an HTTP object store on 127.0.0.1 that behaves like a
remote object store on a real link, for tests/bench/link_bench.py.

    python3 tests/lib/shardfs_test/linkemu.py --root DIR [--delay-ms 30] [--rate-mb 60]
                                              [--port-file F]

Every request waits --delay-ms before its response starts (an object store's time to first
byte), and every connection sends at most --rate-mb MB/s (10^6 bytes): the kernel paces the
socket (SO_MAX_PACING_RATE, TCP's own pacing), so the rate costs no CPU here and holds for
each connection separately, as a store's per-connection throughput does; there is no cap on
the sum. The bodies go out with sendfile(2) from one thread per connection, so the server
itself is not the bottleneck (link_bench.py measures it against curl before it is used).

Serves files under DIR: GET and HEAD, one byte range (206, Content-Range), If-Match (412),
an ETag "mtime-size" in hex as nginx's, keep-alive (HTTP/1.1); a path ending in "/" gets an
nginx-style JSON autoindex listing. Why not nginx: its limit_rate lets each request send a
full second's worth before it throttles (ngx_http_write_filter: rate x (elapsed + 1)), so an
8 MiB range request at 60 MB/s is never slowed at all.

Prints "port N" on stdout (and writes N to --port-file) once it listens; runs until killed.
"""
import argparse
import email.utils
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

    def serve(self, body):
        if self.server.delay_s:
            time.sleep(self.server.delay_s)
        with self.server.stats_lock:
            self.server.requests += 1
        rel = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
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


class Emu:
    """This emulator in a child process on a free port, serving root; w is a work dir for its
    port file, tag names it."""

    def __init__(self, root, delay_ms, rate_mb, w, tag, timeout=60.0):
        pf = os.path.join(w, 'emu-%s.port' % tag)
        if os.path.exists(pf):
            os.unlink(pf)
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), '--root', root,
                                   '--delay-ms', str(delay_ms), '--rate-mb', str(rate_mb),
                                   '--port-file', pf], stdout=subprocess.DEVNULL)
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

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        self.p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--root', required=True)
    ap.add_argument('--port', type=int, default=0)
    ap.add_argument('--delay-ms', type=float, default=30.0,
                    help='wait before each response starts (default 30)')
    ap.add_argument('--rate-mb', type=float, default=60.0,
                    help='most MB/s (10^6 B) per connection, 0: no cap (default 60)')
    ap.add_argument('--port-file')
    a = ap.parse_args()
    srv = Server(('127.0.0.1', a.port), Handler)
    srv.root = os.path.realpath(a.root)
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
