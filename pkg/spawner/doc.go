// Package spawner turns a template and an identity into a workspace: BuildPod is the pure
// rendering (placeholders, annotation helpers, labels, routing, volume claims), and Spawner.Spawn
// creates the Pod and its PersistentVolumeClaims with quota and conflict checks that hold across
// concurrent requests and several nogoo9 replicas. Errors are *Error values whose Code the REST
// and MCP layers map to a status.
package spawner
