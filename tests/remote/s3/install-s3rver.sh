#!/bin/sh
# Install s3rver (a small S3 server on Node.js) for the s3:// / gs:// tests,
# pinned, under its own prefix so nothing global changes. Idempotent.
# The tests look for it at $SHARDFS_NPM_PREFIX (default /var/tmp/shardfs-npm).
set -eu
prefix="${SHARDFS_NPM_PREFIX:-/var/tmp/shardfs-npm}"
version=3.7.1
bin="$prefix/node_modules/.bin/s3rver"
if [ -x "$bin" ] && [ "$(cat "$prefix/.s3rver-version" 2>/dev/null)" = "$version" ]; then
	exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
	echo "install-s3rver: npm not found (install nodejs and npm)" >&2
	exit 1
fi
mkdir -p "$prefix"
echo "install-s3rver: installing s3rver@$version under $prefix"
npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "s3rver@$version" >/dev/null
echo "$version" >"$prefix/.s3rver-version"
