package spawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/nogoo9/no-crd/pkg/workspace"
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
	return expandChecked(s, where, v, false, nil)
}

// expandField is expandString for the value of field path (a walk's or a program's path, such as
// data.spec.containers[0].env[1].value): in a field the kubelet expands (kubeletExpands), each
// placeholder's value is written for the kubelet to read literally (expandChecked).
func expandField(s, path string, v vars) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	return expandChecked(s, path, v, kubeletExpands(path), nil)
}

// kubeletField matches the paths of the fields of a pod spec in which the kubelet expands $(VAR)
// references with the container's environment (k8s.io/kubernetes pkg/kubelet: env values in
// makeEnvironmentVariables, command and args in ExpandContainerCommandAndArgs, subPathExpr in
// ExpandContainerVolumeMounts, exec probes in ExpandContainerCommandOnlyStatic), in every kind of
// container. Lifecycle hooks are run as written (pkg/kubelet/lifecycle), so the preStop hook is
// not among them.
var kubeletField = regexp.MustCompile(`^data\.spec\.(?:containers|initContainers|ephemeralContainers)\[\d+\]\.(?:command\[\d+\]|args\[\d+\]|env\[\d+\]\.value|volumeMounts\[\d+\]\.subPathExpr|(?:livenessProbe|readinessProbe|startupProbe)\.exec\.command\[\d+\])$`)

// kubeletExpands reports whether the kubelet expands $(VAR) in the field at path.
func kubeletExpands(path string) bool { return kubeletField.MatchString(path) }

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
	out, err := expandChecked(s, where, v, false, func(name, val string) error {
		if shellSafe(val) {
			return nil
		}
		return fmt.Errorf("%s: the value of ${%s} (%s) has characters a shell would interpret, and this script runs with /bin/sh -c: use letters, digits and ._-/:@=,+%% only, or read the value from an environment variable the spec sets", where, name, workspace.Quote(val))
	})
	if err != nil || !escape {
		return out, err
	}
	return strings.ReplaceAll(out, "${", "$${"), nil
}

// templatesOwn are the placeholders whose values the template decides: its name and version.
// Every other one is a caller's choice (${id}, ${name}, ${context.KEY}) or derives from the
// owner's subject (${owner}, ${user}, ${pod}), which a person often picks (a GitHub login, an
// email address).
func templatesOwn(name string) bool { return name == "template" || name == "version" }

// expandNoCaller expands a field a caller must not choose: what runs with nogoo9/init-secret
// (nogoo9/init-image) and where its signed requests go (nogoo9/init-s3-endpoint). Only the
// template's own placeholders are taken there (templatesOwn). kubelet: the value goes into a
// field the kubelet expands (expandChecked); escape: as expandShell.
func expandNoCaller(s, where string, v vars, kubelet, escape bool) (string, error) {
	out, err := expandChecked(s, where, v, kubelet, func(name, _ string) error {
		if templatesOwn(name) {
			return nil
		}
		return fmt.Errorf("%s: placeholder ${%s} would let the caller choose this value, and the init container runs with the S3 credentials (nogoo9/init-secret, or the pod's own): write the value in the template (only ${template} and ${version} may stand here)", where, name)
	})
	if err != nil || !escape {
		return out, err
	}
	return strings.ReplaceAll(out, "${", "$${"), nil
}

// expandChecked is expandString with check, when not nil, approving each placeholder's value.
//
// kubelet: s is a field the kubelet expands $(VAR) in with the container's environment (an init
// container's includes nogoo9/init-secret's keys), so a value is written for the kubelet to read
// literally: with each "$" doubled ("$$" is the kubelet's literal "$"), it can neither open a
// reference nor close one of the template's. The template's own text is left as it is, its
// $(POD_NAME) references included. A placeholder inside a reference the template opened
// (refInPrefix) would make part of the variable's name: refused when the reference's text so far
// could begin a variable name; after any other character (a shell's $(command ...)), where the
// kubelet copies the text as it is, the value is written as it is if it holds no "$" or ")".
func expandChecked(s, where string, v vars, kubelet bool, check func(name, val string) error) (string, error) {
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
			return "", fmt.Errorf("%s: placeholder %s is not closed with '}' (write $${ for a literal ${)", where, workspace.Quote(s[i:]))
		}
		name := s[i+2 : i+2+end]
		val, ok := v.lookup(name)
		if !ok {
			if k, isCtx := strings.CutPrefix(name, contextPrefix); isCtx {
				return "", fmt.Errorf("%s: placeholder ${%s} needs context value %s, which the spawn did not give: pass it in the context", where, name, workspace.Quote(k))
			}
			return "", fmt.Errorf("%s: unknown placeholder ${%s}: known are %s; write $${ for a literal ${", where, name, v.known())
		}
		if check != nil {
			if err := check(name, val); err != nil {
				return "", err
			}
		}
		if kubelet {
			var err error
			if val, err = forKubelet(b.String(), val, name, where); err != nil {
				return "", err
			}
		}
		b.WriteString(val)
		s = s[i+2+end+1:]
	}
}

// forKubelet is val as written after prefix (the field's text so far) in a field the kubelet
// expands, so that the container sees val; or why it cannot be (expandChecked).
func forKubelet(prefix, val, name, where string) (string, error) {
	ref, open := refInPrefix(prefix)
	switch {
	case !open:
		return strings.ReplaceAll(val, "$", "$$"), nil
	case strings.Trim(ref, varNameChars) == "":
		return "", fmt.Errorf("%s: placeholder ${%s} stands inside the reference %s..., where the kubelet would read its value as (part of) the name of the variable to put there: the caller would choose the variable (a Secret's key, say). Write the variable's name in the template, or pass the value in an environment variable of its own", where, name, workspace.Quote("$("+ref))
	case strings.ContainsAny(val, "$)"):
		return "", fmt.Errorf("%s: the value of ${%s} (%s) stands inside %s..., where the kubelet would not pass a '$' or ')' on as written: pass a value without them, or read it from an environment variable the spec sets", where, name, workspace.Quote(val), workspace.Quote("$("+ref))
	default:
		return val, nil
	}
}

// varNameChars are the characters of a Secret's or ConfigMap's keys, and of the usual
// environment variable names (letters, digits, '_', '-', '.').
const varNameChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-."

// refInPrefix reads text the way the kubelet does (k8s.io/kubernetes
// third_party/forked/golang/expansion: "$$" is a "$", "$(" opens a reference up to the next ")",
// whatever lies between) and reports whether it ends inside a reference a ")" further on would
// close, with that reference's text so far. A "$" that ends the text counts as an opening (what
// follows it could make it one); it cannot happen after a template's text (that "${" is the escape
// "$${") nor after a value (whose "$" are doubled), but a value is never written after one.
func refInPrefix(text string) (ref string, open bool) {
	for i := 0; i < len(text); i++ {
		if text[i] != '$' {
			continue
		}
		if i+1 == len(text) {
			return "", true
		}
		switch text[i+1] {
		case '$':
			i++
		case '(':
			j := strings.IndexByte(text[i+2:], ')')
			if j < 0 {
				return text[i+2:], true
			}
			i += 2 + j
		}
	}
	return "", false
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
		return expandField(n, path, v)
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
