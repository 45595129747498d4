package templates

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// The template policy. A workspace pod is created by nogoo9's service account, not by the person
// who wrote the template, so user-based admission never sees that person: whatever a template
// asks for, nogoo9 would create. The policy is what a template may ask for, checked when the
// template is decoded (an offending version is not served; the last valid one keeps serving).
//
// The Pod Security part is evaluated by the Kubernetes project's own implementation
// (k8s.io/pod-security-admission), the code kube-apiserver runs for the
// pod-security.kubernetes.io/enforce namespace label, so a template that passes here also passes
// the API server in a namespace labelled with the same level.

// Pod Security levels a policy can require (the Kubernetes Pod Security Standards).
const (
	LevelRestricted = string(psaapi.LevelRestricted)
	LevelBaseline   = string(psaapi.LevelBaseline)
	LevelPrivileged = string(psaapi.LevelPrivileged)
)

// initContainerName is the init container the spawner adds for nogoo9/init-from (spawner's
// InitContainerName; a test renders pods with the spawner to keep the two in step).
const initContainerName = "nogoo9-init"

// Policy says what a template's pod may ask for. The zero value is not usable: start from
// DefaultPolicy.
type Policy struct {
	// Level is the Pod Security Standard the pod must fit: LevelRestricted, LevelBaseline or
	// LevelPrivileged (no Pod Security check).
	Level string
	// ServiceAccounts a template may name in serviceAccountName; an unset name (the namespace's
	// "default") is always allowed. "*" allows any.
	ServiceAccounts []string
	// AllowAutomountToken lets a template leave automountServiceAccountToken unset or true and
	// project service-account tokens into volumes. Without it the pod carries no API credential.
	AllowAutomountToken bool
	// Secrets a template may reference (secret volumes and projections, env and envFrom, the
	// nogoo9/init-secret annotation). "*" allows any. A pod can read every Secret of its
	// namespace it names, and nogoo9 (which may not read Secrets itself) creates it, so a
	// template would otherwise hand out Secrets its author cannot read.
	Secrets []string
	// Claims are PersistentVolumeClaims, other than the template's own volumeClaims, that a
	// template may mount (persistentVolumeClaim volumes), or clone or restore its claims from
	// (dataSource, dataSourceRef: a claim or a VolumeSnapshot of that name). "*" allows any.
	// Every workspace's own claims live in its namespace beside everyone else's, and nogoo9
	// creates the pod, so a template would otherwise hand one user another's volume.
	Claims []string
}

// DefaultPolicy is what nogoo9 enforces without flags: Pod Security "restricted", no service
// account but "default", no API token in the pod, no Secrets.
func DefaultPolicy() Policy {
	return Policy{Level: LevelRestricted, ServiceAccounts: []string{"default"}}
}

// Violation is one setting of a template the policy does not allow.
type Violation struct {
	// Field is where it is, e.g. data.spec.serviceAccountName.
	Field string
	// Problem says what is wrong, with the value.
	Problem string
	// Fix says what to do.
	Fix string
}

func (v Violation) String() string {
	return v.Field + ": " + v.Problem + ". Fix: " + v.Fix + "."
}

// PolicyError lists every violation of one template (or pod) against the policy.
type PolicyError struct {
	Level      string
	Violations []Violation
}

func (e *PolicyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the template policy (--template-policy=%s) refuses %d %s: ", e.Level, len(e.Violations), plural(len(e.Violations), "setting", "settings"))
	for i, v := range e.Violations {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "(%d) %s", i+1, v)
	}
	b.WriteString(" Fix the template, or ask the operator to relax the policy (docs/templates.md, \"Template policy\").")
	return b.String()
}

// Summary lists every violation without the fixes, short enough for an Event.
func (e *PolicyError) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the template policy (--template-policy=%s) refuses %d %s (nogoo9's log and the template list say how to fix each):", e.Level, len(e.Violations), plural(len(e.Violations), "setting", "settings"))
	for i, v := range e.Violations {
		fmt.Fprintf(&b, " (%d) %s: %s", i+1, v.Field, strings.TrimPrefix(v.Problem, "Pod Security "+e.Level+": "))
	}
	return b.String()
}

// Validate checks the policy itself: a bad level is a start-up error naming the flag.
func (p Policy) Validate() error {
	switch p.Level {
	case LevelRestricted, LevelBaseline, LevelPrivileged:
	default:
		return fmt.Errorf("--template-policy=%q is not a Pod Security level: use restricted (the default), baseline or privileged", p.Level)
	}
	return nil
}

