#!/usr/bin/python3
"""shardfs mount tests: the client commands ('shardfs prefetch', 'shardfs plan') given what a
hostile new user gives them.

usage: test_hostile_ctl.py SHARDFS GROUP
GROUP:
  names   a seeded generated class of hostile names (blanks at either end, newlines, carriage
          returns, tabs, backslashes and '\\xHH' look-alikes, DEL, bytes that are not UTF-8, a
          leading '-'), each a shard NAME.tar and a plain file NAME.bin of a size of its own, in
          a local source: 'shardfs prefetch MNT MNT/NAME' (and NAME.bin, and the mount-relative
          NAME from an empty directory) exits 0 and its run is exactly that object (the mount's
          prefetch_run_bytes is its size); a control line cannot forge a second command
          (refreshes stays 0). Main before this test trimmed the blanks ('a ' prefetched 'a'),
          cut the line at a newline, and refused a plan file whose path held one.
          'shardfs plan' of a plan file whose path holds such bytes is published.
          SHARDFS_TEST_SEED replays another class.
  dashes  '--' before a MOUNTPOINT that begins with '-' (here '-m'), taken by stats, refresh,
          prefetch, plan and umount (main before: a usage error, exit 2; 'mount' took it)
  empty-opts  every option whose value is a path or URL (DIR, FILE, URL in 'shardfs mount
          --help'), given '': exit 2 naming it ('mount --cache-dir ""' made the cache in /v1, at
          the root, and so did 'index')
  pack-names  'shardfs pack' of a class-folder tree of generated hostile file names (bytes
          that are not UTF-8 too): every file packed once with its bytes, every member read
          through a mount as tarfile reads it (one name that is not UTF-8 failed the whole pack)
  python  the same seeded names through the Python package (python/shardfs): shardfs.plan()
          of NAME/m.bin and NAME.bin, its plan file written in a temporary directory named NAME
          (tempfile's), is exactly those two paths (PlanInfo: 2 paths, 0 missing, the member's
          and the file's bytes, plan_fnv's fnv); a name with a newline, which a plan file cannot
          hold, is a ValueError (and the decoy 'a' is planned from its directory instead).
          Before the package escaped the plan file's path (shardfs.ctl_path) a directory with a
          newline cut the command and one with '\\x41' named another (main: 10 failures).
  fill-errors  'shardfs prefetch' of a fault:// store whose every read fails (3 files of
          3 MiB, --chunk-size 1M): exit 1, "9.00 MiB not cached (9 fills failed", fill_errors 9
          and fills 0: a failed fill counts once, not once a unit (main before this test: 144,
          the chunks' 64 KiB units).
  index-mount  'shardfs index' of a running mount's point, a directory in it, a symlink to
          it, its file:// URL, or a directory holding it: exit 1 naming the mount, nothing
          indexed (its --cache-dir never made; main before this test indexed the tars through
          the mount); the mount's own source: exit 0, "indexed 2 shards".
  hung    a daemon stopped (SIGSTOP): 'shardfs stats', 'prefetch', 'refresh' and 'plan' exit 1
          within their bound (FS_MNT_ANSWER_MS, 5 s) saying that the daemon (its pid) is stopped
          and how to continue it; 'shardfs umount' unmounts it (exit 1: the daemon cannot finish,
          said so); continued, the daemon exits 0. Main before this test waited without end.
"""
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402

log = ml.log

# the pieces a generated name is made of (no '/', no NUL)
PIECES = [b' ', b'  ', b'\n', b'\r', b'\t', b'\\', b'\\x41', b'\\x2', b'\\xzz', b'x', b'a',
          b'b', b'4', b'-', b'.', b'\x7f', b'\xc3\xa9', b'\xff', b'\xfe\x80', b'\x01', b'~']
FIXED = [b'a ', b' lead', b'nl\nrefresh', b'bs\\x41', b'bs\\', b'cr\r', b'-rf', b'\xff\xfe',
         b'a  b', b' ']


def gen_names(rng, n):
    names = list(FIXED)
    seen = set(names) | {b'a', b'lead', b'nl', b'bsA'}  # the decoys
    while len(names) < len(FIXED) + n:
        name = b''.join(rng.choice(PIECES) for _ in range(rng.randint(1, 5)))
        if name in seen or name in (b'.', b'..') or name.startswith(b'.') or \
                len(name) > 60:
            continue
        seen.add(name)
        names.append(name)
    return names


