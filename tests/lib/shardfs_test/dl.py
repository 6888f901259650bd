"""Deep-learning helpers of the dl tests and tests/bench/dl_bench.py: a class-folder tree of
small real images, torchvision's ImageFolder through a DataLoader (digests, epoch rate).
torch/torchvision/Pillow/numpy come from Debian and are imported only when used."""

import hashlib
import os
import random
import time

from .mount import Skip


def need_torch():
    try:
        import numpy  # noqa: F401
        import PIL  # noqa: F401
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError as e:
        raise Skip('torchvision/Pillow/numpy not importable: %s '
                   '(scripts/install-deps.sh --test installs them)' % e)


# class names chosen so that sorted names, creation order and the zero-padded indexes all
# differ ('Bee' < 'ant' in code point order; 12 classes need two digits: '10' < '2' unpadded)
CLASSES = ['zebra', 'ant', 'Bee', 'cat', 'dog', 'eel', 'fox', 'gnu', 'hen', 'ibis', 'jay', 'koi']


def make_tree(root, classes=CLASSES, per_class=5, seed=1, size=32):
    """A class-folder tree of real small JPEG and PNG images."""
    from PIL import Image
    rng = random.Random(seed)
    for ci, c in enumerate(classes):
        os.makedirs(os.path.join(root, c), exist_ok=True)
        for i in range(per_class):
            im = Image.new('RGB', (size, size), (rng.randrange(256), rng.randrange(256), ci * 20))
            for _ in range(40):
                im.putpixel((rng.randrange(size), rng.randrange(size)),
                            (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
            ext = 'jpg' if i % 2 else 'png'
            im.save(os.path.join(root, c, 'img%03d.%s' % (i, ext)))


def dataset_digest(root, workers=2):
    """ImageFolder(root) through a DataLoader: classes, samples per class and, per label, the
    sorted digests of the decoded pixel arrays."""
    import torch
    from torchvision import datasets, transforms
    ds = datasets.ImageFolder(root, transform=transforms.PILToTensor())
    dl = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=workers, shuffle=False)
    per_label = {}
    for x, y in dl:
        for img, lab in zip(x, y):
            per_label.setdefault(int(lab), []).append(
                hashlib.sha256(img.numpy().tobytes()).hexdigest())
    counts = {}
    for _, t in ds.samples:
        counts[t] = counts.get(t, 0) + 1
    return ds, counts, {k: sorted(v) for k, v in per_label.items()}


def epoch_rate(root, workers=2):
    import torch
    from torchvision import datasets, transforms
    ds = datasets.ImageFolder(root, transform=transforms.PILToTensor())
    dl = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=workers, shuffle=True)
    t = time.monotonic()
    n = 0
    for x, _ in dl:
        n += len(x)
    return n / (time.monotonic() - t)
