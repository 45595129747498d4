package templates

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// restrictedSpec fits the restricted Pod Security Standard and the default policy.
const restrictedSpec = `{
  "automountServiceAccountToken": false,
  "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
  "containers": [{"name": "ide", "image": "ide:1", "ports": [{"name": "workspace", "containerPort": 8080}],
    "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
    "volumeMounts": [{"name": "home", "mountPath": "/home"}]}],
  "volumes": [{"name": "home", "emptyDir": {}}]
}`

func restrictedTemplate(t *testing.T, kv ...string) *Template {
	t.Helper()
	tmpl, err := Decode("node", "test", ann(kv...), map[string]string{workspace.DataSpec: restrictedSpec})
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return tmpl
}

// wantViolations checks Check's err against want, one group of substrings per expected
// violation (every substring of a group in one violation); an empty want expects no error. It
// reports whether err is a *PolicyError with violations, for the caller's further checks.
func wantViolations(t *testing.T, err error, want [][]string) bool {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		return false
	}
	var pe *PolicyError
	if !errors.As(err, &pe) {
		t.Fatalf("Check = %v, want a *PolicyError", err)
	}
	if len(pe.Violations) != len(want) {
		t.Errorf("%d violations, want %d:\n%s", len(pe.Violations), len(want), err)
	}
	for _, group := range want {
		found := false
		for _, v := range pe.Violations {
			all := true
			for _, w := range group {
				all = all && strings.Contains(v.String(), w)
			}
			found = found || all
		}
		if !found {
			t.Errorf("no violation contains all of %q in:\n%s", group, err)
		}
	}
	return true
}

func ide(t *Template) *corev1.Container { return &t.Spec.Containers[0] }

