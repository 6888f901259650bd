"""What the kernel caches of a mount, held still for the tests that count its requests (LOOKUPs,
getattrs, reads): a Delta of the daemon's counters between steps less what reading the stats file
costs, and Pins that hold what a step reached so that another process's drop_caches (the benches
run echo 3 > /proc/sys/vm/drop_caches) cannot make the kernel forget it. Used by
tests/mount/test_mount.py's 'listing' and test_ifview.py's 'lookups'.
"""

import os


class Delta:
    """Counters of a mount since the last call, less what reading the stats file costs (its
    own lookups and readdirs: measured by reading it twice; .shardfs files are looked up at
    every open, so the cost does not depend on what the kernel keeps). The stats file is held
    (an O_PATH fd: the kernel never forgets it, nor .shardfs above it). A FORGET the kernel
    sent before a LOOKUP can reach the daemon after it: each call reads the stats until
    forgets stays the same twice (at most 100 reads)."""

    KEYS = ('lookups', 'readdirs', 'listed_names_only', 'forgets')

    def __init__(self, m, keys=KEYS):
        self.m = m
        self.KEYS = tuple(keys) + (() if 'forgets' in keys else ('forgets',))
        self.pin = os.open(os.path.join(m.mnt, '.shardfs', 'stats'), os.O_PATH)
        s0 = m.stats()
        s1 = m.stats()
        self.cost = {k: s1[k] - s0[k] for k in self.KEYS}
        self.last = s1

    def close(self):
        os.close(self.pin)

    def __call__(self):
        st = self.m.stats()
        n = 1
        for _ in range(99):
            again = self.m.stats()
            n += 1
            settled = again['forgets'] == st['forgets']
            st = again
            if settled:
                break
        d = {k: st[k] - self.last[k] - n * self.cost[k] for k in self.KEYS}
        self.last = st
        return d


class Pins:
    """Paths held open (O_PATH for directories, O_RDONLY for files) so that the kernel cannot
    forget their inodes while a listing test counts LOOKUPs: an inode the kernel still holds
    costs no LOOKUP, one it forgot (a cache drop: echo 2 > /proc/sys/vm/drop_caches) costs
    exactly one when its path is next walked, and the daemon counts the FORGET (forgets). With
    every inode a step walks to held once walked, the step's LOOKUPs less its forgets are what
    it costs with nothing dropped, whatever the kernel drops meanwhile."""

    def __init__(self):
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 8192 and (hard == resource.RLIM_INFINITY or hard >= 8192):
            resource.setrlimit(resource.RLIMIT_NOFILE, (8192, hard))
        self.fds = []

    def path(self, p):
        self.fds.append(os.open(p, os.O_PATH))

    def read(self, p):
        """The file's bytes; the file stays open."""
        fd = os.open(p, os.O_RDONLY)
        self.fds.append(fd)
        out = b''
        while True:
            b = os.read(fd, 1 << 16)
            if not b:
                return out
            out += b

    def close(self):
        for fd in self.fds:
            os.close(fd)
        self.fds = []
