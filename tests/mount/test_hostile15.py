#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass (round 15), each finding replayed as a test.

usage: test_hostile15.py SHARDFS GROUP
GROUP:
  source-gone  a local source of seeded shards (SHARDFS_TEST_SEED), mounted and read, then its
             directory removed (rm -rf), moved away (mv), replaced by a file: 'shardfs refresh'
             exits 1 and says, exactly, which path is gone (the source's path as given), why,
             and what the mount now shows (the last listing: its counts; reads from the
             directory that listing found: moved away, every byte still read exact; removed,
             a read fails or gives the bytes the kernel still holds), the log says it once; the tree stays as it was; with the
             directory back a refresh exits 0. Before (fs/tools/fs_client.c at 557315b): "refresh
             of M failed: No such file or directory (see the mount's log)", nothing more.
  links-refused  seeded symbolic links out of a local source (absolute targets, '..' past its
             top, to a file and to a directory outside) beside shards and a link inside:
             `source_links_refused` in the stats is exactly how many the last listing refused,
             and 'shardfs refresh' ends its summary, exactly, with how many and why (none said
             when none), as links are added and removed between refreshes. Before
             (fs/core at 557315b): no counter, the summary silent about them.
  sidecar-links  'shardfs index --sidecar' over a seeded tree where a sidecar's name holds a
             symbolic link to a victim file outside the tree, a dangling link, a directory, or
             an old sidecar: each link and directory is left as it was (readlink, the victim's
             bytes), said on stderr in one exact line, counted in the summary (exit 1); the
             others are written as regular files, no temp file left. Before
             (fs/core/fs_core_index.c at 557315b): the links replaced by the sidecar, exit 0.
  python     python/shardfs used wrongly as a PyTorch user would: a directory that is no mount
             given to control(), plan(), clear_plan() (FileNotFoundError saying so); a sampler
             that yields an index paths has none for, past the end or negative (a warning
             naming it, the epoch's order all the same, no plan; strict: IndexError); the
             daemon killed -9 mid-epoch: find_mountpoint(), control(), plan() say ENOTCONN
             naming the mount and what cleans it up, the next epoch warns it and goes on.
             Before (python/shardfs at 557315b): "[Errno 2] No such file or directory:
             '.../.shardfs/control'", an IndexError mid-epoch (a negative index planned the
             wrong path), find_mountpoint of a killed mount "not inside a shardfs mount".

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

GONE = ("shardfs: refresh of %s failed: its source directory %s %s (%s); the mount still "
        "shows the listing of its last mount or refresh (%s), read from the directory that "
        "listing found (moved away: still read; removed: only what the cache holds); put the "
        "directory back and run 'shardfs refresh' again, or unmount\n")
GONE_LOG = ("refresh of %s failed: the source directory %s %s (%s); the mount shows what it "
            "showed, read from the directory its last listing found (moved away: still read; "
            "removed: only what the cache holds)")
REFUSED = ("; %d symbolic %s refused: %s out of the source directory (an absolute target, or "
           "one past its top; where openat2 is missing, every link below it): not listed, each "
           "named in the mount's log")


def plural(n, one, many):
    return one if n == 1 else many


def counts(n_obj, n_shards):
    return '%d %s, %d %s' % (n_obj, plural(n_obj, 'object', 'objects'), n_shards,
                             plural(n_shards, 'shard', 'shards'))


def fill(env, src, n):
    """n seeded shards in src (some in a subdirectory): {key: [(member, bytes)]}."""
    rng = env.rng
    shards = {}
    os.makedirs(os.path.join(src, 'sub'))
    for i in range(n):
        key = ('sub/' if rng.random() < 0.4 else '') + 's%d.tar' % i
        mem = [('m%d.txt' % j, rng.randbytes(rng.randint(0, 5000))) for j in
               range(rng.randint(1, 3))]
        ml.write_file(os.path.join(src, key), ml.tar_bytes(mem))
        shards[key] = mem
    return shards


def group_source_gone(env, ck):
    n = env.rng.randint(2, 6)
    src = env.path('src')
    shards = fill(env, src, n)
    src_real = os.path.realpath(src)
    for how in ('rm', 'mv', 'file'):
        cache = env.path('cache-' + how)
        with ml.Mount(env, src, cache_dir=cache) as m:
            for k, mem in sorted(shards.items()):
                for name, data in mem:
                    ck.eq('%s: before: %s/%s' % (how, k, name),
                          ml.read_result(os.path.join(m.mnt, k[:-4], name)), ('ok', data))
            tree = ml.tree_of(m.mnt)
            moved = env.path('src.' + how)
            shutil.copytree(src, moved, symlinks=True)
            if how == 'rm':
                shutil.rmtree(src)
                what, err = 'is gone', errno.ENOENT
            elif how == 'mv':
                shutil.rmtree(moved)
                os.rename(src, moved)
                what, err = 'is gone', errno.ENOENT
            else:
                shutil.rmtree(src)
                ml.write_file(src, b'not a directory\n')
                what, err = 'is no longer a directory', errno.ENOTDIR
            r = env.run([env.shardfs, 'refresh', m.mnt])
            log('%s: refresh -> rc=%r %r %r' % (how, r.returncode, r.stdout, r.stderr))
            ck.eq('%s: refresh: exit' % how, r.returncode, 1)
            ck.eq('%s: refresh: stderr' % how, r.stderr.decode(),
                  GONE % (m.mnt, src, what, os.strerror(err), counts(n, n)))
            ck.eq('%s: refresh: stdout' % how, r.stdout, b'')
            text = ml.logs_under(cache)
            ck.eq('%s: the log says it once' % how,
                  text.count(GONE_LOG % (src_real, src, what, os.strerror(err)) + '\n'), 1)
            ck.eq('%s: the tree as it was' % how, ml.tree_of(m.mnt), tree)
            for k, mem in sorted(shards.items()):
                for name, data in mem:
                    got = ml.read_result(os.path.join(m.mnt, k[:-4], name))
                    if how == 'mv':
                        ck.eq('%s: still read: %s/%s' % (how, k, name), got, ('ok', data))
                    else:  # fails, unless the kernel's page cache holds it still
                        ck.ok(got[0] == 'err' or got == ('ok', data),
                              '%s: %s/%s: a read fails or gives the bytes (%r)' % (
                                  how, k, name, got if got[0] == 'err' else got[1][:20]))
            # back (the copy: the same bytes): a refresh sees it again
            if how == 'file':
                os.unlink(src)
            os.rename(moved, src)
            r = env.run([env.shardfs, 'refresh', m.mnt])
            ck.eq('%s: refresh with the directory back: exit (%r)' % (how, r.stderr),
                  r.returncode, 0)
            for k, mem in sorted(shards.items()):
                for name, data in mem:
                    ck.eq('%s: back: %s/%s' % (how, k, name),
                          ml.read_result(os.path.join(m.mnt, k[:-4], name)), ('ok', data))


def group_links_refused(env, ck):
    rng = env.rng
    src, out = env.path('src'), env.path('out')
    n = rng.randint(2, 5)
    fill(env, src, n)
    os.makedirs(os.path.join(out, 'od'))
    ml.write_file(os.path.join(out, 'o.tar'), ml.tar_bytes([('x.txt', b'OUTSIDE')]))
    ml.write_file(os.path.join(out, 'od', 'o2.tar'), ml.tar_bytes([('x.txt', b'OUTSIDE')]))
    os.symlink('s0.tar' if os.path.exists(os.path.join(src, 's0.tar')) else 'sub/s0.tar',
               os.path.join(src, 'inside.tar'))  # followed: an object and a shard
    links = []

    def add_out(i):
        d = rng.choice(['', 'sub'])
        kind = rng.choice(['abs', 'rel', 'dir'])
        name = os.path.join(d, 'out%d' % i + ('' if kind == 'dir' else '.tar'))
        t = (os.path.join(out, 'o.tar') if kind == 'abs' else
             '../' * (1 + (1 if d else 0)) + 'out/o.tar' if kind == 'rel' else
             os.path.join(out, 'od'))
        os.symlink(t, os.path.join(src, name))
        links.append(name)

    for i in range(rng.randint(2, 6)):
        add_out(i)
    cache = env.path('cache')
    with ml.Mount(env, src, cache_dir=cache) as m:
        ck.eq('mount: source_links_refused', m.stats()['source_links_refused'], len(links))
        steps = [('as mounted', 0, 0), ('two added', 2, 0), ('all but one removed', 0, -1),
                 ('the last removed', 0, 0)]
        for label, add, keep in steps:
            for i in range(add):
                add_out(100 + len(links) + i)
            if keep == -1:
                for x in links[1:]:
                    os.unlink(os.path.join(src, x))
                links[1:] = []
            if label == 'the last removed':
                os.unlink(os.path.join(src, links.pop()))
            r = env.run([env.shardfs, 'refresh', m.mnt])
            k = len(links)
            tail = REFUSED % (k, plural(k, 'link', 'links'), plural(k, 'it leads', 'they lead')) \
                if k else ''
            ck.eq('%s: refresh: exit (%r)' % (label, r.stderr), r.returncode, 0)
            out_line = r.stdout.decode()
            ck.eq('%s: refresh: the summary\'s end' % label,
                  out_line[out_line.index(';', out_line.index('changed')):] if ';' in out_line
                  else out_line, '; %s%s\n' % (counts(n + 1, n + 1), tail))
            ck.eq('%s: source_links_refused' % label, m.stats()['source_links_refused'], k)


SIDECAR_MSG = {
    'link': "shardfs: index: sidecar %s: a symbolic link is at its name: left as it is, not "
            "followed, not replaced (remove it to write the sidecar)\n",
    'dangling': "shardfs: index: sidecar %s: a symbolic link is at its name: left as it is, "
                "not followed, not replaced (remove it to write the sidecar)\n",
    'dir': "shardfs: index: sidecar %s: a directory is at its name: left as it is, not "
           "written\n",
}


def group_sidecar_links(env, ck):
    rng = env.rng
    src, out = env.path('src'), env.path('out')
    os.makedirs(out)
    victim = os.path.join(out, 'victim')
    ml.write_file(victim, b'victim bytes\n')
    n = rng.randint(6, 12)
    shards = fill(env, src, n)
    keys = sorted(shards)
    hows = {}
    for k in keys:
        how = rng.choice(['plain', 'plain', 'link', 'dangling', 'dir', 'old'])
        hows[k] = how
        p = os.path.join(src, k + '.idx')
        if how == 'link':
            os.symlink(victim, p)
        elif how == 'dangling':
            os.symlink(os.path.join(out, 'nothing-%s' % os.path.basename(k)), p)
        elif how == 'dir':
            os.makedirs(p)
        elif how == 'old':
            ml.write_file(p, b'an old sidecar')
    for must in ('link', 'dir'):  # one of each at least
        if must not in hows.values():
            k = next(x for x in keys if hows[x] in ('plain', 'old'))
            p = os.path.join(src, k + '.idx')
            if hows[k] == 'old':
                os.unlink(p)
            if must == 'link':
                os.symlink(victim, p)
            else:
                os.makedirs(p)
            hows[k] = must
    r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('cache'), src])
    err = r.stderr.decode()
    log('index --sidecar: rc=%r\n%s%s' % (r.returncode, r.stdout.decode(), err))
    bad = sum(1 for h in hows.values() if h in SIDECAR_MSG)
    ck.eq('index: exit', r.returncode, 1 if bad else 0)
    ck.ok(r.stdout.decode().endswith('; wrote %d sidecar %s; %d of %d failed (said on stderr)\n'
                                     % (n - bad, plural(n - bad, 'index', 'indexes'), bad, n)),
          'index: the summary %r' % r.stdout)
    for k in keys:
        p = os.path.join(src, k + '.idx')
        how = hows[k]
        if how in SIDECAR_MSG:
            ck.eq('%s (%s): said once' % (k, how), err.count(SIDECAR_MSG[how] % p), 1)
        if how == 'link':
            ck.eq('%s: the link left as it was' % k, os.readlink(p), victim)
        elif how == 'dangling':
            ck.ok(os.path.islink(p) and not os.path.exists(os.readlink(p)),
                  '%s: the dangling link left as it was' % k)
        elif how == 'dir':
            ck.ok(os.path.isdir(p) and not os.listdir(p), '%s: the directory left empty' % k)
        else:
            ck.ok(not os.path.islink(p) and os.path.isfile(p) and
                  open(p, 'rb').read(14) != b'an old sidecar',
                  '%s (%s): a sidecar written' % (k, how))
    ck.eq('the victim keeps its bytes', open(victim, 'rb').read(), b'victim bytes\n')
    ck.eq('nothing new outside', sorted(os.listdir(out)), ['victim'])
    temps = [os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs if '.tmp.' in f]
    ck.eq('no temp file left', temps, [])


