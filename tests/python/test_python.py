#!/usr/bin/python3
"""Tests of the Python module (python/shardfs, imported through PYTHONPATH as meson sets it).

usage: test_python.py SHARDFS GROUP
GROUP:
  sampler-local  a class-folder tree packed and mounted with --layout imagefolder from a local
                 directory: DataLoader(shuffle=True, num_workers=2) with plan_dataloader: the
                 plan the mount holds is the sampler's order exactly (paths, FNV-1a of the
                 order), every image read hits the plan once (plan_hits, position), the epoch's
                 batches are identical to the same DataLoader without the wrapper (same seed);
                 a second epoch replaces the plan with its new order; each path encoded for the
                 plan file when the sampler is made, none in its epochs; PlanSampler over a plain
                 list of paths and a Subset; find_mountpoint
  sampler-http   the same through nginx
  manifest       read_samples against tarfile for every member of the formats dataset (every
                 tar flavour, sparse, hardlinks, compressed shards) and of names with tab,
                 newline, CR, backslash, control bytes and a byte that is not UTF-8: each
                 record's fields, its bytes through its path, and for plain shards the bytes
                 at its offset in the shard file
  noplans        plan_dataloader on a DataLoader of numbers, or of files outside any mount: a
                 warning, the loader unchanged; strict=True: ValueError
  plan-early     plan_dataloader publishes each epoch's order before the DataLoader starts its
                 worker processes (the mount holds the epoch's plan as each worker is started:
                 a multiprocessing context that looks at .shardfs/plans in Process.start), and
                 the epoch yields exactly the order published, the same order as the loader
                 without plans (seeded by SHARDFS_TEST_SEED, 3 epochs each): shuffle=True,
                 persistent workers, a loader's own generator, DistributedSampler with
                 set_epoch, a BatchSampler of its own, num_workers=0; two iter() at once; a
                 publication that fails (a warning; strict: the error before any worker starts)
  pickle         a DataLoader wrapped by plan_dataloader survives pickle.dumps/loads (every
                 protocol) and copy.deepcopy: the same planned class (still named DataLoader),
                 its PlanSampler inside its batch sampler, and an epoch of the copy with
                 multiprocessing_context='spawn' (2 workers) yields the order it published, the
                 same as the loader without plans (same seed). Before (python/shardfs at
                 c2d2565): PicklingError, the planned subclass shared DataLoader's name
  read           the FUSE requests a sample's read costs, by the daemon's counters, on a local
                 source's mount (the shards view, every directory listed first): 12 seeded JPEGs
                 of up to 128 KiB and raw members of the sizes where pages end (1 B to 128 KiB)
                 read once each by shardfs.read_bytes, shardfs.pil_loader,
                 torchvision.io.read_file (a mapped read) and Python's open(p, 'rb').read():
                 exactly one READ a sample, no IOCTL but one a buffered open() (its isatty()),
                 no LOOKUP, GETATTR, OPEN, RELEASE, FLUSH or GETXATTR; the exact bytes, and
                 pil_loader's image equal to torchvision's default loader's
  install        pip install --no-build-isolation --no-index of a copy of python/ into a target
                 directory (Debian's setuptools, offline): the installed module imports

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse; torchvision missing outside CI).
"""

import sys
sys.dont_write_bytecode = True

import io  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tarfile  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import shardgen  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.dl import CLASSES, make_tree, need_torch  # noqa: E402
from shardfs_test.mount import log  # noqa: E402
from shardfs_test.tarref import expected_tsv_rows, open_tar, reference  # noqa: E402

import shardfs  # noqa: E402  (PYTHONPATH=python, set by tests/python/meson.build)

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'python')


def read(path):
    with open(path, 'rb') as f:
        return f.read()


