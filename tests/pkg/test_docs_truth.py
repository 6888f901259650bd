#!/usr/bin/env python3
"""docs-*: what the docs say that the code can check, checked against the code (no build
needed, no mount; exact sets).

usage: test_docs_truth.py SOURCE_ROOT GROUP
GROUP:
  counters  every counter of fs_ctl_counters[] (fs/core/fs_ctl_counters.c), the table that renders
            .shardfs/stats and .shardfs/metrics, is named in docs/counters.md, which says it
            covers every counter; and every `name` of its Counters section that looks like a
            counter is one (or a Prometheus name made from one, or listed in NOT_COUNTERS)
  names     every file name (`x.c`, `dir/x.py`, ...) and every C or Python name with an
            underscore (`fs_open`, `ns_lock`, `FS_THREAD_JOIN_S`, `struct fs_ns`) that docs/*.md
            and the modules' README.md files put in backticks exists in the tree: a file of
            `git ls-files` (by path, path suffix or base name), a word of a source file (in a
            module's README also with the module's prefix: `meta_get` is cachetier's
            `cachetier_meta_get`); a name of another project is listed in EXTERNAL with its
            owner; placeholders (`fs_NAME.c`) and suffixes (`_map_in`) are not names
  filesize  no product .c/.h file is over 1,000 lines (docs/style.md): every .c and .h of
            `git ls-files` outside tests/, examples/ and python/

Exit 0 pass, 1 fail."""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test.checks import Checks  # noqa: E402

# Names in backticks that are another project's (never in this tree), with whose they are.
EXTERNAL = {
    'docs/get_batch.md': "AIStore's documentation of GetBatch",
    'll.c': "squashfuse's low-level adapter",
    'index_paths': "DALI's webdataset reader argument",
    'cache_peer_chunks': "the former name of cache_peer_units, named as such",
}
# docs/counters.md words in backticks with an underscore that are not counters (stats fields
# that are not counters, option values).
NOT_COUNTERS = {'cache_dir', 'mount_time', 'source_path'}
MAX_LINES = 1000


def git_files(root):
    # the tree as committed plus files not ignored yet (a new file before its commit)
    out = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard', '-z'], cwd=root,
                         capture_output=True, check=True)
    return [f for f in out.stdout.decode().split('\0') if f]


def read(root, f):
    with open(os.path.join(root, f), encoding='utf-8', errors='replace') as fh:
        return fh.read()


def counters(root):
    """The names of fs_ctl_counters[] in fs/core/fs_ctl_counters.c, in order."""
    s = read(root, 'fs/core/fs_ctl_counters.c')
    a = s.index('ctl_counters[] = {')
    b = s.index('\n};', a)
    return re.findall(r'\{\s*"([a-z0-9_]+)",', s[a:b])


def prom_name(counter, kind):
    """The Prometheus name of a counter in .shardfs/metrics: shardfs_NAME_total, and a *_ms
    value in seconds: shardfs_NAME_seconds(_total) (docs/counters.md)."""
    if kind.startswith('seconds') and counter.endswith('_ms'):
        counter = counter[:-3]
    return 'shardfs_%s_%s' % (counter, kind)


def is_prom_name(t, words):
    m = re.fullmatch(r'shardfs_([a-z0-9_]+?)_(total|seconds|seconds_total)', t)
    return bool(m) and (m.group(1) in words or m.group(1) + '_ms' in words)


def group_counters(root, ck):
    names = counters(root)
    ck.ok(len(names) > 100, 'fs_ctl_counters[] has %d rows' % len(names))
    doc = read(root, 'docs/counters.md')
    sec = doc[doc.index('## Counters'):doc.index('\n## ', doc.index('## Counters') + 3)]
    named = set(re.findall(r'`([a-z0-9_]+)`', sec))
    missing = [n for n in names if n not in named]
    ck.ok(not missing, 'every counter of fs_ctl_counters[] is in docs/counters.md; missing: %s' %
          ', '.join(missing))
    known = set(names)
    prom = {prom_name(n, k) for n in names for k in ('total', 'seconds', 'seconds_total')}
    extra = sorted(n for n in named if '_' in n and n not in known and n not in prom and
                   n not in NOT_COUNTERS and n not in EXTERNAL)
    ck.ok(not extra, 'every counter docs/counters.md names is one of fs_ctl_counters[]; not: %s' %
          ', '.join(extra))


