"""Checks for the tests that do not run under mount.main_wrapper (their own runner, no mount:
tests/pkg, tests/shardidx/test_shardidx.py, tests/unit/test_sigv4_botocore.py), under the
same rules as the others: a test that made no check fails, and a test that cannot run skips
(exit 77, a "SKIP: reason" line that tests/run.sh lists) only where the run allows that kind
of skip (mount.skip_status: never under CI=true or --strict)."""

import sys
import warnings


class Checks:
    def __init__(self, name):
        self.name = name
        self.count = 0
        self.failures = []

    def ok(self, cond, what):
        """Count a check; print it ('ok   ' or 'FAIL ' and what); returns cond."""
        self.count += 1
        print(('ok   ' if cond else 'FAIL ') + what, flush=True)
        if not cond:
            self.failures.append(what)
        return bool(cond)

    def fail(self, what):
        return self.ok(False, what)

    def status(self):
        """The exit status: 1 on a failure or when no check was made, else 0."""
        if self.failures:
            print('%s: %d of %d checks failed' % (self.name, len(self.failures), self.count),
                  flush=True)
            return 1
        if self.count == 0:
            print('FAIL: %s: the test made no check' % self.name, flush=True)
            return 1
        print('%s: %d checks passed' % (self.name, self.count), flush=True)
        return 0

    def exit(self):
        sys.exit(self.status())


def skip(reason, kind='tool'):
    """Exit a test that cannot run: 77 with "SKIP: reason" where the run allows a skip of this
    kind ('tool': a missing package; 'host': a limit of the machine), else 1."""
    from shardfs_test import mount
    sys.exit(mount.skip_status(reason, kind))


def caught(fn):
    """fn() with warnings recorded: (result or None, the exception or None, [warning texts])
    (the python/shardfs tests: test_planfailed.py, test_pyargs.py)."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter('always')
        res = exc = None
        try:
            res = fn()
        except Exception as e:  # noqa: BLE001 (the caller looks at which)
            exc = e
    return res, exc, [str(w.message) for w in got]
