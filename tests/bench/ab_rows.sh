#!/bin/bash
# A/B of single rows of the benchmark between builds, the builds alternated run by run in one
# invocation (issue 36: "every existing row within noise"): on a shared machine the load then
# hits every build alike, and the spread of one build's runs says what noise is.
#
#   bash tests/bench/ab_rows.sh [--rounds 9] [--shard-mb 256] [--member-kb 100] [--members 10000]
#                               [--shards 1000] [--rows ca,cc,tarseq,find,lslr,first] BIN...
#
# BIN: shardfs binaries (release builds: `compare.sh` makes build-bench-REV/shardfs). Rows, each
# as cache_bench.sh, index_bench.sh and lib_bench.py measure it, with every build's run of a
# round one after the other in a rotating order, and the baseline run once a round:
#   ca     Ca, page caches dropped: every member of a --shard-mb MB shard (nginx source,
#          prefetched) read with open/read/close by 2 processes, caches dropped before each run
#          (files/s; baseline: the extracted files)
#   cc     Cc, cold cat with readahead: a fresh mount with --connections 8 and an empty cache,
#          `cat` of the shard (MB/s; baseline: 8 parallel `curl --range` of an eighth each)
#   tarseq every member of the shard in tar order by 1 process, a fresh mount of its local
#          directory (index cached) each run, the tar warm in the page cache (files/s; the
#          shardfs side of lib_bench.py's archivemount rows)
#   find   `find` of --members members in 10 shards (a local directory), caches dropped (s;
#          baseline: find over the extracted files); its FUSE requests and the checks of the
#          mapped indexes' files (index_checks, a read(2) each) beside
#   lslr   `ls -lR` of the same tree on mounts of its own (every entry stat'ed: listings with attributes, a LOOKUP
#          for the first batch of each directory), caches dropped (s; baseline: ls -lR of the
#          extracted files)
#   first  mount to first read of --shards shards with sidecar indexes and a fresh cache (s;
#          no baseline: the row's budget is 1 s)
# With each row, the daemon's CPU in the run (all its threads' /proc schedstat run time), which
# load disturbs less than wall time.
# Prints, per row and build: the median, the quartiles, min and max over the rounds, the
# spread (max-min over the median) and the load average (1 min) of each round.
set -eu
cd "$(dirname "$0")/../.."
. tests/bench/lib_nginx.sh
rounds=9 shard_mb=256 member_kb=100 members=10000 shards=1000 rows=ca,cc,find,first
bins=()
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--shard-mb) shard_mb=$2; shift 2 ;;
	--member-kb) member_kb=$2; shift 2 ;;
	--members) members=$2; shift 2 ;;
	--shards) shards=$2; shift 2 ;;
	--rows) rows=$2; shift 2 ;;
	-*) echo "usage: $0 [--rounds N] [--shard-mb N] [--member-kb N] [--members N] [--shards N] [--rows ca,cc,tarseq,find,lslr,first] BIN..." >&2
	    exit 2 ;;
	*) bins+=("$(realpath "$1")"); shift ;;
	esac
