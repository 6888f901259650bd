#!/bin/bash
# A/B of the planned cold epoch (link_bench.py's L8 rows, bytes only) between builds, the builds
# alternated run by run in a rotating order in one invocation, with a count of the daemon over
# that epoch that load disturbs less than wall time:
#
#   bash tests/bench/ab_plan.sh [--rounds 6] [--mode stat|strace|callgrind|none] [--out DIR]
#                               [--data DIR] [--clean] NAME=BIN[:READ]...
#
# BIN: a shardfs binary (release build: `compare.sh` makes build-bench-REV/shardfs); READ: the
# side's link_bench.py --bytes-read (read_file, the default; open; read_bytes), so two sides of
# one BIN compare the loader's reads (old=B:open new=B:read_file); --data:
# link_bench.py's --data (default /var/tmp/shardfs-linkbench-512). Every run is
# `link_bench.py BIN --quick --only plan --skip-unplanned --plan-loaders bytes --ais-rounds 0`
# with one emulator for all sides ($SHARDFS_LINKEMU, else the first BIN's build's tests/linkemu,
# copied once: the emulator is the measuring tool). --mode, over the planned cold epoch
# (link_bench.py --epoch-hook):
#   stat       perf stat of the daemon's software events: task-clock, context-switches,
#              page-faults, cpu-migrations (this VM has no hardware counters)
#   strace     strace -c -f of the daemon: syscalls by name (slows the daemon: one run a side)
#   callgrind  the daemon runs in the foreground under valgrind --tool=callgrind, counts zeroed
#              at the epoch's start and dumped at its end: the user-space instructions (Ir) of
#              the epoch, the same whatever the load (the kernel's work, copies and syscalls,
#              is not in them); the epoch takes some 10-20 s
#   none       link_bench.py alone
# Prints per side the median (min-max) over the rounds of the epoch's wall time, requests (the
# store's; the FUSE READs, IOCTLs, LOOKUPs), CPU-s (loader, daemon, emulator, the daemon's
# threads), context switches (by thread; per sample), minor faults, the mode's counts, L8b, L8g,
# L8g local, L8h (planned and local switches per GB) and the load (1 min) at each run's start.
# The mode's counts are taken over the first local-directory epoch too (the hook's {epoch}:
# its files $tag.local.*), printed as the `local ...` rows beside the planned epoch's: both
# epochs' daemons measured the same way in one invocation (per READ: `... per read`).
# An epoch during which another process dropped the page cache (its LOOKUPs and cache misses
# come back) is counted apart: `dropped` (1) in its column, and left out with --clean.
set -eu
cd "$(dirname "$0")/../.."
rounds=6 mode=stat out='' clean=''
data=()
names=() bins=() reads=()
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--mode) mode=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--data) data=(--data "$2"); shift 2 ;;
	--clean) clean=--clean; shift ;;
	-*) echo "usage: $0 [--rounds N] [--mode stat|strace|callgrind|none] [--out DIR]" \
		"[--data DIR] [--clean] NAME=BIN[:READ]..." >&2
	    exit 2 ;;
	*=*:*) names+=("${1%%=*}") b=${1#*=} bins+=("$(realpath "${b%:*}")") reads+=("${b##*:}")
	       shift ;;
	*=*) names+=("${1%%=*}") bins+=("$(realpath "${1#*=}")") reads+=(read_file); shift ;;
	*) echo "$0: $1: want NAME=BIN[:READ]" >&2; exit 2 ;;
	esac
done
[ ${#bins[@]} -ge 1 ] || { echo "$0: no NAME=BIN" >&2; exit 2; }
case $mode in stat | strace | callgrind | none) ;; *) echo "$0: --mode $mode?" >&2; exit 2 ;; esac
out=${out:-$(mktemp -d /var/tmp/shardfs-ab-plan.XXXXXX)}
mkdir -p "$out"
if [ -z "${SHARDFS_LINKEMU:-}" ]; then
	cp "$(dirname "${bins[0]}")/tests/linkemu" "$out/linkemu"
	export SHARDFS_LINKEMU=$out/linkemu
fi
n=${#bins[@]}
runbin=("${bins[@]}")
if [ "$mode" = callgrind ]; then
	# the mount (not --help, pack, umount) in the foreground under callgrind; the wrapper
	# returns once the mount answers, as `shardfs mount` does
	for i in $(seq 0 $((n - 1))); do
		w=$out/cg-${names[$i]}.sh
		cat >"$w" <<EOF
#!/bin/bash
if [ "\$1" = mount ] && [ "\$2" = --cache-dir ]; then
	mp="\${@: -1}"
	setsid valgrind --tool=callgrind -q --callgrind-out-file=$out/cg-${names[$i]}.%p.out \\
		${bins[$i]} mount -f "\${@:2}" >>$out/cg-${names[$i]}.log 2>&1 </dev/null &
	for i in \$(seq 1200); do # 600 s
		[ -e "\$mp/.shardfs/stats" ] && exit 0
		kill -0 \$! 2>/dev/null || exit 1
		sleep 0.5
	done
	exit 1
fi
exec ${bins[$i]} "\$@"
EOF
		chmod +x "$w"
		runbin[$i]=$w
	done
fi
for r in $(seq "$rounds"); do
	for k in $(seq 0 $((n - 1))); do
		i=$(((k + r - 1) % n))
		tag=$out/r$r-${names[$i]}
		hook=()
		# {epoch}: '' over the planned cold epoch, .local over the local-directory ones
		# (the last such epoch's files stay: the same as the first's but for load)
		t=$tag{epoch}
		wait_end="for i in \$(seq 100); do kill -0 \$(cat $t.hpid) 2>/dev/null || break; sleep 0.2; done"
		case $mode in
		stat) hook=(--epoch-hook
			"perf stat -e task-clock,context-switches,page-faults,cpu-migrations -p {pid} \
				-o $t.stat & echo \$! >$t.hpid"
			"kill -INT \$(cat $t.hpid); $wait_end") ;;
		strace) hook=(--epoch-hook
			"strace -c -f -p {pid} -o $t.strace 2>/dev/null & echo \$! >$t.hpid; sleep 1"
			"kill -INT \$(cat $t.hpid); $wait_end") ;;
		callgrind) hook=(--epoch-hook "callgrind_control -z {pid} >/dev/null"
			"callgrind_control -d {pid} >$t.cgdump") ;;
		esac
		echo "=== round $r/$rounds: ${names[$i]} (load $(cut -d' ' -f1 /proc/loadavg))"
		/usr/bin/python3 tests/bench/link_bench.py "${runbin[$i]}" --quick --only plan \
			--skip-unplanned --plan-loaders bytes --bytes-read "${reads[$i]}" --ais-rounds 0 \
			"${data[@]}" "${hook[@]}" \
			>"$tag.out" 2>"$tag.err" || echo "=== ${names[$i]}: link_bench.py failed: $tag.err"
	done
