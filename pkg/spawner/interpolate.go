package spawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Placeholders a template may use in any string value of its spec and volume claims. A literal
// "${" is written "$${". Anything else in ${...} is an error at spawn time.
//
//	${owner}          the owner's raw subject, e.g. auth0|5f1c or jane@example.com
//	${user}           the owner as a label-safe value (workspace.UserLabel), as in the routing paths
//	${id}             the workspace id
//	${name}           the workspace display name (the id when none was given)
//	${pod}            the pod name
//	${template}       the template name
//	${version}        the template version
//	${context.KEY}    the caller-supplied context value KEY
const contextPrefix = "context."

// vars resolves placeholder names.
type vars struct {
	fixed   map[string]string
	context map[string]string
}

func (v vars) lookup(name string) (string, bool) {
	if k, ok := strings.CutPrefix(name, contextPrefix); ok {
		s, ok := v.context[k]
		return s, ok
	}
	s, ok := v.fixed[name]
	return s, ok
}

func (v vars) known() string {
	names := make([]string, 0, len(v.fixed)+1)
	for k := range v.fixed {
		names = append(names, "${"+k+"}")
	}
	sort.Strings(names)
	ctx := make([]string, 0, len(v.context))
	for k := range v.context {
		ctx = append(ctx, k)
	}
	sort.Strings(ctx)
	s := strings.Join(names, ", ") + " and ${context.KEY}"
	if len(ctx) > 0 {
		s += " (context keys given: " + strings.Join(ctx, ", ") + ")"
	} else {
		s += " (no context was given)"
	}
	return s
}

// expandString replaces ${name} placeholders in s. where names the field, for errors.
func expandString(s, where string, v vars) (string, error) {
	return expandChecked(s, where, v, nil)
}

// shellSafe reports whether a value can stand in a shell script as it is, quoted or not: no
// quotes, blanks, $, `, \, ;, &, |, <, >, (, ), {, }, *, ?, [, ~, #, ! or control characters.
func shellSafe(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-/:@=,+%", r)) {
			return false
		}
	}
	return true
}

// expandShell expands a script nogoo9 runs with /bin/sh -c (the nogoo9/pre-stop hook): a
// placeholder may only stand for a value no shell reads as code. With escape, the result is
// escaped again ("${" as "$${"), for a pod spec that is expanded once more as a whole.
func expandShell(s, where string, v vars, escape bool) (string, error) {
	out, err := expandChecked(s, where, v, func(name, val string) error {
		if shellSafe(val) {
			return nil
		}
		return fmt.Errorf("%s: the value of ${%s} (%q) has characters a shell would interpret, and this script runs with /bin/sh -c: use letters, digits and ._-/:@=,+%% only, or read the value from an environment variable the spec sets", where, name, val)
	})
	if err != nil || !escape {
		return out, err
	}
	return strings.ReplaceAll(out, "${", "$${"), nil
}

// expandNoCaller expands a field a caller must not choose (the init container's image): the
// caller's own values (${context.KEY}, ${name}, ${owner}) are refused there. escape: as
// expandShell.
func expandNoCaller(s, where string, v vars, escape bool) (string, error) {
	out, err := expandChecked(s, where, v, func(name, _ string) error {
		if strings.HasPrefix(name, contextPrefix) || name == "name" || name == "owner" {
			return fmt.Errorf("%s: placeholder ${%s} would let the caller choose this value: write it in the template", where, name)
		}
		return nil
	})
	if err != nil || !escape {
		return out, err
	}
	return strings.ReplaceAll(out, "${", "$${"), nil
}

// expandChecked is expandString with check, when not nil, approving each placeholder's value.
func expandChecked(s, where string, v vars, check func(name, val string) error) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' {
			// "$${" is an escaped, literal "${".
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			return "", fmt.Errorf("%s: placeholder %q is not closed with '}' (write $${ for a literal ${)", where, s[i:])
		}
		name := s[i+2 : i+2+end]
		val, ok := v.lookup(name)
		if !ok {
			if k, isCtx := strings.CutPrefix(name, contextPrefix); isCtx {
				return "", fmt.Errorf("%s: placeholder ${%s} needs context value %q, which the spawn did not give: pass it in the context", where, name, k)
			}
			return "", fmt.Errorf("%s: unknown placeholder ${%s}: known are %s; write $${ for a literal ${", where, name, v.known())
		}
		if check != nil {
			if err := check(name, val); err != nil {
				return "", err
			}
		}
		b.WriteString(val)
		s = s[i+2+end+1:]
	}
}

// expandJSON expands placeholders in every string value of *obj (a JSON-marshalable struct the
// caller owns: renderRoundTrip's copy of the template's spec or claim spec; BuildPod renders from
// the template's program instead where it can, program.go) in place, through its JSON
// form: marshal, walk every string, marshal the tree and decode it back into *obj. Without any
// "${" in the JSON (no placeholder, no escaped "$${", in a value or a key) the walk would change
// nothing and *obj is left as it is: it encodes to the same JSON as the round trip's result
// (TestBuildPodSkipsTheRoundTripOnlyWhereItChangesNothing; in memory, an empty list the template
// wrote stays empty instead of nil), and BuildPod takes a third of the time (BenchmarkBuildPod).
// The errors, and the pod when there is a placeholder, are the round trip's.
func expandJSON[T any](obj *T, root string, v vars) error {
	raw, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	if !alwaysRoundTrip && !bytes.Contains(raw, placeholderStart) {
		return nil
	}
	tree, err := decodeKeepingNumbers(raw)
	if err != nil {
		return err
	}
	tree, err = walk(tree, root, v)
	if err != nil {
		return err
	}
	raw, err = json.Marshal(tree)
	if err != nil {
		return err
	}
	var out T
	if err := json.Unmarshal(raw, &out); err != nil {
		return err
	}
	*obj = out
	return nil
}

// placeholderStart begins every placeholder and every escaped "$${".
var placeholderStart = []byte("${")

// alwaysRoundTrip turns BuildPod's fast paths off: the spec is not rendered from the template's
// program (renderSpec) and expandJSON takes the round trip even without a placeholder. For the
// tests that compare both paths.
var alwaysRoundTrip = false

func walk(node any, path string, v vars) (any, error) {
	switch n := node.(type) {
	case string:
		return expandString(n, path, v)
	case []any:
		for i := range n {
			e, err := walk(n[i], fmt.Sprintf("%s[%d]", path, i), v)
			if err != nil {
				return nil, err
			}
			n[i] = e
		}
		return n, nil
	case map[string]any:
		keys := make([]string, 0, len(n))
		for k := range n {
			keys = append(keys, k)
		}
		sort.Strings(keys) // the first error is deterministic
		for _, k := range keys {
			e, err := walk(n[k], path+"."+k, v)
			if err != nil {
				return nil, err
			}
			n[k] = e
		}
		return n, nil
	default:
		return node, nil
	}
}

// decodeKeepingNumbers decodes JSON into a tree of maps, slices and strings whose numbers stay
// json.Number: as float64 an integer above 2^53 would come back altered when the tree is
// marshalled again.
func decodeKeepingNumbers(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	return tree, nil
}