done
[ ${#bins[@]} -ge 1 ] || { echo "$0: no BIN" >&2; exit 2; }
[ -w /proc/sys/vm/drop_caches ] || { echo "$0: needs root (drop_caches)" >&2; exit 2; }
has() { case ",$rows," in *",$1,"*) return 0 ;; esac; return 1; }
py=/usr/bin/python3
n=${#bins[@]}

tmp=$(mktemp -d /var/tmp/shardfs-ab-rows.XXXXXX)
chmod 755 "$tmp"
ngpid=
cleanup() {
	for m in "$tmp"/mnt*; do
		[ -d "$m" ] && mountpoint -q "$m" && fusermount3 -u "$m" >/dev/null 2>&1
	done
	[ -n "$ngpid" ] && kill "$ngpid" 2>/dev/null && wait "$ngpid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
timeit() { # command... -> seconds
	local t0 t1
	t0=$(now)
	"$@" >/dev/null
	t1=$(now)
	$py -c "import sys; print('%.4f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1"
}
mkdir -p "$tmp/res"
put() { echo "$3" >>"$tmp/res/$1.$2"; } # row side value
dcpu() { # mountpoint -> the daemon's CPU so far (ns, all its threads)
	local pid ns=0 f
	pid=$(sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' "$1/.shardfs/stats" | head -1)
	for f in /proc/"$pid"/task/*/schedstat; do
		ns=$((ns + $(cut -d' ' -f1 "$f" 2>/dev/null || echo 0)))
	done
	echo "$ns"
}
requests() { # mountpoint -> the FUSE requests it answered so far (lookups + getattrs + readdirs)
	$py -c "import json, sys; c = json.load(open(sys.argv[1])); print(sum(c.get(k, 0) for k in ('lookups', 'getattrs', 'readdirs')))" "$1/.shardfs/stats"
}
checks() { # mountpoint -> the checks of mapped indexes' files so far (index_checks; 0 for a
	# build without the counter)
	$py -c "import json, sys; print(json.load(open(sys.argv[1])).get('index_checks', 0))" "$1/.shardfs/stats"
}
cc -O2 -o "$tmp/readfiles" tests/bench/lib_readfiles.c

if has ca || has cc || has tarseq; then
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
	nginx_start "$tmp/ng" "$tmp/data" || exit 1
	url="$base/shard.tar"
	cat "$tmp/data/shard.tar" >/dev/null
fi
if has ca; then
	for i in $(seq 0 $((n - 1))); do
		mkdir -p "$tmp/mnt-ca$i"
		"${bins[$i]}" mount --cache-dir "$tmp/cache-ca$i" "$url" "$tmp/mnt-ca$i"
		"${bins[$i]}" prefetch "$tmp/mnt-ca$i" >/dev/null
		sed "s|^|$tmp/mnt-ca$i/shard/|" "$tmp/names" >"$tmp/list.ca$i"
		"$tmp/readfiles" "$tmp/list.ca$i" 2 >/dev/null # warm-up, untimed
	done
fi
if has tarseq; then
	# lib_bench.py's shardfs side of the archivemount rows: a fresh mount of the shard's local
	# directory (its index cached) for each run, every member in tar order by 1 process
	for i in $(seq 0 $((n - 1))); do
		mkdir -p "$tmp/mnt-tar"
		"${bins[$i]}" mount --cache-dir "$tmp/cache-tar$i" "$tmp/data" "$tmp/mnt-tar"
		ls "$tmp/mnt-tar/shard" >/dev/null
		"${bins[$i]}" umount "$tmp/mnt-tar" >/dev/null
	done
	sed "s|^|$tmp/mnt-tar/shard/|" "$tmp/names" >"$tmp/list.tar"
fi
tar_seq() { # i -> seconds of the reads (the mount's own time not counted), daemon CPU-s by then
	local s ns
	"${bins[$1]}" mount --cache-dir "$tmp/cache-tar$1" "$tmp/data" "$tmp/mnt-tar"
	s=$(timeit "$tmp/readfiles" "$tmp/list.tar" 1)
	ns=$(dcpu "$tmp/mnt-tar")
	echo "$s $((ns / 1000))e-6"
	"${bins[$1]}" umount "$tmp/mnt-tar" >/dev/null
}
if has find || has lslr; then
	per=$((members / 10))
	$py - "$tmp/src-find" "$tmp/ext-find" "$per" <<'PY'
import io, os, sys, tarfile
src, ext, per = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(src, exist_ok=True)
blob = os.urandom(2048)
for s in range(10):
    d = os.path.join(ext, f"shard-{s:06d}")
    with tarfile.open(os.path.join(src, f"shard-{s:06d}.tar"), "w") as t:
        for i in range(per):
            k = s * per + i
            name = f"c{k % 100:03d}/n{k:08d}.jpg"
            data = blob[: 512 + k % 1024]
            ti = tarfile.TarInfo(name); ti.size = len(data); ti.mtime = 1700000000
            t.addfile(ti, io.BytesIO(data))
            p = os.path.join(d, name)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)
PY
	# lslr lists on mounts of its own: its stats mark every directory looked
	# (fs->looked_dirs), whose later listings then give every file's attributes
	for i in $(seq 0 $((n - 1))); do
		for row in find lslr; do
			has $row || continue
			mkdir -p "$tmp/mnt-$row$i"
			"${bins[$i]}" mount --cache-dir "$tmp/cache-$row$i" "$tmp/src-find" "$tmp/mnt-$row$i"
			find "$tmp/mnt-$row$i" >/dev/null # builds the indexes once
		done
	done
	find "$tmp/ext-find" >/dev/null
fi
if has first; then
	$py - "$tmp/many" "$shards" <<'PY'
import io, os, sys, tarfile
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d)
for s in range(n):
    with tarfile.open(os.path.join(d, 'shard-%06d.tar' % s), 'w') as t:
        for k in range(8):
            for ext, data in (('jpg', b'x' * 2048), ('cls', b'%d' % (k % 10))):
                ti = tarfile.TarInfo('%06d_%02d.%s' % (s, k, ext))
                ti.size = len(data)
                ti.mtime = 1700000000
                t.addfile(ti, io.BytesIO(data))
PY
	"${bins[0]}" index --sidecar --cache-dir "$tmp/cache-throwaway" "$tmp/many" >/dev/null
	target=$(printf 'shard-%06d/%06d_03.cls' $((shards - 1)) $((shards - 1)))
	mkdir -p "$tmp/mnt-first"
fi
first_read() { # i -> "seconds cpu-seconds"
	local t0 t1 ns
	rm -rf "$tmp/cache-first"
	t0=$(now)
	"${bins[$1]}" mount --cache-dir "$tmp/cache-first" "$tmp/many" "$tmp/mnt-first"
	cat "$tmp/mnt-first/$target" >/dev/null
	t1=$(now)
	ns=$(dcpu "$tmp/mnt-first")
	"${bins[$1]}" umount "$tmp/mnt-first" >/dev/null
	$py -c "import sys; print('%.4f %.4f' % (float(sys.argv[2]) - float(sys.argv[1]), int(sys.argv[3]) / 1e9))" "$t0" "$t1" "$ns"
}
curl8() {
	local i a b part=$(((size + 7) / 8))
	for i in 0 1 2 3 4 5 6 7; do
		a=$((i * part)) b=$(((i + 1) * part - 1))
		[ $b -ge "$size" ] && b=$((size - 1))
		curl -s -o /dev/null --range "$a-$b" "$url" &
	done
	wait
}
cold_cat() { # i -> seconds of the cat (the mount's own time not counted), daemon CPU-s by then
	local s ns
	mkdir -p "$tmp/mnt-cold"
	rm -rf "$tmp/cache-cold"
	"${bins[$1]}" mount --cache-dir "$tmp/cache-cold" --connections 8 "$url" "$tmp/mnt-cold"
	s=$(timeit cat "$tmp/mnt-cold/shard.tar")
	ns=$(dcpu "$tmp/mnt-cold")
	echo "$s $((ns / 1000))e-6"
	"${bins[$1]}" umount "$tmp/mnt-cold" >/dev/null
	rm -rf "$tmp/cache-cold"
}

for r in $(seq "$rounds"); do
	cut -d' ' -f1 /proc/loadavg >>"$tmp/res/load"
	order=()
	for k in $(seq 0 $((n - 1))); do order+=($(((k + r - 1) % n))); done
	if has ca; then
		drop
		put ca base "$(timeit "$tmp/readfiles" "$tmp/list.local" 2)"
		for i in "${order[@]}"; do
			drop
			c0=$(dcpu "$tmp/mnt-ca$i")
			put ca "$i" "$(timeit "$tmp/readfiles" "$tmp/list.ca$i" 2)"
			put cacpu "$i" "$((($(dcpu "$tmp/mnt-ca$i") - c0) / 1000))e-6"
		done
	fi
	if has cc; then
		cat "$tmp/data/shard.tar" >/dev/null
		put cc base "$(timeit curl8)"
		for i in "${order[@]}"; do
			cat "$tmp/data/shard.tar" >/dev/null
			read -r s c <<<"$(cold_cat "$i")"
			put cc "$i" "$s"
			put cccpu "$i" "$c"
		done
	fi
	if has tarseq; then
		cat "$tmp/data/shard.tar" >/dev/null
		for i in "${order[@]}"; do
			read -r s c <<<"$(tar_seq "$i")"
			put tarseq "$i" "$s"
			put tarseqcpu "$i" "$c"
		done
	fi
	if has find; then
		drop
		put find base "$(timeit find "$tmp/ext-find")"
		for i in "${order[@]}"; do
			drop
			c0=$(dcpu "$tmp/mnt-find$i") q0=$(requests "$tmp/mnt-find$i") k0=$(checks "$tmp/mnt-find$i")
			put find "$i" "$(timeit find "$tmp/mnt-find$i" -path "$tmp/mnt-find$i/shard-*/*")"
			put findcpu "$i" "$((($(dcpu "$tmp/mnt-find$i") - c0) / 1000))e-6"
			put findreq "$i" "$(($(requests "$tmp/mnt-find$i") - q0))"
			put findchk "$i" "$(($(checks "$tmp/mnt-find$i") - k0))"
		done
	fi
	if has lslr; then
		drop
		put lslr base "$(timeit ls -lR "$tmp/ext-find")"
		for i in "${order[@]}"; do
			drop
			c0=$(dcpu "$tmp/mnt-lslr$i") q0=$(requests "$tmp/mnt-lslr$i")
			put lslr "$i" "$(timeit ls -lR "$tmp/mnt-lslr$i")"
			put lslrcpu "$i" "$((($(dcpu "$tmp/mnt-lslr$i") - c0) / 1000))e-6"
			put lslrreq "$i" "$(($(requests "$tmp/mnt-lslr$i") - q0))"
		done
	fi
	if has first; then
		for i in "${order[@]}"; do
			read -r s c <<<"$(first_read "$i")"
			put first "$i" "$s"
			put firstcpu "$i" "$c"
		done
	fi
	echo "round $r/$rounds done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
cut -d' ' -f1 /proc/loadavg >>"$tmp/res/load"

$py - "$tmp/res" "${nfiles:-0}" "${size:-0}" "$rounds" "${bins[@]}" <<'PY'
import os, statistics, sys
res, nfiles, size, rounds, bins = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
def vals(row, side):
    p = os.path.join(res, '%s.%s' % (row, side))
    return [float(x) for x in open(p).read().split()] if os.path.exists(p) else None
rows = [('ca', 'Ca, page caches dropped', 'files/s', lambda t: nfiles / t),
        ('cacpu', 'Ca, page caches dropped: daemon CPU', 'CPU-s', lambda t: t),
        ('cc', 'Cc, cold cat (readahead), --connections 8', 'MB/s', lambda t: size / 1e6 / t),
        ('cccpu', 'Cc: daemon CPU (mount to end of cat)', 'CPU-s', lambda t: t),
        ('tarseq', 'members in tar order, fresh mount, local', 'files/s', lambda t: nfiles / t),
        ('tarseqcpu', 'tar order: daemon CPU (mount to end)', 'CPU-s', lambda t: t),
        ('find', 'find, caches dropped', 's', lambda t: t),
        ('findcpu', 'find, caches dropped: daemon CPU', 'CPU-s', lambda t: t),
        ('findreq', 'find: lookups + getattrs + readdirs', '', lambda t: t),
        ('findchk', 'find: index_checks (0: no such counter)', '', lambda t: t),
        ('lslr', 'ls -lR of the find tree, caches dropped', 's', lambda t: t),
        ('lslrcpu', 'ls -lR, caches dropped: daemon CPU', 'CPU-s', lambda t: t),
        ('lslrreq', 'ls -lR: lookups + getattrs + readdirs', '', lambda t: t),
        ('first', 'mount to first read, sidecar indexes', 's', lambda t: t),
        ('firstcpu', 'mount to first read: daemon CPU', 'CPU-s', lambda t: t)]
load = [float(x) for x in open(os.path.join(res, 'load')).read().split()]
print('load average (1 min) at the start of each round and at the end: %s' %
      ' '.join('%.1f' % x for x in load))
print('%-44s %-44s %10s %21s %21s %7s' % ('row', 'build', 'median', 'quartiles', 'min-max',
                                         'spread'))
for key, label, unit, f in rows:
    for side, name in [('base', 'baseline')] + list(enumerate(bins)):
        v = vals(key, side)
        if not v:
            continue
        v = sorted(f(x) for x in v)
        m = statistics.median(v)
        q = statistics.quantiles(v, n=4) if len(v) > 1 else [m, m, m]
        print('%-44s %-44s %10.4g %10.4g-%-10.4g %10.4g-%-10.4g %6.0f%% %s' % (
            label, name[-44:], m, q[0], q[2], v[0], v[-1],
            100 * (v[-1] - v[0]) / m if m else 0, unit))
PY
