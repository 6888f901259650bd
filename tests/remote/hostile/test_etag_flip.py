#!/usr/bin/python3
"""Remote tests: a server whose ETag is new at every answer, for an object that never changes.

usage: test_etag_flip.py SHARDFS GROUP
GROUP:
  check   a Python stdlib server on 127.0.0.1 (a free port) serving /d/fixed.tar (ETag "s1" at
          every answer) and /d/flip.tar (ETag "fN", N its answer's number: HEAD or GET, the same
          size and Last-Modified), mounted as http://.../d/{fixed,flip}.tar with the default
          --weak-etag check. The first read of flip.tar gives ESTALE (its GET answers another
          ETag than the HEAD's); the next lookup asks 3 HEADs, each with a new ETag at the same
          size and Last-Modified, and from then every read of flip.tar and its members fails with
          EPROTO without a request; the log says it once, naming the object and --weak-etag
          trust; etag_unusable is 1; the server saw exactly 5 requests for flip.tar (1 HEAD, 1
          GET, 3 HEADs), whatever is read after. fixed.tar and its members read exactly
          throughout. Before the mend: every read ESTALE, a HEAD and a GET more each time, for
          ever.
  trust   the same with --weak-etag trust: after the first read's ESTALE and the 3 HEADs,
          flip.tar and its members read back exactly (its size and Last-Modified are its
          version); the log's line says so, once; etag_unusable is 1.

  listing-check, listing-trust
          the same objects as a stand-in S3 bucket (ListObjectsV2 on the same server, --no-sign)
          whose listing gives flip.tar a new ETag at each listing too: once flip.tar is found
          unusable (ESTALE, 3 HEADs), a `shardfs refresh` says "0 changed" and flip.tar reads
          as before (trust: exactly, from the cache; check: EPROTO) without a request. check:
          then flip.tar is rewritten (another size and Last-Modified) and a refresh says "1
          changed": the new version has the new size and is as unusable (EPROTO, no request, no
          HEADs to find it again). etag_unusable stays 1, the log's line is said once. Before
          the mend: each refresh made a new version (1 changed) whose next read gave ESTALE and
          3 HEADs, and counted the object again.

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from email.utils import formatdate  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import net  # noqa: E402

log = ml.log
NAMES = ['fixed', 'flip']
# the HEADs in a row that must each answer a new ETag (FS_ETAG_PROBES, fs/core/fs_ns_obj.c)
PROBES = 3


class Flip(net.LoopbackServer):
    """A server on 127.0.0.1: /d/NAME.tar for NAME in objects, and the same as the S3 bucket
    bkt (/bkt?list-type=2 lists them, /bkt/NAME.tar); flip.tar's ETag is new at every answer
    and at every listing. mtimes[NAME] is its Last-Modified (epoch seconds).
    requests[(method, NAME)] counts what it was asked (a listing: NAME '')."""

    def __init__(self, objects):
        self.objects = objects
        self.mtimes = {n: 1700000000 for n in objects}
        self.requests = {}
        self.flips = 0
        self.head_etag = None  # the last ETag flip.tar's HEAD answered
        self.lock = threading.Lock()
        outer = self

        class H(net.ObjectHandler):
            def listing(self):
                items = ''
                for name in sorted(outer.objects):
                    with outer.lock:
                        outer.flips += name == 'flip'
                        etag = '"l%d"' % outer.flips if name == 'flip' else '"s1"'
                    items += ('<Contents><Key>%s.tar</Key><LastModified>%s</LastModified>'
                              '<ETag>%s</ETag><Size>%d</Size></Contents>' % (
                                  name, time.strftime('%Y-%m-%dT%H:%M:%S.000Z',
                                                      time.gmtime(outer.mtimes[name])),
                                  etag, len(outer.objects[name])))
                body = ('<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns='
                        '"http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name><Prefix>'
                        '</Prefix><KeyCount>%d</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>'
                        'false</IsTruncated>%s</ListBucketResult>'
                        % (len(outer.objects), items))
                self.reply(200, body, 'application/xml')

            def serve(self, head):
                path = self.path.split('?')[0]
                if path in ('/bkt', '/bkt/') and 'list-type' in self.path:
                    with outer.lock:
                        outer.requests[('LIST', '')] = outer.requests.get(('LIST', ''), 0) + 1
                    return self.listing()
                m = re.match(r'/(?:d|bkt)/(\w+)\.tar$', path)
                name = m.group(1) if m else ''
                with outer.lock:
                    k = ('HEAD' if head else 'GET', name)
                    outer.requests[k] = outer.requests.get(k, 0) + 1
                    if name == 'flip':
                        outer.flips += 1
                        etag = '"f%d"' % outer.flips
                        if head:
                            outer.head_etag = etag
                    else:
                        etag = '"s1"'
                if name not in outer.objects:
                    return self.answer(404, [('Content-Length', '0')])
                data = outer.objects[name]
                hdr = [('ETag', etag),
                       ('Last-Modified', formatdate(outer.mtimes[name], usegmt=True))]
                if head:
                    return self.answer(200, hdr + [('Content-Length', str(len(data)))])
                body, cr = self.part(data)
                self.answer(206, hdr + cr + [('Content-Length', str(len(body)))], body)

        self.serve(H)

    def count(self, name):
        with self.lock:
            return {m: n for (m, nm), n in sorted(self.requests.items()) if nm == name}


def run(env, ck, trust):
    rng = env.rng
    members = {n: [('m%d.bin' % i, bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 5000))))
                   for i in range(3)] for n in NAMES}
    objects = {n: ml.tar_bytes(members[n], 'gnu') for n in NAMES}
    srv = Flip(objects)
    tag = 'trust' if trust else 'check'
    # no warm fill nor shard prefetch: every request to the server is a read's
    extra = ['--warm', 'off', '--prefetch-shards', '0']
    extra += ['--weak-etag', 'trust'] if trust else []
    try:
        with ml.Mount(env, srv.url('d/{%s}.tar' % ','.join(NAMES)), cache_dir=env.path('cache'),
                      extra=extra) as m:
            def fixed_exact(when):
                ck.eq('%s: fixed.tar' % when, ml.read_result(os.path.join(m.mnt, 'fixed.tar')),
                      ('ok', objects['fixed']))
                for name, data in members['fixed']:
                    ck.eq('%s: fixed/%s' % (when, name),
                          ml.read_result(os.path.join(m.mnt, 'fixed', name)), ('ok', data))

            flip = os.path.join(m.mnt, 'flip.tar')
            fixed_exact('before')
            # the HEAD learns "f1"; the GET answers "f2": the object changed, as far as a
            # read can tell
            ck.eq('first read of flip.tar', ml.read_result(flip), ('err', errno.ESTALE))
            ck.eq('requests after the first read', srv.count('flip'), {'GET': 1, 'HEAD': 1})
            # the kernel may open the old version's inode again until the daemon's
            # invalidation of it is through (ESTALE, no request); then the next lookup asks
            # PROBES HEADs, each answering a new ETag at the same size
            got = ml.poll(lambda: (lambda r: r != ('err', errno.ESTALE) and r)(ml.read_result(flip)))
            got = got or ('err', errno.ESTALE)
            if trust:
                ck.eq('flip.tar, trusted', got, ('ok', objects['flip']))
                for name, data in members['flip']:
                    ck.eq('flip/%s, trusted' % name,
                          ml.read_result(os.path.join(m.mnt, 'flip', name)), ('ok', data))
                ck.eq('flip.tar again, trusted', ml.read_result(flip), ('ok', objects['flip']))
            else:
                ck.eq('flip.tar, read after', got, ('err', errno.EPROTO))
                for k in range(3):
                    ck.eq('flip.tar, read %d after' % (k + 2), ml.read_result(flip),
                          ('err', errno.EPROTO))
                for name, _ in members['flip']:
                    ck.eq('flip/%s' % name, ml.read_result(os.path.join(m.mnt, 'flip', name)),
                          ('err', errno.EPROTO))
                # no request after the HEADs: the loop is stopped
                ck.eq('requests, all', srv.count('flip'), {'GET': 1, 'HEAD': 1 + PROBES})
            fixed_exact('after')
            st = m.stats()
            ck.eq('etag_unusable', st.get('etag_unusable'), 1)
            ck.eq('changes_noticed', st.get('changes_noticed'), 1)
            got = srv.count('flip')
            log('%s: flip.tar requests %r, fixed.tar %r' % (tag, got, srv.count('fixed')))
            if trust:
                ck.eq('requests, trusted', got, {'GET': 2, 'HEAD': 1 + PROBES})
            ck.eq('fixed.tar HEADs', srv.count('fixed').get('HEAD'), 1)
        text = ml.logs_under(env.path('cache'))
        line = ('flip.tar: the server answered %d requests in a row with a new ETag (the last '
                '%s) at the same size (%d bytes) and Last-Modified: its ETag cannot tell one '
                'version of the object from another, ' % (PROBES, srv.head_etag,
                                                          len(objects['flip'])))
        line += ('so --weak-etag trust takes its size and Last-Modified as its version'
                 if trust else
                 'so its bytes cannot be checked and reads of it fail with EPROTO; mount with '
                 '--weak-etag trust to take its size and Last-Modified as its version')
        line += ' (objects found so are counted in etag_unusable)'
        ck.eq('the log line, times', text.count(line), 1)
        ck.eq('lines saying an ETag cannot tell a version', text.count('cannot tell one version'),
              1)
        ck.eq('ESTALE lines for flip.tar',
              len(re.findall(r'flip\.tar changed under the mount', text)), 1)
    finally:
        srv.stop()


def group_check(env, ck):
    run(env, ck, False)


def group_trust(env, ck):
    run(env, ck, True)


def listing(env, ck, trust):
    rng = env.rng
    members = {n: [('m%d.bin' % i, bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 5000))))
                   for i in range(3)] for n in NAMES}
    objects = {n: ml.tar_bytes(members[n], 'gnu') for n in NAMES}
    srv = Flip(objects)
    for k in ('AWS_ENDPOINT_URL', 'AWS_ENDPOINT_URL_S3', 'AWS_PROFILE'):
        env.env.pop(k, None)
    env.env['AWS_EC2_METADATA_DISABLED'] = 'true'
    env.env['AWS_REGION'] = 'us-east-1'
    extra = ['--endpoint', srv.url('').rstrip('/'), '--no-sign', '--warm', 'off',
             '--prefetch-shards', '0'] + (['--weak-etag', 'trust'] if trust else [])
    # what every read of flip.tar gives once it is found: its bytes (trust) or EPROTO
    want = ('ok', objects['flip']) if trust else ('err', errno.EPROTO)

    def refresh(m, label, summary):
        r = env.run([env.shardfs, 'refresh', m.mnt])
        out = r.stdout.decode(errors='replace')
        log('%s: shardfs refresh -> rc=%r %r' % (label, r.returncode, out))
        ck.eq('%s: refresh exit' % label, r.returncode, 0)
        ck.ok(summary in out, '%s: refresh says %r: %r' % (label, summary, out))

    try:
        with ml.Mount(env, 's3://bkt/', cache_dir=env.path('cache'), extra=extra) as m:
            flip = os.path.join(m.mnt, 'flip.tar')
            ck.eq('first read of flip.tar', ml.read_result(flip), ('err', errno.ESTALE))
            got = ml.poll(lambda: (lambda r: r != ('err', errno.ESTALE) and r)(ml.read_result(flip)))
            ck.eq('flip.tar, found', got or ('err', errno.ESTALE), want)
            found = srv.count('flip')
            ck.eq('requests once found', found, {'GET': 1 + trust, 'HEAD': PROBES})
            # the listing's new ETag is no change: the same version (its bytes in the cache,
            # or EPROTO), no request
            refresh(m, 'same bytes', ': 0 new, 0 removed, 0 changed')
            ck.eq('flip.tar after the refresh', ml.read_result(flip), want)
            ck.eq('flip/m0.bin after the refresh', ml.read_result(os.path.join(m.mnt, 'flip',
                                                                                 'm0.bin')),
                  ('ok', members['flip'][0][1]) if trust else ('err', errno.EPROTO))
            ck.eq('requests after the refresh', srv.count('flip'), found)
            if not trust:
                # a real change (another size and Last-Modified): one change, and the new
                # version is as unusable (EPROTO, no request, no HEADs to find it again)
                objects['flip'] = ml.tar_bytes([('n.bin', bytes(30000))], 'gnu')
                srv.mtimes['flip'] += 100
                refresh(m, 'rewritten', ': 0 new, 0 removed, 1 changed')
                got = ml.poll(lambda: (lambda r: r != ('err', errno.ESTALE) and r)(
                    ml.read_result(flip)))
                ck.eq('flip.tar rewritten', got or ('err', errno.ESTALE), ('err', errno.EPROTO))
                ck.eq('flip.tar rewritten: its size', os.stat(flip).st_size, len(objects['flip']))
                ck.eq('requests after the rewrite', srv.count('flip'), found)
            st = m.stats()
            ck.eq('etag_unusable', st.get('etag_unusable'), 1)
            ck.eq('refresh_changed', st.get('refresh_changed'), 0 if trust else 1)
            ck.eq('fixed.tar', ml.read_result(os.path.join(m.mnt, 'fixed.tar')),
                  ('ok', objects['fixed']))
        text = ml.logs_under(env.path('cache'))
        ck.eq('lines saying an ETag cannot tell a version', text.count('cannot tell one version'),
              1)
    finally:
        srv.stop()


def group_listing_check(env, ck):
    listing(env, ck, False)


def group_listing_trust(env, ck):
    listing(env, ck, True)


GROUPS = {'check': (group_check, 240), 'trust': (group_trust, 240),
          'listing-check': (group_listing_check, 240),
          'listing-trust': (group_listing_trust, 240)}

if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, prefix='remote-etag-flip-')
