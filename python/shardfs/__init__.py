"""Helpers for a shardfs mount: reading plans, dataset paths, samples' bytes, the manifest.

A plan tells the mount in which order files will be read: a file of mount-relative paths, one
per line, which the mount reads when it gets the command ``plan [NAME] FILE`` (an ioctl on
``MOUNTPOINT/.shardfs/control``: the mount is read-only). ``PlanSampler`` publishes each
epoch's order this way before the epoch's first index is yielded; a DataLoader set up by
``plan_dataloader`` publishes it when iter() is called, before its workers start.

A sample's bytes: ``read_bytes`` reads a file in one READ request of the mount (up to the
kernel's readahead window on the mount) and no other; Python's buffered ``open()`` (before
3.14) also asks ``isatty()``, an ioctl the kernel forwards to the daemon on every open.
``pil_loader`` is torchvision's default ``ImageFolder`` loader over it.

Pure Python: torch is imported only by ``PlanSampler`` and ``plan_dataloader``, PIL only by
``pil_loader``.
"""

import collections
import errno
import fcntl
import os
import shutil
import sys
import tempfile
import warnings

__all__ = ['FS_CTL_IOC', 'FS_CTL_IOC_LEN', 'PlanInfo', 'PlanLookupError', 'Sample', 'PlanSampler',
           'clear_plan',
           'control', 'ctl_path', 'dataset_paths', 'find_mountpoint', 'plan', 'plan_dataloader', 'plan_fnv',
           'pil_loader', 'plans', 'read_bytes', 'read_samples']

# The control command's ioctl, as fs/core/include/fs_core_ctl.h defines it:
# _IOW('S', 0x01, char[8192]).
# The generic Linux encoding (asm-generic/ioctl.h: x86-64, arm64, riscv64): direction (write:
# 1) in bits 30-31, the argument's size in bits 16-29, the type in 8-15, the number in 0-7.
FS_CTL_IOC_LEN = 8192
_IOC_WRITE = 1
FS_CTL_IOC = (_IOC_WRITE << 30) | (FS_CTL_IOC_LEN << 16) | (ord('S') << 8) | 0x01

PLAN_NAME_CHARS = frozenset('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-')

PlanInfo = collections.namedtuple(
    'PlanInfo', 'name pid paths missing failed read position bytes fnv')
PlanInfo.__doc__ = """A line of .shardfs/plans: the plan's name, the pid that published it,
its paths found in the mount, those skipped because they name nothing in it (missing) and those
skipped because their lookup failed (failed: the shard could not be read or indexed, a store
down), how many were read, its position
(1 + the index of the furthest path read; 0: none), the bytes behind its paths, and the FNV-1a
64 of its found paths (plan_fnv)."""


class PlanLookupError(OSError):
    """A plan was published, but the mount skipped paths whose lookup failed (their shard
    could not be read or indexed: a store down, the cache directory removed, a shard refused
    whole): they may be in the mount, so the plan is not what was asked. `shardfs plan` exits 1
    for the same. errno EIO; info: the PlanInfo of the plan as published (its failed > 0)."""

    def __init__(self, message, info):
        super().__init__(errno.EIO, message)
        self.info = info

    def __str__(self):
        return self.strerror

    def __reduce__(self):
        return (PlanLookupError, (self.strerror, self.info))


Sample = collections.namedtuple('Sample', 'path shard offset size key')
Sample.__doc__ = """A line of .shardfs/samples.tsv: the member's mount-relative path, its
shard's path, the offset of its data in the shard's tar stream (None for a sparse member), its
size and its WebDataset sample key."""


# ---- the mount --------------------------------------------------------------------------------

def _gone(mountpoint):
    """The OSError (ENOTCONN) of a mount whose daemon is gone: what happened, what cleans up."""
    return OSError(errno.ENOTCONN, 'shardfs: the mount at %s does not answer: its daemon is '
                   'gone (killed or crashed); \'shardfs umount %s\' cleans it up, then mount '
                   'it again' % (mountpoint, mountpoint))


