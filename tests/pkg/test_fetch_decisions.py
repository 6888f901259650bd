#!/usr/bin/env python3
"""fetch-decisions: every fetch decision is the fetch scheduler's (fetch/): no file of the core
(fs/) fetches but through it, and the store (cachetier/) decides no fetch but by asking its rules
(docs/architecture.md, "The fetch scheduler"). No build needed, no mount; exact sets.

usage: test_fetch_decisions.py SOURCE_ROOT

Checks, over the product's .c and .h files (`git ls-files` outside tests/, examples/, python/):
  1. the store's fill and read entries (STORE_FETCH: reads that queue readahead or fill a miss,
     prefetches, batch fills, the rules and the fill timing) are called from fetch/ only: no
     file of fs/ (nor backend/, disk/, shardidx/) calls one;
  2. the store asks its rules and decides none: every `policy->` of cachetier/ is a call of a
     hook of struct cachetier_policy (cachetier.h), all of them in cachetier_queue.c; fetch/'s
     rules (fetch_rules.c) give every hook;
  3. the rules' knobs and helpers are fetch/'s only: no file outside fetch/ names one (RULES),
     nor defines the store's old decision helpers (OLD_HELPERS);
  4. a fill's bounds are the rules' (`run`): cachetier/ divides units into chunks (`% group`)
     in one place only, the store's no-rules fallback in cachetier_queue.c's run_bounds;
  5. the store's queue order is the rules' (`next`): cachetier__queue_next takes a job only in
     a case of enum cachetier_queue;
  6. the fill API's prefix (cachetier__run_) names only its functions (cachetier_run.c/.h,
     and the size helper cachetier__run_len);
  7. each decision the store made itself until issue 36 #2 (DECISIONS: promote-on-wait, the
     reader's object first among the cursors, a window's cap, a decoder's window, a batch
     call's end at no room, the share of the cache fills ahead hold): its asking function in
     cachetier_queue.c asks its hook, the store's function that acts on it (ASKED_BY) calls
     that one, and the code that made the decision is nowhere else in cachetier/;
  8. each rule (every hook of struct cachetier_policy) has a behaviour test: test_rule_<hook>
     in one of RULE_TESTS (tests/unit/test_chunkstore.c: the rules of issue 36 #2;
     tests/unit/test_rules.c: the older ones), defined and run by that file's main, or the
     mount test ELSEWHERE names (its group function and its meson name); a rule added without
     one fails here, and so does a test_rule_* that names no rule or is defined twice.

Exit 0 pass, 1 fail."""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test.checks import Checks  # noqa: E402

# The store's entries that fetch: calling one is a fetch decision (what, how much, when).
STORE_FETCH = re.compile(
    r'\bcachetier_(obj_prefetch(_range|_span)?|obj_read_begin(_ahead)?|obj_pread(_ahead|_probe)?'
    r'|batch_fill|held_get|set_policy|set_fill_timing)\s*\(')
# The rules' constants and entry points: fetch/'s only.
RULES = re.compile(r'\b(FETCH_SMALL_FILL_BYTES|FETCH_AHEAD_SHARE|fetch_store_rules'
                   r'|rules_(start|reader_job|pf_ended|pf_max|pf_yield|miss_whole|next|run|small|promote'
                   r'|cursor_front|window_max|decode_ahead|batch_unfit|ahead_share))\b')
# The decision helpers the store had before the rules moved to fetch/ (a definition of one in
# the store would be a decision made there again).
OLD_HELPERS = re.compile(r'^\s*(static\s+)?\w[\w\s\*]*\b(pf_max|pf_small_max|pf_max_of|pf_yield'
                         r'|CT_SMALL_FILL_BYTES)\b\s*[(\s]', re.M)
