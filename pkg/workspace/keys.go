package workspace

// Every label and annotation nogoo9 reads or writes. docs/labels-and-annotations.md documents them
// for kubectl users; keep the two in step.
const (
	// Prefix starts every key nogoo9 owns.
	Prefix = "nogoo9/"

	// LabelType marks a Pod as a workspace pod; its value is TypeWorkspace. The controller's cache
	// selects on it, so a Pod without it is invisible to nogoo9.
	LabelType     = Prefix + "type"
	TypeWorkspace = "workspace"

	// LabelWorkspaceID is the workspace's id, a DNS-1123 label unique in the namespace. All pods of
	// one workspace (two during an upgrade) share it.
	LabelWorkspaceID = Prefix + "workspace-id"

	// LabelUserSub is a label-safe form of the owner's subject (see UserLabel). Use it to select;
	// ownership is decided only by the raw subject in AnnOwner.
	LabelUserSub = Prefix + "user-sub"

	// LabelTemplate is the name of the template the workspace was spawned from.
	LabelTemplate = Prefix + "template"

	// LabelTemplateVersion is the template version the pod was built from, as a label so that
	// outdated pods can be selected; AnnTemplateVersion holds the exact (unsanitised) value.
	LabelTemplateVersion = Prefix + "template-version"

	// AnnTemplateNamespace is the namespace whose template the workspace follows, stamped at
	// spawn when the template was found in the workspace's own namespace rather than nogoo9's
	// (docs/templates.md, "Where a template is looked up"); upgrades keep it. Absent: nogoo9's
	// namespace, as for every workspace spawned before team templates existed. Only nogoo9
	// writes it (the bookkeeping admission policy).
	AnnTemplateNamespace = Prefix + "template-namespace"

	// AnnTemplateVersion is the exact template version the pod was built from.
	AnnTemplateVersion = Prefix + "template-version"

	// AnnOwner is the owner's raw subject (e.g. "auth0|5f1c..." or "jane@example.com").
	AnnOwner = Prefix + "owner"

	// AnnContext holds the caller-supplied context values of the spawn as a JSON object, so an
	// upgrade re-renders the template with the same values.
	AnnContext = Prefix + "context"

	// AnnWorkspaceName is the workspace's display name.
	AnnWorkspaceName = Prefix + "workspace-name"

	// AnnWorkspacePath is the proxy path prefix of the workspace (IDE, terminal), e.g. /ws/jane/demo/.
	AnnWorkspacePath = Prefix + "workspace-path"
	// AnnWorkspacePort is the container port AnnWorkspacePath is routed to.
	AnnWorkspacePort = Prefix + "workspace-port"
	// AnnPreviewPath is the proxy path prefix of the user's dev-server preview.
	AnnPreviewPath = Prefix + "preview-path"
	// AnnPreviewPort is the container port AnnPreviewPath is routed to.
	AnnPreviewPort = Prefix + "preview-port"
	// AnnStripPrefix ("true"/"false", default "true") says whether the proxy strips the route
	// prefix before forwarding. Copied from the template.
	AnnStripPrefix = Prefix + "strip-prefix"
	// AnnPublicPreview ("true") makes the preview path reachable without authentication. Explicit
	// opt-in on the template; never the default.
	AnnPublicPreview = Prefix + "public-preview"

	// AnnUpgradeRequested is the upgrade intent: "true" (kubectl annotate ... =true; also "yes",
	// "y", "1", "on", in any case) or an RFC 3339 time (the API writes the request time) requests
	// an upgrade to the template's current version. Any other value ("false", "", a typo) is not a
	// request: the controller removes it with a Warning Event (upgrade.ParseIntent). The
	// controller clears the intent when the upgrade ends.
	AnnUpgradeRequested = Prefix + "upgrade-requested"
	// AnnUpgradePod is the name the upgraded pod will get. Written with the intent by the API so it
	// can answer at once; filled in by the controller when a person wrote only the intent. Being
	// deterministic, it makes a repeated create fail with AlreadyExists instead of duplicating.
	AnnUpgradePod = Prefix + "upgrade-pod"
	// AnnUpgradeStartedAt (RFC 3339) is when the controller started acting on the intent, and for
	// a Recreate again when the new pod's scheduling gate comes off (the old pod's graceful stop
	// is no fault of the new version); the upgrade deadline counts from it.
	AnnUpgradeStartedAt = Prefix + "upgrade-started-at"
	// AnnUpgradeFrom, on an upgraded pod, names the pod it replaces. With AnnUpgradeFromUID and
	// AnnUpgradeFromVersion it is what recovery reads after a crash.
	AnnUpgradeFrom        = Prefix + "upgrade-from"
	AnnUpgradeFromUID     = Prefix + "upgrade-from-uid"
	AnnUpgradeFromVersion = Prefix + "upgrade-from-version"
	// AnnUpgradeStrategy is "SideBySide" or "Recreate", stamped on the upgraded pod, or "Rollback" on
	// the pod that restores a failed Recreate upgrade.
	AnnUpgradeStrategy = Prefix + "upgrade-strategy"
	// AnnRollbackSpec, on a recreate-upgraded pod, holds the previous pod spec (JSON) so the
	// workspace can be brought back on it if the upgrade fails after the old pod is gone.
	AnnRollbackSpec = Prefix + "rollback-spec"
	// AnnLastUpgradeError is "Upgrade failed at <RFC3339>: <reason>: <message>", on the pod that
	// stays after a failed upgrade.
	AnnLastUpgradeError = Prefix + "last-upgrade-error"

	// AnnMaintenance takes the workspace out of service (phase Unavailable) with its value as the
	// reason. Settable with kubectl or by admins through the API; removing it restores service.
	AnnMaintenance = Prefix + "maintenance"

	// LabelPodTemplate marks a ConfigMap as a workspace template ("true").
	LabelPodTemplate = Prefix + "pod-template"
	// AnnDescription is a template's human description.
	AnnDescription = Prefix + "description"

	// ConditionPrefix: a Pod condition whose type starts with it and is False makes the workspace
	// Unavailable (see Phase).
	ConditionPrefix = "Workspace"
)

