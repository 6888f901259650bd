#!/usr/bin/python3
"""shardfs command-line tests: every place that tells a user how to call a command says what the
command itself takes.

usage: test_hostile_help.py SHARDFS GROUP
GROUP:
  synopsis  for every command 'shardfs --help' lists: its line there names the same arguments
            and options as the usage lines of 'shardfs CMD --help' (every form: 'plan' has
            two), the Commands table of docs/usage.md names no word the command does not
            take and leaves none of its usage out, and the bash completion
            (build/dist/shardfs) offers exactly the options CMD --help lists, with --help;
            a command 'shardfs --help' lists is one the command runs (not "unknown command").
            Main before this test: the overview's 'umount [--force]' (no --stale),
            'plan MOUNTPOINT FILE [--name NAME]' (no --clear), 'pack ... PREFIX' (the command
            says OUTPUT_PREFIX).
  option-bounds  every option of 'mount', 'index' and 'pack' taking a SIZE, N, SECONDS or
            SEED, given a value past any bound (seeded): exit 2, the message names the option
            and the value and gives an upper bound (main before: the sizes without a bound of
            their own, --cache-size and 5 more, and pack's --max-count and --shuffle, said only
            'at least 1' of '16777216T').
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402

log = ml.log
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')


def words(s):
    """The words of a synopsis: options (--name, -x) and placeholders (MOUNTPOINT, PATH...)."""
    return set(re.findall(r'(?<![\w-])--?[a-z][a-z-]*|\b[A-Z][A-Z_]+(?:\.\.\.)?', s))


def run(exe, *args):
    r = subprocess.run([exe] + list(args), stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=30)
    return r.returncode, r.stdout.decode(errors='replace'), r.stderr.decode(errors='replace')


def overview(exe):
    """{command: its synopses (each of its lines) joined} from 'shardfs --help'."""
    rc, out, _ = run(exe, '--help')
    cmds = {}
    section = False
    for line in out.splitlines():
        if line == 'commands:':
            section = True
            continue
        if section and not line.strip():
            break
        m = re.match(r'^  ([a-z]+) (.*?)(?:\s{2,}.*)?$', line)
        if section and m:
            cmds[m.group(1)] = (cmds.get(m.group(1), '') + ' ' + m.group(2)).strip()
    return rc, cmds


def own_help(exe, cmd):
    """(usage forms, options listed) from 'shardfs CMD --help'."""
    rc, out, err = run(exe, cmd, '--help')
    forms = [m.group(1) for m in re.finditer(r'^(?:usage:|      ) shardfs %s (.*)$' % cmd, out,
                                             re.M)]
    opts = set(re.findall(r'^\s+(?:-\w, )?(--[a-z][a-z-]*)', out, re.M))
    return rc, forms, opts, err


def docs_rows():
    """{command: the words of its docs/usage.md Commands row's first column}."""
    rows = {}
    with open(os.path.join(ROOT, 'docs', 'usage.md')) as f:
        for line in f:
            cells = line.replace('\\|', '\0').split(' | ')
            m = re.match(r'^\| `shardfs ([a-z]+)(.*)$', cells[0])
            if m:
                rows[m.group(1)] = words(m.group(2).replace('\0', '|'))
    return rows


def completion(exe):
    """{command: options the bash completion offers after it}."""
    path = os.path.join(os.path.dirname(os.path.abspath(exe)), 'dist', 'shardfs')
    comp = {}
    if not os.path.exists(path):
        return None
    with open(path) as f:
        for m in re.finditer(r"^\t([a-z]+|\*),-\*\) COMPREPLY=\(\$\(compgen -W '([^']*)'", f.read(),
                             re.M):
            comp[m.group(1)] = set(m.group(2).split())
    return comp


def group_synopsis(env, ck):
    exe = env.shardfs
    rc, cmds = overview(exe)
    ck.eq('shardfs --help: exit', rc, 0)
    ck.ok(len(cmds) >= 8, 'shardfs --help lists %d commands: %r' % (len(cmds), cmds))
    rows = docs_rows()
    comp = completion(exe)
    ck.ok(comp is not None, 'no bash completion beside %s (build/dist/shardfs)' % exe)
    for cmd, top in sorted(cmds.items()):
        hrc, forms, opts, err = own_help(exe, cmd)
        log('%s: overview %r; own usage %r; options %r' % (cmd, top, forms, sorted(opts)))
        ck.eq('shardfs %s --help: exit (%s)' % (cmd, err.strip()), hrc, 0)
        ck.ok(forms, 'shardfs %s --help prints no usage line' % cmd)
        own = set().union(*(words(f) for f in forms)) if forms else set()
        ck.eq('shardfs --help\'s line for %s names what %s --help does' % (cmd, cmd),
              sorted(words(top)), sorted(own))
        doc = rows.get(cmd)
        ck.ok(doc is not None, 'docs/usage.md has no Commands row for %s' % cmd)
        if doc is not None:
            ck.eq('docs/usage.md\'s %s row: words the command does not take' % cmd,
                  sorted(doc - own - opts), [])
            ck.eq('docs/usage.md\'s %s row: usage words it leaves out' % cmd,
                  sorted(own - doc), [])
        if comp is not None:
            offered = comp.get(cmd, comp.get('*'))
            ck.ok(offered is not None, 'the bash completion has no options for %s' % cmd)
            if offered is not None:
                ck.eq('the bash completion of %s --<TAB>' % cmd, sorted(offered),
                      sorted(opts | {o for o in own if o.startswith('--')} | {'--help'}))


def group_option_bounds(env, ck):
    """Every option of 'mount', 'index' and 'pack' taking a SIZE, N, SECONDS or SEED, given a
    value past any bound (seeded: a digit string of 21 to 30 digits, or the first size over 64 bits,
    with a suffix or none): exit 2, naming the option, the value, and an upper bound, so the
    refusal says why (main before: the sizes without a bound of their own said only 'at least
    1', of a value that was digits with a suffix and at least 1)."""
    exe = env.shardfs
    rng = env.rng
    nowhere = env.path('nowhere')
    for cmd in ('mount', 'index', 'pack'):
        rc, out, _ = run(exe, cmd, '--help')
        opts = re.findall(r'^\s+(?:-\w, )?--([a-z-]+) (SIZE|N|SECONDS|SEED)\b', out, re.M)
        ck.ok(len(opts) >= 3, '%s --help: %d options with a number: %r' % (cmd, len(opts), opts))
        for name, kind in opts:
            if kind == 'SIZE':
                big = rng.choice(['16777216T', '17179869184G', '18446744073709551616',
                                  '9' * rng.randint(21, 30) + rng.choice(['', 'K', 'M', 'G', 'T'])])
            else:
                big = '9' * rng.randint(21, 30)
            args = [cmd, '--' + name, big, nowhere] + ([nowhere] if cmd != 'index' else [])
            rc, out, err = run(exe, *args)
            log('%s --%s %s: rc=%r %s' % (cmd, name, big, rc, err.strip()))
            ck.eq('%s --%s %s: exit' % (cmd, name, big), rc, 2)
            ck.ok('--%s' % name in err and "'%s'" % big in err,
                  '%s --%s %s: the message names neither: %r' % (cmd, name, big, err))
            ck.ok(re.search(r'(?: to | up to | below | at most )\S', err) is not None,
                  '%s --%s %s: the message gives no upper bound: %r' % (cmd, name, big, err))


GROUPS = {'synopsis': (group_synopsis, 60), 'option-bounds': (group_option_bounds, 60)}


if __name__ == '__main__':
    if len(sys.argv) != 3 or sys.argv[2] not in GROUPS:
        print(__doc__)
        sys.exit(2)
    fn, deadline = GROUPS[sys.argv[2]]
    sys.exit(ml.main_wrapper(fn, sys.argv[1], sys.argv[2], deadline=deadline, needs_fuse=False))
