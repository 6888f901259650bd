#!/usr/bin/python3
"""Scale: thousands of shards, hundreds of thousands of members.

usage: test_scale.py SHARDFS

Writes 2000 ustar shards of 100 tiny members each (200,000 members, 0..99 bytes, content
derived from the name) into one directory (tar headers written directly: a few seconds), mounts
it, and checks:
  - `find MOUNT` lists exactly the expected 204,001 paths (every shard, its member directory and
    every member; nothing else), and `find -type f` / `-type d` count exactly;
  - 2000 random members and 20 whole raw shards read back byte for byte;
  - the daemon's RSS and index memory after everything was indexed (printed; RSS must stay
    under 1 GiB, 2 GiB under ASan);
  - a remount with the same cache dir loads all 2000 indexes instead of building them, and lists
    the same count.
Environment: SHARDFS_SCALE_SHARDS (default 2000), SHARDFS_SCALE_MEMBERS (per shard, default 100),
SHARDFS_TEST_SEED, SHARDFS_TEST_KEEP=1, SHARDFS_TEST_DEADLINE.
Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import os  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import stress as sl  # noqa: E402
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

NSHARDS = int(os.environ.get('SHARDFS_SCALE_SHARDS', '2000'))
NMEMBERS = int(os.environ.get('SHARDFS_SCALE_MEMBERS', '100'))  # per shard


def member_bytes(s, name, k):
    return (b'%d/%s;' % (s, name.encode()) * 8)[:k]


def build(env):
    """src/train/shard-NNNNNN.tar; returns (src, {shard index: [(name, size)]})."""
    src = env.path('src')
    d = os.path.join(src, 'train')
    os.makedirs(d)
    rng = env.rng
    layout = {}
    for s in range(NSHARDS):
        members = []
        for i in range(NMEMBERS // 2):
            key = 'k%06d_%03d' % (s, i)
            for ext in ('cls', 'txt'):
                name = '%s.%s' % (key, ext)
                members.append((name, member_bytes(s, name, rng.randrange(0, 100))))
        if NMEMBERS % 2:
            name = 'extra_%06d.json' % s
            members.append((name, member_bytes(s, name, rng.randrange(0, 100))))
        sl.write_shard(os.path.join(d, 'shard-%06d.tar' % s), members)
        layout[s] = [(n, len(b)) for n, b in members]
    return src, layout


def find(env, root, *args):
    r = env.run(['find', root] + list(args), timeout=600)
    if r.returncode != 0:
        raise RuntimeError('find %s failed (rc %r): %s' % (' '.join(args), r.returncode,
                                                           r.stderr.decode(errors='replace')[-2000:]))
    return r.stdout.decode('utf-8', errors='surrogateescape').split('\n')[:-1], r.elapsed


def group_scale(env, ck):
    san = sl.sanitized(env.shardfs)
    t = time.monotonic()
    src, layout = build(env)
    nmem = sum(len(v) for v in layout.values())
    total = sum(os.path.getsize(os.path.join(src, 'train', f))
                for f in os.listdir(os.path.join(src, 'train')))
    log('scale: generated %d shards, %d members, %d bytes in %.1fs' % (
        NSHARDS, nmem, total, time.monotonic() - t))
    cache = env.path('cache')
    opts = ['--log-file', env.path('daemon.log')]
    with ml.Mount(env, src, cache_dir=cache, extra=opts) as m:
        pid = sl.daemon_pid(m)
        rss_mount = sl.rss_kib(pid)
        mnt = m.mnt
        expect = {mnt + '/train'}
        for s, members in layout.items():
            base = '%s/train/shard-%06d' % (mnt, s)
            expect.add(base + '.tar')
            expect.add(base)
            for n, _ in members:
                expect.add(base + '/' + n)
        lines, dt = find(env, mnt, '-mindepth', '1')
        got = set(lines)
        log('scale: find listed %d paths in %.1fs (expected %d)' % (len(lines), dt, len(expect)))
        ck.eq('scale: find: number of paths', len(lines), len(expect))
        ck.eq('scale: find: duplicate paths', len(lines) - len(got), 0)
        missing = sorted(expect - got)
        extra = sorted(got - expect)
        ck.ok(not missing, 'scale: find: %d paths missing, e.g. %r' % (len(missing), missing[:5]))
        ck.ok(not extra, 'scale: find: %d unexpected paths, e.g. %r' % (len(extra), extra[:5]))
        files, dtf = find(env, mnt, '-type', 'f')
        ck.eq('scale: find -type f', len(files), NSHARDS + nmem)
        dirs, dtd = find(env, mnt, '-type', 'd')
        ck.eq('scale: find -type d', len(dirs), NSHARDS + 2)
        log('scale: find -type f %.1fs, -type d %.1fs' % (dtf, dtd))
        st = m.stats()
        rss = sl.rss_kib(pid)
        mem = sl.mem_kib(pid)
        ck.eq('scale: stats shards', st['shards'], NSHARDS)
        ck.eq('scale: stats members', st['members'], nmem)
        ck.eq('scale: stats index_errors', st['index_errors'], 0)
        # spot checks: random members, whole raw shards
        t = time.monotonic()
        rng = env.rng
        for _ in range(2000):
            s = rng.randrange(NSHARDS)
            n, size = rng.choice(layout[s])
            p = '%s/train/shard-%06d/%s' % (mnt, s, n)
            try:
                got_b = ml.read_all(p)
            except OSError as e:
                ck.fail('scale: reading %s: %s' % (p, e))
                continue
            ck.ok(got_b == member_bytes(s, n, size), 'scale: %s: %r, expected %r' % (
                p, got_b[:40], member_bytes(s, n, size)[:40]))
        for s in rng.sample(range(NSHARDS), min(20, NSHARDS)):
            rel = 'train/shard-%06d.tar' % s
            with open(os.path.join(src, rel), 'rb') as f:
                want = f.read()
            ck.ok(ml.read_all(os.path.join(mnt, rel)) == want, 'scale: %s differs' % rel)
        log('scale: spot checks (2000 members, 20 raw shards) in %.1fs' % (time.monotonic() - t))
        log('scale: daemon RSS %d KiB after mount, %d KiB after indexing everything (peak %s, '
            'anon %s); index_mem_bytes %d (%.1f bytes/member); index_built %d' % (
                rss_mount, rss, mem.get('VmHWM'), mem.get('RssAnon'), st['index_mem_bytes'],
                st['index_mem_bytes'] / max(1, nmem), st['index_built']))
        limit = (2 if san else 1) << 20
        ck.ok(rss < limit, 'scale: daemon RSS %d KiB >= %d KiB' % (rss, limit))
        ck.ok(ml.pid_alive(pid), 'scale: the daemon died')
    # the indexes were saved: a remount loads them instead of reading 2000 shards again
    with ml.Mount(env, src, cache_dir=cache, extra=opts) as m:
        files, dt = find(env, m.mnt, '-type', 'f')
        st = m.stats()
        log('scale: remount: find -type f %d in %.1fs; index_loaded %d, index_built %d' % (
            len(files), dt, st['index_loaded'], st['index_built']))
        ck.eq('scale: remount: find -type f', len(files), NSHARDS + nmem)
        ck.eq('scale: remount: index_built', st['index_built'], 0)
        ck.eq('scale: remount: index_loaded', st['index_loaded'], NSHARDS)
        log('SCALE-SUMMARY shards=%d members=%d rss_kib=%d index_mem_bytes=%d' % (
            NSHARDS, nmem, rss, st['index_mem_bytes']))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    ml.main_wrapper(group_scale, sys.argv[1], 'stress-scale', deadline=400)


if __name__ == '__main__':
    sys.exit(main())
