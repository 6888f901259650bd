"""Shared helpers for the shardfs mount tests: mounting with guaranteed cleanup, a watchdog
against hung mounts, tree snapshots and comparisons. Python 3 stdlib only."""

import errno
import hashlib
import json
import os
import random
import select
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

from . import diag

SKIP = 77
MOUNT_TIMEOUT = 60
# past 'shardfs umount''s own wait for its daemon's exit (60 s at most, fs_umount.c): a
# busy machine's daemon that takes longer than 30 s to write its state is not cut short
UMOUNT_TIMEOUT = 90


def log(*a):
    print(*a, flush=True)


class Skip(Exception):
    """A test cannot run here. kind says why: 'fuse' (FUSE unusable), 'tool' (an optional
    package or server is not installed), 'host' (a limit of the machine: root, rlimit). Whether
    the run allows it is skip_allowed's answer; a skip it does not allow fails the test."""

    def __init__(self, msg, kind='tool'):
        super().__init__(msg)
        self.kind = kind


# the kinds of skip a run allows unless it says otherwise (SHARDFS_TEST_ALLOW_SKIP); FUSE
# unusable is not one of them: a machine that cannot mount fails the mount tests
DEFAULT_ALLOWED_SKIPS = 'tool,host'


def strict_run():
    """A run that allows no skip at all: CI (CI=true) or tests/run.sh --strict
    (SHARDFS_TEST_STRICT=1)."""
    return os.environ.get('CI') == 'true' or os.environ.get('SHARDFS_TEST_STRICT') == '1'


def skip_allowed(kind):
    """Does this run allow a skip of this kind? Never in a strict run; otherwise when kind is
    in SHARDFS_TEST_ALLOW_SKIP (comma-separated kinds, 'all'; default DEFAULT_ALLOWED_SKIPS)."""
    if strict_run():
        return False
    allowed = os.environ.get('SHARDFS_TEST_ALLOW_SKIP', DEFAULT_ALLOWED_SKIPS).split(',')
    return kind in allowed or 'all' in allowed


def skip_status(reason, kind='tool'):
    """The exit status of a test that cannot run (reason printed): 77 (skip) when the run allows
    a skip of this kind, else 1 with the reason as the failure."""
    if skip_allowed(kind):
        log('SKIP: %s' % reason)
        return SKIP
    log('FAIL: cannot run, and this run allows no skip (%s): %s' % (
        'CI=true or --strict' if strict_run() else
        'SHARDFS_TEST_ALLOW_SKIP=%s' % os.environ.get('SHARDFS_TEST_ALLOW_SKIP',
                                                       DEFAULT_ALLOWED_SKIPS), reason))
    return 1


def skip_exit(reason, kind='tool'):
    """Exit the test as skip_status says."""
    sys.exit(skip_status(reason, kind))


# ---------------------------------------------------------------------------------------------
# Result collection
# ---------------------------------------------------------------------------------------------

class Checker:
    MAX_PRINT = 300

    def __init__(self):
        self.checks = 0
        self.failures = []
        self.on_fail = None  # called after a failure is printed (main_wrapper: Env.diagnose)

    def fail(self, msg):
        self.failures.append(msg)
        if len(self.failures) <= self.MAX_PRINT:
            log('FAIL: ' + msg)
        elif len(self.failures) == self.MAX_PRINT + 1:
            log('FAIL: ... (further failures not printed)')
        if self.on_fail is not None:
            self.on_fail(msg)

    def ok(self, cond, msg):
        self.checks += 1
        if not cond:
            self.fail(msg)
        return bool(cond)

    def eq(self, what, got, expected):
        self.checks += 1
        if got != expected:
            self.fail('%s: expected %s, got %s' % (what, short(expected), short(got)))
            return False
        return True


def short(v, n=200):
    s = repr(v)
    return s if len(s) <= n else s[:n] + '...(%d chars)' % len(s)


# How long a condition may take to come true: generous, a busy CI machine must not flake a test
POLL_TIMEOUT = 60


def poll(fn, timeout=POLL_TIMEOUT, step=0.05, what=None):
    """Call fn() until it returns a true value or timeout seconds pass; returns its last value.
    With what (a description): raises RuntimeError naming it instead of returning a false value.
    The way to wait for a condition: never assert after a fixed sleep."""
    t = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > t:
            if what is not None:
                msg = 'timed out after %gs waiting for %s' % (timeout, what)
                if CURRENT_ENV is not None:
                    CURRENT_ENV.diagnose(msg, again=True)
                e = RuntimeError(msg)
                e.diagnosed = True
                raise e
            return v
        time.sleep(step)


# the Env of this test process (its mounts are the ones a poll's timeout diagnoses)
CURRENT_ENV = None
# lines of a daemon log a diagnosis prints at most (its last ones)
DIAG_LOG_LINES = 60
# seconds a diagnosis waits for a mount's stats (a hung mount does not answer)
DIAG_STATS_WAIT = 5


def bounded_call(fn, seconds):
    """fn() on a daemon thread, waited for at most seconds: (True, its value), (False, the
    exception it raised) or (False, None) when it did not return in time (the thread is left:
    a read of a hung mount)."""
    out = []

    def run():
        try:
            out.append((True, fn()))
        except Exception as e:  # noqa: BLE001 (reported as the answer)
            out.append((False, e))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    return out[0] if out else (False, None)


def tail_lines(path, n):
    """The last n lines of the file at path (read from its last 256 KiB)."""
    with open(path, 'rb') as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - (256 << 10)))
        data = f.read()
    lines = data.decode(errors='replace').splitlines()
    if size > len(data) and lines:
        lines = lines[1:]  # the first may be cut
    return lines[-n:]


def format_stats(st, width=110):
    """A mount's stats document, compact: its fields that are not 0 as name=value, wrapped to
    lines of about width characters; then how many are 0."""
    if not isinstance(st, dict):
        return [short(st, 2000)]
    items = ['%s=%s' % (k, v) for k, v in st.items() if v not in (0, '0', '')]
    lines, cur = [], ''
    for it in items:
        if cur and len(cur) + 1 + len(it) > width:
            lines.append(cur)
            cur = it
        else:
            cur = cur + ' ' + it if cur else it
    if cur:
        lines.append(cur)
    return lines + ['(the other %d fields 0)' % (len(st) - len(items))]


def wchan(pid):
    """Where process pid waits in the kernel (/proc/PID/wchan: 'request_wait_answer' for a
    reader waiting for the daemon's answer to a FUSE request), '' once it is gone."""
    try:
        with open('/proc/%d/wchan' % pid) as f:
            return f.read()
    except OSError:
        return ''


