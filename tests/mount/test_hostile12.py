#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass (round 12), each finding replayed as a test.

usage: test_hostile12.py SHARDFS GROUP
GROUP:
  twomounts  two mounts of one nginx source on one cache directory, each running 'shardfs
             prefetch' of everything at once (a holding proxy keeps every shard's GET until
             both have said what they ask, so the two runs overlap whatever the scheduling):
             both exit 0, and each one's "X fetched" is its own mount's bytes_fetched delta,
             the two summing to exactly the shard bytes the server sent; the bytes the other
             mount fetched for it are said apart ("fetched meanwhile by another mount on the
             cache directory"), exact. Before (fs/tools/fs_prefetch.c at c2d2565): each said
             "X fetched" of every byte that became cached meanwhile, whoever fetched it: the
             two reports summed to twice what the server sent.
  shared     the same two mounts, 'shardfs prefetch' of one shard on both, the second begun
             (its plan said: 0 B of it cached) while the first mount's fill of it is held, then
             released: the shard is fetched once, by the first (bytes_fetched: its size and
             0); the second's last progress line says the bytes were fetched by another mount
             on the cache directory, not "already cached" (they were not, as it began), and
             its summary says so (exact lines); the member exact through both. Before
             (fs/tools/fs_prefetch.c at fc6351c): the progress line said "already cached".
  killed     'shardfs prefetch' of a shard whose fill a holding proxy keeps, the daemon then
             killed (SIGKILL): the command exits 1 saying the mount's daemon is gone and that
             'shardfs umount MNT' cleans up (exact, as 'shardfs stats' says it), which then
             exits 0; a remount's prefetch fetches the shard (exit 0, its summary exact) and
             the member reads exact. Before (fs/tools at fc6351c): 'shardfs: lost the mount at
             MNT', nothing on why or what to do.
  plan-trimmed  a local source whose shard has members, one named with a carriage return at
             its end; seeded plan files (SHARDFS_TEST_SEED) of 12 member lines, each at random
             as it is or with CRLF's '\r', a leading or trailing blank or tab, plus a missing
             path with a '\r' and the '\r' member as it is: 'shardfs plan' publishes the lines
             that are paths as they are, counts the others skipped, and when any decorated
             line names a path without its decoration exits 1 saying how many and the first's
             line number (exact stdout and stderr); a plan of only undecorated lines and the
             missing one exits 0 with nothing on stderr. Before (fs/tools at e39c1ab): a CRLF
             plan file skipped every path and exited 0 with '0 paths ... 12 paths not in the
             mount (skipped)'.
  plan-newline  python/shardfs over a local shard of seeded members (SHARDFS_TEST_SEED), 1 to
             3 of them named with a newline: a PlanSampler (and plan_dataloader's) over all of
             them warns once, exactly, that those cannot be planned, and publishes the others
             (paths, missing 0, fnv of the others in order); read in order, the plan's read and
             position reach them (the first epoch: the second reads from the page cache); every
             member exact; strict=True is a ValueError. Before
             (python/shardfs at 5368d20): one such name was a warning 'no plans' and nothing
             was published for the whole dataset.
"""
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import hostile  # noqa: E402
from shardfs_test import web  # noqa: E402

log = ml.log

SHARDS = 6


class CountingHoldProxy(web.HoldProxy):
    """A HoldProxy that counts the body bytes of the ranged answers the server sent."""

    def __init__(self, upstream_port, hold_from):
        self.sent = 0
        super().__init__(upstream_port, hold_from)

    def _fetch(self, head):
        status, hdrs, body = super()._fetch(head)
        if self._range(head) is not None:
            with self.lock:
                self.sent += len(body)
        return status, hdrs, body


def two_mounts(env, px, cache, extra):
    """Two mounts (not mounted yet) of px's source on one cache directory."""
    return [ml.Mount(env, px.url('json/'), mountpoint=env.path('mnt-%s' % t), cache_dir=cache,
                     extra=extra) for t in 'ab']


def group_twomounts(env, ck):
    if not shutil.which('nginx'):
        raise ml.Skip('nginx is not installed (sh scripts/install-deps.sh --test)')
    src = env.path('src')
    os.makedirs(src)
    total = 0
    for i in range(SHARDS):  # each shard one cache unit (1 MiB): fetched whole by one mount
        p = os.path.join(src, 's%d.tar' % i)
        ml.write_file(p, ml.tar_bytes([('x.bin', os.urandom(150000 + 8192 * i))]))
        total += os.path.getsize(p)
    ng = web.Nginx(env.path('nginx'), src).start()
    px = CountingHoldProxy(ng.port, 0)
    cache = env.path('cache')
    extra = ['--warm', 'off', '--chunk-size', '1M']
    a, b = two_mounts(env, px, cache, extra)
    procs = []
    try:
        a.mount()
        b.mount()
        f0 = {m.mnt: m.stats()['bytes_fetched'] for m in (a, b)}
        runs = {}
        for m, tag in ((a, 'a'), (b, 'b')):
            runs[m.mnt] = hostile.spawn(env, 'pf-%s' % tag, [env.shardfs, 'prefetch', m.mnt])
            procs.append(runs[m.mnt][0])
            ml.poll(lambda: hostile.said(runs[m.mnt][1], ' asked, '),
                    what='the prefetch of mount %s: its plan' % tag)
        ck.eq('held: the server sent nothing yet', px.sent, 0)
        px.release.set()
        res = {mnt: hostile.ended(*r) for mnt, r in runs.items()}
        delta = {m.mnt: m.stats()['bytes_fetched'] - f0[m.mnt] for m in (a, b)}
        log('server sent %d, dataset %d, bytes_fetched deltas %r' % (px.sent, total, delta))
        figures = {}
        for m, tag in ((a, 'a'), (b, 'b')):
            rc, out, err = res[m.mnt]
            ck.eq('mount %s: exit' % tag, rc, 0)
            ck.eq('mount %s: stderr' % tag, err, '')
            last = out.splitlines()[-1:]
            got = re.match(r'prefetch: done: (\S+ \S+) fetched', last[0] if last else '')
            figures[m.mnt] = got.group(1) if got else None
            own, other = delta[m.mnt], total - delta[m.mnt]
            ck.eq('mount %s: its summary' % tag, last, [
                'prefetch: done: %s fetched%s, 0 B cached already, 0 B did not fit' % (
                    hostile.human(own), ', %s fetched meanwhile by another mount on the cache '
                    'directory' % hostile.human(other) if other else '')])
            ck.eq('mount %s: "fetched" is its bytes_fetched delta' % tag, figures[m.mnt],
                  hostile.human(own))
        ck.eq('the two deltas sum to what the server sent', sum(delta.values()), px.sent)
        ck.eq('the server sent each shard once', px.sent, total)
        # fs_human_bytes shows 2 decimals: the figures themselves summed, exactly, when each
        # is the delta above (checked) and the deltas sum to what the server sent (checked)
        ck.ok(all(figures.values()), 'both reports name a figure: %r' % figures)
        for m, tag in ((a, 'a'), (b, 'b')):
            for i in range(SHARDS):
                with open(os.path.join(src, 's%d.tar' % i), 'rb') as f:
                    want = f.read()
                ck.ok(ml.read_all(os.path.join(m.mnt, 's%d.tar' % i)) == want,
                      'mount %s: s%d.tar read back differs' % (tag, i))
        ck.eq('read back from the cache: nothing more sent', px.sent, total)
    finally:
        hostile.end_all(procs, (a, b), px, ng)


def group_shared(env, ck):
    if not shutil.which('nginx'):
        raise ml.Skip('nginx is not installed (sh scripts/install-deps.sh --test)')
    src = env.path('src')
    os.makedirs(src)
    data = os.urandom(300000)  # one shard of one fill (under a 1M chunk)
    ml.write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('x.bin', data)]))
    size = hostile.human(os.path.getsize(os.path.join(src, 's0.tar')))
    ng = web.Nginx(env.path('nginx'), src).start()
    px = CountingHoldProxy(ng.port, 0)
    cache = env.path('cache')
    extra = ['--warm', 'off', '--chunk-size', '1M', '--prefetch-shards', '0']
    a, b = two_mounts(env, px, cache, extra)
    procs = []
    try:
        a.mount()
        b.mount()
        pa = hostile.spawn(env, 'pf-a', [env.shardfs, 'prefetch', a.mnt])
        procs.append(pa[0])
        ml.poll(lambda: hostile.said(pa[1], ' asked, ') and a.stats()['fills_inflight'] >= 1,
                what='the first mount\'s fill, held')
        pb = hostile.spawn(env, 'pf-b', [env.shardfs, 'prefetch', b.mnt])
        procs.append(pb[0])
        ml.poll(lambda: hostile.said(pb[1], ' asked, '), what='the second mount\'s plan')
        ck.eq('held: both still run', (pa[0].poll(), pb[0].poll()), (None, None))
        px.release.set()
        rc_a, out_a, err_a = hostile.ended(*pa)
        rc_b, out_b, err_b = hostile.ended(*pb)
        ck.eq('the first: exit, stderr', (rc_a, err_a), (0, ''))
        ck.eq('the second: exit, stderr', (rc_b, err_b), (0, ''))
        ck.eq('the shard fetched once, by the first mount',
              (a.stats()['bytes_fetched'], b.stats()['bytes_fetched'], px.sent),
              (os.path.getsize(os.path.join(src, 's0.tar')), 0,
               os.path.getsize(os.path.join(src, 's0.tar'))))
        ck.eq('the first\'s summary', out_a.splitlines()[-1:],
              ['prefetch: done: %s fetched, 0 B cached already, 0 B did not fit' % size])
        lines = out_b.splitlines()
        ck.eq('the second\'s plan', lines[:1],
              ['prefetch: %s asked, 0 B of it cached; the cache (--cache-size 20.00 GiB) has '
               'room for 20.00 GiB more' % size])
        ck.eq('the second\'s last progress line', lines[-2:-1],
              ['prefetch: %s of %s cached, fetched by another mount on the cache directory'
               % (size, size)])
        ck.eq('the second\'s summary', lines[-1:],
              ['prefetch: done: 0 B fetched, %s fetched meanwhile by another mount on the cache '
               'directory, 0 B cached already, 0 B did not fit' % size])
        ck.eq('no line of the second says "already cached"', 'already cached' in out_b, False)
        for m in (a, b):
            ck.ok(ml.read_all(os.path.join(m.mnt, 's0', 'x.bin')) == data,
                  '%s: the member read back differs' % m.mnt)
    finally:
        hostile.end_all(procs, (a, b), px, ng)