func pvcVolume(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func TestPolicyCheck(t *testing.T) {
	def := DefaultPolicy()
	baseline := Policy{Level: LevelBaseline, ServiceAccounts: []string{"default"}}
	privileged := Policy{Level: LevelPrivileged, ServiceAccounts: []string{"default"}}
	tests := []struct {
		name   string
		policy Policy
		ann    []string
		mutate func(t *Template)
		// want are substrings of the error, one group per expected violation; empty: allowed.
		want [][]string
	}{
		{name: "a restricted spec with no token and no service account passes the default policy", policy: def},
		{name: "the service account named default is allowed", policy: def,
			mutate: func(t *Template) { t.Spec.ServiceAccountName = "default" }},
		{name: "nogoo9's own service account is refused by name, with the allow-list and the flag", policy: def,
			mutate: func(t *Template) { t.Spec.ServiceAccountName = "nogoo9-manager" },
			want:   [][]string{{"data.spec.serviceAccountName", `"nogoo9-manager"`, `only "default"`, "--template-allowed-service-accounts"}}},
		{name: "the deprecated serviceAccount field is checked too", policy: def,
			mutate: func(t *Template) { t.Spec.DeprecatedServiceAccount = "admin" },
			want:   [][]string{{"data.spec.serviceAccount", `"admin"`}}},
		{name: "a placeholder cannot smuggle a service account past the allow-list", policy: def,
			mutate: func(t *Template) { t.Spec.ServiceAccountName = "${context.sa}" },
			want:   [][]string{{"data.spec.serviceAccountName", `"${context.sa}"`}}},
		{name: "an operator's allow-list admits the listed service account", policy: Policy{Level: LevelRestricted, ServiceAccounts: []string{"default", "builder"}},
			mutate: func(t *Template) { t.Spec.ServiceAccountName = "builder" }},
		{name: "an unset automountServiceAccountToken is refused because Kubernetes defaults it to true", policy: def,
			mutate: func(t *Template) { t.Spec.AutomountServiceAccountToken = nil },
			want:   [][]string{{"data.spec.automountServiceAccountToken", "unset", `"automountServiceAccountToken": false`, "--template-allow-automount-token"}}},
		{name: "automountServiceAccountToken true is refused", policy: def,
			mutate: func(t *Template) { t.Spec.AutomountServiceAccountToken = ptr.To(true) },
			want:   [][]string{{"data.spec.automountServiceAccountToken", "true"}}},
		{name: "a projected service-account token is refused like an automounted one", policy: def,
			mutate: func(t *Template) {
				t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: "tok", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "t"}}}}}})
			},
			want: [][]string{{"data.spec.volumes[tok].projected.sources[0].serviceAccountToken"}}},
		{name: "--template-allow-automount-token admits an unset automount and projected tokens", policy: Policy{Level: LevelRestricted, AllowAutomountToken: true},
			mutate: func(t *Template) {
				t.Spec.AutomountServiceAccountToken = nil
				t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: "tok", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "t"}}}}}})
			}},
		{name: "hostNetwork, hostPID and hostIPC are refused in one violation naming each", policy: def,
			mutate: func(t *Template) { t.Spec.HostNetwork, t.Spec.HostPID, t.Spec.HostIPC = true, true, true },
			want:   [][]string{{"host namespaces", "hostNetwork=true", "hostPID=true", "hostIPC=true", "remove hostNetwork"}}},
		{name: "a privileged container is refused", policy: def,
			mutate: func(t *Template) { ide(t).SecurityContext.Privileged = ptr.To(true) },
			want:   [][]string{{"privileged", `container "ide"`, `remove "privileged": true`}}},
		{name: "a hostPath volume is refused as a restricted volume type", policy: def,
			mutate: func(t *Template) {
				t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
			},
			want: [][]string{{"restricted volume types", `"root"`, "hostPath", "never hostPath"}}},
		{name: "a hostPort is refused", policy: def,
			mutate: func(t *Template) { ide(t).Ports[0].HostPort = 80 },
			want:   [][]string{{"hostPort", "80", "remove hostPort"}}},
		{name: "allowPrivilegeEscalation left unset is refused", policy: def,
			mutate: func(t *Template) { ide(t).SecurityContext.AllowPrivilegeEscalation = nil },
			want:   [][]string{{"allowPrivilegeEscalation != false", `"allowPrivilegeEscalation": false`}}},
		{name: "a capability beyond NET_BIND_SERVICE is refused", policy: def,
			mutate: func(t *Template) { ide(t).SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"} },
			want:   [][]string{{"capabilities", "SYS_ADMIN"}}},
		{name: "NET_BIND_SERVICE may be added back", policy: def,
			mutate: func(t *Template) { ide(t).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"} }},
		{name: "capabilities not dropped are refused", policy: def,
			mutate: func(t *Template) { ide(t).SecurityContext.Capabilities = nil },
			want:   [][]string{{"unrestricted capabilities", `"drop": ["ALL"]`}}},
		{name: "runAsNonRoot unset is refused", policy: def,
			mutate: func(t *Template) { t.Spec.SecurityContext.RunAsNonRoot = nil },
			want:   [][]string{{"runAsNonRoot != true", `"runAsNonRoot": true`}}},
		{name: "runAsUser 0 is refused", policy: def,
			mutate: func(t *Template) { t.Spec.SecurityContext.RunAsUser = ptr.To(int64(0)) },
			want:   [][]string{{"runAsUser=0"}}},
		{name: "seccomp Unconfined is refused", policy: def,
			mutate: func(t *Template) { t.Spec.SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined },
			want:   [][]string{{"seccompProfile", "Unconfined", `"RuntimeDefault"`}}},
		{name: "seccomp Localhost is allowed", policy: def,
			mutate: func(t *Template) {
				t.Spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}
			}},
		{name: "an unsafe sysctl is refused", policy: def,
			mutate: func(t *Template) {
				t.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "kernel.msgmax", Value: "1"}}
			},
			want: [][]string{{"forbidden sysctls", "kernel.msgmax"}}},
		{name: "a Secret volume, env and envFrom are refused, each by its field", policy: def,
			mutate: func(t *Template) {
				t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db"}}})
				ide(t).Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "api"}, Key: "k"}}}}
				ide(t).EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "all"}}}}
			},
			want: [][]string{
				{"data.spec.volumes[creds].secret.secretName", `Secret "db"`, "--template-allowed-secrets"},
				{"data.spec.containers[ide].env[TOKEN].valueFrom.secretKeyRef.name", `Secret "api"`},
				{"data.spec.containers[ide].envFrom[0].secretRef.name", `Secret "all"`}}},
		{name: "a CSI volume's nodePublishSecretRef names a Secret (restricted allows CSI volumes) and is refused", policy: def,
			mutate: func(t *Template) {
				t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: "kv", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
					Driver: "secrets-store.csi.k8s.io", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "team-b-kv-creds"}}}})
			},
			want: [][]string{{"data.spec.volumes[kv].csi.nodePublishSecretRef.name", `Secret "team-b-kv-creds"`, "--template-allowed-secrets"}}},
		{name: "in-tree volume plugins' Secrets are refused at the privileged level too", policy: privileged,
			mutate: func(t *Template) {
				t.Spec.Volumes = append(t.Spec.Volumes,
					corev1.Volume{Name: "block", VolumeSource: corev1.VolumeSource{RBD: &corev1.RBDVolumeSource{CephMonitors: []string{"m"}, RBDImage: "i", SecretRef: &corev1.LocalObjectReference{Name: "ceph"}}}},
					corev1.Volume{Name: "share", VolumeSource: corev1.VolumeSource{AzureFile: &corev1.AzureFileVolumeSource{SecretName: "azure", ShareName: "s"}}})
			},
			want: [][]string{{"data.spec.volumes[block].rbd.secretRef.name", `Secret "ceph"`}, {"data.spec.volumes[share].azureFile.secretName", `Secret "azure"`}}},
		{name: "a CSI volume naming an allowed Secret is allowed", policy: Policy{Level: LevelRestricted, Secrets: []string{"kv-creds"}},
			mutate: func(t *Template) {
				t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: "kv", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
					Driver: "secrets-store.csi.k8s.io", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "kv-creds"}}}})
			}},
		{name: "nodeName is refused: it skips the scheduler and cannot stand beside a Recreate upgrade's scheduling gate", policy: privileged,
			mutate: func(t *Template) { t.Spec.NodeName = "control-plane-0" },
			want:   [][]string{{"data.spec.nodeName", `"control-plane-0"`, "nodeSelector or affinity"}}},
		{name: "nogoo9's own scheduling gates are refused at the privileged level too: an upgrade's new pod born with nogoo9/stopped looked like a stopped pod", policy: privileged,
			mutate: func(t *Template) {
				t.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}, {Name: workspace.GateStopped}, {Name: workspace.GateVolumeRelease}}
			},
			want: [][]string{{"data.spec.schedulingGates[1].name", `"nogoo9/stopped"`, `"nogoo9/"`, "remove it"},
				{"data.spec.schedulingGates[2].name", `"nogoo9/volume-release"`}}},
		{name: "a placeholder in a scheduling gate's name is refused: the caller's context could make it nogoo9/stopped", policy: def,
			mutate: func(t *Template) { t.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "${context.gate}"}} },
			want:   [][]string{{"data.spec.schedulingGates[0].name", `"${context.gate}"`}}},
		{name: "another controller's scheduling gate is allowed", policy: def,
			mutate: func(t *Template) { t.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}} }},
		{name: "a Secret on the allow-list is allowed", policy: Policy{Level: LevelRestricted, Secrets: []string{"db"}},
			mutate: func(t *Template) {
				t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db"}}})
			}},
		{name: "the init-secret annotation names a Secret and is checked too", policy: def,
			ann:  []string{workspace.AnnInitFrom, "s3://b/p", workspace.AnnInitVolume, "home", workspace.AnnInitSecret, "aws"},
			want: [][]string{{"annotation nogoo9/init-secret", `Secret "aws"`}}},
		{name: "ephemeral containers are refused", policy: def,
			mutate: func(t *Template) {
				t.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg", Image: "busybox", SecurityContext: InitContainerSecurityContext()}}}
			},
			want: [][]string{{"data.spec.ephemeralContainers", "kubectl debug"}}},
		{name: "the init container nogoo9 adds must pass too: runAsNonRoot only on the template's containers is not enough", policy: def,
			ann: []string{workspace.AnnInitFrom, "configmap:seed", workspace.AnnInitVolume, "home"},
			mutate: func(t *Template) {
				t.Spec.SecurityContext.RunAsNonRoot = nil
				ide(t).SecurityContext.RunAsNonRoot = ptr.To(true)
			},
			want: [][]string{{"runAsNonRoot != true", `"nogoo9-init"`, "init containers nogoo9 adds inherit it"}}},
		{name: "the init container nogoo9 adds passes when the pod's securityContext is restricted", policy: def,
			ann: []string{workspace.AnnInitFrom, "configmap:seed", workspace.AnnInitVolume, "home"}},
		{name: "every violation is listed at once", policy: def,
			mutate: func(t *Template) {
				t.Spec.HostNetwork = true
				t.Spec.ServiceAccountName = "nogoo9-manager"
				t.Spec.AutomountServiceAccountToken = nil
				ide(t).SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			},
			want: [][]string{{"host namespaces"}, {"privileged"}, {"allowPrivilegeEscalation"}, {"unrestricted capabilities"},
				{"serviceAccountName"}, {"automountServiceAccountToken"}}},
		{name: "baseline refuses host namespaces", policy: baseline,
			mutate: func(t *Template) { t.Spec.HostNetwork = true },
			want:   [][]string{{"Pod Security baseline", "hostNetwork=true"}}},
		{name: "baseline allows what only restricted forbids (root, no seccomp, capabilities kept)", policy: baseline,
			mutate: func(t *Template) {
				t.Spec.SecurityContext = nil
				ide(t).SecurityContext = nil
			}},
		{name: "privileged skips Pod Security but still guards the service account and the token", policy: privileged,
			mutate: func(t *Template) {
				t.Spec.HostNetwork = true
				ide(t).SecurityContext.Privileged = ptr.To(true)
				t.Spec.ServiceAccountName = "nogoo9-manager"
				t.Spec.AutomountServiceAccountToken = nil
			},
			want: [][]string{{"serviceAccountName"}, {"automountServiceAccountToken"}}},
		// Volume claims: every workspace's claims sit in its namespace beside other users'.
		{name: "a volume naming one of the template's own claims is allowed (the spawner points it at the workspace's claim)", policy: def,
			mutate: func(t *Template) {
				t.VolumeClaims = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}}}
				t.Spec.Volumes = append(t.Spec.Volumes, pvcVolume("data", "data"))
			}},
		{name: "a volume naming another claim (another user's workspace volume) is refused, with the flag", policy: def,
			mutate: func(t *Template) {
				t.Spec.Volumes = append(t.Spec.Volumes, pvcVolume("loot", "ws-jane-example-com-demo-jtynif-home"))
			},
			want: [][]string{{"data.spec.volumes[loot].persistentVolumeClaim.claimName", `"ws-jane-example-com-demo-jtynif-home"`, "--template-allowed-claims"}}},
		{name: "an operator's allow-list admits a shared claim by name", policy: Policy{Level: LevelRestricted, Claims: []string{"datasets"}},
			mutate: func(t *Template) { t.Spec.Volumes = append(t.Spec.Volumes, pvcVolume("ds", "datasets")) }},
		{name: "a claim cloned from another claim is refused", policy: def,
			mutate: func(t *Template) {
				t.VolumeClaims = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
					Spec: corev1.PersistentVolumeClaimSpec{DataSource: &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "ws-jane-home"},
						DataSourceRef: &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "ws-jane-home"}}}}
			},
			want: [][]string{{"data.volumeClaims[data].spec.dataSource", `PersistentVolumeClaim "ws-jane-home"`, "--template-allowed-claims"}}},
		{name: "a claim restored from a snapshot on the allow-list is allowed", policy: Policy{Level: LevelRestricted, Claims: []string{"golden"}},
			mutate: func(t *Template) {
				t.VolumeClaims = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
					Spec: corev1.PersistentVolumeClaimSpec{DataSourceRef: &corev1.TypedObjectReference{Kind: "VolumeSnapshot", Name: "golden"}}}}
			}},
		{name: "a claim bound to a PersistentVolume by name is refused", policy: Policy{Level: LevelRestricted, Claims: []string{"*"}},
			mutate: func(t *Template) {
				t.VolumeClaims = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-of-someone"}}}
			},
			want: [][]string{{"data.volumeClaims[data].spec.volumeName", `"pv-of-someone"`}}},
		{name: "an ephemeral volume cloned from another claim is refused", policy: def,
			mutate: func(t *Template) {
				t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
					VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
						DataSourceRef: &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "ws-jane-home"}}}}}})
			},
			want: [][]string{{"data.spec.volumes[scratch].ephemeral.volumeClaimTemplate.spec.dataSourceRef", `"ws-jane-home"`}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := restrictedTemplate(t, tc.ann...)
			if tc.mutate != nil {
				tc.mutate(tmpl)
			}
			err := tc.policy.Check(tmpl)
			if !wantViolations(t, err, tc.want) {
				return
			}
			msg := err.Error()
			for _, w := range []string{"--template-policy=" + tc.policy.Level, "docs/templates.md"} {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

// The Pod Security part must agree with the Kubernetes evaluator kube-apiserver runs: each check
// is run on its own here (to say what to fix), and this proves the overrides are applied alike.
func TestPodSecurityAgreesWithTheKubernetesEvaluator(t *testing.T) {
	eval, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	specs := map[string]func(*corev1.PodSpec){
		"restricted": func(*corev1.PodSpec) {},
		"root":       func(s *corev1.PodSpec) { s.SecurityContext.RunAsNonRoot = nil },
		"hostPath": func(s *corev1.PodSpec) {
			s.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		},
		"capabilities": func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_RAW"}
		},
		"caps baseline+": func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		},
		"no seccomp":  func(s *corev1.PodSpec) { s.SecurityContext.SeccompProfile = nil },
		"unconfined":  func(s *corev1.PodSpec) { s.SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined },
		"hostNetwork": func(s *corev1.PodSpec) { s.HostNetwork = true },
		"nothing set": func(s *corev1.PodSpec) { s.SecurityContext, s.Containers[0].SecurityContext = nil, nil },
		"procMount":   func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.ProcMount = ptr.To(corev1.UnmaskedProcMount) },
	}
	for name, mutate := range specs {
		tmpl := restrictedTemplate(t)
		mutate(&tmpl.Spec)
		for _, level := range []string{LevelRestricted, LevelBaseline, LevelPrivileged} {
			ours := podSecurity(level, "data.spec", &tmpl.Spec)
			theirs := psapolicy.AggregateCheckResults(eval.EvaluatePod(psaapi.LevelVersion{Level: psaapi.Level(level), Version: psaapi.LatestVersion()}, &metav1.ObjectMeta{}, &tmpl.Spec))
			if len(theirs.ForbiddenReasons) != len(ours) {
				t.Errorf("%s at %s: we found %d violations %v, the Kubernetes evaluator %d: %s", name, level, len(ours), ours, len(theirs.ForbiddenReasons), theirs.ForbiddenDetail())
			}
		}
	}
}

