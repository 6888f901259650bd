"""Temporary credentials from the services clouds hand them out from, refreshed while mounted.

s3rver behind the signature-verifying proxy (s3servers), which accepts exactly the keys the
loopback stand-ins (cloudmeta) handed out, session token included, and counts signatures per
key id. Every endpoint variable points to 127.0.0.1; AWS_EC2_METADATA_DISABLED=true and
NO_GCE_CHECK=true stay set except where a case runs its own stand-in.

  imds      EC2 instance metadata (IMDSv2) with credentials that live LIFE seconds: a long read
            signed with generation 1 is held by the proxy midway until generation 1 has expired
            (and the proxy forgot it); it completes with exact bytes, and later reads are signed
            with the refreshed ones only. Then the stand-in fails every refresh: the failure is
            logged, reads work until the credentials expire, then fail with EACCES, and work
            again once the stand-in recovers.
  webid     AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (+ session name) through the STS stand-in;
            AWS_ENDPOINT_URL_STS wins over AWS_ENDPOINT_URL (a dead port); web identity comes
            before ~/.aws/credentials (a profile there with a key the proxy does not know); a
            wrong token fails the mount with STS's reason.
  container AWS_CONTAINER_CREDENTIALS_FULL_URI with AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE, and a
            wrong AWS_CONTAINER_AUTHORIZATION_TOKEN refused (HTTP 401 in the mount's error).
  process   credential_process of a profile in ~/.aws/config.
  gce       gs:// with an OAuth token from the GCE metadata server stand-in (GCE_METADATA_HOST).
  failures  the instance metadata service down (a closed port), slow (never answers), returning
            garbage; the GCE metadata server slow; STS down: each mount fails within seconds with
            the reason; AWS_EC2_METADATA_DISABLED=true keeps the mount from asking at all.

Usage: test_cloudcreds.py SHARDFS
Exit 77 (skip) when /dev/fuse is unusable or s3rver is not installed.
"""

import hashlib
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import s3servers  # noqa: E402
from shardfs_test import cloudmeta  # noqa: E402
from shardfs_test import s3world  # noqa: E402

log = ml.log
BUCKET = 'cloud'
PREFIX = 'd/'
LIFE = 20          # seconds the IMDS stand-in's credentials live (refreshed after about LIFE/2)
NFILES = 24
BIG = 8 << 20
COMMON = ['--chunk-size', '16M', '--readahead', '4K', '--prefetch-shards', '0',
          '--stall-timeout', '300', '--warm', 'off']


def sha(b):
    return hashlib.sha256(b).hexdigest()


def wait_for(cond, what, limit):
    return ml.poll(cond, limit, step=0.1, what=what)


def read(m, name):
    with open(os.path.join(m.mnt, name), 'rb') as f:
        return f.read()


def log_text(m):
    try:
        with open(m.log_file, 'rb') as f:
            return f.read().decode(errors='replace')
    except OSError:
        return ''


class World:
    def __init__(self, env):
        self.env = env
        self.s3 = s3servers.S3rver(env.tmp)
        self.proxy = s3servers.SigV4Proxy(self.s3.port, {})
        self.endpoint = 'http://127.0.0.1:%d' % self.proxy.port
        self.data = {}
        self.next_file = 0
        self.n = 0

    def upload(self):
        self.s3.create_bucket(BUCKET)
        rng = self.env.rng
        for i in range(NFILES):
            self.data['f%02d.bin' % i] = bytes(rng.getrandbits(8) for _ in range(4096)) * 16
        self.data['big.bin'] = os.urandom(BIG)
        for k, v in self.data.items():
            self.s3.put(BUCKET, PREFIX + k, v)

    def accept(self, c):
        self.proxy.keys[c['akid']] = (c['secret'], c['token'])

    def fresh(self):
        """A file no mount has read yet (each read is a GET through the proxy)."""
        name = 'f%02d.bin' % self.next_file
        self.next_file += 1
        return name

    def mount(self, source='s3://%s/%s' % (BUCKET, PREFIX), extra=()):
        self.n += 1
        logf = self.env.path('daemon-%d.log' % self.n)
        m = ml.Mount(self.env, source, cache_dir=self.env.path('cache-%d' % self.n),
                     extra=['--endpoint', self.endpoint, '--log-file', logf] + COMMON +
                     list(extra))
        m.log_file = logf
        return m

    def sig(self, akid):
        return dict(self.proxy.stats).get('sig_ok:' + akid, 0)

    def stop(self):
        self.proxy.stop()
        self.s3.stop()


