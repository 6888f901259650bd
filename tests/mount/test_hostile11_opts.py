#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass (round 11), options that only some sources use.

usage: test_hostile11_opts.py SHARDFS GROUP
GROUP:
  unused  --get-batch auto (ais:// only), --no-sign (s3:// and gs:// only) and --direct-fills
          (remote sources only) given to a source that does not use them: the mount goes ahead
          (exit 0, the shard reads exact) and says each on stderr, one line each, exactly; a
          local source (all three said) and an nginx source (--direct-fills is used there:
          two said); the defaults say nothing. Before (fs/core at 2c54c5a): every one mounted
          without a word, so '--get-batch auto' on another store looked like batched reads.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import hostile  # noqa: E402
from shardfs_test import web  # noqa: E402

log = ml.log

GET_BATCH = ('shardfs: warning: --get-batch auto is for ais:// sources: it does nothing for '
             'this one\n')
NO_SIGN = ('shardfs: warning: --no-sign is for s3:// and gs:// sources: it does nothing for '
           'this one\n')
DIRECT = ('shardfs: warning: --direct-fills is for remote sources: a local source\'s shards are '
          'read in place, nothing fills the cache\n')
OPTS = ['--get-batch', 'auto', '--no-sign', '--direct-fills', 'prefetch']


def mounted_says(env, ck, label, source, extra, want):
    m = ml.Mount(env, source, cache_dir=env.path('cache'), extra=['--warm', 'off'] + extra)
    if not hostile.mount_or_fail(ck, label, m):
        return
    try:
        log('%s: stderr %r' % (label, m.stderr))
        ck.eq('%s: stderr' % label, m.stderr, want)
        ck.eq('%s: a member' % label, ml.read_all(os.path.join(m.mnt, 's0', 'm0.bin')),
              b'A' * 70000)
    finally:
        m.umount()


def group_unused(env, ck):
    src = hostile.make_source(env, 1)
    mounted_says(env, ck, 'local, defaults', src, [], '')
    mounted_says(env, ck, 'local, all three', src, OPTS, GET_BATCH + NO_SIGN + DIRECT)
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        mounted_says(env, ck, 'nginx, defaults', ng.url('json/'), [], '')
        mounted_says(env, ck, 'nginx, all three', ng.url('json/'), OPTS, GET_BATCH + NO_SIGN)
    finally:
        ng.stop()


GROUPS = {'unused': (group_unused, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
