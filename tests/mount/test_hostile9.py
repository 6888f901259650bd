#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass (round 9), each finding replayed as a test.

usage: test_hostile9.py SHARDFS GROUP
GROUP:
  cachedir  the cache directory's checks in one order, the first that fails said alone and
            before anything about sizes (fs/core/fs_cachedir.c): made or there, a directory,
            not on a read-only filesystem, writable by this user, then the trust rule (owner,
            modes). Each case is 'shardfs mount' (and one 'shardfs index') with exit 1 and its
            exact stderr, one line. Before: a read-only tmpfs of mode 1777 said '--cache-size
            20.00 GiB is more than the filesystem ... holds' and then 'is writable by other
            users' (the real cause: read-only); a path under a regular file, a directory on a
            read-only filesystem to be made, an unwritable directory of root's, each said the
            size line first.
  inside    a client command (stats, prefetch, refresh, plan, umount) given a path inside a
            mount (a shard's directory, a member directory's subdirectory) is refused, exit 1,
            and its one stderr line names the mount the path lies in; a path in no mount says
            only "is not a shardfs mount"; the mount is left mounted. Before: every one said
            only "is not a shardfs mount".
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402

log = ml.log

HINT = ('; name one this user can write with --cache-dir DIR (in fstab: cache-dir=DIR). '
        'Without it the cache directory is $XDG_CACHE_HOME/shardfs, else $HOME/.cache/shardfs, '
        'else /var/cache/shardfs')
NOBODY = ['setpriv', '--reuid=nobody', '--regid=nogroup', '--clear-groups']


def make_source(env):
    src = env.path('src')
    os.makedirs(src)
    with open(os.path.join(src, 's0.tar'), 'wb') as f:
        f.write(ml.tar_bytes([('m.bin', b'member\n')]))
    os.chmod(env.tmp, 0o755)
    os.chmod(src, 0o755)
    return src


def refused(env, ck, label, cmd, want_line):
    """cmd exits 1 and says exactly want_line (one line) on stderr; nothing is mounted."""
    r = env.run(cmd, timeout=ml.MOUNT_TIMEOUT, files=True)
    err = r.stderr.decode(errors='replace')
    log('%s: rc=%r %s' % (label, r.returncode, err.strip()))
    ck.eq('%s: exit' % label, r.returncode, 1)
    ck.eq('%s: stderr' % label, err, want_line + '\n')


def tmpfs(env, name, opts):
    """A tmpfs of 1 MiB mounted at a new directory name with opts; unmounted by the caller."""
    d = env.path(name)
    os.makedirs(d)
    subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=1m,' + opts, 'tmpfs', d], check=True)
    return d


