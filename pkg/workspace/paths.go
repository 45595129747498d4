package workspace

// WorkspacePath is the proxy path a new workspace is served on: "/ws/<namespace>/<id>/". Ids are
// unique per namespace, so the path is short, stable and names the namespace. Workspaces created
// before it keep the path stamped on their pods (AnnWorkspacePath, e.g. "/ws/<user-label>/<id>/"):
// the proxy routes on the annotation, and upgrades copy it, so no bookmark breaks.
func WorkspacePath(namespace, id string) string { return "/ws/" + namespace + "/" + id + "/" }

// PreviewPath is the proxy path of a new workspace's preview: "/preview/<namespace>/<id>/".
func PreviewPath(namespace, id string) string { return "/preview/" + namespace + "/" + id + "/" }
