#!/usr/bin/env bash
# make demo: a local cluster (etcd, kube-apiserver, scheduler, controller-manager, kwok), the sample
# templates, nogoo9 with every component, authenticated against the API server's own OIDC
# issuer, and the demo stand-in (hack/standin) that serves each workspace pod's IP in place of the
# container kwok does not run. Spawns a workspace "demo" and prints how to open it; Ctrl-C stops
# everything this script started.
#
# `hack/demo.sh --check` only checks that the tools the demo needs are on PATH.
#
# Environment: NOGOO9_CLUSTER_DIR (default .cluster: the cluster's data, keys and logs; deleted and
# made anew at the start, so it must be new, empty, or one nogoo9's local cluster made),
# NOGOO9_NAMESPACE (default default; created if missing), NOGOO9_API_PORT, NOGOO9_PROXY_PORT,
# NOGOO9_METRICS_PORT, NOGOO9_PROBE_PORT. The demo holds a lock (flock on <cluster dir>.lock) while it
# runs, so a second demo on the same directory refuses instead of tearing the first one down.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=$root/bin
dir=${NOGOO9_CLUSTER_DIR:-$root/.cluster}
dir=${dir%/}
ns=${NOGOO9_NAMESPACE:-default}
api_port=${NOGOO9_API_PORT:-8090}
proxy_port=${NOGOO9_PROXY_PORT:-8091}
metrics_port=${NOGOO9_METRICS_PORT:-8092}
probe_port=${NOGOO9_PROBE_PORT:-8093}
kc=$dir/kubeconfig
k() { kubectl --kubeconfig "$kc" "$@"; }
say() { printf '==> %s\n' "$*"; }

# The tools the demo needs: make demo runs `hack/demo.sh --check` before it builds anything (the
# first build takes minutes), and the demo checks them again here.
for c in curl kubectl go flock; do
	if ! command -v "$c" >/dev/null 2>&1; then
		echo "make demo needs $c on PATH: install it (README.md lists what make demo needs), then run make demo again" >&2
		exit 1
	fi
done
[ "${1:-}" = --check ] && exit 0
if [ -z "$dir" ]; then
	echo "NOGOO9_CLUSTER_DIR=/ is not a cluster directory: set it to a new or empty directory" >&2
	exit 1
fi

# The cluster directory is deleted below, so it must be new, empty, or one that nogoo9's local
# cluster made: hack/localcluster's state.json while a cluster is recorded there, the marker this
# script writes, or the kubeconfig and token file a stopped cluster leaves. Anything else is
# refused, never deleted.
marker=.nogoo9-cluster-dir
is_cluster_dir() {
	[ -f "$1/$marker" ] || { [ -f "$1/state.json" ] && grep -q '"apiServerURL"' "$1/state.json"; } ||
		{ [ -f "$1/kubeconfig" ] && [ -f "$1/pki/tokens.csv" ]; }
}
if [ -e "$dir" ] && ! [ -d "$dir" ]; then
	echo "NOGOO9_CLUSTER_DIR=$dir is not a directory: set NOGOO9_CLUSTER_DIR to a new or empty directory" >&2
	exit 1
fi
if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && ! is_cluster_dir "$dir"; then
	echo "NOGOO9_CLUSTER_DIR=$dir is not empty and is not a directory nogoo9's local cluster made (no $marker, state.json or kubeconfig with pki/tokens.csv): the demo deletes its cluster directory at the start, so it refuses this one; set NOGOO9_CLUSTER_DIR to a new or empty directory" >&2
	exit 1
fi

# One demo per cluster directory: the lock is held (fd 9) until this script exits, however it
# exits; processes this script starts get the fd closed (9>&-), so none of them holds it after us.
# The lock file is never removed (removing it would let two demos lock two different files).
lock=$dir.lock
mkdir -p "$(dirname "$dir")"
exec 9<>"$lock"
if ! flock -n 9; then
	holder=$(cat "$lock" 2>/dev/null || true)
	echo "another make demo (pid ${holder:-unknown}) is running with cluster directory $dir (it holds $lock): stop it first (Ctrl-C in its terminal), then run make demo again; run one demo or e2e suite per machine at a time (docs/development.md)" >&2
	exit 1
fi
echo $$ >"$lock"

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
	go run ./hack/cluster down --dir "$dir" 9>&- || true
}
trap cleanup INT TERM EXIT

say "building the demo stand-in (bin/standin, from hack/standin)"
go build -o "$bin/standin" ./hack/standin/cmd/standin

# A cluster left over from an earlier demo is stopped first: the demo always starts clean.
go run ./hack/cluster down --dir "$dir" >/dev/null 2>&1 9>&- || true
rm -rf "$dir"
mkdir -p "$dir"
echo "made by hack/demo.sh: the next make demo may delete this directory" >"$dir/$marker"
say "starting the local cluster in $dir"
go run ./hack/cluster up --bin "$bin" --dir "$dir" 9>&-
server=$(k config view -o jsonpath='{.clusters[0].cluster.server}')

if [ "$ns" != default ]; then
	say "creating namespace $ns (if missing)"
	k create namespace "$ns" --dry-run=client -o yaml | k apply --server-side -f - >/dev/null
