#!/usr/bin/python3
"""Remote tests: a hostile newcomer's pass (round 8), servers that lie, each finding replayed.

usage: test_hostile8_liar.py SHARDFS GROUP
GROUP:
  liar    a Python stdlib server on 127.0.0.1 (a free port), one shard per lie, mounted as the
          brace pattern http://.../d/{good,gzip,long,etag,loop}.tar: good.tar answers as it
          should; gzip.tar's ranged answers carry Content-Encoding: gzip (the range's bytes
          gzipped); long.tar's say a Content-Length 100 bytes past their Content-Range and
          close; etag.tar's ETag changes with every request; loop.tar redirects to
          loop2.tar, which redirects back, for ever. good.tar and its members read exactly;
          gzip.tar and long.tar give EIO, etag.tar ESTALE, loop.tar's stat EIO; the log names
          each cause (the encoding, the lengths, the ETags, the redirect loop). Then a server
          whose every answer is not HTTP at all (a line of text, no status line): the mount
          fails, exit 1, saying the answer is not HTTP and naming the host, not "not a valid
          source (see 'shardfs --help')". Before the mend the loop's only line was "1 of 5
          objects' sizes not learned: Input/output error" (the log never said redirect), and
          the text server's mount said "not a valid source ... Unsupported protocol".

  s3keys  a stand-in S3 (ListObjectsV2 over the same server, --no-sign) whose listing holds keys
          that cannot be paths (a/../x, ../x, /x, a//x, ./x, d/./x, '..', '.', d/..) beside keys
          that can, odd as they are (a newline, a tab, a backslash, a control byte, '%2F', '?',
          '#', a trailing blank, a 300-byte name, '.shardfs/stats'): the root shows exactly
          the second kind (and '.shardfs' stays the control directory), a member reads
          exactly, and the log says once how many keys were not shown and the first, escaped.
          Before the mend those keys were dropped without a word.

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import gzip  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
from xml.sax.saxutils import escape  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import net  # noqa: E402

log = ml.log
LIARS = ['good', 'gzip', 'long', 'etag', 'loop']


class Liar(net.LoopbackServer):
    """A server on 127.0.0.1: /d/NAME.tar for NAME in LIARS (objects[NAME] its bytes), each
    lying as its name says; /x/ answers with text that is not HTTP."""

    def __init__(self, objects):
        self.objects = objects
        self.requests = 0
        self.s3_keys = []
        self.s3_shard = b''
        outer = self

        class H(net.ObjectHandler):
            def s3_listing(self):
                items = ''.join(
                    '<Contents><Key>%s</Key><LastModified>2023-11-14T22:13:20.000Z'
                    '</LastModified><ETag>"k1"</ETag><Size>%d</Size></Contents>'
                    % (escape(k).replace('\x01', '&#x1;'), len(outer.s3_shard))
                    for k in outer.s3_keys)
                body = ('<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns='
                        '"http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name><Prefix>'
                        '</Prefix><KeyCount>%d</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>'
                        'false</IsTruncated>%s</ListBucketResult>'
                        % (len(outer.s3_keys), items)).encode()
                self.answer(200, [('Content-Type', 'application/xml'),
                                  ('Content-Length', str(len(body)))], body)

            def serve(self, head):
                outer.requests += 1
                n = outer.requests
                path = self.path.split('?')[0]
                if path.startswith('/x/'):
                    # no status line: a line of text, then the connection closes
                    self.close_connection = True
                    self.wfile.write(b'hello, this is not a web server\r\n')
                    return
                if path in ('/bkt', '/bkt/') and 'list-type' in self.path:
                    return self.s3_listing()
                if path.startswith('/bkt/'):
                    return self.answer(200, [('Content-Length', str(len(outer.s3_shard))),
                                             ('ETag', '"k1"')],
                                       b'' if head else outer.s3_shard)
                m = re.match(r'/d/(\w+)\.tar$', path)
                name = m.group(1) if m else ''
                if name in ('loop', 'loop2'):
                    other = '/d/loop2.tar' if name == 'loop' else '/d/loop.tar'
                    return self.answer(302, [('Location', other), ('Content-Length', '0')])
                if name not in outer.objects:
                    return self.answer(404, [('Content-Length', '0')])
                data = outer.objects[name]
                etag = '"e%d"' % n if name == 'etag' else '"e1"'
                if head:
                    return self.answer(200, [('Content-Length', str(len(data))), ('ETag', etag),
                                             ('Last-Modified', 'Tue, 14 Nov 2023 22:13:20 GMT')])
                body, hdr = self.part(data)
                hdr.append(('ETag', etag))
                if name == 'gzip':
                    body = gzip.compress(body, mtime=0)
                    hdr.append(('Content-Encoding', 'gzip'))
                if name == 'long':
                    self.close_connection = True
                    hdr += [('Content-Length', str(len(body) + 100)), ('Connection', 'close')]
                else:
                    hdr.append(('Content-Length', str(len(body))))
                self.answer(206, hdr, body)

        self.serve(H)


def stat_errno(path):
    try:
        os.stat(path)
        return 0
    except OSError as e:
        return e.errno


def group_liar(env, ck):
    rng = env.rng
    members = {n: [('m%d.bin' % i, bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 5000))))
                   for i in range(3)] for n in LIARS}
    objects = {n: ml.tar_bytes(members[n], 'gnu') for n in LIARS if n != 'loop'}
    srv = Liar(objects)
    try:
        source = srv.url('d/{%s}.tar' % ','.join(LIARS))
        with ml.Mount(env, source, cache_dir=env.path('cache')) as m:
            ck.eq('good.tar', ml.read_result(os.path.join(m.mnt, 'good.tar')), ('ok', objects['good']))
            for name, data in members['good']:
                ck.eq('good/%s' % name, ml.read_result(os.path.join(m.mnt, 'good', name)), ('ok', data))
            ck.eq('gzip.tar', ml.read_result(os.path.join(m.mnt, 'gzip.tar')), ('err', errno.EIO))
            ck.eq('long.tar', ml.read_result(os.path.join(m.mnt, 'long.tar')), ('err', errno.EIO))
            ck.eq('etag.tar', ml.read_result(os.path.join(m.mnt, 'etag.tar')), ('err', errno.ESTALE))
            ck.eq('loop.tar stat', stat_errno(os.path.join(m.mnt, 'loop.tar')), errno.EIO)
        text = ml.logs_under(env.path('cache'))
        host = '127.0.0.1:%d' % srv.port
        want = [
            ('gzip', 'gzip.tar: HTTP 206: Content-Encoding: gzip: not the object\'s bytes as '
             'stored'),
            ('long', 'long.tar: HTTP 206: Content-Length %d is longer than its Content-Range'
             % (len(objects['long']) + 100)),
            ('etag', 'etag.tar: HTTP 206: ETag "e'),
            ('loop', 'sizes not learned: Input/output error: HEAD http://%s/d/loop.tar: HTTP 302: '
             'more than 5 redirects in a row (a loop?), the last to http://%s/d/loop'
             % (host, host)),
        ]
        for label, line in want:
            ck.ok(line in text, 'log: the %s cause %r not in the log' % (label, line))
        log('liar: %d requests served' % srv.requests)

        # a server that does not speak HTTP: the mount fails and says so
        mnt = env.path('mnt-text')
        os.makedirs(mnt)
        r = env.run([env.shardfs, 'mount', '--cache-dir', env.path('cache-text'),
                     srv.url('x/s-{0..1}.tar'), mnt], timeout=120)
        err = r.stderr.decode(errors='replace')
        log('text server: rc=%r: %s' % (r.returncode, err.strip()))
        ck.eq('text server: mount exit', r.returncode, 1)
        ck.ok('not a valid source' not in err, 'text server: "not a valid source" in %r' % err)
        # curl's own words follow (7.88: "Received HTTP/0.9 when not allowed")
        ck.ok(re.search(r'GET http://%s/x/s-0\.tar: not an HTTP answer from 127\.0\.0\.1: \S'
                        % re.escape(host), err),
              'text server: no "not an HTTP answer" in %r' % err)
        ck.ok(not ml.is_mounted(mnt), 'text server: mounted')
    finally:
        srv.stop()


UNPATHED = ['a/../esc.tar', '../up.tar', '/abs.tar', 'a//dbl.tar', './dot.tar', 'd/./x.tar', '..',
            '.', 'd/..']
SHOWN = ['good.tar', 'nl\nname.tar', 'tab\tname.tar', 'bs\\name.tar', 'ctl\x01.tar',
         'pct%2Fname.tar', 'q?x.tar', 'h#x.tar', 'sp .tar', 'L/' + 'x' * 300 + '.tar',
         '.shardfs/stats']


def group_s3keys(env, ck):
    srv = Liar({})
    srv.s3_shard = ml.tar_bytes([('m.txt', b'hello\n')], 'gnu')
    keys = list(UNPATHED[:1]) + SHOWN + UNPATHED[1:]
    srv.s3_keys = keys
    for k in ('AWS_ENDPOINT_URL', 'AWS_ENDPOINT_URL_S3', 'AWS_PROFILE'):
        env.env.pop(k, None)
    env.env['AWS_EC2_METADATA_DISABLED'] = 'true'
    env.env['AWS_REGION'] = 'us-east-1'
    try:
        with ml.Mount(env, 's3://bkt/', cache_dir=env.path('cache'),
                      extra=['--endpoint', srv.url('').rstrip('/'), '--no-sign']) as m:
            want = set()
            for k in SHOWN:
                top = k.split('/')[0]
                if top == '.shardfs':
                    continue
                want.add(top)
                if '/' not in k:
                    want.add(k[:-len('.tar')])
            got = set(os.listdir(m.mnt)) - {'.shardfs'}
            ck.eq('s3keys: the root', sorted(got), sorted(want))
            ck.eq('s3keys: good/m.txt', ml.read_result(os.path.join(m.mnt, 'good', 'm.txt')),
                  ('ok', b'hello\n'))
            ck.eq('s3keys: nl\\nname/m.txt', ml.read_result(os.path.join(m.mnt, 'nl\nname', 'm.txt')),
                  ('ok', b'hello\n'))
            ck.ok(os.path.isfile(os.path.join(m.mnt, '.shardfs', 'stats')) and
                  b'objects' in ml.read_all(os.path.join(m.mnt, '.shardfs', 'stats')),
                  's3keys: .shardfs/stats is not the mount\'s')
        text = ml.logs_under(env.path('cache'))
        line = ("s3://bkt/: %d keys of the listing not shown: not a path (an empty, '.' or '..' "
                "component, or a leading '/'; the first: 'a/../esc.tar')" % len(UNPATHED))
        ck.eq('s3keys: the log line, times', text.count(line), 1)
        ck.eq('s3keys: lines about keys not shown', text.count('of the listing not shown'), 1)
    finally:
        srv.stop()


GROUPS = {'liar': (group_liar, 240), 's3keys': (group_s3keys, 240)}

if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, prefix='remote-hostile8-')