def pack_tree(env):
    tree, out = env.path('tree'), env.path('shards')
    make_tree(tree, classes=CLASSES[:6], per_class=8, seed=5)
    os.makedirs(out)
    r = env.run([env.shardfs, 'pack', '--max-count', '7', '--shuffle', '1', tree,
                 os.path.join(out, 'train')], timeout=120)
    if r.returncode != 0:
        raise RuntimeError('pack failed: %s' % r.stderr.decode(errors='replace'))
    return out


def epoch(dl):
    return [(x.clone(), y.clone()) for x, y in dl]


def check_sampler(env, ck, mnt, label):
    import torch
    from torchvision import datasets, transforms
    ds = datasets.ImageFolder(mnt, transform=transforms.PILToTensor())
    n = len(ds)
    ck.eq('%s: images' % label, n, 48)
    mp, paths = shardfs.dataset_paths(ds)
    ck.eq('%s: dataset_paths finds the mount' % label, mp, mnt)
    ck.eq('%s: dataset_paths are mount-relative' % label, paths,
          [os.path.relpath(p, mnt) for p, _ in ds.samples])
    ck.eq('%s: find_mountpoint of a file' % label, shardfs.find_mountpoint(ds.samples[0][0]), mnt)
    torch.manual_seed(1234)
    dl = torch.utils.data.DataLoader(ds, batch_size=5, shuffle=True, num_workers=2)
    # each path is encoded for the plan file once, when the sampler is made, not every epoch
    encoded = [0]
    relative = shardfs._mount_relative

    def counted(mountpoint, p):
        encoded[0] += 1
        return relative(mountpoint, p)

    shardfs._mount_relative = counted
    ps = shardfs.plan_dataloader(dl)
    at_init = encoded[0]
    name = 'pid-%d' % os.getpid()
    got = epoch(dl)
    in_epochs = encoded[0] - at_init
    order = ps.last_indices
    ck.eq('%s: the sampler drew a permutation' % label, sorted(order), list(range(n)))
    pl = shardfs.plans(mnt)
    ck.eq('%s: one plan, named after this process' % label, sorted(pl), [name])
    info = pl[name]
    ck.eq('%s: plan paths, missing' % label, (info.paths, info.missing), (n, 0))
    ck.eq('%s: the plan is the sampler\'s order (FNV-1a)' % label, info.fnv,
          shardfs.plan_fnv([paths[i] for i in order]))
    ck.eq('%s: last_plan' % label, ps.last_plan and ps.last_plan.fnv, info.fnv)
    ck.eq('%s: labels delivered in plan order' % label,
          [int(v) for _, y in got for v in y], [ds.samples[i][1] for i in order])
    st = shardfs_stats(mnt)
    ck.eq('%s: every image read hit the plan once' % label, st['plan_hits'], n)
    ck.eq('%s: plan read, position' % label, (info.read, info.position), (n, n))
    ck.eq('%s: plan_bytes: the images\' sizes' % label, st['plan_bytes'],
          sum(os.path.getsize(p) for p, _ in ds.samples))
    # the same DataLoader without the wrapper, same seed: the same batches
    torch.manual_seed(1234)
    plain = epoch(torch.utils.data.DataLoader(ds, batch_size=5, shuffle=True, num_workers=2))
    ck.eq('%s: batches without the wrapper' % label, len(plain), len(got))
    ck.ok(all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, plain)),
          '%s: the epoch is identical to the one without the wrapper' % label)
    # a second epoch: a new order replaces the plan
    before = encoded[0]
    got2 = epoch(dl)
    in_epochs += encoded[0] - before
    shardfs._mount_relative = relative
    order2 = ps.last_indices
    ck.ok(order2 != order and sorted(order2) == list(range(n)), '%s: a new permutation' % label)
    pl = shardfs.plans(mnt)
    ck.eq('%s: still one plan' % label, sorted(pl), [name])
    ck.eq('%s: the second epoch\'s order' % label, pl[name].fnv,
          shardfs.plan_fnv([paths[i] for i in order2]))
    ck.eq('%s: labels of epoch 2' % label, [int(v) for _, y in got2 for v in y],
          [ds.samples[i][1] for i in order2])
    ck.eq('%s: plans_published' % label, shardfs_stats(mnt)['plans_published'], 2)
    ck.eq('%s: paths encoded when the sampler was made, and in its two epochs' % label,
          (at_init, in_epochs), (2 * n, 0))
    # PlanSampler over a plain list of absolute paths, and a Subset
    abs_paths = [p for p, _ in ds.samples]
    lp = shardfs.PlanSampler(torch.utils.data.SequentialSampler(abs_paths), abs_paths,
                             name='list')
    ck.eq('%s: PlanSampler yields the wrapped order' % label, list(lp), list(range(n)))
    ck.eq('%s: plan of a path list' % label, shardfs.plans(mnt)['list'].fnv,
          shardfs.plan_fnv(paths))
    sub = torch.utils.data.Subset(ds, [3, 1, 4])
    ck.eq('%s: dataset_paths of a Subset' % label, shardfs.dataset_paths(sub)[1],
          [paths[3], paths[1], paths[4]])
    shardfs.clear_plan(mnt, 'list')
    shardfs.clear_plan(mnt)
    ck.eq('%s: plans cleared' % label, shardfs.plans(mnt), {})
    try:
        shardfs.find_mountpoint('/')
        ck.fail('find_mountpoint(/) found a mount')
    except ValueError:
        pass


