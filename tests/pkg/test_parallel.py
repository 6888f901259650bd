#!/usr/bin/env python3
"""lint-parallel: every test that changes or measures what the whole machine sees is marked
`is_parallel: false` in its meson.build (no build needed: a configured build directory, no
mount; exact sets).

usage: test_parallel.py SOURCE_ROOT BUILD_DIR
       test_parallel.py SOURCE_ROOT --snippet   (the seeded snippets only)

tests/run.sh runs two tests at a time (meson test --num-processes 2); meson runs a test marked
`is_parallel: false` alone, after the running ones ended. The tests come from
BUILD_DIR/meson-info/intro-tests.json (written by meson setup): each test's command names its
Python source and its group. The source is read with the ast module (comments and docstrings
are no use) and what the group reaches is followed: from the group's function in GROUPS (or
the whole module when there is no GROUPS entry for it), every module-level function or class
that it names, transitively, and the module-level code. A test whose reach holds one of these
is machine-wide and must be marked:

- drop_caches: a string naming /proc/sys/vm/drop_caches (the kernel's page cache and dentries
  dropped for everyone: another test's counted LOOKUPs or cache hits change);
- sysctl: any other /proc/sys/ path opened to write (or `> /proc/sys/...` in a shell line), or
  `sysctl` run (a kernel setting of the machine; reading one, as free_port does, is none);
- inotify: inotify_init/inotify_init1 called by the test itself or hold_inotify_instances
  (the user's inotify instances and watches are one budget: another test's daemon finds none);
- by-name: pkill, pgrep or killall (processes of the machine found by name, other tests' too);
- machine-load: /proc/loadavg, os.getloadavg, /proc/stat, /proc/meminfo, /proc/pressure (a
  figure of the whole machine);
- fills-disk: a fill to the free space (f_bavail with fallocate) without a tmpfs of its own
  (ml.tmpfs) in reach: the disk it fills is everyone's;
- machine-state: dpkg, apt-get, systemctl or /etc/fstab (what is installed on the machine);
- declared: a module-level MACHINE_WIDE = {GROUP or '*': 'why'} (a test that loads the machine
  on purpose, or anything the list above cannot see).

The marked tests must have a priority above or below every other test's (meson starts tests in
priority order and runs a marked one only after the running ones ended: one among the others
would idle the second slot until the longest running test ends), so they run first (or last,
pkg-deb: it installs what pkg-deb-build made beside the others), one by one.

A test marked but with none of these in reach fails too (a mark that nothing needs costs the
run its parallelism): it needs MACHINE_WIDE's why, or `SERIAL_WHY` below. Tests whose command
is no Python source (the C unit tests, the fuzz runner) are checked by a text search of their
source for the same names. Seeded snippets that must be
flagged and must not be run first, so a change to the check that catches nothing fails.

Exit 0 pass, 1 fail."""

import ast
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test.checks import Checks  # noqa: E402

# test name -> why it runs alone though the check finds nothing machine-wide in it (none now:
# pkg-deb's apt-get and fstab line are found)
SERIAL_WHY = {}

HAZARD_STRINGS = [
    ('drop_caches', re.compile(r'/proc/sys/vm/drop_caches')),
    ('sysctl', re.compile(r'>\s*/proc/sys/|^sysctl$|\bsysctl -w\b')),
    ('by-name', re.compile(r'^(pkill|pgrep|killall)$|\b(pkill|pgrep|killall) ')),
    ('machine-load', re.compile(r'/proc/(loadavg|stat|meminfo|pressure)\b')),
    ('machine-state', re.compile(r'^(dpkg|apt-get|systemctl)$|/etc/fstab')),
]
HAZARD_NAMES = {
    'inotify_init': 'inotify', 'inotify_init1': 'inotify', 'hold_inotify_instances': 'inotify',
    'getloadavg': 'machine-load', 'drop_caches': 'drop_caches',
}

