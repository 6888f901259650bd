#!/usr/bin/python3
"""shardfs mount tests (docs/design.md sections 1 and 3).

usage: test_mount.py SHARDFS GROUP [--version X]
GROUP: cli cli-truth formats mtime-range tools readonly damaged hostile cache listing
prefetch-runs prefetch-waits cli-owner refresh-noticed nosuid interrupt readahead   (or 'gen'
to only check the generator and GNU tar's extraction side, without mounting anything).

Exit: 0 pass, 1 fail, 77 skip (only when FUSE is unusable here). Environment: SHARDFS_TEST_SEED
(default fixed), SHARDFS_TEST_KEEP=1 keeps the temp dir, SHARDFS_TEST_DEADLINE (s, default 240).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import shutil  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import tarfile  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.kcache import Delta, Pins  # noqa: E402
from shardfs_test import shardgen as sg  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

INT_FIELDS = ('pid', 'objects', 'shards', 'index_built', 'index_loaded', 'index_bytes_scanned',
              'members', 'damaged_shards', 'skipped_members', 'reads', 'read_bytes', 'read_errors')
STR_FIELDS = ('source', 'cache_dir', 'version')
EXPECTED_VERSION = None


# ---------------------------------------------------------------------------------------------
# shared pieces
# ---------------------------------------------------------------------------------------------

def shard_dir_rel(shard_rel):
    d, b = os.path.split(shard_rel)
    return os.path.join(d, sg.shard_dir_name(b)) if d else sg.shard_dir_name(b)


def prepare_formats(env, builder=sg.build_formats_source):
    """Generate the source, extract every shard with GNU tar. Returns (src, info, refs) where
    refs[shard_rel] = (snapshot of the extraction, explicit dir set, extraction dir)."""
    src = env.path('src')
    t = time.monotonic()
    info = builder(src, env.path('gen'), env.rng)
    refs = {}
    for s in info['shards']:
        dest = env.path('ref', s + '.d')
        ml.gnu_extract(env, os.path.join(src, s), dest)
        refs[s] = (ml.snapshot(dest), ml.explicit_dirs(os.path.join(src, s)), dest)
    total = sum(len(r[0]) for r in refs.values())
    log('generated %d shards + %d plain files in %s (%d member entries per GNU tar) in %.1fs'
        % (len(info['shards']), len(info['plain']), src, total, time.monotonic() - t))
    for s in info['shards']:
        snap = refs[s][0]
        kinds = {}
        for e in snap.values():
            kinds[e.kind] = kinds.get(e.kind, 0) + 1
        log('  %-40s %8d bytes  %s' % (s, os.path.getsize(os.path.join(src, s)),
                                        ' '.join('%s=%d' % kv for kv in sorted(kinds.items()))))
    return src, info, refs


def expected_paths(src, refs):
    """Every relpath the mount must show (files, dirs, symlinks), .shardfs excluded."""
    exp = set(ml.snapshot(src, read=False))
    for s, (snap, _, _) in refs.items():
        sd = shard_dir_rel(s)
        exp.add(sd)
        exp.update(sd + '/' + p for p in snap)
    return exp


def check_stats_fields(ck, st, label):
    if not ck.ok(isinstance(st, dict), '%s: stats is not a JSON object: %s' % (label, ml.short(st))):
        return False
    for k in INT_FIELDS:
        ck.ok(type(st.get(k)) is int, '%s: stats field %r should be an integer, got %s'
              % (label, k, ml.short(st.get(k))))
    for k in STR_FIELDS:
        ck.ok(isinstance(st.get(k), str), '%s: stats field %r should be a string, got %s'
              % (label, k, ml.short(st.get(k))))
    if EXPECTED_VERSION and isinstance(st.get('version'), str):
        ck.ok(EXPECTED_VERSION in st['version'], '%s: stats version %r does not contain %r'
              % (label, st['version'], EXPECTED_VERSION))
    return True


def source_fingerprint(src):
    return {p: (e.kind, e.size, e.mtime, e.mode, e.digest) for p, e in ml.snapshot(src).items()}


def verify_formats_mount(env, ck, m, src, info, refs, label):
    """Full comparison of a mounted formats source against the source and GNU tar."""
    mnt = m.mnt
    t = time.monotonic()
    got_all = ml.snapshot(mnt, read=True, ck=ck)
    log('%s: walked and read the whole mount: %d entries in %.1fs'
        % (label, len(got_all), time.monotonic() - t))
    ck.ok('.shardfs' not in got_all, '%s: .shardfs is listed in the mount root' % label)
    exp = expected_paths(src, refs)
    for p in sorted(set(got_all) - exp):
        ck.fail('%s: unexpected path in mount: %r' % (label, p))
    for p in sorted(exp - set(got_all)):
        ck.fail('%s: missing path in mount: %r' % (label, p))
    ck.eq('%s: total entries in mount' % label, len(got_all), len(exp))

    ino_map = {}
    # plain files, raw shards and source directories
    src_snap = ml.snapshot(src)
    nraw = nplain = 0
    for p, r in sorted(src_snap.items()):
        g = got_all.get(p)
        if g is None:
            continue
        if not ck.eq('%s: %r type' % (label, p), g.kind, r.kind):
            continue
        ino_map.setdefault(g.ino, set()).add(('source', p))
        if r.kind == 'file':
            ck.eq('%s: %r size' % (label, p), g.size, r.size)
            if g.error is not None:
                ck.fail('%s: reading %r: %s' % (label, p, g.error))
            else:
                ck.eq('%s: %r content sha256' % (label, p), g.digest, r.digest)
            if sg.shard_dir_name(os.path.basename(p)):
                nraw += 1
            else:
                nplain += 1
    log('%s: compared %d raw shard files and %d plain files byte for byte with the source'
        % (label, nraw, nplain))
    ck.eq('%s: raw shard files compared' % label, nraw, len(info['shards']))
    ck.eq('%s: plain files compared' % label, nplain, len(info['plain']))

    # random-offset reads on raw shards and on the bigger members
    for s in info['shards']:
        with open(os.path.join(src, s), 'rb') as f:
            data = f.read()
        ml.check_preads(ck, label, os.path.join(mnt, s), data, env.rng)
        snap, _, dest = refs[s]
        for p, e in snap.items():
            if e.kind == 'file' and e.size > 60000:
                with open(os.path.join(dest, p), 'rb') as f:
                    ml.check_preads(ck, label, os.path.join(mnt, shard_dir_rel(s), p), f.read(),
                                    env.rng)

    # members of every shard against GNU tar's extraction
    tot = dict(files=0, dirs=0, symlinks=0, bytes=0, hardlink_groups=0)
    for s in info['shards']:
        snap, explicit, _ = refs[s]
        sd = shard_dir_rel(s)
        g = got_all.get(sd)
        ck.ok(g is not None and g.kind == 'dir', '%s: shard directory %r missing or not a dir (%r)'
              % (label, sd, g))
        if g is not None:
            ino_map.setdefault(g.ino, set()).add(('shard-dir', sd))
        sub = {p[len(sd) + 1:]: e for p, e in got_all.items() if p.startswith(sd + '/')}
        c = ml.compare_trees(ck, '%s %s' % (label, s), sub, snap, explicit, ino_map)
        for k in tot:
            tot[k] += c[k]
        log('%s: %-40s %3d entries: %d files (%d bytes), %d dirs (%d explicit), %d symlinks, '
            '%d hardlink groups' % (label, s, len(snap), c['files'], c['bytes'], c['dirs'],
                                    len(explicit), c['symlinks'], c['hardlink_groups']))
    log('%s: members compared: %r' % (label, tot))
    ml.check_ino_unique(ck, ino_map)
    return got_all


def check_control_dir(ck, m, label):
    mnt = m.mnt
    names = os.listdir(mnt)
    ck.ok('.shardfs' not in names, '%s: os.listdir(mount) shows .shardfs: %r' % (label, names))
    try:
        st = os.stat(os.path.join(mnt, '.shardfs'))
        ck.ok(stat.S_ISDIR(st.st_mode), '%s: .shardfs is not a directory' % label)
    except OSError as e:
        ck.fail('%s: stat MOUNT/.shardfs: %s' % (label, e))
    try:
        st = m.stats()
    except (OSError, ValueError) as e:
        ck.fail('%s: reading MOUNT/.shardfs/stats: %s' % (label, e))
        return None
    check_stats_fields(ck, st, label)
    return st


# ---------------------------------------------------------------------------------------------
# groups
# ---------------------------------------------------------------------------------------------

def group_gen(env, ck):
    """Generator + GNU tar extraction side only (no mount)."""
    src, info, refs = prepare_formats(env)
    ck.ok(len(info['shards']) == 17, 'expected 17 shards, got %d' % len(info['shards']))
    for s, (snap, explicit, _) in refs.items():
        ck.ok(len(snap) > 0, 'extraction of %s is empty' % s)
        for d in explicit:
            ck.ok(d in snap and snap[d].kind == 'dir', '%s: explicit dir %r not extracted' % (s, d))
    u = refs['ustar.tar'][0]
    ck.eq('ustar dup.txt is the later copy', u['dup.txt'].size, 42)
    ck.eq('ustar dup.txt mode', oct(u['dup.txt'].mode), oct(0o600))
    ck.ok(u['docs/a.txt'].ino == u['docs/a_hard.txt'].ino, 'ustar hardlink not extracted')
    g = refs['gnu.tar'][0]
    ck.eq('gnu tri nlink', g['tri/one'].nlink, 3)
    ck.ok('implicit' not in refs['ustar.tar'][1], 'implicit dir stored explicitly')
    dm = sg.build_damaged_source(env.path('dsrc'), env.rng)
    for name, e in sorted(dm.items()):
        log('damaged %-20s exact=%s eio=%s absent=%s maybe=%s prefix=%s' % (
            name, sorted(e['exact']), sorted(e['eio']), e['absent'], sorted(e['maybe']),
            e.get('decoded_prefix')))
    ck.ok(set(dm['gztrunc.tar.gz']['exact']) >= {'f1.bin', 'f2.bin', 'f3.bin'}, 'gz prefix')
    ck.ok(set(dm['zsttrunc.tar.zst']['exact']) >= {'f1.bin', 'f2.bin'}, 'zst prefix')
    hx, lo, hi = sg.build_hostile_source(env.path('hsrc'), env.rng)
    r = env.run(['tar', '-tvf', env.path('hsrc', 'sub', 'hostile.tar')])
    log(r.stdout.decode(errors='replace'))
    mr = sg.build_mtime_range_source(env.path('msrc'), env.path('mgen'), env.rng)
    for s in mr['shards']:
        dest = env.path('mref', s)
        ml.gnu_extract(env, env.path('msrc', s), dest)
        snap = ml.snapshot(dest)
        ck.eq('%s before1970 mtime' % s, snap['before1970.txt'].mtime, -1000000)
        ck.eq('%s y2286 mtime' % s, snap['y2286.txt'].mtime, 9999999999)


def group_formats(env, ck):
    src, info, refs = prepare_formats(env)
    before = source_fingerprint(src)
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        check_control_dir(ck, m, 'formats')
        verify_formats_mount(env, ck, m, src, info, refs, 'formats')
        st = check_control_dir(ck, m, 'formats')
        if st:
            log('stats after full walk: %s' % json.dumps(st, sort_keys=True))
            nfiles = len([p for p in ml.snapshot(src, read=False).values() if p.kind == 'file'])
            ck.eq('stats shards', st.get('shards'), len(info['shards']))
            ck.eq('stats objects (files in the source)', st.get('objects'), nfiles)
            ck.eq('stats index_built after listing every shard', st.get('index_built'),
                  len(info['shards']))
            ck.eq('stats index_loaded (fresh cache dir)', st.get('index_loaded'), 0)
            ck.eq('stats damaged_shards', st.get('damaged_shards'), 0)
            ck.eq('stats read_errors', st.get('read_errors'), 0)
            # lower bound: regular files with distinct inodes (however hardlinks, symlinks and
            # directories are counted, these are members)
            nmem = sum(len({e.ino for e in s[0].values() if e.kind == 'file'}) for s in refs.values())
            ck.ok(isinstance(st.get('members'), int) and st['members'] >= nmem,
                  'stats members %r < %d distinct regular files' % (st.get('members'), nmem))
            ck.ok(isinstance(st.get('reads'), int) and st['reads'] > 0, 'stats reads not > 0')
            ck.ok(isinstance(st.get('read_bytes'), int) and st['read_bytes'] > 0,
                  'stats read_bytes not > 0')
            ck.ok(isinstance(st.get('index_bytes_scanned'), int) and st['index_bytes_scanned'] > 0,
                  'stats index_bytes_scanned not > 0 after building indexes')
            ck.ok(isinstance(st.get('source'), str) and os.path.realpath(src) in st['source'],
                  'stats source %r does not name %s' % (st.get('source'), src))
            cd = os.path.realpath(env.path('cache'))
            ck.ok(isinstance(st.get('cache_dir'), str) and
                  (os.path.realpath(st['cache_dir']) + '/').startswith(cd + '/'),
                  'stats cache_dir %r is not --cache-dir %s or inside it' % (st.get('cache_dir'), cd))
            ck.ok(ml.pid_alive(st.get('pid', -1)) if isinstance(st.get('pid'), int) else False,
                  'stats pid %r is not a live process' % st.get('pid'))
    ck.eq('source directory unchanged by the mount', source_fingerprint(src), before)


def group_mtime_range(env, ck):
    src, info, refs = prepare_formats(env, sg.build_mtime_range_source)
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        verify_formats_mount(env, ck, m, src, info, refs, 'mtime-range')


def group_tools(env, ck):
    src, info, refs = prepare_formats(env)
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        mnt = m.mnt
        # tar tf on the raw shards
        for s in info['shards']:
            a = env.run(['tar', 'tf', os.path.join(mnt, s)], timeout=60)
            b = env.run(['tar', 'tf', os.path.join(src, s)], timeout=60)
            ck.eq('tar tf MOUNT/%s exit status' % s, a.returncode, 0)
            if ck.eq('tar tf MOUNT/%s output' % s, a.stdout, b.stdout):
                log('tools: tar tf %-40s %d names, identical' % (s, b.stdout.count(b'\n')))
            else:
                log('  stderr: %s' % a.stderr.decode(errors='replace'))
        # cmp on every source file
        n = 0
        for p, e in sorted(ml.snapshot(src, read=False).items()):
            if e.kind == 'file':
                r = env.run(['cmp', os.path.join(src, p), os.path.join(mnt, p)], timeout=60)
                ck.ok(r.returncode == 0, 'cmp SRC/%s MOUNT/%s: rc=%r %s' % (
                    p, p, r.returncode, (r.stdout + r.stderr).decode(errors='replace').strip()))
                n += 1
        log('tools: cmp identical for %d source files' % n)
        # cp -a of each shard directory, diff -r against GNU tar's extraction
        for s in info['shards']:
            sd = shard_dir_rel(s)
            dest = env.path('cp', s + '.d')
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            r = env.run(['cp', '-a', os.path.join(mnt, sd), dest], timeout=120)
            ck.ok(r.returncode == 0, 'cp -a MOUNT/%s: rc=%r %s' % (sd, r.returncode,
                                                                 r.stderr.decode(errors='replace')))
            r = env.run(['diff', '-r', '--no-dereference', refs[s][2], dest], timeout=120)
            if ck.ok(r.returncode == 0, 'diff -r (GNU tar extraction of %s) (cp -a of MOUNT/%s): '
                     'rc=%r\n%s%s' % (s, sd, r.returncode, r.stdout.decode(errors='replace')[:3000],
                                      r.stderr.decode(errors='replace')[:1000])):
                log('tools: cp -a MOUNT/%-34s + diff -r vs tar -x: identical (%d entries)'
                    % (sd, len(refs[s][0])))
            # cp -a must also keep the hardlinks it saw (it relies on st_ino)
            copied = ml.snapshot(dest, read=False)
            groups = {}
            for p, e in refs[s][0].items():
                if e.kind == 'file' and e.nlink > 1:
                    groups.setdefault(e.ino, []).append(p)
            for paths in groups.values():
                ck.ok(len({copied[p].ino for p in paths if p in copied}) == 1,
                      'cp -a of MOUNT/%s did not keep hardlinks %r together' % (sd, paths))
        # cp -r of a WebDataset shard dir
        dest = env.path('cpr', 'wds')
        os.makedirs(os.path.dirname(dest))
        r = env.run(['cp', '-r', os.path.join(mnt, 'wds'), dest], timeout=120)
        ck.eq('cp -r MOUNT/wds exit status', r.returncode, 0)
        r = env.run(['diff', '-r', refs['wds.tar'][2], dest], timeout=120)
        ck.ok(r.returncode == 0, 'diff -r after cp -r MOUNT/wds: %s' % r.stdout.decode(
            errors='replace')[:2000])
        # find
        r = env.run(['find', mnt, '-print0'], timeout=120)
        ck.eq('find MOUNT exit status', r.returncode, 0)
        found = set()
        for x in r.stdout.split(b'\0'):
            if x:
                x = os.fsdecode(x)
                found.add(os.path.relpath(x, mnt) if x != mnt else '.')
        found.discard('.')
        exp = expected_paths(src, refs)
        for p in sorted(found - exp):
            ck.fail('find MOUNT lists unexpected %r' % p)
        for p in sorted(exp - found):
            ck.fail('find MOUNT does not list %r' % p)
        ck.eq('find MOUNT: number of paths', len(found), len(exp))
        log('tools: find MOUNT listed %d paths (expected %d)' % (len(found), len(exp)))
        if r.stderr:
            ck.fail('find MOUNT stderr: %s' % r.stderr.decode(errors='replace')[:2000])
        # ls -a, cat stats, ls .shardfs
        r = env.run(['ls', '-a', '-1', mnt])
        names = set(r.stdout.decode().split('\n')) - {''}
        top = {p for p in exp if '/' not in p} | {'.', '..'}
        ck.eq('ls -a MOUNT', sorted(names), sorted(top))
        ck.ok('.shardfs' not in names, 'ls -a MOUNT shows .shardfs')
        r = env.run(['cat', os.path.join(mnt, '.shardfs', 'stats')])
        ck.eq('cat MOUNT/.shardfs/stats exit status', r.returncode, 0)
        try:
            st = json.loads(r.stdout)
            check_stats_fields(ck, st, 'cat stats')
            log('tools: cat MOUNT/.shardfs/stats parsed: %d fields' % len(st))
        except ValueError as e:
            ck.fail('cat MOUNT/.shardfs/stats is not JSON (%s): %r' % (e, r.stdout[:500]))
        r = env.run(['ls', '-a', os.path.join(mnt, '.shardfs')])
        ck.ok(r.returncode == 0 and b'stats' in r.stdout.split(b'\n'),
              'ls -a MOUNT/.shardfs: rc=%r out=%r' % (r.returncode, r.stdout))
        # Python tarfile, random access into the raw shard (seeks and small reads)
        for s in ('gnu.tar', 'pax.tar', 'py_pax.tar', 'sparse-gnu.tar'):
            with tarfile.open(os.path.join(mnt, s)) as tm, tarfile.open(os.path.join(src, s)) as ts:
                mm, ms = tm.getmembers(), ts.getmembers()
                ck.eq('tarfile names of MOUNT/%s' % s, [x.name for x in mm], [x.name for x in ms])
                for a_, b_ in reversed(list(zip(mm, ms))):   # backwards: seeks
                    if a_.isfile():
                        a = tm.extractfile(a_).read()
                        b = ts.extractfile(b_).read()
                        ck.ok(a == b, 'tarfile extractfile MOUNT/%s %r differs' % (s, a_.name))
            log('tools: tarfile random access into MOUNT/%s ok' % s)
        # concurrent readers: 8 threads reading members of plain and compressed shards at once
        import threading
        jobs = []
        for s in info['shards']:
            snap, _, dest = refs[s]
            for p, e in snap.items():
                if e.kind == 'file':
                    jobs.append((os.path.join(mnt, shard_dir_rel(s), p), os.path.join(dest, p)))
        env.rng.shuffle(jobs)
        bad = []

        def reader(part):
            for mp, rp in part:
                try:
                    if ml.read_all(mp) != ml.read_all(rp):
                        bad.append((mp, 'bytes differ'))
                except OSError as e:
                    bad.append((mp, str(e)))
        ths = [threading.Thread(target=reader, args=(jobs[i::8],)) for i in range(8)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        for mp, why in bad[:20]:
            ck.fail('concurrent read of %s: %s' % (mp, why))
        ck.eq('concurrent readers: failures', len(bad), 0)
        log('tools: 8 concurrent readers read %d members' % len(jobs))
        # control files under concurrent open/read/close: each open is a snapshot that
        # must parse whole (a late async read once raced its release: use after free)
        sbad = []

        def stats_reader():
            for _ in range(150):
                try:
                    with open(os.path.join(mnt, '.shardfs', 'stats'), 'rb') as f:
                        json.loads(f.read())
                    with open(os.path.join(mnt, '.shardfs', 'metrics'), 'rb') as f:
                        if not f.read().startswith(b'# HELP shardfs_'):
                            sbad.append('metrics: unexpected start')
                except (OSError, ValueError) as e:
                    sbad.append(str(e))
        ths = [threading.Thread(target=stats_reader) for _ in range(8)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        ck.eq('concurrent control-file reads: failures %r' % sbad[:5], len(sbad), 0)
        log('tools: 8 threads x 150 opens of stats and metrics parsed whole')
        # sha256sum over a shard dir through xargs (many opens)
        r1 = env.run(['sh', '-c', 'cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum',
                      'sh', os.path.join(mnt, 'wds')])
        r2 = env.run(['sh', '-c', 'cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum',
                      'sh', refs['wds.tar'][2]])
        ck.ok(r1.returncode == 0 and r1.stdout == r2.stdout, 'sha256sum of MOUNT/wds/* differs')


def group_readonly(env, ck):
    # Default: opens cost nothing (the kernel sends no OPEN), so opening an existing file
    # for writing succeeds and the first write fails with EROFS. --strict-open answers
    # every open and refuses write access there. Both must leave every byte as it was.
    for strict in (False, True):
        readonly_mode(env, ck, strict)


def readonly_mode(env, ck, strict):
    tag = 'strict-open' if strict else 'default'
    src = env.path('src-' + tag)
    os.makedirs(os.path.join(src, 'sub'))
    stage = env.path('stage-' + tag)
    sg.make_tree(stage, [('d', 'dir', 0o755, sg.T0), ('f', 'dir/f.txt', b'inside\n', 0o644, sg.T0),
                         ('f', 'f2', b'two\n', 0o644, sg.T0)])
    sg.gnu_tar_create(os.path.join(src, 'a.tar'), stage, ['dir', 'dir/f.txt', 'f2'], 'gnu')
    sg.gnu_tar_create(os.path.join(src, 'sub', 'b.tar'), stage, ['f2'], 'gnu')
    with open(os.path.join(src, 'README.txt'), 'wb') as f:
        f.write(b'readme\n')
    before = source_fingerprint(src)
    with ml.Mount(env, src, cache_dir=env.path('cache-' + tag),
                  extra=['--strict-open'] if strict else []) as m:
        M = lambda *p: os.path.join(m.mnt, *p)  # noqa: E731
        listing = sorted(ml.snapshot(m.mnt, read=False))
        log('readonly: mount shows %r' % listing)
        ops = [
            ('create new file in root', lambda: os.open(M('new.txt'), os.O_CREAT | os.O_WRONLY, 0o644)),
            ('create new file in shard dir', lambda: os.open(M('a', 'new'), os.O_CREAT | os.O_WRONLY)),
            ('create new file in member dir', lambda: os.open(M('a', 'dir', 'new'), os.O_CREAT | os.O_WRONLY)),
            ('create new file in source subdir', lambda: os.open(M('sub', 'new'), os.O_CREAT | os.O_WRONLY)),
            ('open plain file O_WRONLY', lambda: os.open(M('README.txt'), os.O_WRONLY)),
            ('open plain file O_RDWR', lambda: os.open(M('README.txt'), os.O_RDWR)),
            ('open plain file O_WRONLY|O_TRUNC', lambda: os.open(M('README.txt'), os.O_WRONLY | os.O_TRUNC)),
            ('open plain file O_WRONLY|O_APPEND', lambda: os.open(M('README.txt'), os.O_WRONLY | os.O_APPEND)),
            ('open raw shard O_RDWR', lambda: os.open(M('a.tar'), os.O_RDWR)),
            ('open member O_WRONLY', lambda: os.open(M('a', 'dir', 'f.txt'), os.O_WRONLY)),
            ('open member O_RDWR', lambda: os.open(M('a', 'f2'), os.O_RDWR)),
            ('mkdir in root', lambda: os.mkdir(M('newdir'))),
            ('mkdir in shard dir', lambda: os.mkdir(M('a', 'newdir'))),
            ('unlink plain file', lambda: os.unlink(M('README.txt'))),
            ('unlink raw shard', lambda: os.unlink(M('a.tar'))),
            ('unlink member', lambda: os.unlink(M('a', 'f2'))),
            ('rmdir shard dir', lambda: os.rmdir(M('a'))),
            ('rmdir member dir', lambda: os.rmdir(M('a', 'dir'))),
            ('rmdir source subdir', lambda: os.rmdir(M('sub'))),
            ('rename plain file', lambda: os.rename(M('README.txt'), M('R2'))),
            ('rename member', lambda: os.rename(M('a', 'f2'), M('a', 'f3'))),
            ('symlink', lambda: os.symlink('x', M('newlink'))),
            ('symlink in shard dir', lambda: os.symlink('x', M('a', 'newlink'))),
            ('link', lambda: os.link(M('README.txt'), M('hl'))),
            ('chmod plain file', lambda: os.chmod(M('README.txt'), 0o777)),
            ('chmod member', lambda: os.chmod(M('a', 'f2'), 0o777)),
            ('chown member', lambda: os.chown(M('a', 'f2'), 1, 1)),
            ('utime (touch) member', lambda: os.utime(M('a', 'f2'))),
            ('utime (touch) plain file', lambda: os.utime(M('README.txt'))),
            ('truncate member', lambda: os.truncate(M('a', 'f2'), 0)),
            ('truncate raw shard', lambda: os.truncate(M('a.tar'), 0)),
            ('mkfifo', lambda: os.mkfifo(M('fifo'))),
            ('setxattr member', lambda: os.setxattr(M('a', 'f2'), 'user.x', b'1')),
        ]
        for what, fn in ops:
            try:
                r = fn()
                if isinstance(r, int):
                    # an existing file opened for writing without truncation: without
                    # OPEN requests the open succeeds; the write must fail, EROFS
                    plain_open = what.startswith('open ') and 'TRUNC' not in what
                    try:
                        if strict or not plain_open:
                            ck.fail('readonly[%s]: %s succeeded, expected EROFS' % (tag, what))
                        else:
                            os.write(r, b'x')
                            ck.fail('readonly[%s]: write after %s succeeded' % (tag, what))
                    except OSError as e:
                        ck.ok(e.errno == errno.EROFS, 'readonly[%s]: write after %s: expected '
                              'EROFS, got %s' % (tag, what, errno.errorcode.get(e.errno, e.errno)))
                    finally:
                        os.close(r)
                else:
                    ck.fail('readonly[%s]: %s succeeded, expected EROFS' % (tag, what))
            except OSError as e:
                ck.ok(e.errno == errno.EROFS, 'readonly[%s]: %s: expected EROFS, got %s'
                      % (tag, what, errno.errorcode.get(e.errno, e.errno)))
        log('readonly: %d mutating syscalls tried' % len(ops))
        for cmd in (['touch', M('newfile')], ['touch', M('a', 'f2')], ['mkdir', M('d2')],
                    ['rm', '-f', M('README.txt')], ['rm', '-rf', M('a')],
                    ['sh', '-c', 'echo x > "$1"', 'sh', M('README.txt')],
                    ['sh', '-c', 'echo x >> "$1"', 'sh', M('a', 'f2')]):
            r = env.run(cmd)
            # dash's echo reports any failed write as "I/O error": when the open itself
            # succeeds (appending, default mode) only the failure can be asserted here;
            # the bytes are checked below
            append = cmd[0] == 'sh' and '>>' in cmd[2] and not strict
            ck.ok(r.returncode != 0 and (append or b'Read-only file system' in r.stderr),
                  'readonly: %r: expected failure with "Read-only file system", got rc=%r %r'
                  % (cmd[-1] if cmd[0] != 'sh' else cmd[2], r.returncode, r.stderr))
        vfs = os.statvfs(m.mnt)
        log('readonly: statvfs f_flag ST_RDONLY=%s (informational)' % bool(vfs.f_flag & os.ST_RDONLY))
        ck.eq('readonly: tree unchanged', sorted(ml.snapshot(m.mnt, read=False)), listing)
        with open(M('README.txt'), 'rb') as f:
            ck.eq('readonly: README.txt unchanged', f.read(), b'readme\n')
        with open(M('a', 'f2'), 'rb') as f:
            ck.eq('readonly: a/f2 unchanged', f.read(), b'two\n')
    ck.eq('readonly[%s]: source unchanged' % tag, source_fingerprint(src), before)


def group_damaged(env, ck):
    src = env.path('src')
    dm = sg.build_damaged_source(src, env.rng)
    raw = {n: ml.read_all(os.path.join(src, n)) for n in dm}
    definite = sorted(n for n, e in dm.items() if e['damaged'] is True)
    maybe_d = sorted(n for n, e in dm.items() if e['damaged'] is None)
    log('damaged: definitely damaged %r; either way %r' % (definite, maybe_d))
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        mnt = m.mnt
        top = sorted(os.listdir(mnt))
        exp_top = sorted(list(dm) + [sg.shard_dir_name(n) for n in dm])
        ck.eq('damaged: root listing', top, exp_top)
        n_eio = 0
        for name in sorted(dm):
            e = dm[name]
            sd = os.path.join(mnt, sg.shard_dir_name(name))
            lbl = 'damaged %s' % name
            # raw bytes are always the stored bytes
            try:
                ck.ok(ml.read_all(os.path.join(mnt, name)) == raw[name],
                      '%s: raw file bytes differ from the source' % lbl)
            except OSError as ex:
                ck.fail('%s: reading the raw file: %s' % (lbl, ex))
            try:
                names = set(os.listdir(sd))
            except OSError as ex:
                ck.fail('%s: listing shard dir: %s' % (lbl, ex))
                continue
            allowed = set(e['exact']) | set(e['eio']) | set(e['maybe'])
            for n in sorted(names - allowed):
                ck.fail('%s: unexpected member %r listed' % (lbl, n))
            for n in sorted((set(e['exact']) | set(e['eio'])) - names):
                ck.fail('%s: member %r missing (expected %s)' % (lbl, n, 'exact bytes' if n in e['exact'] else 'listed, read EIO'))
            for n in e['absent']:
                ck.ok(n not in names, '%s: member %r after the damage must be absent' % (lbl, n))
            for n, data in sorted(e['exact'].items()):
                if n in names:
                    res = ml.read_expect_eio(os.path.join(sd, n))
                    if res[0] == 'ok':
                        ck.ok(res[1] == data, '%s: %r: wrong bytes (%d read, %d expected)'
                              % (lbl, n, len(res[1]), len(data)))
                    else:
                        ck.fail('%s: %r before the damage: %s failed with %s after %d bytes'
                                % (lbl, n, res[3], errno.errorcode.get(res[1]), len(res[2])))
            for n, data in sorted(list(e['eio'].items()) + list(e['maybe'].items())):
                if n not in names:
                    continue
                res = ml.read_expect_eio(os.path.join(sd, n))
                if res[0] == 'ok':
                    ck.fail('%s: %r has missing data, read returned %d bytes with no error '
                            '(expected EIO; %s)' % (lbl, n, len(res[1]),
                                                    'bytes equal the original' if res[1] == data
                                                    else 'bytes are WRONG'))
                else:
                    n_eio += 1
                    ck.ok(res[1] == errno.EIO, '%s: %r: expected EIO, got %s (at %s)'
                          % (lbl, n, errno.errorcode.get(res[1]), res[3]))
                    ck.ok(data.startswith(res[2]), '%s: %r: the %d bytes returned before the '
                          'error are not the stored bytes' % (lbl, n, len(res[2])))
                    log('%s: %r -> %s after %d good bytes (of %d)' % (
                        lbl, n, errno.errorcode.get(res[1]), len(res[2]), len(data)))
            log('%s: listed %r; expected exact %r, EIO %r, EIO-or-absent %r, absent %r%s'
                % (lbl, sorted(names), sorted(e['exact']), sorted(e['eio']), sorted(e['maybe']),
                   e['absent'], ' (decoded prefix %d bytes)' % e['decoded_prefix']
                   if 'decoded_prefix' in e else ''))
            # the mount keeps answering
            try:
                os.stat(mnt)
                os.listdir(mnt)
            except OSError as ex:
                ck.fail('damaged: mount stopped answering after %s: %s' % (name, ex))
                return
        # still healthy afterwards
        ck.ok(ml.read_all(os.path.join(mnt, 'ok', 'f1.bin')) == dm['ok.tar']['exact']['f1.bin'],
              'damaged: ok/f1.bin wrong after the damaged reads')
        st = check_control_dir(ck, m, 'damaged')
        if st:
            log('damaged: stats %s' % json.dumps(st, sort_keys=True))
            dmg = st.get('damaged_shards')
            ck.ok(isinstance(dmg, int) and len(definite) <= dmg <= len(definite) + len(maybe_d),
                  'damaged: stats damaged_shards=%r, expected %d..%d (%r + maybe %r)'
                  % (dmg, len(definite), len(definite) + len(maybe_d), definite, maybe_d))
            ck.ok(isinstance(st.get('read_errors'), int) and st['read_errors'] >= 1,
                  'damaged: stats read_errors=%r, expected >= 1 after %d EIO reads'
                  % (st.get('read_errors'), n_eio))
            ck.eq('damaged: stats shards', st.get('shards'), len(dm))
            if isinstance(st.get('pid'), int):
                ck.ok(ml.pid_alive(st['pid']), 'damaged: daemon pid %d is gone' % st['pid'])
        ck.ok(ml.is_mounted(mnt), 'damaged: mount disappeared')


def group_hostile(env, ck):
    src = env.path('src')
    expect, lo, hi = sg.build_hostile_source(src, env.rng)
    outside_probe = ['/abs', '/evil1', '/evil2', '/tmp/evil1', '/tmp/evil2', '/outside', '/double']
    pre_exist = {p: os.path.lexists(p) for p in outside_probe}
    mnt_path = env.path('mnt-hostile')

    def tmp_state():
        return {p: (e.kind, e.size, e.digest) for p, e in ml.snapshot(env.tmp).items()
                if not (p == 'mnt-hostile' or p.startswith('mnt-hostile/'))
                and not p.startswith('cache')}
    before = tmp_state()
    suspicious = lambda names: sorted(n for n in names if 'evil' in n or n in  # noqa: E731
                                      ('abs', 'double', 'outside', 'x', 'd', 'l' * 120))
    parent_before = suspicious(os.listdir(os.path.dirname(env.tmp)))
    with ml.Mount(env, src, mountpoint=mnt_path, cache_dir=env.path('cache')) as m:
        got = ml.snapshot(m.mnt, read=True, ck=ck)
        exp = {'sub': ('d',), 'sub/hostile.tar': None, 'hostile-pax.tar': None}
        for s, tree in expect.items():
            sd = shard_dir_rel(s)
            exp[sd] = ('d',)
            for p, v in tree.items():
                exp[sd + '/' + p] = v
        for p in sorted(set(got) - set(exp)):
            ck.fail('hostile: unexpected entry %r (%s)' % (p, got[p].kind))
        for p in sorted(set(exp) - set(got)):
            ck.fail('hostile: missing entry %r' % p)
        ck.eq('hostile: number of entries', len(got), len(exp))
        for p, v in sorted(exp.items()):
            g = got.get(p)
            if g is None or v is None:
                continue
            kind = {'d': 'dir', 'f': 'file', 'l': 'symlink'}[v[0]]
            if not ck.eq('hostile: %r type' % p, g.kind, kind):
                continue
            if kind == 'file':
                with open(os.path.join(m.mnt, p), 'rb') as f:
                    ck.eq('hostile: %r content' % p, f.read(), v[1])
            elif kind == 'symlink':
                ck.eq('hostile: %r readlink' % p, g.link, v[1])
        evil = [p for p in got if 'evil' in p]
        ck.ok(not evil, 'hostile: evil names visible in the mount: %r' % evil)
        log('hostile: mount shows exactly %d entries: %r' % (len(got), sorted(got)))
        st = check_control_dir(ck, m, 'hostile')
        if st:
            sk = st.get('skipped_members')
            ck.ok(isinstance(sk, int) and lo <= sk <= hi,
                  'hostile: stats skipped_members=%r, expected %d..%d' % (sk, lo, hi))
            log('hostile: skipped_members=%r' % sk)
    ck.eq('hostile: temp dir (source, mount parent) unchanged', tmp_state(), before)
    ck.eq('hostile: suspicious names in the parent of the temp dir',
          suspicious(os.listdir(os.path.dirname(env.tmp))), parent_before)
    for p, was in pre_exist.items():
        ck.eq('hostile: existence of %s' % p, os.path.lexists(p), was)


def group_cache(env, ck):
    src, info, refs = prepare_formats(env)
    cache = env.path('cachedir')           # does not exist yet
    ns = len(info['shards'])
    with ml.Mount(env, src, cache_dir=cache) as m:
        try:
            mode = stat.S_IMODE(os.stat(cache).st_mode)
            ck.eq('fresh --cache-dir mode', oct(mode), oct(0o700))
        except OSError as e:
            ck.fail('cache dir %s not created: %s' % (cache, e))
        verify_formats_mount(env, ck, m, src, info, refs, 'cache-1st')
        st = m.stats()
        log('cache-1st stats: %s' % json.dumps(st, sort_keys=True))
        ck.eq('cache-1st: index_built', st.get('index_built'), ns)
        ck.eq('cache-1st: index_loaded', st.get('index_loaded'), 0)
    ck.ok(not m.alive_after_umount, 'daemon pid(s) %r still alive when shardfs umount returned'
          % m.alive_after_umount)
    files = [os.path.join(d, f) for d, _, fs in os.walk(cache) for f in fs]
    log('cache dir after 1st mount: %d files, %d bytes' % (len(files),
                                                         sum(os.path.getsize(f) for f in files)))
    ck.ok(files, 'cache dir is empty after the first mount')
    with ml.Mount(env, src, cache_dir=cache) as m:
        # list every shard dir (no reads), then look at stats
        t = time.monotonic()
        n = len(ml.snapshot(m.mnt, read=False, ck=ck))
        st = m.stats()
        log('cache-2nd: listed %d entries in %.2fs; stats: %s' % (n, time.monotonic() - t,
                                                                 json.dumps(st, sort_keys=True)))
        ck.eq('cache-2nd: index_built after listing', st.get('index_built'), 0)
        ck.eq('cache-2nd: index_loaded after listing', st.get('index_loaded'), ns)
        ck.eq('cache-2nd: index_bytes_scanned after listing', st.get('index_bytes_scanned'), 0)
        verify_formats_mount(env, ck, m, src, info, refs, 'cache-2nd')
        st = m.stats()
        ck.eq('cache-2nd: index_built after reading everything', st.get('index_built'), 0)
        ck.eq('cache-2nd: index_loaded after reading everything', st.get('index_loaded'), ns)


def walk_tar(path, n, prefix):
    """A shard of n members PREFIX%05d.txt; returns {name: bytes}."""
    want = {}
    with tarfile.open(path, 'w', format=tarfile.USTAR_FORMAT) as t:
        for i in range(n):
            data = b'%s member %05d\n' % (prefix.encode(), i)
            ti = tarfile.TarInfo('%s%05d.txt' % (prefix, i))
            ti.size = len(data)
            want[ti.name] = data
            t.addfile(ti, __import__('io').BytesIO(data))
    return want


def group_listing(env, ck):
    """What a listing gives the kernel, by the daemon's request counters, on fresh mounts (the
    kernel has nothing of them cached, as after drop_caches). Two shards of 3000 members (their
    directories take several readdir batches). --listing-attrs auto (the default): a walk
    (os.walk, as find) sends no LOOKUP and gets every file by name and type only (no kernel
    inode per file: listed_names_only counts them); opening what it listed then costs a LOOKUP
    per file; a directory in which a file was looked up is listed with every attribute, so
    opening what that listing shows sends none. --listing-attrs all: every entry carries its
    attributes, a walk that opens what it listed sends no LOOKUP.
    Whatever the kernel drops meanwhile (another process's drop_caches): every directory and
    file a step reaches is held once reached (Pins), so a LOOKUP the kernel sends beyond the
    ones counted here is of an inode it forgot after a listing made it, and every such inode is
    reached again by the next step: the checks count, since the mount began, LOOKUPs less
    FORGETs (forgets: 0 with nothing dropped) after each step that reaches every inode the
    listings made, and a listing's own LOOKUPs exactly."""
    src = env.path('walk-src')
    os.makedirs(src)
    many = walk_tar(os.path.join(src, 'many.tar'), 3000, 'k')
    other = walk_tar(os.path.join(src, 'other.tar'), 3000, 'o')
    cache = env.path('walk-cache')

    def open_all(pins, d, want):
        bad = 0
        for n in sorted(want):
            bad += pins.read(os.path.join(d, n)) != want[n]
        return bad

    class Looked:
        """LOOKUPs less forgets since the mount began."""
        n = forgets = 0

        def __call__(self, d):
            self.n += d['lookups'] - d['forgets']
            self.forgets += d['forgets']
            log('listing: LOOKUPs less forgets %d, forgets %d since the mount' % (self.n,
                                                                                 self.forgets))
            return self.n

    with ml.Mount(env, src, cache_dir=cache) as m:
        delta, pins, looked = Delta(m), Pins(), Looked()
        files = {}
        for root, dirs, names in os.walk(m.mnt):
            files[os.path.relpath(root, m.mnt)] = len(names)
            for dn in dirs:  # held before the walk goes in
                pins.path(os.path.join(root, dn))
        d = delta()
        log('listing auto: walk %s: %s' % (files, d))
        ck.eq('auto: files the walk saw', files, {'.': 2, 'many': 3000, 'other': 3000})
        ck.eq('auto: LOOKUPs of the walk (less forgets)', looked(d), 0)
        ck.eq('auto: files listed by name and type only', d['listed_names_only'], 6002)
        ck.eq('auto: members of many.tar that differ', open_all(pins, os.path.join(m.mnt, 'many'),
                                                                 many), 0)
        d = delta()
        ck.eq('auto: LOOKUPs opening the 3000 members the walk listed (since the mount, less '
              'forgets)', looked(d), 3000)
        pins.close()
        delta.close()
    with ml.Mount(env, src, cache_dir=cache) as m:
        delta, pins, looked = Delta(m), Pins(), Looked()
        d0 = os.path.join(m.mnt, 'other')
        pins.path(d0)
        ck.eq('auto: o00007.txt', pins.read(os.path.join(d0, 'o00007.txt')), other['o00007.txt'])
        d = delta()
        ck.eq('auto: LOOKUPs of other and o00007.txt (less forgets)', looked(d), 2)
        names = sorted(os.listdir(d0))
        ck.eq('auto: members of other listed', names, sorted(other))
        d = delta()
        ck.eq('auto: LOOKUPs listing other', d['lookups'], 0)
        looked(d)
        ck.eq('auto: listing of other after a lookup in it: entries without attributes',
              d['listed_names_only'], 0)
        ck.eq('auto: members of other.tar that differ', open_all(pins, d0, other), 0)
        d = delta()
        ck.eq('auto: LOOKUPs opening the 3000 members listed with attributes (since the mount, '
              'less forgets: those of other and o00007.txt)', looked(d), 2)
        pins.close()
        delta.close()
    with ml.Mount(env, src, cache_dir=cache, extra=['--listing-attrs', 'all']) as m:
        delta, pins, looked = Delta(m), Pins(), Looked()
        d0 = os.path.join(m.mnt, 'many')
        pins.path(d0)
        names = sorted(os.listdir(d0))
        ck.eq('all: members listed', names, sorted(many))
        d = delta()
        ck.eq('all: LOOKUPs listing many (its own name)', d['lookups'], 1)
        looked(d)
        ck.eq('all: entries without attributes', d['listed_names_only'], 0)
        ck.eq('all: members that differ', open_all(pins, d0, many), 0)
        d = delta()
        ck.eq('all: LOOKUPs opening the 3000 listed members (since the mount, less forgets: '
              'that of many)', looked(d), 1)
        pins.close()
        delta.close()


def bdi_readahead_kb(mnt):
    """The read_ahead_kb of mount mnt's bdi (its device in /proc/self/mountinfo)."""
    dev = None
    with open('/proc/self/mountinfo') as f:
        for ln in f:
            p = ln.split()
            if p[4] == mnt:
                dev = p[2]
    with open('/sys/class/bdi/%s/read_ahead_kb' % dev) as f:
        return int(f.read())


def group_readahead(env, ck):
    """A read of a whole file is one READ request per --kernel-readahead bytes, by the daemon's
    counters: the default (256K, the mount's bdi read_ahead_kb set by the daemon, run as root
    here) reads members of 1 MiB, 300,000 bytes and 3 MiB + 5 bytes in 4, 2 and 13 READs; with
    --kernel-readahead 0 the kernel keeps its own read_ahead_kb (128 unless its build or the
    machine says otherwise) and a file takes ceil(size / that) READs (8, 3 and 25 at 128K).
    Bytes exact each time."""
    if os.geteuid() != 0:
        log('readahead: needs root (the daemon writes the bdi\'s read_ahead_kb): skipped')
        return
    src = env.path('ra-src')
    os.makedirs(src)
    rnd = random.Random(env.seed)
    members = [('m%d.bin' % i, bytes(rnd.getrandbits(8) for _ in range(n)))
               for i, n in enumerate((1 << 20, 300000, (3 << 20) + 5))]
    with open(os.path.join(src, 'ra.tar'), 'wb') as f:
        f.write(ml.tar_bytes(members))
    for opt, ra_kb in (('default', 256), ('0', None)):
        extra = [] if opt == 'default' else ['--kernel-readahead', opt]
        with ml.Mount(env, src, cache_dir=env.path('ra-cache-' + opt), extra=extra) as m:
            got_kb = bdi_readahead_kb(m.mnt)
            if ra_kb is not None:
                ck.eq('%s: the bdi\'s read_ahead_kb' % opt, got_kb, ra_kb)
            # reading the stats file costs reads of its own: measured by reading it twice
            s0 = m.stats()['reads']
            s1 = m.stats()['reads']
            cost = s1 - s0
            for name, data in members:
                before = m.stats()['reads']
                ck.eq('%s: %s exact' % (opt, name),
                      ml.read_all(os.path.join(m.mnt, 'ra', name)) == data, True)
                n = m.stats()['reads'] - before - cost
                want = -(-len(data) // ((ra_kb or got_kb) * 1024))
                log('%s: %s (%d bytes): %d READs at read_ahead_kb %d' % (opt, name, len(data),
                                                                         n, got_kb))
                ck.eq('%s: READs of %s (%d bytes)' % (opt, name, len(data)), n, want)


def group_cli(env, ck):
    exe = env.shardfs
    src = env.path('src')
    os.makedirs(src)
    with open(os.path.join(src, 'README.txt'), 'wb') as f:
        f.write(b'cli readme\n')
    stage = env.path('stage')
    sg.make_tree(stage, [('f', 'x.txt', b'x\n', 0o644, sg.T0)])
    sg.gnu_tar_create(os.path.join(src, 's.tar'), stage, ['x.txt'], 'ustar')

    r = env.run([exe, '--version'])
    out = (r.stdout + r.stderr).decode(errors='replace').strip()
    log('shardfs --version -> rc=%r %r' % (r.returncode, out))
    ck.eq('--version exit status', r.returncode, 0)
    ck.ok(re.search(r'\d+\.\d+', r.stdout.decode(errors='replace')),
          '--version prints no version on stdout: %r' % r.stdout)
    if EXPECTED_VERSION:
        ck.ok(EXPECTED_VERSION in r.stdout.decode(errors='replace'),
              '--version output %r does not contain the project version %s' % (out, EXPECTED_VERSION))
    r = env.run([exe, '--help'])
    ck.eq('--help exit status', r.returncode, 0)
    h = r.stdout.decode(errors='replace')
    ck.ok('mount' in h and 'umount' in h, '--help does not mention mount/umount: %r' % h[:500])
    r = env.run([exe, 'mount', '--help'])
    ck.eq('mount --help exit status', r.returncode, 0)
    ck.ok('--cache-dir' in r.stdout.decode(errors='replace'),
          'mount --help does not list --cache-dir: %r' % r.stdout[:800])
    cli_usage_and_help(env, ck, src)

    def failed_mount(what, args, mnt):
        before = set(ml.mounted_paths())
        r = env.run([exe, 'mount'] + args, timeout=ml.MOUNT_TIMEOUT, files=True)
        err = r.stderr.decode(errors='replace').strip()
        log('%s -> rc=%r stderr=%r' % (what, r.returncode, err))
        ck.ok(r.returncode not in (0, None), '%s: expected non-zero exit, got %r' % (what, r.returncode))
        ck.ok(err, '%s: no message on stderr' % what)
        ck.ok(not ml.is_mounted(mnt), '%s: left a mount on %s' % (what, mnt))
        # only this test's own paths: other processes on the machine may mount meanwhile
        new = {p for p in set(ml.mounted_paths()) - before if p.startswith(env.tmp + '/')}
        ck.eq('%s: mount table unchanged' % what, new, set())
        left = ml.daemons_for(exe, mnt)
        ck.ok(not left, '%s: left daemon(s) %r running' % (what, left))
        ml.kill_pids(left, grace=0)
        if ml.is_mounted(mnt):
            env.run(['fusermount3', '-u', '-z', mnt])

    m1 = env.path('mnt-a')
    os.makedirs(m1)
    failed_mount('mount nonexistent source', ['--cache-dir', env.path('c1'), env.path('nope'), m1], m1)
    failed_mount('mount nonexistent file:// source',
                 ['--cache-dir', env.path('c1'), 'file://' + env.path('nope2'), m1], m1)
    failed_mount('mount on nonexistent mountpoint',
                 ['--cache-dir', env.path('c1'), src, env.path('no-such-mnt')], env.path('no-such-mnt'))
    failed_mount('mount with unknown option', ['--no-such-option', src, m1], m1)
    failed_mount('mount with missing mountpoint argument', [src], m1)

    r = env.run([exe, 'umount', m1], timeout=ml.UMOUNT_TIMEOUT, files=True)
    log('umount of a non-mounted dir -> rc=%r stderr=%r' % (r.returncode, r.stderr))
    ck.ok(r.returncode not in (0, None), 'umount of a non-mounted dir: expected non-zero, got %r'
          % r.returncode)
    ck.ok(r.stderr.strip(), 'umount of a non-mounted dir: no message on stderr')

    # file:// source, background mount, umount waits for the daemon
    with ml.Mount(env, 'file://' + src, mountpoint=m1, cache_dir=env.path('c2')) as m:
        with open(os.path.join(m1, 'README.txt'), 'rb') as f:
            ck.eq('file:// mount README.txt', f.read(), b'cli readme\n')
        with open(os.path.join(m1, 's', 'x.txt'), 'rb') as f:
            ck.eq('file:// mount s/x.txt', f.read(), b'x\n')
        st = m.stats()
        check_stats_fields(ck, st, 'cli')
        pid = st.get('pid')
        ck.ok(isinstance(pid, int) and ml.pid_alive(pid), 'stats pid %r not alive' % pid)
        try:
            with open('/proc/%d/cmdline' % pid, 'rb') as f:
                argv0 = f.read().split(b'\0')[0]
        except (OSError, TypeError):
            argv0 = b''
        ck.ok(os.path.basename(argv0).startswith(b'shardfs'),
              'stats pid %r is not a shardfs process (argv0 %r)' % (pid, argv0))
        r = m.umount()
    ck.ok(r is not None and r.returncode == 0, 'shardfs umount: rc=%r stderr=%r'
          % (r and r.returncode, r and r.stderr))
    ck.ok(not ml.is_mounted(m1), 'still mounted after shardfs umount')
    ck.ok(not m.alive_after_umount, 'daemon %r still alive when shardfs umount returned'
          % m.alive_after_umount)

    # a background mount must not keep the caller's stdout/stderr open: out=$(shardfs mount ..)
    # and subprocess pipes would otherwise wait for the daemon to exit
    m3 = env.path('mnt-pipe')
    os.makedirs(m3)
    pm = ml.Mount(env, src, mountpoint=m3)
    env.mounts.append(pm)
    try:
        cmd = [exe, 'mount', '--cache-dir', env.path('c4'), src, m3]
        log('$ %s   (stdout/stderr are pipes)' % ' '.join(cmd))
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env.env)
        try:
            rc = p.wait(timeout=ml.MOUNT_TIMEOUT)
        except subprocess.TimeoutExpired:
            rc = None
        ck.eq('mount with piped stdio: exit status', rc, 0)
        import select
        eof = {p.stdout.fileno(): False, p.stderr.fileno(): False}
        t = time.monotonic()
        while not all(eof.values()) and time.monotonic() - t < ml.POLL_TIMEOUT:
            rd, _, _ = select.select([fd for fd, e in eof.items() if not e], [], [], 0.2)
            for fd in rd:
                if not os.read(fd, 65536):
                    eof[fd] = True
        ck.ok(all(eof.values()), 'background mount: the daemon keeps the caller\'s stdout/stderr '
              'open (no EOF %ds after "shardfs mount" exited), so out=$(shardfs mount ...) hangs'
              % ml.POLL_TIMEOUT)
        p.stdout.close()
        p.stderr.close()
    finally:
        pm.umount(quiet=True)

    # foreground mode
    m2 = env.path('mnt-fg')
    os.makedirs(m2)
    cmd = [exe, 'mount', '-f', '--cache-dir', env.path('c3'), src, m2]
    log('$ ' + ' '.join(cmd))
    fg_err = open(env.path('fg-stderr.log'), 'wb')
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fg_err, stderr=fg_err, env=env.env)
    fg_err.close()
    fg = ml.Mount(env, src, mountpoint=m2)
    fg.pids.add(p.pid)
    env.mounts.append(fg)
    try:
        t = time.monotonic()
        ml.poll(lambda: ml.is_mounted(m2) or p.poll() is not None, ml.MOUNT_TIMEOUT)
        if not ck.ok(ml.is_mounted(m2), 'mount -f: not mounted after %.1fs (rc=%r)'
                     % (time.monotonic() - t, p.poll())):
            return
        with open(os.path.join(m2, 's', 'x.txt'), 'rb') as f:
            ck.eq('mount -f: s/x.txt', f.read(), b'x\n')
        # the read was served: the foreground process, the daemon itself, still runs
        ck.ok(p.poll() is None, 'mount -f: process exited (rc=%r) while mounted' % p.poll())
        # run umount concurrently and reap the foreground process meanwhile (as a shell
        # would), since 'shardfs umount' waits for the daemon to exit
        um_out = open(env.path('fg-umount.log'), 'wb')
        um = subprocess.Popen([exe, 'umount', m2], stdin=subprocess.DEVNULL, stdout=um_out,
                              stderr=um_out, env=env.env)
        um_out.close()
        try:
            rc = p.wait(timeout=ml.UMOUNT_TIMEOUT)
            ck.eq('mount -f: exit status after umount', rc, 0)
        except subprocess.TimeoutExpired:
            ck.fail('mount -f: still running %ds after umount' % ml.UMOUNT_TIMEOUT)
        try:
            ck.eq('umount of the -f mount: exit status', um.wait(timeout=ml.UMOUNT_TIMEOUT), 0)
        except subprocess.TimeoutExpired:
            um.kill()
            um.wait()
            ck.fail('umount of the -f mount: still running after %ds (the foreground process '
                    'exited with %r)' % (ml.UMOUNT_TIMEOUT, p.poll()))
    finally:
        if p.poll() is None:
            fg.umount(quiet=True)
            if p.poll() is None:
                p.kill()
        p.wait(timeout=10)
        fg.umount(quiet=True)
        with open(env.path('fg-stderr.log'), 'rb') as f:
            log('mount -f output (last 1500 bytes): %s' % f.read()[-1500:].decode(errors='replace'))



