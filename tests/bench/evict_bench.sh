#!/bin/bash
# The CPU cost of evicting a GiB (issue 37's eviction row): tests/bench/evict_bench.c reads the
# same data through the cache tier with a cache larger than the data (the baseline, same run) and
# with a quarter of it, and prints the CPU difference per GiB evicted (median of --runs, sides
# alternated). The store is fault:// over sparse files, so the fills cost only the cache tier.
#
#   bash tests/bench/evict_bench.sh [--build DIR] [--gb 1] [--runs 3] [--dir /var/tmp]
set -eu
cd "$(dirname "$0")/../.."
build=build gb=1 runs=3 dir=/var/tmp
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$2; shift 2 ;;
	--gb) gb=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	*) echo "usage: $0 [--build DIR] [--gb N] [--runs N] [--dir DIR]" >&2; exit 2 ;;
	esac
done
[ -f "$build/cachetier/libcachetier.a" ] || { echo "no $build/cachetier/libcachetier.a: build first" >&2; exit 1; }
tmp=$(mktemp -d "$dir/shardfs-evict-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2046
cc -O2 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -I. -Ifetch -Icachetier -Ibackend -Idisk \
	tests/bench/evict_bench.c "$build/fetch/libfetch.a" "$build/cachetier/libcachetier.a" \
	"$build/backend/libbackend.a" \
	"$build/disk/libdisk.a" $(pkg-config --libs libcurl libuv libcrypto zlib libzstd) -pthread \
	-o "$tmp/evict_bench"
"$tmp/evict_bench" "$tmp" "$gb" "$runs"
