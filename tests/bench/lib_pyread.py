"""Sample-read benchmark helper for tests/bench/run.sh: the Python side.

    python3 lib_pyread.py LISTFILE NPROCS

Forks NPROCS readers; reader i takes paths i, i+NPROCS, ... and reads each with
open(path, 'rb').read(), as PIL (and so torchvision's ImageFolder) opens files.
Prints "FILES BYTES SECONDS" like lib_readfiles.c.
"""
import os
import sys
import time


def main():
    paths = [p for p in open(sys.argv[1]).read().split('\n') if p]
    np_ = int(sys.argv[2])
    r, w = os.pipe()
    t0 = time.monotonic()
    pids = []
    for i in range(np_):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            files = nbytes = 0
            for p in paths[i::np_]:
                with open(p, 'rb') as f:
                    nbytes += len(f.read())
                files += 1
            os.write(w, b'%d %d\n' % (files, nbytes))
            os._exit(0)
        pids.append(pid)
    os.close(w)
    bad = 0
    for pid in pids:
        _, st = os.waitpid(pid, 0)
        bad |= st != 0
    t = time.monotonic() - t0
    files = nbytes = 0
    for ln in os.fdopen(r).read().split('\n'):
        if ln:
            a, b = ln.split()
            files += int(a)
            nbytes += int(b)
    print('%d %d %.6f' % (files, nbytes, t))
    sys.exit(1 if bad else 0)


if __name__ == '__main__':
    main()
