#!/bin/bash
# The daemon's instructions over ab_rows.sh's `ls -lR` passes, which load does not disturb as it
# does CPU-s: each BIN mounts the lslr tree (10 shards of --members members, 100 directories of
# 10 a shard, a local directory) under `valgrind --tool=callgrind`, a `find` builds the indexes,
# then --passes `ls -lR` passes, page caches dropped before each; the counters are zeroed before
# a pass and dumped after it (callgrind_control). The builds are alternated, --rounds mounts each.
#
#   bash tests/bench/lslr_instr.sh [--rounds 3] [--passes 3] [--members 10000] BIN...
#
# Prints one line per build, round and pass: the instructions, the FUSE requests (lookups +
# getattrs + readdirs), instructions a request and the checks of mapped indexes' files
# (index_checks; 0 for a build without the counter). The first pass looks up every file (and
# marks the directories looked); the later ones are READDIRPLUS with every entry's attributes,
# as ab_rows.sh's lslr row from its second round on. A pass whose requests differ from the
# others' was disturbed (another process dropped the caches): compare passes of equal requests.
# Needs root (drop_caches). The callgrind files stay in the printed directory for
# callgrind_annotate (--inclusive=yes).
set -eu
cd "$(dirname "$0")/../.."
rounds=3 passes=3 members=10000
bins=()
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--passes) passes=$2; shift 2 ;;
	--members) members=$2; shift 2 ;;
	-*) echo "usage: $0 [--rounds N] [--passes N] [--members N] BIN..." >&2; exit 2 ;;
	*) bins+=("$(realpath "$1")"); shift ;;
	esac
done
[ ${#bins[@]} -ge 1 ] || { echo "$0: no BIN" >&2; exit 2; }
[ -w /proc/sys/vm/drop_caches ] || { echo "$0: needs root (drop_caches)" >&2; exit 2; }
command -v callgrind_control >/dev/null || { echo "$0: needs valgrind" >&2; exit 2; }
py=/usr/bin/python3
tmp=$(mktemp -d /var/tmp/shardfs-lslr-instr.XXXXXX)
mnt=$tmp/mnt dpid=
cleanup() {
	mountpoint -q "$mnt" 2>/dev/null && fusermount3 -u "$mnt" >/dev/null 2>&1
	[ -n "$dpid" ] && wait "$dpid" 2>/dev/null
	echo "callgrind files: $tmp/out" >&2
	rm -rf "$tmp/src" "$tmp/cache"
}
trap cleanup EXIT
mkdir -p "$mnt" "$tmp/out"
# ab_rows.sh's find/lslr tree
$py - "$tmp/src" $((members / 10)) <<'PY'
import io, os, sys, tarfile
src, per = sys.argv[1], int(sys.argv[2])
os.makedirs(src, exist_ok=True)
blob = os.urandom(2048)
for s in range(10):
    with tarfile.open(os.path.join(src, f"shard-{s:06d}.tar"), "w") as t:
        for i in range(per):
            k = s * per + i
            data = blob[: 512 + k % 1024]
            ti = tarfile.TarInfo(f"c{k % 100:03d}/n{k:08d}.jpg"); ti.size = len(data)
            ti.mtime = 1700000000
            t.addfile(ti, io.BytesIO(data))
PY
counts() { # -> requests index_checks so far
	$py -c "import json, sys; c = json.load(open(sys.argv[1])); print(sum(c.get(k, 0) for k in ('lookups', 'getattrs', 'readdirs')), c.get('index_checks', 0))" "$mnt/.shardfs/stats"
}
printf '%-40s %5s %4s %12s %8s %10s %12s\n' build round pass instructions requests 'a request' index_checks
for r in $(seq "$rounds"); do
	for i in $(seq 0 $((${#bins[@]} - 1))); do
		out=$tmp/out/b$i-r$r
		rm -rf "$tmp/cache"
		valgrind --tool=callgrind --callgrind-out-file="$out.%p" \
			"${bins[$i]}" mount -f --cache-dir "$tmp/cache" "$tmp/src" "$mnt" 2>"$out.log" &
		dpid=$!
		for _ in $(seq 600); do
			mountpoint -q "$mnt" && [ -e "$mnt/.shardfs/stats" ] && break
			sleep 0.1
		done
		pid=$(sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' "$mnt/.shardfs/stats" | head -1)
		find "$mnt" >/dev/null
		name=${bins[$i]}
		[ ${#name} -le 40 ] || name=...${name: -37}
		for p in $(seq "$passes"); do
			sync
			echo 3 >/proc/sys/vm/drop_caches
			read -r q0 k0 <<<"$(counts)"
			callgrind_control -z "$pid" >/dev/null 2>&1
			ls -lR "$mnt" >/dev/null
			callgrind_control -d "pass$p" "$pid" >/dev/null 2>&1
			read -r q1 k1 <<<"$(counts)"
			n=$(sed -n 's/^summary: *//p' "$out.$pid.$p")
			printf '%-40s %5d %4d %12d %8d %10d %12d\n' "$name" "$r" "$p" "$n" \
				$((q1 - q0)) $((n / (q1 - q0))) $((k1 - k0))
		done
		fusermount3 -u "$mnt"
		wait "$dpid" || true
		dpid=
	done
done
