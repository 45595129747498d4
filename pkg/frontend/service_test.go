package frontend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

func TestCodeOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Code
	}{
		{"a front-end error keeps its code", errorf(CodeQuotaExceeded, "too many"), CodeQuotaExceeded},
		{"a wrapped front-end error keeps its code", fmt.Errorf("spawn: %w", errorf(CodeConflict, "taken")), CodeConflict},
		{"access denied is Forbidden", accessDenied("x"), CodeForbidden},
		{"not found is NotFound", notFound("x"), CodeNotFound},
		{"any other error is Internal", errors.New("etcd timeout"), CodeInternal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CodeOf(tc.err); got != tc.want {
				t.Errorf("CodeOf(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
	if msg := accessDenied("bobs-box").Error(); !strings.HasPrefix(msg, MsgAccessDenied) {
		t.Errorf("access denied message %q does not start with %q", msg, MsgAccessDenied)
	}
}

func TestMayActOn(t *testing.T) {
	tests := []struct {
		name   string
		caller auth.Caller
		owner  string
		want   bool
	}{
		{"the owner", auth.Caller{Subject: "alice"}, "alice", true},
		{"another user", auth.Caller{Subject: "bob"}, "alice", false},
		{"a user whose subject differs only in case is another user", auth.Caller{Subject: "Alice"}, "alice", false},
		{"an admin on anyone's workspace", auth.Caller{Subject: "root", IsAdmin: true}, "alice", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mayActOn(&tc.caller, tc.owner); got != tc.want {
				t.Errorf("mayActOn(%+v, %q) = %v, want %v", tc.caller, tc.owner, got, tc.want)
			}
		})
	}
}

type stubTemplates map[string]string // name -> version

func (s stubTemplates) Get(name string) (*templates.Template, bool) {
	v, ok := s[name]
	if !ok {
		return nil, false
	}
	return &templates.Template{Name: name, Version: v}, true
}
func (s stubTemplates) Infos(string) []TemplateInfo { return nil }

// syncedInformer delivers nothing itself (the test feeds the views) and reports synced.
type syncedInformer struct{}

type syncedRegistration struct {
	toolscache.ResourceEventHandlerRegistration
}

func (syncedRegistration) HasSynced() bool { return true }
func (syncedInformer) AddEventHandler(toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return syncedRegistration{}, nil
}

// services returns two Services over the same pods: one reading the views, one reading the
// (fake) cache per call, so every rule is checked on both paths.
func services(t *testing.T, pods ...*corev1.Pod) map[string]*Service {
	t.Helper()
	return servicesWith(t, func(*Config) {}, pods...)
}

// servicesWith is services with the Config changed by edit first.
func servicesWith(t *testing.T, edit func(*Config), pods ...*corev1.Pod) map[string]*Service {
	t.Helper()
	c := fakeCache(pods...)
	cfg := Config{Namespace: "ns", Cache: c, Client: c, Templates: stubTemplates{"python": "2.0"}, Now: func() time.Time { return t0.Add(time.Hour) }}
	edit(&cfg)
	perCall, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pods = syncedInformer{}
	withViews, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		withViews.views.OnAdd(p, true)
	}
	return map[string]*Service{"views": withViews, "per-call": perCall}
}

// fakeCache is a fake client holding copies of pods, with the indexes the service lists by.
func fakeCache(pods ...*corev1.Pod) client.WithWatch {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	objs := make([]client.Object, len(pods))
	for i, p := range pods {
		objs[i] = p.DeepCopy()
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, IndexOwner, indexOwner).WithIndex(&corev1.Pod{}, podcache.IndexWorkspaceID, podcache.WorkspaceID).Build()
}

func TestListFiltersByOwnerAndAdmin(t *testing.T) {
	pods := []*corev1.Pod{
		pod("ws-a1", "alice", "a1", "1.0", t0, ready),
		pod("ws-a2", "alice", "a2", "2.0", t0, ready),
		pod("ws-b1", "bob", "b1", "1.0", t0),
	}
	alice := &auth.Caller{Subject: "alice"}
	carol := &auth.Caller{Subject: "carol"}
	admin := &auth.Caller{Subject: "root", IsAdmin: true}
	tests := []struct {
		name     string
		caller   *auth.Caller
		opts     ListOptions
		want     []string
		wantCode Code
	}{
		{"a user sees only their own workspaces", alice, ListOptions{}, []string{"a1", "a2"}, ""},
		{"a user with no workspaces sees an empty list", carol, ListOptions{}, []string{}, ""},
		{"a user asking for every user's workspaces is refused", alice, ListOptions{AllUsers: true}, nil, CodeForbidden},
		{"an admin's own list holds only the admin's workspaces", admin, ListOptions{}, []string{}, ""},
		{"an admin sees every user's workspaces with allUsers", admin, ListOptions{AllUsers: true}, []string{"a1", "a2", "b1"}, ""},
		{"an admin pages through everything", admin, ListOptions{AllUsers: true, Limit: 2, Continue: encodeContinue(true, "a1")}, []string{"a2", "b1"}, ""},
		{"a user pages through their own", alice, ListOptions{Limit: 1, Continue: encodeContinue(false, "a1")}, []string{"a2"}, ""},
		{"a negative limit is refused", alice, ListOptions{Limit: -1}, nil, CodeInvalid},
		{"a continue that is no continue value is refused", alice, ListOptions{Continue: "Not An ID"}, nil, CodeInvalid},
		{"a bare workspace id is no continue value", alice, ListOptions{Continue: "a1"}, nil, CodeInvalid},
		{"a continue of the own list passed to the all-users list is refused", admin, ListOptions{AllUsers: true, Continue: encodeContinue(false, "a1")}, nil, CodeInvalid},
		{"no caller at all is refused", nil, ListOptions{}, nil, CodeForbidden},
	}
	for path, svc := range services(t, pods...) {
		for _, tc := range tests {
			t.Run(path+": "+tc.name, func(t *testing.T) {
				ctx := context.Background()
				if tc.caller != nil {
					ctx = auth.WithCaller(ctx, tc.caller)
				}
				ws, err := svc.ListWorkspaces(ctx, tc.opts)
				if tc.wantCode != "" {
					if CodeOf(err) != tc.wantCode || err == nil {
						t.Fatalf("ListWorkspaces() error %v, want code %s", err, tc.wantCode)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				got := []string{}
				for _, w := range ws {
					got = append(got, w.ID)
					if w.LatestTemplateVersion != "2.0" || w.IsOutdated != (w.TemplateVersion != "2.0") {
						t.Errorf("%s: latest %q, outdated %v on version %s", w.ID, w.LatestTemplateVersion, w.IsOutdated, w.TemplateVersion)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Errorf("ListWorkspaces() = %v, want %v", got, tc.want)
				}
			})
		}
	}
}

func TestActionsOnAnotherUsersWorkspace(t *testing.T) {
	pods := []*corev1.Pod{pod("ws-a1", "alice", "a1", "1.0", t0, ready), pod("ws-b1", "bob", "b1", "1.0", t0, ready)}
	alice := auth.WithCaller(context.Background(), &auth.Caller{Subject: "alice"})
	admin := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	svc := services(t, pods...)["per-call"]
	tests := []struct {
		name     string
		ctx      context.Context
		do       func(ctx context.Context) error
		wantCode Code
		wantMsg  string
	}{
		{"get own", alice, func(ctx context.Context) error { _, err := svc.GetWorkspace(ctx, "a1"); return err }, "", ""},
		{"get another's", alice, func(ctx context.Context) error { _, err := svc.GetWorkspace(ctx, "b1"); return err }, CodeForbidden, MsgAccessDenied},
		{"get another's as admin", admin, func(ctx context.Context) error { _, err := svc.GetWorkspace(ctx, "b1"); return err }, "", ""},
		{"get unknown", alice, func(ctx context.Context) error { _, err := svc.GetWorkspace(ctx, "zz"); return err }, CodeNotFound, "not found"},
		{"get a bad id", alice, func(ctx context.Context) error { _, err := svc.GetWorkspace(ctx, "Bad_ID"); return err }, CodeInvalid, "not valid"},
		{"upgrade another's", alice, func(ctx context.Context) error { _, err := svc.Upgrade(ctx, "b1"); return err }, CodeForbidden, MsgAccessDenied},
		{"delete another's", alice, func(ctx context.Context) error { _, err := svc.Delete(ctx, "b1"); return err }, CodeForbidden, MsgAccessDenied},
		{"upgrade all as a user", alice, func(ctx context.Context) error { _, err := svc.UpgradeAll(ctx); return err }, CodeForbidden, MsgUpgradeAllForAdmin},
		{"maintenance as a user", alice, func(ctx context.Context) error { _, err := svc.SetMaintenance(ctx, "a1", "x"); return err }, CodeForbidden, "only admin"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do(tc.ctx)
			if tc.wantCode == "" {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				return
			}
			if err == nil || CodeOf(err) != tc.wantCode || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("error %v, want code %s with %q", err, tc.wantCode, tc.wantMsg)
			}
		})
	}
	// Nothing was written to bob's pod by the refused calls.
	var p corev1.Pod
	if err := svc.cfg.Client.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "ws-b1"}, &p); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Annotations[workspace.AnnUpgradeRequested]; ok {
		t.Errorf("a refused upgrade wrote its intent: %v", p.Annotations)
	}
}
