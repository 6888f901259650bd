"""Row K4: the CPU cost of checking cached units after their data file changed (inotify on
every data file in use, cachetier/README.md "Checked bytes"), on cached data.

Run: /usr/bin/python3 tests/bench/livecheck_bench.py build/shardfs [--mb 256] [--passes 4]
     [--runs 5] [--dir /var/tmp]

Serves a source of 4 shards (--mb MiB in all, random bytes) with nginx, mounts it twice on one
cache directory: one daemon as is (the check on), one with SHARDFS_BENCH_NO_LIVE_CHECK=1 in its
environment (the check off: units this process filled or checked are never checked again). Both
read everything once (fills, first reads checked), then, alternating between the two, each
run reads every shard --passes times in 1 MiB reads, the mount's page cache dropped before
each file (POSIX_FADV_DONTNEED: every read reaches the daemon, whose data files stay in the
page cache). Nothing writes the data files meanwhile: this is the cost of the watch on cached
data (one read() of the inotify fd per FUSE read), not of re-checks after changes. Prints the
daemon's CPU (utime + stime) per GB read, median of --runs, for each, and the difference.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import web  # noqa: E402

MiB = 1 << 20


def make_source(src, mb, seed):
    rng = random.Random(seed)
    os.makedirs(src)
    for i in range(4):
        stage = os.path.join(src, 'm%d.bin' % i)
        with open(stage, 'wb') as f:
            left = mb * MiB // 4
            while left:
                n = min(left, 4 * MiB)
                f.write(rng.randbytes(n))
                left -= n
        with tarfile.open(os.path.join(src, 'shard-%d.tar' % i), 'w',
                          format=tarfile.GNU_FORMAT) as t:
            t.add(stage, arcname='m%d.bin' % i)
        os.unlink(stage)


def daemon_cpu_s(pid):
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def read_all(mnt, names, passes):
    total = 0
    for _ in range(passes):
        for n in names:
            fd = os.open(os.path.join(mnt, n), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                while True:
                    b = os.read(fd, MiB)
                    if not b:
                        break
                    total += len(b)
            finally:
                os.close(fd)
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('shardfs')
    ap.add_argument('--mb', type=int, default=256)
    ap.add_argument('--passes', type=int, default=4)
    ap.add_argument('--runs', type=int, default=5)
    ap.add_argument('--dir', default='/var/tmp')
    a = ap.parse_args()
    shardfs = os.path.abspath(a.shardfs)
    tmp = tempfile.mkdtemp(prefix='shardfs-livecheck-bench.', dir=a.dir)
    src, cache = os.path.join(tmp, 'src'), os.path.join(tmp, 'cache')
    make_source(src, a.mb, 1)
    ng = web.Nginx(os.path.join(tmp, 'nginx'), src, access_log=False)
    mounts = {}
    try:
        ng.start()
        for mode in ('on', 'off'):
            mnt = os.path.join(tmp, 'mnt-' + mode)
            os.makedirs(mnt)
            env = dict(os.environ)
            env.pop('SHARDFS_BENCH_NO_LIVE_CHECK', None)
            if mode == 'off':
                env['SHARDFS_BENCH_NO_LIVE_CHECK'] = '1'
            subprocess.run([shardfs, 'mount', '--warm', 'off', '--cache-dir', cache,
                            ng.url('json/'), mnt], check=True, env=env)
            with open(os.path.join(mnt, '.shardfs', 'stats')) as f:
                mounts[mode] = (mnt, json.load(f)['pid'])
        names = sorted(n for n in os.listdir(mounts['on'][0]) if n.endswith('.tar'))
        for mode in ('on', 'off'):  # fills, first reads (checked in both)
            read_all(mounts[mode][0], names, 1)
        per_gb = {'on': [], 'off': []}
        for r in range(a.runs):
            for mode in (('on', 'off') if r % 2 == 0 else ('off', 'on')):
                mnt, pid = mounts[mode]
                c0 = daemon_cpu_s(pid)
                n = read_all(mnt, names, a.passes)
                per_gb[mode].append((daemon_cpu_s(pid) - c0) / (n / 1e9) * 1000)
        on, off = statistics.median(per_gb['on']), statistics.median(per_gb['off'])
        print('K4 livecheck (cached data, %d MiB x %d passes, median of %d): daemon CPU '
              '%.1f ms/GB with the check, %.1f without, %+.1f ms/GB (%.3f CPU-s per GB)'
              % (a.mb, a.passes, a.runs, on, off, on - off, (on - off) / 1000))
        print('  runs with: %s' % ' '.join('%.1f' % x for x in per_gb['on']))
        print('  runs without: %s' % ' '.join('%.1f' % x for x in per_gb['off']))
    finally:
        for mnt, _ in mounts.values():
            subprocess.run([shardfs, 'umount', mnt])
        ng.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