# The decisions moved from the store to the rules (issue 36 #2): what, the store's function in
# cachetier_queue.c that asks the rules, the hook it asks, what makes the decision in code (a
# regex over cachetier/ without comments) and the functions of cachetier/ allowed to hold it
# ((file, function): the asking one and the mechanisms that only do what was decided).
QC = 'cachetier/cachetier_queue.c'
DECISIONS = [
    # a fill moves to the demand queue (appended at its tail) only when a reader's miss queues
    # it (queue_push, the body of cachetier__queue_push and of its caller under the object's
    # lock) or when the rules' promote says (queue_wait); the old name is gone
    ('a readahead unit a reader waits for is promoted', 'cachetier__queue_wait', 'promote',
     r'\*\s*ct->dq_tail\s*=|queue_promote\b',
     {(QC, 'queue_push'), (QC, 'cachetier__queue_push'), (QC, 'cachetier__queue_wait')}),
    # an object's cursor goes to the front of the prefetch cursors only when the rules'
    # cursor_front says (queue_read), or back where it was when its fill is withdrawn
    # (cachetier_run.c's pf_withdrawn, the withdrawal the rules' pf_yield asked for)
    ('the cursor of the object a reader reads goes first', 'cachetier__queue_read',
     'cursor_front', r'pf_push\s*\([^;]*,\s*1\s*\)|\bct->pf\s*=\s*f\b',
     {(QC, 'cachetier__queue_read'), (QC, 'cachetier__pf_push'),
      ('cachetier/cachetier_run.c', 'pf_withdrawn')}),
    # the configured window is read only to be handed to the rules' window_max (no clamp of
    # its own: the cap of a window was the store's at open)
    ('the cap of a readahead window', 'window_cap', 'window_max',
     r'\breadahead_max_bytes\b', {(QC, 'window_cap'), ('cachetier/cachetier.h', '')}),
    # the store's own reads with a window (a decoder's of its raw object) take the window the
    # rules' decode_ahead gives: cachetier/ calls a reading entry with a window only there,
    # and the cap only in the entry that reports it
    ("a decoder's window", 'cachetier__decode_ahead', 'decode_ahead',
     r'(?m)^[ \t]+[^\n]*?\bcachetier_(obj_pread_ahead|obj_read_begin_ahead|readahead_max)'
     r'\s*\((?![^;]*cachetier__decode_ahead\s*\()',
     {(QC, 'cachetier_readahead_max'), ('cachetier/cachetier_objread.c', 'cachetier_obj_pread'),
      ('cachetier/cachetier_objread.c', 'cachetier_obj_read_begin')}),
    # a batch fill's request with no room (bt_group's -1) ends the call only as the rules'
    # batch_unfit says: the old `if (r < 0) break;` is gone
    ('a batch request with no room ends the call', 'cachetier__batch_unfit', 'batch_unfit',
     r'\bif\s*\(\s*r\s*<\s*0\s*\)\s*break\b', set()),
    # the share of the cache fills ahead may hold is the rules' ahead_share: no share of the
    # store's own (CT_AHEAD_SHARE, or any *AHEAD_SHARE) in cachetier/
    ('the share of the cache fills ahead may hold', 'cachetier__ahead_share', 'ahead_share',
     r'\b\w*AHEAD_SHARE\b', set()),
]
# Where the store acts on each answer: the function of cachetier/ that calls the asking one.
ASKED_BY = {
    # cachetier__file_read_begin's steps (read_pin: the pins; read_look: the wait for a unit)
    'cachetier__queue_wait': ('cachetier/cachetier_read.c', 'read_look'),
    'cachetier__queue_read': ('cachetier/cachetier_read.c', 'read_pin'),
    'window_cap': (QC, 'cachetier_readahead_max'),
    'cachetier__decode_ahead': ('cachetier/cachetier_decode.c', 'dec_read'),
    'cachetier__batch_unfit': ('cachetier/cachetier_batch.c', 'cachetier_batch_fill'),
    'cachetier__ahead_share': [('cachetier/cachetier_evict.c', 'room_evict'),
                               ('cachetier/cachetier_span.c', 'cachetier_held_get')],
}
# Behaviour tests of rules that are not in RULE_TESTS: the hook, the file, its group
# function, the name its meson.build gives the group (a mount test of a group is
# mount-<file's>-<group>), and the meson.build.
ELSEWHERE = {
    # a plan bigger than the cache: what is fetched ahead is what the share of the cache lets
    'ahead_share': ('tests/mount/test_plan.py', 'group_bigger', 'bigger',
                    'tests/mount/meson.build'),
}
# The unit tests that hold the rules' behaviour tests (test_rule_<hook>), each run by its main.
RULE_TESTS = ('tests/unit/test_chunkstore.c', 'tests/unit/test_rules.c')
PRODUCT_DIRS = ('fs/', 'cachetier/', 'fetch/', 'backend/', 'disk/', 'shardidx/')


