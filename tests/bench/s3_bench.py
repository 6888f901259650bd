#!/usr/bin/python3
"""Cold fill from s3rver (workload 3). Not a test: prints figures and ratios against a
baseline measured in the same run.

    /usr/bin/python3 tests/bench/s3_bench.py SHARDFS_BIN [--shard-mb 256] [--member-kb 100] [--runs 3]

Starts s3rver (npm, installed by tests/remote/s3/install-s3rver.sh) on 127.0.0.1, uploads one
shard of --shard-mb MB, then for --connections 1 and 8:
  - shardfs: `cat MNT/shard.tar > /dev/null` through a fresh mount of s3://bench/ with an empty
    cache dir (every byte comes from s3rver), signed with SigV4;
  - curl: the same bytes with the same parallelism, signed too (`curl --aws-sigv4`): one GET
    of the whole object, or 8 parallel range GETs of one eighth each; to /dev/null (a
    reference) and to new files on the disk of the cache (what a cache fill must also do).
Each figure is the median of --runs runs, shardfs and curl alternating. Output lines:
    LABEL   SHARDFS_MB/s   CURL_MB/s   RATIO
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import s3servers  # noqa: E402


def make_shard(path, mb, kb):
    import io
    import tarfile
    n = mb * 1024 // kb
    blob = os.urandom(kb * 1024 + 4096)
    with tarfile.open(path, 'w', format=tarfile.USTAR_FORMAT) as t:
        for i in range(n):
            ti = tarfile.TarInfo('sample_%07d.bin' % i)
            ti.size = kb * 1024
            ti.mtime = 1600000000
            t.addfile(ti, io.BytesIO(blob[i % 4096:i % 4096 + kb * 1024]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('bin')
    ap.add_argument('--shard-mb', type=int, default=256)
    ap.add_argument('--member-kb', type=int, default=100)
    ap.add_argument('--runs', type=int, default=3)
    a = ap.parse_args()
    if not s3servers.have_s3rver():
        print('s3_bench: s3rver not installed (tests/remote/s3/install-s3rver.sh): skipped')
        return 0
    tmp = tempfile.mkdtemp(prefix='shardfs-s3-bench.')
    s3 = None
    mounts = []
    env = dict(os.environ, AWS_ACCESS_KEY_ID=s3servers.S3RVER_KEY,
               AWS_SECRET_ACCESS_KEY=s3servers.S3RVER_SECRET, AWS_REGION='us-east-1')
    for k in ('AWS_SESSION_TOKEN', 'AWS_PROFILE', 'AWS_SHARED_CREDENTIALS_FILE'):
        env.pop(k, None)
    try:
        shard = os.path.join(tmp, 'shard.tar')
        print('making a %d MB shard of %d KB members ...' % (a.shard_mb, a.member_kb))
        make_shard(shard, a.shard_mb, a.member_kb)
        size = os.path.getsize(shard)
        s3 = s3servers.S3rver(tmp)
        s3.create_bucket('bench')
        with open(shard, 'rb') as f:
            s3.put('bench', 'shard.tar', f.read())
        os.unlink(shard)
        endpoint = 'http://127.0.0.1:%d' % s3.port
        url = endpoint + '/bench/shard.tar'
        print('shard: %d bytes on s3rver at %s; shardfs: %s' % (size, endpoint, a.bin))
        sig = ['-H', 'x-amz-content-sha256: UNSIGNED-PAYLOAD', '--aws-sigv4', 'aws:amz:us-east-1:s3',
               '--user',
               '%s:%s' % (s3servers.S3RVER_KEY, s3servers.S3RVER_SECRET)]
        subprocess.run(['curl', '-sf', '-o', '/dev/null'] + sig + [url], check=True)  # warm

        def shardfs_cat(conn):
            m = os.path.join(tmp, 'mnt%d' % conn)
            c = os.path.join(tmp, 'cache%d' % conn)
            shutil.rmtree(c, ignore_errors=True)
            os.makedirs(m, exist_ok=True)
            subprocess.run([a.bin, 'mount', '--cache-dir', c, '--connections', str(conn),
                            '--endpoint', endpoint, 's3://bench/', m], check=True, env=env)
            mounts.append(m)
            t0 = time.monotonic()
            subprocess.run(['cat', os.path.join(m, 'shard.tar')], check=True,
                           stdout=subprocess.DEVNULL)
            t = time.monotonic() - t0
            subprocess.run([a.bin, 'umount', m], check=True, stdout=subprocess.DEVNULL)
            mounts.remove(m)
            return t

        def curl(conn, files=False):
            """files: each range to a new file next to the cache dirs (the same disk), as a
            cache fill must write it; else to /dev/null (a reference only)."""
            part = -(-size // conn)
            outs = [os.path.join(tmp, 'curl.%d' % i) if files else '/dev/null'
                    for i in range(conn)]
            t0 = time.monotonic()
            ps = [subprocess.Popen(['curl', '-sf', '-o', outs[i]] + sig +
                                   (['-r', '%d-%d' % (i * part, min(size, (i + 1) * part) - 1)]
                                    if conn > 1 else []) + [url]) for i in range(conn)]
            if any(p.wait() != 0 for p in ps):
                raise RuntimeError('curl failed')
            t = time.monotonic() - t0
            for o in outs:
                if o != '/dev/null':
                    os.unlink(o)
            return t

        print('%-46s %10s %10s %8s' % ('workload', 'shardfs', 'curl', 'ratio'))
        print('%-46s %10s %10s' % ('', 'MB/s', 'MB/s'))
        for conn in (1, 8):
            sf, cu, cf = [], [], []
            for _ in range(a.runs):
                sf.append(shardfs_cat(conn))
                cu.append(curl(conn))
                os.sync()
                cf.append(curl(conn, files=True))
                os.sync()
            msf = size / 1e6 / statistics.median(sf)
            label = ('s3rver: cat, --connections 1 vs curl' if conn == 1 else
                     's3rver: cat, --connections 8 vs curl 8 ranges')
            for lab, xs in ((label, cu), (label + ' -o file%s' % ('s' if conn > 1 else ''), cf)):
                mcu = size / 1e6 / statistics.median(xs)
                print('%-46s %10.0f %10.0f %8.2f' % (lab, msf, mcu, msf / mcu))
        return 0
    finally:
        for m in mounts:
            subprocess.run([a.bin, 'umount', m], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        if s3:
            s3.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
