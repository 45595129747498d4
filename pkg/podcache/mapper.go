package podcache

import (
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// MapperProvider is the manager's REST mapper (ctrl.Options.MapperProvider): controller-runtime's
// dynamic mapper, with the mappings of built-in kinds remembered (BuiltinMemo).
func MapperProvider(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	m, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return BuiltinMemo(m), nil
}

// BuiltinMemo wraps m so that RESTMapping of a built-in kind (a group of client-go's scheme) at
// one version asks m once and then answers from memory.
//
// controller-runtime's cache asks the REST mapper on every List whether the listed kind is
// namespaced (multiNamespaceCache.List, apiutil.IsObjectNamespaced), and its dynamic mapper
// answers through a priority mapper over every group version the API server serves, building a
// "no match" error for each one that is not the kind's: about 10 KB of garbage per List. The two
// controllers' first pass makes one List per workspace, so at 10,000 workspaces that was the
// largest part of the start-up's garbage (about 280 of 640 MB; bench/history.md, "Start-up
// garbage"). A built-in kind's mapping (resource, scope) never changes while the process runs;
// other groups (CRDs, aggregated APIs), other calls and errors go to m every time.
func BuiltinMemo(m meta.RESTMapper) meta.RESTMapper {
	return &builtinMemo{RESTMapper: m, known: map[memoKey]meta.RESTMapping{}}
}

type builtinMemo struct {
	meta.RESTMapper
	mu    sync.RWMutex
	known map[memoKey]meta.RESTMapping
}

type memoKey struct{ group, kind, version string }

// RESTMapping answers a built-in kind at one version from memory after the first time. Each
// caller gets its own copy of the mapping.
func (b *builtinMemo) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if len(versions) != 1 || versions[0] == "" || !clientgoscheme.Scheme.IsGroupRegistered(gk.Group) {
		return b.RESTMapper.RESTMapping(gk, versions...)
	}
	k := memoKey{gk.Group, gk.Kind, versions[0]}
	b.mu.RLock()
	m, ok := b.known[k]
	b.mu.RUnlock()
	if ok {
		return &m, nil
	}
	got, err := b.RESTMapper.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.known[k] = *got
	b.mu.Unlock()
	return got, nil
}
