#!/usr/bin/python3
"""Compatibility: archives written by other projects and tools, mounted and compared with GNU
tar (issue 23).

The archives: every *.tar* of CPython's test suite (Debian libpython3.11-testsuite, under
/usr/lib/python3.11/test/), every *.tar* of Go's archive/tar test data (golang-1.19-src), and
archives made here with GNU tar (--format=gnu|oldgnu|posix|ustar|v7, sparse 0.0/0.1/1.0 and old
GNU, long names, a volume label, an incremental dump), bsdtar (ustar, pax, gnutar, v7, its own
.tar.zst), Python's tarfile (USTAR, GNU, PAX), gzip and zstd streams followed by trailing bytes,
and the cases of the issue (an old-style directory with data, an unknown type flag, several pax
headers before one member, a malformed pax mtime).

All of them are shards of ONE local source directory, mounted once. For each archive GNU tar
gives the verdict: `tar -t` fails with a format error (it "rejects" it), or it reads it. Read:
the shard's directory must equal GNU tar's extraction (`tar -x` into a temp dir): the member
list, each file's bytes, size, mode and mtime, each symlink's target and mtime, each stored
directory's mode (devices and FIFOs are left out by shardfs, as docs/faults.md says). Rejected: the
shard must be refused clearly: counted in damaged_shards, a log line naming it, and nothing it
shows may differ from GNU tar's extraction (a file reads its exact bytes or EIO). A few
archives where GNU tar disagrees with itself or with every other reader are listed in KNOWN
with what shardfs does and why. Any other difference fails the test.

Files bigger than BIG (Go's 60 GB sparse members) are compared on the data extents of GNU
tar's extraction (SEEK_DATA) and on samples of each hole (first, middle and last byte).

Prints a table: archive, GNU tar's verdict, shardfs's result; and the totals.
Usage: test_compat.py SHARDFS
"""
import gzip
import hashlib
import io
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402

CPYTHON = '/usr/lib/python3.11/test'
GO = '/usr/share/go-1.19/src/archive/tar/testdata'
BIG = 64 << 20
# GNU tar's format errors: an archive whose `tar -t` prints one of these is rejected
REJECT = ('This does not look like a tar archive', 'Skipping to next header', 'Unexpected EOF',
          'Malformed extended header', 'Error is not recoverable', 'where numeric',
          'Damaged', 'invalid', 'Archive base-64 header')

# archive -> (expected shardfs result, reason): where GNU tar's listing and extraction
# disagree, or GNU tar alone reads an archive as no other reader does
KNOWN = {
    'go/pax-path-hdr.tar': ('refused', 'a pax header and then EOF, no member: GNU tar 1.34 lists '
                            'nothing and exits 0; bsdtar, tarfile and Go report it truncated'),
    'made/gz-trailing.tar.gz': ('exact', 'GNU tar fails with gzip\'s exit status ("trailing garbage '
                                'ignored") after extracting every member: shardfs serves them and '
                                'logs the trailing bytes, not a damaged shard'),
    'made/zst-trailing.tar.zst': ('exact', 'the same with zstd ("unsupported format" after the frame)'),
    'made/bsdtar.tar.zst': ('exact', 'bsdtar pads its zstd output with zeros, which the zstd tool GNU '
                            'tar runs calls "unsupported format" after every member was extracted; '
                            'bsdtar reads it: zero padding is no damage and is not logged'),
    'go/sparse-formats.tar': ('exact-tarfile', 'GNU tar 1.34 -t reads all 5 members but -x stops '
                              'at sparse-gnu with "Unexpected EOF"; compared with tarfile, Go and '
                              'GNU tar -t instead'),
}


def log(*a):
    print(*a, flush=True)


def sniff(path):
    with open(path, 'rb') as f:
        m = f.read(6)
    if m[:2] == b'\x1f\x8b':
        return 'gzip'
    if m[:4] == b'\x28\xb5\x2f\xfd':
        return 'zstd'
    if m[:6] == b'\xfd7zXZ\x00':
        return 'xz'
    if m[:3] == b'BZh':
        return 'bzip2'
    return 'tar'


