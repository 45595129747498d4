#!/usr/bin/env bash
# `make bench`: measures nogoo9 against baselines in the same run and writes bench/results.md
# (replacing it).
# Scale through the environment: BENCH_N=1000 (bulk upgrades), BENCH_SCALE=10000 (read path and
# memory), BENCH_ROUNDS, BENCH_FIGURES=1,2,5. docs/performance.md explains every figure.
set -euo pipefail
cd "$(dirname "$0")/.."
# bench/results.md is replaced (-out, given after, writes elsewhere: `hack/bench.sh -out /tmp/r.md`).
out=bench/results.md
prev=
for a in "$@"; do
	case "$prev" in -out | --out) out=$a ;; esac
	case "$a" in -out=* | --out=*) out=${a#*=} ;; esac
	prev=$a
done
# A failed figure makes the command exit 1 after writing the results: the web UI section below is
# still appended, then the status is passed on.
rc=0
go run ./hack/bench/cmd/bench -bin bin -nogoo9 bin/nogoo9 -out bench/results.md "$@" || rc=$?

# The web UI: time to render the workspace list and its weight (page and embedded assets), at 100
# and 1,000 workspaces (docs/ui.md). Appended to the same results.
{
	echo
	echo "## Web UI list page (go test -bench BenchmarkListPage ./pkg/ui/)"
	echo
	echo '```'
	go test -run '^$' -bench BenchmarkListPage -benchtime 20x ./pkg/ui/ | grep -E '^(Benchmark|goos|goarch|cpu)'
	echo '```'
} >>"$out"
exit "$rc"