done
/usr/bin/python3 - "$out" $clean <<'PY'
import glob, os, re, statistics, sys
d, clean = sys.argv[1], '--clean' in sys.argv
rows = {}
for f in sorted(glob.glob(os.path.join(d, 'r*-*.err'))):
    tag = os.path.basename(f)[:-4]
    side = tag.split('-', 1)[1]
    txt = open(f).read().splitlines()
    rec = {}
    for i, ln in enumerate(txt):
        if 'epoch (bytes, plan)' not in ln:
            continue
        m = re.search(r'(\d+) samples, ([\d.]+) s;', ln)
        rec['samples'], rec['secs'] = int(m.group(1)), float(m.group(2))
        for k in ('store_requests', 'reads', 'lookups', 'cache_misses', 'plan_stage_waits',
                  'ioctls'):
            m = re.search(r'\b%s (-?\d+)' % k, ln)  # -1 or absent: a build without it
            if m and int(m.group(1)) >= 0:
                rec[k] = int(m.group(1))
        m = re.search(r'CPU s: loader ([\d.]+), daemon ([\d.]+), emulator ([\d.]+); daemon '
                      r'context switches (\d+)', ln)
        rec.update(zip(('cpu loader', 'cpu daemon', 'cpu emulator'), map(float, m.groups()[:3])))
        rec['switches'] = int(m.group(4))
        rec['switches per sample'] = rec['switches'] / max(rec['samples'], 1)
        for ln2 in txt[i + 1:i + 12]:
            if 'epoch (' in ln2:
                break
            m = re.search(r'minor page faults: (\d+)', ln2)
            if m:
                rec['minor faults'] = int(m.group(1))
            if 'page cache was dropped' in ln2:
                rec['dropped'] = 1
            # the stage's peak and its region's chunks faulted in (plan_stage_chunks)
            m = re.search(r'plan_stage_peak_bytes, since the mount\): (\d+)', ln2)
            if m:
                rec['stage peak MB'] = int(m.group(1)) / 1e6
            m = re.search(r'plan_stage_chunks, since the mount\): (\d+)', ln2)
            if m:
                rec['stage chunks'] = int(m.group(1))
            if 'daemon CPU s by thread' in ln2:
                for k, v in re.findall(r'(\S+) ([\d.]+)(?:,|$)', ln2.split('thread: ')[1]):
                    rec['cpu ' + k] = float(v)
            if 'daemon context switches by thread' in ln2:
                for k, v1, v2 in re.findall(r'(\S+) (\d+)\+(\d+) \(',
                                            ln2.split('involuntary: ')[1]):
                    rec['switches ' + k] = int(v1) + int(v2)
        break
    if not rec:
        continue
    # the local-directory epoch's READs (its log line), for its counts per READ
    lreads = None
    for ln in txt:
        m = re.search(r'epoch \(bytes, no plan, local source\):.*\breads (\d+)', ln)
        if m:
            lreads = int(m.group(1))
            break
    for pre, ext, nreads in (('', '', rec.get('reads')), ('local ', '.local', lreads)):
        p = f[:-4] + ext + '.stat'
        if os.path.exists(p):
            s = open(p).read()
            for k in ('task-clock', 'context-switches', 'page-faults', 'cpu-migrations'):
                m = re.search(r'([\d,.]+)\s+(?:msec\s+)?%s' % k, s)
                if m:
                    rec[pre + 'perf ' + k] = float(m.group(1).replace(',', ''))
        p = f[:-4] + ext + '.strace'
        if os.path.exists(p):
            for ln in open(p):
                m = re.match(r'\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$', ln)
                if m and m.group(2) != 'total':
                    rec[pre + 'syscalls ' + m.group(2)] = int(m.group(1))
                    rec[pre + 'syscalls (all)'] = (rec.get(pre + 'syscalls (all)', 0) +
                                                   int(m.group(1)))
            if nreads and rec.get(pre + 'syscalls (all)'):
                rec[pre + 'syscalls per read'] = rec[pre + 'syscalls (all)'] / nreads
        p = f[:-4] + ext + '.cgdump'
        if os.path.exists(p):
            m = re.search(r'PID (\d+)', open(p).read())
            dumps = glob.glob(os.path.join(d, 'cg-%s.%s.out.*' % (side, m.group(1)))) if m \
                else []
            if dumps:
                t = open(sorted(dumps)[-1]).read()
                rec[pre + 'Ir (M)'] = int(re.search(r'^totals: (\d+)', t, re.M).group(1)) / 1e6
                if nreads:
                    rec[pre + 'Ir per read'] = rec[pre + 'Ir (M)'] * 1e6 / nreads
    o = open(f[:-4] + '.out').read()
    m = re.search(r'row\tL8b\.[^\t]*\t[^\t]*\t[\d.]+\t([\d.]+)\ts\t([\d.]+)', o)
    if m:
        rec['local epoch s'], rec['L8b'] = float(m.group(1)), float(m.group(2))
    # the rows' figures: L8g (planned, CPU-s per GB), L8g local, L8h (planned and local
    # switches per GB)
    for lab, key, col in (('L8g. bytes only: daemon CPU s per GB read, planned cold epoch vs '
                           'the budget', 'L8g', 0), ('L8g local.', 'L8g local', 0),
                          ('L8h.', 'L8h switches/GB', 0), ('L8h.', 'L8h local switches/GB', 1)):
        m = re.search(r'^row\t%s[^\t]*\t[^\t]*\t([\d.e+-]*)\t([\d.e+-]*)\t' % re.escape(lab),
                      o, re.M)
        if m and m.group(col + 1):
            rec[key] = float(m.group(col + 1))
    # the local-directory epochs' requests and switches per sample (the L8 notes)
    loc = [float(x) for x in re.findall(r'local-source epoch \d+: per sample .*?; daemon '
                                        r'context switches ([\d.]+)', o)]
    if loc:
        rec['local switches per sample'] = statistics.median(loc)
    m = re.search(r'local-source epoch \d+: per sample READ ([\d.]+), IOCTL ([\d.]+)', o)
    if m:
        rec['local READs per sample'], rec['local IOCTLs per sample'] = map(float, m.groups())
    m = re.search(r'plan rows: load average ([\d.]+)', o)
    if m:
        rec['load'] = float(m.group(1))
    if clean and rec.get('dropped'):
        continue
    rows.setdefault(side, []).append(rec)
keys = []
for side in rows:
    for rec in rows[side]:
        keys += [k for k in rec if k not in keys]
print('%-26s' % ('median (min-max) of' + (' (--clean)' if clean else '')) +
      ''.join(' %-35s' % s for s in rows))
for k in keys:
    line = '%-26s' % k
    for side in rows:
        v = [rec[k] for rec in rows[side] if k in rec]
        line += ' %-35s' % ('%.4g (%.4g-%.4g) n%d' % (statistics.median(v), min(v), max(v),
                                                    len(v)) if v else '-')
    print(line)
print('runs and dumps: %s' % d)
PY
