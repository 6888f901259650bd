#!/usr/bin/python3
"""shardfs mount tests: the stage (--plan-memory, fetch/fetch_stage.c): planned bytes the cache
could keep only by evicting are fetched into bounded memory and read from there, never written
to the cache.

usage: test_stage.py SHARDFS GROUP
The data: 2 shards of 6 planned samples of 1,200,000 bytes each, 2.5 MB of unplanned filler
between them (far more than the gap: each sample is a span of its own), sidecar indexes; a plan
of the 12 samples, shuffled (seed 7, STAGE_SEED to replay another); nginx, --cache-size 1M (every
sample is bigger than the cache: the rule stages each), --plan-gap 1M, ETags trusted (the GETs
counted are the stage's).
GROUP:
  epoch   --plan-memory 4M: reading the plan in order (every third sample's last page first)
          gets the exact bytes of every sample; 12
          spans staged (one GET each, 12 x (sample + its tar header) bytes), every read answered
          from the stage, no fill, no eviction, no punch, no byte written to the cache, no miss;
          the stage's peak within --plan-memory (the lookahead, half of it, is less than one
          sample: each batch stages one or two samples whole); the region's two 2 MiB chunks
          faulted in, each once (plan_stage_chunks 2)
  small   --plan-memory 1M, a stage smaller than one span: nothing staged, the 12 spans counted
          as not fitting and fetched through the cache; exact bytes
  weak    nginx's mtime-derived ETags without --weak-etag trust: nothing staged (the cache's weak
          validator guards such objects), exact bytes
  faults  through a fault proxy (--retry-budget 2): a staged GET cut once is resumed (exact
          bytes, nothing failed); the first staged GET answered 400 (not retried): its span
          fails, its reads fall back to the cache (exact bytes, no read error); the
          object rewritten between a cut and the resumed GET (its ETag changes): reads get the
          listed version's bytes or the errno a mount without a stage gives (ESTALE), never
          other bytes
  early   a span of two planned samples (A then B, adjacent: one GET; the gap 2M) through a
          proxy that holds its body after A's bytes and part of B's: a read of A gets A's
          exact bytes while the body is still held (its own bytes are in: the watermark),
          B's once it is released; one GET, nothing failed, no fallback, no fill
  cutearly  the same hold, then the held GET cut and its resume answered 400 (not
          retried): A was served from the stage while held (exact), the span fails, B is
          read the ordinary way (exact: its header check and data fall back to cache fills),
          A again exact, 0 wrong bytes, no read error
  split   A and B adjacent (1.2 MB together) with the gap 1M, --cache-size 512K: a staged span
          is no longer than the gap, so they go as two spans, two GETs (exact bytes, every
          byte from the stage)
  gone    the same two staged, none read (the stage's memory: their two buffers, each its span
          rounded up to its class of whole pages), then the plan cleared: the stage frees both
          (memory 0, 2 dropped); the reads then go the ordinary way (exact)
  disk    'epoch''s plan with the cache dir on an 8 MiB tmpfs and no --cache-size (20G): the disk
          is the limit, so spans are staged once it has no room (root: mounts the tmpfs)
  handover  --plan-memory 15M (a lookahead of 7 samples): the first batch stages 7 spans, and
          the next (2 spans) comes once 2 of them (a quarter of the paths ahead) were read, not
          half-way through the batch; every sample staged once and read from the stage, exact
  overlap one shard of P0, X (560,000 bytes), P2: plan a stages X (its last page read: its span
          is in), then plan b's span from P0 to P2 (X between, carried) is held before its
          first byte: a read of X is answered at once from plan a's span (exact, no wait)
  carried the same with X read into the cache before any plan (--cache-size 1M): the read of X
          goes to the cache at once, not to the held span that carries it (exact, no wait)
  roomlast  one shard of 4 planned samples of 800,000 bytes, each in a 2 MiB stretch of its own
          (a span each, one chunk each), the plan p2 p0 p3 p1, --cache-size 3M, --plan-memory
          8M: the cache's room takes 3 of the 4 spans, and it is given from the batch's end:
          p1, p3, p0 go to the cache (3 fills), p2, the plan's first, is staged; a read of p2 is
          answered from the stage (800,512 bytes with its header check), every sample exact; 4
          GETs once the batch was handed over.
          Failed before (the room given in plan order: p2, p0, p3 to the cache, p1 staged; the
          first paths' fills reach the link behind the batch's staged GETs): 0 bytes of p2 from
          the stage

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import tarfile  # noqa: E402
import threading  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.stagedata import SAMPLE, make_source, read_or_errno  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

ctl = ml.control_errno
WEAK_TRUST = ['--weak-etag', 'trust']
BASE = WEAK_TRUST + ['--cache-size', '1M', '--chunk-size', '1M', '--readahead', '1M',
                     '--warm', 'off', '--plan-gap', '1M']


def stage_buffer(n):
    """The stage's buffer for a span of n bytes (fetch/fetch_stagebuf.c, fetch__stagebuf_size):
    whole pages, the page count's top four bits kept."""
    pages = max(1, (n + 4095) // 4096)
    if pages >= 8:
        shift = pages.bit_length() - 4
        pages = -(-pages >> shift) << shift
    return pages * 4096


def seed():
    s = int(os.environ.get('STAGE_SEED', '7'))
    log('seed %d (STAGE_SEED to replay another)' % s)
    return s


def publish(env, m, plan, name='p', shards=2):
    for s in range(shards):
        os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
    pf = env.path('plan-' + name)
    with open(pf, 'w') as f:
        f.write(''.join('%s/%s\n' % x for x in plan))
    return pf


def logged(ng, m):
    """The stats and nginx's access log once the log holds every request the mount sent
    (store_requests): nginx writes a request's line after its answer went out, so a reader
    may have the bytes, and a test go on, before the line is there."""
    def both():
        st = m.stats()
        lines = ng.requests()
        return len(lines) >= st['store_requests'] and (st, lines)
    return ml.poll(both, what="nginx's log of every request the mount sent")


def delta(a, b, keys):
    return {k: b[k] - a[k] for k in keys}


KEYS = ('fills', 'bytes_fetched', 'evictions', 'cache_punches', 'cache_misses',
        'plan_stage_spans', 'plan_stage_bytes', 'plan_stage_reads', 'plan_stage_read_bytes',
        'plan_stage_fallbacks', 'plan_stage_failed', 'plan_stage_dropped', 'plan_stage_full',
        'plan_stage_nofit', 'read_errors')


def group_epoch(env, ck):
    src, plan, want = make_source(env, random.Random(seed()))
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                      extra=BASE + ['--plan-memory', '4M']) as m:
            pf = publish(env, m, plan)
            st0, lines = logged(ng, m)
            g0 = len(lines)
            ck.eq('plan rc', ctl(m.mnt, 'plan p ' + pf), None)
            for i, x in enumerate(plan):
                # the planner stages on its own thread: a read before its sample is staged
                # would be a miss (a race, not the rule); wait for it (the spans go in plan
                # order, the sample itself the i + 1-th)
                ml.poll(lambda: m.stats()['plan_stage_spans'] - st0['plan_stage_spans'] > i,
                        what='sample %d staged' % i)
                if i % 3 == 0:
                    # its last page first (as the kernel's readahead may send a path's last
                    # request before the middle ones): the span stays until every byte of
                    # the path was read, not once a read reached its end
                    fd = os.open(os.path.join(m.mnt, *x), os.O_RDONLY)
                    try:
                        if os.pread(fd, 4096, SAMPLE - 4096) != want[x][-4096:]:
                            ck.fail('bytes of the last page of %s/%s' % x)
                    finally:
                        os.close(fd)
                if read_or_errno(os.path.join(m.mnt, *x)) != want[x]:
                    ck.fail('bytes of %s/%s' % x)
            st = ml.poll(lambda: (lambda s: s['plan_stage_mem_bytes'] == 0 and s)(m.stats())) \
                or m.stats()
            d = delta(st0, st, KEYS)
            log('epoch: %s; peak %d' % (d, st['plan_stage_peak_bytes']))
            n = len(plan)
            ck.eq('spans staged', d['plan_stage_spans'], n)
            ck.eq('bytes staged: each sample with its tar header', d['plan_stage_bytes'],
                  n * (SAMPLE + 512))
            reqs = logged(ng, m)[1][g0:]
            if not ck.eq('GETs: one a staged span', len(reqs), n):
                log('the requests: %s' % reqs)
            ck.eq('no fill', d['fills'], 0)
            ck.eq('no byte written to the cache', d['bytes_fetched'], 0)
            ck.eq('no eviction', d['evictions'], 0)
            ck.eq('no punch', d['cache_punches'], 0)
            ck.eq('no miss', d['cache_misses'], 0)
            ck.eq('bytes read from the stage: every sample and its header check',
                  d['plan_stage_read_bytes'], n * (SAMPLE + 512))
            for k in ('plan_stage_fallbacks', 'plan_stage_failed', 'plan_stage_dropped',
                      'plan_stage_full', 'plan_stage_nofit', 'read_errors'):
                ck.eq(k, d[k], 0)
            ck.ok(2 * (SAMPLE + 512) <= st['plan_stage_peak_bytes'] <= 4 << 20,
                  'the peak (%d) holds the first batch (two samples) and stays within '
                  '--plan-memory' % st['plan_stage_peak_bytes'])
            ck.eq('every staged span freed once read', st['plan_stage_mem_bytes'], 0)
            # the region of 4M is two 2 MiB chunks, and the peak (two samples' buffers) is
            # over one: both faulted in, each once
            ck.eq('the region\'s chunks faulted in (plan_stage_chunks)',
                  st['plan_stage_chunks'], 2)
    finally:
        ng.stop()


