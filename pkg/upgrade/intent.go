package upgrade

import (
	"strings"

	"github.com/nogoo9/no-crd/pkg/workspace"
	"time"
)

// Intent is a parsed nogoo9/upgrade-requested value.
type Intent struct {
	// Valid is true for a request the controller acts on.
	Valid bool
	// At is the request time when the value is an RFC 3339 time (the API writes one).
	At time.Time
	// Problem says, for an invalid value, why it was not taken as a request.
	Problem string
}

// ParseIntent reads a nogoo9/upgrade-requested value. "true" (what `kubectl annotate ...=true`
// writes) and an RFC 3339 time (what the API writes) are requests; so are the obvious spellings
// of yes ("True", "yes", "1", "on"), normalised without a write. "false", "no", "0", "off" and
// anything else are not: the controller removes them with a Warning Event rather than guess.
func ParseIntent(v string) Intent {
	s := strings.TrimSpace(v)
	switch strings.ToLower(s) {
	case "true", "yes", "y", "1", "on":
		return Intent{Valid: true}
	case "":
		return Intent{Problem: "the value is empty; use nogoo9/upgrade-requested=true to request an upgrade"}
	case "false", "no", "n", "0", "off":
		return Intent{Problem: "the value says no; remove the annotation instead, or set it to \"true\" to request an upgrade"}
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return Intent{Valid: true, At: t}
	}
	return Intent{Problem: "it is neither \"true\" nor an RFC 3339 time; set nogoo9/upgrade-requested=true to request an upgrade"}
}

// intentCompanions are the keys written only next to an intent, in the same patch: the recorded
// pod name (the API, the update policy), the target version of a rollback (the API) and the mark of
// an automatic request (the update policy).
var intentCompanions = []string{workspace.AnnUpgradePod, workspace.AnnTargetVersion, workspace.AnnAutoUpgrade}

// IntentKeys are the annotations of an upgrade request, removed together when it ends or is
// refused: the intent, the recorded pod name and start, the target version of a rollback to an
// earlier version, and the mark of an automatic (policy) request.
func IntentKeys() []string {
	return []string{workspace.AnnUpgradeRequested, workspace.AnnUpgradePod, workspace.AnnUpgradeStartedAt,
		workspace.AnnTargetVersion, workspace.AnnAutoUpgrade}
}