def shardfs_stats(mnt):
    import json
    return json.loads(read(os.path.join(mnt, '.shardfs', 'stats')))


def group_sampler_local(env, ck):
    need_torch()
    out = pack_tree(env)
    with ml.Mount(env, out, cache_dir=env.path('cache'), extra=['--layout', 'imagefolder']) as m:
        check_sampler(env, ck, m.mnt, 'local')


def group_sampler_http(env, ck):
    need_torch()
    out = pack_tree(env)
    ng = web.Nginx(env.path('nginx'), out).start()
    try:
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                      extra=['--layout', 'imagefolder']) as m:
            check_sampler(env, ck, m.mnt, 'http')
    finally:
        ng.stop()


HOSTILE = ['tab\there.jpg', 'new\nline.jpg', 'cr\rx.jpg', 'back\\slash.jpg', 'ctl\x01\x1fx.jpg',
           'del\x7f.jpg', 'sp ace.jpg', 'fine.cls', 'ünï.jpg', 'not-utf8-\udcff.jpg']


def check_manifest(ck, label, mnt, src):
    ref = reference(src)
    recs = shardfs.read_samples(mnt)
    rows = [(r.path, r.shard, '-' if r.offset is None else str(r.offset), str(r.size), r.key)
            for r in recs]
    # as a set (a hardlink and its target share an offset: either may come first), and in
    # the file's order: shards sorted, offsets ascending within each
    ck.eq('%s: read_samples is tarfile\'s every member' % label, sorted(rows),
          sorted(expected_tsv_rows(ref)))
    ck.eq('%s: records in archive order' % label,
          [(r[1], r[2]) for r in rows], [(r[1], r[2]) for r in expected_tsv_rows(ref)])
    tars = {}
    for r in recs:
        if r.shard not in tars:
            tars[r.shard] = open_tar(os.path.join(src, r.shard))
        tf, codec = tars[r.shard]
        mdir = os.path.join(os.path.dirname(r.shard),
                            shardgen.shard_dir_name(os.path.basename(r.shard)))
        member = r.path[len(mdir) + 1:]
        want = None
        for m in tf.getmembers():
            if ml.normalize_member(m.name) == member and (m.isreg() or m.islnk()):
                want = tf.extractfile(m).read()
        got = read(os.path.join(mnt, r.path))
        ck.ok(got == want, '%s: bytes of %r through its path' % (label, r.path))
        if codec == 'raw' and r.offset is not None:
            with open(os.path.join(src, r.shard), 'rb') as f:
                f.seek(r.offset)
                ck.ok(f.read(r.size) == want, '%s: bytes of %r at its offset' % (label, r.path))
    for tf, _ in tars.values():
        tf.close()
    return len(recs)


