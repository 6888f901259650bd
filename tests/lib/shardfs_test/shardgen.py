"""Shard generator for the shardfs mount tests (Python 3 stdlib + GNU tar, gzip, zstd CLIs).

Every builder takes a random.Random seeded by the caller, so a run is reproducible from the seed
it prints. Builders return a description of what they made, which the tests use as ground truth
together with GNU tar's own extraction of each shard.
"""

import gzip
import io
import os
import subprocess
import tarfile
import zlib

SHARD_SUFFIXES = ('.tar.gz', '.tar.zst', '.tgz', '.tar')


def shard_dir_name(name):
    """'x.tar.gz' -> 'x'; None when name is not a shard."""
    for suf in SHARD_SUFFIXES:
        if name.endswith(suf) and len(name) > len(suf):
            return name[:-len(suf)]
    return None


def run(cmd, **kw):
    kw.setdefault('timeout', 120)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    if r.returncode != 0:
        raise RuntimeError('generator command failed: %r rc=%d\n%s' % (cmd, r.returncode,
                                                                          r.stderr.decode(errors='replace')))
    return r


def rbytes(rng, n):
    return rng.getrandbits(8 * n).to_bytes(n, 'little') if n else b''


def text_bytes(rng, n):
    words = [b'shard', b'sample', b'tensor', b'batch', b'epoch', b'label', b'image', b'json']
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words) + b' '
    return bytes(out[:n])


# ---------------------------------------------------------------------------------------------
# Staging trees for GNU tar: a spec is a list of entries created in order.
#   ('f', path, data, mode, mtime)   regular file
#   ('d', path, mode, mtime)         directory (attributes applied last, deepest first)
#   ('l', path, target, mtime)       symlink
#   ('h', path, existing_path)       hardlink
# ---------------------------------------------------------------------------------------------

def make_tree(root, spec):
    dirs = []
    for e in spec:
        kind, path = e[0], e[1]
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full) or root, exist_ok=True)
        if kind == 'f':
            if os.path.lexists(full):
                os.unlink(full)
            with open(full, 'wb') as f:
                f.write(e[2])
            os.chmod(full, e[3])
            os.utime(full, (e[4], e[4]))
        elif kind == 'd':
            os.makedirs(full, exist_ok=True)
            dirs.append((full, e[2], e[3]))
        elif kind == 'l':
            os.symlink(e[2], full)
            os.utime(full, (e[3], e[3]), follow_symlinks=False)
        elif kind == 'h':
            os.link(os.path.join(root, e[2]), full)
        else:
            raise ValueError(kind)
    for full, mode, mtime in sorted(dirs, key=lambda d: -d[0].count('/')):
        os.chmod(full, mode)
        os.utime(full, (mtime, mtime))


def gnu_tar_create(archive, stage, members, fmt, extra=(), append=False):
    """GNU tar with an explicit member list and --no-recursion (so parents stay implicit)."""
    cmd = ['tar', '--format=' + fmt, '--no-recursion', '--owner=0', '--group=0', '--numeric-owner',
           '-rf' if append else '-cf', archive] + list(extra) + ['-C', stage] + list(members)
    run(cmd)


# ---------------------------------------------------------------------------------------------
# The "formats" source: every tar flavour we promise to read.
# ---------------------------------------------------------------------------------------------

T0 = 1600000000  # 2020-09-13


def _wds_samples(rng, prefix, n, start):
    spec = []
    for i in range(n):
        key = '%s_%d' % (prefix, start + i)
        t = T0 + rng.randrange(0, 10 ** 7)
        spec.append(('f', key + '.jpg', b'\xff\xd8\xff\xe0' + rbytes(rng, rng.randrange(200, 30000)),
                     0o644, t))
        spec.append(('f', key + '.cls', str(rng.randrange(1000)).encode() + b'\n', 0o644, t))
        spec.append(('f', key + '.json',
                     ('{"key": "%s", "w": %d, "h": %d}' % (key, rng.randrange(1, 999),
                                                           rng.randrange(1, 999))).encode(), 0o644, t))
    return spec


def _members(spec):
    return [e[1] for e in spec]


