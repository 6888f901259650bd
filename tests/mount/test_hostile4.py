#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass over the package as a user meets it, each
finding replayed as a seeded test (local sources: no store).

usage: test_hostile4.py SHARDFS GROUP
GROUP:
  plan-abs  'shardfs plan' of a seeded plan file whose lines are each, at random, a member's
            mount-relative path, the same path absolute under the mount point (as a reader
            opens it; with a doubled slash after the mount point too), a missing member under
            the mount point, a path outside the mount, or the mount point itself: the plan
            holds exactly the lines that name a member (.shardfs/plans: paths, missing, bytes,
            and the fnv of their mount-relative forms, as shardfs.plan_fnv gives it); reading
            them in order brings the plan to its end. Before the mend every absolute line was
            taken as mount-relative ('tmp/.../mnt/s0/...'): 'shardfs plan' said the paths were
            'not in the mount (skipped)', though 'shardfs prefetch' and the Python module take
            absolute paths into the mount.
  left-out  seeded shards of ordinary members and members a mount leaves out (a '..'
            component, a name component over 255 bytes, a character or block device, a FIFO),
            indexed by a listing: each shard with any says which it left out first, by its name
            as stored and why ("shard S: the first member left out: 'NAME': ... left out:
            REASON"), and how many; a shard without any says neither. Before the mend the log
            gave only the count, so a user could not find the members in a shard.
  conflicts seeded source trees where names meet in one directory of the mount (the root and
            a subdirectory): a directory or a plain file N, shards N.tar, N.tar.gz, N.tgz (each
            shows as N/) and N.tar.tar (its N.tar/ meets the raw N.tar): the entry that sorts
            first wins (a directory, then a file, then the shard whose key sorts first) and is
            what N shows; every other is one log line that says what it was and what hid it
            ("name conflict: 'N' in directory 'D' is hidden: the members of D/N.tgz, behind a
            directory of the source"; "in the mount's root" for the root), hidden_names counts
            them. Before the mend the line said
            only "'N' in directory 'D' is hidden": not which shard's members, nor by what.
  source-kind  'shardfs mount' and 'shardfs index' of a local source that is no directory, in
            a seeded order: a shard file (.tar, .tar.gz), another file, a symlink to a shard,
            a FIFO, /dev/null, a shard as a file:// URL: exit 1, and the message names the
            source and says a local source is the directory that holds the shards. Before the
            mend: 'source shard.tar: Not a directory', though an http:// URL of one shard
            mounts.
  mount-race  'shardfs mount' of a mount point another 'shardfs mount' holds (between its
            checks and its mount: the test holds the directory's lock as it would): exit 1,
            'under way', nothing mounted; then seeded rounds of 2 to 4 'shardfs mount' of one
            mount point at once: exactly one exits 0, the others 1 saying why, and
            /proc/mounts has exactly one mount there. Before the mend both mounted, the second
            stacked over the first (two lines in /proc/mounts; the first daemon unseen).

Seeded (SHARDFS_TEST_SEED). Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import os  # noqa: E402
import subprocess  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402
from shardfs_test.planread import plan_fnv, plans  # noqa: E402


def group_plan_abs(env, ck):
    rng = env.rng
    src = env.path('src')
    os.makedirs(src)
    members = {}  # mount-relative path: bytes
    for s in range(4):
        shard = []
        for k in range(rng.randint(12, 18)):
            data = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 3000)))
            shard.append(('k%02d.bin' % k, data))
            members['s%d/k%02d.bin' % (s, k)] = data
        ml.write_file(os.path.join(src, 's%d.tar' % s), ml.tar_bytes(shard))
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        mp = os.path.realpath(m.mnt)
        unread = sorted(members)
        rng.shuffle(unread)
        for rnd in range(4):
            # found: the mount-relative form of each line that names a member; each member is
            # planned once and read once (a read the page cache answers never reaches the mount)
            lines, found = [], []
            for _ in range(rng.randint(10, 20)):
                form = rng.choice(['rel', 'abs', 'abs', 'dslash', 'missing', 'outside', 'mnt']
                                  if unread else ['missing', 'outside', 'mnt'])
                if form in ('rel', 'abs', 'dslash'):
                    rel = unread.pop()
                else:
                    rel = rng.choice(sorted(members))
                if form == 'rel':
                    lines.append(rel.encode())
                    found.append(rel.encode())
                elif form == 'abs':
                    lines.append((mp + '/' + rel).encode())
                    found.append(rel.encode())
                elif form == 'dslash':
                    lines.append((mp + '//' + rel).encode())
                    found.append(('/' + rel).encode())
                elif form == 'missing':
                    lines.append((mp + '/' + rel + '.gone').encode())
                elif form == 'outside':
                    lines.append((src + '/' + rel).encode())
                else:
                    lines.append(mp.encode())
            pf = env.path('plan-%d' % rnd)
            with open(pf, 'wb') as f:
                f.write(b''.join(x + b'\n' for x in lines))
            r = subprocess.run([env.shardfs, 'plan', m.mnt, pf, '--name', 'r%d' % rnd],
                               capture_output=True, timeout=60)
            out = r.stdout.decode(errors='replace') + r.stderr.decode(errors='replace')
            log('round %d: %d lines, %d name a member: %s' % (rnd, len(lines), len(found),
                                                               out.strip()))
            ck.eq('round %d: shardfs plan exit' % rnd, r.returncode, 0)
            got = plans(m.mnt).get('r%d' % rnd)
            ck.ok(got is not None, 'round %d: no plan r%d in .shardfs/plans' % (rnd, rnd))
            if got is None:
                continue
            want_bytes = sum(len(members[x.decode().lstrip('/')]) for x in found)
            ck.eq('round %d: paths, missing, bytes' % rnd,
                  (got['paths'], got['missing'], got['bytes']),
                  (len(found), len(lines) - len(found), want_bytes))
            ck.eq('round %d: fnv of the mount-relative paths' % rnd, got['fnv'], plan_fnv(found))
            for x in found:
                with open(os.path.join(m.mnt, x.decode().lstrip('/')), 'rb') as f:
                    data = f.read()
                if data != members[x.decode().lstrip('/')]:
                    ck.fail('round %d: %s: wrong bytes' % (rnd, x))
            got = plans(m.mnt)['r%d' % rnd]
            ck.eq('round %d: read, position after reading them in order' % rnd,
                  (got['read'], got['position']), (len(found), len(found)))
            subprocess.run([env.shardfs, 'plan', m.mnt, '--clear', '--name', 'r%d' % rnd],
                           capture_output=True, timeout=60)


