#!/usr/bin/env bash
# make demo: a local cluster (etcd, kube-apiserver, scheduler, controller-manager, kwok), the sample
# templates, and nogoo9 with every component, authenticated against the API server's own OIDC
# issuer. Prints how to reach it; Ctrl-C stops everything this script started.
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
cleanup() {
	trap - INT TERM EXIT
	echo
	say "stopping"
	if [ -n "$nogoo9_pid" ] && kill -0 "$nogoo9_pid" 2>/dev/null; then
		kill "$nogoo9_pid" 2>/dev/null || true
		wait "$nogoo9_pid" 2>/dev/null || true
	fi
	go run ./hack/cluster down --dir "$dir" || true
}
trap cleanup INT TERM EXIT

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

say "starting nogoo9 (log: $dir/nogoo9.log)"
"$bin/nogoo9" --kubeconfig "$kc" --namespace "$ns" --leader-elect=false \
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

api=http://127.0.0.1:$api_port
cat <<MSG

nogoo9 is running against the local cluster.

  MCP endpoint   $api/mcp            (Streamable HTTP, bearer token)
  REST API       $api/api/v1
  Web UI         $api/                (open it in a browser; "Development login": paste the
                                      user or admin token below, the admin sees "All workspaces")
  Proxy          http://127.0.0.1:$proxy_port/ws/<user>/<id>/
  Kubeconfig     $kc
                 kubectl --kubeconfig $kc get pods,nodes

  User token (system:serviceaccount:$ns:demo-user):
    export USER_TOKEN=$user_token
  Admin token (system:serviceaccount:$ns:demo-admin):
    export ADMIN_TOKEN=$admin_token

Try:
  # 1. spawn a workspace as the user
  curl -sS -H "Authorization: Bearer \$USER_TOKEN" -H 'Content-Type: application/json' \\
       -d '{"template":"node","name":"demo"}' $api/api/v1/workspaces
  # 2. bump the template version: the workspace becomes outdated
  kubectl --kubeconfig $kc annotate configmap node nogoo9/template-version=1.1.0 --overwrite
  curl -sS -H "Authorization: Bearer \$USER_TOKEN" $api/api/v1/workspaces
  # 3. upgrade it with kubectl (or POST $api/api/v1/workspaces/demo/upgrade)
  kubectl --kubeconfig $kc annotate pod -l nogoo9/workspace-id=demo nogoo9/upgrade-requested=true
  kubectl --kubeconfig $kc get pods -l nogoo9/type=workspace -L nogoo9/template-version -w
  # 4. reach it through the proxy. kwok runs no containers, so serve the pod's IP (127.1.x.x, a
  #    loopback address) yourself; until something listens there the proxy answers 502.
  ip=\$(kubectl --kubeconfig $kc get pod -l nogoo9/workspace-id=demo -o jsonpath='{.items[0].status.podIP}')
  python3 -m http.server 8080 --bind "\$ip" & sleep 1
  path=\$(curl -sS -H "Authorization: Bearer \$USER_TOKEN" $api/api/v1/workspaces/demo | python3 -c 'import json,sys; print(json.load(sys.stdin)["workspacePath"])')
  curl -sS -H "Authorization: Bearer \$USER_TOKEN" "http://127.0.0.1:$proxy_port\$path"

MCP client (e.g. the MCP Inspector):
  npx @modelcontextprotocol/inspector --cli $api/mcp --transport http \\
      --header "Authorization: Bearer \$USER_TOKEN" --method tools/list

Press Ctrl-C to stop nogoo9 and the cluster.
MSG
wait "$nogoo9_pid"