def names_source(env, ck):
    """The seeded names' local source: (src, names, decoys, sizes); the shard of the i-th name
    (from 0, decoys last) holds one member m.bin of 10240 * (i + 1) bytes, its NAME.bin is
    i + 1 bytes."""
    src = env.path('src').encode()
    os.makedirs(src)
    names = gen_names(env.rng, 30)
    # decoys: what a trimmed or cut line would name instead
    decoys = [b'a', b'lead', b'nl', b'bsA']
    sizes = {}
    for i, name in enumerate(names + decoys):
        with open(os.path.join(src, name + b'.tar'), 'wb') as f:
            f.write(ml.tar_bytes([('m.bin', b'x' * (10240 * (i + 1)))]))
        with open(os.path.join(src, name + b'.bin'), 'wb') as f:
            f.write(b'x' * (i + 1))
        sizes[name] = os.path.getsize(os.path.join(src, name + b'.tar'))
        sizes[name + b'.bin'] = os.path.getsize(os.path.join(src, name + b'.bin'))
    ck.eq('the shards\' sizes are distinct', len(set(sizes[n] for n in names + decoys)),
          len(names + decoys))
    return src, names, decoys, sizes


def group_names(env, ck):
    src, names, decoys, sizes = names_source(env, ck)
    empty = env.path('empty')
    os.makedirs(empty)
    with ml.Mount(env, src.decode(errors='surrogateescape'), cache_dir=env.path('cache')) as m:
        mnt = m.mnt.encode()
        listed = set(os.listdir(mnt))
        for name in names:
            ck.ok(name in listed and name + b'.bin' in listed,
                  '%r: not listed in the mount' % name)
            for label, arg, cwd, want in (
                    ('shard', os.path.join(mnt, name), None, sizes[name]),
                    ('file', os.path.join(mnt, name + b'.bin'), None, sizes[name + b'.bin']),
                    ('relative', name, empty, sizes[name])):
                r = subprocess.run([env.shardfs.encode(), b'prefetch', mnt, arg], cwd=cwd,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=env.env, timeout=60)
                st = m.stats()
                what = '%r (%s)' % (name, label)
                if r.returncode != 0 or st.get('prefetch_run_bytes') != want:
                    log('%s: rc=%r stdout=%r stderr=%r run bytes %r' % (
                        what, r.returncode, r.stdout, r.stderr, st.get('prefetch_run_bytes')))
                ck.eq('%s: exit' % what, r.returncode, 0)
                ck.eq('%s: the run\'s bytes' % what, st.get('prefetch_run_bytes'), want)
        st = m.stats()
        ck.eq('no command forged: refreshes', st.get('refreshes'), 0)
        ck.eq('every prefetch taken', st.get('prefetch_errors'), 0)
        # a plan file whose path holds a newline, blanks at its end and a '\xHH' look-alike
        d = os.path.join(env.path('plans').encode(), b'p \n\\x41 ')
        os.makedirs(d)
        plan = os.path.join(d, b'plan\r ')
        with open(plan, 'wb') as f:
            f.write(b'a/m.bin\n')
        r = env.run([env.shardfs.encode(), b'plan', mnt, plan])
        log('plan: rc=%r %r %r' % (r.returncode, r.stdout, r.stderr))
        ck.eq('plan FILE with hostile bytes: exit', r.returncode, 0)
        ck.ok(r.stdout.startswith(b"plan 'default': 1 path, "),
              'plan FILE with hostile bytes: %r' % r.stdout)


def proc_state(pid):
    with open('/proc/%d/stat' % pid) as f:
        return f.read().rsplit(')', 1)[1].split()[0]


