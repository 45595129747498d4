package frontend

import (
	"context"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Namespaces. A request addresses workspaces in one namespace: nogoo9's own (Config.Namespace)
// unless the caller named another with WithNamespace (the REST routes under
// /api/v1/namespaces/{ns}/, the MCP tools' namespace argument). Only watched namespaces
// (Config.Namespaces) can be addressed; any other is refused with CodeNotFound, naming the
// namespace and what to do. Reading and changing a workspace needs what it always needed (being
// its owner, or an admin); spawning in a namespace other than nogoo9's own also needs
// Config.Access to allow it (pkg/authz: a SubjectAccessReview).

type namespaceKey struct{}

// WithNamespace returns a copy of ctx whose requests address namespace ns ("" keeps nogoo9's own).
func WithNamespace(ctx context.Context, ns string) context.Context {
	if ns == "" {
		return ctx
	}
	return context.WithValue(ctx, namespaceKey{}, ns)
}

// SpawnAccess decides whether a caller may create workspaces in a namespace other than nogoo9's
// own. Allowed is false with a reason when the answer is no; err is for when no answer could be
// had (the API server is unreachable).
type SpawnAccess interface {
	MaySpawn(ctx context.Context, c *auth.Caller, namespace string) (allowed bool, reason string, err error)
}

// watched returns the namespaces the front end may address: Config.Namespaces, always with
// Config.Namespace.
func (s *Service) watched() []string {
	if len(s.cfg.Namespaces) == 0 {
		return []string{s.cfg.Namespace}
	}
	return s.cfg.Namespaces
}

// Namespaces returns the watched namespaces, sorted (nogoo9's own among them).
func (s *Service) Namespaces() []string {
	out := slices.Clone(s.watched())
	if !slices.Contains(out, s.cfg.Namespace) {
		out = append(out, s.cfg.Namespace)
	}
	slices.Sort(out)
	return out
}

// HomeNamespace is nogoo9's own namespace: where today's routes and tools act.
func (s *Service) HomeNamespace() string { return s.cfg.Namespace }

// namespace is the namespace ctx addresses, or a CodeNotFound (CodeInvalid for a malformed name)
// when nogoo9 does not watch it.
func (s *Service) namespace(ctx context.Context) (string, error) {
	ns, _ := ctx.Value(namespaceKey{}).(string)
	if ns == "" || ns == s.cfg.Namespace {
		return s.cfg.Namespace, nil
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", errorf(CodeInvalid, "namespace %s is not a namespace name (%s): use one of [%s]", workspace.Quote(ns), strings.Join(errs, "; "), strings.Join(s.Namespaces(), ", "))
	}
	if !slices.Contains(s.watched(), ns) {
		return "", errorf(CodeNotFound, "namespace %q is not watched by nogoo9: use one of [%s], or ask the platform team to add %s to --namespaces (or label it to match the selector)", ns, strings.Join(s.Namespaces(), ", "), ns)
	}
	return ns, nil
}

// nsOf is the namespace ctx addresses, already checked by namespace (nogoo9's own otherwise).
func (s *Service) nsOf(ctx context.Context) string {
	if ns, err := s.namespace(ctx); err == nil {
		return ns
	}
	return s.cfg.Namespace
}

// maySpawnIn refuses c a spawn in ns unless ns is nogoo9's own namespace (open to every
// authenticated user, as before namespaces existed), c is an admin, or Config.Access allows it.
func (s *Service) maySpawnIn(ctx context.Context, c *auth.Caller, ns string) error {
	if ns == s.cfg.Namespace || c.IsAdmin {
		return nil
	}
	if s.cfg.Access == nil {
		return errorf(CodeForbidden, "Forbidden: %s may not create workspaces in namespace %q: this nogoo9 has no access check configured, so it spawns only in %s", c.Subject, ns, s.cfg.Namespace)
	}
	ok, reason, err := s.cfg.Access.MaySpawn(ctx, c, ns)
	if err != nil {
		return &Error{Code: CodeInternal, Message: "checking whether you may create workspaces in namespace " + ns + " failed; try again", Err: err}
	}
	if !ok {
		msg := "Forbidden: " + c.Subject + " may not create workspaces in namespace " + ns + ": ask its administrators for a RoleBinding that allows create on workspaces.nogoo9.io there (docs/deploy.md), or spawn in " + s.cfg.Namespace
		if reason != "" {
			msg += " (API server: " + reason + ")"
		}
		return errorf(CodeForbidden, "%s", msg)
	}
	return nil
}
