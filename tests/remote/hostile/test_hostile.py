#!/usr/bin/env python3
"""Hostile inputs: a small Python stdlib HTTP server on 127.0.0.1 (free port, started
and stopped by the test) that misbehaves on purpose, and a decompression bomb.

  test_hostile.py SHARDFS GROUP     GROUP: range | listing | s3list | tarsize | bomb

range    a shard served over http whose ranged GETs are answered (1) with 200 and a Content-Length
         of 1 TB, the object streamed from offset 0 forever, (2) with a 206 whose body runs on far
         past its Content-Range: (1) members and the raw shard read back exactly, (2) every
         read is EIO; the daemon's peak VmRSS grows by less than 64 MiB.
listing  an nginx JSON autoindex where every directory links to a new subdirectory forever: the
         mount fails within the depth cap with a reason (a hang fails), the daemon's peak RSS bounded.
s3list   ListObjectsV2 that always says IsTruncated=true: (1) with fresh tokens and no keys, (2)
         with tokens that come round again: the mount fails with a reason (a hang fails).
tarsize  a remote shard whose second member's header claims 2^62 bytes: the first member reads
         exactly, the second is listed with that size, its bytes in the shard read exactly up
         to the page the shard's end cuts, EIO from there; the shard is damaged (logged), no
         huge allocation (a bound on the peak VmRSS).
bomb     a ~10 MB .tar.gz (multi-member gzip; one 10 GiB member of zeros) and a .tar.zst made by
         streaming through the zstd CLI, mounted with --cache-size 64M: each is refused whole
         (the directory, and the members before the big one, give EFBIG; never a partial
         listing), the log names --max-decode-ratio, the cache dir keeps nothing of the decode,
         the raw file still reads its stored bytes, the mount answers.
Exit 77 (skip) without /dev/fuse."""

import json
import errno
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zlib

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402
from shardfs_test import net  # noqa: E402

RSS_BOUND = 64 << 20
TB = 1 << 40


def status_bytes(pid, field):
    """A field of /proc/PID/status in bytes (VmRSS, VmHWM); raises when there is no such
    line (a bound on a 0 read for a missing value would pass whatever the daemon did)."""
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1]) * 1024
    raise RuntimeError('/proc/%d/status has no %s line' % (pid, field))


def vmrss(pid):
    """The resident set of process pid now, in bytes; its peak (VmHWM) is reset to it, so
    that peak_rss gives the largest resident set since this call, not a point value."""
    with open('/proc/%d/clear_refs' % pid, 'w') as f:
        f.write('5')
    return status_bytes(pid, 'VmRSS')


def peak_rss(pid):
    """The peak resident set of process pid since the last vmrss(pid), in bytes."""
    return status_bytes(pid, 'VmHWM')


def daemon_pid(m):
    st = m.stats()
    return st['pid'] if isinstance(st.get('pid'), int) else sorted(m.pids)[0]


def tar_header(name, size):
    """One ustar header; size in base-256 (GNU) when it does not fit 11 octal digits."""
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mtime = 1700000000
    ti.mode = 0o644
    return ti.tobuf(format=tarfile.GNU_FORMAT)


def read_log(m, env):
    return ml.logs_under(m.cache_dir or os.path.join(env.env['XDG_CACHE_HOME'], 'shardfs'))


# ---------------------------------------------------------------------------------------------
# The hostile server
# ---------------------------------------------------------------------------------------------