def group_hung(env, ck):
    src = env.path('src')
    os.makedirs(src)
    ml.write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('a.txt', b'a\n')]))
    m = ml.Mount(env, src, cache_dir=env.path('cache'))
    m.mount()
    pid = m.stats()['pid']
    stopped = False
    try:
        os.kill(pid, signal.SIGSTOP)
        stopped = True
        ml.poll(lambda: proc_state(pid) == 'T', what='the daemon stopped')
        said = ("shardfs: %s: its daemon (pid %d) does not answer within 5 s: it is stopped "
                "('kill -CONT %d' continues it)\n" % (m.mnt, pid, pid))
        # a budget far past the commands' bound (FS_MNT_ANSWER_MS): main before this test
        # waited for the daemon without end
        for cmd in (['stats', m.mnt], ['prefetch', m.mnt], ['refresh', m.mnt],
                    ['plan', m.mnt, '--clear']):
            r = env.run([env.shardfs] + cmd, timeout=40)
            e = r.stderr.decode(errors='replace')
            log('stopped daemon: shardfs %s: rc=%r %r' % (cmd[0], r.returncode, e))
            ck.eq('stopped daemon: shardfs %s: exit' % cmd[0], r.returncode, 1)
            ck.eq('stopped daemon: shardfs %s: says' % cmd[0], e, said)
        r = env.run([env.shardfs, 'umount', m.mnt], timeout=40, files=True)
        e = r.stderr.decode(errors='replace')
        log('stopped daemon: shardfs umount: rc=%r %r' % (r.returncode, e))
        ck.eq('stopped daemon: umount exit', r.returncode, 1)
        ck.eq('stopped daemon: umount says', e,
              "shardfs: unmounted %s, but its daemon %d is stopped: it finishes once continued "
              "('kill -CONT %d')\n" % (m.mnt, pid, pid))
        ck.ok(not ml.is_mounted(m.mnt), 'stopped daemon: %s still mounted' % m.mnt)
        os.kill(pid, signal.SIGCONT)
        stopped = False
        ck.ok(ml.poll(lambda: not ml.pid_alive(pid)), 'continued: the daemon %d ended' % pid)
        env.reap()
        ck.eq('continued: how the daemon ended', m.ends().get(pid), 'exited with status 0')
    finally:
        if stopped:
            os.kill(pid, signal.SIGCONT)
        m.umount(quiet=True)


def group_dashes(env, ck):
    src = env.path('src')
    os.makedirs(src)
    ml.write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('a.txt', b'a\n')]))
    plan = env.path('plan.txt')
    ml.write_file(plan, b's0/a.txt\n')
    m = ml.Mount(env, src, mountpoint=env.path('-m'), cache_dir=env.path('cache'))
    m.mount()
    try:
        def run(args):
            r = subprocess.run([env.shardfs] + args, cwd=env.tmp, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env.env,
                               timeout=60)
            log('shardfs %s: rc=%r %r %r' % (' '.join(args), r.returncode, r.stdout, r.stderr))
            return r
        for args, want in ((['stats', '--', '-m'], b'version '),
                           (['refresh', '--', '-m'], b'refreshed -m: 0 new'),
                           (['prefetch', '--', '-m', 's0'], b'prefetch: done: '),
                           (['plan', '--name', 'p', '--', '-m', plan], b"plan 'p': 1 path"),
                           (['plan', '--clear', '--name', 'p', '--', '-m'], b"plan 'p' cleared")):
            r = run(args)
            ck.eq('shardfs %s: exit' % ' '.join(args), r.returncode, 0)
            ck.ok(want in r.stdout, 'shardfs %s: %r' % (' '.join(args), r.stdout))
        # without '--' a MOUNTPOINT beginning with '-' is an option: usage
        ck.eq('shardfs stats -m: exit', run(['stats', '-m']).returncode, 2)
        r = run(['umount', '--', '-m'])
        ck.eq('shardfs umount -- -m: exit', r.returncode, 0)
        ck.ok(not ml.is_mounted(m.mnt), 'umount -- -m: still mounted')
    finally:
        m.umount(quiet=True)


def group_empty_opts(env, ck):
    """Every option whose value is a path or URL (its metavar in 'shardfs mount --help' DIR,
    FILE or URL), given '' (a variable that is not set): refused, exit 2, before anything is
    made (a final --help stops the command after its options were parsed)."""
    import re
    text = env.run([env.shardfs, 'mount', '--help']).stdout.decode()
    opts = sorted(set(re.findall(r'^ +(?:-\w, )?--([a-z-]+) (DIR|FILE|URL)\b', text, re.M)))
    log('options with a path or URL: %r' % opts)
    ck.ok(('cache-dir', 'DIR') in opts and len(opts) >= 3,
          '--help lists the path options: %r' % opts)
    for name, meta in opts:
        for cmd in (['mount'], ['index']) if name == 'cache-dir' else (['mount'],):
            args = [env.shardfs] + cmd + ['--' + name, '', env.tmp] + \
                (['/nonexistent-mnt'] if cmd == ['mount'] else []) + ['--help']
            r = env.run(args)
            e = r.stderr.decode(errors='replace')
            ck.eq('%s --%s \'\': exit' % (cmd[0], name), r.returncode, 2)
            ck.eq('%s --%s \'\': says' % (cmd[0], name), e,
                  "shardfs: %s: --%s wants a %s that is not empty, not ''\n"
                  % (cmd[0], name, meta))


