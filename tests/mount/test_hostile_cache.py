#!/usr/bin/python3
"""shardfs mount tests: the cache directory as a hostile new user (or a hostile other user)
leaves it.

usage: test_hostile_cache.py SHARDFS GROUP
GROUP:
  trust   one rule for the path of --cache-dir (fs/core/fs_cachedir.c, docs/usage.md): every
          directory above the cache directory owned by root or the mounting user and writable
          by no one else unless sticky; the cache directory, its v1/ and each source's
          directory in v1/ owned by the mounting user and writable by no one else. A seeded
          generated class of trees (the fault at a directory above, the cache directory, v1/
          or the source's directory: owned by nobody, group-writable, other-writable, other-
          writable and sticky, none; modes drawn by SHARDFS_TEST_SEED), each mounted as root:
          a fault the rule refuses is exit 1 naming that directory and why, and the 'log'
          symbolic link planted in the source's directory (to a root-owned 0600 file) is never
          followed (the file's bytes unchanged); a tree the rule allows mounts and serves a
          member's exact bytes. A cache directory given as a symbolic link (in a world-writable
          directory) to a directory of root's mounts, and the mount uses the directory it
          resolved. 'shardfs index' and a mount by nobody of a 0777 directory of root's are
          refused too. Main before this test mounted every tree, and a root mount appended its
          log to the planted link's target.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402

log = ml.log

LEVELS = ('above', 'cache', 'v1', 'srcdir')
FAULTS = ('nobody', 'group-w', 'other-w', 'sticky-other-w', 'none')
VICTIM = b'root only: never the daemon log\n'
MEMBER = b'exact member bytes\n' * 100


def expect(level, fault):
    """What the rule says: None (mounts) or the words of the refusal."""
    if fault == 'none':
        return None
    if fault == 'nobody':
        return 'is owned by uid 65534'
    if fault == 'sticky-other-w' and level == 'above':
        return None
    return 'is writable by other users'


def make_source(env):
    src = env.path('src')
    os.makedirs(src)
    with open(os.path.join(src, 's0.tar'), 'wb') as f:
        f.write(ml.tar_bytes([('m.bin', MEMBER)]))
    return src


def source_dirs(cache):
    v1 = os.path.join(cache, 'v1')
    return [os.path.join(v1, d) for d in sorted(os.listdir(v1))
            if os.path.isdir(os.path.join(v1, d)) and not os.path.islink(os.path.join(v1, d))]


def try_mount(env, src, cache, label):
    """Mount src with cache as --cache-dir: (rc, stderr); unmounted again."""
    mnt = env.path('mnt-' + label)
    os.makedirs(mnt, exist_ok=True)
    r = env.run([env.shardfs, 'mount', '--cache-dir', cache, src, mnt], timeout=ml.MOUNT_TIMEOUT,
                files=True)
    err = r.stderr.decode(errors='replace')
    data = None
    if r.returncode == 0:
        with open(os.path.join(mnt, 's0', 'm.bin'), 'rb') as f:
            data = f.read()
        ml.Mount(env, src, mountpoint=mnt).umount()
    return r.returncode, err, data


def group_trust(env, ck):
    if os.geteuid() != 0:
        raise ml.Skip('needs root (chown to nobody)', 'host')
    rng = env.rng
    src = make_source(env)
    victim = env.path('victim')
    with open(victim, 'wb') as f:
        f.write(VICTIM)
    os.chmod(victim, 0o600)
    cases = [(lv, ft) for lv in LEVELS for ft in FAULTS]
    rng.shuffle(cases)
    for i, (level, fault) in enumerate(cases):
        label = '%d-%s-%s' % (i, level, fault)
        top = env.path('t%d' % i)
        up = os.path.join(top, 'up')
        cache = os.path.join(up, 'cache')
        os.makedirs(up)
        # the source's directory and v1/ exist from a first mount of the tree, as the rule
        # wants them
        rc, err, _ = try_mount(env, src, cache, label + '-first')
        ck.eq('%s: the first mount (%s)' % (label, err.strip()), rc, 0)
        if rc != 0:
            continue
        target = {'above': up, 'cache': cache, 'v1': os.path.join(cache, 'v1'),
                  'srcdir': source_dirs(cache)[0]}[level]
        base = 0o755 if level == 'above' else 0o700
        if fault == 'nobody':
            os.chown(target, 65534, 65534)
        elif fault == 'group-w':
            os.chmod(target, base | rng.choice((0o020, 0o060, 0o070)))
        elif fault == 'other-w':
            os.chmod(target, base | rng.choice((0o002, 0o006, 0o007)))
        elif fault == 'sticky-other-w':
            os.chmod(target, base | 0o1000 | rng.choice((0o002, 0o007, 0o077)))
        want = expect(level, fault)
        if want:
            # what its owner (or another user) could have left there
            log_path = os.path.join(source_dirs(cache)[0], 'log')
            os.unlink(log_path)
            os.symlink(victim, log_path)
        rc, err, data = try_mount(env, src, cache, label)
        log('%s: %s mode %o uid %d: rc=%r %s' % (label, target, os.stat(target).st_mode & 0o7777,
                                                 os.stat(target).st_uid, rc, err.strip()))
        if want:
            ck.eq('%s: exit' % label, rc, 1)
            ck.ok(('%s %s' % (os.path.realpath(target), want)) in err,
                  '%s: the message names %s and says %r: %r' % (label, target, want, err))
        else:
            ck.eq('%s: exit (%s)' % (label, err.strip()), rc, 0)
            ck.eq('%s: the member' % label, data, MEMBER)
        with open(victim, 'rb') as f:
            ck.eq('%s: the planted link\'s target' % label, f.read(), VICTIM)
        shutil.rmtree(top)
    # a symbolic link (in a directory anybody may write) to a directory of root's: taken, and
    # the mount uses the directory it resolved
    real = env.path('realcache')
    os.makedirs(real, mode=0o700)
    ww = env.path('ww')
    os.makedirs(ww)
    os.chmod(ww, 0o1777)
    os.symlink(real, os.path.join(ww, 'link'))
    mnt = env.path('mnt-link')
    os.makedirs(mnt)
    with ml.Mount(env, src, mountpoint=mnt, cache_dir=os.path.join(ww, 'link')) as m:
        st = m.stats()
        ck.ok(st.get('cache_dir', '').startswith(real + '/v1/'),
              'a symlinked cache dir: stats cache_dir %r, not in %s' % (st.get('cache_dir'), real))
        with open(os.path.join(m.mnt, 's0', 'm.bin'), 'rb') as f:
            ck.eq('a symlinked cache dir: the member', f.read(), MEMBER)
    # 'shardfs index' has the same rule
    owned = env.path('owned')
    os.makedirs(owned)
    os.chown(owned, 65534, 65534)
    r = env.run([env.shardfs, 'index', '--cache-dir', owned, src])
    log('index, cache dir of nobody: rc=%r %r' % (r.returncode, r.stderr))
    ck.eq('index, a cache dir of nobody: exit', r.returncode, 1)
    ck.ok(('%s is owned by uid 65534' % owned).encode() in r.stderr,
          'index, a cache dir of nobody: %r' % r.stderr)
    ck.ok(not os.path.exists(os.path.join(owned, 'v1')), 'index wrote into nobody\'s cache dir')
    # nobody mounting with a 0777 cache directory of root's
    if shutil.which('setpriv'):
        open_dir = env.path('open')
        os.makedirs(open_dir)
        os.chmod(open_dir, 0o777)
        nmnt = env.path('mnt-nobody')
        os.makedirs(nmnt)
        os.chown(nmnt, 65534, 65534)
        r = env.run(['setpriv', '--reuid=nobody', '--regid=nogroup', '--clear-groups',
                     env.shardfs, 'mount', '--cache-dir', open_dir, src, nmnt],
                    timeout=ml.MOUNT_TIMEOUT, files=True)
        err = r.stderr.decode(errors='replace')
        log('nobody, a 0777 cache dir of root\'s: rc=%r %s' % (r.returncode, err.strip()))
        ck.eq('nobody, a 0777 cache dir of root\'s: exit', r.returncode, 1)
        ck.ok(('%s is owned by uid 0' % open_dir) in err,
              'nobody, a 0777 cache dir of root\'s: %r' % err)
        if ml.is_mounted(nmnt):
            ml.Mount(env, src, mountpoint=nmnt).umount()


GROUPS = {'trust': (group_trust, 240)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
