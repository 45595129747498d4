package workspace

// PhaseName is the one word that says what state a workspace is in. See docs/phases.md.
type PhaseName string

const (
	PhaseScheduling   PhaseName = "Scheduling"
	PhaseInitializing PhaseName = "Initializing"
	PhaseReady        PhaseName = "Ready"
	PhaseUpgrading    PhaseName = "Upgrading"
	PhaseUnavailable  PhaseName = "Unavailable"
	PhaseFailed       PhaseName = "Failed"
	PhaseTerminating  PhaseName = "Terminating"
	// PhaseStopped: the workspace is stopped (or stopping): its pod is held by the scheduling
	// gate nogoo9/stopped and uses no node; start brings it back (docs/lifecycle.md).
	PhaseStopped PhaseName = "Stopped"
)

// Status is a workspace's phase with a CamelCase reason and a human message.
type Status struct {
	Phase   PhaseName `json:"phase"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
}

// Served reports whether the proxy forwards traffic to a workspace in this phase.
func (p PhaseName) Served() bool { return p == PhaseReady || p == PhaseUpgrading }
