#!/usr/bin/python3
"""python/shardfs given wrong arguments a newcomer gives: refused at once, naming what to give,
nothing published and nothing read.

usage: test_pyargs.py SHARDFS

A local source of a shard of seeded members (SHARDFS_TEST_SEED) mounted. For each of ROUNDS
seeded single paths (a member's mount-relative path, absolute or not, as str, bytes or a
bytearray; names of one character make a str's characters real paths of the mount):
  - shardfs.plan(mnt, PATH): TypeError, exact; no plan of that name in .shardfs/plans (before
    python/shardfs at 163d92e: a plan of one path per character was published, with a
    warning of the paths it missed);
  - shardfs.plan_fnv(PATH): TypeError, exact (before: the fnv of the characters);
  - shardfs.dataset_paths(PATH): ValueError, exact; PlanSampler(sampler, PATH) warns once
    "no plans: " with it (strict=True: that ValueError).
And with torch: plan_dataloader() of a DataLoader over an IterableDataset (bounded: 1000 paths
of the mount, counting the items drawn) warns once, exactly, draws no item and leaves the
loader as it was (before: the whole stream was drawn to map it to paths, an endless one
never ended); strict=True: ValueError; plan_dataloader(a list): TypeError, exact (before:
AttributeError 'batch_sampler'). Exact counts; no timing.
"""
import os
import random
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402
from shardfs_test.checks import caught  # noqa: E402

import shardfs  # noqa: E402  (PYTHONPATH=python, set by tests/python/meson.build)

ROUNDS = 8


def same_exc(ck, label, exc, cls, text):
    ck.ok(type(exc) is cls and str(exc) == text,
          '%s: want %s(%r), got %r' % (label, cls.__name__, text, exc))


def run(env, ck):
    rng = random.Random(env.seed)
    src = env.path('src')
    os.makedirs(src)
    # one-character member names at the shard's top: a str's characters name real paths
    names = ['s'] + [chr(c) for c in rng.sample(range(ord('a'), ord('z') + 1), 8)]
    ml.write_file(os.path.join(src, 'd.tar'), ml.tar_bytes(
        [(n, rng.randbytes(rng.randrange(1, 2000))) for n in names]))
    with ml.Mount(env, src, extra=['--warm', 'off']) as m:
        os.chdir(os.path.join(m.mnt, 'd'))  # relative one-letter paths name members from here
        for r in range(ROUNDS):
            n = rng.choice(names)
            path = rng.choice(['d/' + n, os.path.join(m.mnt, 'd', n), n * 3])
            kind = rng.choice([str, bytes, bytearray])
            arg = path if kind is str else kind(os.fsencode(path))
            label = 'round %d (%r)' % (r, arg)
            _, exc, said = caught(lambda: shardfs.plan(m.mnt, arg, name='a%d' % r))
            log('%s: plan -> %r %r' % (label, exc, said))
            same_exc(ck, '%s: plan()' % label, exc, TypeError,
                     'plan: paths is one path (%r), not a sequence of paths: give [path]' % (
                         arg,))
            ck.eq('%s: plan(): nothing published' % label,
                  'a%d' % r in shardfs.plans(m.mnt), False)
            _, exc, _ = caught(lambda: shardfs.plan_fnv(arg))
            same_exc(ck, '%s: plan_fnv()' % label, exc, TypeError,
                     'plan_fnv: paths is one path (%r), not a sequence of paths: give '
                     '[path]' % (arg,))
            text = ('the dataset is one path (%r), not a dataset or a sequence of paths: give '
                    '[path]' % (arg,))
            _, exc, _ = caught(lambda: shardfs.dataset_paths(arg, m.mnt))
            same_exc(ck, '%s: dataset_paths()' % label, exc, ValueError, text)
            ps, exc, said = caught(lambda: shardfs.PlanSampler(range(3), arg))
            ck.eq('%s: PlanSampler: the warnings' % label, (exc, said),
                  (None, ['shardfs: no plans: ' + text]))
            _, exc, _ = caught(lambda: shardfs.PlanSampler(range(3), arg, strict=True))
            same_exc(ck, '%s: PlanSampler(strict=True)' % label, exc, ValueError, text)
        os.chdir('/')
        loaders(env, ck, m, names)


def loaders(env, ck, m, names):
    try:
        import torch.utils.data as tud
    except ImportError:
        log('plan_dataloader: skipped, no torch')
        return
    drawn = []

    class Stream(tud.IterableDataset):
        def __iter__(self):
            for i in range(1000):
                drawn.append(i)
                yield os.path.join(m.mnt, 'd', names[i % len(names)])

    dl = tud.DataLoader(Stream(), batch_size=4)
    text = ('an IterableDataset (Stream) has no indices to map to paths: plans need a '
            'map-style dataset')
    ps, exc, said = caught(lambda: shardfs.plan_dataloader(dl))
    log('IterableDataset: %r %r, %d drawn' % (exc, said, len(drawn)))
    ck.eq('IterableDataset: the warnings', (exc, said), (None, ['shardfs: no plans: ' + text]))
    ck.eq('IterableDataset: items drawn', len(drawn), 0)
    ck.eq('IterableDataset: the loader left as it was',
          (type(dl) is tud.DataLoader, isinstance(dl.batch_sampler.sampler, shardfs.PlanSampler)),
          (True, False))
    _, exc, _ = caught(lambda: shardfs.plan_dataloader(dl, strict=True))
    same_exc(ck, 'IterableDataset, strict=True', exc, ValueError, text)
    ck.eq('IterableDataset, strict=True: items drawn', len(drawn), 0)
    _, exc, _ = caught(lambda: shardfs.plan_dataloader(names))
    same_exc(ck, 'plan_dataloader(a list)', exc, TypeError,
             'plan_dataloader needs a torch DataLoader, not list (wrap the dataset in a '
             'DataLoader, or give PlanSampler a sampler)')


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    ml.main_wrapper(run, sys.argv[1], 'python-args', deadline=120)


if __name__ == '__main__':
    main()
