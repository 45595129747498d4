package frontend

import (
	"strings"
	"testing"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestMaintenanceReasonIsBounded: a maintenance reason went to the pod's annotation as given. A
// 300 KB one made the API server refuse the write (422: annotations are at most 256 KiB), which
// came back as 500 "internal error; try again", a retry that never helps; a line break or a NUL
// was stored and reached every page and stream that shows the workspace. A reason is at most
// 1024 bytes of text without control characters, refused before anything is
// written with a message that says so; and a write the API server refuses as invalid is the
// caller's error (Invalid), not an internal one.
func TestMaintenanceReasonIsBounded(t *testing.T) {
	const maxReason = 1024
	api := newLiveAPI(t)
	api.create(t, pod("ws-a1", "alice", "a1", "2.0", t0, ready))
	svc := api.service(t, api.snapshot(t, "ws-a1"), nil)
	before := api.get(t, "ws-a1")
	for _, tc := range []struct{ name, reason, want string }{
		{"a 300 KB reason", strings.Repeat("m", 300_000), "is 300000 bytes long: use at most 1024"},
		{"a reason one byte too long", strings.Repeat("m", 1025), "is 1025 bytes long: use at most 1024"},
		{"a reason with a line break", "disk\nfull", "control character at byte 4"},
		{"a reason with a NUL byte", "disk\x00full", "control character at byte 4"},
		{"a reason that is not UTF-8", "disk \xff", "not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := svc.SetMaintenance(adminCtx, "a1", tc.reason)
			if CodeOf(err) != CodeInvalid || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "reason") || len(err.Error()) > 400 {
				t.Fatalf("SetMaintenance(%.40q): %.400v (%s), want a short %s saying %q", tc.reason, err, CodeOf(err), CodeInvalid, tc.want)
			}
		})
	}
	if p := api.get(t, "ws-a1"); p.ResourceVersion != before.ResourceVersion {
		t.Errorf("a refused reason changed the pod: %v", p.Annotations)
	}
	longest := strings.Repeat("é", maxReason/2)
	if w, err := svc.SetMaintenance(adminCtx, "a1", longest); err != nil || w.Maintenance != longest {
		t.Fatalf("a reason of exactly %d bytes: %v", maxReason, err)
	}

	t.Run("a write the API server refuses as invalid is Invalid, and says what happened", func(t *testing.T) {
		// Annotations of 256 KiB at most: this pod has room for less than the reason.
		filler := strings.Repeat("f", 262_144-600)
		api.create(t, pod("ws-b1", "alice", "b1", "2.0", t0, ready, annotated("example.com/filler", filler)))
		svc := api.service(t, api.snapshot(t, "ws-b1"), nil)
		_, err := svc.SetMaintenance(adminCtx, "b1", strings.Repeat("r", maxReason))
		if CodeOf(err) != CodeInvalid || !strings.Contains(err.Error(), "refused") || len(err.Error()) > 1000 {
			t.Fatalf("SetMaintenance on a pod without room: %.600v (%s), want a short %s saying the API server refused it", err, CodeOf(err), CodeInvalid)
		}
		if p := api.get(t, "ws-b1"); p.Annotations[workspace.AnnMaintenance] != "" {
			t.Errorf("the refused maintenance was written")
		}
	})
}
