#!/bin/bash
# The whole test suite, as CI runs it: installs what the tests need, checks
# the C files' format, builds warning-free (-Werror) and runs every test, then builds again with
# AddressSanitizer + UndefinedBehaviorSanitizer and runs every test again,
# then with ThreadSanitizer and runs the unit suite (the concurrency tests).
# Ends with one line "tests: N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
sh scripts/install-deps.sh --test || exit 1

total_pass=0 total_fail=0 total_skip=0 status=0

# Format: every C file as .clang-format says (clang-format -i FILE fixes one).
# Counted as one test.
echo "=== format: clang-format --dry-run -Werror"
if { git ls-files '*.c' '*.h' 2>/dev/null || find . -path './build*' -prune -o -name '*.[ch]' -print; } |
	xargs clang-format --dry-run -Werror; then
	total_pass=$((total_pass + 1))
	echo "=== format: ok"
else
	echo "=== format: FAILED (the files above differ from clang-format's output)"
	status=1
	total_fail=$((total_fail + 1))
fi

run_suite() { # name builddir meson-setup-args... [-- meson-test-args...]
	local name=$1 dir=$2
	local setup_args=() test_args=()
	shift 2
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do
		setup_args+=("$1")
		shift
	done
	[ $# -gt 0 ] && shift
	test_args=("$@")
	echo "=== $name: meson setup $dir ${setup_args[*]}"
	if [ ! -f "$dir/build.ninja" ]; then
		meson setup "$dir" -Dwerror=true "${setup_args[@]}" >"$dir.setup.log" 2>&1 ||
			{ cat "$dir.setup.log"; status=1; total_fail=$((total_fail + 1)); return; }
	fi
	if ! meson compile -C "$dir" >"$dir.compile.log" 2>&1; then
		cat "$dir.compile.log"
		echo "=== $name: BUILD FAILED"
		status=1
		total_fail=$((total_fail + 1))
		return
	fi
	meson test -C "$dir" --print-errorlogs --num-processes 1 "${test_args[@]}" || status=1
	local counts
	counts=$(python3 - "$dir/meson-logs/testlog.json" <<'PY'
import json, sys
p = f = s = 0
for line in open(sys.argv[1]):
    r = json.loads(line).get("result")
    if r in ("OK", "EXPECTEDFAIL"): p += 1
    elif r == "SKIP": s += 1
    else: f += 1
print(p, f, s)
PY
)
	set -- $counts
	total_pass=$((total_pass + $1)) total_fail=$((total_fail + $2)) total_skip=$((total_skip + $3))
	echo "=== $name: $1 passed, $2 failed, $3 skipped"
}

run_suite plain build
# Sanitizers: UB aborts instead of printing and going on; reports (also from
# the daemon, whose stderr is closed once it runs in the background) are
# written under build-asan/sanitizer/ and fail the run.
rm -rf build-asan/sanitizer && mkdir -p build-asan/sanitizer
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:log_path=$root/build-asan/sanitizer/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$root/build-asan/sanitizer/ubsan"
run_suite asan+ubsan build-asan -Db_sanitize=address,undefined -Db_lundef=false \
	-Dc_args=-fno-sanitize-recover=all -- --no-suite fuzz --no-suite slow --no-suite pkg-deb
if ls build-asan/sanitizer/* >/dev/null 2>&1; then
	echo "=== sanitizer reports:"
	cat build-asan/sanitizer/*
	status=1
	total_fail=$((total_fail + 1))
fi
unset ASAN_OPTIONS UBSAN_OPTIONS

# ThreadSanitizer: the unit suite only (the mount tests' daemon under TSan
# is for later); reports go under build-tsan/sanitizer/ and fail the run.
rm -rf build-tsan/sanitizer && mkdir -p build-tsan/sanitizer
export TSAN_OPTIONS="halt_on_error=1:log_path=$root/build-tsan/sanitizer/tsan"
run_suite tsan build-tsan -Db_sanitize=thread -Db_lundef=false -- --suite unit --suite tsan-mount
if ls build-tsan/sanitizer/* >/dev/null 2>&1; then
	echo "=== sanitizer reports:"
	cat build-tsan/sanitizer/*
	status=1
	total_fail=$((total_fail + 1))
fi
unset TSAN_OPTIONS

echo "tests: $total_pass passed, $total_fail failed, $total_skip skipped"
[ "$status" = 0 ] && [ "$total_fail" = 0 ]
