"""A scripted HTTP/1.x server of one object on 127.0.0.1, for answers no real server gives on
demand: each request's answer is built by a function of the test, sent in pieces of a chosen
size, and the connection cut at a chosen byte of the answer.

    srv = Scripted(data, answer)   # answer(n, method, rng, data) -> Answer
    ... srv.url('s/x.tar') ...
    srv.close()

answer gets n (0 for the first request the server reads, counting every connection), the
method ('GET', 'HEAD'), the request's range (A, B) of "Range: bytes=A-B" (B clipped to the
object's end) or None, and the object; it returns an Answer (or None for Answer.ranged(...)'s
ordinary answer); with_path=True adds the request's path as a fifth argument. The server
counts connections (conns), requests (requests) and keeps each request's (method, range,
connection number) in log. No timing: pieces are sent one by one
with TCP_NODELAY (a head trickled a byte at a time is that many segments), none is held back.
"""
import re
import socket
import threading


class Answer:
    """raw: the whole answer (head and body) as bytes; cut: send only its first cut bytes, then
    close (None: all of it); close: close the connection after it (else wait for the next
    request); piece: send it in pieces of this many bytes (None: in one send)."""

    def __init__(self, raw, cut=None, close=False, piece=None):
        self.raw, self.cut, self.close, self.piece = raw, cut, close, piece

    @staticmethod
    def head(status, hdrs, version=b'HTTP/1.1'):
        return version + b' ' + status + b'\r\n' + b''.join(h + b'\r\n' for h in hdrs) + b'\r\n'

    @classmethod
    def ranged(cls, method, rng, data, version=b'HTTP/1.1', extra=(), **kw):
        """The answer a correct server gives: a 206 of the range (a 200 of the whole object
        without one), Content-Length, an ETag, and the extra header lines; no body for HEAD."""
        if rng:
            a, b = rng
            body = data[a:b + 1]
            h = cls.head(b'206 Partial Content', [b'Content-Range: bytes %d-%d/%d' % (
                a, b, len(data)), b'Content-Length: %d' % len(body), b'ETag: "e1"'] +
                list(extra), version)
        else:
            body = data
            h = cls.head(b'200 OK', [b'Content-Length: %d' % len(data), b'ETag: "e1"',
                                     b'Accept-Ranges: bytes'] + list(extra), version)
        return cls(h + (b'' if method == 'HEAD' else body), **kw)


class Scripted:
    def __init__(self, data, answer, with_path=False):
        self.data = data
        self.answer = answer
        self.with_path = with_path  # answer(n, method, rng, data, path): the request's path
        self.lock = threading.Lock()
        self.conns = 0
        self.requests = 0
        self.log = []
        self.socks = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, path=''):
        return 'http://127.0.0.1:%d/%s' % (self.port, path)

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns += 1
                cn = self.conns
                self.socks.append(c)
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(c, cn), daemon=True).start()

    def _serve(self, c, cn):
        buf = b''
        try:
            with c:
                while True:
                    while b'\r\n\r\n' not in buf:
                        b = c.recv(65536)
                        if not b:
                            return
                        buf += b
                    head, _, buf = buf.partition(b'\r\n\r\n')
                    method = head.split(b' ', 1)[0].decode('latin-1')
                    parts = head.split(b' ', 2)
                    path = parts[1].decode('latin-1') if len(parts) > 1 else ''
                    rng = None
                    m = re.search(rb'(?im)^range:\s*bytes=(\d+)-(\d*)\s*$', head)
                    if m:
                        a = int(m.group(1))
                        b = int(m.group(2)) if m.group(2) else len(self.data) - 1
                        rng = (a, min(b, len(self.data) - 1))
                    with self.lock:
                        n = self.requests
                        self.requests += 1
                        self.log.append((method, rng, cn))
                    args = (n, method, rng, self.data) + ((path,) if self.with_path else ())
                    ans = self.answer(*args) or Answer.ranged(method, rng, self.data)
                    raw = ans.raw if ans.cut is None else ans.raw[:ans.cut]
                    step = ans.piece or max(len(raw), 1)
                    for i in range(0, len(raw), step):
                        c.sendall(raw[i:i + step])
                    if ans.close or ans.cut is not None:
                        return
        except OSError:
            return

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        with self.lock:
            for c in self.socks:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
