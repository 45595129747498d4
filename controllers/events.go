package controllers

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// Event budget of the core/v1 recorder (see NewEventBroadcaster and docs/upgrades.md, "Events").
const (
	// EventBurstPerReason is how many Events of one reason one object gets at once.
	EventBurstPerReason = 5
	// EventRefillPerReason is how fast that budget refills, per second (one a minute).
	EventRefillPerReason = 1.0 / 60
)

// NewEventBroadcaster is the manager's Event broadcaster (main.go wires it as
// ctrl.Options.EventBroadcaster). It is client-go's core/v1 broadcaster, whose correlator drops
// and aggregates before anything reaches the API server, with one change to its spam filter: the
// budget is per object and per reason, EventBurstPerReason at once and one more a minute, instead
// of 25 per object and one more every five minutes. A reason that repeats on every pass (a Warning
// about forged annotations, a queued upgrade looked at again) then cannot use up the budget of the
// Events people need on the same pod (UpgradeStarted, UpgradeSucceeded, UpgradeFailed), and no
// reason writes more than a bounded number of Events per object. The aggregator stays as it is:
// the eleventh Event of one reason on one object within ten minutes becomes a count on one
// combined Event.
func NewEventBroadcaster() record.EventBroadcaster {
	return record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize:   EventBurstPerReason,
		QPS:         EventRefillPerReason,
		SpamKeyFunc: eventSpamKey,
	}))
}

// eventSpamKey is client-go's default spam key (source, involved object, type) plus the reason.
func eventSpamKey(e *corev1.Event) string {
	return strings.Join([]string{
		e.Source.Component, e.Source.Host,
		e.InvolvedObject.Kind, e.InvolvedObject.Namespace, e.InvolvedObject.Name, string(e.InvolvedObject.UID),
		e.InvolvedObject.APIVersion, e.Type, e.Reason,
	}, "\x00")
}