// Check returns a *PolicyError listing every setting of t the policy refuses, or nil. It checks
// the pod as nogoo9 renders it: with the nogoo9-init container the spawner adds for
// nogoo9/init-from, which inherits the pod's securityContext.
func (p Policy) Check(t *Template) error {
	spec := t.Spec.DeepCopy()
	var vs []Violation
	exp, err := t.Expansion()
	if err == nil && exp.Init != nil {
		spec.InitContainers = append([]corev1.Container{{Name: initContainerName, Image: exp.Init.Image, SecurityContext: InitContainerSecurityContext()}}, spec.InitContainers...)
		if exp.Init.Secret != "" && !allowed(p.Secrets, exp.Init.Secret) {
			vs = append(vs, Violation{
				Field:   "annotation " + workspace.AnnInitSecret,
				Problem: fmt.Sprintf("names Secret %q, %s", exp.Init.Secret, allowedList("Secrets", p.Secrets)),
				Fix:     "remove it, or ask the operator to add it to --template-allowed-secrets",
			})
		}
	}
	vs = append(vs, checkInitPlaceholders(t)...)
	for _, v := range p.checkSpec("data."+workspace.DataSpec, spec) {
		// The image of the init container nogoo9 adds is nogoo9/init-image, whose placeholders
		// checkInitPlaceholders reports under the annotation's name.
		if exp != nil && exp.Init != nil && v.Field == "data."+workspace.DataSpec+".initContainers["+initContainerName+"].image" {
			continue
		}
		vs = append(vs, v)
	}
	vs = append(vs, p.checkClaims(t)...)
	if len(vs) == 0 {
		return nil
	}
	return &PolicyError{Level: p.Level, Violations: vs}
}

// CheckPod applies the policy's pod-spec rules to a rendered pod: a *PolicyError listing every
// violation, or nil. The tests hold every sample, rendered by the spawner, to it. nogoo9 itself
// checks templates when they load (Check); the pods it copies (a stopped copy, a rollback spec it
// signed) keep the spec they were created with, so a tightened policy applies to the next
// template version, not to workspaces already created (docs/templates.md).
func (p Policy) CheckPod(pod *corev1.Pod) error {
	if vs := p.checkSpec("spec", &pod.Spec); len(vs) > 0 {
		return &PolicyError{Level: p.Level, Violations: vs}
	}
	return nil
}

// InitContainerSecurityContext is the container securityContext of the init container nogoo9
// adds for nogoo9/init-from. Together with the pod's own securityContext (runAsNonRoot,
// seccompProfile), which it inherits, it fits the restricted Pod Security Standard.
func InitContainerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

func (p Policy) checkSpec(at string, spec *corev1.PodSpec) []Violation {
	var vs []Violation
	for _, f := range []struct{ name, value string }{{"serviceAccountName", spec.ServiceAccountName}, {"serviceAccount", spec.DeprecatedServiceAccount}} {
		if f.value != "" && !allowed(p.ServiceAccounts, f.value) && callerPlaceholders(f.value) == nil {
			vs = append(vs, Violation{
				Field:   at + "." + f.name,
				Problem: fmt.Sprintf("service account %q is not allowed: %s", f.value, allowedList("service accounts", p.ServiceAccounts)),
				Fix:     "remove it (the pod then runs as \"default\"), or ask the operator to add it to --template-allowed-service-accounts",
			})
		}
	}
	if !p.AllowAutomountToken {
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			value := "unset, which Kubernetes treats as true"
			if spec.AutomountServiceAccountToken != nil {
				value = "true"
			}
			vs = append(vs, Violation{
				Field:   at + ".automountServiceAccountToken",
				Problem: value + ": the pod would carry an API token of its service account",
				Fix:     "set \"automountServiceAccountToken\": false, or ask the operator for --template-allow-automount-token",
			})
		}
		for _, v := range spec.Volumes {
			if v.Projected == nil {
				continue
			}
			for i, s := range v.Projected.Sources {
				if s.ServiceAccountToken != nil {
					vs = append(vs, Violation{
						Field:   fmt.Sprintf("%s.volumes[%s].projected.sources[%d].serviceAccountToken", at, v.Name, i),
						Problem: "projects an API token of the pod's service account",
						Fix:     "remove it, or ask the operator for --template-allow-automount-token",
					})
				}
			}
		}
	}
	if len(spec.EphemeralContainers) > 0 {
		vs = append(vs, Violation{
			Field:   at + ".ephemeralContainers",
			Problem: fmt.Sprintf("%d ephemeral containers: the API server refuses them in a new pod", len(spec.EphemeralContainers)),
			Fix:     "remove ephemeralContainers (add debug containers with kubectl debug instead)",
		})
	}
	if spec.NodeName != "" {
		vs = append(vs, Violation{
			Field:   at + ".nodeName",
			Problem: fmt.Sprintf("%q places the pod on a node without the scheduler: it skips taints and the node's room, and the API server refuses it beside the scheduling gate of a Recreate upgrade", spec.NodeName),
			Fix:     "remove nodeName and choose nodes with nodeSelector or affinity",
		})
	}
	for i, g := range spec.SchedulingGates {
		// nogoo9's gates mean something to nogoo9: a pod born with nogoo9/stopped looks like a
		// stopped workspace, one with nogoo9/volume-release like a Recreate upgrade's new pod. A
		// placeholder could become one (the caller chooses a context value).
		if strings.HasPrefix(g.Name, workspace.Prefix) || strings.Contains(g.Name, "${") {
			vs = append(vs, Violation{
				Field:   fmt.Sprintf("%s.schedulingGates[%d].name", at, i),
				Problem: fmt.Sprintf("%q is, or could expand to, a gate of nogoo9's own (prefix %q), which nogoo9 adds and removes itself: a pod born with it looks stopped or mid-upgrade to nogoo9", g.Name, workspace.Prefix),
				Fix:     "remove it; a gate of another controller is allowed, written in full, outside the " + workspace.Prefix + " prefix",
			})
		}
	}
	vs = append(vs, checkPlaceholders(at, spec)...)
	vs = append(vs, p.checkSecrets(at, spec)...)
	return append(vs, podSecurity(p.Level, at, spec)...)
}

