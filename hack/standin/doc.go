// Package standin stands in for workspace containers on the local kwok cluster, for `make demo` and
// the e2e suite. kwok runs no containers, so a workspace pod has an IP but nothing listens on it and
// nogoo9's proxy answers 502. A StandIn follows the workspace pods of a namespace and, for each
// Running pod whose IP is a loopback address (kwok hands out 127.1.x.y), serves on that IP and on the
// pod's workspace and preview ports (annotations nogoo9/workspace-port, nogoo9/preview-port) what a
// real workspace image would:
//
//   - any path: an HTML page naming the workspace, its owner, its pod and its template version, which
//     keeps itself up to date and carries a small terminal; with Accept: application/json the same
//     facts as JSON (plus the request path and whether an Authorization header arrived);
//   - any path with Upgrade: websocket: a terminal-like echo. The first message is a banner naming the
//     pod and template version; every message after that comes back as "[<pod>, version <v>] <msg>".
//
// It starts serving a pod when the pod is Running with an IP and stops (listener and open WebSockets
// closed, as a killed container's would be) when the pod is deleted, gets a deletion timestamp or
// leaves Running. It refuses to bind anything but 127.0.0.0/8.
//
// This is a demo and test helper: nothing under pkg/ or main.go may import it. The command
// hack/standin/cmd/standin runs it (`standin serve`) and is a terminal client for it (`standin term`).
package standin
