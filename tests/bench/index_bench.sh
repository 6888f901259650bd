#!/bin/bash
# Index and listing benchmark. Not a test: it prints figures and
# ratios against baselines measured in the same run.
#
#   bash tests/bench/index_bench.sh [--build DIR] [--shard-mb 1024] [--member-kb 100]
#                                   [--members 100000] [--runs 1] [--fmt-shards 50]
#                                   [--only fmt]
#
# 1. index build of one shard of --shard-mb MB made of --member-kb KB members,
#    through a fresh mount (time of the first listing of the shard directory),
#    against `cat SHARD > /dev/null`; page cache warm and dropped.
# 2. index bytes per member on disk (the saved index file), with and without
#    the names, and the heap the mounted shard's index holds (index_mem_bytes
#    from stats: the file itself is mapped, not copied).
# 3. `find` over a mount of --members members (10 shards) against `find` over
#    the same files extracted on local disk; warm (second run) and dropped;
#    the same for `ls -lR` (default options: no xattrs), also with --xattr. With --runs N, each
#    listing figure is the median of N runs.
# 4. the index formats side by side (issue 39): --fmt-shards hardlinks of one shard of
#    8,600 members named like s12_004321.jpg / .cls (4,300 samples, 1 KB tar members, as
#    tests/bench/scale_bench.py's); mounted once with the old fixed-record index files
#    (version 2: SHARDFS_INDEX_VERSION=2 in the daemon's environment) and once with the
#    compact ones (version 3, the default), each with its own cache directory: bytes per
#    member of the index files on disk, daemon RssAnon after `find`, and `find`, `ls -lR`,
#    `stat` of every member and open+read of every 8th member over each mount against the
#    same tree on ext4 (one directory per shard of 8,600 hardlinks of one 1-byte file).
#    Bytes per member do not depend on the number of shards (one index file per shard).
#    --only fmt runs this section alone.
# Needs root for dropping caches (/proc/sys/vm/drop_caches); without it the
# dropped rows are skipped.
set -eu
cd "$(dirname "$0")/../.."
build=build shard_mb=1024 member_kb=100 members=100000 runs=1 fmt_shards=50 only=
while [ $# -gt 0 ]; do
	case $1 in
	--shard-mb) shard_mb=$2; shift 2 ;;
	--member-kb) member_kb=$2; shift 2 ;;
	--members) members=$2; shift 2 ;;
	--build) build=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--fmt-shards) fmt_shards=$2; shift 2 ;;
	--only) only=$2; shift 2 ;;
	*) echo "usage: $0 [--build DIR] [--shard-mb N] [--member-kb N] [--members N] [--runs N] [--fmt-shards N] [--only fmt]" >&2; exit 2 ;;
	esac
done
if [ "$build" = build ]; then
	sh scripts/install-deps.sh --test
	[ -f build/build.ninja ] || meson setup build >/dev/null
	meson compile -C build >/dev/null
fi
bin=$(cd "$build" && pwd)/shardfs
[ -x "$bin" ] || { echo "no $bin" >&2; exit 1; }
w=$(mktemp -d /var/tmp/shardfs-bench.XXXXXX)
mnt=$w/mnt
mkdir -p "$mnt"
cleanup() {
	"$bin" umount "$mnt" 2>/dev/null || fusermount3 -u "$mnt" 2>/dev/null || true
	rm -rf "$w"
}
trap cleanup EXIT

