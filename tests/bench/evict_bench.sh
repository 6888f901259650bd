#!/bin/bash
# The CPU cost of evicting a GiB (issue 37's eviction row): tests/bench/evict_bench.c reads the
# same data through the cache tier with a cache larger than the data (the baseline, same run) and
# with a quarter of it, and prints the CPU difference per GiB evicted (median of --runs, sides
# alternated). The store is fault:// over sparse files, so the fills cost only the cache tier.
# The cache tier's options are the daemon's defaults (fs/core/fs_opt.c), --durable-delay read
# from the option table where the tree has it.
#
# --base REV: the same bench built against the cache tier of commit REV too (from `git archive
# REV`, libraries only, in the temp dir; this tree's too, both release builds), the two run alternately in this invocation (REV first
# in odd runs, this tree first in even ones), and one table with both and their ratio.
# --base-src DIR: the same with the source tree in DIR as the base (e.g. REV with a patch).
#
#   bash tests/bench/evict_bench.sh [--build DIR] [--gb 1] [--runs 3] [--dir /var/tmp]
#        [--base REV | --base-src DIR]
set -eu
cd "$(dirname "$0")/../.."
build=build gb=1 runs=3 dir=/var/tmp base= base_src=
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$2; shift 2 ;;
	--gb) gb=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	--base) base=$2; shift 2 ;;
	--base-src) base_src=$(cd "$2" && pwd); shift 2 ;;
	*) echo "usage: $0 [--build DIR] [--gb N] [--runs N] [--dir DIR] [--base REV]" >&2; exit 2 ;;
	esac