def clean_env(env):
    s3world.set_aws_env(env, key=None, secret=None)
    for k in ('AWS_METADATA_SERVICE_TIMEOUT', 'AWS_METADATA_SERVICE_NUM_ATTEMPTS'):
        env.env.pop(k, None)


def check_read(ck, w, m, name, label):
    try:
        got = read(m, name)
    except OSError as e:
        ck.fail('%s: reading %s: %s' % (label, name, e))
        return False
    ck.eq('%s: bytes of %s' % (label, name), sha(got), sha(w.data[name]))
    return True


# ---------------------------------------------------------------------------------------------

def case_imds(env, ck, w):
    imds = cloudmeta.Imds(life=LIFE, on_issue=w.accept)
    clean_env(env)
    env.env.pop('AWS_EC2_METADATA_DISABLED')
    env.env['AWS_EC2_METADATA_SERVICE_ENDPOINT'] = imds.url()
    t0 = time.time()
    try:
        with w.mount() as m:
            ck.ok('credentials from instance metadata' in m.stderr and imds.ROLE in m.stderr,
                  'imds: the mount does not say where its credentials came from: %r' % m.stderr)
            ck.ok(re.search(r'info: .*: credentials from instance metadata', log_text(m)),
                  'imds: the mount log does not say where the credentials came from')
            ck.eq('imds: generations issued at mount', len(imds.issued), 1)
            ck.ok(imds.count('token') >= 1, 'imds: no IMDSv2 session token was asked for')
            ck.eq('imds: requests without a session token', imds.count('no-token'), 0)
            g1 = imds.issued[0]
            ck.ok(g1['secret'] not in m.stderr and g1['token'] not in m.stderr,
                  'imds: a secret in the mount output')
            check_read(ck, w, m, w.fresh(), 'imds gen1')
            ck.ok(w.sig(g1['akid']) > 0, 'imds: nothing signed with generation 1')

            # a long read: the proxy holds big.bin's answer midway
            hold = {'match': 'big.bin', 'reached': threading.Event(), 'go': threading.Event()}
            w.proxy.hold = hold
            result = {}

            def reader():
                try:
                    result['data'] = read(m, 'big.bin')
                except OSError as e:
                    result['err'] = e
            th = threading.Thread(target=reader, daemon=True)
            th.start()
            wait_for(hold['reached'].is_set, 'the long read to reach the proxy', 60)
            t_held = time.time()
            ck.eq('imds: the held read was signed with', hold.get('akid'), g1['akid'])
            wait_for(lambda: len(imds.issued) >= 2, 'a refresh', LIFE + 60)
            t_refresh = imds.issued[1]['issued']
            wait_for(lambda: time.time() > g1['expiration'] + 1, 'generation 1 to expire',
                     LIFE + 60)
            # from now on generation 1 is refused, as an expired key is
            del w.proxy.keys[g1['akid']]
            n1 = w.sig(g1['akid'])
            t_release = time.time()
            hold['go'].set()
            th.join(120)
            w.proxy.hold = None
            ck.ok(not th.is_alive(), 'imds: the long read did not finish')
            ck.ok('err' not in result, 'imds: the long read failed: %r' % result.get('err'))
            if 'data' in result:
                ck.eq('imds: bytes of big.bin (read across the expiry)', sha(result['data']),
                      sha(w.data['big.bin']))
            for _ in range(3):
                check_read(ck, w, m, w.fresh(), 'imds after refresh')
            later = [c for c in imds.issued[1:]]
            ck.eq('imds: signatures with generation 1 after it expired', w.sig(g1['akid']), n1)
            ck.ok(sum(w.sig(c['akid']) for c in later) >= 3,
                  'imds: the reads after the refresh were not signed with the new credentials')
            ck.eq('imds: requests refused by the proxy', w.proxy.stats.get('refused', 0), 0)
            log('imds timeline (s after mount start): gen1 issued %.1f, expires %.1f; refresh '
                '(gen2 issued) %.1f = %.1f s before gen1 expired; long read held %.1f..%.1f; '
                'generations issued so far %d'
                % (g1['issued'] - t0, g1['expiration'] - t0, t_refresh - t0,
                   g1['expiration'] - t_refresh, t_held - t0, t_release - t0,
                   len(imds.issued)))
            # when the refresh came is the daemon's schedule on its clock (half the lifetime):
            # logged above, not asserted (a busy machine delays a thread); what a late refresh
            # would break is checked without a clock: no request signed with an expired key
            # (the proxy refused none), no read failed, every later read signed with the new
            # credentials

            # refreshes fail from now on
            imds.mode = 'fail'
            t_broken = time.time()
            cur = imds.issued[-1]
            wait_for(lambda: 'refreshing credentials from instance metadata' in log_text(m) and
                     'failed' in log_text(m), 'a failed refresh in the log', LIFE + 60)
            t_fail = time.time()
            # a read now: while the current credentials last, its exact bytes signed with
            # them; once the daemon finds them expired (its own clock, whole seconds:
            # time(NULL) >= the expiry), EACCES without a request. Which one is owed is
            # decided by the clock around the read, not left open: exact bytes when the read
            # ended before the expiry's second, EACCES when it began after; only a read that
            # spans that second (milliseconds of the ~LIFE/2 left here) may give either.
            # Nothing else: no other errno, no other bytes.
            name = w.fresh()
            n_cur = w.sig(cur['akid'])
            exp_s = int(cur['expiration'])
            t_before = time.time()
            try:
                got, err = read(m, name), None
            except OSError as e:
                got, err = None, e
            t_after = time.time()
            owed = 'bytes' if t_after < exp_s else 'EACCES' if t_before >= exp_s else 'either'
            log('imds: read while the refresh fails, %.1f s before the expiry: %s owed, %s' % (
                exp_s - t_before, owed, 'bytes' if err is None else repr(err)))
            if err is None and owed != 'EACCES':
                ck.eq('imds refresh failing: bytes of %s' % name, sha(got), sha(w.data[name]))
                ck.ok(w.sig(cur['akid']) > n_cur,
                      'imds refresh failing: the read was not signed with the current credentials')
            elif isinstance(err, PermissionError) and owed != 'bytes':
                ck.eq('imds refresh failing: requests after EACCES', w.sig(cur['akid']), n_cur)
            else:
                ck.fail('imds refresh failing: %s owed, got %r' % (
                    owed, err if err is not None else '%d bytes' % len(got)))
            wait_for(lambda: time.time() > cur['expiration'] + 1, 'the credentials to expire',
                     LIFE + 60)
            name = w.fresh()
            try:
                read(m, name)
                ck.fail('imds: a read after the credentials expired (refresh failing) worked')
            except PermissionError:
                log('imds: read after expiry: EACCES, as expected')
            except OSError as e:
                ck.fail('imds: a read after expiry failed with %r, want EACCES' % e)
            signed_after = [c for c in imds.issued if c is not cur]
            ck.eq('imds: refused by the proxy while expired', w.proxy.stats.get('refused', 0), 0)
            imds.mode = 'ok'
            t_ok = time.time()

            def works():
                try:
                    return read(m, name) == w.data[name]
                except OSError:
                    return False
            wait_for(works, 'reads to work again after the stand-in recovered', 120)
            log('imds: refresh failing from %.1f (logged by %.1f), credentials expired at %.1f, '
                'stand-in back at %.1f, reads work again at %.1f (s after mount start)'
                % (t_broken - t0, t_fail - t0, cur['expiration'] - t0, t_ok - t0,
                   time.time() - t0))
            ck.ok(len(imds.issued) > len(signed_after), 'imds: no new credentials after recovery')
            text = log_text(m)
            for c in imds.issued:
                ck.ok(c['secret'] not in text and c['token'] not in text,
                      'imds: a secret of generation %d is in the log' % c['gen'])
            ck.ok(re.search(r'credentials from instance metadata .* refreshed', text),
                  'imds: the log does not say the credentials were refreshed')
    finally:
        imds.stop()


