package updatepolicy

import (
	"strings"
	"testing"
	"time"
)

// Sat 2026-12-05 03:00 UTC.
var sat3 = time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)

func TestParseWindow(t *testing.T) {
	for _, tc := range []struct {
		name, in, err string
		in_, out      []time.Time
	}{
		{name: "one day, inside and at the edges", in: "Sat 02:00-04:00 UTC",
			in_: []time.Time{sat3, sat3.Add(-time.Hour), sat3.Add(59*time.Minute + 59*time.Second)},
			out: []time.Time{sat3.Add(time.Hour), sat3.Add(-time.Hour - time.Second), sat3.Add(24 * time.Hour)}},
		{name: "range of days", in: "Mon-Fri 02:00-04:00 UTC",
			in_: []time.Time{sat3.Add(-24 * time.Hour), sat3.Add(-4 * 24 * time.Hour)}, out: []time.Time{sat3, sat3.Add(24 * time.Hour)}},
		{name: "range wrapping the week", in: "Fri-Sun 02:00-04:00 UTC",
			in_: []time.Time{sat3, sat3.Add(24 * time.Hour), sat3.Add(-24 * time.Hour)}, out: []time.Time{sat3.Add(48 * time.Hour)}},
		{name: "comma list and daily", in: "daily 02:00-04:00 UTC", in_: []time.Time{sat3, sat3.Add(72 * time.Hour)}},
		{name: "past midnight belongs to the day it starts", in: "Fri 23:00-03:30 UTC",
			in_: []time.Time{sat3, sat3.Add(-4 * time.Hour)}, out: []time.Time{sat3.Add(time.Hour), sat3.Add(20 * time.Hour)}},
		{name: "time zone", in: "Sat 04:00-05:00 Europe/Berlin", in_: []time.Time{sat3}, out: []time.Time{sat3.Add(time.Hour)}},
		{name: "until 24:00", in: "Sat,Sun 22:00-24:00 UTC", in_: []time.Time{sat3.Add(20 * time.Hour)}, out: []time.Time{sat3.Add(21 * time.Hour)}},
		{name: "missing zone", in: "Sat 02:00-04:00", err: "has 2 parts, want 3"},
		{name: "unknown day", in: "Caturday 02:00-04:00 UTC", err: `"Caturday" is not a day`},
		{name: "no dash", in: "Sat 02:00 UTC", err: "has no '-'"},
		{name: "bad hour", in: "Sat 25:00-04:00 UTC", err: `start "25:00" is not a time of day`},
		{name: "one-digit hour", in: "Sat 2:00-04:00 UTC", err: `start "2:00" is not HH:MM`},
		{name: "empty window", in: "Sat 02:00-02:00 UTC", err: "is empty"},
		{name: "unknown zone", in: "Sat 02:00-04:00 Mars/Olympus", err: `unknown time zone "Mars/Olympus"`},
		{name: "Local is refused", in: "Sat 02:00-04:00 Local", err: `"Local" depends on the machine`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := ParseWindow(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "Sat 02:00-04:00 UTC") && !strings.Contains(err.Error(), "UTC or") {
					t.Fatalf("ParseWindow(%q) error %v, want one containing %q and how to write it", tc.in, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseWindow(%q): %v", tc.in, err)
			}
			for _, at := range tc.in_ {
				if !w.Contains(at) {
					t.Errorf("%q does not contain %s", tc.in, at)
				}
			}
			for _, at := range tc.out {
				if w.Contains(at) {
					t.Errorf("%q contains %s", tc.in, at)
				}
			}
		})
	}
}

