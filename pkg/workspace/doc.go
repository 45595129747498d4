// Package workspace is nogoo9's shared vocabulary and the pure model of a workspace.
//
// A workspace has no CRD: it is one or more labelled Pods (two during a side-by-side upgrade)
// sharing a workspace id, and everything nogoo9 knows about it is written on those Pods as the
// labels and annotations declared in keys.go. This package holds those keys, the naming rules that
// keep every generated name a valid DNS-1123 label, and pure functions that derive a workspace's
// view (active pod, phase) from its Pods. Nothing here talks to the API server.
package workspace