def hostile_member(rng, k):
    """A seeded member a mount leaves out: (TarInfo, its reason's words in the log)."""
    import tarfile
    kind = rng.choice(['dotdot', 'long', 'chr', 'blk', 'fifo'])
    if kind == 'dotdot':
        ti = tarfile.TarInfo(rng.choice(['../up%d.bin' % k, 'a/../../up%d.bin' % k,
                                         'd%d/../..' % k]))
        why = "name with a '..' component"
    elif kind == 'long':
        ti = tarfile.TarInfo('d%d/' % k + 'L' * rng.randint(256, 290) + '.bin')
        why = 'name component longer than 255 bytes'
    else:
        ti = tarfile.TarInfo('dev/n%d' % k)
        ti.type = {'chr': tarfile.CHRTYPE, 'blk': tarfile.BLKTYPE, 'fifo': tarfile.FIFOTYPE}[kind]
        why = 'device or fifo'
    ti.mtime = 1700000000
    return ti, why


def group_left_out(env, ck):
    import io
    import tarfile
    rng = env.rng
    src = env.path('src')
    os.makedirs(src)
    want = {}  # shard: (members left out, the first one's name, its reason)
    for s in range(8):
        bio = io.BytesIO()
        n_out, first = 0, None
        with tarfile.open(fileobj=bio, mode='w', format=tarfile.GNU_FORMAT) as tf:
            for k in range(rng.randint(2, 12)):
                if s > 0 and rng.random() < 0.3:
                    ti, why = hostile_member(rng, k)
                    tf.addfile(ti)
                    n_out += 1
                    if first is None:
                        first = (ti.name, why)
                else:
                    ml.add_seeded_member(tf, rng, k)
        ml.write_file(os.path.join(src, 's%d.tar' % s), bio.getvalue())
        want['s%d.tar' % s] = (n_out,) + (first or (None, None))
    logf = env.path('daemon.log')
    with ml.Mount(env, src, cache_dir=env.path('cache'), extra=['--log-file', logf]) as m:
        for s in sorted(want):
            os.listdir(os.path.join(m.mnt, s[:-4]))
        st = m.stats()
        ck.eq('skipped_members', st['skipped_members'], sum(w[0] for w in want.values()))
    with open(logf, errors='replace') as f:
        text = f.read()
    for s, (n_out, name, why) in sorted(want.items()):
        firsts = [ln for ln in text.splitlines()
                  if ('shard %s: the first member left out: ' % s) in ln]
        counts = [ln for ln in text.splitlines() if ('shard %s: ' % s) in ln and
                  (' members left out (' in ln or ' member left out (' in ln)]
        log('%s: %d left out, the first %r (%s); log: %r %r' % (s, n_out, name, why, firsts,
                                                             counts))
        if not n_out:
            ck.eq('%s: lines about members left out' % s, firsts + counts, [])
            continue
        ck.eq('%s: lines naming the first member left out' % s, len(firsts), 1)
        said = name if len(name) <= 200 else name[:200] + '...'
        ck.ok(firsts and ("'%s': " % said) in firsts[0] and why in firsts[0],
              '%s: the line does not name %r (%s): %r' % (s, said, why, firsts))
        ck.ok(len(counts) == 1 and (': %d member%s left out' % (n_out, '' if n_out == 1 else 's'))
              in counts[0],
              '%s: the count of %d is not said once: %r' % (s, n_out, counts))


