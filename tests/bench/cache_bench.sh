#!/bin/bash
# Cache tier benchmark. Not a test: it prints a table of ratios, each against a
# baseline measured in the same run (docs/design.md section 4), median of --runs runs per side.
#
#   bash tests/bench/cache_bench.sh [--build DIR] [--shard-mb 1024] [--member-kb 100]
#                                   [--readers 2] [--runs 3]
#
# One shard of --shard-mb MB (members of --member-kb KB) is served by nginx on 127.0.0.1
# (sendfile on, warm in the server's page cache) and also extracted with GNU tar on local disk.
#   a. warm cache tier (`shardfs prefetch`), every member read with plain open/read/close
#      syscalls (a small C helper, --readers processes splitting the file list) through the
#      mount vs the extracted files: page caches warm on both sides (an untimed pass first),
#      and dropped on both sides (echo 3 > /proc/sys/vm/drop_caches before every run; needs root)
#   b. sequential read (cat) of the cached shard through the mount vs the cache tier's data
#      file read directly, page caches warm and dropped on both sides
#   c. cold read through a fresh mount with --connections 8 (an empty cache dir each run):
#      8 dd readers of one eighth each, and one cat (readahead only), vs 8 parallel
#      `curl --range` downloads of one eighth each
# Ratio = baseline time / shardfs time (1.00: as fast as the baseline).
set -eu
cd "$(dirname "$0")/../.."
. tests/bench/lib_nginx.sh
build=build shard_mb=1024 member_kb=100 readers=2 runs=3
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$2; shift 2 ;;
	--shard-mb) shard_mb=$2; shift 2 ;;
	--member-kb) member_kb=$2; shift 2 ;;
	--readers) readers=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	*) echo "usage: $0 [--build DIR] [--shard-mb N] [--member-kb N] [--readers N] [--runs N]" >&2
	   exit 2 ;;
	esac
done
if [ "$build" = build ]; then
	sh scripts/install-deps.sh --test
	[ -f build/build.ninja ] || meson setup build >/dev/null
	meson compile -C build >/dev/null
fi
bin=$(cd "$build" && pwd)/shardfs
[ -x "$bin" ] || { echo "no $bin" >&2; exit 1; }
py=/usr/bin/python3

tmp=$(mktemp -d /tmp/shardfs-cache-bench.XXXXXX)
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

can_drop=0
if [ -w /proc/sys/vm/drop_caches ]; then can_drop=1; fi
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# the reader: open/read/close of every file in a list, N processes (file i to process i % N)
cat >"$tmp/readfiles.c" <<'EOF'
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	int n = atoi(argv[2]);
	FILE *f = fopen(argv[1], "r");
	if (!f)
		return 2;
	size_t cap = 1024, cnt = 0;
	char **names = malloc(cap * sizeof *names), line[4096];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		if (cnt == cap)
			names = realloc(names, (cap *= 2) * sizeof *names);
		names[cnt++] = strdup(line);
	}
	fclose(f);
	for (int p = 0; p < n; p++) {
		if (fork() == 0) {
			static char buf[1 << 20];
			for (size_t i = p; i < cnt; i += n) {
				int fd = open(names[i], O_RDONLY);
				if (fd < 0) {
					perror(names[i]);
					_exit(1);
				}
				ssize_t r;
				while ((r = read(fd, buf, sizeof buf)) > 0)
					;
				if (r < 0) {
					perror(names[i]);
					_exit(1);
				}
				close(fd);
			}
			_exit(0);
		}
	}
	int st, bad = 0;
	while (wait(&st) > 0)
		bad |= !WIFEXITED(st) || WEXITSTATUS(st);
	return bad;
}
EOF
cc -O2 -o "$tmp/readfiles" "$tmp/readfiles.c"

echo "making a ${shard_mb} MB shard of ${member_kb} KB members ..."
mkdir -p "$tmp/data" "$tmp/local"
$py - "$tmp/data/shard.tar" "$shard_mb" "$member_kb" <<'PY'
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
tar -xf "$tmp/data/shard.tar" -C "$tmp/local"
(cd "$tmp/local" && ls | sort) >"$tmp/names"
nfiles=$(wc -l <"$tmp/names")
sed "s|^|$tmp/local/|" "$tmp/names" >"$tmp/list.local"
sed "s|^|$tmp/mnt/shard/|" "$tmp/names" >"$tmp/list.mnt"

nginx_start "$tmp/ng" "$tmp/data" || exit 1
url="$base/shard.tar"
warm_server() { cat "$tmp/data/shard.tar" >/dev/null; }
warm_server

now() { date +%s.%N; }
timeit() { # command... -> seconds on stdout
	local t0 t1
	t0=$(now)
	"$@" >/dev/null
	t1=$(now)
	$py -c "import sys; print('%.4f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1"
}
median() { $py -c "import sys, statistics; print(statistics.median(map(float, sys.argv[1:])))" "$@"; }

results=()
row() { # label shardfs-median baseline-median unit(files|bytes) count goal
	local line
	line=$($py - "$@" <<'PY'
import sys
label, s, b, unit, n, goal = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], float(sys.argv[5]), sys.argv[6]
f = (lambda t: '%.0f f/s' % (n / t)) if unit == 'files' else (lambda t: '%.0f MB/s' % (n / 1e6 / t))
r = b / s
ok = '' if goal == '-' else ('ok' if r >= float(goal) else 'MISS')
print('%-52s %12s %12s %6.2f %6s %4s' % (label, f(s), f(b), r, '>=' + goal if goal != '-' else '', ok))
PY
)
	results+=("$line")
	echo "$line"
}

