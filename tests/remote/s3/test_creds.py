"""Credentials never appear in argv, logs, stats or core dumps of the daemon (docs/design.md section 3).

A mount of s3:// (and gs://) against s3rver behind the botocore-verifying proxy
(s3servers, set up with s3world) with distinctive random credentials, read through with 4 KiB
chunks so that hundreds of requests are signed; then, while the daemon idles:

  (a) /proc/PID/cmdline and /proc/PID/environ;
  (b) a simulated core dump: every readable mapping of /proc/PID/smaps that a core would hold
      (everything not flagged 'dd' in VmFlags: heap, stacks, anonymous, file-backed) is read
      through /proc/PID/mem and searched;
  (c) a real core made with gdb's gcore (which also leaves 'dd' mappings out); when gcore is
      missing or may not attach here (ptrace refused), that part fails, unless the run allows
      that skip (ml.skip_allowed: not under CI=true or --strict), where it says so;
  (d) every file in the cache directory (the daemon's log is there), .shardfs/stats,
      .shardfs/metrics, `shardfs stats`, `shardfs --help` and `shardfs mount --help`.

What is searched for: the secret access key and session token as stored, hex and base64 forms
of them, the SigV4 signing keys derived from the secret for the current dates (kDate, kRegion,
kService, kSigning, raw and hex) and the HMAC ipad/opad forms of "AWS4"+secret; in the profile
case also the secret of another profile of the same file (read, never used). Any hit fails.

The scanner must be able to fail: the daemon's environment holds SHARDFS_TEST_MARKER (which it
has no reason to scrub) and its access key id (not a secret: it is sent in every Authorization
header) lives on its heap. Both must be found, in environ / memory / the gcore core, or the test
fails: a scanner that reads nothing cannot pass.

Sanitizer builds (libasan/libubsan loaded in the daemon): their runtime keeps a verbatim copy of
/proc/self/environ made before main; secret hits inside such a copy are logged, not counted. gcore
is skipped there (gdb needs minutes over their mappings).

Cases: 'env' (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN), 'profile' (a profile
of ~/.aws/credentials with a session token), 'gs' (GCS_HMAC_ACCESS_ID/GCS_HMAC_SECRET), and the
temporary sources from the loopback stand-ins of cloudmeta: 'imds' (the IMDSv2 session token,
the instance role's secret and session token), 'webid' (the web identity token, and the secret and
session token STS gave for it), 'container' (AWS_CONTAINER_AUTHORIZATION_TOKEN, the secret and
session token of the container endpoint).

Groups besides that one ('creds', the default): nothing waits for ever on a credential helper
(a credential_process of ~/.aws/config, the AWS keys unset):

  helper-timeout    a helper that never answers (and started a child): `out=$(shardfs mount
                    --credential-timeout 1 ...)` returns (its pipe read to end of file), with exit
                    1 and a message naming the helper and the bound; the helper and its child are
                    gone, no mount, no daemon. A FIFO as AWS_WEB_IDENTITY_TOKEN_FILE: refused at
                    once, not waited on. A helper that answers at once: `out=$(shardfs mount
                    ...)` returns with exit 0 and the mount serves the bytes.
  helper-interrupt  `shardfs mount` interrupted (SIGINT) or killed (SIGKILL) while its daemon waits
                    for a helper that answers only when the test writes to its FIFO: once the
                    command has ended and the helper is released, the daemon is gone, no mount
                    appears, and no helper is left.
  index-interrupt   `shardfs index` interrupted (SIGINT, as Ctrl-C sends it) while it waits for a
                    helper that never answers and started a child: the command ends with status
                    130 (128 + SIGINT), and the helper and its child are gone.

Usage: test_creds.py SHARDFS [GROUP]
Exit 77 (skip) when /dev/fuse is unusable or s3rver is not installed.
"""

import base64
import datetime
import errno
import hashlib
import hmac
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import s3servers  # noqa: E402
from shardfs_test import cloudmeta  # noqa: E402
from shardfs_test import s3world  # noqa: E402

log = ml.log
BUCKET = 'creds'
PREFIX = 'data/'
READ_CHUNK = 4 << 20
DD_SEARCH_MAX = 64 << 20
GCORE_TIMEOUT_S = 120


# ---------------------------------------------------------------------------------------------
# What to look for
# ---------------------------------------------------------------------------------------------

