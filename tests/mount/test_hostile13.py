#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass (round 13), each finding replayed as a test.

usage: test_hostile13.py SHARDFS GROUP
GROUP:
  prefetch-unfit  ROUNDS seeded rounds (SHARDFS_TEST_SEED) of an nginx source of shards of
             random sizes, 1.5 to 3 times a random --cache-size (2M to 6M) with a random
             --chunk-size (128K to 1M), each on a fresh cache directory: 'shardfs prefetch'
             of everything exits 0; its up-front "about Y will not fit" is exactly the bytes
             asked less the cache's room before it (cache_room_bytes), its summary's "X did not
             fit" exactly prefetch_run_unfit_bytes; when the two read differently the summary
             says so, exactly: "(said up front: about Y; D more, as a fill is whole ...; the
             cache's room now: R)", D = X - Y and R = cache_room_bytes after it, and says
             nothing more when they read the same. Before (fs/tools/fs_prefetch.c at 163d92e):
             "about 1.67 MiB will not fit", then "1.69 MiB did not fit", unexplained.
  tool-names ROUNDS seeded hostile names (SHARDFS_TEST_SEED; a newline, a tab, a backslash,
             bytes that are not UTF-8, ...): 'shardfs pack' of a missing INPUT_DIR so named,
             of an empty one, into a missing output directory so named, and of a directory
             holding a symbolic link so named, and 'shardfs index' of a directory holding a
             shard so named that it refuses (a .tar.gz past --max-decoded-size): each exits as
             before and says it on one line (index's summary says how many failed),
             the name quoted by fs_quote's rule (rewritten in test_cli_paths.py), exact.
             Before (fs/tools at 163d92e): the names as their raw bytes (a newline split the
             message), and index's line came from the core, unquoted.
  mount-names ROUNDS seeded hostile names: 'shardfs mount' of a missing SOURCE, a missing
             MOUNTPOINT, a MOUNTPOINT that is a file, a --cache-size value, an unknown option,
             an argument too many, a --log-file in a missing directory, and 'shardfs index
             --ca-file' of a missing file, each so named: the same exit status and stderr as
             with a plain name, the name quoted by fs_quote's rule (one line). Before (the core
             and fs/fuse at 163d92e): their raw bytes.
  gaps-bound 3 seeded .cls values more than 1,000,000 above 0 under --layout imagefolder
             --class-gaps empty: the mount is refused (exit 1) saying why and what to do, exact.
             Before (fs/core/fs_if_view.c at 163d92e): only "cannot build the view: Argument
             list too long" (the log, in the cache directory, named the value).
