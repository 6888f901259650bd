#!/usr/bin/env python3
"""What shardfs-gen writes from the option tables agrees with the shardfs command: every mount
option is in shardfs(1), in mount.shardfs(8) (unless the helper refuses it) and in the bash
completion; the mount helper turns each one into --NAME[=VALUE], and the command line it builds
is accepted by 'shardfs mount' itself (parsed up to a final --help, which stops before mounting);
mount(8)'s own options are dropped, FUSE's passed through, suid and dev refused; every command of
'shardfs --help' has its section in shardfs(1). No mount, no root: cheap, in both builds.
  test_gen.py SHARDFS SHARDFS_GEN MOUNT_HELPER SHARDFS_1 MOUNT_SHARDFS_8 COMPLETION"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test.checks import Checks  # noqa: E402

shardfs, gen, helper, man1, man8, completion = sys.argv[1:7]
CK = Checks('pkg-gen')
fails = CK.failures
check = CK.ok


def roff(s):
    return s.replace('\\', '\\e').replace('-', '\\-')


def read(p):
    with open(p, encoding='utf-8') as f:
        return f.read()


man1_text, man8_text, comp_text = read(man1), read(man8), read(completion)
opts = [line.split('\t') for line in subprocess.run(
    [gen, 'options'], check=True, capture_output=True, text=True).stdout.splitlines()]
check(len(opts) >= 30, 'shardfs-gen options lists the mount options (%d)' % len(opts))
help_text = subprocess.run([shardfs, 'mount', '--help'], capture_output=True, text=True).stdout
tmp = tempfile.mkdtemp(prefix='shardfs-gen-test.')
record = os.path.join(tmp, 'args')
fake = os.path.join(tmp, 'fake-shardfs')
with open(fake, 'w') as f:
    # stands for shardfs: records its arguments, one a line
    f.write('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > "%s"\n' % ('%s', record))
os.chmod(fake, 0o755)
env = dict(os.environ, SHARDFS_BIN=fake)


def run_helper(optstr, *extra):
    if os.path.exists(record):
        os.unlink(record)
    r = subprocess.run(['sh', helper, '/src dir', '/mnt point', *extra, '-o', optstr],
                       env=env, capture_output=True, text=True)
    args = read(record).splitlines() if os.path.exists(record) else None
    return r, args


def sample(name, kind):
    """A value the option accepts: its default, else by its kind."""
    m = re.search(r'^ +(?:-\w, )?--%s \S+ .*\(default: ([^)\s]+)\)$' % re.escape(name),
                  help_text, re.M)
    if m:
        return m.group(1)
    return {'log-file': '/tmp/log', 'cache-dir': '/tmp/cache', 'endpoint': 'http://127.0.0.1:9',
            'ca-file': '/etc/hostname'}.get(name, '1')


# each option's paragraph in shardfs.1 (.TP blocks), by name
blocks = {}
for b in man1_text.split('.TP\n'):
    m = re.match(r'(?:\\fB\\-.\\fR, )?\\fB\\-\\-(\S+?)\\fR', b)
    if m:
        blocks[m.group(1).replace('\\-', '-')] = b
all_args = []
for name, kind, use in opts:
    check('\\fB\\-\\-%s\\fR' % roff(name) in man1_text, 'shardfs.1 has --%s' % name)
    m = re.search(r'^ +(?:-\w, )?--%s .*\(default: ([^)\s]+)\)$' % re.escape(name), help_text,
                  re.M)
    if m:
        check('Default: \\fB%s\\fR.' % roff(m.group(1)) in blocks.get(name, ''),
              'shardfs.1 gives --%s the default of --help, %s' % (name, m.group(1)))
    check('--%s ' % name in comp_text, 'the completion has --%s' % name)
    check(('--%s' % name) in help_text, "'shardfs mount --help' has --%s" % name)
    if use == 'refused':
        r, args = run_helper(name if kind == 'flag' else name + '=1')
        check(r.returncode == 1 and args is None and "'%s" % name in r.stderr,
              'the helper refuses %s, naming it: %r' % (name, r.stderr.strip()))
        continue
    check('\\fB%s\\fR' % roff(name) in man8_text, 'mount.shardfs.8 has %s' % name)
    o = name if kind == 'flag' else '%s=%s' % (name, sample(name, kind))
    r, args = run_helper(o)
    want = ['mount', '--' + o, '--', '/src dir', '/mnt point']
    check(r.returncode == 0 and args == want, 'helper -o %s runs shardfs %s (got %r %s)'
          % (o, ' '.join(want), args, r.stderr.strip()))
    all_args.append('--' + o)
    # a flag given a value, a value option without one: refused by the helper, naming it
    bad = name + '=1' if kind == 'flag' else name
    r, args = run_helper(bad)
    check(r.returncode == 1 and args is None and "'%s'" % name in r.stderr,
          'the helper refuses %s: %r' % (bad, r.stderr.strip()))

# shardfs mount parses every option the helper builds (--help at the end: exit 0, no mount)
r = subprocess.run([shardfs, 'mount', *all_args, '--help'], capture_output=True, text=True)
check(r.returncode == 0 and r.stdout.startswith('usage: shardfs mount'),
      "'shardfs mount' accepts what the helper makes of every option: %s" % r.stderr.strip())

# mount(8)'s options dropped, FUSE's passed through, suid and dev refused, -f does nothing
r, args = run_helper('defaults,rw,ro,_netdev,noauto,auto,nofail,user,users,x-systemd.automount,'
                     'x-systemd.requires=a.mount,comment=x,allow_other,xattr,noatime,'
                     'default_permissions,cache-size=1G', '-n', '-s', '-t', 'fuse.shardfs')
check(r.returncode == 0 and args == ['mount', '--xattr', '--cache-size=1G', '-o',
                                     'allow_other,noatime,default_permissions', '--',
                                     '/src dir', '/mnt point'],
      "mount(8)'s options dropped, FUSE's passed: %r %s" % (args, r.stderr.strip()))
for o in ('suid', 'dev'):
    r, args = run_helper('ro,%s' % o)
    check(r.returncode == 1 and args is None and "option '%s' refused" % o in r.stderr,
          'helper refuses %s: %r' % (o, r.stderr.strip()))
r, args = run_helper('xattr', '-f')
check(r.returncode == 0 and args is None, 'helper -f (fake) runs nothing')

# every command of 'shardfs --help' has its section in shardfs(1)
top = subprocess.run([shardfs, '--help'], capture_output=True, text=True).stdout
# the package ships the man pages, not the repository's docs: --help points there (issue 40 #18)
for c in ([], ['mount'], ['index'], ['pack'], ['umount'], ['plan'], ['prefetch']):
    h = subprocess.run([shardfs] + c + ['--help'], capture_output=True, text=True).stdout
    check('README' not in h and 'docs/' not in h,
          "'shardfs %s--help' names no file the package does not ship" % ''.join(x + ' ' for x in c))
check('man shardfs' in top, "'shardfs --help' points to 'man shardfs'")
cmds = re.findall(r'^  ([a-z]+) ', top, re.M)
check(len(cmds) >= 8, "'shardfs --help' lists the commands (%s)" % ' '.join(cmds))
for c in cmds:
    check('\n.SS %s\n' % c in man1_text, 'shardfs.1 has a section for %s' % c)
for sec in ('COMMANDS', 'MOUNT OPTIONS', 'SOURCES', 'CREDENTIALS', 'CONTROL FILES', 'COUNTERS',
            'EXIT STATUS', 'FILES', 'EXAMPLES'):
    check('\n.SH %s\n' % sec in man1_text, 'shardfs.1 has %s' % sec)
# the completion completes a command and an option in bash
for words, want in ((['shardfs', 'mou'], ['mount']), (['shardfs', 'mount', '--cache-s'],
                                                     ['--cache-size']),
                    (['shardfs', 'index', '--side'], ['--sidecar'])):
    r = subprocess.run(['bash', '-c', 'source "$1"; shift; COMP_WORDS=("$@"); '
                        'COMP_CWORD=$(($# - 1)); _shardfs; echo "${COMPREPLY[@]}"',
                        'bash', completion, *words], capture_output=True, text=True)
    check(r.stdout.split() == want, 'completion of %r: %r %s' % (words, r.stdout, r.stderr))
# what the completion offers where (issue 40 #17): option values (enums, files, directories,
# nothing for sizes and names), plan's FILE and prefetch's PATH as files, the options of
# umount, plan and pack; run in a directory holding a file f1.txt and a directory d1
cdir = tempfile.mkdtemp(prefix='shardfs-comp.')
os.mkdir(os.path.join(cdir, 'd1'))
open(os.path.join(cdir, 'f1.txt'), 'w').close()
COMPLETION_CASES = [
    (['mount', '--layout', ''], ['imagefolder', 'shards']),
    (['mount', '--warm', 'a'], ['all', 'auto']),
    (['mount', '--class-from', ''], ['cls', 'dir', 'key-prefix']),
    (['mount', '--cache-size', ''], []),
    (['mount', '--cache-dir', ''], ['d1']),
    (['mount', '--log-file', ''], ['d1', 'f1.txt']),
    (['mount', '--uid', ''], []),
    (['mount', 'src', ''], ['d1']),
    (['index', '--layout', ''], ['d1']),  # index has no --layout: a SOURCE
    (['umount', '--'], ['--force', '--help', '--stale']),
    (['plan', ''], ['d1']),
    (['plan', 'd1', ''], ['d1', 'f1.txt']),
    (['plan', 'd1', '--'], ['--clear', '--help', '--name']),
    (['plan', 'd1', '--name', ''], []),
    (['plan', '--name', 'x', 'd1', ''], ['d1', 'f1.txt']),
    (['prefetch', 'd1', ''], ['d1', 'f1.txt']),
    (['pack', '--'], ['--compress', '--force', '--help', '--max-count', '--max-size',
                      '--shuffle']),
    (['pack', '--compress', ''], ['gzip', 'zstd']),
    (['pack', '--shuffle', ''], []),
    (['pack', 'd1', ''], ['d1', 'f1.txt']),
    (['stats', '--'], ['--help']),
]
for words, want in COMPLETION_CASES:
    words = ['shardfs'] + words
    r = subprocess.run(['bash', '-c', 'source "$1"; shift; COMP_WORDS=("$@"); '
                        'COMP_CWORD=$(($# - 1)); _shardfs; printf "%s\\n" "${COMPREPLY[@]}"',
                        'bash', completion, *words], capture_output=True, text=True, cwd=cdir)
    got = sorted(w for w in r.stdout.split('\n') if w)
    check(got == want, 'completion of %r: %r (want %r) %s' % (words, got, want, r.stderr))
shutil.rmtree(cdir)
# man renders both without a warning
for page in (man1, man8):
    r = subprocess.run(['man', '--warnings', '-l', '-Tutf8', page], capture_output=True,
                       text=True, env=dict(os.environ, MANWIDTH='80'))
    check(r.returncode == 0 and r.stderr == '' and len(r.stdout) > 1000,
          'man renders %s without warnings: %s' % (os.path.basename(page), r.stderr[:300]))

CK.exit()
