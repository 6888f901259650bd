#!/usr/bin/python3
"""A/B of row L4 between builds: `shardfs prefetch` of link_bench.py's data set through a fresh
mount (`--warm off`, as link_bench.py's prefetch row mounts) over the C link emulator (30 ms
before each response, 60 MB/s per connection), the builds alternated round by round (round 1
in the order given, round 2 reversed, ...) in one invocation, so the load of a shared machine
hits every build alike.

    /usr/bin/python3 tests/bench/ab_prefetch.py [--rounds 10] [--size-mb 512] [--curl]
        [--perf DIR | --strace DIR | --trace DIR] [--mount-opts "..."] NAME=BIN [NAME=BIN ...]

BIN: shardfs binaries (release builds; compare.sh makes build-bench-REV/shardfs); a side may
add mount options of its own after its BIN, in the same argument: 'on=build-bench/shardfs
--direct-fills prefetch' (one binary, two sides). For each
prefetch: the daemon's CPU per GB filled from its threads' schedstat run time (exact, not 10 ms
ticks), by thread name (shardfs-io, the store's I/O loop; shardfs-write, the fill writer;
shardfs, the main and FUSE threads), its context switches and minor page faults per GB, the
fill transfers paused and resumed (store_pauses/store_resumes), the lean engine's body receives
per GB (store_recvs, '-' for a build without it), the fill buffers' pool's 2 MiB mappings (fresh memory:
cache_fill_pool_maps, '-' for a build without it), the wall time and the load average (1 min), and the memory this VM's free page reporting gave back
to the host during it (the change of /sys/module/page_reporting/parameters/reported_kib, '-'
where there is none: tests/bench/README.md, "Why L4 alternates at 1 GB"). --curl adds
a side: curl of each shard to a file, 8 at a time, its CPU (rusage) per GB written (L4's
ratio). --perf DIR: `perf record -g -F 4999` of the daemon over each prefetch, into
DIR/NAME-rROUND.data (perf starts 1.5 s before; its cost is in the figures: compare profiles,
not CPU, of such runs); --strace DIR: `strace -c -f` of the daemon over each prefetch the same
way (it slows every thread: counts, not times); --trace DIR: `perf trace -s` the same way (the
system calls counted by thread). Each run's wake-ups per GB by thread are its threads'
voluntary context switches (a thread's sleeps: the I/O loop's epoll_wait, the writer's
sem_wait). Prints every run, then each side's medians
(min-max). Root (mounts), the data set of link_bench.py (made there if missing).
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import link_bench as lb  # noqa: E402


def thread_cpu_ns(pid):
    """{thread name: ns on a CPU} of a process's threads now, summed by name."""
    d = {}
    for t in os.listdir('/proc/%d/task' % pid):
        try:
            with open('/proc/%d/task/%s/comm' % (pid, t)) as f:
                name = f.read().strip()
            with open('/proc/%d/task/%s/schedstat' % (pid, t)) as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue
        d[name] = d.get(name, 0) + ns
    return d


def recorder(a0, name, r, pid):
    """perf record or strace -c of pid, per --perf / --strace; the Popen, or None."""
    if a0.perf:
        os.makedirs(a0.perf, exist_ok=True)
        cmd = ['perf', 'record', '-q', '-F', '4999', '-g', '-p', str(pid), '-o',
               os.path.join(a0.perf, '%s-r%d.data' % (name, r))]
    elif a0.strace:
        os.makedirs(a0.strace, exist_ok=True)
        cmd = ['strace', '-c', '-f', '-p', str(pid), '-o',
               os.path.join(a0.strace, '%s-r%d.txt' % (name, r))]
    elif a0.trace:
        os.makedirs(a0.trace, exist_ok=True)
        cmd = ['perf', 'trace', '-s', '-p', str(pid), '-o',
               os.path.join(a0.trace, '%s-r%d.txt' % (name, r))]
    else:
        return None
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)  # attached before the prefetch starts
    return p


