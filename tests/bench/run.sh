#!/bin/bash
# shardfs benchmark suite: every workload against its baseline in the
# same invocation, median of several runs; prints the table
#   workload | options | shardfs | baseline | ratio | goal | met?
# and writes tests/bench/out/results.csv and tests/bench/out/results.png.
# See tests/bench/README.md for what each row and goal means.
#
#   bash tests/bench/run.sh [--quick] [--size-mb N] [--members N] [--runs N]
#                           [--samples N] [--shards N] [--random-members N]
#                           [--am-cap SECONDS] [--dl CLASSESxPER] [--only LIST]
#                           [--scale-shards N]
#
# --only scale runs the scale bench (issue 15, scale_bench.py; never in the default set):
# 500 shards by default (~5 min), --scale-shards 6800 is its full size.
# Default sizes fit a 2-core, 24 GB machine (about 20 minutes); --quick takes
# about 6. Needs root (packages, drop_caches); without root the "dropped" rows
# are skipped and missing packages are only listed.
set -eu
cd "$(dirname "$0")/../.."
for a in "$@"; do
	case $a in -h|--help) exec /usr/bin/python3 tests/bench/lib_bench.py --bin x --help ;; esac
done

# ---- packages: the build and test ones, plus the bench's own (install-deps --bench:
# aria2c, archivemount, gnuplot) ------------------------------------------------
if ! sh scripts/install-deps.sh --bench; then
	echo "run.sh: packages missing (see above): their rows/chart are skipped" >&2
fi

# ---- build: its own release build dir ---------------------------------------
[ -f build-bench/build.ninja ] || meson setup build-bench --buildtype=release >/dev/null
meson compile -C build-bench >/dev/null

# ---- run ----------------------------------------------------------------------
mkdir -p tests/bench/out
/usr/bin/python3 tests/bench/lib_bench.py --bin build-bench/shardfs "$@" 2>&1 | tee tests/bench/out/run.log
rc=${PIPESTATUS[0]}

# ---- chart --------------------------------------------------------------------
if command -v gnuplot >/dev/null && [ -s tests/bench/out/results.dat ]; then
	bash tests/bench/lib_chart.sh tests/bench/out/results.dat tests/bench/out/results.png &&
		echo "chart: tests/bench/out/results.png"
fi
exit "$rc"