// checkSecrets reports every Secret the spec names that the policy does not allow.
// imagePullSecrets are not counted: the kubelet uses them to pull and never shows them to the
// pod.
func (p Policy) checkSecrets(at string, spec *corev1.PodSpec) []Violation {
	if allowed(p.Secrets, "*") {
		return nil
	}
	var vs []Violation
	refuse := func(field, name string) {
		// A name holding a caller placeholder is checkPlaceholders' violation.
		if !allowed(p.Secrets, name) && callerPlaceholders(name) == nil {
			vs = append(vs, Violation{
				Field:   field,
				Problem: fmt.Sprintf("names Secret %q, %s", name, allowedList("Secrets", p.Secrets)),
				Fix:     "remove it, or ask the operator to add it to --template-allowed-secrets",
			})
		}
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			refuse(fmt.Sprintf("%s.volumes[%s].secret.secretName", at, v.Name), v.Secret.SecretName)
		}
		// Volume plugins the kubelet hands a Secret to (a CSI driver's credentials, an in-tree
		// plugin's): the pod gets whatever the Secret unlocks.
		for _, ref := range volumeSecretRefs(v) {
			refuse(fmt.Sprintf("%s.volumes[%s].%s", at, v.Name, ref.field), ref.name)
		}
		if v.Projected != nil {
			for i, s := range v.Projected.Sources {
				if s.Secret != nil {
					refuse(fmt.Sprintf("%s.volumes[%s].projected.sources[%d].secret.name", at, v.Name, i), s.Secret.Name)
				}
			}
		}
	}
	visit := func(kind string, cs []corev1.Container) {
		for _, c := range cs {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					refuse(fmt.Sprintf("%s.%s[%s].env[%s].valueFrom.secretKeyRef.name", at, kind, c.Name, e.Name), e.ValueFrom.SecretKeyRef.Name)
				}
			}
			for i, e := range c.EnvFrom {
				if e.SecretRef != nil {
					refuse(fmt.Sprintf("%s.%s[%s].envFrom[%d].secretRef.name", at, kind, c.Name, i), e.SecretRef.Name)
				}
			}
		}
	}
	visit("initContainers", spec.InitContainers)
	visit("containers", spec.Containers)
	return vs
}

type secretRef struct{ field, name string }

// volumeSecretRefs are the Secrets volume v hands its plugin, other than secret volumes and
// projections: a CSI driver's nodePublishSecretRef and the in-tree plugins' secretRef fields.
func volumeSecretRefs(v corev1.Volume) []secretRef {
	var refs []secretRef
	local := func(field string, r *corev1.LocalObjectReference) {
		if r != nil {
			refs = append(refs, secretRef{field, r.Name})
		}
	}
	if v.CSI != nil {
		local("csi.nodePublishSecretRef.name", v.CSI.NodePublishSecretRef)
	}
	if v.CephFS != nil {
		local("cephfs.secretRef.name", v.CephFS.SecretRef)
	}
	if v.RBD != nil {
		local("rbd.secretRef.name", v.RBD.SecretRef)
	}
	if v.ISCSI != nil {
		local("iscsi.secretRef.name", v.ISCSI.SecretRef)
	}
	if v.FlexVolume != nil {
		local("flexVolume.secretRef.name", v.FlexVolume.SecretRef)
	}
	if v.ScaleIO != nil {
		local("scaleIO.secretRef.name", v.ScaleIO.SecretRef)
	}
	if v.StorageOS != nil {
		local("storageos.secretRef.name", v.StorageOS.SecretRef)
	}
	if v.AzureFile != nil && v.AzureFile.SecretName != "" {
		refs = append(refs, secretRef{"azureFile.secretName", v.AzureFile.SecretName})
	}
	return refs
}

