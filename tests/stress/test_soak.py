#!/usr/bin/python3
"""Soak and many-open-files tests.

usage: test_soak.py SHARDFS GROUP
GROUP:
  soak      16 reader processes for SHARDFS_SOAK_SECONDS (default 120; 40 under ASan) over two
            mounts of one dataset (16 shards in two directories, ~60 MiB): the local directory
            and (when nginx is installed) the same tree served by nginx with a JSON listing,
            through a 16M cache tier that keeps evicting. Readers read random whole members,
            random ranges of members and of raw shards, whole raw shards and member listings,
            and compare every byte with the source. The daemons' fd counts (/proc/PID/fd) and
            RSS (VmRSS) are sampled after a warm-up (a pass over every shard, then 10-20 s of
            the run), every 10 s and at the end: no fd growth (end <= start + 8 local, + 16
            http, + 3 per FUSE worker thread started since), bounded RSS (end <= start*1.5 +
            16 MiB; under ASan + the allocator's quarantine), zero wrong bytes, zero errors, the
            daemons still answer. Prints "soak: seconds=... readers=16 reads=... bytes=... errors=0 fds
            start/end=.../... rss_kib start/end=.../..." (the local daemon's; the http daemon's on
            the next line).
  openmany  500 members (and 100 descriptors of raw shards) held open at once through one
            mount, read interleaved in small pieces, compared, closed: local mount, local with
            --strict-open, and (with nginx) http; the daemon's fd count returns to its baseline.

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
Environment: SHARDFS_SOAK_SECONDS, SHARDFS_TEST_SEED, SHARDFS_TEST_KEEP=1, SHARDFS_TEST_DEADLINE.
Internal: test_soak.py --reader MANIFEST.json (one reader process).
"""

import sys
sys.dont_write_bytecode = True

import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import stress as sl  # noqa: E402
from shardfs_test import mount as ml, web  # noqa: E402
from shardfs_test.stress import MiB  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

READERS = 16
# a FUSE worker thread brings its own descriptors: a /dev/fuse clone and a splice pipe pair.
# The pool grows on demand up to --threads (16), so a new thread's fds are not a leak.
FDS_PER_THREAD = 3


# ---------------------------------------------------------------------------------------------
# reader process
# ---------------------------------------------------------------------------------------------

def reader_main(manifest):
    with open(manifest) as f:
        man = json.load(f)
    rng = random.Random(man['seed'])
    mounts = man['mounts']
    items = man['items']
    raws = [it for it in items if it[0].endswith('.tar')]
    members = [it for it in items if not it[0].endswith('.tar')]
    dirs = man['dirs']
    deadline = man['deadline']
    res = dict(reads=0, bytes=0, errors=0, wrong=0, direct=0, dropped=0, ops={})
    fails = []

    def bad(kind, msg):
        res[kind] += 1
        if len(fails) < 30:
            fails.append(msg)

    def check(label, got, want):
        if got == want:
            res['bytes'] += len(got)
            return
        bad('wrong', '%s: %d bytes, expected %d, %s' % (
            label, len(got), len(want), 'a prefix' if want.startswith(got) else 'DIFFERENT'))

    def open_ro(p):
        """Past the page cache most of the time, so the reads reach the daemon: O_DIRECT
        (30%), or buffered after dropping the file's cached pages (30%), or plain buffered."""
        m = rng.random()
        if m < 0.3:
            res['direct'] += 1
            return os.open(p, os.O_RDONLY | os.O_DIRECT)
        fd = os.open(p, os.O_RDONLY)
        if m < 0.6:
            res['dropped'] += 1
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return fd

    def read_to_eof(fd):
        out = []
        while True:
            b = os.read(fd, rng.choice((4096, 65536, 131072, MiB)))
            if not b:
                return b''.join(out)
            out.append(b)

    while time.time() < deadline:
        root = rng.choice(mounts)
        r = rng.random()
        op = ('whole' if r < 0.35 else 'mpread' if r < 0.6 else 'raw' if r < 0.85 else
              'listdir' if r < 0.95 else 'rawwhole')
        res['ops'][op] = res['ops'].get(op, 0) + 1
        try:
            if op == 'whole':
                rel, path, off, size = rng.choice(members)
                p = os.path.join(root, rel)
                fd = open_ro(p)
                try:
                    got = read_to_eof(fd)
                finally:
                    os.close(fd)
                check(p, got, sl.ref_bytes(path, off, size))
                res['reads'] += 1
            elif op in ('mpread', 'raw'):
                rel, path, off, size = rng.choice(members if op == 'mpread' else raws)
                p = os.path.join(root, rel)
                fd = open_ro(p)
                try:
                    for _ in range(rng.randrange(1, 4)):
                        o = rng.randrange(0, size + 1)
                        n = rng.choice((1, 511, 4096, 65536, rng.randrange(1, 4 * MiB)))
                        got = os.pread(fd, n, o)
                        want = sl.ref_bytes(path, off + o, max(0, min(n, size - o)))
                        check('%s pread(%d, %d)' % (p, n, o), got, want)
                        res['reads'] += 1
                finally:
                    os.close(fd)
            elif op == 'rawwhole':
                rel, path, off, size = rng.choice(raws)
                p = os.path.join(root, rel)
                fd = open_ro(p)
                try:
                    got = read_to_eof(fd)
                finally:
                    os.close(fd)
                check(p, got, sl.ref_bytes(path, 0, size))
                res['reads'] += 1
            else:
                d = rng.choice(sorted(dirs))
                n = len(os.listdir(os.path.join(root, d)))
                if n != dirs[d]:
                    bad('wrong', '%s: %d entries, expected %d' % (os.path.join(root, d), n,
                                                                 dirs[d]))
                os.stat(os.path.join(root, d + '.tar'))
        except OSError as e:
            bad('errors', '%s %s: %s (at %s)' % (op, getattr(e, 'filename', ''), e,
                                                  time.strftime('%H:%M:%S')))
    for f in fails:
        print('FAIL ' + f, flush=True)
    print('RESULT ' + json.dumps(res), flush=True)
    return 1 if fails else 0


