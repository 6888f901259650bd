"""Remote-store rows on an emulated real link (shardfs_test.linkemu): every request waits --delay-ms
before its response starts, every connection is capped at --rate-mb MB/s. Not a test: it
prints figures and ratios against baselines measured in the same run, alternating.

    /usr/bin/python3 tests/bench/link_bench.py BIN [--quick] [--runs N] [--delay-ms 30]
        [--rate-mb 60] [--scale-rate-mb 8] [--scale 8,16,32,64] [--only LIST]

The data set: a class-folder tree of 100 KB JPEGs packed by `shardfs pack` into 8 shards
(about 1 GB; --quick: 512 MB), sidecar indexes removed (shards as found in a bucket), served
from the emulator as http://127.0.0.1:PORT/train-{000000..000007}.tar. N is the mount's
default --connections (read from `shardfs mount --help`). Every shardfs side mounts with
the default options (plus --cache-dir, a new one per run; the scaling rows add --connections
C) and every baseline writes to the same disk as the cache.

Rows (each printed as a tab-separated line "row<TAB>workload<TAB>options<TAB>shardfs<TAB>
baseline<TAB>unit<TAB>ratio<TAB>goal<TAB>goal_ge"; lib_bench.py puts them in the table):
  emulator   N curl to /dev/null vs N x rate: the emulator is not the bottleneck (reference)
  prefetch   `shardfs prefetch MNT` of the whole data set vs the shards downloaded by curl,
             N at a time (xargs -P N), to files (goal >= 0.95); and vs N curl range requests
             covering the data set, the same connection count (report)
  cpu        CPU seconds per GB of that prefetch (the daemon's user+system from /proc/PID/stat)
             vs curl's (its rusage) writing the same bytes to files (goal <= 1.2x)
  cat        `cat` of one shard through a fresh mount vs `aria2c -x N -s N` of it (goal >= 1)
  readers4   4 processes each reading whole random shards (2 each) through a fresh mount vs 4
             curl processes doing the same (goal >= 1)
  imagefolder a cold epoch: mount --layout imagefolder + ImageFolder + DataLoader(shuffle=True,
             num_workers=2) vs N-parallel curl of every shard + tar x + the same epoch on the
             extracted tree (goal >= 1.25; ratio: baseline time / shardfs time)
  smallcache a cold shuffled epoch (as imagefolder) with --cache-size a quarter of the data set:
             bytes fetched / bytes read during the epoch (the mount's index build before it is
             logged; goal <= 2: random misses fill only their units), and
             the epoch's rate vs the link's rate for the bytes it reads (N x rate; report)
  plan       the sampler's plan (python/shardfs plan_dataloader; docs/reading.md "Reading plans"), with
             --cache-size a quarter of the data set: two shuffled ImageFolder epochs (DataLoader
             shuffle=True, num_workers=2; a new permutation each) in one mount with the plan vs
             without, the first cold (goal >= 3; ratio: time without / time with) and the
             second with what the cache holds (report; the kernel's page cache is dropped
             between epochs when run as root, so the second reads through the mount); the planned cold epoch vs the most the
             link and the machine allow: the larger of the link's time for the bytes the epoch
             reads (N x rate) and the same epoch over a local-source mount of the shards
             (goal >= 0.9); and bytes fetched / bytes read in each epoch (report)
  scaling    `shardfs prefetch` with --connections 8, 16, 32, 64 on an emulator at
             --scale-rate-mb per connection: MB/s vs C x rate (goal >= 0.9), with the CPU use
             of the daemon, the emulator and the machine (what limits it)
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))
from shardfs_test.linkemu import Emu  # noqa: E402
ROOT = os.path.abspath(os.path.join(HERE, '..', '..'))
PY = '/usr/bin/python3'
HZ = os.sysconf('SC_CLK_TCK')
MOUNT_OPTS = []
ROWS = ['emulator', 'prefetch', 'cat', 'readers4', 'imagefolder', 'smallcache', 'plan',
        'scaling']


def log(*a):
    print('[link %s]' % time.strftime('%H:%M:%S'), *a, file=sys.stderr, flush=True)


def emit(workload, opts, sf, base, unit, ratio, goal, ge=None):
    if MOUNT_OPTS:
        opts = ' '.join(MOUNT_OPTS) if opts == 'defaults' else opts + ' ' + ' '.join(MOUNT_OPTS)
    print('row\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s' % (
        workload, opts, '' if sf is None else '%.6g' % sf, '' if base is None else '%.6g' % base,
        unit, '' if ratio is None else '%.4f' % ratio, goal, '' if ge is None else '%g' % ge),
        flush=True)


def med(xs):
    return statistics.median(xs)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def proc_cpu(pid):
    """user + system seconds of a process (all its threads)."""
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def machine_busy():
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    with open('/proc/stat') as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def thread_sched(pid):
    """{tid: (ns on a CPU, ns runnable waiting for one)} of a process's threads
    (/proc/PID/task/TID/schedstat)."""
    d = {}
    for t in os.listdir('/proc/%d/task' % pid):
        try:
            with open('/proc/%d/task/%s/schedstat' % (pid, t)) as f:
                v = f.read().split()
            d[t] = (int(v[0]), int(v[1]))
        except OSError:
            pass
    return d


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# ---------------------------------------------------------------------------------------------

class Mount:
    def __init__(self, a, src, extra=()):
        self.a = a
        self.mnt = os.path.join(a.w, 'mnt')
        self.cache = os.path.join(a.w, 'cache')
        shutil.rmtree(self.cache, ignore_errors=True)
        os.makedirs(self.mnt, exist_ok=True)
        t = time.monotonic()
        sh([a.bin, 'mount', '--cache-dir', self.cache, *a.mount_opts, *extra, src, self.mnt])
        self.mount_s = time.monotonic() - t
        self.pid = int(self.stat('pid'))

    def stats(self):
        with open(os.path.join(self.mnt, '.shardfs/stats')) as f:
            return f.read()

    def stat(self, key):
        return re.search(r'"%s":\s*"?([^",}]*)' % key, self.stats()).group(1)

    def umount(self):
        subprocess.run([self.a.bin, 'umount', self.mnt], stdout=subprocess.DEVNULL)
        shutil.rmtree(self.cache, ignore_errors=True)


def settle():
    """Written pages of the last run go to disk before the next one is timed (not timed)."""
    os.sync()


def curl_pool(jobs, par):
    """Run the curl command lines in jobs, at most par at once. Returns (seconds, cpu seconds
    of the curls)."""
    c0 = children_cpu()
    t = time.monotonic()
    run, jobs = [], list(jobs)
    while jobs or run:
        while jobs and len(run) < par:
            run.append(subprocess.Popen(jobs.pop(0)))
        pid, st = os.wait()
        for p in run:
            if p.pid == pid:
                p.returncode = os.waitstatus_to_exitcode(st)
                if p.returncode != 0:
                    raise RuntimeError('%s failed: %d' % (p.args, p.returncode))
                run.remove(p)
                break
    return time.monotonic() - t, children_cpu() - c0


# ---------------------------------------------------------------------------------------------
# data

def make_dataset(a):
    """8 shards of 100 KB JPEGs (10 classes) packed by shardfs pack; returns the shard names."""
    d = os.path.join(a.data, 'shards')
    done = os.path.join(a.data, 'done')
    if not os.path.exists(done):
        from PIL import Image
        import io
        import random
        shutil.rmtree(a.data, ignore_errors=True)
        tree = os.path.join(a.data, 'tree')
        rnd = random.Random(1)
        # 64 distinct 288x288 noise JPEGs (~98 KB each), used in turn
        blobs = []
        for _ in range(64):
            im = Image.frombytes('RGB', (288, 288), bytes(rnd.getrandbits(8)
                                                         for _ in range(288 * 288 * 3)))
            b = io.BytesIO()
            im.save(b, 'JPEG', quality=95)
            blobs.append(b.getvalue())
        per_shard = a.shard_mb * 1000 * 1000 // (len(blobs[0]) + 1536)
        n = per_shard * a.shards
        log('data set: %d JPEGs of ~%d KB in %d shards' % (n, len(blobs[0]) // 1000, a.shards))
        for i in range(n):
            c = 'c%02d' % (i % 10)
            os.makedirs(os.path.join(tree, c), exist_ok=True)
            with open(os.path.join(tree, c, 'img%06d.jpg' % i), 'wb') as f:
                f.write(blobs[i % len(blobs)])
        os.makedirs(d)
        sh([a.bin, 'pack', '--max-size', '%dM' % (a.shard_mb * 1000000 // 1048576 + 1),
            '--shuffle', '1', tree, os.path.join(d, 'train')], stdout=subprocess.DEVNULL)
        shutil.rmtree(tree)
        for f in os.listdir(d):
            if f.endswith('.idx'):
                os.unlink(os.path.join(d, f))  # shards as found in a bucket: no sidecars
        open(done, 'w').close()
    names = sorted(f for f in os.listdir(d) if f.endswith('.tar'))
    return d, names


# ---------------------------------------------------------------------------------------------
# rows

def brace(names):
    m = re.match(r'(.*-)(\d+)\.tar$', names[0])
    last = re.match(r'.*-(\d+)\.tar$', names[-1]).group(1)
    return '%s{%s..%s}.tar' % (m.group(1), m.group(2), last)


def w_emulator(a, emu):
    """N curl -o /dev/null of N ranges of the data set at once: the emulator's own ceiling."""
    jobs = range_jobs(a, emu, a.n, None)
    rates = []
    for _ in range(a.runs):
        t, _ = curl_pool(jobs, a.n)
        rates.append(a.total / 1e6 / t)
    r = med(rates)
    want = a.n * emu.rate_mb
    emit('L0. link emulator: %d curl ranges to /dev/null vs %d x %g MB/s' % (a.n, a.n,
                                                                        emu.rate_mb),
         'no mount', r, want, 'MB/s', r / want, 'reference (>= 0.9: not the bottleneck)')