def help_columns(text):
    """{option: column where its help starts} of an options list ('  -f, --foreground   help'):
    the help of an option wider than the column starts on the next line."""
    cols = {}
    lines = text.split('\n')
    start = lines.index('options:') + 1 if 'options:' in lines else 0
    for i, ln in enumerate(lines[start:], start):
        m = re.match(r'^  ((?:-\w, |    )--[\w-]+(?: \S+)?)( +)(\S)', ln)
        if m:
            cols[re.search(r'--[\w-]+', m.group(1)).group(0)] = m.start(3)
            continue
        m = re.match(r'^  ((?:-\w, |    )--[\w-]+(?: \S+)?)$', ln)
        if m and i + 1 < len(lines):
            nxt = lines[i + 1]
            cols[re.search(r'--[\w-]+', m.group(1)).group(0)] = len(nxt) - len(nxt.lstrip(' '))
    return cols


def cli_usage_and_help(env, ck, src):
    """mount's usage errors exit 2 like every command's; 'shardfs --help' names the keyless
    credential chain; 'mount --help' starts every option's help in one column."""
    exe = env.shardfs
    mnt = env.path('mnt-usage')
    os.makedirs(mnt)
    for what, args in (('unknown option', ['--no-such-option', src, mnt]),
                       ('missing mountpoint', [src]),
                       ('extra argument', [src, mnt, 'extra']),
                       ('bad --cache-size', ['--cache-size', '5x', src, mnt]),
                       ('bad --credential-timeout', ['--credential-timeout', '0', src, mnt]),
                       ('-o suid', ['-o', 'suid', src, mnt])):
        r = env.run([exe, 'mount', '--cache-dir', env.path('c-usage')] + args,
                    timeout=ml.MOUNT_TIMEOUT, files=True)
        log('mount %s -> rc=%r %r' % (what, r.returncode, r.stderr[:200]))
        ck.eq('mount with %s: exit status (usage error)' % what, r.returncode, 2)
        if ml.is_mounted(mnt):
            ck.fail('mount with %s: mounted' % what)
            env.run([exe, 'umount', mnt], timeout=ml.UMOUNT_TIMEOUT, files=True)
    for cmd in (['index', '--no-such-option', src], ['umount'], ['stats']):
        r = env.run([exe] + cmd, files=True)
        ck.eq('shardfs %s: exit status (usage error)' % ' '.join(cmd), r.returncode, 2)

    h = env.run([exe, '--help']).stdout.decode(errors='replace')
    for name in ('AWS_ACCESS_KEY_ID', 'AWS_WEB_IDENTITY_TOKEN_FILE', 'AWS_ROLE_ARN',
                 'AWS_PROFILE', 'credential_process', 'AWS_CONTAINER_CREDENTIALS_RELATIVE_URI',
                 'instance metadata', 'GCE metadata', 'GOOGLE_OAUTH_ACCESS_TOKEN',
                 'GCS_HMAC_ACCESS_ID', '--credential-timeout'):
        ck.ok(name in h, 'shardfs --help does not name %s (the credential chain)' % name)

    for cmd in (['mount'], ['index']):
        out = env.run([exe] + cmd + ['--help']).stdout.decode(errors='replace')
        cols = help_columns(out)
        log('%s --help: help columns %r' % (cmd[0], sorted(set(cols.values()))))
        ck.ok(len(cols) >= (30 if cmd == ['mount'] else 15),
              '%s --help: only %d options found' % (cmd[0], len(cols)))
        ck.eq('%s --help: columns where the options\' help starts' % cmd[0],
              sorted(set(cols.values())), [max(cols.values())] if cols else [])
        for opt in ('--class-from', '--imagefolder-build-memory', '--credential-timeout',
                    '--cache-size', '--help'):
            if cmd == ['index'] and opt in ('--class-from', '--imagefolder-build-memory'):
                continue
            ck.ok(opt in cols, '%s --help: no help line for %s' % (cmd[0], opt))
    out = env.run([exe, 'mount', '--help']).stdout.decode(errors='replace')
    line = [ln for ln in out.splitlines() if ln.lstrip().startswith('--cache-size ')]
    ck.ok(line and 'sharing' in line[0],
          'mount --help: --cache-size does not say which size applies to a shared cache '
          'directory: %r' % line)