class Hostile(net.LoopbackServer):
    """A server on 127.0.0.1; behaviour chosen by self.mode and the path."""

    def __init__(self):
        self.mode = None
        self.objects = {}  # path -> bytes (the real prefix of the object)
        self.sizes = {}    # path -> size announced by HEAD
        self.requests = 0
        self.s3_pages = 0
        outer = self

        class H(net.ObjectHandler):
            def do_HEAD(self):
                outer.requests += 1
                path = self.path.split('?')[0]
                if path not in outer.objects:
                    return self.answer(404, [('Content-Length', '0')])
                self.answer(200, [('Content-Length', str(outer.sizes[path])), ('ETag', '"e1"'),
                                  ('Last-Modified', 'Tue, 14 Nov 2023 22:13:20 GMT')])

            def do_GET(self):
                outer.requests += 1
                path, _, query = self.path.partition('?')
                try:
                    if outer.mode == 'listing' and path.endswith('/'):
                        return self.loop_listing(path)
                    if outer.mode in ('s3empty', 's3loop'):
                        return self.s3_listing(query)
                    if path in outer.objects:
                        return self.object(path)
                    self.answer(404, [('Content-Length', '0')])
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def loop_listing(self, path):
                depth = path.count('/')
                body = json.dumps([
                    {'name': 'level%d-%d' % (depth, outer.requests), 'type': 'directory',
                     'mtime': 'Tue, 14 Nov 2023 22:13:20 GMT'},
                    {'name': 'f.txt', 'type': 'file', 'size': 1,
                     'mtime': 'Tue, 14 Nov 2023 22:13:20 GMT'}]).encode()
                self.reply(200, body, 'application/json')

            def s3_listing(self, query):
                outer.s3_pages += 1
                n = outer.s3_pages
                tok = 'tok-%d' % n if outer.mode == 's3empty' else 'tok-%d' % (n % 3)
                body = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                        '<Name>bkt</Name><Prefix></Prefix><KeyCount>%d</KeyCount>'
                        '<MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>%s'
                        '<NextContinuationToken>%s</NextContinuationToken>'
                        '</ListBucketResult>' % (
                            0 if outer.mode == 's3empty' else 1,
                            '' if outer.mode == 's3empty' else
                            '<Contents><Key>k%d.tar</Key><LastModified>2023-11-14T22:13:20.000Z'
                            '</LastModified><ETag>"e%d"</ETag><Size>10240</Size></Contents>'
                            % (n, n), tok)).encode()
                self.reply(200, body, 'application/xml')

            def object(self, path):
                data = outer.objects[path]
                size = outer.sizes[path]
                span = self.span(size)
                if outer.mode == 'range200' or not span:
                    # ignores Range: the whole (1 TB) object from offset 0, forever
                    self.answer(200, [('Content-Length', str(size)), ('ETag', '"e1"')])
                    self.stream(data, 0)
                    return
                a, b = span
                hdr = [('Content-Range', 'bytes %d-%d/%d' % (a, b, size)), ('ETag', '"e1"')]
                if outer.mode == 'range206':
                    # no Content-Length, body delimited by close, and far too long
                    self.answer(206, hdr + [('Connection', 'close')])
                    self.close_connection = True
                    self.stream(data, a)
                    return
                chunk = data[a:b + 1]
                self.answer(206, hdr + [('Content-Length', str(b - a + 1))],
                            chunk + bytes(b + 1 - a - len(chunk)))

            def stream(self, data, off):
                """The object's bytes from off, then zeros, until the client hangs up (at most
                a few GB, so a broken client cannot keep the test busy for ever)."""
                sent = 0
                if off < len(data):
                    self.wfile.write(data[off:])
                    sent += len(data) - off
                zeros = bytes(1 << 16)
                while sent < (4 << 30):
                    self.wfile.write(zeros)
                    sent += len(zeros)

        self.serve(H)



# ---------------------------------------------------------------------------------------------
# Groups
# ---------------------------------------------------------------------------------------------

def read_member(path, n=None, off=0, exact=None):
    """('ok', bytes) or ('err', errno); with exact: one pread of exact bytes at off."""
    try:
        with open(path, 'rb') as f:
            if exact is not None:
                return ('ok', os.pread(f.fileno(), exact, off))
            return ('ok', f.read() if n is None else f.read(n))
    except OSError as e:
        return ('err', e.errno)