def group_manifest(env, ck):
    src, work = env.path('src'), env.path('work')
    os.makedirs(work)
    shardgen.build_formats_source(src, work, env.rng)
    with ml.Mount(env, src, cache_dir=env.path('c1')) as m:
        n = check_manifest(ck, 'formats', m.mnt, src)
        log('formats dataset: %d records checked' % n)
    hsrc = env.path('hostile')
    os.makedirs(hsrc)
    with tarfile.open(os.path.join(hsrc, 'names.tar'), 'w', format=tarfile.GNU_FORMAT,
                      encoding='utf-8', errors='surrogateescape') as tf:
        for i, name in enumerate(HOSTILE):
            data = ('%d:%r' % (i, name)).encode('utf-8', 'surrogateescape') * 7
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    with ml.Mount(env, hsrc, cache_dir=env.path('c2')) as m:
        n = check_manifest(ck, 'hostile', m.mnt, hsrc)
        ck.eq('hostile: records', n, len(HOSTILE))
        keys = sorted(r.key for r in shardfs.read_samples(m.mnt))
        ck.ok('new\nline' in keys and 'not-utf8-\udcff' in keys,
              'hostile keys unescaped: %r' % keys)


def group_install(env, ck):
    copy, target = env.path('src'), env.path('target')
    shutil.copytree(PYTHON_DIR, copy, ignore=shutil.ignore_patterns('build', '*.egg-info',
                                                                       '__pycache__'))
    r = env.run([sys.executable, '-m', 'pip', 'install', '--no-build-isolation', '--no-index',
                 '--no-deps', '--target', target, copy], timeout=240)
    log(r.stdout.decode(errors='replace')[-1500:] + r.stderr.decode(errors='replace')[-1500:])
    ck.eq('pip install rc', r.returncode, 0)
    envv = dict(os.environ, PYTHONPATH=target)
    r = subprocess.run([sys.executable, '-c', 'import shardfs; print(shardfs.__file__); '
                        'print(hex(shardfs.FS_CTL_IOC))'], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=envv, cwd=env.path(''), timeout=60)
    out = r.stdout.decode().split()
    ck.ok(r.returncode == 0 and out[0].startswith(target + '/'),
          'the installed module imports: %r %r' % (out, r.stderr[-500:]))
    ck.eq('FS_CTL_IOC', out[1] if len(out) > 1 else None, '0x60005301')


def group_noplans(env, ck):
    """plan_dataloader on a DataLoader whose dataset is not paths in a mount (a list of
    numbers, files outside any mount): a warning, the loader left as it is and iterating as
    before; strict=True: ValueError."""
    need_torch()
    import warnings
    import torch.utils.data
    plain = env.path('plain.txt')
    ml.write_file(plain, b'x')
    for label, data in (('numbers', list(range(3))), ('outside a mount', [plain] * 3)):
        dl = torch.utils.data.DataLoader(data, batch_size=2)
        sampler = dl.batch_sampler.sampler
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter('always')
            try:
                ps = shardfs.plan_dataloader(dl)
            except Exception as e:
                ck.fail('%s: plan_dataloader raised %r' % (label, e))
                continue
        msgs = [str(w.message) for w in got]
        ck.ok(len(msgs) == 1 and msgs[0].startswith('shardfs: no plans: '),
              '%s: warnings %r' % (label, msgs))
        ck.ok(dl.batch_sampler.sampler is sampler, '%s: the loader was changed' % label)
        ck.ok(ps.last_plan is None, '%s: a plan' % label)
        ck.eq('%s: batches' % label, [[x if isinstance(x, str) else int(x) for x in b]
                                      for b in dl],
              [data[:2], data[2:]])
        try:
            shardfs.plan_dataloader(torch.utils.data.DataLoader(data), strict=True)
            ck.fail('%s: strict: no error' % label)
        except ValueError as e:
            log('%s: strict: %s' % (label, e))


