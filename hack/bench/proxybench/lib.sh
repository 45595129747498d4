# lib.sh: what the proxybench scripts (cpusplit.sh, perfstat.sh, epollwaits.sh) share; they source
# it after `set -eu`. It makes their work directory (dir) and their list of processes (pids), stops
# those processes (each once) and removes dir when the script ends; an interrupt ends the script
# instead of resuming it after the trap.
dir=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	pids=""
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# waitport PORT [PID] waits (at most 30 s) until something listens on PORT. With PID, a process
# this script started to listen there, a port some other process holds fails the run (here, or
# at the first load if PID had not exited yet when the port answered) instead of measuring that
# process.
waitport() {
	i=0
	until (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && { [ $# -lt 2 ] || kill -0 "$2" 2>/dev/null; }; do
		if [ $# -ge 2 ] && ! kill -0 "$2" 2>/dev/null; then
			echo "process $2 for port $1 exited (port in use?)" >&2
			exit 1
		fi
		i=$((i + 1))
		[ $i -lt 300 ] || { echo "nothing listens on port $1 after 30s" >&2; exit 1; }
		sleep 0.1
	done
}

# bounded SECONDS CMD...: runs CMD, a load meant to run SECONDS, and stops it 30 s after that.
# wsload checks its deadline between round trips only: a proxy that stops echoing would hold it
# (and the machine-wide lock) for good. timeout passes a TERM on to CMD, then kills it 5 s later;
# its status, 124, fails the script.
bounded() {
	b=$(($1 + 30))
	shift
	timeout -k 5 "$b" "$@"
}