def group_pack_names(env, ck):
    """'shardfs pack' of a class-folder tree whose file names are a seeded generated class of
    hostile names (the PIECES of 'names', so bytes that are not UTF-8 too, and up to 200 bytes):
    exit 0, every file in the shards once with its bytes (Python's tarfile), and every member
    read through a mount of the output equal to tarfile's. Main before this test: a name that is
    not UTF-8 failed the whole pack with 'ds-000000.tar: Input/output error'."""
    import tarfile
    src = env.path('in').encode()
    files = {}
    rng = env.rng
    for c in (b'cls-a', b'cls \xff b'):
        os.makedirs(os.path.join(src, c))
        for k in range(12):
            name = b''.join(rng.choice(PIECES) for _ in range(rng.randint(1, 6)))
            name = name.replace(b'/', b'_')[:190] + rng.choice([b'.jpg', b'.txt', b'', b'.a.b'])
            if name in (b'', b'.', b'..') or os.path.exists(os.path.join(src, c, name)):
                continue
            data = b'%s/%s %d\n' % (c, name, len(files))
            with open(os.path.join(src, c, name), 'wb') as f:
                f.write(data)
            files[data] = (c, name)
    out = env.path('out')
    os.makedirs(out)
    r = env.run([env.shardfs, 'pack', src, os.path.join(out, 'ds')])
    log('pack: rc=%r %r %r' % (r.returncode, r.stdout, r.stderr))
    ck.eq('pack: exit', r.returncode, 0)
    ck.ok(r.stdout.startswith(b'packed %d files in ' % len(files)), 'pack: %r' % r.stdout)
    seen, members = {}, {}
    for t in sorted(os.listdir(out)):
        if not t.endswith('.tar'):
            continue
        with tarfile.open(os.path.join(out, t), encoding='utf-8',
                          errors='surrogateescape') as tf:
            for m in tf:
                data = tf.extractfile(m).read()
                name = m.name.encode('utf-8', 'surrogateescape')
                members[(t[:-4], name)] = data
                if data in files:
                    seen[data] = seen.get(data, 0) + 1
    ck.eq('every file packed once', sorted(seen.values()), [1] * len(files))
    with ml.Mount(env, out, cache_dir=env.path('cache')) as m:
        bad = [k for k, data in members.items()
               if ml.read_result(os.path.join(m.mnt.encode(), k[0].encode(), k[1])) !=
               ('ok', data)]
        ck.eq('members read through the mount unlike tarfile', bad, [])
        ck.eq('damaged shards', m.stats().get('damaged_shards'), 0)


def group_python(env, ck):
    import tempfile
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..',
                                    'python'))
    import shardfs
    src, names, decoys, sizes = names_source(env, ck)
    tmp = env.path('tmp').encode()
    os.makedirs(tmp)
    with ml.Mount(env, src.decode(errors='surrogateescape'), cache_dir=env.path('cache')) as m:
        for i, name in enumerate(names):
            d = os.path.join(tmp, name)
            os.makedirs(d)
            os.chmod(d, 0o755)
            tempfile.tempdir = os.fsdecode(d)
            paths = [name + b'/m.bin', name + b'.bin']
            what = '%r' % name
            j = i
            if b'\n' in name:
                try:
                    shardfs.plan(m.mnt, paths, name='h%d' % i)
                    ck.ok(False, '%s: a path with a newline planned' % what)
                except ValueError:
                    ck.ok(True, '')
                # the decoy 'a' planned from this temporary directory
                j = len(names)
                paths = [decoys[0] + b'/m.bin', decoys[0] + b'.bin']
            try:
                info = shardfs.plan(m.mnt, paths, name='h%d' % i)
            except OSError as e:
                log('%s: plan: %r' % (what, e))
                info = None
            ck.ok(info is not None, '%s: no plan published' % what)
            if info is None:
                continue
            ck.eq('%s: paths' % what, info.paths, 2)
            ck.eq('%s: missing' % what, info.missing, 0)
            ck.eq('%s: bytes' % what, info.bytes, 10240 * (j + 1) + (j + 1))
            ck.eq('%s: fnv' % what, info.fnv, shardfs.plan_fnv(paths))
            shardfs.clear_plan(m.mnt, 'h%d' % i)
        tempfile.tempdir = None
        ck.eq('every plan cleared', shardfs.plans(m.mnt), {})


