#!/usr/bin/python3
"""shardfs mount tests: a stage (--plan-memory, on by default) that cannot stage says so. Its
reads into memory need an ETag that pins the bytes: nginx's are made of the mtime and size, so
without --weak-etag trust the stage refuses every span of such an object (the cache's weak
validator guards them). The mount says so once in its log, at the first span the stage would
have taken (fetch/fetch_planner.c, pfx_span_stage; the line is fs_plan_fetch.c's), and counts
those spans in plan_stage_weak.

usage: test_stage_weak.py SHARDFS GROUP
The data is test_stage.py's (shardfs_test.stagedata: 2 shards of 6 planned samples of
1,200,000 bytes, sidecar indexes, the plan of the 12 samples shuffled with seed 7), from nginx,
--plan-memory 64M, --plan-gap 1M, --log-file; each sample is read once the planner handed it
over (waited for, in plan order: a sample read first is never planned).
GROUP:
  log    no --weak-etag trust, --cache-size 1G (nothing evicts: each sample one span of its
         own, one range handed over): every sample exact, none staged, plan_stage_weak 12 (every
         range handed over), exactly 1 log line, naming the first planned sample's shard and
         --weak-etag trust. Failed before the line and the counter: 0 lines, no such counter
  small  the same with --cache-size 1M (the lookahead cut to the cache's: a sample may go in
         several ranges): plan_stage_weak equal to the ranges handed over, 12 or more; still
         exactly 1 line
  trust  --cache-size 1M with --weak-etag trust: every span staged (12), plan_stage_weak 0, no
         line

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import os  # noqa: E402
import random  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log  # noqa: E402
from shardfs_test.stagedata import make_source, read_or_errno  # noqa: E402

BASE = ['--chunk-size', '1M', '--readahead', '1M', '--warm', 'off', '--plan-gap', '1M',
        '--plan-memory', '64M']
SAID = 'plan: --plan-memory stages nothing of '


def run(env, ck, tag, extra, wait_key):
    """Mount nginx's view of the data with BASE + extra, publish the plan, read each sample
    once the planner handed it over (wait_key's counter past its index): the counters' deltas
    and the log lines that say the stage refused weak ETags."""
    src, plan, want = make_source(env, random.Random(7))
    logf = env.path('daemon-%s.log' % tag)
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache-' + tag),
                      extra=BASE + extra + ['--log-file', logf]) as m:
            for s in range(2):
                os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
            pf = env.path('plan-' + tag)
            with open(pf, 'w') as f:
                f.write(''.join('%s/%s\n' % x for x in plan))
            st0 = m.stats()
            ck.eq('%s: plan rc' % tag, ml.control_errno(m.mnt, 'plan p ' + pf), None)
            for i, x in enumerate(plan):
                ml.poll(lambda: m.stats()[wait_key] - st0[wait_key] > i,
                        what='%s: sample %d handed over' % (tag, i))
                if read_or_errno(os.path.join(m.mnt, *x)) != want[x]:
                    ck.fail('%s: bytes of %s/%s' % ((tag,) + x))
            st = m.stats()
        with open(logf, errors='replace') as f:
            lines = [ln.rstrip('\n') for ln in f if SAID in ln]
        d = {k: st[k] - st0[k] for k in ('plan_stage_weak', 'plan_stage_spans',
                                        'plan_fetch_paths', 'plan_fetch_ranges', 'read_errors')}
        log('%s: %s; lines %r' % (tag, d, lines))
        return plan, d, lines
    finally:
        ng.stop()


def group_log(env, ck):
    plan, d, lines = run(env, ck, 'log', ['--cache-size', '1G'], 'plan_fetch_paths')
    ck.eq('log: spans refused for the weak ETag, ranges handed over, staged, read errors',
          (d['plan_stage_weak'], d['plan_fetch_ranges'], d['plan_stage_spans'],
           d['read_errors']), (12, 12, 0, 0))
    said(ck, 'log', plan, lines)


def said(ck, tag, plan, lines):
    ck.eq('%s: lines that say so' % tag, len(lines), 1)
    first = '%s.tar' % plan[0][0]
    ck.ok(lines and ("%s'%s' " % (SAID, first)) in lines[0] and '--weak-etag trust' in lines[0],
          '%s: the line names %s and --weak-etag trust: %r' % (tag, first, lines))


def group_small(env, ck):
    plan, d, lines = run(env, ck, 'small', ['--cache-size', '1M'], 'plan_fetch_paths')
    ck.ok(d['plan_stage_weak'] == d['plan_fetch_ranges'] >= 12,
          'small: spans refused (%d) are the ranges handed over (%d), 12 or more'
          % (d['plan_stage_weak'], d['plan_fetch_ranges']))
    ck.eq('small: staged, read errors', (d['plan_stage_spans'], d['read_errors']), (0, 0))
    said(ck, 'small', plan, lines)


def group_trust(env, ck):
    _, d, lines = run(env, ck, 'trust', ['--cache-size', '1M', '--weak-etag', 'trust'],
                      'plan_stage_spans')
    ck.eq('trust: spans staged, refused, read errors',
          (d['plan_stage_spans'], d['plan_stage_weak'], d['read_errors']), (12, 0, 0))
    ck.eq('trust: lines', lines, [])


GROUPS = {'log': (group_log, 240), 'small': (group_small, 240), 'trust': (group_trust, 240)}

if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
