"""Mount tests of AIStore's GetBatch used by the mount (--get-batch auto, fs_plan_fetch.c and
cachetier_batch.c) against the AIS stand-in (tests/lib/shardfs_test/s3servers.py) in front of
s3rver.

The source: 3 shards of 18 members (20-40 KB) with sidecar indexes in the bucket; a plan of
the 10 middle members of each (30 paths, shuffled: the members at a shard's ends are left out,
whose units the sidecar's spot checks read), 1 MB in all: one window, one GetBatch request
(cachetier_batch_fill splits only windows of 2 MiB or more). Each case on a fresh mount and
cache directory (--warm off: nothing but the plan fetches ahead).

  epoch    publishing the plan makes exactly one GetBatch request (one 307 at the proxy), whose
           items are exactly the runs of the plan's 64 KiB units in plan order (a model), and
           exactly two HEADs per object (each has several items: the version rule sends one
           after an object's first item and one after its last, however the items arrive; the
           mount's plan_batch_heads the same, none shared: the first request of a window sends
           its own; each HEAD through the proxy's 307 to the target, as AIStore's S3 HEAD goes,
           and answered there); the units fetched are exactly the
           planned ones; reading the 30 paths in plan order sends no object GET, misses nothing
           and returns the shards' exact bytes
  windows  a lookahead of 256K: several windows (3 or more), those after the first while the
           reader reads (requests not awaited), each path read once handed over: no object GET,
           every byte fetched by GetBatch, exact bytes; the stand-in's GetBatch answers and items are the mount's
           counts; one or two HEADs per object of each request, each counted by the mount
  slots    --connections 3 (one GetBatch request at a time): plan a's first window answered,
           the stand-in then holds GetBatch answers; a's second window takes the one slot and
           is held; plan b (the other paths) waits for the slot (plan_batch_slot_waits), its
           units unclaimed meanwhile, so a read of a b path that shares no unit with a returns
           its exact bytes by an object GET while the hold lasts (it would wait for the held
           request if b's units had been claimed before the slot); once released, every path
           of both plans reads exact bytes
  refused  the stand-in answers 404 to /v1/ml/moss (an AIStore without GetBatch): the mount
           says so once (plan_batch_refused), fetches the plan with ranged GETs, exact bytes
  sick     GetBatch's endpoint answers 500 while object GETs and HEADs work (--retry-budget
           1): the window's request spends its budget and fails alone, every item counted
           failed, the store never marked down (no "store down", no fast fails), plan a's paths
           exact by ranged GETs; the endpoint well again, plan b (other shards) is one GetBatch
           request with the model's items and bytes, read with no object GET
  cut      the answer is cut in the middle of shard 1's first item: that item's units stay
           empty with no error (plan_batch_failed_items 1), the rest are asked for again (2
           GetBatch requests); a later read of every path returns exact bytes (the empty
           units fetched on demand)
  version  shard 2 is replaced in the bucket after the mount listed it (new members, other
           sizes, a larger object: the batch's ranges all answer, with the new version's
           bytes): the HEAD after the answer finds the other ETag, its units are dropped
           (plan_batch_stale_objects 1; bytes kept: shards 0 and 1's units); a read of the raw
           object's planned range under its old size gives ESTALE; reading shard 2's planned
           paths then gives ESTALE (or,
           after a refresh, the new version's own member), never the new version's bytes
           under the old index; shards 0 and 1 exact
  stage    --cache-size 64K (less than any path: the stage takes every span) and --chunk-size
           16K (each path a span of its own): the window is one GetBatch request of the 30
           paths (each with its tar header) into the stage's memory, 1 HEAD per shard, each
           through the proxy's 307 (the
           staged windows' version rule: one HEAD per object of the window, sent once all its
           items there arrived), exact staged bytes; no fill, no byte written to
           the cache, no eviction, no punch, no miss, no object GET; every path read from the
           stage with exact bytes, every staged span freed once read
  stageroom 'stage''s options with --cache-size 192K (the cache has room for some of the
           window's spans): the room goes to the window's last spans (fetch_planner.c
           pfx_dest, as a ranged window's), so the first ones are staged: the model's staged
           spans and bytes, the plan's first path read from the stage (1 staged read, no
           miss; before 2026-12-03 the room went from the window's front: a batch fill's),
           every path exact, no fallback or failed span
  stagever 'stage''s mount, shard 1 replaced after the listing: exactly 1 HEAD per shard of
           the window, the one after shard 1's items says another ETag, its 10 staged spans
           fail (1 stale object), never served; shards 0 and 2 exact from the stage; shard
           1's paths ESTALE or the new version's own members; the old version put back
           (stagever and stagerun are one case, case_stalestage, but for when the shard is
           replaced)
  stagerun 'stage''s mount, the window's GetBatch answer held at the target while shard 1 is
           replaced (an object changed under a running window: the answer carries the new
           version's bytes at the old ranges): exactly 1 HEAD per shard of the window, 1 stale
           object, shard 1's 10 staged spans failed, never served (ESTALE or the new
           version's own members); shards 0 and 2 exact from the stage; the old version put
           back
  stagecut 'stage''s mount, the answer cut in the middle of shard 1's first item: 2 GetBatch
           answers (the rest asked again), 1 failed item, its staged span failed (never
           served, its path read the ordinary way), every path exact, no read error
  stagehead 'stage''s mount, the HEAD of the shard whose items of the window settle first
           held at the stand-in: the other shards' HEADs still go (3 at the stand-in, the
           held one counted) and their 20 paths are read from the stage with exact bytes
           while it is held (each object's HEAD submitted on its own, no thread waiting for
           it: before 2026-12-02, the window thread sent one HEAD round at a time and every
           other shard waited for the held one); released, the held shard's paths exact from
           the stage; 3 HEADs, 1 thread (the window's: its request and HEADs are submitted;
           5 while the request and each HEAD had one), no object GET, no miss, no fallback
  stageopen 'stage''s mount, the window's one GetBatch answer paused at the stand-in in the
           middle of its last item (moss_pause: its first half sent), of shard S: every item
           of every shard has begun, so all 3 HEADs reach the stand-in while it is paused
           (each object's HEAD goes once its items of the window began: the target opened
           their version before their first byte came; before, S's waited for its last item
           to arrive whole), every path but the paused one (S's others included: each item
           is given once it arrived and its HEAD is back; before 2026-12-04 once all of its
           object's had) is read from the stage with exact bytes while it lasts; released:
           S's last path exact from the stage; 3 HEADs in all (stand-in,
           mount), 1 thread, 1 request, no stale object, no object GET, miss, fallback or
           failed span
  stagefollow 'stage''s mount, the proxy's 307 of the HEAD of the shard whose items of the
           window settle first held (redirect_hold): its items all begin while its HEAD's
           first hop is held, so its HEAD is asked for before that hop's answer came
           (backend_head_follow_submit keeps the ask; the I/O thread sends the target's HEAD
           at the 307); meanwhile 2 HEADs at the target and the other shards' paths exact from
           the stage; released, the held shard's paths exact; 3 HEADs, 3 redirects, 1 thread
  stageahead 'stage''s mount, the window's one GetBatch answer held at the target before its
           first byte (moss_hold): each shard's HEAD's first hop (the proxy's 307) has gone
           while it is held, its second (the target's HEAD, whose answer the version rule
           reads) has not: 3 redirects, 0 HEADs at the target; released: 3 HEADs at the target,
           still 3 redirects (one a HEAD: the kept redirect followed, not a second HEAD at
           the proxy), 1 request, 1 GetBatch redirect, 1 thread (plan_batch_threads: the
           window's; its request and HEADs are submitted), every path exact from the stage,
           no stale object, no object GET (backend_head_ahead: the HEAD's proxy hop beside
           the request's, so an item waits for the target's round trip only)
  fillahead 'epoch''s mount (the window a batch fill into the cache), its one GetBatch answer
           held at the target before its first byte (moss_hold): each HEAD group's first hop
           (the proxy's 307) has gone while it is held, one per group (2 a shard), none of
           their target HEADs: 6 redirects, 0 HEADs at the target; released: 6 HEADs at the
           target, still 6 redirects (each kept one followed once), the mount's 6, none shared,
           the model's items and bytes, every path exact, no object GET or miss
           (cachetier_batch.c bt_ahead: a batch fill's HEAD costs the target's round trip only)
  fillslot 'epoch''s mount with --connections 1 (one ordinary transfer at a time), the
           proxy's 307 of one shard's first version HEAD held (redirect_hold): the HEADs' hops
           are small requests, so the window's GetBatch request reaches the proxy and the
           target while that hop is held (1 and 1; ordinary, it waited behind the held hop for
           the one slot: 0 and 0); released, the model's HEADs, items and bytes, every path
           exact, no object GET or miss (backend_ais_head.c: a HEAD hop takes no ordinary slot)
  filldirect 'epoch''s mount on a stand-in whose proxy answers HEADs itself (head_at_proxy):
           plan a (shard 0's paths) sends its 2 groups' HEADs ahead, answered at once, so each
           is sent whole again at its time (4 at the stand-in); plan b (the other shards) none
           ahead (1 a group); no redirect, exact bytes, no stale object
  stagedirect 'stage''s mount on a stand-in whose proxy answers HEADs itself (head_at_proxy,
           as AIStore's S3 reverse-proxy flag): plan a (the first 15 paths) then plan b (the
           others), one window each: a's HEADs sent ahead are answered, not redirected, so each
           object's HEAD is sent whole again at its time (2 per shard of a's window: the early
           answer proves nothing; submitted: 1 thread, the window's), and b's window sends
           none ahead (1 per shard, each on a HEAD thread: 1 + 1 per shard); no redirect,
           every path exact from the stage, no stale object
  stagesplit a staged window split into several requests: 2 other shards (16 members of
           200-300 KB, prefix big/), the plan their 16 middle members (4 MB, one window),
           --connections 5 (at most 3 GetBatch requests at once): exactly fetch_batch.c's
           split, 3 requests, each the model's items (objname, start, length) in plan order
           at the stand-in, one 307 each; 4 HEADs (one per shard of the window and one per
           shard of its first request, whose items are a HEAD group of their own; not one per
           request and shard), none shared; 1 thread (the window's; 6 while each request and
           HEAD had one); every path exact from the stage, no object GET, no miss,
           nothing written to the cache
  stagefirst stagesplit's window with the answers of every request but the first held at
           the target before their first byte (moss_hold_pick): the first request's HEADs
           (one per shard of it) reach the target and its paths are read from the stage with
           exact bytes while the others are held (before 2026-12-04 a shard's HEAD waited for
           its items of every request to begin, its items for all of them to arrive: nothing
           was readable while one request was held); released, every path exact, 4 HEADs, 3
           requests, 2 held, no hold ran out, 1 thread, no object GET, miss or failed span

Usage: test_ais_getbatch.py SHARDFS
Exit 77 (skip) when /dev/fuse is unusable or s3rver is not installed.
"""

