#!/usr/bin/python3
"""shardfs mount tests: a hostile newcomer's pass over the package as a user meets it, each
finding replayed as a seeded test (local sources: no store).

usage: test_hostile4.py SHARDFS GROUP
GROUP:
  plan-abs  'shardfs plan' of a seeded plan file whose lines are each, at random, a member's
            mount-relative path, the same path absolute under the mount point (as a reader
            opens it; with a doubled slash after the mount point too), a missing member under
            the mount point, a path outside the mount, or the mount point itself: the plan
            holds exactly the lines that name a member (.shardfs/plans: paths, missing, bytes,
            and the fnv of their mount-relative forms, as shardfs.plan_fnv gives it); reading
            them in order brings the plan to its end. Before the mend every absolute line was
            taken as mount-relative ('tmp/.../mnt/s0/...'): 'shardfs plan' said the paths were
            'not in the mount (skipped)', though 'shardfs prefetch' and the Python module take
            absolute paths into the mount.

Seeded (SHARDFS_TEST_SEED). Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import os  # noqa: E402
import subprocess  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402


def fnv(lines):
    """FNV-1a 64 over each line (bytes) followed by a newline: a plan's fnv."""
    h = 0xcbf29ce484222325
    for line in lines:
        for c in line + b'\n':
            h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return h


def plans(mnt):
    """{name: {paths, missing, read, position, bytes, fnv}} from MNT/.shardfs/plans."""
    with open(os.path.join(mnt, '.shardfs', 'plans'), 'rb') as f:
        text = f.read().decode()
    out = {}
    for line in text.split('\n')[1:]:
        f = line.split('\t')
        if len(f) == 8:
            out[f[0]] = dict(zip(('paths', 'missing', 'read', 'position', 'bytes'),
                                 (int(x) for x in f[2:7])), fnv=int(f[7], 16))
    return out


def group_plan_abs(env, ck):
    rng = env.rng
    src = env.path('src')
    os.makedirs(src)
    members = {}  # mount-relative path: bytes
    for s in range(4):
        shard = []
        for k in range(rng.randint(12, 18)):
            data = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 3000)))
            shard.append(('k%02d.bin' % k, data))
            members['s%d/k%02d.bin' % (s, k)] = data
        ml.write_file(os.path.join(src, 's%d.tar' % s), ml.tar_bytes(shard))
    with ml.Mount(env, src, cache_dir=env.path('cache')) as m:
        mp = os.path.realpath(m.mnt)
        unread = sorted(members)
        rng.shuffle(unread)
        for rnd in range(4):
            # found: the mount-relative form of each line that names a member; each member is
            # planned once and read once (a read the page cache answers never reaches the mount)
            lines, found = [], []
            for _ in range(rng.randint(10, 20)):
                form = rng.choice(['rel', 'abs', 'abs', 'dslash', 'missing', 'outside', 'mnt']
                                  if unread else ['missing', 'outside', 'mnt'])
                if form in ('rel', 'abs', 'dslash'):
                    rel = unread.pop()
                else:
                    rel = rng.choice(sorted(members))
                if form == 'rel':
                    lines.append(rel.encode())
                    found.append(rel.encode())
                elif form == 'abs':
                    lines.append((mp + '/' + rel).encode())
                    found.append(rel.encode())
                elif form == 'dslash':
                    lines.append((mp + '//' + rel).encode())
                    found.append(('/' + rel).encode())
                elif form == 'missing':
                    lines.append((mp + '/' + rel + '.gone').encode())
                elif form == 'outside':
                    lines.append((src + '/' + rel).encode())
                else:
                    lines.append(mp.encode())
            pf = env.path('plan-%d' % rnd)
            with open(pf, 'wb') as f:
                f.write(b''.join(x + b'\n' for x in lines))
            r = subprocess.run([env.shardfs, 'plan', m.mnt, pf, '--name', 'r%d' % rnd],
                               capture_output=True, timeout=60)
            out = r.stdout.decode(errors='replace') + r.stderr.decode(errors='replace')
            log('round %d: %d lines, %d name a member: %s' % (rnd, len(lines), len(found),
                                                               out.strip()))
            ck.eq('round %d: shardfs plan exit' % rnd, r.returncode, 0)
            got = plans(m.mnt).get('r%d' % rnd)
            ck.ok(got is not None, 'round %d: no plan r%d in .shardfs/plans' % (rnd, rnd))
            if got is None:
                continue
            want_bytes = sum(len(members[x.decode().lstrip('/')]) for x in found)
            ck.eq('round %d: paths, missing, bytes' % rnd,
                  (got['paths'], got['missing'], got['bytes']),
                  (len(found), len(lines) - len(found), want_bytes))
            ck.eq('round %d: fnv of the mount-relative paths' % rnd, got['fnv'], fnv(found))
            for x in found:
                with open(os.path.join(m.mnt, x.decode().lstrip('/')), 'rb') as f:
                    data = f.read()
                if data != members[x.decode().lstrip('/')]:
                    ck.fail('round %d: %s: wrong bytes' % (rnd, x))
            got = plans(m.mnt)['r%d' % rnd]
            ck.eq('round %d: read, position after reading them in order' % rnd,
                  (got['read'], got['position']), (len(found), len(found)))
            subprocess.run([env.shardfs, 'plan', m.mnt, '--clear', '--name', 'r%d' % rnd],
                           capture_output=True, timeout=60)


GROUPS = {'plan-abs': (group_plan_abs, 120)}


if __name__ == '__main__':
    if len(sys.argv) != 3 or sys.argv[2] not in GROUPS:
        print(__doc__)
        sys.exit(2)
    fn, deadline = GROUPS[sys.argv[2]]
    sys.exit(ml.main_wrapper(fn, sys.argv[1], sys.argv[2], deadline=deadline))
