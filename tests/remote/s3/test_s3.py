"""Mount tests of s3://, gs:// and ais:// sources against real servers on 127.0.0.1.

Servers (s3servers): s3rver (npm) behind a proxy that re-verifies every SigV4 signature with
botocore; for ais://, a small STAND-IN for an AIStore proxy (AIStore itself is not installable
here) that serves the S3-compatible listing and redirects native object GETs to s3rver.

Groups (one meson test each):
  s3   full comparison with GNU tar, raw shards byte for byte, random preads, 2500 objects
       (pagination: exactly 3 list requests at mount, no HEAD or GET of an object, `ls -l`
       shows every size without a request), wrong secret / unknown key -> mount fails fast
       with a clear message, session token, ~/.aws/credentials profile, --no-sign on an
       anonymous bucket
  gs   the same shards through gs:// with GCS HMAC keys (and a refused OAuth token)
  ais  the same shards through ais:// (listing via /s3, objects via 307 redirects)
  s3-index  'shardfs index' with --endpoint and --no-sign, then a mount that uses its indexes
  ais-batch  backend_batch_read (AIStore GetBatch, /v1/ml/moss) through ais_batch_cli against
       the stand-in: items of several objects and ranges byte-exact in order in one request, a
       missing object, an answer cut mid-item, members out of order, a bad header checksum, a
       member that lies about its size

Usage: test_s3.py SHARDFS GROUP [AIS_BATCH_CLI]
Exit 77 (skip) when /dev/fuse is unusable or s3rver is not installed.
"""

import errno
import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import shardgen as sg  # noqa: E402
from shardfs_test import s3servers  # noqa: E402
from shardfs_test.s3world import (BUCKET, FAIL_FAST_S, KEY, PREFIX, SECRET,  # noqa: E402
                                  World, build_source, check_proxy, expect_mount_fails,
                                  set_aws_env)

log = ml.log


def sha(path):
    return hashlib.sha256(ml.read_all(path)).hexdigest()


def verify_mount(env, ck, m, src, files, shards, label):
    """Every object's bytes, every member against GNU tar's extraction, random preads."""
    mnt = m.mnt
    t = time.monotonic()
    for rel in files:
        got = os.path.join(mnt, rel)
        try:
            ck.eq('%s: bytes of %s' % (label, rel), sha(got), sha(os.path.join(src, rel)))
        except OSError as e:
            ck.fail('%s: reading %s: %s' % (label, rel, e))
    for rel in shards:
        d, b = os.path.split(rel)
        sdir = os.path.join(d, sg.shard_dir_name(b))
        ref = env.path('ref', rel + '.d')
        if not os.path.isdir(ref):
            ml.gnu_extract(env, os.path.join(src, rel), ref)
        ml.compare_trees(ck, '%s: %s' % (label, sdir), ml.snapshot(os.path.join(mnt, sdir), ck=ck),
                         ml.snapshot(ref), explicit=ml.explicit_dirs(os.path.join(src, rel)))
    with open(os.path.join(src, shards[0]), 'rb') as f:
        ml.check_preads(ck, label, os.path.join(mnt, shards[0]), f.read(), env.rng, n=12)
    listed = set()
    for root, dirs, names in os.walk(mnt):
        for n in names:
            listed.add(os.path.relpath(os.path.join(root, n), mnt))
    for rel in files:
        ck.ok(rel in listed, '%s: %s not listed' % (label, rel))
    ck.ok('other/outside.tar' not in listed and not any(p.startswith('data') for p in listed),
          '%s: objects outside the prefix are shown' % label)
    log('%s: verified %d objects and %d shards in %.1fs' % (label, len(files), len(shards),
                                                          time.monotonic() - t))


PAGED = 2500  # objects of the pagination check: 3 ListObjectsV2 pages


def paged_bytes(i):
    """Object i of the pagination check: sizes from 2 to 65 bytes."""
    return (b'%d\n' % i) * (1 + i % 13)