def group_python(env, ck):
    """python/shardfs used as a PyTorch user would, wrongly (no torch needed)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..',
                                    'python'))
    import warnings
    import shardfs
    from shardfs_test.checks import caught

    rng = env.rng
    src = env.path('src')
    shards = fill(env, src, rng.randint(2, 4))
    paths = sorted('%s/%s' % (k[:-4], name) for k, mem in shards.items() for name, _ in mem)
    notmnt = env.path('plain')
    os.makedirs(notmnt)
    with ml.Mount(env, src, cache_dir=env.path('cache'), extra=['--warm', 'off']) as m:
        member = os.path.join(m.mnt, paths[0])
        ck.eq('find_mountpoint(a member)', shardfs.find_mountpoint(member), m.mnt)
        _, exc, _ = caught(lambda: shardfs.find_mountpoint(notmnt))
        ck.eq('find_mountpoint(not a mount)', (type(exc), str(exc)),
              (ValueError, '%s is not inside a shardfs mount' % notmnt))
        notmnt_msg = ('[Errno 2] shardfs: %s is not a shardfs mount (no .shardfs/control); '
                      'give the mount point: %r' % (notmnt, os.path.join(notmnt, '.shardfs',
                                                                        'control')))
        for label, fn in (('control', lambda: shardfs.control(notmnt, 'refresh')),
                          ('plan', lambda: shardfs.plan(notmnt, paths[:1])),
                          ('clear_plan', lambda: shardfs.clear_plan(notmnt, 'x'))):
            _, exc, _ = caught(fn)
            ck.eq('%s(not a mount)' % label, (type(exc), str(exc)),
                  (FileNotFoundError, notmnt_msg))
        # a sampler over more items than paths: no IndexError mid-epoch, no wrong path
        n = len(paths)
        for label, order in (('past the end', list(range(n)) + [n + rng.randint(0, 5)]),
                             ('negative', [0, -1 - rng.randint(0, n - 1)] + list(range(1, n)))):
            bad = order[-1] if label == 'past the end' else order[1]
            ps = shardfs.PlanSampler(order, paths, mountpoint=m.mnt, name='pyx')
            got, exc, said = caught(lambda: list(ps))
            want = ('shardfs: the sampler yields index %d, but paths has %d %s (0 to %d): no '
                    'plan published; give PlanSampler the dataset the sampler draws from' % (
                        bad, n, plural(n, 'path', 'paths'), n - 1))
            ck.eq('%s: the epoch, its warning' % label, (got, exc, said), (order, None, [want]))
            ck.eq('%s: no plan' % label, 'pyx' in shardfs.plans(m.mnt), False)
            ps = shardfs.PlanSampler(order, paths, mountpoint=m.mnt, name='pyx', strict=True)
            _, exc, _ = caught(lambda: list(ps))
            ck.eq('%s: strict' % label, (type(exc), str(exc)), (IndexError, want))
        ps = shardfs.PlanSampler(list(range(n)), paths, mountpoint=m.mnt, name='pyok')
        got, exc, said = caught(lambda: list(ps))
        ck.eq('a good epoch', (got, exc, said), (list(range(n)), None, []))
        ck.eq('a good epoch: planned', shardfs.plans(m.mnt)['pyok'].paths, n)
        # the mount's daemon killed mid-epoch
        pid = ml.daemons_for(env.shardfs, m.mnt)
        ck.eq('one daemon', len(pid), 1)
        ml.kill_daemon(env, pid[0], 9)
        gone = ('[Errno 107] shardfs: the mount at %s does not answer: its daemon is gone '
                '(killed or crashed); \'shardfs umount %s\' cleans it up, then mount it again'
                % (m.mnt, m.mnt))
        for label, fn in (('find_mountpoint', lambda: shardfs.find_mountpoint(member)),
                          ('control', lambda: shardfs.control(m.mnt, 'refresh')),
                          ('plan', lambda: shardfs.plan(m.mnt, paths[:1]))):
            _, exc, _ = caught(fn)
            ck.eq('killed: %s' % label, (type(exc), getattr(exc, 'errno', None), str(exc)),
                  (OSError, errno.ENOTCONN, gone))
        got, exc, said = caught(lambda: list(ps))
        ck.eq('killed: the next epoch, its warning', (got, exc, said), (
            list(range(n)), None, ['shardfs: could not publish the plan to %s: %s' % (
                m.mnt, gone)]))
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            _, exc, _ = caught(lambda: shardfs.read_bytes(member))
        ck.eq('killed: read_bytes', getattr(exc, 'errno', None), errno.ENOTCONN)
        r = env.run([env.shardfs, 'umount', m.mnt], timeout=ml.UMOUNT_TIMEOUT, files=True)
        ck.eq('shardfs umount: exit', r.returncode, 0)
        m.umount(quiet=True)


GROUPS = {'python': (group_python, 120), 'source-gone': (group_source_gone, 180), 'links-refused': (group_links_refused, 120),
          'sidecar-links': (group_sidecar_links, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
