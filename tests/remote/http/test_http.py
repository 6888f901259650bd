#!/usr/bin/python3
"""shardfs http(s) source tests against real servers on 127.0.0.1 (DESIGN.md sections 1 and 3).

usage: test_http.py SHARDFS GROUP
GROUP:
  brace     WebDataset brace patterns (ranges, lists, several braces), a single URL, a 404 member
  listing   a directory served by nginx autoindex, JSON and HTML, with subdirectories
  redirect  the same through a server that answers every request with 307 (an AIStore proxy)
  faults    a fault proxy in front of nginx: 503s, connections cut mid-body, stalls; permanent
            faults give EIO within the retry budget and the mount stays up

Every raw shard is compared byte for byte with its source file and every member with GNU tar's
extraction. Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse, or no nginx).
Environment: SHARDFS_TEST_SEED, SHARDFS_TEST_KEEP=1 (keep the temp dir).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'mount'))
sys.path.insert(0, HERE)
import mountlib as ml  # noqa: E402
import shardgen as sg  # noqa: E402
import httplib  # noqa: E402
from mountlib import log  # noqa: E402


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------

def make_shard(env, path, prefix, nsamples):
    """A WebDataset shard written by GNU tar (ustar) with nsamples samples."""
    stage = env.path('stage', os.path.basename(path) + '.%d' % env.rng.randrange(1 << 30))
    spec = sg._wds_samples(env.rng, prefix, nsamples, 0)
    sg.make_tree(stage, spec)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sg.gnu_tar_create(path, stage, [e[1] for e in spec], 'gnu')
    shutil.rmtree(stage)


def build_source(env):
    """src/train/shard-00000{0..3}.tar, src/val/shard-00000{0..1}.tar, src/README.txt,
    src/odd names/a b+c%.tar (a name that needs percent-encoding)."""
    src = env.path('src')
    shards = []
    for split, n in (('train', 4), ('val', 2)):
        for i in range(n):
            rel = '%s/shard-%06d.tar' % (split, i)
            make_shard(env, os.path.join(src, rel), '%s%d' % (split, i), env.rng.randrange(5, 15))
            shards.append(rel)
    odd = 'odd names/a b+c%.tar'
    make_shard(env, os.path.join(src, odd), 'odd', 3)
    shards.append(odd)
    with open(os.path.join(src, 'README.txt'), 'wb') as f:
        f.write(b'shards for the http tests\n')
    # nginx's worker may run as another user
    for d, _, files in os.walk(env.tmp):
        os.chmod(d, 0o755)
        for fn in files:
            os.chmod(os.path.join(d, fn), 0o644)
    refs = {}
    for s in shards:
        dest = env.path('ref', s + '.d')
        ml.gnu_extract(env, os.path.join(src, s), dest)
        refs[s] = (ml.snapshot(dest), ml.explicit_dirs(os.path.join(src, s)))
    return src, shards, refs


def shard_dir_rel(rel):
    d, b = os.path.split(rel)
    n = sg.shard_dir_name(b)
    return os.path.join(d, n) if d else n


def check_shards(ck, label, mnt, src, shards, refs, key_of=lambda s: s):
    """Raw bytes of every shard equal the source file; members equal GNU tar's extraction."""
    for s in shards:
        k = key_of(s)
        p = os.path.join(mnt, k)
        try:
            got = ml.read_all(p)
        except OSError as e:
            ck.fail('%s: reading %s: %s' % (label, k, e))
            continue
        with open(os.path.join(src, s), 'rb') as f:
            want = f.read()
        ck.ok(got == want, '%s: %s: %d bytes differ from the source (%d bytes)' % (
            label, k, len(got), len(want)))
        snap, explicit = refs[s]
        got_tree = ml.snapshot(os.path.join(mnt, shard_dir_rel(k)), ck=ck)
        ml.compare_trees(ck, '%s: %s' % (label, k), got_tree, snap, explicit=explicit)


def listing(mnt):
    out = set()
    for d, dirs, files in os.walk(mnt):
        rel = os.path.relpath(d, mnt)
        for n in files:
            out.add(n if rel == '.' else os.path.join(rel, n))
    return out


# ---------------------------------------------------------------------------------------------
# groups
# ---------------------------------------------------------------------------------------------