def group_small(env, ck):
    src, plan, want = make_source(env, random.Random(seed()))
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                      extra=BASE + ['--plan-memory', '1M']) as m:
            pf = publish(env, m, plan)
            st0 = m.stats()
            ck.eq('plan rc', ctl(m.mnt, 'plan p ' + pf), None)
            for i, x in enumerate(plan):
                # a sample its reader reaches before the planner is never handed over: wait
                # for the planner's try of it (in plan order, the i + 1-th)
                ml.poll(lambda: m.stats()['plan_stage_full'] - st0['plan_stage_full'] > i,
                        what='sample %d tried' % i)
                if read_or_errno(os.path.join(m.mnt, *x)) != want[x]:
                    ck.fail('bytes of %s/%s' % x)
            d = delta(st0, m.stats(), KEYS)
            log('small: %s' % d)
            ck.eq('nothing staged', d['plan_stage_spans'], 0)
            ck.eq('every span counted as not fitting', d['plan_stage_full'], len(plan))
            ck.eq('none for the region\'s fragmentation (each is over --plan-memory)',
                  d['plan_stage_nofit'], 0)
            ck.eq('no read from the stage', d['plan_stage_reads'], 0)
            ck.eq('no chunk of the stage\'s region faulted in (plan_stage_chunks)',
                  m.stats()['plan_stage_chunks'], 0)
            ck.ok(d['fills'] > 0, 'the spans went through the cache (%d fills)' % d['fills'])
            ck.eq('read_errors', d['read_errors'], 0)
    finally:
        ng.stop()


