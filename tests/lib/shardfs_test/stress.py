"""Helpers shared by the stress tests: fast shard generation with known member bytes
and offsets (tar headers written directly, no staging tree, no GNU tar), exact whole-file reads
that classify the outcome, and the daemon's resources from /proc. Python 3 stdlib only; mount
and server helpers are shardfs_test.mount and shardfs_test.web."""

import errno
import mmap
import os
import subprocess
import time

from . import mount as ml
from . import web

MiB = 1 << 20
T0 = 1600000000


# ---------------------------------------------------------------------------------------------
# shards
# ---------------------------------------------------------------------------------------------

def _octal(v, width):
    s = b'%o' % v
    if len(s) > width - 1:
        raise ValueError('value %d does not fit a %d-byte octal field' % (v, width))
    return s.rjust(width - 1, b'0') + b'\0'


def ustar_header(name, size, mtime=T0, mode=0o644):
    """A 512-byte ustar header of a regular file (name up to 100 bytes)."""
    n = name.encode()
    if len(n) > 100:
        raise ValueError('name too long for this writer: %r' % name)
    h = bytearray(512)
    h[0:len(n)] = n
    h[100:108] = _octal(mode, 8)
    h[108:116] = _octal(0, 8)
    h[116:124] = _octal(0, 8)
    h[124:136] = _octal(size, 12)
    h[136:148] = _octal(mtime, 12)
    h[148:156] = b' ' * 8
    h[156:157] = b'0'
    h[257:263] = b'ustar\0'
    h[263:265] = b'00'
    h[265:269] = b'root'
    h[297:301] = b'root'
    h[148:156] = b'%06o\0 ' % sum(h)
    return bytes(h)


def write_shard(path, members, mtime=T0):
    """Write a ustar shard of members [(name, bytes)]. Returns {name: (data offset, size)}
    (offsets into the tar) — what a reader needs to find a member's bytes in the source."""
    out = []
    pos = 0
    where = {}
    for i, (name, data) in enumerate(members):
        out.append(ustar_header(name, len(data), mtime + i))
        pos += 512
        where[name] = (pos, len(data))
        out.append(data)
        pad = (-len(data)) % 512
        if pad:
            out.append(b'\0' * pad)
        pos += len(data) + pad
    out.append(b'\0' * 1024)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as f:
        f.write(b''.join(out))
    return where


def shard_dir(rel):
    """train/shard-000001.tar -> train/shard-000001"""
    assert rel.endswith('.tar')
    return rel[:-4]


def rand_bytes(rng, n):
    if not n:
        return b''
    if hasattr(rng, 'randbytes'):
        return rng.randbytes(n)
    return rng.getrandbits(8 * n).to_bytes(n, 'little')


def chmod_tree(root):
    """nginx's worker may run as another user."""
    for d, _, files in os.walk(root):
        os.chmod(d, 0o755)
        for fn in files:
            os.chmod(os.path.join(d, fn), 0o644)


def make_dataset(src, rng, nshards, sizes_fn, prefix='shard', subdir=''):
    """nshards shards src/[subdir/]prefix-NNNNNN.tar; sizes_fn(rng, shard_no) -> list of
    member sizes (each becomes a sample KEY.bin plus its KEY.cls). Returns the catalogue:
    [(relpath in the mount, source file, offset, size)] of every raw shard and every member."""
    cat = []
    for s in range(nshards):
        rel = os.path.join(subdir, '%s-%06d.tar' % (prefix, s)) if subdir else \
            '%s-%06d.tar' % (prefix, s)
        members = []
        for i, n in enumerate(sizes_fn(rng, s)):
            key = 's%03d_%05d' % (s, i)
            members.append((key + '.bin', rand_bytes(rng, n)))
            members.append((key + '.cls', b'%d\n' % rng.randrange(1000)))
        path = os.path.join(src, rel)
        where = write_shard(path, members)
        cat.append((rel, path, 0, os.path.getsize(path)))
        for name, (off, size) in where.items():
            cat.append((os.path.join(shard_dir(rel), name), path, off, size))
    return cat


def ref_bytes(path, off, size, _cache={}):
    """Bytes of a catalogue entry, from the source file."""
    fd = _cache.get(path)
    if fd is None:
        fd = _cache[path] = os.open(path, os.O_RDONLY)
    out = []
    while size > 0:
        b = os.pread(fd, size, off)
        if not b:
            raise IOError('source %s ends before %d' % (path, off))
        out.append(b)
        off += len(b)
        size -= len(b)
    return b''.join(out)


# ---------------------------------------------------------------------------------------------
# reads
# ---------------------------------------------------------------------------------------------

