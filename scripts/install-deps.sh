#!/bin/sh
# Install what shardfs needs to build (and, with --test, to run its tests) on
# Debian 12. Idempotent: packages already present are not fetched again.
set -eu
pkgs="meson ninja-build pkg-config gcc libc6-dev libfuse3-dev fuse3 libarchive-dev
      libcurl4-openssl-dev libssl-dev libzstd-dev zlib1g-dev libuv1-dev"
if [ "${1:-}" = "--test" ]; then
	pkgs="$pkgs python3 tar libarchive-tools zstd gzip coreutils findutils diffutils"
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
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
