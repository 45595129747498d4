package workspace

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// maxBaseName leaves room for the "-up-xxxxx" suffix of an upgraded pod within 63 characters.
	maxBaseName = validation.DNS1123LabelMaxLength - len("-up-") - upgradeSuffixLen
	// upgradeSuffixLen is the length of the random-looking part of an upgraded pod's name.
	upgradeSuffixLen = 5
	// hashLen characters of base32 hash keep names of distinct workspaces apart after truncation.
	hashLen = 6
)

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// shortHash is a deterministic [a-z2-7] string of n characters derived from parts.
func shortHash(n int, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		// Length-prefix each part so ("ab","c") and ("a","bc") hash differently.
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return lowerBase32.EncodeToString(h.Sum(nil))[:n]
}

// sanitizeDNS lower-cases s and keeps [a-z0-9], turning every other run of characters into one
// '-', trimmed of leading and trailing '-', and cut to max characters.
func sanitizeDNS(s string, max int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > max {
		out = strings.TrimRight(out[:max], "-")
	}
	return out
}

// PodName is the name of a workspace's first pod: "ws-<user>-<id>-<hash>", a DNS-1123 label of at
// most 54 characters, so that UpgradePodName still fits in 63. The user and id parts are
// sanitised and shortened as needed; the hash of the raw (owner, id) pair keeps two workspaces
// apart whatever truncation or sanitising did. The same inputs always give the same name.
func PodName(owner, id string) string {
	hash := shortHash(hashLen, owner, id)
	// "ws-" + user + "-" + id + "-" + hash
	room := maxBaseName - len("ws-") - 2 - hashLen
	idPart := sanitizeDNS(id, room*2/3)
	userPart := sanitizeDNS(owner, room-len(idPart))
	parts := []string{"ws"}
	for _, p := range []string{userPart, idPart, hash} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "-")
}

// UpgradePodName is the name of the pod that replaces a workspace pod in an upgrade:
// "<PodName(owner, id)>-up-<5 characters>", at most 63 characters. seed makes it deterministic
// (the controller derives it from the old pod's UID and the target version), so a create repeated
// after a crash or a stale cache read fails with AlreadyExists instead of making a second pod.
func UpgradePodName(owner, id, seed string) string {
	return PodName(owner, id) + "-up-" + shortHash(upgradeSuffixLen, seed)
}

// UserLabel is the label-safe form of an owner subject, for LabelUserSub. A subject that already is
// a valid label value is kept as it is, so `kubectl get pods -l nogoo9/user-sub=jane` works; any
// other (e.g. "auth0|5f1c..." or "jane@example.com") becomes a sanitised prefix plus a hash of the
// raw subject. The mapping is stable; ownership is still checked on the raw subject (AnnOwner).
func UserLabel(sub string) string { return labelSafe(sub) }

// VersionLabel is the label-safe form of a template version, for LabelTemplateVersion.
func VersionLabel(version string) string { return labelSafe(version) }

func labelSafe(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 && !strings.HasPrefix(s, "h-") {
		return s
	}
	hash := shortHash(10, s)
	var b strings.Builder
	for _, r := range s {
		switch {
		case (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '.' || r == '_' || r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	prefix := strings.Trim(b.String(), "._-")
	if max := validation.LabelValueMaxLength - len("h-") - 1 - len(hash); len(prefix) > max {
		prefix = strings.Trim(prefix[:max], "._-")
	}
	// The "h-" mark keeps hashed forms apart from raw values; a raw value that itself starts with
	// "h-" is hashed too, so the two sets never meet.
	if prefix == "" {
		return "h-" + hash
	}
	return "h-" + prefix + "." + hash
}

// IDFromName derives a workspace id (a DNS-1123 label of at most 40 characters) from a display
// name. It returns "" when the name has no usable character; callers then ask for an explicit id.
func IDFromName(name string) string { return sanitizeDNS(name, MaxIDLength) }

// MaxIDLength bounds workspace ids so they stay readable inside pod names and paths.
const MaxIDLength = 40

// ValidateID reports why id cannot be a workspace id, or nil.
func ValidateID(id string) error {
	if id == "" {
		return fmt.Errorf("workspace id is empty: give an id such as \"my-project\" or a name to derive it from")
	}
	if len(id) > MaxIDLength {
		// Only the start is quoted: an error never echoes an oversized input back whole.
		return fmt.Errorf("workspace id %q... is %d characters long: use at most %d", id[:MaxIDLength], len(id), MaxIDLength)
	}
	if errs := validation.IsDNS1123Label(id); len(errs) > 0 {
		return fmt.Errorf("workspace id %q is not valid: %s", id, strings.Join(errs, "; "))
	}
	return nil
}

// MaxNameLength bounds a workspace's display name (nogoo9/workspace-name), in bytes.
const MaxNameLength = 200

// ValidateName reports why name cannot be a workspace's display name, or nil: at most
// MaxNameLength bytes of valid UTF-8 without control characters (a CR or LF in a name would reach
// every page, list and stream that shows it, where such characters end lines).
func ValidateName(name string) error {
	if len(name) > MaxNameLength {
		return fmt.Errorf("workspace name %q... is %d bytes long: use at most %d", strings.ToValidUTF8(name[:40], ""), len(name), MaxNameLength)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("workspace name %q is not valid UTF-8: use plain text", strings.ToValidUTF8(name, "\uFFFD"))
	}
	if i := strings.IndexFunc(name, unicode.IsControl); i >= 0 {
		return fmt.Errorf("workspace name %q has a control character at byte %d: use printable text (no line breaks or tabs)", name, i)
	}
	return nil
}

// ClaimName is the name of the PersistentVolumeClaim a workspace gets for the template volume claim
// named claim: "<PodName(owner, id)>-<claim>", at most 63 characters. It does not depend on the pod
// name, so an upgraded pod mounts the same claim. When the claim part must be shortened, a hash of
// the full claim name keeps two claims of one workspace apart.
func ClaimName(owner, id, claim string) string {
	base := PodName(owner, id)
	room := validation.DNS1123LabelMaxLength - len(base) - 1
	part := sanitizeDNS(claim, room)
	if part == claim && part != "" {
		return base + "-" + part
	}
	// Sanitised or cut: add a short hash of the raw claim name.
	const h = 4
	part = sanitizeDNS(claim, room-h-1)
	if part == "" {
		return base + "-" + shortHash(h, claim)
	}
	return base + "-" + part + "-" + shortHash(h, claim)
}
