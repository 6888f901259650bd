"""Scale benchmark (issue 15): a data set of thousands of shards, both layouts, the daemon's
memory, the index on disk, mount and remount time, `find`, one class directory, a brace
source of 68,000 names and an S3 source of 68,000 keys on the link emulator. Not a test: it
prints figures and ratios against goals and baselines measured in the same run.

    /usr/bin/python3 tests/bench/scale_bench.py BIN [--shards 500] [--runs 3]
        [--only shards,imagefolder,brace,s3] [--brace-names 68000] [--brace-timeout 120]
        [--s3-keys 68000] [--s3-timeout 120]
        [--class-samples 30000] [--classes 1000] [--step-timeout S] [--work DIR] [--mnt-dir DIR]

The data set: --shards hardlinks of one shard of 8,600 members (4,300 samples, each a 16-byte
.jpg and its .cls; tar members of 1 KB, so a shard is 8.8 MB and the set costs one shard of
disk); --shards 500 is 4.3 M members (default, about 5 minutes on 2 cores), --shards 6800 the
issue's 58 M members / 29 M samples (full size). Class 0 holds --class-samples samples over all
shards (two variants of the shard, k and k+1 samples of class 0, so the sum is exact); the rest
are spread over classes 1..--classes-1. The hardlinks share their bytes but not their names,
so every shard has its own index, and the imagefolder view names the same key in every shard
KEY~SHARD.jpg (its rule for names taken twice).

Every mount uses the default options (plus --cache-dir; imagefolder rows add --layout
imagefolder). Rows (tab-separated lines "row<TAB>workload<TAB>options<TAB>shardfs<TAB>baseline
<TAB>unit<TAB>ratio<TAB>goal<TAB>goal_ge" that lib_bench.py puts in its table; a table of
them is printed at the end as well):

  shards layout (source: the local directory of shards)
    mount           `shardfs mount` with an empty cache directory (report)
    find, first     `find MNT` over every member: the indexes are built (report)
    RssAnon         of the daemon (/proc/PID/status) after that find: <= 64 MB at 4.3 M members
                    (500 shards), <= 256 MB at 58 M (6,800 shards); linear in members between
                    them, 64 MB below, 256 MB above
    index on disk   bytes of the saved index files per member, names (and their NUL) apart:
                    <= 32 B plus the name
    find warm/dropped `find MNT` (second and later runs; dropped: drop_caches before each run)
                    vs `find` over a tree of 1 M names on ext4 (1,000 dirs x 1,000 hardlinks
                    of one empty file, built once per run) scaled by entries / 1 M: both
                    sides as microseconds per entry; goal within 2x (ratio >= 0.5)
    remount         `shardfs mount` again with the same cache directory: <= 1 s
  imagefolder layout (--layout imagefolder, the shards layout's cache directory: indexes cached)
    mount           first mount: builds the class view (report)
    RssAnon peak    the daemon's largest RssAnon while that first mount builds the view (sampled
                    every 10 ms from /proc/PID/status until `shardfs mount` returns): <= 256 MB
                    (the goal at 29 M samples; the build's memory does not grow with samples)
    RssAnon         after `find MNT` over every sample: <= 256 MB (the goal at 29 M samples)
    find warm/dropped as above, over samples
    class dir       `ls -l` of class 0 (--class-samples files) vs `ls -l` of a directory of as
                    many empty files, the same names, on ext4; warm and dropped; goal >= 0.5
    remount         <= 1 s
  brace source
    brace mount     `shardfs mount http://127.0.0.1:PORT/d/shard-{000000..067999}.tar` on the
                    link emulator (shardfs_test.linkemu: 30 ms before each response, 60 MB/s per
                    connection), empty cache directory; ready = the mountpoint answers stat as a
                    mount; <= 1 s; after --brace-timeout seconds the row says timeout
  s3 source (--endpoint EMU --no-sign: the link emulator's S3 mode, shardfs_test.linkemu:
  ListObjectsV2 pages generated from the pattern s3://bench/train/shard-%06d.tar, the same
  30 ms and 60 MB/s per connection; key i is the 8.8 MB shard plus 512 * (i % 8) zero bytes,
  so --s3-keys x 8.8 MB is far above --cache-size and the warm fill does not start)
    s3 mount        `shardfs mount s3://bench/train/` of --s3-keys keys, ready = the
                    mountpoint answers stat as a mount; empty cache dir (one mount), and
                    remount (the median of the 2 x --runs - 1 mounts after it, same cache dir);
                    baseline: the page bound, pages x --delay-ms + the listing's bytes (as
                    the emulator sent them) / --rate-mb: within 2x (ratio >= 0.5); after
                    --s3-timeout seconds the row says timeout. Also the first mount vs a
                    plain client that lists the same pages one after the other (Python
                    http.client, one keep-alive connection; median of --runs): what the store
                    and the link give any client; report
    list requests   the list requests the emulator saw at each mount and the daemon's
                    store_list_requests: exactly ceil(keys / 1000), and no HEAD or GET
    ls, ls -l       of the mount's root (2 x keys entries: each .tar and its member
                    directory), each right after a mount of its own (--runs mounts each,
                    median), with the requests they caused (none: ls -l's sizes come from the
                    listing; every size of the ls -l output is checked against the pattern,
                    mismatches are logged), vs the same command on an ext4 directory of the
                    same names (empty files and directories), warm; report

Needs root for drop_caches (without it the dropped rows are skipped). Every step has a timeout
(--step-timeout, default 300 s or 0.5 s per shard, whichever is more): a step that times out
prints its row as a timeout, NO, and the run goes on. The work directory (default a new one
under /var/tmp) is removed at the end.
"""
import argparse
import http.client
import io
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))
from shardfs_test.linkemu import Emu  # noqa: E402