# (name, source, group, machine-wide kinds it must find)
SEEDED = [
    ('direct', "def g_a(env, ck):\n    with open('/proc/sys/vm/drop_caches', 'w') as f:\n"
     "        f.write('3')\nGROUPS = {'a': g_a}\n", 'a', {'drop_caches'}),
    ('through a helper', "def drop():\n    open('/proc/sys/vm/drop_caches', 'w').write('2')\n"
     "def g_a(env, ck):\n    drop()\ndef g_b(env, ck):\n    pass\n"
     "GROUPS = {'a': (g_a, 60), 'b': g_b}\n", 'a', {'drop_caches'}),
    ('other group clean', "def drop():\n    open('/proc/sys/vm/drop_caches', 'w').write('2')\n"
     "def g_a(env, ck):\n    drop()\ndef g_b(env, ck):\n    pass\n"
     "GROUPS = {'a': (g_a, 60), 'b': g_b}\n", 'b', set()),
    ('comment and docstring', "def g_a(env, ck):\n    '''no echo 3 > /proc/sys/vm/drop_caches'''\n"
     "    # nor /proc/sys/vm/drop_caches here\n    pass\nGROUPS = {'a': g_a}\n", 'a', set()),
    ('passed as a callback', "class H:\n    def run(self):\n        hold_inotify_instances()\n"
     "def g_a(env, ck):\n    env.each(H)\nGROUPS = {'a': g_a}\n", 'a', {'inotify'}),
    ('sysctl written', "def g_a(env, ck):\n    open('/proc/sys/vm/overcommit_memory', 'w')"
     ".write('1')\n    open('/proc/sys/net/ipv4/ip_local_port_range').read()\n"
     "GROUPS = {'a': g_a}\n", 'a', {'sysctl'}),
    ('sysctl read', "def g_a(env, ck):\n    open('/proc/sys/net/ipv4/ip_local_port_range').read()\n"
     "GROUPS = {'a': g_a}\n", 'a', set()),
    ('shell by name', "import subprocess\ndef g_a(env, ck):\n"
     "    subprocess.run(['pkill', '-f', 'shardfs'])\nGROUPS = {'a': g_a}\n", 'a', {'by-name'}),
    ('fill without tmpfs', "import os\ndef g_a(env, ck):\n    st = os.statvfs(env.tmp)\n"
     "    os.posix_fallocate(3, 0, st.f_bavail)\nGROUPS = {'a': g_a}\n", 'a', {'fills-disk'}),
    ('fill of its own tmpfs', "import os\ndef g_a(env, ck):\n    d = ml.tmpfs(env, 1)\n"
     "    st = os.statvfs(d)\n    os.posix_fallocate(3, 0, st.f_bavail)\nGROUPS = {'a': g_a}\n",
     'a', set()),
    ('declared', "MACHINE_WIDE = {'a': 'busy loops on every core'}\ndef g_a(env, ck):\n"
     "    pass\nGROUPS = {'a': g_a}\n", 'a', {'declared'}),
    ('no GROUPS: the module', "import sys\ndef main():\n    open('/proc/loadavg').read()\n"
     "main()\n", 'x', {'machine-load'}),
]


def _docstring_ids(tree):
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            b = node.body
            if b and isinstance(b[0], ast.Expr) and isinstance(b[0].value, ast.Constant) and \
                    isinstance(b[0].value.value, str):
                out.add(id(b[0].value))
    return out


