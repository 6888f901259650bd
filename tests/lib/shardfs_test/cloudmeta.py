"""Loopback stand-ins for the services clouds hand temporary credentials out from.

Each listens on 127.0.0.1 (a free port), behaves like the real service for the calls the AWS SDKs
and google-auth make, and records every request (time, method, path, what it checked). The
credentials each one issues are new per call ("generations"): issue(n) makes generation n with an
Expiration `life` seconds ahead, and calls on_issue(akid, secret, token, expiration) so a
SigV4Proxy can accept exactly the keys that were handed out.

- Imds: EC2 instance metadata, IMDSv2. PUT /latest/api/token needs
  X-aws-ec2-metadata-token-ttl-seconds (1-21600) and answers a session token; every GET needs
  X-aws-ec2-metadata-token equal to a token it gave (else 401, as IMDSv2-only instances answer).
  GET /latest/meta-data/iam/security-credentials/ answers the role name, .../ROLE the JSON
  document (Code, LastUpdated, Type, AccessKeyId, SecretAccessKey, Token, Expiration).
- Sts: AssumeRoleWithWebIdentity, POST form body (or GET query): Action, Version=2011-06-15,
  RoleArn, RoleSessionName and WebIdentityToken must be what the test expects (else 400/403 with
  an XML <ErrorResponse>); answers the XML AssumeRoleWithWebIdentityResponse.
- Container: the ECS/EKS credentials endpoint: GET of the configured path, Authorization must be
  the expected token (else 401); answers AccessKeyId, SecretAccessKey, Token, Expiration.
- Gce: the GCE metadata server: GET /computeMetadata/v1/instance/service-accounts/default/token
  needs Metadata-Flavor: Google (else 403) and answers with that header too, JSON access_token,
  expires_in, token_type.

mode: 'ok' (default), 'fail' (500 on the credentials call), 'garbage' (200 with a body that is not
the document), 'slow' (the credentials call never answers until stopped).
"""

import datetime
import json
import secrets
import threading
import time
import urllib.parse

from .net import Handler, LoopbackServer


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


class _H(Handler):
    def body(self):
        n = int(self.headers.get('Content-Length') or 0)
        return self.rfile.read(n) if n else b''

    def do_GET(self):
        self.server.owner.handle(self, 'GET')

    def do_PUT(self):
        self.server.owner.handle(self, 'PUT')

    def do_POST(self):
        self.server.owner.handle(self, 'POST')


class StandIn(LoopbackServer):
    prefix = 'SA'

    def __init__(self, life=3600, on_issue=None, preset=None):
        self.life = life
        self.preset = list(preset or [])  # (akid, secret, token) for the first generations
        self.on_issue = on_issue
        self.mode = 'ok'
        self.lock = threading.Lock()
        self.log = []       # (time, what, detail)
        self.issued = []    # dicts: gen, akid, secret, token, issued, expiration
        self.release = threading.Event()
        self.serve(_H)

    def url(self):
        return 'http://127.0.0.1:%d' % self.port

    def note(self, what, detail=''):
        with self.lock:
            self.log.append((time.time(), what, detail))

    def count(self, what):
        with self.lock:
            return sum(1 for e in self.log if e[1] == what)

    def issue(self):
        with self.lock:
            gen = len(self.issued) + 1
            now = time.time()
            c = {'gen': gen, 'akid': '%sGEN%02d%s' % (self.prefix, gen, secrets.token_hex(6).upper()),
                 'secret': 'SECRET-%s-%d-%s' % (self.prefix, gen, secrets.token_hex(16)),
                 'token': 'TOKEN-%s-%d-%s' % (self.prefix, gen, secrets.token_hex(24)),
                 'issued': now, 'expiration': int(now + self.life)}
            if self.preset:
                c['akid'], c['secret'], c['token'] = self.preset.pop(0)
            self.issued.append(c)
        if self.on_issue:
            self.on_issue(c)
        self.note('issued', c['akid'])
        return c

    def misbehave(self, h):
        """True when the mode answered instead of the real document."""
        if self.mode == 'fail':
            self.note('failed')
            h.reply(500, 'internal error')
            return True
        if self.mode == 'garbage':
            self.note('garbage')
            h.reply(200, '<html>captive portal</html>', 'text/html',
                    extra=[('Metadata-Flavor', 'Google')])
            return True
        if self.mode == 'slow':
            self.note('slow')
            self.release.wait(120)
            h.close_connection = True
            return True
        return False

    def stop(self):
        self.release.set()
        super().stop()


class Imds(StandIn):
    prefix = 'IMDS'
    ROLE = 'shardfs-test-role'

    def __init__(self, session=None, **kw):
        self.tokens = set()
        self.session = session  # the session token to hand out (None: a new random one each time)
        super().__init__(**kw)

    def handle(self, h, method):
        path = urllib.parse.urlsplit(h.path).path
        if method == 'PUT' and path == '/latest/api/token':
            ttl = h.headers.get('X-aws-ec2-metadata-token-ttl-seconds', '')
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                self.note('bad-ttl', ttl)
                h.reply(400, 'missing or bad X-aws-ec2-metadata-token-ttl-seconds')
                return
            tok = self.session or 'IMDSSESSION-' + secrets.token_hex(20)
            with self.lock:
                self.tokens.add(tok)
            self.note('token')
            h.reply(200, tok, extra=[('X-aws-ec2-metadata-token-ttl-seconds', ttl)])
            return
        if method != 'GET':
            self.note('bad-method', method)
            h.reply(405, 'method not allowed')
            return
        tok = h.headers.get('X-aws-ec2-metadata-token')
        with self.lock:
            good = tok in self.tokens
        if not good:
            self.note('no-token', path)
            h.reply(401, 'unauthorized')
            return
        base = '/latest/meta-data/iam/security-credentials/'
        if path == base:
            self.note('role')
            h.reply(200, self.ROLE)
            return
        if path == base + self.ROLE:
            if self.misbehave(h):
                return
            c = self.issue()
            doc = {'Code': 'Success', 'LastUpdated': iso(c['issued']), 'Type': 'AWS-HMAC',
                   'AccessKeyId': c['akid'], 'SecretAccessKey': c['secret'], 'Token': c['token'],
                   'Expiration': iso(c['expiration'])}
            h.reply(200, json.dumps(doc, indent=2), 'text/plain')
            return
        self.note('not-found', path)
        h.reply(404, 'not found')


