#!/usr/bin/env python3
"""How many times a FUSE read takes the cache tier's ct->lock, planned reads apart.

Usage (root, perf installed; from a clone with meson build directories):
    python3 tests/bench/ctlock_count.py build [build-base] [--test mount-plan-coalesce]

For each build directory given (this tree's, then a baseline's, in one invocation) it puts
uprobes on that build's shardfs binary (group shardfs_ctlock_PID: disk_mutex_lock and the
condition waits with the lock's rank, ll_read, fs_plan__use_read), runs the mount test under
`perf record --call-graph dwarf` (the test's daemon inherits the events), removes the probes,
and counts per FUSE read (ll_read) the takes of a mutex of rank DISK_LOCK_CT (62, ct->lock)
whose call chain is inside that read. A read is planned when fs_plan__use_read ran inside it.
Prints reads, takes, takes per read, their distribution and the functions that took it.
Takes by other threads on the read's behalf (fill workers, the fill writer) are not counted:
this is what the reading thread itself pays.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

CT_RANK = '62'  # DISK_LOCK_CT in disk/disk_lock.h
GROUP = 'shardfs_ctlock_%d' % os.getpid()  # its own: two runs at once keep their probes
PROBES = [('lock', 'disk_mutex_lock l->rank'), ('wait', 'disk_cond_wait l->rank'),
          ('twait', 'disk_cond_timedwait l->rank'), ('read', 'll_read'),
          ('planned', 'fs_plan__use_read')]
HDR = re.compile(r'^\s*\S.*?\s+(\d+)\s+\[\d+\]\s+[\d.]+:\s+' + GROUP +
                 r':(\w+):.*?(?:rank=(-?\d+))?\s*$')


def probes(binary, add):
    for name, spec in PROBES:
        if add:
            subprocess.run(['perf', 'probe', '-q', '-x', binary, '-a',
                            '%s:%s=%s' % (GROUP, name, spec)], check=True)
        else:
            subprocess.run(['perf', 'probe', '-q', '-d', '%s:%s' % (GROUP, name)], check=False)


def count(script):
    cur, reads, ev = {}, [], None

    def flush(ev):
        if not ev:
            return
        tid, name, rank, stack = ev
        if name == 'read':
            cur[tid] = {'planned': 0, 'lock': 0, 'wait': 0, 'sites': collections.Counter()}
            reads.append(cur[tid])
            return
        if tid not in cur or not any(re.search(r'\sll_read\+', s) for s in stack):
            return
        r = cur[tid]
        if name == 'planned':
            r['planned'] = 1
        elif rank == CT_RANK and name == 'lock':
            r['lock'] += 1
            fr = [s.split()[1].split('+')[0] for s in stack if len(s.split()) > 1]
            fr = [f for f in fr if f not in ('disk_mutex_lock', 'cachetier__lock')]
            r['sites'][fr[0] if fr else '?'] += 1
        elif rank == CT_RANK:
            r['wait'] += 1  # a condition wait takes the lock again when it returns

    for line in script.splitlines():
        m = HDR.match(line)
        if m:
            flush(ev)
            ev = (m.group(1), m.group(2), m.group(3), [])
        elif line.strip() and ev:
            ev[3].append(' ' + line.strip())
    flush(ev)
    return reads


def measure(build, test):
    binary = os.path.join(os.path.abspath(build), 'shardfs')
    probes(binary, False)
    probes(binary, True)
    try:
        with tempfile.TemporaryDirectory(prefix='ctlock-') as d:
            data = os.path.join(d, 'perf.data')
            subprocess.run(['perf', 'record', '-q', '--call-graph', 'dwarf,16384', '-o', data,
                            '-e', GROUP + ':*', '--', 'meson', 'test', '-C', build,
                            '--num-processes', '1', test], check=True,
                           stdout=subprocess.DEVNULL)
            out = subprocess.run(['perf', 'script', '-i', data], check=True,
                                 capture_output=True, text=True).stdout
    finally:
        probes(binary, False)
    return count(out)


def main():
    args, test = sys.argv[1:], 'mount-plan-coalesce'
    if '--test' in args:
        i = args.index('--test')
        test = args[i + 1]
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    for build in args:
        reads = measure(build, test)
        if not reads:
            sys.exit('%s %s: perf recorded no FUSE read (is perf probe allowed: root, uprobes, '
                     'the build with debug info?)' % (build, test))
        for kind, label in ((1, 'planned'), (0, 'unplanned')):
            rs = [r for r in reads if r['planned'] == kind]
            if not rs:
                continue
            takes = sum(r['lock'] for r in rs)
            sites = collections.Counter()
            for r in rs:
                sites.update(r['sites'])
            print('%s %s: %d %s reads, ct->lock taken %d times (%.2f a read; after a condition '
                  'wait again: %d), per read %s' % (
                      build, test, len(rs), label, takes, takes / len(rs),
                      sum(r['wait'] for r in rs),
                      sorted(collections.Counter(r['lock'] for r in rs).items())))
            print('    by: ' + ', '.join('%s %d' % s for s in sites.most_common()))


if __name__ == '__main__':
    main()
