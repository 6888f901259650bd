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

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import gzip  # noqa: E402
import os  # noqa: E402
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
    Last-Modified (epoch seconds); no ETag anywhere."""

    def __init__(self, objects):
        self.objects = objects
        self.mtimes = {n: 1700000000 for n in objects}
        self.lock = threading.Lock()
        outer = self

        class H(net.ObjectHandler):
            def listing(self):
                items = ''
                with outer.lock:
                    for name in sorted(outer.objects):
                        items += ('<Contents><Key>%s</Key><LastModified>%s</LastModified>'
                                  '<Size>%d</Size></Contents>' % (
                                      name, time.strftime('%Y-%m-%dT%H:%M:%S.000Z',
                                                          time.gmtime(outer.mtimes[name])),
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
                if data is None:
                    return self.answer(404, [('Content-Length', '0')])
                hdr = [('Last-Modified', formatdate(mtime, usegmt=True))]
                if head:
                    return self.answer(200, hdr + [('Content-Length', str(len(data)))])
                body, cr = self.part(data)
                self.answer(206, hdr + cr + [('Content-Length', str(len(body)))], body)

        self.serve(H)

    def put(self, name, data):
        with self.lock:
            self.objects[name] = data
            self.mtimes[name] += 100


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


def group_size(env, ck):
    rewrite_case(env, ck, False)


def group_samesize(env, ck):
    rewrite_case(env, ck, True)


GROUPS = {'size': (group_size, 240), 'samesize': (group_samesize, 240)}

if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, prefix='remote-noetag-')