# what an access to a mount whose daemon is gone fails with: ENOTCONN once the kernel has
# aborted the connection, ECONNABORTED for a request that was in flight while it did
_GONE_ERRNOS = (errno.ENOTCONN, errno.ECONNABORTED)


def find_mountpoint(path):
    """The shardfs mount that holds path: the nearest directory at or above it that has
    .shardfs/stats (reachable by name only: never listed). ValueError when there is none;
    OSError (ENOTCONN) when the mount that holds it has lost its daemon (killed -9: every
    access says "Transport endpoint is not connected"), naming it and what cleans it up."""
    d = os.path.abspath(path)
    while True:
        try:
            os.stat(os.path.join(d, '.shardfs', 'stats'))
            return d
        except OSError as e:
            if e.errno in _GONE_ERRNOS:
                # the nearest such directory is the mount point itself
                while os.path.dirname(d) != d:
                    try:
                        os.stat(os.path.dirname(d))
                        break
                    except OSError:
                        d = os.path.dirname(d)
                raise _gone(d) from None
        up = os.path.dirname(d)
        if up == d:
            raise ValueError('%s is not inside a shardfs mount' % path)
        d = up


def control(mountpoint, line):
    """Send one command line to the mount (FS_CTL_IOC on .shardfs/control, opened read-only);
    the ioctl's result. OSError with the mount's errno when it refuses the command;
    FileNotFoundError when mountpoint is no shardfs mount (no .shardfs/control), OSError
    ENOTCONN when its daemon is gone, each naming mountpoint. line: str or bytes; a path in it
    goes through ctl_path()."""
    data = line if isinstance(line, bytes) else os.fsencode(line)
    if not data.endswith(b'\n'):
        data += b'\n'
    if len(data) >= FS_CTL_IOC_LEN:
        raise ValueError('command line longer than %d bytes' % (FS_CTL_IOC_LEN - 1))
    buf = bytearray(FS_CTL_IOC_LEN)
    buf[:len(data)] = data
    ctl = os.path.join(mountpoint, '.shardfs', 'control')
    try:
        fd = os.open(ctl, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, 'shardfs: %s is not a shardfs mount (no '
                                '.shardfs/control); give the mount point' % (mountpoint,),
                                ctl) from None
    except OSError as e:
        if e.errno in _GONE_ERRNOS:
            raise _gone(mountpoint) from None
        raise
    try:
        return fcntl.ioctl(fd, FS_CTL_IOC, buf, True)
    finally:
        os.close(fd)


def ctl_path(p):
    """The path p (str, bytes or os.PathLike) as a control line carries it (fs/core/fs_ctl.h, as
    the C client sends it): every byte up to 0x20, 0x7f and a backslash as \\xHH, so the mount
    neither trims nor cuts it, nor reads a literal '\\x41' in it as 'A'. Bytes."""
    return b''.join(b'\\x%02x' % c if c <= 0x20 or c == 0x7f or c == 0x5c else bytes((c,))
                    for c in os.fsencode(p))


def _check_name(name):
    if name is not None and (not name or len(name) > 64 or set(name) - PLAN_NAME_CHARS):
        raise ValueError('bad plan name %r: 1 to 64 of A-Z a-z 0-9 . _ : -' % (name,))


def _mount_relative(mountpoint, p):
    """p as mount-relative bytes (a newline in it kept)."""
    b = os.fsencode(p)
    if b.startswith(b'/'):
        m = os.fsencode(os.path.abspath(mountpoint)).rstrip(b'/') + b'/'
        if not b.startswith(m):
            raise ValueError('%r is not inside the mount %s' % (p, mountpoint))
        b = b[len(m):]
    return b


def _relative(mountpoint, p):
    """p as the mount-relative bytes a plan file holds."""
    b = _mount_relative(mountpoint, p)
    if b'\n' in b:
        raise ValueError('a path with a newline cannot be planned: %r' % (p,))
    return b


def _plan_line(mountpoint, p):
    """p's line of a plan file, its newline included; b'' for a path with a newline, which a
    line cannot hold (the mount skips an empty line: such a path is read without a plan)."""
    b = _mount_relative(mountpoint, p)
    return b'' if b'\n' in b else b + b'\n'