def group_weak(env, ck):
    src, plan, want = make_source(env, random.Random(seed()))
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        # nginx's ETags are mtime-derived: without --weak-etag trust the cache's weak
        # validator guards the objects, and nothing is staged
        extra = [x for x in BASE if x not in WEAK_TRUST] + ['--plan-memory', '4M']
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'), extra=extra) as m:
            pf = publish(env, m, plan)
            st0 = m.stats()
            ck.eq('plan rc', ctl(m.mnt, 'plan p ' + pf), None)
            for x in plan:
                if read_or_errno(os.path.join(m.mnt, *x)) != want[x]:
                    ck.fail('bytes of %s/%s' % x)
            d = delta(st0, m.stats(), KEYS)
            log('weak: %s' % d)
            ck.eq('nothing staged', (d['plan_stage_spans'], d['plan_stage_reads']), (0, 0))
            ck.ok(d['fills'] > 0, 'the spans went through the cache (%d fills)' % d['fills'])
            ck.eq('read_errors', d['read_errors'], 0)
    finally:
        ng.stop()


def faulted(env, ck, src, plan, want, memory, setup, tag, wait=False):
    """Mount through a fault proxy with --plan-memory memory, setup(px) before publishing;
    read the plan in order (wait: each sample staged before it is read): {(shard, member):
    bytes or errno} and the counters' deltas."""
    ng = web.Nginx(env.path('nginx-' + tag), src).start()
    px = web.FaultProxy(ng.port)
    try:
        with ml.Mount(env, px.url('json/'), cache_dir=env.path('cache-' + tag),
                      extra=BASE + ['--plan-memory', memory, '--retry-budget', '2',
                                    '--connections', '2']) as m:
            pf = publish(env, m, plan, tag)
            st0 = m.stats()
            setup(px)
            ck.eq('plan rc (%s)' % tag, ctl(m.mnt, 'plan p ' + pf), None)
            got = {}
            for i, x in enumerate(plan):
                if wait:  # the sample staged first (the planner's thread: not a race)
                    ml.poll(lambda: m.stats()['plan_stage_spans'] - st0['plan_stage_spans'] > i,
                            what='sample %d staged' % i)
                got[x] = read_or_errno(os.path.join(m.mnt, *x))
            d = delta(st0, m.stats(), KEYS)
            log('%s: %s; proxy faults %d' % (tag, d, px.faults))
            return got, d, px.faults
    finally:
        px.close()
        ng.stop()


EARLY = 600 * 1024  # A and B: multiples of 512, so B's tar header follows A's data
EARLY_BASE = WEAK_TRUST + ['--cache-size', '1M', '--chunk-size', '2M', '--readahead', '1M',
                           '--warm', 'off', '--plan-gap', '2M']


def make_pair(env, rng):
    """One shard: a filler, A, B, a filler (A and B adjacent); sidecar index. Returns the
    source dir, the plan [A, B], {member: bytes} and the offset of A's tar header (the
    span's first byte)."""
    src = env.path('src')
    os.makedirs(src)
    want = {}
    with tarfile.open(os.path.join(src, 'shard-000000.tar'), 'w',
                      format=tarfile.GNU_FORMAT) as tf:
        for name, size in (('a-head.bin', 300000), ('p0.bin', EARLY), ('p1.bin', EARLY),
                           ('z-tail.bin', 300000)):
            data = rng.randbytes(size)
            ti = tarfile.TarInfo(name)
            ti.size = size
            ti.mtime = 1700000000
            tf.addfile(ti, io.BytesIO(data))
            want[name] = data
    with tarfile.open(os.path.join(src, 'shard-000000.tar')) as tf:
        span_off = tf.getmember('p0.bin').offset
    r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('icache'), src])
    if r.returncode != 0:
        raise RuntimeError('shardfs index --sidecar failed')
    return src, [('shard-000000', 'p0.bin'), ('shard-000000', 'p1.bin')], want, span_off


