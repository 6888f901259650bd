#!/usr/bin/env python3
"""wording-plurals: no message of fs/ puts a count straight before a plural noun (no build
needed, no mount).

usage: test_wording.py SOURCE_ROOT

A format string in a .c file of fs/ (git ls-files) with a count conversion (%u, %d, %zu, %llu,
%" PRIu64 ", ...) followed by a space and a word that ends in 's', or by up to two words and
then one ("%u older views", "%zu more " "names"), says "1 members" or "1 older views" when the
count is 1: the noun comes from fs_plural (fs/core/include/fs_core.h) as a %s instead. Left
alone: units, which stay as they are ("1 bytes" is how sizes are said: UNITS), verbs (VERBS),
a word in 'ss' ("1 empty class"), words after a preposition or a unit in between ("%llu from
sidecars", "%u compressed bytes" is a unit too; LINKS), and a count after '/' ("shard 3/10
samples": the total's noun). The check also runs on seeded
lines (SEEDED) that it must flag and must not flag, so that a change to it that catches nothing
fails.

A count before a noun with '(s)' ("%u unit(s)", "%u request(s) the session left") is flagged
in the .c files of every product module (fs/, cachetier/, backend/, fetch/, disk/, shardidx/:
their log lines reach the user too): the noun takes the count's number instead (fs_plural in
fs/, a choice on the count elsewhere). Seeded too (SEEDED_PAREN).

The tests' expectations too: a string literal of a .py file of tests/ (docstrings left alone)
with a literal 1 before a plural noun, or before a word and a plural noun ("1 shards", "1 sidecar
indexes"), asks for words the daemon no longer says (the 308e197 round: five tests still asked
for them, and the final CI failed). Units and verbs as above, and a 1 after a letter, digit or
one of './,:%+-' ("0.1 s", "::1 shardfs") are left alone; TESTS_ALLOW lists literals that are
no expectation of daemon output. Seeded as well (SEEDED_TESTS).

Exit 0 pass, 1 fail."""

import ast
import io
import os
import re
import subprocess
import sys
import tokenize

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test.checks import Checks  # noqa: E402

# a count conversion (a C one, or a PRI macro between string pieces), whitespace, at most two
# words (the fewest that reach one in s), a word in s; a string's pieces may part any two of them
_GAP = r'(?:\s+(?:"\s*")?\s*|"\s*"\s+)'
COUNT_NOUN = re.compile(r'(?<![/%])%(?:"\s*PRI[udi](?:8|16|32|64|MAX|PTR)\s*"|'
                        r'[-+ 0#]*[0-9*]*(?:ll|l|z|h|hh|j|t)?[udi])'
                        r'((?:' + _GAP + r"[A-Za-z_'-]+){0,2}?)" + _GAP + r'([A-Za-z_]+s)\b')
# a count conversion, at most two words, a word with '(s)' ("%u unit(s)")
COUNT_PAREN = re.compile(r'(?<![/%])%(?:"\s*PRI[udi](?:8|16|32|64|MAX|PTR)\s*"|'
                         r'[-+ 0#]*[0-9*]*(?:ll|l|z|h|hh|j|t)?[udi])'
                         r'(?:' + _GAP + r"[A-Za-z_'-]+){0,2}?" + _GAP + r'[A-Za-z_]+\(s\)')
PAREN_DIRS = ('fs', 'cachetier', 'backend', 'fetch', 'disk', 'shardidx')
SEEDED_PAREN = [
    ('"cache %s: %u unit(s) of %s (%s)"', True),
    ('"the notifier\'s stop answered %u request(s) the session left"', True),
    ('"%" PRIu64 " more " "name(s)"', True),
    ('"%s: not an http(s)://host/path URL"', False),
    ('"cache %s: %u %s of %s", n, n == 1 ? "unit" : "units"', False),
]
UNITS = {'bytes', 'ms', 'us', 'ns', 's', 'secs', 'seconds'}
VERBS = {'is', 'was', 'has', 'does', 'needs', 'takes', 'makes'}
# a word between the count and the noun after which the noun is not the count's
LINKS = {'of', 'in', 'from', 'to', 'for', 'at', 'on', 'by', 'with', 'per', 'out', 'and', 'or',
         'than', 'KiB', 'MiB', 'GiB', 'TiB', 'B', 'KB', 'MB', 'GB'}
# (line, flagged?)
SEEDED = [
    ('"shard %s: %u members left out"', True),
    ('"mounted: %" PRIu64 " objects"', True),
    ('"%zu shards"', True),
    ('"%d\\n" "%d plans"', True),
    ('"removed %u older views of this dataset"', True),
    ('"(%llu such names: counter brace_missing)"', True),
    ('"%zu more " "names of the pattern"', True),
    ('"(%" PRIu64\n\t\t" fill errors; see the log)"', True),
    ('"%llu from sidecars"', False),
    ('"%" PRIu64 " empty class"', False),
    ('"%" PRIu64 " compressed bytes"', False),
    ('"%zu of the objects"', False),
    ('"%u MiB chunks"', False),
    ('"%u older %s of this dataset", n, fs_plural(n, "view", "views")', False),
    ('"%u %s left out", n, fs_plural(n, "member", "members")', False),
    ('"%" PRIu64 " bytes"', False),
    ('"pack: shard %zu/%zu samples"', False),
    ('"pid %ld is gone"', False),
    ('"100%% done"', False),
]