def _check_paths(paths, what):
    """A str, bytes or os.PathLike given where a sequence of paths is expected would be taken
    one character (or byte) a path: TypeError, naming the function and what to give."""
    if isinstance(paths, (str, bytes, bytearray, os.PathLike)):
        raise TypeError('%s: paths is one path (%r), not a sequence of paths: give [path]' % (
            what, paths))


def plan_fnv(paths, mountpoint='/'):
    """The fnv the mount shows in .shardfs/plans for a plan of these paths when each is found:
    FNV-1a 64 over each mount-relative path followed by a newline."""
    _check_paths(paths, 'plan_fnv')
    h = 0xcbf29ce484222325
    for p in paths:
        for c in _relative(mountpoint, p) + b'\n':
            h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return h


def plans(mountpoint):
    """{name: PlanInfo} of the plans the mount holds now (.shardfs/plans)."""
    with open(os.path.join(mountpoint, '.shardfs', 'plans'), 'rb') as f:
        text = f.read().decode()
    lines = text.split('\n')
    head = lines[0].split('\t')
    out = {}
    for line in lines[1:]:
        f = line.split('\t')
        if len(f) != len(head):
            continue  # the blanks that pad the file
        d = dict(zip(head, f))
        out[f[0]] = PlanInfo(**{k: d[k] if k == 'name' else int(d[k], 16 if k == 'fnv' else 10)
                                for k in PlanInfo._fields})
    return out


def plan(mountpoint, paths, name=None):
    """Publish paths (mount-relative, or absolute inside the mount) as the reading plan name
    (None: pid-PID, after this process); a later plan of the same name
    replaces it. The plan file is written to a private temporary directory, which the mount
    reads during the call, and removed. Returns the plan's PlanInfo (None if another process
    replaced it meanwhile). A plan the mount found only some paths of is a warning naming the
    count and the first path missed (a relative path is the mount's, not the working
    directory's: glob.glob('mnt/**') gives the latter). As `shardfs plan` exits 1 for it, a
    plan with paths whose lookup failed (PlanInfo.failed > 0: their shards could not be read
    or indexed, so they may be in the mount) raises PlanLookupError (published all the same:
    its info is the PlanInfo); paths that merely name nothing are only the warning (exit 0)."""
    _check_name(name)
    _check_paths(paths, 'plan')
    mountpoint = os.path.abspath(mountpoint)
    lines, head = [], []  # head: the first paths given, to name one the mount did not find
    for p in paths:
        lines.append(_relative(mountpoint, p) + b'\n')
        if len(head) < _MISSING_LOOKS:
            head.append(p)
    return _publish(mountpoint, b''.join(lines), head, name)


def _publish(mountpoint, data, head, name):
    """plan()'s publication of the plan file's bytes data (each path mount-relative, with its
    newline); head: the first paths as given, for the warning about missing ones. Paths whose
    lookup failed: PlanLookupError (with the warning's text), else the PlanInfo."""
    name = name or 'pid-%d' % os.getpid()  # the mount's default is the sending thread's id
    d = tempfile.mkdtemp(prefix='shardfs-plan-')
    try:
        fn = os.path.join(d, 'plan')
        with open(fn, 'wb') as f:
            f.write(data)
        os.chmod(d, 0o755)  # the daemon's user may differ (root sends for a user's mount)
        os.chmod(fn, 0o644)
        control(mountpoint, b'plan %s %s' % (name.encode(), ctl_path(fn)))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    info = plans(mountpoint).get(name)
    if info is not None and (info.missing or info.failed):
        text = _missing_text(mountpoint, head, info)
        if info.failed:
            raise PlanLookupError(text, info)
        warnings.warn(text, stacklevel=3)
    return info


# paths looked up (at most) to name the first one a plan missed: only when it missed some
_MISSING_LOOKS = 1000