def read_in_thread(path):
    """Read path whole in a thread: (thread, result dict: 'data' once done)."""
    out = {}

    def run():
        out['data'] = read_or_errno(path)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def held_early(env, ck, cut):
    src, plan, want, span_off = make_pair(env, random.Random(seed()))
    a, b = (os.path.join(*x) for x in plan)
    tag = 'cutearly' if cut else 'early'
    ng = web.Nginx(env.path('nginx'), src).start()
    px = web.SlowProxy(ng.port)
    px.cut_held = cut
    if cut:
        # the resume after the cut (from the watermark: the bytes the hold let through)
        # answered 400, which the store does not retry: the span fails
        px.refuse = lambda r: r['range'] is not None and r['range'][0] == span_off + px.hold_bytes
    # the span's GET (the only ranged GET from A's header on) is held after A's header and
    # data, B's header and 4 KiB of B's data
    px.hold_from = span_off
    px.hold_bytes = 512 + EARLY + 512 + 4096
    # a gap (2M, the chunk) that holds A and B in one span
    extra = EARLY_BASE + ['--plan-memory', '4M']
    try:
        with ml.Mount(env, px.url('json/'), cache_dir=env.path('cache'), extra=extra) as m:
            pf = publish(env, m, plan, shards=1)
            st0, g0 = m.stats(), len(px.gets)
            ck.eq('plan rc', ctl(m.mnt, 'plan p ' + pf), None)
            ml.poll(lambda: len(px.held()) == 1, what='the span\'s GET held')
            t, out = read_in_thread(os.path.join(m.mnt, a))
            # bounded only for a failing run: a read that waits for the whole span waits
            # for the release below
            ml.poll(lambda: 'data' in out)
            early = 'data' in out
            ck.ok(early, '%s: the read of A returned while the span\'s body was held' % tag)
            recs = px.held()
            ck.eq('%s: the held GET had not ended when A was read' % tag,
                  [r['done'] for r in recs], [False])
            ck.eq('%s: it was held at A and part of B' % tag, [r['sent'] for r in recs],
                  [px.hold_bytes])
            d = delta(st0, m.stats(), KEYS)
            px.release()
            t.join(120)
            ck.eq('%s: A exact' % tag, out.get('data') == want['p0.bin'], True)
            if early:
                ck.eq('%s: A from the stage' % tag, (d['plan_stage_reads'] > 0,
                      d['plan_stage_read_bytes'], d['plan_stage_fallbacks']),
                      (True, 512 + EARLY, 0))
            got_b = read_or_errno(os.path.join(m.mnt, b))
            ck.eq('%s: B exact' % tag, got_b == want['p1.bin'], True)
            st = ml.poll(lambda: (lambda s: s['plan_stage_mem_bytes'] == 0 and s)(m.stats())) \
                or m.stats()
            d = delta(st0, st, KEYS)
            gets = [r['range'] for r in px.gets[g0:]]
            # after the counts and the GETs: whether the kernel still has A's pages (a page
            # cache dropped meanwhile, as the benches do, sends it to the mount: a fill, its GETs)
            # is not the stage's
            again = read_or_errno(os.path.join(m.mnt, a))
            ck.eq('%s: A again exact' % tag, again == want['p0.bin'], True)
            log('%s: %s; proxy GETs %s' % (tag, d, [(r['range'], r['sent'], r['done'])
                                                     for r in px.gets]))
            ck.eq('%s: one span staged' % tag, d['plan_stage_spans'], 1)
            ck.eq('%s: its bytes' % tag, d['plan_stage_bytes'], 2 * (512 + EARLY))
            ck.eq('%s: read_errors' % tag, d['read_errors'], 0)
            ck.eq('%s: every staged byte freed' % tag, st['plan_stage_mem_bytes'], 0)
            if not cut:
                ck.eq('early: one GET, the span\'s', gets,
                      [(span_off, span_off + 2 * (512 + EARLY) - 1)])
                ck.eq('early: nothing failed, no fallback, no fill',
                      (d['plan_stage_failed'], d['plan_stage_fallbacks'], d['fills']),
                      (0, 0, 0))
                ck.eq('early: read from the stage: both samples and their header checks',
                      d['plan_stage_read_bytes'], 2 * (512 + EARLY))
            else:
                ck.eq('cutearly: the span failed', d['plan_stage_failed'], 1)
                ck.ok(d['plan_stage_fallbacks'] >= 2,
                      'cutearly: B (its header check, its data) read the ordinary way '
                      '(%d fallbacks)'
                      % d['plan_stage_fallbacks'])
                ck.eq('cutearly: only A and its header check from the stage',
                      d['plan_stage_read_bytes'], 512 + EARLY)
                ck.ok(d['fills'] > 0, 'cutearly: the cache filled them (%d fills)' % d['fills'])
    finally:
        px.release()
        px.close()
        ng.stop()