def check_paged_requests(ck, w, m, before, when):
    """Since before (the proxy's counters): 3 list requests (2 of them continuations), no
    HEAD or GET of an object; the daemon's store_list_requests says 3 too."""
    now = dict(w.proxy.stats)
    d = {k: now.get(k, 0) - before.get(k, 0) for k in (
        'list_requests', 'list_continuations', 'object_head', 'object_get')}
    ck.eq('pagination %s: requests' % when, d, {'list_requests': 3, 'list_continuations': 2,
                                                'object_head': 0, 'object_get': 0})
    ck.eq('pagination %s: store_list_requests' % when, m.stats().get('store_list_requests'), 3)


ACCESS_WORDS = ['access denied', 'permission denied', 'refused', 'SignatureDoesNotMatch']


def group_s3(env, ck):
    src, files, shards = build_source(env)
    w = World(env)
    try:
        t = time.monotonic()
        w.upload(BUCKET, PREFIX, src, files)
        w.s3.put(BUCKET, 'other/outside.tar', b'not under the prefix')
        w.s3.put(BUCKET, PREFIX + 'emptydir/', b'')  # a "directory marker": not an object
        log('uploaded %d objects in %.1fs' % (len(files), time.monotonic() - t))
        set_aws_env(env)
        src_uri = 's3://%s/%s' % (BUCKET, PREFIX)
        ep = ['--endpoint', w.endpoint]
        with ml.Mount(env, src_uri, cache_dir=env.path('cache'), extra=ep) as m:
            verify_mount(env, ck, m, src, files, shards, 's3')
            st = m.stats()
            ck.ok(BUCKET in str(st.get('source')) and SECRET not in str(st),
                  's3: stats source %r' % st.get('source'))
        st = check_proxy(ck, w, 's3')
        ck.ok(st.get('signature_ok', 0) > 0, 's3: no request was verified by the proxy')
        ck.eq('s3: requests refused by the proxy', st.get('refused', 0), 0)
        ck.ok(st.get('ranged_gets', 0) > 0, 's3: no ranged GET seen')

        # a session token (signed and sent as x-amz-security-token)
        set_aws_env(env, key='TOKENKEY', token='tok/en+123==')
        with ml.Mount(env, 's3://%s/%ssub/' % (BUCKET, PREFIX), cache_dir=env.path('cache-tok'),
                      extra=ep) as m:
            ck.eq('token: bytes of shard-a.tar', sha(os.path.join(m.mnt, 'shard-a.tar')),
                  sha(os.path.join(src, 'sub', 'shard-a.tar')))
        # the same key without the token is refused
        set_aws_env(env, key='TOKENKEY')
        expect_mount_fails(env, ck, src_uri, ep, 'missing session token', ACCESS_WORDS)

        # ~/.aws/credentials with AWS_PROFILE (no AWS_* keys in the environment)
        set_aws_env(env, key=None, secret=None)
        cred = env.path('aws-credentials')
        with open(cred, 'w') as f:
            f.write('[default]\naws_access_key_id = nobody\naws_secret_access_key = x\n\n'
                    '[test]\naws_access_key_id = %s\naws_secret_access_key = %s\n' % (KEY, SECRET))
        env.env['AWS_SHARED_CREDENTIALS_FILE'] = cred
        env.env['AWS_PROFILE'] = 'test'
        with ml.Mount(env, src_uri, cache_dir=env.path('cache-prof'), extra=ep) as m:
            ck.eq('profile: README.txt', sha(os.path.join(m.mnt, 'README.txt')),
                  sha(os.path.join(src, 'README.txt')))

        # wrong secret, unknown key id: the mount fails at once, with the reason
        before = dict(w.proxy.stats)
        set_aws_env(env, secret='wrong-secret')
        expect_mount_fails(env, ck, src_uri, ep, 'wrong secret', ACCESS_WORDS)
        after = dict(w.proxy.stats)
        n = after.get('refused_SignatureDoesNotMatch', 0) - before.get(
            'refused_SignatureDoesNotMatch', 0)
        ck.ok(1 <= n <= 3, 'wrong secret: %d refused requests (expected 1-3, no retry loop)' % n)
        set_aws_env(env, key='AKIANOSUCHKEY')
        expect_mount_fails(env, ck, src_uri, ep, 'unknown key id', ACCESS_WORDS)
        set_aws_env(env, key=None, secret=None)
        expect_mount_fails(env, ck, src_uri, ep, 'no credentials', ['credentials', 'denied'])

        # --no-sign: anonymous requests, allowed by the proxy for bucket "public" only
        w.s3.create_bucket('public')
        w.s3.put('public', 'shard-000000.tar', open(os.path.join(src, shards[0]), 'rb').read())
        set_aws_env(env, key=None, secret=None)
        with ml.Mount(env, 's3://public/', cache_dir=env.path('cache-pub'),
                      extra=ep + ['--no-sign']) as m:
            ck.eq('no-sign: shard bytes', sha(os.path.join(m.mnt, 'shard-000000.tar')),
                  sha(os.path.join(src, shards[0])))
            ck.ok(os.path.isfile(os.path.join(m.mnt, 'shard-000000', 'n01440_0.jpg')),
                  'no-sign: member missing')
        expect_mount_fails(env, ck, src_uri, ep + ['--no-sign'], 'anonymous on a private bucket',
                           ACCESS_WORDS)

        # pagination: 2500 objects, ListObjectsV2 pages of 1000. The mount lists them in
        # exactly 3 requests and asks for no object (no HEAD, no GET; --warm off: the warm
        # fill would fetch them all); `ls -l` shows every one with its exact size, which
        # comes from the listing, without a request
        set_aws_env(env)
        w.s3.create_bucket('many')
        t = time.monotonic()
        for i in range(PAGED):
            w.s3.put('many', 'p/obj-%04d.txt' % i, paged_bytes(i))
        log('uploaded %d objects in %.1fs' % (PAGED, time.monotonic() - t))
        before = dict(w.proxy.stats)
        with ml.Mount(env, 's3://many/p', cache_dir=env.path('cache-many'),
                      extra=ep + ['--warm', 'off']) as m:
            check_paged_requests(ck, w, m, before, 'at mount')
            r = env.run(['ls', '-ln', m.mnt], check=True)
            sizes = {}
            for ln in r.stdout.decode().splitlines()[1:]:  # after "total N"
                f = ln.split()
                sizes[f[-1]] = int(f[4])
            ck.eq('pagination: ls -l names and sizes', sizes,
                  {'obj-%04d.txt' % i: len(paged_bytes(i)) for i in range(PAGED)})
            check_paged_requests(ck, w, m, before, 'after ls -l')
            for i in (0, 999, 1000, 1999, 2000, PAGED - 1):
                with open(os.path.join(m.mnt, 'obj-%04d.txt' % i), 'rb') as f:
                    ck.eq('pagination: obj %d' % i, f.read(), paged_bytes(i))
        check_proxy(ck, w, 's3 end')
    finally:
        w.stop()


