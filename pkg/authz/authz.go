// Package authz decides who may spawn workspaces in which namespace. nogoo9's own namespace is
// open to every authenticated user; in any other watched namespace the caller needs permission to
// create the virtual resource workspaces (API group nogoo9.io) there, which nogoo9 asks the API
// server with a SubjectAccessReview. A platform team grants it with an ordinary Role and
// RoleBinding, no CRD involved (docs/deploy.md, "Who may spawn where").
package authz

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/auth"
)

// The attributes a SubjectAccessReview asks about: verb create on workspaces.nogoo9.io.
const (
	Group    = "nogoo9.io"
	Resource = "workspaces"
	Verb     = "create"
)

// DefaultTTL is how long an answer is reused for the same user, groups and namespace.
const DefaultTTL = 10 * time.Second

// maxEntries bounds the cache; when full, expired answers go, then everything.
const maxEntries = 4096

// SpawnAccess answers with SubjectAccessReviews, caching each answer for TTL.
type SpawnAccess struct {
	// Client creates SubjectAccessReviews (nogoo9 needs create subjectaccessreviews).
	Client client.Client
	// TTL is how long an answer is reused (DefaultTTL when 0).
	TTL time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu    sync.Mutex
	cache map[string]answer
}

type answer struct {
	allowed bool
	reason  string
	at      time.Time
}

// MaySpawn reports whether c may create workspaces in namespace. A denial's reason is the API
// server's (often empty). Errors (the API server unreachable) are not cached.
func (a *SpawnAccess) MaySpawn(ctx context.Context, c *auth.Caller, namespace string) (bool, string, error) {
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	ttl := a.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	key := cacheKey(namespace, c.Subject, c.Groups)
	a.mu.Lock()
	if ans, ok := a.cache[key]; ok && now().Sub(ans.at) < ttl {
		a.mu.Unlock()
		return ans.allowed, ans.reason, nil
	}
	a.mu.Unlock()

	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   c.Subject,
		Groups: c.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: Verb, Group: Group, Resource: Resource,
		},
	}}
	if err := a.Client.Create(ctx, sar); err != nil {
		return false, "", fmt.Errorf("ask the API server whether %s may create %s.%s in namespace %s: %w", c.Subject, Resource, Group, namespace, err)
	}
	ans := answer{allowed: sar.Status.Allowed && !sar.Status.Denied, reason: sar.Status.Reason, at: now()}
	if sar.Status.EvaluationError != "" && !ans.allowed && ans.reason == "" {
		ans.reason = sar.Status.EvaluationError
	}
	a.mu.Lock()
	if a.cache == nil {
		a.cache = map[string]answer{}
	}
	if len(a.cache) >= maxEntries {
		for k, v := range a.cache {
			if now().Sub(v.at) >= ttl {
				delete(a.cache, k)
			}
		}
		if len(a.cache) >= maxEntries {
			clear(a.cache)
		}
	}
	a.cache[key] = ans
	a.mu.Unlock()
	return ans.allowed, ans.reason, nil
}

// cacheKey is the cache key of a question: the namespace, the subject and the sorted groups, each
// prefixed with its length. A separator alone would be ambiguous, since a subject or a group may
// hold any byte: subject "alice\x00x" with group y would share the key of subject alice with
// groups x and y, and one would be answered with the other's allow.
func cacheKey(namespace, subject string, groups []string) string {
	sorted := slices.Clone(groups)
	slices.Sort(sorted)
	var b strings.Builder
	for _, s := range append([]string{namespace, subject}, sorted...) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	return b.String()
}