def group_nosuid(env, ck):
    """No option opens a hole: -o suid and -o dev (in every spelling libfuse reads) are refused
    with exit 2 and no mount; a mount with -o allow_other,exec is ro,nosuid,nodev in the mount
    table, and a setuid-root copy of id in a shard, run by nobody, runs with nobody's euid."""
    exe = env.shardfs
    src = env.path('src')
    stage = env.path('stage')
    os.makedirs(src)
    os.makedirs(stage)
    idbin = os.path.join(stage, 'id')
    with open('/usr/bin/id', 'rb') as f, open(idbin, 'wb') as g:
        g.write(f.read())
    os.chown(idbin, 0, 0)
    os.chmod(idbin, 0o4755)
    sg.gnu_tar_create(os.path.join(src, 's.tar'), stage, ['id'], 'gnu')
    cache = env.path('cache')
    mnt = env.path('mnt')
    os.makedirs(mnt)
    daemons_before = set(ml.daemons_for(exe, mnt))

    def as_nobody(path, *args):
        return env.run(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', path]
                       + list(args))

    for opts, name in ((['-o', 'suid'], 'suid'), (['-osuid'], 'suid'), (['--option=suid'], 'suid'),
                       (['-o', 'allow_other,suid'], 'suid'), (['-o', 'ro,suid,exec'], 'suid'),
                       (['-o', 'allow_other', '-o', 'suid'], 'suid'),
                       (['-o', 's\\uid'], 'suid'), (['-o', '\\163uid'], 'suid'),
                       (['-o', 'dev'], 'dev'), (['-o', 'allow_other,dev'], 'dev'),
                       (['-o', 'd\\ev'], 'dev'), (['-o', 'nonempty,dev'], 'dev')):
        what = 'mount %s' % ' '.join(opts)
        r = env.run([exe, 'mount', '--cache-dir', cache] + opts + [src, mnt],
                    timeout=ml.MOUNT_TIMEOUT, files=True)
        err = r.stderr.decode(errors='replace')
        log('%s -> rc=%r %r' % (what, r.returncode, err.strip()))
        ck.eq('%s: exit status' % what, r.returncode, 2)
        ck.ok('-o %s is refused' % name in err and 'nosuid,nodev' in err,
              '%s: stderr does not say that -o %s is refused: %r' % (what, name, err))
        if ml.is_mounted(mnt):
            ck.fail('%s: mounted' % what)
            if name == 'suid':  # the hole itself, for the log
                r = as_nobody(os.path.join(mnt, 's', 'id'))
                log('%s: nobody runs the setuid-root id of the shard: %r'
                    % (what, r.stdout.decode(errors='replace').strip()))
            env.run([exe, 'umount', mnt], timeout=ml.UMOUNT_TIMEOUT, files=True)
            if ml.is_mounted(mnt):
                env.run(['fusermount3', '-u', '-z', mnt], timeout=ml.UMOUNT_TIMEOUT)
        left = set(ml.daemons_for(exe, mnt)) - daemons_before
        ck.eq('%s: daemons left' % what, sorted(left), [])
        ml.kill_pids(left, grace=5)

    with ml.Mount(env, src, mountpoint=mnt, cache_dir=cache, extra=['-o', 'allow_other,exec']):
        opts, sopts = [], []
        with open('/proc/self/mountinfo') as f:
            for line in f:
                parts = line.rstrip('\n').split(' ')
                if ml.unescape_mountinfo(parts[4]) == os.path.realpath(mnt):
                    opts = parts[5].split(',')
                    sopts = parts[parts.index('-') + 3].split(',')
        log('-o allow_other,exec: mount options %r, super options %r' % (opts, sopts))
        for o in ('ro', 'nosuid', 'nodev'):
            ck.ok(o in opts, '-o allow_other,exec: %s missing from the mount options %r'
                  % (o, opts))
        ck.ok('allow_other' in sopts and 'default_permissions' in sopts,
              '-o allow_other,exec: super options %r lack allow_other,default_permissions' % sopts)
        p = os.path.join(mnt, 's', 'id')
        st = os.stat(p)
        ck.eq('the shard\'s id: mode shown', stat.S_IMODE(st.st_mode), 0o4755)
        ck.eq('the shard\'s id: owner shown', st.st_uid, 0)
        r = as_nobody(p, '-u')
        full = as_nobody(p).stdout.decode(errors='replace').strip()
        log('nobody runs the setuid-root id of the shard: %r' % full)
        ck.eq('nobody runs the setuid-root id of the shard: its euid', r.stdout, b'65534\n')
        ck.ok('euid=' not in full, 'the setuid bit was honoured: %r' % full)


