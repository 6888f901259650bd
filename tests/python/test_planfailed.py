#!/usr/bin/python3
"""python/shardfs raises where 'shardfs plan' exits 1: a plan published with paths whose
lookup failed (no torch needed).

usage: test_planfailed.py SHARDFS

A local source of a plain shard (6 seeded members) and a .tar.gz the mount refuses whole
(--max-decoded-size 4M: EFBIG at every lookup of its members: .shardfs/plans' failed), mounted.
ROUNDS seeded rounds (SHARDFS_TEST_SEED) of plans that mix members of the plain shard, paths
that name nothing and members of the refused shard, shuffled (round 0 holds a refused member,
round 1 none, round 2 only missing paths besides the found ones: every rule at any seed). In
each round, the same paths
  - through 'shardfs plan' (a plan file): its exit status;
  - through shardfs.plan(): PlanLookupError (an OSError, errno EIO, its text exact, its info
    the PlanInfo as .shardfs/plans shows it, kept through pickle) exactly when the CLI exits 1,
    i.e. when a refused member was in it; otherwise the PlanInfo and one warning exactly when
    paths named nothing (the CLI's exit 0), none else;
  - through a PlanSampler (strict=False): the items yielded unchanged, one warning with the
    same text when paths were skipped, last_plan the PlanInfo;
  - through a PlanSampler with strict=True: PlanLookupError exactly when the CLI exits 1,
    last_plan the PlanInfo all the same, and with only missing paths the warning.
Before (python/shardfs at 163d92e): plan() and strict samplers only warned for failed lookups,
while 'shardfs plan' exited 1 (the rounds with a refused member fail). Exact counts; no timing.
"""
import gzip
import os
import pickle
import random
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402
from shardfs_test.checks import caught  # noqa: E402

import shardfs  # noqa: E402  (PYTHONPATH=python, set by tests/python/meson.build)

ROUNDS = 8
# the class under test (a stand-in on a package without it, so each check counts)
PLE = getattr(shardfs, 'PlanLookupError', type('NoPlanLookupError', (Exception,), {}))


def want_text(mnt, name, lines, nfound, gone, bad):
    """The words of plan()'s warning or PlanLookupError for a plan of lines."""
    first = next(ln for ln in lines if ln in gone or ln in bad)
    failed = ('; %d could not be looked up: their shards could not be read or indexed (see '
              'the mount\'s log)' % len(bad)) if bad else ''
    return ('shardfs: plan %r: %d of %d paths name nothing readable in %s (the first: %r) '
            '(the mount\'s log gives their line numbers)%s' % (
                name, len(gone) + len(bad), nfound + len(gone) + len(bad), mnt, first, failed))