def build_formats_source(src, work, rng):
    """Fill directory src with shards of every supported flavour. Returns a dict with
    'shards' (list of shard relpaths) and 'plain' (list of non-shard relpaths)."""
    os.makedirs(src, exist_ok=True)
    stage_root = os.path.join(work, 'stage')
    os.makedirs(stage_root, exist_ok=True)
    shards = []

    def stage(name, spec):
        d = os.path.join(stage_root, name)
        os.makedirs(d)
        make_tree(d, spec)
        return d

    # -- ustar.tar: modes, explicit/implicit dirs, splittable long name, symlinks, hardlink, empty
    #    file, duplicate name appended with tar -r.
    long_split = 'long/' + 'p' * 90 + '/' + 'n' * 94 + '.dat'          # > 100, fits prefix+name
    spec = [
        ('d', 'docs', 0o750, T0 + 11),
        ('f', 'docs/a.txt', text_bytes(rng, 3000), 0o644, T0 + 1),
        ('f', 'docs/exec.sh', b'#!/bin/sh\necho hi\n', 0o755, T0 + 2),
        ('h', 'docs/a_hard.txt', 'docs/a.txt'),
        ('f', 'secret.key', rbytes(rng, 777), 0o600, T0 + 3),
        ('f', 'ro.txt', b'read only\n', 0o444, T0 + 4),
        ('f', 'empty', b'', 0o644, T0 + 5),
        ('d', 'emptydir', 0o700, T0 + 6),
        ('f', 'implicit/sub/file.bin', rbytes(rng, 70000), 0o640, T0 + 7),
        ('f', long_split, rbytes(rng, 5000), 0o644, T0 + 8),
        ('l', 'link_to_a', 'docs/a.txt', T0 + 9),
        ('l', 'dangling', 'nowhere/x', T0 + 10),
        ('f', 'dup.txt', b'first copy of dup\n', 0o644, T0 + 12),
        ('f', 'epoch1.txt', b'mtime 1\n', 0o644, 1),
        ('f', 'y2106.txt', b'mtime 2^32-1\n', 0o644, 2 ** 32 - 1),
    ]
    d = stage('ustar', spec)
    gnu_tar_create(os.path.join(src, 'ustar.tar'), d, _members(spec), 'ustar')
    make_tree(d, [('f', 'dup.txt', b'SECOND copy of dup, longer than the first\n', 0o600, T0 + 99)])
    gnu_tar_create(os.path.join(src, 'ustar.tar'), d, ['dup.txt'], 'ustar', append=True)
    shards.append('ustar.tar')

    # -- gnu.tar: GNU long names (L), long link targets (K), hardlinks with long names, 3-way
    #    hardlink, deep paths > 255 bytes, duplicate via tar -r.
    long_comp = 'L' * 150 + '.txt'
    deep = 'g/' + ''.join('seg%02d_%s/' % (i, 'x' * 20) for i in range(12)) + 'leaf.bin'
    hl_orig = 'hl/' + 'o' * 110 + '.bin'
    spec = [
        ('f', long_comp, text_bytes(rng, 1234), 0o644, T0 + 20),
        ('f', deep, rbytes(rng, 20000), 0o600, T0 + 21),
        ('l', 'longlink', 'T' * 180 + '/target', T0 + 22),
        ('l', 'L' * 120 + '.lnk', 'S' * 140, T0 + 23),
        ('d', 'hl', 0o755, T0 + 24),
        ('f', hl_orig, rbytes(rng, 9000), 0o640, T0 + 25),
        ('h', 'hl/short', hl_orig),
        ('h', 'hl/' + 'k' * 120, hl_orig),
        ('f', 'tri/one', rbytes(rng, 4096), 0o644, T0 + 26),
        ('h', 'tri/two', 'tri/one'),
        ('h', 'tri/three', 'tri/one'),
        ('f', 'big.bin', rbytes(rng, 600000), 0o644, T0 + 27),
        ('f', 'empty2', b'', 0o600, T0 + 28),
        ('f', 'dup.txt', b'gnu first\n', 0o644, T0 + 29),
    ]
    d = stage('gnu', spec)
    members = [e[1] for e in spec if e[0] != 'd' or e[1] == 'hl']
    gnu_tar_create(os.path.join(src, 'gnu.tar'), d, members, 'gnu')
    make_tree(d, [('f', 'dup.txt', b'gnu second, replaced\n', 0o755, T0 + 30)])
    gnu_tar_create(os.path.join(src, 'gnu.tar'), d, ['dup.txt'], 'gnu', append=True)
    shards.append('gnu.tar')

    # -- pax.tar: POSIX pax headers: long names, long link targets, non-ASCII names, sub-second
    #    mtime, duplicate.
    spec = [
        ('d', 'données', 0o755, T0 + 40),
        ('f', 'données/résumé.txt', 'héllo wörld\n'.encode(), 0o644, T0 + 41),
        ('f', '日本語/ファイル.bin', rbytes(rng, 3333), 0o644, T0 + 42),
        ('f', 'P' * 120 + '/' + 'q' * 130 + '.bin', rbytes(rng, 1500), 0o644, T0 + 43),
        ('l', 'paxlink', 'Z' * 200, T0 + 44),
        ('l', 'ünï_link', 'données/résumé.txt', T0 + 45),
        ('f', 'frac.txt', b'fractional mtime\n', 0o644, T0 + 46.75),
        ('f', 'mid.bin', rbytes(rng, 100000), 0o755, T0 + 47),
        ('f', 'dup.txt', b'pax first\n', 0o644, T0 + 48),
    ]
    d = stage('pax', spec)
    gnu_tar_create(os.path.join(src, 'pax.tar'), d, _members(spec), 'posix')
    make_tree(d, [('f', 'dup.txt', b'pax second\n', 0o600, T0 + 49)])
    gnu_tar_create(os.path.join(src, 'pax.tar'), d, ['dup.txt'], 'posix', append=True)
    shards.append('pax.tar')

    # -- sparse shards: GNU old sparse ('S') and pax sparse 0.1 / 1.0.
    def sparse_stage(name):
        d = os.path.join(stage_root, name)
        os.makedirs(d)
        p = os.path.join(d, 'sp1')
        with open(p, 'wb') as f:
            f.truncate(4 * 1024 * 1024)
            for off, n in ((0, 5000), (1024 * 1024 + 123, 70000), (4 * 1024 * 1024 - 3000, 3000)):
                f.seek(off)
                f.write(rbytes(rng, n))
        os.utime(p, (T0 + 50, T0 + 50))
        p2 = os.path.join(d, 'allhole')
        with open(p2, 'wb') as f:
            f.truncate(1024 * 1024)
        os.utime(p2, (T0 + 51, T0 + 51))
        make_tree(d, [('f', 'after_sparse.txt', text_bytes(rng, 999), 0o644, T0 + 52)])
        return d

    for name, fmt, extra in (('sparse-gnu', 'gnu', ['--sparse']),
                             ('sparse-pax01', 'posix', ['--sparse', '--sparse-version=0.1']),
                             ('sparse-pax10', 'posix', ['--sparse', '--sparse-version=1.0'])):
        d = sparse_stage(name)
        gnu_tar_create(os.path.join(src, name + '.tar'), d, ['sp1', 'allhole', 'after_sparse.txt'],
                       fmt, extra)
        with tarfile.open(os.path.join(src, name + '.tar')) as tf:
            sp = [m.name for m in tf if m.sparse is not None]
        if 'sp1' not in sp:
            raise RuntimeError('generator: %s.tar did not store sp1 as sparse (%r)' % (name, sp))
        shards.append(name + '.tar')

    # -- WebDataset shards, flat samples; nested subdirectories of the source.
    for rel, prefix, start, n in (('wds.tar', 'n0144', 1000, 25),
                                  ('train/shard-000000.tar', 'n0144', 2000, 12),
                                  ('train/shard-000001.tar', 'n0207', 3000, 12),
                                  ('val/shard-000000.tar', 'n0999', 4000, 8)):
        spec = _wds_samples(rng, prefix, n, start)
        d = stage(rel.replace('/', '_'), spec)
        os.makedirs(os.path.dirname(os.path.join(src, rel)) or src, exist_ok=True)
        gnu_tar_create(os.path.join(src, rel), d, sorted(_members(spec)), 'gnu')
        shards.append(rel)

    # -- './'-prefixed shard made the common way (tar -C dir -cf x.tar .), recursive.
    spec = [('d', 'a', 0o755, T0 + 60), ('f', 'a/b.txt', b'dot slash\n', 0o644, T0 + 61),
            ('f', 'c.bin', rbytes(rng, 2048), 0o600, T0 + 62), ('l', 'a/up', '../c.bin', T0 + 63)]
    d = stage('dotslash', spec)
    os.utime(d, (T0 + 64, T0 + 64))
    run(['tar', '--format=gnu', '--owner=0', '--group=0', '-cf', os.path.join(src, 'dotslash.tar'),
         '-C', d, '.'])
    shards.append('dotslash.tar')

    # -- compressed shards.
    def comp_spec(tag):
        return [('d', tag, 0o755, T0 + 70),
                ('f', tag + '/text.txt', text_bytes(rng, 200000), 0o644, T0 + 71),
                ('f', tag + '/rand.bin', rbytes(rng, 300000), 0o600, T0 + 72),
                ('f', tag + '/implicit/deep/x', rbytes(rng, 100), 0o755, T0 + 73),
                ('l', tag + '/sym', 'text.txt', T0 + 74),
                ('h', tag + '/hard.bin', tag + '/rand.bin'),
                ('f', tag + '/empty', b'', 0o644, T0 + 75)]
    for fname, flag, fmt in (('comp.tar.gz', '-z', 'gnu'), ('comp2.tgz', '-z', 'posix'),
                             ('comp3.tar.zst', '--zstd', 'gnu'),
                             ('val/sub/deeper/shard-000002.tar.gz', '-z', 'ustar')):
        spec = comp_spec('c')
        d = stage(fname.replace('/', '_'), spec)
        os.makedirs(os.path.dirname(os.path.join(src, fname)) or src, exist_ok=True)
        gnu_tar_create(os.path.join(src, fname), d, _members(spec), fmt, [flag])
        shards.append(fname)

    # -- shards written by Python's tarfile.
    def add(tf, name, data=b'', type_=tarfile.REGTYPE, mode=0o644, mtime=T0, linkname=''):
        ti = tarfile.TarInfo(name)
        ti.type = type_
        ti.mode = mode
        ti.mtime = mtime
        ti.linkname = linkname
        ti.uname = ti.gname = 'root'
        if type_ in (tarfile.REGTYPE, tarfile.AREGTYPE):
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        else:
            tf.addfile(ti)

    with tarfile.open(os.path.join(src, 'py_gnu.tar'), 'w', format=tarfile.GNU_FORMAT) as tf:
        add(tf, 'ümlaut', type_=tarfile.DIRTYPE, mode=0o751, mtime=T0 + 80)
        add(tf, 'ümlaut/naïve.txt', 'naïve\n'.encode(), mode=0o640, mtime=T0 + 81)
        add(tf, 'G' * 130 + '/' + 'h' * 140, rbytes(rng, 4000), mtime=T0 + 82)
        add(tf, 'orig.bin', rbytes(rng, 12345), mode=0o600, mtime=T0 + 83)
        add(tf, 'hard.bin', type_=tarfile.LNKTYPE, linkname='orig.bin', mtime=T0 + 83)
        add(tf, 'sym', type_=tarfile.SYMTYPE, linkname='V' * 150, mtime=T0 + 84)
        add(tf, 'implicit/only/child.txt', b'child\n', mtime=T0 + 85)
        add(tf, 'zero', b'', mode=0o444, mtime=T0 + 86)
    shards.append('py_gnu.tar')

    with tarfile.open(os.path.join(src, 'py_pax.tar'), 'w', format=tarfile.PAX_FORMAT,
                      pax_headers={'comment': 'global header from tarfile'}) as tf:
        add(tf, 'данные', type_=tarfile.DIRTYPE, mode=0o755, mtime=T0 + 90)
        add(tf, 'данные/файл.txt', 'привет\n'.encode(), mtime=T0 + 91)
        add(tf, 'emoji_😀.bin', rbytes(rng, 2222), mode=0o600, mtime=T0 + 92)
        add(tf, '中文/' + '字' * 60 + '.txt', rbytes(rng, 100), mtime=T0 + 93)   # 180-byte name
        add(tf, 'plain.bin', rbytes(rng, 50000), mode=0o755, mtime=T0 + 94)
        add(tf, 'plain_hard', type_=tarfile.LNKTYPE, linkname='plain.bin', mtime=T0 + 94)
        add(tf, 'symü', type_=tarfile.SYMTYPE, linkname='данные/файл.txt', mtime=T0 + 95)
        add(tf, 'later/dup', b'one\n', mtime=T0 + 96)
        add(tf, 'later/dup', b'two, the later copy\n', mode=0o600, mtime=T0 + 97)
    shards.append('py_pax.tar')

    # -- non-shard files.
    plain = []
    for rel, data in (('README.txt', b'This is the dataset README.\n' + text_bytes(rng, 500)),
                      ('train/notes.md', b'# notes\n'),
                      ('notes.tar.bak', rbytes(rng, 3000)),
                      ('blob.gz', gzip.compress(b'not a shard', mtime=0)),
                      ('val/labels.json', b'{"a": 1}\n')):
        p = os.path.join(src, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, 'wb') as f:
            f.write(data)
        plain.append(rel)
    return {'shards': sorted(shards), 'plain': sorted(plain)}


