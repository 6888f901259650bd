"""A small s3 world for the s3:// gs:// ais:// tests: s3rver behind the SigV4-checking proxy
(and the AIS stand-in), a WebDataset source to upload, the AWS environment of a mount, and a
mount that must fail fast with a clear message. Python stdlib + Debian's python3-botocore."""

import os

from . import mount as ml
from . import s3servers
from . import shardgen as sg

log = ml.log
BUCKET = 'shards'
PREFIX = 'data/'
KEY, SECRET = s3servers.S3RVER_KEY, s3servers.S3RVER_SECRET
FAIL_FAST_S = 30  # a refused mount's command times out after this + 30 s (a hang)


def build_source(env):
    """A small WebDataset source: plain shards in three tar formats, a gzip shard, a shard in a
    subdirectory, a plain file. Returns (src dir, list of relpaths, list of shard relpaths)."""
    src = env.path('src')
    stage = env.path('stage')
    os.makedirs(src)
    rng = env.rng
    shards = []
    for i, fmt in enumerate(['gnu', 'ustar', 'pax']):
        spec = sg._wds_samples(rng, 'n0144%d' % i, 6 + i, i * 100)
        sdir = os.path.join(stage, str(i))
        sg.make_tree(sdir, spec)
        rel = 'shard-%06d.tar' % i
        sg.gnu_tar_create(os.path.join(src, rel), sdir, sg._members(spec), fmt)
        shards.append(rel)
    spec = sg._wds_samples(rng, 'deep', 4, 0) + [('f', 'sub dir/x+y&z.txt', b'odd name\n', 0o644,
                                                   sg.T0)]
    sdir = os.path.join(stage, 'sub')
    sg.make_tree(sdir, spec)
    os.makedirs(os.path.join(src, 'sub'))
    sg.gnu_tar_create(os.path.join(src, 'sub', 'shard-a.tar'), sdir, sg._members(spec), 'gnu')
    shards.append('sub/shard-a.tar')
    gz = os.path.join(src, 'shard-000009.tar.gz')
    sg.gnu_tar_create(gz[:-3], os.path.join(stage, '0'), sorted(os.listdir(os.path.join(stage, '0'))),
                      'gnu')
    sg.run(['gzip', '-n', gz[:-3]])
    shards.append('shard-000009.tar.gz')
    with open(os.path.join(src, 'README.txt'), 'wb') as f:
        f.write(b'a plain object\n' * 100)
    files = []
    for root, _, names in os.walk(src):
        for n in names:
            files.append(os.path.relpath(os.path.join(root, n), src))
    return src, sorted(files), shards


class World:
    """s3rver + the SigV4 proxy + the AIS stand-in, with the source uploaded."""

    def __init__(self, env, ais=False):
        self.s3 = s3servers.S3rver(env.tmp)
        self.proxy = s3servers.SigV4Proxy(self.s3.port, {KEY: (SECRET, None),
                                                       'TOKENKEY': (SECRET, 'tok/en+123==')},
                                        anonymous=('public',))
        self.ais = s3servers.AisStandIn(self.s3.port) if ais else None
        self.endpoint = 'http://127.0.0.1:%d' % self.proxy.port

    def stop(self):
        if self.ais:
            self.ais.stop()
        self.proxy.stop()
        self.s3.stop()

    def upload(self, bucket, prefix, src, files):
        self.s3.create_bucket(bucket)
        for rel in files:
            with open(os.path.join(src, rel), 'rb') as f:
                self.s3.put(bucket, prefix + rel, f.read())


def set_aws_env(env, key=KEY, secret=SECRET, token=None):
    for k in ('AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN', 'AWS_PROFILE',
              'AWS_SHARED_CREDENTIALS_FILE', 'AWS_ENDPOINT_URL', 'AWS_ENDPOINT_URL_S3',
              'GCS_HMAC_ACCESS_ID', 'GCS_HMAC_SECRET', 'GOOGLE_OAUTH_ACCESS_TOKEN', 'AIS_ENDPOINT',
              'AWS_CONFIG_FILE', 'AWS_WEB_IDENTITY_TOKEN_FILE', 'AWS_ROLE_ARN',
              'AWS_ROLE_SESSION_NAME', 'AWS_ENDPOINT_URL_STS', 'AWS_CONTAINER_CREDENTIALS_FULL_URI',
              'AWS_CONTAINER_CREDENTIALS_RELATIVE_URI', 'AWS_CONTAINER_AUTHORIZATION_TOKEN',
              'AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE', 'AWS_EC2_METADATA_SERVICE_ENDPOINT',
              'GCE_METADATA_HOST'):
        env.env.pop(k, None)
    # the chain's last steps ask the instance metadata service and the GCE metadata server:
    # never their real (link-local) addresses from a test
    env.env['AWS_EC2_METADATA_DISABLED'] = 'true'
    env.env['NO_GCE_CHECK'] = 'true'
    env.env['AWS_REGION'] = 'us-east-1'
    if key:
        env.env['AWS_ACCESS_KEY_ID'] = key
    if secret:
        env.env['AWS_SECRET_ACCESS_KEY'] = secret
    if token:
        env.env['AWS_SESSION_TOKEN'] = token


def expect_mount_fails(env, ck, source, extra, label, words):
    mnt = env.path('mnt-fail-%s' % label.replace(' ', '-'))
    os.makedirs(mnt, exist_ok=True)
    # a retry budget far past the command's timeout: a refusal retried as if transient would
    # not return in time (rc None), a failure of its own; no clock is read
    r = env.run([env.shardfs, 'mount', '--cache-dir', env.path('cache-fail')] + extra +
                ['--retry-budget', '600', source, mnt], timeout=FAIL_FAST_S + 30)
    err = r.stderr.decode(errors='replace')
    log('%s: rc=%r: %s' % (label, r.returncode, err.strip()))
    ck.ok(r.returncode is not None, '%s: the mount did not return within %ds: retried as if '
          'transient' % (label, FAIL_FAST_S + 30))
    ck.ok(r.returncode not in (0, None), '%s: mount should fail, rc=%r' % (label, r.returncode))
    ck.ok(any(w.lower() in err.lower() for w in words),
          '%s: stderr should say one of %r: %r' % (label, words, err))
    for secret in (SECRET + 'x', 'wrong-secret', 'tok/en+123=='):
        ck.ok(secret not in err, '%s: a secret appears in the error output' % label)
    if ml.is_mounted(mnt):
        ck.fail('%s: %s is mounted after a failed mount' % (label, mnt))
        env.run(['fusermount3', '-u', '-z', mnt])
    for p in ml.daemons_for(env.shardfs, mnt):
        ck.fail('%s: daemon pid %d left running' % (label, p))
    ml.kill_pids(set(ml.daemons_for(env.shardfs, mnt)))


def check_proxy(ck, world, label):
    st = dict(world.proxy.stats)
    log('%s: proxy stats %s' % (label, st))
    ck.eq('%s: suffix ranges sent' % label, st.get('suffix_ranges', 0), 0)
    return st
