#!/usr/bin/python3
"""shardfs mount tests: a local source that changes under the mount (docs/design.md section 3,
"Sources can change under a mount"; docs/faults.md "When the mount sees changes").

usage: test_change.py SHARDFS GROUP
GROUP:
  rewrite   a mounted shard overwritten in place with another shard's bytes (another size, and
            the same size with the members in another order), and one truncated: a read that
            reaches the daemon gives ESTALE or the new version's exact bytes, never the old
            index over the new bytes, never zeros; the name is indexed again when looked up
  refresh   'shardfs refresh MOUNTPOINT': a new shard appears, a removed one is gone
            (ENOENT), a changed one (replaced by rename) shows its new members and bytes;
            the CLI's exit codes and its summary line
  sidecar   NAME.tar.idx beside a shard: used while the shard is unchanged; rejected (and
            counted) after `tar -rf` appended a member that fits in the record padding (the
            size stays the same), after a copy of shard and sidecar (cp -p: a new inode), and
            for a sidecar of the older format
  sidecar-url  'index --sidecar' of file://localhost/ABS and file:///ABS writes beside the
            shards (not under ./localhost/); file://otherhost/ABS is refused with a reason
  moved     the source path switched under the mount: a directory renamed over it
            (mv d d.old && mkdir d) and a symlink switched (ln -sfn v2 d): 'shardfs refresh'
            reports the new, removed and changed shards, serves the new version's exact bytes,
            and a file open on a changed shard gets ESTALE
  fulldisk  a local source, the cache dir on a full 4 MiB tmpfs (root): shards not indexed
            yet are indexed and served (a 1-byte member each, exact bytes), their indexes kept
            in memory: index_unsaved counts them, one log line for the mount
  sidecar-stale  a sidecar of a shard then rewritten in the middle with the same size, the
            same first and last member headers and the same last 64 KiB (two members swap
            sizes), mounted over nginx: every identity check passes; the first read of a
            member whose own tar header disagrees gives ESTALE, never other bytes; the index
            is built from the shard, lookups then show the new members with exact bytes,
            samples.tsv the new offsets; a remount uses the built index
  ifview-sidecar-stale  --layout imagefolder --class-from cls over such a sidecar (local,
            its identity forged): a .cls member's tar header, read with its bytes, rejects it
            while the view is built; the view (classes, names, sizes, bytes) equals that of a
            mount without the sidecar, one log line; a remount uses the built index
  pax-mtime  malformed pax mtime values (no digits; stray bytes after the number), read past
            as GNU tar does: exact bytes and mtimes, no damage, one log line per shard naming
            it, the first such member and what was ignored; none from a remount

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import tarfile  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.mount import log, read_result, write_file  # noqa: E402


def members_of(env, tag, sizes):
    return [('k%d.bin' % i, bytes(env.rng.randrange(256) for _ in range(16)) * (n // 16) +
             tag.encode() * (n % 16)) for i, n in enumerate(sizes)]


def overwrite_in_place(path, data):
    """Same inode: truncate and write, as 'cp other.tar path' does."""
    with open(path, 'r+b') as f:
        f.truncate(0)
        f.write(data)


def check_read(ck, label, path, allowed):
    """A read of path must give one of the exact byte strings in allowed, or ESTALE."""
    kind, v = read_result(path)
    log('%s: %s' % (label, errno.errorcode.get(v, v) if kind == 'err' else
                    '%d bytes, %s' % (len(v), 'version %d' % allowed.index(v) if v in allowed
                                      else 'no version')))
    if kind == 'err':
        ck.ok(v == errno.ESTALE, '%s: read failed with %s, not ESTALE' % (label, errno.errorcode.get(v, v)))
    else:
        ck.ok(any(v == a for a in allowed), '%s: read %d bytes that are no version of the member'
              ' (%s)' % (label, len(v), 'all zeros' if v and not v.strip(b'\0') else 'wrong bytes'))
    return kind, v


def until_exact(ck, label, path, want, old=(), transient=(errno.ESTALE,)):
    """Read path until it gives want (('ok', bytes) or ('err', errno)); every answer before
    must be one of old's exact byte strings (pages the kernel kept) or an errno in transient
    (ESTALE: a file the mount checked and found changed, until its entry is looked up
    again). Any other answer fails at once: a transient wrong answer is what these tests look
    for, so it never passes because the right one follows. Reads 50 ms apart until
    ml.POLL_TIMEOUT passed (a bound against a hang: the notifier's invalidation and the
    lookup that indexes the new version take seconds on a busy machine)."""
    seen, limit, end = {}, 0, time.monotonic() + ml.POLL_TIMEOUT
    while time.monotonic() < end:
        limit += 1
        got = read_result(path)
        if got == want:
            log('%s: exact after %s' % (label, ', '.join('%d %s' % (v, k) for k, v in
                                                            sorted(seen.items())) or 'no other'))
            return True
        if got[0] == 'err' and got[1] in transient:
            k = errno.errorcode.get(got[1], got[1])
        elif got[0] == 'ok' and got[1] in old:
            k = 'old version'
        else:
            ck.ok(False, '%s: %s (allowed: the new version, %s)' % (
                label, ml.short(got) if got[0] == 'ok' else errno.errorcode.get(got[1], got[1]),
                ', '.join(['the old version'] * bool(old) +
                          [errno.errorcode.get(e, e) for e in transient])))
            return False
        seen[k] = seen.get(k, 0) + 1
        time.sleep(0.05)
    ck.ok(False, '%s: never the new version in %d reads (%s)' % (
        label, limit, ', '.join('%d %s' % (v, k) for k, v in sorted(seen.items()))))
    return False


# ---------------------------------------------------------------------------------------------

def group_rewrite(env, ck):
    src = env.path('src')
    os.makedirs(os.path.join(src, 'train'))
    a = members_of(env, 'a', [5000 + 1000 * i for i in range(8)])
    b = members_of(env, 'b', [9000 - 700 * i for i in range(8)])             # another layout
    c = members_of(env, 'c', [4000 + 1500 * i for i in range(6)])
    c_same = [(n, bytes(x ^ 0x5a for x in d)) for n, d in reversed(c)]          # same size
    d = members_of(env, 'd', [20000 + 3000 * i for i in range(6)])
    p_a, p_c, p_d = (os.path.join(src, 'train', n) for n in ('s0.tar', 's1.tar', 's2.tar'))
    write_file(p_a, ml.tar_bytes(a))
    write_file(p_c, ml.tar_bytes(c))
    write_file(p_d, ml.tar_bytes(d))
    ck.eq('same-size rewrite really has the same size', len(ml.tar_bytes(c_same)),
          len(ml.tar_bytes(c)))
    ref = {'s0': dict(a), 's1': dict(c), 's2': dict(d)}
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        top = os.path.join(m.mnt, 'train')
        # index every shard and look every member up; read only k0 of s0 (its pages are then
        # in the kernel's cache: reads of them never reach the daemon and may give the old
        # version's exact bytes)
        for s in ('s0', 's1', 's2'):
            ck.eq('%s: members' % s, sorted(os.listdir(os.path.join(top, s))), sorted(ref[s]))
            for n in ref[s]:
                ck.eq('%s/%s: size' % (s, n), os.stat(os.path.join(top, s, n)).st_size,
                      len(ref[s][n]))
        ck.eq('s0/k0.bin before', read_result(os.path.join(top, 's0', 'k0.bin')),
              ('ok', a[0][1]))

        # 1. another shard's bytes, another size
        overwrite_in_place(p_a, ml.tar_bytes(b))
        nb = dict(b)
        for n in sorted(ref['s0']):
            allowed = [nb[n]] + ([a[0][1]] if n == 'k0.bin' else [])
            check_read(ck, 'rewritten s0/%s' % n, os.path.join(top, 's0', n), allowed)
        # the name is indexed again when looked up: the new bytes, exactly; until then
        # ESTALE, or the old bytes the kernel kept (k0.bin only)
        for n in sorted(nb):
            if not until_exact(ck, 'rewritten s0/%s' % n, os.path.join(top, 's0', n),
                               ('ok', nb[n]), old=[a[0][1]] if n == 'k0.bin' else []):
                break  # the rest would wait as long
        until_exact(ck, 'rewritten s0.tar', os.path.join(top, 's0.tar'),
                    ('ok', ml.tar_bytes(b)))

        # 2. the same size, members in another order (only mtime/ctime tell)
        overwrite_in_place(p_c, ml.tar_bytes(c_same))
        ncs = dict(c_same)
        for n in sorted(ref['s1']):
            check_read(ck, 'same-size s1/%s' % n, os.path.join(top, 's1', n), [ncs[n]])
        for n in sorted(ncs):
            if not until_exact(ck, 'same-size s1/%s' % n, os.path.join(top, 's1', n),
                               ('ok', ncs[n])):
                break

        # 3. truncated to less than half: members past the new end are no longer there
        whole = ml.tar_bytes(d)
        cut = 512 + len(d[0][1]) + 700
        with open(p_d, 'r+b') as f:
            f.truncate(cut)
        last = d[-1][0]
        kind, v = read_result(os.path.join(top, 's2', last))
        ck.ok(kind == 'err' and v in (errno.ESTALE, errno.EIO, errno.ENOENT),
              'truncated s2/%s: %s instead of an error' % (
                  last, ('%d bytes' % len(v)) if kind == 'ok' else errno.errorcode.get(v, v)))

        # once the new version is indexed, the last member is gone (the cut shard ends in
        # k1.bin's data: ENOENT), k0.bin and the raw shard are exact; ESTALE until then
        until_exact(ck, 'truncated s2/%s' % last, os.path.join(top, 's2', last),
                    ('err', errno.ENOENT))
        until_exact(ck, 'truncated s2/k0.bin (before the cut)',
                    os.path.join(top, 's2', 'k0.bin'), ('ok', d[0][1]))
        until_exact(ck, 'truncated s2.tar', os.path.join(top, 's2.tar'), ('ok', whole[:cut]))
        st = m.stats()
        ck.ok(st.get('changes_noticed', 0) >= 3, 'changes_noticed %r < 3' % st.get('changes_noticed'))
        ck.eq('damaged_shards (the truncated s2)', st.get('damaged_shards'), 1)


def index_blobs(cache):
    """The bytes of every saved shard index under cache (meta/ and its families, meta/f-*/)."""
    out = []
    for d, _, files in os.walk(cache):
        if 'meta' in d.split(os.sep):
            for f in files:
                with open(os.path.join(d, f), 'rb') as fh:
                    b = fh.read()
                if b.startswith(b'SHRDIDX\0'):
                    out.append(b)
    return out


def group_refresh(env, ck):
    exe = env.shardfs
    src = env.path('src')
    os.makedirs(os.path.join(src, 'train'))
    a = members_of(env, 'a', [3000, 4000, 5000])
    b = members_of(env, 'b', [3500, 4500])
    new = members_of(env, 'n', [6000, 7000])
    a2 = [('x%d.bin' % i, data) for i, (_, data) in enumerate(members_of(env, 'z', [2000] * 4))]
    write_file(os.path.join(src, 'train', 's0.tar'), ml.tar_bytes(a))
    write_file(os.path.join(src, 'train', 's1.tar'), ml.tar_bytes(b))

    # the CLI without a mount
    r = env.run([exe, 'refresh'])
    ck.eq('refresh without MOUNTPOINT: exit 2', r.returncode, 2)
    notmnt = env.path('notmnt')
    os.makedirs(notmnt)
    r = env.run([exe, 'refresh', notmnt])
    ck.eq('refresh of a plain directory: exit 1', r.returncode, 1)
    ck.ok(b'not a shardfs mount' in r.stderr, 'refresh of a plain directory says so: %r' % r.stderr)

    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        top = os.path.join(m.mnt, 'train')
        ck.eq('before: listing', sorted(os.listdir(top)), ['s0', 's0.tar', 's1', 's1.tar'])
        for n, data in a:
            ck.eq('before: s0/' + n, read_result(os.path.join(top, 's0', n)), ('ok', data))
        ck.eq('before: s1/' + b[0][0], read_result(os.path.join(top, 's1', b[0][0])),
              ('ok', b[0][1]))
        ck.eq('before: s1 index saved', len([x for x in index_blobs(env.path('cache'))
                                             if b'|train/s1.tar' in x]), 1)
        # nothing changed: a refresh says so
        r = env.run([exe, 'refresh', m.mnt])
        ck.eq('refresh (no change): exit 0', r.returncode, 0)
        ck.ok(b': 0 new, 0 removed, 0 changed; 2 objects, 2 shards' in r.stdout,
              'refresh (no change) summary: %r' % r.stdout)

        # a new shard, and a new directory with one; both invisible until the refresh
        write_file(os.path.join(src, 'train', 's2.tar'), ml.tar_bytes(new))
        os.makedirs(os.path.join(src, 'val'))
        write_file(os.path.join(src, 'val', 'v0.tar'), ml.tar_bytes(b))
        ck.ok(not os.path.exists(os.path.join(top, 's2.tar')), 'new shard visible before refresh')
        ck.eq('before refresh: listing', sorted(os.listdir(top)), ['s0', 's0.tar', 's1', 's1.tar'])
        # a removed shard, and a changed one (a new file renamed over it)
        os.unlink(os.path.join(src, 'train', 's1.tar'))
        tmp = os.path.join(src, 'train', '.s0.tmp')
        write_file(tmp, ml.tar_bytes(a2))
        os.rename(tmp, os.path.join(src, 'train', 's0.tar'))

        r = env.run([exe, 'refresh', m.mnt])
        out = r.stdout.decode(errors='replace')
        log('shardfs refresh -> rc=%r %r %r' % (r.returncode, out, r.stderr))
        ck.eq('refresh: exit 0', r.returncode, 0)
        ck.ok(': 2 new, 1 removed, 1 changed; 3 objects, 3 shards' in out,
              'refresh summary: %r' % out)
        ck.eq('after refresh: listing', sorted(os.listdir(top)),
              ['s0', 's0.tar', 's2', 's2.tar'])
        ck.eq('after refresh: root', sorted(os.listdir(m.mnt)), ['train', 'val'])
        for n, data in new:
            ck.eq('new s2/' + n, read_result(os.path.join(top, 's2', n)), ('ok', data))
        ck.eq('new s2.tar', read_result(os.path.join(top, 's2.tar')), ('ok', ml.tar_bytes(new)))
        for n, data in b:
            ck.eq('new val/v0/' + n, read_result(os.path.join(m.mnt, 'val', 'v0', n)),
                  ('ok', data))
        for p in ('s1.tar', 's1', 's1/' + b[0][0]):
            ck.eq('removed %s' % p, read_result(os.path.join(top, p)), ('err', errno.ENOENT))
        ck.eq('changed s0: members', sorted(os.listdir(os.path.join(top, 's0'))),
              sorted(n for n, _ in a2))
        for n, data in a2:
            ck.eq('changed s0/' + n, read_result(os.path.join(top, 's0', n)), ('ok', data))
        ck.eq('changed s0/' + a[0][0], read_result(os.path.join(top, 's0', a[0][0])),
              ('err', errno.ENOENT))
        ck.eq('changed s0.tar', read_result(os.path.join(top, 's0.tar')), ('ok', ml.tar_bytes(a2)))
        # the index of s0's old version left the cache dir when the new one was saved: one
        # blob per shard, however often shards change (blobs are never evicted)
        s0_blobs = [b for b in index_blobs(env.path('cache')) if b'|train/s0.tar' in b]
        ck.eq('changed s0: index blobs of s0', len(s0_blobs), 1)
        ck.ok(all(b'|%d|train/s0.tar' % len(ml.tar_bytes(a2)) in b for b in s0_blobs),
              'changed s0: the index blob kept is not the new version\'s')
        # and the index of s1, removed from the source, left with it
        ck.eq('removed s1: index blobs of s1', len([x for x in index_blobs(env.path('cache'))
                                                    if b'|train/s1.tar' in x]), 0)
        st = m.stats()
        ck.eq('stats index_removed (s0\'s old version, s1)', st.get('index_removed'), 2)
        for k, v in (('refreshes', 2), ('refresh_added', 2), ('refresh_removed', 1),
                     ('refresh_changed', 1), ('objects', 3), ('shards', 3)):
            ck.eq('stats %s' % k, st.get(k), v)

        # readers of unchanged shards during refreshes: always the exact bytes (an unchanged
        # shard keeps its inodes); a shard added and removed at every refresh meanwhile
        import threading
        stop, bad, nread = threading.Event(), [], [0]

        def reader(paths):
            while not stop.is_set():
                for p, data in paths:
                    got = read_result(p)
                    nread[0] += 1
                    if got != ('ok', data):
                        bad.append((p, ml.short(got)))
        paths = [(os.path.join(top, 's2', n), data) for n, data in new] + \
                [(os.path.join(top, 's2.tar'), ml.tar_bytes(new))]
        ths = [threading.Thread(target=reader, args=(paths,)) for _ in range(2)]
        for t in ths:
            t.start()
        # at least 6 refreshes, and pairs more (at most 60 in all: a count, not a clock) until
        # a read completed while a refresh ran: the overlap this is about, seen to happen
        overlapped, i = 0, 0
        try:
            ck.ok(ml.poll(lambda: nread[0] > 0), 'the readers read nothing')
            # (pairs: e.tar is removed again before the loop ends)
            while i < 6 or i % 2 == 1 or (not overlapped and i < 60):
                extra = os.path.join(src, 'train', 'e.tar')
                if i % 2 == 0:
                    write_file(extra, ml.tar_bytes(b))
                else:
                    os.unlink(extra)
                before = nread[0]
                r = env.run([exe, 'refresh', m.mnt])
                overlapped += nread[0] > before
                ck.eq('refresh %d during reads: exit' % i, r.returncode, 0)
                ck.eq('refresh %d: e.tar listed' % i, os.path.exists(os.path.join(top, 'e.tar')),
                      i % 2 == 0)
                i += 1
        finally:
            stop.set()
            for t in ths:
                t.join()
        log('%d reads during %d refreshes, %d of which overlapped reads' % (nread[0], i,
                                                                            overlapped))
        ck.ok(overlapped > 0, 'no read completed while a refresh ran (%d refreshes)' % i)
        ck.eq('reads of an unchanged shard during refreshes: all exact', bad[:5], [])

        # a removed directory disappears too; the control command does the same as the CLI
        shutil.rmtree(os.path.join(src, 'val'))
        ml.control(m.mnt, 'refresh\n')
        ck.eq('after 2nd refresh: root', sorted(os.listdir(m.mnt)), ['train'])
        ck.eq('removed val/', read_result(os.path.join(m.mnt, 'val', 'v0.tar')),
              ('err', errno.ENOENT))


def old_format_sidecar(data):
    """The same index file with the identity of the first sidecar format
    ("shardfs-sidecar|1|raw|SIZE"), checksum recomputed (shardidx_save.c's layout)."""
    off, ln = struct.unpack_from('<QQ', data, 96)
    parts = bytes(data[off:off + ln]).split(b'|')
    return sidecar_with_ident(data, b'shardfs-sidecar|1|%s|%s' % (parts[2], parts[3]))


def sidecar_with_ident(data, old):
    """The same index file with identity old (no longer than the one it has), checksum
    recomputed (shardidx_save.c's layout)."""
    b = bytearray(data)
    off, ln = struct.unpack_from('<QQ', b, 96)
    assert len(old) <= ln
    b[off:off + ln] = old + b'\0' * (ln - len(old))
    struct.pack_into('<I', b, 60, len(old))
    struct.pack_into('<Q', b, 104, len(old))
    struct.pack_into('<Q', b, 16, 0)
    h = 0xcbf29ce484222325
    for x in bytes(b):
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    struct.pack_into('<Q', b, 16, h)
    return bytes(b)


def group_sidecar(env, ck):
    exe = env.shardfs
    src = env.path('src')
    stage = env.path('stage')
    os.makedirs(src)
    os.makedirs(stage)
    mem = members_of(env, 's', [3000, 2000, 1000])
    for n, data in mem:
        write_file(os.path.join(stage, n), data)
    shard = os.path.join(src, 's0.tar')
    subprocess.run(['tar', '-cf', shard, '-C', stage] + [n for n, _ in mem], check=True)
    size0 = os.path.getsize(shard)
    r = env.run([exe, 'index', '--sidecar', '--cache-dir', env.path('c0'), src])
    ck.eq('index --sidecar: exit', r.returncode, 0)
    sidecar = shard + '.idx'
    ck.ok(os.path.exists(sidecar), 'sidecar written')

    def mount_and_check(label, names, used, rejected, source=src):
        with ml.Mount(env, source, cache_dir=env.path('cache-' + label)) as m:
            d = os.path.join(m.mnt, 's0')
            ck.eq('%s: members' % label, sorted(os.listdir(d)), sorted(names))
            for n in names:
                want = dict(mem).get(n)
                if want is None:
                    with open(os.path.join(stage, n), 'rb') as f:
                        want = f.read()
                ck.eq('%s: %s' % (label, n), read_result(os.path.join(d, n)), ('ok', want))
            st = m.stats()
            ck.eq('%s: index_sidecar' % label, st.get('index_sidecar'), used)
            ck.eq('%s: index_sidecar_rejected' % label, st.get('index_sidecar_rejected'), rejected)

    names = [n for n, _ in mem]
    mount_and_check('unchanged', names, 1, 0)

    # an old-format sidecar of the unchanged shard: rejected cleanly, index built
    good = open(sidecar, 'rb').read()
    write_file(sidecar, old_format_sidecar(good))
    mount_and_check('old-format', names, 0, 1)
    write_file(sidecar, good)

    # a copy of shard and sidecar elsewhere (cp -p keeps mtimes, not inodes): rebuilt, correct
    cp = env.path('copy')
    os.makedirs(cp)
    subprocess.run(['cp', '-p', shard, sidecar, cp], check=True)
    mount_and_check('copied', names, 0, 1, source=cp)

    # tar -rf: a member that fits in the record padding, so the size stays the same
    write_file(os.path.join(stage, 'late.bin'), b'appended member\n' * 8)
    subprocess.run(['tar', '-rf', shard, '-C', stage, 'late.bin'], check=True)
    ck.eq('tar -rf kept the size', os.path.getsize(shard), size0)
    mount_and_check('appended', names + ['late.bin'], 0, 1)

    # a rewrite in place that keeps size, tail and mtime (a member's name changed in its
    # header, the old mtime put back): only the ctime tells, and the sidecar is rejected
    src2 = env.path('src2')
    stage2 = env.path('stage2')
    os.makedirs(src2)
    os.makedirs(stage2)
    mem2 = [('m%02d.bin' % i, bytes([i]) * 8000) for i in range(20)]
    for n, data in mem2:
        write_file(os.path.join(stage2, n), data)
    big = os.path.join(src2, 'big.tar')
    subprocess.run(['tar', '-cf', big, '-C', stage2] + [n for n, _ in mem2], check=True)
    r = env.run([exe, 'index', '--sidecar', '--cache-dir', env.path('c2'), src2])
    ck.eq('index --sidecar (big): exit', r.returncode, 0)
    st0 = os.stat(big)
    with open(big, 'r+b') as f:
        data = bytearray(f.read())
        off = data.find(b'm05.bin\0')
        ck.ok(off >= 0 and off % 512 == 0, 'm05.bin header at %d' % off)
        data[off:off + 7] = b'm55.bin'
        data[off + 148:off + 156] = b' ' * 8
        data[off + 148:off + 156] = b'%06o\0 ' % sum(data[off:off + 512])
        f.seek(off)
        f.write(data[off:off + 512])
    os.utime(big, ns=(st0.st_atime_ns, st0.st_mtime_ns))
    ck.eq('size and mtime kept', (os.path.getsize(big), os.stat(big).st_mtime_ns),
          (st0.st_size, st0.st_mtime_ns))
    with ml.Mount(env, src2, cache_dir=env.path('cache-mtime-kept')) as m:
        got = sorted(os.listdir(os.path.join(m.mnt, 'big')))
        want = sorted(n if n != 'm05.bin' else 'm55.bin' for n, _ in mem2)
        ck.eq('mtime kept: members as the shard has them now', got, want)
        ck.eq('mtime kept: m55.bin', read_result(os.path.join(m.mnt, 'big', 'm55.bin')),
              ('ok', bytes([5]) * 8000))
        st = m.stats()
        ck.eq('mtime kept: sidecar used, rejected', (st.get('index_sidecar'),
              st.get('index_sidecar_rejected')), (0, 1))


def group_sidecar_url(env, ck):
    """'shardfs index --sidecar' of a file:// URL writes NAME.tar.idx beside the shards in the
    URL's absolute directory (file://localhost/ABS and file:///ABS), never under a directory
    named after the host relative to the working directory; file://OTHERHOST/ABS is refused
    with a reason. A mount of the URL then uses the sidecar."""
    exe = env.shardfs
    src = env.path('src')
    stage = env.path('stage')
    cwd = env.path('cwd')
    for d in (src, stage, cwd):
        os.makedirs(d)
    mem = members_of(env, 'u', [1500, 700])
    for n, data in mem:
        write_file(os.path.join(stage, n), data)
    shard = os.path.join(src, 's0.tar')
    subprocess.run(['tar', '-cf', shard, '-C', stage] + [n for n, _ in mem], check=True)
    sidecar = shard + '.idx'

    def index(label, url):
        r = subprocess.run([exe, 'index', '--sidecar', '--cache-dir', env.path('c-' + label), url],
                           cwd=cwd, env=env.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=120)
        out, err = r.stdout.decode(errors='replace'), r.stderr.decode(errors='replace')
        log('index --sidecar %s -> rc=%r %r %r' % (url, r.returncode, out, err))
        return r.returncode, out, err

    for label, url in (('localhost', 'file://localhost' + src), ('empty-host', 'file://' + src)):
        if os.path.exists(sidecar):
            os.unlink(sidecar)
        rc, out, err = index(label, url)
        ck.eq('%s: exit' % label, rc, 0)
        ck.ok(out.endswith('; wrote 1 sidecar index\n'), '%s: summary %r' % (label, out))
        ck.ok(os.path.isfile(sidecar), '%s: no sidecar beside the shard' % label)
        ck.eq('%s: files written under the working directory' % label, sorted(os.listdir(cwd)), [])
        with ml.Mount(env, url, cache_dir=env.path('cache-' + label)) as m:
            d = os.path.join(m.mnt, 's0')
            ck.eq('%s: members' % label, sorted(os.listdir(d)), sorted(n for n, _ in mem))
            for n, data in mem:
                ck.eq('%s: %s' % (label, n), read_result(os.path.join(d, n)), ('ok', data))
            ck.eq('%s: index_sidecar' % label, m.stats().get('index_sidecar'), 1)

    rc, out, err = index('otherhost', 'file://otherhost' + src)
    ck.eq('file://otherhost: exit', rc, 1)
    ck.ok('otherhost' in err and 'localhost' in err,
          'file://otherhost: the error does not say the host must be localhost: %r' % err)
    ck.eq('file://otherhost: files written under the working directory', sorted(os.listdir(cwd)),
          [])


def group_moved(env, ck):
    exe = env.shardfs
    a = members_of(env, 'a', [3000, 4000])
    a2 = members_of(env, 'A', [5000, 1000, 2000])
    b = members_of(env, 'b', [3500])
    c = members_of(env, 'c', [2500, 1500])

    def fill(d, shards):
        os.makedirs(d)
        for name, mem in shards.items():
            write_file(os.path.join(d, name), ml.tar_bytes(mem))

    def refresh(label, mnt, summary):
        r = env.run([exe, 'refresh', mnt])
        out = r.stdout.decode(errors='replace')
        log('%s: shardfs refresh -> rc=%r %r %r' % (label, r.returncode, out, r.stderr))
        ck.eq('%s: refresh exit' % label, r.returncode, 0)
        ck.ok(summary in out, '%s: refresh summary %r, not %r' % (label, out, summary))

    def check_tree(label, top, shards):
        ck.eq('%s: listing' % label, sorted(os.listdir(top)),
              sorted(sum(([n, n[:-4]] for n in shards), [])))
        for name, mem in sorted(shards.items()):
            ck.eq('%s: members of %s' % (label, name), sorted(os.listdir(
                os.path.join(top, name[:-4]))), sorted(n for n, _ in mem))
            for n, data in mem:
                ck.eq('%s: %s/%s' % (label, name[:-4], n),
                      read_result(os.path.join(top, name[:-4], n)), ('ok', data))
            ck.eq('%s: %s' % (label, name), read_result(os.path.join(top, name)),
                  ('ok', ml.tar_bytes(mem)))

    # 1. a directory renamed over the source path
    d = env.path('d')
    fill(d, {'s0.tar': a, 's1.tar': b})
    with ml.Mount(env, d, cache_dir=env.path('cache-d')) as m:
        check_tree('before mv', m.mnt, {'s0.tar': a, 's1.tar': b})
        held = open(os.path.join(m.mnt, 's0', a[0][0]), 'rb', buffering=0)
        ck.eq('held s0 member before', held.read(100), a[0][1][:100])
        os.rename(d, env.path('d.old'))
        fill(d, {'s0.tar': a2, 's2.tar': c})
        refresh('mv', m.mnt, ': 1 new, 1 removed, 1 changed; 2 objects, 2 shards')
        check_tree('after mv', m.mnt, {'s0.tar': a2, 's2.tar': c})
        for p in ('s1.tar', 's1'):
            ck.eq('after mv: removed %s' % p, read_result(os.path.join(m.mnt, p)),
                  ('err', errno.ENOENT))
        try:
            held.seek(200)
            got = ('ok', held.read(100))
        except OSError as e:
            got = ('err', e.errno)
        held.close()
        ck.eq('after mv: a file open on the changed s0', got, ('err', errno.ESTALE))
        # the source path gone: the refresh fails, the mount shows what it showed
        os.rename(d, env.path('d.gone'))
        r = env.run([exe, 'refresh', m.mnt])
        log('gone: shardfs refresh -> rc=%r %r %r' % (r.returncode, r.stdout, r.stderr))
        ck.eq('source path gone: refresh exit', r.returncode, 1)
        check_tree('source path gone', m.mnt, {'s0.tar': a2, 's2.tar': c})

    # 2. a symlink switched to a new version (relative source path through the link)
    fill(env.path('v1'), {'s0.tar': a, 's1.tar': b})
    fill(env.path('v2'), {'s0.tar': a2, 's1.tar': b, 's2.tar': c})
    os.symlink('v1', env.path('cur'))
    with ml.Mount(env, env.path('cur'), cache_dir=env.path('cache-l')) as m:
        check_tree('v1', m.mnt, {'s0.tar': a, 's1.tar': b})
        tmp = env.path('cur.tmp')
        os.symlink('v2', tmp)
        os.rename(tmp, env.path('cur'))  # ln -sfn v2 cur, atomically
        # s1.tar of v2 is another file with the same bytes: a new version
        refresh('ln -sfn', m.mnt, ': 1 new, 0 removed, 2 changed; 3 objects, 3 shards')
        check_tree('v2', m.mnt, {'s0.tar': a2, 's1.tar': b, 's2.tar': c})
        # and back
        os.symlink('v1', tmp)
        os.rename(tmp, env.path('cur'))
        refresh('back to v1', m.mnt, ': 0 new, 1 removed, 2 changed; 2 objects, 2 shards')
        check_tree('v1 again', m.mnt, {'s0.tar': a, 's1.tar': b})


def group_fulldisk(env, ck):
    src = env.path('src')
    os.makedirs(src)
    shards = {}
    for i in range(5):
        mem = [('k0.bin', bytes([65 + i]))] + members_of(env, 'f%d' % i, [3000, 5000])[1:]
        shards['s%d.tar' % i] = mem
        write_file(os.path.join(src, 's%d.tar' % i), ml.tar_bytes(mem))
    tmpfs = ml.tmpfs(env.path('tmpfs'), 4 << 20)
    try:
        logf = env.path('daemon.log')  # not on the full disk
        with ml.Mount(env, src, cache_dir=os.path.join(tmpfs, 'cache'),
                      extra=['--log-file', logf]) as m:
            # fill the disk to the last byte
            with open(os.path.join(tmpfs, 'fill'), 'wb', buffering=0) as f:
                try:
                    while True:
                        f.write(b'\0' * 4096)
                except OSError as e:
                    ck.eq('filling the tmpfs ends with ENOSPC', e.errno, errno.ENOSPC)
            log('tmpfs free after the fill: %d bytes' % (os.statvfs(tmpfs).f_bavail *
                                                        os.statvfs(tmpfs).f_frsize))
            for name, mem in sorted(shards.items()):
                for n, data in mem:
                    ck.eq('full disk: %s/%s' % (name[:-4], n),
                          read_result(os.path.join(m.mnt, name[:-4], n)), ('ok', data))
            st = m.stats()
            for k, v in (('index_built', 5), ('index_unsaved', 5), ('index_save_errors', 0),
                         ('index_errors', 0), ('read_errors', 0)):
                ck.eq('full disk: stats %s' % k, st.get(k), v)
        with open(logf, errors='replace') as f:
            text = f.read()
        ck.eq('full disk: one log line for the unsaved indexes', text.count('index not saved'), 1)
    finally:
        ml.untmpfs(tmpfs)


def tar_model(data):
    """{name: (data offset, size, bytes)} of the regular members of tar bytes data."""
    import io
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        for ti in tf.getmembers():
            if ti.isfile():
                out[ti.name] = (ti.offset_data, ti.size, data[ti.offset_data:ti.offset_data +
                                                              ti.size])
    return out


def group_sidecar_stale(env, ck):
    exe = env.shardfs
    if not shutil.which('nginx'):
        raise ml.Skip('nginx not installed')
    src = env.path('src')
    os.makedirs(src)

    def blob(tag, n):
        return bytes(env.rng.randrange(256) for _ in range(64)) * (n // 64) + tag * (n % 64)
    a, d = blob(b'a', 1000), blob(b'd', 70000)
    old = [('a.bin', a), ('b.bin', blob(b'b', 10240)), ('c.bin', blob(b'c', 20480)),
           ('d.bin', d)]
    new = [('a.bin', a), ('b.bin', blob(b'B', 20480)), ('c.bin', blob(b'C', 10240)),
           ('d.bin', d)]
    old_tar, new_tar = ml.tar_bytes(old), ml.tar_bytes(new)
    ck.eq('same size', len(new_tar), len(old_tar))
    ck.eq('same first header', new_tar[:512], old_tar[:512])
    ck.eq('same last 64 KiB (last member header too)', new_tar[-(70000 + 1024 + 512):],
          old_tar[-(70000 + 1024 + 512):])
    model = tar_model(new_tar)
    shard = os.path.join(src, 's0.tar')
    write_file(shard, old_tar)
    # s1.tar: a sidecar that stays right (names under a directory, one long name)
    good = [('dir/x.bin', blob(b'x', 3000)), ('dir/' + 'l' * 120 + '.bin', blob(b'l', 700)),
            ('y.bin', blob(b'y', 9000)), ('empty.bin', b'')]
    good_tar = ml.tar_bytes(good, fmt='gnu')
    write_file(os.path.join(src, 's1.tar'), good_tar)
    r = env.run([exe, 'index', '--sidecar', '--cache-dir', env.path('c0'), src])
    ck.eq('index --sidecar: exit', r.returncode, 0)
    ck.ok(os.path.exists(shard + '.idx'), 'sidecar written')
    write_file(shard, new_tar)

    def samples(mnt):
        """{name: (offset, size)} of s0's rows of samples.tsv."""
        out = {}
        with open(os.path.join(mnt, '.shardfs', 'samples.tsv')) as f:
            for line in f.read().splitlines()[1:]:
                path, sh, off, size, _ = line.split('\t')
                if sh == 's0.tar':
                    out[path.rsplit('/', 1)[-1]] = (int(off), int(size))
        return out
    want_rows = {n: (o, sz) for n, (o, sz, _) in model.items()}

    logf = env.path('daemon.log')
    with web.Nginx(env.path('nginx'), src) as ng:
        cache = env.path('cache')
        opts = ['--log-file', logf]
        with ml.Mount(env, ng.url('json/'), cache_dir=cache, extra=opts) as m:
            top = os.path.join(m.mnt, 's0')
            ck.eq('members', sorted(os.listdir(top)), ['a.bin', 'b.bin', 'c.bin', 'd.bin'])
            # the right sidecar: every member checks out, the first read of one from its
            # middle (the header fetched alone) too
            with open(os.path.join(m.mnt, 's1', 'y.bin'), 'rb', buffering=0) as f:
                f.seek(5000)
                ck.eq('s1/y.bin from 5000', f.read(100), good[2][1][5000:5100])
            for n, data in good:
                ck.eq('s1/%s' % n[:20], read_result(os.path.join(m.mnt, 's1', n)), ('ok', data))
            early = samples(m.mnt)  # made from the sidecar's index: its offsets
            log('samples.tsv before a read: %r' % early)
            # the first member's header is the same: its bytes are served
            ck.eq('a.bin', read_result(os.path.join(top, 'a.bin')), ('ok', a))
            # b.bin's header says 20480 bytes, the sidecar 10240: never its bytes
            got = read_result(os.path.join(top, 'b.bin'))
            log('first read of b.bin: %s' % ml.short(got))
            ck.eq('first read of b.bin: ESTALE', got, ('err', errno.ESTALE))
            for n, (_, size, data) in sorted(model.items()):
                p = os.path.join(top, n)
                until_exact(ck, 'after the rejection: %s' % n, p, ('ok', data))
                ck.eq('after the rejection: %s size' % n, os.stat(p).st_size, size)
            ck.eq('s0.tar', read_result(os.path.join(m.mnt, 's0.tar')), ('ok', new_tar))
            ck.eq('samples.tsv after the rejection: the new offsets', samples(m.mnt), want_rows)
            st = m.stats()
            for k, v in (('index_sidecar', 2), ('index_rejected_on_read', 1),
                         ('index_built', 1)):
                ck.eq('stats %s' % k, st.get(k), v)
        with open(logf, errors='replace') as f:
            text = f.read()
        ck.eq('one log line of the rejection', text.count('its sidecar index is wrong'), 1)
        # a remount: the index built from the shard, saved in the cache, is used
        with ml.Mount(env, ng.url('json/'), cache_dir=cache, extra=opts) as m:
            top = os.path.join(m.mnt, 's0')
            for n, (_, size, data) in sorted(model.items()):
                ck.eq('remount: %s' % n, read_result(os.path.join(top, n)), ('ok', data))
            st = m.stats()
            for k, v in (('index_loaded', 1), ('index_sidecar', 0), ('index_rejected_on_read', 0)):
                ck.eq('remount: stats %s' % k, st.get(k), v)

    # locally: a sidecar whose identity names the shard as it is now (written by a tool that
    # copied it from elsewhere: nothing but the members' own headers tell)
    sc = shard + '.idx'
    with open(sc, 'rb') as f:
        sidecar = f.read()
    stn = os.stat(shard)
    h = 0xcbf29ce484222325
    for x in new_tar[-65536:]:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    ident = b'shardfs-sidecar|3|raw|%d|%016x|%d|%d|%d' % (len(new_tar), h, stn.st_mtime_ns,
                                                          stn.st_ino, stn.st_ctime_ns)
    write_file(sc, sidecar_with_ident(sidecar, ident))
    with ml.Mount(env, src, cache_dir=env.path('cache-local'), extra=opts) as m:
        top = os.path.join(m.mnt, 's0')
        ck.eq('local: c.bin, first read', read_result(os.path.join(top, 'c.bin')),
              ('err', errno.ESTALE))
        for n, (_, size, data) in sorted(model.items()):
            until_exact(ck, 'local: %s' % n, os.path.join(top, n), ('ok', data))
        st = m.stats()
        for k, v in (('index_sidecar', 1), ('index_rejected_on_read', 1), ('index_built', 1)):
            ck.eq('local: stats %s' % k, st.get(k), v)


def forge_local_ident(shard, tar, sidecar):
    """Sidecar bytes with the identity a local index of shard (whose bytes are tar) has now
    (shard_sidecar's: size, FNV-1a of the last 64 KiB, mtime, inode, ctime): as if a tool had
    copied them from elsewhere; nothing but the members' own headers tell."""
    stn = os.stat(shard)
    h = 0xcbf29ce484222325
    for x in tar[-65536:]:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    ident = b'shardfs-sidecar|3|raw|%d|%016x|%d|%d|%d' % (len(tar), h, stn.st_mtime_ns,
                                                          stn.st_ino, stn.st_ctime_ns)
    return sidecar_with_ident(sidecar, ident)


def ifview_tree(mnt):
    """{class: {name: (size, bytes)}} of an imagefolder mount: listed and stat'ed first, then
    read, so a listing made from a wrong index is seen before any read corrects it."""
    sizes = {c: {n: os.stat(os.path.join(mnt, c, n)).st_size
                 for n in sorted(os.listdir(os.path.join(mnt, c)))}
             for c in sorted(os.listdir(mnt))}
    return {c: {n: (sz, read_result(os.path.join(mnt, c, n))) for n, sz in files.items()}
            for c, files in sizes.items()}


def group_ifview_sidecar_stale(env, ck):
    """--layout imagefolder --class-from cls over a local shard whose sidecar is stale (two
    middle images swapped sizes; size, first and last headers, last 64 KiB the same; identity
    forged): the sidecar puts b.cls inside the new b.jpg, whose bytes there read as a class
    '7'. The build reads b.cls with its tar header, rejects the sidecar and builds again over
    the index built from the shard: the view equals that of a mount without the sidecar."""
    exe = env.shardfs
    src, ref = env.path('src'), env.path('ref')
    os.makedirs(src)
    os.makedirs(ref)
    a, z = b'a' * 1000, b'z' * 3000

    def img(tag, n):
        return tag + b'7' * (n - len(tag))
    old = [('a.jpg', a), ('a.cls', b'0'), ('b.jpg', img(b'b', 10240)), ('b.cls', b'1'),
           ('c.jpg', img(b'c', 20480)), ('c.cls', b'2'), ('z.jpg', z), ('z.cls', b'0')]
    new = [('a.jpg', a), ('a.cls', b'0'), ('b.jpg', img(b'B', 20480)), ('b.cls', b'1'),
           ('c.jpg', img(b'C', 10240)), ('c.cls', b'2'), ('z.jpg', z), ('z.cls', b'0')]
    old_tar, new_tar = ml.tar_bytes(old), ml.tar_bytes(new)
    ck.eq('same size', len(new_tar), len(old_tar))
    model = tar_model(new_tar)
    old_model = tar_model(old_tar)
    z_hdr = model['z.jpg'][0] - 512
    ck.eq('same z.jpg offset', old_model['z.jpg'][0] - 512, z_hdr)
    ck.eq('same first header, same from z.jpg on', (new_tar[:512], new_tar[z_hdr:]),
          (old_tar[:512], old_tar[z_hdr:]))
    b_cls = old_model['b.cls'][0]
    ck.eq('the sidecar\'s b.cls is a \'7\' of the new b.jpg', new_tar[b_cls:b_cls + 1], b'7')
    shard = os.path.join(src, 's0.tar')
    write_file(shard, old_tar)
    r = env.run([exe, 'index', '--sidecar', '--cache-dir', env.path('c0'), src])
    ck.eq('index --sidecar: exit', r.returncode, 0)
    write_file(shard, new_tar)
    sc = shard + '.idx'
    with open(sc, 'rb') as f:
        sidecar = f.read()
    write_file(sc, forge_local_ident(shard, new_tar, sidecar))
    write_file(os.path.join(ref, 's0.tar'), new_tar)
    want = {'0': {'a.jpg': (len(a), ('ok', a)), 'z.jpg': (len(z), ('ok', z))},
            '1': {'b.jpg': (20480, ('ok', model['b.jpg'][2]))},
            '2': {'c.jpg': (10240, ('ok', model['c.jpg'][2]))}}
    opts = ['--layout', 'imagefolder', '--class-from', 'cls']
    with ml.Mount(env, ref, cache_dir=env.path('cache-ref'), extra=opts) as m:
        ck.eq('no sidecar: the view', ifview_tree(m.mnt), want)
    logf = env.path('daemon.log')
    cache = env.path('cache')
    with ml.Mount(env, src, cache_dir=cache, extra=opts + ['--log-file', logf]) as m:
        got = ifview_tree(m.mnt)
        ck.eq('stale sidecar: the view', got, want)
        st = m.stats()
        for k, v in (('index_sidecar', 1), ('index_rejected_on_read', 1), ('index_built', 1),
                     ('imagefolder_images', 4), ('imagefolder_no_class', 0)):
            ck.eq('stale sidecar: stats %s' % k, st.get(k), v)
    with open(logf, errors='replace') as f:
        text = f.read()
    ck.eq('one log line of the rejection', text.count('its sidecar index is wrong'), 1)
    ck.ok('member b.cls' in text, 'the log line names b.cls')
    # a remount uses the index the first mount built and saved, not the sidecar
    with ml.Mount(env, src, cache_dir=cache, extra=opts) as m:
        ck.eq('remount: the view', ifview_tree(m.mnt), want)
        st = m.stats()
        ck.eq('remount: index loaded, sidecar not used, nothing rejected',
              (st.get('index_loaded'), st.get('index_sidecar'), st.get('index_rejected_on_read')),
              (1, 0, 0))


def pax_tar(members):
    """A pax tar of [(name, bytes, pax mtime value or None)], header mtime 1700000000."""
    import io
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode='w', format=tarfile.PAX_FORMAT) as tf:
        for name, data, pax_mtime in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = 1700000000
            ti.mode = 0o644
            if pax_mtime is not None:
                ti.pax_headers = {'mtime': pax_mtime}
            tf.addfile(ti, io.BytesIO(data))
    return bio.getvalue()


def group_pax_mtime(env, ck):
    """Malformed pax mtime values, read past as GNU tar does ('xxx': the header's mtime;
    '999xxx': 999): the members are served with exact bytes and those mtimes, the shard is not
    damaged, and each shard's index build logs one line naming the shard, its first such
    member and what was ignored; a remount (the saved index) logs none."""
    src = env.path('src')
    os.makedirs(src)
    s0 = [('a.txt', b'alpha ' * 100, 'xxx'), ('b.txt', b'beta ' * 50, '999xxx'),
          ('c.txt', b'gamma', None)]
    s1 = [('d/e.txt', b'epsilon ' * 10, '12.5zz')]
    want = {'s0/a.txt': (b'alpha ' * 100, 1700000000), 's0/b.txt': (b'beta ' * 50, 999),
            's0/c.txt': (b'gamma', 1700000000), 's1/d/e.txt': (b'epsilon ' * 10, 12)}
    t0 = pax_tar(s0)
    ck.ok(b'mtime=xxx\n' in t0 and b'mtime=999xxx\n' in t0, 'tarfile wrote the records as given')
    write_file(os.path.join(src, 's0.tar'), t0)
    write_file(os.path.join(src, 's1.tar'), pax_tar(s1))
    r = subprocess.run(['tar', '--full-time', '-tvf', os.path.join(src, 's0.tar'), 'b.txt'],
                       capture_output=True, text=True)
    log('GNU tar on b.txt (mtime=999xxx): %s' % r.stdout.strip())
    cache = env.path('cache')
    for label, logf in (('mount', env.path('daemon.log')), ('remount', env.path('daemon2.log'))):
        with ml.Mount(env, src, cache_dir=cache, extra=['--log-file', logf]) as m:
            got = {}
            for p in want:
                path = os.path.join(m.mnt, p)
                got[p] = (read_result(path)[1], int(os.stat(path).st_mtime))
            ck.eq('%s: bytes and mtimes' % label, got, want)
            st = m.stats()
            ck.eq('%s: damaged_shards' % label, st.get('damaged_shards'), 0)
            ck.eq('%s: indexes built, loaded' % label, (st.get('index_built'),
                                                        st.get('index_loaded')),
                  (2, 0) if label == 'mount' else (0, 2))
        with open(logf, errors='replace') as f:
            lines = [ln for ln in f.read().splitlines() if 'extended header record' in ln]
        log('%s: %r' % (label, lines))
        if label == 'remount':
            ck.eq('remount: no line (the saved index)', lines, [])
            continue
        ck.eq('one line per shard', len(lines), 2)
        l0 = [ln for ln in lines if 'shard s0.tar:' in ln]
        l1 = [ln for ln in lines if 'shard s1.tar:' in ln]
        ck.ok(len(l0) == 1 and 'member a.txt at offset 0: extended header record mtime=xxx '
              'ignored: not a time' in l0[0] and '(and 1 more field read past)' in l0[0],
              's0.tar: the line names a.txt, mtime=xxx and the other field: %r' % l0)
        ck.ok(len(l1) == 1 and 'member d/e.txt at offset 0: extended header record '
              'mtime=12.5zz read up to its first stray byte' in l1[0] and 'more' not in l1[0],
              's1.tar: the line names d/e.txt and mtime=12.5zz: %r' % l1)
        with open(logf, errors='replace') as f:
            ck.ok('damaged' not in f.read(), 'no damage logged')


GROUPS = {'rewrite': group_rewrite, 'refresh': group_refresh, 'sidecar': group_sidecar,
          'sidecar-url': group_sidecar_url, 'sidecar-stale': group_sidecar_stale,
          'moved': group_moved, 'fulldisk': group_fulldisk,
          'ifview-sidecar-stale': group_ifview_sidecar_stale, 'pax-mtime': group_pax_mtime}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, 'change-')
