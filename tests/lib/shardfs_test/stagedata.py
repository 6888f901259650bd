"""The data of the stage's mount tests (tests/mount/test_stage.py, test_plan_memory.py): 2
shards of PER_SHARD planned samples of SAMPLE bytes each, FILLER bytes of unplanned filler
after each (far more than their --plan-gap: each sample is a span of its own), a 300,000-byte
head and tail member, GNU tar, every mtime 1700000000, sidecar indexes; the plan is the samples
shuffled by the caller's rng."""

import io
import os
import tarfile

SAMPLE, FILLER, PER_SHARD = 1200000, 2500000, 6


def make_source(env, rng):
    """The shards (env.path('src')) and their sidecar indexes; (src, the plan [(shard,
    member)], {(shard, member): bytes})."""
    src = env.path('src')
    os.makedirs(src)
    want = {}
    for s in range(2):
        shard = 'shard-%06d' % s
        with tarfile.open(os.path.join(src, shard + '.tar'), 'w',
                          format=tarfile.GNU_FORMAT) as tf:
            members = [('a-head.bin', 300000)]
            for k in range(PER_SHARD):
                members.append(('s%d.bin' % k, SAMPLE))
                members.append(('u%d.bin' % k, FILLER))
            members.append(('z-tail.bin', 300000))
            for name, size in members:
                data = rng.randbytes(size)
                ti = tarfile.TarInfo(name)
                ti.size = size
                ti.mtime = 1700000000
                tf.addfile(ti, io.BytesIO(data))
                if name.startswith('s'):
                    want[(shard, name)] = data
    r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('icache'), src])
    if r.returncode != 0:
        raise RuntimeError('shardfs index --sidecar failed')
    plan = sorted(want)
    rng.shuffle(plan)
    return src, plan, want


def read_or_errno(path):
    """The whole file's bytes, or the errno its open or read failed with."""
    try:
        with open(path, 'rb') as f:
            return f.read()
    except OSError as e:
        return e.errno
