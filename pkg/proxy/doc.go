// Package proxy is nogoo9's workspace proxy: it routes HTTP and WebSocket traffic for a
// workspace's path prefixes (nogoo9/workspace-path, nogoo9/preview-path) to the pod that serves the
// workspace, with seamless cutover during side-by-side upgrades.
//
// The route table is built from informer events on the cached workspace pods, never from an API
// call per request; a request is routed by a few map lookups under a read lock. Each route has its
// own httputil.ReverseProxy (all sharing one buffer pool and one transport), so the target is known
// without a per-request context value. Plain requests skip ReverseProxy (forward.go): the
// outgoing request is written straight from the incoming one. The transport (transport.go) does plain HTTP/1.1 exchanges on
// the request's own goroutine over a pool of kept-alive pod connections and leaves upgrades and
// large uploads to http.Transport. Every WebSocket is pinned to the pod it was opened on and
// closed when that pod is deleted or stays not-ready longer than a grace period, so the client
// reconnects and lands on the current pod. See docs/proxy.md.
package proxy