"""
import gzip
import os
import random
import re
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import hostile  # noqa: E402
from shardfs_test import web  # noqa: E402

from test_cli_paths import quote  # noqa: E402  (fs_quote, rewritten from its contract)
from test_hostile_ctl import PIECES  # noqa: E402

log = ml.log
KiB, MiB = 1 << 10, 1 << 20
ROUNDS = 6


def group_prefetch_unfit(env, ck):
    if not shutil.which('nginx'):
        raise ml.Skip('nginx is not installed (sh scripts/install-deps.sh --test)')
    rng = random.Random(env.seed)
    differ = 0
    for r in range(ROUNDS):
        cache = rng.randrange(2, 7) * MiB
        chunk = (128 * KiB) << rng.randrange(4)
        src = env.path('src-%d' % r)
        os.makedirs(src)
        total, target, i = 0, cache * rng.uniform(1.5, 3), 0
        while total < target:
            p = os.path.join(src, 's%02d.tar' % i)
            ml.write_file(p, ml.tar_bytes([('x.bin', rng.randbytes(
                rng.randrange(10 * KiB, 3 * chunk)))]))
            total += os.path.getsize(p)
            i += 1
        label = 'round %d (--cache-size %s --chunk-size %s, %d shards, %d B)' % (
            r, hostile.human(cache), hostile.human(chunk), i, total)
        ng = web.Nginx(env.path('nginx-%d' % r), src).start()
        try:
            m = ml.Mount(env, ng.url('json/'), mountpoint=env.path('mnt-%d' % r),
                         cache_dir=env.path('cache-%d' % r),
                         extra=['--cache-size', str(cache), '--chunk-size', str(chunk),
                                '--warm', 'off', '--prefetch-shards', '0', '--min-free', '0'])
            with m:
                room0 = m.stats()['cache_room_bytes']
                res = env.run([env.shardfs, 'prefetch', m.mnt], timeout=120)
                out = res.stdout.decode(errors='replace')
                log('%s: rc=%r\n%s%s' % (label, res.returncode, out,
                                          res.stderr.decode(errors='replace')))
                st = m.stats()
                unfit, room = st['prefetch_run_unfit_bytes'], st['cache_room_bytes']
                ck.eq('%s: exit' % label, res.returncode, 0)
                ck.eq('%s: prefetch_run_bytes' % label, st['prefetch_run_bytes'], total)
                up = total - room0
                ck.ok(up > 0, '%s: the room before (%d) holds the dataset' % (label, room0))
                ck.eq('%s: the up-front figure' % label,
                      re.findall(r'about (\S+ \S+) will not fit', out), [hostile.human(up)])
                done = [ln for ln in out.splitlines() if ln.startswith('prefetch: done: ')]
                ck.eq('%s: one summary' % label, len(done), 1)
                tail = done[0].split(' did not fit', 1) if done else ['', '']
                ck.ok(tail[0].endswith(', ' + hostile.human(unfit)),
                      '%s: the summary\'s figure is not %s: %r' % (
                          label, hostile.human(unfit), done))
                if hostile.human(unfit) == hostile.human(up):
                    ck.eq('%s: the same figures, nothing more said' % label, tail[1:], [''])
                    continue
                differ += 1
                if unfit > up:
                    want = (' (said up front: about %s; %s more, as a fill is whole, a chunk '
                            'of --chunk-size or an object\'s last units, and one that does '
                            'not fit the room left is skipped whole; readers\' fills take '
                            'room too; the cache\'s room now: %s)' % (
                                hostile.human(up), hostile.human(unfit - up),
                                hostile.human(room)))
                else:
                    want = (' (said up front: about %s; %s less, as room was made meanwhile: '
                            'evictions for readers\' fills or by another mount on the cache '
                            'directory)' % (hostile.human(up), hostile.human(up - unfit)))
                ck.eq('%s: the two figures explained' % label, tail[1:], [want])
                log('%s: up front %d, did not fit %d (+%d), room before %d, after %d' % (
                    label, up, unfit, unfit - up, room0, room))
        finally:
            ng.stop()
    log('%d of %d rounds had figures that read differently' % (differ, ROUNDS))


def gen_name(rng):
    """A seeded hostile file name (bytes): the pieces of test_hostile_ctl.py's names, at least
    one byte that a message must quote (a newline, a tab, a carriage return, a backslash, a
    control byte, 0x7f or a byte that is not UTF-8)."""
    while True:
        n = b''.join(rng.choice(PIECES) for _ in range(rng.randint(1, 6))).replace(b'/', b'_')
        if n not in (b'.', b'..') and quote(n) != n:
            return n


def group_tool_names(env, ck):
    """'shardfs pack' and 'shardfs index' name what they refuse on one line, quoted."""
    rng = random.Random(env.seed)
    work = env.path('w').encode()
    os.makedirs(work)
    # random bytes: 6 MiB decoded whatever gzip does, past --max-decoded-size 4M
    refused = gzip.compress(ml.tar_bytes([('b%d.bin' % i, rng.randbytes(2 << 20))
                                          for i in range(3)], 'gnu'), compresslevel=1, mtime=0)
    for r in range(ROUNDS):
        name = gen_name(rng)
        label = 'round %d (%r)' % (r, name)
        d = os.path.join(work, b'r%d-' % r + name)
        out = os.path.join(work, b'out%d' % r)
        os.makedirs(out)
        # pack: a missing INPUT_DIR, an empty one, a missing output directory, a symlink
        hostile_run(env, ck, '%s: pack of a missing INPUT_DIR' % label,
                    [env.shardfs, 'pack', d, os.path.join(out, b'ds')], 1,
                    b'shardfs: pack: %s: No such file or directory\n' % quote(d))
        os.makedirs(d)
        hostile_run(env, ck, '%s: pack of an empty INPUT_DIR' % label,
                    [env.shardfs, 'pack', d, os.path.join(out, b'ds')], 1,
                    b'shardfs: pack: %s has no files\n' % quote(d))
        nodir = os.path.join(work, b'nodir%d-' % r + name)
        hostile_run(env, ck, '%s: pack into a missing directory' % label,
                    [env.shardfs, 'pack', d, os.path.join(nodir, b'ds')], 2,
                    b'shardfs: pack: output directory %s: No such file or directory (pack '
                    b'creates none: make it first)\n' % quote(nodir))
        ml.write_file(os.path.join(d, b'k.txt'), b'k\n')
        os.symlink(b'k.txt', os.path.join(d, name))
        hostile_run(env, ck, '%s: pack of a symlink' % label,
                    [env.shardfs, 'pack', d, os.path.join(out, b'ds')], 0,
                    b'shardfs: pack: %s: a symbolic link, skipped (links are not followed)\n'
                    % quote(os.path.join(d, name)))
        # index: a shard it refuses (EFBIG: decoded past --max-decoded-size)
        os.unlink(os.path.join(d, name))
        ml.write_file(os.path.join(d, name + b'.tar.gz'), refused)
        label_i = '%s: index of a shard it refuses' % label
        r_i = env.run([env.shardfs, 'index', '--max-decoded-size', '4M', '--cache-dir',
                       env.path('cache-%d' % r), d], timeout=60)
        log('%s: rc=%r stdout=%r stderr=%r' % (label_i, r_i.returncode, r_i.stdout,
                                               r_i.stderr))
        ck.eq('%s: exit' % label_i, r_i.returncode, 1)
        ck.eq('%s: stdout' % label_i, r_i.stdout,
              b'indexed 0 shards (0 built, 0 from the cache, 0 from sidecars); 1 of 1 failed '
              b'(said on stderr)\n')
        # the log's lines (a timestamp first) aside: the command's own
        ck.eq('%s: stderr' % label_i,
              [ln for ln in r_i.stderr.splitlines(True) if not ln[:1].isdigit()],
              [b'shardfs: index: %s: cannot index: File too large\n' % quote(name + b'.tar.gz')])


def like_plain(env, ck, label, build, name, work):
    """The command build(PATH, NAME) run with a plain name (one no message quotes) and with
    the hostile one: the same exit status and the same stderr, the plain name replaced by the
    hostile one quoted (fs_quote's rule): as many lines whatever the name holds."""
    plain = b'plainXq'
    ref = env.run(build(os.path.join(work, plain), plain), timeout=60)
    r = env.run(build(os.path.join(work, name), name), timeout=60)
    log('%s: rc=%r/%r stderr=%r / %r' % (label, ref.returncode, r.returncode, ref.stderr,
                                         r.stderr))
    ck.ok(plain in ref.stderr, '%s: the plain name is not said: %r' % (label, ref.stderr))
    ck.eq('%s: exit' % label, r.returncode, ref.returncode)
    ck.eq('%s: stderr' % label, r.stderr, ref.stderr.replace(plain, quote(name)))


def group_mount_names(env, ck):
    """'shardfs mount' and its option parser name what they refuse on one line, quoted."""
    rng = random.Random(env.seed)
    work = env.path('w').encode()
    os.makedirs(os.path.join(work, b'src'))
    os.makedirs(os.path.join(work, b'mnt'))
    src, mnt = os.path.join(work, b'src'), os.path.join(work, b'mnt')
    sh = env.shardfs.encode()
    cases = [
        ('a missing SOURCE', lambda p, n: [sh, b'mount', p, mnt]),
        ('a missing MOUNTPOINT', lambda p, n: [sh, b'mount', src, p]),
        ('a MOUNTPOINT that is a file', lambda p, n: [sh, b'mount', src, p + b'.f']),
        ('a --cache-size value', lambda p, n: [sh, b'mount', b'--cache-size', n, src, mnt]),
        ('an unknown option', lambda p, n: [sh, b'mount', b'--' + n, src, mnt]),
        ('an argument too many', lambda p, n: [sh, b'mount', src, mnt, n]),
        ('a --ca-file', lambda p, n: [sh, b'index', b'--ca-file', p, src]),
        ('a --log-file in a missing directory',
         lambda p, n: [sh, b'mount', b'--log-file', os.path.join(p, b'log'), src, mnt]),
    ]
    for r in range(ROUNDS):
        name = gen_name(rng)
        if name.startswith(b'-'):
            name = b'x' + name
        ml.write_file(os.path.join(work, name + b'.f'), b'')
        ml.write_file(os.path.join(work, b'plainXq.f'), b'')
        for what, build in cases:
            like_plain(env, ck, 'round %d (%r): %s' % (r, name, what), build, name, work)


def group_gaps_bound(env, ck):
    """--class-gaps empty refused past its bound says why, not only E2BIG's words."""
    rng = random.Random(env.seed)
    os.makedirs(env.path('mnt'))
    for r in range(3):
        big = 1 + 1000001 + rng.randrange(1 << 40)
        src = env.path('src-%d' % r)
        os.makedirs(src)
        ml.write_file(os.path.join(src, 's.tar'), ml.tar_bytes(
            [('a.jpg', b'A'), ('a.cls', b'0'), ('b.jpg', b'B'), ('b.cls', b'%d' % big)]))
        hostile_run(env, ck, 'round %d (.cls %d)' % (r, big),
                    [env.shardfs, 'mount', '--layout', 'imagefolder', '--class-gaps', 'empty',
                     '--cache-dir', env.path('cache-%d' % r), src, env.path('mnt')], 1,
                    b'shardfs: imagefolder: cannot build the view: Argument list too long\n'
                    b'shardfs: imagefolder: --class-gaps empty: a .cls value lies more than '
                    b'1000000 past the values below it, and that many empty class directories '
                    b'are not shown (the mount\'s log names the value); fix the .cls members, or '
                    b'mount without --class-gaps empty to be told the missing values\n')


def hostile_run(env, ck, label, cmd, rc, err):
    r = env.run(cmd, timeout=60)
    log('%s: rc=%r stdout=%r stderr=%r' % (label, r.returncode, r.stdout, r.stderr))
    ck.eq('%s: exit' % label, r.returncode, rc)
    ck.eq('%s: stderr' % label, r.stderr, err)


GROUPS = {'prefetch-unfit': (group_prefetch_unfit, 280), 'tool-names': (group_tool_names, 200),
          'mount-names': (group_mount_names, 200), 'gaps-bound': (group_gaps_bound, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
