#!/usr/bin/env bash
# Installs what figures 6-7 of `make bench` (hack/bench/proxybench) need, when missing: wrk (the
# HTTP load), nginx (the baseline proxy) and taskset (CPU placement), from Debian's packages wrk, nginx
# and util-linux. Nothing to do when all three are there, or when BENCH_FIGURES names neither figure 6
# nor 7. A tool that cannot be installed is an error with a clear message: the figures would fail.
set -euo pipefail

# Debian installs nginx in /usr/sbin, which a user's PATH may lack (make bench adds it).
PATH="$PATH:/usr/sbin:/sbin"

figures=${BENCH_FIGURES:-1,2,3,4,5,6,7}
if ! [[ ",${figures// /}," =~ ,(6|7), ]]; then
	exit 0
fi

declare -A pkg=([wrk]=wrk [nginx]=nginx [taskset]=util-linux)
tools=()
missing=()
for t in wrk nginx taskset; do
	if ! command -v "$t" >/dev/null 2>&1; then
		tools+=("$t")
		missing+=("${pkg[$t]}")
	fi
done
((${#missing[@]} > 0)) || exit 0

if ! command -v apt-get >/dev/null 2>&1; then
	echo "error: ${tools[*]} not found and apt-get is not available: install wrk, nginx and taskset (util-linux) with your package manager, or run make bench BENCH_FIGURES=1,2,3,4,5" >&2
	exit 1
fi
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
	if ! command -v sudo >/dev/null 2>&1 || ! sudo -n true 2>/dev/null; then
		echo "error: ${tools[*]} not found and this user cannot install packages (not root, no passwordless sudo): run 'apt-get install -y ${missing[*]}' as root, or run make bench BENCH_FIGURES=1,2,3,4,5 to leave out figures 6-7" >&2
		exit 1
	fi
	SUDO=(sudo -n)
fi
echo "bench: ${tools[*]} not found, needed by figures 6-7 (hack/bench/proxybench): installing Debian's package(s) ${missing[*]}" >&2
"${SUDO[@]}" apt-get update -qq
# Debian's nginx package starts its service where it can; proxybench runs its own nginx on other
# ports, so a running service does not disturb it.
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for t in wrk nginx taskset; do
	command -v "$t" >/dev/null 2>&1 || {
		echo "error: apt-get installed ${missing[*]} but $t is still not on PATH ($PATH)" >&2
		exit 1
	}
done
echo "bench: installed ${missing[*]}" >&2
