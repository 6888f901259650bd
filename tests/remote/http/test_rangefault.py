#!/usr/bin/env python3
"""Answers to ranged GETs that are not what they claim, never in silence (issue 40 #5, #13).

    test_rangefault.py SHARDFS GROUP REQ_CLI

Groups (each starts its own nginx on 127.0.0.1 and, for 'shortbody', the fault proxy):
  shortbody  a 206 whose Content-Length is short of its Content-Range (the body stops early):
             its bytes are kept and the rest asked for again, each counted in
             store_short_bodies (req_cli's short_bodies) and store_attempts; exact bytes, no
             failure; also when it is the shard's first answer (the index build's read: the
             listing shows the member, not EIO). A server that sends 0 bytes of every such answer: the read fails with EIO
             within --retry-budget, store_failures 1, and the log line names the status and
             "short body: got 0 of M bytes".
  norange    nginx with max_ranges 0 answers every ranged GET with 200 and the whole object:
             the bytes are exact, bytes_received counts what the server sent (the whole object
             for a range at its end: exactly), store_range_ignored every such answer, and the
             log says it once per object with the cost.
  pause      a sink that answers BACKEND_SINK_FULL (req_cli REQ_CLI_PAUSE=3: every piece
             refused 3 times before it is taken): the transfer pauses and the same bytes come
             again at the same offset; exact bytes, bytes_received what nginx sent (a byte
             offered again is not counted twice), pauses a multiple of 3, no failure, one
             attempt per request; also over the norange location (a 200 to a range: the bytes
             before the range skipped once, not again after a pause). Each refusal is
             followed by a backend_sink_ready from another thread: the store's pauses,
             resumes and req_cli's refusals equal, none resumed by the bound
             (BACKEND_PAUSE_BACKSTOP_MS); with REQ_CLI_NOWAKE=1 every pause resumed by the
             bound, counted.
  lean       the lean engine (req_cli REQ_CLI_ENGINE=auto: --http-engine auto): 20 ranged
             reads one after the other through the fault proxy: exact bytes, 20 lean attempts
             on one kept-alive connection (the proxy accepts 2: curl's HEAD and the lean one;
             req_cli's connects 2); the proxy cutting 2 answers mid-body (headers and half the
             body, then close): each resumed, exact bytes, short_bodies 2, attempts 21 + 2,
             a new connection after each cut; nginx answering 200 to ranges (norange): exact
             bytes, range_ignored 2, bytes_received the whole object twice; a server that
             closes each connection after its answer without saying so: 10 reads, each on a
             new connection, exact bytes, no failed attempt.
  syncpass   a synchronous read (backend_pread_version, which a thread waits for: a weak
             ETag's probe, a read past a full cache, a sidecar) while an ordinary read holds
             the only connection (--connections 1): the proxy holds every ranged GET from
             512 KiB on until the test releases it, req_cli (REQ_CLI_SYNC) sends one read
             there, then reads [0, 64 KiB) synchronously: it returns (exact bytes) while the
             other is held, with curl and with the lean engine; then the held one ends, exact
             bytes, 3 requests (the HEAD and both reads), no failure. Before 2026-11-30 the
             synchronous read waited for the connection the held one kept (the bound: 60 s).
  recvmem    the lean engine receives a body straight into memory its sink offers (req_cli
             REQ_CLI_MEM: offers up to the next 50,000-byte unit edge, as a fill's buffer does):
             a server (PacedServer) that sends each answer's head with k body bytes in one send,
             waits until the client has read them (the client's receive queue empty, in
             /proc/net/tcp), then the rest or up to a cut: cuts in the head's receive, at a
             unit's edge, mid-unit and at the engine buffer's end (65,536), each resumed; exact
             bytes, and exactly the head's k bytes copied (as far as the head's receive, at
             most 2048 bytes with the head, takes them), the rest received in place
             (inplace_bytes, copied_bytes, the sink's own counts equal); a sink refusing every
             piece once (REQ_CLI_PAUSE=1) whose refused piece's memory is overwritten before it
             comes again: exact bytes, nothing in place (each refused piece came again from the
             engine's copy); nginx and the fault proxy's cuts: exact bytes, in place + copied =
             bytes received; curl: nothing in place. A mount of nginx (the fill's sink):
             exact bytes, store_recv_inplace_bytes + store_recv_copied_bytes =
             store_bytes_received, most of them in place; 0 and 0 with --http-engine curl.
Exact counts throughout (faults served, requests, attempts, bytes); no timing.
"""
import errno
import fcntl
import os
import re
import select
import socket
import subprocess
import sys
import tarfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))

from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

SIZE = 1 << 20  # the member's bytes: the shard is a little more


