#!/usr/bin/env python3
"""wording-plurals: no message of fs/ puts a count straight before a plural noun (no build
needed, no mount).

usage: test_wording.py SOURCE_ROOT

A format string in a .c file of fs/ (git ls-files) with a count conversion (%u, %d, %zu, %llu,
%" PRIu64 ", ...) followed by a space and a word that ends in 's' says "1 members" when the
count is 1: the noun comes from fs_plural (fs/core/include/fs_core.h) as a %s instead. Left
alone: units, which stay as they are ("1 bytes" is how sizes are said: UNITS), verbs (VERBS),
and a count after '/' ("shard 3/10 samples": the total's noun). The check also runs on seeded
lines (SEEDED) that it must flag and must not flag, so that a change to it that catches nothing
fails.

Exit 0 pass, 1 fail."""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test.checks import Checks  # noqa: E402

# a count conversion (a C one, or a PRI macro between string pieces), whitespace, a word in s
COUNT_NOUN = re.compile(r'(?<![/%])%(?:"\s*PRI[udi](?:8|16|32|64|MAX|PTR)\s*"|'
                        r'[-+ 0#]*[0-9*]*(?:ll|l|z|h|hh|j|t)?[udi])'
                        r'(?:"\s*")?\s+([A-Za-z_]+s)\b')
UNITS = {'bytes', 'ms', 'us', 'ns', 's', 'secs', 'seconds'}
VERBS = {'is', 'was', 'has', 'does', 'needs', 'takes', 'makes'}
# (line, flagged?)
SEEDED = [
    ('"shard %s: %u members left out"', True),
    ('"mounted: %" PRIu64 " objects"', True),
    ('"%zu shards"', True),
    ('"%d\\n" "%d plans"', True),
    ('"%u %s left out", n, fs_plural(n, "member", "members")', False),
    ('"%" PRIu64 " bytes"', False),
    ('"pack: shard %zu/%zu samples"', False),
    ('"pid %ld is gone"', False),
    ('"100%% done"', False),
]


def flagged(text):
    return [m for m in COUNT_NOUN.finditer(text)
            if m.group(1) not in UNITS and m.group(1) not in VERBS]


def main():
    root = sys.argv[1]
    ck = Checks('wording-plurals')
    for line, want in SEEDED:
        ck.ok(bool(flagged(line)) == want, 'seeded %r: %s' % (line, 'flagged' if want
                                                              else 'not flagged'))
    files = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard', 'fs'], cwd=root,
                           capture_output=True, text=True, check=True).stdout.split()
    n = 0
    for f in sorted(files):
        if not f.endswith('.c'):
            continue
        with open(os.path.join(root, f), encoding='utf-8', errors='replace') as fh:
            src = fh.read()
        n += 1
        hits = ['%d: %r ("1 %s")' % (src.count('\n', 0, m.start()) + 1, m.group(0), m.group(1))
                for m in flagged(src)]
        ck.ok(not hits, '%s: no count before a plural noun%s' % (
            f, '' if not hits else ': take the noun from fs_plural: ' + '; '.join(hits)))
    ck.ok(n > 40, 'only %d .c files of fs/ read' % n)
    return ck.status()


if __name__ == '__main__':
    sys.exit(main())