SAMPLES = 4300  # per shard: 8,600 members
MEMBERS = 2 * SAMPLES
EXT4_DIRS, EXT4_PER_DIR = 1000, 1000
MB = 1 << 20
# RssAnon goals of the shards layout: (members, bytes)
RSS_GOALS = ((500 * MEMBERS, 64 * MB), (6800 * MEMBERS, 256 * MB))
RSS_GOAL_IMAGEFOLDER = 256 * MB  # at 29 M samples (6,800 shards)
INDEX_BUDGET = 32  # bytes per member, names apart
ONLY = ['shards', 'imagefolder', 'brace', 's3']
ROWS = []
ENV = dict(os.environ, LC_ALL='C')


def log(*a):
    print('[scale %s]' % time.strftime('%H:%M:%S'), *a, file=sys.stderr, flush=True)


class StepTimeout(Exception):
    pass


def emu_cpu_note(emu, what):
    """Print the link emulator's requests and CPU (its /__stats) before it stops: every run
    says what the emulator cost, per request and per GB sent."""
    try:
        st = emu.stats()
    except OSError as e:
        log('%s: the emulator\'s stats: %s' % (what, e))
        return
    gb = st['bytes_sent'] / 1e9
    print('note\t%s: the link emulator answered %d requests, sent %.3f GB, %.2f CPU s: %.1f us '
          'per request, %s CPU s per GB' % (
              what, st['requests'], gb, st['cpu_s'], st['cpu_s'] / max(st['requests'], 1) * 1e6,
              '%.3f' % (st['cpu_s'] / gb) if gb >= 0.01 else 'n/a (under 10 MB sent)'),
          flush=True)


def emit(workload, opts, sf, base, unit, ratio, goal, ge=None):
    """One row; sf and base are numbers, strings (a budget, a timeout) or None. met is 'NO'
    for a timeout (ratio None with a goal)."""
    def v(x):
        return '' if x is None else x if isinstance(x, str) else '%.6g' % x
    if ge is None:
        met = '-'
    elif ratio is None:
        met = 'NO'
    else:
        met = 'yes' if float('%.2f' % ratio) >= ge else 'NO'
    ROWS.append((workload, opts, v(sf) + (' ' + unit if unit and not isinstance(sf, str)
                                          and sf is not None else ''),
                 v(base) + (' ' + unit if unit and not isinstance(base, str) and base is not None
                            else ''), '' if ratio is None else '%.2f' % ratio, goal, met))
    print('row\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s' % (
        workload, opts, v(sf), v(base), unit, '' if ratio is None else '%.4f' % ratio, goal,
        '' if ge is None else '%g' % ge), flush=True)


def print_table():
    cols = ('workload', 'options', 'shardfs', 'baseline', 'ratio', 'goal', 'met')
    wid = [max(len(c), *(len(r[i]) for r in ROWS)) for i, c in enumerate(cols)]
    line = lambda vals: '| ' + ' | '.join(v.ljust(w) for v, w in zip(vals, wid)) + ' |'  # noqa
    print()
    print(line(cols))
    print('|' + '|'.join('-' * (w + 2) for w in wid) + '|')
    for r in ROWS:
        print(line(r))
    print(flush=True)


def med(xs):
    return statistics.median(xs)


def can_drop():
    return os.access('/proc/sys/vm/drop_caches', os.W_OK)


def drop():
    os.sync()
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('3\n')


def timed_lines(cmd, timeout):
    """(seconds, lines of stdout) of cmd; the lines are counted as they come, not kept."""
    t = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=ENV)
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    n = 0
    try:
        while True:
            b = p.stdout.read(1 << 20)
            if not b:
                break
            n += b.count(b'\n')
        rc = p.wait()
    finally:
        timer.cancel()
        p.stdout.close()
    secs = time.monotonic() - t
    if rc == -signal.SIGKILL and secs >= timeout:
        raise StepTimeout('%s: not done in %.0f s' % (' '.join(cmd), timeout))
    if rc != 0:
        raise RuntimeError('%s failed (%d)' % (' '.join(cmd), rc))
    return secs, n


def rss_anon(pid):
    with open('/proc/%d/status' % pid) as f:
        return int(re.search(r'RssAnon:\s+(\d+) kB', f.read()).group(1)) * 1024


