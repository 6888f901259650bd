#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass (round 6), each finding replayed as a seeded
test.

usage: test_hostile6.py SHARDFS GROUP
GROUP:
  indexbuild  the request that builds a shard's index is itself interruptible: over nginx
              through a proxy that holds its GETs (no sidecars), a FUSE request of the shard's
              directory, the seeded one of 'ls' of it, 'stat' or 'cat' of a member, builds its
              index; the seeded signal (SIGINT, SIGTERM, SIGKILL) ends it while the build's GET
              is still held (the daemon answers the interrupted request within
              CACHETIER_STOP_TICK_MS); index_builds_interrupted is 1, index_errors 0. Seeded:
              a 'shardfs plan' naming a member, whose indexing ahead waits for that build (or
              starts once the first is given up), builds the index (index_built 1) and exits
              0 once the GET is released; else, the build is dropped (index_built 0) and a
              later listing builds it. Either way the listing is exact and op_errors is 0.
              Before the mend the interrupted builder stayed in the kernel until its build
              ended (its request's stop was put aside for the build).
  sidecar     the same request given up while the build fetches the shard's sidecar index:
              over nginx through a proxy that holds the GET of NAME.tar.idx (written by
              'shardfs index --sidecar'), the seeded one of 'ls', 'stat' or 'cat' loads the
              shard's index from it; the seeded signal ends it while that GET is held (the
              daemon answers within CACHETIER_STOP_TICK_MS): index_builds_interrupted 1,
              index_sidecar_rejected 0, index_errors 0. Once the GET is released a listing is
              exact, its index from the sidecar (index_sidecar 1, index_built 0) and op_errors
              is 0. Before the mend the sidecar's GET ignored the stop: the interrupted
              request stayed in the kernel until the GET ended (the retry budget).
  sidecar-head  the same request given up while the build asks the size of the shard's
              sidecar (a brace pattern's name NAME.tar.idx, learned by a HEAD): over nginx
              through a proxy that holds that HEAD, the seeded one of 'ls', 'stat' or 'cat'
              of the shard's directory; the seeded signal ends it while the HEAD is held (the
              daemon answers within CACHETIER_STOP_TICK_MS): index_builds_interrupted 1,
              index_errors 0. Once the HEAD is released a listing is exact, its index from
              the sidecar (index_sidecar 1, index_built 0), op_errors 0. Before the mend the
              HEAD ignored the stop: the interrupted request stayed in the kernel until the
              HEAD ended (2 of 6 checks failed).
  emptydirs   a seeded local source: shards and plain files in nested directories, empty
              directories (chains of 1 to 3 among them), directories holding only a fifo or a
              dangling symlink. The mount's directories outside the shards' member directories
              are exactly the source's (find -type d), each empty one lists nothing and shows
              its own mtime; after 'shardfs refresh' a new empty directory shows and a removed
              one is gone. Before the mend no empty directory showed (a user's find of the
              source and of the mount disagreed).
  symloop     a seeded local source with symlinks back to a directory on their own path (to
              '.', '..', '../..': 1 to 3 of them at seeded depths), one to another directory
              inside it (relative) and one to a directory outside it (absolute): the mount's
              tree is the source's as find -L walks it (the other directory twice, no loop
              followed, the outside one not at all: a source is its tree, docs/sources.md),
              and the log warns once for each loop link, naming it, and once for the link
              out. Before the mend each loop repeated the tree below it up to 64 levels
              deep (every shard shown again at each level), silently. Then refreshes: one with
              the same loops says nothing; one where each loop link points elsewhere says once
              that it is no longer a loop ("listed"); the next says nothing; one with the loops
              back warns again (each loop's warning twice in all, its "no longer" line once).

Seeded (SHARDFS_TEST_SEED). Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402
from shardfs_test.planread import held_proxy_mount, hold, tar_gets  # noqa: E402

# what the test waits for the interrupted builder: a guard against a hang only (the daemon
# answers within CACHETIER_STOP_TICK_MS, 100 ms); the held GET outlasts it
GONE_GUARD_S = 15


def delta(st, st0, name):
    return st.get(name, 0) - st0.get(name, 0)


def builder_cmd(rng, d):
    """The seeded request that builds shard directory d's index, 'ls' of it or 'stat' or 'cat'
    of its member k00.bin, and the seeded signal that ends it: (command, signal)."""
    how = rng.choice(['ls', 'stat', 'cat'])
    sig = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
    return {'ls': ['ls', d], 'stat': ['stat', os.path.join(d, 'k00.bin')],
            'cat': ['cat', os.path.join(d, 'k00.bin')]}[how], sig


def start_builder(cmd, what, procs):
    """cmd started (logged as what, appended to procs): its process."""
    log('the builder: %s' % what)
    b = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(b)
    return b


def interrupt(b, sig):
    """Signal sig to process b once it waits in the kernel for a FUSE answer: its exit status,
    or what it still waits in after GONE_GUARD_S."""
    ml.poll(lambda: ml.wchan(b.pid) == 'request_wait_answer',
            what='the builder in request_wait_answer (now %r)' % ml.wchan(b.pid))
    b.send_signal(sig)
    try:
        return b.wait(GONE_GUARD_S)
    except subprocess.TimeoutExpired:
        return 'still there after %d s, in %s' % (GONE_GUARD_S, ml.wchan(b.pid))


def group_indexbuild(env, ck):
    rng = env.rng
    procs = []
    with held_proxy_mount(env, ck, rng, procs) as (m, px, names):
        st0 = m.stats()
        hold(px)
        d = os.path.join(m.mnt, 'shard-000000')
        cmd, sig = builder_cmd(rng, d)
        waiter = rng.random() < 0.5
        what = '%s, %s, %s' % (' '.join(cmd[:1]), signal.Signals(sig).name,
                               'a plan waits' if waiter else 'no one waits')
        b = start_builder(cmd, what, procs)
        ml.poll(lambda: any(r['held'] for r in tar_gets(px)), what='the build\'s GET held')
        if waiter:
            # resolves the member on the control file, not in the shard's directory
            # (whose requests the kernel may serialise behind the builder's)
            pf = env.path('plan')
            ml.write_file(pf, b'shard-000000/k00.bin\n')
            # its indexing ahead waits for the build on the shard's lock, or, started
            # after the builder gave up, builds: the same outcome either way
            a = subprocess.Popen([env.shardfs, 'plan', m.mnt, pf, '--name', 't'],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            procs.append(a)
        rc = interrupt(b, sig)
        ck.eq('%s: the interrupted builder is gone while its GET is held' % what, rc, -sig)
        ck.ok(any(r['held'] for r in tar_gets(px)), 'the build\'s GET still held')
        st = m.stats()
        ck.eq('%s: index_builds_interrupted, index_errors' % what,
              (delta(st, st0, 'index_builds_interrupted'), delta(st, st0, 'index_errors')),
              (1, 0))
        px.release()
        if waiter:
            out, err = a.communicate(timeout=120)
            log('the plan: %r %r' % (out, err))
            ck.eq('the plan\'s exit (it built the index)', a.returncode, 0)
        st = m.stats()
        ck.eq('%s: index_built once the GET is released' % what,
              delta(st, st0, 'index_built'), 1 if waiter else 0)
        ck.eq('after: a listing exact', sorted(os.listdir(d)), names['shard-000000'])
        st = m.stats()
        ck.eq('after: index_built, index_builds_interrupted, index_errors, op_errors',
              (delta(st, st0, 'index_built'), delta(st, st0, 'index_builds_interrupted'),
               delta(st, st0, 'index_errors'), delta(st, st0, 'op_errors')), (1, 1, 0, 0))



def group_sidecar(env, ck):
    rng = env.rng
    procs = []

    def sidecars(src):
        r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('c0'), src])
        ck.eq('shardfs index --sidecar: exit', r.returncode, 0)

    with held_proxy_mount(env, ck, rng, procs, before=sidecars) as (m, px, names):
        ck.ok('shard-000000' in os.listdir(m.mnt), 'root listing names shard-000000')
        st0 = m.stats()
        px.released.clear()
        px.hold_bytes = 1
        px.hold_paths = lambda p: p.endswith('.tar.idx')
        px.reset()
        d = os.path.join(m.mnt, 'shard-000000')
        cmd, sig = builder_cmd(rng, d)
        what = '%s, %s' % (cmd[0], signal.Signals(sig).name)
        b = start_builder(cmd, what, procs)
        ml.poll(lambda: any(g['held'] for g in px.held()), what='the sidecar\'s GET held')
        rc = interrupt(b, sig)
        ck.eq('%s: the interrupted request is gone while the sidecar\'s GET is held' % what,
              rc, -sig)
        ck.eq('the held GET', [g['path'].rsplit('/', 1)[-1] for g in px.held()],
              ['shard-000000.tar.idx'])
        st = m.stats()
        ck.eq('%s: index_builds_interrupted, index_sidecar_rejected, index_errors' % what,
              (delta(st, st0, 'index_builds_interrupted'),
               delta(st, st0, 'index_sidecar_rejected'), delta(st, st0, 'index_errors')),
              (1, 0, 0))
        px.release()
        ck.eq('after: a listing exact', sorted(os.listdir(d)), names['shard-000000'])
        st = m.stats()
        ck.eq('after: index_sidecar, index_built, index_builds_interrupted, '
              'index_sidecar_rejected, index_errors, op_errors',
              (delta(st, st0, 'index_sidecar'), delta(st, st0, 'index_built'),
               delta(st, st0, 'index_builds_interrupted'),
               delta(st, st0, 'index_sidecar_rejected'), delta(st, st0, 'index_errors'),
               delta(st, st0, 'op_errors')), (1, 0, 1, 0, 0, 0))