def t_range(env, ck):
    members = [('s%d.bin' % i, os.urandom(100000 + i)) for i in range(3)]
    tar = ml.tar_bytes(members, 'gnu')
    srv = Hostile()
    try:
        for mode in ('range200', 'range206'):
            srv.mode = mode
            srv.objects = {'/%s/shard.tar' % mode: tar}
            srv.sizes = {'/%s/shard.tar' % mode: TB}
            m = ml.Mount(env, srv.url('%s/shard.tar' % mode),
                         cache_dir=env.path('cache-' + mode),
                         extra=['--retry-budget', '3', '--chunk-size', '1M'])
            with m:
                pid = daemon_pid(m)
                before = vmrss(pid)
                t = time.monotonic()
                # range200: the 200 answer starts at offset 0, which is where the first chunk
                # (1 MiB, the whole tar) starts: its bytes are right and are used; range206:
                # a body longer than its Content-Range fails its request (EIO), but the range's
                # units land (and are readable) as they arrive: those the writer published
                # before the excess showed are served, exact; what came past the range never
                # is (docs/faults.md: cut, or EIO)
                for name, data in members:
                    r = read_member(os.path.join(m.mnt, 'shard', name))
                    ck.ok(r == ('ok', data) if mode == 'range200' else
                          r in (('ok', data), ('err', errno.EIO)),
                          '%s: %s: %r' % (mode, name, r if r[0] == 'err' else len(r[1])))
                    if r[0] == 'ok':
                        ck.eq('%s: %s bytes' % (mode, name), r[1], data)
                    log('%s: %s -> %s' % (mode, name, r[0] if r[0] == 'ok' else r))
                # the raw shard: a read past the tar, inside the first chunk: the zeros the
                # server declares there (the object is TB bytes long), or EIO (range206)
                r = read_member(os.path.join(m.mnt, 'shard.tar'), None, len(tar), 4096)
                ck.ok(r == ('ok', bytes(4096)) or (mode == 'range206' and r == ('err', errno.EIO)),
                      '%s: raw read after the tar: %r' % (mode, r if r[0] == 'err' else r[1][:8]))
                after = peak_rss(pid)
                log('%s: VmRSS before %.1f MiB, peak after %.1f MiB (+%.1f MiB), reads %.2fs' % (
                    mode, before / 2**20, after / 2**20, (after - before) / 2**20,
                    time.monotonic() - t))
                ck.ok(after - before < RSS_BOUND, '%s: the peak VmRSS grew by %d bytes' % (
                    mode, after - before))
                ck.ok(os.path.isdir(os.path.join(m.mnt, 'shard')), '%s: mount answers' % mode)
    finally:
        srv.stop()


def peak_bound(env):
    """256 MiB, plus ASan's quarantine of freed memory (256 MiB by default) in a sanitized
    build: freed page buffers stay resident there."""
    with open(env.shardfs, 'rb') as f:
        asan = b'__asan_init' in f.read()
    return (512 if asan else 256) << 20


def expect_mount_fails(env, ck, label, source, pattern, extra=()):
    """The mount fails (one that hangs fails the check: ml.mount_error) naming pattern; the
    daemon's peak resident set (the kernel's ru_maxrss when the test reaps it: no sampling
    that could miss the peak or take no sample) stays under peak_bound."""
    m = ml.Mount(env, source, cache_dir=env.path('cache-' + label), extra=list(extra))
    ended = set(env.daemon_ends)
    msg = ml.mount_error(ck, label, m)
    if msg is None:
        return
    ck.ok(re.search(pattern, msg), '%s: reason %r in %r' % (label, pattern, msg))

    def new_ends():
        env.reap()
        return set(env.daemon_ends) - ended
    pids = ml.poll(new_ends)
    ck.ok(pids, '%s: no daemon ended: nothing measured' % label)
    peak = max([env.daemon_maxrss[p] for p in pids] or [0])
    log('%s: mount failed, daemon peak RSS %.1f MiB: %s' % (label, peak / 2**20, msg))
    ck.ok(peak < peak_bound(env), '%s: peak RSS %d' % (label, peak))


def t_listing(env, ck):
    srv = Hostile()
    srv.mode = 'listing'
    try:
        expect_mount_fails(env, ck, 'listing', srv.url('loop/'), r'deeper than 32')
        log('listing: %d requests served' % srv.requests)
        ck.ok(srv.requests < 1000, 'listing: %d requests' % srv.requests)
    finally:
        srv.stop()


