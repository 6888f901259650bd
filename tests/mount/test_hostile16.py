#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass over the planned data path (round 16), over
the C link emulator (tests/lib/linkemu.c: strong ETags, 30 ms before each answer, 1 MB/s a
connection), each finding replayed as a test.

usage: test_hostile16.py SHARDFS GROUP
GROUP:
  plan-cut  seeded rounds (SHARDFS_TEST_SEED) of a generated WebDataset (6 shards of 12
            samples, each a .jpg of 100 B to 400 KB, a .cls and a .json, some in
            subdirectories; sidecar indexes beside the shards, named by the brace pattern's
            '{,.idx}'), mounted with --warm off, a 4M cache, 2 connections and --plan-memory
            64M (the stage) or 0 (the cache). A plan of every .jpg shuffled is published
            (Python API): every shard's index comes from its sidecar (index_sidecar 6, no
            shard read whole). After 1 to 5 planned reads (seeded) the emulator is killed
            with -9 while the plan's GETs are in flight, and 1 to 3 shards are rewritten by
            rename (new bytes, the same names and sizes: their sidecars now stale). Every
            other planned sample then reads as the listed version's exact bytes or fails
            with EIO or ESTALE, never other bytes. Remounted on the same cache directory
            over a new emulator on the same files, the plan published again: every sample
            is exact (the new version of the rewritten shards: their stale sidecars
            rejected, their indexes built from the shards), no read error; the plan cleared,
            the stage holds nothing.

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import tarfile  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'python'))
import shardfs as sp  # noqa: E402
from shardfs_test import linkemu  # noqa: E402
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402
from shardfs_test.stagedata import read_or_errno  # noqa: E402

NSHARDS, PER_SHARD = 6, 12
SIZES = (100, 4096, 30000, 150000, 400000)
OPTS = ['--warm', 'off', '--cache-size', '1M', '--connections', '2', '--max-connections', '2',
        '--retry-budget', '3']


def write_shard(path, members):
    """members [(name, bytes)] as a GNU tar at path, made beside it and renamed over it."""
    tmp = path + '.new'
    with tarfile.open(tmp, 'w', format=tarfile.GNU_FORMAT) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = 1700000000
            tf.addfile(ti, io.BytesIO(data))
    os.rename(tmp, path)


def make_source(env, src, rng):
    """The shards and their sidecars in src; (the plan [(shard, member)], {(shard, member):
    bytes}, {shard: [(member, size)]})."""
    os.makedirs(src)
    want, layout = {}, {}
    for s in range(NSHARDS):
        shard = 'ds-%06d' % s
        members = []
        for k in range(PER_SHARD):
            key = '%05d' % (s * 1000 + k)
            if k % 4 == 0:
                key = 'd%d/%s' % (k % 3, key)
            for ext, size in (('jpg', rng.choice(SIZES)), ('cls', 2), ('json', 50)):
                members.append((key + '.' + ext, rng.randbytes(size)))
        write_shard(os.path.join(src, shard + '.tar'), members)
        want.update({(shard, n): d for n, d in members})
        layout[shard] = [(n, len(d)) for n, d in members]
    r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('icache'), src])
    if r.returncode != 0:
        raise RuntimeError('shardfs index --sidecar failed: %r' % r.stderr)
    plan = sorted(x for x in want if x[1].endswith('.jpg'))
    rng.shuffle(plan)
    return plan, want, layout


def classify(mnt, plan, want):
    """{'ok' | errno name | 'OTHER': count} of reading each of plan."""
    out = {}
    for x in plan:
        g = read_or_errno(os.path.join(mnt, *x))
        if isinstance(g, int):
            c = errno.errorcode.get(g, str(g))
        else:
            c = 'ok' if g == want[x] else 'OTHER'
        out[c] = out.get(c, 0) + 1
    return out


def publish(mnt, plan):
    info = sp.plan(mnt, ['%s/%s' % x for x in plan], name='epoch')
    if info is None or info.paths != len(plan) or info.missing:
        raise RuntimeError('the plan was not taken whole: %r' % (info,))


def pattern(emu):
    return emu.url('ds-{000000..%06d}.tar{,.idx}' % (NSHARDS - 1))


def group_plan_cut(env, ck):
    for rnd, mem in enumerate(('64M', '0')):
        rng = random.Random(env.seed * 10 + rnd)
        tag = 'round %d (--plan-memory %s)' % (rnd, mem)
        src = env.path('src-%d' % rnd)
        plan, want, layout = make_source(env, src, rng)
        cache = env.path('cache-%d' % rnd)
        opts = OPTS + ['--plan-memory', mem]
        first = rng.randint(1, 5)
        changed = rng.sample(sorted(layout), rng.randint(1, 3))
        emu = linkemu.Emu(src, 30, 1, env.tmp, 'cut-%d' % rnd, shardfs=env.shardfs,
                          etag='store')
        try:
            with ml.Mount(env, pattern(emu), cache_dir=cache, extra=opts) as m:
                publish(m.mnt, plan)
                st = m.stats()
                ck.eq('%s: indexes from sidecars, built from shards' % tag,
                      (st['index_sidecar'], st['index_built']), (NSHARDS, 0))
                ck.eq('%s: the first %d planned reads' % (tag, first),
                      classify(m.mnt, plan[:first], want), {'ok': first})
                emu.p.kill()  # -9 mid-epoch: the plan's GETs in flight are cut
                emu.p.wait(timeout=10)
                new = dict(want)
                for shard in changed:
                    members = [(n, rng.randbytes(size)) for n, size in layout[shard]]
                    write_shard(os.path.join(src, shard + '.tar'), members)
                    new.update({(shard, n): d for n, d in members})
                got = classify(m.mnt, plan[first:], want)
                st = m.stats()
                log('%s: first %d, changed %r: %r; stage spans %d failed %d fallbacks %d, '
                    'read errors %d' % (tag, first, changed, got, st['plan_stage_spans'],
                                        st['plan_stage_failed'], st['plan_stage_fallbacks'],
                                        st['read_errors']))
                ck.ok(set(got) <= {'ok', 'EIO', 'ESTALE'},
                      '%s: the store killed, each read the listed version or EIO or ESTALE: %r'
                      % (tag, got))
        finally:
            emu.stop()
        emu = linkemu.Emu(src, 30, 1, env.tmp, 'back-%d' % rnd, shardfs=env.shardfs,
                          etag='store')
        try:
            with ml.Mount(env, pattern(emu), cache_dir=cache, extra=opts) as m:
                publish(m.mnt, plan)
                got = classify(m.mnt, plan, new)
                st = m.stats()
                log('%s: remounted: %r; sidecars %d rejected %d built %d' % (
                    tag, got, st['index_sidecar'], st['index_sidecar_rejected'],
                    st['index_built']))
                ck.eq('%s: remounted, every sample exact' % tag, got, {'ok': len(plan)})
                ck.eq('%s: remounted: sidecars used, rejected (stale), indexes built, read '
                      'errors' % tag, (st['index_sidecar'], st['index_sidecar_rejected'],
                                       st['index_built'], st['read_errors']),
                      (NSHARDS - len(changed), len(changed), len(changed), 0))
                sp.clear_plan(m.mnt, 'epoch')
                ck.ok(ml.poll(lambda: m.stats()['plan_stage_mem_bytes'] == 0),
                      '%s: the plan cleared, the stage holds nothing' % tag)
        finally:
            emu.stop()


GROUPS = {'plan-cut': group_plan_cut}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, 'hostile16-', deadline=280)
