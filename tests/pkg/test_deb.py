#!/usr/bin/env python3
"""The Debian package, as a user gets it: dpkg-buildpackage -b in a copy of the tree (nice,
DEB_BUILD_OPTIONS='nocheck parallel=2'), lintian without an error (group build: the test
pkg-deb-build, run beside the others: it changes nothing of the machine; it leaves the package
in OUTDIR with the SHA-256 of the tree it was built from), apt-get install ./shardfs_*.deb (group
install: the test pkg-deb, run alone and last; it takes OUTDIR's package when its tree is the
tree now, else builds it as the build group does);
then the installed pieces: 'import shardfs' in Debian's python3 from dist-packages, 'man -w',
the test store fault:// refused (the package is built without it),
a demo dataset mounted through an fstab file (mount -a -T FILE: a line per option family, types
shardfs and fuse.shardfs) and through the installed unit (systemd-analyze verify, then its
ExecStart as systemd runs it, from an env file), each mount read back exactly against the
members of the source shards, unmounted with umount; apt-get purge leaves no file of dpkg -L.
Needs root, /dev/fuse, dpkg-dev, debhelper, dh-python, lintian (scripts/install-deps.sh --test).
  test_deb.py SOURCE_ROOT build|install OUTDIR"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test.checks import Checks, skip  # noqa: E402
from shardfs_test.systemd import unit_commands  # noqa: E402

root, group, outdir = sys.argv[1], sys.argv[2], sys.argv[3]
CK = Checks('pkg-deb-build' if group == 'build' else 'pkg-deb')
# apt-get waits for another apt/dpkg run to let go of the dpkg lock (tests/run.sh's own
# install-deps, a bench's, unattended upgrades), at most 300 s, instead of failing at once
APT_LOCK_WAIT = 'DPkg::Lock::Timeout=300'
fails = CK.failures
check = CK.ok
T0 = time.monotonic()


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    return r


def poll(fn, timeout, what):
    t = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > t:
            raise RuntimeError('timed out after %gs waiting for %s' % (timeout, what))
        time.sleep(0.05)


def tree_tar():
    """The tree as committed plus what git does not ignore (not build/), as one tar stream."""
    files = run(['git', 'ls-files', '-co', '--exclude-standard', '-z'], cwd=root,
                check=True).stdout
    return subprocess.run(['tar', '--null', '-T', '-', '-cf', '-'], cwd=root,
                          input=files.encode(), capture_output=True, check=True).stdout


def build(tmp, tar):
    """The package built from the tree's tar stream in tmp/shardfs, linted: its path (exit 1
    when it is not built)."""
    tree = os.path.join(tmp, 'shardfs')
    os.mkdir(tree)
    subprocess.run(['tar', '-xf', '-'], cwd=tree, input=tar, check=True)
    env = dict(os.environ, DEB_BUILD_OPTIONS='nocheck parallel=2')
    r = run(['nice', '-n', '10', 'dpkg-buildpackage', '-b', '-us', '-uc'], cwd=tree, env=env)
    deb = [f for f in os.listdir(tmp) if f.startswith('shardfs_') and f.endswith('.deb')]
    if not check(r.returncode == 0 and len(deb) == 1,
                 'dpkg-buildpackage -b: %s (%.0f s)' % (deb, time.monotonic() - T0)):
        print(r.stdout[-3000:], r.stderr[-3000:])
        sys.exit(1)
    deb = os.path.join(tmp, deb[0])
    r = run(['lintian', deb])
    errors = [ln for ln in r.stdout.splitlines() if ln.startswith('E:')]
    check(not errors, 'lintian: no error (%s)' % ' | '.join(r.stdout.splitlines()))
    info = run(['dpkg-deb', '-f', deb, 'Depends']).stdout
    check(all(d in info for d in ('libfuse3', 'libcurl', 'libarchive', 'libzstd', 'libuv',
                                  'fuse3')),
          "Depends names Debian's runtime libraries and fuse3: " + info.strip())
    return deb


def g_build():
    """Build the package into OUTDIR (emptied first), beside the SHA-256 of its tree."""
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    tmp = tempfile.mkdtemp(prefix='shardfs-pkg.')
    tar = tree_tar()
    deb = build(tmp, tar)
    shutil.move(deb, os.path.join(outdir, os.path.basename(deb)))
    with open(os.path.join(outdir, 'tree.sha256'), 'w') as f:
        f.write(hashlib.sha256(tar).hexdigest() + '\n')
    print('test time %.0f s' % (time.monotonic() - T0))
    if not fails:
        shutil.rmtree(tmp, ignore_errors=True)


def built_deb():
    """OUTDIR's package when pkg-deb-build made it from the tree as it is now, else None."""
    try:
        with open(os.path.join(outdir, 'tree.sha256')) as f:
            want = f.read().strip()
        debs = [f for f in os.listdir(outdir) if f.startswith('shardfs_') and f.endswith('.deb')]
    except OSError:
        return None
    if len(debs) != 1 or hashlib.sha256(tree_tar()).hexdigest() != want:
        return None
    return os.path.join(outdir, debs[0])


