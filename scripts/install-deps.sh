#!/bin/sh
# Install what shardfs needs to build (and, with --test, to run its tests;
# with --bench, also what only tests/bench/ uses: aria2c, archivemount,
# gnuplot) on Debian 12. Idempotent:
# packages already present are not fetched again. No test needs the --bench
# packages.
set -eu
pkgs="meson ninja-build pkg-config gcc libc6-dev libfuse3-dev fuse3 libarchive-dev
      libcurl4-openssl-dev libssl-dev libzstd-dev zlib1g-dev libuv1-dev"
mode=${1:-}
if [ "$mode" = "--test" ] || [ "$mode" = "--bench" ]; then
	pkgs="$pkgs python3 tar libarchive-tools zstd gzip coreutils findutils diffutils
	      nginx python3-botocore curl openssl python3-torchvision python3-pil python3-numpy clang clang-format libclang-rt-14-dev gdb strace
	      libpython3.11-testsuite golang-1.19-src
	      prometheus dpkg-dev debhelper dh-python lintian fakeroot build-essential systemd man-db"
	# s3rver runs on Node.js; a machine may already have it from elsewhere
	command -v npm >/dev/null 2>&1 || pkgs="$pkgs nodejs npm"
fi
if [ "$mode" = "--bench" ]; then
	pkgs="$pkgs aria2 archivemount gnuplot-nox"
fi
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "install-deps: missing packages:$missing (run as root, or install them)" >&2
		exit 1
	fi
	echo "install-deps: installing$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# Packages must not start services (nginx would take port 80): the
	# tests start their own servers on 127.0.0.1 and free ports.
	policy=/usr/sbin/policy-rc.d
	own_policy=0
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
	fi
	# shellcheck disable=SC2086
	# another apt/dpkg run holding the dpkg lock is waited for, at most 300 s
	apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends $missing >/dev/null
	[ "$own_policy" = 1 ] && rm -f "$policy"
fi
# npm packages the tests use (s3rver), installed under the tests' own prefix
if { [ "$mode" = "--test" ] || [ "$mode" = "--bench" ]; } && [ -f tests/remote/s3/install-s3rver.sh ]; then
	sh tests/remote/s3/install-s3rver.sh
fi
