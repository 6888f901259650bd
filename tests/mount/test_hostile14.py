#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass (round 14), each finding replayed as a test.

usage: test_hostile14.py SHARDFS GROUP
GROUP:
  beneath    a seeded tree of shards (SHARDFS_TEST_SEED) with symbolic links inside it (relative,
             to shards, to directories, climbing within) and out of it (absolute, relative past
             its top, to a file and to a directory of another tree holding shards marked
             OUTSIDE, and an absolute link to a place inside): the mount's tree is exactly what
             the tree holds by the rule (a link followed by a relative target that stays
             inside, local_beneath in backend/backend_local.c), every shard's bytes and
             member exact, and the log names each link refused, once. Then under the running
             mount shards and a directory are swapped for links out (and one link out for a
             shard): every path read before 'shardfs refresh' reads its old bytes or fails,
             never a byte from outside; after it the tree and the bytes are again exact and
             each new link out named once. Before (backend/backend_local.c at 163d92e): the
             links out were followed, the outside shards served.
  beneath-fallback  the same, the daemon told that openat2 is missing (SHARDFS_TEST_NO_OPENAT2,
             a test build only): no link below the source's top is followed at all, each
             named once.
  lognames   seeded hostile names (a newline, a tab, a backslash, '\\x41' look-alikes, bytes that
             are not UTF-8, quotes): a shard so named with a member whose path is unsafe, and a
             link so named that leads out of the source: every line of the daemon's log is one
             line of UTF-8 with no control byte, and unquoting each (fs_quote's rule) gives back
             the exact message with the name's bytes: the log's lines about each shard (the
             member left out) and each link; 'shardfs index' of the source says the links the
             same way on stderr. Before (fs/core/fs_log.c at 163d92e): a backslash and bytes
             that are not UTF-8 went to the log as they were (a name '\\x41' read as 'A').
  shardperm  seeded modes of a local source's shards (read bits of owner, group and others, in
             directories of seeded modes) under an '-o allow_other' mount by root, read as
             'nobody' (setpriv): each member is readable through the mount exactly when nobody
             can read the shard's file in the source, and the raw .tar likewise. Before
             (fs/core/fs_view_shard.c at 163d92e): a member directory was 0555 whatever the
             shard's mode, so a shard of mode 0600 gave its members to every user.
  localperm  'shardfs index' run as 'nobody' on a local source it cannot read (a 0700 directory of
             root's, and one below a 0700 directory): exit 1, one line saying it is a matter of
             permission on that path, not of credentials. Before (fs/core/fs_core.c at 163d92e):
             "access denied (check the credentials in the environment)".

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import io  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tarfile  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

from test_cli_paths import quote  # noqa: E402  (fs_quote, rewritten from its contract)
from test_hostile_ctl import gen_names  # noqa: E402

MARK = b'OUTSIDE!'
OUT_MSG = ('source: %s is a symbolic link that leads out of the source directory (an absolute '
           'target, or one past its top): not listed')
NOFOLLOW_MSG = ('source: %s is a symbolic link, not followed where openat2 is missing (this '
                'kernel): not listed')


def tar_of(members):
    """A GNU tar of [(name bytes, data)], names as their bytes."""
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode='w', format=tarfile.GNU_FORMAT,
                      encoding='utf-8', errors='surrogateescape') as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name.decode('utf-8', errors='surrogateescape'))
            ti.size, ti.mtime, ti.mode = len(data), 1700000000, 0o644
            tf.addfile(ti, io.BytesIO(data))
    return bio.getvalue()


def unquote(b):
    """The bytes fs_quote's rule quoted as b."""
    out, i = bytearray(), 0
    while i < len(b):
        if b[i:i + 1] == b'\\':
            c = b[i + 1:i + 2]
            if c == b'x' and re.fullmatch(rb'[0-9a-f]{2}', b[i + 2:i + 4]):
                out.append(int(b[i + 2:i + 4], 16))
                i += 4
                continue
            if c in (b'\\', b'n', b't', b'r'):  # else not a quote's: the bytes as they are
                out += {b'\\': b'\\', b'n': b'\n', b't': b'\t', b'r': b'\r'}[c]
                i += 2
                continue
        out.append(b[i])
        i += 1
    return bytes(out)


