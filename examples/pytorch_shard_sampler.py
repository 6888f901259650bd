#!/usr/bin/python3
"""A shard-ordered sampler: shuffle shards, then samples within each shard, so that every
worker reads one shard front to back (sequential I/O, shardfs readahead and --prefetch-shards
work) while the epoch is still shuffled. Where each sample lives comes from the mount's
manifest, MOUNT/.shardfs/samples.tsv (read with the shardfs Python module in python/); each
epoch's order is published to the mount as a reading plan (shardfs.PlanSampler).

Run:
  build/shardfs mount /data/shards /mnt/shards                # --layout shards (default)
  PYTHONPATH=python /usr/bin/python3 examples/pytorch_shard_sampler.py /mnt/shards --epochs 1
(on a --layout imagefolder mount, which has no samples.tsv, it reads the user.shardfs.*
extended attributes instead: mount it with --xattr)

Images are the members with an image extension; the label is the sample's .cls member (on an
imagefolder mount, the class directory's integer).
"""
import argparse
import io
import os
import random
import time

import sys

import torch
from PIL import Image
from torchvision import transforms

try:
    import shardfs
except ImportError:  # run from a checkout without PYTHONPATH=python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'python'))
    import shardfs

IMAGE_EXTS = ('.jpg', '.jpeg', '.png', '.webp', '.bmp', '.ppm', '.pgm', '.tif', '.tiff')


def scan(root):
    """[(path, shard, offset, key)] of every image member below root: from the mount's
    samples.tsv, else (an imagefolder mount) from the xattrs."""
    root = os.path.abspath(root)
    mnt = shardfs.find_mountpoint(root)
    try:
        recs = shardfs.read_samples(mnt)
    except FileNotFoundError:
        recs = None
    if recs is not None:
        items = []
        for r in recs:
            p = os.path.join(mnt, r.path)
            if r.offset is not None and p.startswith(root + '/') and \
                    p.lower().endswith(IMAGE_EXTS):
                items.append((p, r.shard, r.offset, r.key))
        return items
    items = []
    for dp, _, fns in os.walk(root):
        if '/.shardfs' in dp:
            continue
        for fn in fns:
            if not fn.lower().endswith(IMAGE_EXTS):
                continue
            p = os.path.join(dp, fn)
            try:
                shard = os.getxattr(p, 'user.shardfs.shard').decode()
                off = int(os.getxattr(p, 'user.shardfs.offset'))
                key = os.getxattr(p, 'user.shardfs.key').decode()
            except OSError:
                continue  # not a shard member
            items.append((p, shard, off, key))
    return items


class ShardOrderSampler(torch.utils.data.Sampler):
    """Shards in a seeded random order; within a shard, samples shuffled inside windows of
    `window` consecutive samples (a window is one readahead, so reads stay near-sequential)."""

    def __init__(self, items, seed=0, window=64):
        self.by_shard = {}
        for i, (_, shard, off, _) in enumerate(items):
            self.by_shard.setdefault(shard, []).append((off, i))
        for v in self.by_shard.values():
            v.sort()
        self.seed, self.window, self.epoch, self.n = seed, window, 0, len(items)

    def set_epoch(self, e):
        self.epoch = e

    def __len__(self):
        return self.n

    def __iter__(self):
        rng = random.Random(self.seed * 1000003 + self.epoch)
        shards = sorted(self.by_shard)
        rng.shuffle(shards)
        for s in shards:
            idx = [i for _, i in self.by_shard[s]]
            for w in range(0, len(idx), self.window):
                chunk = idx[w:w + self.window]
                rng.shuffle(chunk)
                yield from chunk


class Members(torch.utils.data.Dataset):
    def __init__(self, items):
        self.items = items
        self.tf = transforms.Compose([transforms.Resize((32, 32)), transforms.PILToTensor()])

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        p, _, _, key = self.items[i]
        with open(p, 'rb') as f:
            img = Image.open(io.BytesIO(f.read())).convert('RGB')
        cls = os.path.join(os.path.dirname(p), os.path.basename(key) + '.cls')
        try:
            with open(cls) as f:
                label = int(f.read().strip())
        except OSError:
            # --layout imagefolder: the directory is the (zero-padded) .cls integer
            d = os.path.basename(os.path.dirname(p))
            label = int(d) if d.isdigit() else -1
        return self.tf(img), label


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('root')
    ap.add_argument('--epochs', type=int, default=1)
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--seed', type=int, default=0)
    args = ap.parse_args()
    items = scan(args.root)
    if not items:
        raise SystemExit('no image members below %s (samples.tsv, or user.shardfs.* xattrs)'
                         % args.root)
    sampler = ShardOrderSampler(items, seed=args.seed)
    # each epoch's order goes to the mount as a plan before the epoch's first read
    planned = shardfs.PlanSampler(sampler, [it[0] for it in items], name='shard-sampler')
    dl = torch.utils.data.DataLoader(Members(items), batch_size=16, sampler=planned,
                                     num_workers=args.workers)
    print('%d images in %d shards' % (len(items), len(sampler.by_shard)))
    for e in range(args.epochs):
        sampler.set_epoch(e)
        order = list(sampler)
        shard_of = [items[i][1] for i in order]
        switches = sum(1 for a, b in zip(shard_of, shard_of[1:]) if a != b)
        assert sorted(order) == list(range(len(items))), 'every sample once per epoch'
        assert switches == len(sampler.by_shard) - 1, 'each shard read in one run'
        t, n = time.monotonic(), 0
        for x, y in dl:
            n += len(y)
        dt = time.monotonic() - t
        assert planned.last_indices == order, 'the published plan is the epoch\'s order'
        pl = planned.last_plan
        print('epoch %d: %d samples, %d shard switches, %.0f samples/s; plan: %s paths%s'
              % (e, n, switches, n / dt, pl.paths if pl else 'no', '' if pl else ' (refused)'))


if __name__ == '__main__':
    main()
