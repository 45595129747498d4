package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nogoo9/no-crd/pkg/api"
	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

const (
	benchWorkspaces = 10000
	benchUsers      = 1000
)

var benchOnce sync.Once

// seedBench creates 10,000 one-pod workspaces (10 each for 1,000 users) once and waits until the
// manager's cache holds them all.
func seedBench(b *testing.B) {
	benchOnce.Do(func() {
		ctx := context.Background()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= benchWorkspaces {
						return
					}
					owner, id := fmt.Sprintf("user-%d", i%benchUsers), fmt.Sprintf("ws-%d", i)
					pod := &corev1.Pod{
						ObjectMeta: metav1.ObjectMeta{
							Name: workspace.PodName(owner, id), Namespace: ns,
							Labels: map[string]string{
								workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: id,
								workspace.LabelUserSub: owner, workspace.LabelTemplate: "python", workspace.LabelTemplateVersion: "1.0",
							},
							Annotations: map[string]string{workspace.AnnOwner: owner, workspace.AnnTemplateVersion: "1.0"},
						},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "example.com/ide:1"}}},
					}
					if err := env.k8s.Create(ctx, pod); err != nil && !isExists(err) {
						panic(err)
					}
				}
			}()
		}
		wg.Wait()
		deadline := time.Now().Add(5 * time.Minute)
		for {
			var l corev1.PodList
			_ = env.mgrCache.List(ctx, &l, client.InNamespace(ns), client.UnsafeDisableDeepCopy)
			if len(l.Items) >= benchWorkspaces {
				break
			}
			if time.Now().After(deadline) {
				panic(fmt.Sprintf("cache holds %d pods after 5 minutes", len(l.Items)))
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The front end's views follow the cache's events a moment later.
		admin := auth.WithCaller(ctx, &auth.Caller{Subject: "root", IsAdmin: true})
		for {
			l, err := env.svc.List(admin, frontend.ListOptions{AllUsers: true})
			if err == nil && l.Len() >= benchWorkspaces {
				return
			}
			if time.Now().After(deadline) {
				panic("the front end's views did not catch up with the cache within 5 minutes")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// discard is a ResponseWriter that counts and drops the body, so the benchmark measures the
// server, not a recorder growing a 5 MB buffer.
type discard struct {
	header http.Header
	code   int
	n      int
}

func (d *discard) Header() http.Header  { return d.header }
func (d *discard) WriteHeader(code int) { d.code = code }
func (d *discard) Write(p []byte) (int, error) {
	if d.code == 0 {
		d.code = 200
	}
	d.n += len(p)
	return len(p), nil
}

// BenchmarkListWorkspaces10k measures GET /api/v1/workspaces (the REST handler, the cache read,
// grouping, phase and outdated computation, JSON encoding) with 10,000 workspaces cached: a
// user's own list, and an admin's list of all of them. Token verification is left out.
func BenchmarkListWorkspaces10k(b *testing.B) {
	if testing.Short() {
		b.Skip("needs envtest")
	}
	seedBench(b)
	h := api.NewREST(env.svc)
	for _, bc := range []struct {
		name   string
		caller *auth.Caller
		path   string
	}{
		{"own-10-of-10000", &auth.Caller{Subject: "user-7"}, "/api/v1/workspaces"},
		{"admin-all-10000", &auth.Caller{Subject: "root", IsAdmin: true}, "/api/v1/workspaces?all=true"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := auth.WithCaller(context.Background(), bc.caller)
			for b.Loop() {
				req := httptest.NewRequestWithContext(ctx, http.MethodGet, bc.path, nil)
				rec := &discard{header: http.Header{}}
				h.ServeHTTP(rec, req)
				if rec.code != 200 || rec.n < 100 {
					b.Fatalf("status %d, %d bytes", rec.code, rec.n)
				}
			}
		})
	}
}
