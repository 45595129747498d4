#!/bin/bash
# epollwaits.sh: the proxy's epoll_pwait calls per WebSocket echo round trip, by epoll instance,
# timeout and caller (perf record of the syscall's entry with call chains, figure 6's placement:
# wsload on CPU 0, backend and proxy on CPU 1; 32 connections, 64-byte messages). It tells the
# loop's own wait (pkg/proxy.(*relayLoop)...) from the runtime's (runtime.netpoll, called from
# findRunnable's non-blocking poll or its blocking one, or from sysmon): the caller's return
# address separates findRunnable's two calls. Timeouts: 0 (never waits), -1 (waits for an event),
# or a timer's milliseconds (">0").
#
# Usage (under the machine-wide cluster lock, like proxybench):
#   flock /work/cluster.lock bash hack/bench/proxybench/epollwaits.sh PROXYBENCH [SECONDS]
# Needs perf and taskset.
set -eu
bin=$1
dur=${2:-3}
. "$(dirname "$0")/lib.sh"
taskset -c 1 "$bin" backend -addr 127.0.0.1:28080 &
pb=$!
pids="$pids $pb"
waitport 28080 "$pb"
taskset -c 1 "$bin" nogoo9 -listen 127.0.0.1:28081 -backend 127.0.0.1:28080 &
pp=$!
pids="$pids $pp"
waitport 28081 "$pp"
u=ws://127.0.0.1:28081/ws/bench/demo/echo
bounded 1 taskset -c 0 "$bin" wsload -url "$u" -conns 32 -duration 1s >/dev/null
# perf counts over dur seconds starting one second into a load of dur+2 seconds, so its window
# lies inside the load's; the round trips are the load's rate times dur.
bounded "$((dur + 2))" taskset -c 0 "$bin" wsload -url "$u" -conns 32 -duration "$((dur + 2))s" >"$dir/wsload.out" &
wp=$!
pids="$pids $wp"
sleep 1
if ! perf record -q -o "$dir/perf.data" -e syscalls:sys_enter_epoll_pwait -g -p "$pp" -- sleep "$dur" 2>"$dir/perf.log"; then
	echo "perf record failed:" >&2
	cat "$dir/perf.log" >&2
	exit 1
fi
wait $wp || { echo "the load failed or ran 30 s past its end" >&2; exit 1; }
pids="$pb $pp"
out=$(cat "$dir/wsload.out")
rts=$(echo "$out" | sed 's/.*"rps":\([0-9.e+]*\).*/\1/' | awk -v d="$dur" '{printf "%d", $1*d}')
echo "load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M:%S) UTC, $rts round trips in ${dur}s"
echo "| epoll instance | timeout | caller | calls | per round trip |"
echo "|---|---|---|---|---|"
perf script -i "$dir/perf.data" -F trace,ip,sym 2>/dev/null | awk -v rts="$rts" '
	function flush() { if (key != "") n[key " | " caller]++; key = "" }
	/epfd:/ {
		flush()
		match($0, /epfd: 0x[0-9a-f]+/); epfd = substr($0, RSTART + 6, RLENGTH - 6); sub(/^0x0*/, "0x", epfd)
		match($0, /timeout: 0x[0-9a-f]+/); t = substr($0, RSTART + 9, RLENGTH - 9)
		t = (t ~ /^0x0+$/) ? "0" : (t ~ /^0xf+$/) ? "-1" : ">0"
		key = "fd " epfd " | " t; caller = ""; below = 0
		next
	}
	key != "" && NF >= 2 && caller == "" {
		if ($2 ~ /relayLoop/) caller = $2
		else if (below) caller = $2 " (" $1 ")"
		else if ($2 == "runtime.netpoll") below = 1
	}
	END {
		flush()
		for (k in n) printf "| %s | %d | %.3f |\n", k, n[k], n[k] / rts
	}' | sort -t'|' -k5 -rn
