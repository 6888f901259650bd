#!/usr/bin/python3
"""shardfs mount tests: --plan-memory (the stage, fetch/fetch_stage.c) used as a newcomer would,
through the Python plan API (python/shardfs: plan, clear_plan), against nginx and the fault
proxy on 127.0.0.1. Never a wrong byte, never a wait without bound, the counters exact.

usage: test_plan_memory.py SHARDFS GROUP
The data is as test_stage.py's (2 shards of 6 planned samples of 1,200,000 bytes, 2.5 MB of
unplanned filler between them, sidecar indexes, a plan of the 12 samples shuffled with seed 7),
mounted with its options (--cache-size 1M: every sample is staged when it can be, ETags trusted).
GROUP:
  tiny     --plan-memory 1 and 4K: every sample exact, nothing staged, no read error (1: a
           lookahead of 0, nothing handed over; 4K: a batch a path, each sample read once the
           planner tried its span: the 12 spans counted as not fitting, 12 paths handed to the
           cache. A sample its reader reaches before the planner is never tried: a run two
           tests at a time once counted 11)
  huge     --plan-memory 16G (the most it takes) and 64M: a mount whose stage is more than half
           of this machine's memory warns on stderr, once, naming both sizes (on a machine of
           less than 32 GiB: 16G warns; before warn_big_stage neither did), one within it does
           not; every sample exact with 16G
  rewrite  a shard rewritten in place (every member's data, same size, a new mtime: a new ETag)
           after every span was staged and 2 samples read: with --plan-memory 64M the other 10
           reads are the staged (listed) version's exact bytes; with 0 each is the old or the
           new version's exact bytes or ESTALE, never other bytes; after a refresh every sample
           is the new version's, with either
  clear    the plan cleared (clear_plan) after 3 of its 12 samples were read: the other 9 read
           exact, no read error; the stage ends holding nothing once they were read
  kill     kill -9 of the daemon mid-epoch (2 samples read, all staged), remount on the same
           cache directory, the plan published again: every sample exact
  two      two mounts of the source on one cache directory, each with the stage and its plan,
           read at once by two threads: every sample exact on both, no read error
  cuts     the fault proxy's random faults (503, cut, trunc at 40% of the shards' GETs, seeds
           0-2): every sample exact, no read error
  race     the C link emulator (strong ETags, 30 ms before each answer, 5 MB/s a connection),
           a brace pattern of the 2 shards, --connections 4: right after the plan's 12 spans
           were handed to the stage (one batch: a sample its reader reached first would never
           be staged), 4 threads read each sample in plan order with 6 preads each (its start,
           its last page, a random offset; 1 byte to 1 MiB), so reads land while their
           spans' GETs are in flight (a read is served as soon as its own bytes are in): every
           byte exact, no read error, 12 spans staged, none failed, no fallback (2 seeds; the
           waits are logged, not asserted)
  weak     nginx's mtime-derived ETags without --weak-etag trust and --plan-memory 64M: nothing
           can be staged (the cache's weak validator guards such objects), every sample exact,
           no span staged, and no stage memory ever taken (plan_stage_peak_bytes 0). Failed
           before pfx_span_stage asked whether a span's object can be read into memory: the
           stage allocated each span's buffer, the store refused the read, the buffer was
           freed: peak 497,649 with 0 spans
  failed   every staged GET answered 400 (12 of them, not retried): each piece fails, and the
           reads fall back to the cache (every sample exact, no read error). A failed piece's
           bytes are never served, so its buffer is not kept either: plan_stage_mem_bytes 0 once
           the 12 failed. Failed before the fix: the failed pieces held their buffers
           (plan_stage_mem_bytes 14,406,144, the whole stage) until their paths are read or
           pressure frees them, and pressure never frees a piece of the running plan ahead of
           its position, so a burst of failures leaves the stage full of dead pieces (the
           stage now frees a failed piece's buffer once no read holds it)

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import tarfile  # noqa: E402
import threading  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'python'))
import shardfs as sp  # noqa: E402
from shardfs_test import linkemu  # noqa: E402
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.stagedata import SAMPLE, make_source, read_or_errno  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

STAGE = ['--plan-memory', '64M']
BASE = ['--weak-etag', 'trust', '--cache-size', '1M', '--chunk-size', '1M', '--readahead', '1M',
        '--warm', 'off', '--plan-gap', '1M']
KEYS = ('fills', 'bytes_fetched', 'evictions', 'cache_punches', 'cache_misses',
        'plan_stage_spans', 'plan_stage_bytes', 'plan_stage_reads', 'plan_stage_read_bytes',
        'plan_stage_fallbacks', 'plan_stage_failed', 'plan_stage_dropped', 'plan_stage_full',
        'read_errors', 'plan_stage_mem_bytes')


def paths(plan):
    return ['%s/%s' % x for x in plan]


def publish(env, m, plan):
    """The plan through the Python API, once the shards' directories are listed (their
    sidecar indexes read: no shard GET of the mount's own later)."""
    for s in range(2):
        os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
    info = sp.plan(m.mnt, paths(plan), name='p')
    if info is None or info.paths != len(plan) or info.missing:
        raise RuntimeError('the plan was not taken whole: %r' % (info,))