import contextlib
import errno
import io
import os
import random
import sys
import tarfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import s3servers  # noqa: E402
from shardfs_test.s3world import BUCKET, PREFIX, World, set_aws_env  # noqa: E402

log = ml.log
UNIT = 64 * 1024  # the cache tier's unit (default --chunk-size 8M / 128)
NSHARDS, NMEMBERS, ENDS = 3, 18, 4


ctl = ml.control_errno  # one command line: None, or the errno the mount answered


def make_shard(path, rng, tag, sizes):
    """A GNU tar of members k<tag>_NN.bin of the given sizes (random bytes); returns
    [(name, data offset, size, bytes)] in member order."""
    with tarfile.open(path, 'w', format=tarfile.GNU_FORMAT) as tf:
        for k, n in enumerate(sizes):
            ti = tarfile.TarInfo('k%s_%02d.bin' % (tag, k))
            ti.size = n
            ti.mtime = 1700000000
            tf.addfile(ti, io.BytesIO(rng.randbytes(n)))
    with open(path, 'rb') as f:
        raw = f.read()
    with tarfile.open(path) as tf:
        return [(ti.name, ti.offset_data, ti.size, raw[ti.offset_data:ti.offset_data + ti.size])
                for ti in tf.getmembers()]


def model(plan, sizes, heads=False):
    """GetBatch items and bytes of a plan [(shard, data offset, size)] in plan order: the
    64 KiB units of each path with its tar header (a sidecar's member is first read with it),
    each claimed once, in plan order; an item is a run of units of one shard claimed one after
    the other (cachetier_batch.c). heads: also the version rule's HEADs for the plan as one
    request (cachetier_batchv.c): min(k, 2) for a shard of k items, whenever they arrive."""
    claimed, runs, nbytes = set(), [], 0
    for shard, off, size in plan:
        for u in range((off - 512) // UNIT, (off + size - 1) // UNIT + 1):
            if (shard, u) in claimed:
                continue
            claimed.add((shard, u))
            nbytes += min(UNIT, sizes[shard] - u * UNIT)
            if runs and runs[-1][0] == shard and runs[-1][2] == u:
                runs[-1][2] = u + 1
            else:
                runs.append([shard, u, u + 1])
    if heads:
        per = {}
        for r in runs:
            per[r[0]] = per.get(r[0], 0) + 1
        return len(runs), nbytes, sum(min(k, 2) for k in per.values())
    return len(runs), nbytes


class Case:
    """The world, source and plan shared by the cases."""

    def __init__(self, env):
        self.env = env
        rng = random.Random(25)
        self.src = env.path('src')
        os.makedirs(self.src)
        self.members, self.sizes, self.files = {}, {}, []
        self.plan = []  # (mount path, shard, data offset, size, bytes)
        for s in range(NSHARDS):
            name = 'shard-%06d.tar' % s
            ms = make_shard(os.path.join(self.src, name), rng, str(s),
                            [rng.randrange(20000, 40000) for _ in range(NMEMBERS)])
            self.sizes[name] = os.path.getsize(os.path.join(self.src, name))
            for mname, off, size, data in ms[ENDS:-ENDS]:
                self.plan.append(('shard-%06d/%s' % (s, mname), name, off, size, data))
        rng.shuffle(self.plan)
        r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('icache'),
                     self.src])
        if r.returncode != 0:
            raise RuntimeError('shardfs index --sidecar: rc %r' % r.returncode)
        self.files = sorted(os.listdir(self.src))
        self.world = World(env, ais=True)
        self.world.upload(BUCKET, PREFIX, self.src, self.files)
        set_aws_env(env, key=None, secret=None)
        env.env['AIS_ENDPOINT'] = 'http://127.0.0.1:%d' % self.world.ais.port
        self.planfile = env.path('plan')
        with open(self.planfile, 'w') as f:
            f.write(''.join(x[0] + '\n' for x in self.plan))
        self.n = 0

    def mount(self, extra=()):
        self.n += 1
        return ml.Mount(self.env, 'ais://%s/%s' % (BUCKET, PREFIX),
                        cache_dir=self.env.path('cache-%d' % self.n),
                        extra=['--cache-size', '64M', '--warm', 'off', '--get-batch', 'auto'] +
                        list(extra))

    def ais(self):
        return dict(self.world.ais.stats)

    def publish(self, ck, m, label):
        """List the shards (their indexes from the sidecars), publish the plan; returns the
        stats and the stand-in's counters before it."""
        for s in range(NSHARDS):
            os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
        st0, a0 = m.stats(), self.ais()
        ck.eq('%s: indexes from the sidecars' % label, st0['index_sidecar'], NSHARDS)
        ck.eq('%s: plan rc' % label, ctl(m.mnt, 'plan a ' + self.planfile), None)
        return st0, a0

    def read_all(self, ck, m, label, skip=()):
        bad = 0
        for path, shard, off, size, data in self.plan:
            if shard in skip:
                continue
            try:
                got = ml.read_all(os.path.join(m.mnt, path))
            except OSError as e:
                ck.fail('%s: reading %s: %s' % (label, path, e))
                continue
            if got != data:
                bad += 1
                ck.fail('%s: bytes of %s: %d bytes, differ' % (label, path, len(got)))
        ck.eq('%s: paths with wrong bytes' % label, bad, 0)


def diff(a, b, keys):
    return {k: a.get(k, 0) - b.get(k, 0) for k in keys}


def settled(m, key, want, more=None):
    """Wait until stats[key] >= want (and stats[k] >= v for each k, v of `more`) and no fill is
    in flight; the stats then (ml.poll's bound: a count never reached is the checks' failure)."""
    def done():
        st = m.stats()
        return (st[key] >= want and st['fills_inflight'] == 0 and
                all(st[k] >= v for k, v in (more or {}).items()) and st) or None
    return ml.poll(done) or m.stats()


def case_epoch(env, ck, c):
    items, nbytes, heads = model([(x[1], x[2], x[3]) for x in c.plan], c.sizes, heads=True)
    with c.mount() as m:
        # the confirmation's HEADs (one per object) go out together, not one after the other
        # (a round trip each): the stand-in holds the first until a second is in flight
        with c.world.ais.lock:
            c.world.ais.stats.pop('head_inflight_max', None)
            c.world.ais.head_barrier = 2
        st0, a0 = c.publish(ck, m, 'epoch')
        # the planner counts a window's paths as handed over when its GetBatch call returns,
        # after the request is counted: wait for both
        st = settled(m, 'plan_batch_requests', 1,
                     {'plan_fetch_paths': st0['plan_fetch_paths'] + len(c.plan)})
        a1 = c.ais()
        log('epoch: stats %s; stand-in %s' % (
            diff(st, st0, ('plan_batch_requests', 'plan_batch_items', 'plan_batch_bytes',
                           'bytes_fetched', 'fills', 'cache_misses')),
            diff(a1, a0, ('moss_requests', 'moss_redirects', 'moss_items', 'redirects',
                          's3_head'))))
        ck.eq('epoch: GetBatch requests (mount)', st['plan_batch_requests'], 1)
        ck.eq('epoch: GetBatch requests (stand-in: 307s, answers)',
              (a1.get('moss_redirects', 0) - a0.get('moss_redirects', 0),
               a1.get('moss_requests', 0) - a0.get('moss_requests', 0)), (1, 1))
        ck.eq('epoch: items (runs of planned units in plan order)', st['plan_batch_items'], items)
        ck.eq('epoch: items served', a1.get('moss_items', 0) - a0.get('moss_items', 0), items)
        ck.eq('epoch: bytes kept', st['plan_batch_bytes'], nbytes)
        ck.eq('epoch: bytes fetched: the planned units', st['bytes_fetched'] - st0['bytes_fetched'],
              nbytes)
        # the version rule's HEADs: two per shard of two items or more (its first item's, its
        # last's), one per shard of one, whenever the items arrive (a function of the request)
        ck.eq('epoch: the model\'s HEADs (each shard has 2 items or more)', heads, 2 * NSHARDS)
        ck.eq('epoch: HEADs as the items arrive: min(items, 2) per object',
              a1.get('s3_head', 0) - a0.get('s3_head', 0), heads)
        ck.eq('epoch: HEADs redirected by the proxy (one per HEAD, as AIStore\'s S3 HEAD)',
              a1.get('head_redirects', 0) - a0.get('head_redirects', 0), heads)
        # the window's one request is its first (urgent): its own HEADs, none shared
        ck.eq('epoch: the mount\'s HEADs, shared, waits',
              (st['plan_batch_heads'] - st0['plan_batch_heads'],
               st['plan_batch_heads_shared'] - st0['plan_batch_heads_shared'],
               st['plan_batch_head_waits'] - st0['plan_batch_head_waits']), (heads, 0, 0))
        ck.ok(a1.get('head_inflight_max', 0) >= 2,
              'epoch: the version rule HEADs went out one at a time (at most %d in flight)'
              % a1.get('head_inflight_max', 0))
        ck.eq('epoch: object GETs while fetching the plan', a1.get('redirects', 0) -
              a0.get('redirects', 0), 0)
        ck.eq('epoch: paths handed over', st['plan_fetch_paths'] - st0['plan_fetch_paths'],
              len(c.plan))
        c.read_all(ck, m, 'epoch')
        st2, a2 = m.stats(), c.ais()
        ck.eq('epoch: object GETs while reading', a2.get('redirects', 0) - a1.get('redirects', 0),
              0)
        ck.eq('epoch: misses while reading', st2['cache_misses'] - st['cache_misses'], 0)
        ck.eq('epoch: plan_hits', st2['plan_hits'], len(c.plan))
        ck.eq('epoch: failed items, stale objects, refused',
              (st2['plan_batch_failed_items'], st2['plan_batch_stale_objects'],
               st2['plan_batch_refused']), (0, 0, 0))
        ck.eq('epoch: read_errors', st2['read_errors'], 0)