def group_brace(env, ck, ng, src, shards, refs):
    cases = [
        # (source, {key: source relpath})
        (ng.url('files/train/shard-{000000..000003}.tar'),
         {'shard-%06d.tar' % i: 'train/shard-%06d.tar' % i for i in range(4)}),
        (ng.url('files/{train,val}/shard-{000000..000001}.tar'),
         {'%s/shard-%06d.tar' % (s, i): '%s/shard-%06d.tar' % (s, i)
          for s in ('train', 'val') for i in range(2)}),
        (ng.url('files/{val/shard-000001.tar,odd%20names/a%20b%2Bc%25.tar}'),
         {'val/shard-000001.tar': 'val/shard-000001.tar',
          'odd names/a b+c%.tar': 'odd names/a b+c%.tar'}),
        (ng.url('files/train/shard-000002.tar'), {'shard-000002.tar': 'train/shard-000002.tar'}),
    ]
    for source, keys in cases:
        with ml.Mount(env, source, cache_dir=env.path('cache')) as m:
            ck.eq('brace %s: shards shown' % source,
                  {k for k in listing(m.mnt) if k.endswith('.tar')}, set(keys))
            check_shards(ck, 'brace', m.mnt, src, [keys[k] for k in sorted(keys)], refs,
                         key_of=lambda s, inv={v: k for k, v in keys.items()}: inv[s])
            st = os.stat(os.path.join(m.mnt, sorted(keys)[0]))
            ck.eq('brace: size of %s' % sorted(keys)[0], st.st_size,
                  os.path.getsize(os.path.join(src, keys[sorted(keys)[0]])))
            ck.eq('brace: mtime of %s' % sorted(keys)[0], int(st.st_mtime),
                  int(os.path.getmtime(os.path.join(src, keys[sorted(keys)[0]]))))
    # a member of the pattern that does not exist: the mount fails and names it
    m = ml.Mount(env, ng.url('files/train/shard-{000000..000005}.tar'),
                 cache_dir=env.path('cache'))
    try:
        m.mount()
        ck.fail('brace with a 404 member: mount succeeded')
        m.umount()
    except ml.MountError as e:
        ck.ok('/files/train/shard-000004.tar' in str(e) or
              '/files/train/shard-000005.tar' in str(e),
              'brace 404: error does not name the missing URL: %s' % e)
    # malformed pattern and too many names: refused at once
    for bad in ('files/train/shard-{000000..000003.tar', 'files/{0..999}{0..999}{0..9}.tar'):
        m = ml.Mount(env, ng.url(bad), cache_dir=env.path('cache'))
        t = time.monotonic()
        try:
            m.mount()
            ck.fail('malformed %s: mount succeeded' % bad)
            m.umount()
        except ml.MountError as e:
            log('refused as expected: %s' % e)
            ck.ok(time.monotonic() - t < 20, 'malformed %s: refusal took too long' % bad)


def group_listing(env, ck, ng, src, shards, refs, base=None, label='listing'):
    expect = set(shards) | {'README.txt'}
    for kind in ('json', 'html'):
        url = (base or ng.url)('%s/' % kind)
        with ml.Mount(env, url, cache_dir=env.path('cache')) as m:
            got = {k for k in listing(m.mnt) if k in expect or k.endswith('.tar')
                   or k == 'README.txt'}
            ck.eq('%s %s: objects' % (label, kind), got, expect)
            check_shards(ck, '%s %s' % (label, kind), m.mnt, src, shards, refs)
            with open(os.path.join(m.mnt, 'README.txt'), 'rb') as f:
                ck.eq('%s %s: README.txt' % (label, kind), f.read(),
                      b'shards for the http tests\n')
            st = os.stat(os.path.join(m.mnt, 'train', 'shard-000001.tar'))
            ck.eq('%s %s: size' % (label, kind), st.st_size,
                  os.path.getsize(os.path.join(src, 'train', 'shard-000001.tar')))
            ck.eq('%s %s: mtime' % (label, kind), int(st.st_mtime),
                  int(os.path.getmtime(os.path.join(src, 'train', 'shard-000001.tar'))))
    # a directory that is not there
    m = ml.Mount(env, (base or ng.url)('json/nonexistent/'), cache_dir=env.path('cache'))
    try:
        m.mount()
        ck.fail('%s: mount of a missing directory succeeded' % label)
        m.umount()
    except ml.MountError as e:
        log('refused as expected: %s' % e)


def group_redirect(env, ck, ng, src, shards, refs):
    before = len(ng.requests())
    source = ng.redirect_url('files/{train,val}/shard-{000000..000001}.tar')
    with ml.Mount(env, source, cache_dir=env.path('cache')) as m:
        keys = ['%s/shard-%06d.tar' % (s, i) for s in ('train', 'val') for i in range(2)]
        check_shards(ck, 'redirect brace', m.mnt, src, keys, refs)
    group_listing(env, ck, ng, src, shards, refs, base=ng.redirect_url, label='redirect')
    # the real server saw the requests (the redirector served none itself)
    reqs = ng.requests()[before:]
    ck.ok(any('GET /files/train/shard-000000.tar' in r and '" 206 ' in r for r in reqs),
          'redirect: no ranged GET reached the server behind the redirector')
    ck.ok(any('GET /json/ ' in r for r in reqs), 'redirect: listing did not reach the server')


def read_errno(path, n=None):
    try:
        with open(path, 'rb', buffering=0) as f:
            f.read() if n is None else f.read(n)
        return 0
    except OSError as e:
        return e.errno


