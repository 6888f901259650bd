"""Loopback networking for the test servers: free ports on 127.0.0.1, waiting until a server
listens, stopping it, and the threading HTTP server class the Python stand-ins run on.
Python 3 stdlib."""

import http.server
import socket
import socketserver
import subprocess
import threading
import time


def free_port():
    """A port on 127.0.0.1 that nothing listens on now (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


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

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
