#!/usr/bin/env bash
# make demo: a local cluster (etcd, kube-apiserver, scheduler, controller-manager, kwok), the sample
# templates, nogoo9 with every component, authenticated against the API server's own OIDC
# issuer, and the demo stand-in (hack/standin) that serves each workspace pod's IP in place of the
# container kwok does not run. Spawns a workspace "demo" and prints how to open it; Ctrl-C stops
# everything this script started.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=$root/bin
dir=${NOGOO9_CLUSTER_DIR:-$root/.cluster}
ns=${NOGOO9_NAMESPACE:-default}
api_port=${NOGOO9_API_PORT:-8090}
proxy_port=${NOGOO9_PROXY_PORT:-8091}
metrics_port=${NOGOO9_METRICS_PORT:-8092}
probe_port=${NOGOO9_PROBE_PORT:-8093}
kc=$dir/kubeconfig
k() { kubectl --kubeconfig "$kc" "$@"; }
say() { printf '==> %s\n' "$*"; }

for p in "$api_port" "$proxy_port" "$metrics_port" "$probe_port"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		echo "port $p on 127.0.0.1 is in use: stop what listens there or set NOGOO9_API_PORT, NOGOO9_PROXY_PORT, NOGOO9_METRICS_PORT, NOGOO9_PROBE_PORT" >&2
		exit 1
	fi
done

nogoo9_pid=""
standin_pid=""
# stop PID: SIGTERM, then wait (bounded: SIGKILL after 10 s).
stop() {
	local pid=$1
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null || true
}
cleanup() {
	trap - INT TERM EXIT
	echo
	say "stopping"
	stop "$standin_pid"
	stop "$nogoo9_pid"
	go run ./hack/cluster down --dir "$dir" || true
}
trap cleanup INT TERM EXIT

say "building the demo stand-in (bin/standin, from hack/standin)"
go build -o "$bin/standin" ./hack/standin/cmd/standin

# A cluster left over from an earlier demo is stopped first: the demo always starts clean.
go run ./hack/cluster down --dir "$dir" >/dev/null 2>&1 || true
rm -rf "$dir"
say "starting the local cluster in $dir"
go run ./hack/cluster up --bin "$bin" --dir "$dir"
server=$(k config view -o jsonpath='{.clusters[0].cluster.server}')

say "applying the sample templates (config/samples) to namespace $ns"
k apply --server-side -n "$ns" -k config/samples >/dev/null
k get configmaps -n "$ns" -l nogoo9/pod-template=true

say "creating the demo identities (service accounts demo-user, demo-admin)"
k create serviceaccount demo-user -n "$ns" --dry-run=client -o yaml | k apply -f - >/dev/null
k create serviceaccount demo-admin -n "$ns" --dry-run=client -o yaml | k apply -f - >/dev/null
user_token=$(k create token demo-user -n "$ns" --audience nogoo9 --duration 24h)
admin_token=$(k create token demo-admin -n "$ns" --audience nogoo9 --duration 24h)

# One key for nogoo9's upgrade records that survives a restart of the demo's nogoo9 (docs/upgrades.md).
[ -s "$dir/integrity-keys" ] || (umask 077; head -c 32 /dev/urandom | base64 >"$dir/integrity-keys")

say "starting nogoo9 (log: $dir/nogoo9.log)"
"$bin/nogoo9" --kubeconfig "$kc" --namespace "$ns" --leader-elect=false \
	--integrity-key-file "$dir/integrity-keys" \
	--auth=oidc --oidc-issuer-url "$server" --oidc-client-id nogoo9 --oidc-ca-file "$dir/pki/ca.crt" \
	--oidc-admin-claim sub --oidc-admin-value "system:serviceaccount:$ns:demo-admin" \
	--api-bind-address "127.0.0.1:$api_port" --proxy-bind-address "127.0.0.1:$proxy_port" \
	--metrics-bind-address "127.0.0.1:$metrics_port" --health-probe-bind-address "127.0.0.1:$probe_port" \
	--insecure-cookie --ui-insecure-cookie >"$dir/nogoo9.log" 2>&1 &
nogoo9_pid=$!
for _ in $(seq 1 120); do
	if curl -fsS "http://127.0.0.1:$probe_port/readyz" >/dev/null 2>&1; then break; fi
	if ! kill -0 "$nogoo9_pid" 2>/dev/null; then
		echo "nogoo9 exited; the end of its log:" >&2
		tail -n 30 "$dir/nogoo9.log" >&2
		exit 1
	fi
	sleep 0.5
done
curl -fsS "http://127.0.0.1:$probe_port/readyz" >/dev/null || { echo "nogoo9 did not become ready within 60 s; see $dir/nogoo9.log" >&2; exit 1; }

