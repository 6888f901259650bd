#!/usr/bin/python3
"""shardfs mount tests: the data loaders' index files under .shardfs (docs/mount.md "What the mount
shows") and extended attributes, opt-in with --xattr.

usage: test_loaderidx.py SHARDFS GROUP
GROUP:
  local     the formats test dataset (every tar flavour, sparse, hardlinks, compressed shards):
            .shardfs/samples.tsv, every .shardfs/dali/*.idx and .shardfs/wids.json compared
            with what Python's tarfile says of every member (offset_data, size), the DALI files
            byte for byte as wds2idx v1.2 groups samples; none of them listed; the same bytes
            after a remount with the same and with a new cache directory
  http      the same dataset through nginx: the same bytes as the local mount
  hostile   names with tab, newline, carriage return, backslash and other control bytes:
            every samples.tsv line has five fields that unescape to the member's name; names
            with white space are left out of the DALI file and counted; the hostile dataset
  refresh   a shard rewritten and one added, then 'shardfs refresh': samples.tsv, wids.json
            and the shard's DALI file show the new content
  xattr     default: getxattr/listxattr fail with EOPNOTSUPP (the daemon answers ENOSYS) and
            `ls -l` of a shard's members sends no getxattr to the daemon (xattr_requests);
            --xattr: the user.shardfs.* attributes, equal to samples.tsv's columns; --no-xattr
            still accepted

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import tarfile  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import shardgen  # noqa: E402
from shardfs_test.tarref import expected_tsv_rows, key_of, reference  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log, write_file  # noqa: E402

HEADER = b'path\tshard\toffset\tsize\tkey\n'


def read(path):
    with open(path, 'rb') as f:
        return f.read()


def tsv_unescape(field):
    out, i = bytearray(), 0
    while i < len(field):
        c = field[i]
        if c == 0x5c:
            n = field[i + 1:i + 2]
            if n == b'x':
                out.append(int(field[i + 2:i + 4], 16))
                i += 4
                continue
            out += {b'\\': b'\\', b't': b'\t', b'n': b'\n', b'r': b'\r'}[n]
            i += 2
            continue
        out.append(c)
        i += 1
    return bytes(out).decode('utf-8', 'surrogateescape')


def parse_tsv(ck, data):
    """samples.tsv as rows of five unescaped fields; checks the header and the field count."""
    ck.ok(data.startswith(HEADER), 'samples.tsv header: %r' % data[:60])
    ck.ok(data.endswith(b'\n'), 'samples.tsv ends with a newline')
    rows = []
    for line in data[len(HEADER):].split(b'\n')[:-1]:
        f = line.split(b'\t')
        if not ck.ok(len(f) == 5, 'samples.tsv line of %d fields: %r' % (len(f), line)):
            continue
        rows.append(tuple(tsv_unescape(x) for x in f))
    return rows


def dali_groups(members, dali):
    """wds2idx's samples of a plain shard: regular members (no hardlinks, no sparse ones) whose
    base name has an extension, consecutive members of a key making one sample; dali: also
    without names with white space. Returns ([[member]], skipped)."""
    samples, skipped, last = [], 0, None
    for m in members:
        n = m['name']
        base = n.rfind('/') + 1
        dot = n.find('.', base)
        if (m['hard'] or m['sparse'] or dot <= base or dot == len(n) - 1 or
                (dali and any(c in n for c in ' \t\n\v\f\r'))):
            skipped += 1
            continue
        if n[:dot] != last:
            samples.append([])
            last = n[:dot]
        samples[-1].append(m)
    return samples, skipped


def expected_dali(members):
    samples, _ = dali_groups(members, True)
    lines = ['v1.2 %d' % len(samples)]
    for s in samples:
        parts = []
        for m in s:
            n = m['name']
            ext = n[n.find('.', n.rfind('/') + 1) + 1:]
            parts.append('%s %d %d %s' % (ext, m['offset'], m['size'], n))
        lines.append(' '.join(parts))
    return ('\n'.join(lines) + '\n').encode('utf-8', 'surrogateescape')


def parse_dali(ck, label, data):
    """A DALI v1.2 index as DALI reads it (fields split at white space): [[(ext, off, size,
    name)]]."""
    # bytes.split() splits at the bytes C's isspace() names, as DALI's reader (str.split()
    # would also split at \x1c-\x1f)
    lines = data.split(b'\n')
    head = [x.decode() for x in lines[0].split()]
    ck.ok(len(head) == 2 and head[0] == 'v1.2', '%s: first line %r' % (label, lines[0]))
    samples = []
    for line in lines[1:]:
        if not line:
            continue
        f = [x.decode('utf-8', 'surrogateescape') for x in line.split()]
        ck.ok(len(f) % 4 == 0, '%s: a line of %d fields' % (label, len(f)))
        samples.append([(f[i], int(f[i + 1]), int(f[i + 2]), f[i + 3])
                        for i in range(0, len(f) - 3, 4)])
    ck.eq('%s: N of the first line' % label, int(head[1]) if len(head) == 2 else -1,
          len(samples))
    return samples


def check_views(ck, label, mnt, ref, src):
    """samples.tsv, every DALI file and wids.json of mount mnt against ref (and the shard
    bytes in src); returns their bytes."""
    files = {}
    data = read(os.path.join(mnt, '.shardfs', 'samples.tsv'))
    files['samples.tsv'] = data
    ck.eq('%s: size in stat is the bytes read' % label,
          os.stat(os.path.join(mnt, '.shardfs', 'samples.tsv')).st_size, len(data))
    rows = parse_tsv(ck, data)
    exp = expected_tsv_rows(ref)
    ck.eq('%s: samples.tsv rows (as a set)' % label, sorted(rows), sorted(exp))
    # in archive order: shards sorted by path, offsets ascending within each
    shards = [r[1] for r in rows]
    ck.eq('%s: samples.tsv shards in sorted order' % label, shards, sorted(shards))
    for i in range(1, len(rows)):
        a, b = rows[i - 1], rows[i]
        if a[1] == b[1] and a[2] != '-' and b[2] != '-':
            ck.ok(int(a[2]) <= int(b[2]), '%s: offsets in order: %r then %r' % (label, a, b))
    # each row's bytes: the member read through its mount path = the shard's bytes at the
    # offset (plain shards); every row
    for p, shard, off, size, _ in rows:
        got = read(os.path.join(mnt, p))
        ck.eq('%s: %s: size' % (label, p), len(got), int(size))
        if ref[shard][0] == 'raw' and off != '-':
            with open(os.path.join(src, shard), 'rb') as f:
                f.seek(int(off))
                ck.ok(f.read(int(size)) == got, '%s: %s: shard bytes at the offset' % (label, p))

    wids_exp = {'__kind__': 'wids-shard-index-v1', 'wids_version': 1, 'shardlist': []}
    for shard in sorted(ref):
        codec, members = ref[shard]
        base = os.path.join(mnt, '.shardfs', 'dali',
                            os.path.join(os.path.dirname(shard),
                                         shardgen.shard_dir_name(os.path.basename(shard))) +
                            '.idx')
        if codec != 'raw':
            ck.ok(not os.path.exists(base), '%s: no DALI file for compressed %s' % (label, shard))
            continue
        d = read(base)
        files[shard] = d
        ck.eq('%s: DALI %s bytes' % (label, shard), d, expected_dali(members))
        ck.eq('%s: DALI %s size in stat' % (label, shard), os.stat(base).st_size, len(d))
        # as DALI reads it: every offset and size is tarfile's
        tar_of = {m['name']: m for m in members}
        for s in parse_dali(ck, '%s: DALI %s' % (label, shard), d):
            for ext, off, size, name in s:
                m = tar_of.get(name)
                if ck.ok(m is not None, '%s: DALI %s names %r' % (label, shard, name)):
                    ck.eq('%s: DALI %s %s (offset, size)' % (label, shard, name), (off, size),
                          (m['offset'], m['size']))
                    ck.ok(name.endswith('.' + ext), '%s: %s ext %r' % (label, name, ext))
        wids_exp['shardlist'].append({'url': '../' + shard,
                                      'nsamples': len(dali_groups(members, False)[0])})
    w = read(os.path.join(mnt, '.shardfs', 'wids.json'))
    files['wids.json'] = w
    ck.eq('%s: wids.json' % label, json.loads(w.decode()), wids_exp)
    # the urls resolve against the file's directory, as wids does
    for e in wids_exp['shardlist']:
        p = os.path.normpath(os.path.join(mnt, '.shardfs', e['url']))
        ck.ok(os.path.isfile(p), '%s: wids url %s resolves to a file' % (label, e['url']))
    # never listed
    ck.eq('%s: .shardfs lists its control files only' % label,
          sorted(os.listdir(os.path.join(mnt, '.shardfs'))), ['control', 'metrics', 'stats'])
    ck.eq('%s: .shardfs/dali lists nothing' % label,
          os.listdir(os.path.join(mnt, '.shardfs', 'dali')), [])
    ck.ok('.shardfs' not in os.listdir(mnt), '%s: .shardfs not listed' % label)
    return files


def formats_source(env):
    src, work = env.path('src'), env.path('work')
    os.makedirs(work)
    info = shardgen.build_formats_source(src, work, env.rng)
    return src, info


def group_local(env, ck):
    src, _ = formats_source(env)
    ref = reference(src)
    with ml.Mount(env, src, cache_dir=env.path('c1')) as m:
        first = check_views(ck, 'local', m.mnt, ref, src)
        st = m.stats()
        ck.eq('loader_index_builds', st.get('loader_index_builds'), 1)
        ck.eq('loader_index_shards_skipped (compressed)', st.get('loader_index_shards_skipped'),
              sum(1 for s in ref if ref[s][0] != 'raw'))
        ck.eq('loader_index_members_skipped',
              st.get('loader_index_members_skipped'),
              sum(dali_groups(ref[s][1], True)[1] for s in ref if ref[s][0] == 'raw'))
    for label, cache in (('remount, same cache dir', 'c1'), ('remount, new cache dir', 'c2')):
        with ml.Mount(env, src, cache_dir=env.path(cache)) as m:
            for name, data in sorted(first.items()):
                if name in ('samples.tsv', 'wids.json'):
                    p = os.path.join(m.mnt, '.shardfs', name)
                else:
                    p = os.path.join(m.mnt, '.shardfs', 'dali', os.path.dirname(name),
                                     shardgen.shard_dir_name(os.path.basename(name)) + '.idx')
                ck.ok(read(p) == data, '%s: %s byte for byte' % (label, name))


def group_http(env, ck):
    src, _ = formats_source(env)
    ref = reference(src)
    with ml.Mount(env, src, cache_dir=env.path('cl')) as m:
        local = {n: read(os.path.join(m.mnt, '.shardfs', n)) for n in ('samples.tsv', 'wids.json')}
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('ch')) as m:
            files = check_views(ck, 'http', m.mnt, ref, src)
            for n in ('samples.tsv', 'wids.json'):
                ck.ok(files[n] == local[n], 'http: %s is the local mount\'s' % n)
    finally:
        ng.stop()


HOSTILE = [('tab\there.jpg', b't'), ('new\nline.jpg', b'n'), ('cr\rx.jpg', b'c'),
           ('back\\slash.jpg', b'b'), ('ctl\x01\x1fx.jpg', b'x'), ('del\x7f.jpg', b'd'),
           ('sp ace.jpg', b's'), ('fine.jpg', b'f'), ('fine.cls', b'1'), ('ünï.jpg', b'u')]


def group_hostile(env, ck):
    src = env.path('src')
    shardgen.build_hostile_source(src, env.rng)
    with tarfile.open(os.path.join(src, 'names.tar'), 'w', format=tarfile.PAX_FORMAT) as tf:
        for n, data in HOSTILE:
            ti = tarfile.TarInfo(n)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    ref = reference(src)
    with ml.Mount(env, src, cache_dir=env.path('c')) as m:
        check_views(ck, 'hostile', m.mnt, ref, src)
        rows = parse_tsv(ck, read(os.path.join(m.mnt, '.shardfs', 'samples.tsv')))
        got = {r[0]: r for r in rows if r[1] == 'names.tar'}
        for n, data in HOSTILE:
            r = got.get('names/' + n)
            if ck.ok(r is not None, 'hostile: %r in samples.tsv' % n):
                ck.eq('hostile: %r key' % n, r[4], key_of(n))
                ck.eq('hostile: %r read through its path' % n,
                      read(os.path.join(m.mnt, r[0])), data)
        raw = read(os.path.join(m.mnt, '.shardfs', 'samples.tsv'))
        ck.ok(b'names/tab\\there.jpg\tnames.tar\t' in raw and b'new\\nline' in raw and
              b'cr\\rx' in raw and b'back\\\\slash' in raw and b'ctl\\x01\\x1fx' in raw and
              b'del\\x7f' in raw, 'hostile: escapes as documented')
        d = read(os.path.join(m.mnt, '.shardfs', 'dali', 'names.idx'))
        for bad in ('tab', 'new', 'cr', 'sp ace'):
            ck.ok(bad.encode() not in d, 'hostile: %r left out of the DALI file' % bad)
        ck.ok(m.stats().get('loader_index_members_skipped', 0) >= 4,
              'hostile: names with white space counted')


def group_refresh(env, ck):
    src = env.path('src')
    os.makedirs(os.path.join(src, 'train'))

    def shard(tag, n, size):
        return ml.tar_bytes([('%s_%d.%s' % (tag, i, e), bytes([65 + i]) * (size + i))
                             for i in range(n) for e in ('jpg', 'cls')])

    write_file(os.path.join(src, 'train', 's0.tar'), shard('a', 3, 700))
    write_file(os.path.join(src, 'train', 's1.tar'), shard('b', 2, 300))
    with ml.Mount(env, src, cache_dir=env.path('c')) as m:
        check_views(ck, 'before', m.mnt, reference(src), src)
        before = {n: read(os.path.join(m.mnt, '.shardfs', n)) for n in ('samples.tsv', 'wids.json')}
        dali0 = read(os.path.join(m.mnt, '.shardfs', 'dali', 'train', 's0.idx'))
        # a changed shard (a new file renamed over it) and a new one
        tmp = os.path.join(src, 'train', '.tmp')
        write_file(tmp, shard('z', 5, 1500))
        os.rename(tmp, os.path.join(src, 'train', 's0.tar'))
        write_file(os.path.join(src, 'train', 's2.tar'), shard('n', 1, 100))
        r = env.run([env.shardfs, 'refresh', m.mnt])
        ck.eq('refresh: exit 0', r.returncode, 0)
        files = check_views(ck, 'after refresh', m.mnt, reference(src), src)
        for n in ('samples.tsv', 'wids.json'):
            ck.ok(files[n] != before[n], 'after refresh: %s changed' % n)
        ck.ok(files['train/s0.tar'] != dali0, 'after refresh: the DALI file of s0 changed')
        ck.ok(b'z_4.jpg' in files['samples.tsv'] and b'a_0.jpg' not in files['samples.tsv'],
              'after refresh: samples.tsv has the new members only')
        ck.eq('loader_index_builds', m.stats().get('loader_index_builds'), 2)


def xattr_delta(m, fn):
    a = m.stats()['xattr_requests']
    fn()
    return m.stats()['xattr_requests'] - a


def group_xattr(env, ck):
    src = env.path('src')
    os.makedirs(src)
    n = 40
    write_file(os.path.join(src, 's0.tar'),
               ml.tar_bytes([('k%d.%s' % (i, e), b'x' * (i + 10)) for i in range(n)
                             for e in ('jpg', 'cls')]))
    members = os.path.join('s0')

    def ls_l(mnt):
        r = subprocess.run(['ls', '-l', os.path.join(mnt, members)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        ck.eq('ls -l exit', r.returncode, 0)
        ck.eq('ls -l lines', len(r.stdout.splitlines()), 2 * n + 1)

    for label, extra in (('default', []), ('--no-xattr', ['--no-xattr']),
                         ('--xattr --no-xattr', ['--xattr', '--no-xattr'])):
        with ml.Mount(env, src, cache_dir=env.path('c'), extra=extra) as m:
            p = os.path.join(m.mnt, members, 'k1.jpg')
            for what, call in (('getxattr', lambda: os.getxattr(p, 'user.shardfs.shard')),
                               ('listxattr', lambda: os.listxattr(p))):
                try:
                    call()
                    ck.fail('%s: %s should fail' % (label, what))
                except OSError as e:
                    # the daemon's ENOSYS reaches the caller as EOPNOTSUPP
                    ck.eq('%s: %s errno' % (label, what), e.errno, errno.EOPNOTSUPP)
            d = xattr_delta(m, lambda: ls_l(m.mnt))
            ck.eq('%s: getxattr requests of ls -l over %d files' % (label, 2 * n), d, 0)
    with ml.Mount(env, src, cache_dir=env.path('c'), extra=['--xattr']) as m:
        d = xattr_delta(m, lambda: ls_l(m.mnt))
        log('--xattr: ls -l over %d files sent %d xattr requests' % (2 * n, d))
        ck.ok(d >= 2 * n, '--xattr: ls -l asks the daemon for every file (%d requests)' % d)
        rows = parse_tsv(ck, read(os.path.join(m.mnt, '.shardfs', 'samples.tsv')))
        ck.eq('--xattr: samples.tsv rows', len(rows), 2 * n)
        for path, shard, off, size, key in rows:
            p = os.path.join(m.mnt, path)
            ck.eq('--xattr: %s attributes = samples.tsv' % path,
                  [os.getxattr(p, 'user.shardfs.' + a).decode()
                   for a in ('shard', 'offset', 'size', 'key')], [shard, off, size, key])
        ck.eq('--xattr: listxattr', sorted(os.listxattr(os.path.join(m.mnt, members, 'k1.jpg'))),
              sorted('user.shardfs.' + a for a in ('shard', 'offset', 'size', 'key')))
    r = subprocess.run([env.shardfs, 'mount', '--help'], stdout=subprocess.PIPE, timeout=60)
    out = r.stdout.decode()
    ck.ok('--xattr' in out and '--no-xattr' in out and 'default: off' in out,
          'mount --help names --xattr (default off) and --no-xattr')


GROUPS = {'local': group_local, 'http': group_http, 'hostile': group_hostile,
          'refresh': group_refresh, 'xattr': group_xattr}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, 'loaderidx-')