def product_files(root):
    out = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard', '-z'], cwd=root,
                         capture_output=True, check=True)
    return sorted(f for f in out.stdout.decode().split('\0')
                  if f.endswith(('.c', '.h')) and f.startswith(PRODUCT_DIRS))


def code(root, f):
    """The file without its comments (block and line), strings kept."""
    with open(os.path.join(root, f), encoding='utf-8', errors='replace') as fh:
        s = fh.read()
    s = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), s, flags=re.S)
    return re.sub(r'//[^\n]*', '', s)


def hits(rx, s):
    return [s.count('\n', 0, m.start()) + 1 for m in rx.finditer(s)]


def func_body(s, name):
    """The text of the definition of function name in s (from its name to its closing brace
    at column 0), or '' when s defines none."""
    m = re.search(r'^[\w \*]*\b%s\([^;{]*\)\s*\{' % re.escape(name), s, re.M)
    if not m:
        return ''
    end = s.find('\n}\n', m.start())
    return s[m.start():end + 2 if end >= 0 else len(s)]


def enclosing(s, at):
    """The name of the function whose definition holds offset at of s ('' outside any)."""
    name = ''
    for m in re.finditer(r'^[\w][\w \*]*?\b(\w+)\([^;{]*\)\s*\{', s[:at], re.M):
        end = s.find('\n}\n', m.start())
        name = m.group(1) if end < 0 or end >= at else ''
    return name


def defined(s):
    """The functions s defines (a name, its parameters, then a body)."""
    return set(re.findall(r'^[\w][\w \*]*?\b(\w+)\([^;{]*\)\s*\{', s, re.M))


