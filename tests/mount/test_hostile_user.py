#!/usr/bin/python3
"""shardfs mount tests: what a hostile new user ran into (a user who reads the control files with
small buffers, kills daemons, changes shards under a mount and types odd option values).

usage: test_hostile_user.py SHARDFS GROUP
GROUP:
  ctl-layout      .shardfs/stats and .shardfs/metrics read by one reader in two read() calls
                  with GETATTRs (other processes' stats) between them, while a counter grows a
                  digit: the reader gets a whole JSON document / valid Prometheus text with
                  every counter once (each read() may be served from another snapshot: the
                  layout must be the same in all of them)
  refresh-counts  a shard rewritten in place and one deleted, both noticed by a read (ESTALE)
                  before 'shardfs refresh': the refresh says "0 new, 1 removed, 1 changed" and
                  the refresh_* counters agree (it once said "1 new, 0 removed, 0 changed")
  seconds         SECONDS options take decimal numbers only: 0x10, 1e3, 0x1p3 and .5 are
                  refused with the option's name, 1.5 and 10 are taken
  killed-decoder  a daemon killed with -9 while decoding a compressed remote shard (the fills
                  after the first chunks held at a proxy, so the decoder is mid-way): the next
                  mount on the cache directory (shared with a running mount of another source)
                  removes the partial decoded copy, and the usage it reports leaves it out;
                  the member then reads exact
  name-conflict   x.tar beside x.tar.gz, d/y.tar beside a directory d/y/: one name each (a
                  source directory first, then the shard file that sorts first), the raw files
                  all shown, the hidden member directories counted in hidden_names and logged
  prefetch-missing 'shardfs prefetch MNT nonexist': exit 1, the error names the path (and says
                  'outside the mount' for a path that exists elsewhere), and no progress line
                  (of what earlier runs prefetched) on stdout
  stats-cli       a source whose path has a quote, a backslash and a newline: 'shardfs stats'
                  prints every field of .shardfs/stats in its order, strings as they are (it
                  once printed the JSON escapes: \" and \\), a newline as \u000a (one line
                  a field); 'shardfs refresh' and 'shardfs umount' work on it

  umount-trust    no signal, no trust, from anything a path holds: a directory holding a planted
                  .shardfs/stats that names a victim 'sleep' (umount, stats, prefetch, refresh,
                  plan of it all exit 1, "not a shardfs mount", the victim lives), a shard
                  member .shardfs/stats naming one ('shardfs umount MNT/s0': exit 1, the
                  victim lives, MNT stays mounted), and nobody's umount of root's mount (our
                  own message naming the owner, not fusermount3's "/etc/mtab")
  umount-busy     a mount held by a process's working directory and an open file: 'shardfs
                  umount' exits 1 naming the holder's pid and --force, the mount stays and the
                  open file reads on; 'shardfs umount --force' stops the daemon (exit 0, the
                  mount gone, the daemon exited 0)
  perm-matrix     one permission model (-o allow_other): a seeded generated tree of directory and
                  file modes in a local source, and a tar whose members have their own modes
                  (and a directory only implied by a member's path), walked as 'nobody'
                  through the mount and against the source itself (the tar: against GNU tar's
                  extraction with its modes): the same files readable, the same directories
                  listable (SHARDFS_TEST_SEED replays another tree)
  mount-loop      paths that point back into the mount: 'mount -o nonempty S S', a mount point
                  inside the source and a source reached through a symlink into the mount point
                  are refused at mount (exit 1, the reason named); a source switched under a
                  running mount to a symlink to its mount point (or to a directory holding it):
                  'shardfs refresh' exits 1 saying so (it once hung in D state), the mount
                  serves what it showed and refreshes again once the source is back
  mount-again     'mount -a' is idempotent: the mount helper (SHARDFS_MOUNT_HELPER) run twice for
                  one fstab line, as mount(8) does for a line that is mounted (it compares
                  fstab's /path with the table's shardfs:/path): the second exits 0 and the
                  mount table has it once; another source at that mount point still fails
  unit-recover    the systemd unit (dist/shardfs@.service.in), its commands run in order as
                  systemd runs them: Type=notify, READY=1 with MAINPID on $NOTIFY_SOCKET only
                  once the mount is in the mount table; after kill -9 of the daemon the
                  ExecStartPre commands clean the dead mount and ExecStart mounts again
                  (ready, exact bytes); ExecStop stops it (exit 0, the daemon exits 0)
  low-options     the small findings, a table each: without --chunk-size a 4M cache gets chunks
                  of 512K (one 4 KiB read of a cold 6 MB shard over nginx fetches at most 2 MiB,
                  not the whole shard), a --chunk-size given keeps it and warns (sizes as
                  "4.00 KiB", never "0.00 MiB"), a local source never warns; a cache directory
                  nobody can write says to give --cache-dir; --uid/--gid (and uid=/gid= through
                  the mount helper) set the owner shown; --max-connections below --connections
                  is refused naming both, and raised when not given
  plans-exited    plans of processes that have ended: a child publishes a plan without a name
                  (pid-CHILD) and exits, another publishes the named plan 'keep' and exits, the
                  test publishes one of its own: .shardfs/plans lists 'keep' and the test's,
                  not the ended child's (the log says it was dropped)
Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import errno  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log, poll, read_result, write_file  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.systemd import unit_commands  # noqa: E402

# How long a thread may take to finish (joined, never slept for)
DEADLINE_S = ml.POLL_TIMEOUT


# ---------------------------------------------------------------------------------------------

STATS_LINE = re.compile(r'^  "([a-z0-9_]+)": (\d+|"[^"]*"),? *$')
METRIC_SAMPLE = re.compile(r'^(shardfs_[a-z0-9_]+)[ \t]+(\d+(?:\.\d+)?)$')


def stats_problems(text):
    """Lines of a stats document that are not '  "name": value' (or the braces), and the
    names seen (a name twice is a problem too)."""
    probs, names = [], []
    lines = text.rstrip(' \n').split('\n')
    if not lines or lines[0] != '{' or lines[-1].rstrip(' ') != '}':
        probs.append('not braced: %r ... %r' % (lines[:1], lines[-1:]))
    for ln in lines[1:-1]:
        m = STATS_LINE.match(ln)
        if not m:
            probs.append('bad line %r' % ln)
            continue
        if m.group(1) in names:
            probs.append('%s twice' % m.group(1))
        names.append(m.group(1))
    try:
        json.loads(text)
    except ValueError as e:
        probs.append('not JSON: %s' % e)
    return probs, names


def metrics_problems(text):
    """Every family as '# HELP', '# TYPE', one sample; returns (problems, families)."""
    probs, fams = [], []
    lines = [ln for ln in text.rstrip(' \n').split('\n') if ln.strip(' ')]
    if len(lines) % 3:
        probs.append('%d lines, not 3 per family' % len(lines))
    for i in range(0, len(lines) - 2, 3):
        h = re.match(r'^# HELP (shardfs_[a-z0-9_]+) \S', lines[i])
        t = re.match(r'^# TYPE (shardfs_[a-z0-9_]+) (counter|gauge)$', lines[i + 1])
        s = METRIC_SAMPLE.match(lines[i + 2])
        if not (h and t and s and h.group(1) == t.group(1) == s.group(1)):
            probs.append('bad family at line %d: %r' % (i + 1, lines[i:i + 3]))
            continue
        fams.append(h.group(1))
    return probs, fams


def group_ctl_layout(env, ck):
    src = env.path('src')
    os.makedirs(src)
    write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('a.txt', b'a\n')]))
    promtool = shutil.which('promtool')
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        for name, anchor in (('stats', '"reads"'), ('metrics', '# HELP shardfs_reads_total')):
            path = os.path.join(m.mnt, '.shardfs', name)
            with open(path, 'rb') as f:
                fresh = f.read().decode()
            if name == 'stats':
                _, want = stats_problems(fresh)
            else:
                _, want = metrics_problems(fresh)
            g = int(re.search(r'getattrs(?:_total)?"?:?\s+(\d+)', fresh).group(1))
            # the getattrs counter (before the cut) grows a digit between the two reads
            bump = 10 ** len(str(g)) - g + 10
            cut = fresh.index(anchor) + 5
            fd = os.open(path, os.O_RDONLY)
            try:
                first = os.read(fd, cut)
                for _ in range(bump):
                    os.stat(path)
                rest = b''
                while True:
                    b = os.read(fd, 1 << 16)
                    if not b:
                        break
                    rest += b
            finally:
                os.close(fd)
            text = (first + rest).decode(errors='replace')
            ck.eq('%s: size of a read in two parts' % name, len(first + rest), len(fresh))
            if name == 'stats':
                probs, got = stats_problems(text)
            else:
                probs, got = metrics_problems(text)
            for p in probs[:5]:
                ck.fail('%s read in two parts: %s' % (name, p))
            ck.eq('%s read in two parts: problems' % name, len(probs), 0)
            ck.eq('%s read in two parts: names' % name, got, want)
            if name == 'metrics' and promtool:
                r = subprocess.run([promtool, 'check', 'metrics'], input=text.encode(),
                                   capture_output=True, timeout=60)
                ck.eq('promtool check metrics of a read in two parts: exit (%s)' %
                      r.stdout.decode(errors='replace')[:300], r.returncode, 0)
            log('%s: read in two parts around %d GETATTRs: %d problems' % (name, bump,
                                                                            len(probs)))
        # shardfs stats prints the padded values without their padding or commas
        r = env.run([env.shardfs, 'stats', m.mnt])
        ck.eq('shardfs stats: exit', r.returncode, 0)
        for ln in r.stdout.decode().split('\n'):
            if ln:
                ck.ok(re.match(r'^[a-z0-9_]+ +\S+$', ln), 'shardfs stats line %r' % ln)


def group_refresh_counts(env, ck):
    src = env.path('src')
    b = ml.CHANGE_B
    ml.change_sources(src)
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        ck.eq('before: listing', sorted(os.listdir(m.mnt)),
              ['s0', 's0.tar', 's1', 's1.tar', 's2', 's2.tar'])
        # s0 rewritten in place, s1 deleted, under files opened before: reads are ESTALE
        ml.change_under_open_files(ck, src, m.mnt)
        r = env.run([env.shardfs, 'refresh', m.mnt])
        out = r.stdout.decode(errors='replace')
        log('shardfs refresh: rc=%d %s' % (r.returncode, out.strip()))
        ck.eq('refresh: exit', r.returncode, 0)
        ck.ok(': 0 new, 1 removed, 1 changed; 2 objects, 2 shards' in out,
              'refresh summary after changes noticed by reads: %r' % out)
        st = m.stats()
        ck.eq('refresh counters (added, removed, changed)',
              (st['refresh_added'], st['refresh_removed'], st['refresh_changed']), (0, 1, 1))
        ck.eq('after refresh: listing', sorted(os.listdir(m.mnt)),
              ['s0', 's0.tar', 's2', 's2.tar'])
        for n, data in b:
            ck.eq('after refresh: s0/' + n, read_result(os.path.join(m.mnt, 's0', n)),
                  ('ok', data))
        ck.eq('after refresh: s1.tar', read_result(os.path.join(m.mnt, 's1.tar')),
              ('err', errno.ENOENT))


def group_seconds(env, ck):
    src = env.path('src')
    os.makedirs(src)
    write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('a.txt', b'a\n')]))
    mnt = env.path('mnt')
    os.makedirs(mnt)
    for opt in ('timeout', 'retry-budget', 'stall-timeout', 'connect-timeout'):
        for val in ('0x10', '1e3', '0x1p3', '.5', '1.2.3', '5s', 'infinity'):
            r = env.run([env.shardfs, 'mount', '--cache-dir', env.path('cache'), '--' + opt,
                         val, src, mnt])
            if r.returncode == 0 or ml.is_mounted(mnt):
                env.run([env.shardfs, 'umount', mnt])
            ck.eq('--%s %r: exit' % (opt, val), r.returncode, 2)  # a usage error, as every command
            ck.ok(('--%s' % opt).encode() in r.stderr and b'seconds' in r.stderr,
                  '--%s %r: error names the option: %r' % (opt, val, r.stderr))
        for val in ('1.5', '10'):
            with ml.Mount(env, src, mountpoint=mnt, cache_dir=env.path('cache'),
                          extra=['--' + opt, val]) as m:
                ck.eq('--%s %s: a shard reads' % (opt, val),
                      read_result(os.path.join(m.mnt, 's0', 'a.txt')), ('ok', b'a\n'))


def group_prefetch_missing(env, ck):
    src = env.path('src')
    os.makedirs(src)
    write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('a.txt', b'a\n' * 5000)]))
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        r = env.run([env.shardfs, 'prefetch', m.mnt, 's0.tar'])
        ck.eq('prefetch s0.tar: exit', r.returncode, 0)
        ck.ok(r.stdout.startswith(b'prefetch: '), 'prefetch s0.tar: progress %r' % r.stdout)
        r = env.run([env.shardfs, 'prefetch', m.mnt, 'nonexist'])
        ck.eq('prefetch nonexist: exit', r.returncode, 1)
        ck.eq('prefetch nonexist: no progress of other paths on stdout', r.stdout, b'')
        ck.ok(b'prefetch nonexist: no such file or directory in the mount' in r.stderr,
              'prefetch nonexist: the error names the path: %r' % r.stderr)
        # a path that exists, but outside the mount: the error says so (it was
        # "no such file or directory in the mount", as if the path were missing)
        r = env.run([env.shardfs, 'prefetch', m.mnt, src])
        ck.eq('prefetch SRC (outside the mount): exit', r.returncode, 1)
        ck.ok(('prefetch %s: outside the mount %s, and no \'%s\' in it' % (
            src, os.path.realpath(m.mnt), src.lstrip('/'))).encode() in r.stderr,
            'prefetch SRC: the error says it is outside the mount: %r' % r.stderr)


def group_name_conflict(env, ck):
    src = env.path('src')
    os.makedirs(os.path.join(src, 'd', 'y'))
    write_file(os.path.join(src, 'x.tar'), ml.tar_bytes([('a.txt', b'from x.tar\n')]))
    gz = ml.tar_bytes([('b.txt', b'from x.tar.gz\n')])
    subprocess.run(['gzip', '-n'], input=gz, stdout=open(os.path.join(src, 'x.tar.gz'), 'wb'),
                   check=True)
    write_file(os.path.join(src, 'd', 'y.tar'), ml.tar_bytes([('c.txt', b'from y.tar\n')]))
    write_file(os.path.join(src, 'd', 'y', 'plain.txt'), b'plain\n')
    log_file = env.path('daemon.log')
    with ml.Mount(env, src, cache_dir=env.path('cache'), extra=['--log-file', log_file]) as m:
        ck.eq('listing', sorted(os.listdir(m.mnt)), ['d', 'x', 'x.tar', 'x.tar.gz'])
        ck.eq('listing of d', sorted(os.listdir(os.path.join(m.mnt, 'd'))), ['y', 'y.tar'])
        # the first in order wins: a source directory, then the shard whose name sorts first
        ck.eq('x/ is x.tar\'s', sorted(os.listdir(os.path.join(m.mnt, 'x'))), ['a.txt'])
        ck.eq('d/y/ is the source directory', sorted(os.listdir(os.path.join(m.mnt, 'd', 'y'))),
              ['plain.txt'])
        ck.eq('x.tar.gz raw bytes', read_result(os.path.join(m.mnt, 'x.tar.gz')),
              ('ok', open(os.path.join(src, 'x.tar.gz'), 'rb').read()))
        st = m.stats()
        ck.eq('hidden_names', st.get('hidden_names'), 2)
        with open(os.path.join(m.mnt, '.shardfs', 'metrics')) as f:
            ck.ok(re.search(r'^shardfs_hidden_names +2$', f.read(), re.M),
                  'shardfs_hidden_names 2 in metrics')
    with open(log_file, errors='replace') as f:
        text = f.read()
    for name in ("'x' in the mount's root", "'y' in directory 'd'"):
        ck.ok('name conflict: %s is hidden' % name in text, 'the log names %s' % name)


def group_killed_decoder(env, ck):
    for tool in ('nginx', 'zstd'):
        ck.ok(shutil.which(tool), '%s is not installed (scripts/install-deps.sh)' % tool)
    if ck.failures:
        return

    src = env.path('src')
    os.makedirs(os.path.join(src, 'a'))
    os.makedirs(os.path.join(src, 'b'))
    big = os.urandom(24 << 20)
    plain = ml.tar_bytes([('big.bin', big), ('small.txt', b'small\n')])
    zpath = os.path.join(src, 'a', 'z.tar.zst')
    subprocess.run(['zstd', '-q', '-1', '-o', zpath], input=plain, check=True)
    write_file(os.path.join(src, 'b', 'other.tar'), ml.tar_bytes([('o.txt', b'other\n')]))
    cache = env.path('cache')
    chunk = 1 << 20
    opts = ['--chunk-size', '1M', '--connections', '2', '--retry-budget', '120']
    with web.Nginx(env.path('nginx'), src) as ng:
        px = web.HoldProxy(ng.port, 4 * chunk)
        try:
            # a mount of another source on the same cache directory, running throughout: the
            # later mounts are not alone there (the usage is kept, not rebuilt)
            with ml.Mount(env, ng.url('json/b/'), cache_dir=cache, extra=opts) as other:
                ck.eq('other: reads', read_result(os.path.join(other.mnt, 'other', 'o.txt')),
                      ('ok', b'other\n'))
                a = ml.Mount(env, px.url('json/a/'), cache_dir=cache, extra=opts)
                a.mount()
                apid = a.stats()['pid']
                res = {}

                def reader():
                    res['r'] = read_result(os.path.join(a.mnt, 'z', 'big.bin'))
                th = threading.Thread(target=reader, daemon=True)
                th.start()
                decdirs = []

                def partial():
                    for dp, dns, fns in os.walk(os.path.join(cache, 'v1')):
                        for fn in fns:
                            if fn.startswith('.tmp.%d.' % apid) and \
                                    os.path.basename(dp) == 'decoded':
                                p = os.path.join(dp, fn)
                                try:
                                    if os.path.getsize(p) >= chunk:
                                        decdirs.append(dp)
                                        return p
                                except OSError:
                                    pass
                    return None
                tmp = poll(partial)
                ck.ok(tmp, 'a partial decoded copy of the held shard appeared')
                if not tmp:
                    return
                tmp_size = os.path.getsize(tmp)
                log('partial decoded copy %s: %d bytes; kill -9 %d' % (tmp, tmp_size, apid))
                ml.kill_daemon(env, apid, signal.SIGKILL)
                ck.ok(poll(lambda: not ml.pid_alive(apid)), 'the killed daemon is gone')
                th.join(DEADLINE_S)
                a.umount(quiet=True)
                px.release.set()
                with ml.Mount(env, px.url('json/a/'), cache_dir=cache, extra=opts) as c:
                    st = c.stats()
                    ck.ok(not os.path.exists(tmp),
                          'the killed decoder\'s partial copy %s is removed at the next mount'
                          % tmp)
                    left = [f for f in os.listdir(decdirs[0]) if f.startswith('.tmp.')]
                    ck.eq('temp files left in decoded/', left, [])
                    used, disk = st['cache_bytes_used'], ml.du(cache)
                    log('cache_bytes_used %d, bytes on disk %d' % (used, disk))
                    ck.ok(used <= disk, 'cache_bytes_used %d counts more than the cache '
                          'directory holds (%d bytes): the removed partial copy (%d bytes) '
                          'stayed in the usage' % (used, disk, tmp_size))
                    ck.eq('after the kill: z/big.bin', read_result(
                        os.path.join(c.mnt, 'z', 'big.bin')), ('ok', big))
                    ck.eq('after the kill: z/small.txt', read_result(
                        os.path.join(c.mnt, 'z', 'small.txt')), ('ok', b'small\n'))
        finally:
            px.release.set()
            px.close()


def group_stats_cli(env, ck):
    src = env.path('src "q" \\b\nnl')
    os.makedirs(src)
    write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('a.txt', b'a\n')]))
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        with open(os.path.join(m.mnt, '.shardfs', 'stats'), 'rb') as f:
            doc = json.loads(f.read().decode(), object_pairs_hook=list)
        r = env.run([env.shardfs, 'stats', m.mnt])
        ck.eq('shardfs stats: exit', r.returncode, 0)
        lines = r.stdout.decode().rstrip('\n').split('\n')
        got = [tuple(ln.split(None, 1)) for ln in lines]
        log('shardfs stats: %d lines, source line %r' % (len(lines), [ln for ln in lines
                                                                       if 'source ' in ln]))
        ck.eq('shardfs stats: the names of .shardfs/stats in order', [g[0] for g in got],
              [k for k, _ in doc])
        want = dict((k, str(v).replace('\n', '\\u000a')) for k, v in doc)
        have = dict(g for g in got if len(g) == 2)
        for k in ('version', 'pid', 'source', 'cache_dir', 'layout', 'mount_time', 'objects',
                  'shards'):
            ck.eq('shardfs stats: %s' % k, have.get(k), want[k])
        ck.ok('"' in have.get('source', '') and '\\\\' not in have.get('source', ''),
              'shardfs stats: source %r' % have.get('source'))
        r = env.run([env.shardfs, 'refresh', m.mnt])
        ck.eq('shardfs refresh: exit (%r)' % r.stderr, r.returncode, 0)
        ck.ok(b'0 new, 0 removed, 0 changed; 1 object, 1 shard' in r.stdout,
              'shardfs refresh: %r' % r.stdout)


def victim():
    """A process that must survive: 'sleep', started by the test."""
    return subprocess.Popen(['sleep', '600'], stdin=subprocess.DEVNULL)


def client_cmds(path):
    """Every command that talks to a mount, on path."""
    return [['umount', path], ['umount', '--force', path], ['stats', path],
            ['prefetch', path], ['refresh', path], ['plan', path, '--clear']]


def group_umount_trust(env, ck):
    v = victim()
    v2 = victim()  # the member's: each case has a victim of its own
    try:
        planted = env.path('planted')
        os.makedirs(os.path.join(planted, '.shardfs'))
        for name in ('stats', 'control'):
            write_file(os.path.join(planted, '.shardfs', name),
                       b'{"version":"0.1.0","pid":%d}\n' % v.pid)
        for cmd in client_cmds(planted):
            r = env.run([env.shardfs] + cmd)
            err = r.stderr.decode(errors='replace')
            log('planted: shardfs %s: rc=%r %s' % (' '.join(cmd[:-1]), r.returncode, err.strip()))
            ck.eq('planted: shardfs %s: exit' % cmd[0], r.returncode, 1)
            ck.ok('is not a shardfs mount' in err, 'planted: shardfs %s: %r' % (cmd[0], err))
            ck.ok(str(v.pid).encode() not in r.stdout,
                  'planted: shardfs %s printed the planted pid: %r' % (cmd[0], r.stdout))
            ck.ok(v.poll() is None, 'planted: shardfs %s killed the victim %d'
                  % (' '.join(cmd), v.pid))
        src = env.path('src')
        os.makedirs(src)
        write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([
            ('.shardfs/stats', b'{"version":"0.1.0","pid":%d}\n' % v2.pid),
            ('a.txt', b'a\n')]))
        with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
            inner = os.path.join(m.mnt, 's0')
            with open(os.path.join(inner, '.shardfs', 'stats'), 'rb') as f:
                ck.ok(str(v2.pid).encode() in f.read(), 'the member .shardfs/stats names the '
                      'victim')
            for cmd in client_cmds(inner):
                r = env.run([env.shardfs] + cmd)
                err = r.stderr.decode(errors='replace')
                log('member: shardfs %s: rc=%r %s' % (' '.join(cmd), r.returncode, err.strip()))
                ck.eq('member: shardfs %s: exit' % ' '.join(cmd[:-1]), r.returncode, 1)
                ck.ok('is not a shardfs mount' in err, 'member: shardfs %s: %r'
                      % (cmd[0], err))
                ck.ok(v2.poll() is None, 'member: shardfs %s killed the victim %d'
                      % (' '.join(cmd), v2.pid))
                ck.ok(ml.is_mounted(m.mnt), 'member: shardfs %s unmounted %s'
                      % (' '.join(cmd), m.mnt))
            ck.eq('member: a.txt reads', read_result(os.path.join(inner, 'a.txt')),
                  ('ok', b'a\n'))
            # nobody's umount of root's mount (no allow_other): our message, not fusermount3's
            if os.geteuid() == 0 and shutil.which('setpriv'):
                r = env.run(['setpriv', '--reuid=nobody', '--regid=nogroup', '--clear-groups',
                             env.shardfs, 'umount', m.mnt])
                err = r.stderr.decode(errors='replace')
                log('nobody: shardfs umount: rc=%r %s' % (r.returncode, err.strip()))
                ck.eq('nobody: umount exit', r.returncode, 1)
                ck.ok('mounted by uid 0' in err and 'mtab' not in err,
                      'nobody: umount says %r' % err)
                ck.ok(ml.is_mounted(m.mnt), 'nobody: umount unmounted root\'s mount')
    finally:
        for p in (v, v2):
            p.kill()
            p.wait()


def group_umount_busy(env, ck):
    src = env.path('src')
    os.makedirs(src)
    write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('ok/a.txt', b'a' * 5000)]))
    m = ml.Mount(env, src, cache_dir=env.path('cache'))
    m.mount()
    holder = None
    try:
        pid = m.stats()['pid']
        holder = subprocess.Popen(['sleep', '600'], cwd=os.path.join(m.mnt, 's0', 'ok'),
                                  stdin=subprocess.DEVNULL)
        with open(os.path.join(m.mnt, 's0', 'ok', 'a.txt'), 'rb') as f:
            ck.eq('busy: first read', f.read(100), b'a' * 100)
            r = env.run([env.shardfs, 'umount', m.mnt], timeout=ml.UMOUNT_TIMEOUT, files=True)
            err = r.stderr.decode(errors='replace')
            log('busy: shardfs umount: rc=%r %s' % (r.returncode, err.strip()))
            ck.eq('busy: umount exit', r.returncode, 1)
            ck.ok('busy' in err and ('pid %d (sleep)' % holder.pid) in err and
                  'umount --force' in err, 'busy: umount says %r' % err)
            ck.ok(ml.pid_alive(pid), 'busy: umount stopped the daemon %d' % pid)
            ck.ok(ml.is_mounted(m.mnt), 'busy: umount unmounted the busy mount')
            ck.eq('busy: the open file reads on', f.read(), b'a' * 4900)
        r = env.run([env.shardfs, 'umount', '--force', m.mnt], timeout=ml.UMOUNT_TIMEOUT,
                    files=True)
        err = r.stderr.decode(errors='replace')
        log('force: shardfs umount --force: rc=%r %s' % (r.returncode, err.strip()))
        ck.eq('force: umount --force exit', r.returncode, 0)
        ck.ok('stopped its daemon %d' % pid in err, 'force: says %r' % err)
        ck.ok(not ml.pid_alive(pid), 'force: the daemon %d still runs' % pid)
        ck.ok(not ml.is_mounted(m.mnt), 'force: %s still mounted' % m.mnt)
        env.reap()
        ck.eq('force: how the daemon ended', m.ends().get(pid), 'exited with status 0')
    finally:
        if holder:
            holder.kill()
            holder.wait()
        m.umount(quiet=True)
    # mounted by relative paths (the daemon's command line names 'rel-mnt', and it works in
    # '/'): 'umount --force' still knows its daemon
    rel = ml.Mount(env, src, mountpoint=env.path('rel-mnt'))
    os.makedirs(rel.mnt)
    env.mounts.append(rel)
    r = subprocess.run([env.shardfs, 'mount', '--cache-dir', 'cache', 'src', 'rel-mnt'],
                       cwd=env.tmp, env=env.env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=ml.MOUNT_TIMEOUT)
    ck.eq('relative: mount exit', r.returncode, 0)
    holder = None
    try:
        pid = rel.stats()['pid']
        holder = subprocess.Popen(['sleep', '600'], cwd=rel.mnt, stdin=subprocess.DEVNULL)
        r = env.run([env.shardfs, 'umount', '--force', rel.mnt], timeout=ml.UMOUNT_TIMEOUT,
                    files=True)
        err = r.stderr.decode(errors='replace')
        log('relative: umount --force: rc=%r %s' % (r.returncode, err.strip()))
        ck.eq('relative: umount --force exit', r.returncode, 0)
        ck.ok('stopped its daemon %d' % pid in err, 'relative: says %r' % err)
        ck.ok(not ml.pid_alive(pid), 'relative: the daemon %d still runs' % pid)
    finally:
        if holder:
            holder.kill()
            holder.wait()
        rel.umount(quiet=True)
    # --stale (the systemd unit's ExecStartPre): no mount there is nothing to do; a mount whose
    # daemon answers is left alone (exit 1); a mount whose daemon was killed is detached
    nomnt = env.path('no-mount')
    os.makedirs(nomnt)
    r = env.run([env.shardfs, 'umount', '--stale', nomnt], timeout=ml.UMOUNT_TIMEOUT, files=True)
    ck.eq('stale: no mount: exit', r.returncode, 0)
    st = ml.Mount(env, src, cache_dir=env.path('cache-stale'))
    st.mount()
    try:
        pid = st.stats()['pid']
        r = env.run([env.shardfs, 'umount', '--stale', st.mnt], timeout=ml.UMOUNT_TIMEOUT,
                    files=True)
        err = r.stderr.decode(errors='replace')
        log('stale: live mount: rc=%r %s' % (r.returncode, err.strip()))
        ck.eq('stale: live mount: exit', r.returncode, 1)
        ck.ok('whose daemon runs' in err and '--stale cleans only a dead one' in err,
              'stale: live mount: says %r' % err)
        ck.ok(ml.is_mounted(st.mnt) and ml.pid_alive(pid), 'stale: the live mount was touched')
        ml.kill_daemon(env, pid, signal.SIGKILL)
        ck.ok(poll(lambda: not ml.pid_alive(pid)), 'stale: the killed daemon is gone')
        r = env.run([env.shardfs, 'umount', '--stale', st.mnt], timeout=ml.UMOUNT_TIMEOUT,
                    files=True)
        log('stale: dead mount: rc=%r %s' % (r.returncode, r.stderr.decode(errors='replace')))
        ck.eq('stale: dead mount: exit', r.returncode, 0)
        ck.ok(not ml.is_mounted(st.mnt), 'stale: %s still mounted' % st.mnt)
    finally:
        st.umount(quiet=True)


# What 'nobody' can do under a root: run as nobody, prints JSON {"list": [...], "read": [...]}
# of the directories it can list and the files it can read (paths relative to the root).
WALKER = r"""
import json, os, stat, sys
root = sys.argv[1]
lst, rd = [], []
def walk(rel):
    p = os.path.join(root, rel) if rel else root
    try:
        names = sorted(os.listdir(p))
    except OSError:
        return
    lst.append(rel or '.')
    for n in names:
        r = os.path.join(rel, n) if rel else n
        if rel == '' and n in sys.argv[2:]:
            continue
        try:
            st = os.lstat(os.path.join(root, r))
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            walk(r)
        elif stat.S_ISREG(st.st_mode):
            try:
                with open(os.path.join(root, r), 'rb') as f:
                    f.read()
                rd.append(r)
            except OSError:
                pass
