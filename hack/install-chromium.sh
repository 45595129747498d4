#!/usr/bin/env bash
# Installs Debian's chromium for the browser tests (test/e2e/ui_test.go, pkg/ui) when it is missing.
# A browser that cannot be installed is an error with a clear message: the specs never skip.
set -euo pipefail

for b in "${CHROMIUM:-}" chromium chromium-browser; do
	if [[ -n "$b" ]] && command -v "$b" >/dev/null 2>&1; then
		exit 0
	fi
done

echo "chromium not found: installing Debian's chromium package for the browser e2e specs" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "error: chromium is missing and this user cannot install packages: run 'apt-get install -y chromium' as root, or set CHROMIUM to a Chromium binary" >&2
		exit 1
	fi
	SUDO="sudo"
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "error: chromium is missing and apt-get is not available: install Chromium and set CHROMIUM to its binary" >&2
	exit 1
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null 2>&1 || {
	echo "error: apt-get installed chromium but no chromium binary is on PATH" >&2
	exit 1
}
echo "chromium installed: $(chromium --version 2>/dev/null || echo unknown version)" >&2
