// Package upgrade is the pure planner of nogoo9's template upgrades.
//
// Plan looks at everything observed about one workspace (its pods, the claims they mount, the
// template's current version, the time) and returns the single next move: create the upgraded pod,
// delete the pod it replaced, record a failure, bring a recreated workspace back on its previous
// spec. It never talks to the API server; controllers/ applies the move and comes back when the
// world changes. Because the whole state lives on the pods (see the nogoo9/upgrade-* annotations),
// a crash after any single action is just another observed state, and Plan is tested on each.
//
// Files follow the phases: plan.go (observe, order, dispatch), sidebyside.go, recreate.go,
// deadline.go (deadline and failure reasons), intent.go (parsing what a person or the API wrote).
package upgrade