fi
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
	--insecure-cookie --ui-insecure-cookie >"$dir/nogoo9.log" 2>&1 9>&- &
nogoo9_pid=$!
deadline=$((SECONDS + 60))
while ((SECONDS < deadline)); do
	if curl -fsS --max-time 5 "http://127.0.0.1:$probe_port/readyz" >/dev/null 2>&1; then break; fi
	if ! kill -0 "$nogoo9_pid" 2>/dev/null; then
		echo "nogoo9 exited; the end of its log:" >&2
		tail -n 30 "$dir/nogoo9.log" >&2
		exit 1
	fi
	sleep 0.5
done
curl -fsS --max-time 5 "http://127.0.0.1:$probe_port/readyz" >/dev/null || { echo "nogoo9 did not become ready within 60 s; see $dir/nogoo9.log" >&2; exit 1; }

say "starting the demo stand-in for workspace pods (log: $dir/standin.log)"
"$bin/standin" serve --kubeconfig "$kc" --namespace "$ns" >"$dir/standin.log" 2>&1 9>&- &
standin_pid=$!
deadline=$((SECONDS + 60))
while ((SECONDS < deadline)); do
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
# 15 s, not 5: the API answers a spawn within its --api-write-timeout (10 s), 503 after that.
spawn_rc=0
spawn_resp=$(curl -sS --max-time 15 -w '\n%{http_code}' -H "Authorization: Bearer $user_token" -H 'Content-Type: application/json' \
	-d '{"template":"node","id":"demo","name":"My demo"}' "$api/api/v1/workspaces" 2>&1) || spawn_rc=$?
spawn_code=${spawn_resp##*$'\n'}
if [ "$spawn_rc" -ne 0 ] || ! [[ $spawn_code =~ ^2[0-9][0-9]$ ]]; then
	echo "spawning workspace demo failed (curl exit status $spawn_rc, HTTP status $spawn_code); the response:" >&2
	printf '%s\n' "${spawn_resp%$'\n'*}" >&2
	echo "the end of nogoo9's log ($dir/nogoo9.log):" >&2
	tail -n 30 "$dir/nogoo9.log" >&2
	exit 1
fi
ws_path=""
deadline=$((SECONDS + 60))
while ((SECONDS < deadline)); do
	ws_path=$(k get pods -n "$ns" -l nogoo9/workspace-id=demo -o jsonpath='{.items[0].metadata.annotations.nogoo9/workspace-path}' 2>/dev/null || true)
	if [ -n "$ws_path" ] && curl -fsS --max-time 5 -o /dev/null -H "Authorization: Bearer $user_token" "$proxy$ws_path" 2>/dev/null; then break; fi
	sleep 0.5
done
if [ -z "$ws_path" ] || ! curl -fsS --max-time 5 -o /dev/null -H "Authorization: Bearer $user_token" "$proxy$ws_path" 2>/dev/null; then
	echo "workspace demo is not reachable through the proxy at $proxy$ws_path within 60 s; the end of the stand-in's log ($dir/standin.log):" >&2
	tail -n 20 "$dir/standin.log" >&2
	exit 1
fi

# The kubectl lines below name the namespace unless it is kubectl's default.
nsf=""
[ "$ns" = default ] || nsf=" -n $ns"
cat <<MSG

nogoo9 is running against the local cluster; the demo stand-in plays each workspace's container.

  MCP endpoint   $api/mcp            (Streamable HTTP, bearer token)
  REST API       $api/api/v1
  Proxy          $proxy/ws/<namespace>/<id>/   (this workspace: $proxy$ws_path)
  Web UI         $api/                (open it in a browser; "Development login": paste the
                                      user or admin token below, the admin sees "All workspaces")
  Kubeconfig     $kc
                 kubectl --kubeconfig $kc$nsf get pods,nodes
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
  kubectl --kubeconfig $kc$nsf annotate configmap node nogoo9/template-version=1.1.0 --overwrite
  curl -sS -H "Authorization: Bearer \$USER_TOKEN" $api/api/v1/workspaces/demo
  # 2. upgrade it (or POST $api/api/v1/workspaces/demo/upgrade): the page moves to 1.1.0 and the
  #    open terminal is closed by the proxy and reconnects to the new pod
  kubectl --kubeconfig $kc$nsf annotate pod -l nogoo9/workspace-id=demo nogoo9/upgrade-requested=true
  kubectl --kubeconfig $kc$nsf get pods -l nogoo9/type=workspace -L nogoo9/template-version -w
  # 3. spawn another workspace as the user
  curl -sS -H "Authorization: Bearer \$USER_TOKEN" -H 'Content-Type: application/json' \\
       -d '{"template":"node","name":"second"}' $api/api/v1/workspaces

MCP client (e.g. the MCP Inspector):
  npx @modelcontextprotocol/inspector --cli $api/mcp --transport http \\
      --header "Authorization: Bearer \$USER_TOKEN" --method tools/list

Press Ctrl-C to stop the stand-in, nogoo9 and the cluster.
MSG
wait "$nogoo9_pid"
