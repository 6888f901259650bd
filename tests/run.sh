#!/bin/bash
# The whole test suite, as CI runs it: installs what the tests need, checks that this machine
# can mount FUSE file systems (tests/lib/precheck.py: one clear message and exit 1 if not),
# checks the C files' format, builds warning-free (-Werror) and runs every test, then builds
# again with AddressSanitizer + UndefinedBehaviorSanitizer and runs every test again (the
# fuzzers' regression inputs too), then with ThreadSanitizer and runs the unit suite (the
# concurrency tests), and last builds once more as a release (-O2 -g0 -DNDEBUG), warning-free,
# without running tests: the optimizer's warnings (maybe-uninitialized, stringop-*) show only
# there, and the benches and the package use that build. Every build directory is configured afresh (meson setup --reconfigure
# with every option that tells the builds apart), and its configuration is checked, so a
# build/ set up by hand runs as this script says.
# Ends with one line "tests: N passed, N failed, N skipped", after one line per skipped test
# with its reason.
#
#   tests/run.sh [--strict] [--builds plain,asan,tsan,release] [-- MESON-TEST-ARGS...]
#
# --strict (and CI=true, which CI sets): any skip fails the run, and a missing test package is
# a failure of the precheck. Without it, a test skips only for a reason the run allows
# (tests/lib/shardfs_test/mount.py skip_allowed: a missing optional package, a limit of the
# machine; never an unusable FUSE). --builds runs only those builds; MESON-TEST-ARGS (test
# names, --suite ...) select tests, e.g. tests/run.sh --builds plain -- --suite lib
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
builds=plain,asan,tsan,release
select=()
while [ $# -gt 0 ]; do
	case "$1" in
	--strict) export SHARDFS_TEST_STRICT=1 ;;
	--builds) builds=$2; shift ;;
	--) shift; select=("$@"); break ;;
	*) echo "usage: tests/run.sh [--strict] [--builds plain,asan,tsan,release] [-- MESON-TEST-ARGS...]" >&2
	   exit 2 ;;
	esac
	shift
done
strict=0
{ [ "${SHARDFS_TEST_STRICT:-}" = 1 ] || [ "${CI:-}" = true ]; } && strict=1
want() { case ",$builds," in *",$1,"*) return 0 ;; esac; return 1; }
sh scripts/install-deps.sh --test || exit 1
# the tests' Python (meson's find_program('/usr/bin/python3', 'python3'))
py=/usr/bin/python3
[ -x "$py" ] || py=python3
# One clear failure on a machine that cannot mount, instead of a suite that fails (or, before,
# skipped) test by test.
if [ $strict = 1 ]; then
	"$py" tests/lib/precheck.py --strict || { echo "tests: FAILED (precheck)"; exit 1; }
else
	"$py" tests/lib/precheck.py || { echo "tests: FAILED (precheck)"; exit 1; }
fi

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