func TestDecide(t *testing.T) {
	now := sat3
	ready := func(ago time.Duration) Input {
		return Input{Outdated: true, Ready: true, ReadySince: now.Add(-ago), IdleAfter: 10 * time.Minute}
	}
	with := func(in Input, s Settings) Input { in.Settings = s; return in }
	idle := Settings{TemplatePolicy: "when-idle"}
	for _, tc := range []struct {
		name    string
		in      Input
		upgrade bool
		policy  Policy
		reason  string
		err     bool
	}{
		{name: "no annotation anywhere is manual and never upgrades", in: ready(time.Hour), policy: Manual, reason: "manual (default)"},
		{name: "up to date never upgrades", in: with(Input{Ready: true, ReadySince: now.Add(-time.Hour)}, idle), policy: WhenIdle, reason: "latest version"},
		{name: "busy (intent or upgrade in flight) adds nothing", in: with(Input{Outdated: true, Busy: true}, idle), policy: WhenIdle, reason: "already requested"},
		{name: "on-start never upgrades a running workspace", in: with(ready(time.Hour), Settings{TemplatePolicy: "on-start"}), policy: OnStart, reason: "next started"},
		{name: "window inside upgrades", in: with(ready(0), Settings{TemplatePolicy: "window", TemplateWindow: "Sat 02:00-04:00 UTC"}), upgrade: true, policy: InWindow, reason: "inside"},
		{name: "window outside waits", in: with(ready(0), Settings{TemplatePolicy: "window", TemplateWindow: "Sun 02:00-04:00 UTC"}), policy: InWindow, reason: "outside"},
		{name: "the workspace's window overrides the template's", in: with(ready(0), Settings{TemplatePolicy: "window", TemplateWindow: "Sat 02:00-04:00 UTC", PodWindow: "Sun 02:00-04:00 UTC", HasPodWindow: true}), policy: InWindow, reason: "outside"},
		{name: "window without a window is an error", in: with(ready(0), Settings{TemplatePolicy: "window"}), reason: "needs nogoo9/update-window", err: true},
		{name: "window with a bad window is an error naming the source", in: with(ready(0), Settings{PodPolicy: "window", HasPodPolicy: true, TemplateWindow: "Sat 2-4"}), reason: "template: update window", err: true},
		{name: "unknown policy is an error, not manual", in: with(ready(time.Hour), Settings{PodPolicy: "always", HasPodPolicy: true}), reason: `workspace: nogoo9/update-policy is "always", which is not one of manual, on-start, when-idle, window: set it to one of them`, err: true},
		{name: "the template's unknown policy names the annotation to fix", in: with(ready(time.Hour), Settings{TemplatePolicy: "weekly"}), reason: `template: nogoo9/update-policy is "weekly"`, err: true},
		{name: "the workspace's manual overrides the template's when-idle", in: with(ready(time.Hour), Settings{TemplatePolicy: "when-idle", PodPolicy: "manual", HasPodPolicy: true}), policy: Manual, reason: "manual (workspace)"},
		{name: "the workspace's when-idle overrides the template's manual", in: with(ready(time.Hour), Settings{TemplatePolicy: "manual", PodPolicy: "when-idle", HasPodPolicy: true}), upgrade: true, policy: WhenIdle},
		{name: "pinned never upgrades, even in the window", in: with(ready(0), Settings{TemplatePolicy: "window", TemplateWindow: "Sat 02:00-04:00 UTC", Pinned: "true", HasPinned: true}), policy: InWindow, reason: "pinned"},
		{name: "an unreadable pin counts as pinned and says so", in: with(ready(time.Hour), Settings{TemplatePolicy: "when-idle", Pinned: "yes please", HasPinned: true}), policy: WhenIdle, reason: "pinned", err: true},
		{name: "pinned=false is not pinned", in: with(ready(time.Hour), Settings{TemplatePolicy: "when-idle", Pinned: "false", HasPinned: true}), upgrade: true, policy: WhenIdle},
		{name: "a stopped workspace gets no intent, even inside its window", in: func() Input {
			i := with(ready(0), Settings{TemplatePolicy: "window", TemplateWindow: "Sat 02:00-04:00 UTC"})
			i.Ready, i.Stopped = false, true
			return i
		}(), policy: InWindow, reason: "stopped"},
		{name: "maintenance waits", in: func() Input { i := with(ready(time.Hour), idle); i.Maintenance = true; return i }(), policy: WhenIdle, reason: "maintenance"},
		{name: "a recent failed upgrade is not retried automatically", in: func() Input {
			i := with(ready(time.Hour), idle)
			i.LastFailedAt, i.RetryAfter = FailedAt("Upgrade failed at "+now.Add(-time.Minute).Format(time.RFC3339)+": ImagePullFailed: x"), time.Hour
			return i
		}(), policy: WhenIdle, reason: "try again after 1h0m0s"},
		{name: "an old failed upgrade is retried", in: func() Input {
			i := with(ready(time.Hour), idle)
			i.LastFailedAt, i.RetryAfter = now.Add(-2*time.Hour), time.Hour
			return i
		}(), upgrade: true, policy: WhenIdle},
		{name: "when-idle: no activity recorded and Ready long enough is idle", in: with(ready(10*time.Minute), idle), upgrade: true, policy: WhenIdle, reason: "no activity was recorded since"},
		{name: "when-idle: no activity recorded but Ready only briefly waits", in: with(ready(9*time.Minute), idle), policy: WhenIdle, reason: "not been Ready for 10m0s"},
		{name: "when-idle: not Ready waits", in: with(Input{Outdated: true, IdleAfter: time.Minute}, idle), policy: WhenIdle, reason: "not Ready"},
		{name: "when-idle: recent activity waits", in: func() Input {
			i := with(ready(time.Hour), idle)
			i.LastActivity, i.HasLastActivity = now.Add(-5*time.Minute).Format(time.RFC3339), true
			return i
		}(), policy: WhenIdle, reason: "active 5m0s ago"},
		{name: "when-idle: old activity is idle", in: func() Input {
			i := with(ready(time.Hour), idle)
			i.LastActivity, i.HasLastActivity = now.Add(-10*time.Minute).Format(time.RFC3339), true
			return i
		}(), upgrade: true, policy: WhenIdle, reason: "idle since"},
		// Before, the activity of before a stop (the stopped copy keeps it) made a workspace
		// started a minute ago idle, and a Recreate upgrade took it from its owner.
		{name: "when-idle: a start after old activity is not idle until it has been Ready long enough", in: func() Input {
			i := with(ready(time.Minute), idle)
			i.LastActivity, i.HasLastActivity = now.Add(-5*time.Hour).Format(time.RFC3339), true
			return i
		}(), policy: WhenIdle, reason: "became Ready 1m0s ago, after its last activity"},
		{name: "when-idle: a start after old activity is idle once Ready for the idle time", in: func() Input {
			i := with(ready(10*time.Minute), idle)
			i.LastActivity, i.HasLastActivity = now.Add(-5*time.Hour).Format(time.RFC3339), true
			return i
		}(), upgrade: true, policy: WhenIdle, reason: "idle since it became Ready"},
		{name: "when-idle: activity in the future counts as active", in: func() Input {
			i := with(ready(time.Hour), idle)
			i.LastActivity, i.HasLastActivity = now.Add(time.Hour).Format(time.RFC3339), true
			return i
		}(), policy: WhenIdle, reason: "in the future"},
		{name: "when-idle: unreadable activity counts as active", in: func() Input {
			i := with(ready(time.Hour), idle)
			i.LastActivity, i.HasLastActivity = "yesterday", true
			return i
		}(), policy: WhenIdle, reason: "not an RFC 3339 time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in, now)
			if d.Upgrade != tc.upgrade || d.Policy != tc.policy || (d.Err != nil) != tc.err || !strings.Contains(d.Reason, tc.reason) {
				t.Errorf("Decide = %+v, want upgrade %v, policy %q, error %v, reason containing %q", d, tc.upgrade, tc.policy, tc.err, tc.reason)
			}
		})
	}
}

