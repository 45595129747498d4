package upgrade

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// richPod is an old pod of the size real workspaces have: several containers, environment,
// mounts, probes and the defaults the API server fills in.
func richPod() *corev1.Pod {
	return with(wsPod("ws-old", "uid-old", "v1", t0), claim("data"), func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		for _, k := range []string{"HOME", "SHELL", "EDITOR", "GIT_AUTHOR_NAME", "JUPYTER_PORT", "WORKSPACE_ID"} {
			c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: "value-of-" + strings.ToLower(k)})
		}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/home/jane"}}
		c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
		c.TerminationMessagePath, c.TerminationMessagePolicy = "/dev/termination-log", corev1.TerminationMessageReadFile
		c.ImagePullPolicy = corev1.PullIfNotPresent
		side := c.DeepCopy()
		side.Name, side.Image = "sidecar", "sidecar:v1"
		p.Spec.Containers = append(p.Spec.Containers, *side)
		p.Spec.RestartPolicy, p.Spec.DNSPolicy, p.Spec.SchedulerName = corev1.RestartPolicyAlways, corev1.DNSClusterFirst, "default-scheduler"
		for _, k := range []string{"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"} {
			secs := int64(300)
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: k, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs})
		}
	})
}

// TestRollbackSpecIsWrittenCompressedAndBothFormatsRestoreTheSamePod: nogoo9 writes the spec
// compressed (it rides on every write and watch event of the new pod until Ready), and a spec an
// older replica wrote as plain JSON still restores exactly the same pod.
func TestRollbackSpecIsWrittenCompressedAndBothFormatsRestoreTheSamePod(t *testing.T) {
	old := richPod()
	spec, err := RollbackSpec(old)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(spec, rollbackSpecGzip) {
		t.Fatalf("rollback spec is not written compressed: %.40q", spec)
	}
	plain, err := DecodeRollbackSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec) >= len(plain)*2/3 {
		t.Errorf("compressed spec is %d bytes for %d bytes of JSON: not smaller by a third", len(spec), len(plain))
	}
	t.Logf("rollback spec: %d bytes of JSON, %d bytes written", len(plain), len(spec))

	restore := func(value string) *corev1.Pod {
		t.Helper()
		failed := upgraded(old, "ws-new", "uid-new", "v2", Recreate, t0)
		failed.Annotations[workspace.AnnRollbackSpec] = value
		p, err := RollbackPod(failed, "ws-rb", map[string]string{workspace.AnnUpgradeStrategy: string(Rollback)})
		if err != nil {
			t.Fatalf("restore from %.20q...: %v", value, err)
		}
		return p
	}
	fromNew, fromOld := restore(spec), restore(string(plain))
	if !reflect.DeepEqual(fromNew, fromOld) {
		t.Errorf("the two formats restore different pods:\n%+v\n%+v", fromNew, fromOld)
	}
	if len(fromNew.Spec.Containers) != 2 || fromNew.Spec.Containers[1].Image != "sidecar:v1" || len(fromNew.Spec.Containers[0].Env) != 6 {
		t.Errorf("restored pod lost its spec: %+v", fromNew.Spec.Containers)
	}
}

func TestDecodeRollbackSpecRejectsBadValuesNamingTheKey(t *testing.T) {
	gz := func(b []byte) string {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(b)
		_ = zw.Close()
		return rollbackSpecGzip + base64.StdEncoding.EncodeToString(buf.Bytes())
	}
	for _, tc := range []struct{ name, value, want string }{
		{"neither format", "spec: yes", "starts with neither"},
		{"not base64 after the prefix", rollbackSpecGzip + "!!!", "not base64"},
		{"base64 of something that is not gzip", rollbackSpecGzip + base64.StdEncoding.EncodeToString([]byte("plain text")), "not gzip"},
		{"truncated gzip", gz([]byte(`{"spec":{}}`))[:len(rollbackSpecGzip)+12], "not"},
		{"inflates beyond the bound", gz(bytes.Repeat([]byte(" "), maxRollbackSpecJSON+1)), "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeRollbackSpec(tc.value)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), workspace.AnnRollbackSpec) {
				t.Errorf("error = %v, want one naming %s and saying %q", err, workspace.AnnRollbackSpec, tc.want)
			}
		})
	}
}