def write_file(path, data):
    with open(path, 'wb') as f:
        f.write(data)


def read_result(path):
    """('ok', bytes) or ('err', errno): one unbuffered read of the whole file."""
    try:
        with open(path, 'rb', buffering=0) as f:
            return ('ok', f.read())
    except OSError as e:
        return ('err', e.errno)


# The refresh tests' change (test_mount.py refresh-noticed, test_hostile_user.py refresh-counts):
# three shards, two of them opened; then one rewritten in place and one deleted in the source.
CHANGE_A = [('k%d.bin' % i, bytes([65 + i]) * (3000 + 500 * i)) for i in range(3)]
CHANGE_B = [('k%d.bin' % i, bytes([97 + i]) * (2000 + 700 * i)) for i in range(4)]


def change_sources(src):
    """src/ made with s0.tar, s1.tar, s2.tar, each of the members CHANGE_A."""
    os.makedirs(src)
    for n in range(3):
        write_file(os.path.join(src, 's%d.tar' % n), tar_bytes(CHANGE_A))


def change_in_place(env, path, how):
    """Change cache file path in place, as a cleanup script or a hand edit would: how is
    'truncate0', 'truncate-half', 'truncate-last', 'punch' (a 4 KiB hole at 0), 'flip' (a
    random bit), 'rewrite' (a byte written over with itself: a change of the file, not of its
    bytes), or 'unlink' and 'chmod' (no change of the file's bytes)."""
    size = os.path.getsize(path)
    if how == 'unlink':
        os.unlink(path)
    elif how == 'chmod':
        os.chmod(path, 0o644)
    elif how.startswith('truncate'):
        os.truncate(path, {'truncate0': 0, 'truncate-half': size // 2,
                           'truncate-last': size - 1}[how])
    elif how == 'punch':
        env.run(['fallocate', '--punch-hole', '-o', '0', '-l', '4096', path], check=True)
    elif how in ('flip', 'rewrite'):
        at = env.rng.randrange(size)
        with open(path, 'r+b') as f:
            f.seek(at)
            b = f.read(1)[0]
            f.seek(at)
            f.write(bytes([b ^ (1 << env.rng.randrange(8)) if how == 'flip' else b]))
    else:
        raise ValueError(how)


class Readers:
    """nthreads threads that read random paths of want {path: bytes}, whole, until stop():
    got counts exact reads ('ok') and ESTALE; anything else (other bytes, another error)
    goes to bad and ends its thread."""

    def __init__(self, want, rng, nthreads=4):
        self.want, self.paths = want, sorted(want)
        self.got, self.bad = {'ok': 0, 'ESTALE': 0}, []
        self.halt, self.cv = threading.Event(), threading.Condition()
        self.ts = [threading.Thread(target=self._run, args=(rng.randrange(1 << 30),),
                                    daemon=True) for _ in range(nthreads)]
        for t in self.ts:
            t.start()

    def _run(self, seed):
        r = random.Random(seed)
        while not self.halt.is_set():
            p = self.paths[r.randrange(len(self.paths))]
            try:
                data = read_all(p)
                what = 'ok' if data == self.want[p] else \
                    '%s: %d bytes that are not its own' % (p, len(data))
            except OSError as e:
                what = 'ESTALE' if e.errno == errno.ESTALE else '%s: %s' % (p, e.strerror)
            with self.cv:
                if what in self.got:
                    self.got[what] += 1
                else:
                    self.bad.append(what)
                self.cv.notify_all()
            if what not in self.got:
                return

    def alive(self):
        return any(t.is_alive() for t in self.ts)

    def wait_reads(self, n, timeout=60, exact=False):
        """Until n reads were made in all (exact: n reads that gave the exact bytes, ESTALE
        not counted): True; False once a thread met a bad answer, none is left, or timeout
        seconds passed without them."""
        def count():
            return self.got['ok'] if exact else sum(self.got.values())
        with self.cv:
            done = self.cv.wait_for(lambda: count() >= n or self.bad or not self.alive(),
                                    timeout=timeout)
        return bool(done) and count() >= n and not self.bad and self.alive()

    def stop(self):
        self.halt.set()
        for t in self.ts:
            t.join(120)


def change_under_open_files(ck, src, mnt):
    """s0.tar and s1.tar of the mount mnt opened, not read (the first read reaches the daemon);
    then s0.tar rewritten in place in src (same inode, the members CHANGE_B: other bytes and
    size) and s1.tar deleted: a read of each open file is ESTALE (checked with ck)."""
    fds = [os.open(os.path.join(mnt, 's%d.tar' % n), os.O_RDONLY) for n in range(2)]
    try:
        write_file(os.path.join(src, 's0.tar'), tar_bytes(CHANGE_B))
        os.unlink(os.path.join(src, 's1.tar'))
        for n, fd in enumerate(fds):
            try:
                os.pread(fd, 512, 0)
                got = 'ok'
            except OSError as e:
                got = errno.errorcode.get(e.errno, e.errno)
            ck.eq('s%d.tar read after the change' % n, got, 'ESTALE')
    finally:
        for fd in fds:
            os.close(fd)


# ---------------------------------------------------------------------------------------------
# Environment, subprocesses
# ---------------------------------------------------------------------------------------------

