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
  option-values  for every command 'shardfs --help' lists, every option that takes a value (a
            SIZE, N, NAME, a|b choice ... after it in CMD --help's usage lines or option list),
            given with its value left out, at the end of a seeded command line: exit 2 and a
            message that names the option and says it needs a value, never 'unknown option';
            and a seeded sample of 8 options with a seeded typo (a letter dropped, doubled or
            swapped): exit 2 naming the typo (main before: 'plan M F --name' said 'unknown option --name').
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


def value_options(exe, cmd):
    """(options of CMD that take a value, every option of CMD, the most positional arguments
    before an option) from CMD --help: its usage lines and option list (not its prose); an
    option takes a value when an upper-case word or an a|b choice follows it."""
    rc, out, _ = run(exe, cmd, '--help')
    vals, every, npos = set(), set(), 0
    for line in out.splitlines():
        usage = re.match(r'^(?:usage:|      ) shardfs %s (.*)$' % cmd, line)
        if not usage and not re.match(r'^\s+(?:-\w, )?--[a-z]', line):
            continue
        if usage:
            npos = max(npos, len(re.findall(r'(?<![\w\[-])[A-Z][A-Z_]+\b(?![\]])',
                                            re.sub(r'\[[^]]*\]', '', usage.group(1)))))
        else:
            line = line.split('  ', 2)[1] if line.startswith('  -') else line.strip()
        for m in re.finditer(r'(?<![\w-])(--[a-z][a-z-]*)(?:[ =]([A-Z][A-Z_,.\[\]]*|'
                             r'[a-z]+(?:\|[a-z-]+)+)\b)?', line):
            every.add(m.group(1))
            if m.group(2):
                vals.add(m.group(1))
    return vals, every - {'--help'}, npos


def typos(rng, opt):
    """A seeded misspelling of --opt: a letter dropped, doubled or two swapped."""
    w = opt[2:]
    i = rng.randrange(len(w) - 1)
    how = rng.choice(['drop', 'double', 'swap'])
    if how == 'drop':
        t = w[:i] + w[i + 1:]
    elif how == 'double':
        t = w[:i] + w[i] + w[i:]
    else:
        t = w[:i] + w[i + 1] + w[i] + w[i + 2:]
    return '--' + t


def group_option_values(env, ck):
    """An option given without its value says so, naming the option; a misspelt option is
    named as unknown (seeded command lines: the positional arguments before, in a random
    number; the option last, so nothing can be taken as its value)."""
    exe = env.shardfs
    rng = env.rng
    nowhere = env.path('nowhere')
    _, cmds = overview(exe)
    total = 0
    for cmd in sorted(cmds):
        vals, every, npos = value_options(exe, cmd)
        log('%s: options with a value %r; all %r; %d positional' % (cmd, sorted(vals),
                                                                  sorted(every), npos))
        for opt in sorted(vals):
            pos = [nowhere] * rng.randint(0, npos)
            rc, out, err = run(exe, cmd, *pos, opt)
            log('%s %s %s: rc=%r %s' % (cmd, ' '.join(pos), opt, rc, err.strip()))
            ck.eq('%s ... %s (no value): exit' % (cmd, opt), rc, 2)
            ck.ok(opt in err and 'unknown' not in err and re.search(r'needs|wants|value', err),
                  '%s ... %s (no value): the message does not say the option needs a value: '
                  '%r' % (cmd, opt, err))
            total += 1
        # a seeded sample of 8 (each spawns the program: an ASan build takes 0.4 s)
        for opt in rng.sample(sorted(every), min(8, len(every))) or ['--force', '--name',
                                                                       '--json']:
            bad = typos(rng, opt)
            if bad in every:
                continue
            rc, out, err = run(exe, cmd, bad, *[nowhere] * npos)
            log('%s %s: rc=%r %s' % (cmd, bad, rc, err.strip()))
            ck.eq('%s %s (a typo of %s): exit' % (cmd, bad, opt), rc, 2)
            ck.ok(bad in err and 'unknown' in err,
                  '%s %s (a typo of %s): the message does not name it as unknown: %r'
                  % (cmd, bad, opt, err))
    ck.ok(total >= 30, '%d options with a value found: the --help pages were not read' % total)


GROUPS = {'synopsis': (group_synopsis, 150), 'option-bounds': (group_option_bounds, 150),
          'option-values': (group_option_values, 300)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, needs_fuse=False)
