#!/usr/bin/python3
"""shardfs cache tier tests through real mounts of nginx on 127.0.0.1 (docs/design.md 2-3).

usage: test_cache.py SHARDFS GROUP
GROUP:
  offline      read a JSON-listed dataset, stop nginx, read it all again (same bytes, nothing
               fetched); remount with nginx still down: source_offline, every cached shard reads
               exactly, the log says the source is unreachable
  capacity     a dataset 3x --cache-size read twice in full by 4 processes at once: bytes
               correct, the cache's data files never exceed the limit by more than one chunk per
               connection (sampled every 50 ms), evictions happened
  crash        kill -9 the daemon while a proxy holds two fills in flight (and a map records
               earlier chunks), remount with the same cache dir: bytes correct, some bytes
               reused, the chunks in flight fetched again
  concurrency  8 processes reading random members (whole and partial) and raw ranges of the
               same shards while a small cache evicts: bytes correct, no deadlock, daemon alive;
               under a TSan build also: no ThreadSanitizer report in the daemon's log
  share        several daemons on one cache directory: two mounts on the default cache dir
               (the second fetches nothing the first filled); then 3 daemons x 4 readers on one
               cache dir 1/3 the size of the data, one daemon killed with -9 midway: every byte
               read is exact, the directory stays within --cache-size, a remount after the kill
               reads everything exactly
  storedown    nginx stopped under 4 readers of a dataset 3x the cache: one retry budget is
               spent (store_failures 1), every other read fails at once with EIO and sends no
               request; nginx back on its port: exact bytes once the probe got its answer. The
               same for an imagefolder view being built: EIO, then the whole view
  warm         a default mount of a dataset that fits the cache fetches all of it without a
               read (warm_state 2, each chunk once), then every read hits the cache with exact
               bytes; --warm off and a local source fetch nothing; a dataset 3x the cache: auto
               does not warm it, --warm all stops at the limit (warm_state 3, no eviction) and
               says so; a reader is served exact bytes while every warm fill is held at a
               proxy (both connections), the held warm fills are withdrawn for the reader's
               readahead (prefetch_withdrawn 2), and the shard it touched is warmed next
  prefetch     'shardfs prefetch' of a dataset 3x the cache: says up front what does not fit,
               fetches what fits without evicting, ends with a summary and exit 0 (twice)
  stop         SIGTERM (imagefolder view being built) and 'shardfs umount' (raw reads) while 4
               readers sleep in the mount waiting for a dead store with a 120 s budget: the
               readers get an error, the daemon exits long before the budget (the time is
               printed, not asserted: the goal, 2 s, is the benchmark's), the mount is
               gone; 'shardfs umount' of an idle mount whose prefetch fills wait: the same
  readonce     4 shards of 12 MiB, every member read once in order, shard by shard, through a
               mount with --cache-size 6M (chunks of 1 MiB; the next shard fetched ahead): exact bytes, bytes fetched <= 1.2x bytes read (the reader's
               shard never evicts itself), the cache within its size; with the default
               --http-engine every attempt of the pass is the lean engine's
               (store_lean_attempts = store_attempts), on at most 4 new connections
  randunits    random reads of small members while the cache is full (--cache-size 2M, chunks
               of 1 MiB, units of 64 KiB): each fetches only the units it reads (exact
               bytes_fetched and requests), exact bytes; read again: nothing fetched; members
               of 300000 bytes (several requests each) fetch only their units too; a reader
               going round 4 shards one member at a time gets no shard fetched ahead
  exacthit     a cache hit reads its own pages of the sparse data file, not the holes past
               them: members of 300000 bytes cached unit by unit (64 KiB units, the units past
               each a hole), the data file's pages dropped (POSIX_FADV_DONTNEED of that file
               alone), each member read again through the mount (a hit: nothing fetched, exact
               bytes): mincore of the data file shows every page of the member resident and no
               other page (none in the hole past it, none before it)
  unitcrc      cached units carry their CRC32C: the data file cut under the running mount,
               a byte flipped and a hole punched between mounts, a byte flipped under a second
               mount of the cache dir: exact bytes (the units fetched again), cache_units_corrupt
               exact, read_errors 0
  fulldisk     the cache dir on a 16 MiB tmpfs filled to the last byte by another file, nothing
               cached to evict: a shard indexed before reads exactly, served from the store
               without caching (cache_bypass_bytes exact, read_errors 0, one log line)
  livedamage   units the running mount filled itself, damaged under it: a byte flipped in
               each of 3 shards' data files, then a 1000-byte hole punched at 300000
               (fallocate(1): smaller than a block, SEEK_HOLE does not see it), the page cache
               dropped each time: every shard and member exact, cache_units_corrupt exact, the
               damaged units fetched again (bytes_fetched exact), read_errors 0; undamaged, a
               read again fetches nothing
  weaketag     nginx's "mtime-size" ETag kept through a same-size rewrite with the mtime put
               back (64 KiB read first, --chunk-size 64K --readahead 64K): cat of the shard
               gives one version only (ESTALE once the change is seen), then the new version
               exactly, its members too; cache_weak_changed 1
  metablobs    the files kept in the cache: imagefolder class maps with a changed class (a bad
               checksum) and of another version, shard indexes and chunk maps of another
               version are detected, logged and rebuilt (class maps byte for byte), the view
               exact (the saved view removed, which a remount maps instead of the class maps;
               it is saved again byte for byte); the kept listing of another version or
               damaged: an offline mount says so and fails, an online one writes it again byte
               for byte, and the offline mount after it shows the view exactly; a shard
               removed from the store while nothing was mounted: the next mount removes its
               index and class map (exactly one of each left)

Every raw shard is compared with its source file, every member with GNU tar's extraction.
Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse, or no nginx).
Environment: SHARDFS_TEST_SEED, SHARDFS_TEST_KEEP=1, SHARDFS_TEST_DEADLINE (seconds).
Internal: test_cache.py --reader MANIFEST.json (a reader subprocess).
"""

import sys
sys.dont_write_bytecode = True

import contextlib  # noqa: E402
import errno  # noqa: E402
import glob  # noqa: E402
import shutil  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))

MiB = 1 << 20


# ---------------------------------------------------------------------------------------------
# reader subprocess: compares what it reads through the mount with reference files
# ---------------------------------------------------------------------------------------------

def reader_main(manifest_path):
    """Manifest: {"items": [[mount_path, ref_path], ...], "mode": "full"|"random",
    "seed": N, "passes": N (full), "ops": N and "seconds": S (random)}. Prints failures, one a
    line, and a final "OK n" line; exit 1 on any failure."""
    with open(manifest_path) as f:
        man = json.load(f)
    rng = random.Random(man['seed'])
    items = man['items']
    fails = []
    refs = {}
    nbytes = 0
    wrong = 0

    def ref(p):
        b = refs.get(p)
        if b is None:
            with open(p, 'rb') as f:
                b = refs[p] = f.read()
        return b

    def read_whole(p):
        fd = os.open(p, os.O_RDONLY)
        try:
            if man.get('uncached'):  # past the kernel's page cache: the daemon answers
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            out = []
            while True:
                b = os.read(fd, rng.choice((4096, 65536, 131072, MiB)))
                if not b:
                    break
                out.append(b)
            return b''.join(out)
        finally:
            os.close(fd)

    n = 0
    if man['mode'] == 'errors':
        # every item once, in a shuffled order: exact bytes or EIO, never anything else
        eio = 0
        order = list(items)
        rng.shuffle(order)
        for mp, rp in order:
            try:
                got = read_whole(mp)
            except OSError as e:
                if e.errno == errno.EIO:
                    eio += 1
                else:
                    fails.append('%s: %s (not EIO)' % (mp, e))
                continue
            n += 1
            if got != ref(rp):
                fails.append('%s: %d bytes differ from %s' % (mp, len(got), rp))
        print('EIO %d' % eio, flush=True)
    elif man['mode'] == 'full':
        for _ in range(man['passes']):
            order = list(items)
            rng.shuffle(order)
            for mp, rp in order:
                try:
                    got = read_whole(mp)
                except OSError as e:
                    fails.append('%s: %s' % (mp, e))
                    continue
                n += 1
                nbytes += len(got)
                if got != ref(rp):
                    wrong += 1
                    fails.append('%s: %d bytes differ from %s' % (mp, len(got), rp))
    else:
        end = time.monotonic() + man['seconds']
        for _ in range(man['ops']):
            if time.monotonic() > end:
                break
            mp, rp = rng.choice(items)
            want = ref(rp)
            try:
                if rng.random() < 0.4 or not want:
                    got = read_whole(mp)
                    ok = got == want
                    what = 'whole'
                else:
                    off = rng.randrange(len(want))
                    ln = rng.choice((1, 511, 4096, 65536, 300000, rng.randrange(1, 2 * MiB)))
                    fd = os.open(mp, os.O_RDONLY)
                    try:
                        got = os.pread(fd, ln, off)
                    finally:
                        os.close(fd)
                    ok = got == want[off:off + ln]
                    what = 'pread(%d, %d)' % (off, ln)
            except OSError as e:
                fails.append('%s: %s' % (mp, e))
                continue
            n += 1
            nbytes += len(got)
            if not ok:
                wrong += 1
                fails.append('%s: %s: %d bytes differ from %s' % (mp, what, len(got), rp))
    for f in fails[:50]:
        print('FAIL ' + f, flush=True)
    print('OK %d reads, %d failures, %d bytes, %d wrong' % (n, len(fails), nbytes, wrong),
          flush=True)
    return 1 if fails else 0


if len(sys.argv) == 3 and sys.argv[1] == '--reader':
    sys.exit(reader_main(sys.argv[2]))

from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import shardgen as sg  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log  # noqa: E402


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------

def make_shard(env, path, prefix, sizes):
    """A WebDataset-like shard written by GNU tar: members prefix_i.bin of the given sizes (and
    a small .cls each)."""
    stage = env.path('stage', os.path.basename(path) + '.%d' % env.rng.randrange(1 << 30))
    spec = []
    for i, n in enumerate(sizes):
        key = '%s_%04d' % (prefix, i)
        spec.append(('f', key + '.bin', sg.rbytes(env.rng, n), 0o644, sg.T0 + i))
        spec.append(('f', key + '.cls', b'%d\n' % env.rng.randrange(1000), 0o644, sg.T0 + i))
    sg.make_tree(stage, spec)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sg.gnu_tar_create(path, stage, [e[1] for e in spec], 'gnu')
    shutil.rmtree(stage)


def build_source(env, shards):
    """shards: {relpath: [member sizes]}. Writes src/, extracts each with GNU tar into ref/.
    Returns (src, refs) where refs[rel] = (snapshot, explicit dirs, extraction dir)."""
    src = env.path('src')
    for i, (rel, sizes) in enumerate(sorted(shards.items())):
        make_shard(env, os.path.join(src, rel), 's%d' % i, sizes)
    chmod_tree(env.tmp)
    refs = {}
    for rel in shards:
        dest = env.path('ref', rel + '.d')
        ml.gnu_extract(env, os.path.join(src, rel), dest)
        refs[rel] = (ml.snapshot(dest), ml.explicit_dirs(os.path.join(src, rel)), dest)
    return src, refs


def shard_dir_rel(rel):
    d, b = os.path.split(rel)
    n = sg.shard_dir_name(b)
    return os.path.join(d, n) if d else n


def members_of(refs, rel):
    """Member paths (relative) of a shard's extraction."""
    out = []
    dest = refs[rel][2]
    for d, _, files in os.walk(dest):
        for fn in files:
            out.append(os.path.relpath(os.path.join(d, fn), dest))
    return sorted(out)


def check_all(ck, label, mnt, src, refs):
    """Raw bytes of every shard equal the source; its members equal GNU tar's extraction."""
    for rel in sorted(refs):
        try:
            got = ml.read_all(os.path.join(mnt, rel))
        except OSError as e:
            ck.fail('%s: reading %s: %s' % (label, rel, e))
            continue
        with open(os.path.join(src, rel), 'rb') as f:
            want = f.read()
        ck.ok(got == want, '%s: %s: %d bytes differ from the source (%d bytes)' % (
            label, rel, len(got), len(want)))
        snap, explicit, _ = refs[rel]
        got_tree = ml.snapshot(os.path.join(mnt, shard_dir_rel(rel)), ck=ck)
        ml.compare_trees(ck, '%s: %s' % (label, rel), got_tree, snap, explicit=explicit)


def manifest_items(mnt, src, refs, raw=True, members=True):
    items = []
    for rel in sorted(refs):
        if raw:
            items.append([os.path.join(mnt, rel), os.path.join(src, rel)])
        if members:
            for m in members_of(refs, rel):
                items.append([os.path.join(mnt, shard_dir_rel(rel), m),
                              os.path.join(refs[rel][2], m)])
    return items


def start_readers(env, name, manifests):
    procs = []
    for i, man in enumerate(manifests):
        p = env.path('%s-%d.json' % (name, i))
        with open(p, 'w') as f:
            json.dump(man, f)
        out = open(env.path('%s-%d.out' % (name, i)), 'wb')
        procs.append((subprocess.Popen([sys.executable, os.path.abspath(__file__), '--reader', p],
                                       stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, env=env.env), out, i))
    return procs


def reader_result(env, name, i):
    """(reads, failures, bytes, wrong) from a reader's last line, or None."""
    with open(env.path('%s-%d.out' % (name, i)), errors='replace') as f:
        lines = f.read().strip().splitlines()
    m = re.match(r'OK (\d+) reads, (\d+) failures, (\d+) bytes, (\d+) wrong$',
                 lines[-1] if lines else '')
    return tuple(int(x) for x in m.groups()) if m else None