def build_mtime_range_source(src, work, rng):
    """Members whose mtimes fall outside 0..2^32-1 (pax headers carry them exactly)."""
    os.makedirs(src, exist_ok=True)
    d = os.path.join(work, 'stage-mtime')
    os.makedirs(d)
    spec = [('f', 'before1970.txt', b'negative mtime\n', 0o644, -1000000),
            ('f', 'y2286.txt', b'mtime 9999999999\n', 0o644, 9999999999),
            ('f', 'y2038.txt', b'mtime 2^31\n', 0o644, 2 ** 31),
            ('f', 'zero.txt', b'mtime 0\n', 0o644, 0)]
    make_tree(d, spec)
    gnu_tar_create(os.path.join(src, 'mtimes.tar'), d, _members(spec), 'posix')
    gnu_tar_create(os.path.join(src, 'mtimes-gnu.tar'), d, _members(spec), 'gnu')
    return {'shards': ['mtimes-gnu.tar', 'mtimes.tar'], 'plain': []}


# ---------------------------------------------------------------------------------------------
# Damaged shards. Ground truth comes from the base archive's member offsets.
# ---------------------------------------------------------------------------------------------

def _base_tar(rng, n=6):
    buf = io.BytesIO()
    contents = {}
    with tarfile.open(fileobj=buf, mode='w', format=tarfile.USTAR_FORMAT) as tf:
        for i in range(1, n + 1):
            name = 'f%d.bin' % i
            data = rbytes(rng, rng.randrange(20000, 40000))
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, T0 + i
            tf.addfile(ti, io.BytesIO(data))
            contents[name] = data
    raw = buf.getvalue()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        layout = [(m.name, m.offset, m.offset_data, m.size) for m in tf]
    return raw, contents, layout


