#!/usr/bin/python3
"""shardfs mount tests: the --layout imagefolder view kept in the cache directory.

usage: test_ifview.py SHARDFS GROUP
GROUP:
  persist  6 shards of key.jpg + key.cls samples (a key in two shards, a sample without an
           image, one without a class): the first mount builds the view and saves it
           (imagefolder_view_saved 1), a remount maps it (imagefolder_view_loaded 1, no shard
           indexed, no index loaded by listing and stat'ing every file); both show exactly the
           expected classes, names, sizes and bytes, and the same left-out counts.
  change   a shard added and one replaced, then 'shardfs refresh' while 4 threads list and
           stat two classes (each listing the old or the new one, each size an old or new
           one): the view is built again and lists exactly the new set; a remount maps that view; a shard removed while
           unmounted: the remount builds (and lists) the view of what is left.
  damaged  the base shards and z.tar, whose z_01.jpg is a hard link to z_00.jpg. The saved
           view (version 4; files of all four kinds of name) truncated at many lengths and
           with a flipped byte in every section (header, classes, files, blocks, counts, sums,
           names, class names), of version 3, and made inconsistent with the checksum fixed (a
           reserved field, a class name offset, start or first block, the file and block
           counts, the names' length, a shard, an entry, an entry with a kind, a count, a
           block's start, a block head that shares, a name sharing more than the one before, a
           '/' or NUL in a name, names out of order): each is rejected at load
           (imagefolder_view_rejected 1); a count larger than its shard's index, another
           index's checksum, a file pointing at another member, at another kind of name, or
           named after a hard link of a member that has none, are found by the first lookup
           and stat of the file (rejected 1); the mount then lists exactly the expected view
           and the rebuilt blob is byte for byte the first one. Last, s0.tar's index removed
           from the cache dir and built again in index version 2 (SHARDFS_INDEX_VERSION=2:
           the same entries, another file) under the saved view: the first stat of its files
           drops the view (rejected 1), and the view saved again is the first one but for
           that shard's checksum, the new index file's.
  clean    a shard rewritten in place 3 times, a remount after each: every remount builds and
           saves a new view and removes exactly the one before (imagefolder_view_removed 1),
           so exactly one view is left in the cache dir; a remount without a change removes
           nothing; a blob of the previous release's name for this dataset ("ifview-<fp>",
           planted as a copy) is removed by the next mount (removed 1), one of another
           fingerprint (which no mount can name) is left.
  share    on one cache dir at once: source A with --class-from cls, A with key-prefix, and
           source B; each saves its view and removes nothing (3 views); remounts of the
           others map theirs (removed 0) and every mount reads exactly its own view before
           and after the others remount. Then a 4th shard added to A while a mount V of A
           (cls) runs without having listed anything: a new mount W of A builds the new view
           and removes V's (removed 1); V still lists, stats and reads exactly its old view
           (from the mapping of its removed blob); after a refresh V has the new view.
  runs     30 shards (keys in several shards, so renamed files): built with the default
           --imagefolder-build-memory (sorted in memory: imagefolder_build_runs 0) and with 4K
           (many sorted runs through the cache directory, merged in several rounds): the two
           blobs are byte for byte the same and list exactly the expected view; a temp file
           a killed build left in the cache directory (.tmp.PID.N of a process that is gone)
           is removed by the next mount, one of a live process is not; no temp file remains.
  full     (root: a tmpfs as the cache directory) the indexes and class maps cached, then the
           disk filled but for 16 KiB: with --imagefolder-build-memory 4K (the build needs
           the disk for its runs) the mount fails and says the cache directory is full and
           what to do; with the default (sorted in memory) the view cannot be saved and is
           kept in the heap (imagefolder_view_mapped 0) and lists exactly the expected view;
           no temp file is left either time.
  lookups  the base shards, on fresh mounts (nothing of them in the kernel's caches): a walk
           (os.walk, as ImageFolder lists) then the read of every file it listed, by the
           daemon's counters. Default (--listing-attrs auto, which is all in this layout):
           every file listed with its attributes (listed_names_only 0), so the reads send no
           LOOKUP (lookups 0), no GETATTR, and exactly one READ a file; with --listing-attrs
           looked: the files listed by name and type only and one LOOKUP a file read. Bytes
           exact both times.
Environment: SHARDFS_TEST_SEED, SHARDFS_TEST_KEEP=1, SHARDFS_TEST_DEADLINE.
Exit: 0 pass, 1 fail, 77 skip (only when FUSE is unusable here).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import os  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.kcache import Delta, Pins  # noqa: E402
from shardfs_test.mount import log, write_file  # noqa: E402

NCLS = 3
MAGIC = b'SHIFVIEW'
MTIME = 1700000000


def shard_samples(shard, keys):
    """Members of a shard: key.jpg (bytes that name shard and key) and key.cls."""
    members = []
    for i, k in enumerate(keys):
        members.append((k + '.jpg', b'jpeg %s %s ' % (shard.encode(), k.encode()) * (i + 1)))
        members.append((k + '.cls', b'%d' % (i % NCLS)))
    return members


def write_shard(src, name, members):
    tmp = os.path.join(src, '.' + name + '.tmp')
    write_file(tmp, ml.tar_bytes(members))
    os.rename(tmp, os.path.join(src, name))


def expected(shards):
    """{class: {name: bytes}} for shards {name: members}, as the view names them: the first of
    equal names in shard order keeps it, later ones get ~<shard directory>."""
    view = {}
    for shard in sorted(shards):
        cls = dict((n[:-4], d) for n, d in shards[shard] if n.endswith('.cls'))
        for n, d in shards[shard]:
            if not n.endswith('.jpg') or n[:-4] not in cls:
                continue
            c = '%d' % int(cls[n[:-4]])
            files = view.setdefault(c, {})
            name = n if n not in files else '%s~%s.jpg' % (n[:-4], shard[:-4])
            files[name] = d
    return view


def base_shards():
    shards = {}
    for s in range(6):
        shards['s%d.tar' % s] = shard_samples('s%d' % s, ['k%d_%02d' % (s, i)
                                                          for i in range(7 + s)])
    # a key that is in s0 too, a sample without an image, one without a class
    shards['s5.tar'] += shard_samples('s5', ['k0_03'])
    shards['s5.tar'] += [('noimg.cls', b'1'), ('noimg.txt', b'text'), ('nocls.jpg', b'jpeg')]
    return shards


def listing(mnt):
    return {c: sorted(os.listdir(os.path.join(mnt, c))) for c in os.listdir(mnt)}


def check_view(ck, label, mnt, want, read=True):
    got = listing(mnt)
    ck.eq(label + ': classes and names', got, {c: sorted(f) for c, f in want.items()})
    wrong = []
    for c, files in want.items():
        for n, data in files.items():
            p = os.path.join(mnt, c, n)
            try:
                st = os.stat(p)
                if st.st_size != len(data) or int(st.st_mtime) != MTIME or \
                        (st.st_mode & 0o7777) != 0o644:
                    wrong.append('%s/%s: size %d mtime %d mode %o' % (
                        c, n, st.st_size, st.st_mtime, st.st_mode))
                elif read and ml.read_all(p) != data:
                    wrong.append('%s/%s: bytes' % (c, n))
            except OSError as e:
                wrong.append('%s/%s: %s' % (c, n, e))
    ck.ok(not wrong, '%s: %d files wrong, e.g. %r' % (label, len(wrong), wrong[:3]))


def counters(st):
    return dict((k, st.get('imagefolder_' + k)) for k in
                ('view_loaded', 'view_saved', 'view_rejected', 'view_mapped', 'view_removed',
                 'images', 'no_image', 'no_class', 'shards_indexed'))


def view_blob(cache):
    """Path of the one saved view under cache (its file starts with the magic)."""
    found = []
    for root, _, files in os.walk(cache):
        for f in files:
            p = os.path.join(root, f)
            with open(p, 'rb') as fh:
                if fh.read(8) == MAGIC:
                    found.append(p)
    return found


def mount_opts():
    return ['--layout', 'imagefolder']



def new_source(env):
    """The base shards written to a new source directory: (src, cache dir, shards)."""
    src, cache = env.path('src'), env.path('cache')
    os.makedirs(src)
    shards = base_shards()
    for n, members in shards.items():
        write_shard(src, n, members)
    return src, cache, shards

def group_persist(env, ck):
    src, cache, shards = new_source(env)
    want = expected(shards)
    nimg = sum(len(f) for f in want.values())
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
        check_view(ck, 'first mount', m.mnt, want)
        ck.eq('first mount: counters', counters(m.stats()),
              {'view_loaded': 0, 'view_saved': 1, 'view_rejected': 0, 'view_mapped': 1,
               'view_removed': 0, 'images': nimg, 'no_image': 1, 'no_class': 1,
               'shards_indexed': 6})
    blobs = view_blob(cache)
    ck.eq('one saved view', len(blobs), 1)
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
        check_view(ck, 'remount, stat only', m.mnt, want, read=False)
        st = m.stats()
        ck.eq('remount: counters', counters(st),
              {'view_loaded': 1, 'view_saved': 0, 'view_rejected': 0, 'view_mapped': 1,
               'view_removed': 0, 'images': nimg, 'no_image': 1, 'no_class': 1,
               'shards_indexed': 0})
        # names and attributes are the members' in the shards' indexes: loaded from the
        # cache directory, not built (no shard byte read)
        ck.eq('remount: listing and stat build no index, read no shard byte',
              (st.get('index_built'), st.get('index_bytes_scanned')), (0, 0))
        check_view(ck, 'remount, read', m.mnt, want)
        ck.eq('remount: reads load the indexes', m.stats().get('index_loaded'), 6)
        ck.eq('remount: no index built', m.stats().get('index_built'), 0)


# The counters group_lookups counts (besides forgets, which kcache.Delta adds).
LOOKUP_KEYS = ('lookups', 'getattrs', 'reads', 'readdirs', 'listed_names_only')


def group_lookups(env, ck):
    """A walk of the view and a read of every file it listed: the LOOKUPs and getattrs the
    kernel sends. Whatever it drops meanwhile (another process's drop_caches, as the benches
    run): every directory is held before the walk goes in, and in 'auto' (files listed with
    their attributes: each a kernel inode) every file as soon as it is listed, every file read
    stays open (kcache.Pins); so a LOOKUP beyond the ones counted is of an inode the kernel
    forgot, which the daemon counts as a FORGET: the checks count LOOKUPs less forgets."""
    src, cache, shards = new_source(env)
    want = expected(shards)
    nimg = sum(len(f) for f in want.values())
    for mode, extra in (('auto', []), ('looked', ['--listing-attrs', 'looked'])):
        with ml.Mount(env, src, cache_dir=cache, extra=mount_opts() + extra) as m:
            delta, pins = Delta(m, LOOKUP_KEYS), Pins()
            paths = []
            for root, dirs, names in os.walk(m.mnt):
                paths += [os.path.join(root, n) for n in names]
                for n in dirs + (names if mode == 'auto' else []):
                    pins.path(os.path.join(root, n))
            walk = delta()
            bad = [p for p in paths if pins.read(p) != want[os.path.basename(
                os.path.dirname(p))][os.path.basename(p)]]
            reads = delta()
            pins.close()
            delta.close()
            log('%s: walk %s; reads %s' % (mode, walk, reads))
            ck.eq('%s: files listed' % mode, len(paths), nimg)
            ck.eq('%s: files whose bytes differ' % mode, bad, [])
            names_only = 0 if mode == 'auto' else nimg
            ck.eq('%s: the walk: lookups (less forgets), files listed without attributes' % mode,
                  (walk['lookups'] - walk['forgets'], walk['listed_names_only']),
                  (0, names_only))
            ck.eq('%s: reading every file: lookups (less forgets), getattrs, reads' % mode,
                  (reads['lookups'] - reads['forgets'], reads['getattrs'], reads['reads']),
                  (names_only, 0, nimg))


def group_change(env, ck):
    exe = env.shardfs
    src, cache, shards = new_source(env)
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
        check_view(ck, 'before', m.mnt, expected(shards))
        old_shards = dict(shards)
        # a new shard, and s2 replaced by other samples (one in a new class)
        shards['s6.tar'] = shard_samples('s6', ['k6_%02d' % i for i in range(4)])
        shards['s2.tar'] = shard_samples('s2', ['r2_%02d' % i for i in range(5)])
        shards['s2.tar'] += [('r2_new.jpg', b'jpeg r2 new'), ('r2_new.cls', b'3')]
        for n in ('s6.tar', 's2.tar'):
            write_shard(src, n, shards[n])
        old, new = expected(old_shards), expected(shards)
        stop, seen = threading.Event(), []
        readers = [threading.Thread(target=reader, args=(m.mnt, old, new, stop, seen))
                   for _ in range(4)]
        for t in readers:
            t.start()
        r = env.run([exe, 'refresh', m.mnt])
        log('refresh -> %r %r' % (r.stdout, r.stderr))
        ck.eq('refresh: exit 0', r.returncode, 0)
        for c in new:  # the new view is built while the readers run
            os.listdir(os.path.join(m.mnt, c))
        stop.set()
        for t in readers:
            t.join()
        bad = [x for x in seen if x[0] == 'bad']
        ck.ok(not bad, 'readers during the refresh: %d unexpected results, e.g. %r' % (
            len(bad), bad[:3]))
        ck.ok(len(seen) >= 4, 'readers during the refresh: only %d listings' % len(seen))
        check_view(ck, 'after refresh', m.mnt, expected(shards))
        st = counters(m.stats())
        ck.eq('after refresh: built and saved again, the first view removed',
              (st['view_saved'], st['view_loaded'], st['view_removed']), (2, 0, 1))
        raw = m.stats()
        ck.eq('after refresh: s2\'s old index and class map removed from the cache dir',
              (raw.get('index_removed'), raw.get('imagefolder_classes_removed')), (1, 1))
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
        check_view(ck, 'remount after refresh', m.mnt, expected(shards))
        st = counters(m.stats())
        ck.eq('remount after refresh: counters (the refreshed numbering\'s view removed)',
              (st['view_loaded'], st['view_saved'], st['view_removed'], st['shards_indexed']),
              (0, 1, 1, 7))
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
        check_view(ck, 'second remount', m.mnt, expected(shards))
        st = counters(m.stats())
        ck.eq('second remount: mapped', (st['view_loaded'], st['view_saved'],
                                         st['view_removed']), (1, 0, 0))
    os.unlink(os.path.join(src, 's4.tar'))
    del shards['s4.tar']
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
        check_view(ck, 'a shard removed', m.mnt, expected(shards))
        st = counters(m.stats())
        ck.eq('a shard removed: built', (st['view_loaded'], st['view_saved'],
                                         st['view_removed']), (0, 1, 1))
    ck.eq('change: one saved view left', len(view_blob(cache)), 1)
    # one index and one class map per shard left (s4's stay: a local source keeps no listing,
    # so a shard removed while nothing was mounted goes unnoticed)
    kinds = {}
    for d, files in family_dirs(cache, None).items():
        for f in files:
            with open(os.path.join(d, f), 'rb') as fh:
                kinds[os.path.join(d, f)] = fh.read(8)
    ck.eq('change: index blobs left', sum(1 for k in kinds.values() if k == b'SHRDIDX\0'), 7)
    ck.eq('change: class maps left', sum(1 for k in kinds.values() if k == b'SHCLSMAP'), 7)


def reader(mnt, old, new, stop, seen):
    """List and stat class 0 and 1 until stop: each listing is the old or the new one, each
    file's size that of its old or new bytes (or ESTALE/ENOENT: a file of a replaced shard)."""
    while True:
        last = stop.is_set()
        for c in ('0', '1'):
            d = os.path.join(mnt, c)
            try:
                names = sorted(os.listdir(d))
            except OSError as e:
                seen.append(('bad', c, 'listdir', e.errno))
                continue
            if names not in (sorted(old.get(c, ())), sorted(new.get(c, ()))):
                seen.append(('bad', c, 'names', names))
                continue
            for n in names:
                sizes = {len(v[c][n]) for v in (old, new) if n in v.get(c, {})}
                try:
                    size = os.stat(os.path.join(d, n)).st_size
                except OSError as e:
                    if e.errno not in (errno.ESTALE, errno.ENOENT):
                        seen.append(('bad', c, n, e.errno))
                    continue
                if size not in sizes:
                    seen.append(('bad', c, n, size, sizes))
            seen.append(('ok', c))
        if last:
            return


