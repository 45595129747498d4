package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/nogoo9/no-crd"

// linksEveryTypedClient lists import paths that, once imported by any of the binary's own
// packages, link the typed client of every API group into bin/nogoo9: k8s.io/client-go/kubernetes
// (a kubernetes.Interface held anywhere keeps each group's client and its methods alive). Without
// it the binary is 47.6 MB instead of 56.6 MB and maps about 5 MiB fewer of its pages
// (bench/history.md, "Fifth round"). Use the one group's client instead, e.g.
// k8s.io/client-go/kubernetes/typed/core/v1, or a discovery.DiscoveryClient.
var linksEveryTypedClient = []string{"k8s.io/client-go/kubernetes"}

// TestBinaryDoesNotImportTheWholeClientset walks the imports of package main and of every package
// of this module it reaches (test files aside) and fails if one imports the clientset. It checks
// this module's own code only: the clientset package is still compiled in through
// controller-runtime (leader election, events), and what keeps its typed clients out of the binary
// is that nothing reachable holds a kubernetes.Interface, so the linker drops them. A dependency
// that starts holding one would bring them back without this test noticing; the binary's size in
// bench/history.md ("Fifth round") would.
func TestBinaryDoesNotImportTheWholeClientset(t *testing.T) {
	for imp, file := range binaryImports(t) {
		for _, bad := range linksEveryTypedClient {
			if imp == bad {
				t.Errorf("%s imports %s, which links every API group's typed client into the binary; use the client of the one group it needs (e.g. k8s.io/client-go/kubernetes/typed/core/v1)", file, imp)
			}
		}
	}
}

// TestBinaryCarriesTheTimeZoneDatabase: nogoo9's image holds nothing but the binary, so no zone
// files are there, and without the database compiled in (time/tzdata) every update window naming
// a zone other than UTC ("Mon-Fri 22:00-23:30 Europe/Berlin", the docs' example) was refused, and
// a template's such window stopped its workspaces' automatic upgrades. The machines the tests run
// on have zone files, so only the import can be checked here.
func TestBinaryCarriesTheTimeZoneDatabase(t *testing.T) {
	if _, ok := binaryImports(t)["time/tzdata"]; !ok {
		t.Error("no package of the binary imports time/tzdata: named time zones fail to load in an image without zone files (import it where zones are loaded: pkg/updatepolicy)")
	}
}

// binaryImports walks the imports of package main and of every package of this module it reaches
// (test files aside) and returns every import path met, each with a file that imports it. It
// checks this module's own code only: what dependencies import is not listed.
func binaryImports(t *testing.T) map[string]string {
	t.Helper()
	seen := map[string]bool{}
	all := map[string]string{}
	queue := []string{module}
	reached := 0
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		if seen[pkg] {
			continue
		}
		seen[pkg] = true
		reached++
		dir := "." + strings.TrimPrefix(pkg, module)
		imports, err := packageImports(dir)
		if err != nil {
			t.Fatalf("read the imports of %s: %v", pkg, err)
		}
		for imp, file := range imports {
			all[imp] = file
			if imp == module || strings.HasPrefix(imp, module+"/") {
				queue = append(queue, imp)
			}
		}
	}
	// The walk must have found the binary's packages, or it checked nothing.
	if reached < 10 {
		t.Fatalf("reached only %d packages of %s from package main; the walk is broken", reached, module)
	}
	return all
}

// packageImports returns each import path of the non-test Go files in dir, with a file that
// imports it.
func packageImports(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		path := filepath.Join(dir, name)
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return nil, err
		}
		for _, spec := range f.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return nil, err
			}
			out[imp] = path
		}
	}
	return out, nil
}
