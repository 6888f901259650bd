"""Planned reads over sidecar-indexed shards, shared by the mount tests of fills and plans
(tests/mount/test_fills.py, test_plan_conns.py, test_plan.py): the shards and their members'
extents, the members' reference bytes, the GETs a SlowProxy saw and its hold, publishing a
plan file on a mount's control file, and the plans the mount lists (.shardfs/plans) with their fnv.

A member is a tuple (shard file name, path in the mount, offset of its data in the shard, size).
"""

import contextlib
import io
import os
import random
import tarfile

from . import mount as ml


def sidecar_source(env, ck, seed, per_shard, shards=4, width=2, mtime=0):
    """`shards` shards shard-NNNNNN.tar in env's src/ of `per_shard` members k<s>_<k>.bin (k
    written with `width` digits, tar mtime `mtime`) of 60-140 KB of random.Random(seed)'s bytes,
    indexed with 'shardfs index --sidecar' (its rc checked). Returns (src, members, shard_size):
    the members but the first 2 and the last 3 of each shard (the sidecar's check reads the
    shard's ends), shuffled by the same generator; shard_size {shard file name: bytes}."""
    src = env.path('src')
    os.makedirs(src)
    rng = random.Random(seed)
    members, shard_size = [], {}
    for s in range(shards):
        name = 'shard-%06d.tar' % s
        path = os.path.join(src, name)
        with tarfile.open(path, 'w', format=tarfile.GNU_FORMAT) as tf:
            for k in range(per_shard):
                data = rng.randbytes(rng.randrange(60000, 140000))
                ti = tarfile.TarInfo('k%d_%0*d.bin' % (s, width, k))
                ti.size = len(data)
                ti.mtime = mtime
                tf.addfile(ti, io.BytesIO(data))
        shard_size[name] = os.path.getsize(path)
        with tarfile.open(path) as tf:
            ms = tf.getmembers()
        for ti in ms[2:-3]:
            members.append((name, 'shard-%06d/%s' % (s, ti.name), ti.offset_data, ti.size))
    r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('icache'), src])
    ck.eq('shardfs index --sidecar rc', r.returncode, 0)
    rng.shuffle(members)
    return src, members, shard_size


def ref(src, x):
    """Member x's bytes, read from its shard in src."""
    with open(os.path.join(src, x[0]), 'rb') as f:
        f.seek(x[2])
        return f.read(x[3])


def read(path):
    with open(path, 'rb') as f:
        return f.read()


def tar_gets(px):
    """The GETs of shards px (a web.SlowProxy) saw, copied under its lock."""
    with px.lock:
        return [dict(r) for r in px.gets if r['path'].endswith('.tar')]


# 'prefetch-check''s answer while a prefetch of one of the objects still runs
# (fs/core/include/fs_core_ctl.h FS_CTL_CHECK_RUNNING)
CHECK_RUNNING = 1


def ranges_running(m):
    """Does a planned range of mount m still wait or run: 'prefetch-check 0' of the whole mount
    answers RUNNING while an object has ranges queued or prefetch fills in flight
    (cachetier_obj_prefetch_state). It starts no fill and is no reader's job."""
    return ml.control(m.mnt, 'prefetch-check 0\n') == CHECK_RUNNING


def fetched(m, paths, base=0, what='the plan fetched', timeout=ml.POLL_TIMEOUT):
    """Wait until mount m has handed paths planned paths over (plan_fetch_paths - base) and
    every range it handed over has ended (ranges_running): its stats then. plan_fetch_paths
    counts a path once its ranges are queued, and fills_inflight is 0 before the first of them
    starts and between two: neither says alone that the plan's fills ran (a busy machine's
    fill thread starts them late)."""
    def done():
        st = m.stats()
        if st['plan_fetch_paths'] - base != paths or ranges_running(m):
            return None
        st = m.stats()
        return st if st['fills_inflight'] == 0 else None
    return ml.poll(done, timeout=timeout, what=what)


def hold(px):
    """Hold every ranged GET of a shard at px after its first byte, from now on."""
    px.released.clear()
    px.hold_bytes = 1
    px.hold_paths = lambda p: p.endswith('.tar')
    px.reset()


@contextlib.contextmanager
def held_proxy_mount(env, ck, rng, procs, before=None):
    """ml.seeded_shards(env, rng) (then before(src), when given) served by nginx through a
    web.SlowProxy, mounted (--warm off, no shards ahead): yields (m, px, names) once the root
    lists the shards (checked when before is None). At the end, after the unmount: each
    process of procs (a list the caller fills) still running is let go (px released) and
    waited for, then the proxy and nginx end."""
    from . import web
    src, names = ml.seeded_shards(env, rng)
    if before:
        before(src)
    ng = web.Nginx(env.path('nginx'), src).start()
    px = web.SlowProxy(ng.port)
    try:
        with ml.Mount(env, px.url('json/'), cache_dir=env.path('cache'),
                      extra=['--warm', 'off', '--prefetch-shards', '0']) as m:
            if before is None:
                ck.eq('root listing', sorted(os.listdir(m.mnt)),
                      sorted(list(names) + [n + '.tar' for n in names]))
            yield m, px, names
    finally:
        for p in procs:
            if p and p.poll() is None:
                px.release()
                p.wait(120)
        px.close()
        ng.stop()


def write_plan(pf, paths):
    """Write the plan file pf: one mount path a line."""
    with open(pf, 'w') as f:
        f.write(''.join(p + '\n' for p in paths))


def publish(ck, mnt, name, pf, paths=None, what=None):
    """'plan NAME PF' on mnt's control file, pf written first from paths unless None; checks
    that the mount took it (the check named `what`, by default 'plan NAME rc')."""
    if paths is not None:
        write_plan(pf, paths)
    ck.eq(what or 'plan %s rc' % name, ml.control_errno(mnt, 'plan %s %s' % (name, pf)), None)


def plans(mnt):
    """{name: dict} of mnt's .shardfs/plans: the numeric fields as ints, fnv (hex) as an int."""
    with open(os.path.join(mnt, '.shardfs', 'plans'), 'rb') as f:
        lines = f.read().decode().split('\n')
    head = lines[0].split('\t')
    out = {}
    for ln in lines[1:]:
        f = ln.split('\t')
        if len(f) == len(head):
            d = dict(zip(head, f))
            for k in head[1:-1]:  # pid, paths, missing, failed, read, position, bytes
                d[k] = int(d[k])
            if 'fnv' in d:
                d['fnv'] = int(d['fnv'], 16)
            out[d['name']] = d
    return out


def plan_fnv(paths):
    """A plan's fnv, as .shardfs/plans lists it: FNV-1a 64 over each path (bytes, or str in
    UTF-8) followed by a newline."""
    h = 0xcbf29ce484222325
    for p in paths:
        for c in (p.encode() if isinstance(p, str) else p) + b'\n':
            h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return h
