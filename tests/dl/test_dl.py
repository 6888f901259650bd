"""Deep-learning tests of shardfs: --layout imagefolder against torchvision, shardfs
pack, sidecar indexes, extended attributes, and the PyTorch examples.

Run: test_dl.py SHARDFS GROUP  (groups: imagefolder classfrom clsgaps pack packsafe sidecar
xattr examples)
Uses the test toolkit (tests/lib/shardfs_test: mount, dl). torch/torchvision/Pillow come from
Debian (python3-torchvision, python3-pil, python3-numpy; scripts/install-deps.sh --test). Groups
that need them exit 77 (skip) when they are missing, except in CI (CI=true), where that fails.
"""

import io
import os
import random
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import Mount, log  # noqa: E402
from shardfs_test.dl import (CLASSES, dataset_digest, epoch_rate, make_tree,  # noqa: E402
                             need_torch)

EXAMPLES = os.path.join(HERE, '..', '..', 'examples')


def pack(env, args, check=True):
    r = env.run([env.shardfs, 'pack'] + args, timeout=120)
    if check and r.returncode != 0:
        raise RuntimeError('pack failed: %s' % r.stderr.decode(errors='replace'))
    return r


def add_tar_member(tf, name, data, mtime=1700000000):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = mtime
    tf.addfile(ti, io.BytesIO(data))


def sidecar_content(data):
    """A sidecar index without what names one file: the header's counts and the sections
    (shardidx_save.c's layout) but the identity, of which only codec, size and the checksum of
    the shard's tail (not its mtime and inode)."""
    import struct
    secs = [struct.unpack_from('<QQ', data, 96 + 16 * i) for i in range(7)]
    ident = data[secs[0][0]:secs[0][0] + secs[0][1]].split(b'|')
    return (data[:8], data[32:60], data[64:96], ident[:5],
            [data[o:o + n] for o, n in secs[1:]])


def read(path):
    with open(path, 'rb') as f:
        return f.read()


# ---------------------------------------------------------------------------------------------

def t_imagefolder(env, ck):
    """pack a class-folder tree, mount --layout imagefolder: torchvision sees the same data."""
    need_torch()
    tree, out = env.path('tree'), env.path('shards')
    make_tree(tree)
    os.makedirs(out)
    pack(env, ['--max-count', '7', tree, os.path.join(out, 'train')])
    # one extra shard with a sample without an image and one without a class
    with tarfile.open(os.path.join(out, 'zz-extra.tar'), 'w', format=tarfile.USTAR_FORMAT) as tf:
        add_tar_member(tf, 'noimg.cls', b'1')
        add_tar_member(tf, 'noimg.txt', b'hello')
        add_tar_member(tf, 'nocls.jpg', read(os.path.join(tree, 'ant', 'img001.jpg')))
    with Mount(env, out, cache_dir=env.path('cache'),
               extra=['--layout', 'imagefolder', '--log-file', env.path('log')]) as m:
        names = sorted(os.listdir(m.mnt))
        ck.eq('class dirs', names, ['%02d' % i for i in range(len(CLASSES))])
        ds_m, counts_m, pix_m = dataset_digest(m.mnt)
        ds_t, counts_t, pix_t = dataset_digest(tree)
        ck.eq('number of classes', len(ds_m.classes), len(ds_t.classes))
        ck.eq('class_to_idx is the .cls integer',
              {c: int(c) for c in ds_m.classes}, ds_m.class_to_idx)
        ck.eq('samples per class', counts_m, counts_t)
        ck.eq('pixels per label', pix_m, pix_t)
        # the file bytes too
        for c in ds_t.classes:
            idx = ds_t.class_to_idx[c]
            for f in sorted(os.listdir(os.path.join(tree, c))):
                want = read(os.path.join(tree, c, f))
                got = os.path.join(m.mnt, '%02d' % idx, '%s_%s' % (c, f))
                ck.ok(os.path.exists(got) and read(got) == want, 'bytes of %s' % got)
        st = m.stats()
        ck.eq('layout in stats', st.get('layout'), 'imagefolder')
        ck.eq('imagefolder_images', st.get('imagefolder_images'), len(CLASSES) * 5)
        ck.eq('imagefolder_no_image', st.get('imagefolder_no_image'), 1)
        ck.eq('imagefolder_no_class', st.get('imagefolder_no_class'), 1)
        ck.eq('shards indexed for the view', st.get('imagefolder_shards_indexed'),
              len([n for n in os.listdir(out) if n.endswith('.tar')]))
        ck.ok(os.path.exists(os.path.join(m.mnt, '.shardfs', 'stats')), '.shardfs reachable')
        ck.ok('.shardfs' not in names, '.shardfs not listed')
        # warm epoch rate, mount vs tree (reported, not asserted)
        epoch_rate(m.mnt)
        rm, rt = epoch_rate(m.mnt), epoch_rate(tree)
        log('epoch (DataLoader, 2 workers, warm): mount %.0f samples/s, tree %.0f samples/s, '
            'ratio %.2f' % (rm, rt, rm / rt))
        ck.eq('.cls members read', st.get('imagefolder_cls_reads'), len(CLASSES) * 5)
        listing = {c: sorted(os.listdir(os.path.join(m.mnt, c))) for c in names}
    logtext = read(env.path('log')).decode(errors='replace')
    ck.ok('imagefolder: indexing' in logtext, 'log says the shards are indexed: ' + logtext[-500:])
    # again on the same cache directory: the classes come from the cache, no .cls is read
    with Mount(env, out, cache_dir=env.path('cache'), extra=['--layout', 'imagefolder']) as m:
        again = {c: sorted(os.listdir(os.path.join(m.mnt, c))) for c in os.listdir(m.mnt)}
        ck.eq('same view on the second mount', again, listing)
        st = m.stats()
        ck.eq('.cls members read on the second mount', st.get('imagefolder_cls_reads'), 0)
        ck.eq('no shard bytes scanned', st.get('index_bytes_scanned'), 0)


