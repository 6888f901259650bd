#!/usr/bin/python3
"""Remote tests: a store that sends no ETag, and a shard rewritten under the mount.

usage: test_noetag.py SHARDFS GROUP
GROUP:
  size      a Python S3 stand-in on 127.0.0.1 (a free port, ListObjectsV2, --no-sign) that
            sends no ETag, neither in its listing nor in its answers, serving a.tar and
            b.tar.gz (a stored gzip of a tar: the cache tier decodes it to a copy of its own).
            Both are read (exact bytes, the whole object and each member), then rewritten to
            another size with a new Last-Modified; a `shardfs refresh` says "2 changed" and
            every read gives the new bytes exactly (not the old version's cached object, nor
            EIO). Before the mend the cache tier named a version without an ETag by codec and
            key alone, so the new version met the old version's cached object.
  samesize  the same, rewritten to other bytes of the same size with a new Last-Modified.
  gen       seeded and replayable (SHARDFS_TEST_SEED; GEN_ROUNDS rounds of GEN_STEPS steps,
            the seed, seed + 1, ...; each round logs its seed): four shards (two
            plain, two gzip'd) on the same stand-in, which here may also send an ETag per
            version (and then answers a fill's If-Match that names another with 412). Each
            step rewrites one shard (other bytes of the same size or another size; a new ETag
            or none; a new Last-Modified or the same one, never a version a store without
            ETags cannot tell: the same size and second as one it had), refreshes (the count
            of changed shards, then the exact bytes of every shard and member), reads some
            (exact bytes where no rewrite is pending; else only read, filling the cache tier
            and the saved indexes with the old version), or unmounts and mounts again on the
            same cache directory (then exact bytes: a saved map or index of an old version is
            never taken for the new one). Never an old version's bytes after a refresh.

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import gzip  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from email.utils import formatdate  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import net  # noqa: E402

log = ml.log


class NoETag(net.LoopbackServer):
    """An S3 stand-in on 127.0.0.1 for bucket bkt: objects[NAME] its bytes, mtimes[NAME] its
    Last-Modified (epoch seconds), etags[NAME] its ETag (quoted) or None: no ETag anywhere
    for it (the default: none for any). A GET whose If-Match names another ETag than the
    object's (or any, for one without) is answered 412."""

    def __init__(self, objects):
        self.objects = objects
        self.mtimes = {n: 1700000000 for n in objects}
        self.etags = {n: None for n in objects}
        self.lock = threading.Lock()
        outer = self

        class H(net.ObjectHandler):
            def listing(self):
                items = ''
                with outer.lock:
                    for name in sorted(outer.objects):
                        etag = outer.etags.get(name)
                        items += ('<Contents><Key>%s</Key><LastModified>%s</LastModified>'
                                  '%s<Size>%d</Size></Contents>' % (
                                      name, time.strftime('%Y-%m-%dT%H:%M:%S.000Z',
                                                          time.gmtime(outer.mtimes[name])),
                                      '<ETag>%s</ETag>' % etag.replace('"', '&quot;')
                                      if etag else '',
                                      len(outer.objects[name])))
                body = ('<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns='
                        '"http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name><Prefix>'
                        '</Prefix><KeyCount>%d</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>'
                        'false</IsTruncated>%s</ListBucketResult>'
                        % (len(outer.objects), items))
                self.reply(200, body, 'application/xml')

            def serve(self, head):
                path = self.path.split('?')[0]
                if path in ('/bkt', '/bkt/') and 'list-type' in self.path:
                    return self.listing()
                m = re.match(r'/bkt/(.+)$', path)
                with outer.lock:
                    name = m.group(1) if m else ''
                    data = outer.objects.get(name)
                    mtime = outer.mtimes.get(name)
                    etag = outer.etags.get(name)
                if data is None:
                    return self.answer(404, [('Content-Length', '0')])
                hdr = [('Last-Modified', formatdate(mtime, usegmt=True))]
                if etag:
                    hdr.append(('ETag', etag))
                im = self.headers.get('If-Match')
                if not head and im is not None and im.strip() != etag:
                    return self.answer(412, [('Content-Length', '0')])
                if head:
                    return self.answer(200, hdr + [('Content-Length', str(len(data)))])
                body, cr = self.part(data)
                self.answer(206, hdr + cr + [('Content-Length', str(len(body)))], body)

        self.serve(H)

    def put(self, name, data, etag=None, later=100):
        """Rewrite name to data with ETag etag (None: none), its Last-Modified later seconds
        on (0: the same second)."""
        with self.lock:
            self.objects[name] = data
            self.mtimes[name] += later
            self.etags[name] = etag


