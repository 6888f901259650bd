#!/bin/sh
# Serve a directory of shards with nginx (JSON autoindex) and mount it over HTTP.
#   sh examples/nginx.sh /data/shards /mnt/shards      (needs nginx; runs it as the current user)
# shardfs lists the directory through the autoindex, then reads shards with range GETs into its
# cache tier. Stop with: build/shardfs umount /mnt/shards; kill $(cat /tmp/shardfs-nginx/nginx.pid)
set -eu
data=$(realpath "${1:?usage: nginx.sh SHARD_DIR MOUNTPOINT}")
mnt=${2:?usage: nginx.sh SHARD_DIR MOUNTPOINT}
port=${PORT:-8080}
run=/tmp/shardfs-nginx
mkdir -p "$run"
cat >"$run/nginx.conf" <<CONF
daemon on;
pid $run/nginx.pid;
error_log $run/error.log;
events {}
http {
	access_log off;
	sendfile on;
	server {
		listen 127.0.0.1:$port;
		root $data;
		location / { autoindex on; autoindex_format json; }
	}
}
CONF
nginx -c "$run/nginx.conf" -p "$run"
build/shardfs mount --layout imagefolder "http://127.0.0.1:$port/" "$mnt"
ls "$mnt"