def group_interrupt(env, ck):
    """'shardfs mount' killed (SIGKILL) while its daemon is inside mount(2), held there by
    strace's syscall delay: the daemon, told by PR_SET_PDEATHSIG, unmounts again before it serves;
    once it is gone no mount is left (before, the mount appeared and stayed)."""
    exe = env.shardfs
    strace = shutil_which('strace')
    if not strace:
        raise ml.Skip('strace is not installed (sh scripts/install-deps.sh --test)')
    src = env.path('src')
    os.makedirs(src)
    with open(os.path.join(src, 'README.txt'), 'wb') as f:
        f.write(b'readme\n')
    mnt = env.path('mnt')
    os.makedirs(mnt)
    # a hold, not a clock: the kill waits until the daemon is in mount(2), and the test then
    # waits for the daemon to end, however long the delay lasts
    cmd = [strace, '-f', '-qq', '-o', os.devnull, '-e', 'trace=mount', '-e',
           'inject=mount:delay_enter=2000000', exe, 'mount', '--cache-dir', env.path('cache'),
           src, mnt]
    log('$ ' + ' '.join(cmd))
    run_env = dict(env.env)  # LeakSanitizer cannot run under ptrace
    run_env['ASAN_OPTIONS'] = ':'.join(filter(None, [run_env.get('ASAN_OPTIONS'),
                                                     'detect_leaks=0']))
    with open(env.path('mount.out'), 'wb') as f:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=f, env=run_env)

    def ppid(pid):
        try:
            with open('/proc/%d/stat' % pid) as f:
                st = f.read()
            return int(st[st.rindex(')') + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def in_mount(pid):
        try:
            with open('/proc/%d/syscall' % pid) as f:
                return f.read().split()[0] == '165'  # x86_64 mount(2)
        except (OSError, IndexError):
            return False

    def pair():
        ps = ml.daemons_for(exe, mnt)
        parent = [x for x in ps if ppid(x) == p.pid]
        daemon = [x for x in ps if parent and ppid(x) == parent[0]]
        return (parent[0], daemon[0]) if parent and daemon and in_mount(daemon[0]) else None
    try:
        parent, daemon = ml.poll(pair, ml.POLL_TIMEOUT, what='the daemon to enter mount(2)')
        log('shardfs mount %d, its daemon %d in mount(2): SIGKILL to %d' % (parent, daemon,
                                                                         parent))
        os.kill(parent, signal.SIGKILL)
        ml.poll(lambda: not ml.pid_alive(daemon), ml.POLL_TIMEOUT)
        ck.ok(not ml.pid_alive(daemon), 'the daemon lives on after shardfs mount was killed')
        ck.ok(not ml.is_mounted(mnt), 'a mount appeared after shardfs mount was killed')
    finally:
        for x in ml.daemons_for(exe, mnt):
            os.kill(x, signal.SIGKILL)
        if ml.is_mounted(mnt):
            env.run(['fusermount3', '-u', '-z', mnt], timeout=ml.UMOUNT_TIMEOUT)
        try:
            p.wait(timeout=ml.POLL_TIMEOUT)  # strace ends with its last tracee
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        with open(env.path('mount.out'), 'rb') as f:
            log('strace + shardfs mount output: %r' % f.read()[-500:])


def metrics_format_errors(text):
    """A strict check of the Prometheus text format as shardfs writes it: every family has
    HELP and TYPE before its one sample, counters end in _total, gauges do not, values are
    non-negative numbers (integers but for *_seconds and *_seconds_total). Returns a list of
    problems."""
    errs, fams, typ = [], set(), {}
    lines = text.rstrip(' \n').split('\n')
    i = 0
    while i < len(lines):
        ln = lines[i].rstrip(' ')
        if not ln:
            i += 1
            continue
        m = re.match(r'^# HELP (shardfs_[a-z0-9_]+) (\S.*)$', ln)
        if not m:
            errs.append('line %d: expected "# HELP name text": %r' % (i + 1, ln))
            i += 1
            continue
        name = m.group(1)
        t = re.match(r'^# TYPE (\S+) (counter|gauge)$', lines[i + 1] if i + 1 < len(lines) else '')
        if not t or t.group(1) != name:
            errs.append('line %d: no "# TYPE %s counter|gauge" after its HELP' % (i + 2, name))
            i += 1
            continue
        v = re.match(r'^(\S+) +(\d+|\d+\.\d+)$', lines[i + 2] if i + 2 < len(lines) else '')
        secs = name.endswith(('_seconds', '_seconds_total'))
        if not v or v.group(1) != name or ('.' in v.group(2) and not secs):
            errs.append('line %d: no sample "%s VALUE" after its TYPE' % (i + 3, name))
        if name in fams:
            errs.append('%s: family repeated' % name)
        fams.add(name)
        typ[name] = t.group(2)
        if t.group(2) == 'counter' and not name.endswith('_total'):
            errs.append('%s: a counter without the _total suffix' % name)
        if t.group(2) == 'gauge' and name.endswith('_total'):
            errs.append('%s: a gauge named like a counter (_total)' % name)
        i += 3
    return errs, typ


def group_cli_truth(env, ck):
    """The command line says what is true: strict sizes, ro mounts, no covering of non-empty
    directories or stacking, dead daemons named as such, typed metrics, help everywhere, an
    imagefolder view that says what it left out, escaped names in the log, prefetch of a
    member path."""
    exe = env.shardfs
    src = env.path('src')
    os.makedirs(src)
    stage = env.path('stage')
    sg.make_tree(stage, [('f', 'x.txt', b'x\n', 0o644, sg.T0)])
    sg.gnu_tar_create(os.path.join(src, 's.tar'), stage, ['x.txt'], 'ustar')
    cache = env.path('cache')

    def refused(what, args, must=(), mnt=None):
        """args must be refused; mnt: a mountpoint that must not gain a mount (one that a
        wrongly accepted mount stacked there is taken off again)."""
        before = ml.mounted_paths().count(os.path.realpath(mnt)) if mnt else 0
        r = env.run([exe] + args, timeout=ml.MOUNT_TIMEOUT, files=True)
        err = r.stderr.decode(errors='replace')
        log('%s -> rc=%r stderr=%r' % (what, r.returncode, err.strip()))
        ck.ok(r.returncode not in (0, None), '%s: accepted (rc=%r)' % (what, r.returncode))
        for w in must:
            ck.ok(w in err, '%s: stderr does not say %r: %r' % (what, w, err))
        if mnt:
            extra = ml.mounted_paths().count(os.path.realpath(mnt)) - before
            ck.eq('%s: mounts added on %s' % (what, mnt), extra, 0)
            for _ in range(extra):
                env.run(['fusermount3', '-u', '-z', mnt], timeout=ml.UMOUNT_TIMEOUT)
            ml.kill_pids([p for p in ml.daemons_for(exe, mnt) if extra > 0], grace=5)
        return err

    # -- values: digits with an optional K/M/G/T suffix, within range, named in the error
    m0 = env.path('mnt-values')
    os.makedirs(m0)
    for opt in ('--cache-size', '--chunk-size', '--readahead'):
        for val in ('-1', ' 5G', '0', '5GiB', '1.5G', '99999999999T', '18446744073709551616', ''):
            refused('mount %s %r' % (opt, val), ['mount', '--cache-dir', cache, opt, val, src, m0],
                    must=(opt,), mnt=m0)
    for val in ('-1', ' 5G', '0', '5x'):
        refused('pack --max-size %r' % val, ['pack', '--max-size', val, stage, env.path('pk')],
                must=('--max-size',))
    ck.eq('pack --max-size -1 wrote no shard', [f for f in os.listdir(env.tmp)
                                                if f.startswith('pk')], [])
    refused('mount --ca-file /nonexistent', ['mount', '--cache-dir', cache, '--ca-file',
                                             env.path('no-such-ca.pem'), src, m0],
            must=('--ca-file', 'no-such-ca.pem'), mnt=m0)

    # -- help: exit 0 everywhere, every kind of source named
    for cmd in ('mount', 'umount', 'stats', 'prefetch', 'index', 'pack'):
        for h in ('--help', '-h'):
            r = env.run([exe, cmd, h])
            ck.eq('shardfs %s %s: exit status' % (cmd, h), r.returncode, 0)
            ck.ok(b'usage: shardfs ' + cmd.encode() in r.stdout,
                  'shardfs %s %s: no usage on stdout: %r' % (cmd, h, r.stdout[:300]))
    for cmd in ([], ['mount'], ['index']):
        r = env.run([exe] + cmd + ['--help'])
        out = r.stdout.decode(errors='replace')
        for kind in ('file://', 'https://', '{000000..', 's3://', 'gs://', 'ais://'):
            ck.ok(kind in out, 'shardfs %s --help does not name %s sources' % (' '.join(cmd), kind))
    r = env.run([exe, 'mount', '--help'])
    out = r.stdout.decode(errors='replace')
    for opt, default in (('--connections', '32'), ('--cache-size', '20G'), ('--chunk-size', '8M'),
                         ('--readahead', '256M'), ('--threads', '16'), ('--retry-budget', '30'),
                         ('--stall-timeout', '20'), ('--prefetch-shards', '2'),
                         ('--plan-lookahead', '256M')):
        # the option's own line (others may name it in their text)
        line = [ln for ln in out.splitlines() if ln.lstrip().startswith(opt + ' ')]
        ck.ok(line and ('(default: %s)' % default) in line[0],
              'mount --help: %s does not say (default: %s): %r' % (opt, default, line))

    # -- a non-empty mountpoint is refused, unless -o nonempty
    ne = env.path('nonempty')
    os.makedirs(ne)
    with open(os.path.join(ne, 'precious.txt'), 'wb') as f:
        f.write(b'mine\n')
    refused('mount on a non-empty directory', ['mount', '--cache-dir', cache, src, ne],
            must=('not empty', 'nonempty'), mnt=ne)

    # -- a mount is ro in the mount table; a second mount on it is refused (a space in the path:
    #    the mount table escapes it as \040)
    sp = env.path('mnt with space')
    with ml.Mount(env, src, mountpoint=sp, cache_dir=cache) as m:
        fstype = ml.mount_fstype(sp)
        opts = []
        with open('/proc/self/mountinfo') as f:
            for line in f:
                parts = line.split(' ')
                if ml.unescape_mountinfo(parts[4]) == os.path.realpath(sp):
                    opts = parts[5].split(',')
        log('mount options of %r: %r (%r)' % (sp, opts, fstype))
        ck.ok('ro' in opts and 'rw' not in opts, 'mount options %r are not ro' % opts)
        with open(os.path.join(sp, 's', 'x.txt'), 'rb') as f:
            ck.eq('ro mount: s/x.txt', f.read(), b'x\n')
        try:
            open(os.path.join(sp, 's.tar'), 'r+b').close()
            ck.fail('ro mount: opening s.tar for writing succeeded')
        except OSError as e:
            ck.eq('ro mount: open for writing', errno.errorcode.get(e.errno), 'EROFS')
        refused('a second mount on a shardfs mount', ['mount', '--cache-dir', cache, src, sp],
                must=('already a shardfs mount',), mnt=sp)

        # -- metrics: counters are counters (_total), gauges gauges; promtool agrees
        with open(os.path.join(sp, '.shardfs', 'metrics'), 'rb') as f:
            text = f.read().decode()
        errs, typ = metrics_format_errors(text)
        for e in errs:
            ck.fail('metrics: ' + e)
        ck.eq('metrics: type of shardfs_reads_total', typ.get('shardfs_reads_total'), 'counter')
        ck.eq('metrics: type of shardfs_lookups_total', typ.get('shardfs_lookups_total'), 'counter')
        ck.eq('metrics: type of shardfs_cache_bytes_used', typ.get('shardfs_cache_bytes_used'),
              'gauge')
        ck.eq('metrics: type of shardfs_fills_inflight', typ.get('shardfs_fills_inflight'), 'gauge')
        ck.ok(len(typ) >= 40, 'metrics: only %d families' % len(typ))
        promtool = shutil_which('promtool')
        if ck.ok(promtool, 'promtool is not installed (scripts/install-deps.sh --test)'):
            p = subprocess.run([promtool, 'check', 'metrics'], input=text.rstrip(' \n').encode()
                               + b'\n', stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=60)
            log('promtool check metrics -> rc=%d %s' % (p.returncode, p.stdout.decode()[:2000]))
            ck.eq('promtool check metrics: exit status', p.returncode, 0)
            ck.eq('promtool check metrics: complaints', p.stdout.decode().strip(), '')

        # -- prefetch of a member path prefetches its shard and says so; rates are sane
        r = env.run([exe, 'prefetch', sp, os.path.join(sp, 's', 'x.txt')], timeout=120)
        out = (r.stdout + r.stderr).decode(errors='replace')
        log('prefetch of a member path -> rc=%r %r' % (r.returncode, out))
        ck.eq('prefetch of a member path: exit status', r.returncode, 0)
        ck.ok('no such file' not in out, 'prefetch of a member path: %r' % out)
        ck.ok('inside a shard' in out and 'whole shard' in out,
              'prefetch of a member path does not say what it does: %r' % out)
        r = env.run([exe, 'prefetch', sp, 's.tar'], timeout=120)
        out = (r.stdout + r.stderr).decode(errors='replace')
        log('prefetch of a cached shard -> rc=%r %r' % (r.returncode, out))
        ck.eq('prefetch of a cached shard: exit status', r.returncode, 0)
        rates = [float(x.replace(',', '')) for x in re.findall(r'([\d,.]+) MB/s', out)]
        # a local source is read in place: nothing is fetched, and the command says so
        ck.ok(not rates and 'read in place' in out and 'nothing fetched' in out,
              'prefetch of a local shard: %r (want "read in place", "nothing fetched", no rate)'
              % out)

        # -- the daemon dies: every command says so, and umount cleans up
        pid = m.stats()['pid']
        ml.kill_daemon(env, pid, 9)
        ml.poll(lambda: not ml.pid_alive(pid))
        for what, args in (('stats', ['stats', sp]), ('mount', ['mount', '--cache-dir', cache,
                                                                   src, sp]),
                           ('prefetch', ['prefetch', sp])):
            refused('%s on a dead mount' % what, args,
                    must=('daemon of', 'is gone', "'shardfs umount %s'" % sp), mnt=sp)
        r = env.run([exe, 'umount', sp], timeout=ml.UMOUNT_TIMEOUT, files=True)
        log('umount of a dead mount -> rc=%r %r' % (r.returncode, r.stderr))
        ck.eq('umount of a dead mount: exit status', r.returncode, 0)
        ck.ok(not ml.is_mounted(sp), 'umount of a dead mount left it mounted')

    # -- -o nonempty mounts over a non-empty directory
    with ml.Mount(env, src, mountpoint=ne, cache_dir=cache, extra=['-o', 'nonempty']):
        with open(os.path.join(ne, 's', 'x.txt'), 'rb') as f:
            ck.eq('-o nonempty: s/x.txt', f.read(), b'x\n')
    with open(os.path.join(ne, 'precious.txt'), 'rb') as f:
        ck.eq('-o nonempty: the covered file after umount', f.read(), b'mine\n')

    # -- a name with a newline cannot forge a log line (a file and a shard of one name: the
    #    name conflict is logged with the name)
    evil_src = env.path('evil-src')
    os.makedirs(evil_src)
    evil = 'evil\n2030-01-01T00:00:00Z shardfs[1] error: FORGED'
    with open(os.path.join(evil_src, evil), 'wb') as f:
        f.write(b'plain\n')
    sg.gnu_tar_create(os.path.join(evil_src, evil + '.tar'), stage, ['x.txt'], 'ustar')
    logf = env.path('evil.log')
    with ml.Mount(env, evil_src, cache_dir=cache, extra=['--log-file', logf]) as m:
        ck.ok(os.path.exists(os.path.join(m.mnt, evil)), 'the evil name is not in the mount')
    with open(logf, 'rb') as f:
        lines = f.read().decode(errors='replace').splitlines()
    log('log with the evil name:\n' + '\n'.join(lines))
    ck.ok(not [ln for ln in lines if 'FORGED' in ln and not ln.startswith(tuple('0123456789'))
               or ln.startswith('2030-')],
          'a name with a newline forged a log line: %r' % lines)
    ck.ok([ln for ln in lines if 'evil\\n2030' in ln],
          'the name conflict of the evil name is not logged with \\n escaped: %r' % lines)

    # -- imagefolder: samples left out are counted on the mount command's stderr
    if_src = env.path('if-src')
    os.makedirs(if_src)
    if_stage = env.path('if-stage')
    sg.make_tree(if_stage, [('f', 'k%d.jpg' % i, b'jpeg?%d' % i, 0o644, sg.T0) for i in range(5)] +
                 [('f', 'k5.txt', b'no image', 0o644, sg.T0)])
    sg.gnu_tar_create(os.path.join(if_src, 'a.tar'), if_stage,
                      ['k%d.jpg' % i for i in range(5)] + ['k5.txt'], 'ustar')
    mif = env.path('mnt-if')
    os.makedirs(mif)
    cmd = [exe, 'mount', '--cache-dir', cache, '--layout', 'imagefolder', '--class-from', 'cls',
           if_src, mif]
    pm = ml.Mount(env, if_src, mountpoint=mif)
    env.mounts.append(pm)
    try:
        r = env.run(cmd, timeout=ml.MOUNT_TIMEOUT, files=True)
        err = r.stderr.decode(errors='replace')
        log('imagefolder without .cls -> rc=%r stderr=%r' % (r.returncode, err))
        ck.ok('5 samples without a class' in err and '.cls' in err,
              'imagefolder without .cls: stderr does not say that 5 samples had no class: %r' % err)
        ck.ok('1 sample without an image' in err,
              'imagefolder without .cls: stderr does not count the sample without an image: %r'
              % err)
        ck.ok('6 of 6 samples left out' in err, 'imagefolder: no total of samples left out: %r'
              % err)
    finally:
        pm.umount(quiet=True)


def human(b):
    """fs_human_bytes: '%.0f B', else '%.2f KiB' and up."""
    v, u = float(b), 0
    while v >= 1024 and u < 4:
        v /= 1024
        u += 1
    return ('%.2f %s' if u else '%.0f %s') % (v, ['B', 'KiB', 'MiB', 'GiB', 'TiB'][u])


def group_prefetch_runs(env, ck):
    """'shardfs prefetch' reports what this command did: of the objects it names only, not of
    earlier prefetches' (nginx source: the bytes are fetched into the cache)."""
    from shardfs_test import web
    if not os.path.exists(web.NGINX):
        raise ml.Skip('nginx is not installed (scripts/install-deps.sh --test)')
    src = env.path('src')
    os.makedirs(src)
    sizes = {}
    for name, n in (('a.tar', 300000), ('b.tar', 700000)):
        ml.write_file(os.path.join(src, name), ml.tar_bytes([('x.bin', os.urandom(n))]))
        sizes[name] = os.path.getsize(os.path.join(src, name))
    os.chmod(env.tmp, 0o755)
    os.chmod(src, 0o755)
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        with ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                      extra=['--warm', 'off']) as m:
            def prefetch(name):
                r = env.run([env.shardfs, 'prefetch', m.mnt, name], timeout=120)
                out = r.stdout.decode(errors='replace')
                log('prefetch %s -> rc=%r stdout=%r stderr=%r' % (name, r.returncode, out,
                                                                   r.stderr))
                ck.eq('prefetch %s: exit' % name, r.returncode, 0)
                return out.splitlines()

            for name, got, before in (('a.tar', sizes['a.tar'], 0),
                                      ('b.tar', sizes['b.tar'], 0),
                                      ('a.tar', 0, sizes['a.tar'])):
                lines = prefetch(name)
                size = human(sizes[name])
                first = ('prefetch: %s asked, all of it cached already' % size if before else
                         'prefetch: %s asked, 0 B of it cached; ' % size)
                ck.ok(lines and lines[0].startswith(first),
                      'prefetch %s: first line %r, want %r' % (name, lines[:1], first))
                done = 'prefetch: done: %s fetched, %s cached already, 0 B did not fit' % (
                    human(got), human(before))
                ck.eq('prefetch %s: summary' % name, lines[-1:], [done])
            st = m.stats()
            ck.eq('prefetch_bytes (every prefetch)', st.get('prefetch_bytes'),
                  sizes['a.tar'] + sizes['b.tar'])
            ck.eq('prefetch_run_bytes (the last)', st.get('prefetch_run_bytes'), sizes['a.tar'])
            ck.eq('prefetch_run_before_bytes', st.get('prefetch_run_before_bytes'),
                  sizes['a.tar'])
    finally:
        ng.stop()


def strace_counts(path):
    """(opens of .shardfs/stats, control ioctls) in the strace -f -e trace=openat,ioctl log at
    path (FS_CTL_IOC: strace writes it _IOC(_IOC_WRITE, 0x53, 0x1, 0x2000))."""
    with open(path) as f:
        lines = f.read().splitlines()
    opens = sum(1 for ln in lines if 'openat(' in ln and '/.shardfs/stats"' in ln
                and '= -1' not in ln)
    ioctls = sum(1 for ln in lines if 'ioctl(' in ln and '0x53, 0x1, 0x2000' in ln)
    return opens, ioctls


def group_prefetch_waits(env, ck):
    """'shardfs prefetch' follows its run without reading the stats over and over: it waits on
    the mount ('prefetch-wait RUN MS', answered at the run's end) and reads the stats only
    before, for its plan, for each report due (a line every 5 s; a bar 4 times a second on a
    terminal) and at the end. The link emulator holds every answer 400 ms, so a prefetch lasts
    at least that long: a command reading the stats every 20 ms (main before 2026-11-30) reads
    them some 20 times. The client's opens and ioctls counted by strace; the mount's
    prefetch_waits the ioctls of the wait."""
    import pty
    from shardfs_test import linkemu
    strace = shutil_which('strace')
    if not strace:
        raise ml.Skip('strace is not installed (sh scripts/install-deps.sh --test)')
    src = env.path('src')
    os.makedirs(src)
    sizes = {}
    for name, n in (('a.tar', 300000), ('b.tar', 700000), ('c.tar', 500000)):
        ml.write_file(os.path.join(src, name), ml.tar_bytes([('x.bin', os.urandom(n))]))
        sizes[name] = os.path.getsize(os.path.join(src, name))
    emu = linkemu.Emu(src, 400, 60, env.tmp, 'waits', shardfs=env.shardfs)
    try:
        # the emulator's ETags are nginx's (weak): trusted, so a fill sends no probe
        with ml.Mount(env, emu.url(''), cache_dir=env.path('cache'),
                      extra=['--warm', 'off', '--weak-etag', 'trust']) as m:
            for i, (tag, names, tty) in enumerate((('pipe', ['a.tar'], False),
                                                   ('tty', ['b.tar'], True),
                                                   ('pipe, all', [], False))):
                st0 = m.stats()
                log_ = env.path('strace-%d.log' % i)
                cmd = [strace, '-f', '-qq', '-o', log_, '-e', 'trace=openat,ioctl',
                       env.shardfs, 'prefetch', m.mnt] + names
                # LeakSanitizer cannot run under ptrace (an ASan build's client would abort
                # at its exit): the traced client goes without it
                renv = dict(env.env) if env.env else dict(os.environ)
                if renv.get('ASAN_OPTIONS'):
                    renv['ASAN_OPTIONS'] += ':detect_leaks=0'
                t = time.monotonic()
                if tty:
                    mfd, sfd = pty.openpty()
                    p = subprocess.Popen(cmd, stdout=sfd, stderr=subprocess.PIPE, env=renv)
                    os.close(sfd)
                    out = b''
                    while True:
                        try:
                            b = os.read(mfd, 65536)
                        except OSError:  # EIO: the command closed its side
                            break
                        if not b:
                            break
                        out += b
                    os.close(mfd)
                    p.wait(timeout=120)
                    rc = p.returncode
                else:
                    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       env=renv, timeout=120)
                    out, rc = r.stdout, r.returncode
                secs = time.monotonic() - t
                st = m.stats()
                text = out.decode(errors='replace')
                log('prefetch %s (%s) -> rc=%r in %.2f s: %r' % (names, tag, rc, secs, text))
                ck.eq('prefetch %s: exit status' % tag, rc, 0)
                ck.ok('prefetch: done: ' in text, 'prefetch %s: no summary: %r' % (tag, text))
                want = sum(sizes[x] for x in names) if names else sum(sizes.values())
                ck.eq('prefetch %s: the run\'s bytes cached' % tag,
                      st.get('prefetch_run_cached_bytes'), want)
                opens, ioctls = strace_counts(log_)
                waits = st.get('prefetch_waits', 0) - st0.get('prefetch_waits', 0)
                log('prefetch %s: %d opens of the stats file, %d control ioctls, %d waits, '
                    '%.2f s' % (tag, opens, ioctls, waits, secs))
                # prefetch-start, one prefetch line per PATH (everything: one), the waits
                ck.eq('prefetch %s: control ioctls' % tag, ioctls,
                      2 + max(len(names) - 1, 0) + waits)
                ck.ok(waits >= 1, 'prefetch %s: no wait on the mount' % tag)
                # reads: before, the plan, one per report due, the end; a wait lasts until
                # the next report is due (at most 1 s) or the run's end
                every = 0.25 if tty else 5.0
                ck.ok(3 <= opens <= 3 + int(secs / every),
                      'prefetch %s: %d reads of the stats file in %.2f s (want 3, and one more '
                      'per %g s)' % (tag, opens, secs, every))
                ck.ok(waits <= 2 + int(secs / min(every, 1.0)) + int(secs / every),
                      'prefetch %s: %d waits in %.2f s' % (tag, waits, secs))
            # the command itself: a run that is not the latest is over at once; bounds
            run = st.get('prefetch_run')
            ck.eq('prefetch-wait of an older run', ml.control(m.mnt, 'prefetch-wait %d 1000\n'
                                                              % (run - 1)), 1)
            ck.eq('prefetch-wait of the run, ended', ml.control(
                m.mnt, 'prefetch-wait %d 1000\n' % run), 1)
            for bad in ('prefetch-wait %d 1001' % run, 'prefetch-wait 0 10',
                        'prefetch-wait %d' % run, 'prefetch-wait x 10',
                        'prefetch-wait %d 10 1' % run):
                ck.eq('%r: errno' % bad, ml.control_errno(m.mnt, bad), errno.EINVAL)
    finally:
        emu.stop()