def group_gs(env, ck):
    src, files, shards = build_source(env)
    w = World(env)
    try:
        w.upload(BUCKET, PREFIX, src, files)
        set_aws_env(env, key=None, secret=None)
        env.env['GCS_HMAC_ACCESS_ID'] = KEY
        env.env['GCS_HMAC_SECRET'] = SECRET
        ep = ['--endpoint', w.endpoint]
        with ml.Mount(env, 'gs://%s/%s' % (BUCKET, PREFIX), cache_dir=env.path('cache'),
                      extra=ep) as m:
            verify_mount(env, ck, m, src, files, shards, 'gs')
        st = check_proxy(ck, w, 'gs')
        ck.ok(st.get('signature_ok', 0) > 0, 'gs: no request was verified by the proxy')
        ck.eq('gs: requests refused', st.get('refused', 0), 0)
        env.env['GCS_HMAC_SECRET'] = 'wrong-secret'
        expect_mount_fails(env, ck, 'gs://%s/%s' % (BUCKET, PREFIX), ep, 'gs wrong secret',
                           ACCESS_WORDS)
        # an OAuth token goes as "Authorization: Bearer"; this proxy refuses bearer tokens
        env.env['GOOGLE_OAUTH_ACCESS_TOKEN'] = 'ya29.not-a-real-token'
        expect_mount_fails(env, ck, 'gs://%s/%s' % (BUCKET, PREFIX), ep, 'gs bearer refused',
                           ACCESS_WORDS)
    finally:
        w.stop()