def group_killed(env, ck):
    if not shutil.which('nginx'):
        raise ml.Skip('nginx is not installed (sh scripts/install-deps.sh --test)')
    src = env.path('src')
    os.makedirs(src)
    data = os.urandom(300000)
    ml.write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([('x.bin', data)]))
    size = os.path.getsize(os.path.join(src, 's0.tar'))
    ng = web.Nginx(env.path('nginx'), src).start()
    px = CountingHoldProxy(ng.port, 0)
    cache, mnt = env.path('cache'), env.path('mnt')
    extra = ['--warm', 'off', '--chunk-size', '1M', '--prefetch-shards', '0']
    m = ml.Mount(env, px.url('json/'), mountpoint=mnt, cache_dir=cache, extra=extra)
    procs = []
    try:
        m.mount()
        pid = ml.daemons_for(env.shardfs, mnt)
        ck.eq('one daemon', len(pid), 1)
        p = hostile.spawn(env, 'pf-killed', [env.shardfs, 'prefetch', mnt])
        procs.append(p[0])
        ml.poll(lambda: hostile.said(p[1], ' asked, ') and m.stats()['fills_inflight'] >= 1,
                what='the prefetch\'s fill, held')
        ml.kill_daemon(env, pid[0], 9)
        rc, out, err = hostile.ended(*p)
        ck.eq('the prefetch of a killed daemon: exit, stderr', (rc, err), (
            1, 'shardfs: the daemon of %s is gone (the mount answers "Transport endpoint is '
            'not connected"); \'shardfs umount %s\' cleans up\n' % (mnt, mnt)))
        r = env.run([env.shardfs, 'umount', mnt], timeout=ml.UMOUNT_TIMEOUT, files=True)
        ck.eq('shardfs umount: exit', r.returncode, 0)
        ck.eq('unmounted', ml.is_mounted(mnt), False)
        m.umount(quiet=True)
        px.release.set()
        m2 = ml.Mount(env, px.url('json/'), mountpoint=mnt, cache_dir=cache, extra=extra)
        m2.mount()
        try:
            r = env.run([env.shardfs, 'prefetch', mnt], timeout=ml.POLL_TIMEOUT, files=True)
            out = r.stdout.decode(errors='replace')
            ck.eq('remount: prefetch exit', r.returncode, 0)
            ck.eq('remount: its summary', out.splitlines()[-1:],
                  ['prefetch: done: %s fetched, 0 B cached already, 0 B did not fit'
                   % hostile.human(size)])
            ck.ok(ml.read_all(os.path.join(mnt, 's0', 'x.bin')) == data,
                  'remount: the member read back differs')
        finally:
            m2.umount()
    finally:
        hostile.end_all(procs, (m,), px, ng)