// checkClaims reports every volume claim t uses that is not its own: a persistentVolumeClaim
// volume naming another claim, a claim (its own, or an ephemeral volume's) cloned or restored from
// a source not on Claims, or bound to a PersistentVolume by name.
func (p Policy) checkClaims(t *Template) []Violation {
	var vs []Violation
	own := map[string]bool{}
	for _, c := range t.VolumeClaims {
		own[c.Name] = true
	}
	fix := "remove it, or ask the operator to add it to --template-allowed-claims"
	// A name holding a caller placeholder is a placeholder's violation (checkPlaceholders and
	// claimSourcePlaceholders): no allow-list can hold it.
	listed := func(name string) bool { return allowed(p.Claims, name) || callerPlaceholders(name) != nil }
	source := func(field string, spec *corev1.PersistentVolumeClaimSpec) {
		if spec.VolumeName != "" && callerPlaceholders(spec.VolumeName) == nil {
			vs = append(vs, Violation{
				Field:   field + ".volumeName",
				Problem: fmt.Sprintf("binds the claim to PersistentVolume %q, which may hold another workspace's data", spec.VolumeName),
				Fix:     "remove volumeName and let the storage class provision a volume",
			})
		}
		if d := spec.DataSource; d != nil && !listed(d.Name) {
			vs = append(vs, Violation{
				Field:   field + ".dataSource",
				Problem: fmt.Sprintf("fills the claim from %s %q, %s", d.Kind, d.Name, allowedList("claim sources", p.Claims)),
				Fix:     fix,
			})
		}
		if d := spec.DataSourceRef; d != nil && !listed(d.Name) && (spec.DataSource == nil || spec.DataSource.Name != d.Name) {
			vs = append(vs, Violation{
				Field:   field + ".dataSourceRef",
				Problem: fmt.Sprintf("fills the claim from %s %q, %s", d.Kind, d.Name, allowedList("claim sources", p.Claims)),
				Fix:     fix,
			})
		}
	}
	for _, v := range t.Spec.Volumes {
		if c := v.PersistentVolumeClaim; c != nil && !own[c.ClaimName] && !listed(c.ClaimName) {
			vs = append(vs, Violation{
				Field:   fmt.Sprintf("data.%s.volumes[%s].persistentVolumeClaim.claimName", workspace.DataSpec, v.Name),
				Problem: fmt.Sprintf("mounts claim %q, which is not one of the template's volumeClaims (each workspace gets its own) %s", c.ClaimName, allowedList("other claims", p.Claims)),
				Fix:     "name one of the template's volumeClaims, or ask the operator to add the claim to --template-allowed-claims",
			})
		}
		if e := v.Ephemeral; e != nil && e.VolumeClaimTemplate != nil {
			source(fmt.Sprintf("data.%s.volumes[%s].ephemeral.volumeClaimTemplate.spec", workspace.DataSpec, v.Name), &e.VolumeClaimTemplate.Spec)
		}
	}
	for _, c := range t.VolumeClaims {
		at := fmt.Sprintf("data.%s[%s].spec", workspace.DataVolumeClaims, c.Name)
		source(at, &c.Spec)
		vs = append(vs, claimSourcePlaceholders(at, &c.Spec)...)
	}
	return vs
}

// psaChecks are the Kubernetes Pod Security checks, evaluated at their newest version.
var psaChecks = psapolicy.DefaultChecks()

// podSecurity evaluates spec against the Pod Security Standard level, one Violation per failed
// check. It runs each check of k8s.io/pod-security-admission on its own, as that package's
// evaluator does (baseline checks, plus restricted ones at restricted, minus the baseline checks a
// restricted check overrides), so that each failure can say what to do.
func podSecurity(level, at string, spec *corev1.PodSpec) []Violation {
	if level == LevelPrivileged {
		return nil
	}
	overridden := map[psapolicy.CheckID]bool{}
	if level == LevelRestricted {
		for _, c := range psaChecks {
			if c.Level == psaapi.LevelRestricted {
				for _, id := range c.Versions[len(c.Versions)-1].OverrideCheckIDs {
					overridden[id] = true
				}
			}
		}
	}
	meta := &metav1.ObjectMeta{}
	var vs []Violation
	for _, c := range psaChecks {
		if overridden[c.ID] || (c.Level == psaapi.LevelRestricted && level != LevelRestricted) {
			continue
		}
		r := c.Versions[len(c.Versions)-1].CheckPod(meta, spec)
		if r.Allowed {
			continue
		}
		problem := r.ForbiddenReason
		if r.ForbiddenDetail != "" {
			problem += ": " + r.ForbiddenDetail
		}
		vs = append(vs, Violation{Field: at, Problem: "Pod Security " + level + ": " + problem, Fix: psaFix(c.ID)})
	}
	return vs
}