def t_classfrom(env, ck):
    """--class-from dir and key-prefix on suitable shards; collisions get unique names."""
    need_torch()
    tree, out = env.path('tree'), env.path('shards')
    classes = ['zebra', 'ant', 'Bee', 'cat', 'dog']
    make_tree(tree, classes=classes, per_class=4, seed=2)
    os.makedirs(out)
    # dir: members train/<class>/<file> written with tarfile, two shards
    files = sorted((c, f) for c in classes for f in os.listdir(os.path.join(tree, c)))
    for s in range(2):
        with tarfile.open(os.path.join(out, 'd-%06d.tar' % s), 'w') as tf:
            for c, f in files[s::2]:
                add_tar_member(tf, 'train/%s/%s' % (c, f), read(os.path.join(tree, c, f)))
    with Mount(env, out, cache_dir=env.path('cache1'),
               extra=['--layout', 'imagefolder', '--class-from', 'dir']) as m:
        ck.eq('dir classes', sorted(os.listdir(m.mnt)), sorted(classes))
        _, counts_m, pix_m = dataset_digest(m.mnt)
        _, counts_t, pix_t = dataset_digest(tree)
        ck.eq('dir: samples per class', counts_m, counts_t)
        ck.eq('dir: pixels per label', pix_m, pix_t)
    # key-prefix: pack's keys are <class>_<name>
    out2 = env.path('shards2')
    os.makedirs(out2)
    pack(env, ['--max-count', '5', '--shuffle', '7', tree, os.path.join(out2, 'k')])
    # a second copy of one sample in another shard: same key, must get a unique name
    with tarfile.open(os.path.join(out2, 'z-dup.tar'), 'w') as tf:
        add_tar_member(tf, 'cat_img000.png', read(os.path.join(tree, 'cat', 'img000.png')))
    with Mount(env, out2, cache_dir=env.path('cache2'),
               extra=['--layout', 'imagefolder', '--class-from', 'key-prefix']) as m:
        ck.eq('key-prefix classes', sorted(os.listdir(m.mnt)), sorted(classes))
        cat = sorted(os.listdir(os.path.join(m.mnt, 'cat')))
        ck.eq('duplicate key gets a shard suffix', len(cat), 5)
        ck.ok('cat_img000.png' in cat and 'cat_img000~z-dup.png' in cat, 'names: %r' % cat)
        names_again = sorted(os.listdir(os.path.join(m.mnt, 'cat')))
        ck.eq('names are stable', names_again, cat)
        _, counts_m, _ = dataset_digest(m.mnt)
        ck.eq('key-prefix: samples per class', counts_m,
              {i: 4 + (c == 'cat') for i, c in enumerate(sorted(classes))})