func TestStartOnLatest(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Settings
		want bool
		err  bool
	}{
		{name: "default manual keeps the version", s: Settings{}},
		{name: "template on-start starts on the latest", s: Settings{TemplatePolicy: "on-start"}, want: true},
		{name: "workspace on-start overrides template manual", s: Settings{TemplatePolicy: "manual", PodPolicy: "on-start", HasPodPolicy: true}, want: true},
		{name: "workspace manual overrides template on-start", s: Settings{TemplatePolicy: "on-start", PodPolicy: "manual", HasPodPolicy: true}},
		{name: "pinned keeps the version", s: Settings{TemplatePolicy: "on-start", Pinned: "true", HasPinned: true}},
		{name: "invalid policy keeps the version and says why", s: Settings{TemplatePolicy: "sometimes"}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := StartOnLatest(tc.s)
			if got != tc.want || (err != nil) != tc.err {
				t.Errorf("StartOnLatest = %v, %v; want %v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

// A window is a span of real time that opens at its start on a day it names: a daylight-saving
// change neither skips it nor doubles it. Before, comparing the local clock left "Sun
// 02:00-03:00 Europe/Berlin" shut all of the spring day (its hour is skipped) and open two hours
// on the autumn one (its hour is repeated): such workspaces waited a week.
func TestWindowsAcrossDaylightSavingChanges(t *testing.T) {
	openFor := func(w Window, from time.Time, d time.Duration) (open time.Duration) {
		for at := from; at.Before(from.Add(d)); at = at.Add(time.Minute) {
			if w.Contains(at) {
				open += time.Minute
			}
		}
		return open
	}
	for _, tc := range []struct {
		name, window string
		from         time.Time // the local day's midnight, in UTC
		day          time.Duration
		want         time.Duration
	}{
		{"Berlin, spring forward: the skipped hour", "Sun 02:00-03:00 Europe/Berlin", time.Date(2025, 3, 29, 23, 0, 0, 0, time.UTC), 23 * time.Hour, time.Hour},
		{"Berlin, fall back: the repeated hour", "Sun 02:00-03:00 Europe/Berlin", time.Date(2025, 10, 25, 22, 0, 0, 0, time.UTC), 25 * time.Hour, time.Hour},
		{"New York, spring forward, inside the skipped hour", "Sun 02:30-02:45 America/New_York", time.Date(2025, 3, 9, 5, 0, 0, 0, time.UTC), 23 * time.Hour, 15 * time.Minute},
		{"Berlin, past midnight into the skipped hour", "Sat 23:00-03:00 Europe/Berlin", time.Date(2025, 3, 28, 23, 0, 0, 0, time.UTC), 47 * time.Hour, 4 * time.Hour},
		{"an ordinary Berlin day", "Sat 04:00-05:00 Europe/Berlin", time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC), 24 * time.Hour, time.Hour},
		{"daily, all day, on the autumn day", "daily 00:00-24:00 Europe/Berlin", time.Date(2025, 10, 25, 22, 0, 0, 0, time.UTC), 25 * time.Hour, 25 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := ParseWindow(tc.window)
			if err != nil {
				t.Fatal(err)
			}
			if got := openFor(w, tc.from, tc.day); got != tc.want {
				t.Errorf("%q is open %v of that day, want %v", tc.window, got, tc.want)
			}
		})
	}
}

// ParsePolicy reads the API's and MCP's policy field as well as the annotation: its error says
// what to give and names no annotation (a caller of PUT .../update-policy writes none).
func TestParsePolicyErrorNamesNoAnnotation(t *testing.T) {
	for _, in := range []string{"weekly", "Manual", strings.Repeat("w", 500_000)} {
		_, err := ParsePolicy(in)
		if err == nil {
			t.Fatalf("ParsePolicy(%.40q) took it", in)
		}
		msg := err.Error()
		if strings.Contains(msg, "nogoo9/") || !strings.Contains(msg, "is not one of manual, on-start, when-idle, window: give one of them") || len(msg) > 300 {
			t.Errorf("ParsePolicy(%.40q) = %q, want a short error that says what to give and names no annotation", in, msg)
		}
	}
	if p, err := ParsePolicy(" when-idle "); err != nil || p != WhenIdle {
		t.Errorf("ParsePolicy(\" when-idle \") = %q, %v", p, err)
	}
}