if len(sys.argv) == 3 and sys.argv[1] == '--reader':
    sys.exit(reader_main(sys.argv[2]))


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------

def soak_sizes(rng, s):
    """30 samples: 2 of 1-2 MiB, the rest 0..64K."""
    out = [rng.randrange(MiB, 2 * MiB) for _ in range(2)]
    out += [rng.randrange(0, 64 << 10) for _ in range(28)]
    rng.shuffle(out)
    return out


def build_soak(env):
    src = env.path('src')
    cat = sl.make_dataset(src, env.rng, 12, soak_sizes, subdir='train')
    cat += sl.make_dataset(src, env.rng, 4, soak_sizes, subdir='val', prefix='val')
    sl.chmod_tree(env.tmp)
    dirs = {}
    for rel, _, _, _ in cat:
        if not rel.endswith('.tar'):
            d = os.path.dirname(rel)
            dirs[d] = dirs.get(d, 0) + 1
    total = sum(c[3] for c in cat if c[0].endswith('.tar'))
    log('dataset: %d shards, %d members, %d bytes' % (len(dirs), len(cat) - len(dirs), total))
    return src, cat, dirs


class Daemon:
    def __init__(self, label, m):
        self.label = label
        self.m = m
        self.pid = sl.daemon_pid(m)
        self.samples = []

    def sample(self, t):
        s = (round(t, 1), sl.fd_count(self.pid), sl.rss_kib(self.pid), sl.threads(self.pid),
             sl.mem_kib(self.pid))
        self.samples.append(s)
        return s

    def fd_bound(self, threads):
        """The most descriptors the daemon may hold once every file is closed: the first
        sample's, plus slack, plus a few per thread started since."""
        fd0, thr0 = self.samples[0][1], self.samples[0][3]
        return fd0 + (8 if self.label == 'local' else 16) + FDS_PER_THREAD * max(0, threads - thr0)


def soak_seconds(san):
    v = os.environ.get('SHARDFS_SOAK_SECONDS')
    if v:
        return max(5, int(float(v)))
    return 40 if san else 120


