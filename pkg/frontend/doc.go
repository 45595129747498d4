// Package frontend holds the operations nogoo9's front ends offer (list, get, spawn, delete,
// upgrade, upgrade all, events, maintenance), with their authorization rules, shared by the REST
// API (pkg/api) and the MCP server (pkg/mcp) so both always agree.
//
// Reads come from the manager's informer cache through two field indexes (by owner and by
// workspace id) and without deep copies, so listing a user's workspaces costs the same with ten
// or ten thousand workspaces in the namespace. Writes are a Pod create (through the spawner),
// merge patches of nogoo9's intent annotations, and Pod deletes; nothing here waits for a pod.
package frontend