def group_conflicts(env, ck):
    import gzip
    rng = env.rng
    src = env.path('src')
    os.makedirs(os.path.join(src, 'sub'))
    groups = {}  # (directory's name, N): [(kind, key, what its log words are)]
    for d in ('', 'sub'):
        for i in range(rng.randint(4, 8)):
            n = 'n%d' % i
            rel = (d + '/' if d else '') + n
            ents = []
            base = rng.choice(['dir', 'file', 'none'])
            if base == 'dir':
                os.makedirs(os.path.join(src, rel))
                ml.write_file(os.path.join(src, rel, 'in-dir.txt'), b'dir\n')
                ents.append((1, rel, 'a directory of the source'))
            elif base == 'file':
                ml.write_file(os.path.join(src, rel), b'file\n')
                ents.append((2, rel, 'the file ' + rel))
            sfx = [x for x in ('.tar', '.tar.gz', '.tgz') if rng.random() < 0.6] or ['.tar']
            for x in sfx:
                tar = ml.tar_bytes([('m%s.txt' % x.replace('.', '-'), rel.encode() + x.encode())])
                data = gzip.compress(tar, mtime=0) if x != '.tar' else tar
                ml.write_file(os.path.join(src, rel + x), data)
                ents.append((3, rel + x, 'the members of ' + rel + x))
            groups[(d, n)] = ents
            if '.tar' in sfx and rng.random() < 0.5:
                # N.tar.tar's member directory N.tar meets the raw file N.tar
                ml.write_file(os.path.join(src, rel + '.tar.tar'),
                              ml.tar_bytes([('tt.txt', b'tt')]))
                groups[(d, n + '.tar')] = [(2, rel + '.tar', 'the file ' + rel + '.tar'),
                                           (3, rel + '.tar.tar',
                                            'the members of ' + rel + '.tar.tar')]
    logf = env.path('daemon.log')
    with ml.Mount(env, src, cache_dir=env.path('cache'), extra=['--log-file', logf]) as m:
        hidden = 0
        for (d, n), ents in sorted(groups.items()):
            ents.sort(key=lambda e: (e[0], e[1]))
            hidden += len(ents) - 1
            path = os.path.join(m.mnt, d, n)
            kind, key, _ = ents[0]
            if kind == 1:
                got = sorted(os.listdir(path))
                ck.eq('%s: the source directory' % key, got, ['in-dir.txt'])
            elif kind == 2:
                with open(path, 'rb') as f:
                    ck.eq('%s: the file' % key, f.read(), open(os.path.join(src, key),
                                                               'rb').read())
            else:
                got = sorted(os.listdir(path))
                want = ['tt.txt'] if key.endswith('.tar.tar') else \
                    ['m%s.txt' % key[len(key.split('.')[0]):].replace('.', '-')]
                ck.eq('%s: its members' % key, got, want)
        ck.eq('hidden_names', m.stats()['hidden_names'], hidden)
    with open(logf, errors='replace') as f:
        lines = [ln for ln in f.read().splitlines() if 'name conflict: ' in ln]
    ck.eq('name conflict lines', len(lines), hidden)
    for (d, n), ents in sorted(groups.items()):
        for kind, key, what in ents[1:]:
            want = ("name conflict: '%s' in %s is hidden: %s, behind %s"
                    % (n, "directory '%s'" % d if d else "the mount's root", what, ents[0][2]))
            ck.ok(any(ln.endswith(want) for ln in lines), 'no line %r in %r' % (want, lines))