def group_split(env, ck):
    src, plan, want, span_off = make_pair(env, random.Random(seed()))
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        # the gap 1M (the chunk): A and B touch, but together (1.2 MB) they are longer than
        # the gap, which bounds a staged span: two spans, two GETs (a cache of 512K: each
        # alone is more than its room, so each is staged)
        extra = [('512K' if x == '1M' and i > 0 and BASE[i - 1] == '--cache-size' else x)
                 for i, x in enumerate(BASE)]
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                      extra=extra + ['--plan-memory', '4M']) as m:
            pf = publish(env, m, plan, shards=1)
            st0, lines = logged(ng, m)
            g0 = len(lines)
            ck.eq('plan rc', ctl(m.mnt, 'plan p ' + pf), None)
            ml.poll(lambda: m.stats()['plan_stage_spans'] - st0['plan_stage_spans'] >= 2,
                    what='both samples staged')
            for x in plan:
                if read_or_errno(os.path.join(m.mnt, *x)) != want[x[1]]:
                    ck.fail('bytes of %s/%s' % x)
            st = ml.poll(lambda: (lambda s: s['plan_stage_mem_bytes'] == 0 and s)(m.stats())) \
                or m.stats()
            d = delta(st0, st, KEYS)
            log('split: %s' % d)
            ck.eq('split: two spans staged, one a sample', d['plan_stage_spans'], 2)
            ck.eq('split: their bytes', d['plan_stage_bytes'], 2 * (512 + EARLY))
            ck.eq('split: two GETs', len(logged(ng, m)[1]) - g0, 2)
            ck.eq('split: every byte read from the stage', d['plan_stage_read_bytes'],
                  2 * (512 + EARLY))
            ck.eq('split: no fill, fallback, error', (d['fills'], d['plan_stage_fallbacks'],
                  d['read_errors']), (0, 0, 0))
    finally:
        ng.stop()


def group_gone(env, ck):
    src, plan, want, span_off = make_pair(env, random.Random(seed()))
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        extra = [('512K' if x == '1M' and i > 0 and BASE[i - 1] == '--cache-size' else x)
                 for i, x in enumerate(BASE)]
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                      extra=extra + ['--plan-memory', '4M']) as m:
            pf = publish(env, m, plan, shards=1)
            st0 = m.stats()
            ck.eq('plan rc', ctl(m.mnt, 'plan p ' + pf), None)
            st = ml.poll(lambda: (lambda s: s['plan_stage_spans'] - st0['plan_stage_spans'] >= 2
                                  and s['plan_stage_mem_bytes'] == 2 * stage_buffer(512 + EARLY) and s)(
                                      m.stats()), what='both samples staged, their GETs ended')
            ck.eq('gone: both staged (their buffers)', st['plan_stage_mem_bytes'],
                  2 * stage_buffer(512 + EARLY))
            ck.eq('gone: plan-clear rc', ctl(m.mnt, 'plan-clear p'), None)
            # the planner's pass after the clear frees them (bounded only for a failing run)
            st = ml.poll(lambda: (lambda s: s['plan_stage_mem_bytes'] == 0 and s)(m.stats())) \
                or m.stats()
            d = delta(st0, st, KEYS)
            log('gone: %s' % d)
            ck.eq('gone: the stage empty once its plan went', st['plan_stage_mem_bytes'], 0)
            ck.eq('gone: both counted as dropped', d['plan_stage_dropped'], 2)
            for x in plan:
                if read_or_errno(os.path.join(m.mnt, *x)) != want[x[1]]:
                    ck.fail('gone: bytes of %s/%s' % x)
            ck.eq('gone: read_errors, reads from the stage',
                  (m.stats()['read_errors'], m.stats()['plan_stage_reads']), (0, 0))
    finally:
        ng.stop()


def group_disk(env, ck):
    src, plan, want = make_source(env, random.Random(seed()))
    ng = web.Nginx(env.path('nginx'), src).start()
    cache = ml.tmpfs(env.path('cache'), 8 << 20)
    try:
        # no --cache-size (20G): the 8 MiB disk is the limit, and the 14.4 MB plan does not fit
        extra = [x for i, x in enumerate(BASE) if x != '--cache-size' and
                 not (i > 0 and BASE[i - 1] == '--cache-size')]
        with ml.Mount(env, ng.url('json/'), cache_dir=cache,
                      extra=extra + ['--plan-memory', '4M']) as m:
            pf = publish(env, m, plan)
            st0 = m.stats()
            ck.eq('plan rc', ctl(m.mnt, 'plan p ' + pf), None)
            for x in plan:
                if read_or_errno(os.path.join(m.mnt, *x)) != want[x]:
                    ck.fail('disk: bytes of %s/%s' % x)
            d = delta(st0, m.stats(), KEYS)
            log('disk: %s' % d)
            ck.ok(d['plan_stage_spans'] > 0,
                  'disk: spans staged once the disk had no room (%d)' % d['plan_stage_spans'])
            ck.ok(d['bytes_fetched'] + d['plan_stage_bytes'] <= 2 * len(plan) * (SAMPLE + 512),
                  'disk: bytes fetched into the cache and the stage (%d, %d) at most twice the '
                  'plan\'s' % (d['bytes_fetched'], d['plan_stage_bytes']))
            ck.eq('disk: read_errors', d['read_errors'], 0)
    finally:
        ng.stop()
        ml.untmpfs(cache)


def group_early(env, ck):
    held_early(env, ck, False)


def group_cutearly(env, ck):
    held_early(env, ck, True)


