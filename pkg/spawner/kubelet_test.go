package spawner

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// kubeletExpand is the kubelet's $(VAR) expansion, re-implemented here because k8s.io/kubernetes
// is not a dependency (its go.mod cannot be required without replacing every staging module). It
// follows k8s.io/kubernetes third_party/forked/golang/expansion/expand.go (v1.37: Expand,
// tryReadVariableName, MappingFuncFor), which the kubelet runs on env[].value
// (pkg/kubelet/kubelet_pods.go, makeEnvironmentVariables), command and args
// (pkg/kubelet/container/helpers.go, ExpandContainerCommandAndArgs), volumeMounts[].subPathExpr
// (ExpandContainerVolumeMounts) and exec probes (ExpandContainerCommandOnlyStatic, from
// pkg/kubelet/prober/prober.go):
//
//   - "$$" is a literal "$";
//   - "$(NAME)" is NAME's value, or "$(NAME)" unchanged when NAME is not known (the name is
//     everything up to the first ")", "$" included: no escape inside a reference);
//   - "$(" without a ")" after it, "$" before any other character and a "$" at the end stay as
//     they are.
//
// TestKubeletExpandFollowsUpstream holds it to upstream's own cases (expand_test.go).
func kubeletExpand(s string, env map[string]string) string {
	var b strings.Builder
	checkpoint := 0
	for cursor := 0; cursor < len(s); cursor++ {
		if s[cursor] != '$' || cursor+1 >= len(s) {
			continue
		}
		b.WriteString(s[checkpoint:cursor])
		rest := s[cursor+1:]
		switch rest[0] {
		case '$':
			b.WriteByte('$')
			cursor++
		case '(':
			end := strings.IndexByte(rest[1:], ')')
			if end < 0 {
				b.WriteString("$(")
				cursor++
				break
			}
			name := rest[1 : 1+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			cursor += 1 + end + 1
		default:
			// "$" and the next character (a whole rune upstream; copying it byte by byte
			// gives the same text, and no byte of a multi-byte rune is '$' or '(').
			b.WriteByte('$')
			b.WriteByte(rest[0])
			cursor++
		}
		checkpoint = cursor + 1
	}
	return b.String() + s[checkpoint:]
}

func TestKubeletExpandFollowsUpstream(t *testing.T) {
	// The mapping and cases of upstream's doExpansionTest (expand_test.go).
	env := map[string]string{"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}
	for in, want := range map[string]string{
		"$(VAR_A)": "A", "$(VAR_A)-$(VAR_A)": "A-A", "___$(VAR_B)___": "___B___", "$(VAR_A)_$(VAR_B)_$(VAR_C)": "A_B_C",
		"$$(VAR_B)_$(VAR_A)": "$(VAR_B)_A", "$$(VAR_A)_$$(VAR_B)": "$(VAR_A)_$(VAR_B)", "f000-$$VAR_A": "f000-$VAR_A",
		`foo\$(VAR_C)bar`: `foo\Cbar`, "$(VAR_A$(VAR_B))": "$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B)": "$(VAR_A$(VAR_B)",
		"$(VAR_REF)": "$(VAR_A)", "foo$(VAR_EMPTY)bar": "foobar", "foo$(VAR_Awhoops!": "foo$(VAR_Awhoops!",
		"f00__(VAR_A)__": "f00__(VAR_A)__", "$?_boo_$!": "$?_boo_$!", "$VAR_A": "$VAR_A", "$(VAR_DNE)": "$(VAR_DNE)",
		"$$$$$$(BIG_MONEY)": "$$$(BIG_MONEY)", "$$$$$$(VAR_A)": "$$$(VAR_A)", "$$$$$$$(GOOD_ODDS)": "$$$$(GOOD_ODDS)",
		"$$$$$$$(VAR_A)": "$$$A", "$VAR_A)": "$VAR_A)", "${VAR_A}": "${VAR_A}", "$(VAR_B)_______$(A": "B_______$(A",
		"$(VAR_C)_______$(": "C_______$(", "$(VAR_A)foobarzab$": "Afoobarzab$", `foo-\$(VAR_A`: `foo-\$(VAR_A`,
		"--$($($($($--": "--$($($($($--", "$($($($($--foo$(": "$($($($($--foo$(", "foo0--$($($($(": "foo0--$($($($(",
		"$(foo$$var)": "$(foo$$var)", "\n": "\n", "$£FOO": "$£FOO", "prefix-$€-suffix": "prefix-$€-suffix",
	} {
		if got := kubeletExpand(in, env); got != want {
			t.Errorf("kubeletExpand(%q) = %q, want %q", in, got, want)
		}
	}
}

// kubeletView is what the containers of pod see after the kubelet's expansion: each container's
// final environment, command, args, subPathExprs and exec probe commands, by container name.
// secrets holds the data of the Secrets the pod's envFrom names; the downward API gives
// metadata.name only.
type kubeletView struct {
	env                      map[string]string
	command, args, subPaths  []string
	probes                   [][]string
	template                 corev1.Container
	envValuesBeforeExpansion map[string]string
}

func kubeletViews(t *testing.T, pod *corev1.Pod, secrets map[string]map[string]string) map[string]kubeletView {
	t.Helper()
	views := map[string]kubeletView{}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		v := kubeletView{env: map[string]string{}, envValuesBeforeExpansion: map[string]string{}, template: c}
		// makeEnvironmentVariables: envFrom first, then each env entry in order, a value expanded
		// against what is defined so far.
		for _, ef := range c.EnvFrom {
			if ef.SecretRef != nil {
				for k, val := range secrets[ef.SecretRef.Name] {
					v.env[ef.Prefix+k] = val
				}
			}
		}
		for _, e := range c.Env {
			v.envValuesBeforeExpansion[e.Name] = e.Value
			switch {
			case e.Value != "":
				v.env[e.Name] = kubeletExpand(e.Value, v.env)
			case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
				v.env[e.Name] = pod.Name
			default:
				v.env[e.Name] = ""
			}
		}
		for _, s := range c.Command {
			v.command = append(v.command, kubeletExpand(s, v.env))
		}
		for _, s := range c.Args {
			v.args = append(v.args, kubeletExpand(s, v.env))
		}
		for _, m := range c.VolumeMounts {
			if m.SubPathExpr != "" {
				v.subPaths = append(v.subPaths, kubeletExpand(m.SubPathExpr, v.env))
			}
		}
		// Exec probes see the static values only (ExpandContainerCommandOnlyStatic).
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
			if p != nil && p.Exec != nil {
				var cmd []string
				for _, s := range p.Exec.Command {
					cmd = append(cmd, kubeletExpand(s, v.envValuesBeforeExpansion))
				}
				v.probes = append(v.probes, cmd)
			}
		}
		views[c.Name] = v
	}
	return views
}

