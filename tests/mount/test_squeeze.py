#!/usr/bin/python3
"""shardfs mount tests: compressed shards squeezed by the cache size, a small cache disk and the
decompression-bomb bounds (docs/design.md section 3: a shard is whole or an error).

usage: test_squeeze.py SHARDFS GROUP     GROUP: cache | disk | bomb | warn | evict | lru | deccrc
                                                | declive | over

cache  --cache-size 24M and a .tar.zst of 20,000 small members decoding to ~28 MB: every member
       reads back exactly as Python's tarfile reads it (the decoded copy may exceed --cache-size).
disk   the cache dir on a 64 MiB tmpfs: a .tar.zst decoding to 80 MB fails whole with ENOSPC
       (listing, lookup, read; `ls` prints nothing), the log says the cache disk is full, the
       partial copy is gone; a small .tar.gz on the same tmpfs is served whole (the reserve is
       5 % of the tmpfs, not 1 GiB); the raw .tar.zst still reads its stored bytes.
bomb   a .tar.zst of 1 GiB of zeros (after a small member) fails whole with EFBIG and the log
       names --max-decode-ratio; a shard decoding past 64 MiB at a legit ratio (~4x) is served;
       --max-decoded-size 4M refuses an 8 MB .tar.gz (EFBIG, log names the option), again on a
       remount, and a remount with 16M serves it.
warn   `shardfs mount` with the cache dir on a 16 MiB tmpfs warns on stderr that the disk cannot
       hold one chunk per connection, and mounts; on a 64 MiB tmpfs it warns with the default 32
       connections and not with --connections 2. The local source never warns that the cache is
       smaller than one chunk (--cache-size 1M, with or without --chunk-size: it fills no cache).
evict  an http source (nginx on 127.0.0.1) with the cache dir on a 64 MiB tmpfs: the raw bytes of
       a .tar.zst (20 MB) and a 36 MB .tar read whole fill the chunk store; decoding the
       .tar.zst (20 MB) then fits only when decoding evicts chunks, and is served whole; the
       .tar reads back exactly after.
lru    five .tar.zst shards of ~8 MB decoded each, --cache-size 20M, read one after another: older
       decoded copies are evicted (decoded_evictions), the decoded copies on disk stay within
       the cache size plus the copy being read, and the first shard read again is decoded again
       and reads back exactly.
deccrc a .tar.gz and a .tar.zst shard read whole by one mount; between mounts a byte in the middle
       of one member of each decoded copy is flipped: the next mount on the cache dir reads every
       member exactly or with EIO (only that member can fail: its unit fails its CRC32C; the
       kernel hides the EIO of a readahead request by asking again), then exactly on a retry (the
       shard decoded again); cache_units_corrupt 2, decoded_streams 2, one log line; a third
       mount reads the copies decoded again without a failure.
declive the same copies damaged under the running mount that decoded them: a byte flipped in
       each, then a 1000-byte hole (fallocate -p, inside the member, not block-aligned) in the
       .tar.gz copy decoded again, the page cache dropped each time: every member exactly or
       EIO once for the damaged one then exactly; cache_units_corrupt 2, then 3; a remount reads
       every member exactly.
over   an http source, --cache-size 4M and --chunk-size 8M: a 10 MB raw .tar read whole
       takes the cache over its limit (one chunk is bigger than the cache); once the read
       ended, the mount evicts it back within 4 MiB (cache_bytes_used and the data files'
       blocks) with no other fill, and the .tar reads back exactly after.
The groups that need a small filesystem mount a tmpfs (root) and unmount it in any case.
Exit: 0 pass, 1 fail, 77 skip (only when FUSE is unusable here)."""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import tarfile  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402
from shardfs_test import web  # noqa: E402


def compress(data, codec):
    cmd = ['zstd', '-q', '-3', '-c'] if codec == 'zst' else ['gzip', '-c', '-6']
    return subprocess.run(cmd, input=data, stdout=subprocess.PIPE, check=True,
                          timeout=300).stdout


