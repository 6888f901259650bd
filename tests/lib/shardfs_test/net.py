"""Loopback networking for the test servers: free ports on 127.0.0.1, waiting until a server
listens, stopping it, the threading HTTP server class the Python stand-ins run on, and the
request handler bases (Handler; ObjectHandler, the hostile tests' object servers).
Python 3 stdlib."""

import fcntl
import http.server
import os
import random
import re
import socket
import socketserver
import subprocess
import threading
import time


# free_port's ports: below the kernel's ephemeral range (ip_local_port_range), so that no
# connect() of any process is given one as its local port, and each held for the life of the
# process that picked it by a lock on its byte of PORTS_LOCK (fcntl record locks end with the
# process), so that two tests running at once (tests/run.sh runs two) never pick the same port
# between one's pick and its server's bind.
PORTS_LOCK = '/tmp/shardfs-test-ports.lock'
PORTS_SPAN = 12000
_ports_lock = threading.Lock()
_ports_fd = None
_ports_mine = set()


def _port_range():
    try:
        with open('/proc/sys/net/ipv4/ip_local_port_range') as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        lo = 32768
    lo = max(lo, 2048)
    return max(1024, lo - PORTS_SPAN), lo


def _ports_open():
    """PORTS_LOCK opened for writing (a record lock needs it), made readable and writable by
    every user when this process creates it (the umask would take that), so that the tests of
    several users share one set of ports. Where this user cannot open it (another user made it
    before this rule, or the sticky /tmp's protected_regular refuses it): a lock file of this
    user's own, which keeps this user's tests apart (a clash with another user's port is then
    only a bind that fails, which the pick already skips)."""
    for path in (PORTS_LOCK, '%s.%d' % (PORTS_LOCK, os.getuid())):
        try:
            return os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            pass
        except PermissionError:
            continue
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            return os.open(path, os.O_RDWR | os.O_CLOEXEC)  # made by another test just now
        except PermissionError:
            continue
        os.fchmod(fd, 0o666)
        return fd
    raise OSError('cannot open %s nor %s.%d for writing' % (PORTS_LOCK, PORTS_LOCK, os.getuid()))


def free_port():
    """A port on 127.0.0.1 that nothing listens on now, that no other process of the tests
    picked and still runs (PORTS_LOCK), and that no connect() is given as its own (below the
    ephemeral range): the caller's server binds it soon after."""
    global _ports_fd
    with _ports_lock:
        if _ports_fd is None:
            _ports_fd = _ports_open()
        lo, hi = _port_range()
        start = random.SystemRandom().randrange(lo, hi)
        for i in range(hi - lo):
            port = lo + (start - lo + i) % (hi - lo)
            if port in _ports_mine:
                continue
            try:
                fcntl.lockf(_ports_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port, os.SEEK_SET)
            except OSError:
                continue  # another test's process holds it
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(('127.0.0.1', port))
                except OSError:
                    fcntl.lockf(_ports_fd, fcntl.LOCK_UN, 1, port, os.SEEK_SET)
                    continue  # something else of the machine has it
            _ports_mine.add(port)
            return port
    raise OSError('no free port in %d-%d' % (lo, hi - 1))


def wait_port(port, proc=None, timeout=30.0):
    """Returns once 127.0.0.1:port accepts a connection; raises RuntimeError when proc (a
    Popen, optional) exits first or after timeout seconds (generous: a busy CI machine)."""
    t = time.monotonic() + timeout
    while time.monotonic() < t:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError('server exited with %r before listening' % proc.returncode)
        try:
            socket.create_connection(('127.0.0.1', port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError('nothing listens on 127.0.0.1:%d after %.0fs' % (port, timeout))


def stop_process(proc, grace=10.0):
    """Ends a server started with Popen (None or already exited: nothing to do): SIGTERM,
    then SIGKILL when it has not exited after grace seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Handler(http.server.BaseHTTPRequestHandler):
    """The stand-ins' request handler base: HTTP/1.1 keep-alive, no access log on stderr,
    and reply() for a whole answer."""
    protocol_version = 'HTTP/1.1'

    def log_message(self, fmt, *a):
        pass

    def reply(self, status, body=b'', ctype='text/plain', extra=()):
        """One whole answer: status, Content-Type, Content-Length, extra (name, value)
        headers, and body (str is UTF-8; not sent for HEAD)."""
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(body)


class ObjectHandler(Handler):
    """Handler of the hostile tests' small object servers (they answer as they are told to,
    lies included): TCP_NODELAY, HEAD and GET both to serve(head), answer() that sends the
    headers as given (no Content-Type of its own), and a request's byte range."""

    def setup(self):
        super().setup()
        # headers and body are separate writes: without this, Nagle and delayed ACKs make
        # every answer take 40 ms
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_HEAD(self):
        self.serve(True)

    def do_GET(self):
        self.serve(False)

    def serve(self, head):
        raise NotImplementedError

    def answer(self, code, headers, body=b''):
        """Status code, the (name, value) headers as given, then body (what the caller passes:
        an empty one for HEAD)."""
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if body:
            self.wfile.write(body)

    def span(self, size):
        """(a, b), the first and last byte of the request's 'Range: bytes=A-[B]' in an object
        of size bytes (b clipped to its end); None without such a header."""
        r = re.match(r'bytes=(\d+)-(\d*)$', self.headers.get('Range') or '')
        if not r:
            return None
        b = int(r.group(2)) if r.group(2) else size - 1
        return int(r.group(1)), min(b, size - 1)

    def part(self, data):
        """The body and Content-Range of the request's range of data (all of it without a
        Range): (bytes, [('Content-Range', ...)]), for a 206."""
        a, b = self.span(len(data)) or (0, len(data) - 1)
        return data[a:b + 1], [('Content-Range', 'bytes %d-%d/%d' % (a, b, len(data)))]


class ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """An HTTP server with one daemon thread per connection (the stand-ins' base)."""
    daemon_threads = True
    allow_reuse_address = True


class LoopbackServer:
    """Base of the Python stand-ins: serve(handler_cls) runs a ThreadingServer on a free
    127.0.0.1 port (self.port) in a daemon thread, its handlers reach this object as
    self.server.owner; stop() ends it. Call serve() last in __init__: requests may come
    at once."""

    def serve(self, handler_cls):
        self.port = free_port()
        self.httpd = ThreadingServer(('127.0.0.1', self.port), handler_cls)
        self.httpd.owner = self
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path=''):
        """http://127.0.0.1:PORT/path"""
        return 'http://127.0.0.1:%d/%s' % (self.port, path)

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