class Indexed:
    """ImageFolder's samples read through the mount: item i is (i, its size), so a batch
    gives the exact indices the loader yielded; .samples for dataset_paths."""

    def __init__(self, samples):
        self.samples = samples

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return i, len(read(self.samples[i][0]))


# the plan the mount held (its fnv, or None) as each worker process was started; WATCH['held']
# tells it (set by group_plan_early)
WATCH = {'held': None, 'starts': []}


def watch_context():
    """A fork context (as DataLoader uses by default here) whose Process.start first notes
    the plan the mount holds."""
    import multiprocessing.context as mpc

    class Proc(mpc.ForkProcess):
        def start(self):
            WATCH['starts'].append(WATCH['held']())
            super().start()

    class Ctx(mpc.ForkContext):
        Process = Proc

    return Ctx()


def check_plan_early(env, ck, mnt):
    import errno
    import warnings
    import torch
    from torchvision import datasets
    ds = Indexed(datasets.ImageFolder(mnt).samples)
    ck.eq('images', len(ds), 48)
    paths = shardfs.dataset_paths(ds)[1]
    name = 'pid-%d' % os.getpid()
    seed = env.seed
    ctx = watch_context()

    def held():
        info = shardfs.plans(mnt).get(name)
        return info and info.fnv

    def fnv(order):
        return shardfs.plan_fnv([paths[i] for i in order])

    def indices(it):
        return [int(i) for b, _ in it for i in b]

    WATCH['held'] = held
    U = torch.utils.data
    cases = [
        ('shuffle', 2, lambda: U.DataLoader(ds, batch_size=5, shuffle=True, num_workers=2,
                                            multiprocessing_context=ctx)),
        ('persistent', 2, lambda: U.DataLoader(ds, batch_size=5, shuffle=True, num_workers=2,
                                               persistent_workers=True,
                                               multiprocessing_context=ctx)),
        ('own generator', 2, lambda: U.DataLoader(
            ds, batch_size=6, shuffle=True, num_workers=2, multiprocessing_context=ctx,
            generator=torch.Generator().manual_seed(seed + 1))),
        ('distributed', 2, lambda: U.DataLoader(
            ds, batch_size=4, num_workers=2, multiprocessing_context=ctx,
            sampler=U.DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=seed))),
        ('batch sampler', 2, lambda: U.DataLoader(
            ds, num_workers=2, multiprocessing_context=ctx,
            batch_sampler=U.BatchSampler(U.RandomSampler(ds), 7, drop_last=False))),
        ('no workers', 0, lambda: U.DataLoader(ds, batch_size=5, shuffle=True)),
    ]
    for label, workers, make in cases:
        torch.manual_seed(seed)
        dl = make()
        plain = []
        for e in range(3):
            if label == 'distributed':
                dl.batch_sampler.sampler.set_epoch(e)
            plain.append(indices(dl))
        torch.manual_seed(seed)
        dl = make()
        ps = shardfs.plan_dataloader(dl)
        for e in range(3):
            if label == 'distributed':
                ps.set_epoch(e)
            WATCH['starts'] = []
            it = iter(dl)
            at_iter = list(ps.last_indices or [])
            if workers:
                ck.eq('%s, epoch %d: the plan published by iter()' % (label, e), held(),
                      fnv(at_iter))
            got = indices(it)
            starts = WATCH['starts']
            order = ps.last_indices
            if workers:
                ck.ok(order == at_iter, '%s, epoch %d: drawn again in the epoch' % (label, e))
            if workers == 0 or (label == 'persistent' and e > 0):
                ck.eq('%s, epoch %d: workers started' % (label, e), len(starts), 0)
            else:
                ck.eq('%s, epoch %d: the plan the mount held as each worker started' % (
                    label, e), starts, [fnv(order)] * workers)
            ck.eq('%s, epoch %d: yielded the order published' % (label, e), got, order)
            ck.eq('%s, epoch %d: the plan held' % (label, e), held(), fnv(order))
            ck.eq('%s, epoch %d: the order without plans (seed %d)' % (label, e, seed), got,
                  plain[e])
            if label == 'distributed':
                ck.eq('%s, epoch %d: DistributedSampler\'s order' % (label, e), got,
                      list(ps.sampler))
        del it, dl
    # two iter() at once: each yields the order it published; the mount holds the second's
    torch.manual_seed(seed)
    dl = cases[0][2]()
    ps = shardfs.plan_dataloader(dl)
    it1 = iter(dl)
    o1 = list(ps.last_indices)
    first = [int(i) for i in next(it1)[0]]
    it2 = iter(dl)
    o2 = list(ps.last_indices)
    ck.eq('two at once: the second\'s plan held', held(), fnv(o2))
    ck.ok(o1 != o2, 'two at once: two orders')
    ck.eq('two at once: the first yields its order', first + indices(it1), o1)
    ck.eq('two at once: the second yields its order', indices(it2), o2)
    del it1, it2
    # a publication that fails: a warning and the order yielded; strict: the error, before
    # any worker is started; then it publishes again
    control = shardfs.control

    def refuse(mountpoint, line):
        raise OSError(errno.EIO, 'refused by the test')

    torch.manual_seed(seed)
    plain = indices(cases[0][2]())
    torch.manual_seed(seed)
    dl = cases[0][2]()
    ps = shardfs.plan_dataloader(dl)
    shardfs.clear_plan(mnt)
    shardfs.control = refuse
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            got = indices(dl)
    finally:
        shardfs.control = control
    msgs = [str(x.message) for x in w if 'shardfs' in str(x.message)]
    ck.ok(len(msgs) == 1 and msgs[0].startswith('shardfs: could not publish the plan to %s: '
                                                 % mnt), 'refused: warnings %r' % msgs)
    ck.eq('refused: no plan', (ps.last_plan, held()), (None, None))
    ck.eq('refused: the order drawn, as without plans', (got, got), (ps.last_indices, plain))
    dl = cases[0][2]()
    ps = shardfs.plan_dataloader(dl, name='strict', strict=True)
    WATCH['starts'] = []
    shardfs.control = refuse
    try:
        iter(dl)
        ck.fail('strict: no error')
    except OSError as e:
        ck.eq('strict: the error', e.errno, errno.EIO)
    finally:
        shardfs.control = control
    ck.eq('strict: workers started before the error', len(WATCH['starts']), 0)
    it = iter(dl)
    order = list(ps.last_indices)
    ck.eq('strict: then published', shardfs.plans(mnt)['strict'].fnv, fnv(order))
    ck.eq('strict: then yields it', indices(it), order)
    del it
    shardfs.clear_plan(mnt, 'strict')
    ck.eq('plans cleared', shardfs.plans(mnt), {})


