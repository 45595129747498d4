package spawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/templates"
)

// A program is a template spec's (or claim spec's) JSON cut at the string values that hold a
// "${": literal JSON, a value to expand, literal JSON, and so on. Rendering writes the literal
// parts and each value expanded (as a JSON string) and decodes the result: the marshal of the
// spec, the decode into a tree, the walk and the marshal of the tree, which the round trip
// (expandJSON) does per pod, are done once per template value (templates.Template.Derived). The
// result is the round trip's: the same JSON text with the same values put in, decoded the same
// way; the values are expanded in the walk's order, so the first error is the same too.
type program struct {
	// plain: the JSON holds no "${" at all: a deep copy of the spec is its render.
	plain bool
	// lits holds the literal JSON before each of vals and after the last.
	lits [][]byte
	vals []programValue
	size int
}

// programValue is a string value to expand, its path, and whether the kubelet expands the field
// (kubeletExpands: its placeholders' values are written for the kubelet to read literally).
type programValue struct {
	s, path string
	kubelet bool
}

// programs are a template's: its spec's, nil when the spec cannot be rendered from a program
// (see programsOf), and each volume claim spec's (nil: that claim cannot).
type programs struct {
	spec   *program
	claims []*program
}

// programsOf returns t's programs, computed once per template value; nil when t's Derived slot
// holds something else (another caller's build: renderSpec takes the round trip then).
func programsOf(t *templates.Template) *programs {
	p, _ := t.Derived(compilePrograms).(*programs)
	return p
}

func compilePrograms(t *templates.Template) any {
	p := &programs{claims: make([]*program, len(t.VolumeClaims))}
	if !namesHoldPlaceholders(&t.Spec) {
		p.spec = compile(&t.Spec, "data.spec")
	}
	for i := range t.VolumeClaims {
		p.claims[i] = compile(&t.VolumeClaims[i].Spec, fmt.Sprintf("data.volumeClaims[%d].spec", i))
	}
	if p.spec != nil && slicesHasNil(p.claims) {
		p.spec = nil
	}
	return p
}

func slicesHasNil(ps []*program) bool {
	for _, p := range ps {
		if p == nil {
			return true
		}
	}
	return false
}

// namesHoldPlaceholders: a name the claims' binding or the injections match (a volume's, a
// volume's claim's, a container's) holds "${". The round trip expands after they matched, a
// program before, so such a spec keeps the round trip.
func namesHoldPlaceholders(spec *corev1.PodSpec) bool {
	for _, v := range spec.Volumes {
		if strings.Contains(v.Name, "${") || v.PersistentVolumeClaim != nil && strings.Contains(v.PersistentVolumeClaim.ClaimName, "${") {
			return true
		}
	}
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for _, c := range cs {
			if strings.Contains(c.Name, "${") {
				return true
			}
		}
	}
	return false
}

// markPrefix and markSuffix enclose a value's index in the tree compile marshals: NUL is
// written \u0000 in JSON, and compile gives up on a spec whose JSON already holds one.
const markPrefix, markSuffix = "\x00nogoo9:", "\x00"

// compile is obj's program, rooted at path root (the error messages' field names); nil when it
// cannot be made (the JSON holds a \u0000 the marks could be confused with).
func compile(obj any, root string) *program {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil
	}
	if !bytes.Contains(raw, placeholderStart) {
		return &program{plain: true}
	}
	if bytes.Contains(raw, []byte(`\u0000`)) {
		return nil
	}
	tree, err := decodeKeepingNumbers(raw) // numbers are written back as they were
	if err != nil {
		return nil
	}
	p := &program{}
	tree = p.mark(tree, root)
	out, err := json.Marshal(tree)
	if err != nil {
		return nil
	}
	for i := range p.vals {
		m, _ := json.Marshal(markPrefix + strconv.Itoa(i) + markSuffix)
		j := bytes.Index(out, m)
		if j < 0 {
			return nil
		}
		p.lits = append(p.lits, out[:j:j])
		p.size += j
		out = out[j+len(m):]
	}
	p.lits = append(p.lits, out)
	p.size += len(out)
	return p
}

// mark replaces every string value of node that holds "${" by a mark, recording the value and
// its path, in walk's order (map keys sorted; keys themselves are never expanded).
func (p *program) mark(node any, path string) any {
	switch n := node.(type) {
	case string:
		if !strings.Contains(n, "${") {
			return n
		}
		p.vals = append(p.vals, programValue{s: n, path: path, kubelet: kubeletExpands(path)})
		return markPrefix + strconv.Itoa(len(p.vals)-1) + markSuffix
	case []any:
		for i := range n {
			n[i] = p.mark(n[i], fmt.Sprintf("%s[%d]", path, i))
		}
		return n
	case map[string]any:
		keys := make([]string, 0, len(n))
		for k := range n {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			n[k] = p.mark(n[k], path+"."+k)
		}
		return n
	default:
		return node
	}
}

// render expands the program's values with v and decodes the JSON into out (a new value of the
// program's type). It never writes into the program.
func (p *program) render(out any, v vars) error {
	buf := make([]byte, 0, p.size+32*len(p.vals))
	for i, val := range p.vals {
		buf = append(buf, p.lits[i]...)
		s, err := expandChecked(val.s, val.path, v, val.kubelet, nil)
		if err != nil {
			return err
		}
		q, err := json.Marshal(s)
		if err != nil {
			return err
		}
		buf = append(buf, q...)
	}
	buf = append(buf, p.lits[len(p.vals)]...)
	return json.Unmarshal(buf, out)
}