def t_s3list(env, ck):
    env.env.pop('AWS_ENDPOINT_URL', None)
    env.env['AWS_REGION'] = 'us-east-1'
    srv = Hostile()
    try:
        srv.mode = 's3empty'
        srv.s3_pages = 0
        expect_mount_fails(env, ck, 's3empty', 's3://bkt/',
                           r'truncated listing pages in a row without a key',
                           extra=['--endpoint', srv.url().rstrip('/'), '--no-sign'])
        log('s3empty: %d pages served' % srv.s3_pages)
        srv.mode = 's3loop'
        srv.s3_pages = 0
        expect_mount_fails(env, ck, 's3loop', 's3://bkt/', r'listing loops',
                           extra=['--endpoint', srv.url().rstrip('/'), '--no-sign'])
        log('s3loop: %d pages served' % srv.s3_pages)
        ck.ok(srv.s3_pages <= 5, 's3loop: %d pages' % srv.s3_pages)
    finally:
        srv.stop()


def t_tarsize(env, ck):
    first = os.urandom(5000)
    good = ml.tar_bytes([('a.txt', first)], 'gnu')
    good = good[:512 + 5120]  # header + data, without the end-of-archive blocks
    tail = os.urandom(4096) + bytes(1024)  # huge.bin's bytes that are in the shard
    obj = good + tar_header('huge.bin', 1 << 62) + tail
    srv = Hostile()
    srv.mode = 'plain'
    srv.objects = {'/d/bad.tar': obj}
    srv.sizes = {'/d/bad.tar': len(obj)}
    try:
        m = ml.Mount(env, srv.url('d/bad.tar'), cache_dir=env.path('cache-tarsize'))
        with m:
            pid = daemon_pid(m)
            before = vmrss(pid)
            names = sorted(os.listdir(os.path.join(m.mnt, 'bad')))
            log('tarsize: members shown: %r' % names)
            ck.eq('tarsize: a.txt', read_member(os.path.join(m.mnt, 'bad', 'a.txt')),
                  ('ok', first))
            # a member cut by the shard's end (docs/faults.md "Bad input"): listed with its
            # header's size, its bytes that are in the shard read exactly; a read of a page
            # with bytes past them gives EIO (the kernel reads whole pages: the last 1024
            # bytes share a page with the missing ones), never zeros
            ck.eq('tarsize: members', names, ['a.txt', 'huge.bin'])
            huge = os.path.join(m.mnt, 'bad', 'huge.bin')
            ck.eq('tarsize: huge.bin size', os.stat(huge).st_size, 1 << 62)
            ck.eq('tarsize: huge.bin [0+4096]', read_member(huge, exact=4096), ('ok', tail[:4096]))
            ck.eq('tarsize: huge.bin [4096+1024]', read_member(huge, off=4096, exact=1024),
                  ('err', errno.EIO))
            ck.eq('tarsize: huge.bin past the shard', read_member(huge, off=len(tail), exact=4096),
                  ('err', errno.EIO))
            # a read that starts in a good page: its bytes up to the page that fails
            ck.eq('tarsize: huge.bin [4000+200]', read_member(huge, off=4000, exact=200),
                  ('ok', tail[4000:4096]))
            st = m.stats()
            ck.ok(st.get('damaged_shards', 0) >= 1, 'tarsize: damaged_shards=%r' %
                  st.get('damaged_shards'))
            after = peak_rss(pid)
            log('tarsize: VmRSS before %.1f MiB, peak after %.1f MiB' % (before / 2**20,
                                                                    after / 2**20))
            ck.ok(after - before < RSS_BOUND, 'tarsize: the peak VmRSS grew by %d' %
                  (after - before))
        text = read_log(m, env)
        ck.ok('damaged' in text, 'tarsize: the log says damaged')
    finally:
        srv.stop()


BOMB_GIB = 10


def write_bomb_gz(path, before):
    """tar(before..., zz.bin of BOMB_GIB GiB zeros, after.txt) as multi-member gzip: the zeros
    are one gzip member of 64 MiB of zeros, repeated."""
    zeros64 = zlib.compressobj(9, zlib.DEFLATED, 31)
    z = zeros64.compress(bytes(64 << 20)) + zeros64.flush()
    head = ml.tar_bytes(before, 'gnu')[:-1024]
    # GNU tar pads the archive to 10240: drop the zero blocks after the last member
    while head.endswith(bytes(512)):
        head = head[:-512]
    head += tar_header('zz.bin', BOMB_GIB << 30)
    with open(path, 'wb') as f:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        f.write(c.compress(head) + c.flush())
        for _ in range(BOMB_GIB * 16):
            f.write(z)
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        f.write(c.compress(ml.tar_bytes([('after.txt', b'after\n')], 'gnu')) + c.flush())
    return head


