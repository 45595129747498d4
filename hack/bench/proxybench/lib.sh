# lib.sh: what the proxybench scripts (cpusplit.sh, perfstat.sh, epollwaits.sh) share; they source
# it after `set -eu`. It makes their work directory (dir) and their list of processes (pids), stops
# those processes (each once) and removes dir when the script ends; an interrupt ends the script
# instead of resuming it after the trap, and stops the load bounded() runs (below).
dir=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	pids=""
	wait 2>/dev/null || true
	rm -rf "$dir"
}
# bounded_pid is the timeout that bounded() waits for in this shell (a subshell, such as
# out=$(bounded ...), has its own). timeout, without --foreground, makes itself the leader of a new
# process group, which the terminal's Ctrl-C does not reach: stop_bounded sends TERM to that whole
# group (timeout and the load) and waits for it: 5 s at most (timeout's -k).
bounded_pid=""
stop_bounded() {
	[ -n "$bounded_pid" ] || return 0
	kill -TERM -- -"$bounded_pid" 2>/dev/null || kill -TERM "$bounded_pid" 2>/dev/null || true
	wait "$bounded_pid" 2>/dev/null || true
	bounded_pid=""
}
on_signal() {
	stop_bounded
	exit 130
}
trap cleanup EXIT
trap on_signal INT TERM

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
# its status, 124, fails the script. timeout runs in the background and is waited for, so an INT
# or TERM runs on_signal at once: in the script, and in a subshell that runs bounded (traps are
# reset in a subshell, so bounded sets its own; in the script it is the same trap). Ctrl-C reaches
# both; a TERM sent to the script alone while it waits for out=$(bounded ...) acts once that
# subshell has ended (SECONDS + 30 s at most).
bounded() {
	b=$(($1 + 30))
	shift
	trap on_signal INT TERM
	timeout -k 5 "$b" "$@" &
	bounded_pid=$!
	brc=0
	wait "$bounded_pid" || brc=$?
	bounded_pid=""
	return "$brc"
}
