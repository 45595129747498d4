package workspace

// Keys of the updates area (docs/upgrades.md, "Update policies", "Pin", "Template history").
const (
	// AnnUpdatePolicy (template annotation, and pod annotation that overrides it): manual (the
	// default), on-start, when-idle or window.
	AnnUpdatePolicy = Prefix + "update-policy"
	// AnnUpdateWindow (template or pod annotation) is the maintenance window of the window
	// policy, e.g. "Sat 02:00-04:00 UTC".
	AnnUpdateWindow = Prefix + "update-window"
	// AnnPinned ("true"), on a workspace pod, keeps it on its version: never upgraded
	// automatically, skipped by upgrade-all.
	AnnPinned = Prefix + "pinned"
	// AnnTargetVersion, next to AnnUpgradeRequested, names the template version the upgrade goes
	// to (an earlier one, kept in the template's history) instead of the latest. Written by the
	// API for an admin's rollback; the controller clears it with the intent.
	AnnTargetVersion = Prefix + "target-version"
	// AnnAutoUpgrade, next to AnnUpgradeRequested, says the intent was written by an update
	// policy (its value is the policy), not by a person.
	AnnAutoUpgrade = Prefix + "auto-upgrade"

	// LabelTemplateHistory marks a ConfigMap as a kept earlier version of the template it names.
	LabelTemplateHistory = Prefix + "template-history"
)
