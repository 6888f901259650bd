"""What Python's tarfile says of shards, as the mount's samples.tsv should say it (used by
tests/mount/test_loaderidx.py and tests/python/test_python.py)."""

import io
import os
import subprocess
import tarfile

from . import mount as ml
from . import shardgen


def open_tar(path):
    if path.endswith('.tar.zst'):
        data = subprocess.run(['zstd', '-q', '-d', '-c', path], stdout=subprocess.PIPE,
                              check=True, timeout=60).stdout
        return tarfile.open(fileobj=io.BytesIO(data)), 'zstd'
    tf = tarfile.open(path)
    with open(path, 'rb') as f:
        magic = f.read(2)
    return tf, 'gzip' if magic == b'\x1f\x8b' else 'raw'


def key_of(name):
    """The WebDataset key: the path up to the first '.' of its base name."""
    base = name.rfind('/') + 1
    dot = name.find('.', base)
    return name if dot < 0 else name[:dot]


def reference(src):
    """What tarfile says of every shard below src: {shard relpath: (codec, [member])}, a
    member being dict(name, offset, size, hard, sparse, order) for each regular member (the
    later copy of a name stored twice; hostile names left out as the mount does), in the
    order of their data in the tar."""
    out = {}
    for dirpath, dirnames, files in os.walk(src):
        dirnames.sort()
        for fn in sorted(files):
            if shardgen.shard_dir_name(fn) is None:
                continue
            rel = os.path.relpath(os.path.join(dirpath, fn), src)
            tf, codec = open_tar(os.path.join(dirpath, fn))
            with tf:
                byname = {}
                for i, m in enumerate(tf):
                    n = ml.normalize_member(m.name)
                    if not n:
                        continue
                    if m.isreg():
                        byname[n] = dict(name=n, offset=m.offset_data, size=m.size, hard=False,
                                         sparse=m.sparse is not None, order=i)
                    elif m.islnk():
                        t = byname.get(ml.normalize_member(m.linkname))
                        if t:
                            byname[n] = dict(t, name=n, hard=True, order=i)
                    else:
                        byname.pop(n, None)
            members = sorted(byname.values(),
                             key=lambda x: (float('inf') if x['sparse'] else x['offset'],
                                            x['order']))
            out[rel] = (codec, members)
    return out


def expected_tsv_rows(ref):
    rows = []
    for shard in sorted(ref):
        d = os.path.dirname(shard)
        mdir = os.path.join(d, shardgen.shard_dir_name(os.path.basename(shard)))
        for m in ref[shard][1]:
            rows.append((mdir + '/' + m['name'], shard, '-' if m['sparse'] else str(m['offset']),
                         str(m['size']), key_of(m['name'])))
    return rows