class Env:
    """Per-test temp dir, environment for child processes, registry of live mounts."""

    def __init__(self, shardfs, name):
        self.shardfs = os.path.abspath(shardfs)
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix='shardfs-mt-%s-' % name)
        os.chmod(self.tmp, 0o755)
        home = os.path.join(self.tmp, 'home')
        os.makedirs(home)
        self.env = dict(os.environ)
        self.env.update(HOME=home, XDG_CACHE_HOME=os.path.join(home, '.cache'), LC_ALL='C.UTF-8')
        self.mounts = []
        # how each daemon ended: {pid: (wait status, mountpoint or None)}; daemons whose end a
        # test caused ({pid: signal}); pids of daemons of a mount that went ahead ({pid: mnt});
        # daemons the helpers SIGKILLed because they outlived their unmount
        self.daemon_ends = {}
        self.daemon_maxrss = {}
        self.expected_ends = {}
        self.daemons = {}
        self.killed_leftovers = set()
        self.umount_failures = []  # 'shardfs umount' failures of Mount.umount (not quiet)
        self.seen_mounts = []  # every Mount that mounted (diagnose: the ended ones' logs)
        global CURRENT_ENV
        CURRENT_ENV = self
        set_subreaper()
        seed = os.environ.get('SHARDFS_TEST_SEED')
        self.seed = int(seed) if seed else 20240611
        log('== shardfs mount test %r  shardfs=%s  seed=%d  tmp=%s' % (name, self.shardfs,
                                                                       self.seed, self.tmp))
        self.rng = random.Random(self.seed)

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def run(self, cmd, timeout=60, input=None, check=False, files=False):
        """Run cmd; files=True captures output through temp files instead of pipes (for
        commands that leave a daemon behind, which may keep inherited fds open)."""
        t = time.monotonic()
        if files:
            with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
                try:
                    rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
                                        env=self.env, timeout=timeout).returncode
                except subprocess.TimeoutExpired:
                    log('TIMEOUT after %ds: %s' % (timeout, ' '.join(map(str, cmd))))
                    rc = None
                fo.seek(0)
                fe.seek(0)
                r = subprocess.CompletedProcess(cmd, rc, fo.read(), fe.read())
        else:
            try:
                r = subprocess.run(cmd, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env=self.env, timeout=timeout)
            except subprocess.TimeoutExpired as e:
                log('TIMEOUT after %ds: %s' % (timeout, ' '.join(map(str, cmd))))
                r = subprocess.CompletedProcess(cmd, None, e.stdout or b'', e.stderr or b'')
        r.elapsed = time.monotonic() - t
        if check and r.returncode != 0:
            raise RuntimeError('command failed (rc=%r): %s\n%s' % (
                r.returncode, ' '.join(map(str, cmd)), r.stderr.decode(errors='replace')))
        return r

    def reap(self):
        """Collect how the shardfs daemons that have ended ended (see reap_daemons)."""
        reap_daemons(self)

    def daemon_failures(self):
        """One message for each daemon that did not end cleanly: killed by a signal the test
        did not send, or (a daemon of a mount that went ahead) exit status other than 0, or
        still running after its unmount (SIGKILLed by the helpers); and for each failed
        'shardfs umount' of Mount.umount (not quiet)."""
        out = list(self.umount_failures)
        for pid, (status, mnt) in sorted(self.daemon_ends.items()):
            where = 'daemon %d%s' % (pid, ' (mount %s)' % mnt if mnt else '')
            exp = self.expected_ends.get(pid)
            if pid in self.killed_leftovers:
                out.append('%s still ran after its unmount (SIGKILLed by the test helpers)'
                           % where)
            elif os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
                if sig != exp:
                    out.append('%s %s' % (where, describe_status(status)))
            elif os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0 and pid in self.daemons \
                    and exp is None:
                out.append('%s %s' % (where, describe_status(status)))
        return out

    def diagnose(self, reason, again=False, ended=False):
        """Print what a diagnosis of a failure (reason) needs: for each running mount (with
        ended, also each that mounted and has ended since) the tail of its daemon log, its
        stats now (or the last the test read), and the request list of each server and proxy
        that runs (diag.py). A mount is diagnosed once (again: twice, for a timeout or an
        exception after a failed check); bounded: DIAG_LOG_LINES lines of a log, diag.TAIL of a
        request list."""
        limit = 2 if again else 1
        ms = [m for m in (self.seen_mounts if ended else self.mounts)
              if m.diagnosed < limit and (m.mounted or ended)]
        if not ms:
            return
        log('==== diagnosis of %s: %s' % (self.name, reason))
        for m in ms:
            m.diagnosed += 1
            m.print_diagnosis()
        for label, lines, total in diag.request_lists():
            log('---- %s: %d%s' % (label, total, ', the last %d:' % len(lines)
                                   if len(lines) < total else ''))
            for ln in lines:
                log('  ' + ln)
        log('==== end of the diagnosis')

    def cleanup(self):
        for m in list(self.mounts):
            m.umount(quiet=True)
        self.reap()
        still = [p for p in mounted_paths() if p == self.tmp or p.startswith(self.tmp + '/')]
        if still:
            log('NOT removing %s: still mounted: %r' % (self.tmp, still))
            return
        if os.environ.get('SHARDFS_TEST_KEEP'):
            log('keeping %s' % self.tmp)
            return
        shutil.rmtree(self.tmp, ignore_errors=True)


def unescape_mountinfo(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == '\\' and i + 3 < len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return ''.join(out)


def mounted_paths():
    """Mount points from /proc/self/mountinfo (no stat on the mount, so it cannot hang)."""
    res = []
    with open('/proc/self/mountinfo') as f:
        for line in f:
            parts = line.split(' ')
            res.append(unescape_mountinfo(parts[4]))
    return res


def mount_fstype(path):
    path = os.path.realpath(path)
    with open('/proc/self/mountinfo') as f:
        for line in f:
            parts = line.split(' ')
            if unescape_mountinfo(parts[4]) == path:
                sep = parts.index('-')
                return parts[sep + 1], parts[5]
    return None


def is_mounted(path):
    return os.path.realpath(path) in mounted_paths()


def tmpfs(path, size, skip=False):
    """A tmpfs of size (bytes, or a string such as '8m') mounted at path (made if missing;
    mode 0700; root only): a test's small or full cache disk. Returns path. A mount that fails
    raises CalledProcessError, or with skip Skip (kind 'host'). untmpfs ends it."""
    os.makedirs(path, exist_ok=True)
    cmd = ['mount', '-t', 'tmpfs', '-o', 'size=%s,mode=0700' % size, 'tmpfs', path]
    if not skip:
        subprocess.run(cmd, check=True, timeout=60)
        return path
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise Skip('cannot mount a tmpfs (%s)' % r.stderr.strip(), kind='host')
    return path


def untmpfs(path):
    """Unmount the tmpfs at path (tmpfs's), lazily (umount -l) when it is still busy."""
    if subprocess.run(['umount', path], timeout=60).returncode != 0:
        subprocess.run(['umount', '-l', path], timeout=60)


class Tmpfs:
    """tmpfs(path, size) as a context: mounted on entry (logged), unmounted on exit in any
    case (untmpfs)."""

    def __init__(self, path, size):
        self.path = path
        self.size = size

    def __enter__(self):
        tmpfs(self.path, self.size)
        log('tmpfs of %d MiB at %s' % (self.size >> 20, self.path))
        return self

    def __exit__(self, *exc):
        untmpfs(self.path)
        return False


def pid_alive(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            st = f.read()
    except OSError:
        return False
    return st[st.rindex(')') + 2] not in 'ZX'


def daemons_for(shardfs, mountpoint):
    """PIDs of shardfs processes whose argv names this mountpoint (processes we started)."""
    pids = []
    targets = {mountpoint, os.path.realpath(mountpoint)}
    for d in os.listdir('/proc'):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open('/proc/%s/cmdline' % d, 'rb') as f:
                argv = [a.decode(errors='replace') for a in f.read().split(b'\0') if a]
        except OSError:
            continue
        if argv and os.path.basename(argv[0]).startswith('shardfs') and targets & set(argv):
            if pid_alive(int(d)):
                pids.append(int(d))
    return pids


def set_subreaper():
    """Make this process the reaper of its orphaned descendants (prctl
    PR_SET_CHILD_SUBREAPER): 'shardfs mount' forks the daemon and exits, so the daemon becomes
    a child of the test, which can then wait for it and learn how it ended (reap_daemons)."""
    import ctypes
    PR_SET_CHILD_SUBREAPER = 36
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), 'prctl(PR_SET_CHILD_SUBREAPER)')


