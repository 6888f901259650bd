#!/usr/bin/python3
"""shardfs reference-model test: a seeded random sequence of source changes, refreshes,
remounts, kill -9s, cache damage and reads through three mounts on one cache directory
(a local source, the same directory over nginx, and over nginx behind a fault proxy; with
--s3 a fourth: the same directory uploaded to s3rver after every change); every
answer is compared with a model: Python's tarfile over the source as it is at that moment.

usage: test_model.py SHARDFS [--seed N] [--steps N] [--ops OP,OP,...|+OP,-OP,...]
                             [--mount-opts 'OPTS'] [--no-walk] [--s3] [--record FILE]
       test_model.py SHARDFS --replay FILE [--replay FILE...] | --regress
       test_model.py SHARDFS --shrink FILE [--tries N] [--out FILE]

  --seed N    the sequence (default a random one; printed); MODEL_SEED=N overrides it
  --steps N   operations per run (default 300)
  --ops LIST  the operations drawn from: a plain list replaces the default set, +OP/-OP add
              to it or take from it (see OPS and WAITING below)
  --mount-opts 'OPTS'  more options of every mount (e.g. '--cache-size 2M': eviction)
  --no-walk   no walk of the whole tree after each step
  --s3        a fourth mount: the source uploaded to s3rver (behind the SigV4-checking proxy)
              after every change, mounted as s3://model/d/
  --record FILE  write the run's trace to FILE (a failing run writes it anyway, to
              MODEL_TRACE_DIR or the current directory, and prints its name)
  --replay FILE  replay a trace: the same operations with the same choices
  --regress   replay every trace of tests/model/traces/ (the regressions)
  --shrink FILE  shrink a failing trace (delta debugging, at most --tries replays, default
              200): the shortest trace that still fails the same way goes to --out (default
              FILE.shrunk)

Traces. A run records its trace: one line per step, the operation and every choice it made as
JSON: the mount, the shard, the member, offset and length of a read; a change's shard and the
members it writes ([name, size, pattern]: the bytes repeat 61 bytes the pattern gives); the
cache file a damage step hit, by what it is (its source's mount, the object or shard it holds,
data/.st/.map or saved index: its name hashes the server's port and ETags) and the damage
(truncated to, the byte and bit flipped, the hole). A replay makes the same choices whatever
the state (a choice the trace lacks, after shrinking changed the state, is drawn from a
generator of the step: the same for every replay). 'init' steps are the shards made before
the mounts. A shrunk trace keeps what still fails the same way (failure_kind: the mount and
the class of failure, not the bytes). The fault proxy's faults and the daemon's own threads
(prefetch, eviction) are not in the trace: a replay makes the same requests, which the
daemon may answer from other cache states.

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
After every step (but in the traces of regressions found before it: 'config' says), a walk of each
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
    a sparse member's logical size, and its bytes up to the first data segment the cut
    reaches (shardidx_map: holes after it read EIO too);
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
import gzip  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import tarfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import s3servers  # noqa: E402
from shardfs_test import s3world  # noqa: E402
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
    'add-z': 2,          # a new compressed shard (.tar.gz, .tgz, .tar.zst; small members)
    'add-rich': 2,       # a new shard of pax or GNU format: long names and link targets,
                         # an explicit directory, a symlink, a hardlink, modes and mtimes;
                         # mostly a sparse member (GNU tar: old GNU, pax 0.0/0.1/1.0)
    'swap': 1,           # mv d d.old; mkdir d; copy the shards back, some changed
    'sidecar': 2,        # shardfs index --sidecar over the source (before later changes)
    'hold': 4,           # open a member or a raw shard and keep the descriptor (at most HELD)
    'held-read': 6,      # a read at a random range through a held descriptor
    'concurrent': 2,     # CONCURRENT readers at once through one mount, each reading whole
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


# The bucket of the s3 mount (--s3); S3[0]: this run has it
S3_BUCKET = 'model'
S3 = [False]

# Descriptors held open at once ('hold'), and readers at once ('concurrent').
HELD = 4
CONCURRENT = 4

# The regressions, as traces (tests/model/traces/*.trace): replayed by --regress.
TRACE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'traces')

# The daemon's counters logged around each live damage (cross-checked: see damage()).
COUNTED = ('cache_units_corrupt', 'index_changed', 'index_saved_rejected', 'index_errors',
           'index_built',
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

def sparse_spec(rng, fmt, mtime):
    """A sparse member's draw: its tar format ('gnu': old GNU sparse, in a GNU shard; a pax
    shard's: GNU.sparse 0.0, 0.1 or 1.0), logical size, mode, mtime and data segments
    [offset, length, seed] (the rest holes; a trailing hole at times, a leading one at
    times), or None (no sparse member)."""
    if rng.random() < 0.35:
        return None
    ver = 'gnu' if fmt == 'gnu' else rng.choice(['0.0', '0.1', '1.0'])
    segs, off = [], rng.choice([0, rng.randrange(1, 70000)])
    for _ in range(rng.randrange(1, 6)):
        ln = rng.choice([1, 511, 512, 4096, 5000, rng.randrange(1, 40000)])
        segs.append([off, ln, rng.randrange(1 << 30)])
        off += ln + rng.choice([4096, 8192, 65536, rng.randrange(1, 200000)])
    size = segs[-1][0] + segs[-1][1] + rng.choice([0, 0, 4096, rng.randrange(1, 100000)])
    return {'ver': ver, 'size': size, 'segs': segs, 'mtime': mtime,
            'mode': rng.choice([0o644, 0o600, 0o755])}


def sparse_bytes(seed, n):
    """n bytes of a data segment, none of them zero (holes are the only zeros)."""
    r = random.Random(seed)
    return bytes(1 + r.randrange(255) for _ in range(n))


def sparse_logical(data, m):
    """A sparse member's contents from the shard's bytes: its segments (m.sparse, stored one
    after another from m.offset_data), holes as zeros. When the shard's end cuts the stored
    data: a Partial whose bytes end where the first segment not wholly in the shard does
    (shardidx_map: a read past there, holes after it too, is EIO)."""
    out = bytearray(m.size)
    so = m.offset_data
    for off, ln in m.sparse:
        got = data[so:so + ln]
        out[off:off + len(got)] = got
        if len(got) < ln:
            return Partial(bytes(out[:off + len(got)]), m.size)
        so += ln
    return bytes(out)


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
        if is_shard(name) and not name.endswith('.tar'):
            data = decompress(name, data)
        # what the mount compares (docs/faults.md "When the mount sees changes"): size, mtime, ctime,
        # inode (nginx's ETag: mtime and size); a touch is a new version of the same bytes
        self.ident = ident
        self.shard = is_shard(name)  # (data: the tar stream, decompressed)
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
                        if m.isreg() and n and m.issparse():
                            d = sparse_logical(data, m)
                            self.members[n] = d
                            self.entries[n] = ('f', m.mode & 0o7777, int(m.mtime), m.size, '')
                        elif m.isreg() and n:
                            d = data[m.offset_data:m.offset_data + m.size]
                            self.members[n] = d if len(d) == m.size else Partial(d, m.size)
                            self.entries[n] = ('f', m.mode & 0o7777, int(m.mtime), m.size, '')
                        elif m.islnk() and n:
                            t = ml.normalize_member(m.linkname)
                            if t in self.members:
                                self.members[n] = self.members[t]
                                self.entries[n] = self.entries[t]
                                self.links[n] = self.links.get(t, t)
                        elif m.isdir() and n:
                            self.entries[n] = ('d', m.mode & 0o7777, int(m.mtime), None, '')
                        elif m.issym() and n:
                            self.entries[n] = ('l', 0o777, int(m.mtime), None, m.linkname)
            except (tarfile.TarError, OSError, EOFError, ValueError):
                # a truncated shard: the members before the damage (the mount serves them;
                # ValueError: tarfile on a GNU sparse 1.0 map the cut falls in, which the
                # mount does not list either)
                pass

    def __eq__(self, o):
        return isinstance(o, Version) and o.data == self.data and o.ident == self.ident

    def __hash__(self):
        return hash((self.data, self.ident))


def read_or_none(p):
    """The bytes of file p, None when it is gone."""
    try:
        with open(p, 'rb') as f:
            return f.read()
    except OSError:
        return None


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
    def __init__(self, env, rng, ops, tag, init=None, walk=True, s3=False):
        """init: the 'init' steps of a trace (the shards made before the mounts), or None:
        draw 4 (recording)."""
        self.env = env
        self.rng = rng
        # its own draws: sequences keep the steps they had before members had subdirectories
        self.sub_rng = random.Random(tag)
        self.over_rng = random.Random(tag + '/overwrite')
        self.ops = ops
        self.tag = tag
        self.replaying = init is not None
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
        # the trace: [(op, params)], every choice of every step resolved (see TRACES)
        self.trace = []
        self.cur = {}
        self.held = []  # descriptors held open (op_hold)
        for params in (init if init is not None else [None] * 4):
            self.begin('init', params)
            self.new_shard()
        self.ng = web.Nginx(self.path('nginx'), self.root, access_log=False).start()
        self.px = web.FaultProxy(self.ng.port)
        self.sources = [('local', self.d), ('http', self.ng.url('json/d/')),
                        ('proxy', self.px.url('json/d/'))]
        self.s3 = None
        self.s3_objs = {}  # name -> the bytes uploaded
        extra = {}
        if s3:
            # a fourth mount: the same directory in s3rver (behind the SigV4-checking proxy, as
            # the s3 tests run it), uploaded after every change
            self.s3 = s3servers.S3rver(self.base)
            self.s3px = s3servers.SigV4Proxy(self.s3.port, {s3world.KEY: (s3world.SECRET, None)})
            s3world.set_aws_env(env)
            self.s3.create_bucket(S3_BUCKET)
            self.s3_sync()
            self.sources.append(('s3', 's3://%s/d/' % S3_BUCKET))
            extra['s3'] = ['--endpoint', 'http://127.0.0.1:%d' % self.s3px.port]
        self.mounts = []
        self.models = []
        cur = snapshot_source(self.d)
        for i, (kind, s) in enumerate(self.sources):
            m = ml.Mount(self.env, s, mountpoint=self.path('mnt-%s' % kind), cache_dir=self.cache,
                         extra=['--chunk-size', '256K'] + extra.get(kind, []) + MOUNT_OPTS)
            m.mount()
            self.mounts.append(m)
            self.models.append(MountModel(cur))
        self.step_no = 0
        # the walk after each step: off in the traces of the regressions found before it
        # (it indexes every shard at once), which replay as they were found
        self.extended = walk
        self.walked = 0
        self.inodes = [{} for _ in self.mounts]  # per mount: (shard, version, entry) -> inode
        self.answers = {}  # 'exact' or 'tolerated: CAUSE' -> count
        self.by_kind = {}  # 'op OP' or 'mount KIND' -> [exact, answers]
        self.pending_apart = 0  # errors answering a pending change, held descriptors apart
        self.cur_mount = '?'
        self.evictions = 0  # evictions the daemons counted (before each unmount too)
        self.damage_counts = {}  # what the damage steps drew and did

    # -- the trace ---------------------------------------------------------------------------

    def begin(self, op, params):
        """Start a step: recording (params None), its choices are drawn and kept as they are
        made; replaying, they are the trace's. The step goes into the trace first, so a step
        that fails is in it with the choices it made."""
        self.cur = {} if params is None else dict(params)
        self.step_replayed = params is not None
        if params is not None:
            # a choice the trace lacks (the state differs from the recording's: a shrunk
            # trace) is drawn from a generator of the step: the same for every replay
            self.rng = random.Random('replay/%d/%s' % (len(self.trace), op))
        self.trace.append((op, self.cur))

    def draw(self, key, fn):
        """The step's choice KEY: the trace's, or fn() (a draw) kept in the trace."""
        if key not in self.cur:
            self.cur[key] = fn()
        return self.cur[key]

    def mount_index(self, kind):
        return [k for k, _ in self.sources].index(kind)

    def draw_mount(self):
        return self.mount_index(self.draw('m', lambda: self.sources[
            self.rng.randrange(len(self.mounts))][0]))

    def report(self, steps):
        """Log the answers by kind and the damage drawn; False when the share of exact
        answers is below EXACT_FLOOR (runs of at least FLOOR_STEPS steps). The reads through
        held descriptors are apart: after any change of their file ESTALE is the answer
        docs/faults.md gives (their exact share is logged, not floored)."""
        total = sum(self.answers.values())
        exact = self.answers.get('exact', 0)
        he, hn = self.by_kind.get('op held-read', [0, 0])
        # answers the floor weighs: neither through a held descriptor nor an error answering
        # a change of the source the mount has not refreshed yet (how many of those a run
        # meets depends on how many changes it drew before a refresh, not on the mount)
        owed = total - hn - self.pending_apart
        share = (exact - he) / owed if owed > 0 else 0.0
        log('== answers: %d, exact %d (%.2f%%); but the held descriptors\' and the %d errors '
            'answering a pending change: %d, exact %d (%.2f%%, the floor\'s share); '
            '%d shard walks' % (
                total, exact, 100.0 * exact / max(1, total), self.pending_apart, owed,
                exact - he, 100.0 * share, self.walked))
        for k, v in sorted(self.answers.items()):
            if k != 'exact':
                log('   %6d %s' % (v, k))
        log('   exact by %s' % '; '.join('%s %.1f%% of %d' % (k, 100.0 * e / n, n)
                                         for k, (e, n) in sorted(self.by_kind.items())))
        for k, v in sorted(self.damage_counts.items()):
            log('   drawn: %d %s' % (v, k))
        if '--cache-size' in MOUNT_OPTS:
            log('   evictions: %d (the daemons\' counts, summed)' % self.evictions)
            if self.evictions == 0 and steps >= FLOOR_STEPS:
                log('FAIL: a run with a small cache (%s) never evicted' % ' '.join(MOUNT_OPTS))
                return False
        if steps >= FLOOR_STEPS and share < EXACT_FLOOR:
            log('FAIL: %.2f%% of the answers exact, below the floor of %.0f%%' % (
                100.0 * share, 100.0 * EXACT_FLOOR))
            return False
        return True

    def count(self, what):
        self.answers[what] = self.answers.get(what, 0) + 1
        if (what.startswith('tolerated: pending change') and self.trace and
                self.trace[-1][0] != 'held-read'):
            self.pending_apart += 1
        # per operation and per mount: [exact, answers]
        for k in ('op ' + (self.trace[-1][0] if self.trace else '?'), 'mount ' + self.cur_mount):
            e = self.by_kind.setdefault(k, [0, 0])
            e[0] += what == 'exact'
            e[1] += 1

    def path(self, *p):
        return os.path.join(self.base, *p)

    def note_evictions(self, i=None):
        """Add the evictions the daemon of mount i (None: every mount) counted: before it
        ends."""
        for k in ([i] if i is not None else range(len(self.mounts))):
            try:
                self.evictions += self.mounts[k].stats().get('evictions', 0)
            except (OSError, ValueError, KeyError):
                pass

    def close(self):
        self.close_held()
        self.note_evictions()
        for m in self.mounts:
            m.umount(quiet=True)
        self.px.close()
        self.ng.stop()
        if self.s3:
            self.s3px.stop()
            self.s3.stop()

    # -- source files ---------------------------------------------------------------------

    def stamp(self, path):
        """A distinct mtime per change: nginx's ETag is mtime (seconds) and size, so two
        versions of one size within a second would share an ETag (a server's weakness the
        model does not test)."""
        self.mtime += 10
        os.utime(path, (self.mtime, self.mtime))

    def member_specs(self, tag, n=None, sizes=None):
        """[[name, size, pattern]] of new members (their bytes: materialize)."""
        rng = self.rng
        if sizes is None:
            sizes = [rng.choice([0, 1, 100, 511, 512, 513, 4096, 20000, 65536, 70000,
                                 rng.randrange(1, 150000)]) for _ in range(n or rng.randrange(2, 8))]
        out = []
        for i, s in enumerate(sizes):
            pat = bytes(rng.randrange(256) for _ in range(61))
            # some members in a subdirectory (implied: tar_bytes stores no directory entries)
            sub = 'sub/' if tag == 'k' and self.sub_rng.random() < 0.2 else ''
            out.append(['%s%s%d.bin' % (sub, tag, i), s, pat[:4].hex()])
        return out

    def shards(self):
        return sorted(n for n in os.listdir(self.d) if is_shard(n))

    def plain_shards(self):
        """The shards that are plain tars (the changes in place work on those)."""
        return [n for n in self.shards() if n.endswith('.tar')]

    def new_shard(self, ks='s', km='m'):
        name = self.draw(ks, lambda: 's%d.tar' % self.nshards)
        self.nshards = max(self.nshards, shard_no(name) + 1)
        p = os.path.join(self.d, name)
        ml.write_file(p, ml.tar_bytes(materialize(self.draw(km, lambda: self.member_specs('k')))))
        self.stamp(p)
        return name

    def s3_sync(self):
        """Upload what changed in the source directory to s3rver, delete what is gone (an
        object's version there: its bytes, ETag their MD5)."""
        if not self.s3:
            return
        names = set(os.listdir(self.d)) if os.path.isdir(self.d) else set()
        for n in sorted(names):
            p = os.path.join(self.d, n)
            if not os.path.isfile(p):
                continue
            with open(p, 'rb') as f:
                data = f.read()
            if self.s3_objs.get(n) != data:
                self.s3.put(S3_BUCKET, 'd/' + n, data)
                self.s3_objs[n] = data
        for n in sorted(set(self.s3_objs) - names):
            st, body = self.s3.request('DELETE', '/%s/d/%s' % (S3_BUCKET, n))
            if st not in (200, 204):
                raise RuntimeError('s3 delete %s: %d %r' % (n, st, body[:200]))
            del self.s3_objs[n]

    def changed(self, what):
        log('  %s' % what)
        self.s3_sync()
        cur = snapshot_source(self.d)
        for mm in self.models:
            mm.change(cur)

    def settle(self, i, remount=False):
        cur = snapshot_source(self.d)
        stale = {s: v for s, v in self.sidecar_src.items()
                 if s in cur and s + '.idx' in cur and v.data != cur[s].data}
        self.models[i].settle(cur, remount, stale)

    def pick_shard(self, plain=True):
        """A shard of the source (a plain tar, or any), the trace's when it still exists
        (replaying), or None."""
        s = self.draw('s', lambda: (lambda x: self.rng.choice(x) if x else None)(
            self.plain_shards() if plain else self.shards()))
        return s if s and os.path.isfile(os.path.join(self.d, s)) else None

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

        def draw():
            # the same sizes, other bytes, in another order: the same tar size
            new = self.member_specs("k", sizes=[msize(d) for _, d in mem])
            new = [[n, x[1], x[2]] for (n, _), x in zip(mem, new)]
            self.rng.shuffle(new)
            return new
        data = ml.tar_bytes(materialize(self.draw('m', draw)))
        if len(data) != len(old.data):
            return
        with open(p, 'r+b') as f:
            f.write(data)
        self.stamp(p)
        self.changed('rewrite-same %s' % s)

    def op_rewrite_size(self):
        s = self.pick_shard(plain=False)
        if not s:
            return
        p = os.path.join(self.d, s)
        data = compress(s, ml.tar_bytes(materialize(self.draw('m', lambda: self.member_specs(
            'k', sizes=None if s.endswith('.tar') else self.small_sizes())))))
        with open(p, 'r+b') as f:
            f.truncate(0)
            f.write(data)
        self.stamp(p)
        self.changed('rewrite-size %s' % s)

    def op_rewrite_swap(self):
        """Members k0 (kept), m1, m2 (sizes A, B), k3.. (kept): rewrite with m1, m2 of sizes
        B, A; the same total size, first and last headers, last 64 KiB."""
        s = self.pick_shard()
        if not s:
            return
        p = os.path.join(self.d, s)
        a, b = self.draw('ab', lambda: list(self.rng.choice([(10240, 20480), (512, 1536),
                                                             (3000, 7000)])))
        head = materialize(self.draw('h', lambda: self.member_specs('h', sizes=[1000])))
        tail = materialize(self.draw('t', lambda: self.member_specs('t', sizes=[70000])))
        mid = materialize(self.draw('mid', lambda: self.member_specs('m', sizes=[a, b])))
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
        (n, data), = materialize(self.draw('m', lambda: self.member_specs(
            'a%d_' % self.rng.randrange(1000), n=1)))
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
        cut = min(size, self.draw('to', lambda: self.rng.randrange(0, size + 1)))
        os.truncate(p, cut)
        self.stamp(p)
        self.changed('truncate %s %d -> %d' % (s, size, cut))

    def op_delete(self):
        if len(self.shards()) < 2 and 'empty' not in self.ops:
            self.draw('s', lambda: None)
        s = self.pick_shard(plain=False)
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
        name = self.draw('s', lambda: 's%d.tar' % self.nshards)
        self.nshards = max(self.nshards, shard_no(name) + 1)
        p = os.path.join(self.d, name)
        rng = self.rng

        def mtime():
            return 1500000000 + rng.randrange(1 << 28)

        def info(n, kind, mode, mt):
            ti = tarfile.TarInfo(n)
            ti.type = kind
            ti.mode = mode
            ti.mtime = mt
            return ti
        fmt = self.draw('fmt', lambda: rng.choice(['pax', 'gnu']))
        long_dir = 'deep/' + 'd' * self.draw('dirlen', lambda: rng.randrange(90, 160))
        files = [list(x) for x in self.draw('m', lambda: self.member_specs('r'))]
        files[0][0] = 'k0.bin'
        files.append(['%s/%s.bin' % (long_dir, 'n' * self.draw('nlen', lambda: rng.randrange(
            1, 120)))] + files[-1][1:])
        edir = self.draw('edir', lambda: [rng.choice([0o750, 0o700, 0o755, 0o555]), mtime()])
        files.append(['edir/f.bin', min(1000, files[0][1]), files[0][2]])
        modes = self.draw('fm', lambda: [[rng.choice([0o644, 0o600, 0o755, 0o444, 0o4755,
                                                      0o2750]), mtime()] for _ in files])
        ln = self.draw('ln', lambda: [mtime(), rng.choice(['k0.bin', files[-2][0],
                                                            '../outside', '/abs/' + 'l' * 120])])
        hl = self.draw('hl', lambda: [mtime(), rng.choice(files)[0]])
        # a sparse member written by GNU tar (Python's tarfile cannot write one) in the
        # shard's format: old GNU sparse, or pax GNU.sparse 0.0/0.1/1.0; drawn from its own
        # generator (the draws of the run after this step stay those of the runs before
        # sparse members were drawn); a replayed trace without it has none
        srng = random.Random('sparse/%s/%d' % (self.tag, len(self.trace)))
        sp = self.draw('sparse', lambda: None if self.step_replayed else sparse_spec(
            srng, fmt, 1500000000 + srng.randrange(1 << 28)))
        bio = io.BytesIO()
        with tarfile.open(fileobj=bio, mode='w',
                          format=tarfile.PAX_FORMAT if fmt == 'pax' else tarfile.GNU_FORMAT) as tf:
            tf.addfile(info('edir', tarfile.DIRTYPE, edir[0], edir[1]))
            for (n, d), (mode, mt) in zip(materialize(files), modes):
                ti = info(n, tarfile.REGTYPE, mode, mt)
                ti.size = len(d)
                tf.addfile(ti, io.BytesIO(d))
            ti = info('ln', tarfile.SYMTYPE, 0o777, ln[0])
            ti.linkname = ln[1]
            tf.addfile(ti)
            ti = info('hl.bin', tarfile.LNKTYPE, 0o644, hl[0])
            ti.linkname = hl[1]
            tf.addfile(ti)
            end = tf.offset  # the end of the last member (the end-of-archive blocks follow)
        data = bio.getvalue()
        what = fmt
        if sp:
            # GNU tar's archive of the sparse member (with its own end-of-archive blocks)
            # follows the members tarfile wrote, in place of tarfile's end blocks
            data = data[:end] + self.gnu_sparse_tar(sp)
            what = '%s, sparse %s %d bytes %d segments' % (fmt, sp['ver'], sp['size'],
                                                           len(sp['segs']))
        ml.write_file(p, data)
        self.stamp(p)
        self.changed('add-rich %s (%s)' % (name, what))

    def gnu_sparse_tar(self, sp):
        """The bytes of GNU tar's archive of one sparse file made from sp (sparse_spec)."""
        stage = self.path('stage')
        shutil.rmtree(stage, ignore_errors=True)
        os.makedirs(os.path.join(stage, 'sparse'))
        f = os.path.join(stage, 'sparse', 'sp.bin')
        with open(f, 'wb') as fh:
            for off, ln, seed in sp['segs']:
                fh.seek(off)
                fh.write(sparse_bytes(seed, ln))
            fh.truncate(sp['size'])
        os.chmod(f, sp['mode'])
        out = os.path.join(stage, 'out.tar')
        cmd = ['tar', '--sparse', '--owner=0', '--group=0', '--numeric-owner',
               '--mtime=@%d' % sp['mtime'], '-C', stage, '-cf', out]
        if sp['ver'] == 'gnu':
            cmd += ['--format=gnu']
        else:
            cmd += ['--format=pax', '--sparse-version=' + sp['ver'],
                    '--pax-option=delete=atime,delete=ctime,exthdr.name=%d/PaxHeaders/%f']
        r = self.env.run(cmd + ['sparse/sp.bin'])
        if r.returncode != 0:
            raise RuntimeError('%s: %s' % (' '.join(cmd), r.stderr))
        data = open(out, 'rb').read()
        shutil.rmtree(stage, ignore_errors=True)
        return data

    def op_add(self):
        s = self.new_shard()
        self.changed('add %s' % s)

    def small_sizes(self):
        """Sizes of a compressed shard's members: small (its decoded copy fits the small
        cache of model-smallcache)."""
        return [self.rng.choice([0, 1, 100, 512, 4096, 20000, self.rng.randrange(1, 30000)])
                for _ in range(self.rng.randrange(1, 5))]

    def op_add_z(self):
        """A new compressed shard: .tar.gz, .tgz or .tar.zst."""
        ext = self.draw('ext', lambda: self.rng.choice(['.tar.gz', '.tgz', '.tar.zst']))
        name = self.draw('s', lambda: 's%d%s' % (self.nshards, ext))
        self.nshards = max(self.nshards, shard_no(name) + 1)
        p = os.path.join(self.d, name)
        ml.write_file(p, compress(name, ml.tar_bytes(materialize(self.draw(
            'm', lambda: self.member_specs('z', sizes=self.small_sizes()))))))
        self.stamp(p)
        self.changed('add-z %s' % name)

    def op_swap(self):
        old = os.path.join(self.root, 'd.old')
        shutil.rmtree(old, ignore_errors=True)
        os.rename(self.d, old)
        os.makedirs(self.d)
        names = [n for n in sorted(os.listdir(old)) if is_shard(n)]

        def draw():
            # each shard: dropped (None), copied ('copy', cp -p) or written anew (members)
            out = {}
            for n in names:
                if self.rng.random() < 0.8:
                    out[n] = 'copy' if self.rng.random() < 0.5 else self.member_specs(
                        'k', sizes=None if n.endswith('.tar') else self.small_sizes())
                else:
                    out[n] = None
            return out
        keep = self.draw('keep', draw)
        for n in names:
            how = keep.get(n)
            if how == 'copy':
                shutil.copy2(os.path.join(old, n), os.path.join(self.d, n))
            elif how is not None:
                p = os.path.join(self.d, n)
                ml.write_file(p, compress(n, ml.tar_bytes(materialize(how))))
                self.stamp(p)
        self.new_shard('add', 'addm')
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
        self.sidecar_src = {n: v for n, v in cur.items() if is_shard(n)}
        self.changed('sidecar (%s)' % why)

    def op_sidecar(self):
        self.sidecar('op')

    def op_refresh(self, counts=False):
        i = self.draw_mount()
        before = {n: vs[0] for n, vs in self.models[i].allowed.items()}
        cur = snapshot_source(self.d)
        new = [n for n in cur if before.get(n) is None]
        removed = [n for n in before if before[n] is not None and n not in cur]
        if self.sources[i][0] == 'local':
            def same(x, y):
                return x == y
        elif self.sources[i][0] == 's3':
            # an S3 object's version is its ETag: the MD5 of its bytes
            def same(x, y):
                return x.data == y.data
        else:
            # over http a version is the server's ETag (nginx: mtime and size) of the same
            # bytes: a copy that keeps mtime and size (cp -p in 'swap') is the same version
            def same(x, y):
                return x.data == y.data and x.ident[:2] == y.ident[:2]
        changed = [n for n in cur if before.get(n) is not None and not same(before[n], cur[n])]
        exp = (len(new), len(removed), len(changed), len(cur),
               len([n for n in cur if is_shard(n)]))
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
        if self.sources[i][0] != 'local':
            # a remote shard whose index came from a sidecar the listing shows changed or gone
            # is replaced as a changed shard is (docs/mount.md, sidecar indexes): the
            # descriptors held open on it may answer ESTALE from now on
            side = set(n[:-len('.idx')] for n in changed + removed if n.endswith('.idx'))
            for h in self.held:
                if h['i'] == i and h['s'] in side and h['lenient'] is None:
                    h['lenient'] = 'its sidecar changed in a refresh'
        if counts:
            want = (': %d new, %d removed, %d changed; %d object%s, %d shard%s' % (
                exp[:4] + ('' if exp[3] == 1 else 's', exp[4], '' if exp[4] == 1 else 's'))).encode()
            if want not in r.stdout:
                raise Failure('refresh %s: %r; the model: %r (new %s, removed %s, changed %s)' % (
                    self.sources[i][0], r.stdout.decode(errors='replace').strip(), want.decode(),
                    new, removed, changed))
        self.settle(i)

    def op_refresh_counts(self):
        self.op_refresh(True)

    def remount(self, i, kill):
        m = self.mounts[i]
        self.close_held(i)
        self.note_evictions(i)
        if self.models[i].faulty:
            self.faults(None)  # off: a mount whose listing fails does not mount
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
        self.remount(self.draw_mount(), False)

    def op_kill9(self):
        self.remount(self.draw_mount(), True)

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

    def cache_source(self, top):
        """The mount kind whose source cache directory v1/TOP is, or None."""
        try:
            with open(os.path.join(self.cache, 'v1', top, 'source'), 'rb') as f:
                src = f.read().decode(errors='replace').strip()
        except OSError:
            return None
        kinds = [k for k, s in self.sources if s == src]
        return kinds[0] if kinds else None

    def held_by(self, kind, base):
        """Names of the objects of mount KIND whose versions the data file base holds."""
        try:
            with open(base, 'rb') as f:
                cached = f.read()
        except OSError:
            return []
        mm = self.models[self.mount_index(kind)]
        return sorted(n for n, vs in mm.allowed.items()
                      if any(v is not None and holds(cached, v.data) for v in vs))

    @staticmethod
    def index_names(p):
        try:
            with open(p, 'rb') as f:
                return sorted({n.decode() for n in re.findall(SHARD_RE, f.read())})
        except OSError:
            return []

    def describe_cache(self, p):
        """What cache file p is, as a trace keeps it: {'src': mount kind, 'rel': its path in
        its source's directory, and 'index': the shard a saved index names, or 'obj' (the
        object a data, .st or .map file's data holds, None: none a mount shows) and
        'suffix'}; None for None."""
        if p is None:
            return None
        rel = os.path.relpath(p, os.path.join(self.cache, 'v1')).split(os.sep)
        out = {'src': self.cache_source(rel[0]), 'rel': '/'.join(rel[1:])}
        if out['src'] is None:
            return out
        if 'meta' in rel:
            if len(rel) >= 4 and rel[2].startswith('f-'):
                names = self.index_names(p)
                out['index'] = names[0] if names else None
            return out
        b = os.path.basename(p)
        base = b.split('.')[0]
        held = self.held_by(out['src'], os.path.join(os.path.dirname(p), base))
        out['obj'] = held[0] if held else None
        out['suffix'] = b[len(base):]
        return out

    def resolve_cache(self, desc):
        """The cache file desc describes now (describe_cache): the one at its path when it is
        still what desc says, else the first (by name) of its source's files that is; None
        when none is."""
        if not desc or desc.get('src') is None:
            return None
        v1 = os.path.join(self.cache, 'v1')
        tops = [t for t in sorted(os.listdir(v1)) if self.cache_source(t) == desc['src']] \
            if os.path.isdir(v1) else []

        def fits(p):
            if size_or_zero(p) == 0:
                return False
            d = self.describe_cache(p)
            return all(d.get(k) == desc.get(k) for k in ('index', 'obj', 'suffix'))
        for t in tops:
            p = os.path.join(v1, t, *desc['rel'].split('/'))
            if os.path.isfile(p) and fits(p):
                return p
        meta = 'index' in desc or desc['rel'].split('/')[0] == 'meta'
        if 'index' not in desc and 'obj' not in desc:
            return None  # a kept listing: by its path only
        for t in tops:
            for p in self.cache_files(meta):
                if os.path.relpath(p, v1).split(os.sep)[0] == t and fits(p):
                    return p
        return None

    def damage(self, meta, live):
        """Damage one file of the cache: under the running mounts (live), or with every mount
        of the cache unmounted (then mounted again: a load must check what it loads). Only
        the objects whose cached bytes or saved index the file holds, on the mounts of its
        source, are damaged: they may answer ESTALE, EIO or ENOENT until the mount repairs
        them (repair below), every other object stays exact."""
        if not live:
            self.close_held()
            self.note_evictions()
            if self.models[2].faulty:
                self.faults(None)
            for m in self.mounts:
                m.umount()
        # Under running mounts the cache changes while we look: a temporary file is renamed,
        # eviction deletes a file. A file gone before it is damaged is not damaged (logged).
        # The trace keeps which file by what it is (its source's mount, the object or shard it
        # holds, its kind), not by its name (which hashes the server's port and ETags).
        files = [p for p in self.cache_files(meta) if size_or_zero(p) > 0]
        desc = self.draw('file', lambda: self.describe_cache(self.rng.choice(files or [None])))
        p = self.resolve_cache(desc)
        if p is None and desc is not None:
            log('  damage: no cache file is %s now: nothing damaged' % desc)
        if p is None:
            if not live:
                # mounted again: each mount shows the source as it is now (found by
                # shrinking: a refresh after this remount counted a shard new for the model)
                for i, m in enumerate(self.mounts):
                    m.mount()
                    self.settle(i, True)
                    self.inodes[i] = {}
            return
        hit = self.damage_targets(p, meta)
        before = self.counters() if live else None
        filled = False
        damaged_blob = None
        try:
            if live and not meta and re.fullmatch(r'[0-9a-f]{16}', os.path.basename(p)):
                with open(p, 'rb') as f:
                    cached = f.read()
            else:
                cached = None
            how = self.damage_file(p, meta, live)
            damaged_blob = read_or_none(p) if meta and not live else None
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
            if meta:
                # its index is built again: a new shard, new inode numbers; descriptors held
                # on the old ones may give ESTALE from now on
                for h in self.held:
                    if h['i'] == i and h['s'] == n:
                        h['lenient'] = 'held, index damaged (%s)' % what
            # an index dropped and built again makes a new shard of the same version: its
            # entries get new inode numbers (ESTALE for the old ones, fs/core/README.md)
            self.inodes[i] = {k: v for k, v in self.inodes[i].items() if k[0] != n}
        self.repair(hit)
        now_blob = read_or_none(p) if not live and meta else None
        if not live and meta and damaged_blob is not None:
            log('  the damaged saved index after the remount: %s' % (
                'gone' if now_blob is None else 'as damaged' if now_blob == damaged_blob
                else 'written again'))
        if not live and meta and how not in ('delete', None) and hit and \
                now_blob is not None and damaged_blob is not None and now_blob != damaged_blob:
            # the damaged saved index was written again under its name after the remount: the
            # mount loaded it, refused it, built the shard's index and saved it there; the
            # refusal is counted (index_saved_rejected). (A blob of an older version, or of a
            # shard whose index is not saved, stays as it was damaged: nothing to count.)
            i = hit[0][0]
            got = self.mounts[i].stats().get('index_saved_rejected', 0)
            if got < 1:
                raise Failure('%s: the saved index of %s, damaged (%s) before the mount, was '
                              'built and saved again after it, but index_saved_rejected is 0' % (
                                  self.sources[i][0], hit[0][1], how))
            self.count_damage('saved indexes damaged before a mount, refused and saved '
                              'again: counted in index_saved_rejected')
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
                    names = set(re.findall(SHARD_RE, f.read()))
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
            self.cur_mount = self.sources[i][0]
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
            out.append(('%s/%s' % (sdir(n), m), os.path.join(mnt, sdir(n), m), exp))
        return out

    def damage_file(self, p, meta, live):
        """Damage file p of the cache (FileNotFoundError when it went away first)."""
        size = os.path.getsize(p)
        # a byte flipped under a running mount in a data unit this mount filled is seen too:
        # the cache tier watches the data files in use and checks their units again after a
        # change (inotify IN_MODIFY, cachetier/README.md "Checked bytes")
        how = self.draw('how', lambda: self.rng.choice(['truncate', 'flip', 'punch', 'delete']))
        # a saved index written over in place with another shard's saved index (a valid blob
        # of another identity), drawn from its own generator (sequences keep their steps)
        others = [q for q in self.cache_files(True) if q != p and '/f-' in q and
                  os.path.dirname(os.path.dirname(q)) == os.path.dirname(os.path.dirname(p))]
        over = self.draw('over', lambda: self.describe_cache(self.over_rng.choice(others)) if (
            self.extended and meta and '/f-' in p and others and self.over_rng.random() < 0.3)
            else None)
        src = self.resolve_cache(over) if over else None
        if src is not None and src != p:
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
        if size == 0:  # replaying: the file is empty now
            how = 'delete'
        if how == 'truncate':
            os.truncate(p, min(max(0, size - 1), self.draw('to', lambda: self.rng.randrange(
                0, size))))
        elif how == 'flip':
            off = self.flip_at = self.draw('at', lambda: self.rng.randrange(size)) % size
            with open(p, 'r+b') as f:
                f.seek(off)
                b = f.read(1)
                f.seek(off)
                f.write(bytes([b[0] ^ (1 << self.draw('bit', lambda: self.rng.randrange(8)))]))
            how += ' @%d' % off
        elif how == 'punch':
            off = (self.draw('at', lambda: self.rng.randrange(size)) % size) & ~4095
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
        """Toggles the faults: 'on' is the proxy's seed, or None (off)."""
        self.faults(self.draw('on', lambda: None if self.models[2].faulty else
                              self.rng.randrange(1 << 30)))

    def faults(self, seed):
        mm = self.models[2]
        if seed is None:
            self.px.set('pass')
            mm.faulty = False
            log('  faults off')
        else:
            self.px.set_random(0.3, seed=seed, modes=('503', 'cut', 'trunc'))
            mm.faulty = True
            log('  faults on (503, cut, trunc at 30%%, seed %d)' % seed)

    # -- reads ------------------------------------------------------------------------------

    def pick_read(self, want_shard):
        i = self.draw_mount()
        mm = self.models[i]
        names = sorted(n for n, vs in mm.allowed.items()
                       if (is_shard(n) if want_shard else not is_shard(n)))
        return i, mm, self.draw('s', lambda: self.rng.choice(names) if names else None)

    def check(self, i, what, got, expected, errs_ok):
        """got: ('ok', value) or ('err', errno); expected: values allowed (None: ENOENT
        allowed). errs_ok: None, or why ESTALE, EIO, ENOENT are allowed too (the cause the
        answer is counted under). Every answer is counted: exact (a version's bytes, or ENOENT
        of an absent file) or tolerated, by cause."""
        label = '%s: %s' % (self.sources[i][0], what)
        self.cur_mount = self.sources[i][0]
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
        vs = mm.allowed.get(s, [None])
        names = set()
        for v in vs:
            if v is not None and v.members:
                names |= set(v.members)
        n = self.draw('n', lambda: self.rng.choice(sorted(names)) if names else None)
        if n is None:
            return
        path = os.path.join(self.mounts[i].mnt, sdir(s), n)
        exp = []
        sizes = [msize(v.members[n]) for v in vs if v is not None and n in v.members] or [0]
        off, ln = 0, None
        if ranged:
            off = self.draw('off', lambda: self.rng.randrange(0, self.rng.choice(sizes) + 2))
            ln = self.draw('len', lambda: self.rng.choice([1, 100, 4096, 65536, 70000,
                                                           self.rng.randrange(1, 200000)]))
        for v in vs:
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
        self.check(i, '%s %s/%s%s' % ('pread' if ranged else 'read', sdir(s), n,
                                      ' [%d+%d]' % (off, ln) if ranged else ''),
                   got, exp, mm.errs_ok(s))

    # -- descriptors held open, concurrent readers ----------------------------------------

    def payload(self, v, s, n):
        """What version v of shard s holds at n (a member's bytes or Partial; n None: the raw
        shard's bytes), or None (absent)."""
        if v is None:
            return None
        if n is None:
            return v.data
        return v.members.get(n) if v.members else None

    @staticmethod
    def slices(payloads, off, ln):
        """The answers allowed for a read of [off, off+ln) (ln None: to the end) of each
        payload (None: ENOENT)."""
        exp = []
        for d in payloads:
            if d is None:
                exp.append(None)
            elif isinstance(d, Partial):
                exp += [d.slice(off, ln), EIO]
            else:
                exp.append(d[off:] if ln is None else d[off:off + ln])
        return exp

    def op_hold(self):
        """Open a member or a raw shard through a mount and keep the descriptor (at most
        HELD; the oldest is closed first): later 'held-read's read it."""
        i, mm, s = self.pick_read(True)
        if not s:
            return
        vs = list(mm.allowed.get(s, [None]))
        names = set()
        for v in vs:
            if v is not None and v.members:
                names |= set(v.members)
        # a member of a shard with a stale sidecar shows the sidecar's size until its first
        # read: the raw shard only
        stale = s in mm.stale_sidecars
        n = self.draw('n', lambda: self.rng.choice(sorted(names)) if names and not stale and
                      self.rng.random() < 0.7 else None)
        if n is not None and stale:
            return
        while len(self.held) >= HELD:
            os.close(self.held.pop(0)['fd'])
        path = os.path.join(self.mounts[i].mnt, sdir(s), n) if n else \
            os.path.join(self.mounts[i].mnt, s)
        label = 'open %s' % os.path.relpath(path, self.mounts[i].mnt)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            exp = [None] if any(self.payload(v, s, n) is None for v in vs) else []
            self.check(i, label, ('err', e.errno), exp, mm.errs_ok(s))
            return
        log('  %s: %s -> fd %d (held)' % (self.sources[i][0], label, fd))
        self.held.append({'fd': fd, 'i': i, 's': s, 'n': n, 'vs': vs, 'label': label,
                          'lenient': None})

    def op_held_read(self):
        """A read through a held descriptor: the exact bytes of a version the file had when
        it was opened (the one it opened), or ESTALE/EIO once the file changed or its index
        was built again (damage) since: never another version's bytes. A change of the cache
        alone (eviction, a refill, a repaired unit) is not a change: exact bytes owed."""
        k = self.draw('h', lambda: self.rng.randrange(len(self.held)) if self.held else None)
        if k is None or k >= len(self.held):
            return
        h = self.held[k]
        i, s, n = h['i'], h['s'], h['n']
        mm = self.models[i]
        payloads = [self.payload(v, s, n) for v in h['vs']]
        sizes = [msize(d) for d in payloads if d is not None] or [0]
        off = self.draw('off', lambda: self.rng.randrange(0, self.rng.choice(sizes) + 2))
        ln = self.draw('len', lambda: self.rng.choice([1, 4096, 65536, 300000,
                                                       self.rng.randrange(1, 200000)]))
        exp = [x for x in self.slices(payloads, off, ln) if x is not None]
        cur = mm.allowed.get(s, [None])
        why = h['lenient'] or mm.errs_ok(s)
        if why is None and not (len(h['vs']) == 1 and cur == h['vs'] and cur[0] is not None):
            # opened while a change was pending (the old version, possibly: gone now), or the
            # file changed since
            why = 'held across a change'
        got = pread_result_fd(h['fd'], off, ln)
        self.check(i, 'held %s [%d+%d]' % (h['label'], off, ln), got, exp, why)

    def close_held(self, i=None):
        """Close the held descriptors (of mount i; None: all) before it is unmounted."""
        keep = []
        for h in self.held:
            if i is None or h['i'] == i:
                os.close(h['fd'])
            else:
                keep.append(h)
        self.held = keep

    def op_concurrent(self):
        """CONCURRENT readers at once (threads released together) through one mount, each
        reading a member or a raw shard whole; every answer checked as a read's."""
        i = self.draw_mount()
        mm = self.models[i]
        shards = sorted(n for n in mm.allowed if is_shard(n))

        def draw():
            out = []
            for _ in range(CONCURRENT):
                s = self.rng.choice(shards)
                names = set()
                for v in mm.allowed[s]:
                    if v is not None and v.members:
                        names |= set(v.members)
                out.append([s, self.rng.choice(sorted(names)) if names and
                            self.rng.random() < 0.8 else None])
            return out
        reads = self.draw('r', lambda: draw() if shards else [])
        if not reads:
            return
        bar = threading.Barrier(len(reads))
        got = [None] * len(reads)

        def one(k, path):
            try:
                bar.wait(timeout=60)
            except threading.BrokenBarrierError:
                pass
            got[k] = pread_result(path, 0, None)
        ts = []
        for k, (s, n) in enumerate(reads):
            path = os.path.join(self.mounts[i].mnt, sdir(s), n) if n else \
                os.path.join(self.mounts[i].mnt, s)
            t = threading.Thread(target=one, args=(k, path))
            t.start()
            ts.append(t)
        for t in ts:
            t.join(120)
            if t.is_alive():
                raise Failure('%s: a concurrent reader did not end in 120 s' % self.sources[i][0])
        for k, (s, n) in enumerate(reads):
            vs = mm.allowed.get(s, [None])
            exp = self.slices([self.payload(v, s, n) for v in vs], 0, None)
            sv = mm.stale_sidecars.get(s)
            if n and sv is not None and n in sv.members:
                exp.append(b'')  # the stale sidecar's size 0 (stat showed it)
            self.check(i, 'concurrent read %d of %d %s' % (k + 1, len(reads),
                                                           '%s/%s' % (sdir(s), n) if n else s),
                       got[k], exp, mm.errs_ok(s))

    def op_stat(self):
        i, mm, s = self.pick_read(True)
        if not s:
            return
        vs = mm.allowed.get(s, [None])
        names = set()
        for v in vs:
            if v is not None and v.members:
                names |= set(v.members)
        n = self.draw('n', lambda: self.rng.choice(sorted(names))
                      if names and self.rng.random() < 0.7 else None)
        if n is not None:
            path = os.path.join(self.mounts[i].mnt, sdir(s), n)
            exp = [None if v is None or v.members is None or n not in v.members else
                   msize(v.members[n]) for v in vs]
            sv = mm.stale_sidecars.get(s)
            if sv is not None and n in sv.members:
                exp.append(msize(sv.members[n]))  # the sidecar's size, until a read checks
            what = 'stat %s/%s' % (sdir(s), n)
        else:
            path = os.path.join(self.mounts[i].mnt, s)
            exp = [None if v is None else len(v.data) for v in vs]
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
        vs = mm.allowed.get(s, [None])
        names = set()
        for v in vs:
            if v is not None and v.entries:
                names |= set(v.entries)
        n = self.draw('n', lambda: self.rng.choice(sorted(names)) if names else None)
        if n is None:
            return
        path = os.path.join(self.mounts[i].mnt, sdir(s), n)
        exp = []
        for v in vs:
            e = None if v is None or v.entries is None else v.entries.get(n)
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
        self.check(i, 'lstat %s/%s' % (sdir(s), n), got, exp, mm.errs_ok(s))

    def op_read(self):
        self.member_read(False)

    def op_pread(self):
        self.member_read(True)

    def op_raw(self):
        i, mm, s = self.pick_read(True)
        if not s:
            return
        vs = mm.allowed.get(s, [None])
        sizes = [len(v.data) for v in vs if v is not None]
        if not sizes:
            sizes = [0]
        off = self.draw('off', lambda: self.rng.randrange(0, self.rng.choice(sizes) + 2))
        ln = self.draw('len', lambda: self.rng.choice([1, 512, 65536, 300000,
                                                       self.rng.randrange(1, 600000)]))
        exp = [None if v is None else v.data[off:off + ln] for v in vs]
        got = pread_result(os.path.join(self.mounts[i].mnt, s), off, ln)
        self.check(i, 'raw %s [%d+%d]' % (s, off, ln), got, exp, mm.errs_ok(s))

    def op_plain(self):
        i, mm, s = self.pick_read(False)
        if not s:
            return
        exp = [None if v is None else v.data for v in mm.allowed.get(s, [None])]
        got = pread_result(os.path.join(self.mounts[i].mnt, s), 0, None)
        self.check(i, 'plain %s' % s, got, exp, mm.errs_ok(s))

    def op_ls(self):
        i = self.draw_mount()
        mm = self.models[i]
        mnt = self.mounts[i].mnt
        shards = sorted(n for n in mm.allowed if is_shard(n))
        s = self.draw('s', lambda: self.rng.choice(shards) if shards and self.rng.random() < 0.6
                      else None)
        if s is not None:
            try:
                got = ('ok', sorted(os.listdir(os.path.join(mnt, sdir(s)))))
            except OSError as e:
                got = ('err', e.errno)
            exp = [None if v is None or v.entries is None else sorted(listing_names(v.entries))
                   for v in mm.allowed.get(s, [None])]
            self.check(i, 'ls %s/' % sdir(s), got, exp, mm.errs_ok(s))
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
            names = {n, sdir(n)} if is_shard(n) else {n}
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

    def run_step(self, op, params=None):
        """One step: op with params (a trace's), or with its choices drawn (None)."""
        self.step_no += 1
        self.begin(op, params)
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
            if not is_shard(s) or len(vs) != 1 or v is None or s in mm.damaged or \
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
            top = os.path.join(mnt, sdir(s))
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
                raise Failure('%s: walk of %s/: %s' % (self.sources[i][0], sdir(s), e))
            self.walked += 1  # (not in the answers: a walk tolerates nothing)
            if set(got) != set(want):
                raise Failure('%s: walk of %s/: only in the mount %s; only in the tar %s' % (
                    self.sources[i][0], sdir(s), sorted(set(got) - set(want))[:5],
                    sorted(set(want) - set(got))[:5]))
            for n, e in want.items():
                g = got[n]
                if e[2] is None:  # an implied directory: a directory of 0755
                    ok = g[:2] == e[:2]
                else:
                    ok = g[:5] == e
                if not ok:
                    raise Failure('%s: walk: %s/%s is %r, its tar entry %r' % (
                        self.sources[i][0], sdir(s), n, g[:5], e))
                key = (s, v.data, v.ident, n)
                ino = g[5]
                was = self.inodes[i].get(key)
                if was is not None and was != ino:
                    raise Failure('%s: walk: %s/%s changed inode %d -> %d within the mount\'s '
                                  'life, the same version' % (self.sources[i][0], sdir(s), n,
                                                              was, ino))
                self.inodes[i][key] = ino
                other = inos.get(ino)
                if other is not None and not (v.links.get(n) or n) == \
                        (v.links.get(other[1]) or other[1]):
                    raise Failure('%s: walk: %s/%s and %s/%s share inode %d' % (
                        self.sources[i][0], sdir(s), n, sdir(other[0]), other[1], ino))
                inos[ino] = (s, n)


SHARD_ENDINGS = ('.tar', '.tar.gz', '.tgz', '.tar.zst')
SHARD_RE = rb's[0-9]+(?:\.tar\.gz|\.tgz|\.tar\.zst|\.tar)'


def is_shard(n):
    return n.endswith(SHARD_ENDINGS)


def sdir(n):
    """A shard's directory: its name without the ending (docs/mount.md)."""
    for e in SHARD_ENDINGS[1:] + SHARD_ENDINGS[:1]:
        if n.endswith(e):
            return n[:-len(e)]
    return n


def shard_no(n):
    return int(re.match(r's([0-9]+)', n).group(1))


def compress(name, data):
    """A shard's file bytes: data (a tar) compressed as its name says."""
    if name.endswith(('.tar.gz', '.tgz')):
        return gzip.compress(data, mtime=0)
    if name.endswith('.tar.zst'):
        return subprocess.run(['zstd', '-q', '-c'], input=data, stdout=subprocess.PIPE,
                              check=True).stdout
    return data


_decoded = {}


def decompress(name, data):
    """The tar stream of a compressed shard's bytes: as much as decodes (a cut or damaged
    stream: its decodable start)."""
    key = (name.endswith('.tar.zst'), hashlib.sha1(data).digest())
    if key in _decoded:
        return _decoded[key]
    if key[0]:
        out = subprocess.run(['zstd', '-q', '-d', '-c'], input=data, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL).stdout
    else:
        try:
            out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
        except zlib.error:
            out = b''
    _decoded[key] = out
    return out


def materialize(specs):
    """[(name, bytes)] of members [[name, size, pattern]]: the bytes repeat 61 bytes that the
    pattern (8 hex digits) gives."""
    out = []
    for n, size, pat in specs:
        b = hashlib.sha512(bytes.fromhex(pat)).digest()[:61]
        out.append((n, (b * (size // 61 + 1))[:size]))
    return out


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


def pread_result_fd(fd, off, ln):
    """pread_result on an open descriptor."""
    out = []
    got = 0
    try:
        while ln is None or got < ln:
            want = 1 << 20 if ln is None else min(1 << 20, ln - got)
            b = os.pread(fd, want, off + got)
            if not b:
                break
            out.append(b)
            got += len(b)
    except OSError as e:
        return ('err', e.errno)
    return ('ok', b''.join(out))


def pread_result(path, off, ln):
    """('ok', bytes) of one open and reads from off (ln bytes, or to EOF when ln is None) in a
    loop until ln bytes or EOF; or ('err', errno)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return ('err', e.errno)
    try:
        return pread_result_fd(fd, off, ln)
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


# ---------------------------------------------------------------------------------------------
# Traces: a run's operations with every choice resolved, replayed and shrunk
# ---------------------------------------------------------------------------------------------

def trace_text(trace, walk, comment):
    """A trace file: '#' comment lines, 'config {...}', then one line per step: the
    operation and its choices as JSON ('init' steps: the shards made before the mounts)."""
    lines = ['# ' + x if x else '#' for x in comment.splitlines()]
    lines.append('config ' + json.dumps({'walk': walk, 'mount_opts': MOUNT_OPTS,
                                         's3': bool(S3[0])}))
    for op, p in trace:
        lines.append('%s %s' % (op, json.dumps(p, sort_keys=True)))
    return '\n'.join(lines) + '\n'


def read_trace(path):
    """(config, [(op, params)]) of a trace file."""
    config, steps = {}, []
    with open(path) as f:
        for k, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith('#'):
                continue
            op, _, rest = line.partition(' ')
            try:
                p = json.loads(rest) if rest else {}
            except ValueError as e:
                raise SystemExit('%s:%d: not a trace line (%s): %r' % (path, k, e, line[:80]))
            if op == 'config':
                config = p
            elif op == 'init' or op in OPS:
                steps.append((op, p))
            else:
                raise SystemExit('%s:%d: unknown operation %r (ops: %s)' % (
                    path, k, op, ' '.join(OPS)))
    return config, steps


def failure_kind(msg):
    """What a failure is, for shrinking: its mount and its class (a wrong answer, a walk, a
    refresh, a repair, a counter), not its bytes or names, which a shorter trace changes."""
    label = msg.split(':')[0].split(' ')[0]
    for k in ('got ', 'walk', 'repair', 'refresh', 'cache_units_corrupt', 'still not exact',
              'shows only', 'unknown names'):
        if k in msg:
            return '%s %s' % (label, k.strip())
    return '%s %s' % (label, ' '.join(msg.split()[1:3]))


def play(env, tag, steps, ops=None, rng=None, init=None, walk=True):
    """Run steps ([(op, params or None)]: None draws the step's choices from rng) in a new
    World (with an s3 mount when S3[0]); (world, None) or (world, (step number, op, failure
    message))."""
    w = World(env, rng or random.Random(0), ops or list(OPS), tag, init=init, walk=walk,
              s3=S3[0])
    fail = None
    t0 = time.monotonic()
    try:
        for op, params in steps:
            w.run_step(op, params)
    except Failure as e:
        fail = (w.step_no, w.trace[-1][0], str(e))
        log('FAIL: %s step %d (%s): %s' % (tag, w.step_no, fail[1], e))
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
    finally:
        log('== %s: %d steps in %.1fs' % (tag, w.step_no, time.monotonic() - t0))
        w.close()
    return w, fail


def trace_out(name):
    d = os.environ.get('MODEL_TRACE_DIR') or os.getcwd()
    return os.path.join(d, name)


def run_sequence(env, seed, steps, ops, walk=True, record=None):
    """A run of `steps` operations drawn with seed; its trace is written to record, or when
    it fails to MODEL_TRACE_DIR (default: the current directory)."""
    log('== model: seed %d, %d steps, ops %s' % (seed, steps, ','.join(ops)))
    log('   (another sequence: --seed N or MODEL_SEED=N)')
    for o in ops:
        if o in WAITING:
            log('   (op %s waits for %s)' % (o, WAITING[o]))
    rng = random.Random(seed)
    weights = [OPS[o] for o in ops]
    w, fail = play(env, 'seed-%d' % seed, ((rng.choices(ops, weights)[0], None)
                                           for _ in range(steps)), ops, rng, walk=walk)
    out = record or (trace_out('model-seed-%d-failed.trace' % seed) if fail else None)
    if out:
        comment = 'seed %d, %d steps, ops %s%s' % (
            seed, steps, ','.join(ops), '\nfailed at step %d (%s): %s' % fail if fail else '')
        with open(out, 'w') as f:
            f.write(trace_text(w.trace, walk, comment))
        log('trace: %s (%d steps)' % (out, w.step_no))
    if fail:
        log('replay: %s %s --replay %s' % (sys.argv[0], env.shardfs, out))
        log('shrink: %s %s --shrink %s' % (sys.argv[0], env.shardfs, out))
        return False
    return w.report(steps)


def run_trace(env, path, expect_fail=False):
    """Replay the trace file path: True when it passes (or, expect_fail, when it fails)."""
    config, steps = read_trace(path)
    init = [p for op, p in steps if op == 'init']
    body = [(op, p) for op, p in steps if op != 'init']
    MOUNT_OPTS[:] = config.get('mount_opts', [])
    S3[0] = config.get('s3', False)
    log('== replay %s: %d init, %d steps, walk %s' % (path, len(init), len(body),
                                                      config.get('walk', True)))
    w, fail = play(env, 'trace-' + os.path.basename(path), body, init=init,
                   walk=config.get('walk', True))
    if fail:
        return expect_fail
    w.report(0)
    return not expect_fail


def shrink(env, path, tries, out):
    """Delta debugging (ddmin) of the failing trace file path: steps (init steps too) are
    dropped in chunks, then one by one, while the replay still fails the same way
    (failure_kind), at most `tries` replays; the shortest failing trace goes to out."""
    config, steps = read_trace(path)
    walk = config.get('walk', True)
    MOUNT_OPTS[:] = config.get('mount_opts', [])
    S3[0] = config.get('s3', False)
    n_try = [0]
    cache = {}

    def fails(cand):
        key = tuple(json.dumps(x, sort_keys=True) for x in cand)
        if key in cache:
            return cache[key]
        n_try[0] += 1
        tag = 'shrink-%d' % n_try[0]
        log('== shrink try %d: %d steps' % (n_try[0], len(cand)))
        try:
            w, fail = play(env, tag, [x for x in cand if x[0] != 'init'],
                           init=[p for op, p in cand if op == 'init'], walk=walk)
            shutil.rmtree(w.base, ignore_errors=True)
        except Exception as e:  # a set-up that cannot run (e.g. no shard to mount)
            log('   try %d: %s: %s (taken as passing)' % (n_try[0], type(e).__name__, e))
            fail = None
        got = None
        if fail:
            got = failure_kind(fail[2])
            # the steps after the failing one are dropped
            body = [x for x in cand if x[0] != 'init']
            cand = [x for x in cand if x[0] == 'init'] + body[:fail[0]]
        res = (got == want[0], cand)
        cache[key] = res
        log('   try %d: %s' % (n_try[0], 'fails the same way (%s)' % got if res[0] else
                                ('fails otherwise: %s' % got if got else 'passes')))
        return res

    want = [None]
    t0 = time.monotonic()
    w, fail = play(env, 'shrink-0', [x for x in steps if x[0] != 'init'],
                   init=[p for op, p in steps if op == 'init'], walk=walk)
    if not fail:
        log('shrink: %s passes: nothing to shrink' % path)
        return False
    want[0] = failure_kind(fail[2])
    body = [x for x in steps if x[0] != 'init']
    cur = [x for x in steps if x[0] == 'init'] + body[:fail[0]]
    log('shrink: %s fails at step %d: %s; %d steps to shrink' % (path, fail[0], want[0],
                                                                len(cur)))
    n = 2
    while len(cur) >= 2 and n_try[0] < tries:
        chunk = (len(cur) + n - 1) // n
        reduced = False
        for k in range(0, len(cur), chunk):
            if n_try[0] >= tries:
                break
            ok, got = fails(cur[:k] + cur[k + chunk:])
            if ok:
                cur = got
                n = max(n - 1, 2)
                reduced = True
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(2 * n, len(cur))
    comment = ('shrunk from %s (%d steps) in %d replays, %.0f s: fails as %s%s' % (
        os.path.basename(path), len(steps), n_try[0], time.monotonic() - t0, want[0],
        '' if n_try[0] < tries else ' (the bound of %d replays was reached)' % tries))
    with open(out, 'w') as f:
        f.write(trace_text(cur, walk, comment))
    log('shrink: %d -> %d steps (%d init) in %d replays: %s' % (
        len(steps), len(cur), len([x for x in cur if x[0] == 'init']), n_try[0], out))
    return True


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith('-'):
        print(__doc__)
        return 2
    shardfs = args.pop(0)
    seed = None
    steps, ops, regress, walk, record = 300, None, False, True, None
    replay, shrink_of, tries, out = [], None, 200, None
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
        elif a == '--no-walk':
            walk = False
        elif a == '--s3':
            S3[0] = True
        elif a == '--record':
            record = args.pop(0)
        elif a == '--replay':
            replay.append(args.pop(0))
        elif a == '--shrink':
            shrink_of = args.pop(0)
        elif a == '--tries':
            tries = int(args.pop(0))
        elif a == '--out':
            out = args.pop(0)
        else:
            print(__doc__)
            return 2
    if os.environ.get('MODEL_SEED'):  # another seed than the command's (CI's)
        seed = int(os.environ['MODEL_SEED'])
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 31)
    if regress:
        replay += sorted(os.path.join(TRACE_DIR, n) for n in os.listdir(TRACE_DIR)
                         if n.endswith('.trace'))

    def body(env, ck):
        if shrink_of:
            ck.ok(shrink(env, shrink_of, tries, out or shrink_of + '.shrunk'),
                  'shrink %s' % shrink_of)
        elif replay:
            for t in replay:
                ck.ok(run_trace(env, t), 'trace %s' % t)
        else:
            ck.ok(run_sequence(env, seed, steps, parse_ops(ops), walk, record),
                  'seed %d' % seed)
    ml.main_wrapper(body, shardfs, 'model', deadline=int(os.environ.get('MODEL_DEADLINE', 1140)))


if __name__ == '__main__':
    sys.exit(main())
