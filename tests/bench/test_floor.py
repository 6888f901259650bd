"""The floor tools of rows L4 floor and L8g floor (tests/bench/splice_bench.c's recv mode,
tests/bench/floor_bench.c) against the C link emulator on seeded files: exact counts, never
timings.

usage: test_floor.py SHARDFS SPLICE_BENCH FLOOR_BENCH

splice_bench recv fetches three files (9 MiB + 123 bytes: two 8 MiB requests; 300,001 bytes;
1 byte): its file holds exactly their bytes in order, it says the bytes and requests it asked
for, and the emulator counted exactly those requests and body bytes; the same for its falloc,
big2 and direct2 modes (direct2's file: each file at a 4 KiB boundary, zeros between). floor_bench serves 300
seeded ranges (offsets and lengths of every size, the files' first and last bytes) over 4
connections: it says exactly the bytes asked and 300 requests, no mismatch, and the emulator
counted the same. Then its checks must fail where they should: a range past a file's end (the
emulator's answer is shorter than asked) exits 1, and a directory whose file differs by one
byte from the one served gives a MISMATCH and exit 1. Mounts nothing; a few seconds."""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import linkemu  # noqa: E402
from shardfs_test import mount as ml  # noqa: E402

REQ = 8 << 20  # splice_bench's request size


def counts(emu):
    s = emu.stats()
    return s['requests'], s['bytes_sent']