def ifv_sum(b):
    """fs_imagefolder.c's ifv_sum: four lanes of 64-bit words."""
    M = (1 << 64) - 1
    P = 0x100000001b3
    init = 0xcbf29ce484222325

    def mix(h, w):
        return ((((h << 31) | (h >> 33)) & M ^ w) * P) & M

    h = [init, init ^ 1, init ^ 2, init ^ 3]
    r = init ^ len(b)
    words = struct.unpack_from('<%dQ' % ((len(b) - 24) // 8), b, 24)
    n4 = len(words) // 4 * 4
    for i in range(0, n4, 4):
        for k in range(4):
            h[k] = mix(h[k], words[i + k])
    for w in words[n4:]:
        h[0] = mix(h[0], w)
    h[1] = mix(h[1], struct.unpack_from('<Q', b, 0)[0])
    h[2] = mix(h[2], struct.unpack_from('<Q', b, 8)[0])
    for k in range(4):
        r = mix(r, h[k])
    return r ^ (r >> 29)


def resealed(b, off, fmt, value):
    b = bytearray(b)
    struct.pack_into(fmt, b, off, value)
    struct.pack_into('<Q', b, 16, ifv_sum(bytes(b)))
    return bytes(b)


def pad8(n):
    return (n + 7) // 8 * 8


def view_sections(orig):
    """Where the sections of a version 4 view start (fs_if_blob.c's layout)."""
    nclasses, = struct.unpack_from('<I', orig, 12)
    nfiles, nshards = struct.unpack_from('<II', orig, 32)
    strtab_len, = struct.unpack_from('<Q', orig, 40)
    nblocks, names_len = struct.unpack_from('<IQ', orig, 76)
    sec = {'header': 0, 'classes': 96}
    sec['files'] = sec['classes'] + 32 * nclasses
    sec['blocks'] = sec['files'] + 8 * nfiles
    sec['counts'] = sec['blocks'] + 8 * nblocks
    sec['sums'] = sec['counts'] + pad8(4 * nshards)
    sec['names'] = sec['sums'] + 8 * nshards
    sec['strtab'] = sec['names'] + pad8(names_len)
    assert sec['strtab'] + pad8(strtab_len) == len(orig), 'not the C layout'
    return sec, nclasses, nfiles, nshards, strtab_len, nblocks


def second_name(orig, sec):
    """Offset of the second name's entry (u8 shared, u8 length, the rest) of the first
    class with two files, and the first name (decoded)."""
    p = sec['names']
    n0 = orig[p + 1]
    return p + 2 + n0, orig[p + 2:p + 2 + n0]


def damaged_variants(orig):
    """(what, bytes, when): a view cut, flipped or made inconsistent in every section.
    when 'load': refused when it is opened; 'use': it checks out (checksum, counts,
    offsets, names) but not against a shard's index: the index is not the file the view was
    built from (its checksum or count differs), or a file's name is not the one its member
    makes (another member, another kind of name); the first lookup and stat of such a file
    finds it (the view is retired, its blob removed, and built again)."""
    sec, nclasses, nfiles, nshards, strtab_len, nblocks = view_sections(orig)
    f, c, n, bl, nm = sec['files'], sec['classes'], sec['counts'], sec['blocks'], sec['names']
    first, cnt = struct.unpack_from('<II', orig, c + 8)
    assert first == 0 and cnt >= 2 and nblocks >= 2, 'a class of two files, two blocks'
    ck_sum = ifv_sum(orig)
    assert ck_sum == struct.unpack_from('<Q', orig, 16)[0], 'ifv_sum of the test is not the C one'
    v = []
    cuts = {0, 1, 8, 23, 24, 95, len(orig) // 2, len(orig) - 8, len(orig) - 1}
    for off in sec.values():
        cuts |= {off, off + 1, off + 7}
    for k in sorted(x for x in cuts if x < len(orig)):
        v.append(('truncated to %d' % k, orig[:k], 'load'))
    flips = {0, 9, 12, 20, 30, 40, 48, 72, 76, 80, 88, len(orig) - 20}
    for off in sec.values():
        flips |= {off + 1, off + 5}
    for off in sorted(x for x in flips if x < len(orig)):
        b = bytearray(orig)
        b[off] ^= 0x10
        v.append(('byte %d flipped' % off, bytes(b), 'load'))
    v.append(('version 3 (the release before) (checksum fixed)', resealed(orig, 8, '<I', 3),
              'load'))
    v.append(('a reserved field set (checksum fixed)', resealed(orig, 88, '<Q', 1), 'load'))
    v.append(('a class record\'s reserved field set (checksum fixed)',
              resealed(orig, c + 28, '<I', 1), 'load'))
    v.append(('a class name past the names (checksum fixed)',
              resealed(orig, c, '<Q', strtab_len + 5), 'load'))
    v.append(('a class starting late (checksum fixed)', resealed(orig, c + 8, '<I', 1), 'load'))
    v.append(('a class\'s first block wrong (checksum fixed)', resealed(orig, c + 24, '<I', 1),
              'load'))
    v.append(('more files than there are (checksum fixed)', resealed(orig, 32, '<I',
                                                                     nfiles + 1), 'load'))
    v.append(('one block more (checksum fixed)', resealed(orig, 76, '<I', nblocks + 1), 'load'))
    v.append(('names 8 bytes longer (checksum fixed)',
              resealed(orig, 80, '<Q', struct.unpack_from('<Q', orig, 80)[0] + 8), 'load'))
    v.append(('a shard past the shards (checksum fixed)', resealed(orig, f, '<I', nshards),
              'load'))
    shard, e0 = struct.unpack_from('<II', orig, f)
    assert e0 >> 30 == 0, 'the first file is named plain'
    count, = struct.unpack_from('<I', orig, n + 4 * shard)
    v.append(('an entry past its shard\'s count (checksum fixed)',
              resealed(orig, f + 4, '<I', count), 'load'))
    v.append(('an entry past its shard\'s count, with a kind (checksum fixed)',
              resealed(orig, f + 4, '<I', count | 1 << 30), 'load'))
    v.append(('a count short of an entry (checksum fixed)',
              resealed(orig, n + 4 * shard, '<I', 0), 'load'))
    b1, = struct.unpack_from('<Q', orig, bl + 8)
    v.append(('a block starting a byte late (checksum fixed)',
              resealed(orig, bl + 8, '<Q', b1 + 1), 'load'))
    v.append(('a block head that shares (checksum fixed)', resealed(orig, nm, '<B', 1), 'load'))
    p2, name0 = second_name(orig, sec)
    v.append(('a name sharing more than the name before has (checksum fixed)',
              resealed(orig, p2, '<B', len(name0) + 1), 'load'))
    v.append(('a name with a \'/\' (checksum fixed)', resealed(orig, nm + 2, '<B', 0x2f),
              'load'))
    v.append(('a name with a NUL (checksum fixed)', resealed(orig, nm + 3, '<B', 0), 'load'))
    v.append(('names out of order in a class (checksum fixed)',
              resealed(orig, p2 + 2, '<B', 1), 'load'))
    v.append(('another fingerprint (checksum fixed)', resealed(orig, 24, '<Q', 12345), 'load'))
    # references that check out at load but not against the shard's index
    v.append(('a count larger than the shard\'s index (checksum fixed)',
              resealed(orig, n + 4 * shard, '<I', count + 1), 'use'))
    s_sum, = struct.unpack_from('<Q', orig, sec['sums'] + 8 * shard)
    v.append(('the checksum of another index (checksum fixed)',
              resealed(orig, sec['sums'] + 8 * shard, '<Q', s_sum ^ 1), 'use'))
    v.append(('a file naming another member (checksum fixed)',
              resealed(orig, f + 4, '<I', (e0 + 1) % count), 'use'))
    v.append(('a file of another kind of name (checksum fixed)',
              resealed(orig, f + 4, '<I', e0 | 1 << 30), 'use'))
    v.append(('a file named after a hard link (checksum fixed)',
              resealed(orig, f + 4, '<I', e0 | 3 << 30), 'use'))
    return v


def fnv64_hex(b):
    """cachetier__hash_hex: FNV-1a 64 in 16 hex digits (blob file names)."""
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & ((1 << 64) - 1)
    return '%016x' % h


def family_dirs(cache, magic=MAGIC):
    """The blob family directories (meta/f-*) under cache whose blobs start with magic (None:
    all; the default: the views', not the shards' index and class map families):
    {path: [files]}."""
    found = {}
    for root, dirs, files in os.walk(cache):
        if os.path.basename(root).startswith('f-') and \
                os.path.basename(os.path.dirname(root)) == 'meta':
            kinds = set()
            for f in files:
                with open(os.path.join(root, f), 'rb') as fh:
                    kinds.add(fh.read(len(magic or b'')))
            if magic is None or magic in kinds:
                found[root] = sorted(files)
    return found


def group_clean(env, ck):
    src, cache, shards = new_source(env)
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
        check_view(ck, 'first mount', m.mnt, expected(shards))
        st = counters(m.stats())
        ck.eq('first mount: saved, nothing removed', (st['view_saved'], st['view_removed']),
              (1, 0))
    first = view_blob(cache)
    ck.eq('first mount: one view', len(first), 1)
    seen = set(first)
    for k in range(3):
        # s1 rewritten in place (same inode): one more sample each time
        keys = ['k1_%02d' % i for i in range(8)] + ['r%d_%02d' % (j, j) for j in range(k + 1)]
        shards['s1.tar'] = shard_samples('s1', keys)
        with open(os.path.join(src, 's1.tar'), 'r+b') as f:
            f.write(ml.tar_bytes(shards['s1.tar']))
            f.truncate()
        with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
            label = 'change %d' % (k + 1)
            check_view(ck, label, m.mnt, expected(shards))
            st = counters(m.stats())
            ck.eq(label + ': built, saved, the view before removed',
                  (st['view_loaded'], st['view_saved'], st['view_removed'], st['view_mapped']),
                  (0, 1, 1, 1))
        blobs = view_blob(cache)
        ck.eq(label + ': exactly one view left', len(blobs), 1)
        ck.ok(blobs and blobs[0] not in seen, label + ': the view left is a new one')
        seen.update(blobs)
    ck.eq('one family directory with one blob', [len(f) for f in family_dirs(cache).values()],
          [1])
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
        check_view(ck, 'remount, no change', m.mnt, expected(shards))
        st = counters(m.stats())
        ck.eq('remount, no change: mapped, nothing removed',
              (st['view_loaded'], st['view_saved'], st['view_removed']), (1, 0, 0))
    # the previous release saved this dataset's view as the plain blob "ifview-<fp>"
    path = view_blob(cache)[0]
    meta = os.path.dirname(os.path.dirname(path))
    with open(path, 'rb') as f:
        blob = f.read()
    fp, = struct.unpack_from('<Q', blob, 24)
    old = os.path.join(meta, fnv64_hex(b'ifview-%016x' % fp))
    other = os.path.join(meta, fnv64_hex(b'ifview-%016x' % (fp ^ 1)))
    for p in (old, other):
        write_file(p, blob)
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
        check_view(ck, 'old-format blob planted', m.mnt, expected(shards))
        st = counters(m.stats())
        ck.eq('old-format blob planted: mapped, the old one removed',
              (st['view_loaded'], st['view_saved'], st['view_removed']), (1, 0, 1))
    ck.eq('old-format blob of this fingerprint gone, one of another kept',
          (os.path.exists(old), os.path.exists(other)), (False, True))
    ck.eq('the view itself kept', view_blob(cache).count(path), 1)


def expected_by(shards, cls_of):
    """expected() with the class of sample key (its .cls bytes cls) given by cls_of(key, cls)."""
    view = {}
    for shard in sorted(shards):
        cls = dict((n[:-4], d) for n, d in shards[shard] if n.endswith('.cls'))
        for n, d in shards[shard]:
            if n.endswith('.jpg') and n[:-4] in cls:
                files = view.setdefault(cls_of(n[:-4], cls[n[:-4]]), {})
                name = n if n not in files else '%s~%s.jpg' % (n[:-4], shard[:-4])
                files[name] = d
    return view


def by_cls(key, cls):
    return '%d' % int(cls)


def by_prefix(key, cls):
    return key.split('_', 1)[0]


def share_shards(tag, n):
    return {'%s%d.tar' % (tag, s): shard_samples('%s%d' % (tag, s), [
        '%s%d_%02d' % ('pq'[i % 2], s, i) for i in range(5 + s)]) for s in range(n)}


def group_share(env, ck):
    srca, srcb, cache = env.path('srca'), env.path('srcb'), env.path('cache')
    a, b = share_shards('a', 3), share_shards('b', 2)
    for d, shards in ((srca, a), (srcb, b)):
        os.makedirs(d)
        for n, members in shards.items():
            write_shard(d, n, members)
    kp = ['--class-from', 'key-prefix']
    specs = {'A': (srca, [], expected_by(a, by_cls)),
             'A-key': (srca, kp, expected_by(a, by_prefix)),
             'B': (srcb, [], expected_by(b, by_cls))}
    mounts = {}
    try:
        for what, (src, extra, _) in specs.items():
            mounts[what] = ml.Mount(env, src, cache_dir=cache, extra=mount_opts() + extra,
                                    mountpoint=env.path('mnt-' + what))
            mounts[what].mount()
            st = counters(mounts[what].stats())
            ck.eq(what + ': saved, nothing removed', (st['view_saved'], st['view_removed']),
                  (1, 0))
        ck.eq('three views, each in a family of its own',
              sorted(len(f) for f in family_dirs(cache).values()), [1, 1, 1])
        for what in specs:  # remount the other two, then read this one (and the others)
            for other in specs:
                if other == what:
                    continue
                m = mounts[other]
                m.umount()
                m.mount()
                st = counters(m.stats())
                ck.eq('%s remounted: mapped, nothing removed' % other,
                      (st['view_loaded'], st['view_saved'], st['view_removed']), (1, 0, 0))
            for w in specs:
                check_view(ck, '%s after the others remounted' % w, mounts[w].mnt, specs[w][2])
        ck.eq('still three views', sorted(len(f) for f in family_dirs(cache).values()),
              [1, 1, 1])
        # V: a mount of A that lists nothing until W, a mount of A with a 4th shard, removed
        # V's view
        v = ml.Mount(env, srca, cache_dir=cache, extra=mount_opts(), mountpoint=env.path('mnt-V'))
        v.mount()
        mounts['V'] = v
        ck.eq('V: mapped', counters(v.stats())['view_loaded'], 1)
        old_a = dict(a)
        a['a3.tar'] = shard_samples('a3', ['p3_%02d' % i for i in range(3)])
        write_shard(srca, 'a3.tar', a['a3.tar'])
        w = ml.Mount(env, srca, cache_dir=cache, extra=mount_opts(), mountpoint=env.path('mnt-W'))
        w.mount()
        mounts['W'] = w
        st = counters(w.stats())
        ck.eq('W: built, saved, V\'s view removed',
              (st['view_loaded'], st['view_saved'], st['view_removed']), (0, 1, 1))
        ck.eq('after W: still three views', sorted(len(f) for f in family_dirs(cache).values()),
              [1, 1, 1])
        check_view(ck, 'W', w.mnt, expected_by(a, by_cls))
        check_view(ck, 'V, its view removed', v.mnt, expected_by(old_a, by_cls))
        st = counters(v.stats())
        ck.eq('V: still its mapped view, nothing built',
              (st['view_loaded'], st['view_saved'], st['view_mapped'], st['images']),
              (1, 0, 1, sum(len(f) for f in expected_by(old_a, by_cls).values())))
        for what in ('A-key', 'B'):
            check_view(ck, what + ' after W', mounts[what].mnt, specs[what][2])
        r = env.run([env.shardfs, 'refresh', v.mnt])
        ck.eq('V refresh: exit 0', r.returncode, 0)
        check_view(ck, 'V after its refresh', v.mnt, expected_by(a, by_cls))
        st = counters(v.stats())
        ck.eq('V after its refresh: W\'s view mapped',
              (st['view_loaded'], st['view_saved'], st['view_removed']), (2, 0, 0))
    finally:
        for m in mounts.values():
            m.umount(quiet=True)


def link_shard():
    """A shard whose second image is a hard link to its first (z_01.jpg -> z_00.jpg): the
    view names it z_01.jpg, after the link member, its record the linked-to entry."""
    import io
    import tarfile
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode='w', format=tarfile.USTAR_FORMAT) as tf:
        for name, data, link in (('z_00.jpg', b'jpeg z z_00 linked', None),
                                 ('z_00.cls', b'0', None), ('z_01.jpg', b'', 'z_00.jpg'),
                                 ('z_01.cls', b'1', None)):
            ti = tarfile.TarInfo(name)
            ti.mtime = MTIME
            ti.mode = 0o644
            if link:
                ti.type = tarfile.LNKTYPE
                ti.linkname = link
                tf.addfile(ti)
            else:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    return bio.getvalue()


def index_file(cache, key):
    """Path of the saved index of shard key under cache (its identity ends in |key)."""
    found = []
    for root, _, files in os.walk(cache):
        for f in files:
            p = os.path.join(root, f)
            with open(p, 'rb') as fh:
                b = fh.read()
            if b[:8] == b'SHRDIDX\0' and (b'|' + key.encode()) in b:
                found.append(p)
    assert len(found) == 1, 'one index of %s: %r' % (key, found)
    return found[0]


def stat_all(mnt):
    """List and stat every file until one fails: [] or [its errno]."""
    try:
        for cl in sorted(os.listdir(mnt)):
            for name in sorted(os.listdir(os.path.join(mnt, cl))):
                os.stat(os.path.join(mnt, cl, name))
    except OSError as e:
        return [e.errno]
    return []


def group_damaged(env, ck):
    src, cache, shards = new_source(env)
    write_file(os.path.join(src, 'z.tar'), link_shard())
    want = expected(shards)
    want['0']['z_00.jpg'] = want['1']['z_01.jpg'] = b'jpeg z z_00 linked'
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
        check_view(ck, 'first mount', m.mnt, want)
    blobs = view_blob(cache)
    ck.eq('one saved view', len(blobs), 1)
    path = blobs[0]
    with open(path, 'rb') as f:
        orig = f.read()
    sec, _, nfiles, _, _, _ = view_sections(orig)
    kinds = [struct.unpack_from('<I', orig, sec['files'] + 8 * i + 4)[0] >> 30
             for i in range(nfiles)]
    ck.eq('files of each kind of name (plain, ~dir, ~dir~entry, hard link)',
          [kinds.count(k) for k in range(4)], [nfiles - 2, 1, 0, 1])
    for what, data, when in damaged_variants(orig):
        # a new file renamed over the blob, as cachetier writes them (never changed in place)
        write_file(path + '.tmp', data)
        os.rename(path + '.tmp', path)
        with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
            if when == 'use':
                # the names list (they are the view's), and the first lookup and stat of a
                # file of the shard (or a listing with attributes) meets the mismatch: it
                # answers ESTALE and drops the view (rejected 1, below); the kernel looks the
                # path up once more (LOOKUP_REVAL), which builds the view again, so the stat
                # may succeed, but never with another member's attributes (check_view)
                errs = stat_all(m.mnt)
                ck.ok(errs in ([], [errno.ESTALE]), what + ': a stat fails with %r' % errs)
            check_view(ck, what, m.mnt, want, read=False)
            st = counters(m.stats())
            ck.eq(what + ': rejected (at %s) and rebuilt' % when,
                  (st['view_rejected'], st['view_loaded'], st['view_saved']),
                  (1, 0, 1) if when == 'load' else (1, 1, 1))
        with open(path, 'rb') as f:
            ck.ok(f.read() == orig, what + ': the rebuilt view is the first one byte for byte')
    # the index of s0.tar built again under the view (removed from the cache directory, then
    # saved in index version 2: the same entries, another file): the first stat of a file of
    # s0 meets another checksum; the view built again differs from the first exactly in that
    # shard's checksum
    idx = index_file(cache, 's0.tar')
    os.remove(idx)
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts(),
                  prefix=['env', 'SHARDFS_INDEX_VERSION=2']) as m:
        errs = stat_all(m.mnt)
        ck.ok(errs in ([], [errno.ESTALE]), 'index rebuilt: a stat fails with %r' % errs)
        check_view(ck, 'index rebuilt', m.mnt, want)
        st = counters(m.stats())
        ck.eq('index rebuilt: the view rejected (at use) and rebuilt',
              (st['view_rejected'], st['view_loaded'], st['view_saved']), (1, 1, 1))
    idx = index_file(cache, 's0.tar')
    with open(idx, 'rb') as f:
        ib = f.read()
    ck.eq('index rebuilt: in version 2', struct.unpack_from('<I', ib, 8)[0], 2)
    new_sum, = struct.unpack_from('<Q', ib, 16)
    blobs = view_blob(cache)
    ck.eq('index rebuilt: one saved view', len(blobs), 1)
    with open(blobs[0], 'rb') as f:
        nb = f.read()
    diff = [k for k in range(sec['sums'], sec['names'], 8) if nb[k:k + 8] != orig[k:k + 8]]
    ck.ok(len(diff) == 1 and nb == resealed(orig, diff[0], '<Q', new_sum),
          'index rebuilt: the new view is the first with one shard\'s checksum changed to its '
          'new index file\'s (%d differ)' % len(diff))


def group_live(env, ck):
    """The saved view changed in place under the running mount that maps it (cut to nothing,
    a bit flipped, a hole punched, a byte written over with itself): the next request sees
    it, the view is dropped (imagefolder_view_changed) and built again from the shards or,
    where the file still checks out, loaded again; every listing, stat and read after gives
    the exact view, and the daemon never faults on the cut file."""
    src, cache, shards = new_source(env)
    want = expected(shards)
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
        check_view(ck, 'first mount', m.mnt, want, read=False)
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
        check_view(ck, 'remount', m.mnt, want)
        c0 = counters(m.stats())
        ck.eq('remount: the view mapped', (c0['view_loaded'], c0['view_mapped']), (1, 1))
        rejected = loaded = 0
        for k, how in enumerate(['truncate0', 'flip', 'punch', 'rewrite'], 1):
            blobs = view_blob(cache)
            ck.eq('%s: one saved view' % how, len(blobs), 1)
            ml.change_in_place(env, blobs[0], how)
            # a name the kernel has not cached reaches the daemon (listings, stat and pages
            # the kernel keeps do not), then everything it keeps is dropped so that the
            # check reads the view the daemon serves now
            ck.ok(not os.path.exists(os.path.join(m.mnt, 'no-such-class-%d' % k)),
                  '%s: an absent name' % how)
            with open('/proc/sys/vm/drop_caches', 'w') as f:
                f.write('3\n')
            check_view(ck, 'after %s' % how, m.mnt, want)
            st = m.stats()
            c = counters(st)
            if how == 'rewrite':
                loaded += 1  # the file still checks out
            else:
                rejected += 1
            ck.eq('after %s: changed, rejected, loaded, mapped' % how,
                  (st.get('imagefolder_view_changed'), c['view_rejected'], c['view_loaded'],
                   c['view_mapped']), (k, rejected, 1 + loaded, 1))
            ck.eq('after %s: views saved' % how, c['view_saved'], rejected)


def group_race(env, ck):
    """The mapped view's file cut to nothing in place while 4 threads read images (seeded; a
    cut after every 25 exact reads, the kernel's entries and pages dropped after each): every
    read gives the image's exact bytes or ESTALE (counted apart: a daemon that answered ESTALE
    to everything never makes the 25 exact reads the next cut waits for), never another
    image's bytes nor another error, and the daemon never faults (the cut file's pages read
    zeros in a request in flight; its own check says ESTALE)."""
    src, cache, shards = new_source(env)
    want = expected(shards)
    paths = sorted((c, n) for c, files in want.items() for n in files)
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
        check_view(ck, 'first mount', m.mnt, want, read=False)
    with ml.Mount(env, src, cache_dir=cache, extra=mount_opts()) as m:
        rd = ml.Readers({os.path.join(m.mnt, c, n): want[c][n] for c, n in paths}, env.rng)
        cuts = waits = retries = 0
        try:
            for k in range(RACE_CUTS):
                if not rd.wait_reads(k * 25, exact=True):
                    break
                waits += 1
                # a name never looked up reaches the daemon's root lookup, which checks the
                # view and builds and saves it again when the last cut retired it (or cuts
                # it now), before it answers: the saved view exists when the lookup returns
                # (no cut waits for a reader to happen to look a name up; where the lookup
                # met a reader's rebuild, the listing waits for that one's save: a state,
                # polled). A reader's lookup may rebuild it between the listing and the cut
                # (the cut's file is then gone): another absent name, and the cut again
                # (tries counted, not timed: every round makes its cut)
                for t in range(RACE_TRIES):
                    ck.ok(not os.path.exists(os.path.join(
                        m.mnt, 'no-such-class-%d-%d' % (k, t))), 'race: an absent name (%d)' % k)
                    blobs = ml.poll(lambda: live_view_blobs(cache))  # a cut one has no magic
                    if not blobs:
                        continue
                    try:
                        os.truncate(blobs[0], 0)
                        cuts += 1
                        retries += t
                        break
                    except FileNotFoundError:
                        pass  # replaced by a rebuilt view meanwhile
                with open('/proc/sys/vm/drop_caches', 'w') as f:
                    f.write('3\n')
        finally:
            rd.stop()
        got, bad = rd.got, rd.bad
        st = m.stats()
        log('race: %d cuts (%d tries again); reads %r; imagefolder_view_changed %d' % (
            cuts, retries, got, st.get('imagefolder_view_changed')))
        ck.eq('race: reads that gave other bytes or another error', bad[:5], [])
        ck.eq('race: cuts made', cuts, RACE_CUTS)
        ck.eq('race: rounds of 25 exact reads', waits, RACE_CUTS)
        # ESTALE comes from the files in flight at a cut (measured: under 1% of the reads);
        # 80% exact is far from that and from a daemon that gave up on most reads
        ck.ok(got['ok'] >= 0.8 * (got['ok'] + got['ESTALE']), 'race: %d exact reads, %d ESTALE: '
              'fewer than 80%% exact' % (got['ok'], got['ESTALE']))
        ck.ok(got['ok'] >= (RACE_CUTS - 1) * 25, 'race: %d exact reads, %d ESTALE: fewer than '
              'the %d exact ones the cuts waited for' % (got['ok'], got['ESTALE'],
                                                          (RACE_CUTS - 1) * 25))
        ck.ok(st.get('imagefolder_view_changed', 0) >= 1, 'race: no change seen')
        with open('/proc/sys/vm/drop_caches', 'w') as f:
            f.write('3\n')
        check_view(ck, 'race: after the cuts', m.mnt, want)


RACE_CUTS = 60
RACE_TRIES = 10  # absent names looked up for one cut at most


def live_view_blobs(cache):
    """view_blob while the daemon writes views: the temp files of its puts come and go."""
    found = []
    for root, _, files in os.walk(cache):
        for f in files:
            try:
                with open(os.path.join(root, f), 'rb') as fh:
                    if not f.startswith('.') and fh.read(8) == MAGIC:
                        found.append(os.path.join(root, f))
            except FileNotFoundError:
                pass
    return found


def runs_shards():
    shards = base_shards()
    for s in range(6, 30):
        keys = ['k%d_%02d' % (s, i) for i in range(30)] + ['k0_%02d' % (s % 7)]
        shards['s%d.tar' % s] = shard_samples('s%d' % s, keys)
    return shards


def temp_files(cache):
    return sorted(f for _, _, files in os.walk(cache) for f in files if f.startswith('.tmp.'))


def group_runs(env, ck):
    src = env.path('src')
    os.makedirs(src)
    shards = runs_shards()
    for n, members in shards.items():
        write_shard(src, n, members)
    want = expected(shards)
    blobs = {}
    for tag, extra in (('memory', []), ('runs', ['--imagefolder-build-memory', '4K'])):
        cache = env.path('cache-' + tag)
        with ml.Mount(env, src, cache_dir=cache, extra=mount_opts() + extra) as m:
            check_view(ck, tag, m.mnt, want)
            st = m.stats()
            runs = st.get('imagefolder_build_runs')
            ck.eq(tag + ': saved and mapped', (st.get('imagefolder_view_saved'),
                                               st.get('imagefolder_view_mapped')), (1, 1))
            ck.ok(runs == 0 if tag == 'memory' else runs > 8,
                  '%s: imagefolder_build_runs %r' % (tag, runs))
        found = view_blob(cache)
        ck.eq(tag + ': one saved view', len(found), 1)
        ck.eq(tag + ': no temp file left', temp_files(cache), [])
        with open(found[0], 'rb') as f:
            blobs[tag] = (found[0], f.read())
    ck.ok(blobs['memory'][1] == blobs['runs'][1],
          'the view sorted in runs is byte for byte the one sorted in memory (%d, %d bytes)' % (
              len(blobs['memory'][1]), len(blobs['runs'][1])))
    # a build killed while writing its blob leaves .tmp.PID.N beside the blobs
    meta = os.path.dirname(blobs['runs'][0])
    gone = subprocess.Popen(['true'])
    gone.wait()
    dead = os.path.join(meta, '.tmp.%d.0' % gone.pid)
    live = os.path.join(meta, '.tmp.%d.1' % os.getpid())
    for p in (dead, live):
        write_file(p, blobs['runs'][1][:len(blobs['runs'][1]) // 2])
    with ml.Mount(env, src, cache_dir=env.path('cache-runs'),
                  extra=mount_opts() + ['--imagefolder-build-memory', '4K']) as m:
        check_view(ck, 'remount', m.mnt, want, read=False)
        st = counters(m.stats())
        ck.eq('remount: mapped', (st['view_loaded'], st['view_saved']), (1, 0))
        ck.eq('remount: the dead build\'s temp file is removed, a live process\'s is not',
              (os.path.exists(dead), os.path.exists(live)), (False, True))
    os.unlink(live)


def group_full(env, ck):
    if os.geteuid() != 0:
        raise ml.Skip('full: a tmpfs needs root', 'host')
    src, fs = env.path('src'), env.path('tmpfs')
    os.makedirs(src)
    shards = runs_shards()
    for n, members in shards.items():
        write_shard(src, n, members)
    want = expected(shards)
    ml.tmpfs(fs, '16M')
    try:
        full_checks(env, ck, src, fs, want)
    finally:
        ml.untmpfs(fs)


def full_checks(env, ck, src, fs, want):
    cache, logf = os.path.join(fs, 'cache'), env.path('log')
    opts = mount_opts() + ['--log-file', logf]
    with ml.Mount(env, src, cache_dir=cache, extra=opts):
        pass  # indexes, class maps and the view saved
    view_len = 0
    for p in view_blob(cache):
        view_len = os.path.getsize(p)
        os.unlink(p)
    log('full: the view takes %d bytes' % view_len)
    # room for less than the view (a page less), at most 16 KiB
    sv = os.statvfs(fs)
    keep = min(16 << 10, max(0, (view_len - 1) // 4096 * 4096))
    filler = sv.f_bavail * sv.f_bsize - keep
    with open(os.path.join(fs, 'filler'), 'wb') as f:
        f.write(b'\0' * filler)
    mnt = env.path('mnt-full')
    os.makedirs(mnt)
    r = env.run([env.shardfs, 'mount', '--cache-dir', cache, *opts, '--imagefolder-build-memory',
                 '4K', src, mnt], files=True)
    r.stderr = r.stderr.decode(errors='replace')
    log('full, runs: %d %r' % (r.returncode, r.stderr))
    if r.returncode == 0:
        env.run([env.shardfs, 'umount', mnt])
    ck.ok(r.returncode != 0 and 'No space left on device' in r.stderr and
          'is full' in r.stderr and '--imagefolder-build-memory' in r.stderr,
          'full, runs: the mount fails and says why (%d, %r)' % (r.returncode, r.stderr[-300:]))
    ck.eq('full, runs: no temp file left', temp_files(cache), [])
    with ml.Mount(env, src, cache_dir=cache, extra=opts) as m:
        check_view(ck, 'full, in memory', m.mnt, want)
        st = counters(m.stats())
        ck.eq('full, in memory: not saved, in the heap',
              (st['view_saved'], st['view_mapped'], st['view_loaded']), (0, 0, 0))
    ck.eq('full, in memory: no temp file left', temp_files(cache), [])
    ck.eq('full, in memory: no view saved', view_blob(cache), [])


GROUPS = {'persist': (group_persist, 240), 'change': (group_change, 240),
          'damaged': (group_damaged, 600), 'clean': (group_clean, 240),
          'share': (group_share, 240), 'runs': (group_runs, 240), 'full': (group_full, 240),
          'live': (group_live, 240), 'race': (group_race, 240),
          'lookups': (group_lookups, 240)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