# Does the configuration of build dir $1 have the options given as -Dname=value after it?
# (werror, warning_level, b_sanitize, b_lundef; c_args as a list)
check_config() {
	local dir=$1
	shift
	meson introspect --buildoptions "$dir" | "$py" -c '
import json, sys
opts = {o["name"]: o["value"] for o in json.load(sys.stdin)}
bad = []
for a in sys.argv[2:]:
    if not a.startswith("-D"):
        continue
    k, v = a[2:].split("=", 1)
    got = opts.get(k)
    want = [x for x in v.split()] if isinstance(got, list) else v
    if isinstance(got, bool):
        got = "true" if got else "false"
    elif isinstance(got, int):
        got = str(got)
    if got != want:
        bad.append("%s: configured %r, wanted %r" % (k, got, want))
for b in bad:
    print("meson configuration of %s: %s" % (sys.argv[1], b))
sys.exit(1 if bad else 0)' "$dir" "$@"
}

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
	# every option that tells the builds apart, given each time: a build directory set up
	# before (by hand, or by an older run.sh) is reconfigured to exactly this
	local d base=()
	for d in -Dwerror=true -Dwarning_level=3 -Db_sanitize=none -Db_lundef=true -Dc_args=; do
		case " ${setup_args[*]} " in *" ${d%%=*}="*) ;; *) base+=("$d") ;; esac
	done
	setup_args=("${base[@]}" "${setup_args[@]}")
	echo "=== $name: meson setup $dir ${setup_args[*]}"
	local how=()
	[ -f "$dir/build.ninja" ] && how=(--reconfigure)
	if ! meson setup "${how[@]}" "$dir" "${setup_args[@]}" >"$dir.setup.log" 2>&1 ||
		! check_config "$dir" "${setup_args[@]}" >>"$dir.setup.log" 2>&1; then
		cat "$dir.setup.log"
		echo "=== $name: SETUP FAILED"
		status=1
		total_fail=$((total_fail + 1))
		return
	fi
	if ! meson compile -C "$dir" >"$dir.compile.log" 2>&1; then
		cat "$dir.compile.log"
		echo "=== $name: BUILD FAILED"
		status=1
		total_fail=$((total_fail + 1))
		return
	fi
	meson test -C "$dir" --print-errorlogs --num-processes "$procs" "${test_args[@]}" "${select[@]}" ||
		status=1
	local counts
	# each skip with its reason (the test's "SKIP: ..." line); in a strict run a skip fails
	counts=$("$py" - "$dir/meson-logs/testlog.json" "$name" "$strict" <<'PY'
import json, sys
p = f = s = 0
for line in open(sys.argv[1]):
    t = json.loads(line)
    r = t.get("result")
    if r in ("OK", "EXPECTEDFAIL"): p += 1
    elif r == "SKIP":
        why = [ln for ln in (t.get("stdout") or "").splitlines() if "SKIP" in ln]
        print("=== %s: %s %s: %s" % (sys.argv[2], "SKIP NOT ALLOWED (--strict/CI=true)"
                                    if sys.argv[3] == "1" else "skipped", t.get("name"),
                                    why[-1] if why else "(no reason printed)"), file=sys.stderr)
        if sys.argv[3] == "1": f += 1
        else: s += 1
    else: f += 1
print(p, f, s)
PY
)
	set -- $counts
	total_pass=$((total_pass + $1)) total_fail=$((total_fail + $2)) total_skip=$((total_skip + $3))
	echo "=== $name: $1 passed, $2 failed, $3 skipped"
}

# Two tests at a time, in every run (plain, ASan+UBSan, TSan): a test that changes or measures
# what the whole machine sees (drops the page cache, holds the user's inotify instances, ...) is
# marked is_parallel: false in its meson.build and meson runs it alone; lint-parallel
# (tests/pkg/test_parallel.py) refuses a test that reaches such a thing unmarked.
procs=2
want plain && run_suite plain build
# Sanitizers: UB aborts instead of printing and going on; reports (also from
# the daemon, whose stderr is closed once it runs in the background) are
# written under build-asan/sanitizer/ and fail the run.
rm -rf build-asan/sanitizer && mkdir -p build-asan/sanitizer
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:log_path=$root/build-asan/sanitizer/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$root/build-asan/sanitizer/ubsan"
# the fuzz harnesses' regression inputs (suite fuzz-regress; the harnesses are built with
# ASan+UBSan by clang) run here too, the 15 s fuzzing runs only in the plain run
want asan && run_suite asan+ubsan build-asan -Db_sanitize=address,undefined -Db_lundef=false \
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
want tsan && run_suite tsan build-tsan -Db_sanitize=thread -Db_lundef=false -- --suite unit --suite tsan-mount
if ls build-tsan/sanitizer/* >/dev/null 2>&1; then
	echo "=== sanitizer reports:"
	cat build-tsan/sanitizer/*
	status=1
	total_fail=$((total_fail + 1))
fi
unset TSAN_OPTIONS

# Release: built, not run (counted as one test). Its own directory: build-rel/ is the benches'.
if want release; then
	echo "=== release: meson setup build-release --buildtype=release -Dwerror=true -Dwarning_level=3"
	how=()
	[ -f build-release/build.ninja ] && how=(--reconfigure)
	if meson setup "${how[@]}" build-release --buildtype=release -Dwerror=true -Dwarning_level=3 \
		>build-release.setup.log 2>&1 && meson compile -C build-release >build-release.compile.log 2>&1; then
		total_pass=$((total_pass + 1))
		echo "=== release: built warning-free"
	else
		cat build-release.setup.log build-release.compile.log 2>/dev/null | tail -60
		echo "=== release: BUILD FAILED"
		status=1
		total_fail=$((total_fail + 1))
	fi
fi

echo "tests: $total_pass passed, $total_fail failed, $total_skip skipped"
[ "$status" = 0 ] && [ "$total_fail" = 0 ]