def resolve(src, rel, follow):
    """What the daemon's rule makes of rel below src: ('file'|'dir', real path), ('out',) for
    a link it refuses, or None (dangling). follow: links with a relative target inside are
    followed (openat2); else none is."""
    parts, done, hops = rel.split('/'), [], 0
    while parts:
        p = parts.pop(0)
        if p in ('', '.'):
            continue
        if p == '..':
            if not done:
                return ('out',)
            done.pop()
            continue
        full = os.path.join(src, *(done + [p]))
        if not os.path.lexists(full):
            return None
        if os.path.islink(full):
            t = os.readlink(full)
            hops += 1
            if not follow or t.startswith('/'):
                return ('out',)
            if hops > 40:
                return None
            parts = t.split('/') + parts
            continue
        done.append(p)
    full = os.path.join(src, *done)
    return ('dir' if os.path.isdir(full) else 'file', full)


def expect(src, follow):
    """The mount's tree (relative paths, shard -> its directory and member), {path: bytes} of
    each shard file and member, and the links refused, as the daemon lists src."""
    tree, data, refused = set(), {}, set()

    def walk(rel, up):
        for name in sorted(os.listdir(os.path.join(src, rel))):
            k = os.path.join(rel, name) if rel else name
            r = resolve(src, k, follow)
            if r is None:
                continue
            if r[0] == 'out':
                refused.add(k)
                continue
            st = os.stat(r[1])
            if r[0] == 'dir':
                if (st.st_dev, st.st_ino) in up:
                    continue  # a loop: the tests make none
                tree.add(k)
                walk(k, up | {(st.st_dev, st.st_ino)})
            else:
                raw = open(r[1], 'rb').read()
                tree.update({k, k[:-4], k[:-4] + '/m.txt'})
                data[k] = raw
                with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
                    data[k[:-4] + '/m.txt'] = tf.extractfile('m.txt').read()
    st = os.stat(src)
    walk('', {(st.st_dev, st.st_ino)})
    return sorted(tree), data, refused


def beneath(env, ck, follow):
    rng = env.rng
    src, out = env.path('src'), env.path('out')
    os.makedirs(os.path.join(out, 'od'))
    for p in ('o.tar', 'od/o2.tar'):
        ml.write_file(os.path.join(out, p), tar_of([(b'm.txt', MARK * rng.randint(10, 400))]))
    os.makedirs(src)
    dirs = ['']
    for i in range(rng.randint(4, 8)):
        d = os.path.join(rng.choice(dirs), 'd%d' % i)
        os.makedirs(os.path.join(src, d))
        dirs.append(d)
    shards = []
    for d in dirs:  # keep.tar in each: no directory is ever left empty
        for n in ['keep'] + ['s%d' % j for j in range(rng.randint(1, 3))]:
            k = os.path.join(d, n + '.tar')
            ml.write_file(os.path.join(src, k), tar_of([(b'm.txt', ('in %s\n' % k).encode() +
                                                         rng.randbytes(rng.randint(0, 3000)))]))
            shards.append(k)
    leaves = [d for d in dirs[1:] if not any(x.startswith(d + '/') for x in dirs)]

    def rel_to(frm_dir, target):
        return os.path.relpath(target, frm_dir or '.')

    def link(kind, i):
        d = rng.choice(dirs)
        name = os.path.join(d, '%s%d.tar' % (kind, i))
        depth = len(d.split('/')) if d else 0
        if kind == 'infile':
            t = rel_to(d, rng.choice(shards))
        elif kind == 'indir':
            cand = [x for x in leaves if not (d + '/').startswith(x + '/')]
            if not cand:
                return
            name, t = name[:-4], rel_to(d, rng.choice(cand))
        elif kind == 'outabs':
            t = os.path.join(out, 'o.tar')
        elif kind == 'outrel':
            t = '../' * (depth + 1) + 'out/o.tar'
        elif kind == 'outdir':
            name, t = name[:-4], os.path.join(out, 'od')
        else:  # 'inabs': an absolute target inside: refused as well
            t = os.path.join(src, rng.choice(shards))
        os.symlink(t, os.path.join(src, name))
    for i in range(rng.randint(8, 14)):
        link(rng.choice(['infile', 'infile', 'indir', 'outabs', 'outrel', 'outdir', 'inabs']), i)
    for kind in ('infile', 'indir', 'outabs', 'outrel', 'outdir', 'inabs'):
        link(kind, 100)  # one of each kind at least
    msg = OUT_MSG if follow else NOFOLLOW_MSG
    prefix = [] if follow else ['env', 'SHARDFS_TEST_NO_OPENAT2=1']
    cache = env.path('cache')

    def check(m, when, said):
        want, data, refused = expect(src, follow)
        got = ml.tree_of(m.mnt)
        if got != want:
            log('%s: only in the mount %r; only in the source %r' % (
                when, sorted(set(got) - set(want)), sorted(set(want) - set(got))))
        ck.eq('%s: the mount\'s tree' % when, got, want)
        for p, b in sorted(data.items()):
            ck.eq('%s: %s: bytes' % (when, p), ml.read_result(os.path.join(m.mnt, p)), ('ok', b))
        text = ml.logs_under(cache)
        for k in sorted(refused | said):
            ck.eq('%s: log: %s named once' % (when, k), text.count(msg % k + '\n'), 1)
        ck.eq('%s: log: links refused' % when, text.count(msg.split('%s')[1]),
              len(refused | said))
        return refused | said, data

    with ml.Mount(env, src, cache_dir=cache, prefix=prefix) as m:
        said, data = check(m, 'mount', set())
        ck.ok(any(MARK in b for b in data.values()) is False, 'no outside byte listed')
        # under the running mount: shards and a directory swapped for links out, a link out
        # replaced by a shard, a link inside added
        before = dict(data)
        plain = [k for k in shards if not k.endswith('keep.tar')]
        for k in rng.sample(plain, min(3, len(plain))):
            tmp = os.path.join(src, k + '.new')
            os.symlink(os.path.join(out, 'o.tar') if rng.random() < 0.5 else
                       '../' * (k.count('/') + 1) + 'out/o.tar', tmp)
            os.replace(tmp, os.path.join(src, k))
        d = rng.choice(leaves)
        os.rename(os.path.join(src, d), os.path.join(src, d + '.old'))
        os.symlink(os.path.join(out, 'od'), os.path.join(src, d))
        outs = sorted(x for x in said  # sorted: a set's order is the hash seed's
                      if x.endswith('.tar') and os.path.islink(os.path.join(src, x)))
        if outs:
            x = rng.choice(outs)
            os.unlink(os.path.join(src, x))
            ml.write_file(os.path.join(src, x), tar_of([(b'm.txt', b'now a shard\n')]))
        os.symlink('keep.tar', os.path.join(src, 'newlink.tar'))
        for p, b in sorted(before.items()):
            r = ml.read_result(os.path.join(m.mnt, p))
            ck.ok(r[0] == 'err' or r[1] == b, 'changed, not refreshed: %s: %r (the old bytes '
                  'or an error)' % (p, r[1][:40] if r[0] == 'ok' else r))
        r = env.run([env.shardfs, 'refresh', m.mnt])
        ck.eq('refresh: exit', r.returncode, 0)
        said2, data = check(m, 'after refresh', said)
        ck.ok(not any(MARK in b for b in data.values()), 'no outside byte after refresh')
        r = env.run([env.shardfs, 'refresh', m.mnt])
        ck.eq('refresh 2: exit', r.returncode, 0)
        check(m, 'after refresh 2 (nothing said again)', said2)
        ck.eq('no line of the log holds outside bytes', ml.logs_under(cache).count('OUTSIDE'), 0)