// psaFix says what to do about a failed Pod Security check.
func psaFix(id psapolicy.CheckID) string {
	switch id {
	case "allowPrivilegeEscalation":
		return `set "allowPrivilegeEscalation": false in the securityContext of every container and init container`
	case "capabilities_restricted":
		return `set "capabilities": {"drop": ["ALL"]} in the securityContext of every container and init container; add back at most NET_BIND_SERVICE`
	case "capabilities_baseline":
		return "remove capabilities.add beyond the runtime's defaults"
	case "runAsNonRoot":
		return `set "runAsNonRoot": true in the pod's securityContext (init containers nogoo9 adds inherit it), with a non-zero runAsUser if the image's user is root`
	case "runAsUser":
		return "do not set runAsUser to 0: run as a non-root user"
	case "seccompProfile_restricted", "seccompProfile_baseline":
		return `set "seccompProfile": {"type": "RuntimeDefault"} in the pod's securityContext (init containers nogoo9 adds inherit it)`
	case "hostNamespaces":
		return "remove hostNetwork, hostPID and hostIPC"
	case "hostPathVolumes", "restrictedVolumes":
		return "use only configMap, csi, downwardAPI, emptyDir, ephemeral, image, persistentVolumeClaim, projected or secret volumes (data.volumeClaims for storage); never hostPath"
	case "hostPorts":
		return "remove hostPort from the container ports: the proxy reaches the pod on its containerPort"
	case "privileged":
		return `remove "privileged": true`
	case "procMount", "procMount_restricted":
		return "remove procMount"
	case "seLinuxOptions":
		return "remove seLinuxOptions.user and role, and use a container SELinux type (container_t) or none"
	case "sysctls":
		return "remove sysctls outside the Pod Security safe set"
	case "appArmorProfile":
		return "use AppArmor profile RuntimeDefault or Localhost, or none"
	case "hostProbesAndHostLifecycle":
		return "remove the host field of probes and lifecycle handlers"
	case "windowsHostProcess":
		return "remove windowsOptions.hostProcess"
	}
	return "see the Kubernetes Pod Security Standards for " + string(id)
}

func allowed(list []string, name string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, name)
}

