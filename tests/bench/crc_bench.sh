#!/bin/bash
# The CPU cost of the cache units' CRC32C (cachetier/README.md "Checked bytes"), each figure
# against the same work without it, in one run (tests/bench/crc_bench.c says what each is).
#
#   bash tests/bench/crc_bench.sh [--mb 512] [--runs 5] [--dir /var/tmp]
#
# Prints "NAME  WITH  WITHOUT" in ms of CPU per GB (crc-METHOD: ms per GB, GB/s and the
# speed-up over the table in the same run; crc-chosen: the method disk_crc32c_update uses).
set -eu
cd "$(dirname "$0")/../.."
mb=512 runs=5 dir=/var/tmp
while [ $# -gt 0 ]; do
	case $1 in
	--mb) mb=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	*) echo "usage: $0 [--mb N] [--runs N] [--dir DIR]" >&2; exit 2 ;;
	esac
done
tmp=$(mktemp -d "$dir/shardfs-crc-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cc -O2 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Idisk tests/bench/crc_bench.c disk/disk.c disk/disk_crc.c disk/disk_lock.c \
	-pthread -o "$tmp/crc_bench"
"$tmp/crc_bench" "$tmp/scratch" "$mb" "$runs"
