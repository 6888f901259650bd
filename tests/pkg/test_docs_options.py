#!/usr/bin/env python3
"""docs-options: docs/usage.md's table of mount options and the option table agree.

The option table (fs/core/fs_opt.c) prints `shardfs mount --help`; docs/usage.md describes every
option in a table of its own. This test fails when an option is in one and not the other, or when
the two give a different default, so the docs cannot drift from the code. Exact sets, no clock.

usage: test_docs_options.py SHARDFS USAGE_MD
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test.checks import Checks  # noqa: E402


def help_options(shardfs):
    """{'--name': 'default or None'} from `shardfs mount --help`."""
    out = subprocess.run([shardfs, 'mount', '--help'], capture_output=True, text=True,
                         timeout=30)
    if out.returncode != 0:
        sys.exit('docs-options: `shardfs mount --help` exited %d: %s' %
                 (out.returncode, out.stderr.strip()))
    opts = {}
    for line in out.stdout.splitlines():
        m = re.match(r'\s+(?:-\w, )?\s*(--[a-z0-9-]+)', line)
        if not m or m.group(1) == '--help':
            continue
        d = re.search(r'\(default: (.*)\)\s*$', line)
        opts[m.group(1)] = d.group(1) if d else None
    return opts


def doc_options(path):
    """{'--name': 'default column'} from the '## Mount options' table of docs/usage.md."""
    text = open(path, encoding='utf-8').read()
    sect = re.search(r'^## Mount options\n(.*?)(?=^## )', text, re.S | re.M)
    if not sect:
        sys.exit('docs-options: %s has no "## Mount options" section' % path)
    opts = {}
    for line in sect.group(1).splitlines():
        if not line.startswith('| `'):
            continue
        cells = [c.strip() for c in line.strip('|').split(' | ')]
        names = re.findall(r'`(--[a-z0-9-]+|-o)\b', cells[0])
        for n in names:
            if n.startswith('--'):
                opts[n] = cells[1].strip('`')
        if '`-o' in cells[0]:
            opts['--option'] = cells[1]
    return opts


def main():
    shardfs, usage = sys.argv[1], sys.argv[2]
    h, d = help_options(shardfs), doc_options(usage)
    bad = []
    for n in sorted(set(h) - set(d)):
        bad.append('%s is an option of `shardfs mount` but not in %s' % (n, usage))
    for n in sorted(set(d) - set(h)):
        bad.append('%s is in %s but `shardfs mount` has no such option' % (n, usage))
    for n in sorted(set(h) & set(d)):
        # The help prints the table's default; the docs' cell must say the same value when
        # it is a plain value (a number or size), and may explain a default that is a place.
        hd, dd = h[n], d[n]
        if hd and re.fullmatch(r'[0-9.]+[KMGT]?|shards|cls|auto|off', hd) and hd != dd:
            bad.append('%s: the option table says default %r, %s says %r' % (n, hd, usage, dd))
    ck = Checks('docs-options')
    ck.ok(len(h) > 0, '`shardfs mount --help` lists %d options' % len(h))
    for b in bad:
        ck.fail(b)
    ck.ok(not bad, '%d options agree between `shardfs mount --help` and %s' % (len(h), usage))
    ck.exit()


if __name__ == '__main__':
    main()
