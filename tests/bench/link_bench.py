"""Remote-store rows on an emulated real link (shardfs_test.linkemu): every request waits --delay-ms
before its response starts, every connection is capped at --rate-mb MB/s. Not a test: it
prints figures and ratios against baselines measured in the same run, alternating.

    /usr/bin/python3 tests/bench/link_bench.py BIN [--quick] [--size-mb MB] [--runs N]
        [--delay-ms 30] [--rate-mb 60] [--scale-rate-mb 8] [--scale 8,16,32,64] [--only LIST]
        [--plan-loaders bytes,jpeg] [--bytes-read read_bytes|read_file|open] [--skip-unplanned]
        [--epoch-timeout 1800]

The data set: a class-folder tree of 100 KB JPEGs packed by `shardfs pack` into 8 shards
(about 1 GB; --quick: 512 MB; --size-mb: any size, the same shape), sidecar indexes removed (shards as found in a bucket), served
from the emulator as http://127.0.0.1:PORT/train-{000000..000007}.tar. N is the mount's
default --connections (read from `shardfs mount --help`). Every shardfs side mounts with
the default options (plus --cache-dir, a new one per run; the scaling rows add --connections
C) and every baseline writes to the same disk as the cache.

Rows (each printed as a tab-separated line "row<TAB>workload<TAB>options<TAB>shardfs<TAB>
baseline<TAB>unit<TAB>ratio<TAB>goal<TAB>goal_ge"; lib_bench.py puts them in the table):
  emulator   N curl to /dev/null vs N x rate: the emulator is not the bottleneck (reference);
             L0a one curl vs the rate (the kernel's pacing holds); L0b the emulator's CPU per
             100 KB request, the C one (tests/lib/linkemu.c) vs the Python one it replaced;
             every run ends with L0c, the emulator's CPU per request over the run, and notes
             of its requests, bytes and CPU per group of rows; with --emu-base EXE, L0d this
             emulator's CPU per 135 KB request vs EXE's (another build), side by side
             under the same load (--only emuab runs it alone)
  prefetch   `shardfs prefetch MNT` of the whole data set vs the shards downloaded by curl,
             N at a time (xargs -P N), to files (goal >= 0.95); and vs N curl range requests
             covering the data set, the same connection count (report)
  cpu        CPU seconds per GB of that prefetch (the daemon's user+system from /proc/PID/stat)
             vs curl's (its rusage) writing the same bytes to files (goal <= 1.2x)
             L4 floor: the machine's floor in the same invocation, a side of each round:
             tests/bench/splice_bench.c's recv mode (recv + pwrite + CRC32C, two threads, one
             connection of 8 MiB ranged GETs from the same emulator, a file on the cache's
             file system), its CPU s per GB; ratio: the daemon's L4 over it; L4 floor
             unpaced: the same from a second emulator with no delay and no pacing
  cat        `cat` of one shard through a fresh mount vs `aria2c -x N -s N` of it (goal >= 1);
             L2b the daemon's CPU s per GB of that cold cat (report)
  readers4   4 processes each reading whole random shards (2 each) through a fresh mount vs 4
             curl processes doing the same (goal >= 1)
  imagefolder a cold epoch: mount --layout imagefolder + ImageFolder + DataLoader(shuffle=True,
             num_workers=2) vs N-parallel curl of every shard + tar x + the same epoch on the
             extracted tree (goal >= 1.25; ratio: baseline time / shardfs time)
  smallcache a cold shuffled epoch (as imagefolder) with --cache-size a quarter of the data set:
             bytes fetched / bytes read during the epoch (the mount's index build before it is
             logged; goal <= 2: random misses fill only their units), and
             the epoch's rate vs the link's rate for the bytes it reads (N x rate; report)
  plan       the sampler's plan (python/shardfs plan_dataloader; docs/reading.md "Reading
             plans"), --layout imagefolder --cache-size a quarter of the data set, DataLoader
             (shuffle=True, num_workers=2), the page cache dropped before every epoch (root),
             for two loaders: L8 only reads each file's bytes as a loader that decodes on the
             GPU reads them (python/shardfs's read_bytes: one read(2) of the whole file, one
             READ a sample and no IOCTL; --bytes-read read_file: torchvision.io.read_file, a
             mapped read whose munmap costs the loader and the other core a TLB flush on this
             VM; open: Python's buffered open(), an isatty() IOCTL a sample more), L7 decodes
             each JPEG with PIL (as
             ImageFolder's default loader: buffered open()). Per loader: one epoch on a fresh
             mount of the shards' local directory (the baseline), two epochs (a new
             permutation each) in one mount with the plan, the local epoch again, two without
             the plan.
             a: cold epoch without / with the plan (>= 3); b: the planned cold epoch vs the
             local-directory epoch (L8b >= 0.8, issue 25), vs max(link time for its bytes,
             local epoch) (L7b >= 0.9, issue 14); c: second epoch vs without and vs local
             (report); d: bytes fetched / read per epoch (planned cold <= 1.6, unplanned
             <= 2.0); e: CPU of loader + daemon + emulator over the cores vs the epoch (the
             CPU-bound ceiling; report); f: requests to the store per sample (report); g:
             daemon CPU s per GB read (<= 1.5) and vs the local epoch's (g local: that
             figure alone; L8g floor: the lean serving model, tests/bench/floor_bench.c, a
             ranged GET a sample on N connections, recv into memory, write into a pipe read
             by another thread, the same emulator and samples, once after the planned side:
             its CPU s per GB, the ratio L8g's daemon over it); h: daemon context
             switches (voluntary + involuntary, of its threads) per GB vs the local epoch's
             (<= 1.5x; notes: the FUSE requests and switches per sample of each epoch; L8 open:
             one more local-directory epoch read with buffered open() after the rows, its time
             and switches per sample vs the local epochs', report); i: the time readers
             waited (cache_miss_wait_ms) in the planned epoch;
             j: the whole machine's busy CPU-s (/proc/stat) of the planned cold epoch vs the
             local epochs' (report), with notes of each epoch's budget (the columns; by
             process: loader and its workers, daemon, emulator, bench, other; idle) and of
             the gap between them part by part.
             Figures behind the rows print as "note" lines; each epoch's log line is followed
             by the daemon's CPU by thread name (shardfs-io: the store's I/O loop, fills'
             bytes and ends; shardfs-fill: claims and evictions; shardfs: the FUSE threads).
             L9 (w_plan_ais_getbatch): the
             planned cold epoch (bytes only) over ais:// from the AIStore stand-in on the
             same link (its own delay and pacing for listing, HEADs and GetBatch; object
             GETs redirected to the files) with GetBatch vs without (ranged GETs), as a
             ratio (report). The stand-in is the C emulator with --ais (--ais-standin c,
             the default) or the Python AisStandIn in this process (python); c,python and
             --ais-rounds N alternate them, N rounds, each row labelled. `--only
             getbatch` (or `--only plan --plan-loaders ''`) runs L9 alone; with plan in
             --only it runs once, after the plan rows. Each side's notes give the daemon's
             peak resident set (VmHWM) and the stage's peak (--plan-memory's cost).
  readers64  (only with --only) L8k: 64 readers on one mount, each with a plan of its own
             (a shuffled 64th of the --layout imagefolder samples), a cold pass: MB/s, the
             daemon's CPU and peak resident set, the stage's peak, the waits (report)
  scaling    `shardfs prefetch` with --connections 8, 16, 32, 64 on an emulator at
             --scale-rate-mb per connection: MB/s vs C x rate (goal >= 0.9), with the CPU use
             of the daemon, the emulator and the machine (what limits it)

Environment: SHARDFS_BENCH_DROP=files drops not the machine's page cache (drop_caches) but only
this run's own files' pages (its cache directories' files), for a machine shared with other
work: the cold epochs (L8g) are measured as before; a second epoch on one mount and the warm cat
after L2b then read the mount's page cache (drop_own_files).
"""
import argparse
import os
import re
import resource
import select
import shutil
import signal
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


def stat_cpu(path):
    """(name, user + system seconds) from a /proc stat file (a process's or a thread's)."""
    with open(path) as f:
        s = f.read()
    fields = s.rsplit(')', 1)[1].split()
    return s[s.index('(') + 1:s.rindex(')')], (int(fields[11]) + int(fields[12])) / HZ


def proc_cpu(pid):
    """user + system seconds of a process (all its threads)."""
    return stat_cpu('/proc/%d/stat' % pid)[1]


def proc_minflt(pid):
    """minor page faults of a process (all its threads) so far."""
    with open('/proc/%d/stat' % pid) as f:
        return int(f.read().rsplit(')', 1)[1].split()[7])


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

def proc_rss(pid):
    """(VmHWM, VmRSS) of process pid in bytes; (-1, -1) when /proc cannot say."""
    v = {}
    try:
        with open('/proc/%d/status' % pid) as f:
            for line in f:
                k, _, rest = line.partition(':')
                if k in ('VmHWM', 'VmRSS'):
                    v[k] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return v.get('VmHWM', -1), v.get('VmRSS', -1)



REPORTED_KIB = '/sys/module/page_reporting/parameters/reported_kib'


def reported_kib():
    """KiB this VM's free page reporting has given back to the host so far (its balloon's
    VIRTIO_BALLOON_F_REPORTING), or None where the kernel has no such counter."""
    try:
        with open(REPORTED_KIB) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None

class Mount:
    def __init__(self, a, src, extra=()):
        self.a = a
        self.mnt = os.path.join(a.w, 'mnt')
        self.cache = os.path.join(a.w, 'cache')
        shutil.rmtree(self.cache, ignore_errors=True)
        os.makedirs(self.mnt, exist_ok=True)
        t = time.monotonic()
        sh([a.bin, 'mount', '--cache-dir', self.cache, *a.mount_opts, *extra, src, self.mnt],
           timeout=600)
        self.mount_s = time.monotonic() - t
        self.pid = int(self.stat('pid'))

    def stats(self):
        with open(os.path.join(self.mnt, '.shardfs/stats')) as f:
            return f.read()

    def stat(self, key):
        v = self.stat_or(key, None)
        if v is None:
            raise KeyError('the mount has no counter %s' % key)
        return v

    def stat_or(self, key, default):
        """The counter key's value (str), or default when this build has no such counter."""
        v = re.search(r'"%s":\s*"?([^",}]*)' % key, self.stats())
        return v.group(1).strip() if v else default

    def umount(self):
        unmount(self.a.bin, self.mnt)
        shutil.rmtree(self.cache, ignore_errors=True)


def mounted(path):
    """Whether path is a mountpoint now (/proc/self/mountinfo: also a FUSE mount whose daemon
    died, which os.path.ismount cannot stat)."""
    with open('/proc/self/mountinfo') as f:
        return any(ln.split()[4] == path for ln in f)