def g_install():
    if run(['dpkg-query', '-W', '-f=${Status}', 'shardfs']).stdout.startswith('install ok'):
        print('FAIL: a shardfs package is installed already; this test installs and removes '
              'its own')
        sys.exit(1)
    tmp = tempfile.mkdtemp(prefix='shardfs-pkg.')
    deb = built_deb()
    if deb:
        print('the package pkg-deb-build made from this tree: %s' % deb)
    else:
        print('no package of this tree from pkg-deb-build in %s: building it' % outdir)
        deb = build(tmp, tree_tar())
    r = run(['apt-get', '-o', APT_LOCK_WAIT, 'install', '-y', '-q', '--no-install-recommends', deb],
            env=dict(os.environ, DEBIAN_FRONTEND='noninteractive'))
    if not check(r.returncode == 0, 'apt-get install ./%s' % os.path.basename(deb)):
        print(r.stdout[-3000:], r.stderr[-3000:])
        sys.exit(1)
    listed = [p for p in run(['dpkg', '-L', 'shardfs'], check=True).stdout.splitlines()
              if p != '/.']
    print('dpkg -L shardfs:\n  ' + '\n  '.join(listed))
    ours = [p for p in listed if not os.path.isdir(p)]  # files and links (/sbin may link to a dir)
    mounts = []
    try:
        for p in ('/usr/bin/shardfs', '/sbin/mount.shardfs', '/sbin/mount.fuse.shardfs',
                  '/lib/systemd/system/shardfs@.service',
                  '/usr/share/bash-completion/completions/shardfs',
                  '/usr/lib/python3/dist-packages/shardfs/__init__.py'):
            check(p in listed, 'the package installs ' + p)
        for page in ('shardfs', 'mount.shardfs'):
            r = run(['man', '-w', page])
            check(r.returncode == 0 and r.stdout.startswith('/usr/share/man/'), 'man -w %s: %s'
                  % (page, r.stdout.strip()))
        clean = {k: v for k, v in os.environ.items() if not k.startswith('PYTHON')}
        r = run(['/usr/bin/python3', '-c', 'import shardfs; print(shardfs.__file__)'], cwd=tmp,
                env=clean)
        check(r.stdout.strip() == '/usr/lib/python3/dist-packages/shardfs/__init__.py',
              "Debian's python3 imports shardfs from dist-packages: %s%s" % (r.stdout, r.stderr))
        # the shipped binary has no test store (debian/rules: -Dtest_backends=false): fault:// is
        # refused, saying why, before anything is read or written
        r = run(['/usr/bin/shardfs', 'index', 'fault://' + tmp])
        check(r.returncode == 1 and 'fault:// is a test store, built only for tests' in r.stderr,
              'the packaged shardfs refuses fault://: rc %d, %s' % (r.returncode, r.stderr.strip()))

        # the demo dataset: 3 tar shards and a tar.gz of 25 samples each (txt, cls, jpg, bin)
        data, work = os.path.join(tmp, 'data'), os.path.join(tmp, 'work')
        ref = {}  # shard's mount directory -> {member: bytes}
        images = {}  # imagefolder path -> bytes
        i = 0
        for shard in range(4):
            d = os.path.join(work, str(shard))
            os.makedirs(d)
            members = {}
            for s in range(25):
                key = 'sample%06d' % i
                members[key + '.txt'] = b'demo sample %d of shard %d\n' % (i, shard)
                members[key + '.cls'] = b'%d\n' % (i % 10)
                members[key + '.jpg'] = bytes((i * 7 + k) % 251 for k in range(3000 + i))
                members[key + '.bin'] = os.urandom(4096)
                images['%d/%s.jpg' % (i % 10, key)] = members[key + '.jpg']
                i += 1
            for name, b in members.items():
                with open(os.path.join(d, name), 'wb') as f:
                    f.write(b)
            name = 'shard-%06d' % shard
            sub = 'val' if shard == 3 else 'train'
            os.makedirs(os.path.join(data, sub), exist_ok=True)
            out = os.path.join(data, sub, name + ('.tar.gz' if shard == 3 else '.tar'))
            subprocess.run(['tar', '-C', d, '--sort=name', '-czf' if shard == 3 else '-cf', out,
                            '.'], check=True)
            ref[sub + '/' + name] = members

        def read_back(mnt, layout, label):
            if layout == 'imagefolder':
                got = {}
                for dp, dn, fn in os.walk(mnt):
                    dn[:] = [x for x in dn if x != '.shardfs']
                    for f in fn:
                        with open(os.path.join(dp, f), 'rb') as fh:
                            got[os.path.relpath(os.path.join(dp, f), mnt)] = fh.read()
                return check(got == images, '%s: %d imagefolder files read back exactly (want %d)'
                             % (label, len(got), len(images)))
            ok = True
            for sd, members in ref.items():
                names = sorted(os.listdir(os.path.join(mnt, sd)))
                got = {}
                for n in names:
                    with open(os.path.join(mnt, sd, n), 'rb') as fh:
                        got[n] = fh.read()
                ok = ok and got == members
            return check(ok, '%s: the members of %d shards read back exactly' % (label, len(ref)))

        def stats_pid(mnt):
            with open(os.path.join(mnt, '.shardfs', 'stats')) as f:
                return json.load(f)['pid']

        def umount(mnt, label):
            pid = stats_pid(mnt)
            r = run(['umount', mnt])
            check(r.returncode == 0, '%s: umount %s %s' % (label, mnt, r.stderr.strip()))
            poll(lambda: not os.path.exists('/proc/%d' % pid), 60, 'the daemon of %s to end' % mnt)
            mounts.remove(mnt)

        # fstab: a line per option family; every line goes through /sbin/mount.shardfs
        cache = os.path.join(tmp, 'cache')
        lines = [
            # the view: layout, class, imagefolder build
            ('imagefolder', 'shardfs', 'layout=imagefolder,class-from=cls,'
             'imagefolder-build-memory=1M,listing-attrs=all,strict-open,xattr'),
            # the kernel and FUSE: threads, timeout, FUSE's own options, mount(8)'s dropped
            ('shards', 'shardfs', 'defaults,ro,nofail,_netdev,x-systemd.automount,threads=4,'
             'timeout=1.5,allow_other,default_permissions,noatime,no-xattr'),
            # the cache: dir, size, reserve, decoding bounds, readahead, chunks, warm, plans
            ('shards', 'fuse.shardfs', 'cache-dir=%s,cache-size=64M,min-free=1M,'
             'min-free-percent=1,max-decode-ratio=100,max-decoded-size=1G,readahead=4M,'
             'chunk-size=1M,warm=off,plan-lookahead=8M,prefetch-shards=1' % cache),
            # the store and the log (a local source: the store's options are accepted, unused)
            ('shards', 'shardfs', 'connections=4,retry-budget=5,stall-timeout=5,connect-timeout=5,'
             'no-sign,endpoint=http://127.0.0.1:9,ca-file=/etc/hostname,log-file=%s/log'
             % tmp),
            # not mounted by mount -a: mounted below by its mountpoint (mount -T FILE MOUNTPOINT)
            ('shards', 'shardfs', 'noauto,comment=later,warm=all'),
        ]
        fstab = os.path.join(tmp, 'fstab')
        with open(fstab, 'w') as f:
            for n, (layout, fstype, opts) in enumerate(lines):
                mnt = os.path.join(tmp, 'mnt%d' % n)
                os.mkdir(mnt)
                f.write('%s %s %s %s 0 0\n' % (data, mnt, fstype, opts))
        os.environ['XDG_CACHE_HOME'] = os.path.join(tmp, 'xdg')  # the lines without cache-dir
        r = run(['mount', '-a', '-T', fstab])
        check(r.returncode == 0, 'mount -a -T %s: %s' % (fstab, r.stderr.strip()))
        # mount -a again: every line is mounted already (mount(8) runs the helper for each, since
        # the table says shardfs:SOURCE), so it exits 0 and mounts nothing twice
        r = run(['mount', '-a', '-T', fstab])
        check(r.returncode == 0, 'mount -a -T %s again: %s' % (fstab, r.stderr.strip()))
        with open('/proc/self/mounts') as f:
            points = [ln.split()[1] for ln in f]
        twice = [p for p in set(points) if p.startswith(tmp + '/') and points.count(p) > 1]
        check(not twice, 'mount -a again mounts nothing twice: %s' % twice)
        for n, (layout, fstype, opts) in enumerate(lines):
            mnt = os.path.join(tmp, 'mnt%d' % n)
            if 'noauto' in opts:
                check(not os.path.exists(os.path.join(mnt, '.shardfs')),
                      'fstab line %d (noauto) is not mounted by mount -a' % n)
                continue
            if not check(os.path.exists(os.path.join(mnt, '.shardfs', 'stats')),
                         'fstab line %d (%s) is mounted' % (n, fstype)):
                continue
            mounts.append(mnt)
            read_back(mnt, layout, 'fstab line %d' % n)
            with open(os.path.join(mnt, '.shardfs', 'stats')) as f:
                st = json.load(f)
            check(st['layout'] == layout, 'fstab line %d: layout %s' % (n, st['layout']))
            if 'cache-dir=' in opts:
                check(st['cache_dir'].startswith(cache + '/'), 'fstab line %d: the cache is in '
                      'cache-dir: %s' % (n, st['cache_dir']))
            if 'log-file=' in opts:
                check(os.path.getsize(os.path.join(tmp, 'log')) > 0, 'fstab line %d: log-file' % n)
            umount(mnt, 'fstab line %d' % n)
        # mount -T FILE MOUNTPOINT: the noauto line by its mountpoint
        mnt = os.path.join(tmp, 'mnt%d' % (len(lines) - 1))
        r = run(['mount', '-T', fstab, mnt])
        if check(r.returncode == 0, 'mount -T FILE MOUNTPOINT: %s' % r.stderr.strip()):
            mounts.append(mnt)
            read_back(mnt, 'shards', 'mount -T FILE MOUNTPOINT')
            umount(mnt, 'mount -T FILE MOUNTPOINT')
        # suid and dev: mount(8) does not hand them to a helper (they clear flags); the mount is
        # nosuid,nodev all the same, and the helper run by itself refuses them with a message
        r = run(['mount', '-t', 'shardfs', '-o', 'suid,dev', data, mnt])
        if check(r.returncode == 0, 'mount -t shardfs -o suid,dev: %s' % r.stderr.strip()):
            mounts.append(mnt)
            with open('/proc/self/mounts') as f:
                flags = [ln.split()[3].split(',') for ln in f if ln.split()[1] == mnt]
            check(len(flags) == 1 and 'nosuid' in flags[0] and 'nodev' in flags[0],
                  'the mount is nosuid,nodev whatever the options say: %s' % flags)
            umount(mnt, 'mount -o suid,dev')
        for o in ('suid', 'dev'):
            r = run(['/sbin/mount.shardfs', data, mnt, '-o', 'ro,' + o])
            check(r.returncode == 1 and "option '%s' refused" % o in r.stderr,
                  'mount.shardfs -o %s refused: %s' % (o, r.stderr.strip()))

        # the installed unit: verified, then its commands as systemd runs them for instance demo
        unit = '/lib/systemd/system/shardfs@.service'
        r = run(['systemd-analyze', 'verify', 'shardfs@demo.service'])
        check(r.returncode == 0 and 'shardfs@' not in r.stderr,
              'systemd-analyze verify shardfs@demo.service: %s' % r.stderr.strip())
        mnt = os.path.join(tmp, 'unit-mnt')
        uenv = {'SOURCE': data, 'MOUNTPOINT': mnt,
                'OPTIONS': '--layout imagefolder --cache-dir %s/unit-cache -o allow_other' % tmp}
        execs = unit_commands(unit, uenv)[0]
        check(execs.get('ExecStart', [['']])[0][0] == '/usr/bin/shardfs',
              'the unit runs /usr/bin/shardfs')
        for cmd in execs['ExecStartPre']:  # in order, as systemd runs them
            subprocess.run(cmd, check=True)
        daemon = subprocess.Popen(execs['ExecStart'][0], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL,
                                  stderr=open(os.path.join(tmp, 'unit.log'), 'w'))
        mounts.append(mnt)
        poll(lambda: os.path.exists(os.path.join(mnt, '.shardfs', 'stats')) or
             daemon.poll() is not None, 120, 'the unit mount at %s' % mnt)
        if check(daemon.poll() is None, 'the unit\'s ExecStart mounts and stays (%s)' %
                 ' '.join(execs['ExecStart'][0])):
            read_back(mnt, 'imagefolder', 'unit')
            r = run(execs['ExecStop'][0])
            check(r.returncode == 0, 'the unit\'s ExecStop: %s' % r.stderr.strip())
            try:
                rc = daemon.wait(60)
            except subprocess.TimeoutExpired:
                rc = None
            check(rc == 0, 'the unit\'s daemon exits 0 after ExecStop (%s)' % rc)
            mounts.remove(mnt)
    finally:
        for mnt in mounts:
            run(['umount', '-l', mnt])
        r = run(['apt-get', '-o', APT_LOCK_WAIT, 'purge', '-y', '-q', 'shardfs'],
                env=dict(os.environ, DEBIAN_FRONTEND='noninteractive'))
        check(r.returncode == 0, 'apt-get purge shardfs: %s' % r.stderr.strip()[-500:])
        left = [p for p in ours if os.path.lexists(p)]
        left += [p for p in listed if os.path.isdir(p) and 'shardfs' in p and os.path.lexists(p)]
        check(not left, 'apt-get purge leaves no file of the package: %s' % left)

    print('test time %.0f s' % (time.monotonic() - T0))
    if not fails:
        shutil.rmtree(tmp, ignore_errors=True)


GROUPS = {'build': g_build, 'install': g_install}

if os.geteuid() != 0 or not os.path.exists('/dev/fuse'):
    skip('needs root and /dev/fuse', 'host')
if not shutil.which('dpkg-buildpackage'):
    skip('needs dpkg-dev (scripts/install-deps.sh --test)', 'tool')
GROUPS[group]()
CK.exit()