# ---- a and b: one mount with a warm cache tier ----------------------------------------------
mkdir -p "$tmp/mnt"
cache="$tmp/cache-warm"
"$bin" mount --cache-dir "$cache" "$url" "$tmp/mnt"
echo "prefetching into $cache ..."
"$bin" prefetch "$tmp/mnt" >/dev/null
ls "$tmp/mnt/shard" >/dev/null # the index (built by prefetch or now)
datafile=$(find "$cache" -path '*/data/*' ! -name '*.map' -type f -size +1M | head -1)
[ -n "$datafile" ] || { echo "no cache data file under $cache" >&2; exit 1; }
echo "shard: $size bytes, $nfiles members; nginx on 127.0.0.1:$port; shardfs: $bin"
echo "cache data file: $datafile ($(du -k "$datafile" | cut -f1) KB allocated)"
echo
printf '%-52s %12s %12s %6s %6s\n' workload shardfs baseline ratio goal

# a, warm page caches
"$tmp/readfiles" "$tmp/list.mnt" "$readers"
"$tmp/readfiles" "$tmp/list.local" "$readers"
s=() b=()
for _ in $(seq "$runs"); do
	s+=("$(timeit "$tmp/readfiles" "$tmp/list.mnt" "$readers")")
	b+=("$(timeit "$tmp/readfiles" "$tmp/list.local" "$readers")")
done
row "a. members open/read/close, page caches warm" "$(median "${s[@]}")" "$(median "${b[@]}")" \
	files "$nfiles" 0.85

# a, dropped page caches
if [ $can_drop = 1 ]; then
	s=() b=()
	for _ in $(seq "$runs"); do
		drop
		s+=("$(timeit "$tmp/readfiles" "$tmp/list.mnt" "$readers")")
		drop
		b+=("$(timeit "$tmp/readfiles" "$tmp/list.local" "$readers")")
	done
	row "a. members open/read/close, page caches dropped" "$(median "${s[@]}")" \
		"$(median "${b[@]}")" files "$nfiles" 0.45
else
	echo "a. page caches dropped: skipped (cannot write /proc/sys/vm/drop_caches)"
fi

# b, sequential read of the cached shard vs the cache file
cat "$tmp/mnt/shard.tar" >/dev/null
cat "$datafile" >/dev/null
s=() b=()
for _ in $(seq "$runs"); do
	s+=("$(timeit cat "$tmp/mnt/shard.tar")")
	b+=("$(timeit cat "$datafile")")
done
row "b. cat cached shard vs cache file, page caches warm" "$(median "${s[@]}")" \
	"$(median "${b[@]}")" bytes "$size" 0.9
if [ $can_drop = 1 ]; then
	s=() b=()
	for _ in $(seq "$runs"); do
		drop
		s+=("$(timeit cat "$tmp/mnt/shard.tar")")
		drop
		b+=("$(timeit cat "$datafile")")
	done
	row "b. cat cached shard vs cache file, caches dropped" "$(median "${s[@]}")" \
		"$(median "${b[@]}")" bytes "$size" 0.9
fi
"$bin" umount "$tmp/mnt" >/dev/null

# ---- c: cold reads from nginx vs curl, 8 connections ----------------------------------------
part_mb=$(( (size + 8 * 1048576 - 1) / (8 * 1048576) ))
cold_dd8() {
	local i
	for i in 0 1 2 3 4 5 6 7; do
		dd if="$tmp/mnt-cold/shard.tar" of=/dev/null bs=1M skip=$((i * part_mb)) count=$part_mb \
			status=none &
	done
	wait
}
cold_cat() { cat "$tmp/mnt-cold/shard.tar"; }
curl8() {
	local i a b part=$(( (size + 7) / 8 ))
	for i in 0 1 2 3 4 5 6 7; do
		a=$((i * part)) b=$(( (i + 1) * part - 1 ))
		[ $b -ge $size ] && b=$((size - 1))
		curl -s -o /dev/null --range "$a-$b" "$url" &
	done
	wait
}
cold() { # reader-function -> seconds (fresh cache dir and mount; mount time not counted)
	mkdir -p "$tmp/mnt-cold"
	rm -rf "$tmp/cache-cold"
	"$bin" mount --cache-dir "$tmp/cache-cold" --connections 8 "$url" "$tmp/mnt-cold"
	timeit "$1"
	"$bin" umount "$tmp/mnt-cold" >/dev/null
	rm -rf "$tmp/cache-cold"
}
s=() d=() b=()
for _ in $(seq "$runs"); do
	warm_server
	d+=("$(cold cold_dd8)")
	s+=("$(cold cold_cat)")
	b+=("$(timeit curl8)")
done
row "c. cold: 8 dd readers, --connections 8 vs 8 curl" "$(median "${d[@]}")" \
	"$(median "${b[@]}")" bytes "$size" 0.8
row "c. cold: cat (readahead), --connections 8 vs 8 curl" "$(median "${s[@]}")" \
	"$(median "${b[@]}")" bytes "$size" 0.8

echo
echo "== summary (median of $runs; ratio = baseline time / shardfs time; $readers readers)"
printf '%-52s %12s %12s %6s %6s\n' workload shardfs baseline ratio goal
printf '%s\n' "${results[@]}"
