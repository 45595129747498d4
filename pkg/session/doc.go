// Package session keeps the web UI's server-side sessions: a random id (the cookie's value) maps
// to the authenticated caller, the bearer token it logged in with (so that it can be verified
// again: a revoked token ends its sessions) and a per-session CSRF token, in memory, with an
// expiry and a bound on entries. The browser never holds the bearer token; ending a session
// (logout) deletes it here.
package session
