#!/bin/bash
# Before/after: the benchmark of commit REV and of this tree in one
# invocation, with the same rows, sizes and (this tree's) benchmark code for
# both, then one table with both results and ratios side by side.
#
#   bash tests/bench/compare.sh REV [lib_bench.py options, e.g. --quick --only link]
#
# REV is built from `git archive REV` in build-bench-before/ (release), this
# tree in build-bench/ as run.sh does. Tables: tests/bench/out/before.csv,
# after.csv and compare.csv. The two runs alternate nothing: run this on an
# otherwise idle machine, as run.sh.
set -eu
cd "$(dirname "$0")/../.."
case ${1:-} in
'' | -h | --help)
	echo "usage: bash tests/bench/compare.sh REV [lib_bench.py options]" >&2
	exit 2
	;;
esac
rev=$1
shift
git rev-parse --verify -q "$rev^{commit}" >/dev/null || {
	echo "compare.sh: $rev is not a commit" >&2
	exit 2
}
if ! sh scripts/install-deps.sh --bench; then
	echo "compare.sh: packages missing (see above): their rows are skipped" >&2
fi

old=build-bench-before
rm -rf "$old" "$old.src" && mkdir -p "$old.src"
git archive "$rev" | tar -x -C "$old.src"
meson setup "$old" "$old.src" --buildtype=release >/dev/null
meson compile -C "$old" >/dev/null
[ -f build-bench/build.ninja ] || meson setup build-bench --buildtype=release >/dev/null
meson compile -C build-bench >/dev/null

out=tests/bench/out
mkdir -p "$out"
rc=0
echo "=== before: $rev ($(git rev-parse --short "$rev"))"
/usr/bin/python3 tests/bench/lib_bench.py --bin "$old/shardfs" "$@" || rc=1
cp "$out/results.csv" "$out/before.csv"
echo "=== after: this tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', changed'))"
/usr/bin/python3 tests/bench/lib_bench.py --bin build-bench/shardfs "$@" || rc=1
cp "$out/results.csv" "$out/after.csv"

/usr/bin/python3 - "$out" <<'PY'
import csv, os, sys
out = sys.argv[1]
def rows(name):
    with open(os.path.join(out, name), newline='') as f:
        return {(r['workload'], r['options']): r for r in csv.DictReader(f)}
before, after = rows('before.csv'), rows('after.csv')
cols = ['workload', 'options', 'before', 'after', 'ratio before', 'ratio after', 'goal']
table = []
for key, a in after.items():
    b = before.get(key, {})
    table.append([key[0], key[1], b.get('shardfs', '-'), a['shardfs'], b.get('ratio', '-'),
                  a['ratio'], a['goal']])
with open(os.path.join(out, 'compare.csv'), 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(cols)
    w.writerows(table)
print('| ' + ' | '.join(cols) + ' |')
print('|' + '---|' * len(cols))
for t in table:
    print('| ' + ' | '.join(t) + ' |')
print('table: %s' % os.path.join(out, 'compare.csv'))
PY
exit "$rc"