def check_pickle(env, ck, mnt):
    import copy
    import pickle
    import torch
    from torchvision import datasets
    ds = Indexed(datasets.ImageFolder(mnt).samples)
    paths = shardfs.dataset_paths(ds)[1]
    name = 'pid-%d' % os.getpid()
    U = torch.utils.data

    def make():
        return U.DataLoader(ds, batch_size=5, shuffle=True, num_workers=2,
                            multiprocessing_context='spawn')

    def indices(it):
        return [int(i) for b, _ in it for i in b]

    torch.manual_seed(env.seed)
    plain = indices(make())
    dl = make()
    shardfs.plan_dataloader(dl)
    copies = []
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        try:
            copies.append(('pickle protocol %d' % proto,
                           pickle.loads(pickle.dumps(dl, protocol=proto))))
        except Exception as e:  # noqa: BLE001 (the finding: PicklingError)
            ck.fail('pickle protocol %d: %s: %s' % (proto, type(e).__name__, e))
    try:
        copies.append(('deepcopy', copy.deepcopy(dl)))
    except Exception as e:  # noqa: BLE001
        ck.fail('deepcopy: %s: %s' % (type(e).__name__, e))
    for label, c in copies:
        ck.eq('%s: the class' % label, (type(c) is type(dl), type(c).__name__,
                                        isinstance(c, U.DataLoader)), (True, 'DataLoader', True))
        ps = getattr(c, '_shardfs_plan', None)
        ck.ok(isinstance(ps, shardfs.PlanSampler) and c.batch_sampler.sampler is ps,
              '%s: its PlanSampler is not its batch sampler\'s sampler' % label)
    # an epoch of the last pickled copy, spawn-started workers: the order it published
    c = copies[-2][1] if len(copies) > 1 else None
    if c is None:
        return
    torch.manual_seed(env.seed)
    got = indices(c)
    order = c._shardfs_plan.last_indices
    ck.eq('spawn epoch of the copy: yielded the order published', got, order)
    info = shardfs.plans(mnt).get(name)
    ck.eq('spawn epoch of the copy: the plan held', info and info.fnv,
          shardfs.plan_fnv([paths[i] for i in order or []]))
    ck.eq('spawn epoch of the copy: the order without plans (seed %d)' % env.seed, got, plain)
    ck.eq('spawn epoch of the copy: every image', sorted(got), list(range(len(ds))))
    shardfs.clear_plan(mnt)


