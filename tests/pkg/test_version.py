#!/usr/bin/env python3
"""The version has one source, project() in meson.build (SHARDFS_VERSION in the generated
shardfs_config.h). 'shardfs --version' must print it, and python/pyproject.toml, which pip reads
without meson, must say the same: a release that bumps one and not the other fails here.
(debian/changelog is the package's own record of its versions and is not checked.)
  test_version.py VERSION SHARDFS PYPROJECT"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test.checks import Checks  # noqa: E402

version, shardfs, pyproject = sys.argv[1:4]
CK = Checks('pkg-version')
check = CK.ok


r = subprocess.run([shardfs, '--version'], capture_output=True, text=True)
check(r.returncode == 0 and r.stdout.startswith('shardfs %s ' % version),
      "shardfs --version prints meson.build's %s: %r" % (version, r.stdout))
with open(pyproject, encoding='utf-8') as f:
    m = re.search(r'^\[project\][^\[]*?^version\s*=\s*"([^"]*)"', f.read(), re.M | re.S)
check(m is not None and m.group(1) == version,
      "python/pyproject.toml's [project] version is meson.build's %s: %s"
      % (version, m.group(1) if m else 'none found'))
CK.exit()
