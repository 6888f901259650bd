#!/bin/sh
# Build the libFuzzer harnesses (build.sh) and run them.
#
#   tests/fuzz/run.sh [SECONDS] [HARNESS...]   fuzz each harness for SECONDS
#                                              (default 20), after its
#                                              regression inputs
#   tests/fuzz/run.sh --regress [HARNESS...]   only replay tests/fuzz/regress/
#
# Harnesses: tar index xml listing pack ifview. Each one starts from its seed corpus
# (tests/fuzz/corpus/NAME) plus the inputs earlier runs found (kept in
# $FUZZ_BUILD_DIR/corpus/NAME, default build-fuzz/, not in the repository),
# with -timeout=10 (a hang is a finding) and -rss_limit_mb=2048. A crashing,
# hanging or leaking input is kept as tests/fuzz/crashes/NAME-crash-<sha1>
# (gitignored) and copied to tests/fuzz/regress/NAME/, so every later run
# replays it: minimize it, fix the bug, commit it (also to
# tests/fuzz/corpus/NAME/). A harness without regression inputs fails.
#
# Exit status: 0 all clean, 1 a harness failed, 77 clang's fuzzer runtime is
# missing (only when CI is not "true": in CI that is a failure).
#
# Longer runs: tests/fuzz/run.sh 3600, or by hand, e.g.
#   build-fuzz/fuzz_tar -timeout=10 -rss_limit_mb=2048 -jobs=2 -workers=2 \
#       build-fuzz/corpus/tar tests/fuzz/corpus/tar
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${FUZZ_BUILD_DIR:-$root/build-fuzz}
export FUZZ_BUILD_DIR="$out"
# stacks for UBSan findings too (ASan prints them anyway)
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
all="tar index xml listing pack ifview"

secs=20
regress_only=0
case "${1:-}" in
--regress) regress_only=1; shift ;;
[0-9]*) secs=$1; shift ;;
esac
names=${*:-$all}

sh "$here/build.sh"
rc=$?
if [ $rc = 77 ]; then
	if [ "${CI:-}" = "true" ]; then
		echo "fuzz: FAIL: no fuzzer runtime, and CI=true" >&2
		exit 1
	fi
	exit 77
fi
[ $rc = 0 ] || { echo "fuzz: FAIL: build" >&2; exit 1; }

mkdir -p "$here/crashes"
failed=""
for n in $names; do
	bin="$out/fuzz_$n"
	[ -x "$bin" ] || { echo "fuzz: no harness '$n'" >&2; exit 1; }
	log="$out/fuzz_$n.log"

	# Regression inputs: every file is run once; any crash fails. Every harness has some.
	if ! [ -d "$here/regress/$n" ] || [ -z "$(ls -A "$here/regress/$n")" ]; then
		echo "fuzz: $n: FAIL: no regression inputs in tests/fuzz/regress/$n/"
		failed="$failed $n"
		continue
	fi
	if true; then
		if "$bin" -timeout=10 -rss_limit_mb=2048 "$here/regress/$n"/* >"$log" 2>&1; then
			echo "fuzz: $n: regression inputs pass ($(ls "$here/regress/$n" | wc -l) files)"
		else
			echo "fuzz: $n: FAIL on a regression input (log: $log)"
			tail -n 40 "$log"
			failed="$failed $n"
			continue
		fi
	fi
	[ $regress_only = 1 ] && continue

	mkdir -p "$out/corpus/$n"
	dict=""
	[ -f "$here/$n.dict" ] && dict="-dict=$here/$n.dict"
	rm -f "$here/crashes/$n-"*
	# shellcheck disable=SC2086
	"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 $dict \
		-artifact_prefix="$here/crashes/$n-" "$out/corpus/$n" "$here/corpus/$n" >"$log" 2>&1
	frc=$?
	# last status line: #runs, cov, ft, corp, exec/s
	stat=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
	if [ $frc = 0 ]; then
		echo "fuzz: $n: ok ${secs}s: $stat"
	else
		echo "fuzz: $n: FAIL (exit $frc, log: $log): $stat"
		grep -E 'ERROR: |SUMMARY: |runtime error|contract broken|artifact_prefix|Test unit written' "$log" | head -n 20
		grep -E '^ +#[0-9]+ ' "$log" | head -n 15
		# the input becomes a regression input at once (replayed by every later run until
		# the bug is fixed; minimize it and commit it with the fix)
		for c in "$here/crashes/$n-"*; do
			[ -f "$c" ] || continue
			cp "$c" "$here/regress/$n/" && echo "fuzz: $n: kept $(basename "$c") in tests/fuzz/regress/$n/"
		done
		failed="$failed $n"
	fi
done
if [ -n "$failed" ]; then
	echo "fuzz: FAILED:$failed (inputs in tests/fuzz/crashes/)"
	exit 1
fi
echo "fuzz: all clean"