class Sts(StandIn):
    prefix = 'STS'

    def __init__(self, role_arn, token, session_name=None, **kw):
        self.role_arn = role_arn
        self.token = token
        self.session_name = session_name
        super().__init__(**kw)

    def error(self, h, status, code, msg):
        self.note('refused', code)
        h.reply(status, '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error>'
                '<Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error>'
                '<RequestId>x</RequestId></ErrorResponse>' % (code, msg), 'text/xml')

    def handle(self, h, method):
        u = urllib.parse.urlsplit(h.path)
        if method == 'POST':
            if not h.headers.get('Content-Type', '').startswith(
                    'application/x-www-form-urlencoded'):
                return self.error(h, 400, 'InvalidParameterValue', 'not a form')
            q = urllib.parse.parse_qs(h.body().decode(), keep_blank_values=True)
        else:
            q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        q = {k: v[0] for k, v in q.items()}
        if q.get('Action') != 'AssumeRoleWithWebIdentity' or q.get('Version') != '2011-06-15':
            return self.error(h, 400, 'InvalidAction', 'bad Action or Version')
        if q.get('RoleArn') != self.role_arn:
            return self.error(h, 403, 'AccessDenied', 'not authorized to assume this role')
        sess = q.get('RoleSessionName', '')
        if not sess or (self.session_name is not None and sess != self.session_name):
            return self.error(h, 400, 'ValidationError', 'bad RoleSessionName')
        if q.get('WebIdentityToken') != self.token:
            return self.error(h, 400, 'InvalidIdentityToken', 'the token is not valid')
        if self.misbehave(h):
            return
        c = self.issue()
        self.note('session', sess)
        h.reply(200, '<AssumeRoleWithWebIdentityResponse '
                'xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
                '<AssumeRoleWithWebIdentityResult>'
                '<SubjectFromWebIdentityToken>system:serviceaccount:ns:sa'
                '</SubjectFromWebIdentityToken>'
                '<AssumedRoleUser><Arn>%s/%s</Arn><AssumedRoleId>AROA:%s</AssumedRoleId>'
                '</AssumedRoleUser>'
                '<Credentials><SessionToken>%s</SessionToken>'
                '<SecretAccessKey>%s</SecretAccessKey>'
                '<Expiration>%s</Expiration><AccessKeyId>%s</AccessKeyId></Credentials>'
                '</AssumeRoleWithWebIdentityResult>'
                '<ResponseMetadata><RequestId>x</RequestId></ResponseMetadata>'
                '</AssumeRoleWithWebIdentityResponse>'
                % (self.role_arn, sess, sess, c['token'], c['secret'], iso(c['expiration']),
                   c['akid']), 'text/xml')


class Container(StandIn):
    prefix = 'ECS'
    PATH = '/v2/credentials/shardfs-task'

    def __init__(self, auth, **kw):
        self.auth = auth
        super().__init__(**kw)

    def handle(self, h, method):
        if method != 'GET' or urllib.parse.urlsplit(h.path).path != self.PATH:
            self.note('not-found', h.path)
            h.reply(404, 'not found')
            return
        if self.auth is not None and h.headers.get('Authorization') != self.auth:
            self.note('bad-auth')
            h.reply(401, '{"message":"unauthorized"}', 'application/json')
            return
        if self.misbehave(h):
            return
        c = self.issue()
        h.reply(200, json.dumps({'AccessKeyId': c['akid'], 'SecretAccessKey': c['secret'],
                                 'Token': c['token'], 'Expiration': iso(c['expiration']),
                                 'RoleArn': 'arn:aws:iam::123456789012:role/x'}),
                'application/json')


class Gce(StandIn):
    prefix = 'GCE'
    PATH = '/computeMetadata/v1/instance/service-accounts/default/token'

    def handle(self, h, method):
        if h.headers.get('Metadata-Flavor') != 'Google':
            self.note('no-flavor')
            h.reply(403, 'Missing required header "Metadata-Flavor": "Google"',
                    extra=[('Metadata-Flavor', 'Google')])
            return
        if method != 'GET' or urllib.parse.urlsplit(h.path).path != self.PATH:
            self.note('not-found', h.path)
            h.reply(404, 'not found', extra=[('Metadata-Flavor', 'Google')])
            return
        if self.misbehave(h):
            return
        c = self.issue()
        h.reply(200, json.dumps({'access_token': c['token'],
                                 'expires_in': int(c['expiration'] - time.time()),
                                 'token_type': 'Bearer'}),
                'application/json', extra=[('Metadata-Flavor', 'Google')])