def classify(m, plan, want, other=None):
    """{'ok' | 'new' | errno name | 'OTHER': count} of reading each sample of plan."""
    out = {}
    for x in plan:
        g = read_or_errno(os.path.join(m.mnt, *x))
        if isinstance(g, int):
            c = errno.errorcode.get(g, str(g))
        elif g == want[x]:
            c = 'ok'
        elif other is not None and g == other.get(x):
            c = 'new'
        else:
            c = 'OTHER'
        out[c] = out.get(c, 0) + 1
    return out


def counters(st):
    return {k: st[k] for k in KEYS}


def source(env):
    src, plan, want = make_source(env, random.Random(7))
    return src, plan, want, SAMPLE + 512


def group_tiny(env, ck):
    src, plan, want, _ = source(env)
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        for mem, full in (('1', 0), ('4K', len(plan))):
            with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache-' + mem),
                          extra=BASE + ['--plan-memory', mem]) as m:
                publish(env, m, plan)
                got = {}
                for i, x in enumerate(plan):
                    if full:
                        # the lookahead (half of 4K) holds less than a path: each batch is
                        # one path, handed over (tried on the stage, counted as not fitting,
                        # then given to the cache) once its reader began the one before; a
                        # path its reader reaches first lies behind the position and is
                        # never tried. Wait for the try of path i, as in mount-stage-small
                        ml.poll(lambda: m.stats()['plan_stage_full'] > i,
                                what='tiny %s: sample %d tried' % (mem, i))
                    for k, v in classify(m, [x], want).items():
                        got[k] = got.get(k, 0) + v
                st = m.stats()
                log('tiny %s: %r %r' % (mem, got, counters(st)))
                ck.eq('tiny %s: every sample exact' % mem, got, {'ok': len(plan)})
                # 1: a lookahead of 0 bytes (half of 1 byte) plans nothing
                ck.eq('tiny %s: spans staged, not fitting, paths handed over, read errors' % mem,
                      (st['plan_stage_spans'], st['plan_stage_full'], st['plan_fetch_paths'],
                       st['read_errors']), (0, full, full, 0))
    finally:
        ng.stop()


def group_huge(env, ck):
    src, plan, want, _ = source(env)
    mem = os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        for size, val, human in (('16G', 16 << 30, '16.00 GiB'), ('64M', 64 << 20, '64.00 MiB')):
            with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache-' + size),
                          extra=BASE + ['--plan-memory', size]) as m:
                publish(env, m, plan)
                got = classify(m, plan, want)
            lines = [ln for ln in m.stderr.splitlines() if '--plan-memory' in ln]
            log('huge %s (memory %d): %r %r' % (size, mem, got, lines))
            ck.eq('huge %s: every sample' % size, got, {'ok': len(plan)})
            if val > mem // 2:
                ck.eq('huge %s: warning lines' % size, len(lines), 1)
                ck.ok(lines and lines[0].startswith(
                    'shardfs: warning: --plan-memory %s is more than half of this machine\'s '
                    'memory (' % human), 'huge %s: the warning is %r' % (size, lines))
            else:
                ck.eq('huge %s: warning lines' % size, lines, [])
    finally:
        ng.stop()


