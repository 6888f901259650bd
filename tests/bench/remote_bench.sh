#!/bin/bash
# Remote read-through benchmark. Not a test: it prints figures and
# ratios against a baseline measured in the same run (docs/design.md section 4,
# "cold fill from a loopback HTTP server vs curl with the same parallelism").
#
#   bash tests/bench/remote_bench.sh [--build DIR] [--shard-mb 1024] [--member-kb 100] [--runs 1]
#
# Serves one shard of --shard-mb MB (members of --member-kb KB) from nginx on
# 127.0.0.1 (sendfile on, the file warm in the page cache), then, for
# --connections 1 and 8:
#   - shardfs: `cat MNT/shard.tar > /dev/null` through a fresh mount with an
#     empty cache dir (every byte is fetched into the cache tier once), and,
#     with 8, also 8 readers each reading one eighth with dd;
#   - curl: `curl -s -o /dev/null URL`, and with 8, 8 parallel `curl --range`
#     jobs of one eighth each; and the same writing to new files on the disk
#     of the cache dirs (what any cache fill must also do).
# and prints MB/s and the ratio shardfs/curl. With --runs N every figure is
# the median of N runs (shardfs and curl alternating).
set -eu
cd "$(dirname "$0")/../.."
. tests/bench/lib_nginx.sh
root=$(pwd)
build=build shard_mb=1024 member_kb=100 runs=1
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$2; shift 2 ;;
	--shard-mb) shard_mb=$2; shift 2 ;;
	--member-kb) member_kb=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	*) echo "usage: $0 [--build DIR] [--shard-mb N] [--member-kb N] [--runs N]" >&2; exit 2 ;;
	esac
done
if [ "$build" = build ]; then
	sh scripts/install-deps.sh --test
	[ -f build/build.ninja ] || meson setup build >/dev/null
	meson compile -C build >/dev/null
fi
bin=$(cd "$build" && pwd)/shardfs
[ -x "$bin" ] || { echo "no $bin" >&2; exit 1; }

