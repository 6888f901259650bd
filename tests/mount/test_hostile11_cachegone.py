#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass (round 11), the client commands on a mount
whose cache directory was removed under it.

usage: test_hostile11_cachegone.py SHARDFS GROUP
GROUP:
  client  the cache directory removed (rm -rf) under a running mount of a remote source
          (nginx): 'shardfs prefetch' of a shard never read exits 1 and says, after the
          PATH's EIO, that the cache directory was removed and what to do; 'shardfs plan' of
          a member of a shard never indexed exits 1 (its path counted as one whose lookup failed)
          and says the same; a prefetch of what is cached and open exits 0 and says nothing
          of it; before the removal a prefetch of a missing PATH does not name the cache.
          Before (fs/tools at 2c54c5a): "shardfs: prefetch PATH: Input/output error" alone,
          and 'plan' exited 0 with "1 path not in the mount (skipped)" of a path 'ls' shows;
          the one line that said why (the mount's log) was in the removed directory.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import hostile  # noqa: E402
from shardfs_test import web  # noqa: E402

log = ml.log
run = hostile.run_exact  # cmd's exit, stdout and stderr, exactly


def gone_line(cmd, st, mnt):
    return ('shardfs: %s: the cache directory %s was removed under the mount %s: what is not '
            'cached fails with EIO (the mount\'s log went with it): unmount and mount again\n'
            % (cmd, st['cache_dir'], mnt))


def group_client(env, ck):
    src = hostile.make_source(env, 3)
    cache = env.path('cache')
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        m = ml.Mount(env, ng.url('json/'), cache_dir=cache,
                     extra=['--warm', 'off', '--prefetch-shards', '0'])
        with m:
            mnt = m.mnt
            nope = os.path.join(mnt, 'nope.tar')
            # before the removal: a PATH refused says nothing of the cache
            run(env, ck, 'prefetch of a missing PATH (cache in place)',
                [env.shardfs, 'prefetch', mnt, nope], 1, '',
                'shardfs: prefetch %s: no such file or directory in the mount\n' % nope)
            with open(os.path.join(m.mnt, 's0.tar'), 'rb') as f:
                first = f.read()
            with open(os.path.join(src, 's0.tar'), 'rb') as f:
                ck.eq('s0.tar before the removal', first, f.read())
            subprocess.run(['rm', '-rf', cache], check=True)
            fetched = m.stats()['bytes_fetched']
            s1 = os.path.join(mnt, 's1.tar')
            # not the first refused open: the counter is what the command reads
            try:
                ml.read_all(os.path.join(mnt, 's2', 'm2.bin'))
                ck.fail('s2/m2.bin after the removal: no error')
            except OSError as e:
                ck.eq('s2/m2.bin after the removal: errno', e.errno, 5)
            st = m.stats()
            run(env, ck, 'prefetch of a shard never read', [env.shardfs, 'prefetch', mnt, s1], 1,
                '', 'shardfs: prefetch %s: Input/output error\n' % s1
                + gone_line('prefetch', st, mnt))
            plan = env.path('plan.txt')
            with open(plan, 'w') as f:
                f.write('s1/m1.bin\n')
            run(env, ck, 'plan of a member of a shard never indexed',
                [env.shardfs, 'plan', mnt, plan], 1,
                "plan 'default': 0 paths, 0 B; 0 paths not in the mount (skipped); 1 path could "
                "not be looked up (skipped)\n",
                gone_line('plan', st, mnt))
            # what is cached and open still reads, and its prefetch is no failure
            with open(os.path.join(mnt, 's0.tar'), 'rb') as f:
                run(env, ck, 'prefetch of the open shard', [env.shardfs, 'prefetch', mnt,
                                                            os.path.join(mnt, 's0.tar')],
                    0, None, '')
                ck.eq('s0.tar after the removal', f.read(), first)
            ck.eq('nothing fetched after the removal', m.stats()['bytes_fetched'], fetched)
    finally:
        ng.stop()


GROUPS = {'client': (group_client, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
