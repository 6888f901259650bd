#!/usr/bin/python3
"""shardfs mount tests: what a saved shard index keeps (local sources: no store).

usage: test_idxsaved.py SHARDFS GROUP
GROUP:
  leftout  seeded shards of ordinary members and members a mount leaves out ('..' components,
           components over 255 bytes, devices, FIFOs), with the cache directory kept across
           three mounts: the first builds every index and logs, per shard with members left
           out, the first one by its name as stored and why; the second loads every index
           (index_built 0) and logs the same lines, byte for byte; then each saved index is
           turned into version 3 (the format before the first member left out was kept), and
           the third mount rebuilds exactly the shards that left members out
           (index_saved_rejected, index_built: 'another version' in the log), loads the others
           (index_loaded), and logs the same lines again. Before the change the second and the
           third mount gave only the count.
"""
import re
import sys

import os  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402


def fnv64(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return h


def to_version3(b):
    """A version 4 index file as version 3 wrote it: no 'skip' section (the last of 9), a
    224-byte header with 8 section rows; the same checksum rule."""
    assert b[:8] == b'SHRDIDX\0' and int.from_bytes(b[8:12], 'little') == 4, b[:16]
    rows = [(int.from_bytes(b[96 + 16 * s:104 + 16 * s], 'little'),
             int.from_bytes(b[104 + 16 * s:112 + 16 * s], 'little')) for s in range(9)]
    end = rows[8][0]  # the skip section is the last: the file up to it, less 16 header bytes
    out = bytearray(b[:96])
    out[8:12] = (3).to_bytes(4, 'little')
    out[12:16] = (224).to_bytes(4, 'little')
    for off, ln in rows[:8]:
        out += (off - 16).to_bytes(8, 'little') + ln.to_bytes(8, 'little')
    out += b[240:end]
    out[24:32] = len(out).to_bytes(8, 'little')
    out[16:24] = bytes(8)
    out[16:24] = fnv64(bytes(out)).to_bytes(8, 'little')
    return bytes(out)


def index_files(cache):
    out = []
    for d, _, files in os.walk(cache):
        for f in files:
            p = os.path.join(d, f)
            with open(p, 'rb') as fh:
                if fh.read(8) == b'SHRDIDX\0':
                    out.append(p)
    return sorted(out)


def hostile_member(rng, k):
    import tarfile
    kind = rng.choice(['dotdot', 'long', 'chr', 'blk', 'fifo'])
    if kind == 'dotdot':
        ti = tarfile.TarInfo(rng.choice(['../up%d.bin' % k, 'a/../../up%d.bin' % k]))
    elif kind == 'long':
        ti = tarfile.TarInfo('d%d/' % k + 'L' * rng.randint(256, 290) + '.bin')
    else:
        ti = tarfile.TarInfo('dev/n%d' % k)
        ti.type = {'chr': tarfile.CHRTYPE, 'blk': tarfile.BLKTYPE, 'fifo': tarfile.FIFOTYPE}[kind]
    ti.mtime = 1700000000
    return ti


def group_leftout(env, ck):
    import io
    import tarfile
    rng = env.rng
    src, cache = env.path('src'), env.path('cache')
    os.makedirs(src)
    nout = {}
    for s in range(10):
        bio = io.BytesIO()
        n = 0
        with tarfile.open(fileobj=bio, mode='w', format=tarfile.GNU_FORMAT) as tf:
            for k in range(rng.randint(2, 12)):
                if s % 3 and rng.random() < 0.3:
                    tf.addfile(hostile_member(rng, k))
                    n += 1
                else:
                    ml.add_seeded_member(tf, rng, k)
        ml.write_file(os.path.join(src, 's%d.tar' % s), bio.getvalue())
        nout['s%d.tar' % s] = n
    with_out = sorted(s for s, n in nout.items() if n)
    log('shards with members left out: %r' % {s: nout[s] for s in with_out})
    ck.ok(len(with_out) >= 2, 'the seed left members out of %d shards' % len(with_out))

    def mount(label):
        logf = env.path('daemon-%s.log' % label)
        with ml.Mount(env, src, cache_dir=cache, extra=['--log-file', logf]) as m:
            for s in sorted(nout):
                os.listdir(os.path.join(m.mnt, s[:-4]))
            st = m.stats()
        with open(logf, 'rb') as f:
            text = f.read()
        firsts = {}
        for s in nout:
            firsts[s] = [ln[ln.index(b'shard '):] for ln in text.splitlines()
                         if (b'shard %s: the first member left out: ' % s.encode()) in ln]
        rejected = re.findall(rb'shard (s\d+\.tar): saved index unusable \(another version\)',
                              text)
        return st, firsts, sorted(x.decode() for x in rejected)

    st, first1, _ = mount('build')
    ck.eq('build: index_built', st['index_built'], len(nout))
    ck.eq('build: skipped_members', st['skipped_members'], sum(nout.values()))
    ck.eq('build: shards whose first member left out is named once',
          sorted(s for s, v in first1.items() if len(v) == 1), with_out)
    ck.eq('build: shards with no such line', sorted(s for s, v in first1.items() if not v),
          sorted(set(nout) - set(with_out)))

    st, first2, _ = mount('load')
    ck.eq('load: index_built, index_loaded', (st['index_built'], st['index_loaded']),
          (0, len(nout)))
    ck.eq('load: skipped_members', st['skipped_members'], sum(nout.values()))
    for s in sorted(nout):
        ck.eq('load: %s: lines naming the first member left out' % s, first2[s], first1[s])

    files = index_files(cache)
    ck.eq('index files in the cache', len(files), len(nout))
    for p in files:
        with open(p, 'rb') as f:
            b = f.read()
        with open(p, 'wb') as f:
            f.write(to_version3(b))
    st, first3, rejected = mount('old')
    ck.eq('old: index_saved_rejected, index_built, index_loaded',
          (st['index_saved_rejected'], st['index_built'], st['index_loaded']),
          (len(with_out), len(with_out), len(nout) - len(with_out)))
    ck.eq('old: shards logged as another version', rejected, with_out)
    ck.eq('old: skipped_members', st['skipped_members'], sum(nout.values()))
    for s in sorted(nout):
        ck.eq('old: %s: lines naming the first member left out' % s, first3[s], first1[s])


GROUPS = {'leftout': (group_leftout, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
