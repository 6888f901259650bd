#!/usr/bin/env python3
"""A brace pattern that names far more shards than the server has: the listing shows exactly
the shards that exist, and the log stays short.

    test_bracegaps.py SHARDFS

nginx on 127.0.0.1 serves 4 shards, shard-000000..000003.tar (seeded members,
SHARDFS_TEST_SEED); the mount is of .../shard-{000000..019999}.tar (20,000 names, 19,996 not on
the server), --warm off (the listing alone learns the names). Then:
  - os.listdir of the mount point, twice: exactly the 4 shards and their 4 member directories
    (the kernel keeps a listing: the first must be right). Before 2026-11-30 one READDIR
    passed every name the server does not have (they are left out) and went on into names not
    learned yet, listed by name: 3,144 entries here (8,578 for a pattern of 50,000), 1,568 of
    them ENOENT at find's lookup, and the second listing the same (kept); 9 checks failed;
  - find of the mount point: exit 0, nothing on stderr, the 4 shards' members;
  - brace_missing 19,996; the log names exactly 8 missing shards one by one and gives the rest
    as counts that add up to 19,988 (before: 19,996 lines, one a name).
Exact counts; no timing.
"""
import os
import re
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))

from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

NAMES = 20000
HAVE = 4


def make_source(env):
    src = env.path('src')
    os.makedirs(src)
    data = env.path('m.bin')
    for s in range(HAVE):
        with tarfile.open(os.path.join(src, 'shard-%06d.tar' % s), 'w',
                          format=tarfile.GNU_FORMAT) as t:
            for k in range(3):
                with open(data, 'wb') as f:
                    f.write(bytes(env.rng.getrandbits(8) for _ in range(env.rng.randrange(
                        100, 3000))))
                t.add(data, arcname='k%d_%d.bin' % (s, k))
    for d, _, files in os.walk(env.tmp):
        os.chmod(d, 0o755)
        for fn in files:
            os.chmod(os.path.join(d, fn), 0o644)
    return src


def run(env, ck):
    src = make_source(env)
    ng = web.Nginx(env.path('nginx'), src).start()
    logf = env.path('daemon.log')
    want = sorted(['shard-%06d' % s for s in range(HAVE)] +
                  ['shard-%06d.tar' % s for s in range(HAVE)])
    try:
        url = ng.url('files/shard-{000000..%06d}.tar' % (NAMES - 1))
        with ml.Mount(env, url, cache_dir=env.path('cache'),
                      extra=['--warm', 'off', '--log-file', logf]) as m:
            for i in range(2):
                got = sorted(os.listdir(m.mnt))
                ck.eq('listing %d: entries' % (i + 1), len(got), len(want))
                ck.ok(got == want, 'listing %d: %r...' % (i + 1, got[:12]))
            r = subprocess.run(['find', m.mnt], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=120)
            err = r.stderr.decode(errors='replace')
            ck.eq('find: exit', r.returncode, 0)
            ck.eq('find: stderr lines', len(err.splitlines()), 0)
            found = [p[len(m.mnt) + 1:] for p in r.stdout.decode().splitlines()[1:]]
            ck.eq('find: paths', len(found), len(want) + HAVE * 3)
            ck.eq('brace_missing', m.stats()['brace_missing'], NAMES - HAVE)
    finally:
        ng.stop()
    with open(logf, errors='replace') as f:
        text = f.read()
    one = re.findall(r': named by the pattern but not on the server', text)
    more = [int(x) for x in re.findall(r'(\d+) more names? of the pattern not on the server',
                                       text)]
    log('missing names logged one by one: %d; counts: %r' % (len(one), more))
    ck.eq('missing names logged one by one', len(one), 8)
    ck.eq('missing names logged as counts', sum(more), NAMES - HAVE - 8)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if not os.path.exists(web.NGINX):
        return ml.skip_status('%s is not installed (scripts/install-deps.sh --test)' % web.NGINX)
    ml.main_wrapper(run, sys.argv[1], 'http-bracegaps', deadline=170)


if __name__ == '__main__':
    sys.exit(main())