def policy_hooks(root):
    s = code(root, 'cachetier/cachetier.h')
    a = s.index('struct cachetier_policy {')
    b = s.index('\n};', a)
    return set(re.findall(r'\(\s*\*\s*(\w+)\s*\)', s[a:b]))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    root = sys.argv[1]
    ck = Checks('fetch-decisions')
    files = product_files(root)
    ck.ok('fetch/fetch_rules.c' in files and 'cachetier/cachetier_queue.c' in files,
          'the tree has fetch/fetch_rules.c and cachetier/cachetier_queue.c')
    src = {f: code(root, f) for f in files}

    # 1. the store's fetching entries are called from fetch/ only
    outside = ['%s:%d' % (f, n) for f in files
               if not f.startswith(('fetch/', 'cachetier/')) for n in hits(STORE_FETCH, src[f])]
    ck.ok(outside == [], 'no file of fs/, backend/, disk/ or shardidx/ calls a fetching entry '
          'of the store (only fetch/ does): %s' % (outside or 'none'))
    in_fetch = sorted({f for f in files if f.startswith('fetch/') and hits(STORE_FETCH, src[f])})
    ck.ok(len(in_fetch) > 0, 'fetch/ calls them: %s' % in_fetch)

    # 2. the store asks its rules: policy-> only as hook calls, only in cachetier_queue.c
    hooks = policy_hooks(root)
    ck.ok(len(hooks) >= 8, 'struct cachetier_policy has its hooks: %s' % sorted(hooks))
    asks = {}
    bad = []
    for f in files:
        if not f.startswith('cachetier/'):
            continue
        for m in re.finditer(r'policy->(\w+)(\s*\()?', src[f]):
            line = src[f].count('\n', 0, m.start()) + 1
            if m.group(1) not in hooks or not m.group(2):
                bad.append('%s:%d policy->%s' % (f, line, m.group(1)))
            asks.setdefault(f, set()).add(m.group(1))
    ck.ok(bad == [], 'every policy-> of cachetier/ calls a hook: %s' % (bad or 'yes'))
    ck.ok(set(asks) == {'cachetier/cachetier_queue.c'},
          'the store asks its rules in cachetier_queue.c only: %s' % sorted(asks))
    # start is asked as p->start (cachetier_set_policy's new rules)
    asked = asks.get('cachetier/cachetier_queue.c', set()) | (
        {'start'} if 'p->start(' in src['cachetier/cachetier_queue.c'] else set())
    ck.ok(asked == hooks, 'cachetier_queue.c asks every hook: %s' % sorted(asked))
    table = re.search(r'struct cachetier_policy fetch_rules = \{(.*?)\};', src['fetch/fetch_rules.c'],
                      re.S)
    given = set(re.findall(r'\.(\w+)\s*=', table.group(1))) if table else set()
    ck.ok(given == hooks, "fetch/'s rules give every hook: %s" % sorted(given))

    # 3. the rules' knobs are fetch/'s; the old helpers are defined nowhere else
    named = ['%s:%d' % (f, n) for f in files if not f.startswith('fetch/')
             for n in hits(RULES, src[f])]
    ck.ok(named == [], "no file outside fetch/ names the rules' knobs or helpers: %s"
          % (named or 'none'))
    old = ['%s:%d' % (f, n) for f in files if not f.startswith('fetch/')
           for n in hits(OLD_HELPERS, src[f])]
    ck.ok(old == [], "no file outside fetch/ defines a prefetch rule's helper (pf_max, "
          "pf_yield, the small fills' size): %s" % (old or 'none'))

    # 4. fills' bounds: the chunk arithmetic once, in the no-rules fallback
    chunks = ['%s:%d' % (f, n) for f in files if f.startswith('cachetier/')
              for n in hits(re.compile(r'%\s*(\w+->)?group\b'), src[f])]
    q = src['cachetier/cachetier_queue.c']
    rb = q.find('static void run_bounds(')
    rb_end = q.find('\n}\n', rb)
    first = q.count('\n', 0, rb) + 1
    last = q.count('\n', 0, rb_end) + 1
    inside = [h for h in chunks if h.startswith('cachetier/cachetier_queue.c:')
              and first <= int(h.split(':')[1]) <= last]
    ck.ok(len(chunks) == 1 and inside == chunks and 'policy->run(' in q[rb:rb_end],
          "cachetier/ bounds fills by the chunk only in run_bounds' no-rules branch, and asks "
          "the rules' run there: %s" % chunks)

    # 5. the queue order: cachetier__queue_next takes a job only in a case the rules chose
    a = q.find('int cachetier__queue_next(')
    b = q.find('\n}\n', a)
    body = q[a:b]
    ck.ok(a >= 0 and 'policy->next(' in body and
          re.findall(r'case (\w+):', body) == ['CACHETIER_Q_DEMAND', 'CACHETIER_Q_READAHEAD',
                                              'CACHETIER_Q_RANGE', 'CACHETIER_Q_CURSOR'],
          "cachetier__queue_next serves the queue the rules' next names, one case each")

    # 6. the fill API's prefix is the fill API's: the functions named cachetier__run_* are
    # defined in cachetier_run.c/.h (and the size helper cachetier__run_len in cachetier_i.h)
    runs = sorted('%s: %s' % (f, n) for f in files if f.startswith('cachetier/')
                  and f not in ('cachetier/cachetier_run.c', 'cachetier/cachetier_run.h')
                  for n in defined(src[f]) if n.startswith('cachetier__run_')
                  and (f, n) != ('cachetier/cachetier_i.h', 'cachetier__run_len'))
    ck.ok(runs == [], "no function outside cachetier_run.c/.h takes the fill API's prefix "
          "cachetier__run_: %s" % (runs or 'none'))

    # 7. the decisions the store made itself until issue 36 #2, each the rules' now: the
    # store's function in cachetier_queue.c asks its hook, and the code that made the decision
    # in the store is nowhere else in cachetier/
    for what, fn, hook, rx, allowed in DECISIONS:
        body = func_body(q, fn)
        ck.ok('policy->%s(' % hook in body,
              "%s: cachetier_queue.c's %s asks the rules' %s" % (what, fn, hook))
        callers = ASKED_BY[fn] if isinstance(ASKED_BY[fn], list) else [ASKED_BY[fn]]
        for cf, caller in callers:
            ck.ok(re.search(r'\b%s\s*\(' % fn, func_body(src.get(cf, ''), caller)) is not None,
                  '%s: %s (%s) does what %s answers' % (what, caller, cf, fn))
        found = []
        for f in files:
            if not f.startswith('cachetier/'):
                continue
            for m in re.finditer(rx, src[f]):
                at = enclosing(src[f], m.start())
                if (f, at) not in allowed:
                    found.append('%s:%d (%s)' % (f, src[f].count('\n', 0, m.start()) + 1, at))
        ck.ok(found == [], '%s: decided nowhere else in cachetier/: %s' % (what, found or 'none'))

    # 8. a behaviour test for each rule: test_rule_<hook> in one of RULE_TESTS (defined, and run
    # by that file's main), or the test ELSEWHERE names
    where = {}  # hook -> the RULE_TESTS files that define and run test_rule_<hook>
    defined_in = {}  # hook -> the RULE_TESTS files that define it
    for f in RULE_TESTS:
        try:
            cs = code(root, f)
        except OSError:
            cs = ''
        main_body = func_body(cs, 'main')
        for n in defined(cs):
            if not n.startswith('test_rule_'):
                continue
            hook = n[len('test_rule_'):]
            defined_in.setdefault(hook, []).append(f)
            if re.search(r'\b%s\s*\(' % n, main_body):
                where.setdefault(hook, []).append(f)
    for hook in sorted(hooks):
        if hook in ELSEWHERE:
            f, fn, group, mb = ELSEWHERE[hook]
            try:
                py, build = open(os.path.join(root, f)).read(), open(os.path.join(root, mb)).read()
            except OSError:
                py, build = '', ''
            ck.ok(re.search(r'^def %s\(' % fn, py, re.M) is not None and
                  re.search(r"'%s'\s*:\s*%s\b" % (group, fn), py) is not None and
                  "'%s'" % group in build,
                  "rule %s: its behaviour test is %s's %s (group '%s', run by %s)"
                  % (hook, f, fn, group, mb))
            continue
        name = 'test_rule_' + hook
        ck.ok(len(where.get(hook, [])) == 1,
              'rule %s: its behaviour test %s is defined in one of %s and run by its main: %s'
              % (hook, name, ', '.join(RULE_TESTS), where.get(hook) or 'none'))
    stray = sorted(set(defined_in) - hooks)
    ck.ok(stray == [], '%s: every test_rule_* names a rule (a hook of struct cachetier_policy): '
          '%s' % (', '.join(RULE_TESTS), stray or 'yes'))
    twice = sorted(h for h, fs in defined_in.items() if len(fs) > 1)
    ck.ok(twice == [], 'no test_rule_* is defined in two of %s: %s'
          % (', '.join(RULE_TESTS), twice or 'none'))
    return ck.status()


if __name__ == '__main__':
    sys.exit(main())
