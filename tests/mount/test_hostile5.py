#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass (round 5), each finding replayed as a seeded
test (local sources: no store).

usage: test_hostile5.py SHARDFS GROUP
GROUP:
  wording   seeded local sources (the first with one shard and nothing else, so every count
            is 1 once): shards with 0 to 3 members left out, 0 to 2 plain files, a name
            conflict in the mount's root and one in a nested directory. What the mount says
            takes the noun its count needs: the log's "mounted ... : N object(s), N shard(s),
            N director(y|ies)" (the counts .shardfs/stats gives), "shard S: N member(s) left
            out (", "prefetch of the whole mount: N object(s)", 'shardfs refresh's "N
            object(s), N shard(s)"; a name conflict in the root says "in the mount's root",
            one below it "in directory 'a/b'" (its path); 'shardfs prefetch' of a local
            source says its bytes are read in place, never "cached already" (nothing is
            fetched or cached). Before the mend: "1 members", "1 shards", "in directory ''",
            "in directory 'b'", "prefetch of '': 1 objects" and "all of it cached already".
  empty     'shardfs mount' of an empty directory and of one with plain files only (seeded
            1 to 3): exit 0 (the mount may be right), and its stderr says, once, that the
            source is empty / holds no shards (naming the source, the count of other files
            and what a shard is); a source with a shard says neither. Before the mend such a
            mount was silent: the log's "has no objects" went to a file the user never saw.
  indexwait a shard's index being built over nginx through a proxy that holds its GETs (no
            sidecars): 'shardfs plan' of one of its members builds it and waits; a request of
            the shard's directory, the seeded one of 'ls' of it, 'stat' or 'cat' of a member,
            waits for that build in the daemon; SIGKILL of the second: it is gone while the GET is still held (the
            daemon answers its interrupted request within CACHETIER_STOP_TICK_MS),
            index_waits_interrupted is 1; then the plan is taken, the listing is exact and
            index_errors and op_errors are 0.
  fglock    'shardfs mount -f' (foreground): once its mount answers, the mount point's
            directory underneath is no longer locked (the test opened it before the mount and
            takes flock LOCK_EX|LOCK_NB on it), so a 'shardfs mount' after a lazy unmount of it
            is not refused as "under way" while the daemon ends; 'shardfs umount' then ends
            the daemon with 0. Before the mend the daemon held the lock for its whole life. Before the mend the killed waiter hung in the kernel
            until the build ended (it waited on the shard's lock, deaf to its stop).

Seeded (SHARDFS_TEST_SEED). Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import os  # noqa: E402
import re  # noqa: E402
import fcntl  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402
from shardfs_test.planread import held_proxy_mount, hold, tar_gets  # noqa: E402

SHARDS_ARE = '(shards are .tar, .tar.gz, .tgz and .tar.zst files)'


def pl(n, one, many):
    return '%d %s' % (n, one if n == 1 else many)


def make_source(env, rng, k, tiny):
    """A local source: its path and {shard name: members left out}, conflicts made."""
    src = env.path('src%d' % k)
    os.makedirs(src)
    left = {}
    for s in range(1 if tiny else rng.randint(1, 3)):
        members = [('k%02d.bin' % i, b'm%d-%d\n' % (s, i)) for i in range(rng.randint(1, 4))]
        n_out = 0 if tiny else rng.randint(0, 3)
        members += [('../out%d.bin' % i, b'x') for i in range(n_out)]
        rng.shuffle(members)
        ml.write_file(os.path.join(src, 's%d.tar' % s), ml.tar_bytes(members))
        left['s%d.tar' % s] = n_out
    if not tiny:
        for i in range(rng.randint(0, 2)):
            ml.write_file(os.path.join(src, 'plain%d.txt' % i), b'plain\n')
        # a file c and a shard c.tar meet in the root; a directory a/b/n and a shard
        # a/b/n.tar meet in a/b
        ml.write_file(os.path.join(src, 'c'), b'c\n')
        ml.write_file(os.path.join(src, 'c.tar'), ml.tar_bytes([('in-c.txt', b'c')]))
        left['c.tar'] = 0
        os.makedirs(os.path.join(src, 'a', 'b', 'n'))
        ml.write_file(os.path.join(src, 'a', 'b', 'n', 'f.txt'), b'f\n')
        ml.write_file(os.path.join(src, 'a', 'b', 'n.tar'), ml.tar_bytes([('in-n.txt', b'n')]))
        left['a/b/n.tar'] = 0
    return src, left


def group_wording(env, ck):
    rng = env.rng
    for k in range(3):
        tiny = k == 0
        src, left = make_source(env, rng, k, tiny)
        logf = env.path('daemon%d.log' % k)
        with ml.Mount(env, src, cache_dir=env.path('cache'), extra=['--log-file', logf]) as m:
            mp = m.mnt
            for s in sorted(left):
                if s.startswith('s'):
                    os.listdir(os.path.join(mp, s[:-4]))
            st = m.stats()
            r = env.run([env.shardfs, 'prefetch', mp])
            out = r.stdout.decode(errors='replace')
            log('prefetch: rc %r %r' % (r.returncode, out))
            ck.eq('%d: prefetch exit' % k, r.returncode, 0)
            ck.ok('cached already' not in out and 'already cached' not in out,
                  '%d: prefetch of a local source says its bytes are cached: %r' % (k, out))
            ck.ok(out.endswith('read in place (a local source)\n') and
                  'all of it read in place: the source is a local directory, nothing to fetch'
                  in out, '%d: prefetch does not say it reads in place: %r' % (k, out))
            r = env.run([env.shardfs, 'refresh', mp])
            out = r.stdout.decode(errors='replace').strip()
            ck.ok(out.endswith('; %s, %s' % (pl(st['objects'], 'object', 'objects'),
                                             pl(st['shards'], 'shard', 'shards'))),
                  '%d: refresh: %r (stats: %d objects, %d shards)' % (
                      k, out, st['objects'], st['shards']))
        with open(logf, errors='replace') as f:
            lines = f.read().splitlines()
        want = 'mounted %s at %s: %s, %s, %s' % (
            src, mp, pl(st['objects'], 'object', 'objects'), pl(st['shards'], 'shard', 'shards'),
            pl(st['source_dirs'], 'directory', 'directories'))
        ck.eq('%d: mounted lines' % k, [ln.split(': ', 1)[1] for ln in lines
                                        if ' info: mounted ' in ln], [want])
        for s, n_out in sorted(left.items()):
            said = [ln for ln in lines if 'shard %s: ' % s in ln and ' left out (' in ln]
            if not n_out:
                ck.eq('%d: %s: count lines' % (k, s), said, [])
            else:
                ck.ok(len(said) == 1 and ('shard %s: %s left out (' % (
                    s, pl(n_out, 'member', 'members'))) in said[0],
                    '%d: %s: %d left out said as %r' % (k, s, n_out, said))
        pf = [ln for ln in lines if 'prefetch of ' in ln]
        ck.eq('%d: prefetch lines' % k, len(pf), 1)
        m_ = re.search(r"prefetch of the whole mount: (\d+) (objects?)$", pf[0] if pf else '')
        ck.ok(m_ and m_.group(2) == ('object' if m_.group(1) == '1' else 'objects'),
              '%d: prefetch line %r' % (k, pf))
        if tiny:
            ck.ok(m_ and m_.group(1) == '1', '%d: one object: %r' % (k, pf))
            ck.eq('%d: one shard: mounted' % k, (st['objects'], st['shards']), (1, 1))
        # each listing says its conflicts: the mount's and the refresh's say the same
        conf = sorted(set(ln.split(' warning: ', 1)[1] for ln in lines
                          if 'name conflict: ' in ln))
        if tiny:
            ck.eq('%d: conflicts' % k, conf, [])
        else:
            ck.ok(len(conf) == 2 and
                  any(ln.startswith("name conflict: 'c' in the mount's root is hidden: ")
                      for ln in conf) and
                  any(ln.startswith("name conflict: 'n' in directory 'a/b' is hidden: ")
                      for ln in conf),
                  '%d: conflicts said as %r' % (k, conf))
        ck.ok(not any("''" in ln for ln in lines), "%d: '' in the log: %r" % (
            k, [ln for ln in lines if "''" in ln]))


def group_empty(env, ck):
    rng = env.rng
    kinds = ['empty', 'plain', 'shard']
    rng.shuffle(kinds)
    for kind in kinds:
        src = env.path('src-' + kind)
        os.makedirs(src)
        nplain = rng.randint(1, 3) if kind == 'plain' else 0
        for i in range(nplain):
            ml.write_file(os.path.join(src, 'f%d.txt' % i), b'f\n')
        if kind == 'shard':
            ml.write_file(os.path.join(src, 's.tar'), ml.tar_bytes([('a.txt', b'a')]))
        with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
            got = [ln for ln in m.stderr.splitlines() if ln.strip()]
            names = sorted(os.listdir(m.mnt))
        log('%s: stderr %r, listing %r' % (kind, got, names))
        if kind == 'empty':
            want = ['shardfs: warning: source %s is empty: the mount shows nothing %s'
                    % (src, SHARDS_ARE)]
        elif kind == 'plain':
            want = ['shardfs: warning: source %s holds no shards: the mount shows its %s only %s'
                    % (src, pl(nplain, 'other file', 'other files'), SHARDS_ARE)]
        else:
            want = []
        ck.eq('%s: what shardfs mount says' % kind, got, want)
        ck.eq('%s: listing' % kind, names, sorted(['f%d.txt' % i for i in range(nplain)] +
                                                  (['s', 's.tar'] if kind == 'shard' else [])))


def group_indexwait(env, ck):
    rng = env.rng
    procs = []
    with held_proxy_mount(env, ck, rng, procs) as (m, px, names):
        st0 = m.stats()
        hold(px)
        d = os.path.join(m.mnt, 'shard-000000')
        # the builder: a plan naming a member of the shard resolves it on the control
        # file, not in the shard's directory (whose LOOKUPs and READDIRs the kernel
        # serialises: a second 'ls' of it waits in the kernel, never in the daemon)
        pf = env.path('plan')
        ml.write_file(pf, b'shard-000000/k00.bin\n')
        a = subprocess.Popen([env.shardfs, 'plan', m.mnt, pf, '--name', 't'],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(a)
        ml.poll(lambda: any(r['held'] for r in tar_gets(px)), what='the build\'s GET held')
        how = rng.choice(['ls', 'stat', 'cat'])
        cmd = {'ls': ['ls', d], 'stat': ['stat', os.path.join(d, 'k00.bin')],
               'cat': ['cat', os.path.join(d, 'k00.bin')]}[how]
        log('the waiter: %s' % ' '.join(cmd))
        b = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(b)
        ml.poll(lambda: ml.wchan(b.pid) == 'request_wait_answer',
                what='the waiter in request_wait_answer (now %r)' % ml.wchan(b.pid))
        b.send_signal(signal.SIGKILL)
        try:
            rc = b.wait(30)  # a guard against a hang only: expected within 100 ms
        except subprocess.TimeoutExpired:
            rc = 'still there after 30 s, in %s' % ml.wchan(b.pid)
        ck.eq('%s: the killed waiter is gone while the build\'s GET is held' % how, rc,
              -signal.SIGKILL)
        ck.ok(any(r['held'] for r in tar_gets(px)), 'the build\'s GET still held')
        ck.eq('index_waits_interrupted', m.stats().get('index_waits_interrupted', 0) -
              st0.get('index_waits_interrupted', 0), 1)
        px.release()
        out, err = a.communicate(timeout=120)
        log('the builder: %r %r' % (out, err))
        ck.eq('the builder\'s exit (shardfs plan)', a.returncode, 0)
        st = m.stats()
        ck.eq('index_errors, op_errors', (st['index_errors'], st['op_errors']), (0, 0))
        ck.eq('after: a listing exact', sorted(os.listdir(d)), names['shard-000000'])



def group_fglock(env, ck):
    src = env.path('src')
    os.makedirs(src)
    ml.write_file(os.path.join(src, 's.tar'), ml.tar_bytes([('x.txt', b'x\n')]))
    mp = env.path('mnt-fg')
    os.makedirs(mp)
    under = os.open(mp, os.O_RDONLY | os.O_DIRECTORY)  # the directory the mount covers
    cmd = [env.shardfs, 'mount', '-f', '--cache-dir', env.path('cache'), src, mp]
    fg_err = open(env.path('fg-stderr.log'), 'wb')
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fg_err, stderr=fg_err,
                         env=env.env)
    fg_err.close()
    fg = ml.Mount(env, src, mountpoint=mp)
    fg.pids.add(p.pid)
    env.mounts.append(fg)
    try:
        ml.poll(lambda: ml.is_mounted(mp) or p.poll() is not None, ml.MOUNT_TIMEOUT)
        ck.ok(ml.is_mounted(mp), 'mount -f: mounted (rc %r)' % p.poll())
        with open(os.path.join(mp, 's', 'x.txt'), 'rb') as f:
            ck.eq('mount -f: s/x.txt', f.read(), b'x\n')
        try:
            fcntl.flock(under, fcntl.LOCK_EX | fcntl.LOCK_NB)
            got = 'free'
            fcntl.flock(under, fcntl.LOCK_UN)
        except OSError as e:
            got = 'held (%s)' % e.strerror
        ck.eq('mount -f, mounted: the mount point\'s lock', got, 'free')
        r = env.run([env.shardfs, 'umount', mp], timeout=ml.UMOUNT_TIMEOUT)
        ck.eq('umount: exit', r.returncode, 0)
        ck.eq('mount -f: exit after umount', p.wait(timeout=ml.UMOUNT_TIMEOUT), 0)
    finally:
        os.close(under)
        if p.poll() is None:
            fg.umount(quiet=True)
            if p.poll() is None:
                p.kill()
            p.wait()


GROUPS = {'wording': (group_wording, 180), 'empty': (group_empty, 120),
          'indexwait': (group_indexwait, 180), 'fglock': (group_fglock, 120)}


if __name__ == '__main__':
    ml.run_groups(GROUPS, __doc__)