def group_cli_owner(env, ck):
    """The client commands say why they cannot use a mount: another user's (the control file is
    its owner's only; without allow_other the whole mount is), a path that does not exist, a
    directory that is no mount. Root mounts; uid 65534 runs the commands."""
    src = env.path('src')
    os.makedirs(src)
    ml.write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('a.txt', b'a\n')]))
    plan = env.path('plan.txt')
    ml.write_file(plan, b's0/a.txt\n')
    os.chmod(env.tmp, 0o755)
    os.chmod(plan, 0o644)

    # uid 65534 runs a copy in the test's directory: the build's may sit where only root may
    # look (a checkout in a 0700 directory)
    exe = os.path.join(env.tmp, 'shardfs-nobody')
    shutil.copy2(env.shardfs, exe)
    os.chmod(exe, 0o755)

    def as_nobody(args):
        r = subprocess.run([exe] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           user=65534, group=65534, extra_groups=[], timeout=60)
        err = r.stderr.decode(errors='replace')
        log('(uid 65534) shardfs %s -> rc=%r stderr=%r' % (' '.join(args), r.returncode, err))
        return r.returncode, err

    want = 'permission denied: only the user who mounted it (uid %d) can' % os.getuid()
    with ml.Mount(env, src, cache_dir=env.path('cache'), extra=['-o', 'allow_other']) as m:
        for cmd in (['refresh', m.mnt], ['plan', m.mnt, plan], ['prefetch', m.mnt]):
            rc, err = as_nobody(cmd)
            ck.eq('%s by another user: exit' % cmd[0], rc, 1)
            ck.eq('%s by another user: stderr' % cmd[0], err,
                  'shardfs: %s: %s send commands to it\n' % (m.mnt, want))
        rc, err = as_nobody(['stats', m.mnt])
        ck.eq('stats by another user (allow_other): exit', rc, 0)
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        for cmd in (['stats', m.mnt], ['refresh', m.mnt]):
            rc, err = as_nobody(cmd)
            ck.eq('%s by another user (no allow_other): exit' % cmd[0], rc, 1)
            ck.eq('%s by another user (no allow_other): stderr' % cmd[0], err,
                  'shardfs: %s: %s use it (it was mounted without -o allow_other)\n' % (
                      m.mnt, want))
    for cmd in ('stats', 'refresh', 'prefetch'):
        r = env.run([env.shardfs, cmd, env.path('nonexistent')])
        ck.eq('%s of a missing path: exit' % cmd, r.returncode, 1)
        ck.eq('%s of a missing path: stderr' % cmd, r.stderr.decode(errors='replace'),
              'shardfs: %s: No such file or directory\n' % env.path('nonexistent'))
    r = env.run([env.shardfs, 'stats', src])
    ck.eq('stats of a plain directory: stderr', r.stderr.decode(errors='replace'),
          'shardfs: %s is not a shardfs mount\n' % src)


