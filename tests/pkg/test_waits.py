#!/usr/bin/env python3
"""lint-waits: no test that races another process or thread (no build needed, no mount; exact
sets).

usage: test_waits.py SOURCE_ROOT
       test_waits.py SOURCE_ROOT --file PATH [AS]   (one file, e.g. an old version written out
                                                    of `git show`, read as the tree's file AS)

The tests' sources (every .py, .c and .h of `git ls-files tests/`, but tests/bench/, whose
figures are no assertions, and this file) are read line by line, and three shapes are refused (docs/tests.md,
"The test bar": every wait bounded, on the condition itself):

- a signal sent to a process (Python: os.kill, os.killpg, Popen.send_signal, .terminate(),
  .kill(); C: kill, killpg) that no wait for the process follows within WAIT_LINES lines (on
  the same line or after: .wait(, communicate(, waitpid, a pidfd, select, pid_alive, ml.poll,
  kill_daemon, sigkill_and_wait, ...): what the test does next may meet the process still
  running or still dying. That is the race of mount-hostile15-python (ml.kill_daemon returned
  right after os.kill; a request in flight as the daemon died ended ECONNABORTED, not
  ENOTCONN), which only CI's load showed. A SIGSTOP or SIGCONT is no end and needs no wait.
- a sleep (time.sleep; usleep, nanosleep, sleep) outside any loop: a sleep used as the wait for
  something to happen.
- a loop whose only way out is the clock (a `while` whose condition names only time.monotonic
  or time.time and deadlines, with no break, return or raise in its body) around a sleep: a
  quiet period used as the wait (test_integrity.py's hold_inotify_instances before).

A poll of a condition with a deadline (ml.poll, a `for (i = 0; i < N && !cond; i++)
usleep(...)`, a while loop that breaks or returns) passes. Where a shape is right (a server
that emulates a link's latency, a cleanup after the check that already failed), ALLOW holds
the line with why.

The check also runs on seeded snippets (SEEDED) that it must flag and must not flag (the
kill_daemon before 2634975 among them), so that a change to it that catches nothing fails; an
ALLOW entry whose line is no longer in its file fails too.

Exit 0 pass, 1 fail."""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test.checks import Checks  # noqa: E402

WAIT_LINES = 6  # the lines after a signal in which the wait for its process must stand

# 'file: the line, stripped' -> why the shape is right there
ALLOW = {
    'tests/lib/shardfs_test/linkemu.py: time.sleep(self.server.delay_s)':
        "the emulated link's time to first byte, before the answer: a latency served, not a "
        'wait for anything',
    "tests/lib/shardfs_test/s3servers.py: time.sleep(owner.delay_s)  # the link's time to "
    "first byte, as linkemu.py's":
        "the emulated link's time to first byte, as linkemu.py's: a latency served, not a wait",
    'tests/remote/s3/test_creds.py: os.kill(pid, signal.SIGKILL)':
        'a cleanup after the check that failed (the helper outlived shardfs index, polled for '
        'GUARD_S first): nothing is checked of it after',
}

SIG_PY = re.compile(r'\bos\.kill\(|\bos\.killpg\(|\.send_signal\(|\.terminate\(\)|\.kill\(\)')
SIG_C = re.compile(r'(?<![\w.>])kill(?:pg)?\s*\(')
NO_END = re.compile(r'SIGSTOP|SIGCONT|SIGUSR|, 0\)')  # signals that end nothing, kill(pid, 0)
WAITS = re.compile(r'\.wait\(|communicate\(|waitpid|pidfd|select\.select|\bselect\(|\bpoll\(|'
                   r'pid_alive|kill_daemon|sigkill_and_wait|kill_pids|\bended\(|\breap\(')
SLEEP_PY = re.compile(r'\btime\.sleep\(')
SLEEP_C = re.compile(r'(?<![\w.>])(?:usleep|nanosleep|sleep)\s*\(')
LOOP_PY = re.compile(r'^\s*(?:while|for)\b')
LOOP_C = re.compile(r'^\s*(?:while|for|do)\b|^\s*\}\s*while\b')
WHILE = re.compile(r'^\s*while\s+(.*):\s*$')
CLOCK = re.compile(r'\btime\.(?:monotonic|time)\(\)')
EXITS = re.compile(r'^\s*(?:break|return|raise)\b')