def group_sidecar_head(env, ck):
    from shardfs_test import web
    rng = env.rng
    src, names = ml.seeded_shards(env, rng)
    r = env.run([env.shardfs, 'index', '--sidecar', '--cache-dir', env.path('c0'), src])
    ck.eq('shardfs index --sidecar: exit', r.returncode, 0)
    ng = web.Nginx(env.path('nginx'), src).start()
    px = web.SlowProxy(ng.port)
    px.hold_heads = lambda p: p.endswith('.tar.idx')
    procs = []
    url = px.url('files/shard-{000000..%06d}.tar{,.idx}' % (len(names) - 1))
    try:
        with ml.Mount(env, url, cache_dir=env.path('cache'),
                      extra=['--warm', 'off', '--prefetch-shards', '0']) as m:
            st0 = m.stats()
            d = os.path.join(m.mnt, 'shard-000000')
            cmd, sig = builder_cmd(rng, d)
            what = '%s, %s' % (cmd[0], signal.Signals(sig).name)
            b = start_builder(cmd, what, procs)
            ml.poll(lambda: any(h['held'] for h in px.held()), what='the sidecar\'s HEAD held')
            rc = interrupt(b, sig)
            ck.eq('%s: the interrupted request is gone while the sidecar\'s HEAD is held' % what,
                  rc, -sig)
            ck.eq('the held HEAD', [h['path'].rsplit('/', 1)[-1] for h in px.held()],
                  ['shard-000000.tar.idx'])
            st = m.stats()
            ck.eq('%s: index_builds_interrupted, index_errors' % what,
                  (delta(st, st0, 'index_builds_interrupted'), delta(st, st0, 'index_errors')),
                  (1, 0))
            px.release()
            ck.eq('after: a listing exact', sorted(os.listdir(d)), names['shard-000000'])
            st = m.stats()
            ck.eq('after: index_sidecar, index_built, index_builds_interrupted, index_errors, '
                  'op_errors',
                  (delta(st, st0, 'index_sidecar'), delta(st, st0, 'index_built'),
                   delta(st, st0, 'index_builds_interrupted'), delta(st, st0, 'index_errors'),
                   delta(st, st0, 'op_errors')), (1, 0, 1, 0, 0))
    finally:
        for p in procs:
            if p.poll() is None:
                px.release()
                p.wait(120)
        px.close()
        ng.stop()