func TestSamplesPassTheDefaultPolicy(t *testing.T) {
	got, err := LoadDir("../../config/samples")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 2 {
		t.Fatalf("want at least 2 sample templates, got %d", len(got))
	}
	for _, l := range got {
		if l.Err != nil {
			t.Errorf("sample %s (%s): %v", l.Name, l.Source, l.Err)
			continue
		}
		if err := DefaultPolicy().Check(l.Template); err != nil {
			t.Errorf("sample %s (%s) does not pass the default template policy: %v", l.Name, l.Source, err)
		}
	}
}

func TestPolicyFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		want    Policy
		wantErr string
	}{
		{name: "no flags give the default policy", want: DefaultPolicy()},
		{name: "every flag relaxes its part", args: []string{"--template-policy=baseline", "--template-allowed-service-accounts=default, builder", "--template-allow-automount-token", "--template-allowed-secrets=db,aws", "--template-allowed-claims=datasets"},
			want: Policy{Level: LevelBaseline, ServiceAccounts: []string{"default", "builder"}, AllowAutomountToken: true, Secrets: []string{"db", "aws"}, Claims: []string{"datasets"}}},
		{name: "an unknown level names the flag and the levels", args: []string{"--template-policy=strict"}, wantErr: `--template-policy="strict" is not a Pod Security level: use restricted`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			var f PolicyFlags
			f.BindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := f.Policy()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Policy() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Level != tc.want.Level || strings.Join(got.ServiceAccounts, ",") != strings.Join(tc.want.ServiceAccounts, ",") ||
				got.AllowAutomountToken != tc.want.AllowAutomountToken || strings.Join(got.Secrets, ",") != strings.Join(tc.want.Secrets, ",") ||
				strings.Join(got.Claims, ",") != strings.Join(tc.want.Claims, ",") {
				t.Errorf("Policy() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestFitEventNote(t *testing.T) {
	short := "Template x is served"
	if got := fitEventNote(short); got != short {
		t.Errorf("a short note was changed: %q", got)
	}
	long := strings.Repeat("é", 2000)
	got := fitEventNote(long)
	if len(got) > maxEventNote || !strings.HasSuffix(got, "in the template list of the API]") || !utf8.ValidString(got) {
		t.Errorf("fitEventNote gave %d bytes (valid UTF-8 %v): %q", len(got), utf8.ValidString(got), got[len(got)-100:])
	}
}

// TestPolicyRefusesPlaceholdersInIsolationFields: what isolates a workspace, who it runs as and
// where it is placed are the template's, never a spawn's: a placeholder there (${id}, ${name},
// ${context.KEY}: the caller's choice; ${owner}, ${user}, ${pod}: derived from a subject a person
// may pick) is refused at every policy level and whatever the allow-lists say, naming the field
// and the value. ${template} and ${version}, the template's own, are taken, and placeholders
// elsewhere (env, args, labels, the image) stay allowed.
func TestPolicyRefusesPlaceholdersInIsolationFields(t *testing.T) {
	def := DefaultPolicy()
	open := Policy{Level: LevelPrivileged, ServiceAccounts: []string{"*"}, Secrets: []string{"*"}, Claims: []string{"*"}, AllowAutomountToken: true}
	localhost := func(p string) *corev1.SeccompProfile {
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To(p)}
	}
	selector := func(v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": v}}
	}
	tests := []struct {
		name   string
		policy Policy
		ann    []string
		mutate func(t *Template)
		// want: one group of substrings per expected violation; empty: allowed.
		want [][]string
	}{
		{name: "the audit's template: runtime class, priority class and a Localhost seccomp profile from the context", policy: def,
			mutate: func(t *Template) {
				t.Spec.RuntimeClassName = ptr.To("${context.rt}")
				t.Spec.PriorityClassName = "${context.pc}"
				t.Spec.SecurityContext.SeccompProfile = localhost("${context.sp}")
			},
			want: [][]string{
				{"data.spec.runtimeClassName", `"${context.rt}"`, "${context.rt}", "write the value in the template"},
				{"data.spec.priorityClassName", `"${context.pc}"`},
				{"data.spec.securityContext.seccompProfile.localhostProfile", `"${context.sp}"`}}},
		{name: "placement: schedulerName, preemptionPolicy, nodeSelector, affinity, tolerations, topology spread", policy: def,
			mutate: func(t *Template) {
				t.Spec.SchedulerName = "${id}"
				t.Spec.PreemptionPolicy = ptr.To(corev1.PreemptionPolicy("${context.p}"))
				t.Spec.NodeSelector = map[string]string{"pool": "${context.pool}"}
				t.Spec.Affinity = &corev1.Affinity{
					NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"${context.node}"}}}}}}},
					PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: selector("${user}"), TopologyKey: "kubernetes.io/hostname"}}},
				}
				t.Spec.Tolerations = []corev1.Toleration{{Key: "${context.k}", Operator: corev1.TolerationOpExists}, {Key: "dedicated", Value: "${name}", Effect: "${context.e}"}}
				t.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: selector("${owner}")}}
			},
			want: [][]string{
				{"data.spec.schedulerName", `"${id}"`},
				{"data.spec.preemptionPolicy", `"${context.p}"`},
				{"data.spec.nodeSelector.pool", `"${context.pool}"`},
				{"data.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]", `"${context.node}"`},
				{"data.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchLabels.app", `"${user}"`, "matchLabelKeys"},
				{"data.spec.tolerations[0].key", `"${context.k}"`},
				{"data.spec.tolerations[1].effect", `"${context.e}"`},
				{"data.spec.tolerations[1].value", `"${name}"`},
				{"data.spec.topologySpreadConstraints[0].labelSelector.matchLabels.app", `"${owner}"`}}},
		{name: "isolation: container securityContext (AppArmor, SELinux, Windows user), pod SELinux and sysctls, at the privileged level too", policy: open,
			mutate: func(t *Template) {
				ide(t).SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("${context.aa}")}
				ide(t).SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "${pod}"}
				ide(t).SecurityContext.WindowsOptions = &corev1.WindowsSecurityContextOptions{RunAsUserName: ptr.To("${context.u}")}
				t.Spec.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Level: "s0:${context.mcs}"}
				t.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "${context.port}"}}
			},
			want: [][]string{
				{"data.spec.containers[ide].securityContext.appArmorProfile.localhostProfile", `"${context.aa}"`},
				{"data.spec.containers[ide].securityContext.seLinuxOptions.type", `"${pod}"`},
				{"data.spec.containers[ide].securityContext.windowsOptions.runAsUserName", `"${context.u}"`},
				{"data.spec.securityContext.seLinuxOptions.level", `"s0:${context.mcs}"`},
				{"data.spec.securityContext.sysctls[0].value", `"${context.port}"`}}},
		{name: "identity: a service account, Secrets and claims the operator allows with * still cannot be the caller's choice", policy: open,
			mutate: func(t *Template) {
				t.Spec.ServiceAccountName = "${context.sa}"
				t.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "${context.pull}"}}
				t.Spec.Volumes = append(t.Spec.Volumes,
					corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "${context.s}"}}},
					pvcVolume("loot", "${context.claim}"),
					corev1.Volume{Name: "tok", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
						{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "${context.aud}", Path: "t"}}}}}})
				ide(t).Env = []corev1.EnvVar{{Name: "T", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "api"}, Key: "${context.key}"}}}}
				ide(t).EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "${id}-creds"}}}}
			},
			want: [][]string{
				{"data.spec.serviceAccountName", `"${context.sa}"`},
				{"data.spec.imagePullSecrets[0].name", `"${context.pull}"`},
				{"data.spec.volumes[creds].secret.secretName", `"${context.s}"`},
				{"data.spec.volumes[loot].persistentVolumeClaim.claimName", `"${context.claim}"`},
				{"data.spec.volumes[tok].projected.sources[0].serviceAccountToken.audience", `"${context.aud}"`},
				{"data.spec.containers[ide].env[T].valueFrom.secretKeyRef.key", `"${context.key}"`},
				{"data.spec.containers[ide].envFrom[0].secretRef.name", `"${id}-creds"`}}},
		{name: "volume sources that reach outside the pod: a CSI driver's attributes, hostPath, NFS; a claim's source", policy: open,
			mutate: func(t *Template) {
				t.Spec.Volumes = append(t.Spec.Volumes,
					corev1.Volume{Name: "kv", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "secrets-store.csi.k8s.io", VolumeAttributes: map[string]string{"secretProviderClass": "${context.spc}"}}}},
					corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/home/${user}"}}},
					corev1.Volume{Name: "share", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/exports/${context.team}"}}})
				t.VolumeClaims = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
					Spec: corev1.PersistentVolumeClaimSpec{DataSourceRef: &corev1.TypedObjectReference{Kind: "VolumeSnapshot", Name: "${context.snap}"}}}}
			},
			want: [][]string{
				{"data.spec.volumes[kv].csi.volumeAttributes.secretProviderClass", `"${context.spc}"`},
				{"data.spec.volumes[host].hostPath.path", `"/home/${user}"`},
				{"data.spec.volumes[share].nfs.path", `"/exports/${context.team}"`},
				{"data.volumeClaims[data].spec.dataSourceRef.name", `"${context.snap}"`}}},
		{name: "devices: a pod resource claim", policy: def,
			mutate: func(t *Template) {
				t.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("${context.gpu}")}}
			},
			want: [][]string{{"data.spec.resourceClaims[0].resourceClaimName", `"${context.gpu}"`}}},
		{name: "the init container's image and S3 endpoint, which run with and receive nogoo9/init-secret", policy: Policy{Level: LevelRestricted, ServiceAccounts: []string{"default"}, Secrets: []string{"s3-creds"}},
			ann: []string{workspace.AnnInitFrom, "s3://seeds/${context.project}/", workspace.AnnInitVolume, "home", workspace.AnnInitSecret, "s3-creds",
				workspace.AnnInitImage, "ghcr.io/${id}/seed:1", workspace.AnnInitS3Endpoint, "https://${context.host}"},
			want: [][]string{
				{"annotation nogoo9/init-image", `"ghcr.io/${id}/seed:1"`, "${id}"},
				{"annotation nogoo9/init-s3-endpoint", `"https://${context.host}"`}}},
		{name: "${template} and ${version} are the template's own and taken", policy: def,
			ann: []string{workspace.AnnInitFrom, "configmap:seed", workspace.AnnInitVolume, "home", workspace.AnnInitImage, "registry/${template}-seed:${version}"},
			mutate: func(t *Template) {
				t.Spec.PriorityClassName = "${template}-${version}"
				t.Spec.NodeSelector = map[string]string{"pool": "$${not-a-placeholder}"}
			}},
		{name: "placeholders where a workspace's own values belong stay allowed", policy: def,
			mutate: func(t *Template) {
				ide(t).Image = "ide:${context.tag}"
				ide(t).Args = []string{"--user", "${user}"}
				ide(t).Env = []corev1.EnvVar{{Name: "REPO", Value: "${context.repo}"}}
				t.Spec.Hostname = "${id}"
				t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: "dots", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "dots-${user}"}}}})
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := restrictedTemplate(t, tc.ann...)
			if tc.mutate != nil {
				tc.mutate(tmpl)
			}
			err := tc.policy.Check(tmpl)
			wantViolations(t, err, tc.want)
		})
	}
}
