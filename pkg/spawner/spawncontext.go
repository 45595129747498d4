package spawner

import (
	"fmt"
	"maps"
	"slices"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Bounds of a spawn's context. The context is stored whole on the pod (nogoo9/context, read back
// by every upgrade) and so kept in every replica's pod cache; the API server alone would take up
// to 256 KiB of annotations per pod.
const (
	// MaxContextKeys is the most keys a spawn's context may have.
	MaxContextKeys = 64
	// MaxContextBytes is the most bytes its keys and values may hold together.
	MaxContextBytes = 16 << 10
)

// ValidateContext refuses a spawn's context that is too large (more than MaxContextKeys keys or
// MaxContextBytes bytes) or has a key nogoo9/required-context could not name (letters, digits,
// '_', '-' and '.'; a key no ${context.KEY} of a template can ask for either). Spawn calls it;
// a front end may call it first to point at the field. The pods' stored contexts are not held to
// it (an upgrade renders what was accepted when the workspace was created).
func ValidateContext(ctx map[string]string) error {
	if len(ctx) > MaxContextKeys {
		return fmt.Errorf("the spawn's context has %d keys: pass at most %d", len(ctx), MaxContextKeys)
	}
	size := 0
	for k, v := range ctx {
		size += len(k) + len(v)
	}
	if size > MaxContextBytes {
		return fmt.Errorf("the spawn's context is %d bytes (keys and values together): pass at most %d", size, MaxContextBytes)
	}
	for _, k := range slices.Sorted(maps.Keys(ctx)) {
		if !validContextKey(k) {
			return fmt.Errorf("context key %s is not valid: use letters, digits, '_', '-' and '.', as a template's nogoo9/required-context and ${context.KEY} name them", workspace.Quote(k))
		}
	}
	return nil
}

// validContextKey: the characters templates' Expansion takes in nogoo9/required-context
// (TestSpawnErrorsAndContextAreBounded holds the two together).
func validContextKey(k string) bool {
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return k != ""
}