def add_shard(src, group, path, name=None):
    """Copy an archive into the source dir as a shard; xz/bzip2 (which shardfs does not
    decode) are decompressed to a plain .tar. Returns (key, kind)."""
    kind = sniff(path)
    base = name or os.path.basename(path)
    for suf in ('.tar.gz', '.tgz', '.tar.zst', '.tar.xz', '.tar.bz2', '.tar', '.gz', '.zst'):
        if base.endswith(suf):
            base = base[:-len(suf)]
            break
    if kind in ('xz', 'bzip2'):
        base += '-' + kind
    ext = {'gzip': '.tar.gz', 'zstd': '.tar.zst'}.get(kind, '.tar')
    key = '%s/%s%s' % (group, base, ext)
    dst = os.path.join(src, key)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if kind in ('xz', 'bzip2'):
        tool = 'xz' if kind == 'xz' else 'bzip2'
        with open(dst, 'wb') as f:
            subprocess.run([tool, '-dc', path], stdout=f, check=True, timeout=60)
    else:
        shutil.copyfile(path, dst)
    return key, kind


# ---- archives made here ---------------------------------------------------------------------

def put(path, data, mode=0o644, mtime=1_600_000_000):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as f:
        f.write(data)
    os.chmod(path, mode)
    os.utime(path, (mtime, mtime))


def make_tree(root, rng, long=True):
    t = os.path.join(root, 't')
    for i in range(5):
        put(os.path.join(t, 'train', 'k%04d.jpg' % i), rng.randbytes(rng.randrange(0, 3000)))
        put(os.path.join(t, 'train', 'k%04d.cls' % i), b'%d\n' % i, 0o600)
    put(os.path.join(t, 'x', 'suid'), b'suid', 0o4755)
    os.symlink('../train/k0001.jpg', os.path.join(t, 'x', 'ln'))
    os.link(os.path.join(t, 'train', 'k0002.jpg'), os.path.join(t, 'x', 'hard'))
    os.makedirs(os.path.join(t, 'empty'))
    if long:
        put(os.path.join(t, 'L' * 120, 'M' * 110, 'N' * 100 + '.txt'), b'long\n')
        os.symlink('T' * 150, os.path.join(t, 'longlink'))
    for d in (os.path.join(t, 'train'), os.path.join(t, 'x'), os.path.join(t, 'empty'), t):
        os.utime(d, (1_500_000_000, 1_500_000_000))
    return t


def hdr(name, size, typ=b'0', mtime=1_000):
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b'0000644\0'
    h[108:116] = b'0000000\0'
    h[116:124] = b'0000000\0'
    h[124:136] = b'%011o\0' % size
    h[136:148] = b'%011o\0' % mtime
    h[156:157] = typ
    h[257:263] = b'ustar\0'
    h[263:265] = b'00'
    h[148:156] = b' ' * 8
    h[148:156] = b'%06o\0 ' % sum(h)
    return bytes(h)


def pad(b):
    return b + b'\0' * (-len(b) % 512)


def pax(records):
    x = b''
    for k, v in records:
        body = b' ' + k + b'=' + v + b'\n'
        n = len(body) + 1
        while len(b'%d' % n) + len(body) != n:
            n += 1
        x += b'%d' % n + body
    return hdr(b'PaxHeaders/x', len(x), b'x') + pad(x)