def _missing_text(mountpoint, head, info):
    """The words that the mount found only some of a plan's paths, naming the first one missed
    among head (looked up only now that some are missing) and, for a relative path that names
    a file when taken from the working directory, what it should have been."""
    given = info.paths + info.missing + info.failed
    first, hint = None, ''
    for p in head:
        rel = os.fsdecode(_mount_relative(mountpoint, p))
        if '\n' in rel:
            continue  # not in the plan file: read without a plan, not missed
        if not os.path.isfile(os.path.join(mountpoint, rel)):
            first = p
            break
    if first is not None and not os.path.isabs(os.fsdecode(first)):
        cwd = os.path.abspath(os.fsdecode(first))
        if os.path.isfile(cwd) and cwd.startswith(mountpoint.rstrip('/') + '/'):
            hint = ('; relative paths are taken from the mount point, not the working '
                    'directory: this one is %r there' % cwd[len(mountpoint.rstrip('/')) + 1:])
    failed = ('; %d could not be looked up: their shards could not be read or indexed (see '
              'the mount\'s log)' % info.failed) if info.failed else ''
    return ('shardfs: plan %r: %d of %d paths name nothing readable in %s%s%s '
            '(the mount\'s log gives their line numbers)%s' % (
                info.name, info.missing + info.failed, given, mountpoint,
                ' (the first: %r)' % (first,) if first is not None else '', hint, failed))


def clear_plan(mountpoint, name=None):
    """Drop plan name (None: this process's pid-PID). FileNotFoundError when there is none."""
    _check_name(name)
    control(mountpoint, 'plan-clear ' + (name or 'pid-%d' % os.getpid()))


# ---- samples' bytes ---------------------------------------------------------------------------

def read_bytes(path):
    """The bytes of the file at path (str, bytes or os.PathLike), as bytes. On a shardfs mount
    a file up to the kernel's readahead window on the mount (--kernel-readahead: 256 KiB when
    the daemon runs as root, else the kernel's 128 KiB) costs one READ request and nothing else
    once its directory was listed: the file is opened unbuffered
    (a FileIO), so no isatty() is asked. open(path, 'rb') (Python before 3.14) asks it for
    every file (ioctl TCGETS), and the kernel forwards every ioctl of a FUSE file to the daemon
    and caches no answer: a round trip per file that carries no bytes."""
    with open(path, 'rb', buffering=0) as f:
        return f.readall()


def pil_loader(path):
    """The image at path as torchvision's default ImageFolder loader gives it (PIL, converted
    to RGB), read with read_bytes: ImageFolder(root, loader=shardfs.pil_loader) costs a READ a
    sample and no ioctl."""
    import io
    from PIL import Image
    with Image.open(io.BytesIO(read_bytes(path))) as img:
        return img.convert('RGB')


# ---- datasets ---------------------------------------------------------------------------------

def dataset_paths(dataset, mountpoint=None):
    """The mount-relative path of every index of dataset: a torchvision ImageFolder or
    DatasetFolder (.samples, or .imgs), a torch Subset of one, or a sequence of paths (str,
    bytes or os.PathLike; absolute ones must lie inside the mount). mountpoint: found from the
    first path when None. Returns (mountpoint, [path, ...]). One path given as the dataset
    (str, bytes, os.PathLike: each character would be taken as a path): ValueError, as for a
    dataset whose items are not paths."""
    if isinstance(dataset, (str, bytes, bytearray, os.PathLike)):
        raise ValueError('the dataset is one path (%r), not a dataset or a sequence of paths: '
                         'give [path]' % (dataset,))
    tud = sys.modules.get('torch.utils.data')  # loaded when the dataset is torch's
    if tud is not None and isinstance(dataset, tud.IterableDataset):
        # iterating it would read the whole stream (maybe endless) to find no index
        raise ValueError('an IterableDataset (%s) has no indices to map to paths: plans need '
                         'a map-style dataset' % type(dataset).__name__)
    if hasattr(dataset, 'dataset') and hasattr(dataset, 'indices'):  # torch.utils.data.Subset
        mp, inner = dataset_paths(dataset.dataset, mountpoint)
        return mp, [inner[i] for i in dataset.indices]
    items = getattr(dataset, 'samples', None)
    if items is None:
        items = getattr(dataset, 'imgs', None)
    try:
        if items is not None:
            raw = [os.fspath(s[0]) for s in items]
        else:
            raw = [os.fspath(p) for p in dataset]
    except TypeError as e:  # a dataset of numbers, tensors, ...: no files to plan
        raise ValueError('the dataset\'s items are not paths (%s)' % e) from None
    if mountpoint is None:
        if not raw:
            raise ValueError('an empty dataset: no path to find the mount from')
        first = raw[0] if os.path.isabs(raw[0]) else os.path.abspath(raw[0])
        mountpoint = find_mountpoint(os.fsdecode(first))
    mountpoint = os.path.abspath(mountpoint)
    rel = []
    for p in raw:
        p = os.fsdecode(p)
        if not os.path.isabs(p):
            p = os.path.abspath(p)
        rel.append(os.fsdecode(_mount_relative(mountpoint, p)))
    return mountpoint, rel