// TestEncodingARollbackSpecReusesItsCompressor: a new gzip writer allocates about 800 KB of tables
// in some twenty allocations; during a bulk upgrade of hundreds of Recreate workspaces that garbage
// kept nogoo9's collector busy. The writers are pooled, so an encoding allocates only its output.
func TestEncodingARollbackSpecReusesItsCompressor(t *testing.T) {
	if raceDetector {
		t.Skip("under -race sync.Pool drops pooled items at random: an allocation count means nothing there (it runs in make test, which has no -race)")
	}
	spec, err := RollbackSpec(richPod())
	if err != nil {
		t.Fatal(err)
	}
	js, err := DecodeRollbackSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := EncodeRollbackSpec(js); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 10 {
		t.Errorf("EncodeRollbackSpec made %.1f allocations per call, want at most 10 (a pooled compressor)", allocs)
	}
}

// TestPreserveIdentityKeepsWhatPeopleAddedToThePod: labels people added to the workspace's pod
// (not nogoo9's keys) stay on the pod an upgrade, a start on the latest version or a preview builds
// from the template; the template wins on the keys it sets. Annotations other than nogoo9's
// identity keys are not copied (admission webhooks write them: an injector's status would keep it
// from injecting into the new pod), nor is nogoo9's bookkeeping. A rollback pod takes its keys from the
// spec it restores, not from the failed version.
func TestPreserveIdentityKeepsWhatPeopleAddedToThePod(t *testing.T) {
	old := with(wsPod("ws-old", "uid-old", "v1", t0), ready,
		ann("example.com/cost-center", "4711"), ann("team.example.com/note", "do not cull"), ann("shared", "from the pod"),
		ann("kubectl.kubernetes.io/last-applied-configuration", `{"kind":"Pod"}`), ann(workspace.AnnUpgradeRequested, "true"), ann(workspace.AnnLastUpgradeError, "x"),
		func(p *corev1.Pod) {
			p.Labels["team"] = "ml"
			p.Labels["tier"] = "from the pod"
		})
	// As the template renders the new version: its own keys, none of the pod's.
	p := wsPod("ws-new", "", "v2", t0)
	p.Labels["tier"] = "from the template"
	p.Annotations["shared"] = "from the template"
	p.Annotations["example.com/sidecar"] = "v2"
	PreserveIdentity(p, old)

	for k, want := range map[string]string{"team": "ml", "tier": "from the template"} {
		if got := p.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	for k, want := range map[string]string{"shared": "from the template", "example.com/sidecar": "v2", workspace.AnnOwner: testOwner} {
		if got := p.Annotations[k]; got != want {
			t.Errorf("annotation %s = %q, want %q", k, got, want)
		}
	}
	for _, k := range []string{"example.com/cost-center", "team.example.com/note", "kubectl.kubernetes.io/last-applied-configuration", workspace.AnnUpgradeRequested, workspace.AnnLastUpgradeError} {
		if v, ok := p.Annotations[k]; ok {
			t.Errorf("annotation %s = %q copied from the old pod", k, v)
		}
	}
	if workspace.TemplateVersion(p) != "v2" {
		t.Errorf("template version = %q: nogoo9's keys of the old pod must not be copied", workspace.TemplateVersion(p))
	}
	if got := p.Annotations[workspace.AnnWorkspaceCreatedAt]; got != old.CreationTimestamp.UTC().Format(time.RFC3339) {
		t.Errorf("annotation %s = %q, want the old pod's creation %v: the workspace is as old as its first pod", workspace.AnnWorkspaceCreatedAt, got, old.CreationTimestamp.Time)
	}

	t.Run("a rollback pod does not take the failed version's keys", func(t *testing.T) {
		spec, err := RollbackSpec(old)
		if err != nil {
			t.Fatal(err)
		}
		failed := upgraded(old, "ws-new", "uid-new", "v2", Recreate, t0)
		failed.Annotations["example.com/sidecar"] = "v2"
		failed.Annotations[workspace.AnnRollbackSpec] = spec
		rb, err := RollbackPod(failed, "ws-rb", nil)
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := rb.Annotations["example.com/sidecar"]; ok {
			t.Errorf("rollback pod took annotation example.com/sidecar=%q of the failed version", v)
		}
		if rb.Annotations["example.com/cost-center"] != "4711" || rb.Labels["team"] != "ml" {
			t.Errorf("rollback pod lost the restored pod's keys: %v %v", rb.Labels, rb.Annotations)
		}
	})
}

// TestRecreateDeadlineStartsWhenTheGateIsRemoved: a new pod behind the gate has not run, so however
// much of the window the old pod's graceful termination (or nogoo9 being down) took, the gate's
// removal starts the deadline, in the same write: the new version gets the whole timeout.
func TestRecreateDeadlineStartsWhenTheGateIsRemoved(t *testing.T) {
	cfg := Config{Timeout: 10 * time.Minute, Keys: testKeys}
	old := with(wsPod("ws-old", "uid-old", "v1", t0.Add(-time.Hour)), ready, claim("data"))
	claims := map[string]*corev1.PersistentVolumeClaim{"data": pvc("data", corev1.ReadWriteOnce)}
	deadline := t0.Add(cfg.Timeout)
	tests := []struct {
		name string
		now  time.Time
	}{
		{name: "old pod gone 5 s before the deadline (a long preStop hook)", now: deadline.Add(-5 * time.Second)},
		{name: "old pod gone a minute after the upgrade started", now: t0.Add(time.Minute)},
		{name: "old pod gone after the deadline (nogoo9 was down)", now: deadline.Add(time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := with(upgraded(old, workspace.NextPodName(old, "v2"), "uid-new", "v2", Recreate, t0), pending, gatedPod)
			m := Plan(Observed{Pods: []*corev1.Pod{up}, Claims: claims}, Target{Found: true, Version: "v2"}, tt.now, cfg)
			if len(m.Actions) != 1 || m.Actions[0].Kind != RemoveGate {
				t.Fatalf("move = %q, want the gate's removal alone (one write)", summary(m))
			}
			want := tt.now.UTC().Format(time.RFC3339)
			if got := m.Actions[0].Annotations[workspace.AnnUpgradeStartedAt]; got != want {
				t.Fatalf("the gate's removal sets %s = %q, want %q (now): the new pod gets only what is left of the deadline", workspace.AnnUpgradeStartedAt, got, want)
			}
			if m.RequeueAfter != cfg.Timeout {
				t.Errorf("requeueAfter = %s, want the whole timeout %s", m.RequeueAfter, cfg.Timeout)
			}

			// The patch applied: the scheduler places the pod, which is still starting just after
			// the first deadline. It is not failed then, but at the new one.
			for k, v := range m.Actions[0].Annotations {
				up.Annotations[k] = v
			}
			up.Spec.SchedulingGates = nil
			later := tt.now.Add(6 * time.Second)
			if m := Plan(Observed{Pods: []*corev1.Pod{up}, Claims: claims}, Target{Found: true, Version: "v2"}, later, cfg); len(m.Actions) != 0 || m.State != StateUpgrading {
				t.Errorf("6 s after the gate's removal the upgrade is %s: %q, want it waiting for the new pod", m.State, summary(m))
			}
			end := tt.now.Add(cfg.Timeout + time.Second)
			if m := Plan(Observed{Pods: []*corev1.Pod{up}, Claims: claims}, Target{Found: true, Version: "v2"}, end, cfg); m.State != StateRollingBack {
				t.Errorf("a whole timeout after the gate's removal the upgrade is %s: %q, want it rolled back", m.State, summary(m))
			}
		})
	}
}