def made(env, ck, work, rng):
    """Archives made with GNU tar, bsdtar and tarfile: [(path, name)]."""
    out = []
    full = os.path.join(work, 'full')
    make_tree(full, rng)
    short = os.path.join(work, 'short')
    make_tree(short, rng, long=False)

    def run(cmd):
        env.run(cmd, check=True, timeout=120)

    def a(name):
        return os.path.join(work, name)
    for fmt in ('gnu', 'oldgnu', 'posix', 'ustar', 'v7'):
        src = full if fmt in ('gnu', 'oldgnu', 'posix') else short
        run(['tar', '--format=' + fmt, '-cf', a('gnutar-%s.tar' % fmt), '-C', src, 't'])
        out.append(a('gnutar-%s.tar' % fmt))
    sp = os.path.join(work, 'sp')
    os.makedirs(sp)
    with open(os.path.join(sp, 'sparse'), 'wb') as f:
        f.truncate(8 << 20)
        f.seek(5000)
        f.write(rng.randbytes(3000))
        f.seek(5 << 20)
        f.write(rng.randbytes(100))
    put(os.path.join(sp, 'dense'), rng.randbytes(9000))
    for tag, args in (('pax00', ['--format=posix', '--sparse-version=0.0']),
                      ('pax01', ['--format=posix', '--sparse-version=0.1']),
                      ('pax10', ['--format=posix', '--sparse-version=1.0']),
                      ('gnu', ['--format=gnu'])):
        run(['tar', '--sparse', '-cf', a('gnutar-sparse-%s.tar' % tag), '-C', sp] + args + ['.'])
        out.append(a('gnutar-sparse-%s.tar' % tag))
    run(['tar', '--format=gnu', '-V', 'LABEL-1', '-cf', a('gnutar-label.tar'), '-C', short, 't'])
    out.append(a('gnutar-label.tar'))
    run(['tar', '--format=gnu', '-g', a('snap'), '-cf', a('gnutar-incr0.tar'), '-C', short, 't'])
    put(os.path.join(short, 't', 'x', 'new'), b'new file\n')
    run(['tar', '--format=gnu', '-g', a('snap'), '-cf', a('gnutar-incr1.tar'), '-C', short, 't'])
    out += [a('gnutar-incr0.tar'), a('gnutar-incr1.tar')]
    run(['tar', '--format=gnu', '-czf', a('gnutar.tar.gz'), '-C', full, 't'])
    out.append(a('gnutar.tar.gz'))
    for fmt, src in (('ustar', short), ('pax', full), ('gnutar', full), ('v7', short)):
        run(['bsdtar', '--format', fmt, '-cf', a('bsdtar-%s.tar' % fmt), '-C', src, 't'])
        out.append(a('bsdtar-%s.tar' % fmt))
    # bsdtar's own .tar.zst and .tgz written to stdout: the compressed stream and then zero
    # padding to its 10240-byte block
    for name, opt in (('bsdtar.tar.zst', '--zstd'), ('bsdtar-gz.tgz', '-z')):
        with open(a(name), 'wb') as f:
            subprocess.run(['bsdtar', opt, '-cf', '-', '-C', full, 't'], stdout=f, check=True, timeout=120)
        ck.eq('%s ends with zero padding' % name, open(a(name), 'rb').read()[-16:], b'\0' * 16)
        out.append(a(name))
    for name, fmt, src in (('USTAR', tarfile.USTAR_FORMAT, short), ('GNU', tarfile.GNU_FORMAT, full),
                           ('PAX', tarfile.PAX_FORMAT, full)):
        with tarfile.open(a('tarfile-%s.tar' % name), 'w', format=fmt) as tf:
            tf.add(os.path.join(src, 't'), arcname='t')
        out.append(a('tarfile-%s.tar' % name))
    plain = ml.tar_bytes([('a.txt', b'a' * 700), ('b.txt', b'b' * 10)])
    gz = gzip.compress(plain, mtime=0)
    ml.write_file(a('gz-zeros.tar.gz'), gz + b'\0' * 4096)
    ml.write_file(a('gz-trailing.tar.gz'), gz + b'this is not gzip data\n' + b'\0' * 100)
    zst = subprocess.run(['zstd', '-q', '-c'], input=plain, stdout=subprocess.PIPE, check=True).stdout
    ml.write_file(a('zst-trailing.tar.zst'), zst + b'\1\2\3 not zstd')
    out += [a('gz-zeros.tar.gz'), a('gz-trailing.tar.gz'), a('zst-trailing.tar.zst')]
    # the cases of issue 23
    ok = hdr(b'ok.txt', 3) + pad(b'ok\n') + b'\0' * 1024
    ten = b'0123456789'
    ml.write_file(a('olddir.tar'), hdr(b'd/', 40) + pad(b'x' * 40) + ok)
    ml.write_file(a('unknown-type.tar'), hdr(b'vendor', 6, b'Z') + pad(b'hello\n') + ok)
    ml.write_file(a('pax-two-headers.tar'), pax([(b'size', b'5')]) + pax([(b'path', b'renamed.txt')]) +
                  hdr(b'f.txt', 10) + pad(ten) + ok)
    ml.write_file(a('pax-mtime-999xxx.tar'), pax([(b'mtime', b'999xxx')]) + hdr(b'f.txt', 10) + pad(ten) + ok)
    ml.write_file(a('pax-bad-size.tar'), pax([(b'size', b'12x')]) + hdr(b'f.txt', 10) + pad(ten) + ok)
    out += [a(n) for n in ('olddir.tar', 'unknown-type.tar', 'pax-two-headers.tar', 'pax-mtime-999xxx.tar',
                           'pax-bad-size.tar')]
    return out


# ---- reading both sides ---------------------------------------------------------------------

def extents(path):
    """Data extents of a (sparse) file: [(off, len)]."""
    out = []
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        off = 0
        while off < size:
            try:
                d = os.lseek(fd, off, os.SEEK_DATA)
            except OSError:
                break
            h = os.lseek(fd, d, os.SEEK_HOLE)
            out.append((d, h - d))
            off = h
    finally:
        os.close(fd)
    return out


