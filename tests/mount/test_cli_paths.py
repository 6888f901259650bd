#!/usr/bin/python3
"""shardfs mount tests: the client commands' arguments and messages (fs/cli, fs/tools).

usage: test_cli_paths.py SHARDFS GROUP
GROUP:
  noargs    --help, -h, help, --version and -V take nothing after them: each given an extra
            argument exits 2 with one line on stderr, nothing on stdout; alone, exit 0. The
            client commands' --help given more (stats, refresh, prefetch, plan, umount): exit 2,
            nothing on stdout. Before: 'shardfs --version extra' printed the version, exit 0.
            mount, index and pack given anything after --help or -h: exit 2, one exact line,
            nothing on stdout; a command line that ends in --help (alone, or after a SOURCE)
            shows the help, exit 0. Before: the help was printed, exit 0.
  paths     a seeded generated class of hostile paths (empty, a newline, a tab, a control byte,
            0x7f, a backslash, bytes that are not UTF-8, UTF-8 kept as is, a component over
            NAME_MAX, a path over PATH_MAX; some made as directories) given to every client
            command as its MOUNTPOINT (stats, refresh, prefetch, umount, plan) and as a PATH
            of 'shardfs prefetch' and the FILE of 'shardfs plan' of a running mount: each
            exits 1 with its exact one-line stderr, the path quoted by fs_quote's rule (the
            same rule rewritten here), an empty one named ("MOUNTPOINT is an empty path");
            nothing fetched, no prefetch run begun. SHARDFS_TEST_SEED replays another class.
            Before: "shardfs: : No such file or directory", raw newlines in messages.
  rate      'shardfs prefetch' of small shards over nginx, one command a shard: no rate it
            prints is 0.0 (a rate over a time that rounds to 0): a fast fill says "N fetched
            in under 0.1 s", a slower one a rate that is not 0.
  precheck  'shardfs prefetch MNT GOOD TYPO' (and an empty PATH, a PATH outside the mount)
            fails at once: exit 1, one stderr line a bad PATH, nothing on stdout, no prefetch
            run begun (prefetch_run), nothing fetched. Before: GOOD was prefetched.
Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""
import os
import random
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import web  # noqa: E402

log = ml.log

QUOTE_MAX = 512  # FS_QUOTE_MAX (fs/tools/fs_tools.h)
PATHS = 24  # generated hostile paths


def quote(b):
    """fs_quote (fs/core/fs_log.c) of the bytes b, rewritten from its contract."""
    if not b:
        return b"''"
    units = []
    for ch in b.decode('utf-8', errors='surrogateescape'):
        c = ord(ch)
        if ch == '\\':
            units.append(b'\\\\')
        elif ch in '\n\t\r':
            units.append(b'\\' + {'\n': b'n', '\t': b't', '\r': b'r'}[ch])
        elif c < 0x20 or c == 0x7f:
            units.append(b'\\x%02x' % c)
        elif 0xdc80 <= c <= 0xdcff:
            units.append(b'\\x%02x' % (c - 0xdc00))
        else:
            units.append(ch.encode('utf-8'))
    out, cut = b'', 0
    for u in units:
        if len(out) + len(u) >= QUOTE_MAX:
            return out[:cut] + b'...(%d bytes)' % len(b)
        out += u
        if len(out) + 32 < QUOTE_MAX:
            cut = len(out)
    return out


FRAGMENTS = [b'\n', b'\t', b'\r', b'\x01', b'\x1b[31m', b'\x7f', b'\\', b'\xff\xfe',
             b'\xe0\x80', b'\xc3\xa9', b'a b', b'\xed\xa0\x80']


def gen_paths(env, rng):
    """[(bytes path, made)]: the empty path first, then PATHS generated ones (some made as
    directories under env.tmp)."""
    base = os.fsencode(env.path('hostile'))
    os.makedirs(base, exist_ok=True)
    out = [(b'', False)]
    for i in range(PATHS):
        kind = rng.randrange(10)
        if kind == 0:
            name = b'n' * rng.randrange(256, 400)  # one component over NAME_MAX
        elif kind == 1:
            name = b'/'.join([b'd' * 200] * rng.randrange(21, 30))  # over PATH_MAX
        else:
            name = b'p%d' % i
            for _ in range(rng.randrange(1, 4)):
                f = rng.choice(FRAGMENTS)
                at = rng.randrange(len(name) + 1)
                name = name[:at] + f + name[at:]
        path = name if rng.randrange(3) == 0 and kind > 1 else base + b'/' + name
        made = kind > 1 and path.startswith(b'/') and rng.randrange(3) == 0
        if made:
            os.makedirs(path)
        out.append((path, made))
    return out


def one_line(ck, label, r, rc, want):
    err = r.stderr
    log('%s: rc=%r %r' % (label, r.returncode, err[:300]))
    ck.eq('%s: exit' % label, r.returncode, rc)
    ck.eq('%s: stderr' % label, err, want)
    ck.eq('%s: stdout' % label, r.stdout, b'')


def group_noargs(env, ck):
    for flag in ('--help', '-h', 'help', '--version', '-V'):
        r = env.run([env.shardfs, flag])
        ck.eq('%s: exit' % flag, r.returncode, 0)
        ck.ok(r.stdout, '%s: says something' % flag)
        for extra in (b'extra', b'--', b'', b'a\nb'):
            r = env.run([os.fsencode(env.shardfs), flag.encode(), extra])
            one_line(ck, '%s %r' % (flag, extra), r, 2,
                     b'shardfs: %s takes no arguments (given %s)\n' % (flag.encode(),
                                                                       quote(extra)))
    for cmd in ('stats', 'refresh', 'prefetch', 'plan', 'umount'):
        for args in (['--help', 'x'], ['-h', 'x'], ['--help', '--help']):
            r = env.run([env.shardfs, cmd] + args)
            log('%s %s: rc=%r %r' % (cmd, args, r.returncode, r.stderr))
            ck.eq('%s %s: exit' % (cmd, ' '.join(args)), r.returncode, 2)
            ck.eq('%s %s: stdout' % (cmd, ' '.join(args)), r.stdout, b'')
            ck.ok(r.stderr.startswith(b'usage: shardfs %s ' % cmd.encode()),
                  '%s %s: the usage said: %r' % (cmd, ' '.join(args), r.stderr))
    for cmd in (b'mount', b'index', b'pack'):
        for args in ([b'--help', b'x'], [b'-h', b'x'], [b'--help', b'--help'], [b'-h', b''],
                     [b'--help', b'a\nb'], [b'x', b'--help', b'y']):
            h = [a for a in args if a in (b'--help', b'-h')][0]
            r = env.run([os.fsencode(env.shardfs), cmd] + args)
            one_line(ck, '%s %r' % (cmd.decode(), args), r, 2,
                     b"shardfs: %s: %s takes no arguments after it (see 'shardfs %s --help')\n"
                     % (cmd, h, cmd))
        for args in ([b'--help'], [b'-h'], [b'x', b'--help']):
            r = env.run([os.fsencode(env.shardfs), cmd] + args)
            ck.eq('%s %r: exit' % (cmd.decode(), args), (r.returncode, r.stderr), (0, b''))
            ck.ok(r.stdout.startswith(b'usage: shardfs %s ' % cmd),
                  '%s %r: the help: %r' % (cmd.decode(), args, r.stdout[:200]))
    r = env.run([env.shardfs, ''])
    one_line(ck, "shardfs ''", r, 2, b"shardfs: COMMAND is empty (see 'shardfs --help')\n")
    r = env.run([os.fsencode(env.shardfs), b'st\nats'])
    one_line(ck, 'shardfs st\\nats', r, 2,
             b"shardfs: unknown command 'st\\nats' (see 'shardfs --help')\n")


def nginx_source(env, n, size):
    src = env.path('src')
    os.makedirs(src)
    for i in range(n):
        with open(os.path.join(src, 's%d.tar' % i), 'wb') as f:
            f.write(ml.tar_bytes([('m%d.bin' % i, bytes([65 + i % 26]) * (size + i))]))
    os.chmod(env.tmp, 0o755)
    os.chmod(src, 0o755)
    return src, web.Nginx(env.path('nginx'), src).start()


def remote_mount(env, ng):
    return ml.Mount(env, ng.url('json/'), cache_dir=env.path('cache'),
                    extra=['--warm', 'off', '--prefetch-shards', '0'])


def mount_word(path, made):
    """What a client command says of the MOUNTPOINT path (no mount there)."""
    if not path:
        return b'shardfs: MOUNTPOINT is an empty path\n'
    if made:
        return b'shardfs: %s is not a shardfs mount\n' % quote(path)
    name_max = any(len(c) > 255 for c in path.split(b'/'))
    why = b'File name too long' if name_max or len(path) >= 4096 else \
        b'No such file or directory'
    return b'shardfs: %s: %s\n' % (quote(path), why)


def group_paths(env, ck):
    rng = random.Random(env.seed)
    log('hostile paths: seed %d (SHARDFS_TEST_SEED), %d paths' % (env.seed, PATHS))
    paths = gen_paths(env, rng)
    base = os.fsencode(env.path('hostile'))
    sh = os.fsencode(env.shardfs)
    plan = env.path('plan.txt')
    with open(plan, 'w') as f:
        f.write('s0/m0.bin\n')
    src, ng = nginx_source(env, 2, 5000)
    try:
        with remote_mount(env, ng) as m:
            mnt = os.fsencode(os.path.realpath(m.mnt))
            run0 = m.stats()['prefetch_run']
            for k, (p, made) in enumerate(paths):
                label = '#%d %r' % (k, p[:60])
                for cmd in ([b'stats', p], [b'refresh', p], [b'prefetch', p], [b'umount', p],
                            [b'plan', p, os.fsencode(plan)]):
                    r = env.run([sh] + cmd)
                    one_line(ck, '%s %s' % (cmd[0].decode(), label), r, 1, mount_word(p, made))
                # a PATH of 'shardfs prefetch' of the running mount
                r = env.run([sh, b'prefetch', mnt, p])
                if not p:
                    want = (b'shardfs: prefetch: an empty PATH names nothing in the mount '
                            b'(give no PATH to prefetch everything)\n')
                elif made:
                    want = b"shardfs: prefetch %s: outside the mount %s, and no '%s' in it\n" % (
                        quote(p), quote(mnt), quote(p.lstrip(b'/')))
                else:
                    # the kernel's lookup fails at the first component the mount lacks
                    rel = p.lstrip(b'/')
                    long_ = len(rel.split(b'/')[0]) > 255 or len(mnt) + 1 + len(rel) >= 4096
                    want = b'shardfs: prefetch %s: %s\n' % (
                        quote(p), b'File name too long' if long_ else
                        b'no such file or directory in the mount')
                one_line(ck, 'prefetch MNT %s' % label, r, 1, want)
                # the FILE of 'shardfs plan'
                r = env.run([sh, b'plan', mnt, p])
                if not p:
                    want = b'shardfs plan: FILE is an empty path\n'
                else:
                    # realpath fails at the first component that is not there
                    first = (p[len(base) + 1:] if p.startswith(base + b'/') else p).split(b'/')[0]
                    long_ = len(first) > 255
                    want = b'shardfs plan: cannot read the plan file %s: %s\n' % (
                        quote(p), b'File name too long' if long_ else
                        b'Is a directory' if made else b'No such file or directory')
                    if made:
                        want = None  # a directory: the mount's refusal, said elsewhere
                if want is not None:
                    one_line(ck, 'plan MNT %s' % label, r, 1, want)
                else:
                    ck.eq('plan MNT %s: exit' % label, r.returncode, 1)
                    ck.eq('plan MNT %s: one line' % label, r.stderr.count(b'\n'), 1)
            st = m.stats()
            ck.eq('no prefetch run begun', st['prefetch_run'], run0)
            ck.eq('nothing fetched', st['bytes_fetched'], 0)
            ck.eq('still mounted', ml.is_mounted(m.mnt), True)
    finally:
        ng.stop()


RATE = re.compile(r'^prefetch: \S+ \S+ of \S+ \S+ cached(, (.*))?$')


def group_rate(env, ck):
    n = 12
    src, ng = nginx_source(env, n, 3000)
    try:
        with remote_mount(env, ng) as m:
            for i in range(n):
                r = env.run([env.shardfs, 'prefetch', m.mnt, 's%d.tar' % i])
                out = r.stdout.decode(errors='replace')
                log('prefetch s%d.tar: rc=%r %r' % (i, r.returncode, out))
                ck.eq('s%d.tar: exit' % i, r.returncode, 0)
                rates = []
                for line in out.splitlines():
                    g = RATE.match(line)
                    if g and g.group(2):
                        rates.append(g.group(2))
                ck.ok(rates, 's%d.tar: a progress line with a rate: %r' % (i, out))
                for rate in rates:
                    ok = (re.fullmatch(r'\S+ \S+ fetched in under 0\.1 s', rate) or
                          re.fullmatch(r'\d+\.\d (MB|kB)/s|\d+ B/s', rate) or
                          rate in ('waiting for the store', 'already cached'))
                    ck.ok(ok and not re.match(r'0(\.0)? ', rate),
                          's%d.tar: an honest rate: %r' % (i, rate))
    finally:
        ng.stop()


def group_precheck(env, ck):
    src, ng = nginx_source(env, 3, 70000)
    other = env.path('other')
    os.makedirs(other)
    try:
        with remote_mount(env, ng) as m:
            mnt = os.path.realpath(m.mnt)
            run0 = m.stats()['prefetch_run']
            cases = [
                (['s0.tar', 'nonexist'],
                 'shardfs: prefetch nonexist: no such file or directory in the mount\n'),
                (['s0.tar', 's1/nope', 's2.tar'],
                 'shardfs: prefetch s1/nope: no such file or directory in the mount\n'),
                (['', 's0.tar'],
                 'shardfs: prefetch: an empty PATH names nothing in the mount (give no PATH '
                 'to prefetch everything)\n'),
                ([os.path.join(m.mnt, 's0'), other],
                 "shardfs: prefetch %s: outside the mount %s, and no '%s' in it\n"
                 % (other, mnt, other.lstrip('/'))),
                (['s0.tar', 'x1', 'x2'],
                 'shardfs: prefetch x1: no such file or directory in the mount\n'
                 'shardfs: prefetch x2: no such file or directory in the mount\n'),
            ]
            s1 = os.path.getsize(os.path.join(src, 's1.tar'))
            for paths, want in cases:
                label = 'prefetch MNT %s' % ' '.join(repr(p) for p in paths)
                f0 = m.stats()['bytes_fetched']
                r = env.run([env.shardfs, 'prefetch', m.mnt] + paths)
                one_line(ck, label, r, 1, want.encode())
                st = m.stats()
                ck.eq('%s: no prefetch run begun' % label, st['prefetch_run'], run0)
                # s1/nope is looked up in s1's index: s1 read once to build it (a small
                # shard over HTTP: whole), nothing else
                ck.eq('%s: fetched' % label, st['bytes_fetched'] - f0,
                      s1 if 's1/nope' in paths else 0)
            # and a good one still runs
            r = env.run([env.shardfs, 'prefetch', m.mnt, 's0.tar', 's1'])
            ck.eq('prefetch s0.tar s1: exit', r.returncode, 0)
            ck.eq('prefetch s0.tar s1: one run', m.stats()['prefetch_run'], run0 + 1)
            ck.ok(m.stats()['bytes_fetched'] > 0, 'prefetch s0.tar s1: fetched')
    finally:
        ng.stop()


GROUPS = {'noargs': (group_noargs, 120), 'paths': (group_paths, 280),
          'rate': (group_rate, 200), 'precheck': (group_precheck, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, needs_fuse=len(sys.argv) < 3 or sys.argv[2] != 'noargs')
