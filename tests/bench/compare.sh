#!/bin/bash
# Before/after: the benchmark of commit REV (or of several commits) and of this tree in one
# invocation, with the same rows, sizes and (this tree's) benchmark code for all, then one table
# with the results and ratios side by side.
#
#   bash tests/bench/compare.sh REV[,REV2...] [--rounds K] [lib_bench.py options, e.g. --quick --only link]
#
# Each REV is built from `git archive REV` in build-bench-REV/ (release; kept and reused while it
# is of the same commit), this tree in build-bench/ as run.sh does. With --rounds K (default 1)
# every side runs K times, the sides in a rotating order (round 1: REV..., this tree; round 2:
# this tree first, ...), so that load from other work hits every side alike; the table then gives
# each side's median over the rounds and its spread (min-max), and every run's load average
# (/proc/loadavg, 1 min, at its start and end) is printed. Tables: tests/bench/out/before.csv
# (the first REV's last run), after.csv (this tree's last run), runs.csv (every run) and
# compare.csv.
set -eu
cd "$(dirname "$0")/../.."
case ${1:-} in
'' | -h | --help)
	echo "usage: bash tests/bench/compare.sh REV[,REV...] [--rounds K] [lib_bench.py options]" >&2
	exit 2
	;;
esac
IFS=, read -r -a revs <<<"$1"
shift
rounds=1
args=()
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	*) args+=("$1"); shift ;;
	esac
done
for rev in "${revs[@]}"; do
	git rev-parse --verify -q "$rev^{commit}" >/dev/null || {
		echo "compare.sh: $rev is not a commit" >&2
		exit 2
	}
done
if ! sh scripts/install-deps.sh --bench; then
	echo "compare.sh: packages missing (see above): their rows are skipped" >&2
fi

names=() bins=()
for rev in "${revs[@]}"; do
	full=$(git rev-parse "$rev^{commit}")
	short=$(git rev-parse --short "$full")
	old=build-bench-$short
	if [ "$(cat "$old/.rev" 2>/dev/null)" != "$full" ]; then
		rm -rf "$old" "$old.src" && mkdir -p "$old.src"
		git archive "$full" | tar -x -C "$old.src"
		meson setup "$old" "$old.src" --buildtype=release >/dev/null
		echo "$full" >"$old/.rev"
	fi
	meson compile -C "$old" >/dev/null
	names+=("$short") bins+=("$old/shardfs")
done
[ -f build-bench/build.ninja ] || meson setup build-bench --buildtype=release >/dev/null
meson compile -C build-bench >/dev/null
names+=("tree:$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes')")
bins+=(build-bench/shardfs)

out=tests/bench/out
mkdir -p "$out"
rm -f "$out"/run-*.csv
rc=0
n=${#bins[@]}
for r in $(seq "$rounds"); do
	for k in $(seq 0 $((n - 1))); do
		i=$(( (k + r - 1) % n ))
		load0=$(cut -d' ' -f1 /proc/loadavg)
		echo "=== round $r/$rounds: ${names[$i]} (load $load0)"
		/usr/bin/python3 tests/bench/lib_bench.py --bin "${bins[$i]}" "${args[@]}" || rc=1
		load1=$(cut -d' ' -f1 /proc/loadavg)
		echo "=== round $r/$rounds: ${names[$i]} done (load $load0 -> $load1)"
		cp "$out/results.csv" "$out/run-$r-$i.csv"
		echo "$load0 $load1" >"$out/run-$r-$i.load"
		[ "$i" = 0 ] && cp "$out/results.csv" "$out/before.csv"
		[ "$i" = $((n - 1)) ] && cp "$out/results.csv" "$out/after.csv"
	done
done

/usr/bin/python3 - "$out" "$rounds" "${names[@]}" <<'PY'
import csv, os, re, statistics, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = {}  # side -> [(round, {key: row}, load)]
for r in range(1, rounds + 1):
    for i in range(len(names)):
        p = os.path.join(out, 'run-%d-%d.csv' % (r, i))
        if not os.path.exists(p):
            continue
        with open(p, newline='') as f:
            rs = {(x['workload'], x['options']): x for x in csv.DictReader(f)}
        load = open(p[:-4] + '.load').read().split()
        runs.setdefault(i, []).append((r, rs, load))
keys = []
for i in sorted(runs):
    for _, rs, _ in runs[i]:
        keys += [k for k in rs if k not in keys]

def num(s):
    m = re.match(r'\s*(-?[\d.]+)', s or '')
    return float(m.group(1)) if m else None

def unit(s):
    m = re.match(r'\s*-?[\d.]+\s*(.*)', s or '')
    return m.group(1) if m else ''

def summary(vals, u=''):
    vals = [v for v in vals if v is not None]
    if not vals:
        return '-'
    med = statistics.median(vals)
    s = '%.4g%s' % (med, ' ' + u if u else '')
    if len(vals) > 1:
        s += ' (%.4g-%.4g, %d)' % (min(vals), max(vals), len(vals))
    return s

cols = ['workload', 'options'] + ['%s shardfs' % n for n in names] + \
       ['%s ratio' % n for n in names] + ['goal']
table = []
with open(os.path.join(out, 'runs.csv'), 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(['side', 'round', 'load start', 'load end', 'workload', 'options', 'shardfs',
                'baseline', 'ratio'])
    for i in sorted(runs):
        for r, rs, load in runs[i]:
            for k, x in rs.items():
                w.writerow([names[i], r, load[0], load[1], k[0], k[1], x['shardfs'],
                            x['baseline'], x['ratio']])
for k in keys:
    line, goal = list(k), '-'
    for i in range(len(names)):
        xs = [rs[k] for _, rs, _ in runs.get(i, []) if k in rs]
        line.append(summary([num(x['shardfs']) for x in xs],
                            unit(xs[0]['shardfs']) if xs else ''))
    for i in range(len(names)):
        xs = [rs[k] for _, rs, _ in runs.get(i, []) if k in rs]
        line.append(summary([num(x['ratio']) for x in xs]))
        goal = xs[0]['goal'] if xs else goal
    line.append(goal)
    table.append(line)
with open(os.path.join(out, 'compare.csv'), 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(cols)
    w.writerows(table)
for i in sorted(runs):
    print('%s: load (1 min) at start -> end of each run: %s' % (
        names[i], ', '.join('%s->%s' % tuple(l) for _, _, l in runs[i])))
if rounds > 1:
    print('each cell: median over the rounds (min-max, rounds)')
print('| ' + ' | '.join(cols) + ' |')
print('|' + '---|' * len(cols))
for t in table:
    print('| ' + ' | '.join(t) + ' |')
print('table: %s; every run: %s' % (os.path.join(out, 'compare.csv'),
                                     os.path.join(out, 'runs.csv')))
PY
exit "$rc"