def write_bomb_zst(path, head):
    """The same as zstd frames (the zstd CLI; Python has no zstd): the head, one frame of 64 MiB
    of zeros repeated, the tail."""
    zstd = shutil.which('zstd')
    if not zstd:
        return False

    def frame(data):
        return subprocess.run([zstd, '-q', '-19', '-c'], input=data, stdout=subprocess.PIPE,
                              check=True).stdout

    z = frame(bytes(64 << 20))
    with open(path, 'wb') as f:
        f.write(frame(head))
        for _ in range(BOMB_GIB * 16):
            f.write(z)
        f.write(frame(ml.tar_bytes([('after.txt', b'after\n')], 'gnu')))
    return True


def t_bomb(env, ck):
    src = env.path('src')
    os.makedirs(src)
    before = [('s%d.txt' % i, os.urandom(3000 + 1000 * i)) for i in range(4)]
    t = time.monotonic()
    head = write_bomb_gz(os.path.join(src, 'bomb.tar.gz'), before)
    have_zst = write_bomb_zst(os.path.join(src, 'bombz.tar.zst'), head)
    log('bomb: made in %.1fs: %s' % (time.monotonic() - t, ', '.join(
        '%s %d bytes' % (n, os.path.getsize(os.path.join(src, n))) for n in sorted(os.listdir(src)))))
    limit = 64 << 20
    shards = ['bomb.tar.gz'] + (['bombz.tar.zst'] if have_zst else [])
    for shard in shards:
        # one bomb per mount and cache dir
        one = env.path('src-' + shard)
        os.makedirs(one)
        os.rename(os.path.join(src, shard), os.path.join(one, shard))
        bomb_mount(env, ck, one, shard, before, limit)


def bomb_mount(env, ck, src, shard, before, limit):
    sh = shard.split('.')[0]
    cache = env.path('cache-' + sh)
    m = ml.Mount(env, src, cache_dir=cache, extra=['--cache-size', '64M'])
    with m:
        t = time.monotonic()
        try:
            names = os.listdir(os.path.join(m.mnt, sh))
            ck.fail('bomb: %s: listed %r instead of EFBIG' % (shard, names))
        except OSError as e:
            ck.eq('bomb: %s: listing errno' % shard, e.errno, 27)  # EFBIG
        log('bomb: %s: refused in %.2fs' % (shard, time.monotonic() - t))
        for name, _ in before:
            ck.eq('bomb: %s/%s' % (sh, name), read_member(os.path.join(m.mnt, sh, name)),
                  ('err', 27))
        with open(os.path.join(src, shard), 'rb') as f:
            stored = f.read()
        ck.ok(read_member(os.path.join(m.mnt, shard)) == ('ok', stored),
              'bomb: raw %s reads its %d stored bytes' % (shard, len(stored)))
        used = ml.du(cache)
        log('bomb: %s: cache dir uses %.1f MiB on disk (--cache-size %.0f MiB)' % (
            shard, used / 2**20, limit / 2**20))
        ck.ok(used <= 1 << 20, 'bomb: %s: cache dir uses %d bytes' % (shard, used))
        ck.ok(os.path.isdir(os.path.join(m.mnt, sh)), 'bomb: mount answers')
    text = read_log(m, env)
    line = [ln for ln in text.splitlines() if shard in ln and 'EFBIG' in ln]
    log('bomb: log: %s' % (line[0] if line else '(none)'))
    ck.ok(line and '--max-decode-ratio' in line[0],
          'bomb: the log names %s and --max-decode-ratio' % shard)


GROUPS = {'range': t_range, 'listing': t_listing, 's3list': t_s3list, 'tarsize': t_tarsize,
          'bomb': t_bomb}

if __name__ == '__main__':
    if len(sys.argv) != 3 or sys.argv[2] not in GROUPS:
        print(__doc__)
        sys.exit(2)
    ml.main_wrapper(GROUPS[sys.argv[2]], sys.argv[1], 'hostile-' + sys.argv[2], deadline=300)
