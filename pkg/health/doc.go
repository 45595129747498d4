// Package health holds nogoo9's readiness checks: whether the process can do its work now, as
// /readyz on the health port reports it (controller-runtime's healthz.Checker).
package health