# (file name, source, the lines it must flag)
SEEDED = [
    # tests/lib/shardfs_test/mount.py's kill_daemon before 2634975, cut down
    ('seeded.py',
     'def kill_daemon(env, pid, sig):\n'
     '    """Send sig to a daemon on purpose."""\n'
     '    env.expected_ends[pid] = sig\n'
     '    os.kill(pid, sig)\n'
     '\n\n'
     'def group_killed(env, ck):\n'
     '    kill_daemon(env, m.pid(), signal.SIGKILL)\n'
     '    ck.eq(\'a read\', read(m.mnt), errno.ENOTCONN)\n', [4]),
    # the same, waiting (2634975's), and the kinds of waits that pass
    ('seeded.py',
     'def kill_daemon(env, pid, sig):\n'
     '    fd = os.pidfd_open(pid) if sig == signal.SIGKILL else -1\n'
     '    try:\n'
     '        os.kill(pid, sig)\n'
     '        if fd >= 0 and not select.select([fd], [], [], KILL_WAIT)[0]:\n'
     '            raise RuntimeError(\'still runs\')\n'
     '    finally:\n'
     '        os.close(fd)\n'
     'def group_index(env, ck):\n'
     '    p.send_signal(signal.SIGINT)\n'
     '    rc = p.wait(timeout=GUARD_S)\n'
     '    os.kill(pid, signal.SIGSTOP)\n'
     '    ml.poll(lambda: proc_state(pid) == \'T\')\n'
     '    try:\n'
     '        if p.poll() is None:\n'
     '            p.kill()\n'
     '        p.wait()\n'
     '    finally:\n'
     '        os.kill(pid, signal.SIGCONT)\n', []),
    # test_integrity.py's hold_inotify_instances before: a quiet period; Watchdog's sleep
    ('seeded.py',
     'def hold():\n'
     '    fds = take()\n'
     '    quiet = time.monotonic() + 0.5\n'
     '    stop = time.monotonic() + 10\n'
     '    while time.monotonic() < min(quiet, stop):\n'
     '        time.sleep(0.02)\n'
     '        more = take()\n'
     '        if more:\n'
     '            quiet = time.monotonic() + 0.5\n'
     '    return fds\n'
     'def run(self):\n'
     '    subprocess.run([\'fusermount3\', \'-u\', \'-z\', m.mnt])\n'
     '    time.sleep(0.5)\n'
     '    if not any(mounted()):\n'
     '        shutil.rmtree(tmp)\n', [5, 13]),
    # polls that pass
    ('seeded.py',
     'while time.monotonic() < end:\n'
     '    if st() >= want:\n'
     '        break\n'
     '    time.sleep(0.05)\n'
     'while not cond() and time.monotonic() < end:\n'
     '    time.sleep(0.1)\n', []),
    # C: a child killed and its end checked without waitpid; a bare usleep; polls that pass
    ('seeded.c',
     'static void f(pid_t pid)\n{\n'
     '\tkill(pid, SIGKILL);\n'
     '\tCHECK(count_maps(dir) == 1, "maps");\n'
     '\tCHECK(a, "a");\n\tCHECK(b, "b");\n\tCHECK(c, "c");\n\tCHECK(d, "d");\n'
     '\tCHECK(e, "e");\n'
     '\tusleep(10000); /* the fill lands */\n'
     '\tCHECK(cached(o) == 4, "landed");\n'
     '\tkill(pid, SIGKILL);\n\twaitpid(pid, &status, 0);\n'
     '\tfor (int i = 0; i < 60000 && !landed(o); i++)\n\t\tusleep(1000);\n'
     '\tfor (i = 0; i < 6000; i++) {\n\t\tif (done())\n\t\t\tbreak;\n'
     '\t\tusleep(10000);\n\t}\n'
     '\tkill(pid, 0);\n}\n', [3, 10]),
]


def clock_only(line):
    """Is line a `while` whose condition reads the clock and nothing else (no call but
    min/max, no and/or/not)?"""
    m = WHILE.match(line)
    if not m or not CLOCK.search(m.group(1)):
        return False
    rest = re.sub(r'\b(?:min|max)\(', '', CLOCK.sub('', m.group(1)))
    return '(' not in rest and not re.search(r'\b(?:and|or|not|in|is)\b', rest)


def indent(line):
    return len(line) - len(line.lstrip())


def code_of(line, py):
    """The line without its comment (roughly: a '#' or '//' outside quotes is not looked for;
    a line that is all comment is '')."""
    s = line.strip()
    if py and s.startswith('#') or not py and s.startswith(('/*', '*', '//')):
        return ''
    return line


