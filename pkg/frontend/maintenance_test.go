
// An upgrade started with kubectl whose Recreate has already removed the old pod is still
// "upgrading" (with the new pod's name), never "upToDate".
func TestUpgradeAnswersUpgradingWhileARecreateIsInFlight(t *testing.T) {
	alice := auth.WithCaller(context.Background(), &auth.Caller{Subject: "alice"})
	up := pod("ws-a1-up", "alice", "a1", "2.0", t0, annotated(
		workspace.AnnUpgradeFrom, "ws-a1", workspace.AnnUpgradeFromUID, "uid-ws-a1", workspace.AnnUpgradeFromVersion, "1.0",
		workspace.AnnUpgradeStrategy, workspace.StrategyRecreate, workspace.AnnUpgradeStartedAt, t0.Format("2006-01-02T15:04:05Z07:00")))
	for path, svc := range services(t, up) {
		t.Run(path, func(t *testing.T) {
			r, err := svc.Upgrade(alice, "a1")
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != "upgrading" || r.PodName != "ws-a1-up" || r.From != "1.0" || r.To != "2.0" {
				t.Errorf("Upgrade() = %+v, want upgrading to pod ws-a1-up from 1.0 to 2.0", r)
			}
		})
	}
}