def gap_shards(out, values, per=3, seed=5):
    """Two shards of samples key.jpg + key.cls whose .cls integers are values (each per
    times, keys in a seeded order); returns {label: number of samples}."""
    rng = random.Random(seed)
    log('clsgaps: seed %d' % seed)
    keys = ['g%03d' % i for i in range(len(values) * per)]
    rng.shuffle(keys)
    counts = {}
    for s in range(2):
        with tarfile.open(os.path.join(out, 'g-%06d.tar' % s), 'w') as tf:
            for i, k in enumerate(keys[s::2]):
                v = values[(keys.index(k)) % len(values)]
                counts[v] = counts.get(v, 0) + 1
                add_tar_member(tf, k + '.jpg', b'\xff\xd8 label %d key %s' % (v, k.encode()))
                add_tar_member(tf, k + '.cls', b'%d' % v)
    return counts


def torch_view(root):
    """What torchvision makes of root: its class_to_idx, and per label the samples whose bytes
    name another label (ImageFolder's samples with a loader that returns the bytes), or the
    error ImageFolder raises."""
    from torchvision.datasets import folder
    _, class_to_idx = folder.find_classes(root)
    try:
        ds = folder.ImageFolder(root, loader=read, is_valid_file=lambda p: p.endswith('.jpg'))
    except FileNotFoundError as e:
        return class_to_idx, None, str(e)
    wrong = {}
    for i in range(len(ds)):
        data, y = ds[i]
        if b' label %d ' % y not in data:
            wrong[y] = wrong.get(y, 0) + 1
    return class_to_idx, wrong, None


def t_clsgaps(env, ck):
    """.cls values 0, 1, 3 (no 2): the mount is refused, saying the missing value, where
    torchvision would give class 3 the label 2; a remount from the saved view too;
    --class-gaps empty shows an empty directory '2', so the labels are the .cls integers."""
    need_torch()
    out = env.path('shards')
    os.makedirs(out)
    counts = gap_shards(out, [0, 1, 3])
    mnt, cache = env.path('mnt'), env.path('cache')
    os.makedirs(mnt)
    for label in ('mount', 'remount from the saved view'):
        r = env.run([env.shardfs, 'mount', '--cache-dir', cache, '--layout', 'imagefolder',
                     out, mnt], timeout=120, files=True)
        err = r.stderr.decode(errors='replace')
        log('clsgaps: %s: %d %r' % (label, r.returncode, err))
        if r.returncode == 0:
            env.run([env.shardfs, 'umount', mnt])
        ck.ok(r.returncode != 0 and 'not 0..3: 1 missing (2)' in err and
              '--class-gaps empty' in err,
              '%s: refused, naming the missing value (%d, %r)' % (label, r.returncode, err[-400:]))
    with Mount(env, out, mountpoint=mnt, cache_dir=cache,
               extra=['--layout', 'imagefolder', '--class-gaps', 'empty']) as m:
        ck.eq('empty: class directories', sorted(os.listdir(m.mnt)), ['0', '1', '2', '3'])
        ck.eq('empty: class 2 is empty', os.listdir(os.path.join(m.mnt, '2')), [])
        ck.eq('empty: files per class',
              {int(c): len(os.listdir(os.path.join(m.mnt, c))) for c in os.listdir(m.mnt)},
              {0: counts[0], 1: counts[1], 2: 0, 3: counts[3]})
        class_to_idx, wrong, error = torch_view(m.mnt)
        ck.eq('empty: class_to_idx equals the .cls integers', class_to_idx,
              {'0': 0, '1': 1, '2': 2, '3': 3})
        # torchvision before 0.18 refuses a class without files (FileNotFoundError naming
        # it); with allow_empty or later ones the labels are exact
        ck.ok(wrong == {} or (error is not None and 'classes 2' in error),
              'empty: ImageFolder names the empty class or labels every sample right '
              '(%r, %r)' % (wrong, error))
    # the same values without a gap: mounts as before, labels exact
    out2 = env.path('shards2')
    os.makedirs(out2)
    gap_shards(out2, [0, 1, 2])
    with Mount(env, out2, cache_dir=env.path('cache2'), extra=['--layout', 'imagefolder']) as m:
        class_to_idx, wrong, error = torch_view(m.mnt)
        ck.eq('no gap: class_to_idx', class_to_idx, {'0': 0, '1': 1, '2': 2})
        ck.eq('no gap: every sample under its .cls label', (wrong, error), ({}, None))