def dirs_of(root, skip=()):
    """Every directory below root (relative paths), not descending into skip's names."""
    out = set()
    for dp, dns, _ in os.walk(root):
        rel = os.path.relpath(dp, root)
        dns[:] = [d for d in dns if not (rel == '.' and d in skip) and d != '.shardfs']
        for d in dns:
            out.add(os.path.normpath(os.path.join(rel, d)))
    return out


def group_emptydirs(env, ck):
    rng = env.rng
    src = env.path('src')
    os.makedirs(src)
    shards = []
    parents = ['']
    for i in range(rng.randint(1, 3)):  # nested directories with something in them
        d = os.path.join(rng.choice(parents), 'd%d' % i)
        os.makedirs(os.path.join(src, d))
        parents.append(d)
        if rng.random() < 0.5:
            ml.write_file(os.path.join(src, d, 'f.txt'), b'f%d\n' % i)
        else:
            ml.write_file(os.path.join(src, d, 'x.tar'), ml.tar_bytes([('m.txt', b'm\n')]))
    ml.write_file(os.path.join(src, 'shard-0.tar'), ml.tar_bytes([('k.txt', b'k\n')]))
    shards.append('shard-0')
    empty = []
    for i in range(rng.randint(1, 4)):
        d = os.path.join(rng.choice(parents), *['e%d-%d' % (i, k)
                                                 for k in range(rng.randint(1, 3))])
        os.makedirs(os.path.join(src, d))
        empty.append(d)
    odd = []
    for i in range(rng.randint(0, 2)):
        d = os.path.join(rng.choice(parents), 'odd%d' % i)
        os.makedirs(os.path.join(src, d))
        if rng.random() < 0.5:
            os.mkfifo(os.path.join(src, d, 'fifo'))
        else:
            os.symlink('/nonexistent/x', os.path.join(src, d, 'dangling'))
        odd.append(d)
    log('empty: %s; only a fifo or a dangling link: %s' % (empty, odd))
    # member directories of shards: x.tar in dN gives dN/x
    members = {os.path.normpath(os.path.join(os.path.relpath(dp, src), f[:-4]))
               for dp, _, fs in os.walk(src) for f in fs if f.endswith('.tar')}
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        def mount_dirs():
            return {d for d in dirs_of(m.mnt) if d not in members and
                    not any(d.startswith(x + '/') for x in members)}
        ck.eq('find -type d: the mount against the source', sorted(mount_dirs()),
              sorted(dirs_of(src)))
        for d in empty + odd:
            try:
                got = (os.listdir(os.path.join(m.mnt, d)),
                       int(os.stat(os.path.join(m.mnt, d)).st_mtime))
            except OSError as e:
                got = e.strerror
            ck.eq('%s: listing and mtime' % d, got,
                  ([], int(os.stat(os.path.join(src, d)).st_mtime)))
        # a change: one new empty directory, one removed
        new = os.path.join(rng.choice(parents), 'new-empty')
        os.makedirs(os.path.join(src, new))
        gone = rng.choice(empty)
        os.rmdir(os.path.join(src, gone))
        r = env.run([env.shardfs, 'refresh', m.mnt])
        ck.eq('refresh: exit', r.returncode, 0)
        ck.eq('after refresh: find -type d, the mount against the source',
              sorted(mount_dirs()), sorted(dirs_of(src)))
        ck.ok(os.path.isdir(os.path.join(m.mnt, new)), '%s shows after refresh' % new)
        ck.ok(not os.path.exists(os.path.join(m.mnt, gone)), '%s gone after refresh' % gone)