def write_shard(path, members, codec):
    data = compress(ml.tar_bytes(members, 'gnu'), codec)
    with open(path, 'wb') as f:
        f.write(data)
    return data


def read_file(path):
    try:
        with open(path, 'rb') as f:
            return ('ok', f.read())
    except OSError as e:
        return ('err', errno.errorcode.get(e.errno, e.errno))


def md5(b):
    return hashlib.md5(b).hexdigest()


def check_served(ck, label, mnt, dirname, members):
    """The shard's directory lists exactly these members and each reads back exactly."""
    d = os.path.join(mnt, dirname)
    try:
        names = sorted(os.listdir(d))
    except OSError as e:
        ck.fail('%s: listing %s: %s' % (label, d, e))
        return
    ck.eq('%s: members listed' % label, names, sorted(n for n, _ in members))
    bad = 0
    for name, data in members:
        got = read_file(os.path.join(d, name))
        if got != ('ok', data):
            bad += 1
            if bad <= 5:
                ck.fail('%s: %s read back %s' % (label, name, ml.short(got, 100)))
    ck.eq('%s: members with wrong bytes' % label, bad, 0)


def check_refused(ck, label, mnt, dirname, member, want):
    """Whole or error: listing, `ls`, a lookup and a read of a member all fail with errno want;
    nothing is ever listed."""
    d = os.path.join(mnt, dirname)
    wname = errno.errorcode[want]
    try:
        names = os.listdir(d)
        ck.fail('%s: listing %s gave %d names %s instead of %s' % (label, d, len(names),
                                                                   ml.short(names[:5]), wname))
    except OSError as e:
        ck.eq('%s: listing errno' % label, errno.errorcode.get(e.errno, e.errno), wname)
    r = subprocess.run(['ls', d], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    ck.ok(r.returncode != 0 and r.stdout == b'' and os.strerror(want).encode() in r.stderr,
          '%s: `ls %s`: rc=%d stdout=%r stderr=%r' % (label, d, r.returncode, r.stdout[:200],
                                                      r.stderr[:200]))
    try:
        os.stat(os.path.join(d, member))
        ck.fail('%s: stat of member %s succeeded' % (label, member))
    except OSError as e:
        ck.eq('%s: stat of member errno' % label, errno.errorcode.get(e.errno, e.errno), wname)
    ck.eq('%s: read of member' % label, read_file(os.path.join(d, member)), ('err', wname))


def check_raw(ck, label, mnt, name, data):
    got = read_file(os.path.join(mnt, name))
    ck.ok(got[0] == 'ok' and md5(got[1]) == md5(data),
          '%s: raw %s reads back its %d stored bytes (got %s)' % (
              label, name, len(data), got[0] if got[0] == 'err' else '%d bytes' % len(got[1])))


# ---------------------------------------------------------------------------------------------

def group_cache(env, ck):
    rng = env.rng
    src = env.path('src')
    os.makedirs(src)
    members = [('%06d.%s' % (i // 2, 'cls' if i % 2 else 'txt'), rng.randbytes(rng.randrange(200, 1100)))
               for i in range(20000)]
    raw = write_shard(os.path.join(src, 'many.tar.zst'), members, 'zst')
    # what Python's tarfile reads from the shard is the reference
    tar = compress_undo(raw)
    decoded = len(tar)
    with tarfile.open(fileobj=io.BytesIO(tar), mode='r:') as tf:
        ref = [(m.name, tf.extractfile(m).read()) for m in tf if m.isfile()]
    ck.eq('cache: tarfile reads the generated members', ref == members, True)
    log('cache: many.tar.zst: %d members, %d bytes compressed, %d decoded' % (
        len(members), len(raw), decoded))
    ck.ok(decoded > 26 << 20, 'cache: the shard decodes past 26 MiB (%d)' % decoded)
    m = ml.Mount(env, src, cache_dir=env.path('cache'), extra=['--cache-size', '24M'])
    with m:
        check_served(ck, 'cache', m.mnt, 'many', ref)
        check_raw(ck, 'cache', m.mnt, 'many.tar.zst', raw)
        st = m.stats()
        log('cache: cache_bytes_used %s, cache_bytes_limit %s' % (st.get('cache_bytes_used'),
                                                                 st.get('cache_bytes_limit')))
        # the decoded copy counts, over the limit while it is in use
        ck.eq('cache: cache_bytes_used', st.get('cache_bytes_used'), decoded)


def compress_undo(data):
    return subprocess.run(['zstd', '-q', '-d', '-c'], input=data, stdout=subprocess.PIPE,
                          check=True, timeout=300).stdout


def group_disk(env, ck):
    rng = env.rng
    src = env.path('src')
    os.makedirs(src)
    big = [('b%d.bin' % i, rng.randbytes(10 << 20)) for i in range(8)]
    small = [('s%03d.txt' % i, rng.randbytes(rng.randrange(1, 40000))) for i in range(50)]
    big_raw = write_shard(os.path.join(src, 'big.tar.zst'), big, 'zst')
    write_shard(os.path.join(src, 'small.tar.gz'), small, 'gz')
    fs = ml.Tmpfs(env.path('tmpfs'), 64 << 20)
    with fs:
        cache = os.path.join(fs.path, 'cache')
        m = ml.Mount(env, src, cache_dir=cache)
        with m:
            check_refused(ck, 'disk: big', m.mnt, 'big', 'b3.bin', errno.ENOSPC)
            used = ml.du(cache)
            log('disk: cache dir uses %.1f MiB after the refusal' % (used / 2**20))
            ck.ok(used < 4 << 20, 'disk: the partial decoded copy is gone (%d bytes)' % used)
            check_served(ck, 'disk: small', m.mnt, 'small', small)
            check_raw(ck, 'disk: big', m.mnt, 'big.tar.zst', big_raw)
            # the error sticks: asked again, the same answer (and no second decode)
            check_refused(ck, 'disk: big again', m.mnt, 'big', 'b0.bin', errno.ENOSPC)
        text = ml.logs_under(cache)
    lines = [ln for ln in text.splitlines() if 'big.tar.zst' in ln and 'ENOSPC' in ln]
    log('disk: log: %s' % (lines[0] if lines else '(none)'))
    ck.eq('disk: log lines about the refusal', len(lines), 1)
    ck.ok(lines and 'cache disk' in lines[0] and '--min-free' in lines[0],
          'disk: the log line names the cache disk and --min-free')


def write_zero_bomb(path, before, gib):
    """tar(before, zz.bin of gib GiB of zeros) streamed through zstd: ~30,000x."""
    head = ml.tar_bytes(before, 'gnu')
    while head.endswith(bytes(512)):
        head = head[:-512]
    ti = tarfile.TarInfo('zz.bin')
    ti.size = gib << 30
    ti.mtime = 1700000000
    head += ti.tobuf(format=tarfile.GNU_FORMAT)
    with open(path, 'wb') as f:
        p = subprocess.Popen(['zstd', '-q', '-3', '-c'], stdin=subprocess.PIPE, stdout=f)
        p.stdin.write(head)
        zeros = bytes(1 << 20)
        for _ in range(gib << 10):
            p.stdin.write(zeros)
        p.stdin.write(bytes(1024))
        p.stdin.close()
        if p.wait(timeout=300) != 0:
            raise RuntimeError('zstd failed')
    with open(path, 'rb') as f:
        return f.read()


def group_bomb(env, ck):
    rng = env.rng
    src = env.path('src')
    os.makedirs(src)
    before = [('a.txt', b'before the bomb\n')]
    bomb_raw = write_zero_bomb(os.path.join(src, 'bomb.tar.zst'), before, 1)
    # legit: 1 KiB random + 3 KiB zeros per 4 KiB (~4x), 9 x 8 MiB: past the 64 MiB floor
    legit = [('l%d.bin' % i, b''.join(rng.randbytes(1024) + bytes(3072) for _ in range(2048)))
             for i in range(9)]
    legit_raw = write_shard(os.path.join(src, 'legit.tar.zst'), legit, 'zst')
    log('bomb: bomb.tar.zst %d bytes (1 GiB of zeros), legit.tar.zst %d bytes (%.1fx)' % (
        len(bomb_raw), len(legit_raw), 9 * (8 << 20) / len(legit_raw)))
    cache = env.path('cache')
    m = ml.Mount(env, src, cache_dir=cache)
    with m:
        check_refused(ck, 'bomb', m.mnt, 'bomb', 'a.txt', errno.EFBIG)
        check_raw(ck, 'bomb', m.mnt, 'bomb.tar.zst', bomb_raw)
        used = ml.du(cache)
        log('bomb: cache dir uses %.1f MiB after the refusal' % (used / 2**20))
        ck.ok(used < 4 << 20, 'bomb: the partial decoded copy is gone (%d bytes)' % used)
        check_served(ck, 'legit', m.mnt, 'legit', legit)
    text = ml.logs_under(cache)
    lines = [ln for ln in text.splitlines() if 'bomb.tar.zst' in ln and 'EFBIG' in ln]
    log('bomb: log: %s' % (lines[0] if lines else '(none)'))
    ck.eq('bomb: log lines about the refusal', len(lines), 1)
    ck.ok(lines and '--max-decode-ratio' in lines[0], 'bomb: the log names --max-decode-ratio')

    # the absolute bound, remembered across mounts while it is no looser
    src2 = env.path('src2')
    os.makedirs(src2)
    mid = [('m%d.bin' % i, rng.randbytes((8 << 20) // 3)) for i in range(3)]
    write_shard(os.path.join(src2, 'mid.tar.gz'), mid, 'gz')
    cache2 = env.path('cache2')
    for rnd, size in enumerate(['4M', '4M', '16M']):
        m = ml.Mount(env, src2, cache_dir=cache2, extra=['--max-decoded-size', size])
        with m:
            if size == '4M':
                check_refused(ck, 'size %d' % rnd, m.mnt, 'mid', 'm0.bin', errno.EFBIG)
            else:
                check_served(ck, 'size %d' % rnd, m.mnt, 'mid', mid)
        text = ml.logs_under(cache2)
        lines = [ln for ln in text.splitlines() if 'mid.tar.gz' in ln and 'EFBIG' in ln]
        ck.eq('size: log lines about the refusal after mount %d' % rnd, len(lines),
              min(rnd + 1, 2))
        ck.ok(lines and '--max-decoded-size' in lines[-1] and str(4 << 20) in lines[-1],
              'size %d: the log names --max-decoded-size and 4194304: %s' % (
                  rnd, lines[-1] if lines else '(none)'))


def group_warn(env, ck):
    src = env.path('src')
    os.makedirs(src)
    with open(os.path.join(src, 'x.txt'), 'wb') as f:
        f.write(b'x\n')
    want = 'less than one chunk per connection'
    for size, extra, warns in ((16 << 20, [], True), (64 << 20, [], True),
                               (64 << 20, ['--connections', '2'], False)):
        label = 'warn %d MiB %s' % (size >> 20, ' '.join(extra) or 'defaults')
        with ml.Tmpfs(env.path('tmpfs'), size) as fs:
            m = ml.Mount(env, src, cache_dir=os.path.join(fs.path, 'cache'), extra=extra)
            with m:
                log('%s: stderr: %r' % (label, m.stderr))
                ck.eq('%s: mount works' % label, read_file(os.path.join(m.mnt, 'x.txt')),
                      ('ok', b'x\n'))
            lines = [ln for ln in m.stderr.splitlines() if want in ln]
            ck.eq('%s: warning lines on stderr' % label, len(lines), 1 if warns else 0)
            if warns:
                ck.ok(lines and 'warning' in lines[0] and fs.path in lines[0],
                      '%s: the warning names the cache dir: %s' % (label, lines))
    # a cache smaller than one chunk: never for a local source (it fills no cache), nor when
    # --chunk-size is left out (then chunks are sized to the cache); the warning of a remote
    # source with a --chunk-size given is mount-hostile-low-options'
    want = 'is smaller than one chunk'
    for extra, warns in (([], False), (['--cache-size', '1M'], False),
                         (['--cache-size', '1M', '--chunk-size', '1M'], False),
                         (['--cache-size', '1M', '--chunk-size', '8M'], False)):
        label = 'warn %s' % (' '.join(extra) or 'defaults')
        m = ml.Mount(env, src, cache_dir=env.path('cache-%d' % len(extra)), extra=extra)
        with m:
            ck.eq('%s: mount works' % label, read_file(os.path.join(m.mnt, 'x.txt')),
                  ('ok', b'x\n'))
        lines = [ln for ln in m.stderr.splitlines() if want in ln]
        ck.eq('%s: cache-size warning lines on stderr (%r)' % (label, m.stderr), len(lines),
              1 if warns else 0)


def group_evict(env, ck):
    """An http source, cache dir on a 64 MiB tmpfs (60.8 MiB above the reserve): the raw bytes
    of a .tar.zst (20 MB) and then a 36 MB .tar fill the chunk store; decoding the .tar.zst
    (20 MB more, no fill on the way: its raw bytes are cached) fits only when decoding evicts
    chunks (the .tar's, least recently used): it must be served whole, not ENOSPC."""
    if not os.path.exists(web.NGINX):
        ck.fail('%s is not installed (scripts/install-deps.sh --test)' % web.NGINX)
        return
    rng = env.rng
    src = env.path('src')
    os.makedirs(src)
    a = [('a%d.bin' % i, rng.randbytes(6 << 20)) for i in range(6)]
    b = [('b%d.bin' % i, rng.randbytes(5 << 20)) for i in range(4)]
    with open(os.path.join(src, 'a.tar'), 'wb') as f:
        f.write(ml.tar_bytes(a, 'gnu'))
    b_raw = write_shard(os.path.join(src, 'b.tar.zst'), b, 'zst')
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        with ml.Tmpfs(env.path('tmpfs'), 64 << 20) as fs:
            cache = os.path.join(fs.path, 'cache')
            m = ml.Mount(env, ng.url('json/'), cache_dir=cache,
                         extra=['--chunk-size', '1M', '--prefetch-shards', '0', '--warm', 'off'])
            with m:
                check_raw(ck, 'evict: b', m.mnt, 'b.tar.zst', b_raw)
                check_served(ck, 'evict: a', m.mnt, 'a', a)
                log('evict: after a: cache dir %.1f MiB, tmpfs free %.1f MiB' % (
                    ml.du(cache) / 2**20, free_bytes(fs.path) / 2**20))
                check_served(ck, 'evict: b', m.mnt, 'b', b)
                st = m.stats()
                log('evict: after b: cache dir %.1f MiB, tmpfs free %.1f MiB, evictions %s' % (
                    ml.du(cache) / 2**20, free_bytes(fs.path) / 2**20, st.get('evictions')))
                check_served(ck, 'evict: a again', m.mnt, 'a', a)
            text = ml.logs_under(cache)
        lines = [ln for ln in text.splitlines() if 'not served' in ln]
        ck.eq('evict: refusals in the log', lines, [])
    finally:
        ng.stop()


def group_over(env, ck):
    """An http source and --cache-size 4M with the default --chunk-size (8M): a 10 MB raw .tar
    read whole fills one chunk bigger than the cache, so the cache runs over its limit while
    it is read; once the read ended, the mount evicts it back down without another fill
    (cache_bytes_used and the data files' blocks within 4 MiB), and the .tar reads back
    exactly after (its evicted chunks fetched again)."""
    if not os.path.exists(web.NGINX):
        ck.fail('%s is not installed (scripts/install-deps.sh --test)' % web.NGINX)
        return
    src = env.path('src')
    os.makedirs(src)
    members = [('m%02d.bin' % i, env.rng.randbytes(250000)) for i in range(40)]
    data = ml.tar_bytes(members, 'gnu')
    with open(os.path.join(src, 'a.tar'), 'wb') as f:
        f.write(data)
    limit = 4 << 20
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        cache = env.path('cache')
        with ml.Mount(env, ng.url('json/'), cache_dir=cache,
                      extra=['--cache-size', '4M', '--chunk-size', '8M', '--prefetch-shards', '0',
                             '--warm', 'off']) as m:
            check_raw(ck, 'over', m.mnt, 'a.tar', data)
            v1 = os.path.join(cache, 'v1')

            def data_bytes_now():
                datas = [os.path.join(v1, h, 'data') for h in os.listdir(v1)]
                return sum(ml.du(d) for d in datas if os.path.isdir(d))

            # an eviction lowers cache_bytes_used before its punch ends: wait for both
            st = ml.poll(lambda: (lambda s: s['cache_bytes_used'] <= limit and
                                  data_bytes_now() <= limit and s)(m.stats()))
            st = st or m.stats()
            log('over: cache_bytes_used %d, evictions %d, bytes_fetched %d' % (
                st['cache_bytes_used'], st['evictions'], st['bytes_fetched']))
            ck.ok(st['bytes_fetched'] >= len(data), 'over: fetched %d of %d bytes' % (
                st['bytes_fetched'], len(data)))
            ck.ok(st['cache_bytes_used'] <= limit, 'over: cache_bytes_used %d over --cache-size '
                  '%d after the read ended' % (st['cache_bytes_used'], limit))
            data_bytes = data_bytes_now()
            ck.ok(data_bytes <= limit, 'over: the data files hold %d bytes, over %d' % (
                data_bytes, limit))
            with open('/proc/sys/vm/drop_caches', 'w') as f:
                f.write('3')  # the kernel's copy of a.tar too: the reads go to the mount
            check_raw(ck, 'over: again', m.mnt, 'a.tar', data)
    finally:
        ng.stop()


def free_bytes(path):
    sv = os.statvfs(path)
    return sv.f_bavail * sv.f_frsize


def group_lru(env, ck):
    rng = env.rng
    src = env.path('src')
    os.makedirs(src)
    shards = []
    for i in range(5):
        members = [('k%d_%04d.bin' % (i, j), rng.randbytes(rng.randrange(20000, 300000)))
                   for j in range(50)]
        write_shard(os.path.join(src, 's%d.tar.zst' % i), members, 'zst')
        shards.append(('s%d' % i, members))
    cache = env.path('cache')
    limit = 20 << 20
    biggest = max(len(ml.tar_bytes(m, 'gnu')) for _, m in shards)
    with ml.Mount(env, src, cache_dir=cache, extra=['--cache-size', '20M']) as m:
        for name, members in shards:
            check_served(ck, 'lru %s' % name, m.mnt, name, members)
            on_disk = ml.du(os.path.join(cache, 'v1'))
            log('lru: after %s: %d bytes in the cache dir' % (name, on_disk))
            ck.ok(on_disk > 0, 'lru: after %s the cache dir holds nothing: the bound below '
                  'measures nothing' % name)
            ck.ok(on_disk <= limit + biggest + (1 << 20),
                  'lru: after %s the cache dir holds %d bytes > %d + one copy (%d)' % (
                      name, on_disk, limit, biggest))
        st = m.stats()
        ck.ok(st['decoded_evictions'] >= 2, 'lru: %d decoded copies evicted' %
              st['decoded_evictions'])
        ck.ok(st['cache_bytes_used'] <= limit + biggest, 'lru: cache_bytes_used %d' %
              st['cache_bytes_used'])
        before = st['decoded_streams']
        # the kernel's page cache still has s0's pages: drop them so the reads reach the daemon
        subprocess.run(['sync'], timeout=120)
        with open('/proc/sys/vm/drop_caches', 'w') as f:
            f.write('1\n')
        check_served(ck, 'lru s0 again', m.mnt, 's0', shards[0][1])
        st = m.stats()
        ck.eq('lru: s0 decoded again', st['decoded_streams'], before + 1)
        ck.eq('lru: read_errors', st['read_errors'], 0)
        log('lru: decoded_streams %d, decoded_evictions %d, cache_bytes_used %d' % (
            st['decoded_streams'], st['decoded_evictions'], st['cache_bytes_used']))


def decoded_copies(cache):
    """{path: bytes} of every decoded copy below cache (decoded/<16 hex digits>)."""
    out = {}
    for d, _, files in os.walk(os.path.join(cache, 'v1')):
        if os.path.basename(d) != 'decoded':
            continue
        for f in files:
            if len(f) == 16 and all(c in '0123456789abcdef' for c in f):
                with open(os.path.join(d, f), 'rb') as fh:
                    out[os.path.join(d, f)] = fh.read()
    return out


def deccrc_source(env):
    """A .tar.gz and a .tar.zst shard of 40 members, the 21st (the victim) of 300000 bytes: its
    middle byte is more than a 64 KiB unit from its neighbours."""
    rng = env.rng
    src = env.path('src')
    os.makedirs(src)
    shards = {}
    for codec in ('gz', 'zst'):
        members = [('%s%03d.bin' % (codec, i), rng.randbytes(rng.randrange(1000, 150000)))
                   for i in range(40)]
        members[20] = (members[20][0], rng.randbytes(300000))
        write_shard(os.path.join(src, 'd%s.tar.%s' % (codec, codec)), members, codec)
        shards[codec] = members
    return src, shards


def flip_victims(ck, cache, shards):
    """Flip the middle byte of each shard's victim in its decoded copy; {codec: victim}, or
    None when a copy is missing."""
    copies = decoded_copies(cache)
    victims = {}
    for codec, members in shards.items():
        tar = ml.tar_bytes(members, 'gnu')
        paths = [p for p, b in copies.items() if b == tar]
        ck.eq('deccrc: decoded copies of %s holding its tar' % codec, len(paths), 1)
        if not paths:
            return None
        with tarfile.open(fileobj=io.BytesIO(tar), mode='r:') as tf:
            ti = tf.getmember(members[20][0])
        off = ti.offset_data + ti.size // 2
        with open(paths[0], 'r+b') as f:
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ 0x01]))
        victims[codec] = members[20][0]
        log('deccrc: flipped byte %d of %s (member %s of %s)' % (off, paths[0], victims[codec],
                                                                codec))
    return victims


def read_back(ck, m, shards, victims):
    """Every member exact, but the victim's read may fail with EIO once (then exact)."""
    for codec, members in shards.items():
        d = os.path.join(m.mnt, 'd' + codec)
        failed = []
        for name, data in members:
            got = read_file(os.path.join(d, name))
            if got == ('err', 'EIO'):
                failed.append(name)
            elif got != ('ok', data):
                ck.fail('deccrc: %s/%s read back %s' % (codec, name, ml.short(got, 100)))
        # the damaged unit's read fails with EIO; when the kernel asked for it as
        # readahead it drops the error and asks again, which finds the copy decoded again
        log('deccrc: %s: members that failed with EIO: %s' % (codec, failed))
        ck.ok(set(failed) <= {victims[codec]},
              'deccrc: %s: members that failed with EIO %s, not at most %s' % (
                  codec, failed, victims[codec]))
        for name, data in members:
            if name in failed:
                ck.eq('deccrc: %s: %s on a retry' % (codec, name),
                      read_file(os.path.join(d, name)) == ('ok', data), True)


def group_deccrc(env, ck):
    src, shards = deccrc_source(env)
    cache = env.path('cache')
    with ml.Mount(env, src, cache_dir=cache) as m:
        for codec, members in shards.items():
            check_served(ck, 'deccrc: first mount: %s' % codec, m.mnt, 'd' + codec, members)
        ck.eq('deccrc: first mount: decoded_streams', m.stats()['decoded_streams'], 2)
    victims = flip_victims(ck, cache, shards)
    if victims is None:
        return
    with ml.Mount(env, src, cache_dir=cache) as m:
        read_back(ck, m, shards, victims)
        st = m.stats()
        ck.eq('deccrc: cache_units_corrupt', st['cache_units_corrupt'], 2)
        ck.eq('deccrc: decoded_streams', st['decoded_streams'], 2)
        ck.eq('deccrc: decoded_reused', st['decoded_reused'], 2)
    lines = [ln for ln in ml.logs_under(cache).splitlines() if 'fails its CRC32C' in ln]
    log('deccrc: log: %s' % (lines[0] if lines else '(none)'))
    ck.eq('deccrc: log lines about the damage', len(lines), 1)
    # the copies decoded again carry their CRCs: a third mount reads every member exactly
    with ml.Mount(env, src, cache_dir=cache) as m:
        for codec, members in shards.items():
            check_served(ck, 'deccrc: third mount: %s' % codec, m.mnt, 'd' + codec, members)
        st = m.stats()
        ck.eq('deccrc: third mount: cache_units_corrupt, decoded_streams',
              (st['cache_units_corrupt'], st['decoded_streams']), (0, 0))


def group_declive(env, ck):
    """The same copies damaged under the running mount that decoded them (its own copies,
    trusted after the decode until their files change: inotify): a byte flipped in each, then a
    1000-byte hole punched (fallocate(1), inside the victim's data) in the .tar.gz one, the page cache dropped each time:
    every member exact, the damaged unit's read EIO at most once, cache_units_corrupt exact; a
    third mount reads every member exactly."""
    src, shards = deccrc_source(env)
    cache = env.path('cache')
    with ml.Mount(env, src, cache_dir=cache) as m:
        for codec, members in shards.items():
            check_served(ck, 'declive: first read: %s' % codec, m.mnt, 'd' + codec, members)
        ck.eq('declive: decoded_streams', m.stats()['decoded_streams'], 2)
        victims = flip_victims(ck, cache, shards)
        if victims is None:
            return
        with open('/proc/sys/vm/drop_caches', 'w') as f:
            f.write('3\n')
        read_back(ck, m, shards, victims)
        st = m.stats()
        ck.eq('declive: flips: cache_units_corrupt', st['cache_units_corrupt'], 2)
        ck.eq('declive: flips: decoded_streams (each copy decoded again)',
              st['decoded_streams'], 4)
        # a hole smaller than a block in the .tar.gz copy decoded again: zeros, unless seen
        tar = ml.tar_bytes(shards['gz'], 'gnu')
        paths = [p for p, b in decoded_copies(cache).items() if b == tar]
        ck.eq('declive: the .tar.gz copy decoded again', len(paths), 1)
        if paths:
            # inside the victim's data, not on a block boundary: SEEK_HOLE does not see it
            with tarfile.open(fileobj=io.BytesIO(tar), mode='r:') as tf:
                off = tf.getmember(victims['gz']).offset_data + 3 * 4096 + 100
            subprocess.run(['fallocate', '-p', '-o', str(off), '-l', '1000', paths[0]],
                           check=True, timeout=60)
            with open('/proc/sys/vm/drop_caches', 'w') as f:
                f.write('3\n')
            hit = {'gz': victims['gz']}
            read_back(ck, m, {'gz': shards['gz']}, hit)
            st = m.stats()
            ck.eq('declive: hole: cache_units_corrupt', st['cache_units_corrupt'], 3)
    with ml.Mount(env, src, cache_dir=cache) as m:
        for codec, members in shards.items():
            check_served(ck, 'declive: remount: %s' % codec, m.mnt, 'd' + codec, members)
        ck.eq('declive: remount: cache_units_corrupt', m.stats()['cache_units_corrupt'], 0)


GROUPS = {'cache': group_cache, 'disk': group_disk, 'bomb': group_bomb, 'warn': group_warn,
          'evict': group_evict, 'lru': group_lru, 'deccrc': group_deccrc,
          'declive': group_declive, 'over': group_over}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, 'squeeze-', deadline=280)
