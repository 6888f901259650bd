#!/usr/bin/python3
"""shardfs mount tests: reading plans ('plan [NAME] FILE' and 'plan-clear [NAME]' on
.shardfs/control, the 'shardfs plan' CLI, .shardfs/plans and the plan_* counters).

usage: test_plan.py SHARDFS GROUP
GROUP:
  semantics  a local source of plain and gzip shards, a plain file and a hardlink: a plan of
             member paths, raw .tar paths, a plain file, a compressed shard's members and
             paths that name nothing (counted, logged once); exact paths, missing paths, bytes
             (a compressed shard's member stands for the whole raw object) and FNV-1a of the
             order; publishing it counts no lookup request (the daemon resolves the paths
             itself: `lookups` moves by the CLI's 8 only); replaced by a plan of the same name; two named plans; hits and positions
             as planned paths are read (a hardlink and its target are one file); the default
             name (the sender's pid); plan-clear; at most 64 plans; refused: a relative FILE
             (the CLI resolves one), a missing FILE, a directory, a FIFO (no hang), a file
             inside the mount, a bad name; .shardfs/plans is not listed; the CLI's exact
             lines ("1 path", "2 paths"; a directory that is not a mount is said to be one
             before FILE is looked at)
  bigger     an nginx source with --cache-size 8M and a plan of 24 MiB of raw shards: taken
             whole, fetching ahead exactly what half the cache holds (part of the first
             shard); reading the shards in plan order hits every path with exact bytes
  ahead      fetching ahead along plans of members, nginx source, --plan-lookahead 1500K, sidecar
             indexes, --plan-gap 0 (one request per planned path): exact paths, bytes and units handed over and fetched at publish and
             after every read in plan order; every planned read a hit; a second plan gets
             half the lookahead
  coalesce   requests shaped by the plan on the link emulator (30 ms, 60 MB/s): planned samples
             of one object closer than the measured rate x time to first byte go out as one
             GET (exact GETs from the emulator's counters, exact units fetched); groups 5 MB
             apart split; the bytes between serve a later plan; two plans of the same samples
  nextuse    eviction by next use, nginx source, plain files of one 64 KiB unit each, a cache
             of 8 units, no fetching ahead (--plan-lookahead 0: every fill is a reader's miss):
             a plan of 12 files read twice in order (bigger than the cache): units no plan
             needs again go first, then the furthest next use (16 fills, 8 evictions; least
             recently used: 24 and 16); two plans read in turns, each of 5 files three times,
             compete (14 fills; each plan alone: 17 and 18, least recently used: 30); a plan
             with unplanned reads on the side, which keep their least recently used order
             (11 fills; in fill order 12, least recently used for all: 18). Exact bytes
             fetched and evicted and misses, computed by a model of each rule
  lookahead  a plan larger than the cache fetched with coalescing on the link emulator, --plan-gap
             1M and no rate measured: the lookahead is what half the cache holds (each path
             counted as its bytes and a 64 KiB unit), exactly 8 samples of 2 units; 48 samples
             in shards built on the batches that lookahead gives (2 a shard, one GET each),
             read in plan order one at a time: exact paths and bytes handed over, GETs, gap
             bytes and bytes fetched after every read, every read a hit, no unit fetched
             twice, nothing skipped for room; then paths skipped behind the position: their
             cost comes off the lookahead, at most half of it (exact lookahead and paths
             handed over)
  pieces     a planned sample of 5 units read in requests of 128 KiB, nginx, a lookahead of one
             path: the fetcher's fill of the next path, which evicts, comes between its
             requests and takes the units read, never the rest (exact bytes fetched, GETs,
             evictions, evicted bytes; every read a hit); twice: in order, and with the
             sample's last request first (as readahead on two FUSE threads may send it: only
             the units it read go, not the whole path)
  partread   a planned path left part-read (its first 4 KiB) keeps its units as needed now while
             63 planned paths start after it, and they go first once a 64th has (nginx, a
             sidecar shard of one-unit members, a cache of 4 units): exact misses, bytes
             fetched, evictions
  file       a plan file is never copied into the log (a shadow-like file: only counts and
             line numbers of the lines that name nothing), and is read in pieces (48 MiB of
             overlong lines raise the daemon's peak RSS by less than 8 MiB)
  inside     --threads 1: a plan file inside the mount by a symlink (to a file, to a symlink, to
             the mount's directory), through '..' or through a bind mount of the mount is
             refused with EINVAL at once (never read through the mount, which would wait for
             its one handler forever); a symlink to a file outside is taken
  indexahead a fresh mount of shards without indexes on a 1 MB/s link: publishing builds the
             indexes of exactly the shards the plan names, several at once, with exactly 2 GETs
             and the bytes of each; the CLI's exact stdout and exit status, progress on stderr
  interrupt  a plan file of 8 M lines whose sender gets SIGINT while the daemon reads it: the
             daemon stops reading (the request interrupted), answers EINTR, publishes nothing
  indexahead-if  --layout imagefolder: a cold mount builds every index for its view before it
             serves, so a plan indexes nothing (plan_index_wanted 0); a remount maps the saved
             view and loads no index: its plan loads exactly the shards its files are in, several
             at once (plan_index_wanted, plan_index_done, index_loaded 5 of 8), and with their
             index files removed from the cache directory builds them (index_built 5); each
             plan the same paths, missing, bytes and FNV as on the cold mount
  requests   the FUSE requests a sample costs (docs/counters.md "FUSE requests per sample"):
             --layout imagefolder over nginx, 24 samples of 20-120 KB, a plan of all of them
             published, each read once as a data loader reads it (open, read to the end,
             close), in plan order: exactly one READ a sample, one IOCTL a buffered open()
             (Python's isatty()) and none an unbuffered one, no LOOKUP, GETATTR, OPEN,
             RELEASE, FLUSH or GETXATTR; over the mount's life one OPEN and one FLUSH, each
             answered ENOSYS, and no RELEASE; the samples' exact bytes

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tarfile  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import planread  # noqa: E402
from shardfs_test.planread import plan_fnv, plans  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log  # noqa: E402



ctl = ml.control_errno  # one command line: None, or the errno the mount answered



# The mounts whose GETs are counted exactly: the listing's ETag is nginx's "mtime-size", so by
# default each fill a reader meets costs one more GET (a cached unit compared with the store's,
# docs/faults.md "Validators", tested by remote-cache-weaketag); these tests count the fills'.
WEAK_TRUST = ['--weak-etag', 'trust']

def human(b):
    """fs_human_bytes: what the CLI prints for a byte count."""
    v, u = float(b), 0
    while v >= 1024 and u < 4:
        v /= 1024
        u += 1
    return ('%.2f %s' if u else '%.0f %s') % (v, ['B', 'KiB', 'MiB', 'GiB', 'TiB'][u])


def read(path):
    with open(path, 'rb') as f:
        return f.read()


def add(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 1700000000
    tf.addfile(ti, io.BytesIO(data))


def make_source(src, rng):
    """a/shard-000000.tar (k0, k1, and k0-link.jpg a hardlink to k0.jpg), a/shard-000001.tar
    (k2, k3), b/shard-000002.tar.gz (k4, k5), readme.txt. Returns {member path: size}."""
    sizes = {}
    os.makedirs(os.path.join(src, 'a'))
    os.makedirs(os.path.join(src, 'b'))
    for shard, keys, mode in (('a/shard-000000.tar', (0, 1), 'w'),
                              ('a/shard-000001.tar', (2, 3), 'w'),
                              ('b/shard-000002.tar.gz', (4, 5), 'w:gz')):
        d = shard.split('.')[0]
        with tarfile.open(os.path.join(src, shard), mode, format=tarfile.GNU_FORMAT) as tf:
            for k in keys:
                for ext in ('jpg', 'cls'):
                    data = bytes(rng.randrange(256) for _ in range(rng.randrange(1000, 30000)))
                    add(tf, 'k%d.%s' % (k, ext), data)
                    sizes['%s/k%d.%s' % (d, k, ext)] = len(data)
            if keys[0] == 0:
                ti = tarfile.TarInfo('k0-link.jpg')
                ti.type = tarfile.LNKTYPE
                ti.linkname = 'k0.jpg'
                tf.addfile(ti)
    with open(os.path.join(src, 'readme.txt'), 'wb') as f:
        f.write(b'hello\n' * 1000)
    return sizes


def unreadable_without_dac(env, ck):
    """A plan file the daemon cannot read: EACCES, nothing published. Root reads any file
    (CAP_DAC_OVERRIDE), and the suite runs as root: the daemon of this mount runs without
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (setpriv drops them from its bounding set),
    so a file of mode 0 is as unreadable to it as to any user. (A mount by uid 65534 would
    need /dev/fuse open to it, which a machine may not give.)"""
    if not shutil.which('setpriv'):
        ck.fail('setpriv (util-linux) is not installed: the EACCES case cannot run as root')
        return
    d = env.path('nodac')
    os.makedirs(os.path.join(d, 'src'))
    ml.write_file(os.path.join(d, 'src', 's0.tar'), ml.tar_bytes([('a.txt', b'a\n')]))
    locked = os.path.join(d, 'locked.txt')
    ml.write_file(locked, b's0/a.txt\n')
    os.chmod(locked, 0)
    drop = '-dac_override,-dac_read_search'
    with ml.Mount(env, os.path.join(d, 'src'), cache_dir=os.path.join(d, 'cache'),
                  mountpoint=os.path.join(d, 'mnt'),
                  prefix=['setpriv', '--bounding-set=' + drop, '--inh-caps=' + drop]) as m:
        pid = m.stats()['pid']
        with open('/proc/%d/status' % pid) as f:
            eff = int(next(ln for ln in f if ln.startswith('CapEff:')).split()[1], 16)
        ck.eq('the daemon runs without CAP_DAC_OVERRIDE (1) and CAP_DAC_READ_SEARCH (2)',
              eff & 0x6, 0)
        ck.eq('an unreadable FILE', ctl(m.mnt, 'plan job1 ' + locked), errno.EACCES)
        ck.eq('an unreadable FILE publishes nothing', m.stats()['plans_published'], 0)
        os.chmod(locked, 0o644)
        ck.eq('the same FILE made readable', ctl(m.mnt, 'plan job1 ' + locked), None)
        ck.eq('  published', m.stats()['plans_published'], 1)


def group_semantics(env, ck):
    src = env.path('src')
    sizes = make_source(src, random.Random(7))
    gz = os.path.getsize(os.path.join(src, 'b/shard-000002.tar.gz'))
    tar0 = os.path.getsize(os.path.join(src, 'a/shard-000000.tar'))
    tar1 = os.path.getsize(os.path.join(src, 'a/shard-000001.tar'))
    logf = env.path('daemon.log')
    with ml.Mount(env, src, cache_dir=env.path('cache'), extra=['--log-file', logf]) as m:
        mnt = m.mnt
        ck.eq('.shardfs listing (plans by name only)', sorted(os.listdir(mnt + '/.shardfs')),
              ['control', 'metrics', 'stats'])
        ck.eq('no plans at mount', plans(mnt), {})
        ck.eq('stats plans', m.stats()['plans'], 0)

        def plan_file(name, lines):
            p = env.path(name)
            with open(p, 'w') as f:
                f.write('\n'.join(lines) + '\n')
            return p

        def cli(*args, cwd=None):
            r = subprocess.run([env.shardfs, 'plan'] + list(args), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=60, cwd=cwd)
            return r.returncode, r.stdout.decode(), r.stderr.decode()

        # a plan of every kind of path, and of paths that name nothing
        found = ['a/shard-000000/k0.jpg', 'a/shard-000000/k1.cls', 'a/shard-000001.tar',
                 'b/shard-000002/k5.jpg', 'readme.txt', 'a/shard-000000/k0-link.jpg',
                 'a//shard-000000/./k1.jpg']
        missing = ['nope/x', 'a/shard-000000', '.shardfs/stats', '../etc/passwd',
                   'a/shard-000000/k0.jpg/x']
        lines = found[:2] + missing[:2] + found[2:5] + ['', missing[2]] + found[5:] + \
            missing[3:]
        p1 = plan_file('p1', lines)
        lookups = m.stats()['lookups']
        rc, out, err = cli(mnt, p1, '--name', 'job1')
        ck.eq('shardfs plan rc (%s)' % err.strip(), rc, 0)
        # the daemon resolves the plan's 12 paths itself: `lookups` counts the kernel's
        # LOOKUP requests only: 10, those of the CLI's accesses to .shardfs files (its
        # progress's first stats read included: 2; a publish this short prints none) and of
        # this second stats read (their entries have timeout 0: a LOOKUP each; .shardfs itself
        # is cached since the listing above); the paths skipped name nothing (none failed), so
        # the CLI reads no stats to ask why (before exit 1 was tied to failed lookups it did:
        # 2 more, 12); main before 2026-11-30 counted the 12 paths' components too (35)
        ck.eq('a plan\'s paths are no lookup requests', m.stats()['lookups'] - lookups, 10)
        want_bytes = (sizes['a/shard-000000/k0.jpg'] + sizes['a/shard-000000/k1.cls'] + tar1 +
                      gz + 1000 * 6 + sizes['a/shard-000000/k0.jpg'] +
                      sizes['a/shard-000000/k1.jpg'])
        ck.eq('shardfs plan says what it took', out,
              "plan 'job1': 7 paths, %s; 5 paths not in the mount (skipped)\n"
              % human(want_bytes))
        st = m.stats()
        ck.eq('plans', st['plans'], 1)
        ck.eq('plans_published', st['plans_published'], 1)
        ck.eq('plan_paths', st['plan_paths'], 7)
        ck.eq('plan_missing', st['plan_missing'], 5)
        ck.eq('plan_bytes (a gzip member: the whole raw shard)', st['plan_bytes'], want_bytes)
        ck.eq('plan_hits', st['plan_hits'], 0)
        pl = plans(mnt)
        ck.eq('plans file: job1', (pl['job1']['paths'], pl['job1']['missing'],
                                   pl['job1']['bytes'], pl['job1']['read'],
                                   pl['job1']['position']), (7, 5, want_bytes, 0, 0))
        ck.eq('job1 fnv is the found paths in order', pl['job1']['fnv'], plan_fnv(found))
        # replaced by a plan of the same name
        p2 = plan_file('p2', ['a/shard-000001/k2.jpg', 'a/shard-000001/k3.jpg'])
        rc, out, err = cli(mnt, p2, '--name', 'job1')
        ck.eq('replace rc', rc, 0)
        ck.eq('replace: what the CLI says', out,
              "plan 'job1': 2 paths, %s; 0 paths not in the mount (skipped)\n"
              % human(sizes['a/shard-000001/k2.jpg'] + sizes['a/shard-000001/k3.jpg']))
        st, pl = m.stats(), plans(mnt)
        ck.eq('replaced: plans', st['plans'], 1)
        ck.eq('replaced: plans_published', st['plans_published'], 2)
        ck.eq('replaced: plan_paths, plan_missing', (st['plan_paths'], st['plan_missing']),
              (2, 0))
        ck.eq('replaced: fnv', pl['job1']['fnv'],
              plan_fnv(['a/shard-000001/k2.jpg', 'a/shard-000001/k3.jpg']))
        # a second name: both kept
        p3 = plan_file('p3', ['a/shard-000001/k3.jpg', 'readme.txt', 'a/shard-000000/k0.jpg'])
        ck.eq('second plan rc', cli(mnt, p3, '--name', 'job2')[0], 0)
        st = m.stats()
        ck.eq('two plans', (st['plans'], st['plan_paths']), (2, 5))
        # reads of planned paths
        read(mnt + '/a/shard-000001/k3.jpg')  # job1 #1, job2 #0
        st, pl = m.stats(), plans(mnt)
        ck.eq('hits after one read (in two plans)', st['plan_hits'], 2)
        ck.eq('job1 read/position', (pl['job1']['read'], pl['job1']['position']), (1, 2))
        ck.eq('job2 read/position', (pl['job2']['read'], pl['job2']['position']), (1, 1))
        read(mnt + '/readme.txt')  # job2 #1
        read(mnt + '/a/shard-000000/k1.jpg')  # in no plan
        read(mnt + '/a/shard-000001/k2.jpg')  # job1 #0
        st, pl = m.stats(), plans(mnt)
        ck.eq('plan_hits', st['plan_hits'], 4)
        ck.eq('plan_read', st['plan_read'], 4)
        ck.eq('plan_position (2 + 2)', st['plan_position'], 4)
        ck.eq('job1 after reads', (pl['job1']['read'], pl['job1']['position']), (2, 2))
        ck.eq('job2 after reads', (pl['job2']['read'], pl['job2']['position']), (2, 2))
        # raw .tar paths, a gzip shard's members, a hardlink
        p4 = plan_file('p4', ['a/shard-000000.tar', 'b/shard-000002/k4.jpg',
                              'b/shard-000002/k5.jpg', 'a/shard-000000/k0-link.jpg'])
        ck.eq('job3 rc', cli(mnt, p4, '--name', 'job3')[0], 0)
        ck.eq('job3 bytes', plans(mnt)['job3']['bytes'],
              tar0 + 2 * gz + sizes['a/shard-000000/k0.jpg'])
        with open(os.path.join(src, 'a/shard-000000.tar'), 'rb') as f:
            ck.ok(read(mnt + '/a/shard-000000.tar') == f.read(), 'raw shard bytes')
        read(mnt + '/b/shard-000002/k5.jpg')
        read(mnt + '/a/shard-000000/k0.jpg')  # the hardlink's target: the same file
        pl, st = plans(mnt), m.stats()
        ck.eq('job3 read/position', (pl['job3']['read'], pl['job3']['position']), (3, 4))
        ck.eq('job2 got k0.jpg', (pl['job2']['read'], pl['job2']['position']), (3, 3))
        ck.eq('plan_hits', st['plan_hits'], 4 + 3 + 1)
        # the log: one line for the missing paths of job1, not one per path
        with open(logf, errors='replace') as f:
            text = f.read()
        ck.eq('one log line for job1\'s missing paths',
              text.count("plan 'job1': 5 paths not found in the mount were skipped"), 1)
        ck.ok('nope/x' not in text.replace("(the first: 'nope/x')", ''),
              'missing paths are not logged one by one')
        # refused
        published = m.stats()['plans_published']
        ck.eq('relative FILE', ctl(mnt, 'plan p1'), errno.EINVAL)
        ck.eq('relative FILE with a name', ctl(mnt, 'plan job1 rel/p1'), errno.EINVAL)
        ck.eq('missing FILE', ctl(mnt, 'plan job1 ' + env.path('nonexistent')), errno.ENOENT)
        ck.eq('a directory', ctl(mnt, 'plan job1 ' + env.path('')), errno.EISDIR)
        fifo = env.path('fifo')
        os.mkfifo(fifo)
        ck.eq('a FIFO (refused, not waited on)', ctl(mnt, 'plan job1 ' + fifo), errno.EINVAL)
        ck.eq('a file inside the mount', ctl(mnt, 'plan job1 ' + mnt + '/readme.txt'),
              errno.EINVAL)
        ck.eq('a bad name', ctl(mnt, 'plan bad!name ' + p1), errno.EINVAL)
        ck.eq('a name too long', ctl(mnt, 'plan %s %s' % ('n' * 65, p1)), errno.EINVAL)
        ck.eq('plan without FILE', ctl(mnt, 'plan'), errno.EINVAL)
        if os.geteuid() != 0:
            locked = plan_file('locked', ['readme.txt'])
            os.chmod(locked, 0)
            ck.eq('an unreadable FILE', ctl(mnt, 'plan job1 ' + locked), errno.EACCES)
        else:
            unreadable_without_dac(env, ck)  # root reads any file (CAP_DAC_OVERRIDE)
        ck.eq('refusals publish nothing', m.stats()['plans_published'], published)
        ck.eq('job1 unchanged by refusals', plans(mnt)['job1']['paths'], 2)
        rc, out, err = cli(mnt, env.path('nonexistent'))
        ck.ok(rc == 1 and 'cannot read the plan file' in err, 'CLI, missing FILE: %r' % err)
        rc, out, err = cli(mnt, env.path(''))
        ck.ok(rc == 1 and 'Is a directory' in err, 'CLI, a directory: %r' % err)
        # the CLI resolves a relative FILE
        rc, out, err = cli(mnt, 'p3', '--name', 'rel', cwd=env.path(''))
        ck.eq('CLI with a relative FILE (%s)' % err.strip(), rc, 0)
        ck.eq('  its plan', plans(mnt).get('rel', {}).get('paths'), 3)
        # the default name: the sender's pid
        ck.eq('plan without a name', ctl(mnt, 'plan ' + p3), None)
        ck.ok('pid-%d' % os.getpid() in plans(mnt), 'named pid-PID: %s' % sorted(plans(mnt)))
        ck.eq('plan-clear (own)', ctl(mnt, 'plan-clear'), None)
        ck.eq('plan-clear again', ctl(mnt, 'plan-clear'), errno.ENOENT)
        ck.eq('plan-clear job2', ctl(mnt, 'plan-clear job2'), None)
        rc, out, err = cli(mnt, '--clear', '--name', 'rel')
        ck.eq('CLI --clear', rc, 0)
        rc, out, err = cli(mnt, '--clear', '--name', 'rel')
        ck.ok(rc == 1 and "no plan named 'rel'" in err, 'CLI --clear of none: %r' % err)
        ck.eq('plans left', sorted(plans(mnt)), ['job1', 'job3'])
        ck.eq('plans after clears', m.stats()['plans'], 2)
        # at most 64: a new name past them drops the plan published longest ago (job1)
        for i in range(63):
            ck.ok(ctl(mnt, 'plan many%02d %s' % (i, p2)) is None, 'plan many%02d' % i)
        pl = plans(mnt)
        ck.eq('64 plans', len(pl), 64)
        ck.ok('job1' not in pl and 'job3' in pl, 'the oldest (job1) was dropped')
        ck.eq('stats plans', m.stats()['plans'], 64)
        # the CLI's usage
        ck.eq('plan --help', cli('--help')[0], 0)
        ck.eq('plan without FILE', cli(mnt)[0], 2)
        ck.eq('plan with a bad --name', cli(mnt, p1, '--name', 'a b')[0], 2)
        # one path found and one not: singular, exact
        rc, out, err = cli(mnt, plan_file('p5', ['readme.txt', 'nope/y']), '--name', 'one')
        ck.eq('one path: rc, stdout, stderr', (rc, out, err),
              (0, "plan 'one': 1 path, 5.86 KiB; 1 path not in the mount (skipped)\n", ''))
        # not a mount: said first, whatever FILE is (a missing one here)
        notmnt = env.path('notmnt')
        os.makedirs(notmnt)
        want = (1, '', 'shardfs: %s is not a shardfs mount\n' % notmnt)
        ck.eq('not a mount, missing FILE', cli(notmnt, env.path('nonexistent')), want)
        ck.eq('not a mount, good FILE', cli(notmnt, p1), want)
        ck.eq('not a mount, --clear', cli(notmnt, '--clear'), want)
        ck.eq('a mount, missing FILE', cli(mnt, env.path('nonexistent')),
              (1, '', 'shardfs plan: cannot read the plan file %s: No such file or directory\n'
               % env.path('nonexistent')))


def group_bigger(env, ck):
    """A plan bigger than the cache is taken whole; what is fetched ahead is what half the
    cache holds."""
    src = env.path('src')
    os.makedirs(src)
    rng = random.Random(3)
    digests, names = {}, []
    for s in range(6):
        name = 'shard-%06d.tar' % s
        with tarfile.open(os.path.join(src, name), 'w', format=tarfile.GNU_FORMAT) as tf:
            for k in range(4):
                add(tf, 'k%d_%d.bin' % (s, k), rng.randbytes(1024 * 1024 - 700))
        digests[name] = hashlib.md5(read(os.path.join(src, name))).hexdigest()
        names.append(name)
    total = sum(os.path.getsize(os.path.join(src, n)) for n in names)
    order = names[:]
    rng.shuffle(order)
    pf = env.path('plan')
    with open(pf, 'w') as f:
        f.write(''.join(n + '\n' for n in order))
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                      extra=['--cache-size', '8M', '--chunk-size', '1M', '--readahead', '1M',
                             '--warm', 'off']) as m:
            before = m.stats()
            ck.eq('plan rc', ctl(m.mnt, 'plan big ' + pf), None)
            st = m.stats()
            ck.eq('plan_paths', st['plan_paths'], 6)
            ck.eq('plan_bytes', st['plan_bytes'], total)
            ck.ok(st['plan_bytes'] > st['cache_bytes_limit'],
                  'the plan (%d) is bigger than the cache (%d)'
                  % (st['plan_bytes'], st['cache_bytes_limit']))
            # the link needs far more in flight than this cache holds (32 connections x a
            # 4 MB sample x 4): the cache bounds the lookahead, at half of it (what fills
            # ahead may hold once it is full), each planned path costing its bytes and a
            # 64 KiB unit. That is part of the first shard in plan order, fetched as its units
            sample = total // 6
            share = (st['cache_bytes_limit'] // 2) * sample // (sample + UNIT)
            units = ((share - 1) // UNIT + 1) * UNIT
            st = ml.poll(lambda: (lambda s: s['plan_fetch_bytes'] == share and
                                  s['bytes_fetched'] - before['bytes_fetched'] == units and
                                  s['fills_inflight'] == 0 and s)(m.stats())) or m.stats()
            ck.eq('publishing hands over the lookahead (paths, bytes)',
                  (st['plan_fetch_paths'], st['plan_fetch_bytes']), (1, share))
            ck.eq('the lookahead in force', st['plan_lookahead_bytes'], share)
            ck.eq('publishing fetched the lookahead', st['bytes_fetched'] - before['bytes_fetched'],
                  units)
            for i, n in enumerate(order):
                ck.eq('bytes of %s' % n, hashlib.md5(read(os.path.join(m.mnt, n))).hexdigest(),
                      digests[n])
            st = m.stats()
            pl = plans(m.mnt)['big']
            ck.eq('every planned shard read: hits', st['plan_hits'], 6)
            ck.eq('read/position', (pl['read'], pl['position']), (6, 6))
            ck.eq('read_errors', st['read_errors'], 0)
            log('plan of %d bytes over a cache of %d: fetched %d, evictions %d'
                % (total, st['cache_bytes_limit'], st['bytes_fetched'], st['evictions']))
    finally:
        ng.stop()


UNIT = 64 * 1024  # the cache tier's unit of range fills (default --chunk-size 8M / 128)


class Ahead:
    """What the fetcher should have handed over: per plan, the extents (shard, data offset,
    length) in plan order and the lookahead; the units (64 KiB) that covers."""

    def __init__(self, ext, share, shard_size):
        self.ext, self.share, self.shard_size = ext, share, shard_size
        self.cum = [0]
        for x in ext:
            self.cum.append(self.cum[-1] + x[2])

    def handed(self, position):
        """(paths, bytes, units) handed over once the reader's position (1 + the furthest
        extent read; each read in plan order) is position: every extent starting before
        cum[position] + share, the last one cut at that end."""
        limit = self.cum[position] + self.share
        paths = nbytes = 0
        units = set()
        for i, (shard, off, ln) in enumerate(self.ext):
            if self.cum[i] >= limit:
                break
            take = min(ln, limit - self.cum[i])
            paths += 1
            nbytes += take
            # a member of a sidecar's index is first read with its tar header (checked
            # member by member): its 512 bytes are fetched with it, not counted as its bytes
            first = off - 512
            units.update((shard, u) for u in range(first // UNIT, (off + take - 1) // UNIT + 1))
        return paths, nbytes, units

    def unit_bytes(self, units):
        return sum(min(UNIT, self.shard_size[s] - u * UNIT) for s, u in units)


def group_ahead(env, ck):
    """Fetching ahead along a plan, --plan-lookahead 1500K (a cache of 64M, which evicts
    nothing here; --warm off: the dataset fits; --chunk-size 512K: reads of one 8 MB shard
    land within a chunk of each other, which the cache tier takes for a sequential reader
    skipping small members, and it would read ahead;
    nothing here: a unit two members share is then fetched once): publishing hands exactly the planned
    extents within it to the cache tier, which fetches exactly their units; each read in plan
    order moves it on; every read of a planned path is then a hit with exact bytes; a second
    plan halves each plan's share."""
    # 4 shards of 80 members of ~100 KB: a shard is one chunk (8 MiB) and does not fit in the
    # cache, so a read fills the units it reads, not the whole shard
    src, members, shard_size = planread.sidecar_source(env, ck, 11, 80, mtime=1700000000)
    plan_a, plan_b = members[:70], members[70:100]
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                      extra=['--cache-size', '64M', '--plan-lookahead', '1500K', '--chunk-size', '512K',
                             '--warm', 'off', '--plan-gap', '0']) as m:
            for s in range(4):
                os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
            st0 = m.stats()
            ck.eq('indexes from the sidecars', st0['index_sidecar'], 4)
            share = 1500 * 1024
            a = Ahead([(x[0], x[2], x[3]) for x in plan_a], share, shard_size)

            def settled(paths, nbytes, units):
                want = st0['bytes_fetched'] + a.unit_bytes(units)

                def done():
                    st = m.stats()
                    return (st['plan_fetch_paths'] == paths and st['plan_fetch_bytes'] == nbytes
                            and st['bytes_fetched'] >= want and st['fills_inflight'] == 0
                            and st) or None
                st = ml.poll(done) or m.stats()
                return st, want

            planread.publish(ck, m.mnt, 'a', env.path('plan-a'), [x[1] for x in plan_a],
                             what='plan rc')
            paths, nbytes, units = a.handed(0)
            st, want = settled(paths, nbytes, units)
            ck.ok(0 < paths < len(plan_a), 'the lookahead (%d) holds part of the plan: %d of %d'
                  % (share, paths, len(plan_a)))
            ck.eq('handed over at publish (paths, bytes)',
                  (st['plan_fetch_paths'], st['plan_fetch_bytes']), (paths, nbytes))
            ck.eq('fetched at publish: exactly their units', st['bytes_fetched'], want)
            for i, x in enumerate(plan_a):
                if read(os.path.join(m.mnt, x[1])) != planread.ref(src, x):
                    ck.fail('bytes of %s (plan index %d)' % (x[1], i))
                p2, b2, u2 = a.handed(i + 1)
                units |= u2
                st, want = settled(p2, b2, units)
                if (st['plan_fetch_paths'], st['plan_fetch_bytes'], st['bytes_fetched']) != \
                        (p2, b2, want):
                    ck.fail('after reading plan index %d: handed %d paths, %d bytes, fetched '
                            '%d; want %d, %d, %d (%s)'
                            % (i, st['plan_fetch_paths'], st['plan_fetch_bytes'],
                               st['bytes_fetched'], p2, b2, want,
                               ', '.join('%s %d' % (k, st[k] - st0[k]) for k in (
                                   'cache_misses', 'readahead_fills', 'shard_prefetches',
                                   'evictions', 'evicted_bytes', 'prefetch_withdrawn'))))
                    break
            st = m.stats()
            ck.eq('every planned read a hit: misses', st['cache_misses'], st0['cache_misses'])
            ck.eq('plan_hits', st['plan_hits'], len(plan_a))
            ck.eq('handed over: every path once', st['plan_fetch_paths'], len(plan_a))
            ck.eq('fetched: the planned units once', st['bytes_fetched'],
                  st0['bytes_fetched'] + a.unit_bytes(units))
            ck.eq('read_errors', st['read_errors'], 0)
            # two plans: each gets half of the lookahead
            st1 = st
            b = Ahead([(x[0], x[2], x[3]) for x in plan_b], share // 2, shard_size)
            planread.publish(ck, m.mnt, 'b', env.path('plan-b'), [x[1] for x in plan_b])
            pb, bb, _ = b.handed(0)

            def b_handed():
                st = m.stats()
                return (st['plan_fetch_paths'] - st1['plan_fetch_paths'] >= pb and
                        st['fills_inflight'] == 0 and st) or None
            st = ml.poll(b_handed) or m.stats()
            ck.eq('plan b with half the lookahead (paths, bytes)',
                  (st['plan_fetch_paths'] - st1['plan_fetch_paths'],
                   st['plan_fetch_bytes'] - st1['plan_fetch_bytes']), (pb, bb))
            log('plan a: %d paths, %d bytes, lookahead %d: fetched %d bytes in %d fills, %d '
                'evictions' % (len(plan_a), a.cum[-1], share,
                               st1['bytes_fetched'] - st0['bytes_fetched'],
                               st1['fills'] - st0['fills'], st1['evictions']))
    finally:
        ng.stop()


def layout_shard(path, members):
    """Write a GNU tar of members [(name, size)] (random bytes); returns {name: (data offset,
    size)}."""
    rng = random.Random(path)
    with tarfile.open(path, 'w', format=tarfile.GNU_FORMAT) as tf:
        for name, size in members:
            add(tf, name, rng.randbytes(size))
    with tarfile.open(path) as tf:
        return {ti.name: (ti.offset_data, ti.size) for ti in tf.getmembers()}


def units_of(spans):
    """Bytes of the 64 KiB units covering each span [(first data offset, end)] with its first
    member's tar header (512 bytes before: members of a sidecar's index are fetched with it)."""
    return sum(((end - 1) // UNIT - (off - 512) // UNIT + 1) * UNIT for off, end in spans)


def group_coalesce(env, ck):
    """Requests shaped by the plan, on the link emulator (30 ms to first byte, 60 MB/s per
    connection). The exact counts hold for a gap given by the test (--plan-gap 1M, in force
    until the mount has measured its link: the planned fills are all shorter than the 1 MiB a
    rate is measured on), so no timing decides them; what the mount measures is checked only
    against bounds no load can break (time to first byte at least the emulator's 30 ms).
    A plan of 15 samples of 100,000 bytes in two shards, each sample 21 KB from the next
    planned one of its group, two groups of shard 0 5 MB apart. Publishing fetches exactly 3
    ranges (the two groups of shard 0 split, shard 1's group whole) in 3 GETs, exactly the units
    of the 3 spans, the bytes between counted as gap bytes; reading the plan then misses nothing
    and sends no GET. A second plan of the unplanned members between (fetched as gap bytes)
    costs no GET. Two plans of the same samples in two orders on a fresh cache: 3 GETs in all,
    each unit fetched once, every read a hit."""
    from shardfs_test import linkemu
    src = env.path('src')
    os.makedirs(src)
    P, U = 100000, 20000

    def group(tag, n):
        out = []
        for i in range(n):
            out.append(('%s%d.bin' % (tag, i), P))
            if i < n - 1:
                out.append(('u%s%d.bin' % (tag, i), U))
        return out
    # the sidecar's check reads the headers of the first and the last member by name: away
    # from the planned ones
    head, tail = [('a-head.bin', 300000)], [('m-pad.bin', 300000), ('z-tail.bin', 300000)]
    off0 = layout_shard(os.path.join(src, 'shard-000000.tar'),
                        head + group('p', 6) + [('m-fill.bin', 5000000)] + group('q', 4) + tail)
    off1 = layout_shard(os.path.join(src, 'shard-000001.tar'), head + group('r', 5) + tail)
    layout_shard(os.path.join(src, 'shard-000002.tar'), [('w.bin', 3000000)])
    r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('icache'), src])
    ck.eq('shardfs index --sidecar rc', r.returncode, 0)
    planned = [('shard-000000', n, off0[n]) for n in sorted(off0) if n[0] in 'pq'] + \
              [('shard-000001', n, off1[n]) for n in sorted(off1) if n[0] == 'r']
    rng = random.Random(5)
    rng.shuffle(planned)
    spans = []
    for members, offs in (((n for n in off0 if n[0] == 'p'), off0),
                          ((n for n in off0 if n[0] == 'q'), off0),
                          ((n for n in off1 if n[0] == 'r'), off1)):
        ms = sorted(offs[n] for n in members)
        spans.append((ms[0][0], ms[-1][0] + ms[-1][1]))
    planned_bytes = sum(x[2][1] for x in planned)
    # each planned member is fetched with its tar header (512 bytes before its data)
    gap_bytes = sum(e - o + 512 for o, e in spans) - planned_bytes - 512 * len(planned)
    emu = linkemu.Emu(src, 30, 60, env.tmp, 'coalesce', shardfs=env.shardfs)
    try:
        gap = 1 << 20
        with ml.Mount(env, emu.url(''), cache_dir=env.path('cache'),
                      extra=WEAK_TRUST + ['--cache-size', '64M', '--warm', 'off', '--plan-gap', '1M']) as m:
            for s in range(3):
                os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
            # the layout is far from the gap on either side: each group (a span may be one gap
            # long) below it, the 5 MB between the groups of shard 0 above it
            longest = max(e - o + 512 for o, e in spans)
            ck.ok(longest < gap < 5000000 - UNIT and longest < 1 << 20,
                  'the gap (%d) lies between the longest group (%d) and 5 MB, and no planned '
                  'fill is long enough to measure a rate' % (gap, longest))
            st0, g0 = m.stats(), emu.stats()['requests']
            ck.eq('no rate measured before publishing', st0['link_rate_bytes'], 0)

            pf = env.path('plan-c')
            planread.publish(ck, m.mnt, 'c', pf, ['%s/%s' % (s, n) for s, n, _ in planned],
                             what='plan rc')
            want = st0['bytes_fetched'] + units_of(spans)
            st = ml.poll(lambda: (lambda s: s['plan_fetch_paths'] == len(planned) and
                                  s['fills'] - st0['fills'] >= 3 and s['fills_inflight'] == 0 and
                                  s)(m.stats())) or m.stats()

            g1 = emu.stats()['requests']
            ck.eq('publishing: ranges handed over', st['plan_fetch_ranges'], 3)
            ck.eq('publishing: GETs sent', g1 - g0, 3)
            log('publishing: %s' % ', '.join('%s %d' % (k, st[k] - st0[k]) for k in (
                'fills', 'cache_misses', 'readahead_fills', 'prefetch_withdrawn', 'evictions')))
            ck.eq('publishing: exactly the units of the 3 spans',
                  st['bytes_fetched'] - st0['bytes_fetched'], units_of(spans))
            ck.eq('planned bytes handed over', st['plan_fetch_bytes'], planned_bytes)
            ck.eq('gap bytes fetched with them', st['plan_fetch_gap_bytes'], gap_bytes)
            ck.eq('the gap in force', st['plan_gap_bytes'], gap)
            for s, n, (o, size) in planned:
                with open(os.path.join(src, s + '.tar'), 'rb') as f:
                    f.seek(o)
                    ref = f.read(size)
                if read(os.path.join(m.mnt, s, n)) != ref:
                    ck.fail('bytes of %s/%s' % (s, n))
            st = m.stats()
            ck.eq('every planned read a hit: misses', st['cache_misses'], st0['cache_misses'])
            ck.eq('reading the plan sent no GET', emu.stats()['requests'], g1)
            ck.eq('plan_hits', st['plan_hits'], len(planned))
            # the bytes between were cached: a plan of the members there costs nothing
            between = [n for n in sorted(off0) if n.startswith('up')]
            planread.publish(ck, m.mnt, 'd', env.path('plan-d'),
                             ['shard-000000/%s' % n for n in between])
            st = ml.poll(lambda: (lambda s: s['plan_fetch_paths'] >= len(planned) + len(between)
                                  and s['fills_inflight'] == 0 and s)(m.stats())) or m.stats()
            for n in between:
                read(os.path.join(m.mnt, 'shard-000000', n))
            st = m.stats()
            ck.eq('the gap bytes serve a later plan: GETs', emu.stats()['requests'], g1)
            ck.eq('... misses', st['cache_misses'], st0['cache_misses'])
            ck.eq('read_errors', st['read_errors'], 0)
            # the mount learns its link from its own fills: a 3 MB member read in order
            with open(os.path.join(m.mnt, 'shard-000002', 'w.bin'), 'rb') as f:
                ck.eq('w.bin read whole', len(f.read()), 3000000)
            st = ml.poll(lambda: (lambda s: s['link_rate_bytes'] > 0 and s['fills_inflight'] == 0
                                  and s)(m.stats())) or m.stats()
            log('measured: time to first byte %d ms, %d B/s a connection: gap %d'
                % (st['link_ttfb_ms'], st['link_rate_bytes'],
                   st['link_rate_bytes'] * st['link_ttfb_ms'] // 1000))
            ck.ok(st['link_ttfb_ms'] >= 30 and st['link_rate_bytes'] > 0,
                  'measured: time to first byte %d ms (the emulator waits 30 ms), rate %d'
                  % (st['link_ttfb_ms'], st['link_rate_bytes']))
        # two plans competing: the same 15 samples in two orders, published one after the
        # other on a fresh cache; each plan's batch is grouped alike, and the second's ranges
        # find the first's units queued or filled: 3 GETs in all, each unit fetched once
        with ml.Mount(env, emu.url(''), cache_dir=env.path('cache2'),
                      extra=WEAK_TRUST + ['--cache-size', '64M', '--warm', 'off', '--plan-gap', '1M']) as m:
            for s in range(3):
                os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))
            st0, g0 = m.stats(), emu.stats()['requests']
            other = planned[:]
            random.Random(6).shuffle(other)
            pf3 = env.path('plan-e')
            planread.write_plan(pf3, ['%s/%s' % (s, n) for s, n, _ in other])
            planread.publish(ck, m.mnt, 'c', pf, what='plan c rc (second mount)')
            planread.publish(ck, m.mnt, 'e', pf3)
            st = ml.poll(lambda: (lambda s: s['plan_fetch_paths'] == 2 * len(planned) and
                                  s['fills'] - st0['fills'] >= 3 and s['fills_inflight'] == 0
                                  and s)(m.stats())) or m.stats()
            g1 = emu.stats()['requests']
            ck.eq('two plans: ranges handed over', st['plan_fetch_ranges'], 6)
            ck.eq('two plans: GETs sent', g1 - g0, 3)
            ck.eq('two plans: each unit once', st['bytes_fetched'] - st0['bytes_fetched'],
                  units_of(spans))
            for s, n, _ in other:
                read(os.path.join(m.mnt, s, n))
            st = m.stats()
            ck.eq('two plans: every read a hit', st['cache_misses'], st0['cache_misses'])
            ck.eq('two plans: reading sent no GET', emu.stats()['requests'], g1)
    finally:
        emu.stop()


def la_batches(n_paths, per_batch):
    """The fetcher's batches (fs_plan_fetch.c pfx_plan) for a plan of n_paths paths of one size
    whose lookahead is exactly per_batch paths, read in plan order one at a time: [(position
    at which the batch goes, first index, end index)]. A batch hands over the paths from the
    last one handed over up to position + per_batch; the next is due once the position reaches
    its middle path + 1."""
    out, nxt, mark = [], 0, 0
    for pos in range(n_paths + 1):
        if nxt >= n_paths or pos < mark:
            continue
        end = min(pos + per_batch, n_paths)
        if nxt < end:
            out.append((pos, nxt, end))
            mark = nxt + (end - 1 - nxt) // 2 + 1
            nxt = end
    return out


def group_lookahead(env, ck):
    """A plan larger than the cache, fetched with coalescing, on the link emulator (30 ms,
    60 MB/s), --plan-gap 1M given and no fill of 1 MiB (no rate is measured: the link's need is
    the floor, 4 x 32 x (1 MiB + a sample), far above the cache): the cache bounds the
    lookahead. Samples of 2 units (64 KiB) with their tar headers, unit-aligned (one read
    request each; a sample read in several: group pieces), in a cache of 2 x 8 x (a sample + a unit)
    bytes: the lookahead is half the cache with each path counted as its bytes and a unit,
    exactly 8 samples (plan_lookahead_bytes). The plan is built on the batches that lookahead
    gives: each batch's samples lie in shards of their own, at most 2 a shard with a 1-unit
    member between them (the bytes between stay within a quarter of a batch's planned bytes),
    shuffled within the batch. Read in plan
    order, one sample at a time, waiting after each for what the fetcher hands over: exact
    paths and bytes handed over, GETs (one per shard of a batch: the samples and the members
    between as one span), gap bytes and bytes fetched after every read; every read a hit with
    exact bytes, no unit fetched twice and no prefetch skipped for room (so no unit was evicted
    before its reader got there), while the cache evicted what was read."""
    from shardfs_test import linkemu
    U = UNIT
    L = 2 * U - 512  # a sample's data: with its header, 2 whole units
    PER = 8  # the lookahead in samples
    N = 48
    cache = 2 * PER * (L + U)
    batches = la_batches(N, PER)
    src = env.path('src')
    os.makedirs(src)
    rng = random.Random(31)
    planned = [None] * N  # plan index -> (shard, member)
    groups = []  # per batch: [(shard, [plan indexes in offset order])]
    shard_no = 0
    for _, a, b in batches:
        k = b - a
        ng = (k + 1) // 2
        sizes = [k // ng + (1 if g < k % ng else 0) for g in range(ng)]
        idx = list(range(a, b))
        rng.shuffle(idx)  # plan order within the batch mixes its shards
        bg, at = [], 0
        for g in range(ng):
            mine = sorted(idx[at:at + sizes[g]])
            at += sizes[g]
            name = 'shard-%06d' % shard_no
            shard_no += 1
            members = [('a-head.bin', 5 * U - 512)]
            for j, i in enumerate(mine):
                if j:
                    members.append(('u%02d.bin' % i, U - 512))
                members.append(('p%02d.bin' % i, L))
            members += [('m-pad.bin', U - 512), ('z-tail.bin', 5 * U - 512)]
            offs = layout_shard(os.path.join(src, name + '.tar'), members)
            for i in mine:
                o, size = offs['p%02d.bin' % i]
                if (o - 512) % U or size != L:
                    ck.fail('layout: p%02d.bin at %d is not unit-aligned' % (i, o))
                planned[i] = (name, 'p%02d.bin' % i, o)
            bg.append((name, mine))
        groups.append(bg)
    r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('icache'), src])
    ck.eq('shardfs index --sidecar rc', r.returncode, 0)

    # what each batch costs: a span per shard from its first sample's header to its last
    # sample's end, one GET; the members between are gap bytes
    def batch_cost(bg):
        gets = len(bg)
        units = sum(3 * len(m) - 1 for _, m in bg)
        gapb = sum((len(m) - 1) * U for _, m in bg)
        return gets, units * U, gapb
    want_at = {}  # position -> (paths, bytes handed, GETs, bytes fetched, gap bytes) so far
    tot = [0, 0, 0, 0, 0]
    for (pos, a, b), bg in zip(batches, groups):
        gets, fetched, gapb = batch_cost(bg)
        tot = [tot[0] + b - a, tot[1] + (b - a) * L, tot[2] + gets, tot[3] + fetched,
               tot[4] + gapb]
        want_at[pos] = tuple(tot)
    cur, progress = (0, 0, 0, 0, 0), []
    for pos in range(N + 1):
        cur = want_at.get(pos, cur)
        progress.append(cur)
    ck.ok(progress[N][3] > 2 * cache,
          'the plan fetches %d bytes, more than twice the cache (%d)' % (progress[N][3], cache))

    # --chunk-size 8M: the counts below are of 8M chunks (without it a small cache gets
    # chunks of an eighth of its size)
    emu = linkemu.Emu(src, 30, 60, env.tmp, 'lookahead', shardfs=env.shardfs)
    try:
        with ml.Mount(env, emu.url(''), cache_dir=env.path('cache'),
                      # the cache's lookahead: no stage (mount-stage-* test the stage's)
                      extra=WEAK_TRUST + ['--plan-memory', '0',
                                          '--cache-size', str(cache), '--plan-gap', '1M',
                                          '--warm', 'off', '--prefetch-shards', '0',
                                          '--min-free', '0', '--chunk-size', '8M']) as m:
            for k in range(shard_no):
                os.listdir(os.path.join(m.mnt, 'shard-%06d' % k))
            st0, g0 = m.stats(), emu.stats()['requests']
            ck.eq('the cache', st0['cache_bytes_limit'], cache)

            def settled(pos):
                paths, nbytes, gets, fetched, gapb = progress[pos]

                def done():
                    st = m.stats()
                    return (st['plan_fetch_paths'] == paths and st['fills_inflight'] == 0 and
                            st['bytes_fetched'] - st0['bytes_fetched'] >= fetched and
                            emu.stats()['requests'] - g0 >= gets and st) or None
                st = ml.poll(done) or m.stats()
                return st, (paths, nbytes, gets, fetched, gapb, st0['cache_misses'])

            def got(st):
                return (st['plan_fetch_paths'], st['plan_fetch_bytes'],
                        emu.stats()['requests'] - g0, st['bytes_fetched'] - st0['bytes_fetched'],
                        st['plan_fetch_gap_bytes'], st['cache_misses'])

            planread.publish(ck, m.mnt, 'big', env.path('plan'),
                             ['%s/%s' % (sh, mb) for sh, mb, _ in planned], what='plan rc')
            st, want = settled(0)
            ck.eq('the plan is bigger than the cache', st['plan_bytes'] > cache, True)
            ck.eq('the lookahead: half the cache, a path costing its bytes and a unit',
                  st['plan_lookahead_bytes'], PER * L)
            ck.eq('publishing: handed over, GETs, fetched, gap bytes, misses (paths, bytes, '
                  'GETs, bytes fetched, gap bytes, misses)', got(st), want)
            for i, (sh, mb, o) in enumerate(planned):
                with open(os.path.join(src, sh + '.tar'), 'rb') as f:
                    f.seek(o)
                    ref = f.read(L)
                if read(os.path.join(m.mnt, sh, mb)) != ref:
                    ck.fail('bytes of %s/%s (plan index %d)' % (sh, mb, i))
                st, want = settled(i + 1)
                if got(st) != want:
                    ck.fail('after reading plan index %d: (paths, bytes, GETs, bytes fetched, gap '
                            'bytes, misses) %s, want %s (%s)'
                            % (i, got(st), want, ', '.join('%s %d' % (k, st[k] - st0[k]) for k in (
                                'fills', 'evictions', 'evicted_bytes', 'prefetch_withdrawn',
                                'cache_unfit_bytes'))))
                    break
            st = m.stats()
            ck.eq('at the end (paths, bytes, GETs, bytes fetched, gap bytes, misses)', got(st),
                  progress[N][:5] + (st0['cache_misses'],))
            ck.eq('every planned read a hit: plan_hits', st['plan_hits'], N)
            ck.eq('no prefetch skipped for room', st['cache_unfit_bytes'], st0['cache_unfit_bytes'])
            ck.eq('no prefetch withdrawn', st['prefetch_withdrawn'], st0['prefetch_withdrawn'])
            ck.ok(st['evicted_bytes'] - st0['evicted_bytes'] >= progress[N][3] - cache,
                  'the cache evicted what was read: %d bytes'
                  % (st['evicted_bytes'] - st0['evicted_bytes']))
            ck.eq('no rate measured (every fill under 1 MiB)', st['link_rate_bytes'], 0)
            ck.eq('the lookahead at the end', st['plan_lookahead_bytes'], PER * L)
            ck.eq('read_errors', st['read_errors'], 0)
            log('%d samples in %d batches over %d shards, cache %d: %d GETs, fetched %d, gap %d, '
                'evicted %d in %d evictions' % (
                    N, len(batches), shard_no, cache, progress[N][2], progress[N][3],
                    progress[N][4], st['evicted_bytes'] - st0['evicted_bytes'],
                    st['evictions'] - st0['evictions']))
        # a reader that leaves paths behind its position (a loader's workers read batches
        # side by side; here: paths skipped) holds their units ahead too: they take their
        # cost off the room, at most half the plan's lookahead. The first 16 samples, on a
        # fresh cache: publishing hands over 8 (marks the batch's middle: 4); reading plan
        # index 1 then 4 puts the position at 5 with 3 paths behind it not read: the lookahead
        # is 8 - 3 = 5 samples, handed up to 5 + 5 = 10; reading 7 and 9 (position 10, 6
        # behind, counted as half the lookahead: 2.5) makes it 5.5, handed up to 15.5
        with ml.Mount(env, emu.url(''), cache_dir=env.path('cache2'),
                      # the cache's lookahead: no stage (mount-stage-* test the stage's)
                      extra=WEAK_TRUST + ['--plan-memory', '0',
                                          '--cache-size', str(cache), '--plan-gap', '1M',
                                          '--warm', 'off', '--prefetch-shards', '0',
                                          '--min-free', '0', '--chunk-size', '8M']) as m:
            for k in range(shard_no):
                os.listdir(os.path.join(m.mnt, 'shard-%06d' % k))
            planread.publish(ck, m.mnt, 'skip', env.path('plan-skip'),
                             ['%s/%s' % (sh, mb) for sh, mb, _ in planned[:16]])

            def handed(want):
                # The three counters are read without the planner's lock, and the lookahead
                # is written at the end of its pass: a read between the last path counted and
                # that write sees the pass half done. So wait for the whole tuple (and no fill
                # in flight); a tuple that never comes raises after the poll's bound, with the
                # mount's diagnosis.
                def now():
                    s = m.stats()
                    t = (s['plan_fetch_paths'], s['plan_fetch_bytes'], s['plan_lookahead_bytes'])
                    return t if t == want and s['fills_inflight'] == 0 else None
                return ml.poll(now, what='the planner to hand over (paths, bytes, lookahead) '
                               '%r, no fill in flight' % (want,))
            want = (8, 8 * L, 8 * L)
            ck.eq('skip: publishing (paths, bytes handed over, lookahead)', handed(want), want)
            for i in (1, 4):
                read(os.path.join(m.mnt, planned[i][0], planned[i][1]))
            want = (10, 10 * L, 5 * L)
            ck.eq('skip: 3 paths behind the position (paths, bytes, lookahead)', handed(want), want)
            for i in (7, 9):
                read(os.path.join(m.mnt, planned[i][0], planned[i][1]))
            want = (16, 15 * L + L // 2, 5 * L + L // 2)
            ck.eq('skip: 6 behind, at most half the lookahead (paths, bytes, lookahead)',
                  handed(want), want)
    finally:
        emu.stop()


def group_pieces(env, ck):
    """A planned path larger than one FUSE read (read in several requests) keeps the units it has
    not read yet while its reader reads it: the fetcher's fill of the next planned path, which
    must evict, comes between the requests of the first and takes what was read, never the
    rest (its units become unneeded as the reads that cover them land, not at the first).
    nginx, --chunk-size 512K (64 KiB units), a cache of 16 units, --plan-gap 0 and a lookahead
    of exactly one path (--plan-lookahead); one shard with a sidecar index, every member
    unit-aligned with its tar header: a-head (1 unit), an unplanned filler (7 units, read
    first: what least recently used order evicts), two planned samples of 5 units (320 KiB
    with the header) in chunks of their own, more than a chunk apart (the reads of the second
    are no sequential run: no readahead). The first sample is read in requests of 128 KiB
    (os.read with POSIX_FADV_RANDOM: no kernel readahead), and the test waits after the first
    for the fetcher to hand over the second sample and for its fill, which evicts 3 units:
    the 2 units the first request read and the oldest unit no plan speaks of. Exact bytes
    fetched (each unit once), GETs, evictions and evicted bytes; every read after the filler
    a hit. (Its first request is a checked read of the member with its header: copied, so no
    pin of it outlives the reply.) The same again with the first sample's last 128 KiB read
    first (pread; it starts inside a unit whose start is not read yet, which stays), then the
    rest: the same counts (before, the last request made every unit of the path unneeded and
    the fill evicted its unread ones: one unit fetched twice)."""
    U = UNIT
    S = 5 * U - 512  # a sample's data: with its header, 5 whole units
    src = env.path('src')
    os.makedirs(src)
    members = [('a-head.bin', U - 512), ('f-fill.bin', 7 * U - 512), ('p0.bin', S),
               ('m-pad.bin', 11 * U - 512), ('p1.bin', S), ('z-tail.bin', U - 512)]
    offs = layout_shard(os.path.join(src, 'shard-000000.tar'), members)
    want_at = {'f-fill.bin': U, 'p0.bin': 8 * U, 'p1.bin': 24 * U}
    for n, at in want_at.items():
        ck.eq('layout: %s header at' % n, offs[n][0] - 512, at)
    r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('icache'), src])
    ck.eq('shardfs index --sidecar rc', r.returncode, 0)
    with open(os.path.join(src, 'shard-000000.tar'), 'rb') as f:
        data = f.read()

    def ref(n):
        o, size = offs[n]
        return data[o:o + size]

    ng = web.Nginx(env.path('nginx'), src).start()

    def gets():
        return sum(1 for ln in ng.requests() if '"GET ' in ln and 'shard-000000.tar ' in ln)

    def case(tag, last_first):
        def eq(what, got, want):
            ck.eq('%s: %s' % (tag, what), got, want)

        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache-' + tag),
                      extra=WEAK_TRUST + ['--cache-size', str(16 * U), '--chunk-size', '512K',
                             '--plan-gap', '0', '--plan-lookahead', str(S), '--warm', 'off',
                             '--prefetch-shards', '0', '--min-free', '0']) as m:
            sh = os.path.join(m.mnt, 'shard-000000')
            os.listdir(sh)
            st0, g0 = m.stats(), gets()

            def pieces(n, count=None):
                """Read member n in requests of 128 KiB, count of them (None: all); returns
                the bytes and the open fd (closed when count is None)."""
                fd = os.open(os.path.join(sh, n), os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                got, k = b'', 0
                while count is None or k < count:
                    b = os.read(fd, 128 * 1024)
                    if not b:
                        break
                    got += b
                    k += 1
                if count is None:
                    os.close(fd)
                return got, fd

            got, _ = pieces('f-fill.bin')
            eq('the filler\'s bytes', got, ref('f-fill.bin'))
            st1 = m.stats()
            eq('the filler: one chunk fill (bytes, GETs)',
               (st1['bytes_fetched'] - st0['bytes_fetched'], gets() - g0), (7 * U, 1))
            pf = env.path('plan')
            with open(pf, 'w') as f:
                f.write('shard-000000/p0.bin\nshard-000000/p1.bin\n')
            eq('plan rc', ctl(m.mnt, 'plan pieces ' + pf), None)

            def handed(paths, fetched):
                # a path handed over is queued, not yet a fill in flight: wait for the
                # bytes its fill brings too (more than those fails the check below)
                return ml.poll(lambda: (lambda s: s['plan_fetch_paths'] >= paths and
                                        s['bytes_fetched'] - st1['bytes_fetched'] >= fetched and
                                        s['fills_inflight'] == 0 and s)(m.stats())) or m.stats()
            st = handed(1, 5 * U)
            eq('publishing: one path handed over and fetched, nothing evicted (paths, '
               'bytes fetched, evictions)',
               (st['plan_fetch_paths'], st['bytes_fetched'] - st1['bytes_fetched'],
                   st['evictions'] - st0['evictions']), (1, 5 * U, 0))
            if last_first:  # the last request first, as readahead on two FUSE threads may send it
                fd = os.open(os.path.join(sh, 'p0.bin'), os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                last = os.pread(fd, 128 * 1024, S - 128 * 1024)
            else:
                first, fd = pieces('p0.bin', 1)
            # the position moved: the second sample goes, and its fill evicts
            st = handed(2, 10 * U)
            eq('after the first request: the second path fetched, 3 units evicted '
               '(paths, bytes fetched, evictions, evicted bytes)',
               (st['plan_fetch_paths'], st['bytes_fetched'] - st1['bytes_fetched'],
                   st['evictions'] - st0['evictions'], st['evicted_bytes'] - st0['evicted_bytes']),
               (2, 10 * U, 1, 3 * U))
            rest, base = b'', 0 if last_first else len(first)
            want = S - 128 * 1024 if last_first else S - len(first)  # up to the piece read
            while len(rest) < want:
                b = os.pread(fd, min(128 * 1024, want - len(rest)), base + len(rest))
                if not b:
                    break
                rest += b
            os.close(fd)
            eq('the first sample\'s bytes', rest + last if last_first else first + rest,
               ref('p0.bin'))
            got, _ = pieces('p1.bin')
            eq('the second sample\'s bytes', got, ref('p1.bin'))
            st = m.stats()
            eq('no unit fetched twice: bytes fetched (the filler and the two samples), GETs',
               (st['bytes_fetched'] - st0['bytes_fetched'], gets() - g0), (17 * U, 3))
            eq('every read after the filler a hit: misses', st['cache_misses'],
               st1['cache_misses'])
            eq('evictions, evicted bytes',
               (st['evictions'] - st0['evictions'], st['evicted_bytes'] - st0['evicted_bytes']),
               (1, 3 * U))
            eq('nothing skipped for room', st['cache_unfit_bytes'], st0['cache_unfit_bytes'])
            eq('plan_hits', st['plan_hits'], 2)
            eq('read_errors', st['read_errors'], 0)
    try:
        case('in order', False)
        case('last request first', True)
    finally:
        ng.stop()


NU_UNIT = 64 * 1024  # --chunk-size 512K: units of 64 KiB, each file here one unit


def nextuse_model(reads, plans, sizes, limit, policy, side='lru'):
    """(misses, bytes fetched, bytes evicted) of reading the files in reads (names, in order,
    each read whole, one unit each) through a cache of limit bytes. policy 'lru': the least
    recently used unit goes first. 'next': as the cache tier orders by the plans' marks: units
    no plan needs again (least recently used first), then units no plan speaks of (least
    recently used first; side='fifo': first filled first), then units a plan needs, the
    furthest next use first. A plan's extent j is at position cum[j] >> 12 (4 KiB of the
    plan's bytes before it; every plan here was published at clock 0), a unit's next use the
    nearest unread occurrence in any plan. A tie between planned units is an error of the
    construction (the mount may break it either way)."""
    occ = []
    for p in plans:
        o, cum = {}, 0
        for f in p:
            o.setdefault(f, []).append(cum >> 12)
            cum += sizes[f]
        occ.append(o)
    done = [{} for _ in plans]
    cache, last, filled = set(), {}, {}
    misses = fetched = evicted = 0

    def key(g):
        if policy == 'lru':
            return (1, last[g])
        nxt = [o[g][done[k].get(g, 0)] for k, o in enumerate(occ)
               if g in o and done[k].get(g, 0) < len(o[g])]
        if nxt:
            return (3, -min(nxt))
        if any(g in o for o in occ):
            return (0, last[g])
        return (1, last[g] if side == 'lru' else filled[g])

    for t, f in enumerate(reads):
        if f not in cache:
            misses += 1
            fetched += sizes[f]
            while sum(sizes[g] for g in cache) + sizes[f] > limit:
                ks = sorted((key(g), g) for g in cache)
                if len(ks) > 1 and ks[0][0] == ks[1][0] and ks[0][0][0] == 3:
                    raise RuntimeError('planned units tie at read %d' % t)
                cache.discard(ks[0][1])
                evicted += sizes[ks[0][1]]
            cache.add(f)
            filled[f] = t
        last[f] = t
        for k, o in enumerate(occ):  # a read marks its next occurrence in every plan
            if f in o and done[k].get(f, 0) < len(o[f]):
                done[k][f] = done[k].get(f, 0) + 1
    return misses, fetched, evicted


def group_nextuse(env, ck):
    """Eviction by next use: the cache tier evicts units no plan needs first, then units no
    plan speaks of in least recently used order, then planned units, furthest next use first;
    each case against a model of the rule and of least recently used order."""
    src = env.path('src')
    os.makedirs(src)
    rng = random.Random(25)
    sizes = {}
    names = (['f%02d' % i for i in range(12)] + ['a%d' % i for i in range(5)] +
             ['b%d' % i for i in range(5)] + ['p%d' % i for i in range(7)] +
             ['u%d' % i for i in range(4)])
    for n in names:
        # b files are 60 KiB: the two plans' positions (16 and 15 per file) never tie
        sizes[n] = NU_UNIT - (4096 if n[0] == 'b' else 0)
        ml.write_file(os.path.join(src, n + '.bin'), rng.randbytes(sizes[n]))
    limit = 8 * NU_UNIT
    ng = web.Nginx(env.path('nginx'), src).start()

    def case(tag, plans, reads, want, others):
        """Publish plans (lists of names), then read reads in order, each whole, dropping the
        kernel's pages after each read so that every read reaches the mount."""
        model = nextuse_model(reads, plans, sizes, limit, 'next')
        ck.eq('%s: the model gives the count this case is built for' % tag, model[0], want)
        for what, count in others.items():
            ck.ok(count != want, '%s: %s gives the same count (%d): the case shows nothing'
                  % (tag, what, count))
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache-' + tag),
                      extra=['--cache-size', str(limit), '--chunk-size', '512K',
                             '--plan-lookahead', '0', '--warm', 'off', '--min-free', '0',
                             '--prefetch-shards', '0']) as m:
            for k, p in enumerate(plans):
                planread.publish(ck, m.mnt, '%s%d' % (tag, k), env.path('plan-%s-%d' % (tag, k)),
                                 [n + '.bin' for n in p], what='%s: plan %d rc' % (tag, k))
            st0 = m.stats()
            ck.eq('%s: nothing fetched before the reads' % tag, st0['bytes_fetched'], 0)
            for n in reads:
                fd = os.open(os.path.join(m.mnt, n + '.bin'), os.O_RDONLY)
                try:
                    got = b''
                    while True:
                        b = os.read(fd, 1 << 20)
                        if not b:
                            break
                        got += b
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
                m.reads_settled()  # its units unpinned before the next read's fill evicts
                if got != read(os.path.join(src, n + '.bin')):
                    ck.fail('%s: bytes of %s' % (tag, n))
            st = m.stats()
            planned = sum(1 for n in reads if any(n in p for p in plans))
            ck.eq('%s: every planned read reached the mount (plan_hits)' % tag,
                  st['plan_hits'], planned)
            ck.eq('%s: misses, bytes fetched, bytes evicted' % tag,
                  (st['cache_misses'] - st0['cache_misses'], st['bytes_fetched'],
                   st['evicted_bytes']), model)
            ck.eq('%s: read_errors' % tag, st['read_errors'], 0)
            log('%s: %d reads, %d fills, %d evictions (%s)' % (
                tag, len(reads), model[0], st['evictions'],
                ', '.join('%s %d' % kv for kv in others.items())))

    try:
        # one plan, 12 files in order twice: the second pass finds 7 of the first's files
        f = ['f%02d' % i for i in range(12)]
        one = f + f
        case('one', [one], one, 16,
             {'least recently used': nextuse_model(one, [one], sizes, limit, 'lru')[0]})
        # two plans read in turns, 5 files each three times (a: 64 KiB, b: 60 KiB)
        a = ['a%d' % i for i in range(5)] * 3
        b = ['b%d' % i for i in range(5)] * 3
        turns = [x for pair in zip(a, b) for x in pair]
        case('two', [a, b], turns, 14,
             {'plan a alone': nextuse_model(turns, [a], sizes, limit, 'next')[0],
              'plan b alone': nextuse_model(turns, [b], sizes, limit, 'next')[0],
              'least recently used': nextuse_model(turns, [a, b], sizes, limit, 'lru')[0]})
        # a plan of 7 files twice, with an unplanned reader after every second planned read
        p = ['p%d' % i for i in range(7)] * 2
        u = ['u0', 'u1', 'u0', 'u2', 'u0', 'u3', 'u0']
        side = []
        for i, x in enumerate(p):
            side.append(x)
            if i % 2:
                side.append(u[i // 2])
        case('side', [p], side, 11,
             {'unplanned in fill order': nextuse_model(side, [p], sizes, limit, 'next',
                                                       'fifo')[0],
              'least recently used': nextuse_model(side, [p], sizes, limit, 'lru')[0]})
    finally:
        ng.stop()


def group_partread(env, ck):
    """A planned path left part-read keeps its units marked as needed now while 63 more planned
    paths start after it (its reader may still read on: a fill evicts the furthest planned
    units instead), and once a 64th starts its units are needed by none (its reader stopped):
    the next fill evicts them first. nginx, one shard with a sidecar index whose members are
    one unit each with their tar headers (head, A, Q00..Q63, Z, tail), a cache of 4 units, no
    fetching ahead; a plan of A, then Q00..Qn, each read for its first 4 KiB only (no unit read
    to its end; a first read of a member is checked and copied: no pin outlives it), then the
    unplanned Z, whose fill must evict a unit, then A whole. Each fill is one unit; the first
    two evictions take the units the sidecar's check read, then each Q's fill evicts the Q
    before it (the furthest next use: A's is the nearest). With 63 Qs, Z's fill evicts Q62 and
    A is a hit; with 64, Z's fill evicts A, which is fetched again (evicting Z). Exact misses,
    bytes fetched, evictions."""
    src = env.path('src')
    os.makedirs(src)
    U = UNIT
    qs = ['q%02d.bin' % i for i in range(64)]
    members = [(n, U - 512) for n in ['a-head.bin', 'b-a.bin'] + qs + ['y-z.bin', 'z-tail.bin']]
    offs = layout_shard(os.path.join(src, 'shard-000000.tar'), members)
    for k, (n, _) in enumerate(members):
        ck.eq('layout: %s header at' % n, offs[n][0] - 512, k * U)
    r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('icache'), src])
    ck.eq('shardfs index --sidecar rc', r.returncode, 0)
    with open(os.path.join(src, 'shard-000000.tar'), 'rb') as f:
        data = f.read()
    ng = web.Nginx(env.path('nginx'), src).start()

    def case(nq, a_missed):
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache-%d' % nq),
                      extra=['--cache-size', str(4 * U), '--chunk-size', '512K',
                             '--plan-lookahead', '0', '--warm', 'off', '--min-free', '0',
                             '--prefetch-shards', '0']) as m:
            sh = os.path.join(m.mnt, 'shard-000000')
            os.listdir(sh)
            planned = ['b-a.bin'] + qs[:nq]
            planread.publish(ck, m.mnt, 'part', env.path('plan-%d' % nq),
                             ['shard-000000/%s' % n for n in planned], what='%d: plan rc' % nq)
            st0 = m.stats()
            ck.eq('%d: the sidecar\'s check read 2 units' % nq, st0['bytes_fetched'], 2 * U)
            for n in planned:
                fd = os.open(os.path.join(sh, n), os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                    if len(os.read(fd, 4096)) != 4096:
                        ck.fail('%d: a short read of %s' % (nq, n))
                finally:
                    os.close(fd)
                m.reads_settled()  # its unit unpinned before the next read's fill evicts
            for n in ('y-z.bin', 'b-a.bin'):
                o, size = offs[n]
                ck.eq('%d: bytes of %s' % (nq, n), read(os.path.join(sh, n)), data[o:o + size])
            st = m.stats()
            # fills: A, each Q, Z, and A again when it was evicted; evictions: each Q but the
            # first, Z, and A's second fill
            fills = 1 + nq + 1 + a_missed
            ck.eq('%d: misses, bytes fetched, evictions, evicted bytes' % nq,
                  (st['cache_misses'] - st0['cache_misses'],
                   st['bytes_fetched'] - st0['bytes_fetched'], st['evictions'] - st0['evictions'],
                   st['evicted_bytes'] - st0['evicted_bytes']),
                  (fills, U * fills, nq + a_missed, U * (nq + a_missed)))
            ck.eq('%d: plan_hits' % nq, st['plan_hits'], 1 + nq)
            ck.eq('%d: read_errors' % nq, st['read_errors'], 0)
    try:
        case(63, 0)
        case(64, 1)
    finally:
        ng.stop()

def vm_hwm(pid):
    """The peak resident set of process pid, in bytes (VmHWM)."""
    with open('/proc/%d/status' % pid) as f:
        for ln in f:
            if ln.startswith('VmHWM:'):
                return int(ln.split()[1]) * 1024
    raise RuntimeError('no VmHWM for pid %d' % pid)


def group_file(env, ck):
    src = env.path('src')
    os.makedirs(src)
    ml.write_file(os.path.join(src, 's.tar'), ml.tar_bytes([('a.txt', b'a' * 3000)]))
    logf = env.path('daemon.log')
    with ml.Mount(env, src, cache_dir=env.path('cache'), extra=['--log-file', logf]) as m:
        # a file that is no plan (a shadow file's lines): never copied into the log
        secret = env.path('shadow')
        ml.write_file(secret, b'root:$6$SECRETSALT$SECRETHASH:19000:0:99999:7:::\n'
                      b'daemon:*SECRET2:19000:0:99999:7:::\ns/a.txt\n\nno-newline-SECRET3')
        ck.eq('shadow-like file: accepted', ctl(m.mnt, 'plan sh ' + secret), None)
        st = m.stats()
        ck.eq('shadow-like file: paths, missing', (st['plan_paths'], st['plan_missing']),
              (1, 3))
        with open(logf, errors='replace') as f:
            text = f.read()
        ck.ok('SECRET' not in text and 'root:' not in text and 'daemon:' not in text,
              'the plan file\'s text is in the log: %r' % text[-2000:])
        ck.ok("plan 'sh': 3 paths not found in the mount were skipped (lines 1, 2, 5 of the "
              "plan file)" in text, 'the log does not give the lines: %r' % text[-2000:])
        # a big file is read in pieces: 48 MiB of lines longer than a path can be, then one
        # path: the daemon's peak memory does not grow by the file's size
        big = env.path('big')
        line = b'x' * 8191 + b'\n'
        with open(big, 'wb') as f:
            for _ in range(48 * 1024 * 1024 // len(line)):
                f.write(line)
            f.write(b's/a.txt\n')
        pid = m.stats()['pid']
        before = vm_hwm(pid)
        ck.eq('big file: accepted', ctl(m.mnt, 'plan big ' + big), None)
        grown = vm_hwm(pid) - before
        log('peak RSS %d before, grew by %d bytes with a %d-byte plan file' % (
            before, grown, os.path.getsize(big)))
        ck.ok(grown < 8 << 20, 'peak RSS grew by %d bytes for a 48 MiB plan file' % grown)
        pl = plans(m.mnt)
        ck.eq('big file: paths, missing', (pl['big']['paths'], pl['big']['missing']),
              (1, 48 * 1024 * 1024 // len(line)))
        ck.eq('big file: fnv', pl['big']['fnv'], plan_fnv(['s/a.txt']))


def ctl_child(mnt, line):
    """The argv of a child process that sends one command line with ctl() and prints what the
    mount answered: 'none' or the errno."""
    code = ('import sys; sys.path.insert(0, %r); from shardfs_test import mount as ml; '
            'e = ml.control_errno(%r, %r); print("none" if e is None else e)'
            % (os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'), mnt, line))
    return [sys.executable, '-c', code]


def ctl_bounded(env, mnt, line):
    """ctl() from a child process given 60 s: its errno, None, or 'hung' (a plan file read
    from the mount by the mount itself, with every handler busy, never answers)."""
    try:
        r = subprocess.run(ctl_child(mnt, line), stdout=subprocess.PIPE, timeout=60)
    except subprocess.TimeoutExpired:
        return 'hung'
    out = r.stdout.decode().strip()
    return None if out == 'none' else int(out) if out.isdigit() else out


def group_inside(env, ck):
    """A plan file inside the mount by another path than its own, with --threads 1 (the one
    handler thread is the one reading the plan file): a symlink to a file in the mount, a path
    through a symlink to the mount's directory, one through '..', one through a bind mount of
    the mount: each refused with EINVAL at once, never read through the mount (which would wait
    for a handler forever); a symlink to a file outside the mount is taken; the mount answers
    after every one."""
    src = env.path('src')
    make_source(src, random.Random(7))
    outside = env.path('plan-outside')
    with open(outside, 'w') as f:
        f.write('readme.txt\n')
    with ml.Mount(env, src, cache_dir=env.path('cache'), extra=['--threads', '1']) as m:
        mnt = m.mnt
        links = env.path('links')
        os.makedirs(links)
        os.symlink(mnt + '/readme.txt', links + '/to-file')
        os.symlink(mnt, links + '/to-mount')
        os.symlink(outside, links + '/to-outside')
        os.symlink(links + '/to-file', links + '/to-link')
        parent, base = os.path.split(mnt)
        cases = [('a symlink to a file in the mount', links + '/to-file'),
                 ('a symlink to a symlink to it', links + '/to-link'),
                 ('a path through a symlink to the mount', links + '/to-mount/readme.txt'),
                 ('a path through ..', links + '/../' + base + '/readme.txt'
                  if os.path.dirname(links) == parent else None),
                 ('the mount itself through a symlink', links + '/to-mount')]
        for what, path in cases:
            if path is None:
                ck.fail('%s: the test\'s directories moved' % what)
                continue
            ck.eq('%s: refused' % what, ctl_bounded(env, mnt, 'plan in ' + path), errno.EINVAL)
            ck.eq('%s: the mount answers after' % what, sorted(os.listdir(mnt)), ['a', 'b',
                                                                                'readme.txt'])
        bind = env.path('bind')
        os.makedirs(bind)
        ck.ok(os.geteuid() == 0, 'a bind mount of the mount needs root')
        if os.geteuid() == 0:
            subprocess.run(['mount', '--bind', mnt, bind], check=True, timeout=60)
            try:
                ck.eq('a path through a bind mount of the mount: refused',
                      ctl_bounded(env, mnt, 'plan in ' + bind + '/readme.txt'), errno.EINVAL)
            finally:
                subprocess.run(['umount', '-l', bind], timeout=60)
        ck.eq('a symlink to a file outside the mount: taken',
              ctl_bounded(env, mnt, 'plan out ' + links + '/to-outside'), None)
        ck.eq('  its paths', plans(mnt).get('out', {}).get('paths'), 1)
        ck.eq('plans published', m.stats()['plans_published'], 1)


def group_interrupt(env, ck):
    """A plan file of 8 M lines (some 180 MB, tens of seconds to resolve) sent by a process
    that gets SIGINT once the daemon has the file open: the daemon sees the request
    interrupted, stops reading the file and answers EINTR, so the sender ends and nothing is
    published (before: the whole file was read, the sender waiting uninterruptibly, and the
    plan published). The mount serves a plan sent after it."""
    src = env.path('src')
    make_source(src, random.Random(7))
    big = env.path('big-plan')
    with open(big, 'w') as f:
        chunk = 'a/shard-000000/k0.jpg\n' * 65536
        for _ in range(128):
            f.write(chunk)
    small = env.path('small-plan')
    with open(small, 'w') as f:
        f.write('readme.txt\n')
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        pid = m.stats()['pid']
        child = subprocess.Popen(ctl_child(m.mnt, 'plan big ' + big), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True)

        def reading():
            try:
                return any(os.readlink('/proc/%d/fd/%s' % (pid, fd)) == big
                           for fd in os.listdir('/proc/%d/fd' % pid))
            except OSError:
                return False
        try:
            ck.ok(ml.poll(reading), 'the daemon never opened the plan file')
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=600)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        log('sender: rc %r, stdout %r, stderr tail %r' % (child.returncode, out,
                                                           err.decode(errors='replace')[-200:]))
        ck.ok(b'KeyboardInterrupt' in err, 'the sender was not interrupted: %r' % err[-200:])
        st = m.stats()
        ck.eq('plans published after the interrupted one', st['plans_published'], 0)
        ck.eq('no plan named big', 'big' in plans(m.mnt), False)
        ck.eq('a plan after it', ctl(m.mnt, 'plan small ' + small), None)
        ck.eq('  its paths', plans(m.mnt).get('small', {}).get('paths'), 1)


def group_indexahead(env, ck):
    """`shardfs plan` on a fresh mount of shards without indexes, on the link emulator (30 ms
    to first byte, 1 MB/s per connection, nginx's ETag with --weak-etag trust so no probe
    request is counted): the plan names 6 of 8 shards (each of 10 members of 60-120 KB,
    seeded) and 2 paths that are not in the mount. Publishing builds exactly the 6 shards'
    indexes ahead of the paths (plan_index_wanted, plan_index_done, index_built 6), several at
    once: the emulator sees exactly 2 GETs per shard (the first unit's, then the readahead's
    rest: 12) and exactly the 6 shards' bytes, the 2 unnamed shards none; the CLI's exit status
    0, its stdout the exact summary line, its stderr nothing but progress lines. A second plan
    of the same paths: no request, nothing indexed. `shardfs plan --help` says the bound of its
    wait. Before (one shard after another as the paths were resolved, no counters): the
    counters' 3 checks fail."""
    import re
    from shardfs_test import linkemu
    src = env.path('src')
    os.makedirs(src)
    sizes, named = {}, []
    for s in range(8):
        members = [('m%02d.bin' % i, env.rng.randint(60000, 120000)) for i in range(10)]
        layout_shard(os.path.join(src, 'shard-%06d.tar' % s), members)
        sizes[s] = os.path.getsize(os.path.join(src, 'shard-%06d.tar' % s))
        if s not in (2, 5):
            named += ['shard-%06d/%s' % (s, n) for n, _ in members]
    env.rng.shuffle(named)
    planned = sum(os.path.getsize(os.path.join(src, 'shard-%06d.tar' % s))
                  for s in sizes if s not in (2, 5))
    member_bytes = 0
    for p in named:
        s = int(p[6:12])
        with tarfile.open(os.path.join(src, 'shard-%06d.tar' % s)) as tf:
            member_bytes += tf.getmember(p.split('/')[1]).size
    pf = env.path('plan.txt')
    with open(pf, 'w') as f:
        f.write(''.join(p + '\n' for p in named[:30] + ['nope/x.bin'] + named[30:] +
                        ['shard-000000/nope.bin']))
    r = env.run([env.shardfs, 'plan', '--help'])
    ck.eq('plan --help rc', r.returncode, 0)
    ck.ok(b'no progress for 2 minutes' in r.stdout, 'plan --help says its bound: %r' % r.stdout)
    emu = linkemu.Emu(src, 30, 1, env.tmp, 'indexahead', shardfs=env.shardfs)
    try:
        with ml.Mount(env, emu.url(''), cache_dir=env.path('cache'),
                      extra=WEAK_TRUST + ['--warm', 'off']) as m:
            st0, e0 = m.stats(), emu.stats()
            r = env.run([env.shardfs, 'plan', m.mnt, pf])
            st, e1 = m.stats(), emu.stats()
            ck.eq('plan rc', r.returncode, 0)
            ck.eq('plan stdout', r.stdout.decode(), "plan 'default': %d paths, %s; 2 paths not in the "
                  "mount (skipped)\n" % (len(named), human(member_bytes)))
            bad = [ln for ln in r.stderr.decode().splitlines() if not re.fullmatch(
                r"shardfs plan: indexing the plan's shards: \d+ of \d+ done, [0-9.]+ \S+ "
                r"read \(\d+ s\)", ln)]
            ck.eq('plan stderr: progress lines only', bad, [])
            log('plan: %s; emulator %d requests, %d bytes, %d connections' % (
                r.stderr.decode().strip().replace('\n', ' | '), e1['requests'] - e0['requests'],
                e1['bytes_sent'] - e0['bytes_sent'], e1['connections'] - e0['connections']))
            ck.eq('plan_index_wanted', st.get('plan_index_wanted'), 6)
            ck.eq('plan_index_done', st.get('plan_index_done'), 6)
            ck.eq('index_built', st['index_built'] - st0['index_built'], 6)
            ck.eq('GETs: 2 per named shard', e1['requests'] - e0['requests'], 12)
            ck.eq('bytes: the named shards\' exactly', e1['bytes_sent'] - e0['bytes_sent'],
                  planned)
            ck.eq('fills', st['fills'] - st0['fills'], 12)
            ck.eq('plan_paths', st['plan_paths'], len(named))
            ck.eq('plan_missing', st['plan_missing'], 2)
            r = env.run([env.shardfs, 'plan', m.mnt, pf])
            ck.eq('again: rc', r.returncode, 0)
            ck.eq('again: no request', emu.stats()['requests'], e1['requests'])
            ck.eq('again: nothing indexed', m.stats().get('plan_index_wanted'), 6)
    finally:
        emu.stop()


def group_indexahead_if(env, ck):
    """See the module's doc: the plan's index pass under --layout imagefolder. Before it
    (the pass did nothing in this layout): the remounts' plan_index_wanted/_done are 0: 2
    checks fail (the resolving pass then loads or builds the same shards, one by one)."""
    src, cache = env.path('src'), env.path('cache')
    os.makedirs(src)
    for s in range(8):
        with tarfile.open(os.path.join(src, 'shard-%06d.tar' % s), 'w') as tf:
            for k in range(6):
                for ext, data in (('cls', b'%d' % env.rng.randint(0, 2)),
                                  ('jpg', bytes(env.rng.getrandbits(8)
                                                for _ in range(env.rng.randint(100, 3000))))):
                    ti = tarfile.TarInfo('s%d_%03d.%s' % (s, k, ext))
                    ti.size = len(data)
                    ti.mtime = 1700000000
                    tf.addfile(ti, io.BytesIO(data))
    named = sorted(env.rng.sample(range(8), 5))
    opts = ['--layout', 'imagefolder', '--class-from', 'cls']
    pf = env.path('plan.txt')

    def plan(m, label):
        st0 = m.stats()
        r = env.run([env.shardfs, 'plan', m.mnt, pf, '--name', 'p'])
        st = m.stats()
        ck.eq('%s: plan rc' % label, r.returncode, 0)
        got = plans(m.mnt).get('p') or {}
        log('%s: %s %r' % (label, r.stdout.decode().strip(), got))
        return st0, st, tuple(got.get(k) for k in ('paths', 'missing', 'bytes', 'fnv'))

    with ml.Mount(env, src, cache_dir=cache, extra=opts) as m:
        lines, data = [], {}
        for c in sorted(os.listdir(m.mnt)):
            for f in sorted(os.listdir(os.path.join(m.mnt, c))):
                if int(f[1:f.index('_')]) in named:
                    lines.append('%s/%s' % (c, f))
                    data[lines[-1]] = ml.read_all(os.path.join(m.mnt, c, f))
        env.rng.shuffle(lines)
        with open(pf, 'w') as f:
            f.write(''.join(x + '\n' for x in lines + ['nope/x.jpg', lines[0] + '.no']))
        st0, st, cold = plan(m, 'cold')
        ck.eq('cold: index_built by the mount', st0['index_built'], 8)
        ck.eq('cold: plan_index_wanted, plan_index_done', (st.get('plan_index_wanted'),
              st.get('plan_index_done')), (0, 0))
        ck.eq('cold: paths, missing', cold[:2], (len(lines), 2))
    for label, remove in (('warm', False), ('no index files', True)):
        if remove:
            gone = 0
            for d, _, files in os.walk(cache):
                for f in files:
                    with open(os.path.join(d, f), 'rb') as fh:
                        idx = fh.read(8) == b'SHRDIDX\0'
                    if idx:
                        os.unlink(os.path.join(d, f))
                        gone += 1
            ck.eq('index files removed', gone, 8)
        with ml.Mount(env, src, cache_dir=cache, extra=opts) as m:
            st0, st, got = plan(m, label)
            ck.eq('%s: index_built, index_loaded at the mount' % label,
                  (st0['index_built'], st0['index_loaded']), (0, 0))
            ck.eq('%s: plan_index_wanted, plan_index_done' % label,
                  (st.get('plan_index_wanted'), st.get('plan_index_done')), (5, 5))
            ck.eq('%s: index_built, index_loaded by the plan' % label,
                  (st['index_built'], st['index_loaded']), (5, 0) if remove else (0, 5))
            ck.eq('%s: paths, missing, bytes, fnv as on the cold mount' % label, got, cold)
            ck.eq('%s: imagefolder_view_loaded, imagefolder_view_rejected' % label,
                  (st.get('imagefolder_view_loaded'), st.get('imagefolder_view_rejected')),
                  (1, 0))
            wrong = [x for x in lines if ml.read_all(os.path.join(m.mnt, x)) != data[x]]
            ck.eq('%s: files read with other bytes' % label, wrong, [])


# The requests the kernel sends, by the daemon's counters (docs/counters.md).
REQUEST_KEYS = ('lookups', 'getattrs', 'opens', 'releases', 'flushes', 'xattr_requests',
                'ioctls', 'reads', 'forgets')


def group_requests(env, ck):
    """See the module's doc. Every directory and file of the view is held by an O_PATH fd once
    listed, so that another process's drop_caches cannot make the kernel forget it (a LOOKUP
    less a FORGET is counted). Before the counters of OPEN, RELEASE, FLUSH and IOCTL (main's
    fc218ae): 3 of 9 checks fail."""
    from shardfs_test.kcache import Pins
    src = env.path('src')
    os.makedirs(src)
    data = {}
    for s in range(3):
        with tarfile.open(os.path.join(src, 'shard-%06d.tar' % s), 'w') as tf:
            for k in range(8):
                jpg = env.rng.randbytes(env.rng.randrange(20000, 120000))
                add(tf, 's%d_%03d.cls' % (s, k), b'%d' % env.rng.randrange(3))
                add(tf, 's%d_%03d.jpg' % (s, k), jpg)
                data['s%d_%03d.jpg' % (s, k)] = jpg
    ng = web.Nginx(env.path('nginx'), src).start()
    pins = Pins()
    try:
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                      extra=WEAK_TRUST + ['--layout', 'imagefolder', '--class-from', 'cls']) as m:
            try:
                paths = []
                for root, dirs, names in os.walk(m.mnt):
                    for n in dirs + names:
                        pins.path(os.path.join(root, n))
                    paths += [os.path.relpath(os.path.join(root, n), m.mnt) for n in names]
                env.rng.shuffle(paths)
                ck.eq('files in the view', sorted(os.path.basename(p) for p in paths), sorted(data))
                pf = env.path('plan.txt')
                with open(pf, 'w') as f:
                    f.write(''.join(p + '\n' for p in paths))
                r = env.run([env.shardfs, 'plan', m.mnt, pf, '--name', 'epoch'])
                ck.eq('plan rc', r.returncode, 0)

                def counts():
                    # three reads of the stats file, the last one's counts and what one read
                    # costs (the same every read: the mount's first close, whose FLUSH is
                    # answered ENOSYS, came before)
                    m.stats()
                    b = m.stats()
                    c = m.stats()
                    return c, {k: c.get(k, -1) - b.get(k, -1) for k in REQUEST_KEYS}

                before, _ = counts()
                bad = []
                for i, p in enumerate(paths):
                    buffering = -1 if i % 2 == 0 else 0  # Python's default, or a FileIO
                    with open(os.path.join(m.mnt, p), 'rb', buffering=buffering) as f:
                        got = f.read()
                    if got != data[os.path.basename(p)]:
                        bad.append(p)
                st, cost = counts()
                # from before's render: the rest of its read, the samples, then three reads
                # (the last up to its render)
                d = {k: st.get(k, -1) - before.get(k, -1) - 3 * cost[k] for k in REQUEST_KEYS}
                log('requests for %d samples: %s' % (len(paths), d))
                n, buffered = len(paths), (len(paths) + 1) // 2
                ck.eq('samples whose bytes differ', bad, [])
                ck.eq('plan_hits: every sample read was planned', st.get('plan_hits'), n)
                ck.eq('READs: one a sample', d['reads'], n)
                ck.eq('IOCTLs: one a buffered open (isatty), none an unbuffered one', d['ioctls'],
                      buffered)
                ck.eq('LOOKUPs (less forgets), GETATTRs, OPENs, RELEASEs, FLUSHes, GETXATTRs',
                      (d['lookups'] - d['forgets'], d['getattrs'], d['opens'], d['releases'],
                       d['flushes'], d['xattr_requests']), (0, 0, 0, 0, 0, 0))
                st = m.stats()
                ck.eq("the mount's OPENs and FLUSHes: the first of each, answered ENOSYS",
                      (st.get('opens'), st.get('flushes')), (1, 1))
                ck.eq("the mount's RELEASEs", st.get('releases'), 0)
            finally:
                pins.close()  # before the unmount
    finally:
        pins.close()
        ng.stop()


GROUPS = {'file': group_file, 'semantics': group_semantics, 'bigger': group_bigger,
          'ahead': group_ahead, 'coalesce': group_coalesce, 'nextuse': group_nextuse,
          'lookahead': group_lookahead, 'pieces': group_pieces, 'partread': group_partread,
          'inside': group_inside, 'interrupt': group_interrupt, 'indexahead': group_indexahead,
          'indexahead-if': group_indexahead_if, 'requests': group_requests}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, 'plan-')