def group_ais(env, ck):
    src, files, shards = build_source(env)
    w = World(env, ais=True)
    try:
        w.upload(BUCKET, PREFIX, src, files)
        set_aws_env(env, key=None, secret=None)
        env.env['AIS_ENDPOINT'] = 'http://127.0.0.1:%d' % w.ais.port
        with ml.Mount(env, 'ais://%s/%s' % (BUCKET, PREFIX), cache_dir=env.path('cache')) as m:
            verify_mount(env, ck, m, src, files, shards, 'ais')
        st = dict(w.ais.stats)
        log('ais stand-in stats: %s' % st)
        ck.ok(st.get('redirects', 0) > 0, 'ais: no object GET went through a 307 redirect')
        ck.ok(st.get('s3_get', 0) > 0, 'ais: no listing through /s3')
        ck.eq('ais: unsupported requests', st.get('unsupported', 0), 0)
        ck.eq('ais: suffix ranges', st.get('suffix_ranges', 0), 0)
        ck.eq('ais: Authorization headers sent', st.get('authorization_seen', 0), 0)
    finally:
        w.stop()


AIS_BATCH_CLI = None  # argv[3] of the ais-batch group


def batch_read(env, ck, label, items, want_requests):
    """Run ais_batch_cli on items [(key, off, len)]; returns ([errno per item], [bytes per item])
    after checking that it made want_requests requests of the store."""
    out = env.path('batch-' + label.replace(' ', '-'))
    os.makedirs(out, exist_ok=True)
    r = env.run([AIS_BATCH_CLI, 'ais://%s/%s' % (BUCKET, PREFIX), out] +
                ['%s:%d:%d' % it for it in items])
    text = r.stdout.decode(errors='replace')
    log('%s: rc=%r stdout=%r stderr=%r' % (label, r.returncode, text,
                                          r.stderr.decode(errors='replace')))
    lines = text.split('\n')
    ck.eq('%s: exit' % label, r.returncode, 0)
    errs = []
    for i in range(len(items)):
        f = lines[i].split() if i < len(lines) else []
        errs.append(int(f[1]) if len(f) == 2 and f[0] == str(i) else None)
    ck.eq('%s: requests' % label, lines[len(items)] if len(lines) > len(items) else None,
          'requests %d' % want_requests)
    got = [open(os.path.join(out, str(i)), 'rb').read() for i in range(len(items))]
    return errs, got