func allowedList(what string, list []string) string {
	if len(list) == 0 {
		return "and the policy allows none"
	}
	quoted := make([]string, len(list))
	for i, s := range list {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	return "and the policy allows only " + strings.Join(quoted, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// PolicyFlags binds the template-policy flags; Policy turns them into a checked Policy.
type PolicyFlags struct {
	level, serviceAccounts, secrets, claims string
	automount                               bool
}

// BindFlags registers --template-policy, --template-allowed-service-accounts,
// --template-allow-automount-token, --template-allowed-secrets and --template-allowed-claims.
func (f *PolicyFlags) BindFlags(fs *flag.FlagSet) {
	d := DefaultPolicy()
	fs.StringVar(&f.level, "template-policy", d.Level, "Pod Security level every template's pod must fit: restricted, baseline or privileged (no check). See docs/templates.md.")
	fs.StringVar(&f.serviceAccounts, "template-allowed-service-accounts", strings.Join(d.ServiceAccounts, ","), "Comma-separated service accounts a template may name in serviceAccountName (* for any); an unset name is always allowed.")
	fs.BoolVar(&f.automount, "template-allow-automount-token", d.AllowAutomountToken, "Let templates mount an API token of their service account (automountServiceAccountToken unset or true, projected tokens).")
	fs.StringVar(&f.secrets, "template-allowed-secrets", strings.Join(d.Secrets, ","), "Comma-separated Secrets a template may reference in volumes, env, envFrom or nogoo9/init-secret (* for any).")
	fs.StringVar(&f.claims, "template-allowed-claims", strings.Join(d.Claims, ","), "Comma-separated PersistentVolumeClaims, besides its own volumeClaims, a template may mount, or clone its claims from (dataSource: a claim or VolumeSnapshot of that name; * for any).")
}

// Policy returns the policy the flags describe, or an error naming the flag to fix.
func (f *PolicyFlags) Policy() (Policy, error) {
	p := Policy{Level: strings.TrimSpace(f.level), ServiceAccounts: splitList(f.serviceAccounts), AllowAutomountToken: f.automount, Secrets: splitList(f.secrets), Claims: splitList(f.claims)}
	return p, p.Validate()
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Placeholders in fields a spawn must not choose. A placeholder's value is the caller's choice
// (${id}, ${name}, ${context.KEY}) or derives from the owner's subject, which a person often
// picks (${owner}, ${user}, ${pod}: a GitHub login, an email address). In the fields below it
// would let whoever spawns decide the pod's isolation, identity or placement, so the policy
// refuses it there at every level and whatever the allow-lists say ("*" lets template authors
// name any Secret, not callers). Only the template's own ${template} and ${version} are taken.
// The same holds for what runs with a Secret (the image, command, args, exec probes and hooks of
// a container that gets one: runsWithSecret) and for every init container's image.
// The spawner holds the init container's image and S3 endpoint to the same rule at spawn time.

// callerPlaceholders are the placeholders in s other than ${template} and ${version}, read as
// the spawner expands them ("$${" is a literal "${"; an unclosed one is the spawn's error).
func callerPlaceholders(s string) []string {
	var names []string
	for _, name := range placeholderNames(s) {
		if name != "template" && name != "version" {
			names = append(names, "${"+name+"}")
		}
	}
	return names
}

// What a placeholder in each kind of field would hand the caller.
const (
	whyIsolation = "it decides how the pod is isolated (runtime, security profiles, SELinux, sysctls, users)"
	whyPlacement = "it decides which nodes the pod runs on, beside which pods and before whom"
	whyIdentity  = "it decides which identity and credentials the pod gets"
	whyData      = "it decides which storage outside the workspace the pod reaches"
	whyDevices   = "it decides which devices the pod gets"
	whyInit      = "the init container runs with nogoo9/init-secret in its environment"
	// whyInitImage: an init container's image is what prepares the workspace.
	whyInitImage = "an init container runs before the workspace, on its volumes and with the pod's identity, so the caller would choose the program that prepares them"
)

// Fixes of a placeholder in what runs in a container that gets a Secret.
const (
	imageFix   = "write the image in the template (only ${template} and ${version} may stand in it), or give the Secret to a container whose image the template fixes (docs/templates.md, \"Placeholders\")"
	commandFix = "write the value in the template, or pass the caller's value in an environment variable (env[].value) and have the program read it from there as data, not through $(VAR) in command or args; only ${template} and ${version} may stand here (docs/templates.md, \"Placeholders\")"
)

const placeholderFix = "write the value in the template; only ${template} and ${version} may stand here (docs/templates.md, \"Placeholders\")"

// placeholderViolation is the violation of a value at field holding caller placeholders, if any.
func placeholderViolation(field, value, why string) (Violation, bool) {
	names := callerPlaceholders(value)
	if len(names) == 0 {
		return Violation{}, false
	}
	fix := placeholderFix
	if strings.Contains(field, "labelSelector") {
		fix += "; to spread or group a user's or a workspace's pods, use matchLabelKeys (such as [\"" + workspace.LabelUserSub + "\"]) instead of a placeholder"
	}
	return Violation{
		Field:   field,
		Problem: fmt.Sprintf("%s holds %s, which the caller of a spawn would choose, and %s", workspace.Quote(value), strings.Join(names, ", "), why),
		Fix:     fix,
	}, true
}

// placeholdersIn reports every string of node (marshalled as JSON; map keys are never expanded,
// so only values count) holding a caller placeholder, with its field below at.
func placeholdersIn(at string, node any, why string) []Violation {
	raw, err := json.Marshal(node)
	if err != nil || !bytes.Contains(raw, []byte("${")) {
		return nil
	}
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		return nil
	}
	var vs []Violation
	_ = walkStrings(at, tree, func(path, s string) error {
		if v, ok := placeholderViolation(path, s, why); ok {
			vs = append(vs, v)
		}
		return nil
	})
	return vs
}

// checkPlaceholders reports the caller placeholders in the fields of spec that decide the pod's
// isolation, identity, placement, devices and the storage it reaches beyond its own claims. The
// Secret and claim references are checked here too; checkSecrets and checkClaims leave a name
// holding a caller placeholder to this check (it is no name an allow-list can hold).
func checkPlaceholders(at string, spec *corev1.PodSpec) []Violation {
	var vs []Violation
	add := func(field string, node any, why string) {
		vs = append(vs, placeholdersIn(field, node, why)...)
	}
	// Identity.
	add(at+".serviceAccountName", spec.ServiceAccountName, whyIdentity)
	add(at+".serviceAccount", spec.DeprecatedServiceAccount, whyIdentity)
	add(at+".imagePullSecrets", spec.ImagePullSecrets, whyIdentity)
	// Isolation.
	add(at+".runtimeClassName", spec.RuntimeClassName, whyIsolation)
	add(at+".securityContext", spec.SecurityContext, whyIsolation)
	// Placement.
	add(at+".nodeSelector", spec.NodeSelector, whyPlacement)
	add(at+".affinity", spec.Affinity, whyPlacement)
	add(at+".tolerations", spec.Tolerations, whyPlacement)
	add(at+".topologySpreadConstraints", spec.TopologySpreadConstraints, whyPlacement)
	add(at+".schedulerName", spec.SchedulerName, whyPlacement)
	add(at+".priorityClassName", spec.PriorityClassName, whyPlacement)
	add(at+".preemptionPolicy", spec.PreemptionPolicy, whyPlacement)
	// Devices.
	add(at+".resourceClaims", spec.ResourceClaims, whyDevices)

	secretVolumes := secretVolumes(spec)
	containers := func(kind string, cs []corev1.Container) {
		for _, c := range cs {
			cat := fmt.Sprintf("%s.%s[%s]", at, kind, c.Name)
			add(cat+".securityContext", c.SecurityContext, whyIsolation)
			if secret := containerSecret(&c, secretVolumes); secret != "" {
				vs = append(vs, runsWithSecret(cat, &c, secret)...)
			} else if kind == "initContainers" {
				add(cat+".image", c.Image, whyInitImage)
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil {
					add(fmt.Sprintf("%s.env[%s].valueFrom.secretKeyRef", cat, e.Name), e.ValueFrom.SecretKeyRef, whyIdentity)
				}
			}
			for i, e := range c.EnvFrom {
				add(fmt.Sprintf("%s.envFrom[%d].secretRef", cat, i), e.SecretRef, whyIdentity)
			}
		}
	}
	containers("initContainers", spec.InitContainers)
	containers("containers", spec.Containers)
	ephemeral := make([]corev1.Container, len(spec.EphemeralContainers))
	for i, c := range spec.EphemeralContainers {
		ephemeral[i] = corev1.Container(c.EphemeralContainerCommon)
	}
	containers("ephemeralContainers", ephemeral)

	for _, v := range spec.Volumes {
		vat := fmt.Sprintf("%s.volumes[%s]", at, v.Name)
		if v.Secret != nil {
			add(vat+".secret.secretName", v.Secret.SecretName, whyIdentity)
		}
		if v.PersistentVolumeClaim != nil {
			add(vat+".persistentVolumeClaim.claimName", v.PersistentVolumeClaim.ClaimName, whyData)
		}
		if v.Projected != nil {
			for i, s := range v.Projected.Sources {
				add(fmt.Sprintf("%s.projected.sources[%d].secret", vat, i), s.Secret, whyIdentity)
				add(fmt.Sprintf("%s.projected.sources[%d].serviceAccountToken", vat, i), s.ServiceAccountToken, whyIdentity)
			}
		}
		if e := v.Ephemeral; e != nil && e.VolumeClaimTemplate != nil {
			vs = append(vs, claimSourcePlaceholders(vat+".ephemeral.volumeClaimTemplate.spec", &e.VolumeClaimTemplate.Spec)...)
		}
		// CSI drivers (what their attributes and Secret unlock is the driver's) and every volume
		// type Pod Security "restricted" forbids (hostPath, nfs, iscsi, gitRepo, ...: storage on
		// the node or the network, named by the spec), whole.
		outside := v.VolumeSource
		outside.EmptyDir, outside.ConfigMap, outside.DownwardAPI, outside.Projected = nil, nil, nil, nil
		outside.Secret, outside.PersistentVolumeClaim, outside.Ephemeral, outside.Image = nil, nil, nil, nil
		add(vat, outside, whyData)
	}
	return vs
}

// secretVolumes are the volumes of spec, by name, that hand their container a Secret, each with
// which one and how: a secret volume, a projection of one, or a plugin given one
// (volumeSecretRefs: what the plugin mounts is whatever the Secret unlocks).
func secretVolumes(spec *corev1.PodSpec) map[string]string {
	out := map[string]string{}
	for _, v := range spec.Volumes {
		var refs []string
		if v.Secret != nil {
			refs = append(refs, fmt.Sprintf("%q (volume %s)", v.Secret.SecretName, v.Name))
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.Secret != nil {
					refs = append(refs, fmt.Sprintf("%q (projected in volume %s)", s.Secret.Name, v.Name))
				}
			}
		}
		for _, r := range volumeSecretRefs(v) {
			refs = append(refs, fmt.Sprintf("%q (%s of volume %s)", r.name, r.field, v.Name))
		}
		if len(refs) > 0 {
			out[v.Name] = strings.Join(refs, ", ")
		}
	}
	return out
}

// containerSecret names the Secrets c gets, and how (its env, envFrom, the volumes it mounts),
// or "" when it gets none.
func containerSecret(c *corev1.Container, secretVolumes map[string]string) string {
	var refs []string
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			refs = append(refs, fmt.Sprintf("%q (env %s)", e.ValueFrom.SecretKeyRef.Name, e.Name))
		}
	}
	for i, e := range c.EnvFrom {
		if e.SecretRef != nil {
			refs = append(refs, fmt.Sprintf("%q (envFrom[%d])", e.SecretRef.Name, i))
		}
	}
	for _, m := range c.VolumeMounts {
		if r, ok := secretVolumes[m.Name]; ok {
			refs = append(refs, r)
		}
	}
	return strings.Join(slices.Compact(refs), ", ")
}

