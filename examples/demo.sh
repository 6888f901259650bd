#!/bin/sh
# The quickstart: install what shardfs needs, build it, make a small demo
# WebDataset dataset (4 shards of 25 samples, one gzip-compressed) and mount
# it at /tmp/shardfs-demo/mnt. Run from the repository root, as root on a
# fresh Debian 12 (or as a user who has the packages of scripts/install-deps.sh).
#   sh examples/demo.sh            # build, make data, mount
#   build/shardfs umount /tmp/shardfs-demo/mnt
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
meson compile -C build >/dev/null

demo=/tmp/shardfs-demo
data=$demo/data
mnt=$demo/mnt
if mountpoint -q "$mnt" 2>/dev/null; then
	build/shardfs umount "$mnt" || fusermount3 -u "$mnt"
fi
rm -rf "$data" "$demo/work"
mkdir -p "$data/train" "$data/val" "$demo/work" "$mnt"

# samples: KEY.txt (a caption), KEY.cls (class index), KEY.bin (4 KiB of payload)
i=0
for shard in 0 1 2 3; do
	dir=$demo/work/$shard
	mkdir -p "$dir"
	for s in $(seq 1 25); do
		key=$(printf 'sample%06d' "$i")
		printf 'demo sample %d of shard %d\n' "$i" "$shard" >"$dir/$key.txt"
		printf '%d\n' $((i % 10)) >"$dir/$key.cls"
		head -c 4096 /dev/urandom >"$dir/$key.bin"
		i=$((i + 1))
	done
	name=$(printf 'shard-%06d' "$shard")
	if [ "$shard" = 3 ]; then
		tar -C "$dir" --sort=name -czf "$data/val/$name.tar.gz" .
	else
		tar -C "$dir" --sort=name -cf "$data/train/$name.tar" .
	fi
done
printf 'shardfs demo dataset: 3 training shards, 1 validation shard\n' >"$data/README.txt"

build/shardfs mount --cache-dir "$demo/cache" "$data" "$mnt"
echo "mounted $data at $mnt:"
ls -l "$mnt" "$mnt/train" | sed 's/^/  /'
echo "  first sample: $(cat "$mnt/train/shard-000000/sample000000.txt")"
echo "  counters:     build/shardfs stats $mnt"
echo "  unmount:      build/shardfs umount $mnt"
