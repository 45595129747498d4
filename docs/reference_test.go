package docs

import (
	"context"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/nogoo9/no-crd/pkg/api"
	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/mcp"
	"github.com/nogoo9/no-crd/pkg/templates"
)

// The tests in this file keep the reference parts of the documentation true: each collects a list
// from the code (flags, routes, tools, keys, make targets) and from the page that documents it, and
// fails, naming the item and the page, when one has an item the other lacks.

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func readPage(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// --- flags ---

// flagBinders build the flags main.go registers through another package's BindFlags(fs) call,
// keyed by the call's receiver as main.go writes it. A new BindFlags call in main.go fails
// TestEveryFlagIsDocumented until it has an entry here.
var flagBinders = map[string]func(*flag.FlagSet){
	"o.auth":           func(fs *flag.FlagSet) { new(auth.Options).BindFlags(fs) },
	"o.templatePolicy": func(fs *flag.FlagSet) { new(templates.PolicyFlags).BindFlags(fs) },
	"zapOpts":          func(fs *flag.FlagSet) { new(zap.Options).BindFlags(fs) },
}

// flagNameArg is, for each flag-defining function of package flag, which argument is the name.
var flagNameArg = map[string]int{
	"Bool": 0, "Duration": 0, "Float64": 0, "Int": 0, "Int64": 0, "String": 0, "Uint": 0, "Uint64": 0,
	"Func": 0, "BoolFunc": 0,
	"BoolVar": 1, "DurationVar": 1, "Float64Var": 1, "IntVar": 1, "Int64Var": 1, "StringVar": 1,
	"UintVar": 1, "Uint64Var": 1, "TextVar": 1, "Var": 1,
}

// binaryFlags are the flags of bin/nogoo9, each with where it is defined: the flag.XxxVar calls
// of package main (read from its source, as main registers them while it runs), the flags of each
// BindFlags call there (built on a FlagSet by the package that defines them), and --kubeconfig,
// which controller-runtime's client/config registers on flag.CommandLine when main imports it
// (ctrl.GetConfig reads it).
func binaryFlags(t *testing.T, root string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(root, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fs := flag.NewFlagSet("nogoo9", flag.ContinueOnError)
	bound := map[string]bool{}
	usesGetConfig := false
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pos := fset.Position(call.Pos())
			where := fmt.Sprintf("%s:%d", filepath.Base(pos.Filename), pos.Line)
			if pkg, ok := sel.X.(*ast.Ident); ok {
				if pkg.Name == "ctrl" && sel.Sel.Name == "GetConfig" {
					usesGetConfig = true
				}
				if i, defines := flagNameArg[sel.Sel.Name]; pkg.Name == "flag" && defines {
					lit, ok := call.Args[i].(*ast.BasicLit)
					name, err := strconv.Unquote(litValue(lit))
					if !ok || err != nil {
						t.Fatalf("%s: flag.%s names its flag with an expression: this test reads only a string literal there", where, sel.Sel.Name)
					}
					out[name] = where
				}
			}
			if sel.Sel.Name == "BindFlags" {
				recv := types.ExprString(sel.X)
				bind, ok := flagBinders[recv]
				if !ok {
					t.Fatalf("%s: %s.BindFlags registers flags this test does not know: add %q to flagBinders in docs/reference_test.go", where, recv, recv)
				}
				bound[recv] = true
				before := map[string]bool{}
				fs.VisitAll(func(f *flag.Flag) { before[f.Name] = true })
				bind(fs)
				fs.VisitAll(func(f *flag.Flag) {
					if !before[f.Name] {
						out[f.Name] = where + " (" + recv + ".BindFlags)"
					}
				})
			}
			return true
		})
	}
	for recv := range flagBinders {
		if !bound[recv] {
			t.Errorf("flagBinders has %q, which main.go no longer calls BindFlags on: remove it", recv)
		}
	}
	if usesGetConfig {
		kfs := flag.NewFlagSet("kubeconfig", flag.ContinueOnError)
		config.RegisterFlags(kfs)
		kfs.VisitAll(func(f *flag.Flag) { out[f.Name] = "controller-runtime pkg/client/config (ctrl.GetConfig)" })
	}
	if len(out) < 10 {
		t.Fatalf("found only %d flags of the binary: the way main.go registers them changed; fix binaryFlags", len(out))
	}
	return out
}