def floor(env, ck, splice_bench, floor_bench):
    rng = env.rng
    data = env.path('data')
    os.makedirs(data)
    files = {'a.tar': (9 << 20) + 123, 'b.tar': 300001, 'c.tar': 1}
    blobs = {}
    for nm, size in files.items():
        blobs[nm] = rng.randbytes(size)
        with open(os.path.join(data, nm), 'wb') as f:
            f.write(blobs[nm])
    names = ['a.tar', 'b.tar', 'c.tar']
    emu = linkemu.Emu(data, 0, 100000, env.tmp, 'floor', shardfs=env.shardfs, etag='store')
    try:
        # L4 floor: splice_bench recv, and the model's other write modes (falloc: each
        # request's range allocated first; big2: 2 MiB pwritevs; direct2: 2 MiB O_DIRECT
        # pwritevs, each file at a 4 KiB boundary, a file's last partial block buffered)
        total = sum(files[n] for n in names)
        nreq = sum(-(-files[n] // REQ) for n in names)
        for mode in ('recv', 'falloc', 'big2', 'direct2'):
            out = env.path('fill-%s.data' % mode)
            r0 = counts(emu)
            p = subprocess.run([splice_bench, str(emu.port), data, mode, out] + names,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=60)
            r1 = counts(emu)
            ml.log('splice_bench %s: rc %d: %s %s' % (mode, p.returncode, p.stdout.strip(),
                                                      p.stderr.strip()))
            ck.eq('splice_bench %s: exit status' % mode, p.returncode, 0)
            m = re.match(r'%s [\d.]+ [\d.]+ [\d.]+ CPU-s/GB .* (\d+) bytes, (\d+) requests$'
                         % mode, p.stdout.strip())
            ck.ok(m is not None, 'splice_bench %s: its line: %r' % (mode, p.stdout))
            if m:
                ck.eq('splice_bench %s: bytes it says it moved' % mode, int(m.group(1)), total)
                ck.eq('splice_bench %s: requests it says it sent' % mode, int(m.group(2)),
                      nreq)
            want = b''
            for n in names:
                want += blobs[n]
                if mode.startswith('direct'):  # the next file at a block's start
                    want += bytes(-len(want) % 4096)
            got = b''
            if os.path.exists(out):  # a mode the tool does not have writes none
                with open(out, 'rb') as f:
                    got = f.read()
                os.unlink(out)
            ck.ok(got == want, 'splice_bench %s: its file holds the files\' bytes in order '
                  '(%d bytes, %d asked)' % (mode, len(got), len(want)))
            ck.eq('splice_bench %s: requests the emulator answered' % mode, r1[0] - r0[0], nreq)
            ck.eq('splice_bench %s: body bytes the emulator sent' % mode, r1[1] - r0[1], total)

        # L8g floor: floor_bench, 300 seeded ranges over 4 connections
        ranges = []
        for nm, size in files.items():  # whole files but a.tar (the tool's 64 buffers are
            # each of the longest range), and every file's last byte
            ranges += [(nm, 0, size if size < REQ else 300000), (nm, size - 1, 1)]
        while len(ranges) < 300:
            nm = rng.choice(['a.tar', 'b.tar'])
            ln = rng.choice([1, 2, 4095, 4096, 4097, 65536, 131072, 300000,
                             rng.randint(1, 200000)])
            ln = min(ln, files[nm])
            ranges.append((nm, rng.randint(0, files[nm] - ln), ln))
        rng.shuffle(ranges)
        asked = sum(r[2] for r in ranges)
        ok_rf = env.path('ranges')
        with open(ok_rf, 'w') as f:
            f.writelines('%s %d %d\n' % r for r in ranges)

        def run_floor(root, rf):
            q = subprocess.run([floor_bench, str(emu.port), root, '4', rf],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=60)
            ml.log('floor_bench: rc %d: %s %s' % (q.returncode, q.stdout.strip(),
                                                   q.stderr.strip()))
            return q

        r0 = counts(emu)
        q = run_floor(data, ok_rf)
        r1 = counts(emu)
        ck.eq('floor_bench: exit status', q.returncode, 0)
        m = re.match(r'floor [\d.]+ [\d.]+ [\d.]+ [\d.]+ CPU-s/GB .* (\d+) bytes of (\d+) asked, '
                     r'(\d+) requests, 4 connections$', q.stdout.strip())
        ck.ok(m is not None, 'floor_bench: its line: %r' % q.stdout)
        if m:
            ck.eq('floor_bench: bytes its reader got', int(m.group(1)), asked)
            ck.eq('floor_bench: bytes it says were asked', int(m.group(2)), asked)
            ck.eq('floor_bench: requests it says it sent', int(m.group(3)), len(ranges))
        ck.eq('floor_bench: requests the emulator answered', r1[0] - r0[0], len(ranges))
        ck.eq('floor_bench: body bytes the emulator sent', r1[1] - r0[1], asked)

        # its checks fail where they should: an answer shorter than asked ...
        bad_rf = env.path('ranges-past-end')
        with open(bad_rf, 'w') as f:
            f.write('c.tar 0 1\nb.tar %d 2\n' % (files['b.tar'] - 1))
        q = run_floor(data, bad_rf)
        ck.eq('floor_bench: a range past the file\'s end: exit status', q.returncode, 1)
        ck.ok('not the 206 of 2 bytes asked' in q.stderr,
              'floor_bench: a range past the file\'s end: says so: %r' % q.stderr)
        # ... and bytes other than the files' (the check reads a copy with one byte changed)
        other = env.path('other')
        os.makedirs(other)
        for nm, b in blobs.items():
            if nm == 'a.tar':
                i = rng.randrange(300000)  # in the range (a.tar, 0, 300000)
                b = b[:i] + bytes([b[i] ^ 0x40]) + b[i + 1:]
            with open(os.path.join(other, nm), 'wb') as f:
                f.write(b)
        q = run_floor(other, ok_rf)
        ck.eq('floor_bench: bytes that differ from the files: exit status', q.returncode, 1)
        ck.ok(q.stdout.strip().endswith('MISMATCH'),
              'floor_bench: bytes that differ from the files: MISMATCH: %r' % q.stdout)
    finally:
        emu.stop()


if __name__ == '__main__':
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sb, fb = sys.argv[2], sys.argv[3]
    ml.main_wrapper(lambda env, ck: floor(env, ck, sb, fb), sys.argv[1], 'bench-floor',
                    deadline=60, needs_fuse=False)
