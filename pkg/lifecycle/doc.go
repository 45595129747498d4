// Package lifecycle is the pure planner of stopping, starting and culling workspaces
// (docs/lifecycle.md): Plan(observed, target, now, cfg) -> one move, and the idle rule
// IdleSince. It never talks to the API server; the workspace controller applies its moves.
//
// A stopped workspace is its pod replaced by a pod of the same identity that the scheduling gate
// nogoo9/stopped holds: same labels and annotations, same claims, no node. The intent is
// nogoo9/stop-requested on a live pod: present means stopped, absent means running.
package lifecycle