tmp=$(mktemp -d /tmp/shardfs-remote-bench.XXXXXX)
chmod 755 "$tmp"
ngpid=
cleanup() {
	for m in "$tmp"/mnt*; do
		[ -d "$m" ] && mountpoint -q "$m" && "$bin" umount "$m" >/dev/null 2>&1
	done
	[ -n "$ngpid" ] && kill "$ngpid" 2>/dev/null && wait "$ngpid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

echo "making a ${shard_mb} MB shard of ${member_kb} KB members ..."
mkdir -p "$tmp/data"
/usr/bin/python3 - "$tmp/data/shard.tar" "$shard_mb" "$member_kb" <<'PY'
import io, os, sys, tarfile
path, mb, kb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
n = mb * 1024 // kb
blob = os.urandom(kb * 1024 + 4096)
with tarfile.open(path, 'w', format=tarfile.USTAR_FORMAT) as t:
    for i in range(n):
        data = blob[i % 4096:i % 4096 + kb * 1024]
        ti = tarfile.TarInfo('sample_%07d.bin' % i)
        ti.size = len(data)
        ti.mtime = 1600000000
        t.addfile(ti, io.BytesIO(data))
PY
chmod -R a+rX "$tmp/data"
size=$(stat -c %s "$tmp/data/shard.tar")

nginx_start "$tmp/ng" "$tmp/data" || exit 1
url="$base/shard.tar"
curl -s -o /dev/null "$url" # warm the server's page cache

now() { date +%s.%N; }
mbps() { # seconds -> MB/s of the shard
	/usr/bin/python3 -c "import sys; print('%.0f' % ($size / 1e6 / float(sys.argv[1])))" "$1"
}
secs() { # start end
	/usr/bin/python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"
}

mount_fresh() { # connections -> prints mountpoint
	local m="$tmp/mnt$1" c="$tmp/cache$1"
	mkdir -p "$m"
	rm -rf "$c"
	"$bin" mount --cache-dir "$c" --connections "$1" "$url" "$m"
	echo "$m"
}

run_cat() { # connections
	local m t0 t1
	m=$(mount_fresh "$1")
	t0=$(now)
	cat "$m/shard.tar" >/dev/null
	t1=$(now)
	"$bin" umount "$m" >/dev/null
	secs "$t0" "$t1"
}

run_dd8() { # 8 readers of one eighth each, --connections 8
	local m t0 t1 part i
	m=$(mount_fresh 8)
	part=$(( (size + 8 * 1048576 - 1) / (8 * 1048576) ))
	t0=$(now)
	for i in 0 1 2 3 4 5 6 7; do
		dd if="$m/shard.tar" of=/dev/null bs=1M skip=$((i * part)) count=$part status=none &
	done
	wait
	t1=$(now)
	"$bin" umount "$m" >/dev/null
	secs "$t0" "$t1"
}

run_curl1() { # [file]: /dev/null, or a new file next to the cache dirs (the same disk)
	local t0 t1 out=${1:-/dev/null}
	[ "$out" = /dev/null ] || rm -f "$out"
	t0=$(now)
	curl -s -o "$out" "$url"
	t1=$(now)
	[ "$out" = /dev/null ] || rm -f "$out"
	secs "$t0" "$t1"
}

run_curl8() { # [file prefix]: as run_curl1, one file per range
	local t0 t1 part i a b out
	part=$(( (size + 7) / 8 ))
	[ -n "${1:-}" ] && rm -f "$1".*
	t0=$(now)
	for i in 0 1 2 3 4 5 6 7; do
		a=$((i * part)) b=$(( (i + 1) * part - 1 ))
		[ $b -ge $size ] && b=$((size - 1))
		out=/dev/null
		[ -n "${1:-}" ] && out=$1.$i
		curl -s -o "$out" --range "$a-$b" "$url" &
	done
	wait
	t1=$(now)
	[ -n "${1:-}" ] && rm -f "$1".*
	secs "$t0" "$t1"
}

echo "shard: $size bytes; nginx on 127.0.0.1:$port; shardfs: $bin"
printf '%-48s %8s %8s %8s %7s\n' "workload" "shardfs" "curl" "" "ratio"
printf '%-48s %8s %8s %8s %7s\n' "" "MB/s" "MB/s" "" ""
row() { # label shardfs-seconds curl-seconds
	local a b
	a=$(mbps "$2") b=$(mbps "$3")
	printf '%-48s %8s %8s %8s %7s\n' "$1" "$a" "$b" "" \
		"$(/usr/bin/python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) / float(sys.argv[1])))" "$2" "$3")"
}
median() { /usr/bin/python3 -c "import statistics, sys; print(statistics.median(map(float, sys.argv[1:])))" "$@"; }
s1=() c1=() f1=() s8=() c8=() f8=() d8=()
for _ in $(seq "$runs"); do
	s1+=("$(run_cat 1)"); c1+=("$(run_curl1)"); f1+=("$(run_curl1 "$tmp/curl.out")")
	s8+=("$(run_cat 8)"); c8+=("$(run_curl8)"); f8+=("$(run_curl8 "$tmp/curl.out")")
	d8+=("$(run_dd8)")
done
c8m=$(median "${c8[@]}") f8m=$(median "${f8[@]}")
row "cat, --connections 1 vs curl" "$(median "${s1[@]}")" "$(median "${c1[@]}")"
row "cat, --connections 8 vs curl 8 ranges" "$(median "${s8[@]}")" "$c8m"
row "8 dd readers, --connections 8 vs curl 8 ranges" "$(median "${d8[@]}")" "$c8m"
# The same, against curl writing the bytes to a new file on the cache's disk, as a cache fill
# must (curl -o /dev/null never allocates page cache): the ceiling of any fill into a cache.
row "cat, --connections 1 vs curl -o file" "$(median "${s1[@]}")" "$(median "${f1[@]}")"
row "cat, --connections 8 vs curl 8 ranges -o files" "$(median "${s8[@]}")" "$f8m"