class Module:
    def __init__(self, src):
        self.tree = ast.parse(src)
        self.docs = _docstring_ids(self.tree)
        self.defs = {}  # module-level name -> node
        self.top = []  # module-level statements that are no def
        for st in self.tree.body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs[st.name] = st
            else:
                self.top.append(st)
        self.groups = self._groups()
        self.declared = self._declared()

    def _assigned(self, name):
        for st in self.top:
            if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                  for t in st.targets):
                return st.value
        return None

    def _groups(self):
        v = self._assigned('GROUPS')
        out = {}
        if isinstance(v, ast.Dict):
            for k, val in zip(v.keys, v.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    if isinstance(val, ast.Tuple) and val.elts:
                        val = val.elts[0]
                    if isinstance(val, ast.Name):
                        out[k.value] = val.id
        return out

    def _declared(self):
        v = self._assigned('MACHINE_WIDE')
        out = {}
        if isinstance(v, ast.Dict):
            for k, val in zip(v.keys, v.values):
                if isinstance(k, ast.Constant) and isinstance(val, ast.Constant):
                    out[k.value] = val.value
        elif isinstance(v, ast.Constant):
            out['*'] = v.value
        return out

    def scan(self, nodes):
        """(kinds, referenced module-level names, fill seen, tmpfs seen) of the nodes."""
        kinds, names = set(), set()
        fill = tmpfs = bavail = False
        for root in nodes:
            for n in ast.walk(root):
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and \
                        id(n) not in self.docs:
                    for kind, rx in HAZARD_STRINGS:
                        if rx.search(n.value):
                            if kind == 'sysctl' and 'drop_caches' in n.value:
                                continue
                            kinds.add(kind)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and \
                        n.func.id == 'open' and n.args and \
                        isinstance(n.args[0], ast.Constant) and \
                        str(n.args[0].value).startswith('/proc/sys/') and \
                        'drop_caches' not in n.args[0].value:
                    mode = n.args[1] if len(n.args) > 1 else None
                    for kw in n.keywords:
                        if kw.arg == 'mode':
                            mode = kw.value
                    if isinstance(mode, ast.Constant) and set(str(mode.value)) & set('wa+'):
                        kinds.add('sysctl')
                ident = n.id if isinstance(n, ast.Name) else \
                    n.attr if isinstance(n, ast.Attribute) else None
                if ident is None:
                    continue
                if ident in HAZARD_NAMES and not (isinstance(n, ast.Name) and
                                                  ident in self.defs and
                                                  ident != 'hold_inotify_instances'):
                    kinds.add(HAZARD_NAMES[ident])
                if ident in ('fallocate', 'posix_fallocate'):
                    fill = True
                if ident == 'f_bavail':
                    bavail = True
                if ident == 'tmpfs':
                    tmpfs = True
                if isinstance(n, ast.Name) and ident in self.defs:
                    names.add(ident)
        return kinds, names, fill and bavail, tmpfs

    def reach(self, group):
        """The machine-wide kinds the group reaches."""
        start = self.groups.get(group)
        seen, todo = set(), []
        kinds, names, fill, tmpfs = self.scan(
            [st for st in self.top if not (isinstance(st, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == 'GROUPS' for t in st.targets))])
        if start is None:
            todo = list(self.defs)  # no group function known: the whole module
        else:
            todo = [start]
        while todo:
            name = todo.pop()
            if name in seen or name not in self.defs:
                continue
            seen.add(name)
            k, ns, f, t = self.scan([self.defs[name]])
            kinds |= k
            fill |= f
            tmpfs |= t
            todo.extend(ns - seen)
        if fill and not tmpfs:
            kinds.add('fills-disk')
        if group in self.declared or '*' in self.declared:
            kinds.add('declared')
        return kinds


def text_kinds(text):
    kinds = set()
    text = re.sub(r'(?m)^\s*#.*$|//.*$|/\*.*?\*/', '', text, flags=re.S)
    for kind, rx in HAZARD_STRINGS:
        if kind != 'by-name' and rx.search(text):
            kinds.add(kind)
    if re.search(r'\b(pkill|pgrep|killall)\b', text):
        kinds.add('by-name')
    if re.search(r'\binotify_init', text):
        kinds.add('inotify')
    return kinds


def seeded(ck):
    for name, src, group, want in SEEDED:
        got = Module(src).reach(group)
        ck.ok(got == want, 'seeded %r: machine-wide kinds found %s, wanted %s' % (
            name, sorted(got), sorted(want)))


def source_of(root, build, cmd):
    """(path of the test's source, the arguments that may name its group)."""
    for i, a in enumerate(cmd):
        if a.endswith('.py') or a.endswith('.sh'):
            rest = [x for x in cmd[i + 1:] if not x.startswith('-') and '/' not in x]
            return a, rest
    exe = cmd[0]
    rel = os.path.relpath(exe, build)
    if rel.startswith('tests' + os.sep):  # a C test: test_NAME.c beside its meson.build
        d = os.path.join(root, os.path.dirname(rel))
        base = os.path.basename(exe)
        for cand in ('test_%s.c' % base.replace('-', '_'), '%s.c' % base):
            p = os.path.join(d, cand)
            if os.path.exists(p):
                return p, []
    return None, []


def main():
    ck = Checks('lint-parallel')
    seeded(ck)
    if sys.argv[1:2] and sys.argv[2:] == ['--snippet']:
        return ck.status()
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    root, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    with open(os.path.join(build, 'meson-info', 'intro-tests.json')) as f:
        tests = json.load(f)
    # the helpers of tests/lib that reach something machine-wide: a test that names one (ml.X)
    # reaches it
    lib = os.path.join(root, 'tests', 'lib', 'shardfs_test')
    for fn in sorted(os.listdir(lib)):
        if fn.endswith('.py'):
            with open(os.path.join(lib, fn)) as f:
                m = Module(f.read())
            for name, node in m.defs.items():
                m.groups = {name: name}
                k = m.reach(name)
                if k:
                    HAZARD_NAMES[name] = '+'.join(sorted(k))
                    print('tests/lib/shardfs_test/%s: %s reaches %s' % (fn, name, sorted(k)))
    mods = {}
    unread = []
    for t in tests:
        name, serial = t['name'], not t['is_parallel']
        src, args = source_of(root, build, t['cmd'])
        kinds = set()
        if src is None:
            unread.append(name)
        elif os.path.samefile(src, __file__):
            pass  # this check: its tables name every hazard
        elif src.endswith('.py'):
            if src not in mods:
                with open(src) as f:
                    mods[src] = Module(f.read())
            m = mods[src]
            groups = [a for a in args if a in m.groups]
            if groups:
                for g in groups:
                    kinds |= m.reach(g)
            else:
                kinds = m.reach(None)
                # a file of groups run by another dispatch: the declared why of its group
                for a in args:
                    if a in m.declared:
                        kinds.add('declared')
        else:
            with open(src, errors='replace') as f:
                kinds = text_kinds(f.read())
        if kinds and not serial:
            ck.ok(False, '%s (%s) is machine-wide (%s) but not marked is_parallel: false in '
                  'its meson.build' % (name, os.path.relpath(src, root), ', '.join(sorted(kinds))))
        elif serial and not kinds and name not in SERIAL_WHY:
            ck.ok(False, '%s is marked is_parallel: false but reaches nothing machine-wide: '
                  'drop the mark, or say why in its MACHINE_WIDE (or SERIAL_WHY here)' % name)
        else:
            ck.ok(True, name + (' (alone: %s)' % ', '.join(sorted(kinds)) if kinds else ''))
    for name in SERIAL_WHY:
        ck.ok(any(t['name'] == name for t in tests), 'SERIAL_WHY names %r, which is no test'
              % name)
    ck.ok(not unread, 'tests whose source was not found: %s' % unread)
    # meson runs a test marked alone only after the running ones ended: one among the others
    # stops the run's second slot until the longest of those ends (mount-manyshards: minutes).
    # The marked run first or last (a priority above, or below, every other test's: meson
    # starts the tests in priority order); last is for a test that takes what one of the
    # others made (pkg-deb installs the package pkg-deb-build built beside the others).
    par = [t.get('priority', 0) for t in tests if t['is_parallel']] or [0]
    mid = ['%s (%d)' % (t['name'], t.get('priority', 0)) for t in tests
           if not t['is_parallel'] and min(par) <= t.get('priority', 0) <= max(par)]
    ck.ok(not mid, 'the tests run alone come first or last (priority above every other '
          'test\'s, %d, or below, %d): not %s' % (max(par), min(par), mid[:8]))
    n = sum(1 for t in tests if not t['is_parallel'])
    print('lint-parallel: %d tests, %d run alone' % (len(tests), n))
    return ck.status()


if __name__ == '__main__':
    sys.exit(main())
