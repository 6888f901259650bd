"""The index and view formats side by side (issue 39), for tests/bench/index_bench.sh's
section 4. Not a test: it prints figures and ratios against baselines measured in the same
run.

    python3 tests/bench/lib_indexfmt.py BIN WORK [--base-bin OLD] [--shards 500] [--runs 5]
                                        [--time-shards 25] [--only-build]

--runs 0 leaves the timed rows out.

The data set: --shards hardlinks of one shard of 8,600 members named like s12_004321.jpg /
.cls (4,300 samples, 1,000 classes by .cls, 1 KB tar members). The hardlinks share their bytes,
not their names: every shard has its own index, and the imagefolder view names a key met in
several shards of one class KEY~SHARD.jpg. Four mounts at once, each with its own cache
directory:
  shards v3   BIN, the shards layout, index version 3 (the default)
  shards v2   BIN with SHARDFS_INDEX_VERSION=2: version 2 index files
  if view v4  BIN --layout imagefolder: the view version 4 (names in the view, front-coded,
              bound to each shard's index file by its checksum)
  if view base  OLD --layout imagefolder (a build of an older commit: 4d364d6 for its view
              version 3, the names without the index checksums; 8a6e6d6 for version 1, names
              and attributes in the view); skipped without --base-bin
and two trees on the filesystem of WORK (ext4 here): the shards layout's (a directory per
shard, 8,600 hardlinks of one file each) and the view's (its class directories, each file a
hardlink, the names the view lists).

Rows: bytes on disk per member (index files) and per sample (view blobs); the daemon's
RssAnon after `find` over the whole mount; the view's build alone (the indexes cached, its
blob removed, mounted again): time per sample and the daemon's peak RSS (VmHWM); then
`find`, `ls -lR`, `stat` of every file and open+read of every 8th over the first
--time-shards shards (their share of the classes for the imagefolder mounts), each mount and
tree in turn, --runs rounds with the order rotated each round, the dentries and inodes
dropped before each row (root: echo 2 > /proc/sys/vm/drop_caches, so every row reaches the
daemon or the disk's directory blocks). Medians, and the spread (min-max) as the noise.
Then the daemon's CPU time of the same rows (find, ls -lR, stat+open) for each mount: the sum
of its threads' run time (/proc/PID/task/*/schedstat), far less sensitive to a loaded machine
than the wall clock. Then, with --base-bin, the first `find` over the whole mount and the
first `ls -lR` of the timed classes after a remount on the saved view and indexes (page cache
dropped), view v4 vs base, --runs rounds with the two in turn: wall clock and daemon CPU.
Last, the index build of one shard of 100,000 members (16-byte members named like
n0042_00000021.jpg / .cls) through a fresh mount per index version: time per member and the
daemon's peak RSS (--only-build runs this alone).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import io
import time


def make_source(src, n):
    os.makedirs(src, exist_ok=True)
    first = os.path.join(src, 'shard-000000.tar')
    with tarfile.open(first, 'w', format=tarfile.GNU_FORMAT) as t:
        for i in range(4300):
            for e, data in (('cls', b'%d' % (i % 1000)),
                            ('jpg', b'\xff\xd8\xff\xe0' + b'%012d' % i)):
                ti = tarfile.TarInfo('s12_%06d.%s' % (i, e))
                ti.size = len(data)
                ti.mtime = 1700000000
                t.addfile(ti, io.BytesIO(data))
    for s in range(1, n):
        os.link(first, os.path.join(src, 'shard-%06d.tar' % s))


def link_tree(dst, dirs):
    """dirs: {dirname: [names]}: one file per directory, hardlinked under every name."""
    for d, names in dirs.items():
        p = os.path.join(dst, d)
        os.makedirs(p)
        one = os.path.join(p, '.one')
        with open(one, 'wb') as f:
            f.write(b'x')
        for name in names:
            os.link(one, os.path.join(p, name))
        os.unlink(one)


class Mount:
    def __init__(self, label, binary, work, src, env=None, opts=()):
        self.label, self.bin, self.src = label, binary, src
        self.cache = os.path.join(work, 'cache-' + label.replace(' ', '-'))
        self.mnt = os.path.join(work, 'mnt-' + label.replace(' ', '-'))
        self.env = dict(os.environ, **(env or {}))
        self.opts = list(opts)
        os.makedirs(self.mnt, exist_ok=True)
        self.up = False

    def mount(self):
        t0 = time.perf_counter()
        subprocess.run([self.bin, 'mount', '--cache-dir', self.cache, *self.opts, self.src,
                        self.mnt], env=self.env, check=True)
        self.up = True
        return time.perf_counter() - t0

    def umount(self):
        self._pid = None
        if self.up:
            subprocess.run([self.bin, 'umount', self.mnt], check=False)
            self.up = False

    def stats(self):
        with open(os.path.join(self.mnt, '.shardfs', 'stats')) as f:
            return json.load(f)

    def pid(self):
        if not getattr(self, '_pid', None):
            self._pid = self.stats()['pid']
        return self._pid

    def cpu(self):
        """The daemon's CPU time so far, in seconds: the sum of its threads' run time
        (/proc/PID/task/*/schedstat, nanoseconds; threads that ended are not counted,
        and the daemon's FUSE threads live as long as the mount)."""
        total = 0
        base = '/proc/%d/task' % self.pid()
        for t in os.listdir(base):
            try:
                with open(os.path.join(base, t, 'schedstat')) as f:
                    total += int(f.read().split()[0])
            except OSError:
                pass
        return total / 1e9

    def status(self, key):
        with open('/proc/%d/status' % self.stats()['pid']) as f:
            for line in f:
                if line.startswith(key + ':'):
                    return int(line.split()[1])
        return 0

    def meta_bytes(self, magic):
        total = 0
        for root, _, files in os.walk(self.cache):
            if '/meta' not in root:
                continue
            for name in files:
                p = os.path.join(root, name)
                with open(p, 'rb') as f:
                    if f.read(len(magic)) == magic:
                        total += os.path.getsize(p)
        return total

    def remove_views(self):
        for root, _, files in os.walk(self.cache):
            for name in files:
                p = os.path.join(root, name)
                with open(p, 'rb') as f:
                    if f.read(8) == b'SHIFVIEW':
                        os.unlink(p)


def drop(can):
    if can:
        os.sync()
        with open('/proc/sys/vm/drop_caches', 'w') as f:
            f.write('2\n')


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def stat_open(paths):
    t0 = time.perf_counter()
    for p in paths:
        os.stat(p)
    t1 = time.perf_counter()
    for p in paths[::8]:
        with open(p, 'rb') as f:
            f.read(1)
    return t1 - t0, time.perf_counter() - t1


def row(name, val, base, unit, note=''):
    ratio = '%.2f' % (base / val) if val and base else 'n/a'
    print('%-60s %14s %18s %8s %s' % (name, '%.4g%s' % (val, unit), '%.4g%s' % (base, unit),
                                      ratio, note))
    sys.stdout.flush()


def build_100k(binary, work, members=100000):
    """The index build of one shard of `members` 1 KB members, through a fresh mount per
    format (a listing of the shard builds it): the daemon's peak RSS (VmHWM) and the time
    per member, version 3 vs version 2."""
    src = os.path.join(work, 'src100k')
    os.makedirs(src, exist_ok=True)
    tar = os.path.join(src, 'big.tar')
    with tarfile.open(tar, 'w', format=tarfile.GNU_FORMAT) as t:
        for i in range(members):
            ti = tarfile.TarInfo('n%04d_%08d.%s' % (i // 2 % 1000, i // 2, 'jpg' if i % 2 else 'cls'))
            ti.size = 16
            ti.mtime = 1700000000
            t.addfile(ti, io.BytesIO(b'%016d' % i))
    out = {}
    for v in ('3', '2'):
        m = Mount('build100k v' + v, binary, work, src, env={'SHARDFS_INDEX_VERSION': v})
        m.mount()
        try:
            base = m.status('VmHWM')
            t0 = time.perf_counter()
            subprocess.run(['ls', os.path.join(m.mnt, 'big')], stdout=subprocess.DEVNULL,
                           check=True)
            out[v] = (time.perf_counter() - t0, m.status('VmHWM'), base)
        finally:
            m.umount()
    (t3, h3, b3), (t2, h2, b2) = out['3'], out['2']
    row('index build of %d members, us/member, v3 vs v2' % members, t3 * 1e6 / members,
        t2 * 1e6 / members, ' us', '(a fresh mount; the first listing)')
    row('index build of %d members, daemon VmHWM (KB), v3 vs v2' % members, h3, h2, '',
        'before the build: %d vs %d' % (b3, b2))


def cold_rows(by, targets, can, runs):
    """The first `find` over the whole mount, and the first `ls -lR` of the timed classes,
    after a remount on the saved view and indexes (page cache dropped), view v4 vs base:
    `runs` rounds, the two mounts in turn (the order swapped each round), wall clock and the
    daemon's CPU; medians with the min-max spread."""
    labs = ['if view v4', 'if view base']
    res = {lab: {w: [] for w in ('find', 'find cpu', 'ls', 'ls cpu')} for lab in labs}
    for r in range(max(runs, 1)):
        for lab in (labs if r % 2 == 0 else labs[::-1]):
            m = by[lab]
            for w, cmd in (('find', ['find', m.mnt]), ('ls', ['ls', '-lR', *targets[lab]])):
                m.umount()
                m.mount()
                if can:
                    os.sync()
                    with open('/proc/sys/vm/drop_caches', 'w') as f:
                        f.write('3\n')
                c0 = m.cpu()
                res[lab][w].append(timed(cmd))
                res[lab][w + ' cpu'].append(m.cpu() - c0)
    x, y = res['if view v4'], res['if view base']
    for w, name in (('find', 'first find after a remount, saved view'),
                    ('find cpu', 'first find after a remount, daemon CPU'),
                    ('ls', 'first ls -lR after a remount, saved view'),
                    ('ls cpu', 'first ls -lR after a remount, daemon CPU')):
        row('%s, v4 vs base' % name, statistics.median(x[w]), statistics.median(y[w]), ' s',
            'noise %.3f-%.3f vs %.3f-%.3f (%d runs)' % (min(x[w]), max(x[w]), min(y[w]),
                                                        max(y[w]), len(x[w])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('bin')
    ap.add_argument('work')
    ap.add_argument('--base-bin')
    ap.add_argument('--shards', type=int, default=500)
    ap.add_argument('--runs', type=int, default=5)
    ap.add_argument('--time-shards', type=int, default=25)
    ap.add_argument('--only-build', action='store_true',
                    help='only the index build of a 100,000-member shard')
    a = ap.parse_args()
    if a.only_build:
        build_100k(a.bin, a.work)
        return
    can = os.geteuid() == 0
    src = os.path.join(a.work, 'src')
    make_source(src, a.shards)
    nm, ns = a.shards * 8600, a.shards * 4300
    mounts = [Mount('shards v3', a.bin, a.work, src),
              Mount('shards v2', a.bin, a.work, src, env={'SHARDFS_INDEX_VERSION': '2'}),
              Mount('if view v4', a.bin, a.work, src, opts=['--layout', 'imagefolder'])]
    if a.base_bin:
        mounts.append(Mount('if view base', a.base_bin, a.work, src,
                            opts=['--layout', 'imagefolder']))
    by = {m.label: m for m in mounts}
    info = {}
    try:
        print('%-60s %14s %18s %8s' % ('workload', 'shardfs', 'baseline', 'ratio'))
        for m in mounts:
            tm = m.mount()
            t0 = time.perf_counter()
            subprocess.run(['find', m.mnt], stdout=subprocess.DEVNULL, check=True)
            info[m.label] = {'mount': tm, 'find1': time.perf_counter() - t0,
                             'rss': m.status('RssAnon'), 'hwm': m.status('VmHWM'),
                             'idx': m.meta_bytes(b'SHRDIDX'), 'view': m.meta_bytes(b'SHIFVIEW')}
        s3, s2 = info['shards v3'], info['shards v2']
        row('index on disk, B/member (%d members), v3 vs v2' % nm, s3['idx'] / nm,
            s2['idx'] / nm, ' B', 'goal <= 20')
        i2 = info['if view v4']
        i1 = info.get('if view base')
        row('view on disk, B/sample (%d samples), v4 vs base' % ns, i2['view'] / ns,
            (i1['view'] / ns) if i1 else 0, ' B', 'goal <= 24')
        row('daemon RssAnon after find, shards, v3 vs v2 (KB)', s3['rss'], s2['rss'], '',
            'goal <= 6144 at 4.3 M')
        if i1:
            row('daemon RssAnon after find, imagefolder, v4 vs base (KB)', i2['rss'], i1['rss'],
                '', 'goal <= 20480 at 4.3 M')
        # the view's build alone: indexes cached, the blob removed
        for lab in ('if view v4', 'if view base'):
            m = by.get(lab)
            if not m:
                continue
            m.umount()
            m.remove_views()
            tm = m.mount()
            st = m.stats()
            info[lab]['vbuild_ms'] = st.get('imagefolder_build_ms', 0)
            info[lab]['vbuild_hwm'] = m.status('VmHWM')
            info[lab]['vbuild_mount'] = tm
            subprocess.run(['find', m.mnt], stdout=subprocess.DEVNULL, check=True)
        if i1:
            row('view build alone, us/sample, v4 vs base', i2['vbuild_ms'] * 1e3 / ns,
                i1['vbuild_ms'] * 1e3 / ns, ' us')
            row('view build alone, daemon VmHWM (KB), v4 vs base', i2['vbuild_hwm'],
                i1['vbuild_hwm'], '')
        if a.runs == 0:  # --runs 0: sizes, memory and builds only
            build_100k(a.bin, a.work)
            return
        # the trees on WORK's filesystem, named as the mounts show them
        T = min(a.time_shards, a.shards)
        shard_dirs = ['shard-%06d' % s for s in range(T)]
        names = sorted(os.listdir(os.path.join(by['shards v3'].mnt, shard_dirs[0])))
        ext_s = os.path.join(a.work, 'ext4-shards')
        link_tree(ext_s, {d: names for d in shard_dirs})
        ifm = by['if view v4'].mnt
        classes = sorted(os.listdir(ifm))
        classes = [c for c in classes if not c.startswith('.')]
        C = max(1, len(classes) * T // a.shards)
        ext_i = os.path.join(a.work, 'ext4-imagefolder')
        link_tree(ext_i, {c: os.listdir(os.path.join(ifm, c)) for c in classes[:C]})
        targets = {}
        for m in mounts:
            if m.label.startswith('shards'):
                targets[m.label] = [os.path.join(m.mnt, d) for d in shard_dirs]
            else:
                targets[m.label] = [os.path.join(m.mnt, c) for c in classes[:C]]
        targets['ext4 shards'] = [os.path.join(ext_s, d) for d in shard_dirs]
        targets['ext4 imagefolder'] = [os.path.join(ext_i, c) for c in classes[:C]]
        paths = {k: [os.path.join(d, f) for d in v for f in sorted(os.listdir(d))]
                 for k, v in targets.items()}
        res = {k: {'find': [], 'ls -lR': [], 'stat': [], 'open': []} for k in targets}
        cpu = {m.label: {'find': [], 'ls -lR': [], 'stat+open': []} for m in mounts}
        order = list(targets)
        for r in range(a.runs):
            k = r % len(order)
            for lab in order[k:] + order[:k]:
                m = by.get(lab)
                c = [m.cpu()] if m else None
                drop(can)
                res[lab]['find'].append(timed(['find', *targets[lab]]))
                if m:
                    c.append(m.cpu())
                drop(can)
                res[lab]['ls -lR'].append(timed(['ls', '-lR', *targets[lab]]))
                if m:
                    c.append(m.cpu())
                drop(can)
                s, o = stat_open(paths[lab])
                res[lab]['stat'].append(s)
                res[lab]['open'].append(o)
                if m:
                    c.append(m.cpu())
                    for w, x, y in zip(('find', 'ls -lR', 'stat+open'), c, c[1:]):
                        cpu[lab][w].append(y - x)
        med = {k: {w: statistics.median(v) for w, v in d.items()} for k, d in res.items()}
        spread = {k: {w: (min(v), max(v)) for w, v in d.items()} for k, d in res.items()}
        print('timed over %d shards (%d members) and %d classes (%d files); %d runs, '
              'medians; noise = min-max of the runs' % (
                  T, len(paths['shards v3']), C, len(paths['if view v4']), a.runs))
        pairs = [('shards v3', 'shards v2'), ('shards v3', 'ext4 shards'),
                 ('if view v4', 'if view base'), ('if view v4', 'ext4 imagefolder'),
                 ('shards v2', 'ext4 shards'), ('if view base', 'ext4 imagefolder')]
        for w in ('find', 'ls -lR', 'stat', 'open'):
            for x, y in pairs:
                if x not in med or y not in med:
                    continue
                row('%s, %s vs %s' % (w, x, y), med[x][w], med[y][w], ' s',
                    'noise %.3f-%.3f vs %.3f-%.3f' % (spread[x][w] + spread[y][w]))
        # the daemon's CPU time per row: far less sensitive to the machine's load than the
        # wall clock (the drop of dentries before each row is not in it)
        for w in ('find', 'ls -lR', 'stat+open'):
            for x, y in pairs:
                if x not in cpu or y not in cpu:
                    continue
                cx, cy = cpu[x][w], cpu[y][w]
                row('daemon CPU, %s, %s vs %s' % (w, x, y), statistics.median(cx),
                    statistics.median(cy), ' s',
                    'noise %.3f-%.3f vs %.3f-%.3f' % (min(cx), max(cx), min(cy), max(cy)))
        if 'if view base' in by:
            cold_rows(by, targets, can, a.runs)
        build_100k(a.bin, a.work)
        print('ratio: baseline / shardfs (above 1: shardfs smaller or faster)')
    finally:
        for m in mounts:
            m.umount()


if __name__ == '__main__':
    main()
