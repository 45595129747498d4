#!/usr/bin/env bash
# `make bench`: measures nogoo9 against baselines in the same run and writes bench/results.md.
# Scale through the environment: BENCH_N=1000 (bulk upgrades), BENCH_SCALE=10000 (read path and
# memory), BENCH_ROUNDS, BENCH_FIGURES=1,2,5. docs/performance.md explains every figure.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./hack/bench/cmd/bench -bin bin -nogoo9 bin/nogoo9 -out bench/results.md "$@"