def group_fill_errors(env, ck):
    """'shardfs prefetch' of a store whose every read fails: its message and fill_errors count
    fills (requests), not the units of a chunk (16 units of 64 KiB in a 1 MiB chunk)."""
    src = env.path('src')
    os.makedirs(src)
    nfiles, size, chunk = 3, 3 << 20, 1 << 20
    for k in range(nfiles):
        with open(os.path.join(src, 'f%d.bin' % k), 'wb') as f:
            f.write(bytes([k + 1]) * size)
    nchunks = nfiles * size // chunk
    with ml.Mount(env, 'fault://' + src + '?fail_every=1', cache_dir=env.path('cache'),
                  extra=['--chunk-size', '1M', '--retry-budget', '0', '--warm', 'off']) as m:
        r = env.run([env.shardfs, 'prefetch', m.mnt])
        log('prefetch: rc=%r %r %r' % (r.returncode, r.stdout, r.stderr))
        st = m.stats()
        ck.eq('prefetch of a failing store: exit', r.returncode, 1)
        ck.eq('fills', st.get('fills'), 0)
        ck.eq('fill_errors: one a chunk', st.get('fill_errors'), nchunks)
        ck.ok(b'9.00 MiB not cached (%d fills failed meanwhile' % nchunks in r.stdout,
              'the prefetch\'s message: %r' % r.stdout)


def group_index_mount(env, ck):
    """'shardfs index' of a running mount (the mount point, a directory in it, a symlink to it,
    its file:// URL) or of a directory holding one: exit 1 naming the mount, nothing indexed
    (its --cache-dir never made); the mount's own source indexes (exit 0, 2 shards)."""
    top = env.path('top')
    src = os.path.join(top, 'src')
    os.makedirs(src)
    for k in range(2):
        with open(os.path.join(src, 's%d.tar' % k), 'wb') as f:
            f.write(ml.tar_bytes([('m.bin', b'y' * (4096 * (k + 1)))]))
    with ml.Mount(env, src, mountpoint=os.path.join(top, 'mnt'),
                  cache_dir=env.path('cache')) as m:
        os.symlink(m.mnt, env.path('link'))
        cases = [('the mount point', m.mnt, 'is the shardfs mount %s or lies inside it'),
                 ('a directory in it', os.path.join(m.mnt, 's0'),
                  'is the shardfs mount %s or lies inside it'),
                 ('a symlink to it', env.path('link'),
                  'is the shardfs mount %s or lies inside it'),
                 ('its file:// URL', 'file://' + m.mnt,
                  'is the shardfs mount %s or lies inside it'),
                 ('a directory holding it', top, 'holds the shardfs mount %s')]
        for i, (label, arg, want) in enumerate(cases):
            cache = env.path('icache-%d' % i)
            r = env.run([env.shardfs, 'index', '--cache-dir', cache, arg])
            log('%s: rc=%r %r %r' % (label, r.returncode, r.stdout, r.stderr))
            ck.eq('index of %s: exit' % label, r.returncode, 1)
            ck.ok((want % m.mnt).encode() in r.stderr, 'index of %s: %r' % (label, r.stderr))
            ck.ok(not os.path.exists(cache), 'index of %s: made its cache dir' % label)
        r = env.run([env.shardfs, 'index', '--cache-dir', env.path('icache-src'), src])
        ck.eq('index of the mount\'s source: exit', r.returncode, 0)
        ck.ok(r.stdout.startswith(b'indexed 2 shards'), 'index of the source: %r' % r.stdout)


GROUPS = {'names': (group_names, 240), 'hung': (group_hung, 240), 'python': (group_python, 240),
          'index-mount': (group_index_mount, 120),
          'fill-errors': (group_fill_errors, 120),
          'pack-names': (group_pack_names, 240),
          'dashes': (group_dashes, 240), 'empty-opts': (group_empty_opts, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