def doc_files(files):
    """docs/*.md and the modules' README.md files (the tree's own code, not tests')."""
    return sorted(f for f in files if (f.startswith('docs/') and f.endswith('.md')) or
                  (f.endswith('/README.md') and not f.startswith(('tests/', 'examples/'))))


def group_names(root, ck):
    files = git_files(root)
    fileset, bases = set(files), {os.path.basename(f) for f in files}
    words = set()
    for f in files:
        if re.search(r'\.(c|h|py|sh|build|toml|json|in|service|conf)$', f) or \
                f.startswith(('debian/', 'dist/')):
            try:
                words |= set(re.findall(r'[A-Za-z_][A-Za-z0-9_]*', read(root, f)))
            except (IsADirectoryError, FileNotFoundError):
                pass
    docs = doc_files(files)
    ck.ok(len(docs) > 10, '%d docs and module READMEs' % len(docs))
    nfiles = nnames = 0
    for d in docs:
        # a module's README may drop the module's prefix (cachetier's `meta_get`)
        prefix = os.path.basename(os.path.dirname(d)) if not d.startswith('docs/') else None
        if prefix == 'core':
            prefix = 'fs'
        for tok in sorted(set(re.findall(r'`([^`\n]+)`', read(root, d)))):
            t = tok.strip()
            if t.startswith('struct '):
                t = t[len('struct '):]
            if 'NAME' in t or t.startswith(('_', '*', '.')):
                continue  # a placeholder or a suffix of the name before it
            if t in EXTERNAL:
                continue
            if re.fullmatch(r'[\w./-]+\.(c|h|py|sh|md|build|toml)', t):
                nfiles += 1
                ok = t in fileset or os.path.basename(t) in bases or \
                    any(f.endswith('/' + t) for f in files)
                ck.ok(ok, '%s: `%s` names a file that is not in the tree' % (d, tok)) \
                    if not ok else None
            elif re.fullmatch(r'[a-z_][a-z0-9_]*_[a-z0-9_]*(\(\))?', t) or \
                    re.fullmatch(r'[A-Z][A-Z0-9]*_[A-Z0-9_]+', t):
                nnames += 1
                w = t[:-2] if t.endswith('()') else t
                ok = w in words or (prefix is not None and '%s_%s' % (prefix, w) in words) or \
                    is_prom_name(w, words)
                if not ok:
                    ck.fail('%s: `%s` is no name in the code' % (d, tok))
    ck.ok(nfiles > 50 and nnames > 300, '%d file names and %d code names checked' % (
        nfiles, nnames))


def group_filesize(root, ck):
    files = git_files(root)
    product = [f for f in files if f.endswith(('.c', '.h')) and
               not f.startswith(('tests/', 'examples/', 'python/'))]
    ck.ok(len(product) > 50, '%d product .c/.h files' % len(product))
    for f in product:
        if not os.path.exists(os.path.join(root, f)):
            continue  # deleted, not committed yet
        n = read(root, f).count('\n')
        if n > MAX_LINES:
            ck.fail('%s has %d lines, over the %d of docs/style.md: split it' % (f, n,
                                                                              MAX_LINES))


GROUPS = {'counters': group_counters, 'names': group_names, 'filesize': group_filesize}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in GROUPS:
        print(__doc__)
        return 2
    ck = Checks('docs-' + sys.argv[2])
    GROUPS[sys.argv[2]](sys.argv[1], ck)
    return ck.status()


if __name__ == '__main__':
    sys.exit(main())