func litValue(l *ast.BasicLit) string {
	if l == nil || l.Kind != token.STRING {
		return ""
	}
	return l.Value
}

// otherToolsFlags are flags the documentation names that are not nogoo9's, each with its tool.
var otherToolsFlags = map[string]string{
	// Go's flag package answers -help itself.
	"help": "flag package",
	// kubectl.
	"all-namespaces": "kubectl", "as": "kubectl", "audience": "kubectl", "clusterrole": "kubectl",
	"field-selector": "kubectl", "force": "kubectl", "from-literal": "kubectl", "group": "kubectl",
	"image": "kubectl", "overwrite": "kubectl", "pod-selector": "kubectl", "replicas": "kubectl",
	"resource": "kubectl", "restart": "kubectl", "rm": "kubectl", "role": "kubectl",
	"server-side": "kubectl", "serviceaccount": "kubectl", "sort-by": "kubectl",
	"subresource": "kubectl", "type": "kubectl", "user": "kubectl", "verb": "kubectl",
	// kube-apiserver, as hack/localcluster and the integration tests run it.
	"authorization-mode": "kube-apiserver", "endpoint-reconciler-type": "kube-apiserver",
	"service-account-issuer": "kube-apiserver", "token-auth-file": "kube-apiserver",
	"watch-cache": "kube-apiserver", "v": "kube-apiserver",
	// kube-controller-manager (docs/performance.md's tuning of the local cluster).
	"concurrent-deployment-syncs": "kube-controller-manager", "concurrent-replicaset-syncs": "kube-controller-manager",
	// kwok.
	"config": "kwok",
	// hack/cluster (go run ./hack/cluster up ...) and the stand-in's terminal client.
	"bin": "hack/cluster", "dir": "hack/cluster", "nodes": "hack/cluster", "kcm-flag": "hack/cluster",
	"timeout": "hack/cluster", "token": "hack/standin", "send": "hack/standin", "check": "hack/demo.sh",
	// The MCP Inspector's CLI (npx @modelcontextprotocol/inspector).
	"cli": "MCP Inspector", "transport": "MCP Inspector", "header": "MCP Inspector", "method": "MCP Inspector",
	// code-server (docs/proxy.md: an app configured with a base path).
	"base-path": "code-server",
	// The ginkgo CLI.
	"repeat": "ginkgo", "until-it-fails": "ginkgo",
	// Not flags of any tool: docs/performance.md describes them as ideas tried and not kept.
	"event-qps": "not kept (docs/performance.md)", "shard": "not kept (docs/performance.md)",
}

// docFlag is a --name in a page; wildcard when written --name-* (every flag that begins so).
type docFlag struct {
	file     string
	line     int
	name     string
	wildcard bool
	// inCode: the flag begins an inline code span (`--name`, `--name=value`).
	inCode bool
}

var flagToken = regexp.MustCompile(`(^|[^A-Za-z0-9_-])--([a-z][a-z0-9-]*)(\*?)`)

// docFlags returns every --name the pages hold, in prose, inline code and code blocks.
func docFlags(t *testing.T, root string, files []string) []docFlag {
	t.Helper()
	var out []docFlag
	for _, file := range files {
		for i, line := range strings.Split(readPage(t, root, file), "\n") {
			starts := map[string]bool{}
			for _, span := range codeSpans(line) {
				if m := flagToken.FindStringSubmatch(span); m != nil && strings.HasPrefix(span, "--") {
					starts[m[2]] = true
				}
			}
			for _, m := range flagToken.FindAllStringSubmatch(line, -1) {
				name, wild := m[2], m[3] == "*"
				if wild {
					name = strings.TrimSuffix(name, "-")
				}
				out = append(out, docFlag{file: file, line: i + 1, name: name, wildcard: wild, inCode: starts[m[2]] && !wild})
			}
		}
	}
	return out
}

