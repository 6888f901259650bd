# lib_nginx.sh — sourced by the bench scripts (remote_bench.sh, cache_bench.sh): nginx on
# 127.0.0.1, on a free port, serving one directory with sendfile, as their remote store. The
# server is the test toolkit's (tests/lib/shardfs_test/web.py, `python3 -m shardfs_test.web
# serve`), without its access log.
#
#   nginx_start NGDIR ROOT   start nginx (config, logs and temp files under NGDIR) in the
#                            background and wait until it listens; sets $port, $base (the URL
#                            of ROOT: $base/NAME is ROOT/NAME) and $ngpid (the caller kills
#                            $ngpid at exit, which stops nginx)
nginx_start() {
	local ngdir=$1 root=$2 lib
	lib=$(cd "$(dirname "${BASH_SOURCE[0]}")/../lib" && pwd)
	mkdir -p "$ngdir"
	: >"$ngdir/port"
	PYTHONPATH=$lib /usr/bin/python3 -m shardfs_test.web serve "$ngdir" "$root" >"$ngdir/port" &
	ngpid=$!
	port=
	for _ in $(seq 600); do # the server prints its port once nginx listens: 60 s at most
		read -r _ port <"$ngdir/port" && [ -n "$port" ] && break
		kill -0 "$ngpid" 2>/dev/null || break
		sleep 0.1
	done
	if [ -z "$port" ]; then
		echo "nginx_start: nginx did not start (see $ngdir/stderr.log)" >&2
		return 1
	fi
	base="http://127.0.0.1:$port/files"
}
