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
          flip.tar and its members read back exactly (its size is its version); the log's line
          says so, once; etag_unusable is 1.

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import threading  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import net  # noqa: E402

log = ml.log
NAMES = ['fixed', 'flip']
# the HEADs in a row that must each answer a new ETag (FS_ETAG_PROBES, fs/core/fs_ns_obj.c)
PROBES = 3


class Flip(net.LoopbackServer):
    """A server on 127.0.0.1: /d/NAME.tar for NAME in objects; flip.tar's ETag is new at every
    answer. requests[(method, NAME)] counts what it was asked."""

    def __init__(self, objects):
        self.objects = objects
        self.requests = {}
        self.flips = 0
        self.head_etag = None  # the last ETag flip.tar's HEAD answered
        self.lock = threading.Lock()
        outer = self

        class H(net.ObjectHandler):
            def serve(self, head):
                m = re.match(r'/d/(\w+)\.tar$', self.path.split('?')[0])
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
                hdr = [('ETag', etag), ('Last-Modified', 'Tue, 14 Nov 2023 22:13:20 GMT')]
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
        line += ('so --weak-etag trust takes its size as its version' if trust else
                 'so its bytes cannot be checked and reads of it fail with EPROTO; mount with '
                 '--weak-etag trust to take its size as its version')
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


GROUPS = {'check': (group_check, 240), 'trust': (group_trust, 240)}

if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, prefix='remote-etag-flip-')