def build_damaged_source(src, rng):
    """Returns {shard_name: {'exact': {name: bytes}, 'eio': {name: bytes}, 'absent': [names],
    'maybe': {name: bytes}, 'damaged': True|False|None}}. 'maybe' members may be absent or fail
    with EIO but must never give wrong bytes; damaged None means either is acceptable."""
    os.makedirs(src, exist_ok=True)
    raw, contents, layout = _base_tar(rng)
    by = {m[0]: m for m in layout}
    names = [m[0] for m in layout]
    out = {}

    def write(name, data):
        with open(os.path.join(src, name), 'wb') as f:
            f.write(data)

    # complete shard, control
    write('ok.tar', raw)
    out['ok.tar'] = dict(exact={n: contents[n] for n in names}, eio={}, absent=[], maybe={},
                         damaged=False)

    # all members complete but no end-of-archive blocks
    last = layout[-1]
    end = last[2] + ((last[3] + 511) // 512) * 512
    write('noeof.tar', raw[:end])
    out['noeof.tar'] = dict(exact={n: contents[n] for n in names}, eio={}, absent=[], maybe={},
                            damaged=None)

    # truncated in the middle of f4's data
    _, _, d4, s4 = by['f4.bin']
    write('trunc_member.tar', raw[:d4 + s4 // 2])
    out['trunc_member.tar'] = dict(exact={n: contents[n] for n in names[:3]},
                                   eio={'f4.bin': contents['f4.bin']}, absent=names[4:], maybe={},
                                   damaged=True)

    # truncated in the middle of f4's header
    h4 = by['f4.bin'][1]
    write('trunc_header.tar', raw[:h4 + 200])
    out['trunc_header.tar'] = dict(exact={n: contents[n] for n in names[:3]}, eio={},
                                   absent=names[3:], maybe={}, damaged=True)

    # f3's header checksum no longer matches (name byte changed)
    h3 = by['f3.bin'][1]
    b = bytearray(raw)
    b[h3] = ord('X')
    write('corrupt_cksum.tar', bytes(b))
    out['corrupt_cksum.tar'] = dict(exact={n: contents[n] for n in names[:2]}, eio={},
                                    absent=names[2:] + ['X3.bin'], maybe={}, damaged=True)

    # random garbage
    write('garbage.tar', rbytes(rng, 30000))
    out['garbage.tar'] = dict(exact={}, eio={}, absent=[], maybe={}, damaged=True)

    # zero bytes
    write('empty.tar', b'')
    out['empty.tar'] = dict(exact={}, eio={}, absent=[], maybe={}, damaged=None)

    def split_by_prefix(prefix_len):
        exact, maybe = {}, {}
        for n, off, doff, size in layout:
            (exact if doff + size <= prefix_len else maybe)[n] = contents[n]
        return exact, maybe

    # gzip truncated in the middle (random data: compressed offsets ~ tar offsets)
    gz = gzip.compress(raw, compresslevel=6, mtime=0)
    cut = len(gz) * (d4 + s4 // 2) // len(raw)
    dec = zlib.decompressobj(31)
    prefix = dec.decompress(gz[:cut])
    if not (d4 < len(prefix) < d4 + s4) or raw[:len(prefix)] != prefix:
        raise RuntimeError('generator: gz truncation landed at %d, not inside f4' % len(prefix))
    write('gztrunc.tar.gz', gz[:cut])
    exact, maybe = split_by_prefix(len(prefix))
    out['gztrunc.tar.gz'] = dict(exact=exact, eio={}, absent=[], maybe=maybe, damaged=True,
                                 decoded_prefix=len(prefix))

    # gzip whose deflate stream turns invalid mid-f4: valid blocks (full flush), then a block
    # with the reserved type 11 -> 'invalid block type', detected exactly there.
    cutp = d4 + s4 // 2
    co = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = co.compress(raw[:cutp]) + co.flush(zlib.Z_FULL_FLUSH)
    hdr = b'\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03'
    data = hdr + body + b'\xff' + rbytes(rng, 20000)
    dec = zlib.decompressobj(31)
    try:
        dec.decompress(data)
        raise RuntimeError('generator: corrupt gzip decoded without error')
    except zlib.error:
        pass
    write('gzcorrupt.tar.gz', data)
    exact, maybe = split_by_prefix(cutp)
    # zlib decodes f1-f3 before it meets the bad block, but a gzip member whose
    # CRC can never be checked is not trusted at all (docs/design.md section 3: a
    # checksum failure gives no bytes): the shard shows no members.
    out['gzcorrupt.tar.gz'] = dict(exact={}, eio={}, absent=sorted(set(exact) | set(maybe)),
                                   maybe={}, damaged=True, decoded_prefix=0)

    # zstd truncated: decoded prefix as the zstd CLI gives it
    # (several 16 KiB frames, as pzstd/seekable writers make, so a cut leaves whole frames)
    zst = b''.join(run(['zstd', '-q', '-c', '-'], input=raw[i:i + 16384]).stdout
                   for i in range(0, len(raw), 16384))
    zcut = len(zst) * 2 // 3
    r = subprocess.run(['zstd', '-q', '-d', '-c'], input=zst[:zcut], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    zprefix = r.stdout
    if r.returncode == 0 or raw[:len(zprefix)] != zprefix:
        raise RuntimeError('generator: truncated zstd decoded unexpectedly')
    write('zsttrunc.tar.zst', zst[:zcut])
    exact, maybe = split_by_prefix(len(zprefix))
    out['zsttrunc.tar.zst'] = dict(exact=exact, eio={}, absent=[], maybe=maybe, damaged=True,
                                   decoded_prefix=len(zprefix))
    return out


# ---------------------------------------------------------------------------------------------
# Hostile shards.
# ---------------------------------------------------------------------------------------------

def build_hostile_source(src, rng):
    """Returns {shard relpath: {visible path: ('f', bytes) | ('d',) | ('l', target)}} and the
    minimum/maximum skipped_members."""
    os.makedirs(os.path.join(src, 'sub'), exist_ok=True)
    expect = {}

    def add(tf, name, type_=tarfile.REGTYPE, data=b'', linkname='', mode=0o644):
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode, ti.mtime, ti.linkname = type_, mode, T0, linkname
        if type_ == tarfile.REGTYPE:
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        else:
            if type_ in (tarfile.CHRTYPE, tarfile.BLKTYPE):
                ti.devmajor, ti.devminor = 1, 3
            tf.addfile(ti)

    with tarfile.open(os.path.join(src, 'sub', 'hostile.tar'), 'w',
                      format=tarfile.GNU_FORMAT) as tf:
        add(tf, '.', tarfile.DIRTYPE, mode=0o755)
        add(tf, '../evil1', data=b'evil1')                          # skipped ('..')
        add(tf, '/abs/x', data=b'abs x')                            # -> abs/x
        add(tf, 'a/../../evil2', data=b'evil2')                     # skipped
        add(tf, './ok', data=b'ok')                                 # -> ok
        add(tf, 'a//b', data=b'a b')                                # -> a/b
        add(tf, 'a/./c', data=b'a c')                               # -> a/c
        add(tf, 'fifo', tarfile.FIFOTYPE)                           # left out
        add(tf, 'chardev', tarfile.CHRTYPE)                         # left out
        add(tf, 'blockdev', tarfile.BLKTYPE)                        # left out
        add(tf, 'new\nline', data=b'newline name')                  # kept
        add(tf, 'c/../d', data=b'evil3')                            # skipped
        add(tf, '..', tarfile.DIRTYPE)                              # skipped
        add(tf, 'x/..', tarfile.DIRTYPE)                            # skipped
        add(tf, 'link_abs', tarfile.SYMTYPE, linkname='/etc/passwd')
        add(tf, 'link_up', tarfile.SYMTYPE, linkname='../../outside')
        add(tf, '//double/abs', data=b'double')                     # -> double/abs
        add(tf, 'trailing/', tarfile.DIRTYPE)                       # -> trailing
        add(tf, '../' + 'e' * 120 + '_evil4', data=b'evil4')        # GNU longname, skipped
    expect['sub/hostile.tar'] = {
        'abs': ('d',), 'abs/x': ('f', b'abs x'), 'ok': ('f', b'ok'), 'a': ('d',),
        'a/b': ('f', b'a b'), 'a/c': ('f', b'a c'), 'new\nline': ('f', b'newline name'),
        'link_abs': ('l', '/etc/passwd'), 'link_up': ('l', '../../outside'),
        'double': ('d',), 'double/abs': ('f', b'double'), 'trailing': ('d',)}

    with tarfile.open(os.path.join(src, 'hostile-pax.tar'), 'w', format=tarfile.PAX_FORMAT) as tf:
        add(tf, '../évil5', data=b'evil5')                          # pax path header, skipped
        add(tf, '/' + 'l' * 120 + '/abs', data=b'long abs')         # pax path, -> l.../abs
        add(tf, 'dir/../../évil6', data=b'evil6')                   # skipped
        add(tf, 'fine.txt', data=b'fine')
    expect['hostile-pax.tar'] = {'l' * 120: ('d',), 'l' * 120 + '/abs': ('f', b'long abs'),
                                 'fine.txt': ('f', b'fine')}
    # '..' names: hostile.tar 6 (../evil1, a/../../evil2, c/../d, .., x/.., ../eee_evil4),
    # hostile-pax.tar 2. Device nodes/FIFOs (3) and the "." entry may be counted as well.
    return expect, 8, 12