def rewrite_in_place(path):
    """Every member's data of the tar at path changed (one byte in 4096 flipped), headers and
    size kept, the mtime 5 s later; {(shard, member): new bytes}."""
    b = bytearray(open(path, 'rb').read())
    shard = os.path.basename(path)[:-len('.tar')]
    with tarfile.open(path) as tf:
        members = tf.getmembers()
    for ti in members:
        for i in range(ti.offset_data, ti.offset_data + ti.size, 4096):
            b[i] ^= 0x55
    with open(path, 'r+b') as f:
        f.write(b)
    st = os.stat(path)
    os.utime(path, (st.st_atime, st.st_mtime + 5))
    return {(shard, ti.name): bytes(b[ti.offset_data:ti.offset_data + ti.size])
            for ti in members}


def group_rewrite(env, ck):
    src, plan, want, _ = source(env)
    orig = env.path('orig')
    os.makedirs(orig)
    victim = 'shard-000001.tar'
    with open(os.path.join(src, victim), 'rb') as f:
        keep = f.read()
    st0 = os.stat(os.path.join(src, victim))
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        for mem in ('64M', '0'):
            with open(os.path.join(src, victim), 'wb') as f:
                f.write(keep)
            os.utime(os.path.join(src, victim), (st0.st_atime, st0.st_mtime))
            with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache-' + mem),
                          extra=BASE + ['--plan-memory', mem]) as m:
                publish(env, m, plan)
                if mem != '0':  # every span staged before the change (the planner's thread)
                    ml.poll(lambda: m.stats()['plan_stage_spans'] >= len(plan),
                            what='12 spans staged')
                first = classify(m, plan[:2], want)
                new = rewrite_in_place(os.path.join(src, victim))
                rest = classify(m, plan[2:], want, new)
                log('rewrite %s: first %r, rest %r, %r' % (mem, first, rest, counters(m.stats())))
                ck.eq('rewrite %s: the first 2 exact' % mem, first, {'ok': 2})
                ck.eq('rewrite %s: other bytes' % mem, rest.get('OTHER', 0), 0)
                if mem != '0':
                    ck.eq('rewrite %s: the other 10 the staged version' % mem, rest,
                          {'ok': len(plan) - 2})
                else:
                    ck.ok(set(rest) <= {'ok', 'new', 'ESTALE'},
                          'rewrite 0: answers %r' % rest)
                r = env.run([env.shardfs, 'refresh', m.mnt], timeout=120)
                ck.eq('rewrite %s: refresh' % mem, (r.returncode, r.stdout.decode().split(': ')[-1]),
                      (0, '0 new, 0 removed, 1 changed; 4 objects, 2 shards\n'))
                now = dict(want)
                now.update({k: v for k, v in new.items() if k in want})
                ck.eq('rewrite %s: after the refresh' % mem, classify(m, plan, now),
                      {'ok': len(plan)})
    finally:
        ng.stop()


def group_clear(env, ck):
    src, plan, want, _ = source(env)
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                      extra=BASE + STAGE) as m:
            publish(env, m, plan)
            ck.eq('clear: the first 3', classify(m, plan[:3], want), {'ok': 3})
            sp.clear_plan(m.mnt, 'p')
            ck.eq('clear: no plan left', sp.plans(m.mnt), {})
            ck.eq('clear: the other 9', classify(m, plan[3:], want), {'ok': len(plan) - 3})
            st = ml.poll(lambda: (lambda s: s['plan_stage_mem_bytes'] == 0 and s)(m.stats()),
                         what='the stage empty') or m.stats()
            log('clear: %r' % counters(st))
            ck.eq('clear: read errors, stage memory', (st['read_errors'],
                                                       st['plan_stage_mem_bytes']), (0, 0))
    finally:
        ng.stop()


