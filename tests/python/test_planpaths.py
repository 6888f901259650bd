#!/usr/bin/python3
"""shardfs.plan() says when the mount did not find the paths it was given (no torch needed).

usage: test_planpaths.py SHARDFS

A local source of 2 GNU tar shards of 5 members each (seeded sizes, SHARDFS_TEST_SEED) mounted
at WORK/mnt, the working directory WORK:
  - the paths as glob.glob('mnt/**') gives them (relative to the working directory, the mount
    point's relative name first): the mount finds none of the 10 (PlanInfo.missing 10), and
    plan() warns once, with "10 of 10", the first path and the mount-relative path it names
    (relative paths are taken from the mount point); before 2026-11-30 it said nothing;
  - the same paths relative to the mount point, and as absolute paths: found, no warning;
  - the 10 found and one that names nothing: one warning, "1 of 11", naming that path, and no
    hint (it names no file from the working directory either);
  - an nginx source stopped under its mount (--retry-budget 1): a member of a shard never
    indexed, a path that names nothing and a shard's raw file: PlanInfo paths 1, missing 1,
    failed 1 (its lookup failed: the shard could not be indexed), and one warning, exact,
    that counts both and says the one could not be looked up (before the failed column of
    .shardfs/plans: missing 2, and plan() parsed no line of the file); since 2026-12-03 that
    text is a PlanLookupError's, not a warning (python-planfailed).
Exact counts; no timing.
"""
import glob
import os
import shutil
import sys
import tarfile
import warnings

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

import shardfs  # noqa: E402  (PYTHONPATH=python, set by tests/python/meson.build)


def make_source(env):
    src = env.path('src')
    os.makedirs(src)
    for s in range(2):
        data = env.path('m')
        with tarfile.open(os.path.join(src, 'shard-%d.tar' % s), 'w',
                          format=tarfile.GNU_FORMAT) as t:
            for k in range(5):
                with open(data, 'wb') as f:
                    f.write(bytes(env.rng.getrandbits(8) for _ in range(env.rng.randrange(
                        100, 5000))))
                t.add(data, arcname='k%d_%d.bin' % (s, k))
    return src


def planned(ck, label, mnt, paths):
    """plan() of paths: (PlanInfo, [warning texts, then a PlanLookupError's text])."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter('always')
        try:
            info, err = shardfs.plan(mnt, paths, name='t'), []
        except shardfs.PlanLookupError as e:  # published, with lookups that failed
            info, err = e.info, [str(e)]
    msgs = [str(w.message) for w in got] + err
    log('%s: %r %r' % (label, info, msgs))
    return info, msgs


def run(env, ck):
    src = make_source(env)
    work = env.path('work')
    os.makedirs(work)
    with ml.Mount(env, src, mountpoint=os.path.join(work, 'mnt')) as m:
        cwd = os.getcwd()
        os.chdir(work)
        try:
            rel = sorted(glob.glob('mnt/shard-*/*.bin'))
            ck.eq('glob: members', len(rel), 10)
            info, msgs = planned(ck, 'cwd-relative', 'mnt', rel)
            ck.eq('cwd-relative: paths, missing', (info.paths, info.missing), (0, 10))
            ck.eq('cwd-relative: warnings', len(msgs), 1)
            if msgs:
                ck.ok('10 of 10 paths name nothing readable' in msgs[0] and
                      repr(rel[0]) in msgs[0] and
                      'taken from the mount point' in msgs[0] and
                      repr(rel[0][len('mnt/'):]) in msgs[0],
                      'cwd-relative: the warning names the count, the first path and the '
                      'mount-relative one: %r' % msgs[0])
            mrel = [p[len('mnt/'):] for p in rel]
            for label, paths in (('mount-relative', mrel),
                                 ('absolute', [os.path.abspath(p) for p in rel])):
                info, msgs = planned(ck, label, 'mnt', paths)
                ck.eq('%s: paths, missing' % label, (info.paths, info.missing), (10, 0))
                ck.eq('%s: warnings' % label, msgs, [])
            info, msgs = planned(ck, 'one missing', m.mnt, mrel + ['nope/x.bin'])
            ck.eq('one missing: paths, missing', (info.paths, info.missing), (10, 1))
            ck.eq('one missing: warnings', len(msgs), 1)
            if msgs:
                ck.ok('1 of 11 paths' in msgs[0] and "'nope/x.bin'" in msgs[0] and
                      'taken from the mount point' not in msgs[0],
                      'one missing: the warning: %r' % msgs[0])
        finally:
            os.chdir(cwd)
    store_down(env, ck)


def store_down(env, ck):
    if not shutil.which('nginx'):
        log('store down: skipped, nginx is not installed')
        return
    src = env.path('src-nginx')
    os.makedirs(src)
    for i in range(3):
        ml.write_file(os.path.join(src, 's%d.tar' % i),
                      ml.tar_bytes([('m%d.bin' % i, bytes([65 + i]) * (7000 + i))]))
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        m = ml.Mount(env, ng.url('json/'), mountpoint=env.path('mnt-nginx'),
                     cache_dir=env.path('cache-nginx'),
                     extra=['--warm', 'off', '--prefetch-shards', '0', '--retry-budget', '1'])
        with m:
            ng.stop()
            info, msgs = planned(ck, 'store down', m.mnt, ['s1/m1.bin', 'nope/x', 's2.tar'])
            ck.eq('store down: paths, missing, failed',
                  info and (info.paths, info.missing, getattr(info, 'failed', None)), (1, 1, 1))
            ck.eq('store down: the PlanLookupError', msgs, [
                "shardfs: plan 't': 2 of 3 paths name nothing readable in %s (the first: "
                "'s1/m1.bin') (the mount's log gives their line numbers); 1 could not be "
                "looked up: their shards could not be read or indexed (see the mount's log)"
                % m.mnt])
    finally:
        ng.stop()


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    ml.main_wrapper(run, sys.argv[1], 'python-planpaths', deadline=120)


if __name__ == '__main__':
    main()