def range_jobs(a, emu, n, outdir):
    """n curl command lines, each one contiguous range of the data set's bytes (a range spans
    shards: one curl per shard piece, run one after another inside one job)."""
    per = -(-a.total // n)
    jobs, pos = [], 0
    bounds = []
    off = 0
    for nm in a.names:
        bounds.append((nm, off, off + a.sizes[nm]))
        off += a.sizes[nm]
    for i in range(n):
        lo, hi = i * per, min((i + 1) * per, a.total)
        parts = []
        for nm, s, e in bounds:
            if e <= lo or s >= hi:
                continue
            parts.append((nm, max(lo, s) - s, min(hi, e) - s - 1))
        cmd = ['curl', '-s', '--fail']
        for j, (nm, x, y) in enumerate(parts):
            out = '/dev/null' if outdir is None else os.path.join(outdir, '%s.%d.%d' % (nm, i, j))
            cmd += ['-o', out, '-r', '%d-%d' % (x, y), emu.url(nm)]
            if j + 1 < len(parts):
                cmd += ['--next', '-s', '--fail']
        jobs.append(cmd)
        pos = hi
    assert pos == a.total
    return jobs


def prefetch_once(a, emu, extra=()):
    """(seconds, daemon cpu seconds, bytes fetched, mount) of `shardfs prefetch` of everything
    through a fresh mount; the mount is left mounted for the caller's stats, and m.busiest
    says how the daemon's busiest thread spent the time: (on a CPU, waiting for one), as
    fractions of the prefetch's wall time."""
    m = Mount(a, emu.url(a.brace), extra)
    c0 = proc_cpu(m.pid)
    s0 = thread_sched(m.pid)
    t = time.monotonic()
    sh([a.bin, 'prefetch', m.mnt], stdout=subprocess.DEVNULL)
    secs = time.monotonic() - t
    cpu = proc_cpu(m.pid) - c0
    s1 = thread_sched(m.pid)
    run, wait = max((v[0] - s0.get(k, (0, 0))[0], v[1] - s0.get(k, (0, 0))[1])
                    for k, v in s1.items())
    m.busiest = (run / 1e9 / secs, wait / 1e9 / secs)
    fetched = int(m.stat('bytes_fetched'))
    return secs, cpu, fetched, m


def w_prefetch(a, emu):
    dl = os.path.join(a.w, 'dl')
    sf, sfcpu, cu, cucpu, cr = [], [], [], [], []
    for i in range(max(a.runs, 5)):  # short runs; the CPU figures are noisy
        order = ('sf', 'curl', 'ranges') if i % 2 == 0 else ('ranges', 'curl', 'sf')
        for side in order:
            settle()
            if side == 'sf':
                secs, cpu, fetched, m = prefetch_once(a, emu)
                log('prefetch: %.2f s, %.0f MB/s, daemon %.2f cpu s, mount took %.2f s, '
                    'fetched %d' % (secs, a.total / 1e6 / secs, cpu, m.mount_s, fetched))
                m.umount()
                assert fetched == a.total, (fetched, a.total)
                sf.append(secs)
                sfcpu.append(cpu / (fetched / 1e9))
            else:
                shutil.rmtree(dl, ignore_errors=True)
                os.makedirs(dl)
                if side == 'curl':
                    jobs = [['curl', '-s', '--fail', '-o', os.path.join(dl, nm), emu.url(nm)]
                            for nm in a.names]
                    secs, cpu = curl_pool(jobs, a.n)
                    cu.append(secs)
                    cucpu.append(cpu / (a.total / 1e9))
                else:
                    secs, _ = curl_pool(range_jobs(a, emu, a.n, dl), a.n)
                    cr.append(secs)
                shutil.rmtree(dl)
    s, c, r = a.total / 1e6 / med(sf), a.total / 1e6 / med(cu), a.total / 1e6 / med(cr)
    emit('L1. prefetch %d MB in %d shards vs curl per shard, %d at a time, to files' % (
        a.total // 1000000, len(a.names), a.n), 'defaults', s, c, 'MB/s', s / c, '>= 0.95', 0.95)
    emit('L1. prefetch %d MB vs %d curl ranges (same connection count), to files' % (
        a.total // 1000000, a.n), 'defaults', s, r, 'MB/s', s / r, 'report')
    sc, cc = med(sfcpu), med(cucpu)
    emit('L4. CPU s per GB filled: daemon (prefetch) vs curl to files (per shard)', 'defaults',
         sc, cc, 'cpu s/GB', cc / sc, '<= 1.2x curl (>= 0.83)', 1 / 1.2)


def w_cat(a, emu):
    if not shutil.which('aria2c'):
        log('aria2c not installed (scripts/install-deps.sh --bench): the cat row is skipped')
        return
    x = min(a.n, 16)  # aria2c allows at most 16 connections per server
    dl = os.path.join(a.w, 'dl')
    nm = a.names[len(a.names) // 2]
    sf, ar = [], []
    for i in range(max(a.runs, 5)):  # a fraction of a second each: noisy
        for side in (('sf', 'aria') if i % 2 == 0 else ('aria', 'sf')):
            settle()
            if side == 'sf':
                m = Mount(a, emu.url(a.brace))
                t = time.monotonic()
                sh(['cat', os.path.join(m.mnt, nm)], stdout=subprocess.DEVNULL)
                sf.append(time.monotonic() - t)
                m.umount()
            else:
                shutil.rmtree(dl, ignore_errors=True)
                os.makedirs(dl)
                t = time.monotonic()
                sh(['aria2c', '-q', '-x', str(x), '-s', str(x), '-k', '1M',
                    '--file-allocation=none', '--allow-overwrite=true', '-d', dl, '-o', nm,
                    emu.url(nm)])
                ar.append(time.monotonic() - t)
                shutil.rmtree(dl)
    size = a.sizes[nm]
    s, r = size / 1e6 / med(sf), size / 1e6 / med(ar)
    emit('L2. cat of one %d MB shard, fresh mount, vs aria2c -x %d -s %d' % (
        size // 1000000, x, x), 'defaults', s, r, 'MB/s', s / r, '>= 1.0', 1.0)


def w_readers4(a, emu):
    import random
    rnd = random.Random(4)
    sf, cu = [], []
    for i in range(a.runs):
        order = list(a.names)
        rnd.shuffle(order)
        groups = [order[k::4] for k in range(4)]
        for side in (('sf', 'curl') if i % 2 == 0 else ('curl', 'sf')):
            settle()
            if side == 'sf':
                m = Mount(a, emu.url(a.brace))
                t = time.monotonic()
                ps = [subprocess.Popen(['cat'] + [os.path.join(m.mnt, n) for n in g],
                                       stdout=subprocess.DEVNULL) for g in groups]
                for p in ps:
                    p.wait()
                sf.append(time.monotonic() - t)
                m.umount()
            else:
                jobs = []
                for g in groups:
                    cmd = ['curl', '-s', '--fail']
                    for j, n in enumerate(g):
                        cmd += ['-o', '/dev/null', emu.url(n)]
                    jobs.append(cmd)
                secs, _ = curl_pool(jobs, 4)
                cu.append(secs)
    s, c = a.total / 1e6 / med(sf), a.total / 1e6 / med(cu)
    emit('L3. 4 readers of whole random shards (%d each), fresh mount, vs 4 curl' % (
        len(a.names) // 4), 'defaults', s, c, 'MB/s', s / c, '>= 1.0', 1.0)


EPOCH = r'''
import sys, time
import torch
from torchvision import datasets, transforms
t = time.monotonic()
ds = datasets.ImageFolder(sys.argv[1], transform=transforms.PILToTensor())
dl = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=2, shuffle=True)
n = 0
for x, _ in dl:
    n += len(x)
print('%d %.4f' % (n, time.monotonic() - t))
'''


def epoch(root):
    """(samples, seconds) of one epoch over root: ImageFolder built inside the timing, torch
    imported before it."""
    p = subprocess.run([PY, '-', root], input=EPOCH, stdout=subprocess.PIPE, text=True,
                       check=True)
    n, secs = p.stdout.split()
    return int(n), float(secs)


def w_imagefolder(a, emu):
    ext = os.path.join(a.w, 'extract')
    dl = os.path.join(a.w, 'dl')
    sf, base = [], []
    detail = []
    for i in range(a.runs):
        for side in (('sf', 'base') if i % 2 == 0 else ('base', 'sf')):
            settle()
            if side == 'sf':
                m = Mount(a, emu.url(a.brace), ('--layout', 'imagefolder'))
                n, secs = epoch(m.mnt)
                fetched = int(m.stat('bytes_fetched'))
                m.umount()
                sf.append(m.mount_s + secs)
                log('imagefolder shardfs: mount %.2f s + epoch %.2f s (%d samples), fetched %d'
                    % (m.mount_s, secs, n, fetched))
            else:
                for d in (ext, dl):
                    shutil.rmtree(d, ignore_errors=True)
                    os.makedirs(d)
                jobs = [['curl', '-s', '--fail', '-o', os.path.join(dl, nm), emu.url(nm)]
                        for nm in a.names]
                t_dl, _ = curl_pool(jobs, a.n)
                t = time.monotonic()
                # the class folders first: 8 tars at once each creating them race (ENOENT)
                for c in range(10):
                    os.makedirs(os.path.join(ext, 'c%02d' % c))
                # members CLASS_NAME.jpg (+ .cls): into CLASS/NAME.jpg, as ImageFolder reads
                ps = [subprocess.Popen(['tar', '-x', '-C', ext, '-f', os.path.join(dl, nm),
                                        '--exclude', '*.cls',
                                        '--transform', r's,^\(c[0-9]*\)_,\1/,'])
                      for nm in a.names]
                for p in ps:
                    if p.wait() != 0:
                        raise RuntimeError('tar failed')
                t_x = time.monotonic() - t
                n2, secs = epoch(ext)
                base.append(t_dl + t_x + secs)
                log('imagefolder baseline: curl %.2f s + tar x %.2f s + epoch %.2f s (%d)'
                    % (t_dl, t_x, secs, n2))
                detail.append(secs)
                shutil.rmtree(ext)
                shutil.rmtree(dl)
    s, b = med(sf), med(base)
    emit('L5. cold ImageFolder epoch, shuffle, 2 workers, vs curl + tar x + epoch on disk',
         '--layout imagefolder', s, b, 's', b / s, '>= 1.25', 1.25)


def w_smallcache(a, emu):
    size = '%dM' % (a.total // 4 // 1048576)
    ratios, rates, bounds = [], [], []
    for _ in range(a.runs):
        settle()
        m = Mount(a, emu.url(a.brace), ('--layout', 'imagefolder', '--cache-size', size))
        # the mount read every shard once to index it (no sidecars): the epoch's own bytes
        f0, r0 = int(m.stat('bytes_fetched')), int(m.stat('read_bytes'))
        n, secs = epoch(m.mnt)
        fetched = int(m.stat('bytes_fetched')) - f0
        read = int(m.stat('read_bytes')) - r0
        log('smallcache: the mount fetched %d to index the shards' % f0)
        evicted = int(m.stat('evicted_bytes'))
        m.umount()
        ratios.append(fetched / max(read, 1))
        rates.append(n / secs)
        # the link's time for the bytes the epoch reads, N connections at --rate-mb each
        bounds.append(n / (read / (a.n * a.rate_mb * 1e6)))
        log('smallcache: epoch %.2f s (%d samples, %.0f/s), read %d, fetched %d (%.2fx), '
            'evicted %d' % (secs, n, n / secs, read, fetched, fetched / max(read, 1), evicted))
    emit('L5b. cold shuffled ImageFolder epoch, --cache-size 1/4 of the data: bytes fetched / '
         'bytes read', '--layout imagefolder --cache-size ' + size, med(ratios), None, 'x',
         med(ratios), '<= 2.0')
    emit('L5c. its rate vs the link\'s rate for the bytes it reads (N x rate)',
         '--layout imagefolder --cache-size ' + size, med(rates), med(bounds), 'samples/s',
         med(rates) / med(bounds), 'report')


EPOCHS = r'''
import os, sys, time
import torch
from torchvision import datasets, transforms
sys.path.insert(0, sys.argv[4])
import shardfs
ds = datasets.ImageFolder(sys.argv[1], transform=transforms.PILToTensor())
dl = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=2, shuffle=True)
if sys.argv[2] == '1':
    shardfs.plan_dataloader(dl, strict=True)
for e in range(int(sys.argv[3])):
    t, c = time.monotonic(), sum(os.times()[:4])
    n = 0
    for x, _ in dl:
        n += len(x)
    # CPU of this process and its DataLoader workers (joined at the epoch's end)
    print('%d %.4f %.3f' % (n, time.monotonic() - t, sum(os.times()[:4]) - c), flush=True)
    # the mount's counters between epochs (read by the parent on this line)
    sys.stdin.readline()
'''


STORE_FILES = []  # the store's shard files: warm in the page cache again after a drop


def drop_caches():
    """Drop the kernel's page cache (root only), then read the store's files again: the next
    epoch reads through the mount, the store still answers from memory."""
    try:
        os.sync()
        with open('/proc/sys/vm/drop_caches', 'w') as f:
            f.write('3\n')
    except OSError:
        return
    for p in STORE_FILES:
        sh(['cat', p], stdout=subprocess.DEVNULL)


def epochs_in(m, plan, n, emu=None):
    """Run n epochs over mount m (plan: with plan_dataloader); per epoch (samples, seconds,
    bytes fetched, bytes read, CPU seconds of the loader (process and workers), of the daemon,
    of the emulator (0 without emu))."""
    p = subprocess.Popen([PY, '-c', EPOCHS, m.mnt, '1' if plan else '0', str(n),
                          os.path.join(ROOT, 'python')], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    out = []
    keys = ('bytes_fetched', 'read_bytes', 'cache_misses', 'cache_hits', 'prefetch_withdrawn')
    c0 = [int(m.stat(k)) for k in keys]

    def cpus():
        return proc_cpu(m.pid), proc_cpu(emu.p.pid) if emu else 0.0

    u0 = cpus()
    for _ in range(n):
        k, secs, lcpu = p.stdout.readline().split()
        c1, u1 = [int(m.stat(k)) for k in keys], cpus()
        out.append((int(k), float(secs), c1[0] - c0[0], c1[1] - c0[1], float(lcpu),
                    u1[0] - u0[0], u1[1] - u0[1]))
        log('epoch: %s samples, %s s; %s; CPU s: loader %s, daemon %.2f, emulator %.2f' % (
            k, secs, ', '.join('%s %d' % (keys[i], c1[i] - c0[i]) for i in range(len(keys))),
            lcpu, u1[0] - u0[0], u1[1] - u0[1]))
        c0 = c1
        # the next epoch reads through the mount, not the kernel's page cache of the files
        # the last one read (as on a node whose RAM holds less than the data set)
        drop_caches()
        u0 = cpus()
        p.stdin.write('\n')
        p.stdin.flush()
    if p.wait() != 0:
        raise RuntimeError('epochs failed')
    return out


def w_plan(a, emu):
    size = '%dM' % (a.total // 4 // 1048576)
    opts = ('--layout', 'imagefolder', '--cache-size', size)
    res, locals_, local_cpu = {}, [], []

    def local_epoch():
        settle()
        drop_caches()
        lm = Mount(a, a.shard_dir, ('--layout', 'imagefolder'))
        e = epochs_in(lm, False, 1)[0]
        locals_.append(e[1])
        local_cpu.append(e[4] + e[5])
        lm.umount()

    # the local-source epoch right before and after the planned side: the machine's load
    # then is the planned epoch's
    local_epoch()
    for side in ('plan', 'none'):
        settle()
        drop_caches()
        m = Mount(a, emu.url(a.brace), opts)
        res[side] = epochs_in(m, side == 'plan', 2, emu)
        log('%s: epochs %s, plan_fetch_bytes %s, evicted %s' % (
            side, res[side], m.stat('plan_fetch_bytes'), m.stat('evicted_bytes')))
        m.umount()
        if side == 'plan':
            local_epoch()
    lk = (None, med(locals_))
    pl, no = res['plan'], res['none']
    link_s = pl[0][3] / (a.n * a.rate_mb * 1e6)
    bound = max(link_s, lk[1])
    log('plan bound: link %.2f s for %d bytes, local-source epochs %s s' % (link_s, pl[0][3],
                                                                          locals_))
    o = '--layout imagefolder --cache-size ' + size
    emit('L7a. cold shuffled epoch, cache 1/4 of the data: with the sampler\'s plan vs without',
         o, pl[0][1], no[0][1], 's', no[0][1] / pl[0][1], '>= 3', 3)
    emit('L7b. the planned cold epoch vs max(link time for its bytes %.1f s, local-source epoch '
         '%.1f s)' % (link_s, lk[1]), o, pl[0][1], bound, 's', bound / pl[0][1], '>= 0.9', 0.9)
    emit('L7c. second epoch, new permutation, cache holding part: with plan vs without', o,
         pl[1][1], no[1][1], 's', no[1][1] / pl[1][1], 'report')
    # the machine's 2 cores run the loader (decoding), the daemon and the emulator: their CPU
    # over the cores is as short as the epoch can be on this machine
    ncpu = os.cpu_count() or 1
    cpu = pl[0][4] + pl[0][5] + pl[0][6]
    emit('L7e. CPU of the planned cold epoch over %d cores: loader %.1f s, daemon %.1f s, '
         'emulator %.1f s (the local-source epoch: %.1f s) vs the epoch' % (
             ncpu, pl[0][4], pl[0][5], pl[0][6], med(local_cpu)), o, cpu / ncpu, pl[0][1], 's',
         cpu / ncpu / pl[0][1], 'report')
    for i in (0, 1):
        for side, r in (('with', pl), ('without', no)):
            emit('L7d. bytes fetched / bytes read, epoch %d %s the plan' % (i + 1, side), o,
                 r[i][2] / max(r[i][3], 1), None, 'x', r[i][2] / max(r[i][3], 1),
                 '<= 2.0' if side == 'without' else 'report')


def schedule_bound(a, c, rate_mb):
    """MB/s of a perfect fill of the data set by c connections at rate_mb each, whole chunks
    of --chunk-size in prefetch order, each paying the per-request delay: the most any
    chunked fill can reach on this link (the rest of C x rate is lost to the delay and to
    the last round of chunks)."""
    import heapq
    free = [0.0] * c
    end = 0.0
    for nm in a.names:
        size = a.sizes[nm]
        for off in range(0, size, a.chunk):
            t = heapq.heappop(free) + a.delay_ms / 1000 + min(a.chunk, size - off) / (rate_mb * 1e6)
            end = max(end, t)
            heapq.heappush(free, t)
    return a.total / 1e6 / end


def w_scaling(a):
    emu = Emu(a.shard_dir, a.delay_ms, a.scale_rate_mb, a.w, 'scale')
    ncpu = os.cpu_count()
    try:
        for c in a.scale:
            res = []
            for _ in range(max(1, a.runs - 1)):
                settle()
                b0 = machine_busy()
                e0 = proc_cpu(emu.p.pid)
                secs, cpu, fetched, m = prefetch_once(a, emu, ('--connections', str(c)))
                b1 = machine_busy()
                e1 = proc_cpu(emu.p.pid)
                m.umount()
                busy = 100 * ncpu * (b1[0] - b0[0]) / max(1, b1[1] - b0[1])
                d, e = 100 * cpu / secs, 100 * (e1 - e0) / secs
                res.append((fetched / 1e6 / secs, 'daemon %.0f%% (busiest thread %.0f%%, and '
                            '%.0f%% waiting for a CPU), emulator %.0f%%, others %.0f%% of %d '
                            'cores' % (d, 100 * m.busiest[0], 100 * m.busiest[1], e,
                                       max(0, busy - d - e), ncpu)))
                log('scaling %d: %.0f MB/s; %s' % (c, res[-1][0], res[-1][1]))
            res.sort()
            r, note = res[len(res) // 2]
            want = c * a.scale_rate_mb
            bound = schedule_bound(a, c, a.scale_rate_mb)
            emit('L6. scaling: prefetch, %d conns x %g MB/s (chunked bound %.0f MB/s; cpu: %s)'
                 % (c, a.scale_rate_mb, bound, note), '--connections %d' % c, r, want, 'MB/s',
                 r / want, '>= 0.9 of C x rate', 0.9)
    finally:
        emu.stop()


def default_of(bin_, opt):
    out = subprocess.run([bin_, 'mount', '--help'], stdout=subprocess.PIPE, text=True).stdout
    return re.search(r'--%s \S+ .*\(default: (\w+)\)' % opt, out).group(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('bin')
    ap.add_argument('--quick', action='store_true')
    ap.add_argument('--runs', type=int)
    ap.add_argument('--delay-ms', type=float, default=30)
    ap.add_argument('--rate-mb', type=float, default=60)
    ap.add_argument('--scale-rate-mb', type=float, default=8)
    ap.add_argument('--scale', default='8,16,32,64')
    ap.add_argument('--connections', type=int, help='N (default: the mount\'s default)')
    ap.add_argument('--only', default=','.join(ROWS))
    ap.add_argument('--mount-opts', default='', help='extra options of every shardfs mount '
                    '(experiments; the rows then say so)')
    ap.add_argument('--data', help='where the data set is kept between runs (default '
                    '/var/tmp/shardfs-linkbench-MB)')
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    a.runs = a.runs or 3
    a.shards = 8
    a.shard_mb = 64 if a.quick else 128
    a.scale = [int(x) for x in a.scale.split(',')]
    a.data = a.data or '/var/tmp/shardfs-linkbench-%d' % (a.shards * a.shard_mb)
    a.n = a.connections or int(default_of(a.bin, 'connections'))
    ck = default_of(a.bin, 'chunk-size')
    a.chunk = int(ck[:-1]) << {'K': 10, 'M': 20, 'G': 30}[ck[-1]]
    a.mount_opts = a.mount_opts.split()
    MOUNT_OPTS[:] = a.mount_opts
    only = set(a.only.split(','))
    a.w = tempfile.mkdtemp(prefix='shardfs-link-', dir='/var/tmp')
    try:
        a.shard_dir, a.names = make_dataset(a)
        a.sizes = {n: os.path.getsize(os.path.join(a.shard_dir, n)) for n in a.names}
        a.total = sum(a.sizes.values())
        a.brace = brace(a.names)
        STORE_FILES[:] = [os.path.join(a.shard_dir, n) for n in a.names]
        for p in STORE_FILES:  # the store's files warm in the page cache
            sh(['cat', p], stdout=subprocess.DEVNULL)
        log('link: %g ms per request, %g MB/s per connection; N = %d connections; %d MB in %d '
            'shards' % (a.delay_ms, a.rate_mb, a.n, a.total // 1000000, len(a.names)))
        print('link: delay %g ms per request, %g MB/s per connection (scaling: %g MB/s); '
              'N = %d; data %d bytes in %d shards' % (a.delay_ms, a.rate_mb, a.scale_rate_mb,
                                                      a.n, a.total, len(a.names)), flush=True)
        emu = Emu(a.shard_dir, a.delay_ms, a.rate_mb, a.w, 'main')
        try:
            for name, fn in (('emulator', w_emulator), ('prefetch', w_prefetch),
                             ('cat', w_cat), ('readers4', w_readers4),
                             ('imagefolder', w_imagefolder), ('smallcache', w_smallcache),
                             ('plan', w_plan)):
                if name in only:
                    log(name)
                    fn(a, emu)
        finally:
            emu.stop()
        if 'scaling' in only:
            log('scaling')
            w_scaling(a)
    finally:
        mnt = os.path.join(a.w, 'mnt')
        if os.path.ismount(mnt):
            subprocess.run([a.bin, 'umount', mnt])
        shutil.rmtree(a.w, ignore_errors=True)


if __name__ == '__main__':
    main()