def group_refresh_noticed(env, ck):
    """A refresh reports what changed since the previous refresh (or the mount), also what
    reads noticed and lookups then replaced in between: s0 rewritten, s1 deleted, both read
    (ESTALE), looked up (s0 shows its new version, s1 is gone), then 'shardfs refresh' says
    1 removed, 1 changed; a second refresh says 0 of each."""
    src = env.path('src')
    b = ml.CHANGE_B
    ml.change_sources(src)
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        ml.change_under_open_files(ck, src, m.mnt)
        # lookups after the reads: the new version of s0 replaces the old, s1 goes
        ck.eq('before refresh: s0/k3.bin', ml.read_result(os.path.join(m.mnt, 's0', 'k3.bin')),
              ('ok', b[3][1]))
        ck.eq('before refresh: s1.tar', ml.read_result(os.path.join(m.mnt, 's1.tar')),
              ('err', errno.ENOENT))
        ck.eq('before refresh: listing', sorted(os.listdir(m.mnt)),
              ['s0', 's0.tar', 's2', 's2.tar'])
        for want in (': 0 new, 1 removed, 1 changed; 2 objects, 2 shards',
                     ': 0 new, 0 removed, 0 changed; 2 objects, 2 shards'):
            r = env.run([env.shardfs, 'refresh', m.mnt])
            out = r.stdout.decode(errors='replace')
            log('shardfs refresh: rc=%d %s' % (r.returncode, out.strip()))
            ck.eq('refresh: exit', r.returncode, 0)
            ck.ok(want in out, 'refresh summary: %r, want %r' % (out, want))
        st = m.stats()
        ck.eq('refresh counters (added, removed, changed)',
              (st['refresh_added'], st['refresh_removed'], st['refresh_changed']), (0, 1, 1))