def case_webid(env, ck, w):
    arn = 'arn:aws:iam::123456789012:role/shardfs-reader'
    token = 'eyJhbGciOiJSUzI1NiJ9.' + os.urandom(24).hex() + '.sig-_+/='
    sts = cloudmeta.Sts(arn, token, session_name='shardfs-test', life=3600, on_issue=w.accept)
    clean_env(env)
    tf = env.path('web-identity-token')
    with open(tf, 'w') as f:
        f.write(token + '\n')
    env.env.update(AWS_WEB_IDENTITY_TOKEN_FILE=tf, AWS_ROLE_ARN=arn,
                   AWS_ROLE_SESSION_NAME='shardfs-test', AWS_ENDPOINT_URL_STS=sts.url(),
                   AWS_ENDPOINT_URL='http://127.0.0.1:%d' % s3servers.free_port())
    # botocore asks web identity before the credentials file: this profile must not be used
    awsdir = os.path.join(env.env['HOME'], '.aws')
    os.makedirs(awsdir, exist_ok=True)
    with open(os.path.join(awsdir, 'credentials'), 'w') as f:
        f.write('[default]\naws_access_key_id = NOTUSED\naws_secret_access_key = notused\n')
    try:
        with w.mount() as m:
            ck.ok('credentials from web identity' in m.stderr and arn in m.stderr,
                  'webid: the mount does not name its source: %r' % m.stderr)
            ck.ok(token not in m.stderr, 'webid: the token is in the mount output')
            check_read(ck, w, m, w.fresh(), 'webid')
            ck.eq('webid: STS calls', len(sts.issued), 1)
            if sts.issued:
                ck.ok(w.sig(sts.issued[0]['akid']) > 0, 'webid: nothing signed with STS keys')
        ck.eq('webid: STS refusals', sts.count('refused'), 0)
        with open(tf, 'w') as f:
            f.write('not-the-token\n')
        s3world.expect_mount_fails(env, ck, 's3://%s/%s' % (BUCKET, PREFIX),
                                   ['--endpoint', w.endpoint], 'webid wrong token',
                                   ['InvalidIdentityToken'])
    finally:
        os.unlink(os.path.join(awsdir, 'credentials'))
        sts.stop()