class Mount:
    """A shardfs mount with default options plus --cache-dir and extra; mount_s: the wall time
    of `shardfs mount` (it returns once the mount is ready)."""

    def __init__(self, a, src, mnt, cache, extra=(), peak=False):
        self.a, self.mnt = a, mnt
        self.peak = None  # with peak: the daemon's largest RssAnon until mount returned
        os.makedirs(mnt, exist_ok=True)
        cmd = [a.bin, 'mount', '--cache-dir', cache, *extra, src, mnt]
        t = time.monotonic()
        p = subprocess.Popen(cmd)
        done = threading.Event()
        sampler = threading.Thread(target=self.sample_peak, args=(p, done)) if peak else None
        if sampler:
            sampler.start()
        try:
            rc = p.wait(timeout=a.step_timeout)
        except subprocess.TimeoutExpired:
            stop_mount(p)
            raise StepTimeout('%s: not ready in %.0f s' % (' '.join(cmd), a.step_timeout))
        finally:
            done.set()
            if sampler:
                sampler.join()
        if rc != 0:
            raise RuntimeError('%s failed (%d)' % (' '.join(cmd), rc))
        self.mount_s = time.monotonic() - t
        a.mounts.append(self)
        with open(os.path.join(mnt, '.shardfs/stats')) as f:
            self.pid = int(re.search(r'"pid":\s*(\d+)', f.read()).group(1))

    def sample_peak(self, p, done):
        """The largest RssAnon of p's daemon (its child) every 10 ms until done."""
        kid = None
        while not done.wait(0.01):
            kid = kid or daemon_of(p.pid)
            if kid:
                try:
                    self.peak = max(self.peak or 0, rss_anon(kid))
                except (OSError, AttributeError):
                    pass

    def umount(self):
        t = time.monotonic()
        try:
            subprocess.run([self.a.bin, 'umount', self.mnt], stdout=subprocess.DEVNULL,
                           timeout=self.a.step_timeout)
        except subprocess.TimeoutExpired:
            log('umount %s: not done in %.0f s: detached (fusermount3 -uz)' % (
                self.mnt, self.a.step_timeout))
            subprocess.run(['fusermount3', '-uz', self.mnt])
        if self in self.a.mounts:
            self.a.mounts.remove(self)
        return time.monotonic() - t


def daemon_of(pid):
    """The daemon forked by `shardfs mount` (its one child), or None."""
    try:
        with open('/proc/%d/task/%d/children' % (pid, pid)) as f:
            kids = f.read().split()
        return int(kids[0]) if kids else None
    except OSError:
        return None