def group_soak(env, ck):
    san = sl.sanitized(env.shardfs)
    seconds = soak_seconds(san)
    src, cat, dirs = build_soak(env)
    ng = None
    daemons = []
    mounts = []
    try:
        local = ml.Mount(env, src, cache_dir=env.path('cache'),
                         extra=['--log-file', env.path('daemon.log')])
        local.mount()
        mounts.append(local)
        daemons.append(Daemon('local', local))
        if os.path.exists(web.NGINX):
            ng = web.Nginx(env.path('nginx'), src).start()
            hm = ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache-http'),
                          extra=['--chunk-size', '1M', '--cache-size', '16M', '--readahead', '4M',
                                 '--connections', '8', '--retry-budget', '120',
                                 '--log-file', env.path('daemon-http.log')])
            hm.mount()
            mounts.append(hm)
            daemons.append(Daemon('http', hm))
        else:
            log('nginx not installed: soaking the local mount only')
        # warm-up, part 1: every shard of every mount touched (indexed, its descriptor and
        # connections open) before the timed run; part 2: the first seconds of the run
        t = time.monotonic()
        for m in mounts:
            for rel, path, off, size in cat:
                if rel.endswith('.tar'):
                    ml.read_all(os.path.join(m.mnt, rel))
                    os.listdir(os.path.join(m.mnt, sl.shard_dir(rel)))
        log('soak: warm-up pass over every shard in %.1fs' % (time.monotonic() - t))
        warm = max(10.0, min(20.0, seconds / 6.0))
        log('soak: %d readers for %ds (warm-up %.0fs)%s over %s' % (
            READERS, seconds, warm, ' [%s build]' % san if san else '',
            ', '.join(d.label for d in daemons)))
        items = [list(c) for c in cat]
        t0 = time.time()
        deadline = t0 + seconds
        procs = []
        for i in range(READERS):
            man = dict(seed=env.seed * 1000 + i, mounts=[m.mnt for m in mounts], items=items,
                       dirs=dirs, deadline=deadline)
            mp = env.path('reader-%d.json' % i)
            with open(mp, 'w') as f:
                json.dump(man, f)
            out = open(env.path('reader-%d.out' % i), 'wb')
            procs.append((subprocess.Popen([sys.executable, os.path.abspath(__file__),
                                            '--reader', mp], stdin=subprocess.DEVNULL,
                                           stdout=out, stderr=subprocess.STDOUT, env=env.env),
                          out))
        # samples: after the warm-up, every 10 s, and at the end
        next_t = warm
        last_tick, max_gap = time.time(), 0.0
        while any(p.poll() is None for p, _ in procs):
            now = time.time() - t0
            max_gap = max(max_gap, time.time() - last_tick)
            last_tick = time.time()
            if now >= next_t:
                for d in daemons:
                    s = d.sample(now)
                    log('  t=%5.1fs %-5s fds=%d threads=%d rss_kib=%d (anon %s, file %s)' % (
                        s[0], d.label, s[1], s[3], s[2], s[4].get('RssAnon'),
                        s[4].get('RssFile')))
                next_t += 10.0
            time.sleep(0.2)
        elapsed = time.time() - t0
        tot = dict(reads=0, bytes=0, errors=0, wrong=0)
        ops = {}
        for i, (p, out) in enumerate(procs):
            out.close()
            with open(env.path('reader-%d.out' % i), errors='replace') as f:
                text = f.read()
            res = None
            for line in text.splitlines():
                if line.startswith('RESULT '):
                    res = json.loads(line[7:])
            ck.ok(p.returncode == 0 and res is not None,
                  'soak reader %d failed (rc=%s):\n%s' % (i, p.returncode, text[-3000:]))
            if res:
                # every reader took part in the interleaving, not only some of them
                ck.ok(res['reads'] >= 1, 'soak reader %d made no read' % i)
                for k in tot:
                    tot[k] += res[k]
                for k in ('direct', 'dropped'):
                    ops[k] = ops.get(k, 0) + res[k]
                for k, v in res['ops'].items():
                    ops[k] = ops.get(k, 0) + v
        if max_gap > 5:
            log('soak: NOTE: this process was not scheduled for %.1fs at a time (an overloaded '
                'machine): retries and timeouts in the daemons may have run out' % max_gap)
        log('soak: operations (direct: opened O_DIRECT, dropped: page cache dropped first) %s' % ', '.join('%s=%d' % kv for kv in sorted(ops.items())))
        # the end sample: readers done, every file closed; the kernel hands the daemons the
        # releases asynchronously, so wait (within a deadline) for the bound checked below
        for d in daemons:
            if d.samples:
                ml.poll(lambda: sl.fd_count(d.pid) <= d.fd_bound(sl.threads(d.pid)))
            d.sample(time.time() - t0)
        # the daemons still answer, and answer right
        for m, d in zip(mounts, daemons):
            ck.ok(ml.pid_alive(d.pid), 'soak %s: the daemon %d died' % (d.label, d.pid))
            try:
                st = m.stats()
                ck.eq('soak %s: read_errors' % d.label, st['read_errors'], 0)
                log('soak %s: stats: reads %d, read_bytes %d, cache hits %d, misses %d, fills %d,'
                    ' evictions %d' % (d.label, st['reads'], st['read_bytes'], st['cache_hits'],
                                       st['cache_misses'], st['fills'], st['evictions']))
                ck.eq('soak %s: top-level entries' % d.label, sorted(os.listdir(m.mnt)),
                      ['train', 'val'])
                rel, path, off, size = cat[len(cat) // 2]
                ck.ok(ml.read_all(os.path.join(m.mnt, rel)) == sl.ref_bytes(path, off, size),
                      'soak %s: %s reads wrong after the soak' % (d.label, rel))
            except (OSError, ValueError) as e:
                ck.fail('soak %s: the mount does not answer after the soak: %s' % (d.label, e))
        ck.eq('soak: wrong bytes', tot['wrong'], 0)
        ck.eq('soak: errors', tot['errors'], 0)
        ck.ok(tot['reads'] > READERS, 'soak: only %d reads' % tot['reads'])
        # every kind of operation the soak mixes happened at least once
        kinds = ('whole', 'mpread', 'raw', 'listdir', 'rawwhole', 'direct', 'dropped')
        ck.eq('soak: kinds of operation that never ran',
              [k for k in kinds if not ops.get(k)], [])
        # resources: first sample after the warm-up vs the end
        quarantine = 0
        if san == 'asan':
            # freed memory stays in ASan's quarantine (256 MiB by default) before reuse
            q = [o.split('=', 1)[1] for o in os.environ.get('ASAN_OPTIONS', '').split(':')
                 if o.startswith('quarantine_size_mb=')]
            # plus the per-thread quarantine caches and the allocator's own growth: the bound
            # only guards against runaway growth here; ASan's leak check finds real leaks
            quarantine = int((int(q[-1]) if q else 256) * 1024 * 1.25) + 64 * 1024
        lines = []
        for d in daemons:
            if len(d.samples) < 2:
                ck.fail('soak %s: too few samples (%d)' % (d.label, len(d.samples)))
                continue
            (_, fd0, rss0, thr0, _), (_, fd1, rss1, thr1, _) = d.samples[0], d.samples[-1]
            peak_fd = max(s[1] for s in d.samples)
            slack = d.fd_bound(thr1) - fd0
            ck.ok(fd1 <= fd0 + slack, 'soak %s: fds grew from %d to %d (slack %d; threads %d -> '
                  '%d): %r' % (d.label, fd0, fd1, slack, thr0, thr1, sl.fd_kinds(d.pid)))
            ck.ok(peak_fd <= fd0 + 64, 'soak %s: fds peaked at %d (start %d)' % (
                d.label, peak_fd, fd0))
            ck.ok(max(s[3] for s in d.samples) <= 64, 'soak %s: %d threads' % (
                d.label, max(s[3] for s in d.samples)))
            limit = int(rss0 * 1.5) + 16 * 1024 + quarantine
            ck.ok(rss1 <= limit, 'soak %s: RSS grew from %d KiB to %d KiB (limit %d KiB)' % (
                d.label, rss0, rss1, limit))
            lines.append((d.label, fd0, fd1, rss0, rss1, peak_fd,
                          max(s[2] for s in d.samples)))
        for i, (label, fd0, fd1, rss0, rss1, pfd, prss) in enumerate(lines):
            if i == 0:
                log('soak: seconds=%d readers=%d reads=%d bytes=%d errors=%d fds start/end=%d/%d '
                    'rss_kib start/end=%d/%d' % (round(elapsed), READERS, tot['reads'],
                                                 tot['bytes'], tot['errors'] + tot['wrong'],
                                                 fd0, fd1, rss0, rss1))
            log('soak %s daemon: fds start/end/peak=%d/%d/%d rss_kib start/end/peak=%d/%d/%d' % (
                label, fd0, fd1, pfd, rss0, rss1, prss))
    finally:
        for m in mounts:
            m.umount()
        if ng:
            ng.stop()
            if ck.failures:
                odd = [r for r in ng.requests() if not any(' %d ' % c in r for c in (200, 206))]
                log('nginx: %d requests, %d not 200/206:\n%s' % (
                    len(ng.requests()), len(odd), '\n'.join(odd[-20:])))
                try:
                    with open(os.path.join(ng.prefix, 'error.log'), errors='replace') as f:
                        log('nginx error.log (tail):\n' + f.read()[-3000:])
                except OSError:
                    pass


# ---------------------------------------------------------------------------------------------
# many files open at once
# ---------------------------------------------------------------------------------------------

def open_many(ck, env, label, m, cat, n_members=500, n_raw=100):
    pid = sl.daemon_pid(m)
    members = [c for c in cat if not c[0].endswith('.tar')]
    raws = [c for c in cat if c[0].endswith('.tar')]
    chosen = env.rng.sample(members, n_members)
    # warm-up: every shard indexed, its descriptors and connections open, before the baseline
    for rel, path, off, size in raws:
        ml.read_all(os.path.join(m.mnt, rel))
    for rel, path, off, size in chosen[:50]:
        ml.read_all(os.path.join(m.mnt, rel))
    fd_before, thr_before = sl.settled(lambda: sl.fd_count(pid)), sl.threads(pid)
    fds = []
    t = time.monotonic()
    try:
        for rel, path, off, size in chosen:
            fds.append((os.open(os.path.join(m.mnt, rel), os.O_RDONLY), rel, path, off, size))
        raw_fds = [(os.open(os.path.join(m.mnt, r[0]), os.O_RDONLY), r)
                   for r in (raws * n_raw)[:n_raw]]
        fd_open = sl.fd_count(pid)
        # read every member in pieces, round robin over all the open descriptors
        got = [[] for _ in fds]
        pos = [0] * len(fds)
        live = set(range(len(fds)))
        while live:
            for i in sorted(live):
                b = os.read(fds[i][0], env.rng.choice((512, 4096, 16384, 65536)))
                if not b:
                    live.discard(i)
                else:
                    got[i].append(b)
                    pos[i] += len(b)
            # and a random range of a raw shard through each of a few raw descriptors
            for fd, (rel, path, off, size) in env.rng.sample(raw_fds, 5):
                o = env.rng.randrange(size)
                n = env.rng.choice((100, 4096, 300000))
                ck.ok(os.pread(fd, n, o) == sl.ref_bytes(path, o, min(n, size - o)),
                      '%s: pread(%d, %d) of %s through one of %d open descriptors' % (
                          label, n, o, rel, n_raw))
        for (fd, rel, path, off, size), g in zip(fds, got):
            ck.ok(b''.join(g) == sl.ref_bytes(path, off, size),
                  '%s: %s read wrong while %d files were open' % (label, rel, len(fds)))
        for fd, r in raw_fds:
            os.close(fd)
    finally:
        for f in fds:
            os.close(f[0])

    def allowed_now():
        return fd_before + 8 + FDS_PER_THREAD * max(0, sl.threads(pid) - thr_before)

    # the releases of the closes reach the daemon asynchronously: wait for them (a deadline)
    ml.poll(lambda: sl.fd_count(pid) <= allowed_now())
    fd_after, thr_after = sl.fd_count(pid), sl.threads(pid)
    log('%s: %d members + %d raw shards open at once, read in %.1fs; daemon fds before %d, '
        'while open %d, after %d; threads before %d, after %d' % (
            label, len(chosen), n_raw, time.monotonic() - t, fd_before, fd_open, fd_after,
            thr_before, thr_after))
    allowed = fd_before + 8 + FDS_PER_THREAD * max(0, thr_after - thr_before)
    ck.ok(fd_after <= allowed, '%s: daemon fds %d after closing everything, %d before, '
          'threads %d -> %d (allowed %d): %r' % (label, fd_after, fd_before, thr_before,
                                                 thr_after, allowed, sl.fd_kinds(pid)))
    ck.ok(ml.pid_alive(pid), '%s: the daemon died' % label)


def group_openmany(env, ck):
    limit = sl.raise_nofile(4096)
    if limit < 700:
        raise ml.Skip('RLIMIT_NOFILE is %d, need 700' % limit, 'host')

    def sizes(rng, s):
        return [rng.randrange(0, 24 << 10) for _ in range(100)] + [rng.randrange(MiB, 3 * MiB)]

    src = env.path('src')
    cat = sl.make_dataset(src, env.rng, 4, sizes)
    sl.chmod_tree(env.tmp)
    for label, extra in (('openmany local', []), ('openmany local --strict-open',
                                                  ['--strict-open'])):
        with ml.Mount(env, src, cache_dir=env.path('cache'), extra=extra) as m:
            open_many(ck, env, label, m, cat)
    if os.path.exists(web.NGINX):
        ng = web.Nginx(env.path('nginx'), src).start()
        try:
            with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache-http'),
                          extra=['--chunk-size', '1M', '--cache-size', '4M']) as m:
                open_many(ck, env, 'openmany http', m, cat)
        finally:
            ng.stop()
    else:
        log('nginx not installed: no http part')


LOGS = ('daemon.log', 'daemon-http.log')
GROUPS = {'soak': sl.with_log_tail(group_soak, LOGS),
          'openmany': sl.with_log_tail(group_openmany, LOGS)}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in GROUPS:
        print(__doc__)
        return 2
    group = sys.argv[2]
    deadline = 300
    if group == 'soak':
        deadline = soak_seconds(sl.sanitized(sys.argv[1])) + 300
    ml.main_wrapper(GROUPS[group], sys.argv[1], 'stress-' + group, deadline=deadline)


if __name__ == '__main__':
    sys.exit(main())
