#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass (round 10), each finding replayed as a test.

usage: test_hostile10.py SHARDFS GROUP
GROUP:
  prefetch-conns  --prefetch-connections against --connections, on the command line, in
                  fstab's -o form (the mount helper) and for 'shardfs index': a count given
                  above --connections is refused (exit 2, one stderr line naming both options
                  and what to give), one at or below it mounts, and the default (32) under a
                  smaller --connections mounts (lowered, nothing said). A seeded generated
                  class of pairs (connections, prefetch-connections) over the options' ranges
                  checks the rule for each. Before: every pair mounted, the help's "within
                  --connections" a count that bounded nothing.
  cachedir-link   a --cache-dir that is a symbolic link whose target is missing (dangling), a
                  link to a link that is, and a path under one, each refused by 'shardfs mount'
                  with exit 1 and one stderr line naming the link and its target. Before: "DIR:
                  No such file or directory" (the link there, 'ls' shows it), so a user made
                  nothing or made the wrong directory.
  cachegone-read  the cache directory removed (rm -rf) under a running mount of a remote
                  source (nginx): a shard filled before reads back exact (its data file is
                  open); a shard never read, its member directory and a member fail with EIO,
                  not ENOENT ('ls' lists them) nor ESTALE (the source did not change);
                  cache_dir_removed counts the refused opens and the daemon's log (removed with
                  the directory, read through its fd) says it once, naming the directory and
                  what to do. Before: ENOENT for the shard and the member, ESTALE for the
                  directory, and "s1.tar: cannot open: No such file or directory" in the log.
  warm-room       --warm all of a dataset (4 shards, 1.2 MB) on a 2 MiB tmpfs cache disk, mounted
                  twice: each mount's warm ends done, every shard exact, and neither says the
                  dataset is larger than the cache's room: the second's is cached whole. Before:
                  the second mount warned "the dataset (1.15 MiB) is larger than the cache's
                  room (0.6 MiB ...)" for a dataset it then found cached (fs_warm.c compared the
                  whole dataset with the room, not what is not cached yet).
  cachegone       the same removal, then the map of the units filled before falls due
                  (--durable-delay 1) and cannot be written: the map flusher must not retry
                  without pause (its thread must not burn 0.2 s of CPU within 20 s). Before
                  the bound (a failed map write is tried again a second later,
                  cachetier_map.c MAP_RETRY_NS) the flusher found it due again at once: about
                  600 openat + fdatasync a second for the mount's life. A CPU bound over a
                  time: a busy machine only hides a spin; chunkstore's test_mapgone counts the
                  failed writes against the time exactly.
  prefetch-empty  'shardfs prefetch MNT ""' (a PATH from an unset variable) is refused, exit 1,
                  saying the PATH is empty, and fetches nothing (before the mend, in
                  fs/tools/fs_prefetch.c: the empty PATH prefetched the whole mount, exit 0).
  fulldisk-flusher  the same fault on a full disk: a 4 MiB tmpfs cache disk, s0.tar read, then
                  another program fills the disk (the map's temp file: ENOSPC); the flusher
                  must not retry without pause (0.2 s of CPU within 20 s; it burnt about 30 %
                  of a core here), a shard never read still reads exact. Failed before the
                  bound of cachegone.
"""
import errno
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import hostile  # noqa: E402
from shardfs_test import web  # noqa: E402

log = ml.log

HINT = ('; name one this user can write with --cache-dir DIR (in fstab: cache-dir=DIR). '
        'Without it the cache directory is $XDG_CACHE_HOME/shardfs, else $HOME/.cache/shardfs, '
        'else /var/cache/shardfs')
# the option table's ranges (fs/core/fs_opt.c) and --prefetch-connections' default
CONNS_MAX = 1024
PF_DEFAULT = 32
PAIRS = 12  # generated (connections, prefetch-connections) pairs


def run_refused(env, ck, label, cmd, rc, want):
    """cmd exits rc and says exactly want (one line) on stderr; a mount it made anyway (its
    mount point the last argument) is unmounted, so one finding does not fail the next case."""
    r = env.run(cmd, timeout=ml.MOUNT_TIMEOUT, files=True)
    err = r.stderr.decode(errors='replace')
    log('%s: rc=%r %s' % (label, r.returncode, err.strip()))
    ck.eq('%s: exit' % label, r.returncode, rc)
    ck.eq('%s: stderr' % label, err, want + '\n')
    if cmd[1] == 'mount' and ml.is_mounted(cmd[-1]):
        ck.fail('%s: mounted' % label)
        ml.Mount(env, cmd[-2], mountpoint=cmd[-1]).umount(quiet=True)


def pf_refusal(cmd, pf, conns):
    return ('shardfs: %s: --prefetch-connections %d is above --connections %d: give at most %d '
            '(prefetch fills run within --connections)' % (cmd, pf, conns, conns))


def mounts_ok(env, ck, label, src, mnt, extra):
    """'shardfs mount' with extra exits 0 and the mount reads back exact; unmounted after."""
    m = ml.Mount(env, src, mountpoint=mnt, cache_dir=env.path('cache'), extra=extra)
    if not hostile.mount_or_fail(ck, label, m):
        return
    try:
        with open(os.path.join(mnt, 's1', 'm1.bin'), 'rb') as f:
            ck.eq('%s: a member' % label, f.read(), b'B' * 70001)
    finally:
        m.umount()


def group_prefetch_conns(env, ck):
    src = hostile.make_source(env)
    mnt = env.path('mnt')
    os.makedirs(mnt)
    mount = [env.shardfs, 'mount', '--cache-dir', env.path('cache')]
    # the finding: 64 given above 4
    run_refused(env, ck, 'mount --connections 4 --prefetch-connections 64',
                mount + ['--connections', '4', '--prefetch-connections', '64', src, mnt], 2,
                pf_refusal('mount', 64, 4))
    # in either order on the command line, and by '='
    run_refused(env, ck, 'mount --prefetch-connections=5 --connections=4',
                mount + ['--prefetch-connections=5', '--connections=4', src, mnt], 2,
                pf_refusal('mount', 5, 4))
    run_refused(env, ck, 'index --connections 2 --prefetch-connections 3',
                [env.shardfs, 'index', '--cache-dir', env.path('cache'), '--connections', '2',
                 '--prefetch-connections', '3', src], 2, pf_refusal('index', 3, 2))
    # the default (32) under a smaller --connections, and equal counts: mounted
    mounts_ok(env, ck, '--connections 4 (default --prefetch-connections)', src, mnt,
              ['--connections', '4'])
    mounts_ok(env, ck, '--connections 4 --prefetch-connections 4', src, mnt,
              ['--connections', '4', '--prefetch-connections', '4'])
    helper = os.environ.get('SHARDFS_MOUNT_HELPER')
    if helper:
        r = subprocess.run(['sh', helper, src, mnt, '-o',
                            'connections=4,prefetch-connections=64,cache-dir=%s'
                            % env.path('cache')],
                           env=dict(env.env, SHARDFS_BIN=env.shardfs), stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=ml.MOUNT_TIMEOUT)
        err = r.stderr.decode(errors='replace')
        log('fstab connections=4,prefetch-connections=64: rc=%r %s' % (r.returncode, err))
        ck.eq('fstab: exit', r.returncode, 2)
        ck.eq('fstab: stderr', err, pf_refusal('mount', 64, 4) + '\n')
        if ml.is_mounted(mnt):
            ml.Mount(env, src, mountpoint=mnt).umount(quiet=True)
    # the class: seeded pairs over the ranges, each refused (exit 2) exactly when the count
    # given is above --connections; the mounted ones are unmounted at once
    rng = random.Random(env.seed)
    log('pairs: seed %d (SHARDFS_TEST_SEED)' % env.seed)
    for i in range(PAIRS):
        conns = rng.choice([1, 2, rng.randint(1, CONNS_MAX), CONNS_MAX])
        pf = rng.choice([conns, conns + 1, rng.randint(1, CONNS_MAX), 1])
        pf = min(pf, CONNS_MAX)
        label = 'pair %d: --connections %d --prefetch-connections %d' % (i, conns, pf)
        if pf > conns:
            run_refused(env, ck, label,
                        mount + ['--connections', str(conns), '--prefetch-connections', str(pf),
                                 src, mnt], 2, pf_refusal('mount', pf, conns))
        else:
            mounts_ok(env, ck, label, src, mnt,
                      ['--connections', str(conns), '--prefetch-connections', str(pf)])
    ck.eq('nothing left mounted', ml.is_mounted(mnt), False)


def group_cachedir_link(env, ck):
    src = hostile.make_source(env)
    mnt = env.path('mnt')
    os.makedirs(mnt)
    missing = env.path('missing')
    link = env.path('link')
    os.symlink(missing, link)
    chain = env.path('chain')
    os.symlink(link, chain)
    rel = env.path('rel')
    os.symlink('no/such', rel)

    def mount(cache):
        return [env.shardfs, 'mount', '--cache-dir', cache, src, mnt]
    run_refused(env, ck, 'a dangling link', mount(link), 1,
                'shardfs: cache directory %s: %s is a symbolic link to %s, which does not exist'
                ': make that directory or give --cache-dir another%s' % (link, link, missing,
                                                                         HINT))
    run_refused(env, ck, 'a link to a dangling link', mount(chain), 1,
                'shardfs: cache directory %s: %s is a symbolic link to %s, which does not exist'
                ': make that directory or give --cache-dir another%s' % (chain, chain, link,
                                                                         HINT))
    run_refused(env, ck, 'a relative dangling link', mount(rel), 1,
                'shardfs: cache directory %s: %s is a symbolic link to no/such, which does not '
                'exist: make that directory or give --cache-dir another%s' % (rel, rel, HINT))
    sub = os.path.join(link, 'sub')
    run_refused(env, ck, 'under a dangling link', mount(sub), 1,
                'shardfs: cache directory %s: %s is a symbolic link to %s, which does not exist'
                ': make that directory or give --cache-dir another%s' % (sub, link, missing,
                                                                         HINT))
    ck.eq('nothing made at the target', os.path.lexists(missing), False)
    ck.eq('nothing mounted', ml.is_mounted(mnt), False)
    # the link's target made: the mount goes ahead through it
    os.makedirs(missing, mode=0o700)
    with ml.Mount(env, src, mountpoint=mnt, cache_dir=link) as m:
        with open(os.path.join(m.mnt, 's0', 'm0.bin'), 'rb') as f:
            ck.eq('through the link, made: a member', f.read(), b'A' * 70000)


def thread_cpu_s(pid, name):
    """CPU seconds (user + system) of the threads of pid named name."""
    total = 0
    for tid in os.listdir('/proc/%d/task' % pid):
        try:
            with open('/proc/%d/task/%s/comm' % (pid, tid)) as f:
                if f.read().strip() != name:
                    continue
            with open('/proc/%d/task/%s/stat' % (pid, tid)) as f:
                fields = f.read().rsplit(')', 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            continue
    return total / os.sysconf('SC_CLK_TCK')


def deleted_log(pid):
    """The text of the daemon's log file, opened by it and removed with the cache directory."""
    for fd in os.listdir('/proc/%d/fd' % pid):
        try:
            target = os.readlink('/proc/%d/fd/%s' % (pid, fd))
        except OSError:
            continue
        if target.endswith('/log (deleted)'):
            with open('/proc/%d/fd/%s' % (pid, fd), 'rb') as f:
                return f.read().decode(errors='replace')
    return ''


def cachegone_mount(env, ng, cache):
    return ml.Mount(env, ng.url('json/'), cache_dir=cache,
                    extra=['--warm', 'off', '--durable-delay', '1', '--prefetch-shards', '0'])


def group_cachegone_read(env, ck):
    src = hostile.make_source(env, 3)
    cache = env.path('cache')
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        m = cachegone_mount(env, ng, cache)
        with m:
            pid = m.stats()['pid']
            with open(os.path.join(m.mnt, 's0.tar'), 'rb') as f:
                first = f.read()
            with open(os.path.join(src, 's0.tar'), 'rb') as f:
                ck.eq('s0.tar before the removal', first, f.read())
            subprocess.run(['rm', '-rf', cache], check=True)
            with open(os.path.join(m.mnt, 's0.tar'), 'rb') as f:
                ck.eq('s0.tar after the removal (its open data file)', f.read(), first)
            # shards never read: their cache files cannot be made. EIO, not ENOENT ('ls'
            # lists them) nor ESTALE (the source did not change)
            for label, fn in (('s1.tar read', lambda: ml.read_all(os.path.join(m.mnt,
                                                                                's1.tar'))),
                              ('s2/ listed', lambda: os.listdir(os.path.join(m.mnt, 's2'))),
                              ('s2/m2.bin read', lambda: ml.read_all(os.path.join(m.mnt, 's2',
                                                                                  'm2.bin')))):
                try:
                    fn()
                    ck.fail('%s after the removal: no error' % label)
                except OSError as e:
                    log('%s after the removal: %s' % (label, e))
                    ck.eq('%s after the removal: errno' % label, errno.errorcode.get(e.errno),
                          'EIO')
            st = m.stats()
            ck.ok(st.get('cache_dir_removed', 0) >= 3,
                  'cache_dir_removed %r after 3 refused opens' % st.get('cache_dir_removed'))
            text = deleted_log(pid)
            said = [ln for ln in text.splitlines() if 'was removed under the mount' in ln]
            ck.eq('the log says it once', len(said), 1)
            ck.ok(said and said[0].endswith(
                'cannot open its cache file: the cache directory %s was removed under the '
                'mount; what is not cached fails with EIO: unmount and mount again'
                % st['cache_dir']), 'the log line: %r' % said)
        ck.eq('daemon ended after umount', m.alive_after_umount, [])
    finally:
        ng.stop()


def group_cachegone(env, ck):
    src = hostile.make_source(env, 3)
    cache = env.path('cache')
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        m = cachegone_mount(env, ng, cache)
        with m:
            pid = m.stats()['pid']
            ml.read_all(os.path.join(m.mnt, 's0.tar'))
            subprocess.run(['rm', '-rf', cache], check=True)
            # s0.tar's filled units fall due (--durable-delay 1) and their map cannot be
            # written. A flusher that retries at once (about 600 times a second here, each
            # an openat and an fdatasync) burns 2-3 % of a core for ever: wait for it to have
            # burnt 0.2 s of CPU (a flusher that retries once a batch, a second, takes ~0)
            cpu0 = thread_cpu_s(pid, 'shardfs-flush')
            try:
                ml.poll(lambda: thread_cpu_s(pid, 'shardfs-flush') - cpu0 >= 0.2, timeout=20,
                        what='the flusher retrying')
                ck.fail('the map flusher retries without pause: 0.2 s of CPU retrying the map '
                        'write of a removed cache directory (pid %d)' % pid)
            except Exception as e:  # the poll's bound: no spin
                log('no spin: %s' % e)
                ck.ok(True, 'the flusher pauses')
        ck.eq('daemon ended after umount', m.alive_after_umount, [])
    finally:
        ng.stop()


def group_fulldisk_flusher(env, ck):
    if os.geteuid() != 0:
        raise ml.Skip('needs root (a tmpfs)', 'host')
    src = hostile.make_source(env, 3)
    disk = env.path('disk')
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        with ml.Tmpfs(disk, 4 << 20):
            m = cachegone_mount(env, ng, os.path.join(disk, 'c'))
            with m:
                pid = m.stats()['pid']
                ml.read_all(os.path.join(m.mnt, 's0.tar'))
                # another program fills the disk: the map's temp file gets ENOSPC
                with open(os.path.join(disk, 'filler'), 'wb') as f:
                    try:
                        while True:
                            f.write(b'\0' * 65536)
                            f.flush()
                    except OSError:
                        pass
                cpu0 = thread_cpu_s(pid, 'shardfs-flush')
                try:
                    ml.poll(lambda: thread_cpu_s(pid, 'shardfs-flush') - cpu0 >= 0.2,
                            timeout=20, what='the flusher retrying')
                    ck.fail('the map flusher retries without pause: 0.2 s of CPU retrying the '
                            'map write on a full disk (pid %d)' % pid)
                except Exception as e:  # the poll's bound: no spin
                    log('no spin: %s' % e)
                    ck.ok(True, 'the flusher pauses')
                with open(os.path.join(src, 's1.tar'), 'rb') as f:
                    ck.eq('s1.tar on the full disk', ml.read_all(os.path.join(m.mnt, 's1.tar')),
                          f.read())
            ck.eq('daemon ended after umount', m.alive_after_umount, [])
    finally:
        ng.stop()


def warm_lines(cache):
    """The warm's log lines of every log under cache."""
    return [ln for ln in ml.logs_under(cache).splitlines()
            if '] warning: warm: ' in ln or '] info: warm: ' in ln]


def group_warm_room(env, ck):
    if os.geteuid() != 0:
        raise ml.Skip('needs root (a tmpfs)', 'host')
    # 4 shards of 300,000 bytes' member on a 2 MiB cache disk: the dataset fits the disk
    # once, and a second mount of it finds it cached
    src = env.path('src')
    os.makedirs(src)
    rng = random.Random(env.seed)
    for i in range(4):
        with open(os.path.join(src, 's%d.tar' % i), 'wb') as f:
            f.write(ml.tar_bytes([('m.bin', bytes(rng.getrandbits(8) for _ in range(300000)))]))
    disk = env.path('disk')
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        with ml.Tmpfs(disk, 2 << 20):
            cache = os.path.join(disk, 'c')
            for n in (1, 2):
                m = ml.Mount(env, ng.url('json/'), cache_dir=cache,
                             extra=['--warm', 'all', '--prefetch-shards', '0'])
                with m:
                    ml.poll(lambda: m.stats()['warm_state'] != 1, what='the warm ended')
                    st = m.stats()
                    ck.eq('mount %d: warm done' % n,
                          (st['warm_state'], st['warm_bytes_done'], st['warm_bytes_wanted']),
                          (2, st['warm_bytes_wanted'], sum(
                              os.path.getsize(os.path.join(src, 's%d.tar' % i))
                              for i in range(4))))
                    for i in range(4):
                        with open(os.path.join(src, 's%d.tar' % i), 'rb') as f:
                            ck.eq('mount %d: s%d.tar' % (n, i),
                                  ml.read_all(os.path.join(m.mnt, 's%d.tar' % i)), f.read())
                lines = warm_lines(cache)
                log('mount %d: %r' % (n, lines))
                # the second mount's dataset is cached whole: nothing to say about room
                room = [ln for ln in lines if "cache's room" in ln]
                ck.eq("mount %d: lines about the cache's room" % n, room, [])
            # another dataset of 3 such shards (900 KiB) beside it: more than the room left:
            # said once, and the warm stops at the limit
            other = env.path('other')
            os.makedirs(other)
            for i in range(3):
                with open(os.path.join(other, 'o%d.tar' % i), 'wb') as f:
                    f.write(ml.tar_bytes([('m.bin', bytes(rng.getrandbits(8)
                                                          for _ in range(300000)))]))
            with web.Nginx(env.path('nginx2'), other) as ng2:
                m = ml.Mount(env, ng2.url('json/'), cache_dir=cache,
                             extra=['--warm', 'all', '--prefetch-shards', '0'])
                with m:
                    pid = m.stats()['pid']
                    ml.poll(lambda: m.stats()['warm_state'] != 1, what='the warm ended')
                    ck.eq('the other dataset: the warm stopped', m.stats()['warm_state'], 3)
            lines = [ln for ln in warm_lines(cache) if 'shardfs[%d]' % pid in ln]
            log('the other dataset: %r' % lines)
            room = [ln for ln in lines if "cache's room" in ln]
            ck.eq("the other dataset: lines about the cache's room", len(room), 1)
            # what is left when it is said depends on the fills landed by then; the rest not
            ck.ok(room and '] warning: warm: what is not cached of the dataset (' in room[0] and (
                ' of 900.00 KiB) is larger than the cache\'s room (') in room[0],
                'the other dataset: the line %r' % room)
    finally:
        ng.stop()


def group_prefetch_empty(env, ck):
    src = hostile.make_source(env, 3)
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        m = cachegone_mount(env, ng, env.path('cache'))
        with m:
            # PATH from an unset variable: shardfs prefetch MNT "$DIR"
            r = env.run([env.shardfs, 'prefetch', m.mnt, ''], timeout=60)
            err = r.stderr.decode(errors='replace')
            log('prefetch MNT "": rc=%r %s %s' % (r.returncode, r.stdout.decode(errors='replace'),
                                                  err))
            ck.eq('prefetch MNT "": exit', r.returncode, 1)
            ck.ok('empty' in err, 'prefetch MNT "": says the PATH is empty: %r' % err)
            ck.eq('prefetch MNT "": nothing fetched', m.stats()['bytes_fetched'], 0)
    finally:
        ng.stop()


GROUPS = {'prefetch-conns': (group_prefetch_conns, 200),
          'cachedir-link': (group_cachedir_link, 120),
          'cachegone-read': (group_cachegone_read, 120),
          'cachegone': (group_cachegone, 120),
          'fulldisk-flusher': (group_fulldisk_flusher, 120),
          'prefetch-empty': (group_prefetch_empty, 120),
          'warm-room': (group_warm_room, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