def file_digest(path, ref_extents, size):
    """sha256 of a file; for one bigger than BIG, of the bytes of ref_extents (the GNU tar
    extraction's data) and of samples of the holes between them (which must read as zeros)."""
    h = hashlib.sha256()
    with open(path, 'rb', buffering=0) as f:
        if size <= BIG:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                h.update(b)
            return h.hexdigest()
        pos = 0
        for off, ln in ref_extents + [(size, 0)]:
            if off > pos:  # a hole: its first, middle and last byte
                for p in sorted({pos, (pos + off) // 2, off - 1}):
                    f.seek(p)
                    h.update(b'hole %d %r' % (p, f.read(1) == b'\0'))
            f.seek(off)
            left = ln
            while left:
                b = f.read(min(left, 1 << 20))
                if not b:
                    break
                h.update(b)
                left -= len(b)
            pos = off + ln
    return h.hexdigest()


def snapshot(root, ref=None):
    """{relpath: (kind, mode, size, mtime, link-or-digest-or-error)} below root. With ref
    (the reference snapshot's extents), big files are hashed on the reference's extents."""
    out, ext = {}, {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            full = os.path.join(d, n)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            kind = ml.KIND.get(stat.S_IFMT(st.st_mode), 'other')
            what = None
            if kind == 'symlink':
                what = os.readlink(full)
            elif kind == 'file':
                e = (ref or {}).get(rel)
                if ref is None and st.st_size > BIG:
                    e = ext[rel] = extents(full)
                try:
                    what = file_digest(full, e or [], st.st_size)
                except OSError as ex:
                    what = 'error %d' % ex.errno
            out[rel] = (kind, stat.S_IMODE(st.st_mode), st.st_size if kind == 'file' else None,
                        int(st.st_mtime // 1), what)
    return out, ext


def tarfile_snapshot(path):
    """What Python's tarfile reads of an archive, as snapshot() would show its extraction."""
    out = {}
    with tarfile.open(path) as tf:
        for m in tf:
            n = ml.normalize_member(m.name)
            if m.isreg():
                out[n] = ('file', m.mode, m.size, m.mtime, hashlib.sha256(tf.extractfile(m).read()).hexdigest())
    return out


def explicit_dirs(path, kind):
    try:
        if kind == 'zstd':
            data = subprocess.run(['zstd', '-q', '-d', '-c', path], stdout=subprocess.PIPE, timeout=60).stdout
            tf = tarfile.open(fileobj=io.BytesIO(data))
        else:
            tf = tarfile.open(path)
        with tf:
            return {ml.normalize_member(m.name) for m in tf if m.isdir()}
    except Exception:
        return set()


def compare(ck, key, got, ref, explicit):
    """Mismatches between the mount's snapshot and GNU tar's extraction: [str]."""
    bad = []
    ref = {p: v for p, v in ref.items() if v[0] in ('file', 'dir', 'symlink')}  # devices, FIFOs left out
    for p in sorted(set(ref) - set(got)):
        bad.append('%s: %r missing in the mount (%s)' % (key, p, ref[p][0]))
    for p in sorted(set(got) - set(ref)):
        bad.append('%s: %r in the mount only (%s)' % (key, p, got[p][0]))
    for p in sorted(set(got) & set(ref)):
        g, r = got[p], ref[p]
        if g[0] != r[0]:
            bad.append('%s: %r is a %s, GNU tar extracts a %s' % (key, p, g[0], r[0]))
            continue
        if g[0] == 'file' and g[1:] != r[1:]:
            bad.append('%s: %r mode/size/mtime/bytes %r, GNU tar %r' % (key, p, g[1:4], r[1:4]))
        elif g[0] == 'symlink' and (g[4], g[3]) != (r[4], ml.clamp_mtime(r[3])):
            bad.append('%s: symlink %r -> %r mtime %d, GNU tar -> %r mtime %d' % (key, p, g[4], g[3], r[4], r[3]))
        elif g[0] == 'dir' and p in explicit and g[1] != r[1]:
            bad.append('%s: directory %r mode %o, GNU tar %o' % (key, p, g[1], r[1]))
    return bad


def run_test(env, ck):
    t0 = time.monotonic()
    src = env.path('src')
    os.makedirs(src)
    archives = []  # (key, kind, original path)
    for group, root in (('cpython', CPYTHON), ('go', GO)):
        found = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if '.tar' in f)
        ck.ok(found, '%s: no *.tar* under %s (install-deps.sh --test installs it)' % (group, root))
        for p in found:
            key, kind = add_shard(src, group, p)
            archives.append((key, kind, p))
    work = env.path('made')
    os.makedirs(work)
    for p in made(env, ck, work, env.rng):
        key, kind = add_shard(src, 'made', p)
        archives.append((key, kind, p))
    ck.eq('shard keys unique', len({k for k, _, _ in archives}), len(archives))

    # GNU tar's verdict and extraction of each shard (the file as mounted)
    refs = {}
    for key, kind, orig in archives:
        shard = os.path.join(src, key)
        lst = env.run(['tar', '-tf', shard], timeout=120)
        err = lst.stderr.decode(errors='replace')
        rejects = [m for m in REJECT if m in err]
        dest = env.path('ref', key)
        os.makedirs(dest)
        x = env.run(['tar', '-xf', shard, '-C', dest, '--no-same-owner'], timeout=120)
        snap, ext = snapshot(dest)
        refs[key] = dict(kind=kind, orig=orig, rejects=rejects, verdict=(
            'rejects: ' + err.strip().splitlines()[0][:70] if rejects else
            'reads' + (' (tar -x exit %d)' % x.returncode if x.returncode else '')),
            snap=snap, ext=ext, xerr=x.stderr.decode(errors='replace'))
    log('GNU tar verdicts ready in %.1fs' % (time.monotonic() - t0))

    cache = env.path('cache')
    rows = []
    with ml.Mount(env, src, cache_dir=cache) as m:
        for key, kind, orig in archives:
            r = refs[key]
            mdir = os.path.join(m.mnt, key[:key.rindex('.tar')])
            try:
                got, _ = snapshot(mdir, ref=r['ext'])
            except OSError as e:
                got = {'<error>': ('error', 0, 0, 0, str(e))}
            explicit = explicit_dirs(os.path.join(src, key), kind)
            want, why = KNOWN.get(key, (None, ''))
            if want == 'exact-tarfile':
                ref = tarfile_snapshot(os.path.join(src, key))
                got_files = {p: v for p, v in got.items() if v[0] == 'file'}
                bad = [] if got_files == ref else ['%s: files differ from tarfile\'s' % key]
                result = 'exact (tarfile)'
            elif (r['rejects'] and want != 'exact') or want == 'refused':
                # refused: only bytes GNU tar extracted, or EIO; checked below: counter and log
                bad = []
                ref = {p: v for p, v in r['snap'].items() if v[0] in ('file', 'dir', 'symlink')}
                for p, g in got.items():
                    if p not in ref:
                        bad.append('%s (refused): %r shown, GNU tar did not extract it' % (key, p))
                    elif g[0] == 'file' and g[4] != 'error 5' and g[1:] != ref[p][1:]:
                        bad.append('%s (refused): %r reads %r, GNU tar %r' % (key, p, g[1:4], ref[p][1:4]))
                result = 'refused'
            else:
                bad = compare(ck, key, got, r['snap'], explicit)
                result = 'exact'
            for b in bad:
                ck.fail(b)
            if bad:
                result = 'MISMATCH'
            rows.append((key, r['verdict'] if not why else r['verdict'] + '; ' + why, result, len(got)))
        st = m.stats()
        m.umount()
    text = ml.logs_under(cache)
    refused = [k for k, _, res, _ in rows if res == 'refused']
    ck.eq('damaged_shards (one per refused archive)', st.get('damaged_shards'), len(refused))
    for k in refused:
        ck.ok('shard %s:' % k in text, '%s refused without a log line naming it' % k)
    for k in ('made/gz-trailing.tar.gz', 'made/zst-trailing.tar.zst'):
        ck.ok(('shard %s: ' % k) in text and 'after the end of its' in text,
              '%s: no log line about its trailing bytes' % k)
    for k in ('made/gz-zeros.tar.gz', 'made/bsdtar.tar.zst'):
        ck.ok(('shard %s: ' % k) not in text, '%s: zero padding logged:\n%s' % (
            k, '\n'.join(l for l in text.splitlines() if k in l)))

    w = max(len(r[0]) for r in rows)
    log('\n%-*s  %-9s  %5s  %s' % (w, 'archive', 'shardfs', 'shown', "GNU tar's verdict"))
    for key, verdict, result, n in rows:
        log('%-*s  %-9s  %5d  %s' % (w, key, result, n, verdict))
    exact = sum(1 for r in rows if r[2].startswith('exact'))
    log('\n%d archives: %d exact, %d refused, %d mismatched (%.1fs)' % (
        len(rows), exact, len(refused), sum(1 for r in rows if r[2] == 'MISMATCH'), time.monotonic() - t0))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    return ml.main_wrapper(run_test, sys.argv[1], 'compat', deadline=600)


if __name__ == '__main__':
    sys.exit(main())