def one_prefetch(a, a0, emu, name, r, opts=()):
    m = lb.Mount(a, emu.url(a.brace), ('--warm', 'off', *opts))
    try:
        rec = recorder(a0, name, r, m.pid)
        c0, w0, f0 = thread_cpu_ns(m.pid), lb.thread_switches(m.pid), lb.proc_minflt(m.pid)
        k0 = lb.reported_kib()
        t = time.monotonic()
        lb.sh([a.bin, 'prefetch', m.mnt], stdout=subprocess.DEVNULL, timeout=600)
        secs = time.monotonic() - t
        k1 = lb.reported_kib()
        if rec:
            rec.send_signal(signal.SIGINT)
            rec.wait(60)
        c1, w1, f1 = thread_cpu_ns(m.pid), lb.thread_switches(m.pid), lb.proc_minflt(m.pid)
        fetched = int(m.stat('bytes_fetched'))
        pauses = '%s/%s' % (m.stat_or('store_pauses', '-'), m.stat_or('store_resumes', '-'))
        maps = m.stat_or('cache_fill_pool_maps', '-')
        recvs = m.stat_or('store_recvs', None)
    finally:
        m.umount()
    if fetched != a.total:
        raise RuntimeError('%s: fetched %d of %d bytes' % (name, fetched, a.total))
    gb = fetched / 1e9
    per = {k: (c1[k] - c0.get(k, 0)) / 1e9 / gb for k in c1}
    sw = sum(sum(w1[k]) - sum(w0.get(k, [0, 0])) for k in w1) / gb
    # voluntary switches by thread: its sleeps, so its wake-ups (the I/O loop's epoll_wait,
    # the writer's sem_wait)
    wk = {k: (w1[k][0] - w0.get(k, [0, 0])[0]) / gb for k in w1}
    return dict(cpu=sum(per.values()), per=per, sw=sw, wk=wk, flt=(f1 - f0) / gb, secs=secs,
                pauses=pauses, maps=maps, load=os.getloadavg()[0],
                recvs='%.0f' % (int(recvs) / gb) if recvs is not None else '-',
                rep='%d MiB' % ((k1 - k0) // 1024) if k0 is not None and k1 is not None else '-')


def one_curl(a, emu):
    dl = os.path.join(a.w, 'dl')
    shutil.rmtree(dl, ignore_errors=True)
    os.makedirs(dl)
    jobs = [['curl', '-s', '--fail', '-o', os.path.join(dl, nm), emu.url(nm)] for nm in a.names]
    secs, cpu = lb.curl_pool(jobs, len(jobs))
    shutil.rmtree(dl)
    return dict(cpu=cpu / (a.total / 1e9), per={}, sw=0, wk={}, flt=0, secs=secs, pauses='-', maps='-',
                load=os.getloadavg()[0], recvs='-', rep='-')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--rounds', type=int, default=10)
    ap.add_argument('--size-mb', type=int, default=512)
    ap.add_argument('--curl', action='store_true')
    ap.add_argument('--perf', metavar='DIR')
    ap.add_argument('--strace', metavar='DIR')
    ap.add_argument('--trace', metavar='DIR')
    ap.add_argument('--mount-opts', default='')
    ap.add_argument('--emu', help='the link emulator (default: tests/linkemu next to the '
                    'first BIN)')
    ap.add_argument('sides', nargs='+', metavar='NAME=BIN')
    a0 = ap.parse_args()
    sides = []
    for s in a0.sides:
        if '=' not in s:
            ap.error('NAME=BIN: %s' % s)
        name, b = s.split('=', 1)
        b, *opts = b.split()
        sides.append((name, os.path.abspath(b), opts))
    if a0.curl:
        sides.append(('curl', None, []))
    a = argparse.Namespace(shards=8, shard_mb=a0.size_mb // 8, perf=None, epoch_hook=None,
                           mount_opts=a0.mount_opts.split(), bin=sides[0][1])
    lb.MOUNT_OPTS[:] = a.mount_opts
    a.data = '/var/tmp/shardfs-linkbench-%d' % (a.shards * a.shard_mb)
    emu_exe = a0.emu or os.path.join(os.path.dirname(sides[0][1]), 'tests', 'linkemu')
    a.w = tempfile.mkdtemp(prefix='shardfs-ab-prefetch-', dir='/var/tmp')
    emu = None
    res = {n: [] for n, _, _ in sides}
    try:
        a.shard_dir, a.names = lb.make_dataset(a)
        a.sizes = {n: os.path.getsize(os.path.join(a.shard_dir, n)) for n in a.names}
        a.total = sum(a.sizes.values())
        a.brace = lb.brace(a.names)
        for n in a.names:  # the store's files warm in the page cache
            lb.sh(['cat', os.path.join(a.shard_dir, n)], stdout=subprocess.DEVNULL)
        emu = lb.Emu(a.shard_dir, 30, 60, a.w, 'main', exe=emu_exe)
        print('ab_prefetch: %d MB in %d shards, emulator %s at 30 ms and 60 MB/s, %d rounds' % (
            a.total // 1000000, len(a.names), emu_exe, a0.rounds), flush=True)
        for r in range(a0.rounds):
            for name, b, opts in (sides if r % 2 == 0 else sides[::-1]):
                lb.settle()
                if b is None:
                    x = one_curl(a, emu)
                else:
                    a.bin = b
                    x = one_prefetch(a, a0, emu, name, r, opts)
                res[name].append(x)
                print('r%d %-10s %.3f CPU-s/GB %.2f s, switches/GB %.0f, faults/GB %.0f, '
                      'pauses/resumes %s, pool maps %s, body receives/GB %s, reported %s, '
                      'load %.1f  %s' % (
                          r, name, x['cpu'], x['secs'], x['sw'], x['flt'], x['pauses'],
                          x['maps'], x['recvs'], x['rep'], x['load'], ' '.join('%s=%.3f' % (k, v) for k, v in
                                              sorted(x['per'].items()) if v >= 0.001)),
                      flush=True)
                if x['wk']:
                    print('   wake-ups/GB %s' % ' '.join('%s=%.0f' % (k, v) for k, v in
                                                        sorted(x['wk'].items()) if v >= 1),
                          flush=True)
    finally:
        if emu is not None:
            lb.stop_emu(emu)
        if lb.mounted(os.path.join(a.w, 'mnt')):
            lb.unmount(a.bin or 'shardfs', os.path.join(a.w, 'mnt'))
        shutil.rmtree(a.w, ignore_errors=True)
    med = statistics.median
    print('medians (min-max) over %d rounds:' % a0.rounds)
    for name, _, _ in sides:
        xs = res[name]
        if not xs:
            continue
        c = [x['cpu'] for x in xs]
        ks = sorted({k for x in xs for k in x['per']})
        print('%-10s %.3f (%.3f-%.3f) CPU-s/GB, %.2f s, switches/GB %.0f, faults/GB %.0f  %s' % (
            name, med(c), min(c), max(c), med([x['secs'] for x in xs]),
            med([x['sw'] for x in xs]), med([x['flt'] for x in xs]),
            ' '.join('%s=%.3f' % (k, med([x['per'].get(k, 0) for x in xs])) for k in ks
                     if med([x['per'].get(k, 0) for x in xs]) >= 0.001)))
        ks = sorted({k for x in xs for k in x['wk']})
        if ks:
            print('%-10s wake-ups/GB (voluntary switches by thread), median: %s' % (
                name, ' '.join('%s=%.0f' % (k, med([x['wk'].get(k, 0) for x in xs])) for k in ks
                               if med([x['wk'].get(k, 0) for x in xs]) >= 1)))


if __name__ == '__main__':
    main()