def stop_mount(p):
    """Stop a `shardfs mount` that is not ready yet: its daemon (SIGTERM stops it at once),
    then the command itself."""
    kid = daemon_of(p.pid)
    if kid:
        os.kill(kid, signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


# ---------------------------------------------------------------------------------------------
# data

def write_shard(path, class0, classes):
    """A shard of SAMPLES samples (16-byte .jpg, .cls): the first class0 of class 0, the others
    spread over classes 1..classes-1. Returns the bytes of its member names with their NULs."""
    names = 0
    with tarfile.open(path + '.part', 'w', format=tarfile.USTAR_FORMAT) as t:
        for i in range(SAMPLES):
            c = 0 if i < class0 else 1 + (i - class0) % (classes - 1)
            for ext, data in (('jpg', b'\xff\xd8\xff\xe0' + b'%012d' % i), ('cls', b'%d' % c)):
                ti = tarfile.TarInfo('n%08d_%06d.%s' % (c, i, ext))
                ti.size = len(data)
                ti.mtime = 1700000000
                ti.mode = 0o644
                t.addfile(ti, io.BytesIO(data))
                names += len(ti.name) + 1
    os.rename(path + '.part', path)
    return names


def make_shards(a):
    """--shards hardlinks of two shard variants (k and k+1 samples of class 0) in a.src."""
    k, extra = divmod(a.class_samples, a.shards)
    if k + (1 if extra else 0) > SAMPLES:
        raise SystemExit('--class-samples %d does not fit in %d shards of %d samples' % (
            a.class_samples, a.shards, SAMPLES))
    base = os.path.join(a.w, 'variants')
    os.makedirs(base)
    os.makedirs(a.src)
    for s in range(a.shards):
        var = os.path.join(base, 'class0-%d.tar' % (k + (s < extra)))
        if not os.path.exists(var):
            a.variant_names = write_shard(var, k + (s < extra), a.classes)
        os.link(var, os.path.join(a.src, 'shard-%06d.tar' % s))
    a.one_shard = var
    a.members = a.shards * MEMBERS
    a.samples = a.shards * SAMPLES


def make_ext4_tree(a):
    """1,000 dirs x 1,000 names of empty files: the `find` baseline. The names of a dir are
    hardlinks of its first file: find reads names and file types (getdents) and never the
    files' inodes, and ext4 makes a link several times faster than a new inode (on this VM,
    busy: 1.9 s against 27 s for 50,000)."""
    t = time.monotonic()
    for d in range(EXT4_DIRS):
        p = os.path.join(a.ext4, 'd%04d' % d)
        os.makedirs(p)
        first = os.path.join(p, 'n%08d_%06d.jpg' % (d, 0))
        os.close(os.open(first, os.O_CREAT | os.O_WRONLY, 0o644))
        for f in range(1, EXT4_PER_DIR):
            os.link(first, os.path.join(p, 'n%08d_%06d.jpg' % (d, f)))
    a.ext4_entries = 1 + EXT4_DIRS * (1 + EXT4_PER_DIR)
    log('ext4 tree of %d names: %.1f s' % (EXT4_DIRS * EXT4_PER_DIR, time.monotonic() - t))
    t = time.monotonic()
    os.sync()  # its writes are not left to the first timed drop's sync
    log('sync: %.1f s' % (time.monotonic() - t))


# ---------------------------------------------------------------------------------------------
# rows

def fmt_n(n):
    return '{:,}'.format(n)


def find_rows(a, m, label, opts, entries, count_ok):
    """find over the mount, warm and dropped, against find over the ext4 tree scaled by the
    entries: microseconds per entry on both sides."""
    modes = ['warm'] + (['dropped'] if can_drop() else [])
    for mode in modes:
        try:
            if mode == 'warm':  # not timed: both sides warm (a dropped row may have run)
                for d in (m.mnt, a.ext4):
                    timed_lines(['find', d], a.step_timeout)
            ts = {'mount': [], 'ext4': []}
            for i in range(a.runs):
                for side in (('mount', 'ext4') if i % 2 == 0 else ('ext4', 'mount')):
                    if mode == 'dropped':
                        drop()
                    secs, n = timed_lines(['find', m.mnt if side == 'mount' else a.ext4],
                                          a.step_timeout)
                    want = entries if side == 'mount' else a.ext4_entries
                    if n != want:
                        count_ok.append('%s find %s: %d lines, want %d' % (label, side, n, want))
                    ts[side].append(secs)
            tm, te = med(ts['mount']), med(ts['ext4'])
            um, ue = tm / entries * 1e6, te / a.ext4_entries * 1e6
            emit('find over %s %s, %s: %.2f s vs ext4 1M names %.2f s x %.2f' % (
                fmt_n(entries), label, mode, tm, te, entries / a.ext4_entries), opts, um, ue,
                'us/entry', ue / um, '<= 2x ext4 (>= 0.5)', 0.5)
        except StepTimeout as e:
            log(e)
            emit('find over %s %s, %s' % (fmt_n(entries), label, mode), opts,
                 'timeout %.0f s' % a.step_timeout, None, 'us/entry', None,
                 '<= 2x ext4 (>= 0.5)', 0.5)


def remount_row(a, src, cache, label, opts, extra=()):
    ts = []
    try:
        for _ in range(a.runs):
            m = Mount(a, src, a.mnt, cache, extra)
            os.stat(a.mnt)
            ts.append(m.mount_s)
            m.umount()
        t = med(ts)
        emit('remount, %s, warm cache dir (median of %d)' % (label, len(ts)), opts, t,
             '1 s budget', 's', 1.0 / t, '<= 1 s', 1.0)
    except StepTimeout as e:
        log(e)
        emit('remount, %s, warm cache dir' % label, opts, 'timeout %.0f s' % a.step_timeout,
             '1 s budget', 's', None, '<= 1 s', 1.0)


def first_find(a, m, label, opts, entries):
    """The first find over every entry: (seconds or None on timeout); RssAnon after it."""
    try:
        secs, n = timed_lines(['find', m.mnt], a.step_timeout)
    except StepTimeout as e:
        log(e)
        emit('find over %s %s, first' % (fmt_n(entries), label), opts,
             'timeout %.0f s' % a.step_timeout, None, 's', None, 'report')
        return None
    if n != entries:
        log('%s: find printed %d lines, want %d' % (label, n, entries))
    emit('find over %s %s, first after mount%s' % (
        fmt_n(entries), label, '' if n == entries else ' (%d lines!)' % n), opts, secs, None,
        's', None, 'report')
    return secs


def rss_goal_shards(members):
    (m0, b0), (m1, b1) = RSS_GOALS
    if members <= m0:
        return b0
    if members >= m1:
        return b1
    return b0 + (b1 - b0) * (members - m0) / (m1 - m0)


def w_shards(a):
    opts = 'defaults'
    cache = os.path.join(a.w, 'cache')
    # entries find prints: MNT, each shard's .tar and directory, every member
    entries = 1 + 2 * a.shards + a.members
    lab = 'entries (shards layout: %s members)' % fmt_n(a.members)
    try:
        m = Mount(a, a.src, a.mnt, cache)
    except StepTimeout as e:
        log(e)
        emit('mount, shards layout, %d shards, empty cache dir' % a.shards, opts,
             'timeout %.0f s' % a.step_timeout, None, 's', None, 'report')
        return
    emit('mount, shards layout, %d shards, empty cache dir' % a.shards, opts, m.mount_s, None,
         's', None, 'report')
    log('shards: first find (builds %d indexes)' % a.shards)
    if first_find(a, m, lab, opts, entries) is not None:
        rss = rss_anon(m.pid)
        goal = rss_goal_shards(a.members)
        emit('RssAnon of the daemon after find over %s members (%d shards)' % (
            fmt_n(a.members), a.shards), opts, rss / MB, '%.0f MB budget' % (goal / MB), 'MB',
            goal / rss, '<= %.0f MB' % (goal / MB), 1.0)
        log('RssAnon %.1f MB: %.1f B per member' % (rss / MB, rss / a.members))
    idx, nidx = 0, 0
    for root, _, files in os.walk(cache):
        if os.path.basename(root) == 'meta' or os.path.basename(os.path.dirname(root)) == 'meta':
            idx += sum(os.path.getsize(os.path.join(root, f)) for f in files)
            nidx += len(files)
    if nidx:  # every shard has the same members: per member of the shards indexed
        if nidx != a.shards:
            log('%d index files for %d shards' % (nidx, a.shards))
        per = (idx - nidx * a.variant_names) / (nidx * MEMBERS)
        emit('index on disk per member, names apart (with names: %.1f B)' % (
            idx / (nidx * MEMBERS)), opts, per, '%d B budget' % INDEX_BUDGET, 'B',
            INDEX_BUDGET / per, '<= %d B + name' % INDEX_BUDGET, 1.0)
    bad = []
    log('shards: find warm and dropped')
    find_rows(a, m, lab, opts, entries, bad)
    for b in bad:
        log('count mismatch:', b)
    log('shards: umount took %.1f s' % m.umount())
    log('shards: remount')
    remount_row(a, a.src, cache, 'shards layout, %d shards' % a.shards, opts)


def class_dir_rows(a, m, opts):
    width = len(str(a.classes - 1))
    cdir = os.path.join(m.mnt, '0' * width)
    names = os.listdir(cdir)
    if len(names) != a.class_samples:
        log('class dir %s: %d names, want %d' % (cdir, len(names), a.class_samples))
    ext = os.path.join(a.w, 'ext4-class')
    os.makedirs(ext)
    for nm in names:
        os.close(os.open(os.path.join(ext, nm), os.O_CREAT | os.O_WRONLY, 0o644))
    modes = ['warm'] + (['dropped'] if can_drop() else [])
    for mode in modes:
        lab = 'ls -l of one class dir of %s samples vs ext4, %s' % (fmt_n(len(names)), mode)
        try:
            if mode == 'warm':
                for d in (cdir, ext):
                    timed_lines(['ls', '-l', d], a.step_timeout)
            ts = {'mount': [], 'ext4': []}
            # a fraction of a second each: warm takes more runs; dropped ones cost a drop
            for i in range(max(a.runs, 5) if mode == 'warm' else a.runs):
                for side in (('mount', 'ext4') if i % 2 == 0 else ('ext4', 'mount')):
                    if mode == 'dropped':
                        drop()
                    secs, _ = timed_lines(['ls', '-l', cdir if side == 'mount' else ext],
                                          a.step_timeout)
                    ts[side].append(secs)
            tm, te = med(ts['mount']), med(ts['ext4'])
            emit(lab, opts, tm, te, 's', te / tm, '<= 2x ext4 (>= 0.5)', 0.5)
        except StepTimeout as e:
            log(e)
            emit(lab, opts, 'timeout %.0f s' % a.step_timeout, None, 's', None,
                 '<= 2x ext4 (>= 0.5)', 0.5)
    shutil.rmtree(ext)


def w_imagefolder(a):
    opts = '--layout imagefolder'
    extra = ('--layout', 'imagefolder')
    cache = os.path.join(a.w, 'cache')
    classes = a.classes
    entries = 1 + classes + a.samples
    lab = 'imagefolder, %d shards' % a.shards
    cached = os.path.isdir(cache)
    try:
        m = Mount(a, a.src, a.mnt, cache, extra, peak=True)
    except StepTimeout as e:
        log(e)
        emit('mount, %s' % lab, opts, 'timeout %.0f s' % a.step_timeout, None, 's', None,
             'report')
        return
    emit('mount, %s (builds the class view; %s)' % (
        lab, 'indexes cached' if cached else 'empty cache dir'), opts, m.mount_s, None, 's',
        None, 'report')
    if m.peak:
        emit('RssAnon peak during the first imagefolder build, %s samples (%d shards)' % (
            fmt_n(a.samples), a.shards), opts, m.peak / MB, '%.0f MB budget' % (
            RSS_GOAL_IMAGEFOLDER / MB), 'MB', RSS_GOAL_IMAGEFOLDER / m.peak,
            '<= 256 MB (at 29 M)', 1.0)
        log('RssAnon peak during the build %.1f MB: %.1f B per sample' % (
            m.peak / MB, m.peak / a.samples))
    log('imagefolder: first find')
    flab = 'entries (imagefolder: %s samples)' % fmt_n(a.samples)
    if first_find(a, m, flab, opts, entries) is not None:
        rss = rss_anon(m.pid)
        emit('RssAnon of the daemon after find over %s samples (%d shards)' % (
            fmt_n(a.samples), a.shards), opts, rss / MB, '%.0f MB budget' % (
            RSS_GOAL_IMAGEFOLDER / MB), 'MB', RSS_GOAL_IMAGEFOLDER / rss,
            '<= 256 MB (at 29 M)', 1.0)
        log('RssAnon %.1f MB: %.1f B per sample' % (rss / MB, rss / a.samples))
    log('imagefolder: class dir listing')
    class_dir_rows(a, m, opts)
    bad = []
    log('imagefolder: find warm and dropped')
    find_rows(a, m, flab, opts, entries, bad)
    for b in bad:
        log('count mismatch:', b)
    log('imagefolder: umount took %.1f s' % m.umount())
    log('imagefolder: remount')
    remount_row(a, a.src, cache, lab, opts, extra)


def mount_ready(a, src, cache, extra, timeout, tag):
    """`shardfs mount` of src with --cache-dir cache and extra options at a.mnt: the seconds
    until the mountpoint answers stat as a mount (the daemon's ready, not the command's
    exit), or a string for the row (a timeout, a failure) after logging why."""
    mnt = a.mnt
    os.makedirs(mnt, exist_ok=True)
    parent = os.stat(os.path.dirname(mnt)).st_dev
    with open(os.path.join(a.w, '%s-mount.err' % tag), 'w+') as errf:
        t = time.monotonic()
        p = subprocess.Popen([a.bin, 'mount', '--cache-dir', cache, *extra, src, mnt],
                             stdout=subprocess.DEVNULL, stderr=errf)
        ready = None
        while time.monotonic() - t < timeout:
            if os.stat(mnt).st_dev != parent:
                ready = time.monotonic() - t
                break
            if p.poll() not in (None, 0):
                break
            time.sleep(0.005)
        if ready is not None:
            p.wait(timeout=a.step_timeout)
            return ready
        failed = p.poll()
        if failed is None:  # still listing
            stop_mount(p)
        errf.seek(0)
        log('%s mount: not ready after %.1f s (rc %s): %s' % (
            tag, time.monotonic() - t, p.returncode, errf.read().strip()[-500:]))
        return 'timeout %.0f s' % timeout if failed is None else 'failed (rc %d)' % failed


def w_brace(a):
    """shardfs mount of a brace source of --brace-names names on the link emulator; ready =
    the mountpoint answers stat as a mount."""
    web = os.path.join(a.w, 'web')
    d = os.path.join(web, 'd')
    os.makedirs(d)
    last = a.brace_names - 1
    for i in range(a.brace_names):  # symlinks: ext4 allows 65,000 hardlinks of one inode
        os.symlink(a.one_shard, os.path.join(d, 'shard-%06d.tar' % i))
    emu = Emu(web, a.delay_ms, a.rate_mb, a.w, 'brace', shardfs=a.bin)
    lab = 'brace mount, %s names on the link emulator (%g ms, %g MB/s per conn), ready = ' \
        'stat' % (fmt_n(a.brace_names), a.delay_ms, a.rate_mb)
    try:
        ready = mount_ready(a, emu.url('d/shard-{000000..%06d}.tar' % last),
                            os.path.join(a.w, 'cache-brace'), (), a.brace_timeout, 'brace')
        if isinstance(ready, str):
            emit(lab, 'defaults', ready, '1 s budget', 's', None, '<= 1 s', 1.0)
        else:
            emit(lab, 'defaults', ready, '1 s budget', 's', 1.0 / ready, '<= 1 s', 1.0)
            subprocess.run([a.bin, 'umount', a.mnt], stdout=subprocess.DEVNULL,
                           timeout=a.step_timeout)
    finally:
        emu_cpu_note(emu, 'brace')
        emu.stop()


S3_BUCKET, S3_PREFIX = 'bench', 'train/'


def s3_delta(emu, mnt, before):
    """Requests since before (a previous s3_delta's snapshot, or None): the emulator's list
    requests, list bytes, HEADs and GETs, and the store_list_requests of the daemon at mnt
    (of a daemon started since: all of its own); returns (delta, snapshot)."""
    now = dict(emu.stats())
    st = m_stats(mnt)
    now['daemon_list'], now['pid'] = st.get('store_list_requests', 0), st.get('pid')
    before = dict(before or {})
    if before.get('pid') != now['pid']:
        before['daemon_list'] = 0
    return {k: now.get(k, 0) - before.get(k, 0) for k in (
        'list_requests', 'list_bytes', 'heads', 'gets', 'other', 'daemon_list')}, now


def m_stats(mnt):
    with open(os.path.join(mnt, '.shardfs/stats')) as f:
        return json.load(f)


def reqs(d):
    return '%d list, %d HEAD, %d GET%s' % (
        d['list_requests'], d['heads'], d['gets'],
        ', %d other' % d['other'] if d['other'] else '')


def s3_ls_check(a, out):
    """`ls -l` output of the root against the pattern: every shard with its size, every
    member directory; a list of mismatches (empty when all is right)."""
    want = {'shard-%06d.tar' % i: a.s3_template + 512 * (i % 8) for i in range(a.s3_keys)}
    dirs, bad = 0, []
    for ln in out.splitlines():
        f = ln.split()
        if len(f) < 9:
            continue
        if f[0].startswith('d'):
            dirs += 1
        elif want.pop(f[-1], None) != int(f[4]):
            bad.append(ln)
    if want:
        bad.append('%d shards not listed (%s ...)' % (len(want), sorted(want)[0]))
    if dirs != a.s3_keys:
        bad.append('%d member directories, want %d' % (dirs, a.s3_keys))
    return bad


def ext4_same_names(a):
    """A directory on ext4 with the names of the s3 mount's root: the shards as empty files,
    their member directories as empty directories."""
    d = os.path.join(a.w, 'ext4-s3root')
    os.makedirs(d)
    for i in range(a.s3_keys):
        os.close(os.open(os.path.join(d, 'shard-%06d.tar' % i), os.O_CREAT | os.O_WRONLY, 0o644))
        os.mkdir(os.path.join(d, 'shard-%06d' % i))
    return d


def s3_client_list(emu, prefix):
    """A plain client's listing of the emulator's bucket: every ListObjectsV2 page one after
    the other on one keep-alive connection (Python http.client, the token found by a regex):
    (seconds, pages). What the store and the link give any client."""
    c = http.client.HTTPConnection('127.0.0.1', emu.port, timeout=60)
    tok, pages, t = None, 0, time.monotonic()
    try:
        while True:
            q = 'list-type=2&max-keys=1000&prefix=' + urllib.parse.quote(prefix, safe='')
            if tok:
                q += '&continuation-token=' + urllib.parse.quote(tok, safe='')
            c.request('GET', '/%s?%s' % (S3_BUCKET, q))
            body = c.getresponse().read()
            pages += 1
            m = re.search(rb'<NextContinuationToken>([^<]*)<', body)
            if not m:
                return time.monotonic() - t, pages
            tok = m.group(1).decode()
    finally:
        c.close()


def s3_mount(a, emu, src, extra, cache, tag):
    """One mount of the s3 rows: (ready seconds or a failure string, (its requests, a
    snapshot for s3_delta))."""
    before = emu.stats()
    ready = mount_ready(a, src, cache, extra, a.s3_timeout, tag)
    if isinstance(ready, str):
        return ready, None
    return ready, s3_delta(emu, a.mnt, before)


def s3_ls(a, emu, cmd, snap):
    """cmd (`ls` or `ls -l`) of the mount's root: (seconds, its requests, stdout)."""
    t = time.monotonic()
    r = subprocess.run(cmd + [a.mnt], stdout=subprocess.PIPE, env=ENV, timeout=a.step_timeout,
                       check=True)
    secs = time.monotonic() - t
    d, _ = s3_delta(emu, a.mnt, snap)
    return secs, d, r.stdout.decode()


def w_s3(a):
    """An S3 source of --s3-keys keys on the link emulator's S3 mode: mount ready against the
    page bound and the requests the mount took, then `ls` and `ls -l` of the root, each right
    after a mount of its own (--runs mounts each), against ext4."""
    pages = -(-a.s3_keys // 1000)
    a.s3_template = os.path.getsize(a.one_shard)
    emu = Emu(None, a.delay_ms, a.rate_mb, a.w, 's3', shardfs=a.bin,
              s3={'keys': a.s3_keys, 'object': a.one_shard, 'bucket': S3_BUCKET,
                  'prefix': S3_PREFIX})
    src = 's3://%s/%s' % (S3_BUCKET, S3_PREFIX)
    extra = ('--endpoint', emu.url(), '--no-sign')
    opts = '--endpoint EMU --no-sign'
    cache = os.path.join(a.w, 'cache-s3')
    lab = 's3 mount, %s keys on the link emulator (%g ms, %g MB/s per conn), ready = stat' % (
        fmt_n(a.s3_keys), a.delay_ms, a.rate_mb)
    goal = '<= 2x page bound (>= 0.5)'
    try:
        log('s3: ext4 directory of the same names (baseline of ls)')
        ext4 = ext4_same_names(a)
        cl = [s3_client_list(emu, S3_PREFIX) for _ in range(a.runs)]
        client = (med([x[0] for x in cl]), cl[0][1])
        ready, mounts, ls_t, bad = [], [], {'ls': [], 'ls -l': []}, []
        for i in range(2 * a.runs):
            cmd = ['ls'] if i % 2 == 0 else ['ls', '-l']
            r, got = s3_mount(a, emu, src, extra, cache, 's3')
            if isinstance(r, str):
                emit('%s, %s' % (lab, 'empty cache dir' if i == 0 else 'remount'), opts, r,
                     None, 's', None, goal, 0.5)
                return
            d, snap = got
            ready.append(r)
            mounts.append(d)
            secs, dl, out = s3_ls(a, emu, cmd, snap)
            ls_t[' '.join(cmd)].append((secs, dl, out.count('\n')))
            if cmd == ['ls', '-l']:
                bad += s3_ls_check(a, out)
            subprocess.run([a.bin, 'umount', a.mnt], stdout=subprocess.DEVNULL,
                           timeout=a.step_timeout)
        d0 = mounts[0]
        bound = d0['list_requests'] * a.delay_ms / 1e3 + d0['list_bytes'] / (a.rate_mb * 1e6)
        btxt = 'page bound: %d pages x %g ms + %.1f MB / %g MB/s' % (
            d0['list_requests'], a.delay_ms, d0['list_bytes'] / 1e6, a.rate_mb)
        emit('%s, empty cache dir; %s' % (lab, btxt), opts, ready[0], bound, 's',
             bound / ready[0], goal, 0.5)
        emit('%s, empty cache dir, vs a plain client listing the same %d pages one after the '
             'other (median of %d)' % (lab, client[1], a.runs), opts, ready[0], client[0], 's',
             client[0] / ready[0], 'report')
        rm = med(ready[1:])
        emit('%s, remount (median of %d); %s' % (lab, len(ready) - 1, btxt), opts, rm, bound,
             's', bound / rm, goal, 0.5)
        lists = sorted(set(m['list_requests'] for m in mounts))
        other = sum(m['heads'] + m['gets'] + m['other'] for m in mounts)
        daemon = sorted(set(m['daemon_list'] for m in mounts))
        emit('list requests of each mount (%d mounts; daemon store_list_requests %s): %s' % (
            len(mounts), '/'.join(map(str, daemon)), reqs(mounts[0])), opts,
            lists[-1] if len(lists) == 1 else '%d-%d' % (lists[0], lists[-1]), pages,
            'requests', 1.0 if lists == [pages] and daemon == [pages] and not other else 0.0,
            '== ceil(keys / 1000), no HEAD or GET', 1.0)
        for cmd, runs in ls_t.items():
            tm = med([x[0] for x in runs])
            timed_lines(cmd.split() + [ext4], a.step_timeout)  # warm
            te = med([timed_lines(cmd.split() + [ext4], a.step_timeout)[0]
                      for _ in range(a.runs)])
            reqsum = {k: sum(x[1][k] for x in runs) for k in runs[0][1]}
            emit('%s of the s3 root right after a mount (%s lines; median of %d; requests of '
                 'all: %s) vs ext4, same names, warm' % (cmd, fmt_n(runs[0][2]), len(runs),
                                                         reqs(reqsum)),
                 opts, tm, te, 's', te / tm, 'report')
        for b in bad[:5]:
            log('ls -l mismatch:', b)
        log('ls -l: %s' % ('every shard with its size, every member directory' if not bad
                           else '%d mismatches' % len(bad)))
    finally:
        emu_cpu_note(emu, 's3')
        emu.stop()
        if os.path.ismount(a.mnt):
            subprocess.run(['fusermount3', '-u', a.mnt])


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('bin')
    ap.add_argument('--shards', type=int, default=500,
                    help='shards of 8,600 members (default 500: 4.3 M members; full size 6800)')
    ap.add_argument('--runs', type=int, default=3, help='runs per figure, median (default 3)')
    ap.add_argument('--only', default=','.join(ONLY), help='comma-separated subset of ' +
                    ','.join(ONLY))
    ap.add_argument('--classes', type=int, default=1000)
    ap.add_argument('--class-samples', type=int, default=30000,
                    help='samples of the listed class (default 30000)')
    ap.add_argument('--brace-names', type=int, default=68000)
    ap.add_argument('--brace-timeout', type=float, default=120)
    ap.add_argument('--s3-keys', type=int, default=68000)
    ap.add_argument('--s3-timeout', type=float, default=120)
    ap.add_argument('--delay-ms', type=float, default=30)
    ap.add_argument('--rate-mb', type=float, default=60)
    ap.add_argument('--step-timeout', type=float,
                    help='seconds per step (default: 300 or 0.5 per shard, the larger)')
    ap.add_argument('--work', help='work directory (default: a new one under /var/tmp); '
                    'removed at the end')
    ap.add_argument('--mnt-dir', help='mountpoint (default: WORK/mnt)')
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    a.step_timeout = a.step_timeout or max(300.0, 0.5 * a.shards)
    only = set(a.only.split(','))
    if only - set(ONLY):
        ap.error('--only: unknown %s' % ','.join(sorted(only - set(ONLY))))
    if a.work:
        os.makedirs(a.work)
        a.w = os.path.abspath(a.work)
    else:
        a.w = tempfile.mkdtemp(prefix='shardfs-scale-', dir='/var/tmp')
    a.src = os.path.join(a.w, 'src')
    a.ext4 = os.path.join(a.w, 'ext4-1m')
    a.mnt = os.path.abspath(a.mnt_dir) if a.mnt_dir else os.path.join(a.w, 'mnt')
    a.mounts = []
    if not can_drop():
        log('cannot write /proc/sys/vm/drop_caches (not root?): the dropped rows are skipped')
    t0 = time.monotonic()
    try:
        make_shards(a)
        log('%d shards (hardlinks of %s), %s members, %s samples; ext4 baseline tree next' % (
            a.shards, os.path.basename(a.one_shard), fmt_n(a.members), fmt_n(a.samples)))
        if only & {'shards', 'imagefolder'}:
            make_ext4_tree(a)
        print('scale: %d shards of %d members (%s members, %s samples); %d runs; step timeout '
              '%.0f s' % (a.shards, MEMBERS, fmt_n(a.members), fmt_n(a.samples), a.runs,
                          a.step_timeout), flush=True)
        for name, fn in (('shards', w_shards), ('imagefolder', w_imagefolder),
                         ('brace', w_brace), ('s3', w_s3)):
            if name in only:
                log(name)
                try:
                    fn(a)
                except (StepTimeout, RuntimeError, OSError) as e:
                    # a step without a row of its own: the rest of the run goes on
                    log('%s: stopped: %s' % (name, e))
    finally:
        for m in list(a.mounts):
            m.umount()
        if os.path.ismount(a.mnt):
            subprocess.run(['fusermount3', '-u', a.mnt])
        log('removing %s' % a.w)
        shutil.rmtree(a.w, ignore_errors=True)
        if a.mnt_dir:
            try:
                os.rmdir(a.mnt)
            except OSError:
                pass
    if ROWS:
        print_table()
    print('ratio: baseline / shardfs time (per entry for find), or budget / value; at or '
          'above the goal: met. total %.0f s' % (time.monotonic() - t0), flush=True)


if __name__ == '__main__':
    main()
