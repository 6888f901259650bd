"""The daemon's CPU term by term, from a call-graph profile of one epoch.

    python3 perf_terms.py PERF.DATA [PERF.DATA...]

PERF.DATA: `perf record -g -p DAEMON` over the epoch (or a prefetch: ab_prefetch.py --perf) (link_bench.py's --perf profiles are
flat: record one by hand, or the daemon-profile section of README.md says how). Each sample
goes to its thread (the FUSE threads `shardfs`, the I/O loop `shardfs-io`, the others by
name) and to the first term below whose function is anywhere in its call chain; samples in
no term are "other" (user space: the leaf is not the kernel's). Prints each term's share of
all the daemon's samples, one column per file. Shares only: the sampling is a clock's, not
an exact count.
"""
import collections
import subprocess
import sys

# (thread, term, functions): the first match in the chain wins, in this order
TERMS = [
    ('shardfs-io', 'page faults (fresh buffers under recv)', ('asm_exc_page_fault',)),
    ('shardfs-io', 'recv: the copy to user, its checks', ('_copy_to_iter',
                                                          '__check_object_size')),
    ('shardfs-io', 'recv: the rest (TCP)', ('tcp_recvmsg', '__sys_recvfrom')),
    ('shardfs-io', 'sendto (the request; loopback delivery)', ('__sys_sendto',)),
    ('shardfs-io', 'setsockopt', ('__sys_setsockopt',)),
    ('shardfs-io', 'epoll_wait, switches', ('do_epoll_wait', '__schedule')),
    ('shardfs-io', 'softirqs (pacing timers, loopback)', ('handle_softirqs',)),
    ('shardfs-io', 'futex (the writer\'s sem_post)', ('__x64_sys_futex',)),
    ('shardfs-io', 'epoll_ctl (pauses, resumes)', ('__x64_sys_epoll_ctl',)),
    ('shardfs-write', 'page faults', ('asm_exc_page_fault',)),
    ('shardfs-write', 'pwritev: the copy into the page cache', ('copy_folio_from_iter_atomic',)),
    ('shardfs-write', 'pwritev: ext4\'s write_begin (delayed allocation, buffer heads)',
     ('ext4_da_write_begin',)),
    ('shardfs-write', 'pwritev: the rest', ('__x64_sys_pwritev', '__x64_sys_pwrite64')),
    ('shardfs-write', 'CRC32C', ('crc_vpclmul', 'crc_sse42x3', 'crc_sse42', 'crc_table')),
    ('shardfs-write', 'fcntl (unit locks)', ('__x64_sys_fcntl',)),
    ('shardfs-write', 'futex, switches (sem_wait, locks)', ('__x64_sys_futex', '__schedule')),
    ('shardfs-write', 'softirqs', ('handle_softirqs',)),
    ('shardfs', 'reply writev: the copy', ('fuse_copy_do',)),
    ('shardfs', 'reply writev: per-page fill (pin, request lock)', ('fuse_copy_fill',)),
    ('shardfs', 'reply writev: the rest (the reader\'s wake-up)', ('fuse_dev_write',)),
    ('shardfs', 'reply splice (reads from the cache)', ('__x64_sys_splice',
                                                        '__x64_sys_vmsplice')),
    ('shardfs', 'read of /dev/fuse (wait, switch)', ('fuse_dev_read',)),
    ('shardfs', 'page faults', ('asm_exc_page_fault',)),
    ('shardfs', 'softirqs', ('handle_softirqs',)),
    ('shardfs', 'stage_pick', ('stage_pick',)),
]


def terms(path):
    out = subprocess.run(['perf', 'script', '-i', path, '-F', 'comm,ip,sym'],
                         capture_output=True, text=True, check=True).stdout
    cnt = collections.Counter()
    total = 0
    for block in out.split('\n\n'):
        lines = [ln.split() for ln in block.strip().split('\n') if ln.strip()]
        if not lines:
            continue
        comm = lines[0][0]
        frames = lines[1:]
        syms = [f[1] for f in frames if len(f) > 1]
        total += 1
        term = None
        for th, name, funcs in TERMS:
            if th == comm and any(s.split('+')[0] in funcs for s in syms):
                term = name
                break
        if term is None:
            kernel = bool(frames) and frames[0][0].startswith('ffff')
            term = 'other, kernel' if kernel else 'other, user space'
        cnt[(comm, term)] += 1
    return cnt, total


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    res = [terms(p) for p in sys.argv[1:]]
    keys = sorted({k for c, _ in res for k in c}, key=lambda k: (k[0], -res[0][0][k]))
    threads = sorted({k[0] for k in keys}, key=lambda t: -sum(res[0][0][k] for k in keys
                                                               if k[0] == t))
    print('%-58s %s' % ('samples', ' '.join('%8d' % t for _, t in res)))
    for th in threads:
        print('%-58s %s' % (th, ' '.join('%7.1f%%' % (100.0 * sum(
            c[k] for k in keys if k[0] == th) / max(t, 1)) for c, t in res)))
        for k in keys:
            if k[0] == th:
                print('    %-54s %s' % (k[1], ' '.join('%7.1f%%' % (100.0 * c[k] / max(t, 1))
                                                      for c, t in res)))


if __name__ == '__main__':
    main()