def case_windows(env, ck, c):
    """A lookahead of 256K: the plan goes in several windows, those after the first while
    the reader reads (their requests on threads of their own, not awaited)."""
    with c.mount(['--plan-lookahead', '256K']) as m:
        st0, a0 = c.publish(ck, m, 'windows')
        # each path read once the fetcher handed it over (never before: a read would miss)
        cum, bad = 0, 0
        for path, shard, off, size, data in c.plan:
            cum += size
            ml.poll(lambda: m.stats()['plan_fetch_bytes'] - st0['plan_fetch_bytes'] >= cum,
                    what='the fetcher handing over %s' % path)
            bad += ml.read_all(os.path.join(m.mnt, path)) != data
        ck.eq('windows: paths with wrong bytes', bad, 0)
        st = settled(m, 'plan_batch_requests', 0)
        a1 = c.ais()
        log('windows: stats %s; stand-in %s' % (
            diff(st, st0, ('plan_batch_requests', 'plan_batch_items', 'plan_batch_bytes',
                           'bytes_fetched', 'cache_misses')),
            diff(a1, a0, ('moss_requests', 'moss_items', 'redirects', 's3_head'))))
        ck.ok(st['plan_batch_requests'] >= 3, 'windows: %d GetBatch requests, want 3 or more'
              % st['plan_batch_requests'])
        ck.eq('windows: GetBatch requests (stand-in)', a1.get('moss_requests', 0) -
              a0.get('moss_requests', 0), st['plan_batch_requests'])
        ck.eq('windows: items (stand-in)', a1.get('moss_items', 0) - a0.get('moss_items', 0),
              st['plan_batch_items'])
        heads = a1.get('s3_head', 0) - a0.get('s3_head', 0)
        ck.ok(st['plan_batch_requests'] <= heads <= 2 * NSHARDS * st['plan_batch_requests'],
              'windows: %d HEADs for %d requests: at most two per object of each' % (
                  heads, st['plan_batch_requests']))
        # every HEAD the stand-in answered is one the version rule counted
        ck.eq('windows: HEADs (stand-in, mount)', heads,
              st['plan_batch_heads'] - st0['plan_batch_heads'])
        # (a read may wait for a request in flight: a miss, not a GET)
        ck.eq('windows: object GETs', a1.get('redirects', 0) - a0.get('redirects', 0), 0)
        ck.eq('windows: bytes fetched: all by GetBatch', st['bytes_fetched'] -
              st0['bytes_fetched'], st['plan_batch_bytes'])
        ck.eq('windows: failed items, stale objects', (st['plan_batch_failed_items'],
                                                       st['plan_batch_stale_objects']), (0, 0))
        ck.eq('windows: read_errors', st['read_errors'], 0)