def group_pickle(env, ck):
    need_torch()
    out = pack_tree(env)
    with ml.Mount(env, out, cache_dir=env.path('cache'), extra=['--layout', 'imagefolder']) as m:
        check_pickle(env, ck, m.mnt)


def group_plan_early(env, ck):
    need_torch()
    out = pack_tree(env)
    with ml.Mount(env, out, cache_dir=env.path('cache'), extra=['--layout', 'imagefolder']) as m:
        check_plan_early(env, ck, m.mnt)


# The requests the kernel sends, by the daemon's counters (docs/counters.md).
REQUEST_KEYS = ('lookups', 'getattrs', 'opens', 'releases', 'flushes', 'xattr_requests',
                'ioctls', 'reads', 'forgets')
# the ways a loader reads a sample's bytes: the expected IOCTLs a sample (READs: one each)
READ_WAYS = (('read_bytes', 0), ('pil_loader', 0), ('torchvision.io.read_file', 0),
             ('open().read()', 1))
# raw members of the sizes where a read's pages end: up to the kernel's readahead window
EDGE_SIZES = (1, 4095, 4096, 4097, 65536, 131071, 131072)


def jpeg(rng):
    """A JPEG of seeded noise and size (up to 128 KiB: within the kernel's own readahead window,
    the smallest a mount has)."""
    from PIL import Image
    while True:
        w, h = rng.randrange(8, 180), rng.randrange(8, 180)
        img = Image.frombytes('RGB', (w, h), rng.randbytes(w * h * 3))
        b = io.BytesIO()
        img.save(b, 'JPEG', quality=rng.randrange(50, 96))
        if b.tell() <= 131072:
            return b.getvalue()