done
[ -f "$build/cachetier/libcachetier.a" ] || { echo "no $build/cachetier/libcachetier.a: build first" >&2; exit 1; }
tmp=$(mktemp -d "$dir/shardfs-evict-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# bench_cc SRC BUILD OUT: the bench linked against the cache tier of tree SRC built in BUILD
bench_cc() {
	local src=$1 b=$2 out=$3 def= fetch= stats=
	if grep -q durable_delay_s "$src/cachetier/cachetier.h"; then
		def=$(sed -n 's/.*"durable-delay", 0, FS_OPT_SECONDS, CFG(ct.durable_delay_s), 0, "\([0-9.]*\)".*/\1/p' \
			"$src/fs/core/fs_opt.c")
		[ -n "$def" ] || { echo "evict_bench.sh: no --durable-delay default in $src/fs/core/fs_opt.c" >&2; exit 1; }
		def="-DEB_DURABLE_DELAY_S=$def"
	fi
	grep -q evict_cpu_ns "$src/cachetier/cachetier.h" && stats=-DEB_CPU_STATS
	grep -q 'uint64_t punches;' "$src/cachetier/cachetier.h" && stats="$stats -DEB_PUNCHES"
	grep -q 'uint64_t room_waits;' "$src/cachetier/cachetier.h" && stats="$stats -DEB_ROOM"
	grep -q 'uint64_t punch_cpu_ns;' "$src/cachetier/cachetier.h" && stats="$stats -DEB_PUNCH_CPU"
	grep -q 'uint64_t evict_looked;' "$src/cachetier/cachetier.h" && stats="$stats -DEB_LOOKED"
	grep -q 'cachetier_plan_done' "$src/cachetier/cachetier.h" && stats="$stats -DEB_PLAN"
	# the store's fill rules from the fetch scheduler (fetch/), where the tree has them
	grep -q cachetier_set_policy "$src/cachetier/cachetier.h" && fetch="-DEB_POLICY -I$src/fetch $b/fetch/libfetch.a"
	# shellcheck disable=SC2046,SC2086
	cc -O2 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 $def $stats -I"$src" -I"$src/cachetier" -I"$src/backend" \
		-I"$src/disk" tests/bench/evict_bench.c $fetch "$b/cachetier/libcachetier.a" \
		"$b/backend/libbackend.a" "$b/disk/libdisk.a" \
		$(pkg-config --libs libcurl libuv libcrypto zlib libzstd) -pthread -o "$out"
}

bench_cc . "$build" "$tmp/evict_bench"
if [ -z "$base$base_src" ]; then
	"$tmp/evict_bench" "$tmp" "$gb" "$runs"
	exit 0
fi
if [ -n "$base" ]; then
	git rev-parse --verify -q "$base^{commit}" >/dev/null || { echo "evict_bench.sh: $base is not a commit" >&2; exit 2; }
	base_src=$tmp/base-src
	mkdir "$base_src"
	git archive "$base" | tar -x -C "$base_src"
	label=$(git rev-parse --short "$base")
else
	label=$(basename "$base_src")
fi
# both sides' libraries built alike (release), whatever --build's type is
for side in base this; do
	src=$base_src
	[ "$side" = this ] && src=$PWD
	meson setup "$tmp/$side-build" "$src" --buildtype=release >/dev/null
	meson compile -C "$tmp/$side-build" -j 2 fetch cachetier backend disk >/dev/null
done
bench_cc "$base_src" "$tmp/base-build" "$tmp/evict_bench_base"
bench_cc . "$tmp/this-build" "$tmp/evict_bench"
for r in $(seq 1 "$runs"); do
	if [ $((r % 2)) = 1 ]; then order="base this"; else order="this base"; fi
	for side in $order; do
		bin=$tmp/evict_bench
		[ "$side" = base ] && bin=$tmp/evict_bench_base
		echo "--- run $r: $side" >&2
		"$bin" "$tmp" "$gb" 1 | awk -v side="$side" '
			/^E[123] evict:/ { print side, $1, $(NF - 3) }
			/^E[123] own:/ { print side, $1 "room", $(NF - 5); print side, $1 "maps", $(NF - 4) }
			/^E[123] holes punched/ { print side, $1 "punch", $(NF - 1) }
			/^E[123]c eviction/ { print side, $1 "room", $6; print side, $1 "pcpu", $7; print side, $1, $8 }
			/^E[123] units looked at/ { print side, $1 "look", $7 }
		' >>"$tmp/rows"
	done
done
python3 - "$tmp/rows" "$label" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    side, row, v = line.split()
    rows.setdefault((side, row), []).append(float(v))
print('%-40s %12s %12s %8s' % ('CPU-s per GiB evicted (median)', 'before ' + sys.argv[2],
                                'after', 'ratio'))
names = {'E1': 'E1: 8 objects in order, cache 1/4', 'E2': 'E2: 100 KB shuffled, cache 1/4',
         'E1room': 'E1 making room (own CPU)', 'E2room': 'E2 making room (own CPU)',
         'E1maps': 'E1 writing maps (own CPU)', 'E2maps': 'E2 writing maps (own CPU)',
         'E1punch': 'E1 holes punched per GiB (calls)', 'E2punch': 'E2 holes punched per GiB (calls)',
         'E1c': 'E1c eviction CPU-s per GB (sum)', 'E2c': 'E2c eviction CPU-s per GB (sum)',
         'E1croom': 'E1c making room per GB', 'E2croom': 'E2c making room per GB',
         'E1cpcpu': 'E1c puncher per GB', 'E2cpcpu': 'E2c puncher per GB',
         'E1look': 'E1 units looked at per unit evicted', 'E2look': 'E2 units looked at per unit evicted',
         'E3': 'E3: E2 read by a plan, cache 1/4', 'E3room': 'E3 making room (own CPU)',
         'E3maps': 'E3 writing maps (own CPU)', 'E3punch': 'E3 holes punched per GiB (calls)',
         'E3c': 'E3c eviction CPU-s per GB (sum)', 'E3croom': 'E3c making room per GB',
         'E3cpcpu': 'E3c puncher per GB', 'E3look': 'E3 units looked at per unit evicted'}
for row in ('E1', 'E2', 'E1room', 'E1maps', 'E2room', 'E2maps', 'E1punch', 'E2punch',
            'E1c', 'E1croom', 'E1cpcpu', 'E2c', 'E2croom', 'E2cpcpu', 'E1look', 'E2look',
            'E3', 'E3punch', 'E3c', 'E3croom', 'E3cpcpu'):
    if ('this', row) not in rows and ('base', row) not in rows:
        continue
    b = statistics.median(rows.get(('base', row), [float('nan')]))
    a = statistics.median(rows.get(('this', row), [float('nan')]))
    f = '%.0f' if row.endswith('punch') else '%.2f' if row.endswith('look') else '%.3f'
    print(('%-40s %12s %12s %8s  (' + ('' if row.endswith(('punch', 'look')) else 'target <= 0.1; ') +
           'runs: before %s, after %s)') % (
        names[row], f % b, f % a, '%.2f' % (a / b) if b > 0 else '-',
        ' '.join(f % x for x in rows.get(('base', row), [])),
        ' '.join(f % x for x in rows.get(('this', row), []))))
PY
