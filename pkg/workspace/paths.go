package workspace

import (
	"fmt"
	"path"
	"strings"
)

// ReservedPathPrefix is the proxy's own path space (login, logout); no route may claim it.
const ReservedPathPrefix = "/_nogoo9/"

// WorkspacePath is the proxy path a new workspace is served on: "/ws/<namespace>/<id>/". Ids are
// unique per namespace, so the path is short, stable and names the namespace. Workspaces created
// before it keep the path stamped on their pods (AnnWorkspacePath, e.g. "/ws/<user-label>/<id>/"):
// the proxy routes on the annotation, and upgrades copy it, so no bookmark breaks.
func WorkspacePath(namespace, id string) string { return "/ws/" + namespace + "/" + id + "/" }

// PreviewPath is the proxy path of a new workspace's preview: "/preview/<namespace>/<id>/".
func PreviewPath(namespace, id string) string { return "/preview/" + namespace + "/" + id + "/" }

// RoutePrefix turns a path annotation (nogoo9/workspace-path, nogoo9/preview-path) into the
// proxy's route prefix, or says why it is none (the proxy leaves such a route out, and the UI links
// nothing): absolute, clean, ending in "/", at least one segment, outside ReservedPathPrefix. A
// link is the prefix it returns, never the annotation: "@evil.example/" or ".evil.example/" after
// a base URL would leave the proxy's host.
func RoutePrefix(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("path %s does not start with /: use e.g. /ws/<user>/<id>/", Quote(p))
	}
	if strings.ContainsAny(p, "?#%\\ ") {
		return "", fmt.Errorf("path %s contains one of ?#%%\\ or a space: use plain path segments", Quote(p))
	}
	if IsCleanPath(p) && strings.HasSuffix(p, "/") && p != "/" && !strings.HasPrefix(p, ReservedPathPrefix) {
		// Already a prefix (the usual annotation, "/ws/<user>/<id>/"): the route keeps the
		// annotation's own string, which the cached pod holds anyway, instead of a copy per route.
		return p, nil
	}
	c := path.Clean(p)
	if c == "/" {
		return "", fmt.Errorf("path %s is the root: a workspace needs its own prefix such as /ws/<user>/<id>/", Quote(p))
	}
	c += "/"
	if strings.HasPrefix(c, ReservedPathPrefix) {
		return "", fmt.Errorf("path %s is inside %s, which the proxy reserves", Quote(p), ReservedPathPrefix)
	}
	return c, nil
}

// IsCleanPath reports whether p (starting with "/") has no empty, "." or ".." segment.
func IsCleanPath(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		rest := p[i+1:]
		if rest == "" {
			return true
		}
		switch {
		case rest[0] == '/':
			return false
		case rest[0] == '.' && (len(rest) == 1 || rest[1] == '/'):
			return false
		case rest[0] == '.' && rest[1] == '.' && (len(rest) == 2 || rest[2] == '/'):
			return false
		}
	}
	return true
}
