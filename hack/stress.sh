#!/usr/bin/env bash
# `make test-stress`: chases flaky tests. Runs the unit and integration layers STRESS_COUNT times in
# a row (go test -count), then the e2e layer STRESS_E2E_RUNS times (a fresh cluster each run), while
# STRESS_LOAD busy loops keep the CPUs busy beside them. Every run is bounded by a timeout; at the
# end every failure is listed with its package and test (or e2e spec) name. Exit status 1 if any
# run failed. Not part of `make test`.
#
# Environment (the Makefile passes its variables): STRESS_COUNT (3), STRESS_E2E_RUNS (2),
# STRESS_LOAD (busy loops, default one per core; 0 for none), STRESS_TIMEOUT (outer bound of one
# run, default 90m), STRESS_GOFLAGS (extra go test flags for both layers, e.g. -race),
# STRESS_E2E_ARGS (extra e2e flags, split at spaces with any quotes kept: -ginkgo.focus=Proxy or
# -ginkgo.label-filter=proxy, not -ginkgo.focus='Proxy', whose quotes would become part of the
# pattern; for words with spaces put dots: -ginkgo.focus=lets.only.the.owner),
# STRESS_PKGS (packages of the unit+integration layer), BIN (control plane and bin/nogoo9),
# STRESS_DIR (where the logs go; default a new directory under ${TMPDIR:-/tmp}).
set -euo pipefail
cd "$(dirname "$0")/.."