// Template ConfigMap data keys.
const (
	// DataSpec holds the template's PodSpec as JSON.
	DataSpec = "spec"
	// DataVolumeClaims holds a JSON list of PersistentVolumeClaim templates.
	DataVolumeClaims = "volumeClaims"
)

// Template annotations read by the spawner's expansion helpers (see docs/templates.md). They sit
// on the template ConfigMap (or YAML file), never on pods.
const (
	// AnnRequiredContext lists, comma-separated, the context keys a spawn must provide.
	AnnRequiredContext = Prefix + "required-context"
	// AnnInitFrom pre-populates a workspace volume before the main containers start, from
	// "s3://bucket/prefix" or "configmap:<name>". It runs once per volume (a marker file records it).
	AnnInitFrom = Prefix + "init-from"
	// AnnInitVolume names the volume AnnInitFrom fills (default: the template's first volume claim).
	AnnInitVolume = Prefix + "init-volume"
	// AnnInitImage overrides the image of the init container.
	AnnInitImage = Prefix + "init-image"
	// AnnInitSecret names a Secret whose keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
	// AWS_SESSION_TOKEN, AWS_REGION, ...) become the S3 init container's environment.
	AnnInitSecret = Prefix + "init-secret"
	// AnnInitS3Endpoint sets AWS_ENDPOINT_URL for S3-compatible stores (MinIO, Ceph, ...).
	AnnInitS3Endpoint = Prefix + "init-s3-endpoint"
	// AnnPreStop is a shell script run as the lifecycle.preStop hook before a workspace pod stops.
	AnnPreStop = Prefix + "pre-stop"
	// AnnPreStopContainer names the container that gets the hook (default: the first one).
	AnnPreStopContainer = Prefix + "pre-stop-container"
	// AnnTerminationGrace (seconds) sets terminationGracePeriodSeconds when AnnPreStop is used.
	AnnTerminationGrace = Prefix + "termination-grace-period"

	// LabelQuotaLedger ("true") marks the per-owner quota ledger ConfigMaps of the spawner.
	LabelQuotaLedger = Prefix + "quota-ledger"
)

// PersonWritableKeys are the annotations a person (kubectl, another tool) may write on a workspace
// pod. Every other nogoo9/ label and annotation on pods and PVCs is nogoo9's bookkeeping: the
// ValidatingAdmissionPolicy in config/admission lets only nogoo9's service account write it
// (config/config_test.go checks the policy names exactly these keys).
var PersonWritableKeys = []string{AnnUpgradeRequested, AnnMaintenance, AnnStopRequested, AnnPinned, AnnUpdatePolicy, AnnUpdateWindow}

// PersonSettingKeys are the person-writable keys that are the workspace's settings rather than a
// request to act (PersonWritableKeys without the upgrade and stop intents). When nogoo9 replaces
// a pod by one it made from it (an upgrade, a stop, a start on the latest version), the new pod
// takes them over from the old one, set, changed or removed, before the old one is deleted
// (docs/upgrades.md, "What a person wrote survives the cutover").
var PersonSettingKeys = []string{AnnMaintenance, AnnPinned, AnnUpdatePolicy, AnnUpdateWindow}

// Keys added for the integrity of upgrade bookkeeping (docs/upgrades.md, "Trust").
const (
	// AnnUpgradeHMAC, on a Recreate-upgraded pod, authenticates its upgrade record (pod name,
	// namespace, upgrade-from, -uid, -version, strategy, and the SHA-256 of AnnRollbackSpec) with a
	// key only nogoo9 holds: "v1:<key id>:<spec sha256 hex>:<base64 HMAC-SHA256>". Without a
	// valid one the controller never deletes the old pod before the new one is Ready and never
	// creates a pod from AnnRollbackSpec.
	AnnUpgradeHMAC = Prefix + "upgrade-hmac"
)

