#!/usr/bin/python3
"""shardfs mount tests: symbolic link members whose target is too long for the kernel.

usage: test_longlink.py SHARDFS GROUP
GROUP:
  readlink  a shard (PAX tar) of a file and symbolic links whose targets are 100, 4,094 and
          4,095 bytes (each ending in '/a.txt', so a target resolves nowhere outside) and
          4,096, 4,097, 5,000 and 65,536 bytes (a PAX linkpath can be any length; no
          symlink(2) makes one): the listing names each once, a link by type (d_type);
          lstat gives each its true size; readlink gives the short ones' targets byte for
          byte and ENAMETOOLONG for 4,096 bytes and more (fs/core/fs_view_shard.c: the kernel
          refuses a reply longer than a page less its NUL, so the daemon's answer before was
          EIO, the daemon's reply refused), and so does a path through such a link; none of
          it counts as a failed request (op_errors, read_errors 0), twice (the kernel's
          caches or not), the file's bytes exact.
"""
import errno
import io
import os
import stat
import sys
import tarfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402

SHORT = (100, 4094, 4095)
LONG = (4096, 4097, 5000, 65536)


def target(n):
    return 'x' * (n - len('/a.txt')) + '/a.txt'


def group_readlink(env, ck):
    src = env.path('src')
    os.makedirs(src)
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode='w', format=tarfile.PAX_FORMAT) as t:
        ti = tarfile.TarInfo('a.txt')
        ti.size = 6
        ti.mtime = 1700000000
        t.addfile(ti, io.BytesIO(b'hello\n'))
        for n in SHORT + LONG:
            ti = tarfile.TarInfo('l%05d' % n)
            ti.type = tarfile.SYMTYPE
            ti.linkname = target(n)
            ti.mtime = 1700000000
            t.addfile(ti)
    ml.write_file(os.path.join(src, 'l.tar'), bio.getvalue())
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        d = os.path.join(m.mnt, 'l')
        s0 = m.stats()
        for rnd in (1, 2):
            kinds = {e.name: 'link' if e.is_symlink() else 'file' for e in os.scandir(d)}
            ck.eq('round %d: the listing' % rnd, kinds,
                  dict([('a.txt', 'file')] + [('l%05d' % n, 'link') for n in SHORT + LONG]))
            for n in SHORT + LONG:
                p = os.path.join(d, 'l%05d' % n)
                st = os.lstat(p)
                ck.eq('round %d: l%05d: lstat (a link, its size)' % (rnd, n),
                      (stat.S_ISLNK(st.st_mode), st.st_size), (True, n))
                try:
                    got = os.readlink(p)
                except OSError as e:
                    got = errno.errorcode.get(e.errno, e.errno)
                ck.eq('round %d: l%05d: readlink' % (rnd, n), got,
                      target(n) if n in SHORT else 'ENAMETOOLONG')
                if n in LONG:
                    try:
                        os.stat(p)
                        got = 'resolved'
                    except OSError as e:
                        got = errno.errorcode.get(e.errno, e.errno)
                    ck.eq('round %d: l%05d: a path through it' % (rnd, n), got, 'ENAMETOOLONG')
            ck.eq('round %d: a.txt' % rnd, ml.read_all(os.path.join(d, 'a.txt')), b'hello\n')
        s1 = m.stats()
        ck.eq('failed requests counted (op_errors, read_errors)',
              (s1['op_errors'] - s0['op_errors'], s1['read_errors'] - s0['read_errors']), (0, 0))


GROUPS = {'readlink': (group_readlink, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
