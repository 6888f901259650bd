#!/usr/bin/python3
"""Train a tiny CNN with torchvision's ImageFolder on a shardfs mount (--layout imagefolder).

Run:
  build/shardfs pack --max-size 256M --shuffle 1 /data/imagenet/train /data/shards/train
  build/shardfs mount --layout imagefolder /data/shards /mnt/imagenet
  /usr/bin/python3 examples/pytorch_imagefolder_train.py /mnt/imagenet --epochs 1 --workers 4

Nothing here knows about shards: the mount shows MOUNT/<class>/<image> (classes are the zero-padded
.cls integers, so class_to_idx maps each directory to that integer), and ordinary PyTorch code
reads it with a DataLoader of several worker processes. One line more tells the mount each epoch's
order before the epoch starts (shardfs.plan_dataloader, from the Python module in python/;
--no-plan leaves it out). Runs on CPU; images are resized to 32x32.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn
from torchvision import datasets, transforms

try:
    import shardfs
except ImportError:  # run from a checkout without PYTHONPATH=python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'python'))
    import shardfs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('root', help='the imagefolder mount (or any class-folder tree)')
    ap.add_argument('--epochs', type=int, default=1)
    ap.add_argument('--workers', type=int, default=4)
    ap.add_argument('--batch-size', type=int, default=32)
    ap.add_argument('--no-plan', action='store_true', help='do not publish reading plans')
    args = ap.parse_args()
    torch.manual_seed(0)
    tf = transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor()])
    ds = datasets.ImageFolder(args.root, transform=tf)
    print('%d images in %d classes' % (len(ds), len(ds.classes)))
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                                     num_workers=args.workers, persistent_workers=args.workers > 0)
    # each epoch's shuffled order goes to the mount as a reading plan (a warning, not an error,
    # where root is no shardfs mount)
    planned = None if args.no_plan else shardfs.plan_dataloader(dl)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4),
                          nn.Flatten(), nn.Linear(8 * 8 * 8, len(ds.classes)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        t, n, total, correct = time.monotonic(), 0, 0.0, 0
        for x, y in dl:
            opt.zero_grad()
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            opt.step()
            n += len(y)
            total += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
        dt = time.monotonic() - t
        pl = planned and planned.last_plan and \
            shardfs.plans(planned.mountpoint).get(planned.last_plan.name)
        print('epoch %d: loss %.3f  accuracy %.2f  %d samples in %.1fs (%.0f samples/s)%s'
              % (epoch, total / n, correct / n, n, dt, n / dt,
                 '; plan of %d paths, %d read since it was published' % (pl.paths, pl.read)
                 if pl else ''))


if __name__ == '__main__':
    main()