def t_pack(env, ck):
    """pack -> mount (shards) -> every file byte for byte; deterministic; --max-count."""
    rng = random.Random(env.seed)
    tree = env.path('tree')
    files = {}
    for i in range(23):
        d = rng.choice(['', 'a', 'a/b', 'c d'])
        key = 'sample%03d' % i
        for ext in rng.sample(['jpg', 'json', 'txt', 'seg.png', 'bin'], rng.randint(1, 3)):
            rel = os.path.join(d, '%s.%s' % (key, ext)) if d else '%s.%s' % (key, ext)
            data = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 511, 512, 513, 3000])))
            files[rel] = data
    files['README'] = b'not a sample of anything\n'
    for rel, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(tree, rel)) or tree, exist_ok=True)
        with open(os.path.join(tree, rel), 'wb') as f:
            f.write(data)
        os.utime(os.path.join(tree, rel), (1600000000, 1600000000))
    nsamples = len({(os.path.dirname(r), os.path.basename(r).split('.')[0]) for r in files})
    out = env.path('out')
    os.makedirs(out)
    for comp in ['', 'zstd', 'gzip']:
        sub = os.path.join(out, comp or 'raw')
        os.makedirs(sub)
        args = ['--max-count', '4'] + (['--compress', comp] if comp else [])
        pack(env, args + [tree, os.path.join(sub, 'p')])
        ext = {'': '.tar', 'zstd': '.tar.zst', 'gzip': '.tar.gz'}[comp]
        shards = sorted(n for n in os.listdir(sub) if n.endswith(ext))
        ck.eq('%s: shard count' % (comp or 'raw'), len(shards), (nsamples + 3) // 4)
        ck.ok(all(os.path.exists(os.path.join(sub, s + '.idx')) for s in shards),
              '%s: a sidecar beside every shard' % (comp or 'raw'))
        with Mount(env, sub, cache_dir=env.path('cache-' + (comp or 'raw'))) as m:
            found = {}
            per_shard = []
            for s in shards:
                d = os.path.join(m.mnt, s[:-len(ext)])
                keys = set()
                for dp, _, fns in os.walk(d):
                    for fn in fns:
                        rel = os.path.relpath(os.path.join(dp, fn), d)
                        found[rel] = read(os.path.join(dp, fn))
                        keys.add((os.path.dirname(rel), fn.split('.')[0]))
                per_shard.append(len(keys))
            ck.eq('%s: files byte for byte' % (comp or 'raw'), found, files)
            ck.eq('%s: samples per shard' % (comp or 'raw'), per_shard,
                  [4] * (nsamples // 4) + ([nsamples % 4] if nsamples % 4 else []))
            st = m.stats()
            ck.eq('%s: indexes from sidecars' % (comp or 'raw'), st.get('index_sidecar'),
                  len(shards))
    # determinism: same seed twice -> identical bytes; another seed -> another order
    for tag, seed in [('s1', '42'), ('s2', '42'), ('s3', '43')]:
        os.makedirs(os.path.join(out, tag))
        pack(env, ['--max-count', '5', '--shuffle', seed, tree, os.path.join(out, tag, 'p')])
    a = sorted(os.listdir(os.path.join(out, 's1')))
    ck.eq('same seed: same files', sorted(os.listdir(os.path.join(out, 's2'))), a)
    for n in a:
        x, y = read(os.path.join(out, 's1', n)), read(os.path.join(out, 's2', n))
        if n.endswith('.idx'):  # a sidecar names its shard file (mtime, inode): the rest
            x, y = sidecar_content(x), sidecar_content(y)
        ck.ok(x == y, 'same seed: identical %s of %s' % (
            'index and shard identity' if n.endswith('.idx') else 'bytes', n))
    ck.ok(any(read(os.path.join(out, 's1', n)) != read(os.path.join(out, 's3', n)) for n in a
              if n.endswith('.tar')), 'another seed: another order')
    # --max-size: every shard within the limit (a sample larger than it gets a shard alone)
    os.makedirs(os.path.join(out, 'ms'))
    pack(env, ['--max-size', '16K', tree, os.path.join(out, 'ms', 'p')])
    sizes = [os.path.getsize(os.path.join(out, 'ms', n)) for n in os.listdir(os.path.join(out, 'ms'))
             if n.endswith('.tar')]
    ck.ok(len(sizes) > 1 and all(s <= 16384 for s in sizes), '--max-size 16K: %r' % sizes)
    # refuses to overwrite without --force
    r = pack(env, [tree, os.path.join(out, 's1', 'p')], check=False)
    ck.ok(r.returncode != 0 and b'--force' in r.stderr, 'refuses to overwrite: %r' % r.stderr)
    r = pack(env, ['--force', '--max-count', '5', '--shuffle', '42', tree,
                   os.path.join(out, 's1', 'p')], check=False)
    ck.eq('--force overwrites', r.returncode, 0)
    ck.ok(read(os.path.join(out, 's1', a[0])) == read(os.path.join(out, 's2', a[0])),
          'rewritten with --force: still identical')
    # class-folder tree: .cls in sorted class-name order
    ctree = env.path('ctree')
    for c, fn in [('b', 'x.jpg'), ('B', 'y.png'), ('a', 'z.jpg')]:
        os.makedirs(os.path.join(ctree, c), exist_ok=True)
        with open(os.path.join(ctree, c, fn), 'wb') as f:
            f.write(c.encode() * 10)
    pack(env, [ctree, os.path.join(out, 'cls')])
    with tarfile.open(os.path.join(out, 'cls-000000.tar')) as tf:
        got = {ti.name: tf.extractfile(ti).read() for ti in tf.getmembers()}
    ck.eq('class-folder members', got, {'B_y.png': b'B' * 10, 'B_y.cls': b'0',
                                        'a_z.jpg': b'a' * 10, 'a_z.cls': b'1',
                                        'b_x.jpg': b'b' * 10, 'b_x.cls': b'2'})


def t_sidecar(env, ck):
    """Sidecars are used (no shard bytes read), stale or corrupt ones are ignored and logged."""
    out = env.path('shards')
    os.makedirs(out)
    for s in range(3):
        with tarfile.open(os.path.join(out, 's-%06d.tar' % s), 'w') as tf:
            for i in range(5):
                add_tar_member(tf, 'k%d_%d.txt' % (s, i), b'x' * (100 * i + s))
                add_tar_member(tf, 'k%d_%d.cls' % (s, i), b'%d' % i)
    r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('c0'), out])
    ck.eq('index --sidecar rc', r.returncode, 0)
    ck.ok(all(os.path.exists(os.path.join(out, 's-%06d.tar.idx' % s)) for s in range(3)),
          'sidecars written')
    with Mount(env, out, cache_dir=env.path('c1')) as m:
        n = sum(len(os.listdir(os.path.join(m.mnt, 's-%06d' % s))) for s in range(3))
        ck.eq('members listed', n, 30)
        st = m.stats()
        ck.eq('index_sidecar', st.get('index_sidecar'), 3)
        ck.eq('index_bytes_scanned', st.get('index_bytes_scanned'), 0)
        ck.eq('index_built', st.get('index_built'), 0)
        ck.eq('member bytes', read(os.path.join(m.mnt, 's-000001', 'k1_3.txt')), b'x' * 301)
    # corrupt one, make another stale (the sidecar of a different shard)
    p0 = os.path.join(out, 's-000000.tar.idx')
    b = bytearray(read(p0))
    b[len(b) // 2] ^= 0xff
    with open(p0, 'wb') as f:
        f.write(b)
    with open(os.path.join(out, 's-000001.tar.idx'), 'wb') as f:
        f.write(read(os.path.join(out, 's-000002.tar.idx')))
    logp = env.path('log2')
    with Mount(env, out, cache_dir=env.path('c2'), extra=['--log-file', logp]) as m:
        for s in range(3):
            got = sorted(os.listdir(os.path.join(m.mnt, 's-%06d' % s)))
            ck.eq('listing of s-%06d' % s, got,
                  sorted('k%d_%d.%s' % (s, i, e) for i in range(5) for e in ('txt', 'cls')))
        ck.eq('rebuilt member bytes', read(os.path.join(m.mnt, 's-000001', 'k1_4.txt')),
              b'x' * 401)
        st = m.stats()
        ck.eq('index_sidecar', st.get('index_sidecar'), 1)
        ck.eq('index_sidecar_rejected', st.get('index_sidecar_rejected'), 2)
        ck.eq('index_built', st.get('index_built'), 2)
    text = read(logp).decode(errors='replace')
    ck.ok('s-000000.tar.idx ignored' in text, 'corrupt sidecar logged: ' + text[-600:])
    ck.ok('s-000001.tar.idx ignored (stale' in text, 'stale sidecar logged: ' + text[-600:])


def t_xattr(env, ck):
    out = env.path('shards')
    os.makedirs(out)
    with tarfile.open(os.path.join(out, 's-000000.tar'), 'w') as tf:
        add_tar_member(tf, 'a_1.jpg', b'\xff\xd8' + b'j' * 700)
        add_tar_member(tf, 'a_1.cls', b'3')
    data = read(os.path.join(out, 's-000000.tar'))
    with Mount(env, out, cache_dir=env.path('c'), extra=['--xattr']) as m:
        p = os.path.join(m.mnt, 's-000000', 'a_1.jpg')
        ck.eq('listxattr', sorted(os.listxattr(p)),
              sorted(['user.shardfs.shard', 'user.shardfs.offset', 'user.shardfs.size',
                      'user.shardfs.key']))
        off = int(os.getxattr(p, 'user.shardfs.offset'))
        size = int(os.getxattr(p, 'user.shardfs.size'))
        ck.eq('shard', os.getxattr(p, 'user.shardfs.shard'), b's-000000.tar')
        ck.eq('key', os.getxattr(p, 'user.shardfs.key'), b'a_1')
        ck.eq('offset/size locate the bytes', data[off:off + size], read(p))
        ck.eq('no xattrs on a directory', os.listxattr(os.path.join(m.mnt, 's-000000')), [])
        try:
            os.getxattr(p, 'user.other')
            ck.fail('unknown xattr should fail')
        except OSError as e:
            ck.eq('unknown xattr errno', e.errno, 61)  # ENODATA
    # the one class is 3: 0..2 shown as empty classes (a gap is refused by default)
    with Mount(env, out, cache_dir=env.path('c'),
               extra=['--layout', 'imagefolder', '--xattr', '--class-gaps', 'empty']) as m:
        p = os.path.join(m.mnt, '3', 'a_1.jpg')
        ck.eq('view file xattr', os.getxattr(p, 'user.shardfs.shard'), b's-000000.tar')
    with Mount(env, out, cache_dir=env.path('c'), extra=['--no-xattr']) as m:
        p = os.path.join(m.mnt, 's-000000', 'a_1.jpg')
        for what, call in (('getxattr', lambda: os.getxattr(p, 'user.shardfs.shard')),
                           ('listxattr', lambda: os.listxattr(p)),
                           ('getxattr again', lambda: os.getxattr(p, 'security.selinux'))):
            try:
                call()
                ck.fail('--no-xattr: %s should fail' % what)
            except OSError as e:
                ck.eq('--no-xattr: %s errno' % what, e.errno, 95)  # EOPNOTSUPP
        r = env.run(['ls', '-l', os.path.join(m.mnt, 's-000000')])
        ck.eq('--no-xattr: ls -l lists both members',
              sorted(ln.split()[-1] for ln in r.stdout.splitlines()[1:]), [b'a_1.cls', b'a_1.jpg'])
        ck.eq('--no-xattr: bytes', read(p), b'\xff\xd8' + b'j' * 700)


def t_examples(env, ck):
    """The runnable PyTorch examples, on a small generated dataset."""
    need_torch()
    tree, out = env.path('tree'), env.path('shards')
    make_tree(tree, classes=CLASSES[:4], per_class=8, seed=3)
    os.makedirs(out)
    pack(env, ['--max-count', '8', '--shuffle', '1', tree, os.path.join(out, 'train')])
    py = sys.executable
    with Mount(env, out, cache_dir=env.path('c1'), extra=['--layout', 'imagefolder']) as m:
        r = env.run([py, os.path.join(EXAMPLES, 'pytorch_imagefolder_train.py'), m.mnt,
                     '--epochs', '2', '--workers', '2'], timeout=240)
        log(r.stdout.decode(errors='replace') + r.stderr.decode(errors='replace')[-2000:])
        ck.eq('pytorch_imagefolder_train.py rc', r.returncode, 0)
    with Mount(env, out, cache_dir=env.path('c2'), extra=['--xattr']) as m:
        r = env.run([py, os.path.join(EXAMPLES, 'pytorch_shard_sampler.py'), m.mnt,
                     '--epochs', '1', '--workers', '2'], timeout=240)
        log(r.stdout.decode(errors='replace') + r.stderr.decode(errors='replace')[-2000:])
        ck.eq('pytorch_shard_sampler.py rc', r.returncode, 0)


def t_packsafe(env, ck):
    """pack does not follow symbolic links (to a file outside the tree, to a directory): each
    is skipped, named on stderr and counted in the summary, and no member holds its target's
    bytes; an OUTPUT_PREFIX whose directory is missing is refused (exit 2), nothing created."""
    tree, outside = env.path('tree'), env.path('outside')
    os.makedirs(os.path.join(tree, 'a'))
    os.makedirs(os.path.join(outside, 'd'))
    secret = b'root:x:0:0:secret outside the tree\n'
    with open(os.path.join(outside, 'passwd'), 'wb') as f:
        f.write(secret)
    with open(os.path.join(outside, 'd', 'x.txt'), 'wb') as f:
        f.write(secret)
    files = {'s1.jpg': b'one', 'a/s2.jpg': b'two'}
    for rel, data in files.items():
        with open(os.path.join(tree, rel), 'wb') as f:
            f.write(data)
    links = {'s3.jpg': os.path.join(outside, 'passwd'), 'a/s4.txt': '/etc/passwd',
             'dir': os.path.join(outside, 'd')}
    for rel, target in links.items():
        os.symlink(target, os.path.join(tree, rel))
    out = env.path('out')
    os.makedirs(out)
    r = pack(env, [tree, os.path.join(out, 'p')], check=False)
    err, so = r.stderr.decode(errors='replace'), r.stdout.decode(errors='replace')
    log('pack: rc=%r stdout=%r stderr=%r' % (r.returncode, so, err))
    ck.eq('links: exit', r.returncode, 0)
    for rel in links:
        ck.ok(os.path.join(tree, rel) + ': a symbolic link, skipped' in err,
              'links: %s not named on stderr: %r' % (rel, err))
    ck.eq('links: summary', so,
          'packed 2 files in 2 samples into 1 shard; 3 symbolic links skipped\n')
    with tarfile.open(os.path.join(out, 'p-000000.tar')) as tf:
        got = {ti.name: tf.extractfile(ti).read() for ti in tf.getmembers() if ti.isfile()}
    ck.eq('links: members', got, files)
    # a missing output directory: refused before anything is read or written
    for prefix in (os.path.join(out, 'nodir', 'p'), os.path.join(out, 'no', 'such', 'p')):
        r = pack(env, [tree, prefix], check=False)
        err = r.stderr.decode(errors='replace')
        log('pack to %s: rc=%r stderr=%r' % (prefix, r.returncode, err))
        ck.eq('missing output dir %s: exit' % prefix, r.returncode, 2)
        ck.ok('output directory %s: No such file or directory' % os.path.dirname(prefix) in err,
              'missing output dir: no reason: %r' % err)
        ck.ok(not os.path.exists(os.path.dirname(prefix)),
              'missing output dir %s: created' % os.path.dirname(prefix))
    ck.eq('nothing else written', sorted(os.listdir(out)), ['p-000000.tar', 'p-000000.tar.idx'])


GROUPS = {'packsafe': t_packsafe, 'imagefolder': t_imagefolder, 'classfrom': t_classfrom,
          'clsgaps': t_clsgaps,
          'pack': t_pack,
          'sidecar': t_sidecar, 'xattr': t_xattr, 'examples': t_examples}

if __name__ == '__main__':
    if len(sys.argv) != 3 or sys.argv[2] not in GROUPS:
        print('usage: test_dl.py SHARDFS {%s}' % '|'.join(GROUPS), file=sys.stderr)
        sys.exit(2)
    ml.main_wrapper(GROUPS[sys.argv[2]], sys.argv[1], 'dl-' + sys.argv[2], deadline=280)