def enclosing_loop(lines, i, loop):
    """The index of the nearest line above i, less indented, that opens a loop, or None."""
    ind = indent(lines[i])
    for j in range(i - 1, -1, -1):
        s = lines[j]
        if not s.strip():
            continue
        if indent(s) < ind:
            if loop.search(s):
                return j
            ind = indent(s)
            if ind == 0:
                return None
    return None


def body_of(lines, j):
    """The lines of the block that line j opens (those more indented below it)."""
    out = []
    for s in lines[j + 1:]:
        if s.strip() and indent(s) <= indent(lines[j]):
            break
        out.append(s)
    return out


def flagged(src, name):
    """[(line number, what)] of the shapes refused in src (file name: its language)."""
    py = name.endswith('.py')
    lines = [code_of(x, py) for x in src.split('\n')]
    sig, sleep, loop = (SIG_PY, SLEEP_PY, LOOP_PY) if py else (SIG_C, SLEEP_C, LOOP_C)
    out = []
    for i, line in enumerate(lines):
        if sig.search(line) and not NO_END.search(line):
            # the lines after it up to the end of its function (a line at the left margin or
            # a def ends the look), and a pidfd opened just before (waited for after)
            after = []
            for x in lines[i + 1:]:
                if not x.strip():
                    continue
                if indent(x) == 0 or x.lstrip().startswith('def '):
                    break
                after.append(x)
                if len(after) == WAIT_LINES:
                    break
            before = [x for x in lines[max(0, i - 4):i] if 'pidfd_open' in x]
            if not before and not any(WAITS.search(x) for x in [line] + after):
                out.append((i + 1, 'a signal sent, and no wait for the process in the %d lines '
                            'after it' % WAIT_LINES))
        if sleep.search(line):
            j = enclosing_loop(lines, i, loop)
            if j is None:
                out.append((i + 1, 'a sleep outside any loop: a wait for nothing in particular'))
            elif py and clock_only(lines[j]) and \
                    not any(EXITS.match(x) for x in body_of(lines, j)):
                out.append((j + 1, 'a loop that only the clock ends, around a sleep: a quiet '
                            'period used as the wait'))
    return sorted(set(out))


def tree_files(root):
    out = subprocess.run(['git', '-C', root, 'ls-files', 'tests'], capture_output=True,
                         text=True, check=True).stdout.split()
    # not this file: its seeded snippets and ALLOW are the shapes it refuses, as strings
    return sorted(f for f in out if f.endswith(('.py', '.c', '.h')) and
                  not f.startswith('tests/bench/') and f != 'tests/pkg/test_waits.py' and
                  os.path.exists(os.path.join(root, f)))


def read(path):
    with open(path, encoding='utf-8', errors='replace') as fh:
        return fh.read()


def refused(src, name):
    """flagged(src, name) less the lines ALLOW holds; and the ALLOW keys that matched."""
    lines = src.split('\n')
    hits, used = [], set()
    for n, why in flagged(src, name):
        key = '%s: %s' % (name, lines[n - 1].strip())
        if key in ALLOW:
            used.add(key)
        else:
            hits.append((n, why, lines[n - 1].strip()))
    return hits, used


def main():
    root = sys.argv[1]
    ck = Checks('lint-waits')
    for name, src, want in SEEDED:
        got = [n for n, _ in flagged(src, name)]
        ck.ok(got == want, 'seeded %r: flags lines %s (flagged %s)' % (src[:50], want, got))
    if len(sys.argv) > 2 and sys.argv[2] == '--file':
        path = sys.argv[3]
        name = sys.argv[4] if len(sys.argv) > 4 else path
        hits, _ = refused(read(path), name)
        for n, why, text in hits:
            ck.fail('%s:%d: %s: %s' % (name, n, why, text))
        if not hits:
            ck.ok(True, '%s: no wait that races' % name)
        return ck.status()
    files = tree_files(root)
    ck.ok(len(files) > 150, '%d .py/.c/.h files of tests/ read' % len(files))
    used = set()
    for f in files:
        hits, u = refused(read(os.path.join(root, f)), f)
        used |= u
        for n, why, text in hits:
            ck.fail('%s:%d: %s: %s' % (f, n, why, text))
        if not hits:
            ck.ok(True, '%s: no wait that races' % f)
    for key in sorted(ALLOW):
        ck.ok(key in used and len(ALLOW[key]) > 30,
              'ALLOW %s: the line is in its file, refused but for the entry, and the entry '
              'says why' % key)
    return ck.status()


if __name__ == '__main__':
    sys.exit(main())
