#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass (round 11), 'shardfs plan' on a mount whose
shards cannot be indexed.

usage: test_hostile11_plan.py SHARDFS GROUP
GROUP:
  storedown  a remote source (nginx) stopped under a running mount (--retry-budget 1): a plan
             of a member of a shard never indexed, a missing path and a shard's raw file
             (which needs no index) publishes the raw file and counts the other two apart:
             1 not in the mount (.shardfs/plans' missing, plan_missing), 1 whose lookup
             failed (failed, plan_failed), exact, in the CLI's line too; it exits 1 and says
             that shards could not be indexed meanwhile (index_errors, exact) and that the
             skipped paths may lie in them; the mount's log says which path was not found and
             which could not be looked up (EIO). With the store up, a plan of a missing path
             alone exits 0, says nothing more and counts it missing, none failed.
             Before (fs/tools at 2c54c5a): exit 0 and only "2 paths not in the mount
             (skipped)" of a path 'ls' shows; the log said both were "not found". Before the
             split (c2d2565): .shardfs/plans had no failed column and counted both missing.
  refused    lookups that fail while index_errors does not rise: a local source of a plain
             shard and a .tar.gz the mount refuses whole (--max-decoded-size 4M: EFBIG, kept
             for every later lookup and counted in index_errors once, at its first build). A
             first plan of one of its members exits 1 and names the rise (index_errors +1);
             then seeded rounds (SHARDFS_TEST_SEED) of plans that mix members of the plain
             shard, paths that name nothing and members of the refused shard, shuffled: each
             prints exactly its paths, bytes, missing and failed, .shardfs/plans says the same,
             and it exits 1 with one plain line ("N paths could not be looked up ...") exactly
             when a member of the refused shard was in it, else 0 with nothing on stderr;
             index_errors stays 1 throughout. Before (fs/tools at fcefc61): the rounds with a
             refused member exited 0 saying nothing on stderr.
"""
import gzip
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import hostile  # noqa: E402
from shardfs_test import planread  # noqa: E402
from shardfs_test import web  # noqa: E402

log = ml.log


def plan(env, ck, label, mnt, lines, rc, out, err):
    p = env.path('plan-%s.txt' % label.replace(' ', '-'))
    with open(p, 'w') as f:
        f.write(''.join(ln + '\n' for ln in lines))
    hostile.run_exact(env, ck, label, [env.shardfs, 'plan', mnt, p], rc, out, err)


def group_storedown(env, ck):
    src = hostile.make_source(env, 3)
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        m = ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                     extra=['--warm', 'off', '--prefetch-shards', '0', '--retry-budget', '1'])
        with m:
            plan(env, ck, 'store up, a missing path', m.mnt, ['nope/x'], 0,
                 "plan 'default': 0 paths, 0 B; 1 path not in the mount (skipped)\n", '')
            ck.eq('store up: .shardfs/plans missing, failed',
                  tuple(planread.plans(m.mnt).get('default', {}).get(k)
                        for k in ('missing', 'failed')), (1, 0))
            ck.eq('store up: index_errors', m.stats()['index_errors'], 0)
            ng.stop()
            plan(env, ck, 'store down', m.mnt, ['s1/m1.bin', 'nope/x', 's2.tar'], 1,
                 "plan 'default': 1 path, 70.00 KiB; 1 path not in the mount (skipped); "
                 "1 path could not be looked up (skipped)\n",
                 'shardfs plan: shards could not be indexed while the plan was published '
                 '(index_errors +2: see the mount\'s log): the paths skipped may lie in them, '
                 'not be missing from the mount\n')
            ck.eq('store down: index_errors', m.stats()['index_errors'], 2)
            # .shardfs/plans and the counters tell the two apart too: 'nope/x' names nothing
            # (missing), 's1/m1.bin' could not be looked up (failed)
            row = planread.plans(m.mnt).get('default', {})
            ck.eq('store down: .shardfs/plans paths, missing, failed',
                  tuple(row.get(k) for k in ('paths', 'missing', 'failed')), (1, 1, 1))
            st = m.stats()
            ck.eq('store down: plan_paths, plan_missing, plan_failed',
                  (st['plan_paths'], st['plan_missing'], st.get('plan_failed')), (1, 1, 1))
            # the mount's log tells the two apart (fs_plan.c lookup_failed)
            text = ml.logs_under(env.path('cache'))
            said = [ln.split('] ', 1)[-1] for ln in text.splitlines()
                    if "plan 'default': " in ln and 'skipped' in ln]
            ck.eq('store down: the log', said[-2:], [
                "warning: plan 'default': 1 path not found in the mount was skipped (line 2 "
                "of the plan file)",
                "warning: plan 'default': 1 path could not be looked up and was skipped: its "
                "shard could not be read or indexed (Input/output error; see above)"])
            ck.eq('s1/ is listed', sorted(os.listdir(m.mnt)), ['s0', 's0.tar', 's1', 's1.tar',
                                                              's2', 's2.tar'])
    finally:
        ng.stop()


def failed_line(n):
    """The line of a plan whose n failed lookups no counter explains (fs_client.c)."""
    return ('shardfs plan: %d %s could not be looked up: %s could not be read or indexed '
            '(see the mount\'s log); the plan was published without %s\n' % (
                n, 'path' if n == 1 else 'paths', 'its shard' if n == 1 else 'their shards',
                'it' if n == 1 else 'them'))


def summary(paths, nbytes, missing, failed):
    """shardfs plan's line on stdout (fs_client.c plan_say)."""
    out = "plan 'default': %d %s, %s; %d %s not in the mount (skipped)" % (
        paths, 'path' if paths == 1 else 'paths', hostile.human(nbytes), missing,
        'path' if missing == 1 else 'paths')
    if failed:
        out += '; %d %s could not be looked up (skipped)' % (
            failed, 'path' if failed == 1 else 'paths')
    return out + '\n'


ROUNDS = 8


def group_refused(env, ck):
    rng = random.Random(env.seed)
    src = env.path('src')
    os.makedirs(src)
    ok = [('a%d.bin' % i, rng.randbytes(rng.randrange(1, 64 << 10))) for i in range(6)]
    with open(os.path.join(src, 'ok.tar'), 'wb') as f:
        f.write(ml.tar_bytes(ok, 'gnu'))
    # random bytes: 6 MiB decoded whatever gzip does, past --max-decoded-size 4M
    bad = [('b%d.bin' % i, rng.randbytes(2 << 20)) for i in range(3)]
    with open(os.path.join(src, 'bad.tar.gz'), 'wb') as f:
        f.write(gzip.compress(ml.tar_bytes(bad, 'gnu'), compresslevel=1, mtime=0))
    m = ml.Mount(env, src, cache_dir=env.path('cache'),
                 extra=['--warm', 'off', '--prefetch-shards', '0', '--max-decoded-size', '4M'])
    with m:
        ck.eq('before: index_errors', m.stats()['index_errors'], 0)
        plan(env, ck, 'first refusal', m.mnt, ['bad/b0.bin'], 1, summary(0, 0, 0, 1),
             'shardfs plan: shards could not be indexed while the plan was published '
             '(index_errors +1: see the mount\'s log): the paths skipped may lie in them, '
             'not be missing from the mount\n')
        ck.eq('first refusal: index_errors', m.stats()['index_errors'], 1)
        for r in range(ROUNDS):
            # round 0 holds a refused member, round 1 none: both rules checked at any seed
            nbad = 1 + rng.randrange(3) if r == 0 else 0 if r == 1 else rng.randrange(3)
            good = rng.sample(ok, rng.randrange(len(ok) + 1))
            gone = ['nope/x%d' % i if i % 2 else 'ok/z%d.bin' % i
                    for i in range(rng.randrange(3))]
            lines = ['ok/' + n for n, _ in good] + gone + \
                ['bad/' + n for n, _ in rng.sample(bad, nbad)]
            rng.shuffle(lines)
            label = 'round %d (%d found, %d missing, %d refused)' % (r, len(good), len(gone),
                                                                   nbad)
            plan(env, ck, label, m.mnt, lines, 1 if nbad else 0,
                 summary(len(good), sum(len(d) for _, d in good), len(gone), nbad),
                 failed_line(nbad) if nbad else '')
            row = planread.plans(m.mnt).get('default', {})
            ck.eq('%s: .shardfs/plans paths, missing, failed' % label,
                  tuple(row.get(k) for k in ('paths', 'missing', 'failed')),
                  (len(good), len(gone), nbad))
        ck.eq('after the rounds: index_errors', m.stats()['index_errors'], 1)


GROUPS = {'storedown': (group_storedown, 120), 'refused': (group_refused, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