def group_source_kind(env, ck):
    rng = env.rng
    d = env.path('d')
    os.makedirs(d)
    shard = os.path.join(d, 'one.tar')
    ml.write_file(shard, ml.tar_bytes([('a.txt', b'a')]))
    ml.write_file(os.path.join(d, 'one.tar.gz'), b'\x1f\x8b' + b'\0' * 30)
    ml.write_file(os.path.join(d, 'notes.txt'), b'notes\n')
    os.symlink(shard, os.path.join(d, 'link.tar'))
    os.mkfifo(os.path.join(d, 'fifo'))
    sources = [shard, os.path.join(d, 'one.tar.gz'), os.path.join(d, 'notes.txt'),
               os.path.join(d, 'link.tar'), os.path.join(d, 'fifo'), '/dev/null',
               'file://' + shard]
    rng.shuffle(sources)
    mnt = env.path('mnt')
    os.makedirs(mnt)
    for src in sources:
        for cmd in (['mount', '--cache-dir', env.path('cache'), src, mnt],
                    ['index', '--cache-dir', env.path('cache'), src]):
            r = env.run([env.shardfs] + cmd, timeout=30)
            err = r.stderr.decode(errors='replace')
            log('%s %s: rc=%r %s' % (cmd[0], src, r.returncode, err.strip()))
            ck.eq('%s %s: exit' % (cmd[0], src), r.returncode, 1)
            ck.ok(src in err and 'a local source is the directory that holds the shards' in err,
                  '%s %s: the message does not say what a local source is: %r'
                  % (cmd[0], src, err))
        ck.ok(not ml.is_mounted(mnt), '%s: %s is mounted' % (src, mnt))


def mounts_at(mnt):
    """How many lines of /proc/mounts are mounts at mnt."""
    with open('/proc/mounts') as f:
        return sum(1 for ln in f if ln.split()[1] == mnt)


def group_mount_race(env, ck):
    import fcntl
    rng = env.rng
    src = env.path('src')
    os.makedirs(src)
    ml.write_file(os.path.join(src, 's.tar'), ml.tar_bytes([('a.txt', b'a')]))
    mnt = os.path.realpath(env.path('mnt'))
    os.makedirs(mnt)
    cmd = [env.shardfs, 'mount', '--cache-dir', env.path('cache'), src, mnt]
    # another mount under way: it holds the mount point's lock until it is mounted
    fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        r = env.run(cmd, timeout=60, files=True)
        err = r.stderr.decode(errors='replace')
        log('held: rc=%r %s' % (r.returncode, err.strip()))
        ck.eq('a mount under way: exit', r.returncode, 1)
        ck.ok('under way' in err and mnt in err, 'a mount under way: not said: %r' % err)
        ck.eq('a mount under way: mounts at the mount point', mounts_at(mnt), 0)
    finally:
        os.close(fd)
    for rnd in range(3):
        k = rng.randint(2, 4)
        procs = [subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE) for _ in range(k)]
        res = []
        for p in procs:
            try:
                _, e = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                _, e = p.communicate()
            res.append((p.returncode, e.decode(errors='replace').strip()))
        log('round %d: %d at once: %r' % (rnd, k, res))
        ck.eq('round %d: exits of %d mounts at once' % (rnd, k), sorted(r[0] for r in res),
              [0] + [1] * (k - 1))
        ck.ok(all('under way' in e or 'already a shardfs mount' in e for rc, e in res if rc),
              'round %d: a refused mount does not say why: %r' % (rnd, res))
        ck.eq('round %d: mounts at the mount point' % rnd, mounts_at(mnt), 1)
        for _ in range(k):
            if not mounts_at(mnt):
                break
            env.run([env.shardfs, 'umount', mnt], timeout=60)
        ck.eq('round %d: mounts after one umount' % rnd, mounts_at(mnt), 0)


GROUPS = {'plan-abs': (group_plan_abs, 120), 'left-out': (group_left_out, 120),
          'conflicts': (group_conflicts, 120), 'source-kind': (group_source_kind, 120),
          'mount-race': (group_mount_race, 180)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