def group_kill(env, ck):
    src, plan, want, _ = source(env)
    ng = web.Nginx(env.path('nginx'), src).start()
    cache = env.path('cache')
    try:
        m = ml.Mount(env, ng.url('json/'), cache_dir=cache, extra=BASE + STAGE)
        m.mount()
        publish(env, m, plan)
        ml.poll(lambda: m.stats()['plan_stage_spans'] >= len(plan), what='12 spans staged')
        ck.eq('kill: the first 2', classify(m, plan[:2], want), {'ok': 2})
        pid = m.stats()['pid']
        env.expected_ends[pid] = signal.SIGKILL
        ml.kill_daemon(env, pid, signal.SIGKILL)  # on purpose: mid-epoch
        ml.poll(lambda: not ml.pid_alive(pid), what='pid %d gone after kill -9' % pid)
        m.umount(quiet=True)
        with ml.Mount(env, ng.url('json/'), mountpoint=m.mnt, cache_dir=cache,
                      extra=BASE + STAGE) as m2:
            publish(env, m2, plan)
            got = classify(m2, plan, want)
            st = m2.stats()
            log('kill: remount %r %r' % (got, counters(st)))
            ck.eq('kill: every sample after the remount', got, {'ok': len(plan)})
            ck.eq('kill: read errors', st['read_errors'], 0)
    finally:
        ng.stop()


def group_two(env, ck):
    src, plan, want, _ = source(env)
    ng = web.Nginx(env.path('nginx'), src).start()
    cache = env.path('cache')
    try:
        with ml.Mount(env, ng.url('json/'), cache_dir=cache, extra=BASE + STAGE) as a, \
                ml.Mount(env, ng.url('json/'), cache_dir=cache, extra=BASE + STAGE) as b:
            res = {}
            for m in (a, b):
                publish(env, m, plan)
            th = [threading.Thread(target=lambda m=m: res.__setitem__(m.mnt, classify(
                m, plan, want))) for m in (a, b)]
            for t in th:
                t.start()
            for t in th:
                t.join(120)
            for tag, m in (('a', a), ('b', b)):
                st = m.stats()
                log('two %s: %r %r' % (tag, res.get(m.mnt), counters(st)))
                ck.eq('two %s: every sample' % tag, res.get(m.mnt), {'ok': len(plan)})
                ck.eq('two %s: read errors' % tag, st['read_errors'], 0)
    finally:
        ng.stop()


def group_cuts(env, ck):
    src, plan, want, _ = source(env)
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        for seed in range(3):
            px = web.FaultProxy(ng.port)
            try:
                with ml.Mount(env, px.url('json/'), cache_dir=env.path('cache-%d' % seed),
                              extra=BASE + STAGE + ['--retry-budget', '5',
                                                       '--stall-timeout', '2']) as m:
                    for s in range(2):
                        os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
                    px.set_random(0.4, seed=seed, modes=('503', 'cut', 'trunc'), match='/shard-')
                    publish(env, m, plan)
                    got = classify(m, plan, want)
                    st = m.stats()
                    log('cuts seed %d: %r faults %r %r' % (seed, got, px.fault_counts,
                                                           counters(st)))
                    ck.eq('cuts seed %d: every sample' % seed, got, {'ok': len(plan)})
                    ck.eq('cuts seed %d: read errors' % seed, st['read_errors'], 0)
                    ck.ok(px.faults > 0, 'cuts seed %d: no fault served' % seed)
            finally:
                px.close()
    finally:
        ng.stop()


