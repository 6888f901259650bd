#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass (round 7), each finding replayed as a seeded
test.

usage: test_hostile7.py SHARDFS GROUP
GROUP:
  unreadable  a seeded local source: a tree of directories, each holding a shard, some of
              them unreadable (mode 000: cannot be opened) and some listable only (mode 0444:
              their entries cannot be looked at), and a plain file of mode 000. The daemon
              runs as root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (setpriv drops
              them from its bounding set), so the modes hold for it as for any user. The
              mount's tree is exactly what lies below readable directories only; the log
              warns once for each unreadable directory it met (the topmost of a chain),
              naming it, at the mount, and not again at two 'shardfs refresh' (new looks at
              the source) while it stays so; a symlink to itself (ELOOP) is no object and no
              warning, as a dangling one; the mode-000 file shows and its read fails EACCES,
              and a member's bytes come exact. Then a readable directory, 'later', made
              unreadable: the next refresh leaves it out with one new line naming it; made
              readable again: the next refresh lists it with one line saying so. Before the
              first mend such directories were skipped silently: a user saw part of the data
              set and no word why; before the second each refresh said every line again
              (each counted 3 where 1 is wanted).

Seeded (SHARDFS_TEST_SEED). Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

# the daemon without the capabilities that let root read past a directory's mode
NO_DAC = ['setpriv', '--bounding-set', '-dac_override,-dac_read_search', '--']


def group_unreadable(env, ck):
    rng = env.rng
    if not shutil.which('setpriv'):
        raise ml.Skip('no setpriv (util-linux) to drop the daemon\'s DAC capabilities', 'tool')
    src = env.path('src')
    os.makedirs(src)
    # a tree: each directory holds a shard s.tar of one member naming its directory
    dirs = ['']
    modes = {}
    for i in range(rng.randint(6, 12)):
        parent = rng.choice(dirs)
        d = os.path.join(parent, 'd%d' % i)
        os.makedirs(os.path.join(src, d))
        dirs.append(d)
        modes[d] = rng.choice([0o755, 0o755, 0o000, 0o444])
    # one of each kind at least; 'later' made unreadable after the mount
    for d, mode in (('none', 0o000), ('list', 0o444), ('later', 0o755)):
        os.makedirs(os.path.join(src, d))
        dirs.append(d)
        modes[d] = mode
    for d in dirs:
        ml.write_file(os.path.join(src, d, 's.tar'),
                      ml.tar_bytes([('m.txt', ('in %s\n' % (d or '.')).encode())]))
    ml.write_file(os.path.join(src, 'secret.txt'), b'not for anyone\n')
    os.chmod(os.path.join(src, 'secret.txt'), 0)
    os.symlink('self', os.path.join(src, 'self'))  # ELOOP: not an object, and no warning
    for d in sorted(modes, key=len, reverse=True):  # the deepest first: parents stay open
        os.chmod(os.path.join(src, d), modes[d])
    log('modes: %s' % ', '.join('%s %03o' % (d, m) for d, m in sorted(modes.items())))

    def readable(d):
        parts = d.split('/') if d else []
        return all(modes['/'.join(parts[:k + 1])] == 0o755 for k in range(len(parts)))

    # the unreadable directories the walk meets: below readable ones only
    met = [d for d in dirs[1:] if modes[d] != 0o755 and readable(os.path.dirname(d))]
    want = {'secret.txt'}
    for d in dirs:
        if readable(d):
            for x in (d, os.path.join(d, 's.tar'), os.path.join(d, 's'),
                      os.path.join(d, 's', 'm.txt')):
                if x:
                    want.add(os.path.normpath(x))
    try:
        with ml.Mount(env, src, cache_dir=env.path('cache'), prefix=NO_DAC) as m:
            def tree():
                got = set()
                for dp, dns, fns in os.walk(m.mnt):
                    rel = os.path.relpath(dp, m.mnt)
                    dns[:] = [x for x in dns if x != '.shardfs']
                    got |= {os.path.normpath(os.path.join(rel, x)) for x in dns + fns}
                return sorted(got)

            ck.eq('the mount\'s tree: what lies below readable directories', tree(), sorted(want))
            for d in [x for x in dirs if readable(x)]:
                p = os.path.join(m.mnt, d, 's', 'm.txt')
                ck.eq('%s: bytes' % p, ml.read_result(p),
                      ('ok', ('in %s\n' % (d or '.')).encode()))
            ck.eq('secret.txt (mode 000): its read', ml.read_result(
                os.path.join(m.mnt, 'secret.txt')), ('err', errno.EACCES))
            for i in (1, 2):
                r = env.run([env.shardfs, 'refresh', m.mnt])
                ck.eq('refresh %d: exit' % i, r.returncode, 0)
                ck.eq('after refresh %d: the mount\'s tree' % i, tree(), sorted(want))
            text = ml.logs_under(env.path('cache'))
            for d in met:
                what = ('source: cannot read directory %s (Permission denied): skipped' % d
                        if modes[d] == 0 else
                        'source: cannot read the entries of directory %s (Permission denied; '
                        'the first: ' % d)
                ck.eq('log: the warning naming %s (once: the mount; not at 2 refreshes)' % d,
                      text.count(what), 1)
            ck.eq('log: warnings about reading the source (mount, 2 refreshes)',
                  text.count('source: cannot read'), len(met))

            # 'later' made unreadable: one new line at the next refresh, then readable again
            os.chmod(os.path.join(src, 'later'), 0)
            r = env.run([env.shardfs, 'refresh', m.mnt])
            ck.eq('refresh, later unreadable: exit', r.returncode, 0)
            gone = {x for x in want if x == 'later' or x.startswith('later/')}
            ck.eq('later unreadable: the mount\'s tree', tree(), sorted(want - gone))
            text = ml.logs_under(env.path('cache'))
            ck.eq('log: the warning naming later (one new line)', text.count(
                'source: cannot read directory later (Permission denied): skipped'), 1)
            ck.eq('log: warnings about reading the source (later\'s one more)',
                  text.count('source: cannot read'), len(met) + 1)
            os.chmod(os.path.join(src, 'later'), 0o755)
            r = env.run([env.shardfs, 'refresh', m.mnt])
            ck.eq('refresh, later readable: exit', r.returncode, 0)
            ck.eq('later readable again: the mount\'s tree', tree(), sorted(want))
            text = ml.logs_under(env.path('cache'))
            ck.eq('log: later can be read again (one line)', text.count(
                'source: directory later can be read again: listed'), 1)
            ck.eq('log: lines saying a directory can be read again (later\'s alone)',
                  text.count('can be read again'), 1)
            ck.eq('log: warnings about reading the source (no more)',
                  text.count('source: cannot read'), len(met) + 1)
    finally:
        for d in modes:
            os.chmod(os.path.join(src, d), 0o755)


GROUPS = {'unreadable': (group_unreadable, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
