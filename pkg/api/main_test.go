package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	restclient "k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nogoo9/no-crd/pkg/api"
	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/frontend"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/templates"
	"github.com/nogoo9/no-crd/pkg/workspace"
	"github.com/nogoo9/no-crd/test/apiserver"
)

const (
	ns = "default"
	// teamNS is a second watched namespace (--namespaces), for the lists across namespaces.
	teamNS     = "team"
	clientID   = "nogoo9"
	adminGroup = "nogoo9-admins"
)

// waitBound bounds every wait of a test on the front end: one that never answers fails the test
// instead of hanging go test until its own timeout.
const waitBound = 30 * time.Second

// httpc is http.DefaultClient with every exchange bounded by waitBound, its body included.
var httpc = &http.Client{Timeout: waitBound}

// boundedCtx ends waitBound from now, or when t ends.
func boundedCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitBound)
	t.Cleanup(cancel)
	return ctx
}

// env is the one envtest environment, manager and front end the package's integration tests share.
var env struct {
	k8s       client.Client // direct (uncached) client for setup and assertions
	clientset kubernetes.Interface
	templates *fakeTemplates
	server    *httptest.Server // the front end (REST + MCP)
	issuer    *issuer
	mgrCache  client.Reader
	svc       *frontend.Service
	cfg       *restclient.Config
}

func TestMain(m *testing.M) {
	apiserver.Main(m, func(cfg *restclient.Config) int {
		if cfg == nil {
			return m.Run()
		}
		return runWithEnv(m, cfg)
	})
}

func runWithEnv(m *testing.M, cfg *restclient.Config) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	var err error
	env.k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.clientset = kubernetes.NewForConfigOrDie(cfg)
	env.cfg = cfg
	if err := env.k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: teamNS}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		NewCache:               podcache.NewCache,
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{ns: {}, teamNS: {}},
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Pod{}: podcache.Pods(),
			},
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	env.issuer, err = newIssuer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.issuer.srv.Close()
	authn, err := auth.NewOIDC(ctx, auth.OIDCConfig{
		IssuerURL: env.issuer.srv.URL, ClientID: clientID, CAFile: env.issuer.caFile,
		AdminClaim: "groups", AdminValue: adminGroup,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.templates = newFakeTemplates(&templates.Template{Name: "python", Version: "1.0", Description: "Python dev box", Source: "configmap:default/python"})
	h, err := api.Setup(ctx, mgr, api.Options{
		Namespace: ns, Namespaces: []string{ns, teamNS}, Version: "test", Auth: authn, Templates: env.templates,
		Spawner: &podSpawner{c: env.k8s}, PublicURL: "http://nogoo9.test", Issuer: env.issuer.srv.URL,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.mgrCache = mgr.GetCache()
	podInformer, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.svc, err = frontend.New(frontend.Config{Namespace: ns, Namespaces: []string{ns, teamNS}, Cache: mgr.GetCache(), Client: mgr.GetClient(), Events: env.clientset.CoreV1(), Templates: env.templates, Spawner: &podSpawner{c: env.k8s}, Pods: podInformer})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		fmt.Fprintln(os.Stderr, "cache did not sync")
		return 1
	}
	env.server = httptest.NewServer(h)
	defer env.server.Close()
	code := m.Run()
	if names := env.templates.written(); len(names) > 0 {
		fmt.Fprintf(os.Stderr, "templates %v were written into after Get handed them out: frontend.Templates values are shared, read only\n", names)
		code = 1
	}
	cancel()
	wg.Wait()
	return code
}

// fakeTemplates stands in for the template registry's shared view (templates.Registry.Shared,
// which main.go gives the front end): Get hands out the fake's own value, to every caller, and a
// new version is a new value. written reports a reader that wrote into one it was handed.
type fakeTemplates struct {
	mu sync.Mutex
	m  map[string]*templates.Template
	// stored holds every value Get may have handed out, with its content (JSON) when stored.
	stored map[*templates.Template][]byte
}

// newFakeTemplates holds a copy of each of ts (a value of its own, as Decode's are).
func newFakeTemplates(ts ...*templates.Template) *fakeTemplates {
	f := &fakeTemplates{m: map[string]*templates.Template{}, stored: map[*templates.Template][]byte{}}
	for _, t := range ts {
		f.store(t.DeepCopy())
	}
	return f
}

func (f *fakeTemplates) store(t *templates.Template) {
	b, err := json.Marshal(t)
	if err != nil {
		panic(err)
	}
	f.m[t.Name], f.stored[t] = t, b
}

func (f *fakeTemplates) Get(name string) (*templates.Template, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.m[name]
	return t, ok
}

func (f *fakeTemplates) Infos(string) []frontend.TemplateInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []frontend.TemplateInfo
	for _, t := range f.m {
		out = append(out, frontend.TemplateInfo{Name: t.Name, Version: t.Version, Description: t.Description, Source: t.Source, Valid: true})
	}
	return out
}

// setVersion makes a new value of template name at version v; values handed out stay as they were.
func (f *fakeTemplates) setVersion(name, v string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.m[name].DeepCopy()
	t.Version = v
	f.store(t)
}

// written lists the templates (name@version as stored) whose content changed after they were stored.
func (f *fakeTemplates) written() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for t, was := range f.stored {
		if now, err := json.Marshal(t); err != nil || !bytes.Equal(now, was) {
			var w templates.Template
			_ = json.Unmarshal(was, &w)
			out = append(out, w.Name+"@"+w.Version)
		}
	}
	return out
}

