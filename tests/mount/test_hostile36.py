"""shardfs mount tests: a hostile user's pass over issue 36's store and scheduler (the cache disk
filling up, a crash during fills), each finding replayed as a seeded test on the C link
emulator (tests/lib/linkemu.c, a fault-free store on 127.0.0.1).

usage: test_hostile36.py SHARDFS GROUP
GROUP:
  fullopen  the cache dir on a 4 MiB tmpfs: shard A read whole (its units cached), then another
            program fills the disk to its last byte; then shard B, never opened before, is
            listed and read whole. A full cache disk degrades, it does not stop
            (docs/faults.md): B's state file (4 KiB, allocated at its first open) finds no room,
            so the open evicts A's units for it and B's bytes come exact (read_errors 0, B's
            members exact, A still exact). Before the mend, the open of B's object failed with
            ENOSPC: `ls` of B's directory and every read of B said "No space left on device".
  crash     kill -9 of the daemon while a reader's fill is half landed (--durable-delay 0,
            --chunk-size 64M, a 1 MB/s link): the remount serves every byte the first mount's
            reader read exact, with no read error and no unit failing its CRC, and fetches
            again at most what was read (plus 1 MiB of rounding and readahead): a crash costs
            fetches, never a wrong byte or more than was there. Which units a kill finds
            recorded depends on when the flusher last passed, a timing this test does not
            assert; the durability bound itself is chunkstore's test_durable (exact, no
            timing).
  gapzero   a planned epoch with --plan-gap 0 (one request per planned path) over a cache a
            quarter of the data, one reader: the plan's lookahead stays within half of
            --cache-size (docs/reading.md), every planned path read exact, nothing staged.
            Before the mend the lookahead took the stage's bound (half of --plan-memory,
            32 MiB) though with --plan-gap 0 nothing goes to the stage: the plan fetched into
            the cache four times what it holds and evicted its own fetches before their reads
            (a 47 MiB epoch over a 16 MiB cache: 17 s and 17 s of cache-miss waits, against
            0.8 s and 1.4 s after; --plan-memory 0 gave the same 0.9 s).
  smalldisk the cache dir on a 6 MiB tmpfs and no --cache-size (20G): the mount says the cache
            keeps at most what the filesystem holds above its reserve (cache_bytes_limit that
            much), and a shuffled planned epoch of 16 MiB, one reader, every path exact,
            receives at most 4 times its bytes. Before the mend the chunks (8M), the readahead
            window and the plans' lookahead were sized from 20G on a disk that holds 5.7 MiB:
            what was fetched ahead evicted itself before it was read (a 47 MiB epoch received
            2.6 GB, 55 times its bytes; this group's 16 MiB: far over 4 times).

Seeded (SHARDFS_TEST_SEED): shard sizes and bytes. Exit: 0 pass, 1 fail, 77 skip (no usable
/dev/fuse, or no tmpfs mount: not root).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import os  # noqa: E402
import tarfile  # noqa: E402
import io  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

def make_shard(rng, path, members, lo, hi):
    """A tar of `members` members of lo..hi random bytes; returns {name: bytes}."""
    ref, buf = {}, io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w', format=tarfile.GNU_FORMAT) as t:
        for m in range(members):
            data = rng.randbytes(rng.randint(lo, hi))
            ti = tarfile.TarInfo('%04d.bin' % m)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
            ref['%04d.bin' % m] = data
    ml.write_file(path, buf.getvalue())
    return ref


def fill_disk(ck, disk):
    fd = os.open(os.path.join(disk, 'filler'), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b'\0' * 4096)
    except OSError as e:
        ck.eq('filler: errno', errno.errorcode.get(e.errno), 'ENOSPC')
    finally:
        os.close(fd)
    st = os.statvfs(disk)
    return st.f_bavail * st.f_frsize


def check_members(ck, label, d, ref):
    for name, want in sorted(ref.items()):
        try:
            with open(os.path.join(d, name), 'rb') as f:
                got = f.read()
        except OSError as e:
            ck.fail('%s: %s: %s' % (label, name, e))
            return
        if got != want:
            ck.fail('%s: %s: %d bytes differ (want %d)' % (label, name, len(got), len(want)))
            return
    ck.ok(True, label)


def planned_epoch(env, shards, hi):
    """The gapzero and smalldisk groups' epoch: `shards` shards s-K.tar in env's src/ of 40
    members of 60000..hi seeded bytes, and a plan file of all their paths, shuffled. Returns
    (src, {path: bytes}, their total bytes, the paths in plan order, the plan file)."""
    src = env.path('src')
    os.makedirs(src)
    ref = {}
    for k in range(shards):
        for n, data in make_shard(env.rng, os.path.join(src, 's-%d.tar' % k), 40, 60000,
                                  hi).items():
            ref['s-%d/%s' % (k, n)] = data
    total = sum(len(v) for v in ref.values())
    paths = sorted(ref)
    env.rng.shuffle(paths)
    pf = env.path('plan.txt')
    with open(pf, 'w') as f:
        f.write(''.join(p + '\n' for p in paths))
    return src, ref, total, paths, pf


def read_planned(ck, mnt, paths, ref):
    """Read each of paths in the mount mnt in order: none may differ from ref."""
    bad = 0
    for p in paths:
        with open(os.path.join(mnt, p), 'rb') as f:
            bad += f.read() != ref[p]
    ck.eq('planned paths read wrong', bad, 0)


def group_fullopen(env, ck):
    from shardfs_test import linkemu
    src = env.path('src')
    os.makedirs(src)
    refs = {k: make_shard(env.rng, os.path.join(src, '%s.tar' % k), 12, 60000, 100000)
            for k in ('a', 'b')}
    raw = {k: open(os.path.join(src, '%s.tar' % k), 'rb').read() for k in refs}
    disk = ml.tmpfs(env.path('tmpfs'), '4m', skip=True)
    emu = linkemu.Emu(src, 1, 200, env.tmp, 'fullopen', shardfs=env.shardfs)
    try:
        logf = env.path('daemon.log')
        opts = ['--warm', 'off', '--prefetch-shards', '0', '--chunk-size', '256K',
                '--weak-etag', 'trust', '--log-file', logf]
        with ml.Mount(env, emu.url(''), cache_dir=os.path.join(disk, 'cache'), extra=opts) as m:
            with open(os.path.join(m.mnt, 'a.tar'), 'rb') as f:
                ck.ok(f.read() == raw['a'], 'a.tar read whole before the disk filled: exact')
            st0 = m.stats()
            free = fill_disk(ck, disk)
            log('disk filled: %d bytes free; a cached: %d bytes fetched' % (free,
                                                                           st0['bytes_fetched']))
            try:
                names = sorted(os.listdir(os.path.join(m.mnt, 'b')))
                ck.eq('full disk: ls b', names, sorted(refs['b']))
            except OSError as e:
                ck.fail('full disk: ls b: %s' % e)
            check_members(ck, 'full disk: b members', os.path.join(m.mnt, 'b'), refs['b'])
            try:
                with open(os.path.join(m.mnt, 'b.tar'), 'rb') as f:
                    got = f.read()
                ck.ok(got == raw['b'], 'full disk: b.tar exact (%d bytes)' % len(got))
            except OSError as e:
                ck.fail('full disk: b.tar: %s' % e)
            check_members(ck, 'full disk: a members', os.path.join(m.mnt, 'a'), refs['a'])
            st = m.stats()
            log('read_errors %d, evictions %d, bypass reads %d' % (
                st['read_errors'], st['evictions'] - st0['evictions'],
                st['cache_bypass_reads'] - st0['cache_bypass_reads']))
            ck.eq('full disk: read_errors', st['read_errors'], 0)
            ck.eq('full disk: op_errors', st['op_errors'], st0['op_errors'])
        text = open(logf, errors='replace').read()
        ck.eq('full disk: "cannot open" log lines', text.count('cannot open'), 0)
    finally:
        emu.stop()
        ml.untmpfs(disk)


def group_crash(env, ck):
    from shardfs_test import linkemu
    src = env.path('src')
    os.makedirs(src)
    make_shard(env.rng, os.path.join(src, 'big.tar'), 24, 900000, 1100000)
    raw = open(os.path.join(src, 'big.tar'), 'rb').read()
    emu = linkemu.Emu(src, 5, 1, env.tmp, 'crash', shardfs=env.shardfs)
    cache = env.path('cache')
    opts = ['--warm', 'off', '--prefetch-shards', '0', '--chunk-size', '64M', '--weak-etag',
            'trust', '--durable-delay', '0']
    try:
        m = ml.Mount(env, emu.url(''), cache_dir=cache, extra=opts)
        m.mount()
        pid = ml.daemons_for(env.shardfs, m.mnt)
        ck.eq('one daemon', len(pid), 1)
        read = 0
        t0 = time.monotonic()
        with open(os.path.join(m.mnt, 'big.tar'), 'rb') as f:
            while time.monotonic() - t0 < 9:
                b = f.read(65536)
                if not b:
                    break
                if b != raw[read:read + len(b)]:
                    ck.fail('first mount: bytes at %d differ' % read)
                    break
                read += len(b)
        ml.kill_daemon(env, pid[0], 9)
        m.umount(quiet=True)
        log('read %d bytes before kill -9' % read)
        ck.ok(read > 0, 'the first mount read some bytes before the kill')
        with ml.Mount(env, emu.url(''), cache_dir=cache, extra=opts) as m2:
            with open(os.path.join(m2.mnt, 'big.tar'), 'rb') as f:
                got = f.read(read)
            ck.ok(got == raw[:read], 'remount: the bytes read before the kill exact')
            st = m2.stats()
            log('remount: %d bytes fetched for the %d read before' % (st['bytes_fetched'], read))
            ck.ok(st['bytes_fetched'] <= read + (1 << 20),
                  'remount: fetched again %d <= %d (read %d before the kill, + 1 MiB)'
                  % (st['bytes_fetched'], read + (1 << 20), read))
            ck.eq('remount: read_errors', st['read_errors'], 0)
            ck.eq('remount: cache_units_corrupt', st['cache_units_corrupt'], 0)
    finally:
        emu.stop()


def group_gapzero(env, ck):
    from shardfs_test import linkemu
    src, ref, total, paths, pf = planned_epoch(env, 6, 100000)
    cache = 6 << 20
    emu = linkemu.Emu(src, 5, 60, env.tmp, 'gapzero', shardfs=env.shardfs)
    try:
        opts = ['--warm', 'off', '--weak-etag', 'trust', '--plan-gap', '0', '--cache-size',
                str(cache)]
        with ml.Mount(env, emu.url(''), cache_dir=env.path('cache'), extra=opts) as m:
            r = env.run([env.shardfs, 'plan', m.mnt, pf])
            ck.eq('plan: exit', r.returncode, 0)
            read_planned(ck, m.mnt, paths, ref)
            st = m.stats()
            log('%d planned bytes: lookahead %d, fetched %d, fills %d, hits %d, miss waits %d ms'
                % (total, st['plan_lookahead_bytes'], st['bytes_fetched'], st['fills'],
                   st['cache_hits'], st['cache_miss_wait_ms']))
            ck.eq('plan_hits', st['plan_hits'], len(paths))
            ck.eq('read_errors', st['read_errors'], 0)
            ck.eq('plan_stage_spans (--plan-gap 0 stages nothing)', st['plan_stage_spans'], 0)
            ck.ok(0 < st['plan_lookahead_bytes'] <= cache // 2,
                  'plan_lookahead_bytes %d within half of --cache-size (%d)'
                  % (st['plan_lookahead_bytes'], cache // 2))
    finally:
        emu.stop()


def group_smalldisk(env, ck):
    from shardfs_test import linkemu
    src, ref, total, paths, pf = planned_epoch(env, 4, 140000)
    disk = ml.tmpfs(env.path('tmpfs'), '6m', skip=True)
    emu = linkemu.Emu(src, 5, 60, env.tmp, 'smalldisk', shardfs=env.shardfs)
    try:
        st = os.statvfs(disk)
        size = st.f_blocks * st.f_frsize
        room = size - min(size // 100 * 5, 1 << 30)
        # the emulator's ETags are nginx's (weak): the plan's bytes go through the cache
        opts = ['--warm', 'off']
        m = ml.Mount(env, emu.url(''), cache_dir=os.path.join(disk, 'cache'), extra=opts)
        m.mount()
        ck.ok('the cache keeps at most' in m.stderr, 'mount says the cache is lowered to the '
              'disk: %r' % m.stderr[:300])
        try:
            st0 = m.stats()
            ck.eq('cache_bytes_limit (the disk above its reserve)', st0['cache_bytes_limit'],
                  room)
            r = env.run([env.shardfs, 'plan', m.mnt, pf])
            ck.eq('plan: exit', r.returncode, 0)
            read_planned(ck, m.mnt, paths, ref)
            st = m.stats()
            got = st['bytes_received'] - st0['bytes_received']
            log('%d planned bytes over a %d-byte disk: received %d (%.1fx), fetched %d, '
                'lookahead %d' % (total, size, got, got / total, st['bytes_fetched'],
                                  st['plan_lookahead_bytes']))
            ck.eq('read_errors', st['read_errors'], 0)
            ck.ok(got <= 4 * total, 'bytes received %d <= 4 x the planned %d' % (got, total))
        finally:
            m.umount()
    finally:
        emu.stop()
        ml.untmpfs(disk)


GROUPS = {'fullopen': group_fullopen, 'crash': group_crash, 'gapzero': group_gapzero,
          'smalldisk': group_smalldisk}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, 'hostile36-')
