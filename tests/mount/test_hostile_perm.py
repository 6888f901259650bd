#!/usr/bin/python3
"""shardfs mount tests: what a user who is not the mount's owner can make the daemon do.

usage: test_hostile_perm.py SHARDFS GROUP
GROUP:
  plan-rights  a mount by root with -o allow_other --uid 65534 --gid 65534 takes commands
          from nobody; the daemon, root, reads the plan file a command names. A seeded
          generated class of plan files (owner root or nobody, group root or nogroup, a mode,
          in a directory of root's 0700 or 0755 or of nobody's, or a symbolic link of nobody's
          to such a file): nobody's 'shardfs plan' publishes exactly the files nobody can
          read (as the kernel says: 'cat' run as nobody) and is refused (exit 1, "Permission
          denied", no plan listed in .shardfs/plans) for every other, and so is the command
          sent straight to the mount (the ioctl python/shardfs sends, past the client's own
          check: EACCES), /etc/shadow too: nothing of a file nobody cannot read comes back;
          a file that is not there, in a directory nobody cannot search, is EACCES as one
          that is (ENOENT where nobody may look) (main before this test: every file published, its
          paths and the paths that named nothing counted back, /etc/shadow's lines too);
          root's 'shardfs plan' publishes every one. SHARDFS_TEST_SEED replays another class.
"""
import errno
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402

log = ml.log
NOBODY = ['setpriv', '--reuid=nobody', '--regid=nogroup', '--clear-groups']
MODES = (0o600, 0o640, 0o644, 0o604, 0o400, 0o440, 0o444, 0o000, 0o060, 0o006, 0o004, 0o040)
DIRS = ('root-0700', 'root-0755', 'nobody-0700')


def plans_listed(mnt):
    with open(os.path.join(mnt, '.shardfs', 'plans'), 'rb') as f:
        text = f.read().decode().rstrip(' \n')
    return [ln.split('\t')[0] for ln in text.splitlines()[1:] if ln.strip()]


def plan_sender(env, mnt):
    """The command 'plan NAME PATH' sent straight to the mount at mnt (the ioctl, as
    python/shardfs sends it), past the client's own check of the file: returns
    send(who, [(name, path)]), which sends each in one process run as who (a command prefix:
    NOBODY, or [] for the test's own user) and returns {name: errno (0: taken)} ({} when that
    process failed). test_perm_resolve.py sends with it too."""
    pydir = env.path('py')
    if not os.path.isdir(pydir):
        shutil.copytree(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..',
                                     'python', 'shardfs'), os.path.join(pydir, 'shardfs'))
    # a python nobody may run (the test's own may sit in root's home)
    py = '/usr/bin/python3' if os.path.exists('/usr/bin/python3') else sys.executable

    def send(who, sends):
        code = ('import sys, json; sys.path.insert(0, %r); import shardfs\n'
                'out = {}\n'
                'for name, path in json.loads(sys.argv[1]):\n'
                '    try:\n'
                '        shardfs.control(%r, b"plan " + name.encode() + b" " +'
                ' shardfs.ctl_path(path))\n'
                '        out[name] = 0\n'
                '    except OSError as e:\n'
                '        out[name] = e.errno\n'
                'print(json.dumps(out))\n' % (pydir, mnt))
        r = env.run(who + [py, '-c', code, json.dumps(sends)])
        if r.returncode != 0:
            log('python: %r' % r.stderr)
            return {}
        return json.loads(r.stdout.decode())
    return send


