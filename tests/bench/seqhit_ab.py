#!/usr/bin/python3
"""A/B of a sequential reader of a remote shard through the cache tier, between builds, on a
machine shared with other work (it drops no machine-wide cache: only its own files' pages).

    /usr/bin/python3 tests/bench/seqhit_ab.py [--rounds 4] [--shard-mb 128] NAME=BIN...

One shard of --shard-mb MB (members of 100 KB) served by nginx on loopback (the test toolkit's
shardfs_test.web). Each round runs every build once, in a rotating order: a fresh mount with an
empty cache directory (--warm off), then
  cold  `cat` of the shard: every byte fetched and cached as it is read (the fills' units
        land just ahead of the reader: the next unit often not yet cached);
  warm  the cache's data files written out and their pages dropped (fsync, then
        POSIX_FADV_DONTNEED of each file of the cache directory), the mount's file's pages
        dropped the same way, `cat` of the shard again: every read a hit whose next unit is
        cached (the kernel's readahead of the data file is what makes it fast).
Prints per build and phase the median (min-max) of the wall time (MB/s) and of the daemon's CPU-s
per GB (utime + stime of the daemon over the cat), and the warm phase's fetched bytes (0: all
hits). Root not needed; fusermount3 and nginx are (scripts/install-deps.sh --test).
"""

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import web  # noqa: E402


def make_shard(path, mb):
    rng = random.Random(1)
    with tarfile.open(path, 'w', format=tarfile.GNU_FORMAT) as t:
        n = mb * 10
        for i in range(n):
            b = rng.randbytes(100000)
            ti = tarfile.TarInfo('s%06d.bin' % i)
            ti.size = len(b)
            ti.mtime = 1700000000
            import io
            t.addfile(ti, io.BytesIO(b))


def cpu_s(pid):
    with open('/proc/%d/stat' % pid) as f:
        v = f.read().rsplit(')', 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf('SC_CLK_TCK')


def stats(mnt):
    with open(os.path.join(mnt, '.shardfs/stats')) as f:
        return f.read()


def stat(mnt, key):
    return int(re.search(r'"%s":\s*"?([0-9]+)' % key, stats(mnt)).group(1))


def drop_file(path):
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        try:
            os.fsync(fd)
        except OSError:
            pass
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cat(path):
    t = time.monotonic()
    subprocess.run(['cat', path], stdout=subprocess.DEVNULL, check=True)
    return time.monotonic() - t


def one(bin_, url, w, shard, size):
    mnt, cache = os.path.join(w, 'mnt'), os.path.join(w, 'cache')
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(mnt, exist_ok=True)
    subprocess.run([bin_, 'mount', '--cache-dir', cache, '--warm', 'off', url, mnt], check=True,
                   timeout=120)
    try:
        pid = stat(mnt, 'pid')
        p = os.path.join(mnt, shard)
        os.stat(p)  # the index built before the timed read
        c0 = cpu_s(pid)
        cold = cat(p)
        c1 = cpu_s(pid)
        for d, _, files in os.walk(cache):
            for n in files:
                drop_file(os.path.join(d, n))
        drop_file(p)
        f0 = stat(mnt, 'bytes_fetched')
        c2 = cpu_s(pid)
        warm = cat(p)
        c3 = cpu_s(pid)
        fetched = stat(mnt, 'bytes_fetched') - f0
    finally:
        subprocess.run(['fusermount3', '-u', mnt], check=False)
        shutil.rmtree(cache, ignore_errors=True)
    return dict(cold_mbs=size / cold / 1e6, cold_cpu=(c1 - c0) / (size / 1e9),
                warm_mbs=size / warm / 1e6, warm_cpu=(c3 - c2) / (size / 1e9), fetched=fetched)


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument('--rounds', type=int, default=4)
    ap.add_argument('--shard-mb', type=int, default=128)
    ap.add_argument('sides', nargs='+')
    a = ap.parse_args()
    sides = [(s.split('=', 1)[0], os.path.realpath(s.split('=', 1)[1])) for s in a.sides]
    w = tempfile.mkdtemp(prefix='shardfs-seqhit-', dir='/var/tmp')
    ng = None
    try:
        root = os.path.join(w, 'src')
        os.makedirs(root)
        shard = 'seq-000000.tar'
        make_shard(os.path.join(root, shard), a.shard_mb)
        size = os.path.getsize(os.path.join(root, shard))
        ng = web.Nginx(os.path.join(w, 'nginx'), root, access_log=False)
        ng.start()
        url = ng.url('files/seq-{000000..000000}.tar')
        res = {n: [] for n, _ in sides}
        for r in range(a.rounds):
            order = sides[r % len(sides):] + sides[:r % len(sides)]
            for n, b in order:
                load = os.getloadavg()[0]
                x = one(b, url, w, shard, size)
                res[n].append(x)
                print('round %d %s: load %.1f, cold %.0f MB/s %.3f CPU-s/GB, warm %.0f MB/s '
                      '%.3f CPU-s/GB, warm fetched %d' % (
                          r + 1, n, load, x['cold_mbs'], x['cold_cpu'], x['warm_mbs'],
                          x['warm_cpu'], x['fetched']), flush=True)
        for n, _ in sides:
            for k in ('cold_mbs', 'cold_cpu', 'warm_mbs', 'warm_cpu'):
                v = [x[k] for x in res[n]]
                print('%s %s: median %.3f (%.3f-%.3f)' % (n, k, statistics.median(v), min(v),
                                                          max(v)))
    finally:
        if ng:
            ng.stop()
        shutil.rmtree(w, ignore_errors=True)


if __name__ == '__main__':
    main()