def group_beneath(env, ck):
    beneath(env, ck, True)


def group_beneath_fallback(env, ck):
    beneath(env, ck, False)


def group_lognames(env, ck):
    src, out = env.path('src').encode(), env.path('out').encode()
    os.makedirs(src)
    os.makedirs(out)
    ml.write_file(os.path.join(out, b'o.tar'), tar_of([(b'm.txt', MARK)]))
    names = gen_names(env.rng, 24)
    for i, n in enumerate(names):
        ml.write_file(os.path.join(src, n + b'.tar'),
                      tar_of([(b'ok.txt', b'%d\n' % i), (b'../' + n, b'x')]))
        os.symlink(os.path.join(out, b'o.tar'), os.path.join(src, n + b'-out.tar'))
    cache = env.path('cache')
    with ml.Mount(env, src.decode(errors='surrogateescape'), cache_dir=cache) as m:
        mnt = m.mnt.encode()
        for i, n in enumerate(names):
            ck.eq('%r: its member' % n, ml.read_result(os.path.join(mnt, n, b'ok.txt')),
                  ('ok', b'%d\n' % i))
    raw = b''
    for d, _, files in os.walk(cache):
        if 'log' in files:
            raw += open(os.path.join(d, 'log'), 'rb').read()
    lines = raw.split(b'\n')[:-1]
    bad = [ln for ln in lines if re.search(rb'[\x00-\x1f\x7f]', ln)]
    try:
        for ln in lines:
            ln.decode('utf-8')
    except UnicodeDecodeError as e:
        bad.append(repr(e).encode())
    ck.eq('log lines with a control byte or not UTF-8', bad, [])
    msgs = [unquote(ln.split(b': ', 1)[1]) for ln in lines if b': ' in ln]
    for n in names:
        ck.eq('%r: the link out, its line unquoted' % n,
              msgs.count((OUT_MSG % '%s').encode() % (n + b'-out.tar')), 1)
        ck.eq('%r: the member left out, its line unquoted' % n,
              msgs.count(b"shard %s: the first member left out: '../%s': member at offset "
                         b"1024 left out: name with a '..' component" % (n + b'.tar', n)), 1)
        ck.eq('%r: the link out\'s line, as fs_quote says' % n,
              sum(ln.endswith(b' warning: ' + (OUT_MSG % '%s').encode() % quote(n + b'-out.tar'))
                  for ln in lines), 1)
    r = env.run([env.shardfs, 'index', '--cache-dir', env.path('cache2'),
                 src.decode(errors='surrogateescape')])
    errs = r.stderr.split(b'\n')
    for n in names:
        ck.eq('index: %r: the link out on stderr, one line, quoted' % n,
              errs.count(b'shardfs: ' + (OUT_MSG % '%s').encode() % quote(n + b'-out.tar')), 1)

