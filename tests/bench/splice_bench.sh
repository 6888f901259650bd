#!/bin/bash
# The socket-to-file path of a fill's bytes, recv + pwrite against splice (socket -> pipe ->
# file) + a pread for the CRC, and splicemap (the CRC from a mapping), or the modes --modes
# names (falloc, bigN, directN), two threads as the daemon's (tests/bench/splice_bench.c says
# what each does), over the C link emulator on loopback (no delay, no rate cap), the modes
# alternated run by run in one invocation, the file's page cache written back between runs.
#
#   bash tests/bench/splice_bench.sh [--build build-bench] [--runs 6] [--data DIR]
#        [--modes "recv splice splicemap"]
#
# DIR: a directory of files to fetch (default link_bench.py's data set,
# /var/tmp/shardfs-linkbench-512/shards: make it with link_bench.py --quick). Prints every run's
# CPU-s per GB (receiving thread, writing thread, both), then each mode's medians.
set -eu -o pipefail
cd "$(dirname "$0")/../.."
build=build-bench runs=6 data=/var/tmp/shardfs-linkbench-512/shards
modes_asked="recv splice splicemap"
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--data) data=$2; shift 2 ;;
	--modes) modes_asked=$2; shift 2 ;;
	*) echo "usage: $0 [--build DIR] [--runs N] [--data DIR] [--modes \"M...\"]" >&2; exit 2 ;;
	esac
done
[ -x "$build/tests/linkemu" ] || { echo "$0: no $build/tests/linkemu (meson compile -C $build)" >&2; exit 2; }
[ -d "$data" ] || { echo "$0: no $data" >&2; exit 2; }
tmp=$(mktemp -d /var/tmp/shardfs-splice-bench.XXXXXX)
emu=
cleanup() { # the emulator's status (killed) is not the script's
	if [ -n "$emu" ]; then
		kill "$emu" 2>/dev/null || true
		wait "$emu" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
cc -O2 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Idisk tests/bench/splice_bench.c disk/disk.c \
	disk/disk_crc.c disk/disk_lock.c -pthread -o "$tmp/splice_bench"
"$build/tests/linkemu" --root "$data" --delay-ms 0 --rate-mb 100000 --port-file "$tmp/port" \
	>"$tmp/emu.log" 2>&1 &
emu=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
[ -s "$tmp/port" ] || { cat "$tmp/emu.log" >&2; exit 1; }
names=$(cd "$data" && ls)
cat "$data"/* >/dev/null # the emulator's files warm in the page cache
for r in $(seq "$runs"); do
	modes=$modes_asked
	# shellcheck disable=SC2086
	[ $((r % 2)) -eq 0 ] && modes=$(printf '%s\n' $modes_asked | tac | tr '\n' ' ')
	for m in $modes; do
		sync
		# shellcheck disable=SC2086
		"$tmp/splice_bench" "$(cat "$tmp/port")" "$data" "$m" "$tmp/out" $names | tee -a "$tmp/res"
		rm -f "$tmp/out"
	done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$tmp/res" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault(f[0], []).append([float(x) for x in f[1:4]])
for m, xs in rows.items():
    med = [statistics.median(x[i] for x in xs) for i in range(3)]
    print('%-6s median CPU-s/GB: receiver %.3f, writer %.3f, both %.3f (both %.3f-%.3f, %d runs)' % (
        m, med[0], med[1], med[2], min(x[2] for x in xs), max(x[2] for x in xs), len(xs)))
PY
