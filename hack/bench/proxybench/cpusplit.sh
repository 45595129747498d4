#!/bin/bash
# cpusplit.sh: user and system CPU per HTTP request (from /proc/<pid>/stat, 10 ms ticks) of
# nogoo9's proxy from two proxybench builds and of nginx's worker, under wrk (figure 6's
# placement: wrk on CPU 0, backend and proxy on CPU 1; 32 connections, 1 KiB answers, 4 s per
# row after 1 s of warm-up); the three rows change their order every round. A change to the
# proxy's user-space work shows in the user column, which the kernel's share (most of the time,
# and most of the scatter on a busy machine) does not blur.
#
# Usage (under the machine-wide cluster lock, like proxybench):
#   flock /work/cluster.lock bash hack/bench/proxybench/cpusplit.sh ROUNDS NEW_PROXYBENCH MAIN_PROXYBENCH
# With BROWSER=1 every request also carries a browser's dozen header lines (User-Agent, Accept*,
# Cookie, Referer, Sec-Fetch-*, Connection: keep-alive) instead of Authorization alone.
# With WS=1 the rows are WebSocket echo round trips instead (proxybench's wsload from
# NEW_PROXYBENCH: 32 connections, 64-byte messages), per round trip.
# Needs wrk, nginx and taskset.
set -eu
rounds=$1; new=$2; main=$3
backend=127.0.0.1:28080; paddr=127.0.0.1:28081; naddr=127.0.0.1:28083
. "$(dirname "$0")/lib.sh"
cpu() { awk '{print $14, $15}' /proc/$1/stat; }
taskset -c 1 $new backend -addr $backend & bp=$!; pids="$pids $bp"; waitport 28080 $bp
cat > $dir/nginx.conf <<NGX
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/body; proxy_temp_path $dir/proxy; fastcgi_temp_path $dir/fastcgi; uwsgi_temp_path $dir/uwsgi; scgi_temp_path $dir/scgi;
  map \$http_upgrade \$connection_upgrade { default upgrade; '' ''; }
  upstream backend { server $backend; keepalive 256; }
  server {
    listen $naddr;
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
NGX
hdrs=(-H 'Authorization: Bearer bench-token')
if [ "${BROWSER:-}" = 1 ]; then
  hdrs+=(-H 'User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0'
    -H 'Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8' -H 'Accept-Language: en-GB,en;q=0.5'
    -H 'Accept-Encoding: gzip, deflate, br' -H 'Referer: http://127.0.0.1/ws/bench/demo/' -H 'Cookie: theme=dark; lang=en'
    -H 'Sec-Fetch-Dest: document' -H 'Sec-Fetch-Mode: navigate' -H 'Sec-Fetch-Site: same-origin' -H 'Connection: keep-alive')
fi
measure() { # name pid url (the HTTP one; WS=1 uses its WebSocket counterpart)
  if [ "${WS:-}" = 1 ]; then
    u=ws://${3#http://}echo
    [ "${1%%,*}" = nginx ] && u=ws://$naddr/echo # nginx passes the path on unchanged
    bounded 1 taskset -c 0 $new wsload -url "$u" -conns 32 -duration 1s >/dev/null
    read u0 s0 < <(cpu $2)
    out=$(bounded 4 taskset -c 0 $new wsload -url "$u" -conns 32 -duration 4s)
    reqs=$(echo "$out" | sed 's/.*"rps":\([0-9.e+]*\).*/\1/' | awk '{printf "%d", $1*4}')
    read u1 s1 < <(cpu $2)
  else
    taskset -c 0 wrk -t1 -c32 -d1s "${hdrs[@]}" "$3" >/dev/null
    read u0 s0 < <(cpu $2)
    reqs=$(taskset -c 0 wrk -t1 -c32 -d4s "${hdrs[@]}" "$3" | awk '/requests in/ {print $1}')
    read u1 s1 < <(cpu $2)
  fi
  echo "$1 $reqs $(( (u1-u0) )) $(( (s1-s0) ))" | awk '{printf "| %s | %d | %.1f | %.1f | %.1f |\n", $1, $2, ($3*10000)/$2, ($4*10000)/$2, (($3+$4)*10000)/$2}'
}
row() {
  case $1 in
  nginx) taskset -c 1 nginx -c $dir/nginx.conf -e /dev/null 2>/dev/null & np=$!; pids="$pids $np"; waitport 28083 $np
     # The worker, once the master has forked it (at most 5 s): without it the row would read 0 CPU.
     w=; for _ in $(seq 50); do w=$(pgrep -P $np | head -1); [ -n "$w" ] && break; sleep 0.1; done
     [ -n "$w" ] || { echo "cpusplit: nginx's worker did not start" >&2; exit 1; }
     measure "nginx,r$2" $w http://$naddr/ws/bench/demo/; kill $np; wait $np 2>/dev/null || true ;;
  *) b=$new; [ $1 = main ] && b=$main
     taskset -c 1 $b nogoo9 -listen $paddr -backend $backend & pp=$!; pids="$pids $pp"; waitport 28081 $pp
     measure "$1,r$2" $pp http://$paddr/ws/bench/demo/; kill $pp; wait $pp 2>/dev/null || true ;;
  esac
}
echo "load at the start: $(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%H:%M:%S)${BROWSER:+ (browser headers)}${WS:+ (WebSocket round trips)}"
if [ "${WS:-}" = 1 ]; then
  echo "| row | round trips | user us/rt | system us/rt | total us/rt |"
else
  echo "| row | requests | user us/req | system us/req | total us/req |"
fi
echo "|---|---|---|---|---|"
orders=("new main nginx" "main nginx new" "nginx new main" "new nginx main" "main new nginx" "nginx main new")
for r in $(seq 1 $rounds); do
  for x in ${orders[$(( (r-1) % 6 ))]}; do row $x $r; done
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%H:%M:%S)"