walk('')
print(json.dumps({'list': sorted(lst), 'read': sorted(rd)}))
"""

DIR_MODES = (0o755, 0o700, 0o711, 0o750, 0o705, 0o555, 0o500, 0o301, 0o744, 0o775, 0o704)
FILE_MODES = (0o644, 0o600, 0o640, 0o604, 0o400, 0o444, 0o755, 0o700, 0o004)


def gen_mode_tree(rng, root, depth=0):
    """A random tree of directories and files with random modes below root (modes set last,
    deepest first, so that the test, root, can write everything first)."""
    dirs = []
    for i in range(rng.randint(1, 3) if depth < 3 else 0):
        d = os.path.join(root, 'd%d' % i)
        os.makedirs(d)
        dirs += gen_mode_tree(rng, d, depth + 1)
        dirs.append((d, rng.choice(DIR_MODES)))
    for i in range(rng.randint(1, 3)):
        f = os.path.join(root, 'f%d.txt' % i)
        write_file(f, b'%s\n' % f.encode())
        os.chmod(f, rng.choice(FILE_MODES))
    return dirs


def walk_as_nobody(env, root, skip=()):
    r = env.run(['setpriv', '--reuid=nobody', '--regid=nogroup', '--clear-groups',
                 sys.executable, '-c', WALKER, root] + list(skip))
    if r.returncode != 0:
        raise RuntimeError('walker failed: %s' % r.stderr.decode(errors='replace'))
    return json.loads(r.stdout.decode())


def group_perm_matrix(env, ck):
    import io
    import tarfile
    if os.geteuid() != 0 or not shutil.which('setpriv'):
        raise ml.Skip('needs root and setpriv to walk as nobody', 'host')
    rng = env.rng
    log('seed %d (SHARDFS_TEST_SEED replays another tree)' % env.seed)
    src = env.path('src')
    os.makedirs(src)
    modes = gen_mode_tree(rng, src)
    # a shard whose members have their own modes; 'imp/' exists only in a member's path
    bio = io.BytesIO()
    members = []
    with tarfile.open(fileobj=bio, mode='w', format=tarfile.GNU_FORMAT) as tf:
        for i in range(12):
            if i % 4 == 0:
                ti = tarfile.TarInfo('m%d' % i)
                ti.type = tarfile.DIRTYPE
                ti.mode = rng.choice(DIR_MODES)
                tf.addfile(ti)
                members.append(('m%d/' % i, ti.mode))
                continue
            parent = rng.choice(['', 'imp/', 'm%d/' % (i // 4 * 4)])
            data = b'member %d\n' % i
            ti = tarfile.TarInfo('%sx%d.txt' % (parent, i))
            ti.size, ti.mode, ti.mtime = len(data), rng.choice(FILE_MODES), 1700000000
            tf.addfile(ti, io.BytesIO(data))
            members.append((ti.name, ti.mode))
    write_file(os.path.join(src, 't.tar'), bio.getvalue())
    for d, mode in modes:
        os.chmod(d, mode)
    log('directory modes: %s' % ', '.join('%s %o' % (os.path.relpath(d, src), m)
                                          for d, m in modes))
    log('members: %s' % ', '.join('%s %o' % nm for nm in members))
    ext = env.path('ext')
    os.makedirs(ext)
    r = env.run(['tar', '-x', '-p', '-f', os.path.join(src, 't.tar'), '-C', ext])
    ck.eq('GNU tar extracts t.tar', r.returncode, 0)
    want_src = walk_as_nobody(env, src)
    want_tar = walk_as_nobody(env, ext)
    log('as nobody in the source: %d listable, %d readable; in the extraction: %d, %d'
        % (len(want_src['list']), len(want_src['read']), len(want_tar['list']),
           len(want_tar['read'])))
    nfiles = sum(len(fs) for _, _, fs in os.walk(src))
    ck.ok(0 < len(want_src['read']) < nfiles and len(want_src['list']) < 1 + len(modes),
          'the tree has files and directories nobody can read, and files it can (%d of %d)'
          % (len(want_src['read']), nfiles))
    with ml.Mount(env, src, cache_dir=env.path('cache'), extra=['-o', 'allow_other']) as m:
        got_src = walk_as_nobody(env, m.mnt, skip=['t'])
        got_tar = walk_as_nobody(env, os.path.join(m.mnt, 't'))
    ck.eq('as nobody: directories listable through the mount and in the source',
          got_src['list'], want_src['list'])
    ck.eq('as nobody: files readable through the mount and in the source',
          got_src['read'], want_src['read'])
    ck.eq('as nobody: member directories listable through the mount and in GNU tar\'s '
          'extraction', got_tar['list'], want_tar['list'])
    ck.eq('as nobody: members readable through the mount and in GNU tar\'s extraction',
          got_tar['read'], want_tar['read'])


def group_mount_loop(env, ck):
    tar = ml.tar_bytes([('a.txt', b'a\n')])
    src = env.path('S')
    os.makedirs(os.path.join(src, 'sub'))
    write_file(os.path.join(src, 's0.tar'), tar)
    mnt = env.path('M')
    os.makedirs(os.path.join(mnt, 'x'))
    link = env.path('L')
    os.symlink(mnt, link)
    cases = [('the source is the mount point', src, src),
             ('the mount point inside the source', src, os.path.join(src, 'sub')),
             ('the source through a symlink into the mount point', os.path.join(link, 'x'), mnt)]
    for label, s, m in cases:
        err = ml.mount_error(ck, label, ml.Mount(env, s, mountpoint=m,
                                                 cache_dir=env.path('cache'),
                                                 extra=['-o', 'nonempty']))
        log('%s: %s' % (label, err))
        ck.ok(err is not None and 'lies inside it, or holds it' in err,
              '%s: mount says %r' % (label, err))
    if ck.failures:
        return  # a mount that went ahead: its refresh would hang (the bug), not try it
    os.rmdir(os.path.join(mnt, 'x'))
    with ml.Mount(env, src, mountpoint=mnt, cache_dir=env.path('cache')) as m:
        moved = env.path('S-moved')
        for label, target in (('a symlink to the mount point', mnt),
                              ('a symlink to a directory holding the mount point', env.tmp)):
            os.rename(src, moved)
            os.symlink(target, src)
            r = env.run([env.shardfs, 'refresh', m.mnt], timeout=ml.MOUNT_TIMEOUT)
            err = r.stderr.decode(errors='replace')
            log('refresh, the source now %s: rc=%r %s' % (label, r.returncode, err.strip()))
            ck.eq('refresh, the source now %s: exit' % label, r.returncode, 1)
            ck.ok('would read the mount itself' in err, 'refresh says %r' % err)
            ck.eq('after the refused refresh: s0/a.txt',
                  read_result(os.path.join(m.mnt, 's0', 'a.txt')), ('ok', b'a\n'))
            os.unlink(src)
            os.rename(moved, src)
        r = env.run([env.shardfs, 'refresh', m.mnt], timeout=ml.MOUNT_TIMEOUT)
        ck.eq('refresh with the source back: exit (%r)' % r.stderr, r.returncode, 0)


def mount_table_count(mnt):
    return sum(1 for p in ml.mounted_paths() if p == mnt)


def group_mount_again(env, ck):
    helper = os.environ.get('SHARDFS_MOUNT_HELPER')
    if not helper:
        raise ml.Skip('SHARDFS_MOUNT_HELPER (the built mount.shardfs) is not set', 'tool')
    src = env.path('ds')
    os.makedirs(src)
    write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('a.txt', b'a\n')]))
    other = env.path('other')
    os.makedirs(other)
    m = ml.Mount(env, src, mountpoint=env.path('mnt'))
    os.makedirs(m.mnt)
    env.mounts.append(m)
    henv = dict(env.env, SHARDFS_BIN=env.shardfs)
    opts = 'nofail,cache-dir=%s' % env.path('cache')

    def helper_run(source, label):
        # as mount(8) runs it: mount.shardfs SOURCE MOUNTPOINT -o OPTIONS
        r = subprocess.run(['sh', helper, source, m.mnt, '-o', opts], env=henv,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=ml.MOUNT_TIMEOUT)
        log('%s: rc=%r %s' % (label, r.returncode, r.stderr.decode(errors='replace').strip()))
        return r
    try:
        ck.eq('first mount.shardfs: exit', helper_run(src, 'first').returncode, 0)
        ck.eq('mounted once', mount_table_count(m.mnt), 1)
        table = [ln.split()[0] for ln in open('/proc/self/mounts') if ln.split()[1] == m.mnt]
        log('the mount table says %r where fstab says %r' % (table, src))
        for n in range(2):
            ck.eq('mount -a again (%d): exit' % n, helper_run(src, 'again').returncode, 0)
            ck.eq('mount -a again (%d): mounted once' % n, mount_table_count(m.mnt), 1)
        # the same line through a path with a trailing slash and a symlink
        os.symlink(src, env.path('ds-link'))
        ck.eq('mount -a, the source through a symlink: exit',
              helper_run(env.path('ds-link') + '/', 'symlink').returncode, 0)
        r = helper_run(other, 'another source')
        ck.eq('another source at the mount point: exit', r.returncode, 1)
        ck.ok(b'already a shardfs mount' in r.stderr, 'another source: %r' % r.stderr)
        ck.eq('a.txt', read_result(os.path.join(m.mnt, 's0', 'a.txt')), ('ok', b'a\n'))
    finally:
        m.umount(quiet=True)


# SHARDFS_TEST_UNIT: another unit file to check (an older one)
UNIT = os.environ.get('SHARDFS_TEST_UNIT') or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), '..', '..', 'dist', 'shardfs@.service.in')


def group_unit_recover(env, ck):
    import socket
    src = env.path('ds')
    os.makedirs(src)
    data = os.urandom(70000)
    write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('a.bin', data)]))
    mnt = env.path('unit-mnt')
    # --timeout 0: the kernel keeps no attributes of the mount's root, so after the kill -9
    # every stat of the mount point answers ENOTCONN, as it does once --timeout has passed
    # since anything stat'ed it, or when nothing ever did (with the default of a day, the
    # test's own lstat before the kill would leave them cached, and the unit's first
    # ExecStartPre's stat would pass by that alone)
    uenv = {'SOURCE': src, 'MOUNTPOINT': mnt,
            'OPTIONS': '--cache-dir %s --timeout 0' % env.path('cache')}
    execs, settings = unit_commands(UNIT, uenv, {'@BINDIR@': os.path.dirname(env.shardfs)})
    log('unit: %r %r' % (settings, execs))
    ck.eq('the unit is Type=notify', settings.get('Type'), 'notify')
    sock_path = env.path('notify.sock')
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(0.2)
    m = ml.Mount(env, src, mountpoint=mnt)
    env.mounts.append(m)
    procs = []

    def start(label):
        """ExecStartPre in order (each must exit 0), then ExecStart; waits for READY=1 or
        the process's end. Returns (process, {field: value} of the notification)."""
        for cmd in execs.get('ExecStartPre', []):
            r = subprocess.run(cmd, env=env.env, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=ml.UMOUNT_TIMEOUT)
            log('%s: %s: rc=%r %s' % (label, ' '.join(cmd), r.returncode,
                                      r.stderr.decode(errors='replace').strip()))
            ck.eq('%s: ExecStartPre %s: exit' % (label, ' '.join(cmd)), r.returncode, 0)
            if r.returncode != 0:  # systemd runs nothing more: the start failed (and again
                raise RuntimeError('%s: the unit fails at ExecStartPre' % label)  # each retry)
        p = subprocess.Popen(execs['ExecStart'][0], env=dict(env.env, NOTIFY_SOCKET=sock_path),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=open(env.path('%s.log' % label), 'wb'))
        procs.append(p)
        m.pids.add(p.pid)
        env.daemons[p.pid] = mnt
        msg = None

        def ready():
            nonlocal msg
            try:
                msg = sock.recv(4096).decode()
                return True
            except socket.timeout:
                return p.poll() is not None
        ml.poll(ready, what='%s: READY=1 or the end of ExecStart' % label)
        mounted = ml.is_mounted(mnt)  # at READY=1: the mount must be in the table already
        if mounted and msg:
            try:
                os.statvfs(mnt)  # and answer (it waits for the daemon's INIT, never fails)
            except OSError as e:
                ck.fail('%s: at READY=1 the mount does not answer: %s' % (label, e))
        fields = dict(ln.split('=', 1) for ln in (msg or '').splitlines() if '=' in ln)
        log('%s: notification %r, mounted then: %s, ExecStart %s' % (
            label, msg, mounted, 'runs' if p.poll() is None else 'exited %r' % p.poll()))
        ck.eq('%s: READY=1' % label, fields.get('READY'), '1')
        ck.eq('%s: MAINPID' % label, fields.get('MAINPID'), str(p.pid))
        ck.ok(mounted, '%s: READY=1 came before the mount was in the mount table' % label)
        return p, fields
    try:
        p, _ = start('start')
        ck.eq('start: a.bin', read_result(os.path.join(mnt, 's0', 'a.bin')), ('ok', data))
        ml.kill_daemon(env, p.pid, signal.SIGKILL)
        p.wait(timeout=60)
        try:
            os.statvfs(mnt)
            dead = False
        except OSError as e:
            dead = e.errno == errno.ENOTCONN
        ck.ok(dead, 'after kill -9 the mount is dead (ENOTCONN)')
        try:
            os.stat(mnt)
            err = None
        except OSError as e:
            err = errno.errorcode.get(e.errno, e.errno)
        ck.eq('after kill -9: stat of the mount point', err, 'ENOTCONN')
        p, _ = start('restart')
        ck.eq('restart: a.bin', read_result(os.path.join(mnt, 's0', 'a.bin')), ('ok', data))
        for cmd in execs.get('ExecStop', []):
            r = subprocess.run(cmd, env=env.env, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=ml.UMOUNT_TIMEOUT)
            ck.eq('ExecStop %s: exit (%r)' % (' '.join(cmd), r.stderr), r.returncode, 0)
        try:
            rc = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            rc = None
        ck.eq('the daemon exits 0 after ExecStop', rc, 0)
        ck.ok(not ml.is_mounted(mnt), 'unmounted after ExecStop')
    finally:
        sock.close()
        m.umount(quiet=True)
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def group_low_options(env, ck):
    src = env.path('src')
    os.makedirs(src)
    big = bytes(env.rng.getrandbits(8) for _ in range(6 << 20))
    write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('big.bin', big), ('a.txt', b'a\n')]))
    ng = web.Nginx(env.path('nginx'), src).start()
    try:
        url = ng.url('json/')
        base = ['--warm', 'off', '--prefetch-shards', '0']
        # #12: chunks sized to a small cache when --chunk-size is not given
        with ml.Mount(env, url, cache_dir=env.path('c1'),
                      extra=base + ['--cache-size', '4M']) as m:
            ck.ok('warning' not in m.stderr, 'no --chunk-size: no warning: %r' % m.stderr)
            with open(os.path.join(m.mnt, 's0', 'big.bin'), 'rb') as f:
                ck.eq('the first 4 KiB', f.read(4096), big[:4096])
            st = m.reads_settled()
            ml.poll(lambda: m.stats()['fills_inflight'] == 0, what='fills done')
            fetched = m.stats()['bytes_fetched']
            log('--cache-size 4M, no --chunk-size: a 4 KiB read fetched %d bytes' % fetched)
            # two 512K chunks (the read's and the readahead's) and the tar headers the index
            # reads; 8M chunks fetch the whole 6 MB shard
            ck.ok(0 < fetched <= 2 << 20, 'a 4 KiB read of a cold 6 MB shard under '
                  '--cache-size 4M fetched %d bytes (chunks not sized to the cache)' % fetched)
        # #16: a --chunk-size given above the cache warns, with sizes that read
        m = ml.Mount(env, url, cache_dir=env.path('c2'),
                     extra=base + ['--cache-size', '4k', '--chunk-size', '1M'])
        with m:
            ck.ok('--cache-size 4.00 KiB is smaller than one chunk (--chunk-size 1.00 MiB)'
                  in m.stderr, 'the small-cache warning: %r' % m.stderr)
    finally:
        ng.stop()
    # #16: never for a local source (it fills no cache)
    with ml.Mount(env, src, cache_dir=env.path('c3'),
                  extra=['--cache-size', '4k', '--chunk-size', '1M']) as m:
        ck.ok('warning' not in m.stderr, 'a local source warns: %r' % m.stderr)
    # #16: --max-connections below --connections
    mnt = env.path('mnt-x')
    os.makedirs(mnt)
    for extra, rc, want in ((['--connections', '32', '--max-connections', '4'], 2,
                             '--max-connections 4 is below --connections 32'),
                            (['--connections', '200'], 0, None)):
        r = env.run([env.shardfs, 'mount', '--cache-dir', env.path('c4')] + extra +
                    [src, mnt], timeout=ml.MOUNT_TIMEOUT, files=True)
        err = r.stderr.decode(errors='replace')
        log('mount %s: rc=%r %s' % (' '.join(extra), r.returncode, err.strip()))
        ck.eq('mount %s: exit' % ' '.join(extra), r.returncode, rc)
        if want:
            ck.ok(want in err, 'mount %s says %r' % (' '.join(extra), err))
        if ml.is_mounted(mnt):
            ml.Mount(env, src, mountpoint=mnt).umount()
    # #15: the owner shown, from the command line and from fstab's uid=/gid=
    m = ml.Mount(env, src, cache_dir=env.path('c5'), extra=['--uid', '1234', '--gid', '4321'])
    with m:
        st = os.stat(os.path.join(m.mnt, 's0', 'a.txt'))
        ck.eq('--uid/--gid: owner of a member', (st.st_uid, st.st_gid), (1234, 4321))
        st = os.stat(m.mnt)
        ck.eq('--uid/--gid: owner of the root', (st.st_uid, st.st_gid), (1234, 4321))
    helper = os.environ.get('SHARDFS_MOUNT_HELPER')
    if helper:
        hm = ml.Mount(env, src, mountpoint=env.path('mnt-h'))
        os.makedirs(hm.mnt)
        env.mounts.append(hm)
        r = subprocess.run(['sh', helper, src, hm.mnt, '-o',
                            'uid=77,gid=88,cache-dir=%s' % env.path('c6')],
                           env=dict(env.env, SHARDFS_BIN=env.shardfs), stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=ml.MOUNT_TIMEOUT)
        ck.eq('fstab uid=,gid=: exit (%r)' % r.stderr, r.returncode, 0)
        if r.returncode == 0:
            st = os.stat(os.path.join(hm.mnt, 's0', 'a.txt'))
            ck.eq('fstab uid=,gid=: owner', (st.st_uid, st.st_gid), (77, 88))
        hm.umount(quiet=True)
    # #14: a cache directory this user cannot write: the hint
    if os.geteuid() == 0 and shutil.which('setpriv'):
        locked = env.path('locked')
        os.makedirs(locked, mode=0o700)
        nmnt = env.path('mnt-nobody')
        os.makedirs(nmnt)
        os.chown(nmnt, 65534, 65534)
        r = env.run(['setpriv', '--reuid=nobody', '--regid=nogroup', '--clear-groups',
                     env.shardfs, 'mount', '--cache-dir', os.path.join(locked, 'c'), src, nmnt],
                    timeout=ml.MOUNT_TIMEOUT, files=True)
        err = r.stderr.decode(errors='replace')
        log('nobody, cache dir in a 0700 dir of root: rc=%r %s' % (r.returncode, err.strip()))
        ck.eq('unwritable cache dir: exit', r.returncode, 1)
        ck.ok('Permission denied' in err and '--cache-dir DIR' in err and 'cache-dir=DIR' in err,
              'unwritable cache dir: the message %r' % err)
        if ml.is_mounted(nmnt):
            ml.Mount(env, src, mountpoint=nmnt).umount()