def group_cachedir(env, ck):
    if os.geteuid() != 0:
        raise ml.Skip('needs root (a read-only tmpfs, chown)', 'host')
    src = make_source(env)
    mnt = env.path('mnt')
    os.makedirs(mnt)
    os.chown(mnt, 65534, 65534)
    ro = tmpfs(env, 'ro', 'ro,mode=1777')
    ro_nobody = tmpfs(env, 'ro-nobody', 'ro,mode=0777,uid=65534')
    try:
        def mount(cache, *extra):
            return [env.shardfs, 'mount', '--cache-dir', cache] + list(extra) + [src, mnt]
        # 3 first: a read-only tmpfs of mode 1777 is read-only, not "writable by other users"
        refused(env, ck, 'ro tmpfs 1777', mount(ro),
                'shardfs: cache directory %s: Read-only file system: the filesystem of %s is '
                'mounted read-only%s' % (ro, ro, HINT))
        refused(env, ck, 'ro tmpfs 1777, --cache-size 1T', mount(ro, '--cache-size', '1T'),
                'shardfs: cache directory %s: Read-only file system: the filesystem of %s is '
                'mounted read-only%s' % (ro, ro, HINT))
        # ... and before the owner (nobody) and the mode (0777)
        refused(env, ck, 'ro tmpfs of nobody 0777', mount(ro_nobody),
                'shardfs: cache directory %s: Read-only file system: the filesystem of %s is '
                'mounted read-only%s' % (ro_nobody, ro_nobody, HINT))
        # 1: a directory to be made on it
        sub = os.path.join(ro, 'a', 'b')
        refused(env, ck, 'ro tmpfs, to be made', mount(sub),
                'shardfs: cache directory %s: cannot create %s: Read-only file system%s'
                % (sub, os.path.join(ro, 'a'), HINT))
        refused(env, ck, 'index, ro tmpfs', [env.shardfs, 'index', '--cache-dir', ro, src],
                'shardfs: cache directory %s: Read-only file system: the filesystem of %s is '
                'mounted read-only%s' % (ro, ro, HINT))
        # 2: a regular file, and a path under one
        f = os.path.join(src, 's0.tar')
        refused(env, ck, 'a file', mount(f),
                'shardfs: cache directory %s: %s is not a directory%s' % (f, f, HINT))
        refused(env, ck, 'under a file', mount(os.path.join(f, 'c', 'd')),
                'shardfs: cache directory %s: %s is not a directory%s'
                % (os.path.join(f, 'c', 'd'), f, HINT))
        if shutil.which('setpriv'):
            # 1 as nobody: inside a 0700 directory of root's (cannot even look)
            locked = env.path('locked')
            os.makedirs(locked, mode=0o700)
            c = os.path.join(locked, 'c')
            refused(env, ck, 'nobody, in a 0700 dir of root', NOBODY + mount(c),
                    'shardfs: cache directory %s: %s: Permission denied%s' % (c, c, HINT))
            # 1 as nobody: to be made in a 0755 directory of root's
            shut = env.path('shut')
            os.makedirs(shut, mode=0o755)
            c = os.path.join(shut, 'c')
            refused(env, ck, 'nobody, to be made in a 0755 dir of root', NOBODY + mount(c),
                    'shardfs: cache directory %s: cannot create %s: Permission denied%s'
                    % (c, c, HINT))
            # 4 as nobody: a 0755 directory of root's, there (before its owner)
            refused(env, ck, 'nobody, a 0755 dir of root', NOBODY + mount(shut),
                    'shardfs: cache directory %s: Permission denied: this user (uid 65534) '
                    'cannot write %s%s' % (shut, shut, HINT))
        # 5: the trust rule's words, unchanged, and after the checks above
        owned = env.path('owned')
        os.makedirs(owned, mode=0o700)
        os.chown(owned, 65534, 65534)
        refused(env, ck, 'root, a dir of nobody', mount(owned),
                'shardfs: cache directory %s: %s is owned by uid 65534, not by this user '
                '(uid 0): its owner could replace what the daemon writes there; give '
                '--cache-dir a directory of this user\'s (in fstab: cache-dir=DIR)'
                % (owned, owned))
        ww = env.path('ww')
        os.makedirs(ww)
        os.chmod(ww, 0o777)
        refused(env, ck, 'root, a 0777 dir', mount(ww),
                'shardfs: cache directory %s: %s is writable by other users (mode 0777): they '
                'could replace what the daemon writes there; \'chmod go-w %s\' or give another '
                '--cache-dir' % (ww, ww, ww))
        c = os.path.join(ww, 'c')
        refused(env, ck, 'root, in a 0777 dir', mount(c),
                'shardfs: cache directory %s: %s is writable by other users (mode 0777): they '
                'could replace what the daemon writes there; \'chmod go-w %s\' or give another '
                '--cache-dir' % (c, ww, ww))
        ck.eq('nothing mounted', ml.is_mounted(mnt), False)
    finally:
        for d in (ro, ro_nobody):
            subprocess.run(['umount', d])


def group_inside(env, ck):
    src = env.path('src')
    os.makedirs(src)
    with open(os.path.join(src, 's0.tar'), 'wb') as f:
        f.write(ml.tar_bytes([('d/m.bin', b'member\n')]))
    plan = env.path('plan.txt')
    with open(plan, 'w') as f:
        f.write('s0/d/m.bin\n')
    other = env.path('other')
    os.makedirs(other)
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        for sub in ('s0', os.path.join('s0', 'd')):
            path = os.path.join(m.mnt, sub)
            for cmd in (['stats', path], ['prefetch', path], ['refresh', path],
                        ['plan', path, plan], ['umount', path]):
                label = '%s %s' % (cmd[0], sub)
                refused(env, ck, label, [env.shardfs] + cmd,
                        'shardfs: %s is not a shardfs mount: it lies inside the shardfs mount %s '
                        '(give that mount point)' % (path, m.mnt))
                ck.eq('%s: still mounted' % label, ml.is_mounted(m.mnt), True)
        for cmd in (['stats', other], ['umount', other]):
            refused(env, ck, '%s, no mount' % cmd[0], [env.shardfs] + cmd,
                    'shardfs: %s is not a shardfs mount' % other)


GROUPS = {'cachedir': (group_cachedir, 120), 'inside': (group_inside, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