DECOR = ('', '', '\r', ' ', '\t', 'trail ', 'trail\t', ' \r')


def decorate(rel, how):
    if how.startswith('trail'):
        return rel + how[5:]
    if how in (' ', '\t'):
        return how + rel
    return rel + how


def group_plan_trimmed(env, ck):
    src = env.path('src')
    os.makedirs(src)
    members = [('k%02d.bin' % i, bytes([65 + i]) * (1000 + i)) for i in range(12)]
    members.append(('cr\r', b'carriage'))
    ml.write_file(os.path.join(src, 's0.tar'), ml.tar_bytes(members))
    m = ml.Mount(env, src, mountpoint=env.path('mnt'), cache_dir=env.path('cache'))
    if not hostile.mount_or_fail(ck, 'mount', m):
        return
    try:
        rng = env.rng
        for rnd in range(4):
            lines, found, skipped, decorated = [], 0, 0, 0
            for i in rng.sample(range(12), 12):
                how = '' if rnd == 3 else rng.choice(DECOR)
                lines.append(decorate('s0/k%02d.bin' % i, how))
                if how:
                    skipped += 1
                    decorated += 1
                else:
                    found += 1
            for extra in ('s0/nope.bin\r', 's0/cr\r'):
                lines.insert(rng.randrange(len(lines) + 1), extra)
                if extra == 's0/cr\r':
                    found += 1
                else:
                    skipped += 1
            first = None
            for n, ln in enumerate(lines, 1):
                if ln != ln.strip(' \t\r') or ln.endswith('\r'):
                    if ln.strip(' \t\r') not in ('s0/nope.bin', 's0/cr'):
                        first = first or n
            plan = env.path('plan-%d.txt' % rnd)
            with open(plan, 'wb') as f:
                f.write(''.join(ln + '\n' for ln in lines).encode())
            log('round %d: %r' % (rnd, lines))
            out = "plan 'default': %d path%s, %s; %d path%s not in the mount (skipped)\n" % (
                found, '' if found == 1 else 's', hostile.human(sum(
                    len(d) for nm, d in members
                    if any(ln == 's0/' + nm for ln in lines))),
                skipped, '' if skipped == 1 else 's')
            err = ''
            if decorated:
                err = ('shardfs plan: %d line%s of %s name%s a path of the mount only without '
                       'the carriage return or blanks at %s ends (the first: line %d): a line '
                       'is a path as it is, byte for byte; write the file with plain newline '
                       'line ends and no blanks around the paths\n' % (
                           decorated, '' if decorated == 1 else 's', plan,
                           's' if decorated == 1 else '', 'its' if decorated == 1 else 'their',
                           first))
            hostile.run_exact(env, ck, 'round %d (%d decorated)' % (rnd, decorated),
                              [env.shardfs, 'plan', m.mnt, plan], 1 if decorated else 0, out,
                              err)
    finally:
        m.umount()