// codeSpans returns the inline code spans of a Markdown line.
func codeSpans(line string) []string {
	var out []string
	for i := 0; i < len(line); {
		if line[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(line) && line[i+n] == '`' {
			n++
		}
		closing := strings.Index(line[i+n:], strings.Repeat("`", n))
		if closing < 0 {
			break
		}
		out = append(out, strings.TrimSpace(line[i+n:i+n+closing]))
		i += n + closing + n
	}
	return out
}

// TestEveryFlagIsDocumented: every flag of the binary begins an inline code span (`--name`, or
// `--name=value`) somewhere in README.md or docs/*.md, and every --flag those pages name is one
// of the binary's or, listed in otherToolsFlags, another tool's.
func TestEveryFlagIsDocumented(t *testing.T) {
	root := repoRoot(t)
	flags := binaryFlags(t, root)
	files := pages(t, root)
	found := docFlags(t, root, files)
	named := map[string]bool{}
	for _, f := range found {
		if f.inCode {
			named[f.name] = true
		}
	}
	for _, name := range sortedKeys(flags) {
		if !named[name] {
			t.Errorf("flag --%s (%s) is not documented: give it a row in the flag table of the page of its area (docs/deploy.md's \"Process flags\" for process-wide ones), written `--%s`", name, flags[name], name)
		}
	}
	for _, f := range found {
		if f.wildcard {
			if !slices.ContainsFunc(sortedKeys(flags), func(n string) bool { return strings.HasPrefix(n, f.name+"-") }) {
				t.Errorf("%s:%d: --%s-* names no flag of nogoo9", f.file, f.line, f.name)
			}
			continue
		}
		if _, ok := flags[f.name]; !ok && otherToolsFlags[f.name] == "" {
			t.Errorf("%s:%d: --%s is not a flag of nogoo9: fix the page, or, if it is another tool's flag, add it to otherToolsFlags in docs/reference_test.go with the tool", f.file, f.line, f.name)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// --- Markdown tables ---

// tableRows returns the rows of the first table in md whose header row's first cell is header
// (cells trimmed, the header and delimiter rows left out), each with its line number.
func tableRows(md, header string) (rows [][]string, lines []int) {
	in := false
	for i, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "|") {
			if in {
				return rows, lines
			}
			continue
		}
		cells := splitRow(line)
		if !in {
			if len(cells) > 0 && cells[0] == header {
				in = true
			}
			continue
		}
		if strings.Trim(strings.Join(cells, ""), "-: ") == "" {
			continue // the delimiter row
		}
		rows, lines = append(rows, cells), append(lines, i+1)
	}
	return rows, lines
}

// splitRow splits a table row at the pipes that are not escaped (\|) and not inside code spans.
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	var cells []string
	var cur strings.Builder
	inCode := 0
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteString(`\|`)
			i++
		case c == '`':
			n := 1
			for i+n < len(line) && line[i+n] == '`' {
				n++
			}
			switch {
			case inCode == 0:
				inCode = n
			case inCode == n:
				inCode = 0
			}
			cur.WriteString(line[i : i+n])
			i += n - 1
		case c == '|' && inCode == 0:
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// --- REST routes ---

var routeSpan = regexp.MustCompile(`^(GET|HEAD|POST|PUT|PATCH|DELETE) (\S+)`)

// documentedRoutes returns the routes of docs/api.md's route table ("method and path") as
// api.Routes writes them ("GET /api/v1/workspaces/{id}"), each with its line: a cell's code spans
// that begin with a method, without query or optional parts ([?all=true], ?version=V); a span
// "DELETE ..." is the previous span's path with that method.
func documentedRoutes(md string) map[string]int {
	out := map[string]int{}
	rows, lines := tableRows(md, "method and path")
	for i, row := range rows {
		path := ""
		for _, span := range codeSpans(row[0]) {
			m := routeSpan.FindStringSubmatch(span)
			if m == nil {
				continue
			}
			if p := m[2]; p != "..." {
				path, _, _ = strings.Cut(p, "[")
				path, _, _ = strings.Cut(path, "?")
			}
			out[m[1]+" "+path] = lines[i]
		}
	}
	return out
}

// namespacedPrefix is where api.Routes repeats the routes that address a namespace.
const namespacedPrefix = "/api/v1/namespaces/{ns}/"

// TestEveryRouteIsDocumented: every route of api.Routes() has a row in docs/api.md's route table,
// and every route of that table exists. The namespaced twins (/api/v1/namespaces/{ns}/...) are
// documented by their route without the prefix and the page's "Namespaces" section.
func TestEveryRouteIsDocumented(t *testing.T) {
	md := readPage(t, repoRoot(t), "docs/api.md")
	doc := documentedRoutes(md)
	if len(doc) == 0 {
		t.Fatal(`docs/api.md has no route table (a table whose first column is "method and path")`)
	}
	code := map[string]bool{}
	missing := map[string]bool{}
	for _, r := range api.Routes() {
		code[r] = true
		method, path, _ := strings.Cut(r, " ")
		if tail, ok := strings.CutPrefix(path, namespacedPrefix); ok {
			if !strings.Contains(md, "`"+namespacedPrefix+"`") {
				t.Errorf("route %s is not documented: docs/api.md does not say which routes exist under `%s`", r, namespacedPrefix)
			}
			r = method + " /api/v1/" + tail
		}
		if _, ok := doc[r]; !ok && !missing[r] {
			missing[r] = true
			t.Errorf("route %s (api.Routes) has no row in docs/api.md's route table: add one, written `%s`", r, r)
		}
	}
	for _, r := range sortedKeys(doc) {
		if !code[r] {
			t.Errorf("docs/api.md:%d: route %s is not in api.Routes(): fix or remove the row", doc[r], r)
		}
	}
}

// --- MCP tools ---

// TestEveryMCPToolIsDocumented: every tool the MCP server lists (tools/list, over an in-memory
// connection) has a row in docs/mcp.md's tool table, and every row there is a listed tool.
func TestEveryMCPToolIsDocumented(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serverEnd, clientEnd := sdk.NewInMemoryTransports()
	// Listing the tools calls none: the front end behind them is not needed.
	ss, err := mcp.NewServer(nil, "docs-test").Connect(ctx, serverEnd, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "docs-test"}, nil).Connect(ctx, clientEnd, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	listed := map[string]bool{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		listed[tool.Name] = true
	}

	rows, lines := tableRows(readPage(t, repoRoot(t), "docs/mcp.md"), "tool")
	doc := map[string]int{}
	for i, row := range rows {
		for _, span := range codeSpans(row[0]) {
			doc[span] = lines[i]
		}
	}
	if len(listed) == 0 || len(doc) == 0 {
		t.Fatalf("listed %d tools, docs/mcp.md's tool table (first column \"tool\") has %d rows", len(listed), len(doc))
	}
	for _, name := range sortedKeys(listed) {
		if _, ok := doc[name]; !ok {
			t.Errorf("MCP tool %s has no row in docs/mcp.md's tool table: add one, written `%s`", name, name)
		}
	}
	for _, name := range sortedKeys(doc) {
		if !listed[name] {
			t.Errorf("docs/mcp.md:%d: tool %s is not listed by the MCP server: fix or remove the row", doc[name], name)
		}
	}
}

// --- labels and annotations ---

// workspaceKeys returns the constants of package workspace whose value is a nogoo9/ key, by
// value, with the constant's name: read from the source, where each is "nogoo9/..." or
// Prefix + "..." (any string constant expression of literals and other constants of the package).
func workspaceKeys(t *testing.T, root string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, filepath.Join(root, "pkg", "workspace"), func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	exprs := map[string]ast.Expr{}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, s := range g.Specs {
					vs := s.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							exprs[n.Name] = vs.Values[i]
						}
					}
				}
			}
		}
	}
	var eval func(ast.Expr, int) (string, bool)
	eval = func(e ast.Expr, depth int) (string, bool) {
		if depth > 20 {
			return "", false
		}
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return "", false
			}
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		case *ast.Ident:
			if x, ok := exprs[e.Name]; ok {
				return eval(x, depth+1)
			}
		case *ast.ParenExpr:
			return eval(e.X, depth+1)
		case *ast.BinaryExpr:
			if e.Op == token.ADD {
				a, ok1 := eval(e.X, depth+1)
				b, ok2 := eval(e.Y, depth+1)
				return a + b, ok1 && ok2
			}
		}
		return "", false
	}
	out := map[string]string{}
	for name, e := range exprs {
		if v, ok := eval(e, 0); ok && strings.HasPrefix(v, "nogoo9/") && v != "nogoo9/" {
			out[v] = name
		}
	}
	if len(out) < 10 {
		t.Fatalf("found only %d nogoo9/ key constants in pkg/workspace: the way they are written changed; fix workspaceKeys", len(out))
	}
	return out
}