def members_of(rng, sizes):
    return [('m%d.bin' % i, bytes(rng.getrandbits(8) for _ in range(n)))
            for i, n in enumerate(sizes)]


def gz(data):
    # stored (level 0), no mtime: the same input size gives the same compressed size
    return gzip.compress(data, compresslevel=0, mtime=0)


def rewrite_case(env, ck, same):
    rng = env.rng
    members = {'a': members_of(rng, [3000, 1, 4500]), 'b': members_of(rng, [2000, 777])}

    def objects_of(mem):
        return {'a.tar': ml.tar_bytes(mem['a'], 'gnu'),
                'b.tar.gz': gz(ml.tar_bytes(mem['b'], 'gnu'))}

    objects = objects_of(members)
    srv = NoETag(dict(objects))
    for k in ('AWS_ENDPOINT_URL', 'AWS_ENDPOINT_URL_S3', 'AWS_PROFILE'):
        env.env.pop(k, None)
    env.env['AWS_EC2_METADATA_DISABLED'] = 'true'
    env.env['AWS_REGION'] = 'us-east-1'
    extra = ['--endpoint', srv.url('').rstrip('/'), '--no-sign', '--warm', 'off',
             '--prefetch-shards', '0']
    try:
        with ml.Mount(env, 's3://bkt/', cache_dir=env.path('cache'), extra=extra) as m:
            def exact(when):
                a = os.path.join(m.mnt, 'a.tar')
                # the first read after a change may give ESTALE once (the old inode)
                got = ml.poll(lambda: (lambda r: r != ('err', errno.ESTALE) and r)(
                    ml.read_result(a))) or ('err', errno.ESTALE)
                ck.eq('%s: a.tar' % when, got, ('ok', objects['a.tar']))
                ck.eq('%s: a.tar size' % when, os.stat(a).st_size, len(objects['a.tar']))
                for name, data in members['a']:
                    ck.eq('%s: a/%s' % (when, name),
                          ml.read_result(os.path.join(m.mnt, 'a', name)), ('ok', data))
                for name, data in members['b']:
                    p = os.path.join(m.mnt, 'b', name)
                    got = ml.poll(lambda: (lambda r: r != ('err', errno.ESTALE) and r)(
                        ml.read_result(p))) or ('err', errno.ESTALE)
                    ck.eq('%s: b/%s' % (when, name), got, ('ok', data))

            def rewrite(label, sizes_a, sizes_b):
                members['a'] = members_of(rng, sizes_a)
                members['b'] = members_of(rng, sizes_b)
                new = objects_of(members)
                for k, v in new.items():
                    objects[k] = v
                    srv.put(k, v)
                r = env.run([env.shardfs, 'refresh', m.mnt])
                out = r.stdout.decode(errors='replace')
                log('%s: shardfs refresh -> rc=%r %r' % (label, r.returncode, out))
                ck.eq('%s: refresh exit' % label, r.returncode, 0)
                ck.ok(': 0 new, 0 removed, 2 changed' in out,
                      '%s: refresh says 2 changed: %r' % (label, out))

            exact('first')
            exact('again')
            old = dict(objects)
            if same:
                rewrite('same size', [3000, 1, 4500], [2000, 777])
                for k in objects:
                    ck.eq('%s: same size' % k, len(objects[k]), len(old[k]))
                    ck.ok(objects[k] != old[k], '%s: other bytes' % k)
            else:
                rewrite('another size', [3000, 1, 20000], [2000, 777, 12000])
                for k in objects:
                    ck.ok(len(objects[k]) != len(old[k]), '%s: another size' % k)
            exact('rewritten')
            exact('rewritten, again')
    finally:
        srv.stop()