// runsWithSecret reports the caller placeholders in what runs in container c (at cat), which gets
// Secret secret: its image, command and args, the exec commands of its probes and lifecycle
// hooks, and the $(VAR) references in those to an environment variable whose value holds a caller
// placeholder (the kubelet puts the value in). A caller who chooses what runs there reads the
// Secret: a template with "image": "${context.img}" and an allowed Secret's envFrom hands that
// Secret to whoever spawns it.
func runsWithSecret(cat string, c *corev1.Container, secret string) []Violation {
	why := "this container gets Secret " + secret + ", so the caller would choose what runs with it"
	var vs []Violation
	fixed := func(found []Violation, fix string) {
		for i := range found {
			found[i].Fix = fix
		}
		vs = append(vs, found...)
	}
	fixed(placeholdersIn(cat+".image", c.Image, why), imageFix)
	// Environment variables whose value holds a caller placeholder (or refers to one that does:
	// the kubelet expands the earlier ones into a later value).
	tainted := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			continue
		}
		if names := callerPlaceholders(e.Value); names != nil {
			tainted[e.Name] = strings.Join(names, ", ")
			continue
		}
		for _, ref := range kubeletRefs(e.Value) {
			if from, ok := tainted[ref]; ok {
				tainted[e.Name] = from
				break
			}
		}
	}
	type command struct {
		field string
		cmd   []string
	}
	commands := []command{{"command", c.Command}, {"args", c.Args}}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
		if p.probe != nil && p.probe.Exec != nil {
			commands = append(commands, command{p.name + ".exec.command", p.probe.Exec.Command})
		}
	}
	if l := c.Lifecycle; l != nil {
		for _, h := range []struct {
			name    string
			handler *corev1.LifecycleHandler
		}{{"postStart", l.PostStart}, {"preStop", l.PreStop}} {
			if h.handler != nil && h.handler.Exec != nil {
				commands = append(commands, command{"lifecycle." + h.name + ".exec.command", h.handler.Exec.Command})
			}
		}
	}
	for _, cmd := range commands {
		field := cat + "." + cmd.field
		fixed(placeholdersIn(field, cmd.cmd, why), commandFix)
		if len(tainted) == 0 || strings.HasPrefix(cmd.field, "lifecycle.") {
			continue // the kubelet does not expand $(VAR) in lifecycle hooks
		}
		for i, arg := range cmd.cmd {
			for _, ref := range kubeletRefs(arg) {
				if from, ok := tainted[ref]; ok {
					vs = append(vs, Violation{
						Field:   fmt.Sprintf("%s[%d]", field, i),
						Problem: fmt.Sprintf("%s refers to $(%s), whose value holds %s, which the caller of a spawn would choose; the kubelet puts that value in here, and %s", workspace.Quote(arg), ref, from, why),
						Fix:     commandFix,
					})
					break
				}
			}
		}
	}
	return vs
}