// podSpawner creates the workspace pod the way the spawner does (names, labels, annotations),
// without the template rendering that pkg/spawner owns and tests.
type podSpawner struct{ c client.Client }

func (s *podSpawner) Spawn(ctx context.Context, r frontend.SpawnRequest) (*corev1.Pod, error) {
	if r.Context["repo"] == "" {
		return nil, &frontend.Error{Code: frontend.CodeInvalid, Message: "context value \"repo\" is required by template " + r.Template}
	}
	ctxJSON, _ := json.Marshal(r.Context)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: workspace.PodName(r.Owner, r.ID), Namespace: ns,
			Labels: map[string]string{
				workspace.LabelType: workspace.TypeWorkspace, workspace.LabelWorkspaceID: r.ID,
				workspace.LabelUserSub: workspace.UserLabel(r.Owner), workspace.LabelTemplate: r.Template,
				workspace.LabelTemplateVersion: workspace.VersionLabel("1.0"),
			},
			Annotations: map[string]string{
				workspace.AnnOwner: r.Owner, workspace.AnnTemplateVersion: "1.0", workspace.AnnWorkspaceName: r.Name,
				workspace.AnnWorkspacePath: "/ws/" + workspace.UserLabel(r.Owner) + "/" + r.ID + "/",
				workspace.AnnContext:       string(ctxJSON),
			},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ide", Image: "example.com/ide:1"}}},
	}
	// Tests ask for a pod with the current template version by setting it on the fake.
	if err := s.c.Create(ctx, pod); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, &frontend.Error{Code: frontend.CodeConflict, Message: fmt.Sprintf("workspace %q already exists", r.ID)}
		}
		return nil, err
	}
	return pod, nil
}

// issuer is a local OIDC provider on 127.0.0.1 (TLS) that signs tokens with an RS256 key.
type issuer struct {
	srv    *httptest.Server
	caFile string
	key    *rsa.PrivateKey
	other  *rsa.PrivateKey // a key the JWKS does not publish
}

func newIssuer() (*issuer, error) {
	k1, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	k2, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	is := &issuer{key: k1, other: k2}
	mux := http.NewServeMux()
	is.srv = httptest.NewTLSServer(mux)
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/jwks", "authorization_endpoint": is.srv.URL + "/authorize",
			"token_endpoint": is.srv.URL + "/token", "id_token_signing_alg_values_supported": []string{"RS256"},
			"response_types_supported": []string{"id_token"}, "subject_types_supported": []string{"public"},
		})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k1.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	dir, err := os.MkdirTemp("", "nogoo9-issuer")
	if err != nil {
		return nil, err
	}
	is.caFile = filepath.Join(dir, "ca.pem")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: is.srv.Certificate().Raw})
	return is, os.WriteFile(is.caFile, certPEM, 0o600)
}

type claims map[string]any

// token signs c (with defaults for iss, aud, exp, iat) with the published key.
func (is *issuer) token(c claims) string { return is.sign(is.key, "k1", c) }

func (is *issuer) sign(key *rsa.PrivateKey, kid string, c claims) string {
	full := claims{"iss": is.srv.URL, "aud": clientID, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range c {
		full[k] = v
	}
	payload, _ := json.Marshal(full)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, nil)
	if err != nil {
		panic(err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		panic(err)
	}
	s, _ := obj.CompactSerialize()
	return s
}

// unsigned is a token with "alg": "none".
func (is *issuer) unsigned(c claims) string {
	full := claims{"iss": is.srv.URL, "aud": clientID, "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range c {
		full[k] = v
	}
	h, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT"})
	p, _ := json.Marshal(full)
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p) + "."
}

func userToken(sub string) string { return env.issuer.token(claims{"sub": sub}) }
func adminToken(sub string) string {
	return env.issuer.token(claims{"sub": sub, "groups": []string{"staff", adminGroup}})
}

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs envtest (KUBEBUILDER_ASSETS)")
	}
}

func isExists(err error) bool { return apierrors.IsAlreadyExists(err) }