def case_container(env, ck, w):
    auth = 'ecs-auth-' + os.urandom(12).hex()
    ct = cloudmeta.Container(auth, life=3600, on_issue=w.accept)
    clean_env(env)
    af = env.path('container-auth')
    with open(af, 'w') as f:
        f.write(auth)
    env.env.update(AWS_CONTAINER_CREDENTIALS_FULL_URI=ct.url() + ct.PATH,
                   AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=af)
    try:
        with w.mount() as m:
            ck.ok('credentials from the container endpoint' in m.stderr,
                  'container: the mount does not name its source: %r' % m.stderr)
            check_read(ck, w, m, w.fresh(), 'container')
            ck.eq('container: credentials fetched', len(ct.issued), 1)
        ck.eq('container: requests with a wrong authorization', ct.count('bad-auth'), 0)
        del env.env['AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE']
        env.env['AWS_CONTAINER_AUTHORIZATION_TOKEN'] = 'wrong-' + auth
        s3world.expect_mount_fails(env, ck, 's3://%s/%s' % (BUCKET, PREFIX),
                                   ['--endpoint', w.endpoint], 'container wrong token',
                                   ['HTTP 401'])
        ck.eq('container: wrong authorization refused', ct.count('bad-auth'), 1)
        # a plain-http endpoint that is not loopback/ECS/EKS is refused without a request
        env.env['AWS_CONTAINER_CREDENTIALS_FULL_URI'] = 'http://192.0.2.1/creds'
        s3world.expect_mount_fails(env, ck, 's3://%s/%s' % (BUCKET, PREFIX),
                                   ['--endpoint', w.endpoint], 'container remote http',
                                   ['must be https or a loopback'])
    finally:
        ct.stop()


def case_process(env, ck, w):
    clean_env(env)
    akid, secret, token = 'PROCAKID' + os.urandom(6).hex().upper(), os.urandom(16).hex(), \
        'proc-token-' + os.urandom(16).hex()
    w.proxy.keys[akid] = (secret, token)
    script = env.path('credproc.sh')
    with open(script, 'w') as f:
        f.write('#!/bin/sh\nprintf \'{"Version": 1, "AccessKeyId": "%s", "SecretAccessKey": "%s", '
                '"SessionToken": "%s", "Expiration": "2999-01-01T00:00:00Z"}\\n\'\n'
                % (akid, secret, token))
    os.chmod(script, 0o755)
    awsdir = os.path.join(env.env['HOME'], '.aws')
    os.makedirs(awsdir, exist_ok=True)
    with open(os.path.join(awsdir, 'config'), 'w') as f:
        f.write('[default]\nregion = us-east-1\n\n[profile proc]\ncredential_process = %s\n'
                % script)
    env.env['AWS_PROFILE'] = 'proc'
    try:
        with w.mount() as m:
            ck.ok('credentials from credential_process (profile proc)' in m.stderr,
                  'process: the mount does not name its source: %r' % m.stderr)
            check_read(ck, w, m, w.fresh(), 'process')
            ck.ok(w.sig(akid) > 0, 'process: nothing signed with its keys')
    finally:
        os.unlink(os.path.join(awsdir, 'config'))
        env.env.pop('AWS_PROFILE', None)


