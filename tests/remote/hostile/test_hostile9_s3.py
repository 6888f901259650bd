#!/usr/bin/python3
"""Remote tests: a hostile newcomer's pass (round 9) over an S3 stand-in, each finding replayed.

usage: test_hostile9_s3.py SHARDFS GROUP
GROUP:
  region    a Python stdlib S3 stand-in on 127.0.0.1 (a free port) whose listing refuses the
            request for its region, as stores do: AWS's 400 AuthorizationHeaderMalformed with a
            <Region>, a 403 whose message only says "expecting 'R'", a 400 that says the region
            is wrong but not which. Each mount (signed, AWS_REGION us-east-1) fails, exit 1, its
            last stderr line exactly naming the cause (the region the store asked for, when it
            says one, and AWS_REGION) and no line saying "access denied"; a 403 AccessDenied
            whose <Region> is the one signed for still says "access denied". Before the mend the
            403 case began "access denied (check the credentials in the environment)" and the
            400 ones "Input/output error".
  longkeys  the stand-in's listing holds keys longer than the 4096 bytes a key may have (two),
            and entries without a size or with one that is not a number (two), beside keys that
            are shown: the root shows exactly those, a member reads exactly, and the log says
            once per listing how many keys were too long (with the first's start) and how many
            entries could not be read. Before the mend they were dropped without a word.
  redirect  the stand-in answers for another region as S3 does, naming it only in its
            x-amz-bucket-region header: the listing's 301 PermanentRedirect (the mount fails,
            exit 1, its last line exactly naming the bucket's region and AWS_REGION) and an
            object's GET 301 (the read fails with EIO, the log says exactly the bucket's region
            and AWS_REGION, never "HTTP 301 without a Location", the words before the mend). An
            S3 mount lists its sizes: no HEAD of it reaches the stand-in here (a HEAD's 400 or
            403 with the header takes the same path, backend_s3.c's os_failed).

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import os  # noqa: E402
from xml.sax.saxutils import escape  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import net  # noqa: E402

log = ml.log
SHARD = ml.tar_bytes([('m.txt', b'hello\n')], 'gnu')


class StandIn(net.LoopbackServer):
    """An S3 stand-in on 127.0.0.1 (net.ObjectHandler): bucket 'bkt'. self.refusal (status,
    body) answers every listing when set; else the listing holds self.entries (raw <Contents>
    XML) and every object is SHARD. self.redirect (region, listing, objects), when set,
    answers as S3 does for a bucket in that region: the listing (when listing) with a 301
    PermanentRedirect, an object (when objects) a GET with it and a HEAD with a 400 without a
    body, each naming the region in x-amz-bucket-region only."""

    def __init__(self):
        self.refusal = None
        self.redirect = None
        self.entries = []
        self.lists = 0
        outer = self

        class H(net.ObjectHandler):
            def reply_xml(self, code, body):
                self.answer(code, [('Content-Type', 'application/xml'),
                                   ('Content-Length', str(len(body)))], body)

            def moved(self, head):
                region = outer.redirect[0]
                if head:
                    return self.answer(400, [('x-amz-bucket-region', region),
                                             ('Content-Length', '0')])
                body = error_xml('PermanentRedirect', 'The bucket you are attempting to access '
                                 'must be addressed using the specified endpoint.',
                                 '<Endpoint>bkt.s3.%s.amazonaws.com</Endpoint><Bucket>bkt'
                                 '</Bucket>' % region).encode()
                self.answer(301, [('x-amz-bucket-region', region),
                                  ('Content-Type', 'application/xml'),
                                  ('Content-Length', str(len(body)))], body)

            def serve(self, head):
                path = self.path.split('?')[0]
                listing = path in ('/bkt', '/bkt/') and 'list-type' in self.path
                if outer.redirect and outer.redirect[1 if listing else 2]:
                    return self.moved(head)
                if not head and listing:
                    outer.lists += 1
                    if outer.refusal:
                        return self.reply_xml(outer.refusal[0], outer.refusal[1].encode())
                    return self.reply_xml(200, (
                        '<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult><Name>bkt'
                        '</Name><IsTruncated>false</IsTruncated>%s</ListBucketResult>'
                        % ''.join(outer.entries)).encode())
                if head:
                    return self.answer(200, [('ETag', '"k1"'),
                                             ('Content-Length', str(len(SHARD)))])
                if self.span(len(SHARD)):
                    body, hdr = self.part(SHARD)
                    return self.answer(206, [('ETag', '"k1"')] + hdr +
                                       [('Content-Length', str(len(body)))], body)
                return self.answer(200, [('ETag', '"k1"'), ('Content-Length', str(len(SHARD)))],
                                   SHARD)

        self.serve(H)

    def endpoint(self):
        return 'http://127.0.0.1:%d' % self.port

    def close(self):
        self.stop()


def contents(key, size=str(len(SHARD))):
    return ('<Contents><Key>%s</Key><LastModified>2023-11-14T22:13:20.000Z</LastModified>'
            '<ETag>"k1"</ETag>%s</Contents>'
            % (escape(key), '' if size is None else '<Size>%s</Size>' % size))


def error_xml(code, msg, extra=''):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message>'
            '%s<RequestId>R1</RequestId></Error>' % (code, msg, extra))


def set_env(env, signed):
    for k in ('AWS_ENDPOINT_URL', 'AWS_ENDPOINT_URL_S3', 'AWS_PROFILE', 'AWS_DEFAULT_REGION',
              'AWS_SESSION_TOKEN', 'AWS_SHARED_CREDENTIALS_FILE', 'AWS_CONFIG_FILE'):
        env.env.pop(k, None)
    env.env['AWS_EC2_METADATA_DISABLED'] = 'true'
    env.env['AWS_REGION'] = 'us-east-1'
    if signed:
        env.env['AWS_ACCESS_KEY_ID'] = 'AKIDHOSTILE9'
        env.env['AWS_SECRET_ACCESS_KEY'] = 'hostile9-secret'


def group_region(env, ck):
    srv = StandIn()
    set_env(env, True)
    src = 's3://bkt/'
    head = 'shardfs: cannot list s3://bkt/: '
    named = ("the bucket is in another region: s3://bkt/: the bucket is in region '%s', and the "
             "requests were signed for region 'us-east-1' (AWS_REGION, else AWS_DEFAULT_REGION, "
             "else us-east-1): set AWS_REGION=%s (HTTP %d %s: %s)")
    aws_msg = ("The authorization header is malformed; the region 'us-east-1' is wrong; "
               "expecting 'us-west-2'")
    cases = [
        ('aws 400', 400, error_xml('AuthorizationHeaderMalformed', aws_msg,
                                   '<Region>us-west-2</Region>'),
         head + named % ('us-west-2', 'us-west-2', 400, 'AuthorizationHeaderMalformed',
                         aws_msg)),
        ('stand-in 403', 403, error_xml('AuthorizationHeaderMalformed',
                                        "the region 'us-east-1' is wrong; expecting 'eu-west-3'"),
         head + named % ('eu-west-3', 'eu-west-3', 403, 'AuthorizationHeaderMalformed',
                         "the region 'us-east-1' is wrong; expecting 'eu-west-3'")),
        ('unnamed 400', 400, error_xml('AuthorizationHeaderMalformed',
                                       "the region 'us-east-1' is wrong"),
         head + "the bucket is in another region: s3://bkt/: the bucket is in another region "
         "than 'us-east-1', the one the requests were signed for (AWS_REGION, else "
         "AWS_DEFAULT_REGION, else us-east-1), and the store does not say which: set AWS_REGION "
         "to the bucket's (HTTP 400 AuthorizationHeaderMalformed: the region 'us-east-1' is "
         "wrong)"),
        ('access denied, same region', 403, error_xml('AccessDenied', 'Access Denied',
                                                      '<Region>us-east-1</Region>'),
         head + 'access denied (check the credentials in the environment): s3://bkt/: access '
         'denied (HTTP 403 AccessDenied: Access Denied)'),
    ]
    try:
        for label, status, body, want in cases:
            srv.refusal = (status, body)
            mnt = env.path('mnt-%s' % label.replace(' ', '-').replace(',', ''))
            os.makedirs(mnt)
            lists = srv.lists
            r = env.run([env.shardfs, 'mount', '--cache-dir', env.path('cache'), '--endpoint',
                         srv.endpoint(), src, mnt], timeout=ml.MOUNT_TIMEOUT, files=True)
            err = r.stderr.decode(errors='replace')
            log('%s: rc=%r %s' % (label, r.returncode, err.strip()))
            ck.eq('%s: exit' % label, r.returncode, 1)
            lines = err.splitlines()
            ck.eq('%s: the last line' % label, lines[-1] if lines else '', want)
            if status != 403 or 'AccessDenied' not in body:
                ck.eq('%s: lines saying access denied' % label,
                      [ln for ln in lines if 'access denied' in ln.lower()], [])
            ck.eq('%s: listings asked (no retry of a refusal)' % label, srv.lists - lists, 1)
            ck.eq('%s: mounted' % label, ml.is_mounted(mnt), False)
    finally:
        srv.close()


def group_longkeys(env, ck):
    srv = StandIn()
    set_env(env, False)
    shown = ['good.tar', 'd/' + 'k' * 1500 + '.tar', 'e' * 250 + '/' + 'f' * 250 + '/x.tar']
    long1 = 'h' * 5000 + '.tar'
    long2 = 'd/' + 'j' * 4100 + '.tar'
    srv.entries = ([contents(shown[0]), contents(long1), contents('nosize.tar', None)] +
                   [contents(k) for k in shown[1:]] +
                   [contents(long2), contents('badsize.tar', '12x')])
    try:
        with ml.Mount(env, 's3://bkt/', cache_dir=env.path('cache'),
                      extra=['--endpoint', srv.endpoint(), '--no-sign']) as m:
            got = sorted(set(os.listdir(m.mnt)) - {'.shardfs'})
            ck.eq('longkeys: the root', got, sorted(['good', 'good.tar', 'd', 'e' * 250]))
            ck.eq('longkeys: d/', sorted(os.listdir(os.path.join(m.mnt, 'd'))),
                  sorted(['k' * 1500, 'k' * 1500 + '.tar']))
            with open(os.path.join(m.mnt, 'd', 'k' * 1500, 'm.txt'), 'rb') as f:
                ck.eq('longkeys: the 1506-byte key\'s member', f.read(), b'hello\n')
            with open(os.path.join(m.mnt, 'e' * 250, 'f' * 250, 'x', 'm.txt'), 'rb') as f:
                ck.eq('longkeys: the nested key\'s member', f.read(), b'hello\n')
        text = ml.logs_under(env.path('cache'))
        line = ("s3://bkt/: 2 keys of the listing not shown: longer than 4096 bytes (the first "
                "begins '%s...')" % ('h' * 63))
        ck.eq('longkeys: the too-long line, times', text.count(line), 1)
        line = ("s3://bkt/: 2 entries of the listing not shown: without a key, with a key that "
                "cannot be decoded, or without a size that is a number")
        ck.eq('longkeys: the unread line, times', text.count(line), 1)
        ck.eq('longkeys: lines about keys not shown', text.count('of the listing not shown'), 2)
    finally:
        srv.close()


def group_redirect(env, ck):
    srv = StandIn()
    set_env(env, True)
    src = 's3://bkt/'
    region = ("the bucket is in region 'eu-west-1', and the requests were signed for region "
              "'us-east-1' (AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1): set "
              "AWS_REGION=eu-west-1 (HTTP %s)")
    try:
        # the listing answered 301 PermanentRedirect, the region in its header only
        srv.redirect = ('eu-west-1', True, False)
        mnt = env.path('mnt-list')
        os.makedirs(mnt)
        r = env.run([env.shardfs, 'mount', '--cache-dir', env.path('cache-list'), '--endpoint',
                     srv.endpoint(), src, mnt], timeout=ml.MOUNT_TIMEOUT, files=True)
        err = r.stderr.decode(errors='replace')
        log('listing 301: rc=%r %s' % (r.returncode, err.strip()))
        ck.eq('listing 301: exit', r.returncode, 1)
        lines = err.splitlines()
        ck.eq('listing 301: the last line', lines[-1] if lines else '',
              'shardfs: cannot list s3://bkt/: the bucket is in another region: s3://bkt/: ' +
              region % '301')
        ck.eq('listing 301: mounted', ml.is_mounted(mnt), False)
        # the listing answers; the object's GETs 301 and HEADs 400, the region in the header
        srv.redirect = ('eu-west-1', False, True)
        srv.entries = [contents('good.tar')]
        with ml.Mount(env, src, cache_dir=env.path('cache-get'),
                      extra=['--endpoint', srv.endpoint()]) as m:
            ck.eq('GET 301: good/m.txt', ml.read_result(os.path.join(m.mnt, 'good', 'm.txt')),
                  ('err', errno.EIO))
        text = ml.logs_under(env.path('cache-get'))
        want = 's3://bkt/: GET good.tar: ' + region % '301'
        ck.ok(want in text, 'GET 301: %r not in the log:\n%s' % (want, text))
        ck.eq('GET 301: lines saying HTTP 301 without a Location',
              text.count('without a Location'), 0)
    finally:
        srv.close()


GROUPS = {'region': (group_region, 120), 'longkeys': (group_longkeys, 120),
          'redirect': (group_redirect, 120)}

if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, prefix='remote-hostile9-')