def make_source(env):
    """src/s/shard-00000{0,1}.tar: one random 1 MiB member each, readable by nginx."""
    src = env.path('src')
    os.makedirs(os.path.join(src, 's'))
    for i in range(2):
        data = env.path('member-%d.bin' % i)
        with open(data, 'wb') as f:
            f.write(bytes(env.rng.getrandbits(8) for _ in range(4096)) * (SIZE // 4096))
        with tarfile.open(os.path.join(src, 's', 'shard-%06d.tar' % i), 'w',
                          format=tarfile.USTAR_FORMAT) as t:
            t.add(data, arcname='%06d.bin' % i)
    for d, _, files in os.walk(env.tmp):
        os.chmod(d, 0o755)
        for fn in files:
            os.chmod(os.path.join(d, fn), 0o644)
    return src


def cli_out(stdout):
    """req_cli's "name value" lines: {name: int, or str for the fnv and the sync line}."""
    out = {}
    for ln in stdout.decode().splitlines():
        k, _, v = ln.partition(' ')
        out[k] = int(v) if v.isdigit() and k not in ('fnv', 'sync') else v
    return out


def req_cli(env, cli, source, key, off, length, count, budget=10):
    """Run req_cli; (exit status, {name: int or str}, stderr)."""
    r = env.run([cli, source, key, str(off), str(length), str(count), '1', str(budget)],
                timeout=120)
    out = cli_out(r.stdout)
    err = r.stderr.decode(errors='replace')
    log('req_cli %s %d+%d x%d -> %r %r %s' % (key, off, length, count, r.returncode, out,
                                              err.strip()[-600:]))
    return r.returncode, out, err


def fnv64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return '%016x' % h


def group_shortbody(env, ck, cli, ng, src):
    key = 's/shard-000001.tar'  # not the first: the mount's 1-byte GET goes to that one
    with open(os.path.join(src, key), 'rb') as f:
        want = f.read()
    px = web.FaultProxy(ng.port)
    try:
        source = px.url('files/s/shard-{000000..000001}.tar')
        # (a) the engine: 4 ranged reads of 64 KiB, the first 3 answers half-bodies ('overclaim':
        # Content-Length of half the range, Content-Range of all of it): each resumed once
        px.set('overclaim', count=3, match='/files/' + key)
        rc, out, err = req_cli(env, cli, px.url('files/' + key), os.path.basename(key),
                               65536, 65536, 4)
        ck.eq('shortbody engine: exit', rc, 0)
        ck.eq('shortbody engine: faults served', px.faults, 3)
        ck.eq('shortbody engine: bytes', out.get('bytes'), 4 * 65536)
        ck.eq('shortbody engine: fnv', out.get('fnv'), fnv64(want[65536:5 * 65536]))
        ck.eq('shortbody engine: short_bodies', out.get('short_bodies'), 3)
        ck.eq('shortbody engine: failures', out.get('failures'), 0)
        # a HEAD (the object's size) and 4 GETs; 3 of them took 2 attempts
        ck.eq('shortbody engine: requests', out.get('requests'), 5)
        ck.eq('shortbody engine: attempts', out.get('attempts'), 5 + 3)

        # (b) the mount: the same faults under a reader of the whole shard, exact (set once
        # mounted: the mount's own 1-byte GET is not among them)
        opts = ['--retry-budget', '60', '--warm', 'off', '--prefetch-shards', '0',
                '--chunk-size', '64K']
        with ml.Mount(env, source, cache_dir=env.path('cache-a'), extra=opts) as m:
            px.set('overclaim', count=5, match='/files/' + key)
            st0 = m.stats()
            got = ml.read_all(os.path.join(m.mnt, os.path.basename(key)))
            st = m.stats()
        ck.ok(got == want, 'shortbody mount: the shard read is not exact (%d bytes)' % len(got))
        ck.eq('shortbody mount: faults served', px.faults, 5)
        ck.eq('shortbody mount: store_short_bodies', st.get('store_short_bodies'), 5)
        ck.eq('shortbody mount: store_failures', st['store_failures'], 0)
        ck.eq('shortbody mount: retries', (st['store_attempts'] - st0['store_attempts']) -
              (st['store_requests'] - st0['store_requests']), 5)

        # (b2) issue 40 #5 as a user met it: the first answer for the shard (the index build's
        # read of its first 8 KiB, before any listing of it) a 206 one byte short of its
        # Content-Range, with a Content-Length that matches the short body ('trunc': the
        # bytes kept, the last one asked for again). c787ef0 failed the listing with EIO
        # (store_failures 0, nothing in the log about a short body)
        px.trunc_bytes = 16384  # capped by the proxy at the body's length - 1
        opts = ['--retry-budget', '60', '--warm', 'off', '--prefetch-shards', '0',
                '--chunk-size', '64K']
        with ml.Mount(env, source, cache_dir=env.path('cache-b2'), extra=opts) as m:
            px.set('trunc', count=1, match='/files/' + key)
            name = os.path.basename(key)[:-len('.tar')]
            try:
                listed = sorted(os.listdir(os.path.join(m.mnt, name)))
            except OSError as ex:
                listed = errno.errorcode.get(ex.errno, ex.errno)
            got = ml.read_all(os.path.join(m.mnt, os.path.basename(key)))
            st = m.stats()
        first = [hs for meth, path, hs in px.log if meth == 'GET'][:1]
        log('shortbody first answer: listing %r, first GET %r' % (listed, first))
        ck.eq('shortbody first answer: the listing', listed, ['000001.bin'])
        ck.ok(got == want, 'shortbody first answer: the shard read is not exact (%d bytes)'
              % len(got))
        ck.eq('shortbody first answer: faults served', px.faults, 1)
        ck.eq('shortbody first answer: store_short_bodies', st.get('store_short_bodies'), 1)
        ck.eq('shortbody first answer: store_failures', st['store_failures'], 0)

        # (c) every answer of the shard a 206 with no body at all: no progress, so EIO once the
        # budget is spent; counted and logged with the status and what came
        px.trunc_bytes = 0
        opts = ['--retry-budget', '2', '--warm', 'off', '--prefetch-shards', '0',
                '--chunk-size', '64K']
        cache = env.path('cache-c')
        with ml.Mount(env, source, cache_dir=cache, extra=opts) as m:
            px.set('trunc', count=-1, match='/files/' + key)
            e = 0
            try:
                with open(os.path.join(m.mnt, os.path.basename(key)), 'rb', buffering=0) as f:
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
                    f.read(4096)
            except OSError as ex:
                e = ex.errno
            st = m.stats()
        text = ml.logs_under(cache)
        ck.eq('shortbody empty: errno', errno.errorcode.get(e, e), 'EIO')
        ck.eq('shortbody empty: store_failures', st['store_failures'], 1)
        # every short body the daemon read is counted; an attempt the proxy answered but the
        # 2 s budget ended before its body was read (a loaded machine: 1-2 of about 80 seen at
        # load 30) is not a short body the daemon saw: the count is the faults served less
        # those, and never more than the faults served
        short = st.get('store_short_bodies') or 0
        ck.ok(1 <= short <= px.faults and px.faults - short <= 2,
              'shortbody empty: store_short_bodies %d against %d faults served (want the '
              'faults less at most 2 cut by the budget)' % (short, px.faults))
        lines = [ln for ln in text.splitlines() if 'short body' in ln and 'fill failed' in ln]
        log('log: %r' % text.splitlines())
        ck.eq('shortbody empty: "fill failed" log lines with "short body"', len(lines), 1)
        ck.eq('shortbody empty: "store down" log lines with "short body"',
              len([ln for ln in text.splitlines() if 'short body' in ln and 'store down' in ln]),
              1)
        # M: the length of the range the failed request asked for (the proxy saw its Range)
        sizes = set()
        for meth, path, hs in px.log:
            for h in hs:
                mr = re.match(r'(?i)range:\s*bytes=(\d+)-(\d+)$', h)
                if meth == 'GET' and key in path and mr:
                    sizes.add(int(mr.group(2)) - int(mr.group(1)) + 1)
        mg = re.search(r'HTTP 206: short body: got 0 of (\d+) bytes', lines[0]) if lines else None
        ck.ok(mg and int(mg.group(1)) in sizes,
              'shortbody empty: the log line does not name the status and the bytes asked '
              'for (%r): %r' % (sorted(sizes), lines))
    finally:
        px.close()


def group_norange(env, ck, cli, ng, src):
    key = 's/shard-000000.tar'
    with open(os.path.join(src, key), 'rb') as f:
        want = f.read()
    size = len(want)
    url = ng.url('norange/' + key)
    # (a) the engine: the last 64 KiB of the object, twice: each answer is the whole object,
    # read to its end (nothing cut: exactly the object's bytes received), logged once
    rc, out, err = req_cli(env, cli, url, 'shard-000000.tar', size - 65536, 65536, 2)
    ck.eq('norange engine: exit', rc, 0)
    ck.eq('norange engine: bytes', out.get('bytes'), 2 * 65536)
    ck.eq('norange engine: fnv', out.get('fnv'), fnv64(want[-65536:] * 2))
    ck.eq('norange engine: range_ignored', out.get('range_ignored'), 2)
    ck.eq('norange engine: bytes_received', out.get('bytes_received'), 2 * size)
    ck.eq('norange engine: short_bodies', out.get('short_bodies'), 0)
    lines = [ln for ln in err.splitlines() if 'ignored Range' in ln]
    ck.eq('norange engine: log lines', len(lines), 1)
    ck.ok(lines and ('(%d bytes) to a request for 65536 bytes at %d; %d bytes received' % (
        size, size - 65536, size)) in lines[0],
        'norange engine: the log line does not say the cost: %r' % lines)
    # a range in the middle: the transfer stops after it (less than the whole object received)
    rc, out, err = req_cli(env, cli, url, 'shard-000000.tar', 0, 65536, 1)
    ck.eq('norange engine first 64K: bytes', out.get('bytes'), 65536)
    ck.ok(65536 <= out.get('bytes_received', 0) < size,
          'norange engine first 64K: bytes_received %r not in [65536, %d)' % (
              out.get('bytes_received'), size))

    # (b) the mount: the whole shard read exact; bytes_received counts what came, which is
    # more than what was fetched; one log line for the object
    alog = os.path.join(ng.prefix, 'access.log')
    before = os.path.getsize(alog)
    opts = ['--warm', 'off', '--prefetch-shards', '0', '--chunk-size', '64K']
    cache = env.path('cache-n')
    with ml.Mount(env, ng.url('norange/s/shard-{000000..000001}.tar'), cache_dir=cache,
                  extra=opts) as m:
        got = ml.read_all(os.path.join(m.mnt, os.path.basename(key)))
        st = m.stats()
    ck.ok(got == want, 'norange mount: the shard read is not exact')
    with open(alog) as f:
        f.seek(before)
        gets = [ln for ln in f if '"GET /norange/' in ln]
    log('norange mount: %d GETs, stats bytes_fetched %r bytes_received %r range_ignored %r' % (
        len(gets), st['bytes_fetched'], st.get('bytes_received', 0), st.get('store_range_ignored')))
    ck.eq('norange mount: store_range_ignored == GETs nginx answered', st.get('store_range_ignored'),
          len(gets))
    ck.eq('norange mount: bytes_fetched', st['bytes_fetched'], size)
    ck.ok(st.get('bytes_received', 0) > 2 * st['bytes_fetched'],
          'norange mount: bytes_received %d not above twice bytes_fetched %d' % (
              st.get('bytes_received', 0), st['bytes_fetched']))
    sent = sum(int(ln.split('"')[2].split()[1]) for ln in gets)
    ck.ok(st.get('bytes_received', 0) <= sent, 'norange mount: bytes_received %d above what nginx sent %d'
          % (st.get('bytes_received', 0), sent))
    text = ml.logs_under(cache)
    lines = [ln for ln in text.splitlines() if 'ignored Range' in ln]
    log('log: %r' % lines)
    objs = {re.search(r'GET (\S+):', ln).group(1) for ln in lines}
    got_objs = {ln.split('"')[1].split()[1] for ln in gets}
    ck.eq('norange mount: log lines, one per object', len(lines), len(got_objs))
    ck.eq('norange mount: objects logged', {o.split('/norange/')[1] for o in objs},
          {o.split('/norange/')[1] for o in got_objs})


def group_pause(env, ck, cli, ng, src):
    key = 's/shard-000000.tar'
    with open(os.path.join(src, key), 'rb') as f:
        want = f.read()
    size = len(want)
    env.env['REQ_CLI_PAUSE'] = '3'
    try:
        # 3 ranged reads of 256 KiB from 64 KiB on: 206s, each piece refused 3 times first
        rc, out, err = req_cli(env, cli, ng.url('files/' + key), 'shard-000000.tar', 65536,
                               262144, 3)
        ck.eq('pause ranged: exit', rc, 0)
        ck.eq('pause ranged: bytes', out.get('bytes'), 3 * 262144)
        ck.eq('pause ranged: fnv', out.get('fnv'), fnv64(want[65536:65536 + 3 * 262144]))
        ck.eq('pause ranged: bytes_received', out.get('bytes_received'), 3 * 262144)
        ck.ok(out.get('pauses', 0) >= 3 * 3 and out.get('pauses', 0) % 3 == 0,
              'pause ranged: pauses %r: not 3 per piece' % out.get('pauses'))
        ck.eq('pause ranged: failures', out.get('failures'), 0)
        ck.eq('pause ranged: attempts', out.get('attempts'), out.get('requests'))
        # every pause ended by the sink's backend_sink_ready (from another thread), once each:
        # no poll, and the BACKEND_PAUSE_BACKSTOP_MS bound never reached
        ck.eq('pause ranged: store pauses', out.get('store_pauses'), out.get('pauses'))
        ck.eq('pause ranged: resumes', out.get('resumes'), out.get('pauses'))
        ck.eq('pause ranged: backstop resumes', out.get('pause_backstops'), 0)
        # a 200 to a range in the middle (norange): the bytes before it skipped exactly once
        rc, out, err = req_cli(env, cli, ng.url('norange/' + key), 'shard-000000.tar', 262144,
                               65536, 2)
        ck.eq('pause norange: exit', rc, 0)
        ck.eq('pause norange: bytes', out.get('bytes'), 2 * 65536)
        ck.eq('pause norange: fnv', out.get('fnv'), fnv64(want[262144:262144 + 65536] +
                                                          want[262144 + 65536:262144 + 131072]))
        ck.eq('pause norange: range_ignored', out.get('range_ignored'), 2)
        ck.ok(out.get('pauses', 0) >= 3 * 2 and out.get('pauses', 0) % 3 == 0,
              'pause norange: pauses %r: not 3 per piece' % out.get('pauses'))
        ck.eq('pause norange: failures', out.get('failures'), 0)
        ck.eq('pause norange: resumes', out.get('resumes'), out.get('pauses'))
        ck.eq('pause norange: backstop resumes', out.get('pause_backstops'), 0)
        ck.ok(out.get('bytes_received', 0) <= 2 * size,
              'pause norange: bytes_received %r above what nginx sent (%d)' % (
                  out.get('bytes_received'), 2 * size))
        # a sink that never says it has room: the bound resumes each pause (one 4 KiB read,
        # each piece refused once)
        env.env['REQ_CLI_PAUSE'] = '1'
        env.env['REQ_CLI_NOWAKE'] = '1'
        rc, out, err = req_cli(env, cli, ng.url('files/' + key), 'shard-000000.tar', 8192,
                               4096, 1)
        ck.eq('pause backstop: exit', rc, 0)
        ck.eq('pause backstop: fnv', out.get('fnv'), fnv64(want[8192:8192 + 4096]))
        ck.ok(out.get('pauses', 0) >= 1, 'pause backstop: no pause')
        ck.eq('pause backstop: store pauses', out.get('store_pauses'), out.get('pauses'))
        ck.eq('pause backstop: resumes', out.get('resumes'), out.get('pauses'))
        ck.eq('pause backstop: backstop resumes', out.get('pause_backstops'), out.get('pauses'))
    finally:
        env.env.pop('REQ_CLI_PAUSE', None)
        env.env.pop('REQ_CLI_NOWAKE', None)


class CloseAfterAnswer:
    """A server of one file that closes each connection after its first answer without saying
    so (HTTP/1.1, no Connection: close): a kept connection is dead when it is used next.
    Counts connections and requests."""

    def __init__(self, data):
        self.data = data
        self.conns = 0
        self.requests = 0
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        with c:
            head = b''
            while b'\r\n\r\n' not in head:
                b = c.recv(4096)
                if not b:
                    return
                head += b
            self.requests += 1
            lines = head.split(b'\r\n')
            m = re.search(rb'(?im)^range:\s*bytes=(\d+)-(\d+)', head)
            if m:
                a, z = int(m.group(1)), min(int(m.group(2)), len(self.data) - 1)
                out = b'HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\n' % (
                    a, z, len(self.data))
                body = self.data[a:z + 1]
            else:
                out, body = b'HTTP/1.1 200 OK\r\n', self.data
            out += b'Content-Length: %d\r\nETag: "e1"\r\n\r\n' % len(body)
            c.sendall(out + (b'' if lines[0].startswith(b'HEAD') else body))

    def close(self):
        self.sock.close()


def group_lean(env, ck, cli, ng, src):
    key = 's/shard-000001.tar'
    with open(os.path.join(src, key), 'rb') as f:
        want = f.read()
    size = len(want)
    env.env['REQ_CLI_ENGINE'] = 'auto'
    px = web.FaultProxy(ng.port)
    try:
        # (a) 20 reads of 40000 bytes from 1000 on, window 1: one kept connection
        rc, out, err = req_cli(env, cli, px.url('files/' + key), 'shard-000001.tar', 1000,
                               40000, 20)
        ck.eq('lean reuse: exit', rc, 0)
        ck.eq('lean reuse: bytes', out.get('bytes'), 20 * 40000)
        ck.eq('lean reuse: fnv', out.get('fnv'), fnv64(want[1000:1000 + 20 * 40000]))
        ck.eq('lean reuse: requests', out.get('requests'), 21)  # curl's HEAD and 20 GETs
        ck.eq('lean reuse: attempts', out.get('attempts'), 21)
        ck.eq('lean reuse: lean attempts', out.get('lean_attempts'), 20)
        ck.eq('lean reuse: proxy requests', px.requests, 21)
        ck.eq('lean reuse: proxy connections', len(px.conns), 2)
        ck.eq('lean reuse: connects', out.get('connects'), 2)
        ck.eq('lean reuse: bytes_received', out.get('bytes_received'), 20 * 40000)
        # (b) the next 2 answers cut mid-body: each resumed after its bytes, on a new connection
        px.set('cut', count=2, match='/files/' + key)
        conns0 = len(px.conns)
        rc, out, err = req_cli(env, cli, px.url('files/' + key), 'shard-000001.tar', 5000,
                               100000, 4)
        ck.eq('lean cut: exit', rc, 0)
        ck.eq('lean cut: faults served', px.faults, 2)
        ck.eq('lean cut: bytes', out.get('bytes'), 4 * 100000)
        ck.eq('lean cut: fnv', out.get('fnv'), fnv64(want[5000:5000 + 4 * 100000]))
        ck.eq('lean cut: short_bodies', out.get('short_bodies'), 2)
        ck.eq('lean cut: requests', out.get('requests'), 5)
        ck.eq('lean cut: attempts', out.get('attempts'), 5 + 2)
        ck.eq('lean cut: lean attempts', out.get('lean_attempts'), 4 + 2)
        ck.eq('lean cut: failures', out.get('failures'), 0)
        # curl's HEAD, the first lean connection, one more after each of the 2 cuts
        ck.eq('lean cut: proxy connections', len(px.conns) - conns0, 4)
        ck.eq('lean cut: connects', out.get('connects'), 4)
    finally:
        px.close()
    try:
        # (c) a 200 to each range: the bytes before the range skipped, the rest read
        url = ng.url('norange/' + key)
        rc, out, err = req_cli(env, cli, url, 'shard-000001.tar', size - 65536, 65536, 2)
        ck.eq('lean norange: exit', rc, 0)
        ck.eq('lean norange: bytes', out.get('bytes'), 2 * 65536)
        ck.eq('lean norange: fnv', out.get('fnv'), fnv64(want[-65536:] * 2))
        ck.eq('lean norange: range_ignored', out.get('range_ignored'), 2)
        ck.eq('lean norange: bytes_received', out.get('bytes_received'), 2 * size)
        ck.eq('lean norange: lean attempts', out.get('lean_attempts'), 2)
        ck.eq('lean norange: connects', out.get('connects'), 2)
        # (d) a server that closes each connection after its answer: every request on a new
        # connection (the dead kept one found closed, or the request sent again once on a new
        # one, as curl does), none of it a failed attempt
        srv = CloseAfterAnswer(want)
        try:
            rc, out, err = req_cli(env, cli, 'http://127.0.0.1:%d/%s' % (srv.port, key),
                                   'shard-000001.tar', 300, 20000, 10)
        finally:
            srv.close()
        ck.eq('lean closed: exit', rc, 0)
        ck.eq('lean closed: fnv', out.get('fnv'), fnv64(want[300:300 + 10 * 20000]))
        ck.eq('lean closed: requests', out.get('requests'), 11)
        ck.eq('lean closed: attempts', out.get('attempts'), 11)
        ck.eq('lean closed: lean attempts', out.get('lean_attempts'), 10)
        ck.eq('lean closed: server requests', srv.requests, 11)
        ck.eq('lean closed: server connections', srv.conns, 11)
    finally:
        env.env.pop('REQ_CLI_ENGINE', None)


def group_syncpass(env, ck, cli, ng, src):
    key = 's/shard-000000.tar'
    with open(os.path.join(src, key), 'rb') as f:
        want = f.read()
    hold = 512 * 1024
    for engine in ('curl', 'auto'):
        px = web.HoldProxy(ng.port, hold)
        e = dict(env.env, REQ_CLI_SYNC='0:65536', REQ_CLI_ENGINE=engine)
        p = subprocess.Popen([cli, px.url('files/' + key), 'shard-000000.tar', str(hold),
                              '100000', '1', '1', '30'], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=e)
        try:
            # the synchronous read's line, while the other read is held: read with a bound
            # (60 s, against a hang; the line comes as soon as the read returns; a read that
            # waited for the held one's connection would wait for its stall bound, 120 s)
            got = None
            if select.select([p.stdout], [], [], 60)[0]:
                got = p.stdout.readline().decode().split()
            ck.eq('%s: the synchronous read returned while the held one waited' % engine,
                  got, ['sync', '65536', fnv64(want[:65536])])
            ck.eq('%s: the held read is still held' % engine, p.poll(), None)
        finally:
            px.release.set()
            try:
                out, err = p.communicate(timeout=120)
            finally:
                px.close()
        res = cli_out(out)
        log('syncpass %s: rc %r %r %s' % (engine, p.returncode, res,
                                         err.decode(errors='replace').strip()[-400:]))
        ck.eq('%s: exit' % engine, p.returncode, 0)
        ck.eq('%s: the held read\'s bytes' % engine, (res.get('bytes'), res.get('fnv')),
              (100000, fnv64(want[hold:hold + 100000])))
        # one attempt each: the held read never ended by its stall bound (120 s in req_cli's
        # REQ_CLI_SYNC mode) to free the connection
        ck.eq('%s: requests, attempts, failures' % engine,
              (res.get('requests'), res.get('attempts'), res.get('failures')), (3, 3, 0))


class PacedServer:
    """A server of one file whose answers come in two steps: the head with the first k body
    bytes in one send, then (once the client has read them all: its receive queue empty and
    nothing unacknowledged, as /proc/net/tcp says; bounded) the rest, or the body up to a cut,
    then close. plans: [(k, cut or None)], one per request in order (then (0, None)). Counts
    requests and connections."""

    def __init__(self, data, close=False):
        self.data = data
        self.close_each = close  # say Connection: close and close after each answer
        self.plans = []
        self.heads = []  # (the head's length, k) of each ranged answer, in order
        self.conns = 0
        self.requests = 0
        self.errors = []
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _drained(self, c):
        """Has the client read all we sent? Its socket's rx_queue and ours' tx_queue 0."""
        me = '%08X:%04X' % (0x0100007F, self.port)
        peer = '%08X:%04X' % (0x0100007F, c.getpeername()[1])
        with open('/proc/net/tcp') as f:
            for ln in f.read().splitlines()[1:]:
                fl = ln.split()
                tx, rx = (int(v, 16) for v in fl[4].split(':'))
                if (fl[1], fl[2]) == (peer, me) and rx:
                    return False
                if (fl[1], fl[2]) == (me, peer) and tx:
                    return False
        return True

    def _serve(self, c):
        with c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = b''
            while True:
                while b'\r\n\r\n' not in buf:
                    b = c.recv(4096)
                    if not b:
                        return
                    buf += b
                head, _, buf = buf.partition(b'\r\n\r\n')
                self.requests += 1
                if head.startswith(b'HEAD'):
                    c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: "e1"\r\n\r\n'
                              % len(self.data))
                    continue
                m = re.search(rb'(?im)^range:\s*bytes=(\d+)-(\d+)', head)
                a, z = int(m.group(1)), min(int(m.group(2)), len(self.data) - 1)
                body = self.data[a:z + 1]
                k, cut = self.plans.pop(0) if self.plans else (0, None)
                out = (b'HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\n'
                       b'Content-Length: %d\r\nETag: "e1"\r\n%s\r\n' % (
                           a, z, len(self.data), len(body),
                           b'Connection: close\r\n' if self.close_each else b''))
                self.heads.append((len(out), k))
                c.sendall(out + body[:k])
                # a bounded wait for a state of the client (not a timing window): its
                # receive of the head took these bytes, and nothing else
                deadline = time.monotonic() + 30
                while not self._drained(c):
                    if time.monotonic() > deadline:
                        self.errors.append('the client did not read the head in 30 s')
                        return
                    time.sleep(0.001)
                c.sendall(body[k:cut])
                if cut is not None or self.close_each:
                    c.shutdown(socket.SHUT_RDWR)
                    return

    def close(self):
        self.sock.close()


def group_recvmem(env, ck, cli, ng, src):
    key = 's/shard-000001.tar'
    with open(os.path.join(src, key), 'rb') as f:
        want = f.read()
    unit, ln = 50000, 300000
    base = dict(env.env)
    env.env['REQ_CLI_ENGINE'] = 'auto'
    env.env['REQ_CLI_MEM'] = str(unit)
    try:
        # (a) the paced server: read i at 1000 + i * ln; its first answer's head comes with k
        # body bytes, then its body is cut (a resume's head comes alone, then the rest); 4000
        # bytes with a head: more than the head's receive takes
        cuts = [('head', 1000, 1000), ('unit edge', 0, 2 * unit), ('mid-unit', 300, 123457),
                ('buffer end', 0, 65536), ('none', 4000, None)]
        srv = PacedServer(want)
        try:
            for _, k, cut in cuts:
                srv.plans.append((k, cut))
                if cut is not None:
                    srv.plans.append((0, None))
            rc, out, err = req_cli(env, cli, 'http://127.0.0.1:%d/%s' % (srv.port, key),
                                   'shard-000001.tar', 1000, ln, len(cuts))
        finally:
            srv.close()
        ncut = len([c for c in cuts if c[2] is not None])
        # the head's receive asks for at most 2048 bytes (LEAN_HEAD_RECV) when the sink
        # offers memory: the k bytes sent with the head, as far as they fit, are copied
        head_bytes = sum(min(k, 2048 - hl) for hl, k in srv.heads)
        total = len(cuts) * ln
        ck.eq('paced: server errors', srv.errors, [])
        ck.eq('paced: exit', rc, 0)
        ck.eq('paced: bytes', out.get('bytes'), total)
        span = (len(want) - 1000) // ln * ln  # req_cli wraps to the start past the end
        ck.eq('paced: fnv', out.get('fnv'),
              fnv64(b''.join(want[1000 + i * ln % span:1000 + i * ln % span + ln]
                             for i in range(len(cuts)))))
        ck.eq('paced: short_bodies', out.get('short_bodies'), ncut)
        ck.eq('paced: requests, attempts, lean attempts',
              (out.get('requests'), out.get('attempts'), out.get('lean_attempts')),
              (1 + len(cuts), 1 + len(cuts) + ncut, len(cuts) + ncut))
        ck.eq('paced: copied bytes (the heads\' receives)', out.get('copied_bytes'), head_bytes)
        ck.eq('paced: in-place bytes', out.get('inplace_bytes'), total - head_bytes)
        ck.eq('paced: the sink\'s own counts', (out.get('sink_inplace'), out.get('sink_copied')),
              (total - head_bytes, head_bytes))
        ck.eq('paced: bytes_received', out.get('bytes_received'), total)

        # (b) every piece refused once (REQ_CLI_PAUSE=1), its place in the sink's memory
        # overwritten before it comes again: it comes again from the engine's own copy
        env.env['REQ_CLI_PAUSE'] = '1'
        srv = PacedServer(want)
        try:
            srv.plans = [(2000, None), (0, 100000), (0, None)]
            rc, out, err = req_cli(env, cli, 'http://127.0.0.1:%d/%s' % (srv.port, key),
                                   'shard-000001.tar', 1000, ln, 2)
        finally:
            srv.close()
            env.env.pop('REQ_CLI_PAUSE')
        ck.eq('pause: server errors', srv.errors, [])
        ck.eq('pause: exit', rc, 0)
        ck.eq('pause: bytes', out.get('bytes'), 2 * ln)
        ck.eq('pause: fnv', out.get('fnv'), fnv64(want[1000:1000 + 2 * ln]))
        ck.eq('pause: in place, copied', (out.get('inplace_bytes'), out.get('copied_bytes')),
              (0, 2 * ln))
        ck.eq('pause: the sink\'s own counts', (out.get('sink_inplace'), out.get('sink_copied')),
              (0, 2 * ln))
        ck.ok(out.get('pauses', 0) >= 3, 'pause: %r refusals, want at least 3' % out.get('pauses'))
        ck.eq('pause: store pauses = refusals', out.get('store_pauses'), out.get('pauses'))

        # (c) nginx, and the fault proxy cutting 2 answers mid-body: exact bytes; what was
        # received was handed over in place or copied, each counted once
        rc, out, err = req_cli(env, cli, ng.url('files/' + key), 'shard-000001.tar', 777, ln, 3)
        ck.eq('nginx: exit', rc, 0)
        ck.eq('nginx: fnv', out.get('fnv'), fnv64(want[777:777 + 3 * ln]))
        ck.eq('nginx: in place + copied', out.get('inplace_bytes', 0) + out.get('copied_bytes', 0),
              3 * ln)
        ck.eq('nginx: the sink\'s own counts', (out.get('sink_inplace'), out.get('sink_copied')),
              (out.get('inplace_bytes'), out.get('copied_bytes')))
        # only a head's receive is copied (at most the engine's 64 KiB buffer each)
        ck.ok(out.get('copied_bytes', 0) <= 3 * 65536,
              'nginx: %r bytes copied, more than 3 heads\' receives' % out.get('copied_bytes'))
        px = web.FaultProxy(ng.port)
        try:
            px.set('cut', count=2, match='/files/' + key)
            rc, out, err = req_cli(env, cli, px.url('files/' + key), 'shard-000001.tar', 5000,
                                   ln, 3)
        finally:
            px.close()
        ck.eq('proxy cut: exit', rc, 0)
        ck.eq('proxy cut: faults served', px.faults, 2)
        ck.eq('proxy cut: fnv', out.get('fnv'), fnv64(want[5000:5000 + 3 * ln]))
        ck.eq('proxy cut: short_bodies', out.get('short_bodies'), 2)
        ck.eq('proxy cut: in place + copied = received',
              out.get('inplace_bytes', 0) + out.get('copied_bytes', 0), out.get('bytes_received'))
        ck.eq('proxy cut: the sink\'s own counts',
              (out.get('sink_inplace'), out.get('sink_copied')),
              (out.get('inplace_bytes'), out.get('copied_bytes')))
        # (d) curl: no offer taken, every byte copied by the sink
        env.env['REQ_CLI_ENGINE'] = 'curl'
        rc, out, err = req_cli(env, cli, ng.url('files/' + key), 'shard-000001.tar', 777, ln, 2)
        ck.eq('curl: exit', rc, 0)
        ck.eq('curl: fnv', out.get('fnv'), fnv64(want[777:777 + 2 * ln]))
        ck.eq('curl: counts', (out.get('inplace_bytes'), out.get('copied_bytes'),
                               out.get('sink_inplace'), out.get('sink_copied')),
              (0, 0, 0, 2 * ln))
    finally:
        env.env.clear()
        env.env.update(base)
    # (e) a mount: the fills' sink offers its buffer
    source = ng.url('files/s/shard-{000000..000001}.tar')
    opts = ['--warm', 'off', '--prefetch-shards', '0']
    for engine in ('auto', 'curl'):
        with ml.Mount(env, source, cache_dir=env.path('cache-' + engine),
                      extra=opts + ['--http-engine', engine]) as m:
            got = ml.read_all(os.path.join(m.mnt, 'shard-000001.tar'))
            st = m.stats()
        log('mount %s: %r' % (engine, {k: v for k, v in st.items() if k.startswith('store_')}))
        ck.ok(got == want, 'mount %s: the shard read is not exact (%d bytes)' % (engine, len(got)))
        inpl, cop = st.get('store_recv_inplace_bytes'), st.get('store_recv_copied_bytes')
        if engine == 'curl':
            ck.eq('mount curl: in place, copied', (inpl, cop), (0, 0))
            continue
        # curl's: the mount's 1-byte GET (the server answers) and the shard's HEAD
        ck.eq('mount auto: lean attempts = attempts - 2', st['store_lean_attempts'],
              st['store_attempts'] - 2)
        ck.eq('mount auto: in place + copied = received - 1', (inpl or 0) + (cop or 0),
              st['bytes_received'] - 1)
        ck.ok((inpl or 0) > len(want) // 2,
              'mount auto: %r of %d bytes received in place' % (inpl, len(want)))


DNS_LOCK = '/tmp/shardfs-test-dns53.lock'
DNS_LOCK_WAIT_S = 150


class SilentDns:
    """A UDP socket on 127.0.0.1:53 that reads DNS queries and never answers (the resolver
    of a namespace whose resolv.conf names it: a lookup that never ends). Counts queries
    and where they came from. The port is one for the machine: two test runs at once (a CI
    clone beside a developer's run) take DNS_LOCK first, one after the other, waiting at most
    DNS_LOCK_WAIT_S; a port held by anything else fails the bind (OSError)."""

    def __init__(self):
        self.lock = open(DNS_LOCK, 'a')
        deadline = time.monotonic() + DNS_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    self.lock.close()
                    raise OSError('another test run held %s for %d s' % (DNS_LOCK,
                                                                        DNS_LOCK_WAIT_S))
                time.sleep(0.05)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.bind(('127.0.0.1', 53))
        except OSError:
            self.sock.close()
            self.lock.close()
            raise
        self.queries = 0
        self.peers = set()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            if not data and peer is None:
                return  # shut down
            self.queries += 1
            self.peers.add(peer[0])

    def close(self):
        # a recvfrom blocked in another thread keeps the socket (and the port) alive past
        # close() until it returns: shut it down first, then wait for the reader, then let
        # the port go and the lock after it
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.reader.join(10)
        self.sock.close()
        self.lock.close()  # the flock goes with it


def in_namespace(env, files, argv, extra_env, timeout=120):
    """Run argv in a mount namespace of its own with each {path: text} of files bound over
    path (the resolver's configuration: nothing outside 127.0.0.1 is asked); (exit status,
    req_cli's output, stderr)."""
    binds = []
    for i, (path, text) in enumerate(sorted(files.items())):
        p = env.path('ns-%d' % i)
        with open(p, 'w') as f:
            f.write(text)
        binds.append('mount --bind %s %s' % (p, path))
    script = ' && '.join(binds + ['exec "$@"'])
    r = subprocess.run(['unshare', '--mount', '--propagation', 'private', 'sh', '-c', script,
                        'sh'] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=dict(env.env, **extra_env), timeout=timeout)
    out = cli_out(r.stdout)
    err = r.stderr.decode(errors='replace')
    log('ns %r -> %r %r %s' % (argv[1:], r.returncode, out, err.strip()[-600:]))
    return r.returncode, out, err


def group_names(env, ck, cli, ng, src):
    key = 's/shard-000001.tar'
    with open(os.path.join(src, key), 'rb') as f:
        want = f.read()
    size = len(want)
    base = dict(env.env)
    env.env['REQ_CLI_SIZE'] = str(size)  # no HEAD: the reads are the store's first requests
    try:
        # (a) localhost (/etc/hosts): 6 reads on one kept connection, one lookup
        env.env['REQ_CLI_ENGINE'] = 'auto'
        rc, out, err = req_cli(env, cli, ng.url('files/' + key).replace('127.0.0.1', 'localhost'),
                               'shard-000001.tar', 3000, 70000, 6)
        ck.eq('localhost: exit', rc, 0)
        ck.eq('localhost: fnv', out.get('fnv'), fnv64(want[3000:3000 + 6 * 70000]))
        ck.eq('localhost: requests, attempts, lean attempts',
              (out.get('requests'), out.get('attempts'), out.get('lean_attempts')), (6, 6, 6))
        ck.eq('localhost: resolves, hits, failures, connects',
              (out.get('resolves'), out.get('resolve_hits'), out.get('resolve_failures'),
               out.get('connects')), (1, 0, 0, 1))
        # (b) a server that closes every connection (Connection: close): each read on a new
        # connection, the name's kept answer used by all but the first
        srv = PacedServer(want, close=True)
        try:
            rc, out, err = req_cli(env, cli, 'http://localhost:%d/%s' % (srv.port, key),
                                   'shard-000001.tar', 100, 50000, 5)
        finally:
            srv.close()
        ck.eq('close: server errors', srv.errors, [])
        ck.eq('close: exit', rc, 0)
        ck.eq('close: fnv', out.get('fnv'), fnv64(want[100:100 + 5 * 50000]))
        ck.eq('close: lean attempts, connects, server connections',
              (out.get('lean_attempts'), out.get('connects'), srv.conns), (5, 5, 5))
        ck.eq('close: resolves, hits', (out.get('resolves'), out.get('resolve_hits')), (1, 4))
        # (c) curl: --http-engine curl keeps every name curl's
        env.env['REQ_CLI_ENGINE'] = 'curl'
        rc, out, err = req_cli(env, cli, ng.url('files/' + key).replace('127.0.0.1', 'localhost'),
                               'shard-000001.tar', 3000, 70000, 2)
        ck.eq('curl: exit, fnv', (rc, out.get('fnv')), (0, fnv64(want[3000:3000 + 2 * 70000])))
        ck.eq('curl: lean attempts, resolves', (out.get('lean_attempts'), out.get('resolves')),
              (0, 0))
        # (d) a name that does not resolve (the namespace's hosts: files only): the same error
        # from both engines, each attempt a lookup of its own (a failure is not kept)
        url = 'http://shardfs-no-such-host.invalid:%d/%s' % (ng.port, key)
        errs = {}
        for engine in ('curl', 'auto'):
            rc, out, err = in_namespace(env, {'/etc/nsswitch.conf': 'hosts: files\n'},
                                        [cli, url, 'shard-000001.tar', '0', '1000', '1', '1',
                                         '1'], {'REQ_CLI_ENGINE': engine})
            ck.eq('no such host, %s: exit' % engine, rc, 1)
            errs[engine] = out.get('error')
            if engine == 'auto':
                ck.ok(out.get('lean_attempts', 0) >= 1, 'no such host: no lean attempt')
                ck.eq('no such host: resolve failures = lean attempts',
                      out.get('resolve_failures'), out.get('lean_attempts'))
                ck.eq('no such host: resolves = lean attempts', out.get('resolves'),
                      out.get('lean_attempts'))
        ck.eq('no such host: the same error from both engines', errs['auto'], errs['curl'])
        ck.ok('Could not resolve host: shardfs-no-such-host.invalid' in (errs['auto'] or ''),
              'no such host: the error says %r' % errs['auto'])
        # (d2) a name of two addresses whose first refuses the connection (nginx listens on
        # 127.0.0.1 only; getaddrinfo puts ::1 first): the lean engine's attempt goes on to the
        # next address (connect_next, hand_off), which the name's later connections take
        # first: 6 reads, 2 connects
        rc, out, err = in_namespace(
            env, {'/etc/nsswitch.conf': 'hosts: files\n',
                  '/etc/hosts': '::1 shardfs-two\n127.0.0.1 shardfs-two\n'},
            [cli, 'http://shardfs-two:%d/files/%s' % (ng.port, key), 'shard-000001.tar',
             '3000', '70000', '6', '1'], {'REQ_CLI_ENGINE': 'auto'})
        ck.eq('two addresses: exit, fnv', (rc, out.get('fnv')),
              (0, fnv64(want[3000:3000 + 6 * 70000])))
        ck.eq('two addresses: requests, attempts, lean attempts, resolves, connects',
              (out.get('requests'), out.get('attempts'), out.get('lean_attempts'),
               out.get('resolves'), out.get('connects')), (6, 6, 6, 1, 2))
        # (e) a lookup that never answers (the namespace's resolver: a silent socket on
        # 127.0.0.1:53): each attempt waits at most connect_timeout_s, all on one lookup
        try:
            dns = SilentDns()
        except OSError as ex:
            ck.ok(False, 'cannot bind 127.0.0.1:53 for the silent resolver: %s' % ex)
            return
        try:
            rc, out, err = in_namespace(
                env, {'/etc/nsswitch.conf': 'hosts: files dns\n',
                      '/etc/resolv.conf': 'nameserver 127.0.0.1\noptions timeout:4 attempts:1\n'},
                [cli, 'http://shardfs-silent.invalid:%d/%s' % (ng.port, key),
                 'shard-000001.tar', '0', '1000', '1', '1', '2'],
                {'REQ_CLI_ENGINE': 'auto', 'REQ_CLI_CONNECT_S': '1'})
        finally:
            dns.close()
        ck.eq('silent: exit', rc, 1)
        ck.ok('Resolving timed out after' in (out.get('error') or ''),
              'silent: the error says %r' % out.get('error'))
        ck.eq('silent: one lookup for every attempt', out.get('resolves'), 1)
        ck.ok(out.get('lean_attempts', 0) >= 1, 'silent: no lean attempt')
        ck.ok(dns.queries >= 1, 'silent: the resolver was not asked')
        ck.eq('silent: asked from', dns.peers, {'127.0.0.1'})
    finally:
        env.env.clear()
        env.env.update(base)
    # (f) a mount by http://localhost:PORT/...: every read after the mount's own requests
    # (curl's 1-byte GET and HEADs) is the lean engine's, on one lookup
    source = ng.url('files/s/shard-{000000..000001}.tar').replace('127.0.0.1', 'localhost')
    with ml.Mount(env, source, cache_dir=env.path('cache-names'),
                  extra=['--warm', 'off', '--prefetch-shards', '0']) as m:
        sizes = [os.path.getsize(os.path.join(m.mnt, 'shard-%06d.tar' % i)) for i in range(2)]
        st0 = m.stats()  # after the shards' HEADs (their sizes), which are curl's
        got = [ml.read_all(os.path.join(m.mnt, 'shard-%06d.tar' % i)) for i in range(2)]
        st = m.stats()
    wants = []
    for i in range(2):
        with open(os.path.join(src, 's', 'shard-%06d.tar' % i), 'rb') as f:
            wants.append(f.read())
    ck.ok(got == wants, 'mount localhost: the shards read are not exact')
    ck.eq('mount localhost: sizes', sizes, [len(w) for w in wants])
    d = {k: st[k] - st0[k] for k in ('store_attempts', 'store_lean_attempts')}
    log('mount localhost: %r, after %r' % (d, {k: v for k, v in st.items()
                                               if k.startswith('store_')}))
    ck.ok(d['store_attempts'] > 0, 'mount localhost: no attempt after the mount')
    ck.eq('mount localhost: lean attempts = attempts', d['store_lean_attempts'],
          d['store_attempts'])
    ck.eq('mount localhost: one lookup', st.get('store_resolves'), 1)


GROUPS = {'shortbody': group_shortbody, 'norange': group_norange, 'pause': group_pause,
          'lean': group_lean, 'syncpass': group_syncpass, 'recvmem': group_recvmem,
          'names': group_names}


def run_group(env, ck, group, cli):
    src = make_source(env)
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        GROUPS[group](env, ck, cli, ng, src)
    finally:
        ng.stop()


def main():
    if len(sys.argv) != 4 or sys.argv[2] not in GROUPS:
        print(__doc__)
        return 2
    if not os.path.exists(web.NGINX):
        return ml.skip_status('%s is not installed (scripts/install-deps.sh --test)' % web.NGINX)
    ml.main_wrapper(run_group, sys.argv[1], 'rangefault-' + sys.argv[2], deadline=170,
                    group=sys.argv[2], cli=sys.argv[3])


if __name__ == '__main__':
    sys.exit(main())