# The generated test's shards (stem, gzip'd) and member sizes (within one 64 KiB unit, across
# units, empty); at most GEN_MEMBERS members a shard; GEN_STEPS steps a run.
GEN_SHARDS = [('p0', False), ('p1', False), ('z0', True), ('z1', True)]
GEN_SIZES = [0, 1, 511, 512, 3000, 70000, 140000]
GEN_MEMBERS = 4
GEN_STEPS = 40
GEN_ROUNDS = 3  # seeds SEED, SEED + 1, SEED + 2: each its own server, mount and cache


def gen_case(env, ck, seed):
    rng = random.Random(seed)
    log('gen: seed %d (SHARDFS_TEST_SEED=%d replays it as the first round)' % (seed, seed))
    names = ['%s.tar%s' % (stem, '.gz' if z else '') for stem, z in GEN_SHARDS]
    stems = {n: n.split('.')[0] for n in names}
    members = {}
    count = [0]

    def new_members(sizes):
        count[0] += 1
        return [('m%d.bin' % i, rng.randbytes(n)) for i, n in enumerate(sizes)]

    def obj_of(name):
        t = ml.tar_bytes(members[name], 'gnu')
        return gz(t) if name.endswith('.gz') else t

    for n in names:
        members[n] = new_members([rng.choice(GEN_SIZES)
                                  for _ in range(rng.randint(1, GEN_MEMBERS))])
    objects = {n: obj_of(n) for n in names}
    srv = NoETag(dict(objects))
    # every version's bytes of each shard and member (to name an old version served)
    seen = {n: {objects[n]} for n in names}
    seen_m = {n: {(m, d) for m, d in members[n]} for n in names}
    # (size, mtime) of each version without an ETag: one a store without ETags cannot tell
    # apart from a new one at the same size and second is never made
    idents = {n: {(len(objects[n]), srv.mtimes[n])} for n in names}
    etags = [0]
    pending = set()  # rewritten since the last refresh or mount
    for k in ('AWS_ENDPOINT_URL', 'AWS_ENDPOINT_URL_S3', 'AWS_PROFILE'):
        env.env.pop(k, None)
    env.env['AWS_EC2_METADATA_DISABLED'] = 'true'
    env.env['AWS_REGION'] = 'us-east-1'
    extra = ['--endpoint', srv.url('').rstrip('/'), '--no-sign', '--warm', 'off',
             '--prefetch-shards', '0']

    def read_fresh(path):
        # the first read after a change may give ESTALE once (the old inode)
        return ml.poll(lambda: (lambda r: r != ('err', errno.ESTALE) and r)(
            ml.read_result(path))) or ('err', errno.ESTALE)

    def exact(m, when, which):
        for n in which:
            got = read_fresh(os.path.join(m.mnt, n))
            ck.eq('%s: %s' % (when, n), got, ('ok', objects[n]))
            ck.ok(got[0] != 'ok' or got[1] == objects[n] or got[1] not in seen[n],
                  '%s: %s is not an old version\'s bytes' % (when, n))
            for mn, data in members[n]:
                got = read_fresh(os.path.join(m.mnt, stems[n], mn))
                ck.eq('%s: %s/%s' % (when, stems[n], mn), got, ('ok', data))
                ck.ok(got[0] != 'ok' or got[1] == data or (mn, got[1]) not in seen_m[n],
                      '%s: %s/%s is not an old version\'s bytes' % (when, stems[n], mn))

    def rewrite(step):
        n = rng.choice(names)
        old = members[n]
        if rng.random() < 0.6:  # other bytes, the same size
            sizes = [len(d) for _, d in old]
        else:
            sizes = [len(d) for _, d in old]
            while sum(sizes) == sum(len(d) for _, d in old) and len(sizes) == len(old):
                sizes = [rng.choice(GEN_SIZES) for _ in range(rng.randint(1, GEN_MEMBERS))]
        members[n] = new_members(sizes)
        data = obj_of(n)
        etag = None
        if rng.random() < 0.5:
            etags[0] += 1
            etag = '"v%d-%d"' % (seed % 1000, etags[0])
        later = rng.choice([0, 1, 37])
        if etag is None:
            while (len(data), srv.mtimes[n] + later) in idents[n]:
                later += 1
            idents[n].add((len(data), srv.mtimes[n] + later))
        same = len(data) == len(objects[n])
        objects[n] = data
        seen[n].add(data)
        seen_m[n].update(members[n])
        srv.put(n, data, etag, later)
        pending.add(n)
        log('step %d: rewrite %s: %d bytes (%s), ETag %s, Last-Modified +%d' % (
            step, n, len(data), 'the same size' if same else 'another size',
            etag, later))

    try:
        m = ml.Mount(env, 's3://bkt/', cache_dir=env.path('cache-%d' % seed), extra=extra)
        m.mount()
        try:
            exact(m, 'mounted', names)
            for step in range(GEN_STEPS):
                r = rng.random()
                if r < 0.45:
                    rewrite(step)
                elif r < 0.65:
                    out = env.run([env.shardfs, 'refresh', m.mnt])
                    text = out.stdout.decode(errors='replace')
                    log('step %d: refresh (%d rewritten) -> %r' % (step, len(pending), text))
                    ck.eq('step %d: refresh exit' % step, out.returncode, 0)
                    ck.ok(': 0 new, 0 removed, %d changed' % len(pending) in text,
                          'step %d: refresh says %d changed: %r' % (step, len(pending), text))
                    pending.clear()
                    exact(m, 'step %d refreshed' % step, names)
                elif r < 0.85:
                    which = rng.sample(names, 2)
                    log('step %d: read %s (%s rewritten since)' % (
                        step, which, sorted(pending & set(which))))
                    exact(m, 'step %d read' % step, [n for n in which if n not in pending])
                    for n in which:
                        if n in pending:  # whatever it gives: it fills the cache tier
                            ml.read_result(os.path.join(m.mnt, n))
                            for mn, _ in members[n]:
                                ml.read_result(os.path.join(m.mnt, stems[n], mn))
                else:
                    log('step %d: unmount, mount again (%d rewritten)' % (step, len(pending)))
                    m.umount()
                    m = ml.Mount(env, 's3://bkt/', cache_dir=env.path('cache-%d' % seed),
                                 extra=extra)
                    m.mount()
                    pending.clear()
                    exact(m, 'step %d remounted' % step, names)
            out = env.run([env.shardfs, 'refresh', m.mnt])
            text = out.stdout.decode(errors='replace')
            ck.ok(': 0 new, 0 removed, %d changed' % len(pending) in text,
                  'last refresh says %d changed: %r' % (len(pending), text))
            exact(m, 'last', names)
        finally:
            m.umount(quiet=True)
    finally:
        srv.stop()


def group_gen(env, ck):
    for r in range(GEN_ROUNDS):
        gen_case(env, ck, env.seed + r)


def group_size(env, ck):
    rewrite_case(env, ck, False)


def group_samesize(env, ck):
    rewrite_case(env, ck, True)


GROUPS = {'size': (group_size, 240), 'samesize': (group_samesize, 240),
          'gen': (group_gen, 240)}

if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, prefix='remote-noetag-')
