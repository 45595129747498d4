package templates

import "github.com/nogoo9/no-crd/pkg/workspace"

// The lookup rule (docs/templates.md, "Where a template is looked up"): a spawn in namespace ns
// finds a template in ns first, then in nogoo9's namespace; the pod is stamped with where it was
// found, and every later lookup for the workspace uses the stamp (workspace.TemplateKey), so a
// team template created later never takes over workspaces that already follow nogoo9's.

// LookupNamespace is where a spawn in namespace ns finds its template: ns itself when team
// templates are read (nsTemplates), ns is not nogoo9's namespace home, and ns holds a template
// ConfigMap of that name (inNamespace, valid or not: a broken team template is reported as
// such, never silently replaced by nogoo9's); otherwise nogoo9's namespace, returned as "" (the
// namespace part of a registry key, workspace.JoinTemplateKey).
func LookupNamespace(ns, home string, nsTemplates, inNamespace bool) string {
	if !nsTemplates || ns == "" || ns == home || !inNamespace {
		return ""
	}
	return ns
}

// Visible is what a caller in namespace ns is offered out of all (Registry.List): ns's own
// templates, then nogoo9's (Namespace home) whose name none of ns's shadows, in all's order. For
// nogoo9's own namespace it is nogoo9's templates only.
func Visible(all []Info, ns, home string) []Info {
	team := ns != "" && ns != home
	shadowed := map[string]bool{}
	if team {
		for _, i := range all {
			if i.Namespace == ns {
				shadowed[i.Name] = true
			}
		}
	}
	out := make([]Info, 0, len(all))
	for _, i := range all {
		if (team && i.Namespace == ns) || (i.Namespace == home && !shadowed[i.Name]) {
			out = append(out, i)
		}
	}
	return out
}

// Key is the registry key (Registry.Get) of template name found in namespace ns, as Info and
// the front end's lists name it: the name alone for nogoo9's namespace home (or ""),
// "<ns>/<name>" for a team template (workspace.JoinTemplateKey). keyNamespace undoes it.
func Key(ns, name, home string) string {
	if ns == home {
		ns = ""
	}
	return workspace.JoinTemplateKey(ns, name)
}

// keyNamespace is the namespace part of a registry key, "" for nogoo9's namespace home (also
// when the key names home explicitly).
func keyNamespace(key, home string) (ns, name string) {
	ns, name = workspace.SplitTemplateKey(key)
	if ns == home {
		ns = ""
	}
	return ns, name
}
