package upgrade

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Keyring holds the keys that authenticate nogoo9's upgrade records (workspace.AnnUpgradeHMAC).
// The first key signs; every key verifies, so a key can be rotated without failing the upgrades
// in flight: add the new key first, and remove the old one after --upgrade-timeout.
type Keyring struct {
	keys []ringKey
}

type ringKey struct {
	id  string
	key []byte
}

// MinKeyBytes is the shortest key accepted.
const MinKeyBytes = 32

// NewKeyring returns a keyring of keys (the first signs). Each key must have MinKeyBytes bytes.
func NewKeyring(keys ...[]byte) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("no integrity key given")
	}
	r := &Keyring{}
	for i, k := range keys {
		if len(k) < MinKeyBytes {
			return nil, fmt.Errorf("integrity key %d has %d bytes: use at least %d random bytes (e.g. head -c 32 /dev/urandom | base64)", i+1, len(k), MinKeyBytes)
		}
		sum := sha256.Sum256(k)
		r.keys = append(r.keys, ringKey{id: hex.EncodeToString(sum[:4]), key: bytes.Clone(k)})
	}
	return r, nil
}

// ParseKeyFile reads a key file: one base64 key per line (standard or URL alphabet, padded or
// not); blank lines and lines starting with # are skipped. The first key signs.
func ParseKeyFile(data []byte) (*Keyring, error) {
	var keys [][]byte
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := decodeKey(line)
		if err != nil {
			return nil, fmt.Errorf("line %d of the integrity key file is not base64: %w", n+1, err)
		}
		keys = append(keys, k)
	}
	return NewKeyring(keys...)
}

func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil {
			return k, nil
		}
	}
	_, err := base64.StdEncoding.DecodeString(s)
	return nil, err
}

// RandomKeyring is a keyring with one fresh random key: records it signs cannot be verified by
// another process (after a restart, or by another replica). Used when no key file is given.
func RandomKeyring() *Keyring {
	k := make([]byte, MinKeyBytes)
	if _, err := rand.Read(k); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	r, _ := NewKeyring(k)
	return r
}

// recordMessage is what the HMAC covers: where the record is (namespace and name of the pod that
// carries it, neither of which can change) and what it says.
func recordMessage(namespace, name string, ann map[string]string, specDigest string) []byte {
	var b bytes.Buffer
	b.WriteString("nogoo9-upgrade-record/v1")
	for _, f := range []string{namespace, name, ann[workspace.AnnUpgradeFrom], ann[workspace.AnnUpgradeFromUID],
		ann[workspace.AnnUpgradeFromVersion], ann[workspace.AnnUpgradeStrategy], specDigest} {
		fmt.Fprintf(&b, "\x00%d:%s", len(f), f)
	}
	return b.Bytes()
}

func mac(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return h.Sum(nil)
}

// SpecDigest is the hex SHA-256 of a rollback spec.
func SpecDigest(spec string) string {
	sum := sha256.Sum256([]byte(spec))
	return hex.EncodeToString(sum[:])
}

// Sign returns the workspace.AnnUpgradeHMAC value for the upgraded pod named name in namespace
// whose annotations ann carry the upgrade record, with rollback spec spec.
func (r *Keyring) Sign(namespace, name string, ann map[string]string, spec string) string {
	k := r.keys[0]
	d := SpecDigest(spec)
	return "v1:" + k.id + ":" + d + ":" + base64.RawStdEncoding.EncodeToString(mac(k.key, recordMessage(namespace, name, ann, d)))
}

// VerifyRecord checks p's workspace.AnnUpgradeHMAC against its upgrade record (without the spec,
// which a cached pod lacks) and returns the spec digest it vouches for. A nil keyring verifies
// nothing.
func (r *Keyring) VerifyRecord(p *corev1.Pod) (digest string, err error) {
	raw := p.Annotations[workspace.AnnUpgradeHMAC]
	if raw == "" {
		return "", fmt.Errorf("pod %s has no %s", p.Name, workspace.AnnUpgradeHMAC)
	}
	parts := strings.Split(raw, ":")
	if len(parts) != 4 || parts[0] != "v1" {
		return "", fmt.Errorf("pod %s: %s is not in the form v1:<key id>:<digest>:<mac>", p.Name, workspace.AnnUpgradeHMAC)
	}
	got, err := base64.RawStdEncoding.DecodeString(parts[3])
	if err != nil {
		return "", fmt.Errorf("pod %s: %s does not end in base64", p.Name, workspace.AnnUpgradeHMAC)
	}
	if r != nil {
		msg := recordMessage(p.Namespace, p.Name, p.Annotations, parts[2])
		for _, k := range r.keys {
			if k.id == parts[1] && hmac.Equal(got, mac(k.key, msg)) {
				return parts[2], nil
			}
		}
	}
	return "", fmt.Errorf("the upgrade record of pod %s is not signed by a key nogoo9 holds (written by someone else, or signed before a restart without --integrity-key-file)", p.Name)
}

// VerifySpec checks, on p read in full from the API server, the record and that the rollback
// spec is the one the record vouches for.
func (r *Keyring) VerifySpec(p *corev1.Pod) error {
	d, err := r.VerifyRecord(p)
	if err != nil {
		return err
	}
	if SpecDigest(p.Annotations[workspace.AnnRollbackSpec]) != d {
		return fmt.Errorf("the %s of pod %s is not the one nogoo9 wrote", workspace.AnnRollbackSpec, p.Name)
	}
	return nil
}