def group_plan_newline(env, ck):
    try:
        import torch.utils.data as tud
    except ImportError:
        raise ml.Skip('torch is not installed (sh scripts/install-deps.sh --test)', 'tool')
    import warnings
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..',
                                    'python'))
    import shardfs
    rng = env.rng
    n, k = rng.randint(6, 12), rng.randint(1, 3)
    names = ['m%02d.bin' % i for i in range(n)] + ['n%d\nl%d.bin' % (i, i) for i in range(k)]
    data = {nm: bytes(rng.getrandbits(8) for _ in range(rng.randint(10, 3000))) for nm in names}
    src = env.path('src')
    os.makedirs(src)
    ml.write_file(os.path.join(src, 's0.tar'), ml.tar_bytes([(nm, data[nm]) for nm in names]))
    m = ml.Mount(env, src, mountpoint=env.path('mnt'), cache_dir=env.path('cache'))
    if not hostile.mount_or_fail(ck, 'mount', m):
        return
    try:
        order = names[:]
        rng.shuffle(order)
        paths = [os.path.join(m.mnt, 's0', nm) for nm in order]
        planned = ['s0/' + nm for nm in order if '\n' not in nm]
        first_nl = next('s0/' + nm for nm in order if '\n' in nm)
        want_warn = ('shardfs: %d path%s cannot be planned (a newline in the name; the first: '
                     '%r): read without a plan, the others planned' % (
                         k, '' if k == 1 else 's', first_nl))
        for how in ('sampler', 'dataloader'):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter('always')
                if how == 'sampler':
                    ps = shardfs.PlanSampler(tud.SequentialSampler(range(len(paths))), paths,
                                             mountpoint=m.mnt, name='nl-' + how)
                    got = b''.join(ml.read_all(paths[i]) for i in ps)
                else:
                    dl = tud.DataLoader(paths, batch_size=2, shuffle=False,
                                        collate_fn=lambda b: b)
                    ps = shardfs.plan_dataloader(dl, name='nl-' + how)
                    got = b''.join(ml.read_all(p) for batch in dl for p in batch)
            said = [str(x.message) for x in w if issubclass(x.category, UserWarning)]
            ck.eq('%s: the warnings' % how, said, [want_warn])
            info = ps.last_plan
            ck.eq('%s: published (paths, missing, fnv)' % how,
                  info and (info.paths, info.missing, info.fnv),
                  (n, 0, shardfs.plan_fnv(planned)))
            if how == 'sampler':  # the second epoch's reads come from the page cache
                after = shardfs.plans(m.mnt).get('nl-' + how)
                ck.eq('%s: read, position after the epoch' % how,
                      after and (after.read, after.position), (n, n))
            ck.ok(got == b''.join(data[nm] for nm in order), '%s: the bytes read differ' % how)
        try:
            shardfs.PlanSampler(tud.SequentialSampler(range(len(paths))), paths,
                                mountpoint=m.mnt, name='nl-strict', strict=True)
            ck.fail('strict: no ValueError')
        except ValueError as e:
            ck.eq('strict: the ValueError', str(e),
                  'a path with a newline cannot be planned: %r' % first_nl)
    finally:
        m.umount()


GROUPS = {'twomounts': (group_twomounts, 240), 'shared': (group_shared, 240),
          'killed': (group_killed, 240), 'plan-trimmed': (group_plan_trimmed, 240),
          'plan-newline': (group_plan_newline, 240)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