NOBODY = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--']


def as_nobody_reads(path):
    """1 when 'nobody' can read path (a file), else 0."""
    r = subprocess.run(NOBODY + ['/bin/cat', path], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    return 1 if r.returncode == 0 else 0


def need_nobody():
    if os.getuid() != 0 or not shutil.which('setpriv'):
        raise ml.Skip('needs root and setpriv (to read as nobody)', 'tool')


def group_shardperm(env, ck):
    need_nobody()
    rng = env.rng
    src = env.path('src')
    os.makedirs(src)
    os.chmod(env.tmp, 0o755)
    modes = [0o644, 0o640, 0o604, 0o600, 0o400, 0o444, 0o000, 0o044, 0o004]
    dmodes = {'': 0o755, 'd1': 0o755, 'd2': 0o711, 'd3': 0o750}
    shards = []
    for d in dmodes:
        if d:
            os.makedirs(os.path.join(src, d))
        for i in range(rng.randint(3, 6)):
            k = os.path.join(d, 's%d.tar' % i)
            ml.write_file(os.path.join(src, k), tar_of([(b'm.txt', b'%s\n' % k.encode())]))
            os.chmod(os.path.join(src, k), rng.choice(modes))
            shards.append(k)
    for d, mode in dmodes.items():
        os.chmod(os.path.join(src, d), mode)
    want = {k: as_nobody_reads(os.path.join(src, k)) for k in shards}
    log('shards: %s' % ', '.join('%s %03o' % (k, os.stat(os.path.join(src, k)).st_mode & 0o777)
                                 for k in shards))
    mnt = env.path('mnt')
    os.makedirs(mnt)
    os.chmod(mnt, 0o755)
    with ml.Mount(env, src, mountpoint=mnt, cache_dir=env.path('cache'),
                  extra=['-o', 'allow_other']) as m:
        for k in shards:
            ck.eq('%s: nobody reads its member as it reads the shard' % k,
                  as_nobody_reads(os.path.join(m.mnt, k[:-4], 'm.txt')), want[k])
            ck.eq('%s: nobody reads the raw .tar as the shard' % k,
                  as_nobody_reads(os.path.join(m.mnt, k)), want[k])
            ck.eq('%s: root reads its member' % k, ml.read_result(
                os.path.join(m.mnt, k[:-4], 'm.txt')), ('ok', b'%s\n' % k.encode()))


def group_localperm(env, ck):
    need_nobody()
    os.chmod(env.tmp, 0o755)
    top = env.path('top')
    os.makedirs(os.path.join(top, 'closed', 'inner'))
    ml.write_file(os.path.join(top, 'closed', 'inner', 'a.tar'), tar_of([(b'm.txt', b'x')]))
    os.chmod(top, 0o755)
    cache = env.path('nbcache')
    os.makedirs(cache)
    os.chown(cache, 65534, 65534)
    os.chmod(cache, 0o700)
    for label, source, mode in (('a 0700 directory', os.path.join(top, 'closed'), 0o700),
                                ('below a 0700 one', os.path.join(top, 'closed', 'inner'),
                                 0o700)):
        os.chmod(os.path.join(top, 'closed'), mode)
        r = env.run(NOBODY + [env.shardfs, 'index', '--cache-dir', cache, source])
        ck.eq('%s: exit' % label, r.returncode, 1)
        err = r.stderr.decode(errors='replace')
        log('%s: %s' % (label, err.strip()))
        ck.eq('%s: one line' % label, err.count('\n'), 1)
        ck.ok('Permission denied: this user cannot read it or search a directory on its path' in
              err and 'credentials' not in err, '%s: said as a matter of permission, not of '
              'credentials: %r' % (label, err))


GROUPS = {'beneath': (group_beneath, 180), 'beneath-fallback': (group_beneath_fallback, 180),
          'lognames': (group_lognames, 120), 'shardperm': (group_shardperm, 120),
          'localperm': (group_localperm, 60)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