def unmount(bin_, mnt, timeout=60):
    """`shardfs umount` of mnt (it stops a daemon whose mount is busy), within timeout
    seconds; then, if still mounted (the daemon hung or died), a lazy `umount -l`."""
    try:
        subprocess.run([bin_, 'umount', mnt], stdout=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired:
        log('shardfs umount %s took more than %d s' % (mnt, timeout))
    if mounted(mnt):
        log('%s still mounted: umount -l' % mnt)
        subprocess.run(['umount', '-l', mnt], timeout=timeout)


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
        try:
            make_tree_and_pack(a, d)
        except BaseException:  # interrupted or failed: no half data set left behind
            shutil.rmtree(a.data, ignore_errors=True)
            raise
        open(done, 'w').close()
    names = sorted(f for f in os.listdir(d) if f.endswith('.tar'))
    return d, names


def make_tree_and_pack(a, d):
    """The class-folder tree of JPEGs under a.data, packed into d by shardfs pack (the tree
    removed after)."""
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


def w_emulator_rate(a, emu):
    """One curl of a 64 MB range to /dev/null: the pace of one connection (the kernel's TCP
    pacing at SO_MAX_PACING_RATE; lo has no qdisc here, fq is not needed for it). A ratio
    near 1 and never much above it: the cap holds."""
    nm = a.names[0]
    n = min(a.sizes[nm], 64 * 1000 * 1000)
    rates = []
    for _ in range(a.runs):
        t, _ = curl_pool([['curl', '-s', '--fail', '-o', '/dev/null', '-r', '0-%d' % (n - 1),
                           emu.url(nm)]], 1)
        rates.append(n / 1e6 / t)
    r = med(rates)
    note('emulator, one connection: %s MB/s (runs), cap %g MB/s' % (
        ' '.join('%.1f' % x for x in rates), emu.rate_mb))
    emit('L0a. link emulator: one curl of a %d MB range to /dev/null vs the per-connection '
         'rate' % (n // 1000000), 'no mount', r, emu.rate_mb, 'MB/s', r / emu.rate_mb,
         'reference (about 1: the pace holds)')


EMU_LOAD = r'''
import http.client, sys, threading
port, conns, per, size, names = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), sys.argv[5].split(',')
def run(k):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=120)
    for j in range(per):
        nm = names[(k + j) % len(names)]
        off = ((k * per + j) * 7919 * size) % (50 * 1000 * 1000)
        c.request('GET', '/' + nm, headers={'Range': 'bytes=%d-%d' % (off, off + size - 1)})
        r = c.getresponse()
        if r.status != 206 or len(r.read()) != size:
            sys.exit('bad answer')
ts = [threading.Thread(target=run, args=(k,)) for k in range(conns)]
for t in ts: t.start()
for t in ts: t.join()
'''


def w_emulator_cpu(a, emu):
    """The emulator's CPU per request, C (tests/lib/linkemu.c) against the Python emulator it
    replaced (linkemu.py), in one run, sides alternating (3 rounds, median): N keep-alive
    connections each sending 100 KB range requests one after the other (the planned epoch's
    shape), the same requests to each; its CPU from /proc (the Python one's threads
    included), user and system apart: system time is mostly the kernel's TCP over loopback,
    which swings with the machine's load (a busy machine's softirq work lands on whoever runs)."""
    per, size = 60, 100000
    res = {'c': [], 'python': []}
    for i in range(3):
        for impl in (('c', 'python') if i % 2 == 0 else ('python', 'c')):
            e = emu if impl == 'c' else Emu(a.shard_dir, a.delay_ms, a.rate_mb, a.w, 'py',
                                            impl='python')
            try:
                (u0, s0), r0 = e.cpu_split(), e.stats()['requests']
                sh([PY, '-c', EMU_LOAD, str(e.port), str(a.n), str(per), str(size),
                    ','.join(a.names)])
                (u1, s1), r1 = e.cpu_split(), e.stats()['requests']
            finally:
                if e is not emu:
                    e.stop()
            n = max(r1 - r0, 1)
            res[impl].append(((u1 - u0 + s1 - s0) / n * 1e6, (u1 - u0) / n * 1e6))
            log('emulator %s: %d requests, %.3f CPU s (user %.3f): %.0f us per request (user '
                '%.0f)' % (impl, r1 - r0, u1 - u0 + s1 - s0, u1 - u0, res[impl][-1][0],
                           res[impl][-1][1]))
    c, py = med([x[0] for x in res['c']]), med([x[0] for x in res['python']])
    cu, pu = med([x[1] for x in res['c']]), med([x[1] for x in res['python']])
    note('emulator CPU per 100 KB request: C %.0f us (user %.0f), Python %.0f us (user %.0f); '
         'load average %s' % (c, cu, py, pu, loadavg()))
    emit('L0b. link emulator CPU per 100 KB request, %d connections: C (linkemu.c) vs '
         'linkemu.py' % a.n, 'no mount', c, py, 'us/request', py / max(c, 1e-9),
         'reference (how many times cheaper)')
    emit('L0b. link emulator user CPU per 100 KB request (its own code; the rest is the '
         'kernel\'s), %d connections: C vs linkemu.py' % a.n, 'no mount', cu, pu,
         'us/request', pu / max(cu, 1e-9), 'reference')


def sched_cpu(pid):
    """A process's main thread's CPU seconds, exact (/proc/PID/schedstat: ns on a CPU; the
    C emulator has one thread)."""
    with open('/proc/%d/schedstat' % pid) as f:
        return int(f.read().split()[0]) / 1e9


def w_emulator_ab(a, emu):
    """With --emu-base EXE: this run's emulator against another build of it (EXE, e.g. main's)
    side by side: both on the shards at once, each with its own load generator (EMU_LOAD: N
    keep-alive connections of 135 KB range requests, the planned epoch's shape) started
    together, so the machine's load hits both alike; 5 rounds, CPU per request (schedstat)."""
    if not a.emu_base:
        return
    base = Emu(a.shard_dir, a.delay_ms, a.rate_mb, a.w, 'base', exe=a.emu_base, etag=a.etag)
    per, size = 150, 135000
    res = {'this': [], 'base': []}
    try:
        for _ in range(5):
            sides = (('this', emu), ('base', base))
            c0 = {k: (sched_cpu(e.p.pid), e.stats()['requests']) for k, e in sides}
            ps = [subprocess.Popen([PY, '-c', EMU_LOAD, str(e.port), str(a.n), str(per),
                                    str(size), ','.join(a.names)]) for _, e in sides]
            for p in ps:
                if p.wait() != 0:
                    raise RuntimeError('the load generator failed')
            for k, e in sides:
                n = max(e.stats()['requests'] - c0[k][1], 1)
                res[k].append((sched_cpu(e.p.pid) - c0[k][0]) / n * 1e6)
            log('emulators side by side: this %.1f us per request, --emu-base %.1f' % (
                res['this'][-1], res['base'][-1]))
    finally:
        stop_emu(base)
    t, b = med(res['this']), med(res['base'])
    note('emulator CPU per 135 KB request side by side, 5 rounds: this %s us, --emu-base (%s) '
         '%s us; load average %s' % (' '.join('%.1f' % x for x in res['this']), a.emu_base,
                                     ' '.join('%.1f' % x for x in res['base']), loadavg()))
    emit('L0d. link emulator CPU per 135 KB request, %d connections, side by side under the '
         'same load: this run\'s emulator vs --emu-base' % a.n, 'no mount', t, b, 'us/request',
         b / max(t, 1e-9), 'reference (how many times cheaper)')


def emu_note(what, s0, s1):
    """A note of the emulator's work and CPU between two /__stats answers."""
    rq, by = s1['requests'] - s0['requests'], s1['bytes_sent'] - s0['bytes_sent']
    cpu = s1['cpu_s'] - s0['cpu_s']
    usr = s1['cpu_user_s'] - s0['cpu_user_s']
    # its system time is mostly the kernel's TCP over loopback (sendfile's transmit runs the
    # receiving socket's protocol work too), which any emulator pays; user time is its own
    note('emulator during %s: %d requests, %.3f GB sent, %.2f CPU s (user %.2f): %.1f us per '
         'request (user %.1f), %.3f CPU s per GB' % (
             what, rq, by / 1e9, cpu, usr, cpu / max(rq, 1) * 1e6, usr / max(rq, 1) * 1e6,
             cpu / max(by / 1e9, 1e-9)))
    return rq, by, cpu


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


def floor_tool(a, name):
    """This tree's floor tool tests/bench/NAME.c (splice_bench: row L4 floor; floor_bench: L8g
    floor) built with cc into the run's work dir, once a run (the same tool for every side
    compare.sh runs, whatever commit's shardfs is measured); None, logged, where it does not
    build (the floor rows are then left out)."""
    tools = a.__dict__.setdefault('floor_tools', {})
    if name not in tools:
        exe = os.path.join(a.w, name)
        cmd = ['cc', '-O2', '-D_GNU_SOURCE', '-D_FILE_OFFSET_BITS=64', '-I', os.path.join(ROOT,
               'disk'), os.path.join(HERE, name + '.c')] + [
            os.path.join(ROOT, 'disk', f) for f in ('disk.c', 'disk_crc.c', 'disk_lock.c')] + [
            '-pthread', '-o', exe]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            log('%s did not build (its floor row is left out): %s' % (name, p.stdout[-2000:]))
            exe = None
        tools[name] = exe
    return tools[name]


def fill_floor(a, emu):
    """Row L4 floor's model, once: tests/bench/splice_bench.c's recv mode (a receiving thread
    recv()s 8 MiB ranged GETs of every shard, one connection, into 128 KiB buffers; a writing
    thread pwrite()s each into a file on the cache's file system and computes its CRC32C), on
    the run's emulator; its two threads' CPU-s per GB, or None without the tool."""
    exe = floor_tool(a, 'splice_bench')
    if not exe:
        return None
    out = os.path.join(a.w, 'floor-fill.data')
    try:
        p = subprocess.run([exe, str(emu.port), a.shard_dir, 'recv', out] + a.names,
                           stdout=subprocess.PIPE, text=True, timeout=600)
    finally:
        if os.path.exists(out):
            os.unlink(out)
    f = p.stdout.split()
    if p.returncode != 0 or 'MISMATCH' in p.stdout or int(f[f.index('bytes,') - 1]) != a.total:
        raise RuntimeError('splice_bench recv failed (rc %d): %s' % (p.returncode, p.stdout))
    log('L4 floor (splice_bench recv): %s' % p.stdout.strip())
    return float(f[3])


def prefetch_once(a, emu, extra=(), perf=False):
    """(seconds, daemon cpu seconds, bytes fetched, mount) of `shardfs prefetch` of everything
    through a fresh mount; the mount is left mounted for the caller's stats, and m.busiest
    says how the daemon's busiest thread spent the time: (on a CPU, waiting for one), as
    fractions of the prefetch's wall time. `--warm off`: with the default warm the mount
    starts filling the data set at once, and what it fetched before the prefetch began (up
    to most of it when perf took a second to start) counted in the GB but not in the CPU."""
    m = Mount(a, emu.url(a.brace), ('--warm', 'off') + tuple(extra))
    rec = perf_start(a, m.pid, 'prefetch', graph=True) if perf else None
    c0 = proc_cpu(m.pid)
    s0 = thread_sched(m.pid)
    w0, r0 = thread_switches(m.pid), int(m.stat('store_requests'))
    t = time.monotonic()
    sh([a.bin, 'prefetch', m.mnt], stdout=subprocess.DEVNULL)
    secs = time.monotonic() - t
    cpu = proc_cpu(m.pid) - c0
    perf_stop(rec)
    s1 = thread_sched(m.pid)
    m.switches = switches_note(w0, thread_switches(m.pid), int(m.stat('bytes_fetched')) / 1e9,
                               int(m.stat('store_requests')) - r0)
    run, wait = max((v[0] - s0.get(k, (0, 0))[0], v[1] - s0.get(k, (0, 0))[1])
                    for k, v in s1.items())
    m.busiest = (run / 1e9 / secs, wait / 1e9 / secs)
    fetched = int(m.stat('bytes_fetched'))
    return secs, cpu, fetched, m


def w_prefetch_rounds(a, emu, emu0, dl, sf, sfcpu, cu, cucpu, cr, fl, fl0, rep):
    """w_prefetch's rounds, the sides alternated; the lists get each round's figures, rep
    (side: [MiB]) the memory the VM gave back to its host over each side's run."""
    for i in range(max(a.runs, 5)):  # short runs; the CPU figures are noisy
        order = ('sf', 'curl', 'ranges', 'floor') if i % 2 == 0 else (
            'floor', 'ranges', 'curl', 'sf')
        for side in order:
            settle()
            k0 = reported_kib()
            w_prefetch_side(a, emu, emu0, dl, side, sf, sfcpu, cu, cucpu, cr, fl, fl0)
            k1 = reported_kib()
            if k0 is not None and k1 is not None:
                rep.setdefault(side, []).append((k1 - k0) / 1024)


def w_prefetch_side(a, emu, emu0, dl, side, sf, sfcpu, cu, cucpu, cr, fl, fl0):
    """One side of a w_prefetch round."""
    if side == 'floor':
        x = fill_floor(a, emu)
        if x is not None:
            fl.append(x)
            fl0.append(fill_floor(a, emu0))
    elif side == 'sf':
        secs, cpu, fetched, m = prefetch_once(a, emu)
        log('prefetch: %.2f s, %.0f MB/s, daemon %.2f cpu s, mount took %.2f s, '
            'fetched %d' % (secs, a.total / 1e6 / secs, cpu, m.mount_s, fetched))
        log('... daemon context switches by thread, voluntary+involuntary: %s' %
            m.switches)
        if '"store_pauses"' in m.stats():  # the fill writer's back-pressure
            log('... fill transfers paused %s, resumed %s, by the 1 s bound %s' % (
                m.stat('store_pauses'), m.stat('store_resumes'),
                m.stat('store_pause_backstops')))
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


def w_prefetch(a, emu):
    dl = os.path.join(a.w, 'dl')
    sf, sfcpu, cu, cucpu, cr, fl, fl0 = [], [], [], [], [], [], []
    if a.perf:  # an extra run under perf, not counted (perf's own cost is in the daemon's)
        settle()
        secs, cpu, fetched, m = prefetch_once(a, emu, perf=True)
        log('prefetch under perf (not counted): %.2f s, daemon %.2f cpu s' % (secs, cpu))
        m.umount()
    # L4 floor's model also on an emulator of the same files with no delay and no pacing: on
    # the paced link its one connection wakes its threads per segment (README, "The floor
    # rows"), which the daemon's loop over N connections does not pay
    emu0 = Emu(a.shard_dir, 0, 100000, a.w, 'floor', shardfs=a.bin, etag=a.etag)
    rep = {}
    try:
        w_prefetch_rounds(a, emu, emu0, dl, sf, sfcpu, cu, cucpu, cr, fl, fl0, rep)
    finally:
        stop_emu(emu0)
    s, c, r = a.total / 1e6 / med(sf), a.total / 1e6 / med(cu), a.total / 1e6 / med(cr)
    emit('L1. prefetch %d MB in %d shards vs curl per shard, %d at a time, to files' % (
        a.total // 1000000, len(a.names), a.n), '--warm off', s, c, 'MB/s', s / c, '>= 0.95', 0.95)
    emit('L1. prefetch %d MB vs %d curl ranges (same connection count), to files' % (
        a.total // 1000000, a.n), '--warm off', s, r, 'MB/s', s / r, 'report')
    sc, cc = med(sfcpu), med(cucpu)
    note('prefetch: daemon CPU s per GB filled %s; curl\'s per GB written %s' % (
        ' '.join('%.2f' % x for x in sfcpu), ' '.join('%.2f' % x for x in cucpu)))
    emit('L4. CPU s per GB filled: daemon (prefetch, %d MiB requests) vs the budget' % (
        a.chunk >> 20), '--warm off', sc, 0.7, 'cpu s/GB', 0.7 / sc, '<= 0.7 cpu s/GB (>= 1)',
         1.0)
    emit('L4. CPU s per GB filled: daemon (prefetch) vs curl to files (per shard)', '--warm off',
         sc, cc, 'cpu s/GB', cc / sc, 'report (issue 6: <= 1.2x curl, >= 0.83)')
    if rep:  # free page reporting: freed memory the host took back, dear at its next touch
        note('L4: memory the VM gave back to its host over each run (%s), MiB: %s' % (
            REPORTED_KIB, '; '.join('%s %s' % ({'sf': 'prefetch'}.get(k, k), ' '.join(
                '%.0f' % x for x in v)) for k, v in sorted(rep.items()))))
    if fl:  # the machine's floor in the same invocation: the daemon over the lean model
        fc = med(fl)
        note('prefetch: L4 floor (splice_bench recv) CPU s per GB %s' % ' '.join(
            '%.3f' % x for x in fl))
        emit('L4 floor. CPU s per GB filled: the lean fill model (splice_bench recv: recv, '
             'pwrite and CRC32C on two threads, one connection, the same emulator, data and '
             'disk); ratio: L4\'s daemon over it', '--warm off', fc, sc, 'cpu s/GB', sc / fc,
             'report (the daemon / the floor)')
        note('prefetch: L4 floor on an emulator with no delay and no pacing CPU s per GB %s' % (
            ' '.join('%.3f' % x for x in fl0)))
        emit('L4 floor unpaced. CPU s per GB filled: the same model on the same files and disk '
             'from an emulator with no delay and no pacing; ratio: L4\'s daemon over it',
             '--warm off', med(fl0), sc, 'cpu s/GB', sc / med(fl0),
             'report (the daemon / the floor)')


def w_cat(a, emu):
    aria = shutil.which('aria2c')
    if not aria:
        log('aria2c not installed (scripts/install-deps.sh --bench): row L2 is skipped')
    x = min(a.n, 16)  # aria2c allows at most 16 connections per server
    dl = os.path.join(a.w, 'dl')
    nm = a.names[len(a.names) // 2]
    sf, ar, cpu = [], [], []
    # with --perf, an extra run under perf first (i -1), not counted
    for i in range(-1 if a.perf else 0, max(a.runs, 5)):  # a fraction of a second each: noisy
        for side in (('sf', 'aria') if i % 2 == 0 else ('aria', 'sf')):
            if i < 0 and side == 'aria':
                continue
            if side == 'aria' and not aria:
                continue
            settle()
            if side == 'sf':
                m = Mount(a, emu.url(a.brace))
                rec = perf_start(a, m.pid, 'cat', graph=True) if i < 0 else None
                c0 = proc_cpu(m.pid)
                f0 = int(m.stat('bytes_fetched'))
                w0, r0 = thread_switches(m.pid), int(m.stat('store_requests'))
                t = time.monotonic()
                sh(['cat', os.path.join(m.mnt, nm)], stdout=subprocess.DEVNULL)
                sf.append(time.monotonic() - t)
                cpu.append((proc_cpu(m.pid) - c0) / (a.sizes[nm] / 1e9))
                perf_stop(rec)
                log('cat%s: %.2f s, daemon %.2f CPU s per GB, fetched %d' % (
                    ' under perf (not counted)' if rec else '', sf[-1], cpu[-1],
                    int(m.stat('bytes_fetched')) - f0))
                log('... daemon context switches by thread, voluntary+involuntary: %s' %
                    switches_note(w0, thread_switches(m.pid), a.sizes[nm] / 1e9,
                                  int(m.stat('store_requests')) - r0))
                # the same cat again from the cache (the page cache dropped): the reads' takes
                # of the tier's lock with a readahead window over units held (issue 37 #4)
                # (a base build of compare.sh may lack the counter: -1 then)
                k = ('reads', 'cache_read_locks', 'cache_misses')
                v0 = [int(m.stat_or(x, -1)) for x in k]
                drop_caches()
                sh(['cat', os.path.join(m.mnt, nm)], stdout=subprocess.DEVNULL)
                v1 = [int(m.stat_or(x, -1)) for x in k]
                log('... the same cat again from the cache: %d reads, %d misses, the tier\'s lock '
                    'taken %d times by reads (cache_read_locks; the cold cat: %d)' % (
                        v1[0] - v0[0], v1[2] - v0[2], v1[1] - v0[1], v0[1]))
                m.umount()
                if rec:
                    sf.pop()
                    cpu.pop()
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
    emit('L2b. cold cat of one %d MB shard over the link, fresh mount: daemon CPU s per GB' % (
        size // 1000000), 'defaults', med(cpu), None, 'cpu s/GB', None, 'report')
    if not aria:
        return
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


READER64 = r"""
import os, sys, time
mnt, paths = sys.argv[1], sys.stdin.readline().split()
print('ready', flush=True)
if not sys.stdin.readline():  # go: its plan is published
    sys.exit(1)
t = time.monotonic()
n = 0
for p in paths:
    with open(os.path.join(mnt, p), 'rb') as f:
        n += len(f.read())
print('%d %.4f' % (n, time.monotonic() - t), flush=True)
"""


def w_readers64(a, emu):
    """L8k: 64 readers on one mount, each with a plan of its own: a cold planned pass over
    every sample of the --layout imagefolder tree (--cache-size a quarter of the data),
    shuffled and dealt to 64 processes; each share is published as a plan (shardfs.plan, a
    name each, all 64 at the start of the timing) and read in order by its process, all at
    once. The stage (--plan-memory) is the mount's, split over its plans: the row gives the
    pass's time and the daemon's memory (VmHWM, the stage's peak), what a larger
    --plan-memory costs and buys with many readers."""
    import random
    size = '%dM' % (a.total // 4 // 1048576)
    settle()
    drop_caches()
    m = Mount(a, emu.url(a.brace), ('--layout', 'imagefolder', '--cache-size', size))
    ps = []
    try:
        paths = []
        for d, _, fs in os.walk(m.mnt):
            if '.shardfs' in d:
                continue
            paths += [os.path.relpath(os.path.join(d, f), m.mnt) for f in fs]
        random.Random(64).shuffle(paths)
        sys.path.insert(0, os.path.join(ROOT, 'python'))
        import shardfs  # (its PlanSampler imports torch: here, once, not in each reader)
        ps += [subprocess.Popen([PY, '-c', READER64, m.mnt], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for k in range(64)]
        for k, p in enumerate(ps):
            p.stdin.write(' '.join(paths[k::64]) + '\n')
            p.stdin.flush()
        for p in ps:  # the readers' start is not timed: each is ready before the plans
            p.stdout.readline()
        c0 = proc_cpu(m.pid)
        t = time.monotonic()
        for k in range(64):  # as 64 DataLoaders' iter() would, then every reader goes
            shardfs.plan(m.mnt, paths[k::64], name='r%02d' % k)
        for p in ps:
            p.stdin.write('go\n')
            p.stdin.close()
        got = [p.stdout.read().split() for p in ps]
        for p in ps:
            p.wait()
        secs = time.monotonic() - t
        cpu = proc_cpu(m.pid) - c0
        read = sum(int(x[0]) for x in got)
        rss = proc_rss(m.pid)
        st = {k: int(m.stat_or(k, -1)) for k in (
            'plan_stage_peak_bytes', 'plan_stage_waits', 'plan_stage_wait_ms', 'cache_misses',
            'cache_miss_wait_ms', 'bytes_fetched', 'plan_stage_full')}
    finally:
        for p in ps:  # (a reader left by an error: ended before the unmount)
            if p.poll() is None:
                p.kill()
                p.wait()
        m.umount()
    note('64 readers: %d paths, %d bytes read in %.2f s (slowest reader %.2f s); daemon %.2f '
         'CPU s, peak resident %.1f MB (VmHWM; %.1f MB at the end), the stage\'s peak %.1f MB; '
         'staged reads that waited %d, %d ms; misses %d, %d ms; %d bytes written to the cache; '
         'stage full %d' % (
             len(paths), read, secs, max(float(x[1]) for x in got), cpu, rss[0] / 1e6,
             rss[1] / 1e6, st['plan_stage_peak_bytes'] / 1e6, st['plan_stage_waits'],
             st['plan_stage_wait_ms'], st['cache_misses'], st['cache_miss_wait_ms'],
             st['bytes_fetched'], st['plan_stage_full']))
    emit('L8k. 64 readers on one mount, a plan each (a shuffled 64th of the samples): cold '
         'pass, MB/s', '--layout imagefolder --cache-size ' + size, read / 1e6 / secs, None,
         'MB/s', read / 1e6 / secs, 'report')


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


EPOCHS = r"""
import os, resource, sys, time
import torch
from torchvision import datasets, transforms
sys.path.insert(0, sys.argv[4])
import shardfs
root, planned, epochs, loader = sys.argv[1], sys.argv[2] == '1', int(sys.argv[3]), sys.argv[5]
how = sys.argv[6]  # --bytes-read: read_file, open or read_bytes
if loader == 'bytes' and how == 'read_file':
    # only the file's bytes, as a loader that decodes on the GPU reads them: torchvision's
    # read_file (C++: stat, open, mmap of the file, close; the bytes come by page faults), the
    # tensor decode_jpeg(data, device='cuda') takes
    from torchvision.io import read_file as read
elif loader == 'bytes' and how == 'open':
    # Python's buffered open(): an isatty() ioctl a file (a FUSE request), then the read
    def read(p):
        with open(p, 'rb') as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
elif loader == 'bytes':  # read_bytes: python/shardfs's helper, an unbuffered FileIO
    def read(p):
        return torch.frombuffer(bytearray(shardfs.read_bytes(p)), dtype=torch.uint8)
if loader == 'bytes':
    # a batch is one flat uint8 tensor (one shared-memory segment from a worker) and the sizes
    def collate(b):
        return torch.cat([x for x, _ in b]), torch.tensor([len(x) for x, _ in b])

    ds = datasets.ImageFolder(root, loader=read)
    dl = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=2, shuffle=True,
                                     collate_fn=collate)
else:  # jpeg: PIL decodes each sample into a tensor
    ds = datasets.ImageFolder(root, transform=transforms.PILToTensor())
    dl = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=2, shuffle=True)
if planned:
    shardfs.plan_dataloader(dl, strict=True)


def usage():
    # this process's and its reaped children's (the workers') user and system seconds,
    # voluntary and involuntary context switches and minor page faults
    return [getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF,
                                                        resource.RUSAGE_CHILDREN)
            for f in ('ru_utime', 'ru_stime', 'ru_nvcsw', 'ru_nivcsw', 'ru_minflt')]


# set up (torch imported, the mount's tree scanned by ImageFolder, the plan hooked): the parent
# takes its whole-machine snapshot now, and says go
print('ready', flush=True)
if not sys.stdin.readline():
    sys.exit(1)
for e in range(epochs):
    t, c, u = time.monotonic(), sum(os.times()[:4]), usage()
    n = 0
    it = iter(dl)  # forks the workers, and (planned) publishes the epoch's plan
    ti = time.monotonic() - t
    for x, y in it:
        n += len(y)
    # CPU of this process and its DataLoader workers (joined at the epoch's end), then its
    # split (usage(): main, then workers) and the seconds iter() took
    print('%d %.4f %.3f %s %.4f' % (n, time.monotonic() - t, sum(os.times()[:4]) - c,
                                    ' '.join('%.3f' % (b - a) for a, b in zip(u, usage())), ti),
          flush=True)
    # the parent reads the mount's counters and drops the page cache, then says go on; an
    # end of file is a parent gone: stop
    if not sys.stdin.readline():
        sys.exit(1)
"""


STORE_FILES = []  # the store's shard files: warm in the page cache again after a drop
CHILDREN = []  # epoch processes running (own sessions): killed with their workers on exit

DROP_ROOT = []  # SHARDFS_BENCH_DROP=files: the run's work directory (its cache dirs)


def drop_own_files():
    """SHARDFS_BENCH_DROP=files, on a machine shared with other work: not the machine's page
    cache, only this run's own cache files' pages (written out, then POSIX_FADV_DONTNEED of each
    file under the work directory, the mount point left out). What that leaves in memory: the
    store's files (warm anyway: drop_caches reads them back) and a mount's own page cache,
    empty on a fresh mount (the cold epochs, L8g); a second epoch on one mount, and the warm
    cat after L2b, read the mount's page cache instead, so their figures are no use then."""
    for root in DROP_ROOT:
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if not os.path.ismount(os.path.join(d, x))]
            for n in files:
                try:
                    fd = os.open(os.path.join(d, n), os.O_RDONLY | os.O_NOFOLLOW)
                except OSError:
                    continue
                try:
                    os.fsync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                except OSError:
                    pass
                finally:
                    os.close(fd)


def drop_caches():
    """Drop the kernel's page cache (root only), then read the store's files again: the next
    epoch reads through the mount, the store still answers from memory. The page cache only
    (1), not the dentries and inodes (3): a training job's next epoch keeps its dentries, and
    with them dropped every open of the next epoch went to the daemon as a LOOKUP again."""
    if os.environ.get('SHARDFS_BENCH_DROP') == 'files':
        drop_own_files()
        return
    try:
        os.sync()
        with open('/proc/sys/vm/drop_caches', 'w') as f:
            f.write('1\n')
    except OSError:
        return
    for p in STORE_FILES:
        sh(['cat', p], stdout=subprocess.DEVNULL)


def thread_cpu(pid):
    """{thread name: user + system seconds} of a process's threads now, summed by name (the
    daemon names its threads: shardfs-io, shardfs-fill, shardfs-flush, shardfs-plan, ...; the
    FUSE threads keep the process's name; a thread that exited meanwhile takes its CPU with
    it)."""
    d = {}
    for t in os.listdir('/proc/%d/task' % pid):
        try:
            name, secs = stat_cpu('/proc/%d/task/%s/stat' % (pid, t))
        except OSError:
            continue
        d[name] = d.get(name, 0.0) + secs
    return d


def ctx_switches(pid):
    """Voluntary + involuntary context switches of a process's threads now
    (/proc/PID/task/TID/status; a thread that exited meanwhile takes its count with it)."""
    n = 0
    for t in os.listdir('/proc/%d/task' % pid):
        try:
            with open('/proc/%d/task/%s/status' % (pid, t)) as f:
                for ln in f:
                    if ln.startswith(('voluntary_ctxt_switches', 'nonvoluntary_ctxt_switches')):
                        n += int(ln.split()[1])
        except OSError:
            pass
    return n


def thread_switches(pid):
    """{thread name: [voluntary, involuntary]} context switches of a process's threads now,
    summed by name (as thread_cpu)."""
    d = {}
    for t in os.listdir('/proc/%d/task' % pid):
        try:
            with open('/proc/%d/task/%s/status' % (pid, t)) as f:
                txt = f.read()
        except OSError:
            continue
        name = re.search(r'^Name:\s*(\S*)', txt, re.M).group(1)
        v = d.setdefault(name, [0, 0])
        v[0] += int(re.search(r'^voluntary_ctxt_switches:\s*(\d+)', txt, re.M).group(1))
        v[1] += int(re.search(r'^nonvoluntary_ctxt_switches:\s*(\d+)', txt, re.M).group(1))
    return d


def switches_note(s0, s1, gb, requests):
    """'name vol+invol (per GB, per request)' for each thread name, from two thread_switches."""
    out = []
    for k in sorted(s1):
        v = s1[k][0] - s0.get(k, [0, 0])[0]
        i = s1[k][1] - s0.get(k, [0, 0])[1]
        out.append('%s %d+%d (%.0f/GB, %.2f/request)' % (k, v, i, (v + i) / max(gb, 1e-9),
                                                         (v + i) / max(requests, 1)))
    return ', '.join(out)


STAT_COLS = ('user', 'nice', 'system', 'idle', 'iowait', 'irq', 'softirq', 'steal')


def budget_snap(loader_pid, daemon_pid, emu):
    """The whole machine's CPU now, for an epoch's budget: /proc/stat's first line (seconds
    per column, all CPUs), the loader's CPU (its /proc stat's utime + stime + cutime +
    cstime: its DataLoader workers count once reaped, which the epoch's end does), the
    daemon's, the emulator's (0 without one), this bench process's own, and the time."""
    with open('/proc/stat') as f:
        v = [int(x) / HZ for x in f.readline().split()[1:9]]
    with open('/proc/%d/stat' % loader_pid) as f:
        t = f.read().rsplit(')', 1)[1].split()
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {'stat': dict(zip(STAT_COLS, v)), 'loader': sum(int(x) for x in t[11:15]) / HZ,
            'daemon': proc_cpu(daemon_pid), 'emulator': proc_cpu(emu.p.pid) if emu else 0.0,
            'bench': r.ru_utime + r.ru_stime, 't': time.monotonic()}


def budget_diff(b0, b1):
    """An epoch's whole-machine CPU budget (CPU-s) from two budget_snap: wall, busy (every
    column of /proc/stat but idle and iowait), the columns, the processes, and other (busy
    less the processes: other processes and kernel threads, and softirq work done while no
    process ran; this kernel, without IRQ_TIME_ACCOUNTING, charges softirq work to the task
    it interrupted, so a process's figure holds the softirqs that ran on its time)."""
    d = {k: b1['stat'][k] - b0['stat'][k] for k in STAT_COLS}
    out = {'wall': b1['t'] - b0['t'], 'ncpu': os.cpu_count() or 1, 'stat': d,
           'busy': sum(d.values()) - d['idle'] - d['iowait']}
    for k in ('loader', 'daemon', 'emulator', 'bench'):
        out[k] = b1[k] - b0[k]
    out['other'] = out['busy'] - sum(out[k] for k in ('loader', 'daemon', 'emulator', 'bench'))
    return out


BUDGET_PARTS = ('loader', 'daemon', 'emulator', 'bench', 'other')


def budget_note(b):
    """'wall W s x N cores = C CPU-s: busy B (user, system, softirq, ...), idle I, iowait; by
    process: loader, daemon, emulator, bench, other'"""
    st = b['stat']
    return ('%.2f s x %d cores = %.2f CPU-s: busy %.2f (user %.2f, nice %.2f, system %.2f, '
            'irq %.2f, softirq %.2f, steal %.2f), idle %.2f, iowait %.2f; by process: %s' % (
                b['wall'], b['ncpu'], b['wall'] * b['ncpu'], b['busy'], st['user'], st['nice'],
                st['system'], st['irq'], st['softirq'], st['steal'], st['idle'], st['iowait'],
                ', '.join('%s %.2f' % (k, b[k]) for k in BUDGET_PARTS)))


class Epoch:
    """One epoch's figures: samples n, seconds secs, the mount's counter deltas c (a dict:
    bytes_fetched, read_bytes, store_requests, ...), CPU seconds of the loader (the process
    and its workers), of the daemon and of the emulator (0 without one), the daemon's context
    switches, and the requests the emulator answered (0 without one)."""
    KEYS = ('bytes_fetched', 'read_bytes', 'store_requests', 'cache_misses', 'cache_miss_wait_ms',
            'cache_hits',
            'prefetch_withdrawn', 'evicted_bytes', 'evictions')
    # counters a base build may lack: -1 then (the room counters: making room for fills; the
    # waits for the tier's lock); and the FUSE requests the loader's reads cost
    OPT_KEYS = ('cache_room_waits', 'cache_room_wait_ms', 'cache_room_make_ms',
                'cache_tier_lock_waits', 'cache_tier_lock_wait_ms', 'cache_file_lock_waits',
                'cache_file_lock_wait_ms', 'lookups', 'getattrs',
                # the loader's IOCTLs (Python's buffered open() asks isatty() a file)
                'ioctls',
                'reads', 'cache_read_locks', 'cache_unit_read_locks', 'cache_read_file_checks',
                # the stage (--plan-memory): planned spans kept in memory, not in the cache
                'plan_stage_spans', 'plan_stage_bytes', 'plan_stage_reads',
                'plan_stage_fallbacks', 'plan_stage_failed', 'plan_stage_dropped',
                'plan_stage_full', 'plan_stage_waits', 'plan_stage_wait_ms', 'cache_punches',
                # of plan_stage_full, spans whose bytes fit but no free run of the region
                'plan_stage_nofit',
                # body bytes the store sent, into the cache or the stage's memory
                'bytes_received')

    def __init__(self, **kw):
        self.__dict__.update(kw)

    @property
    def fetched(self):
        # bytes_fetched counts only what went into the cache: a staged epoch's spans go to
        # memory, so the body bytes the store sent are the epoch's fetch where counted
        if self.c.get('bytes_received', -1) >= 0:
            return self.c['bytes_received']
        return self.c['bytes_fetched']

    @property
    def read(self):
        return self.c['read_bytes']


def perf_start(a, pid, loader, graph=False, epoch=''):
    """With --perf DIR: `perf record` of process pid (-F 999; flat, or with call graphs
    (-g) if graph), into DIR/LOADER.data; the Popen, or None. With --epoch-hook START END
    instead (an epoch only): START runs now, END at perf_stop, {pid} the daemon's pid,
    {epoch} epoch ('' the planned epoch, '.local' the local one)."""
    if a.epoch_hook and not graph:
        start, end = (h.replace('{pid}', str(pid)).replace('{epoch}', epoch)
                      for h in a.epoch_hook)
        subprocess.run(start, shell=True, timeout=60)
        return end
    if not a.perf:
        return None
    os.makedirs(a.perf, exist_ok=True)
    out = os.path.join(a.perf, '%s.data' % loader)
    if not graph:
        return subprocess.Popen(['perf', 'record', '-q', '-F', '999', '-p', str(pid), '-o', out],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # a second's row: perf starts with its events off and the row goes on only once perf
    # has said (on its ack fifo) that they are on, so the first samples are not lost
    ctl, ack = out + '.ctl', out + '.ack'
    for f in (ctl, ack):
        if os.path.exists(f):
            os.unlink(f)
        os.mkfifo(f)
    p = subprocess.Popen(['perf', 'record', '-q', '-F', '4999', '-g', '-D', '-1', '--control',
                          'fifo:%s,%s' % (ctl, ack), '-p', str(pid), '-o', out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cfd = os.open(ctl, os.O_RDWR)
    afd = os.open(ack, os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(cfd, b'enable\n')
        if not select.select([afd], [], [], 30)[0]:
            raise RuntimeError('perf record did not start in 30 s')
        os.read(afd, 64)
    finally:
        os.close(cfd)
        os.close(afd)
        os.unlink(ctl)
        os.unlink(ack)
    return p


def perf_stop(p):
    """End a perf_start recording (SIGINT: it writes its file), bounded."""
    if p is None:
        return
    if isinstance(p, str):  # --epoch-hook's END
        subprocess.run(p, shell=True, timeout=60)
        return
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def epochs_in(m, plan, n, emu=None, loader='jpeg', tag='', perf=None, how=None, epoch=''):
    """Run n epochs over mount m (plan: with plan_dataloader; loader: 'jpeg' decodes each
    sample with PIL, 'bytes' only reads its bytes, the way how says: --bytes-read's, by
    default), the page cache dropped after each (the caller drops it before the first); a list
    of Epoch."""
    p = subprocess.Popen([PY, '-c', EPOCHS, m.mnt, '1' if plan else '0', str(n),
                          os.path.join(ROOT, 'python'), loader, how or m.a.bytes_read],
                         stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, start_new_session=True)
    CHILDREN.append(p)
    try:
        out = []

        def snap():
            st = m.stats()
            c = {k: int(re.search(r'"%s":\s*"?(\d+)' % k, st).group(1)) for k in Epoch.KEYS}
            for k in Epoch.OPT_KEYS:
                v = re.search(r'"%s":\s*"?(\d+)' % k, st)
                c[k] = int(v.group(1)) if v else None
            return (c, proc_cpu(m.pid), ctx_switches(m.pid),
                    proc_cpu(emu.p.pid) if emu else 0.0, emu.stats()['requests'] if emu else 0,
                    thread_cpu(m.pid), thread_switches(m.pid), cache_drops(),
                    proc_minflt(m.pid))

        s0 = snap()
        if not select.select([p.stdout], [], [], m.a.epoch_timeout)[0]:
            raise RuntimeError('the epoch process was not ready within --epoch-timeout %d s'
                               % m.a.epoch_timeout)
        if p.stdout.readline().strip() != 'ready':
            raise RuntimeError('the epoch process failed before its first epoch (rc %r)'
                               % p.wait())
        # one epoch only: --perf-epoch's (the cold one by default), from before it starts
        rec = perf_start(m.a, m.pid, loader, epoch=epoch) if perf and m.a.perf_epoch == 1 \
            else None
        b0 = budget_snap(p.pid, m.pid, emu)
        p.stdin.write('\n')
        p.stdin.flush()
        # what the mount's own reads (its index builds) took before the first epoch
        log('before the first epoch (the mount): reads took the tier\'s lock %s times, %s unit '
            'lock fcntl calls, %s data file checks' % tuple(
                s0[0][k] for k in ('cache_read_locks', 'cache_unit_read_locks',
                                   'cache_read_file_checks')))
        for i in range(n):
            # the child prints one line per epoch and waits for ours: nothing is left in
            # the pipe's buffer between lines, so select() on it sees the next one
            if not select.select([p.stdout], [], [], m.a.epoch_timeout)[0]:
                raise RuntimeError('no epoch ended within --epoch-timeout %d s' %
                                   m.a.epoch_timeout)
            ln = p.stdout.readline()
            if not ln:
                raise RuntimeError('the epoch process failed (rc %r)' % p.wait())
            k, secs, lcpu, *split = ln.split()
            b1 = budget_snap(p.pid, m.pid, emu)
            s1 = snap()
            e = Epoch(n=int(k), secs=float(secs), loader_cpu=float(lcpu),
                      loader_split=[float(x) for x in split],
                      c={key: -1 if s1[0][key] is None else s1[0][key] - s0[0][key]
                         for key in Epoch.KEYS + Epoch.OPT_KEYS},
                      daemon_cpu=s1[1] - s0[1], ctxsw=s1[2] - s0[2], emu_cpu=s1[3] - s0[3],
                      emu_requests=s1[4] - s0[4], budget=budget_diff(b0, b1))
            out.append(e)
            perf_stop(rec)
            rec = None
            log('epoch (%s, %s%s): %d samples, %.2f s; %s; CPU s: loader %.2f, daemon %.2f, '
                'emulator %.2f; daemon context switches %d; emulator requests %d' % (
                    loader, 'plan' if plan else 'no plan', tag, e.n, e.secs,
                    ', '.join('%s %d' % kv for kv in e.c.items()), e.loader_cpu,
                    e.daemon_cpu, e.emu_cpu, e.ctxsw, e.emu_requests))
            log('... daemon minor page faults: %d' % (s1[8] - s0[8]))
            peak = re.search(r'"plan_stage_peak_bytes":\s*"?(\d+)', m.stats())
            if peak:
                log('... the stage\'s peak memory (plan_stage_peak_bytes, since the mount): %s'
                    % peak.group(1))
            chunks = re.search(r'"plan_stage_chunks":\s*"?(\d+)', m.stats())
            if chunks:
                log('... the stage\'s 2 MiB chunks faulted in (plan_stage_chunks, since the '
                    'mount): %s' % chunks.group(1))
            if len(e.loader_split) == 11:
                log('... loader: ' + loader_note(e.loader_split))
            if s1[7] != s0[7]:  # the kernel's LOOKUPs and page cache gone mid-epoch
                log('... the page cache was dropped %d times during the epoch by other processes '
                    '(/proc/vmstat drop_pagecache): its figures are not comparable' % (
                        s1[7] - s0[7]))
            log('... whole machine: ' + budget_note(e.budget))
            log('... daemon CPU s by thread: %s' % ', '.join(
                '%s %.2f' % (k, s1[5][k] - s0[5].get(k, 0.0)) for k in sorted(s1[5])))
            log('... daemon context switches by thread, voluntary+involuntary: %s' %
                switches_note(s0[6], s1[6], e.read / 1e9, e.c['store_requests']))
            # the next epoch reads through the mount, not the kernel's page cache of the files
            # the last one read (as on a node whose RAM holds less than the data set)
            drop_caches()
            if perf and i + 2 == m.a.perf_epoch:
                rec = perf_start(m.a, m.pid, loader)
            s0 = snap()
            b0 = budget_snap(p.pid, m.pid, emu)
            p.stdin.write('\n')
            p.stdin.flush()
        if p.wait(timeout=120) != 0:
            raise RuntimeError('epochs failed')
        return out
    finally:
        kill_group(p)
        CHILDREN.remove(p)


def cache_drops():
    """How many times the page cache was dropped since boot (/proc/vmstat drop_pagecache; 0
    where the kernel does not count them): on a shared machine another process's drop in the
    middle of an epoch costs it a LOOKUP per file and its pages."""
    try:
        with open('/proc/vmstat') as f:
            for ln in f:
                if ln.startswith('drop_pagecache '):
                    return int(ln.split()[1])
    except OSError:
        pass
    return 0


def loader_note(v):
    """The loader's split of an epoch (EPOCHS' usage() deltas and its iter() seconds)."""
    return ('main process %.2f user + %.2f sys CPU s, %d+%d switches (voluntary+involuntary), '
            '%d minor faults; workers %.2f + %.2f CPU s, %d+%d switches, %d minor faults; '
            'iter() %.3f s (the workers\' start and, planned, the plan\'s publication)' % tuple(v))


def kill_group(p):
    """Kill process p's session (it and its DataLoader workers) and reap p (bounded)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        log('epoch process %d did not exit after SIGKILL' % p.pid)


def note(text):
    """A figure behind the rows (not a row: lib_bench.py skips it, the raw output keeps it);
    labels of rows hold no measured figure, so compare.sh can pair rows of two runs."""
    print('note\t' + text, flush=True)


def loadavg():
    with open('/proc/loadavg') as f:
        return ' '.join(f.read().split()[:3])


def w_plan(a, emu):
    """The sampler's plan rows, for each loader of --plan-loaders: L7 (jpeg) and L8 (bytes,
    issue 25's). Per loader: a local-source epoch, the planned side (two epochs in one
    mount), a local-source epoch again (the machine's load then is the planned side's), then
    the unplanned side (unless --skip-unplanned). The load average before and after each
    loader's rows is a note: on a shared machine it says how far to trust them."""
    for loader in a.plan_loaders:
        note('%s plan rows: load average %s before' % (loader, loadavg()))
        plan_rows(a, emu, loader)
        note('%s plan rows: load average %s after' % (loader, loadavg()))
    w_plan_ais_getbatch(a, emu)


def w_plan_ais_getbatch(a, emu):
    """L9 once per --ais-rounds round and per --ais-standin implementation (alternated)."""
    impls = a.ais_standin.split(',')
    for r in range(a.ais_rounds):
        for impl in impls:
            plan_ais_getbatch(a, emu, impl, '' if (len(impls), a.ais_rounds) == (1, 1) else
                              ' [stand-in %s, round %d]' % (impl, r + 1))


def plan_ais_getbatch(a, emu, impl, label):
    """Issue 25's `ais://` row (L9): a planned cold epoch over an AIStore source, bytes-only
    loader, --layout imagefolder --cache-size a quarter of the data, with GetBatch
    (--get-batch auto) vs the same epoch without it (--get-batch off: ranged GETs,
    the span path), in one run. The source is the AIStore stand-in (shardfs_test.s3servers
    AisStandIn, root mode) over the shards' directory: listing, HEADs and GetBatch answers
    from the stand-in itself, which waits --delay-ms before every answer and paces every
    connection at --rate-mb as the link emulator does (the emulator serves files, not
    GetBatch); object GETs are redirected (307, as an AIStore proxy does) to the link
    emulator, so the ranged GETs of the side without GetBatch cross the same link. Both sides
    pay the stand-in's delay on each redirect or GetBatch 307 and the link's on the answer; the
    GetBatch side's version HEADs two delays each, the proxy's 307 and the target's answer, as
    AIStore's S3 HEAD goes (since 2026-12-02; one before).
    impl 'c' (--ais-standin, the default): the stand-in is the C emulator (linkemu.c --ais, a
    process of its own per side, on the shards' directory): listing, HEADs and GetBatch, each
    answer after --delay-ms, each connection paced at --rate-mb, object GETs redirected to the
    main emulator; its CPU is that process's. 'python': the Python
    AisStandIn in this process (its CPU is this process's, RUSAGE_SELF), object GETs
    redirected to the main emulator: what L9 measured before 2026-11-30."""
    from shardfs_test import s3servers
    size = '%dM' % (a.total // 4 // 1048576)
    o = '--layout imagefolder --cache-size ' + size
    note('ais plan rows: load average %s before' % loadavg())
    # the stand-in lists the emulator's ETags (--etag): the redirected object GETs send
    # If-Match with the listed one, and the emulator answers 412 to any other
    ais = None if impl == 'c' else s3servers.AisStandIn(
        None, root=a.shard_dir, objects_port=emu.port, delay_ms=a.delay_ms, rate_mb=a.rate_mb,
        etag=a.etag)
    res, counts = {}, {}
    keys = ('plan_batch_requests', 'plan_batch_items', 'plan_batch_bytes',
            'plan_batch_failed_items', 'plan_batch_stale_objects', 'plan_batch_refused',
            'plan_batch_unfit_bytes', 'plan_batch_heads', 'plan_batch_heads_shared',
            'plan_batch_head_waits', 'plan_batch_slot_waits', 'plan_batch_threads',
            'store_requests', 'plan_fetch_paths', 'plan_fetch_bytes', 'plan_fetch_ranges',
            'plan_fetch_gap_bytes', 'plan_stage_read_bytes')
    try:
        for side in ('getbatch', 'ranges'):
            settle()
            drop_caches()
            cemu = None
            if ais is None:  # a fresh C stand-in per side: its counters are the side's
                # object GETs redirected to the main emulator, as the Python stand-in's:
                # an AIStore proxy sends them to a target, another host to the mount, whose
                # connections per host are not shared with the proxy's
                cemu = Emu(a.shard_dir, a.delay_ms, a.rate_mb, a.w, 'ais-' + side,
                           shardfs=a.bin, etag=a.etag, ais=True, ais_objects_port=emu.port)
                a0, port = {}, cemu.port
            else:
                a0, port = dict(ais.stats), ais.port
                ais.stats.pop('moss_inflight_max', None)
            try:
                m = Mount(a, 'ais://bench/', ('--layout', 'imagefolder', '--cache-size', size,
                                              '--endpoint', 'http://127.0.0.1:%d' % port) +
                          ('--get-batch', 'off' if side == 'ranges' else 'auto'))
            except BaseException:
                if cemu is not None:
                    stop_emu(cemu)
                raise
            try:
                # the Python stand-in runs on threads of this process: its CPU is ours
                r0 = resource.getrusage(resource.RUSAGE_SELF)
                e0 = proc_cpu(emu.p.pid)
                # --epoch-hook runs over each side's epoch too (perf stat of its syscalls)
                res[side] = epochs_in(m, True, 1, cemu or emu, 'bytes',
                                      ', ais:// %s, stand-in %s' % (side, impl),
                                      perf=bool(a.epoch_hook))[0]
                e1 = proc_cpu(emu.p.pid)
                r1 = resource.getrusage(resource.RUSAGE_SELF)
                # (-1: a counter the binary has not: an older one, A/B)
                st = m.stats()
                counts[side] = {k: int(re.search(r'"%s":\s*"?([^",}]*)' % k, st).group(1))
                                if '"%s"' % k in st else -1 for k in keys}
                counts[side]['standin_cpu'] = (r1.ru_utime + r1.ru_stime - r0.ru_utime -
                                               r0.ru_stime) if cemu is None else \
                    res[side].emu_cpu
                counts[side]['emu_cpu'] = e1 - e0  # the main emulator's: the object GETs
                # the daemon's memory (--plan-memory's cost): its peak and current resident
                # set (/proc's VmHWM, VmRSS: since the mount) and the stage's peak
                counts[side]['rss'] = proc_rss(m.pid)
                counts[side]['stage_peak'] = int(m.stat_or('plan_stage_peak_bytes', -1))
                a1 = cemu.stats() if cemu is not None else dict(ais.stats)
            finally:
                try:
                    m.umount()
                finally:
                    if cemu is not None:
                        stop_emu(cemu)
            counts[side].update({'ais_' + k: a1.get(k, 0) - a0.get(k, 0) for k in (
                'moss_requests', 'moss_items', 'moss_ms', 'redirects', 's3_head', 's3_head_ms',
                'head_redirects')})
            counts[side]['ais_moss_inflight_max'] = a1.get('moss_inflight_max', 0)
            log('ais %s: %s' % (side, counts[side]))
    finally:
        if ais is not None:
            ais.stop()
    gb, rg = res['getbatch'], res['ranges']
    for side, e in (('GetBatch', gb), ('ranged GETs', rg)):
        c = counts['getbatch' if e is gb else 'ranges']
        note('ais plan%s, %s: %d samples in %.2f s, read %d, fetched %d (%.2fx); GetBatch '
             'requests %d (items %d, at most %d at once, %.0f ms each from request to last byte '
             'at the stand-in), object GETs %d, HEADs %d (%d of them through the proxy\'s 307, as '
             'AIStore\'s S3 HEAD; %.1f ms each at the target after the '
             'delay; the mount from its mount on; the version rule\'s %d, HEAD groups confirmed by '
             'a shared one %d, requests that waited for another\'s HEAD %d); threads started '
             'for GetBatch requests %d (plan_batch_threads; -1: a binary without it); reads '
             'that waited %d, %.0f ms each; CPU s: '
             'daemon %.2f, loader %.2f, stand-in %.2f, '
             'emulator %.2f%s; daemon context switches %d' % (
                 label, side, e.n, e.secs, e.read, e.fetched, e.fetched / max(e.read, 1),
                 c['ais_moss_requests'], c['ais_moss_items'], c['ais_moss_inflight_max'],
                 c['ais_moss_ms'] / max(c['ais_moss_requests'], 1),
                 c['ais_redirects'], c['ais_s3_head'], c['ais_head_redirects'],
                 c['ais_s3_head_ms'] / max(c['ais_s3_head'], 1), c['plan_batch_heads'],
                 c['plan_batch_heads_shared'], c['plan_batch_head_waits'],
                 c['plan_batch_threads'], e.c['cache_misses'],
                 e.c['cache_miss_wait_ms'] / max(e.c['cache_misses'], 1), e.daemon_cpu,
                 e.loader_cpu, c['standin_cpu'], c['emu_cpu'],
                 ' (the C stand-in with --ais)' if impl == 'c' else '', e.ctxsw))
        note('ais plan%s, %s: daemon memory: peak resident %.1f MB, resident %.1f MB at the '
             'epoch\'s end (VmHWM, VmRSS); the stage\'s peak %.1f MB (plan_stage_peak_bytes)' % (
                 label, side, c['rss'][0] / 1e6, c['rss'][1] / 1e6, c['stage_peak'] / 1e6))
        # where the epoch's bytes went: the stage's memory (spans, bytes, reads that waited
        # for one) or the cache (bytes written, evictions); -1: a counter the binary lacks
        note('ais plan%s, %s: the epoch staged %d spans, %d bytes (reads that waited for one '
             '%d, %d ms; fallbacks %d); wrote %d bytes to the cache, evicted %d bytes' % (
                 label, side, e.c['plan_stage_spans'], e.c['plan_stage_bytes'],
                 e.c['plan_stage_waits'], e.c['plan_stage_wait_ms'],
                 e.c['plan_stage_fallbacks'], e.c['bytes_fetched'], e.c['evicted_bytes']))
    note('ais plan rows: load average %s after' % loadavg())
    emit('L9. bytes only, ais:// (AIStore stand-in on the link): planned cold epoch with '
         'GetBatch vs without (ranged GETs)' + label, o, gb.secs, rg.secs, 's', rg.secs / gb.secs,
         '>= 1 (issue 37)', 1.0)


def serve_floor(a, emu):
    """Row L8g floor's model, once: tests/bench/floor_bench.c over the run's emulator, every
    sample's bytes (each image member's data in the shards) in a seeded random order, one
    ranged GET a sample on N connections (a receiving thread each) into 64 buffers, a reply
    thread write()ing each into a pipe (the FUSE reply's copy), a reader thread read()ing it
    (the loader's copy); (the daemon's part: receivers + reply CPU-s per GB, the floor_bench
    line), or None without the tool."""
    import random
    import tarfile
    exe = floor_tool(a, 'floor_bench')
    if not exe:
        return None
    ranges = []
    for nm in a.names:
        with tarfile.open(os.path.join(a.shard_dir, nm)) as t:
            # the images (the epoch's files): the .cls members are the class folders of the
            # imagefolder layout, not files it reads
            ranges += [(nm, m.offset_data, m.size) for m in t
                       if m.isfile() and m.size > 0 and not m.name.endswith('.cls')]
    random.Random(len(ranges)).shuffle(ranges)
    rf = os.path.join(a.w, 'floor-ranges')
    with open(rf, 'w') as f:
        f.writelines('%s %d %d\n' % r for r in ranges)
    asked = sum(r[2] for r in ranges)
    p = subprocess.run([exe, str(emu.port), a.shard_dir, str(a.n), rf], stdout=subprocess.PIPE,
                       text=True, timeout=1800)
    f = p.stdout.split()
    if p.returncode != 0 or 'MISMATCH' in p.stdout or int(f[f.index('bytes') - 1]) != asked:
        raise RuntimeError('floor_bench failed (rc %d): %s' % (p.returncode, p.stdout))
    log('L8g floor (floor_bench): %s' % p.stdout.strip())
    return float(f[3]), p.stdout.strip()


def plan_rows(a, emu, loader):
    size = '%dM' % (a.total // 4 // 1048576)
    opts = ('--layout', 'imagefolder', '--cache-size', size)
    res, locs, floor = {}, [], None
    # L7: JPEG decoding (issue 14's rows); L8: the same with a loader that only reads bytes
    g, what = ('L7', 'JPEG decoded') if loader == 'jpeg' else ('L8', 'bytes only')

    def local_epoch(how=None):
        settle()
        drop_caches()
        lm = Mount(a, a.shard_dir, ('--layout', 'imagefolder'))
        try:
            # an --epoch-hook that names {epoch} runs over the local epoch too ({epoch}
            # '.local'; '' over the planned one): both epochs' counts in one invocation
            hook = bool(a.epoch_hook) and '{epoch}' in ''.join(a.epoch_hook)
            locs.append(epochs_in(lm, False, 1, loader=loader, how=how,
                                  tag=', local source' + (', ' + how if how else ''),
                                  perf=hook, epoch='.local' + ('-' + how if how else ''))[0])
        finally:
            lm.umount()

    local_epoch()
    for side in ('plan', 'none'):
        if side == 'none' and a.skip_unplanned:
            continue
        settle()
        drop_caches()
        m = Mount(a, emu.url(a.brace), opts)
        try:
            res[side] = epochs_in(m, side == 'plan', 2, emu, loader, perf=side == 'plan')
            log('%s %s: plan_fetch_bytes %s, evicted %s' % (
                loader, side, m.stat('plan_fetch_bytes'), m.stat('evicted_bytes')))
        finally:
            m.umount()
        if side == 'plan':
            local_epoch()
            if loader == 'bytes':  # the machine's floor for L8g, in the same invocation
                settle()
                floor = serve_floor(a, emu)
    pl, no = res['plan'], res.get('none')
    loc = med([e.secs for e in locs])
    link_s = pl[0].read / (a.n * a.rate_mb * 1e6)
    o = '--layout imagefolder --cache-size ' + size
    note('%s plan: local-source epochs %s s; the link\'s time for the planned cold epoch\'s '
         '%d bytes %.2f s' % (what, ' '.join('%.2f' % e.secs for e in locs), pl[0].read,
                              link_s))
    if no:
        emit('%sa. %s: cold shuffled epoch, cache 1/4 of the data: with the sampler\'s plan '
             'vs without' % (g, what), o, pl[0].secs, no[0].secs, 's', no[0].secs / pl[0].secs,
             '>= 3', 3)
    if loader == 'jpeg':
        bound = max(link_s, loc)
        emit('L7b. JPEG decoded: the planned cold epoch vs max(the link\'s time for its bytes, '
             'the local-source epoch)', o, pl[0].secs, bound, 's', bound / pl[0].secs, '>= 0.9',
             0.9)
    else:
        emit('L8b. bytes only: the planned cold epoch vs the same epoch on a local-directory '
             'mount of the shards', o, pl[0].secs, loc, 's', loc / pl[0].secs, '>= 0.8', 0.8)
    if no:
        emit('%sc. %s: second epoch, new permutation, cache holding part: with plan vs without'
             % (g, what), o, pl[1].secs, no[1].secs, 's', no[1].secs / pl[1].secs, 'report')
    emit('%sc. %s: second planned epoch, new permutation, vs the local-source epoch' % (
        g, what), o, pl[1].secs, loc, 's', loc / pl[1].secs, 'report')
    for i in (0, 1):
        for side, r in (('with', pl), ('without', no)):
            if r is None:
                continue
            x = r[i].fetched / max(r[i].read, 1)
            lab = '%sd. %s: bytes fetched / bytes read, epoch %d %s the plan' % (
                g, what, i + 1, side)
            if side == 'with' and i == 0:  # issue 25's budget: ratio budget / value
                emit(lab, o, x, 1.6, 'x', 1.6 / max(x, 1e-9), '<= 1.6 (>= 1)', 1.0)
            else:
                emit(lab, o, x, None, 'x', x, '<= 2.0' if side == 'without' else 'report')
    # the machine's cores run the loader (decoding or not), the daemon and the emulator: their
    # CPU over the cores is as short as the epoch can be on this machine
    ncpu = os.cpu_count() or 1
    e = pl[0]
    cpu = e.loader_cpu + e.daemon_cpu + e.emu_cpu
    note('%s plan: CPU s of the planned cold epoch: loader %.2f, daemon %.2f, emulator %.2f '
         '(local-source epochs: loader %s, daemon %s) over %d cores' % (
             what, e.loader_cpu, e.daemon_cpu, e.emu_cpu,
             ' '.join('%.2f' % x.loader_cpu for x in locs),
             ' '.join('%.2f' % x.daemon_cpu for x in locs), ncpu))
    if len(e.loader_split) == 11:  # where the loader's CPU went, planned against local
        note('%s plan: the loader in the planned cold epoch: %s; in the local-source epochs: %s'
             % (what, loader_note(e.loader_split),
                '; '.join(loader_note(x.loader_split) for x in locs
                          if len(x.loader_split) == 11)))
    emit('%se. %s: CPU of the planned cold epoch (loader, daemon, emulator) over the cores vs '
         'the epoch' % (g, what), o, cpu / ncpu, e.secs, 's', cpu / ncpu / e.secs, 'report')
    # the whole machine's CPU in the planned cold epoch and in the local-source epochs, from
    # /proc/stat and by process over each epoch (from its iter() to its end: not torch's
    # import or the ImageFolder scan), and the gap between them part by part, idle included
    bl = [x.budget for x in locs]
    note('%s plan: whole machine, planned cold epoch: %s' % (what, budget_note(e.budget)))
    for i, b in enumerate(bl):
        note('%s plan: whole machine, local-source epoch %d: %s' % (what, i + 1, budget_note(b)))

    def mean(f):
        return sum(f(b) for b in bl) / len(bl)

    gap = {k: e.budget[k] - mean(lambda b: b[k]) for k in BUDGET_PARTS + ('busy', 'wall')}
    for k in ('idle', 'iowait'):
        gap[k] = e.budget['stat'][k] - mean(lambda b: b['stat'][k])
    parts = BUDGET_PARTS + ('idle', 'iowait')
    note('%s plan: the gap, planned cold epoch less the local-source epochs\' mean: wall %+.2f s '
         'x %d cores = %+.2f CPU-s = %s (sum %+.2f; busy %+.2f)' % (
             what, gap['wall'], ncpu, gap['wall'] * ncpu,
             ', '.join('%s %+.2f' % (k, gap[k]) for k in parts), sum(gap[k] for k in parts),
             gap['busy']))
    lbusy = mean(lambda b: b['busy'])
    emit('%sj. %s: whole-machine busy CPU-s (/proc/stat) of the planned cold epoch vs the '
         'local-source epoch' % (g, what), o, e.budget['busy'], lbusy, 'cpu s',
         lbusy / max(e.budget['busy'], 1e-9), 'report')
    # per planned sample: the mount's requests to the store (and the emulator's count)
    note('%s plan: requests in the planned cold epoch: store_requests %d, emulator %d, for '
         '%d samples; the emulator\'s CPU %.1f us per request, %.3f CPU s per GB read' % (
             what, e.c['store_requests'], e.emu_requests, e.n,
             e.emu_cpu / max(e.emu_requests, 1) * 1e6, e.emu_cpu / max(e.read / 1e9, 1e-9)))
    # the time the epoch's readers waited for bytes not yet in the cache (issue 37: latency
    # hidden by design shows as this near 0)
    for i, r in enumerate(pl):
        note('%s plan: epoch %d: reads that waited %d, %.0f ms in all (%.1f ms each), epoch '
             '%.2f s' % (what, i + 1, r.c['cache_misses'], r.c['cache_miss_wait_ms'],
                         r.c['cache_miss_wait_ms'] / max(r.c['cache_misses'], 1), r.secs))
        # the stage (--plan-memory; -1: a build without it): spans staged, reads served from
        # it and those that waited for their bytes (plan_stage_wait_ms, issue 37 L8b)
        if r.c['plan_stage_spans'] > 0:
            note('%s plan: epoch %d: the stage: %d spans, %d bytes; %d reads from it, %d '
                 'waited %d ms in all; fallbacks %d, failed %d, full %d (no free run %d), '
                 'dropped %d (plan_stage_*)' % (
                     what, i + 1, r.c['plan_stage_spans'], r.c['plan_stage_bytes'],
                     r.c['plan_stage_reads'], r.c['plan_stage_waits'],
                     r.c['plan_stage_wait_ms'], r.c['plan_stage_fallbacks'],
                     r.c['plan_stage_failed'], r.c['plan_stage_full'],
                     r.c['plan_stage_nofit'],
                     r.c['plan_stage_dropped']))
        # fills that waited for another thread's eviction before they started (-1: a build
        # without the counters)
        note('%s plan: epoch %d: making room for fills %d ms, of it %d ms in %d waits for '
             'another\'s eviction (cache_room_make_ms, cache_room_wait_ms, cache_room_waits)'
             % (what, i + 1, r.c['cache_room_make_ms'], r.c['cache_room_wait_ms'],
                r.c['cache_room_waits']))
        note('%s plan: epoch %d: takes of the tier\'s lock that waited for another thread %d, '
             '%d ms in all (cache_tier_lock_waits, cache_tier_lock_wait_ms); of the objects\' '
             'own locks %d, %d ms (cache_file_lock_waits, _ms; -1: a build without them)'
             % (what, i + 1, r.c['cache_tier_lock_waits'], r.c['cache_tier_lock_wait_ms'],
                r.c['cache_file_lock_waits'], r.c['cache_file_lock_wait_ms']))
        # the reads' own takes of the tier's lock, their fcntl calls on unit locks and their
        # data file checks (issue 37 #4; -1: a build without the counters)
        note('%s plan: epoch %d: reads took the tier\'s lock %d times (%.3f a sample); unit '
             'read lock fcntl calls (reads\', and evictions\' drops of idle ones) %d; data file '
             'checks %d (cache_read_locks, cache_unit_read_locks, cache_read_file_checks)'
             % (what, i + 1, r.c['cache_read_locks'], r.c['cache_read_locks'] / max(r.n, 1),
                r.c['cache_unit_read_locks'], r.c['cache_read_file_checks']))
    emit('%si. %s: time readers waited for the store (cache_miss_wait_ms, summed over readers), '
         'planned cold epoch, vs the epoch' % (g, what), o, e.c['cache_miss_wait_ms'] / 1000,
         e.secs, 's', None, 'report')
    rq = e.c['store_requests'] / max(e.n, 1)
    emit('%sf. %s: requests to the store per sample, planned cold epoch' % (g, what), o, rq,
         None, 'req/sample', None, 'report')
    # the daemon's CPU and context switches per GB the planned epoch read (10^9 bytes)
    gb = e.read / 1e9
    lgb = [x.read / 1e9 for x in locs]
    lcpu = med([x.daemon_cpu / max(y, 1e-9) for x, y in zip(locs, lgb)])
    lsw = med([x.ctxsw / max(y, 1e-9) for x, y in zip(locs, lgb)])
    cpg, swg = e.daemon_cpu / max(gb, 1e-9), e.ctxsw / max(gb, 1e-9)
    emit('%sg. %s: daemon CPU s per GB read, planned cold epoch vs the budget' % (g, what), o,
         cpg, 1.5, 'cpu s/GB', 1.5 / max(cpg, 1e-9), '<= 1.5 cpu s/GB (>= 1)', 1.0)
    emit('%sg. %s: daemon CPU s per GB read, planned cold epoch vs the local-source epoch' % (
        g, what), o, cpg, lcpu, 'cpu s/GB', lcpu / max(cpg, 1e-9), 'report')
    emit('%sg local. %s: daemon CPU s per GB read, the local-directory epoch (median)' % (
        g, what), o, lcpu, None, 'cpu s/GB', None, 'report')
    if floor:
        note('%s plan: L8g floor (floor_bench, %d connections; CPU-s per GB: receivers, reply, '
             'both, the reader): %s' % (what, a.n, floor[1]))
        emit('L8g floor. %s: the lean serving model\'s CPU s per GB (floor_bench: a ranged GET '
             'a sample recv()ed into memory, written into a pipe, the same emulator and samples); '
             'ratio: L8g\'s daemon over it' % what, o, floor[0], cpg, 'cpu s/GB',
             cpg / max(floor[0], 1e-9), 'report (the daemon / the floor)')
    emit('%sh. %s: daemon context switches per GB read, planned cold epoch vs the '
         'local-source epoch' % (g, what), o, swg, lsw, 'switches/GB', lsw / max(swg, 1e-9),
         '<= 1.5x local (>= 0.67)', 1 / 1.5)
    # the FUSE requests and the daemon's switches a sample costs, planned and local: the
    # loader's read decides the IOCTLs (a buffered open's isatty) and READs a sample
    note('%s plan: the loader\'s read: %s' % (what, a.bytes_read if loader == 'bytes' else 'PIL'))
    for lab, x in [('planned cold epoch', e)] + [('local-source epoch %d' % (i + 1), y)
                                                  for i, y in enumerate(locs)]:
        note('%s plan: %s: per sample %s; daemon context switches %.2f (%d samples)' % (
            what, lab, requests_note(x), x.ctxsw / max(x.n, 1), x.n))
    if loader == 'bytes' and a.bytes_read != 'open':
        # today's Python read (buffered open(): an isatty() ioctl, then the READ) on the same
        # local-directory mount, so its cost stays in view: after the rows above, not between
        # their epochs
        local_epoch('open')
        op, base = locs[-1], med([x.secs for x in locs[:-1]])
        note('%s plan: local-source epoch with open(): %.2f s, per sample %s; daemon context '
             'switches %.2f, daemon CPU %.3f s per GB, loader CPU %.2f s; with %s: %s' % (
                 what, op.secs, requests_note(op), op.ctxsw / max(op.n, 1),
                 op.daemon_cpu / max(op.read / 1e9, 1e-9), op.loader_cpu, a.bytes_read,
                 '; '.join('%.2f s, daemon CPU %.3f s per GB, loader CPU %.2f s' % (
                     x.secs, x.daemon_cpu / max(x.read / 1e9, 1e-9), x.loader_cpu)
                     for x in locs[:-1])))
        emit('L8 open. bytes only, Python\'s buffered open(p, \'rb\').read(): the local-directory '
             'epoch vs the same with the bytes-only loader\'s read', o, op.secs, base, 's',
             base / max(op.secs, 1e-9), 'report')
        emit('L8 open. bytes only, Python\'s buffered open(p, \'rb\').read(): daemon context '
             'switches per sample, the local-directory epoch vs the same with the bytes-only '
             'loader\'s read', o, op.ctxsw / max(op.n, 1),
             med([x.ctxsw / max(x.n, 1) for x in locs[:-1]]), 'switches/sample',
             med([x.ctxsw / max(x.n, 1) for x in locs[:-1]]) / max(op.ctxsw / max(op.n, 1),
                                                                  1e-9), 'report')


def requests_note(e):
    """'READ r, IOCTL i, LOOKUP l, GETATTR g' per sample of epoch e (-1: a counter the build
    lacks)."""
    return ', '.join('%s %s' % (k.upper(), '-1' if e.c.get(c, -1) < 0 else
                                '%.3f' % (e.c[c] / max(e.n, 1)))
                     for k, c in (('read', 'reads'), ('ioctl', 'ioctls'), ('lookup', 'lookups'),
                                  ('getattr', 'getattrs')))


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
    emu = Emu(a.shard_dir, a.delay_ms, a.scale_rate_mb, a.w, 'scale', shardfs=a.bin, etag=a.etag)
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
        stop_emu(emu)


def stop_emu(emu, timeout=10):
    """Stop an emulator: SIGTERM, then SIGKILL after timeout seconds (bounded)."""
    emu.stop(timeout)


def stop(signum, frame):
    """SIGTERM and SIGHUP end the run as Ctrl-C does: through the cleanup in main."""
    raise KeyboardInterrupt('signal %d' % signum)


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
    ap.add_argument('--etag', choices=('store', 'nginx'), default='store',
                    help="the emulator's ETag: 'store', an opaque strong token as S3, GCS and "
                    "AIStore send (default), or 'nginx', nginx's weak MTIME-SIZE, which the "
                    "mount checks with a probe per fill (--weak-etag check)")
    ap.add_argument('--emu-base', metavar='EXE', help='row L0d: this run\'s link emulator '
                    'against the emulator EXE (another build of tests/lib/linkemu.c, e.g. '
                    'main\'s), side by side under the same load (runs with emulator in --only, '
                    'or alone: --only emuab)')
    ap.add_argument('--scale-rate-mb', type=float, default=8)
    ap.add_argument('--scale', default='8,16,32,64')
    ap.add_argument('--connections', type=int, help='N (default: the mount\'s default)')
    ap.add_argument('--only', default=','.join(ROWS))
    ap.add_argument('--mount-opts', default='', help='extra options of every shardfs mount '
                    '(experiments; the rows then say so)')
    ap.add_argument('--size-mb', type=int, help='data set size in MB, in 8 shards (default '
                    '1024: issue 25\'s 1 GB; --quick 512); the same shape at any size')
    ap.add_argument('--plan-loaders', default='bytes,jpeg', help='loaders of the plan rows: '
                    'bytes (L8: the loader only reads each file\'s bytes) and jpeg (L7: PIL '
                    'decodes each JPEG)')
    ap.add_argument('--bytes-read', default='read_bytes', choices=('read_bytes', 'read_file',
                                                                    'open'),
                    help='how the bytes-only loader (L8, L9) reads a sample: read_bytes, '
                    'python/shardfs\'s read_bytes, one read(2) of the whole file into a '
                    'buffer a GPU decoder takes (default); read_file, '
                    'torchvision.io.read_file (a mapped read: its munmap flushes the other '
                    'core\'s TLB); open, Python\'s buffered open(p, \'rb\').read() (an '
                    'isatty() ioctl a file). With another than open, L8 open: a '
                    'local-directory epoch with open, after the L8 rows')
    ap.add_argument('--ais-standin', default='c', help='L9\'s AIStore stand-in: c (the C '
                    'emulator with --ais, the default), python (s3servers.AisStandIn in this '
                    'process), or both, c,python: alternated, each row labelled')
    ap.add_argument('--ais-rounds', type=int, default=1, help='L9: rounds of --ais-standin\'s '
                    'sides (alternated; more than 1: each row labelled)')
    ap.add_argument('--epoch-timeout', type=int, default=1800, help='plan rows: an epoch '
                    'that has not ended after this many seconds fails the run (default 1800)')
    ap.add_argument('--skip-unplanned', action='store_true', help='plan rows: leave out the '
                    'unplanned epochs (the slowest part; rows a, c and d against them go too)')
    ap.add_argument('--perf', help='`perf record` the daemon (-F 999) over each loader\'s '
                    'planned cold epoch (flat), into DIR/LOADER.data (`perf report -i '
                    'DIR/bytes.data --no-children --sort sym`), and with call graphs (-g) over '
                    'the first prefetch (L4: DIR/prefetch.data) and the first cold cat (L2b: '
                    'DIR/cat.data)', metavar='DIR')
    ap.add_argument('--epoch-hook', nargs=2, metavar=('START', 'END'),
                    help='shell commands run as --perf-epoch\'s planned epoch starts and ends '
                    '(not with --perf), and L9\'s epochs (each side\'s), {pid} the daemon\'s '
                    'pid: perf stat, strace -c or callgrind_control of the daemon over that '
                    'epoch (tests/bench/ab_plan.sh); a hook that names {epoch} runs over the '
                    'plan rows\' local-directory epochs too, {epoch} \'.local\' there and \'\' '
                    'over the planned one')
    ap.add_argument('--perf-epoch', type=int, default=1, choices=(1, 2),
                    help='with --perf: which planned epoch is recorded: 1, the cold one '
                    '(default), or 2, the second (L8c)')
    ap.add_argument('--data', help='where the data set is kept between runs (default '
                    '/var/tmp/shardfs-linkbench-MB)')
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    a.runs = a.runs or 3
    a.shards = 8
    a.shard_mb = (a.size_mb or (512 if a.quick else 1024)) // a.shards
    a.plan_loaders = [x for x in a.plan_loaders.split(',') if x]
    if set(a.plan_loaders) - {'bytes', 'jpeg'}:
        ap.error('--plan-loaders: bytes, jpeg')
    a.scale = [int(x) for x in a.scale.split(',')]
    a.data = a.data or '/var/tmp/shardfs-linkbench-%d' % (a.shards * a.shard_mb)
    a.n = a.connections or int(default_of(a.bin, 'connections'))
    ck = default_of(a.bin, 'chunk-size')
    a.chunk = int(ck[:-1]) << {'K': 10, 'M': 20, 'G': 30}[ck[-1]]
    a.mount_opts = a.mount_opts.split()
    MOUNT_OPTS[:] = a.mount_opts
    only = set(a.only.split(','))
    if a.emu_base:
        a.emu_base = os.path.abspath(a.emu_base)
        if 'emulator' in only:
            only.add('emuab')
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    a.w = tempfile.mkdtemp(prefix='shardfs-link-', dir='/var/tmp')
    DROP_ROOT[:] = [a.w]
    emu = None
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
              'N = %d; data %d bytes in %d shards; ETag %s' % (
                  a.delay_ms, a.rate_mb, a.scale_rate_mb, a.n, a.total, len(a.names), a.etag),
              flush=True)
        emu = Emu(a.shard_dir, a.delay_ms, a.rate_mb, a.w, 'main', shardfs=a.bin, etag=a.etag)
        note('link emulator: %s (pid %d)' % (emu.p.args[0], emu.p.pid))
        first = emu.stats()
        for name, fn in (('emulator', w_emulator), ('emulator', w_emulator_rate),
                         ('emulator', w_emulator_cpu), ('emuab', w_emulator_ab),
                         ('prefetch', w_prefetch),
                         ('cat', w_cat), ('readers4', w_readers4),
                         ('imagefolder', w_imagefolder), ('smallcache', w_smallcache),
                         ('plan', w_plan), ('getbatch', w_plan_ais_getbatch),
                         ('readers64', w_readers64)):
            if name in only and not (name == 'getbatch' and 'plan' in only):
                log(name)
                s0 = emu.stats()
                fn(a, emu)
                emu_note('%s (%s)' % (name, fn.__name__), s0, emu.stats())
        rq, by, cpu = emu_note('the whole run', first, emu.stats())
        emit('L0c. link emulator: its CPU per request over this run (per GB sent: %.3f CPU s)' %
             (cpu / max(by / 1e9, 1e-9)), 'no mount', cpu / max(rq, 1) * 1e6, None,
             'us/request', None, 'reference')
        stop_emu(emu)
        if 'scaling' in only:
            log('scaling')
            w_scaling(a)
    finally:
        # a second Ctrl-C or SIGTERM does not cut the cleanup short; every wait in it is
        # bounded (the epoch processes are killed, the emulator gets SIGKILL after 10 s, an
        # unmount that hangs is made lazy after 60 s)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for p in list(CHILDREN):
            kill_group(p)
        if emu is not None:
            stop_emu(emu)
        mnt = os.path.join(a.w, 'mnt')
        if mounted(mnt):
            unmount(a.bin, mnt)
        if mounted(mnt):
            log('%s is still mounted: %s left in place' % (mnt, a.w))
        else:
            shutil.rmtree(a.w, ignore_errors=True)

if __name__ == '__main__':
    main()