def group_plan_rights(env, ck):
    if os.geteuid() != 0 or not shutil.which('setpriv'):
        raise ml.Skip('needs root and setpriv to send commands as nobody', 'host')
    rng = env.rng
    src = env.path('src')
    os.makedirs(src)
    ml.write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('a.txt', b'a\n'),
                                                             ('b.txt', b'bb\n')]))
    top = env.path('plans')
    os.makedirs(top)
    dirs = {}
    for d in DIRS:
        p = os.path.join(top, d)
        os.makedirs(p)
        os.chmod(p, 0o700 if d.endswith('0700') else 0o755)
        if d.startswith('nobody'):
            os.chown(p, 65534, 65534)
        dirs[d] = p
    # nobody runs a copy in the test's directory (the build may sit where only root looks)
    exe = os.path.join(env.tmp, 'shardfs-nobody')
    shutil.copy2(env.shardfs, exe)
    os.chmod(exe, 0o755)
    cases = []
    for i in range(16):
        owner = rng.choice((0, 65534))
        group = rng.choice((0, 65534))
        mode = rng.choice(MODES)
        where = rng.choice(DIRS)
        link = rng.random() < 0.25
        path = os.path.join(dirs[where], 'p%02d.txt' % i)
        ml.write_file(path, b's0/a.txt\nnot/in/the/mount\n')
        os.chown(path, owner, group)
        os.chmod(path, mode)
        if link:  # nobody's symbolic link, in nobody's directory, to that file
            lpath = os.path.join(dirs['nobody-0700'], 'l%02d.txt' % i)
            os.symlink(path, lpath)
            os.lchown(lpath, 65534, 65534)
            path = lpath
        cases.append(('p%02d' % i, path, '%s %d:%d %04o%s' % (where, owner, group, mode,
                                                             ' (a link of nobody\'s)' if link
                                                             else '')))
    mnt = env.path('mnt')
    with ml.Mount(env, src, mountpoint=mnt, cache_dir=env.path('cache'),
                  extra=['-o', 'allow_other', '--uid', '65534', '--gid', '65534']) as m:
        readable = 0
        truths = {}
        for name, path, what in cases:
            truth = env.run(NOBODY + ['cat', path]).returncode == 0
            readable += truth
            r = env.run(NOBODY + [exe, 'plan', m.mnt, path, '--name', name])
            out, err = r.stdout.decode(errors='replace'), r.stderr.decode(errors='replace')
            log('%s %s: nobody %s read it; plan rc=%r %s%s' % (
                name, what, 'can' if truth else 'cannot', r.returncode, out.strip(),
                err.strip()))
            listed = name in plans_listed(m.mnt)
            if truth:
                ck.eq('%s (%s, nobody may read it): exit' % (name, what), r.returncode, 0)
                ck.eq('%s: what the mount took' % name, out,
                      "plan '%s': 1 path, 2 B; 1 path not in the mount (skipped)\n" % name)
                ck.ok(listed, '%s: not in .shardfs/plans' % name)
            else:
                ck.eq('%s (%s, nobody may not read it): exit' % (name, what), r.returncode, 1)
                ck.ok('Permission denied' in err and not out,
                      '%s: stdout %r, stderr %r' % (name, out, err))
                ck.ok(not listed, '%s: published from a file nobody cannot read' % name)
            truths['d' + name] = truth
            r = env.run([env.shardfs, 'plan', m.mnt, path, '--name', 'r' + name])
            ck.eq('%s: root\'s plan of it: exit (%r)' % (name, r.stderr), r.returncode, 0)
            env.run([env.shardfs, 'plan', m.mnt, '--clear', '--name', 'r' + name])
            if listed:
                env.run(NOBODY + [exe, 'plan', m.mnt, '--clear', '--name', name])
        sends = [('d' + name, path, what, 0 if truths['d' + name] else errno.EACCES)
                 for name, path, what in cases]
        if os.path.exists('/etc/shadow'):
            sends.append(('shadow', '/etc/shadow', '/etc/shadow', errno.EACCES))
        # in a directory nobody cannot search, a file that is not there is refused as one that
        # is (main before: ENOENT against EACCES told them apart); where nobody may look, ENOENT
        sends += [('dnone', os.path.join(dirs['root-0700'], 'none.txt'),
                   'no such file in root-0700', errno.EACCES),
                  ('dnone2', os.path.join(dirs['root-0755'], 'none.txt'),
                   'no such file in root-0755', errno.ENOENT)]
        got = plan_sender(env, m.mnt)(NOBODY, [(name, path) for name, path, _, _ in sends])
        listed = plans_listed(m.mnt)
        for name, path, what, want in sends:
            ck.eq('%s (%s): the command sent straight: errno' % (name, what), got.get(name),
                  want)
            ck.eq('%s: the command sent straight: listed' % name, name in listed, want == 0)
        log('%d of %d plan files readable by nobody' % (readable, len(cases)))
        ck.ok(0 < readable < len(cases), 'the class has both kinds: %d of %d readable'
              % (readable, len(cases)))


GROUPS = {'plan-rights': (group_plan_rights, 240)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
