package controllers

import (
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
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
// ctrl.Options.EventBroadcaster), writing Events to the API server of cfg. It is client-go's
// core/v1 broadcaster, whose correlator drops and aggregates before anything reaches the API
// server, with two changes:
//
//   - Its spam filter's budget is per object and per reason, EventBurstPerReason at once and one
//     more a minute, instead of 25 per object and one more every five minutes. A reason that
//     repeats on every pass (a Warning about forged annotations, a queued upgrade looked at
//     again) then cannot use up the budget of the Events people need on the same pod
//     (UpgradeStarted, UpgradeSucceeded, UpgradeFailed), and no reason writes more than a
//     bounded number of Events per object. The aggregator stays as it is: the eleventh Event of
//     one reason on one object within ten minutes becomes a count on one combined Event.
//   - It writes Events as protobuf. controller-runtime builds the sink it hands the broadcaster
//     from the manager's config, which speaks JSON (client-go's default), and kube-apiserver then
//     decodes JSON for every Event: two Events per upgrade in a bulk upgrade (bench/history.md,
//     "Eighth round"). The sink it hands over is replaced by one on cfg with the protobuf content
//     type; the Events, their aggregation and their patches are the same.
func NewEventBroadcaster(cfg *rest.Config) (record.EventBroadcaster, error) {
	sink, err := protobufEventSink(cfg)
	if err != nil {
		return nil, err
	}
	b := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize:   EventBurstPerReason,
		QPS:         EventRefillPerReason,
		SpamKeyFunc: eventSpamKey,
	}))
	return &sinkBroadcaster{EventBroadcaster: b, sink: sink}, nil
}

// protobufEventSink writes Events to the API server of cfg in protobuf.
func protobufEventSink(cfg *rest.Config) (record.EventSink, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("event client: %w", err)
	}
	return &corev1client.EventSinkImpl{Interface: cs.Events("")}, nil
}

// sinkBroadcaster records to its own sink whatever sink it is asked to record to, and starts
// recording once however often it is asked: controller-runtime asks once per recorder provider,
// and a manager has two on one broadcaster (its cluster's, for GetEventRecorderFor, and its own,
// for leader election). Each start is a watcher with its own correlator, so two of them POSTed
// every Event twice (the second answered 409 AlreadyExists, after kube-apiserver had decoded and
// admitted it) and sent every aggregated Event's PATCH twice.
type sinkBroadcaster struct {
	record.EventBroadcaster
	sink record.EventSink

	once      sync.Once
	recording watch.Interface
}

// StartRecordingToSink sends the broadcaster's Events to b's sink instead of the one given, and
// returns the same recording to every later call.
func (b *sinkBroadcaster) StartRecordingToSink(record.EventSink) watch.Interface {
	b.once.Do(func() { b.recording = b.EventBroadcaster.StartRecordingToSink(b.sink) })
	return b.recording
}

// eventSpamKey is client-go's default spam key (source, involved object, type) plus the reason.
func eventSpamKey(e *corev1.Event) string {
	return strings.Join([]string{
		e.Source.Component, e.Source.Host,
		e.InvolvedObject.Kind, e.InvolvedObject.Namespace, e.InvolvedObject.Name, string(e.InvolvedObject.UID),
		e.InvolvedObject.APIVersion, e.Type, e.Reason,
	}, "\x00")
}