def group_ais_batch(env, ck):
    """backend_batch_read against the stand-in's GetBatch (see the module docstring)."""
    w = World(env, ais=True)
    try:
        rng = env.rng
        objs = {'a.bin': bytes(rng.getrandbits(8) for _ in range(300000)),
                'b.bin': bytes(rng.getrandbits(8) for _ in range(1000)),
                'c.bin': bytes(rng.getrandbits(8) for _ in range(70000)),
                # a name longer than a ustar header's 100 bytes: a PAX 'path' record
                'long/' + 'n' * 120 + '.bin': bytes(rng.getrandbits(8) for _ in range(700)),
                # one that fits a ustar header only split into its prefix and name fields
                'deep/' + 'd' * 80 + '/' + 'f' * 60 + '.bin': b'split name\n' * 9}
        w.s3.create_bucket(BUCKET)
        for k, v in objs.items():
            w.s3.put(BUCKET, PREFIX + k, v)
        set_aws_env(env, key=None, secret=None)
        env.env['AIS_ENDPOINT'] = 'http://127.0.0.1:%d' % w.ais.port
        longk = 'long/' + 'n' * 120 + '.bin'
        splitk = 'deep/' + 'd' * 80 + '/' + 'f' * 60 + '.bin'

        def check(label, items, want_err, want_requests, partial_ok=False):
            errs, got = batch_read(env, ck, label, items, want_requests)
            ck.eq('%s: errors' % label, errs, want_err)
            for i, (k, off, n) in enumerate(items):
                want = objs[k][off:off + n] if want_err[i] == 0 else b''
                if partial_ok and want_err[i] == -errno.EIO:
                    continue  # bytes delivered before a cut are the caller's to drop
                ck.ok(got[i] == want, '%s: bytes of item %d (%s %d+%d): %d bytes, want %d'
                      % (label, i, k, off, n, len(got[i]), len(want)))

        items = [('a.bin', 0, 300000), ('b.bin', 10, 990), ('a.bin', 12345, 1000),
                 ('c.bin', 0, 70000), ('a.bin', 299999, 1), (longk, 5, 600), ('b.bin', 0, 512),
                 (splitk, 0, 99)]
        check('in order', items, [0] * len(items), 1)
        st = dict(w.ais.stats)
        ck.eq('in order: GetBatch redirects', st.get('moss_redirects'), 1)
        ck.eq('in order: GetBatch answers', st.get('moss_requests'), 1)
        ck.eq('in order: items served', st.get('moss_items'), len(items))

        check('missing', [('b.bin', 0, 10), ('nope.bin', 0, 5), ('c.bin', 100, 10)],
              [0, -errno.ENOENT, 0], 1)

        # cut in the middle of item 0 (its header, then 150,000 of its 300,000 bytes): item 0
        # is EIO, items 1 and 2 are asked for again in a second request
        w.ais.moss_cut_at = 512 + 150000
        check('cut', [('a.bin', 0, 300000), ('b.bin', 0, 1000), ('c.bin', 7, 500)],
              [-errno.EIO, 0, 0], 2, partial_ok=True)
        ck.eq('cut: answers cut', w.ais.stats.get('moss_cut'), 1)

        # members out of order, a header with a bad checksum: EIO for the item in that place
        # (none of its bytes delivered), the rest asked for again
        for fault in ('order', 'checksum'):
            w.ais.moss_corrupt = fault
            # (the first two of the same length: only their names tell them apart)
            check('corrupt ' + fault, [('b.bin', 0, 100), ('c.bin', 0, 100), ('a.bin', 50, 70)],
                  [-errno.EIO, 0, 0], 2)
        # b.bin's member says (and carries) 999 bytes where 1000 were asked: EIO, no byte of it
        w.ais.moss_lie = {PREFIX + 'b.bin'}
        errs, got = batch_read(env, ck, 'lie', [('c.bin', 0, 100), ('b.bin', 0, 1000),
                                                ('a.bin', 0, 100)], 2)
        ck.eq('lie: errors', errs, [0, -errno.EIO, 0])
        ck.eq('lie: bytes of the lying item', got[1], b'')
        ck.ok(got[0] == objs['c.bin'][:100] and got[2] == objs['a.bin'][:100],
              'lie: bytes of the honest items')
        w.ais.moss_lie = set()
        ck.eq('ais-batch: refused requests', w.ais.stats.get('moss_refused', 0), 0)
    finally:
        w.stop()


