package updatepolicy

import (
	"fmt"
	"strings"
	"time"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// Policy says when nogoo9 upgrades a workspace to its template's latest version on its own.
type Policy string

const (
	// Manual (the default): only when someone asks (API, MCP, UI, kubectl).
	Manual Policy = "manual"
	// OnStart: a stopped workspace starts on the latest version (the lifecycle area's start asks
	// StartOnLatest); a running one is not touched.
	OnStart Policy = "on-start"
	// WhenIdle: as soon as the workspace has had no activity for the idle threshold.
	WhenIdle Policy = "when-idle"
	// Window: as soon as the time is inside the maintenance window (nogoo9/update-window).
	InWindow Policy = "window"
)

// Policies lists the valid values, for messages and docs.
var Policies = []Policy{Manual, OnStart, WhenIdle, InWindow}

// ParsePolicy reads a policy (a nogoo9/update-policy value, or the policy field of the API and
// MCP); "" is Manual. Its error names no annotation: Settings.Effective, which reads the
// annotations, says which one to fix.
func ParsePolicy(s string) (Policy, error) {
	v := Policy(strings.TrimSpace(s))
	if v == "" {
		return Manual, nil
	}
	for _, p := range Policies {
		if v == p {
			return p, nil
		}
	}
	return "", fmt.Errorf("policy %s is not one of manual, on-start, when-idle, window: give one of them", quote(s))
}

// quote is s quoted for an error message (workspace.Quote): an error never echoes an oversized
// value back whole.
func quote(s string) string { return workspace.Quote(s) }

// ParsePinned reads a nogoo9/pinned value: "true" pins, "false" or absent does not. Any other
// value is an error and counts as pinned: a person meant something, and not upgrading is the
// side that loses nothing.
func ParsePinned(s string, present bool) (bool, error) {
	if !present {
		return false, nil
	}
	switch strings.TrimSpace(s) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return true, fmt.Errorf("nogoo9/pinned=%q is neither \"true\" nor \"false\": the workspace is treated as pinned until it is one of them", s)
}

// Settings are the policy annotations of a workspace: the pod's (which override) and its
// template's. Has* say whether the annotation is present at all.
type Settings struct {
	PodPolicy, PodWindow           string
	HasPodPolicy, HasPodWindow     bool
	TemplatePolicy, TemplateWindow string
	Pinned                         string
	HasPinned                      bool
}

// Effective is the policy that applies, where it came from ("workspace", "template" or
// "default"), and its window when it is InWindow. An invalid value is an error: the workspace is
// then not upgraded automatically (nogoo9 never guesses a policy), and the error says which
// annotation to fix.
func (s Settings) Effective() (Policy, string, *Window, error) {
	raw, from := s.TemplatePolicy, "template"
	if s.HasPodPolicy {
		raw, from = s.PodPolicy, "workspace"
	} else if strings.TrimSpace(raw) == "" {
		from = "default"
	}
	p, err := ParsePolicy(raw)
	if err != nil {
		return "", from, nil, fmt.Errorf("%s: %s is %s, which is not one of manual, on-start, when-idle, window: set it to one of them, or remove it (manual)",
			from, workspace.AnnUpdatePolicy, quote(raw))
	}
	if p != InWindow {
		return p, from, nil, nil
	}
	wraw, wfrom := s.TemplateWindow, "template"
	if s.HasPodWindow {
		wraw, wfrom = s.PodWindow, "workspace"
	}
	if strings.TrimSpace(wraw) == "" {
		return "", from, nil, fmt.Errorf("%s: update policy window needs nogoo9/update-window, e.g. \"Sat 02:00-04:00 UTC\", on the workspace or its template", from)
	}
	w, err := ParseWindow(wraw)
	if err != nil {
		return "", from, nil, fmt.Errorf("%s: %w", wfrom, err)
	}
	return p, from, &w, nil
}

// Input is everything Decide needs to know of one workspace.
type Input struct {
	Settings Settings
	// Outdated: the workspace runs another version than its template's latest valid one.
	Outdated bool
	// Busy: an upgrade is already requested or in flight, or the workspace has more than one
	// live pod. Nothing is added on top.
	Busy bool
	// Maintenance: an operator took the workspace out of service; automatic upgrades wait.
	Maintenance bool
	// Stopped: the workspace is stopped or stopping (nogoo9/stop-requested). An intent would only
	// wait on it, held by the stop, and count against --max-pending-upgrades meanwhile.
	Stopped bool
	// Ready and ReadySince: the pod's Ready condition and when it last became True.
	Ready      bool
	ReadySince time.Time
	// LastActivity is the raw nogoo9/last-activity value; HasLastActivity whether it is present.
	LastActivity    string
	HasLastActivity bool
	// IdleAfter is the idle threshold of when-idle.
	IdleAfter time.Duration
	// LastFailedAt is when the workspace's last upgrade failed (nogoo9/last-upgrade-error), zero
	// when none did; no automatic upgrade is tried again before RetryAfter has passed since, so a
	// version that cannot start is not retried in a loop.
	LastFailedAt time.Time
	RetryAfter   time.Duration
}

// Decision is Decide's answer.
type Decision struct {
	Policy Policy
	// Upgrade: request the upgrade now.
	Upgrade bool
	// Reason says why, in one sentence (for Events and logs).
	Reason string
	// Err is set when an annotation is invalid; Reason then says what to fix.
	Err error
}

// Decide says whether the workspace described by in should be upgraded automatically at now.
//
// The rules, in order: nothing happens unless the workspace is outdated, not busy and not
// stopped; a pin
// (or an unreadable pin) stops everything; an invalid policy or window stops everything and says
// so; maintenance waits; manual and on-start never upgrade a running workspace; window upgrades
// while now is inside the window; when-idle upgrades once the workspace is idle (see Idle).
func Decide(in Input, now time.Time) Decision {
	p, from, w, err := in.Settings.Effective()
	d := Decision{Policy: p}
	if !in.Outdated {
		d.Reason = "the workspace runs its template's latest version"
		return d
	}
	if in.Busy {
		d.Reason = "an upgrade is already requested or in flight"
		return d
	}
	if in.Stopped {
		d.Reason = "the workspace is stopped; its policy applies again once it is started (on-start: at the start)"
		return d
	}
	if pinned, perr := ParsePinned(in.Settings.Pinned, in.Settings.HasPinned); pinned {
		d.Reason, d.Err = "the workspace is pinned to its version (nogoo9/pinned)", perr
		return d
	}
	if err != nil {
		d.Reason, d.Err = "no automatic upgrade: "+err.Error(), err
		return d
	}
	if in.Maintenance {
		d.Reason = "the workspace is in maintenance; automatic upgrades wait until it is lifted"
		return d
	}
	if !in.LastFailedAt.IsZero() && now.Sub(in.LastFailedAt) < in.RetryAfter {
		d.Reason = fmt.Sprintf("its last upgrade failed at %s; automatic upgrades try again after %s", in.LastFailedAt.UTC().Format(time.RFC3339), in.RetryAfter)
		return d
	}
	switch p {
	case Manual:
		d.Reason = fmt.Sprintf("the update policy is manual (%s)", from)
	case OnStart:
		d.Reason = fmt.Sprintf("the update policy is on-start (%s): the workspace upgrades when it is next started", from)
	case InWindow:
		if w.Contains(now) {
			d.Upgrade = true
			d.Reason = fmt.Sprintf("the update policy is window (%s) and %s is inside %q", from, now.UTC().Format(time.RFC3339), w.String())
		} else {
			d.Reason = fmt.Sprintf("the update policy is window (%s) and %s is outside %q", from, now.UTC().Format(time.RFC3339), w.String())
		}
	case WhenIdle:
		idle, why := Idle(in, now)
		d.Upgrade = idle
		d.Reason = fmt.Sprintf("the update policy is when-idle (%s) and %s", from, why)
	}
	return d
}

// Idle reports whether the workspace has been idle for in.IdleAfter at now, and why.
//
// With nogoo9/last-activity present, idle means its time, or the pod's becoming Ready when that
// came later (a start after a stop), is at least IdleAfter ago. A value that
// does not parse, or lies in the future, counts as activity now: only nogoo9's proxy writes it,
// so such a value is a bug or a clock problem, and waiting is the safe side. Without it, nogoo9
// has seen no activity since it started watching, which says nothing about before: the workspace
// counts as idle only once its pod has been Ready for at least IdleAfter (the proxy, which writes
// the annotation at most once a minute while a user is there, would have written it by then).
func Idle(in Input, now time.Time) (bool, string) {
	if !in.Ready {
		return false, "the workspace is not Ready"
	}
	if in.HasLastActivity {
		at, err := time.Parse(time.RFC3339, strings.TrimSpace(in.LastActivity))
		if err != nil {
			return false, fmt.Sprintf("its last activity %q is not an RFC 3339 time, so it counts as active", in.LastActivity)
		}
		if at.After(now) {
			return false, fmt.Sprintf("its last activity %s is in the future, so it counts as active", at.UTC().Format(time.RFC3339))
		}
		// A workspace started (or replaced) after its last activity was not idle while it was
		// not there: its stopped copy carries the activity of before the stop, and the first
		// request after a start may reach the proxy's next write after a policy tick.
		if in.ReadySince.After(at) {
			if since := now.Sub(in.ReadySince); since < in.IdleAfter {
				return false, fmt.Sprintf("it became Ready %s ago, after its last activity (idle after %s)", since.Round(time.Second), in.IdleAfter)
			}
			return true, fmt.Sprintf("it has been idle since it became Ready at %s", in.ReadySince.UTC().Format(time.RFC3339))
		}
		if since := now.Sub(at); since < in.IdleAfter {
			return false, fmt.Sprintf("it was active %s ago (idle after %s)", since.Round(time.Second), in.IdleAfter)
		}
		return true, fmt.Sprintf("it has been idle since %s", at.UTC().Format(time.RFC3339))
	}
	if in.ReadySince.IsZero() || now.Sub(in.ReadySince) < in.IdleAfter {
		return false, fmt.Sprintf("no activity was recorded, but it has not been Ready for %s yet", in.IdleAfter)
	}
	return true, fmt.Sprintf("no activity was recorded since it became Ready at %s", in.ReadySince.UTC().Format(time.RFC3339))
}

// StartOnLatest is the decision the lifecycle area's start calls: whether a stopped workspace
// with these settings should start on its template's latest version rather than the version it
// ran. Only on-start does; a pin (or an invalid value anywhere) keeps the version it ran.
func StartOnLatest(s Settings) (bool, error) {
	if pinned, err := ParsePinned(s.Pinned, s.HasPinned); pinned || err != nil {
		return false, err
	}
	p, _, _, err := s.Effective()
	if err != nil {
		return false, err
	}
	return p == OnStart, nil
}

// FailedAt reads the time of a nogoo9/last-upgrade-error value ("Upgrade failed at <RFC 3339>:
// ..."); zero when there is none or it does not parse.
func FailedAt(lastUpgradeError string) time.Time {
	rest, ok := strings.CutPrefix(lastUpgradeError, "Upgrade failed at ")
	if !ok {
		return time.Time{}
	}
	at, _, _ := strings.Cut(rest, ": ")
	t, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return time.Time{}
	}
	return t
}