def group_faults(env, ck):
    src, plan, want = make_source(env, random.Random(seed()))
    first = [x for x in plan]

    # a staged GET cut once: resumed from the same version
    got, d, faults = faulted(env, ck, src, plan, want, '4M',
                             lambda px: px.set('cut', count=1, match='/shard-'), 'cut', True)
    ck.eq('cut: one fault served', faults, 1)
    ck.eq('cut: every sample exact', [x for x in plan if got[x] != want[x]], [])
    ck.eq('cut: spans staged', d['plan_stage_spans'], len(plan))
    ck.eq('cut: nothing failed', (d['plan_stage_failed'], d['plan_stage_fallbacks']), (0, 0))

    # the first staged GET answered 400 (an answer, not retried): its span fails, its reads
    # fall back to the cache, whose fill the store then answers
    got, d, faults = faulted(env, ck, src, plan, want, '4M',
                             lambda px: px.set('400', count=1, match='/shard-'), '400', True)
    ck.eq('400: one fault served', faults, 1)
    ck.eq('400: every sample exact', [x for x in plan if got[x] != want[x]], [])
    ck.eq('400: one staged span failed', d['plan_stage_failed'], 1)
    ck.ok(d['plan_stage_fallbacks'] >= 1,
          '400: its reads fell back (%d)' % d['plan_stage_fallbacks'])
    ck.eq('400: read_errors', d['read_errors'], 0)

    # the object rewritten between a cut and the resumed GET: its ETag changes
    victim = first[0]
    path = os.path.join(src, victim[0] + '.tar')
    orig = open(path, 'rb').read()
    st = os.stat(path)

    def rewrite(method, p):
        with open(path, 'r+b') as f:
            f.write(bytes(b ^ 0xff for b in orig[:4096]))
        os.utime(path, (st.st_atime + 100, st.st_mtime + 100))

    def restore():
        with open(path, 'wb') as f:
            f.write(orig)
        os.utime(path, (st.st_atime, st.st_mtime))

    res = {}
    for memory in ('4M', '0'):
        restore()
        res[memory] = faulted(
            env, ck, src, plan, want, memory,
            lambda px: px.set('cut', count=1, match=victim[0], on_fault=rewrite),
            'etag-' + memory.lower())
    restore()
    got, d, faults = res['4M']
    base, _, _ = res['0']
    ck.eq('etag: one cut served', faults, 1)
    for x in plan:
        if got[x] != want[x] and not isinstance(got[x], int):
            ck.fail('etag: %s/%s read other bytes' % x)
    # which of the shard's spans the cut hits is the order their GETs go out in: a span that
    # ended before the rewrite holds the listed version's bytes, as a cache fill that ended
    # before it would; the errors are those the mount without the stage gives
    ck.eq('etag: the errors as without the stage',
          sorted({v for v in got.values() if isinstance(v, int)}),
          sorted({v for v in base.values() if isinstance(v, int)}))
    ck.ok(errno.ESTALE in got.values(), 'etag: a read got ESTALE')
    ck.ok(d['plan_stage_failed'] >= 1, 'etag: the staged span failed (%d)'
          % d['plan_stage_failed'])


def group_handover(env, ck):
    src, plan, want = make_source(env, random.Random(seed()))
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        # --plan-memory 15M: the lookahead is half of it, 7.5M: 7 samples of 1.2M (their
        # starts below 7.5M), each a span of its own, staged (each more than the cache)
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                      extra=BASE + ['--plan-memory', '15M']) as m:
            pf = publish(env, m, plan)
            st0 = m.stats()
            ck.eq('plan rc', ctl(m.mnt, 'plan p ' + pf), None)
            spans = lambda: m.stats()['plan_stage_spans'] - st0['plan_stage_spans']  # noqa: E731
            ml.poll(lambda: spans() >= 7, what='the first batch staged')
            ck.eq('handover: the first batch, 7 spans', spans(), 7)
            for x in plan[:2]:
                if read_or_errno(os.path.join(m.mnt, *x)) != want[x]:
                    ck.fail('bytes of %s/%s' % x)
            # a quarter of the 7 paths ahead read (2 of them): the next batch is due, the
            # samples whose starts lie within 7.5M of the third (2); half-way through the
            # batch (4 read) it came 2 samples later, with a third of the lookahead ahead
            ml.poll(lambda: spans() >= 9, what='the next batch staged after 2 of 7 read')
            ck.eq('handover: the next batch, 2 spans, with 5 paths still ahead', spans(), 9)
            for i, x in enumerate(plan[2:], 2):
                ml.poll(lambda: spans() > i, what='sample %d staged' % i)
                if read_or_errno(os.path.join(m.mnt, *x)) != want[x]:
                    ck.fail('bytes of %s/%s' % x)
            st = ml.poll(lambda: (lambda s: s['plan_stage_mem_bytes'] == 0 and s)(m.stats())) \
                or m.stats()
            d = delta(st0, st, KEYS)
            log('handover: %s' % d)
            ck.eq('handover: every sample staged once', d['plan_stage_spans'], len(plan))
            ck.eq('handover: every byte from the stage', d['plan_stage_read_bytes'],
                  len(plan) * (SAMPLE + 512))
            ck.eq('handover: no fill, fallback, drop, error',
                  (d['fills'], d['plan_stage_fallbacks'], d['plan_stage_dropped'],
                   d['read_errors']), (0, 0, 0, 0))
    finally:
        ng.stop()


