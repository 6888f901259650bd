# lib_nginx.sh — sourced by the bench scripts (remote_bench.sh, cache_bench.sh): nginx on
# 127.0.0.1, on a free port, serving one directory with sendfile, as their remote store.
#
#   nginx_start NGDIR ROOT PROBE   write NGDIR/nginx.conf (temp files under NGDIR/tmp/), start
#                                  nginx in the background and wait until ROOT/PROBE answers;
#                                  sets $port and $ngpid (the caller kills $ngpid at exit)
nginx_start() {
	local ngdir=$1 root=$2 probe=$3 user=
	port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	[ "$(id -u)" = 0 ] && user='user root root;'
	mkdir -p "$ngdir/tmp"
	cat >"$ngdir/nginx.conf" <<EOF
$user
worker_processes 1;
pid $ngdir/nginx.pid;
error_log $ngdir/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $ngdir/tmp/body;
    proxy_temp_path $ngdir/tmp/proxy;
    fastcgi_temp_path $ngdir/tmp/fastcgi;
    uwsgi_temp_path $ngdir/tmp/uwsgi;
    scgi_temp_path $ngdir/tmp/scgi;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush off;
    keepalive_requests 1000000;
    server { listen 127.0.0.1:$port; root $root; }
}
EOF
	/usr/sbin/nginx -c "$ngdir/nginx.conf" -p "$ngdir" -g 'daemon off;' &
	ngpid=$!
	for _ in $(seq 100); do
		curl -s -o /dev/null "http://127.0.0.1:$port/$probe" -r 0-0 && break
		sleep 0.1
	done
}