def run_index(env, args):
    r = env.run([env.shardfs, 'index'] + args, timeout=FAIL_FAST_S + 30)
    out, err = r.stdout.decode(errors='replace'), r.stderr.decode(errors='replace')
    log('shardfs index %s -> rc=%r stdout=%r stderr=%r' % (' '.join(args), r.returncode, out, err))
    return r.returncode, out, err


def group_s3_index(env, ck):
    """'shardfs index' takes the store options of mount: --endpoint (the only way to reach the
    test's store: AWS_ENDPOINT_URL is unset) and --no-sign (anonymous requests, which the proxy
    allows for bucket "public" only). A mount afterwards loads every index from the cache."""
    src, files, shards = build_source(env)
    w = World(env)
    try:
        w.upload(BUCKET, PREFIX, src, files)
        set_aws_env(env)
        src_uri = 's3://%s/%s' % (BUCKET, PREFIX)
        ep = ['--endpoint', w.endpoint]
        cache = env.path('cache')
        before = dict(w.proxy.stats)
        rc, out, err = run_index(env, ep + ['--cache-dir', cache, src_uri])
        ck.eq('index --endpoint: exit', rc, 0)
        ck.ok(out.startswith('indexed %d shards (%d built, ' % (len(shards), len(shards))),
              'index --endpoint: summary %r' % out)
        after = dict(w.proxy.stats)
        ck.ok(after.get('signature_ok', 0) > before.get('signature_ok', 0),
              'index --endpoint: no signed request reached the endpoint')
        with ml.Mount(env, src_uri, cache_dir=cache, extra=ep) as m:
            verify_mount(env, ck, m, src, files, shards, 'index then mount')
            st = m.stats()
            ck.eq('index then mount: index_loaded', st.get('index_loaded'), len(shards))
            ck.eq('index then mount: index_built', st.get('index_built'), 0)

        # --no-sign: anonymous; a public bucket indexes, the private one is refused
        w.s3.create_bucket('public')
        w.s3.put('public', 'shard-000000.tar', open(os.path.join(src, shards[0]), 'rb').read())
        set_aws_env(env, key=None, secret=None)
        before = dict(w.proxy.stats)
        rc, out, err = run_index(env, ep + ['--no-sign', '--cache-dir', env.path('cache-pub'),
                                            's3://public/'])
        ck.eq('index --no-sign: exit', rc, 0)
        ck.ok(out.startswith('indexed 1 shard (1 built, '), 'index --no-sign: summary %r' % out)
        after = dict(w.proxy.stats)
        ck.eq('index --no-sign: signed requests', after.get('signature_ok', 0),
              before.get('signature_ok', 0))
        set_aws_env(env)  # credentials in the environment, but --no-sign sends none
        rc, out, err = run_index(env, ep + ['--no-sign', '--cache-dir', env.path('cache-anon'),
                                            src_uri])
        ck.eq('index --no-sign on a private bucket: exit', rc, 1)
        ck.ok(any(wd.lower() in err.lower() for wd in ACCESS_WORDS),
              'index --no-sign on a private bucket: stderr %r' % err)
        ck.ok(SECRET not in err, 'index: a secret appears in the error output')
        check_proxy(ck, w, 's3 index')
    finally:
        w.stop()


GROUPS = {'s3': group_s3, 'gs': group_gs, 'ais': group_ais, 's3-index': group_s3_index,
          'ais-batch': group_ais_batch}


def main():
    global AIS_BATCH_CLI
    shardfs, group = sys.argv[1], sys.argv[2]
    AIS_BATCH_CLI = sys.argv[3] if len(sys.argv) > 3 else None
    if not s3servers.have_s3rver():
        ml.skip_exit('s3rver is not installed (sh tests/remote/s3/install-s3rver.sh)')
    ml.main_wrapper(GROUPS[group], shardfs, 'remote-' + group, deadline=170)


if __name__ == '__main__':
    main()
