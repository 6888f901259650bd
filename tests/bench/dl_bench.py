"""ImageFolder epoch through a shardfs mount vs the same tree on local disk.

Run: /usr/bin/python3 tests/bench/dl_bench.py build/shardfs [CLASSES] [PER_CLASS]
Extra mount options (e.g. --strict-open) from the environment: SHARDFS_BENCH_MOUNT_OPTS.
Generates a class-folder tree of small JPEGs, packs it, mounts --layout imagefolder, warms the
cache with one epoch, then times one epoch of DataLoader(num_workers=2) on each, alternating,
three times, and prints samples/s and the ratio (goal >= 0.8).
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import dl  # noqa: E402


def main():
    shardfs = os.path.abspath(sys.argv[1])
    ncls = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    per = int(sys.argv[3]) if len(sys.argv) > 3 else 250
    tmp = tempfile.mkdtemp(prefix='shardfs-dlbench-')
    tree, out, mnt = (os.path.join(tmp, n) for n in ('tree', 'shards', 'mnt'))
    classes = ['c%03d' % i for i in range(ncls)]
    dl.make_tree(tree, classes=classes, per_class=per, size=64)
    os.makedirs(out)
    os.makedirs(mnt)
    subprocess.run([shardfs, 'pack', '--max-size', '4M', '--shuffle', '1', tree,
                    os.path.join(out, 'train')], check=True)
    subprocess.run([shardfs, 'mount'] + os.environ.get('SHARDFS_BENCH_MOUNT_OPTS', '').split() +
                   ['--layout', 'imagefolder', '--cache-dir',
                    os.path.join(tmp, 'cache'), out, mnt], check=True)
    try:
        dl.epoch_rate(mnt)
        dl.epoch_rate(tree)
        rm, rt = [], []
        for _ in range(3):
            rm.append(dl.epoch_rate(mnt))
            rt.append(dl.epoch_rate(tree))
        m, t = max(rm), max(rt)
        print('%d images: mount %.0f samples/s, local tree %.0f samples/s, ratio %.2f'
              % (ncls * per, m, t, m / t))
    finally:
        subprocess.run([shardfs, 'umount', mnt])
        subprocess.run(['rm', '-rf', tmp])


if __name__ == '__main__':
    main()
