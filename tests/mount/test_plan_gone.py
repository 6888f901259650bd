#!/usr/bin/python3
"""shardfs mount test: a planned path whose shard the source removed counts as missing.

usage: test_plan_gone.py SHARDFS GROUP
GROUP:
  removed  a local source of two plain shards and a plain file; a plan of 3 members of
           shard 0, 2 members of shard 1, shard 1's raw .tar, the plain file and one path
           that names nothing (7 paths, 1 missing). Shard 1 removed and `shardfs refresh`
           ("0 new, 1 removed, 0 changed"): the plan's missing is 4 (its 3 paths of shard 1
           count), in .shardfs/plans and plan_missing, paths still 7; shard 1's members and
           raw .tar give ENOENT by name, shard 0's members read exact; the plain file removed
           and looked up (a local source's lookup finds it gone, no refresh): missing 5. main
           before the mend kept missing at 1 (3 of 14 checks failed)

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import tarfile  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.planread import plans  # noqa: E402


def make_source(src, rng):
    """a/shard-000000.tar (k0-k2), a/shard-000001.tar (k3, k4), readme.txt: {path: bytes}."""
    data = {}
    os.makedirs(os.path.join(src, 'a'))
    for shard, keys in (('a/shard-000000', (0, 1, 2)), ('a/shard-000001', (3, 4))):
        with tarfile.open(os.path.join(src, shard + '.tar'), 'w',
                          format=tarfile.GNU_FORMAT) as tf:
            for k in keys:
                b = bytes(rng.randrange(256) for _ in range(rng.randrange(1000, 20000)))
                ti = tarfile.TarInfo('k%d.jpg' % k)
                ti.size = len(b)
                ti.mtime = 1700000000
                tf.addfile(ti, io.BytesIO(b))
                data['%s/k%d.jpg' % (shard, k)] = b
    with open(os.path.join(src, 'readme.txt'), 'wb') as f:
        f.write(b'hello\n' * 100)
    return data


def open_errno(path):
    """None when path opens and reads, else the errno."""
    try:
        with open(path, 'rb') as f:
            f.read()
        return None
    except OSError as e:
        return e.errno


def group_removed(env, ck):
    src = env.path('src')
    data = make_source(src, random.Random(11))
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        mnt = m.mnt
        lines = ['a/shard-000000/k0.jpg', 'a/shard-000000/k1.jpg', 'a/shard-000000/k2.jpg',
                 'a/shard-000001/k3.jpg', 'a/shard-000001/k4.jpg', 'a/shard-000001.tar',
                 'readme.txt', 'nope/x']
        pf = env.path('plan.txt')
        with open(pf, 'w') as f:
            f.write('\n'.join(lines) + '\n')
        r = subprocess.run([env.shardfs, 'plan', mnt, pf, '--name', 'job'],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        ck.eq('plan rc (%s)' % r.stderr.decode().strip(), r.returncode, 0)
        st, pl = m.stats(), plans(mnt)
        ck.eq('published: paths, missing (plans file)', (pl['job']['paths'],
                                                          pl['job']['missing']), (7, 1))
        ck.eq('published: plan_paths, plan_missing', (st['plan_paths'], st['plan_missing']),
              (7, 1))

        os.unlink(os.path.join(src, 'a/shard-000001.tar'))
        r = subprocess.run([env.shardfs, 'refresh', mnt], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        ck.eq('refresh (%s)' % r.stderr.decode().strip(), (r.returncode, r.stdout.decode()),
              (0, 'refreshed %s: 0 new, 1 removed, 0 changed; 2 objects, 1 shard\n' % mnt))
        st, pl = m.stats(), plans(mnt)
        ck.eq('after the refresh: paths, missing (plans file; missing 1 before the mend)',
              (pl['job']['paths'], pl['job']['missing']), (7, 4))
        ck.eq('after the refresh: plan_paths, plan_missing', (st['plan_paths'],
                                                              st['plan_missing']), (7, 4))
        for p in ('a/shard-000001/k3.jpg', 'a/shard-000001/k4.jpg', 'a/shard-000001.tar'):
            ck.eq('%s after the refresh' % p, open_errno(os.path.join(mnt, p)), errno.ENOENT)
        for p in ('a/shard-000000/k0.jpg', 'a/shard-000000/k2.jpg'):
            with open(os.path.join(mnt, p), 'rb') as f:
                ck.ok(f.read() == data[p], '%s exact' % p)

        # a local source's lookup finds a removed file gone (no refresh)
        os.unlink(os.path.join(src, 'readme.txt'))
        ck.eq('readme.txt removed, looked up', open_errno(os.path.join(mnt, 'readme.txt')),
              errno.ENOENT)
        st, pl = m.stats(), plans(mnt)
        ck.eq('after the lookup: missing (plans file), plan_missing',
              (pl['job']['missing'], st['plan_missing']), (5, 5))
        ck.eq('read_errors', st['read_errors'], 0)


GROUPS = {'removed': group_removed}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, 'plan-gone-')