def case_gce(env, ck, w):
    def accept(c):
        w.proxy.bearers[c['token']] = c['akid']
    gce = cloudmeta.Gce(life=3600, on_issue=accept)
    clean_env(env)
    env.env.pop('NO_GCE_CHECK')
    env.env['GCE_METADATA_HOST'] = '127.0.0.1:%d' % gce.port
    try:
        with w.mount(source='gs://%s/%s' % (BUCKET, PREFIX)) as m:
            ck.ok('credentials from the GCE metadata server' in m.stderr,
                  'gce: the mount does not name its source: %r' % m.stderr)
            check_read(ck, w, m, w.fresh(), 'gce')
            ck.eq('gce: tokens fetched', len(gce.issued), 1)
            if gce.issued:
                ck.ok(w.proxy.stats.get('bearer_ok:' + gce.issued[0]['akid'], 0) > 0,
                      'gce: nothing sent with the metadata server\'s token')
        ck.eq('gce: requests without Metadata-Flavor', gce.count('no-flavor'), 0)
        gce.mode = 'slow'
        fail_fast(env, ck, w, 'gs://%s/%s' % (BUCKET, PREFIX), 'gce slow', ['GCE metadata',
                                                                            'imed'])
    finally:
        gce.stop()


def fail_fast(env, ck, w, source, label, words):
    """The mount fails, saying one of words; one that waits on a metadata server without its
    own bound hangs past expect_mount_fails's timeout, a failure (no clock is read)."""
    s3world.expect_mount_fails(env, ck, source, ['--endpoint', w.endpoint], label, words)


def case_failures(env, ck, w):
    src = 's3://%s/%s' % (BUCKET, PREFIX)
    clean_env(env)
    # disabled: the stand-in is never asked
    imds = cloudmeta.Imds(life=3600, on_issue=w.accept)
    try:
        env.env['AWS_EC2_METADATA_SERVICE_ENDPOINT'] = imds.url()
        fail_fast(env, ck, w, src, 'imds disabled', ['no credentials found'])
        ck.eq('imds disabled: requests to the metadata service', len(imds.log), 0)
        env.env.pop('AWS_EC2_METADATA_DISABLED')
        imds.mode = 'garbage'
        fail_fast(env, ck, w, src, 'imds garbage', ['not a JSON object'])
        imds.mode = 'slow'
        fail_fast(env, ck, w, src, 'imds slow', ['imed out', 'Timeout'])
    finally:
        imds.stop()
    env.env['AWS_EC2_METADATA_SERVICE_ENDPOINT'] = 'http://127.0.0.1:%d' % s3servers.free_port()
    fail_fast(env, ck, w, src, 'imds down', ['instance metadata'])
    clean_env(env)
    tf = env.path('tok2')
    with open(tf, 'w') as f:
        f.write('x')
    env.env.update(AWS_WEB_IDENTITY_TOKEN_FILE=tf, AWS_ROLE_ARN='arn:aws:iam::1:role/r',
                   AWS_ENDPOINT_URL_STS='http://127.0.0.1:%d' % s3servers.free_port())
    fail_fast(env, ck, w, src, 'sts down', ['web identity'])
    clean_env(env)


def group(env, ck):
    w = World(env)
    try:
        w.upload()
        for case in (case_failures, case_webid, case_container, case_process, case_gce,
                     case_imds):
            log('---- %s' % case.__name__)
            case(env, ck, w)
        s3world.check_proxy(ck, w, 'cloudcreds')
    finally:
        w.stop()


def main():
    shardfs = sys.argv[1]
    if not s3servers.have_s3rver():
        ml.skip_exit('s3rver is not installed (sh tests/remote/s3/install-s3rver.sh)')
    ml.main_wrapper(group, shardfs, 'remote-cloudcreds', deadline=400)


if __name__ == '__main__':
    main()