def group_read(env, ck):
    """See the module's doc (read). Every directory and file is held by an O_PATH fd once listed
    (tests/lib kcache.Pins), so that another process's drop_caches cannot make the kernel
    forget it."""
    need_torch()
    import torchvision.io
    from torchvision.datasets.folder import default_loader
    from shardfs_test.kcache import Pins
    src = env.path('src')
    os.makedirs(src)
    data = {}
    for w, (way, _) in enumerate(READ_WAYS):
        with tarfile.open(os.path.join(src, 'way-%d.tar' % w), 'w') as tf:
            names = ['k%02d.jpg' % k for k in range(12)]
            if way != 'pil_loader':
                names += ['e%d.bin' % n for n in EDGE_SIZES]
            for nm in names:
                b = jpeg(env.rng) if nm.endswith('.jpg') else env.rng.randbytes(
                    int(nm[1:-4]))
                ti = tarfile.TarInfo(nm)
                ti.size = len(b)
                ti.mtime = 1700000000
                tf.addfile(ti, io.BytesIO(b))
                data['way-%d/%s' % (w, nm)] = b
    pins = Pins()
    try:
        with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
            try:
                paths = []
                for root, dirs, names in os.walk(m.mnt):
                    for n in dirs + names:
                        pins.path(os.path.join(root, n))
                    paths += [os.path.relpath(os.path.join(root, n), m.mnt) for n in names]
                ck.eq('members in the mount', sorted(p for p in paths if not p.endswith('.tar')),
                      sorted(data))

                def counts():
                    # three reads of the stats file, the last one's counts and what one read
                    # costs (the same every read once the mount's first OPEN and FLUSH, each
                    # answered ENOSYS, came before)
                    m.stats()
                    b = m.stats()
                    c = m.stats()
                    return c, {k: c.get(k, -1) - b.get(k, -1) for k in REQUEST_KEYS}

                for w, (way, ioctls) in enumerate(READ_WAYS):
                    mine = sorted(p for p in data if p.startswith('way-%d/' % w))
                    env.rng.shuffle(mine)
                    before, _ = counts()
                    got = {}
                    for p in mine:
                        path = os.path.join(m.mnt, p)
                        if way == 'read_bytes':
                            got[p] = shardfs.read_bytes(path)
                        elif way == 'pil_loader':
                            img = shardfs.pil_loader(path)
                            got[p] = (img.mode, img.size, img.tobytes())
                        elif way == 'open().read()':
                            with open(path, 'rb') as f:
                                got[p] = f.read()
                        else:  # a mapped read: the bytes come as its pages are touched
                            t = torchvision.io.read_file(path)
                            got[p] = t.numpy().tobytes()
                            del t
                    st, cost = counts()
                    d = {k: st.get(k, -1) - before.get(k, -1) - 3 * cost[k]
                         for k in REQUEST_KEYS}
                    log('%s: requests for %d samples: %s' % (way, len(mine), d))
                    n = len(mine)
                    if way == 'pil_loader':  # torchvision's own loader (its page cache warm)
                        want = {p: (lambda i: (i.mode, i.size, i.tobytes()))(
                            default_loader(os.path.join(m.mnt, p))) for p in mine}
                    else:
                        want = {p: data[p] for p in mine}
                    ck.eq('%s: samples whose bytes differ' % way,
                          [p for p in mine if got[p] != want[p]], [])
                    ck.eq('%s: READs: one a sample' % way, d['reads'], n)
                    ck.eq('%s: IOCTLs' % way, d['ioctls'], ioctls * n)
                    ck.eq('%s: LOOKUPs (less forgets), GETATTRs, OPENs, RELEASEs, FLUSHes, '
                          'GETXATTRs' % way,
                          (d['lookups'] - d['forgets'], d['getattrs'], d['opens'],
                           d['releases'], d['flushes'], d['xattr_requests']),
                          (0, 0, 0, 0, 0, 0))
            finally:
                pins.close()  # before the unmount
    finally:
        pins.close()


GROUPS = {'noplans': group_noplans, 'plan-early': group_plan_early, 'pickle': group_pickle,
          'read': group_read,
          'sampler-local': group_sampler_local,
          'sampler-http': group_sampler_http,
          'manifest': group_manifest, 'install': group_install}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in GROUPS:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    ml.main_wrapper(GROUPS[sys.argv[2]], sys.argv[1], 'python-' + sys.argv[2], deadline=280,
                    needs_fuse=sys.argv[2] != 'install')  # install mounts nothing


if __name__ == '__main__':
    main()