// Keys added for bulk upgrade speed (docs/upgrades.md, "Recreate").
const (
	// GateVolumeRelease is the scheduling gate a Recreate-upgraded pod is created with: the
	// scheduler leaves it alone until the controller removes the gate, once the old pod (which
	// holds the single-writer volume) is gone. Tried earlier, the new pod is unschedulable and
	// waits out the scheduler's backoff after the volume is free.
	GateVolumeRelease = Prefix + "volume-release"
)

// Keys of stop, start and idle culling (docs/lifecycle.md).
const (
	// AnnStopRequested is the stop intent, person-writable: while any live pod of the workspace
	// carries it (any non-empty value; the API and the culler write the reason), the workspace
	// is stopped; removing it starts the workspace again. The controller copies it to the
	// stopped pod, so `kubectl annotate pod <pod> nogoo9/stop-requested-` starts it.
	AnnStopRequested = Prefix + "stop-requested"
	// GateStopped is the scheduling gate that holds a stopped workspace's pod: the pod keeps every
	// label and annotation of the workspace and its claims but is never scheduled, so it uses no
	// node. Start removes the gate (gates can be removed, never added).
	GateStopped = Prefix + "stopped"
	// AnnStoppedFromUID, on a stopped pod, is the UID of the running pod it replaces: after a
	// crash the controller finishes the stop by deleting that pod.
	AnnStoppedFromUID = Prefix + "stopped-from-uid"
	// AnnNodeLost, on a running pod, says that the Node it is bound to no longer exists (the
	// value is the sentence the phase reports): the workspace is Unavailable (reason NodeLost)
	// until the controller has replaced the pod (docs/reliability.md, "A node that disappears").
	// Bookkeeping: only nogoo9 writes it, and it acts on the Node's absence, never on this key.
	AnnNodeLost = Prefix + "node-lost"
	// AnnStoppedAt (RFC 3339) is when the workspace was stopped.
	AnnStoppedAt = Prefix + "stopped-at"
	// AnnStartedAt (RFC 3339, UTC) is when the controller last released the pod from the stop
	// gate (a start on the same pod). The idle culler counts a start as activity: a pod's
	// creation covers the pods a spawn, an upgrade or a start on the latest version make, this key
	// the one pod whose creation is the stop's. Bookkeeping: only nogoo9 writes it.
	AnnStartedAt = Prefix + "started-at"
	// AnnDeletedAt (RFC 3339, UTC), on a pod being deleted, is when the owner (or an admin)
	// deleted the workspace through the front end while that pod was already going (an eviction's
	// preStop, a pod nogoo9 was retiring): its delete is the owner's, whatever DisruptionTarget
	// it carries, and the controller copies no pod of the workspace (docs/reliability.md, "A pod
	// that is evicted"). It means nothing on a pod not being deleted. Bookkeeping: only nogoo9
	// writes it, so no one else can end an eviction's copy with it.
	AnnDeletedAt = Prefix + "deleted-at"
	// AnnWorkspaceCreatedAt (RFC 3339, UTC) is when the workspace was created: the creation of
	// its first pod, carried to every pod that replaces one of it (upgrades, rollbacks, stopped
	// and evicted copies, starts on the latest version; CarryCreatedAt). A pod's own creation
	// time is the replacement's, so without this key an upgraded workspace looked newer than one
	// spawned after it: the proxy gives a route prefix two workspaces claim to the older
	// (docs/proxy.md). Bookkeeping: only nogoo9 writes it.
	AnnWorkspaceCreatedAt = Prefix + "workspace-created-at"
	// AnnStartedFromUID, on a pod created by a start on the template's latest version, is the
	// UID of the stopped pod it replaces, which the controller deletes next.
	AnnStartedFromUID = Prefix + "started-from-uid"
	// AnnLastActivity (RFC 3339, UTC) is when a proxy replica last saw a person use the workspace
	// (HTTP requests through the proxy, open WebSockets); written at most once per
	// --activity-write-interval (a minute) per workspace. The idle culler reads it.
	AnnLastActivity = Prefix + "last-activity"
	// AnnIdleTimeout, on a template, is how long a workspace may be idle before it is stopped
	// (a Go duration, e.g. "2h"; "0" turns culling off for the template). Without it the
	// --idle-timeout flag applies (off by default).
	AnnIdleTimeout = Prefix + "idle-timeout"
	// AnnWebSocketMaxAge, on a template, is how long an open WebSocket counts as activity after it
	// opened (a Go duration); without it an open WebSocket counts as long as it stays open.
	AnnWebSocketMaxAge = Prefix + "websocket-max-age"
)