def group_plans_exited(env, ck):
    src = env.path('src')
    os.makedirs(src)
    write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('a.txt', b'a\n'), ('b.txt', b'b\n')]))
    plan = env.path('plan.txt')
    write_file(plan, b's0/a.txt\ns0/b.txt\n')
    libdir = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib')
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        def child(line):
            code = ('import sys; sys.path.insert(0, %r); from shardfs_test import mount as ml; '
                    'import os; e = ml.control_errno(%r, %r); print(os.getpid(), e)'
                    % (libdir, m.mnt, line))
            r = subprocess.run([sys.executable, '-c', code], stdout=subprocess.PIPE,
                               timeout=60)
            pid, err = r.stdout.decode().split()
            ck.eq('child %s: the mount took %r' % (pid, line), err, 'None')
            return int(pid)
        gone = child('plan %s' % plan)
        child('plan keep %s' % plan)
        ck.eq('the test\'s own plan', ml.control_errno(m.mnt, 'plan %s' % plan), None)
        with open(os.path.join(m.mnt, '.shardfs', 'plans')) as f:
            rows = [ln.strip(' ').split('\t') for ln in f.read().splitlines()[1:]
                    if '\t' in ln]
        names = sorted(r[0] for r in rows)
        log('plans listed: %r' % rows)
        ck.eq('plans listed after pid %d ended' % gone, names,
              sorted(['keep', 'pid-%d' % os.getpid()]))
        ck.eq('stats: plans', m.stats()['plans'], 2)
    ck.ok("plan 'pid-%d' dropped: process %d has ended" % (gone, gone)
          in ml.logs_under(env.path('cache')), 'the log says the plan was dropped')


GROUPS = {'ctl-layout': group_ctl_layout, 'refresh-counts': group_refresh_counts,
          'seconds': group_seconds, 'killed-decoder': group_killed_decoder,
          'prefetch-missing': group_prefetch_missing, 'name-conflict': group_name_conflict,
          'stats-cli': group_stats_cli, 'umount-trust': group_umount_trust,
          'umount-busy': group_umount_busy, 'perm-matrix': group_perm_matrix,
          'mount-loop': group_mount_loop, 'mount-again': group_mount_again,
          'unit-recover': group_unit_recover, 'low-options': group_low_options,
          'plans-exited': group_plans_exited}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, 'hostile-')