def group_race(env, ck):
    src, plan, want, _ = source(env)
    emu = linkemu.Emu(src, 30, 5, env.tmp, 'race', etag='store', shardfs=env.shardfs)
    extra = [x for x in BASE if x not in ('--weak-etag', 'trust')] + STAGE + [
        '--connections', '4']
    try:
        for seed in range(2):
            with ml.Mount(env, emu.url('shard-{000000..000001}.tar'),
                          cache_dir=env.path('cache-%d' % seed), extra=extra) as m:
                for s in range(2):
                    os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
                bad, errs = [], {}

                def reader(k, m=m, bad=bad, errs=errs, seed=seed):
                    rng = random.Random(seed * 100 + k)
                    for x in plan:
                        fd = os.open(os.path.join(m.mnt, *x), os.O_RDONLY)
                        try:
                            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                            for _ in range(6):
                                off = rng.choice([0, len(want[x]) - 4096,
                                                  rng.randrange(len(want[x]))])
                                n = rng.choice([1, 4096, 131072, 1 << 20])
                                try:
                                    if os.pread(fd, n, off) != want[x][off:off + n]:
                                        bad.append((x, off, n))
                                except OSError as e:
                                    errs[e.errno] = errs.get(e.errno, 0) + 1
                        finally:
                            os.close(fd)
                publish(env, m, plan)
                # the 12 spans are one batch (the lookahead, half of 64M, holds them all) of the
                # planner's first pass, counted as they are placed, before their GETs go out
                ml.poll(lambda: m.stats()['plan_stage_spans'] >= len(plan),
                        what='race seed %d: 12 spans handed to the stage' % seed)
                th = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
                for t in th:
                    t.start()
                for t in th:
                    t.join(240)
                st = m.stats()
                log('race seed %d: bad %r errors %r %r waits %d' % (
                    seed, bad[:4], errs, counters(st), st['plan_stage_waits']))
                ck.eq('race seed %d: reads of other bytes, errors' % seed, (len(bad), errs),
                      (0, {}))
                ck.eq('race seed %d: spans, failed, fallbacks, read errors' % seed,
                      (st['plan_stage_spans'], st['plan_stage_failed'],
                       st['plan_stage_fallbacks'], st['read_errors']), (len(plan), 0, 0, 0))
    finally:
        emu.stop()


def group_weak(env, ck):
    src, plan, want, _ = source(env)
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        extra = [x for x in BASE if x not in ('--weak-etag', 'trust')] + STAGE
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'), extra=extra) as m:
            publish(env, m, plan)
            got = classify(m, plan, want)
            st = m.stats()
            log('weak: %r %r' % (got, counters(st)))
            ck.eq('weak: every sample', got, {'ok': len(plan)})
            ck.eq('weak: spans staged, read errors', (st['plan_stage_spans'],
                                                      st['read_errors']), (0, 0))
            ck.eq('weak: stage memory ever taken', st['plan_stage_peak_bytes'], 0)
    finally:
        ng.stop()


def group_failed(env, ck):
    src, plan, want, _ = source(env)
    ng = web.Nginx(env.path('nginx'), src).start()
    px = web.FaultProxy(ng.port)
    try:
        with ml.Mount(env, px.url('json/'), cache_dir=env.path('cache'),
                      extra=BASE + STAGE + ['--retry-budget', '2']) as m:
            for s in range(2):
                os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
            px.set('400', count=len(plan), match='/shard-')
            publish(env, m, plan)
            st = ml.poll(lambda: (lambda s: s['plan_stage_failed'] >= len(plan) and s)(
                m.stats()), what='12 staged GETs failed') or m.stats()
            log('failed: %r, faults %d' % (counters(st), px.faults))
            ck.eq('failed: staged, failed', (st['plan_stage_spans'], st['plan_stage_failed']),
                  (len(plan), len(plan)))
            ck.eq('failed: memory held by failed pieces', st['plan_stage_mem_bytes'], 0)
            got = classify(m, plan, want)
            st = m.stats()
            log('failed: reads %r %r' % (got, counters(st)))
            ck.eq('failed: every sample (from the cache)', got, {'ok': len(plan)})
            ck.eq('failed: read errors, served from the stage', (st['read_errors'],
                                                                 st['plan_stage_reads']), (0, 0))
    finally:
        px.close()
        ng.stop()


GROUPS = {'tiny': group_tiny, 'huge': group_huge, 'rewrite': group_rewrite, 'clear': group_clear,
          'kill': group_kill, 'two': group_two, 'cuts': group_cuts, 'race': group_race, 'weak': group_weak, 'failed': group_failed}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, 'plan-memory-', deadline=280)
