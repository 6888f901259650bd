#!/usr/bin/python3
"""shardfs mount tests: the connections a reading plan's small ranges may use by default
(--max-connections, fs/core/fs_opt.c).

usage: test_plan_conns.py SHARDFS GROUP
GROUP:
  default  nginx behind a proxy that holds every ranged GET of a shard after its first byte; 4
           shards of 100 members of 60-140 KB, sidecar indexes, --plan-gap 0 (each planned
           member one range of at most 1 MiB), no --connections or --max-connections given:
           after a first plan of 8 members fetched unheld, a plan of 300 members has exactly
           255 GETs held at the server and 255 fills in flight (the default --max-connections,
           256, less the slot the fill rules keep for a reader's miss), then, released, every
           planned member reads back exact. Failed before the default was 256: 127 GETs held.
           A planned cold epoch holds a connection a time to first byte per request; at 128
           its ~3,900 requests needed at least 0.92 s of a 30 ms link (tests/bench/README.md,
           "The stage").

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import os  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import planread  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log  # noqa: E402
from shardfs_test.planread import hold, read, ref, tar_gets  # noqa: E402

SHARDS, PER_SHARD, PLANNED, DEFAULT = 4, 100, 300, 256
# fills of small planned ranges at once: the default less the slot the fill rules keep for a
# reader's miss (fetch/fetch_rules.c, rules_pf_max)
WANT = DEFAULT - 1


def make_source(env, ck):
    """SHARDS shards of PER_SHARD members of 60-140 KB with sidecar indexes: src and [(shard,
    path, off, size)] of the members, shuffled (planread.sidecar_source)."""
    src, members, _ = planread.sidecar_source(env, ck, 37, PER_SHARD, SHARDS, width=3)
    return src, members


def publish(env, ck, m, members):
    planread.publish(ck, m.mnt, 'p', env.path('plan'), [x[1] for x in members], what='plan rc')


def group_default(env, ck):
    src, members = make_source(env, ck)
    ng = web.Nginx(env.path('nginx'), src).start()
    px = web.SlowProxy(ng.port)
    try:
        # GETs counted exactly: no compare request for nginx's ETag; a cache and a lookahead
        # that hold the whole plan (30 MB); gap 0: every planned member a range of its own
        with ml.Mount(env, px.url('json/'), cache_dir=env.path('cache'),
                      extra=['--weak-etag', 'trust', '--cache-size', '256M', '--warm', 'off',
                             '--prefetch-shards', '0', '--plan-lookahead', '64M',
                             '--plan-gap', '0']) as m:
            for s in range(SHARDS):
                os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
            # a first plan, not held, whose fills ended (planread.fetched: not merely handed
            # over), so that none of them is among the held GETs. 8 prefetch fills are less
            # than a round (--connections + 1: 33) since the listing's index misses: readers
            # read, and planned ranges take every slot but two (fetch/fetch_rules.c
            # rules_pf_max): WANT
            warm = members[PLANNED:PLANNED + 8]
            publish(env, ck, m, warm)
            st0 = planread.fetched(m, len(warm), what='first plan fetched')
            hold(px)
            planned = members[:PLANNED]
            publish(env, ck, m, planned)

            def full():
                st = m.stats()
                held = [r for r in tar_gets(px) if r['held']]
                return (len(held) >= WANT and st['fills_inflight'] >= WANT and st) or None
            # the poll's bound is against a hang only (the held GETs and the fills in flight
            # are the state the checks below count; a busy machine takes seconds to reach it)
            st = ml.poll(full) or m.stats()
            gets = tar_gets(px)
            log('default: %d GETs at the server, %d held, fills in flight %d' %
                (len(gets), sum(r['held'] for r in gets), st['fills_inflight']))
            ck.eq('planned ranges: GETs at the server, all held (the default --max-connections)',
                  (len(gets), sum(r['held'] for r in gets)), (WANT, WANT))
            ck.eq('planned ranges: fills in flight', st['fills_inflight'], WANT)
            px.release()
            planread.fetched(m, len(planned), base=st0['plan_fetch_paths'], timeout=120)
            bad = [x[1] for x in planned if read(os.path.join(m.mnt, x[1])) != ref(src, x)]
            ck.eq('planned members: exact bytes', bad, [])
            ck.eq('read_errors', m.stats()['read_errors'], 0)
    finally:
        px.close()
        ng.stop()


GROUPS = {'default': group_default}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, 'planconns-')
