"""What the hostile newcomer's passes (tests/mount/test_hostile1*.py) share: their source of
small shards, a client command run and checked exactly, a mount that must succeed, and client
commands spawned in the background and followed through their output files."""
import os
import subprocess

from . import mount as ml

log = ml.log


def member(i):
    """The one member of shard s<i>.tar of make_source: m<i>.bin's bytes."""
    return bytes([65 + i]) * (70000 + i)


def make_source(env, n=2):
    """A local source directory of n shards s0.tar ... (shard i holds m<i>.bin: member(i)),
    readable by every user (the tests run commands as nobody too)."""
    src = env.path('src')
    os.makedirs(src)
    for i in range(n):
        with open(os.path.join(src, 's%d.tar' % i), 'wb') as f:
            f.write(ml.tar_bytes([('m%d.bin' % i, member(i))]))
    os.chmod(env.tmp, 0o755)
    os.chmod(src, 0o755)
    return src


def run_exact(env, ck, label, cmd, rc, out, err, timeout=60):
    """cmd exits rc, prints exactly out on stdout (None: not checked) and err on stderr."""
    r = env.run(cmd, timeout=timeout)
    o = r.stdout.decode(errors='replace')
    e = r.stderr.decode(errors='replace')
    log('%s: rc=%r\n  stdout %r\n  stderr %r' % (label, r.returncode, o, e))
    ck.eq('%s: exit' % label, r.returncode, rc)
    if out is not None:
        ck.eq('%s: stdout' % label, o, out)
    ck.eq('%s: stderr' % label, e, err)


def mount_or_fail(ck, label, m):
    """Mount m (an ml.Mount); a mount that fails is a failed check. Whether it is mounted."""
    try:
        m.mount()
    except ml.MountError as e:
        ck.fail('%s: mount failed: %s' % (label, e))
        return False
    return True


def spawn(env, tag, cmd):
    """cmd in the background, its output to files named after tag: (Popen, out, err)."""
    out = open(env.path('%s.out' % tag), 'w+b')
    err = open(env.path('%s.err' % tag), 'w+b')
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env.env)
    return p, out, err


def said(f, text):
    """Whether file object f (a spawned command's output) holds text yet."""
    f.flush()
    with open(f.name, 'rb') as g:
        return text in g.read().decode(errors='replace')


def ended(p, out, err):
    """Wait for a spawned command: (exit status, stdout, stderr)."""
    rc = p.wait(timeout=ml.POLL_TIMEOUT)
    out.seek(0)
    err.seek(0)
    o, e = out.read().decode(errors='replace'), err.read().decode(errors='replace')
    out.close()
    err.close()
    log('-> rc=%r stdout=%r stderr=%r' % (rc, o, e))
    return rc, o, e


def human(n):
    """fs_human_bytes (fs_log.c): binary units, two decimals."""
    v, u = float(n), 0
    while v >= 1024 and u < 4:
        v /= 1024
        u += 1
    return ('%.2f %s' if u else '%.0f %s') % (v, ('B', 'KiB', 'MiB', 'GiB', 'TiB')[u])


def end_all(procs, mounts, px=None, ng=None):
    """The teardown of a test of spawned commands over mounts behind a holding proxy: the
    proxy's hold released, each command still running killed, each mount unmounted (quietly,
    whether or not it was mounted), the proxy closed and nginx stopped."""
    if px is not None:
        px.release.set()
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    for m in mounts:
        m.umount(quiet=True)
    if px is not None:
        px.close()
    if ng is not None:
        ng.stop()
