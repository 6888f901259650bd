#!/usr/bin/python3
"""A cache disk that runs out in the middle of a fill must not keep what the fill wrote.

usage: test_nearfull.py SHARDFS

nginx on 127.0.0.1 serves two GNU tar shards of seeded random members (SHARDFS_TEST_SEED). The
cache dir is on an 8 MiB tmpfs, nothing cached yet (nothing to evict); another
program's file takes all but 300 KiB of the disk, and shard B's raw .tar is read whole (1 MiB
chunks, no warm, no prefetch of shards): its first chunk's fill writes until the disk is full
(a short write, then ENOSPC). The bytes are exact and read_errors 0. Then the filler goes, and
every byte the cache's data files hold on the disk must be one the mount counts: the data files'
allocated blocks (st_blocks) at most cache_bytes_used plus one page per data file (a unit at an
object's end is allocated to a whole page). Then B is read again with room (exact bytes) and the
same bound holds.

Before the writer's fl->wtop, a fill that failed on ENOSPC punched only the bytes its completed
pwritev calls wrote (up to fl->wnext): the failing call's short write stayed allocated and
uncounted, never evicted (cache_bytes_used 0 while a tmpfs cache filled by a planned epoch was
at 100 %, every later read bypassing the cache until remount). Sizes are exact, no timing.
"""
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))

from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import shardgen as sg  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

PAGE = 4096
FREE = 300 * 1024


def data_files(cache):
    return [p for p in glob.glob(os.path.join(cache, 'v1', '*', 'data', '*'))
            if re.fullmatch(r'[0-9a-f]{16}', os.path.basename(p))]


def allocated(cache):
    files = data_files(cache)
    return sum(os.stat(p).st_blocks * 512 for p in files), len(files)


def check_counted(ck, label, m, cache):
    alloc, n = allocated(cache)
    used = m.stats()['cache_bytes_used']
    log('%s: data files %d, allocated %d, cache_bytes_used %d' % (label, n, alloc, used))
    ck.ok(alloc <= used + n * PAGE,
          '%s: the data files hold %d bytes on the disk, the mount counts %d (%d files): %d '
          'bytes written and never counted' % (label, alloc, used, n, alloc - used))


def make_source(env):
    src = env.path('src')
    for name in ('a', 'b'):
        spec = []
        for i in range(6):
            key = '%s_%04d' % (name, i)
            spec.append(('f', key + '.bin', sg.rbytes(env.rng, env.rng.randrange(150000, 300000)),
                         0o644, sg.T0 + i))
        stage = env.path('stage-' + name)
        sg.make_tree(stage, spec)
        os.makedirs(src, exist_ok=True)
        subprocess.run(['tar', '--format=gnu', '-cf', os.path.join(src, name + '.tar'), '-C',
                        stage, '.'], check=True, timeout=60)
    for d, _, files in os.walk(env.tmp):
        os.chmod(d, 0o755)
        for fn in files:
            os.chmod(os.path.join(d, fn), 0o644)
    return src


def run(env, ck):
    if os.geteuid() != 0:
        raise ml.Skip('mounting a tmpfs needs root', 'host')
    src = make_source(env)
    with open(os.path.join(src, 'b.tar'), 'rb') as f:
        want = f.read()
    ng = web.Nginx(env.path('nginx'), src).start()
    disk = ml.tmpfs(env.path('tmpfs'), '8m')
    try:
        cache = os.path.join(disk, 'cache')
        opts = ['--chunk-size', '1M', '--warm', 'off', '--prefetch-shards', '0',
                '--log-file', env.path('daemon.log')]
        with ml.Mount(env, ng.url('json/'), cache_dir=cache, extra=opts) as m:
            # nothing cached: nothing to evict when the disk runs out (b.tar's raw bytes need
            # no index)
            ck.eq('listed', sorted(os.listdir(m.mnt)), ['a', 'a.tar', 'b', 'b.tar'])
            used0 = m.stats()['cache_bytes_used']
            st = os.statvfs(disk)
            filler = os.path.join(disk, 'filler')
            with open(filler, 'wb') as f:
                os.posix_fallocate(f.fileno(), 0, st.f_bavail * st.f_frsize - FREE)
            st = os.statvfs(disk)
            ck.eq('free bytes left by the filler', st.f_bavail * st.f_frsize, FREE)
            with open(os.path.join(m.mnt, 'b.tar'), 'rb') as f:
                got = f.read()
            ck.eq('nearly full: bytes read', len(got), len(want))
            ck.ok(got == want, 'nearly full: the bytes differ')
            os.unlink(filler)
            ck.ok(m.stats()['cache_bytes_used'] - used0 < len(want),
                  'nearly full: b.tar was cached whole: the disk did not run out')
            check_counted(ck, 'after the fill that ran out', m, cache)
            ck.eq('nearly full: read_errors', m.stats()['read_errors'], 0)
        # with room, a new mount of the same cache dir
        with ml.Mount(env, ng.url('json/'), cache_dir=cache, extra=opts) as m:
            subprocess.run(['sh', '-c', 'echo 1 > /proc/sys/vm/drop_caches'], timeout=60)
            with open(os.path.join(m.mnt, 'b.tar'), 'rb') as f:
                got = f.read()
            ck.ok(got == want, 'with room: the bytes differ')
            check_counted(ck, 'with room', m, cache)
    finally:
        ng.stop()
        ml.untmpfs(disk)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if not os.path.exists(web.NGINX):
        return ml.skip_status('%s is not installed (scripts/install-deps.sh --test)' % web.NGINX)
    ml.main_wrapper(run, sys.argv[1], 'cache-nearfull', deadline=170)


if __name__ == '__main__':
    sys.exit(main())