def units_of(shard, off, size):
    """The 64 KiB units (shard, u) a planned path's reads touch (its header's too)."""
    return {(shard, u) for u in range((off - 512) // UNIT, (off + size - 1) // UNIT + 1)}


def case_slots(env, ck, c):
    ais = c.world.ais
    pa, pb = c.plan[:15], c.plan[15:]
    a_units = set().union(*(units_of(x[1], x[2], x[3]) for x in pa))
    free = [x for x in pb if not units_of(x[1], x[2], x[3]) & a_units]
    ck.ok(free, 'slots: no path of plan b shares no unit with plan a (the data set changed?)')
    if not free:
        return
    files = {}
    for name, paths in (('a', pa), ('b', pb)):
        files[name] = env.path('plan-slots-' + name)
        with open(files[name], 'w') as f:
            f.write(''.join(x[0] + '\n' for x in paths))
    hold, t = threading.Event(), None
    with c.mount(['--connections', '3', '--plan-lookahead', '128K']) as m:
        try:
            for s in range(NSHARDS):
                os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
            st0, a0 = m.stats(), c.ais()
            ck.eq('slots: plan a rc', ctl(m.mnt, 'plan a ' + files['a']), None)
            # the planner counts the first window's paths as handed over once its GetBatch
            # call returned, after the request was counted (fetch_planner.c
            # pfx_getbatch_cache): wait for both, or first may be 0, nothing is read, and a's
            # second window never goes
            st = settled(m, 'plan_batch_requests', 1,
                         {'plan_fetch_bytes': st0['plan_fetch_bytes'] + 1})
            first = st['plan_fetch_bytes'] - st0['plan_fetch_bytes']
            ck.ok(first > 0, 'slots: plan a\'s first window handed over nothing')
            ais.moss_hold = hold
            # read what the first window (answered) holds: the reader passes its middle, so
            # a's second window goes, and the stand-in holds it
            cum, bad = 0, 0
            for path, shard, off, size, data in pa:
                cum += size
                if cum > first:
                    break
                bad += ml.read_all(os.path.join(m.mnt, path)) != data
            ck.eq('slots: plan a\'s first window: paths with wrong bytes', bad, 0)
            held = ml.poll(lambda: c.ais().get('moss_held', 0) - a0.get('moss_held', 0) >= 1,
                           what='plan a\'s second window at the stand-in')
            ck.ok(held, 'slots: plan a\'s second window never reached the stand-in')
            ck.eq('slots: plan b rc', ctl(m.mnt, 'plan b ' + files['b']), None)
            waits = ml.poll(lambda: m.stats()['plan_batch_slot_waits'] >= 1,
                            what='plan b\'s request waiting for the slot')
            ck.ok(waits, 'slots: plan b\'s request never waited for the slot')
            a1 = c.ais()
            got = []
            path, shard, off, size, data = free[0]
            t = threading.Thread(target=lambda: got.append(
                ml.read_all(os.path.join(m.mnt, path))), daemon=True)
            t.start()
            t.join(20)
            ck.ok(not t.is_alive(), 'slots: reading %s (plan b, no unit shared with a) waited '
                  'while the slot was held: its units were claimed before the slot' % path)
            ck.eq('slots: %s while the slot was held: exact bytes' % path,
                  got[0] if got else None, data)
            a2 = c.ais()
            ck.ok(a2.get('redirects', 0) - a1.get('redirects', 0) >= 1,
                  'slots: no object GET for %s while the slot was held' % path)
            ck.eq('slots: GetBatch answers held, none answered', (
                a2.get('moss_held', 0) - a0.get('moss_held', 0)), 1)
        finally:
            hold.set()
            ais.moss_hold = None
        if t is not None:
            t.join(30)
        for name, paths in (('a', pa), ('b', pb)):
            bad = sum(ml.read_all(os.path.join(m.mnt, x[0])) != x[4] for x in paths)
            ck.eq('slots: plan %s: paths with wrong bytes' % name, bad, 0)
        st = m.stats()
        ck.eq('slots: read_errors', st['read_errors'], 0)
        ck.eq('slots: failed items, stale objects', (st['plan_batch_failed_items'],
                                                     st['plan_batch_stale_objects']), (0, 0))


def case_refused(env, ck, c):
    c.world.ais.moss_refuse_status = 404
    try:
        with c.mount() as m:
            st0, a0 = c.publish(ck, m, 'refused')
            st = ml.poll(lambda: (m.stats()['plan_batch_refused'] == 1 and m.stats()) or None) \
                or m.stats()
            ck.eq('refused: plan_batch_refused', st['plan_batch_refused'], 1)
            c.read_all(ck, m, 'refused')
            st, a1 = m.stats(), c.ais()
            ck.eq('refused: GetBatch asked once, refused',
                  a1.get('moss_refused_status', 0) - a0.get('moss_refused_status', 0), 1)
            ck.eq('refused: GetBatch answers', a1.get('moss_requests', 0) -
                  a0.get('moss_requests', 0), 0)
            ck.eq('refused: batch requests, items', (st['plan_batch_requests'],
                                                     st['plan_batch_items']), (0, 0))
            ck.ok(a1.get('redirects', 0) - a0.get('redirects', 0) > 0,
                  'refused: the plan was fetched with ranged GETs')
            ck.eq('refused: paths handed over', st['plan_fetch_paths'] - st0['plan_fetch_paths'],
                  len(c.plan))
            ck.eq('refused: read_errors', st['read_errors'], 0)
    finally:
        c.world.ais.moss_refuse_status = None


def case_sick(env, ck, c):
    """GetBatch's endpoint answers 500 while object GETs and HEADs work: the window's request
    spends its retry budget and fails alone (the store is never marked down), the planned paths
    read exactly by ranged GETs; once the endpoint answers again, the next plan is fetched with
    GetBatch. Plan a is shard 0's paths, plan b the others' (no 64 KiB unit in common)."""
    plans = [[x for x in c.plan if x[1] == c.files[0]], [x for x in c.plan if x[1] != c.files[0]]]
    files = []
    for k, part in enumerate(plans):
        files.append(env.path('plan-sick-%d' % k))
        with open(files[-1], 'w') as f:
            f.write(''.join(x[0] + '\n' for x in part))
    items_a, _ = model([(x[1], x[2], x[3]) for x in plans[0]], c.sizes)
    items_b, bytes_b = model([(x[1], x[2], x[3]) for x in plans[1]], c.sizes)
    c.world.ais.moss_refuse_status = 500
    try:
        with c.mount(['--retry-budget', '1']) as m:
            for s in range(NSHARDS):
                os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
            a0 = c.ais()
            ck.eq('sick: plan a rc', ctl(m.mnt, 'plan a ' + files[0]), None)
            st = settled(m, 'plan_batch_failed_items', items_a)
            ck.eq('sick: plan a: its request failed, every item', (st['plan_batch_requests'],
                  st['plan_batch_failed_items']), (1, items_a))
            ck.ok(c.ais().get('moss_refused_status', 0) - a0.get('moss_refused_status', 0) >= 1,
                  'sick: the stand-in answered no GetBatch with 500')
            c.plan, full = plans[0], c.plan
            try:
                c.read_all(ck, m, 'sick: plan a')
            finally:
                c.plan = full
            st = m.stats()
            ck.eq('sick: store_down, fast fails, read_errors',
                  (st['store_down'], st['store_fast_fails'], st['read_errors']), (0, 0, 0))
            ck.eq('sick: "store down" in the log',
                  ml.logs_under(m.cache_dir).count('store down'), 0)
            c.world.ais.moss_refuse_status = None
            st0, a1 = m.stats(), c.ais()
            ck.eq('sick: plan b rc', ctl(m.mnt, 'plan b ' + files[1]), None)
            st = settled(m, 'plan_batch_requests', 2)
            a2 = c.ais()
            ck.eq('sick: plan b: one GetBatch request answered',
                  (st['plan_batch_requests'], a2.get('moss_requests', 0) -
                   a1.get('moss_requests', 0)), (2, 1))
            ck.eq('sick: plan b: items, bytes kept',
                  (st['plan_batch_items'] - st0['plan_batch_items'],
                   st['plan_batch_bytes'] - st0['plan_batch_bytes']), (items_b, bytes_b))
            c.plan = plans[1]
            try:
                c.read_all(ck, m, 'sick: plan b')
            finally:
                c.plan = full
            st, a3 = m.stats(), c.ais()
            ck.eq('sick: plan b: object GETs while reading', a3.get('redirects', 0) -
                  a2.get('redirects', 0), 0)
            ck.eq('sick: read_errors, store_down', (st['read_errors'], st['store_down']), (0, 0))
    finally:
        c.world.ais.moss_refuse_status = None


def case_cut(env, ck, c):
    c.world.ais.moss_cut_member = PREFIX + 'shard-000001.tar'
    with c.mount() as m:
        st0, a0 = c.publish(ck, m, 'cut')
        st = settled(m, 'plan_batch_requests', 1)
        a1 = c.ais()
        ck.eq('cut: answers cut', a1.get('moss_cut', 0) - a0.get('moss_cut', 0), 1)
        ck.eq('cut: GetBatch answers (the rest asked again)',
              a1.get('moss_requests', 0) - a0.get('moss_requests', 0), 2)
        ck.eq('cut: batch reads, failed items', (st['plan_batch_requests'],
                                                 st['plan_batch_failed_items']), (1, 1))
        ck.eq('cut: object GETs while fetching the plan', a1.get('redirects', 0) -
              a0.get('redirects', 0), 0)
        c.read_all(ck, m, 'cut')
        st2, a2 = m.stats(), c.ais()
        ck.ok(st2['cache_misses'] > st['cache_misses'],
              'cut: the cut item\'s units were fetched on demand (misses)')
        ck.eq('cut: read_errors', st2['read_errors'], 0)
        log('cut: object GETs while reading %d' % (a2.get('redirects', 0) -
                                                   a1.get('redirects', 0)))
    c.world.ais.moss_cut_member = None


def read_replaced(ck, c, m, label, name, newbytes):
    """Read every planned path, those of the replaced shard `name` apart: the others exact;
    its own ESTALE or (a refresh may show the new version) the new version's own member,
    whole, never other bytes (new bytes under the old index)."""
    c.read_all(ck, m, label, skip=(name,))
    stale = 0
    for path, shard, off, size, data in c.plan:
        if shard != name:
            continue
        try:
            got = ml.read_all(os.path.join(m.mnt, path))
        except OSError as e:
            stale += e.errno == errno.ESTALE
            if e.errno != errno.ESTALE:
                ck.fail('%s: %s: %s' % (label, path, e))
            continue
        if got != newbytes.get(path):
            ck.fail('%s: %s: %d bytes that are not the new version\'s member (new bytes under '
                    'the old index?)' % (label, path, len(got)))
    log('%s: %d of %s\'s planned paths answered ESTALE' % (label, stale, name))


def case_version(env, ck, c):
    rng = random.Random(2525)
    name = 'shard-000002.tar'
    with c.mount() as m:
        for s in range(NSHARDS):
            os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
        # the new version: the same member names, other bytes and sizes, a larger object (every
        # range of the old version's units answers, with the new bytes)
        newp = env.path('new-' + name)
        new = make_shard(newp, rng, '2', [rng.randrange(45000, 60000) for _ in range(NMEMBERS)])
        with open(newp, 'rb') as f:
            newraw = f.read()
        ck.ok(len(newraw) > c.sizes[name], 'version: the new version is larger')
        c.world.s3.put(BUCKET, PREFIX + name, newraw)
        newbytes = {'shard-000002/' + n: d for n, _, _, d in new}
        st0, a0 = c.publish(ck, m, 'version')
        st = settled(m, 'plan_batch_requests', 1)
        a1 = c.ais()
        ck.eq('version: GetBatch answers', a1.get('moss_requests', 0) -
              a0.get('moss_requests', 0), 1)
        ck.eq('version: stale objects, failed items', (st['plan_batch_stale_objects'],
                                                       st['plan_batch_failed_items']), (1, 0))
        _, kept = model([(x[1], x[2], x[3]) for x in c.plan if x[1] != name], c.sizes)
        ck.eq('version: bytes kept: shards 0 and 1 only', (st['plan_batch_bytes'],
              st['bytes_fetched'] - st0['bytes_fetched']), (kept, kept))
        # the raw object under its listed (old) size: the planned range of its first planned
        # path must not be served from the batch (the new version's bytes); a fill by version
        # answers ESTALE
        first = next(x for x in c.plan if x[1] == name)
        fd = os.open(os.path.join(m.mnt, name), os.O_RDONLY)
        try:
            ck.eq('version: listed size of the raw object', os.fstat(fd).st_size, c.sizes[name])
            got = os.pread(fd, first[3], first[2])
            ck.fail('version: the raw object\'s planned range was served (%d bytes%s)' % (
                len(got), ', the new version\'s' if got == newraw[first[2]:first[2] + first[3]]
                else ''))
        except OSError as e:
            ck.eq('version: reading the raw object\'s planned range', e.errno, errno.ESTALE)
        finally:
            os.close(fd)
        read_replaced(ck, c, m, 'version', name, newbytes)
        st2 = m.stats()
        ck.eq('version: stale objects', st2['plan_batch_stale_objects'], 1)


STAGE_OPTS = ['--cache-size', '64K', '--chunk-size', '16K', '--warm', 'off', '--get-batch', 'auto']


def stage_mount(c, label, prefix=PREFIX, extra=()):
    """A mount whose planned windows all go through the stage: --cache-size 64K (less than
    any path: the rule stages each span), --chunk-size 16K (the gap, at most a chunk, is
    shorter than any path: each path is a span of its own)."""
    return ml.Mount(c.env, 'ais://%s/%s' % (BUCKET, prefix), cache_dir=c.env.path('cache-' + label),
                    extra=STAGE_OPTS + list(extra))


def staged(m, st0, n, requests=1):
    """Wait until n spans are staged by `requests` GetBatch requests or more; the stats then."""
    return ml.poll(lambda: (lambda s: s['plan_stage_spans'] - st0['plan_stage_spans'] >= n and
                            s['plan_batch_requests'] - st0['plan_batch_requests'] >= requests
                            and s)(m.stats())) or m.stats()


def case_stage(env, ck, c):
    """A GetBatch window through the stage (stage_mount), the default stage: one
    GetBatch request of the 30 paths (each with its tar header) in plan order, its bytes into
    memory, one HEAD per shard (the staged windows' version rule: one per object of the
    window, sent once every item of it in the window arrived; the batch fills' rule sent two,
    its first item's and its last's); nothing written to the cache, no fill, no eviction, no
    punch; every path read from the stage with exact bytes."""
    want = sum(x[3] + 512 for x in c.plan)
    keys = ('fills', 'bytes_fetched', 'evictions', 'cache_punches', 'cache_misses',
            'plan_stage_spans', 'plan_stage_bytes', 'plan_stage_read_bytes',
            'plan_stage_fallbacks', 'plan_stage_failed', 'plan_stage_full',
            'plan_batch_requests', 'plan_batch_items', 'plan_batch_bytes', 'plan_batch_heads',
            'plan_batch_heads_shared', 'plan_batch_failed_items', 'plan_batch_stale_objects',
            'read_errors')
    with stage_mount(c, 'stage') as m:
        st0, a0 = c.publish(ck, m, 'stage')
        staged(m, st0, len(c.plan))
        c.read_all(ck, m, 'stage')
        st = ml.poll(lambda: (lambda s: s['plan_stage_mem_bytes'] == 0 and s)(m.stats())) \
            or m.stats()
        a1 = c.ais()
        d = diff(st, st0, keys)
        log('stage: stats %s; stand-in %s' % (d, diff(a1, a0, (
            'moss_requests', 'moss_items', 'redirects', 's3_head'))))
        n = len(c.plan)
        ck.eq('stage: spans staged (one per path)', d['plan_stage_spans'], n)
        ck.eq('stage: bytes staged (each path with its tar header)', d['plan_stage_bytes'], want)
        ck.eq('stage: GetBatch requests, items (mount)',
              (d['plan_batch_requests'], d['plan_batch_items']), (1, n))
        ck.eq('stage: GetBatch requests, items (stand-in)',
              (a1.get('moss_requests', 0) - a0.get('moss_requests', 0),
               a1.get('moss_items', 0) - a0.get('moss_items', 0)), (1, n))
        ck.eq('stage: HEADs: one per shard of the window (stand-in, mount), none shared',
              (a1.get('s3_head', 0) - a0.get('s3_head', 0), d['plan_batch_heads'],
               d['plan_batch_heads_shared']), (NSHARDS, NSHARDS, 0))
        # each through the proxy's 307 to the target, as AIStore's S3 HEAD goes
        ck.eq('stage: HEADs redirected by the proxy (one per HEAD)',
              a1.get('head_redirects', 0) - a0.get('head_redirects', 0), NSHARDS)
        ck.eq('stage: object GETs', a1.get('redirects', 0) - a0.get('redirects', 0), 0)
        ck.eq('stage: nothing written to the cache (fills, bytes fetched, batch bytes kept)',
              (d['fills'], d['bytes_fetched'], d['plan_batch_bytes']), (0, 0, 0))
        ck.eq('stage: no eviction, no punch', (d['evictions'], d['cache_punches']), (0, 0))
        ck.eq('stage: no miss', d['cache_misses'], 0)
        ck.eq('stage: bytes read from the stage: every path and its header check',
              d['plan_stage_read_bytes'], want)
        for k in ('plan_stage_fallbacks', 'plan_stage_failed', 'plan_stage_full',
                  'plan_batch_failed_items', 'plan_batch_stale_objects', 'read_errors'):
            ck.eq('stage: ' + k, d[k], 0)
        ck.eq('stage: every staged span freed once read', st['plan_stage_mem_bytes'], 0)


def room_split(plan, room, from_end=True):
    """fetch_planner.c pfx_dest over a window of one span a path (stage_mount's chunk): each
    span (a path and its tar header) goes to the cache while its bytes fit the room left,
    the room given from the window's last span back (from_end) or from its first (before
    2026-12-03); the rest to the stage. Returns the staged paths' indexes in plan order."""
    order = range(len(plan) - 1, -1, -1) if from_end else range(len(plan))
    staged = []
    for i in order:
        n = plan[i][3] + 512
        if n <= room:
            room -= n
        else:
            staged.append(i)
    return sorted(staged)


def case_stageroom(env, ck, c):
    """A GetBatch window whose spans the cache has room for in part (stage_mount's options,
    --cache-size 192K): the cache's room goes to the window's last spans, as a ranged
    window's does, so the spans its reader reaches first are staged (one GetBatch window
    into memory) and the last ones the cache's: exactly the model's staged spans and bytes
    (room_split from the end, with the room the mount said before the plan); the plan's
    first path read from the stage (1 staged read, no miss); every path exact, no fallback,
    no failed span. (The cache's spans here find no room for their units, the fills' share,
    and are read on demand: the planner's room is in bytes.)"""
    keys = ('plan_stage_spans', 'plan_stage_bytes', 'plan_stage_reads', 'plan_stage_read_bytes',
            'plan_stage_fallbacks', 'plan_stage_failed', 'plan_batch_requests',
            'plan_batch_stale_objects', 'plan_batch_failed_items', 'cache_misses', 'read_errors')
    opts = [o if o != '64K' else '192K' for o in STAGE_OPTS]
    with ml.Mount(c.env, 'ais://%s/%s' % (BUCKET, PREFIX), cache_dir=c.env.path('cache-room'),
                  extra=opts) as m:
        for s in range(NSHARDS):
            os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
        room = m.stats()['cache_room_bytes']
        want = room_split(c.plan, room)
        front = room_split(c.plan, room, from_end=False)
        # the case means something only when the room holds some spans but not all, and the
        # two rules differ at the window's head
        ck.eq('stageroom: the room holds some of the spans, not all (room %d)' % room,
              0 < len(want) < len(c.plan), True)
        ck.eq('stageroom: the plan\'s first path staged by the rule, not by the old one',
              (0 in want, 0 in front), (True, False))
        st0 = c.publish(ck, m, 'stageroom')[0]
        st1 = staged(m, st0, len(want))
        d = diff(st1, st0, keys)
        ck.eq('stageroom: spans staged, their bytes (each path with its tar header): the '
              'model\'s, the room from the window\'s end',
              (d['plan_stage_spans'], d['plan_stage_bytes']),
              (len(want), sum(c.plan[i][3] + 512 for i in want)))
        path, shard, off, size, data = c.plan[0]
        ck.eq('stageroom: the plan\'s first path: exact bytes',
              ml.read_all(os.path.join(m.mnt, path)) == data, True)
        st2 = m.stats()
        ck.eq('stageroom: the plan\'s first path read from the stage (staged reads, misses)',
              (st2['plan_stage_reads'] - st1['plan_stage_reads'],
               st2['cache_misses'] - st1['cache_misses']), (1, 0))
        c.read_all(ck, m, 'stageroom')
        d = diff(m.stats(), st0, keys)
        log('stageroom: room %d, staged %s (before: %s); stats %s' % (room, want, front, d))
        ck.eq('stageroom: bytes read from the stage: the staged paths and headers',
              d['plan_stage_read_bytes'], sum(c.plan[i][3] + 512 for i in want))
        ck.eq('stageroom: fallbacks, failed spans, stale objects, failed items, read errors',
              (d['plan_stage_fallbacks'], d['plan_stage_failed'], d['plan_batch_stale_objects'],
               d['plan_batch_failed_items'], d['read_errors']), (0, 0, 0, 0, 0))


def case_stalestage(env, ck, c, label):
    """The stage's version rule with shard 1 replaced in the bucket (other bytes, a larger
    object: every staged item answers, with the new bytes at the old ranges), on a
    stage_mount:
      stagever  after the mount listed it, before the plan;
      stagerun  while the window's one GetBatch answer is held at the target (moss_hold):
                an object changed under a running window.
    Either way the window's HEADs go after its items arrived: exactly one per shard, and shard
    1's says another ETag: 1 stale object, its 10 staged spans failed, never served (ESTALE,
    or after a refresh the new version's own member); shards 0 and 2 exact from the stage.
    The old version is put back at the end (the same bytes: the same ETag)."""
    running = label == 'stagerun'
    rng = random.Random(3737 if running else 2626)
    name = 'shard-000001.tar'
    with open(os.path.join(c.src, name), 'rb') as f:
        oldraw = f.read()
    hold = threading.Event()
    with stage_mount(c, label) as m:
        try:
            for s in range(NSHARDS):
                os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
            newp = env.path(label + '-' + name)
            new = make_shard(newp, rng, '1', [rng.randrange(45000, 60000)
                                              for _ in range(NMEMBERS)])
            with open(newp, 'rb') as f:
                newraw = f.read()
            newbytes = {'shard-000001/' + n: d for n, _, _, d in new}
            if running:
                c.world.ais.moss_hold = hold
            else:
                c.world.s3.put(BUCKET, PREFIX + name, newraw)
            st0, a0 = c.publish(ck, m, label)
            if running:
                held = ml.poll(lambda: c.ais().get('moss_held', 0) > a0.get('moss_held', 0))
                ck.ok(held, '%s: the window\'s GetBatch answer held at the target' % label)
                c.world.s3.put(BUCKET, PREFIX + name, newraw)
                hold.set()
            st = staged(m, st0, len(c.plan))
            a1 = c.ais()
            mine = sum(1 for x in c.plan if x[1] == name)
            ck.eq('%s: staged spans, GetBatch requests' % label,
                  (st['plan_stage_spans'] - st0['plan_stage_spans'],
                   st['plan_batch_requests'] - st0['plan_batch_requests']), (len(c.plan), 1))
            ck.eq('%s: HEADs: one per shard of the window (stand-in, mount)' % label,
                  (a1.get('s3_head', 0) - a0.get('s3_head', 0),
                   st['plan_batch_heads'] - st0['plan_batch_heads']), (NSHARDS, NSHARDS))
            ck.eq('%s: stale objects, staged spans failed (shard 1\'s)' % label,
                  (st['plan_batch_stale_objects'] - st0['plan_batch_stale_objects'],
                   st['plan_stage_failed'] - st0['plan_stage_failed']), (1, mine))
            read_replaced(ck, c, m, label, name, newbytes)
            st2 = m.stats()
            ck.eq('%s: bytes served from the stage: shards 0 and 2 (each path and its '
                  'header check)' % label,
                  st2['plan_stage_read_bytes'] - st0['plan_stage_read_bytes'],
                  sum(x[3] + 512 for x in c.plan if x[1] != name))
        finally:
            c.world.ais.moss_hold = None
            hold.set()
            c.world.s3.put(BUCKET, PREFIX + name, oldraw)


def case_stagever(env, ck, c):
    case_stalestage(env, ck, c, 'stagever')


def case_stagerun(env, ck, c):
    case_stalestage(env, ck, c, 'stagerun')


SPLIT_PREFIX, SPLIT_PAR = 'big/', 3  # --connections 5: at most 3 GetBatch requests at once


def split_model(items, par):
    """fetch_batch.c's split of a window's items [(objname, start, length)] in plan order:
    k = min(bytes // 1 MiB, par) requests (at least 1) of about equal bytes, each a stretch
    of the plan's order, the last taking the rest."""
    total = sum(x[2] for x in items)
    k = max(1, min(total // (1 << 20), par))
    want, out, i = -(-total // k), [], 0
    while i < len(items):
        j, acc = i, 0
        while j < len(items) and (acc < want or len(out) + 1 >= k):
            acc += items[j][2]
            j += 1
        out.append(items[i:j])
        i = j
    return out


def split_source(env, ck, c):
    """stagesplit's and stagefirst's source (made once): 2 shards of 16 members of 200-300 KB
    under SPLIT_PREFIX, the plan their 16 middle members shuffled (4 MB, one window); returns
    (plan, items, want): the plan's (path, shard, off, size, data), its items (objname, start,
    length: each path with its tar header) in plan order, and fetch_batch.c's split of them
    (SPLIT_PAR requests)."""
    if getattr(c, 'split', None):
        return c.split
    rng = random.Random(4141)
    src = env.path('src-split')
    os.makedirs(src)
    plan = []
    for s in range(2):
        name = 'big-%06d.tar' % s
        ms = make_shard(os.path.join(src, name), rng, 'b%d' % s,
                        [rng.randrange(200000, 300000) for _ in range(16)])
        for mname, off, size, data in ms[ENDS:-ENDS]:
            plan.append(('big-%06d/%s' % (s, mname), name, off, size, data))
    rng.shuffle(plan)
    r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('icache-split'),
                 src])
    ck.eq('split: shardfs index --sidecar rc', r.returncode, 0)
    for rel in sorted(os.listdir(src)):  # (the bucket is the Case's)
        with open(os.path.join(src, rel), 'rb') as f:
            c.world.s3.put(BUCKET, SPLIT_PREFIX + rel, f.read())
    planfile = env.path('plan-split')
    with open(planfile, 'w') as f:
        f.write(''.join(x[0] + '\n' for x in plan))
    items = [(SPLIT_PREFIX + shard, off - 512, size + 512) for _, shard, off, size, _ in plan]
    want = split_model(items, SPLIT_PAR)
    ck.eq('split: the model\'s requests', len(want), SPLIT_PAR)
    c.split = (plan, items, want, planfile)
    return c.split


def split_heads(want):
    """The staged window's HEADs (cachetier_batchm.c bm_new): one per shard of the window and
    one per shard of its first request (that request's items a HEAD group of their own)."""
    return len({x[0] for x in want[0]}) + len({x[0] for req in want for x in req})


def case_stagesplit(env, ck, c):
    """A staged window split into several GetBatch requests: 2 shards of 16 members of
    200-300 KB under their own prefix, the plan their 16 middle members (4 MB, one
    window), stage_mount with --connections 5 (at most 3 GetBatch requests at once): exactly
    the split of fetch_batch.c's model, 3 requests, each the model's items (the path and its
    tar header) in plan order at the stand-in, one 307 each; one HEAD per shard of the
    window and one per shard of its first request (split_heads: not one per request and
    object), none shared; 1 thread (the window's: its requests and HEADs are submitted); every
    path read from the stage with exact bytes, no object GET, no miss, nothing written to the
    cache."""
    plan, items, want, planfile = split_source(env, ck, c)
    with stage_mount(c, 'stagesplit', SPLIT_PREFIX,
                     ['--connections', str(SPLIT_PAR + 2)]) as m:
        for s in range(2):
            os.listdir(os.path.join(m.mnt, 'big-%06d' % s))
        st0, a0 = m.stats(), c.ais()
        log0 = len(c.world.ais.moss_log)
        ck.eq('stagesplit: plan rc', ctl(m.mnt, 'plan a ' + planfile), None)
        st = staged(m, st0, len(plan), len(want))
        a1 = c.ais()
        with c.world.ais.lock:
            got = [list(x) for x in c.world.ais.moss_log[log0:]]
        # (the requests run at once: the stand-in logs them as they come)
        got.sort(key=lambda req: items.index(req[0]) if req and req[0] in items else -1)
        log('stagesplit: %d requests of %s items (model %s)' % (
            len(got), [len(x) for x in got], [len(x) for x in want]))
        ck.eq('stagesplit: GetBatch requests (mount; stand-in: 307s, answers)',
              (st['plan_batch_requests'] - st0['plan_batch_requests'],
               a1.get('moss_redirects', 0) - a0.get('moss_redirects', 0),
               a1.get('moss_requests', 0) - a0.get('moss_requests', 0)), (len(want),) * 3)
        ck.eq('stagesplit: each request\'s items (objname, start, length), in plan order',
              got, want)
        ck.eq('stagesplit: HEADs: one per shard of the window and per shard of its first '
              'request (stand-in, mount), none shared',
              (a1.get('s3_head', 0) - a0.get('s3_head', 0),
               st['plan_batch_heads'] - st0['plan_batch_heads'],
               st['plan_batch_heads_shared'] - st0['plan_batch_heads_shared']),
              (split_heads(want), split_heads(want), 0))
        ck.eq('stagesplit: spans and bytes staged',
              (st['plan_stage_spans'] - st0['plan_stage_spans'],
               st['plan_stage_bytes'] - st0['plan_stage_bytes']),
              (len(plan), sum(x[2] for x in items)))
        bad = 0
        for path, shard, off, size, data in plan:
            bad += ml.read_all(os.path.join(m.mnt, path)) != data
        ck.eq('stagesplit: paths with wrong bytes', bad, 0)
        st2, a2 = m.stats(), c.ais()
        ck.eq('stagesplit: read from the stage (every path and its header check)',
              st2['plan_stage_read_bytes'] - st0['plan_stage_read_bytes'],
              sum(x[2] for x in items))
        ck.eq('stagesplit: threads (the window\'s; its 3 requests and its HEADs submitted, no '
              'thread each)', st2['plan_batch_threads'] - st0['plan_batch_threads'], 1)
        ck.eq('stagesplit: object GETs, misses, bytes fetched to the cache, failed, stale, '
              'read errors',
              (a2.get('redirects', 0) - a0.get('redirects', 0),
               st2['cache_misses'] - st0['cache_misses'],
               st2['bytes_fetched'] - st0['bytes_fetched'],
               st2['plan_stage_failed'] - st0['plan_stage_failed'],
               st2['plan_batch_stale_objects'] - st0['plan_batch_stale_objects'],
               st2['read_errors'] - st0['read_errors']), (0, 0, 0, 0, 0, 0))


def case_stagefirst(env, ck, c):
    """stagesplit's window (3 GetBatch requests, 2 shards) with the answers of every request
    but the window's first held at the target before their first byte (moss_hold,
    moss_hold_pick): the first request's items are a HEAD group of their own (one per shard
    of it, cachetier_batchm.c bm_new), so while the others are held (none of their items has
    begun) those HEADs reach the target, and the first request's paths (what the reader
    reaches first) are read from the stage with exact bytes, each given as soon as it
    arrived and its group's HEAD was back; before 2026-12-04 a shard's HEAD waited for its
    items of every request to begin and its items for all of them to arrive: nothing was
    readable while one request was held. Released: every path exact from the stage, the
    model's HEADs (split_heads) at the stand-in and the mount, 3 requests, 2 held, the hold
    never ran out, 1 thread, no object GET, miss, failed span, stale object or read
    error."""
    plan, items, want, planfile = split_source(env, ck, c)
    first = [x for x in plan if (SPLIT_PREFIX + x[1], x[2] - 512, x[3] + 512) in want[0]]
    hold = threading.Event()
    c.world.ais.moss_hold_pick = lambda entries: entries != want[0]
    c.world.ais.moss_hold = hold
    try:
        with stage_mount(c, 'stagefirst', SPLIT_PREFIX,
                         ['--connections', str(SPLIT_PAR + 2), '--stall-timeout', '600']) as m:
            for s in range(2):
                os.listdir(os.path.join(m.mnt, 'big-%06d' % s))
            st0, a0 = m.stats(), c.ais()
            ck.eq('stagefirst: plan rc', ctl(m.mnt, 'plan a ' + planfile), None)
            held = ml.poll(lambda: c.ais().get('moss_held', 0) - a0.get('moss_held', 0) >=
                           len(want) - 1)
            ck.ok(held, 'stagefirst: every request but the first held at the target')
            nfirst = len({x[0] for x in want[0]})

            def expired():  # the stand-in's hold ran out (30 s): what follows is not "held"
                return c.ais().get('moss_hold_expired', 0) - a0.get('moss_hold_expired', 0)

            heads = ml.poll(lambda: c.ais().get('s3_head', 0) - a0.get('s3_head', 0) >= nfirst
                            or expired())
            ck.ok(heads and not expired(),
                  'stagefirst: the first request\'s HEADs (%d) reached the target while the '
                  'others are held' % nfirst)
            done, got, t = read_on_thread(m, first)
            a1, st1 = c.ais(), m.stats()
            ck.ok(done and not expired(),
                  'stagefirst: the first request\'s %d paths read while the others are held'
                  % len(first))
            ck.eq('stagefirst: the first request\'s paths with wrong bytes',
                  sum(1 for x in first if got.get(x[0]) != x[4]), 0)
            ck.eq('stagefirst: bytes read from the stage while the others are held (the '
                  'first request\'s items: each path and its header check), holds run out',
                  (st1['plan_stage_read_bytes'] - st0['plan_stage_read_bytes'],
                   a1.get('moss_hold_expired', 0) - a0.get('moss_hold_expired', 0)),
                  (sum(x[2] for x in want[0]), 0))
            hold.set()
            t.join(30)
            bad = sum(1 for x in plan if ml.read_all(os.path.join(m.mnt, x[0])) != x[4])
            ck.eq('stagefirst: paths with wrong bytes', bad, 0)
            st2 = settled(m, 'plan_batch_requests', st0['plan_batch_requests'] + len(want))
            a2 = c.ais()
            ck.eq('stagefirst: HEADs (stand-in, mount), requests, held, expired holds, threads',
                  (a2.get('s3_head', 0) - a0.get('s3_head', 0),
                   st2['plan_batch_heads'] - st0['plan_batch_heads'],
                   st2['plan_batch_requests'] - st0['plan_batch_requests'],
                   a2.get('moss_held', 0) - a0.get('moss_held', 0),
                   a2.get('moss_hold_expired', 0) - a0.get('moss_hold_expired', 0),
                   st2['plan_batch_threads'] - st0['plan_batch_threads']),
                  (split_heads(want), split_heads(want), len(want), len(want) - 1, 0, 1))
            ck.eq('stagefirst: read from the stage (every path and its header check)',
                  st2['plan_stage_read_bytes'] - st0['plan_stage_read_bytes'],
                  sum(x[2] for x in items))
            ck.eq('stagefirst: object GETs, misses, failed spans, stale objects, read errors',
                  (a2.get('redirects', 0) - a0.get('redirects', 0),
                   st2['cache_misses'] - st0['cache_misses'],
                   st2['plan_stage_failed'] - st0['plan_stage_failed'],
                   st2['plan_batch_stale_objects'] - st0['plan_batch_stale_objects'],
                   st2['read_errors'] - st0['read_errors']), (0, 0, 0, 0, 0))
    finally:
        c.world.ais.moss_hold = None
        c.world.ais.moss_hold_pick = None
        hold.set()


def case_stagecut(env, ck, c):
    """'stage''s mount with the answer cut in the middle of shard 1's first item: the backend
    asks for the rest again (2 GetBatch answers, 1 batch read), that item fails (1 failed item)
    and so does its staged span (1), never served: its path is read the ordinary way; every
    path exact, no read error; every other path's bytes from the stage."""
    name = 'shard-000001.tar'
    cut = next(x for x in c.plan if x[1] == name)
    c.world.ais.moss_cut_member = PREFIX + name
    try:
        with stage_mount(c, 'stagecut') as m:
            st0, a0 = c.publish(ck, m, 'stagecut')
            st = staged(m, st0, len(c.plan))
            a1 = c.ais()
            ck.eq('stagecut: answers cut, GetBatch answers (the rest asked again)',
                  (a1.get('moss_cut', 0) - a0.get('moss_cut', 0),
                   a1.get('moss_requests', 0) - a0.get('moss_requests', 0)), (1, 2))
            ck.eq('stagecut: batch reads, failed items, staged spans, failed spans',
                  (st['plan_batch_requests'] - st0['plan_batch_requests'],
                   st['plan_batch_failed_items'] - st0['plan_batch_failed_items'],
                   st['plan_stage_spans'] - st0['plan_stage_spans'],
                   st['plan_stage_failed'] - st0['plan_stage_failed']), (1, 1, len(c.plan), 1))
            c.read_all(ck, m, 'stagecut')
            st2 = m.stats()
            ck.eq('stagecut: bytes served from the stage: every path but the cut one',
                  st2['plan_stage_read_bytes'] - st0['plan_stage_read_bytes'],
                  sum(x[3] + 512 for x in c.plan if x is not cut))
            ck.ok(st2['plan_stage_fallbacks'] > st0['plan_stage_fallbacks'],
                  'stagecut: the cut path read the ordinary way (fallbacks)')
            ck.eq('stagecut: read_errors', st2['read_errors'] - st0['read_errors'], 0)
    finally:
        c.world.ais.moss_cut_member = None


def read_on_thread(m, items):
    """Each item's path (its first field) read whole through the mount m on a thread of the
    test, bounded by the poll: (every read returned, {path: bytes or the OSError}, the thread:
    a caller that releases what held the reads joins it)."""
    got = {}

    def run():
        for path, _, _, _, _ in items:
            try:
                got[path] = ml.read_all(os.path.join(m.mnt, path))
            except OSError as e:
                got[path] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return ml.poll(lambda: not t.is_alive()), got, t


def held_window(ck, c, m, label, while_, held, others, st0, a0, over, release, more=None,
                heads_while=NSHARDS):
    """stagehead's, stageopen's and stagefollow's common end: with the window's shard `held`
    held back (`over()` true once it is not), the `others` paths are read on a thread of the
    test (bounded by the poll) from the stage with exact bytes; `release` (an Event) set, the
    held shard's paths are exact from the stage; the window's exact counts once it ended: 1
    request, 1 HEAD per shard (stand-in, mount), 1 thread (the window's: its request and its
    HEADs are submitted, none has a thread), no stale object, every path and its header
    read from the stage, no object GET, miss, fallback, failed span or read error (and, while
    it is held, `heads_while` HEADs at the stand-in: 1 per shard, the held one counted); `more`,
    a stand-in counter and its count, e.g. ('moss_paused', 1)."""
    done, got, t = read_on_thread(m, others)
    a1, st1 = c.ais(), m.stats()
    ck.ok(done and not over(), '%s: the other shards\' paths read %s' % (label, while_))
    ck.eq('%s: HEADs at the stand-in %s' % (label, while_),
          a1.get('s3_head', 0) - a0.get('s3_head', 0), heads_while)
    ck.eq('%s: the other shards\' paths with wrong bytes' % label,
          sum(1 for x in others if got.get(x[0]) != x[4]), 0)
    ck.eq('%s: bytes read from the stage %s (the other shards\' paths and their header '
          'checks; none of the held shard\'s)' % (label, while_),
          st1['plan_stage_read_bytes'] - st0['plan_stage_read_bytes'],
          sum(x[3] + 512 for x in others))
    release.set()
    t.join(30)
    bad = sum(1 for x in c.plan if x[1] == held and
              ml.read_all(os.path.join(m.mnt, x[0])) != x[4])
    ck.eq('%s: the held shard\'s paths with wrong bytes' % label, bad, 0)
    # the window adds its requests and HEADs to the counters when it ends, after its spans
    # were served: wait for them (the exact counts checked below)
    st2 = settled(m, 'plan_batch_requests', st0['plan_batch_requests'] + 1,
                  {'plan_batch_heads': st0['plan_batch_heads'] + NSHARDS})
    a2 = c.ais()
    names = 'HEADs (stand-in, mount), threads, requests, stale objects' + (
        ', ' + more[0] if more else '')
    want = (NSHARDS, NSHARDS, 1, 1, 0) + ((more[1],) if more else ())
    ck.eq('%s: %s' % (label, names),
          (a2.get('s3_head', 0) - a0.get('s3_head', 0),
           st2['plan_batch_heads'] - st0['plan_batch_heads'],
           st2['plan_batch_threads'] - st0['plan_batch_threads'],
           st2['plan_batch_requests'] - st0['plan_batch_requests'],
           st2['plan_batch_stale_objects'] - st0['plan_batch_stale_objects']) +
          ((a2.get(more[0], 0) - a0.get(more[0], 0),) if more else ()), want)
    ck.eq('%s: bytes read from the stage: every path and its header check' % label,
          st2['plan_stage_read_bytes'] - st0['plan_stage_read_bytes'],
          sum(x[3] + 512 for x in c.plan))
    ck.eq('%s: object GETs, misses, fallbacks, failed spans, read errors' % label,
          (a2.get('redirects', 0) - a0.get('redirects', 0),
           st2['cache_misses'] - st0['cache_misses'],
           st2['plan_stage_fallbacks'] - st0['plan_stage_fallbacks'],
           st2['plan_stage_failed'] - st0['plan_stage_failed'],
           st2['read_errors'] - st0['read_errors']), (0, 0, 0, 0, 0))


def held_first(ck, c, label, hold_attr, reached, while_, **more):
    """stagehead's and stagefollow's setup: 'stage''s mount with the stand-in's `hold_attr`
    (head_hold or redirect_hold) holding the hop of one shard's HEAD, the shard whose last item
    of the window comes first in the plan's order (so it settles first); checked that the held
    hop reached the stand-in (`reached`, what it is), then held_window's reads and counts
    (`while_`, `more`: its words and arguments). The hold is let go whatever happens."""
    last = {}
    for i, x in enumerate(c.plan):
        last[x[1]] = i
    held = min(last, key=last.get)
    hold = {'match': PREFIX + held, 'reached': threading.Event(), 'go': threading.Event(),
            'left': threading.Event()}
    others = [x for x in c.plan if x[1] != held]

    setattr(c.world.ais, hold_attr, hold)
    try:
        with stage_mount(c, label) as m:
            st0, a0 = c.publish(ck, m, label)
            # the usual bound (the stand-in holds the hop for up to 120 s)
            ck.ok(ml.poll(hold['reached'].is_set), '%s: %s' % (label, reached))
            held_window(ck, c, m, label, while_, held, others, st0, a0,
                        lambda: hold['left'].is_set(), hold['go'], **more)
    finally:
        setattr(c.world.ais, hold_attr, None)
        hold['go'].set()


def case_stagehead(env, ck, c):
    """'stage''s mount with the HEAD of one shard held at the stand-in (head_hold): the shard
    whose last item of the window comes first in the plan's order (so it settles first, and
    before each object's HEAD had a thread of its own the window thread waited in its HEAD while
    the others settled). While it is held (the stand-in's held HEAD has not left), the other
    two shards' HEADs reach the stand-in and their paths are read from the stage with exact
    bytes; released, the held shard's paths are exact from the stage too. The reads run on a
    thread of the test, bounded by the poll (20 s, less than the hold's 30 s)."""
    held_first(ck, c, 'stagehead', 'head_hold', 'the held shard\'s HEAD reached the stand-in',
               'while the held HEAD lasts')


def case_stagefollow(env, ck, c):
    """'stage''s mount with the proxy's 307 of one shard's HEAD held (redirect_hold: the HEAD's
    first hop, sent with the window's request, backend_head_ahead), the shard whose last item
    of the window comes first in the plan's order: the other shards' paths are given (read)
    only once their last items arrived, so after every item of the held shard began (one
    answer, in plan order), and its HEAD was asked for before the redirect it follows came
    (backend_head_follow_submit: kept, sent by the I/O thread at the 307). So while it is held
    the other two shards' HEADs reach the target and their paths are read from the stage with
    exact bytes, none of the held shard's HEAD at the target; released, its HEAD goes and its
    paths are exact from the stage; 3 redirects in all, 1 thread (held_window's counts)."""
    held_first(ck, c, 'stagefollow', 'redirect_hold',
               'the held shard\'s HEAD\'s 307 reached the proxy', 'while the 307 is held',
               more=('head_redirects', NSHARDS), heads_while=NSHARDS - 1)


def case_stageopen(env, ck, c):
    """'stage''s mount with the window's one answer paused in the middle of its last item
    (moss_pause), of shard S = the plan's last path's: every item of the window has begun, so
    the 3 shards' HEADs all go while it is paused, S's included; every path but the paused
    one is read from the stage while it lasts, S's others included (each item is given once
    it arrived and its HEAD is back: before 2026-12-04 S's waited for its last item);
    released, S's last path exact from the stage; exact counts."""
    held = c.plan[-1][1]
    pause = {'reached': threading.Event(), 'go': threading.Event()}
    others = c.plan[:-1]

    c.world.ais.moss_pause = pause
    try:
        # --stall-timeout: the paused answer is never given up while the test looks (given up,
        # its item fails and settles, and the HEAD goes whatever the rule)
        with stage_mount(c, 'stageopen', extra=['--stall-timeout', '600']) as m:
            st0, a0 = c.publish(ck, m, 'stageopen')
            ck.ok(ml.poll(pause['reached'].is_set),
                  'stageopen: the answer paused in the middle of its last item')
            heads = ml.poll(lambda: c.ais().get('s3_head', 0) - a0.get('s3_head', 0) >= NSHARDS)
            sth = m.stats()
            ck.ok(heads and not pause['go'].is_set(),
                  'stageopen: every shard\'s HEAD reached the stand-in while it is paused')
            ck.eq('stageopen: failed items, failed spans while it is paused',
                  (sth['plan_batch_failed_items'] - st0['plan_batch_failed_items'],
                   sth['plan_stage_failed'] - st0['plan_stage_failed']), (0, 0))
            held_window(ck, c, m, 'stageopen', 'while it is paused', held, others, st0, a0,
                        pause['go'].is_set, pause['go'], ('moss_paused', 1))
    finally:
        c.world.ais.moss_pause = None
        pause['go'].set()


@contextlib.contextmanager
def held_ahead(ck, c, mount, label, heads, what):
    """`mount` (entered here) with the plan published while its window's one GetBatch answer
    is held at the target before any byte (moss_hold), checked while it is held: `heads`
    HEADs redirected by the proxy (`what`), none at the target, one answer begun; then
    released. Yields the mount, its stats and the stand-in's counters before the plan."""
    hold = threading.Event()
    c.world.ais.moss_hold = hold
    try:
        with mount as m:
            st0, a0 = c.publish(ck, m, label)
            held = ml.poll(lambda: c.ais().get('moss_held', 0) > a0.get('moss_held', 0))
            ck.ok(held, '%s: the window\'s GetBatch answer held at the target' % label)
            ml.poll(lambda: c.ais().get('head_redirects', 0) - a0.get('head_redirects', 0) >=
                    heads)
            ah = c.ais()
            ck.eq('%s: while it is held: HEADs redirected by the proxy%s, HEADs at the target, '
                  'GetBatch answers begun' % (label, what),
                  (ah.get('head_redirects', 0) - a0.get('head_redirects', 0),
                   ah.get('s3_head', 0) - a0.get('s3_head', 0),
                   ah.get('moss_held', 0) - a0.get('moss_held', 0)), (heads, 0, 1))
            hold.set()
            c.world.ais.moss_hold = None
            yield m, st0, a0
    finally:
        c.world.ais.moss_hold = None
        hold.set()


def case_stageahead(env, ck, c):
    """'stage''s mount with the window's one answer held at the target before any byte
    (moss_hold): the 3 shards' HEADs' proxy hops (307s) reach the stand-in while it is held,
    none of their target HEADs; released, each kept redirect is followed once: 3 HEADs at the
    target, 3 redirects in all, 1 thread (the window's: its request and HEADs are
    submitted); every path exact from the stage."""
    with held_ahead(ck, c, stage_mount(c, 'stageahead'), 'stageahead', NSHARDS, '') as held:
        m, st0, a0 = held
        staged(m, st0, len(c.plan))
        c.read_all(ck, m, 'stageahead')
        st = settled(m, 'plan_batch_requests', st0['plan_batch_requests'] + 1,
                     {'plan_batch_heads': st0['plan_batch_heads'] + NSHARDS})
        a1 = c.ais()
        ck.eq('stageahead: HEADs at the target, HEADs redirected by the proxy (each kept '
              'redirect followed once), the mount\'s HEADs',
              (a1.get('s3_head', 0) - a0.get('s3_head', 0),
               a1.get('head_redirects', 0) - a0.get('head_redirects', 0),
               st['plan_batch_heads'] - st0['plan_batch_heads']),
              (NSHARDS, NSHARDS, NSHARDS))
        ck.eq('stageahead: GetBatch requests (mount, stand-in), GetBatch redirects, threads',
              (st['plan_batch_requests'] - st0['plan_batch_requests'],
               a1.get('moss_requests', 0) - a0.get('moss_requests', 0),
               a1.get('moss_redirects', 0) - a0.get('moss_redirects', 0),
               st['plan_batch_threads'] - st0['plan_batch_threads']), (1, 1, 1, 1))
        ck.eq('stageahead: bytes read from the stage: every path and its header check',
              st['plan_stage_read_bytes'] - st0['plan_stage_read_bytes'],
              sum(x[3] + 512 for x in c.plan))
        ck.eq('stageahead: stale objects, failed spans, object GETs, misses, read errors',
              (st['plan_batch_stale_objects'] - st0['plan_batch_stale_objects'],
               st['plan_stage_failed'] - st0['plan_stage_failed'],
               a1.get('redirects', 0) - a0.get('redirects', 0),
               st['cache_misses'] - st0['cache_misses'],
               st['read_errors'] - st0['read_errors']), (0, 0, 0, 0, 0))


def window_settled(ck, c, m, label, st0, a0, heads, items, nbytes):
    """The checks of case label once the window's one GetBatch request may go (st0, a0: the
    mount's and the stand-in's counters before): settled, the model's heads HEADs, each
    through its own 307 at the proxy, the mount's, none shared; one request and one redirect,
    its items and nbytes kept; then every path exact (read_all), no stale object, failed item,
    object GET, miss or read error."""
    st = settled(m, 'plan_batch_requests', 1,
                 {'plan_fetch_paths': st0['plan_fetch_paths'] + len(c.plan),
                  'plan_batch_heads': st0['plan_batch_heads'] + heads})
    a1 = c.ais()
    ck.eq('%s: HEADs at the target, HEADs redirected by the proxy (each kept redirect followed '
          'once), the mount\'s HEADs, shared' % label,
          (a1.get('s3_head', 0) - a0.get('s3_head', 0),
           a1.get('head_redirects', 0) - a0.get('head_redirects', 0),
           st['plan_batch_heads'] - st0['plan_batch_heads'],
           st['plan_batch_heads_shared'] - st0['plan_batch_heads_shared']),
          (heads, heads, heads, 0))
    ck.eq('%s: GetBatch requests (mount, stand-in), GetBatch redirects, items, bytes kept'
          % label,
          (st['plan_batch_requests'] - st0['plan_batch_requests'],
           a1.get('moss_requests', 0) - a0.get('moss_requests', 0),
           a1.get('moss_redirects', 0) - a0.get('moss_redirects', 0),
           st['plan_batch_items'] - st0['plan_batch_items'],
           st['plan_batch_bytes'] - st0['plan_batch_bytes']),
          (1, 1, 1, items, nbytes))
    c.read_all(ck, m, label)
    st2, a2 = m.stats(), c.ais()
    ck.eq('%s: stale objects, failed items, object GETs, misses, read errors' % label,
          (st2['plan_batch_stale_objects'] - st0['plan_batch_stale_objects'],
           st2['plan_batch_failed_items'] - st0['plan_batch_failed_items'],
           a2.get('redirects', 0) - a0.get('redirects', 0),
           st2['cache_misses'] - st0['cache_misses'],
           st2['read_errors'] - st0['read_errors']), (0, 0, 0, 0, 0))


def case_fillahead(env, ck, c):
    """'epoch''s mount (the window to the cache: a batch fill, the version rule's HEAD groups)
    with its one GetBatch answer held at the target before any byte (moss_hold): the first hop
    (the proxy's 307) of each HEAD group's HEAD has gone while it is held, one per group (2 a
    shard: each has several items), none of their target HEADs; released, each kept redirect
    is followed once: 6 HEADs at the target, still 6 redirects, the mount's 6, none shared;
    the model's items and bytes, every path exact from the cache, no object GET, no miss."""
    items, nbytes, heads = model([(x[1], x[2], x[3]) for x in c.plan], c.sizes, heads=True)
    with held_ahead(ck, c, c.mount(), 'fillahead', heads, ' (one a group)') as held:
        m, st0, a0 = held
        window_settled(ck, c, m, 'fillahead', st0, a0, heads, items, nbytes)


def case_fillslot(env, ck, c):
    """'epoch''s mount with --connections 1 (one ordinary transfer at a time: the window's
    one GetBatch request), the proxy's 307 of one shard's first version HEAD held
    (redirect_hold: a hop sent ahead as the request starts, bt_ahead): the HEADs' hops are
    small requests (backend_ais_head.c), so the window's GetBatch request reaches the proxy
    and the target while that hop is held (ordinary, the held hop took the one slot and the
    request waited behind it: what held an epoch's first window); released, exact counts (the
    model's HEADs, each through its own 307, the mount's, none shared; one request, its
    items and bytes) and every path exact, no object GET or miss."""
    items, nbytes, heads = model([(x[1], x[2], x[3]) for x in c.plan], c.sizes, heads=True)
    hold = {'match': PREFIX + c.plan[0][1], 'reached': threading.Event(),
            'go': threading.Event(), 'left': threading.Event()}
    c.world.ais.redirect_hold = hold
    try:
        # --stall-timeout: the held hop is never given up while the test looks (given up,
        # its slot is free and the request goes after that bound)
        with c.mount(['--connections', '1', '--stall-timeout', '600']) as m:
            st0, a0 = c.publish(ck, m, 'fillslot')
            ck.ok(ml.poll(hold['reached'].is_set),
                  'fillslot: a version HEAD\'s 307 held at the proxy')
            # bounded: before, the request never went while the hop was held (poll's bound)
            ml.poll(lambda: c.ais().get('moss_requests', 0) > a0.get('moss_requests', 0))
            ah = c.ais()
            ck.eq('fillslot: while a HEAD\'s 307 is held: the hop still held, GetBatch 307s at '
                  'the proxy, requests at the target',
                  (hold['left'].is_set(), ah.get('moss_redirects', 0) - a0.get('moss_redirects', 0),
                   ah.get('moss_requests', 0) - a0.get('moss_requests', 0)), (False, 1, 1))
            hold['go'].set()
            window_settled(ck, c, m, 'fillslot', st0, a0, heads, items, nbytes)
    finally:
        c.world.ais.redirect_hold = None
        hold['go'].set()


def direct_plans(ck, c, label, parts, mount):
    """`mount` (entered here, its shards listed) on a stand-in whose proxy answers HEADs itself
    (head_at_proxy), plans a then b of `parts` (name -> plan entries) published one after the
    other: yields, once each is published, the mount, its name, its entries, the HEADs at the
    stand-in an object or group of it sends (a: 2, those sent ahead answered at once and sent
    whole again; b: 1, none sent ahead after), the stats and the stand-in's counters before."""
    files = {}
    for k, part in parts.items():
        files[k] = c.env.path('plan-%s-%s' % (label, k))
        with open(files[k], 'w') as f:
            f.write(''.join(x[0] + '\n' for x in part))
    c.world.ais.head_at_proxy = True
    try:
        with mount as m:
            for s in range(NSHARDS):
                os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
            for k, per in (('a', 2), ('b', 1)):
                st0, a0 = m.stats(), c.ais()
                ck.eq('%s: plan %s rc' % (label, k), ctl(m.mnt, 'plan %s %s' % (k, files[k])),
                      None)
                yield m, k, parts[k], per, st0, a0
    finally:
        c.world.ais.head_at_proxy = False


def case_filldirect(env, ck, c):
    """'epoch''s mount (batch fills) on a stand-in whose proxy answers HEADs itself
    (head_at_proxy): plan a (shard 0's paths) sends its groups' HEADs ahead, answered at once,
    so each group's HEAD is sent whole again at its time (2 at the stand-in a group: the early
    answer proves nothing); plan b (the other shards: no unit in common) sends none ahead (1 a
    group); no redirect; exact bytes, no stale object."""
    parts = {'a': [x for x in c.plan if x[1] == c.files[0]],
             'b': [x for x in c.plan if x[1] != c.files[0]]}
    for m, k, part, per, st0, a0 in direct_plans(ck, c, 'filldirect', parts, c.mount()):
        _, nbytes, heads = model([(x[1], x[2], x[3]) for x in part], c.sizes, heads=True)
        st = settled(m, 'plan_batch_requests', st0['plan_batch_requests'] + 1,
                     {'plan_batch_heads': st0['plan_batch_heads'] + heads,
                      'plan_fetch_paths': st0['plan_fetch_paths'] + len(part)})
        bad = sum(1 for x in part if ml.read_all(os.path.join(m.mnt, x[0])) != x[4])
        st2, a1 = m.stats(), c.ais()
        ck.eq('filldirect: plan %s: HEADs at the stand-in (%d a group), redirected, '
              'the mount\'s, shared' % (k, per),
              (a1.get('s3_head', 0) - a0.get('s3_head', 0),
               a1.get('head_redirects', 0) - a0.get('head_redirects', 0),
               st['plan_batch_heads'] - st0['plan_batch_heads'],
               st['plan_batch_heads_shared'] - st0['plan_batch_heads_shared']),
              (per * heads, 0, heads, 0))
        ck.eq('filldirect: plan %s: paths with wrong bytes, GetBatch requests, bytes '
              'kept, stale objects, object GETs' % k,
              (bad, st['plan_batch_requests'] - st0['plan_batch_requests'],
               st['plan_batch_bytes'] - st0['plan_batch_bytes'],
               st2['plan_batch_stale_objects'] - st0['plan_batch_stale_objects'],
               a1.get('redirects', 0) - a0.get('redirects', 0)),
              (0, 1, nbytes, 0, 0))


def case_stagedirect(env, ck, c):
    """'stage''s mount, the stand-in's proxy answering HEADs itself (head_at_proxy): the
    first window's HEADs sent ahead are answered at once, so each is sent whole again once its
    items began (2 per object, submitted: 1 thread, the window's), and the mount sends none
    ahead after (1 per object, each on a HEAD thread: 1 + 1 per object)."""
    half = len(c.plan) // 2
    parts = {'a': c.plan[:half], 'b': c.plan[half:]}
    for m, k, part, per, st0, a0 in direct_plans(ck, c, 'stagedirect', parts,
                                                 stage_mount(c, 'stagedirect')):
        staged(m, st0, len(part))
        bad = sum(1 for x in part if ml.read_all(os.path.join(m.mnt, x[0])) != x[4])
        objs = len(set(x[1] for x in part))
        st = settled(m, 'plan_batch_requests', st0['plan_batch_requests'] + 1,
                     {'plan_batch_heads': st0['plan_batch_heads'] + objs})
        a1 = c.ais()
        ck.eq('stagedirect: plan %s: HEADs at the stand-in (%d a shard of the window), '
              'redirected, the mount\'s, threads' % (k, per),
              (a1.get('s3_head', 0) - a0.get('s3_head', 0),
               a1.get('head_redirects', 0) - a0.get('head_redirects', 0),
               st['plan_batch_heads'] - st0['plan_batch_heads'],
               st['plan_batch_threads'] - st0['plan_batch_threads']),
              (per * objs, 0, objs, 1 if k == 'a' else 1 + objs))
        ck.eq('stagedirect: plan %s: paths with wrong bytes, GetBatch requests, stale '
              'objects, bytes read from the stage' % k,
              (bad, st['plan_batch_requests'] - st0['plan_batch_requests'],
               st['plan_batch_stale_objects'] - st0['plan_batch_stale_objects'],
               st['plan_stage_read_bytes'] - st0['plan_stage_read_bytes']),
              (0, 1, 0, sum(x[3] + 512 for x in part)))


def run(env, ck):
    c = Case(env)
    try:
        only = os.environ.get('AIS_GETBATCH_ONLY')  # (a quick rerun of one case)
        if only:
            globals()['case_' + only](env, ck, c)
            return
        case_epoch(env, ck, c)
        case_windows(env, ck, c)
        case_slots(env, ck, c)
        case_refused(env, ck, c)
        case_sick(env, ck, c)
        case_cut(env, ck, c)
        case_stage(env, ck, c)  # (before version, which replaces shard 2)
        case_stageroom(env, ck, c)
        case_stagever(env, ck, c)
        case_stagerun(env, ck, c)
        case_stagecut(env, ck, c)
        case_stagehead(env, ck, c)
        case_stageopen(env, ck, c)
        case_stagefollow(env, ck, c)
        case_stageahead(env, ck, c)
        case_fillahead(env, ck, c)
        case_fillslot(env, ck, c)
        case_filldirect(env, ck, c)
        case_stagedirect(env, ck, c)
        case_stagesplit(env, ck, c)
        case_stagefirst(env, ck, c)
        case_version(env, ck, c)
        ck.eq('refused requests (the stand-in)', c.ais().get('moss_refused', 0), 0)
        # a 502 of the stand-in's own (s3rver behind it failed) is a request the mount sends
        # again: every count of the stand-in's above would be off by it
        a = c.ais()
        log('the stand-in\'s kept upstream connections found closed (sent again): %d'
            % a.get('upstream_reconnects', 0))
        ck.eq('the stand-in\'s own 502s (s3rver behind it failed)', a.get('upstream_failed', 0), 0)
    finally:
        c.world.stop()


def main():
    if not s3servers.have_s3rver():
        ml.skip_exit('s3rver is not installed (sh tests/remote/s3/install-s3rver.sh)')
    # (meson's timeout is 240 s: the watchdog's deadline ends a run before it, its diagnosis
    # printed; a whole run took 47-97 s at load 15-23 here, 134 s under ASan at load 22)
    ml.main_wrapper(run, sys.argv[1], 'remote-ais-getbatch', deadline=225)


if __name__ == '__main__':
    main()
