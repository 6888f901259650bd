#!/usr/bin/python3
"""shardfs reference-model test: a seeded random sequence of source changes, refreshes,
remounts, kill -9s, cache damage and reads through three mounts on one cache directory
(a local source, the same directory over nginx, and over nginx behind a fault proxy); every
answer is compared with a model: Python's tarfile over the source as it is at that moment.

usage: test_model.py SHARDFS [--seed N] [--steps N] [--ops OP,OP,...|+OP,-OP,...]
                             [--mount-opts 'OPTS'] [--regress]

  --seed N    the sequence (default: a random one, printed); a failure prints the seed and
              step, and `--seed N --steps S` replays it exactly
  --steps N   operations per run (default 300)
  --ops LIST  the operations drawn from: a plain list replaces the default set, +OP/-OP add
              to it or take from it (see OPS and WAITING below)
  --mount-opts 'OPTS'  more options of every mount (e.g. '--cache-size 2M': eviction)
  --regress   run the regression seeds (REGRESSIONS) instead of one random sequence

The model. For every mount and every source file (shard or plain file) it keeps the set of
versions the mount may show: the version at the last mount/refresh of that mount, plus every
version the file had since (None: absent). A file with more than one version in its set is
"pending": besides the exact bytes of one of its versions (a member's, the raw shard's, a plain
file's, at the range read), a read may give ESTALE, EIO or ENOENT, and a listing may show any
of its versions' names. A refresh or a remount of a mount makes every file settled again at
its current version: from then on, only that version's exact bytes (or ENOENT if the file is
absent) is allowed. Also allowed:
  - while the fault proxy injects faults: EIO on the proxied mount (never other bytes);
  - after cache damage, for the objects the damaged file holds (a data, state or map file:
    the object whose bytes it caches; a saved index: its shard), on the mounts of its source
    only, until the mount repairs them: the damage step then reads each such object (the
    raw shard and every member, whole, past the kernel's caches) until a round of reads is
    exact, at most REPAIR_ROUNDS rounds; from then on the object owes exact answers again.
    Damage under the running mounts includes a byte flipped in a unit the mount filled
    itself (the cache tier checks a unit again after its data file changed): the flip must
    show in the mount's cache_units_corrupt.
After every step (not in --regress runs, which replay as they were found), a walk of each
mount's whole tree checks every settled shard's entries (names, type, mode, mtime, size, link
target) and inode numbers: unique within the walk, but a hardlink and its target; the same
for the same version of a shard for the mount's life (but after damage to its cached index,
which is then built again: a new shard, new inode numbers).
Every answer is counted: exact, or tolerated by its cause; the run reports the share of
exact answers and fails below EXACT_FLOOR (runs of FLOOR_STEPS steps or more).
Never allowed: other bytes, a short read before the end of the version's bytes, another errno.

What had to be allowed, and why:
  - a member cut by the shard's end (a truncated shard): listed with its header's size; its
    bytes that are in the shard may be read, a read past them gives EIO (docs/faults.md "Bad input");
  - a version is the bytes and the identity the mount compares (size, mtime, ctime, inode): a
    touch, or a 'tar -rf' that refuses a truncated shard, makes a new version of the same
    bytes, so ESTALE is allowed after it;
  - each change stamps a distinct mtime: nginx's ETag is mtime (seconds) and size, so two
    versions of one size within a second would share an ETag (the server's weakness);
  - a refresh of the proxied mount that cannot list under faults leaves it as it was; faults
    are turned off for its remounts (a mount whose listing fails does not mount).

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import tarfile  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

# Every operation, with its weight.
OPS = {
    # reads, through a random mount
    'read': 12,          # a member by path, whole
    'pread': 10,         # a member at a random range
    'raw': 6,            # the raw shard at a random range
    'plain': 2,          # a plain (non-shard) file, e.g. a sidecar, whole
    'ls': 4,             # listing of the root or of a shard's directory
    'stat': 3,           # st_size of a member or of a raw shard
    'stat-attrs': 3,     # lstat of an entry of a shard: type, mode, mtime, size, link target
    # source changes (local directory; nginx serves the same tree)
    'rewrite-same': 3,   # a shard rewritten in place, same size (other bytes, other order)
    'rewrite-size': 3,   # a shard rewritten in place, another size
    'rewrite-swap': 2,   # same size, first/last headers and last 64 KiB kept, two middle
                         # members swap sizes (the stale-sidecar case)
    'append': 2,         # tar -rf of one member
    'truncate': 2,       # a shard truncated
    'delete': 2,         # a shard deleted (never the last one: see 'empty')
    'empty': 1,          # every shard and sidecar deleted: the source directory is empty
    'add': 2,            # a new shard
    'add-rich': 2,       # a new shard of pax or GNU format: long names and link targets,
                         # an explicit directory, a symlink, a hardlink, modes and mtimes
    'swap': 1,           # mv d d.old; mkdir d; copy the shards back, some changed
    'sidecar': 2,        # shardfs index --sidecar over the source (before later changes)
    # mount events
    'refresh': 3,
    'refresh-counts': 1,  # a refresh whose summary ("N new, N removed, N changed; N objects,
                          # N shards") must match the model's
    'remount': 1,
    'kill9': 1,          # kill -9 of a daemon, then remount
    # cache damage (CACHE_DIR/v1/...)
    'damage-meta': 1,    # a saved index (meta/): truncate, flip a byte, punch a hole or delete,
                         # every mount unmounted first, then mounted again
    'damage-meta-live': 1,  # the same under the running mounts
    'damage-data': 1,    # a remote object's data, .st or .map file, under the running mounts
                         # (cut, a byte flipped, a hole, deleted)
    'damage-data-remount': 1,  # the same, flips too, every mount unmounted, then mounted
    # the fault proxy in front of nginx
    'faults': 1,         # toggles random faults (503, cut, trunc) on the proxied mount
}

# Operations disabled by default: they reach bugs not fixed yet. Enable with --ops +NAME once
# the fix has landed, and then by default here.
WAITING = {
}


REGRESSIONS = [
    # A shard changed, refresh, then deleted (http) or deleted and noticed by a read (local):
    # 'ls MNT/s5/' listed an empty directory, exit 0. The index build failed with ENOENT
    # ("cannot read its first bytes") and readdir passed ENOENT on, which glibc's readdir
    # takes for the end of the directory. Fixed: readdir gives ESTALE (fs/core/fs_ops.c).
    (4, 128, 'read,ls,rewrite-size,delete,add,refresh', 'http: a gone shard listed empty'),
    (2, 87, 'read,ls,rewrite-size,delete,add,refresh', 'local: a gone shard listed empty'),
    # Each of these found a bug while the operation waited for its fix (now in; the op is on
    # by default):
    # 'refresh' after reads noticed a removal and a change reported "0 removed, 0 changed"
    # (the local mount said "1 removed, 0 changed", the model 3 removed, 1 changed).
    (2, 83, 'read,pread,ls,rewrite-size,delete,add,refresh-counts',
     'refresh counts what reads noticed'),
    # qsort(NULL, 0) of an empty listing: the ASan+UBSan daemon died at a refresh of a source
    # that became empty (fs_ns_list.c fs__ns_listing_sort), and a mount of an empty directory failed.
    (2, 7, 'read,ls,delete,add,refresh,empty', 'a source that became empty'),
    # mv d d.old; mkdir d: refresh said "0 new, 0 removed" and the local mount served the old
    # directory (ls lacked s4.tar, new in the new directory).
    (2, 36, 'read,ls,swap,refresh', 'a source directory renamed over'),
    # a stale sidecar (two middle members swap sizes; same size, ends and tail): a wrong byte
    # of m1.bin on the proxied mount; a short read of m0.bin; stat gave the old size forever.
    (3, 49, 'read,pread,ls,rewrite-swap,refresh', 'stale sidecar: wrong byte'),
    (1, 19, 'read,pread,ls,rewrite-swap,refresh', 'stale sidecar: short read'),
    # a saved index changed in place under the running mounts (a byte flipped, a hole, a
    # truncation): it was checked only when mapped, so a member read gave EISDIR and a cut
    # file faulted the daemon (SIGBUS). Fixed: the mapped index files are watched (inotify,
    # cachetier/cachetier_watch.c) and one that changed is dropped and built again.
    (2, 241, 'read,pread,ls,stat,raw,damage-meta-live', 'a saved index changed under the mount'),
    (7, 201, 'read,pread,ls,stat,raw,damage-meta-live', 'a saved index changed: EISDIR'),
    # cached data damaged under a running mount: a hole's zeros served in s1.tar.
    (1, 67, 'read,pread,raw,damage-data', 'cache data damaged under the mount'),
    # a refresh counted a shard a read's sidecar check replaced by the same version as
    # changed, and a shard a lookup replaced and then removed as changed and removed
    # (fs_ns_replace, changed_since_refresh).
    (20261128, 498, 'read,pread,raw,plain,ls,stat,rewrite-same,rewrite-size,append,truncate,'
     'delete,add,sidecar,refresh,remount,kill9,damage-meta,faults,refresh-counts,empty,swap,'
     'rewrite-swap,damage-data', 'refresh counts: replaced, then removed'),
]


# The daemon's counters logged around each live damage (cross-checked: see damage()).
COUNTED = ('cache_units_corrupt', 'index_changed', 'index_errors', 'index_built',
           'read_errors', 'fills')
# Rounds of whole reads (the raw shard and every member) a damaged object gets to be repaired
# in: the first round's reads meet the damage (and may fail), the mount fetches or indexes
# again; the next round must be exact.
REPAIR_ROUNDS = 3
# The share of answers that must be exact in a run of FLOOR_STEPS steps or more (see
# docs/tests.md for the measured shares and why this floor).
EXACT_FLOOR = 0.90
FLOOR_STEPS = 300

# --mount-opts: more options of every mount (e.g. '--cache-size 2M' to make eviction run)
MOUNT_OPTS = []


class Failure(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# The model: versions of source files
# ---------------------------------------------------------------------------------------------

class Partial:
    """A member whose data the shard's end cuts: listed, its bytes that are in the shard may
    be read, reading past them gives EIO (docs/faults.md, "Bad input")."""
    __slots__ = ('avail', 'size')

    def __init__(self, avail, size):
        self.avail = avail
        self.size = size

    def slice(self, off, ln):
        if off >= self.size:
            return b''  # at or past the member's end: end of file, as for a whole member
        end = self.size if ln is None else min(self.size, off + ln)
        return self.avail[off:end] if end <= len(self.avail) else EIO


EIO = 'EIO'


class Version:
    """One version of one source file: its bytes, and for a shard its members as Python's
    tarfile reads them (regular files and hardlinks, with their target's bytes; a name stored
    twice: the later copy), and the attributes of every entry (entries: name -> (kind 'f',
    'd' or 'l', mode, mtime, size, link target); a hardlink has its target's)."""
    __slots__ = ('data', 'members', 'shard', 'ident', 'entries', 'links')

    def __init__(self, name, data, ident=None):
        self.data = data
        # what the mount compares (docs/faults.md "When the mount sees changes"): size, mtime, ctime,
        # inode (nginx's ETag: mtime and size); a touch is a new version of the same bytes
        self.ident = ident
        self.shard = name.endswith('.tar')
        self.members = None
        self.entries = None
        self.links = {}  # hardlink -> its target
        if self.shard:
            self.members = {}
            self.entries = {}
            try:
                with tarfile.open(fileobj=io.BytesIO(data), mode='r:') as tf:
                    while True:
                        m = tf.next()
                        if m is None:
                            break
                        n = ml.normalize_member(m.name)
                        if m.isreg() and n:
                            d = data[m.offset_data:m.offset_data + m.size]
                            self.members[n] = d if len(d) == m.size else Partial(d, m.size)
                            self.entries[n] = ('f', m.mode & 0o7777, m.mtime, m.size, '')
                        elif m.islnk() and n:
                            t = ml.normalize_member(m.linkname)
                            if t in self.members:
                                self.members[n] = self.members[t]
                                self.entries[n] = self.entries[t]
                                self.links[n] = self.links.get(t, t)
                        elif m.isdir() and n:
                            self.entries[n] = ('d', m.mode & 0o7777, m.mtime, None, '')
                        elif m.issym() and n:
                            self.entries[n] = ('l', 0o777, m.mtime, None, m.linkname)
            except (tarfile.TarError, OSError, EOFError):
                # a truncated shard: the members before the damage (the mount serves them)
                pass

    def __eq__(self, o):
        return isinstance(o, Version) and o.data == self.data and o.ident == self.ident

    def __hash__(self):
        return hash((self.data, self.ident))


def size_or_zero(p):
    """The size of file p, 0 when it is gone (a cache that changes under the test)."""
    try:
        return os.path.getsize(p)
    except FileNotFoundError:
        return 0


def snapshot_source(d):
    """{name: Version} of the files in directory d (flat)."""
    out = {}
    if not os.path.isdir(d):
        return out
    for n in sorted(os.listdir(d)):
        p = os.path.join(d, n)
        if os.path.isfile(p):
            with open(p, 'rb') as f:
                st = os.fstat(f.fileno())
                out[n] = Version(n, f.read(), (st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                               st.st_ino))
    return out


class MountModel:
    """What one mount may show: per source file name, the list of allowed versions (None:
    absent), the first being the settled one."""

    def __init__(self, cur):
        self.damaged = {}  # object name -> what damaged it, until the mount's repair
        self.settle(cur)
        self.faulty = False

    def settle(self, cur, remount=False, stale_sidecars=None):
        self.allowed = {n: [v] for n, v in cur.items()}
        # shard -> the version its sidecar (in the source now) was made from, when that is
        # not the shard's version: the mount may load the sidecar (its identity can pass, as
        # after rewrite-swap); each member is then checked by its first read, which gives
        # ESTALE, and until then stat shows the sidecar's sizes (docs/mount.md: what each kind of
        # index is trusted on). Never the bytes the sidecar points to.
        self.stale_sidecars = stale_sidecars or {}

    def change(self, cur):
        names = set(cur) | set(self.allowed)
        for n in names:
            vs = self.allowed.setdefault(n, [None])
            v = cur.get(n)
            if v not in vs:
                vs.append(v)

    def pending(self, n):
        return len(self.allowed.get(n, [None])) > 1

    def errs_ok(self, n):
        """Why ESTALE, EIO or ENOENT may answer a request for file n now (the cause each
        tolerated error is counted under), or None: only exact answers."""
        if self.pending(n):
            return 'pending change'
        if n in self.stale_sidecars:
            return 'stale sidecar'
        if n in self.damaged:
            return 'damage (%s)' % self.damaged[n]
        if self.faulty:
            return 'faults'
        return None


# ---------------------------------------------------------------------------------------------
# The world: source, nginx, fault proxy, three mounts
# ---------------------------------------------------------------------------------------------

class World:
    def __init__(self, env, rng, ops, tag):
        self.env = env
        self.rng = rng
        # its own draws: sequences keep the steps they had before members had subdirectories
        self.sub_rng = random.Random(tag)
        self.over_rng = random.Random(tag + '/overwrite')
        self.ops = ops
        self.base = env.path(tag)
        k = 1
        while os.path.exists(self.base):  # the same seed run again (--regress)
            k += 1
            self.base = env.path('%s-run%d' % (tag, k))
        self.root = self.path('src')
        self.d = os.path.join(self.root, 'd')
        os.makedirs(self.d)
        self.cache = self.path('cache')
        self.mtime = 1700000000
        self.nshards = 0
        self.sidecar_src = {}  # shard -> the Version its last 'index --sidecar' read
        for _ in range(4):
            self.new_shard()
        self.ng = web.Nginx(self.path('nginx'), self.root, access_log=False).start()
        self.px = web.FaultProxy(self.ng.port)
        self.sources = [('local', self.d), ('http', self.ng.url('json/d/')),
                        ('proxy', self.px.url('json/d/'))]
        self.mounts = []
        self.models = []
        cur = snapshot_source(self.d)
        for i, (kind, s) in enumerate(self.sources):
            m = ml.Mount(self.env, s, mountpoint=self.path('mnt-%s' % kind), cache_dir=self.cache,
                         extra=['--chunk-size', '256K'] + MOUNT_OPTS)
            m.mount()
            self.mounts.append(m)
            self.models.append(MountModel(cur))
        self.step_no = 0
        # the checks and draws added after the regressions were found (the walk after each
        # step, overwrites of saved indexes): off in --regress runs, which replay as found
        self.extended = True
        self.walked = 0
        self.inodes = [{} for _ in self.mounts]  # per mount: (shard, version, entry) -> inode
        self.answers = {}  # 'exact' or 'tolerated: CAUSE' -> count
        self.damage_counts = {}  # what the damage steps drew and did

    def report(self, steps):
        """Log the answers by kind and the damage drawn; False when the share of exact
        answers is below EXACT_FLOOR (runs of at least FLOOR_STEPS steps)."""
        total = sum(self.answers.values())
        exact = self.answers.get('exact', 0)
        share = exact / total if total else 0.0
        log('== answers: %d, exact %d (%.2f%%); %d shard walks' % (total, exact, 100.0 * share,
                                                                   self.walked))
        for k, v in sorted(self.answers.items()):
            if k != 'exact':
                log('   %6d %s' % (v, k))
        for k, v in sorted(self.damage_counts.items()):
            log('   drawn: %d %s' % (v, k))
        if steps >= FLOOR_STEPS and share < EXACT_FLOOR:
            log('FAIL: %.2f%% of the answers exact, below the floor of %.0f%%' % (
                100.0 * share, 100.0 * EXACT_FLOOR))
            return False
        return True

    def count(self, what):
        self.answers[what] = self.answers.get(what, 0) + 1

    def path(self, *p):
        return os.path.join(self.base, *p)

    def close(self):
        for m in self.mounts:
            m.umount(quiet=True)
        self.px.close()
        self.ng.stop()

    # -- source files ---------------------------------------------------------------------

    def stamp(self, path):
        """A distinct mtime per change: nginx's ETag is mtime (seconds) and size, so two
        versions of one size within a second would share an ETag (a server's weakness the
        model does not test)."""
        self.mtime += 10
        os.utime(path, (self.mtime, self.mtime))

    def members(self, tag, n=None, sizes=None):
        rng = self.rng
        if sizes is None:
            sizes = [rng.choice([0, 1, 100, 511, 512, 513, 4096, 20000, 65536, 70000,
                                 rng.randrange(1, 150000)]) for _ in range(n or rng.randrange(2, 8))]
        out = []
        for i, s in enumerate(sizes):
            pat = bytes(rng.randrange(256) for _ in range(61))
            # some members in a subdirectory (implied: tar_bytes stores no directory entries)
            sub = 'sub/' if tag == 'k' and self.sub_rng.random() < 0.2 else ''
            out.append(('%s%s%d.bin' % (sub, tag, i), (pat * (s // 61 + 1))[:s]))
        return out

    def shards(self):
        return sorted(n for n in os.listdir(self.d) if n.endswith('.tar'))

    def new_shard(self):
        name = 's%d.tar' % self.nshards
        self.nshards += 1
        p = os.path.join(self.d, name)
        ml.write_file(p, ml.tar_bytes(self.members('k')))
        self.stamp(p)
        return name

    def changed(self, what):
        log('  %s' % what)
        cur = snapshot_source(self.d)
        for mm in self.models:
            mm.change(cur)

    def settle(self, i, remount=False):
        cur = snapshot_source(self.d)
        stale = {s: v for s, v in self.sidecar_src.items()
                 if s in cur and s + '.idx' in cur and v.data != cur[s].data}
        self.models[i].settle(cur, remount, stale)

    def pick_shard(self):
        s = self.shards()
        return self.rng.choice(s) if s else None

    # -- operations -------------------------------------------------------------------------

    def op_rewrite_same(self):
        s = self.pick_shard()
        if not s:
            return
        p = os.path.join(self.d, s)
        old = Version(s, open(p, 'rb').read())
        mem = list(old.members.items())
        if not mem or len(mem) != len(old.entries) or any(len(n) > 99 for n, _ in mem):
            return  # an add-rich shard: links, directories and long names (not in ustar)
        # the same sizes, other bytes, in another order: the same tar size
        new = self.members("k", sizes=[msize(d) for _, d in mem])
        new = [(n, d) for (n, _), (_, d) in zip(mem, new)]
        self.rng.shuffle(new)
        data = ml.tar_bytes(new)
        if len(data) != len(old.data):
            return
        with open(p, 'r+b') as f:
            f.write(data)
        self.stamp(p)
        self.changed('rewrite-same %s' % s)

    def op_rewrite_size(self):
        s = self.pick_shard()
        if not s:
            return
        p = os.path.join(self.d, s)
        with open(p, 'r+b') as f:
            f.truncate(0)
            f.write(ml.tar_bytes(self.members('k')))
        self.stamp(p)
        self.changed('rewrite-size %s' % s)

    def op_rewrite_swap(self):
        """Members k0 (kept), m1, m2 (sizes A, B), k3.. (kept): rewrite with m1, m2 of sizes
        B, A; the same total size, first and last headers, last 64 KiB."""
        s = self.pick_shard()
        if not s:
            return
        p = os.path.join(self.d, s)
        a, b = self.rng.choice([(10240, 20480), (512, 1536), (3000, 7000)])
        head = self.members('h', sizes=[1000])
        tail = self.members('t', sizes=[70000])
        mid = self.members('m', sizes=[a, b])
        ml.write_file(p, ml.tar_bytes(head + mid + tail))
        self.stamp(p)
        self.changed('rewrite-swap %s (written: the version before the swap)' % s)
        self.sidecar('before the swap')
        mid2 = [(mid[0][0], (mid[1][1] * 2)[:b]), (mid[1][0], (mid[0][1] * 3)[:a])]
        data = ml.tar_bytes(head + mid2 + tail)
        with open(p, 'r+b') as f:
            f.write(data)
        self.stamp(p)
        self.changed('rewrite-swap %s: members swap sizes %d/%d' % (s, a, b))

    def op_append(self):
        s = self.pick_shard()
        if not s:
            return
        p = os.path.join(self.d, s)
        stage = self.path('stage')
        shutil.rmtree(stage, ignore_errors=True)
        os.makedirs(stage)
        (n, data), = self.members('a%d_' % self.rng.randrange(1000), n=1)
        ml.write_file(os.path.join(stage, n), data)
        r = self.env.run(['tar', '-rf', p, '-C', stage, n])
        if r.returncode != 0:
            # a truncated shard: tar refuses (and may have written nothing)
            log('  tar -rf %s: %s' % (s, r.stderr.decode(errors='replace').strip()))
        self.stamp(p)
        self.changed('append %s %s (%d bytes)' % (s, n, len(data)))

    def op_truncate(self):
        s = self.pick_shard()
        if not s:
            return
        p = os.path.join(self.d, s)
        size = os.path.getsize(p)
        cut = self.rng.randrange(0, size + 1)
        os.truncate(p, cut)
        self.stamp(p)
        self.changed('truncate %s %d -> %d' % (s, size, cut))

    def op_delete(self):
        if len(self.shards()) < 2 and 'empty' not in self.ops:
            return
        s = self.pick_shard()
        if not s:
            return
        os.unlink(os.path.join(self.d, s))
        for x in (s + '.idx',):
            if os.path.exists(os.path.join(self.d, x)):
                os.unlink(os.path.join(self.d, x))
        self.changed('delete %s' % s)

    def op_empty(self):
        for n in os.listdir(self.d):
            os.unlink(os.path.join(self.d, n))
        self.changed('empty: rm d/*')

    def op_add_rich(self):
        name = 's%d.tar' % self.nshards
        self.nshards += 1
        p = os.path.join(self.d, name)
        rng = self.rng
        fmt = rng.choice([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
        bio = io.BytesIO()

        def info(n, kind, mode):
            ti = tarfile.TarInfo(n)
            ti.type = kind
            ti.mode = mode
            ti.mtime = 1500000000 + rng.randrange(1 << 28)
            return ti
        long_dir = 'deep/' + 'd' * rng.randrange(90, 160)
        with tarfile.open(fileobj=bio, mode='w', format=fmt) as tf:
            files = self.members('r')
            files[0] = ('k0.bin', files[0][1])
            files.append(('%s/%s.bin' % (long_dir, 'n' * rng.randrange(1, 120)),
                          files[-1][1]))
            ti = info('edir', tarfile.DIRTYPE, rng.choice([0o750, 0o700, 0o755, 0o555]))
            tf.addfile(ti)
            files.append(('edir/f.bin', files[0][1][:1000]))
            for n, d in files:
                ti = info(n, tarfile.REGTYPE, rng.choice([0o644, 0o600, 0o755, 0o444,
                                                          0o4755, 0o2750]))
                ti.size = len(d)
                tf.addfile(ti, io.BytesIO(d))
            ti = info('ln', tarfile.SYMTYPE, 0o777)
            ti.linkname = rng.choice(['k0.bin', files[-2][0], '../outside', '/abs/' + 'l' * 120])
            tf.addfile(ti)
            ti = info('hl.bin', tarfile.LNKTYPE, 0o644)
            ti.linkname = rng.choice(files)[0]
            tf.addfile(ti)
        ml.write_file(p, bio.getvalue())
        self.stamp(p)
        self.changed('add-rich %s (%s)' % (name, 'pax' if fmt == tarfile.PAX_FORMAT else 'gnu'))

    def op_add(self):
        s = self.new_shard()
        self.changed('add %s' % s)

    def op_swap(self):
        old = os.path.join(self.root, 'd.old')
        shutil.rmtree(old, ignore_errors=True)
        os.rename(self.d, old)
        os.makedirs(self.d)
        for n in sorted(os.listdir(old)):
            if n.endswith('.tar') and self.rng.random() < 0.8:
                if self.rng.random() < 0.5:
                    shutil.copy2(os.path.join(old, n), os.path.join(self.d, n))
                else:
                    p = os.path.join(self.d, n)
                    ml.write_file(p, ml.tar_bytes(self.members('k')))
                    self.stamp(p)
        self.new_shard()
        self.changed('swap: mv d d.old; mkdir d; %s' % ' '.join(self.shards()))
        # a local mount may serve the directory it opened (now d.old) until its refresh, and
        # the next swap removes d.old: every file it showed may then be absent (found by the
        # walk's extra lookups: seed 20261128, 600 steps, "s45.tar was removed under the
        # mount" after the second swap)
        for vs in self.models[0].allowed.values():
            if None not in vs:
                vs.append(None)

    def sidecar(self, why):
        r = self.env.run([self.env.shardfs, 'index', '--sidecar', '--cache-dir',
                          self.path('cache-index'), self.d], timeout=120)
        if r.returncode != 0:
            raise RuntimeError('index --sidecar: %s' % r.stderr)
        for n in sorted(os.listdir(self.d)):
            if n.endswith('.idx'):  # a distinct mtime, as for shards (nginx's ETag)
                self.stamp(os.path.join(self.d, n))
        cur = snapshot_source(self.d)
        self.sidecar_src = {n: v for n, v in cur.items() if n.endswith('.tar')}
        self.changed('sidecar (%s)' % why)

    def op_sidecar(self):
        self.sidecar('op')

    def op_refresh(self, counts=False):
        i = self.rng.randrange(len(self.mounts))
        before = {n: vs[0] for n, vs in self.models[i].allowed.items()}
        cur = snapshot_source(self.d)
        new = [n for n in cur if before.get(n) is None]
        removed = [n for n in before if before[n] is not None and n not in cur]
        if self.sources[i][0] == 'local':
            def same(x, y):
                return x == y
        else:
            # over http a version is the server's ETag (nginx: mtime and size) of the same
            # bytes: a copy that keeps mtime and size (cp -p in 'swap') is the same version
            def same(x, y):
                return x.data == y.data and x.ident[:2] == y.ident[:2]
        changed = [n for n in cur if before.get(n) is not None and not same(before[n], cur[n])]
        exp = (len(new), len(removed), len(changed), len(cur),
               len([n for n in cur if n.endswith('.tar')]))
        r = self.env.run([self.env.shardfs, 'refresh', self.mounts[i].mnt], timeout=120)
        log('  refresh %s: rc=%r %s' % (self.sources[i][0], r.returncode,
                                         r.stdout.decode(errors='replace').strip()))
        if r.returncode != 0 and self.models[i].faulty and \
                b'the source cannot be listed' in r.stderr:
            # the fault proxy failed the listing: the mount stays as it was (docs/faults.md)
            return
        if r.returncode != 0:
            raise Failure('refresh %s failed: rc=%r %s' % (self.sources[i][0], r.returncode,
                                                           r.stderr.decode(errors='replace')))
        if counts:
            want = (': %d new, %d removed, %d changed; %d objects, %d shards' % exp).encode()
            if want not in r.stdout:
                raise Failure('refresh %s: %r; the model: %r (new %s, removed %s, changed %s)' % (
                    self.sources[i][0], r.stdout.decode(errors='replace').strip(), want.decode(),
                    new, removed, changed))
        self.settle(i)

    def op_refresh_counts(self):
        self.op_refresh(True)

    def remount(self, i, kill):
        m = self.mounts[i]
        if self.models[i].faulty:
            self.op_faults()  # off: a mount whose listing fails does not mount
        if kill:
            pid = m.stats()['pid']
            ml.kill_daemon(self.env, pid, signal.SIGKILL)  # on purpose: not a crash
            ml.poll(lambda: not ml.pid_alive(pid), what='pid %d gone after kill -9' % pid)
            self.env.run(['fusermount3', '-u', '-z', m.mnt], timeout=30)
            m.umount(quiet=True)
        else:
            m.umount()
        m.mount()
        self.settle(i, True)
        self.inodes[i] = {}
        log('  %s %s' % ('kill -9 and remount' if kill else 'remount', self.sources[i][0]))

    def op_remount(self):
        self.remount(self.rng.randrange(len(self.mounts)), False)

    def op_kill9(self):
        self.remount(self.rng.randrange(len(self.mounts)), True)

    def cache_files(self, meta):
        out = []
        for d, _, files in os.walk(os.path.join(self.cache, 'v1')):
            parts = d.split(os.sep)
            for f in files:
                p = os.path.join(d, f)
                if meta and 'meta' in parts:
                    out.append(p)
                elif not meta and 'data' in parts:
                    out.append(p)
        return sorted(out)

    def damage(self, meta, live):
        """Damage one file of the cache: under the running mounts (live), or with every mount
        of the cache unmounted (then mounted again: a load must check what it loads). Only
        the objects whose cached bytes or saved index the file holds, on the mounts of its
        source, are damaged: they may answer ESTALE, EIO or ENOENT until the mount repairs
        them (repair below), every other object stays exact."""
        if not live:
            if self.models[2].faulty:
                self.op_faults()
            for m in self.mounts:
                m.umount()
        # Under running mounts the cache changes while we look: a temporary file is renamed,
        # eviction deletes a file. A file gone before it is damaged is not damaged (logged).
        files = [p for p in self.cache_files(meta) if size_or_zero(p) > 0]
        if not files:
            files = [None]
        p = self.rng.choice(files)
        if p is None:
            if not live:
                for i, m in enumerate(self.mounts):
                    m.mount()
                    self.inodes[i] = {}
            return
        hit = self.damage_targets(p, meta)
        before = self.counters() if live else None
        filled = False
        try:
            if live and not meta and re.fullmatch(r'[0-9a-f]{16}', os.path.basename(p)):
                with open(p, 'rb') as f:
                    cached = f.read()
            else:
                cached = None
            how = self.damage_file(p, meta, live)
            if how == 'flip' and cached is not None:
                # a flip in a unit this mount filled (its 64 KiB read non-zero): its CRC32C
                # must catch it
                u = self.flip_at - self.flip_at % 65536
                filled = bool(cached[u:u + 65536].strip(b'\0'))
        except FileNotFoundError:
            log('  damage: %s went away before it was damaged' % os.path.relpath(p, self.cache))
            how, hit = None, []
        if not live:
            for i, m in enumerate(self.mounts):
                m.mount()
                self.settle(i, True)
                self.inodes[i] = {}
        if how is None:
            return
        what = '%s %s%s' % ('index' if meta else 'data', how, '' if live else ' (remount)')
        self.count_damage('damage %s' % what)
        log('  damaged: %s' % (', '.join('%s %s' % (self.sources[i][0], n) for i, n in hit)
                               or 'no object a mount shows'))
        for i, n in hit:
            self.models[i].damaged[n] = what
            # an index dropped and built again makes a new shard of the same version: its
            # entries get new inode numbers (ESTALE for the old ones, fs/core/README.md)
            self.inodes[i] = {k: v for k, v in self.inodes[i].items() if k[0] != n}
        self.repair(hit)
        if before is not None:
            after = self.counters()
            if filled and hit:
                i = hit[0][0]
                if after[i]['cache_units_corrupt'] <= before[i]['cache_units_corrupt']:
                    raise Failure('%s: a byte flipped in a filled unit of %s, read exactly '
                                  'after, but cache_units_corrupt did not count it (%d)' % (
                                      self.sources[i][0], hit[0][1],
                                      after[i]['cache_units_corrupt']))
                self.count_damage('live flips of filled units counted in cache_units_corrupt')
            log('  counters after the repair: %s' % '; '.join(
                '%s %s' % (self.sources[i][0], ', '.join(
                    '%s +%d' % (c, after[i][c] - before[i][c]) for c in COUNTED
                    if after[i][c] != before[i][c]) or 'no change')
                for i in range(len(self.mounts))))

    def count_damage(self, k):
        self.damage_counts[k] = self.damage_counts.get(k, 0) + 1

    def counters(self):
        out = []
        for m in self.mounts:
            st = m.stats()
            out.append({c: st.get(c, 0) for c in COUNTED})
        return out

    def damage_targets(self, p, meta):
        """[(mount index, object name)] whose cached bytes or saved index the cache file p
        holds: the mounts of the source p's directory is of (its 'source' file), and the
        shard p's data file holds the bytes of (same size, same bytes wherever a unit is
        filled) or p's saved index names."""
        rel = os.path.relpath(p, os.path.join(self.cache, 'v1')).split(os.sep)
        try:
            with open(os.path.join(self.cache, 'v1', rel[0], 'source'), 'rb') as f:
                src = f.read().decode(errors='replace').strip()
        except OSError:
            return []
        mounts = [i for i, (_, s) in enumerate(self.sources) if s == src]
        out = []
        if meta:
            if len(rel) < 4 or not rel[2].startswith('f-'):
                log('  (the kept listing of %s: no object damaged)' % src)
                return []
            try:
                with open(p, 'rb') as f:
                    names = set(re.findall(rb's[0-9]+\.tar', f.read()))
            except OSError:
                return []
            for i in mounts:
                out += [(i, n.decode()) for n in sorted(names)
                        if n.decode() in self.models[i].allowed]
            return out
        base = os.path.join(os.path.dirname(p), rel[-1].split('.')[0])
        try:
            with open(base, 'rb') as f:
                cached = f.read()
        except OSError:
            cached = None
        for i in mounts:
            for n, vs in sorted(self.models[i].allowed.items()):
                if cached is None or any(v is not None and holds(cached, v.data) for v in vs):
                    out.append((i, n))
        return out

    def repair(self, hit):
        """The mount's repair of each damaged object: a process reads it (the raw shard and
        every member, whole, past the kernel's caches) until one round gives exact answers
        only, at most REPAIR_ROUNDS rounds; each error before is counted as tolerated. From
        then on the object owes exact answers again."""
        for i, n in hit:
            mm = self.models[i]
            for rnd in range(REPAIR_ROUNDS):
                with open('/proc/sys/vm/drop_caches', 'w') as f:
                    f.write('3\n')
                errs = []
                for what, path, exp in self.whole_reads(i, n):
                    got = pread_result(path, 0, None)
                    if got[0] == 'ok' and any(got[1] == x for x in exp if isinstance(x, bytes)):
                        self.count('exact')
                    elif got[0] == 'err' and (None in exp and got[1] == errno.ENOENT or
                                              EIO in exp and got[1] == errno.EIO):
                        self.count('exact' if got[1] == errno.ENOENT else
                                   'tolerated: EIO past a cut member')
                    elif got[0] == 'err' and got[1] in (errno.ESTALE, errno.EIO, errno.ENOENT):
                        self.count('tolerated: damage (%s), %s' % (
                            mm.damaged.get(n), errno.errorcode[got[1]]))
                        errs.append('%s %s' % (what, errno.errorcode[got[1]]))
                    else:
                        raise Failure('%s: repair of %s (%s): %s gave %s' % (
                            self.sources[i][0], n, mm.damaged.get(n), what,
                            describe(got[1]) if got[0] == 'ok' else
                            errno.errorcode.get(got[1], got[1])))
                if not errs:
                    log('  %s %s repaired after %d round(s)' % (self.sources[i][0], n, rnd + 1))
                    mm.damaged.pop(n, None)
                    break
                log('  %s %s: %s' % (self.sources[i][0], n, ', '.join(errs)))
            else:
                raise Failure('%s: %s (%s) still not exact after %d rounds of reads' % (
                    self.sources[i][0], n, mm.damaged.get(n), REPAIR_ROUNDS))

    def whole_reads(self, i, n):
        """(label, path, allowed answers) of object n and its members through mount i."""
        mm = self.models[i]
        mnt = self.mounts[i].mnt
        vs = mm.allowed.get(n, [None])
        out = [(n, os.path.join(mnt, n), [None if v is None else v.data for v in vs])]
        names = set()
        for v in vs:
            if v is not None and v.members:
                names |= set(v.members)
        for m in sorted(names):
            exp = []
            for v in vs:
                if v is None or m not in v.members:
                    exp.append(None)
                elif isinstance(v.members[m], Partial):
                    exp += [v.members[m].slice(0, None), EIO]
                else:
                    exp.append(v.members[m])
            out.append(('%s/%s' % (n[:-4], m), os.path.join(mnt, n[:-4], m), exp))
        return out

    def damage_file(self, p, meta, live):
        """Damage file p of the cache (FileNotFoundError when it went away first)."""
        size = os.path.getsize(p)
        # a byte flipped under a running mount in a data unit this mount filled is seen too:
        # the cache tier watches the data files in use and checks their units again after a
        # change (inotify IN_MODIFY, cachetier/README.md "Checked bytes")
        how = self.rng.choice(['truncate', 'flip', 'punch', 'delete'])
        # a saved index written over in place with another shard's saved index (a valid blob
        # of another identity), drawn from its own generator (sequences keep their steps)
        others = [q for q in self.cache_files(True) if q != p and '/f-' in q and
                  os.path.dirname(os.path.dirname(q)) == os.path.dirname(os.path.dirname(p))]
        if self.extended and meta and '/f-' in p and others and self.over_rng.random() < 0.3:
            src = self.over_rng.choice(others)
            try:
                with open(src, 'rb') as f:
                    blob = f.read()
            except FileNotFoundError:
                blob = None
            if blob:
                with open(p, 'r+b') as f:
                    f.write(blob)
                    f.truncate(len(blob))
                log('  damage overwrite %s with %s (%d bytes)' % (
                    os.path.relpath(p, self.cache), os.path.relpath(src, self.cache), len(blob)))
                return 'overwrite'
        if how == 'truncate':
            os.truncate(p, self.rng.randrange(0, size))
        elif how == 'flip':
            off = self.flip_at = self.rng.randrange(size)
            with open(p, 'r+b') as f:
                f.seek(off)
                b = f.read(1)
                f.seek(off)
                f.write(bytes([b[0] ^ (1 << self.rng.randrange(8))]))
            how += ' @%d' % off
        elif how == 'punch':
            off = self.rng.randrange(size) & ~4095
            r = self.env.run(['fallocate', '--punch-hole', '-o', str(off), '-l', '65536', p])
            if r.returncode != 0 and not os.path.exists(p):
                raise FileNotFoundError(p)
            if r.returncode != 0:
                raise RuntimeError('fallocate --punch-hole %s: %s' % (p, r.stderr))
            how += ' @%d' % off
        else:
            os.unlink(p)
        # (no drop_caches: truncate, the hole and the write all change the page cache too)
        log('  damage %s %s (%d bytes)%s' % (how, os.path.relpath(p, self.cache), size,
                                             '' if live else ', every mount unmounted'))
        return how.split(' ')[0]

    def op_damage_meta(self):
        self.damage(True, False)

    def op_damage_meta_live(self):
        self.damage(True, True)

    def op_damage_data(self):
        self.damage(False, True)

    def op_damage_data_remount(self):
        self.damage(False, False)

    def op_faults(self):
        mm = self.models[2]
        if mm.faulty:
            self.px.set('pass')
            mm.faulty = False
            log('  faults off')
        else:
            self.px.set_random(0.3, seed=self.rng.randrange(1 << 30),
                               modes=('503', 'cut', 'trunc'))
            mm.faulty = True
            log('  faults on (503, cut, trunc at 30%)')

    # -- reads ------------------------------------------------------------------------------

    def pick_read(self, want_shard):
        i = self.rng.randrange(len(self.mounts))
        mm = self.models[i]
        names = sorted(n for n, vs in mm.allowed.items()
                       if (n.endswith('.tar') if want_shard else not n.endswith('.tar')))
        if not names:
            return i, mm, None
        return i, mm, self.rng.choice(names)

    def check(self, i, what, got, expected, errs_ok):
        """got: ('ok', value) or ('err', errno); expected: values allowed (None: ENOENT
        allowed). errs_ok: None, or why ESTALE, EIO, ENOENT are allowed too (the cause the
        answer is counted under). Every answer is counted: exact (a version's bytes, or ENOENT
        of an absent file) or tolerated, by cause."""
        label = '%s: %s' % (self.sources[i][0], what)
        if got[0] == 'err':
            e = got[1]
            ok = True
            if e == errno.ENOENT and None in expected:
                self.count('exact')
            elif e == errno.EIO and any(x is EIO for x in expected):
                self.count('tolerated: EIO past a cut member')
            elif errs_ok and e in (errno.ESTALE, errno.EIO, errno.ENOENT):
                self.count('tolerated: %s, %s' % (errs_ok, errno.errorcode.get(e, e)))
            else:
                ok = False
            desc = errno.errorcode.get(e, e)
        else:
            ok = any(x is not None and x is not EIO and got[1] == x for x in expected)
            if ok:
                self.count('exact')
            desc = describe(got[1])
        log('  %s -> %s%s' % (label, desc, '' if ok else '   <-- NOT ALLOWED'))
        if not ok:
            exp = ['ENOENT' if x is None else x if x is EIO else describe(x) for x in expected]
            if errs_ok:
                exp.append('ESTALE/EIO/ENOENT (%s)' % errs_ok)
            if got[0] == 'ok':
                for x in expected:
                    if isinstance(x, bytes) and isinstance(got[1], bytes) and \
                            len(got[1]) < len(x) and x.startswith(got[1]):
                        exp.append('(a SHORT read: %d of %d bytes)' % (len(got[1]), len(x)))
            raise Failure('%s: got %s; allowed: %s' % (label, desc, '; '.join(exp)))

    def member_read(self, ranged):
        i, mm, s = self.pick_read(True)
        if not s:
            return
        names = set()
        for v in mm.allowed[s]:
            if v is not None and v.members:
                names |= set(v.members)
        if not names:
            return
        n = self.rng.choice(sorted(names))
        path = os.path.join(self.mounts[i].mnt, s[:-4], n)
        exp = []
        sizes = [msize(v.members[n]) for v in mm.allowed[s] if v is not None and n in v.members]
        off, ln = 0, None
        if ranged:
            size = self.rng.choice(sizes)
            off = self.rng.randrange(0, size + 2)
            ln = self.rng.choice([1, 100, 4096, 65536, 70000, self.rng.randrange(1, 200000)])
        for v in mm.allowed[s]:
            if v is None or n not in v.members:
                exp.append(None)
            else:
                d = v.members[n]
                if isinstance(d, Partial):
                    exp.append(d.slice(off, ln))
                    exp.append(EIO)
                else:
                    exp.append(d if ln is None else d[off:off + ln])
        sv = mm.stale_sidecars.get(s)
        if sv is not None and n in sv.members and off >= msize(sv.members[n]):
            # past the size the stale sidecar gave (stat showed it): the kernel's end of file
            exp.append(b'')
        got = pread_result(path, off, ln)
        self.check(i, '%s %s/%s%s' % ('pread' if ranged else 'read', s[:-4], n,
                                      ' [%d+%d]' % (off, ln) if ranged else ''),
                   got, exp, mm.errs_ok(s))

    def op_stat(self):
        i, mm, s = self.pick_read(True)
        if not s:
            return
        names = set()
        for v in mm.allowed[s]:
            if v is not None and v.members:
                names |= set(v.members)
        if names and self.rng.random() < 0.7:
            n = self.rng.choice(sorted(names))
            path = os.path.join(self.mounts[i].mnt, s[:-4], n)
            exp = [None if v is None or n not in v.members else msize(v.members[n])
                   for v in mm.allowed[s]]
            sv = mm.stale_sidecars.get(s)
            if sv is not None and n in sv.members:
                exp.append(msize(sv.members[n]))  # the sidecar's size, until a read checks
            what = 'stat %s/%s' % (s[:-4], n)
        else:
            path = os.path.join(self.mounts[i].mnt, s)
            exp = [None if v is None else len(v.data) for v in mm.allowed[s]]
            what = 'stat %s' % s
        try:
            got = ('ok', os.stat(path).st_size)
        except OSError as e:
            got = ('err', e.errno)
        self.check(i, what, got, exp, mm.errs_ok(s))

    def op_stat_attrs(self):
        i, mm, s = self.pick_read(True)
        if not s or s in mm.stale_sidecars:
            return
        names = set()
        for v in mm.allowed[s]:
            if v is not None and v.entries:
                names |= set(v.entries)
        if not names:
            return
        n = self.rng.choice(sorted(names))
        path = os.path.join(self.mounts[i].mnt, s[:-4], n)
        exp = []
        for v in mm.allowed[s]:
            e = None if v is None else v.entries.get(n)
            if e is None:
                exp.append(None)
            else:
                kind, mode, mtime, size, link = e
                if kind == 'f' and isinstance(v.members.get(n), Partial):
                    exp.append(EIO)  # its index may say what the cut shard lacks
                exp.append((kind, mode, mtime, size, link))
        try:
            st = os.lstat(path)
            kind = 'f' if stat.S_ISREG(st.st_mode) else 'd' if stat.S_ISDIR(st.st_mode) else \
                'l' if stat.S_ISLNK(st.st_mode) else oct(stat.S_IFMT(st.st_mode))
            got = ('ok', (kind, stat.S_IMODE(st.st_mode), int(st.st_mtime),
                          st.st_size if kind == 'f' else None,
                          os.readlink(path) if kind == 'l' else ''))
        except OSError as e:
            got = ('err', e.errno)
        self.check(i, 'lstat %s/%s' % (s[:-4], n), got, exp, mm.errs_ok(s))

    def op_read(self):
        self.member_read(False)

    def op_pread(self):
        self.member_read(True)

    def op_raw(self):
        i, mm, s = self.pick_read(True)
        if not s:
            return
        sizes = [len(v.data) for v in mm.allowed[s] if v is not None]
        if not sizes:
            sizes = [0]
        off = self.rng.randrange(0, self.rng.choice(sizes) + 2)
        ln = self.rng.choice([1, 512, 65536, 300000, self.rng.randrange(1, 600000)])
        exp = [None if v is None else v.data[off:off + ln] for v in mm.allowed[s]]
        got = pread_result(os.path.join(self.mounts[i].mnt, s), off, ln)
        self.check(i, 'raw %s [%d+%d]' % (s, off, ln), got, exp, mm.errs_ok(s))

    def op_plain(self):
        i, mm, s = self.pick_read(False)
        if not s:
            return
        exp = [None if v is None else v.data for v in mm.allowed[s]]
        got = pread_result(os.path.join(self.mounts[i].mnt, s), 0, None)
        self.check(i, 'plain %s' % s, got, exp, mm.errs_ok(s))

    def op_ls(self):
        i = self.rng.randrange(len(self.mounts))
        mm = self.models[i]
        mnt = self.mounts[i].mnt
        shards = sorted(n for n in mm.allowed if n.endswith('.tar'))
        if shards and self.rng.random() < 0.6:
            s = self.rng.choice(shards)
            try:
                got = ('ok', sorted(os.listdir(os.path.join(mnt, s[:-4]))))
            except OSError as e:
                got = ('err', e.errno)
            exp = [None if v is None else sorted(listing_names(v.entries))
                   for v in mm.allowed[s]]
            self.check(i, 'ls %s/' % s[:-4], got, exp, mm.errs_ok(s))
            return
        try:
            got = set(os.listdir(mnt))
        except OSError as e:
            self.check(i, 'ls /', ('err', e.errno), [], False)
            return
        label = '%s: ls / -> %s' % (self.sources[i][0], ' '.join(sorted(got)))
        log('  ' + label)
        known = set()
        for n, vs in sorted(mm.allowed.items()):
            names = {n, n[:-4]} if n.endswith('.tar') else {n}
            known |= names
            present = names & got
            if present and present != names:
                raise Failure('%s: %s shows only %s' % (label, n, sorted(present)))
            if bool(present) not in {v is not None for v in vs}:
                raise Failure('%s: %s %s; allowed: %s' % (
                    label, n, 'present' if present else 'absent',
                    ' or '.join(sorted({'present' if v is not None else 'absent' for v in vs}))))
        if got - known:
            raise Failure('%s: unknown names %s' % (label, sorted(got - known)))

    def run_step(self, op):
        self.step_no += 1
        log('step %d: %s' % (self.step_no, op))
        getattr(self, 'op_' + op.replace('-', '_'))()
        if self.extended:
            for i in range(len(self.mounts)):
                self.walk(i)

    def walk(self, i):
        """A walk of the whole tree of mount i (readdir and lstat of every entry, as find
        does), after every step: each settled shard (one version, no damage, no stale
        sidecar, no faults) lists exactly its entries and the directories they imply, each
        entry of the type, mode, mtime, size and link target of its tar entry; inode numbers
        are unique within the walk (a hardlink shares its target's) and stable: an entry of
        the same version of a shard keeps its inode for the mount's life."""
        mm = self.models[i]
        if mm.faulty:
            return
        mnt = self.mounts[i].mnt
        inos = {}
        for s, vs in sorted(mm.allowed.items()):
            v = vs[0]
            if not s.endswith('.tar') or len(vs) != 1 or v is None or s in mm.damaged or \
                    s in mm.stale_sidecars:
                continue
            if i > 0 and s + '.idx' in mm.allowed:
                # a remote mount trusts a sidecar per member: its sizes show until a member's
                # first read checks it (docs/mount.md). Seed 20261128, 66 steps: after
                # rewrite-swap (54), a new sidecar of the current shard (65) and a refresh
                # (66), the http mount showed the old layout's size and its first read found
                # "its sidecar index is wrong": which sidecar a remote mount loaded is not
                # modelled yet, so sidecar-indexed shards of remote mounts are checked by
                # reads only
                continue
            top = os.path.join(mnt, s[:-4])
            want = {}
            for n, e in v.entries.items():
                want[n] = e
                parts = n.split('/')
                for k in range(1, len(parts)):
                    want.setdefault('/'.join(parts[:k]), ('d', 0o755, None, None, ''))
            got = {}
            try:
                for d, dirs, files in os.walk(top):
                    for n in dirs + files:
                        p = os.path.join(d, n)
                        st = os.lstat(p)
                        rel = os.path.relpath(p, top)
                        kind = 'f' if stat.S_ISREG(st.st_mode) else 'd' if \
                            stat.S_ISDIR(st.st_mode) else 'l' if stat.S_ISLNK(st.st_mode) else '?'
                        got[rel] = (kind, stat.S_IMODE(st.st_mode), int(st.st_mtime),
                                    st.st_size if kind == 'f' else None,
                                    os.readlink(p) if kind == 'l' else '', st.st_ino)
            except OSError as e:
                raise Failure('%s: walk of %s/: %s' % (self.sources[i][0], s[:-4], e))
            self.walked += 1  # (not in the answers: a walk tolerates nothing)
            if set(got) != set(want):
                raise Failure('%s: walk of %s/: only in the mount %s; only in the tar %s' % (
                    self.sources[i][0], s[:-4], sorted(set(got) - set(want))[:5],
                    sorted(set(want) - set(got))[:5]))
            for n, e in want.items():
                g = got[n]
                if e[2] is None:  # an implied directory: a directory of 0755
                    ok = g[:2] == e[:2]
                else:
                    ok = g[:5] == e
                if not ok:
                    raise Failure('%s: walk: %s/%s is %r, its tar entry %r' % (
                        self.sources[i][0], s[:-4], n, g[:5], e))
                key = (s, v.data, v.ident, n)
                ino = g[5]
                was = self.inodes[i].get(key)
                if was is not None and was != ino:
                    raise Failure('%s: walk: %s/%s changed inode %d -> %d within the mount\'s '
                                  'life, the same version' % (self.sources[i][0], s[:-4], n,
                                                              was, ino))
                self.inodes[i][key] = ino
                other = inos.get(ino)
                if other is not None and not (v.links.get(n) or n) == \
                        (v.links.get(other[1]) or other[1]):
                    raise Failure('%s: walk: %s/%s and %s/%s share inode %d' % (
                        self.sources[i][0], s[:-4], n, other[0][:-4], other[1], ino))
                inos[ino] = (s, n)


def holds(cached, data):
    """Does a cache data file (cached: its bytes) hold object bytes data: the same size,
    and the same bytes in every 64 KiB unit it has filled (a unit not filled reads zeros)?"""
    if len(cached) != len(data):
        return False
    u = 65536
    for off in range(0, len(cached), u):
        c = cached[off:off + u]
        if c != data[off:off + u] and c.strip(b'\0'):
            return False
    return True


def msize(d):
    return d.size if isinstance(d, Partial) else len(d)


def describe(v):
    if isinstance(v, bytes):
        return '%d bytes %s' % (len(v), ml.short(v[:12]))
    return ml.short(v, 300)


def listing_names(members):
    """Top-level names of a shard's directory: its entries (members, directories, links) and
    the directories they imply."""
    return {n.split('/')[0] for n in members}


def pread_result(path, off, ln):
    """('ok', bytes) of one open and reads from off (ln bytes, or to EOF when ln is None) in a
    loop until ln bytes or EOF; or ('err', errno)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return ('err', e.errno)
    try:
        out = []
        got = 0
        while ln is None or got < ln:
            want = 1 << 20 if ln is None else min(1 << 20, ln - got)
            b = os.pread(fd, want, off + got)
            if not b:
                break
            out.append(b)
            got += len(b)
        return ('ok', b''.join(out))
    except OSError as e:
        return ('err', e.errno)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------

def parse_ops(spec):
    ops = [o for o in OPS if o not in WAITING]
    if spec:
        items = spec.split(',')
        if all(x[:1] in '+-' for x in items):
            for x in items:
                if x[1:] not in OPS:
                    raise SystemExit('unknown op %r (ops: %s)' % (x[1:], ' '.join(OPS)))
                if x[0] == '+' and x[1:] not in ops:
                    ops.append(x[1:])
                elif x[0] == '-' and x[1:] in ops:
                    ops.remove(x[1:])
        else:
            for x in items:
                if x not in OPS:
                    raise SystemExit('unknown op %r (ops: %s)' % (x, ' '.join(OPS)))
            ops = items
    return ops


def run_sequence(env, seed, steps, ops, extended=True):
    log('== model: seed %d, %d steps, ops %s' % (seed, steps, ','.join(ops)))
    for o in ops:
        if o in WAITING:
            log('   (op %s waits for %s)' % (o, WAITING[o]))
    rng = random.Random(seed)
    w = World(env, rng, ops, 'seed-%d' % seed)
    w.extended = extended
    weights = [OPS[o] for o in ops]
    t0 = time.monotonic()
    try:
        for _ in range(steps):
            w.run_step(rng.choices(ops, weights)[0])
    except Failure as e:
        log('FAIL: seed %d step %d: %s' % (seed, w.step_no, e))
        log('replay: %s %s --seed %d --steps %d --ops %s' % (
            sys.argv[0], env.shardfs, seed, w.step_no, ','.join(ops)))
        for m in w.mounts:
            try:
                st = m.stats()
                log('  stats %s: %s' % (m.mnt, {k: v for k, v in st.items() if v and (
                    'err' in k or 'stale' in k or 'sidecar' in k or 'change' in k or
                    'damag' in k or 'refresh' in k)}))
            except OSError as ex:
                log('  stats %s: %s' % (m.mnt, ex))
        for d, _, files in sorted(os.walk(w.cache)):
            if 'log' in files:
                log('-- %s (last 12 lines):' % os.path.join(d, 'log'))
                with open(os.path.join(d, 'log'), errors='replace') as f:
                    for line in f.read().splitlines()[-12:]:
                        log('  ' + line)
        return False
    finally:
        log('== seed %d: %d steps in %.1fs' % (seed, w.step_no, time.monotonic() - t0))
        w.close()
    return w.report(steps)


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith('-'):
        print(__doc__)
        return 2
    shardfs = args.pop(0)
    seed, steps, ops, regress = None, 300, None, False
    while args:
        a = args.pop(0)
        if a == '--seed':
            seed = int(args.pop(0))
        elif a == '--steps':
            steps = int(args.pop(0))
        elif a == '--ops':
            ops = args.pop(0)
        elif a == '--mount-opts':
            MOUNT_OPTS.extend(args.pop(0).split())
        elif a == '--regress':
            regress = True
        else:
            print(__doc__)
            return 2
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 31)
    runs = [(s, n, parse_ops(o), what) for s, n, o, what in REGRESSIONS] if regress else \
        [(seed, steps, parse_ops(ops), 'random')]

    def body(env, ck):
        for s, n, o, what in runs:
            log('== run: seed %d (%s)' % (s, what))
            # the regressions found their bugs without a walk after each step (which indexes
            # every shard at once): they run as they did
            ck.ok(run_sequence(env, s, n, o, extended=not regress), 'seed %d (%s)' % (s, what))
    ml.main_wrapper(body, shardfs, 'model', deadline=int(os.environ.get('MODEL_DEADLINE', 540)))


if __name__ == '__main__':
    sys.exit(main())
