#!/usr/bin/python3
"""shardfs mount tests: fills completed on the store's I/O thread, and the connections of
small planned ranges (--max-connections) against those of large fills (--connections).

usage: test_fills.py SHARDFS GROUP
GROUP:
  inflight   nginx behind a proxy that holds every GET of a shard after its first byte,
             --connections 2 --max-connections 6, sidecar indexes, --chunk-size 512K: a plan
             of 16 members of ~100 KB (one request of at most 1 MiB each, --plan-gap 0) has
             exactly 6 GETs at the server and 6 fills in flight (it had 2 before); released,
             every planned member reads back exact. Then a cat of a whole shard (demand and
             readahead chunks, large fills): exactly 2 GETs at the server (--connections), 3
             fills in flight (one waits for a connection); released: exact bytes.
  interrupt  a reader blocked on a member whose fill the proxy holds is killed (its FUSE
             read interrupted); the server is released: the fill completes on the I/O
             thread, its units are valid (the next read has the exact bytes and fetches
             nothing: one GET in all), fills_inflight 0, fill_errors 0; the blocked read
             counts in reads_inflight, and the interrupted one is counted out (0).
  killed     a reader blocked on a member whose fill the proxy holds, reading with O_DIRECT (one
             READ request the kernel interrupts; a page cache reader waits on a page lock
             and is killable anyway), in the kernel's request_wait_answer, is SIGKILLed: it
             is gone (waitpid) while the server still holds the answer (the fill in flight,
             the GET not done); reads_interrupted 1, read_errors 0, the mount lists; released,
             the held fill lands (one GET in all, fill_errors 0), the member's bytes are exact
             without another GET, and every member of the shard is exact (before the read's
             stop: the killed reader stayed in state D until the release).
  stop       'shardfs umount' while 6 planned fills are held at the server: the daemon exits
             with status 0 (no hang: the fills in flight end with ECANCELED and the cache tier
             waits for them; no leak under ASan).

Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import contextlib  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import planread  # noqa: E402
from shardfs_test import web  # noqa: E402
from shardfs_test.planread import hold, read, ref, tar_gets  # noqa: E402

SHARDS = 4


def make_source(env, ck):
    """4 shards of 60 members of 60-140 KB with sidecar indexes: src and [(shard, path, off,
    size)] of the members (planread.sidecar_source)."""
    src, members, _ = planread.sidecar_source(env, ck, 25, 60, SHARDS)
    return src, members


def mount_opts(env):
    # GETs are counted exactly: no compare request for nginx's "mtime-size" ETag (docs/faults.md
    # "Validators"; remote-cache-weaketag tests it)
    return ['--weak-etag', 'trust', '--connections', '2', '--max-connections', '6', '--chunk-size', '512K',
            '--cache-size', '64M', '--warm', 'off', '--prefetch-shards', '0',
            '--plan-lookahead', '8M', '--plan-gap', '0', '--log-file', env.path('daemon.log')]


def listed(m):
    for s in range(SHARDS):
        os.listdir(os.path.join(m.mnt, 'shard-%06d' % s))


def plan(env, ck, m, name, members):
    planread.publish(ck, m.mnt, name, env.path('plan-' + name), [x[1] for x in members])


def group_inflight(env, ck):
    src, members = make_source(env, ck)
    ng = web.Nginx(env.path('nginx'), src).start()
    px = web.SlowProxy(ng.port)
    try:
        with ml.Mount(env, px.url('json/'), cache_dir=env.path('cache'),
                      extra=mount_opts(env)) as m:
            listed(m)
            # a first plan, not held, so that prefetch fills have completed: the listing's
            # index reads are readers' misses, and while fewer than a round of prefetch fills
            # (--connections + 1) completed since, readers read and planned ranges take every
            # slot but two (fetch/fetch_rules.c rules_pf_max: 5 of 6); with no reader, every
            # connection of the class but one. Its fills ended, not merely handed over
            # (planread.fetched): a wait on fills_inflight 0 alone passed before they started
            # on a busy machine, and the held ones then stopped at 5.
            warm = members[:8]
            fills = m.stats()['fills']
            plan(env, ck, m, 'w', warm)
            st0 = planread.fetched(m, len(warm), what='first plan fetched')
            ck.ok(st0['fills'] - fills >= 3, 'the first plan: a round of prefetch fills '
                  'completed (%d >= 3)' % (st0['fills'] - fills))
            hold(px)
            # 16 paths: within the lookahead the link sizing gives this plan
            # (4 x --max-connections x its mean path; the first plan replaced)
            planned = members[8:24]
            plan(env, ck, m, 'w', planned)

            def six():
                st = m.stats()
                held = [r for r in tar_gets(px) if r['held']]
                return (len(held) == 6 and st['fills_inflight'] == 6 and st) or None
            st = ml.poll(six, what='6 planned GETs held') or m.stats()
            gets = tar_gets(px)
            ck.eq('small planned ranges: GETs at the server (--max-connections 6)',
                  (len(gets), sum(r['held'] for r in gets)), (6, 6))
            ck.eq('small planned ranges: fills in flight', st['fills_inflight'], 6)
            ck.ok(all(r['range'] and r['range'][1] - r['range'][0] < (1 << 20) for r in gets),
                  'each held GET is a range of less than 1 MiB: %s'
                  % [r['range'] for r in gets])
            px.release()
            planread.fetched(m, len(planned), base=st0['plan_fetch_paths'])
            bad = [x[1] for x in planned if read(os.path.join(m.mnt, x[1])) != ref(src, x)]
            ck.eq('planned members: exact bytes', bad, [])
            st1 = m.stats()
            ck.eq('planned members: every read a hit (misses)', st1['cache_misses'],
                  st0['cache_misses'])

            # large fills: a whole shard read in order (demand and readahead chunks)
            hold(px)
            target = 'shard-000003.tar'
            out = {}

            def cat():
                out['data'] = read(os.path.join(m.mnt, target))
            t = threading.Thread(target=cat)
            t.start()

            def two():
                st = m.stats()
                held = [r for r in tar_gets(px) if r['held']]
                return (len(held) == 2 and st['fills_inflight'] == 3 and st) or None
            st = ml.poll(two, what='2 large GETs held') or m.stats()
            gets = tar_gets(px)
            ck.eq('large fills: GETs at the server (--connections 2)',
                  (len(gets), sum(r['held'] for r in gets)), (2, 2))
            ck.eq('large fills: fills in flight (one waits for a connection)',
                  st['fills_inflight'], 3)
            px.release()
            t.join(120)
            ck.ok(not t.is_alive(), 'the cat of a shard ended')
            ck.ok(out.get('data') == read(os.path.join(src, target)), 'the shard: exact bytes')
            st = m.stats()
            ck.eq('fill_errors', st['fill_errors'], 0)
            ck.eq('read_errors', st['read_errors'], 0)
    finally:
        px.close()
        ng.stop()


@contextlib.contextmanager
def held_read(env, ck, reader, **kw):
    """The shards (make_source) through a SlowProxy that holds their GETs, mounted and listed,
    and a reader (subprocess.Popen of reader + [path], with kw) of the first member, its fill
    held at the server (one fill in flight). Yields (src, members, px, m, st0, x, path, rd):
    st0 the mount's stats before the hold, x the member, path its path in the mount. At the
    end the proxy is released, a reader still there killed, and the servers stopped."""
    src, members = make_source(env, ck)
    ng = web.Nginx(env.path('nginx'), src).start()
    px = web.SlowProxy(ng.port)
    rd = None
    try:
        with ml.Mount(env, px.url('json/'), cache_dir=env.path('cache'),
                      extra=mount_opts(env)) as m:
            listed(m)
            st0 = m.stats()
            hold(px)
            x = members[0]
            path = os.path.join(m.mnt, x[1])
            rd = subprocess.Popen(reader + [path], **kw)
            ml.poll(lambda: any(r['held'] for r in tar_gets(px)), what='the fill held')
            ml.poll(lambda: m.stats()['fills_inflight'] == 1, what='one fill in flight')
            yield src, members, px, m, st0, x, path, rd
    finally:
        px.release()
        if rd is not None and rd.poll() is None:
            rd.kill()
            rd.wait(60)
        px.close()
        ng.stop()


def group_interrupt(env, ck):
    with held_read(env, ck, ['cat'], stdout=subprocess.DEVNULL) as h:
        src, members, px, m, st0, x, path, rd = h
        ck.ok(m.stats()['reads_inflight'] >= 1, 'the reader\'s read in flight')
        rd.send_signal(signal.SIGKILL)  # the FUSE read is interrupted
        ck.eq('the reader was killed', rd.wait(60), -signal.SIGKILL)
        px.release()
        # the interrupted read is answered (to nobody) and counted out
        st = ml.poll(lambda: (lambda st: st['fills_inflight'] == 0 and st['reads_inflight'] == 0
                              and st)(m.stats()), what='the fill and the read ended')
        gets = tar_gets(px)
        ck.eq('one GET', len(gets), 1)
        ck.eq('fill_errors', st['fill_errors'] - st0['fill_errors'], 0)
        fetched = st['bytes_fetched'] - st0['bytes_fetched']
        ck.ok(fetched >= x[3], 'the fill fetched the member (%d >= %d)' % (fetched, x[3]))
        ck.eq('the member after the interrupted read: exact bytes', read(path), ref(src, x))
        st2 = m.stats()
        ck.eq('... a hit: nothing fetched again', st2['bytes_fetched'], st['bytes_fetched'])
        ck.eq('... one GET in all', len(tar_gets(px)), 1)
        ck.eq('read_errors', st2['read_errors'], 0)


DIRECT_READER = r'''
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 1 << 20)  # page-aligned, as O_DIRECT wants
os.preadv(fd, [buf], 0)
'''


def group_killed(env, ck):
    with held_read(env, ck, [sys.executable, '-c', DIRECT_READER]) as h:
        src, members, px, m, st0, x, path, rd = h
        # the reader waits in the kernel for the daemon's answer to its READ
        ml.poll(lambda: ml.wchan(rd.pid) == 'request_wait_answer',
                what='the reader in request_wait_answer (now %r)' % ml.wchan(rd.pid))
        ck.ok(m.stats()['reads_inflight'] >= 1, 'the reader\'s read in flight')
        rd.send_signal(signal.SIGKILL)
        try:
            rc = rd.wait(30)  # a guard against a hang only: expected at once
        except subprocess.TimeoutExpired:
            rc = 'still there after 30 s, in %s' % ml.wchan(rd.pid)
        ck.eq('the killed reader is gone while the server holds the answer', rc,
              -signal.SIGKILL)
        gets = tar_gets(px)
        ck.eq('... the GET still held, not done', [(r['held'], r['done']) for r in gets],
              [(True, False)])
        st = ml.poll(lambda: (lambda st: st['reads_inflight'] == 0 and st)(m.stats()),
                     what='the interrupted read answered')
        ck.eq('... the fill still in flight', st['fills_inflight'], 1)
        ck.eq('reads_interrupted', st['reads_interrupted'] - st0['reads_interrupted'], 1)
        ck.eq('read_errors', st['read_errors'] - st0['read_errors'], 0)
        ck.ok(len(os.listdir(os.path.dirname(path))) > 0, 'the mount lists meanwhile')
        px.release()
        st = ml.poll(lambda: (lambda st: st['fills_inflight'] == 0 and st)(m.stats()),
                     what='the held fill ended')
        ck.eq('fill_errors', st['fill_errors'] - st0['fill_errors'], 0)
        ck.eq('the member after the interrupted read: exact bytes', read(path), ref(src, x))
        ck.eq('... one GET in all (the held fill landed)', len(tar_gets(px)), 1)
        same = [y for y in members if y[0] == x[0]]
        bad = [y[1] for y in same if read(os.path.join(m.mnt, y[1])) != ref(src, y)]
        ck.eq('every member of the shard exact (%d)' % len(same), bad, [])
        ck.eq('read_errors at the end', m.stats()['read_errors'], 0)


def group_stop(env, ck):
    src, members = make_source(env, ck)
    ng = web.Nginx(env.path('nginx'), src).start()
    px = web.SlowProxy(ng.port)
    try:
        m = ml.Mount(env, px.url('json/'), cache_dir=env.path('cache'), extra=mount_opts(env))
        m.mount()
        listed(m)
        hold(px)
        plan(env, ck, m, 'p', members[:40])
        ml.poll(lambda: m.stats()['fills_inflight'] >= 5, what='planned fills held')
        r = m.umount()
        ck.eq('shardfs umount rc', r.returncode if r else None, 0)
        ml.poll(lambda: set(m.ends()) == set(m.pids), what='the daemon ended')
        ck.eq('the daemon exited 0', sorted(m.ends().values()), ['exited with status 0'])
        ck.eq('no daemon left', m.alive_after_umount, [])
    finally:
        px.release()
        px.close()
        ng.stop()


GROUPS = {'inflight': group_inflight, 'interrupt': group_interrupt, 'killed': group_killed,
          'stop': group_stop}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__, 'fills-')
