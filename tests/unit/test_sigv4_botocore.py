"""Compare shardfs's SigV4 signatures with botocore's for the requests shardfs makes.

botocore (Debian's python3-botocore, the signer of the AWS CLI and boto3) signs each request
with S3SigV4Auth at a fixed time, UNSIGNED-PAYLOAD as shardfs sends; the C tool
(test_sigv4 sign ...) signs the same request; the Authorization values must be identical.
Credentials go to the tool through the environment, never argv.

Usage: test_sigv4_botocore.py PATH/TO/test_sigv4
"""

import datetime
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test.checks import skip  # noqa: E402

try:
    import botocore.auth
    import botocore.awsrequest
    import botocore.config
    import botocore.credentials
except ImportError:
    # a skip only where the run allows it (never under CI=true or --strict)
    skip('python3-botocore is not installed (scripts/install-deps.sh --test)', 'tool')

TOOL = sys.argv[1]

CREDS = [
    ('AKIAIOSFODNN7EXAMPLE', 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', None),
    ('AKIDEXAMPLE', 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY', 'FQoGZXIvYXdzEXAMPLE/token+=='),
    ('GOOG1EXAMPLEHMACID', 'bGoa+V7g/yqDXvKRqq+JTFn4uQZbPiQJo4pf9RzJ', None),
]

# (method, scheme://host, path as sent (already encoded), raw query pairs or None, region)
REQUESTS = [
    ('GET', 'https://examplebucket.s3.amazonaws.com', '/test.txt', None, 'us-east-1'),
    ('HEAD', 'https://examplebucket.s3.us-west-2.amazonaws.com', '/train/shard-000000.tar', None,
     'us-west-2'),
    ('GET', 'http://127.0.0.1:9000', '/bucket', [('list-type', '2'), ('max-keys', '1000'),
                                                 ('prefix', 'train/')], 'us-east-1'),
    ('GET', 'http://127.0.0.1:9000', '/bucket', [('list-type', '2'), ('max-keys', '1000'),
                                                 ('prefix', 'a b/ü+x='),
                                                 ('continuation-token',
                                                  '1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4=')],
     'eu-central-1'),
    ('GET', 'http://127.0.0.1:9000', '/bucket/dir%20x/a%2Bb%3D%26%3F%23%25~.tar', None,
     'us-east-1'),
    ('GET', 'https://storage.googleapis.com', '/gbucket/train/%E2%82%AC.tar', None, 'auto'),
    ('GET', 'https://s3.amazonaws.com', '/', [('lifecycle', '')], 'us-east-1'),
    ('HEAD', 'http://[::1]:8080', '/s3/b/k', None, 'us-east-1'),
]

TIMES = [1369353600, 1440938160, 1767225599]  # 2013-05-24, 2015-08-30, 2025-12-31 23:59:59


def encode(s):
    from urllib.parse import quote
    return quote(s, safe='-_.~')


def botocore_auth(method, base, path, query, region, creds, ts):
    access, secret, token = creds
    if query:
        qs = '&'.join('%s=%s' % (encode(k), encode(v)) for k, v in query)
        url = base + path + '?' + qs
    else:
        url = base + path
    req = botocore.awsrequest.AWSRequest(method=method, url=url)
    req.context['client_config'] = botocore.config.Config(s3={'payload_signing_enabled': False})
    cred = botocore.credentials.Credentials(access, secret, token)
    auth = botocore.auth.S3SigV4Auth(cred, 's3', region)
    stamp = datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime('%Y%m%dT%H%M%SZ')
    req.context['timestamp'] = stamp
    # add_auth with a fixed clock: the steps of SigV4Auth.add_auth, minus utcnow()
    auth._modify_request_before_signing(req)
    cr = auth.canonical_request(req)
    sts = auth.string_to_sign(req, cr)
    sig = auth.signature(sts, req)
    auth._inject_signature_to_request(req, sig)
    return req.headers['Authorization'], req.headers['X-Amz-Content-SHA256'], cr


def ours(method, base, path, query, region, creds, ts):
    access, secret, token = creds
    env = dict(os.environ, SIGV4_ACCESS_KEY=access, SIGV4_SECRET_KEY=secret)
    env.pop('SIGV4_TOKEN', None)
    if token:
        env['SIGV4_TOKEN'] = token
    host = base.split('://', 1)[1]
    qarg = '&'.join('%s=%s' % (k, v) for k, v in query) if query else '-'
    r = subprocess.run([TOOL, 'sign', method, host, path, qarg, str(ts), region, 's3'],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=30)
    if r.returncode != 0:
        return None, r.stdout.decode() + r.stderr.decode()
    lines = r.stdout.decode().splitlines()
    return lines[1], lines[0]


def main():
    checks = failures = 0
    for creds in CREDS:
        for req in REQUESTS:
            for ts in TIMES:
                method, base, path, query, region = req
                if '&' in ''.join(k + v for k, v in (query or [])):
                    continue  # the tool splits on '&'
                want, payload, cr = botocore_auth(method, base, path, query, region, creds, ts)
                got, detail = ours(method, base, path, query, region, creds, ts)
                checks += 1
                if payload != 'UNSIGNED-PAYLOAD' or got != want:
                    failures += 1
                    print('FAIL %s %s%s %r %s\n  botocore: %s\n  shardfs:  %s\n  (%s)\n'
                          '  canonical request (botocore):\n%s'
                          % (method, base, path, query, ts, want, got, detail, cr))
    print('%d passed, %d failed' % (checks - failures, failures))
    if checks == 0:
        print('FAIL: sigv4-botocore: the test made no check')
    sys.exit(1 if failures or checks == 0 else 0)


if __name__ == '__main__':
    main()
