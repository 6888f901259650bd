#!/bin/sh
# Mount WebDataset shards from S3 (or MinIO / Ceph RGW / AIStore's /s3) as an ImageFolder.
#   AWS_PROFILE=ml sh examples/s3.sh s3://my-bucket/imagenet/train/ /mnt/imagenet
#   AWS_ENDPOINT_URL=http://minio:9000 sh examples/s3.sh s3://bucket/prefix/ /mnt/data
# Credentials come from the environment or ~/.aws (never argv). Upload shards and their
# sidecar indexes (NAME.tar.idx, from 'shardfs pack' or 'shardfs index --sidecar') together:
#   aws s3 cp --recursive /data/shards/ s3://my-bucket/imagenet/train/
# With sidecars the mount lists classes after one small GET per shard, not a read of every shard.
set -eu
src=${1:?usage: s3.sh s3://BUCKET/PREFIX/ MOUNTPOINT}
mnt=${2:?usage: s3.sh s3://BUCKET/PREFIX/ MOUNTPOINT}
mkdir -p "$mnt"
build/shardfs mount --layout imagefolder --cache-dir /var/cache/shardfs --cache-size 200G \
	--connections 16 --prefetch-shards 4 "$src" "$mnt"
build/shardfs stats "$mnt" | grep -E 'index_|imagefolder_'