can_drop=0
if [ -w /proc/sys/vm/drop_caches ]; then can_drop=1; fi
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.4f}')" "$1" "$2"; }
ratio() { python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print(f'{a / b:.2f}' if b > 0 else 'n/a')" "$1" "$2"; }
stat_of() { python3 -c "import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$mnt/.shardfs/stats" "$1"; }

printf '%-52s %14s %14s %8s\n' workload shardfs baseline ratio

# ---- 4. index formats side by side (a function: --only fmt runs it alone) -------
formats() {
	local fs=$w/srcf ext=$w/extf
	python3 - "$fs" "$ext" "$fmt_shards" <<'PY'
import io, os, sys, tarfile
src, ext, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(src, exist_ok=True)
first = os.path.join(src, "shard-000000.tar")
with tarfile.open(first, "w", format=tarfile.GNU_FORMAT) as t:
    for i in range(4300):
        for e, data in (("cls", b"%d" % (i % 1000)), ("jpg", b"\xff\xd8\xff\xe0" + b"%012d" % i)):
            ti = tarfile.TarInfo("s12_%06d.%s" % (i, e)); ti.size = len(data); ti.mtime = 1700000000
            t.addfile(ti, io.BytesIO(data))
for s in range(1, n):
    os.link(first, os.path.join(src, "shard-%06d.tar" % s))
os.makedirs(ext, exist_ok=True)
one = os.path.join(ext, "one")
for s in range(n):  # one file per directory: ext4 allows 65,000 links to a file
    open(one, "wb").write(b"x")
    d = os.path.join(ext, "shard-%06d" % s)
    os.makedirs(d)
    for i in range(4300):
        for e in ("cls", "jpg"):
            os.link(one, os.path.join(d, "s12_%06d.%s" % (i, e)))
    os.unlink(one)
PY
	local nm=$((fmt_shards * 8600))
	# stat of every member, open+read of every 8th: python over a path list, the same on each side
	walk() { python3 - "$1" <<'PY'
import os, sys, time
root = sys.argv[1]
paths = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
t0 = time.perf_counter()
for p in paths:
    os.stat(p)
t1 = time.perf_counter()
for p in paths[::8]:
    with open(p, "rb") as f:
        f.read(1)
t2 = time.perf_counter()
print(f"{t1 - t0:.4f} {t2 - t1:.4f} {len(paths)}")
PY
	}
	declare -A bpm rss tfind tls tstat topen
	for v in 2 3; do
		rm -rf "$w/cachef$v"
		if [ $v = 2 ]; then
			SHARDFS_INDEX_VERSION=2 "$bin" mount --cache-dir "$w/cachef$v" "$fs" "$mnt"
		else
			"$bin" mount --cache-dir "$w/cachef$v" "$fs" "$mnt"
		fi
		find "$mnt" >/dev/null # builds and saves every index
		rss[$v]=$(awk '/RssAnon/ {print $2}' "/proc/$(stat_of pid)/status")
		local b
		b=$(find "$w/cachef$v" -path '*/meta/*' -type f -printf '%s\n' | awk '{s += $1} END {print s}')
		bpm[$v]=$(python3 -c "print(f'{$b / $nm:.2f}')")
		tf=() tl=() ts=() to=()
		for _ in $(seq "$runs"); do
			t0=$(now); find "$mnt" >/dev/null; t1=$(now); tf+=("$(secs "$t0" "$t1")")
			t0=$(now); ls -lR "$mnt" >/dev/null; t1=$(now); tl+=("$(secs "$t0" "$t1")")
			read -r a o _ < <(walk "$mnt"); ts+=("$a"); to+=("$o")
		done
		tfind[$v]=$(median "${tf[@]}") tls[$v]=$(median "${tl[@]}")
		tstat[$v]=$(median "${ts[@]}") topen[$v]=$(median "${to[@]}")
		"$bin" umount "$mnt"
	done
	tf=() tl=() ts=() to=()
	find "$ext" >/dev/null
	for _ in $(seq "$runs"); do
		t0=$(now); find "$ext" >/dev/null; t1=$(now); tf+=("$(secs "$t0" "$t1")")
		t0=$(now); ls -lR "$ext" >/dev/null; t1=$(now); tl+=("$(secs "$t0" "$t1")")
		read -r a o _ < <(walk "$ext"); ts+=("$a"); to+=("$o")
	done
	local efind elsr estat eopen
	efind=$(median "${tf[@]}") elsr=$(median "${tl[@]}") estat=$(median "${ts[@]}") eopen=$(median "${to[@]}")
	local lab="$fmt_shards x 8600 members"
	printf '%-52s %14s %14s %8s\n' "index on disk, B/member, compact vs old" "${bpm[3]}" "${bpm[2]} (v2)" \
		"$(ratio "${bpm[2]}" "${bpm[3]}")"
	printf '%-52s %14s %14s %8s\n' "  goal for the compact format" "<= 20" "" ""
	printf '%-52s %14s %14s %8s\n' "daemon RssAnon after find (KB), compact vs old" "${rss[3]}" "${rss[2]} (v2)" \
		"$(ratio "${rss[2]}" "${rss[3]}")"
	for row in "find:tfind:efind" "ls -lR:tls:elsr" "stat every member:tstat:estat" "open+read every 8th:topen:eopen"; do
		IFS=: read -r name var evar <<<"$row"
		local -n arr=$var
		local ev=${!evar}
		printf '%-52s %14s %14s %8s\n' "$name, $lab, compact vs old" "${arr[3]}s" "${arr[2]}s (v2)" \
			"$(ratio "${arr[2]}" "${arr[3]}")"
		printf '%-52s %14s %14s %8s\n' "$name, $lab, compact vs ext4" "${arr[3]}s" "${ev}s (ext4)" \
			"$(ratio "$ev" "${arr[3]}")"
		unset -n arr
	done
}
median() { python3 -c "import statistics, sys; print(f'{statistics.median(map(float, sys.argv[1:])):.4f}')" "$@"; }
if [ "$only" = fmt ]; then
	formats
	echo "ratio: baseline / shardfs (above 1: shardfs is faster or smaller)"
	exit 0
fi

# ---- 1. index build of one big shard ------------------------------------
n=$((shard_mb * 1024 / member_kb))
python3 - "$w/src1/shard-000000.tar" "$n" "$member_kb" <<'PY'
import io, os, sys, tarfile
path, n, kb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(os.path.dirname(path), exist_ok=True)
payload = os.urandom(kb * 1024 + 4096)
with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
    for i in range(n):
        ti = tarfile.TarInfo(f"n{i % 1000:04d}_{i:08d}.jpg")
        ti.size = kb * 1024
        ti.mtime = 1700000000
        off = i % 4096
        t.addfile(ti, io.BytesIO(payload[off:off + ti.size]))
PY
size=$(stat -c %s "$w/src1/shard-000000.tar")
for mode in warm dropped; do
	if [ $mode = dropped ] && [ $can_drop = 0 ]; then continue; fi
	cat "$w/src1/shard-000000.tar" >/dev/null
	[ $mode = dropped ] && drop
	t0=$(now); cat "$w/src1/shard-000000.tar" >/dev/null; t1=$(now)
	tcat=$(secs "$t0" "$t1")
	rm -rf "$w/cache1"
	"$bin" mount --cache-dir "$w/cache1" "$w/src1" "$mnt"
	[ $mode = dropped ] && drop
	t0=$(now); ls "$mnt/shard-000000" >/dev/null; t1=$(now)
	tidx=$(secs "$t0" "$t1")
	mem=$(stat_of index_mem_bytes)
	nent=$(stat_of members)
	scanned=$(stat_of index_bytes_scanned)
	"$bin" umount "$mnt"
	mbs_idx=$(python3 -c "print(f'{$size / 1e6 / $tidx:.0f} MB/s')")
	mbs_cat=$(python3 -c "print(f'{$size / 1e6 / $tcat:.0f} MB/s')")
	printf '%-52s %14s %14s %8s\n' "index build, $((size / 1000000)) MB shard, ${member_kb} KB members, $mode" \
		"$mbs_idx" "$mbs_cat (cat)" "$(ratio "$tcat" "$tidx")"
done
idxfile=$(find "$w/cache1" -path '*/meta/*' -type f | head -1)
idxbytes=$(stat -c %s "$idxfile")
names=$(python3 -c "import sys; print(sum(len(f'n{i % 1000:04d}_{i:08d}.jpg') + 1 for i in range($n)))")
printf '%-52s %14s %14s %8s\n' "index on disk, bytes per member (incl. name)" \
	"$(python3 -c "print(f'{$idxbytes / $nent:.1f}')")" "" ""
printf '%-52s %14s %14s %8s\n' "index on disk, bytes per member (excl. names)" \
	"$(python3 -c "print(f'{($idxbytes - $names) / $nent:.1f}')")" "goal <= 32" ""
# the index is read in place from a mapping of its file (page cache): the heap keeps the struct
printf '%-52s %14s %14s %8s\n' "index in heap, bytes per shard" \
	"$mem" "goal <= 512" ""
printf '%-52s %14s %14s %8s\n' "shard bytes read to index" "$scanned" "$size" \
	"$(ratio "$scanned" "$size")"

# ---- 3. find over many members ------------------------------------------
per=$((members / 10))
python3 - "$w/src2" "$w/extracted" "$per" <<'PY'
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
"$bin" mount --cache-dir "$w/cache2" "$w/src2" "$mnt"
find "$mnt" >/dev/null # builds the indexes once
listing() { # tool label
	local tool=$1 label=$2
	for mode in warm dropped; do
		if [ $mode = dropped ] && [ $can_drop = 0 ]; then continue; fi
		$tool "$w/extracted" >/dev/null; $tool "$mnt" >/dev/null
		td=() tm=()
		for _ in $(seq "$runs"); do
			[ $mode = dropped ] && drop
			t0=$(now); c1=$($tool "$w/extracted" | wc -l); t1=$(now)
			td+=("$(secs "$t0" "$t1")")
			[ $mode = dropped ] && drop
			if [ "$tool" = find ]; then
				t0=$(now); c2=$(find "$mnt" -path "$mnt/shard-*/*" | wc -l); t1=$(now)
			else
				t0=$(now); c2=$(ls -lR "$mnt" | wc -l); t1=$(now)
			fi
			tm+=("$(secs "$t0" "$t1")")
		done
		tdisk=$(median "${td[@]}") tmnt=$(median "${tm[@]}")
		printf '%-52s %14s %14s %8s\n' "$label, $members members ($c2 vs $c1 lines), $mode" \
			"${tmnt}s" "${tdisk}s" "$(ratio "$tdisk" "$tmnt")"
	done
}
listing find find
listing "ls -lR" "ls -lR"
rss=$(ps -o rss= -p "$(stat_of pid)")
printf '%-52s %14s %14s %8s\n' "daemon RSS per mounted member (bytes)" \
	"$(python3 -c "print(f'{$rss * 1024 / $(stat_of members):.0f}')")" "" ""
"$bin" umount "$mnt"
# the same ls -lR with xattrs (--xattr): ls then asks two per file, a round trip each (by
# default the daemon answers ENOSYS and the kernel stops asking)
"$bin" mount --xattr --cache-dir "$w/cache2" "$w/src2" "$mnt"
find "$mnt" >/dev/null
listing "ls -lR" "ls -lR --xattr"
"$bin" umount "$mnt"
formats
echo "ratio: baseline time / shardfs time (above 1: shardfs is faster)"