def wait_readers(ck, env, name, procs, timeout, may_fail=False):
    """Wait for the readers; each must pass, or with may_fail (its mount's daemon was killed)
    finish with errors but no wrong byte."""
    end = time.monotonic() + timeout
    for p, out, i in procs:
        try:
            rc = p.wait(max(1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            ck.fail('%s reader %d: still running after %ds (deadlock?)' % (name, i, timeout))
            p.kill()
            rc = p.wait()
        out.close()
        with open(env.path('%s-%d.out' % (name, i)), errors='replace') as f:
            text = f.read()
        log('%s reader %d: rc=%s %s' % (name, i, rc, text.strip().splitlines()[-1:]))
        if may_fail:
            res = reader_result(env, name, i)
            ck.ok(res is not None and res[3] == 0, '%s reader %d read wrong bytes:\n%s' % (
                name, i, text[-3000:]))
        else:
            ck.ok(rc == 0, '%s reader %d failed (rc=%s):\n%s' % (name, i, rc, text[-3000:]))


def data_bytes(cache_dir):
    """Bytes allocated by the files under the cache dir's data/ directories; raises
    FileNotFoundError when there is none (the layout moved: a bound must not pass on 0)."""
    dirs = glob.glob(os.path.join(cache_dir, 'v1', '*', 'data'))
    if not dirs:
        raise FileNotFoundError('no %s/v1/*/data directory' % cache_dir)
    return sum(ml.du(d) for d in dirs)


class Sampler:
    def __init__(self, cache_dir, period=0.05):
        self.cache_dir = cache_dir
        self.period = period
        self.max = 0
        self.samples = 0
        self.nonempty = 0  # samples that found data in the cache (a bound on none means nothing)
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop_ev.is_set():
            try:
                b = data_bytes(self.cache_dir)
            except FileNotFoundError:  # not made yet: no sample (the tests count samples)
                self.stop_ev.wait(self.period)
                continue
            self.samples += 1
            self.nonempty += b > 0
            self.max = max(self.max, b)
            self.stop_ev.wait(self.period)

    def stop(self):
        self.stop_ev.set()
        self.t.join()


def log_text(path):
    try:
        with open(path, errors='replace') as f:
            return f.read()
    except OSError:
        return ''


def tsan_reports(logfile, pid):
    """TSan reports of the daemon: in its log file (its stderr), or in TSAN_OPTIONS' log_path."""
    out = []
    if 'ThreadSanitizer' in log_text(logfile):
        out.append(logfile)
    m = re.search(r'(?:^|:)log_path=([^:]+)', os.environ.get('TSAN_OPTIONS', ''))
    if m and pid:
        out += [p for p in glob.glob(m.group(1) + '.%d*' % pid)
                if 'ThreadSanitizer' in log_text(p)]
    return out


# ---------------------------------------------------------------------------------------------
# groups
# ---------------------------------------------------------------------------------------------

def group_offline(env, ck, ng):
    shards = {}
    for i in range(3):
        shards['train/shard-%06d.tar' % i] = [env.rng.randrange(100, 200000) for _ in range(12)]
    shards['val/shard-000000.tar'] = [env.rng.randrange(300000, 700000) for _ in range(5)]
    src, refs = build_source(env, shards)
    with open(os.path.join(src, 'README.txt'), 'wb') as f:
        f.write(b'shards for the cache tests\n')
    os.chmod(os.path.join(src, 'README.txt'), 0o644)
    ng.start()
    cache = env.path('cache')
    logf = env.path('daemon.log')
    opts = ['--chunk-size', '1M', '--retry-budget', '2', '--log-file', logf]
    url = ng.url('json/')
    with ml.Mount(env, url, cache_dir=cache, extra=opts) as m:
        check_all(ck, 'online', m.mnt, src, refs)
        with open(os.path.join(m.mnt, 'README.txt'), 'rb') as f:
            ck.eq('online: README.txt', f.read(), b'shards for the cache tests\n')
        st1 = m.stats()
        log('online: bytes_fetched %d, fills %d, hits %d, misses %d' % (
            st1['bytes_fetched'], st1['fills'], st1['cache_hits'], st1['cache_misses']))
        ng.stop()
        log('nginx stopped')
        check_all(ck, 'nginx down', m.mnt, src, refs)
        with open(os.path.join(m.mnt, 'README.txt'), 'rb') as f:
            ck.eq('nginx down: README.txt', f.read(), b'shards for the cache tests\n')
        st2 = m.stats()
        ck.eq('nginx down: bytes_fetched', st2['bytes_fetched'], st1['bytes_fetched'])
        ck.eq('nginx down: read_errors', st2['read_errors'], 0)
        ck.eq('nginx down: fill_errors', st2['fill_errors'], st1['fill_errors'])
    t = time.monotonic()
    with ml.Mount(env, url, cache_dir=cache, extra=opts) as m:
        log('offline remount took %.1fs' % (time.monotonic() - t))
        st = m.stats()
        ck.eq('offline remount: source_offline', st.get('source_offline'), 1)
        check_all(ck, 'offline remount', m.mnt, src, refs)
        st = m.stats()
        ck.eq('offline remount: bytes_fetched', st['bytes_fetched'], 0)
        ck.eq('offline remount: read_errors', st['read_errors'], 0)
        ck.eq('offline remount: index_built', st['index_built'], 0)
    text = log_text(logf)
    ck.ok(re.search(r'(?i)unreachable', text), 'offline remount: the log does not say the source '
          'is unreachable:\n' + text[-2000:])


def group_capacity(env, ck, ng):
    shards = {}
    for i in range(6):  # 6 x ~4 MiB = ~24 MiB
        sizes, tot = [], 0
        while tot < 4 * MiB - 400000:
            n = env.rng.randrange(1000, 400000)
            sizes.append(n)
            tot += n + 1536
        shards['shard-%06d.tar' % i] = sizes
    src, refs = build_source(env, shards)
    total = sum(os.path.getsize(os.path.join(src, r)) for r in refs)
    ng.start()
    cache = env.path('cache')
    size, chunk, conns = 8 * MiB, MiB, 4
    limit = size + conns * chunk + 256 * 1024
    opts = ['--cache-size', '8M', '--chunk-size', '1M', '--connections', str(conns),
            '--log-file', env.path('daemon.log')]
    log('dataset %d bytes, cache-size %d, limit %d' % (total, size, limit))
    with ml.Mount(env, ng.url('json/'), cache_dir=cache, extra=opts) as m:
        items = manifest_items(m.mnt, src, refs)
        samp = Sampler(cache)
        t = time.monotonic()
        # rounds of 4 readers until the sampler has looked at the cache 10 times under load
        # (a fast machine reads the data set in fewer than 10 sampling periods)
        for rnd in range(20):
            procs = start_readers(env, 'capacity', [dict(items=items, mode='full', passes=2,
                                                    seed=env.seed + 4 * rnd + i)
                                               for i in range(4)])
            wait_readers(ck, env, 'capacity', procs, 150)
            if samp.nonempty >= 10:
                break
        samp.stop()
        st = m.stats()
        log('capacity: %.1fs, %d samples, max data bytes %d (limit %d); evictions %d, '
            'evicted %d, fetched %d, used %d' % (
                time.monotonic() - t, samp.samples, samp.max, limit, st['evictions'],
                st['evicted_bytes'], st['bytes_fetched'], st['cache_bytes_used']))
        ck.ok(samp.nonempty >= 10, 'capacity: only %d samples found data (%d taken)' % (
            samp.nonempty, samp.samples))
        ck.ok(samp.max <= limit, 'capacity: cache data files reached %d bytes > %d (cache-size '
              '%d + %d chunks of %d)' % (samp.max, limit, size, conns, chunk))
        ck.ok(st['evictions'] > 0, 'capacity: no evictions')
        ck.ok(st['cache_bytes_used'] <= size, 'capacity: cache_bytes_used %d > %d' % (
            st['cache_bytes_used'], size))
        ck.eq('capacity: read_errors', st['read_errors'], 0)
        check_all(ck, 'capacity after', m.mnt, src, refs)
        ck.ok(data_bytes(cache) <= limit, 'capacity: data files at the end %d' % data_bytes(cache))


def covered(rng, ranges):
    """Do the GETs' ranges together cover rng (a unit that landed before a crash may be
    fetched again apart from the rest of its chunk)?"""
    a, b = rng
    for r in sorted((r for r in ranges if r), key=lambda r: r[0]):
        if r[0] <= a and (r[1] is None or r[1] >= a):
            if r[1] is None or r[1] >= b:
                return True
            a = r[1] + 1
    return False


def map_files(cache):
    return glob.glob(os.path.join(cache, 'v1', '*', 'data', '*.map'))


def group_crash(env, ck, ng):
    rel = 'big-000000.tar'
    src, refs = build_source(env, {rel: [env.rng.randrange(200000, 1200000) for _ in range(40)]})
    size = os.path.getsize(os.path.join(src, rel))
    ng.start()
    px = web.SlowProxy(ng.port)
    try:
        cache = env.path('cache')
        # --durable-delay 1: units are recorded in a map once a second old (the default, 30 s,
        # would only make the wait for a map 30 s longer; the kill then also finds units filled
        # within the last second in no map, fetched again)
        opts = ['--chunk-size', '1M', '--connections', '2', '--readahead', '8M',
                '--prefetch-shards', '0', '--warm', 'off', '--durable-delay', '1',
                '--log-file', env.path('daemon.log')]
        source = px.url('files/' + rel)
        m = ml.Mount(env, source, cache_dir=cache, extra=opts)
        m.mount()
        pid = m.stats()['pid']
        px.reset()
        # Everything before 40% of the shard passes; every range GET from there on relays its
        # first 64 KiB and then waits for release(): the kill comes while those fills are held
        # in flight, whatever the machine's speed.
        px.hold_from = (int(0.4 * size) // MiB) * MiB
        p = subprocess.Popen(['dd', 'if=' + os.path.join(m.mnt, rel), 'of=/dev/null', 'bs=1M'],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        # the state to kill in: both connections hold a fill with bytes relayed, and a map
        # records some of the chunks before the hold (the flusher writes it once they are a
        # second old)
        ok = ml.poll(lambda: len([r for r in px.held() if r['sent'] > 0]) >= 2 and
                      map_files(cache), 60)
        with px.lock:
            inflight = [(r['range'], r['sent']) for r in px.gets
                        if r['held'] and not r['done'] and r['sent'] > 0 and r['range']]
            first = [dict(r) for r in px.gets]
        ck.ok(ok, 'crash: the fills were not held in flight with a map written (held %r, '
              'maps %r)' % (px.held(), map_files(cache)))
        log('killing daemon %d: %d GETs done (%d bytes), held in flight: %r' % (
            pid, sum(1 for r in first if r['done']), sum(r['sent'] for r in first if r['done']),
            inflight))
        ml.kill_daemon(env, pid, signal.SIGKILL)
        ok = ml.poll(lambda: not ml.pid_alive(pid), 30)
        ck.ok(ok, 'crash: the daemon %d is alive after SIGKILL' % pid)
        px.release()  # the dead daemon's connections: nothing reads them any more
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            ck.fail('crash: the reader did not return after the daemon died')
            p.kill()
            p.wait()
        m.umount(quiet=True)
        ck.ok(not ml.is_mounted(m.mnt), 'crash: still mounted after umount of the dead mount')
        ck.ok(inflight, 'crash: no fill was in flight when the daemon was killed')
        data = glob.glob(os.path.join(cache, 'v1', '*', 'data', '*'))
        log('cache files after the crash: %r' % [(os.path.basename(d), os.path.getsize(d))
                                                  for d in data])
        # A kill rarely leaves a torn chunk on disk by itself: make one. Of a range whose body
        # was not completely sent only whole units can have been recorded (units are valid as
        # they land, each with its CRC32C); write garbage over the part that was sent, as if
        # the crash came in the middle of its pwrite: a recorded unit fails its CRC and is
        # fetched again.
        datafiles = [d for d in data if not d.endswith(('.map', '.st'))]
        ck.eq('crash: data files', len(datafiles), 1)
        if datafiles:
            with open(datafiles[0], 'r+b') as f:
                for (a, b), sent in inflight:
                    os.pwrite(f.fileno(), b'\xa5' * min(sent, b - a + 1), a)
        px.rate = None
        px.reset()
        with ml.Mount(env, source, cache_dir=cache, extra=opts) as m2:
            check_all(ck, 'after crash', m2.mnt, src, refs)
            st = m2.stats()
        with px.lock:
            second = [r['range'] for r in px.gets]
        log('after crash: bytes_fetched %d of %d, %d GETs' % (st['bytes_fetched'], size,
                                                               len(second)))
        ck.ok(0 < st['bytes_fetched'] < size, 'after crash: bytes_fetched %d, expected some '
              'but less than the shard (%d): nothing reused?' % (st['bytes_fetched'], size))
        for r, _ in inflight:
            if r:
                ck.ok(covered(r, second), 'after crash: the chunk in flight at the kill, bytes '
                      '%d-%s, was not fetched again (GETs: %r)' % (r[0], r[1], second[:40]))
    finally:
        px.close()


def group_concurrency(env, ck, ng):
    shards = {}
    for i in range(4):  # 4 x ~3 MiB
        sizes, tot = [], 0
        while tot < 3 * MiB:
            n = env.rng.choice((env.rng.randrange(0, 4096), env.rng.randrange(4096, 300000)))
            sizes.append(n)
            tot += n + 1536
        shards['shard-%06d.tar' % i] = sizes
    src, refs = build_source(env, shards)
    ng.start()
    cache = env.path('cache')
    logf = env.path('daemon.log')
    opts = ['--cache-size', '3M', '--chunk-size', '1M', '--connections', '4',
            '--log-file', logf]
    with open(env.shardfs, 'rb') as f:
        tsan = b'libtsan' in f.read()  # a ThreadSanitizer build: slower, give it more time
    seconds = 25 if tsan else 15
    with ml.Mount(env, ng.url('json/'), cache_dir=cache, extra=opts) as m:
        pid = m.stats()['pid']
        items = manifest_items(m.mnt, src, refs)
        t = time.monotonic()
        procs = start_readers(env, 'concurrency', [dict(items=items, mode='random', ops=400,
                                                 seconds=seconds, seed=env.seed * 100 + i)
                                            for i in range(8)])
        wait_readers(ck, env, 'concurrency', procs, seconds + 60)
        log('concurrency: readers took %.1fs' % (time.monotonic() - t))
        ck.ok(ml.pid_alive(pid), 'concurrency: the daemon %d died' % pid)
        st = m.stats()
        log('concurrency: evictions %d, fetched %d, fills %d, hits %d, misses %d' % (
            st['evictions'], st['bytes_fetched'], st['fills'], st['cache_hits'],
            st['cache_misses']))
        ck.ok(st['evictions'] > 0, 'concurrency: no evictions')
        ck.eq('concurrency: read_errors', st['read_errors'], 0)
        check_all(ck, 'concurrency after', m.mnt, src, refs)
    rep = tsan_reports(logf, pid)
    ck.ok(not rep, 'concurrency: ThreadSanitizer reports in %r:\n%s' % (
        rep, ''.join(log_text(r)[:6000] for r in rep)))


def group_share(env, ck, ng):
    shards = {}
    for i in range(8):  # 8 x ~3 MiB
        sizes, tot = [], 0
        while tot < 3 * MiB:
            n = env.rng.randrange(1000, 300000)
            sizes.append(n)
            tot += n + 1536
        shards['shard-%06d.tar' % i] = sizes
    src, refs = build_source(env, shards)
    total = sum(os.path.getsize(os.path.join(src, r)) for r in refs)
    ng.start()
    with open(env.shardfs, 'rb') as f:
        tsan = b'libtsan' in f.read()

    # 1. Two mounts of one source on the default cache dir (no --cache-dir), both warming the
    # dataset (it fits the default cache) at once: each chunk is fetched once, by one of them;
    # then each serves everything without fetching it again.
    a = ml.Mount(env, ng.url('json/'), mountpoint=env.path('mnt-a'),
                 extra=['--log-file', env.path('a.log')])
    b = ml.Mount(env, ng.url('json/'), mountpoint=env.path('mnt-b'),
                 extra=['--log-file', env.path('b.log')])
    with a, b:
        for m in (a, b):
            st = wait_stats(m, lambda s: s.get('warm_state') != 1, 120)
            ck.eq('share: warm_state of %s' % m.mnt, st.get('warm_state'), 2)
        sa0, sb0 = a.stats(), b.stats()
        log('share default dir: warms fetched %d + %d (dataset %d)' % (
            sa0['bytes_fetched'], sb0['bytes_fetched'], total))
        ck.eq('share: bytes the two warms fetched', sa0['bytes_fetched'] + sb0['bytes_fetched'],
              total)
        check_all(ck, 'share: first mount', a.mnt, src, refs)
        sa = a.stats()
        check_all(ck, 'share: second mount', b.mnt, src, refs)
        sb = b.stats()
        log('share default dir: first fetched %d (dataset %d), second fetched %d, peer chunks '
            '%d + %d' % (sa['bytes_fetched'], total, sb['bytes_fetched'],
                         sa['cache_peer_units'], sb['cache_peer_units']))
        ck.eq('share: bytes fetched by reads', (sa['bytes_fetched'], sb['bytes_fetched']),
              (sa0['bytes_fetched'], sb0['bytes_fetched']))
        ck.ok(sa['cache_peer_units'] + sb['cache_peer_units'] > 0,
              'share: no mount read a chunk of the other')
        ck.eq('share: read errors', (sa['read_errors'], sb['read_errors']), (0, 0))
        ck.eq('share: cache_bytes_used (both mounts, one directory)',
              (sa['cache_bytes_used'], b.stats()['cache_bytes_used']), (total, total))

    # 2. Three daemons x 4 readers on one cache dir a third the size of the data; one daemon is
    # killed with -9 while its readers read.
    cache = env.path('cache')
    size, chunk, conns = 8 * MiB, MiB, 3
    limit = size + 3 * (conns + 1) * chunk + 256 * 1024
    mounts = [ml.Mount(env, ng.url('json/'), cache_dir=cache, mountpoint=env.path('mnt-d%d' % i),
                       extra=['--cache-size', '8M', '--chunk-size', '1M', '--connections',
                              str(conns), '--log-file', env.path('d%d.log' % i)])
              for i in range(3)]
    for m in mounts:
        m.mount()
    try:
        pids = [m.stats()['pid'] for m in mounts]
        samp = Sampler(cache)
        procs = []
        for i, m in enumerate(mounts):
            procs.append(start_readers(env, 'share%d' % i, [
                dict(items=manifest_items(m.mnt, src, refs), mode='full',
                     passes=1 if tsan else 2, seed=env.seed * 10 + 4 * i + j)
                for j in range(4)]))
        # kill the third daemon once it has filled a quarter of the data itself
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if mounts[2].stats()['bytes_fetched'] >= total // 4:
                break
            time.sleep(0.05)
        running = sum(1 for p, _, _ in procs[2] if p.poll() is None)
        st2 = mounts[2].stats()
        ml.kill_daemon(env, pids[2], signal.SIGKILL)
        log('share: killed daemon %d after it fetched %d bytes; %d of its readers running' % (
            pids[2], st2['bytes_fetched'], running))
        for i in range(2):
            wait_readers(ck, env, 'share%d' % i, procs[i], 240)
        wait_readers(ck, env, 'share2', procs[2], 60, may_fail=True)
        samp.stop()
        stats = [m.stats() for m in mounts[:2]]
        for i, m in enumerate(mounts[:2]):
            check_all(ck, 'share: daemon %d after' % i, m.mnt, src, refs)
        res = [reader_result(env, 'share%d' % i, j) for i in range(3) for j in range(4)]
        res = [r for r in res if r]
        reads, nbytes, wrong = (sum(r[0] for r in res), sum(r[2] for r in res),
                                sum(r[3] for r in res))
        fills = [s['fills'] for s in stats] + [st2['fills']]
        peer = [s['cache_peer_units'] for s in stats]
        ev = [s['evictions'] for s in stats]
        log('share summary: %d readers, %d reads, %d bytes checked, %d wrong; fills per daemon '
            '%r (daemon 2 at its kill), chunks reused from another process %r, peer waits %r, '
            'evictions %r, max data bytes %d (limit %d), %d samples (%d with data)' % (
                len(res), reads, nbytes, wrong, fills, peer,
                [s['cache_peer_waits'] for s in stats], ev, samp.max, limit, samp.samples,
                samp.nonempty))
        ck.eq('share: wrong reads', wrong, 0)
        ck.eq('share: read_errors of the live daemons', [s['read_errors'] for s in stats],
              [0, 0])
        # reuse shows as a chunk read that another process filled (peer chunks) or as a fill
        # that found another process filling the chunk and used its bytes (peer waits); which of
        # the two happens depends on scheduling, so the check counts both (the default-dir part
        # above checks reuse exactly: the second mount fetched 0 bytes)
        waits = [s['cache_peer_waits'] for s in stats]
        ck.ok(sum(peer) + sum(waits) > 0, 'share: no chunk was reused from another process '
              '(peer chunks %r, peer waits %r)' % (peer, waits))
        ck.ok(sum(ev) > 0, 'share: no evictions')
        # the peak bound below means something only over samples taken while the daemons
        # filled: at least 5 that found data (the run takes seconds; the sampler looks every
        # 50 ms), not a single one
        ck.ok(samp.nonempty >= 5, 'share: only %d samples found data in the cache (%d taken)' %
              (samp.nonempty, samp.samples))
        ck.ok(samp.max <= limit, 'share: cache data files reached %d bytes > %d' % (
            samp.max, limit))
        # the documented bound: --cache-size plus one chunk per fill thread of each process
        # (each process makes room for its own fills in flight, not for the others')
        ck.ok(stats[0]['cache_bytes_used'] <= limit, 'share: cache_bytes_used %d > %d' % (
            stats[0]['cache_bytes_used'], limit))
    finally:
        for m in mounts:
            m.umount(quiet=True)
    # what the killed daemon left is never trusted wrongly
    with ml.Mount(env, ng.url('json/'), cache_dir=cache, mountpoint=env.path('mnt-d3'),
                  extra=['--cache-size', '8M', '--chunk-size', '1M',
                         '--log-file', env.path('d3.log')]) as m:
        check_all(ck, 'share: remount after kill -9', m.mnt, src, refs)
        st = m.stats()
        ck.eq('share: remount read_errors', st['read_errors'], 0)
        ck.ok(st['cache_bytes_used'] <= limit, 'share: remount cache_bytes_used %d > %d' % (
            st['cache_bytes_used'], limit))
    for i in range(4):
        rep = tsan_reports(env.path('d%d.log' % i), 0)
        ck.ok(not rep, 'share: ThreadSanitizer reports in %r:\n%s' % (
            rep, ''.join(log_text(r)[:6000] for r in rep)))


def big_shards(env, n, size=4 * MiB):
    shards = {}
    for i in range(n):
        sizes, tot = [], 0
        while tot < size - 400000:
            k = env.rng.randrange(1000, 400000)
            sizes.append(k)
            tot += k + 1536
        shards['shard-%06d.tar' % i] = sizes
    return shards


def reader_eio(env, name, i):
    """(reads, EIO count) from an 'errors' reader's output."""
    with open(env.path('%s-%d.out' % (name, i)), errors='replace') as f:
        text = f.read()
    m = re.search(r'^EIO (\d+)$', text, re.M)
    r = re.search(r'^OK (\d+) reads', text, re.M)
    return (int(r.group(1)) if r else -1), (int(m.group(1)) if m else -1)


def uncached_read(path):
    """The whole file, its pages first dropped from the kernel's page cache: the daemon
    answers (from its cache tier or the store)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        out = []
        while True:
            b = os.read(fd, MiB)
            if not b:
                return b''.join(out)
            out.append(b)
    finally:
        os.close(fd)


def group_storedown(env, ck, ng):
    """The store goes away under 4 readers of a dataset 3x the cache: the first request that
    spends its retry budget marks the store down and every other read fails at once with EIO
    (one budget in all, not one per queued chunk or per kernel retry of a read); nginx comes
    back on the same port: reads are exact again once the probe got its answer."""
    shards = big_shards(env, 6)  # ~24 MiB
    src, refs = build_source(env, shards)
    ng.start()
    budget = 3
    logf = env.path('daemon.log')
    opts = ['--cache-size', '8M', '--chunk-size', '1M', '--connections', '2',
            '--retry-budget', str(budget), '--log-file', logf]
    with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'), extra=opts) as m:
        pid = m.stats()['pid']
        items = manifest_items(m.mnt, src, refs)
        procs = start_readers(env, 'online', [dict(items=items, mode='full', passes=1,
                                                   seed=env.seed + i) for i in range(4)])
        wait_readers(ck, env, 'online', procs, 120)
        st0 = m.stats()
        ck.eq('online: store_failures', st0['store_failures'], 0)
        ck.eq('online: store_down', st0['store_down'], 0)
        ck.ok(st0['evictions'] > 0, 'online: no evictions (the cache holds everything?)')
        ng.stop()
        log('nginx stopped; %d items per reader' % len(items))
        # 4 readers read every item once: with the cache a third of the data, most items need
        # the store. Each reader alone would spend a budget (3 s) per item, several with the
        # kernel's retries of a failed readahead: minutes. One budget in all is the goal.
        t = time.monotonic()
        procs = start_readers(env, 'down', [dict(items=items, mode='errors', uncached=True,
                                                 seed=env.seed * 10 + i) for i in range(4)])
        wait_readers(ck, env, 'down', procs, 90)
        dt = time.monotonic() - t
        st1 = m.stats()
        eios = [reader_eio(env, 'down', i) for i in range(4)]
        log('store down: the 4 readers took %.1fs (budget %ds): (reads, EIO) %r; '
            'store_failures %d, store_fast_fails %d, store_probes %d, attempts %d -> %d' % (
                dt, budget, eios, st1['store_failures'], st1['store_fast_fails'],
                st1['store_probes'], st0['store_attempts'], st1['store_attempts']))
        ck.ok(all(e > 0 for _, e in eios), 'store down: a reader got no EIO: %r' % eios)
        ck.eq('store down: store_failures (one budget spent, then fail fast)',
              st1['store_failures'], 1)
        ck.eq('store down: store_down', st1['store_down'], 1)
        ck.ok(st1['store_fast_fails'] >= 4, 'store down: store_fast_fails %d' %
              st1['store_fast_fails'])
        # one budget in all: store_failures == 1 above counts it (the time is only logged)
        # while down, reads go nowhere: no attempt reaches the store (probes aside)
        e = [0, 0]
        for rel in sorted(refs):
            for mem in members_of(refs, rel)[:3]:
                try:
                    uncached_read(os.path.join(m.mnt, shard_dir_rel(rel), mem))
                    e[0] += 1
                except OSError as ex:
                    e[1] += 1
                    ck.eq('store down: errno of a member read', errno.errorcode.get(ex.errno),
                          'EIO')
        st2 = m.stats()
        log('store down: %d more reads (%d from the cache, %d EIO), attempts %d -> %d' % (
            sum(e), e[0], e[1], st1['store_attempts'], st2['store_attempts']))
        ck.eq('store down: attempts of reads while down', st2['store_attempts'],
              st1['store_attempts'])
        ck.ok(ml.pid_alive(pid), 'store down: the daemon died')

        log('before nginx start: %r' % {k: v for k, v in m.stats().items() if k.startswith('store_')})
        # nginx back on the same port: reads succeed again once a probe got an answer (while
        # the store is down nothing else asks it); probes back off to one every 5 s
        ng.start()
        t = time.monotonic()
        up = ml.poll(lambda: m.stats()['store_down'] == 0, 60)
        log('nginx back: the store is up again after %.1fs' % (time.monotonic() - t))
        ck.ok(up, 'nginx back: the store is still down after 60 s')
        check_all(ck, 'nginx back', m.mnt, src, refs)
        st3 = m.stats()
        ck.eq('nginx back: store_down', st3['store_down'], 0)
        ck.ok(st3['store_probes'] >= 1, 'nginx back: no probe')
        ck.eq('nginx back: store_failures', st3['store_failures'], 1)
    group_storedown_imagefolder(env, ck, ng, budget)


def imagefolder_source(env, sub, nshards=4, nsamples=8, first=0, want=None):
    """Shards first.. under src/SUB/ whose samples are key.jpg (random bytes) and key.cls
    (0..2). Returns {class: {file name: bytes}} (added to want), the view --class-from cls
    must show."""
    want = {} if want is None else want
    os.makedirs(env.path('src', sub), exist_ok=True)
    for i in range(first, first + nshards):
        stage = env.path('stage-if-%d' % i)
        spec = []
        for k in range(nsamples):
            key = 'if%d_%03d' % (i, k)
            img = sg.rbytes(env.rng, env.rng.randrange(20000, 60000))
            cls = env.rng.randrange(3)
            spec.append(('f', key + '.jpg', img, 0o644, sg.T0 + k))
            spec.append(('f', key + '.cls', b'%d\n' % cls, 0o644, sg.T0 + k))
            want.setdefault(str(cls), {})[key + '.jpg'] = img
        sg.make_tree(stage, spec)
        sg.gnu_tar_create(env.path('src', sub, 'if-%06d.tar' % i), stage, [e[1] for e in spec],
                          'gnu')
        shutil.rmtree(stage)
    chmod_tree(env.path('src'))
    return want


def chmod_tree(root):
    for d, _, files in os.walk(root):  # nginx's worker may run as another user
        os.chmod(d, 0o755)
        for fn in files:
            os.chmod(os.path.join(d, fn), 0o644)


def retire_view(env, ck, m, add):
    """The mount built its imagefolder view before it was ready: add a shard to the source
    (add()) and refresh, so that the view is built again, with the new shard's index, at its
    next use."""
    add()
    r = env.run([env.shardfs, 'refresh', m.mnt])
    ck.eq('refresh before the store goes: exit', r.returncode, 0)
    ck.ok(b'1 new' in r.stdout, 'refresh: %r' % r.stdout)


def group_storedown_imagefolder(env, ck, ng, budget):
    """The imagefolder view is being built for 4 readers when the store goes away: they get
    EIO after one budget, and no view that lacks the shards is kept; when the store is back
    the view is whole."""
    want = imagefolder_source(env, 'if')
    ng.start()
    opts = ['--retry-budget', str(budget), '--layout', 'imagefolder', '--class-from', 'cls',
            '--warm', 'off', '--log-file', env.path('daemon-if.log')]
    with ml.Mount(env, ng.url('json/if/'), cache_dir=env.path('cache-if'), extra=opts) as m:
        retire_view(env, ck, m, lambda: imagefolder_source(env, 'if', 1, first=4, want=want))
        ng.stop()
        t = time.monotonic()
        procs = [spawn_waiter(env, 'ifdown-%d' % i, 'os.listdir(%r)' % m.mnt) for i in range(4)]
        for i, (p, out) in enumerate(procs):
            try:
                p.wait(budget + 60)
            except subprocess.TimeoutExpired:
                ck.fail('imagefolder down: reader %d still waits' % i)
                p.kill()
                p.wait()
            out.close()
            text = log_text(env.path('ifdown-%d.out' % i)).split()
            ck.eq('imagefolder down: reader %d' % i, text, ['START', 'ERR', str(errno.EIO)])
        st = m.stats()
        log('imagefolder down: the 4 listings failed after %.1fs; store_failures %d' % (
            time.monotonic() - t, st['store_failures']))
        ck.eq('imagefolder down: store_failures', st['store_failures'], 1)
        ng.start()
        ck.ok(ml.poll(lambda: m.stats()['store_down'] == 0, 60),
              'imagefolder back: the store is still down after 60 s')
        got = {}
        for c in sorted(os.listdir(m.mnt)):
            got[c] = {}
            for fn in os.listdir(os.path.join(m.mnt, c)):
                got[c][fn] = ml.read_all(os.path.join(m.mnt, c, fn))
        ck.eq('imagefolder back: classes', sorted(got), sorted(want))
        for c in sorted(want):
            ck.eq('imagefolder back: class %s files' % c, sorted(got.get(c, {})),
                  sorted(want[c]))
            for fn, b in sorted(want[c].items()):
                ck.ok(got.get(c, {}).get(fn) == b, 'imagefolder back: %s/%s differs' % (c, fn))


def spawn_waiter(env, name, code):
    """A process that prints START, runs one blocking operation on the mount (python code)
    and prints 'ERR errno' or 'OK'."""
    prog = ('import os, sys\nprint("START", flush=True)\ntry:\n    %s\n'
            '    print("OK", flush=True)\n'
            'except OSError as e:\n    print("ERR %%d" %% e.errno, flush=True)\n' % code)
    out = open(env.path(name + '.out'), 'wb')
    return subprocess.Popen([sys.executable, '-c', prog], stdin=subprocess.DEVNULL,
                            stdout=out, stderr=subprocess.STDOUT), out


def in_fuse_request(pid):
    """The process sleeps in the mount: waiting for a FUSE request's answer, for the inode
    lock that another process's request holds (a second readdir of one directory), or for a
    page that the kernel's readahead request is filling."""
    try:
        with open('/proc/%d/wchan' % pid) as f:
            w = f.read().strip()
    except OSError:
        return False
    return w in ('request_wait_answer', 'folio_wait_bit_common',
                 'wait_on_page_bit_common') or w.startswith('fuse_')


def ctl_open(m):
    """The mount's .shardfs directory, held open: ctl_stats reads the stats through it."""
    return os.open(os.path.join(m.mnt, '.shardfs'), os.O_RDONLY | os.O_DIRECTORY)


def ctl_stats(ctl):
    """The stats of the mount whose .shardfs directory ctl holds (ctl_open). Opened relative
    to it: no lookup in the mount's root, where the kernel makes a lookup of a name not in its
    cache wait for a readdir of the root in flight (its per-directory FUSE lock: libfuse before
    3.17 never passes FUSE_PARALLEL_DIROPS), and the waiters' readdirs wait on the store for
    the whole retry budget. m.stats() there waited as long as the readers whenever the kernel
    had dropped '.shardfs' from its cache (a busy machine; waiting_on_store now drops it each
    time)."""
    with os.fdopen(os.open('stats', os.O_RDONLY, dir_fd=ctl), 'rb') as f:
        return json.loads(f.read().decode('utf-8'))


def waiting_on_store(env, ctl, name, procs, base_attempts):
    """Every waiter is past START and sleeps in a FUSE request, and the daemon is retrying
    the store (no budget spent yet); the stats read through ctl (ctl_stats)."""
    for i, (p, _) in enumerate(procs):
        if p.poll() is not None or not log_text(env.path('%s-%d.out' % (name, i))).startswith(
                'START') or not in_fuse_request(p.pid):
            return False
    # what a busy machine does at any moment: the kernel's unused entries dropped (so a path
    # through the root would need a lookup there); the stats are read through ctl all the same
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('2\n')
    try:
        st = ctl_stats(ctl)
    except OSError:
        return False
    return st['store_failures'] == 0 and st['store_attempts'] >= base_attempts + 2


def waiters_state(env, ctl, name, procs, base_attempts):
    """What waiting_on_store looked at, for a failure's message."""
    out = []
    for i, (p, _) in enumerate(procs):
        try:
            with open('/proc/%d/wchan' % p.pid) as f:
                w = f.read().strip()
        except OSError:
            w = 'gone'
        out.append('waiter %d: %r, wchan %s' % (
            i, log_text(env.path('%s-%d.out' % (name, i))).strip(), w))
    try:
        st = ctl_stats(ctl)
        out.append('store_attempts %d (base %d), store_failures %d, fills_inflight %d' % (
            st['store_attempts'], base_attempts, st['store_failures'], st['fills_inflight']))
    except OSError as e:
        out.append('stats: %s' % e)
    return '; '.join(out)


def finish_waiters(ck, env, label, name, procs, timeout):
    """Every waiter ends within timeout with an error (any errno): what it waited for was
    cancelled."""
    for i, (p, out) in enumerate(procs):
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            ck.fail('%s: waiter %d still blocked after %ds' % (label, i, timeout))
            p.kill()
            p.wait()
        out.close()
        text = log_text(env.path('%s-%d.out' % (name, i))).split()
        ck.ok(text[:1] == ['START'] and text[1:2] == ['ERR'],
              '%s: waiter %d: %r (expected an error)' % (label, i, text))


def group_stop(env, ck, ng):
    """SIGTERM, and 'shardfs umount', while 4 readers wait for a store that went away (a retry
    budget of 120 s): what is in flight is cancelled, the readers get an error and the daemon
    exits at once (goal: 2 s) instead of after the budgets, and the mount is gone."""
    shards = big_shards(env, 6, 2 * MiB)
    src, refs = build_source(env, shards)
    opts = ['--cache-size', '8M', '--chunk-size', '1M', '--connections', '2',
            '--retry-budget', '120', '--log-file', env.path('daemon.log')]

    # (a) SIGTERM while the imagefolder view is being built for 4 readers
    ng.start()
    m = ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache-a'),
                 extra=opts + ['--layout', 'imagefolder', '--class-from', 'key-prefix'])
    m.mount()
    try:
        def add():
            make_shard(env, os.path.join(src, 'shard-000099.tar'), 's99', [300000] * 4)
            chmod_tree(src)
        retire_view(env, ck, m, add)
        ctl = ctl_open(m)
        st = ctl_stats(ctl)
        pid = st['pid']
        ng.stop()
        procs = [spawn_waiter(env, 'sigterm-%d' % i, 'os.listdir(%r)' % m.mnt)
                 for i in range(4)]
        ck.ok(ml.poll(lambda: waiting_on_store(env, ctl, 'sigterm', procs,
                                               st['store_attempts']), 60),
              'sigterm: the readers are not waiting on the store: %s' % waiters_state(
                  env, ctl, 'sigterm', procs, st['store_attempts']))
        os.close(ctl)
        t = time.monotonic()
        ml.kill_daemon(env, pid, signal.SIGTERM)
        gone = ml.poll(lambda: not ml.pid_alive(pid), 30, 0.02)
        dt = time.monotonic() - t
        log('sigterm: daemon %d exited %s after %.2fs (goal 2 s)' % (
            pid, 'at once' if gone else 'NOT', dt))
        ck.ok(gone, 'sigterm: the daemon %d still runs %.0fs after SIGTERM' % (pid, dt))
        finish_waiters(ck, env, 'sigterm', 'sigterm', procs, 30)
        if ml.is_mounted(m.mnt):
            r = env.run([env.shardfs, 'umount', m.mnt], timeout=60, files=True)
            log('sigterm: shardfs umount of the stopped mount: rc=%d' % r.returncode)
        ck.ok(not ml.is_mounted(m.mnt), 'sigterm: %s still mounted' % m.mnt)
        text = log_text(env.path('daemon.log'))
        ck.ok('SIGTERM: stopping' in text, 'sigterm: the log does not say why it stopped')
    finally:
        m.umount(quiet=True)

    # (b) 'shardfs umount' while 4 readers wait in reads of uncached shards
    ng.start()
    m = ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache-b'), extra=opts)
    m.mount()
    try:
        ctl = ctl_open(m)
        st = ctl_stats(ctl)
        pid = st['pid']
        ng.stop()
        rels = sorted(refs)
        procs = [spawn_waiter(env, 'umount-%d' % i, 'open(%r, "rb").read()' % os.path.join(
            m.mnt, rels[i])) for i in range(4)]
        ck.ok(ml.poll(lambda: waiting_on_store(env, ctl, 'umount', procs,
                                               st['store_attempts']), 60),
              'umount: the readers are not waiting on the store: %s' % waiters_state(
                  env, ctl, 'umount', procs, st['store_attempts']))
        os.close(ctl)
        t = time.monotonic()
        # readers hold files open: the mount is busy, and only --force stops its daemon
        r = env.run([env.shardfs, 'umount', '--force', m.mnt], timeout=90, files=True)
        dt = time.monotonic() - t
        log('umount: rc=%d after %.2fs (goal 2 s): %s' % (
            r.returncode, dt, r.stderr.decode(errors='replace').strip()))
        ck.eq('umount: rc', r.returncode, 0)
        ck.ok(not ml.pid_alive(pid), 'umount: the daemon %d still runs' % pid)
        finish_waiters(ck, env, 'umount', 'umount', procs, 30)
        ck.ok(not ml.is_mounted(m.mnt), 'umount: %s still mounted' % m.mnt)
    finally:
        m.umount(quiet=True)

    # (c) 'shardfs umount' of an idle mount while prefetch fills wait for the store: the
    # unmount itself succeeds, and the daemon cancels the fills instead of waiting them out
    ng.start()
    m = ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache-c'), extra=opts)
    m.mount()
    try:
        st = m.stats()
        pid = st['pid']
        ng.stop()
        ml.control(m.mnt, 'prefetch\n')

        def fills_waiting():
            s2 = m.stats()
            return (s2['fills_inflight'] >= 1 and s2['store_failures'] == 0 and
                    s2['store_attempts'] >= st['store_attempts'] + 2)
        ck.ok(ml.poll(fills_waiting, 60), 'prefetch: no fill waits on the store')
        t = time.monotonic()
        r = env.run([env.shardfs, 'umount', m.mnt], timeout=90, files=True)
        dt = time.monotonic() - t
        log('prefetch: umount rc=%d after %.2fs (goal 2 s) %s' % (
            r.returncode, dt, r.stderr.decode(errors='replace').strip()))
        ck.eq('prefetch: umount rc', r.returncode, 0)
        ck.ok(not ml.pid_alive(pid), 'prefetch: the daemon %d still runs' % pid)
        ck.ok(not ml.is_mounted(m.mnt), 'prefetch: %s still mounted' % m.mnt)
    finally:
        m.umount(quiet=True)


# ---------------------------------------------------------------------------------------------
# warm: the whole dataset fetched in the background at mount; prefetch of more than fits
# ---------------------------------------------------------------------------------------------

def wait_stats(m, cond, timeout):
    """Poll the mount's stats until cond(stats) holds (or timeout seconds passed); the last."""
    end = time.monotonic() + timeout
    st = m.stats()
    while not cond(st) and time.monotonic() < end:
        time.sleep(0.1)
        st = m.stats()
    return st


def sub_refs(refs, prefix):
    """The shards of refs below prefix/, relative to it (for a mount of that directory)."""
    return {rel[len(prefix) + 1:]: v for rel, v in refs.items() if rel.startswith(prefix + '/')}


def tree_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def warm_source(env):
    """small/: 4 shards of ~2 MiB and a plain file (fits a default cache); big/: 6 shards of
    ~4 MiB (3x an 8M cache)."""
    shards = {}
    for i in range(4):
        shards['small/shard-%06d.tar' % i] = [env.rng.randrange(1000, 300000) for _ in range(12)]
    for i in range(6):
        sizes, tot = [], 0
        while tot < 4 * MiB - 400000:
            n = env.rng.randrange(1000, 400000)
            sizes.append(n)
            tot += n + 1536
        shards['big/shard-%06d.tar' % i] = sizes
    src, refs = build_source(env, shards)
    with open(os.path.join(src, 'small', 'README.txt'), 'wb') as f:
        f.write(b'a plain file is warmed too\n')
    os.chmod(os.path.join(src, 'small', 'README.txt'), 0o644)
    return src, refs


def group_warm(env, ck, ng):
    src, refs = warm_source(env)
    small, big = os.path.join(src, 'small'), os.path.join(src, 'big')
    small_refs, big_refs = sub_refs(refs, 'small'), sub_refs(refs, 'big')
    small_total, big_total = tree_bytes(small), tree_bytes(big)
    ng.start()
    logf = env.path('daemon.log')

    # (a) a default mount of a dataset that fits: everything is fetched without a read, once;
    # then every read hits the cache and nothing more is fetched
    with ml.Mount(env, ng.url('json/small/'), cache_dir=env.path('cache-a'),
                  extra=['--chunk-size', '1M', '--log-file', logf]) as m:
        st = wait_stats(m, lambda s: s.get('warm_state') != 1, 120)
        log('warm (a): %r' % {k: st.get(k) for k in ('warm_state', 'warm_bytes_wanted',
                                                     'warm_bytes_done', 'bytes_fetched',
                                                     'fills', 'evictions')})
        ck.eq('warm (a): warm_state', st.get('warm_state'), 2)
        ck.eq('warm (a): warm_bytes_wanted', st.get('warm_bytes_wanted'), small_total)
        ck.eq('warm (a): source_bytes', st.get('source_bytes'), small_total)
        ck.eq('warm (a): warm_bytes_done', st.get('warm_bytes_done'), small_total)
        ck.eq('warm (a): bytes_fetched (each chunk once)', st.get('bytes_fetched'), small_total)
        ck.eq('warm (a): reads of the cache (none was asked)',
              (st.get('cache_hits'), st.get('cache_misses')), (0, 0))
        ck.eq('warm (a): evictions', st.get('evictions'), 0)
        check_all(ck, 'warm (a) reads', m.mnt, small, small_refs)
        with open(os.path.join(m.mnt, 'README.txt'), 'rb') as f:
            ck.eq('warm (a): README.txt', f.read(), b'a plain file is warmed too\n')
        st2 = m.stats()
        ck.eq('warm (a): bytes_fetched after reading everything', st2['bytes_fetched'],
              small_total)
        ck.eq('warm (a): cache_misses after reading everything', st2['cache_misses'], 0)
        ck.ok(st2['cache_hits'] > 0, 'warm (a): no cache hits')
        ck.eq('warm (a): read_errors', st2['read_errors'], 0)
    ck.ok('warm: done' in log_text(logf), 'warm (a): the log does not say the warm is done')

    # (b) --warm off fetches nothing without reads; a local source needs no warm
    logb = env.path('daemon-b.log')
    with ml.Mount(env, ng.url('json/small/'), cache_dir=env.path('cache-b'),
                  extra=['--chunk-size', '1M', '--warm', 'off', '--log-file', logb]) as m:
        names = sorted(os.listdir(m.mnt))
        st = m.stats()
        ck.ok('shard-000000.tar' in names, 'warm (b): listing %r' % names)
        ck.eq('warm (b): warm_state', st.get('warm_state'), 0)
        ck.eq('warm (b): bytes_fetched', st.get('bytes_fetched'), 0)
        ck.eq('warm (b): fills', st.get('fills'), 0)
        ck.eq('warm (b): warm_bytes_wanted', st.get('warm_bytes_wanted'), 0)
    # over the mount's whole life, not only right after it: no warm ever ran
    ck.ok('warm:' not in log_text(logb), 'warm (b): --warm off warmed:\n' + log_text(logb)[-1500:])
    with ml.Mount(env, small, cache_dir=env.path('cache-b')) as m:
        ck.eq('warm (b) local: warm_state', m.stats().get('warm_state'), 0)
    r = env.run([env.shardfs, 'mount', '--warm', 'some', small, env.path('mnt-none')])
    ck.ok(r.returncode != 0 and b'--warm' in r.stderr, 'warm (b): --warm some was not refused '
          'naming the option: rc=%r %r' % (r.returncode, r.stderr))

    # (c) a dataset 3x the cache: auto does not warm it; --warm all warms what fits, stops at
    # the limit, says so, and evicts nothing
    opts = ['--cache-size', '8M', '--chunk-size', '1M', '--connections', '4']
    logc = env.path('daemon-c.log')
    with ml.Mount(env, ng.url('json/big/'), cache_dir=env.path('cache-c'),
                  extra=opts + ['--log-file', logc]) as m:
        # the decision first (logged), then the state: a warm that started late would show
        ck.ok(ml.poll(lambda: 'does not fit' in log_text(logc)),
              'warm (c) auto: the log does not say why it does not warm:\n' +
              log_text(logc)[-1500:])
        st = m.stats()
        ck.eq('warm (c) auto: warm_state', st.get('warm_state'), 0)
        ck.eq('warm (c) auto: bytes_fetched', st.get('bytes_fetched'), 0)
    with ml.Mount(env, ng.url('json/big/'), cache_dir=env.path('cache-c'),
                  extra=opts + ['--log-file', logc, '--warm', 'all']) as m:
        st = wait_stats(m, lambda s: s.get('warm_state') != 1, 120)
        log('warm (c) all: %r' % {k: st.get(k) for k in (
            'warm_state', 'warm_bytes_wanted', 'warm_bytes_done', 'warm_unfit_bytes',
            'bytes_fetched', 'evictions', 'cache_bytes_used', 'cache_unfit_bytes')})
        ck.eq('warm (c) all: warm_state (stopped at the limit)', st.get('warm_state'), 3)
        ck.eq('warm (c) all: warm_bytes_wanted', st.get('warm_bytes_wanted'), big_total)
        ck.eq('warm (c) all: evictions', st.get('evictions'), 0)
        done = st.get('warm_bytes_done', 0)
        ck.ok(8 * MiB - MiB < done <= 8 * MiB, 'warm (c) all: %d bytes warmed, want the cache '
              'filled to within a chunk of 8M' % done)
        ck.eq('warm (c) all: bytes_fetched', st.get('bytes_fetched'), done)
        ck.eq('warm (c) all: warm_unfit_bytes', st.get('warm_unfit_bytes'), big_total - done)
        ck.ok(st.get('cache_bytes_used', 1 << 62) <= 8 * MiB, 'warm (c) all: cache_bytes_used '
              '%r past 8M' % st.get('cache_bytes_used'))
        ck.eq('warm (c) all: fill_errors', st.get('fill_errors'), 0)
        check_all(ck, 'warm (c) all reads', m.mnt, big, big_refs)
    text = log_text(logc)
    ck.ok('larger than the cache' in text and 'stopped at the cache' in text,
          'warm (c) all: the log does not say it warms what fits and stopped:\n' + text[-1500:])

    # (d) a reader is served while the warm runs: every warm fill of the other shards is held
    # at a proxy; the reader's demand reads of the last shard (in listing order) go through
    # and are exact; the shard it touched is warmed next; each chunk is fetched once
    px = web.SlowProxy(ng.port)
    try:
        target = 'shard-000003.tar'
        px.hold_paths = lambda p: not p.endswith('/' + target)
        with ml.Mount(env, px.url('json/small/'), cache_dir=env.path('cache-d'),
                      extra=['--chunk-size', '256K', '--connections', '2']) as m:
            st = wait_stats(m, lambda s: s.get('warm_bytes_wanted') == small_total, 60)
            ck.eq('warm (d): every object in the warm order', st.get('warm_bytes_wanted'),
                  small_total)
            # with no reader yet the warm runs a fill on each of the 2 connections
            ck.ok(ml.poll(lambda: len(px.held()) == 2, 60),
                  'warm (d): not 2 warm fills held at the proxy: %r' % px.held())
            with open(os.path.join(small, target), 'rb') as f:
                want = f.read()
            with open(os.path.join(m.mnt, target), 'rb', buffering=0) as f:
                head = f.read(4096)
            ck.ok(head == want[:4096], 'warm (d): the first 4 KiB of %s differ' % target)
            st = m.stats()
            ck.eq('warm (d): warm_state while the reader read', st.get('warm_state'), 1)
            # the reader's read from offset 0 queued readahead: both warm fills in flight
            # (held after 64 KiB of their 256 KiB chunks) were withdrawn for it, which freed
            # the connections its fills needed; their chunks are fetched again after the
            # release (bytes_fetched below: once)
            ck.eq('warm (d): prefetch_withdrawn while the warm fills were held',
                  st.get('prefetch_withdrawn'), 2)
            with px.lock:
                n0 = len(px.gets)
            px.release()
            st = wait_stats(m, lambda s: s.get('warm_state') != 1, 120)
            ck.eq('warm (d): warm_state', st.get('warm_state'), 2)
            ck.eq('warm (d): bytes_fetched (each chunk once)', st.get('bytes_fetched'),
                  small_total)
            with px.lock:
                after = [r['path'].rsplit('/', 1)[-1] for r in px.gets[n0:] if r['range']]
            log('warm (d): GETs after the release: %r' % after[:30])
            first_other = next((i for i, p in enumerate(after) if p != target), len(after))
            ck.ok(target not in after[first_other:], 'warm (d): the touched shard was not '
                  'warmed first: %r' % after[:30])
            got = ml.read_all(os.path.join(m.mnt, target))
            ck.ok(got == want, 'warm (d): %s differs from the source' % target)
            ck.eq('warm (d): bytes_fetched after the read', m.stats()['bytes_fetched'],
                  small_total)
    finally:
        px.close()


def group_prefetch(env, ck, ng):
    """'shardfs prefetch' of a dataset 3x the cache: it says up front what does not fit,
    fetches what fits without evicting, and ends (no stall) with a summary and exit 0; a
    second run finds what fits cached."""
    src, refs = warm_source(env)
    big = os.path.join(src, 'big')
    big_total = tree_bytes(big)
    ng.start()
    opts = ['--cache-size', '8M', '--chunk-size', '1M', '--connections', '4', '--warm', 'off',
            '--log-file', env.path('daemon.log')]
    with ml.Mount(env, ng.url('json/big/'), cache_dir=env.path('cache'), extra=opts) as m:
        for run in (1, 2):
            t = time.monotonic()
            r = env.run([env.shardfs, 'prefetch', m.mnt], timeout=100)
            out = (r.stdout + r.stderr).decode(errors='replace')
            log('prefetch run %d: rc=%r in %.1fs:\n%s' % (run, r.returncode,
                                                        time.monotonic() - t, out))
            ck.eq('prefetch run %d: exit status' % run, r.returncode, 0)
            ck.ok('will not fit' in ''.join(out.split('\n')[:3]),
                  'prefetch run %d: does not say up front what does not fit: %r' % (run, out))
            ck.ok(re.search(r'done: .* fetched, .* cached already, .* did not fit', out),
                  'prefetch run %d: no summary: %r' % (run, out))
            st = m.stats()
            log('prefetch run %d: %r' % (run, {k: st.get(k) for k in (
                'prefetch_bytes', 'prefetch_cached_bytes', 'prefetch_unfit_bytes',
                'prefetch_pending', 'bytes_fetched', 'evictions', 'cache_bytes_used')}))
            ck.eq('prefetch run %d: prefetch_bytes' % run, st.get('prefetch_bytes'), big_total)
            ck.eq('prefetch run %d: prefetch_pending' % run, st.get('prefetch_pending'), 0)
            ck.eq('prefetch run %d: cached + did not fit' % run,
                  st.get('prefetch_cached_bytes', 0) + st.get('prefetch_unfit_bytes', 0),
                  big_total)
            ck.ok(8 * MiB - MiB < st.get('prefetch_cached_bytes', 0) <= 8 * MiB,
                  'prefetch run %d: %r bytes cached, want within a chunk of 8M' % (
                      run, st.get('prefetch_cached_bytes')))
            ck.eq('prefetch run %d: bytes_fetched' % run, st.get('bytes_fetched'),
                  st.get('prefetch_cached_bytes'))
            ck.eq('prefetch run %d: evictions' % run, st.get('evictions'), 0)
            if run == 2:
                ck.ok(re.search(r'done: 0 B fetched', out),
                      'prefetch run 2: fetched something again: %r' % out)
        r = env.run([env.shardfs, 'prefetch', '--help'])
        out = r.stdout.decode(errors='replace')
        ck.ok('exit status' in out and 'did not fit' in out,
              'prefetch --help does not document the exit status: %r' % out)


def group_readonce(env, ck, ng):
    """A read-once pass over shards twice the cache's size: eviction goes by chunk, least
    recently read first, and spares chunks filled ahead of the reader, so each byte is fetched
    about once (whole-object eviction made a shard evict itself while it was read)."""
    shards = {'ro-%02d.tar' % i: [3 * MiB - 4096] * 4 for i in range(4)}
    src, refs = build_source(env, shards)
    ng.start()
    opts = ['--cache-size', '6M', '--chunk-size', '1M', '--connections', '4', '--warm', 'off',
            '--log-file', env.path('daemon.log')]
    with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'), extra=opts) as m:
        for d, _, files in os.walk(m.mnt):  # the indexes: built before the pass
            files.sort()
        before = m.stats()
        nread = 0
        for rel in sorted(refs):  # shard by shard, each member in order once
            for mem in sorted(members_of(refs, rel)):
                with open(os.path.join(m.mnt, shard_dir_rel(rel), mem), 'rb') as f:
                    got = bytearray()
                    while True:
                        b = f.read(256 * 1024)
                        if not b:
                            break
                        got += b
                with open(os.path.join(refs[rel][2], mem), 'rb') as f:
                    want = f.read()
                ck.ok(bytes(got) == want, 'readonce: %s/%s: %d bytes differ (%d)' % (
                    rel, mem, len(got), len(want)))
                nread += len(got)
        st = m.stats()
        fetched = st['bytes_fetched'] - before['bytes_fetched']
        log('readonce: read %d, fetched %d (%.2fx), fills %d, evictions %d, evicted %d, '
            'used %d' % (nread, fetched, fetched / max(nread, 1), st['fills'] - before['fills'],
                         st['evictions'], st['evicted_bytes'], st['cache_bytes_used']))
        ck.eq('readonce: bytes read', nread, sum(
            os.path.getsize(os.path.join(refs[r][2], mem)) for r in refs
            for mem in members_of(refs, r)))
        # ro-02 and ro-03 fetched ahead when the reader moved to ro-01 in order
        ck.ok(st['shard_prefetches'] >= 2, 'readonce: shard_prefetches %d < 2' %
              st['shard_prefetches'])
        ck.ok(fetched <= nread * 1.2, 'readonce: fetched %d bytes for %d read (%.2fx > 1.2x)' % (
            fetched, nread, fetched / max(nread, 1)))
        ck.ok(st['evictions'] > 0, 'readonce: no evictions')
        ck.ok(st['cache_bytes_used'] <= 6 * MiB, 'readonce: cache_bytes_used %d > 6M' %
              st['cache_bytes_used'])
        ck.eq('readonce: read_errors', st['read_errors'], 0)
        # the default engine: every fill of the pass a lean attempt (plain http://, ranged),
        # on kept connections (no more than the 4 allowed at once were opened for it)
        ck.eq('readonce: the pass\'s attempts all lean',
              st['store_lean_attempts'] - before['store_lean_attempts'],
              st['store_attempts'] - before['store_attempts'])
        ck.ok(0 < st['store_lean_attempts'] - before['store_lean_attempts'],
              'readonce: no lean attempts')
        ck.ok(st['store_connects'] - before['store_connects'] <= 4,
              'readonce: %d connections opened for the pass (> 4)' % (
                  st['store_connects'] - before['store_connects']))


def bin_members(tar):
    """{name: (offset of its data, size)} of the .bin members of the tar file at path tar."""
    import tarfile
    with tarfile.open(tar) as t:
        return {m.name: (m.offset_data, m.size) for m in t.getmembers()
                if m.isfile() and m.name.endswith('.bin')}


@contextlib.contextmanager
def full_cache_mount(env, ck, ng, src, label):
    """A mount of ng's json/ source with a full cache (the groups randunits and exacthit):
    2 MiB of cache in 1 MiB chunks (64 KiB units), 4 connections, no warm, no shard fetched
    ahead, its indexes listed, then a-fill.tar (4 MiB, twice the cache) read in sequence and
    checked against src: a miss after it fills only the units it reads. Yields the mount."""
    ng.start()
    opts = ['--cache-size', '2M', '--chunk-size', '1M', '--connections', '4', '--warm', 'off',
            '--prefetch-shards', '0', '--log-file', env.path('daemon.log')]
    with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'), extra=opts) as m:
        for d, _, files in os.walk(m.mnt):  # the indexes
            files.sort()
        got = ml.read_all(os.path.join(m.mnt, 'a-fill.tar'))
        with open(os.path.join(src, 'a-fill.tar'), 'rb') as f:
            ck.ok(got == f.read(), '%s: a-fill.tar differs from the source' % label)
        yield m


def group_randunits(env, ck, ng):
    """Random reads of data that does not fit fill only the units they read (64 KiB, a
    sixteenth of the chunk here), not whole chunks that would be evicted before their neighbours are read."""
    unit = 64 * 1024
    shards = {'a-fill.tar': [4 * MiB], 'b-rand.tar': [20000] * 64}
    shards.update({'c-%d.tar' % i: [20000] * 4 for i in range(4)})
    shards['d-big.tar'] = [300000] * 16
    src, refs = build_source(env, shards)
    rand = os.path.join(src, 'b-rand.tar')
    rsize = os.path.getsize(rand)
    loc = bin_members(rand)
    names = sorted(loc)
    # every 12th member, backwards, from the 17th last: no read starts near where the one
    # before ended (the index build's last read ended near the shard's end), so none is
    # sequential
    pick = names[-17::-12]
    units, runs = set(), 0
    for n in pick:  # each read: one request per chunk its new units are in
        off, size = loc[n]
        new = set(range(off // unit, (off + size - 1) // unit + 1)) - units
        runs += len({u // 16 for u in new})
        units |= new
    want = sum(min(unit, rsize - u * unit) for u in units)
    log('randunits: members at %r, units %r' % ([loc[n][0] for n in pick], sorted(units)))
    with full_cache_mount(env, ck, ng, src, 'randunits') as m:
        for rnd in (1, 2):
            before = m.stats()
            for n in pick:
                with open(os.path.join(m.mnt, shard_dir_rel('b-rand.tar'), n), 'rb') as f:
                    got = f.read()
                with open(os.path.join(refs['b-rand.tar'][2], n), 'rb') as f:
                    ck.ok(got == f.read(), 'randunits: %s differs' % n)
            st = m.stats()
            fetched = st['bytes_fetched'] - before['bytes_fetched']
            fills = st['fills'] - before['fills']
            log('randunits round %d: %d members of 20000 bytes read, %d bytes in %d fills '
                'fetched (want %d in %d); cache_bytes_used %d' % (
                    rnd, len(pick), fetched, fills, want if rnd == 1 else 0,
                    runs if rnd == 1 else 0, st['cache_bytes_used']))
            ck.eq('randunits round %d: bytes_fetched' % rnd, fetched, want if rnd == 1 else 0)
            ck.eq('randunits round %d: fills' % rnd, fills, runs if rnd == 1 else 0)
        # members read in several requests each (300000 bytes): the requests of one member
        # are in sequence, yet no readahead starts (less than 1 MiB read in a row)
        big = os.path.join(src, 'd-big.tar')
        bloc = bin_members(big)
        bnames = sorted(bloc)
        bunits = set()
        for n in (bnames[12], bnames[4]):
            off, size = bloc[n]
            bunits.update(range(off // unit, (off + size - 1) // unit + 1))
        bwant = sum(min(unit, os.path.getsize(big) - u * unit) for u in bunits)
        before = m.stats()
        for n in (bnames[12], bnames[4]):
            with open(os.path.join(m.mnt, shard_dir_rel('d-big.tar'), n), 'rb') as f:
                got = f.read()
            with open(os.path.join(refs['d-big.tar'][2], n), 'rb') as f:
                ck.ok(got == f.read(), 'randunits: %s differs' % n)
        st = m.stats()
        log('randunits: 2 members of 300000 bytes: fetched %d (want %d), readahead_fills %d' % (
            st['bytes_fetched'] - before['bytes_fetched'], bwant,
            st['readahead_fills'] - before['readahead_fills']))
        ck.eq('randunits: bytes_fetched for 2 members of 300000 bytes',
              st['bytes_fetched'] - before['bytes_fetched'], bwant)
        ck.ok(st['cache_bytes_used'] <= 2 * MiB, 'randunits: cache_bytes_used %d > 2M' %
              st['cache_bytes_used'])
        ck.eq('randunits: read_errors', st['read_errors'], 0)
    # a shuffled reader moves to the next shard by chance: no shard is fetched ahead for it
    # (one read of a shard, then the next, counted as reading in order)
    opts = ['--cache-size', '2M', '--chunk-size', '1M', '--warm', 'off',
            '--log-file', env.path('daemon.log')]
    with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache2'), extra=opts) as m:
        for d, _, files in os.walk(m.mnt):
            files.sort()
        for j in range(4):
            for i in range(4):
                rel = 'c-%d.tar' % i
                mem = sorted(n for n in members_of(refs, rel) if n.endswith('.bin'))[j]
                with open(os.path.join(m.mnt, shard_dir_rel(rel), mem), 'rb') as f:
                    got = f.read()
                with open(os.path.join(refs[rel][2], mem), 'rb') as f:
                    ck.ok(got == f.read(), 'randunits: %s/%s differs' % (rel, mem))
        st = m.stats()
        ck.eq('randunits: shard_prefetches of a reader going round the shards',
              st['shard_prefetches'], 0)


def resident_pages(path):
    """Which pages of the file at path are in the kernel's page cache (mincore of a read-only
    shared mapping): a set of page numbers."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page = os.sysconf('SC_PAGE_SIZE')
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return set()
        addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), 'mmap %s' % path)
        try:
            n = (size + page - 1) // page
            vec = ctypes.create_string_buffer(n)
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), 'mincore %s' % path)
            return {i for i in range(n) if vec.raw[i] & 1}
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def drop_file_pages(path):
    """The pages of one file dropped from the page cache (this file only): written out first
    (DONTNEED drops only clean pages; the fills' last ones may not be written yet)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def group_exacthit(env, ck, ng):
    """A cache hit's read of its cache data file brings in the hit's pages and none of the
    sparse file's holes past them (the readahead of that read would zero-fill a page for every
    block not mapped)."""
    unit = 64 * 1024
    page = os.sysconf('SC_PAGE_SIZE')
    shards = {'a-fill.tar': [4 * MiB], 'd-big.tar': [300000] * 16}
    src, refs = build_source(env, shards)
    big = os.path.join(src, 'd-big.tar')
    bloc = bin_members(big)
    bnames = sorted(bloc)
    pick = [bnames[12], bnames[4], bnames[8]]
    with full_cache_mount(env, ck, ng, src, 'exacthit') as m:
        member = {}
        for n in pick:  # each fills its own units (the randunits group counts them)
            member[n] = os.path.join(m.mnt, shard_dir_rel('d-big.tar'), n)
            with open(os.path.join(refs['d-big.tar'][2], n), 'rb') as f:
                ref = f.read()
            ck.ok(uncached_read(member[n]) == ref, 'exacthit: %s differs (first read)' % n)
        off0, size0 = bloc[pick[0]]
        with open(big, 'rb') as f:
            f.seek(off0)
            want0 = f.read(size0)
        data = None
        for p in data_files(env.path('cache')):
            with open(p, 'rb') as f:
                f.seek(off0)
                if f.read(size0) == want0:
                    data = p
        ck.ok(data is not None, 'exacthit: no data file holds d-big.tar\'s member bytes')
        if data is None:
            return
        for n in pick:
            off, size = bloc[n]
            nxt = ((off + size - 1) // unit + 1) * unit  # the unit past the member's last
            # the premise: that unit is a hole of the data file (not cached)
            fd = os.open(data, os.O_RDONLY)
            try:
                try:
                    after = os.lseek(fd, nxt, os.SEEK_DATA)
                except OSError as e:
                    after = os.fstat(fd).st_size if e.errno == errno.ENXIO else -1
            finally:
                os.close(fd)
            ck.ok(after >= nxt + unit, 'exacthit %s: the unit at %d past the member holds data '
                  '(next data at %d): not the hole this test needs' % (n, nxt, after))
            drop_file_pages(data)
            before = resident_pages(data)
            ck.eq('exacthit %s: data file pages resident after DONTNEED' % n, len(before), 0)
            st0 = m.stats()
            with open(os.path.join(refs['d-big.tar'][2], n), 'rb') as f:
                ck.ok(uncached_read(member[n]) == f.read(), 'exacthit: %s differs (hit)' % n)
            st = m.stats()
            ck.eq('exacthit %s: bytes_fetched by the hit' % n,
                  st['bytes_fetched'] - st0['bytes_fetched'], 0)
            ck.ok(st['cache_hits'] > st0['cache_hits'], 'exacthit %s: no cache hit counted' % n)
            res = resident_pages(data)
            own = set(range(off // page, (off + size - 1) // page + 1))
            hole = {p for p in res if nxt // page <= p < (nxt + unit) // page}
            log('exacthit %s: [%d, +%d): %d of its %d pages resident, %d other pages '
                '(%d in the hole unit at %d; first %r)' % (
                    n, off, size, len(res & own), len(own), len(res - own), len(hole), nxt,
                    sorted(res - own)[:8]))
            ck.eq('exacthit %s: the member\'s pages resident' % n, len(res & own), len(own))
            ck.eq('exacthit %s: pages resident in the hole unit past it' % n, len(hole), 0)
            ck.eq('exacthit %s: pages resident outside the member' % n, len(res - own), 0)
        ck.eq('exacthit: read_errors', m.stats()['read_errors'], 0)


def fnv64_hex(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return '%016x' % h


CLS_MAGICS = (b'SHCLSMAP', b'shardfs-imagefolder-cls 1\n')


def meta_files(cache):
    """{path: bytes} of every blob in the cache's meta directories (and their families'
    directories, meta/f-*/)."""
    out = {}
    for p in glob.glob(os.path.join(cache, 'v1', '*', 'meta', '*')) + \
            glob.glob(os.path.join(cache, 'v1', '*', 'meta', 'f-*', '*')):
        if os.path.isfile(p) and not os.path.basename(p).startswith('.tmp.'):
            with open(p, 'rb') as f:
                out[p] = f.read()
    return out


def read_view(mnt):
    got = {}
    for c in sorted(os.listdir(mnt)):
        got[c] = {}
        for fn in os.listdir(os.path.join(mnt, c)):
            got[c][fn] = ml.read_all(os.path.join(mnt, c, fn))
    return got


def check_view(ck, label, got, want):
    ck.eq('%s: classes' % label, sorted(got), sorted(want))
    for c in sorted(want):
        ck.eq('%s: class %s files' % (label, c), sorted(got.get(c, {})), sorted(want[c]))
        for fn, b in sorted(want[c].items()):
            ck.ok(got.get(c, {}).get(fn) == b, '%s: %s/%s differs' % (label, c, fn))


def corrupt_cls_value(b):
    """A class map whose first class is another number (its checksum no longer matches)."""
    if b.startswith(b'SHCLSMAP'):
        v = int.from_bytes(b[28:36], 'little')
        return b[:28] + ((v + 1) % 3).to_bytes(8, 'little') + b[36:]
    # the text format of 0143ec1 ("ENTRY CLASS" lines, no checksum)
    head, _, rows = b.partition(b'\n')
    first, _, rest = rows.partition(b'\n')
    e, v = first.split(b' ')
    return head + b'\n' + e + b' ' + str((int(v) + 1) % 3).encode() + b'\n' + rest


def group_metablobs(env, ck, ng):
    want = imagefolder_source(env, 'mb', nshards=2, nsamples=6)
    nsamples = 12
    ng.start()
    cache = env.path('cache')
    logf = env.path('daemon.log')
    opts = ['--layout', 'imagefolder', '--class-from', 'cls', '--warm', 'off',
            '--retry-budget', '1', '--log-file', logf]
    url = ng.url('json/mb/')
    total = sum(os.path.getsize(p) for p in glob.glob(env.path('src', 'mb', '*.tar')))
    with ml.Mount(env, url, cache_dir=cache, extra=opts) as m:
        check_view(ck, 'first mount', read_view(m.mnt), want)
        st = m.stats()
        ck.eq('first mount: if_cls_reads', st['imagefolder_cls_reads'], nsamples)
        ck.eq('first mount: bytes_fetched', st['bytes_fetched'], total)
    blobs = meta_files(cache)
    maps = sorted(p for p, b in blobs.items() if b.startswith(CLS_MAGICS))
    lists = [p for p in blobs if os.path.basename(p) == fnv64_hex(b'listing')]
    views = [p for p, b in blobs.items() if b.startswith(b'SHIFVIEW')]
    ck.eq('class maps kept', len(maps), 2)
    ck.eq('listing kept', len(lists), 1)
    ck.eq('imagefolder view kept', len(views), 1)
    if len(maps) != 2 or len(lists) != 1 or len(views) != 1:
        return
    # a remount maps the saved view and needs no class map: remove it so that the class
    # maps are what the view is built from
    os.unlink(views[0])

    # class maps: one with another class (bad checksum), one of another version
    with open(maps[0], 'wb') as f:
        f.write(corrupt_cls_value(blobs[maps[0]]))
    b = blobs[maps[1]]
    with open(maps[1], 'wb') as f:
        f.write(b[:8] + (1).to_bytes(4, 'little') + b[12:] if b.startswith(b'SHCLSMAP') else
                b.replace(b'cls 1\n', b'cls 0\n', 1))
    # and the shards' saved indexes and chunk maps of another version
    idx = sorted(p for p, b in blobs.items() if b.startswith(b'SHRDIDX\0'))
    cmaps = sorted(glob.glob(os.path.join(cache, 'v1', '*', 'data', '*.map')))
    ck.eq('indexes kept', len(idx), 2)
    ck.eq('chunk maps kept', len(cmaps), 2)
    for p in idx + cmaps:
        with open(p, 'r+b') as f:
            f.seek(8)
            f.write((99).to_bytes(4, 'little'))
    with ml.Mount(env, url, cache_dir=cache, extra=opts) as m:
        check_view(ck, 'damaged class maps', read_view(m.mnt), want)
        st = m.stats()
        ck.eq('damaged class maps: if_cls_reads', st['imagefolder_cls_reads'], nsamples)
        ck.eq('indexes of another version: index_built', st['index_built'], 2)
        ck.eq('chunk maps of another version: bytes_fetched', st['bytes_fetched'], total)
        said = m.stderr  # the scan at open runs before the daemon's log file is open
    text = log_text(logf)
    ck.eq('indexes of another version: log lines', len(re.findall(
        r'saved index unusable \(another version\); rebuilding', text)), 2)
    ck.eq('chunk maps of another version: log lines', len(re.findall(
        r'chunk map \w+\.map is of another version: not used, its chunks are fetched again',
        said + text)), 1)
    ck.eq('damaged class maps: log lines', len(re.findall(
        r'cached classes of \S+ unusable \((another version|Bad message)\); reading them again',
        text)), 2)
    ck.ok('another version' in text, 'the class map of another version is not named as such')
    after = meta_files(cache)
    for p in maps:
        ck.ok(after.get(p) == blobs[p], 'class map %s not rebuilt with the same bytes' % p)
    ck.ok(after.get(views[0]) == blobs[views[0]], 'the view was not saved again byte for byte')
    os.unlink(views[0])
    with ml.Mount(env, url, cache_dir=cache, extra=opts) as m:
        check_view(ck, 'rebuilt class maps', read_view(m.mnt), want)
        ck.eq('rebuilt class maps: if_cls_reads', m.stats()['imagefolder_cls_reads'], 0)

    # the kept listing, with the store down: of another version, then damaged
    ng.stop()
    lb = blobs[lists[0]]
    cases = [('another version', lb[:8] + (7).to_bytes(4, 'little') + lb[12:],
              r'listing kept in the cache is of another version'),
             ('damaged', lb[:-1] + bytes([lb[-1] ^ 1]),
              r'listing kept in the cache is damaged \(Bad message\)')]
    for label, bad, line in cases:
        with open(lists[0], 'wb') as f:
            f.write(bad)
        os.truncate(logf, 0)
        err = None
        try:
            with ml.Mount(env, url, cache_dir=cache, extra=opts):
                pass
        except ml.MountError as e:
            err = str(e)
        ck.ok(err is not None, 'listing %s: an offline mount went ahead' % label)
        ck.ok(re.search(line, (err or '') + log_text(logf)),
              'listing %s: not said (%r); log:\n%s' % (label, err, log_text(logf)[-2000:]))
    ng.start()
    with ml.Mount(env, url, cache_dir=cache, extra=opts) as m:
        check_view(ck, 'online again', read_view(m.mnt), want)
    ck.ok(meta_files(cache).get(lists[0]) == lb, 'the listing was not written again byte for byte')
    ng.stop()
    with ml.Mount(env, url, cache_dir=cache, extra=opts) as m:
        st = m.stats()
        ck.eq('offline: source_offline', st.get('source_offline'), 1)
        check_view(ck, 'offline', read_view(m.mnt), want)
        st = m.stats()
        ck.eq('offline: bytes_fetched', st['bytes_fetched'], 0)
        ck.eq('offline: if_cls_reads', st['imagefolder_cls_reads'], 0)

    # a shard removed from the store while no mount ran: the next mount removes its index and
    # class map (the listing kept from the last mount names it); they are never evicted
    ng.start()
    os.unlink(env.path('src', 'mb', 'if-000001.tar'))
    want0 = {c: {fn: b for fn, b in files.items() if not fn.startswith('if1_')}
             for c, files in want.items()}
    want0 = {c: files for c, files in want0.items() if files}
    with ml.Mount(env, url, cache_dir=cache, extra=opts) as m:
        check_view(ck, 'a shard removed', read_view(m.mnt), want0)
        st = m.stats()
        ck.eq('a shard removed: index_removed, imagefolder_classes_removed',
              (st.get('index_removed'), st.get('imagefolder_classes_removed')), (1, 1))
    blobs = meta_files(cache)
    ck.eq('a shard removed: indexes left', sum(1 for b in blobs.values()
                                               if b.startswith(b'SHRDIDX\0')), 1)
    ck.eq('a shard removed: class maps left', sum(1 for b in blobs.values()
                                                  if b.startswith(CLS_MAGICS)), 1)


def data_files(cache):
    """The chunk stores' data files (not their .st and .map)."""
    return [p for p in glob.glob(os.path.join(cache, 'v1', '*', 'data', '*'))
            if re.fullmatch(r'[0-9a-f]{16}', os.path.basename(p))]


def damage(path, flip=(), holes=()):
    """Flip a byte at each offset of flip; punch a 4 KiB hole at each offset of holes."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDWR)
    try:
        for off in flip:
            b = os.pread(fd, 1, off)
            os.pwrite(fd, bytes([b[0] ^ 0x5a]), off)
        for off in holes:  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
            if libc.fallocate(fd, 3, ctypes.c_long(off), ctypes.c_long(4096)) != 0:
                raise OSError(ctypes.get_errno(), 'fallocate')
    finally:
        os.close(fd)


def group_unitcrc(env, ck, ng):
    """Cached units carry their CRC32C: a data file cut under the running mount, a byte flipped
    and a hole punched between mounts, a byte flipped under a second mount of the cache dir: each
    read gives the exact bytes (the damaged units fetched again), cache_units_corrupt exact,
    read_errors 0."""
    unit = 64 * 1024
    shards = {'shard.tar': [env.rng.randrange(100000, 900000) for _ in range(16)]}
    src, refs = build_source(env, shards)
    path = os.path.join(src, 'shard.tar')
    with open(path, 'rb') as f:
        want = f.read()
    nunits = (len(want) + unit - 1) // unit
    ng.start()
    cache = env.path('cache')
    opts = ['--chunk-size', '1M', '--warm', 'off', '--log-file', env.path('daemon.log')]
    url = ng.url('json/')

    def read_raw(m, label):
        try:
            got = uncached_read(os.path.join(m.mnt, 'shard.tar'))
        except OSError as e:
            ck.fail('%s: %s' % (label, e))
            return
        ck.eq('%s: bytes read' % label, len(got), len(want))
        ck.ok(got == want, '%s: bytes differ' % label)

    with ml.Mount(env, url, cache_dir=cache, extra=opts) as m:
        read_raw(m, 'first read')
        st0 = m.stats()
        files = data_files(cache)
        ck.eq('data files', len(files), 1)
        # cut under the running mount (the issue's finding: a short read with status 0)
        for p in files:
            os.truncate(p, 0)
        read_raw(m, 'data file cut under the mount')
        st = m.stats()
        ck.eq('cut: cache_units_corrupt', st['cache_units_corrupt'], nunits)
        ck.eq('cut: bytes fetched again', st['bytes_fetched'] - st0['bytes_fetched'], len(want))
        ck.eq('cut: read_errors', st['read_errors'], 0)
    # between mounts: a byte flipped in unit 3, a hole in unit 7
    damage(files[0], flip=[3 * unit + 100], holes=[7 * unit])
    with ml.Mount(env, url, cache_dir=cache, extra=opts) as m:
        read_raw(m, 'damaged between mounts')
        st = m.stats()
        ck.eq('remount: cache_units_corrupt', st['cache_units_corrupt'], 2)
        ck.eq('remount: bytes_fetched', st['bytes_fetched'], 2 * unit)
        ck.eq('remount: read_errors', st['read_errors'], 0)
        # a second mount of the cache dir: a byte flipped in a unit the first mount filled
        # is caught on the second's first read of it
        with ml.Mount(env, url, cache_dir=cache, extra=opts) as m2:
            damage(files[0], flip=[12 * unit + 7])
            read_raw(m2, 'second mount')
            st2 = m2.stats()
            ck.eq('second mount: cache_units_corrupt', st2['cache_units_corrupt'], 1)
            ck.eq('second mount: bytes_fetched', st2['bytes_fetched'], unit)
            ck.eq('second mount: read_errors', st2['read_errors'], 0)
        read_raw(m, 'first mount after the second fixed the unit')
    text = log_text(env.path('daemon.log'))
    ck.ok('fail their CRC32C' in text and 'the data file was cut' in text,
          'the log does not name the damage:\n' + text[-2000:])


def drop_caches():
    """Drop the kernel's page cache (the mount's pages and the cache files'): reads reach the
    daemon, and the daemon's preads reach the disk."""
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('3\n')


def group_livedamage(env, ck, ng):
    """Units the running mount filled itself, damaged under it (issue 38's three shards over
    nginx, issue 40's hole smaller than a block): a byte flipped in each data file, then a hole
    of 1000 bytes punched by fallocate(1) at 300000, each time the page cache dropped and every
    shard and member read again: exact bytes every time (each damaged unit fetched again),
    cache_units_corrupt exact (one per damaged unit), read_errors 0, one log line."""
    unit = 64 * 1024
    shards = {'shard-%d.tar' % i: [env.rng.randrange(20000, 200000) for _ in range(60)]
              for i in range(3)}
    src, refs = build_source(env, shards)
    ng.start()
    cache = env.path('cache')
    logf = env.path('daemon.log')
    with ml.Mount(env, ng.url('json/'), cache_dir=cache, extra=['--log-file', logf]) as m:
        check_all(ck, 'first read', m.mnt, src, refs)
        files = data_files(cache)
        ck.eq('data files', len(files), len(shards))
        st0 = m.stats()
        flips = []
        for p in files:
            off = env.rng.randrange(os.path.getsize(p))
            damage(p, flip=[off])
            flips.append((os.path.basename(p), off))
        log('flipped: %r' % flips)
        drop_caches()
        check_all(ck, 'after a byte flipped in each data file', m.mnt, src, refs)
        st = m.stats()
        ck.eq('flips: cache_units_corrupt', st['cache_units_corrupt'] - st0['cache_units_corrupt'],
              len(files))
        ck.eq('flips: bytes fetched again', st['bytes_fetched'] - st0['bytes_fetched'],
              sum(min(unit, os.path.getsize(p) - off // unit * unit)
                  for p, (_, off) in zip(files, flips)))
        ck.eq('flips: read_errors', st['read_errors'], 0)
        # a hole smaller than a block: SEEK_HOLE does not see it, the bytes read as zeros
        subprocess.run(['fallocate', '-p', '-o', '300000', '-l', '1000', files[0]], check=True,
                       timeout=60)
        drop_caches()
        check_all(ck, 'after a 1000-byte hole at 300000', m.mnt, src, refs)
        st1 = m.stats()
        ck.eq('hole: cache_units_corrupt', st1['cache_units_corrupt'] - st['cache_units_corrupt'],
              1)
        ck.eq('hole: bytes fetched again', st1['bytes_fetched'] - st['bytes_fetched'], unit)
        ck.eq('hole: read_errors', st1['read_errors'], 0)
        # nothing changed since: a read checks nothing again, fetches nothing
        drop_caches()
        check_all(ck, 'undamaged again', m.mnt, src, refs)
        st2 = m.stats()
        ck.eq('again: cache_units_corrupt, bytes_fetched',
              (st2['cache_units_corrupt'], st2['bytes_fetched']),
              (st1['cache_units_corrupt'], st1['bytes_fetched']))
    text = log_text(logf)
    ck.eq('log lines of damaged units', len(re.findall(r'fail their CRC32C', text)), 1)


def http_etag(url):
    import urllib.request
    req = urllib.request.Request(url, method='HEAD')
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.headers.get('ETag')


def group_weaketag(env, ck, ng):
    """issue 40 #4: nginx's ETag is "mtime-size": a shard rewritten with the same size and its
    mtime put back keeps it. Mounted with --warm off --chunk-size 64K --readahead 64K
    --prefetch-shards 0, 64 KiB read first, then the shard rewritten so, then cat(1) of it:
    its output is of one version only (the old one's units are never served with the new
    one's; ESTALE once the probe sees the change), the next cat gives the new version exactly,
    as do its members (the index saved for that ETag built again), cache_weak_changed 1,
    one log line."""
    unit = 64 * 1024
    # members of several units: the index build reads their headers, not all of their units
    sizes = [env.rng.randrange(400000, 700000) for _ in range(12)]
    shards = {'shard.tar': sizes}
    src, refs = build_source(env, shards)
    path = os.path.join(src, 'shard.tar')
    with open(path, 'rb') as f:
        old = f.read()
    ng.start()
    logf = env.path('daemon.log')
    # a cache a third of the shard: the index build's stream leaves most units evicted, so
    # that reads after the rewrite fill units
    opts = ['--warm', 'off', '--chunk-size', '64K', '--readahead', '64K',
            '--prefetch-shards', '0', '--cache-size', '2M', '--log-file', logf]
    etag0 = http_etag(ng.url('files/shard.tar'))
    with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'), extra=opts) as m:
        raw = os.path.join(m.mnt, 'shard.tar')
        fd = os.open(raw, os.O_RDONLY)
        try:
            ck.ok(os.pread(fd, unit, 0) == old[:unit], 'first 64 KiB: other bytes')
        finally:
            os.close(fd)
        # the index built (and saved) from the old version's headers
        ck.eq('members listed', sorted(os.listdir(os.path.join(m.mnt, 'shard'))),
              sorted(members_of(refs, 'shard.tar')))
        # the same names, their sizes in the other order (the same size in all, other
        # offsets: the old index would read the new bytes wrong); the mtime put back
        st = os.stat(path)
        new_src = env.path('new')
        make_shard(env, os.path.join(new_src, 'shard.tar'), 's0', sizes[::-1])
        with open(os.path.join(new_src, 'shard.tar'), 'rb') as f:
            new = f.read()
        ck.eq('the rewrite keeps the size', len(new), len(old))
        with open(path, 'r+b') as f:
            f.write(new)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        ck.eq('nginx ETag after the rewrite', http_etag(ng.url('files/shard.tar')), etag0)
        r = subprocess.run(['cat', raw], capture_output=True, timeout=120)
        out = r.stdout
        log('cat after the rewrite: exit %d, %d bytes, %r' % (r.returncode, len(out),
                                                              r.stderr[-200:]))
        one = out in (old[:len(out)], new[:len(out)])
        ck.ok(one, 'cat after the rewrite: %d bytes mixing the two versions (%d units of '
              'the old one)' % (len(out), sum(1 for i in range(0, len(out), unit)
                                              if out[i:i + unit] == old[i:i + unit] and
                                              old[i:i + unit] != new[i:i + unit])))
        ck.ok(r.returncode != 0 or out == new or out == old,
              'cat after the rewrite: exit 0 with %d bytes' % len(out))
        if r.returncode != 0:
            ck.ok(b'Stale file handle' in r.stderr, 'cat: %r' % r.stderr[-200:])
        # the daemon tells the kernel to forget the old version's entry on its notify thread:
        # dropped here, so that the next open looks the name up
        drop_caches()
        r = subprocess.run(['cat', raw], capture_output=True, timeout=120)
        ck.eq('cat again: exit', r.returncode, 0)
        ck.ok(r.stdout == new, 'cat again: %d bytes, not the new version' % len(r.stdout))
        # the members: GNU tar's extraction of the new version
        shutil.rmtree(env.path('ref'))
        dest = env.path('ref', 'shard.tar.d')
        ml.gnu_extract(env, path, dest)
        nrefs = {'shard.tar': (ml.snapshot(dest), ml.explicit_dirs(path), dest)}
        check_all(ck, 'new version', m.mnt, src, nrefs)
        st = m.stats()
        ck.eq('cache_weak_changed', st['cache_weak_changed'], 1)
        ck.ok(st['cache_weak_probes'] >= 1, 'cache_weak_probes %d' % st['cache_weak_probes'])
        ck.eq('cache_units_corrupt', st['cache_units_corrupt'], 0)
    text = log_text(logf)
    ck.eq('log lines of the change', len(re.findall(r'changed, its ETag', text)), 1)


def group_fulldisk(env, ck, ng):
    """A full disk degrades, it does not stop: the cache dir on a 16 MiB tmpfs that a file of
    another program fills to the last byte, nothing cached left to evict: reads of a shard
    indexed before are served from the store without caching (exact bytes, cache_bypass_reads
    and cache_bypass_bytes exact, read_errors 0, one log line)."""
    shards = {'shard.tar': [env.rng.randrange(100000, 400000) for _ in range(12)]}
    src, refs = build_source(env, shards)
    with open(os.path.join(src, 'shard.tar'), 'rb') as f:
        want = f.read()
    ng.start()
    disk = ml.tmpfs(env.path('tmpfs'), '16m')
    try:
        cache = os.path.join(disk, 'cache')
        logf = env.path('daemon.log')
        opts = ['--chunk-size', '1M', '--warm', 'off', '--prefetch-shards', '0',
                '--log-file', logf]
        url = ng.url('json/')
        with ml.Mount(env, url, cache_dir=cache, extra=opts) as m:
            check_all(ck, 'room', m.mnt, src, refs)  # indexed, cached
        # what was cached is gone (its state files stay); another program fills the disk
        for p in data_files(cache):
            os.truncate(p, 0)
        for p in map_files(cache):
            os.unlink(p)
        with open(os.path.join(disk, 'filler'), 'wb') as f:
            try:
                while True:
                    f.write(b'\0' * 65536)
                    f.flush()
            except OSError as e:
                ck.eq('filler: errno', errno.errorcode.get(e.errno), 'ENOSPC')
        with ml.Mount(env, url, cache_dir=cache, extra=opts) as m:
            st0 = m.stats()
            try:
                got = uncached_read(os.path.join(m.mnt, 'shard.tar'))
                ck.eq('full disk: bytes read', len(got), len(want))
                ck.ok(got == want, 'full disk: bytes differ')
            except OSError as e:
                ck.fail('full disk: raw read: %s' % e)
            st = m.stats()
            ck.ok(st['cache_bypass_reads'] - st0['cache_bypass_reads'] > 0,
                  'full disk: no bypass read counted')
            ck.eq('full disk: cache_bypass_bytes',
                  st['cache_bypass_bytes'] - st0['cache_bypass_bytes'], len(want))
            ck.eq('full disk: read_errors', st['read_errors'], 0)
            check_all(ck, 'full disk', m.mnt, src, refs)
            ck.eq('full disk: read_errors after members', m.stats()['read_errors'], 0)
        text = log_text(logf)
        ck.eq('full disk: bypass log lines', text.count('without caching them'), 1)
    finally:
        ml.untmpfs(disk)


GROUPS = {'offline': group_offline, 'capacity': group_capacity, 'crash': group_crash,
          'concurrency': group_concurrency, 'share': group_share, 'storedown': group_storedown,
          'stop': group_stop, 'warm': group_warm, 'prefetch': group_prefetch,
          'metablobs': group_metablobs, 'readonce': group_readonce,
          'randunits': group_randunits, 'exacthit': group_exacthit,
          'unitcrc': group_unitcrc,
          'fulldisk': group_fulldisk, 'livedamage': group_livedamage,
          'weaketag': group_weaketag}


class LazyNginx(web.Nginx):
    def start(self):
        if self.proc is None:
            super().start()
        return self


def run_group(env, ck, group):
    """One group with its nginx (started by the group when it needs it); the daemon log's tail
    when it failed."""
    ng = LazyNginx(env.path('nginx'), env.path('src'))
    failed = True
    try:
        GROUPS[group](env, ck, ng)
        failed = bool(ck.failures)
    finally:
        ng.stop()
        if failed:
            log('daemon log (tail):\n' + log_text(env.path('daemon.log'))[-3000:])


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in GROUPS:
        print(__doc__)
        return 2
    if not os.path.exists(web.NGINX):
        return ml.skip_status('%s is not installed (scripts/install-deps.sh --test)' % web.NGINX)
    ml.main_wrapper(run_group, sys.argv[1], 'cache-' + sys.argv[2], deadline=170,
                    group=sys.argv[2])


if __name__ == '__main__':
    sys.exit(main())