// kubeletRefs are the names of the $(VAR) references in s as the kubelet reads them ("$$" is a
// literal "$").
func kubeletRefs(s string) []string {
	var names []string
	for i := 0; i+1 < len(s); i++ {
		if s[i] != '$' {
			continue
		}
		switch s[i+1] {
		case '$':
			i++
		case '(':
			j := strings.IndexByte(s[i+2:], ')')
			if j < 0 {
				return names
			}
			names = append(names, s[i+2:i+2+j])
			i += 2 + j
		}
	}
	return names
}

// claimSourcePlaceholders reports caller placeholders in what fills or binds a claim: its
// dataSource, dataSourceRef and volumeName (checkClaims' fields).
func claimSourcePlaceholders(at string, spec *corev1.PersistentVolumeClaimSpec) []Violation {
	var vs []Violation
	vs = append(vs, placeholdersIn(at+".dataSource", spec.DataSource, whyData)...)
	vs = append(vs, placeholdersIn(at+".dataSourceRef", spec.DataSourceRef, whyData)...)
	return append(vs, placeholdersIn(at+".volumeName", spec.VolumeName, whyData)...)
}

// checkInitPlaceholders reports caller placeholders in the annotations that decide what runs
// with nogoo9/init-secret (nogoo9/init-image) and where its requests go
// (nogoo9/init-s3-endpoint). nogoo9/init-from's location may hold any placeholder: it reaches the
// init container as data (an environment value the kubelet reads literally).
func checkInitPlaceholders(t *Template) []Violation {
	var vs []Violation
	for _, k := range []string{workspace.AnnInitImage, workspace.AnnInitS3Endpoint} {
		if v, ok := placeholderViolation("annotation "+k, t.Annotations[k], whyInit); ok {
			vs = append(vs, v)
		}
	}
	return vs
}