def _hmac(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def secret_needles(name, secret, region, service):
    """(label, bytes) forms of a SigV4 secret that would let someone sign requests."""
    raw = secret.encode()
    out = [(name, raw), (name + ' hex', raw.hex().encode()),
           (name + ' HEX', raw.hex().upper().encode()), (name + ' base64', base64.b64encode(raw))]
    key = b'AWS4' + raw
    if len(key) <= 64:  # HMAC-SHA256 pads a short key to the block and xors it
        out.append((name + ' ipad', bytes(b ^ 0x36 for b in key)))
        out.append((name + ' opad', bytes(b ^ 0x5c for b in key)))
    now = datetime.datetime.now(datetime.timezone.utc)
    for days in (-1, 0, 1):
        date = (now + datetime.timedelta(days=days)).strftime('%Y%m%d')
        k_date = _hmac(key, date)
        k_region = _hmac(k_date, region)
        k_service = _hmac(k_region, service)
        k_signing = _hmac(k_service, 'aws4_request')
        for what, k in (('kDate', k_date), ('kRegion', k_region), ('kService', k_service),
                        ('kSigning', k_signing)):
            out.append(('%s %s(%s)' % (name, what, date), k))
            out.append(('%s %s(%s) hex' % (name, what, date), k.hex().encode()))
    return out


def token_needles(name, token):
    raw = token.encode()
    return [(name, raw), (name + ' hex', raw.hex().encode()),
            (name + ' base64', base64.b64encode(raw))]


def count_in(data, needle):
    return data.count(needle)


# ---------------------------------------------------------------------------------------------
# Simulated core dump: the mappings a core would hold, read through /proc/PID/mem
# ---------------------------------------------------------------------------------------------

MAP_RE = re.compile(r'^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+\s*(.*)$')


def mappings(pid):
    """[(start, end, perms, path, vmflags, rss_kb, swap_kb)] from /proc/PID/smaps."""
    out = []
    cur = None
    with open('/proc/%d/smaps' % pid) as f:
        for line in f:
            m = MAP_RE.match(line)
            if m:
                cur = {'start': int(m.group(1), 16), 'end': int(m.group(2), 16),
                       'perms': m.group(3), 'path': m.group(4), 'flags': [], 'rss': 0, 'swap': 0}
                out.append(cur)
                continue
            if cur is None:
                continue
            if line.startswith('VmFlags:'):
                cur['flags'] = line.split()[1:]
            elif line.startswith('Rss:'):
                cur['rss'] = int(line.split()[1])
            elif line.startswith('Swap:'):
                cur['swap'] = int(line.split()[1])
    return out


def read_span(fd, addr, n):
    """The bytes at [addr, addr+n) of the process, or, where the kernel refuses part of it,
    the pieces it gives page by page as [(address, bytes)]."""
    try:
        return [(addr, os.pread(fd, n, addr))]
    except OSError:
        out = []
        for p in range(addr, addr + n, 4096):
            try:
                out.append((p, os.pread(fd, min(4096, addr + n - p), p)))
            except OSError:
                pass
        return out


def scan_memory(pid, needles):
    """Search every readable mapping with something resident. Returns (hits, stats): hits is a
    list of (label, address, mapping dict, is_dd)."""
    keep = max(len(n) for _, n in needles) - 1  # chunks overlap by this much
    hits = []
    st = {'mappings': 0, 'read_bytes': 0, 'skipped_dd': 0, 'skipped_unread': 0,
          'skipped_empty': 0}
    fd = os.open('/proc/%d/mem' % pid, os.O_RDONLY)
    try:
        for mp in mappings(pid):
            if 'r' not in mp['perms'] or mp['path'] == '[vsyscall]':
                st['skipped_unread'] += 1
                continue
            dd = 'dd' in mp['flags']
            if dd and mp['end'] - mp['start'] > DD_SEARCH_MAX:
                # not dumped, and too big to read (ASan's shadow memory): skipped. Small ones
                # are searched to show where the secrets are; a hit there is not a leak.
                st['skipped_dd'] += 1
                continue
            # nothing resident or swapped: anonymous memory reads as zeros, file-backed as the
            # file itself; there is nothing of ours to find
            if mp['rss'] == 0 and mp['swap'] == 0:
                st['skipped_empty'] += 1
                continue
            st['mappings'] += 1
            addr = mp['start']
            while addr < mp['end']:
                n = min(READ_CHUNK, mp['end'] - addr)
                last = addr + n >= mp['end']
                for base, data in read_span(fd, addr, n):
                    st['read_bytes'] += len(data)
                    for label, nd in needles:
                        i = data.find(nd)
                        while i >= 0:
                            # a hit in the overlap is counted by the next chunk
                            if last or base + i < addr + n - keep:
                                hits.append((label, base + i, mp, dd))
                            i = data.find(nd, i + 1)
                addr = mp['end'] if last else addr + n - keep
    finally:
        os.close(fd)
    return hits, st


def sanitizer_runtime(pid):
    """The sanitizer runtime loaded in pid ('libasan', ...) or None."""
    with open('/proc/%d/maps' % pid) as f:
        for line in f:
            m = re.search(r'/(lib[atm]san|libubsan)[^/]*\.so', line)
            if m:
                return m.group(1)
    return None


def environ_copies(pid, mp, block):
    """[start, end) of every verbatim copy of the environment block the daemon was started with
    inside mapping mp."""
    out = []
    fd = os.open('/proc/%d/mem' % pid, os.O_RDONLY)
    try:
        for base, data in read_span(fd, mp['start'], mp['end'] - mp['start']):
            i = data.find(block)
            while i >= 0:
                out.append((base + i, base + i + len(block)))
                i = data.find(block, i + 1)
    finally:
        os.close(fd)
    return out


def describe(mp):
    return '%x-%x %s %s%s' % (mp['start'], mp['end'], mp['perms'], mp['path'] or '[anon]',
                              ' dd' if 'dd' in mp['flags'] else '')


def scan_file(path, needles):
    hits = {}
    maxlen = max(len(n) for _, n in needles)
    tail = b''
    try:
        with open(path, 'rb') as f:
            while True:
                data = f.read(READ_CHUNK)
                if not data:
                    break
                buf = tail + data
                for label, nd in needles:
                    c = buf.count(nd) - tail.count(nd)
                    if c:
                        hits[label] = hits.get(label, 0) + c
                tail = buf[-(maxlen - 1):]
    except OSError as e:
        log('cannot read %s: %s' % (path, e))
    return hits


def core_where(path, offset):
    """Where a file offset of an ELF64 core lies: 'vaddr 0x...' of a PT_LOAD or 'notes'."""
    import struct
    with open(path, 'rb') as f:
        eh = f.read(64)
        if eh[:4] != b'\x7fELF' or eh[4] != 2:
            return 'offset %d' % offset
        phoff, = struct.unpack_from('<Q', eh, 0x20)
        phentsize, phnum = struct.unpack_from('<HH', eh, 0x36)
        f.seek(phoff)
        ph = f.read(phentsize * phnum)
    for i in range(phnum):
        ptype, _, poff, vaddr, _, filesz = struct.unpack_from('<IIQQQQ', ph, i * phentsize)
        if poff <= offset < poff + filesz:
            if ptype == 4:
                return 'notes (offset %d)' % offset
            return 'vaddr 0x%x' % (vaddr + offset - poff)
    return 'offset %d' % offset


def core_offsets(path, needle):
    out = []
    with open(path, 'rb') as f:
        data = f.read()
    i = data.find(needle)
    while i >= 0 and len(out) < 20:
        out.append(i)
        i = data.find(needle, i + 1)
    return out


def gcore(env, ck, pid):
    """A real core of pid by gdb's gcore (honours 'dd'), or None when not possible here: then
    a failed check, or, where the run allows that kind of skip, a logged 'SKIP (part c)'."""
    def cannot(why, kind):
        if ml.skip_allowed(kind):
            log('SKIP (part c): %s' % why)
        else:
            ck.fail('gcore: %s (and this run allows no skip)' % why)
        return None
    exe = shutil.which('gcore')
    if not exe:
        return cannot('gcore is not installed (gdb; scripts/install-deps.sh --test)', 'tool')
    prefix = env.path('core-%d' % pid)
    p = subprocess.Popen([exe, '-o', prefix, str(pid)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=GCORE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)  # gdb detaches from the daemon on SIGTERM
        p.communicate()
        return cannot('gcore did not finish within %ds' % GCORE_TIMEOUT_S, 'host')
    r = subprocess.CompletedProcess(p.args, p.returncode, out, b'')
    core = '%s.%d' % (prefix, pid)
    if r.returncode != 0 or not os.path.exists(core):
        if os.path.exists(core):
            os.unlink(core)
        return cannot('gcore failed (rc=%r; ptrace refused?): %s' % (
            r.returncode, r.stdout.decode(errors='replace').strip()[-500:]), 'host')
    return core


# ---------------------------------------------------------------------------------------------
# One case: mount, read, scan
# ---------------------------------------------------------------------------------------------

def read_everything(mnt):
    n = 0
    for root, _, names in os.walk(mnt):
        for name in names:
            with open(os.path.join(root, name), 'rb') as f:
                while f.read(1 << 16):
                    pass
            n += 1
    return n


def wait_idle(m):
    """Until the daemon runs no fill (readahead and prefetch are done): polled, a deadline."""
    ml.poll(lambda: m.stats()['fills_inflight'] == 0, what='no fill running in the daemon')


def run_case(env, ck, world, label, source, secret_set, controls, extra=(), real_core=True):
    """Mount source, read it all, scan. secret_set: [(label, bytes)] that must never be found;
    controls: [(label, bytes)] that must be found in memory (the scanner works). real_core=False:
    the simulated core only (gcore takes a minute on a busy machine)."""
    cache = env.path('cache-' + label)
    before = dict(world.proxy.stats).get('signature_ok', 0)
    with ml.Mount(env, source, cache_dir=cache,
                  extra=['--endpoint', world.endpoint, '--chunk-size', '4K', '--readahead', '4K',
                         '--prefetch-shards', '0'] + list(extra)) as m:
        n = read_everything(m.mnt)
        st = m.stats()
        pid = st.get('pid')
        wait_idle(m)
        signed = dict(world.proxy.stats).get('signature_ok', 0) - before
        log('%s: read %d files, %d requests verified by the proxy, daemon pid %r'
            % (label, n, signed, pid))
        ck.ok(n >= 5, '%s: only %d files read' % (label, n))
        ck.ok(signed >= 50, '%s: only %d signed requests (expected many)' % (label, signed))
        ck.eq('%s: refused requests' % label, dict(world.proxy.stats).get('refused', 0), 0)
        if not isinstance(pid, int) or not ml.pid_alive(pid):
            ck.fail('%s: no daemon pid in stats: %r' % (label, pid))
            return
        everything = secret_set + controls

        # (a) argv and environment
        for what in ('cmdline', 'environ'):
            with open('/proc/%d/%s' % (pid, what), 'rb') as f:
                data = f.read()
            for nl, nd in secret_set:
                ck.eq('%s: %s in /proc/PID/%s' % (label, nl, what), count_in(data, nd), 0)
            if what == 'environ':
                for nl, nd in controls:
                    if nl == 'marker':
                        ck.ok(count_in(data, nd) > 0,
                              '%s: the scanner did not find the marker in /proc/PID/environ'
                              % label)

        # (b) simulated core dump
        t = time.monotonic()
        hits, sst = scan_memory(pid, everything)
        log('%s: scanned %d mappings, %.1f MB in %.1fs (skipped: %d large dd, %d unreadable, '
            '%d with nothing resident)' % (label, sst['mappings'], sst['read_bytes'] / 1e6,
                                           time.monotonic() - t, sst['skipped_dd'],
                                           sst['skipped_unread'], sst['skipped_empty']))
        secret_labels = {nl for nl, _ in secret_set}
        san = sanitizer_runtime(pid)
        if san:
            # A sanitizer runtime reads /proc/self/environ into a buffer of its own before main
            # (sanitizer_common's GetEnv) and keeps it: a verbatim copy of the environment the
            # process started with, out of reach of shardfs. Only in sanitizer builds, and only
            # hits inside such a verbatim copy, are attributed to it.
            block = b''.join(b'%s=%s\0' % (k.encode(), v.encode()) for k, v in env.env.items())
            copies = {}
            kept = []
            for h in hits:
                key = (h[2]['start'], h[2]['end'])
                if h[0] in secret_labels and key not in copies:
                    copies[key] = environ_copies(pid, h[2], block)
                if (h[0] in secret_labels and not h[3] and h[2]['path'] != '[stack]' and
                        any(a <= h[1] < b for a, b in copies[key])):
                    log('%s: %s at %x is in %s\'s copy of the startup environment (%s): not '
                        'counted' % (label, h[0], h[1], san, describe(h[2])))
                    continue
                kept.append(h)
            hits = kept
        dumped = [h for h in hits if not h[3]]
        protected = [h for h in hits if h[3]]
        for nl, a, mp, dd in dumped:
            if nl in secret_labels:
                log('%s: LEAK %s at %x in %s' % (label, nl, a, describe(mp)))
        for nl, a, mp, dd in protected:
            log('%s: (not dumped) %s at %x in %s' % (label, nl, a, describe(mp)))
        for nl, _ in secret_set:
            ck.eq('%s: %s in dumpable memory' % (label, nl),
                  sum(1 for h in dumped if h[0] == nl), 0)
        for nl, _ in controls:
            where = [describe(h[2]) for h in dumped if h[0] == nl]
            log('%s: control %s found %d times in dumpable memory' % (label, nl, len(where)))
            ck.ok(where, '%s: the scanner did not find the control %s in memory: it is broken'
                  % (label, nl))
            if nl == 'access key id':
                ck.ok(any(h[2]['path'] != '[stack]' for h in dumped if h[0] == nl),
                      '%s: the access key id was not found off the main stack (heap unread?)'
                      % label)

        # (c) a real core (not of sanitizer builds: gdb takes minutes over their mappings)
        core = None
        if san:
            log('%s: %s build: gcore skipped' % (label, san))
        elif not real_core:
            log('%s: gcore skipped (the simulated core above covers this case)' % label)
        else:
            core = gcore(env, ck, pid)
        if core:
            size = os.path.getsize(core)
            ch = scan_file(core, everything)
            log('%s: gcore core of %.1f MB: %r' % (label, size / 1e6, ch))
            for nl, nd in secret_set:
                if ch.get(nl):
                    for off in core_offsets(core, nd):
                        log('%s: LEAK %s in the core at %s' % (label, nl, core_where(core, off)))
            os.unlink(core)
            for nl, _ in secret_set:
                ck.eq('%s: %s in the gcore core' % (label, nl), ch.get(nl, 0), 0)
            for nl, _ in controls:
                ck.ok(ch.get(nl, 0) > 0, '%s: control %s not in the gcore core' % (label, nl))
            ck.ok(ml.pid_alive(pid), '%s: the daemon died under gcore' % label)

        # (d) logs, control files, commands
        texts = {}
        for name in ('stats', 'metrics'):
            with open(os.path.join(m.mnt, '.shardfs', name), 'rb') as f:
                texts['.shardfs/' + name] = f.read()
        for cmd in (['stats', m.mnt], ['--help'], ['mount', '--help']):
            r = env.run([env.shardfs] + cmd)
            texts['shardfs ' + ' '.join(cmd[:1])] = r.stdout + r.stderr
        for what, data in texts.items():
            ck.ok(len(data) > 0, '%s: %s is empty' % (label, what))
            for nl, nd in secret_set:
                ck.eq('%s: %s in %s' % (label, nl, what), count_in(data, nd), 0)
        # the read above touched the mount; still idle before unmount
        wait_idle(m)
    # after unmount: the log and everything else the daemon wrote
    nfiles = 0
    saw_log = False
    for root, _, names in os.walk(cache):
        for name in names:
            p = os.path.join(root, name)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            nfiles += 1
            saw_log = saw_log or name == 'log'
            fh = scan_file(p, secret_set)
            for nl, c in fh.items():
                ck.fail('%s: %s found %d times in %s' % (label, nl, c, p))
    log('%s: searched %d files of the cache dir' % (label, nfiles))
    ck.ok(saw_log, '%s: no daemon log found in %s' % (label, cache))


def rand(n=24):
    return secrets.token_hex(n // 2)


def group_creds(env, ck):
    src, files, _ = s3world.build_source(env)
    akid = 'SHARDFSAKID' + rand(16).upper()
    secret = 'SHARDFS-SECRET-' + rand(32)
    token = 'SHARDFS-TOKEN-' + rand(48)
    p_akid = 'SHARDFSPROF' + rand(16).upper()
    p_secret = 'SHARDFS-PSECRET-' + rand(32)
    p_token = 'SHARDFS-PTOKEN-' + rand(48)
    decoy = 'SHARDFS-DECOY-' + rand(32)
    g_akid = 'SHARDFSGOOG' + rand(16).upper()
    g_secret = 'SHARDFS-GSECRET-' + rand(32)
    marker = 'SHARDFS-MARKER-' + rand(32)

    s3 = s3servers.S3rver(env.tmp)
    proxy = s3servers.SigV4Proxy(s3.port, {akid: (secret, token), p_akid: (p_secret, p_token),
                                         g_akid: (g_secret, None)})

    class World:
        pass
    world = World()
    world.s3, world.proxy = s3, proxy
    world.endpoint = 'http://127.0.0.1:%d' % proxy.port
    try:
        s3.create_bucket(BUCKET)
        for rel in files:
            with open(os.path.join(src, rel), 'rb') as f:
                s3.put(BUCKET, PREFIX + rel, f.read())
        src_uri = 's3://%s/%s' % (BUCKET, PREFIX)
        env.env['SHARDFS_TEST_MARKER'] = marker
        every = (secret_needles('secret', secret, 'us-east-1', 's3') +
                 token_needles('session token', token) +
                 secret_needles('profile secret', p_secret, 'us-east-1', 's3') +
                 token_needles('profile session token', p_token) +
                 token_needles('decoy secret', decoy) +
                 secret_needles('gcs secret', g_secret, 'auto', 's3'))

        # 1. the environment
        s3world.set_aws_env(env, key=akid, secret=secret, token=token)
        run_case(env, ck, world, 'env', src_uri, every,
                 [('marker', marker.encode()), ('access key id', akid.encode())])

        # 2. a profile of ~/.aws/credentials (HOME), with a decoy profile read but not used
        s3world.set_aws_env(env, key=None, secret=None)
        awsdir = os.path.join(env.env['HOME'], '.aws')
        os.makedirs(awsdir, exist_ok=True)
        with open(os.path.join(awsdir, 'credentials'), 'w') as f:
            f.write('[default]\naws_access_key_id = NOBODY\naws_secret_access_key = %s\n\n'
                    '[shardfs]\naws_access_key_id = %s\naws_secret_access_key = %s\n'
                    'aws_session_token = %s\n' % (decoy, p_akid, p_secret, p_token))
        env.env['AWS_PROFILE'] = 'shardfs'
        run_case(env, ck, world, 'profile', src_uri, every,
                 [('marker', marker.encode()), ('access key id', p_akid.encode())])
        del env.env['AWS_PROFILE']

        # 3. gs:// with HMAC keys
        s3world.set_aws_env(env, key=None, secret=None)
        os.unlink(os.path.join(awsdir, 'credentials'))
        env.env['GCS_HMAC_ACCESS_ID'] = g_akid
        env.env['GCS_HMAC_SECRET'] = g_secret
        run_case(env, ck, world, 'gs', 'gs://%s/%s' % (BUCKET, PREFIX), every,
                 [('marker', marker.encode()), ('access key id', g_akid.encode())])
        s3world.check_proxy(ck, world, 'creds')

        # 4. temporary credentials from the loopback stand-ins (cloudmeta)
        more = []

        def preset(tag):
            c = ('SHARDFS%s' % tag + rand(12).upper(), 'SHARDFS-%sSECRET-' % tag + rand(32),
                 'SHARDFS-%sTOKEN-' % tag + rand(48))
            proxy.keys[c[0]] = (c[1], c[2])
            more.extend(secret_needles('%s secret' % tag, c[1], 'us-east-1', 's3') +
                        token_needles('%s session token' % tag, c[2]))
            return c
        imds_c, sts_c, ecs_c = preset('IMDS'), preset('STS'), preset('ECS')
        imds_session = 'SHARDFS-IMDSSESSION-' + rand(40)
        web_token = 'SHARDFS-WEBID-' + rand(64)
        ecs_auth = 'SHARDFS-ECSAUTH-' + rand(40)
        more += (token_needles('imds session token', imds_session) +
                 token_needles('web identity token', web_token) +
                 token_needles('container authorization token', ecs_auth))
        every2 = every + more
        del env.env['GCS_HMAC_ACCESS_ID'], env.env['GCS_HMAC_SECRET']
        s3world.set_aws_env(env, key=None, secret=None)
        imds = cloudmeta.Imds(session=imds_session, preset=[imds_c])
        try:
            env.env.pop('AWS_EC2_METADATA_DISABLED', None)
            env.env['AWS_EC2_METADATA_SERVICE_ENDPOINT'] = imds.url()
            run_case(env, ck, world, 'imds', src_uri, every2,
                     [('marker', marker.encode()), ('access key id', imds_c[0].encode())])
        finally:
            imds.stop()
        s3world.set_aws_env(env, key=None, secret=None)
        arn = 'arn:aws:iam::123456789012:role/shardfs'
        sts = cloudmeta.Sts(arn, web_token, preset=[sts_c])
        tf = env.path('web-token')
        with open(tf, 'w') as f:
            f.write(web_token)
        env.env.update(AWS_WEB_IDENTITY_TOKEN_FILE=tf, AWS_ROLE_ARN=arn,
                       AWS_ENDPOINT_URL_STS=sts.url())
        try:
            run_case(env, ck, world, 'webid', src_uri, every2,
                     [('marker', marker.encode()), ('access key id', sts_c[0].encode())],
                     real_core=False)
        finally:
            sts.stop()
        s3world.set_aws_env(env, key=None, secret=None)
        ecs = cloudmeta.Container(ecs_auth, preset=[ecs_c])
        env.env.update(AWS_CONTAINER_CREDENTIALS_FULL_URI=ecs.url() + ecs.PATH,
                       AWS_CONTAINER_AUTHORIZATION_TOKEN=ecs_auth)
        try:
            run_case(env, ck, world, 'container', src_uri, every2,
                     [('marker', marker.encode()), ('access key id', ecs_c[0].encode())],
                     real_core=False)
        finally:
            ecs.stop()
        s3world.set_aws_env(env, key=None, secret=None)

        # 5. a local source: secrets in the environment leave it all the same
        s3world.set_aws_env(env, key=akid, secret=secret, token=token)
        with ml.Mount(env, src, cache_dir=env.path('cache-local')) as m:
            n = read_everything(m.mnt)
            pid = m.stats().get('pid')
            with open('/proc/%d/environ' % pid, 'rb') as f:
                data = f.read()
            ck.ok(count_in(data, marker.encode()) > 0, 'local: marker not in environ')
            for nl, nd in (('secret', secret.encode()), ('session token', token.encode())):
                ck.eq('local: %s in /proc/PID/environ' % nl, count_in(data, nd), 0)
            if not sanitizer_runtime(pid):  # (their runtime copies the startup environment)
                hits, _ = scan_memory(pid, [('secret', secret.encode()),
                                            ('session token', token.encode()),
                                            ('marker', marker.encode())])
                dumped = [h[0] for h in hits if not h[3]]
                ck.ok('marker' in dumped, 'local: the scanner did not find the marker')
                ck.eq('local: secrets in dumpable memory',
                      sorted(x for x in dumped if x != 'marker'), [])
            log('local: read %d files; environ and memory checked' % n)
    finally:
        proxy.stop()
        s3.stop()


# ---------------------------------------------------------------------------------------------
# Credential helpers that do not answer
# ---------------------------------------------------------------------------------------------

GUARD_S = ml.POLL_TIMEOUT  # only against a hang: every wait below ends on a condition

HELPER_NEVER = r"""#!/bin/sh
# a credential_process that never answers, with a child of its own
echo $$ > "%(dir)s/helper.pid"
sleep 3600 &
echo $! > "%(dir)s/helper-child.pid"
wait
"""
HELPER_FIFO = r"""#!/bin/sh
# a credential_process that answers once the test writes a line to its FIFO
echo $$ > "%(dir)s/helper.pid"
read go < "%(dir)s/fifo"
printf '{"Version": 1, "AccessKeyId": "%(key)s", "SecretAccessKey": "%(secret)s"}\n'
"""
HELPER_NOW = r"""#!/bin/sh
printf '{"Version": 1, "AccessKeyId": "%(key)s", "SecretAccessKey": "%(secret)s"}\n'
"""
# helpers that answer wrongly, and what the mount's error must say after the program's name
HELPERS_BAD = [
    ('status', '#!/bin/sh\necho \'{"Version": 1}\'\nexit 3\n', 'exited with status 3'),
    ('version', '#!/bin/sh\nprintf \'{"Version": 2, "AccessKeyId": "%(key)s", '
     '"SecretAccessKey": "%(secret)s"}\\n\'\n', 'Version 2 is not 1'),
    ('toobig', '#!/bin/sh\nhead -c 70000 /dev/zero | tr "\\\\0" x\n',
     'printed more than 65536 bytes'),
]
# out=$(shardfs mount ...) as a script would run it; prints the exit status, then the output
CAPTURE = 'exe=$1; shift; out=$("$exe" mount "$@" 2>&1); rc=$?; printf "rc=%d\\n%s\\n" "$rc" "$out"'


def helper_world(env):
    """s3rver + proxy with the source uploaded, the AWS keys unset: the chain reaches the
    profile's credential_process before any request."""
    src, files, _ = s3world.build_source(env)
    w = s3world.World(env)
    w.upload(s3world.BUCKET, s3world.PREFIX, src, files)
    s3world.set_aws_env(env, key=None, secret=None)
    return w, src


def use_helper(env, name, text):
    """A credential_process script (text with %(dir)s, %(key)s, %(secret)s) as the default
    profile's, in a directory of its own. Returns that directory."""
    d = env.path('helper-' + name)
    os.makedirs(d)
    script = os.path.join(d, 'helper.sh')
    with open(script, 'w') as f:
        f.write(text % {'dir': d, 'key': s3world.KEY, 'secret': s3world.SECRET})
    os.chmod(script, 0o755)
    awsdir = os.path.join(env.env['HOME'], '.aws')
    os.makedirs(awsdir, exist_ok=True)
    with open(os.path.join(awsdir, 'config'), 'w') as f:
        f.write('[default]\nregion = us-east-1\ncredential_process = %s --profile default\n'
                % script)
    return d


def pid_in(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or 0) or None
    except OSError:
        return None


def read_to_eof(fd, guard):
    """Everything readable from fd until end of file, for at most guard seconds: (bytes, eof)."""
    import select
    out, end = b'', time.monotonic() + guard
    while time.monotonic() < end:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            b = os.read(fd, 65536)
            if not b:
                return out, True
            out += b
    return out, False


def captured_mount(env, args, label):
    """Run out=$(shardfs mount ARGS 2>&1) in sh, with sh's stdout a pipe read to end of file.
    Returns (exit status of shardfs mount or None, its output, whether the pipe ended)."""
    p = subprocess.Popen(['sh', '-c', CAPTURE, 'sh', env.shardfs] + args,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, env=env.env)
    out, eof = read_to_eof(p.stdout.fileno(), GUARD_S)
    text = out.decode(errors='replace')
    log('%s: out=$(shardfs mount ...) %s: %r' % (label, 'returned' if eof else
                                                'STILL OPEN after %d s' % GUARD_S, text))
    if not eof:
        return None, text, p
    p.stdout.close()
    p.wait(timeout=GUARD_S)
    m = re.match(r'rc=(\d+)\n', text)
    return (int(m.group(1)) if m else None), text, None


def left_behind(env, ck, label, mnt, helpers, hung=None):
    """No mount on mnt, no daemon of it and no helper process (pids) left (the helpers are
    given GUARD_S to go: a killed process ends asynchronously); kills what is left."""
    daemons = ml.daemons_for(env.shardfs, mnt)
    ck.ok(not ml.is_mounted(mnt), '%s: %s is mounted' % (label, mnt))
    ck.eq('%s: daemons left' % label, daemons, [])
    ml.kill_pids(daemons, grace=0)
    for pid in helpers:
        if pid:
            ml.poll(lambda: not ml.pid_alive(pid), GUARD_S)
            ck.ok(not ml.pid_alive(pid), '%s: helper process %d left running' % (label, pid))
            if ml.pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
    if ml.is_mounted(mnt):
        env.run(['fusermount3', '-u', '-z', mnt], timeout=ml.UMOUNT_TIMEOUT)
    if hung:
        hung.kill()
        hung.wait()


def group_helper_timeout(env, ck):
    w, src = helper_world(env)
    uri = 's3://%s/%s' % (s3world.BUCKET, s3world.PREFIX)
    try:
        # a helper that never answers: the mount fails at the bound, and nothing holds the pipe
        d = use_helper(env, 'never', HELPER_NEVER)
        mnt = env.path('mnt-never')
        os.makedirs(mnt)
        rc, out, hung = captured_mount(env, ['--cache-dir', env.path('cache-never'),
                                             '--endpoint', w.endpoint, '--credential-timeout', '1',
                                             uri, mnt], 'never')
        ck.ok(hung is None, 'never: out=$(shardfs mount ...) did not return within %d s (the '
              'helper never answers)' % GUARD_S)
        ck.eq('never: exit status of shardfs mount', rc, 1 if hung is None else None)
        for word in ('credential_process (profile default)', os.path.join(d, 'helper.sh'),
                     'within 1 s', '--credential-timeout'):
            ck.ok(word in out, 'never: the error does not say %r: %r' % (word, out))
        ck.ok('--profile' not in out, 'never: the error shows the helper\'s arguments: %r' % out)
        left_behind(env, ck, 'never', mnt, [pid_in(os.path.join(d, 'helper.pid')),
                                            pid_in(os.path.join(d, 'helper-child.pid'))], hung)

        # helpers that answer wrongly: each mount fails at once, naming the program and why
        for name, text, why in HELPERS_BAD:
            use_helper(env, name, text)
            mnt = env.path('mnt-' + name)
            os.makedirs(mnt)
            rc, out, hung = captured_mount(env, ['--cache-dir', env.path('cache-' + name),
                                                 '--endpoint', w.endpoint, uri, mnt], name)
            ck.ok(hung is None, '%s: out=$(shardfs mount ...) did not return within %d s'
                  % (name, GUARD_S))
            ck.eq('%s: exit status of shardfs mount' % name, rc, 1 if hung is None else None)
            ck.ok('helper.sh: ' + why in out or 'helper.sh ' + why in out,
                  '%s: the error does not say %r: %r' % (name, why, out))
            ck.ok('--profile' not in out, '%s: the error shows the helper\'s arguments: %r'
                  % (name, out))
            left_behind(env, ck, name, mnt, [], hung)

        # a web identity token file that is a FIFO nobody writes to: refused, not waited on
        fifo = env.path('token-fifo')
        os.mkfifo(fifo)
        webid = dict(AWS_WEB_IDENTITY_TOKEN_FILE=fifo, AWS_ROLE_ARN='arn:aws:iam::1:role/r',
                     AWS_ENDPOINT_URL_STS='http://127.0.0.1:9')
        env.env.update(webid)
        mnt = env.path('mnt-fifo')
        os.makedirs(mnt)
        rc, out, hung = captured_mount(env, ['--cache-dir', env.path('cache-fifo'), '--endpoint',
                                             w.endpoint, uri, mnt], 'fifo token')
        for k in webid:
            del env.env[k]
        ck.ok(hung is None, 'fifo token: out=$(shardfs mount ...) did not return within %d s (a '
              'FIFO as AWS_WEB_IDENTITY_TOKEN_FILE)' % GUARD_S)
        ck.eq('fifo token: exit status of shardfs mount', rc, 1 if hung is None else None)
        ck.ok('AWS_WEB_IDENTITY_TOKEN_FILE %s: not a regular file' % fifo in out,
              'fifo token: the error does not say the token file is no regular file: %r' % out)
        left_behind(env, ck, 'fifo token', mnt, [], hung)

        # a helper that answers at once: out=$(shardfs mount ...) returns, the mount serves
        use_helper(env, 'now', HELPER_NOW)
        mnt = env.path('mnt-now')
        os.makedirs(mnt)
        m = ml.Mount(env, uri, mountpoint=mnt)  # for the cleanup
        env.mounts.append(m)
        rc, out, hung = captured_mount(env, ['--cache-dir', env.path('cache-now'), '--endpoint',
                                             w.endpoint, '--warm', 'off', uri, mnt], 'now')
        ck.ok(hung is None, 'now: out=$(shardfs mount ...) did not return within %d s' % GUARD_S)
        ck.eq('now: exit status of shardfs mount', rc, 0)
        ck.ok('credentials from credential_process (profile default)' in out,
              'now: the mount does not say where its credentials came from: %r' % out)
        if ml.is_mounted(mnt):
            with open(os.path.join(mnt, 'README.txt'), 'rb') as f, \
                    open(os.path.join(src, 'README.txt'), 'rb') as g:
                ck.eq('now: README.txt through the mount', f.read(), g.read())
        else:
            ck.fail('now: not mounted')
        if hung:
            hung.kill()
            hung.wait()
        m.umount()
    finally:
        w.stop()


def group_helper_interrupt(env, ck):
    w, _ = helper_world(env)
    uri = 's3://%s/%s' % (s3world.BUCKET, s3world.PREFIX)
    try:
        for sig in (signal.SIGINT, signal.SIGKILL):
            label = sig.name
            d = use_helper(env, label, HELPER_FIFO)
            fifo = os.path.join(d, 'fifo')
            os.mkfifo(fifo)
            mnt = env.path('mnt-' + label)
            os.makedirs(mnt)
            cmd = [env.shardfs, 'mount', '--cache-dir', env.path('cache-' + label),
                   '--endpoint', w.endpoint, '--warm', 'off', uri, mnt]
            log('$ %s   (then %s)' % (' '.join(cmd), label))
            with open(env.path('mount-%s.out' % label), 'wb') as f:
                p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                                     env=env.env,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                      signal.SIG_DFL))
            helper = ml.poll(lambda: pid_in(os.path.join(d, 'helper.pid')), GUARD_S,
                             what='the credential_process to start')
            daemons = [x for x in ml.daemons_for(env.shardfs, mnt) if x != p.pid]
            log('%s: helper pid %d, daemon %r, shardfs mount %d' % (label, helper, daemons,
                                                                   p.pid))
            ck.eq('%s: daemons waiting for the helper' % label, len(daemons), 1)
            p.send_signal(sig)
            rc = p.wait(timeout=GUARD_S)
            log('%s: shardfs mount ended: %r' % (label, rc))
            ck.ok(rc != 0, '%s: shardfs mount exited 0' % label)
            # release the helper, if it still waits: it then answers. The daemon may end it
            # at any moment, before the open (ENXIO) or between the open and the write (EPIPE).
            fd = None
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                os.write(fd, b'go\n')
                log('%s: helper released' % label)
            except OSError as e:
                if e.errno not in (errno.ENXIO, errno.EPIPE):
                    raise
                log('%s: the helper is gone already (%s)' % (label, errno.errorcode[e.errno]))
            finally:
                if fd is not None:
                    os.close(fd)
            # the daemon ends, or makes the mount nobody waits for any more
            ml.poll(lambda: ml.is_mounted(mnt) or not any(ml.pid_alive(x) for x in daemons),
                    GUARD_S)
            ck.ok(not ml.is_mounted(mnt), '%s: the mount appeared after shardfs mount had '
                  'ended' % label)
            ck.eq('%s: daemons alive' % label, [x for x in daemons if ml.pid_alive(x)], [])
            left_behind(env, ck, label, mnt, [helper])
    finally:
        w.stop()


def group_index_interrupt(env, ck):
    w, _ = helper_world(env)
    uri = 's3://%s/%s' % (s3world.BUCKET, s3world.PREFIX)
    try:
        d = use_helper(env, 'index', HELPER_NEVER)
        cmd = [env.shardfs, 'index', '--cache-dir', env.path('cache-index'), '--endpoint',
               w.endpoint, uri]
        log('$ %s   (then SIGINT)' % ' '.join(cmd))
        with open(env.path('index.out'), 'wb') as f:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=f, env=env.env,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        # the helper's child is there: the helper runs, and index waits for it
        child = ml.poll(lambda: pid_in(os.path.join(d, 'helper-child.pid')), GUARD_S,
                        what='the credential_process to start its child')
        helper = pid_in(os.path.join(d, 'helper.pid'))
        log('index: helper pid %r, its child %r, shardfs index %d' % (helper, child, p.pid))
        ck.ok(p.poll() is None, 'index: shardfs index ended before the helper answered')
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=GUARD_S)
        log('index: shardfs index ended: %r' % rc)
        ck.eq('index: exit status of shardfs index after SIGINT', rc, 128 + signal.SIGINT)
        for label, pid in (('helper', helper), ('helper\'s child', child)):
            ml.poll(lambda: not ml.pid_alive(pid), GUARD_S)
            ck.ok(not ml.pid_alive(pid), 'index: the %s (pid %d) outlived shardfs index'
                  % (label, pid))
            if ml.pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
    finally:
        w.stop()


GROUPS = {'creds': (group_creds, 560), 'helper-timeout': (group_helper_timeout, 200),
          'helper-interrupt': (group_helper_interrupt, 200),
          'index-interrupt': (group_index_interrupt, 200)}


def main():
    shardfs = sys.argv[1]
    group = sys.argv[2] if len(sys.argv) > 2 else 'creds'
    if group not in GROUPS or len(sys.argv) > 3:
        print(__doc__)
        sys.exit(2)
    if not s3servers.have_s3rver():
        ml.skip_exit('s3rver is not installed (sh tests/remote/s3/install-s3rver.sh)')
    fn, deadline = GROUPS[group]
    ml.main_wrapper(fn, shardfs, 'remote-creds' if group == 'creds' else 'creds-' + group,
                    deadline=deadline)


if __name__ == '__main__':
    main()