// TestEveryKeyIsDocumented: every nogoo9/ label, annotation and scheduling-gate key that
// pkg/workspace defines has a row in docs/labels-and-annotations.md: a table row whose first cell
// names it as code (`nogoo9/key`).
func TestEveryKeyIsDocumented(t *testing.T) {
	const page = "docs/labels-and-annotations.md"
	md := readPage(t, repoRoot(t), page)
	documented := map[string]bool{}
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "|") {
			continue
		}
		for _, span := range codeSpans(splitRow(line)[0]) {
			documented[span] = true
		}
	}
	keys := workspaceKeys(t, repoRoot(t))
	for _, k := range sortedKeys(keys) {
		if !documented[k] {
			t.Errorf("%s (workspace.%s) has no row in %s: add one whose first cell is `%s`", k, keys[k], page, k)
		}
	}
}

// --- make targets ---

var (
	helpTarget = regexp.MustCompile(`^([a-zA-Z0-9_-]+):.*?## `) // as make help's awk reads them
	makeCall   = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])make((?: +[a-z0-9][a-z0-9_-]*)+)`)
)

// TestEveryMakeTargetIsDocumented: every Makefile target with a "## " help text is named in
// README.md or docs/development.md, as code: `make <target>` (a code span or a code block line;
// `make tools build` names both) or the target alone in a code span.
func TestEveryMakeTargetIsDocumented(t *testing.T) {
	root := repoRoot(t)
	var targets []string
	for _, line := range strings.Split(readPage(t, root, "Makefile"), "\n") {
		if m := helpTarget.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
	}
	if len(targets) < 5 {
		t.Fatalf("found only %d documented targets in the Makefile: the help comments changed; fix helpTarget", len(targets))
	}
	named := map[string]bool{}
	for _, file := range []string{"README.md", "docs/development.md"} {
		inFence := false
		for _, line := range strings.Split(readPage(t, root, file), "\n") {
			if fence.MatchString(line) {
				inFence = !inFence
				continue
			}
			code := codeSpans(line)
			if inFence {
				code = append(code, line)
			}
			for _, c := range code {
				named[c] = true
				for _, m := range makeCall.FindAllStringSubmatch(c, -1) {
					for _, w := range strings.Fields(m[1]) {
						named[w] = true
					}
				}
			}
		}
	}
	for _, target := range targets {
		if !named[target] {
			t.Errorf("make target %s has a help text but is not named in README.md or docs/development.md: say what it is for, written `make %s`", target, target)
		}
	}
}
