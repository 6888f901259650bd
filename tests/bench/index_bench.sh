#!/bin/bash
# Index and listing benchmark. Not a test: it prints figures and
# ratios against baselines measured in the same run.
#
#   bash tests/bench/index_bench.sh [--build DIR] [--shard-mb 1024] [--member-kb 100]
#                                   [--members 100000] [--runs 1] [--fmt-shards 50]
#                                   [--base-bin OLD] [--time-shards 25] [--only fmt]
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
# 4. the index and view formats side by side (issue 39; tests/bench/lib_indexfmt.py says
#    what it runs): --fmt-shards hardlinks of one shard of 8,600 members named like
#    s12_004321.jpg / .cls (4,300 samples, 1,000 classes); mounted with version 3 and version 2
#    index files (SHARDFS_INDEX_VERSION=2) and as imagefolder with the view version 4 and, with
#    --base-bin OLD (a build of an older commit: 4d364d6, view version 3; 8a6e6d6, version 1),
#    that build's view: bytes per member
#    and per sample on disk, daemon RssAnon after `find`, the view's build alone (time per
#    sample, peak RSS), then `find`, `ls -lR`, `stat` and open over --time-shards shards of
#    each mount and of the same trees on the work directory's filesystem (ext4), --runs
#    rounds interleaved (the order rotated), medians with the min-max spread as the noise,
#    and the daemon's CPU time of the same rows (its threads' schedstat run time); then the
#    first `find` and `ls -lR` after a remount on the saved view, v4 vs base, --runs rounds.
#    Bytes per member do not depend on the number of shards (one index file per shard).
#    --only fmt runs this section alone.
# Needs root for dropping caches (/proc/sys/vm/drop_caches); without it the
# dropped rows are skipped.
set -eu
cd "$(dirname "$0")/../.."
build=build shard_mb=1024 member_kb=100 members=100000 runs=1 fmt_shards=50 only=
base_bin= time_shards=25
while [ $# -gt 0 ]; do
	case $1 in
	--shard-mb) shard_mb=$2; shift 2 ;;
	--member-kb) member_kb=$2; shift 2 ;;
	--members) members=$2; shift 2 ;;
	--build) build=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--fmt-shards) fmt_shards=$2; shift 2 ;;
	--base-bin) base_bin=$2; shift 2 ;;
	--time-shards) time_shards=$2; shift 2 ;;
	--only) only=$2; shift 2 ;;
	*) echo "usage: $0 [--build DIR] [--shard-mb N] [--member-kb N] [--members N] [--runs N] [--fmt-shards N] [--base-bin OLD] [--time-shards N] [--only fmt]" >&2; exit 2 ;;
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

# ---- 4. index and view formats side by side (a function: --only fmt runs it alone) --------
formats() {
	mkdir -p "$w/fmt"
	python3 tests/bench/lib_indexfmt.py "$bin" "$w/fmt" --shards "$fmt_shards" \
		--runs "$((runs > 1 ? runs : 3))" --time-shards "$time_shards" \
		${base_bin:+--base-bin "$base_bin"}
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