count=${STRESS_COUNT:-3}
e2e_runs=${STRESS_E2E_RUNS:-2}
load=${STRESS_LOAD:-$(nproc)}
run_timeout=${STRESS_TIMEOUT:-90m}
goflags=${STRESS_GOFLAGS:-}
e2e_args=${STRESS_E2E_ARGS:-}
bin=${BIN:-$PWD/bin}
pkgs=${STRESS_PKGS:-$(go list ./... | grep -v /test/e2e)}
dir=${STRESS_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/nogoo9-stress-XXXXXX")}
mkdir -p "$dir"

for v in count e2e_runs load; do
	if ! [[ ${!v} =~ ^[0-9]+$ ]]; then
		echo "stress: ${v^^} must be a whole number, got '${!v}'" >&2
		exit 2
	fi
done
if ((count < 1)); then
	echo "stress: STRESS_COUNT must be at least 1, got $count" >&2
	exit 2
fi

# The CPU load: busy loops started here, stopped by their PIDs when this script ends, however it
# ends. Each loop also ends on its own once this script is gone (even after a SIGKILL), because it
# checks that its parent is alive.
load_pids=()
stop_load() {
	if ((${#load_pids[@]} > 0)); then
		kill "${load_pids[@]}" 2>/dev/null || true
		wait "${load_pids[@]}" 2>/dev/null || true
		load_pids=()
	fi
}
trap stop_load EXIT
# The run in progress: timeout (without --foreground) makes itself the leader of a new process
# group, which the terminal's Ctrl-C does not reach. run() starts it in the background and waits
# for it, so an INT or TERM runs this trap at once: it sends TERM to that whole group (the tests
# and their go command) and waits for it, which timeout bounds (--kill-after=1m).
run_pid=""
stop_run() {
	[[ -n $run_pid ]] || return 0
	echo "stress: stopping the run in progress (pid $run_pid; SIGKILL after 1m)" >&2
	kill -TERM -- -"$run_pid" 2>/dev/null || kill -TERM "$run_pid" 2>/dev/null || true
	wait "$run_pid" 2>/dev/null || true
	run_pid=""
}
trap 'stop_run; exit 130' INT TERM
for ((i = 0; i < load; i++)); do
	bash -c 'while kill -0 '"$$"' 2>/dev/null; do for ((j = 0; j < 100000; j++)); do :; done; done' &
	load_pids+=($!)
done

step() { printf '==> %s (%s)\n' "$1" "$(date +%T)"; }
failed_runs=0
# run NAME CMD...: one run, bounded by STRESS_TIMEOUT, its output in $dir/NAME.log.
run() {
	local name=$1
	shift
	step "$name (log $dir/$name.log)"
	local rc=0
	timeout --kill-after=1m "$run_timeout" "$@" >"$dir/$name.log" 2>&1 &
	run_pid=$!
	wait "$run_pid" || rc=$?
	run_pid=""
	if ((rc == 124 || rc == 137)); then
		echo "stress: run $name did not end within STRESS_TIMEOUT=$run_timeout" >>"$dir/$name.log"
	fi
	if ((rc != 0)); then
		failed_runs=$((failed_runs + 1))
		echo "    FAILED (exit $rc)"
	else
		echo "    ok"
	fi
}

step "$load busy loop(s) running beside the tests (pids ${load_pids[*]:-none}); logs in $dir"

# Unit and integration: go test's -timeout bounds each package's test binary over all its runs.
per_pkg=$((20 * count))
# shellcheck disable=SC2086 # goflags and pkgs are word lists
run unit-integration env KUBEBUILDER_ASSETS="$bin" NOGOO9_TOOLS="$bin" go test -count="$count" -p 1 -timeout "${per_pkg}m" $goflags $pkgs

for ((i = 1; i <= e2e_runs; i++)); do
	# shellcheck disable=SC2086
	run "e2e-$i" env NOGOO9_BIN="$bin/nogoo9" NOGOO9_TOOLS="$bin" go test -count=1 -timeout 40m $goflags ./test/e2e/... -args -ginkgo.no-color $e2e_args
done
stop_load

# The report: every failed test with its package and how often it failed (go test's "--- FAIL" lines, indented for
# subtests), every failed e2e spec (Ginkgo's summary "[FAIL]" lines), and every package that
# failed without naming a test (build failure, panic in TestMain, timeout).
report=$dir/failures.txt
for log in "$dir"/*.log; do
	awk -v run="$(basename "$log" .log)" '
		{ gsub(/\033\[[0-9;]*m/, "") } # Ginkgo colours its summary unless -ginkgo.no-color
		/^[[:space:]]*--- FAIL: / { sub(/^[[:space:]]*--- FAIL: /, ""); sub(/ \([0-9.]+s\)$/, ""); tests[++n] = $0; next }
		/^[[:space:]]*\[(FAIL|TIMEDOUT|PANICKED|INTERRUPTED)\] / { sub(/^[[:space:]]*/, ""); specs[++m] = $0; next }
		/^panic: test timed out/ { timedout = 1 }
		/^(FAIL|ok)[[:space:]]/ {
			pkg = $2
			if ($1 == "FAIL" && pkg != "") {
				if (n == 0 && m == 0) print run ": " pkg ": package failed without a failed test (build error, panic or timeout: read the log)"
				if (timedout) print run ": " pkg ": timed out (go test -timeout)"
				for (i = 1; i <= n && m == 0; i++) { # e2e: the specs say more than TestE2E
					parent = 0 # a test whose subtest failed is named by the subtest line
					for (j = 1; j <= n; j++) if (index(tests[j], tests[i] "/") == 1) parent = 1
					if (!parent) print run ": " pkg ": " tests[i]
				}
				for (i = 1; i <= m; i++) print run ": " pkg ": " specs[i]
			}
			n = 0; m = 0; timedout = 0
		}
		/^stress: run .* did not end within/ { print run ": " $0 }
	' "$log"
done | sort | uniq -c | sed -E 's/^ *([0-9]+) /\1x /' >"$report"

echo
echo "==> test-stress: unit+integration -count=$count, e2e runs $e2e_runs, $load busy loop(s); $failed_runs failed run(s)"
if [[ -s $report ]]; then
	echo "    $(wc -l <"$report") failing test(s) or spec(s), logs in $dir:"
	sed 's/^/    /' "$report"
fi
if ((failed_runs > 0)); then
	[[ -s $report ]] || echo "    a run failed without a failed test: read the logs in $dir"
	exit 1
fi
echo "    no failure; logs in $dir"