def run(env, ck):
    rng = random.Random(env.seed)
    src = env.path('src')
    os.makedirs(src)
    ok = [('a%d.bin' % i, rng.randbytes(rng.randrange(1, 64 << 10))) for i in range(6)]
    ml.write_file(os.path.join(src, 'ok.tar'), ml.tar_bytes(ok, 'gnu'))
    # random bytes: 6 MiB decoded whatever gzip does, past --max-decoded-size 4M
    bad = [('b%d.bin' % i, rng.randbytes(2 << 20)) for i in range(3)]
    ml.write_file(os.path.join(src, 'bad.tar.gz'),
                  gzip.compress(ml.tar_bytes(bad, 'gnu'), compresslevel=1, mtime=0))
    m = ml.Mount(env, src, cache_dir=env.path('cache'),
                 extra=['--warm', 'off', '--prefetch-shards', '0', '--max-decoded-size', '4M'])
    with m:
        for r in range(ROUNDS):
            nbad = 1 + rng.randrange(3) if r == 0 else 0 if r in (1, 2) else rng.randrange(3)
            good = rng.sample(ok, 1 + rng.randrange(len(ok)))
            ngone = 1 + rng.randrange(2) if r == 2 else rng.randrange(3)
            gone = ['nope/x%d' % i if i % 2 else 'ok/z%d.bin' % i for i in range(ngone)]
            badl = ['bad/' + n for n, _ in rng.sample(bad, nbad)]
            lines = ['ok/' + n for n, _ in good] + gone + badl
            rng.shuffle(lines)
            label = 'round %d (%d found, %d missing, %d refused)' % (r, len(good), len(gone),
                                                                   nbad)
            want = (len(good), len(gone), nbad)
            text = want_text(m.mnt, 'r%d' % r, lines, len(good), gone, badl) \
                if gone or badl else None
            # the CLI
            pf = env.path('plan-%d.txt' % r)
            with open(pf, 'w') as f:
                f.write(''.join(ln + '\n' for ln in lines))
            cli = env.run([env.shardfs, 'plan', '--name', 'r%d' % r, m.mnt, pf], timeout=60)
            log('%s: shardfs plan rc=%r %r %r' % (label, cli.returncode, cli.stdout,
                                                  cli.stderr))
            ck.eq('%s: shardfs plan exit' % label, cli.returncode, 1 if nbad else 0)
            # plan()
            res, exc, said = caught(lambda: shardfs.plan(m.mnt, lines, name='r%d' % r))
            log('%s: plan() -> %r %r %r' % (label, res, exc, said))
            row = shardfs.plans(m.mnt).get('r%d' % r)
            ck.eq('%s: .shardfs/plans paths, missing, failed' % label,
                  row and (row.paths, row.missing, row.failed), want)
            ck.eq('%s: plan() raises exactly when shardfs plan exits 1' % label,
                  isinstance(exc, PLE), cli.returncode == 1)
            if nbad:
                ok_exc = isinstance(exc, PLE)
                ck.ok(ok_exc and isinstance(exc, OSError) and exc.errno == 5,
                      '%s: plan(): not an OSError EIO: %r' % (label, exc))
                ck.eq('%s: plan(): the error' % label, str(exc), text)
                ck.eq('%s: plan(): the error\'s info' % label,
                      ok_exc and exc.info, row)
                back = pickle.loads(pickle.dumps(exc)) if ok_exc else None
                ck.eq('%s: plan(): the error pickled' % label,
                      back and (type(back), str(back), back.errno, back.info),
                      (PLE, text, 5, row))
                ck.eq('%s: plan(): no warning besides the error' % label, said, [])
            else:
                ck.eq('%s: plan(): no error' % label, exc, None)
                ck.eq('%s: plan(): the PlanInfo' % label, res, row)
                ck.eq('%s: plan(): the warnings' % label, said, [text] if text else [])
            # the samplers (any iterable of indices: no torch needed)
            for strict in (False, True):
                tag = '%s: PlanSampler(strict=%s)' % (label, strict)
                ps = shardfs.PlanSampler(list(range(len(lines))), lines, mountpoint=m.mnt,
                                         name='r%d' % r, strict=strict)
                res, exc, said = caught(lambda: list(iter(ps)))
                log('%s -> %r %r %r' % (tag, res, exc, said))
                row = shardfs.plans(m.mnt).get('r%d' % r)
                ck.eq('%s: last_plan' % tag, ps.last_plan, row)
                ck.eq('%s: last_plan paths, missing, failed' % tag,
                      row and (row.paths, row.missing, row.failed), want)
                if strict and nbad:
                    ck.ok(isinstance(exc, PLE) and str(exc) == text,
                          '%s: not the PlanLookupError: %r' % (tag, exc))
                    ck.eq('%s: warnings' % tag, said, [])
                else:
                    ck.eq('%s: error' % tag, exc, None)
                    ck.eq('%s: items' % tag, res, list(range(len(lines))))
                    ck.eq('%s: warnings' % tag, said, [text] if text else [])


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    ml.main_wrapper(run, sys.argv[1], 'python-planfailed', deadline=120)


if __name__ == '__main__':
    main()