def group_faults(env, ck, ng, src, shards, refs):
    px = httplib.FaultProxy(ng.port)
    try:
        base = px.url('files/{train,val}/shard-{000000..000001}.tar')
        keys = ['%s/shard-%06d.tar' % (s, i) for s in ('train', 'val') for i in range(2)]
        opts = ['--retry-budget', '20', '--stall-timeout', '1']

        # (a) 503 for the first requests (HEADs of the listing and GETs)
        px.set('503', count=6, methods=('GET', 'HEAD'))
        with ml.Mount(env, base, cache_dir=env.path('cache'), extra=opts) as m:
            check_shards(ck, 'faults 503', m.mnt, src, keys, refs)
            ck.eq('faults 503: faults served', px.faults, 6)

        # (b) connections cut in the middle of the body: resumed after the delivered bytes
        px.set('cut', count=5)
        with ml.Mount(env, base, cache_dir=env.path('cache'), extra=opts) as m:
            check_shards(ck, 'faults cut', m.mnt, src, keys, refs)
            ck.eq('faults cut: faults served', px.faults, 5)

        # (c) stalls: headers, a few bytes, then silence; retried after --stall-timeout
        px.set('stall', count=2)
        with ml.Mount(env, base, cache_dir=env.path('cache'), extra=opts) as m:
            t = time.monotonic()
            check_shards(ck, 'faults stall', m.mnt, src, keys, refs)
            ck.eq('faults stall: faults served', px.faults, 2)
            ck.ok(time.monotonic() - t < 15, 'faults stall: took %.1fs' % (time.monotonic() - t))

        # (d) a permanently broken server: EIO within the budget, the mount stays up
        for mode in ('503', 'cut', 'stall'):
            px.set('pass')
            opts_d = ['--retry-budget', '2', '--stall-timeout', '1']
            with ml.Mount(env, base, cache_dir=env.path('cache'), extra=opts_d) as m:
                px.set(mode, count=-1)
                p = os.path.join(m.mnt, keys[1])
                t = time.monotonic()
                e = read_errno(p, 4096)
                dt = time.monotonic() - t
                log('permanent %s: errno %s after %.1fs' % (mode, e, dt))
                ck.eq('faults permanent %s: errno' % mode, errno.errorcode.get(e, e), 'EIO')
                # budget 2 s; one attempt may still run its stall timeout (1 s) and FUSE
                # may retry the read once more in readahead
                ck.ok(dt < 10, 'faults permanent %s: EIO took %.1fs' % (mode, dt))
                ck.ok(os.path.isdir(m.mnt) and len(os.listdir(m.mnt)) >= 2,
                      'faults permanent %s: the mount is gone' % mode)
                px.set('pass')
                # the server is back: the same file reads correctly now
                with open(os.path.join(src, keys[2]), 'rb') as f:
                    want = f.read()
                try:
                    got = ml.read_all(os.path.join(m.mnt, keys[2]))
                except OSError as ex:
                    got = ex
                ck.ok(got == want, 'faults permanent %s: a read after recovery failed (%s)' % (
                    mode, ml.short(got) if not isinstance(got, bytes) else len(got)))
    finally:
        px.close()


GROUPS = {'brace': group_brace, 'listing': group_listing, 'redirect': group_redirect,
          'faults': group_faults}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in GROUPS:
        print(__doc__)
        return 2
    shardfs, group = sys.argv[1], sys.argv[2]
    if not os.path.exists(httplib.NGINX):
        log('SKIP: %s is not installed (scripts/install-deps.sh --test)' % httplib.NGINX)
        return ml.SKIP
    env = ml.Env(shardfs, 'http-' + group)
    wd = ml.Watchdog(env, int(os.environ.get('SHARDFS_TEST_DEADLINE', '170')))
    ck = ml.Checker()
    ng = None
    try:
        ml.fuse_precheck()
        src, shards, refs = build_source(env)
        ng = httplib.Nginx(env.path('nginx'), src).start()
        log('nginx on 127.0.0.1:%d, redirector on 127.0.0.1:%d' % (ng.port, ng.redirect_port))
        t = time.monotonic()
        GROUPS[group](env, ck, ng, src, shards, refs)
        log('group %s: %d checks in %.1fs' % (group, ck.checks, time.monotonic() - t))
    except ml.Skip as e:
        log('SKIP: %s' % e)
        return ml.SKIP
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        ck.fail('exception: %r' % e)
    finally:
        if ng:
            if ck.failures:
                try:
                    with open(os.path.join(ng.prefix, 'error.log')) as f:
                        log('nginx error.log (tail):\n' + ''.join(f.readlines()[-20:]))
                except OSError:
                    pass
            ng.stop()
        env.cleanup()
        wd.stop()
    if ck.failures:
        log('FAILED: %d of %d checks' % (len(ck.failures), ck.checks))
        return 1
    log('PASS: %d checks' % ck.checks)
    return 0


if __name__ == '__main__':
    sys.exit(main())