def describe_status(status):
    """'exited with status N' or 'was killed by signal SIGSEGV (core dumped)'."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = 'signal %d' % sig
        return 'was killed by signal %s%s' % (name, ' (core dumped)' if os.WCOREDUMP(status)
                                               else '')
    return 'exited with status %d' % os.WEXITSTATUS(status)


def ended_children(name='shardfs'):
    """PIDs of this process's children named name (comm) that have ended (zombies)."""
    me, out = os.getpid(), []
    for d in os.listdir('/proc'):
        if not d.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % d) as f:
                st = f.read()
        except OSError:
            continue
        comm = st[st.index('(') + 1:st.rindex(')')]
        rest = st[st.rindex(')') + 2:].split()
        if comm == name and rest[0] == 'Z' and int(rest[1]) == me:
            out.append(int(d))
    return out


def reap_daemons(env):
    """Wait for every shardfs daemon of this test that has ended (a zombie child: the test is
    their subreaper) and record its wait status in env.daemon_ends and its peak resident set
    (bytes; the kernel's ru_maxrss, no sampling) in env.daemon_maxrss. Never blocks."""
    for pid in set(ended_children()) | set(env.daemons):
        if pid in env.daemon_ends:
            continue
        try:
            got, status, ru = os.wait4(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        if got == pid:
            env.daemon_ends[pid] = (status, env.daemons.get(pid))
            env.daemon_maxrss[pid] = ru.ru_maxrss * 1024
            if status != 0:
                log('daemon %d%s %s' % (pid, ' (mount %s)' % env.daemons[pid]
                                        if pid in env.daemons else '', describe_status(status)))


KILL_WAIT = 10  # seconds a SIGKILLed daemon may take to exit (and close its /dev/fuse)


def kill_daemon(env, pid, sig):
    """Send sig to a daemon on purpose: its death by sig is then no failure of the test.
    SIGKILL: return once the process has exited (sigkill_and_wait: at most KILL_WAIT s, else
    RuntimeError), so what the test does next meets a mount whose daemon is gone, never one
    still dying (whose in-flight requests end ECONNABORTED, not ENOTCONN)."""
    env.expected_ends[pid] = sig
    if sig != signal.SIGKILL:
        os.kill(pid, sig)  # the caller waits for the end it asked for (a stop has its own bound)
        return
    if sigkill_and_wait([pid])[1]:
        raise RuntimeError('daemon %d still runs %d s after SIGKILL' % (pid, KILL_WAIT))


# ---------------------------------------------------------------------------------------------
# FUSE availability
# ---------------------------------------------------------------------------------------------

def has_cap_sys_admin():
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith('CapEff:'):
                    return bool(int(line.split()[1], 16) & (1 << 21))
    except OSError:
        pass
    return False


FUSE_ADVICE = ('the mount tests need a usable /dev/fuse and the right to mount (root, or a '
               'setuid fusermount3); in a container: --device /dev/fuse --cap-add SYS_ADMIN')


def fuse_precheck():
    """Raise Skip (kind 'fuse') naming the reason when FUSE cannot work here at all
    (independent of shardfs): /dev/fuse missing or not openable, no right to mount."""
    try:
        fd = os.open('/dev/fuse', os.O_RDWR)
        os.close(fd)
    except OSError as e:
        raise Skip('cannot open /dev/fuse: %s; %s' % (e.strerror, FUSE_ADVICE), 'fuse')
    if not has_cap_sys_admin():
        fm = shutil.which('fusermount3')
        if not fm or not (os.stat(fm).st_mode & stat.S_ISUID):
            raise Skip('no CAP_SYS_ADMIN and no setuid fusermount3; %s' % FUSE_ADVICE, 'fuse')


def trial_mount(tmp):
    """Mount a FUSE file system on a directory below tmp and unmount it again (the kernel side
    only: no daemon answers; mount(2) as root, the way libfuse mounts). Raises Skip (kind
    'fuse') naming what failed. Without CAP_SYS_ADMIN (a setuid fusermount3 mounts) it checks
    nothing."""
    import ctypes
    if not has_cap_sys_admin():
        return
    libc = ctypes.CDLL(None, use_errno=True)
    mnt = os.path.join(tmp, 'shardfs-trial-mount')
    os.makedirs(mnt, exist_ok=True)
    try:
        fd = os.open('/dev/fuse', os.O_RDWR)
    except OSError as e:
        raise Skip('cannot open /dev/fuse: %s; %s' % (e.strerror, FUSE_ADVICE), 'fuse')
    try:
        opts = 'fd=%d,rootmode=40000,user_id=%d,group_id=%d' % (fd, os.getuid(), os.getgid())
        MS_RDONLY, MS_NOSUID, MS_NODEV = 1, 2, 4
        if libc.mount(b'shardfs-trial', mnt.encode(), b'fuse.shardfs-trial',
                      MS_RDONLY | MS_NOSUID | MS_NODEV, opts.encode()) != 0:
            e = ctypes.get_errno()
            raise Skip('a trial FUSE mount on %s failed: %s; %s' % (mnt, os.strerror(e),
                                                                    FUSE_ADVICE), 'fuse')
        MNT_DETACH = 2
        if libc.umount2(mnt.encode(), MNT_DETACH) != 0:
            e = ctypes.get_errno()
            raise Skip('the trial FUSE mount on %s does not unmount: %s' % (mnt, os.strerror(e)),
                       'fuse')
    finally:
        os.close(fd)
        try:
            os.rmdir(mnt)
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------
# Mounts
# ---------------------------------------------------------------------------------------------

class MountError(Exception):
    pass


class MountHung(MountError):
    """'shardfs mount' did not return within MOUNT_TIMEOUT: never an expected failure."""


class Mount:
    def __init__(self, env, source, mountpoint=None, cache_dir=None, extra=(), prefix=()):
        """prefix: argv run before 'shardfs mount' (e.g. prlimit --nofile=N:N --), so
        the daemon inherits its settings."""
        self.env = env
        self.prefix = list(prefix)
        self.source = source
        self.mnt = mountpoint or env.path('mnt-%d' % len(env.mounts))
        self.cache_dir = cache_dir
        self.extra = list(extra)
        self.pids = set()
        self.stderr = ''  # what 'shardfs mount' printed (warnings of a mount that went ahead)
        self.mounted = False
        self.alive_after_umount = []
        self.last_stats = None  # the last stats() read (a diagnosis prints it if none now)
        self.diagnosed = 0  # diagnoses printed (Env.diagnose)

    def __enter__(self):
        self.mount()
        return self

    def __exit__(self, typ, val, tb):
        if val is not None and isinstance(val, Exception) and \
                not getattr(val, 'diagnosed', False):
            self.env.diagnose('%s: %s' % (typ.__name__, short(str(val), 300)), again=True)
        self.umount()
        return False

    def log_file(self):
        """The daemon's log file: --log-file's, else the newest 'log' below the cache dir (the
        default: 'log' in the source's cache directory); None when there is none."""
        ex = self.extra
        for i, a in enumerate(ex):
            if a == '--log-file' and i + 1 < len(ex):
                return ex[i + 1]
            if a.startswith('--log-file='):
                return a.split('=', 1)[1]
        found = []
        for d, _, files in os.walk(self.cache_dir or os.devnull):
            found += [os.path.join(d, f) for f in files if f == 'log']
        return max(found, key=lambda p: os.stat(p).st_mtime) if found else None

    def print_diagnosis(self):
        """The tail of the daemon's log, and its stats (read now if it answers within
        DIAG_STATS_WAIT s, else the last read)."""
        log('---- mount %s of %s (daemon %s)' % (self.mnt, self.source,
                                                 ', '.join(map(str, sorted(self.pids))) or '?'))
        path = self.log_file()
        try:
            lines = tail_lines(path, DIAG_LOG_LINES) if path else None
        except OSError as e:
            lines = ['(cannot read it: %s)' % e]
        log('---- its log %s%s' % (path or '(none found)', ', the last %d lines:' % len(lines)
                                  if lines else ''))
        for ln in lines or []:
            log('  ' + ln)
        ok, st = bounded_call(self.stats, DIAG_STATS_WAIT) if self.mounted else (False, None)
        if ok:
            log('---- its stats now:')
        else:
            log('---- its stats: %s; the last the test read%s' % (
                'not mounted' if not self.mounted else 'no answer in %d s' % DIAG_STATS_WAIT
                if st is None else 'cannot read them (%s)' % st,
                ':' if self.last_stats is not None else ': none'))
            st = self.last_stats
        if st is not None:
            for ln in format_stats(st):
                log('  ' + ln)

    def mount(self):
        os.makedirs(self.mnt, exist_ok=True)
        cmd = self.prefix + [self.env.shardfs, 'mount']
        if self.cache_dir:
            cmd += ['--cache-dir', self.cache_dir]
        cmd += self.extra + [self.source, self.mnt]
        self.env.mounts.append(self)
        log('$ ' + ' '.join(cmd))
        r = self.env.run(cmd, timeout=MOUNT_TIMEOUT, files=True)
        err = r.stderr.decode(errors='replace')
        self.stderr = err
        if r.returncode is None:
            self.pids.update(daemons_for(self.env.shardfs, self.mnt))
            self.umount(quiet=True)
            raise MountHung('shardfs mount did not return within %ds (hung); stderr: %s'
                            % (MOUNT_TIMEOUT, err.strip()))
        if r.returncode != 0:
            self.pids.update(daemons_for(self.env.shardfs, self.mnt))
            self.umount(quiet=True)
            raise MountError('shardfs mount failed (rc=%r): %s' % (r.returncode, err.strip()))
        if not is_mounted(self.mnt):
            self.pids.update(daemons_for(self.env.shardfs, self.mnt))
            self.umount(quiet=True)
            raise MountError('shardfs mount exited 0 but %s is not a mount point; stderr: %s'
                             % (self.mnt, err.strip()))
        self.mounted = True
        self.env.seen_mounts.append(self)
        self.pids.update(daemons_for(self.env.shardfs, self.mnt))
        for p in self.pids:
            self.env.daemons[p] = self.mnt
        log('mounted %s on %s in %.2fs (fstype %s)' % (self.source, self.mnt, r.elapsed,
                                                        mount_fstype(self.mnt)))

    def stats(self):
        with open(os.path.join(self.mnt, '.shardfs', 'stats'), 'rb') as f:
            data = f.read()
        st = json.loads(data.decode('utf-8'))
        self.last_stats = st
        if isinstance(st, dict) and isinstance(st.get('pid'), int):
            self.pids.add(st['pid'])
            self.env.daemons[st['pid']] = self.mnt
        return st

    def reads_settled(self):
        """Wait until no read of a file is being answered (reads_inflight 0) and return the
        stats: a reader gets its bytes just before the daemon releases the cache units its read
        pinned, so the next read's fill could find them pinned and evict others. A test that
        counts evictions waits for this between reads."""
        return poll(lambda: (lambda s: s['reads_inflight'] == 0 and s)(self.stats()),
                    what='no read in flight on %s' % self.mnt)

    def umount(self, quiet=False):
        """Unmount (shardfs umount, then fusermount3 -u -z) and make sure the daemon is gone.
        Returns the CompletedProcess of 'shardfs umount' or None."""
        if self in self.env.mounts:
            self.env.mounts.remove(self)
        r = None
        self.pids.update(daemons_for(self.env.shardfs, self.mnt))
        if is_mounted(self.mnt):
            r = self.env.run([self.env.shardfs, 'umount', self.mnt], timeout=UMOUNT_TIMEOUT,
                             files=True)
            # 'shardfs umount' waits for the daemon to exit: record who is still alive right now
            self.alive_after_umount = sorted(p for p in self.pids if pid_alive(p))
            if r.returncode != 0 and not quiet:
                msg = 'shardfs umount %s: rc=%r stderr=%s' % (
                    self.mnt, r.returncode, r.stderr.decode(errors='replace').strip())
                log(msg)
                self.env.umount_failures.append(msg)
            if is_mounted(self.mnt):
                log('still mounted after shardfs umount; fusermount3 -u -z %s' % self.mnt)
                self.env.run(['fusermount3', '-u', '-z', self.mnt], timeout=UMOUNT_TIMEOUT)
            if is_mounted(self.mnt) and os.geteuid() == 0:
                self.env.run(['umount', '-l', self.mnt], timeout=UMOUNT_TIMEOUT)
        self.mounted = False
        self.env.killed_leftovers.update(
            kill_pids(self.pids | set(daemons_for(self.env.shardfs, self.mnt))))
        self.env.reap()
        return r

    def ends(self):
        """{pid: 'exited with status 0' | 'was killed by signal ...'} of this mount's daemons
        that have ended and been reaped."""
        return {p: describe_status(self.env.daemon_ends[p][0]) for p in self.pids
                if p in self.env.daemon_ends}


def mount_error(ck, label, m):
    """Mounts m (a Mount), which must fail: returns the error message; None, with the failed
    check '<label>: mount succeeded', when it mounted (it is unmounted again), or with
    '<label>: ... hung' when 'shardfs mount' did not return within MOUNT_TIMEOUT (a failure
    that retries as if transient, with a retry budget longer than that, shows so)."""
    try:
        m.mount()
    except MountHung as e:
        ck.fail('%s: %s' % (label, e))
        return None
    except MountError as e:
        return str(e)
    ck.fail('%s: mount succeeded' % label)
    m.umount()
    return None


def sigkill_and_wait(pids, timeout=KILL_WAIT):
    """SIGKILL each of pids and return once every one has exited (its pidfd readable, so its
    files, /dev/fuse among them, are closed), at most timeout seconds (then a log line names
    those still there): what a caller does next never meets a process still dying. Returns
    (the pids signalled, those not gone already; those of them that outlived timeout), both
    sorted."""
    fds = {}
    for p in pids:
        try:
            fd = os.pidfd_open(p)
        except OSError:
            continue  # gone already
        try:
            os.kill(p, signal.SIGKILL)
            fds[p] = fd
        except OSError:
            os.close(fd)
    end = time.monotonic() + timeout
    left = dict(fds)
    while left:
        ready = select.select(list(left.values()), [], [], max(0.0, end - time.monotonic()))[0]
        if not ready:
            log('pid(s) %s still there %g s after SIGKILL' % (sorted(left), timeout))
            break
        left = {p: fd for p, fd in left.items() if fd not in ready}
    for fd in fds.values():
        os.close(fd)
    return sorted(fds), sorted(left)


def kill_pids(pids, grace=5.0):
    """Wait up to grace seconds for pids to end, then SIGKILL the rest and wait for them to
    exit (sigkill_and_wait); returns those killed."""
    live = [p for p in pids if pid_alive(p)]
    if not live:
        return []
    poll(lambda: not any(pid_alive(p) for p in live), timeout=grace, step=0.1)
    left = [p for p in live if pid_alive(p)]
    for p in left:
        log('killing leftover daemon pid %d' % p)
    return sigkill_and_wait(left)[0]


class Watchdog:
    """If the test runs past its deadline (e.g. a syscall blocked on a hung mount), kill the
    daemons (which fails the blocked FUSE requests), lazily unmount and exit 1."""

    def __init__(self, env, seconds):
        self.env = env
        self.seconds = seconds
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        if self.done.wait(self.seconds):
            return
        log('WATCHDOG: test exceeded %ds; the mount is presumably hung. Killing the daemon.'
            % self.seconds)
        self.env.diagnose('the watchdog (%d s)' % self.seconds, again=True)
        for m in list(self.env.mounts):
            sigkill_and_wait(m.pids | set(daemons_for(self.env.shardfs, m.mnt)))
            subprocess.run(['fusermount3', '-u', '-z', m.mnt], timeout=30,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def ours_mounted():
            return any(p == self.env.tmp or p.startswith(self.env.tmp + '/')
                       for p in mounted_paths())
        # the lazy unmounts leave the mount table once the daemons are gone (bounded)
        poll(lambda: not ours_mounted(), timeout=10)
        if not ours_mounted() and not os.environ.get('SHARDFS_TEST_KEEP'):
            shutil.rmtree(self.env.tmp, ignore_errors=True)
        sys.stdout.flush()
        os._exit(1)

    def stop(self):
        self.done.set()


# ---------------------------------------------------------------------------------------------
# Snapshots and comparison
# ---------------------------------------------------------------------------------------------

KIND = {stat.S_IFREG: 'file', stat.S_IFDIR: 'dir', stat.S_IFLNK: 'symlink', stat.S_IFIFO: 'fifo',
        stat.S_IFCHR: 'chardev', stat.S_IFBLK: 'blockdev', stat.S_IFSOCK: 'socket'}


class Entry:
    __slots__ = ('kind', 'mode', 'size', 'mtime', 'link', 'digest', 'ino', 'nlink', 'error',
                 'dtype_kind')

    def __repr__(self):
        return 'Entry(%s)' % ', '.join('%s=%r' % (k, getattr(self, k, None)) for k in self.__slots__)


# the control command ioctl (fs/core/include/fs_core_ctl.h FS_CTL_IOC: _IOW('S', 1, char[8192])); the mount is
# read-only, so commands cannot be written to .shardfs/control
FS_CTL_IOC_LEN = 8192
FS_CTL_IOC = (1 << 30) | (FS_CTL_IOC_LEN << 16) | (ord('S') << 8) | 1


def control(mnt, cmd):
    """Send command line(s) to a mount's .shardfs/control; returns the ioctl's result or raises
    OSError with the command's errno."""
    import fcntl
    buf = bytearray(cmd.encode())
    buf += bytes(FS_CTL_IOC_LEN - len(buf))
    fd = os.open(os.path.join(mnt, '.shardfs', 'control'), os.O_RDONLY)
    try:
        # a mutable buffer: Python passes one longer than 1024 bytes as it is
        return fcntl.ioctl(fd, FS_CTL_IOC, buf, True)
    finally:
        os.close(fd)


def control_errno(mnt, line):
    """control() of one command line: None when the mount took it, else the errno it answered."""
    try:
        control(mnt, line + '\n')
        return None
    except OSError as e:
        return e.errno


def logs_under(root):
    """The text of every daemon log file ('log') below a cache directory."""
    text = ''
    for d, _, files in os.walk(root):
        for f in files:
            if f == 'log':
                with open(os.path.join(d, f), errors='replace') as fh:
                    text += fh.read()
    return text


def du(path):
    """Bytes allocated by the files below path (a directory). Raises OSError when path is no
    directory or one below it cannot be listed, so that a bound on it cannot pass because the
    layout moved. A file or directory that vanishes while it is counted (a cache evicts)
    counts 0."""
    if not os.path.isdir(path):
        raise FileNotFoundError(errno.ENOENT, 'du: no such directory', path)

    def err(e):
        if not (isinstance(e, FileNotFoundError) and e.filename != path):
            raise e
    total = 0
    for d, _, files in os.walk(path, onerror=err):
        for f in files:
            try:
                total += os.lstat(os.path.join(d, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def add_seeded_member(tf, rng, k):
    """Add to tarfile tf member kNN.bin (k its number) of 0 to 700 random bytes drawn from rng
    (the size first, then each byte), mtime 1700000000: the seeded shards' plain member."""
    import io
    data = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 700)))
    ti = tarfile.TarInfo('k%02d.bin' % k)
    ti.size = len(data)
    ti.mtime = 1700000000
    tf.addfile(ti, io.BytesIO(data))


def tar_bytes(members, fmt='ustar'):
    """An uncompressed tar of [(name, bytes)] written by Python's tarfile ('ustar', padded to
    10 KiB records as GNU tar does, or 'gnu'), mode 0644, mtime 1700000000."""
    import io
    import tarfile
    bio = io.BytesIO()
    form = tarfile.USTAR_FORMAT if fmt == 'ustar' else tarfile.GNU_FORMAT
    with tarfile.open(fileobj=bio, mode='w', format=form) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = 1700000000
            ti.mode = 0o644
            tf.addfile(ti, io.BytesIO(data))
    return bio.getvalue()


def read_all(path):
    with open(path, 'rb', buffering=0) as f:
        chunks = []
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            chunks.append(b)
    return b''.join(chunks)


def snapshot(root, read=True, ck=None, skip_root_names=()):
    """{relpath: Entry} of everything below root (root itself excluded), lstat-based.
    Errors while listing/reading are recorded (and reported to ck, if given)."""
    out = {}

    def visit(d, rel):
        try:
            it = list(os.scandir(d))
        except OSError as e:
            if ck:
                ck.fail('listing %s: %s' % (d, e))
            return
        for de in it:
            r = de.name if not rel else rel + '/' + de.name
            if not rel and de.name in skip_root_names:
                continue
            e = Entry()
            e.error = None
            e.digest = None
            e.link = None
            try:
                st = os.lstat(de.path)
            except OSError as ex:
                e.kind = 'lstat-error'
                e.error = ex
                out[r] = e
                if ck:
                    ck.fail('lstat %s: %s' % (de.path, ex))
                continue
            e.kind = KIND.get(stat.S_IFMT(st.st_mode), 'unknown')
            e.mode = stat.S_IMODE(st.st_mode)
            e.size = st.st_size
            e.mtime = int(st.st_mtime // 1)
            e.ino = st.st_ino
            e.nlink = st.st_nlink
            try:
                e.dtype_kind = ('symlink' if de.is_symlink() else 'dir' if de.is_dir(follow_symlinks=False)
                                else 'file' if de.is_file(follow_symlinks=False) else 'other')
            except OSError:
                e.dtype_kind = None
            if e.kind == 'symlink':
                try:
                    e.link = os.readlink(de.path)
                except OSError as ex:
                    e.error = ex
            elif e.kind == 'file' and read:
                try:
                    e.digest = hashlib.sha256(read_all(de.path)).hexdigest()
                except OSError as ex:
                    e.error = ex
            out[r] = e
            if e.kind == 'dir':
                visit(de.path, r)

    visit(root, '')
    return out


def normalize_member(name):
    parts = [p for p in name.split('/') if p not in ('', '.')]
    if any(p == '..' for p in parts):
        return None
    return '/'.join(parts)


def explicit_dirs(archive):
    """Normalized names of directory entries stored in a (possibly compressed) shard."""
    if archive.endswith('.tar.zst'):
        data = subprocess.run(['zstd', '-q', '-d', '-c', archive], stdout=subprocess.PIPE,
                              check=True, timeout=60).stdout
        import io
        tf = tarfile.open(fileobj=io.BytesIO(data))
    else:
        tf = tarfile.open(archive)
    with tf:
        res = set()
        for m in tf:
            n = normalize_member(m.name)
            if m.isdir() and n:
                res.add(n)
        return res


def gnu_extract(env, archive, dest, tolerate_errors=False):
    os.makedirs(dest, exist_ok=True)
    r = env.run(['tar', '-xf', archive, '-C', dest], timeout=120)
    if r.returncode != 0 and not tolerate_errors:
        raise RuntimeError('GNU tar could not extract %s: %s' % (archive,
                                                                 r.stderr.decode(errors='replace')))
    return r


def clamp_mtime(t):
    """shardfs keeps 32 unsigned bits of mtime (an index entry is 32 bytes): an mtime
    before 1970 shows as 0, one after 2106-02-07 as 2**32-1 (docs/faults.md, "Indexes")."""
    return min(max(t, 0), 2**32 - 1)


def tree_of(mnt):
    """The sorted relative paths of every directory and file below mnt, its control directory
    .shardfs/ left out: a mount's whole tree, to compare with the tree expected."""
    got = set()
    for dp, dns, fns in os.walk(mnt):
        rel = os.path.relpath(dp, mnt)
        dns[:] = [x for x in dns if x != '.shardfs']
        got |= {os.path.normpath(os.path.join(rel, x)) for x in dns + fns}
    return sorted(got)


def compare_trees(ck, label, got, ref, explicit=(), ino_map=None, check_dir_attrs_of=None):
    """Compare snapshot got (mount) with snapshot ref (GNU tar extraction).
    explicit: relpaths of directories stored in the shard (their mode/mtime must match).
    ino_map: dict mount st_ino -> set of identities, filled for the inode uniqueness check.
    Returns a dict of counts."""
    counts = dict(files=0, dirs=0, symlinks=0, bytes=0, hardlink_groups=0)
    gset, rset = set(got), set(ref)
    for p in sorted(rset - gset):
        ck.fail('%s: missing in mount: %r (%s)' % (label, p, ref[p].kind))
    for p in sorted(gset - rset):
        ck.fail('%s: unexpected entry in mount: %r (%s)' % (label, p, got[p].kind))
    ck.eq('%s: number of entries' % label, len(got), len(ref))
    for p in sorted(gset & rset):
        g, r = got[p], ref[p]
        what = '%s: %r' % (label, p)
        if not ck.eq(what + ' type', g.kind, r.kind):
            continue
        ck.eq(what + ' d_type from readdir', g.dtype_kind, r.kind if r.kind != 'other' else 'other')
        if r.kind == 'file':
            counts['files'] += 1
            counts['bytes'] += r.size
            ck.eq(what + ' size', g.size, r.size)
            ck.eq(what + ' mode', oct(g.mode), oct(r.mode))
            ck.eq(what + ' mtime', g.mtime, clamp_mtime(r.mtime))
            if g.error is not None:
                ck.fail('%s read error: %s' % (what, g.error))
            else:
                ck.eq(what + ' content sha256', g.digest, r.digest)
        elif r.kind == 'dir':
            counts['dirs'] += 1
            if p in explicit:
                ck.eq(what + ' dir mode', oct(g.mode), oct(r.mode))
                ck.eq(what + ' dir mtime', g.mtime, clamp_mtime(r.mtime))
        elif r.kind == 'symlink':
            counts['symlinks'] += 1
            ck.eq(what + ' readlink', g.link, r.link)
            ck.eq(what + ' symlink mtime', g.mtime, clamp_mtime(r.mtime))
    # hardlinks: same inode in the extraction <=> same inode in the mount
    groups = {}
    for p, r in ref.items():
        if r.kind == 'file' and r.nlink > 1:
            groups.setdefault(r.ino, []).append(p)
    for ino, paths in sorted(groups.items()):
        paths = [p for p in paths if p in got]
        if len(paths) < 2:
            continue
        counts['hardlink_groups'] += 1
        inos = {got[p].ino for p in paths}
        ck.ok(len(inos) == 1, '%s: hardlinks %r should share one inode in the mount, got %r'
              % (label, paths, [got[p].ino for p in paths]))
        for p in paths:
            ck.ok(got[p].nlink >= 2, '%s: hardlink %r st_nlink expected >= 2, got %d'
                  % (label, p, got[p].nlink))
    if ino_map is not None:
        for p in gset & rset:
            ino_map.setdefault(got[p].ino, set()).add((label, ref[p].ino if ref[p].kind == 'file'
                                                       else p))
    return counts


def check_ino_unique(ck, ino_map):
    bad = {i: ids for i, ids in ino_map.items() if len(ids) > 1}
    ck.ok(not bad, 'distinct files/dirs share an inode number in the mount: %s'
          % short(sorted((i, sorted(map(str, ids))) for i, ids in bad.items())[:10], 2000))


def check_preads(ck, label, path, ref_bytes, rng, n=6):
    """Random-offset reads (and reads at/after EOF) through one fd."""
    size = len(ref_bytes)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        ck.fail('%s: open %s: %s' % (label, path, e))
        return
    try:
        probes = [(size, 10), (size + 4096, 10)]
        for _ in range(n):
            off = rng.randrange(0, max(size, 1))
            ln = rng.choice([1, 511, 4096, 65536, 200000])
            probes.append((off, ln))
        for off, ln in probes:
            try:
                got = os.pread(fd, ln, off)
            except OSError as e:
                ck.fail('%s: pread(%d, off=%d) on %s: %s' % (label, ln, off, path, e))
                continue
            exp = ref_bytes[off:off + ln]
            # a short read is legal only at EOF; pread on FUSE returns full counts otherwise
            ck.ok(got == exp, '%s: pread(len=%d, off=%d) of %s: expected %d bytes %s, got %d bytes %s'
                  % (label, ln, off, path, len(exp), short(exp[:16]), len(got), short(got[:16])))
    finally:
        os.close(fd)


def read_expect_eio(path):
    """Read a whole file; returns ('ok', bytes) or ('err', errno, bytes_before_error)."""
    got = b''
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return ('err', e.errno, b'', 'open')
    try:
        while True:
            try:
                b = os.read(fd, 65536)
            except OSError as e:
                return ('err', e.errno, got, 'read')
            if not b:
                return ('ok', got)
            got += b
    finally:
        os.close(fd)


def shard_member_count(snap):
    return len(snap)


def seeded_shards(env, rng, count=2):
    """count shards (shard-000000.tar, ...) of 20 to 30 members k00.bin.. of 1 to 9,000 random
    bytes, drawn from rng, in env's new folder src: (src, {shard name: sorted member names})."""
    src = env.path('src')
    os.makedirs(src)
    names = {}
    for s in range(count):
        members = [('k%02d.bin' % i, bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 9000))))
                   for i in range(rng.randint(20, 30))]
        write_file(os.path.join(src, 'shard-%06d.tar' % s), tar_bytes(members))
        names['shard-%06d' % s] = sorted(n for n, _ in members)
    return src, names


