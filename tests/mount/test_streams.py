"""shardfs mount tests: reader streams (fetch/fetch.h), seen from real reader processes on a
mount of the link emulator (a fault-free store; its request counter is the GET count).

usage: test_streams.py SHARDFS GROUP
GROUP:
  two   two reader processes each reading a different shard in order, one read each in turn
        (reader A shards 0, 1, 2 and reader B shards 4, 5, 6 of 8 shards of 8 members of 1000
        bytes, one 64 KiB unit each), --prefetch-shards 1: each reader's move to its next
        shard fetches the shard after it: exactly 4 shard prefetches (2, 3, 6, 7) and 8 GETs,
        one per shard. One shard cursor for the mount (c787ef0) sees the other reader's read
        between every two of a reader's: no shard prefetch, 6 GETs.
  plan  a plan and an unplanned reader: the main process publishes a plan of one member of
        each of shards 7, 5, 4, 6 twice round; reader P reads the planned paths, reader Q reads
        shards 0, 1, 2 in order, P reading after every second of Q's reads. Q keeps its cursor
        through P's reads: exactly 2 shard prefetches (2, 3) and 8 GETs (the plan's 4 shards,
        Q's 4); every planned path read. One cursor for the mount (c787ef0): none, 7 GETs.
A seek resetting only its own stream's window is test_chunkstore's test_streams_seek (exact
readahead fills on the fault:// store).

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import os  # noqa: E402
import subprocess  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

SHARDS, MEMBERS = 8, 8
# a reader process: reads each path given on stdin whole, answers its length
READER = ('import sys\n'
          'for line in sys.stdin:\n'
          '    with open(line.rstrip("\\n"), "rb") as f:\n'
          '        print(len(f.read()), flush=True)\n')


def make_source(src):
    """SHARDS shards s-K.tar of MEMBERS members mM of 1000 bytes (one 64 KiB unit each)."""
    os.makedirs(src)
    for k in range(SHARDS):
        ml.write_file(os.path.join(src, 's-%d.tar' % k), ml.tar_bytes(
            [('m%d' % m, bytes([65 + k]) * 1000) for m in range(MEMBERS)]))


class Reader:
    """A reader process of its own (its own pid: its own streams in the daemon)."""

    def __init__(self, mnt):
        self.mnt = mnt
        self.p = subprocess.Popen([sys.executable, '-c', READER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

    def read(self, ck, k, m):
        self.p.stdin.write(os.path.join(self.mnt, 's-%d' % k, 'm%d' % m) + '\n')
        self.p.stdin.flush()
        got = self.p.stdout.readline().strip()
        if got != '1000':
            ck.fail('read s-%d/m%d: %r' % (k, m, got))

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=60)


def settled(m, want_fills):
    """The stats once want_fills fills ended and none runs (bounded: ml.poll's 60 s; then the
    stats as they are, for the exact checks to report)."""
    return ml.poll(lambda: (lambda s: s['fills'] >= want_fills and s['fills_inflight'] == 0
                            and s)(m.stats())) or m.stats()


def weak_trust(env):
    """--weak-etag trust where the binary has it (the emulator's ETags are nginx's, weak: a
    binary that checks them sends a probe per fill), so every request the emulator counts is
    a fill's; none for a binary without it (c787ef0's: it sends no probe)."""
    r = subprocess.run([env.shardfs, 'mount', '--help'], capture_output=True, text=True,
                       timeout=60)
    return ['--weak-etag', 'trust'] if '--weak-etag' in r.stdout + r.stderr else []


def mount(env, emu, tag):
    return ml.Mount(env, emu.url(''), cache_dir=env.path('cache-' + tag),
                    extra=weak_trust(env) + ['--cache-size', '64M', '--warm', 'off',
                           '--prefetch-shards', '1'])


def group_two(env, ck):
    from shardfs_test import linkemu
    src = env.path('src')
    make_source(src)
    emu = linkemu.Emu(src, 5, 60, env.tmp, 'two', shardfs=env.shardfs)
    try:
        with mount(env, emu, 'two') as m:
            st0, g0 = m.stats(), emu.stats()['requests']
            a, b = Reader(m.mnt), Reader(m.mnt)
            for k in range(3):
                for i in range(MEMBERS):
                    a.read(ck, k, i)
                    b.read(ck, 4 + k, i)
            a.close()
            b.close()
            st = settled(m, st0['fills'] + 8)
            gets = emu.stats()['requests'] - g0
            log('two readers in order: shard_prefetches %d, fills %d, GETs %d'
                % (st['shard_prefetches'], st['fills'] - st0['fills'], gets))
            ck.eq('two readers in order: shard prefetches', st['shard_prefetches'], 4)
            ck.eq('two readers in order: fills', st['fills'] - st0['fills'], 8)
            ck.eq('two readers in order: GETs (one a shard)', gets, 8)
            ck.eq('read_errors', st['read_errors'], 0)
    finally:
        emu.stop()


def group_plan(env, ck):
    from shardfs_test import linkemu
    src = env.path('src')
    make_source(src)
    order = [7, 5, 4, 6]
    emu = linkemu.Emu(src, 5, 60, env.tmp, 'plan', shardfs=env.shardfs)
    try:
        with mount(env, emu, 'plan') as m:
            st0, g0 = m.stats(), emu.stats()['requests']
            pf = env.path('plan.txt')
            with open(pf, 'w') as f:
                f.write(''.join('s-%d/m%d\n' % (order[i % 4], i) for i in range(8)))
            ck.eq('plan rc', ml.control_errno(m.mnt, 'plan p ' + pf), None)
            p, q = Reader(m.mnt), Reader(m.mnt)
            planned = 0
            for k in range(3):
                for i in range(MEMBERS):
                    q.read(ck, k, i)
                    if i % 2 == 0 and planned < 8:
                        p.read(ck, order[planned % 4], planned)
                        planned += 1
            p.close()
            q.close()
            st = settled(m, st0['fills'] + 8)
            gets = emu.stats()['requests'] - g0
            log('a plan and a reader in order: plan_hits %d, shard_prefetches %d, fills %d, '
                'GETs %d' % (st['plan_hits'], st['shard_prefetches'], st['fills'] - st0['fills'],
                             gets))
            ck.eq('planned reads', planned, 8)
            ck.eq('plan_hits', st['plan_hits'] - st0['plan_hits'], 8)
            ck.eq('a plan and a reader in order: shard prefetches', st['shard_prefetches'], 2)
            ck.eq('a plan and a reader in order: fills', st['fills'] - st0['fills'], 8)
            ck.eq('a plan and a reader in order: GETs (one a shard)', gets, 8)
            ck.eq('read_errors', st['read_errors'], 0)
    finally:
        emu.stop()


GROUPS = {'two': group_two, 'plan': group_plan}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, 'streams-')