def read_file(path, direct=False, bufsize=MiB):
    """Read a whole file. Returns (data, errno or 0, where) — data is everything read before
    an error; where is 'open' or 'read' for an error."""
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        return b'', e.errno, 'open'
    buf = mmap.mmap(-1, bufsize) if direct else None
    got = []
    off = 0
    try:
        while True:
            try:
                if direct:
                    n = os.preadv(fd, [buf], off)
                    b = buf[:n]
                else:
                    b = os.read(fd, bufsize)
            except OSError as e:
                return b''.join(got), e.errno, 'read'
            if not b:
                return b''.join(got), 0, ''
            got.append(b)
            off += len(b)
    finally:
        os.close(fd)
        if buf is not None:
            buf.close()


def classify(got, err, want):
    """'ok' (exact bytes), 'eio' (EIO, and every byte delivered before it was right) or a
    description of what is wrong (another errno, a short read, wrong bytes)."""
    if err == 0:
        if got == want:
            return 'ok'
        if len(got) < len(want) and want.startswith(got):
            return 'SHORT read: %d of %d bytes, no error' % (len(got), len(want))
        if len(got) > len(want):
            return 'LONG read: %d bytes, expected %d' % (len(got), len(want))
        i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), None)
        return 'WRONG bytes: %d bytes read, first difference at offset %s' % (len(got), i)
    if err != errno.EIO:
        return 'errno %s (%d bytes before it)' % (errno.errorcode.get(err, err), len(got))
    if not want.startswith(got):
        return 'WRONG bytes before EIO (%d bytes)' % len(got)
    return 'eio'


# ---------------------------------------------------------------------------------------------
# the daemon's resources
# ---------------------------------------------------------------------------------------------

# These readers of /proc/PID raise (OSError, or RuntimeError for a field that is missing)
# instead of returning -1 or {}: a bound on what they return must not pass because the daemon
# is gone or the field moved.

def _status_fields(pid, keys):
    """{key: first number} of /proc/PID/status for keys; raises when one is missing."""
    out = {}
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            k = line.split(':')[0]
            if k in keys:
                out[k] = int(line.split()[1])
    missing = [k for k in keys if k not in out]
    if missing:
        raise RuntimeError('/proc/%d/status has no %s' % (pid, ', '.join(missing)))
    return out


def fd_count(pid):
    return len(os.listdir('/proc/%d/fd' % pid))


def settled(fn, timeout=10.0, step=0.2):
    """fn()'s value once two readings step seconds apart agree, or the last after timeout
    seconds: for a baseline count that asynchronous releases may still be lowering."""
    end = time.monotonic() + timeout
    v = fn()
    while time.monotonic() < end:
        time.sleep(step)
        w = fn()
        if w == v:
            return v
        v = w
    return v


def fd_kinds(pid):
    """{kind: count} of the daemon's fds (socket, pipe, anon_inode:..., files by directory)."""
    out = {}
    names = os.listdir('/proc/%d/fd' % pid)
    for n in names:
        try:
            t = os.readlink('/proc/%d/fd/%s' % (pid, n))
        except OSError:
            continue
        if t.startswith('/') and not t.startswith('/dev/'):
            t = os.path.dirname(t)
        else:
            t = t.split('[')[0].rstrip(':')
        out[t] = out.get(t, 0) + 1
    return out


def threads(pid):
    return _status_fields(pid, ('Threads',))['Threads']


def mem_kib(pid):
    """{'VmRSS': KiB, 'RssAnon': KiB, 'RssFile': KiB, 'RssShmem': KiB, 'VmHWM': KiB}"""
    return _status_fields(pid, ('VmRSS', 'RssAnon', 'RssFile', 'RssShmem', 'VmHWM'))


def rss_kib(pid):
    return _status_fields(pid, ('VmRSS',))['VmRSS']


def sanitized(shardfs):
    """'asan' when the binary links AddressSanitizer (ldd), else ''. Sanitized daemons are
    several times slower and keep freed memory in a quarantine, so the tests shorten their
    runs and widen the RSS bound (tests/stress/README.md)."""
    try:
        out = subprocess.run(['ldd', shardfs], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        out = b''
    if b'libasan' in out:
        return 'asan'
    if b'libtsan' in out:
        return 'tsan'
    return ''


def raise_nofile(n):
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n if hard == resource.RLIM_INFINITY else min(n, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def daemon_pid(m):
    return m.stats()['pid']


def nginx_or_skip():
    if not os.path.exists(web.NGINX):
        raise ml.Skip('%s is not installed (scripts/install-deps.sh --test)' % web.NGINX)


def with_log_tail(fn, logs=('daemon.log',)):
    """Wrap a test group: on failure, show the tail of each daemon log (the temp dir goes
    away)."""
    def run(env, ck):
        try:
            fn(env, ck)
        finally:
            if ck.failures:
                for n in logs:
                    try:
                        with open(env.path(n), errors='replace') as f:
                            ml.log('%s (tail):\n%s' % (n, f.read()[-4000:]))
                    except OSError:
                        pass
    return run