def group_symloop(env, ck):
    rng = env.rng
    src = env.path('src')
    other = os.path.join(src, 'o')  # another directory of the tree, on no loop's path
    outside = env.path('outside')
    os.makedirs(os.path.join(src, 'a', 'b'))
    os.makedirs(other)
    os.makedirs(outside)
    ml.write_file(os.path.join(outside, 'x.txt'), b'outside\n')
    ml.write_file(os.path.join(src, 's.tar'), ml.tar_bytes([('m.txt', b'm\n')]))
    ml.write_file(os.path.join(src, 'a', 'f.txt'), b'f\n')
    ml.write_file(os.path.join(src, 'a', 'b', 'g.txt'), b'g\n')
    ml.write_file(os.path.join(other, 'o.txt'), b'o\n')
    os.symlink('o', os.path.join(src, 'ext'))
    os.symlink(outside, os.path.join(src, 'out'))  # leads out: not listed, said once
    places = [('', ['.']), ('a', ['.', '..']), ('a/b', ['.', '..', '../..'])]
    loops = []
    for i in range(rng.randint(1, 3)):
        where, targets = rng.choice(places)
        name = os.path.join(where, 'loop%d' % i)
        os.symlink(rng.choice(targets), os.path.join(src, name))
        loops.append(name)
    log('loops: %s' % loops)
    want = sorted(['a', 'a/b', 'a/b/g.txt', 'a/f.txt', 'ext', 'ext/o.txt', 'o', 'o/o.txt', 's',
                   's.tar', 's/m.txt'])
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        got = []
        for dp, dns, fns in os.walk(m.mnt):
            rel = os.path.relpath(dp, m.mnt)
            dns[:] = [d for d in dns if d != '.shardfs']
            got += [os.path.normpath(os.path.join(rel, x)) for x in dns + fns]
        ck.eq('the mount\'s tree (%d loop link%s)' % (len(loops), 's' if len(loops) > 1 else ''),
              sorted(got), want)

        def refresh(label):
            r = env.run([env.shardfs, 'refresh', m.mnt])
            ck.eq('%s: refresh exit' % label, r.returncode, 0)

        # a refresh that meets the same loops says nothing again; one that finds each link
        # pointing elsewhere (no loop) says so once; another says nothing; a loop again is
        # said again
        refresh('same loops')
        for name in loops:
            os.unlink(os.path.join(src, name))
            os.symlink(os.path.relpath(other, os.path.join(src, os.path.dirname(name))),
                       os.path.join(src, name))
        refresh('no loop')
        ck.ok(all(os.path.isfile(os.path.join(m.mnt, name, 'o.txt')) for name in loops),
              'the links to other listed')
        refresh('no loop, again')
        for name in loops:
            os.unlink(os.path.join(src, name))
            os.symlink('.', os.path.join(src, name))
        refresh('loops again')
    text = ml.logs_under(env.path('cache'))
    for name in loops:
        ck.eq('log: warnings naming %s a loop' % name,
              text.count('source: %s is a link back to a directory on its own path (a loop): '
                         'not followed' % name), 2)
        ck.eq('log: lines saying %s is no longer a loop' % name,
              text.count('source: %s is no longer a link back to a directory on its own path: '
                         'listed' % name), 1)
    ck.eq('log: the link out named once (mount, 4 refreshes)',
          text.count('source: out is a symbolic link that leads out of the source directory'), 1)


GROUPS = {'indexbuild': (group_indexbuild, 180), 'sidecar': (group_sidecar, 180),
          'sidecar-head': (group_sidecar_head, 180),
          'emptydirs': (group_emptydirs, 120),
          'symloop': (group_symloop, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
