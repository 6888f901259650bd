#!/usr/bin/python3
"""shardfs mount tests: the plan file's mount check resolves the path with the sender's rights.

usage: test_perm_resolve.py SHARDFS GROUP
GROUP:
  plan-resolve  a mount by root with -o allow_other --uid 65534 --gid 65534 takes commands
          from nobody. Before a plan file is opened the daemon resolves its path (is it inside
          the mount? fs/core/fs_plan_path.c): two symbolic links into the mount (the shard, a
          member), a link loop and a file that is not there, each in root's 0700 directory
          (nobody cannot search it) and in root's 0755 one (nobody can), sent straight to the
          mount as nobody (the ioctl python/shardfs sends): in the 0700 directory every one is
          EACCES, as the open of a file there is (the daemon before: EINVAL for the links into
          the mount, ELOOP: what root's directory holds came back); in the 0755 one nobody
          learns what nobody could see anyway (EINVAL, ELOOP, ENOENT);
          root's own sends get the same verdicts in both directories. No plan is published.
"""
import errno
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from test_hostile_perm import NOBODY, plan_sender  # noqa: E402


def group_plan_resolve(env, ck):
    if os.geteuid() != 0 or not shutil.which('setpriv'):
        raise ml.Skip('needs root and setpriv to send commands as nobody', 'host')
    src = env.path('src')
    os.makedirs(src)
    ml.write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('a.txt', b'a\n')]))
    mnt = env.path('mnt')
    top = env.path('plans')
    os.makedirs(top)
    os.chmod(top, 0o755)
    kinds = [('in', os.path.join(mnt, 's0.tar'), errno.EINVAL),
             ('in2', os.path.join(mnt, 's0', 'a.txt'), errno.EINVAL),
             ('loop', None, errno.ELOOP),
             ('none', None, errno.ENOENT)]
    sends = []
    for d, mode in (('root-0700', 0o700), ('root-0755', 0o755)):
        p = os.path.join(top, d)
        os.makedirs(p)
        os.chmod(p, mode)
        for kind, target, want in kinds:
            path = os.path.join(p, kind)
            if kind == 'loop':
                os.symlink(path, path)
            elif target:
                os.symlink(target, path)
            sends.append(('%s-%s' % (d[5:], kind), path, want if mode == 0o755 else errno.EACCES,
                          want))
    direct = plan_sender(env, mnt)

    with ml.Mount(env, src, mountpoint=mnt, cache_dir=env.path('cache'),
                  extra=['-o', 'allow_other', '--uid', '65534', '--gid', '65534']):
        got = direct(NOBODY, [(n, p) for n, p, _, _ in sends])
        root = direct([], [('r' + n, p) for n, p, _, _ in sends])
        for name, path, want, want_root in sends:
            ck.eq('%s: nobody\'s command: errno' % name, got.get(name), want)
            ck.eq('%s: root\'s command: errno' % name, root.get('r' + name), want_root)
        with open(os.path.join(mnt, '.shardfs', 'plans'), 'rb') as f:
            lines = f.read().decode().rstrip(' \n').splitlines()[1:]
        ck.eq('plans published', [ln for ln in lines if ln.strip()], [])


GROUPS = {'plan-resolve': (group_plan_resolve, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
