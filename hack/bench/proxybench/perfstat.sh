#!/bin/bash
# perfstat.sh: system calls, context switches and CPU per HTTP request of each proxy, counted with
# perf stat on the proxy's process while wrk drives it (figure 6's placement: wrk on CPU 0,
# backend and proxy on CPU 1; 32 connections, 1 KiB answers). nginx is measured too (its worker).
#
# Usage (under the machine-wide cluster lock, like proxybench):
#   flock /work/cluster.lock bash hack/bench/proxybench/perfstat.sh [-d 4s] [-r 2] PROXYBENCH [OTHER_PROXYBENCH...]
# Each PROXYBENCH is a binary built with `go build ./hack/bench/proxybench` (e.g. one from main);
# the first one's backend serves every row. With WS=1 the rows are WebSocket echo round trips
# (the first PROXYBENCH's wsload: 32 connections, 64-byte messages) and the columns per round
# trip. Needs perf, wrk, nginx and taskset.
set -eu

dur=4s
rounds=2
while [ $# -gt 0 ]; do
	case $1 in
	-d) dur=$2; shift 2 ;;
	-r) rounds=$2; shift 2 ;;
	*) break ;;
	esac
done
[ $# -ge 1 ] || { echo "usage: $0 [-d 4s] [-r 2] PROXYBENCH [OTHER_PROXYBENCH...]" >&2; exit 2; }
secs=${dur%s} # perf's sleep, the outer bounds and the request count take whole seconds

backend=127.0.0.1:28080
proxyaddr=127.0.0.1:28081
nginxaddr=127.0.0.1:28083
events=task-clock,context-switches,syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_recvfrom,syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,syscalls:sys_enter_nanosleep,syscalls:sys_enter_getsockopt

. "$(dirname "$0")/lib.sh"

first=$1
taskset -c 1 "$1" backend -addr "$backend" &
bpid=$!
pids="$pids $bpid"
waitport 28080 "$bpid"

# measure NAME PID URL: warm up, then perf stat on PID while wrk runs; one line per row.
measure() {
	if [ "${WS:-}" = 1 ]; then
		u=ws://${3#http://}echo
		case $1 in nginx*) u=ws://$nginxaddr/echo ;; esac # nginx passes the path on unchanged
		bounded 1 taskset -c 0 "$first" wsload -url "$u" -conns 32 -duration 1s >/dev/null
		perf stat -x, -e "$events" -p "$2" -o "$dir/perf" -- sleep "$secs" &
		perfpid=$!
		out=$(bounded "$secs" taskset -c 0 "$first" wsload -url "$u" -conns 32 -duration "$dur")
		wait $perfpid
		reqs=$(echo "$out" | sed 's/.*"rps":\([0-9.e+]*\).*/\1/' | awk -v d="$secs" '{printf "%d", $1*d}')
	else
		bounded 1 taskset -c 0 wrk -t1 -c32 -d1s -H 'Authorization: Bearer bench-token' "$3" >/dev/null
		perf stat -x, -e "$events" -p "$2" -o "$dir/perf" -- sleep "$secs" &
		perfpid=$!
		out=$(bounded "$secs" taskset -c 0 wrk -t1 -c32 -d"$dur" -H 'Authorization: Bearer bench-token' "$3")
		wait $perfpid
		reqs=$(echo "$out" | awk '/requests in/ {print $1}')
	fi
	awk -F, -v name="$1" -v reqs="$reqs" '
		/^#/ || NF < 3 { next }
		{ v[$3] = $1 }
		END {
			printf "| %s | %d | %.1f | %.2f | %.2f | %.2f | %.2f | %.3f | %.3f | %.3f |\n", name, reqs,
				v["task-clock"] * 1000 / reqs, v["context-switches"] / reqs,
				(v["syscalls:sys_enter_read"] + v["syscalls:sys_enter_recvfrom"]) / reqs,
				(v["syscalls:sys_enter_write"] + v["syscalls:sys_enter_writev"] + v["syscalls:sys_enter_sendto"]) / reqs,
				(v["syscalls:sys_enter_epoll_pwait"] + v["syscalls:sys_enter_epoll_wait"]) / reqs,
				v["syscalls:sys_enter_futex"] / reqs, v["syscalls:sys_enter_nanosleep"] / reqs,
				v["syscalls:sys_enter_getsockopt"] / reqs
		}' "$dir/perf"
}

cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  map \$http_upgrade \$connection_upgrade { default upgrade; '' ''; }
  upstream backend { server $backend; keepalive 256; }
  server {
    listen $nginxaddr;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Host \$host;
      proxy_set_header Upgrade \$http_upgrade;
      proxy_set_header Connection \$connection_upgrade;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
EOF

echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
u=req; ops=requests
[ "${WS:-}" != 1 ] || { u=rt; ops="round trips"; }
echo "| proxy | $ops | CPU us/$u | context switches/$u | reads/$u | writes/$u | epoll waits/$u | futex/$u | nanosleep/$u | getsockopt/$u |"
echo "|---|---|---|---|---|---|---|---|---|---|"
r=1
while [ $r -le "$rounds" ]; do
	n=0
	for pb in "$@"; do
		n=$((n + 1))
		taskset -c 1 "$pb" nogoo9 -listen "$proxyaddr" -backend "$backend" &
		ppid=$!
		pids="$pids $ppid"
		waitport 28081 "$ppid"
		measure "nogoo9 $n ($(basename "$pb")), round $r" $ppid "http://$proxyaddr/ws/bench/demo/"
		kill $ppid
		wait $ppid 2>/dev/null || true
	done
	taskset -c 1 nginx -c "$dir/nginx.conf" -e /dev/null 2>/dev/null &
	npid=$!
	pids="$pids $npid"
	waitport 28083 "$npid"
	worker=$(pgrep -P $npid | head -1)
	measure "nginx, round $r" "$worker" "http://$nginxaddr/ws/bench/demo/"
	kill $npid
	wait $npid 2>/dev/null || true
	r=$((r + 1))
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
