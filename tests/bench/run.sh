#!/bin/bash
# shardfs benchmark suite (issue 6): every workload against its baseline in the
# same invocation, median of several runs; prints the table
#   workload | shardfs | baseline | ratio | goal | met?
# and writes tests/bench/out/results.csv and tests/bench/out/results.png.
# See tests/bench/README.md for what each row and goal means.
#
#   bash tests/bench/run.sh [--quick] [--size-mb N] [--members N] [--runs N]
#                           [--samples N] [--shards N] [--random-members N]
#                           [--am-cap SECONDS] [--dl CLASSESxPER] [--only LIST]
#
# Default sizes fit a 2-core, 24 GB machine (about 15 minutes); --quick takes
# about 3. Needs root (packages, drop_caches); without root the "dropped" rows
# are skipped and missing packages are only listed.
set -eu
cd "$(dirname "$0")/../.."
for a in "$@"; do
	case $a in -h|--help) exec /usr/bin/python3 tests/bench/lib_bench.py --bin x --help ;; esac
done

# ---- packages: the build and test ones, plus archivemount and gnuplot -------
sh scripts/install-deps.sh --test
missing=
for p in archivemount gnuplot-nox; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	if [ "$(id -u)" = 0 ]; then
		echo "run.sh: installing$missing"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null ||
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null; }
	else
		echo "run.sh: missing packages:$missing (their rows/chart are skipped)" >&2
	fi
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