// everything is every string a container sees but its envFrom variables, for a search.
func (v kubeletView) everything() string {
	var all []string
	for k := range v.envValuesBeforeExpansion {
		all = append(all, k+"="+v.env[k])
	}
	all = append(all, v.command...)
	all = append(all, v.args...)
	all = append(all, v.subPaths...)
	for _, p := range v.probes {
		all = append(all, p...)
	}
	return strings.Join(all, "\n")
}

const theSecret = "wJalrXUtnFEMI-s3cr3t"

// TestCallerValuesStayLiteralThroughTheKubeletsExpansion: the kubelet expands $(VAR) in env
// values, command, args, subPathExpr and exec probes with the container's environment, the
// variables of an envFrom Secret included. A caller's value (a context value, the display name,
// the owner) written into such a field reaches the container as it is, so it can never name the
// init Secret's AWS_SECRET_ACCESS_KEY; the template's own $(POD_NAME) still expands; and a
// placeholder cannot complete the name of a template's $(...) reference.
func TestCallerValuesStayLiteralThroughTheKubeletsExpansion(t *testing.T) {
	ann := map[string]string{
		workspace.AnnInitFrom: "s3://seeds/${context.project}/", workspace.AnnInitSecret: "s3-creds",
		workspace.AnnInitS3Endpoint: "http://minio:9000",
	}
	spec := `{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}],
	  "command":["/bin/sh","-c","echo ${context.project} $(POD_NAME) $$HOME"],
	  "args":["--pod=$(POD_NAME)","--project=${context.project}","--name=${name}","${owner}$(POD_NAME)"],
	  "envFrom":[{"secretRef":{"name":"s3-creds"}}],
	  "env":[{"name":"POD_NAME","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}},
	         {"name":"PROJECT","value":"${context.project}"},
	         {"name":"GREETING","value":"$(POD_NAME) works on ${context.project}$(POD_NAME)"},
	         {"name":"OWNER","value":"${owner}"}],
	  "volumeMounts":[{"name":"home","mountPath":"/h","subPathExpr":"$(POD_NAME)/${id}"}],
	  "readinessProbe":{"exec":{"command":["test","${context.project}"]}}}]}`
	secrets := map[string]map[string]string{"s3-creds": {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": theSecret}}
	hostile := []string{
		"$(AWS_SECRET_ACCESS_KEY)", "$$(AWS_SECRET_ACCESS_KEY)", "$$$(AWS_SECRET_ACCESS_KEY)", "$", "x$", "$(", ")",
		"AWS_SECRET_ACCESS_KEY)", "a) $(AWS_SECRET_ACCESS_KEY", "${id}", "$${id}", "plain",
	}
	for _, roundTrip := range []bool{false, true} {
		for _, val := range hostile {
			t.Run(val, func(t *testing.T) {
				alwaysRoundTrip = roundTrip
				defer func() { alwaysRoundTrip = false }()
				id := Identity{Owner: "auth0|" + val, ID: "demo", Name: val, Context: map[string]string{"project": val}}
				pod, _, err := BuildPod(mustTemplate(t, ann, spec, homeClaim), id, "p")
				if err != nil {
					t.Fatal(err)
				}
				views := kubeletViews(t, pod, secrets)
				for name, v := range views {
					if strings.Contains(v.everything(), theSecret) {
						t.Errorf("container %s sees the Secret's value:\n%s", name, v.everything())
					}
				}
				in := views[InitContainerName]
				if got, want := in.env["NOGOO9_INIT_SOURCE"], "s3://seeds/"+val+"/"; got != want {
					t.Errorf("NOGOO9_INIT_SOURCE = %q, want %q (field %q)", got, want, in.envValuesBeforeExpansion["NOGOO9_INIT_SOURCE"])
				}
				if in.env["AWS_ENDPOINT_URL"] != "http://minio:9000" {
					t.Errorf("AWS_ENDPOINT_URL = %q", in.env["AWS_ENDPOINT_URL"])
				}
				ide := views["ide"]
				want := map[string]string{"PROJECT": val, "GREETING": "p works on " + val + "p", "OWNER": "auth0|" + val, "POD_NAME": "p"}
				for k, w := range want {
					if ide.env[k] != w {
						t.Errorf("env %s = %q, want %q (field %q)", k, ide.env[k], w, ide.envValuesBeforeExpansion[k])
					}
				}
				if got, want := ide.args, []string{"--pod=p", "--project=" + val, "--name=" + val, "auth0|" + val + "p"}; strings.Join(got, "\x00") != strings.Join(want, "\x00") {
					t.Errorf("args = %q, want %q (fields %q)", got, want, ide.template.Args)
				}
				if got, want := ide.command[2], "echo "+val+" p $HOME"; got != want {
					t.Errorf("command = %q, want %q (field %q)", got, want, ide.template.Command[2])
				}
				if len(ide.subPaths) != 1 || ide.subPaths[0] != "p/demo" {
					t.Errorf("subPathExpr = %q", ide.subPaths)
				}
				if len(ide.probes) != 1 || ide.probes[0][1] != val {
					t.Errorf("probe = %q, want %q", ide.probes, val)
				}
			})
		}
	}
	// A placeholder inside a template's own $(...) reference would choose (part of) the name of
	// the variable the kubelet reads: refused, in every field it expands.
	refused := func(t *testing.T, field string, ctx map[string]string, want string) {
		t.Helper()
		for _, roundTrip := range []bool{false, true} {
			alwaysRoundTrip = roundTrip
			tmpl := mustTemplate(t, nil, `{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}],`+field+`}]}`, homeClaim)
			_, _, err := BuildPod(tmpl, Identity{Owner: "jane", ID: "demo", Context: ctx}, "p")
			alwaysRoundTrip = false
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "data.spec.containers[0].") {
				t.Fatalf("round trip %v: err = %v, want a refusal naming the field and %q", roundTrip, err, want)
			}
		}
	}
	for _, field := range []string{
		`"env":[{"name":"X","value":"$(${context.v})"}]`,
		`"env":[{"name":"X","value":"$(AWS_${context.v}"}]`,
		`"args":["a","--key=$(AWS_SECRET_${context.v})"]`,
		`"command":["$(${id}"]`,
		`"readinessProbe":{"exec":{"command":["$(X${id})"]}}`,
		`"volumeMounts":[{"name":"home","mountPath":"/v","subPathExpr":"$(${id})"}]`,
	} {
		t.Run("refused "+field, func(t *testing.T) {
			refused(t, field, map[string]string{"v": "SECRET_ACCESS_KEY)"}, "would choose the variable")
		})
	}
	// After a character no variable name has (a shell's $(command ...) substitution), a value
	// the kubelet leaves as it is (no '$', no ')') is written as it is; another is refused.
	shell := `"command":["/bin/sh","-c","cd $(basename ${context.v} .git) && $(POD_NAME)"],"env":[{"name":"POD_NAME","value":"x"}],"envFrom":[{"secretRef":{"name":"s3-creds"}}]`
	for _, val := range []string{"a) $(AWS_SECRET_ACCESS_KEY", "x$y", "AWS_SECRET_ACCESS_KEY)"} {
		t.Run("refused inside a shell substitution: "+val, func(t *testing.T) {
			refused(t, shell, map[string]string{"v": val}, "${context.v}")
		})
	}
	t.Run("taken inside a shell substitution", func(t *testing.T) {
		tmpl := mustTemplate(t, nil, `{"containers":[{"name":"ide","image":"b","ports":[{"containerPort":80}],`+shell+`}]}`, "")
		pod, _, err := BuildPod(tmpl, Identity{Owner: "jane", ID: "demo", Context: map[string]string{"v": "https://example.com/r.git"}}, "p")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := kubeletViews(t, pod, secrets)["ide"].command[2], "cd $(basename https://example.com/r.git .git) && x"; got != want {
			t.Fatalf("command = %q, want %q", got, want)
		}
	})
}