OVER = 560000  # X: more than the cache's room of 512K, its gap within a quarter of P0 + P2


def make_over(env, rng):
    """One shard: a filler, P0 (SAMPLE), X (OVER), P2 (SAMPLE), a filler; sidecar index.
    Returns the source dir, {member: bytes} and the offset of P0's tar header."""
    src = env.path('src')
    os.makedirs(src)
    want = {}
    with tarfile.open(os.path.join(src, 'shard-000000.tar'), 'w',
                      format=tarfile.GNU_FORMAT) as tf:
        for name, size in (('a-head.bin', 300000), ('p0.bin', SAMPLE), ('x.bin', OVER),
                           ('p2.bin', SAMPLE), ('z-tail.bin', 300000)):
            data = rng.randbytes(size)
            ti = tarfile.TarInfo(name)
            ti.size = size
            ti.mtime = 1700000000
            tf.addfile(ti, io.BytesIO(data))
            want[name] = data
    with tarfile.open(os.path.join(src, 'shard-000000.tar')) as tf:
        p0_off = tf.getmember('p0.bin').offset
    r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('icache'), src])
    if r.returncode != 0:
        raise RuntimeError('shardfs index --sidecar failed')
    return src, want, p0_off


def overlap(env, ck, tag):
    """X's bytes are had (tag 'overlap': a span of plan a, staged and in; 'carried': the
    cache, from a read before any plan) when plan b's span of P0 and P2, which carries X
    between them, is staged and held before its first byte: a read of X is answered at
    once, from what has its bytes, not from the held span."""
    src, want, p0_off = make_over(env, random.Random(seed()))
    x = os.path.join('shard-000000', 'x.bin')
    ng = web.Nginx(env.path('nginx'), src).start()
    px = web.SlowProxy(ng.port)
    cache = '512K' if tag == 'overlap' else '1M'
    extra = WEAK_TRUST + ['--cache-size', cache, '--chunk-size', '4M', '--readahead', '1M',
                          '--warm', 'off', '--plan-gap', '4M', '--plan-memory', '16M']
    try:
        with ml.Mount(env, px.url('json/'), cache_dir=env.path('cache'), extra=extra) as m:
            os.listdir(os.path.join(m.mnt, 'shard-000000'))
            st0 = m.stats()
            if tag == 'overlap':
                pa = env.path('plan-a')
                ml.write_file(pa, b'shard-000000/x.bin\n')
                ck.eq('plan a rc', ctl(m.mnt, 'plan a ' + pa), None)
                ml.poll(lambda: m.stats()['plan_stage_spans'] - st0['plan_stage_spans'] == 1,
                        what='X staged')
                # X's last page read first: its span is in (its end is X's), and stays
                # (X not read whole)
                fd = os.open(os.path.join(m.mnt, x), os.O_RDONLY)
                try:
                    ck.eq('overlap: X\'s last page', os.pread(fd, 4096, OVER - 4096),
                          want['x.bin'][-4096:])
                    # the kernel's copy dropped: the read below goes to the mount
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
            else:
                fd = os.open(os.path.join(m.mnt, x), os.O_RDONLY)
                try:
                    ck.eq('carried: X read into the cache', os.pread(fd, OVER + 1, 0),
                          want['x.bin'])
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
            # plan b's span (P0's header to P2's end, X between) held before its first byte
            px.hold_from = p0_off
            px.hold_bytes = 0
            pb = env.path('plan-b')
            ml.write_file(pb, b'shard-000000/p0.bin\nshard-000000/p2.bin\n')
            st1 = m.stats()
            ck.eq('plan b rc', ctl(m.mnt, 'plan b ' + pb), None)
            ml.poll(lambda: len(px.held()) == 1, what='plan b\'s span held')
            ck.eq('%s: plan b\'s span staged, one GET from P0\'s header to P2\'s end' % tag,
                  ([r['range'] for r in px.held()],
                   m.stats()['plan_stage_spans'] - st1['plan_stage_spans']),
                  ([(p0_off, p0_off + 3 * 512 + 2 * SAMPLE + 128 + OVER + 128 - 1)], 1))
            t, out = read_in_thread(os.path.join(m.mnt, x))
            # bounded only for a failing run: a read that waits for the held span waits for
            # the release below
            ml.poll(lambda: 'data' in out)
            ck.ok('data' in out, '%s: X read while plan b\'s span was held' % tag)
            d = delta(st1, m.stats(), KEYS + ('plan_stage_waits', 'read_bytes', 'cache_hits'))
            px.release()
            t.join(120)
            ck.eq('%s: X exact' % tag, out.get('data') == want['x.bin'], True)
            ck.eq('%s: no read waited for the held span, none missed' % tag,
                  (d['plan_stage_waits'], d['cache_misses'], d['read_errors']), (0, 0, 0))
            log('%s: %s' % (tag, d))
            if tag == 'overlap':
                ck.eq('overlap: X from the stage', (d['plan_stage_read_bytes'],
                      d['plan_stage_fallbacks'], d['fills']), (OVER, 0, 0))
            else:
                ck.eq('carried: X read from the mount, from the cache: nothing from the '
                      'stage, no fill', (d['read_bytes'], d['plan_stage_reads'], d['fills']),
                      (OVER, 0, 0))
                ck.ok(d['cache_hits'] > 0, 'carried: cache hits (%d)' % d['cache_hits'])
            for name in ('p0.bin', 'p2.bin'):
                if read_or_errno(os.path.join(m.mnt, 'shard-000000', name)) != want[name]:
                    ck.fail('%s: bytes of %s' % (tag, name))
    finally:
        px.release()
        px.close()
        ng.stop()


