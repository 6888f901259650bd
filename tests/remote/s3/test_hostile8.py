#!/usr/bin/python3
"""Remote tests: a hostile newcomer's pass (round 8), each finding replayed as a test.

usage: test_hostile8.py SHARDFS GROUP
GROUP:
  creds-bad   s3rver behind the SigV4-checking proxy (s3world), credentials a user pasted
              wrongly: a key id with a space, a line break or a byte outside ASCII, a secret
              with a trailing line break, a session token with one or with a control byte (in
              the environment), a key id with a space inside it (in a credentials file), a
              gs:// HMAC secret with a CR LF, an OAuth token with a space. Each
              mount fails at once, exit 1, its message naming the variable (or the file's
              field and profile), what is wrong and where, and not one request reaches the
              store (a value sent as it is: the store refuses it, or the request cannot even
              be made). Before the mend the key id cases said "not a valid source (see
              'shardfs --help') ...: Invalid argument" and the others a 403 that named neither
              the variable nor the blank. Also the refusals found clear already: a bucket that
              does not exist, a region the store does not serve, a token the store calls
              malformed, a wrong secret: each names its cause; and a key revoked under a
              running mount: each read of what is not cached fails at once with EACCES (the
              listing stays), the log naming the store's refusal. Static keys are read once, at
              the mount: new ones in the environment or the file need a remount.

Exit: 0 pass, 1 fail, 77 skip (no s3rver outside CI; no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import os  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import s3servers  # noqa: E402
from shardfs_test import s3world  # noqa: E402

log = ml.log
BUCKET = 'shards'
PREFIX = 'data/'


def mount_refused(env, ck, w, label, source, extra, words):
    """The mount fails (s3world.expect_mount_fails: no hang, no retry loop, no mount, no
    daemon, no secret in the output) with stderr holding the exact text words; not one
    request reached the proxy when words is about a value that cannot be sent."""
    before = dict(w.proxy.stats)
    s3world.expect_mount_fails(env, ck, source, ['--endpoint', w.endpoint] + extra, label,
                               [words])
    return before, dict(w.proxy.stats)


def group_creds_bad(env, ck):
    src, files, _ = s3world.build_source(env)
    w = s3world.World(env)
    source = 's3://%s/%s' % (BUCKET, PREFIX)
    key, secret = s3world.KEY, s3world.SECRET
    try:
        w.upload(BUCKET, PREFIX, src, files)
        # the environment: (label, key id, secret, token, the exact words)
        cases = [
            ('key space', ' ' + key, secret, None,
             'AWS_ACCESS_KEY_ID has a space at byte 1 of %d' % (len(key) + 1)),
            ('key newline', key + '\n', secret, None,
             'AWS_ACCESS_KEY_ID has a line break at byte %d of %d' % (len(key) + 1,
                                                                       len(key) + 1)),
            ('key non-ascii', key[:2] + '\u00c9' + key[3:], secret, None,
             'AWS_ACCESS_KEY_ID has a byte outside ASCII at byte 3 of %d' % (len(key) + 1)),
            ('secret newline', key, secret + '\n', None,
             'AWS_SECRET_ACCESS_KEY has a line break at byte %d of %d' % (len(secret) + 1,
                                                                           len(secret) + 1)),
            ('token newline', 'TOKENKEY', secret, 'tok/en+123==\n',
             'AWS_SESSION_TOKEN has a line break at byte 13 of 13'),
            ('token control', 'TOKENKEY', secret, 'tok\x01en+123==',
             'AWS_SESSION_TOKEN has a control character at byte 4 of 12'),
        ]
        for label, k, s, t, words in cases:
            s3world.set_aws_env(env, key=k, secret=s, token=t)
            before, after = mount_refused(env, ck, w, label, source, [], words)
            ck.eq('%s: requests that reached the store' % label, after, before)
        # gs://: the HMAC keys and the OAuth token, the same rule
        gs_source = 'gs://%s/%s' % (BUCKET, PREFIX)
        for label, var, value, words in [
                ('gs hmac secret', 'GCS_HMAC_SECRET', secret + '\r\n',
                 'GCS_HMAC_SECRET has a line break at byte %d of %d' % (len(secret) + 1,
                                                                       len(secret) + 2)),
                ('gs oauth token', 'GOOGLE_OAUTH_ACCESS_TOKEN', 'ya29 token',
                 'GOOGLE_OAUTH_ACCESS_TOKEN has a space at byte 5 of 10')]:
            s3world.set_aws_env(env, key=None, secret=None)
            env.env['GCS_HMAC_ACCESS_ID'] = key
            env.env['GCS_HMAC_SECRET'] = secret
            env.env[var] = value
            before, after = mount_refused(env, ck, w, label, gs_source, [], words)
            ck.eq('%s: requests that reached the store' % label, after, before)
        for var in ('GCS_HMAC_ACCESS_ID', 'GCS_HMAC_SECRET', 'GOOGLE_OAUTH_ACCESS_TOKEN'):
            env.env.pop(var, None)
        # a credentials file: its values are trimmed at both ends; a blank inside is kept
        s3world.set_aws_env(env, key=None, secret=None)
        cred = env.path('aws-credentials')
        with open(cred, 'w') as f:
            f.write('[default]\naws_access_key_id = S3 RVER\naws_secret_access_key = %s\n'
                    % secret)
        env.env['AWS_SHARED_CREDENTIALS_FILE'] = cred
        before, after = mount_refused(
            env, ck, w, 'file key space', source, [],
            '%s: aws_access_key_id of profile default has a space at byte 3 of 7' % cred)
        ck.eq('file key space: requests that reached the store', after, before)
        # the same file without the blank mounts: the check refuses only what cannot be sent
        with open(cred, 'w') as f:
            f.write('[default]\naws_access_key_id = %s \naws_secret_access_key = %s\t\n'
                    % (key, secret))
        with ml.Mount(env, source, cache_dir=env.path('cache-file'),
                      extra=['--endpoint', w.endpoint]) as m:
            with open(os.path.join(m.mnt, 'README.txt'), 'rb') as f:
                ck.eq('file trimmed: README.txt', f.read(), b'a plain object\n' * 100)

        # refusals that were clear already: each names its cause
        s3world.set_aws_env(env)
        mount_refused(env, ck, w, 'no bucket', 's3://nosuchbucket/%s' % PREFIX, [],
                      's3://nosuchbucket/data/: no such bucket (HTTP 404)')
        env.env['AWS_REGION'] = 'eu-west-3'
        mount_refused(env, ck, w, 'region', source, [],
                      "the region 'eu-west-3' is wrong; expecting 'us-east-1'")
        s3world.set_aws_env(env, key='TOKENKEY', token='expired-or-garbled')
        mount_refused(env, ck, w, 'token refused', source, [],
                      'the credentials were refused (HTTP 403 InvalidToken')
        s3world.set_aws_env(env, secret=secret + 'x')
        mount_refused(env, ck, w, 'wrong secret', source, [],
                      'the credentials were refused (HTTP 403 SignatureDoesNotMatch')

        # the key revoked under a running mount: each read fails at once with EACCES (no
        # retry loop: --retry-budget far past the test's bound), the log names the refusal
        s3world.set_aws_env(env)
        with ml.Mount(env, source, cache_dir=env.path('cache-revoked'),
                      extra=['--endpoint', w.endpoint, '--warm', 'off', '--retry-budget',
                             '600']) as m:
            names = sorted(os.listdir(m.mnt))
            ck.eq('revoked: the root before', names,
                  ['README.txt', 'shard-000000', 'shard-000000.tar', 'shard-000001',
                   'shard-000001.tar', 'shard-000002', 'shard-000002.tar', 'shard-000009',
                   'shard-000009.tar.gz', 'sub'])
            del w.proxy.keys[key]
            for rel in ('README.txt', 'shard-000001.tar'):
                try:
                    with open(os.path.join(m.mnt, rel), 'rb') as f:
                        got = ('ok', len(f.read()))
                except OSError as e:
                    got = ('err', e.errno)
                ck.eq('revoked: read of %s' % rel, got, ('err', errno.EACCES))
            ck.eq('revoked: the root after', sorted(os.listdir(m.mnt)), names)
        text = ml.logs_under(env.path('cache-revoked'))
        ck.ok('README.txt: fill failed: GET %s/%s/%sREADME.txt: HTTP 403 InvalidAccessKeyId'
              % (w.endpoint, BUCKET, PREFIX) in text, 'revoked: the log names the refusal')
    finally:
        w.stop()


GROUPS = {'creds-bad': (group_creds_bad, 240)}

if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[2] in GROUPS and not s3servers.have_s3rver():
        ml.skip_exit('s3rver is not installed (sh tests/remote/s3/install-s3rver.sh)')
    ml.run_groups(GROUPS, __doc__, prefix='remote-hostile8-')