def run_groups(groups, doc, prefix='', deadline=240, argv=None, **kw):
    """The __main__ of a test file of groups: argv (sys.argv[1:]) SHARDFS GROUP, groups
    {GROUP: fn or (fn, deadline)}; the group runs as main_wrapper(fn, SHARDFS, prefix + GROUP,
    deadline, **kw) and exits with its status. Anything else: usage (doc) on stderr, exit 2."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[1] not in groups:
        print(doc, file=sys.stderr)
        sys.exit(2)
    fn = groups[args[1]]
    if isinstance(fn, tuple):
        fn, deadline = fn
    main_wrapper(fn, args[0], prefix + args[1], deadline=deadline, **kw)


def main_wrapper(fn, shardfs, name, deadline=240, needs_fuse=True, **kw):
    """Run fn(env, ck, **kw) with precheck (FUSE usable, unless needs_fuse is False: a test
    that mounts nothing), watchdog, cleanup; exit with 0, 1 or 77 (a skip the run allows). A
    daemon that crashed, a skip after a failure and a test that made no check fail."""
    if not os.path.exists(shardfs):
        log('shardfs binary not found: %s' % shardfs)
        sys.exit(1)
    try:
        if needs_fuse:
            fuse_precheck()
    except Skip as e:
        skip_exit(str(e), e.kind)
    env = Env(shardfs, name)
    ck = Checker()
    # a failed check prints the state of the mounts running then (once each)
    ck.on_fail = lambda msg: env.diagnose('the failed check: %s' % short(msg, 300))
    wd = Watchdog(env, int(os.environ.get('SHARDFS_TEST_DEADLINE', deadline)))
    t0 = time.monotonic()
    skip = None
    try:
        fn(env, ck, **kw)
    except Skip as e:
        skip = e
    except Exception as e:
        import traceback
        traceback.print_exc()
        if not getattr(e, 'diagnosed', False):
            # the test's own cleanup may have unmounted them: their logs, their last stats
            env.diagnose('the exception', again=True, ended=True)
        ck.fail('exception (see traceback above)')
    finally:
        try:
            env.cleanup()
        finally:
            wd.stop()
    # a daemon that crashed fails the test, whatever the test checked
    for msg in env.daemon_failures():
        ck.fail(msg)
    if skip is not None:
        if not ck.failures:
            sys.exit(skip_status(str(skip), skip.kind))
        # failures recorded before the skip stand
        log('skipped the rest (%s) after %d failures' % (skip, len(ck.failures)))
    elif ck.checks == 0:
        ck.fail('the test made no check')
    rc = 0 if not ck.failures else 1
    log('== %s: %d checks, %d failures, %.1fs -> %s' % (name, ck.checks, len(ck.failures),
                                                       time.monotonic() - t0,
                                                       'PASS' if rc == 0 else 'FAIL'))
    sys.exit(rc)
