"""Can this machine run the test suite? tests/run.sh runs this before it builds anything:
FUSE usable (/dev/fuse opens, a trial mount and unmount work) and the servers and packages the
tests use installed (scripts/install-deps.sh --test installs them). Prints one line naming
what is wrong and exits 1; exits 0 when all is there.

usage: python3 tests/lib/precheck.py [--strict]
Without --strict (and without CI=true) a missing optional package (torchvision, ...) is only
noted: the tests that need it skip, and tests/run.sh lists each skip with its reason."""

import importlib
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test import s3servers  # noqa: E402
from shardfs_test import web  # noqa: E402


def missing_tools():
    """What the tests use and this machine lacks: [(name, how to get it)]."""
    out = []
    if not os.access(web.NGINX, os.X_OK):
        out.append(('nginx', 'scripts/install-deps.sh --test'))
    if not s3servers.have_s3rver():
        out.append(('s3rver', 'sh tests/remote/s3/install-s3rver.sh'))
    if not shutil.which('openssl'):
        out.append(('openssl', 'scripts/install-deps.sh --test'))
    for mod in ('botocore', 'torchvision', 'PIL', 'numpy'):
        try:
            importlib.import_module(mod)
        except ImportError:
            out.append(('python3 module %s' % mod, 'scripts/install-deps.sh --test'))
    return out


def main():
    strict = '--strict' in sys.argv[1:] or ml.strict_run()
    try:
        ml.fuse_precheck()
        with tempfile.TemporaryDirectory(prefix='shardfs-precheck-') as tmp:
            ml.trial_mount(tmp)
    except ml.Skip as e:
        print('precheck: this machine cannot mount: %s' % e, flush=True)
        return 1
    miss = missing_tools()
    if miss and strict:
        print('precheck: not installed: %s' % '; '.join('%s (%s)' % m for m in miss), flush=True)
        return 1
    if miss:
        print('precheck: not installed, their tests will skip: %s' % ', '.join(
            m[0] for m in miss), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