def shutil_which(name):
    import shutil
    return shutil.which(name)


GROUPS = {'gen': group_gen, 'cli': group_cli, 'formats': group_formats,
          'mtime-range': group_mtime_range, 'tools': group_tools, 'readonly': group_readonly,
          'damaged': group_damaged, 'hostile': group_hostile, 'cache': group_cache,
          'cli-truth': group_cli_truth, 'listing': group_listing,
          'prefetch-runs': group_prefetch_runs, 'prefetch-waits': group_prefetch_waits,
          'cli-owner': group_cli_owner,
          'refresh-noticed': group_refresh_noticed, 'nosuid': group_nosuid,
          'interrupt': group_interrupt, 'readahead': group_readahead}


def main():
    global EXPECTED_VERSION
    args = sys.argv[1:]
    if '--version' in args:
        i = args.index('--version')
        EXPECTED_VERSION = args[i + 1]
        del args[i:i + 2]
    if args[1:] == ['gen']:
        env = ml.Env(args[0], 'gen')
        ck = ml.Checker()
        try:
            group_gen(env, ck)
        finally:
            env.cleanup()
        log('== gen: %d checks, %d failures' % (ck.checks, len(ck.failures)))
        sys.exit(1 if ck.failures else 0)
    ml.run_groups(GROUPS, __doc__, argv=args)


if __name__ == '__main__':
    main()