say "starting the demo stand-in for workspace pods (log: $dir/standin.log)"
"$bin/standin" serve --kubeconfig "$kc" --namespace "$ns" >"$dir/standin.log" 2>&1 &
standin_pid=$!
for _ in $(seq 1 120); do
	if grep -q 'watching workspace pods' "$dir/standin.log" 2>/dev/null; then break; fi
	if ! kill -0 "$standin_pid" 2>/dev/null; then
		echo "the stand-in exited; the end of its log:" >&2
		tail -n 30 "$dir/standin.log" >&2
		exit 1
	fi
	sleep 0.5
done
grep -q 'watching workspace pods' "$dir/standin.log" || { echo "the stand-in did not start within 60 s; see $dir/standin.log" >&2; exit 1; }

api=http://127.0.0.1:$api_port
proxy=http://127.0.0.1:$proxy_port
say "spawning workspace \"demo\" from template node as demo-user"
curl -fsS -o /dev/null -H "Authorization: Bearer $user_token" -H 'Content-Type: application/json' \
	-d '{"template":"node","id":"demo","name":"My demo"}' "$api/api/v1/workspaces"
ws_path=""
for _ in $(seq 1 120); do
	ws_path=$(k get pods -n "$ns" -l nogoo9/workspace-id=demo -o jsonpath='{.items[0].metadata.annotations.nogoo9/workspace-path}' 2>/dev/null || true)
	if [ -n "$ws_path" ] && curl -fsS -o /dev/null -H "Authorization: Bearer $user_token" "$proxy$ws_path" 2>/dev/null; then break; fi
	sleep 0.5
done
if ! curl -fsS -o /dev/null -H "Authorization: Bearer $user_token" "$proxy$ws_path" 2>/dev/null; then
	echo "workspace demo is not reachable through the proxy at $proxy$ws_path within 60 s; the end of the stand-in's log ($dir/standin.log):" >&2
	tail -n 20 "$dir/standin.log" >&2
	exit 1
fi

cat <<MSG

nogoo9 is running against the local cluster; the demo stand-in plays each workspace's container.

  MCP endpoint   $api/mcp            (Streamable HTTP, bearer token)
  REST API       $api/api/v1
  Proxy          $proxy/ws/<namespace>/<id>/   (this workspace: $proxy$ws_path)
  Web UI         $api/                (open it in a browser; "Development login": paste the
                                      user or admin token below, the admin sees "All workspaces")
  Kubeconfig     $kc
                 kubectl --kubeconfig $kc get pods,nodes
  Logs           $dir/nogoo9.log, $dir/standin.log, $dir/*.log

  User token (system:serviceaccount:$ns:demo-user):
    export USER_TOKEN=$user_token
  Admin token (system:serviceaccount:$ns:demo-admin):
    export ADMIN_TOKEN=$admin_token

Workspace "demo" (template node, owner demo-user) is up. Paste the export lines above, then:
  # open it through the proxy (the stand-in's page: workspace, owner, pod, template version)
  curl -sS -H "Authorization: Bearer \$USER_TOKEN" $proxy$ws_path
  # its terminal over WebSocket: type lines, they come back from the pod
  bin/standin term --token "\$USER_TOKEN" ws://127.0.0.1:$proxy_port${ws_path}term
  # in a browser: open $proxy/_nogoo9/login?next=$ws_path and paste the USER_TOKEN value
  #   into the form (the page, then a live terminal); or use the Web UI's Open link

Try:
  # 1. bump the template version: the workspace becomes outdated
  kubectl --kubeconfig $kc annotate configmap node nogoo9/template-version=1.1.0 --overwrite
  curl -sS -H "Authorization: Bearer \$USER_TOKEN" $api/api/v1/workspaces/demo
  # 2. upgrade it (or POST $api/api/v1/workspaces/demo/upgrade): the page moves to 1.1.0 and the
  #    open terminal is closed by the proxy and reconnects to the new pod
  kubectl --kubeconfig $kc annotate pod -l nogoo9/workspace-id=demo nogoo9/upgrade-requested=true
  kubectl --kubeconfig $kc get pods -l nogoo9/type=workspace -L nogoo9/template-version -w
  # 3. spawn another workspace as the user
  curl -sS -H "Authorization: Bearer \$USER_TOKEN" -H 'Content-Type: application/json' \\
       -d '{"template":"node","name":"second"}' $api/api/v1/workspaces

MCP client (e.g. the MCP Inspector):
  npx @modelcontextprotocol/inspector --cli $api/mcp --transport http \\
      --header "Authorization: Bearer \$USER_TOKEN" --method tools/list

Press Ctrl-C to stop the stand-in, nogoo9 and the cluster.
MSG
wait "$nogoo9_pid"
