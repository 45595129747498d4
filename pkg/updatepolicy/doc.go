// Package updatepolicy decides, as a pure function of what is observed and the time, whether a
// workspace should be upgraded automatically: the update policies manual, on-start, when-idle and
// window (docs/upgrades.md, "Update policies"), the pin, and maintenance windows such as
// "Sat 02:00-04:00 UTC". It never talks to the API server: controllers/policy_controller.go calls
// Decide for every outdated workspace and writes the same upgrade intent a person would.
package updatepolicy
