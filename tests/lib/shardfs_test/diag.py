"""What a failed mount test prints for its diagnosis, besides its own failure: the servers'
and proxies' requests. A server or proxy of the helpers (web.Nginx, web's proxies) registers a
function that returns its request list as lines while it runs (add), and drops it when it stops
(drop); mount.Env.diagnose prints the tail of each (mount.py: at a poll's timeout, a failed
check, an exception). Python 3 stdlib only."""

import itertools
import threading

# lines of one request list printed at most (its last ones)
TAIL = 60

_lock = threading.Lock()
_ids = itertools.count(1)
_sources = {}


def add(label, fn):
    """Register fn (no argument: a list of str, one a request) under label; returns the key for
    drop."""
    with _lock:
        key = next(_ids)
        _sources[key] = (label, fn)
    return key


def drop(key):
    with _lock:
        _sources.pop(key, None)


def request_lists():
    """[(label, lines, total)] of every source registered now: its last TAIL lines (an error
    reading it as one line) and how many it had."""
    with _lock:
        src = list(_sources.values())
    out = []
    for label, fn in src:
        try:
            lines = [str(x) for x in fn()]
        except Exception as e:  # noqa: BLE001 (a diagnosis never fails the diagnosis)
            lines = ['(could not read it: %r)' % e]
        out.append((label, lines[-TAIL:], len(lines)))
    return out