def _flatten(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flatten(y)
    else:
        yield int(x)


def _sampler_base():
    try:
        import torch.utils.data
        return torch.utils.data.Sampler
    except ImportError:
        return object


class PlanSampler(_sampler_base()):
    """Wraps any sampler (RandomSampler, DistributedSampler, a BatchSampler): each __iter__
    draws the wrapped sampler's whole order for the epoch, maps the indices to paths, publishes
    them to the mount as a plan (before the first index is yielded), then yields the wrapped
    sampler's items unchanged. `paths` is a dataset (dataset_paths) or a list of mount-relative
    paths. A dataset outside any shardfs mount, or a plan that cannot be published, is a
    warning (strict=True: an error): reading works without one; so is a plan published with
    paths whose lookup failed (strict=True: PlanLookupError; last_plan is its PlanInfo either
    way). A path with a newline (which a plan file's line cannot hold) is left out of the
    plans, said once in a warning (strict=True: ValueError), and read without one. After each __iter__,
    last_indices and last_plan (its PlanInfo) say what was published. publish_next() draws and
    publishes the next epoch's order ahead of its __iter__ (plan_dataloader's loader calls it
    before its workers start)."""

    def __init__(self, sampler, paths, mountpoint=None, name=None, strict=False):
        _check_name(name)
        self.sampler, self.name, self.strict = sampler, name, strict
        self.last_indices, self.last_plan = None, None
        self._next = None  # the items publish_next drew, for the next __iter__ to yield
        try:
            if isinstance(paths, (list, tuple)) and mountpoint is not None:
                self.mountpoint = os.path.abspath(mountpoint)
                self.paths = [os.fsdecode(_mount_relative(self.mountpoint, p)) for p in paths]
            else:
                self.mountpoint, self.paths = dataset_paths(paths, mountpoint)
        except ValueError as e:  # no shardfs mount: the sampler works, without plans
            if strict:
                raise
            warnings.warn('shardfs: no plans: %s' % e)
            self.mountpoint, self.paths = None, None
        # each index's line of the plan file, encoded once here rather than every epoch (the
        # paths are mount-relative and checked by now: _plan_line only encodes them); a path
        # with a newline has none (b''): it is read without a plan, the others planned
        self._lines = (None if self.paths is None else
                       [_plan_line(self.mountpoint, p) for p in self.paths])
        if self._lines is not None:
            nl = [p for p, ln in zip(self.paths, self._lines) if not ln]
            if nl and strict:
                raise ValueError('a path with a newline cannot be planned: %r' % (nl[0],))
            if nl:
                warnings.warn('shardfs: %d path%s cannot be planned (a newline in the name; '
                              'the first: %r): read without a plan, the others planned' % (
                                  len(nl), '' if len(nl) == 1 else 's', nl[0]))

    def __len__(self):
        return len(self.sampler)

    def set_epoch(self, epoch):
        self._next = None  # drawn for the epoch before: the next __iter__ draws again
        if hasattr(self.sampler, 'set_epoch'):
            self.sampler.set_epoch(epoch)

    def publish_next(self):
        """Draw the wrapped sampler's order for the next __iter__ now and publish it; that
        __iter__ yields exactly these items (set_epoch in between drops them: it draws again).
        Returns last_plan. A publication that fails is a warning (strict: the error, and
        nothing is kept for the next __iter__)."""
        self._next = None
        items = list(iter(self.sampler))
        self._publish_items(items)
        self._next = items
        return self.last_plan

    def __iter__(self):
        items, self._next = self._next, None
        if items is None:
            items = list(iter(self.sampler))
            self._publish_items(items)
        return iter(items)

    def _publish_items(self, items):
        self.last_indices = list(_flatten(items))
        self.last_plan = None
        if self.mountpoint is None:
            return
        idx = self.last_indices
        n = len(self._lines)
        bad = next((i for i in idx if not 0 <= i < n), None)
        if bad is not None:
            # an index with no path (a sampler over more items than paths has, or a
            # negative one, which Python would take from the end): no plan, the sampler's
            # order yielded all the same
            e = IndexError('shardfs: the sampler yields index %d, but paths has %d %s (0 to '
                           '%d): no plan published; give PlanSampler the dataset the sampler '
                           'draws from' % (bad, n, 'path' if n == 1 else 'paths', n - 1))
            if self.strict:
                raise e
            warnings.warn(str(e))
            return
        try:
            self.last_plan = _publish(self.mountpoint, b''.join([self._lines[i] for i in idx]),
                                      [self.paths[i] for i in idx[:_MISSING_LOOKS]], self.name)
        except PlanLookupError as e:  # published, some paths skipped: as plan() says it
            self.last_plan = e.info
            if self.strict:
                raise
            warnings.warn(str(e))
        except (OSError, ValueError) as e:
            if self.strict:
                raise
            warnings.warn('shardfs: could not publish the plan to %s: %s' % (self.mountpoint, e))


def _planned_iter(loader):
    """__iter__ of a loader plan_dataloader set up: with worker processes, the epoch's order is
    drawn and published before torch starts them (0.6-1 s here), so the mount's first
    requests overlap their start; torch itself draws the first indices only after its workers
    are up (_MultiProcessingDataLoaderIter.__init__ -> _reset -> _try_put_index). Without
    workers nothing is gained: the sampler publishes at the first index, as before."""
    ps = loader._shardfs_plan
    if loader.num_workers == 0:
        return super(type(loader), loader).__iter__()
    import torch
    gen = loader.generator
    resets = loader.persistent_workers and loader._iterator is not None
    if not resets:
        # A new iterator draws its workers' base seed from the loader's generator (the default
        # one when None), and the sampler draws the order after it, at the first index. Here
        # the order is drawn first: the base seed's draw is made (and its value dropped) before
        # it, so the generator's draws come in the same sequence, and the iterator draws its
        # base seed from a copy of the generator as it was before both: the same base seed and
        # the same order as the loader without plans, for a given torch.manual_seed.
        src = gen if gen is not None else torch.default_generator
        state = src.get_state()
        torch.empty((), dtype=torch.int64).random_(generator=gen)
    ps.publish_next()
    try:
        if resets:  # persistent workers: the iterator only resets, no seed is drawn
            return super(type(loader), loader).__iter__()
        copy = torch.Generator(device=src.device)
        copy.set_state(state)
        loader.generator = copy
        try:
            return super(type(loader), loader).__iter__()
        finally:
            loader.generator = gen
    finally:
        # the iterator drew its first indices while it was made: a sampler that did not (a
        # batch sampler of its own making) draws and publishes again at its first index,
        # rather than yielding an order it may not have published last
        ps._next = None


_PLANNED = {}  # a DataLoader class -> its subclass with _planned_iter


def _planned_new(cls):
    """A new, empty instance of cls's planned subclass: what a pickled planned loader is
    made from (its state is then restored as any object's)."""
    return cls.__new__(_planned_class(cls))


def _planned_reduce_ex(self, protocol):
    """Pickle a planned loader as its loader class (which pickle finds by name: the planned
    subclass is made at run time and shares that name) and _planned_new, so pickle.loads,
    copy.deepcopy and spawn-start processes give a loader that still publishes its plans."""
    base = type(self)._shardfs_base
    r = super(type(self), self).__reduce_ex__(max(protocol, 2))
    return (_planned_new, (base,)) + tuple(r[2:])


def _planned_class(cls):
    sub = _PLANNED.get(cls)
    if sub is None:
        sub = _PLANNED[cls] = type(cls.__name__, (cls,), {'__iter__': _planned_iter,
                                                          '__module__': cls.__module__,
                                                          '__reduce_ex__': _planned_reduce_ex,
                                                          '_shardfs_base': cls,
                                                          '_shardfs_planned': True})
    return sub


def plan_dataloader(loader, mountpoint=None, name=None, strict=False):
    """Make a torch DataLoader (map-style dataset; also one made with shuffle=True) publish
    each epoch's order: its sampler is wrapped in a PlanSampler (inside its batch sampler when
    it batches), and with num_workers > 0 the order is drawn and published when iter(loader)
    is called, before torch starts the worker processes (the plan's first fetches overlap
    their start; without workers, at the first index). The order is the one the same loader
    draws without plans (same seeds). Returns the PlanSampler; a loader whose sampler is one
    already keeps it (its name and strict). A dataset whose items are no paths in a shardfs
    mount (a list of numbers, files outside any mount) is a warning (strict=True:
    ValueError): the loader is left as it is, and the PlanSampler returned is not installed
    (it plans nothing). Anything but a DataLoader: TypeError."""
    if not hasattr(loader, 'batch_sampler') or not hasattr(loader, 'dataset'):
        raise TypeError('plan_dataloader needs a torch DataLoader, not %s (wrap the dataset in '
                        'a DataLoader, or give PlanSampler a sampler)' % type(loader).__name__)
    bs = loader.batch_sampler
    if bs is None or not hasattr(bs, 'sampler'):
        raise ValueError('plan_dataloader needs a DataLoader with a batch sampler that has a '
                         '.sampler (use PlanSampler directly as sampler= otherwise)')
    if isinstance(bs.sampler, PlanSampler):
        ps = bs.sampler
    else:
        ps = PlanSampler(bs.sampler, loader.dataset, mountpoint, name, strict)
        if ps.mountpoint is None:  # warned: nothing to plan, the loader unchanged
            return ps
        bs.sampler = ps  # BatchSampler's own attribute: DataLoader freezes only its own
    if ps.mountpoint is not None:
        loader._shardfs_plan = ps
        if not getattr(type(loader), '_shardfs_planned', False):
            loader.__class__ = _planned_class(type(loader))
    return ps


# ---- .shardfs/samples.tsv ---------------------------------------------------------------------

_ESC = {ord('\\'): b'\\', ord('t'): b'\t', ord('n'): b'\n', ord('r'): b'\r'}


def _unescape(b):
    """A field of samples.tsv as stored: \\\\, \\t, \\n, \\r and \\xHH undone."""
    if b'\\' not in b:
        return b
    out, i = bytearray(), 0
    while i < len(b):
        c = b[i]
        if c != 0x5c:
            out.append(c)
            i += 1
        elif b[i + 1] in _ESC:
            out += _ESC[b[i + 1]]
            i += 2
        elif b[i + 1] == ord('x'):
            out.append(int(b[i + 2:i + 4], 16))
            i += 4
        else:
            raise ValueError('bad escape in samples.tsv: %r' % b[i:i + 4])
    return bytes(out)


def read_samples(mountpoint):
    """The records of MOUNTPOINT/.shardfs/samples.tsv, in its order, as Sample(path, shard,
    offset, size, key): path, shard and key as str (os.fsdecode: names that are not UTF-8 keep
    their bytes as surrogates, so open() finds them), offset None for a sparse member."""
    with open(os.path.join(mountpoint, '.shardfs', 'samples.tsv'), 'rb') as f:
        lines = f.read().split(b'\n')
    if lines[0] != b'path\tshard\toffset\tsize\tkey':
        raise ValueError('not a samples.tsv header: %r' % lines[0][:80])
    out = []
    for line in lines[1:]:
        if not line:
            continue
        f = line.split(b'\t')
        if len(f) != 5:
            raise ValueError('samples.tsv: a line of %d fields: %r' % (len(f), line[:200]))
        path, shard, off, size, key = f
        out.append(Sample(os.fsdecode(_unescape(path)), os.fsdecode(_unescape(shard)),
                          None if off == b'-' else int(off), int(size),
                          os.fsdecode(_unescape(key))))
    return out