# the tests' literals: 1, a space, at most one word and a space, a word in s
ONE_NOUN = re.compile(r'(?<![\w./,:%+-])1 (?:[a-z]+ )?([a-z]+s)\b')
# (file, the match) of literals that are no expectation of daemon output
TESTS_ALLOW = {
    ('tests/bench/s3_bench.py', '1 vs'),  # a row's label: "--connections 1 vs curl"
}
SEEDED_TESTS = [
    ("ck.ok(b'0 changed; 1 objects, 1 shards' in out)", 2),
    ("ck.ok(out.endswith('; wrote 1 sidecar indexes'))", 1),
    ("ck.ok('1 samples without an image' in err)", 1),
    ("ck.ok('0 changed; 1 object, 1 shard' in out)", 0),
    ("ck.ok('2 objects' in out and '1 bytes' in out and 'pid 1 is gone' in out)", 0),
    ("ck.ok('0.1 s' in out and 'v1 shards' in out and '::1 shardfs' in out)", 0),
    ('"""A docstring: 1 shards read."""', 0),
]


def literal_hits(src, name):
    """The flagged plural nouns after a 1 in src's string literals (docstrings left alone)."""
    docs = set()
    for node in ast.walk(ast.parse(src)):
        body = getattr(node, 'body', None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr) and
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            docs.add(body[0].value.lineno)
    hits = []
    for t in tokenize.generate_tokens(io.StringIO(src).readline):
        if t.type != tokenize.STRING or t.start[0] in docs:
            continue
        for m in ONE_NOUN.finditer(t.string):
            if m.group(1) in UNITS or m.group(1) in VERBS or (name, m.group(0)) in TESTS_ALLOW:
                continue
            hits.append('%d: %r' % (t.start[0], m.group(0)))
    return hits


def flagged(text):
    hits = []
    for m in COUNT_NOUN.finditer(text):
        between = re.findall(r"[A-Za-z_'-]+", m.group(1))
        noun = m.group(2)
        if (noun in UNITS or noun in VERBS or noun.endswith('ss') or
                any(w in LINKS or w in UNITS or w in VERBS for w in between)):
            continue
        hits.append(m)
    return hits


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
        hits = ['%d: %r ("1%s %s")' % (src.count('\n', 0, m.start()) + 1, m.group(0),
                                       ''.join(' ' + w for w in
                                               re.findall(r"[A-Za-z_'-]+", m.group(1))),
                                       m.group(2))
                for m in flagged(src)]
        ck.ok(not hits, '%s: no count before a plural noun%s' % (
            f, '' if not hits else ': take the noun from fs_plural: ' + '; '.join(hits)))
    ck.ok(n > 40, 'only %d .c files of fs/ read' % n)
    for line, want in SEEDED_PAREN:
        ck.ok(bool(COUNT_PAREN.search(line)) == want, 'seeded %r: %s' % (
            line, 'flagged' if want else 'not flagged'))
    files = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard'] + list(PAREN_DIRS),
                           cwd=root, capture_output=True, text=True, check=True).stdout.split()
    n = 0
    for f in sorted(files):
        if not f.endswith('.c'):
            continue
        with open(os.path.join(root, f), encoding='utf-8', errors='replace') as fh:
            src = fh.read()
        n += 1
        hits = ['%d: %r' % (src.count('\n', 0, m.start()) + 1, m.group(0))
                for m in COUNT_PAREN.finditer(src)]
        ck.ok(not hits, '%s: no count before a noun with (s)%s' % (
            f, '' if not hits else ': the noun takes the count\'s number: ' + '; '.join(hits)))
    ck.ok(n > 100, 'only %d .c files of the product modules read' % n)
    for line, want in SEEDED_TESTS:
        got = len(literal_hits(line, 'seeded'))
        ck.ok(got == want, 'seeded test line %r: %d flagged, want %d' % (line, got, want))
    files = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard', 'tests'], cwd=root,
                           capture_output=True, text=True, check=True).stdout.split()
    n = 0
    for f in sorted(files):
        if not f.endswith('.py') or f == 'tests/pkg/test_wording.py':  # its seeded lines
            continue
        with open(os.path.join(root, f), encoding='utf-8', errors='replace') as fh:
            hits = literal_hits(fh.read(), f)
        n += 1
        ck.ok(not hits, '%s: no expectation of a 1 before a plural noun%s' % (
            f, '' if not hits else ' (the daemon says the singular: fs_plural): ' +
            '; '.join(hits)))
    ck.ok(n > 60, 'only %d .py files of tests/ read' % n)
    return ck.status()


if __name__ == '__main__':
    sys.exit(main())