def group_overlap(env, ck):
    overlap(env, ck, 'overlap')


def group_carried(env, ck):
    overlap(env, ck, 'carried')


ROOM_SAMPLE, ROOM_STRETCH = 800000, 2 << 20


def make_room(env, rng):
    """One shard: p0..p3 of ROOM_SAMPLE bytes, p_k's header at k x ROOM_STRETCH (a chunk of
    its own at --chunk-size 1M), filler to the next; sidecar index. Returns the source dir and
    {member: bytes}."""
    src = env.path('src')
    os.makedirs(src)
    want = {}
    with tarfile.open(os.path.join(src, 'shard-000000.tar'), 'w',
                      format=tarfile.GNU_FORMAT) as tf:
        for k in range(4):
            data = rng.randbytes(ROOM_SAMPLE)
            ti = tarfile.TarInfo('p%d.bin' % k)
            ti.size = ROOM_SAMPLE
            ti.mtime = 1700000000
            tf.addfile(ti, io.BytesIO(data))
            want['p%d.bin' % k] = data
            at = k * ROOM_STRETCH + 512 + -(-ROOM_SAMPLE // 512) * 512  # the filler's header
            ti = tarfile.TarInfo('u%d.bin' % k)
            ti.size = (k + 1) * ROOM_STRETCH - at - 512
            ti.mtime = 1700000000
            tf.addfile(ti, io.BytesIO(bytes(ti.size)))
    with tarfile.open(os.path.join(src, 'shard-000000.tar')) as tf:
        offs = [tf.getmember('p%d.bin' % k).offset for k in range(4)]
    assert offs == [k * ROOM_STRETCH for k in range(4)], offs
    r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('icache'), src])
    if r.returncode != 0:
        raise RuntimeError('shardfs index --sidecar failed')
    return src, want


def group_roomlast(env, ck):
    src, want = make_room(env, random.Random(seed()))
    plan = [('shard-000000', 'p%d.bin' % k) for k in (2, 0, 3, 1)]
    span = ROOM_SAMPLE + 512
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        # --cache-size 3M: room for 3 spans of 800,512 bytes (13 units of 64K each), not 4;
        # --plan-memory 8M: a lookahead of 4M, the 4 samples in the first batch
        extra = [('3M' if x == '1M' and i > 0 and BASE[i - 1] == '--cache-size' else x)
                 for i, x in enumerate(BASE)]
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                      extra=extra + ['--plan-memory', '8M']) as m:
            pf = publish(env, m, plan, shards=1)
            st0, lines = logged(ng, m)
            g0 = len(lines)
            log('roomlast: the cache holds %d bytes before the plan' % st0['cache_bytes_used'])
            ck.eq('plan rc', ctl(m.mnt, 'plan p ' + pf), None)
            st = ml.poll(lambda: (lambda s: s['fills'] - st0['fills'] >= 3 and
                                  s['plan_stage_spans'] - st0['plan_stage_spans'] >= 1 and
                                  s)(m.stats()), what='the batch fetched') or m.stats()
            d = delta(st0, st, KEYS)
            log('roomlast, handed over: %s' % d)
            ck.eq('roomlast: one span staged, its bytes', (d['plan_stage_spans'],
                  d['plan_stage_bytes']), (1, span))
            ck.eq('roomlast: three fills', d['fills'], 3)
            lines = logged(ng, m)[1]
            if not ck.eq('roomlast: 4 GETs, one a span', len(lines) - g0, 4):
                log('the requests: %s' % lines[g0:])
            if read_or_errno(os.path.join(m.mnt, *plan[0])) != want[plan[0][1]]:
                ck.fail('bytes of %s/%s' % plan[0])
            d = delta(st0, m.stats(), KEYS)
            ck.eq('roomlast: the plan\'s first path read from the stage (its header check too)',
                  d['plan_stage_read_bytes'], span)
            for x in plan[1:]:
                if read_or_errno(os.path.join(m.mnt, *x)) != want[x[1]]:
                    ck.fail('bytes of %s/%s' % x)
            d = delta(st0, m.stats(), KEYS)
            log('roomlast: %s' % d)
            ck.eq('roomlast: only the staged path read from the stage',
                  d['plan_stage_read_bytes'], span)
            ck.eq('roomlast: no fallback, error', (d['plan_stage_fallbacks'], d['read_errors']),
                  (0, 0))
    finally:
        ng.stop()


GROUPS = {'epoch': group_epoch, 'small': group_small, 'faults': group_faults,
          'weak': group_weak, 'early': group_early, 'cutearly': group_cutearly,
          'split': group_split, 'gone': group_gone, 'disk': group_disk,
          'handover': group_handover, 'overlap': group_overlap, 'carried': group_carried,
          'roomlast': group_roomlast}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, 'stage-')
