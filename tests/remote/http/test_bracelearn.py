#!/usr/bin/env python3
"""A brace pattern's names are asked of the store once: a listing and lookups that run while the
warm asks the same names' sizes wait for the warm's answers instead of sending HEADs of their
own.

    test_bracelearn.py SHARDFS

A scripted server (shardfs_test.rawhttp) on 127.0.0.1 has shard-000..007.tar (seeded members,
SHARDFS_TEST_SEED) but shard-005 (404) and shard-006 (HEAD refused: 403); it counts HEADs per
name and holds every HEAD until the test releases it. Four mounts of .../shard-{000..007}.tar
with the warm on (--warm auto), one need each while the warm's HEADs of all 8 names are held:
os.listdir of the mount point; stat of shard-003.tar (a lookup); of shard-005.tar (missing);
of shard-006.tar (refused). (One need a mount: without parallel directory operations the
kernel holds a lookup in a directory behind a listing of it.) The test waits until the daemon
says the need waits (brace_waits: 8 names for the listing, 1 for a lookup) or until a name was
asked twice (the code before 2026-11-30: the listing and the lookup sent HEADs of their own:
11 checks fail), then releases the server. Then:
  - at the release, no name was asked twice (before: 2 HEADs for the names needed; HEADs sent
    down one connection behind a held one are read by the server only after the release);
  - the listing shows shard-000..004 and 007 (.tar and member directory), not shard-005;
  - stat of shard-003.tar gives its size; shard-005.tar ENOENT; shard-006.tar EACCES (the
    warm's HEAD's error, given to its waiter);
  - once the server read every name's HEAD, the 7 names the warm learned or found missing were
    asked exactly once each (none asked again; before: 2 for the names needed).
Exact counts; the overlap is made certain by holding the answers, no timing.
"""
import errno
import io
import os
import sys
import tarfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lib'))

from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402
from shardfs_test.rawhttp import Answer, Scripted  # noqa: E402

NAMES = 8
MISSING = 'shard-005.tar'
REFUSED = 'shard-006.tar'
LOOKUPS = ['shard-003.tar', MISSING, REFUSED]  # one mount each, after the listing's


def make_shards(rng):
    shards = {}
    for s in range(NAMES):
        name = 'shard-%03d.tar' % s
        if name == MISSING:
            continue
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode='w', format=tarfile.GNU_FORMAT) as t:
            for k in range(2):
                data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(100, 2000)))
                ti = tarfile.TarInfo('k%d_%d.bin' % (s, k))
                ti.size = len(data)
                ti.mtime = 1700000000
                t.addfile(ti, io.BytesIO(data))
        shards[name] = buf.getvalue()
    return shards


class Store:
    """The scripted server's answers: HEADs counted per name and held until release()."""

    def __init__(self, shards):
        self.shards = shards
        self.lock = threading.Lock()
        self.heads = {}
        self.gate = threading.Event()
        self.srv = Scripted(b'', self.answer, with_path=True)

    def answer(self, n, method, rng, data, path):
        name = path.rsplit('/', 1)[-1]
        if method == 'HEAD':
            with self.lock:
                self.heads[name] = self.heads.get(name, 0) + 1
            self.gate.wait(ml.POLL_TIMEOUT * 2)
            if name == REFUSED:
                return Answer(Answer.head(b'403 Forbidden', [b'Content-Length: 0']))
        if name not in self.shards:
            return Answer(Answer.head(b'404 Not Found', [b'Content-Length: 0']))
        return Answer.ranged(method, rng, self.shards[name])

    def counts(self):
        with self.lock:
            return dict(self.heads)


def one(env, ck, shards, case):
    """One mount, the warm's HEADs held: case 'listing' lists the mount point meanwhile, any
    other case is the name looked up meanwhile (a lookup in the directory waits in the kernel
    behind a listing of it: fuse_lock_inode, so each gets its own mount)."""
    st = Store(shards)
    res = []
    names = ['shard-%03d.tar' % s for s in range(NAMES)]

    def need(mnt):
        try:
            if case == 'listing':
                res.append(sorted(os.listdir(mnt)))
            else:
                res.append(os.stat(os.path.join(mnt, case)).st_size)
        except OSError as e:
            res.append(-e.errno)

    try:
        url = st.srv.url('d/shard-{000..%03d}.tar' % (NAMES - 1))
        with ml.Mount(env, url, cache_dir=env.path('cache-%s' % case),
                      extra=['--warm', 'auto', '--stall-timeout', '600',
                             '--log-file', env.path('daemon-%s.log' % case)]) as m:
            m.stats()  # .shardfs looked up now: reading it later waits for no listing
            ml.poll(lambda: st.counts(), what='the warm\'s first HEAD')
            t = threading.Thread(target=need, args=(m.mnt,))
            t.start()
            expect = NAMES if case == 'listing' else 1

            def waiting():
                c = st.counts()
                return max(c.values()) > 1 or m.stats().get('brace_waits', 0) >= expect

            ml.poll(waiting, what='%s waiting (or asking again)' % case)
            at_release = st.counts()
            waits = m.stats().get('brace_waits')
            st.gate.set()
            t.join(ml.POLL_TIMEOUT)
            got = res[0] if res else None
            log('%s: HEADs at the release %r; brace_waits %r; got %r' % (
                case, at_release, waits, got))
            # the daemon may send several HEADs down one connection, and the server reads
            # the next only once it answered the one before: at the release, not every
            # name's HEAD has been read yet, but none was read twice
            ck.eq('%s: most HEADs of a name at the release' % case, max(at_release.values()), 1)
            ck.eq('%s: brace_waits' % case, waits, expect)
            if case == 'listing':
                have = sorted(n for n in names if n not in (MISSING, REFUSED))
                want = sorted(have + [n[:-len('.tar')] for n in have])
                ck.ok(isinstance(got, list) and
                      [e for e in got if e not in (REFUSED, REFUSED[:-len('.tar')])] == want,
                      'listing: %r' % (got,))
                ck.eq('listing: %s after it' % MISSING,
                      os.path.exists(os.path.join(m.mnt, MISSING)), False)
            elif case == MISSING:
                ck.eq('stat %s' % case, got, -errno.ENOENT)
            elif case == REFUSED:
                ck.eq('stat %s: the HEAD\'s error' % case, got, -errno.EACCES)
            else:
                ck.eq('stat %s: size' % case, got, len(shards[case]))
            after = ml.poll(lambda: (lambda c: len(c) == NAMES and c)(st.counts()),
                            what='every name\'s HEAD read')
            with st.srv.lock:
                conns = len(set(cn for meth, _, cn in st.srv.log if meth == 'HEAD'))
            log('%s: the HEADs came over %d connections' % (case, conns))
            ck.eq('%s: HEADs per learned or missing name at the end' % case,
                  [after.get(n, 0) for n in names if n != REFUSED], [1] * (NAMES - 1))
    finally:
        st.gate.set()
        st.srv.close()


def run(env, ck):
    shards = make_shards(env.rng)
    for case in ['listing'] + LOOKUPS:
        one(env, ck, shards, case)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    ml.main_wrapper(run, sys.argv[1], 'http-bracelearn', deadline=170)


if __name__ == '__main__':
    sys.exit(main())
